//! # allot-slurm: the one unsafe layer between Slurm and allot
//!
//! Raw bindings (`slurm-sys`) -> this thin safe layer -> the pure policy
//! (`allot`). Every `unsafe` block of the plugins lives here, each with a
//! `// SAFETY:` comment:
//!
//! - [`job`]: borrowed views of job records and submission requests;
//! - [`strings`]: C strings, and strings handed to Slurm's allocator;
//! - [`ctld`]: slurmctld's tables and locks, found with `dlsym` at run time;
//! - [`handoff`]: jobcomp/allot telling priority/allot of every ended run;
//! - [`logger`]: a `log` backend writing through Slurm's logger;
//! - [`export`]: the `slurm_plugin!` macro that emits every C symbol, each
//!   behind [`guard`]'s panic catcher with a safe fallback.
//!
//! And the plugins' shared, safe runtime:
//! - [`config`], which reads `allot.conf`;
//! - [`snapshot`]: the budget and ranking read from the ledger off the
//!   locked paths, swapped in atomically;
//! - [`last_good`]: the copy of them kept in `StateSaveLocation`, for a
//!   slurmctld that starts while the ledger cannot be read.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod ctld;
pub mod export;
pub mod fault;
pub mod guard;
pub mod handoff;
pub mod job;
pub mod last_good;
pub mod logger;
pub mod policy;
pub mod snapshot;
pub mod strings;
pub mod unwritten;

pub use export::{JobCompPlugin, JobSubmitPlugin, Plugin, PreemptPlugin, PreemptQuery, PriorityPlugin, Refusal};
pub use libc;
pub use slurm_sys as sys;

/// Now, in Unix seconds: the plugins (not the policy core) read the clock.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// The allot.conf beside slurmctld's slurm.conf, loaded; errors name file and line.
pub fn load_allot_conf() -> Result<config::AllotConf, String> {
    // SAFETY: slurm_conf is libslurmfull's global configuration, read-only after startup; `slurm_conf.slurm_conf` is the path of slurm.conf.
    let slurm_conf = unsafe { strings::borrowed_str((*std::ptr::addr_of!(sys::slurm_conf)).slurm_conf) }.map(str::to_owned);
    let slurm_conf = slurm_conf.or_else(|| std::env::var("SLURM_CONF").ok()).unwrap_or_else(|| "/etc/slurm/slurm.conf".to_owned());
    let path = config::AllotConf::path_beside(std::path::Path::new(&slurm_conf));
    let conf = config::AllotConf::load(&path).map_err(|errors| errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))?;
    if conf.source.is_none() {
        log::info!("no {} found; using defaults (ledger {})", path.display(), conf.ledger);
    }
    Ok(conf)
}

/// The last good copy's path: in slurm.conf's `StateSaveLocation` (None if
/// slurmctld has none configured).
pub fn last_good_path() -> Option<std::path::PathBuf> {
    state_save_location().map(|dir| last_good::path_in(&dir))
}

/// Where the run updates not yet in the ledger are kept across a restart
/// ([`unwritten`]): slurm.conf's `StateSaveLocation`.
pub fn unwritten_path() -> Option<std::path::PathBuf> {
    state_save_location().map(|dir| unwritten::path_in(&dir))
}

fn state_save_location() -> Option<std::path::PathBuf> {
    // SAFETY: slurm_conf is libslurmfull's configuration, read-only after startup; state_save_location is a NUL-terminated string or NULL.
    let dir = unsafe { strings::borrowed_str((*std::ptr::addr_of!(sys::slurm_conf)).state_save_location) }?;
    Some(std::path::PathBuf::from(dir.trim()))
}

/// The name of user `uid`, or the number if it has none.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(uid.into()).ok().flatten().map(|u| u.name).unwrap_or_else(|| uid.to_string())
}

/// slurm.conf's `JobCompType` (`jobcomp/allot` for exact charging).
pub fn jobcomp_type() -> Option<String> {
    // SAFETY: slurm_conf is libslurmfull's configuration, read-only after startup; job_comp_type is a NUL-terminated string or NULL.
    unsafe { strings::borrowed_str((*std::ptr::addr_of!(sys::slurm_conf)).job_comp_type) }.map(str::to_owned)
}

/// slurm.conf's `ClusterName` (Slurm keeps it in lower case): the key of
/// this slurmctld's rows in a ledger that several clusters share.
pub fn cluster_name() -> Option<String> {
    // SAFETY: slurm_conf is libslurmfull's configuration, read-only after startup; cluster_name is a NUL-terminated string or NULL.
    unsafe { strings::borrowed_str((*std::ptr::addr_of!(sys::slurm_conf)).cluster_name) }.map(str::to_owned).filter(|c| !c.is_empty())
}

/// The uid Slurm's daemons run as (`SlurmUser`).
pub fn slurm_user_id() -> u32 {
    // SAFETY: slurm_conf is libslurmfull's configuration, read-only after startup.
    unsafe { (*std::ptr::addr_of!(sys::slurm_conf)).slurm_user_id }
}
