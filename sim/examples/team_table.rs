//! Per team, one debug-class variant and seed: debug waits and delivered
//! over owed (the report's count and allocated work first, over the whole
//! run and over the loaded days) under the shipped layout (one node kept
//! for small jobs), the policy alone and Slurm's own plugins (baseline),
//! then each layout's occupancy, preemptions, GPU-hours lost and repeat
//! preemptions: the per-team tables of the debug-overload page.
//!
//! ```sh
//! cargo run --release -p allot-sim --example team_table [-- SEED [VARIANT...]]   # default: 1, every variant
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{debug_scenario, DebugParams, DEBUG_VARIANTS};
use allot_sim::metrics::human;
use allot_sim::{simulate, Config, PolicyKind, Report};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed: u64 = args.first().map_or(1, |s| s.parse().expect("SEED: a number"));
    let variants: Vec<&str> = if args.len() > 1 { args[1..].iter().map(String::as_str).collect() } else { DEBUG_VARIANTS.to_vec() };
    let layouts: [(&str, PolicyKind, u32); 3] =
        [("shipped", PolicyKind::Allot, 1), ("policy alone", PolicyKind::Allot, 0), ("Slurm's own", PolicyKind::Baseline, 0)];
    for v in variants {
        let p = DebugParams::variant(v, seed).unwrap_or_else(|| panic!("unknown variant {v}"));
        let s = debug_scenario(&p);
        let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
        let run = |policy: PolicyKind, kept: u32, loaded: bool| -> Report {
            let mut cfg = Config::new(p.cluster, tree.clone(), policy);
            cfg.small_job_nodes = kept;
            if loaded {
                cfg.horizon = Some(s.workload.span().0 + (p.days * 86_400.0).round() as i64);
            }
            simulate(&s.workload, &cfg, &mut |_| {}).report
        };
        let reports: Vec<(Report, Report)> = layouts.iter().map(|&(_, policy, kept)| (run(policy, kept, false), run(policy, kept, true))).collect();
        println!(
            "\n**{v}**, seed {seed}: debug wait p50 / p90 / p99; delivered / owed over the run and over the loaded days (allocated work first in brackets)\n"
        );
        println!(
            "| team | share | {} |",
            layouts.iter().map(|(n, _, _)| format!("{n}: debug | {n}: d/o run | {n}: d/o loaded")).collect::<Vec<_>>().join(" | ")
        );
        println!("|---|---:|{}", "---:|".repeat(3 * layouts.len()));
        let pct = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.0}%", 100.0 * x));
        for (i, t) in reports[0].0.teams.iter().enumerate() {
            let cells: Vec<String> = reports
                .iter()
                .map(|(all, loaded)| {
                    let (a, l) = (&all.teams[i], &loaded.teams[i]);
                    let d = &a.by_kind["debug"];
                    format!(
                        "{} / {} / {} | {} ({}) | {} ({})",
                        human(d.wait_p50_s),
                        human(d.wait_p90_s),
                        human(d.wait_p99_s),
                        pct(a.delivered_over_owed),
                        pct(a.delivered_over_owed_allocated_first),
                        pct(l.delivered_over_owed),
                        pct(l.delivered_over_owed_allocated_first)
                    )
                })
                .collect();
            println!("| {} | {:.1}% | {} |", t.team, 100.0 * t.effective_share, cells.join(" | "));
        }
        let totals: Vec<String> = reports
            .iter()
            .map(|(all, _)| {
                format!(
                    "occupancy {:.1}% | {} preemptions, {:.0} GPU-h lost | {} repeat preemptions",
                    100.0 * all.occupancy,
                    all.preemptions,
                    all.gpu_hours_lost_to_preemption,
                    all.ping_pongs
                )
            })
            .collect();
        println!("| all | | {} |", totals.join(" | "));
    }
}
