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
//!
//! The engine in parts, each readable alone:
//! - [`events`]: the typed event queue (what happens next, in which order
//!   within an instant);
//! - [`books`]: the cluster's bookkeeping: jobs' runs, queues, GPUs held,
//!   charged and owed, the per-node counts of possible victims;
//! - [`passes`]: the scheduling passes (main and backfill), placement and
//!   the backfill reservation;
//! - [`preemption`]: the search for victims and the preemption itself.

use std::collections::{BTreeMap, BTreeSet};

use allot::budget::BudgetTree;
use allot::contract::{Contract, PriorityLevel};
use allot::fairshare::{Ranker, Ranking};
use allot::occupancy::OccupancyWindow;
use allot::preempt::PreemptRules;
use serde::Serialize;

use crate::cluster::{Buckets, ClusterSpec, Nodes};
use crate::prepare::Prepared;
use crate::workload::Workload;

mod books;
mod events;
mod passes;
mod preemption;
mod waiting;

use events::{EventKind, EventQueue};
use passes::Mode;
use preemption::{PreemptScratch, SearchKey};

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
    /// Kinds (indices into the workload's kinds) whose jobs are restored
    /// after a preemption as `allot session` restores a session: checkpointed
    /// at the grace signal, requeued, nothing lost.
    pub restorable_kinds: Vec<u32>,
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
    /// Seconds a preempted job's GPUs stay held after its grace time when
    /// it does not exit on its signals (Slurm's `KillWait`: SIGKILL comes
    /// that long after the kill's SIGTERM; the node completes the job
    /// only then): its run ends at the kill, its preemptor starts this much
    /// later. 0: the GPUs are free at the kill (a job that exits on its
    /// signal).
    pub kill_wait: i64,
    /// When Slurm's main scheduler runs after an event that does not free
    /// GPUs. `None`: at once, in the second of the event (the simulator's
    /// tables: a pass within a second of a submission). `Some`: as
    /// slurmctld does it (see [`MainClock`]).
    pub main_clock: Option<MainClock>,
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
    /// Where a job of one node's GPUs or fewer goes among the nodes it fits.
    pub placement: Placement,
    /// Preemption leaves the backfill reservation alone, as backfill's own
    /// starts do: a preemptor that would still run at the reserved start may
    /// not take the reserved nodes' GPUs (off: as Slurm, whose main
    /// scheduler preempts without knowing backfill's plans).
    pub preempt_around_reservation: bool,
    /// Allot: backfill's reservation for the first blocked job counts a
    /// running job it may preempt as released when that job's protection
    /// ends (plus the grace time), not when it ends: protection-end times
    /// used to plan.
    pub plan_with_protection_ends: bool,
}

/// Slurm's main scheduler's clock, as slurmctld's background loop keeps it
/// (`_slurmctld_background`, read in 22.05.8's source and a 24.x one): every second it runs a pass
/// over the whole queue once `sched_interval` has gone by since the last
/// full pass, or, when a submission asked for one, once `batch_sched_delay`
/// has gone by since its last pass. A job's end runs a pass at once (its
/// epilog's RPC calls the scheduler). Nothing runs one when a run's
/// minimum runtime ends or a requeued job becomes eligible: the next full
/// pass (or backfill) finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MainClock {
    /// Seconds between full passes (`sched_interval`; Slurm's default 60).
    pub sched_interval: i64,
    /// Seconds a submission's pass may wait after the last one
    /// (`batch_sched_delay`; Slurm's default 3).
    pub batch_sched_delay: i64,
}

impl MainClock {
    /// Slurm's defaults (slurm.conf(5)).
    pub const SLURM_DEFAULTS: MainClock = MainClock { sched_interval: 60, batch_sched_delay: 3 };

    /// The next full pass at or after `t`, on a clock that had one at `origin`.
    pub fn next_full(&self, origin: i64, t: i64) -> i64 {
        let every = self.sched_interval.max(1);
        origin + ((t - origin).max(0) + every - 1) / every * every
    }

