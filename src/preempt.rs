//! Who may preempt whom: the scheduling contract.
//!
//! [`may_preempt`] applies, in order:
//! 1. an unallocated waiting job (`min_runtime=0`) never preempts;
//! 2. an unallocated running job may be preempted by any allocated job;
//! 3. an allocated running job is protected until its minimum runtime has
//!    elapsed (counted from the start of its current run);
//! 4. after that, a job of **another leaf** preempts it only if its
//!    allocation is over-served compared with the waiting job's by more
//!    than the **anti-thrash margin**: at the level where their paths in the
//!    budget tree part, the running side's ratio (occupancy / allocation)
//!    must exceed the waiting side's by more than `preempt_margin` (default
//!    0.1, a tenth of an allocation). A **small job** (at most
//!    `small_job_gpus` GPUs, default 8, and a minimum runtime of at most
//!    `small_job_min_runtime`, default 30 minutes) needs no margin: the
//!    running side's ratio must only exceed its own;
//! 5. a job of the **same leaf** preempts it only if the waiting job's
//!    declared priority is strictly higher (low < normal < high) **and** the
//!    waiting job declares a minimum runtime no longer than the running
//!    job's (`preempt_within_team`, on by default; off: jobs of the same
//!    leaf never preempt each other);
//! 6. a **long-waiting large job** (allocated, more than `small_job_gpus`
//!    GPUs, queued for at least `large_job_wait`, off by default, of a leaf
//!    that has used less than its share over the window) needs no margin in
//!    rule 4, as a small job, from a running job that has run at least the
//!    waiting job's own minimum runtime too. It keeps its place in the order.
//!
//! Why rule 6: a job of many GPUs needs whole nodes free at one moment.
//! Runs end and start at different times, and rule 4 asks every run on
//! those nodes to be past its guarantee and of a leaf above the waiting one
//! by the margin at that moment: at sustained load such a job can wait for
//! days while its budget is under its share (fragmentation), and GPUs idle
//! while the nodes it waits for drain. Without the margin, after a long
//! wait, the nodes where every run is past its guarantee and of a leaf
//! above its own are enough more often (Slurm's node selection with
//! preemption picks them). No run loses its minimum runtime, the job pays
//! for what it gets, and a budget over its share gets nothing from the
//! rule. Its anti-thrash part: a run taken by rule 6 has run at least the
//! taker's minimum runtime, so a requeued run is not taken again within
//! the guarantee of the job that would take it, and two large jobs of
//! leaves under their shares take turns no faster than their guarantees.
//!
//! Why a margin: two teams with equal shares trade places in the order as
//! soon as one of them runs a little more. Without a margin each would
//! preempt the other every time a minimum runtime ends. With it, the team
//! that is running keeps its GPUs until it is a tenth of an allocation
//! ahead, which over a 7-day window takes many hours of full use.
//!
//! Why rule 5: after its minimum runtime a job keeps running only while its
//! allocation still puts it ahead of the waiting work. Inside one leaf that
//! order is the declared priority, and the budget charged is the same
//! either way: a team's high-priority debug job taking the GPUs of the same
//! team's normal-priority training job past its minimum runtime is the team
//! spending its own budget as it declared. Rule 5's anti-thrash part is
//! stateless (only the two jobs and `now`, so a Slurm plugin asked about one
//! pair with no history answers the same):
//! - strictly higher priority: a job never takes the GPUs of a teammate of
//!   its own or a higher priority, so two jobs of one leaf can never take
//!   turns preempting each other (the victim can never preempt back);
//! - no longer a guarantee than the victim's: the victim has run at least
//!   its own minimum runtime, hence at least the preemptor's. A job is then
//!   never preempted twice by its teammates within the minimum runtime of
//!   the job that preempted it first (its next run is protected that long),
//!   and a long-protected high-priority job cannot evict a teammate that
//!   promised to yield sooner than it will.
//!
//! Why no margin for small jobs: the margin stops two large allocations from
//! trading GPUs back and forth each time a minimum runtime ends. A small
//! job's GPUs and guarantee are too small to reverse the order it relies on
//! (a GPU for 30 minutes moves a share of a few GPUs over a 7-day window by
//! thousandths), and its victim has had its whole minimum runtime, its next
//! run protected again. Without this rule a debug job waits whenever its
//! own team has nothing past its minimum runtime and every team sits within
//! the margin of its share, which at sustained load is most of the time.
//! What the rule costs is the victims' work since their last checkpoint;
//! the simulator reports it (GPU-hours lost).
//!
//! [`victim_order`] ranks the running jobs offered up for preemption (Slurm's
//! preempt `PRIO`, lowest first) from each job alone, since Slurm asks it
//! without naming the preemptor: unallocated jobs, then the jobs holding
//! the fewest GPUs (a small preemptor takes a partial node's small job
//! before a whole node's large one), then the lowest-ranked leaf.

use std::fmt;

