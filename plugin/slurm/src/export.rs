//! The one place plugin symbols come from.
//!
//! A plugin crate implements one of [`PriorityPlugin`], [`JobSubmitPlugin`],
//! [`PreemptPlugin`] or [`JobCompPlugin`] over safe views, and calls [`slurm_plugin!`] once.
//! The macro emits every C symbol Slurm looks up for that plugin kind
//! (`plugin_name`, `plugin_type`, `plugin_version`, `init`, `fini` and the
//! kind's hooks). Each hook body is a function below: it turns Slurm's raw
//! pointers into views, runs the plugin's method inside [`guard`], and on a
//! panic or a missing instance answers with a fallback chosen to keep
//! slurmctld scheduling (accept the job, preempt nobody, lowest priority).
//!
//! The bodies taking raw pointers are `unsafe fn`: their contract is
//! Slurm's plugin ABI (valid records, the job lock held), which only the
//! symbols the macro emits can vouch for, in one `unsafe` block each.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use slurm_sys as sys;

use crate::guard::{guard, install_panic_hook};
use crate::job::{Job, JobDesc, JobMut};
use crate::strings::set_out_string;

/// Behaviour shared by every plugin kind.
pub trait Plugin: Send + Sync + Sized + 'static {
    /// Called from `init`. Starts whatever the plugin needs (only inside
    /// slurmctld, see [`crate::ctld::in_slurmctld`]). An error makes
    /// slurmctld refuse to start, as a bad slurm.conf would.
    fn init() -> Result<Self, String>;
    /// Called from `fini`: stop and join threads.
    fn fini(&self) {}
}

