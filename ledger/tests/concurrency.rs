//! The CLI writes budgets while the priority plugin writes runs and usage
//! snapshots and other plugins read: no reader may ever see half a write.
//!
//! Each budget version `k` has `k % 7 + 2` leaves whose shares all equal `k`,
//! and each usage snapshot stores `computed_at` in every leaf's row, so any
//! mix of two writes is detectable from the data alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use allot::budget::BudgetTree;
use allot_ledger::{LeafUsage, Ledger, Period, RunRow, RunUpdate, UsageSnapshot};

fn budget(k: usize) -> String {
    let mut s = String::from("[budget]\nowners = [\"boss\"]\n");
    for i in 0..(k % 7 + 2) {
        s.push_str(&format!("[budget.team{i}]\nshare = {k}\naccounts = [\"acct{i}\"]\n"));
    }
    s
}

#[test]
fn readers_never_see_torn_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    {
        let mut l = Ledger::open(&path).unwrap();
        let t = BudgetTree::parse(&budget(1)).unwrap();
        l.sync_budget(&budget(1), &t, "boss", "seed", 0).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(3);

    let budget_writer = {
        let path = path.clone();
        thread::spawn(move || {
            let mut l = Ledger::open(&path).unwrap();
            let mut k = 2;
            while Instant::now() < deadline {
                let text = budget(k);
                let tree = BudgetTree::parse(&text).unwrap();
                l.sync_budget(&text, &tree, "boss", "writer", k as i64).unwrap();
                k += 1;
            }
            k
        })
    };
    let run_writer = {
        let path = path.clone();
        thread::spawn(move || {
            let mut l = Ledger::open(&path).unwrap();
            let mut t = 1i64;
            while Instant::now() < deadline {
                let leaves = (0..50).map(|i| LeafUsage { leaf: format!("team{i}"), charged: t, unallocated: t, running: 0 }).collect();
                let run = RunRow {
                    job_id: t as u32,
                    run_start: t,
                    run_end: None,
                    leaf: Some("team0".into()),
                    account: None,
                    user: None,
                    gpus: 1,
                    allocated: true,
                    end_reason: None,
                };
                let period = Period {
                    runs: vec![RunUpdate::Open(run), RunUpdate::Close { job_id: (t - 1) as u32, run_start: t - 1, run_end: t, reason: "completed".into() }],
                    snapshot: Some(UsageSnapshot { computed_at: t, budget_version: 1, capacity_gpus: 8, leaves }),
                    ..Default::default()
                };
                l.record_period(&period).unwrap();
                t += 1;
            }
            t
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (path, stop, reads) = (path.clone(), stop.clone(), reads.clone());
            thread::spawn(move || {
                let l = Ledger::open_read_only(&path).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let (version, nodes) = l.current_budget_with_nodes().unwrap().unwrap();
                    let tree = version.tree().unwrap();
                    let k = version.synced_at.max(1) as usize;
                    assert_eq!(tree.leaves.len(), k % 7 + 2, "version {} text does not match its number", version.version);
                    assert_eq!(nodes.len(), tree.nodes.len(), "version {}: node rows from another version", version.version);
                    for (path, share, _, _) in &nodes {
                        if !path.is_empty() {
                            assert_eq!(*share, k as f64, "version {}: node {path} has another version's share", version.version);
                        }
                    }
                    if let Some(s) = l.usage_snapshot().unwrap() {
                        assert_eq!(s.leaves.len(), 50);
                        assert!(s.leaves.iter().all(|u| u.charged == s.computed_at), "snapshot rows from different periods");
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let versions = budget_writer.join().unwrap();
    let periods = run_writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let reads = reads.load(Ordering::Relaxed);
    eprintln!("{versions} budget versions, {periods} periods, {reads} consistent reads");
    assert!(versions > 20 && periods > 20 && reads > 100, "too little contention to prove anything");

    // Nothing was lost: every version is there, in order, and the runs add up.
    let l = Ledger::open_read_only(&path).unwrap();
    let history = l.budget_history().unwrap();
    assert_eq!(history.len(), versions - 1);
    assert!(history.windows(2).all(|w| w[0].version == w[1].version + 1));
    assert_eq!(l.open_runs().unwrap().len(), 1);
}
