//! Panics must never unwind into slurmctld: every exported function runs
//! through [`guard`], which catches a panic, logs it through Slurm and
//! returns the callback's safe fallback instead.

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

/// Runs `f`; if it panics, logs which callback failed and returns `fallback`.
pub fn guard<T>(callback: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(_) => {
            // The hook already logged the message and place.
            log::error!("{callback} failed; answered with its safe fallback so slurmctld carries on");
            fallback
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_fallback() {
        assert_eq!(guard("test", 7, || 1), 1);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        assert_eq!(guard("test", 7, || -> i32 { panic!("boom") }), 7);
        std::panic::set_hook(prev);
    }
}
