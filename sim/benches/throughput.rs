//! Simulator speed, as figures: `cargo bench -p allot-sim --bench throughput`.
//!
//! One thread (the engine has only one), release profile. Each case runs
//! several times; the table gives the fastest and the median wall-clock
//! time of the simulation itself (`sim_seconds`: workload generation,
//! loading and the report are not timed), and simulated days per second.
//!
//! Cases (documented in sim/README.md):
//! - `month, generated`: `allot simulate generate scenario` defaults: a
//!   month of a 75x8 (600-GPU) cluster, 12 teams, about 42,000 jobs;
//! - `month, Philly x5 /5`: the Philly trace's 10,000 jobs five times over
//!   (copies shifted by up to an hour), runtimes divided by 5: 50,000 real
//!   jobs at the trace's own load on 600 GPUs;
//! - `month, Philly x5`: the same at full runtimes, 2.9 times the cluster,
//!   stopped after 30 days;
//! - `300k jobs, generated`: the generated scenario over 215 days.
//!
//! Targets (the issue): a month of 600 GPUs with about 50,000 jobs under
//! allot in at most 1 s (stretch 0.25 s); 300,000 jobs in at most 10 s.

use std::path::PathBuf;
use std::time::Instant;

use allot::budget::BudgetTree;
use allot_sim::generate::{derive, scenario, DeriveParams, ScenarioParams};
use allot_sim::prepare::equal_share_budget;
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Workload};

struct Case {
    name: &'static str,
    workload: Workload,
    tree: BudgetTree,
    horizon: Option<i64>,
    runs: usize,
}

fn philly() -> Option<Workload> {
    let path = std::env::var_os("ALLOT_PHILLY_TRACE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/philly-2017-09.csv"));
    let file = std::fs::File::open(&path).ok()?;
    Workload::from_csv(file, false).ok()
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: then run a quick smoke pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let cluster = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let mut cases = Vec::new();
    let month = scenario(&ScenarioParams::default());
    cases.push(Case { name: "month, generated", tree: BudgetTree::parse(&month.budget_toml).unwrap(), workload: month.workload, horizon: None, runs: 7 });
    match philly() {
        Some(trace) => {
            let scaled = derive(&trace, &DeriveParams { seed: 1, copies: 5, runtime_scale: 0.2 }, 8);
            cases.push(Case { name: "month, Philly x5 /5", tree: equal_share_budget(&scaled).unwrap(), workload: scaled, horizon: None, runs: 7 });
            let full = derive(&trace, &DeriveParams { seed: 1, copies: 5, runtime_scale: 1.0 }, 8);
            let first = full.span().0;
            cases.push(Case {
                name: "month, Philly x5",
                tree: equal_share_budget(&full).unwrap(),
                workload: full,
                horizon: Some(first + 30 * 86_400),
                runs: 5,
            });
        }
        None => eprintln!("(the Philly trace is not at sim/data/philly-2017-09.csv: its cases are skipped; set ALLOT_PHILLY_TRACE)"),
    }
    if !quick {
        let long = scenario(&ScenarioParams { days: 215.0, ..ScenarioParams::default() });
        cases.push(Case { name: "300k jobs, generated", tree: BudgetTree::parse(&long.budget_toml).unwrap(), workload: long.workload, horizon: None, runs: 3 });
    }

    println!("{:<22} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9}", "case", "policy", "jobs", "days", "min s", "median s", "days/s", "jobs/s");
    for case in &cases {
        for policy in [PolicyKind::Allot, PolicyKind::Baseline] {
            let mut cfg = Config::new(cluster, case.tree.clone(), policy);
            cfg.horizon = case.horizon;
            let runs = if quick { 1 } else { case.runs };
            let mut times = Vec::new();
            let mut days = 0.0;
            for _ in 0..runs {
                let started = Instant::now();
                let sim = simulate(&case.workload, &cfg, &mut |_| {});
                let wall = started.elapsed().as_secs_f64();
                days = sim.report.simulated_days;
                // The engine's own measure; the wall time adds only the report.
                times.push(sim.report.sim_seconds.unwrap_or(wall));
            }
            times.sort_by(f64::total_cmp);
            let (min, median) = (times[0], times[times.len() / 2]);
            println!(
                "{:<22} {:>8} {:>9} {:>6.1} {:>9.3} {:>9.3} {:>9.0} {:>9.0}",
                case.name,
                policy.name(),
                case.workload.jobs.len(),
                days,
                min,
                median,
                days / median,
                case.workload.jobs.len() as f64 / median
            );
        }
    }
}
