//! slurmctld's own functions and tables, reached safely.
//!
//! Slurm's client commands load some plugins too (sshare loads the priority
//! plugin), and they lack slurmctld's symbols (`job_list`, `lock_slurmctld`,
//! ...). A plugin that referenced them directly would fail to load there,
//! and data symbols bind at load time whatever the linker is told. So these
//! symbols are looked up with `dlsym` at run time, only when running inside
//! slurmctld, and are simply absent elsewhere.
//!
//! Everything that touches the job list goes through [`Slurmctld::locked`],
//! which holds slurmctld's locks for the closure's duration and hands out
//! job views that cannot outlive them.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use slurm_sys as sys;

use crate::job::{Job, JobMut};
use crate::strings::borrowed_str;

type LockFn = unsafe extern "C" fn(sys::slurmctld_lock_t);
/// `job_requeue(uid, job_id, msg, preempt, flags)` before 25.11.
#[cfg(not(slurm_ge_25_11))]
type RequeueFn = unsafe extern "C" fn(libc::uid_t, u32, *mut sys::slurm_msg_t, bool, u32) -> c_int;
/// `job_requeue_external(uid, step_id, preempt, flags)` from 25.11, which
/// names jobs by `slurm_step_id_t` (job id and SLUID) and dropped `job_requeue`.
#[cfg(slurm_ge_25_11)]
type RequeueFn = unsafe extern "C" fn(libc::uid_t, *mut sys::slurm_step_id_t, bool, u32) -> c_int;
/// The name slurmctld exports the requeue under.
#[cfg(not(slurm_ge_25_11))]
const REQUEUE_SYMBOL: &CStr = c"job_requeue";
#[cfg(slurm_ge_25_11)]
const REQUEUE_SYMBOL: &CStr = c"job_requeue_external";
type VoidFn = unsafe extern "C" fn();
type FindJobFn = unsafe extern "C" fn(u32) -> *mut sys::job_record_t;
type FindPartFn = unsafe extern "C" fn(*mut c_char) -> *mut sys::part_record_t;
/// `job_signal(job, signal, flags, uid, preempt)`.
type JobSignalFn = unsafe extern "C" fn(*mut sys::job_record_t, u16, u16, libc::uid_t, bool) -> c_int;
/// `send_job_warn_signal(job, ignore_time)`: the job's `--signal`.
type WarnSignalFn = unsafe extern "C" fn(*mut sys::job_record_t, bool);
/// `slurm_job_get_grace_time(job)`: the preempt plugin's grace time.
type GraceTimeFn = unsafe extern "C" fn(*mut sys::job_record_t) -> u32;

/// slurm.h's `WARN_SENT` (`SLURM_BIT(15)`, which bindgen cannot expand; the
/// same bit from 22.05 to 26.05): the job's `--signal` was sent.
const WARN_SENT: u16 = 1 << 15;

/// Whether slurmctld sends a preempted job its own `--signal`, decided as
/// its scheduler decides (`_preempt_jobs`, node_scheduler.c), whose global
/// `preempt_send_user_signal` is only set at the first preemption since
/// slurmctld started. The caller holds the configuration's read lock.
fn sends_user_signal() -> bool {
    let conf = std::ptr::addr_of!(sys::slurm_conf);
    // SAFETY: slurm_conf is libslurmfull's configuration, written only under the config write lock, which the caller's read lock excludes; the strings live as long as the configuration.
    let ctld_params = unsafe { borrowed_str((*conf).slurmctld_params) }.unwrap_or("");
    #[cfg(slurm_ge_24_11)]
    // SAFETY: as above.
    let preempt_params = unsafe { borrowed_str((*conf).preempt_params) }.unwrap_or("");
    #[cfg(not(slurm_ge_24_11))]
    let preempt_params = "";
    ctld_params.to_ascii_lowercase().contains("preempt_send_user_signal") || preempt_params.to_ascii_lowercase().contains("send_user_signal")
}

/// What starting a preemption's grace time needs (the same in every
/// release allot builds for, 22.05 to 26.05).
struct GraceFns {
    job_signal: JobSignalFn,
    send_warn_signal: WarnSignalFn,
    grace_time: GraceTimeFn,
}

