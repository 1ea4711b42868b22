//! Borrowed views of slurmctld's job records and submission requests.
//!
//! A [`Job`] is only handed out for as long as the pointer behind it is
//! valid: inside a Slurm callback (slurmctld holds its job lock while calling
//! plugins) or inside [`crate::ctld::Locked`]. The views read the fields the
//! policy needs and nothing else, and never keep a pointer past that scope.

use allot::budget::Charged;
use slurm_sys as sys;

use crate::strings::{borrowed_str, borrowed_text, replace_slurm_string};

/// A job's state, reduced to what allot acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Running,
    Suspended,
    /// Ended: completed, failed, cancelled, timed out, preempted...
    Finished,
}

/// How a run ended, from the job's base state when it left RUNNING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndState {
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    Preempted,
    /// Requeued (by an admin, allot's drain or grace rule, or a node failure).
    Requeued,
    BootFail,
    Deadline,
    OutOfMemory,
    /// Still pending, running or suspended: not an end.
    NotEnded,
}

impl EndState {
    /// The word the ledger records as a run's `end_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndState::Completed => "completed",
            EndState::Failed => "failed",
            EndState::Cancelled => "cancelled",
            EndState::Timeout => "timeout",
            EndState::NodeFail => "node_fail",
            EndState::Preempted => "preempted",
            EndState::Requeued => "requeued",
            EndState::BootFail => "boot_fail",
            EndState::Deadline => "deadline",
            EndState::OutOfMemory => "out_of_memory",
            EndState::NotEnded => "not_ended",
        }
    }
}

/// A read-only view of a `job_record_t`.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    raw: &'a sys::job_record_t,
}

