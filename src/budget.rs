//! The budget tree: who owns what fraction of the cluster's GPU time.
//!
//! Managers write it as TOML. Every table under `[budget]` is a node; its
//! `share` is a weight among its siblings, so a node's *effective share* (its
//! fraction of the whole cluster) is the product of `share / sum of sibling
//! shares` down its path. Leaves (nodes without children) carry the Slurm
//! `accounts` charged to them and the `members` who may charge them.
//!
//! ```toml
//! [cluster]
//! charge = "gpus"            # or "cpus" on a cluster without GPUs
//! gpus = 32                  # optional: the plugins can count GPUs themselves
//! lookback = "7d"            # sliding window of the fair-share order
//! min_runtime_cap = "8h"     # largest min_runtime a job may declare
//! default_min_runtime = "1h" # a job that declares none gets this
//! grace = "5m"               # signal-to-kill time at preemption
//! preempt_margin = 0.1       # anti-thrash margin (see `preempt`)
//! preempt_within_team = true # a teammate's higher priority may preempt
//! preempt_smallest_first = true # victims holding the fewest GPUs first
//! unallocated_grace = "0s"   # grace of a min_runtime=0 victim
//! small_job_gpus = 8         # a job of at most 8 GPUs ...
//! small_job_min_runtime = "30m" # ... and 30 min guarantee needs no margin
//! fair_share_usage = "cluster" # several clusters on one ledger: "lab" counts every cluster's usage
//!
//! [default_leaf]             # for users who are members of several leaves
//! dave = "vision/detection/tracking"
//!
//! [budget]                   # the root: the whole cluster
//! owners = ["director"]
//!
//! [budget.vision]
//! share = 70
//! owners = ["alice"]
//!
//! [budget.vision.detection]
//! share = 1
//! owners = ["bob"]
//! accounts = ["detection"]
//! members = ["dave", "erin"]
//! ```
//!
//! **Shares.** A share is a positive finite number, and every node's
//! effective share must be at least [`MIN_EFFECTIVE_SHARE`], 1e-12 of the
//! cluster: siblings' shares within a factor of 10^12 of each other, and a
//! tree not so deep that their product falls below it. A smaller one says
//! nothing a person meant (a millionth of a millionth of the cluster), and
//! at the extreme underflows to 0, which fair-share would divide by. The
//! file is refused at the topmost node below the bound, at its `share`.
//!
//! Node paths are written with `/` (`vision/detection`). Parsing reports every
//! problem it finds, each with its line and TOML field, and produces nothing
//! unless the whole file is valid.
//!
//! **Default leaf rule.** A job that names no account charges the submitting
//! user's default leaf: the leaf named for them under `[default_leaf]`; else
//! the one leaf that lists them in `members`; else the one leaf whose members
//! include `"*"` (anyone). A user listed in several leaves must have a
//! `[default_leaf]` entry: the file is refused otherwise, so the ambiguity is
//! found when the budget is written, not when a job is submitted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

use crate::duration::{format_duration, parse_duration};
use crate::Seconds;

/// Index of a node in [`BudgetTree::nodes`]; the root is node 0.
pub type NodeId = u32;
/// Index of a leaf in [`BudgetTree::leaves`]: dense, for per-leaf arrays.
pub type LeafId = u32;

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
            fair_share_usage: FairShareUsage::Cluster,
        }
    }
}

impl ClusterSettings {
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

/// The least effective share a node may have: one part in 10^12 of the
/// cluster (see the module documentation).
pub const MIN_EFFECTIVE_SHARE: f64 = 1e-12;

/// A number as a person writes it: `0.5`, `30`, `1e308`, `2.5e-13`.
fn compact(x: f64) -> String {
    // Both forms are the shortest that reads back as `x`.
    if x != 0.0 && !(1e-4..1e6).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A derived number to twelve significant digits, as [`compact`] writes it.
fn rounded(x: f64) -> String {
    compact(format!("{x:.11e}").parse().unwrap_or(x))
}

/// One node of the budget tree.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetNode {
    /// Last path component (`detection`); empty for the root.
    pub name: String,
    /// Full path (`vision/detection`); empty for the root.
    pub path: String,
    pub parent: Option<NodeId>,
    pub children: Vec<NodeId>,
    /// 0 for the root, 1 for its children, ...
    pub depth: u32,
    /// The manager's weight among siblings (1.0 for the root).
    pub share: f64,
    /// Fraction of the whole cluster: product of normalized shares on the path.
    pub effective_share: f64,
    pub owners: Vec<String>,
    /// Slurm accounts charged to this leaf, lowercased (Slurm lowercases them too).
    pub accounts: Vec<String>,
    /// Users who may charge this leaf; `"*"` means anyone.
    pub members: Vec<String>,
    pub description: Option<String>,
    /// The clusters this node is funded on (`clusters = ["alpha"]`), when
    /// several share one ledger; `None`: every cluster. Elsewhere its share
    /// is 0, and so is its subtree's ([`BudgetTree::for_cluster`]).
    pub clusters: Option<Vec<String>>,
    /// Its share on one cluster, instead of `share` (`cluster_shares = {
    /// beta = 3 }`).
    pub cluster_shares: BTreeMap<String, f64>,
    /// Set for leaves: index into [`BudgetTree::leaves`].
    pub leaf: Option<LeafId>,
    /// Line of the node's table in the source (1-based), for messages.
    pub line: usize,
}

impl BudgetNode {
    /// Where it is funded and at what share, for messages and history:
    /// `on every cluster`, `on alpha, beta (beta: share 3)`.
    pub fn funding(&self) -> String {
        let on = match &self.clusters {
            None => "on every cluster".to_owned(),
            Some(c) => format!("on {}", c.join(", ")),
        };
        if self.cluster_shares.is_empty() {
            return on;
        }
        let shares: Vec<String> = self.cluster_shares.iter().map(|(c, s)| format!("{c}: share {}", compact(*s))).collect();
        format!("{on} ({})", shares.join(", "))
    }

    pub fn is_leaf(&self) -> bool {
        self.children.is_empty() && self.parent.is_some()
    }
    /// The path, or `(root)` for the root, for messages.
    pub fn display_path(&self) -> &str {
        if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        }
    }
}

/// A validated budget tree. Immutable once built; cheap to share.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetTree {
    pub settings: ClusterSettings,
    /// All nodes, parents before children (depth-first, in file order).
    pub nodes: Vec<BudgetNode>,
    /// Node ids of the leaves, in depth-first order.
    pub leaves: Vec<NodeId>,
    by_path: HashMap<String, NodeId>,
    by_account: HashMap<String, LeafId>,
    /// Accounts an earlier budget version gave to a leaf that is still here,
    /// and this one gives to none ([`BudgetTree::with_account_history`]).
    retired_accounts: HashMap<String, LeafId>,
    /// Explicit `[default_leaf]` entries.
    default_leaf: BTreeMap<String, LeafId>,
    /// Leaves that list the user explicitly.
    member_of: HashMap<String, Vec<LeafId>>,
    /// Leaves whose members include `"*"`.
    open_leaves: Vec<LeafId>,
}

/// One problem in a budget file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetError {
    /// 1-based line, when the problem has a place in the file.
    pub line: Option<usize>,
    /// The TOML field (`budget.vision.share`), or empty for the whole file.
    pub field: String,
    pub message: String,
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.field.is_empty()) {
            (Some(line), false) => write!(f, "line {line}: {}: {}", self.field, self.message),
            (Some(line), true) => write!(f, "line {line}: {}", self.message),
            (None, false) => write!(f, "{}: {}", self.field, self.message),
            (None, true) => write!(f, "{}", self.message),
        }
    }
}

/// Every problem found in a budget file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetErrors(pub Vec<BudgetError>);

impl BudgetErrors {
    /// One line per error, each prefixed with `file:` the way compilers do.
    pub fn render(&self, file: &str) -> String {
        let mut out = String::new();
        for e in &self.0 {
            match e.line {
                Some(line) => out.push_str(&format!("{file}:{line}: ")),
                None => out.push_str(&format!("{file}: ")),
            }
            if !e.field.is_empty() {
                out.push_str(&e.field);
                out.push_str(": ");
            }
            out.push_str(&e.message);
            out.push('\n');
        }
        out
    }
}

impl fmt::Display for BudgetErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BudgetErrors {}

const NODE_FIELDS: [&str; 7] = ["share", "owners", "accounts", "members", "description", "clusters", "cluster_shares"];
const CLUSTER_FIELDS: [&str; 13] = [
    "charge",
    "gpus",
    "lookback",
    "min_runtime_cap",
    "default_min_runtime",
    "grace",
    "unallocated_grace",
    "preempt_margin",
    "preempt_within_team",
    "preempt_smallest_first",
    "small_job_gpus",
    "small_job_min_runtime",
    "fair_share_usage",
];
const TOP_LEVEL: [&str; 3] = ["cluster", "default_leaf", "budget"];

/// Maps byte offsets to 1-based line numbers.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        Lines(std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect())
    }
    fn of(&self, span: Option<Range<usize>>) -> Option<usize> {
        span.map(|r| self.0.partition_point(|&start| start <= r.start))
    }
}

/// " (did you mean 'share'?)" when a known word is within two edits.
fn suggestion(word: &str, known: &[&str]) -> String {
    known.iter().map(|k| (strsim::levenshtein(word, k), k)).filter(|(d, _)| *d <= 2).min().map(|(_, k)| format!(" (did you mean '{k}'?)")).unwrap_or_default()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_CHARS && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn valid_user(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == ':' || c == ',')
}

/// Longest account or user name the budget takes: Slurm's own names are far
/// shorter, and a longer one would only break the tables that show it.
pub const MAX_NAME_CHARS: usize = 255;

