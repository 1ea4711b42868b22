//! `job_submit/allot`: every submission is checked against the budget tree
//! and the contract before slurmctld accepts it.
//!
//! - The contract is read from `--comment` (`min_runtime=2h priority=high`,
//!   among other words). A bad one is refused with the reason
//!   ("min_runtime=9h exceeds the cluster cap of 8h"); a good one is written
//!   back in canonical form, so `scontrol show job` and the other plugins see
//!   exactly what was accepted, default minimum runtime included.
//! - The job's `--account` (or, without one, the user's default leaf) must
//!   be a leaf the user belongs to; otherwise the refusal lists the budgets
//!   the user may use. A job without an account gets its leaf's account.
//! - The account is canonicalised once, here: `-A " Tracking "`, `-A ""` or
//!   no `-A` become the exact account the budget file names for the leaf
//!   that was checked, so what is charged is what was checked. Comments and
//!   accounts that are not UTF-8 are refused, never defaulted.
//! - With allot.conf's `SmallJobPartition`, a job that may use the nodes
//!   kept for small jobs (small: at most `small_job_gpus` GPUs and
//!   `min_runtime` at most `small_job_min_runtime`; or unallocated) and names
//!   no partition is sent to that partition; any other job that names it is
//!   refused, saying why.
//! - `job_modify` re-checks the same on `scontrol update`, and refuses to
//!   change the contract or the budget of a job that has started.
//!
//! If no budget could be read from the ledger since slurmctld started, the
//! checks use the last good copy in `StateSaveLocation`; with no copy either,
//! every submission (and every update of a comment or an account) is
//! refused, saying why and what the admin runs: a job is never accepted
//! unchecked, as it would run uncharged or on a budget its user is not in.

