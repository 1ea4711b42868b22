//! Budget versions: append-only history of every synced budget file.

use crate::db::{params, Conn, DbError, DbResult, Row};
use allot::budget::BudgetTree;

use crate::{Ledger, Result};

/// One synced version of the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetVersion {
    pub version: i64,
    pub synced_at: i64,
    pub author: String,
    pub source: String,
    pub toml: String,
    /// One change per line, from the previous version (empty for the first).
    pub changes: String,
}

impl BudgetVersion {
    /// The tree this version holds. It was validated when synced, so an
    /// error here means the ledger was edited by hand (or allot changed its
    /// rules): callers keep their last good tree.
    pub fn tree(&self) -> std::result::Result<BudgetTree, allot::budget::BudgetErrors> {
        BudgetTree::parse(&self.toml)
    }
}

/// What a sync did.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncOutcome {
    /// A new version was written.
    Written { version: i64, changes: Vec<String> },
    /// The file is byte-for-byte the current version: nothing written.
    Unchanged { version: i64 },
}

/// The version a sync would replace, as its permission check sees it.
#[derive(Debug, Clone, Copy)]
pub struct Replaced<'a> {
    pub version: i64,
    /// Its tree, or why it no longer validates (the ledger was edited by
    /// hand, or allot's rules changed since).
    pub tree: std::result::Result<&'a BudgetTree, &'a allot::budget::BudgetErrors>,
}

fn join(list: &[String]) -> String {
    list.join(",")
}

impl Ledger {
    /// Writes `tree` (parsed from `toml`) as a new budget version, atomically,
    /// with the changes from the current version, without a permission check
    /// (admins, tests). See [`Ledger::sync_budget_authorized`].
    pub fn sync_budget(&mut self, toml: &str, tree: &BudgetTree, author: &str, source: &str, now: i64) -> Result<SyncOutcome> {
        self.sync_budget_authorized(toml, tree, author, source, now, |_| Ok(()))
    }

    /// Writes `tree` (parsed from `toml`) as a new budget version if
    /// `authorize` accepts replacing the current one, all in one write
    /// transaction: the version checked is the version replaced, even with
    /// other writers about. A refusal (`LedgerError::Refused`) writes nothing.
    /// `tree` must be the result of parsing `toml`: the caller validated it,
    /// so a bad file never touches the ledger.
    pub fn sync_budget_authorized(
        &mut self,
        toml: &str,
        tree: &BudgetTree,
        author: &str,
        source: &str,
        now: i64,
        authorize: impl FnOnce(Option<Replaced<'_>>) -> std::result::Result<(), String>,
    ) -> Result<SyncOutcome> {
        self.write(|c| {
            let current: Option<(i64, String)> = c
                .row("SELECT version, toml FROM budget_versions ORDER BY version DESC LIMIT 1", &[])?
                .map(|r| Ok::<_, DbError>((r.get(0)?, r.get(1)?)))
                .transpose()?;
            if let Some((version, text)) = &current {
                if text == toml {
                    return Ok(SyncOutcome::Unchanged { version: *version });
                }
            }
            let old = current.as_ref().map(|(version, text)| (*version, BudgetTree::parse(text)));
            authorize(old.as_ref().map(|(version, tree)| Replaced { version: *version, tree: tree.as_ref() })).map_err(DbError::Refused)?;
            let changes: Vec<String> = match &old {
                None => tree.nodes.iter().skip(1).map(|n| format!("+ {}", n.path)).collect(),
                Some((_, Ok(old))) => {
                    let diff: Vec<String> = tree.diff(old).iter().map(|c| c.to_string()).collect();
                    if diff.is_empty() {
                        vec!["(comments or layout only)".to_owned()]
                    } else {
                        diff
                    }
                }
                Some((_, Err(_))) => vec!["(previous version unreadable; whole tree replaced)".to_owned()],
            };
            let version = current.map_or(1, |(v, _)| v + 1);
            c.exec(
                "INSERT INTO budget_versions (version, synced_at, author, source, toml, changes) VALUES (?, ?, ?, ?, ?, ?)",
                params![version, now, author, source, toml, changes.join("\n")],
            )?;
            for node in &tree.nodes {
                c.exec(
                    "INSERT INTO budget_nodes (version, path, share, effective_share, is_leaf, owners, accounts, members) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    params![
                        version,
                        &node.path,
                        node.share,
                        node.effective_share,
                        node.is_leaf(),
                        join(&node.owners),
                        join(&node.accounts),
                        join(&node.members)
                    ],
                )?;
            }
            Ok(SyncOutcome::Written { version, changes })
        })
    }

