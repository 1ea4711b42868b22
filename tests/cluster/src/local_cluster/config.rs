//! The cluster's configuration files under DIR/etc: slurm.conf and
//! gres.conf from the templates in conf/cluster/, the snippet from conf/
//! (Slurm's own plugins or allot's), allot.conf from conf/, and what each
//! setting adds (cgroup.conf, the run log's epilog, accounting, a backup
//! slurmctld).

use std::path::Path;

use super::{node_range, LocalCluster, Result, Settings};
use crate::repo;

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A template with `@KEY@` replaced by each value; every placeholder must
/// be given.
fn render(template: &str, values: &[(&str, String)]) -> Result<String> {
    let mut out = template.to_owned();
    for (key, value) in values {
        out = out.replace(&format!("@{key}@"), value);
    }
    let mut left: Vec<&str> = out
        .match_indices('@')
        .filter_map(|(i, _)| {
            let rest = &out[i + 1..];
            let end = rest.find('@')?;
            let key = &rest[..end];
            (!key.is_empty() && key.chars().all(|c| c.is_ascii_uppercase() || c == '_')).then_some(key)
        })
        .collect();
    left.sort_unstable();
    left.dedup();
    if !left.is_empty() {
        return Err(format!("unsubstituted placeholder: {}", left.iter().map(|k| format!("@{k}@")).collect::<Vec<_>>().join(" ")));
    }
    Ok(out)
}

/// `text` with the value of each line `KEY=...` replaced; the key must be
/// there.
fn set_key(text: &str, key: &str, value: &str) -> Result<String> {
    let prefix = format!("{key}=");
    if !text.lines().any(|l| l.starts_with(&prefix)) {
        return Err(format!("conf/allot.conf has no {key}= line"));
    }
    Ok(map_lines(text, |l| if l.starts_with(&prefix) { format!("{prefix}{value}") } else { l.to_owned() }))
}

/// Each line of `text` through `f`, the line ends kept.
fn map_lines(text: &str, f: impl Fn(&str) -> String) -> String {
    text.split_inclusive('\n')
        .map(|l| match l.strip_suffix('\n') {
            Some(body) => f(body) + "\n",
            None => f(l),
        })
        .collect()
}

/// How many lines of `text` satisfy `pred`.
fn count_lines(text: &str, pred: impl Fn(&str) -> bool) -> usize {
    text.lines().filter(|l| pred(l)).count()
}

