//! `allot sync`: validate a budget file, check the actor may make its
//! changes, then write it as a new ledger version in one transaction.
//!
//! Nothing touches the ledger until the file is valid and every change is
//! permitted: a bad file or a refused change leaves it byte for byte as it was.

use allot_ledger::Location;
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
    /// The ledger file is damaged or locked: what is wrong and what to do.
    #[error("{0}")]
    Unhealthy(String),
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
        format!("the ledger's current budget (version {}) no longer validates:\n{}\nan admin must sync a corrected file", current.version, e.render("ledger"))
    })?;
    new.authorize(old, &actor.name).map_err(|refusals| {
        let lines: Vec<String> = refusals.iter().map(|r| format!("  {r}")).collect();
        format!("{} may not make these changes:\n{}", actor.name, lines.join("\n"))
    })
}

/// Checks, without writing anything, that `actor` may sync `new` over the
/// ledger's current version (`allot sync --check`).
pub fn check(ledger: &Location, new: &BudgetTree, actor: &Actor) -> Result<(), SyncError> {
    let current = match Ledger::connect_read_only(ledger) {
        Ok(l) => l.current_budget()?,
        Err(LedgerError::Missing { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let parsed = current.as_ref().map(|v| (v.version, v.tree()));
    authorize(new, parsed.as_ref().map(|(version, tree)| Replaced { version: *version, tree: tree.as_ref() }), actor).map_err(SyncError::Refused)
}

/// Validates, authorizes and writes `text` as a new version. The permission
/// check runs inside the write transaction, against the very version the
/// new one replaces.
pub fn sync_text(ledger: &Location, text: &str, source: &str, actor: &Actor, now: i64) -> Result<SyncOutcome, SyncError> {
    sync_text_from(ledger, text, source, source, actor, now)
}

/// [`sync_text`], naming the file `shown` in messages and recording it in
/// the ledger as `recorded` (the absolute path `allot budget` edits later).
pub fn sync_text_from(ledger: &Location, text: &str, shown: &str, recorded: &str, actor: &Actor, now: i64) -> Result<SyncOutcome, SyncError> {
    let tree = validate(text, shown)?;
    if let Some(path) = ledger.file() {
        if let Err(problem) = allot_ledger::health::preflight(path) {
            return Err(SyncError::Unhealthy(crate::ledger_cmd::explain(&problem, path)));
        }
        if !path.exists() {
            // Refuse before creating anything.
            authorize(&tree, None, actor).map_err(SyncError::Refused)?;
            create_ledger_file(path, crate::identity::ledger_owner())
                .map_err(|e| SyncError::Refused(format!("cannot create the ledger {}: {e}", path.display())))?;
        }
    } else if let Err(LedgerError::Missing { .. }) = Ledger::connect_read_only(ledger) {
        // A server database without allot's schema: refuse before the
        // writer's connection creates it.
        authorize(&tree, None, actor).map_err(SyncError::Refused)?;
    }
    let mut l = Ledger::connect(ledger, true)?;
    match l.sync_budget_authorized(text, &tree, &actor.name, recorded, now, |current| authorize(&tree, current, actor)) {
        Err(LedgerError::Refused(why)) => Err(SyncError::Refused(why)),
        Err(e) => match allot_ledger::health::classify(&e).filter(allot_ledger::health::Problem::has_advice) {
            Some(problem) if ledger.file().is_some() => Err(SyncError::Unhealthy(crate::ledger_cmd::explain(&problem, ledger.file().expect("a file")))),
            Some(_) | None => Err(e.into()),
        },
        Ok(outcome) => Ok(outcome),
    }
}

/// Creates an empty ledger file at `path`, mode 0644 whatever the umask
/// (readable by all: the numbers are meant to be seen), and its missing
/// directories, mode 0755; the file and a directory created for it are
/// given to `owner` (uid, gid) if set. SQLite gives the ledger's `-wal` and
/// `-shm` files the database file's mode and owner.
pub fn create_ledger_file(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent)?;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(parent, Some(uid), Some(gid))?;
            }
        }
    }
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Prints what a sync did.
pub fn report(outcome: &SyncOutcome, ledger: &Location) {
    match outcome {
        SyncOutcome::Written { version, changes } => {
            println!("synced budget version {version} into {}", ledger);
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
