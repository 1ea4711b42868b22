//! The scheduler's settings: the `[cluster]` table of the budget file
//! (window, contract cap, grace, preemption rules), with the rules their
//! values must keep. The budget parser reads them
//! (`crate::budget`), the plugins and the simulator use them.

use std::fmt;

use crate::duration::format_duration;
use crate::Seconds;

/// Cluster-wide knobs, from the `[cluster]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSettings {
    /// What is charged, counted and shared: GPUs (the default), or CPUs on a
    /// cluster without GPUs (`charge = "cpus"`). Everything this crate calls
    /// GPUs (capacity, a job's size, `small_job_gpus`) is then CPUs.
    pub charge: Charged,
    /// GPUs in the cluster, if the budget says; the plugins count them
    /// from Slurm otherwise. Only scales reports and the margin, not the order.
    pub gpus: Option<u32>,
    /// Length of the sliding fair-share window.
    pub lookback: Seconds,
    /// Largest minimum runtime a job may declare.
    pub min_runtime_cap: Seconds,
    /// Minimum runtime of a job whose comment declares none.
    pub default_min_runtime: Seconds,
    /// Time between the preemption signal and the kill.
    pub grace: Seconds,
    /// How far (in occupancy / allocation) a running job's allocation must be
    /// above a waiting job's before the waiting job may preempt it.
    pub preempt_margin: f64,
    /// Within one leaf, a job of strictly higher declared priority may
    /// preempt a job past its minimum runtime (`preempt_within_team`; see
    /// [`crate::preempt`], rule 5).
    pub preempt_within_team: bool,
    /// Victims are offered smallest first (unallocated, then the fewest
    /// GPUs, then the lowest-ranked leaf); off: by leaf rank alone
    /// (`preempt_smallest_first`; see [`crate::preempt::victim_order`]).
    pub preempt_smallest_first: bool,
    /// Time between the preemption signal and the kill for a victim that
    /// runs unallocated (`min_runtime=0`); never more than `grace` (see
    /// [`crate::preempt::grace_for`]).
    pub unallocated_grace: Seconds,
    /// A waiting job of at most this many GPUs and a minimum runtime of at
    /// most `small_job_min_runtime` is small: it preempts another leaf's job
    /// past its minimum runtime with no margin (see [`crate::preempt`], rule
    /// 4). 0: no job is small.
    pub small_job_gpus: u32,
    /// See `small_job_gpus`.
    pub small_job_min_runtime: Seconds,
    /// A large job (more GPUs than `small_job_gpus`) of a budget under its
    /// share that has waited this long may take the GPUs of any job that is
    /// past its minimum runtime and has run at least the large job's own,
    /// with no margin, so that fragmentation does not keep it waiting (see
    /// [`crate::preempt`], rule 6). 0: never (the default).
    pub large_job_wait: Seconds,
    /// A budget's standing counts each GPU its jobs hold now as used for
    /// this much longer ([`crate::fairshare::with_lookahead`]), so that what
    /// a team just took weighs at once and not only as the window fills:
    /// shares even out by the hour, not only over the week. 0: only the
    /// window's use counts (the default).
    pub lookahead: Seconds,
    /// Whose usage fair-share counts when several clusters share one
    /// ledger (`fair_share_usage`): each cluster's own (the default), or the
    /// lab's, so a team that used much on one cluster ranks lower on the
    /// others too.
    pub fair_share_usage: FairShareUsage,
}

/// [`ClusterSettings::fair_share_usage`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FairShareUsage {
    #[default]
    Cluster,
    Lab,
}

impl FairShareUsage {
    /// As the budget file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            FairShareUsage::Cluster => "cluster",
            FairShareUsage::Lab => "lab",
        }
    }
}

/// The resource a budget shares ([`ClusterSettings::charge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Charged {
    #[default]
    Gpus,
    Cpus,
}

impl Charged {
    /// As the budget file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Charged::Gpus => "gpus",
            Charged::Cpus => "cpus",
        }
    }
    /// The unit in reports: `GPU` (GPU-hours), `CPU`.
    pub fn unit(self) -> &'static str {
        match self {
            Charged::Gpus => "GPU",
            Charged::Cpus => "CPU",
        }
    }
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            charge: Charged::Gpus,
            gpus: None,
            lookback: 7 * 24 * 3600,
            min_runtime_cap: 8 * 3600,
            default_min_runtime: 3600,
            grace: 300,
            preempt_margin: 0.1,
            preempt_within_team: true,
            preempt_smallest_first: true,
            unallocated_grace: 0,
            small_job_gpus: 8,
            small_job_min_runtime: 30 * 60,
            large_job_wait: 0,
            lookahead: 0,
            fair_share_usage: FairShareUsage::Cluster,
        }
    }
}

