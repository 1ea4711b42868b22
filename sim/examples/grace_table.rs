//! Debug waits against the grace time, every debug-class variant, seeds
//! 1-5: the budget's `grace` the simulator models by default (5 min, the
//! policy core's default), the sample budget's (conf/budgets.toml, 2 min)
//! and the shipped allot.conf's `GraceTime` (30 s, which overrides the
//! budget's on a real cluster), with the policy alone and with one node kept
//! for small jobs. The grace paragraph of docs/src/simulator/debug-overload.md.
//!
//! ```sh
//! cargo run --release -p allot-sim --example grace_table [-- VARIANT...]   # default: every variant
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{debug_scenario, DebugParams, DEBUG_VARIANTS};
use allot_sim::metrics::human;
use allot_sim::{simulate, Config, PolicyKind};

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variants: Vec<&str> = if args.is_empty() { DEBUG_VARIANTS.to_vec() } else { args.iter().map(String::as_str).collect() };
    println!(
        "| variant | layout | grace | debug p90 | worst team's debug p90 (median / largest) | lowest delivered/owed | occupancy | preemptions | GPU-h lost |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for v in variants {
        for (layout, kept) in [("policy alone", 0u32), ("1 node kept", 1)] {
            for grace in [300i64, 120, 30] {
                let (mut p90, mut worst, mut occupancy, mut preemptions, mut lost) = (vec![], vec![], vec![], vec![], vec![]);
                let mut lowest = f64::INFINITY;
                for seed in 1..=5 {
                    let p = DebugParams::variant(v, seed).unwrap_or_else(|| panic!("unknown variant {v}"));
                    let s = debug_scenario(&p);
                    let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
                    let mut cfg = Config::new(p.cluster, tree, PolicyKind::Allot);
                    cfg.small_job_nodes = kept;
                    cfg.tree.settings.grace = grace;
                    let r = simulate(&s.workload, &cfg, &mut |_| {}).report;
                    p90.push(r.by_kind["debug"].wait_p90_s);
                    worst.push(r.teams.iter().map(|t| t.by_kind["debug"].wait_p90_s).max().unwrap_or(0));
                    lowest = r.teams.iter().filter_map(|t| t.delivered_over_owed).fold(lowest, f64::min);
                    occupancy.push((r.occupancy * 1000.0).round() as i64);
                    preemptions.push(r.preemptions as i64);
                    lost.push(r.gpu_hours_lost_to_preemption.round() as i64);
                }
                let largest = worst.iter().copied().max().unwrap_or(0);
                println!(
                    "| {v} | {layout} | {} | {} | {} / {} | {:.0}% | {:.1}% | {} | {} |",
                    human(grace),
                    human(median(p90)),
                    human(median(worst)),
                    human(largest),
                    100.0 * lowest,
                    median(occupancy) as f64 / 10.0,
                    median(preemptions),
                    median(lost)
                );
            }
        }
    }
}