    /// The newest budget version, if any was ever synced.
    pub fn current_budget(&self) -> Result<Option<BudgetVersion>> {
        self.read(|c| {
            c.row(&format!("SELECT {VERSION_COLUMNS} FROM budget_versions ORDER BY version DESC LIMIT 1"), &[])?.as_ref().map(row_to_version).transpose()
        })
    }

    /// The newest version number, cheaply: lets a reader skip re-reading an
    /// unchanged budget.
    pub fn current_budget_version(&self) -> Result<Option<i64>> {
        self.read(|c| c.row("SELECT max(version) FROM budget_versions", &[])?.map(|r| r.get(0)).transpose().map(Option::flatten))
    }

    /// One version by number.
    pub fn budget_version(&self, version: i64) -> Result<Option<BudgetVersion>> {
        self.read(|c| {
            c.row(&format!("SELECT {VERSION_COLUMNS} FROM budget_versions WHERE version = ?"), params![version])?.as_ref().map(row_to_version).transpose()
        })
    }

    /// Every version, newest first.
    pub fn budget_history(&self) -> Result<Vec<BudgetVersion>> {
        self.read(|c| c.rows(&format!("SELECT {VERSION_COLUMNS} FROM budget_versions ORDER BY version DESC"), &[])?.iter().map(row_to_version).collect())
    }

    /// The versions before `current` that were in force at some time since
    /// `since`, newest first, for [`BudgetTree::with_account_history`]: an
    /// account an edit took from a leaf keeps charging it through the
    /// lookback window.
    pub fn earlier_versions_since(&self, current: i64, since: i64) -> Result<Vec<BudgetVersion>> {
        self.read(|c| {
            // Those synced in the window, and the newest one before it (in
            // force at the window's start).
            c.rows(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM budget_versions
                     WHERE version < ? AND (synced_at >= ?
                         OR version = (SELECT MAX(version) FROM budget_versions WHERE version < ? AND synced_at < ?))
                     ORDER BY version DESC"
                ),
                params![current, since, current, since],
            )?
            .iter()
            .map(row_to_version)
            .collect()
        })
    }

    /// Node rows of one version, in path order. For reports in SQL's terms
    /// and for consistency checks.
    pub fn budget_nodes(&self, version: i64) -> Result<Vec<NodeRow>> {
        self.read(|c| nodes_of(c, version))
    }

    /// The newest version and its node rows, read as one snapshot.
    pub fn current_budget_with_nodes(&self) -> Result<Option<(BudgetVersion, Vec<NodeRow>)>> {
        self.read(|c| {
            let Some(v) = c
                .row(&format!("SELECT {VERSION_COLUMNS} FROM budget_versions ORDER BY version DESC LIMIT 1"), &[])?
                .as_ref()
                .map(row_to_version)
                .transpose()?
            else {
                return Ok(None);
            };
            let nodes = nodes_of(c, v.version)?;
            Ok(Some((v, nodes)))
        })
    }
}

fn nodes_of(c: &Conn, version: i64) -> DbResult<Vec<NodeRow>> {
    c.rows("SELECT path, share, effective_share, is_leaf FROM budget_nodes WHERE version = ? ORDER BY path", params![version])?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .collect()
}

const VERSION_COLUMNS: &str = "version, synced_at, author, source, toml, changes";

