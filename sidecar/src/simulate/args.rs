//! The command line of `allot simulate`: its subcommands, options and
//! their value parsers (clap), apart from what the commands do (`super`).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::*;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimulateArgs {
    #[command(subcommand)]
    pub(super) command: Option<SimulateCommand>,
    // Boxed: the options are many, and `Command` holds this by value.
    #[command(flatten)]
    pub(super) run: Box<RunArgs>,
}

#[derive(Subcommand)]
pub(super) enum SimulateCommand {
    /// Write a workload CSV: a generated scenario, or a trace with the columns it lacks derived.
    Generate {
        #[command(subcommand)]
        what: GenerateCommand,
    },
}

#[derive(Subcommand)]
pub(super) enum GenerateCommand {
    /// Bursty, seasonal demand per team at a multiple of capacity: debug jobs,
    /// single- and multi-node training, free sweeps, squatting sessions.
    Scenario(ScenarioArgs),
    /// Debug jobs under overload (docs/src/simulator/debug-overload.md): whole-node training at a
    /// multiple of capacity from every team, small short debug jobs, free fillers.
    Debug(DebugArgs),
    /// Fill in a trace's missing columns (user, min_runtime_s, resumable,
    /// priority, kind) by the seeded rule of docs/src/simulator/input.md; optionally replicate it.
    Trace(TraceArgs),
}

fn placement(s: &str) -> Result<Placement, String> {
    Placement::parse(s).ok_or_else(|| format!("unknown placement {s:?}: use best-fit or first-fit"))
}

fn duration(s: &str) -> Result<i64, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn cluster(s: &str) -> Result<ClusterSpec, String> {
    s.parse()
}

