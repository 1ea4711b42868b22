//! `preempt/allot`: the scheduling contract, decided by the policy core's
//! `may_preempt` on the latest budget and usage.
//!
//! - An unallocated job (`min_runtime=0`) never preempts and may be
//!   preempted by any allocated job.
//! - An allocated job is protected until its minimum runtime has elapsed;
//!   after that, a job whose allocation is under-served compared with its
//!   own, by more than the anti-thrash margin (a small job: at all), may
//!   take its GPUs, and so may a job of its own team that declares a
//!   strictly higher priority (and no longer a minimum runtime), and, with
//!   the budget's `large_job_wait`, a large job that has waited that long
//!   (since its `begin_time`, Slurm's eligible time) while its budget was
//!   under its share, with no margin, from a run that has run its own
//!   minimum runtime too (rule 6): `allot::preempt::may_preempt_with`, with
//!   the preemptor's requested GPUs.
//! - Resumable jobs (Slurm's requeue flag) are requeued, others cancelled;
//!   victims are offered unallocated first, then the fewest GPUs, then the
//!   lowest-ranked (`allot::preempt::victim_order`); grace from allot.conf's
//!   GraceTime, else the budget file's `grace`, and for an unallocated
//!   victim at most the budget's `unallocated_grace` (`grace_for`).
//!
//! `preempt_p_preemptable` runs for every job on every scheduling pass: jobs
//! that are not running are answered by the export layer with one field
//! read; running ones take a few lookups on an in-memory snapshot: no I/O,
//! no locks.

use allot::order::PRIORITY_BOTTOM;
use allot::preempt::{grace_for, may_preempt_with};
use allot_slurm::config::AllotConf;
use allot_slurm::job::Job;
use allot_slurm::policy::{preempt_rules, running_job, victim_prio, waiting_job};
use allot_slurm::snapshot::FollowerThread;
use allot_slurm::{sys, Plugin, PreemptPlugin, PreemptQuery};

/// The usage snapshot changes every RecomputePeriod; reading the ledger a
/// little more often than that keeps decisions at most one period behind.
const MAX_FOLLOW_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

pub struct PreemptAllot {
    conf: AllotConf,
    follower: Option<FollowerThread>,
}

allot_slurm::slurm_plugin!(preempt, "preempt/allot", "allot preemption contract", PreemptAllot);

impl Plugin for PreemptAllot {
    fn init() -> Result<Self, String> {
        let conf = allot_slurm::load_allot_conf()?;
        let follower = if allot_slurm::ctld::in_slurmctld() {
            let period = conf.recompute_period.min(MAX_FOLLOW_PERIOD);
            Some(
                FollowerThread::start("allot-preempt", &conf.ledger, allot_slurm::cluster_name().as_deref(), allot_slurm::last_good_path(), period)
                    .map_err(|e| format!("cannot start the ledger thread: {e}"))?,
            )
        } else {
            None
        };
        Ok(PreemptAllot { conf, follower })
    }
}

impl PreemptPlugin for PreemptAllot {
    fn preemptable(&self, preemptee: Job<'_>, preemptor: Job<'_>) -> bool {
        // (Only running preemptees get here: the export layer answers the rest.)
        let Some(follower) = &self.follower else { return false };
        let loaded = follower.load();
        let Some(s) = loaded.as_deref() else { return false };
        let running = running_job(&preemptee, &s.tree, s.rules);
        let waiting = waiting_job(&preemptor, &s.tree, s.rules);
        let decision = may_preempt_with(&running, &waiting, allot_slurm::now(), &s.ranking, preempt_rules(&s.tree));
        if decision.allowed() {
            log::debug!("JobId={} may preempt JobId={}: {decision}", preemptor.id(), preemptee.id());
        }
        decision.allowed()
    }

    fn data(&self, job: Option<Job<'_>>, query: PreemptQuery<'_>) {
        let loaded = self.follower.as_ref().map(FollowerThread::load);
        let snapshot = loaded.as_ref().and_then(|g| g.as_deref());
        match query {
            PreemptQuery::Enabled(on) => *on = true,
            PreemptQuery::Mode(mode) => {
                let resumable = job.is_some_and(|j| j.requeue_allowed());
                *mode = if resumable { sys::PREEMPT_MODE_REQUEUE } else { sys::PREEMPT_MODE_CANCEL } as u16;
            }
            PreemptQuery::Prio(prio) => {
                *prio = match (job, snapshot) {
                    (Some(j), Some(s)) => victim_prio(&j, &s.tree, s.rules, &s.ranking),
                    _ => PRIORITY_BOTTOM,
                }
            }
            PreemptQuery::GraceTime(grace) => {
                *grace = match snapshot {
                    Some(s) => {
                        // allot.conf's GraceTime, else the budget's grace; an
                        // unallocated victim gets `unallocated_grace` at most.
                        let mut settings = s.tree.settings.clone();
                        if let Some(g) = self.conf.grace_time {
                            settings.grace = g as i64;
                        }
                        match job {
                            Some(j) => grace_for(&running_job(&j, &s.tree, s.rules), &settings),
                            None => settings.grace,
                        }
                        .clamp(0, u32::MAX as i64) as u32
                    }
                    None => self.conf.grace_time.unwrap_or(60),
                };
                log::debug!("grace time of {:?}: {} s", job, *grace);
            }
        }
    }
}