impl<'a> Job<'a> {
    /// # Safety
    /// `ptr` must be null or point to a job record that stays valid and
    /// unmodified by others for `'a` (slurmctld's job lock held).
    pub unsafe fn from_ptr(ptr: *const sys::job_record_t) -> Option<Job<'a>> {
        // SAFETY: the caller guarantees validity for 'a; null gives None.
        unsafe { ptr.as_ref() }.map(|raw| Job { raw })
    }

    pub fn id(&self) -> u32 {
        self.raw.job_id
    }
    /// The job's id with its SLUID (25.11 and later name jobs by both).
    #[cfg(slurm_ge_25_11)]
    pub fn step_id(&self) -> sys::slurm_step_id_t {
        self.raw.step_id
    }
    /// The record's address, to hand to another plugin in the same call.
    pub(crate) fn as_ptr(&self) -> *const sys::job_record_t {
        self.raw
    }
    pub fn user_id(&self) -> u32 {
        self.raw.user_id
    }
    /// The account, lowercased by slurmctld after job_submit ran.
    pub fn account(&self) -> Option<&'a str> {
        // SAFETY: job record strings are NUL-terminated xmalloc'd strings owned by the record, valid while the record is (see from_ptr).
        unsafe { borrowed_str(self.raw.account) }
    }
    pub fn comment(&self) -> Option<&'a str> {
        // SAFETY: as for account.
        unsafe { borrowed_str(self.raw.comment) }
    }
    pub fn partition(&self) -> Option<&'a str> {
        // SAFETY: as for account.
        unsafe { borrowed_str(self.raw.partition) }
    }

    pub fn state(&self) -> JobState {
        let base = self.raw.job_state & sys::JOB_STATE_BASE;
        match base {
            b if b == sys::JOB_PENDING => JobState::Pending,
            b if b == sys::JOB_RUNNING => JobState::Running,
            b if b == sys::JOB_SUSPENDED => JobState::Suspended,
            _ => JobState::Finished,
        }
    }
    /// How the job's last run ended (its base state), as Slurm records it.
    pub fn end_state(&self) -> EndState {
        if self.raw.job_state & sys::JOB_REQUEUE != 0 {
            return EndState::Requeued;
        }
        let base = self.raw.job_state & sys::JOB_STATE_BASE;
        match base {
            b if b == sys::JOB_COMPLETE => EndState::Completed,
            b if b == sys::JOB_FAILED => EndState::Failed,
            b if b == sys::JOB_CANCELLED => EndState::Cancelled,
            b if b == sys::JOB_TIMEOUT => EndState::Timeout,
            b if b == sys::JOB_NODE_FAIL => EndState::NodeFail,
            b if b == sys::JOB_PREEMPTED => EndState::Preempted,
            b if b == sys::JOB_BOOT_FAIL => EndState::BootFail,
            b if b == sys::JOB_DEADLINE => EndState::Deadline,
            b if b == sys::JOB_OOM => EndState::OutOfMemory,
            _ => EndState::NotEnded,
        }
    }
    pub fn is_running(&self) -> bool {
        self.state() == JobState::Running
    }
    pub fn is_pending(&self) -> bool {
        self.state() == JobState::Pending
    }
    /// Still releasing its resources (epilog, step cleanup).
    pub fn is_completing(&self) -> bool {
        self.raw.job_state & sys::JOB_COMPLETING != 0
    }
    /// Pending because it was just requeued.
    pub fn is_requeued(&self) -> bool {
        self.raw.job_state & (sys::JOB_REQUEUE | sys::JOB_REQUEUE_FED) != 0
    }

    /// Start of the current run (0 if it never started).
    pub fn start_time(&self) -> i64 {
        self.raw.start_time
    }
    /// End of the run, or when it is expected to end while running.
    pub fn end_time(&self) -> i64 {
        self.raw.end_time
    }
    /// When the job was last suspended or resumed (0: never).
    pub fn suspend_time(&self) -> i64 {
        self.raw.suspend_time
    }
    /// Seconds the current run spent running before its last suspension
    /// (0 if never suspended).
    pub fn ran_before_suspend(&self) -> i64 {
        self.raw.pre_sus_time
    }
    /// Start of the stretch of running that is going on now: the run's
    /// start, or its last resume after a suspension (time suspended is not
    /// GPU time used, and the stretch before it was charged already).
    pub fn running_since(&self) -> i64 {
        self.start_time().max(self.suspend_time())
    }
    /// When slurmctld decided to preempt it (0: not preempted).
    pub fn preempt_time(&self) -> i64 {
        self.raw.preempt_time
    }
    pub fn priority(&self) -> u32 {
        self.raw.priority
    }
    /// An admin set the priority by hand (`scontrol update priority=`).
    pub fn priority_set_by_admin(&self) -> bool {
        self.raw.direct_set_prio != 0
    }
    pub fn restart_count(&self) -> u16 {
        self.raw.restart_cnt
    }

    fn details(&self) -> Option<&'a sys::job_details_t> {
        // SAFETY: `details` is owned by the record and lives as long as it.
        unsafe { self.raw.details.as_ref() }
    }
    pub fn submit_time(&self) -> i64 {
        self.details().map_or(0, |d| d.submit_time)
    }
    /// The earliest time the job may start (`--begin`; Slurm also sets it a
    /// little ahead on a requeue); 0 when unset.
    pub fn begin_time(&self) -> i64 {
        self.details().map_or(0, |d| d.begin_time)
    }
    /// The job may be requeued (`--requeue`, or JobRequeue=1 by default).
    /// A component of a heterogeneous job (its leader included).
    pub fn is_heterogeneous(&self) -> bool {
        self.raw.het_job_id != 0
    }

    /// A batch job (sbatch), not an allocation (salloc, srun).
    pub fn is_batch(&self) -> bool {
        self.raw.batch_flag != 0
    }

    pub fn requeue_allowed(&self) -> bool {
        self.details().is_some_and(|d| d.requeue != 0 && d.requeue != sys::NO_VAL16)
    }

    /// GPUs allocated to the job, from its allocated GRES (0 when it holds
    /// none). Counted from `gres_list_alloc` because without slurmdbd the
    /// TRES strings carry no gres/gpu.
    pub fn gpus_allocated(&self) -> u32 {
        // SAFETY: gres_list_alloc is null or the job's list of gres_state_t, valid while the record is.
        unsafe { gpus_in_gres_list(self.raw.gres_list_alloc) }
    }

    /// CPUs and memory (MB) allocated to the job, from its TRES counts
    /// (which slurmctld keeps with or without slurmdbd); 0 if it has none.
    pub fn cpus_and_memory_allocated(&self) -> (u64, u64) {
        let counts = self.raw.tres_alloc_cnt;
        if counts.is_null() {
            return (0, 0);
        }
        // SAFETY: tres_alloc_cnt is non-NULL here, an array of at least TRES_ARRAY_TOTAL_CNT counts owned by the job record.
        unsafe { (*counts.add(sys::TRES_ARRAY_CPU as usize), *counts.add(sys::TRES_ARRAY_MEM as usize)) }
    }

    /// The GPUs the job is charged while it runs: the largest of its GPUs
    /// and the GPU-equivalents of its CPUs and memory on the nodes it holds
    /// ([`allot::charge`]). Outside slurmctld (no node table): its GPUs.
    pub fn gpus_charged(&self) -> u32 {
        let gpus = self.gpus_allocated();
        let Some(ctld) = crate::ctld::Slurmctld::get() else { return gpus };
        let (cpus, memory_mb) = self.cpus_and_memory_allocated();
        allot::charge::charged_gpus(allot::charge::Held { gpus, cpus, memory_mb }, ctld.nodes_held_by(self))
    }

    /// The CPUs the job is charged while it runs on a cluster that shares
    /// CPUs: its CPUs, or the CPU-equivalent of its memory ([`allot::charge::charged_cpus`]).
    pub fn cpus_charged(&self) -> u32 {
        let (cpus, memory_mb) = self.cpus_and_memory_allocated();
        let Some(ctld) = crate::ctld::Slurmctld::get() else { return cpus.min(u32::MAX as u64) as u32 };
        allot::charge::charged_cpus(cpus, memory_mb, ctld.nodes_held_by(self))
    }

    /// What the job is charged while it runs, in the budget's unit.
    pub fn units_charged(&self, unit: Charged) -> u32 {
        match unit {
            Charged::Gpus => self.gpus_charged(),
            Charged::Cpus => self.cpus_charged(),
        }
    }

    /// What a pending job asks for (its demand while it waits), in the
    /// budget's unit: GPUs on its fewest nodes, or its minimum CPUs.
    pub fn units_requested(&self, unit: Charged) -> u32 {
        match unit {
            Charged::Gpus => self.gpus_requested(),
            Charged::Cpus => self.details().map_or(0, |d| d.min_cpus),
        }
    }

    /// The most a pending job can be given, in the budget's unit (see
    /// [`Job::gpus_requested_at_most`]; CPUs: its maximum CPU count if it
    /// set one, else no bound).
    pub fn units_requested_at_most(&self, unit: Charged) -> u32 {
        match unit {
            Charged::Gpus => self.gpus_requested_at_most(),
            Charged::Cpus => match self.details() {
                Some(d) if d.max_cpus != 0 && d.max_cpus != sys::NO_VAL => d.max_cpus.max(d.min_cpus),
                _ => u32::MAX,
            },
        }
    }

    /// The GPUs a pending job asks for on its fewest nodes (Slurm's
    /// `total_gres`): the demand it adds while it waits.
    pub fn gpus_requested(&self) -> u32 {
        // SAFETY: gres_list_req is null or the job's list of gres_state_t, valid while the record is.
        unsafe { gpus_in_gres_list(self.raw.gres_list_req) }
    }

    /// The most GPUs a pending job can be given, from its request: GPUs per
    /// job as asked; per node times the most nodes it can get (its maximum
    /// node count, else no more nodes than it has tasks); per task times its
    /// tasks; per socket: no bound (`u32::MAX`). Not `total_gres`, which
    /// counts the minimum nodes only: `--gres=gpu:8 --nodes=1-4` would pass
    /// for 8 GPUs and could be given 32.
    pub fn gpus_requested_at_most(&self) -> u32 {
        self.gpus_requested_at_most_with(Counts::default())
    }

    /// [`Job::gpus_requested_at_most`] with the node and task counts an
    /// update asks for in place of the job's own (`scontrol update
    /// NumNodes=4` on a job of 8 GPUs per node: 32).
    pub fn gpus_requested_at_most_with(&self, update: Counts) -> u32 {
        let Some(d) = self.details() else { return u32::MAX };
        let set = |n: u32| n != 0 && n != sys::NO_VAL;
        let tasks = update.tasks.unwrap_or_else(|| {
            if set(d.num_tasks) {
                d.num_tasks as u64
            } else {
                // Each task has at least cpus_per_task of the job's CPUs.
                (d.min_cpus.max(1) as u64).div_ceil(if d.cpus_per_task == sys::NO_VAL16 { 1 } else { d.cpus_per_task.max(1) as u64 })
            }
        });
        let max_nodes = update.max_nodes.or_else(|| set(d.max_nodes).then_some(d.max_nodes as u64));
        let nodes = most_nodes(update.min_nodes.unwrap_or(d.min_nodes as u64), max_nodes, Some(tasks));
        // SAFETY: gres_list_req is null or the job's list of gres_state_t, valid while the record is.
        let most = unsafe {
            gpu_states_sum(self.raw.gres_list_req, |g| {
                let given = |n: u64| if n == sys::NO_VAL64 { 0 } else { n };
                let asked = [g.gres_per_job, g.gres_per_node, g.gres_per_socket, g.gres_per_task].map(given);
                if asked == [0; 4] {
                    given(g.total_gres)
                } else {
                    most_gpus(asked, nodes, Some(tasks))
                }
            })
        };
        most.min(u32::MAX as u64) as u32
    }

    /// The job's partition name as Slurm stores it (for reports handed back to
    /// Slurm, which borrow it as priority/multifactor does), or NULL.
    #[cfg(not(slurm_ge_24_11))]
    pub(crate) fn partition_name_raw(&self) -> *mut std::os::raw::c_char {
        // SAFETY: part_ptr is NULL or the job's partition record, which lives at least as long as the job record.
        unsafe { self.raw.part_ptr.as_ref() }.map_or(std::ptr::null_mut(), |p| p.name)
    }

    /// The first and last node index the job holds (None: it holds none),
    /// so that a walk over its nodes need not test every node of the table.
    pub fn node_index_range(&self) -> Option<std::ops::RangeInclusive<usize>> {
        let bitmap = self.raw.node_bitmap;
        if bitmap.is_null() {
            return None;
        }
        // SAFETY: node_bitmap is the job's non-NULL bitstring, valid while the record is (job lock held).
        let (first, last) = unsafe { (sys::slurm_bit_ffs(bitmap), sys::slurm_bit_fls(bitmap)) };
        (first >= 0 && last >= first).then_some(first as usize..=last as usize)
    }

    /// Whether the job holds node number `index` (of slurmctld's node table).
    pub fn holds_node(&self, index: usize) -> bool {
        let bitmap = self.raw.node_bitmap;
        if bitmap.is_null() {
            return false;
        }
        // SAFETY: node_bitmap is the job's bitstring sized to the node table; callers pass an index below node_record_count.
        unsafe { sys::slurm_bit_test(bitmap, index as sys::bitoff_t) != 0 }
    }
}

