//! The fragmentation table of docs/src/simulator/fragmentation.md: each knob alone, the two
//! reservation knobs together, and nodes kept for small jobs, on a
//! generated workload at twice the cluster and on the October 2017 Philly
//! month, under allot on 600 GPUs.
//!
//! ```sh
//! cargo run --release -p allot-sim --example fragmentation_table
//! # and the same knobs on two more generated seeds, the September month,
//! # and the October month derived with another seed:
//! cargo run --release -p allot-sim --example fragmentation_table -- --more
//! ```
use allot::budget::BudgetTree;
use allot_sim::generate::{derive, scenario, DeriveParams, ScenarioParams};
use allot_sim::metrics::Report;
use allot_sim::prepare::equal_share_budget;
use allot_sim::{simulate, ClusterSpec, Config, Placement, PolicyKind, Workload};

type Knob = (&'static str, fn(&mut Config));

const KNOBS: [Knob; 6] = [
    ("default (best fit)", |_| {}),
    ("first fit", |c| c.placement = Placement::FirstFit),
    ("preempt around reservation", |c| c.preempt_around_reservation = true),
    ("plan with protection ends", |c| c.plan_with_protection_ends = true),
    ("around reservation + protection ends", |c| {
        c.preempt_around_reservation = true;
        c.plan_with_protection_ends = true;
    }),
    ("8 small-job nodes", |c| c.small_job_nodes = 8),
];

fn wait(secs: Option<i64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s >= 86_400 => format!("{:.1} d", s as f64 / 86_400.0),
        Some(s) if s >= 3_600 => format!("{:.1} h", s as f64 / 3_600.0),
        Some(s) => format!("{:.0} m", s as f64 / 60.0),
    }
}

fn row(workload: &str, knob: &str, r: &Report) {
    let c = r.idle_gpu_hours_by_cause;
    let size = |class: &str| r.by_size.get(class).map(|s| (s.wait_p50_s, s.wait_p90_s));
    let pair = |class: &str| format!("{} / {}", wait(size(class).map(|s| s.0)), wait(size(class).map(|s| s.1)));
    let delivered: f64 = r.teams.iter().map(|t| t.delivered_gpu_hours).sum();
    let owed: f64 = r.teams.iter().map(|t| t.owed_gpu_hours).sum();
    println!(
        "| {workload} | {knob} | {:.0} | {:.0} / {:.0} / {:.0} | {} | {} | {} | {:.3} | {} |",
        r.idle_gpu_hours_while_jobs_waited,
        c.backfill_limits,
        c.whole_node_rule,
        c.no_job_fits,
        pair("33+"),
        pair("9-32"),
        wait(r.by_kind.get("debug").map(|k| k.wait_p90_s)),
        delivered / owed,
        r.preemptions
    );
}

fn main() {
    let cluster = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let more = std::env::args().any(|a| a == "--more");
    let mut workloads: Vec<(String, Workload, BudgetTree)> = Vec::new();
    let seeds: &[u64] = if more { &[2, 3] } else { &[ScenarioParams::default().seed] };
    for &seed in seeds {
        let generated = scenario(&ScenarioParams { load: 2.0, seed, ..ScenarioParams::default() });
        let name = if more { format!("generated, load 2 (30 d), seed {seed}") } else { "generated, load 2 (30 d)".into() };
        workloads.push((name, generated.workload, BudgetTree::parse(&generated.budget_toml).expect("generated budget")));
    }
    let months: &[(&str, u64)] = if more { &[("09", 1), ("10", 2)] } else { &[("10", 1)] };
    for &(month, seed) in months {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("data/philly-2017-{month}.csv"));
        let trace = Workload::from_csv(std::fs::File::open(&path).expect("a vendored Philly month"), false).expect("the vendored trace");
        let derived = derive(&trace, &DeriveParams { seed, copies: 1, runtime_scale: 1.0 }, cluster.gpus_per_node);
        let tree = equal_share_budget(&derived).expect("equal shares");
        let name = if more { format!("Philly 2017-{month}, seed {seed}") } else { format!("Philly 2017-{month}") };
        workloads.push((name, derived, tree));
    }
    println!("| workload | knob | idle while waiting (GPU-h) | limits / whole-node / no fit | >32 GPUs p50 / p90 | 9-32 p50 / p90 | debug p90 | delivered / owed | preemptions |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, workload, tree) in &workloads {
        for (knob, set) in KNOBS {
            let mut cfg = Config::new(cluster, tree.clone(), PolicyKind::Allot);
            set(&mut cfg);
            let sim = simulate(workload, &cfg, &mut |_| {});
            row(name, knob, &sim.report);
        }
    }
}
