//! Simulator speed, as figures: `cargo bench -p allot-sim --bench throughput`.
//!
//! One thread (the engine has only one), release profile. Each case runs
//! several times; the table gives the fastest and the median wall-clock
//! time of the simulation itself (`sim_seconds`: workload generation,
//! loading and the report are not timed), and simulated days per second.
//!
//! Cases (documented in docs/src/simulator/speed.md):
//! - `month, generated`: `allot simulate generate scenario` defaults: a
//!   month of a 75x8 (600-GPU) cluster, 12 teams, about 42,000 jobs;
//! - `month, Philly x5 /5`: the Philly trace's 10,000 jobs five times over
//!   (copies shifted by up to an hour), runtimes divided by 5: 50,000 real
//!   jobs at the trace's own load on 600 GPUs;
//! - `month, Philly x5`: the same at full runtimes, 2.9 times the cluster,
//!   stopped after 30 days;
//! - `Philly 2017-10`: the vendored October 2017 month of the Philly trace
//!   (47,192 jobs), its missing columns derived with seed 1 (as
//!   `allot simulate generate trace --seed 1`), on 600 GPUs, 53 days;
//! - `300k jobs, generated`: the generated scenario over 215 days.
//!
//! `allot-np` is allot with preemption off (`preempt_max_job_test = 0`):
//! fair-share order, main scheduler and backfill only, so the difference
//! to `allot` is what preemption's searches cost.
//!
//! Every case also runs a **bare event loop** (`bare`): the same jobs,
//! first come first served on first-fit nodes, no preemption, no backfill,
//! no fair share: the floor of what any event-driven simulation of the
//! workload costs, so the ratio `allot / bare` says what the policy costs.
//!
//! Targets: the October month under allot in under 0.25 s; the
//! 300,000-job run in under 5 s.

// The allocator the `allot` command uses (sidecar/src/main.rs), so the
// figures are the command's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
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

fn trace(env: &str, file: &str) -> Option<Workload> {
    let path = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data").join(file));
    let file = std::fs::File::open(&path).ok()?;
    Workload::from_csv(file, false).ok()
}

/// First come first served on first-fit nodes, without preemption or
/// backfill: the head of the queue waits until it fits, the rest behind it.
/// Returns (seconds, simulated days). Jobs larger than the cluster are skipped.
fn bare_event_loop(workload: &Workload, cluster: ClusterSpec, horizon: Option<i64>) -> (f64, f64) {
    let started = Instant::now();
    let g = cluster.gpus_per_node;
    let mut free = vec![g; cluster.nodes as usize];
    // (end, job): the running jobs; each job's slots in `held`.
    let mut ends: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    let mut held: Vec<Vec<(usize, u32)>> = vec![Vec::new(); workload.jobs.len()];
    let mut queue: VecDeque<usize> = VecDeque::new();
    let (mut next, mut now) = (0, workload.span().0);
    let horizon = horizon.unwrap_or(i64::MAX);
    loop {
        let submit = workload.jobs.get(next).map(|j| j.submit);
        let end = ends.peek().map(|Reverse((t, _))| *t);
        let t = match (submit, end) {
            (Some(s), Some(e)) => s.min(e),
            (Some(s), None) => s,
            (None, Some(e)) => e,
            (None, None) => break,
        };
        if t > horizon {
            break;
        }
        now = t;
        while let Some(&Reverse((e, j))) = ends.peek() {
            if e != now {
                break;
            }
            ends.pop();
            for (n, k) in held[j].drain(..) {
                free[n] += k;
            }
        }
        while workload.jobs.get(next).is_some_and(|j| j.submit == now) {
            if workload.jobs[next].gpus <= cluster.capacity() {
                queue.push_back(next);
            }
            next += 1;
        }
        while let Some(&j) = queue.front() {
            let need = workload.jobs[j].gpus;
            if free.iter().sum::<u32>() < need {
                break;
            }
            // Within one node if it fits there, else spread over the emptiest first.
            if let Some(n) = free.iter().position(|&f| f >= need) {
                free[n] -= need;
                held[j].push((n, need));
            } else {
                let mut left = need;
                let mut order: Vec<usize> = (0..free.len()).collect();
                order.sort_by_key(|&n| Reverse(free[n]));
                for n in order {
                    let k = free[n].min(left);
                    if k > 0 {
                        free[n] -= k;
                        held[j].push((n, k));
                        left -= k;
                    }
                    if left == 0 {
                        break;
                    }
                }
            }
            ends.push(Reverse((now + workload.jobs[j].runtime.max(1), j)));
            queue.pop_front();
        }
    }
    (started.elapsed().as_secs_f64(), (now - workload.span().0) as f64 / 86_400.0)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: then run a quick smoke pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let cluster = ClusterSpec { nodes: 75, gpus_per_node: 8 };
    let mut cases = Vec::new();
    let month = scenario(&ScenarioParams::default());
    cases.push(Case { name: "month, generated", tree: BudgetTree::parse(&month.budget_toml).unwrap(), workload: month.workload, horizon: None, runs: 7 });
    match trace("ALLOT_PHILLY_TRACE", "philly-2017-09.csv") {
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
    match trace("ALLOT_PHILLY_OCTOBER", "philly-2017-10.csv") {
        Some(trace) => {
            let october = derive(&trace, &DeriveParams { seed: 1, copies: 1, runtime_scale: 1.0 }, 8);
            cases.push(Case { name: "Philly 2017-10", tree: equal_share_budget(&october).unwrap(), workload: october, horizon: None, runs: 9 });
        }
        None => eprintln!("(sim/data/philly-2017-10.csv is missing: its case is skipped; set ALLOT_PHILLY_OCTOBER)"),
    }
    if !quick {
        let long = scenario(&ScenarioParams { days: 215.0, ..ScenarioParams::default() });
        cases.push(Case { name: "300k jobs, generated", tree: BudgetTree::parse(&long.budget_toml).unwrap(), workload: long.workload, horizon: None, runs: 3 });
    }

    println!("{:<22} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8}", "case", "policy", "jobs", "days", "min s", "median s", "days/s", "jobs/s", "/bare");
    for case in &cases {
        let runs = if quick { 1 } else { case.runs };
        let mut bare = Vec::new();
        let mut bare_days = 0.0;
        for _ in 0..runs {
            let (seconds, days) = bare_event_loop(&case.workload, cluster, case.horizon);
            bare.push(seconds);
            bare_days = days;
        }
        bare.sort_by(f64::total_cmp);
        let bare_min = bare[0];
        print_row(case, "bare", bare_days, &bare, bare_min);
        for (label, policy, preempt) in [("allot", PolicyKind::Allot, true), ("allot-np", PolicyKind::Allot, false), ("baseline", PolicyKind::Baseline, true)] {
            let mut cfg = Config::new(cluster, case.tree.clone(), policy);
            cfg.horizon = case.horizon;
            if !preempt {
                cfg.preempt_max_job_test = 0;
            }
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
            print_row(case, label, days, &times, bare_min);
        }
    }
}

/// One line of the table; `times` sorted; the last column is the fastest
/// run over the bare loop's fastest.
fn print_row(case: &Case, label: &str, days: f64, times: &[f64], bare_min: f64) {
    let (min, median) = (times[0], times[times.len() / 2]);
    let jobs = case.workload.jobs.len();
    println!(
        "{:<22} {:>8} {:>9} {:>6.1} {:>9.3} {:>9.3} {:>9.0} {:>9.0} {:>8.2}",
        case.name,
        label,
        jobs,
        days,
        min,
        median,
        days / median,
        jobs as f64 / median,
        min / bare_min
    );
}
