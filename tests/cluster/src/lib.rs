//! A real Slurm cluster for one test: munged, slurmctld and four slurmd
//! (n1..n4, 8 fake GPUs each) with allot's plugins, in a directory of its
//! own, brought up by [`LocalCluster`] (which scripts/cluster.sh runs too)
//! and stopped when the value drops. If the test failed, the daemons' logs
//! are printed first.
//!
//! The Slurm release is `ALLOT_SLURM_RELEASE` (22.05 by default, or 24.11;
//! [`Release`]). 24.11's daemons and commands run chrooted into the Debian 13
//! root scripts/install-deps.sh makes, so a cluster's directory lies inside
//! it and every Slurm command here goes through [`TestCluster::slurm`].
//!
//! Tests run one cluster at a time (they share the machine's two cores and
//! their timings matter): [`TestCluster::start`] takes a process-wide lock.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use allot_ledger::Ledger;

pub mod local_cluster;
mod proxy;
mod release;
pub use local_cluster::{LocalCluster, Plugins, Role, Settings, Size};
pub use proxy::SocketProxy;
pub use release::Release;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The repository root (this crate is tests/cluster).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// Where cargo put the release build of the `allot` command (built once,
/// for every Slurm release: it does not link Slurm).
pub fn target_release() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target")).join("release")
}

/// Test users, created once if missing (the tests run as root, as CI does).
pub const USERS: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];

