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

/// The flags of the policy settings (`allot::settings::POLICY_SETTINGS`,
/// where each is named once): `--KEY` with `-` for `_`, parsed by the kind
/// of its value; what the command line gives, in the table's order.
#[derive(Clone, Default)]
pub(super) struct PolicyFlags(Vec<(&'static PolicySetting, SettingValue)>);

impl PolicyFlags {
    /// The settings given, with their values.
    pub(super) fn given(&self) -> impl Iterator<Item = (&'static PolicySetting, SettingValue)> + '_ {
        self.0.iter().copied()
    }

    /// The value given for `key`, if any.
    pub(super) fn get(&self, key: &str) -> Option<SettingValue> {
        self.0.iter().find(|(s, _)| s.key == key).map(|&(_, v)| v)
    }
}

impl clap::FromArgMatches for PolicyFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(PolicyFlags(POLICY_SETTINGS.iter().filter_map(|s| m.get_one::<SettingValue>(s.key).map(|&v| (s, v))).collect()))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// Reads one flag's value as its setting's kind.
type ValueReader = fn(&str) -> Result<SettingValue, String>;

impl Args for PolicyFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        POLICY_SETTINGS.iter().fold(cmd, |cmd, s| {
            let default = s.value(&ClusterSettings::default());
            let (value_name, parser): (&str, ValueReader) = match default {
                SettingValue::Duration(_) => ("DURATION", |v| duration(v).map(SettingValue::Duration)),
                SettingValue::Fraction(_) => ("NUMBER", |v| v.parse().map(SettingValue::Fraction).map_err(|e| format!("{e}"))),
                SettingValue::Flag(_) => ("true|false", |v| v.parse().map(SettingValue::Flag).map_err(|e| format!("{e}"))),
                SettingValue::Count(_) => ("N", |v| v.parse().map(SettingValue::Count).map_err(|e| format!("{e}"))),
            };
            cmd.arg(
                clap::Arg::new(s.key)
                    .long(s.flag().trim_start_matches("--").to_owned())
                    .value_name(value_name)
                    .value_parser(clap::builder::ValueParser::new(parser))
                    .help(format!("{} (the budget's [cluster] {}; default {})", s.doc, s.key, default.show())),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
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
    /// Whole nodes of a training job, MIN-MAX (default: the variant's, 2-8; narrow 1-2).
    #[arg(long, value_name = "MIN-MAX", value_parser = node_range)]
    pub(super) training_nodes: Option<(u32, u32)>,
    /// Debug jobs per team over the span (default 300, made for 14 days).
    #[arg(long)]
    pub(super) debug_per_team: Option<u32>,
    /// Unallocated filler jobs per team over the span (default 100, made for 14 days).
    #[arg(long)]
    pub(super) fillers_per_team: Option<u32>,
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
    /// One flag per policy setting (`--lookback 1d`, `--preempt-margin 0.2`, ...), over the budget's [cluster] values.
    #[command(flatten)]
    pub(super) policy_settings: PolicyFlags,
    /// Resumable jobs checkpoint this often and lose the work since the last checkpoint when killed; 0: they checkpoint in their grace time and lose nothing.
    #[arg(long, value_parser = duration, default_value = "30m")]
    pub(super) checkpoint_interval: i64,
    /// Jobs of these kinds (the workload's `kind` column, comma-separated)
    /// are restored after a preemption, as `allot session` restores a session:
    /// requeued, nothing lost (e.g. `interactive`).
    #[arg(long, value_delimiter = ',', value_name = "KIND")]
    pub(super) restorable_kinds: Vec<String>,
    /// Delay before a requeued job may start again.
    #[arg(long, value_parser = duration, default_value = "0")]
    pub(super) requeue_delay: i64,
    /// Baseline: a team's limit on non-preemptible GPUs, as a multiple of its share of the cluster (a positive number).
    #[arg(long, default_value_t = 1.0)]
    pub(super) baseline_limit_factor: f64,
    /// Baseline: use the workload's priority column as cluster-wide static priority levels (default: one level, first come first served).
    #[arg(long)]
    pub(super) baseline_priority_levels: bool,
    /// Pending jobs one backfill pass considers (Slurm's bf_max_job_test; the default is the shipped slurm-allot.conf's, Slurm's own is 500).
    #[arg(long, default_value_t = allot_sim::Reach::SHIPPED.bf_max_job_test)]
    pub(super) bf_max_job_test: usize,
    /// Preemption searches per scheduling pass.
    #[arg(long, default_value_t = 16)]
    pub(super) preempt_max_job_test: usize,
    /// Pending jobs the main scheduler considers after each event (Slurm's default_queue_depth; the default is the shipped slurm-allot.conf's, Slurm's own is 100).
    #[arg(long, default_value_t = allot_sim::Reach::SHIPPED.default_queue_depth)]
    pub(super) default_queue_depth: usize,
    /// Time between backfill passes (Slurm's bf_interval; the default is the shipped slurm-allot.conf's, Slurm's own is 30s).
    #[arg(long, value_parser = duration, default_value = "10s")]
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
    /// Model Slurm's main-scheduler clock with this sched_interval (the shipped slurm-allot.conf's is 10s, Slurm's own 60s): a submission waits for the next pass (the next second, at least --batch-sched-delay after the last pass), a run past its minimum runtime or a requeued job for the next full pass. Default: a pass at once after every event, within the second.
    #[arg(long, value_parser = duration)]
    pub(super) sched_interval: Option<i64>,
    /// With --sched-interval: how long after the last pass a submission's pass may wait (Slurm's batch_sched_delay, default 3s).
    #[arg(long, value_parser = duration, default_value = "3s", requires = "sched_interval")]
    pub(super) batch_sched_delay: i64,
    /// How long a preempted job's GPUs stay held after its grace time when it ignores its signals (Slurm's KillWait; a job that exits on its signal frees them at once, the default 0).
    #[arg(long, value_parser = duration, default_value = "0s")]
    pub(super) kill_wait: i64,
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

/// `MIN-MAX` whole nodes, 1 <= MIN <= MAX.
fn node_range(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("'{s}': expected MIN-MAX whole nodes, e.g. 1-2 (1 <= MIN <= MAX)");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}
