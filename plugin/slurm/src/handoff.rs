//! jobcomp/allot -> priority/allot, inside slurmctld.
//!
//! slurmctld tells only a job-completion plugin about every run's end
//! (`job_completion_logger`, which also covers requeues, preemptions and node
//! failures), while the runs are kept by priority/allot's recompute thread.
//! Both plugins are loaded into the same slurmctld, each with its own copy
//! of this crate's statics, so jobcomp/allot finds priority/allot's exported
//! `allot_priority_run_ended` in the already-loaded `priority_allot.so`
//! (`dlopen` with `RTLD_NOLOAD` loads nothing) and calls it directly: the run
//! lands in the one place that charges runs, exactly, however short it was.

use std::ffi::CString;
use std::os::raw::c_void;
use std::sync::OnceLock;

use slurm_sys as sys;

use crate::job::Job;
use crate::strings::borrowed_str;

type RunEndedFn = unsafe extern "C" fn(*const sys::job_record_t);

/// priority/allot's entry point, once found.
static TARGET: OnceLock<RunEndedFn> = OnceLock::new();

/// Finds `allot_priority_run_ended` in a loaded `priority_allot.so` in one
/// of slurm.conf's PluginDir directories.
fn find() -> Option<RunEndedFn> {
    // SAFETY: slurm_conf is libslurmfull's configuration, read-only after startup; plugindir is its PluginDir string.
    let dirs = unsafe { borrowed_str((*std::ptr::addr_of!(sys::slurm_conf)).plugindir) }.unwrap_or("/usr/lib/x86_64-linux-gnu/slurm-wlm");
    for dir in dirs.split(':').filter(|d| !d.is_empty()) {
        let Ok(path) = CString::new(format!("{}/priority_allot.so", dir.trim_end_matches('/'))) else { continue };
        // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded (it maps nothing new); the path is a valid C string.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a valid handle and C string; a missing symbol gives NULL. The handle is kept open for the life of slurmctld (the object stays loaded anyway).
        let symbol: *mut c_void = unsafe { libc::dlsym(handle, c"allot_priority_run_ended".as_ptr()) };
        if !symbol.is_null() {
            // SAFETY: the symbol is the function the priority arm of `slurm_plugin!` emits, with exactly this signature.
            return Some(unsafe { std::mem::transmute::<*mut c_void, RunEndedFn>(symbol) });
        }
    }
    None
}

/// Hands an ended run of `job` to priority/allot. Returns false (and the
/// caller logs) if priority/allot is not loaded in this slurmctld.
pub fn run_ended(job: Job<'_>) -> bool {
    let target = match TARGET.get() {
        Some(t) => *t,
        None => match find() {
            Some(t) => *TARGET.get_or_init(|| t),
            None => return false,
        },
    };
    // SAFETY: `job` is a record valid for this call with the job write lock held (the jobcomp callback's contract), which is what the target requires.
    unsafe { target(job.as_ptr()) };
    true
}
