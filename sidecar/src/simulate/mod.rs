//! `allot simulate`: glue between the command line and the `allot-sim` crate.
//!
//! ```text
//! allot simulate WORKLOAD.csv --cluster 75x8 [--budgets B.toml] [--policy allot,baseline] [--json OUT.json] [--plots DIR]
//! allot simulate generate scenario --cluster 75x8 --days 30 --seed 1 --out jobs.csv --budgets-out budgets.toml
//! allot simulate generate trace philly.csv --seed 1 --out philly-full.csv
//! ```
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use allot::budget::{BudgetTree, ClusterSettings, SettingValue, SettingsError, POLICY_SETTINGS};
use allot::duration::{format_duration, parse_duration};
use allot::settings::PolicySetting;
use allot_sim::cluster::MAX_GPUS_PER_NODE;
use allot_sim::generate::{debug_scenario, derive, scenario, DebugParams, DeriveParams, ScenarioParams, DEBUG_VARIANTS};
use allot_sim::{metrics, plot, prepare, simulate_prepared, ClusterSpec, Config, Placement, PolicyKind, Workload};
use anyhow::{bail, Context};

mod args;
pub use args::SimulateArgs;
use args::*;

/// `allot simulate`, with the `--ledger` given (for `--from-ledger`).
pub fn run_with_ledger(mut args: SimulateArgs, ledger: Option<&Path>) -> anyhow::Result<ExitCode> {
    args.run.ledger = ledger.map(Path::to_owned);
    match args.command {
        Some(SimulateCommand::Generate { what: GenerateCommand::Scenario(a) }) => generate_scenario(a),
        Some(SimulateCommand::Generate { what: GenerateCommand::Trace(a) }) => generate_trace(a),
        Some(SimulateCommand::Generate { what: GenerateCommand::Debug(a) }) => generate_debug(a),
        None => run_simulation(*args.run),
    }
}

/// `--days D`'s rule, broken or not.
fn days_problem(days: f64) -> Option<String> {
    (!(days > 0.0 && days <= 3650.0)).then(|| format!("--days {days}: must be more than 0 and at most 3650"))
}

/// `--load L`'s rule, broken or not.
fn load_problem(load: Option<f64>) -> Option<String> {
    load.filter(|l| !(*l > 0.0 && *l <= 100.0)).map(|l| format!("--load {l}: must be more than 0 and at most 100 (a multiple of the cluster's capacity)"))
}

/// Fails with every broken rule, one per line.
fn refuse_any(problems: Vec<Option<String>>) -> anyhow::Result<()> {
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("{}", problems.join("\n"))
    }
}

fn write_workload(w: &Workload, path: &Path) -> anyhow::Result<()> {
    let file = fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    w.to_csv(std::io::BufWriter::new(file)).with_context(|| format!("cannot write {}", path.display()))
}