/// Why `name` cannot be a Slurm account or user name in a budget's
/// `accounts`, `owners` or `users` list, or `None` if it can. The one rule
/// for budgets and the simulator's workload files (a workload's team is the
/// account its budget leaf charges).
pub fn account_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("a name is empty".to_owned())
    } else if name.chars().count() > MAX_NAME_CHARS {
        Some(format!("a name of {} characters is longer than the {MAX_NAME_CHARS} a Slurm account or user name may have", name.chars().count()))
    } else if !valid_user(name) {
        Some(format!("'{}' is not a valid name (no spaces, line breaks, '/', ':' or ',')", name.escape_debug()))
    } else {
        None
    }
}

struct Parser<'a> {
    lines: Lines,
    errors: Vec<BudgetError>,
    nodes: Vec<BudgetNode>,
    /// Per node, the line of its `share` (for the rules on shares together).
    share_lines: Vec<Option<usize>>,
    _text: &'a str,
}

impl Parser<'_> {
    fn error(&mut self, span: Option<Range<usize>>, field: impl Into<String>, message: impl Into<String>) {
        let line = self.lines.of(span);
        self.errors.push(BudgetError { line, field: field.into(), message: message.into() });
    }

    /// Span of `key` inside `table`, falling back to the value's span.
    fn key_span(table: &Table, key: &str) -> Option<Range<usize>> {
        table.key(key).and_then(|k| k.span()).or_else(|| table.get(key).and_then(Item::span))
    }

    fn string_list(&mut self, table: &Table, key: &str, field: &str) -> Vec<String> {
        let span = Self::key_span(table, key);
        let Some(item) = table.get(key) else { return Vec::new() };
        let Some(array) = item.as_array() else {
            self.error(span, field, format!("must be a list of strings, like {key} = [\"alice\"]"));
            return Vec::new();
        };
        let mut out = Vec::new();
        for value in array.iter() {
            match value.as_str() {
                Some(s) => match account_name_problem(s) {
                    None => out.push(s.to_owned()),
                    Some(problem) => self.error(value.span().or(span.clone()), field, problem),
                },
                None => self.error(value.span().or(span.clone()), field, "every entry must be a quoted string"),
            }
        }
        out
    }

    /// A node's `clusters` and `cluster_shares`: valid cluster names (Slurm
    /// lower-cases ClusterName), positive shares, only on clusters the node
    /// is funded on, and funded only where its nearest ancestor that names
    /// its clusters is.
    fn cluster_funding(&mut self, table: &Table, field: &str, parent: Option<NodeId>) -> (Option<Vec<String>>, BTreeMap<String, f64>) {
        let mut shares = BTreeMap::new();
        if parent.is_none() {
            for key in ["clusters", "cluster_shares"] {
                if table.contains_key(key) {
                    self.error(
                        Self::key_span(table, key),
                        format!("{field}.{key}"),
                        "the root is the whole lab, on every cluster: fund its children per cluster instead",
                    );
                }
            }
            return (None, shares);
        }
        let inherited = std::iter::successors(parent, |&p| self.nodes[p as usize].parent).find_map(|p| self.nodes[p as usize].clusters.clone().map(|c| (p, c)));
        let clusters = table.contains_key("clusters").then(|| {
            let span = Self::key_span(table, "clusters");
            let list: Vec<String> = self.string_list(table, "clusters", &format!("{field}.clusters")).into_iter().map(|c| c.to_lowercase()).collect();
            if list.is_empty() && table.get("clusters").and_then(Item::as_array).is_some() {
                self.error(span.clone(), format!("{field}.clusters"), "an empty list funds the node on no cluster: remove the node, or name its clusters");
            }
            if let Some((p, theirs)) = &inherited {
                let outside: Vec<&String> = list.iter().filter(|c| !theirs.contains(c)).collect();
                if !outside.is_empty() {
                    let p = &self.nodes[*p as usize];
                    let message = format!(
                        "funded on {} where {} (line {}) is not: it has clusters = [{}]",
                        outside.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", "),
                        p.path,
                        p.line,
                        theirs.join(", ")
                    );
                    self.error(span, format!("{field}.clusters"), message);
                }
            }
            list
        });
        let funded_on = clusters.clone().or(inherited.map(|(_, c)| c));
        if let Some(item) = table.get("cluster_shares") {
            let span = Self::key_span(table, "cluster_shares");
            let Some(entries) = item.as_table_like() else {
                self.error(span, format!("{field}.cluster_shares"), "must be a table of cluster = share, like cluster_shares = { beta = 3 }");
                return (clusters, shares);
            };
            for (cluster, value) in entries.iter() {
                let f = format!("{field}.cluster_shares.{cluster}");
                let share = value.as_value().and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
                match share {
                    _ if !valid_user(cluster) => self.error(span.clone(), f, format!("'{cluster}' is not a cluster name")),
                    Some(s) if s.is_finite() && s > 0.0 => match &funded_on {
                        Some(on) if !on.iter().any(|c| c.eq_ignore_ascii_case(cluster)) => {
                            self.error(span.clone(), f, format!("a share on {cluster}, where the node is not funded (its clusters: {})", on.join(", ")))
                        }
                        _ => {
                            shares.insert(cluster.to_lowercase(), s);
                        }
                    },
                    _ => self.error(
                        span.clone(),
                        f,
                        "must be a positive number, such as 3 or 0.5 (to fund the node on some clusters only, list them in clusters = [...])",
                    ),
                }
            }
        }
        (clusters, shares)
    }

    fn duration(&mut self, table: &Table, key: &str, default: Seconds) -> Seconds {
        let field = format!("cluster.{key}");
        let span = Self::key_span(table, key);
        match table.get(key).map(|i| i.as_value()) {
            None => default,
            Some(Some(Value::String(s))) => match parse_duration(s.value()) {
                Ok(secs) => secs,
                Err(e) => {
                    self.error(span, field, e.to_string());
                    default
                }
            },
            Some(_) => {
                self.error(span, field, "must be a quoted duration such as \"8h\", \"7d\" or \"1h30m\"");
                default
            }
        }
    }

    fn flag(&mut self, table: &Table, key: &str, default: bool) -> bool {
        match table.get(key).map(|i| i.as_value().and_then(Value::as_bool)) {
            None => default,
            Some(Some(b)) => b,
            Some(None) => {
                self.error(Self::key_span(table, key), format!("cluster.{key}"), "must be true or false");
                default
            }
        }
    }

    fn settings(&mut self, table: &Table) -> ClusterSettings {
        let defaults = ClusterSettings::default();
        for (key, _) in table.iter() {
            if !CLUSTER_FIELDS.contains(&key) {
                let span = Self::key_span(table, key);
                self.error(
                    span,
                    format!("cluster.{key}"),
                    format!("unknown setting{}; [cluster] takes {}", suggestion(key, &CLUSTER_FIELDS), CLUSTER_FIELDS.join(", ")),
                );
            }
        }
        let charge = match table.get("charge").map(|i| i.as_str()) {
            None => Charged::Gpus,
            Some(Some("gpus")) => Charged::Gpus,
            Some(Some("cpus")) => Charged::Cpus,
            Some(_) => {
                self.error(
                    Self::key_span(table, "charge"),
                    "cluster.charge",
                    "must be \"gpus\" (the default) or \"cpus\" (a cluster without GPUs: CPUs are charged and shared)",
                );
                Charged::Gpus
            }
        };
        let gpus = match table.get("gpus").map(|i| i.as_integer()) {
            None => None,
            Some(Some(n)) if n > 0 && n <= u32::MAX as i64 => Some(n as u32),
            Some(_) => {
                self.error(Self::key_span(table, "gpus"), "cluster.gpus", "must be a positive whole number of GPUs");
                None
            }
        };
        let lookback = self.duration(table, "lookback", defaults.lookback);
        let min_runtime_cap = self.duration(table, "min_runtime_cap", defaults.min_runtime_cap);
        // A default that is not given follows a lower cap.
        let default_min_runtime = self.duration(table, "default_min_runtime", defaults.default_min_runtime.min(min_runtime_cap));
        let grace = self.duration(table, "grace", defaults.grace);
        let unallocated_grace = self.duration(table, "unallocated_grace", defaults.unallocated_grace);
        let number = |v: &Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
        let preempt_margin = match table.get("preempt_margin").map(|i| i.as_value().and_then(number)) {
            None => defaults.preempt_margin,
            Some(Some(m)) => m,
            Some(None) => {
                self.error(Self::key_span(table, "preempt_margin"), "cluster.preempt_margin", SettingsError::Margin.to_string());
                defaults.preempt_margin
            }
        };
        let preempt_within_team = self.flag(table, "preempt_within_team", defaults.preempt_within_team);
        let preempt_smallest_first = self.flag(table, "preempt_smallest_first", defaults.preempt_smallest_first);
        let small_job_gpus = match table.get("small_job_gpus").map(|i| i.as_integer()) {
            None => defaults.small_job_gpus,
            Some(Some(n)) if (0..=u32::MAX as i64).contains(&n) => n as u32,
            Some(_) => {
                self.error(
                    Self::key_span(table, "small_job_gpus"),
                    "cluster.small_job_gpus",
                    "must be a whole number of GPUs, 0 or more (0: no job counts as small)",
                );
                defaults.small_job_gpus
            }
        };
        let small_job_min_runtime = self.duration(table, "small_job_min_runtime", defaults.small_job_min_runtime);
        let fair_share_usage = match table.get("fair_share_usage").map(|i| i.as_str()) {
            None => defaults.fair_share_usage,
            Some(Some("cluster")) => FairShareUsage::Cluster,
            Some(Some("lab")) => FairShareUsage::Lab,
            Some(_) => {
                self.error(
                    Self::key_span(table, "fair_share_usage"),
                    "cluster.fair_share_usage",
                    "must be \"cluster\" (the default: fair-share counts each cluster's own usage) or \"lab\" (every cluster's that shares the ledger)",
                );
                defaults.fair_share_usage
            }
        };
        let settings = ClusterSettings {
            charge,
            gpus,
            lookback,
            min_runtime_cap,
            default_min_runtime,
            grace,
            preempt_margin,
            preempt_within_team,
            preempt_smallest_first,
            unallocated_grace,
            small_job_gpus,
            small_job_min_runtime,
            fair_share_usage,
        };
        // The rules on the values themselves (a value that could not be read
        // has its error already, and the default in its place).
        if let Err(broken) = settings.validate() {
            for e in broken {
                let field = e.field();
                self.error(Self::key_span(table, field), format!("cluster.{field}"), e.to_string());
            }
        }
        settings
    }

    /// Reads one node and, recursively, its children. Returns its id.
    fn node(&mut self, table: &Table, name: &str, path: String, parent: Option<NodeId>, depth: u32, span: Option<Range<usize>>) -> NodeId {
        let field = if path.is_empty() { "budget".to_owned() } else { format!("budget.{}", path.replace('/', ".")) };
        let id = self.nodes.len() as NodeId;
        let line = self.lines.of(table.span().or(span.clone())).unwrap_or(0);
        self.nodes.push(BudgetNode {
            name: name.to_owned(),
            path: path.clone(),
            parent,
            children: Vec::new(),
            depth,
            share: 1.0,
            effective_share: 0.0,
            owners: Vec::new(),
            accounts: Vec::new(),
            members: Vec::new(),
            description: None,
            clusters: None,
            cluster_shares: BTreeMap::new(),
            leaf: None,
            line,
        });

        // Share: required on every node but the root.
        let share_span = Self::key_span(table, "share");
        self.share_lines.push(self.lines.of(share_span.clone()));
        match (parent, table.get("share")) {
            (None, Some(_)) => self.error(share_span, format!("{field}.share"), "the root is the whole cluster and takes no share"),
            (Some(_), None) => self.error(
                table.span().or(span.clone()),
                format!("{field}.share"),
                "missing share: every node needs a positive share, its weight among its siblings",
            ),
            (Some(_), Some(item)) => {
                let value = item.as_value().and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
                match value {
                    Some(s) if s.is_finite() && s > 0.0 => self.nodes[id as usize].share = s,
                    Some(s) => self.error(share_span, format!("{field}.share"), format!("share must be a positive number, got {s}")),
                    None => self.error(share_span, format!("{field}.share"), "share must be a positive number, such as 30 or 0.5"),
                }
            }
            (None, None) => {}
        }

        let owners = self.string_list(table, "owners", &format!("{field}.owners"));
        let accounts: Vec<String> = self.string_list(table, "accounts", &format!("{field}.accounts")).into_iter().map(|a| a.to_lowercase()).collect();
        let members = self.string_list(table, "members", &format!("{field}.members"));
        let description = match table.get("description") {
            None => None,
            Some(item) => match item.as_str() {
                Some(s) => Some(s.to_owned()),
                None => {
                    self.error(Self::key_span(table, "description"), format!("{field}.description"), "must be a quoted string");
                    None
                }
            },
        };

        // Per-cluster funding, before the children, which are checked against it.
        let (clusters, cluster_shares) = self.cluster_funding(table, &field, parent);
        self.nodes[id as usize].clusters = clusters;
        self.nodes[id as usize].cluster_shares = cluster_shares;

        let mut children = Vec::new();
        for (key, item) in table.iter() {
            if NODE_FIELDS.contains(&key) {
                continue;
            }
            let key_span = Self::key_span(table, key);
            let child_table = match item {
                Item::Table(t) => Some(t),
                _ => None,
            };
            match child_table {
                Some(t) if valid_name(key) => {
                    let child_path = if path.is_empty() { key.to_owned() } else { format!("{path}/{key}") };
                    let child = self.node(t, key, child_path, Some(id), depth + 1, key_span);
                    children.push(child);
                }
                Some(_) if key.len() > MAX_NAME_CHARS => self.error(
                    key_span,
                    format!("{field}.{}...", key.chars().take(16).collect::<String>()),
                    format!("a node name of {} characters is longer than the {MAX_NAME_CHARS} allowed", key.len()),
                ),
                Some(_) => self.error(key_span, format!("{field}.{key}"), "node names may use only letters, digits, '_' and '-'"),
                None if item.is_inline_table() => {
                    self.error(key_span, format!("{field}.{key}"), format!("write child nodes as their own table, [{field}.{key}], not inline"))
                }
                None => self.error(
                    key_span,
                    format!("{field}.{key}"),
                    format!(
                        "unknown field{}; a node takes {} (a child node is a table, [{field}.{key}])",
                        suggestion(key, &NODE_FIELDS),
                        NODE_FIELDS.join(", ")
                    ),
                ),
            }
        }

        let is_leaf = children.is_empty() && parent.is_some();
        if is_leaf && accounts.is_empty() {
            self.error(table.span().or(span.clone()), format!("{field}.accounts"), "a leaf needs accounts = [\"...\"]: the Slurm accounts its jobs charge");
        }
        if !is_leaf && !accounts.is_empty() {
            self.error(
                Self::key_span(table, "accounts"),
                format!("{field}.accounts"),
                "only leaves (nodes without children) are charged; move the accounts to a leaf below",
            );
        }
        if !is_leaf && !members.is_empty() {
            self.error(
                Self::key_span(table, "members"),
                format!("{field}.members"),
                "only leaves (nodes without children) have members; move them to a leaf below",
            );
        }
        let node = &mut self.nodes[id as usize];
        node.owners = owners;
        node.accounts = accounts;
        node.members = members;
        node.description = description;
        node.children = children;
        id
    }
}

