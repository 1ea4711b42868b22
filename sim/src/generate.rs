//! Workloads no trace has, and the columns the Philly trace lacks.
//!
//! Both are seeded (ChaCha8): the same parameters and seed give the same
//! jobs, byte for byte. The rules are documented in docs/src/simulator/generator.md; the
//! constants below are those rules.

use allot::budget::BudgetTree;
use allot::contract::PriorityLevel;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::ClusterSpec;
use crate::workload::{Job, Workload};

const MINUTE: i64 = 60;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// Parameters of a generated scenario.
#[derive(Debug, Clone)]
pub struct ScenarioParams {
    pub cluster: ClusterSpec,
    pub days: f64,
    pub teams: u32,
    /// Mean GPUs wanted by all submissions over the cluster's GPUs (2.5 =
    /// two and a half times what the cluster can run).
    pub load: f64,
    pub seed: u64,
}

impl Default for ScenarioParams {
    fn default() -> Self {
        ScenarioParams { cluster: ClusterSpec { nodes: 75, gpus_per_node: 8 }, days: 30.0, teams: 12, load: 1.2, seed: 1 }
    }
}

/// A generated scenario: the jobs and the budget that goes with them.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub workload: Workload,
    pub budget_toml: String,
}

/// One standard normal draw (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]
    let u2: f64 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64, lo: f64, hi: f64) -> i64 {
    (median * (sigma * normal(rng)).exp()).clamp(lo, hi).round() as i64
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, table: &[(f64, T)]) -> T {
    let total: f64 = table.iter().map(|e| e.0).sum();
    let mut x = rng.gen::<f64>() * total;
    for &(w, v) in table {
        if x < w {
            return v;
        }
        x -= w;
    }
    table[table.len() - 1].1
}

/// Minimum runtimes of debug jobs and of training jobs, equally likely, in
/// the scenario and in the trace rule.
const DEBUG_MIN_RUNTIMES: [(f64, i64); 3] = [(1.0, 5 * MINUTE), (1.0, 10 * MINUTE), (1.0, 15 * MINUTE)];
const TRAINING_MIN_RUNTIMES: [(f64, i64); 4] = [(1.0, HOUR), (1.0, 2 * HOUR), (1.0, 4 * HOUR), (1.0, 8 * HOUR)];

/// Job kinds of the scenario, by share of submissions.
const KINDS: [(f64, &str); 5] = [(0.62, "debug"), (0.24, "training"), (0.015, "multinode"), (0.10, "sweep"), (0.025, "interactive")];

/// One job of `kind` (gpus, runtime, min_runtime, resumable, priority), per the table of docs/src/simulator/generator.md.
fn job_shape(rng: &mut ChaCha8Rng, kind: &str, gpus_per_node: u32) -> (u32, i64, i64, bool, PriorityLevel) {
    use PriorityLevel::*;
    let node = gpus_per_node;
    match kind {
        // Many small, short debug jobs: at most 8 GPUs (one node), minimum runtime 15 minutes or less.
        "debug" => {
            let gpus = pick(rng, &[(0.65, 1), (0.2, 2), (0.1, 4), (0.05, 8)]).min(node);
            let runtime = lognormal(rng, 12.0 * MINUTE as f64, 0.8, 60.0, 2.0 * HOUR as f64);
            let min_runtime = pick(rng, &DEBUG_MIN_RUNTIMES);
            (gpus, runtime, min_runtime, false, High)
        }
        "training" => {
            let gpus = pick(rng, &[(0.4, 1), (0.25, 2), (0.2, 4), (0.15, 8)]).min(node);
            let runtime = lognormal(rng, 2.0 * HOUR as f64, 1.1, 20.0 * MINUTE as f64, 7.0 * DAY as f64);
            let min_runtime = pick(rng, &TRAINING_MIN_RUNTIMES);
            let resumable = rng.gen::<f64>() < 0.9;
            (gpus, runtime, min_runtime, resumable, pick(rng, &[(0.9, Normal), (0.1, Low)]))
        }
        // Long multi-node training: whole nodes.
        "multinode" => {
            let nodes = pick(rng, &[(0.5, 2), (0.35, 4), (0.15, 8)]);
            let runtime = lognormal(rng, 10.0 * HOUR as f64, 0.8, 2.0 * HOUR as f64, 10.0 * DAY as f64);
            let min_runtime = pick(rng, &[(1.0, 4 * HOUR), (1.0, 8 * HOUR)]);
            (nodes * node, runtime, min_runtime, rng.gen::<f64>() < 0.95, Normal)
        }
        // Hyper-parameter sweeps that run free: unallocated, resumable.
        "sweep" => {
            let gpus = pick(rng, &[(0.8, 1), (0.2, 2)]).min(node);
            let runtime = lognormal(rng, 2.0 * HOUR as f64, 0.7, 10.0 * MINUTE as f64, 2.0 * DAY as f64);
            (gpus, runtime, 0, true, Low)
        }
        // Squatting: an interactive session that holds GPUs for days, mostly idle.
        _ => {
            let gpus = pick(rng, &[(0.5, 1), (0.3, 2), (0.2, 4)]).min(node);
            let runtime = rng.gen_range(DAY..3 * DAY);
            (gpus, runtime, 8 * HOUR, false, Normal)
        }
    }
}

