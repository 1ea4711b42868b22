//! The report: what an admin compares between policies.
//!
//! Definitions (also in docs/src/simulator/report.md):
//! - **wait** of a job: its first start minus its submission. A job that
//!   never started counts with the wait it had when the simulation stopped
//!   (a lower bound). Percentiles are nearest-rank over started and waiting
//!   jobs; refused jobs are left out.
//! - **occupancy**: GPU-seconds delivered between the first and the last
//!   submission (or the horizon, if earlier), over the cluster's GPU-seconds
//!   in that span (the drain after the last submission is left out: both
//!   policies end in an idle tail).
//! - **unallocated_fraction**: of all GPU-seconds delivered, the share that
//!   ran without any protection: unallocated (`min_runtime=0`) runs under
//!   allot, runs above the team's limit under baseline.
//! - **owed** to a team (budget leaf), hour by hour: the cluster's GPUs
//!   shared out down the budget tree by share, each node capped at what its
//!   subtree's jobs wanted that hour (queued or running, GPU-seconds / 3600),
//!   the surplus going to siblings still wanting (weighted water-filling).
//!   `owed_gpu_hours` sums the hours; `delivered_over_owed` = delivered / owed.
//! - **delivered**: GPU-seconds the team's jobs held GPUs (all runs, work
//!   later lost included; a job larger than a node holds whole nodes).

use std::collections::BTreeMap;

use allot::budget::BudgetTree;
use serde::Serialize;

use crate::engine::{Outcome, PolicyKind, RunEnd};
use crate::workload::Workload;

mod report;
mod table;

pub use report::report;
pub use table::table;

// The accounting lives in the policy core, which the live report shares.
pub use allot::owed::{
    bucketed, hourly, owed_by_hour, owed_by_hour_allocated_first, owed_by_node, owed_by_node_and_bucket, owed_in_hour, owed_in_hour_by_node, starved_hours,
    water_fill,
};

const HOUR: i64 = 3600;
/// Teams that wanted their share for fewer whole hours are left out of
/// `worst_team_hours_below_half_share` (their ratio is noise).
pub const MIN_WANTING_HOURS: usize = 24;

/// Wait percentiles of a set of jobs, and what preemption cost them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitStats {
    pub jobs: usize,
    pub jobs_completed: usize,
    pub wait_p50_s: i64,
    pub wait_p90_s: i64,
    pub wait_p99_s: i64,
    pub preemptions: usize,
    pub gpu_hours_lost_to_preemption: f64,
}

/// One budget leaf's (team's) numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamStats {
    /// The leaf's path in the budget tree.
    pub team: String,
    pub accounts: Vec<String>,
    pub effective_share: f64,
    pub jobs: usize,
    /// Jobs of the team the policy refused (too large; baseline: over the
    /// team's limit), and the GPU-hours they asked for.
    pub jobs_refused: usize,
    pub refused_gpu_hours: f64,
    pub demand_gpu_hours: f64,
    pub owed_gpu_hours: f64,
    /// Owed over the submission span as if every job of the team had
    /// started at its submission: the same for every policy (see the
    /// book's definitions, docs/src/simulator/report.md).
    pub owed_at_submission_gpu_hours: f64,
    pub delivered_gpu_hours: f64,
    /// Delivered over the submission span (the drain after the last
    /// submission left out).
    pub delivered_in_span_gpu_hours: f64,
    /// `null` when nothing was owed.
    pub delivered_over_owed: Option<f64>,
    /// Owed as the contract owes it: allocated work first, free work
    /// (`min_runtime=0`) only what allocated work left
    /// ([`owed_by_hour_allocated_first`]); `owed_gpu_hours` owes both alike.
    pub owed_allocated_first_gpu_hours: f64,
    /// Delivered over that; `null` when nothing was owed.
    pub delivered_over_owed_allocated_first: Option<f64>,
    /// Delivered in the span over owed at submission; `null` when nothing
    /// was owed at submission.
    pub delivered_over_owed_at_submission: Option<f64>,
    /// Charged to the leaf (allot's allocated runs; 0 under baseline).
    pub charged_gpu_hours: f64,
    /// Whole hours of the submission span in which the team's work (queued
    /// or running) could have used its whole share of the cluster, and of
    /// those, the hours it held less than half of that share: fair over the
    /// window is not fair by the day if a team with a full backlog gets
    /// nothing for hours, then the cluster. See [`starved_hours`].
    pub hours_wanting_share: usize,
    pub hours_below_half_share: usize,
    pub wait_p50_s: i64,
    pub wait_p90_s: i64,
    /// The same as the report's `by_kind`, for this team's jobs.
    pub by_kind: BTreeMap<String, WaitStats>,
}

