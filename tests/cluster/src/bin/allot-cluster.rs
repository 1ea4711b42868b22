//! `allot-cluster`: a real Slurm cluster of any size on this one machine, for
//! allot's demo, benchmarks and tests (scripts/cluster.sh runs it; the
//! tests use the same code as a library: allot_cluster_tests::LocalCluster).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use allot_cluster_tests::{LocalCluster, Plugins, Release, Role, Settings};

const USAGE: &str = "\
A real Slurm cluster on this one machine, for allot's demo, benchmarks and
integration tests: its own munged, one slurmctld (or a primary and a
backup: ALLOT_BACKUP_CTLD=1) and one slurmd per node (four by default,
n1..n4, 8 fake GPUs each; ALLOT_NODES and the sizes below), everything under
one directory. Slurm 22.05.8 (this host's, Debian 12's) by
default; 24.11.5 (Debian 13's) with ALLOT_SLURM_RELEASE=24.11, whose daemons
and commands run chrooted into the Debian 13 root that
scripts/install-deps.sh --slurm 24.11 makes (DIR must then lie inside that
root; the daemons see it as DIR without the root's prefix).

Usage:
  scripts/cluster.sh up DIR [--plugins stock|multifactor|allot|installed]
  scripts/cluster.sh down DIR
  scripts/cluster.sh env DIR        # eval \"$(scripts/cluster.sh env DIR)\"
  scripts/cluster.sh logs DIR [N]   # last N (default 40) lines of every log
  scripts/cluster.sh status DIR     # daemons alive? and sinfo
  scripts/cluster.sh restart-ctld DIR  # restart slurmctld only (reloads plugins)
  scripts/cluster.sh kill-ctld DIR primary|backup   # SIGKILL one slurmctld
  scripts/cluster.sh start-ctld DIR primary|backup  # start it (again)
  scripts/cluster.sh in-control DIR # which slurmctld is in control

up       creates DIR if needed, wipes its Slurm state, spool, logs and pids
         (keeping DIR/plugins, DIR/jobs, the munge key and DIR/ledger.db),
         makes DIR/jobs (mode 1777: any user may submit from it and write
         job files there), writes
         DIR/etc/{slurm.conf,gres.conf,slurm-PLUGINS.conf,allot.conf} from
         conf/, starts the daemons and waits until every node is idle.
         --plugins stock (default) uses Slurm's own plugins
         (conf/slurm-stock.conf); --plugins multifactor Slurm's own as a
         lab runs them (conf/slurm-multifactor.conf: fair share, QOS
         preemption; needs ALLOT_ACCOUNTING=1); --plugins allot first installs allot's
         plugins from cargo's target/release into DIR/plugins
         (scripts/install-plugins.sh) and uses conf/slurm-allot.conf;
         --plugins installed uses conf/slurm-allot.conf with the plugins
         already installed in Slurm's own PluginDir (allot's Debian package).
         A DIR whose daemons are still running is refused: run `down` first.
         On failure it prints the daemon logs and stops what it started.
down     cancels all jobs, stops every daemon it recorded (SIGTERM, SIGKILL
         after a timeout) and any slurmstepd left from this cluster. Safe on
         a half-started or already stopped cluster. Keeps DIR's files.
kill-ctld, start-ctld, in-control: see ALLOT_BACKUP_CTLD below.

Environment:
  ALLOT_SLURM_RELEASE  22.05 (default), 24.11, or a site build of 25.05, 25.11
                    or 26.05 under its prefix (scripts/release.sh).
  ALLOT_NODES, ALLOT_GPUS_PER_NODE, ALLOT_CPUS_PER_NODE, ALLOT_MEMORY_PER_NODE
                    the cluster's size: nodes (1-1024, default 4), and each
                    node's GPUs (default 8), CPUs (32) and memory in MB
                    (64000), as slurm.conf declares them. Each node is a
                    slurmd of its own (about 6 MB of memory each; what each
                    size costs on a 2-core machine: the book's 'Tests and
                    benchmarks').
  ALLOT_PORT_BASE   slurmctld listens on BASE, slurmd n1..nN on BASE+1..BASE+N
                    (default 17000). Two clusters need different DIRs and
                    bases at least N+3 apart (e.g. 17000 and 17200).
  ALLOT_UP_TIMEOUT  seconds `up` waits for every node to be idle (default 30;
                    more for a large cluster).
  ALLOT_CLUSTER_NAME  slurm.conf's ClusterName (default allot): the key of
                    this cluster's rows when several share one server
                    ledger (ALLOT_LEDGER_URL).
  ALLOT_RECOMPUTE_PERIOD, ALLOT_GRACE_TIME  written into DIR/etc/allot.conf
                    (defaults 2 and 5 seconds: test speed).
  ALLOT_SHIPPED_SETTINGS=1  everything as shipped in conf/, for benchmarks:
                    the snippet's scheduler settings (no test-speed
                    sched_interval/bf_interval) and conf/allot.conf's
                    RecomputePeriod and GraceTime (the two variables above
                    are then ignored).
  ALLOT_CPU_ONLY=1  nodes without GPUs (32 CPUs, 64,000 MB each): a CPU-only
                    development cluster, for a budget with charge = \"cpus\".
  ALLOT_SMALL_JOB_NODES=K  keep the last K nodes (at most all but one) for
                    small jobs: partition gpu (default) without them,
                    partition small with every node, and
                    SmallJobPartition=small in allot.conf (default the
                    shipped layout: one node per 100 or part of it, so 1 of
                    4 and 2 of 128; 0: one partition gpu of every node and
                    SmallJobPartition= empty).
  ALLOT_ACCOUNTING=1  Slurm's accounting too: a private MariaDB (port
                    BASE+N+1) and slurmdbd (BASE+N+2) under DIR/db, started
                    before slurmctld, with AccountingStorageEnforce=
                    associations and gres/gpu in the recorded TRES; the
                    cluster is added to slurmdbd, its accounts and users
                    are not (`allot associations`). Daemons stop in reverse
                    order. Needs install-deps.sh --accounting.
  ALLOT_RUN_LOG=1   an EpilogSlurmctld that appends Slurm's record of every
                    run end (`scontrol show job -o`, times in Unix seconds,
                    and from 24.11 the run's own start and end) to
                    DIR/log/run-ends.log (the server-ledger and failover
                    tests' record of Slurm's runs).
  ALLOT_INJECT_FAULT  allot's fault points armed in slurmctld, comma
                    separated, each failing always or its first N times
                    (`job_submit`, `priority_walk@2`): the hooks' fail-safe
                    answers under test (tests/cluster/tests/faults.rs).
  ALLOT_LEDGER_URL  a server ledger (mysql://...): LedgerUrl in allot.conf
                    instead of LedgerPath=DIR/ledger.db. The server is the
                    caller's (the cluster tests start a private MariaDB).
  ALLOT_BACKUP_CTLD=1  a primary and a backup slurmctld (Slurm's own HA,
                    sharing DIR/state) instead of one. slurm.conf names
                    SlurmctldHost=ctl1(127.0.0.1) and ctl2(127.0.0.2), and
                    CommunicationParameters=NoCtldInAddrAny: each binds its
                    own address on the one port. Each runs in its own UTS
                    and mount namespace (unshare) with its SlurmctldHost name
                    as hostname (slurmctld takes its role from it),
                    DIR/etc/ctld-hosts as /etc/hosts, and its own
                    DIR/run/ctld-primary or -backup as DIR/run/ctld, where
                    SlurmctldPidFile lies (a starting slurmctld kills the
                    one that file names). Logs: DIR/log/slurmctld.log and
                    slurmctld-backup.log; pid records: pids/slurmctld.pid
                    and slurmctld-backup.pid. `up` waits until `scontrol
                    ping` reports both UP. Failover tests use:
                    kill-ctld DIR primary|backup  SIGKILL (a crash: no state
                      save, no cleanup). slurmctld saves state at most every
                      5 s: let 6 s pass after the last change (submission,
                      job start or end) before the kill, or the backup
                      recovers older state (lost or requeued jobs,
                      \"Duplicate jobid\" node drains). The backup takes over
                      ~6-8 s after the kill (ALLOT_CTLD_TIMEOUT=5).
                    start-ctld DIR primary|backup  start it, wait until
                      `scontrol ping` reports it UP. A primary that finds
                      the backup in control takes control back at once (the
                      backup saves all state and returns to standby). Now
                      and then 22.05's backup hangs doing so: the primary
                      goes on after 29 s, and start-ctld fails, saying how
                      to restart the backup.
                    in-control DIR  prints primary or backup: whichever
                      rewrites DIR/state/heartbeat (the controller in
                      control does, every SlurmctldTimeout/4 s) and answers
                      `scontrol ping`; fails if neither (during a takeover).
                    `scontrol takeover` works too: the backup shuts the
                    primary down (it exits) and takes over ~2 s later.
                    Slurm 22.05 (this host's) only: `up` refuses the others
                    (their primary takes control back only after ~29 s and
                    may lose the backup's last changes) unless
                    ALLOT_BACKUP_CTLD_ANY_RELEASE=1.
  ALLOT_CTLD_TIMEOUT  SlurmctldTimeout with ALLOT_BACKUP_CTLD=1 (default 5,
                    at least 4; Slurm's default is 120): the backup takes
                    over once the primary has not answered its pings (every
                    SlurmctldTimeout/3 s) for longer than this.
  CARGO_TARGET_DIR  where --plugins allot finds the built plugins (default:
                    the release's, scripts/release.sh RELEASE target).

Needs root (SlurmUser=root, mknod) and scripts/install-deps.sh's packages.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(args.first().map(String::as_str), Some("--help" | "-h")) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(code) => code,
        Err(Failure::Usage) => {
            // The commands alone; --help says what each does and the environment.
            let commands: String = USAGE.lines().skip_while(|l| *l != "Usage:").take_while(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect();
            eprintln!("{commands}(scripts/cluster.sh --help: what each does, and the environment)");
            ExitCode::from(2)
        }
        Err(Failure::Error(e)) => {
            eprintln!("cluster: ERROR: {e}");
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    Usage,
    Error(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Error(e)
    }
}

fn say(line: &str) {
    println!("cluster: {line}");
}

fn run(args: &[String]) -> Result<ExitCode, Failure> {
    let [command, dir, rest @ ..] = args else { return Err(Failure::Usage) };
    let dir = PathBuf::from(dir);
    let release = Release::load(std::env::var("ALLOT_SLURM_RELEASE").ok().as_deref())?;
    if let Some(prefix) = &release.prefix {
        if !prefix.join("sbin/slurmctld").exists() {
            return Err(Failure::Error(format!(
                "Slurm {} is not installed in {}: build it with scripts/build-slurm.sh (docs/src/admin/slurm-releases.md)",
                release.name,
                prefix.display()
            )));
        }
    }
    let open = |create| LocalCluster::open(&release, &dir, create);
    match command.as_str() {
        "up" => {
            let mut plugins = Plugins::Stock;
            let mut rest = rest.iter();
            while let Some(arg) = rest.next() {
                let value = match arg.strip_prefix("--plugins=") {
                    Some(v) => v.to_owned(),
                    None if arg == "--plugins" => rest.next().ok_or(Failure::Usage)?.clone(),
                    None => return Err(Failure::Error(format!("unknown argument '{arg}' (see --help)"))),
                };
                plugins = Plugins::parse(&value)?;
            }
            let settings = Settings::from_env(plugins)?;
            let cluster = open(true)?;
            let summary = cluster.up(&settings)?;
            say(&summary);
            say(&format!("use it: eval \"$(scripts/cluster.sh env {})\"; sinfo", cluster.dir.display()));
        }
        "down" => {
            if !dir.is_dir() {
                say(&format!("down: {} does not exist, nothing to stop", dir.display()));
                return Ok(ExitCode::SUCCESS);
            }
            open(false)?.down()?;
        }
        "env" => print!("{}", open(false)?.env_lines()),
        "logs" => {
            let n = match rest {
                [] => 40,
                [n] => n.parse().map_err(|_| format!("logs: N must be a number of lines, not '{n}'"))?,
                _ => return Err(Failure::Usage),
            };
            print!("{}", open(false)?.logs_tail(n));
        }
        "status" => {
            let (text, ok) = open(false)?.status();
            print!("{text}");
            if !ok {
                return Ok(ExitCode::FAILURE);
            }
        }
        "restart-ctld" => {
            let timeout = std::env::var("ALLOT_UP_TIMEOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
            say(&open(false)?.restart_ctld(Duration::from_secs(timeout))?);
        }
        "kill-ctld" | "start-ctld" => {
            let [role] = rest else { return Err(Failure::Usage) };
            let role = Role::parse(role)?;
            let cluster = open(false)?;
            let done = if command == "kill-ctld" { cluster.kill_ctld(role)? } else { cluster.start_ctld_again(role)? };
            say(&done);
        }
        "in-control" => match open(false)?.in_control() {
            Some(role) => println!("{}", role.as_str()),
            None => {
                eprintln!("cluster: no slurmctld is in control (none alive with a fresh heartbeat in {}/state)", dir.display());
                return Ok(ExitCode::FAILURE);
            }
        },
        _ => return Err(Failure::Usage),
    }
    Ok(ExitCode::SUCCESS)
}