/// How much a team's submissions rise during a burst.
const BURST: f64 = 2.5;

/// Demand multiplier at time `t` (seconds from the start): a working-day
/// cycle (peak mid-afternoon, trough at night), quieter weekends, and the
/// team's bursts (deadlines) at three times the rate.
fn seasonal(t: i64, bursts: &[(i64, i64)]) -> f64 {
    let hour = (t % DAY) as f64 / HOUR as f64;
    let daily = 1.0 + 0.5 * (std::f64::consts::TAU * (hour - 9.0) / 24.0).sin();
    let weekday = (t / DAY) % 7;
    let weekly = if weekday >= 5 { 0.6 } else { 1.0 };
    let burst = if bursts.iter().any(|&(a, b)| t >= a && t < b) { BURST } else { 1.0 };
    daily * weekly * burst
}

/// Bursty, seasonal demand per team, in total `load` times the cluster.
/// See docs/src/simulator/generator.md for the mix.
pub fn scenario(p: &ScenarioParams) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let span = (p.days * DAY as f64).round() as i64;
    let teams = p.teams.max(1) as usize;
    // Departments of up to four teams: a two-level budget tree.
    let depts = teams.div_ceil(4);
    let dept_share: Vec<u32> = (0..depts).map(|_| rng.gen_range(1..=3)).collect();
    let team_share: Vec<u32> = (0..teams).map(|_| rng.gen_range(1..=3)).collect();
    let dept_of = |t: usize| t % depts;
    let mut effective = vec![0.0; teams];
    for t in 0..teams {
        let d = dept_of(t);
        let siblings: u32 = (0..teams).filter(|&u| dept_of(u) == d).map(|u| team_share[u]).sum();
        effective[t] = dept_share[d] as f64 / dept_share.iter().sum::<u32>() as f64 * team_share[t] as f64 / siblings as f64;
    }
    // Each team wants its share times the load, times an appetite of 0.4 to 1.6:
    // some teams leave part of their share to others, some want far more.
    let appetite: Vec<f64> = (0..teams).map(|_| rng.gen_range(0.4..1.6)).collect();
    let norm: f64 = (0..teams).map(|t| effective[t] * appetite[t]).sum();
    let names: Vec<String> = (0..teams).map(|t| format!("team{:02}", t + 1)).collect();

    // Mean GPU-seconds of one job, from a fixed sample of the mix.
    let mean_job = {
        let mut r = ChaCha8Rng::seed_from_u64(0x5eed);
        let n = 20_000;
        (0..n)
            .map(|_| {
                let kind = pick(&mut r, &KINDS);
                let (g, rt, ..) = job_shape(&mut r, kind, p.cluster.gpus_per_node);
                p.cluster.held_gpus(g) as f64 * rt as f64
            })
            .sum::<f64>()
            / n as f64
    };

    let mut kinds: Vec<String> = KINDS.iter().map(|k| k.1.to_owned()).collect();
    kinds.sort();
    let kind_index = |k: &str| kinds.iter().position(|x| x == k).expect("known kind") as u32;
    let mut jobs = Vec::new();
    for t in 0..teams {
        // Bursts: about one a week, one to three days long.
        let mut bursts = Vec::new();
        let mut at = 0i64;
        loop {
            at += (-(1.0 - rng.gen::<f64>()).ln() * 7.0 * DAY as f64) as i64;
            if at >= span {
                break;
            }
            bursts.push((at, at + rng.gen_range(DAY..3 * DAY)));
        }
        // Mean multiplier over the span, so the load comes out as asked.
        let step = 600;
        let mean_mult = (0..span.max(step) / step).map(|i| seasonal(i * step, &bursts)).sum::<f64>() / (span.max(step) / step) as f64;
        let gpus_wanted = p.load * p.cluster.capacity() as f64 * effective[t] * appetite[t] / norm;
        let rate = gpus_wanted / mean_job / mean_mult; // jobs per second at multiplier 1
        let peak = 1.5 * BURST; // largest multiplier: daily peak x burst
                                // Thinning: candidates at the peak rate, kept in proportion to the multiplier.
        let mut time = 0.0f64;
        loop {
            time += -(1.0 - rng.gen::<f64>()).ln() / (rate * peak);
            let ts = time as i64;
            if ts >= span {
                break;
            }
            if rng.gen::<f64>() * peak >= seasonal(ts, &bursts) {
                continue;
            }
            let kind = pick(&mut rng, &KINDS);
            let (gpus, runtime, min_runtime, resumable, priority) = job_shape(&mut rng, kind, p.cluster.gpus_per_node);
            let user = format!("{}-u{}", names[t], zipf_user(&mut rng, 8));
            jobs.push(Job {
                job_id: 0,
                submit: ts,
                gpus,
                runtime,
                team: t as u32,
                user: Some(user),
                min_runtime: Some(min_runtime),
                resumable,
                priority,
                kind: kind_index(kind),
            });
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.team));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    let workload = Workload::from_parts(jobs, names.clone(), kinds);

    let mut toml = String::new();
    toml.push_str(&format!(
        "# Generated by `allot simulate generate scenario --seed {} --teams {} --days {} --load {} --cluster {}`.\n",
        p.seed, p.teams, p.days, p.load, p.cluster
    ));
    toml.push_str("[cluster]\nlookback = \"7d\"\nmin_runtime_cap = \"8h\"\ndefault_min_runtime = \"1h\"\ngrace = \"5m\"\npreempt_margin = 0.1\n");
    toml.push_str(&format!("gpus = {}\n\n[budget]\n", p.cluster.capacity()));
    for (d, share) in dept_share.iter().enumerate() {
        toml.push_str(&format!("\n[budget.dept{}]\nshare = {share}\n", d + 1));
        for t in (0..teams).filter(|&t| dept_of(t) == d) {
            toml.push_str(&format!("\n[budget.dept{}.{}]\nshare = {}\naccounts = [\"{}\"]\n", d + 1, names[t], team_share[t], names[t]));
            toml.push_str(&members_line(&workload, &names[t]));
        }
    }
    Scenario { workload, budget_toml: toml }
}

