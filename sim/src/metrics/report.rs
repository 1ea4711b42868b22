//! `report()`: the report of one simulation, in stages: what became of each
//! job and how long it waited, what preemption cost, what the cluster
//! delivered, what each team was owed and got, and the warnings.

use std::collections::BTreeMap;

use allot::budget::BudgetTree;
use allot::preempt::PreemptRules;

use super::{
    demand_at_submission, hourly, owed_by_hour, owed_by_hour_allocated_first, ping_pongs, round3, round6, size_class, starved_hours, wait_stats,
    IdleHoursByCause, PreemptionCause, Report, TeamStats, WaitStats, HOUR, MIN_WANTING_HOURS,
};
use crate::engine::{Fate, Outcome, RunEnd};
use crate::workload::Workload;

/// Waits of a set of jobs and how many of them completed.
type Waits = (Vec<i64>, usize);
/// Preemptions and GPU-seconds of work lost.
type Loss = (usize, i64);

/// Computes the report. Timing comes from the caller.
pub fn report(workload: &Workload, tree: &BudgetTree, cluster: crate::cluster::ClusterSpec, outcome: &Outcome, sim_seconds: Option<f64>) -> Report {
    let capacity = cluster.capacity();
    let rules = PreemptRules::from_settings(&tree.settings);
    let mut jobs = JobTally::count(workload, tree, outcome, &rules);
    let losses = Losses::count(workload, tree.leaves.len(), outcome, &rules);
    let span = Span::of(workload, outcome);
    let delivery = Delivery::count(outcome, span);
    let mut teams = team_stats(workload, tree, capacity, outcome, span, &mut jobs, &losses);
    let mut warnings = std::mem::take(&mut teams.warnings);
    warnings.extend(not_done_warnings(&jobs));

    let overall = wait_stats(std::mem::take(&mut jobs.waits.0), jobs.waits.1, 0, 0);
    let simulated_days = (outcome.end - outcome.start) as f64 / 86_400.0;
    let share_of_teams = |n: usize| round6(if teams.submitting > 0 { n as f64 / teams.submitting as f64 } else { 1.0 });
    let stats = |waits: Waits, loss: Option<&Loss>| {
        let (p, lost) = loss.copied().unwrap_or_default();
        wait_stats(waits.0, waits.1, p, lost)
    };
    Report {
        policy: outcome.policy,
        cluster: cluster.to_string(),
        gpus: capacity,
        simulated_days: round3(simulated_days),
        jobs: workload.jobs.len(),
        jobs_completed: outcome.jobs.iter().filter(|j| j.fate == Fate::Completed).count(),
        jobs_cancelled: jobs.cancelled,
        jobs_refused: jobs.refused,
        jobs_unfinished: jobs.unfinished,
        submitted_gpu_hours: round3(jobs.submitted as f64 / HOUR as f64),
        work_not_done_fraction: round6(if jobs.submitted > 0 { jobs.not_done.values().sum::<i64>() as f64 / jobs.submitted as f64 } else { 0.0 }),
        not_completed_gpu_hours: std::mem::take(&mut jobs.not_done).into_iter().map(|(k, v)| (k, round3(v as f64 / HOUR as f64))).collect(),
        not_completed: std::mem::take(&mut jobs.not_completed),
        wait_p50_s: overall.wait_p50_s,
        wait_p90_s: overall.wait_p90_s,
        wait_p99_s: overall.wait_p99_s,
        by_kind: std::mem::take(&mut jobs.by_kind).into_iter().map(|(k, w)| (workload.kinds[k as usize].clone(), stats(w, losses.by_kind.get(&k)))).collect(),
        by_size: std::mem::take(&mut jobs.by_size).into_iter().map(|(k, w)| (k.to_owned(), stats(w, losses.by_size.get(k)))).collect(),
        preemptions: delivery.preemptions,
        gpu_hours_lost_to_preemption: round3(delivery.lost as f64 / HOUR as f64),
        preemptions_of_unallocated: losses.of_unallocated,
        preemptions_within_team: losses.within_team,
        preemptions_by_small_jobs: losses.by_small,
        preemptions_by_long_waiting_jobs: losses.by_long_wait,
        ping_pongs: ping_pongs(outcome),
        occupancy: round6(delivery.in_span as f64 / (capacity as f64 * span.len() as f64)),
        unallocated_fraction: round6(if delivery.delivered > 0 { delivery.unprotected as f64 / delivery.delivered as f64 } else { 0.0 }),
        max_gpus_in_use: outcome.max_gpus_in_use,
        gpu_seconds_delivered: delivery.delivered,
        idle_gpu_hours_while_jobs_waited: round3(outcome.idle_while_waiting as f64 / HOUR as f64),
        idle_gpu_hours_by_cause: IdleHoursByCause {
            backfill_limits: round3(outcome.idle_by_cause.backfill_limits as f64 / HOUR as f64),
            whole_node_rule: round3(outcome.idle_by_cause.whole_node_rule as f64 / HOUR as f64),
            no_job_fits: round3(outcome.idle_by_cause.no_job_fits as f64 / HOUR as f64),
            grace_time: round3(outcome.claimed_idle as f64 / HOUR as f64),
        },
        gpu_hours_claimed_in_grace: round3(outcome.claimed_idle as f64 / HOUR as f64),
        contracts_clamped_to_cap: outcome.prepared.clamped_to_cap,
        teams_at_95pct_of_owed: share_of_teams(teams.at_95),
        worst_team_hours_below_half_share: round6(teams.worst_starved),
        teams_at_95pct_of_owed_at_submission: share_of_teams(teams.at_95_at_submission),
        teams_at_95pct_of_owed_allocated_first: share_of_teams(teams.at_95_allocated_first),
        teams: teams.stats,
        warnings,
        events: outcome.events,
        scheduling_passes: outcome.passes,
        sim_seconds: sim_seconds.map(round6),
        simulated_days_per_second: sim_seconds.map(|s| round3(simulated_days / s.max(1e-9))),
    }
}

