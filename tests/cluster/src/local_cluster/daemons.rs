//! The cluster's daemons as processes: our own record of each (DIR/pids/NAME.pid
//! holds the PID we started), starting one detached, telling whether it still
//! runs, stopping it, and finding what a cluster left behind.

use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{say, LocalCluster, Result};

/// The command name daemon `name` runs under; None for a name we do not know.
fn expected_comm(name: &str) -> Option<&'static str> {
    Some(match name {
        "munged" => "munged",
        "mariadbd" => "mariadbd",
        "slurmdbd" => "slurmdbd",
        "slurmctld" | "slurmctld-backup" => "slurmctld",
        n if n.starts_with("slurmd-") => "slurmd",
        _ => return None,
    })
}

/// Whether `comm` is the command name of daemon `name`. Debian 13 installs
/// slurmctld, slurmd and slurmstepd as alternatives of slurmctld-wlm, ...:
/// they start under the link's name, and a 24.11 daemon that re-executes
/// itself (scontrol reconfigure) comes back under the target's.
fn comm_is(name: &str, comm: &str) -> bool {
    expected_comm(name).is_some_and(|want| comm == want || comm.strip_suffix("-wlm") == Some(want))
}

/// A process's command name and state letter, from /proc/PID/stat (the name
/// may hold spaces and parentheses: it ends at the last ')').
fn stat_of(pid: i32) -> Option<(String, String, Vec<String>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let rest: Vec<String> = stat[close + 1..].split_whitespace().map(str::to_owned).collect();
    Some((comm, rest.first()?.clone(), rest))
}

/// True if PID exists and is not a zombie.
pub(super) fn pid_alive(pid: i32) -> bool {
    stat_of(pid).is_some_and(|(_, state, _)| state != "Z")
}

/// When process PID started, in Unix seconds (rounded down).
pub(super) fn proc_start_time(pid: i32) -> Option<i64> {
    let (_, _, rest) = stat_of(pid)?;
    // Field 22 of stat; `rest` starts at field 3.
    let ticks: i64 = rest.get(19)?.parse().ok()?;
    let boot: i64 = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100);
    Some(boot + ticks / hz)
}

/// Every process's PID, from /proc.
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc").map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()).unwrap_or_default()
}

/// All descendants of a PID (children first found by scanning /proc).
fn descendants(parent: i32) -> Vec<i32> {
    let children: Vec<i32> = all_pids().into_iter().filter(|&p| stat_of(p).and_then(|(_, _, r)| r.get(1)?.parse().ok()) == Some(parent)).collect();
    let mut all = Vec::new();
    for child in children {
        all.push(child);
        all.extend(descendants(child));
    }
    all
}