/// The whole report of one policy on one workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub policy: PolicyKind,
    pub cluster: String,
    pub gpus: u32,
    pub simulated_days: f64,
    pub jobs: usize,
    pub jobs_completed: usize,
    pub jobs_cancelled: usize,
    pub jobs_refused: usize,
    pub jobs_unfinished: usize,
    /// Why jobs did not complete: reason -> count.
    pub not_completed: BTreeMap<String, usize>,
    /// GPU-hours the jobs asked for (held GPUs x runtime, every job).
    pub submitted_gpu_hours: f64,
    /// Of those, the work never done, by the reason its job did not
    /// complete: all of a refused or cancelled job's, the rest of an
    /// unfinished one's.
    pub not_completed_gpu_hours: BTreeMap<String, f64>,
    /// Their sum, over `submitted_gpu_hours`.
    pub work_not_done_fraction: f64,
    pub wait_p50_s: i64,
    pub wait_p90_s: i64,
    pub wait_p99_s: i64,
    pub by_kind: BTreeMap<String, WaitStats>,
    /// The same by the GPUs a job asked for: `1`, `2-8`, `9-32`, `33+`.
    pub by_size: BTreeMap<String, WaitStats>,
    pub preemptions: usize,
    pub gpu_hours_lost_to_preemption: f64,
    /// Preemptions whose victim ran unallocated (`min_runtime=0`).
    pub preemptions_of_unallocated: usize,
    /// Preemptions of an allocated job by a job of the same budget leaf.
    pub preemptions_within_team: usize,
    /// Preemptions of an allocated job of another budget leaf by a small
    /// job (`small_job_gpus`, `small_job_min_runtime`: rule 4 without the
    /// margin).
    pub preemptions_by_small_jobs: usize,
    /// Preemptions of an allocated job of another budget leaf by a large job
    /// that had waited `large_job_wait` while its budget was under its share
    /// (rule 6).
    pub preemptions_by_long_waiting_jobs: usize,
    /// Repeat preemptions the anti-thrash rules are there to prevent: the
    /// victim had itself preempted the job now preempting it, or had been
    /// preempted before, less than its own or that preemptor's minimum
    /// runtime before. See [`ping_pongs`].
    pub ping_pongs: usize,
    pub occupancy: f64,
    pub unallocated_fraction: f64,
    pub max_gpus_in_use: u32,
    pub gpu_seconds_delivered: i64,
    /// GPU-hours free while jobs waited: what fragmentation, reservations
    /// and the scan depth left unused.
    pub idle_gpu_hours_while_jobs_waited: f64,
    /// The same by cause ([`crate::IdleByCause`]), and the GPU-hours
    /// preemptors held idle in their victims' grace time.
    pub idle_gpu_hours_by_cause: IdleHoursByCause,
    /// GPU-hours held idle by preemptors during their victims' grace time.
    pub gpu_hours_claimed_in_grace: f64,
    pub contracts_clamped_to_cap: u32,
    pub teams: Vec<TeamStats>,
    /// Of the teams that submitted jobs, the share delivered at least 95%
    /// of what they were owed (a team owed nothing, all its jobs refused,
    /// is not).
    pub teams_at_95pct_of_owed: f64,
    /// The same against owed at submission.
    pub teams_at_95pct_of_owed_at_submission: f64,
    /// The same against owed allocated work first.
    pub teams_at_95pct_of_owed_allocated_first: f64,
    /// The largest share, over the teams that wanted their share for at
    /// least [`MIN_WANTING_HOURS`] whole hours, of those hours in which the
    /// team held less than half its share (0 when none did).
    pub worst_team_hours_below_half_share: f64,
    /// What an admin should not miss: much work never done, teams with
    /// every job refused.
    pub warnings: Vec<String>,
    pub events: u64,
    pub scheduling_passes: u64,
    /// Wall-clock time of the simulation itself; `null` with `--no-timing`.
    pub sim_seconds: Option<f64>,
    pub simulated_days_per_second: Option<f64>,
}