/// One node of a budget version: (path, share, effective share, is_leaf).
pub type NodeRow = (String, f64, f64, bool);

fn row_to_version(r: &Row) -> DbResult<BudgetVersion> {
    Ok(BudgetVersion { version: r.get(0)?, synced_at: r.get(1)?, author: r.get(2)?, source: r.get(3)?, toml: r.get(4)?, changes: r.get(5)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_in_force_through_a_window() {
        let mut l = Ledger::in_memory().unwrap();
        let tree = BudgetTree::parse(V1).unwrap();
        for (i, at) in [100, 200, 300, 400].into_iter().enumerate() {
            let toml = format!("{V1}# version {}\n", i + 1);
            l.sync_budget(&toml, &tree, "boss", "t", at).unwrap();
        }
        let versions = |current, since| l.earlier_versions_since(current, since).unwrap().iter().map(|v| v.version).collect::<Vec<_>>();
        // Version 4 is current; the window starts at 250: version 3 was
        // synced in it, version 2 was in force at its start.
        assert_eq!(versions(4, 250), vec![3, 2]);
        assert_eq!(versions(4, 0), vec![3, 2, 1]);
        assert_eq!(versions(4, 1000), vec![3], "none synced in the window: the one in force");
        assert_eq!(versions(1, 0), Vec::<i64>::new());
    }

    const V1: &str = "[budget]\nowners=[\"boss\"]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n";

    #[test]
    fn versions_are_appended_with_their_changes() {
        let mut l = Ledger::in_memory().unwrap();
        let t1 = BudgetTree::parse(V1).unwrap();
        assert_eq!(l.sync_budget(V1, &t1, "boss", "b.toml", 100).unwrap(), SyncOutcome::Written { version: 1, changes: vec!["+ a".into(), "+ b".into()] });
        assert_eq!(l.sync_budget(V1, &t1, "boss", "b.toml", 101).unwrap(), SyncOutcome::Unchanged { version: 1 });
        let v2 = V1.replace("[budget.b]\nshare=1", "[budget.b]\nshare=3");
        let t2 = BudgetTree::parse(&v2).unwrap();
        assert_eq!(l.sync_budget(&v2, &t2, "boss", "b.toml", 102).unwrap(), SyncOutcome::Written { version: 2, changes: vec!["~ b share 1 -> 3".into()] });
        let history = l.budget_history().unwrap();
        assert_eq!(history.iter().map(|v| v.version).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!(l.current_budget_version().unwrap(), Some(2));
        let nodes = l.budget_nodes(2).unwrap();
        assert_eq!(nodes.len(), 3);
        assert!((nodes.iter().find(|n| n.0 == "b").unwrap().2 - 0.75).abs() < 1e-12);
        // History cannot be rewritten, even with SQL.
        let e = l.execute_raw("UPDATE budget_versions SET author = 'mallory'").unwrap_err();
        assert!(e.to_string().contains("append-only"), "{e}");
        assert!(l.execute_raw("DELETE FROM budget_nodes").is_err());
    }

    #[test]
    fn a_refused_sync_writes_nothing_and_sees_the_version_it_replaces() {
        let mut l = Ledger::in_memory().unwrap();
        l.sync_budget(V1, &BudgetTree::parse(V1).unwrap(), "boss", "b.toml", 100).unwrap();
        let v2 = V1.replace("[budget.b]\nshare=1", "[budget.b]\nshare=3");
        let t2 = BudgetTree::parse(&v2).unwrap();
        let mut seen = None;
        let e = l
            .sync_budget_authorized(&v2, &t2, "eve", "b.toml", 101, |current| {
                seen = current.map(|c| (c.version, c.tree.is_ok()));
                Err("eve may not".into())
            })
            .unwrap_err();
        assert_eq!(e.to_string(), "eve may not");
        assert_eq!(seen, Some((1, true)));
        assert_eq!(l.current_budget_version().unwrap(), Some(1));
        assert_eq!(l.budget_nodes(2).unwrap().len(), 0);
    }
}