/// A policy setting's value, by its kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SettingValue {
    /// A duration, written `"8h"`, `"1h30m"`.
    Duration(Seconds),
    /// A number such as 0.1.
    Fraction(f64),
    /// true or false.
    Flag(bool),
    /// A whole number, 0 or more.
    Count(u32),
}

impl SettingValue {
    /// As `allot history` and the simulator's messages print it.
    pub fn show(self) -> String {
        match self {
            SettingValue::Duration(s) => format_duration(s),
            SettingValue::Fraction(x) => x.to_string(),
            SettingValue::Flag(b) => b.to_string(),
            SettingValue::Count(n) => n.to_string(),
        }
    }
}

/// One scheduling-policy setting of the `[cluster]` table, the one place
/// that names it: its key in the budget file (and, with `-` for `_`, its
/// `allot simulate` flag and the simulator's JSON field, `_s` after a
/// duration's), what it does, and where it lives in [`ClusterSettings`].
/// The budget parser, `allot history`'s diff, `allot simulate`'s flags and
/// JSON, and the book's check (`sidecar/tests/book.rs`) all go through
/// [`POLICY_SETTINGS`].
pub struct PolicySetting {
    pub key: &'static str,
    /// One line: what it does (the flag's help).
    pub doc: &'static str,
    pub get: fn(&ClusterSettings) -> SettingValue,
    /// Sets the value; a value of another kind is a caller's bug (debug assertion).
    pub set: fn(&mut ClusterSettings, SettingValue),
    /// Why a value of the right type is refused, for kinds whose reader has
    /// no message of its own (fractions, counts).
    pub must: &'static str,
}

impl PolicySetting {
    /// Its `allot simulate` flag.
    pub fn flag(&self) -> String {
        format!("--{}", self.key.replace('_', "-"))
    }

    /// Its field in the simulator's JSON `settings`: durations in seconds.
    pub fn json_key(&self) -> String {
        match (self.get)(&ClusterSettings::default()) {
            SettingValue::Duration(_) => format!("{}_s", self.key),
            _ => self.key.to_owned(),
        }
    }

    /// Its value in `settings`.
    pub fn value(&self, settings: &ClusterSettings) -> SettingValue {
        (self.get)(settings)
    }
}

macro_rules! policy_setting {
    ($field:ident, $kind:ident, $doc:expr) => {
        policy_setting!($field, $kind, $doc, "")
    };
    ($field:ident, $kind:ident, $doc:expr, $must:expr) => {
        PolicySetting {
            key: stringify!($field),
            doc: $doc,
            get: |s| SettingValue::$kind(s.$field),
            set: |s, v| match v {
                SettingValue::$kind(x) => s.$field = x,
                other => debug_assert!(false, "{}: {other:?} is not a {}", stringify!($field), stringify!($kind)),
            },
            must: $must,
        }
    };
}

/// The scheduling-policy settings, in the order the budget file's
/// `[cluster]` documentation lists them (`charge`, `gpus` and
/// `fair_share_usage` describe the cluster, not the policy: the parser reads
/// them apart).
pub const POLICY_SETTINGS: [PolicySetting; 12] = [
    policy_setting!(lookback, Duration, "Fair-share window: how far back usage counts"),
    policy_setting!(lookahead, Duration, "A budget's standing counts the GPUs its jobs hold now as used this much longer; 0: the window's use only"),
    policy_setting!(min_runtime_cap, Duration, "Largest minimum runtime a job may declare: job_submit refuses a larger one (the simulator runs it with the cap, counted in contracts_clamped_to_cap)"),
    policy_setting!(default_min_runtime, Duration, "Minimum runtime of a job that declares none (at most the cap)"),
    policy_setting!(grace, Duration, "Time from the preemption signal to the kill"),
    policy_setting!(unallocated_grace, Duration, "Grace time of an unallocated (min_runtime=0) victim, at most the grace time"),
    policy_setting!(preempt_margin, Fraction, "Anti-thrash margin of preemption, in fractions of an allocation", "must be a number of at least 0, such as 0.1"),
    policy_setting!(preempt_within_team, Flag, "Preemption within a team by declared priority, past the victim's minimum runtime"),
    policy_setting!(preempt_smallest_first, Flag, "Offer victims smallest first: unallocated, then fewest GPUs (false: by leaf rank)"),
    policy_setting!(
        small_job_gpus,
        Count,
        "Jobs of at most this many GPUs (and at most small_job_min_runtime) preempt other teams with no margin; 0: none",
        "must be a whole number of GPUs, 0 or more (0: no job counts as small)"
    ),
    policy_setting!(small_job_min_runtime, Duration, "The longest minimum runtime of a small job (see small_job_gpus)"),
    policy_setting!(
        large_job_wait,
        Duration,
        "A job larger than a small job, of a budget under its share, that waited this long preempts jobs past their and its own minimum runtime with no margin; 0: never"
    ),
];