use crate::budget::{ClusterSettings, LeafId, NodeId};
use crate::contract::{Contract, PriorityLevel};
use crate::fairshare::{percent_of_share, Ranking};
use crate::UnixTime;

/// A job that holds GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningJob {
    /// `None`: the job charges no budget (an account outside the tree).
    pub leaf: Option<LeafId>,
    pub contract: Contract,
    /// Start of the current run (a requeued job starts afresh).
    pub run_start: UnixTime,
}

impl RunningJob {
    /// Charged and protected.
    pub fn is_allocated(&self) -> bool {
        self.leaf.is_some() && self.contract.is_allocated()
    }

    /// When the job's protection ends (its start, if it has none).
    pub fn protected_until(&self) -> UnixTime {
        if self.is_allocated() {
            self.run_start.saturating_add(self.contract.min_runtime)
        } else {
            self.run_start
        }
    }

    /// Whether a job on a draining node should be requeued now: as soon as
    /// its protection ends, not before.
    pub fn drain_due(&self, now: UnixTime) -> bool {
        now >= self.protected_until()
    }
}

/// A job that wants GPUs held by others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingJob {
    pub leaf: Option<LeafId>,
    pub contract: Contract,
    /// The most GPUs it can be given (all nodes together): what decides
    /// whether it is small, so a request that may grow counts as its largest.
    pub gpus: u32,
    /// Since when it waits (Slurm: its eligible time), for rule 6; `None`:
    /// not known, never a long wait.
    pub queued_since: Option<UnixTime>,
}

impl WaitingJob {
    pub fn is_allocated(&self) -> bool {
        self.leaf.is_some() && self.contract.is_allocated()
    }
}

/// Which of the switchable rules apply: the budget's `[cluster]` settings
/// `preempt_within_team`, `preempt_smallest_first`, `small_job_gpus` and
/// `small_job_min_runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptRules {
    /// Rule 5 of [`may_preempt`]: within a leaf, by declared priority.
    pub within_team: bool,
    /// [`victim_order`]: the fewest GPUs first (off: [`preemption_order`]).
    pub smallest_first: bool,
    /// Rule 4 for small jobs: a waiting job of at most this many GPUs...
    /// (0: no job is small; every job needs the margin).
    pub small_job_gpus: u32,
    /// ... and a minimum runtime of at most this many seconds needs no margin.
    pub small_job_min_runtime: i64,
    /// Rule 6: a larger job waiting this long (seconds; 0: never) of a leaf
    /// under its share may preempt any job past its minimum runtime.
    pub large_job_wait: i64,
}

impl Default for PreemptRules {
    fn default() -> Self {
        PreemptRules::from_settings(&ClusterSettings::default())
    }
}

impl PreemptRules {
    pub fn from_settings(s: &ClusterSettings) -> PreemptRules {
        PreemptRules {
            within_team: s.preempt_within_team,
            smallest_first: s.preempt_smallest_first,
            small_job_gpus: s.small_job_gpus,
            small_job_min_runtime: s.small_job_min_runtime,
            large_job_wait: s.large_job_wait,
        }
    }

    /// Whether rule 6 applies to `job` at `now`: allocated, more GPUs than a
    /// small job, waiting at least `large_job_wait` (when that is above 0),
    /// and its leaf has used less than its share over the window.
    pub fn is_long_waiting(&self, job: &WaitingJob, now: UnixTime, ranking: &Ranking) -> bool {
        self.large_job_wait > 0
            && job.is_allocated()
            && job.gpus > self.small_job_gpus
            && job.queued_since.is_some_and(|since| now.saturating_sub(since) >= self.large_job_wait)
            && job.leaf.is_some_and(|leaf| (leaf as usize) < ranking.leaves() && under_share(ranking, leaf))
    }

    /// Whether `job` is a small job (rule 4 without the margin): allocated,
    /// at most `small_job_gpus` GPUs and a minimum runtime of at most
    /// `small_job_min_runtime`.
    pub fn is_small(&self, job: &WaitingJob) -> bool {
        job.is_allocated() && job.gpus <= self.small_job_gpus && job.contract.min_runtime <= self.small_job_min_runtime
    }

    /// Whether `job` may run on the nodes kept for small jobs (a cluster's
    /// small-job nodes: Slurm partition `SmallJobPartition` of allot.conf,
    /// `allot simulate --small-job-nodes`): a small job, or an unallocated
    /// one, which any allocated job may take at once. Everything else would
    /// hold those GPUs under a guarantee longer than a small job's.
    pub fn may_use_small_job_nodes(&self, job: &WaitingJob) -> bool {
        !job.contract.is_allocated() || self.is_small(job)
    }

    /// The margin rule 4 asks of `job` against another leaf's running job.
    pub fn margin_for(&self, job: &WaitingJob, ranking: &Ranking) -> f64 {
        if self.is_small(job) {
            0.0
        } else {
            ranking.preempt_margin
        }
    }
}