/// What became of each job, and the waits of those that were queued.
struct JobTally {
    waits: Waits,
    by_kind: BTreeMap<u32, Waits>,
    by_size: BTreeMap<&'static str, Waits>,
    by_leaf: Vec<Vec<i64>>,
    leaf_kind: Vec<BTreeMap<u32, Waits>>,
    jobs_per_leaf: Vec<usize>,
    /// Jobs refused per leaf, and their GPU-seconds.
    refused_per_leaf: Vec<(usize, i64)>,
    /// Reason -> jobs, and GPU-seconds of work not done.
    not_completed: BTreeMap<String, usize>,
    not_done: BTreeMap<String, i64>,
    cancelled: usize,
    refused: usize,
    unfinished: usize,
    /// GPU-seconds of work submitted.
    submitted: i64,
}

impl JobTally {
    fn count(workload: &Workload, tree: &BudgetTree, outcome: &Outcome, rules: &PreemptRules) -> Self {
        let leaves = tree.leaves.len();
        let mut t = JobTally {
            waits: Default::default(),
            by_kind: BTreeMap::new(),
            by_size: BTreeMap::new(),
            by_leaf: vec![Vec::new(); leaves],
            leaf_kind: vec![BTreeMap::new(); leaves],
            jobs_per_leaf: vec![0; leaves],
            refused_per_leaf: vec![(0, 0); leaves],
            not_completed: BTreeMap::new(),
            not_done: BTreeMap::new(),
            cancelled: 0,
            refused: 0,
            unfinished: 0,
            submitted: 0,
        };
        // Work done per job (its runs' time, less what they lost).
        let mut done_work = vec![0i64; workload.jobs.len()];
        for r in &outcome.runs {
            done_work[r.job as usize] += r.end - r.start - r.lost;
        }
        let leaf_of_team: Vec<Option<u32>> = workload.teams.iter().map(|t| tree.leaf_of_account(t)).collect();
        // Why each cancelled job's last run was preempted, for its reason.
        let mut cancelled_because: Vec<Option<PreemptionCause>> = vec![None; workload.jobs.len()];
        for r in outcome.runs.iter().filter(|r| matches!(r.ended, RunEnd::Preempted { .. })) {
            cancelled_because[r.job as usize] = Some(PreemptionCause::of(r, workload, outcome, rules));
        }
        for (i, (job, out)) in workload.jobs.iter().zip(&outcome.jobs).enumerate() {
            let held = outcome.prepared.held[i] as i64;
            t.submitted += held * job.runtime;
            let (reason, undone) = match &out.fate {
                Fate::Completed => (None, 0),
                Fate::Cancelled(r) => {
                    t.cancelled += 1;
                    let kind = &workload.kinds[job.kind as usize];
                    let why = cancelled_because[i].map_or("", PreemptionCause::words);
                    (Some(format!("cancelled: {r} ({kind} jobs): {why}")), job.runtime)
                }
                Fate::Refused(r) => {
                    t.refused += 1;
                    if let Some(leaf) = outcome.prepared.leaf[i].or(leaf_of_team[job.team as usize]) {
                        t.refused_per_leaf[leaf as usize].0 += 1;
                        t.refused_per_leaf[leaf as usize].1 += held * job.runtime;
                    }
                    (Some(format!("refused: {r}")), job.runtime)
                }
                Fate::Unfinished(r) => {
                    t.unfinished += 1;
                    (Some(format!("unfinished: {r}")), (job.runtime - done_work[i]).max(0))
                }
            };
            if let Some(reason) = reason {
                *t.not_done.entry(reason.clone()).or_default() += held * undone;
                *t.not_completed.entry(reason).or_default() += 1;
            }
            if matches!(out.fate, Fate::Refused(_)) || job.submit > outcome.end {
                continue; // never queued, or never submitted within the simulated time
            }
            let wait = out.first_start.unwrap_or(outcome.end) - job.submit;
            let done = usize::from(matches!(out.fate, Fate::Completed));
            let add = |w: &mut Waits| {
                w.0.push(wait);
                w.1 += done;
            };
            add(&mut t.waits);
            add(t.by_kind.entry(job.kind).or_default());
            add(t.by_size.entry(size_class(job.gpus)).or_default());
            if let Some(leaf) = outcome.prepared.leaf[i] {
                t.by_leaf[leaf as usize].push(wait);
                t.jobs_per_leaf[leaf as usize] += 1;
                add(t.leaf_kind[leaf as usize].entry(job.kind).or_default());
            }
        }
        t
    }
}