/// GPUs in a job's list of requested or allocated GRES states.
///
/// # Safety
/// `list` must be null or a Slurm List of `gres_state_t` owned by a job
/// record that stays valid for the call (slurmctld's job lock held).
unsafe fn gpus_in_gres_list(list: sys::SlurmList) -> u32 {
    // SAFETY: as the caller guarantees.
    let total = unsafe { gpu_states_sum(list, |g| if g.total_gres == sys::NO_VAL64 { 0 } else { g.total_gres }) };
    total.min(u32::MAX as u64) as u32
}

/// `count` summed over the GPU entries of a job's list of GRES states.
///
/// # Safety
/// As for [`gpus_in_gres_list`].
unsafe fn gpu_states_sum(list: sys::SlurmList, count: impl Fn(&sys::gres_job_state_t) -> u64) -> u64 {
    if list.is_null() {
        return 0;
    }
    let mut total: u64 = 0;
    // SAFETY: as the caller guarantees; iterating the list under the job lock is how slurmctld reads it.
    unsafe {
        for item in crate::ctld::ListWalk::new(list) {
            let Some(state) = (item as *const sys::gres_state_t).as_ref() else { break };
            if borrowed_str(state.gres_name) == Some("gpu") {
                if let Some(job_state) = (state.gres_data as *const sys::gres_job_state_t).as_ref() {
                    total = total.saturating_add(count(job_state));
                }
            }
        }
    }
    total
}

