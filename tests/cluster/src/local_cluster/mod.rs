//! A real four-node Slurm cluster on this one machine, for allot's demo,
//! benchmarks and integration tests: its own munged, one slurmctld (or a
//! primary and a backup) and four slurmd (n1..n4, 8 fake GPUs each),
//! everything under one directory. The release's Slurm comes from
//! scripts/release.sh ([`Release`]): this host's (22.05), a Debian 13 root
//! whose daemons and commands run chrooted (24.11: the directory must then
//! lie inside that root, and the daemons see it without the root's
//! prefix), or a site build under its prefix.
//!
//! The tests use it through [`crate::TestCluster`]; the scripts through
//! the `allot-cluster` command (scripts/cluster.sh), whose usage says what
//! each step does and which environment variables set [`Settings`].
//! Needs root (SlurmUser=root, mknod).

mod config;
mod daemons;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub use crate::release::Release;
use crate::repo;
use config::set_mode;

/// The nodes, each a slurmd of its own on this host.
pub const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
/// Fake GPUs per node (character devices cloned from /dev/null).
pub const GPUS_PER_NODE: u32 = 8;

/// What went wrong, in words for whoever started the cluster.
pub type Result<T> = std::result::Result<T, String>;

/// A line of progress, as scripts/cluster.sh always printed it.
pub(crate) fn say(line: &str) {
    println!("cluster: {line}");
}

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
        })
    }
}

/// Which of the two slurmctld (with a backup; else the only one is the
/// primary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Backup,
}

impl Role {
    pub fn parse(s: &str) -> Result<Role> {
        match s {
            "primary" => Ok(Role::Primary),
            "backup" => Ok(Role::Backup),
            _ => Err(format!("which slurmctld: primary or backup, not '{s}'")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Backup => "backup",
        }
    }

    /// Its daemon's name (its pid record and logs).
    fn daemon(self) -> &'static str {
        match self {
            Role::Primary => "slurmctld",
            Role::Backup => "slurmctld-backup",
        }
    }
}

/// One cluster's directory, for one release.
#[derive(Clone, Debug)]
pub struct LocalCluster {
    pub release: Release,
    /// The directory on this host (canonical).
    pub dir: PathBuf,
    /// The directory as the daemons see it (inside the release's root).
    pub inner: PathBuf,
}

