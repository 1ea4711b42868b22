//! The discrete-event engine.
//!
//! Time jumps from event to event (a submission, the end of a run, the end
//! of a run's minimum-runtime protection, the end of a grace period, a
//! requeued job becoming eligible, a backfill cycle). Every decision of the
//! `allot` policy is made by the policy core (`allot::fairshare`,
//! `allot::order`, `allot::preempt`); the engine only keeps the books and
//! finds places for jobs.
//!
//! **Scheduling passes**, as Slurm's: after all the events of one instant,
//! the *main scheduler* walks the pending jobs in the policy's order (at
//! most `default_queue_depth`) and stops at the first that can neither start
//! nor preempt; every `bf_interval`, if anything changed, *backfill* walks
//! deeper (`bf_max_job_test`):
//! - a job that fits on free GPUs starts, unless it would delay the
//!   reservation (below);
//! - a job that does not fit may preempt (allot: runs for which
//!   `may_preempt_with` says yes under the budget's `PreemptRules`, lowest
//!   `victim_order` first; baseline: a job within its team's limit takes
//!   preemptible runs). Victims get their grace time, then are requeued
//!   (resumable, losing the work since their last checkpoint) or cancelled;
//!   the preemptor holds the GPUs it needs meanwhile and starts when the
//!   grace time ends. Preemption ignores the reservation, as Slurm's main
//!   scheduler knows nothing of backfill's plans;
//! - in backfill, the first job that can do neither gets a reservation: the
//!   earliest time and place it fits, from the running jobs' expected ends.
//!   Later jobs may still start now if they end before that time or leave
//!   the reserved GPUs alone. One reservation per pass is "EASY" backfill, a
//!   simplification of Slurm's, which reserves for every job it tests.
//!
//! Expected ends use the jobs' true runtimes (a workload has no time
//! limits): backfill as good as the users' estimates could make it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use allot::budget::BudgetTree;
use allot::contract::{Contract, PriorityLevel};
use allot::fairshare::Ranking;
use allot::occupancy::OccupancyWindow;
use allot::order::{order_jobs, PendingJob};
use allot::budget::LeafId;
use allot::preempt::{grace_for, may_preempt_with, outranks_by, victim_order, within_team, PreemptRules, RunningJob, WaitingJob};
use serde::Serialize;

use crate::cluster::{Buckets, ClusterSpec, Nodes};
use crate::prepare::Prepared;
use crate::workload::Workload;

/// Which scheduler decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Budgets and the contract, through the policy core.
    Allot,
    /// Static priority levels, a per-team limit on non-preemptible GPUs,
    /// preemptible jobs above the limit on idle GPUs.
    Baseline,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Allot => "allot",
            PolicyKind::Baseline => "baseline",
        }
    }
    pub fn parse(s: &str) -> Option<PolicyKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allot" => Some(PolicyKind::Allot),
            "baseline" => Some(PolicyKind::Baseline),
            _ => None,
        }
    }
}

/// Knobs of one simulation. The policy's own knobs (lookback, cap, grace,
/// margin, default minimum runtime) live in `tree.settings`.
#[derive(Debug, Clone)]
pub struct Config {
    pub cluster: ClusterSpec,
    pub tree: BudgetTree,
    pub policy: PolicyKind,
    /// A resumable job checkpoints every this many seconds of its run and
    /// loses, when killed, the work since the last one. 0: it checkpoints
    /// during its grace time and loses nothing.
    pub checkpoint_interval: i64,
    /// Seconds between a requeue and the job being eligible again.
    pub requeue_delay: i64,
    /// Pending jobs a backfill pass considers, in order (Slurm's `bf_max_job_test`).
    pub bf_max_job_test: usize,
    /// Node-level preemption searches per pass (each looks at every node
    /// with possible victims; Slurm bounds its preemption attempts too).
    pub preempt_max_job_test: usize,
    /// Pending jobs the main scheduler considers at each event (Slurm's
    /// `default_queue_depth`); it stops at the first that cannot start.
    pub default_queue_depth: usize,
    /// Seconds between backfill passes while jobs wait (Slurm's
    /// `bf_interval`); at least 1 (smaller values count as 1).
    pub bf_interval: i64,
    /// Stop here (absolute time); `None`: run until every job is done.
    pub horizon: Option<i64>,
    /// Baseline: a team's limit on non-preemptible GPUs is its effective
    /// share times the cluster's GPUs times this.
    pub baseline_limit_factor: f64,
    /// Baseline: use the workload's `priority` column as the static
    /// priority levels (cluster-wide). Off: one level, first come first
    /// served, since in the system allot replaces levels were set per queue
    /// by admins, not declared per job (allot's priority only orders jobs
    /// within their own leaf, so users may set it).
    pub baseline_priority_levels: bool,
    /// Cross-check every shortcut against the plain policy functions (slow; tests).
    pub check_policy: bool,
    /// The last this many nodes are kept for small and unallocated jobs
    /// (`PreemptRules::may_use_small_job_nodes`; Slurm: allot.conf's
    /// `SmallJobPartition`). 0: none. Less than the cluster's nodes.
    pub small_job_nodes: u32,
}

impl Config {
    pub fn new(cluster: ClusterSpec, tree: BudgetTree, policy: PolicyKind) -> Config {
        Config {
            cluster,
            tree,
            policy,
            checkpoint_interval: 1800,
            requeue_delay: 0,
            bf_max_job_test: 500,
            preempt_max_job_test: 16,
            default_queue_depth: 100,
            bf_interval: 30,
            horizon: None,
            baseline_limit_factor: 1.0,
            baseline_priority_levels: false,
            check_policy: false,
            small_job_nodes: 0,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEnd {
    Completed,
    /// Killed at `end` after the preemption signal at `signal`.
    Preempted {
        signal: i64,
    },
    /// Still running when the simulation stopped.
    Horizon,
}

/// One run of one job on a fixed set of GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Index into the workload's jobs.
    pub job: u32,
    pub start: i64,
    pub end: i64,
    /// GPUs held.
    pub gpus: u32,
    /// (node, slot mask) pairs.
    pub slots: Vec<(u32, u64)>,
    /// Charged to the job's budget leaf (allot: an allocated run).
    pub charged: bool,
    /// The run may be preempted from here on (`start`: throughout; past
    /// `end`: never). Allot: the policy core's
    /// `RunningJob::protected_until`; baseline: never for allocated runs.
    pub preemptible_from: i64,
    pub ended: RunEnd,
    /// Seconds of this run's work lost (not checkpointed, or cancelled).
    pub lost: i64,
    /// Preempted: the job (index into the workload) that took its GPUs.
    pub preempted_by: Option<u32>,
}

/// Where a job ended up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum Fate {
    Completed,
    /// Preempted and not resumable.
    Cancelled(String),
    /// Never queued (no budget leaf, contract refused, larger than the cluster).
    Refused(String),
    /// Not done when the simulation stopped.
    Unfinished(String),
}

/// Per job, by index into the workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    pub fate: Fate,
    pub first_start: Option<i64>,
    /// Completion, cancellation or the horizon.
    pub end: Option<i64>,
    pub preemptions: u32,
}

/// Everything a simulation produced, for the report, the pictures and the checks.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub policy: PolicyKind,
    /// The jobs as resolved before the run: leaf, contract, GPUs held, refusals.
    pub prepared: Prepared,
    pub runs: Vec<Run>,
    pub jobs: Vec<JobOutcome>,
    /// Per leaf: (time, change of GPUs wanted by the leaf's queued and running jobs).
    pub demand_log: Vec<Vec<(i64, i64)>>,
    /// Per leaf: (time, change of GPUs held by the leaf's running jobs).
    pub delivered_log: Vec<Vec<(i64, i64)>>,
    /// Per leaf: GPU-seconds handed to the occupancy window (allot only).
    pub charged: Vec<i64>,
    pub max_gpus_in_use: u32,
    /// First submission and the time the simulation stopped.
    pub start: i64,
    pub end: i64,
    pub events: u64,
    pub passes: u64,
    pub preempt_searches: u64,
    /// GPU-seconds free while jobs waited (they did not fit, or were not reached).
    pub idle_while_waiting: i64,
    /// GPU-seconds held idle by preemptors waiting out their victims' grace time.
    pub claimed_idle: i64,
}

/// (time, kind, sequence number, job, run number): the heap's order is the
/// order events apply in, ties broken by insertion.
type Event = (i64, u8, u64, u32, u32);

