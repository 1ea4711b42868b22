//! A Slurm job as the policy core sees it: its leaf, contract and run.

use allot::budget::{BudgetTree, LeafId};
use allot::contract::{parse_comment, Contract, ContractRules};
use allot::fairshare::Ranking;
use allot::order::PendingJob;
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
    parse_comment(comment.unwrap_or(""), rules).map(|p| p.contract).unwrap_or(Contract { min_runtime: rules.default_min_runtime, priority: Default::default() })
}

/// The contract a job holds on this cluster: the one it declared, but
/// unallocated (free, preemptible at any time) when its budget is not funded
/// here (`clusters = [...]`, [`BudgetTree::for_cluster`]): job_submit refuses
/// such allocated jobs, and one accepted before the budget lost its funding
/// here must not wait, start, stay protected or be charged as allocated.
pub fn contract_held(declared: Contract, leaf: Option<LeafId>, tree: &BudgetTree) -> Contract {
    match leaf {
        Some(l) if declared.is_allocated() && !tree.is_funded(tree.leaves[l as usize]) => Contract { min_runtime: 0, ..declared },
        _ => declared,
    }
}

/// The leaf the job charges, from its account (None: outside the tree).
pub fn leaf_of(job: &Job<'_>, tree: &BudgetTree) -> Option<LeafId> {
    job.account().and_then(|a| tree.charged_leaf_of_account(a))
}

pub fn pending_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> Option<PendingJob> {
    let leaf = leaf_of(job, tree)?;
    let contract = contract_held(contract_of(job, rules), Some(leaf), tree);
    Some(PendingJob { job_id: job.id(), leaf, allocated: contract.is_allocated(), priority: contract.priority, submit_time: job.submit_time() })
}

pub fn running_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> RunningJob {
    let leaf = leaf_of(job, tree);
    RunningJob { leaf, contract: contract_held(contract_of(job, rules), leaf, tree), run_start: job.start_time() }
}

/// A pending job as a preemptor: it waits since it became eligible, for
/// rule 6. Slurm sets `begin_time` then and clears it on a hold, a release,
/// an unmet dependency and a requeue (job_mgr.c), and drops a past
/// `sbatch --begin`; taken no earlier than the submission all the same, so
/// that no path a release may add lets a fresh job claim a long wait
/// (cluster test t11b: held, then released, the wait starts at release).
pub fn waiting_job(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules) -> WaitingJob {
    let leaf = leaf_of(job, tree);
    let eligible = job.begin_time().max(job.submit_time());
    WaitingJob {
        leaf,
        contract: contract_held(contract_of(job, rules), leaf, tree),
        gpus: job.units_requested_at_most(tree.settings.charge),
        queued_since: (eligible > 0).then_some(eligible),
    }
}

/// The budget's switchable preemption rules (`preempt_within_team`,
/// `preempt_smallest_first`, `small_job_*`), for `allot::preempt::may_preempt_with`.
pub fn preempt_rules(tree: &BudgetTree) -> PreemptRules {
    PreemptRules::from_settings(&tree.settings)
}

/// A running job's place among the victims, lowest preempted first (the
/// preempt plugin's `PREEMPT_DATA_PRIO`): `allot::preempt::victim_order`
/// with the GPUs it is charged for and whether a kill requeues it.
pub fn victim_prio(job: &Job<'_>, tree: &BudgetTree, rules: ContractRules, ranking: &Ranking) -> u32 {
    victim_order(&running_job(job, tree, rules), job.units_charged(tree.settings.charge), job.requeue_allowed(), ranking, preempt_rules(tree))
}

/// Where a job goes with respect to the small-job partition (allot.conf's
/// `SmallJobPartition`): `Ok(Some(p))` to set its partition to `p` (a job
/// that may use the kept nodes and named no partition), `Ok(None)` to leave
/// it, `Err` with the reason when it names that partition and may not use it.
pub fn small_job_partition_route(small: &str, requested: Option<&str>, job: &WaitingJob, rules: PreemptRules) -> Result<Option<String>, String> {
    let eligible = rules.may_use_small_job_nodes(job);
    let requested = requested.map(str::trim).filter(|p| !p.is_empty());
    match requested {
        None if eligible => Ok(Some(small.to_owned())),
        None => Ok(None),
        Some(list) if !eligible && list.split(',').any(|p| p.trim() == small) => {
            let kept_for = if rules.small_job_gpus == 0 {
                "unallocated jobs (min_runtime=0)".to_owned()
            } else {
                format!(
                    "small jobs (at most {} GPUs and min_runtime at most {}) and unallocated ones (min_runtime=0)",
                    rules.small_job_gpus,
                    allot::duration::format_duration(rules.small_job_min_runtime)
                )
            };
            let asks = if job.leaf.is_none() {
                "is charged to no budget".to_owned()
            } else if job.gpus == u32::MAX {
                format!(
                    "can be given any number of GPUs (GPUs per task without --ntasks, or per socket) with min_runtime={}",
                    allot::duration::format_duration(job.contract.min_runtime)
                )
            } else {
                format!("can be given up to {} GPUs with min_runtime={}", job.gpus, allot::duration::format_duration(job.contract.min_runtime))
            };
            Err(format!("partition '{small}' is kept for {kept_for}; this job {asks}: leave '{small}' out of its partitions"))
        }
        Some(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot::contract::PriorityLevel;

    fn job(leaf: Option<LeafId>, gpus: u32, min_runtime: i64) -> WaitingJob {
        WaitingJob { leaf, contract: Contract { min_runtime, priority: PriorityLevel::Normal }, gpus, queued_since: None }
    }

    #[test]
    fn small_jobs_are_sent_to_the_small_job_partition_and_others_kept_out() {
        let rules = PreemptRules::default();
        let route = |requested, j: &WaitingJob| small_job_partition_route("small", requested, j, rules);
        // Named no partition: small and unallocated jobs go there, others stay.
        assert_eq!(route(None, &job(Some(0), 1, 600)), Ok(Some("small".into())));
        assert_eq!(route(Some(" "), &job(Some(0), 64, 0)), Ok(Some("small".into())));
        assert_eq!(route(None, &job(Some(0), 16, 7200)), Ok(None));
        // Named one: left as asked, unless it is the small one and the job may not use it.
        assert_eq!(route(Some("gpu"), &job(Some(0), 1, 600)), Ok(None));
        assert_eq!(route(Some("gpu,small"), &job(Some(0), 2, 1800)), Ok(None));
        assert_eq!(route(Some("gpu"), &job(Some(0), 16, 7200)), Ok(None));
        let e = route(Some("gpu,small"), &job(Some(0), 16, 7200)).unwrap_err();
        assert_eq!(
            e,
            "partition 'small' is kept for small jobs (at most 8 GPUs and min_runtime at most 30m) and unallocated ones (min_runtime=0); this job can be given up to 16 GPUs with min_runtime=2h: leave 'small' out of its partitions"
        );
        assert!(route(Some("small"), &job(Some(0), u32::MAX, 600)).unwrap_err().contains("any number of GPUs"));
        assert!(route(Some("small"), &job(None, 1, 600)).unwrap_err().contains("charged to no budget"));
        let off = PreemptRules { small_job_gpus: 0, ..rules };
        assert!(small_job_partition_route("small", Some("small"), &job(Some(0), 1, 600), off)
            .unwrap_err()
            .contains("kept for unallocated jobs (min_runtime=0);"));
        // A partition whose name merely contains the small one's is another partition.
        assert_eq!(route(Some("smaller"), &job(Some(0), 16, 7200)), Ok(None));
    }
}