/// Addresses of slurmctld's symbols, found once.
pub struct Slurmctld {
    job_list: *mut sys::SlurmList,
    last_job_update: *mut libc::time_t,
    node_table: *mut *mut *mut sys::node_record_t,
    node_count: *mut c_int,
    lock: LockFn,
    unlock: LockFn,
    requeue: RequeueFn,
    find_job: FindJobFn,
    queue_scheduler: VoidFn,
    /// `find_part_record`; optional, as only the small-job partition's
    /// check needs it (which then trusts allot.conf).
    find_part: Option<FindPartFn>,
    /// Optional: without them a drain requeues at once, with no grace signal.
    grace: Option<GraceFns>,
}

// SAFETY: the pointers are addresses of slurmctld's globals and functions,
// valid for the life of the process; all access to what they point to goes
// through slurmctld's own locks (see `locked`).
unsafe impl Send for Slurmctld {}
// SAFETY: as above.
unsafe impl Sync for Slurmctld {}

/// slurmctld's locks by level: job, node, partition, federation (no config
/// lock). From 26.05 the struct has a select-node lock too, which none of
/// allot's critical sections takes (slurmctld's own requeue RPC does not).
fn locks(job: sys::lock_level_t, node: sys::lock_level_t, part: sys::lock_level_t, fed: sys::lock_level_t) -> sys::slurmctld_lock_t {
    // Default is all NO_LOCK (0), whatever fields this release has.
    let mut l = sys::slurmctld_lock_t::default();
    (l.conf, l.job, l.node, l.part, l.fed) = (sys::NO_LOCK, job, node, part, fed);
    l
}

fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT searches the global scope; the name is a valid C string. A missing symbol gives NULL.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Whether this process is slurmctld.
pub fn in_slurmctld() -> bool {
    #[cfg(not(slurm_ge_25_05))]
    // SAFETY: a plain query of libslurmfull's run-mode flags.
    let in_ctld = unsafe { sys::running_in_slurmctld() };
    // From 25.05 running_in_slurmctld() is a macro over this call.
    #[cfg(slurm_ge_25_05)]
    // SAFETY: as above.
    let in_ctld = unsafe { sys::run_in_daemon(sys::IS_SLURMCTLD) };
    in_ctld
}