/// `PriorityType=priority/...`.
pub trait PriorityPlugin: Plugin {
    /// Starts the work that walks slurmctld's tables, once they are loaded:
    /// right after `init` on 22.05; from `priority_p_thread_start` on 24.11,
    /// whose `init` runs before slurmctld reads its state (and, on a backup
    /// taking over, before it reads slurm.conf), with the config write lock
    /// held. Must not take slurmctld's locks itself.
    fn thread_start(&self) {}
    /// The priority of a job being submitted, requeued or released.
    fn set_priority(&self, last_prio: u32, job: JobMut<'_>) -> u32;
    /// `scontrol reconfigure`.
    fn reconfig(&self) {}
    /// The fair-share factor of a pending job's budget, in [0, 1], for sprio.
    fn fairshare_factor(&self, _job: Job<'_>) -> Option<f64> {
        None
    }
    /// A run of `job` just ended (completed, failed, cancelled, timed out,
    /// preempted, requeued, node failure): told by jobcomp/allot, under
    /// slurmctld's job write lock, so keep it to copying a few fields.
    fn run_ended(&self, _job: Job<'_>) {}
}

/// `JobCompType=jobcomp/...`: slurmctld calls it at the end of every run of
/// every job (job_completion_logger), requeues included.
pub trait JobCompPlugin: Plugin {
    fn run_ended(&self, job: Job<'_>);
}

/// A refusal of a submission or update, as the user will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// A Slurm error code (`ESLURM_*`), shown by sbatch with `message`.
    pub code: c_int,
    pub message: String,
}

/// `JobSubmitPlugins=...`.
pub trait JobSubmitPlugin: Plugin {
    fn submit(&self, desc: &mut JobDesc<'_>, submit_uid: u32) -> Result<(), Refusal>;
    fn modify(&self, desc: &mut JobDesc<'_>, job: Job<'_>, submit_uid: u32) -> Result<(), Refusal>;
}

/// One question slurmctld asks a preempt plugin (`preempt_p_get_data`).
pub enum PreemptQuery<'a> {
    /// Is preemption on at all (the job may be absent).
    Enabled(&'a mut bool),
    /// PREEMPT_MODE_* for this job.
    Mode(&'a mut u16),
    /// Order in which running jobs are preempted: lowest first.
    Prio(&'a mut u32),
    /// Seconds from the preemption signal to the kill.
    GraceTime(&'a mut u32),
}

/// `PreemptType=preempt/...`.
pub trait PreemptPlugin: Plugin {
    /// May `preemptor` (pending) take `preemptee`'s resources? Called for
    /// every job on every scheduling pass: keep it cheap.
    fn preemptable(&self, preemptee: Job<'_>, preemptor: Job<'_>) -> bool;
    /// Answer one of slurmctld's questions about `job`.
    fn data(&self, job: Option<Job<'_>>, query: PreemptQuery<'_>);
}

/// Where a plugin's instance lives between `init` and `fini`.
pub type Instance<P> = ArcSwapOption<P>;

/// A C string array from a literal, for `plugin_name`/`plugin_type`.
pub const fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let bytes = s.as_bytes();
    assert!(bytes.len() + 1 == N, "array size must be the string length plus the NUL");
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i] != 0, "no NUL inside the string");
        out[i] = bytes[i] as c_char;
        i += 1;
    }
    out
}

/// Body of `init`.
pub fn init<P: Plugin>(instance: &Instance<P>, plugin_type: &'static str) -> c_int {
    crate::logger::init(plugin_type);
    install_panic_hook();
    guard("init", sys::SLURM_ERROR, || match P::init() {
        Ok(p) => {
            instance.store(Some(Arc::new(p)));
            log::debug!("loaded ({})", allot::BUILD);
            sys::SLURM_SUCCESS
        }
        Err(e) => {
            log::error!("cannot start: {e}");
            sys::SLURM_ERROR
        }
    })
}

/// Body of `fini`.
pub fn fini<P: Plugin>(instance: &Instance<P>) -> c_int {
    guard("fini", sys::SLURM_SUCCESS, || {
        if let Some(p) = instance.swap(None) {
            p.fini();
        }
        sys::SLURM_SUCCESS
    })
}

/// Body of a priority plugin's `init`: [`init`], then, before 24.11, whose
/// `init` runs once the tables are loaded, [`PriorityPlugin::thread_start`].
pub fn priority_init<P: PriorityPlugin>(instance: &Instance<P>, plugin_type: &'static str) -> c_int {
    let rc = init(instance, plugin_type);
    #[cfg(not(slurm_ge_24_11))]
    if rc == sys::SLURM_SUCCESS {
        priority_thread_start(instance);
    }
    rc
}

/// Body of `priority_p_thread_start` (24.11 and later; before, called by
/// [`priority_init`]).
pub fn priority_thread_start<P: PriorityPlugin>(instance: &Instance<P>) {
    guard("priority_p_thread_start", (), || {
        if let Some(p) = instance.load_full() {
            p.thread_start();
        }
    })
}

/// Body of `priority_p_set`.
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
pub unsafe fn priority_set<P: PriorityPlugin>(instance: &Instance<P>, last_prio: u32, job: *mut sys::job_record_t) -> u32 {
    let fallback = allot::order::PRIORITY_BOTTOM;
    guard("priority_p_set", fallback, || {
        let Some(p) = instance.load_full() else { return fallback };
        // SAFETY: slurmctld passes a valid job record and holds its job write lock for the duration of the call.
        let Some(job) = (unsafe { JobMut::from_ptr(job) }) else { return fallback };
        crate::fault::inject("priority_set");
        p.set_priority(last_prio, job)
    })
}

/// Body of `priority_p_reconfig`.
pub fn priority_reconfig<P: PriorityPlugin>(instance: &Instance<P>) {
    guard("priority_p_reconfig", (), || {
        if let Some(p) = instance.load_full() {
            p.reconfig();
        }
    })
}

/// Body of `allot_priority_run_ended`, which jobcomp/allot calls.
///
/// # Safety
/// Only from the exported symbol: `job` is a record slurmctld handed to
/// jobcomp/allot, with the job write lock held for the call.
pub unsafe fn priority_run_ended<P: PriorityPlugin>(instance: &Instance<P>, job: *const sys::job_record_t) {
    guard("allot_priority_run_ended", (), || {
        let Some(p) = instance.load_full() else { return };
        // SAFETY: as the caller guarantees.
        let Some(job) = (unsafe { Job::from_ptr(job) }) else { return };
        p.run_ended(job);
    })
}

/// Body of `jobcomp_p_log_record` (before 25.05) and
/// `jobcomp_p_record_job_end` (25.05 and later): the same call, from
/// job_completion_logger, at the end of every run.
///
/// # Safety
/// Only from the exported symbol: `job` is what job_completion_logger
/// passes, with the job write lock held.
pub unsafe fn jobcomp_log_record<P: JobCompPlugin>(instance: &Instance<P>, job: *mut sys::job_record_t) -> c_int {
    // Never fail a job's completion over bookkeeping.
    guard("jobcomp_record_job_end", sys::SLURM_SUCCESS, || {
        let Some(p) = instance.load_full() else { return sys::SLURM_SUCCESS };
        // SAFETY: as the caller guarantees.
        let Some(job) = (unsafe { Job::from_ptr(job) }) else { return sys::SLURM_SUCCESS };
        crate::fault::inject("run_ended");
        p.run_ended(job);
        sys::SLURM_SUCCESS
    })
}

/// Reads a Slurm list of `uint32_t *` (job ids, uids) from an sprio request.
///
/// # Safety
/// `list` must be NULL or a valid Slurm list of pointers to `u32`.
#[cfg(not(slurm_ge_24_11))]
unsafe fn u32_list(list: sys::SlurmList) -> Option<Vec<u32>> {
    if list.is_null() {
        return None;
    }
    let mut out = Vec::new();
    // SAFETY: as the caller guarantees; the request outlives this call.
    unsafe {
        for item in crate::ctld::ListWalk::new(list) {
            let Some(v) = (item as *const u32).as_ref() else { break };
            out.push(*v);
        }
    }
    Some(out)
}

/// What sprio shows of one pending job: its priority and its budget's
/// fair-share factor in thousandths, or `None` for a job sprio leaves out
/// (not pending, or held: priority 0).
fn sprio_row<P: PriorityPlugin>(p: &P, job: Job<'_>) -> Option<(u32, f64)> {
    if !job.is_pending() || job.priority() == 0 {
        return None;
    }
    Some((job.priority(), (p.fairshare_factor(job).unwrap_or(0.0) * 1000.0).round()))
}

/// A zeroed object of type `T` from Slurm's allocator, which Slurm frees.
fn slurm_calloc<T>() -> *mut T {
    // SAFETY: slurm_xcalloc returns zeroed memory of the requested size, suitably aligned for any C type (it aborts rather than fail).
    unsafe { sys::slurm_xcalloc(1, std::mem::size_of::<T>(), true, false, c"allot".as_ptr(), 0, c"calloc".as_ptr()) as *mut T }
}

/// Body of `priority_p_get_priority_factors_list` before 24.11: what sprio
/// shows. Each pending job gets its priority (PRIORITY) and its budget's
/// fair-share factor in thousandths (FAIRSHARE: 1000 x 2^(-usage/share),
/// Slurm's classic factor computed from allot's window). `allot why`
/// explains more. 22.05 calls it with no lock held and filters by the
/// request's job ids and users here.
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
#[cfg(not(slurm_ge_24_11))]
pub unsafe fn priority_factors_list<P: PriorityPlugin>(instance: &Instance<P>, req: *mut sys::priority_factors_request_msg_t) -> sys::SlurmList {
    guard("priority_p_get_priority_factors_list", std::ptr::null_mut(), || {
        // SAFETY: list_create makes a list slurmctld will pack and free with the destructor Slurm defines for these objects (it frees the object and its TRES arrays, none of which are set here).
        let list = unsafe { sys::list_create(Some(sys::slurm_destroy_priority_factors_object)) };
        let (Some(p), Some(ctld)) = (instance.load_full(), crate::ctld::Slurmctld::get()) else { return list };
        // SAFETY: slurmctld passes the decoded request, valid for the call.
        let (job_ids, uids) = match unsafe { req.as_ref() } {
            // SAFETY: the request's lists are NULL or Slurm lists of u32 pointers.
            Some(r) => unsafe { (u32_list(r.job_id_list), u32_list(r.uid_list)) },
            None => (None, None),
        };
        ctld.for_each_job_read(|job| {
            let Some((priority, fairshare)) = sprio_row(&*p, job) else { return };
            if job_ids.as_ref().is_some_and(|ids| !ids.contains(&job.id())) || uids.as_ref().is_some_and(|u| !u.contains(&job.user_id())) {
                return;
            }
            let obj = slurm_calloc::<sys::priority_factors_object_t>();
            // SAFETY: a fresh zeroed object; the list owns it once appended. The partition name is borrowed, as priority/multifactor does: this release's destructor does not free it.
            unsafe {
                let o = &mut *obj;
                o.job_id = job.id();
                o.user_id = job.user_id();
                o.partition = job.partition_name_raw();
                o.direct_prio = priority as f64;
                o.priority_fs = fairshare;
                o.priority_site = sys::NICE_OFFSET;
                o.nice = sys::NICE_OFFSET;
                sys::list_append(list, obj as *mut c_void);
            }
        });
        list
    })
}

/// Body of `priority_p_get_priority_factors_list` from 24.11 on: what sprio
/// shows, as before (PRIORITY, and FAIRSHARE in thousandths). 24.11 and later
/// call it holding the job, node and partition read locks, and sprio
/// filters by job and user itself. Its sprio prints no factor of a job
/// with a direct priority, so the priority is spelled as factors: the
/// fair-share factor, and the rest of the priority as the association
/// factor (a column sprio shows only with `-l` or PriorityWeightAssoc).
///
/// # Safety
/// Only from the exported symbol, which slurmctld calls holding its job read lock.
#[cfg(slurm_ge_24_11)]
pub unsafe fn priority_factors_list<P: PriorityPlugin>(instance: &Instance<P>) -> sys::SlurmList {
    guard("priority_p_get_priority_factors_list", std::ptr::null_mut(), || {
        // SAFETY: list_create makes a list slurmctld will pack and then free, after dropping its locks, with the destructor Slurm defines for these objects: it frees the object, its prio_factors and its strings (account, cluster_name, partition, qos), so every one set here is a copy from Slurm's allocator.
        let list = unsafe { sys::list_create(Some(sys::slurm_destroy_priority_factors_object)) };
        let (Some(p), Some(ctld)) = (instance.load_full(), crate::ctld::Slurmctld::get()) else { return list };
        let row = |job: Job<'_>| {
            let Some((priority, fairshare)) = sprio_row(&*p, job) else { return };
            let obj = slurm_calloc::<sys::priority_factors_object_t>();
            let factors = slurm_calloc::<sys::priority_factors_t>();
            // SAFETY: fresh zeroed objects; the object owns the factors and the strings, and the list owns the object once appended.
            unsafe {
                let f = &mut *factors;
                f.priority_fs = fairshare;
                f.priority_assoc = priority as f64 - fairshare;
                f.priority_site = sys::NICE_OFFSET;
                f.nice = sys::NICE_OFFSET;
                let o = &mut *obj;
                // 26.05 names the job by its step id (job id and SLUID).
                #[cfg(not(slurm_ge_26_05))]
                {
                    o.job_id = job.id();
                }
                #[cfg(slurm_ge_26_05)]
                {
                    o.step_id = job.step_id();
                }
                o.user_id = job.user_id();
                o.direct_prio = 0.0;
                o.prio_factors = factors;
                o.partition = job.partition().map_or(std::ptr::null_mut(), crate::strings::slurm_strdup);
                o.account = job.account().map_or(std::ptr::null_mut(), crate::strings::slurm_strdup);
                sys::list_append(list, obj as *mut c_void);
            }
        };
        // SAFETY: _slurm_rpc_get_priority_factors holds the job read lock (and node and partition read locks) for the whole call.
        unsafe { ctld.for_each_job_under_callers_lock(row) };
        list
    })
}

/// The comment a submission gets when allot's check could not run: the
/// unallocated contract (free, never protected, preemptible by any
/// allocated job), which no budget needs to grant.
pub const UNCHECKED_COMMENT: &str = "min_runtime=0 priority=normal";

/// Body of `job_submit`.
///
/// Fails safe, never open: if the check cannot run (allot's code panics,
/// the plugin is not loaded), the job is neither refused (a broken plugin
/// must not stop every submission) nor accepted as it asked (it would run
/// protected and uncharged on whatever account it named): it is accepted
/// unallocated, [`UNCHECKED_COMMENT`], and sbatch tells the user why. Only
/// if even that cannot be written is the job refused.
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
pub unsafe fn job_submit<P: JobSubmitPlugin>(instance: &Instance<P>, desc: *mut sys::job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    let checked = guard("job_submit", None, || {
        let p = instance.load_full()?;
        // SAFETY: slurmctld passes the request it is validating, valid for the call.
        let mut desc = unsafe { JobDesc::from_ptr(desc) }?;
        crate::fault::inject("job_submit");
        Some(match p.submit(&mut desc, submit_uid) {
            Ok(()) => sys::SLURM_SUCCESS,
            Err(refusal) => {
                // SAFETY: err_msg is job_submit's out-parameter for the user's message.
                unsafe { set_out_string(err_msg, &refusal.message) };
                refusal.code
            }
        })
    });
    match checked {
        Some(rc) => rc,
        // SAFETY: as the caller guarantees.
        None => unsafe { submit_unchecked(desc, submit_uid, err_msg) },
    }
}

/// [`job_submit`]'s answer when the check could not run: the job as
/// [`UNCHECKED_COMMENT`], and a message saying so; a refusal if even that fails.
///
/// # Safety
/// As for [`job_submit`].
unsafe fn submit_unchecked(desc: *mut sys::job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    guard("job_submit (accepting as unallocated)", sys::SLURM_ERROR, || {
        // SAFETY: as the caller guarantees.
        let Some(mut desc) = (unsafe { JobDesc::from_ptr(desc) }) else { return sys::SLURM_ERROR };
        desc.set_comment(UNCHECKED_COMMENT);
        log::error!("job_submit: allot could not check a submission by uid {submit_uid} (see above): accepted unallocated ({UNCHECKED_COMMENT}), never charged nor protected");
        let message = format!(
            "allot: the budget check failed inside slurmctld (an internal error, logged for the admins), so this job was accepted unallocated: its comment is now '{UNCHECKED_COMMENT}' (free, never protected, preemptible by any allocated job). Cancel and submit it again later for a protected, charged run."
        );
        // SAFETY: err_msg is job_submit's out-parameter for the user's message (sbatch prints it on success too).
        unsafe { set_out_string(err_msg, &message) };
        sys::SLURM_SUCCESS
    })
}

/// Body of `job_modify`. The refusal's text goes to slurmctld's log, and,
/// where the release has a message channel for updates (24.11's `err_msg`,
/// which `scontrol update` prints), to the user; 22.05 shows the user only
/// the code's text (NULL `err_msg`).
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
pub unsafe fn job_modify<P: JobSubmitPlugin>(
    instance: &Instance<P>,
    desc: *mut sys::job_desc_msg_t,
    job: *mut sys::job_record_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    // SAFETY: as the caller guarantees.
    let rc = unsafe { job_modify_checked(instance, desc, job, submit_uid, err_msg) };
    if rc == sys::SLURM_SUCCESS {
        crate::guard::clear_errno();
    }
    rc
}

/// [`job_modify`]'s check itself. If it cannot run (allot's code panics,
/// the plugin is not loaded), an update of what allot checks (the comment,
/// the account, the partition, the GPU, node or task counts) is refused,
/// saying why; any other update (a hold, a release, a time limit) goes
/// through, so that admins can still act on their queue.
///
/// # Safety
/// As for [`job_modify`].
unsafe fn job_modify_checked<P: JobSubmitPlugin>(
    instance: &Instance<P>,
    desc: *mut sys::job_desc_msg_t,
    job: *mut sys::job_record_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let checked = guard("job_modify", None, || {
        let p = instance.load_full()?;
        // SAFETY: slurmctld passes the update request and the job record it applies to, holding the job write lock.
        let (mut desc, job) = (unsafe { JobDesc::from_ptr(desc) }?, unsafe { Job::from_ptr(job) }?);
        crate::fault::inject("job_modify");
        Some(match p.modify(&mut desc, job, submit_uid) {
            Ok(()) => sys::SLURM_SUCCESS,
            Err(refusal) => {
                log::info!("refused update of JobId={}: {}", job.id(), refusal.message);
                // SAFETY: err_msg is NULL (22.05) or job_modify's out-parameter for the user's message (24.11).
                unsafe { set_out_string(err_msg, &refusal.message) };
                refusal.code
            }
        })
    });
    match checked {
        Some(rc) => rc,
        // SAFETY: as the caller guarantees.
        None => unsafe { modify_unchecked(desc, job, err_msg) },
    }
}

/// [`job_modify_checked`]'s answer when the check could not run.
///
/// # Safety
/// As for [`job_modify`].
unsafe fn modify_unchecked(desc: *mut sys::job_desc_msg_t, job: *mut sys::job_record_t, err_msg: *mut *mut c_char) -> c_int {
    guard("job_modify (unchecked update)", sys::SLURM_ERROR, || {
        // SAFETY: as the caller guarantees.
        let (Some(desc), Some(job)) = (unsafe { JobDesc::from_ptr(desc) }, unsafe { Job::from_ptr(job) }) else { return sys::SLURM_ERROR };
        let touches =
            !matches!(desc.comment(), Ok(None)) || !matches!(desc.account(), Ok(None)) || !matches!(desc.partition(), Ok(None)) || desc.changes_gpu_request();
        if !touches {
            return sys::SLURM_SUCCESS;
        }
        log::error!("job_modify: allot could not check an update of JobId={} (see above): refused", job.id());
        let message = format!(
            "allot: JobId={}: the budget check failed inside slurmctld (an internal error, logged for the admins), so this update of its contract, account, partition or size is refused; try again later",
            job.id()
        );
        // SAFETY: err_msg is NULL (22.05) or job_modify's out-parameter for the user's message (24.11).
        unsafe { set_out_string(err_msg, &message) };
        sys::SLURM_ERROR
    })
}

/// Body of `preempt_p_preemptable` (Slurm passes the preemptee first).
///
/// Slurm asks this of every job in its job list, pending and finished ones
/// included, for every pending job the schedulers test: millions of calls
/// per backfill cycle under the job lock. Only a running job can be
/// preempted, so that one field read answers almost every call, before the
/// instance, the guard or the policy are touched.
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
pub unsafe fn preemptable<P: PreemptPlugin>(instance: &Instance<P>, preemptee: *mut sys::job_record_t, preemptor: *mut sys::job_record_t) -> bool {
    // SAFETY: slurmctld passes two job records from job_list and holds its job lock while the scheduler calls us.
    let (Some(preemptee), Some(preemptor)) = (unsafe { Job::from_ptr(preemptee) }, unsafe { Job::from_ptr(preemptor) }) else {
        return false;
    };
    if !preemptee.is_running() {
        return false;
    }
    let answer = guard("preempt_p_preemptable", None, || {
        // A guard load takes no reference count, unlike load_full.
        let loaded = instance.load();
        let p = loaded.as_deref()?;
        crate::fault::inject("preemptable");
        Some(p.preemptable(preemptee, preemptor))
    });
    // If the policy cannot answer, free work stays free: an allocated job
    // may still take an unallocated one's GPUs, and nothing else happens
    // (allocated runs are never preempted unchecked).
    answer.unwrap_or_else(|| guard("preempt_p_preemptable (unchecked)", false, || declares_unallocated(preemptee) && !declares_unallocated(preemptor)))
}

/// Whether a job's comment, as job_submit/allot wrote it back (its other
/// words, then `min_runtime=D priority=P`), declares the unallocated
/// contract: read without the policy, for [`preemptable`]'s fallback.
fn declares_unallocated(job: Job<'_>) -> bool {
    job.comment().is_some_and(|c| c.split_whitespace().rev().nth(1) == Some("min_runtime=0"))
}

/// Body of `preempt_p_get_data` (before 25.05).
///
/// # Safety
/// Only from the exported symbol: the arguments are what slurmctld passes
/// (see the `SAFETY` comments on each use).
#[cfg(not(slurm_ge_25_05))]
pub unsafe fn preempt_data<P: PreemptPlugin>(
    instance: &Instance<P>,
    job: *mut sys::job_record_t,
    kind: sys::slurm_preempt_data_type_t,
    data: *mut c_void,
) -> c_int {
    guard("preempt_p_get_data", sys::SLURM_ERROR, || {
        let Some(p) = instance.load_full() else { return sys::SLURM_ERROR };
        if data.is_null() {
            return sys::SLURM_ERROR;
        }
        // SAFETY: `job` is NULL or a record valid for the call (job lock held).
        let job = unsafe { Job::from_ptr(job) };
        // SAFETY: slurmctld passes a pointer to the type each question names (preempt.c: bool, uint16_t, uint32_t, uint32_t).
        let query = unsafe {
            match kind {
                sys::PREEMPT_DATA_ENABLED => PreemptQuery::Enabled(&mut *(data as *mut bool)),
                sys::PREEMPT_DATA_MODE => PreemptQuery::Mode(&mut *(data as *mut u16)),
                sys::PREEMPT_DATA_PRIO => PreemptQuery::Prio(&mut *(data as *mut u32)),
                sys::PREEMPT_DATA_GRACE_TIME => PreemptQuery::GraceTime(&mut *(data as *mut u32)),
                _ => {
                    log::error!("preempt_p_get_data: unknown question {kind}");
                    return sys::SLURM_ERROR;
                }
            }
        };
        p.data(job, query);
        sys::SLURM_SUCCESS
    })
}

/// Body of `preempt_p_get_mode`, `preempt_p_get_prio` and
/// `preempt_p_get_grace_time` (25.05 and later, which ask each question of
/// `preempt_p_get_data` through a symbol of its own): the plugin's answer
/// to `query`, or `fallback` if it panics or is not loaded. Preemption is on
/// whenever slurm.conf's PreemptMode is not OFF (slurmctld no longer asks).
///
/// # Safety
/// Only from the exported symbols: `job` is NULL or a record valid for the
/// call (slurmctld holds its job lock).
#[cfg(slurm_ge_25_05)]
pub unsafe fn preempt_answer<P: PreemptPlugin, T: Copy>(
    instance: &Instance<P>,
    name: &'static str,
    job: *mut sys::job_record_t,
    fallback: T,
    query: impl FnOnce(&mut T) -> PreemptQuery<'_>,
) -> T {
    guard(name, fallback, || {
        let Some(p) = instance.load_full() else { return fallback };
        // SAFETY: as the caller guarantees.
        let job = unsafe { Job::from_ptr(job) };
        let mut answer = fallback;
        p.data(job, query(&mut answer));
        answer
    })
}

/// Emits every symbol of one plugin: `slurm_plugin!(kind, "type/name",
/// "Human name", Type)` with kind `priority`, `job_submit`, `preempt` or
/// `jobcomp`. The symbols whose C signature differs between Slurm releases
/// come from [`__allot_release_symbols!`], whose parts are defined once per
/// step of the plugin ABI (`cfg(slurm_ge_...)`, slurm-sys/build.rs): the
/// cfgs are this crate's, so they are decided here, not in the plugin crates
/// the macros expand into.
#[macro_export]
macro_rules! slurm_plugin {
    (@common $type:literal, $name:literal, $ty:ty, $init:path) => {
        static INSTANCE: $crate::export::Instance<$ty> = $crate::export::Instance::const_empty();

        /// Human-readable plugin name (a C char array, as Slurm's loader expects).
        #[no_mangle]
        pub static plugin_name: [::std::os::raw::c_char; $name.len() + 1] = $crate::export::c_array($name);
        /// `kind/name`, matched against slurm.conf.
        #[no_mangle]
        pub static plugin_type: [::std::os::raw::c_char; $type.len() + 1] = $crate::export::c_array($type);
        /// Must equal the running Slurm's version, micro version included.
        #[no_mangle]
        pub static plugin_version: u32 = $crate::sys::SLURM_VERSION_NUMBER;

        #[no_mangle]
        pub extern "C" fn init() -> ::std::os::raw::c_int {
            $init(&INSTANCE, $type)
        }
        #[no_mangle]
        pub extern "C" fn fini() -> ::std::os::raw::c_int {
            $crate::export::fini(&INSTANCE)
        }
    };

    (priority, $type:literal, $name:literal, $ty:ty) => {
        $crate::slurm_plugin!(@common $type, $name, $ty, $crate::export::priority_init);
        $crate::__allot_release_symbols!(priority);
        #[no_mangle]
        pub unsafe extern "C" fn priority_p_set(last_prio: u32, job_ptr: *mut $crate::sys::job_record_t) -> u32 {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::priority_set(&INSTANCE, last_prio, job_ptr) }
        }
        #[no_mangle]
        pub extern "C" fn priority_p_reconfig(_assoc_clear: bool) {
            $crate::export::priority_reconfig(&INSTANCE)
        }
        /// Association usage is slurmdbd's; allot keeps its own in the ledger.
        #[no_mangle]
        pub unsafe extern "C" fn priority_p_set_assoc_usage(_assoc: *mut $crate::sys::slurmdb_assoc_rec_t) {}
        /// Called with slurmdbd at the end of a job with an association:
        /// allot measures usage itself (jobcomp/allot hands every run over).
        #[no_mangle]
        pub extern "C" fn priority_p_job_end(_job_ptr: *mut $crate::sys::job_record_t) {}
        /// jobcomp/allot hands every ended run here (same process; found with
        /// dlsym, see `allot_slurm::handoff`).
        #[no_mangle]
        pub unsafe extern "C" fn allot_priority_run_ended(job_ptr: *const $crate::sys::job_record_t) {
            // SAFETY: only jobcomp/allot calls this, passing the record slurmctld gave it under the job write lock.
            unsafe { $crate::export::priority_run_ended(&INSTANCE, job_ptr) }
        }
        /// The `long double` entry point `priority_p_calc_fs_factor` is a C
        /// shim (Rust has no `long double`) that calls this. Slurm's
        /// association fair-share factor has no meaning under allot: 0, as
        /// priority/basic answers.
        #[no_mangle]
        pub extern "C" fn allot_calc_fs_factor(_usage_efctv: f64, _shares_norm: f64) -> f64 {
            0.0
        }
    };