use allot::budget::LeafId;
use allot::budget::{BudgetTree, LeafRefusal};
use allot::contract::{parse_comment, Contract, ContractError, ContractRules};
use allot::preempt::WaitingJob;
use allot_slurm::config::AllotConf;
use allot_slurm::job::{Job, JobDesc, NotUtf8};
use allot_slurm::policy::{contract_of, leaf_of, preempt_rules, small_job_partition_route};
use allot_slurm::snapshot::{FollowerThread, PolicySnapshot};
use allot_slurm::{sys, JobSubmitPlugin, Plugin, Refusal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How often the budget is re-read from the ledger: new budgets apply to
/// submissions within this long of `allot sync`.
const FOLLOW_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

pub struct JobSubmitAllot {
    conf: AllotConf,
    follower: Option<FollowerThread>,
    /// Whether the log already says that `SmallJobPartition` names no
    /// partition (said once, and again after it reappears and goes).
    small_partition_missing_said: AtomicBool,
}

allot_slurm::slurm_plugin!(job_submit, "job_submit/allot", "allot budget and contract checks", JobSubmitAllot);

/// Root and the Slurm user may charge any leaf (as they may use any account).
fn is_admin(uid: u32) -> bool {
    uid == 0 || uid == allot_slurm::slurm_user_id()
}

fn contract_refusal(e: ContractError) -> Refusal {
    let code = if e.token.to_ascii_lowercase().starts_with("min_runtime") { sys::ESLURM_INVALID_TIME_VALUE as i32 } else { sys::SLURM_ERROR };
    Refusal { code, message: format!("allot: {e} (contract: min_runtime=<duration> priority=low|normal|high)") }
}

/// An allocated job (charged, protected) needs a budget funded on this
/// cluster; an unallocated one (`min_runtime=0`, free) runs anywhere.
fn funding_refusal(tree: &BudgetTree, leaf: Option<LeafId>, contract: &Contract) -> Result<(), Refusal> {
    let Some(leaf) = leaf else { return Ok(()) };
    let node = tree.leaves[leaf as usize];
    if !contract.is_allocated() || tree.is_funded(node) {
        return Ok(());
    }
    let here = allot_slurm::cluster_name().unwrap_or_else(|| "this cluster".to_owned());
    let on = tree.funded_clusters(node).map_or_else(|| "none".to_owned(), |c| c.join(", "));
    Err(Refusal {
        code: sys::ESLURM_INVALID_ACCOUNT as i32,
        message: format!(
            "allot: budget {} is not funded on cluster {here} (it is on: {on}); submit there, or run here unallocated with --comment min_runtime=0 (free, and preemptible at any time)",
            tree.node(node).path
        ),
    })
}

fn leaf_refusal(e: LeafRefusal) -> Refusal {
    Refusal { code: sys::ESLURM_INVALID_ACCOUNT as i32, message: format!("allot: {e}") }
}

impl Plugin for JobSubmitAllot {
    fn init() -> Result<Self, String> {
        let conf = allot_slurm::load_allot_conf()?;
        let follower = if allot_slurm::ctld::in_slurmctld() {
            Some(
                FollowerThread::start("allot-submit", &conf.ledger, allot_slurm::cluster_name().as_deref(), allot_slurm::last_good_path(), FOLLOW_PERIOD)
                    .map_err(|e| format!("cannot start the ledger thread: {e}"))?,
            )
        } else {
            None
        };
        Ok(JobSubmitAllot { conf, follower, small_partition_missing_said: AtomicBool::new(false) })
    }
}

/// Slurm refuses a comment longer than this (`_test_job_desc_fields` in
/// slurmctld's job_mgr.c), with the misleading "Pathname too long".
const SLURM_COMMENT_MAX: usize = 1024;

fn utf8_refusal(e: NotUtf8) -> Refusal {
    let code = if e.field == "account" { sys::ESLURM_INVALID_ACCOUNT as i32 } else { sys::SLURM_ERROR };
    Refusal { code, message: format!("allot: {e}; use plain text") }
}

/// The canonical comment, or a refusal if Slurm could not store it.
fn canonical_comment(comment: &str, rules: ContractRules) -> Result<(String, Contract), Refusal> {
    let parsed = parse_comment(comment, rules).map_err(contract_refusal)?;
    let canonical = parsed.canonical_comment();
    if canonical.len() > SLURM_COMMENT_MAX {
        return Err(Refusal {
            code: sys::SLURM_ERROR,
            message: format!(
                "allot: the comment would be {} bytes with its contract '{}' written out, and Slurm keeps at most {SLURM_COMMENT_MAX}: shorten its other text by {} bytes",
                canonical.len(),
                parsed.contract.canonical(),
                canonical.len() - SLURM_COMMENT_MAX
            ),
        });
    }
    Ok((canonical, parsed.contract))
}

/// What a job will be charged to: the leaf and the one spelling of its
/// account that the job record will carry (so the account slurmctld stores
/// is exactly the one checked here, and charging finds it).
struct Charged {
    account: String,
    leaf: LeafId,
    leaf_path: String,
}

fn small_partition_refusal(message: String) -> Refusal {
    Refusal { code: sys::ESLURM_INVALID_PARTITION_NAME as i32, message: format!("allot: {message}") }
}

impl JobSubmitAllot {
    /// The budget snapshot, or a refusal when no budget can be read from the
    /// ledger or the last good copy (a job is never accepted unchecked).
    fn snapshot(&self) -> Result<Arc<PolicySnapshot>, Refusal> {
        if let Some(s) = self.follower.as_ref().and_then(|f| f.load().clone()) {
            return Ok(s);
        }
        let copy = allot_slurm::last_good_path().map_or_else(|| "StateSaveLocation is not set".to_owned(), |p| p.display().to_string());
        log::error!(
            "refusing a submission: no budget can be read from the ledger {} and there is no usable last good copy ({copy}); run `allot doctor`",
            self.conf.ledger
        );
        Err(Refusal {
            code: sys::ESLURM_INVALID_ACCOUNT as i32,
            message: format!(
                "allot: jobs cannot be checked against the budget right now (slurmctld can read no budget from its ledger {}), so none is accepted; please tell your cluster's admins, who can run `allot doctor` and `allot sync BUDGET.toml`",
                self.conf.ledger
            ),
        })
    }

    /// allot.conf's `SmallJobPartition`, if slurm.conf defines it. The
    /// shipped allot.conf names `small`: on a cluster whose slurm.conf has
    /// no such partition yet, jobs are neither sent there (Slurm would
    /// refuse them all) nor kept out of it, and the log says so once.
    fn small_partition(&self, desc: &JobDesc<'_>) -> Option<&str> {
        let small = self.conf.small_job_partition.as_deref()?;
        if desc.partition_defined(small) == Some(false) {
            if !self.small_partition_missing_said.swap(true, Ordering::Relaxed) {
                log::error!(
                    "allot.conf's SmallJobPartition={small} names no partition in slurm.conf: no nodes are kept for small jobs, so debug jobs wait for running jobs' minimum runtimes. Add the partition (allot's book, 'Debug jobs under overload': one node per 100 or part of it) or set SmallJobPartition= to say none"
                );
            }
            return None;
        }
        if self.small_partition_missing_said.swap(false, Ordering::Relaxed) {
            log::info!("partition {small} is defined now: small jobs are sent to it");
        }
        Some(small)
    }

    /// Maps `account` (None or blank: the user's default) to the leaf
    /// `user_id` charges, or refuses. `Ok(None)`: an account outside the
    /// tree that this cluster lets through uncharged.
    fn charged(&self, tree: &BudgetTree, user_id: u32, account: Option<&str>) -> Result<Option<Charged>, Refusal> {
        let user = allot_slurm::user_name(user_id);
        let account = account.map(str::trim).filter(|a| !a.is_empty());
        let leaf = match tree.leaf_for_job(&user, account) {
            Ok(leaf) => leaf,
            // Admins may charge any existing leaf.
            Err(LeafRefusal::NotMember { .. }) if is_admin(user_id) => match account.and_then(|a| tree.leaf_of_account(a)) {
                Some(leaf) => leaf,
                None => return Ok(None),
            },
            Err(LeafRefusal::UnknownAccount { .. }) if !self.conf.refuse_unknown_accounts => return Ok(None),
            Err(e) => return Err(leaf_refusal(e)),
        };
        let node = tree.leaf_node(leaf);
        // The spelling the budget file gives: the named account if it is one
        // of the leaf's, else (no account named) the leaf's first.
        let named = account.map(str::to_lowercase);
        let account = named.filter(|a| node.accounts.iter().any(|x| x == a)).unwrap_or_else(|| node.accounts[0].clone());
        Ok(Some(Charged { account, leaf, leaf_path: node.path.clone() }))
    }
}

impl JobSubmitPlugin for JobSubmitAllot {
    fn submit(&self, desc: &mut JobDesc<'_>, _submit_uid: u32) -> Result<(), Refusal> {
        let comment = desc.comment().map_err(utf8_refusal)?.unwrap_or("").to_owned();
        let account = desc.account().map_err(utf8_refusal)?.map(str::to_owned);
        let s = self.snapshot()?;
        // A missing comment is the empty contract: the default minimum
        // runtime, written out so that everyone sees it.
        let (canonical, contract) = canonical_comment(&comment, s.rules)?;
        let charged = self.charged(&s.tree, desc.user_id(), account.as_deref())?;
        funding_refusal(&s.tree, charged.as_ref().map(|c| c.leaf), &contract)?;
        if let Some(small) = self.small_partition(desc) {
            let requested = desc.partition().map_err(utf8_refusal)?.map(str::to_owned);
            let waiting =
                WaitingJob { leaf: charged.as_ref().map(|c| c.leaf), contract, gpus: desc.units_requested_at_most(s.tree.settings.charge), queued_since: None };
            if let Some(partition) =
                small_job_partition_route(small, requested.as_deref(), &waiting, preempt_rules(&s.tree)).map_err(small_partition_refusal)?
            {
                log::debug!("a submission by uid {} may use the small-job nodes: partition {partition}", desc.user_id());
                desc.set_partition(&partition);
            }
        }
        desc.set_comment(&canonical);
        if let Some(c) = charged {
            if account.as_deref() != Some(c.account.as_str()) {
                log::debug!("account {:?} of a submission by uid {} is {} ({})", account, desc.user_id(), c.account, c.leaf_path);
            }
            desc.set_account(&c.account);
        }
        Ok(())
    }

    fn modify(&self, desc: &mut JobDesc<'_>, job: Job<'_>, _submit_uid: u32) -> Result<(), Refusal> {
        // Only what the update changes is checked; the rest was checked at submission.
        let comment = desc.comment().map_err(utf8_refusal)?.map(str::to_owned);
        let account = desc.account().map_err(utf8_refusal)?.map(str::to_owned);
        let partition = desc.partition().map_err(utf8_refusal)?.map(str::to_owned);
        let small = self.small_partition(desc).map(str::to_owned);
        let moves_small = small.is_some() && (partition.is_some() || desc.changes_gpu_request());
        if comment.is_none() && account.is_none() && !moves_small {
            return Ok(());
        }
        let s = self.snapshot()?;
        // What the update asks for, each checked once: (canonical comment, contract), and the leaf and account it would charge.
        let asked_contract = comment.as_deref().map(|c| canonical_comment(c, s.rules)).transpose()?;
        let asked_charged = account.as_deref().map(|a| self.charged(&s.tree, job.user_id(), Some(a))).transpose()?;
        if job.is_pending() && (asked_contract.is_some() || asked_charged.is_some()) {
            let contract = asked_contract.as_ref().map_or_else(|| contract_of(&job, s.rules), |(_, c)| *c);
            let leaf = match &asked_charged {
                Some(charged) => charged.as_ref().map(|c| c.leaf),
                None => leaf_of(&job, &s.tree),
            };
            funding_refusal(&s.tree, leaf, &contract).map_err(|r| Refusal { message: format!("{} (JobId={})", r.message, job.id()), ..r })?;
        }
        // A pending job in the small-job partition must stay a job that may
        // use it, whatever the update changes (started jobs keep their
        // partition, contract and budget: Slurm's rule and the one below).
        if let (Some(small), true) = (small.as_deref(), job.is_pending()) {
            let contract = asked_contract.as_ref().map_or_else(|| contract_of(&job, s.rules), |(_, c)| *c);
            let leaf = match &asked_charged {
                Some(charged) => charged.as_ref().map(|c| c.leaf),
                None => leaf_of(&job, &s.tree),
            };
            // An update of the GPU request is judged by the largest of what
            // it names, the job's own GPUs on the nodes and tasks it names
            // (NumNodes=4 on a job of 8 GPUs per node: 32), and what the job
            // asked.
            let unit = s.tree.settings.charge;
            let gpus = if desc.changes_gpu_request() {
                let grown = match unit {
                    allot::budget::Charged::Gpus => job.gpus_requested_at_most_with(desc.counts()),
                    allot::budget::Charged::Cpus => 0,
                };
                desc.units_requested_at_most(unit).max(grown).max(job.units_requested_at_most(unit))
            } else {
                job.units_requested_at_most(unit)
            };
            let resulting = partition.as_deref().or(job.partition()).filter(|p| !p.trim().is_empty());
            if let Some(resulting) = resulting {
                small_job_partition_route(small, Some(resulting), &WaitingJob { leaf, contract, gpus, queued_since: None }, preempt_rules(&s.tree))
                    .map_err(|e| small_partition_refusal(format!("JobId={}: {e} (in the same update)", job.id())))?;
            }
        }
        // Once a job has started, its contract and budget are what it holds
        // its GPUs under: what is charged, protected and preempted must not
        // change under it. Edits that leave both as they are still pass.
        let started = !job.is_pending();
        if let Some((canonical, contract)) = asked_contract {
            let current = contract_of(&job, s.rules);
            if started && contract != current {
                return Err(Refusal {
                    code: sys::ESLURM_JOB_NOT_PENDING as i32,
                    message: format!(
                        "allot: JobId={} has started: its contract '{}' holds until it ends (asked: '{}'); a contract can change only while the job is pending",
                        job.id(),
                        current.canonical(),
                        contract.canonical()
                    ),
                });
            }
            desc.set_comment(&canonical);
        }
        if let Some(charged) = asked_charged {
            let now_leaf = leaf_of(&job, &s.tree).map(|l| s.tree.leaf_node(l).path.clone());
            let new_leaf = charged.as_ref().map(|c| c.leaf_path.clone());
            if started && (now_leaf != new_leaf || job.account() != charged.as_ref().map(|c| c.account.as_str())) {
                return Err(Refusal {
                    code: sys::ESLURM_JOB_NOT_PENDING as i32,
                    message: format!(
                        "allot: JobId={} has started: it is charged to {} until it ends; its account can change only while it is pending",
                        job.id(),
                        now_leaf.as_deref().unwrap_or("no budget")
                    ),
                });
            }
            if let Some(c) = charged {
                desc.set_account(&c.account);
            }
        }
        Ok(())
    }
}
