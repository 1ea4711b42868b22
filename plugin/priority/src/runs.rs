//! The priority plugin's memory of job runs: what is running now, what ran
//! inside the lookback window, and what the ledger has yet to hear about.
//!
//! Two sources feed the book, both under slurmctld's job lock:
//!
//! - every run's end, exactly, as slurmctld tells jobcomp/allot
//!   ([`RunBook::run_ended`]): a run is charged however short it was, and a
//!   run that was requeued and started again between two recomputes is
//!   still its own run;
//! - each recompute's walk of the job list ([`RunBook::observe`]): runs in
//!   progress, charged up to now, and the fallback end of a run whose end
//!   no one reported (jobcomp/allot not configured, a suspension).
//!
//! Updates that could not be written (ledger broken) stay queued and go out
//! with the next successful write. When the ledger file is replaced (deleted
//! and re-created, restored, recovered) the whole window is written again
//! ([`RunBook::rewrite_all`]): opening or closing a run twice is harmless.

use std::collections::HashMap;
use std::sync::Arc;

use allot::budget::{BudgetTree, LeafId, NodeId};
use allot::occupancy::Interval;
use allot_ledger::{RunRow, RunUpdate};

/// A running job as seen in one walk of the job list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub job_id: u32,
    /// Start of the current stretch of running (after a resume: the resume).
    pub run_start: i64,
    pub gpus: u32,
    pub leaf: Option<Arc<str>>,
    pub allocated: bool,
    pub account: Option<String>,
    pub user: Option<String>,
    /// Seconds the job ran before its last suspension (0: never suspended).
    pub ran_before: i64,
}

/// A run's end as slurmctld reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub job_id: u32,
    /// The run's start as the job record has it (a resumed run: the
    /// original start; the book knows better).
    pub run_start: i64,
    pub run_end: i64,
    pub gpus: u32,
    pub leaf: Option<Arc<str>>,
    pub allocated: bool,
    pub account: Option<String>,
    pub user: Option<String>,
    /// `completed`, `preempted`, `requeued`, `node_fail`, ...
    pub reason: &'static str,
    /// The last resume, if the run was suspended and resumed.
    pub resumed_at: Option<i64>,
    /// Seconds it ran before its last suspension.
    pub ran_before_resume: i64,
}

#[derive(Debug, Clone)]
struct Run {
    row: RunRow,
    leaf: Option<LeafId>,
    /// For a run of a leaf removed with its accounts: the inner node its
    /// usage counts in (`BudgetTree::charged_node_of_run`).
    orphan_of: Option<NodeId>,
}

impl Run {
    fn new(row: RunRow, tree: &BudgetTree) -> Run {
        let mut run = Run { row, leaf: None, orphan_of: None };
        run.place(tree);
        run
    }
    /// Finds the run's leaf (or inner node) in `tree`.
    fn place(&mut self, tree: &BudgetTree) {
        let (path, account) = (self.row.leaf.as_deref(), self.row.account.as_deref());
        self.leaf = tree.charged_leaf_of_run(path, account);
        self.orphan_of = if self.leaf.is_none() { tree.charged_node_of_run(path, account) } else { None };
    }
    fn interval(&self) -> Option<Interval> {
        Some(self.row.interval(self.leaf?))
    }
    /// The interval of an orphaned run, its `leaf` field holding the node.
    fn orphan_interval(&self) -> Option<Interval> {
        Some(self.row.interval(self.orphan_of?))
    }
}

/// How a run that is no longer running ended, as far as the walk could see
/// (used only for runs whose end nobody reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Finished (completed, failed, cancelled...) at this time.
    Finished(i64),
    /// Suspended at this time.
    Suspended(i64),
    /// Back in the queue (preempted or requeued).
    Requeued,
    /// Gone from the job list.
    Unknown,
}

#[derive(Default)]
pub struct RunBook {
    open: HashMap<(u32, i64), Run>,
    /// The start of each job's open run (a job runs at most once at a time).
    open_by_job: HashMap<u32, i64>,
    closed: Vec<Run>,
    /// The end of each job's last closed run in the window: a reported run
    /// starts no earlier (a resumed job's record keeps its first start).
    last_end: HashMap<u32, i64>,
    unwritten: Vec<RunUpdate>,
}