/// The outcome of [`may_preempt`], with the numbers behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PreemptDecision {
    /// The running job is unallocated and the waiting job is allocated.
    YesUnallocated,
    /// The running job's allocation is over-served by more than the margin.
    YesOutranked(Comparison),
    /// Unallocated jobs never preempt.
    NoPreemptorUnallocated,
    /// The running job is inside its minimum runtime.
    NoProtected { until: UnixTime },
    /// Both jobs charge the same leaf (and rule 5 is off, or the leaf is
    /// unknown to the ranking).
    NoSameAllocation,
    /// Same leaf: the waiting job declares a strictly higher priority and no
    /// longer a minimum runtime than the running one, which is past its own.
    YesHigherPriority { preemptee: PriorityLevel, preemptor: PriorityLevel },
    /// Same leaf: the waiting job's declared priority is not strictly higher.
    NoSameLeafNotHigher { preemptee: PriorityLevel, preemptor: PriorityLevel },
    /// Same leaf: the waiting job declares a longer minimum runtime than the
    /// running job did (rule 5's anti-thrash part).
    NoSameLeafLongerGuarantee { preemptee_min_runtime: i64, preemptor_min_runtime: i64 },
    /// The running job's allocation is not far enough above the waiting one's.
    NoNotOutranked(Comparison),
    /// Rule 6: the waiting job is large and has waited `waited` seconds (at
    /// least `large_job_wait`) while its allocation was under its share; the
    /// running job's allocation is above it (no margin: `comparison.margin`
    /// is 0), and the running job has run at least both jobs' minimum
    /// runtimes.
    YesLongWait { waited: i64, comparison: Comparison },
}

/// Two allocations compared where their paths part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// The running job's side.
    pub preemptee_node: NodeId,
    pub preemptee_ratio: f64,
    /// The waiting job's side.
    pub preemptor_node: NodeId,
    pub preemptor_ratio: f64,
    /// The margin asked: the ranking's, or 0 for a small job.
    pub margin: f64,
}

impl PreemptDecision {
    pub fn allowed(&self) -> bool {
        matches!(
            self,
            PreemptDecision::YesUnallocated
                | PreemptDecision::YesOutranked(_)
                | PreemptDecision::YesHigherPriority { .. }
                | PreemptDecision::YesLongWait { .. }
        )
    }
}

impl fmt::Display for PreemptDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreemptDecision::YesUnallocated => write!(f, "the running job is unallocated (min_runtime=0) and an allocated job needs its GPUs"),
            PreemptDecision::YesOutranked(c) if c.margin == 0.0 => write!(
                f,
                "its allocation has used {} of its share in the window, the waiting job's {}, and the waiting job is small (no margin)",
                percent_of_share(c.preemptee_ratio),
                percent_of_share(c.preemptor_ratio)
            ),
            PreemptDecision::YesOutranked(c) => write!(
                f,
                "its allocation has used {} of its share in the window, the waiting job's {}: more than the margin of {} of a share apart",
                percent_of_share(c.preemptee_ratio),
                percent_of_share(c.preemptor_ratio),
                percent_of_share(c.margin)
            ),
            PreemptDecision::NoPreemptorUnallocated => write!(f, "an unallocated job (min_runtime=0) never preempts"),
            PreemptDecision::NoProtected { until } => write!(f, "the running job is inside its minimum runtime until {until}"),
            PreemptDecision::NoSameAllocation => write!(f, "both jobs charge the same budget"),
            PreemptDecision::YesHigherPriority { preemptee, preemptor } => write!(
                f,
                "same budget: the waiting job declares priority {} above the running job's {}, and the running job is past its minimum runtime",
                preemptor.as_str(),
                preemptee.as_str()
            ),
            PreemptDecision::NoSameLeafNotHigher { preemptee, preemptor } => {
                write!(f, "same budget: the waiting job's priority {} is not above the running job's {}", preemptor.as_str(), preemptee.as_str())
            }
            PreemptDecision::NoSameLeafLongerGuarantee { preemptee_min_runtime, preemptor_min_runtime } => write!(
                f,
                "same budget: the waiting job declares a longer minimum runtime ({preemptor_min_runtime} s) than the running job's ({preemptee_min_runtime} s)"
            ),
            PreemptDecision::NoNotOutranked(c) => write!(
                f,
                "its allocation has used {} of its share, the waiting job's {}: not more than the margin of {} of a share apart",
                percent_of_share(c.preemptee_ratio),
                percent_of_share(c.preemptor_ratio),
                percent_of_share(c.margin)
            ),
            PreemptDecision::YesLongWait { waited, comparison: c } => write!(
                f,
                "its allocation has used {} of its share in the window, the waiting job's {}, and the waiting job is large and has waited {} (no margin), \
                 and the running job has run at least both jobs' minimum runtimes",
                percent_of_share(c.preemptee_ratio),
                percent_of_share(c.preemptor_ratio),
                crate::duration::format_duration(*waited)
            ),
        }
    }
}