impl Slurmctld {
    /// slurmctld's symbols, or `None` outside slurmctld (or if one is
    /// missing, which would mean a Slurm this code was not built for).
    pub fn get() -> Option<&'static Slurmctld> {
        static CTLD: OnceLock<Option<Slurmctld>> = OnceLock::new();
        CTLD.get_or_init(|| {
            if !in_slurmctld() {
                return None;
            }
            let resolved = (|| {
                Some(Slurmctld {
                    job_list: symbol(c"job_list")? as *mut sys::SlurmList,
                    last_job_update: symbol(c"last_job_update")? as *mut libc::time_t,
                    node_table: symbol(c"node_record_table_ptr")? as *mut *mut *mut sys::node_record_t,
                    node_count: symbol(c"node_record_count")? as *mut c_int,
                    // SAFETY: each is the address of the slurmctld function of that name, whose C signature the type spells out (as in the bindings generated from the same headers).
                    lock: unsafe { std::mem::transmute::<*mut c_void, LockFn>(symbol(c"lock_slurmctld")?) },
                    // SAFETY: as above.
                    unlock: unsafe { std::mem::transmute::<*mut c_void, LockFn>(symbol(c"unlock_slurmctld")?) },
                    // SAFETY: as above.
                    requeue: unsafe { std::mem::transmute::<*mut c_void, RequeueFn>(symbol(REQUEUE_SYMBOL)?) },
                    // SAFETY: as above.
                    find_job: unsafe { std::mem::transmute::<*mut c_void, FindJobFn>(symbol(c"find_job_record")?) },
                    // SAFETY: as above.
                    queue_scheduler: unsafe { std::mem::transmute::<*mut c_void, VoidFn>(symbol(c"queue_job_scheduler")?) },
                    // SAFETY: as above.
                    find_part: symbol(c"find_part_record").map(|p| unsafe { std::mem::transmute::<*mut c_void, FindPartFn>(p) }),
                    grace: (|| {
                        Some(GraceFns {
                            // SAFETY: as above.
                            job_signal: unsafe { std::mem::transmute::<*mut c_void, JobSignalFn>(symbol(c"job_signal")?) },
                            // SAFETY: as above.
                            send_warn_signal: unsafe { std::mem::transmute::<*mut c_void, WarnSignalFn>(symbol(c"send_job_warn_signal")?) },
                            // SAFETY: as above.
                            grace_time: unsafe { std::mem::transmute::<*mut c_void, GraceTimeFn>(symbol(c"slurm_job_get_grace_time")?) },
                        })
                    })(),
                })
            })();
            if resolved.is_none() {
                log::error!(
                    "cannot find slurmctld's job_list/lock_slurmctld/job_requeue symbols; is this the Slurm these plugins were built for ({})?",
                    sys::SLURM_VERSION_STRING
                );
            }
            resolved
        })
        .as_ref()
    }

    /// Runs `f` holding slurmctld's job write lock and node and partition
    /// read locks: what a plugin thread needs to walk jobs and set their
    /// priorities (priority/multifactor takes the same). Requeues need more
    /// (see [`Slurmctld::requeue`]).
    pub fn locked<R>(&self, f: impl FnOnce(&mut Locked<'_>) -> R) -> R {
        let _held = self.hold(locks(sys::WRITE_LOCK, sys::READ_LOCK, sys::READ_LOCK, sys::NO_LOCK));
        let mut locked = Locked { ctld: self };
        f(&mut locked)
    }

    /// Requeues one job, as `scontrol requeue` would as the Slurm user, in a
    /// critical section of its own under the locks slurmctld's own requeue
    /// RPC takes (`_slurm_rpc_requeue`: job and node write, federation read):
    /// requeueing deallocates the job's nodes. Since the locks were dropped
    /// since the caller decided, `still_due` re-checks the job under them;
    /// `Ok(false)` when it no longer is (or the job is gone).
    pub fn requeue(&self, job_id: u32, still_due: impl FnOnce(Job<'_>) -> bool) -> Result<bool, String> {
        let _held = self.hold(locks(sys::WRITE_LOCK, sys::WRITE_LOCK, sys::NO_LOCK, sys::READ_LOCK));
        // SAFETY: find_job_record reads the job hash table, which the job lock held protects; the record it returns stays valid while the lock is held.
        let job = unsafe { Job::from_ptr((self.find_job)(job_id)) };
        match job {
            Some(job) if still_due(job) => {}
            _ => return Ok(false),
        }
        let uid = crate::slurm_user_id();
        #[cfg(not(slurm_ge_25_11))]
        // SAFETY: job_requeue expects the locks _slurm_rpc_requeue holds, which are held; a NULL message is what slurmctld's own internal callers pass.
        let rc = unsafe { (self.requeue)(uid, job_id, std::ptr::null_mut(), false, 0) };
        // A SLUID of 0: find the job by its id (find_job in job_mgr.c), as `scontrol requeue ID` does.
        #[cfg(slurm_ge_25_11)]
        let mut step = sys::slurm_step_id_t { job_id, step_het_comp: sys::NO_VAL, step_id: sys::NO_VAL, ..Default::default() };
        #[cfg(slurm_ge_25_11)]
        // SAFETY: job_requeue_external expects the locks _slurm_rpc_requeue holds, which are held; the step id lives across the call.
        let rc = unsafe { (self.requeue)(uid, &mut step, false, 0) };
        if rc == sys::SLURM_SUCCESS {
            Ok(true)
        } else {
            // SAFETY: slurm_strerror returns a static string for any code.
            let text = unsafe { borrowed_str(sys::slurm_strerror(rc) as *const c_char) }.unwrap_or("unknown error");
            Err(format!("{text} (code {rc})"))
        }
    }

    /// Starts a preemption's grace time on one running job, as Slurm's own
    /// preemption does (`_job_check_grace_internal`, src/interfaces/preempt.c,
    /// the same from 22.05 to 26.05): the preempt plugin's grace time, the
    /// job's own `--signal` if slurmctld sends user signals at preemption
    /// (else SIGCONT and SIGTERM), `preempt_time` now and the end time at
    /// most the grace time away. slurmctld's time-limit check then preempts
    /// it (PreemptMode: requeue) once the grace time is over, as it does a
    /// job its scheduler preempted. Under the requeue's locks, `still_due`
    /// re-checked there.
    ///
    /// `Ok(Some((grace seconds, preempt_time)))` once begun; `Ok(None)` when
    /// the job is no longer due; `Err` when this slurmctld lacks the
    /// functions, the grace time is zero, or the job is heterogeneous or not
    /// a requeueable batch job (the caller requeues at once instead).
    pub fn begin_grace(&self, job_id: u32, still_due: impl FnOnce(Job<'_>) -> bool) -> Result<Option<(u32, i64)>, String> {
        let Some(g) = &self.grace else { return Err("slurmctld lacks job_signal/send_job_warn_signal/slurm_job_get_grace_time".into()) };
        // The requeue's locks, and the configuration's (read below).
        let mut l = locks(sys::WRITE_LOCK, sys::WRITE_LOCK, sys::NO_LOCK, sys::READ_LOCK);
        l.conf = sys::READ_LOCK;
        let _held = self.hold(l);
        // SAFETY: find_job_record reads the job hash table, which the job lock held protects; the record it returns stays valid while the lock is held.
        let ptr = unsafe { (self.find_job)(job_id) };
        // SAFETY: as above (null gives None).
        let job = unsafe { Job::from_ptr(ptr) };
        match job {
            Some(job) if still_due(job) => {
                // A heterogeneous job's components would each need the grace
                // (slurmctld's time-limit pass preempts them one by one, and
                // one without would be preempted with no preemptor, which
                // slurmctld does not expect); a job that cannot be requeued
                // would be killed at the grace's end where a failed requeue
                // leaves it running. Both are requeued at once, as before.
                if job.is_heterogeneous() {
                    return Err("a heterogeneous job".into());
                }
                if !job.is_batch() || !job.requeue_allowed() {
                    return Err("not a batch job that may be requeued".into());
                }
            }
            _ => return Ok(None),
        }
        let send_user_signal = sends_user_signal();
        // SAFETY: time(NULL) only reads the clock.
        let now = unsafe { libc::time(std::ptr::null_mut()) };
        // SAFETY: the record is valid (above) and the job write lock is held, so this thread alone reads and writes it.
        unsafe {
            let grace = (g.grace_time)(ptr);
            if grace == 0 {
                return Err("its grace time is zero".into());
            }
            let raw = &mut *ptr;
            raw.preempt_time = now;
            raw.end_time = raw.end_time.min(now + grace as libc::time_t);
            if send_user_signal && raw.warn_signal != 0 && raw.warn_flags & WARN_SENT == 0 {
                (g.send_warn_signal)(ptr, true);
            } else {
                (g.job_signal)(ptr, libc::SIGCONT as u16, 0, 0, false);
                (g.job_signal)(ptr, libc::SIGTERM as u16, 0, 0, false);
            }
            // From 24.11 slurmctld marks the job (slurm.h's GRACE_PREEMPT,
            // SLURM_BIT(7)): one that exits in its grace time is then
            // requeued by slurmctld itself and recorded PREEMPTED.
            #[cfg(slurm_ge_24_11)]
            {
                raw.bit_flags |= 1 << 7;
            }
            Ok(Some((grace, now)))
        }
    }

    /// Takes slurmctld's `locks` until the returned value drops, even if the
    /// caller panics meanwhile: a lock left held would freeze slurmctld.
    fn hold(&self, locks: sys::slurmctld_lock_t) -> Held<'_> {
        // SAFETY: lock_slurmctld blocks until the locks are granted; Held releases exactly these.
        unsafe { (self.lock)(locks) };
        Held { ctld: self, locks }
    }

    /// Calls `f` on every job, holding slurmctld's job and partition read
    /// locks: for reports, which change nothing.
    pub fn for_each_job_read(&self, f: impl FnMut(Job<'_>)) {
        let _held = self.hold(locks(sys::READ_LOCK, sys::NO_LOCK, sys::READ_LOCK, sys::NO_LOCK));
        // SAFETY: the job read lock is held for the whole walk.
        unsafe { self.for_each_job_under_callers_lock(f) }
    }

    /// Calls `f` on every job, with no lock taken here: for the hooks
    /// slurmctld calls with its job lock already held (taking it again
    /// from the same thread would deadlock or abort).
    ///
    /// # Safety
    /// The calling thread must hold slurmctld's job lock (read or write)
    /// for the whole call.
    pub unsafe fn for_each_job_under_callers_lock(&self, mut f: impl FnMut(Job<'_>)) {
        // SAFETY: the caller holds the job lock, which protects job_list and its records for the walk.
        unsafe {
            let list = *self.job_list;
            if list.is_null() {
                return;
            }
            for item in ListWalk::new(list) {
                let Some(job) = Job::from_ptr(item as *const sys::job_record_t) else { break };
                f(job);
            }
        }
    }

    /// Whether slurm.conf defines the partition `name` (`None`: this
    /// slurmctld cannot say).
    ///
    /// # Safety
    /// The calling thread must hold slurmctld's partition lock (read or
    /// write) for the whole call, as slurmctld does around the job_submit
    /// hooks (`_slurm_rpc_submit_batch_job`, `_slurm_rpc_update_job`, ...).
    pub unsafe fn partition_exists_under_callers_lock(&self, name: &str) -> Option<bool> {
        let find = self.find_part?;
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: the caller holds the partition lock, which protects part_list; find_part_record only compares the name (it takes `char *` but does not write it), which lives across the call.
        let found = unsafe { find(name.as_ptr() as *mut c_char) };
        Some(!found.is_null())
    }

    /// Asks the main scheduler to run soon (after priorities changed).
    pub fn queue_scheduler(&self) {
        // SAFETY: queue_job_scheduler only sets a flag under its own mutex.
        unsafe { (self.queue_scheduler)() };
    }
}

/// A walk over a Slurm list, item by item. The iterator is destroyed when
/// the walk drops, a panic in the middle of it included: Slurm links each
/// iterator into its list, and one never destroyed stays linked (and
/// allocated) for the list's life.
pub(crate) struct ListWalk {
    it: sys::SlurmListIterator,
}

impl ListWalk {
    /// # Safety
    /// `list` must be a valid Slurm list that stays valid, and is changed
    /// by no other thread (its owner's lock held), while the walk lives.
    pub(crate) unsafe fn new(list: sys::SlurmList) -> ListWalk {
        // SAFETY: as the caller guarantees.
        ListWalk { it: unsafe { sys::list_iterator_create(list) } }
    }
}

impl Iterator for ListWalk {
    type Item = *mut c_void;
    fn next(&mut self) -> Option<*mut c_void> {
        // SAFETY: `it` is a live iterator over a list kept valid for the walk (new's contract).
        let item = unsafe { sys::list_next(self.it) };
        (!item.is_null()).then_some(item)
    }
}

impl Drop for ListWalk {
    fn drop(&mut self) {
        // SAFETY: `it` came from list_iterator_create and is destroyed once, here.
        unsafe { sys::list_iterator_destroy(self.it) };
    }
}

/// slurmctld's locks, held until dropped (see [`Slurmctld::hold`]).
struct Held<'a> {
    ctld: &'a Slurmctld,
    locks: sys::slurmctld_lock_t,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: releases exactly the locks `hold` took.
        unsafe { (self.ctld.unlock)(self.locks) };
    }
}

/// A node's index, configured GPUs and whether it is draining.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub index: usize,
    pub gpus: u32,
    /// Usable CPUs (without specialised cores).
    pub cpus: u32,
    pub draining: bool,
}

