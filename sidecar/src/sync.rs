//! `allot sync`: validate a budget file, check the actor may make its
//! changes, then write it as a new ledger version in one transaction.
//!
//! Nothing touches the ledger until the file is valid and every change is
//! permitted: a bad file or a refused change leaves it byte for byte as it was.

use std::path::Path;

use allot::budget::{BudgetErrors, BudgetTree};
use allot_ledger::{Ledger, SyncOutcome};

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

/// The current version's tree, read without writing anything.
pub fn current_tree(ledger: &Path) -> Result<Option<BudgetTree>, SyncError> {
    if !ledger.exists() {
        return Ok(None);
    }
    let l = Ledger::open_read_only(ledger)?;
    match l.current_budget()? {
        None => Ok(None),
        Some(v) => v.tree().map(Some).map_err(|e| {
            SyncError::Refused(format!(
                "the ledger's current budget (version {}) no longer validates:\n{}\nan admin must sync a corrected file",
                v.version,
                e.render("ledger")
            ))
        }),
    }
}

/// Checks that `actor` may turn `current` into `new`.
pub fn authorize(new: &BudgetTree, current: Option<&BudgetTree>, actor: &Actor) -> Result<(), SyncError> {
    if actor.is_admin {
        return Ok(());
    }
    let Some(current) = current else {
        return Err(SyncError::Refused(format!(
            "{} may not sync the first budget: the first version must come from an admin (root or the Slurm user)",
            actor.name
        )));
    };
    new.authorize(current, &actor.name, false).map_err(|refusals| {
        let lines: Vec<String> = refusals.iter().map(|r| format!("  {r}")).collect();
        SyncError::Refused(format!("{} may not make these changes:\n{}", actor.name, lines.join("\n")))
    })
}

/// Validates, authorizes and writes `text` as a new version.
pub fn sync_text(ledger: &Path, text: &str, source: &str, actor: &Actor, now: i64) -> Result<SyncOutcome, SyncError> {
    let tree = validate(text, source)?;
    let current = current_tree(ledger)?;
    authorize(&tree, current.as_ref(), actor)?;
    if let Some(parent) = ledger.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| SyncError::Refused(format!("cannot create {}: {e}", parent.display())))?;
    }
    let mut l = Ledger::open(ledger)?;
    Ok(l.sync_budget(text, &tree, &actor.name, source, now)?)
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