    (job_submit, $type:literal, $name:literal, $ty:ty) => {
        $crate::slurm_plugin!(@common $type, $name, $ty, $crate::export::init);
        $crate::__allot_release_symbols!(job_submit);
        #[no_mangle]
        pub unsafe extern "C" fn job_submit(
            job_desc: *mut $crate::sys::job_desc_msg_t,
            submit_uid: u32,
            err_msg: *mut *mut ::std::os::raw::c_char,
        ) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::job_submit(&INSTANCE, job_desc, submit_uid, err_msg) }
        }
    };

    (jobcomp, $type:literal, $name:literal, $ty:ty) => {
        $crate::slurm_plugin!(@common $type, $name, $ty, $crate::export::init);
        $crate::__allot_release_symbols!(jobcomp);
        /// `sacct` without slurmdbd asks the jobcomp plugin for jobs: allot
        /// keeps runs in its ledger (`allot why`), not in Slurm's job format.
        #[no_mangle]
        pub extern "C" fn jobcomp_p_get_jobs(_job_cond: *mut ::std::os::raw::c_void) -> $crate::sys::SlurmList {
            ::std::ptr::null_mut()
        }
    };

    (preempt, $type:literal, $name:literal, $ty:ty) => {
        $crate::slurm_plugin!(@common $type, $name, $ty, $crate::export::init);
        /// Used by slurmctld to sort pending jobs: allot's order is already
        /// in their priorities, so no pending job jumps another here.
        #[no_mangle]
        pub extern "C" fn preempt_p_job_preempt_check(
            _preemptor: *mut $crate::sys::job_queue_rec_t,
            _preemptee: *mut $crate::sys::job_queue_rec_t,
        ) -> bool {
            false
        }
        #[no_mangle]
        pub unsafe extern "C" fn preempt_p_preemptable(
            preemptee: *mut $crate::sys::job_record_t,
            preemptor: *mut $crate::sys::job_record_t,
        ) -> bool {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::preemptable(&INSTANCE, preemptee, preemptor) }
        }
        $crate::__allot_release_symbols!(preempt);
    };
}

