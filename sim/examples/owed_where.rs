//! Where the teams under 95% of owed (allocated work first, as the contract
//! owes it) fell short: over the loaded days (submissions still coming) or
//! over the drain that follows them (the backlog a finite workload leaves),
//! and how many GPU-hours sat idle while jobs wanted them in each part
//! (owed summed over the teams, less the GPUs held: the same by either
//! count of owed). The shipped layout (one node kept for
//! small jobs), seeds 1-5. The paragraph "Over the run" of "Owed by the
//! contract" in docs/src/simulator/debug-overload.md.
//!
//! ```sh
//! [KEPT=0] cargo run --release -p allot-sim --example owed_where [-- VARIANT...]   # default: base unequal
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{debug_scenario, DebugParams};
use allot_sim::metrics::{hourly, owed_by_hour_allocated_first};
use allot_sim::{simulate, Config, PolicyKind};

fn main() {
    let mut variants: Vec<String> = std::env::args().skip(1).collect();
    if variants.is_empty() {
        variants = vec!["base".into(), "unequal".into()];
    }
    for v in &variants {
        for seed in 1..=5u64 {
            let p = DebugParams::variant(v, seed).unwrap_or_else(|| panic!("unknown variant {v}"));
            let s = debug_scenario(&p);
            let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
            let mut cfg = Config::new(p.cluster, tree.clone(), PolicyKind::Allot);
            // KEPT=0: the policy alone.
            cfg.small_job_nodes = std::env::var("KEPT").map_or(1, |k| k.parse().expect("KEPT: a number of nodes"));
            let sim = simulate(&s.workload, &cfg, &mut |_| {});
            let o = &sim.outcome;
            let per_hour = |logs: &[Vec<(i64, i64)>]| -> Vec<Vec<f64>> { logs.iter().map(|l| hourly(l, o.start, o.end)).collect() };
            let (wanted, free, held) = (per_hour(&o.demand_log), per_hour(&o.free_demand_log), per_hour(&o.delivered_log));
            let owed = owed_by_hour_allocated_first(&tree, &wanted, &free, p.cluster.nodes * p.cluster.gpus_per_node, o.start, o.end);
            let hours = owed[0].len();
            let loaded = ((p.days * 24.0) as usize).min(hours);
            let gpu_h = |v: &[f64]| v.iter().sum::<f64>() / 3600.0;
            let unused =
                |r: std::ops::Range<usize>| r.map(|h| owed.iter().map(|t| t[h]).sum::<f64>() - held.iter().map(|t| t[h]).sum::<f64>()).sum::<f64>() / 3600.0;
            println!(
                "{v} seed {seed}: {hours} hours, {loaded} loaded; GPU-hours idle while jobs wanted them: {:.0} loaded, {:.0} drain",
                unused(0..loaded),
                unused(loaded..hours)
            );
            for l in 0..tree.leaves.len() {
                let (ol, dl, od, dd) = (gpu_h(&owed[l][..loaded]), gpu_h(&held[l][..loaded]), gpu_h(&owed[l][loaded..]), gpu_h(&held[l][loaded..]));
                if dl + dd < 0.95 * (ol + od) {
                    println!(
                        "  {}: {:.1}% of owed over the run; loaded days: owed {ol:.0}, held {dl:.0} ({:+.0}); drain: owed {od:.0}, held {dd:.0} ({:+.0})",
                        tree.leaf_node(l as u32).path,
                        100.0 * (dl + dd) / (ol + od),
                        dl - ol,
                        dd - od
                    );
                }
            }
        }
    }
}
