//! # allot simulator
//!
//! Replays a workload through a scheduling policy on a model cluster and
//! reports what matters to the people who share it: waits, preemptions,
//! occupancy, and what each budget got against what it was owed.
//!
//! The `allot` policy is not re-implemented here: every ordering and
//! preemption decision calls the policy core (`allot::fairshare::Ranking`,
//! `allot::order::order_jobs`, `allot::preempt::{may_preempt_with,
//! victim_order, grace_for}`, `allot::contract::parse_comment`) with the same types
//! the Slurm plugins use, and charges usage through
//! `allot::occupancy::OccupancyWindow`. The `baseline` policy is the system
//! allot replaces: static priority levels and per-team limits.
//!
//! ```no_run
//! use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Workload};
//! let workload = Workload::from_csv(std::fs::File::open("jobs.csv").unwrap(), false).unwrap();
//! let tree = allot_sim::prepare::equal_share_budget(&workload).unwrap();
//! let cfg = Config::new("75x8".parse::<ClusterSpec>().unwrap(), tree, PolicyKind::Allot);
//! let sim = simulate(&workload, &cfg, &mut |_| {});
//! println!("{}", allot_sim::metrics::table(&[sim.report]));
//! ```
//!
//! Nothing reads the wall clock except the measurement of `sim_seconds`.
#![forbid(unsafe_code)]

pub mod check;
pub mod cluster;
pub mod engine;
pub mod generate;
pub mod metrics;
pub mod plot;
pub mod prepare;
pub mod workload;

pub use cluster::ClusterSpec;
pub use engine::{Config, Fate, IdleByCause, MainClock, Outcome, Placement, PolicyKind, Reach, Run, RunEnd};
pub use metrics::Report;
pub use workload::{Job, Workload};

/// One policy's simulation: the raw outcome and the report.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub outcome: Outcome,
    pub report: Report,
}

/// Simulates `workload` under `cfg`. `progress(fraction)` is called now and
/// then with how far through the workload's span the simulation is.
pub fn simulate(workload: &Workload, cfg: &Config, progress: &mut dyn FnMut(f64)) -> Simulation {
    simulate_prepared(workload, cfg, prepare::prepare(workload, &cfg.tree, cfg.cluster, cfg.small_job_nodes), progress)
}

/// [`simulate`] with the jobs already prepared, by [`prepare::prepare`]
/// with `cfg`'s tree, cluster and kept nodes (the caller has looked at what
/// it refused, and runs several policies on one preparation).
pub fn simulate_prepared(workload: &Workload, cfg: &Config, prepared: prepare::Prepared, progress: &mut dyn FnMut(f64)) -> Simulation {
    let (first, last) = workload.span();
    let span = (last - first).max(1) as f64;
    let mut on_progress = |now: i64| progress(((now - first) as f64 / span).clamp(0.0, 1.0));
    // The one wall-clock read: how long the simulation itself took.
    let started = std::time::Instant::now();
    let outcome = engine::Engine::new(cfg, workload, prepared).run(&mut on_progress);
    let sim_seconds = started.elapsed().as_secs_f64();
    let report = metrics::report(workload, &cfg.tree, cfg.cluster, &outcome, Some(sim_seconds));
    Simulation { outcome, report }
}
