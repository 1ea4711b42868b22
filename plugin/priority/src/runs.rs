//! The priority plugin's memory of job runs: what is running now, what ran
//! inside the lookback window, and what the ledger has yet to hear about.
//!
//! Each period the worker tells the book which jobs it saw running; the book
//! opens runs for new ones, closes runs that stopped, and hands back the
//! ledger updates. Updates that could not be written (ledger broken) stay
//! queued and go out with the next successful write, so the ledger catches
//! up (opening or closing a run twice is harmless there).

use std::collections::HashMap;
use std::sync::Arc;

use allot::budget::{BudgetTree, LeafId};
use allot::occupancy::Interval;
use allot_ledger::{RunRow, RunUpdate};

/// A running job as seen in one walk of the job list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub job_id: u32,
    pub run_start: i64,
    pub gpus: u32,
    pub leaf: Option<Arc<str>>,
    pub allocated: bool,
    pub account: Option<String>,
    pub user: Option<String>,
}

#[derive(Debug, Clone)]
struct Run {
    leaf_path: Option<Arc<str>>,
    leaf: Option<LeafId>,
    gpus: u32,
    allocated: bool,
    end: Option<i64>,
}

/// How a run that is no longer running ended, as far as the walk could see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Finished (completed, failed, cancelled...) at this time.
    Finished(i64),
    /// Back in the queue (preempted or requeued).
    Requeued,
    /// Gone from the job list, or suspended.
    Unknown,
}

#[derive(Default)]
pub struct RunBook {
    open: HashMap<(u32, i64), Run>,
    closed: Vec<(i64, Run)>,
    unwritten: Vec<RunUpdate>,
}

impl RunBook {
    /// Starts from the ledger's runs that overlap the window.
    pub fn from_ledger(rows: Vec<RunRow>, tree: &BudgetTree) -> RunBook {
        let mut book = RunBook::default();
        for r in rows {
            let leaf_path: Option<Arc<str>> = r.leaf.map(Arc::from);
            let leaf = leaf_path.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
            let run = Run { leaf_path, leaf, gpus: r.gpus, allocated: r.allocated, end: r.run_end };
            match r.run_end {
                None => {
                    book.open.insert((r.job_id, r.run_start), run);
                }
                Some(_) => book.closed.push((r.run_start, run)),
            }
        }
        book
    }

    /// Points every run at its leaf in a new budget tree (leaves removed
    /// from the budget are no longer charged to anyone).
    pub fn remap(&mut self, tree: &BudgetTree) {
        let leaf_of = |path: &Option<Arc<str>>| path.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
        for run in self.open.values_mut() {
            run.leaf = leaf_of(&run.leaf_path);
        }
        for (_, run) in self.closed.iter_mut() {
            run.leaf = leaf_of(&run.leaf_path);
        }
    }

    /// Takes in one walk's running jobs (`running`) and how the others ended
    /// (`ending`, by job id). Returns nothing; updates queue for the ledger.
    pub fn observe(&mut self, now: i64, running: &[Observed], tree: &BudgetTree, ending: impl Fn(u32) -> Ending) {
        let mut still: HashMap<(u32, i64), ()> = HashMap::with_capacity(running.len());
        for o in running {
            let key = (o.job_id, o.run_start);
            still.insert(key, ());
            if self.open.contains_key(&key) {
                continue;
            }
            let leaf = o.leaf.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
            self.open.insert(key, Run { leaf_path: o.leaf.clone(), leaf, gpus: o.gpus, allocated: o.allocated, end: None });
            self.unwritten.push(RunUpdate::Open(RunRow {
                job_id: o.job_id,
                run_start: o.run_start,
                run_end: None,
                leaf: o.leaf.as_deref().map(str::to_owned),
                account: o.account.clone(),
                user: o.user.clone(),
                gpus: o.gpus,
                allocated: o.allocated,
                end_reason: None,
            }));
        }
        let stopped: Vec<(u32, i64)> = self.open.keys().filter(|k| !still.contains_key(k)).copied().collect();
        for key in stopped {
            let mut run = self.open.remove(&key).expect("key came from the map");
            let (end, reason) = match ending(key.0) {
                // Trust Slurm's end time when it is plausible.
                Ending::Finished(t) if t >= key.1 && t <= now => (t, "finished"),
                Ending::Finished(_) => (now, "finished"),
                Ending::Requeued => (now, "requeued"),
                Ending::Unknown => (now, "gone"),
            };
            run.end = Some(end);
            self.unwritten.push(RunUpdate::Close { job_id: key.0, run_start: key.1, run_end: end, reason: reason.to_owned() });
            self.closed.push((key.1, run));
        }
    }

