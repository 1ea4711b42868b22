//! # allot ledger
//!
//! The one durable truth of allot, in SQLite: every budget version ever
//! synced (append-only), every job run's occupancy interval, each job's
//! contract, each leaf's demand over time, and the latest usage snapshot
//! the plugins ranked by.
//!
//! - **Writers** (the `allot` CLI for budgets, the priority plugin for runs,
//!   contracts and snapshots) open with [`Ledger::open`]; it applies schema
//!   migrations and turns on WAL, so readers never block writers.
//! - **Readers** (the preempt and job_submit plugins, `allot history`) open
//!   with [`Ledger::open_read_only`].
//! - Every multi-row read happens inside one read transaction and every write
//!   inside one `BEGIN IMMEDIATE` transaction, so a reader sees a whole budget
//!   version or none of it: never a torn read.
//!
//! Tests use [`Ledger::in_memory`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use rusqlite_migration::{Migrations, M};

mod budgets;
pub mod health;
mod runs;
mod snapshot;

pub use budgets::{BudgetVersion, Replaced, SyncOutcome};
pub use runs::{ContractRow, DemandRow, EventRow, JobEnd, Period, RunRow, RunUpdate};
pub use snapshot::{LeafUsage, UsageSnapshot};

/// What can go wrong with the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("ledger {path}: cannot migrate the schema: {source}")]
    Migration {
        path: String,
        #[source]
        source: rusqlite_migration::Error,
    },
    #[error("ledger {path}: schema version {found} but this allot expects {expected}; run `allot sync` (as the ledger's owner) to migrate it")]
    SchemaMismatch { path: String, found: usize, expected: usize },
    #[error("ledger {path} does not exist; sync a budget first (`allot sync budgets.toml`)")]
    Missing { path: String },
    #[error("ledger {path}: this machine's SQLite is {found}, allot needs {MIN_SQLITE} or later (its tables are STRICT); upgrade libsqlite3-0")]
    SqliteTooOld { path: String, found: String },
    /// A budget sync refused by its permission check; nothing was written.
    #[error("{0}")]
    Refused(String),
}

pub type Result<T> = std::result::Result<T, LedgerError>;

/// The oldest SQLite the ledger's schema works with: STRICT tables came in
/// 3.37.0 (Debian 12 has 3.40.1, Debian 13 3.46.1).
pub const MIN_SQLITE: &str = "3.37.0";
const MIN_SQLITE_NUMBER: i32 = 3_037_000;