impl LocalCluster {
    /// The PID if daemon `name` is running, else None. The process must
    /// still have the expected command name, so a recycled PID is never
    /// signalled; a zombie (reaped later by its parent) counts as gone.
    pub fn live_pid(&self, name: &str) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.pids().join(format!("{name}.pid"))).ok()?.trim().parse().ok()?;
        let (comm, state, _) = stat_of(pid)?;
        (comm_is(name, &comm) && state != "Z").then_some(pid)
    }

    /// Every daemon of this cluster, in start order (the accounting ones
    /// only if this cluster has them: `up` with accounting made DIR/db).
    pub(super) fn daemon_names(&self) -> Vec<String> {
        let mut names = vec!["munged".to_owned()];
        if self.dir.join("db").is_dir() {
            names.extend(["mariadbd".to_owned(), "slurmdbd".to_owned()]);
        }
        names.push("slurmctld".to_owned());
        if self.has_backup_ctld() {
            names.push("slurmctld-backup".to_owned());
        }
        names.extend(self.size().node_names().iter().map(|n| format!("slurmd-{n}")));
        names
    }

    /// Starts a daemon that runs in the foreground (-D / -F), detached from
    /// this process's session so that it outlives it, and records its PID.
    /// `on_host` runs `argv` on this host even with a release's root (`argv`
    /// enters the root itself).
    pub(super) fn start_daemon(&self, name: &str, on_host: bool, argv: &[String]) -> Result<()> {
        // setsid(1) in a process that leads no group calls setsid() and
        // execs without forking: the child's PID is the daemon's (checked
        // by live_pid's command-name test). Each daemon runs in DIR/run, so
        // a crash leaves its core file there (core_pattern "core"), where
        // `down` and the tests look for it. In a root, chroot(1) starts in
        // its /; env --chdir gets back to DIR/run.
        let mut c = Command::new("setsid");
        match &self.release.root {
            Some(root) if !on_host => {
                c.arg("chroot").arg(root).arg("env").arg(format!("--chdir={}", self.inner.join("run").display()));
            }
            _ => {
                c.current_dir(self.dir.join("run"));
            }
        }
        c.args(argv);
        self.slurm_env(&mut c);
        if name.starts_with("slurmctld") {
            if let Ok(faults) = std::fs::read_to_string(self.etc().join("ctld-faults")) {
                c.env("ALLOT_INJECT_FAULT", faults.trim());
            }
        }
        let log = OpenOptions::new().create(true).append(true).open(self.logs().join(format!("{name}.stderr"))).map_err(|e| format!("{name}'s log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        c.stdin(Stdio::null()).stdout(log).stderr(log2);
        let mut child = c.spawn().map_err(|e| format!("cannot start {name} ({}): {e}", argv.join(" ")))?;
        let pid = child.id() as i32;
        std::fs::write(self.pids().join(format!("{name}.pid")), format!("{pid}\n")).map_err(|e| e.to_string())?;
        // A long-lived caller (the tests) reaps the daemon when it exits, so
        // that it leaves no zombie; a short one (the command) exits first,
        // and init reaps it.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        // Until the exec has happened the child is still called setsid or
        // chroot; live_pid (and so every liveness check) needs the daemon's
        // own name.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.live_pid(name).is_none() {
            if !pid_alive(pid) {
                return Err(format!("{name} exited as soon as it started; see {}", self.logs().join(format!("{name}.stderr")).display()));
            }
            if Instant::now() >= deadline {
                let comm = stat_of(pid).map(|s| s.0).unwrap_or_default();
                return Err(format!("{name} did not start within 5 s (pid {pid} is still {comm})"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Waits until none of `names` is alive; SIGKILL after `timeout`.
    pub(super) fn wait_gone(&self, timeout: Duration, names: &[String]) {
        let deadline = Instant::now() + timeout;
        loop {
            let alive: Vec<(String, i32)> = names.iter().filter_map(|n| self.live_pid(n).map(|p| (n.clone(), p))).collect();
            if alive.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                let list: Vec<String> = alive.iter().map(|(n, p)| format!("{n}:{p}")).collect();
                say(&format!("still alive after {}s, sending SIGKILL: {}", timeout.as_secs(), list.join(" ")));
                for (_, pid) in alive {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(500));
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends SIGTERM to daemon `name` if it runs; whether it did.
    pub(super) fn terminate(&self, name: &str) -> bool {
        match self.live_pid(name) {
            Some(pid) => {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                true
            }
            None => false,
        }
    }

    /// Slurm processes left over from this cluster once its recorded
    /// daemons are gone: slurmstepd (and slurmscriptd, a forked slurmctld)
    /// holding a file under DIR open; each keeps its daemon's log,
    /// DIR/log/..., open. Their environment is no help: slurmstepd writes
    /// its process title over it.
    fn leftover_procs(&self) -> Vec<i32> {
        const NAMES: [&str; 10] =
            ["slurmstepd", "slurmstepd-wlm", "slurmscriptd", "slurmctld", "slurmctld-wlm", "slurmd", "slurmd-wlm", "slurmdbd", "mariadbd", "munged"];
        all_pids()
            .into_iter()
            .filter(|&pid| stat_of(pid).is_some_and(|(comm, _, _)| NAMES.contains(&comm.as_str())))
            .filter(|&pid| {
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .map(|fds| fds.filter_map(|f| std::fs::read_link(f.ok()?.path()).ok()).any(|t| t.starts_with(&self.dir)))
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Kills whatever slurmstepd (and job processes under it) this cluster
    /// left.
    pub(super) fn kill_leftovers(&self) {
        let leftovers = self.leftover_procs();
        if leftovers.is_empty() {
            return;
        }
        let mut all = Vec::new();
        for pid in leftovers {
            all.push(pid);
            all.extend(descendants(pid));
        }
        let list: Vec<String> = all.iter().map(i32::to_string).collect();
        say(&format!("killing leftover Slurm and job processes: {}", list.join(" ")));
        for pid in all {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    /// Waits (at most `timeout`) until no recorded PID exists any more, not
    /// even as a zombie: dead daemons are reaped by init or by the thread
    /// that started them, so that a `pgrep slurm` right after `down` is empty.
    pub(super) fn wait_reaped(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let left = std::fs::read_dir(self.pids())
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse::<i32>().ok())
                        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
                })
                .unwrap_or(false);
            if !left {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

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
}
