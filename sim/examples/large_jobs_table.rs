//! The large-job table of docs/src/simulator/fragmentation.md: rule 6
//! (`large_job_wait`: a job larger than a small job, of a budget under its
//! share, that waited this long may take runs past their minimum runtime and
//! its own with no margin) off
//! and at a few waits, on generated workloads at twice the cluster (jobs of
//! 16, 32 and 64 GPUs) and on the October 2017 Philly month, under allot on
//! 600 GPUs with the shipped layout (one node of 75 kept for small jobs).
//!
//! ```sh
//! cargo run --release -p allot-sim --example large_jobs_table
//! ```
use allot::budget::BudgetTree;
use allot::preempt::shipped_small_job_nodes;
use allot_sim::generate::{derive, scenario, DeriveParams, ScenarioParams};
use allot_sim::metrics::Report;
use allot_sim::prepare::equal_share_budget;
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Workload};

fn wait(secs: Option<i64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s >= 86_400 => format!("{:.1} d", s as f64 / 86_400.0),
        Some(s) if s >= 3_600 => format!("{:.1} h", s as f64 / 3_600.0),
        Some(s) if s >= 60 => format!("{:.0} m", s as f64 / 60.0),
        Some(s) => format!("{s} s"),
    }
}

fn row(workload: &str, knob: &str, r: &Report) {
    let size = |class: &str| r.by_size.get(class).map(|s| (s.wait_p50_s, s.wait_p90_s));
    let pair = |class: &str| format!("{} / {}", wait(size(class).map(|s| s.0)), wait(size(class).map(|s| s.1)));
    let lowest = r.teams.iter().filter_map(|t| t.delivered_over_owed).fold(f64::INFINITY, f64::min);
    println!(
        "| {workload} | {knob} | {} | {} | {} | {} | {} | {:.3} | {:.1}% | {:.0} | {} | {:.0} |",
        pair("33+"),
        pair("9-32"),
        wait(r.by_kind.get("debug").map(|k| k.wait_p90_s)),
        wait(r.by_kind.get("training").map(|k| k.wait_p90_s)),
        wait(r.by_kind.get("sweep").map(|k| k.wait_p90_s)),
        lowest,
        100.0 * r.occupancy,
        r.idle_gpu_hours_while_jobs_waited,
        r.preemptions,
        r.gpu_hours_lost_to_preemption,
    );
}

fn main() {
    let cluster = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let waits: Vec<(String, i64)> =
        std::env::args().skip(1).filter_map(|a| allot::duration::parse_duration(&a).ok().map(|s| (format!("large_job_wait {a}"), s))).collect();
    let waits =
        if waits.is_empty() { vec![("off".to_string(), 0), ("large_job_wait 1d".into(), 86_400), ("large_job_wait 6h".into(), 6 * 3600)] } else { waits };
    let mut workloads: Vec<(String, Workload, BudgetTree)> = Vec::new();
    for seed in [1, 2, 3] {
        let generated = scenario(&ScenarioParams { load: 2.0, seed, ..ScenarioParams::default() });
        workloads.push((format!("generated, load 2, seed {seed}"), generated.workload, BudgetTree::parse(&generated.budget_toml).expect("generated budget")));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/philly-2017-10.csv");
    let trace = Workload::from_csv(std::fs::File::open(&path).expect("the vendored October month"), false).expect("the vendored trace");
    let derived = derive(&trace, &DeriveParams { seed: 1, copies: 1, runtime_scale: 1.0 }, cluster.gpus_per_node);
    let tree = equal_share_budget(&derived).expect("equal shares");
    workloads.push(("Philly 2017-10".into(), derived, tree));
    println!("| workload | rule 6 | >32 GPUs p50 / p90 | 9-32 p50 / p90 | debug p90 | training p90 | free sweeps p90 | lowest delivered / owed | occupancy | idle while waiting (GPU-h) | preemptions | GPU-h lost |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, workload, tree) in &workloads {
        for (knob, secs) in &waits {
            let mut cfg = Config::new(cluster, tree.clone(), PolicyKind::Allot);
            cfg.small_job_nodes = shipped_small_job_nodes(cluster.nodes);
            cfg.tree.settings.large_job_wait = *secs;
            let sim = simulate(workload, &cfg, &mut |_| {});
            row(name, knob, &sim.report);
        }
    }
}