/// Event kinds, in the order they apply at one instant: GPUs are freed
/// before claims are served, and both before new work arrives.
const EV_RELEASE: u8 = 0;
const EV_START_CLAIMED: u8 = 1;
const EV_PROTECTION_END: u8 = 2;
const EV_SUBMIT: u8 = 3;
const EV_REQUEUE: u8 = 4;
const EV_BACKFILL: u8 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Future,
    Pending,
    /// Preempted others; waits for their grace time, holding what it has.
    Starting,
    Running,
    /// Signalled; holds its GPUs until killed.
    Grace,
    Completed,
    Cancelled,
    Refused,
}

#[derive(Debug, Clone)]
struct JobRt {
    status: Status,
    /// Valid unless refused.
    leaf: u32,
    /// Allocated (declares a minimum runtime): its runs are protected from
    /// preemption (allot: until the minimum runtime ends; baseline: always)
    /// and charged (allot) or counted against the team's limit (baseline).
    /// Otherwise they are free for any allocated job to take.
    contract: Contract,
    held: u32,
    /// Work saved so far (completed runs' checkpoints).
    done: i64,
    run_no: u32,
    run_start: i64,
    natural_end: i64,
    kill_at: i64,
    /// Signal time of the current preemption.
    signal_at: i64,
    first_start: Option<i64>,
    /// Slots held now.
    alloc: Vec<(u32, u64)>,
    /// Grace: the job that gets these GPUs. Starting: GPUs still owed, per node.
    claim_for: Option<u32>,
    owed: Vec<(u32, u32)>,
    /// Allot: past its minimum runtime, in `unprotected[leaf]`.
    unprotected: bool,
    /// Key in `releases`.
    release_key: Option<(i64, u32)>,
    preemptions: u32,
    end: Option<i64>,
    fate_reason: Option<String>,
}

/// What a pass has learnt so far.
struct PassState {
    mode: Mode,
    victims_exist: bool,
    /// Node-level preemption searches made.
    searches: usize,
    /// Held-GPU count from which nothing fits on free GPUs any more
    /// (fitting is monotone in size, and free GPUs only shrink in a pass),
    /// for jobs that may not (`[0]`) and may (`[1]`) use the small-job nodes.
    min_fail: [u32; 2],
    shadow: Option<Shadow>,
    /// (group, GPUs of its leaf's unprotected runs that some job of the
    /// group may take) when first asked this pass: an upper bound for the
    /// rest of the pass (a pass only takes runs away).
    group_same: Option<(usize, u32)>,
}

/// Which scheduler runs a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// After events: starts jobs in order until one cannot start.
    Main,
    /// Every `bf_interval`: deeper, with a reservation for the first
    /// blocked job and backfill around it.
    Backfill,
}

/// The earliest start of the first blocked job, and the GPUs it needs then.
struct Shadow {
    time: i64,
    /// (node, GPUs that may still be used past `time`).
    slack: Vec<(u32, u32)>,
}

impl Shadow {
    fn slack_of(&self, node: u32) -> Option<u32> {
        self.slack.iter().find(|(n, _)| *n == node).map(|&(_, s)| s)
    }
    fn allows(&self, node: u32, gpus: u32, end: i64) -> bool {
        end <= self.time || self.slack_of(node).is_none_or(|s| s >= gpus)
    }
    fn consume(&mut self, node: u32, gpus: u32, end: i64) {
        if end > self.time {
            if let Some(e) = self.slack.iter_mut().find(|(n, _)| *n == node) {
                e.1 -= gpus;
            }
        }
    }
}

/// What a failed preemption search depended on: while both stay the
/// same, searching again cannot succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SearchKey {
    growth: u64,
    allowed: u64,
}

/// A way to place a job by preempting: nodes, and victims.
struct PreemptPlan {
    nodes: Vec<(u32, u32)>,
    victims: Vec<u32>,
}

pub(crate) struct Engine<'a> {
    cfg: &'a Config,
    /// Allot's switchable preemption rules, from the budget's settings.
    rules: PreemptRules,
    workload: &'a Workload,
    /// Handed on to the outcome.
    prepared: Prepared,
    jobs: Vec<JobRt>,
    nodes: Nodes,
    g: u32,
    leaves: usize,
    /// Jobs holding slots on each node.
    on_node: Vec<Vec<u32>>,
    heap: BinaryHeap<Reverse<Event>>,
    /// Events in the heap other than backfill cycles.
    heap_work: usize,
    seq: u64,
    next_submit: usize,
    /// Pending jobs per group, by index into the workload, which is in
    /// (submit, job_id) order: the order of jobs within a group.
    groups: Vec<BTreeSet<u32>>,
    /// The same, per group and held-GPU count.
    by_size: Vec<BTreeMap<u32, BTreeSet<u32>>>,
    pending: usize,
    /// Expected (release time, job) of every job that holds GPUs.
    releases: BTreeSet<(i64, u32)>,
    window: OccupancyWindow,
    usage: Vec<i64>,
    /// Allot: running allocated jobs past their protection, per leaf.
    unprotected: Vec<BTreeSet<u32>>,
    unprotected_gpus: Vec<u32>,
    /// Per leaf: bumped whenever `unprotected[leaf]` changes.
    unprotected_version: Vec<u64>,
    /// `same_leaf_gpus` by (leaf, priority, minimum runtime or -1 for any):
    /// (the leaf's `unprotected_version` then, GPUs).
    same_leaf_cache: BTreeMap<(u32, PriorityLevel, i64), (u64, u32)>,
    /// GPUs of running jobs that any protected waiting job may take: runs
    /// that declared `min_runtime=0`, under either policy.
    free_for_all_gpus: u32,
    /// Baseline: non-preemptible GPUs per leaf, and the limits.
    guaranteed_gpus: Vec<u32>,
    limit: Vec<u32>,
    /// Bumped whenever preemption could newly succeed: GPUs freed, a
    /// protection ended. (Starts and preemptions only take room away.)
    growth: u64,
    /// Per job: the circumstances of its last failed preemption search.
    failed_search: Vec<Option<SearchKey>>,
    /// Per leaf: (pass, smallest job of the leaf that found no room by
    /// preemption in that pass, its priority and minimum runtime: with
    /// preemption within a team, a job of lower priority or a longer
    /// minimum runtime may take fewer of its teammates' GPUs, never more).
    /// And whether it was a small job (rule 4 without the margin: a small
    /// job may take more than a larger one).
    leaf_fail: Vec<(u64, u32, PriorityLevel, i64, bool)>,
    /// Per preemption row (waiting leaf, small or not: `row_of`): the leaves
    /// whose unprotected runs its jobs may take (this pass).
    allowed_list: Vec<Vec<u32>>,
    backfill_pending: bool,
    changed_since_backfill: bool,
    in_use: u32,
    /// GPUs held by jobs that have not started (preemptors in the grace time).
    claimed: u32,
    idle_while_waiting: i64,
    claimed_idle: i64,
    // Outputs.
    runs: Vec<Run>,
    demand_log: Vec<Vec<(i64, i64)>>,
    delivered_log: Vec<Vec<(i64, i64)>>,
    charged: Vec<i64>,
    max_in_use: u32,
    events: u64,
    passes: u64,
    preempt_searches: u64,
    // Per-pass caches (stamped with the pass number).
    /// Per preemption row: (pass, signature of `allowed_list`) when last computed.
    victim_gpus_cache: Vec<(u64, u64)>,
    /// `allowed[row * leaves + v]`: jobs of preemption row `row` may take
    /// leaf `v`'s unprotected runs (this pass, for the rows `victim_gpus`
    /// filled).
    allowed: Vec<bool>,
    /// Per node: GPUs of free-for-all runs; unprotected GPUs per leaf
    /// (`[node * leaves + leaf]`) and in all.
    ffa_on: Vec<u32>,
    unprot_on: Vec<u32>,
    unprot_on_total: Vec<u32>,
    /// Nodes by free GPUs + GPUs of any possible victim: an upper bound of
    /// what preemption could free there.
    reclaim: Buckets,
    extra: Vec<u32>,
}