fn ensure_users() {
    // One at a time with the CLI tests' users (sidecar/tests/cli.rs).
    let lock = std::fs::File::create("/run/allot-test-users.lock").expect("a lock file in /run (the tests run as root)");
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
    for user in USERS {
        let exists = Command::new("id").arg(user).output().map(|o| o.status.success()).unwrap_or(false);
        if !exists {
            let out = Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", user]).output().expect("useradd runs");
            assert!(out.status.success(), "useradd {user}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// Settings of one test cluster.
#[derive(Clone, Debug)]
pub struct Options {
    /// allot.conf RecomputePeriod, seconds.
    pub recompute_period: u32,
    /// allot.conf GraceTime, seconds.
    pub grace: u32,
    /// Log Slurm's record of every run end (scripts/cluster.sh ALLOT_RUN_LOG).
    pub run_log: bool,
    /// Nodes kept for small jobs (scripts/cluster.sh ALLOT_SMALL_JOB_NODES):
    /// partition `small` of all four, `gpu` without the last this many.
    pub small_job_nodes: u32,
    /// Slurm's accounting too: slurmdbd and MariaDB, associations enforced
    /// (scripts/cluster.sh ALLOT_ACCOUNTING). No account or user is added:
    /// see [`TestCluster::allot_in_release`] and `allot associations`.
    pub accounting: bool,
    /// Nodes without GPUs (scripts/cluster.sh ALLOT_CPU_ONLY), for budgets
    /// that share CPUs.
    pub cpu_only: bool,
    /// The ledger on a private MariaDB server (allot_ledger::testing) in
    /// the cluster's directory, LedgerUrl in allot.conf, instead of a file.
    pub server_ledger: bool,
    /// A primary and a backup slurmctld (scripts/cluster.sh
    /// ALLOT_BACKUP_CTLD; Slurm 22.05 only): [`TestCluster::kill_ctld`],
    /// [`TestCluster::start_ctld`], [`TestCluster::in_control`].
    pub backup_ctld: bool,
    /// slurm.conf's ClusterName (scripts/cluster.sh ALLOT_CLUSTER_NAME).
    pub cluster_name: &'static str,
    /// allot's fault points armed in slurmctld (scripts/cluster.sh
    /// ALLOT_INJECT_FAULT): `job_submit`, `priority_walk@2`, ...
    pub inject_fault: Option<&'static str>,
    /// The cluster's size (scripts/cluster.sh ALLOT_NODES and the sizes
    /// per node): four nodes of 8 GPUs, 32 CPUs and 64,000 MB by default.
    pub size: Size,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            recompute_period: 1,
            grace: 3,
            run_log: false,
            small_job_nodes: 0,
            accounting: false,
            cpu_only: false,
            server_ledger: false,
            backup_ctld: false,
            cluster_name: "allot",
            inject_fault: None,
            size: Size::default(),
        }
    }
}

pub struct TestCluster {
    pub dir: PathBuf,
    pub name: String,
    /// The ledger's server, with `Options::server_ledger`; dropped (stopped)
    /// after the cluster.
    server: Option<Mutex<allot_ledger::testing::MariaDb>>,
    /// A cluster started beside another ([`TestCluster::start_beside`]):
    /// that one's server ledger URL, as the host and as the daemons see it.
    shared_ledger: Option<(String, String)>,
    /// slurm.conf's ClusterName.
    pub cluster_name: String,
    /// One cluster (or pair) at a time; a cluster beside another runs under
    /// that one's turn.
    _serial: Option<MutexGuard<'static, ()>>,
}

/// One run as slurmdbd recorded it ([`TestCluster::sacct_runs`]).
#[derive(Debug, Clone)]
pub struct SacctRun {
    pub job: u32,
    pub account: String,
    /// How the run ended (COMPLETED, REQUEUED, PREEMPTED, NODE_FAIL, ...).
    pub state: String,
    pub start: i64,
    pub end: i64,
    pub gpus: i64,
}

/// One job as `scontrol show job -o` reports it.
#[derive(Debug, Clone)]
pub struct JobInfo {
    pub id: u32,
    pub fields: std::collections::HashMap<String, String>,
}

impl JobInfo {
    pub fn get(&self, key: &str) -> &str {
        self.fields.get(key).map(String::as_str).unwrap_or("")
    }
    pub fn state(&self) -> &str {
        self.get("JobState")
    }
    pub fn priority(&self) -> u32 {
        self.get("Priority").parse().unwrap_or(0)
    }
    pub fn restarts(&self) -> u32 {
        self.get("Restarts").parse().unwrap_or(0)
    }
    pub fn comment(&self) -> &str {
        self.get("Comment")
    }
    pub fn nodes(&self) -> &str {
        self.get("NodeList")
    }
}

/// Parses `scontrol show job -o` output: one job per line of `Key=Value`
/// pairs, keys capitalized. A value with spaces (a Comment such as
/// `sweep 3 min_runtime=2h`) continues until the next capitalized key.
pub fn parse_jobs(text: &str) -> Vec<JobInfo> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("JobId=")) {
        let mut fields = std::collections::HashMap::new();
        let mut last_key: Option<String> = None;
        for token in line.split_whitespace() {
            match token.split_once('=') {
                Some((k, v))
                    if k.chars().all(|c| c.is_ascii_alphanumeric() || c == ':' || c == '/') && k.chars().next().is_some_and(|c| c.is_ascii_uppercase()) =>
                {
                    fields.insert(k.to_owned(), v.to_owned());
                    last_key = Some(k.to_owned());
                }
                _ => {
                    if let Some(k) = &last_key {
                        let e: &mut String = fields.get_mut(k).expect("inserted");
                        e.push(' ');
                        e.push_str(token);
                    }
                }
            }
        }
        let id = fields.get("JobId").and_then(|v| v.parse().ok()).unwrap_or(0);
        out.push(JobInfo { id, fields });
    }
    out
}

impl TestCluster {
    /// Brings up a cluster named `name` whose ledger holds `budget`
    /// (synced with the `allot` command, as an admin would).
    pub fn start(name: &str, budget: &str, options: Options) -> TestCluster {
        let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        Self::bring_up(name, Some(budget), options, Some(serial), None)
    }

    /// A second cluster beside this one, while it runs: its own directory,
    /// ports, daemons and ClusterName (`options.cluster_name`, which must
    /// differ), on this one's server ledger (so on the budget already
    /// synced there). Two clusters of a lab.
    pub fn start_beside(&self, name: &str, options: Options) -> TestCluster {
        assert!(self.server.is_some(), "a cluster beside another shares its server ledger: start the first with Options::server_ledger");
        let shared = (self.ledger_url(false), self.ledger_url(true));
        self.start_beside_on(name, options, shared)
    }