impl LocalCluster {
    /// Writes DIR/etc for `settings`: `plugin_dir` is slurm.conf's PluginDir.
    pub(super) fn write_config(&self, settings: &Settings, plugin_dir: &str) -> Result<()> {
        let etc = self.etc();
        let inner = self.inner.display().to_string();
        // The snippet is copied verbatim except for its SchedulerParameters
        // line, which slurm.conf merges (see its template).
        let name = settings.plugins.snippet_name();
        let snippet_path = repo().join(format!("conf/slurm-{name}.conf"));
        let snippet = read(&snippet_path)?;
        let sched = snippet
            .lines()
            .filter_map(|l| l.strip_prefix("SchedulerParameters="))
            .next_back()
            .ok_or_else(|| format!("{} has no SchedulerParameters line", snippet_path.display()))?
            .to_owned();
        let copy = format!(
            "# Copied from conf/slurm-{name}.conf by scripts/cluster.sh; SchedulerParameters\n# is merged into slurm.conf's own line there.\n{}",
            map_lines(&snippet, |l| if l.starts_with("SchedulerParameters=") { format!("#{l}") } else { l.to_owned() })
        );
        write(&etc.join(format!("slurm-{name}.conf")), &copy)?;
        let size = settings.size;
        let kept = settings.small_job_nodes.min(size.nodes - 1);
        let partitions = if kept == 0 {
            format!("PartitionName=gpu Nodes={} Default=YES MaxTime=INFINITE State=UP", size.node_list())
        } else {
            format!(
                "PartitionName=gpu Nodes={} Default=YES MaxTime=INFINITE State=UP\nPartitionName=small Nodes={} MaxTime=INFINITE State=UP",
                node_range(1, size.nodes - kept),
                size.node_list()
            )
        };
        let base = settings.port_base;
        let test_speed = if settings.shipped { "" } else { "sched_interval=2,bf_interval=2," };
        let mut conf = render(
            &read(&repo().join("conf/cluster/slurm.conf.in"))?,
            &[
                ("DIR", inner.clone()),
                ("CTLD_PORT", base.to_string()),
                ("NODES", size.node_list()),
                ("NODE_PORTS", if size.nodes == 1 { (base + 1).to_string() } else { format!("[{}-{}]", base + 1, base + size.nodes as u16) }),
                ("NODE_CPUS", size.cpus_per_node.to_string()),
                ("NODE_MEMORY", size.memory_per_node.to_string()),
                ("NODE_GPUS", size.gpus_per_node.to_string()),
                ("PLUGIN_DIR", plugin_dir.to_owned()),
                ("PLUGINS", name.to_owned()),
                ("PARTITIONS", partitions),
                ("SCHEDULER_PARAMETERS", sched),
                ("TEST_SPEED", test_speed.to_owned()),
                ("CLUSTER_NAME", settings.cluster_name.clone()),
            ],
        )
        .map_err(|e| format!("{} in {}", e, self.conf().display()))?;
        let gpu_files = if size.gpus_per_node == 1 { "nvidia0".to_owned() } else { format!("nvidia[0-{}]", size.gpus_per_node - 1) };
        let mut gres =
            render(&read(&repo().join("conf/cluster/gres.conf.in"))?, &[("DIR", inner.clone()), ("NODES", size.node_list()), ("GPU_FILES", gpu_files)])?;
        if settings.cpu_only {
            // A CPU-only cluster: no GPU GRES at all (the partition keeps its name).
            conf = map_lines(&conf, |l| {
                let l = match l.find(" Gres=gpu:") {
                    Some(i) => {
                        let digits = l[i + 10..].chars().take_while(char::is_ascii_digit).count();
                        format!("{}{}", &l[..i], &l[i + 10 + digits..])
                    }
                    None => l.to_owned(),
                };
                if l == "GresTypes=gpu" {
                    format!("#{l}  (ALLOT_CPU_ONLY=1: no GPUs)")
                } else {
                    l
                }
            });
            gres = "# scripts/cluster.sh ALLOT_CPU_ONLY=1: no GPUs\n".to_owned();
        }
        // 24.11's slurmd initializes a cgroup plugin whatever ProctrackType
        // and TaskPlugin say, and fails without a cgroup filesystem (none in
        // the root); 24.11 can switch it off (22.05 knows no "disabled").
        if self.release.name != "22.05" {
            write(&etc.join("cgroup.conf"), "# scripts/cluster.sh: no cgroups on a single-host test cluster\nCgroupPlugin=disabled\n")?;
        }
        if settings.run_log {
            // Slurm's own record of every run, for reconciliation: slurmctld
            // runs EpilogSlurmctld at the end of each run (requeues
            // included). The script asks for the job's record, which usually
            // still holds the run's start and end; but the script runs after
            // the fact, and a requeued job may be pending again by then.
            // 24.11 and later also give the run's start and end in the
            // script's environment, taken when the run ended: appended as
            // EpilogRunStart and EpilogRunEnd (empty on 22.05, which gives
            // neither).
            let scontrol = match &self.release.prefix {
                Some(prefix) => format!("{}/bin/scontrol", prefix.display()),
                None => "scontrol".to_owned(),
            };
            let script = format!(
                "#!/bin/sh\nrecord=$(SLURM_CONF={inner}/etc/slurm.conf SLURM_TIME_FORMAT=%s {scontrol} show job -o \"$SLURM_JOB_ID\" 2>&1)\n\
                 echo \"$record EpilogRunStart=${{SLURM_JOB_START_TIME:-}} EpilogRunEnd=${{SLURM_JOB_END_TIME:-}}\" >>\"{inner}/log/run-ends.log\"\nexit 0\n"
            );
            let path = etc.join("epilog-ctld.sh");
            write(&path, &script)?;
            set_mode(&path, 0o755)?;
            conf.push_str(&format!("\n# ALLOT_RUN_LOG=1: every run end into log/run-ends.log\nEpilogSlurmctld={inner}/etc/epilog-ctld.sh\n"));
        }
        let mut allot = read(&repo().join("conf/allot.conf"))?;
        allot = match &settings.ledger_url {
            Some(url) => map_lines(&allot, |l| if l.starts_with("LedgerPath=") { format!("LedgerUrl={url}") } else { l.to_owned() }),
            None => set_key(&allot, "LedgerPath", &format!("{inner}/ledger.db"))?,
        };
        allot = set_key(&allot, "SmallJobPartition", if kept == 0 { "" } else { "small" })?;
        if !settings.shipped {
            allot = set_key(&allot, "RecomputePeriod", &settings.recompute_period.to_string())?;
            allot = set_key(&allot, "GraceTime", &settings.grace.to_string())?;
        }
        if settings.accounting {
            conf = self.accounting_conf(&conf, settings.db_port(), settings.dbd_port())?;
        }
        if settings.backup_ctld {
            conf = self.backup_ctld_conf(&conf, settings.ctld_timeout)?;
        }
        write(&self.conf(), &conf)?;
        write(&etc.join("size"), &size.record())?;
        write(&etc.join("gres.conf"), &gres)?;
        write(&etc.join("allot.conf"), &allot)
    }

