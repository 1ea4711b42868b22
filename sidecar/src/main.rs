//! `allot`: the sidecar command. Syncs manager-set budgets into the ledger
//! that the Slurm plugins read, shows and edits them, and replays workloads
//! through the policy in the simulator.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use allot_cli::{associations, budget_cmd, cluster_report, doctor, history, identity, ledger_cmd, now, report, serve, session, sync, watch};
use allot_ledger::health;
use clap::{Parser, Subcommand};

mod replay;
mod simulate;

// mimalloc: `allot simulate` ran 7% to 17% faster than on glibc's malloc in
// alternating runs of the 300,000-job case (docs/src/simulator/speed.md), with
// byte-identical reports.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "allot", version = allot::BUILD, about = "Budgets and a scheduling contract for GPU clusters on Slurm")]
struct Cli {
    /// The ledger: a SQLite file, or a server's
    /// mysql://USER@HOST/DATABASE?password_file=FILE. Default:
    /// $ALLOT_LEDGER, else LedgerPath (or LedgerUrl) of the allot.conf
    /// beside slurm.conf, else /var/lib/allot/ledger.db. Under sudo, only
    /// admins may choose it.
    #[arg(long, global = true, value_name = "PATH|URL")]
    ledger: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a budget file and write it into the ledger as a new version.
    Sync {
        file: PathBuf,
        /// Validate and check permissions only; write nothing.
        #[arg(long)]
        check: bool,
    },
    /// Show or edit the budget tree.
    #[command(subcommand)]
    Budget(budget_cmd::BudgetCommand),
    /// Budget versions: who synced what, when, and what changed.
    History {
        /// Show only the newest N versions.
        #[arg(short = 'n', long)]
        limit: Option<usize>,
    },
    /// Re-sync a budget file whenever it changes (run as a service).
    Watch { file: PathBuf },
    /// GPU-hours charged to each budget over a window, against what it is owed.
    Usage {
        /// The window, ending now (default: the budget's lookback).
        #[arg(long)]
        window: Option<String>,
        /// When several clusters share the ledger: the one (its Slurm
        /// ClusterName) to show. Default: the lab as a whole (every cluster's usage summed).
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// The cluster's fairness figures from the ledger: per budget delivered
    /// against owed (given its demand), charged and unallocated; occupancy;
    /// queue waits by kind and size; preemptions. The same figures, and
    /// JSON field names, as `allot simulate`.
    Report {
        /// The span, ending now (default 30d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Also write the report as JSON into FILE (`-`: print the JSON
        /// instead of the text).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Draw the pictures into DIR (shares.png: each budget's GPUs held
        /// against owed and share).
        #[arg(long, value_name = "DIR")]
        plots: Option<PathBuf>,
        /// Draw this budget node and every node below it, not the leaves.
        #[arg(long, value_name = "NODE")]
        under: Option<String>,
        /// TrueType font for the pictures' text.
        #[arg(long, default_value = allot_sim::plot::DEFAULT_FONT)]
        font: PathBuf,
        /// When several clusters share the ledger: the one (its Slurm
        /// ClusterName) to show. Default: the lab as a whole: every cluster's GPUs and jobs together, a job known by its cluster and number.
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// A read-only web page over the ledger: the figures of `allot report`,
    /// the tree, the waiting jobs in allot's order, any job's `allot why`,
    /// the pictures; and /metrics for Prometheus.
    Serve {
        /// Address to listen on (localhost by default: put a proxy in front
        /// to show it further).
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
        listen: String,
        /// The span of the figures, ending now (default 30d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// TrueType font for the pictures' text.
        #[arg(long, default_value = allot_sim::plot::DEFAULT_FONT)]
        font: PathBuf,
        /// When several clusters share the ledger: the one (its Slurm
        /// ClusterName) to show. Default: the lab as a whole when the ledger has one cluster (with several it asks which).
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// Why a job is where it is: its contract, runs, preemptions, and its
    /// budget's place in the fair-share order, level by level.
    Why {
        job: u32,
        /// When several clusters share the ledger: the one (its Slurm
        /// ClusterName) to show. Default: the lab as a whole: the cluster that has a job of this number (with two, it asks which).
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// Check the ledger file, or recover from a damaged one.
    #[command(subcommand)]
    Ledger(ledger_cmd::LedgerCommand),
    /// The Slurm accounts and user associations the budget needs with
    /// slurmdbd (AccountingStorageEnforce=associations): prints the sacctmgr
    /// lines, or adds the missing ones.
    Associations {
        /// The Slurm cluster (default: ClusterName of slurm.conf).
        #[arg(long)]
        cluster: Option<String>,
        /// Run sacctmgr: add the accounts and associations that are missing
        /// (nothing is removed; strays are listed).
        #[arg(long)]
        apply: bool,
    },
    /// Interactive sessions that survive preemption: checkpointed (CRIU) at
    /// the grace signal, restored when the job runs again.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Check that allot's plugins match the running slurmctld (its version,
    /// every symbol its plugin loaders look up) and its configuration
    /// (slurm.conf's lines, allot.conf's ledger, permissions, filesystem):
    /// a verdict, and what to fix. Run it after each install, rebuild or
    /// Slurm update.
    Doctor {
        /// slurm.conf (default: $SLURM_CONF, else /etc/slurm/slurm.conf).
        #[arg(long, value_name = "PATH")]
        slurm_conf: Option<PathBuf>,
    },
    /// Replay a workload through the allot policy (and a baseline) and report.
    Simulate(simulate::SimulateArgs),
    /// Run a workload file on this (test) cluster, scaled in time, and set
    /// what happened beside the simulator's prediction of the same jobs.
    Replay(replay::ReplayArgs),
    /// Write allot's man pages or shell completions (for packaging).
    #[command(hide = true, subcommand)]
    Generate(Generate),
}

#[derive(Subcommand)]
enum Generate {
    /// allot.1 and one page per subcommand (allot-sync.1, ...), into DIR.
    Man { dir: PathBuf },
    /// Completion scripts for bash, zsh and fish, into DIR.
    Completions { dir: PathBuf },
}

/// `allot generate`: the documents are generated from the same clap
/// definitions the command parses with, so they cannot drift from it.
fn generate(what: Generate) -> anyhow::Result<()> {
    use anyhow::Context;
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    match what {
        Generate::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir).with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
        }
        Generate::Completions { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
                clap_complete::generate_to(shell, &mut cmd, "allot", &dir)
                    .with_context(|| format!("cannot write the {shell} completions into {}", dir.display()))?;
            }
        }
    }
    Ok(())
}

/// The file and directory arguments given on the command line (every
/// `PathBuf` argument of the subcommand invoked, whatever its name), but
/// `--ledger` and the budget file (`FILE`, `--file`), which have rules of
/// their own ([`identity::Invocation::may_choose`]).
fn named_files(cmd: &clap::Command, matches: &clap::ArgMatches) -> Vec<String> {
    let mut named = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "ledger" | "file") || arg.get_value_parser().type_id() != std::any::TypeId::of::<PathBuf>() {
            continue;
        }
        if matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
            let flag =
                arg.get_long().map_or_else(|| arg.get_value_names().and_then(|v| v.first()).map_or(id.to_uppercase(), |v| v.to_string()), |l| format!("--{l}"));
            // `-`: standard input or output, which the user's shell opened.
            for value in matches.get_raw(id).into_iter().flatten().filter(|v| *v != "-") {
                named.push(format!("{flag} {}", Path::new(value).display()));
            }
        }
    }
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(sub_cmd) = cmd.find_subcommand(name) {
            named.extend(named_files(sub_cmd, sub));
        }
    }
    named
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Under sudo allot runs as root: a file it reads or writes for a user
    // who is not an admin would be read or written with root's rights.
    if identity::under_sudo() {
        let named = named_files(&Cli::command(), &matches);
        if let Err(e) = identity::may_name_files_under_sudo(&named) {
            return fail(&e, None);
        }
    }
    let command = match cli.command {
        Command::Simulate(args) => return simulate::run_with_ledger(args, cli.ledger.as_deref()).unwrap_or_else(|e| fail(&e, None)),
        Command::Replay(args) => return replay::run(args, cli.ledger.as_deref()).unwrap_or_else(|e| fail(&e, None)),
        Command::Generate(what) => return generate(what).map(|()| ExitCode::SUCCESS).unwrap_or_else(|e| fail(&e, None)),
        // Reads no ledger of its own choosing: allot.conf's, as the plugins do.
        Command::Doctor { slurm_conf } => {
            let conf = slurm_conf.unwrap_or_else(identity::slurm_conf_path);
            return doctor::run(&conf).map(|()| ExitCode::SUCCESS).unwrap_or_else(|e| fail(&e, None));
        }
        // Reads no ledger: a session is a job and a private directory.
        Command::Session(cmd) => {
            return match session::run(cmd) {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(e) => fail(&e, None),
            };
        }
        other => other,
    };
    let inv = match identity::Invocation::resolve(cli.ledger.as_deref()) {
        Ok(inv) => inv,
        Err(e) => return fail(&e, None),
    };
    let ledger = inv.ledger.clone();
    // A file that is not a database at all is reported before SQLite opens
    // it; `allot ledger` examines it itself.
    if !matches!(command, Command::Ledger(_)) {
        if let Some(path) = ledger.file() {
            if let Err(problem) = health::preflight(path) {
                eprintln!("allot: {}", ledger_cmd::explain(&problem, path));
                return ExitCode::FAILURE;
            }
        }
    }
    let result = match command {
        Command::Sync { file, check } => run_sync(&inv, &file, check),
        Command::Budget(cmd) => budget_cmd::run(cmd, &inv, now()),
        Command::History { limit } => history::run(&ledger, limit),
        Command::Watch { file } => watch_file(&inv, &file),
        Command::Usage { window, cluster } => report::usage(&ledger, cluster.as_deref(), window.as_deref(), now()),
        Command::Report { since, json, plots, under, font, cluster } => {
            let args =
                cluster_report::ReportArgs { since: since.as_deref(), json: json.as_deref(), plots: plots.as_deref(), under: under.as_deref(), font: &font };
            cluster_report::run(&ledger, cluster.as_deref(), &args, now())
        }
        Command::Serve { listen, since, font, cluster } => serve::run(&ledger, cluster.as_deref(), &listen, since.as_deref(), &font),
        Command::Why { job, cluster } => report::why(&ledger, cluster.as_deref(), job),
        Command::Associations { cluster, apply } => run_associations(&inv, cluster.as_deref(), apply),
        Command::Ledger(cmd) => ledger_cmd::run(cmd, &inv, now()),
        Command::Simulate(_) | Command::Replay(_) | Command::Generate(_) | Command::Doctor { .. } | Command::Session(_) => unreachable!("handled above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, ledger.file()),
    }
}

