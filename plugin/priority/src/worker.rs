//! The priority plugin's thread: once per RecomputePeriod it
//!
//! 1. reads the budget from the ledger (outside slurmctld's locks);
//! 2. under slurmctld's job lock, walks the job list: records the runs of
//!    running jobs, recomputes windowed usage, the fair-share ranking and
//!    the order of pending jobs, sets their priorities, and requeues jobs
//!    that must go: those on DRAIN nodes whose minimum runtime is over, and
//!    resumable jobs that exited during their preemption grace time (Slurm
//!    alone would leave them COMPLETED);
//! 3. writes runs, contracts, events and the usage snapshot to the ledger
//!    (outside the locks again), or keeps them for the next period if the
//!    ledger is unavailable: scheduling goes on from memory either way.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use allot::budget::BudgetTree;
use allot::contract::ContractRules;
use allot::fairshare::Ranking;
use allot::occupancy::usage_in_window;
use allot::order::{PendingJob, PriorityMap, PRIORITY_BOTTOM};
use allot_ledger::{ContractRow, EventRow, LeafUsage, Ledger, Period, UsageSnapshot};
use allot_slurm::ctld::{Locked, Slurmctld};
use allot_slurm::job::{Job, JobState};
use allot_slurm::policy::{contract_of, leaf_of, pending_job, running_job};
use allot_slurm::snapshot::{Follower, LedgerFile, ProblemLog};

use crate::runs::{Ending, Observed, RunBook};

/// What `priority_p_set` needs between two recomputes.
#[derive(Default)]
pub struct OrderState {
    pub tree: Option<Arc<BudgetTree>>,
    pub rules: Option<ContractRules>,
    pub ranking: Option<Ranking>,
    pub map: Option<PriorityMap>,
}

impl OrderState {
    /// The priority of one job, placed after its group's current jobs.
    pub fn assign(&mut self, job: &Job<'_>) -> (u32, bool) {
        let (Some(tree), Some(rules), Some(ranking), Some(map)) = (&self.tree, self.rules, &self.ranking, &mut self.map) else {
            return (PRIORITY_BOTTOM, false);
        };
        match pending_job(job, tree, rules) {
            Some(p) => {
                let prio = map.assign_new(ranking, &p);
                (prio, map.exhausted)
            }
            None => (PRIORITY_BOTTOM, false),
        }
    }
}

/// Wakes the worker early or stops it.
#[derive(Default)]
pub struct Signal {
    state: Mutex<(bool, bool)>, // (stop, wake)
    cvar: Condvar,
}

impl Signal {
    pub fn wake(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cvar.notify_all();
    }
    pub fn stop(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
        self.cvar.notify_all();
    }
    /// Waits up to `period`; returns false once stopped.
    fn wait(&self, period: Duration) -> bool {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) = self.cvar.wait_timeout_while(guard, period, |(stop, wake)| !*stop && !*wake).unwrap_or_else(|p| p.into_inner());
        guard.1 = false;
        !guard.0
    }
}

/// What one locked recompute produced.
struct Recomputed {
    /// Pending jobs whose priority changed.
    changed: usize,
    ranking: Ranking,
    usage: allot::occupancy::Usage,
    capacity: u32,
    map: PriorityMap,
}

/// Why the worker requeued a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequeueWhy {
    Drain,
    ExitedInGrace,
}

pub struct Worker {
    pub period: Duration,
    pub order: Arc<Mutex<OrderState>>,
    pub signal: Arc<Signal>,
    follower: Follower,
    writer: LedgerFile,
    writer_problems: ProblemLog,
    book: Option<RunBook>,
    tree_version: Option<(i64, usize)>,
    /// Jobs whose contracts, and preemptions, are already in the ledger.
    contracts_recorded: HashSet<u32>,
    preemptions_seen: HashSet<(u32, i64)>,
    /// Finished jobs already requeued after exiting in their grace time.
    requeued_after_grace: HashSet<(u32, i64)>,
    pending_contracts: Vec<ContractRow>,
    pending_events: Vec<EventRow>,
    names: UserNames,
}

/// User names by uid: the worker names every job's user while holding
/// slurmctld's job lock, where a name-service lookup per job would be slow.
#[derive(Default)]
struct UserNames(HashMap<u32, String>);

impl UserNames {
    fn of(&mut self, uid: u32) -> String {
        self.0
            .entry(uid)
            .or_insert_with(|| allot_slurm::user_name(uid))
            .clone()
    }
}

impl Worker {
    pub fn new(ledger_path: PathBuf, period: Duration, order: Arc<Mutex<OrderState>>, signal: Arc<Signal>) -> Worker {
        let follower = Follower::new(&ledger_path);
        Worker {
            period,
            order,
            signal,
            follower,
            writer: LedgerFile::writable(&ledger_path),
            writer_problems: ProblemLog::default(),
            book: None,
            tree_version: None,
            contracts_recorded: HashSet::new(),
            preemptions_seen: HashSet::new(),
            requeued_after_grace: HashSet::new(),
            pending_contracts: Vec::new(),
            pending_events: Vec::new(),
            names: UserNames::default(),
        }
    }