/// Preemptions and lost work per kind, size and team, and what preempted.
struct Losses {
    by_kind: BTreeMap<u32, Loss>,
    by_size: BTreeMap<&'static str, Loss>,
    leaf_kind: Vec<BTreeMap<u32, Loss>>,
    of_unallocated: usize,
    within_team: usize,
    by_small: usize,
    by_long_wait: usize,
}

impl Losses {
    fn count(workload: &Workload, leaves: usize, outcome: &Outcome, rules: &PreemptRules) -> Self {
        let mut l = Losses {
            by_kind: BTreeMap::new(),
            by_size: BTreeMap::new(),
            leaf_kind: vec![BTreeMap::new(); leaves],
            of_unallocated: 0,
            within_team: 0,
            by_small: 0,
            by_long_wait: 0,
        };
        for r in &outcome.runs {
            let job = &workload.jobs[r.job as usize];
            let preempted = matches!(r.ended, RunEnd::Preempted { .. });
            let add = |e: &mut Loss| {
                e.0 += usize::from(preempted);
                e.1 += r.gpus as i64 * r.lost;
            };
            add(l.by_kind.entry(job.kind).or_default());
            add(l.by_size.entry(size_class(job.gpus)).or_default());
            if let Some(leaf) = outcome.prepared.leaf[r.job as usize] {
                add(l.leaf_kind[leaf as usize].entry(job.kind).or_default());
            }
            if preempted {
                match PreemptionCause::of(r, workload, outcome, rules) {
                    PreemptionCause::Unallocated => l.of_unallocated += 1,
                    PreemptionCause::WithinTeam => l.within_team += 1,
                    PreemptionCause::SmallJob => l.by_small += 1,
                    PreemptionCause::LongWait => l.by_long_wait += 1,
                    PreemptionCause::Margin => {}
                }
            }
        }
        l
    }
}

/// The span the rates are over: first to last submission (or the horizon, if
/// earlier); the whole simulation if that is empty.
#[derive(Clone, Copy)]
struct Span {
    from: i64,
    to: i64,
}

impl Span {
    fn of(workload: &Workload, outcome: &Outcome) -> Self {
        let (first_submit, last_submit) = workload.span();
        // A run stopped at a horizon before the last submission: up to the horizon.
        if last_submit.min(outcome.end) > first_submit {
            Span { from: first_submit, to: last_submit.min(outcome.end) }
        } else {
            Span { from: outcome.start, to: outcome.end }
        }
    }

