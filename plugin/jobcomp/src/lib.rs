//! `jobcomp/allot`: every run's end, handed to priority/allot.
//!
//! slurmctld calls a job-completion plugin at the end of every run of every
//! job (`job_completion_logger`): completions, failures, cancellations,
//! time-outs, node failures, preemptions and requeues alike, with the run's
//! exact start and end still in the job record. That is the one event stream
//! that does not depend on anyone polling the job list, so a 1-second job is
//! charged like a 1-day one, and a run that was requeued and started again
//! between two recomputes is still its own run. This plugin only forwards
//! the record, in the same call, to priority/allot, which keeps every run
//! and writes them to the ledger (see `allot_slurm::handoff`).
//!
//! Slurm 22.05 has a single JobCompType, so a site that uses another
//! job-completion plugin must choose; allot's ledger (`allot why`,
//! `allot usage`) holds the runs either way.

use std::sync::atomic::{AtomicBool, Ordering};

use allot_slurm::job::Job;
use allot_slurm::{JobCompPlugin, Plugin};

pub struct JobCompAllot {
    /// Whether the missing priority/allot has been logged already.
    warned: AtomicBool,
}

allot_slurm::slurm_plugin!(jobcomp, "jobcomp/allot", "allot run accounting", JobCompAllot);

impl Plugin for JobCompAllot {
    fn init() -> Result<Self, String> {
        Ok(JobCompAllot { warned: AtomicBool::new(false) })
    }
}

impl JobCompPlugin for JobCompAllot {
    fn run_ended(&self, job: Job<'_>) {
        if !allot_slurm::handoff::run_ended(job) && !self.warned.swap(true, Ordering::Relaxed) {
            log::error!(
                "priority/allot is not loaded in this slurmctld (PriorityType=priority/allot): runs that end cannot be charged; JobId={} was the first",
                job.id()
            );
        }
    }
}