    /// Forgets closed runs that ended before the window.
    pub fn prune(&mut self, window_start: i64) {
        self.closed.retain(|(_, r)| r.end.is_none_or(|e| e > window_start));
    }

    /// Every run as a policy interval (runs outside the tree are skipped).
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        let open = self.open.iter().map(|(k, r)| (k.1, r));
        let closed = self.closed.iter().map(|(s, r)| (*s, r));
        open.chain(closed).filter_map(|(start, r)| Some(Interval { leaf: r.leaf?, gpus: r.gpus, start, end: r.end, allocated: r.allocated }))
    }

    pub fn open_runs(&self) -> usize {
        self.open.len()
    }

    /// The updates not yet in the ledger; call [`RunBook::written`] once
    /// they are.
    pub fn unwritten(&self) -> &[RunUpdate] {
        &self.unwritten
    }
    pub fn written(&mut self, count: usize) {
        self.unwritten.drain(..count.min(self.unwritten.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot::occupancy::usage_in_window;

    fn tree() -> BudgetTree {
        BudgetTree::parse("[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n").unwrap()
    }

    fn seen(job_id: u32, start: i64, gpus: u32, leaf: &str, allocated: bool) -> Observed {
        Observed { job_id, run_start: start, gpus, leaf: Some(Arc::from(leaf)), allocated, account: None, user: None }
    }

    #[test]
    fn runs_open_close_and_charge_the_window() {
        let t = tree();
        let mut book = RunBook::default();
        book.observe(100, &[seen(1, 90, 2, "a", true), seen(2, 95, 4, "b", false)], &t, |_| Ending::Unknown);
        assert_eq!(book.unwritten().len(), 2);
        book.written(2);
        // Job 1 finished at 150, job 2 was requeued; job 3 started.
        book.observe(200, &[seen(3, 180, 1, "b", true)], &t, |id| if id == 1 { Ending::Finished(150) } else { Ending::Requeued });
        let updates = book.unwritten().to_vec();
        assert_eq!(updates.len(), 3);
        assert!(updates.contains(&RunUpdate::Close { job_id: 1, run_start: 90, run_end: 150, reason: "finished".into() }));
        assert!(updates.contains(&RunUpdate::Close { job_id: 2, run_start: 95, run_end: 200, reason: "requeued".into() }));
        // Window [0, 200]: a = 2 GPUs x 60 s; b = 1 GPU x 20 s (job 2 is unallocated).
        let u = usage_in_window(book.intervals().collect::<Vec<_>>().iter(), 2, 200, 200);
        assert_eq!(u.charged, vec![120, 20]);
        assert_eq!(u.unallocated, vec![0, 4 * 105]);
        book.prune(160);
        assert_eq!(book.intervals().count(), 2, "job 1 ended before the window");
    }

    #[test]
    fn a_restart_picks_up_the_ledger() {
        let t = tree();
        let rows = vec![RunRow {
            job_id: 7,
            run_start: 10,
            run_end: None,
            leaf: Some("a".into()),
            account: None,
            user: None,
            gpus: 8,
            allocated: true,
            end_reason: None,
        }];
        let mut book = RunBook::from_ledger(rows, &t);
        // Still running after the restart: no new run, nothing to write.
        book.observe(50, &[seen(7, 10, 8, "a", true)], &t, |_| Ending::Unknown);
        assert!(book.unwritten().is_empty());
        assert_eq!(book.open_runs(), 1);
    }
}
