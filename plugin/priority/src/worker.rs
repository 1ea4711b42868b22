//! The priority plugin's thread: once per RecomputePeriod it
//!
//! 1. reads the budget from the ledger (outside slurmctld's locks);
//! 2. under slurmctld's job lock, walks the job list and takes the run ends
//!    jobcomp/allot reported since the last walk: records every run exactly,
//!    recomputes windowed usage, the fair-share ranking and the order of
//!    pending jobs, and sets their priorities;
//! 3. requeues jobs that must go, each in its own critical section under
//!    the locks slurmctld's requeue takes: those on DRAIN nodes whose
//!    minimum runtime is over, and resumable jobs that a preemption ended by
//!    their own exit during its grace time (Slurm alone would leave them
//!    COMPLETED or FAILED; a user's scancel, a time-out or a node failure
//!    in the grace time are not requeued);
//! 4. writes runs, contracts, events, each leaf's demand (when it changed)
//!    and the usage snapshot to the ledger
//!    (outside the locks again), or keeps them for the next period if the
//!    ledger is unavailable: scheduling goes on from memory either way. A
//!    ledger that was replaced (deleted, recovered, restored) gets the whole
//!    window written again.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use allot::budget::{BudgetTree, FairShareUsage};
use allot::contract::ContractRules;
use allot::fairshare::{with_lookahead, Ranking};
use allot::occupancy::usage_in_window;
use allot::order::{PendingJob, PriorityMap, PRIORITY_BOTTOM};
use allot_ledger::{ContractRow, DemandRow, EventRow, JobEnd, LeafUsage, Ledger, Location, Period, UsageSnapshot};
use allot_slurm::ctld::{Locked, Slurmctld};
use allot_slurm::job::{EndState, Job, JobState};
use allot_slurm::last_good::LastGood;
use allot_slurm::policy::{contract_held, contract_of, contract_of_comment, leaf_of, pending_job, running_job};
use allot_slurm::snapshot::{Follower, LedgerFile, ProblemLog};
use allot_slurm::unwritten::Unwritten;

use crate::runs::{Ended, Ending, Observed, RunBook};

/// A run's end as slurmctld reported it to jobcomp/allot, copied out of the
/// job record under its lock (the worker maps it to the budget later).
#[derive(Debug, Clone)]
pub struct RunEnd {
    pub job_id: u32,
    pub run_start: i64,
    pub run_end: i64,
    /// GPUs charged (the GPUs, or the GPU-equivalent of CPUs and memory), and
    /// CPUs charged (for a budget that shares CPUs).
    pub gpus: u32,
    pub cpus: u32,
    pub account: Option<String>,
    pub comment: Option<String>,
    pub user_id: u32,
    pub state: EndState,
    /// When slurmctld decided to preempt this run (0: it did not).
    pub preempt_time: i64,
    /// Last suspend or resume (0: never), and the time run before it.
    pub suspend_time: i64,
    pub ran_before_suspend: i64,
}

impl RunEnd {
    pub fn of(job: &Job<'_>) -> RunEnd {
        // slurmctld reports the end before it frees the allocation, so a run
        // that held GPUs (or the CPUs or memory that block them) still shows
        // them; a job that never ran (cancelled while pending) holds none
        // and is not charged.
        // Both counts: the budget in force when the walk takes it decides.
        let (gpus, cpus) = (job.gpus_charged(), job.cpus_charged());
        RunEnd {
            job_id: job.id(),
            run_start: job.start_time(),
            run_end: job.end_time(),
            gpus,
            cpus,
            account: job.account().map(str::to_owned),
            comment: job.comment().map(str::to_owned),
            user_id: job.user_id(),
            state: job.end_state(),
            preempt_time: job.preempt_time(),
            suspend_time: job.suspend_time(),
            ran_before_suspend: job.ran_before_suspend(),
        }
    }
}

/// Run ends reported between two walks. Bounded: if the worker is stuck for
/// long, the oldest are dropped (and counted in the log) rather than let
/// slurmctld's memory grow without end.
#[derive(Default)]
pub struct RunEnds {
    queue: Mutex<(std::collections::VecDeque<RunEnd>, u64)>,
}

const RUN_ENDS_MAX: usize = 1_000_000;

impl RunEnds {
    pub fn push(&self, end: RunEnd) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.0.len() >= RUN_ENDS_MAX {
            q.0.pop_front();
            q.1 += 1;
        }
        q.0.push_back(end);
    }
    fn take(&self) -> (Vec<RunEnd>, u64) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut q.0).into(), std::mem::take(&mut q.1))
    }
}

/// What `priority_p_set` needs between two recomputes.
#[derive(Default)]
pub struct OrderState {
    pub tree: Option<Arc<BudgetTree>>,
    pub rules: Option<ContractRules>,
    pub ranking: Option<Ranking>,
    pub map: Option<PriorityMap>,
    /// Each job's submit time as `priority_p_set` first saw it: Slurm moves
    /// a requeued job's submit time to the requeue, and waits count from
    /// the first submission.
    pub first_submit: HashMap<u32, i64>,
}