/// GPU-hours idle while jobs waited, by cause (the first three add up to
/// `idle_gpu_hours_while_jobs_waited`); `grace_time` is
/// `gpu_hours_claimed_in_grace`, GPUs held, not free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IdleHoursByCause {
    pub backfill_limits: f64,
    pub whole_node_rule: f64,
    pub no_job_fits: f64,
    pub grace_time: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The wait percentiles of `waits` (seconds, any order), with the counts given.
pub fn wait_stats(mut waits: Vec<i64>, completed: usize, preemptions: usize, lost_gpu_seconds: i64) -> WaitStats {
    waits.sort_unstable();
    WaitStats {
        jobs: waits.len(),
        jobs_completed: completed,
        wait_p50_s: percentile(&waits, 50.0),
        wait_p90_s: percentile(&waits, 90.0),
        wait_p99_s: percentile(&waits, 99.0),
        preemptions,
        gpu_hours_lost_to_preemption: round3(lost_gpu_seconds as f64 / HOUR as f64),
    }
}

/// The size class of a job asking for `gpus` GPUs, as `by_size` names it.
pub fn size_class(gpus: u32) -> &'static str {
    match gpus {
        0..=1 => "1",
        2..=8 => "2-8",
        9..=32 => "9-32",
        _ => "33+",
    }
}

/// The size classes in order, for tables.
pub const SIZE_CLASSES: [&str; 4] = ["1", "2-8", "9-32", "33+"];

/// Per leaf, (time, change of GPUs) if every job of the leaf had started at
/// its submission and run its runtime on the GPUs it holds: the demand
/// that owed at submission shares the cluster by. Jobs of the leaf the
/// policy refused count too (they asked); jobs of no leaf do not.
pub fn demand_at_submission(workload: &Workload, tree: &BudgetTree, outcome: &Outcome) -> Vec<Vec<(i64, i64)>> {
    let leaf_of_team: Vec<Option<u32>> = workload.teams.iter().map(|t| tree.leaf_of_account(t)).collect();
    let mut logs: Vec<Vec<(i64, i64)>> = vec![Vec::new(); tree.leaves.len()];
    for (i, job) in workload.jobs.iter().enumerate() {
        let Some(leaf) = outcome.prepared.leaf[i].or(leaf_of_team[job.team as usize]) else { continue };
        let held = outcome.prepared.held[i] as i64;
        logs[leaf as usize].push((job.submit, held));
        logs[leaf as usize].push((job.submit + job.runtime, -held));
    }
    for log in &mut logs {
        log.sort_unstable();
    }
    logs
}

/// Why a run was preempted, in the words the report gives a cancelled job
/// (one classification for the counts and the reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PreemptionCause {
    Unallocated,
    WithinTeam,
    SmallJob,
    LongWait,
    Margin,
}

impl PreemptionCause {
    pub(crate) fn of(run: &crate::engine::Run, workload: &Workload, outcome: &Outcome, rules: &allot::preempt::PreemptRules) -> Self {
        let victim = run.job as usize;
        if !outcome.prepared.contract[victim].is_allocated() {
            return Self::Unallocated;
        }
        match run.preempted_by.map(|p| p as usize) {
            Some(p) if outcome.prepared.leaf[p] == outcome.prepared.leaf[victim] => Self::WithinTeam,
            Some(_) if run.by_long_wait => Self::LongWait,
            Some(p) => {
                let waiting = allot::preempt::WaitingJob {
                    leaf: outcome.prepared.leaf[p],
                    contract: outcome.prepared.contract[p],
                    gpus: workload.jobs[p].gpus,
                    queued_since: None,
                };
                if rules.is_small(&waiting) {
                    Self::SmallJob
                } else {
                    Self::Margin
                }
            }
            None => {
                debug_assert!(false, "a preempted run records its preemptor");
                Self::Margin
            }
        }
    }