impl std::fmt::Debug for Job<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobId={}", self.id())
    }
}

/// A job record the caller may change (slurmctld's job write lock held).
pub struct JobMut<'a> {
    raw: &'a mut sys::job_record_t,
}

impl<'a> JobMut<'a> {
    /// # Safety
    /// `ptr` must be null or point to a job record the caller may modify for
    /// `'a` (slurmctld's job write lock held).
    pub unsafe fn from_ptr(ptr: *mut sys::job_record_t) -> Option<JobMut<'a>> {
        // SAFETY: the caller guarantees exclusive validity for 'a.
        unsafe { ptr.as_mut() }.map(|raw| JobMut { raw })
    }
    pub fn view(&self) -> Job<'_> {
        Job { raw: self.raw }
    }
    pub fn set_priority(&mut self, priority: u32) {
        self.raw.priority = priority;
    }
}

/// A request field whose bytes are not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotUtf8 {
    pub field: &'static str,
    pub bytes: Vec<u8>,
}

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} {:?} is not valid UTF-8 text", self.field, String::from_utf8_lossy(&self.bytes))
    }
}

/// Node and task counts a request names (`None`: not named).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub min_nodes: Option<u64>,
    pub max_nodes: Option<u64>,
    pub tasks: Option<u64>,
}