    /// The thread's body: a cycle now, then one per period until stopped.
    pub fn run(mut self, ctld: &'static Slurmctld) {
        loop {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.cycle(ctld))).is_err() {
                log::error!("a recompute failed (see the panic above); priorities stay as they were until the next one");
            }
            if !self.signal.wait(self.period) {
                return;
            }
        }
    }

    /// The ledger connection to write with, reopened if the file was
    /// replaced or deleted (a deleted ledger is recreated, empty).
    fn writer(&mut self) -> Result<&mut Ledger, String> {
        self.writer.get().map(|(ledger, _)| ledger)
    }

    fn cycle(&mut self, ctld: &'static Slurmctld) {
        let now = allot_slurm::now();
        // 1. The budget, from the ledger (the follower keeps the last good one).
        let Some((version, tree)) = self.follower.refresh_budget() else {
            log::debug!("no budget yet: leaving priorities alone");
            return;
        };
        let rules = ContractRules::from(&tree.settings);
        let lookback = tree.settings.lookback;
        let tree_key = (version, Arc::as_ptr(&tree) as usize);
        if self.book.is_none() {
            // First cycle: pick up the runs of the window from the ledger
            // (a slurmctld restart loses no usage).
            let rows = match self.writer() {
                Ok(l) => l.runs_since(now - lookback).map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            let rows = match rows {
                Ok(rows) => rows,
                Err(e) => {
                    log::error!("cannot read past runs from {}: {e}; counting usage from now on", self.writer.path().display());
                    Vec::new()
                }
            };
            log::info!("budget version {version}: {} leaves; {} runs in the window from the ledger", tree.leaves.len(), rows.len());
            self.book = Some(RunBook::from_ledger(rows, &tree));
            self.tree_version = Some(tree_key);
        } else if self.tree_version != Some(tree_key) {
            log::info!("budget version {version} loaded: {} leaves", tree.leaves.len());
            if let Some(book) = self.book.as_mut() {
                book.remap(&tree);
            }
            self.tree_version = Some(tree_key);
        }

        // 2. Under slurmctld's locks.
        let mut changed = 0usize;
        let mut snapshot = None;
        let order = self.order.clone();
        ctld.locked(|locked| {
            let Recomputed { changed: c, ranking, usage, capacity, map } = self.recompute(locked, &tree, rules, now);
            changed = c;
            snapshot = Some(UsageSnapshot {
                computed_at: now,
                budget_version: version,
                capacity_gpus: capacity,
                leaves: tree
                    .leaves
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| LeafUsage { leaf: tree.node(n).path.clone(), charged: usage.charged[i], unallocated: usage.unallocated[i] })
                    .collect(),
            });
            // Swap in the new order while still holding slurmctld's job lock,
            // so priority_p_set never mixes two recomputes.
            let mut o = order.lock().unwrap_or_else(|p| p.into_inner());
            *o = OrderState { tree: Some(tree.clone()), rules: Some(rules), ranking: Some(ranking), map: Some(map) };
        });
        if changed > 0 {
            ctld.queue_scheduler();
        }

        // 3. The ledger, outside the locks.
        self.write_ledger(snapshot);
    }

    /// The locked part of a cycle.
    fn recompute(&mut self, locked: &mut Locked<'_>, tree: &BudgetTree, rules: ContractRules, now: i64) -> Recomputed {
        let nodes = locked.nodes();
        let draining: Vec<usize> = nodes.iter().filter(|n| n.draining).map(|n| n.index).collect();
        let slurm_gpus: u32 = nodes.iter().map(|n| n.gpus).sum();
        let capacity = tree.settings.gpus.unwrap_or(slurm_gpus).max(1);

        let mut observed = Vec::new();
        let mut pending: Vec<PendingJob> = Vec::new();
        let mut endings: HashMap<u32, Ending> = HashMap::new();
        let mut to_requeue: Vec<(u32, RequeueWhy, String)> = Vec::new();
        let mut in_list: HashSet<u32> = HashSet::new();
        let mut preempting: Vec<(u32, i64, String)> = Vec::new();

        locked.for_each_job(|job| {
            let j = job.view();
            let id = j.id();
            in_list.insert(id);
            if !self.contracts_recorded.contains(&id) && j.state() != JobState::Finished {
                let contract = contract_of(&j, rules);
                self.pending_contracts.push(ContractRow {
                    job_id: id,
                    user: self.names.of(j.user_id()),
                    account: j.account().map(str::to_owned),
                    leaf: leaf_of(&j, tree).map(|l| tree.leaf_node(l).path.clone()),
                    min_runtime: contract.min_runtime,
                    priority: contract.priority.to_string(),
                    resumable: j.requeue_allowed(),
                    submit_time: j.submit_time(),
                    comment: j.comment().unwrap_or("").to_owned(),
                });
                self.contracts_recorded.insert(id);
            }
            match j.state() {
                JobState::Running => {
                    let run = running_job(&j, tree, rules);
                    observed.push(Observed {
                        job_id: id,
                        run_start: j.start_time(),
                        gpus: j.gpus_allocated(),
                        leaf: run.leaf.map(|l| Arc::from(tree.leaf_node(l).path.as_str())),
                        allocated: run.is_allocated(),
                        account: j.account().map(str::to_owned),
                        user: Some(self.names.of(j.user_id())),
                    });
                    if j.preempt_time() != 0 {
                        preempting.push((id, j.preempt_time(), format!("after {} s of its run", j.preempt_time() - j.start_time())));
                    }
                    if !draining.is_empty() && draining.iter().any(|&n| j.holds_node(n)) && run.drain_due(now) && j.preempt_time() == 0 {
                        to_requeue.push((id, RequeueWhy::Drain, format!("its node is draining and its minimum runtime ended at {}", run.protected_until())));
                    }
                }
                JobState::Pending => {
                    if j.is_requeued() || j.restart_count() > 0 {
                        endings.insert(id, Ending::Requeued);
                    }
                    if let Some(p) = pending_job(&j, tree, rules) {
                        pending.push(p);
                    }
                }
                JobState::Finished => {
                    endings.insert(id, Ending::Finished(j.end_time()));
                    let key = (id, j.preempt_time());
                    if j.preempt_time() != 0 && j.requeue_allowed() && !j.is_completing() && !self.requeued_after_grace.contains(&key) {
                        to_requeue.push((id, RequeueWhy::ExitedInGrace, "it was preempted and exited during its grace time; it is resumable".to_owned()));
                        self.requeued_after_grace.insert(key);
                    }
                }
                JobState::Suspended => {}
            }
        });

        // Runs and usage.
        let book = self.book.as_mut().expect("set before the first recompute");
        book.observe(now, &observed, tree, |id| endings.get(&id).copied().unwrap_or(Ending::Unknown));
        book.prune(now - tree.settings.lookback);
        let intervals: Vec<_> = book.intervals().collect();
        let usage = usage_in_window(intervals.iter(), tree.leaves.len(), now, tree.settings.lookback);
        let ranking = Ranking::compute(tree, &usage.charged, capacity, now);

        // The order, as priorities.
        let (map, priorities) = PriorityMap::build(&ranking, &pending);
        let wanted: HashMap<u32, u32> = pending.iter().zip(priorities).map(|(p, prio)| (p.job_id, prio)).collect();
        let mut changed = 0;
        locked.for_each_job(|job| {
            let j = job.view();
            if !j.is_pending() || j.priority_set_by_admin() || j.priority() == 0 {
                return; // held jobs (priority 0) stay held
            }
            let prio = wanted.get(&j.id()).copied().unwrap_or(PRIORITY_BOTTOM);
            if j.priority() != prio {
                job.set_priority(prio);
                changed += 1;
            }
        });
        if changed > 0 {
            locked.touch_jobs();
        }

        // Requeues, and what to remember of them.
        for (id, why, detail) in to_requeue {
            match locked.requeue(id) {
                Ok(()) => {
                    let kind = match why {
                        RequeueWhy::Drain => "drained",
                        RequeueWhy::ExitedInGrace => "requeued_after_grace",
                    };
                    log::info!("requeued JobId={id}: {detail}");
                    self.pending_events.push(EventRow { at: now, job_id: id, kind: kind.to_owned(), detail });
                }
                Err(e) => log::error!("cannot requeue JobId={id} ({detail}): {e}"),
            }
        }
        for (id, at, detail) in preempting {
            if self.preemptions_seen.insert((id, at)) {
                self.pending_events.push(EventRow { at, job_id: id, kind: "preempted".to_owned(), detail });
            }
        }
        // Forget jobs slurmctld has forgotten.
        self.contracts_recorded.retain(|id| in_list.contains(id));
        self.preemptions_seen.retain(|(id, _)| in_list.contains(id));
        self.requeued_after_grace.retain(|(id, _)| in_list.contains(id));
        log::debug!(
            "recomputed: {} pending, {} running, {} priorities changed, capacity {capacity} GPUs",
            pending.len(),
            book.open_runs(),
            changed
        );
        Recomputed { changed, ranking, usage, capacity, map }
    }

    fn write_ledger(&mut self, snapshot: Option<UsageSnapshot>) {
        let runs = self.book.as_ref().map(|b| b.unwritten().to_vec()).unwrap_or_default();
        let period = Period { runs, contracts: std::mem::take(&mut self.pending_contracts), events: std::mem::take(&mut self.pending_events), snapshot };
        let result = self.writer().and_then(|l| l.record_period(&period).map_err(|e| e.to_string()));
        if result.is_ok() {
            if let Some(b) = self.book.as_mut() {
                b.written(period.runs.len());
            }
        } else {
            // Keep them for the next period, which reopens the connection.
            self.pending_contracts = period.contracts;
            self.pending_events = period.events;
            self.writer.close();
            // Keep memory bounded if the ledger stays broken for long.
            if self.pending_contracts.len() > 100_000 {
                self.pending_contracts.drain(..50_000);
            }
            if self.pending_events.len() > 100_000 {
                self.pending_events.drain(..50_000);
            }
        }
        self.writer_problems.report("writing the ledger", result);
    }
}
