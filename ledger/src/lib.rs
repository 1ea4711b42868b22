//! allot ledger (SQLite).
