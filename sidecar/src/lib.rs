//! The `allot` command's building blocks, as a library so that tests drive
//! the very code the command runs.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod associations;
pub mod budget_cmd;
pub mod cluster_report;
pub mod doctor;
pub mod history;
pub mod identity;
pub mod ledger_cmd;
pub mod report;
pub mod serve;
pub mod sync;
pub mod watch;

/// Now, in Unix seconds. The CLI is the one layer that reads the clock.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// A Unix time as `2026-11-29T10:00:00Z`.
pub fn format_time(t: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t.max(0) as u64)).to_string()
}