/// Whether `preemptor` may take `preemptee`'s GPUs at `now`, under the
/// default rules ([`PreemptRules::default`]: rule 5 on). Callers that read a
/// budget use [`may_preempt_with`] and the budget's settings.
pub fn may_preempt(preemptee: &RunningJob, preemptor: &WaitingJob, now: UnixTime, ranking: &Ranking) -> PreemptDecision {
    may_preempt_with(preemptee, preemptor, now, ranking, PreemptRules::default())
}

/// Whether `preemptor` may take `preemptee`'s GPUs at `now` (rules 1 to 5
/// of the module's documentation; rule 5 only if `rules.within_team`; no
/// margin in rule 4 for a small preemptor, [`PreemptRules::is_small`]). The
/// answer depends on the two jobs, `now` and the ranking alone.
pub fn may_preempt_with(preemptee: &RunningJob, preemptor: &WaitingJob, now: UnixTime, ranking: &Ranking, rules: PreemptRules) -> PreemptDecision {
    if !preemptor.is_allocated() {
        return PreemptDecision::NoPreemptorUnallocated;
    }
    if !preemptee.is_allocated() {
        return PreemptDecision::YesUnallocated;
    }
    let until = preemptee.protected_until();
    if now < until {
        return PreemptDecision::NoProtected { until };
    }
    // Both allocated, so both have leaves.
    let (Some(victim), Some(waiting)) = (preemptee.leaf, preemptor.leaf) else {
        return PreemptDecision::NoSameAllocation;
    };
    if victim == waiting {
        return if rules.within_team { within_team(&preemptee.contract, &preemptor.contract) } else { PreemptDecision::NoSameAllocation };
    }
    let decision = outranks_by(victim, waiting, ranking, rules.margin_for(preemptor, ranking));
    if !decision.allowed() && rules.is_long_waiting(preemptor, now, ranking) && long_wait_victim(preemptee, preemptor, now) {
        if let PreemptDecision::YesOutranked(c) = outranks_by(victim, waiting, ranking, 0.0) {
            return PreemptDecision::YesLongWait { waited: now - preemptor.queued_since.unwrap_or(now), comparison: c };
        }
    }
    decision
}

/// Rule 5 of [`may_preempt`] alone: may an allocated job with contract
/// `waiting` take the GPUs of an allocated job of the same leaf with
/// contract `victim` that is past its minimum runtime?
pub fn within_team(victim: &Contract, waiting: &Contract) -> PreemptDecision {
    if waiting.priority <= victim.priority {
        return PreemptDecision::NoSameLeafNotHigher { preemptee: victim.priority, preemptor: waiting.priority };
    }
    if waiting.min_runtime > victim.min_runtime {
        return PreemptDecision::NoSameLeafLongerGuarantee { preemptee_min_runtime: victim.min_runtime, preemptor_min_runtime: waiting.min_runtime };
    }
    PreemptDecision::YesHigherPriority { preemptee: victim.priority, preemptor: waiting.priority }
}

/// Rule 4 of [`may_preempt`] alone, with the ranking's margin: may an
/// allocated job of leaf `waiting` take the GPUs of an allocated, no longer
/// protected job of leaf `victim`? Past protection the answer depends only
/// on the two leaves (and whether the waiting job is small: [`outranks_by`]
/// with [`PreemptRules::margin_for`]), so a caller deciding for many jobs at
/// once (the simulator) asks once per leaf pair.
pub fn outranks(victim: LeafId, waiting: LeafId, ranking: &Ranking) -> PreemptDecision {
    outranks_by(victim, waiting, ranking, ranking.preempt_margin)
}

/// [`outranks`] with the margin given.
pub fn outranks_by(victim: LeafId, waiting: LeafId, ranking: &Ranking, margin: f64) -> PreemptDecision {
    if victim as usize >= ranking.leaves() || waiting as usize >= ranking.leaves() {
        // A leaf this ranking does not know (the budget just changed): keep
        // the running job until the next ranking says otherwise.
        return PreemptDecision::NoSameAllocation;
    }
    let Some((victim_node, waiting_node)) = ranking.divergence(victim, waiting) else {
        return PreemptDecision::NoSameAllocation;
    };
    let c = Comparison {
        preemptee_node: victim_node,
        preemptee_ratio: ranking.standings[victim_node as usize].ratio,
        preemptor_node: waiting_node,
        preemptor_ratio: ranking.standings[waiting_node as usize].ratio,
        margin,
    };
    if parting_allows(ranking, (victim_node, waiting_node), margin) {
        PreemptDecision::YesOutranked(c)
    } else {
        PreemptDecision::NoNotOutranked(c)
    }
}

/// Rule 6's anti-thrash part: a run it takes is past its protection and
/// has run at least the waiting job's own minimum runtime too, so a run
/// that was preempted and restarted is never taken again within the
/// guarantee of the job that would take it (stateless: the two jobs and
/// `now`).
pub fn long_wait_victim(preemptee: &RunningJob, preemptor: &WaitingJob, now: UnixTime) -> bool {
    now >= preemptee.protected_until() && now >= preemptee.run_start.saturating_add(preemptor.contract.min_runtime)
}

