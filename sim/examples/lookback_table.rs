//! Delivered shares against the lookback window (the short-lookback
//! over-service study): the `steady` workload and the two budgets of
//! `tests/invariants.rs::with_steady_demand_delivered_shares_converge_to_budget_shares`,
//! on 4x8 GPUs, every team submitting twice its share in 1-2 GPU jobs of
//! 1-3 h with min_runtime 1h; delivered shares from day 7 to day 21.
//!
//! ```sh
//! cargo run --release -p allot-sim --example lookback_table [-- LOOKBACK...]
//! ```
//!
//! The engine experiments of the study (`lookback/experiments.patch`, on
//! `sim/src/engine/passes.rs`:
//! `ALLOT_CHECK_WINDOW=1` asserts at every pass that the engine's
//! incremental window equals the batch sum over its runs;
//! `ALLOT_EXPERIMENT_COMMITTED=oracle|protected` ranks on charged usage plus
//! running jobs' GPU-seconds still to come, to their end or to the end of
//! their minimum runtime) apply with `git apply` and run with this example.
use allot::budget::BudgetTree;
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind};

#[path = "lookback/common.rs"]
mod common;
use common::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lookbacks: Vec<String> =
        if args.is_empty() { ["1h", "3h", "6h", "12h", "1d", "3d", "7d", "14d"].iter().map(|s| s.to_string()).collect() } else { args };
    let cluster = ClusterSpec { nodes: 4, gpus_per_node: 8 };
    let days = 21;
    for (name, budget) in [("flat a:b:c:d = 1:2:3:4", FLAT), ("two levels x(p 2, q 1) 3 : y(r 1, s 1) 2", TWO_LEVEL)] {
        let tree = BudgetTree::parse(budget).unwrap();
        let w = steady(&tree, cluster, days);
        let paths: Vec<String> = (0..tree.leaves.len()).map(|l| tree.leaf_node(l as u32).path.clone()).collect();
        println!("\n{name}: delivered share, days 7-21 (budget share in the header)");
        print!("| lookback |");
        for (l, p) in paths.iter().enumerate() {
            print!(" {p} ({:.1}%) |", 100.0 * tree.leaf_node(l as u32).effective_share);
        }
        println!(" max |dev| | occupancy | preemptions | GPU-h lost | ping-pongs |");
        print!("| ---: |");
        for _ in &paths {
            print!(" ---: |");
        }
        println!(" ---: | ---: | ---: | ---: | ---: |");
        for lb in &lookbacks {
            let mut cfg = Config::new(cluster, tree.clone(), PolicyKind::Allot);
            // The shipped scheduler reach unless ALLOT_REACH=slurm (Slurm's own).
            if std::env::var("ALLOT_REACH").as_deref() == Ok("slurm") {
                cfg.set_reach(allot_sim::Reach::SLURM_DEFAULTS);
            }
            cfg.tree.settings.lookback = parse_lookback(lb);
            cfg.horizon = Some(days * DAY);
            let sim = simulate(&w, &cfg, &mut |_| {});
            let got = delivered_shares(&sim, tree.leaves.len(), 7 * DAY, days * DAY);
            let mut worst: f64 = 0.0;
            print!("| {lb} |");
            for (l, g) in got.iter().enumerate() {
                let want = tree.leaf_node(l as u32).effective_share;
                worst = worst.max((g - want).abs());
                print!(" {:.2}% |", 100.0 * g);
            }
            let r = &sim.report;
            println!(" {:.2} pt | {:.1}% | {} | {:.0} | {} |", 100.0 * worst, 100.0 * r.occupancy, r.preemptions, r.gpu_hours_lost_to_preemption, r.ping_pongs);
        }
    }
}