#[derive(Args)]
pub(super) struct ScenarioArgs {
    /// Cluster the load is sized for, NODESxGPUS.
    #[arg(long, value_parser = cluster, default_value = "75x8")]
    pub(super) cluster: ClusterSpec,
    /// Days of submissions.
    #[arg(long, default_value_t = 30.0)]
    pub(super) days: f64,
    /// Number of teams (budget leaves), in departments of up to four.
    #[arg(long, default_value_t = 12)]
    pub(super) teams: u32,
    /// Mean GPUs wanted over the cluster's GPUs (a team's peaks reach two to three times its share).
    #[arg(long, default_value_t = 1.2)]
    pub(super) load: f64,
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Where to write the workload CSV.
    #[arg(long, short)]
    pub(super) out: PathBuf,
    /// Where to write the matching budget TOML.
    #[arg(long)]
    pub(super) budgets_out: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct DebugArgs {
    /// base, load3, unequal, bursty, pinned or undeclared (see docs/src/simulator/debug-overload.md).
    #[arg(long, default_value = "base")]
    pub(super) variant: String,
    /// Cluster, NODESxGPUS.
    #[arg(long, value_parser = cluster, default_value = "32x8")]
    pub(super) cluster: ClusterSpec,
    #[arg(long, default_value_t = 14.0)]
    pub(super) days: f64,
    /// Training GPU-time wanted over the cluster's (default: the variant's).
    #[arg(long)]
    pub(super) load: Option<f64>,
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    #[arg(long, short)]
    pub(super) out: PathBuf,
    #[arg(long)]
    pub(super) budgets_out: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct TraceArgs {
    /// The trace CSV (submit_s,gpus,runtime_s,team at least).
    pub(super) trace: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Include every job this many times (copies after the first shifted by up to an hour).
    #[arg(long, default_value_t = 1)]
    pub(super) copies: u32,
    /// Multiply runtimes by this.
    #[arg(long, default_value_t = 1.0)]
    pub(super) runtime_scale: f64,
    /// GPUs per node: decides which jobs fit one node (debug jobs do).
    #[arg(long, default_value_t = 8)]
    pub(super) gpus_per_node: u32,
    /// Skip bad rows of the trace (they are listed) instead of failing.
    #[arg(long)]
    pub(super) skip_bad_rows: bool,
    #[arg(long, short)]
    pub(super) out: PathBuf,
}

#[derive(Args)]
pub(super) struct RunArgs {
    /// Workload CSV: submit_s,gpus,runtime_s,team [,job_id,user,min_runtime_s,resumable,priority,kind].
    #[arg(required_unless_present = "from_ledger", conflicts_with = "from_ledger")]
    pub(super) workload: Option<PathBuf>,
    /// Replay the jobs the ledger recorded (`--ledger`) over `--since`, under
    /// the budget in force unless `--budgets` says otherwise, and print what
    /// actually happened beside the simulation.
    #[arg(long)]
    pub(super) from_ledger: bool,
    /// The global `--ledger`, handed over by main.
    #[arg(skip)]
    pub(super) ledger: Option<PathBuf>,
    /// With --from-ledger, when several clusters share the ledger: the one
    /// (its Slurm ClusterName) whose jobs to replay.
    #[arg(long, requires = "from_ledger", value_name = "NAME")]
    pub(super) from_cluster: Option<String>,
    /// With --from-ledger: the span replayed, ending now (default 30d).
    #[arg(long, requires = "from_ledger", value_name = "DURATION")]
    pub(super) since: Option<String>,
    /// Cluster shape, NODESxGPUS (75x8: 75 nodes of 8 GPUs).
    #[arg(long, value_parser = cluster, required = true)]
    pub(super) cluster: Option<ClusterSpec>,
    /// Budget tree TOML; default: one leaf per team, equal shares.
    #[arg(long)]
    pub(super) budgets: Option<PathBuf>,
    /// Policies to run side by side, comma-separated: allot, baseline.
    #[arg(long, default_value = "allot,baseline", value_delimiter = ',')]
    pub(super) policy: Vec<String>,
    /// Fair-share window (overrides the budget's [cluster] lookback; budget default 7d).
    #[arg(long, value_parser = duration)]
    pub(super) lookback: Option<i64>,
    /// Largest minimum runtime a job may declare (budget default 8h); larger declarations run with the cap.
    #[arg(long, value_parser = duration)]
    pub(super) min_runtime_cap: Option<i64>,
    /// Minimum runtime of a job whose row gives none (budget default 1h, or the cap if lower).
    #[arg(long, value_parser = duration)]
    pub(super) default_min_runtime: Option<i64>,
    /// Time from the preemption signal to the kill (budget default 5m).
    #[arg(long, value_parser = duration)]
    pub(super) grace: Option<i64>,
    /// Grace time of an unallocated (min_runtime=0) victim, at most --grace (budget default 0).
    #[arg(long, value_parser = duration)]
    pub(super) unallocated_grace: Option<i64>,
    /// Anti-thrash margin of allot's preemption (budget default 0.1).
    #[arg(long)]
    pub(super) preempt_margin: Option<f64>,
    /// Preemption within a team by declared priority past the victim's minimum runtime (budget default true).
    #[arg(long)]
    pub(super) preempt_within_team: Option<bool>,
    /// Offer victims smallest first: unallocated, then fewest GPUs (budget default true; false: by leaf rank).
    #[arg(long)]
    pub(super) preempt_smallest_first: Option<bool>,
    /// Jobs of at most this many GPUs (and at most --small-job-min-runtime) preempt other teams with no margin (budget default 8; 0: none).
    #[arg(long)]
    pub(super) small_job_gpus: Option<u32>,
    /// See --small-job-gpus (budget default 30m).
    #[arg(long, value_parser = duration)]
    pub(super) small_job_min_runtime: Option<i64>,
    /// Resumable jobs checkpoint this often and lose the work since the last checkpoint when killed; 0: they checkpoint in their grace time and lose nothing.
    #[arg(long, value_parser = duration, default_value = "30m")]
    pub(super) checkpoint_interval: i64,
    /// Delay before a requeued job may start again.
    #[arg(long, value_parser = duration, default_value = "0")]
    pub(super) requeue_delay: i64,
    /// Baseline: a team's limit on non-preemptible GPUs, as a multiple of its share of the cluster (a positive number).
    #[arg(long, default_value_t = 1.0)]
    pub(super) baseline_limit_factor: f64,
    /// Baseline: use the workload's priority column as cluster-wide static priority levels (default: one level, first come first served).
    #[arg(long)]
    pub(super) baseline_priority_levels: bool,
    /// Pending jobs one backfill pass considers (Slurm's bf_max_job_test).
    #[arg(long, default_value_t = 500)]
    pub(super) bf_max_job_test: usize,
    /// Preemption searches per scheduling pass.
    #[arg(long, default_value_t = 16)]
    pub(super) preempt_max_job_test: usize,
    /// Pending jobs the main scheduler considers after each event (Slurm's default_queue_depth).
    #[arg(long, default_value_t = 100)]
    pub(super) default_queue_depth: usize,
    /// Time between backfill passes (Slurm's bf_interval).
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub(super) bf_interval: i64,
    /// Keep the last this many nodes for small jobs (see --small-job-gpus) and unallocated ones (Slurm: allot.conf's SmallJobPartition). Default: the shipped layout, one node per 100 or part of it (none on one node); with --from-ledger, none. 0: none.
    #[arg(long)]
    pub(super) small_job_nodes: Option<u32>,
    /// Where single-node jobs go among the nodes they fit: best-fit (the fullest node that fits; keeps whole nodes whole) or first-fit (the lowest-numbered, for comparison).
    #[arg(long, default_value = "best-fit", value_parser = placement)]
    pub(super) placement: Placement,
    /// Preemption leaves backfill's reservation for the first blocked job alone, as backfill's own starts do (default: Slurm's behaviour, where the main scheduler preempts without knowing backfill's plans).
    #[arg(long)]
    pub(super) preempt_around_reservation: bool,
    /// Backfill's reservation counts a running job the blocked job may preempt as released when its protection ends (plus grace), not when it ends (allot).
    #[arg(long)]
    pub(super) plan_with_protection_ends: bool,
    /// Stop this long after the first submission (default: when every job is done).
    #[arg(long, value_parser = duration)]
    pub(super) horizon: Option<i64>,
    /// Write the reports as JSON here.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Write pictures here: shares-POLICY.png, and gantt-POLICY.png for clusters of at most 256 GPUs.
    #[arg(long)]
    pub(super) plots: Option<PathBuf>,
    /// Start of the Gantt chart window, from the first submission (default 0).
    #[arg(long, value_parser = duration)]
    pub(super) gantt_from: Option<i64>,
    /// End of the Gantt chart window, from the first submission (default 2d); after --gantt-from.
    #[arg(long, value_parser = duration)]
    pub(super) gantt_to: Option<i64>,
    /// TrueType font for the pictures' text.
    #[arg(long, default_value = plot::DEFAULT_FONT)]
    pub(super) font: PathBuf,
    /// Run without the bad rows of the workload (they are listed) instead of failing.
    #[arg(long)]
    pub(super) skip_bad_rows: bool,
    /// Leave sim_seconds and simulated_days_per_second out, so that outputs compare byte for byte.
    #[arg(long)]
    pub(super) no_timing: bool,
    /// Check the simulation's invariants afterwards (GPUs never oversubscribed, delivered = executed,
    /// no protected job preempted, unallocated time never charged, every job accounted for); fail if one breaks.
    #[arg(long)]
    pub(super) check: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub(super) quiet: bool,
}
