//! Who may preempt whom: the scheduling contract.
//!
//! [`may_preempt`] applies, in order:
//! 1. an unallocated waiting job (`min_runtime=0`) never preempts;
//! 2. an unallocated running job may be preempted by any allocated job;
//! 3. an allocated running job is protected until its minimum runtime has
//!    elapsed (counted from the start of its current run);
//! 4. after that, it is preempted only if its allocation is over-served
//!    compared with the waiting job's by more than the **anti-thrash
//!    margin**: at the level where their paths in the budget tree part, the
//!    running side's ratio (occupancy / allocation) must exceed the waiting
//!    side's by more than `preempt_margin` (default 0.1, a tenth of an
//!    allocation). Jobs of the same leaf never preempt each other.
//!
//! Why a margin: two teams with equal shares trade places in the order as
//! soon as one of them runs a little more. Without a margin each would
//! preempt the other every time a minimum runtime ends. With it, the team
//! that is running keeps its GPUs until it is a tenth of an allocation
//! ahead, which over a 7-day window takes many hours of full use.

use std::fmt;

use crate::budget::{LeafId, NodeId};
use crate::contract::Contract;
use crate::fairshare::Ranking;
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
}

impl WaitingJob {
    pub fn is_allocated(&self) -> bool {
        self.leaf.is_some() && self.contract.is_allocated()
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
    /// Both jobs charge the same leaf.
    NoSameAllocation,
    /// The running job's allocation is not far enough above the waiting one's.
    NoNotOutranked(Comparison),
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
    pub margin: f64,
}

impl PreemptDecision {
    pub fn allowed(&self) -> bool {
        matches!(self, PreemptDecision::YesUnallocated | PreemptDecision::YesOutranked(_))
    }
}

impl fmt::Display for PreemptDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreemptDecision::YesUnallocated => write!(f, "the running job is unallocated (min_runtime=0) and an allocated job needs its GPUs"),
            PreemptDecision::YesOutranked(c) => write!(
                f,
                "its allocation has used {:.3} of its share in the window, the waiting job's {:.3}: more than the margin of {} apart",
                c.preemptee_ratio, c.preemptor_ratio, c.margin
            ),
            PreemptDecision::NoPreemptorUnallocated => write!(f, "an unallocated job (min_runtime=0) never preempts"),
            PreemptDecision::NoProtected { until } => write!(f, "the running job is inside its minimum runtime until {until}"),
            PreemptDecision::NoSameAllocation => write!(f, "both jobs charge the same budget"),
            PreemptDecision::NoNotOutranked(c) => write!(
                f,
                "its allocation has used {:.3} of its share, the waiting job's {:.3}: not more than the margin of {} apart",
                c.preemptee_ratio, c.preemptor_ratio, c.margin
            ),
        }
    }
}

/// Whether `preemptor` may take `preemptee`'s GPUs at `now`.
pub fn may_preempt(preemptee: &RunningJob, preemptor: &WaitingJob, now: UnixTime, ranking: &Ranking) -> PreemptDecision {
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
    outranks(victim, waiting, ranking)
}

/// Rule 4 of [`may_preempt`] alone: may an allocated job of leaf `waiting`
/// take the GPUs of an allocated, no longer protected job of leaf `victim`?
/// Past protection the answer depends only on the two leaves, so a caller
/// deciding for many jobs at once (the simulator) asks once per leaf pair.
pub fn outranks(victim: LeafId, waiting: LeafId, ranking: &Ranking) -> PreemptDecision {
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
        margin: ranking.preempt_margin,
    };
    if c.preemptee_ratio - c.preemptor_ratio > c.margin {
        PreemptDecision::YesOutranked(c)
    } else {
        PreemptDecision::NoNotOutranked(c)
    }
}

/// The order in which running jobs are offered up for preemption, lowest
/// first (Slurm's preempt `PRIO`): unallocated jobs, then allocated jobs
/// from the lowest-ranked leaf up.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetTree;
    use crate::contract::PriorityLevel;

    fn tree() -> BudgetTree {
        BudgetTree::parse("[cluster]\nlookback=\"10h\"\npreempt_margin=0.1\n[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n").unwrap()
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
        let b_waiting = WaitingJob { leaf: Some(1), contract: contract(h) };
        let free_waiting = WaitingJob { leaf: Some(1), contract: contract(0) };
        let free_running = RunningJob { leaf: Some(1), contract: contract(0), run_start: 99 * h };

        assert_eq!(may_preempt(&a_running, &free_waiting, 100 * h, &r), PreemptDecision::NoPreemptorUnallocated);
        assert_eq!(may_preempt(&free_running, &b_waiting, 100 * h, &r), PreemptDecision::YesUnallocated);
        assert_eq!(may_preempt(&a_running, &b_waiting, 98 * h, &r), PreemptDecision::NoProtected { until: 99 * h });
        // a: 0.8, b: 0.2, margin 0.1.
        assert!(may_preempt(&a_running, &b_waiting, 100 * h, &r).allowed());
        // The other way round: b is under-served, a may not take its GPUs.
        let b_running = RunningJob { leaf: Some(1), contract: contract(h), run_start: 0 };
        let a_waiting = WaitingJob { leaf: Some(0), contract: contract(h) };
        assert!(matches!(may_preempt(&b_running, &a_waiting, 100 * h, &r), PreemptDecision::NoNotOutranked(_)));
        // Same leaf.
        let a_waiting_too = WaitingJob { leaf: Some(0), contract: contract(h) };
        assert_eq!(may_preempt(&a_running, &a_waiting_too, 100 * h, &r), PreemptDecision::NoSameAllocation);
        // Within the margin: a 0.54, b 0.46.
        let close = Ranking::compute(&t, &[27 * h / 10, 23 * h / 10], 1, 100 * h);
        assert!(!may_preempt(&a_running, &b_waiting, 100 * h, &close).allowed());
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
