//! Sync benchmark: prints figures against the target (a 5,000-node budget
//! file synced in at most 200 ms).
//!
//! Measures `allot sync`'s own path (validate, read the current version,
//! check permissions, write the new version in one transaction) on a file
//! ledger: the first sync of a 5,011-node tree, and a re-sync with one share
//! changed (which also parses the current version and diffs the two).
use std::time::{Duration, Instant};

use allot_cli::identity::Actor;
use allot_cli::sync::sync_text;

fn main() {
    let text = allot::synthetic::budget_toml(&[10, 20, 24], 4096);
    let admin = Actor { name: "root".into(), is_admin: true };
    let manager = Actor { name: "owner1".into(), is_admin: false };
    let mut first = Vec::new();
    let mut resync = Vec::new();
    for round in 0..7 {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.db");
        let t = Instant::now();
        sync_text(&ledger, &text, "big.toml", &admin, 1).unwrap();
        first.push(t.elapsed());
        // owner1 owns budget.n1 and changes a share inside it.
        let changed = text.replacen("[budget.n1.n2]\nshare = ", "[budget.n1.n2]\nshare = 1", 1);
        let t = Instant::now();
        sync_text(&ledger, &changed, "big.toml", &manager, 2 + round).unwrap();
        resync.push(t.elapsed());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    println!("budget file: {} KiB, 5,011 nodes, 4,800 leaves", text.len() / 1024);
    let (f, r) = (median(&mut first), median(&mut resync));
    println!("first sync:                     {f:8.1} ms  ({} the 200 ms target)", if f <= 200.0 { "within" } else { "OVER" });
    println!("re-sync by a manager (diff+auth): {r:6.1} ms  ({} the 200 ms target)", if r <= 200.0 { "within" } else { "OVER" });
}