impl BudgetTree {
    /// Parses and validates a budget file. On any problem, returns all of them.
    pub fn parse(text: &str) -> Result<BudgetTree, BudgetErrors> {
        let mut p = Parser { lines: Lines::new(text), errors: Vec::new(), nodes: Vec::new(), share_lines: Vec::new(), _text: text };
        let doc = match ImDocument::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                let line = p.lines.of(e.span());
                let message = e.message().trim().to_owned();
                return Err(BudgetErrors(vec![BudgetError { line, field: String::new(), message: format!("invalid TOML: {message}") }]));
            }
        };
        let top = doc.as_table();
        for (key, _) in top.iter() {
            if !TOP_LEVEL.contains(&key) {
                let span = Parser::key_span(top, key);
                p.error(span, key, format!("unknown section{}; a budget file has [cluster], [default_leaf] and [budget]", suggestion(key, &TOP_LEVEL)));
            }
        }
        let settings = match top.get("cluster") {
            None => ClusterSettings::default(),
            Some(Item::Table(t)) => p.settings(t),
            Some(item) => {
                p.error(item.span(), "cluster", "must be a table, [cluster]");
                ClusterSettings::default()
            }
        };
        match top.get("budget") {
            Some(Item::Table(t)) => {
                p.node(t, "", String::new(), None, 0, t.span());
                if p.nodes[0].children.is_empty() {
                    p.error(t.span(), "budget", "the budget tree is empty: add at least one node, such as [budget.myteam]");
                }
            }
            Some(item) => p.error(item.span(), "budget", "must be a table, [budget]"),
            None => p.error(None, "budget", "missing [budget]: the budget tree starts there"),
        }
        if p.nodes.is_empty() {
            return Err(BudgetErrors(p.errors));
        }

        let mut tree = BudgetTree {
            settings,
            nodes: std::mem::take(&mut p.nodes),
            leaves: Vec::new(),
            by_path: HashMap::new(),
            by_account: HashMap::new(),
            retired_accounts: HashMap::new(),
            default_leaf: BTreeMap::new(),
            member_of: HashMap::new(),
            open_leaves: Vec::new(),
        };
        tree.index(&mut p, top);
        // Each cluster's own shares keep the least effective share too.
        if p.errors.is_empty() {
            for cluster in tree.named_clusters() {
                let view = tree.for_cluster(Some(&cluster));
                for (id, node) in view.nodes.iter().enumerate().skip(1) {
                    if node.share > 0.0 && node.effective_share < MIN_EFFECTIVE_SHARE {
                        p.errors.push(BudgetError {
                            line: p.share_lines.get(id).copied().flatten().or(Some(node.line)),
                            field: format!("budget.{}.cluster_shares", node.path.replace('/', ".")),
                            message: format!(
                                "on cluster {cluster}, the node's effective share is {}, below the least allowed, 1e-12: give it and its siblings shares of more similar sizes there",
                                rounded(node.effective_share)
                            ),
                        });
                    }
                }
            }
        }
        if p.errors.is_empty() {
            Ok(tree)
        } else {
            p.errors.sort_by_key(|e| e.line.unwrap_or(0));
            Err(BudgetErrors(p.errors))
        }
    }

    /// Every node's effective share: the product of its and its ancestors'
    /// fractions of their siblings' shares.
    fn compute_effective_shares(&mut self) {
        self.nodes[0].effective_share = 1.0;
        for id in 0..self.nodes.len() {
            let children = self.nodes[id].children.clone();
            // Shares are scaled by the largest sibling's before summing: a
            // sum of shares near f64::MAX (`share = 1e308` twice) would be
            // infinite and give every child an effective share of 0.
            let largest = children.iter().map(|&c| self.nodes[c as usize].share).fold(0.0, f64::max);
            let total: f64 = children.iter().map(|&c| self.nodes[c as usize].share / largest).sum();
            for c in children {
                let normalized = if total > 0.0 { self.nodes[c as usize].share / largest / total } else { 0.0 };
                self.nodes[c as usize].effective_share = self.nodes[id].effective_share * normalized;
            }
        }
    }

    /// The tree as cluster `cluster` shares its GPUs: `cluster_shares` in
    /// place of `share`, and a share of 0 for the nodes not funded there
    /// (their jobs run only unallocated there). `None` (the lab), or a
    /// budget with no per-cluster funding: the tree as written.
    pub fn for_cluster(&self, cluster: Option<&str>) -> BudgetTree {
        let mut tree = self.clone();
        let Some(cluster) = cluster else { return tree };
        if !self.nodes.iter().any(|n| n.clusters.is_some() || !n.cluster_shares.is_empty()) {
            return tree;
        }
        let cluster = cluster.to_lowercase();
        for n in &mut tree.nodes {
            if let Some(&share) = n.cluster_shares.get(&cluster) {
                n.share = share;
            }
            if n.clusters.as_ref().is_some_and(|on| !on.contains(&cluster)) {
                n.share = 0.0;
            }
        }
        // A node none of whose children is funded here is not either:
        // its share would be owed to nobody. (Children come after their
        // parent: backwards is bottom-up.)
        for id in (0..tree.nodes.len()).rev() {
            let children = &tree.nodes[id].children;
            if !children.is_empty() && children.iter().all(|&c| tree.nodes[c as usize].share == 0.0) {
                tree.nodes[id].share = 0.0;
            }
        }
        tree.nodes[0].share = 1.0;
        tree.compute_effective_shares();
        tree
    }

    /// Whether the node gets a share of this tree's cluster (see
    /// [`BudgetTree::for_cluster`]).
    pub fn is_funded(&self, id: NodeId) -> bool {
        self.node(id).effective_share > 0.0
    }

    /// The clusters node `id` is funded on: its own `clusters`, else its
    /// nearest ancestor's; `None`: every cluster.
    pub fn funded_clusters(&self, id: NodeId) -> Option<&[String]> {
        std::iter::successors(Some(id), |&n| self.node(n).parent).find_map(|n| self.node(n).clusters.as_deref())
    }

    /// The clusters a budget file names, in its nodes' funding.
    pub fn named_clusters(&self) -> BTreeSet<String> {
        self.nodes.iter().flat_map(|n| n.clusters.iter().flatten().chain(n.cluster_shares.keys())).cloned().collect()
    }

    /// Builds the lookup tables and effective shares; records conflicts in `p`.
    fn index(&mut self, p: &mut Parser<'_>, top: &Table) {
        self.compute_effective_shares();
        // The least effective share, at the topmost node below it (its
        // descendants are below it too).
        for id in 1..self.nodes.len() {
            let node = &self.nodes[id];
            let parent = &self.nodes[node.parent.unwrap_or(0) as usize];
            if node.effective_share >= MIN_EFFECTIVE_SHARE || parent.effective_share < MIN_EFFECTIVE_SHARE {
                continue;
            }
            let largest_id =
                parent.children.iter().copied().max_by(|&a, &b| self.nodes[a as usize].share.total_cmp(&self.nodes[b as usize].share)).unwrap_or(id as NodeId)
                    as usize;
            let largest = &self.nodes[largest_id];
            let why = if node.effective_share / parent.effective_share < MIN_EFFECTIVE_SHARE {
                // Scaled by the largest, as the effective shares are: the sum may exceed f64.
                let scaled: f64 = parent.children.iter().map(|&c| self.nodes[c as usize].share / largest.share).sum();
                let total = scaled * largest.share;
                format!(
                    "its share {} is {} of the sum of its and its siblings' shares, {} (the largest: {}'s {}, line {}); give siblings shares of more similar sizes",
                    compact(node.share),
                    rounded(node.share / largest.share / scaled),
                    if total.is_finite() { rounded(total) } else { "above 1.7e308".to_owned() },
                    largest.name,
                    compact(largest.share),
                    p.share_lines.get(largest_id).copied().flatten().unwrap_or(largest.line)
                )
            } else {
                format!(
                    "the product of its and its ancestors' fractions of their siblings' shares, down {}; fewer levels, or shares of more similar sizes",
                    node.path
                )
            };
            p.errors.push(BudgetError {
                line: p.share_lines.get(id).copied().flatten().or(Some(node.line)),
                field: format!("budget.{}.share", node.path.replace('/', ".")),
                message: format!("the node's effective share of the cluster is {}, below the least allowed, 1e-12: {why}", rounded(node.effective_share)),
            });
        }
        let mut account_line: HashMap<String, (usize, String)> = HashMap::new();
        for id in 0..self.nodes.len() {
            self.by_path.insert(self.nodes[id].path.clone(), id as NodeId);
            if !self.nodes[id].is_leaf() {
                continue;
            }
            let leaf = self.leaves.len() as LeafId;
            self.leaves.push(id as NodeId);
            self.nodes[id].leaf = Some(leaf);
            let node = &self.nodes[id];
            for account in &node.accounts {
                if let Some((line, other)) = account_line.get(account) {
                    p.errors.push(BudgetError {
                        line: Some(node.line),
                        field: format!("budget.{}.accounts", node.path.replace('/', ".")),
                        message: format!("account '{account}' is already charged to {other} (line {line}); an account belongs to one leaf"),
                    });
                } else {
                    account_line.insert(account.clone(), (node.line, node.path.clone()));
                    self.by_account.insert(account.clone(), leaf);
                }
            }
            let mut seen = BTreeSet::new();
            for member in &node.members {
                if !seen.insert(member.as_str()) {
                    continue;
                }
                if member == "*" {
                    self.open_leaves.push(leaf);
                } else {
                    self.member_of.entry(member.clone()).or_default().push(leaf);
                }
            }
        }

        // [default_leaf]
        match top.get("default_leaf") {
            None => {}
            Some(Item::Table(t)) => {
                for (user, item) in t.iter() {
                    let span = Parser::key_span(t, user);
                    let field = format!("default_leaf.{user}");
                    let Some(path) = item.as_str() else {
                        p.error(span, field, "must be the quoted path of a leaf, such as \"vision/detection\"");
                        continue;
                    };
                    let path = path.replace('.', "/");
                    match self.by_path.get(&path).and_then(|&n| self.nodes[n as usize].leaf) {
                        None => p.error(span, field, format!("'{path}' is not a leaf of the budget tree")),
                        Some(leaf) if !self.may_charge(user, leaf) => p.error(span, field, format!("'{user}' is not a member of '{path}'")),
                        Some(leaf) => {
                            self.default_leaf.insert(user.to_owned(), leaf);
                        }
                    }
                }
            }
            Some(item) => p.error(item.span(), "default_leaf", "must be a table, [default_leaf]"),
        }

        // A user in several leaves must say which one is the default.
        let mut ambiguous: Vec<(&String, &Vec<LeafId>)> =
            self.member_of.iter().filter(|(user, leaves)| leaves.len() > 1 && !self.default_leaf.contains_key(*user)).collect();
        ambiguous.sort();
        for (user, leaves) in ambiguous {
            let first = &self.nodes[self.leaves[leaves[0] as usize] as usize];
            let places: Vec<String> = leaves
                .iter()
                .map(|&l| {
                    let n = &self.nodes[self.leaves[l as usize] as usize];
                    format!("{} (line {})", n.path, n.line)
                })
                .collect();
            p.errors.push(BudgetError {
                line: Some(self.nodes[self.leaves[leaves[1] as usize] as usize].line),
                field: format!("default_leaf.{user}"),
                message: format!(
                    "user '{user}' is a member of {}; add {user} = \"{}\" (or another of them) under [default_leaf] to say which one their jobs charge when they name no account",
                    places.join(" and "),
                    first.path
                ),
            });
        }
    }

    pub fn root(&self) -> &BudgetNode {
        &self.nodes[0]
    }

    pub fn node(&self, id: NodeId) -> &BudgetNode {
        &self.nodes[id as usize]
    }

    /// The node of a leaf.
    pub fn leaf_node(&self, leaf: LeafId) -> &BudgetNode {
        &self.nodes[self.leaves[leaf as usize] as usize]
    }

    /// Looks a node up by path; `.` and `/` both separate components, and the
    /// empty path, `/` or `(root)` name the root.
    pub fn find(&self, path: &str) -> Option<NodeId> {
        let norm = path.trim().trim_matches('/').replace('.', "/");
        let norm = if norm == "(root)" { String::new() } else { norm };
        self.by_path.get(&norm).copied()
    }

    /// The leaf an account is charged to (accounts compare case-insensitively).
    pub fn leaf_of_account(&self, account: &str) -> Option<LeafId> {
        // The same spelling rules as `leaf_for_job`: what a submission was
        // checked against is what its runs are charged to.
        self.by_account.get(&account.trim().to_lowercase()).copied()
    }

    /// The leaf a job carrying `account` is charged to: the account's leaf;
    /// else, for an account an earlier version of the budget gave to a leaf
    /// that is still in the tree, that leaf. So renaming a leaf's accounts
    /// cannot make the jobs already queued under the old name run outside
    /// the budget, uncharged (new submissions with it are refused:
    /// [`BudgetTree::leaf_for_job`] knows only the current accounts).
    pub fn charged_leaf_of_account(&self, account: &str) -> Option<LeafId> {
        let key = account.trim().to_lowercase();
        self.by_account.get(&key).or_else(|| self.retired_accounts.get(&key)).copied()
    }

    /// The leaf a recorded run is charged to: the leaf it was recorded under,
    /// if the tree still has it; else the leaf its account is charged to now
    /// ([`BudgetTree::charged_leaf_of_account`]). So a leaf removed and added
    /// again under another name with the same account keeps its usage.
    pub fn charged_leaf_of_run(&self, leaf_path: Option<&str>, account: Option<&str>) -> Option<LeafId> {
        leaf_path.and_then(|p| self.find(p)).and_then(|n| self.node(n).leaf).or_else(|| account.and_then(|a| self.charged_leaf_of_account(a)))
    }

    /// The node a recorded run's usage counts in: its leaf
    /// ([`BudgetTree::charged_leaf_of_run`]); else, for a run of a leaf that
    /// is gone with its accounts, the nearest node of its path still in the
    /// tree (its parent, or higher), so that the removal lowers no node's
    /// usage against its siblings. `None` for a run outside the tree.
    pub fn charged_node_of_run(&self, leaf_path: Option<&str>, account: Option<&str>) -> Option<NodeId> {
        if let Some(leaf) = self.charged_leaf_of_run(leaf_path, account) {
            return Some(self.leaves[leaf as usize]);
        }
        let mut path = leaf_path?.trim().trim_matches('/');
        while let Some((parent, _)) = path.rsplit_once('/') {
            path = parent;
            if let Some(node) = self.find(path) {
                return Some(node);
            }
        }
        // A top-level leaf that is gone: its usage counts at the root, which
        // has no siblings to rank against.
        None
    }

    /// This tree, remembering the accounts of `older` versions (newest
    /// first) that this one gives to no leaf: each keeps charging the leaf
    /// that last had it, if that leaf is still here.
    pub fn with_account_history<'a>(mut self, older: impl IntoIterator<Item = &'a BudgetTree>) -> BudgetTree {
        for old in older {
            for &node in &old.leaves {
                let old_leaf = old.node(node);
                let Some(leaf) = self.find(&old_leaf.path).and_then(|n| self.node(n).leaf) else { continue };
                for account in &old_leaf.accounts {
                    let key = account.trim().to_lowercase();
                    if !self.by_account.contains_key(&key) {
                        self.retired_accounts.entry(key).or_insert(leaf);
                    }
                }
            }
        }
        self
    }

    /// Accounts kept from earlier versions ([`BudgetTree::with_account_history`]),
    /// with their leaves' paths, sorted.
    pub fn retired_accounts(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self.retired_accounts.iter().map(|(a, &l)| (a.clone(), self.leaf_node(l).path.clone())).collect();
        out.sort();
        out
    }

    /// Whether `user` may charge `leaf`.
    pub fn may_charge(&self, user: &str, leaf: LeafId) -> bool {
        let node = self.leaf_node(leaf);
        node.members.iter().any(|m| m == user || m == "*")
    }

    /// The leaves `user` may charge, in tree order.
    pub fn leaves_of(&self, user: &str) -> Vec<LeafId> {
        (0..self.leaves.len() as LeafId).filter(|&l| self.may_charge(user, l)).collect()
    }

    /// The user's default leaf (see the module documentation for the rule).
    pub fn default_leaf(&self, user: &str) -> Option<LeafId> {
        if let Some(&leaf) = self.default_leaf.get(user) {
            return Some(leaf);
        }
        match self.member_of.get(user).map(Vec::as_slice) {
            Some([only]) => Some(*only),
            Some([_, ..]) => None, // refused at parse time; kept safe anyway
            _ => match self.open_leaves.as_slice() {
                [only] => Some(*only),
                _ => None,
            },
        }
    }

    /// The leaf a job charges, given its submitter and `--account`.
    pub fn leaf_for_job(&self, user: &str, account: Option<&str>) -> Result<LeafId, LeafRefusal> {
        let allowed = || self.leaves_of(user).iter().map(|&l| self.leaf_node(l).accounts[0].clone()).collect::<Vec<_>>();
        match account.map(str::trim).filter(|a| !a.is_empty()) {
            Some(account) => match self.leaf_of_account(account) {
                None => Err(LeafRefusal::UnknownAccount { account: account.to_lowercase(), allowed: allowed() }),
                Some(leaf) if self.may_charge(user, leaf) => Ok(leaf),
                Some(leaf) => Err(LeafRefusal::NotMember {
                    user: user.to_owned(),
                    account: account.to_lowercase(),
                    leaf: self.leaf_node(leaf).path.clone(),
                    allowed: allowed(),
                }),
            },
            None => self.default_leaf(user).ok_or_else(|| LeafRefusal::NoDefault { user: user.to_owned(), allowed: allowed() }),
        }
    }

    /// Node ids from the root down to `id`, inclusive.
    pub fn path_ids(&self, id: NodeId) -> Vec<NodeId> {
        let mut out = vec![id];
        let mut cur = id;
        while let Some(parent) = self.nodes[cur as usize].parent {
            out.push(parent);
            cur = parent;
        }
        out.reverse();
        out
    }

    /// Whether `user` owns `id` or one of its ancestors.
    pub fn owns(&self, user: &str, id: NodeId) -> bool {
        self.path_ids(id).iter().any(|&n| self.nodes[n as usize].owners.iter().any(|o| o == user))
    }

    /// Everyone who may edit the subtree at `id`: its owners and its ancestors'.
    pub fn editors_of(&self, id: NodeId) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in self.path_ids(id).into_iter().rev() {
            for o in &self.nodes[n as usize].owners {
                if !out.contains(o) {
                    out.push(o.clone());
                }
            }
        }
        out
    }
}