/// `members = [...]`: the users of `team`'s jobs, so that the budget admits
/// them on a real cluster (`allot replay`) as the simulator does.
fn members_line(workload: &Workload, team: &str) -> String {
    let Some(team) = workload.teams.iter().position(|t| t == team).map(|i| i as u32) else { return String::new() };
    let users: std::collections::BTreeSet<&str> = workload.jobs.iter().filter(|j| j.team == team).filter_map(|j| j.user.as_deref()).collect();
    if users.is_empty() {
        return String::new();
    }
    format!("members = [{}]\n", users.iter().map(|u| format!("\"{u}\"")).collect::<Vec<_>>().join(", "))
}

/// The debug-under-overload class (docs/src/simulator/debug-overload.md): large resumable training
/// jobs at a multiple of capacity from every team, a steady trickle of
/// small short debug jobs, and free fillers. See docs/src/simulator/generator.md.
#[derive(Debug, Clone)]
pub struct DebugParams {
    pub cluster: ClusterSpec,
    pub days: f64,
    /// Budget shares, one team per entry.
    pub shares: Vec<u32>,
    /// Training GPU-time wanted over the cluster's (2.5: two and a half times capacity).
    pub load: f64,
    pub debug_per_team: u32,
    pub fillers_per_team: u32,
    /// Priority the debug jobs declare (`normal`: none declared).
    pub debug_priority: PriorityLevel,
    /// Teams whose training arrives in bursts: a third of the days, at three
    /// times the rate (the same total).
    pub bursty_teams: u32,
    /// Teams whose training jobs are never past their minimum runtime (it
    /// is their whole runtime, 4 to 8 h): their debug jobs have no teammate
    /// to preempt.
    pub pinned_teams: u32,
    /// The whole nodes a training job takes, the fewest and the most
    /// (uniform between).
    pub training_nodes: (u32, u32),
    pub seed: u64,
}