/// The symbols whose C signature differs between Slurm releases (used by
/// [`slurm_plugin!`]): one macro per group of symbols that change together,
/// each defined once per side of its ABI step.
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_release_symbols {
    (priority) => {
        $crate::__allot_priority_symbols!();
    };
    (job_submit) => {
        $crate::__allot_job_modify!();
    };
    (jobcomp) => {
        $crate::__allot_jobcomp_set_location!();
        $crate::__allot_jobcomp_record!();
    };
    (preempt) => {
        $crate::__allot_preempt_data!();
    };
}

/// Before 24.11: sprio's request arrives with the call, unlocked.
#[cfg(not(slurm_ge_24_11))]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_priority_symbols {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn priority_p_get_priority_factors_list(
            req: *mut $crate::sys::priority_factors_request_msg_t,
            _uid: $crate::libc::uid_t,
        ) -> $crate::sys::SlurmList {
            // SAFETY: slurmctld calls this symbol with the request it decoded, holding no lock.
            unsafe { $crate::export::priority_factors_list(&INSTANCE, req) }
        }
    };
}

/// 24.11 and later: sprio's factors under slurmctld's locks, the recompute
/// thread's own start, and the restart boost.
#[cfg(slurm_ge_24_11)]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_priority_symbols {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn priority_p_get_priority_factors_list(_uid: $crate::libc::uid_t) -> $crate::sys::SlurmList {
            // SAFETY: slurmctld calls this symbol holding its job, node and partition read locks.
            unsafe { $crate::export::priority_factors_list(&INSTANCE) }
        }
        /// Once slurmctld has loaded its tables (with its config write lock
        /// still held): the recompute thread starts here.
        #[no_mangle]
        pub extern "C" fn priority_p_thread_start() {
            $crate::export::priority_thread_start(&INSTANCE)
        }
        /// After a restart, slurmctld offers to raise every pending job's
        /// priority by `prio_boost` (priority/basic's continuity): allot's
        /// recompute thread sets them all again, so no boost (0).
        #[no_mangle]
        pub extern "C" fn priority_p_recover(_prio_boost: u32) -> u32 {
            0
        }
    };
}