/// Why a job cannot charge a leaf. The `Display` text is what the researcher sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafRefusal {
    UnknownAccount { account: String, allowed: Vec<String> },
    NotMember { user: String, account: String, leaf: String, allowed: Vec<String> },
    NoDefault { user: String, allowed: Vec<String> },
}

fn allowed_list(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "you may use no budget yet; ask your manager to add you to one".to_owned()
    } else {
        format!("budgets you may use: {}", allowed.join(", "))
    }
}

impl fmt::Display for LeafRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeafRefusal::UnknownAccount { account, allowed } => {
                write!(f, "account '{account}' is not in the allot budget tree; {}", allowed_list(allowed))
            }
            LeafRefusal::NotMember { user, account, leaf, allowed } => {
                write!(f, "user '{user}' is not a member of budget {leaf} (account '{account}'); {}", allowed_list(allowed))
            }
            LeafRefusal::NoDefault { user, allowed } => {
                write!(f, "user '{user}' has no default budget: pass --account; {}", allowed_list(allowed))
            }
        }
    }
}

impl std::error::Error for LeafRefusal {}

/// One difference between two versions of the budget.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetChange {
    Added {
        path: String,
    },
    Removed {
        path: String,
    },
    Share {
        path: String,
        old: f64,
        new: f64,
    },
    Owners {
        path: String,
        old: Vec<String>,
        new: Vec<String>,
    },
    Accounts {
        path: String,
        old: Vec<String>,
        new: Vec<String>,
    },
    Members {
        path: String,
        old: Vec<String>,
        new: Vec<String>,
    },
    Description {
        path: String,
    },
    /// Its clusters or per-cluster shares ([`BudgetNode::clusters`]), as text.
    Funding {
        path: String,
        old: String,
        new: String,
    },
    Setting {
        name: &'static str,
        old: String,
        new: String,
    },
    DefaultLeaf {
        user: String,
        old: Option<String>,
        new: Option<String>,
    },
    /// Where the jobs and runs of an account a leaf gave up or lost are
    /// charged now: `to` is the leaf (the account's new one, or the old leaf
    /// that keeps it through the window), `None` if nowhere.
    /// `to: None`: the account's usage in the window counts in `inner`, the
    /// nearest node of the old leaf's path still in the tree (none: the root).
    AccountCharges {
        account: String,
        from: String,
        to: Option<String>,
        inner: Option<String>,
    },
}