    /// Accounting: slurm.conf's lines for slurmdbd (returned), and
    /// slurmdbd.conf, which slurmdbd reads beside $SLURM_CONF; it must be
    /// mode 0600 and owned by SlurmUser (root here). The private munged's
    /// socket is named twice in slurm.conf: connections to slurmdbd take
    /// their munge options from AccountingStoragePass, not AuthInfo.
    fn accounting_conf(&self, conf: &str, db: u16, dbd: u16) -> Result<String> {
        let inner = self.inner.display();
        std::fs::create_dir_all(self.dir.join("db")).map_err(|e| e.to_string())?;
        let mut conf = map_lines(conf, |l| {
            if l == "AccountingStorageType=accounting_storage/none" {
                "# ALLOT_ACCOUNTING=1: accounting is configured at the end".to_owned()
            } else {
                l.to_owned()
            }
        });
        conf.push_str(&format!(
            "
# ALLOT_ACCOUNTING=1 (scripts/cluster.sh): Slurm's accounting in a private
# slurmdbd and MariaDB. Every job needs an association of its user with its
# account (allot associations); gres/gpu is recorded, so sacct shows GPUs.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd}
AccountingStoragePass=socket={inner}/munge/run/munge.socket.2
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu
"
        ));
        let dbd_conf = format!(
            "# slurmdbd.conf of allot's test cluster (scripts/cluster.sh, ALLOT_ACCOUNTING=1)
AuthType=auth/munge
AuthInfo=socket={inner}/munge/run/munge.socket.2
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={inner}/run/slurmdbd.pid
LogFile={inner}/log/slurmdbd.log
DebugLevel=info
"
        );
        let path = self.etc().join("slurmdbd.conf");
        // Never readable by others, not even for a moment.
        use std::os::unix::fs::OpenOptionsExt;
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::io::Write::write_all(&mut f, dbd_conf.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
        set_mode(&path, 0o600)?;
        Ok(conf)
    }

    /// A primary and a backup slurmctld on this one host. slurmctld takes
    /// its role from its hostname (the SlurmctldHost entry whose name is
    /// gethostname()'s, short or long; 22.05 has no option to name it
    /// otherwise), and with NoCtldInAddrAny it binds the address its
    /// hostname resolves to instead of INADDR_ANY, so two can share
    /// SlurmctldPort. Clients and slurmd connect to the addresses in
    /// parentheses and need no names.
    fn backup_ctld_conf(&self, conf: &str, timeout: u32) -> Result<String> {
        if count_lines(conf, |l| l == "SlurmctldHost=localhost") == 0 {
            return Err(format!("{} has no SlurmctldHost=localhost line to replace", self.conf().display()));
        }
        if count_lines(conf, |l| l.starts_with("SlurmctldPidFile=")) != 1 {
            return Err(format!("{}: expected one SlurmctldPidFile line", self.conf().display()));
        }
        let mut conf = map_lines(conf, |l| {
            if l == "SlurmctldHost=localhost" {
                "# ALLOT_BACKUP_CTLD=1 (scripts/cluster.sh): a primary and a backup slurmctld,\n\
                 # each in its own UTS and mount namespace with that hostname (see the end).\n\
                 SlurmctldHost=ctl1(127.0.0.1)\nSlurmctldHost=ctl2(127.0.0.2)"
                    .to_owned()
            } else if l.starts_with("SlurmctldPidFile=") {
                format!("# ALLOT_BACKUP_CTLD=1: replaced at the end: {l}")
            } else {
                l.to_owned()
            }
        });
        conf.push_str(&format!(
            "
# ALLOT_BACKUP_CTLD=1 (scripts/cluster.sh): each slurmctld binds the address
# of its own hostname (ctl1 127.0.0.1, ctl2 127.0.0.2, in etc/ctld-hosts), not
# INADDR_ANY, so both listen on SlurmctldPort; slurmd and the commands keep
# INADDR_ANY. The backup takes over after SlurmctldTimeout seconds without
# an answer from the primary (test speed; default 120). The pid file lies in
# run/ctld, which each slurmctld's mount namespace maps to its own directory
# (a slurmctld SIGTERMs the one its pid file names when it starts).
CommunicationParameters=NoCtldInAddrAny
SlurmctldTimeout={timeout}
SlurmctldPidFile={}/run/ctld/slurmctld.pid
",
            self.inner.display()
        ));
        write(
            &self.etc().join("ctld-hosts"),
            "# scripts/cluster.sh ALLOT_BACKUP_CTLD=1: /etc/hosts of both slurmctld\n127.0.0.1 localhost\n127.0.0.1 ctl1\n127.0.0.2 ctl2\n",
        )?;
        for d in ["run/ctld", "run/ctld-primary", "run/ctld-backup"] {
            std::fs::create_dir_all(self.dir.join(d)).map_err(|e| e.to_string())?;
        }
        Ok(conf)
    }
}

/// Sets a file's permission bits.
pub(super) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| format!("chmod {:o} {}: {e}", mode, path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::Plugins;
    use super::*;

    #[test]
    fn render_fills_every_placeholder_or_names_those_left() {
        assert_eq!(render("a=@A@ b=@B_C@", &[("A", "1".into()), ("B_C", "x/y".into())]).unwrap(), "a=1 b=x/y");
        let e = render("a=@A@ b=@B@ c=@B@", &[("A", "1".into())]).unwrap_err();
        assert_eq!(e, "unsubstituted placeholder: @B@");
        // An at-sign that is no placeholder is left alone.
        assert_eq!(render("mail me@host @ 5", &[]).unwrap(), "mail me@host @ 5");
    }

    #[test]
    fn set_key_replaces_the_whole_line_and_refuses_a_missing_key() {
        assert_eq!(set_key("A=1\nB=2\n", "B", "x y").unwrap(), "A=1\nB=x y\n");
        assert_eq!(set_key("A=1\nB=2", "A", "").unwrap(), "A=\nB=2");
        assert_eq!(set_key("A=1\n", "C", "3").unwrap_err(), "conf/allot.conf has no C= line");
    }

    #[test]
    fn the_plugins_snippet_is_the_stock_or_allot_one() {
        assert_eq!(Plugins::Stock.snippet_name(), "stock");
        assert_eq!(Plugins::Multifactor.snippet_name(), "multifactor");
        assert_eq!(Plugins::Allot.snippet_name(), "allot");
        assert_eq!(Plugins::Installed.snippet_name(), "allot");
    }
}
