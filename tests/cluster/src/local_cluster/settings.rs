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
    /// Slurm's own as a lab runs them without allot
    /// (conf/slurm-multifactor.conf: priority/multifactor with fair share,
    /// preempt/qos); needs accounting, whose slurmdbd the fair share reads.
    Multifactor,
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
            Plugins::Multifactor => "multifactor",
            Plugins::Allot | Plugins::Installed => "allot",
        }
    }

    pub fn parse(s: &str) -> Result<Plugins> {
        match s {
            "stock" => Ok(Plugins::Stock),
            "multifactor" => Ok(Plugins::Multifactor),
            "allot" => Ok(Plugins::Allot),
            "installed" => Ok(Plugins::Installed),
            _ => Err(format!("--plugins must be stock, multifactor, allot or installed, not '{s}'")),
        }
    }
}

/// How to bring a cluster up. [`Settings::from_env`] reads the variables
/// the scripts set (the names in brackets).
#[derive(Clone, Debug)]
pub struct Settings {
    pub plugins: Plugins,
    /// slurmctld listens on it, slurmd n1..nN on the next N; accounting
    /// takes base+N+1 (MariaDB) and base+N+2 (slurmdbd): 5 and 6 with four
    /// nodes [ALLOT_PORT_BASE, 17000].
    pub port_base: u16,
    /// The cluster's size: nodes, and each node's GPUs, CPUs and memory
    /// (MB) as slurm.conf declares them [ALLOT_NODES 4,
    /// ALLOT_GPUS_PER_NODE 8, ALLOT_CPUS_PER_NODE 32, ALLOT_MEMORY_PER_NODE
    /// 64000]. Each node is a slurmd of its own on this host.
    pub size: Size,
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
    /// The last K nodes kept for small jobs: partition gpu without them,
    /// partition small with all of them, SmallJobPartition=small
    /// [ALLOT_SMALL_JOB_NODES, default the shipped rule: one node per 100
    /// or part of it, none on a one-node cluster ([`Size::shipped_kept_nodes`]),
    /// 1 with four nodes; at most all but one].
    pub small_job_nodes: u32,
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
            size: Size::default(),
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

impl Settings {
    /// The accounting ports, after the nodes': MariaDB's and slurmdbd's.
    pub fn db_port(&self) -> u16 {
        self.port_base + self.size.nodes as u16 + 1
    }
    pub fn dbd_port(&self) -> u16 {
        self.port_base + self.size.nodes as u16 + 2
    }
}

/// A cluster's size (see [`Settings::size`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    /// Megabytes.
    pub memory_per_node: u64,
}

impl Default for Size {
    fn default() -> Size {
        Size { nodes: 4, gpus_per_node: 8, cpus_per_node: 32, memory_per_node: 64000 }
    }
}

impl Size {
    /// The most nodes a cluster may have here (one port and one slurmd each).
    pub const MAX_NODES: u32 = 1024;

    /// The node names, n1..nN.
    pub fn node_names(&self) -> Vec<String> {
        (1..=self.nodes).map(|i| format!("n{i}")).collect()
    }

    /// Every node in Slurm's host-list form: `n[1-N]` (`n1` for one).
    pub fn node_list(&self) -> String {
        node_range(1, self.nodes)
    }

    /// The nodes kept for small jobs by the shipped rule (conf/allot.conf,
    /// the admin guide's "Debug jobs under overload"): one node per 100 or
    /// part of it, none on a one-node cluster.
    pub fn shipped_kept_nodes(&self) -> u32 {
        if self.nodes <= 1 {
            0
        } else {
            self.nodes.div_ceil(100)
        }
    }

    pub fn gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// The size as `up` records it in DIR/etc/size for the later steps.
    pub fn record(&self) -> String {
        format!("nodes={} gpus_per_node={} cpus_per_node={} memory_per_node={}\n", self.nodes, self.gpus_per_node, self.cpus_per_node, self.memory_per_node)
    }

    /// A size from [`Size::record`]'s text.
    pub fn parse_record(text: &str) -> Option<Size> {
        let mut size = Size::default();
        for word in text.split_whitespace() {
            let (key, value) = word.split_once('=')?;
            match key {
                "nodes" => size.nodes = value.parse().ok()?,
                "gpus_per_node" => size.gpus_per_node = value.parse().ok()?,
                "cpus_per_node" => size.cpus_per_node = value.parse().ok()?,
                "memory_per_node" => size.memory_per_node = value.parse().ok()?,
                _ => return None,
            }
        }
        Some(size)
    }
}

/// Nodes `first..=last` in Slurm's host-list form.
pub fn node_range(first: u32, last: u32) -> String {
    if first == last {
        format!("n{first}")
    } else {
        format!("n[{first}-{last}]")
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
        let size = Size {
            nodes: number("ALLOT_NODES", d.size.nodes, 1..=Size::MAX_NODES, &format!("a number of nodes, 1 to {}", Size::MAX_NODES))?,
            gpus_per_node: number("ALLOT_GPUS_PER_NODE", d.size.gpus_per_node, 1..=64, "a number of GPUs, 1 to 64")?,
            cpus_per_node: number("ALLOT_CPUS_PER_NODE", d.size.cpus_per_node, 1..=4096, "a number of CPUs, 1 to 4096")?,
            memory_per_node: number("ALLOT_MEMORY_PER_NODE", d.size.memory_per_node, 1000..=1 << 24, "megabytes, 1000 to 16777216")?,
        };
        let port_base = number("ALLOT_PORT_BASE", d.port_base, 1024..=65530, "a number in 1024..65530")?;
        if u32::from(port_base) + size.nodes + 2 > 65535 {
            return Err(format!("ALLOT_NODES={}: the nodes' ports do not fit above ALLOT_PORT_BASE={port_base}", size.nodes));
        }
        Ok(Settings {
            plugins,
            port_base,
            size,
            cluster_name,
            recompute_period: number("ALLOT_RECOMPUTE_PERIOD", d.recompute_period, 1..=u32::MAX, "a number of seconds")?,
            grace: number("ALLOT_GRACE_TIME", d.grace, 0..=u32::MAX, "a number of seconds")?,
            shipped: flag("ALLOT_SHIPPED_SETTINGS")?,
            cpu_only: flag("ALLOT_CPU_ONLY")?,
            small_job_nodes: number(
                "ALLOT_SMALL_JOB_NODES",
                size.shipped_kept_nodes(),
                0..=size.nodes - 1,
                &format!("0 to {} (all but one of ALLOT_NODES={})", size.nodes - 1, size.nodes),
            )?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_nodes_follow_the_shipped_rule_and_a_size_round_trips() {
        let size = |nodes| Size { nodes, ..Size::default() };
        assert_eq!([1, 2, 4, 16, 100, 101, 128, 1024].map(|n| size(n).shipped_kept_nodes()), [0, 1, 1, 1, 1, 2, 2, 11]);
        assert_eq!((size(1).node_list(), size(128).node_list()), ("n1".to_owned(), "n[1-128]".to_owned()));
        let s = Size { nodes: 128, gpus_per_node: 4, cpus_per_node: 64, memory_per_node: 512000 };
        assert_eq!(Size::parse_record(&s.record()), Some(s));
        assert_eq!(Size::parse_record("nodes=x"), None);
    }
}
