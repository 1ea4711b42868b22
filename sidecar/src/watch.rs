//! `allot watch FILE`: re-sync the budget file whenever it changes.
//!
//! Meant to run as a service (see conf/allot-watch.service), as root or the
//! Slurm user: it syncs with admin rights, so the watched file must be
//! writable by admins only. Managers edit through `allot budget` instead.
//! A bad edit is reported and skipped; the ledger keeps the last good
//! version, and the watcher keeps watching.

use allot_ledger::Location;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context;
use notify::{RecursiveMode, Watcher};

use crate::identity::Actor;
use crate::sync::{report, sync_text};

/// Editors save in bursts (write, rename, chmod): wait for quiet first.
const SETTLE: Duration = Duration::from_millis(300);

/// Watches `file` and syncs it into `ledger` on behalf of `actor`.
pub fn run(ledger: &Location, file: &Path, actor: &Actor) -> anyhow::Result<()> {
    let file = std::path::absolute(file).with_context(|| format!("cannot resolve {}", file.display()))?;
    // Watch the directory, not the file: editors replace files by renaming,
    // which would orphan a watch on the old inode.
    let dir: PathBuf = file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let actor = actor.clone();
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let _ = tx.send(event);
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive).with_context(|| format!("cannot watch {}", dir.display()))?;
    eprintln!("allot watch: watching {} for changes (ledger {})", file.display(), ledger);
    sync_once(ledger, &file, &actor);
    loop {
        let event = rx.recv().context("the file watcher stopped")?;
        if !touches(&event, &file) {
            continue;
        }
        // Wait until the file has been quiet for SETTLE. Only events on the
        // file itself count: the directory may be busy with other files (the
        // ledger's own, for one).
        let mut quiet_from = std::time::Instant::now();
        loop {
            let left = SETTLE.saturating_sub(quiet_from.elapsed());
            match rx.recv_timeout(left) {
                Ok(more) if touches(&more, &file) => quiet_from = std::time::Instant::now(),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => anyhow::bail!("the file watcher stopped"),
            }
        }
        sync_once(ledger, &file, &actor);
    }
}

fn touches(event: &notify::Result<notify::Event>, file: &Path) -> bool {
    match event {
        Ok(e) => e.paths.iter().any(|p| p == file) && !matches!(e.kind, notify::EventKind::Access(_)),
        Err(e) => {
            eprintln!("allot watch: watcher error: {e}");
            false
        }
    }
}

fn sync_once(ledger: &Location, file: &Path, actor: &Actor) {
    let name = file.display().to_string();
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("allot watch: cannot read {name}: {e}; keeping the ledger's current version");
            return;
        }
    };
    match sync_text(ledger, &text, &name, actor, crate::now()) {
        Ok(outcome) => report(&outcome, ledger),
        Err(e) => eprintln!("allot watch: {name} not synced:\n{e}"),
    }
}