/// The variants of the debug scenario, by name.
pub const DEBUG_VARIANTS: [&str; 7] = ["base", "load3", "unequal", "bursty", "pinned", "undeclared", "narrow"];

impl DebugParams {
    /// `base`: 32x8, 14 days, 6 equal teams, training at 2.5x capacity, 300
    /// debug jobs and 100 fillers per team, debug jobs at priority high.
    pub fn base(seed: u64) -> DebugParams {
        DebugParams {
            cluster: ClusterSpec { nodes: 32, gpus_per_node: 8 },
            days: 14.0,
            shares: vec![1; 6],
            load: 2.5,
            debug_per_team: 300,
            fillers_per_team: 100,
            debug_priority: PriorityLevel::High,
            bursty_teams: 0,
            pinned_teams: 0,
            training_nodes: (2, 8),
            seed,
        }
    }

    /// A variant of [`Self::base`] by name (see [`DEBUG_VARIANTS`]).
    pub fn variant(name: &str, seed: u64) -> Option<DebugParams> {
        let b = DebugParams::base(seed);
        Some(match name {
            "base" => b,
            "load3" => DebugParams { load: 3.0, ..b },
            "unequal" => DebugParams { shares: vec![1, 1, 2, 2, 4, 6], ..b },
            "bursty" => DebugParams { bursty_teams: 3, ..b },
            "pinned" => DebugParams { pinned_teams: 1, ..b },
            "undeclared" => DebugParams { debug_priority: PriorityLevel::Normal, ..b },
            // Training of one or two nodes (8-16 GPUs, at most 3/8 of a
            // team's 42-GPU share) instead of two to eight (16-64 GPUs).
            "narrow" => DebugParams { training_nodes: (1, 2), ..b },
            _ => return None,
        })
    }
}