impl RunBook {
    /// Starts from the ledger's runs that overlap the window.
    pub fn from_ledger(rows: Vec<RunRow>, tree: &BudgetTree) -> RunBook {
        let mut book = RunBook::default();
        book.merge_ledger(rows, tree);
        book
    }

    /// Adds the ledger's runs the book does not have (after a start on a
    /// ledger that could not be read at first).
    pub fn merge_ledger(&mut self, rows: Vec<RunRow>, tree: &BudgetTree) {
        let mut known: std::collections::HashSet<(u32, i64)> = self.closed.iter().map(|r| (r.row.job_id, r.row.run_start)).collect();
        for row in rows {
            let key = (row.job_id, row.run_start);
            match row.run_end {
                None => {
                    if !self.open.contains_key(&key) && !self.open_by_job.contains_key(&row.job_id) {
                        self.open_by_job.insert(row.job_id, row.run_start);
                        self.open.insert(key, Run::new(row, tree));
                    }
                }
                Some(end) => {
                    if !known.insert(key) {
                        continue;
                    }
                    let last = self.last_end.entry(row.job_id).or_insert(end);
                    *last = (*last).max(end);
                    self.closed.push(Run::new(row, tree));
                }
            }
        }
    }

    /// Takes back the run updates an earlier slurmctld kept but could not
    /// write (allot_slurm::unwritten), in the order they were made: into the
    /// book, and queued to be written again. Call before the first walk, so
    /// that a run closed in them is not closed again as gone.
    pub fn take_back(&mut self, updates: Vec<RunUpdate>, tree: &BudgetTree) {
        // A file left behind by a slurmctld that wrote its updates and died
        // before removing it holds runs the ledger (so the book) has closed:
        // each run is in the book once, or it would count twice.
        let mut closed: std::collections::HashSet<(u32, i64)> = self.closed.iter().map(|r| (r.row.job_id, r.row.run_start)).collect();
        for update in updates {
            match &update {
                RunUpdate::Open(row) => {
                    let key = (row.job_id, row.run_start);
                    if closed.contains(&key) || self.open.contains_key(&key) {
                        // Known: nothing to add.
                    } else if row.run_end.is_some() {
                        closed.insert(key);
                        self.close(Run::new(row.clone(), tree));
                    } else if let std::collections::hash_map::Entry::Vacant(slot) = self.open_by_job.entry(row.job_id) {
                        slot.insert(row.run_start);
                        self.open.insert(key, Run::new(row.clone(), tree));
                    }
                }
                // A run the book has open (from the ledger, or opened above)
                // ends as it ended; one it does not is ended by the write.
                RunUpdate::Close { job_id, run_start, run_end, reason } => {
                    if let Some(mut run) = self.open.remove(&(*job_id, *run_start)) {
                        if self.open_by_job.get(job_id) == Some(run_start) {
                            self.open_by_job.remove(job_id);
                        }
                        run.row.run_end = Some(*run_end);
                        run.row.end_reason = Some(reason.clone());
                        closed.insert((*job_id, *run_start));
                        self.close(run);
                    }
                }
            }
            self.unwritten.push(update);
        }
    }

    /// Points every run at its leaf in a new budget tree (a run of a leaf
    /// removed from the budget goes to the leaf its account belongs to now,
    /// if any).
    pub fn remap(&mut self, tree: &BudgetTree) {
        for run in self.open.values_mut().chain(self.closed.iter_mut()) {
            run.place(tree);
        }
    }

