//! What changed between two versions of the budget, and who may make the
//! change: owners edit only their own subtree.

use super::*;

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
        for p in &POLICY_SETTINGS {
            setting(p.key, p.value(o).show(), p.value(n).show());
        }
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
