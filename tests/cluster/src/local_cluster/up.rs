//! Bringing a cluster up: the checks before anything is touched, the
//! release root's /proc, hosts and users, a fresh directory, the
//! configuration (config.rs) and the daemons in order.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::config::set_mode;
use super::{host_has, mkdir, port_in_use, say, LocalCluster, Plugins, Result, Role, Settings};
use crate::repo;

impl LocalCluster {
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
            Plugins::Stock | Plugins::Multifactor | Plugins::Allot => format!("{}:{system_plugin_dir}", self.inner.join("plugins").display()),
            Plugins::Installed => {
                // The directory on this host: inside the release's root, or itself.
                let on_host = self.release.root.clone().unwrap_or_else(|| PathBuf::from("/")).join(system_plugin_dir.trim_start_matches('/'));
                if !on_host.join("priority_allot.so").is_file() {
                    return Err(format!("--plugins installed: no priority_allot.so in {} (install allot's package first)", on_host.display()));
                }
                system_plugin_dir
            }
        };
        self.prepare_directory(s)?;
        self.write_config(s, &plugin_dir)?;
        // Faults armed in slurmctld, for every start of it (restarts too).
        if let Some(f) = &s.inject_fault {
            let faults = self.etc().join("ctld-faults");
            std::fs::write(&faults, f).map_err(|e| format!("{}: {e}", faults.display()))?;
        }
        // From here on a failure stops whatever was started, then shows the logs.
        self.start_all(s).map_err(|e| {
            eprintln!("cluster: up failed; stopping the daemons");
            let _ = self.down();
            format!("{e}\ncluster: daemon logs:\n{}", self.logs_tail(30))
        })?;
        let mut with = String::new();
        if s.accounting {
            with = format!(", slurmdbd on port {}, MariaDB on {}", s.dbd_port(), s.db_port());
        }
        let ctlds = if s.backup_ctld {
            format!("slurmctld ctl1 (127.0.0.1, primary) and ctl2 (127.0.0.2, backup) on port {}, SlurmctldTimeout={}", s.port_base, s.ctld_timeout)
        } else {
            format!("slurmctld port {}", s.port_base)
        };
        let root = self.release.root.as_ref().map(|r| format!(" (in {})", r.display())).unwrap_or_default();
        Ok(format!(
            "up: {} with {} plugins, Slurm {}{root}{with}, {ctlds}, nodes {} on {}-{}, {}x{} GPUs, in {} ms",
            self.dir.display(),
            match s.plugins {
                Plugins::Stock => "stock",
                Plugins::Multifactor => "multifactor",
                Plugins::Allot => "allot",
                Plugins::Installed => "installed",
            },
            self.release.version,
            if s.size.nodes <= 8 { s.size.node_names().join(" ") } else { s.size.node_list() },
            s.port_base + 1,
            s.port_base + s.size.nodes as u16,
            s.size.nodes,
            s.size.gpus_per_node,
            started.elapsed().as_millis()
        ))
    }

    /// What `up` checks before it touches anything: root, the release's
    /// programs, no daemon of this cluster running, free ports.
    fn check_before_up(&self, s: &Settings) -> Result<()> {
        if !nix::unistd::Uid::effective().is_root() {
            return Err("must run as root (SlurmUser=root, mknod)".into());
        }
        if s.plugins == Plugins::Multifactor && !s.accounting {
            return Err("--plugins multifactor needs Slurm's accounting (its fair share comes from slurmdbd): set ALLOT_ACCOUNTING=1".into());
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
        let last = s.port_base + s.size.nodes as u16 + if s.accounting { 2 } else { 0 };
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
    fn prepare_directory(&self, s: &Settings) -> Result<()> {
        for d in ["state", "spool", "run", "tmp", "log", "pids", "etc", "munge/run", "db"] {
            let p = self.dir.join(d);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        for d in ["state", "run", "tmp", "log", "pids", "etc", "dev"] {
            mkdir(&self.dir.join(d))?;
        }
        for n in s.size.node_names() {
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
        for i in 0..s.size.gpus_per_node {
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
        for n in s.size.node_names() {
            self.start_daemon(&format!("slurmd-{n}"), false, &["slurmd".into(), "-D".into(), "-N".into(), n.clone(), "-f".into(), conf.clone()])?;
        }
        for name in self.daemon_names() {
            if self.live_pid(&name).is_none() {
                return Err(format!("{name} exited right after starting (or was forked away from its recorded pid)"));
            }
        }
        self.wait_for(&format!("{} idle nodes", s.size.nodes), s.up_timeout, || self.nodes_idle())
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
            format!("--port={}", s.db_port()),
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
}
