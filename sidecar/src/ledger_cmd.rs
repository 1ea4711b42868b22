//! `allot ledger check|recover`: the ledger file's health, and starting
//! over from a damaged one without losing it.
//!
//! Recovery never deletes: the bad file and its `-wal` and `-shm` are renamed
//! aside (`ledger.db.corrupt-20261129T100000Z`, `...-wal`, `...-shm`, still a
//! set SQLite can open), a new ledger is created in their place with the old
//! file's owner, and the budget the old file still holds, if it can be read,
//! is synced into it.

use std::path::{Path, PathBuf};

use allot_ledger::Location;

use allot_ledger::health::{self, Problem};
use allot_ledger::{BudgetVersion, Ledger};
use anyhow::{anyhow, bail, Context};

use crate::identity::Invocation;

#[derive(clap::Subcommand)]
pub enum LedgerCommand {
    /// Check the ledger with SQLite's integrity check; exits 1 on problems.
    Check,
    /// Move a damaged ledger aside (never deleted) and start a new one,
    /// re-syncing the budget the old one holds if it can still be read.
    Recover {
        /// Also move a healthy ledger aside and start over.
        #[arg(long)]
        force: bool,
    },
    /// Make the runs, contracts, events and usage written before clusters
    /// were named (a ledger of one cluster, allot's schema 3 or older) the
    /// named cluster's: on a server ledger that several clusters share, the
    /// cluster that wrote them claims them (a file ledger's plugins do it
    /// themselves).
    Adopt {
        /// The cluster that wrote them (its slurm.conf ClusterName).
        #[arg(long, value_name = "NAME")]
        cluster: String,
    },
}

pub fn run(cmd: LedgerCommand, inv: &Invocation, now: i64) -> anyhow::Result<()> {
    match cmd {
        LedgerCommand::Check => match &inv.ledger {
            Location::File(path) => check(path),
            server => check_server(server),
        },
        LedgerCommand::Recover { force } => recover(inv, force, now),
        LedgerCommand::Adopt { cluster } => adopt(inv, &cluster),
    }
}

/// `allot ledger adopt --cluster NAME`.
fn adopt(inv: &Invocation, cluster: &str) -> anyhow::Result<()> {
    inv.require_admin("give the ledger's unnamed rows to a cluster")?;
    let mut l = allot_ledger::Ledger::connect(&inv.ledger, true)?.for_cluster(Some(&cluster.to_lowercase()))?;
    let unnamed = l.unclustered_rows()?;
    if unnamed == 0 {
        println!("{}: no rows without a cluster: nothing to adopt", inv.ledger);
        return Ok(());
    }
    let adopted = l.adopt_unclustered()?;
    println!("{}: {adopted} rows written before clusters were named are now cluster {}'s", inv.ledger, cluster.to_lowercase());
    Ok(())
}

/// What is wrong with the ledger at `path`, and what to do about it.
pub fn explain(problem: &Problem, path: &Path) -> String {
    let what = problem.describe(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "ledger.db".into());
    match problem {
        p if p.needs_recovery() => format!(
            "{what}; the plugins keep scheduling on the last good budget and keep their runs in memory, \
             and write them back once a good ledger is in place.\n\
             To recover: `allot ledger recover` moves the bad file (and its -wal and -shm) aside to {name}.corrupt-<UTC time>, \
             creates a new ledger, and re-syncs the budget if the old file still holds a readable one; \
             if it says it could not, then run `allot sync <budget file>`."
        ),
        Problem::Locked(_) => {
            format!("{what}; try again in a moment. If it stays locked, `fuser -v {p} {p}-wal` shows which process holds it.", p = path.display())
        }
        Problem::Full(_) => format!(
            "{what}; nothing was written and the ledger is as it was. Free space on that filesystem (`df -h {dir}`) and run the command again; \
             the plugins keep scheduling, keep their runs in memory, and write them once there is room.",
            dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).display()
        ),
        Problem::Missing => format!("{what}; sync a budget first (`allot sync <budget file>`)"),
        _ => what,
    }
}

/// `allot ledger check` of a server ledger: it answers, its schema is this
/// allot's, and the server's `CHECK TABLE` finds nothing wrong.
fn check_server(ledger: &Location) -> anyhow::Result<()> {
    let l = allot_ledger::Ledger::connect_read_only(ledger)?;
    let problems = l.check()?;
    if !problems.is_empty() {
        bail!("the ledger {ledger} has problems (the server's CHECK TABLE):\n  {}\nrepair them with the server's own tools (mariadb-check --repair) or restore its backup", problems.join("\n  "));
    }
    let budget = match l.current_budget_version()? {
        Some(v) => format!("budget version {v}"),
        None => "no budget synced yet".to_owned(),
    };
    println!("the ledger {ledger} is fine (server ledger, schema {}; every table checked; {budget})", allot_ledger::SCHEMA_VERSION);
    Ok(())
}

/// `allot ledger check`.
fn check(path: &Path) -> anyhow::Result<()> {
    match health::diagnose(path) {
        Ok(h) => {
            let budget = match h.budget_version {
                Some(v) => format!("budget version {v}"),
                None => "no budget synced yet".to_owned(),
            };
            println!("ledger {}: ok (integrity check passed; {budget})", path.display());
            Ok(())
        }
        Err(problem) => Err(anyhow!(explain(&problem, path))),
    }
}

/// `name` with a suffix, beside it: `/var/lib/allot/ledger.db` + `-wal`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `20261129T100000Z`.
fn stamp(now: i64) -> String {
    crate::format_time(now).replace(['-', ':'], "")
}

