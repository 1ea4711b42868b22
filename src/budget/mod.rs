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

use crate::duration::parse_duration;
use crate::Seconds;

/// Index of a node in [`BudgetTree::nodes`]; the root is node 0.
pub type NodeId = u32;
/// Index of a leaf in [`BudgetTree::leaves`]: dense, for per-leaf arrays.
pub type LeafId = u32;

pub use crate::settings::{Charged, ClusterSettings, FairShareUsage, SettingValue, SettingsError, POLICY_SETTINGS};
pub use change::{BudgetChange, PermissionRefusal};
pub use parse::{account_name_problem, MAX_NAME_CHARS};

mod change;
mod parse;

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

impl BudgetTree {
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

#[cfg(test)]
mod tests;
