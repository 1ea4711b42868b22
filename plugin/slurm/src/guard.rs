//! Panics must never unwind into slurmctld: every exported function runs
//! through [`guard`], which catches a panic, logs it through Slurm and
//! returns the callback's safe fallback instead. It also gives slurmctld
//! back the `errno` it called with: slurmctld reads errno after some calls
//! that follow a plugin hook (see [`clear_errno`]), and a hook's own system
//! calls, such as a futex wait on a contended lock that ends with EAGAIN,
//! must not turn into someone's error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// Sends panic messages to Slurm's log instead of stderr (which slurmctld
/// usually discards). The hook belongs to this shared object's copy of std,
/// so it affects this plugin only.
pub fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            log::error!("internal error (panic){place}: {message}");
        }));
    });
}

/// The calling thread's errno.
fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value };
}

/// Sets errno to 0 ("no error"). For the one place slurmctld reads a stale
/// errno as the answer: when a job update changes its partition or account
/// and Slurm keeps no accounting (no slurmdbd), `_update_job` takes
/// `error_code = errno` after an association lookup that rightly finds
/// none, so whatever errno the RPC thread last left (24.11's non-blocking
/// sockets leave EAGAIN) fails a valid `scontrol update` with "Resource
/// temporarily unavailable": 8 of 20 fresh jobs' updates on 24.11.5 with
/// Slurm's own plugins. job_modify runs just before, with nothing in
/// between that sets errno, so clearing it when it accepts an update makes
/// such updates reliable.
pub fn clear_errno() {
    set_errno(0);
}

/// Runs `f`; if it panics, logs which callback failed and returns
/// `fallback`. Either way errno is what it was on entry.
pub fn guard<T>(callback: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    let saved = errno();
    let value = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(_) => {
            // The hook already logged the message and place.
            log::error!("{callback} failed; answered with its safe fallback so slurmctld carries on");
            fallback
        }
    };
    set_errno(saved);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_errno_survives_the_hook() {
        set_errno(0);
        let v = guard("test", 0, || {
            set_errno(libc::EAGAIN);
            5
        });
        assert_eq!((v, errno()), (5, 0));
        set_errno(libc::ENOENT);
        guard("test", (), || set_errno(libc::EAGAIN));
        assert_eq!(errno(), libc::ENOENT);
    }

    #[test]
    fn a_panic_becomes_the_fallback() {
        assert_eq!(guard("test", 7, || 1), 1);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        assert_eq!(guard("test", 7, || -> i32 { panic!("boom") }), 7);
        std::panic::set_hook(prev);
    }
}
