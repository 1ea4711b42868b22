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
//! - `job_modify` re-checks the same on `scontrol update`.
//!
//! If no budget could ever be read from the ledger, jobs are accepted
//! unchanged (and that is logged): allot must not stop a cluster from
//! scheduling.

use allot::budget::LeafRefusal;
use allot::contract::{parse_comment, ContractError};
use allot_slurm::config::AllotConf;
use allot_slurm::job::{Job, JobDesc};
use allot_slurm::snapshot::FollowerThread;
use allot_slurm::{sys, JobSubmitPlugin, Plugin, Refusal};

/// How often the budget is re-read from the ledger: new budgets apply to
/// submissions within this long of `allot sync`.
const FOLLOW_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

pub struct JobSubmitAllot {
    conf: AllotConf,
    follower: Option<FollowerThread>,
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

fn leaf_refusal(e: LeafRefusal) -> Refusal {
    Refusal { code: sys::ESLURM_INVALID_ACCOUNT as i32, message: format!("allot: {e}") }
}

impl Plugin for JobSubmitAllot {
    fn init() -> Result<Self, String> {
        let conf = allot_slurm::load_allot_conf()?;
        let follower = if allot_slurm::ctld::in_slurmctld() {
            Some(FollowerThread::start("allot-submit", &conf.ledger_path, FOLLOW_PERIOD).map_err(|e| format!("cannot start the ledger thread: {e}"))?)
        } else {
            None
        };
        Ok(JobSubmitAllot { conf, follower })
    }
}

impl JobSubmitAllot {
    /// Checks (and canonicalizes) a comment and an account for `user_id`.
    /// `account` is the one requested, or `None` to use the default leaf.
    fn check(&self, desc: &mut JobDesc<'_>, user_id: u32, comment: Option<&str>, account: Option<&str>, fill_account: bool) -> Result<(), Refusal> {
        let loaded = self.follower.as_ref().map(FollowerThread::load);
        let Some(snapshot) = loaded.as_ref().and_then(|g| g.as_deref()) else {
            log::warn!("no budget has been read from {}: accepting the job unchecked", self.conf.ledger_path.display());
            return Ok(());
        };
        let tree = &snapshot.tree;
        if let Some(comment) = comment {
            let parsed = parse_comment(comment, snapshot.rules).map_err(contract_refusal)?;
            desc.set_comment(&parsed.canonical_comment());
        }
        let user = allot_slurm::user_name(user_id);
        let leaf = match tree.leaf_for_job(&user, account) {
            Ok(leaf) => leaf,
            // Admins may charge any existing leaf.
            Err(LeafRefusal::NotMember { .. }) if is_admin(user_id) => match account.and_then(|a| tree.leaf_of_account(a)) {
                Some(leaf) => leaf,
                None => return Ok(()),
            },
            Err(LeafRefusal::UnknownAccount { .. }) if !self.conf.refuse_unknown_accounts => return Ok(()),
            Err(e) => return Err(leaf_refusal(e)),
        };
        if fill_account && account.is_none() {
            desc.set_account(&tree.leaf_node(leaf).accounts[0]);
        }
        Ok(())
    }
}

impl JobSubmitPlugin for JobSubmitAllot {
    fn submit(&self, desc: &mut JobDesc<'_>, _submit_uid: u32) -> Result<(), Refusal> {
        // A missing comment is the empty contract: the default minimum
        // runtime, written out so that everyone sees it.
        let comment = desc.comment().unwrap_or("").to_owned();
        let account = desc.account().map(str::to_owned);
        let user = desc.user_id();
        self.check(desc, user, Some(&comment), account.as_deref(), true)
    }

    fn modify(&self, desc: &mut JobDesc<'_>, job: Job<'_>, _submit_uid: u32) -> Result<(), Refusal> {
        // Only what the update changes is checked; the rest was checked at submission.
        let comment = desc.comment().map(str::to_owned);
        let account = desc.account().map(str::to_owned);
        if comment.is_none() && account.is_none() {
            return Ok(());
        }
        let account = account.or_else(|| job.account().map(str::to_owned));
        self.check(desc, job.user_id(), comment.as_deref(), account.as_deref(), false)
    }
}