/// Generates the debug-under-overload scenario and its (flat) budget.
/// Per team, by share of the training load:
/// - `training`: `training_nodes` whole nodes (base: 2 to 8, 16-64 GPUs on 8-GPU nodes), runtime
///   4 to 24 h (uniform), minimum runtime 2, 4, 6 or 8 h, resumable,
///   priority normal; Poisson arrivals over the span (bursty teams: in
///   bursts, see [`DebugParams::bursty_teams`]);
/// - `debug`: `debug_per_team`, 1 GPU (70%) or 2, runtime 5 to 15 min,
///   minimum runtime 10 min, not resumable, priority `debug_priority`,
///   uniform over the span;
/// - `filler`: `fillers_per_team`, unallocated (`min_runtime=0`), 1 to 8
///   GPUs, runtime 1 to 12 h, resumable, priority low, uniform over the span.
pub fn debug_scenario(p: &DebugParams) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let span = (p.days * DAY as f64).round() as i64;
    let teams = p.shares.len().max(1);
    let g = p.cluster.gpus_per_node;
    let names: Vec<String> = (0..teams).map(|t| format!("team{:02}", t + 1)).collect();
    let total_share: u32 = p.shares.iter().sum::<u32>().max(1);
    let kinds: Vec<String> = ["debug", "filler", "training"].iter().map(|k| k.to_string()).collect();
    let mut jobs = Vec::new();
    let push = |jobs: &mut Vec<Job>,
                rng: &mut ChaCha8Rng,
                t: usize,
                submit: i64,
                gpus: u32,
                runtime: i64,
                min_runtime: i64,
                resumable: bool,
                priority: PriorityLevel,
                kind: u32| {
        let user = format!("{}-u{}", names[t], zipf_user(rng, 4));
        jobs.push(Job { job_id: 0, submit, gpus, runtime, team: t as u32, user: Some(user), min_runtime: Some(min_runtime), resumable, priority, kind });
    };
    // Mean GPU-seconds of a training job (uniform nodes x uniform 4..24 h).
    let (fewest, most) = (p.training_nodes.0.max(1), p.training_nodes.1.max(p.training_nodes.0.max(1)));
    let mean_training = (fewest + most) as f64 / 2.0 * g as f64 * 14.0 * HOUR as f64;
    for t in 0..teams {
        let share = p.shares.get(t).copied().unwrap_or(1) as f64 / total_share as f64;
        let wanted = p.load * p.cluster.capacity() as f64 * span as f64 * share;
        let n = (wanted / mean_training).round() as u32;
        let pinned = (t as u32) < p.pinned_teams;
        let bursty = !pinned && (t as u32) >= p.pinned_teams && ((t - p.pinned_teams as usize) as u32) < p.bursty_teams;
        // Bursty: two-day bursts covering a third of the span, at random
        // (on a span under six days, bursts of a third of it, so that every
        // submission stays within the span).
        let burst = (2 * DAY).min(span / 3).max(1);
        let bursts: Vec<i64> = if bursty {
            let k = ((span as f64 / 3.0) / burst as f64).ceil().max(1.0) as usize;
            (0..k).map(|_| rng.gen_range(0..(span - burst).max(1))).collect()
        } else {
            Vec::new()
        };
        for _ in 0..n {
            let submit = if bursty { bursts[rng.gen_range(0..bursts.len())] + rng.gen_range(0..burst) } else { rng.gen_range(0..span) };
            let nodes = rng.gen_range(fewest..=most);
            let (runtime, min_runtime) = if pinned {
                let r = rng.gen_range(4 * HOUR..=8 * HOUR);
                (r, r)
            } else {
                (rng.gen_range(4 * HOUR..=24 * HOUR), pick(&mut rng, &[(1.0, 2 * HOUR), (1.0, 4 * HOUR), (1.0, 6 * HOUR), (1.0, 8 * HOUR)]))
            };
            push(&mut jobs, &mut rng, t, submit, nodes * g, runtime, min_runtime, true, PriorityLevel::Normal, 2);
        }
        for _ in 0..p.debug_per_team {
            let submit = rng.gen_range(0..span);
            let gpus = pick(&mut rng, &[(0.7, 1), (0.3, 2)]).min(g);
            let runtime = rng.gen_range(5 * MINUTE..=15 * MINUTE);
            push(&mut jobs, &mut rng, t, submit, gpus, runtime, 10 * MINUTE, false, p.debug_priority, 0);
        }
        for _ in 0..p.fillers_per_team {
            let submit = rng.gen_range(0..span);
            let gpus = rng.gen_range(1..=g);
            let runtime = rng.gen_range(HOUR..=12 * HOUR);
            push(&mut jobs, &mut rng, t, submit, gpus, runtime, 0, true, PriorityLevel::Low, 1);
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.team, j.kind, j.gpus, j.runtime));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    let workload = Workload::from_parts(jobs, names.clone(), kinds);
    let mut toml = format!(
        "# Generated by `allot simulate generate debug` (seed {}, {} teams, {} days, training load {}, cluster {}).\n",
        p.seed, teams, p.days, p.load, p.cluster
    );
    toml.push_str("[cluster]\nlookback = \"7d\"\nmin_runtime_cap = \"8h\"\ndefault_min_runtime = \"1h\"\ngrace = \"5m\"\npreempt_margin = 0.1\n");
    toml.push_str(&format!("gpus = {}\n\n[budget]\n", p.cluster.capacity()));
    for (t, name) in names.iter().enumerate() {
        toml.push_str(&format!("\n[budget.{name}]\nshare = {}\naccounts = [\"{name}\"]\n", p.shares.get(t).copied().unwrap_or(1)));
        toml.push_str(&members_line(&workload, name));
    }
    Scenario { workload, budget_toml: toml }
}