    /// A run's end, as slurmctld reported it. Closes the job's open run
    /// exactly, or records a whole run the walks never saw.
    pub fn run_ended(&mut self, e: Ended, tree: &BudgetTree) {
        if let Some(start) = self.open_by_job.remove(&e.job_id) {
            let mut run = self.open.remove(&(e.job_id, start)).expect("open_by_job indexes open");
            let end = e.run_end.max(start);
            run.row.run_end = Some(end);
            run.row.end_reason = Some(e.reason.to_owned());
            self.unwritten.push(RunUpdate::Close { job_id: e.job_id, run_start: start, run_end: end, reason: e.reason.to_owned() });
            self.close(run);
            return;
        }
        // Never seen running: charge it from the record. A job that never
        // started (cancelled while pending) has no start, or no GPUs. A run
        // that started and ended within one second (preempted at once) is
        // still one of Slurm's runs: it is kept, charged nothing. A report
        // of what an earlier run of the job already covers is not.
        let last_end = self.last_end.get(&e.job_id).copied();
        if e.run_start <= 0 || e.gpus == 0 || e.run_end < e.run_start || last_end.is_some_and(|last| e.run_end <= last) {
            return;
        }
        let start = e.run_start.max(last_end.unwrap_or(i64::MIN));
        // A run suspended and resumed ran `ran_before_resume` seconds before
        // its last suspension, then from the resume on: suspended time is
        // not GPU time used.
        let stretches: Vec<(i64, i64)> = match e.resumed_at {
            Some(resume) if resume > start && resume <= e.run_end => {
                [(start, (start + e.ran_before_resume.max(0)).min(resume)), (resume, e.run_end)].into_iter().filter(|(from, to)| to > from).collect()
            }
            _ => vec![(start, e.run_end)],
        };
        for (from, to) in stretches {
            let row = RunRow {
                job_id: e.job_id,
                run_start: from,
                run_end: Some(to),
                leaf: e.leaf.as_deref().map(str::to_owned),
                account: e.account.clone(),
                user: e.user.clone(),
                gpus: e.gpus,
                allocated: e.allocated,
                end_reason: Some(if to == e.run_end { e.reason } else { "suspended" }.to_owned()),
            };
            self.unwritten.push(RunUpdate::Open(row.clone()));
            self.close(Run::new(row, tree));
        }
    }

    fn close(&mut self, run: Run) {
        let end = run.row.run_end.expect("closed runs have an end");
        let last = self.last_end.entry(run.row.job_id).or_insert(end);
        *last = (*last).max(end);
        self.closed.push(run);
    }

    /// Takes in one walk's running jobs (`running`) and how the others ended
    /// (`ending`, by job id): opens runs for new ones, and closes open runs
    /// no longer running whose end was not reported. Call after
    /// [`RunBook::run_ended`] for the reports of the same walk.
    pub fn observe(&mut self, now: i64, running: &[Observed], tree: &BudgetTree, ending: impl Fn(u32) -> Ending) {
        let mut still: HashMap<(u32, i64), ()> = HashMap::with_capacity(running.len());
        for o in running {
            let key = (o.job_id, o.run_start);
            still.insert(key, ());
            if self.open.contains_key(&key) {
                continue;
            }
            if let Some(&old) = self.open_by_job.get(&o.job_id) {
                // Another stretch of the same job while its earlier one is
                // still open (suspended and resumed between two walks): the
                // earlier one ran at most what the job ran before its last
                // suspension, and ended at the latest when this one began.
                let end = (old + o.ran_before.max(0)).min(o.run_start).max(old);
                self.close_open(o.job_id, old, end, "suspended");
            }
            let row = RunRow {
                job_id: o.job_id,
                run_start: o.run_start,
                run_end: None,
                leaf: o.leaf.as_deref().map(str::to_owned),
                account: o.account.clone(),
                user: o.user.clone(),
                gpus: o.gpus,
                allocated: o.allocated,
                end_reason: None,
            };
            self.unwritten.push(RunUpdate::Open(row.clone()));
            self.open_by_job.insert(o.job_id, o.run_start);
            self.open.insert(key, Run::new(row, tree));
        }
        let stopped: Vec<(u32, i64)> = self.open.keys().filter(|k| !still.contains_key(k)).copied().collect();
        for (job_id, start) in stopped {
            let plausible = |t: i64| t >= start && t <= now;
            let (end, reason) = match ending(job_id) {
                // Trust Slurm's times when they are plausible.
                Ending::Finished(t) if plausible(t) => (t, "finished"),
                Ending::Finished(_) => (now, "finished"),
                Ending::Suspended(t) if plausible(t) => (t, "suspended"),
                Ending::Suspended(_) => (now, "suspended"),
                Ending::Requeued => (now, "requeued"),
                Ending::Unknown => (now, "gone"),
            };
            self.close_open(job_id, start, end, reason);
        }
    }

    fn close_open(&mut self, job_id: u32, start: i64, end: i64, reason: &str) {
        let Some(mut run) = self.open.remove(&(job_id, start)) else { return };
        if self.open_by_job.get(&job_id) == Some(&start) {
            self.open_by_job.remove(&job_id);
        }
        run.row.run_end = Some(end);
        run.row.end_reason = Some(reason.to_owned());
        self.unwritten.push(RunUpdate::Close { job_id, run_start: start, run_end: end, reason: reason.to_owned() });
        self.close(run);
    }