impl ClusterSettings {
    /// A default minimum runtime that the budget does not give follows a
    /// lower cap (the budget parser's rule, and the simulator's flags').
    pub fn default_min_runtime_for_cap(min_runtime_cap: Seconds) -> Seconds {
        ClusterSettings::default().default_min_runtime.min(min_runtime_cap)
    }

    /// The rules the values must keep, each on its own and together: what
    /// the budget parser refuses in a `[cluster]` table, for callers that
    /// set values some other way (the simulator's command-line overrides).
    /// Every broken rule is returned.
    pub fn validate(&self) -> Result<(), Vec<SettingsError>> {
        let mut broken = Vec::new();
        if self.gpus == Some(0) {
            broken.push(SettingsError::NoGpus);
        }
        if self.lookback <= 0 {
            broken.push(SettingsError::Lookback);
        }
        for (field, value) in [
            ("min_runtime_cap", self.min_runtime_cap),
            ("default_min_runtime", self.default_min_runtime),
            ("grace", self.grace),
            ("unallocated_grace", self.unallocated_grace),
            ("small_job_min_runtime", self.small_job_min_runtime),
            ("large_job_wait", self.large_job_wait),
            ("lookahead", self.lookahead),
        ] {
            if value < 0 {
                broken.push(SettingsError::Negative { field, value });
            }
        }
        if self.default_min_runtime > self.min_runtime_cap {
            broken.push(SettingsError::DefaultAboveCap { default_min_runtime: self.default_min_runtime, min_runtime_cap: self.min_runtime_cap });
        }
        if !(self.preempt_margin.is_finite() && self.preempt_margin >= 0.0) {
            broken.push(SettingsError::Margin);
        }
        if broken.is_empty() {
            Ok(())
        } else {
            Err(broken)
        }
    }
}

/// A rule of [`ClusterSettings::validate`] that the values break.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsError {
    /// `gpus` is zero.
    NoGpus,
    /// `lookback` is not longer than zero.
    Lookback,
    /// A duration below zero.
    Negative { field: &'static str, value: Seconds },
    /// `default_min_runtime` is above `min_runtime_cap`.
    DefaultAboveCap { default_min_runtime: Seconds, min_runtime_cap: Seconds },
    /// `preempt_margin` is negative or not a number.
    Margin,
}

impl SettingsError {
    /// The `[cluster]` field the problem is reported at.
    pub fn field(&self) -> &'static str {
        self.fields()[0]
    }

    /// Every field whose value takes part in the rule, the reported one first.
    pub fn fields(&self) -> &[&'static str] {
        match self {
            SettingsError::NoGpus => &["gpus"],
            SettingsError::Lookback => &["lookback"],
            SettingsError::Negative { field, .. } => std::slice::from_ref(field),
            SettingsError::DefaultAboveCap { .. } => &["default_min_runtime", "min_runtime_cap"],
            SettingsError::Margin => &["preempt_margin"],
        }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::NoGpus => f.write_str("must be a positive whole number of GPUs"),
            SettingsError::Lookback => f.write_str("the lookback window must be longer than zero"),
            SettingsError::Negative { value, .. } => write!(f, "must not be negative ({value} s)"),
            SettingsError::DefaultAboveCap { default_min_runtime, min_runtime_cap } => {
                write!(f, "{} exceeds min_runtime_cap of {}", format_duration(*default_min_runtime), format_duration(*min_runtime_cap))
            }
            SettingsError::Margin => f.write_str("must be a number of at least 0, such as 0.1"),
        }
    }
}

impl std::error::Error for SettingsError {}
