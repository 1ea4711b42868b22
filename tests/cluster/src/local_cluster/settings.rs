//! How to bring a cluster up ([`Settings`]), from the environment
//! variables the scripts set.

use std::path::PathBuf;
use std::time::Duration;

use super::Result;

/// Which plugins the cluster's slurm.conf loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugins {
    /// Slurm's own (conf/slurm-stock.conf): the baseline.
    Stock,
    /// allot's, built by cargo, installed into DIR/plugins first
    /// (scripts/install-plugins.sh), with conf/slurm-allot.conf.
    Allot,
    /// allot's as already installed in Slurm's own PluginDir (the Debian
    /// package), with conf/slurm-allot.conf.
    Installed,
}

impl Plugins {
    /// The snippet of conf/ the cluster includes: slurm-NAME.conf.
    pub fn snippet_name(self) -> &'static str {
        match self {
            Plugins::Stock => "stock",
            Plugins::Allot | Plugins::Installed => "allot",
        }
    }

    pub fn parse(s: &str) -> Result<Plugins> {
        match s {
            "stock" => Ok(Plugins::Stock),
            "allot" => Ok(Plugins::Allot),
            "installed" => Ok(Plugins::Installed),
            _ => Err(format!("--plugins must be stock, allot or installed, not '{s}'")),
        }
    }
}

/// How to bring a cluster up. [`Settings::from_env`] reads the variables
/// the scripts set (the names in brackets).
#[derive(Clone, Debug)]
pub struct Settings {
    pub plugins: Plugins,
    /// slurmctld listens on it, slurmd n1..n4 on the next four; accounting
    /// takes base+5 (MariaDB) and base+6 (slurmdbd) [ALLOT_PORT_BASE, 17000].
    pub port_base: u16,
    /// slurm.conf's ClusterName: the key of this cluster's rows when several
    /// share one server ledger [ALLOT_CLUSTER_NAME, allot].
    pub cluster_name: String,
    /// allot.conf's RecomputePeriod and GraceTime, seconds
    /// [ALLOT_RECOMPUTE_PERIOD 2, ALLOT_GRACE_TIME 5: test speed].
    pub recompute_period: u32,
    pub grace: u32,
    /// Everything as shipped in conf/, for benchmarks: the snippet's
    /// scheduler settings and allot.conf's period and grace (the two above
    /// are then ignored) [ALLOT_SHIPPED_SETTINGS=1].
    pub shipped: bool,
    /// Nodes without GPUs, for a budget with charge = "cpus" [ALLOT_CPU_ONLY=1].
    pub cpu_only: bool,
    /// The last K nodes (0-3) kept for small jobs: partition gpu without
    /// them, partition small with all four, SmallJobPartition=small
    /// [ALLOT_SMALL_JOB_NODES, 1: the shipped layout].
    pub small_job_nodes: u8,
    /// Slurm's accounting: a private MariaDB and slurmdbd under DIR/db
    /// [ALLOT_ACCOUNTING=1].
    pub accounting: bool,
    /// An EpilogSlurmctld that appends Slurm's record of every run end to
    /// DIR/log/run-ends.log [ALLOT_RUN_LOG=1].
    pub run_log: bool,
    /// A server ledger (LedgerUrl) instead of DIR/ledger.db [ALLOT_LEDGER_URL].
    pub ledger_url: Option<String>,
    /// A primary and a backup slurmctld (Slurm's own HA, sharing DIR/state)
    /// [ALLOT_BACKUP_CTLD=1]; Slurm 22.05 only unless
    /// [ALLOT_BACKUP_CTLD_ANY_RELEASE=1].
    pub backup_ctld: bool,
    pub backup_ctld_any_release: bool,
    /// SlurmctldTimeout with a backup, at least 4 [ALLOT_CTLD_TIMEOUT, 5].
    pub ctld_timeout: u32,
    /// How long `up` waits for four idle nodes [ALLOT_UP_TIMEOUT, 30 s].
    pub up_timeout: Duration,
    /// Where the allot plugins were built [CARGO_TARGET_DIR, else the
    /// release's target directory].
    pub plugins_target: Option<PathBuf>,
    /// Slurm's own PluginDir, as the daemons see it [ALLOT_SYSTEM_PLUGIN_DIR,
    /// else found].
    pub system_plugin_dir: Option<String>,
    /// allot's fault points armed in slurmctld (allot_slurm::fault), e.g.
    /// `job_submit` or `priority_walk@2` [ALLOT_INJECT_FAULT].
    pub inject_fault: Option<String>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            plugins: Plugins::Stock,
            port_base: 17000,
            cluster_name: "allot".into(),
            recompute_period: 2,
            grace: 5,
            shipped: false,
            cpu_only: false,
            small_job_nodes: 1,
            accounting: false,
            run_log: false,
            ledger_url: None,
            backup_ctld: false,
            backup_ctld_any_release: false,
            ctld_timeout: 5,
            up_timeout: Duration::from_secs(30),
            plugins_target: None,
            system_plugin_dir: None,
            inject_fault: None,
        }
    }
}