impl LocalCluster {
    /// The cluster in `dir` (created if `create`), which must be a simple
    /// path: Slurm's configuration parser splits on white space.
    pub fn open(release: &Release, dir: &Path, create: bool) -> Result<LocalCluster> {
        if create {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        if !dir.is_dir() {
            return Err(format!("{} does not exist", dir.display()));
        }
        let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
        let simple = dir.to_str().is_some_and(|s| s.chars().all(|c| c.is_ascii_alphanumeric() || "_./+-".contains(c)));
        if !simple {
            return Err(format!("DIR '{}' may only contain letters, digits and _ . / + -", dir.display()));
        }
        let inner = match &release.root {
            Some(root) => {
                let root = root.canonicalize().map_err(|_| {
                    format!("Slurm {}'s root {} is missing: run scripts/install-deps.sh --slurm {}", release.name, root.display(), release.name)
                })?;
                let rel = dir.strip_prefix(&root).map_err(|_| {
                    format!("DIR '{}' must lie inside Slurm {}'s root {} (the daemons run chrooted there)", dir.display(), release.name, root.display())
                })?;
                Path::new("/").join(rel)
            }
            None => dir.clone(),
        };
        Ok(LocalCluster { release: release.clone(), dir, inner })
    }

    fn etc(&self) -> PathBuf {
        self.dir.join("etc")
    }
    fn conf(&self) -> PathBuf {
        self.etc().join("slurm.conf")
    }
    fn pids(&self) -> PathBuf {
        self.dir.join("pids")
    }
    fn logs(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// slurm.conf as the daemons and commands see it (`SLURM_CONF`).
    pub fn slurm_conf(&self) -> PathBuf {
        self.inner.join("etc/slurm.conf")
    }

    /// What every process of the cluster gets: SLURM_CONF, and a site
    /// build's commands first on PATH.
    fn slurm_env(&self, c: &mut Command) {
        c.env("SLURM_CONF", self.slurm_conf());
        if let Some(path) = self.release.path_env() {
            c.env("PATH", path);
        }
    }

    /// A Slurm command (or another of the release's programs), chrooted
    /// into the release's root if it has one, given at most `timeout`
    /// (coreutils' timeout(1)).
    fn release_command(&self, timeout: Option<u64>, program: &str) -> Command {
        let mut argv: Vec<String> = Vec::new();
        if let Some(root) = &self.release.root {
            argv.extend(["chroot".into(), root.display().to_string()]);
        }
        argv.push(program.into());
        let mut c = match timeout {
            Some(secs) => {
                let mut c = Command::new("timeout");
                c.arg(secs.to_string()).args(&argv);
                c
            }
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        self.slurm_env(&mut c);
        c.stdin(Stdio::null());
        c
    }

    /// Runs a release command; its output (None if it could not start).
    fn run(&self, timeout: Option<u64>, program: &str, args: &[&str]) -> Option<Output> {
        self.release_command(timeout, program).args(args).output().ok()
    }

    /// Whether a release command succeeds.
    fn succeeds(&self, timeout: Option<u64>, program: &str, args: &[&str]) -> bool {
        self.run(timeout, program, args).is_some_and(|o| o.status.success())
    }

    fn has_backup_ctld(&self) -> bool {
        self.etc().join("ctld-hosts").is_file()
    }

    /// The shell lines that point Slurm's commands at this cluster.
    pub fn env_lines(&self) -> String {
        let mut out = format!("export SLURM_CONF={}\nexport ALLOT_CLUSTER_DIR={}\n", self.slurm_conf().display(), self.dir.display());
        if let Some(prefix) = &self.release.prefix {
            out.push_str(&format!("export PATH={}/bin:{}/sbin:$PATH\n", prefix.display(), prefix.display()));
        }
        out
    }

    /// The last `n` lines of every log: a daemon run with -D writes its log
    /// to stderr too, so NAME.stderr shows only where there is no NAME.log
    /// (munged; or a daemon that died before opening its log file).
    pub fn logs_tail(&self, n: usize) -> String {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.logs()).map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect()).unwrap_or_default();
        files.sort();
        let mut out = String::new();
        for f in files {
            let Ok(bytes) = std::fs::read(&f) else { continue };
            if bytes.is_empty() {
                continue;
            }
            if f.extension().is_some_and(|e| e == "stderr") && std::fs::metadata(f.with_extension("log")).is_ok_and(|m| m.len() > 0) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("==> {} <==\n", f.display()));
            for l in &lines[lines.len().saturating_sub(n)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Polls `check` until it holds; fails on timeout or if a recorded
    /// daemon died meanwhile.
    fn wait_for(&self, what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !check() {
            if Instant::now() >= deadline {
                return Err(format!("timed out after {}s waiting for {what}", timeout.as_secs()));
            }
            for name in self.daemon_names() {
                if self.pids().join(format!("{name}.pid")).is_file() && self.live_pid(&name).is_none() {
                    return Err(format!("{name} died while waiting for {what}"));
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Nodes in the given states, each counted once (sinfo -N lists a node
    /// once per partition).
    fn nodes_in(&self, states: &[&str]) -> usize {
        let Some(out) = self.run(Some(5), "sinfo", &["-h", "-N", "-o", "%N %t"]) else { return 0 };
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        lines.sort();
        lines.dedup();
        lines.iter().filter(|l| l.split_whitespace().nth(1).is_some_and(|s| states.contains(&s))).count()
    }

    fn nodes_idle(&self) -> bool {
        self.nodes_in(&["idle"]) == NODES.len()
    }

    fn nodes_responding(&self) -> bool {
        self.nodes_in(&["idle", "mix", "alloc", "comp"]) == NODES.len()
    }

    fn scontrol_pings(&self) -> bool {
        self.succeeds(None, "scontrol", &["ping"])
    }

    /// Whether `scontrol ping` reports each of these slurmctld UP.
    fn ctlds_up(&self, roles: &[Role]) -> bool {
        let out = self.run(Some(10), "scontrol", &["ping"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        roles.iter().all(|r| out.lines().any(|l| l.starts_with(&format!("Slurmctld({}) at ", r.as_str())) && l.ends_with(" is UP")))
    }

    // ---- down ----------------------------------------------------------

    /// Cancels all jobs, stops every daemon it recorded (SIGTERM, SIGKILL
    /// after a timeout) and any slurmstepd left from this cluster. Safe on
    /// a half-started or already stopped cluster. Keeps DIR's files.
    pub fn down(&self) -> Result<()> {
        let started = Instant::now();
        // 1. Cancel every job while slurmctld can still do it cleanly: a job
        //    left running keeps its slurmstepd (and the job) alive after
        //    slurmd exits.
        let ctld = self.live_pid("slurmctld").is_some() || self.live_pid("slurmctld-backup").is_some();
        if ctld && self.live_pid("munged").is_some() {
            let jobs = self.run(Some(10), "squeue", &["-h", "-o", "%A"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            let jobs: Vec<&str> = jobs.split_whitespace().collect();
            if !jobs.is_empty() {
                say(&format!("cancelling {} job(s)", jobs.len()));
                let _ = self.run(Some(20), "scancel", &jobs);
                // Until nothing runs or completes any more (epilogs, step teardown).
                let deadline = Instant::now() + Duration::from_secs(15);
                while Instant::now() < deadline {
                    let left = self.run(Some(5), "squeue", &["-h", "-t", "R,CG,CF,S,SO,SI", "-o", "%A"]);
                    if left.is_some_and(|o| o.stdout.iter().all(u8::is_ascii_whitespace)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
        }
        // 2. slurmd and slurmctld together (slurmd takes ~2 s); then
        //    slurmdbd, which slurmctld reports to until it stops, and its
        //    database; munged last: the others may still talk to it while
        //    shutting down.
        let last = ["slurmdbd", "mariadbd", "munged"];
        let stopping: Vec<String> = self.daemon_names().into_iter().filter(|n| !last.contains(&n.as_str()) && self.terminate(n)).collect();
        if !stopping.is_empty() {
            say(&format!("stopping {}", stopping.join(" ")));
        }
        self.wait_gone(Duration::from_secs(20), &stopping);
        for name in last {
            if self.terminate(name) {
                self.wait_gone(Duration::from_secs(20), &[name.to_owned()]);
            }
        }
        // 3. Whatever slurmstepd (and job processes under it) this cluster left.
        self.kill_leftovers();
        self.wait_reaped(Duration::from_secs(3));
        if let Ok(d) = std::fs::read_dir(self.pids()) {
            for e in d.flatten() {
                if e.path().extension().is_some_and(|x| x == "pid") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        say(&format!("down: {} ({}s)", self.dir.display(), started.elapsed().as_secs()));
        Ok(())
    }

    // ---- up ------------------------------------------------------------

    /// Wipes the directory's Slurm state, spool, logs and pids (keeping
    /// DIR/plugins, DIR/jobs, the munge key and DIR/ledger.db), makes
    /// DIR/jobs (mode 1777: any user may submit from it and write job files
    /// there), writes DIR/etc, starts the daemons and waits until the four
    /// nodes are idle. A directory whose daemons still run is refused. On
    /// failure it stops what it started; the error ends with the logs.
    pub fn up(&self, s: &Settings) -> Result<String> {
        let started = Instant::now();
        self.check_before_up(s)?;
        // Plugins before anything else: nothing to clean up if they are missing.
        mkdir(&self.dir.join("plugins"))?;
        if s.plugins == Plugins::Allot {
            let target = s.plugins_target.clone().unwrap_or_else(|| self.release.target.clone());
            let out = Command::new(repo().join("scripts/install-plugins.sh"))
                .arg(self.dir.join("plugins"))
                .env("CARGO_TARGET_DIR", &target)
                .output()
                .map_err(|e| format!("scripts/install-plugins.sh: {e}"))?;
            print!("{}", String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
            }
        }
        let system_plugin_dir = self.system_plugin_dir(s)?;
        let plugin_dir = match s.plugins {
            // allot's plugins first: a PluginDir search takes the first
            // file of a name, and an installed package's copies must not
            // shadow the ones under test.
            Plugins::Stock | Plugins::Allot => format!("{}:{system_plugin_dir}", self.inner.join("plugins").display()),
            Plugins::Installed => {
                let on_host = self.release.root.clone().unwrap_or_default().join(system_plugin_dir.trim_start_matches('/'));
                if !on_host.join("priority_allot.so").is_file() {
                    return Err(format!("--plugins installed: no priority_allot.so in {} (install allot's package first)", on_host.display()));
                }
                system_plugin_dir
            }
        };
        self.prepare_directory()?;
        self.write_config(s, &plugin_dir)?;
        // From here on a failure stops whatever was started, then shows the logs.
        self.start_all(s).map_err(|e| {
            eprintln!("cluster: up failed; stopping the daemons");
            let _ = self.down();
            format!("{e}\ncluster: daemon logs:\n{}", self.logs_tail(30))
        })?;
        let mut with = String::new();
        if s.accounting {
            with = format!(", slurmdbd on port {}, MariaDB on {}", s.port_base + 6, s.port_base + 5);
        }
        let ctlds = if s.backup_ctld {
            format!("slurmctld ctl1 (127.0.0.1, primary) and ctl2 (127.0.0.2, backup) on port {}, SlurmctldTimeout={}", s.port_base, s.ctld_timeout)
        } else {
            format!("slurmctld port {}", s.port_base)
        };
        let root = self.release.root.as_ref().map(|r| format!(" (in {})", r.display())).unwrap_or_default();
        Ok(format!(
            "up: {} with {} plugins, Slurm {}{root}{with}, {ctlds}, nodes {} on {}-{}, {}x{GPUS_PER_NODE} GPUs, in {} ms",
            self.dir.display(),
            match s.plugins {
                Plugins::Stock => "stock",
                Plugins::Allot => "allot",
                Plugins::Installed => "installed",
            },
            self.release.version,
            NODES.join(" "),
            s.port_base + 1,
            s.port_base + NODES.len() as u16,
            NODES.len(),
            started.elapsed().as_millis()
        ))
    }

    /// What `up` checks before it touches anything: root, the release's
    /// programs, no daemon of this cluster running, free ports.
    fn check_before_up(&self, s: &Settings) -> Result<()> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err("must run as root (SlurmUser=root, mknod)".into());
        }
        let release = &self.release.name;
        let in_root = self.release.root.as_ref().map(|r| format!(" in {}", r.display())).unwrap_or_default();
        for tool in ["munged", "mungekey", "slurmctld", "slurmd", "sinfo", "squeue", "scancel", "scontrol"] {
            if !self.succeeds(None, "sh", &["-c", &format!("command -v {tool}")]) {
                return Err(format!("{tool} not found{in_root}: run scripts/install-deps.sh --slurm {release}"));
            }
        }
        for tool in ["setsid", "pgrep", "timeout"] {
            if !host_has(tool) {
                return Err(format!("{tool} not found: run scripts/install-deps.sh"));
            }
        }
        self.prepare_root()?;
        for name in self.daemon_names() {
            if let Some(pid) = self.live_pid(&name) {
                return Err(format!(
                    "a cluster is already running in {} ({name}, pid {pid}): run 'scripts/cluster.sh down {}' first",
                    self.dir.display(),
                    self.dir.display()
                ));
            }
        }
        if s.backup_ctld {
            if release != "22.05" && !s.backup_ctld_any_release {
                return Err(format!(
                    "ALLOT_BACKUP_CTLD=1 is for Slurm 22.05 (this host's) only, not {release}: from 24.11 on, a primary that starts while the backup is in control waits ~29 s for the backup's REQUEST_CONTROL reply (\"backup not completely done relinquishing control. Old state possible\") and may recover state older than the backup's last changes (a job the backup started was killed: \"Job credential revoked\"). ALLOT_BACKUP_CTLD_ANY_RELEASE=1 starts it anyway"
                ));
            }
            for tool in ["unshare", "hostname", "mount"] {
                if !host_has(tool) {
                    return Err(format!("{tool} not found (ALLOT_BACKUP_CTLD=1 needs util-linux and hostname)"));
                }
            }
            if port_in_use(s.port_base, [127, 0, 0, 2]) {
                return Err(format!("port {} is in use on 127.0.0.2 (another cluster? set ALLOT_PORT_BASE)", s.port_base));
            }
        }
        let last = s.port_base + NODES.len() as u16 + if s.accounting { 2 } else { 0 };
        for port in s.port_base..=last {
            if port_in_use(port, [127, 0, 0, 1]) {
                return Err(format!("port {port} is in use (another cluster? set ALLOT_PORT_BASE)"));
            }
        }
        Ok(())
    }

    /// A release root's /proc (mounted once and left mounted: later clusters
    /// use it too; scripts/test.sh unmounts it when done), this host's name
    /// resolution (slurm.conf's SlurmctldHost=localhost means this host's
    /// short name) and its ordinary users with the same uids (slurmctld
    /// there resolves job owners, and the tests' users submit).
    fn prepare_root(&self) -> Result<()> {
        let Some(root) = &self.release.root else { return Ok(()) };
        let proc_dir = root.join("proc");
        if !Command::new("mountpoint").arg("-q").arg(&proc_dir).status().is_ok_and(|s| s.success())
            && !Command::new("mount").args(["-t", "proc", "proc"]).arg(&proc_dir).status().is_ok_and(|s| s.success())
        {
            return Err(format!("cannot mount /proc in {}", root.display()));
        }
        for f in ["/etc/hosts", "/etc/hostname"] {
            let Ok(host) = std::fs::read(f) else { continue };
            let copy = root.join(f.trim_start_matches('/'));
            if std::fs::read(&copy).ok().as_ref() != Some(&host) {
                std::fs::write(&copy, &host).map_err(|e| format!("{}: {e}", copy.display()))?;
            }
        }
        let passwd = Command::new("getent").arg("passwd").output().map_err(|e| format!("getent passwd: {e}"))?;
        for line in String::from_utf8_lossy(&passwd.stdout).lines() {
            let fields: Vec<&str> = line.split(':').collect();
            let (Some(name), Some(Ok(uid))) = (fields.first(), fields.get(2).map(|u| u.parse::<u32>())) else { continue };
            if !(1000..60000).contains(&uid) {
                continue;
            }
            let in_root = |args: &[&str]| Command::new("chroot").arg(root).args(args).output().ok();
            if !in_root(&["getent", "passwd", name]).is_some_and(|o| o.status.success()) {
                let ok = Command::new("useradd")
                    .arg("--root")
                    .arg(root)
                    .args(["--uid", &uid.to_string(), "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    return Err(format!("cannot add user {name} ({uid}) to {}", root.display()));
                }
            }
            let there = in_root(&["id", "-u", name]).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
            if there != uid.to_string() {
                return Err(format!("user {name} has uid {there} in {}, {uid} here", root.display()));
            }
        }
        Ok(())
    }

    /// Slurm's own plugin directory, as the daemons see it (inside the root).
    fn system_plugin_dir(&self, s: &Settings) -> Result<String> {
        if let Some(d) = &s.system_plugin_dir {
            return Ok(d.clone());
        }
        let root = self.release.root.clone().unwrap_or_else(|| PathBuf::from("/"));
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(prefix) = &self.release.prefix {
            candidates.push(prefix.join("lib/slurm"));
        }
        if let Ok(d) = std::fs::read_dir(root.join("usr/lib")) {
            let mut multiarch: Vec<PathBuf> = d.filter_map(|e| Some(e.ok()?.path().join("slurm-wlm"))).filter(|p| p.is_dir()).collect();
            multiarch.sort();
            candidates.extend(multiarch);
        }
        for d in ["usr/lib/slurm-wlm", "usr/lib64/slurm", "usr/lib/slurm"] {
            candidates.push(root.join(d));
        }
        for d in candidates {
            if d.join("select_cons_tres.so").is_file() {
                let inside = match &self.release.root {
                    Some(r) => Path::new("/").join(d.strip_prefix(r).unwrap_or(&d)),
                    None => d,
                };
                return Ok(inside.display().to_string());
            }
        }
        Err(format!(
            "Slurm {}'s plugin directory (with select_cons_tres.so) not found under '{}'; run scripts/install-deps.sh --slurm {} or set ALLOT_SYSTEM_PLUGIN_DIR",
            self.release.name,
            root.display(),
            self.release.name
        ))
    }

    /// Fresh Slurm state each time (job ids restart at 1), keeping plugins,
    /// the munge key and allot's ledger; the job directory, munge's
    /// directories and the fake GPUs.
    fn prepare_directory(&self) -> Result<()> {
        for d in ["state", "spool", "run", "tmp", "log", "pids", "etc", "munge/run", "db"] {
            let p = self.dir.join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        for d in ["state", "run", "tmp", "log", "pids", "etc", "dev"] {
            mkdir(&self.dir.join(d))?;
        }
        for n in NODES {
            mkdir(&self.dir.join("spool").join(n))?;
        }
        // Jobs of ordinary users (e.g. nobody) run scripts slurmstepd writes
        // under the spool directory and devices under DIR/dev: DIR must be
        // traversable. Users submit from DIR/jobs, and their jobs write there
        // (sticky, like /tmp).
        set_mode(&self.dir, 0o755)?;
        mkdir(&self.dir.join("jobs"))?;
        set_mode(&self.dir.join("jobs"), 0o1777)?;
        let spool = self.inner.join("spool").display().to_string();
        if !self.succeeds(None, "runuser", &["-u", "nobody", "--", "test", "-x", &spool]) {
            say(&format!("warning: user nobody cannot reach {} (a parent directory is not world-searchable); non-root jobs will fail", self.dir.display()));
        }
        // munge: key in a 0700 directory, socket in a 0755 one (munged
        // insists); the munge directory itself must be reachable by clients.
        for (d, mode) in [("munge", 0o700), ("munge/key", 0o700), ("munge/lib", 0o700), ("munge/run", 0o755), ("munge", 0o755)] {
            mkdir(&self.dir.join(d))?;
            set_mode(&self.dir.join(d), mode)?;
        }
        let key = self.dir.join("munge/key/munge.key");
        if std::fs::metadata(&key).map(|m| m.len()).unwrap_or(0) == 0 {
            let keyfile = format!("--keyfile={}", self.inner.join("munge/key/munge.key").display());
            let out = self.run(None, "mungekey", &["--create", &keyfile]).ok_or("mungekey did not run")?;
            if !out.status.success() {
                return Err(format!("mungekey --create: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
        }
        set_mode(&key, 0o600)?;
        // Fake GPUs: /dev/null clones (character devices, which slurmd requires).
        use std::os::unix::fs::FileTypeExt;
        for i in 0..GPUS_PER_NODE {
            let dev = self.dir.join(format!("dev/nvidia{i}"));
            if !std::fs::metadata(&dev).is_ok_and(|m| m.file_type().is_char_device()) {
                nix::sys::stat::mknod(&dev, nix::sys::stat::SFlag::S_IFCHR, nix::sys::stat::Mode::from_bits_truncate(0o666), nix::sys::stat::makedev(1, 3))
                    .map_err(|e| format!("mknod {}: {e}", dev.display()))?;
                set_mode(&dev, 0o666)?;
            }
        }
        Ok(())
    }

    /// munged, accounting, the controllers and the nodes, in that order;
    /// returns once the nodes are idle.
    fn start_all(&self, s: &Settings) -> Result<()> {
        let inner = |p: &str| self.inner.join(p).display().to_string();
        self.start_daemon(
            "munged",
            false,
            &[
                "munged".into(),
                "--foreground".into(),
                "--force".into(),
                format!("--socket={}", inner("munge/run/munge.socket.2")),
                format!("--key-file={}", inner("munge/key/munge.key")),
                format!("--pid-file={}", inner("run/munged.pid")),
                format!("--seed-file={}", inner("munge/lib/munged.seed")),
                format!("--log-file={}", inner("log/munged.log")),
            ],
        )?;
        let socket = self.dir.join("munge/run/munge.socket.2");
        self.wait_for("munged socket", Duration::from_secs(10), || {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(&socket).is_ok_and(|m| m.file_type().is_socket())
        })?;
        if s.accounting {
            self.start_accounting(s)?;
        }
        self.start_ctld(Role::Primary)?;
        self.wait_for("slurmctld to answer", Duration::from_secs(15), || self.scontrol_pings())?;
        if s.backup_ctld {
            self.start_ctld(Role::Backup)?;
            self.wait_for("scontrol ping to report the primary and the backup slurmctld UP", Duration::from_secs(15), || {
                self.ctlds_up(&[Role::Primary, Role::Backup])
            })?;
        }
        let conf = self.slurm_conf().display().to_string();
        for n in NODES {
            self.start_daemon(&format!("slurmd-{n}"), false, &["slurmd".into(), "-D".into(), "-N".into(), n.into(), "-f".into(), conf.clone()])?;
        }
        for name in self.daemon_names() {
            if self.live_pid(&name).is_none() {
                return Err(format!("{name} exited right after starting (or was forked away from its recorded pid)"));
            }
        }
        self.wait_for(&format!("{} idle nodes", NODES.len()), s.up_timeout, || self.nodes_idle())
    }

    /// A private MariaDB in DIR/db (root logs in over 127.0.0.1 without a
    /// password: a throwaway test database), then slurmdbd, then the
    /// cluster's entry in slurmdbd (so that accounts can be added before
    /// slurmctld first registers). The database is made before slurmdbd's
    /// first start: 24.11.5's slurmdbd with Debian 13's MariaDB 11.8 client
    /// fails its first query when it has to create the database itself.
    fn start_accounting(&self, s: &Settings) -> Result<()> {
        let inner = |p: &str| self.inner.join(p).display().to_string();
        std::fs::write(self.etc().join("db-init.sql"), "CREATE DATABASE IF NOT EXISTS slurm_acct_db;\n").map_err(|e| e.to_string())?;
        // --force: no host name lookups (the root may not resolve this host's name).
        let install_log = self.logs().join("mariadb-install-db.log");
        let out = self
            .release_command(None, "mariadb-install-db")
            .args(["--no-defaults", &format!("--extra-file={}", inner("etc/db-init.sql")), &format!("--datadir={}", inner("db/data"))])
            .args(["--user=root", "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve", "--force"])
            .args(["--innodb-log-file-size=4M", "--innodb-buffer-pool-size=64M"])
            .output()
            .map_err(|e| format!("mariadb-install-db: {e}"))?;
        let _ = std::fs::write(&install_log, [out.stdout.as_slice(), out.stderr.as_slice()].concat());
        if !out.status.success() {
            return Err(format!("mariadb-install-db failed; see {}", install_log.display()));
        }
        let mut mariadbd: Vec<String> = vec!["mariadbd".into(), "--no-defaults".into()];
        mariadbd.extend([
            format!("--datadir={}", inner("db/data")),
            format!("--socket={}", inner("run/mysqld.sock")),
            format!("--port={}", s.port_base + 5),
            "--bind-address=127.0.0.1".into(),
            "--user=root".into(),
            format!("--pid-file={}", inner("run/mariadbd.pid")),
            format!("--log-error={}", inner("log/mariadbd.log")),
            "--skip-name-resolve".into(),
            "--innodb-log-file-size=4M".into(),
            "--innodb-buffer-pool-size=64M".into(),
        ]);
        self.start_daemon("mariadbd", false, &mariadbd)?;
        let socket = format!("--socket={}", inner("run/mysqld.sock"));
        self.wait_for("MariaDB to answer", Duration::from_secs(30), || self.succeeds(None, "mariadb-admin", &["--no-defaults", &socket, "-uroot", "ping"]))?;
        self.start_daemon("slurmdbd", false, &["slurmdbd".into(), "-D".into()])?;
        self.wait_for("slurmdbd to answer", Duration::from_secs(30), || self.succeeds(None, "sacctmgr", &["-n", "show", "cluster"]))?;
        if !self.succeeds(None, "sacctmgr", &["-i", "add", "cluster", &s.cluster_name]) {
            return Err(format!("sacctmgr add cluster {} failed", s.cluster_name));
        }
        Ok(())
    }

    /// Starts that slurmctld (without a backup, the cluster's only one, as
    /// the primary).
    fn start_ctld(&self, role: Role) -> Result<()> {
        let conf = self.slurm_conf().display().to_string();
        if !self.has_backup_ctld() {
            return self.start_daemon("slurmctld", false, &["slurmctld".into(), "-D".into(), "-f".into(), conf]);
        }
        let host = match role {
            Role::Primary => "ctl1",
            Role::Backup => "ctl2",
        };
        // The namespaces are made on this host, outside a release's root
        // (inside it, / is no mount point and unshare cannot make the mounts
        // private); slurmctld then runs chrooted as the other daemons do.
        // unshare, the shell and chroot exec without forking (no PID
        // namespace): the recorded PID is slurmctld's. The namespace's
        // mounts are private: the host and the other slurmctld never see them.
        let root = self.release.root.clone().unwrap_or_default();
        let mut argv: Vec<String> = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "bash", "-c"].map(String::from).to_vec();
        argv.push(r#"hostname "$1" && mount --bind "$2" "$3" && mount --bind "$4" "$5" && shift 5 && exec "$@""#.into());
        argv.extend([
            "ctld-ns".into(),
            host.into(),
            self.etc().join("ctld-hosts").display().to_string(),
            format!("{}/etc/hosts", root.display().to_string().trim_end_matches('/')),
            self.dir.join(format!("run/ctld-{}", role.as_str())).display().to_string(),
            self.dir.join("run/ctld").display().to_string(),
        ]);
        if let Some(root) = &self.release.root {
            argv.extend(["chroot".into(), root.display().to_string(), "env".into(), format!("--chdir={}", self.inner.join("run").display())]);
        }
        argv.extend(["slurmctld".into(), "-D".into(), "-f".into(), conf]);
        if role == Role::Backup {
            argv.extend(["-L".into(), self.inner.join("log/slurmctld-backup.log").display().to_string()]);
        }
        self.start_daemon(role.daemon(), true, &argv)
    }

    // ---- status and the controllers -------------------------------------

    /// Daemons alive? (and `scontrol ping`, sinfo): the text, and whether
    /// all is well.
    pub fn status(&self) -> (String, bool) {
        let mut out = String::new();
        let mut ok = true;
        for name in self.daemon_names() {
            match self.live_pid(&name) {
                Some(pid) => out.push_str(&format!("{name:<10} running (pid {pid})\n")),
                None => {
                    out.push_str(&format!("{name:<10} stopped\n"));
                    ok = false;
                }
            }
        }
        let mut show = |o: Option<Output>| {
            let o = o.filter(|o| o.status.success());
            ok &= o.is_some();
            if let Some(o) = o {
                out.push_str(&String::from_utf8_lossy(&o.stdout));
            }
        };
        if self.has_backup_ctld() {
            show(self.run(Some(10), "scontrol", &["ping"]));
            let role = self.in_control().map(Role::as_str).unwrap_or("none");
            out.push_str(&format!("in control: {role}\n"));
        }
        if self.live_pid("slurmctld").is_some() || self.live_pid("slurmctld-backup").is_some() {
            let o = self.run(Some(5), "sinfo", &["-N"]);
            let o = o.filter(|o| o.status.success());
            ok &= o.is_some();
            if let Some(o) = o {
                out.push_str(&String::from_utf8_lossy(&o.stdout));
            }
        }
        (out, ok)
    }

    /// Restarts slurmctld alone (jobs keep running; plugins reload).
    pub fn restart_ctld(&self, up_timeout: Duration) -> Result<String> {
        if self.terminate("slurmctld") {
            self.wait_gone(Duration::from_secs(20), &["slurmctld".into()]);
        }
        if self.live_pid("munged").is_none() {
            return Err(format!("munged is not running in {}: use up", self.dir.display()));
        }
        self.forget_dead_ctlds();
        self.start_ctld(Role::Primary)?;
        self.wait_for("slurmctld to answer", Duration::from_secs(15), || self.scontrol_pings())?;
        if self.has_backup_ctld() {
            self.wait_for("scontrol ping to report the primary slurmctld UP", Duration::from_secs(60), || self.ctlds_up(&[Role::Primary]))?;
        }
        // Recovered nodes are "unknown" until their slurmd answers again.
        self.wait_for("the nodes to register again", up_timeout, || self.nodes_responding())?;
        Ok(format!("slurmctld restarted (pid {})", self.live_pid("slurmctld").unwrap_or(0)))
    }

    fn ctld_daemon(&self, role: Role) -> Result<&'static str> {
        if role == Role::Backup && !self.has_backup_ctld() {
            return Err("this cluster has no backup slurmctld (up with ALLOT_BACKUP_CTLD=1)".into());
        }
        Ok(role.daemon())
    }

    /// A crash: SIGKILL, no state save, no cleanup. The pid record goes
    /// too, so that later waits do not take the dead daemon for a failure.
    pub fn kill_ctld(&self, role: Role) -> Result<String> {
        let name = self.ctld_daemon(role)?;
        let pid = self.live_pid(name).ok_or_else(|| format!("the {} slurmctld is not running", role.as_str()))?;
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        self.wait_gone(Duration::from_secs(5), &[name.to_owned()]);
        let _ = std::fs::remove_file(self.pids().join(format!("{name}.pid")));
        Ok(format!("killed the {} slurmctld (pid {pid})", role.as_str()))
    }

    /// A slurmctld may also have exited on its own: `scontrol takeover`
    /// shuts the primary down, and a controller that lost its state exits.
    /// Their pid records go before a start, so that waits watch only the
    /// living.
    fn forget_dead_ctlds(&self) {
        for name in ["slurmctld", "slurmctld-backup"] {
            let record = self.pids().join(format!("{name}.pid"));
            if record.is_file() && self.live_pid(name).is_none() {
                let _ = std::fs::remove_file(record);
            }
        }
    }

    /// Starts that slurmctld (again) and waits until `scontrol ping`
    /// reports it UP. A primary that finds the backup in control takes
    /// control back at once (the backup saves all state and returns to
    /// standby).
    pub fn start_ctld_again(&self, role: Role) -> Result<String> {
        let name = self.ctld_daemon(role)?;
        if let Some(pid) = self.live_pid(name) {
            return Err(format!("the {} slurmctld is already running (pid {pid})", role.as_str()));
        }
        if self.live_pid("munged").is_none() {
            return Err(format!("munged is not running in {}: use up", self.dir.display()));
        }
        self.forget_dead_ctlds();
        self.start_ctld(role)?;
        let started = || format!("started the {} slurmctld (pid {})", role.as_str(), self.live_pid(name).unwrap_or(0));
        if !self.has_backup_ctld() {
            self.wait_for("slurmctld to answer", Duration::from_secs(15), || self.scontrol_pings())?;
            return Ok(started());
        }
        // A primary that finds the backup in control waits for its
        // REQUEST_CONTROL reply before it answers: up to 29 s if the backup
        // is slow to let go.
        self.wait_for(&format!("scontrol ping to report the {} slurmctld UP", role.as_str()), Duration::from_secs(60), || self.ctlds_up(&[role]))?;
        let message = started();
        // The backup that handed control back must answer again (standby).
        // Slurm 22.05's backup now and then hangs while relinquishing (its
        // main thread waits forever for its file-purge thread); the primary
        // then goes on after 29 s, and the hung backup never takes over again.
        if role == Role::Primary {
            if let Some(pid) = self.live_pid("slurmctld-backup") {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !self.ctlds_up(&[Role::Backup]) {
                    if Instant::now() >= deadline {
                        let dir = self.dir.display();
                        return Err(format!(
                            "the primary slurmctld is in control, but the backup (pid {pid}) no longer answers: it hung handing control back (its log: \"REQUEST_CONTROL reply but backup not completely done relinquishing control\", a Slurm 22.05 race); restart it: scripts/cluster.sh kill-ctld {dir} backup; scripts/cluster.sh start-ctld {dir} backup"
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            // Its first heartbeat (at most SlurmctldTimeout/4 s on) shows it in control.
            self.wait_for("the primary slurmctld to be in control", Duration::from_secs(15), || self.in_control() == Some(Role::Primary))?;
        }
        Ok(message)
    }

    /// The slurmctld in control: the one whose index DIR/state/heartbeat
    /// holds, if it is alive and the heartbeat is fresh. The controller in
    /// control rewrites the file every SlurmctldTimeout/4 s (two big-endian
    /// 64-bit numbers: the time and its SlurmctldHost index); a backup in
    /// standby never does. With one slurmctld (no heartbeat without a
    /// backup): the primary, if it is alive.
    pub fn in_control(&self) -> Option<Role> {
        if !self.has_backup_ctld() {
            return self.live_pid("slurmctld").map(|_| Role::Primary);
        }
        let beat = std::fs::read(self.dir.join("state/heartbeat")).ok()?;
        if beat.len() != 16 {
            return None;
        }
        let time = i64::from_be_bytes(beat[..8].try_into().ok()?);
        let index = u64::from_be_bytes(beat[8..].try_into().ok()?);
        let conf = std::fs::read_to_string(self.conf()).ok()?;
        let timeout: i64 = conf.lines().filter_map(|l| l.strip_prefix("SlurmctldTimeout=")).next_back().and_then(|v| v.trim().parse().ok()).unwrap_or(5);
        // slurmctld's own period (heartbeat.c): MIN(SlurmctldTimeout / 4, 30).
        let period = (timeout / 4).min(30);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64;
        if now - time > 2 * period + 2 {
            return None;
        }
        let role = match index {
            0 => Role::Primary,
            1 => Role::Backup,
            _ => return None,
        };
        // Written by this process, not by one killed before it started; and
        // a backup hung handing control back still beats, so the writer must
        // also answer.
        let pid = self.live_pid(role.daemon())?;
        (time > daemons::proc_start_time(pid)? && self.ctlds_up(&[role])).then_some(role)
    }
}

fn mkdir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether a program is on this host's PATH.
fn host_has(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether somebody listens on the port: a TCP connect succeeds.
fn port_in_use(port: u16, address: [u8; 4]) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from((address, port)), Duration::from_secs(1)).is_ok()
}