/// Before 24.11, job_modify has no message channel: the refusal's text goes to the log.
#[cfg(not(slurm_ge_24_11))]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_job_modify {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn job_modify(
            job_desc: *mut $crate::sys::job_desc_msg_t,
            job_ptr: *mut $crate::sys::job_record_t,
            submit_uid: u32,
        ) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the update request and the job it applies to, holding the job write lock.
            unsafe { $crate::export::job_modify(&INSTANCE, job_desc, job_ptr, submit_uid, ::std::ptr::null_mut()) }
        }
    };
}

/// 24.11 and later: job_modify tells the user why, as job_submit does.
#[cfg(slurm_ge_24_11)]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_job_modify {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn job_modify(
            job_desc: *mut $crate::sys::job_desc_msg_t,
            job_ptr: *mut $crate::sys::job_record_t,
            submit_uid: u32,
            err_msg: *mut *mut ::std::os::raw::c_char,
        ) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the update request, the job it applies to and the user's message slot, holding the job write lock.
            unsafe { $crate::export::job_modify(&INSTANCE, job_desc, job_ptr, submit_uid, err_msg) }
        }
    };
}

/// Before 24.11, JobCompLoc is passed in.
#[cfg(not(slurm_ge_24_11))]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_jobcomp_set_location {
    () => {
        /// JobCompLoc means nothing to allot (the ledger is in allot.conf).
        #[no_mangle]
        pub extern "C" fn jobcomp_p_set_location(_location: *mut ::std::os::raw::c_char) -> ::std::os::raw::c_int {
            $crate::sys::SLURM_SUCCESS
        }
    };
}