fn generate_scenario(a: ScenarioArgs) -> anyhow::Result<ExitCode> {
    let mut bad = vec![days_problem(a.days), load_problem(Some(a.load))];
    if a.teams == 0 || a.teams > 1000 {
        bad.push(Some(format!("--teams {}: must be from 1 to 1000", a.teams)));
    }
    refuse_any(bad)?;
    let s = scenario(&ScenarioParams { cluster: a.cluster, days: a.days, teams: a.teams, load: a.load, seed: a.seed });
    write_workload(&s.workload, &a.out)?;
    if let Some(b) = &a.budgets_out {
        fs::write(b, &s.budget_toml).with_context(|| format!("cannot write {}", b.display()))?;
    }
    eprintln!("wrote {} jobs of {} teams to {}", s.workload.jobs.len(), s.workload.teams.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}

fn generate_debug(a: DebugArgs) -> anyhow::Result<ExitCode> {
    let Some(mut p) = DebugParams::variant(&a.variant, a.seed) else {
        bail!("unknown variant '{}': use one of {}", a.variant, DEBUG_VARIANTS.join(", "));
    };
    refuse_any(vec![days_problem(a.days), load_problem(a.load)])?;
    p.cluster = a.cluster;
    p.days = a.days;
    if let Some(l) = a.load {
        p.load = l;
    }
    p.training_nodes = a.training_nodes.unwrap_or(p.training_nodes);
    p.debug_per_team = a.debug_per_team.unwrap_or(p.debug_per_team);
    p.fillers_per_team = a.fillers_per_team.unwrap_or(p.fillers_per_team);
    let s = debug_scenario(&p);
    write_workload(&s.workload, &a.out)?;
    if let Some(b) = &a.budgets_out {
        fs::write(b, &s.budget_toml).with_context(|| format!("cannot write {}", b.display()))?;
    }
    eprintln!("wrote {} jobs of {} teams to {}", s.workload.jobs.len(), s.workload.teams.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn read_workload(path: &Path, skip_bad_rows: bool) -> anyhow::Result<Workload> {
    let name = path.display().to_string();
    let file = fs::File::open(path).with_context(|| format!("cannot open the workload {name}"))?;
    let w = Workload::from_csv(std::io::BufReader::new(file), skip_bad_rows).map_err(|e| anyhow::anyhow!("{}", e.render(&name)))?;
    for e in &w.skipped {
        eprintln!("{name}:{}: skipped the row: {}", e.line, e.what());
    }
    if !w.ignored_columns.is_empty() {
        eprintln!("{name}: ignoring column(s) {}", w.ignored_columns.join(", "));
    }
    if w.jobs.is_empty() {
        if w.skipped.is_empty() {
            bail!("{name}: no jobs: the file has only a header");
        }
        let rows = w.skipped.iter().map(|e| e.line).collect::<std::collections::HashSet<_>>().len();
        bail!("{name}: no jobs: every row is bad ({rows} skipped, listed above)");
    }
    Ok(w)
}

fn generate_trace(a: TraceArgs) -> anyhow::Result<ExitCode> {
    let mut bad = Vec::new();
    if a.copies == 0 {
        bad.push(Some("--copies 0: must be at least 1 (1: every job once)".to_owned()));
    }
    if !(a.runtime_scale.is_finite() && a.runtime_scale > 0.0) {
        bad.push(Some(format!("--runtime-scale {}: must be a positive finite number, such as 0.2 or 1", a.runtime_scale)));
    }
    if a.gpus_per_node == 0 || a.gpus_per_node > MAX_GPUS_PER_NODE {
        bad.push(Some(format!("--gpus-per-node {}: must be from 1 to {MAX_GPUS_PER_NODE}", a.gpus_per_node)));
    }
    refuse_any(bad)?;
    let trace = read_workload(&a.trace, a.skip_bad_rows)?;
    // Job ids are renumbered from 0 and are 32-bit.
    if (trace.jobs.len() as u64).saturating_mul(a.copies.into()) > u64::from(u32::MAX) + 1 {
        bail!("--copies {}: {} jobs x {} copies is more jobs than job ids (2^32)", a.copies, trace.jobs.len(), a.copies);
    }
    let w = derive(&trace, &DeriveParams { seed: a.seed, copies: a.copies, runtime_scale: a.runtime_scale }, a.gpus_per_node);
    write_workload(&w, &a.out)?;
    eprintln!("wrote {} jobs to {}", w.jobs.len(), a.out.display());
    Ok(ExitCode::SUCCESS)
}

fn run_simulation(a: RunArgs) -> anyhow::Result<ExitCode> {
    let Some(cluster) = a.cluster else { bail!("give --cluster") };
    // From the ledger: its jobs, its budget, and what actually happened.
    let from_ledger = if a.from_ledger {
        let inv = allot_cli::identity::Invocation::resolve(a.ledger.as_deref())?;
        let l =
            allot_cli::open_reader(&inv.ledger, a.from_cluster.as_deref(), allot_cli::Reads::OneCluster, "allot simulate --from-ledger --from-cluster NAME")?;
        let since = allot_cli::cluster_report::parse_since(a.since.as_deref())?;
        let lw = allot_cli::cluster_report::ledger_workload(&l, since, allot_cli::now())?;
        for (why, n) in &lw.left_out {
            eprintln!("{}: left out {n} job(s): {why}", inv.ledger);
        }
        if lw.still_running > 0 {
            eprintln!("{}: {} job(s) still running: replayed with the time they ran so far", inv.ledger, lw.still_running);
        }
        if lw.workload.jobs.is_empty() {
            bail!(
                "nothing could be simulated: the ledger {} has no job with GPUs and a runtime submitted since {}",
                inv.ledger,
                allot_cli::format_time(lw.actual.from)
            );
        }
        Some((inv.ledger, lw))
    } else {
        None
    };
    let path: PathBuf = match (&from_ledger, a.workload.as_ref()) {
        // The ledger's name labels the workload in the output.
        (Some((ledger, _)), _) => PathBuf::from(ledger.to_string()),
        (None, Some(p)) => p.clone(),
        (None, None) => bail!("give a workload CSV or --from-ledger"),
    };
    let path = &path;
    let mut policies = Vec::new();
    for p in &a.policy {
        let kind = PolicyKind::parse(p).with_context(|| format!("unknown policy '{p}': use allot, baseline or allot,baseline"))?;
        if !policies.contains(&kind) {
            policies.push(kind);
        }
    }
    check_run_options(&a, cluster)?;
    let mut workload = match &from_ledger {
        Some((_, lw)) => lw.workload.clone(),
        None => read_workload(path, a.skip_bad_rows)?,
    };
    let restorable_kinds = restorable_kinds(&mut workload, &a.restorable_kinds)?;
    let (mut tree, budget_gives_default) = match (&a.budgets, &from_ledger) {
        (None, Some((_, lw))) => {
            let tree = BudgetTree::parse(&lw.budget_toml)
                .map_err(|e| anyhow::anyhow!("the ledger's budget version {}: {}", lw.budget_version, e.render("ledger").trim_end()))?;
            let doc = toml_edit::ImDocument::parse(lw.budget_toml.as_str())?;
            let gives_default = doc.get("cluster").and_then(|c| c.get("default_min_runtime")).is_some();
            (tree, gives_default)
        }
        (b, _) => match b {
            Some(b) => {
                let text = fs::read_to_string(b).with_context(|| format!("cannot read the budget {}", b.display()))?;
                let tree = BudgetTree::parse(&text).map_err(|e| anyhow::anyhow!("{}", e.render(&b.display().to_string()).trim_end()))?;
                // Valid TOML: the budget parser has read it.
                let doc = toml_edit::ImDocument::parse(text.as_str())?;
                let gives_default = doc.get("cluster").and_then(|c| c.get("default_min_runtime")).is_some();
                (tree, gives_default)
            }
            None => (prepare::equal_share_budget(&workload).map_err(anyhow::Error::msg)?, false),
        },
    };
    if let (Some(b), Some(gpus)) = (&a.budgets, tree.settings.gpus) {
        if gpus != cluster.capacity() {
            eprintln!(
                "warning: {}: [cluster] gpus = {gpus}, but --cluster {cluster} has {} GPUs: the simulation models {} GPUs and scales fair-share by them (on the cluster, the plugins would scale by {gpus})",
                b.display(),
                cluster.capacity(),
                cluster.capacity()
            );
        }
    }
    apply_settings(&mut tree.settings, &a, budget_gives_default)?;
    if tree.settings.unallocated_grace > tree.settings.grace {
        let (ug, g) = (format_duration(tree.settings.unallocated_grace), format_duration(tree.settings.grace));
        let ug_from = if a.policy_settings.get("unallocated_grace").is_some() {
            format!("--unallocated-grace {ug}")
        } else {
            format!("the budget's unallocated_grace {ug}")
        };
        let g_from = if a.policy_settings.get("grace").is_some() { format!("--grace {g}") } else { format!("the grace time {g}") };
        eprintln!("warning: {ug_from} is longer than {g_from}: unallocated victims get {g}, never more than allocated ones");
    }
    // Fail on a missing font before spending time on the simulation.
    if a.plots.is_some() {
        plot::load_font(&a.font)?;
    } else if a.gantt_from.is_some() || a.gantt_to.is_some() {
        eprintln!("warning: --gantt-from and --gantt-to set the window of a picture that only --plots draws");
    }
    // One preparation for every policy: the jobs refused before they are queued are said once.
    // A what-if of a site's own ledger models no kept nodes unless told: the
    // ledger does not record the site's partitions, and the shipped layout
    // would compare the site against one it may not have.
    let small_job_nodes = match (a.small_job_nodes, &from_ledger) {
        (Some(n), _) => n,
        (None, Some(_)) => {
            eprintln!("--from-ledger: modelling no nodes kept for small jobs; give --small-job-nodes N for the nodes your SmallJobPartition keeps");
            0
        }
        (None, None) => allot::preempt::shipped_small_job_nodes(cluster.nodes),
    };
    let prepared = prepare::prepare(&workload, &tree, cluster, small_job_nodes);
    let refusals = prepared.refusals(&workload, &tree, cluster, small_job_nodes);
    if refusals.all() {
        let file = path.display();
        let all = if refusals.jobs == 1 {
            format!("the one job of {file} is refused before it is queued")
        } else {
            format!("all {} jobs of {file} are refused before they are queued", refusals.jobs)
        };
        bail!("nothing could be simulated: {all}:\n  {}", refusals.lines().join("\n  "));
    }
    if refusals.refused > 0 {
        eprintln!("warning: jobs refused before the queue: {} of {} (the report counts them as refused):", refusals.refused, refusals.jobs);
        for line in refusals.lines() {
            eprintln!("  {line}");
        }
    }
    let (first, _) = workload.span();
    let mut sims = Vec::new();
    for &policy in &policies {
        let mut cfg = Config::new(cluster, tree.clone(), policy);
        cfg.checkpoint_interval = a.checkpoint_interval;
        cfg.restorable_kinds = restorable_kinds.clone();
        cfg.requeue_delay = a.requeue_delay;
        cfg.baseline_limit_factor = a.baseline_limit_factor;
        cfg.baseline_priority_levels = a.baseline_priority_levels;
        cfg.bf_max_job_test = a.bf_max_job_test;
        cfg.preempt_max_job_test = a.preempt_max_job_test;
        cfg.default_queue_depth = a.default_queue_depth;
        cfg.bf_interval = a.bf_interval;
        cfg.small_job_nodes = small_job_nodes;
        cfg.placement = a.placement;
        cfg.preempt_around_reservation = a.preempt_around_reservation;
        cfg.plan_with_protection_ends = a.plan_with_protection_ends;
        cfg.horizon = a.horizon.map(|h| first + h);
        cfg.kill_wait = a.kill_wait;
        cfg.main_clock = a.sched_interval.map(|sched_interval| allot_sim::MainClock { sched_interval, batch_sched_delay: a.batch_sched_delay });
        let bar = (!a.quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(1000);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{prefix:>9} [{bar:40}] {percent:>3}% {elapsed}").expect("valid template").progress_chars("=> "),
            );
            bar.set_prefix(policy.name());
            bar
        });
        let mut progress = |f: f64| {
            if let Some(b) = &bar {
                b.set_position((f * 1000.0) as u64);
            }
        };
        let mut sim = simulate_prepared(&workload, &cfg, prepared.clone(), &mut progress);
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        if a.check {
            let broken = allot_sim::check::invariants(&workload, &cfg, &sim);
            if !broken.is_empty() {
                for b in broken.iter().take(20) {
                    eprintln!("{}: invariant broken: {b}", policy.name());
                }
                bail!("{}: {} invariant violation(s)", policy.name(), broken.len());
            }
            eprintln!("{}: all invariants hold", policy.name());
        }
        if a.no_timing {
            sim.report.sim_seconds = None;
            sim.report.simulated_days_per_second = None;
        }
        sims.push((cfg, sim));
    }
    let reports: Vec<metrics::Report> = sims.iter().map(|(_, s)| s.report.clone()).collect();
    print!("{}", metrics::table(&reports));
    if let Some((ledger, lw)) = &from_ledger {
        println!(
            "\nwhat actually happened ({}, {} to {}) against the simulation of the same jobs:",
            ledger,
            allot_cli::format_time(lw.actual.from),
            allot_cli::format_time(lw.actual.to)
        );
        print!("{}", allot_cli::cluster_report::side_by_side(&lw.actual, &reports));
    }
    if let Some(j) = &a.json {
        let mut doc = serde_json::json!({
            "workload": {
                "file": path.display().to_string(),
                "jobs": workload.jobs.len(),
                "teams": workload.teams.len(),
                "skipped_rows": workload.skipped,
            },
            "settings": {
                "cluster": cluster.to_string(),
                "checkpoint_interval_s": a.checkpoint_interval,
                "restorable_kinds": a.restorable_kinds,
                "requeue_delay_s": a.requeue_delay,
                "baseline_limit_factor": a.baseline_limit_factor,
                "baseline_priority_levels": a.baseline_priority_levels,
                "bf_max_job_test": a.bf_max_job_test,
                "preempt_max_job_test": a.preempt_max_job_test,
                "default_queue_depth": a.default_queue_depth,
                "bf_interval_s": a.bf_interval,
                "small_job_nodes": small_job_nodes,
                "placement": a.placement,
                "preempt_around_reservation": a.preempt_around_reservation,
                "plan_with_protection_ends": a.plan_with_protection_ends,
                "horizon_s": a.horizon,
                "kill_wait_s": a.kill_wait,
                "sched_interval_s": a.sched_interval,
                "batch_sched_delay_s": a.sched_interval.map(|_| a.batch_sched_delay),
            },
            "reports": reports,
            "actual": from_ledger.as_ref().map(|(_, lw)| &lw.actual),
        });
        // The policy settings in force, each under its JSON name.
        for p in &POLICY_SETTINGS {
            let value = match p.value(&tree.settings) {
                SettingValue::Duration(x) => serde_json::json!(x),
                SettingValue::Fraction(x) => serde_json::json!(x),
                SettingValue::Flag(x) => serde_json::json!(x),
                SettingValue::Count(x) => serde_json::json!(x),
            };
            doc["settings"][p.json_key()] = value;
        }
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        fs::write(j, text).with_context(|| format!("cannot write {}", j.display()))?;
    }
    if let Some(dir) = &a.plots {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let font = plot::load_font(&a.font)?;
        for (cfg, sim) in &sims {
            let name = cfg.policy.name();
            let shares = dir.join(format!("shares-{name}.png"));
            plot::shares(&shares, &font, &cfg.tree, cluster, &sim.outcome).with_context(|| format!("cannot draw {}", shares.display()))?;
            eprintln!("wrote {}", shares.display());
            if cluster.capacity() <= plot::GANTT_MAX_GPUS {
                let gantt = dir.join(format!("gantt-{name}.png"));
                let window = (first + a.gantt_from.unwrap_or(GANTT_FROM), first + a.gantt_to.unwrap_or(GANTT_TO));
                plot::gantt(&gantt, &font, &cfg.tree, cluster, &sim.outcome, window).with_context(|| format!("cannot draw {}", gantt.display()))?;
                eprintln!("wrote {}", gantt.display());
            } else {
                eprintln!("no Gantt chart: it draws one row per GPU, for clusters of at most {} GPUs", plot::GANTT_MAX_GPUS);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The Gantt chart's window by default: the first two days.
const GANTT_FROM: i64 = 0;
const GANTT_TO: i64 = 2 * 86_400;

/// The rules of the options that are the simulator's own (the policy's are
/// the budget's, [`apply_settings`]): every broken one, with the option and
/// its value, before any work is done.
fn check_run_options(a: &RunArgs, cluster: ClusterSpec) -> anyhow::Result<()> {
    let mut bad = Vec::new();
    let f = a.baseline_limit_factor;
    if !(f.is_finite() && f > 0.0) {
        bad.push(format!(
            "--baseline-limit-factor {f}: must be a positive finite number, such as 1 or 1.5 (a team's baseline limit is its share x the cluster's GPUs x this)"
        ));
    }
    for (flag, value, what) in [
        ("--bf-max-job-test", a.bf_max_job_test, "a backfill pass that considers no job starts none"),
        ("--default-queue-depth", a.default_queue_depth, "a main scheduler that considers no job starts none"),
        ("--preempt-max-job-test", a.preempt_max_job_test, "with no preemption search per pass, no job could ever preempt"),
    ] {
        if value == 0 {
            bad.push(format!("{flag} 0: must be at least 1 ({what})"));
        }
    }
    if a.bf_interval == 0 {
        bad.push("--bf-interval 0: must be at least 1s (the time between backfill passes)".to_owned());
    }
    if a.sched_interval == Some(0) {
        bad.push("--sched-interval 0: must be at least 1s (the time between the main scheduler's full passes)".to_owned());
    }
    if a.horizon == Some(0) {
        bad.push("--horizon 0: must be longer than zero (the simulation stops this long after the first submission)".to_owned());
    }
    let (from, to) = (a.gantt_from.unwrap_or(GANTT_FROM), a.gantt_to.unwrap_or(GANTT_TO));
    if from >= to {
        let default = |given: Option<i64>| if given.is_none() { " (the default)" } else { "" };
        bad.push(format!(
            "--gantt-from {}{} is not before --gantt-to {}{}: the Gantt chart's window would be empty",
            format_duration(from),
            default(a.gantt_from),
            format_duration(to),
            default(a.gantt_to)
        ));
    }
    if let Some(kept) = a.small_job_nodes.filter(|&k| k >= cluster.nodes) {
        bad.push(format!("--small-job-nodes {kept} keeps every node of the {cluster} cluster for small jobs: leave at least one for the others"));
    }
    if let Some(j) = &a.json {
        if j.is_dir() {
            bad.push(format!("--json {}: is a directory; give the name of the file to write", j.display()));
        } else if let Some(parent) = j.parent().filter(|p| !p.as_os_str().is_empty() && !p.is_dir()) {
            bad.push(format!("--json {}: the directory {} does not exist", j.display(), parent.display()));
        }
    }
    if let Some(p) = &a.plots {
        if p.exists() && !p.is_dir() {
            bad.push(format!("--plots {}: is a file, not a directory", p.display()));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bail!("{}", bad.join("\n"))
    }
}

/// Puts the command line's policy settings over the budget's, as if they
/// were written in its `[cluster]` table: a default minimum runtime that the
/// budget does not give follows the cap, by the budget parser's rule.
/// Settings the parser would refuse are refused, naming the flags.
fn apply_settings(s: &mut ClusterSettings, a: &RunArgs, budget_gives_default: bool) -> anyhow::Result<()> {
    // (field, the flag as given) for every override.
    let mut given: Vec<(&str, String)> = Vec::new();
    for (setting, v) in a.policy_settings.given() {
        (setting.set)(s, v);
        given.push((setting.key, format!("{} {}", setting.flag(), v.show())));
    }
    // A default minimum runtime that neither the budget nor a flag gives
    // follows a lower cap, by the budget parser's rule.
    if let (Some(SettingValue::Duration(cap)), None, false) =
        (a.policy_settings.get("min_runtime_cap"), a.policy_settings.get("default_min_runtime"), budget_gives_default)
    {
        s.default_min_runtime = ClusterSettings::default_min_runtime_for_cap(cap);
    }
    let Err(broken) = s.validate() else { return Ok(()) };
    let messages: Vec<String> = broken
        .iter()
        .map(|e| {
            let flags: Vec<&str> = given.iter().filter(|(field, _)| e.fields().contains(field)).map(|(_, flag)| flag.as_str()).collect();
            let what = match e {
                SettingsError::DefaultAboveCap { default_min_runtime, min_runtime_cap } => {
                    let hint = if a.policy_settings.get("default_min_runtime").is_none() {
                        " (the budget's default_min_runtime: give --default-min-runtime too)"
                    } else {
                        ""
                    };
                    format!(
                        "the default minimum runtime {}{hint} exceeds the minimum-runtime cap of {}",
                        format_duration(*default_min_runtime),
                        format_duration(*min_runtime_cap)
                    )
                }
                _ => format!("{}: {e}", e.field()),
            };
            if flags.is_empty() {
                format!("the budget's {what}")
            } else {
                format!("{}: {what}", flags.join(" with "))
            }
        })
        .collect();
    bail!("{}", messages.join("\n"))
}

/// `--restorable-kinds`: the kinds' indices; their jobs become resumable (a
/// session's job is requeueable). A kind the workload lacks is an error.
fn restorable_kinds(workload: &mut allot_sim::workload::Workload, names: &[String]) -> anyhow::Result<Vec<u32>> {
    let mut kinds = Vec::new();
    for name in names.iter().filter(|n| !n.is_empty()) {
        let Some(k) = workload.kinds.iter().position(|k| k == name) else {
            bail!("--restorable-kinds: the workload has no jobs of kind '{name}' (its kinds: {})", workload.kinds.join(", "));
        };
        kinds.push(k as u32);
    }
    for job in workload.jobs.iter_mut().filter(|j| kinds.contains(&j.kind)) {
        job.resumable = true;
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand)]
    enum Command {
        Simulate(SimulateArgs),
    }

    fn allot(args: &[&str]) -> anyhow::Result<ExitCode> {
        let cli = Cli::try_parse_from(std::iter::once("allot").chain(std::iter::once("simulate")).chain(args.iter().copied()))?;
        let Command::Simulate(a) = cli.command;
        run_with_ledger(a, None)
    }

    #[test]
    fn same_input_and_seed_write_the_same_json_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        for (csv, toml) in [("a.csv", "a.toml"), ("b.csv", "b.toml")] {
            allot(&["generate", "scenario", "--cluster", "4x8", "--days", "3", "--teams", "4", "--seed", "9", "--out", &p(csv), "--budgets-out", &p(toml)])
                .unwrap();
        }
        assert_eq!(fs::read(p("a.csv")).unwrap(), fs::read(p("b.csv")).unwrap());
        for out in ["a.json", "b.json"] {
            allot(&[&p("a.csv"), "--cluster", "4x8", "--budgets", &p("a.toml"), "--no-timing", "-q", "--check", "--json", &p(out)]).unwrap();
        }
        let a = fs::read(p("a.json")).unwrap();
        assert_eq!(a, fs::read(p("b.json")).unwrap());
        let doc: serde_json::Value = serde_json::from_slice(&a).unwrap();
        let reports = doc["reports"].as_array().unwrap();
        assert_eq!(reports.len(), 2);
        assert_eq!(reports[0]["policy"], "allot");
        assert!(reports[0]["sim_seconds"].is_null());
        for key in [
            "jobs",
            "jobs_completed",
            "wait_p50_s",
            "wait_p90_s",
            "wait_p99_s",
            "by_kind",
            "preemptions",
            "gpu_hours_lost_to_preemption",
            "occupancy",
            "unallocated_fraction",
            "max_gpus_in_use",
            "gpu_seconds_delivered",
            "teams_at_95pct_of_owed",
        ] {
            assert!(!reports[1][key].is_null(), "{key} missing");
        }
        for key in ["owed_gpu_hours", "delivered_gpu_hours", "delivered_over_owed"] {
            assert!(!reports[0]["teams"][0][key].is_null(), "teams.{key} missing");
        }
    }

    #[test]
    fn a_short_debug_scenario_keeps_its_bursts_and_counts_within_the_span() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        let out = p("s.csv");
        let gen = |extra: &[&str]| {
            let mut args = vec!["generate", "debug", "--variant", "bursty", "--cluster", "16x8", "--days", "0.75", "--out", &out];
            args.extend_from_slice(extra);
            allot(&args)
        };
        gen(&["--training-nodes", "1-2", "--debug-per-team", "40", "--fillers-per-team", "6"]).unwrap();
        let w = read_workload(Path::new(&out), false).unwrap();
        let count = |kind: &str| w.jobs.iter().filter(|j| w.kinds[j.kind as usize] == kind).count();
        assert_eq!((count("debug"), count("filler")), (6 * 40, 6 * 6));
        assert!(count("training") > 0);
        // Bursts of two days would run past a span of 18 hours: a third of it instead.
        assert!(w.jobs.iter().all(|j| j.submit < 18 * 3600), "a submission after the span");
        assert!(w.jobs.iter().filter(|j| w.kinds[j.kind as usize] == "training").all(|j| j.gpus == 8 || j.gpus == 16));
        for bad in ["0-2", "3-2", "2"] {
            let e = gen(&["--training-nodes", bad]).unwrap_err().to_string();
            assert!(e.contains("expected MIN-MAX whole nodes"), "{bad}: {e}");
        }
    }

    #[test]
    fn slurms_main_clock_is_a_setting_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        fs::write(p("w.csv"), "job_id,submit_s,gpus,runtime_s,team\n1,0,1,600,a\n2,5,1,600,a\n").unwrap();
        fs::write(p("b.toml"), "[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n").unwrap();
        let run = |extra: &[&str]| -> anyhow::Result<serde_json::Value> {
            let mut args = vec![p("w.csv"), "--cluster".into(), "1x8".into(), "--budgets".into(), p("b.toml"), "-q".into(), "--no-timing".into()];
            args.extend(["--policy".into(), "allot".into(), "--json".into(), p("r.json")]);
            args.extend(extra.iter().map(|s| s.to_string()));
            allot(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
            Ok(serde_json::from_slice(&fs::read(p("r.json")).unwrap()).unwrap())
        };
        let off = run(&[]).unwrap();
        assert!(off["settings"]["sched_interval_s"].is_null() && off["settings"]["batch_sched_delay_s"].is_null());
        let on = run(&["--sched-interval", "10s"]).unwrap();
        assert_eq!((on["settings"]["sched_interval_s"].as_i64(), on["settings"]["batch_sched_delay_s"].as_i64()), (Some(10), Some(3)));
        // Without the clock both start in their second; with it, a second later.
        let p90 = |v: &serde_json::Value| v["reports"][0]["wait_p90_s"].as_i64();
        assert_eq!((p90(&off), p90(&on)), (Some(0), Some(1)), "{}", on["reports"][0]);
        let e = run(&["--batch-sched-delay", "5s"]).unwrap_err().to_string();
        assert!(e.contains("--sched-interval"), "{e}");
        let e = run(&["--sched-interval", "0s"]).unwrap_err().to_string();
        assert!(e.contains("--sched-interval 0: must be at least 1s"), "{e}");
    }

    #[test]
    fn the_debug_scenario_and_the_preemption_switches() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        allot(&["generate", "debug", "--variant", "bursty", "--cluster", "4x8", "--days", "2", "--out", &p("d.csv"), "--budgets-out", &p("d.toml")]).unwrap();
        let e = allot(&["generate", "debug", "--variant", "nope", "--out", &p("x.csv")]).unwrap_err().to_string();
        assert!(e.contains("unknown variant 'nope'") && e.contains("pinned"), "{e}");
        let args = [&p("d.csv"), "--cluster", "4x8", "--budgets", &p("d.toml"), "-q", "--check", "--no-timing", "--policy", "allot", "--json", &p("r.json")];
        let settings = |extra: &[&str]| -> serde_json::Value {
            let mut all: Vec<&str> = args.to_vec();
            all.extend_from_slice(extra);
            allot(&all).unwrap();
            serde_json::from_slice::<serde_json::Value>(&fs::read(p("r.json")).unwrap()).unwrap()
        };
        let on = settings(&[]);
        assert_eq!((on["settings"]["preempt_within_team"].as_bool(), on["settings"]["unallocated_grace_s"].as_i64()), (Some(true), Some(0)));
        assert!(on["reports"][0]["ping_pongs"].is_u64() && on["reports"][0]["teams"][0]["by_kind"]["debug"]["wait_p90_s"].is_i64());
        let off = settings(&["--preempt-within-team", "false", "--preempt-smallest-first", "false", "--unallocated-grace", "5m"]);
        assert_eq!(off["settings"]["preempt_within_team"].as_bool(), Some(false));
        assert_eq!(off["reports"][0]["preemptions_within_team"].as_u64(), Some(0));
        let e = allot(&[&p("d.csv"), "--cluster", "4x8", "--unallocated-grace=-1m"]).unwrap_err().to_string();
        assert!(e.contains("--unallocated-grace"), "{e}");
    }

    #[test]
    fn bad_rows_fail_with_their_line_numbers_unless_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("w.csv");
        fs::write(&csv, "submit_s,gpus,runtime_s,team\n0,1,60,a\n0,x,60,a\n5,1,-3,a\n").unwrap();
        let e = allot(&[csv.to_str().unwrap(), "--cluster", "1x8", "-q"]).unwrap_err().to_string();
        let name = csv.display();
        assert!(e.contains(&format!("{name}:3: column 2 (gpus): gpus must be a whole number of at least 1, got 'x'")), "{e}");
        assert!(e.contains(&format!("{name}:4: column 3 (runtime_s): runtime_s must be a whole number of seconds of at least 1, got -3")), "{e}");
        assert!(allot(&[csv.to_str().unwrap(), "--cluster", "1x8", "-q", "--skip-bad-rows"]).is_ok());
    }

    #[test]
    fn clear_errors_for_bad_options() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("w.csv");
        fs::write(&csv, "submit_s,gpus,runtime_s,team\n0,1,60,a\n").unwrap();
        let path = csv.to_str().unwrap();
        let e = allot(&[path, "--cluster", "1x8", "--policy", "fifo"]).unwrap_err().to_string();
        assert!(e.contains("unknown policy 'fifo'"), "{e}");
        let e = allot(&[path, "--cluster", "8"]).unwrap_err().to_string();
        assert!(e.contains("NODESxGPUS"), "{e}");
        let e = allot(&[path, "--cluster", "1x8", "--plots", dir.path().to_str().unwrap(), "--font", "/nonexistent/font.ttf"]).unwrap_err().to_string();
        assert!(e.contains("fonts-dejavu-core"), "{e}");
        let e = allot(&[path, "--cluster", "1x8", "--default-min-runtime", "9h"]).unwrap_err().to_string();
        assert!(e.contains("exceeds the minimum-runtime cap"), "{e}");
        let e = allot(&[path, "--cluster", "1x8", "--lookback", "7"]).unwrap_err().to_string();
        assert!(e.contains("give a unit"), "{e}");
    }

    #[test]
    fn overrides_keep_the_budget_rules_and_name_their_flags() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("w.csv");
        fs::write(&csv, "submit_s,gpus,runtime_s,team\n0,1,60,a\n").unwrap();
        let path = csv.to_str().unwrap();
        let json = dir.path().join("r.json");
        let settings = |args: &[&str]| -> serde_json::Value {
            let mut all = vec![path, "--cluster", "1x8", "-q", "--no-timing", "--json", json.to_str().unwrap()];
            all.extend_from_slice(args);
            allot(&all).unwrap();
            serde_json::from_slice::<serde_json::Value>(&fs::read(&json).unwrap()).unwrap()["settings"].clone()
        };
        // No budget file: the default minimum runtime follows a lower cap, as the budget parser's does.
        let s = settings(&["--min-runtime-cap", "30m"]);
        assert_eq!((s["min_runtime_cap_s"].as_i64(), s["default_min_runtime_s"].as_i64()), (Some(1800), Some(1800)));
        // A budget that gives its default: a lower cap is refused, not applied by lowering the default.
        let budget = dir.path().join("b.toml");
        fs::write(&budget, "[cluster]\ndefault_min_runtime = \"1h\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n").unwrap();
        let b = budget.to_str().unwrap();
        let e = allot(&[path, "--cluster", "1x8", "-q", "--budgets", b, "--min-runtime-cap", "30m"]).unwrap_err().to_string();
        assert!(e.contains("--min-runtime-cap 30m: the default minimum runtime 1h"), "{e}");
        assert!(e.contains("exceeds the minimum-runtime cap of 30m") && e.contains("give --default-min-runtime too"), "{e}");
        let s = settings(&["--budgets", b, "--min-runtime-cap", "30m", "--default-min-runtime", "10m"]);
        assert_eq!((s["min_runtime_cap_s"].as_i64(), s["default_min_runtime_s"].as_i64()), (Some(1800), Some(600)));
        let e = allot(&[path, "--cluster", "1x8", "--lookback", "0s"]).unwrap_err().to_string();
        assert!(e.contains("--lookback 0: lookback: the lookback window must be longer than zero"), "{e}");
        let e = allot(&[path, "--cluster", "1x8", "--preempt-margin=-0.5"]).unwrap_err().to_string();
        assert!(e.contains("--preempt-margin -0.5: preempt_margin: must be a number of at least 0"), "{e}");
        let e = allot(&[path, "--cluster", "1x8", "--bf-interval", "0"]).unwrap_err().to_string();
        assert!(e.contains("--bf-interval 0: must be at least 1s"), "{e}");
        // The JSON reports the interval the simulation used.
        assert_eq!(settings(&["--bf-interval", "1s"])["bf_interval_s"].as_i64(), Some(1));
        // By default, the scheduler's reach of the shipped slurm-allot.conf.
        let s = settings(&[]);
        let reach = allot_sim::Reach::SHIPPED;
        assert_eq!(
            (s["bf_max_job_test"].as_u64(), s["default_queue_depth"].as_u64(), s["bf_interval_s"].as_i64()),
            (Some(reach.bf_max_job_test as u64), Some(reach.default_queue_depth as u64), Some(reach.bf_interval))
        );
        let e = allot(&[path, "--cluster", "1x8", "--small-job-nodes", "1"]).unwrap_err().to_string();
        assert!(e.contains("--small-job-nodes 1 keeps every node of the 1x8 cluster for small jobs"), "{e}");
        let e = allot(&[path, "--cluster", "2x8", "--small-job-nodes=-1"]).unwrap_err().to_string();
        assert!(e.contains("invalid value '-1' for '--small-job-nodes"), "{e}");
    }
}
