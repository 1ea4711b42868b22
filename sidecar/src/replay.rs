//! `allot replay`: a workload file run on a real Slurm cluster, and what
//! happened set beside what the simulator predicts for the same jobs.
//!
//! ```text
//! allot replay WORKLOAD.csv --time-scale 60 [--create-users] [--dir DIR] [--json OUT.json]
//! ```
//!
//! Each job of the workload (the simulator's CSV) is submitted with sbatch
//! at its submission time divided by the time scale, as its user (or
//! `--default-user`), to its team's account, with its contract scaled
//! (`--comment min_runtime=... priority=...`) and `--requeue` if resumable.
//! It runs a script that works for its scaled runtime and checkpoints its
//! progress as the simulator models it (every `checkpoint_interval`,
//! scaled; a requeued run resumes from its last checkpoint; killed at the
//! end of its grace time). When every job has ended and the ledger holds
//! every run, the report of what happened (the ledger, as `allot report`
//! and `simulate --from-ledger` read it) is set beside the simulator's
//! prediction for the same scaled workload, cluster, budget and settings,
//! with each figure's difference.
//!
//! Everything is checked before anything is submitted: a job larger than
//! the cluster, a team that is no account of the budget, a user who may
//! not charge it or does not exist, and a time scale that makes a runtime
//! shorter than a second are refused, naming the job.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use allot::budget::BudgetTree;
use allot::preempt::PreemptRules;
use allot_cli::cluster_report::{self, ClusterReport};
use allot_sim::metrics::Report;
use allot_sim::{prepare, simulate_prepared, ClusterSpec, Config, MainClock, PolicyKind, Workload};
use anyhow::{anyhow, bail, Context};
use clap::Args;

#[derive(Args)]
pub struct ReplayArgs {
    /// The workload: the simulator's CSV (docs/src/simulator/input.md).
    workload: PathBuf,
    /// Real time is workload time divided by this: 60 makes an hour a minute.
    #[arg(long, value_name = "FACTOR")]
    time_scale: f64,
    /// Submit a job whose row names no user as this user (default: the
    /// one running allot).
    #[arg(long, value_name = "USER")]
    default_user: Option<String>,
    /// Make the workload's users that do not exist (useradd, no home, no
    /// shell): for a test cluster.
    #[arg(long)]
    create_users: bool,
    /// Where the job script, the jobs' checkpoints and the list of jobs
    /// submitted go (readable by the workload's users). Default: a new
    /// directory under the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Give up waiting for the jobs after this long (real time).
    #[arg(long, value_name = "DURATION", default_value = "6h")]
    timeout: String,
    /// Check the workload against the cluster and the budget, say what
    /// would be submitted, and submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Skip the workload's bad rows (listed) instead of refusing the file.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Also write both reports and the differences as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Predict with Slurm's main-scheduler clock (the cluster's
    /// sched_interval and batch_sched_delay) and its KillWait, rather than
    /// a pass in the second of every event: closer on 16 nodes, further on
    /// the 8-node cluster test (docs/src/simulator/fidelity.md).
    #[arg(long)]
    slurm_clock: bool,
}

/// The cluster as Slurm describes it, as the simulator models it.
#[derive(Debug, Clone, PartialEq)]
struct SlurmCluster {
    spec: ClusterSpec,
    /// Nodes outside the default partition (the nodes kept for small jobs).
    kept: u32,
    /// Seconds a requeued job waits before it may start again
    /// (`cred_expire` + 1, Slurm's BeginTime after a requeue).
    requeue_delay: i64,
    /// Slurm's `KillWait`: the replay's jobs ignore SIGTERM, so a victim
    /// holds its GPUs this long after its kill.
    kill_wait: i64,
    /// SchedulerParameters the simulator models: sched_interval and
    /// batch_sched_delay (the main scheduler's clock), bf_interval,
    /// bf_max_job_test, default_queue_depth.
    scheduler: BTreeMap<String, i64>,
    /// allot.conf's GraceTime, which overrides the budget's grace.
    grace_time: Option<i64>,
}