/// User 1..=n, user k with weight 1/k: a few users submit most jobs.
fn zipf_user(rng: &mut ChaCha8Rng, n: u32) -> u32 {
    let table: Vec<(f64, u32)> = (1..=n).map(|k| (1.0 / k as f64, k)).collect();
    pick(rng, &table)
}

/// How to turn a trace without contracts (Philly) into a full workload.
#[derive(Debug, Clone)]
pub struct DeriveParams {
    pub seed: u64,
    /// Each job appears this many times; copy `c > 0` is shifted by up to
    /// an hour either way, so copies do not arrive in lockstep.
    pub copies: u32,
    /// Runtimes are multiplied by this (at least 1 s).
    pub runtime_scale: f64,
}

impl Default for DeriveParams {
    fn default() -> Self {
        DeriveParams { seed: 1, copies: 1, runtime_scale: 1.0 }
    }
}

/// Fills in what a trace lacks, by the seeded rule of docs/src/simulator/input.md:
/// - kind `debug` when the job ran 30 minutes or less on at most one node,
///   `training` otherwise, except that a tenth of training jobs on one or
///   two GPUs become `sweep` (unallocated, `min_runtime=0`, low priority);
/// - debug: minimum runtime 5, 10 or 15 minutes, priority high, not resumable;
/// - training: minimum runtime 1, 2, 4 or 8 hours, 80% resumable, a tenth at
///   low priority;
/// - user: `<team>-u<k>`, k from 1 to 8 with weight 1/k.
///
/// Columns the trace has are kept (a present `min_runtime_s` is not redrawn).
pub fn derive(trace: &Workload, d: &DeriveParams, gpus_per_node: u32) -> Workload {
    use PriorityLevel::*;
    let mut rng = ChaCha8Rng::seed_from_u64(d.seed);
    let mut kinds: Vec<String> = trace.kinds.clone();
    let mut kind_id = |name: &str| -> u32 {
        match kinds.iter().position(|k| k == name) {
            Some(i) => i as u32,
            None => {
                kinds.push(name.to_owned());
                (kinds.len() - 1) as u32
            }
        }
    };
    let unspecified = trace.kinds.iter().position(|k| k == crate::workload::UNSPECIFIED_KIND).map(|i| i as u32);
    let mut jobs = Vec::with_capacity(trace.jobs.len() * d.copies.max(1) as usize);
    for copy in 0..d.copies.max(1) {
        for j in &trace.jobs {
            let mut job = j.clone();
            // Draw everything every time, so one job's draws do not depend on the columns present.
            let shift = rng.gen_range(-HOUR..=HOUR);
            let user = zipf_user(&mut rng, 8);
            let debug_min = pick(&mut rng, &DEBUG_MIN_RUNTIMES);
            let train_min = pick(&mut rng, &TRAINING_MIN_RUNTIMES);
            let sweep = rng.gen::<f64>() < 0.1;
            let resumable = rng.gen::<f64>() < 0.8;
            let low = rng.gen::<f64>() < 0.1;

            if copy > 0 {
                job.submit = (job.submit + shift).max(0);
            }
            job.runtime = ((job.runtime as f64 * d.runtime_scale).round() as i64).max(1);
            if job.user.is_none() {
                job.user = Some(format!("{}-u{user}", trace.teams[job.team as usize]));
            }
            let needs_kind = Some(job.kind) == unspecified;
            let is_debug = j.runtime <= 30 * MINUTE && j.gpus <= gpus_per_node;
            let is_sweep = !is_debug && sweep && j.gpus <= 2;
            if needs_kind {
                job.kind = kind_id(if is_debug {
                    "debug"
                } else if is_sweep {
                    "sweep"
                } else {
                    "training"
                });
            }
            if job.min_runtime.is_none() {
                job.min_runtime = Some(if is_debug {
                    debug_min
                } else if is_sweep {
                    0
                } else {
                    train_min
                });
                job.resumable = if is_debug { false } else { is_sweep || resumable };
                job.priority = if is_debug {
                    High
                } else if is_sweep || low {
                    Low
                } else {
                    Normal
                };
            }
            jobs.push(job);
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.job_id));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    Workload::from_parts(jobs, trace.teams.clone(), kinds)
}

