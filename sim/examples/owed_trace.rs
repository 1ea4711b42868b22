//! Hour by hour, what each team held against what it was owed, and where
//! the fair-share window stood: the trace behind the `bursty` paragraph of
//! docs/src/simulator/debug-overload.md. One debug-class case, the shipped
//! layout (one node kept for small jobs), stopped when submissions stop.
//!
//! ```sh
//! cargo run --release -p allot-sim --example owed_trace -- [VARIANT [SEED]]   # default: bursty 2
//! ```
//!
//! Every 6 hours, per team: GPUs held / owed / wanted (means over the 6
//! hours; owed as the report computes it, free work included), then each
//! team's use of its share in the window (`Ranking::compute` over the
//! runs' charged usage, as the plugins rank). At the end, per team:
//! delivered over owed, and delivered over owed counting only allocated
//! (`min_runtime` > 0) work as wanted.
use allot::budget::BudgetTree;
use allot::fairshare::Ranking;
use allot::occupancy::{usage_in_window, Interval};
use allot_sim::generate::{debug_scenario, DebugParams};
use allot_sim::metrics::{hourly, owed_by_hour};
use allot_sim::{simulate, Config, PolicyKind};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variant = args.first().map_or("bursty", String::as_str);
    let seed: u64 = args.get(1).map_or(2, |s| s.parse().expect("SEED: a number"));
    let p = DebugParams::variant(variant, seed).unwrap_or_else(|| panic!("unknown variant {variant}"));
    let s = debug_scenario(&p);
    let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
    let mut cfg = Config::new(p.cluster, tree.clone(), PolicyKind::Allot);
    cfg.small_job_nodes = 1;
    cfg.horizon = Some(s.workload.span().0 + (p.days * 86_400.0).round() as i64);
    let o = simulate(&s.workload, &cfg, &mut |_| {}).outcome;
    let leaves = tree.leaves.len();
    let capacity = p.cluster.nodes * p.cluster.gpus_per_node;

    // GPUs wanted by allocated jobs alone: from submission to the job's end.
    let mut allocated_log = vec![Vec::new(); leaves];
    for (i, job) in s.workload.jobs.iter().enumerate() {
        let (Some(leaf), contract) = (o.prepared.leaf[i], &o.prepared.contract[i]) else { continue };
        if contract.is_allocated() {
            let held = i64::from(o.prepared.held[i]);
            allocated_log[leaf as usize].push((job.submit, held));
            allocated_log[leaf as usize].push((o.jobs[i].end.unwrap_or(o.end), -held));
        }
    }
    for log in &mut allocated_log {
        log.sort_unstable();
    }
    let per_hour = |logs: &[Vec<(i64, i64)>]| -> Vec<Vec<f64>> { logs.iter().map(|l| hourly(l, o.start, o.end)).collect() };
    let (wanted, held, wanted_allocated) = (per_hour(&o.demand_log), per_hour(&o.delivered_log), per_hour(&allocated_log));
    let owed = owed_by_hour(&tree, &wanted, capacity, o.start, o.end);
    let owed_allocated = owed_by_hour(&tree, &wanted_allocated, capacity, o.start, o.end);

    let intervals: Vec<Interval> = o
        .runs
        .iter()
        .filter_map(|r| o.prepared.leaf[r.job as usize].map(|leaf| Interval { leaf, gpus: r.gpus, start: r.start, end: Some(r.end), allocated: r.charged }))
        .collect();
    let names: Vec<String> = (0..leaves).map(|l| tree.leaf_node(l as u32).path.clone()).collect();
    println!("{variant}, seed {seed}: per team, GPUs held / owed / wanted (6-hour means), then use of its share in the window");
    println!("{:>6} {}", "day", names.iter().map(|n| format!("{n:>16}")).collect::<String>());
    let hours = wanted.first().map_or(0, Vec::len);
    for from in (0..hours).step_by(6) {
        let span = from..(from + 6).min(hours);
        let mean = |v: &[f64]| v[span.clone()].iter().sum::<f64>() / 3600.0 / span.len() as f64;
        let cells: String = (0..leaves).map(|l| format!("{:>16}", format!("{:.0}/{:.0}/{:.0}", mean(&held[l]), mean(&owed[l]), mean(&wanted[l])))).collect();
        let now = o.start + from as i64 * 3600;
        let usage = usage_in_window(&intervals, leaves, now, cfg.tree.settings.lookback);
        let ranking = Ranking::compute(&cfg.tree, &usage.charged, capacity, now);
        let ratios: String = (0..leaves).map(|l| format!("{:>16}", format!("{:.0}%", 100.0 * ranking.standings[tree.leaves[l] as usize].ratio))).collect();
        println!("{:>6.2} {cells}", from as f64 / 24.0);
        println!("{:>6} {ratios}", "");
    }
    println!("\nper team: delivered / owed, and delivered / owed counting only allocated work as wanted");
    for l in 0..leaves {
        let delivered: f64 = held[l].iter().sum();
        println!("{:>16} {:.2} {:.2}", names[l], delivered / owed[l].iter().sum::<f64>(), delivered / owed_allocated[l].iter().sum::<f64>());
    }
}
