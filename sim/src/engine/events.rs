//! The typed event queue: what happens next, in the order events apply
//! within one instant.
//!
//! Submissions are not queued: they are read from the workload, which is
//! sorted by (submit, job id), and merged with the queue. At one instant,
//! GPUs are released before claims are served, protections end before new
//! work arrives, and backfill cycles come last; ties by insertion.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::workload::Workload;

/// Kinds of event, in the order they apply at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum EventKind {
    /// A run's expected end: it completes, or (in its grace time) is killed.
    Release,
    /// A preemptor's victims are gone: it starts on the GPUs it claimed.
    StartClaimed,
    /// A run's minimum runtime ends: it may be preempted from now on.
    ProtectionEnd,
    /// A large job has waited `large_job_wait`: rule 6 may apply to it.
    LongWait,
    /// A job is submitted.
    Submit,
    /// A requeued job is eligible again.
    Requeue,
    /// Slurm's main scheduler runs a pass (`Config::main_clock`).
    MainPass,
    /// A backfill cycle.
    Backfill,
}

/// (time, kind, sequence number, job, run number): the heap's order is the
/// order events apply in, ties broken by insertion.
type Queued = (i64, EventKind, u64, u32, u32);

/// The pending events and the cursor of the next submission.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    heap: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    /// Events in the heap other than backfill cycles.
    work: usize,
    next_submit: usize,
}

impl EventQueue {
    /// Schedules an event of `kind` for `job` (its run `run`) at `time`.
    pub(super) fn push(&mut self, time: i64, kind: EventKind, job: u32, run: u32) {
        self.seq += 1;
        if kind != EventKind::Backfill {
            self.work += 1;
        }
        self.heap.push(Reverse((time, kind, self.seq, job, run)));
    }

    /// When the next event happens: the heap's or the next submission's.
    pub(super) fn peek_time(&self, workload: &Workload) -> Option<i64> {
        let submit = workload.jobs.get(self.next_submit).map(|j| j.submit);
        let heap = self.heap.peek().map(|Reverse((t, ..))| *t);
        match (submit, heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next event: (time, kind, job, run).
    pub(super) fn pop(&mut self, workload: &Workload) -> Option<(i64, EventKind, u32, u32)> {
        let submit = workload.jobs.get(self.next_submit).map(|j| (j.submit, EventKind::Submit));
        let heap = self.heap.peek().map(|Reverse((t, k, ..))| (*t, *k));
        match (submit, heap) {
            (Some(s), Some(h)) if h < s => self.pop_heap(),
            (Some((t, _)), _) => {
                let i = self.next_submit as u32;
                self.next_submit += 1;
                Some((t, EventKind::Submit, i, 0))
            }
            (None, Some(_)) => self.pop_heap(),
            (None, None) => None,
        }
    }

    fn pop_heap(&mut self) -> Option<(i64, EventKind, u32, u32)> {
        let (t, k, _, j, r) = self.heap.pop()?.0;
        if k != EventKind::Backfill {
            self.work -= 1;
        }
        Some((t, k, j, r))
    }

    /// Whether anything but backfill cycles is still to come.
    pub(super) fn has_work(&self, workload: &Workload) -> bool {
        self.work > 0 || self.next_submit < workload.jobs.len()
    }
}