/// A submission or update request (`job_desc_msg_t`) in job_submit.
pub struct JobDesc<'a> {
    raw: &'a mut sys::job_desc_msg_t,
}

impl<'a> JobDesc<'a> {
    /// # Safety
    /// `ptr` must be null or point to the request slurmctld passed to the
    /// job_submit plugin, valid for `'a`, and `'a` must not outlast the
    /// hook, during which slurmctld holds its partition read lock (which
    /// [`JobDesc::partition_defined`] relies on).
    pub unsafe fn from_ptr(ptr: *mut sys::job_desc_msg_t) -> Option<JobDesc<'a>> {
        // SAFETY: as the caller guarantees.
        unsafe { ptr.as_mut() }.map(|raw| JobDesc { raw })
    }
    /// Whether slurm.conf defines the partition `name` now (`None`: outside
    /// slurmctld, or a slurmctld without `find_part_record`). A request
    /// exists only inside a job_submit hook, which slurmctld calls holding
    /// the partition read lock: hence a method here.
    pub fn partition_defined(&self, name: &str) -> Option<bool> {
        let ctld = crate::ctld::Slurmctld::get()?;
        // SAFETY: a JobDesc lives only for a job_submit or job_modify hook, which slurmctld calls with its partition read lock held (from_ptr's contract).
        unsafe { ctld.partition_exists_under_callers_lock(name) }
    }
    pub fn user_id(&self) -> u32 {
        self.raw.user_id
    }
    /// The requested comment; `Err` with its bytes if they are not UTF-8
    /// (refused: allot never guesses at a contract it cannot read).
    pub fn comment(&self) -> Result<Option<&str>, NotUtf8> {
        // SAFETY: request strings are NUL-terminated and owned by the request.
        unsafe { borrowed_text(self.raw.comment) }.map_err(|bytes| NotUtf8 { field: "comment", bytes })
    }
    /// The requested account; `Err` if it is not UTF-8.
    pub fn account(&self) -> Result<Option<&str>, NotUtf8> {
        // SAFETY: as for comment.
        unsafe { borrowed_text(self.raw.account) }.map_err(|bytes| NotUtf8 { field: "account", bytes })
    }
    /// The comment, replaced through Slurm's allocator (Slurm frees it).
    pub fn set_comment(&mut self, comment: &str) {
        // SAFETY: every string field of a job request is null or Slurm-allocated and owned by the request.
        unsafe { replace_slurm_string(&mut self.raw.comment, comment) };
    }
    pub fn set_account(&mut self, account: &str) {
        // SAFETY: as for set_comment.
        unsafe { replace_slurm_string(&mut self.raw.account, account) };
    }
    /// `--requeue` given (Some(true)), `--no-requeue` (Some(false)), or
    /// neither (None: the cluster's JobRequeue decides).
    pub fn requeue(&self) -> Option<bool> {
        match self.raw.requeue {
            sys::NO_VAL16 => None,
            0 => Some(false),
            _ => Some(true),
        }
    }
    /// Whether the user asked for a warning signal (`--signal`).
    pub fn has_signal_request(&self) -> bool {
        self.raw.warn_signal != 0 && self.raw.warn_signal != sys::NO_VAL16
    }
    /// The requested partition list (`-p a,b`); `Err` if it is not UTF-8.
    pub fn partition(&self) -> Result<Option<&str>, NotUtf8> {
        // SAFETY: as for comment.
        unsafe { borrowed_text(self.raw.partition) }.map_err(|bytes| NotUtf8 { field: "partition", bytes })
    }
    pub fn set_partition(&mut self, partition: &str) {
        // SAFETY: as for set_comment.
        unsafe { replace_slurm_string(&mut self.raw.partition, partition) };
    }
    /// Whether the request names GPUs or node or task counts (an update
    /// that may change how many GPUs the job can be given).
    pub fn changes_gpu_request(&self) -> bool {
        let set = |n: u32| n != 0 && n != sys::NO_VAL;
        [self.raw.tres_per_job, self.raw.tres_per_node, self.raw.tres_per_socket, self.raw.tres_per_task].iter().any(|p| !p.is_null())
            || set(self.raw.min_nodes)
            || set(self.raw.max_nodes)
            || set(self.raw.num_tasks)
    }
    /// The node and task counts the request names.
    pub fn counts(&self) -> Counts {
        let set = |n: u32| (n != 0 && n != sys::NO_VAL).then_some(n as u64);
        Counts { min_nodes: set(self.raw.min_nodes), max_nodes: set(self.raw.max_nodes), tasks: set(self.raw.num_tasks) }
    }
    /// The most the request can be given in the budget's unit: GPUs
    /// ([`JobDesc::gpus_requested_at_most`]), or CPUs (its maximum CPU
    /// count if it set one, else no bound).
    pub fn units_requested_at_most(&self, unit: Charged) -> u32 {
        match unit {
            Charged::Gpus => self.gpus_requested_at_most(),
            Charged::Cpus if self.raw.max_cpus != 0 && self.raw.max_cpus != sys::NO_VAL => {
                self.raw.max_cpus.max(if self.raw.min_cpus == sys::NO_VAL { 0 } else { self.raw.min_cpus })
            }
            Charged::Cpus => u32::MAX,
        }
    }

    /// The most GPUs the request can be given, as [`Job::gpus_requested_at_most`]
    /// reckons for a job record, from the request's own strings
    /// (`--gpus`, `--gres`/`--gpus-per-node`, `--gpus-per-socket`,
    /// `--gpus-per-task`) and counts. GPUs per task without `--ntasks`, and
    /// GPU strings it cannot read, have no bound (`u32::MAX`).
    pub fn gpus_requested_at_most(&self) -> u32 {
        let text = |p: *mut std::os::raw::c_char| {
            // SAFETY: request strings are NUL-terminated and owned by the request; not UTF-8: not a count we can read.
            unsafe { borrowed_text(p) }.map_err(|_| ())
        };
        let (Ok(per_job), Ok(per_node), Ok(per_socket), Ok(per_task)) =
            (text(self.raw.tres_per_job), text(self.raw.tres_per_node), text(self.raw.tres_per_socket), text(self.raw.tres_per_task))
        else {
            return u32::MAX;
        };
        let set = |n: u32| n != 0 && n != sys::NO_VAL;
        let tasks = set(self.raw.num_tasks).then_some(self.raw.num_tasks as u64);
        let min_nodes = if set(self.raw.min_nodes) { self.raw.min_nodes as u64 } else { 1 };
        let nodes = most_nodes(min_nodes, set(self.raw.max_nodes).then_some(self.raw.max_nodes as u64), tasks);
        let gpus = |tres: Option<&str>| tres.map_or(Some(0), gpus_in_tres);
        let (Some(per_job), Some(per_node), Some(per_socket), Some(per_task)) = (gpus(per_job), gpus(per_node), gpus(per_socket), gpus(per_task)) else {
            return u32::MAX;
        };
        most_gpus([per_job, per_node, per_socket, per_task], nodes, tasks).min(u32::MAX as u64) as u32
    }
    /// Ask Slurm to send `signal` to the batch shell too (not only to the
    /// steps) `seconds` before the end, and at preemption (with
    /// SlurmctldParameters=preempt_send_user_signal): what `--signal=B:SIG@N`
    /// does, so that jobs checkpointing from their script get the signal.
    pub fn set_batch_signal(&mut self, signal: u16, seconds: u16) {
        self.raw.warn_signal = signal;
        self.raw.warn_time = seconds;
        self.raw.warn_flags |= sys::KILL_JOB_BATCH as u16;
    }
}

