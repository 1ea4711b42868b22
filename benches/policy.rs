//! Policy-core benchmark: prints figures against the targets.
//!
//! `cargo bench --bench policy` measures, on one thread:
//! - parsing and validating a 5,011-node budget tree;
//! - a full recompute of the order: windowed usage over 1,000,000 occupancy
//!   intervals, the fair-share ranking of the tree, and the order and
//!   priorities of 100,000 pending jobs (target: at most 20 ms).
//!
//! Each figure is the median of several runs; the first run is a warm-up.
use std::hint::black_box;
use std::time::{Duration, Instant};

use allot::budget::BudgetTree;
use allot::contract::PriorityLevel;
use allot::fairshare::Ranking;
use allot::occupancy::{usage_in_window, Interval};
use allot::order::{PendingJob, PriorityMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const WINDOW: i64 = 7 * 86_400;
const NOW: i64 = 1_800_000_000;

fn median<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    black_box(f());
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // Ignore the flags `cargo bench` passes (e.g. --bench).
    let text = allot::synthetic::budget_toml(&[10, 20, 24], 4096);
    let tree = BudgetTree::parse(&text).expect("synthetic budget parses");
    let leaves = tree.leaves.len() as u32;
    println!("budget tree: {} nodes, {} leaves, {} KiB of TOML", tree.nodes.len(), leaves, text.len() / 1024);

    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let intervals: Vec<Interval> = (0..1_000_000)
        .map(|_| {
            let start = NOW - rng.gen_range(0..WINDOW + 86_400);
            let len = rng.gen_range(60..86_400);
            let end = start + len;
            Interval {
                leaf: rng.gen_range(0..leaves),
                gpus: rng.gen_range(1..=8),
                start,
                end: if end >= NOW { None } else { Some(end) },
                allocated: rng.gen_bool(0.9),
            }
        })
        .collect();
    let jobs: Vec<PendingJob> = (0..100_000u32)
        .map(|i| PendingJob {
            job_id: 1_000_000 + i,
            leaf: rng.gen_range(0..leaves),
            allocated: rng.gen_bool(0.9),
            priority: [PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High][rng.gen_range(0..3)],
            submit_time: NOW - rng.gen_range(0..86_400),
        })
        .collect();

    let parse = median(11, || BudgetTree::parse(&text).unwrap());
    let usage = median(21, || usage_in_window(&intervals, leaves as usize, NOW, WINDOW));
    let charged = usage_in_window(&intervals, leaves as usize, NOW, WINDOW).charged;
    let ranking = median(21, || Ranking::compute(&tree, &charged, 4096, NOW));
    let r = Ranking::compute(&tree, &charged, 4096, NOW);
    let order = median(21, || PriorityMap::build(&r, &jobs));
    let full = median(21, || {
        let u = usage_in_window(&intervals, leaves as usize, NOW, WINDOW);
        let r = Ranking::compute(&tree, &u.charged, 4096, NOW);
        PriorityMap::build(&r, &jobs)
    });

    println!("parse + validate budget:        {:8.2} ms", ms(parse));
    println!("usage over 1,000,000 intervals: {:8.2} ms", ms(usage));
    println!("fair-share ranking:             {:8.2} ms", ms(ranking));
    println!("order + priorities, 100k jobs:  {:8.2} ms", ms(order));
    let verdict = if ms(full) <= 20.0 { "within" } else { "OVER" };
    println!("full recompute:                 {:8.2} ms  ({verdict} the 20 ms target)", ms(full));
}