    /// [`TestCluster::start_beside`], the second cluster reaching the server
    /// through `proxy` ([`TestCluster::ledger_proxy`]): a link to slow or cut.
    pub fn start_beside_through(&self, name: &str, options: Options, proxy: &SocketProxy) -> TestCluster {
        let socket = self.with_server(|s| s.dir().join("mysqld.sock"));
        let through = |url: String, inner: bool| {
            let (from, to) = if inner { (self.inner(&socket), self.inner(proxy.path())) } else { (socket.clone(), proxy.path().to_owned()) };
            url.replace(&format!("socket={}", from.display()), &format!("socket={}", to.display()))
        };
        let shared = (through(self.ledger_url(false), false), through(self.ledger_url(true), true));
        assert!(shared.1.contains(&self.inner(proxy.path()).display().to_string()), "the proxied URL names the proxy: {}", shared.1);
        self.start_beside_on(name, options, shared)
    }

    fn start_beside_on(&self, name: &str, options: Options, shared: (String, String)) -> TestCluster {
        assert_ne!(options.cluster_name, self.cluster_name, "two clusters of a lab have two names");
        Self::bring_up(name, None, Options { server_ledger: false, ..options }, None, Some(shared))
    }

    /// A proxy in front of this cluster's ledger server, its socket in this
    /// cluster's directory (inside the release's root, where the daemons
    /// of a cluster beside it can reach it).
    pub fn ledger_proxy(&self) -> SocketProxy {
        let socket = self.with_server(|s| s.dir().join("mysqld.sock"));
        SocketProxy::start(&self.dir.join("ledger-proxy.sock"), &socket)
    }