impl<'a> Engine<'a> {
    pub fn new(cfg: &'a Config, workload: &'a Workload, prepared: Prepared) -> Engine<'a> {
        let leaves = cfg.tree.leaves.len();
        let start = workload.jobs.first().map_or(0, |j| j.submit);
        let mut jobs: Vec<JobRt> = (0..workload.jobs.len())
            .map(|i| JobRt {
                status: if prepared.refused[i].is_some() { Status::Refused } else { Status::Future },
                leaf: prepared.leaf[i].unwrap_or(0),
                contract: prepared.contract[i],
                held: prepared.held[i],
                done: 0,
                run_no: 0,
                run_start: 0,
                natural_end: 0,
                kill_at: 0,
                signal_at: 0,
                first_start: None,
                alloc: Vec::new(),
                claim_for: None,
                owed: Vec::new(),
                unprotected: false,
                release_key: None,
                preemptions: 0,
                end: None,
                fate_reason: prepared.refused[i].clone(),
            })
            .collect();
        let capacity = cfg.cluster.capacity() as f64;
        let limit: Vec<u32> = (0..leaves)
            .map(|l| {
                let share = cfg.tree.leaf_node(l as u32).effective_share;
                ((share * capacity * cfg.baseline_limit_factor).round() as u32).max(1)
            })
            .collect();
        if cfg.policy == PolicyKind::Baseline {
            // A non-preemptible job larger than its team's limit could never
            // start; Slurm refuses it at submission (limits enforced as `safe`).
            for (i, job) in jobs.iter_mut().enumerate() {
                let lim = &limit;
                if job.status == Status::Future && job.contract.is_allocated() && job.held > lim[job.leaf as usize] {
                    job.status = Status::Refused;
                    job.fate_reason = Some(format!(
                        "baseline: needs {} GPUs, more than its team's limit of {} non-preemptible GPUs",
                        workload.jobs[i].gpus, lim[job.leaf as usize]
                    ));
                }
            }
        }
        let n_groups = match cfg.policy {
            PolicyKind::Allot => 2 * leaves * 3,
            PolicyKind::Baseline => 2 * 3,
        };
        Engine {
            cfg,
            rules: PreemptRules::from_settings(&cfg.tree.settings),
            workload,
            prepared,
            failed_search: vec![None; jobs.len()],
            leaf_fail: vec![(u64::MAX, 0, PriorityLevel::Low, 0, false); leaves],
            allowed_list: vec![Vec::new(); 2 * leaves],
            jobs,
            nodes: Nodes::with_small_job_nodes(cfg.cluster, cfg.small_job_nodes),
            g: cfg.cluster.gpus_per_node,
            leaves,
            on_node: vec![Vec::new(); cfg.cluster.nodes as usize],
            heap: BinaryHeap::new(),
            heap_work: 0,
            seq: 0,
            next_submit: 0,
            groups: vec![BTreeSet::new(); n_groups],
            by_size: vec![BTreeMap::new(); n_groups],
            pending: 0,
            releases: BTreeSet::new(),
            window: OccupancyWindow::new(leaves, cfg.tree.settings.lookback, start),
            usage: Vec::with_capacity(leaves),
            unprotected: vec![BTreeSet::new(); leaves],
            unprotected_gpus: vec![0; leaves],
            unprotected_version: vec![0; leaves],
            same_leaf_cache: BTreeMap::new(),
            free_for_all_gpus: 0,
            guaranteed_gpus: vec![0; leaves],
            limit,
            growth: 0,
            backfill_pending: false,
            changed_since_backfill: false,
            in_use: 0,
            claimed: 0,
            idle_while_waiting: 0,
            claimed_idle: 0,
            runs: Vec::new(),
            demand_log: vec![Vec::new(); leaves],
            delivered_log: vec![Vec::new(); leaves],
            charged: vec![0; leaves],
            max_in_use: 0,
            events: 0,
            passes: 0,
            preempt_searches: 0,
            victim_gpus_cache: vec![(u64::MAX, 0); 2 * leaves],
            allowed: vec![false; 2 * leaves * leaves],
            ffa_on: vec![0; cfg.cluster.nodes as usize],
            unprot_on: vec![0; cfg.cluster.nodes as usize * leaves],
            unprot_on_total: vec![0; cfg.cluster.nodes as usize],
            reclaim: Buckets::new(cfg.cluster.nodes, cfg.cluster.gpus_per_node, cfg.cluster.gpus_per_node),
            extra: vec![0; cfg.cluster.nodes as usize],
        }
    }

    fn push(&mut self, time: i64, kind: u8, job: u32, run: u32) {
        self.seq += 1;
        if kind != EV_BACKFILL {
            self.heap_work += 1;
        }
        self.heap.push(Reverse((time, kind, self.seq, job, run)));
    }

    /// The next event: the heap's or the next submission, whichever comes first.
    fn next_event(&mut self) -> Option<(i64, u8, u32, u32)> {
        let submit = self.workload.jobs.get(self.next_submit).map(|j| (j.submit, EV_SUBMIT));
        let heap = self.heap.peek().map(|Reverse((t, k, ..))| (*t, *k));
        match (submit, heap) {
            (Some(s), Some(h)) if h < s => self.pop_heap(),
            (Some((t, _)), _) => {
                let i = self.next_submit as u32;
                self.next_submit += 1;
                Some((t, EV_SUBMIT, i, 0))
            }
            (None, Some(_)) => self.pop_heap(),
            (None, None) => None,
        }
    }

    fn pop_heap(&mut self) -> Option<(i64, u8, u32, u32)> {
        let (t, k, _, j, r) = self.heap.pop()?.0;
        if k != EV_BACKFILL {
            self.heap_work -= 1;
        }
        Some((t, k, j, r))
    }

    fn peek_time(&self) -> Option<i64> {
        let submit = self.workload.jobs.get(self.next_submit).map(|j| j.submit);
        let heap = self.heap.peek().map(|Reverse((t, ..))| *t);
        match (submit, heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs to the end; `progress(now)` is called now and then.
    pub fn run(mut self, progress: &mut dyn FnMut(i64)) -> Outcome {
        let start = self.workload.jobs.first().map_or(0, |j| j.submit);
        let horizon = self.cfg.horizon.unwrap_or(i64::MAX);
        let mut now = start;
        while let Some(t) = self.peek_time() {
            if t > horizon {
                break;
            }
            if self.pending > 0 {
                self.idle_while_waiting += self.nodes.free_total() as i64 * (t - now);
            }
            self.claimed_idle += self.claimed as i64 * (t - now);
            now = t;
            let mut dirty = false;
            let mut backfill = false;
            while self.peek_time() == Some(now) {
                let (_, kind, job, run) = self.next_event().expect("peeked");
                self.events += 1;
                if self.events.is_multiple_of(8192) {
                    progress(now);
                }
                if kind == EV_BACKFILL {
                    self.backfill_pending = false;
                    backfill = true;
                } else {
                    dirty |= self.apply(now, kind, job, run);
                }
            }
            // As Slurm: the main scheduler after events, backfill on its own clock.
            self.changed_since_backfill |= dirty;
            if backfill && self.changed_since_backfill {
                // Like Slurm's backfill, which skips a cycle when no job or
                // node changed since the last one.
                self.changed_since_backfill = false;
                self.pass(now, Mode::Backfill);
            } else if dirty {
                self.pass(now, Mode::Main);
            }
            if self.pending > 0 && !self.backfill_pending {
                self.backfill_pending = true;
                self.push(now + self.cfg.bf_interval.max(1), EV_BACKFILL, 0, 0);
            }
            if self.stuck() {
                break;
            }
        }
        let end = if self.cfg.horizon.is_some() { horizon.max(now) } else { now };
        self.finish(start, end)
    }

    /// Nothing runs, nothing will happen but backfill passes, and jobs still wait:
    /// they can never start (cannot happen with valid input; a guard).
    fn stuck(&self) -> bool {
        self.pending > 0 && self.releases.is_empty() && self.next_submit >= self.workload.jobs.len() && self.heap_work == 0
    }

    /// Applies one event; whether a pass should follow.
    fn apply(&mut self, now: i64, kind: u8, j: u32, run: u32) -> bool {
        match kind {
            EV_SUBMIT => {
                let ju = j as usize;
                if self.jobs[ju].status == Status::Refused {
                    return false;
                }
                let leaf = self.jobs[ju].leaf as usize;
                self.demand_log[leaf].push((now, self.jobs[ju].held as i64));
                self.enqueue(j);
                true
            }
            EV_REQUEUE => {
                if self.jobs[j as usize].status == Status::Future && self.jobs[j as usize].run_no == run {
                    self.enqueue(j);
                }
                true
            }
            EV_RELEASE => {
                let job = &self.jobs[j as usize];
                if job.run_no != run || !matches!(job.status, Status::Running | Status::Grace) {
                    return false; // superseded: the run ended otherwise
                }
                if now >= job.natural_end {
                    self.complete(j, now);
                } else if job.status == Status::Grace && now >= job.kill_at {
                    self.kill(j, now);
                } else {
                    return false;
                }
                true
            }
            EV_START_CLAIMED => {
                let job = &self.jobs[j as usize];
                debug_assert_eq!(job.status, Status::Starting);
                debug_assert!(job.owed.iter().all(|&(_, c)| c == 0), "job {j} starts still owed {:?}", job.owed);
                let alloc = std::mem::take(&mut self.jobs[j as usize].alloc);
                self.claimed -= self.jobs[j as usize].held;
                self.clear_release(j);
                if self.cfg.policy == PolicyKind::Baseline {
                    // Its place within the limit was held since the preemption; begin_run counts it again.
                    let job = &self.jobs[j as usize];
                    self.guaranteed_gpus[job.leaf as usize] -= job.held;
                }
                self.begin_run(j, now, alloc);
                true
            }
            EV_PROTECTION_END => {
                let job = &self.jobs[j as usize];
                if job.run_no != run || job.status != Status::Running || !job.contract.is_allocated() || job.unprotected {
                    return false;
                }
                let leaf = job.leaf as usize;
                self.jobs[j as usize].unprotected = true;
                self.unprotected[leaf].insert(j);
                self.unprotected_version[leaf] += 1;
                self.unprotected_gpus[leaf] += self.jobs[j as usize].held;
                self.victim_books_on_nodes(j, true, 1);
                self.growth += 1;
                true
            }
            _ => unreachable!("event kind {kind}"),
        }
    }

    fn group_of(&self, j: u32) -> usize {
        let job = &self.jobs[j as usize];
        // High first: the reverse of `PriorityLevel`'s order.
        let level = PriorityLevel::High as usize - job.contract.priority as usize;
        let tier = usize::from(!job.contract.is_allocated());
        match self.cfg.policy {
            PolicyKind::Allot => (tier * self.leaves + job.leaf as usize) * 3 + level,
            // Preemptible (scavenger) jobs after all others, as a low-priority QOS.
            PolicyKind::Baseline if self.cfg.baseline_priority_levels => tier * 3 + level,
            PolicyKind::Baseline => tier * 3,
        }
    }

    fn enqueue(&mut self, j: u32) {
        let g = self.group_of(j);
        self.groups[g].insert(j);
        self.by_size[g].entry(self.jobs[j as usize].held).or_default().insert(j);
        self.jobs[j as usize].status = Status::Pending;
        self.pending += 1;
    }

    fn dequeue(&mut self, j: u32) {
        let g = self.group_of(j);
        let removed = self.groups[g].remove(&j);
        debug_assert!(removed);
        let held = self.jobs[j as usize].held;
        let sizes = &mut self.by_size[g];
        let set = sizes.get_mut(&held).expect("size indexed");
        set.remove(&j);
        if set.is_empty() {
            sizes.remove(&held);
        }
        self.pending -= 1;
    }

    fn remaining(&self, j: u32) -> i64 {
        self.workload.jobs[j as usize].runtime - self.jobs[j as usize].done
    }

    fn set_release(&mut self, j: u32, time: i64) {
        self.clear_release(j);
        self.releases.insert((time, j));
        self.jobs[j as usize].release_key = Some((time, j));
    }

    fn clear_release(&mut self, j: u32) {
        if let Some(k) = self.jobs[j as usize].release_key.take() {
            self.releases.remove(&k);
        }
    }

    /// Starts a run of `j` on `alloc` (slots already taken from the free pool).
    fn begin_run(&mut self, j: u32, now: i64, alloc: Vec<(u32, u64)>) {
        let remaining = self.remaining(j);
        let allot = self.cfg.policy == PolicyKind::Allot;
        let job = &mut self.jobs[j as usize];
        job.status = Status::Running;
        job.run_no += 1;
        job.run_start = now;
        job.natural_end = now + remaining;
        job.first_start.get_or_insert(now);
        job.unprotected = false;
        job.claim_for = None;
        // Protected and (allot) charged, or (baseline) counted against the
        // team's limit: the job declared a minimum runtime. Only unallocated
        // (`min_runtime=0`) jobs run preemptible.
        let (leaf, held, run_no, allocated) = (job.leaf, job.held, job.run_no, job.contract.is_allocated());
        for &(n, _) in &alloc {
            if !self.on_node[n as usize].contains(&j) {
                self.on_node[n as usize].push(j);
            }
        }
        self.jobs[j as usize].alloc = alloc;
        self.push(now + remaining, EV_RELEASE, j, run_no);
        self.set_release(j, now + remaining);
        if allocated {
            if allot {
                self.window.change(leaf, now, held as i64);
                let until = self.running_view(j).protected_until();
                if until < now + remaining {
                    self.push(until, EV_PROTECTION_END, j, run_no);
                }
            } else {
                self.guaranteed_gpus[leaf as usize] += held;
            }
        } else {
            self.free_for_all_gpus += held;
            self.victim_books_on_nodes(j, false, 1);
        }
        self.delivered_log[leaf as usize].push((now, held as i64));
        self.in_use += held;
        self.max_in_use = self.max_in_use.max(self.in_use);
    }

    /// Ends the current run at `now`, hands its GPUs back (or to its
    /// preemptor) and records it.
    fn end_run(&mut self, j: u32, now: i64, ended: RunEnd, lost: i64) {
        let allot = self.cfg.policy == PolicyKind::Allot;
        let job = &self.jobs[j as usize];
        let (leaf, held, start, allocated, status) = (job.leaf, job.held, job.run_start, job.contract.is_allocated(), job.status);
        let charged = allot && allocated;
        if status == Status::Running {
            self.drop_victim_books(j);
        }
        if allocated {
            if allot {
                self.window.change(leaf, now, -(held as i64));
                self.charged[leaf as usize] += held as i64 * (now - start);
            } else {
                self.guaranteed_gpus[leaf as usize] -= held;
            }
        }
        self.delivered_log[leaf as usize].push((now, -(held as i64)));
        self.in_use -= held;
        self.clear_release(j);
        let alloc = std::mem::take(&mut self.jobs[j as usize].alloc);
        let claim_for = self.jobs[j as usize].claim_for.take();
        for &(n, mask) in &alloc {
            self.on_node[n as usize].retain(|&x| x != j);
            let mut rest = mask;
            if let Some(c) = claim_for {
                rest = self.transfer(c, n, mask);
            }
            if rest != 0 {
                self.nodes.give(n, rest);
                self.refresh_reclaim(n);
            }
        }
        let preemptible_from = match self.cfg.policy {
            PolicyKind::Allot => self.running_view(j).protected_until(),
            PolicyKind::Baseline if allocated => i64::MAX,
            PolicyKind::Baseline => start,
        };
        let preempted_by = if matches!(ended, RunEnd::Preempted { .. }) { claim_for } else { None };
        self.runs.push(Run { job: j, start, end: now, gpus: held, slots: alloc, charged, preemptible_from, ended, lost, preempted_by });
        self.growth += 1;
    }

    /// Gives `claimer` the slots of `mask` on `node` that it is still owed;
    /// returns the rest.
    fn transfer(&mut self, claimer: u32, node: u32, mask: u64) -> u64 {
        let c = &mut self.jobs[claimer as usize];
        let Some(entry) = c.owed.iter_mut().find(|(n, _)| *n == node) else { return mask };
        let mut given = 0u64;
        let mut rest = mask;
        while entry.1 > 0 && rest != 0 {
            let low = rest & rest.wrapping_neg();
            given |= low;
            rest &= !low;
            entry.1 -= 1;
        }
        if given != 0 {
            self.claimed += given.count_ones();
            match c.alloc.iter_mut().find(|(n, _)| *n == node) {
                Some(a) => a.1 |= given,
                None => c.alloc.push((node, given)),
            }
            if !self.on_node[node as usize].contains(&claimer) {
                self.on_node[node as usize].push(claimer);
            }
        }
        rest
    }

    /// Removes a running job from the preemption candidates.
    fn drop_victim_books(&mut self, j: u32) {
        let job = &self.jobs[j as usize];
        let (leaf, held) = (job.leaf as usize, job.held);
        if !job.contract.is_allocated() {
            self.free_for_all_gpus -= held;
            self.victim_books_on_nodes(j, false, -1);
        } else if job.unprotected {
            self.unprotected[leaf].remove(&j);
            self.unprotected_version[leaf] += 1;
            self.unprotected_gpus[leaf] -= held;
            self.victim_books_on_nodes(j, true, -1);
            self.jobs[j as usize].unprotected = false;
        }
    }

    /// Adds (`sign` 1) or removes (-1) `j`'s GPUs to the per-node victim
    /// counts: free for all, or unprotected in its leaf.
    fn victim_books_on_nodes(&mut self, j: u32, unprotected: bool, sign: i32) {
        let leaf = self.jobs[j as usize].leaf as usize;
        for i in 0..self.jobs[j as usize].alloc.len() {
            let (n, mask) = self.jobs[j as usize].alloc[i];
            let c = mask.count_ones();
            let apply = |x: &mut u32| *x = if sign > 0 { *x + c } else { *x - c };
            if unprotected {
                apply(&mut self.unprot_on[n as usize * self.leaves + leaf]);
                apply(&mut self.unprot_on_total[n as usize]);
            } else {
                apply(&mut self.ffa_on[n as usize]);
            }
            self.refresh_reclaim(n);
        }
    }

    fn refresh_reclaim(&mut self, n: u32) {
        let v = self.nodes.free_on(n) + self.ffa_on[n as usize] + self.unprot_on_total[n as usize];
        self.reclaim.set(n, v);
    }

    fn complete(&mut self, j: u32, now: i64) {
        self.end_run(j, now, RunEnd::Completed, 0);
        let job = &mut self.jobs[j as usize];
        job.done = self.workload.jobs[j as usize].runtime;
        job.status = Status::Completed;
        job.end = Some(now);
        let (leaf, held) = (job.leaf as usize, job.held as i64);
        self.demand_log[leaf].push((now, -held));
    }

    /// The grace time is over: requeue or cancel.
    fn kill(&mut self, j: u32, now: i64) {
        let w = &self.workload.jobs[j as usize];
        let job = &self.jobs[j as usize];
        let progress = now - job.run_start;
        let ci = self.cfg.checkpoint_interval;
        let saved = if !w.resumable {
            0
        } else if ci <= 0 {
            progress
        } else {
            progress / ci * ci
        };
        let signal = job.signal_at;
        self.end_run(j, now, RunEnd::Preempted { signal }, progress - saved);
        let resumable = w.resumable;
        let job = &mut self.jobs[j as usize];
        job.preemptions += 1;
        if resumable {
            job.done += saved;
            job.status = Status::Future;
            let run_no = job.run_no;
            self.push(now + self.cfg.requeue_delay.max(0), EV_REQUEUE, j, run_no);
        } else {
            job.status = Status::Cancelled;
            job.end = Some(now);
            job.fate_reason = Some("preempted and not resumable".into());
            let (leaf, held) = (job.leaf as usize, job.held as i64);
            self.demand_log[leaf].push((now, -held));
        }
    }

    // ---- the scheduling pass -------------------------------------------

    fn pass(&mut self, now: i64, mode: Mode) {
        self.passes += 1;
        if self.pending == 0 {
            return;
        }
        let victims_exist = self.free_for_all_gpus > 0 || self.unprotected_gpus.iter().any(|&g| g > 0);
        if self.nodes.free_total() == 0 && !victims_exist {
            return; // nothing can start and nothing can be preempted
        }
        let ranking = match self.cfg.policy {
            PolicyKind::Allot => {
                self.window.usage_all(now, &mut self.usage);
                Some(Ranking::compute(&self.cfg.tree, &self.usage, self.cfg.cluster.capacity(), now))
            }
            PolicyKind::Baseline => None,
        };
        let order = self.group_order(ranking.as_ref());
        if self.cfg.check_policy {
            self.check_order(&order, ranking.as_ref());
        }
        let depth = match mode {
            Mode::Main => self.cfg.default_queue_depth,
            Mode::Backfill => self.cfg.bf_max_job_test,
        };
        let mut st = PassState { mode, victims_exist, searches: 0, min_fail: [u32::MAX; 2], shadow: None, group_same: None };
        let mut tested = 0usize;
        'groups: for g in order {
            if tested >= depth {
                break;
            }
            // The jobs this pass tests are the first `depth` in the order;
            // `cutoff` is the last one of this group among them.
            let len = self.groups[g].len();
            let remaining = depth - tested;
            let cutoff = if len > remaining { self.groups[g].iter().nth(remaining - 1).copied() } else { None };
            let mut cursor: Option<u32> = None;
            loop {
                let next = if st.shadow.is_none() {
                    // In order, until a job blocks and takes the reservation.
                    match cursor {
                        None => self.groups[g].iter().next().copied(),
                        Some(c) => self.groups[g].range(c + 1..).next().copied(),
                    }
                } else {
                    // Past the reservation a job that can neither fit nor
                    // preempt does nothing: visit only sizes that might.
                    self.next_that_might_start(g, cursor, &mut st, ranking.as_ref())
                };
                let Some(j) = next.filter(|&j| cutoff.is_none_or(|c| j <= c)) else { break };
                cursor = Some(j);
                if !self.try_job(j, now, &mut st, ranking.as_ref()) {
                    break 'groups;
                }
            }
            tested += len.min(remaining);
        }
    }

    /// One job's turn in a pass: start it, preempt for it, or (the first
    /// blocked one in a backfill pass) reserve for it. False: the pass is over.
    fn try_job(&mut self, j: u32, now: i64, st: &mut PassState, ranking: Option<&Ranking>) -> bool {
        let allocated = self.jobs[j as usize].contract.is_allocated();
        if self.cfg.policy == PolicyKind::Baseline && allocated && !self.within_limit(j) {
            return true; // held by its team's limit (Slurm: pending, QOSGrpGRES); blocks no one
        }
        let held = self.jobs[j as usize].held;
        let end = now + self.remaining(j);
        let all = self.may_use_all_nodes(j);
        if held < st.min_fail[usize::from(all)] {
            if let Some(place) = self.find_place(held, end, st.shadow.as_ref(), all) {
                self.start_now(j, now, place, st.shadow.as_mut(), end);
                return true;
            }
            if !self.fits_free(held, all) {
                // What fits nowhere fits nowhere outside the small-job nodes either.
                st.min_fail[usize::from(all)] = held;
                st.min_fail[0] = st.min_fail[0].min(held);
            }
        }
        // Preemptible jobs never preempt (allot: the policy refuses
        // unallocated preemptors itself; skipping the search saves time).
        if allocated && st.searches < self.cfg.preempt_max_job_test {
            if let Some(plan) = self.plan_preemption(j, now, ranking, &mut st.searches) {
                self.execute_preemption(j, now, plan);
                return true;
            }
        }
        if st.mode == Mode::Main {
            return false; // the main scheduler stops at the first job that cannot start
        }
        if st.shadow.is_none() {
            st.shadow = self.reserve(j, now);
        }
        // No GPU free and none to take (allot: the unallocated tier, which
        // comes last, never preempts): nothing further can start.
        !(st.min_fail[1] <= 1 && (!st.victims_exist || (self.cfg.policy == PolicyKind::Allot && !allocated)))
    }

    /// The next job of group `g` after `cursor` whose size could fit on free
    /// GPUs or be made room for by preemption; larger ones would only fail.
    fn next_that_might_start(&mut self, g: usize, cursor: Option<u32>, st: &mut PassState, ranking: Option<&Ranking>) -> Option<u32> {
        let head = *self.groups[g].iter().next()?;
        let mut bound = st.min_fail[0].max(st.min_fail[1]);
        if self.jobs[head as usize].contract.is_allocated() && st.searches < self.cfg.preempt_max_job_test {
            // The group's jobs share leaf and priority, not minimum runtimes:
            // bound their teammates' GPUs by the most any of them may take.
            let leaf = self.jobs[head as usize].leaf as usize;
            let (victims, _) = self.cross_victim_gpus_of_row(2 * leaf, true, ranking);
            let same = match st.group_same {
                Some((cached, gpus)) if cached == g => gpus,
                _ => {
                    let gpus = self.same_leaf_gpus(head, true);
                    st.group_same = Some((g, gpus));
                    gpus
                }
            };
            let mut room = (self.nodes.free_total() + victims + same).saturating_add(1);
            if self.cfg.policy == PolicyKind::Allot && self.rules.small_job_gpus > 0 {
                // Small jobs of the group (at most small_job_gpus GPUs) may
                // take more: every other leaf below its victim, no margin.
                let (small_victims, _) = self.cross_victim_gpus_of_row(2 * leaf + 1, true, ranking);
                let small_room = (self.nodes.free_total() + small_victims + same).saturating_add(1);
                room = room.max(small_room.min(self.rules.small_job_gpus.saturating_add(1)));
            }
            if self.cfg.policy == PolicyKind::Allot && !self.same_leaf_possible(head) {
                // A smaller job of this leaf found no room this pass (a small
                // one: no job of the leaf may take more).
                let (stamp, fail_at, _, _, fail_small) = self.leaf_fail[leaf];
                if stamp == self.passes && (fail_small || self.rules.small_job_gpus == 0) {
                    room = room.min(fail_at);
                }
            }
            bound = bound.max(room);
        }
        let mut best: Option<u32> = None;
        for set in self.by_size[g].range(..bound).map(|(_, set)| set) {
            let next = match cursor {
                None => set.iter().next(),
                Some(c) => set.range(c + 1..).next(),
            };
            if let Some(&j) = next {
                best = Some(best.map_or(j, |b: u32| b.min(j)));
            }
        }
        best
    }

    /// Non-empty groups, first to be served first. For allot, the groups'
    /// order is the policy's: `order_jobs` on one job per group (its first),
    /// since jobs of one group follow each other in (submit, id) order.
    fn group_order(&self, ranking: Option<&Ranking>) -> Vec<usize> {
        let nonempty = (0..self.groups.len()).filter(|&g| !self.groups[g].is_empty());
        match ranking {
            None => nonempty.collect(),
            Some(r) => {
                let groups: Vec<usize> = nonempty.collect();
                let heads: Vec<PendingJob> = groups.iter().map(|&g| self.pending_job(*self.groups[g].iter().next().expect("non-empty"))).collect();
                order_jobs(r, &heads).into_iter().map(|i| groups[i]).collect()
            }
        }
    }

    fn pending_job(&self, j: u32) -> PendingJob {
        let job = &self.jobs[j as usize];
        let w = &self.workload.jobs[j as usize];
        PendingJob { job_id: w.job_id, leaf: job.leaf, allocated: job.contract.is_allocated(), priority: job.contract.priority, submit_time: w.submit }
    }

    /// Tests: the walk's order is `order_jobs` over every pending job.
    fn check_order(&self, order: &[usize], ranking: Option<&Ranking>) {
        let Some(r) = ranking else { return };
        let ours: Vec<u32> = order.iter().flat_map(|&g| self.groups[g].iter().copied()).collect();
        let all: Vec<PendingJob> = ours.iter().map(|&j| self.pending_job(j)).collect();
        let policy: Vec<u32> = order_jobs(r, &all).into_iter().map(|i| ours[i]).collect();
        assert_eq!(ours, policy, "the engine's merge of groups differs from allot::order::order_jobs");
    }

    fn fits_free(&self, held: u32, all: bool) -> bool {
        if held <= self.g {
            self.nodes.fits_one_for(held, all)
        } else {
            self.nodes.whole_free_for(all) >= held / self.g
        }
    }

    /// Whether `j` may use every node, the small-job nodes included
    /// (`PreemptRules::may_use_small_job_nodes`; true when none are kept).
    fn may_use_all_nodes(&self, j: u32) -> bool {
        self.cfg.small_job_nodes == 0 || self.rules.may_use_small_job_nodes(&self.waiting_view(j))
    }

    /// Free GPUs for a job of `held` GPUs ending at `end`: (node, GPUs)
    /// pairs. `all`: it may use the small-job nodes, and takes them first
    /// (Slurm: their lower node `Weight`), leaving the other nodes whole.
    fn find_place(&self, held: u32, end: i64, shadow: Option<&Shadow>, all: bool) -> Option<Vec<(u32, u32)>> {
        let ok = |n: u32, gpus: u32| self.nodes.usable(n, all) && shadow.is_none_or(|s| s.allows(n, gpus, end));
        if held <= self.g {
            if all && self.cfg.small_job_nodes > 0 {
                if let Some(n) = self.nodes.best_fit(held, |n| self.nodes.is_small_job_node(n) && ok(n, held)) {
                    return Some(vec![(n, held)]);
                }
            }
            self.nodes.best_fit(held, |n| ok(n, held)).map(|n| vec![(n, held)])
        } else {
            let g = self.g;
            self.nodes.whole_nodes(held / g, |n| ok(n, g)).map(|v| v.into_iter().map(|n| (n, g)).collect())
        }
    }

    fn start_now(&mut self, j: u32, now: i64, place: Vec<(u32, u32)>, shadow: Option<&mut Shadow>, end: i64) {
        if let Some(s) = shadow {
            for &(n, c) in &place {
                s.consume(n, c, end);
            }
        }
        let alloc: Vec<(u32, u64)> = place.iter().map(|&(n, c)| (n, self.nodes.take(n, c))).collect();
        for &(n, _) in &place {
            self.refresh_reclaim(n);
        }
        self.dequeue(j);
        self.begin_run(j, now, alloc);
    }

    /// Baseline: whether the job fits within its team's limit on
    /// non-preemptible GPUs.
    fn within_limit(&self, j: u32) -> bool {
        let job = &self.jobs[j as usize];
        self.guaranteed_gpus[job.leaf as usize] + job.held <= self.limit[job.leaf as usize]
    }

    fn running_view(&self, v: u32) -> RunningJob {
        let job = &self.jobs[v as usize];
        RunningJob { leaf: Some(job.leaf), contract: job.contract, run_start: job.run_start }
    }

    fn waiting_view(&self, j: u32) -> WaitingJob {
        let job = &self.jobs[j as usize];
        WaitingJob { leaf: Some(job.leaf), contract: job.contract, gpus: job.held }
    }

    /// Whether `j` is a small job (`PreemptRules::is_small`: it preempts
    /// other leaves with no margin).
    fn is_small(&self, j: u32) -> bool {
        self.rules.is_small(&self.waiting_view(j))
    }

    /// `j`'s preemption row: its leaf, and whether it is small. Jobs of one
    /// row may take the same other leaves' runs.
    fn row_of(&self, j: u32) -> usize {
        self.jobs[j as usize].leaf as usize * 2 + usize::from(self.is_small(j))
    }

    /// Whether running job `v` may be preempted for `j` now: the policy's answer.
    fn is_victim(&self, v: u32, j: u32, now: i64, ranking: Option<&Ranking>) -> bool {
        let victim = &self.jobs[v as usize];
        if victim.status != Status::Running {
            return false;
        }
        match ranking {
            Some(r) => may_preempt_with(&self.running_view(v), &self.waiting_view(j), now, r, self.rules).allowed(),
            None => !victim.contract.is_allocated(),
        }
    }

    /// The same answer from the books, for the search: free for all, or
    /// unprotected in a leaf whose jobs `j`'s leaf may take (row `w` of
    /// `allowed`, filled by `victim_gpus` this pass), or unprotected in
    /// `j`'s own leaf with a contract rule 5 lets `j` take.
    fn is_victim_by_books(&self, v: u32, j: u32) -> bool {
        let victim = &self.jobs[v as usize];
        let w = self.jobs[j as usize].leaf as usize;
        let row = self.row_of(j);
        victim.status == Status::Running
            && (!victim.contract.is_allocated()
                || (victim.unprotected
                    && if victim.leaf as usize == w {
                        self.same_leaf_possible(j) && within_team(&victim.contract, &self.jobs[j as usize].contract).allowed()
                    } else {
                        self.allowed[row * self.leaves + victim.leaf as usize]
                    }))
    }

    /// Victim order, lowest first: the policy's `preemption_order`, then
    /// the latest start (least work lost), then the job id.
    fn victim_key(&self, v: u32, ranking: Option<&Ranking>) -> (u32, i64, u32) {
        let job = &self.jobs[v as usize];
        let order = match ranking {
            Some(r) => victim_order(&self.running_view(v), job.held, self.workload.jobs[v as usize].resumable, r, self.rules),
            // Baseline: low priority first, when levels are in use.
            None if self.cfg.baseline_priority_levels => job.contract.priority as u32,
            None => 0,
        };
        (order, -job.run_start, self.workload.jobs[v as usize].job_id)
    }

    /// GPUs that a job of `j`'s leaf could take by preemption (a fast
    /// necessary condition before the node-level search), and a signature
    /// of which leaves' jobs it may take. Fills row `w` of `allowed`.
    /// Allot: unallocated runs, plus the unprotected runs of every leaf that
    /// `allot::preempt::outranks` lets `j`'s leaf preempt (`check_policy`
    /// verifies the choice against `may_preempt` for every running job).
    fn victim_gpus(&mut self, j: u32, ranking: Option<&Ranking>) -> (u32, u64) {
        let (gpus, sig) = self.cross_victim_gpus(j, ranking);
        (gpus + self.same_leaf_gpus(j, false), sig)
    }

    /// [`Self::victim_gpus`] without `j`'s own leaf.
    fn cross_victim_gpus(&mut self, j: u32, ranking: Option<&Ranking>) -> (u32, u64) {
        let allocated = self.jobs[j as usize].contract.is_allocated();
        self.cross_victim_gpus_of_row(self.row_of(j), allocated, ranking)
    }

    /// [`Self::cross_victim_gpus`] for the jobs of preemption row `row`.
    fn cross_victim_gpus_of_row(&mut self, row: usize, allocated: bool, ranking: Option<&Ranking>) -> (u32, u64) {
        let Some(r) = ranking else { return (self.free_for_all_gpus, 0) };
        if self.victim_gpus_cache[row].0 == self.passes {
            // Which leaves is fixed for the pass (the ranking is); how many
            // of their GPUs are still running is not.
            let gpus = self.free_for_all_gpus + self.allowed_list[row].iter().map(|&v| self.unprotected_gpus[v as usize]).sum::<u32>();
            return (gpus, self.victim_gpus_cache[row].1);
        }
        let (w, small) = (row / 2, row % 2 == 1);
        // The margin of rule 4: none for small jobs.
        let margin = if small { 0.0 } else { r.preempt_margin };
        let mut gpus = self.free_for_all_gpus;
        let mut sig: u64 = 0xcbf2_9ce4_8422_2325;
        let mut list = std::mem::take(&mut self.allowed_list[row]);
        list.clear();
        for v in 0..self.leaves {
            // Unprotected allocated runs of leaf v: the policy's answer for
            // them depends only on the two leaves and the margin.
            let allowed = allocated && !self.unprotected[v].is_empty() && outranks_by(v as LeafId, w as LeafId, r, margin).allowed();
            self.allowed[row * self.leaves + v] = allowed;
            if allowed {
                gpus += self.unprotected_gpus[v];
                sig = (sig ^ v as u64).wrapping_mul(0x100_0000_01b3);
                list.push(v as u32);
            }
        }
        self.allowed_list[row] = list;
        self.victim_gpus_cache[row] = (self.passes, sig);
        (gpus, sig)
    }

    /// GPUs of `j`'s possible victims on node `n`, from the books (an
    /// upper bound with `same`: every unprotected run of `j`'s own leaf).
    fn reclaimable_on(&self, n: u32, row: usize, same: bool) -> u32 {
        let w = row / 2;
        let mut r = self.ffa_on[n as usize];
        if self.unprot_on_total[n as usize] > 0 {
            let base = n as usize * self.leaves;
            for &v in &self.allowed_list[row] {
                r += self.unprot_on[base + v as usize];
            }
            if same {
                r += self.unprot_on[base + w];
            }
        }
        r
    }

    /// Allot with preemption within a team: `j` may take GPUs of some
    /// unprotected runs of its own leaf (a priority above low is needed).
    fn same_leaf_possible(&self, j: u32) -> bool {
        let job = &self.jobs[j as usize];
        self.cfg.policy == PolicyKind::Allot
            && self.rules.within_team
            && job.contract.is_allocated()
            && job.contract.priority > PriorityLevel::Low
            && !self.unprotected[job.leaf as usize].is_empty()
    }

    /// GPUs of the unprotected runs of `j`'s own leaf that `j` may take
    /// (rule 5, `allot::preempt::within_team`). `any_guarantee`: ignoring
    /// the minimum-runtime part, for a bound over every job of `j`'s group.
    fn same_leaf_gpus(&mut self, j: u32, any_guarantee: bool) -> u32 {
        if !self.same_leaf_possible(j) {
            return 0;
        }
        let job = &self.jobs[j as usize];
        let mut waiting = job.contract;
        if any_guarantee {
            waiting.min_runtime = 0;
        }
        let leaf = job.leaf;
        let version = self.unprotected_version[leaf as usize];
        let key = (leaf, waiting.priority, waiting.min_runtime);
        if let Some(&(v, gpus)) = self.same_leaf_cache.get(&key) {
            if v == version {
                return gpus;
            }
        }
        let gpus = self.unprotected[leaf as usize]
            .iter()
            .filter(|&&v| within_team(&self.jobs[v as usize].contract, &waiting).allowed())
            .map(|&v| self.jobs[v as usize].held)
            .sum();
        self.same_leaf_cache.insert(key, (version, gpus));
        gpus
    }

    /// Finds nodes and victims that make room for `j`, or `None`.
    /// Preemption ignores the backfill reservation, as Slurm's main
    /// scheduler preempts without knowing of backfill's plans.
    fn plan_preemption(&mut self, j: u32, now: i64, ranking: Option<&Ranking>, searches: &mut usize) -> Option<PreemptPlan> {
        let held = self.jobs[j as usize].held;
        let (victim_gpus, sig) = self.victim_gpus(j, ranking);
        if self.cfg.check_policy {
            self.check_victim_total(j, now, ranking, victim_gpus);
        }
        let all = self.may_use_all_nodes(j);
        if self.nodes.free_total_for(all) + victim_gpus < held {
            return None;
        }
        let w = self.jobs[j as usize].leaf as usize;
        let g = self.g;
        let whole = held > g;
        let need = held.min(g);
        let nodes_needed = if whole { (held / g) as usize } else { 1 };
        let key = SearchKey { growth: self.growth, allowed: sig };
        if self.failed_search[j as usize] == Some(key) {
            return None; // nothing that could help has changed since the last search failed
        }
        // Room only shrinks during a pass: a smaller job of the same leaf,
        // with no fewer possible victims, found none.
        let (prio, minrt) = (self.jobs[j as usize].contract.priority, self.jobs[j as usize].contract.min_runtime);
        let small = self.is_small(j);
        let row = self.row_of(j);
        let (stamp, fail_at, fail_prio, fail_minrt, fail_small) = self.leaf_fail[w];
        if stamp == self.passes && held >= fail_at && (!self.rules.within_team || (prio <= fail_prio && minrt >= fail_minrt)) && (fail_small || !small) {
            return None;
        }
        let fail = |this: &mut Self| {
            this.failed_search[j as usize] = Some(key);
            let passes = this.passes;
            let e = &mut this.leaf_fail[w];
            if e.0 != passes || held < e.1 {
                *e = (passes, held, prio, minrt, small);
            }
        };
        let same = self.same_leaf_possible(j);
        // Nodes where free GPUs and this job's possible victims make room.
        let mut candidates: Vec<u32> = Vec::new();
        for ub in need..=g {
            for n in self.reclaim.with_value(ub).filter(|&n| self.nodes.usable(n, all)) {
                let free = self.nodes.free_on(n);
                if free < need && free + self.reclaimable_on(n, row, same) >= need {
                    candidates.push(n);
                }
            }
        }
        let free_nodes: Vec<u32> = if whole { self.nodes.with_free(g).filter(|&n| self.nodes.usable(n, all)).take(nodes_needed).collect() } else { Vec::new() };
        if candidates.is_empty() || candidates.len() + free_nodes.len() < nodes_needed {
            fail(self);
            return None;
        }
        *searches += 1;
        self.preempt_searches += 1;
        let mut best: Vec<((u32, u32, u32), Vec<u32>)> = Vec::new();
        let mut victims: Vec<((u32, i64, u32), u32)> = Vec::new();
        for &n in &candidates {
            victims.clear();
            let mut blocked = false;
            for &v in &self.on_node[n as usize] {
                if self.is_victim_by_books(v, j) {
                    victims.push((self.victim_key(v, ranking), v));
                } else if whole {
                    blocked = true; // a whole node is needed and this job stays
                    break;
                }
            }
            if blocked {
                continue;
            }
            victims.sort_unstable();
            let mut got = self.nodes.free_on(n);
            let mut taken = Vec::new();
            let (mut worst, mut preempted) = (0u32, 0u32);
            for &(key, v) in &victims {
                if got >= need {
                    break;
                }
                let on = self.gpus_on(v, n);
                got += on;
                preempted += on;
                worst = worst.max(key.0);
                taken.push(v);
            }
            if got >= need {
                best.push(((worst, preempted, n), taken));
            }
        }
        if best.is_empty() || best.len() + free_nodes.len() < nodes_needed {
            fail(self);
            return None;
        }
        // Lowest in the preemption order first, then fewest GPUs preempted.
        best.sort_unstable_by_key(|b| b.0);
        let from_victims = nodes_needed - free_nodes.len().min(nodes_needed - 1);
        let mut plan = PreemptPlan { nodes: Vec::new(), victims: Vec::new() };
        for ((_, _, n), taken) in best.into_iter().take(from_victims) {
            plan.nodes.push((n, need));
            for v in taken {
                if !plan.victims.contains(&v) {
                    plan.victims.push(v);
                }
            }
        }
        for n in free_nodes.into_iter().take(nodes_needed - plan.nodes.len()) {
            plan.nodes.push((n, need));
        }
        // Every victim, asked of the policy itself.
        for &v in &plan.victims {
            if !self.is_victim(v, j, now, ranking) {
                assert!(!self.cfg.check_policy, "job {v} chosen from the books as a victim for job {j}, but may_preempt refuses");
                fail(self);
                return None;
            }
        }
        Some(plan)
    }

    fn gpus_on(&self, v: u32, node: u32) -> u32 {
        self.jobs[v as usize].alloc.iter().filter(|(n, _)| *n == node).map(|(_, m)| m.count_ones()).sum()
    }

    /// Tests: the fast victim total is what asking `may_preempt` of every
    /// running job gives.
    fn check_victim_total(&self, j: u32, now: i64, ranking: Option<&Ranking>, fast: u32) {
        let slow: u32 = (0..self.jobs.len() as u32).filter(|&v| self.is_victim(v, j, now, ranking)).map(|v| self.jobs[v as usize].held).sum();
        if fast != slow {
            let detail: Vec<String> = (0..self.jobs.len() as u32)
                .filter(|&v| self.jobs[v as usize].status == Status::Running)
                .map(|v| {
                    let job = &self.jobs[v as usize];
                    format!(
                        "job {v} leaf {} held {} allocated {} unprotected {} policy {}",
                        job.leaf,
                        job.held,
                        job.contract.is_allocated(),
                        job.unprotected,
                        self.is_victim(v, j, now, ranking)
                    )
                })
                .collect();
            panic!(
                "{:?}: victim GPUs for job {j} (leaf {}) at {now}: shortcut {fast}, policy {slow}\n{}",
                self.cfg.policy,
                self.jobs[j as usize].leaf,
                detail.join("\n")
            );
        }
        for v in 0..self.jobs.len() as u32 {
            if ranking.is_some() && self.jobs[v as usize].status == Status::Running {
                assert_eq!(self.is_victim_by_books(v, j), self.is_victim(v, j, now, ranking), "books and policy disagree on job {v} as a victim of job {j}");
            }
        }
    }

    /// A victim's grace time: allot's `grace_for` (unallocated runs get
    /// `unallocated_grace`); baseline: the one grace time for all.
    fn grace_of(&self, v: u32) -> i64 {
        match self.cfg.policy {
            PolicyKind::Allot => grace_for(&self.running_view(v), &self.cfg.tree.settings),
            PolicyKind::Baseline => self.cfg.tree.settings.grace.max(0),
        }
    }

    fn execute_preemption(&mut self, j: u32, now: i64, plan: PreemptPlan) {
        // The preemptor starts when the last of its victims is gone.
        let grace = plan.victims.iter().map(|&v| self.grace_of(v)).max().unwrap_or(0);
        self.dequeue(j);
        let mut alloc = Vec::new();
        let mut owed = Vec::new();
        for &(n, need) in &plan.nodes {
            let take = self.nodes.free_on(n).min(need);
            if take > 0 {
                self.claimed += take;
                alloc.push((n, self.nodes.take(n, take)));
                self.refresh_reclaim(n);
                if !self.on_node[n as usize].contains(&j) {
                    self.on_node[n as usize].push(j);
                }
            }
            owed.push((n, need - take));
        }
        if self.cfg.policy == PolicyKind::Baseline {
            // Hold its place within the team's limit through the grace time.
            let job = &self.jobs[j as usize];
            self.guaranteed_gpus[job.leaf as usize] += job.held;
        }
        let job = &mut self.jobs[j as usize];
        job.status = Status::Starting;
        job.alloc = alloc;
        job.owed = owed;
        let start_at = now + grace;
        let expected_end = start_at + self.remaining(j);
        self.set_release(j, expected_end);
        for &v in &plan.victims {
            let grace = self.grace_of(v);
            self.drop_victim_books(v);
            let victim = &mut self.jobs[v as usize];
            victim.status = Status::Grace;
            victim.signal_at = now;
            victim.kill_at = now + grace;
            victim.claim_for = Some(j);
            let (natural_end, run_no) = (victim.natural_end, victim.run_no);
            if now + grace < natural_end {
                self.push(now + grace, EV_RELEASE, v, run_no);
            }
            // Its GPUs go to j, free for others only when j ends.
            self.set_release(v, expected_end);
        }
        self.push(start_at, EV_START_CLAIMED, j, 0);
    }

    /// The earliest time and place `j` fits, from the expected releases.
    fn reserve(&mut self, j: u32, now: i64) -> Option<Shadow> {
        let held = self.jobs[j as usize].held;
        let g = self.g;
        let all = self.may_use_all_nodes(j);
        let mut touched: Vec<u32> = Vec::new();
        let mut result = None;
        if held <= g {
            'scan: for &(t, v) in &self.releases {
                for &(n, mask) in &self.jobs[v as usize].alloc {
                    if !self.nodes.usable(n, all) {
                        continue;
                    }
                    if self.extra[n as usize] == 0 {
                        touched.push(n);
                    }
                    self.extra[n as usize] += mask.count_ones();
                    let free_then = self.nodes.free_on(n) + self.extra[n as usize];
                    if free_then >= held {
                        result = Some(Shadow { time: t.max(now), slack: vec![(n, free_then - held)] });
                        break 'scan;
                    }
                }
            }
        } else {
            let need = (held / g) as usize;
            let mut whole: Vec<u32> = Vec::new();
            'scan2: for &(t, v) in &self.releases {
                for &(n, mask) in &self.jobs[v as usize].alloc {
                    if !self.nodes.usable(n, all) {
                        continue;
                    }
                    if self.extra[n as usize] == 0 {
                        touched.push(n);
                    }
                    self.extra[n as usize] += mask.count_ones();
                    if self.nodes.free_on(n) + self.extra[n as usize] == g {
                        whole.push(n);
                        if whole.len() + self.nodes.whole_free_for(all) as usize >= need {
                            // Reserve the nodes that free up, then wholly free ones.
                            let mut nodes = whole.clone();
                            nodes.extend(self.nodes.with_free(g).filter(|&n| self.nodes.usable(n, all)).take(need - whole.len().min(need)));
                            nodes.truncate(need);
                            result = Some(Shadow { time: t.max(now), slack: nodes.into_iter().map(|n| (n, 0)).collect() });
                            break 'scan2;
                        }
                    }
                }
            }
        }
        for n in touched {
            self.extra[n as usize] = 0;
        }
        result
    }

    /// Closes the books at `end`.
    fn finish(mut self, start: i64, end: i64) -> Outcome {
        // Runs still going end at the horizon; their jobs are unfinished.
        let holders: Vec<u32> = self.releases.iter().map(|&(_, j)| j).collect();
        for j in holders {
            match self.jobs[j as usize].status {
                Status::Running | Status::Grace => {
                    self.end_run(j, end, RunEnd::Horizon, 0);
                    let why = if self.jobs[j as usize].status == Status::Grace { "being preempted at the horizon" } else { "running at the horizon" };
                    self.jobs[j as usize].fate_reason = Some(why.into());
                }
                Status::Starting => {
                    self.jobs[j as usize].fate_reason = Some("about to start (its victims' grace time) at the horizon".into());
                }
                _ => {}
            }
        }
        let mut out_jobs = Vec::with_capacity(self.jobs.len());
        for (i, job) in self.jobs.iter().enumerate() {
            let fate = match job.status {
                Status::Completed => Fate::Completed,
                Status::Cancelled => Fate::Cancelled(job.fate_reason.clone().unwrap_or_default()),
                Status::Refused => Fate::Refused(job.fate_reason.clone().unwrap_or_default()),
                Status::Pending | Status::Future if self.workload.jobs[i].submit > end => Fate::Unfinished("submitted after the horizon".into()),
                Status::Pending | Status::Future if job.first_start.is_some() => {
                    Fate::Unfinished("waiting to run again after a preemption at the horizon".into())
                }
                Status::Pending | Status::Future => {
                    Fate::Unfinished(if self.stuck() { "could never be placed".into() } else { "still waiting at the horizon".into() })
                }
                Status::Running | Status::Grace | Status::Starting => Fate::Unfinished(job.fate_reason.clone().unwrap_or_default()),
            };
            if matches!(fate, Fate::Unfinished(_)) && self.workload.jobs[i].submit <= end {
                self.demand_log[job.leaf as usize].push((end, -(job.held as i64)));
            }
            out_jobs.push(JobOutcome {
                fate,
                first_start: job.first_start,
                end: job.end.or(Some(end).filter(|_| job.status != Status::Refused)),
                preemptions: job.preemptions,
            });
        }
        for log in &mut self.demand_log {
            // Horizon closings were appended last; keep every log in time order.
            log.sort_by_key(|&(t, _)| t);
        }
        Outcome {
            policy: self.cfg.policy,
            prepared: self.prepared,
            runs: self.runs,
            jobs: out_jobs,
            demand_log: self.demand_log,
            delivered_log: self.delivered_log,
            charged: self.charged,
            max_gpus_in_use: self.max_in_use,
            start,
            end,
            events: self.events,
            passes: self.passes,
            preempt_searches: self.preempt_searches,
            idle_while_waiting: self.idle_while_waiting,
            claimed_idle: self.claimed_idle,
        }
    }
}