impl fmt::Display for BudgetChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn p(path: &str) -> &str {
            if path.is_empty() {
                "(root)"
            } else {
                path
            }
        }
        match self {
            BudgetChange::Added { path } => write!(f, "+ {}", p(path)),
            BudgetChange::Removed { path } => write!(f, "- {}", p(path)),
            BudgetChange::Share { path, old, new } => write!(f, "~ {} share {old} -> {new}", p(path)),
            BudgetChange::Owners { path, old, new } => write!(f, "~ {} owners [{}] -> [{}]", p(path), old.join(", "), new.join(", ")),
            BudgetChange::Accounts { path, old, new } => write!(f, "~ {} accounts [{}] -> [{}]", p(path), old.join(", "), new.join(", ")),
            BudgetChange::Members { path, old, new } => write!(f, "~ {} members [{}] -> [{}]", p(path), old.join(", "), new.join(", ")),
            BudgetChange::Description { path } => write!(f, "~ {} description", p(path)),
            BudgetChange::Funding { path, old, new } => write!(f, "~ {} funded {old} -> {new}", p(path)),
            BudgetChange::Setting { name, old, new } => write!(f, "~ cluster.{name} {old} -> {new}"),
            BudgetChange::DefaultLeaf { user, old, new } => {
                write!(f, "~ default_leaf.{user} {} -> {}", old.as_deref().unwrap_or("(none)"), new.as_deref().unwrap_or("(none)"))
            }
            BudgetChange::AccountCharges { account, from, to: Some(to), .. } if to == from => {
                write!(f, "= account {account}: jobs and runs under it stay charged to {} through the lookback window", p(from))
            }
            BudgetChange::AccountCharges { account, from, to: Some(to), .. } => {
                write!(f, "= account {account}: the usage of {} in the window moves with it to {}", p(from), p(to))
            }
            BudgetChange::AccountCharges { account, from, to: None, inner: Some(inner) } => {
                write!(f, "= account {account}: no leaf has it now and {} is gone: its usage in the window counts in {}'s", p(from), p(inner))
            }
            BudgetChange::AccountCharges { account, from, to: None, inner: None } => {
                write!(f, "! account {account}: no leaf has it now and {} is gone: its runs in the window are charged to no budget", p(from))
            }
        }
    }
}

impl BudgetTree {
    /// What changed from `old` to `self`, in a stable order: settings, default
    /// leaves, then nodes in tree order (removed nodes in `old`'s order).
    pub fn diff(&self, old: &BudgetTree) -> Vec<BudgetChange> {
        let mut out = Vec::new();
        let (o, n) = (&old.settings, &self.settings);
        let mut setting = |name: &'static str, a: String, b: String| {
            if a != b {
                out.push(BudgetChange::Setting { name, old: a, new: b });
            }
        };
        let gpus = |g: Option<u32>| g.map(|g| g.to_string()).unwrap_or_else(|| "(from Slurm)".into());
        setting("charge", o.charge.as_str().to_owned(), n.charge.as_str().to_owned());
        setting("gpus", gpus(o.gpus), gpus(n.gpus));
        setting("lookback", format_duration(o.lookback), format_duration(n.lookback));
        setting("min_runtime_cap", format_duration(o.min_runtime_cap), format_duration(n.min_runtime_cap));
        setting("default_min_runtime", format_duration(o.default_min_runtime), format_duration(n.default_min_runtime));
        setting("grace", format_duration(o.grace), format_duration(n.grace));
        setting("preempt_margin", o.preempt_margin.to_string(), n.preempt_margin.to_string());
        setting("preempt_within_team", o.preempt_within_team.to_string(), n.preempt_within_team.to_string());
        setting("preempt_smallest_first", o.preempt_smallest_first.to_string(), n.preempt_smallest_first.to_string());
        setting("unallocated_grace", format_duration(o.unallocated_grace), format_duration(n.unallocated_grace));
        setting("small_job_gpus", o.small_job_gpus.to_string(), n.small_job_gpus.to_string());
        setting("small_job_min_runtime", format_duration(o.small_job_min_runtime), format_duration(n.small_job_min_runtime));
        setting("fair_share_usage", o.fair_share_usage.as_str().to_owned(), n.fair_share_usage.as_str().to_owned());

