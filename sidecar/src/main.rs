//! `allot`: the sidecar command. Syncs manager-set budgets into the ledger
//! that the Slurm plugins read, shows and edits them, and replays workloads
//! through the policy in the simulator.
use std::path::PathBuf;
use std::process::ExitCode;

use allot_cli::{budget_cmd, history, identity, now, report, sync, watch};
use clap::{Parser, Subcommand};

mod simulate;

#[derive(Parser)]
#[command(name = "allot", version = allot::BUILD, about = "Budgets and a scheduling contract for GPU clusters on Slurm")]
struct Cli {
    /// The ledger (SQLite). Default: $ALLOT_LEDGER, else /var/lib/allot/ledger.db.
    #[arg(long, global = true, value_name = "PATH")]
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
    },
    /// Why a job is where it is: its contract, runs, preemptions, and its
    /// budget's place in the fair-share order, level by level.
    Why { job: u32 },
    /// Replay a workload through the allot policy (and a baseline) and report.
    Simulate(simulate::SimulateArgs),
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = Cli::parse();
    let ledger = allot_ledger::resolve_path(cli.ledger.as_deref());
    let result = match cli.command {
        Command::Sync { file, check } => run_sync(&ledger, &file, check),
        Command::Budget(cmd) => budget_cmd::run(cmd, &ledger, now()),
        Command::History { limit } => history::run(&ledger, limit),
        Command::Watch { file } => watch::run(&ledger, &file),
        Command::Usage { window } => report::usage(&ledger, window.as_deref(), now()),
        Command::Why { job } => report::why(&ledger, job),
        Command::Simulate(args) => return simulate::run(args).unwrap_or_else(|e| fail(&e)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// `allot budget show | head` should end quietly when `head` exits, as
/// other Unix tools do, instead of reporting a broken pipe. Rust ignores
/// SIGPIPE by default; put back the default action.
fn restore_default_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: called first thing in main, before any other thread exists, and SIG_DFL installs no Rust code as a handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("allot: {e:#}");
    ExitCode::FAILURE
}

fn run_sync(ledger: &std::path::Path, file: &std::path::Path, check: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let source = file.display().to_string();
    let actor = identity::Actor::current(ledger)?;
    if check {
        let tree = sync::validate(&text, &source)?;
        sync::check(ledger, &tree, &actor)?;
        println!("{source}: valid, {} nodes, {} leaves; {} may sync it", tree.nodes.len(), tree.leaves.len(), actor.name);
        return Ok(());
    }
    let outcome = sync::sync_text(ledger, &text, &source, &actor, now())?;
    sync::report(&outcome, ledger);
    Ok(())
}
