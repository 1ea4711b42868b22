//! `allot sync`: validate a budget file, check the actor may make its
//! changes, then write it as a new ledger version in one transaction.
//!
//! Nothing touches the ledger until the file is valid and every change is
//! permitted: a bad file or a refused change leaves it byte for byte as it was.

use std::path::Path;

use allot::budget::{BudgetErrors, BudgetTree};
use allot_ledger::{Ledger, LedgerError, Replaced, SyncOutcome};

use crate::identity::Actor;

/// Why a sync was refused.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("{rendered}{count} error(s); the ledger was not changed")]
    Invalid { rendered: String, count: usize, errors: BudgetErrors },
    #[error("{0}\nthe ledger was not changed")]
    Refused(String),
    #[error(transparent)]
    Ledger(#[from] allot_ledger::LedgerError),
}

/// Parses `text` (read from `source`, named in messages) or returns every error.
pub fn validate(text: &str, source: &str) -> Result<BudgetTree, SyncError> {
    BudgetTree::parse(text).map_err(|errors| SyncError::Invalid { rendered: errors.render(source), count: errors.0.len(), errors })
}

/// Why `actor` may not turn `current` (None: no budget yet) into `new`, if so.
pub fn authorize(new: &BudgetTree, current: Option<Replaced<'_>>, actor: &Actor) -> Result<(), String> {
    if actor.is_admin {
        return Ok(());
    }
    let Some(current) = current else {
        return Err(format!("{} may not sync the first budget: the first version must come from an admin (root or the Slurm user)", actor.name));
    };
    let old = current.tree.map_err(|e| {
        format!(
            "the ledger's current budget (version {}) no longer validates:\n{}\nan admin must sync a corrected file",
            current.version,
            e.render("ledger")
        )
    })?;
    new.authorize(old, &actor.name).map_err(|refusals| {
        let lines: Vec<String> = refusals.iter().map(|r| format!("  {r}")).collect();
        format!("{} may not make these changes:\n{}", actor.name, lines.join("\n"))
    })
}

/// Checks, without writing anything, that `actor` may sync `new` over the
/// ledger's current version (`allot sync --check`).
pub fn check(ledger: &Path, new: &BudgetTree, actor: &Actor) -> Result<(), SyncError> {
    let current = if ledger.exists() { Ledger::open_read_only(ledger)?.current_budget()? } else { None };
    let parsed = current.as_ref().map(|v| (v.version, v.tree()));
    authorize(new, parsed.as_ref().map(|(version, tree)| Replaced { version: *version, tree: tree.as_ref() }), actor).map_err(SyncError::Refused)
}

/// Validates, authorizes and writes `text` as a new version. The permission
/// check runs inside the write transaction, against the very version the
/// new one replaces.
pub fn sync_text(ledger: &Path, text: &str, source: &str, actor: &Actor, now: i64) -> Result<SyncOutcome, SyncError> {
    let tree = validate(text, source)?;
    if !ledger.exists() {
        // Refuse before creating anything.
        authorize(&tree, None, actor).map_err(SyncError::Refused)?;
        if let Some(parent) = ledger.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| SyncError::Refused(format!("cannot create {}: {e}", parent.display())))?;
        }
    }
    let mut l = Ledger::open(ledger)?;
    match l.sync_budget_authorized(text, &tree, &actor.name, source, now, |current| authorize(&tree, current, actor)) {
        Err(LedgerError::Refused(why)) => Err(SyncError::Refused(why)),
        other => Ok(other?),
    }
}

/// Prints what a sync did.
pub fn report(outcome: &SyncOutcome, ledger: &Path) {
    match outcome {
        SyncOutcome::Written { version, changes } => {
            println!("synced budget version {version} into {}", ledger.display());
            for c in changes {
                println!("  {c}");
            }
        }
        SyncOutcome::Unchanged { version } => println!("unchanged: the file is budget version {version} already"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "[budget]\nowners=[\"boss\"]\n[budget.a]\nshare=1\nowners=[\"alice\"]\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n";

    fn actor(name: &str, is_admin: bool) -> Actor {
        Actor { name: name.into(), is_admin }
    }

    #[test]
    fn permissions_are_checked_against_the_version_replaced() {
        let old = BudgetTree::parse(OLD).unwrap();
        let new = BudgetTree::parse(&OLD.replace("[budget.b]\nshare=1", "[budget.b]\nshare=2")).unwrap();
        let current = Some(Replaced { version: 3, tree: Ok(&old) });
        let refused = authorize(&new, current, &actor("alice", false)).unwrap_err();
        assert!(refused.contains("alice may not make these changes") && refused.contains("share"), "{refused}");
        assert!(authorize(&new, current, &actor("boss", false)).is_ok());
        assert!(authorize(&new, None, &actor("boss", false)).unwrap_err().contains("first budget"));
        assert!(authorize(&new, None, &actor("root", true)).is_ok());
    }

    #[test]
    fn only_an_admin_replaces_a_current_version_that_no_longer_validates() {
        let errors = BudgetTree::parse("[budget]\n[budget.a]\nshare=0\n").unwrap_err();
        let new = BudgetTree::parse(OLD).unwrap();
        let current = Some(Replaced { version: 7, tree: Err(&errors) });
        let refused = authorize(&new, current, &actor("boss", false)).unwrap_err();
        assert!(refused.contains("version 7) no longer validates") && refused.contains("an admin must sync"), "{refused}");
        assert!(authorize(&new, current, &actor("root", true)).is_ok(), "the admin's corrected file goes in");
    }
}