    fn len(self) -> i64 {
        (self.to - self.from).max(1)
    }
}

/// What the runs delivered, in GPU-seconds.
struct Delivery {
    delivered: i64,
    /// Of it, what ran without protection (unallocated, or over a limit).
    unprotected: i64,
    lost: i64,
    preemptions: usize,
    in_span: i64,
}

impl Delivery {
    fn count(outcome: &Outcome, span: Span) -> Self {
        let mut d = Delivery { delivered: 0, unprotected: 0, lost: 0, preemptions: 0, in_span: 0 };
        for r in &outcome.runs {
            let gs = r.gpus as i64 * (r.end - r.start);
            d.delivered += gs;
            if r.preemptible_from <= r.start {
                d.unprotected += gs;
            }
            d.lost += r.gpus as i64 * r.lost;
            d.preemptions += usize::from(matches!(r.ended, RunEnd::Preempted { .. }));
            let (a, b) = (r.start.max(span.from), r.end.min(span.to));
            if b > a {
                d.in_span += r.gpus as i64 * (b - a);
            }
        }
        d
    }
}

/// Each team's numbers, and the counts over teams.
struct Teams {
    stats: Vec<TeamStats>,
    /// Teams with jobs (queued or refused), and of them those at 95% of owed.
    submitting: usize,
    at_95: usize,
    at_95_at_submission: usize,
    at_95_allocated_first: usize,
    worst_starved: f64,
    warnings: Vec<String>,
}