    pub(crate) fn words(self) -> &'static str {
        // Both policies preempt only unallocated runs and, under allot,
        // allocated ones past their minimum runtime by these rules.
        match self {
            Self::Unallocated => "it ran unallocated (min_runtime=0), which any allocated job may preempt",
            Self::WithinTeam => "past its minimum runtime, by a job of its own team that declared a higher priority",
            Self::SmallJob => "past its minimum runtime, by a small job of a team that had used less of its share",
            Self::LongWait => "past its minimum runtime, by a large job that had waited large_job_wait while its team was under its share",
            Self::Margin => "past its minimum runtime, by a job of a team that had used less of its share by more than the margin",
        }
    }
}

/// Ping-pong preemptions of allocated jobs, from the runs (unallocated jobs
/// are left out: the contract promises them nothing): every repeat
/// preemption the anti-thrash rules are there to prevent. A preemption
/// (victim V, preemptor P, signalled at t) is a **ping-pong** if
/// - V had preempted P before (the pair took turns), or
/// - V's previous preemption, by P', came less than V's own minimum
///   runtime or P''s before: V lost its GPUs twice while it, or the job
///   that first took them, would still have been protected.
///
/// The policy core rules out turns within a team (only a strictly higher
/// priority preempts there, and no longer a guarantee than the victim's)
/// and V's own protection mostly rules out a second preemption within its
/// own minimum runtime (grace and requeue delays aside); between teams the
/// margin is what prevents turns. A second preemption within P''s minimum
/// runtime comes from the margin rule when P' declared a longer minimum
/// runtime than V, or from V starting again elsewhere.
pub fn ping_pongs(outcome: &Outcome) -> usize {
    let mut preempted: Vec<&crate::engine::Run> = outcome
        .runs
        .iter()
        .filter(|r| matches!(r.ended, RunEnd::Preempted { .. }) && outcome.prepared.contract[r.job as usize].is_allocated() && r.preempted_by.is_some())
        .collect();
    let signal = |r: &crate::engine::Run| match r.ended {
        RunEnd::Preempted { signal } => signal,
        _ => r.end,
    };
    preempted.sort_by_key(|r| (signal(r), r.job));
    let mut took: std::collections::BTreeSet<(u32, u32)> = std::collections::BTreeSet::new();
    let mut last: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
    let mut ping = 0;
    for r in preempted {
        let (v, p, t) = (r.job, r.preempted_by.unwrap_or(u32::MAX), signal(r));
        let min_runtime = |j: u32| outcome.prepared.contract[j as usize].min_runtime;
        let reversal = took.contains(&(v, p));
        let soon_again = last.get(&v).is_some_and(|&(t0, p0)| t - t0 < min_runtime(v).max(min_runtime(p0)));
        ping += usize::from(reversal || soon_again);
        took.insert((p, v));
        last.insert(v, (t, p));
    }
    ping
}

/// Rounded to 3 decimals, as the reports print them.
pub fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}
/// Rounded to 6 decimals.
pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// A duration for people: `45s`, `12.5m`, `3.2h`, `2.1d`.
pub fn human(secs: i64) -> String {
    let s = secs as f64;
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 2 * HOUR {
        format!("{:.1}m", s / 60.0)
    } else if secs < 48 * HOUR {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86400.0)
    }
}

/// `x` with `decimals` decimals, never `-0`: a sum of no values is -0.0 in
/// Rust, and a tiny negative rounds to `-0`, which reads as a loss.
pub fn fixed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    match s.strip_prefix('-') {
        Some(magnitude) if magnitude.bytes().all(|b| b == b'0' || b == b'.') => magnitude.to_owned(),
        _ => s,
    }
}

