//! The usage the order was last computed from.
//!
//! The priority plugin computes per-leaf usage every period and stores it
//! here; the preempt plugin, `allot why` and `allot budget show` rebuild the
//! very same ranking from it with [`UsageSnapshot::ranking`], so every reader
//! agrees with the order Slurm was given.

use allot::budget::BudgetTree;
use allot::fairshare::Ranking;

use crate::db::{params, Conn, DbResult, Dialect};
use crate::{Ledger, Result};

/// One leaf's usage in the window (or an inner node's: what leaves removed
/// within the window used, see [`UsageSnapshot::orphans_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafUsage {
    pub leaf: String,
    /// Charged GPU-seconds.
    pub charged: i64,
    /// Unallocated GPU-seconds (never charged; reported).
    pub unallocated: i64,
}

/// Usage of every leaf at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSnapshot {
    pub computed_at: i64,
    pub budget_version: i64,
    pub capacity_gpus: u32,
    pub leaves: Vec<LeafUsage>,
}

impl UsageSnapshot {
    pub(crate) fn write(&self, c: &Conn) -> DbResult<()> {
        c.exec("DELETE FROM usage_snapshot", &[])?;
        for l in &self.leaves {
            c.exec("INSERT INTO usage_snapshot (leaf, charged, unallocated) VALUES (?, ?, ?)", params![&l.leaf, l.charged, l.unallocated])?;
        }
        let replace = match c.dialect() {
            Dialect::Sqlite => "INSERT OR REPLACE",
            Dialect::MySql => "REPLACE",
        };
        c.exec(
            &format!("{replace} INTO usage_snapshot_meta (id, computed_at, budget_version, capacity_gpus) VALUES (1, ?, ?, ?)"),
            params![self.computed_at, self.budget_version, self.capacity_gpus],
        )?;
        Ok(())
    }

    /// Charged GPU-seconds by the tree's [`allot::budget::LeafId`]; leaves
    /// the snapshot does not know count as unused.
    pub fn charged_for(&self, tree: &BudgetTree) -> Vec<i64> {
        let mut out = vec![0; tree.leaves.len()];
        for l in &self.leaves {
            if let Some(leaf) = tree.find(&l.leaf).and_then(|id| tree.node(id).leaf) {
                out[leaf as usize] = l.charged;
            }
        }
        out
    }

    /// The fair-share ranking of `tree` under this usage. Capacity: the
    /// tree's own GPU count if it gives one, else what the plugin counted.
    /// Usage of inner nodes: rows whose path is a node of `tree` that is no
    /// leaf (the usage of removed leaves, counted in their nearest surviving
    /// ancestor: `allot::fairshare::Ranking::compute_with_orphans`).
    pub fn orphans_for(&self, tree: &BudgetTree) -> Vec<(allot::budget::NodeId, i64)> {
        self.leaves
            .iter()
            .filter_map(|l| tree.find(&l.leaf).filter(|&n| tree.node(n).leaf.is_none()).map(|n| (n, l.charged)))
            .collect()
    }

    pub fn ranking(&self, tree: &BudgetTree) -> Ranking {
        Ranking::compute_with_orphans(tree, &self.charged_for(tree), &self.orphans_for(tree), tree.settings.gpus.unwrap_or(self.capacity_gpus), self.computed_at)
    }
}

impl Ledger {
    /// The latest usage snapshot, if the priority plugin ever wrote one.
    pub fn usage_snapshot(&self) -> Result<Option<UsageSnapshot>> {
        self.read(|c| {
            let Some(meta) = c.row("SELECT computed_at, budget_version, capacity_gpus FROM usage_snapshot_meta WHERE id = 1", &[])? else {
                return Ok(None);
            };
            let leaves = c
                .rows("SELECT leaf, charged, unallocated FROM usage_snapshot ORDER BY leaf", &[])?
                .iter()
                .map(|r| Ok(LeafUsage { leaf: r.get(0)?, charged: r.get(1)?, unallocated: r.get(2)? }))
                .collect::<DbResult<Vec<_>>>()?;
            Ok(Some(UsageSnapshot { computed_at: meta.get(0)?, budget_version: meta.get(1)?, capacity_gpus: meta.get(2)?, leaves }))
        })
    }
}