impl OrderState {
    /// The priority of one job, placed after its group's current jobs.
    pub fn assign(&mut self, job: &Job<'_>) -> (u32, bool) {
        self.first_submit.entry(job.id()).or_insert_with(|| job.submit_time());
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
    /// Charged GPUs running per leaf (counted ahead under the budget's `lookahead`).
    running: Vec<i64>,
    /// Usage of inner nodes (leaves removed with their accounts).
    orphans: Vec<(allot::budget::NodeId, i64)>,
    capacity: u32,
    map: PriorityMap,
}

/// Why the worker requeues a job; the fields are what must still hold when
/// the requeue's own locks are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequeueWhy {
    /// Running since `start`, on a draining node, past its minimum runtime.
    Drain { start: i64 },
    /// Ended by its own exit after the preemption at `preempt_time`.
    ExitedInGrace { preempt_time: i64 },
}

impl RequeueWhy {
    /// Still due, re-checked under the requeue's locks.
    fn still_due(self, job: Job<'_>) -> bool {
        match self {
            RequeueWhy::Drain { start } => job.is_running() && job.start_time() == start && job.preempt_time() == 0,
            RequeueWhy::ExitedInGrace { preempt_time } => exited_in_grace(&job) && job.preempt_time() == preempt_time,
        }
    }
}

/// A resumable job that a preemption ended by its own exit (it caught the
/// grace signal and stopped, COMPLETED or FAILED): Slurm would leave it
/// ended. Not a user's scancel (CANCELLED), a time-out or a node failure,
/// and not one still releasing its nodes.
fn exited_in_grace(job: &Job<'_>) -> bool {
    job.state() == JobState::Finished
        && job.preempt_time() != 0
        && job.end_time() >= job.preempt_time()
        && job.requeue_allowed()
        && !job.is_completing()
        && matches!(job.end_state(), EndState::Completed | EndState::Failed)
}

pub struct Worker {
    pub period: Duration,
    pub order: Arc<Mutex<OrderState>>,
    pub signal: Arc<Signal>,
    run_ends: Arc<RunEnds>,
    follower: Follower,
    /// Where the last good copy is written after each recorded recompute.
    last_good: Option<PathBuf>,
    /// Where the run updates not yet in the ledger are kept across a
    /// restart (allot_slurm::unwritten), and how many the file holds.
    unwritten: Option<PathBuf>,
    kept_in_file: usize,
    /// Whether the updates an earlier slurmctld kept were taken back.
    taken_back: bool,
    unwritten_problems: ProblemLog,
    writer: LedgerFile,
    writer_problems: ProblemLog,
    copy_problems: ProblemLog,
    /// The other clusters' usage, as last read (`fair_share_usage = "lab"`):
    /// kept while the ledger cannot be read.
    others: Option<UsageSnapshot>,
    others_problems: ProblemLog,
    book: Option<RunBook>,
    /// The identity of the ledger file the book's runs were last all written
    /// to (or read from): another file gets the whole window again.
    book_ledger: Option<String>,
    /// Whether the book could read the runs of the window from the ledger
    /// (if not, it reads them once the ledger is back).
    book_loaded: bool,
    tree_version: Option<(i64, usize)>,
    /// Jobs whose contracts are in the ledger, with a digest of the comment
    /// and account recorded (a pending job's contract may still change).
    contracts_recorded: HashMap<u32, u64>,
    preemptions_seen: HashSet<(u32, i64)>,
    /// Finished jobs already requeued after exiting in their grace time.
    requeued_after_grace: HashSet<(u32, i64)>,
    pending_contracts: Vec<ContractRow>,
    pending_events: Vec<EventRow>,
    /// Each leaf's demand as last handed to the ledger, by path; and the
    /// changes not yet written.
    demand_last: HashMap<String, DemandRow>,
    pending_demand: Vec<DemandRow>,
    /// Finished jobs whose end is recorded (job, end time), and ends not yet written.
    ends_recorded: HashSet<(u32, i64)>,
    pending_job_ends: Vec<JobEnd>,
    to_requeue: Vec<(u32, RequeueWhy, String)>,
    names: UserNames,
    /// The first walk since slurmctld started.
    first_walk: bool,
    /// slurmctld is shutting down: the last cycle.
    stopping: bool,
}

/// A digest of what a job's contract row is made of.
fn contract_digest(job: &Job<'_>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (job.comment(), job.account(), job.requeue_allowed()).hash(&mut h);
    h.finish()
}

/// User names by uid: the worker names every job's user while holding
/// slurmctld's job lock, where a name-service lookup per job would be slow.
#[derive(Default)]
struct UserNames(HashMap<u32, String>);