/// Runs a Slurm command (SLURM_CONF from the environment); its output.
fn slurm(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program).args(args).output().with_context(|| format!("cannot run {program} (is Slurm's client on PATH?)"))?;
    if !out.status.success() {
        bail!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// GPUs in a node's GRES (`gpu:8`, `gpu:a100:4(S:0-1)`, `(null)`).
fn gpus_of_gres(gres: &str) -> u32 {
    gres.split(',')
        .filter_map(|g| {
            let g = g.split('(').next()?.trim();
            let mut parts = g.split(':');
            (parts.next()? == "gpu").then_some(())?;
            parts.next_back()?.parse::<u32>().ok()
        })
        .sum()
}

/// The cluster from `sinfo -N` lines `NODE|GRES|PARTITION` (a node once per
/// partition, the default partition marked `*`).
fn cluster_from_sinfo(text: &str) -> anyhow::Result<(ClusterSpec, u32)> {
    let mut nodes: BTreeMap<String, (u32, bool)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        let [node, gres, partition] = f[..] else { bail!("sinfo printed a line I cannot read: {line:?}") };
        let e = nodes.entry(node.to_owned()).or_insert((gpus_of_gres(gres), false));
        e.1 |= partition.ends_with('*');
    }
    if nodes.is_empty() {
        bail!("sinfo lists no node");
    }
    let sizes: std::collections::BTreeSet<u32> = nodes.values().map(|&(g, _)| g).collect();
    if sizes.len() > 1 || sizes.contains(&0) {
        bail!("the simulator models nodes of one size with GPUs; this cluster's nodes have {:?} GPUs", sizes);
    }
    let kept = nodes.values().filter(|&&(_, default)| !default).count() as u32;
    Ok((ClusterSpec { nodes: nodes.len() as u32, gpus_per_node: *sizes.first().expect("not empty") }, kept))
}

/// `cred_expire=N` of AuthInfo (default 120), plus one: how long Slurm holds a requeued job.
fn requeue_delay_from_config(config: &str) -> i64 {
    let auth = config.lines().find_map(|l| l.trim().strip_prefix("AuthInfo")).unwrap_or("");
    let expire = auth.split([',', ' ', '=']).collect::<Vec<_>>().windows(2).find(|w| w[0] == "cred_expire").and_then(|w| w[1].parse::<i64>().ok());
    expire.unwrap_or(120) + 1
}

/// The SchedulerParameters the simulator models, from `scontrol show config`.
fn scheduler_from_config(config: &str) -> BTreeMap<String, i64> {
    let line = config.lines().find_map(|l| l.trim().strip_prefix("SchedulerParameters")).unwrap_or("");
    let value = line.trim_start().trim_start_matches('=').trim();
    let mut out = BTreeMap::new();
    // Slurm reads each option with a substring search: the first one wins.
    for item in value.split(',') {
        if let Some((k, v)) = item.split_once('=') {
            if ["bf_interval", "bf_max_job_test", "default_queue_depth", "sched_interval", "batch_sched_delay"].contains(&k.trim()) {
                if let Ok(n) = v.trim().parse() {
                    out.entry(k.trim().to_owned()).or_insert(n);
                }
            }
        }
    }
    out
}

fn discover_cluster() -> anyhow::Result<SlurmCluster> {
    let (spec, kept) = cluster_from_sinfo(&slurm("sinfo", &["-h", "-N", "-o", "%N|%G|%P"])?)?;
    let config = slurm("scontrol", &["show", "config"])?;
    let conf = allot_cli::identity::slurm_conf_path();
    let allot_conf = conf.parent().unwrap_or(Path::new("/etc/slurm")).join("allot.conf");
    let grace_time = std::fs::read_to_string(&allot_conf).ok().and_then(|t| allot_cli::identity::conf_value(&t, "GraceTime")).and_then(|v| v.parse().ok());
    Ok(SlurmCluster {
        spec,
        kept,
        requeue_delay: requeue_delay_from_config(&config),
        kill_wait: kill_wait_from_config(&config),
        scheduler: scheduler_from_config(&config),
        grace_time,
    })
}