fn team_stats(workload: &Workload, tree: &BudgetTree, capacity: u32, outcome: &Outcome, span: Span, jobs: &mut JobTally, losses: &Losses) -> Teams {
    let leaves = tree.leaves.len();
    // Owed, hour by hour.
    let demand: Vec<Vec<f64>> = outcome.demand_log.iter().map(|log| hourly(log, outcome.start, outcome.end)).collect();
    let given: Vec<Vec<f64>> = outcome.delivered_log.iter().map(|log| hourly(log, outcome.start, outcome.end)).collect();
    let owed: Vec<f64> = owed_by_hour(tree, &demand, capacity, outcome.start, outcome.end).iter().map(|hours| hours.iter().sum()).collect();
    let free: Vec<Vec<f64>> = outcome.free_demand_log.iter().map(|log| hourly(log, outcome.start, outcome.end)).collect();
    let owed_allocated_first: Vec<f64> =
        owed_by_hour_allocated_first(tree, &demand, &free, capacity, outcome.start, outcome.end).iter().map(|hours| hours.iter().sum()).collect();
    // Owed at submission, and what was delivered, over the submission span
    // only: a policy that serves a team weeks after the last submission is
    // not credited with it against this owed.
    let at_submission: Vec<Vec<f64>> = demand_at_submission(workload, tree, outcome).iter().map(|log| hourly(log, span.from, span.to)).collect();
    let owed_at_submission: Vec<f64> = owed_by_hour(tree, &at_submission, capacity, span.from, span.to).iter().map(|hours| hours.iter().sum()).collect();
    let delivered_in_span: Vec<f64> = outcome.delivered_log.iter().map(|log| hourly(log, span.from, span.to).iter().sum()).collect();
    let starved: Vec<(usize, usize)> = (0..leaves)
        .map(|l| {
            starved_hours(&outcome.demand_log[l], &outcome.delivered_log[l], tree.leaf_node(l as u32).effective_share * capacity as f64, span.from, span.to)
        })
        .collect();
    let mut t = Teams {
        stats: Vec::with_capacity(leaves),
        submitting: 0,
        at_95: 0,
        at_95_at_submission: 0,
        at_95_allocated_first: 0,
        worst_starved: 0.0,
        warnings: Vec::new(),
    };
    for l in 0..leaves {
        let node = tree.leaf_node(l as u32);
        let delivered_h = given[l].iter().sum::<f64>() / HOUR as f64;
        let owed_h = owed[l] / HOUR as f64;
        let owed_sub_h = owed_at_submission[l] / HOUR as f64;
        let ratio = (owed_h > 1e-9).then(|| delivered_h / owed_h);
        let owed_first_h = owed_allocated_first[l] / HOUR as f64;
        let ratio_first = (owed_first_h > 1e-9).then(|| delivered_h / owed_first_h);
        let delivered_span_h = delivered_in_span[l] / HOUR as f64;
        let ratio_sub = (owed_sub_h > 1e-9).then(|| delivered_span_h / owed_sub_h);
        let (refused_jobs, refused_work) = jobs.refused_per_leaf[l];
        if jobs.jobs_per_leaf[l] + refused_jobs > 0 {
            t.submitting += 1;
            t.at_95 += usize::from(ratio.is_some_and(|r| r >= 0.95 - 1e-9));
            t.at_95_at_submission += usize::from(ratio_sub.is_some_and(|r| r >= 0.95 - 1e-9));
            // A team that wanted GPUs but only for free work in hours others'
            // allocated work filled is owed nothing this way: it got that.
            let wanted = demand[l].iter().sum::<f64>() > 0.0;
            t.at_95_allocated_first += usize::from(ratio_first.map_or(wanted, |r| r >= 0.95 - 1e-9));
        }
        if refused_jobs > 0 && jobs.jobs_per_leaf[l] == 0 {
            t.warnings.push(format!(
                "every job of {} was refused ({refused_jobs}, {:.0} GPU-hours): it is owed nothing and delivered nothing",
                node.path,
                refused_work as f64 / HOUR as f64
            ));
        }
        let mut w = std::mem::take(&mut jobs.by_leaf[l]);
        w.sort_unstable();
        let by_kind: BTreeMap<String, WaitStats> = std::mem::take(&mut jobs.leaf_kind[l])
            .into_iter()
            .map(|(k, (w, c))| {
                let (p, lost) = losses.leaf_kind[l].get(&k).copied().unwrap_or_default();
                (workload.kinds[k as usize].clone(), wait_stats(w, c, p, lost))
            })
            .collect();
        t.stats.push(TeamStats {
            team: node.path.clone(),
            accounts: node.accounts.clone(),
            effective_share: round6(node.effective_share),
            jobs: jobs.jobs_per_leaf[l],
            jobs_refused: refused_jobs,
            refused_gpu_hours: round3(refused_work as f64 / HOUR as f64),
            demand_gpu_hours: round3(demand[l].iter().sum::<f64>() / HOUR as f64),
            owed_gpu_hours: round3(owed_h),
            owed_at_submission_gpu_hours: round3(owed_sub_h),
            delivered_gpu_hours: round3(delivered_h),
            delivered_in_span_gpu_hours: round3(delivered_span_h),
            delivered_over_owed: ratio.map(round6),
            owed_allocated_first_gpu_hours: round3(owed_first_h),
            delivered_over_owed_allocated_first: ratio_first.map(round6),
            delivered_over_owed_at_submission: ratio_sub.map(round6),
            charged_gpu_hours: round3(outcome.charged.get(l).copied().unwrap_or(0) as f64 / HOUR as f64),
            hours_wanting_share: starved[l].0,
            hours_below_half_share: starved[l].1,
            wait_p50_s: super::percentile(&w, 50.0),
            wait_p90_s: super::percentile(&w, 90.0),
            by_kind,
        });
    }
    // A team that wanted its share for an hour or two would set the figure alone.
    t.worst_starved = starved.iter().filter(|&&(w, _)| w >= MIN_WANTING_HOURS).map(|&(w, b)| b as f64 / w as f64).fold(0.0, f64::max);
    t
}

/// One warning per way of not completing (refused, cancelled, unfinished)
/// that left 1% or more of the submitted work undone.
fn not_done_warnings(jobs: &JobTally) -> Vec<String> {
    let mut by_way: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for (reason, &gs) in &jobs.not_done {
        let way = reason.split(':').next().unwrap_or(reason);
        let e = by_way.entry(way).or_default();
        e.0 += jobs.not_completed.get(reason).copied().unwrap_or(0);
        e.1 += gs;
    }
    let submitted = jobs.submitted;
    by_way
        .into_iter()
        .filter_map(|(way, (n, gs))| {
            let share = if submitted > 0 { gs as f64 / submitted as f64 } else { 0.0 };
            (share >= 0.01).then(|| {
                format!(
                    "{:.1}% of the submitted work ({:.0} of {:.0} GPU-hours) was never done: {n} job(s) {way} (see the jobs that did not complete)",
                    100.0 * share,
                    gs as f64 / HOUR as f64,
                    submitted as f64 / HOUR as f64,
                )
            })
        })
        .collect()
}