/// Whether `leaf` has used less than its share over the window (rule 6).
pub fn under_share(ranking: &Ranking, leaf: LeafId) -> bool {
    ranking.standings[ranking.node_of(leaf) as usize].ratio < 1.0
}

/// Rule 4 at the two sibling nodes where the victim's and the waiting
/// job's paths part: the victim's side is over-used by more than `margin`
/// beyond the waiting side.
fn parting_allows(ranking: &Ranking, (victim_node, waiting_node): (NodeId, NodeId), margin: f64) -> bool {
    ranking.standings[victim_node as usize].ratio - ranking.standings[waiting_node as usize].ratio > margin
}

/// [`outranks_by`] for many questions under successive rankings of one
/// budget tree: where two leaves' paths part depends on the tree alone, so
/// it is found once per pair of leaves (the simulator asks at every pass).
#[derive(Debug, Clone)]
pub struct Outranking {
    leaves: usize,
    /// Per (victim, waiting): the two nodes just below their common ancestor.
    parting: Vec<Option<(NodeId, NodeId)>>,
    /// With at most 64 leaves, per waiting leaf: its distinct partings
    /// (victim's side, waiting's side) and the victim leaves (bit per leaf)
    /// each decides for. Fewer comparisons than leaves: one per sibling.
    by_waiting: Vec<Vec<(NodeId, NodeId, u64)>>,
}

impl Outranking {
    /// For rankings of the tree `ranking` is of.
    pub fn new(ranking: &Ranking) -> Outranking {
        let leaves = ranking.leaves();
        let parting: Vec<Option<(NodeId, NodeId)>> = (0..leaves * leaves).map(|i| ranking.divergence((i / leaves) as LeafId, (i % leaves) as LeafId)).collect();
        let mut by_waiting = Vec::new();
        if leaves <= 64 {
            for w in 0..leaves {
                let mut partings: Vec<(NodeId, NodeId, u64)> = Vec::new();
                for v in 0..leaves {
                    if let Some((vn, wn)) = parting[v * leaves + w] {
                        match partings.iter_mut().find(|p| (p.0, p.1) == (vn, wn)) {
                            Some(p) => p.2 |= 1 << v,
                            None => partings.push((vn, wn, 1 << v)),
                        }
                    }
                }
                by_waiting.push(partings);
            }
        }
        Outranking { leaves, parting, by_waiting }
    }

    /// [`Outranking::allowed`] for every victim leaf at once, as bits (leaf
    /// v: bit v), for a ranking of the same tree of at most 64 leaves;
    /// `None` otherwise.
    #[inline] // asked by the simulator at every pass, from another crate
    pub fn allowed_mask(&self, waiting: LeafId, ranking: &Ranking, margin: f64) -> Option<u64> {
        let partings = self.by_waiting.get(waiting as usize).filter(|_| ranking.leaves() == self.leaves)?;
        let mut mask = 0;
        for &(vn, wn, victims) in partings {
            if parting_allows(ranking, (vn, wn), margin) {
                mask |= victims;
            }
        }
        Some(mask)
    }

    /// `outranks_by(victim, waiting, ranking, margin).allowed()`, for a
    /// ranking of the same tree (of another size, it asks `outranks_by`).
    pub fn allowed(&self, victim: LeafId, waiting: LeafId, ranking: &Ranking, margin: f64) -> bool {
        let (v, w) = (victim as usize, waiting as usize);
        if v >= self.leaves || w >= self.leaves || ranking.leaves() != self.leaves {
            return outranks_by(victim, waiting, ranking, margin).allowed();
        }
        self.parting[v * self.leaves + w].is_some_and(|parting| parting_allows(ranking, parting, margin))
    }
}

/// The order in which running jobs are offered up for preemption, lowest
/// first (Slurm's preempt `PRIO`): unallocated jobs, then allocated jobs
/// from the lowest-ranked leaf up.
#[inline] // asked by the simulator at every pass, from another crate
pub fn preemption_order(job: &RunningJob, ranking: &Ranking) -> u32 {
    let leaves = ranking.leaves() as u32;
    let rank = job.leaf.and_then(|l| ranking.leaf_rank.get(l as usize)).copied().unwrap_or(leaves);
    let from_bottom = leaves.saturating_sub(rank);
    if job.is_allocated() {
        leaves + 1 + from_bottom
    } else {
        from_bottom
    }
}