        let leaf_path = |t: &BudgetTree, l: Option<&LeafId>| l.map(|&l| t.leaf_node(l).path.clone());
        let users: BTreeSet<&String> = old.default_leaf.keys().chain(self.default_leaf.keys()).collect();
        for user in users {
            let (a, b) = (leaf_path(old, old.default_leaf.get(user)), leaf_path(self, self.default_leaf.get(user)));
            if a != b {
                out.push(BudgetChange::DefaultLeaf { user: user.clone(), old: a, new: b });
            }
        }

        for node in &self.nodes {
            let Some(&old_id) = old.by_path.get(&node.path) else {
                out.push(BudgetChange::Added { path: node.path.clone() });
                continue;
            };
            let was = old.node(old_id);
            let path = node.path.clone();
            if was.share != node.share {
                out.push(BudgetChange::Share { path: path.clone(), old: was.share, new: node.share });
            }
            if was.owners != node.owners {
                out.push(BudgetChange::Owners { path: path.clone(), old: was.owners.clone(), new: node.owners.clone() });
            }
            if was.accounts != node.accounts {
                out.push(BudgetChange::Accounts { path: path.clone(), old: was.accounts.clone(), new: node.accounts.clone() });
            }
            if was.members != node.members {
                out.push(BudgetChange::Members { path: path.clone(), old: was.members.clone(), new: node.members.clone() });
            }
            if was.description != node.description {
                out.push(BudgetChange::Description { path: path.clone() });
            }
            let (a, b) = (was.funding(), node.funding());
            if a != b {
                out.push(BudgetChange::Funding { path, old: a, new: b });
            }
        }
        for node in &old.nodes {
            if !self.by_path.contains_key(&node.path) {
                out.push(BudgetChange::Removed { path: node.path.clone() });
            }
        }
        // Where each account of an old leaf is charged now, when that moved
        // (the rules of `charged_leaf_of_run` and `with_account_history`).
        for &leaf in &old.leaves {
            let was = old.node(leaf);
            let kept = self.find(&was.path).and_then(|n| self.node(n).leaf);
            for account in &was.accounts {
                let now = self.leaf_of_account(account);
                let to = match (kept, now) {
                    (Some(k), None) => Some(k),
                    (None, Some(n)) => Some(n),
                    (None, None) => None,
                    // Both still here: its runs so far stay with the leaf,
                    // its jobs go where the account is (the Accounts line says so).
                    (Some(_), Some(_)) => continue,
                };
                let inner = if to.is_none() { self.charged_node_of_run(Some(&was.path), None).map(|n| self.node(n).path.clone()) } else { None };
                out.push(BudgetChange::AccountCharges {
                    account: account.clone(),
                    from: was.path.clone(),
                    to: to.map(|l| self.leaf_node(l).path.clone()),
                    inner,
                });
            }
        }
        out
    }

    /// Checks that `user` may make every change from `old` to `self`.
    ///
    /// The rule: an owner of a node may edit everything strictly inside its
    /// subtree, plus its own owners, accounts, members and description. A
    /// node's share, and adding or removing it, change its siblings'
    /// effective shares, so they belong to the owners of its parent. Cluster
    /// settings belong to the root's owners; a `[default_leaf]` entry to
    /// whoever owns both the old and the new leaf. (Admins, root and the
    /// Slurm user, may do anything: the caller knows who they are.)
    pub fn authorize(&self, old: &BudgetTree, user: &str) -> Result<(), Vec<PermissionRefusal>> {
        let mut refusals = Vec::new();
        // `tree` is where the node lives (new for added, old for removed).
        let mut need = |change: &BudgetChange, tree: &BudgetTree, path: &str, of_parent: bool| {
            let Some(id) = tree.find(path) else { return };
            let target = if of_parent { tree.node(id).parent.unwrap_or(0) } else { id };
            if !tree.owns(user, target) {
                refusals.push(PermissionRefusal {
                    change: change.to_string(),
                    needs: tree.node(target).display_path().to_owned(),
                    editors: tree.editors_of(target),
                });
            }
        };
        for change in self.diff(old) {
            match &change {
                BudgetChange::Added { path } => need(&change, self, path, true),
                BudgetChange::Removed { path } => need(&change, old, path, true),
                // Both change its siblings' shares (on some cluster): the parent's to give.
                BudgetChange::Share { path, .. } | BudgetChange::Funding { path, .. } => need(&change, self, path, true),
                BudgetChange::Owners { path, .. }
                | BudgetChange::Accounts { path, .. }
                | BudgetChange::Members { path, .. }
                | BudgetChange::Description { path } => {
                    // Both before and after: giving a node away also needs the old owner's consent.
                    need(&change, old, path, false);
                }
                BudgetChange::Setting { .. } => need(&change, self, "", false),
                // A consequence of the changes above, which are checked.
                BudgetChange::AccountCharges { .. } => {}
                BudgetChange::DefaultLeaf { old: a, new: b, .. } => {
                    if let Some(a) = a {
                        need(&change, old, a, false);
                    }
                    if let Some(b) = b {
                        need(&change, self, b, false);
                    }
                }
            }
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals)
        }
    }
}

/// A change the user may not make, and who may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRefusal {
    pub change: String,
    /// The node whose owners may make it.
    pub needs: String,
    pub editors: Vec<String>,
}

