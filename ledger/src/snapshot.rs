//! The usage the order was last computed from.
//!
//! The priority plugin computes per-leaf usage every period and stores it
//! here; the preempt plugin, `allot why` and `allot budget show` rebuild the
//! very same ranking from it with [`UsageSnapshot::ranking`], so every reader
//! agrees with the order Slurm was given.

use allot::budget::BudgetTree;
use allot::fairshare::Ranking;

use allot::budget::FairShareUsage;

use crate::db::{params, Conn, DbResult, Dialect};
use crate::{Ledger, Result};

/// One leaf's usage in the window (or an inner node's: what leaves removed
/// within the window used, see [`UsageSnapshot::orphans_for`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeafUsage {
    pub leaf: String,
    /// Charged GPU-seconds.
    pub charged: i64,
    /// Unallocated GPU-seconds (never charged; reported).
    pub unallocated: i64,
    /// Charged GPUs running at `computed_at`: the budget's `lookahead`
    /// counts them ahead ([`allot::fairshare::with_lookahead`]).
    pub running: i64,
}

/// Usage of every leaf at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageSnapshot {
    pub computed_at: i64,
    pub budget_version: i64,
    pub capacity_gpus: u32,
    pub leaves: Vec<LeafUsage>,
}

impl UsageSnapshot {
    pub(crate) fn write(&self, c: &Conn, cluster: &str) -> DbResult<()> {
        c.exec("DELETE FROM usage_snapshot WHERE cluster = ?", params![cluster])?;
        let rows: Vec<Vec<crate::db::Value>> = self.leaves.iter().map(|l| params![cluster, &l.leaf, l.charged, l.unallocated, l.running].to_vec()).collect();
        c.exec_rows("INSERT INTO usage_snapshot (cluster, leaf, charged, unallocated, running) VALUES", "", 5, &rows)?;
        let replace = match c.dialect() {
            Dialect::Sqlite => "INSERT OR REPLACE",
            Dialect::MySql => "REPLACE",
        };
        c.exec(
            &format!("{replace} INTO usage_snapshot_meta (cluster, computed_at, budget_version, capacity_gpus) VALUES (?, ?, ?, ?)"),
            params![cluster, self.computed_at, self.budget_version, self.capacity_gpus],
        )?;
        Ok(())
    }

    /// One field of every leaf's row, by the tree's [`allot::budget::LeafId`];
    /// leaves the snapshot does not know count 0.
    fn by_leaf(&self, tree: &BudgetTree, field: impl Fn(&LeafUsage) -> i64) -> Vec<i64> {
        let mut out = vec![0; tree.leaves.len()];
        for l in &self.leaves {
            if let Some(leaf) = tree.find(&l.leaf).and_then(|id| tree.node(id).leaf) {
                out[leaf as usize] = field(l);
            }
        }
        out
    }

    /// Charged GPU-seconds by leaf; leaves the snapshot does not know count as unused.
    pub fn charged_for(&self, tree: &BudgetTree) -> Vec<i64> {
        self.by_leaf(tree, |l| l.charged)
    }

    /// Charged GPUs running at `computed_at`, by leaf.
    pub fn running_for(&self, tree: &BudgetTree) -> Vec<i64> {
        self.by_leaf(tree, |l| l.running)
    }

    /// What each leaf is ranked by: its charged GPU-seconds, and with the
    /// budget's `lookahead` its running GPUs counted ahead.
    pub fn standing_usage_for(&self, tree: &BudgetTree) -> Vec<i64> {
        let mut used = self.charged_for(tree);
        allot::fairshare::with_lookahead(&mut used, &self.running_for(tree), tree.settings.lookahead);
        used
    }

    /// The fair-share ranking of `tree` under this usage. Capacity: the
    /// tree's own GPU count if it gives one, else what the plugin counted.
    /// Usage of inner nodes: rows whose path is a node of `tree` that is no
    /// leaf (the usage of removed leaves, counted in their nearest surviving
    /// ancestor: `allot::fairshare::Ranking::compute_with_orphans`).
    pub fn orphans_for(&self, tree: &BudgetTree) -> Vec<(allot::budget::NodeId, i64)> {
        self.leaves.iter().filter_map(|l| tree.find(&l.leaf).filter(|&n| tree.node(n).leaf.is_none()).map(|n| (n, l.charged))).collect()
    }

    pub fn ranking(&self, tree: &BudgetTree) -> Ranking {
        Ranking::compute_with_orphans(
            tree,
            &self.standing_usage_for(tree),
            &self.orphans_for(tree),
            tree.settings.gpus.unwrap_or(self.capacity_gpus),
            self.computed_at,
        )
    }
}