/// Time from the preemption signal to the kill for `job` (Slurm's
/// `GraceTime`, asked per victim): `unallocated_grace` (default 0) for an
/// unallocated job, never more than `grace`; `grace` for every other job.
///
/// Why: an unallocated job was promised nothing, and it runs on GPUs that
/// allocated work is waiting for. With the full grace time every small job
/// that takes a free-running job's GPUs waits the grace time (5 minutes by
/// default) for them, although the job it displaces would lose no more than
/// its work since its last checkpoint.
pub fn grace_for(job: &RunningJob, settings: &ClusterSettings) -> i64 {
    let grace = settings.grace.max(0);
    if job.is_allocated() {
        grace
    } else {
        settings.unallocated_grace.clamp(0, grace)
    }
}

/// The order in which running jobs are offered up for preemption, lowest
/// first (Slurm's preempt `PRIO`), from the job alone: `gpus` is what it
/// holds, `resumable` whether a kill requeues it (Slurm: requeue allowed)
/// rather than cancelling it. With `rules.smallest_first`: unallocated jobs,
/// then allocated resumable jobs, then allocated jobs that a kill cancels;
/// within each, the fewest GPUs first (on nodes of G GPUs, a job of fewer
/// than G sits on a partial node: partial nodes go before whole ones), then
/// the lowest-ranked leaf. Without: [`preemption_order`].
///
/// Why: a preemptor needs only the GPUs it asked for, and what a kill
/// loses is the victim's GPUs times its work since its last checkpoint:
/// all of its run if it cannot resume. A small waiting job (a debug job)
/// that takes a small resumable victim leaves the large jobs running and
/// costs little. A large preemptor still gets what it needs: it takes
/// victims in this order until it has enough (a whole-node job takes whole
/// nodes anyway).
#[inline] // asked by the simulator at every pass, from another crate
pub fn victim_order(job: &RunningJob, gpus: u32, resumable: bool, ranking: &Ranking, rules: PreemptRules) -> u32 {
    if !rules.smallest_first {
        return preemption_order(job, ranking);
    }
    let leaves = ranking.leaves() as u32;
    let rank = job.leaf.and_then(|l| ranking.leaf_rank.get(l as usize)).copied().unwrap_or(leaves);
    let from_bottom = leaves.saturating_sub(rank).min(0xffff);
    let size = gpus.min(0x3fff);
    let class = match (job.is_allocated(), resumable) {
        (false, _) => 0,
        (true, true) => 1,
        (true, false) => 2,
    };
    class << 30 | size << 16 | from_bottom
}