    /// Forgets closed runs that ended before the window.
    pub fn prune(&mut self, window_start: i64) {
        self.closed.retain(|r| r.row.run_end.is_none_or(|e| e > window_start));
        self.last_end.retain(|_, end| *end > window_start);
    }

    /// Every run as a policy interval (runs outside the tree are skipped).
    pub fn intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.open.values().chain(self.closed.iter()).filter_map(Run::interval)
    }

    /// The runs of leaves removed with their accounts, as intervals whose
    /// `leaf` is the inner node their usage counts in.
    pub fn orphan_intervals(&self) -> impl Iterator<Item = Interval> + '_ {
        self.open.values().chain(self.closed.iter()).filter_map(Run::orphan_interval)
    }

    pub fn open_runs(&self) -> usize {
        self.open.len()
    }

    /// Queues every run in the window for writing again, ahead of what is
    /// queued: for a ledger that replaced the one they were written to.
    pub fn rewrite_all(&mut self) {
        let mut all = Vec::with_capacity(self.open.len() + 2 * self.closed.len() + self.unwritten.len());
        for run in self.closed.iter().chain(self.open.values()) {
            let mut opened = run.row.clone();
            // Written open first, then closed: a ledger that still has the
            // run open (a restored copy) gets its end too.
            opened.run_end = None;
            opened.end_reason = None;
            all.push(RunUpdate::Open(opened));
            if let (Some(end), Some(reason)) = (run.row.run_end, &run.row.end_reason) {
                all.push(RunUpdate::Close { job_id: run.row.job_id, run_start: run.row.run_start, run_end: end, reason: reason.clone() });
            }
        }
        all.append(&mut self.unwritten);
        self.unwritten = all;
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
        Observed { job_id, run_start: start, gpus, leaf: Some(Arc::from(leaf)), allocated, account: None, user: None, ran_before: 0 }
    }

    fn ended(job_id: u32, start: i64, end: i64, gpus: u32, leaf: &str, reason: &'static str) -> Ended {
        Ended {
            job_id,
            run_start: start,
            run_end: end,
            gpus,
            leaf: Some(Arc::from(leaf)),
            allocated: true,
            account: None,
            user: None,
            reason,
            resumed_at: None,
            ran_before_resume: 0,
        }
    }

    fn charged(book: &RunBook, now: i64) -> Vec<i64> {
        usage_in_window(book.intervals().collect::<Vec<_>>().iter(), 2, now, now).charged
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
    fn a_reported_end_is_exact_and_a_run_never_seen_is_charged() {
        let t = tree();
        let mut book = RunBook::default();
        book.observe(100, &[seen(1, 90, 2, "a", true)], &t, |_| Ending::Unknown);
        // Job 1 ended at 103 (preempted), job 2 ran 2 s between two walks,
        // then job 1 ran again from 115 (requeued and restarted) and ended.
        book.run_ended(ended(1, 90, 103, 2, "a", "preempted"), &t);
        book.run_ended(ended(2, 104, 106, 8, "b", "completed"), &t);
        book.run_ended(ended(1, 115, 117, 2, "a", "completed"), &t);
        // A job cancelled while pending: no run.
        book.run_ended(ended(3, 0, 120, 0, "b", "cancelled"), &t);
        book.observe(130, &[], &t, |_| Ending::Unknown);
        assert_eq!(charged(&book, 130), vec![2 * 13 + 2 * 2, 8 * 2]);
        let reasons: Vec<_> = book.closed.iter().map(|r| (r.row.job_id, r.row.run_start, r.row.end_reason.clone().unwrap())).collect();
        assert_eq!(reasons, vec![(1, 90, "preempted".into()), (2, 104, "completed".into()), (1, 115, "completed".into())]);
    }

    #[test]
    fn a_run_preempted_within_its_first_second_is_kept_and_charged_nothing() {
        let t = tree();
        let mut book = RunBook::default();
        // Started at 140 and preempted in the same second, between two
        // walks (Slurm's records hold it as a run of 0 s); restarted at 155.
        book.run_ended(ended(1, 140, 140, 8, "a", "preempted"), &t);
        book.run_ended(ended(1, 155, 180, 8, "a", "completed"), &t);
        // The same reports again change nothing.
        book.run_ended(ended(1, 140, 140, 8, "a", "preempted"), &t);
        book.run_ended(ended(1, 155, 180, 8, "a", "completed"), &t);
        let runs: Vec<_> = book.closed.iter().map(|r| (r.row.run_start, r.row.run_end, r.row.end_reason.clone().unwrap())).collect();
        assert_eq!(runs, vec![(140, Some(140), "preempted".into()), (155, Some(180), "completed".into())]);
        assert_eq!(book.unwritten().len(), 2);
        assert_eq!(charged(&book, 200), vec![8 * 25, 0]);
    }

    #[test]
    fn a_run_of_0_s_and_the_next_starting_in_the_same_second_charge_the_real_run() {
        let t = tree();
        let mut book = RunBook::default();
        // Preempted in its first second at 140, requeued and started again
        // within that second, then completed at 180.
        book.run_ended(ended(1, 140, 140, 8, "a", "preempted"), &t);
        book.run_ended(ended(1, 140, 180, 8, "a", "completed"), &t);
        assert_eq!(charged(&book, 200), vec![8 * 40, 0], "the real run is charged, once");
        // The ledger keys runs by (job, start): one row, ending when the real run did.
        let mut ledger = allot_ledger::Ledger::in_memory().unwrap();
        ledger.record_period(&allot_ledger::Period { runs: book.unwritten().to_vec(), ..Default::default() }).unwrap();
        let rows = ledger.runs_of_job(1).unwrap();
        assert_eq!(rows.iter().map(|r| (r.run_start, r.run_end)).collect::<Vec<_>>(), vec![(140, Some(180))], "{rows:?}");
        assert_eq!(ledger.charged_by_leaf(0, 200).unwrap(), vec![("a".to_owned(), 8 * 40)]);
    }

    #[test]
    fn a_suspension_is_not_charged_twice() {
        let t = tree();
        let mut book = RunBook::default();
        book.observe(100, &[seen(1, 50, 4, "a", true)], &t, |_| Ending::Unknown);
        // Suspended at 110 (the walk sees it suspended), resumed at 200.
        book.observe(120, &[], &t, |_| Ending::Suspended(110));
        book.observe(210, &[seen(1, 200, 4, "a", true)], &t, |_| Ending::Unknown);
        // It completes at 220; its record still says it started at 50.
        book.run_ended(ended(1, 50, 220, 4, "a", "completed"), &t);
        assert_eq!(charged(&book, 230), vec![4 * (60 + 20), 0]);
        // Suspended and resumed between two walks, after running 120 s:
        // the first stretch ends when it had run that long.
        let mut book = RunBook::default();
        book.observe(100, &[seen(1, 50, 4, "a", true)], &t, |_| Ending::Unknown);
        book.observe(300, &[Observed { ran_before: 120, ..seen(1, 250, 4, "a", true) }], &t, |_| Ending::Unknown);
        assert_eq!(charged(&book, 300), vec![4 * (120 + 50), 0]);
        // Never seen at all: ran 30 s, suspended, resumed at 100, ended at 110.
        let mut book = RunBook::default();
        book.run_ended(Ended { resumed_at: Some(100), ran_before_resume: 30, ..ended(2, 10, 110, 2, "b", "completed") }, &t);
        assert_eq!(charged(&book, 200), vec![0, 2 * (30 + 10)]);
    }

    #[test]
    fn rewrite_all_queues_the_whole_window_once() {
        let t = tree();
        let mut book = RunBook::default();
        book.observe(100, &[seen(1, 90, 2, "a", true), seen(2, 95, 1, "b", true)], &t, |_| Ending::Unknown);
        book.run_ended(ended(1, 90, 99, 2, "a", "completed"), &t);
        let n = book.unwritten().len();
        book.written(n);
        book.rewrite_all();
        let updates = book.unwritten().to_vec();
        assert_eq!(updates.len(), 3, "job 1 open + close, job 2 open: {updates:?}");
        let mut ledger = allot_ledger::Ledger::in_memory().unwrap();
        ledger.record_period(&allot_ledger::Period { runs: updates, ..Default::default() }).unwrap();
        let rows = ledger.runs_since(0).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.iter().find(|r| r.job_id == 1).unwrap().run_end, Some(99));
        assert_eq!(rows.iter().find(|r| r.job_id == 2).unwrap().run_end, None);
    }

    #[test]
    fn a_restart_picks_up_the_ledger() {
        let t = tree();
        let mut book = RunBook::from_ledger(vec![open_run_of_7()], &t);
        // Still running after the restart: no new run, nothing to write.
        book.observe(50, &[seen(7, 10, 8, "a", true)], &t, |_| Ending::Unknown);
        assert!(book.unwritten().is_empty());
        assert_eq!(book.open_runs(), 1);
    }

    #[test]
    fn updates_kept_across_a_restart_are_taken_back_once_and_written_again() {
        let t = tree();
        // Before the restart: job 7 (in the ledger, open) ended at 40; job 8
        // ran 20-30 and job 9 started at 35, neither written.
        let mut before = RunBook::from_ledger(vec![open_run_of_7()], &t);
        before.run_ended(ended(7, 10, 40, 8, "a", "completed"), &t);
        before.run_ended(ended(8, 20, 30, 2, "b", "completed"), &t);
        before.observe(45, &[seen(9, 35, 1, "b", true)], &t, |_| Ending::Unknown);
        let kept = before.unwritten().to_vec();
        assert_eq!(kept.len(), 3);
        // After it: the ledger still has job 7 open; Slurm has forgotten 7 and 8.
        let mut book = RunBook::from_ledger(vec![open_run_of_7()], &t);
        book.take_back(kept.clone(), &t);
        // The first walk sees job 9 still running, 7 and 8 gone: nothing is
        // closed again, nothing opened twice.
        book.observe(60, &[seen(9, 35, 1, "b", true)], &t, |_| Ending::Unknown);
        assert_eq!(book.unwritten(), &kept[..], "exactly the kept updates are written again");
        assert_eq!(charged(&book, 60), vec![8 * 30, 2 * 10 + 25]);
        let mut ledger = allot_ledger::Ledger::in_memory().unwrap();
        ledger.record_period(&allot_ledger::Period { runs: vec![RunUpdate::Open(open_run_of_7())], ..Default::default() }).unwrap();
        ledger.record_period(&allot_ledger::Period { runs: book.unwritten().to_vec(), ..Default::default() }).unwrap();
        let rows: Vec<(u32, i64, Option<i64>)> = ledger.runs_since(0).unwrap().iter().map(|r| (r.job_id, r.run_start, r.run_end)).collect();
        assert_eq!(rows.len(), 3, "{rows:?}");
        for want in [(7, 10, Some(40)), (8, 20, Some(30)), (9, 35, None)] {
            assert!(rows.contains(&want), "{want:?} not in {rows:?}");
        }
        // Taken back twice (a second restart before the ledger took them): the same book.
        let again = book.unwritten().to_vec();
        book.take_back(again, &t);
        assert_eq!(charged(&book, 60), vec![8 * 30, 2 * 10 + 25]);
        assert_eq!(book.open_runs(), 1);
    }

    #[test]
    fn a_file_left_after_its_updates_were_written_counts_nothing_twice() {
        let t = tree();
        // The previous slurmctld wrote job 7's whole run (10-40) and died
        // before removing the file: the ledger has the run closed.
        let kept = vec![RunUpdate::Open(open_run_of_7()), RunUpdate::Close { job_id: 7, run_start: 10, run_end: 40, reason: "completed".into() }];
        let mut book = RunBook::from_ledger(vec![RunRow { run_end: Some(40), end_reason: Some("completed".into()), ..open_run_of_7() }], &t);
        book.take_back(kept, &t);
        // Job 7 is gone from Slurm's list: the walk closes nothing more.
        book.observe(60, &[], &t, |_| Ending::Unknown);
        assert_eq!(charged(&book, 60), vec![8 * 30, 0], "the run counts once");
        assert_eq!(book.open_runs(), 0);
    }

    /// Job 7's run from 10 on 8 GPUs of leaf a, still open, as the ledger holds it.
    fn open_run_of_7() -> RunRow {
        RunRow { job_id: 7, run_start: 10, run_end: None, leaf: Some("a".into()), account: None, user: None, gpus: 8, allocated: true, end_reason: None }
    }
}
