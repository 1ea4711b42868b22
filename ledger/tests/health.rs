//! Telling a healthy ledger from a missing, foreign, damaged or locked one
//! (`allot_ledger::health`), on real files.

use std::path::{Path, PathBuf};

use allot::budget::BudgetTree;
use allot_ledger::health::{self, Header, Problem};
use allot_ledger::Ledger;

const BUDGET: &str = "[budget]\nowners = [\"boss\"]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 2\naccounts = [\"b\"]\n";

/// A ledger holding one budget version, and (with `filler`) a table of
/// 4 KB blobs after it, so that damage to the end of the file spares the budget.
fn ledger_with_budget(dir: &Path, filler: bool) -> PathBuf {
    let path = dir.join("ledger.db");
    let mut l = Ledger::open(&path).unwrap();
    l.sync_budget(BUDGET, &BudgetTree::parse(BUDGET).unwrap(), "boss", "/etc/allot/budgets.toml", 1_000).unwrap();
    drop(l);
    if filler {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE filler (x BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) INSERT INTO filler SELECT zeroblob(4000) FROM n;")
            .unwrap();
        drop(c);
    }
    // The last connection closed: everything is checkpointed into the file.
    assert!(!Path::new(&format!("{}-wal", path.display())).exists() || std::fs::metadata(format!("{}-wal", path.display())).unwrap().len() == 0);
    path
}

/// Deterministic garbage.
fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_good_ledger_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_with_budget(dir.path(), false);
    assert_eq!(health::header(&path).unwrap(), Header::Sqlite);
    assert!(health::looks_like_sqlite(&path).unwrap());
    assert_eq!(health::preflight(&path), Ok(()));
    assert_eq!(health::diagnose(&path).unwrap().budget_version, Some(1));
    // A new, empty ledger is healthy too.
    let fresh = dir.path().join("fresh.db");
    drop(Ledger::open(&fresh).unwrap());
    assert_eq!(health::diagnose(&fresh).unwrap().budget_version, None);
}

#[test]
fn a_missing_ledger_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.db");
    assert_eq!(health::preflight(&path), Ok(()), "sync creates a missing ledger");
    assert_eq!(health::diagnose(&path), Err(Problem::Missing));
    let e = Ledger::open_read_only(&path).err().unwrap();
    assert_eq!(health::classify(&e), Some(Problem::Missing));
}

#[test]
fn garbage_and_text_are_not_databases_and_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [("random.db", garbage(100_000)), ("text.db", b"version = 1\nthis is not a ledger\n".to_vec()), ("short.db", b"SQLite".to_vec())] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(health::header(&path).unwrap(), Header::NotSqlite, "{name}");
        let p = health::preflight(&path).unwrap_err();
        assert!(matches!(p, Problem::NotADatabase(_)) && p.needs_recovery(), "{name}: {p:?}");
        assert!(p.describe(&path).contains("is not a valid SQLite database (file is not a database"), "{}", p.describe(&path));
        assert!(matches!(health::diagnose(&path), Err(Problem::NotADatabase(_))), "{name}");
        // What SQLite itself says, classified the same way.
        let e = Ledger::open_read_only(&path).err().unwrap();
        assert!(matches!(health::classify(&e), Some(Problem::NotADatabase(_))), "{name}: {e}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} was changed");
    }
}

#[test]
fn a_ledger_garbled_after_its_header_is_not_a_database_to_sqlite() {
    // The header survives but the rest (page size, schema) is garbage.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let mut bytes = health::SQLITE_HEADER.to_vec();
    bytes.extend(garbage(50_000));
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(health::preflight(&path), Ok(()));
    let p = health::diagnose(&path).unwrap_err();
    assert!(p.needs_recovery(), "{p:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_truncated_ledger_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_with_budget(dir.path(), true);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len / 3).unwrap();
    drop(f);
    let p = health::diagnose(&path).unwrap_err();
    assert!(matches!(p, Problem::Corrupt(_)), "{p:?}");
    assert!(p.describe(&path).contains("is damaged"), "{}", p.describe(&path));
}

#[test]
fn damage_past_the_budget_leaves_the_budget_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_with_budget(dir.path(), true);
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 40_000..].copy_from_slice(&garbage(40_000));
    std::fs::write(&path, &bytes).unwrap();
    let p = health::diagnose(&path).unwrap_err();
    assert!(matches!(p, Problem::Corrupt(_)), "{p:?}");
    // What `allot ledger recover` salvages.
    let v = Ledger::open_read_only(&path).unwrap().current_budget().unwrap().unwrap();
    assert_eq!((v.version, v.toml.as_str()), (1, BUDGET));
}

#[test]
fn a_lost_wal_costs_only_the_last_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_with_budget(dir.path(), false);
    // A -wal that is garbage is ignored by SQLite: the database is intact.
    std::fs::write(format!("{}-wal", path.display()), garbage(10_000)).unwrap();
    assert_eq!(health::diagnose(&path).unwrap().budget_version, Some(1));
}

#[test]
fn sqlite_errors_are_classified() {
    use rusqlite::ffi;
    let failure = |code: i32| rusqlite::Error::SqliteFailure(ffi::Error::new(code), None);
    assert!(matches!(health::classify_sqlite(&failure(ffi::SQLITE_NOTADB)), Some(Problem::NotADatabase(_))));
    assert!(matches!(health::classify_sqlite(&failure(ffi::SQLITE_CORRUPT)), Some(Problem::Corrupt(_))));
    assert!(matches!(health::classify_sqlite(&failure(ffi::SQLITE_BUSY)), Some(Problem::Locked(_))));
    assert!(matches!(health::classify_sqlite(&failure(ffi::SQLITE_LOCKED)), Some(Problem::Locked(_))));
    assert!(matches!(health::classify_sqlite(&failure(ffi::SQLITE_CANTOPEN)), Some(Problem::Unreadable(_))));
    assert_eq!(health::classify_sqlite(&failure(ffi::SQLITE_CONSTRAINT)), None);
    assert!(!Problem::Locked(String::new()).needs_recovery());
}

/// A write that finds no room (SQLite's "database or disk is full", here
/// from a page limit rather than a real disk: cluster test h8 fills one) is
/// told apart from damage: nothing to recover, only room to make.
#[test]
fn a_full_disk_is_its_own_problem_not_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_with_budget(dir.path(), false);
    let c = rusqlite::Connection::open(&path).unwrap();
    let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    let _: i64 = c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| r.get(0)).unwrap();
    let err = c.execute_batch("CREATE TABLE filler (x BLOB); INSERT INTO filler VALUES (zeroblob(100000));").unwrap_err();
    let problem = health::classify(&allot_ledger::LedgerError::Sqlite { path: path.display().to_string(), source: err }).expect("classified");
    assert!(matches!(problem, Problem::Full(_)), "{problem:?}");
    assert!(!problem.needs_recovery() && problem.has_advice());
    assert!(problem.describe(&path).contains("is full"), "{}", problem.describe(&path));
    drop(c);
    // The failed write left the ledger as it was.
    assert!(matches!(health::diagnose(&path), Ok(h) if h.budget_version == Some(1)));
}