    /// The last full pass at or before `t`, if the clock had one by then.
    pub fn last_full(&self, origin: i64, t: i64) -> Option<i64> {
        let every = self.sched_interval.max(1);
        (t >= origin).then(|| origin + (t - origin) / every * every)
    }
}

/// How far and how often the scheduler looks into the queue: the
/// `SchedulerParameters` that bound which pending jobs Slurm tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    pub bf_max_job_test: usize,
    pub default_queue_depth: usize,
    /// Seconds.
    pub bf_interval: i64,
}

impl Reach {
    /// As the shipped `conf/slurm-allot.conf` sets them
    /// (`bf_max_job_test=2000`, `default_queue_depth=500`, `bf_interval=10`):
    /// what the simulator models unless told otherwise, so that it models
    /// the cluster an admin installs. (Its `bf_max_job_user=20` is not
    /// modeled: it only lets Slurm reach further down the queue, since the
    /// jobs it skips do not count toward `bf_max_job_test`.)
    pub const SHIPPED: Reach = Reach { bf_max_job_test: 2000, default_queue_depth: 500, bf_interval: 10 };
    /// Slurm's own defaults (slurm.conf(5)), for comparison.
    pub const SLURM_DEFAULTS: Reach = Reach { bf_max_job_test: 500, default_queue_depth: 100, bf_interval: 30 };
}

impl Config {
    /// Sets the scheduler's reach.
    pub fn set_reach(&mut self, reach: Reach) {
        self.bf_max_job_test = reach.bf_max_job_test;
        self.default_queue_depth = reach.default_queue_depth;
        self.bf_interval = reach.bf_interval;
    }
}

/// Placement of single-node jobs (multi-node jobs take whole free nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The node with the fewest free GPUs that fit: partly used nodes fill
    /// up first, whole ones stay whole.
    BestFit,
    /// The lowest-numbered node that fits, however full: for comparison.
    FirstFit,
}

impl Placement {
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "best-fit" => Some(Placement::BestFit),
            "first-fit" => Some(Placement::FirstFit),
            _ => None,
        }
    }
}