/// 24.11 and later read JobCompLoc from slurm_conf themselves.
#[cfg(slurm_ge_24_11)]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_jobcomp_set_location {
    () => {
        /// JobCompLoc means nothing to allot (the ledger is in allot.conf).
        #[no_mangle]
        pub extern "C" fn jobcomp_p_set_location() -> ::std::os::raw::c_int {
            $crate::sys::SLURM_SUCCESS
        }
    };
}

/// Before 25.05: one call at the end of every run.
#[cfg(not(slurm_ge_25_05))]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_jobcomp_record {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn jobcomp_p_log_record(job_ptr: *mut $crate::sys::job_record_t) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::jobcomp_log_record(&INSTANCE, job_ptr) }
        }
    };
}

/// 25.05 and later: the end of a run (from the same job_completion_logger
/// call site as before) and, new, its start.
#[cfg(slurm_ge_25_05)]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_jobcomp_record {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn jobcomp_p_record_job_end(job_ptr: *mut $crate::sys::job_record_t, _event: u32) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::jobcomp_log_record(&INSTANCE, job_ptr) }
        }
        /// A run's start: priority/allot sees every running job at its next
        /// walk, and a run too short for that arrives whole at its end.
        #[no_mangle]
        pub extern "C" fn jobcomp_p_record_job_start(_job_ptr: *mut $crate::sys::job_record_t, _event: u32) -> ::std::os::raw::c_int {
            $crate::sys::SLURM_SUCCESS
        }
    };
}