/// Schema migrations, oldest first. Never edit a released one: append.
const MIGRATIONS: &[&str] = &[
    // 1: budgets, runs, contracts, usage snapshot, events.
    r#"
    CREATE TABLE budget_versions (
        version    INTEGER PRIMARY KEY,  -- 1, 2, 3, ...: never reused
        synced_at  INTEGER NOT NULL,     -- Unix seconds
        author     TEXT    NOT NULL,     -- Unix user who synced
        source     TEXT    NOT NULL,     -- the file given to sync
        toml       TEXT    NOT NULL,     -- the exact text synced
        changes    TEXT    NOT NULL      -- one change per line, from the previous version
    ) STRICT;
    CREATE TABLE budget_nodes (
        version         INTEGER NOT NULL REFERENCES budget_versions(version),
        path            TEXT    NOT NULL, -- '' is the root
        share           REAL    NOT NULL,
        effective_share REAL    NOT NULL,
        is_leaf         INTEGER NOT NULL,
        owners          TEXT    NOT NULL, -- comma-separated
        accounts        TEXT    NOT NULL,
        members         TEXT    NOT NULL,
        PRIMARY KEY (version, path)
    ) STRICT, WITHOUT ROWID;
    -- History is append-only: who changed what, when, stays true.
    CREATE TRIGGER budget_versions_no_update BEFORE UPDATE ON budget_versions
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_versions_no_delete BEFORE DELETE ON budget_versions
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_nodes_no_update BEFORE UPDATE ON budget_nodes
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_nodes_no_delete BEFORE DELETE ON budget_nodes
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;

    -- One row per run of a job: occupancy intervals.
    CREATE TABLE runs (
        job_id     INTEGER NOT NULL,
        run_start  INTEGER NOT NULL,
        run_end    INTEGER,              -- NULL while the run goes on
        leaf       TEXT,                 -- budget path charged; NULL: outside the tree
        account    TEXT,
        user       TEXT,
        gpus       INTEGER NOT NULL,
        allocated  INTEGER NOT NULL,     -- 0: min_runtime=0, never charged
        end_reason TEXT,                 -- completed, preempted, requeued, cancelled, lost, ...
        PRIMARY KEY (job_id, run_start)
    ) STRICT;
    CREATE INDEX runs_open ON runs(run_end) WHERE run_end IS NULL;
    CREATE INDEX runs_by_end ON runs(run_end);

    -- Each job's contract as accepted at submission.
    CREATE TABLE contracts (
        job_id      INTEGER PRIMARY KEY,
        user        TEXT    NOT NULL,
        account     TEXT,
        leaf        TEXT,
        min_runtime INTEGER NOT NULL,
        priority    TEXT    NOT NULL,
        resumable   INTEGER NOT NULL,
        submit_time INTEGER NOT NULL,
        comment     TEXT    NOT NULL     -- the canonical comment stored on the job
    ) STRICT;

    -- The latest usage the order was computed from (replaced each period).
    CREATE TABLE usage_snapshot (
        leaf            TEXT    PRIMARY KEY,
        charged         INTEGER NOT NULL,  -- GPU-seconds in the window
        unallocated     INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE usage_snapshot_meta (
        id              INTEGER PRIMARY KEY CHECK (id = 1),
        computed_at     INTEGER NOT NULL,
        budget_version  INTEGER NOT NULL,
        capacity_gpus   INTEGER NOT NULL
    ) STRICT;

    -- Things worth explaining later: preemptions, requeues, drains.
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        job_id  INTEGER NOT NULL,
        kind    TEXT    NOT NULL,
        detail  TEXT    NOT NULL
    ) STRICT;
    CREATE INDEX events_by_job ON events(job_id);
    "#,
    // 2: an identity per ledger file, so a plugin can tell a ledger that
    // replaced the one it wrote to (deleted and re-created, recovered,
    // restored from a backup) from the same one reopened.
    r#"
    CREATE TABLE ledger_identity (
        id TEXT NOT NULL
    ) STRICT;
    INSERT INTO ledger_identity (id) VALUES (lower(hex(randomblob(16))));
    "#,
    // 3: what `allot report` needs beside the runs: each leaf's demand over
    // time (what it is owed is computed from it), and each job's GPUs and
    // the time it left the queue for good.
    r#"
    ALTER TABLE contracts ADD COLUMN gpus INTEGER;      -- GPUs asked for (at most); NULL: recorded before schema 3
    ALTER TABLE contracts ADD COLUMN end_time INTEGER;  -- completed, failed or cancelled; NULL while queued or running
    -- One row each time a leaf's demand changes: it holds from `at` until
    -- the leaf's next row. GPUs of jobs pending (not held) and running.
    CREATE TABLE demand (
        leaf                TEXT    NOT NULL,
        at                  INTEGER NOT NULL,
        pending_allocated   INTEGER NOT NULL,
        pending_unallocated INTEGER NOT NULL,
        running_allocated   INTEGER NOT NULL,
        running_unallocated INTEGER NOT NULL,
        PRIMARY KEY (leaf, at)
    ) STRICT, WITHOUT ROWID;
    -- What `allot report` and `allot serve` read by time, not by job.
    CREATE INDEX contracts_by_submit ON contracts(submit_time);
    CREATE INDEX contracts_waiting ON contracts(submit_time) WHERE end_time IS NULL;
    CREATE INDEX events_by_kind ON events(kind, at);
    "#,
];

fn migrations() -> Migrations<'static> {
    Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect())
}

/// A connection to the ledger.
pub struct Ledger {
    conn: Connection,
    path: String,
}