impl Config {
    pub fn new(cluster: ClusterSpec, tree: BudgetTree, policy: PolicyKind) -> Config {
        Config {
            cluster,
            tree,
            policy,
            checkpoint_interval: 1800,
            restorable_kinds: Vec::new(),
            requeue_delay: 0,
            bf_max_job_test: Reach::SHIPPED.bf_max_job_test,
            preempt_max_job_test: 16,
            default_queue_depth: Reach::SHIPPED.default_queue_depth,
            bf_interval: Reach::SHIPPED.bf_interval,
            horizon: None,
            kill_wait: 0,
            main_clock: None,
            baseline_limit_factor: 1.0,
            baseline_priority_levels: false,
            check_policy: false,
            small_job_nodes: 0,
            placement: Placement::BestFit,
            preempt_around_reservation: false,
            plan_with_protection_ends: false,
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
    /// Preempted under rule 6: by a large job that had waited
    /// `large_job_wait` (`allot::preempt`).
    pub by_long_wait: bool,
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
    /// The part of `demand_log` that is unallocated (`min_runtime=0`) work,
    /// which the contract owes only what allocated work leaves
    /// ([`allot::owed::owed_by_hour_allocated_first`]).
    pub free_demand_log: Vec<Vec<(i64, i64)>>,
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
    /// The same, split by cause (the parts add up to it).
    pub idle_by_cause: IdleByCause,
    /// GPU-seconds held idle by preemptors waiting out their victims' grace time.
    pub claimed_idle: i64,
}

/// GPU-seconds free while jobs waited, by why no waiting job ran on them.
/// Each stretch of time between two events goes wholly to the first cause
/// that holds in it, in this order:
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IdleByCause {
    /// Some waiting job fits the free GPUs now, but the scheduler did not
    /// start it: the backfill reservation (it would delay the job reserved
    /// for), the scan depth, the wait for the next backfill cycle, or, under
    /// baseline, its team's limit.
    pub backfill_limits: i64,
    /// No waiting job fits, but a multi-node job would fit the free GPUs'
    /// number: they are spread over partly used nodes, and such a job takes
    /// whole nodes.
    pub whole_node_rule: i64,
    /// No waiting job fits the free GPUs, whatever their layout: every
    /// waiting job is larger than what is free on any node (and than the
    /// free GPUs' number, for multi-node jobs).
    pub no_job_fits: i64,
}

/// Which field of [`IdleByCause`] a stretch of idle time goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleCause {
    BackfillLimits,
    WholeNodeRule,
    NoJobFits,
}

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
    /// When it last entered the queue (submitted, or eligible after a requeue).
    queued_since: i64,
    /// In the grace time for a preemptor that took its GPUs under rule 6.
    claim_long_wait: bool,
    /// Key in `releases`.
    release_key: Option<(i64, u32)>,
    preemptions: u32,
    end: Option<i64>,
    fate_reason: Option<String>,
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
    /// What happens next.
    queue: EventQueue,
    /// Pending jobs per group, by index into the workload, which is in
    /// (submit, job_id) order: the order of jobs within a group.
    groups: Vec<waiting::WaitingLine>,
    pending: usize,
    /// Expected (release time, job) of every job that holds GPUs.
    releases: BTreeSet<(i64, u32)>,
    window: OccupancyWindow,
    usage: Vec<i64>,
    /// Charged GPUs running per leaf, for the ranking's lookahead.
    running: Vec<i64>,
    /// Allot ranks at every pass: one ranker and one ranking, reused.
    ranker: Ranker,
    ranking: Option<Ranking>,
    group_order_buffer: Vec<usize>,
    /// Allot: `outranks_by` with the tree's partings found once.
    outranking: Option<allot::preempt::Outranking>,
    /// Allot: running allocated jobs past their protection, per leaf.
    unprotected: Vec<BTreeSet<u32>>,
    /// The leaves whose `unprotected` set is not empty (leaf v: bit v; only
    /// leaves below 64 are counted).
    unprotected_leaves: u64,
    unprotected_gpus: Vec<u32>,
    /// Per leaf and priority level: GPUs of `unprotected` runs by minimum
    /// runtime (longest first), for rule 5's count (`same_leaf_gpus`).
    unprotected_by_contract: Vec<[Vec<(i64, u32)>; 3]>,
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
    /// The preemption search's buffers, kept between searches.
    preempt_scratch: PreemptScratch,
    /// Per leaf: (pass, smallest job of the leaf that found no room by
    /// preemption in that pass, its priority and minimum runtime: with
    /// preemption within a team, a job of lower priority or a longer
    /// minimum runtime may take fewer of its teammates' GPUs, never more).
    /// And whether it was a small job (rule 4 without the margin: a small
    /// job may take more than a larger one).
    leaf_fail: Vec<(u64, u32, PriorityLevel, i64, bool)>,
    /// Per (preemption row, may use every node, may take its own leaf's
    /// runs, GPUs needed per node): the (pass, `placements`) at which no
    /// node could be made room on.
    no_candidates: Vec<(u64, u64)>,
    /// Jobs started or preemptions made (what can turn a node that had
    /// room free into one that needs preemption).
    placements: u64,
    /// Per preemption row (waiting leaf, small or not: `row_of`): the leaves
    /// whose unprotected runs its jobs may take (this pass; beyond 64
    /// leaves, else `allowed_bits`).
    allowed_list: Vec<Vec<u32>>,
    /// The same as bits (leaf v: bit v), when there are at most 64 leaves.
    allowed_bits: Vec<u64>,
    backfill_pending: bool,
    changed_since_backfill: bool,
    /// `Config::main_clock`: the main pass queued, if any; the last pass
    /// the clock ran (full or asked for); the time of its first full pass.
    main_pass_at: Option<i64>,
    last_clock_pass: i64,
    clock_origin: i64,
    in_use: u32,
    /// GPUs held by jobs that have not started (preemptors in the grace time).
    claimed: u32,
    idle_while_waiting: i64,
    idle_by_cause: IdleByCause,
    /// Pending jobs by held GPUs, for jobs that may not (`[0]`) and may
    /// (`[1]`) use the small-job nodes: (size, count).
    pending_sizes: [BTreeMap<u32, u32>; 2],
    claimed_idle: i64,
    // Outputs.
    runs: Vec<Run>,
    demand_log: Vec<Vec<(i64, i64)>>,
    free_demand_log: Vec<Vec<(i64, i64)>>,
    delivered_log: Vec<Vec<(i64, i64)>>,
    charged: Vec<i64>,
    max_in_use: u32,
    events: u64,
    passes: u64,
    preempt_searches: u64,
    // Per-pass caches (stamped with the pass number).
    /// Per preemption row: (pass, signature of its allowed leaves) when last computed.
    victim_gpus_cache: Vec<(u64, u64)>,
    /// `allowed[row * leaves + v]`: jobs of preemption row `row` may take
    /// leaf `v`'s unprotected runs (this pass, for the rows `cross_victim_gpus`
    /// filled), when there are more than 64 leaves (else `allowed_bits`).
    allowed: Vec<bool>,
    /// Per node: GPUs of free-for-all runs; unprotected GPUs per leaf
    /// (`[node * leaves + leaf]`) and in all.
    ffa_on: Vec<u32>,
    unprot_on: Vec<u32>,
    unprot_on_total: Vec<u32>,
    /// Per node and leaf, the part of `unprot_on` of priority low and of
    /// normal (rule 5 lets a job take only its teammates' runs of a lower
    /// priority than its own).
    unprot_on_below: Vec<[u32; 2]>,
    /// The same counts as node sets (bit `n % 64` of word `n / 64`), so a
    /// search reads only the nodes where some run it may take is:
    /// `ffa_nodes`: nodes with free-for-all runs; `unprot_nodes[leaf *
    /// words + word]`: with the leaf's unprotected runs; `below_nodes[(leaf
    /// * 2 + level) * words + word]`: with those of priority low or normal.
    ffa_nodes: Vec<u64>,
    unprot_nodes: Vec<u64>,
    below_nodes: Vec<u64>,
    /// Per node, with at most 64 leaves: bit `leaf` set iff the leaf has
    /// unprotected GPUs there (so a search visits only those leaves).
    unprot_leaves_on: Vec<u64>,
    /// Nodes by free GPUs + GPUs of any possible victim: an upper bound of
    /// what preemption could free there.
    reclaim: Buckets,
    extra: Vec<u32>,
    /// The reservation's buffers: nodes whose `extra` it set, nodes that
    /// free up whole.
    reserve_touched: Vec<u32>,
    reserve_whole: Vec<u32>,
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
                queued_since: 0,
                claim_long_wait: false,
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
        // Words of a node set (as `Buckets::words`).
        let node_words = (cfg.cluster.nodes as usize).div_ceil(64);
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
            preempt_scratch: PreemptScratch::default(),
            leaf_fail: vec![(u64::MAX, 0, PriorityLevel::Low, 0, false); leaves],
            no_candidates: vec![(u64::MAX, 0); 2 * leaves * 4 * (cfg.cluster.gpus_per_node as usize + 1)],
            placements: 0,
            allowed_list: vec![Vec::new(); 2 * leaves],
            allowed_bits: vec![0; 2 * leaves],
            jobs,
            nodes: Nodes::with_small_job_nodes(cfg.cluster, cfg.small_job_nodes),
            g: cfg.cluster.gpus_per_node,
            leaves,
            on_node: vec![Vec::new(); cfg.cluster.nodes as usize],
            queue: EventQueue::default(),
            groups: vec![waiting::WaitingLine::default(); n_groups],
            pending: 0,
            releases: BTreeSet::new(),
            window: OccupancyWindow::new(leaves, cfg.tree.settings.lookback, start),
            usage: Vec::with_capacity(leaves),
            running: Vec::with_capacity(leaves),
            ranker: Ranker::new(&cfg.tree),
            ranking: None,
            group_order_buffer: Vec::new(),
            outranking: None,
            unprotected: vec![BTreeSet::new(); leaves],
            unprotected_leaves: 0,
            unprotected_gpus: vec![0; leaves],
            unprotected_by_contract: vec![Default::default(); leaves],
            free_for_all_gpus: 0,
            guaranteed_gpus: vec![0; leaves],
            limit,
            growth: 0,
            backfill_pending: false,
            changed_since_backfill: false,
            main_pass_at: None,
            last_clock_pass: i64::MIN / 2,
            // Where slurmctld's full passes fall is unknown (they count
            // from its start): one comes at the tick after the first
            // submission, as likely as any other phase.
            clock_origin: workload.jobs.first().map_or(0, |j| j.submit + 1),
            in_use: 0,
            claimed: 0,
            idle_while_waiting: 0,
            idle_by_cause: IdleByCause::default(),
            pending_sizes: [BTreeMap::new(), BTreeMap::new()],
            claimed_idle: 0,
            runs: Vec::new(),
            demand_log: vec![Vec::new(); leaves],
            free_demand_log: vec![Vec::new(); leaves],
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
            unprot_on_below: vec![[0; 2]; cfg.cluster.nodes as usize * leaves],
            ffa_nodes: vec![0; node_words],
            unprot_nodes: vec![0; leaves * node_words],
            below_nodes: vec![0; leaves * 2 * node_words],
            unprot_leaves_on: vec![0; cfg.cluster.nodes as usize],
            reclaim: Buckets::new(cfg.cluster.nodes, cfg.cluster.gpus_per_node, cfg.cluster.gpus_per_node),
            extra: vec![0; cfg.cluster.nodes as usize],
            reserve_touched: Vec::new(),
            reserve_whole: Vec::new(),
        }
    }

    /// Runs to the end; `progress(now)` is called now and then.
    pub fn run(mut self, progress: &mut dyn FnMut(i64)) -> Outcome {
        let start = self.workload.jobs.first().map_or(0, |j| j.submit);
        let horizon = self.cfg.horizon.unwrap_or(i64::MAX);
        let mut now = start;
        while let Some(t) = self.queue.peek_time(self.workload) {
            if t > horizon {
                break;
            }
            if self.pending > 0 && self.nodes.free_total() > 0 {
                let idle = self.nodes.free_total() as i64 * (t - now);
                self.idle_while_waiting += idle;
                match self.idle_cause() {
                    IdleCause::BackfillLimits => self.idle_by_cause.backfill_limits += idle,
                    IdleCause::WholeNodeRule => self.idle_by_cause.whole_node_rule += idle,
                    IdleCause::NoJobFits => self.idle_by_cause.no_job_fits += idle,
                }
            }
            self.claimed_idle += self.claimed as i64 * (t - now);
            now = t;
            let mut dirty = false;
            let mut backfill = false;
            while self.queue.peek_time(self.workload) == Some(now) {
                let (_, kind, job, run) = self.queue.pop(self.workload).expect("peeked");
                self.events += 1;
                if self.events.is_multiple_of(8192) {
                    progress(now);
                }
                if kind == EventKind::Backfill {
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
                self.queue.push(now + self.cfg.bf_interval.max(1), EventKind::Backfill, 0, 0);
            }
            if self.stuck() {
                break;
            }
        }
        let end = if self.cfg.horizon.is_some() { horizon.max(now) } else { now };
        self.finish(start, end)
    }

    /// Why the free GPUs are idle while jobs wait (see [`IdleByCause`]).
    /// Fitting is monotone in size, so the smallest waiting jobs decide.
    fn idle_cause(&self) -> IdleCause {
        let g = self.g;
        let mut spread = false;
        for all in [false, true] {
            let sizes = &self.pending_sizes[usize::from(all)];
            if let Some((&one_node, _)) = sizes.range(..=g).next() {
                if self.nodes.fits_one_for(one_node, all) {
                    return IdleCause::BackfillLimits;
                }
            }
            if let Some((&multi, _)) = sizes.range(g + 1..).next() {
                if self.nodes.whole_free_for(all) >= multi / g {
                    return IdleCause::BackfillLimits;
                }
                spread |= multi <= self.nodes.free_total_for(all);
            }
        }
        if spread {
            IdleCause::WholeNodeRule
        } else {
            IdleCause::NoJobFits
        }
    }

    /// Nothing runs, nothing will happen but backfill passes, and jobs still wait:
    /// they can never start (cannot happen with valid input; a guard).
    fn stuck(&self) -> bool {
        self.pending > 0 && self.releases.is_empty() && !self.queue.has_work(self.workload)
    }

    /// Applies one event; whether a pass should follow.
    fn apply(&mut self, now: i64, kind: EventKind, j: u32, run: u32) -> bool {
        match kind {
            EventKind::Submit => {
                let ju = j as usize;
                if self.jobs[ju].status == Status::Refused {
                    return false;
                }
                self.log_demand(j, now, 1);
                self.enqueue(j, now);
                self.main_pass_after(now, true)
            }
            EventKind::Requeue => {
                if self.jobs[j as usize].status == Status::Future && self.jobs[j as usize].run_no == run {
                    self.enqueue(j, now);
                }
                self.main_pass_after(now, false)
            }
            EventKind::MainPass => {
                if self.main_pass_at != Some(now) {
                    return false; // superseded by an earlier one
                }
                self.main_pass_at = None;
                self.last_clock_pass = now;
                true
            }
            EventKind::Release => {
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
            EventKind::StartClaimed => {
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
            EventKind::ProtectionEnd => {
                let job = &self.jobs[j as usize];
                if job.run_no != run || job.status != Status::Running || !job.contract.is_allocated() || job.unprotected {
                    return false;
                }
                self.book_unprotected(j, true);
                self.growth += 1;
                self.main_pass_after(now, false)
            }
            EventKind::LongWait => {
                // Still waiting since then (not started, nor requeued since).
                let job = &self.jobs[j as usize];
                job.status == Status::Pending && job.run_no == run && self.main_pass_after(now, false)
            }
            EventKind::Backfill => unreachable!("backfill cycles are handled by the loop"),
        }
    }

    /// After an event that frees no GPUs: whether the main scheduler runs
    /// at once (no `main_clock`), else queues its next pass as slurmctld's
    /// clock would run it (see [`MainClock`]; `asked`: a submission, which
    /// asks for a pass within `batch_sched_delay`) and says no.
    fn main_pass_after(&mut self, now: i64, asked: bool) -> bool {
        let Some(clock) = self.cfg.main_clock else { return true };
        // The background loop's next tick is after this second.
        let tick = now + 1;
        let full = clock.next_full(self.clock_origin, tick);
        let at = if asked {
            let last = self.last_clock_pass.max(clock.last_full(self.clock_origin, now).unwrap_or(i64::MIN / 2));
            full.min(tick.max(last + clock.batch_sched_delay))
        } else {
            full
        };
        if self.main_pass_at.is_none_or(|t| at < t) {
            self.main_pass_at = Some(at);
            self.queue.push(at, EventKind::MainPass, 0, 0);
        }
        false
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
        let mut closing = Vec::new();
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
                closing.push(i as u32);
            }
            out_jobs.push(JobOutcome {
                fate,
                first_start: job.first_start,
                end: job.end.or(Some(end).filter(|_| job.status != Status::Refused)),
                preemptions: job.preemptions,
            });
        }
        for j in closing {
            self.log_demand(j, end, -1);
        }
        for log in self.demand_log.iter_mut().chain(&mut self.free_demand_log) {
            // Horizon closings were appended last; keep every log in time order.
            log.sort_by_key(|&(t, _)| t);
        }
        Outcome {
            policy: self.cfg.policy,
            prepared: self.prepared,
            runs: self.runs,
            jobs: out_jobs,
            demand_log: self.demand_log,
            free_demand_log: self.free_demand_log,
            delivered_log: self.delivered_log,
            charged: self.charged,
            max_gpus_in_use: self.max_in_use,
            start,
            end,
            events: self.events,
            passes: self.passes,
            preempt_searches: self.preempt_searches,
            idle_while_waiting: self.idle_while_waiting,
            idle_by_cause: self.idle_by_cause,
            claimed_idle: self.claimed_idle,
        }
    }
}