/// A free name `LEDGER.KIND-STAMP` (with `-2`, `-3`, ... if taken), for the
/// file and its `-wal` and `-shm` alike.
fn aside_name(path: &Path, kind: &str, now: i64) -> PathBuf {
    let base = with_suffix(path, &format!(".{kind}-{}", stamp(now)));
    let taken = |p: &Path| ["", "-wal", "-shm"].iter().any(|s| with_suffix(p, s).exists());
    if !taken(&base) {
        return base;
    }
    (2..).map(|n| with_suffix(&base, &format!("-{n}"))).find(|p| !taken(p)).expect("some name is free")
}

/// The current budget of the ledger moved aside to `aside`, read from a
/// private copy so that the aside files keep their bytes.
fn salvage(aside: &Path) -> Result<Option<BudgetVersion>, String> {
    let dir = aside.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = tempfile::tempdir_in(dir).or_else(|_| tempfile::tempdir()).map_err(|e| format!("cannot make a scratch directory: {e}"))?;
    let copy = tmp.path().join("old.db");
    std::fs::copy(aside, &copy).map_err(|e| format!("cannot copy it: {e}"))?;
    let wal = with_suffix(aside, "-wal");
    if wal.exists() {
        std::fs::copy(&wal, with_suffix(&copy, "-wal")).map_err(|e| format!("cannot copy its -wal: {e}"))?;
    }
    let read = || -> allot_ledger::Result<Option<BudgetVersion>> { Ledger::open_read_only(&copy)?.current_budget() };
    read().map_err(|e| match health::classify(&e) {
        Some(p) => p.to_string(),
        None => e.to_string(),
    })
}

/// `allot ledger recover [--force]`.
fn recover(inv: &Invocation, force: bool, now: i64) -> anyhow::Result<()> {
    inv.require_admin("recover the ledger")?;
    let Some(path) = inv.ledger.file() else {
        bail!(
            "the ledger {} is on a database server: `allot ledger recover` moves SQLite files aside, which a server does not need; \
             use the server's own backup and repair (mariadb-check, mariadb-backup), or point LedgerUrl at a new empty database and `allot sync` the budget",
            inv.ledger
        )
    };
    let problem = match health::diagnose(path) {
        Err(Problem::Missing) => {
            bail!("there is no ledger at {}: nothing to recover; `allot sync <budget file>` creates one", path.display())
        }
        Ok(h) if !force => {
            let budget = h.budget_version.map(|v| format!("budget version {v}")).unwrap_or_else(|| "no budget synced yet".into());
            println!(
                "the ledger {} is fine (integrity check passed; {budget}): nothing to recover. \
                 `allot ledger recover --force` moves it aside and starts a new one anyway.",
                path.display()
            );
            return Ok(());
        }
        Err(p) if !p.needs_recovery() && !force => {
            bail!("{}\nthis is not damage that moving the file aside would fix; `allot ledger recover --force` does it anyway", explain(&p, path))
        }
        Ok(_) => None,
        Err(p) => Some(p),
    };
    if let Some(p) = &problem {
        println!("{}", p.describe(path));
    }
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let owner = {
        use std::os::unix::fs::MetadataExt;
        Some((meta.uid(), meta.gid()))
    };

    // Move the set aside: the database first, so that nothing opens a
    // database with a stranger's -wal in between.
    let aside = aside_name(path, if problem.is_some() { "corrupt" } else { "replaced" }, now);
    for suffix in ["", "-wal", "-shm"] {
        let from = with_suffix(path, suffix);
        if suffix.is_empty() || from.exists() {
            let to = with_suffix(&aside, suffix);
            std::fs::rename(&from, &to).with_context(|| format!("cannot move {} to {}", from.display(), to.display()))?;
            println!("moved {} to {}", from.display(), to.display());
        }
    }

    crate::sync::create_ledger_file(path, owner).with_context(|| format!("cannot create a new ledger at {}", path.display()))?;
    drop(Ledger::open(path)?);
    println!("created a new ledger at {}", path.display());

    let synced = match salvage(&aside) {
        Ok(Some(old)) => {
            let shown = format!("{} (version {} of {})", old.source, old.version, aside.display());
            match crate::sync::sync_text_from(&inv.ledger, &old.toml, &shown, &old.source, &inv.actor, now) {
                Ok(outcome) => {
                    let version = match outcome {
                        allot_ledger::SyncOutcome::Written { version, .. } | allot_ledger::SyncOutcome::Unchanged { version } => version,
                    };
                    println!(
                        "re-synced the old ledger's budget (version {}, synced {} by {} from {}) into the new ledger as version {version}",
                        old.version,
                        crate::format_time(old.synced_at),
                        old.author,
                        old.source
                    );
                    true
                }
                Err(e) => {
                    println!("the old ledger's budget (version {}) could not be synced into the new one:\n{e}", old.version);
                    false
                }
            }
        }
        Ok(None) => {
            println!("the old ledger holds no budget");
            false
        }
        Err(why) => {
            println!("no budget could be read from the old ledger ({why})");
            false
        }
    };
    if !synced {
        println!("the new ledger is empty: run `allot sync <budget file>` to give it a budget");
    }
    println!("the old history, runs and contracts stay in {}; the plugins follow the new file and write back the runs they kept in memory", aside.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_names() {
        assert_eq!(stamp(1_795_000_000), "20261118T110640Z");
        let dir = tempfile::tempdir().unwrap();
        let l = dir.path().join("ledger.db");
        let first = aside_name(&l, "corrupt", 0);
        assert_eq!(first.file_name().unwrap(), "ledger.db.corrupt-19700101T000000Z");
        std::fs::write(with_suffix(&first, "-wal"), b"").unwrap();
        assert_eq!(aside_name(&l, "corrupt", 0).file_name().unwrap(), "ledger.db.corrupt-19700101T000000Z-2");
    }
}