/// `KillWait` (`KillWait = 5 sec`; Slurm's default 30): how long a job
/// that ignores SIGTERM, as the replay's jobs do, lives on after its kill.
fn kill_wait_from_config(config: &str) -> i64 {
    config
        .lines()
        .find_map(|l| l.trim().strip_prefix("KillWait"))
        .and_then(|v| v.trim_start().trim_start_matches('=').split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(30)
}

/// One job as it will be submitted.
#[derive(Debug, Clone)]
struct Planned {
    /// The workload's job id.
    job_id: u32,
    /// Seconds after the replay's start.
    at: i64,
    user: String,
    account: String,
    gpus: u32,
    runtime: i64,
    /// The declared minimum runtime, scaled (`None`: the budget's default).
    min_runtime: Option<i64>,
    /// The comment: the contract, scaled.
    comment: String,
    resumable: bool,
}

/// Scales the workload and checks every job against the cluster and the
/// budget; every problem, each naming its job.
fn plan(
    w: &Workload,
    scale: f64,
    cluster: &SlurmCluster,
    tree: &BudgetTree,
    default_user: &str,
    user_exists: &dyn Fn(&str) -> bool,
) -> Result<Vec<Planned>, Vec<String>> {
    let first = w.jobs.first().map_or(0, |j| j.submit);
    let mut problems = Vec::new();
    let mut planned = Vec::new();
    let capacity = cluster.spec.capacity();
    for j in &w.jobs {
        let team = &w.teams[j.team as usize];
        let user = j.user.clone().unwrap_or_else(|| default_user.to_owned());
        let name = format!("job {} ({team}, {user})", j.job_id);
        let runtime = (j.runtime as f64 / scale).round() as i64;
        if runtime < 1 {
            problems.push(format!("{name}: its runtime {} s is {:.2} s at --time-scale {scale}: shorter than a second", j.runtime, j.runtime as f64 / scale));
        }
        if j.gpus > capacity {
            problems.push(format!("{name}: asks for {} GPUs; the cluster has {capacity} ({})", j.gpus, cluster.spec));
        }
        match tree.leaf_of_account(team) {
            None => problems.push(format!("{name}: team {team} is no account of the ledger's budget: add it to a leaf (accounts = [\"{team}\"]) and sync")),
            Some(_) if user == "root" => {}
            Some(_) => {
                if let Err(e) = tree.leaf_for_job(&user, Some(team)) {
                    problems.push(format!("{name}: {e}"));
                }
            }
        }
        if !user_exists(&user) {
            problems.push(format!("{name}: there is no user {user} on this machine (--create-users makes them on a test cluster)"));
        }
        let min_runtime = j.min_runtime.map(|m| if m <= 0 { 0 } else { ((m as f64 / scale).round() as i64).max(1) });
        let mut comment = String::new();
        match min_runtime {
            Some(0) => comment.push_str("min_runtime=0 "),
            Some(m) => {
                let _ = write!(comment, "min_runtime={m}s ");
            }
            None => {}
        }
        let _ = write!(comment, "priority={}", j.priority);
        planned.push(Planned {
            job_id: j.job_id,
            at: ((j.submit - first) as f64 / scale).round() as i64,
            user,
            account: team.clone(),
            gpus: j.gpus,
            runtime,
            min_runtime,
            comment,
            resumable: j.resumable,
        });
    }
    if problems.is_empty() {
        Ok(planned)
    } else {
        Err(problems)
    }
}

/// sbatch's arguments for the job's GPUs: on one node, or whole nodes as
/// the simulator places a job larger than a node.
fn gpu_args(gpus: u32, per_node: u32) -> Vec<String> {
    if gpus <= per_node {
        vec!["-N".into(), "1".into(), format!("--gres=gpu:{gpus}")]
    } else {
        vec!["-N".into(), gpus.div_ceil(per_node).to_string(), format!("--gres=gpu:{per_node}")]
    }
}

/// The job script: works `$2` seconds in steps of at most `$3`, saving its
/// progress in `$STATE/$1` after each, and resumes there when requeued. It
/// ignores the grace signal, so that it is killed at the end of the grace
/// time and loses the work since its last checkpoint, as the simulator
/// models a resumable job.
const JOB_SCRIPT: &str = r#"#!/bin/sh
# allot replay: one job of a workload (see `allot replay --help`).
state="$ALLOT_REPLAY_STATE/$1"; work=$2; every=$3
done=$(cat "$state" 2>/dev/null || echo 0)
trap '' TERM
while [ "$done" -lt "$work" ]; do
    step=$((work - done)); [ "$step" -gt "$every" ] && step=$every
    sleep "$step"
    done=$((done + step)); echo "$done" > "$state.new" && mv "$state.new" "$state"
done
"#;

fn user_exists(user: &str) -> bool {
    // `--`: a workload's user name may begin with '-' (Slurm's naming rule allows it).
    Command::new("id").args(["-u", "--", user]).output().is_ok_and(|o| o.status.success())
}

fn current_user() -> String {
    Command::new("id").arg("-un").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_else(|| "root".to_owned())
}

/// What `allot replay` prints and writes: both reports and the differences.
fn compare(actual: &ClusterReport, predicted: &Report) -> (String, serde_json::Value) {
    let mut out = cluster_report::side_by_side(actual, std::slice::from_ref(predicted));
    let hours = actual.gpus as f64 * actual.span_seconds as f64 / 3600.0;
    let _ = writeln!(out, "\nper team: delivered GPU-hours, real against predicted (difference as a share of the cluster's {hours:.2} GPU-hours):");
    let _ = writeln!(out, "{:24} {:>12} {:>12} {:>10}", "team", "real", "predicted", "difference");
    let mut teams = Vec::new();
    for n in actual.nodes.iter().filter(|n| n.is_leaf) {
        let p = predicted.teams.iter().find(|t| t.team == n.path).map_or(0.0, |t| t.delivered_gpu_hours);
        let diff = if hours > 0.0 { 100.0 * (p - n.delivered_gpu_hours) / hours } else { 0.0 };
        let _ = writeln!(out, "{:24} {:>12.3} {:>12.3} {:>9.1}%", n.path, n.delivered_gpu_hours, p, diff);
        teams.push(serde_json::json!({"team": n.path, "real_gpu_hours": n.delivered_gpu_hours, "predicted_gpu_hours": p, "difference_of_cluster_pct": diff}));
    }
    let occupancy = 100.0 * (predicted.occupancy - actual.occupancy);
    let preemptions = if actual.preemptions > 0 { 100.0 * (predicted.preemptions as f64 - actual.preemptions as f64) / actual.preemptions as f64 } else { 0.0 };
    let _ = writeln!(
        out,
        "\noccupancy (first to last submission): predicted {occupancy:+.1} points; preemptions: real {}, predicted {} ({preemptions:+.0}%)",
        actual.preemptions, predicted.preemptions
    );
    let mut kinds = serde_json::Map::new();
    for (k, a) in &actual.by_kind {
        if let Some(p) = predicted.by_kind.get(k) {
            let _ = writeln!(out, "{k}: wait p90 real {} s, predicted {} s ({:+} s)", a.wait_p90_s, p.wait_p90_s, p.wait_p90_s - a.wait_p90_s);
            kinds.insert(
                k.clone(),
                serde_json::json!({"real_p50_s": a.wait_p50_s, "real_p90_s": a.wait_p90_s, "predicted_p50_s": p.wait_p50_s, "predicted_p90_s": p.wait_p90_s}),
            );
        }
    }
    let json = serde_json::json!({
        "real": actual,
        "predicted": predicted,
        "differences": {
            "occupancy_points": occupancy,
            "preemptions_pct": preemptions,
            "teams": teams,
            "waits_by_kind": kinds,
        }
    });
    (out, json)
}

pub fn run(a: ReplayArgs, ledger: Option<&Path>) -> anyhow::Result<ExitCode> {
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        bail!("--time-scale {}: must be a positive number (60: an hour of the workload is a minute)", a.time_scale);
    }
    let timeout = allot::duration::parse_duration(&a.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    let w = crate::simulate::read_workload(&a.workload, a.skip_bad_rows)?;
    let inv = allot_cli::identity::Invocation::resolve(ledger)?;
    let l = allot_cli::open_reader(&inv.ledger, None, allot_cli::Reads::OneCluster, "allot replay")?;
    let v = l.current_budget()?.ok_or_else(|| anyhow!("no budget has been synced into {} yet: sync the budget the replay runs under first", inv.ledger))?;
    let tree = v.tree().map_err(|e| anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?.for_cluster(l.cluster());
    let cluster = discover_cluster()?;
    let me = current_user();
    let default_user = a.default_user.clone().unwrap_or_else(|| me.clone());
    let users: std::collections::BTreeSet<String> = w.jobs.iter().map(|j| j.user.clone().unwrap_or_else(|| default_user.clone())).collect();
    let missing: Vec<&String> = users.iter().filter(|u| !user_exists(u)).collect();
    if a.create_users && !a.dry_run {
        for u in &missing {
            let out =
                Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", "--", u.as_str()]).output().context("cannot run useradd")?;
            if !out.status.success() {
                bail!("useradd {u}: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            eprintln!("made user {u}");
        }
    }
    let exists = |u: &str| user_exists(u) || (a.create_users && a.dry_run && missing.iter().any(|m| m.as_str() == u));
    let jobs = plan(&w, a.time_scale, &cluster, &tree, &default_user, &exists)
        .map_err(|problems| anyhow!("{}: nothing was submitted; {} problem(s):\n  {}", a.workload.display(), problems.len(), problems.join("\n  ")))?;
    if me != "root" && users.iter().any(|u| *u != me) {
        bail!("the workload's jobs are submitted as their users ({}): run allot replay as root", users.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    let span = jobs.iter().map(|j| j.at).max().unwrap_or(0);
    let work: i64 = jobs.iter().map(|j| j.runtime * j.gpus as i64).sum();
    eprintln!(
        "replay: {} jobs of {} teams, submitted over {} s, {:.2} GPU-hours of work, on {} ({} kept for small jobs), time scale {}",
        jobs.len(),
        w.teams.len(),
        span,
        work as f64 / 3600.0,
        cluster.spec,
        cluster.kept,
        a.time_scale
    );
    let every = ((Config::new(cluster.spec, tree.clone(), PolicyKind::Allot).checkpoint_interval as f64 / a.time_scale).round() as i64).max(1);
    if a.dry_run {
        for j in jobs.iter().take(20) {
            eprintln!(
                "  at {:>6} s: {} -A {} {} --comment '{}' ({} s)",
                j.at,
                j.user,
                j.account,
                gpu_args(j.gpus, cluster.spec.gpus_per_node).join(" "),
                j.comment,
                j.runtime
            );
        }
        eprintln!("dry run: nothing submitted");
        return Ok(ExitCode::SUCCESS);
    }

    // The job script and the checkpoints, where every user can reach them.
    let stamp = allot_cli::now();
    let dir = a.dir.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("allot-replay-{stamp}")));
    let state = dir.join("state");
    std::fs::create_dir_all(&state).with_context(|| format!("cannot create {}", state.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o1777))?;
    let script = dir.join("job.sh");
    std::fs::write(&script, JOB_SCRIPT)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    let name = format!("allot-replay-{stamp}");

    let started_at = allot_cli::now();
    let started = Instant::now();
    let mut submitted: Vec<(u32, u32)> = Vec::new();
    let mut late = 0i64;
    for j in &jobs {
        let due = Duration::from_secs(j.at as u64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        late = late.max(started.elapsed().as_secs() as i64 - j.at);
        let mut args: Vec<String> = vec!["--parsable".into(), "-J".into(), name.clone(), "-o".into(), "/dev/null".into(), "-A".into(), j.account.clone()];
        args.extend(gpu_args(j.gpus, cluster.spec.gpus_per_node));
        args.push(format!("--comment={}", j.comment));
        args.push(if j.resumable { "--requeue".into() } else { "--no-requeue".into() });
        args.push(format!("--export=ALL,ALLOT_REPLAY_STATE={}", state.display()));
        args.push(format!("--chdir={}", dir.display()));
        args.extend([script.display().to_string(), j.job_id.to_string(), j.runtime.to_string(), every.to_string()]);
        let mut cmd = if j.user == me {
            Command::new("sbatch")
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", &j.user, "--", "sbatch"]);
            c
        };
        let out = cmd.args(&args).output().context("cannot run sbatch")?;
        if !out.status.success() {
            bail!(
                "job {}: sbatch refused it after {} of {} jobs were submitted (they run on; scancel -n {name} stops them): {}",
                j.job_id,
                submitted.len(),
                jobs.len(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let id: u32 = String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or("").parse().context("sbatch printed no job id")?;
        submitted.push((j.job_id, id));
    }
    let list: String = submitted.iter().map(|(w, s)| format!("{w},{s}\n")).collect();
    std::fs::write(dir.join("submitted.csv"), format!("workload_job_id,slurm_job_id\n{list}"))?;
    eprintln!("replay: {} jobs submitted in {} s (at most {late} s late); waiting for them to end", submitted.len(), started.elapsed().as_secs());

    let deadline = started + Duration::from_secs(timeout.max(1) as u64);
    loop {
        let left = slurm("squeue", &["-h", "-n", &name, "-o", "%i"])?.lines().filter(|l| !l.trim().is_empty()).count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("--timeout {}: {left} job(s) still queued or running (scancel -n {name} stops them)", a.timeout);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // The ledger takes each run within a recompute period.
    let ids: Vec<u32> = submitted.iter().map(|&(_, s)| s).collect();
    let ledger_deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let l = allot_cli::open_reader(&inv.ledger, None, allot_cli::Reads::OneCluster, "allot replay")?;
        let mut open = 0;
        for &id in &ids {
            let runs = l.runs_of_job(id)?;
            open += runs.iter().filter(|r| r.run_end.is_none()).count();
        }
        if open == 0 {
            break;
        }
        if Instant::now() > ledger_deadline {
            bail!("{open} run(s) of the replay are still open in the ledger {} five minutes after the jobs ended: is the priority plugin writing?", inv.ledger);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    // What happened from the first submission to the last end, as the
    // simulator's report spans its run.
    let l = allot_cli::open_reader(&inv.ledger, None, allot_cli::Reads::OneCluster, "allot replay")?;
    let mut ended_at = started_at;
    for &id in &ids {
        ended_at = ended_at.max(l.runs_of_job(id)?.iter().filter_map(|r| r.run_end).max().unwrap_or(started_at));
    }
    let mut actual = cluster_report::compute(&l, ended_at - started_at, ended_at)?;
    // Occupancy as the simulator counts it: between the first and the last
    // submission (its report leaves the drain out); the live report's
    // spans to the last end.
    let last_submission = started_at + span.max(1);
    actual.occupancy = occupancy_between(&l.runs_since(started_at)?, started_at, last_submission, actual.gpus);

    // The prediction: the same scaled jobs, cluster, budget and settings.
    let mut tree = tree;
    if let Some(g) = cluster.grace_time {
        tree.settings.grace = g;
    }
    let scaled = scaled_workload(&w, &jobs, &tree);
    // The jobs as submitted (real seconds), for `allot simulate` to predict
    // again with other settings.
    let scaled_csv = dir.join("scaled-workload.csv");
    scaled.to_csv(std::fs::File::create(&scaled_csv).with_context(|| format!("cannot write {}", scaled_csv.display()))?)?;
    let mut cfg = Config::new(cluster.spec, tree.clone(), PolicyKind::Allot);
    cfg.small_job_nodes = cluster.kept;
    cfg.requeue_delay = cluster.requeue_delay;
    cfg.checkpoint_interval = every;
    if let Some(&v) = cluster.scheduler.get("bf_interval") {
        cfg.bf_interval = v;
    }
    if let Some(&v) = cluster.scheduler.get("bf_max_job_test") {
        cfg.bf_max_job_test = v as usize;
    }
    if let Some(&v) = cluster.scheduler.get("default_queue_depth") {
        cfg.default_queue_depth = v as usize;
    }
    if a.slurm_clock {
        // Slurm's main scheduler runs on its own clock: a job waits for its
        // pass; a victim ignoring SIGTERM holds its GPUs for KillWait.
        let defaults = MainClock::SLURM_DEFAULTS;
        cfg.main_clock = Some(MainClock {
            sched_interval: cluster.scheduler.get("sched_interval").copied().unwrap_or(defaults.sched_interval),
            batch_sched_delay: cluster.scheduler.get("batch_sched_delay").copied().unwrap_or(defaults.batch_sched_delay),
        });
        cfg.kill_wait = cluster.kill_wait;
    }
    let prepared = prepare::prepare(&scaled, &tree, cluster.spec, cluster.kept);
    let predicted = simulate_prepared(&scaled, &cfg, prepared, &mut |_| {}).report;
    let (text, mut json) = compare(&actual, &predicted);
    println!("what happened on {} (ledger {}) against the simulator's prediction of the same jobs:", cluster.spec, inv.ledger);
    print!("{text}");
    json["replay"] = serde_json::json!({
        "workload": a.workload.display().to_string(),
        "time_scale": a.time_scale,
        "cluster": cluster.spec.to_string(),
        "kept_nodes": cluster.kept,
        "requeue_delay_s": cluster.requeue_delay,
        "kill_wait_s": cluster.kill_wait,
        "slurm_clock": a.slurm_clock,
        "checkpoint_interval_s": every,
        "scheduler": cluster.scheduler,
        "jobs": submitted.len(),
        "latest_submission_s": late,
    });
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// GPU-seconds of `runs` within `[from, to)` over the cluster's in that span.
fn occupancy_between(runs: &[allot_ledger::RunRow], from: i64, to: i64, gpus: u32) -> f64 {
    let held: i64 = runs.iter().map(|r| (r.run_end.unwrap_or(to).min(to) - r.run_start.max(from)).max(0) * i64::from(r.gpus)).sum();
    let occupancy = held as f64 / (f64::from(gpus.max(1)) * (to - from).max(1) as f64);
    (occupancy * 1e6).round() / 1e6
}

/// The workload as submitted: scaled times and contracts, each job's kind
/// as the live report names it (by its contract and size), so that both
/// reports group jobs alike.
fn scaled_workload(w: &Workload, jobs: &[Planned], tree: &BudgetTree) -> Workload {
    let rules = PreemptRules::from_settings(&tree.settings);
    let mut out = Workload { teams: w.teams.clone(), ..Workload::default() };
    for (j, p) in w.jobs.iter().zip(jobs) {
        let min_runtime = p.min_runtime;
        let leaf = tree.leaf_of_account(&p.account);
        let declared = min_runtime.unwrap_or(tree.settings.default_min_runtime);
        let kind = cluster_report::job_kind(&rules, leaf, declared, p.gpus);
        let kind = match out.kinds.iter().position(|k| k == kind) {
            Some(i) => i as u32,
            None => {
                out.kinds.push(kind.to_owned());
                (out.kinds.len() - 1) as u32
            }
        };
        out.jobs.push(allot_sim::workload::Job { submit: p.at, runtime: p.runtime, min_runtime, kind, user: Some(p.user.clone()), ..j.clone() });
    }
    out.jobs.sort_by_key(|j| (j.submit, j.job_id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cluster_and_the_scheduler_as_slurm_prints_them() {
        let sinfo = "n1|gpu:8|gpu*\nn2|gpu:8|gpu*\nn3|gpu:8(S:0-1)|gpu*\nn1|gpu:8|small\nn2|gpu:8|small\nn3|gpu:8|small\nn4|gpu:8|small\n";
        assert_eq!(cluster_from_sinfo(sinfo).unwrap(), (ClusterSpec { nodes: 4, gpus_per_node: 8 }, 1));
        assert!(cluster_from_sinfo("n1|gpu:8|gpu*\nn2|gpu:4|gpu*\n").unwrap_err().to_string().contains("nodes of one size"));
        let config = "AuthInfo                = socket=/x/munge.socket.2,cred_expire=10\nSchedulerParameters     = sched_interval=2,bf_interval=2,bf_continue,bf_interval=10,bf_max_job_test=2000,default_queue_depth=500\n";
        assert_eq!(requeue_delay_from_config(config), 11);
        assert_eq!(requeue_delay_from_config("AuthType = auth/munge\n"), 121);
        let s = scheduler_from_config(config);
        assert_eq!((s["bf_interval"], s["bf_max_job_test"], s["default_queue_depth"]), (2, 2000, 500));
        assert_eq!(s["sched_interval"], 2);
        assert_eq!(kill_wait_from_config("KillWait                = 5 sec\n"), 5);
        assert_eq!(kill_wait_from_config("SlurmctldPort = 1\n"), 30, "Slurm's default");
        assert!(!s.contains_key("batch_sched_delay"), "Slurm's default (3 s) applies: {s:?}");
        assert_eq!(gpu_args(4, 8), ["-N", "1", "--gres=gpu:4"]);
        assert_eq!(gpu_args(12, 8), ["-N", "2", "--gres=gpu:8"]);
    }

    #[test]
    fn a_user_name_is_never_read_as_an_option() {
        // Without `--`, `id -u --help` succeeds: a user "--help" would pass as existing.
        assert!(!user_exists("--help"));
        assert!(user_exists("root"));
    }

    #[test]
    fn scales_each_job_and_names_every_one_it_refuses() {
        let tree = BudgetTree::parse(
            "[budget.a]\nshare = 1\naccounts = [\"a\"]\nmembers = [\"ann\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\nmembers = [\"bo\"]\n",
        )
        .unwrap();
        let cluster = SlurmCluster {
            spec: ClusterSpec { nodes: 2, gpus_per_node: 8 },
            kept: 0,
            requeue_delay: 11,
            kill_wait: 5,
            scheduler: BTreeMap::new(),
            grace_time: None,
        };
        let csv = "job_id,submit_s,gpus,runtime_s,team,user,min_runtime_s,priority\n\
                   0,100,8,600,a,ann,120,high\n\
                   1,160,16,3600,b,bo,0,low\n\
                   2,170,1,600,b,,,normal\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let exists = |u: &str| u != "ghost";
        let jobs = plan(&w, 60.0, &cluster, &tree, "root", &exists).unwrap();
        let got: Vec<(i64, i64, &str)> = jobs.iter().map(|j| (j.at, j.runtime, j.comment.as_str())).collect();
        assert_eq!(got, [(0, 10, "min_runtime=2s priority=high"), (1, 60, "min_runtime=0 priority=low"), (1, 10, "priority=normal")]);
        assert_eq!(jobs[2].user, "root");
        let bad = "job_id,submit_s,gpus,runtime_s,team,user\n0,0,17,600,a,ann\n1,0,1,20,a,ann\n2,0,1,600,c,ann\n3,0,1,600,b,ann\n4,0,1,600,a,ghost\n";
        let w = Workload::from_csv(bad.as_bytes(), false).unwrap();
        let problems = plan(&w, 60.0, &cluster, &tree, "root", &exists).unwrap_err();
        // ghost is neither a member of a nor a user here: two problems.
        assert_eq!(problems.len(), 6, "{problems:#?}");
        for want in [
            "job 0 (a, ann): asks for 17 GPUs; the cluster has 16 (2x8)",
            "job 1 (a, ann): its runtime 20 s is 0.33 s at --time-scale 60: shorter than a second",
            "job 2 (c, ann): team c is no account of the ledger's budget",
            "job 3 (b, ann): user 'ann' is not a member of budget b",
            "job 4 (a, ghost): there is no user ghost on this machine",
        ] {
            assert!(problems.iter().any(|p| p.starts_with(want)), "missing {want:?} in {problems:#?}");
        }
    }
}