/// A job shape for [`steady_shaped`]: the k-th job of a team takes
/// `gpus[k % len]` GPUs and runs `runtimes[k * 7919 % len]`.
#[derive(Debug, Clone)]
pub struct Shape {
    pub gpus: Vec<u32>,
    pub runtimes: Vec<i64>,
    /// `None`: min_runtime = the runtime (never preemptible).
    pub min_runtime: Option<i64>,
    /// Demand as a multiple of the team's share.
    pub load: f64,
    /// 0: no shift; otherwise each team's submissions and
    /// job mix are shifted by an amount drawn from this number.
    pub seed: u64,
}

impl Shape {
    /// 1-2 GPUs, 1-3 h, min_runtime 1h, twice the share.
    pub fn steady() -> Shape {
        Shape { gpus: vec![1, 2], runtimes: vec![HOUR, 2 * HOUR, 3 * HOUR], min_runtime: Some(HOUR), load: 2.0, seed: 0 }
    }
    pub fn mean_job(&self) -> f64 {
        let g = self.gpus.iter().map(|&g| g as f64).sum::<f64>() / self.gpus.len() as f64;
        let r = self.runtimes.iter().map(|&r| r as f64).sum::<f64>() / self.runtimes.len() as f64;
        g * r
    }
}

/// Steady demand: every team submits, for `days`, `shape.load` times what
/// its share can run, jobs of `shape` (`Shape::steady()`: twice the share,
/// 1- and 2-GPU jobs of 1 to 3 hours).
pub fn steady_shaped(tree: &BudgetTree, cluster: ClusterSpec, days: i64, shape: &Shape) -> Workload {
    let mut jobs = Vec::new();
    let teams: Vec<String> = tree.leaves.iter().map(|&id| tree.node(id).accounts[0].clone()).collect();
    let mean_job = shape.mean_job();
    for (t, _) in teams.iter().enumerate() {
        let share = tree.leaf_node(t as u32).effective_share;
        let gpus_wanted = shape.load * share * cluster.capacity() as f64;
        let interval = (mean_job / gpus_wanted).round() as i64;
        // seed 0: no shift.
        let mix = (shape.seed as i64).wrapping_mul(2_654_435_761).wrapping_mul(t as i64 + 1).rem_euclid(1 << 20);
        let offset = if shape.seed == 0 { 0 } else { mix % interval };
        let mut k = 0i64;
        while offset + k * interval < days * DAY {
            let kk = k + mix;
            let runtime = shape.runtimes[(kk * 7919) as usize % shape.runtimes.len()];
            jobs.push(Job {
                job_id: 0,
                submit: offset + k * interval,
                gpus: shape.gpus[kk as usize % shape.gpus.len()],
                runtime,
                team: t as u32,
                user: None,
                min_runtime: Some(shape.min_runtime.unwrap_or(runtime)),
                resumable: true,
                priority: PriorityLevel::Normal,
                kind: 0,
            });
            k += 1;
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.team));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    Workload::from_parts(jobs, teams, vec!["steady".into()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot::budget::BudgetTree;

    fn small() -> ScenarioParams {
        ScenarioParams { cluster: ClusterSpec { nodes: 8, gpus_per_node: 8 }, days: 7.0, teams: 6, load: 2.5, seed: 7 }
    }

    #[test]
    fn scenario_is_deterministic_and_valid() {
        let a = scenario(&small());
        let b = scenario(&small());
        assert_eq!(a.workload, b.workload);
        assert_eq!(a.budget_toml, b.budget_toml);
        let c = scenario(&ScenarioParams { seed: 8, ..small() });
        assert_ne!(a.workload, c.workload);
        let tree = BudgetTree::parse(&a.budget_toml).unwrap_or_else(|e| panic!("{e}\n{}", a.budget_toml));
        assert_eq!(tree.leaves.len(), 6);
        // Round trip through CSV.
        let mut out = Vec::new();
        a.workload.to_csv(&mut out).unwrap();
        assert_eq!(Workload::from_csv(out.as_slice(), false).unwrap(), a.workload);
    }

    #[test]
    fn scenario_has_the_promised_shape() {
        let s = scenario(&small());
        let w = &s.workload;
        let kind = |j: &Job| w.kinds[j.kind as usize].as_str();
        // Offered load about 2.5x capacity (GPU-seconds wanted / capacity x span).
        let wanted: f64 = w.jobs.iter().map(|j| j.gpus as f64 * j.runtime as f64).sum();
        let load = wanted / (64.0 * 7.0 * DAY as f64);
        assert!((1.5..4.0).contains(&load), "offered load {load}");
        let debug: Vec<&Job> = w.jobs.iter().filter(|j| kind(j) == "debug").collect();
        assert!(debug.len() * 3 > w.jobs.len(), "many debug jobs");
        assert!(debug.iter().all(|j| j.gpus <= 8 && j.min_runtime.unwrap() <= 15 * MINUTE));
        assert!(w.jobs.iter().any(|j| kind(j) == "multinode" && j.gpus > 8 && j.runtime > 2 * HOUR));
        assert!(w.jobs.iter().any(|j| kind(j) == "interactive" && j.runtime >= DAY));
        assert!(w.jobs.iter().any(|j| j.min_runtime == Some(0)));
    }

    #[test]
    fn derive_fills_missing_columns_by_rule() {
        let csv = "job_id,submit_s,team,gpus,runtime_s\n0,0,a,1,600\n1,10,a,4,7200\n2,20,b,16,36000\n";
        let trace = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let w = derive(&trace, &DeriveParams::default(), 8);
        assert_eq!(w, derive(&trace, &DeriveParams::default(), 8));
        let kind = |i: usize| w.kinds[w.jobs[i].kind as usize].as_str();
        assert_eq!(kind(0), "debug");
        assert!(w.jobs[0].min_runtime.unwrap() <= 15 * MINUTE);
        assert_eq!(w.jobs[0].priority, PriorityLevel::High);
        assert!(!w.jobs[0].resumable);
        assert_eq!(kind(2), "training");
        assert!(w.jobs[2].min_runtime.unwrap() >= HOUR);
        assert!(w.jobs.iter().all(|j| j.user.is_some()));
        let three = derive(&trace, &DeriveParams { copies: 3, runtime_scale: 0.5, seed: 2 }, 8);
        assert_eq!(three.jobs.len(), 9);
        assert!(three.jobs.iter().all(|j| [300, 3600, 18000].contains(&j.runtime)));
        assert_eq!(three.ids().len(), 9);
    }
}