/// A variable's value, if set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A 0-or-1 variable.
fn flag(name: &str) -> Result<bool> {
    match var(name).as_deref() {
        None | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => Err(format!("{name} must be 0 or 1, got '{v}'")),
    }
}

/// A number variable within `range`, or its default.
fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(name: &str, default: T, range: std::ops::RangeInclusive<T>, what: &str) -> Result<T> {
    match var(name) {
        None => Ok(default),
        Some(v) => v.parse::<T>().ok().filter(|n| range.contains(n)).ok_or_else(|| format!("{name}={v}: need {what}")),
    }
}

impl Settings {
    /// The settings the environment gives (scripts/cluster.sh's variables).
    pub fn from_env(plugins: Plugins) -> Result<Settings> {
        let d = Settings::default();
        let cluster_name = var("ALLOT_CLUSTER_NAME").unwrap_or(d.cluster_name);
        let name_ok = cluster_name.len() <= 40
            && cluster_name.starts_with(|c: char| c.is_ascii_lowercase())
            && cluster_name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !name_ok {
            return Err(format!("ALLOT_CLUSTER_NAME must be a lower-case name (letters, digits, _ and -, at most 40), got '{cluster_name}'"));
        }
        Ok(Settings {
            plugins,
            port_base: number("ALLOT_PORT_BASE", d.port_base, 1024..=65530, "a number in 1024..65530")?,
            cluster_name,
            recompute_period: number("ALLOT_RECOMPUTE_PERIOD", d.recompute_period, 1..=u32::MAX, "a number of seconds")?,
            grace: number("ALLOT_GRACE_TIME", d.grace, 0..=u32::MAX, "a number of seconds")?,
            shipped: flag("ALLOT_SHIPPED_SETTINGS")?,
            cpu_only: flag("ALLOT_CPU_ONLY")?,
            small_job_nodes: number("ALLOT_SMALL_JOB_NODES", d.small_job_nodes, 0..=3, "0 to 3")?,
            accounting: flag("ALLOT_ACCOUNTING")?,
            run_log: flag("ALLOT_RUN_LOG")?,
            ledger_url: var("ALLOT_LEDGER_URL"),
            backup_ctld: flag("ALLOT_BACKUP_CTLD")?,
            backup_ctld_any_release: flag("ALLOT_BACKUP_CTLD_ANY_RELEASE")?,
            ctld_timeout: number("ALLOT_CTLD_TIMEOUT", d.ctld_timeout, 4..=u32::MAX, "a number of seconds, at least 4")?,
            up_timeout: Duration::from_secs(number("ALLOT_UP_TIMEOUT", 30, 1..=u64::MAX, "a number of seconds")?),
            plugins_target: var("CARGO_TARGET_DIR").map(PathBuf::from),
            system_plugin_dir: var("ALLOT_SYSTEM_PLUGIN_DIR"),
            inject_fault: var("ALLOT_INJECT_FAULT"),
        })
    }
}