/// The share of the GPU-seconds delivered in `[from, to)` that each leaf got.
pub fn delivered_shares(sim: &crate::Simulation, leaves: usize, from: i64, to: i64) -> Vec<f64> {
    let mut per = vec![0.0; leaves];
    for (l, log) in sim.outcome.delivered_log.iter().enumerate() {
        let mut level = 0i64;
        let mut last = from;
        for &(t, d) in log {
            let (a, b) = (last.max(from), t.min(to));
            if b > a {
                per[l] += (level * (b - a)) as f64;
            }
            level += d;
            last = t;
        }
        if to > last.max(from) {
            per[l] += (level * (to - last.max(from))) as f64;
        }
    }
    let total: f64 = per.iter().sum();
    per.iter().map(|x| x / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50.0), 5);
        assert_eq!(percentile(&v, 90.0), 9);
        assert_eq!(percentile(&v, 99.0), 10);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[7], 1.0), 7);
    }

    #[test]
    fn starved_hours_count_whole_hours_wanting_the_share_and_held_under_half() {
        // Share 4 GPUs. Wanted 8 GPUs for 3 hours, then 2. Held 8 in hour
        // 0, 1 in hour 1, 2 in hour 2 (exactly half: not below), 0 after.
        let demand = [(0, 8), (10_800, -6), (18_000, -2)];
        let held = [(0, 8), (3600, -7), (7200, 1), (10_800, -2)];
        assert_eq!(starved_hours(&demand, &held, 4.0, 0, 18_000), (3, 1), "hours 0-2 wanted the share, hour 1 held under half");
        // A partial last hour is left out: 2.5 hours are hours 0 and 1.
        assert_eq!(starved_hours(&demand, &held, 4.0, 0, 9000), (2, 1));
        // A team that wants less than its share is never starved.
        assert_eq!(starved_hours(&[(0, 3)], &[], 4.0, 0, 36_000), (0, 0));
        // No share, no count.
        assert_eq!(starved_hours(&demand, &held, 0.0, 0, 18_000), (0, 0));
        // Held nothing for 10 hours while wanting it all: 10 of 10.
        assert_eq!(starved_hours(&[(0, 8)], &[], 4.0, 0, 36_000), (10, 10));
    }

    #[test]
    fn hourly_buckets_split_steps() {
        // 2 GPUs from 1800 to 5400, then 1 GPU to 7200.
        let log = [(1800, 2), (5400, -1), (7200, -1)];
        let h = hourly(&log, 0, 7200);
        assert_eq!(h, vec![2.0 * 1800.0, 2.0 * 1800.0 + 1800.0]);
        // A partial last hour.
        let h = hourly(&log, 0, 4000);
        assert_eq!(h, vec![3600.0, 2.0 * 400.0]);
    }

    #[test]
    fn water_filling_caps_and_redistributes() {
        // 10 to share equally; a wants only 2: b and c split the other 8.
        assert_eq!(water_fill(10.0, &[2.0, 100.0, 100.0], &[1.0, 1.0, 1.0]), vec![2.0, 4.0, 4.0]);
        // Weighted: 3:1 with no caps.
        assert_eq!(water_fill(8.0, &[100.0, 100.0], &[3.0, 1.0]), vec![6.0, 2.0]);
        // Everyone capped: less than the amount is given.
        assert_eq!(water_fill(8.0, &[1.0, 2.0], &[1.0, 1.0]), vec![1.0, 2.0]);
        // No demand, nothing owed.
        assert_eq!(water_fill(8.0, &[0.0, 5.0], &[1.0, 1.0]), vec![0.0, 5.0]);
    }

    #[test]
    fn a_last_partial_hour_owes_only_its_length() {
        let t = BudgetTree::parse("[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n").unwrap();
        // 2 GPUs wanted throughout 1h30 on a 1-GPU cluster: 1 GPU-hour owed, then half of one.
        let demand = vec![hourly(&[(0, 2), (5400, -2)], 0, 5400)];
        assert_eq!(demand[0], vec![7200.0, 3600.0]);
        assert_eq!(owed_by_hour(&t, &demand, 1, 0, 5400), vec![vec![3600.0, 1800.0]]);
    }

    #[test]
    fn owed_follows_the_tree() {
        let t = BudgetTree::parse(
            "[budget]\n[budget.a]\nshare=1\n[budget.a.x]\nshare=1\naccounts=[\"x\"]\n[budget.a.y]\nshare=1\naccounts=[\"y\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n",
        )
        .unwrap();
        // 12 GPUs: a and b 6 each; y wants 1, so x gets 5 of a's 6.
        assert_eq!(owed_in_hour(&t, &[100.0, 1.0, 100.0], 12.0), vec![5.0, 1.0, 6.0]);
        // b wants nothing: a's subtree gets all 12 (x 11, y 1).
        assert_eq!(owed_in_hour(&t, &[100.0, 1.0, 0.0], 12.0), vec![11.0, 1.0, 0.0]);
        // x and y want within a more than a's share; b takes little: a gets the rest, split equally.
        assert_eq!(owed_in_hour(&t, &[100.0, 100.0, 2.0], 12.0), vec![5.0, 5.0, 2.0]);
    }
}
