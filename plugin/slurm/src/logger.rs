//! A `log` backend that writes through Slurm's own logger, so that allot's
//! messages land in slurmctld.log with Slurm's timestamps and levels.

use std::ffi::CString;

use slurm_sys as sys;

/// Slurm's logger; every message is prefixed with the plugin's type.
pub struct SlurmLogger {
    prefix: &'static str,
}

fn slurm_level(level: log::Level) -> sys::log_level_t {
    match level {
        log::Level::Error => sys::LOG_LEVEL_ERROR,
        log::Level::Warn | log::Level::Info => sys::LOG_LEVEL_INFO,
        log::Level::Debug => sys::LOG_LEVEL_DEBUG,
        log::Level::Trace => sys::LOG_LEVEL_DEBUG2,
    }
}

/// Slurm's configured level as a `log` filter.
fn current_filter() -> log::LevelFilter {
    // SAFETY: get_log_level reads the logger's level; it is set up before any plugin is loaded and safe to call from any thread.
    let level = unsafe { sys::get_log_level() } as sys::log_level_t;
    match level {
        l if l >= sys::LOG_LEVEL_DEBUG2 => log::LevelFilter::Trace,
        l if l >= sys::LOG_LEVEL_DEBUG => log::LevelFilter::Debug,
        l if l >= sys::LOG_LEVEL_INFO => log::LevelFilter::Info,
        l if l >= sys::LOG_LEVEL_ERROR => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    }
}

impl log::Log for SlurmLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= current_filter()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = match record.level() {
            log::Level::Warn => format!("{}: warning: {}", self.prefix, record.args()),
            _ => format!("{}: {}", self.prefix, record.args()),
        };
        let text = crate::strings::log_line(&text, crate::strings::LOG_LINE_MAX);
        let Ok(text) = CString::new(text) else { return };
        if record.level() == log::Level::Error {
            // error() adds Slurm's "error: " prefix, as Slurm's own plugins show.
            // SAFETY: "%s" with one valid C string argument.
            unsafe { sys::error(c"%s".as_ptr(), text.as_ptr()) };
        } else {
            // SAFETY: "%s" with one valid C string argument.
            unsafe { sys::log_var(slurm_level(record.level()), c"%s".as_ptr(), text.as_ptr()) };
        }
    }

    fn flush(&self) {}
}

/// Routes this plugin's `log` macros to Slurm. The `log` crate's logger is
/// per shared object, so each plugin installs its own; a second call is a
/// no-op (slurmctld may `init` a plugin again after `fini`).
pub fn init(prefix: &'static str) {
    static LOGGER: std::sync::OnceLock<SlurmLogger> = std::sync::OnceLock::new();
    let logger = LOGGER.get_or_init(|| SlurmLogger { prefix });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}
