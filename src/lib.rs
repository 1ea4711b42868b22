//! # allot policy core
//!
//! The rules of allot, as pure functions over plain data: no Slurm, no
//! SQLite, no files, no clock. Callers pass `now` and the data in. The Slurm
//! plugins and the simulator call exactly these functions, so a policy
//! change shows up in both with no second edit.
//!
//! - [`budget`]: the budget tree (TOML), effective shares, who may charge
//!   and who may edit what (`budget/parse.rs` reads the file,
//!   `budget/change.rs` compares two versions and authorises the edit).
//! - [`settings`]: the `[cluster]` table: window, contract cap, grace and
//!   the preemption rules' knobs.
//! - [`occupancy`]: GPU-seconds per leaf over the sliding lookback window.
//! - [`fairshare`]: the level-by-level order of allocations by
//!   occupancy / allocation, and every number behind it.
//! - [`owed`]: what each budget was owed, hour by hour (weighted
//!   water-filling down the tree), for the simulator's and the live reports.
//! - [`order`]: the order of pending jobs and its mapping to Slurm's 32-bit
//!   job priority.
//! - [`contract`]: the per-job contract read from the job comment.
//! - [`preempt`]: who may preempt whom, and when a draining node's jobs go.
//! - [`charge`]: the GPUs a running job is charged: those its CPUs, memory
//!   or GPUs take out of use.
#![forbid(unsafe_code)]

pub mod budget;
pub mod charge;
pub mod contract;
pub mod duration;
pub mod fairshare;
pub mod occupancy;
pub mod order;
pub mod owed;
pub mod preempt;
pub mod settings;
pub mod synthetic;

/// Seconds since the Unix epoch, as Slurm's `time_t`.
pub type UnixTime = i64;
/// A length of time in whole seconds.
pub type Seconds = i64;

/// `allot <version> (<commit>)`, for `--version` and log lines.
pub const BUILD: &str = env!("ALLOT_BUILD");