/// Before 25.05: every question through preempt_p_get_data.
#[cfg(not(slurm_ge_25_05))]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_preempt_data {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn preempt_p_get_data(
            job_ptr: *mut $crate::sys::job_record_t,
            data_type: $crate::sys::slurm_preempt_data_type_t,
            data: *mut ::std::os::raw::c_void,
        ) -> ::std::os::raw::c_int {
            // SAFETY: slurmctld calls this symbol with the arguments its plugin ABI defines.
            unsafe { $crate::export::preempt_data(&INSTANCE, job_ptr, data_type, data) }
        }
    };
}

/// 25.05 and later: a symbol per question. On a panic: mode OFF (this job
/// is not preempted), the lowest preemption priority, no grace.
#[cfg(slurm_ge_25_05)]
#[doc(hidden)]
#[macro_export]
macro_rules! __allot_preempt_data {
    () => {
        #[no_mangle]
        pub unsafe extern "C" fn preempt_p_get_mode(job_ptr: *mut $crate::sys::job_record_t) -> u16 {
            // SAFETY: slurmctld calls this symbol with a job record, holding its job lock.
            unsafe {
                $crate::export::preempt_answer(&INSTANCE, "preempt_p_get_mode", job_ptr, $crate::sys::PREEMPT_MODE_OFF as u16, |m| {
                    $crate::export::PreemptQuery::Mode(m)
                })
            }
        }
        #[no_mangle]
        pub unsafe extern "C" fn preempt_p_get_prio(job_ptr: *mut $crate::sys::job_record_t) -> u32 {
            // SAFETY: slurmctld calls this symbol with a job record, holding its job lock.
            unsafe { $crate::export::preempt_answer(&INSTANCE, "preempt_p_get_prio", job_ptr, 0u32, |p| $crate::export::PreemptQuery::Prio(p)) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn preempt_p_get_grace_time(job_ptr: *mut $crate::sys::job_record_t) -> u32 {
            // SAFETY: slurmctld calls this symbol with a job record, holding its job lock.
            unsafe { $crate::export::preempt_answer(&INSTANCE, "preempt_p_get_grace_time", job_ptr, 0u32, |g| $crate::export::PreemptQuery::GraceTime(g)) }
        }
    };
}