    fn bring_up(
        name: &str,
        budget: Option<&str>,
        options: Options,
        serial: Option<MutexGuard<'static, ()>>,
        shared_ledger: Option<(String, String)>,
    ) -> TestCluster {
        let cluster_name = options.cluster_name;
        assert!(nix::unistd::Uid::current().is_root(), "cluster tests need root (they run slurmd and submit as test users); CI runs them as root");
        let release = Release::current();
        for f in ["libpriority_allot.so", "libjob_submit_allot.so", "libpreempt_allot.so", "libjobcomp_allot.so"] {
            assert!(
                release.plugins.join(f).exists(),
                "{} is missing: build the plugins for Slurm {} first (the README's test command does)",
                release.plugins.join(f).display(),
                release.version
            );
        }
        assert!(
            target_release().join("allot").exists(),
            "the allot command is missing: run `cargo build --release --workspace` first (the README's test command does)"
        );
        ensure_users();
        // A port base per test name, so a leftover cluster cannot collide.
        let port_base = 20000 + (name.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32)) % 400) as u16 * 10;
        // Inside the release's root when it has one (the daemons run there).
        let dir = match &release.root {
            Some(root) => root.join("tmp").join(format!("allot-test-{name}")),
            None => std::env::temp_dir().join(format!("allot-test-{name}")),
        };
        if dir.join("run").exists() {
            if let Ok(old) = LocalCluster::open(release, &dir, false) {
                let _ = old.down();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let server = options.server_ledger.then(|| {
            let server = allot_ledger::testing::MariaDb::start_in(&dir);
            server.create_database("allot");
            Mutex::new(server)
        });
        let cluster = TestCluster { dir, name: name.to_owned(), server, shared_ledger, cluster_name: cluster_name.to_owned(), _serial: serial };
        if let Some(budget) = budget {
            let budget_file = cluster.dir.join("budgets.toml");
            std::fs::write(&budget_file, budget).unwrap();
            let sync = cluster.allot(&["sync", budget_file.to_str().unwrap()]);
            assert!(sync.status.success(), "allot sync: {}", text(&sync));
        }
        let settings = Settings {
            plugins: Plugins::Allot,
            port_base,
            cluster_name: cluster_name.to_owned(),
            recompute_period: options.recompute_period,
            grace: options.grace,
            run_log: options.run_log,
            small_job_nodes: options.small_job_nodes,
            cpu_only: options.cpu_only,
            accounting: options.accounting,
            backup_ctld: options.backup_ctld,
            ledger_url: cluster.is_on_server().then(|| cluster.ledger_url(true)),
            plugins_target: release.plugins.parent().map(Path::to_owned),
            inject_fault: options.inject_fault.map(str::to_owned),
            size: options.size,
            up_timeout: Duration::from_secs(30 + u64::from(options.size.nodes) / 4),
            ..Settings::default()
        };
        if let Err(e) = cluster.local().up(&settings) {
            panic!("cluster up failed: {e}");
        }
        cluster
    }

    /// slurm.conf, as Slurm's commands see it (`SLURM_CONF`).
    pub fn slurm_conf(&self) -> PathBuf {
        Release::current().inner(&self.dir.join("etc/slurm.conf"))
    }
    /// A path of this cluster's directory as the daemons see it (inside
    /// the release's root), for arguments and files handed to Slurm.
    pub fn inner(&self, path: &Path) -> PathBuf {
        Release::current().inner(path)
    }
    /// The ledger file (a file ledger only).
    pub fn ledger_path(&self) -> PathBuf {
        assert!(!self.is_on_server(), "this cluster's ledger is on a server: use ledger_location()");
        self.dir.join("ledger.db")
    }

    /// The server ledger's URL as the host sees it, or (`inner`) as the
    /// release's daemons do (its socket and password file inside the root).
    pub fn ledger_url(&self, inner: bool) -> String {
        if let Some((host, daemons)) = &self.shared_ledger {
            return if inner { daemons.clone() } else { host.clone() };
        }
        let server = self.server.as_ref().expect("a server ledger").lock().unwrap_or_else(|p| p.into_inner());
        let url = server.url("allot", "allot");
        if !inner {
            return url;
        }
        let dir = server.dir().to_str().expect("a UTF-8 path");
        url.replace(dir, self.inner(server.dir()).to_str().expect("a UTF-8 path"))
    }

    /// The ledger's server (`Options::server_ledger`), for fault tests:
    /// `c.with_server(|s| s.kill())`.
    pub fn with_server<T>(&self, f: impl FnOnce(&mut allot_ledger::testing::MariaDb) -> T) -> T {
        let mut server = self.server.as_ref().expect("a server ledger").lock().unwrap_or_else(|p| p.into_inner());
        f(&mut server)
    }

    /// Where the ledger is, file or server, as the host sees it.
    pub fn ledger_location(&self) -> allot_ledger::Location {
        match self.is_on_server() {
            true => allot_ledger::Location::parse(&self.ledger_url(false)).expect("the test server's URL"),
            false => allot_ledger::Location::File(self.dir.join("ledger.db")),
        }
    }

    /// Whether the ledger is on a server (its own, or the one of the
    /// cluster it was started beside).
    pub fn is_on_server(&self) -> bool {
        self.server.is_some() || self.shared_ledger.is_some()
    }

    /// The ledger, for reading (what the tests check).
    pub fn read_ledger(&self) -> allot_ledger::Result<allot_ledger::Ledger> {
        allot_ledger::Ledger::connect_read_only(&self.ledger_location())
    }

    /// A Slurm command, run as `user` (None: root).
    pub fn slurm(&self, user: Option<&str>, program: &str, args: &[&str]) -> Output {
        let args: Vec<std::ffi::OsString> = args.iter().map(std::ffi::OsString::from).collect();
        self.slurm_os(user, program, &args)
    }

    /// A Slurm command whose arguments may be any bytes (not only UTF-8).
    pub fn slurm_os(&self, user: Option<&str>, program: &str, args: &[std::ffi::OsString]) -> Output {
        self.slurm_command(user, program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"))
    }

    /// A Slurm command of the release under test, as `user` (None: root),
    /// in the job directory, with this cluster's SLURM_CONF.
    pub fn slurm_command(&self, user: Option<&str>, program: &str) -> Command {
        let release = Release::current();
        let mut cmd = match user {
            Some(u) => {
                let mut c = release.command("runuser", &self.job_dir());
                c.args(["-u", u, "--", program]);
                c
            }
            None => release.command(program, &self.job_dir()),
        };
        cmd.env("SLURM_CONF", self.slurm_conf());
        cmd
    }

    /// Every job slurmctld knows, times in Unix seconds (SLURM_TIME_FORMAT=%s)
    /// so that they compare exactly with the ledger's.
    pub fn jobs_epoch(&self) -> Vec<JobInfo> {
        let out = self.slurm_command(None, "scontrol").args(["show", "job", "-o"]).env("SLURM_TIME_FORMAT", "%s").output().expect("scontrol runs");
        parse_jobs(&String::from_utf8_lossy(&out.stdout))
    }

    /// `allot --ledger <this cluster's> ARGS` as root inside the release's
    /// installation (its root, where its own sacctmgr is), with the
    /// cluster's SLURM_CONF: for the commands that run Slurm's.
    pub fn allot_in_release(&self, args: &[&str]) -> Output {
        let bin = self.dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        // The command links no Slurm: the same binary runs in every release's root.
        std::fs::copy(target_release().join("allot"), bin.join("allot")).expect("copy the allot command into the cluster");
        let program = self.inner(&bin.join("allot"));
        let ledger = match self.is_on_server() {
            true => PathBuf::from(self.ledger_url(true)),
            false => self.inner(&self.dir.join("ledger.db")),
        };
        self.slurm_command(None, program.to_str().unwrap()).arg("--ledger").arg(ledger).args(args).output().expect("allot runs")
    }

    /// A shell script run by `sh` as root inside the release's installation
    /// (SLURM_CONF set): e.g. what `allot associations` prints.
    pub fn run_script(&self, script: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .slurm_command(None, "sh")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// `allot --ledger <this cluster's> ARGS` (as root).
    pub fn allot(&self, args: &[&str]) -> Output {
        Command::new(target_release().join("allot")).arg("--ledger").arg(self.ledger_location().to_string()).args(args).output().expect("allot runs")
    }

    /// Submits a batch job as `user`; Ok(job id) or Err(what sbatch said).
    pub fn sbatch(&self, user: &str, args: &[&str]) -> Result<u32, String> {
        let mut full = vec!["--parsable", "-o", "/dev/null", "-e", "/dev/null"];
        full.extend_from_slice(args);
        let out = self.slurm(Some(user), "sbatch", &full);
        if out.status.success() {
            let id = String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or("").parse::<u32>();
            id.map_err(|e| format!("cannot read a job id from sbatch: {e}: {}", text(&out)))
        } else {
            Err(text(&out))
        }
    }

    /// A directory every test user may write job scripts and output to
    /// (mode 1777, made by `cluster.sh up`); Slurm commands run there.
    pub fn job_dir(&self) -> PathBuf {
        self.dir.join("jobs")
    }

    /// Every job slurmctld knows.
    pub fn jobs(&self) -> Vec<JobInfo> {
        let out = self.slurm(None, "scontrol", &["show", "job", "-o"]);
        parse_jobs(&String::from_utf8_lossy(&out.stdout))
    }

    pub fn job(&self, id: u32) -> JobInfo {
        let out = self.slurm(None, "scontrol", &["show", "job", "-o", &id.to_string()]);
        parse_jobs(&String::from_utf8_lossy(&out.stdout)).into_iter().next().unwrap_or_else(|| panic!("no job {id}: {}", text(&out)))
    }

    pub fn scontrol(&self, args: &[&str]) -> Output {
        self.slurm(None, "scontrol", args)
    }

    /// Waits until `check` holds, up to `timeout`; panics with `what` if not.
    pub fn wait_for(&self, what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let jobs: Vec<String> = self
            .jobs()
            .iter()
            .map(|j| {
                format!(
                    "  {} {} {} prio={} restarts={} nodes={} comment={}",
                    j.id,
                    j.get("Account"),
                    j.state(),
                    j.priority(),
                    j.restarts(),
                    j.nodes(),
                    j.comment()
                )
            })
            .collect();
        panic!("timed out after {timeout:?} waiting for: {what}\njobs:\n{}", jobs.join("\n"));
    }

    pub fn wait_state(&self, id: u32, state: &str, timeout: Duration) {
        self.wait_for(&format!("job {id} {state}"), timeout, || self.job(id).state() == state);
    }

    pub fn ledger(&self) -> Ledger {
        self.read_ledger().expect("the ledger opens")
    }

    /// Slurm's record of every run that ended (ALLOT_RUN_LOG), one per run,
    /// times in Unix seconds.
    pub fn run_ends(&self) -> Vec<JobInfo> {
        let text = std::fs::read_to_string(self.dir.join("log/run-ends.log")).unwrap_or_default();
        parse_jobs(&text)
    }

    /// The cluster's accounts and associations from its budget (`allot
    /// associations --apply`), for a cluster with Slurm's accounting, which
    /// admits no job of a user without one. Returns what it printed.
    pub fn apply_associations(&self) -> String {
        let out = self.allot_in_release(&["associations", "--apply"]);
        assert!(out.status.success(), "allot associations --apply: {}", text(&out));
        text(&out)
    }

    /// Every run slurmdbd recorded for `jobs` (`sacct -D`: each requeued or
    /// preempted run a row of its own, whoever requeued it), with its GPUs
    /// from AllocTRES, times in Unix seconds. A run still on (no end yet)
    /// or that never started is left out. Needs `Options::accounting`.
    pub fn sacct_runs(&self, jobs: &[u32]) -> Vec<SacctRun> {
        let list = jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let out = self
            .slurm_command(None, "sacct")
            .args(["-a", "-D", "-X", "-P", "-n", "-j", &list, "--format=JobIDRaw,Account,State,Start,End,AllocTRES"])
            .env("SLURM_TIME_FORMAT", "%s")
            .output()
            .unwrap();
        assert!(out.status.success(), "sacct: {}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                let (start, end) = (f.get(3)?.parse().ok()?, f.get(4)?.parse().ok()?);
                let gpus = f.get(5)?.split(',').find_map(|t| t.strip_prefix("gres/gpu=")).and_then(|n| n.parse().ok()).unwrap_or(0);
                Some(SacctRun { job: f[0].parse().ok()?, account: f[1].to_owned(), state: f[2].to_owned(), start, end, gpus })
            })
            .collect()
    }

    /// slurmctld's log so far.
    pub fn ctld_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
    }

    /// This cluster's directory as [`LocalCluster`] sees it.
    pub fn local(&self) -> LocalCluster {
        LocalCluster::open(Release::current(), &self.dir, false).unwrap_or_else(|e| panic!("test cluster {}: {e}", self.name))
    }

    /// SIGKILLs one controller (`primary` or `backup`): a crash, no cleanup.
    pub fn kill_ctld(&self, which: &str) {
        let done = Role::parse(which).and_then(|role| self.local().kill_ctld(role));
        if let Err(e) = done {
            panic!("kill-ctld {which}: {e}");
        }
    }

    /// Starts one controller again; the error says why if it failed (a
    /// 22.05 backup that hung handing control back: see
    /// [`LocalCluster::start_ctld_again`]).
    pub fn start_ctld(&self, which: &str) -> Result<String, String> {
        Role::parse(which).and_then(|role| self.local().start_ctld_again(role))
    }

    /// Which controller is in control (`primary`, `backup`), if one is.
    pub fn in_control(&self) -> Option<String> {
        self.local().in_control().map(|r| r.as_str().to_owned())
    }

    /// The backup controller's log so far.
    pub fn backup_ctld_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/slurmctld-backup.log")).unwrap_or_default()
    }

    /// Restarts slurmctld alone (jobs keep running; plugins reload).
    pub fn restart_slurmctld(&self) {
        if let Err(e) = self.local().restart_ctld(Duration::from_secs(30)) {
            panic!("restart-ctld: {e}");
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // Never a panic while one unwinds: that would abort the tests.
        let local = match LocalCluster::open(Release::current(), &self.dir, false) {
            Ok(local) => local,
            Err(e) => return eprintln!("test cluster {}: {e}", self.name),
        };
        if std::thread::panicking() {
            eprintln!("==== daemon logs of test cluster {} ====\n{}", self.name, local.logs_tail(80));
        }
        let down = local.down();
        // A daemon that crashed left a core file in DIR/run (LocalCluster
        // runs them there): the plugins must never crash slurmctld.
        let cores: Vec<String> = std::fs::read_dir(self.dir.join("run"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("core")).collect())
            .unwrap_or_default();
        // Nothing of this cluster may be left running: every daemon's command
        // line names its directory (as the daemons see it).
        let inner = self.inner(&self.dir);
        let left = Command::new("pgrep")
            .arg("-af")
            .arg(format!("{}/(etc|munge|db|run)/", inner.display()))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if !left.trim().is_empty() && !std::thread::panicking() {
            panic!("daemons of test cluster {} were left running after `down`:\n{left}", self.name);
        }
        match down {
            Ok(()) => {
                if !cores.is_empty() {
                    let stacks: String = cores.iter().map(|c| core_stacks(&self.dir.join("run").join(c))).collect();
                    if !std::thread::panicking() {
                        panic!(
                            "a daemon of test cluster {} crashed: {} in {} (kept for gdb)\n{stacks}",
                            self.name,
                            cores.join(", "),
                            self.dir.join("run").display()
                        );
                    }
                    eprintln!("a daemon of test cluster {} also left {}\n{stacks}", self.name, cores.join(", "));
                } else if !std::thread::panicking() {
                    let _ = std::fs::remove_dir_all(&self.dir);
                }
            }
            Err(e) => eprintln!("cluster down failed: {e}"),
        }
    }
}