impl UsageSnapshot {
    /// The lab's usage from each cluster's: charged, unallocated and running summed
    /// per leaf, capacity summed, as old as the oldest, of the newest
    /// budget version. `None` for no snapshot at all.
    pub fn sum(snapshots: &[UsageSnapshot]) -> Option<UsageSnapshot> {
        let first = snapshots.first()?;
        if snapshots.len() == 1 {
            return Some(first.clone());
        }
        let mut leaves: std::collections::BTreeMap<&str, LeafUsage> = std::collections::BTreeMap::new();
        for l in snapshots.iter().flat_map(|s| &s.leaves) {
            let sum = leaves.entry(&l.leaf).or_insert_with(|| LeafUsage { leaf: l.leaf.clone(), charged: 0, unallocated: 0, running: 0 });
            sum.charged += l.charged;
            sum.unallocated += l.unallocated;
            sum.running += l.running;
        }
        Some(UsageSnapshot {
            computed_at: snapshots.iter().map(|s| s.computed_at).min().unwrap_or(first.computed_at),
            budget_version: snapshots.iter().map(|s| s.budget_version).max().unwrap_or(first.budget_version),
            capacity_gpus: snapshots.iter().map(|s| s.capacity_gpus).sum(),
            leaves: leaves.into_values().collect(),
        })
    }
}

impl Ledger {
    /// The latest usage snapshot, if the priority plugin ever wrote one:
    /// this cluster's, or for the lab every cluster's summed
    /// ([`UsageSnapshot::sum`]).
    pub fn usage_snapshot(&self) -> Result<Option<UsageSnapshot>> {
        let all = self.usage_snapshots()?;
        Ok(UsageSnapshot::sum(&all.into_iter().map(|(_, s)| s).collect::<Vec<_>>()))
    }

    /// The usage the order of this connection's cluster is computed from:
    /// its own snapshot, or, when the budget counts the lab's usage
    /// (`fair_share_usage = "lab"`), its own plus every other cluster's
    /// ([`Ledger::usage_of_other_clusters`]). For the lab (an unscoped
    /// connection): every cluster's summed.
    pub fn ranked_usage(&self, tree: &BudgetTree) -> Result<Option<UsageSnapshot>> {
        let own = self.usage_snapshot()?;
        if self.cluster().is_none() || tree.settings.fair_share_usage == FairShareUsage::Cluster {
            return Ok(own);
        }
        let fresh_since = own.as_ref().map_or(i64::MIN, |s| s.computed_at - tree.settings.lookback);
        let others = self.usage_of_other_clusters(fresh_since)?;
        Ok(UsageSnapshot::sum(&own.into_iter().chain(others).collect::<Vec<_>>()))
    }

    /// The other clusters' usage, summed ([`UsageSnapshot::sum`]): for a
    /// connection scoped to a cluster whose budget counts the lab's usage.
    /// Snapshots computed before `fresh_since` are left out: a cluster
    /// that stopped writing for longer than the window has no usage in it.
    /// `None` when there is none (or for an unscoped connection).
    pub fn usage_of_other_clusters(&self, fresh_since: i64) -> Result<Option<UsageSnapshot>> {
        let Some(own) = self.cluster() else { return Ok(None) };
        let others: Vec<UsageSnapshot> = self
            .snapshots_where("cluster <> ? AND cluster <> '' AND computed_at >= ?", vec![own.into(), fresh_since.into()])?
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        Ok(UsageSnapshot::sum(&others))
    }

    /// Each cluster's latest snapshot, by cluster name (only this
    /// connection's cluster's when it is scoped to one).
    pub fn usage_snapshots(&self) -> Result<Vec<(String, UsageSnapshot)>> {
        let (only, p) = self.cluster_filter("");
        self.snapshots_where(only.strip_suffix(" AND ").unwrap_or("1 = 1"), p)
    }

    /// The snapshots of the clusters `condition` (on usage_snapshot_meta)
    /// selects, by cluster name.
    fn snapshots_where(&self, condition: &str, p: Vec<crate::db::Value>) -> Result<Vec<(String, UsageSnapshot)>> {
        let where_ = format!("WHERE {condition}");
        self.read(|c| {
            let metas =
                c.rows(&format!("SELECT cluster, computed_at, budget_version, capacity_gpus FROM usage_snapshot_meta {where_} ORDER BY cluster"), &p)?;
            let mut out = Vec::with_capacity(metas.len());
            for meta in metas {
                let cluster: String = meta.get(0)?;
                let leaves = c
                    .rows("SELECT leaf, charged, unallocated, running FROM usage_snapshot WHERE cluster = ? ORDER BY leaf", params![&cluster])?
                    .iter()
                    .map(|r| Ok(LeafUsage { leaf: r.get(0)?, charged: r.get(1)?, unallocated: r.get(2)?, running: r.get(3)? }))
                    .collect::<DbResult<Vec<_>>>()?;
                out.push((cluster, UsageSnapshot { computed_at: meta.get(1)?, budget_version: meta.get(2)?, capacity_gpus: meta.get(3)?, leaves }));
            }
            Ok(out)
        })
    }
}