impl NodeInfo {
    /// What the node offers in the budget's unit.
    pub fn units(&self, unit: allot::budget::Charged) -> u32 {
        match unit {
            allot::budget::Charged::Gpus => self.gpus,
            allot::budget::Charged::Cpus => self.cpus,
        }
    }
}

/// GPUs in a node's `Gres=` string: `gpu:8`, `gpu:a100:4(S:0-1),gpu:v100:2`,
/// `gpu:8,mps:400` (other GRES are not GPUs).
pub fn gpus_in_gres(gres: &str) -> u32 {
    gres.split(',')
        .filter_map(|item| {
            let item = item.split('(').next()?.trim();
            let mut parts = item.split(':');
            let name = parts.next()?.trim_start_matches("gres/");
            if name != "gpu" {
                return None;
            }
            parts.next_back()?.parse::<u32>().ok()
        })
        .sum()
}

/// slurmctld with its locks held (see [`Slurmctld::locked`]).
pub struct Locked<'a> {
    ctld: &'a Slurmctld,
}

impl Locked<'_> {
    /// Calls `f` on every job record.
    pub fn for_each_job(&mut self, mut f: impl FnMut(&mut JobMut<'_>)) {
        // SAFETY: the job write lock is held for the whole walk, which is the rule for reading and updating job_list and its records.
        unsafe {
            let list = *self.ctld.job_list;
            if list.is_null() {
                return;
            }
            for item in ListWalk::new(list) {
                let Some(mut job) = JobMut::from_ptr(item as *mut sys::job_record_t) else { break };
                f(&mut job);
            }
        }
    }

    /// Tells slurmctld that job records changed (clients re-read them).
    pub fn touch_jobs(&mut self) {
        // SAFETY: last_job_update is written under the job write lock, held.
        unsafe { *self.ctld.last_job_update = libc::time(std::ptr::null_mut()) };
    }

    /// Every node, with whether it is draining (DRAIN set, busy or not).
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.ctld.nodes()
    }
}