impl UserNames {
    fn of(&mut self, uid: u32) -> String {
        self.0.entry(uid).or_insert_with(|| allot_slurm::user_name(uid)).clone()
    }
}

impl Worker {
    pub fn new(ledger: Location, period: Duration, order: Arc<Mutex<OrderState>>, signal: Arc<Signal>, run_ends: Arc<RunEnds>) -> Worker {
        let last_good = allot_slurm::last_good_path();
        let cluster = allot_slurm::cluster_name();
        let follower = Follower::new(ledger.clone(), cluster.as_deref(), last_good.clone());
        Worker {
            last_good,
            unwritten: allot_slurm::unwritten_path(),
            kept_in_file: 0,
            taken_back: false,
            unwritten_problems: ProblemLog::default(),
            period,
            order,
            signal,
            run_ends,
            follower,
            writer: LedgerFile::writable(ledger, cluster.as_deref()),
            writer_problems: ProblemLog::default(),
            copy_problems: ProblemLog::default(),
            others: None,
            others_problems: ProblemLog::default(),
            book: None,
            book_ledger: None,
            book_loaded: false,
            tree_version: None,
            contracts_recorded: HashMap::new(),
            preemptions_seen: HashSet::new(),
            requeued_after_grace: HashSet::new(),
            pending_contracts: Vec::new(),
            pending_events: Vec::new(),
            demand_last: HashMap::new(),
            pending_demand: Vec::new(),
            ends_recorded: HashSet::new(),
            pending_job_ends: Vec::new(),
            to_requeue: Vec::new(),
            first_walk: true,
            stopping: false,
            names: UserNames::default(),
        }
    }