impl fmt::Display for PermissionRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.editors.is_empty() { "an admin".to_owned() } else { format!("{} or an admin", self.editors.join(", ")) };
        write!(f, "'{}' needs an owner of {}: {who}", self.change, self.needs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = r#"
[cluster]
gpus = 32
lookback = "7d"

[default_leaf]
dave = "vision/tracking"

[budget]
owners = ["director"]

[budget.vision]
share = 70
owners = ["alice"]

[budget.vision.tracking]
share = 1
owners = ["carol"]
accounts = ["Tracking"]
members = ["dave"]

[budget.vision.segmentation]
share = 1
accounts = ["seg"]
members = ["dave", "erin"]

[budget.nlp]
share = 30
owners = ["frank"]
accounts = ["nlp"]
members = ["*"]
"#;

    fn lab() -> BudgetTree {
        BudgetTree::parse(LAB).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Found by fuzzing (fuzz/corpus/budget/huge-shares.toml): shares
    /// whose sum overflows to infinity gave every leaf an effective share of 0.
    #[test]
    fn huge_shares_still_sum_to_one() {
        let t = BudgetTree::parse(
            "[budget]\n[budget.a]\nshare = 1e308\naccounts = [\"a\"]\nmembers = [\"*\"]\n\
             [budget.b]\nshare = 1.7e308\naccounts = [\"b\"]\nmembers = [\"x\"]\n",
        )
        .unwrap();
        let eff = |p: &str| t.node(t.find(p).unwrap()).effective_share;
        assert!((eff("a") - 1.0 / 2.7).abs() < 1e-12, "{}", eff("a"));
        assert!((eff("b") - 1.7 / 2.7).abs() < 1e-12, "{}", eff("b"));
        assert!((eff("a") + eff("b") - 1.0).abs() < 1e-12);
    }

    /// A share so much smaller than a sibling's that its node's effective
    /// share is (or underflows to) next to nothing would rank that node's
    /// jobs by dividing by zero: refused at the smaller share, naming the
    /// larger; as are effective shares made tiny by depth alone.
    #[test]
    fn shares_that_leave_a_node_next_to_nothing_are_refused() {
        let leaf = |name: &str, share: &str| format!("[budget.{name}]\nshare = {share}\naccounts = [\"{name}\"]\n");
        let e = errors(&format!("[budget]\n{}{}{}", leaf("a", "1e308"), leaf("b", "1"), leaf("c", "5e-324")));
        let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
        assert_eq!(
            got,
            [
                (
                    Some(6),
                    "budget.b.share",
                    "the node's effective share of the cluster is 1e-308, below the least allowed, 1e-12: its share 1 is 1e-308 of the sum of its and its siblings' shares, 1e308 (the largest: a's 1e308, line 3); give siblings shares of more similar sizes"
                ),
                (
                    Some(9),
                    "budget.c.share",
                    "the node's effective share of the cluster is 0, below the least allowed, 1e-12: its share 5e-324 is 0 of the sum of its and its siblings' shares, 1e308 (the largest: a's 1e308, line 3); give siblings shares of more similar sizes"
                ),
            ]
        );
        // About the bound: a share 1e-11 of the sum is allowed, 1e-12 less a little is not.
        assert!(BudgetTree::parse(&format!("[budget]\n{}{}", leaf("a", "1e11"), leaf("b", "1"))).is_ok());
        let e = errors(&format!("[budget]\n{}{}", leaf("a", "1e12"), leaf("b", "1")));
        assert_eq!((e.len(), e[0].field.as_str()), (1, "budget.b.share"), "{e:?}");
        assert!(
            e[0].message
                .contains("effective share of the cluster is 9.99999999999e-13, below the least allowed, 1e-12: its share 1 is 9.99999999999e-13 of the sum"),
            "{e:?}"
        );
        // Depth: 1e-5 at each of three levels is 1e-15 of the cluster; only
        // the topmost node below the bound is named.
        let text = "[budget]\n[budget.big]\nshare = 99999\naccounts = [\"big\"]\n\
                    [budget.x]\nshare = 1\n[budget.x.big]\nshare = 99999\naccounts = [\"xbig\"]\n\
                    [budget.x.y]\nshare = 1\n[budget.x.y.big]\nshare = 99999\naccounts = [\"ybig\"]\n\
                    [budget.x.y.z]\nshare = 1\n[budget.x.y.z.w]\nshare = 1\naccounts = [\"w\"]\n";
        let e = errors(text);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!((e[0].line, e[0].field.as_str()), (Some(16), "budget.x.y.z.share"));
        assert!(e[0].message.starts_with("the node's effective share of the cluster is 1e-15, below the least allowed, 1e-12: the product of its and its ancestors' fractions of their siblings' shares, down x/y/z"), "{e:?}");
    }

    #[test]
    fn effective_shares_are_products_of_normalized_shares() {
        let t = lab();
        let eff = |p: &str| t.node(t.find(p).unwrap()).effective_share;
        assert!((eff("vision") - 0.7).abs() < 1e-12);
        assert!((eff("vision/tracking") - 0.35).abs() < 1e-12);
        assert!((eff("nlp") - 0.3).abs() < 1e-12);
        assert_eq!(t.leaves.len(), 3);
        assert_eq!(t.settings.gpus, Some(32));
    }

    #[test]
    fn jobs_find_their_leaf() {
        let t = lab();
        let path = |r: Result<LeafId, LeafRefusal>| t.leaf_node(r.unwrap()).path.clone();
        assert_eq!(path(t.leaf_for_job("dave", None)), "vision/tracking");
        assert_eq!(path(t.leaf_for_job("dave", Some("SEG"))), "vision/segmentation");
        assert_eq!(path(t.leaf_for_job("erin", None)), "vision/segmentation");
        // Not listed anywhere: the one open leaf.
        assert_eq!(path(t.leaf_for_job("zoe", None)), "nlp");
        let refusal = t.leaf_for_job("erin", Some("tracking")).unwrap_err();
        let text = refusal.to_string();
        assert!(text.contains("not a member of budget vision/tracking"), "{text}");
        assert!(text.contains("seg, nlp"), "{text}");
        assert!(matches!(t.leaf_for_job("erin", Some("nope")), Err(LeafRefusal::UnknownAccount { .. })));
    }

    /// One budget, several clusters: `clusters` funds a node on some only,
    /// `cluster_shares` sets its share on one; each cluster's view shares
    /// its own GPUs that way, and the lab's is the tree as written.
    #[test]
    fn clusters_fund_nodes_and_set_shares_per_cluster() {
        let text = "[budget]\n[budget.vision]\nshare = 3\ncluster_shares = { beta = 1 }\n[budget.vision.a]\nshare = 1\naccounts = [\"a\"]\n[budget.vision.b]\nshare = 1\naccounts = [\"b\"]\nclusters = [\"Alpha\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n";
        let t = BudgetTree::parse(text).unwrap();
        let eff = |t: &BudgetTree, p: &str| t.node(t.find(p).unwrap()).effective_share;
        // As written (the lab, and every cluster the file does not name).
        assert_eq!((eff(&t, "vision"), eff(&t, "vision/b"), eff(&t, "nlp")), (0.75, 0.375, 0.25));
        assert_eq!(t.for_cluster(None), t);
        let gamma = t.for_cluster(Some("gamma"));
        assert_eq!((eff(&gamma, "vision/a"), eff(&gamma, "vision/b")), (0.75, 0.0), "b is funded on alpha only (names are lower-cased)");
        let alpha = t.for_cluster(Some("alpha"));
        assert_eq!((eff(&alpha, "vision/a"), eff(&alpha, "vision/b"), eff(&alpha, "nlp")), (0.375, 0.375, 0.25));
        let beta = t.for_cluster(Some("beta"));
        assert_eq!((eff(&beta, "vision"), eff(&beta, "vision/a"), eff(&beta, "vision/b"), eff(&beta, "nlp")), (0.5, 0.5, 0.0, 0.5));
        assert!(!beta.is_funded(beta.find("vision/b").unwrap()) && beta.is_funded(beta.find("vision/a").unwrap()));
        assert_eq!(t.funded_clusters(t.find("vision/b").unwrap()), Some(&["alpha".to_owned()][..]));
        assert_eq!(t.node(t.find("vision").unwrap()).funding(), "on every cluster (beta: share 1)");
        assert_eq!(t.named_clusters().into_iter().collect::<Vec<_>>(), vec!["alpha", "beta"]);
        // An unfunded node is never owed: unused, it still ranks after a
        // sibling that used its share.
        let r = crate::fairshare::Ranking::compute(&beta, &[50, 0, 0], 8, 0);
        let (a, b) = (beta.node(beta.find("vision/a").unwrap()).leaf.unwrap(), beta.node(beta.find("vision/b").unwrap()).leaf.unwrap());
        assert!(r.leaf_rank[b as usize] > r.leaf_rank[a as usize], "{:?}", r.leaf_rank);
        // A change of funding is the parent's owners' to make, like a share.
        // A node none of whose children is funded on a cluster is not either:
        // its siblings share that cluster's GPUs.
        let only_alpha = BudgetTree::parse(&text.replace("accounts = [\"a\"]\n", "accounts = [\"a\"]\nclusters = [\"alpha\"]\n")).unwrap();
        let beta_only_nlp = only_alpha.for_cluster(Some("beta"));
        assert_eq!((eff(&beta_only_nlp, "vision"), eff(&beta_only_nlp, "nlp")), (0.0, 1.0));
        let edited = BudgetTree::parse(&text.replace("clusters = [\"Alpha\"]", "clusters = [\"alpha\", \"beta\"]")).unwrap();
        let changes = edited.diff(&t);
        assert_eq!(changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(), vec!["~ vision/b funded on alpha -> on alpha, beta"]);
    }

    #[test]
    fn cluster_funding_errors_name_line_and_field() {
        let got = |text: &str| errors(text).into_iter().map(|e| (e.line, e.field, e.message)).collect::<Vec<_>>();
        let e = got("[budget]\nclusters = [\"a\"]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\n");
        assert_eq!((e[0].0, e[0].1.as_str()), (Some(2), "budget.clusters"));
        assert!(e[0].2.contains("the root is the whole lab"), "{e:?}");
        let e = got("[budget]\n[budget.x]\nshare = 1\nclusters = [\"alpha\"]\n[budget.x.y]\nshare = 1\naccounts = [\"y\"]\nclusters = [\"alpha\", \"beta\"]\n");
        assert_eq!((e[0].0, e[0].1.as_str()), (Some(8), "budget.x.y.clusters"));
        assert!(e[0].2.contains("funded on beta where x (line 2) is not"), "{e:?}");
        let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\nclusters = [\"alpha\"]\ncluster_shares = { beta = 2, alpha = -1 }\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e.iter().any(|(l, f, m)| *l == Some(6) && f == "budget.x.cluster_shares.beta" && m.contains("where the node is not funded")), "{e:?}");
        assert!(e.iter().any(|(_, f, m)| f == "budget.x.cluster_shares.alpha" && m.contains("positive number")), "{e:?}");
        let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\nclusters = []\n");
        assert!(e[0].2.contains("funds the node on no cluster"), "{e:?}");
        // Each cluster's shares keep the least effective share.
        let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\ncluster_shares = { beta = 1e-15 }\n[budget.y]\nshare = 1\naccounts = [\"y\"]\n");
        assert_eq!((e.len(), e[0].1.as_str()), (1, "budget.x.cluster_shares"), "{e:?}");
        assert!(e[0].2.contains("on cluster beta") && e[0].2.contains("below the least allowed"), "{e:?}");
        let e = got("[budget]\n[budget.x]\nshare = 1\naccounts = [\"x\"]\ncluster_shares = 3\n");
        assert!(e[0].2.contains("cluster_shares = { beta = 3 }"), "{e:?}");
    }

    fn errors(text: &str) -> Vec<BudgetError> {
        match BudgetTree::parse(text) {
            Ok(_) => panic!("accepted a bad budget:\n{text}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn bad_files_name_line_and_field() {
        let e = errors("[budget]\n[budget.a]\nshare = 0\naccounts = [\"a\"]\n");
        assert_eq!(e[0].line, Some(3));
        assert_eq!(e[0].field, "budget.a.share");
        assert!(e[0].message.contains("positive"));

        let e = errors("[budget]\n[budget.a]\nshare = nan\naccounts = [\"a\"]\n");
        assert!(e[0].message.contains("positive"), "{:?}", e);

        let e = errors("[budget]\n[budget.a]\nshares = 2\naccounts = [\"a\"]\n");
        assert!(e.iter().any(|e| e.line == Some(3) && e.message.contains("did you mean 'share'")), "{e:?}");

        let e = errors("[cluster]\nlookbak = \"7d\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n");
        assert!(e[0].message.contains("did you mean 'lookback'"), "{e:?}");
        assert_eq!(e[0].line, Some(2));

        let e = errors("[cluster]\nmin_runtime_cap = \"8 hours\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n");
        assert_eq!(e[0].field, "cluster.min_runtime_cap");
        assert_eq!(e[0].line, Some(2));

        let e = errors("[budget]\nowners = [\"x\"]\n");
        assert!(e[0].message.contains("empty"), "{e:?}");

        let e = errors("[cluster]\ngpus = 8\n");
        assert!(e[0].message.contains("missing [budget]"), "{e:?}");

        let e = errors("[budget]\n[budget.a]\nshare = 1\naccounts = [\"x\"]\n[budget.b]\nshare = 1\naccounts = [\"X\"]\n");
        assert!(e[0].message.contains("already charged to a (line 2)"), "{e:?}");
        assert_eq!(e[0].line, Some(5));

        let e = errors("[budget]\n[budget.a]\nshare = 1\n");
        assert!(e[0].message.contains("a leaf needs accounts"), "{e:?}");

        // TOML itself refuses duplicate tables, with the line.
        let e = errors("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.a]\nshare = 2\n");
        assert!(e[0].message.contains("invalid TOML"), "{e:?}");
        assert_eq!(e[0].line, Some(5));
    }

    #[test]
    fn ambiguous_member_needs_a_default() {
        let text = LAB.replace("dave = \"vision/tracking\"", "");
        let e = errors(&text);
        assert!(e[0].message.contains("user 'dave' is a member of vision/tracking"), "{e:?}");
        assert!(e[0].message.contains("[default_leaf]"), "{e:?}");
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let e = errors("[budget]\n[budget.a]\nshare = -1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\n[budget.c]\nshare = 1\naccounts = [\"c\"]\nfoo = 3\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(e.iter().map(|e| e.line.unwrap()).collect::<Vec<_>>(), vec![3, 5, 10]);
    }

    #[test]
    fn settings_rules_name_line_and_field() {
        let budget = "[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n";
        let e = errors(&format!("[cluster]\nlookback = \"0s\"\ngrace = \"1m\"\ndefault_min_runtime = \"9h\"\npreempt_margin = -0.5\n{budget}"));
        let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (Some(2), "cluster.lookback", "the lookback window must be longer than zero"),
                (Some(4), "cluster.default_min_runtime", "9h exceeds min_runtime_cap of 8h"),
                (Some(5), "cluster.preempt_margin", "must be a number of at least 0, such as 0.1"),
            ]
        );
        let e = errors(&format!("[cluster]\npreempt_margin = \"much\"\n{budget}"));
        assert_eq!((e.len(), e[0].line, e[0].message.as_str()), (1, Some(2), "must be a number of at least 0, such as 0.1"));
        // A default that is not given follows a lower cap.
        let t = BudgetTree::parse(&format!("[cluster]\nmin_runtime_cap = \"30m\"\n{budget}")).unwrap();
        assert_eq!(t.settings.default_min_runtime, 1800);
        // The preemption switches: on unless the budget says, and only booleans.
        assert!(t.settings.preempt_within_team && t.settings.preempt_smallest_first);
        let t = BudgetTree::parse(&format!("[cluster]\npreempt_within_team = false\npreempt_smallest_first = false\n{budget}")).unwrap();
        assert!(!t.settings.preempt_within_team && !t.settings.preempt_smallest_first);
        let e = errors(&format!("[cluster]\npreempt_within_team = \"yes\"\n{budget}"));
        let got: Vec<(Option<usize>, &str, &str)> = e.iter().map(|e| (e.line, e.field.as_str(), e.message.as_str())).collect();
        assert_eq!(got, vec![(Some(2), "cluster.preempt_within_team", "must be true or false")]);
        assert_eq!(BudgetTree::parse(&format!("[cluster]\nunallocated_grace = \"30s\"\n{budget}")).unwrap().settings.unallocated_grace, 30);
        // Whose usage fair-share counts: each cluster's own unless the budget says the lab's.
        assert_eq!(BudgetTree::parse(budget).unwrap().settings.fair_share_usage, FairShareUsage::Cluster);
        assert_eq!(BudgetTree::parse(&format!("[cluster]\nfair_share_usage = \"lab\"\n{budget}")).unwrap().settings.fair_share_usage, FairShareUsage::Lab);
        let e = errors(&format!("[cluster]\nfair_share_usage = \"site\"\n{budget}"));
        assert_eq!((e.len(), e[0].line, e[0].field.as_str()), (1, Some(2), "cluster.fair_share_usage"));
        assert!(e[0].message.contains("\"cluster\"") && e[0].message.contains("\"lab\""), "{e:?}");
        let lab = BudgetTree::parse(&format!("[cluster]\nfair_share_usage = \"lab\"\n{budget}")).unwrap();
        assert!(lab.diff(&BudgetTree::parse(budget).unwrap()).iter().any(|c| matches!(c, BudgetChange::Setting { name: "fair_share_usage", .. })));
        assert_eq!(errors(&format!("[cluster]\nunallocated_grace = \"-1m\"\n{budget}"))[0].field, "cluster.unallocated_grace");
        let t = BudgetTree::parse(&format!("[cluster]\nsmall_job_gpus = 2\nsmall_job_min_runtime = \"15m\"\n{budget}")).unwrap();
        assert_eq!((t.settings.small_job_gpus, t.settings.small_job_min_runtime), (2, 900));
        let e = errors(&format!("[cluster]\nsmall_job_gpus = -1\nsmall_job_min_runtime = \"-5m\"\n{budget}"));
        let got: Vec<(Option<usize>, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(got, vec![(Some(2), "cluster.small_job_gpus"), (Some(3), "cluster.small_job_min_runtime")]);
        assert!(e[0].message.contains("whole number of GPUs"), "{}", e[0].message);
    }

    #[test]
    fn validate_holds_every_rule() {
        assert_eq!(ClusterSettings::default().validate(), Ok(()));
        let bad = ClusterSettings {
            gpus: Some(0),
            lookback: 0,
            min_runtime_cap: 3600,
            default_min_runtime: 7200,
            grace: -1,
            preempt_margin: f64::NAN,
            ..ClusterSettings::default()
        };
        let broken = bad.validate().unwrap_err();
        let fields: Vec<&str> = broken.iter().map(SettingsError::field).collect();
        assert_eq!(fields, vec!["gpus", "lookback", "grace", "default_min_runtime", "preempt_margin"]);
        let above = &broken[3];
        assert_eq!(above.fields(), &["default_min_runtime", "min_runtime_cap"]);
        assert_eq!(above.to_string(), "2h exceeds min_runtime_cap of 1h");
    }

    #[test]
    fn diff_and_permissions() {
        let old = lab();
        // carol owns vision/tracking: may change its members, not its share.
        let members = BudgetTree::parse(&LAB.replace("members = [\"dave\"]", "members = [\"dave\", \"gus\"]")).unwrap();
        assert!(members.authorize(&old, "carol").is_ok());
        let share = BudgetTree::parse(&LAB.replacen("share = 1\nowners = [\"carol\"]", "share = 5\nowners = [\"carol\"]", 1)).unwrap();
        assert_eq!(share.diff(&old).len(), 1);
        let refused = share.authorize(&old, "carol").unwrap_err();
        assert_eq!(refused.len(), 1);
        assert!(refused[0].to_string().contains("needs an owner of vision: alice, director or an admin"), "{}", refused[0]);
        assert!(share.authorize(&old, "alice").is_ok());
        assert!(share.authorize(&old, "director").is_ok());
        let settings = BudgetTree::parse(&LAB.replace("gpus = 32", "gpus = 64")).unwrap();
        assert!(settings.authorize(&old, "alice").is_err());
        assert!(settings.authorize(&old, "director").is_ok());
    }

    #[test]
    fn edits_of_accounts_and_leaves_move_charges_never_drop_them() {
        let v1 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking\"]\n[budget.vision.detect3d]\nshare = 1\naccounts = [\"detect3d\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n").unwrap();
        // The tracking leaf renames its account; detect3d is removed and
        // added again as detect3d-v2 with the same account.
        let v2 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking2\"]\n[budget.vision.detect3d-v2]\nshare = 1\naccounts = [\"detect3d\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n").unwrap();
        let leaf = |t: &BudgetTree, path: &str| t.node(t.find(path).unwrap()).leaf.unwrap();
        let tracking = leaf(&v2, "vision/tracking");
        // Without history the old account is outside the tree...
        assert_eq!(v2.charged_leaf_of_account("tracking"), None);
        // ...with it, the jobs queued under it are still charged to tracking,
        // while a new submission with it is refused (it is no budget's now).
        // The history of the sync says where each account is charged now.
        let said: Vec<String> = v2.diff(&v1).iter().map(|c| c.to_string()).collect();
        assert!(
            said.contains(&"= account tracking: jobs and runs under it stay charged to vision/tracking through the lookback window".to_owned()),
            "{said:?}"
        );
        assert!(said.contains(&"= account detect3d: the usage of vision/detect3d in the window moves with it to vision/detect3d-v2".to_owned()), "{said:?}");
        let v2 = v2.with_account_history([&v1]);
        assert_eq!(v2.charged_leaf_of_account("Tracking "), Some(tracking));
        assert_eq!(v2.charged_leaf_of_account("tracking2"), Some(tracking));
        assert!(v2.leaf_for_job("alice", Some("tracking")).is_err());
        assert_eq!(v2.retired_accounts(), vec![("tracking".to_owned(), "vision/tracking".to_owned())]);
        // A run recorded under the removed detect3d follows its account to detect3d-v2;
        // one recorded under a leaf that is still there stays there.
        assert_eq!(v2.charged_leaf_of_run(Some("vision/detect3d"), Some("detect3d")), Some(leaf(&v2, "vision/detect3d-v2")));
        assert_eq!(v2.charged_leaf_of_run(Some("nlp"), Some("detect3d")), Some(leaf(&v2, "nlp")));
        assert_eq!(v2.charged_leaf_of_run(Some("vision/gone"), Some("nosuch")), None);
        // The account given back: the current mapping wins, nothing retired.
        let v3 = BudgetTree::parse("[budget]\n[budget.vision]\nshare = 1\n[budget.vision.tracking]\nshare = 1\naccounts = [\"tracking\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\", \"tracking2\"]\n").unwrap().with_account_history([&v2, &v1]);
        assert_eq!(v3.charged_leaf_of_account("tracking"), Some(leaf(&v3, "vision/tracking")));
        assert_eq!(v3.charged_leaf_of_account("tracking2"), Some(leaf(&v3, "nlp")));
        // An account whose last leaf is gone is charged nowhere, and the sync says so.
        assert_eq!(v3.charged_leaf_of_account("detect3d"), None);
        let said: Vec<String> = v3.diff(&v2).iter().map(|c| c.to_string()).collect();
        assert!(
            said.contains(&"= account detect3d: no leaf has it now and vision/detect3d-v2 is gone: its usage in the window counts in vision's".to_owned()),
            "{said:?}"
        );
        assert_eq!(v3.charged_node_of_run(Some("vision/detect3d-v2"), Some("detect3d")), v3.find("vision"));
    }
}