impl Slurmctld {
    /// Every node of slurmctld's table. The caller holds a node lock.
    fn nodes(&self) -> Vec<NodeInfo> {
        let mut out = Vec::new();
        // SAFETY: the node read lock is held; the table has node_count entries, some of which may be NULL (removed nodes).
        unsafe {
            let table = *self.node_table;
            let count = (*self.node_count).max(0) as usize;
            if table.is_null() {
                return out;
            }
            for index in 0..count {
                let Some(node) = (*table.add(index)).as_ref() else { continue };
                let gpus = borrowed_str(node.gres).map_or(0, gpus_in_gres);
                let cpus = if node.cpus_efctv > 0 { node.cpus_efctv } else { node.cpus } as u32;
                out.push(NodeInfo { index, gpus, cpus, draining: node.node_state & sys::NODE_STATE_DRAIN != 0 });
            }
        }
        out
    }

    /// The nodes `job` holds, summed: GPUs (their `Gres=`), usable CPUs
    /// (without specialised cores) and usable memory (without
    /// `MemSpecLimit`). Called from Slurm's callbacks and the locked walk,
    /// which hold slurmctld's job and node locks.
    pub fn nodes_held_by(&self, job: &Job<'_>) -> allot::charge::Nodes {
        let mut sum = allot::charge::Nodes::default();
        // Only between the job's first and last node: victim_prio calls this
        // for every preemption candidate, and the walk for every running job.
        let Some(range) = job.node_index_range() else { return sum };
        // SAFETY: a node lock is held by every caller (a job callback or a locked walk); the table has node_count entries, NULL for removed nodes.
        unsafe {
            let table = *self.node_table;
            let count = (*self.node_count).max(0) as usize;
            if table.is_null() {
                return sum;
            }
            for index in range.filter(|&i| i < count && job.holds_node(i)) {
                let Some(node) = (*table.add(index)).as_ref() else { continue };
                sum.gpus += borrowed_str(node.gres).map_or(0, gpus_in_gres);
                sum.cpus += if node.cpus_efctv > 0 { node.cpus_efctv } else { node.cpus } as u64;
                sum.memory_mb += node.real_memory.saturating_sub(node.mem_spec_limit);
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::gpus_in_gres;

    #[test]
    fn counts_gpus_in_gres_strings() {
        assert_eq!(gpus_in_gres("gpu:8"), 8);
        assert_eq!(gpus_in_gres("gpu:a100:4(S:0-1),gpu:v100:2"), 6);
        assert_eq!(gpus_in_gres("gpu:8,mps:400"), 8);
        assert_eq!(gpus_in_gres("mps:400"), 0);
        assert_eq!(gpus_in_gres(""), 0);
    }
}