/// `allot budget show | head` should end quietly when `head` exits, as
/// other Unix tools do, instead of reporting a broken pipe. Rust ignores
/// SIGPIPE by default; put back the default action.
#[allow(unsafe_code)] // the CLI's one unsafe call; see sidecar/Cargo.toml
fn restore_default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: called first thing in main, before any other thread exists, and SIG_DFL installs no Rust code as a handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Prints the error; a damaged or locked ledger is explained with what to do.
fn fail(e: &anyhow::Error, ledger: Option<&Path>) -> ExitCode {
    let problem = ledger.and_then(|ledger| {
        e.chain()
            .find_map(|cause| {
                let ledger_error = cause.downcast_ref::<allot_ledger::LedgerError>().or_else(|| match cause.downcast_ref::<sync::SyncError>() {
                    Some(sync::SyncError::Ledger(le)) => Some(le),
                    _ => None,
                })?;
                health::classify(ledger_error).filter(health::Problem::has_advice)
            })
            .map(|p| (p, ledger))
    });
    match problem {
        Some((p, ledger)) => eprintln!("allot: {}", ledger_cmd::explain(&p, ledger)),
        None => eprintln!("allot: {e:#}"),
    }
    ExitCode::FAILURE
}

/// Under sudo, only an admin names the budget file: a manager's edits go
/// through `allot budget`, into the file the ledger records.
const MANAGERS_EDIT: &str = "managers edit the budget with `sudo allot budget set|add|remove`, which edits the file last synced into the ledger";