/// How many nodes allot's shipped layout keeps for small jobs on a cluster
/// of `nodes`: one per 100 nodes or part of it, none on a single node (the
/// others need somewhere to run). One node of 32 brings every team's
/// debug p90 under 30 s in the debug-under-overload class, and one of 75
/// does the same on the documented month, where two or three cost the
/// large jobs more and gain little (docs/src/admin/small-jobs.md); `allot simulate` models it
/// unless told `--small-job-nodes`, and conf/allot.conf names the
/// partition that holds them.
pub fn shipped_small_job_nodes(nodes: u32) -> u32 {
    if nodes < 2 {
        0
    } else {
        nodes.div_ceil(100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetTree;
    use crate::contract::PriorityLevel;

    #[test]
    fn the_shipped_layout_keeps_one_node_per_100_and_at_least_one() {
        let kept: Vec<u32> = [1, 2, 4, 32, 75, 100, 101, 1000].iter().map(|&n| shipped_small_job_nodes(n)).collect();
        assert_eq!(kept, [0, 1, 1, 1, 1, 1, 2, 10]);
    }

    fn tree() -> BudgetTree {
        BudgetTree::parse(
            "[cluster]\nlookback=\"10h\"\npreempt_margin=0.1\n[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n",
        )
        .unwrap()
    }

    fn contract(min_runtime: i64) -> Contract {
        Contract { min_runtime, priority: PriorityLevel::Normal }
    }

    #[test]
    fn the_contract_in_order() {
        let t = tree();
        let h = 3600;
        // 1 GPU, 10 h window: each team owns 5 GPU-hours. a used 4, b 1.
        let r = Ranking::compute(&t, &[4 * h, h], 1, 100 * h);
        let a_running = RunningJob { leaf: Some(0), contract: contract(2 * h), run_start: 97 * h };
        let b_waiting = WaitingJob { leaf: Some(1), contract: contract(h), gpus: 8, queued_since: None };
        let free_waiting = WaitingJob { leaf: Some(1), contract: contract(0), gpus: 8, queued_since: None };
        let free_running = RunningJob { leaf: Some(1), contract: contract(0), run_start: 99 * h };

        assert_eq!(may_preempt(&a_running, &free_waiting, 100 * h, &r), PreemptDecision::NoPreemptorUnallocated);
        assert_eq!(may_preempt(&free_running, &b_waiting, 100 * h, &r), PreemptDecision::YesUnallocated);
        assert_eq!(may_preempt(&a_running, &b_waiting, 98 * h, &r), PreemptDecision::NoProtected { until: 99 * h });
        // a: 0.8, b: 0.2, margin 0.1.
        assert!(may_preempt(&a_running, &b_waiting, 100 * h, &r).allowed());
        // The other way round: b is under-served, a may not take its GPUs.
        let b_running = RunningJob { leaf: Some(1), contract: contract(h), run_start: 0 };
        let a_waiting = WaitingJob { leaf: Some(0), contract: contract(h), gpus: 8, queued_since: None };
        assert!(matches!(may_preempt(&b_running, &a_waiting, 100 * h, &r), PreemptDecision::NoNotOutranked(_)));
        // Same leaf, same priority: never (rule 5 or not).
        let a_waiting_too = WaitingJob { leaf: Some(0), contract: contract(h), gpus: 8, queued_since: None };
        let off = PreemptRules { within_team: false, ..PreemptRules::default() };
        assert_eq!(may_preempt_with(&a_running, &a_waiting_too, 100 * h, &r, off), PreemptDecision::NoSameAllocation);
        assert!(matches!(may_preempt(&a_running, &a_waiting_too, 100 * h, &r), PreemptDecision::NoSameLeafNotHigher { .. }));
        // Within the margin: a 0.54, b 0.46.
        let close = Ranking::compute(&t, &[27 * h / 10, 23 * h / 10], 1, 100 * h);
        assert!(!may_preempt(&a_running, &b_waiting, 100 * h, &close).allowed());
    }

    #[test]
    fn within_a_team_by_declared_priority() {
        let t = tree();
        let h = 3600;
        let r = Ranking::compute(&t, &[h, h], 1, 100 * h);
        let at = |m: i64, p: PriorityLevel| Contract { min_runtime: m, priority: p };
        use PriorityLevel::*;
        let training = RunningJob { leaf: Some(0), contract: at(2 * h, Normal), run_start: 97 * h };
        let debug = WaitingJob { leaf: Some(0), contract: at(600, High), gpus: 8, queued_since: None };
        // Inside the victim's minimum runtime: no.
        assert_eq!(may_preempt(&training, &debug, 98 * h, &r), PreemptDecision::NoProtected { until: 99 * h });
        // Past it, strictly higher priority, shorter guarantee: yes.
        assert_eq!(may_preempt(&training, &debug, 99 * h, &r), PreemptDecision::YesHigherPriority { preemptee: Normal, preemptor: High });
        // Off: same leaf never.
        let off = PreemptRules { within_team: false, ..PreemptRules::default() };
        assert_eq!(may_preempt_with(&training, &debug, 99 * h, &r, off), PreemptDecision::NoSameAllocation);
        // A longer guarantee than the victim's: no.
        let long = WaitingJob { leaf: Some(0), contract: at(3 * h, High), gpus: 8, queued_since: None };
        assert!(matches!(may_preempt(&training, &long, 99 * h, &r), PreemptDecision::NoSameLeafLongerGuarantee { .. }));
        // Equal or lower priority: no; and never the other way round.
        for p in [Low, Normal] {
            let w = WaitingJob { leaf: Some(0), contract: at(600, p), gpus: 8, queued_since: None };
            assert!(matches!(may_preempt(&training, &w, 99 * h, &r), PreemptDecision::NoSameLeafNotHigher { .. }));
        }
        let debug_running = RunningJob { leaf: Some(0), contract: at(600, High), run_start: 0 };
        let training_waiting = WaitingJob { leaf: Some(0), contract: at(600, Normal), gpus: 8, queued_since: None };
        assert!(!may_preempt(&debug_running, &training_waiting, 99 * h, &r).allowed());
        // Another leaf's high priority counts for nothing: rule 4 decides (equal use, within the margin).
        let other = WaitingJob { leaf: Some(1), contract: at(600, High), gpus: 8, queued_since: None };
        assert!(matches!(may_preempt(&training, &other, 99 * h, &r), PreemptDecision::NoNotOutranked(_)));
    }

    #[test]
    fn small_jobs_of_another_leaf_need_no_margin() {
        let t = tree();
        let h = 3600;
        // a 0.54, b 0.46 of their shares: within the margin of 0.1.
        let r = Ranking::compute(&t, &[27 * h / 10, 23 * h / 10], 1, 100 * h);
        let training = RunningJob { leaf: Some(0), contract: contract(2 * h), run_start: 0 };
        let b_job = |gpus, min_runtime| WaitingJob { leaf: Some(1), contract: contract(min_runtime), gpus, queued_since: None };
        let rules = PreemptRules::default();
        assert_eq!((rules.small_job_gpus, rules.small_job_min_runtime), (8, 1800));
        // Small (at most 8 GPUs, at most 30 minutes): no margin.
        let d = may_preempt_with(&training, &b_job(1, 600), 100 * h, &r, rules);
        assert!(matches!(d, PreemptDecision::YesOutranked(c) if c.margin == 0.0), "{d:?}");
        assert!(d.to_string().contains("small"), "{d}");
        assert!(may_preempt_with(&training, &b_job(8, 1800), 100 * h, &r, rules).allowed());
        // Not small: the margin.
        assert!(matches!(may_preempt_with(&training, &b_job(9, 600), 100 * h, &r, rules), PreemptDecision::NoNotOutranked(c) if c.margin == 0.1));
        assert!(!may_preempt_with(&training, &b_job(1, 1801), 100 * h, &r, rules).allowed());
        assert!(!may_preempt_with(&training, &b_job(1, 600), 100 * h, &r, PreemptRules { small_job_gpus: 0, ..rules }).allowed());
        // Still protected, and never an unallocated preemptor.
        assert!(!may_preempt_with(&training, &b_job(1, 600), h, &r, rules).allowed());
        assert!(!may_preempt_with(&training, &b_job(1, 0), 100 * h, &r, rules).allowed());
        // Never the other way round: a's small job does not take b's GPUs.
        let b_running = RunningJob { leaf: Some(1), contract: contract(2 * h), run_start: 0 };
        let a_small = WaitingJob { leaf: Some(0), contract: contract(600), gpus: 1, queued_since: None };
        assert!(!may_preempt_with(&b_running, &a_small, 100 * h, &r, rules).allowed());
    }

    #[test]
    fn small_job_nodes_take_small_and_unallocated_jobs_only() {
        let rules = PreemptRules::default();
        let job = |leaf, gpus, min_runtime| WaitingJob { leaf, contract: contract(min_runtime), gpus, queued_since: None };
        assert!(rules.may_use_small_job_nodes(&job(Some(0), 1, 600)));
        assert!(rules.may_use_small_job_nodes(&job(Some(0), 8, 1800)));
        // Unallocated: any size, since any allocated job takes it at once.
        assert!(rules.may_use_small_job_nodes(&job(Some(0), 64, 0)));
        assert!(rules.may_use_small_job_nodes(&job(None, 64, 0)));
        // Too large, guaranteed too long, or charged to no budget.
        assert!(!rules.may_use_small_job_nodes(&job(Some(0), 9, 600)));
        assert!(!rules.may_use_small_job_nodes(&job(Some(0), 1, 1801)));
        assert!(!rules.may_use_small_job_nodes(&job(None, 1, 600)));
        // No job is small: unallocated jobs only.
        let off = PreemptRules { small_job_gpus: 0, ..rules };
        assert!(!off.may_use_small_job_nodes(&job(Some(0), 1, 600)));
        assert!(off.may_use_small_job_nodes(&job(Some(0), 1, 0)));
    }

    #[test]
    fn unallocated_victims_get_their_own_grace() {
        let mut s = ClusterSettings::default();
        let free = RunningJob { leaf: Some(0), contract: contract(0), run_start: 0 };
        let paid = RunningJob { leaf: Some(0), contract: contract(60), run_start: 0 };
        let outside = RunningJob { leaf: None, contract: contract(60), run_start: 0 };
        assert_eq!((grace_for(&free, &s), grace_for(&paid, &s), grace_for(&outside, &s)), (0, 300, 0));
        s.unallocated_grace = 60;
        assert_eq!(grace_for(&free, &s), 60);
        s.unallocated_grace = 900; // never more than the grace time
        assert_eq!(grace_for(&free, &s), 300);
    }

    #[test]
    fn smallest_victims_first() {
        let t = tree();
        let r = Ranking::compute(&t, &[10, 0], 1, 0); // b ranks first
        let rules = PreemptRules::default();
        let job = |leaf, m| RunningJob { leaf: Some(leaf), contract: contract(m), run_start: 0 };
        let free_big = victim_order(&job(1, 0), 64, false, &r, rules);
        let one = victim_order(&job(1, 60), 1, true, &r, rules);
        let node_a = victim_order(&job(0, 60), 8, true, &r, rules);
        let node_b = victim_order(&job(1, 60), 8, true, &r, rules);
        let whole = victim_order(&job(0, 60), 16, true, &r, rules);
        let cancelled = victim_order(&job(0, 60), 1, false, &r, rules);
        assert!(free_big < one && one < node_a && node_a < node_b && node_b < whole && whole < cancelled, "{free_big} {one} {node_a} {node_b} {whole}");
        let old = PreemptRules { smallest_first: false, ..rules };
        assert_eq!(victim_order(&job(0, 60), 16, true, &r, old), preemption_order(&job(0, 60), &r));
    }

    #[test]
    fn unallocated_and_low_ranked_go_first() {
        let t = tree();
        let r = Ranking::compute(&t, &[10, 0], 1, 0); // b ranks first
        let job = |leaf, m| RunningJob { leaf: Some(leaf), contract: contract(m), run_start: 0 };
        let free_b = preemption_order(&job(1, 0), &r);
        let free_a = preemption_order(&job(0, 0), &r);
        let a = preemption_order(&job(0, 60), &r);
        let b = preemption_order(&job(1, 60), &r);
        assert!(free_a < free_b && free_b < a && a < b, "{free_a} {free_b} {a} {b}");
    }
}
