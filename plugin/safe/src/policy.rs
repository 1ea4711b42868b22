//! A Slurm job as the policy core sees it: its leaf, contract and run.

use allot::budget::{BudgetTree, LeafId};
use allot::contract::{parse_comment, Contract, ContractRules};
use allot::order::PendingJob;
use allot::fairshare::Ranking;
use allot::preempt::{victim_order, PreemptRules, RunningJob, WaitingJob};

use crate::job::Job;

/// The job's contract, from the canonical comment job_submit/allot stored.
/// A comment that no longer parses (the cap was lowered since, or the job
/// predates allot) falls back to the cluster default, with the declared
/// priority lost: the job keeps running under the rules in force.
pub fn contract_of(job: &Job<'_>, rules: ContractRules) -> Contract {
    contract_of_comment(job.comment(), rules)
}

/// The same, from a comment copied out of a job record.
pub fn contract_of_comment(comment: Option<&str>, rules: ContractRules) -> Contract {
    parse_comment(comment.unwrap_or(""), rules).map(|p| p.contract).unwrap_or(Contract {
        min_runtime: rules.default_min_runtime,
        priority: Default::default(),
    })
}

/// The leaf the job charges, from its account (None: outside the tree).
pub fn leaf_of(job: &Job<'_>, tree: &BudgetTree) -> Option<LeafId> {
    job.account().and_then(|a| tree.leaf_of_account(a))
}

pub fn pending_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> Option<PendingJob> {
    let leaf = leaf_of(job, tree)?;
    let contract = contract_of(job, rules);
    Some(PendingJob { job_id: job.id(), leaf, allocated: contract.is_allocated(), priority: contract.priority, submit_time: job.submit_time() })
}

pub fn running_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> RunningJob {
    RunningJob { leaf: leaf_of(job, tree), contract: contract_of(job, rules), run_start: job.start_time() }
}

pub fn waiting_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> WaitingJob {
    WaitingJob { leaf: leaf_of(job, tree), contract: contract_of(job, rules), gpus: job.gpus_requested_at_most() }
}

/// The budget's switchable preemption rules (`preempt_within_team`,
/// `preempt_smallest_first`, `small_job_*`), for `allot::preempt::may_preempt_with`.
pub fn preempt_rules(tree: &BudgetTree) -> PreemptRules {
    PreemptRules::from_settings(&tree.settings)
}

/// A running job's place among the victims, lowest preempted first (the
/// preempt plugin's `PREEMPT_DATA_PRIO`): `allot::preempt::victim_order`
/// with the GPUs it holds and whether a kill requeues it.
pub fn victim_prio(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules, ranking: &Ranking) -> u32 {
    victim_order(&running_job(job, tree, rules), job.gpus_allocated(), job.requeue_allowed(), ranking, preempt_rules(tree))
}