/// How long a writer waits for another writer before giving up. Writes are
/// short (milliseconds), so this only bites when something is stuck.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl Ledger {
    /// Opens (creating if needed) the ledger at `path` for reading and
    /// writing, migrating its schema to this version's.
    pub fn open(path: impl AsRef<Path>) -> Result<Ledger> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let conn = Connection::open(path).map_err(|source| LedgerError::Sqlite { path: name.clone(), source })?;
        Self::setup(conn, name, true)
    }

    /// Opens an existing ledger for reading only. Refuses a ledger whose
    /// schema is not this version's, rather than misread it.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Ledger> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if !path.exists() {
            return Err(LedgerError::Missing { path: name });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|source| LedgerError::Sqlite { path: name.clone(), source })?;
        Self::setup(conn, name, false)
    }

    /// A private in-memory ledger, for tests.
    pub fn in_memory() -> Result<Ledger> {
        let conn = Connection::open_in_memory().map_err(|source| LedgerError::Sqlite { path: ":memory:".into(), source })?;
        Self::setup(conn, ":memory:".into(), true)
    }

    fn setup(mut conn: Connection, path: String, writable: bool) -> Result<Ledger> {
        // The SQLite is the system's (see the workspace Cargo.toml), so it may be old.
        if rusqlite::version_number() < MIN_SQLITE_NUMBER {
            return Err(LedgerError::SqliteTooOld { path, found: rusqlite::version().to_owned() });
        }
        let sql = |source| LedgerError::Sqlite { path: path.clone(), source };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        if writable {
            // WAL: readers (the plugins) never wait for a writer, nor it for them.
            conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
            // NORMAL is durable across application crashes in WAL mode; only
            // a power loss may drop the last transactions.
            conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
            conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
            migrations().to_latest(&mut conn).map_err(|source| LedgerError::Migration { path: path.clone(), source })?;
        } else {
            let found: usize = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(sql)?;
            if found != MIGRATIONS.len() {
                return Err(LedgerError::SchemaMismatch { path, found, expected: MIGRATIONS.len() });
            }
        }
        Ok(Ledger { conn, path })
    }

    /// Leaves the write-ahead log to others when this connection closes,
    /// instead of checkpointing it into the database file. For a long-lived
    /// writer (the priority plugin) that drops its connection when it finds
    /// the file overwritten in place: a checkpoint on close would write
    /// ledger pages into whatever now occupies the file.
    pub fn no_checkpoint_on_close(&self) -> Result<()> {
        self.conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(self.err())?;
        Ok(())
    }

    /// Where this ledger lives, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
        move |source| LedgerError::Sqlite { path: self.path.clone(), source }
    }

    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`: takes the write
    /// lock up front, so it cannot fail half-way on a lock upgrade).
    fn write<T>(&mut self, f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>) -> Result<T> {
        let path = self.path.clone();
        let err = |source| LedgerError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
        let out = f(&tx).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(out)
    }

    /// Runs `f` in one read transaction: everything it reads is one snapshot.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let err = self.err();
        self.conn.execute_batch("BEGIN DEFERRED").map_err(&err)?;
        let out = f(&self.conn);
        // A read transaction has nothing to commit; end it either way.
        let end = self.conn.execute_batch("COMMIT");
        let out = out.map_err(&err)?;
        end.map_err(&err)?;
        Ok(out)
    }

    /// Checks the database file's integrity (`PRAGMA quick_check`).
    pub fn check(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let mut stmt = c.prepare("PRAGMA quick_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        })
        .map(|v| v.into_iter().filter(|s| s != "ok").collect())
    }
}

/// The default ledger location when neither `--ledger` nor `ALLOT_LEDGER`
/// says otherwise.
pub const DEFAULT_LEDGER_PATH: &str = "/var/lib/allot/ledger.db";

/// `--ledger`, else `$ALLOT_LEDGER`, else [`DEFAULT_LEDGER_PATH`].
pub fn resolve_path(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("ALLOT_LEDGER") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_LEDGER_PATH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid_and_idempotent() {
        migrations().validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        drop(Ledger::open(&path).unwrap());
        let again = Ledger::open(&path).unwrap();
        assert!(again.check().unwrap().is_empty());
        let mode: String = again.conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let ro = Ledger::open_read_only(&path).unwrap();
        assert!(ro.current_budget().unwrap().is_none());
    }

    #[test]
    fn read_only_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = Ledger::open_read_only(dir.path().join("nope.db")).err().unwrap();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