/// The most nodes a job can be given: its maximum node count, else one per
/// task, else its minimum; never fewer than its minimum (at least one).
pub fn most_nodes(min_nodes: u64, max_nodes: Option<u64>, tasks: Option<u64>) -> u64 {
    let min_nodes = min_nodes.max(1);
    max_nodes.or(tasks).unwrap_or(min_nodes).max(min_nodes)
}

/// The most GPUs a request of `[per job, per node, per socket, per task]`
/// GPUs (0: not asked) can be given on at most `nodes` nodes with `tasks`
/// tasks: per node times the nodes, per task times the tasks (no bound when
/// the task count is unknown), per socket no bound. Summed, so a request
/// naming two kinds counts as the larger of them at least.
pub fn most_gpus([per_job, per_node, per_socket, per_task]: [u64; 4], nodes: u64, tasks: Option<u64>) -> u64 {
    let times = |g: u64, n: Option<u64>| if g == 0 { 0 } else { n.map_or(u64::MAX, |n| g.saturating_mul(n)) };
    per_job.saturating_add(times(per_node, Some(nodes))).saturating_add(times(per_socket, None)).saturating_add(times(per_task, tasks))
}

/// GPUs a request's TRES string asks for (`gres:gpu:2`, `gres:gpu:a100:2`,
/// `gres:gpu` for one, `gres/gpu:2` as later Slurm writes it, entries
/// separated by commas, other GRES ignored): `Some(0)` when it names no GPU,
/// `None` when a GPU count cannot be read.
pub fn gpus_in_tres(tres: &str) -> Option<u64> {
    let mut total = 0u64;
    for item in tres.split([',', ';']).map(str::trim).filter(|i| !i.is_empty()) {
        let item = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let mut parts = item.split([':', '=']);
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let count = match rest.last() {
            None => 1,
            Some(last) if last.starts_with(|c: char| c.is_ascii_digit()) => last.parse::<u64>().ok()?,
            Some(_) => 1, // a type with no count: one
        };
        total = total.saturating_add(count);
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::{gpus_in_tres, most_gpus, most_nodes};

    #[test]
    fn bounds_gpus_by_the_most_nodes_and_tasks_a_job_can_get() {
        // --gres=gpu:8 --nodes=1-4: 32; without a node range, 8.
        assert_eq!(most_gpus([0, 8, 0, 0], most_nodes(1, Some(4), None), None), 32);
        assert_eq!(most_gpus([0, 8, 0, 0], most_nodes(0, None, None), None), 8);
        // -n 16 with no node count may spread over 16 nodes.
        assert_eq!(most_gpus([0, 1, 0, 0], most_nodes(1, None, Some(16)), Some(16)), 16);
        assert_eq!(most_gpus([4, 0, 0, 0], 9, None), 4);
        assert_eq!(most_gpus([0, 0, 0, 2], 1, Some(3)), 6);
        // Per task with no task count, or per socket: no bound.
        assert_eq!(most_gpus([0, 0, 0, 2], 1, None), u64::MAX);
        assert_eq!(most_gpus([0, 0, 1, 0], 1, Some(1)), u64::MAX);
        assert_eq!(most_gpus([0; 4], 4, Some(4)), 0);
        assert_eq!(most_nodes(3, Some(2), None), 3);
    }

    #[test]
    fn reads_gpu_counts_from_request_strings() {
        assert_eq!(gpus_in_tres("gres:gpu:2"), Some(2));
        assert_eq!(gpus_in_tres("gres:gpu:a100:3"), Some(3));
        assert_eq!(gpus_in_tres("gres:gpu"), Some(1));
        assert_eq!(gpus_in_tres("gres:gpu:a100"), Some(1));
        assert_eq!(gpus_in_tres("gres/gpu:4"), Some(4));
        assert_eq!(gpus_in_tres("gres:gpu:2,gres:mps:100,gres:gpu:v100:1"), Some(3));
        assert_eq!(gpus_in_tres("gres:mps:100"), Some(0));
        assert_eq!(gpus_in_tres("gres:gpu:2k"), None);
        assert_eq!(gpus_in_tres(""), Some(0));
    }
}
