//! Invariants of a finished simulation, checked from its record alone (the
//! runs and the job outcomes, and the jobs as `prepare` resolved them before
//! the run), independently of the engine's own books.
//!
//! 1. No GPU is held by two runs at once, and never more GPUs are in use
//!    than the cluster has.
//! 2. Delivered GPU-seconds equal executed runtime: every completed job ran
//!    exactly its runtime plus the work it lost; the report's total is the
//!    sum of the runs; each leaf's delivered log matches its runs.
//! 3. No protected run was preempted inside its protection (allot: an
//!    allocated run before its minimum runtime, as the policy core's
//!    `RunningJob::protected_until` counts it from the job's contract; baseline:
//!    a run that declared a minimum runtime, ever), every run records that
//!    protection as its `preemptible_from`, and every kill came after the
//!    grace time (allot: the policy core's `grace_for` the victim). Allot:
//!    a run preempted by a job of its own leaf was preempted by rule 5
//!    (`preempt_within_team` on, a strictly higher priority, no longer a
//!    minimum runtime: `allot::preempt::within_team`).
//! 4. Unallocated time is never charged: each leaf's charged GPU-seconds
//!    are exactly its allocated runs' (recomputed with the policy core's
//!    `usage_in_window`), and no run of an unallocated job is charged.
//! 5. Every job completes or carries the reason why not; the report's counts add up.
//! 6. Only jobs that `PreemptRules::may_use_small_job_nodes` allows ran on
//!    the nodes kept for small jobs (the last `small_job_nodes`).

use std::collections::HashMap;

use allot::occupancy::{usage_in_window, Interval};
use allot::preempt::RunningJob;

use crate::engine::{Config, Fate, PolicyKind, RunEnd};
use crate::{Simulation, Workload};

