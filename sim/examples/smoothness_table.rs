//! The smoothness table of docs/src/simulator/report.md ("Smoothness"): the
//! budget's `lookahead` (a team's running GPUs count as used this much longer
//! in its standing) off and at a few lengths, on the debug-under-overload
//! classes (32x8, 14 days, training at 2.5-3x the cluster; `narrow`: its
//! training of one or two nodes, with an 8-hour lookahead too) with the shipped
//! layout (one node kept for small jobs) and with the policy alone, and on
//! the generated month (75x8, one node kept).
//!
//! ```sh
//! cargo run --release -p allot-sim --example smoothness_table [-- SEEDS [LOOKAHEAD...]]
//! ```
//!
//! With lookaheads given (`0` for off), only those, on the debug classes
//! with the kept node.
//!
//! Each row: over the seeds (default 1-3), the range of
//! `worst_team_hours_below_half_share` (the share of the hours a team wanted
//! its share and held less than half of it), the worst team's debug p90, the
//! lowest team's delivered/owed over the whole run and over the loaded days
//! alone, and the medians of occupancy, preemptions and GPU-hours lost.
use allot::budget::BudgetTree;
use allot::preempt::shipped_small_job_nodes;
use allot_sim::generate::{debug_scenario, scenario, DebugParams, ScenarioParams};
use allot_sim::metrics::{human, Report};
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Workload};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn lowest_owed(r: &Report) -> f64 {
    r.teams.iter().filter_map(|t| t.delivered_over_owed).fold(f64::INFINITY, f64::min)
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.0}-{:.0}%", 100.0 * lo, 100.0 * hi)
}

/// One row from the whole runs and the runs stopped when submissions stop.
fn row(class: &str, layout: &str, lookahead: &str, whole: &[Report], loaded: &[Report]) {
    let smooth: Vec<f64> = whole.iter().map(|r| r.worst_team_hours_below_half_share).collect();
    let debug = whole.iter().filter_map(|r| r.teams.iter().filter_map(|t| t.by_kind.get("debug")).map(|k| k.wait_p90_s).max()).max();
    println!(
        "| {class} | {layout} | {lookahead} | {} | {} | {:.0}% | {:.0}% | {:.1}% | {:.0} | {:.0} |",
        range(&smooth),
        debug.map(human).unwrap_or_else(|| "-".into()),
        100.0 * whole.iter().map(lowest_owed).fold(f64::INFINITY, f64::min),
        100.0 * loaded.iter().map(lowest_owed).fold(f64::INFINITY, f64::min),
        100.0 * median(whole.iter().map(|r| r.occupancy).collect()),
        median(whole.iter().map(|r| r.preemptions as f64).collect()),
        median(whole.iter().map(|r| r.gpu_hours_lost_to_preemption).collect()),
    );
}

fn run(w: &Workload, cluster: ClusterSpec, tree: &BudgetTree, nodes: u32, lookahead: i64, horizon: Option<i64>) -> Report {
    let mut cfg = Config::new(cluster, tree.clone(), PolicyKind::Allot);
    cfg.small_job_nodes = nodes;
    cfg.tree.settings.lookahead = lookahead;
    cfg.horizon = horizon;
    simulate(w, &cfg, &mut |_| {}).report
}

fn main() {
    let seeds: Vec<u64> = match std::env::args().nth(1).as_deref().map(|s| s.split_once('-')) {
        Some(Some((a, b))) => (a.parse().expect("seed")..=b.parse().expect("seed")).collect(),
        Some(None) => vec![std::env::args().nth(1).unwrap().parse().expect("seed")],
        None => vec![1, 2, 3],
    };
    let asked: Vec<(String, i64)> = std::env::args()
        .skip(2)
        .map(|a| {
            let secs = allot::duration::parse_duration(&a).unwrap_or_else(|e| panic!("lookahead {a}: {e}"));
            (if secs == 0 { "off".to_owned() } else { a }, secs)
        })
        .collect();
    let shipped = [("off", 0), ("1h", 3600), ("4h", 4 * 3600), ("12h", 12 * 3600)];
    let lookaheads: Vec<(&str, i64)> = if asked.is_empty() { shipped.to_vec() } else { asked.iter().map(|(n, s)| (n.as_str(), *s)).collect() };
    println!("| class | layout | lookahead | hours below half share (worst team) | worst team's debug p90 | lowest delivered/owed, whole run | lowest, loaded days | occupancy | preemptions | GPU-h lost |");
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for class in ["base", "load3", "unequal", "bursty", "narrow"] {
        let cases: Vec<(DebugParams, Workload, BudgetTree)> = seeds
            .iter()
            .map(|&seed| {
                let p = DebugParams::variant(class, seed).expect("a debug class");
                let s = debug_scenario(&p);
                let tree = BudgetTree::parse(&s.budget_toml).expect("generated budget");
                (p, s.workload, tree)
            })
            .collect();
        for (layout, nodes) in [("1 node kept", 1), ("policy alone", 0)] {
            // `narrow` (training of one or two nodes): also 8h, the lookahead that meets every goal there.
            let mut these = lookaheads.clone();
            if !asked.is_empty() {
                if nodes == 0 {
                    continue;
                }
            } else if class == "narrow" {
                these.insert(3, ("8h", 8 * 3600));
            }
            for &(name, lookahead) in &these {
                if nodes == 0 && !["off", "4h"].contains(&name) {
                    continue;
                }
                let whole: Vec<Report> = cases.iter().map(|(p, w, t)| run(w, p.cluster, t, nodes, lookahead, None)).collect();
                let loaded: Vec<Report> =
                    cases.iter().map(|(p, w, t)| run(w, p.cluster, t, nodes, lookahead, Some(w.span().0 + (p.days * 86_400.0).round() as i64))).collect();
                row(class, layout, name, &whole, &loaded);
            }
        }
    }
    if !asked.is_empty() {
        return;
    }
    // The generated month (scenario defaults), its own seeds.
    let cluster = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let months: Vec<(Workload, BudgetTree, i64)> = seeds
        .iter()
        .map(|&seed| {
            let p = ScenarioParams { seed, ..ScenarioParams::default() };
            let s = scenario(&p);
            let end = s.workload.span().0 + (p.days * 86_400.0).round() as i64;
            (s.workload, BudgetTree::parse(&s.budget_toml).expect("generated budget"), end)
        })
        .collect();
    for &(name, lookahead) in &lookaheads {
        let nodes = shipped_small_job_nodes(cluster.nodes);
        let whole: Vec<Report> = months.iter().map(|(w, t, _)| run(w, cluster, t, nodes, lookahead, None)).collect();
        let loaded: Vec<Report> = months.iter().map(|(w, t, end)| run(w, cluster, t, nodes, lookahead, Some(*end))).collect();
        row("generated month (75x8)", &format!("{nodes} node kept"), name, &whole, &loaded);
    }
}
