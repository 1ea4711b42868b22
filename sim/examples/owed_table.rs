//! Delivered over owed counted two ways, for every debug-class variant:
//! owed as the report's `delivered_over_owed` counts it (free work wanted
//! like allocated work) and as the contract owes it
//! (`delivered_over_owed_allocated_first`: allocated work first, free work
//! only what allocated work left). The table of "Owed by the contract" in
//! docs/src/simulator/debug-overload.md.
//!
//! ```sh
//! cargo run --release -p allot-sim --example owed_table [-- SEEDS [VARIANT...]]   # default: 1-5, every variant
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{debug_scenario, DebugParams, DEBUG_VARIANTS};
use allot_sim::{simulate, Config, PolicyKind, Report};

/// The lowest and highest team's ratio of any seed's report, in percent.
fn range(rs: &[Report], ratio: fn(&allot_sim::metrics::TeamStats) -> Option<f64>) -> String {
    let v: Vec<f64> = rs.iter().flat_map(|r| r.teams.iter().filter_map(ratio)).collect();
    let (lo, hi) = (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(0.0, f64::max));
    format!("{:.0}-{:.0}%", 100.0 * lo, 100.0 * hi)
}

/// Teams under 95% over all seeds' reports, of the teams with jobs.
fn under_95(rs: &[Report], at_95: fn(&Report) -> f64) -> String {
    let teams: f64 = rs.iter().map(|r| r.teams.iter().filter(|t| t.jobs > 0).count() as f64).sum();
    let under: f64 = rs.iter().map(|r| (1.0 - at_95(r)) * r.teams.iter().filter(|t| t.jobs > 0).count() as f64).sum();
    format!("{:.0} of {teams:.0}", under.round())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: Vec<u64> = match args.first().map(|s| s.split_once('-')) {
        Some(Some((a, b))) => (a.parse().expect("seed")..=b.parse().expect("seed")).collect(),
        Some(None) => vec![args[0].parse().expect("seed")],
        None => (1..=5).collect(),
    };
    let variants: Vec<&str> = if args.len() > 1 { args[1..].iter().map(String::as_str).collect() } else { DEBUG_VARIANTS.to_vec() };
    println!("| variant | layout | run: as today | run: allocated first | teams under 95%, today / allocated first | loaded days: as today | loaded days: allocated first |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let layouts: [(&str, PolicyKind, u32); 3] =
        [("shipped (1 node kept)", PolicyKind::Allot, 1), ("policy alone", PolicyKind::Allot, 0), ("baseline", PolicyKind::Baseline, 0)];
    for v in variants {
        for (name, policy, kept) in layouts {
            let run = |loaded_only: bool| -> Vec<Report> {
                seeds
                    .iter()
                    .map(|&seed| {
                        let p = DebugParams::variant(v, seed).unwrap_or_else(|| panic!("unknown variant {v}"));
                        let s = debug_scenario(&p);
                        let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
                        let mut cfg = Config::new(p.cluster, tree, policy);
                        cfg.small_job_nodes = kept;
                        if loaded_only {
                            cfg.horizon = Some(s.workload.span().0 + (p.days * 86_400.0).round() as i64);
                        }
                        simulate(&s.workload, &cfg, &mut |_| {}).report
                    })
                    .collect()
            };
            let (all, loaded) = (run(false), run(true));
            println!(
                "| {v} | {name} | {} | {} | {} / {} | {} | {} |",
                range(&all, |t| t.delivered_over_owed),
                range(&all, |t| t.delivered_over_owed_allocated_first),
                under_95(&all, |r| r.teams_at_95pct_of_owed),
                under_95(&all, |r| r.teams_at_95pct_of_owed_allocated_first),
                range(&loaded, |t| t.delivered_over_owed),
                range(&loaded, |t| t.delivered_over_owed_allocated_first),
            );
        }
    }
}