fn run_sync(inv: &identity::Invocation, file: &Path, check: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    inv.may_choose("the budget file", "the FILE of `allot sync`", MANAGERS_EDIT)?;
    let ledger = &inv.ledger;
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let source = file.display().to_string();
    let actor = &inv.actor;
    if check {
        let tree = sync::validate(&text, &source)?;
        sync::check(ledger, &tree, actor)?;
        println!("{source}: valid, {} nodes, {} leaves; {} may sync it", tree.nodes.len(), tree.leaves.len(), actor.name);
        return Ok(());
    }
    // The ledger records the absolute path: `allot budget` edits that file
    // later, from whatever directory it runs in.
    let recorded = std::path::absolute(file).with_context(|| format!("cannot resolve {}", file.display()))?;
    let outcome = sync::sync_text_from(ledger, &text, &source, &recorded.display().to_string(), actor, now())?;
    sync::report(&outcome, ledger);
    Ok(())
}

fn run_associations(inv: &identity::Invocation, cluster: Option<&str>, apply: bool) -> anyhow::Result<()> {
    let l = allot_ledger::Ledger::connect_read_only(&inv.ledger)?;
    let v = l.current_budget()?.ok_or_else(|| anyhow::anyhow!("no budget has been synced into {} yet", inv.ledger))?;
    let tree = v.tree().map_err(|e| anyhow::anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?;
    let plan = associations::plan(&tree, &associations::cluster_name(cluster)?);
    if apply {
        inv.require_admin("change Slurm's associations")?;
        associations::apply(&plan)
    } else {
        print!("{}", associations::render(&plan, v.version));
        Ok(())
    }
}

fn watch_file(inv: &identity::Invocation, file: &Path) -> anyhow::Result<()> {
    inv.may_choose("the budget file", "the FILE of `allot watch`", MANAGERS_EDIT)?;
    watch::run(&inv.ledger, file, &inv.actor)
}