/// Every violation found, in words; empty when all hold.
pub fn invariants(workload: &Workload, cfg: &Config, sim: &Simulation) -> Vec<String> {
    let mut bad = Vec::new();
    let out = &sim.outcome;
    let prepared = &out.prepared;
    let capacity = cfg.cluster.capacity() as i64;

    // 0. The idle time's causes add up to it.
    let c = out.idle_by_cause;
    if c.backfill_limits + c.whole_node_rule + c.no_job_fits != out.idle_while_waiting || c.backfill_limits.min(c.whole_node_rule).min(c.no_job_fits) < 0 {
        bad.push(format!("idle GPU-seconds by cause {c:?} do not add up to {}", out.idle_while_waiting));
    }

    // 0b. Each leaf's wanted GPUs, and their free part, never go below 0,
    // the free part is never more than the whole, and both are back to 0
    // at the end (every job's demand closes: completed, cancelled, or at
    // the horizon): what owed allocated work first subtracts.
    for (leaf, (all, free)) in out.demand_log.iter().zip(&out.free_demand_log).enumerate() {
        let mut steps: Vec<(i64, i64, i64)> = all.iter().map(|&(t, d)| (t, d, 0)).chain(free.iter().map(|&(t, d)| (t, 0, d))).collect();
        steps.sort_unstable_by_key(|&(t, _, _)| t);
        let (mut a, mut f, mut i) = (0i64, 0i64, 0);
        while i < steps.len() {
            let t = steps[i].0;
            while i < steps.len() && steps[i].0 == t {
                a += steps[i].1;
                f += steps[i].2;
                i += 1;
            }
            if a < 0 || f < 0 || f > a {
                bad.push(format!("leaf {leaf} at {t}: {a} GPUs wanted, {f} of them by free work"));
                break;
            }
        }
        if a != 0 || f != 0 {
            bad.push(format!("leaf {leaf}: {a} GPUs still wanted at the end ({f} by free work)"));
        }
    }

    // 1. Slots: no overlap per GPU; total in use never above capacity.
    // (node, GPU) -> (start, end, job) of the runs that held it.
    type SlotRuns = HashMap<(u32, u32), Vec<(i64, i64, u32)>>;
    let mut per_slot = SlotRuns::new();
    let mut steps: Vec<(i64, i64)> = Vec::new();
    for r in &out.runs {
        if r.end < r.start {
            bad.push(format!("run of job {} ends ({}) before it starts ({})", r.job, r.end, r.start));
        }
        let held: u32 = r.slots.iter().map(|(_, m)| m.count_ones()).sum();
        if held != r.gpus || held != prepared.held[r.job as usize] {
            bad.push(format!("run of job {} holds {held} GPUs, recorded {} and expected {}", r.job, r.gpus, prepared.held[r.job as usize]));
        }
        for &(n, mask) in &r.slots {
            if n >= cfg.cluster.nodes || (cfg.cluster.gpus_per_node < 64 && mask >> cfg.cluster.gpus_per_node != 0) {
                bad.push(format!("run of job {} uses a GPU that does not exist (node {n}, slots {mask:#b})", r.job));
            }
            let mut bits = mask;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                per_slot.entry((n, b)).or_default().push((r.start, r.end, r.job));
            }
        }
        if r.end > r.start {
            steps.push((r.start, r.gpus as i64));
            steps.push((r.end, -(r.gpus as i64)));
        }
    }
    let mut slots: Vec<_> = per_slot.into_iter().collect();
    slots.sort_by_key(|(k, _)| *k);
    for ((n, b), mut runs) in slots {
        runs.sort_unstable();
        for w in runs.windows(2) {
            if w[1].0 < w[0].1 {
                bad.push(format!("GPU {b} of node {n} held by job {} ({}..{}) and job {} ({}..{}) at once", w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1));
            }
        }
    }
    steps.sort_unstable(); // ends (negative) before starts at the same time
    let (mut in_use, mut max) = (0i64, 0i64);
    for (_, d) in steps {
        in_use += d;
        max = max.max(in_use);
    }
    if max > capacity {
        bad.push(format!("{max} GPUs in use at once; the cluster has {capacity}"));
    }
    if max != out.max_gpus_in_use as i64 {
        bad.push(format!("the engine reports at most {} GPUs in use, the runs say {max}", out.max_gpus_in_use));
    }

    // 2. Delivered = executed.
    let mut ran = vec![0i64; workload.jobs.len()];
    let mut lost = vec![0i64; workload.jobs.len()];
    let mut total = 0i64;
    let leaves = cfg.tree.leaves.len();
    let mut delivered_by_leaf = vec![0i64; leaves];
    for r in &out.runs {
        ran[r.job as usize] += r.end - r.start;
        lost[r.job as usize] += r.lost;
        total += r.gpus as i64 * (r.end - r.start);
        if let Some(l) = prepared.leaf[r.job as usize] {
            delivered_by_leaf[l as usize] += r.gpus as i64 * (r.end - r.start);
        }
        if r.lost < 0 || r.lost > r.end - r.start {
            bad.push(format!("run of job {} lost {} s of a {} s run", r.job, r.lost, r.end - r.start));
        }
    }
    if total != sim.report.gpu_seconds_delivered {
        bad.push(format!("report says {} GPU-seconds delivered, the runs sum to {total}", sim.report.gpu_seconds_delivered));
    }
    for (l, log) in out.delivered_log.iter().enumerate() {
        let mut level = 0i64;
        let mut last = i64::MIN;
        let mut area = 0i64;
        for &(t, d) in log {
            if t < last {
                bad.push(format!("leaf {l}: delivered log goes back in time at {t}"));
            }
            if last != i64::MIN {
                area += level * (t - last);
            }
            level += d;
            last = t;
        }
        if level != 0 || area != delivered_by_leaf[l] {
            bad.push(format!("leaf {l}: delivered log integrates to {area} GPU-s (ending at {level} GPUs), its runs to {}", delivered_by_leaf[l]));
        }
    }
    for (i, (job, o)) in workload.jobs.iter().zip(&out.jobs).enumerate() {
        match o.fate {
            Fate::Completed if ran[i] != job.runtime + lost[i] => {
                bad.push(format!("job {} completed after running {} s: runtime {} + lost {}", job.job_id, ran[i], job.runtime, lost[i]));
            }
            Fate::Cancelled(_) if ran[i] != lost[i] => {
                bad.push(format!("cancelled job {} ran {} s but lost only {}", job.job_id, ran[i], lost[i]));
            }
            Fate::Unfinished(_) if ran[i] - lost[i] > job.runtime => {
                bad.push(format!("unfinished job {} did more work ({} s) than it needs ({})", job.job_id, ran[i] - lost[i], job.runtime));
            }
            _ => {}
        }
        if let (Some(s), true) = (o.first_start, ran[i] > 0) {
            if s < job.submit {
                bad.push(format!("job {} started at {s}, before its submission at {}", job.job_id, job.submit));
            }
        }
    }

    // 3. Protection, from the job's contract (not from what the run records).
    for r in &out.runs {
        let contract = prepared.contract[r.job as usize];
        let protected_until = match cfg.policy {
            PolicyKind::Allot => RunningJob { leaf: prepared.leaf[r.job as usize], contract, run_start: r.start }.protected_until(),
            // Allocated runs are never preemptible; unallocated ones always.
            PolicyKind::Baseline if contract.is_allocated() => i64::MAX,
            PolicyKind::Baseline => r.start,
        };
        if r.preemptible_from != protected_until {
            bad.push(format!(
                "run of job {} from {} records preemptible from {}, its contract says {protected_until}",
                workload.jobs[r.job as usize].job_id, r.start, r.preemptible_from
            ));
        }
        if let RunEnd::Preempted { signal } = r.ended {
            if signal < protected_until {
                bad.push(format!(
                    "job {} preempted at {signal}, inside its protection until {protected_until} (run from {})",
                    workload.jobs[r.job as usize].job_id, r.start
                ));
            }
            // Allot: the policy core's grace for this victim; baseline: one for all.
            let grace = match cfg.policy {
                PolicyKind::Allot => {
                    allot::preempt::grace_for(&RunningJob { leaf: prepared.leaf[r.job as usize], contract, run_start: r.start }, &cfg.tree.settings)
                }
                PolicyKind::Baseline => cfg.tree.settings.grace.max(0),
            };
            if signal > r.end || r.end - signal > grace {
                bad.push(format!("job {} signalled at {signal} but killed at {}: the grace time is {grace}", workload.jobs[r.job as usize].job_id, r.end));
            }
        }
    }

    // 3b. Preemption within a team.
    if cfg.policy == PolicyKind::Allot {
        for r in &out.runs {
            let (RunEnd::Preempted { .. }, Some(by)) = (r.ended, r.preempted_by) else { continue };
            let (victim, preemptor) = (prepared.contract[r.job as usize], prepared.contract[by as usize]);
            let same = prepared.leaf[r.job as usize].is_some() && prepared.leaf[r.job as usize] == prepared.leaf[by as usize];
            if same && victim.is_allocated() && !(cfg.tree.settings.preempt_within_team && allot::preempt::within_team(&victim, &preemptor).allowed()) {
                bad.push(format!(
                    "job {} preempted by its teammate job {}, which rule 5 does not allow ({} over {}, minimum runtimes {} and {} s)",
                    workload.jobs[r.job as usize].job_id,
                    workload.jobs[by as usize].job_id,
                    preemptor.priority.as_str(),
                    victim.priority.as_str(),
                    preemptor.min_runtime,
                    victim.min_runtime
                ));
            }
        }
    }

    // 3c. Rule 6: only a large allocated job, with the rule on, of another leaf.
    if cfg.policy == PolicyKind::Allot {
        let settings = &cfg.tree.settings;
        for r in out.runs.iter().filter(|r| r.by_long_wait) {
            let Some(by) = r.preempted_by else { continue };
            let (v, p) = (r.job as usize, by as usize);
            let other_leaf = prepared.leaf[v].is_some() && prepared.leaf[p].is_some() && prepared.leaf[v] != prepared.leaf[p];
            if settings.large_job_wait <= 0 || !prepared.contract[p].is_allocated() || prepared.held[p] <= settings.small_job_gpus || !other_leaf {
                bad.push(format!(
                    "job {} preempted under rule 6 by job {} ({} GPUs, {}), which rule 6 does not allow (large_job_wait {} s, small_job_gpus {})",
                    workload.jobs[v].job_id,
                    workload.jobs[p].job_id,
                    prepared.held[p],
                    prepared.contract[p].canonical(),
                    settings.large_job_wait,
                    settings.small_job_gpus
                ));
            }
        }
    }

    // 4. Charging.
    let mut intervals = Vec::new();
    for r in &out.runs {
        let allocated = prepared.contract[r.job as usize].is_allocated();
        if r.charged && (!allocated || cfg.policy != PolicyKind::Allot) {
            bad.push(format!("run of job {} is charged but the job is unallocated (or the policy charges nothing)", workload.jobs[r.job as usize].job_id));
        }
        if cfg.policy == PolicyKind::Allot && allocated && !r.charged {
            bad.push(format!("allocated run of job {} was not charged", workload.jobs[r.job as usize].job_id));
        }
        if let Some(leaf) = prepared.leaf[r.job as usize] {
            intervals.push(Interval { leaf, gpus: r.gpus, start: r.start, end: Some(r.end), allocated: r.charged });
        }
    }
    let all_time = usage_in_window(&intervals, leaves, out.end, (out.end - out.start).max(0) + 1);
    if all_time.charged != out.charged {
        bad.push(format!("charged per leaf {:?}, but the allocated runs sum to {:?}", out.charged, all_time.charged));
    }

    // 5. Fates.
    let mut completed = 0;
    for (job, o) in workload.jobs.iter().zip(&out.jobs) {
        match &o.fate {
            Fate::Completed => completed += 1,
            Fate::Cancelled(r) | Fate::Refused(r) | Fate::Unfinished(r) if r.trim().is_empty() => {
                bad.push(format!("job {} did not complete and no reason is given: {:?}", job.job_id, o.fate));
            }
            _ => {}
        }
    }
    let r = &sim.report;
    if r.jobs_completed != completed || r.jobs_completed + r.jobs_cancelled + r.jobs_refused + r.jobs_unfinished != r.jobs || r.jobs != workload.jobs.len() {
        bad.push(format!(
            "report counts do not add up: {} jobs, {} completed ({completed} by outcome), {} cancelled, {} refused, {} unfinished",
            r.jobs, r.jobs_completed, r.jobs_cancelled, r.jobs_refused, r.jobs_unfinished
        ));
    }
    if r.not_completed.values().sum::<usize>() != r.jobs - r.jobs_completed {
        bad.push("the reasons for not completing do not cover every such job".into());
    }
    if cfg.horizon.is_none() && r.jobs_unfinished > 0 {
        bad.push(format!("{} jobs unfinished in a run without a horizon", r.jobs_unfinished));
    }

    // 6. The small-job nodes.
    let first_small = cfg.cluster.nodes.saturating_sub(cfg.small_job_nodes);
    let rules = allot::preempt::PreemptRules::from_settings(&cfg.tree.settings);
    for run in &out.runs {
        let j = run.job as usize;
        let waiting = allot::preempt::WaitingJob { leaf: prepared.leaf[j], contract: prepared.contract[j], gpus: prepared.held[j], queued_since: None };
        if run.slots.iter().any(|&(n, _)| n >= first_small) && !rules.may_use_small_job_nodes(&waiting) {
            bad.push(format!(
                "job {} ({} GPUs, {}) ran on a node kept for small jobs",
                workload.jobs[j].job_id,
                prepared.held[j],
                prepared.contract[j].canonical()
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use allot::budget::BudgetTree;

    use super::*;
    use crate::{simulate, ClusterSpec};

    /// A run that the engine let be preempted inside its protection, and
    /// said so in its own record, is still caught: the protection comes
    /// from the job's contract.
    #[test]
    fn a_preemption_inside_the_protection_is_caught_whatever_the_run_records() {
        let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,priority\n1,0,1,7200,a,3600,true,normal\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let tree = BudgetTree::parse("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n").unwrap();
        for policy in [PolicyKind::Allot, PolicyKind::Baseline] {
            let cfg = Config::new(ClusterSpec { nodes: 1, gpus_per_node: 1 }, tree.clone(), policy);
            let mut sim = simulate(&w, &cfg, &mut |_| {});
            assert_eq!(invariants(&w, &cfg, &sim), Vec::<String>::new());
            // Job 1 (allocated, one hour of protection) as if signalled half an
            // hour into its run, and recorded as preemptible throughout.
            let r = sim.outcome.runs.iter_mut().find(|r| r.job == 0).unwrap();
            r.ended = RunEnd::Preempted { signal: r.start + 1800 };
            r.preemptible_from = r.start;
            let broken = invariants(&w, &cfg, &sim);
            let until = match policy {
                PolicyKind::Allot => 3600,
                PolicyKind::Baseline => i64::MAX,
            };
            for want in [format!("inside its protection until {until}"), format!("its contract says {until}")] {
                assert!(broken.iter().any(|b| b.contains(&want)), "{policy:?}: no '{want}' in {broken:#?}");
            }
        }
    }
}
