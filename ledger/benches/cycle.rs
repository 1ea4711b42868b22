//! The priority plugin's ledger I/O, on a SQLite file and on a MariaDB
//! server in one run (rounds alternating): what a server ledger adds to a
//! recompute, beside the policy's own work (`cargo bench --bench policy`).
//!
//! On the 5,011-node tree (4,800 leaves), per recompute period:
//! - the write of one period: a usage snapshot of every leaf, 500 run
//!   updates, 100 contracts, 200 demand changes, in one transaction;
//! - with `fair_share_usage = "lab"`, the other clusters' usage: three other
//!   clusters' snapshots of every leaf, read and summed;
//! - and once per slurmctld start, the window's runs (100,000).
//!
//! Median of 5 rounds after a warm-up. The server is a private mariadbd
//! over its local socket (Debian's mariadb-server; skipped without it).
use std::time::{Duration, Instant};

use allot::budget::BudgetTree;
use allot_ledger::testing::MariaDb;
use allot_ledger::{ContractRow, DemandRow, LeafUsage, Ledger, Location, Period, RunRow, RunUpdate, UsageSnapshot};

const NOW: i64 = 1_800_000_000;
const WINDOW_RUNS: u32 = 100_000;

fn snapshot(tree: &BudgetTree, at: i64) -> UsageSnapshot {
    let leaves = tree
        .leaves
        .iter()
        .enumerate()
        .map(|(i, &n)| LeafUsage { leaf: tree.node(n).path.clone(), charged: 3_600 * (i as i64 % 97), unallocated: i as i64 % 13, running: 0 })
        .collect();
    UsageSnapshot { computed_at: at, budget_version: 1, capacity_gpus: 4_096, leaves }
}

fn run(tree: &BudgetTree, job_id: u32, start: i64) -> RunRow {
    let leaf = tree.node(tree.leaves[job_id as usize % tree.leaves.len()]).path.clone();
    RunRow {
        job_id,
        run_start: start,
        run_end: Some(start + 600),
        leaf: Some(leaf.clone()),
        account: Some(leaf),
        user: Some("u".into()),
        gpus: 1 + job_id % 8,
        allocated: true,
        end_reason: Some("completed".into()),
    }
}

/// One recompute period's write, as the priority plugin makes it.
fn period(tree: &BudgetTree, round: u32, at: i64) -> Period {
    let base = 10_000_000 + round * 1_000;
    Period {
        runs: (0..500).map(|i| RunUpdate::Open(RunRow { run_end: None, ..run(tree, base + i, at - 60) })).collect(),
        contracts: (0..100)
            .map(|i| ContractRow {
                job_id: base + 500 + i,
                user: "u".into(),
                account: None,
                leaf: Some(tree.node(tree.leaves[i as usize]).path.clone()),
                min_runtime: 3_600,
                priority: "normal".into(),
                resumable: true,
                submit_time: at,
                comment: "min_runtime=1h".into(),
                gpus: Some(2),
            })
            .collect(),
        demand: (0..200)
            .map(|i| DemandRow {
                leaf: tree.node(tree.leaves[i]).path.clone(),
                at,
                pending_allocated: 8,
                pending_unallocated: 0,
                running_allocated: 4,
                running_unallocated: 0,
            })
            .collect(),
        snapshot: Some(snapshot(tree, at)),
        ..Default::default()
    }
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let text = allot::synthetic::budget_toml(&[10, 20, 24], 4096);
    let tree = BudgetTree::parse(&text).expect("synthetic budget parses");
    let lab_text = text.replacen("[cluster]\n", "[cluster]\nfair_share_usage = \"lab\"\n", 1);
    let lab_tree = BudgetTree::parse(&lab_text).unwrap();
    let server = std::process::Command::new("mariadbd").arg("--version").output().is_ok().then(MariaDb::start);
    let dir = tempfile::tempdir().unwrap();
    let mut engines: Vec<(&str, Location)> = vec![("file", Location::File(dir.path().join("ledger.db")))];
    if let Some(server) = &server {
        server.create_database("cycle");
        engines.push(("server", Location::parse(&server.url("allot", "cycle")).unwrap()));
    }
    // Each engine: the budget, the window's runs, three other clusters' snapshots.
    for (_, location) in &engines {
        let mut l = Ledger::connect(location, true).unwrap();
        l.sync_budget(&lab_text, &lab_tree, "root", "big.toml", 1).unwrap();
        let mut l = l.for_cluster(Some("alpha")).unwrap();
        for chunk in (0..WINDOW_RUNS).collect::<Vec<_>>().chunks(10_000) {
            let runs = chunk.iter().map(|&j| RunUpdate::Open(run(&tree, j, NOW - 86_400 + i64::from(j)))).collect();
            l.record_period(&Period { runs, ..Default::default() }).unwrap();
        }
        for other in ["beta", "gamma", "delta"] {
            let mut o = Ledger::connect(location, true).unwrap().for_cluster(Some(other)).unwrap();
            o.record_period(&Period { snapshot: Some(snapshot(&tree, NOW)), ..Default::default() }).unwrap();
        }
    }
    let mut times: Vec<[Vec<Duration>; 3]> = engines.iter().map(|_| Default::default()).collect();
    for round in 0..6u32 {
        for (e, (_, location)) in engines.iter().enumerate() {
            let mut l = Ledger::connect(location, true).unwrap().for_cluster(Some("alpha")).unwrap();
            let at = NOW + i64::from(round) * 30;
            let p = period(&tree, round, at);
            let t = Instant::now();
            l.record_period(&p).unwrap();
            let write = t.elapsed();
            let t = Instant::now();
            let others = l.usage_of_other_clusters(at - 7 * 86_400).unwrap().unwrap();
            let lab = t.elapsed();
            assert_eq!((others.capacity_gpus, others.leaves.len()), (3 * 4_096, tree.leaves.len()));
            let t = Instant::now();
            let runs = l.runs_since(NOW - 7 * 86_400).unwrap();
            let start = t.elapsed();
            assert!(runs.len() >= WINDOW_RUNS as usize);
            if round > 0 {
                for (slot, d) in times[e].iter_mut().zip([write, lab, start]) {
                    slot.push(d);
                }
            }
        }
    }
    println!("budget tree: {} nodes, {} leaves; median of 5 rounds", tree.nodes.len(), tree.leaves.len());
    println!("{:>6}  {:>26}  {:>28}  {:>30}", "ledger", "write of one period (ms)", "other clusters' usage (ms)", "window's 100,000 runs (ms)");
    for ((engine, _), [write, lab, start]) in engines.iter().zip(times.iter_mut()) {
        println!("{engine:>6}  {:>26.1}  {:>28.1}  {:>30.1}", median(write), median(lab), median(start));
    }
    if server.is_none() {
        println!("server: not measured (no mariadbd: Debian's mariadb-server)");
    }
}