/// What gdb reads from a core file: the program that dumped it, the thread
/// that crashed, and every thread's stack. CI keeps only the test's output,
/// so the crash must be readable there. Without gdb, says so.
fn core_stacks(core: &Path) -> String {
    let gdb = |args: &[String]| {
        Command::new("gdb")
            .args(["-batch", "-nx"])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    };
    let core_arg = core.display().to_string();
    let Ok(header) = gdb(&["-c".into(), core_arg.clone()]) else {
        return format!("==== {}: no gdb here to read it (scripts/install-deps.sh --debugger)\n", core.display());
    };
    // "Core was generated by `/usr/sbin/slurmctld -D -f ...'."
    let program =
        header.lines().find_map(|l| l.strip_prefix("Core was generated by `")).and_then(|rest| rest.split([' ', '\'']).next()).unwrap_or("").to_owned();
    let root = Release::current().root.clone();
    // The daemons are started by name (argv[0] "slurmd"): find them where
    // Debian installs them, in the release's root if it has one.
    let base = root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let exe = if program.contains('/') {
        base.join(program.trim_start_matches('/'))
    } else {
        ["usr/sbin", "usr/bin", "sbin", "bin"].iter().map(|d| base.join(d).join(&program)).find(|p| p.exists()).unwrap_or_else(|| PathBuf::from(&program))
    };
    let mut args = vec![];
    if let Some(root) = &root {
        args.extend(["-ex".to_owned(), format!("set sysroot {}", root.display())]);
    }
    // The crashed thread whole (where a plugin called in is near its
    // bottom), then every thread's innermost frames.
    args.extend(["-ex", "bt", "-ex", "thread apply all bt 25", "-c"].map(String::from));
    args.push(core_arg);
    args.push(exe.display().to_string());
    let stacks = gdb(&args).unwrap_or_else(|e| format!("gdb: {e}"));
    // A slurmctld has some 20 threads: enough to read, not a flood.
    let stacks: String = stacks.lines().filter(|l| !l.starts_with("[New LWP")).take(400).collect::<Vec<_>>().join("\n");
    format!("==== {} (from {program}):\n{stacks}\n", core.display())
}

/// Two teams under one program, and a second program; dave belongs to both
/// teams (teama by default); erin to none.
pub const BUDGET: &str = r#"
[cluster]
lookback = "1h"
min_runtime_cap = "8h"
default_min_runtime = "30s"
grace = "5s"
preempt_margin = 0.05

[default_leaf]
dave = "lab/teama"

[budget]
owners = ["root"]

[budget.lab]
share = 1

[budget.lab.teama]
share = 1
accounts = ["teama"]
members = ["alice", "dave"]

[budget.lab.teamb]
share = 1
accounts = ["teamb"]
members = ["bob", "dave"]

[budget.other]
share = 1
accounts = ["other"]
members = ["carol"]
"#;

/// The test budget with the grace time for unallocated victims raised to the
/// whole grace time (the shipped default is none): for tests of what a job
/// does during its grace time.
pub fn with_unallocated_grace(budget: &str) -> String {
    budget.replace("preempt_margin = 0.05", "preempt_margin = 0.05\nunallocated_grace = \"1h\"")
}

/// `sbatch` arguments for a job that sleeps `seconds`.
pub fn sleep_job(seconds: u32) -> String {
    format!("--wrap=sleep {seconds}")
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}
