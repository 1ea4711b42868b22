//! Sync benchmark: prints figures against the targets (a 5,000-node budget
//! file synced in at most 200 ms into a file ledger, under 1 s into a
//! server ledger).
//!
//! Measures `allot sync`'s own path (validate, read the current version,
//! check permissions, write the new version in one transaction): the first
//! sync of a 5,011-node tree, and a re-sync with one share changed (which
//! also parses the current version and diffs the two). Both engines in one
//! run, rounds alternating: a SQLite file, and a private MariaDB server
//! (over its local socket) when `mariadbd` is installed.
use std::time::{Duration, Instant};

use allot_cli::identity::Actor;
use allot_cli::sync::sync_text;
use allot_ledger::testing::MariaDb;
use allot_ledger::Location;

fn main() {
    let text = allot::synthetic::budget_toml(&[10, 20, 24], 4096);
    let admin = Actor { name: "root".into(), is_admin: true };
    let manager = Actor { name: "owner1".into(), is_admin: false };
    // owner1 owns budget.n1 and changes a share inside it.
    let changed = text.replacen("[budget.n1.n2]\nshare = ", "[budget.n1.n2]\nshare = 1", 1);
    let server = std::process::Command::new("mariadbd").arg("--version").output().is_ok().then(MariaDb::start);
    let mut times: Vec<(&str, Vec<Duration>, Vec<Duration>)> = vec![("file", vec![], vec![]), ("server", vec![], vec![])];
    for round in 0..7 {
        let dir = tempfile::tempdir().unwrap();
        for (engine, first, resync) in times.iter_mut() {
            let ledger = match (*engine, &server) {
                ("file", _) => Location::File(dir.path().join("ledger.db")),
                (_, Some(server)) => {
                    let database = format!("bench{round}");
                    server.create_database(&database);
                    Location::parse(&server.url("allot", &database)).unwrap()
                }
                _ => continue,
            };
            let t = Instant::now();
            sync_text(&ledger, &text, "big.toml", &admin, 1).unwrap();
            first.push(t.elapsed());
            let t = Instant::now();
            sync_text(&ledger, &changed, "big.toml", &manager, 2 + round).unwrap();
            resync.push(t.elapsed());
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    println!("budget file: {} KiB, 5,011 nodes, 4,800 leaves; median of 7 rounds", text.len() / 1024);
    for (engine, first, resync) in times.iter_mut() {
        if first.is_empty() {
            println!("{engine} ledger: not measured (no mariadbd: Debian's mariadb-server)");
            continue;
        }
        let target = if *engine == "file" { 200.0 } else { 1000.0 };
        let (f, r) = (median(first), median(resync));
        let verdict = |x: f64| if x <= target { "within" } else { "OVER" };
        println!("{engine:>6} ledger, first sync:                       {f:8.1} ms  ({} the {target} ms target)", verdict(f));
        println!("{engine:>6} ledger, re-sync by a manager (diff+auth): {r:8.1} ms  ({} the {target} ms target)", verdict(r));
    }
}
