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
mod controllers;
mod daemons;
mod settings;
mod up;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use crate::release::Release;
pub use controllers::Role;
pub use settings::{node_range, Plugins, Settings, Size};

/// What went wrong, in words for whoever started the cluster.
pub type Result<T> = std::result::Result<T, String>;

/// A line of progress, as scripts/cluster.sh always printed it.
pub(crate) fn say(line: &str) {
    println!("cluster: {line}");
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
        self.nodes_in(&["idle"]) == self.size().nodes as usize
    }

    fn nodes_responding(&self) -> bool {
        self.nodes_in(&["idle", "mix", "alloc", "comp"]) == self.size().nodes as usize
    }

    /// The size `up` gave the cluster (DIR/etc/size), else the default
    /// four nodes: what `down`, the restarts and the checks count on.
    pub fn size(&self) -> Size {
        std::fs::read_to_string(self.etc().join("size")).ok().and_then(|t| Size::parse_record(&t)).unwrap_or_default()
    }

    fn scontrol_pings(&self) -> bool {
        self.succeeds(None, "scontrol", &["ping"])
    }

    /// Whether `scontrol ping` reports each of these slurmctld UP.
    fn ctlds_up(&self, roles: &[Role]) -> bool {
        let out = self.run(Some(10), "scontrol", &["ping"]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        roles.iter().all(|r| out.lines().any(|l| l.starts_with(&format!("Slurmctld({}) at ", r.as_str())) && l.ends_with(" is UP")))
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
