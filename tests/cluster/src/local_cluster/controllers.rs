//! The controllers: starting slurmctld (one, or a primary and a backup,
//! each in its own namespaces), restarting, killing and starting it again,
//! which one is in control; and the cluster's status.

use std::process::Output;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{LocalCluster, Result};

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

impl LocalCluster {
    /// Starts that slurmctld (without a backup, the cluster's only one, as
    /// the primary).
    pub(super) fn start_ctld(&self, role: Role) -> Result<()> {
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
        // What Slurm's commands say, on failure too (a controller that is
        // down is when it matters).
        let mut show = |o: Option<Output>| match o {
            Some(o) => {
                ok &= o.status.success();
                out.push_str(&String::from_utf8_lossy(&o.stdout));
                out.push_str(&String::from_utf8_lossy(&o.stderr));
            }
            None => ok = false,
        };
        if self.has_backup_ctld() {
            show(self.run(Some(10), "scontrol", &["ping"]));
        }
        if self.live_pid("slurmctld").is_some() || self.live_pid("slurmctld-backup").is_some() {
            show(self.run(Some(5), "sinfo", &["-N"]));
        }
        if self.has_backup_ctld() {
            let role = self.in_control().map(Role::as_str).unwrap_or("none");
            out.push_str(&format!("in control: {role}\n"));
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
        (time > super::daemons::proc_start_time(pid)? && self.ctlds_up(&[role])).then_some(role)
    }
}