    /// The thread's body: a cycle now, then one per period until stopped.
    pub fn run(mut self, ctld: &'static Slurmctld) {
        loop {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.cycle(ctld))).is_err() {
                log::error!("a recompute failed (see the panic above): none of its priorities or requeues were applied; the next one starts afresh");
            }
            if !self.signal.wait(self.period) {
                break;
            }
        }
        // slurmctld is stopping (fini, called with no slurmctld lock held):
        // one last cycle writes the runs that ended since the last one.
        self.stopping = true;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.cycle(ctld))).is_err() {
            log::error!("the last recompute before shutdown failed (see the panic above)");
        }
    }

    /// The ledger connection to write with, reopened if the file was
    /// replaced or deleted (a deleted ledger is recreated, empty).
    fn writer(&mut self) -> Result<&mut Ledger, String> {
        self.writer.get().map(|(ledger, _)| ledger)
    }

    /// The runs of the window from the ledger, and the ledger's identity.
    fn ledger_runs(&mut self, since: i64) -> Result<(Vec<allot_ledger::RunRow>, String), String> {
        let ledger = self.writer()?;
        let rows = ledger.runs_since(since).map_err(|e| e.to_string())?;
        let identity = ledger.identity().map_err(|e| e.to_string())?;
        Ok((rows, identity))
    }

    /// The other clusters' usage in the window, when the budget counts the
    /// lab's (else `None`); the last read while the ledger cannot be read.
    fn other_clusters_usage(&mut self, tree: &BudgetTree, now: i64) -> Option<UsageSnapshot> {
        if tree.settings.fair_share_usage != FairShareUsage::Lab {
            return None;
        }
        let result = self.writer().and_then(|l| l.usage_of_other_clusters(now - tree.settings.lookback).map_err(|e| e.to_string()));
        self.writer.close_if_server_failed(&result);
        let result = result.map(|others| self.others = others);
        self.others_problems.report("reading the other clusters' usage", result);
        self.others.clone()
    }

    fn cycle(&mut self, ctld: &'static Slurmctld) {
        let now = allot_slurm::now();
        // 1. The budget, from the ledger (the follower keeps the last good one).
        // Stopping, with a server ledger that just failed: no new connection
        // (a server that does not answer would hold slurmctld's shutdown for
        // the I/O timeout); the budget as last read.
        let budget = if self.stopping && self.follower.is_server_that_failed() { self.follower.current_budget() } else { self.follower.refresh_budget() };
        let Some((version, tree)) = budget else {
            log::debug!("no budget yet: leaving priorities alone");
            return;
        };
        let rules = ContractRules::from(&tree.settings);
        let lookback = tree.settings.lookback;
        let tree_key = (version, Arc::as_ptr(&tree) as usize);
        if self.book.is_none() || !self.book_loaded {
            // First cycle (or the first since the ledger could be read):
            // pick up the runs of the window from the ledger, so a slurmctld
            // restart loses no usage.
            match self.ledger_runs(now - lookback) {
                Ok((rows, identity)) => {
                    log::info!("budget version {version}: {} leaves; {} runs in the window from the ledger", tree.leaves.len(), rows.len());
                    match self.book.as_mut() {
                        Some(book) => {
                            book.merge_ledger(rows, &tree);
                            // What the book gathered meanwhile is not in this file.
                            book.rewrite_all();
                        }
                        None => self.book = Some(RunBook::from_ledger(rows, &tree)),
                    }
                    self.book_ledger = Some(identity);
                    self.book_loaded = true;
                }
                Err(e) if self.book.is_none() => {
                    log::error!(
                        "cannot read past runs from {}: {e}; counting usage from now on, and adding the ledger's runs once it can be read",
                        self.writer.location()
                    );
                    self.writer.close();
                    self.book = Some(RunBook::default());
                }
                Err(_) => self.writer.close(),
            }
            self.tree_version = Some(tree_key);
        }
        if !self.taken_back {
            self.taken_back = true;
            self.take_back_unwritten(now, &tree);
        }
        if self.tree_version != Some(tree_key) {
            log::info!("budget version {version} loaded: {} leaves", tree.leaves.len());
            if let Some(book) = self.book.as_mut() {
                book.remap(&tree);
            }
            self.tree_version = Some(tree_key);
        }

        let others = self.other_clusters_usage(&tree, now);

        // 2. Under slurmctld's locks.
        let mut changed = 0usize;
        let mut snapshot = None;
        let order = self.order.clone();
        ctld.locked(|locked| {
            let Recomputed { changed: c, ranking, usage, running, orphans, capacity, map } = self.recompute(locked, &tree, rules, others.as_ref(), now);
            changed = c;
            snapshot = Some(UsageSnapshot {
                computed_at: now,
                budget_version: version,
                capacity_gpus: capacity,
                leaves: tree
                    .leaves
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| LeafUsage {
                        leaf: tree.node(n).path.clone(),
                        charged: usage.charged[i],
                        unallocated: usage.unallocated[i],
                        running: running[i],
                    })
                    // Inner nodes' rows: the usage of leaves removed with their accounts.
                    .chain(orphans.iter().map(|&(n, used)| LeafUsage { leaf: tree.node(n).path.clone(), charged: used, unallocated: 0, running: 0 }))
                    .collect(),
            });
            // Swap in the new order while still holding slurmctld's job lock,
            // so priority_p_set never mixes two recomputes.
            let mut o = order.lock().unwrap_or_else(|p| p.into_inner());
            let first_submit = std::mem::take(&mut o.first_submit);
            *o = OrderState { tree: Some(tree.clone()), rules: Some(rules), ranking: Some(ranking), map: Some(map), first_submit };
        });
        // 3. Requeues, each in its own critical section (not while slurmctld
        // shuts down: the next one finds them due again).
        let requeues = std::mem::take(&mut self.to_requeue);
        let requeues = if self.stopping { Vec::new() } else { requeues };
        for (id, why, detail) in requeues {
            // A drained node's job gets the grace signal first, as a
            // preempted one does (a session checkpoints then); slurmctld
            // requeues it when the grace time is over.
            if let RequeueWhy::Drain { .. } = why {
                match ctld.begin_grace(id, |job| why.still_due(job)) {
                    Ok(Some((grace, at))) => {
                        log::info!("JobId={id}: {detail}: grace signal sent, requeued in {grace} s");
                        // Its run ends as a preemption's: one event, "drained".
                        self.preemptions_seen.insert((id, at));
                        self.pending_events.push(EventRow { at, job_id: id, kind: "drained".to_owned(), detail });
                        continue;
                    }
                    Ok(None) => {
                        log::debug!("JobId={id} no longer needs requeueing ({detail})");
                        continue;
                    }
                    Err(e) => log::debug!("JobId={id}: no grace time ({e}): requeued at once"),
                }
            }
            match ctld.requeue(id, |job| why.still_due(job)) {
                Ok(true) => {
                    let kind = match why {
                        RequeueWhy::Drain { .. } => "drained",
                        RequeueWhy::ExitedInGrace { .. } => "requeued_after_grace",
                    };
                    log::info!("requeued JobId={id}: {detail}");
                    self.pending_events.push(EventRow { at: now, job_id: id, kind: kind.to_owned(), detail });
                }
                Ok(false) => log::debug!("JobId={id} no longer needs requeueing ({detail})"),
                Err(e) => log::error!("cannot requeue JobId={id} ({detail}): {e}"),
            }
        }
        if changed > 0 {
            ctld.queue_scheduler();
        }

        // 4. The ledger, outside the locks.
        self.write_ledger(snapshot);
    }

    /// The locked part of a cycle.
    /// `others`: the other clusters' usage, counted in the ranking (not in
    /// this cluster's snapshot) when the budget counts the lab's.
    fn recompute(&mut self, locked: &mut Locked<'_>, tree: &BudgetTree, rules: ContractRules, others: Option<&UsageSnapshot>, now: i64) -> Recomputed {
        let nodes = locked.nodes();
        let draining: Vec<usize> = nodes.iter().filter(|n| n.draining).map(|n| n.index).collect();
        let unit = tree.settings.charge;
        let slurm_gpus: u32 = nodes.iter().map(|n| n.units(unit)).sum();
        let capacity = tree.settings.gpus.unwrap_or(slurm_gpus).max(1);

        let mut observed = Vec::new();
        let mut pending: Vec<PendingJob> = Vec::new();
        let mut endings: HashMap<u32, Ending> = HashMap::new();
        let mut to_requeue: Vec<(u32, RequeueWhy, String)> = Vec::new();
        let mut in_list: HashSet<u32> = HashSet::new();
        let mut restart_ends: Vec<RunEnd> = Vec::new();
        let mut preempting: Vec<(u32, i64, String)> = Vec::new();
        // Per leaf: GPUs pending allocated, pending unallocated, running allocated, running unallocated.
        let mut demand = vec![[0u32; 4]; tree.leaves.len()];

        // A copy, and the original pruned in place after the walk (so a
        // panic in the walk loses none of it): priority_p_set adds to it
        // only under the job lock this walk holds.
        let first_submit = self.order.lock().unwrap_or_else(|p| p.into_inner()).first_submit.clone();
        locked.for_each_job(|job| {
            let j = job.view();
            let id = j.id();
            in_list.insert(id);
            if in_list.len() == 3 {
                // A test's fault halfway through the walk (allot_slurm::fault).
                allot_slurm::fault::inject("priority_walk");
            }
            {
                // Recorded when first seen (a job that came and went between
                // two walks is seen finished), and again if a pending job's
                // contract or account changed (started jobs' cannot).
                let digest = contract_digest(&j);
                let known = self.contracts_recorded.get(&id);
                if known != Some(&digest) && (j.state() != JobState::Finished || known.is_none()) {
                    let contract = contract_of(&j, rules);
                    self.pending_contracts.push(ContractRow {
                        job_id: id,
                        user: self.names.of(j.user_id()),
                        account: j.account().map(str::to_owned),
                        leaf: leaf_of(&j, tree).map(|l| tree.leaf_node(l).path.clone()),
                        min_runtime: contract.min_runtime,
                        priority: contract.priority.to_string(),
                        resumable: j.requeue_allowed(),
                        submit_time: first_submit.get(&id).copied().unwrap_or_else(|| j.submit_time()).min(j.submit_time()),
                        comment: j.comment().unwrap_or("").to_owned(),
                        gpus: Some(j.units_requested(unit)),
                    });
                    self.contracts_recorded.insert(id, digest);
                }
            }
            match j.state() {
                JobState::Running => {
                    let run = running_job(&j, tree, rules);
                    if let Some(l) = run.leaf {
                        let d = &mut demand[l as usize][if run.is_allocated() { 2 } else { 3 }];
                        *d = d.saturating_add(j.units_charged(unit));
                    }
                    observed.push(Observed {
                        job_id: id,
                        run_start: j.running_since(),
                        gpus: j.units_charged(unit),
                        leaf: run.leaf.map(|l| Arc::from(tree.leaf_node(l).path.as_str())),
                        allocated: run.is_allocated(),
                        account: j.account().map(str::to_owned),
                        user: Some(self.names.of(j.user_id())),
                        ran_before: j.ran_before_suspend(),
                    });
                    if j.preempt_time() != 0 {
                        preempting.push((id, j.preempt_time(), format!("after {} s of its run", j.preempt_time() - j.start_time())));
                    }
                    if !draining.is_empty() && draining.iter().any(|&n| j.holds_node(n)) && run.drain_due(now) && j.preempt_time() == 0 {
                        to_requeue.push((
                            id,
                            RequeueWhy::Drain { start: j.start_time() },
                            format!("its node is draining and its minimum runtime ended at {}", run.protected_until()),
                        ));
                    }
                }
                JobState::Pending => {
                    if j.is_requeued() || j.restart_count() > 0 {
                        endings.insert(id, Ending::Requeued);
                    }
                    if let Some(p) = pending_job(&j, tree, rules) {
                        // A held job (priority 0), or one that may not start
                        // yet (`--begin` later), wants nothing until then.
                        if j.priority() != 0 && j.begin_time() <= now {
                            let d = &mut demand[p.leaf as usize][if p.allocated { 0 } else { 1 }];
                            *d = d.saturating_add(j.units_requested(unit));
                        }
                        pending.push(p);
                    }
                }
                JobState::Finished => {
                    endings.insert(id, Ending::Finished(j.end_time()));
                    if self.ends_recorded.insert((id, j.end_time())) {
                        self.pending_job_ends.push(JobEnd { job_id: id, at: j.end_time() });
                    }
                    if self.first_walk {
                        // Ended before this slurmctld started, maybe after the
                        // last write (a crash): charged once (the book skips
                        // runs it has).
                        restart_ends.push(RunEnd::of(&j));
                    }
                    let key = (id, j.preempt_time());
                    if exited_in_grace(&j) && !self.requeued_after_grace.contains(&key) {
                        let detail = format!("it was preempted and exited during its grace time ({}); it is resumable", j.end_state().as_str());
                        to_requeue.push((id, RequeueWhy::ExitedInGrace { preempt_time: j.preempt_time() }, detail));
                        self.requeued_after_grace.insert(key);
                    }
                }
                JobState::Suspended => {
                    endings.insert(id, Ending::Suspended(j.suspend_time()));
                }
            }
        });

        // Runs and usage. Every run end reported so far is in the queue: it
        // is pushed under the job write lock, which this walk holds.
        let (mut ends, dropped) = self.run_ends.take();
        if self.first_walk {
            restart_ends.append(&mut ends);
            ends = restart_ends;
            self.first_walk = false;
        }
        if dropped > 0 {
            log::error!("{dropped} run ends were dropped while the recompute thread was stalled; their runs end at the next walk instead");
        }
        let book = self.book.as_mut().expect("set before the first recompute");
        for e in ends {
            // A preempted run is an event whether or not a walk saw it while
            // preempted (a job that exits at the signal is gone in a blink),
            // and whoever requeues it (24.11's slurmctld requeues a job that
            // exits during its grace time itself).
            if e.preempt_time != 0 {
                let detail = format!("after {} s of its run (the run ended {})", e.preempt_time - e.run_start, e.state.as_str());
                preempting.push((e.job_id, e.preempt_time, detail));
            }
            let leaf_id = e.account.as_deref().and_then(|a| tree.charged_leaf_of_account(a));
            let contract = contract_held(contract_of_comment(e.comment.as_deref(), rules), leaf_id, tree);
            let leaf = leaf_id.map(|l| Arc::from(tree.leaf_node(l).path.as_str()));
            let user = self.names.of(e.user_id);
            book.run_ended(
                Ended {
                    job_id: e.job_id,
                    run_start: e.run_start,
                    run_end: e.run_end,
                    gpus: if unit == allot::budget::Charged::Cpus { e.cpus } else { e.gpus },
                    leaf,
                    allocated: contract.is_allocated(),
                    account: e.account,
                    user: Some(user),
                    reason: e.state.as_str(),
                    resumed_at: (e.suspend_time > e.run_start).then_some(e.suspend_time),
                    ran_before_resume: e.ran_before_suspend,
                },
                tree,
            );
        }
        book.observe(now, &observed, tree, |id| endings.get(&id).copied().unwrap_or(Ending::Unknown));
        book.prune(now - tree.settings.lookback);
        let intervals: Vec<_> = book.intervals().collect();
        let usage = match self.follower.copy_usage() {
            // The budget comes from the last good copy (no budget in the
            // ledger since slurmctld started): the usage it holds, plus what
            // ran after it was computed. (It does not slide out of the
            // window: a stand-in until an admin repairs the ledger.)
            Some(carried) if carried.computed_at < now => {
                let since = (now - carried.computed_at).min(tree.settings.lookback);
                let mut usage = usage_in_window(intervals.iter(), tree.leaves.len(), now, since);
                for (slot, c) in usage.charged.iter_mut().zip(carried.charged_for(tree)) {
                    *slot += c;
                }
                usage
            }
            _ => usage_in_window(intervals.iter(), tree.leaves.len(), now, tree.settings.lookback),
        };
        // Leaves removed with their accounts within the window: their usage
        // counts in the nearest node still in the tree.
        let orphan_intervals: Vec<_> = book.orphan_intervals().collect();
        let orphans: Vec<(allot::budget::NodeId, i64)> = usage_in_window(orphan_intervals.iter(), tree.nodes.len(), now, tree.settings.lookback)
            .charged
            .into_iter()
            .enumerate()
            .filter(|&(_, used)| used > 0)
            .map(|(node, used)| (node as allot::budget::NodeId, used))
            .collect();
        // Charged GPUs running now (the walk's running allocated demand).
        let running: Vec<i64> = demand.iter().map(|d| i64::from(d[2])).collect();
        let ranking = match others {
            // As the other plugins and `allot why` rank from the snapshots
            // (UsageSnapshot::ranking): this cluster's usage plus the others'
            // (UsageSnapshot::sum), running GPUs counted ahead.
            Some(o) => {
                let mut standing: Vec<i64> = usage.charged.iter().zip(o.charged_for(tree)).map(|(own, theirs)| own + theirs).collect();
                let lab_running: Vec<i64> = running.iter().zip(o.running_for(tree)).map(|(own, theirs)| own + theirs).collect();
                with_lookahead(&mut standing, &lab_running, tree.settings.lookahead);
                let mut lab_orphans = orphans.clone();
                lab_orphans.extend(o.orphans_for(tree));
                Ranking::compute_with_orphans(tree, &standing, &lab_orphans, tree.settings.gpus.unwrap_or(capacity + o.capacity_gpus), now)
            }
            None => {
                let mut standing = usage.charged.clone();
                with_lookahead(&mut standing, &running, tree.settings.lookahead);
                Ranking::compute_with_orphans(tree, &standing, &orphans, capacity, now)
            }
        };

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

        // Requeues happen after this critical section, in their own.
        self.to_requeue = to_requeue;
        for (id, at, detail) in preempting {
            if self.preemptions_seen.insert((id, at)) {
                self.pending_events.push(EventRow { at, job_id: id, kind: "preempted".to_owned(), detail });
            }
        }
        // Forget jobs slurmctld has forgotten.
        self.order.lock().unwrap_or_else(|p| p.into_inner()).first_submit.retain(|id, _| in_list.contains(id));
        self.contracts_recorded.retain(|id, _| in_list.contains(id));
        self.ends_recorded.retain(|(id, _)| in_list.contains(id));
        self.preemptions_seen.retain(|(id, _)| in_list.contains(id));
        self.requeued_after_grace.retain(|(id, _)| in_list.contains(id));
        log::debug!("recomputed: {} pending, {} running, {} priorities changed, capacity {capacity} GPUs", pending.len(), book.open_runs(), changed);
        self.note_demand(tree, &demand, now);
        Recomputed { changed, ranking, usage, running, orphans, capacity, map }
    }

    /// Queues a demand row for every leaf whose demand changed, and a zero
    /// row for a leaf gone from the budget that still wanted GPUs.
    fn note_demand(&mut self, tree: &BudgetTree, demand: &[[u32; 4]], now: i64) {
        let mut in_tree = HashSet::with_capacity(tree.leaves.len());
        for (l, &node) in tree.leaves.iter().enumerate() {
            let path = &tree.node(node).path;
            in_tree.insert(path.as_str());
            let [pa, pu, ra, ru] = demand[l];
            let row = DemandRow { leaf: path.clone(), at: now, pending_allocated: pa, pending_unallocated: pu, running_allocated: ra, running_unallocated: ru };
            self.note_demand_row(row);
        }
        let gone: Vec<String> = self.demand_last.keys().filter(|p| !in_tree.contains(p.as_str())).cloned().collect();
        for leaf in gone {
            self.note_demand_row(DemandRow { leaf, at: now, pending_allocated: 0, pending_unallocated: 0, running_allocated: 0, running_unallocated: 0 });
        }
        self.demand_last.retain(|p, d| in_tree.contains(p.as_str()) || d.total() > 0);
    }

    fn note_demand_row(&mut self, row: DemandRow) {
        let same = |a: &DemandRow, b: &DemandRow| {
            (a.pending_allocated, a.pending_unallocated, a.running_allocated, a.running_unallocated)
                == (b.pending_allocated, b.pending_unallocated, b.running_allocated, b.running_unallocated)
        };
        if self.demand_last.get(&row.leaf).is_some_and(|last| same(last, &row)) {
            return;
        }
        self.pending_demand.push(row.clone());
        self.demand_last.insert(row.leaf.clone(), row);
    }

    fn write_ledger(&mut self, snapshot: Option<UsageSnapshot>) {
        if self.stopping && self.writer.is_server_that_failed() {
            // The same at the last write: the runs go to StateSaveLocation,
            // taken back at the next start, rather than hold the shutdown.
            self.keep_unwritten(true);
            let held = self.book.as_ref().map_or(0, |b| b.unwritten().len());
            log::warn!("slurmctld is stopping and the ledger's server did not answer at the last write: {held} run updates are kept for the next start");
            return;
        }
        let result = self.try_write_ledger(snapshot);
        if result.is_err() {
            // Keep everything for the next period, which reopens the file.
            self.writer.close();
            // Keep memory bounded if the ledger stays broken for long (runs
            // are never dropped: they are the charges).
            if self.pending_contracts.len() > 100_000 {
                self.pending_contracts.drain(..50_000);
            }
            if self.pending_events.len() > 100_000 {
                self.pending_events.drain(..50_000);
            }
            // Demand rows are a step function: dropping the oldest keeps
            // the later steps right (and each leaf's latest is re-sent on a
            // replaced ledger).
            if self.pending_demand.len() > 100_000 {
                self.pending_demand.drain(..50_000);
            }
            if self.pending_job_ends.len() > 100_000 {
                self.pending_job_ends.drain(..50_000);
            }
        }
        let held = self.book.as_ref().map_or(0, |b| b.unwritten().len());
        let kept = self.unwritten.as_ref().map_or(String::new(), |p| format!(" and in {}", p.display()));
        let failed = result.is_err();
        self.writer_problems
            .report("writing the ledger", result.map_err(|e| format!("{e}; {held} run updates are kept in memory{kept} until they are written")));
        self.keep_unwritten(failed);
    }

    /// After a failed write, keeps the run updates not yet in the ledger in
    /// StateSaveLocation (when they changed), so that a restart before the
    /// ledger takes them loses none; after a good one, removes the file.
    fn keep_unwritten(&mut self, failed: bool) {
        let Some(path) = self.unwritten.clone() else { return };
        let updates = self.book.as_ref().map_or(&[][..], |b| b.unwritten());
        let result = if failed && !updates.is_empty() {
            if updates.len() == self.kept_in_file {
                return;
            }
            let count = updates.len();
            let result = Unwritten::new(allot_slurm::now(), self.writer.location(), updates).write(&path);
            if result.is_ok() {
                self.kept_in_file = count;
            }
            result
        } else if updates.is_empty() && (self.kept_in_file > 0 || path.exists()) {
            let result = Unwritten::remove(&path);
            if result.is_ok() {
                self.kept_in_file = 0;
            }
            result
        } else {
            return;
        };
        self.unwritten_problems.report("keeping the run updates not yet in the ledger", result);
    }

    /// Takes back the run updates an earlier slurmctld kept because the
    /// ledger could not take them (before this one restarted, or on the
    /// other controller): they are written with the next period.
    fn take_back_unwritten(&mut self, now: i64, tree: &BudgetTree) {
        let (Some(path), Some(book)) = (self.unwritten.as_ref(), self.book.as_mut()) else { return };
        match Unwritten::read(path) {
            Ok(None) => {}
            Ok(Some(kept)) => {
                let count = kept.updates.len();
                log::warn!(
                    "took back {count} run updates not yet in the ledger from {} (kept {} s ago, for {}); they are written with the next period",
                    path.display(),
                    now - kept.written_at,
                    kept.ledger
                );
                book.take_back(kept.run_updates(), tree);
                self.kept_in_file = count;
            }
            Err(e) => {
                // Set aside, not removed: the runs in it are charges, for an admin to look at.
                let aside = path.with_extension(format!("json.unreadable-{now}"));
                let moved = std::fs::rename(path, &aside)
                    .map_or_else(|m| format!("it could not be moved aside: {m}"), |_| format!("moved aside to {}", aside.display()));
                log::error!("{e}; {moved}");
            }
        }
    }

    /// The copy a slurmctld that starts with an unreadable ledger decides
    /// from (allot_slurm::last_good), after what it holds is in the ledger.
    fn write_last_good(&mut self, snapshot: Option<&UsageSnapshot>) {
        let (Some(path), Some(snapshot), Some((version, toml))) = (self.last_good.as_ref(), snapshot, self.follower.budget_source()) else { return };
        let copy = LastGood::new(allot_slurm::now(), self.writer.location(), version, &toml, Some(snapshot));
        let result = copy.write(path);
        self.copy_problems.report("writing the last good copy", result);
    }

    fn try_write_ledger(&mut self, snapshot: Option<UsageSnapshot>) -> Result<(), String> {
        let identity = self.writer()?.identity().map_err(|e| e.to_string())?;
        if self.book_loaded && self.book_ledger.as_deref() != Some(identity.as_str()) {
            // Another file than the one the book's runs went to (deleted and
            // re-created, recovered, restored from a backup): write the
            // whole window again, and every listed job's contract.
            log::warn!("the ledger {} was replaced: writing the runs of the whole window again", self.writer.location());
            if let Some(b) = self.book.as_mut() {
                b.rewrite_all();
            }
            self.contracts_recorded.clear();
            // Each leaf's demand as it stands, dated when it was last seen to change.
            let mut latest: Vec<DemandRow> = self.demand_last.values().cloned().collect();
            latest.sort_by(|a, b| a.leaf.cmp(&b.leaf));
            self.pending_demand.extend(latest);
            self.book_ledger = Some(identity);
        }
        let runs = self.book.as_ref().map(|b| b.unwritten().to_vec()).unwrap_or_default();
        let period = Period {
            runs,
            contracts: std::mem::take(&mut self.pending_contracts),
            events: std::mem::take(&mut self.pending_events),
            demand: std::mem::take(&mut self.pending_demand),
            job_ends: std::mem::take(&mut self.pending_job_ends),
            snapshot,
        };
        let result = self.writer().and_then(|l| l.record_period(&period).map_err(|e| e.to_string()));
        match result {
            Ok(()) => {
                if let Some(b) = self.book.as_mut() {
                    b.written(period.runs.len());
                }
                self.write_last_good(period.snapshot.as_ref());
                Ok(())
            }
            Err(e) => {
                self.pending_contracts = period.contracts;
                self.pending_events = period.events;
                self.pending_demand = period.demand;
                self.pending_job_ends = period.job_ends;
                Err(e)
            }
        }
    }
}
