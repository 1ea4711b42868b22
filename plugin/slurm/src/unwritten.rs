//! Run updates the ledger has not taken yet, kept where slurmctld keeps its
//! own state.
//!
//! While the ledger cannot be written (a full disk, a file that is not a
//! ledger any more, a server that does not answer), the priority plugin
//! keeps every run update in memory and writes them once it can. A
//! slurmctld that restarts meanwhile (an on-call engineer, a crash, the
//! backup controller taking over) would lose the runs of jobs Slurm has
//! already forgotten (`MinJobAge`): its job list cannot tell them again. So
//! after a failed write the plugin also keeps the updates in
//! `allot-unwritten.json` in slurm.conf's `StateSaveLocation` (which a backup
//! controller shares), written to a temporary file and renamed, takes them
//! back when it starts, and removes the file once they are in the ledger.
//! Taking back an update the ledger already has changes nothing: a run is
//! keyed by its job and start, and ending an ended run changes nothing.

use std::path::{Path, PathBuf};

use allot_ledger::{RunRow, RunUpdate};
use serde::{Deserialize, Serialize};

/// The file's name in `StateSaveLocation`.
pub const FILE_NAME: &str = "allot-unwritten.json";

/// Bumped when the layout changes; a file of another format is set aside, not read.
const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unwritten {
    pub format: u32,
    /// When it was written (Unix seconds).
    pub written_at: i64,
    /// The ledger the updates were meant for.
    pub ledger: String,
    pub updates: Vec<KeptUpdate>,
}

/// A [`RunUpdate`], as the file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum KeptUpdate {
    Open {
        job_id: u32,
        run_start: i64,
        run_end: Option<i64>,
        leaf: Option<String>,
        account: Option<String>,
        user: Option<String>,
        gpus: u32,
        allocated: bool,
        end_reason: Option<String>,
    },
    Close {
        job_id: u32,
        run_start: i64,
        run_end: i64,
        reason: String,
    },
}

impl From<&RunUpdate> for KeptUpdate {
    fn from(u: &RunUpdate) -> KeptUpdate {
        match u.clone() {
            RunUpdate::Open(RunRow { job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason }) => {
                KeptUpdate::Open { job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason }
            }
            RunUpdate::Close { job_id, run_start, run_end, reason } => KeptUpdate::Close { job_id, run_start, run_end, reason },
        }
    }
}

impl From<KeptUpdate> for RunUpdate {
    fn from(u: KeptUpdate) -> RunUpdate {
        match u {
            KeptUpdate::Open { job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason } => {
                RunUpdate::Open(RunRow { job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason })
            }
            KeptUpdate::Close { job_id, run_start, run_end, reason } => RunUpdate::Close { job_id, run_start, run_end, reason },
        }
    }
}

/// The path of the file in a `StateSaveLocation`.
pub fn path_in(state_save_location: &Path) -> PathBuf {
    state_save_location.join(FILE_NAME)
}

impl Unwritten {
    pub fn new(written_at: i64, ledger: &allot_ledger::Location, updates: &[RunUpdate]) -> Unwritten {
        Unwritten { format: FORMAT, written_at, ledger: ledger.to_string(), updates: updates.iter().map(KeptUpdate::from).collect() }
    }

    /// The updates, in the order they were made.
    pub fn run_updates(self) -> Vec<RunUpdate> {
        self.updates.into_iter().map(RunUpdate::from).collect()
    }

    /// Reads the file at `path`: `Ok(None)` if there is none; an error that
    /// names the file if it cannot be used.
    pub fn read(path: &Path) -> Result<Option<Unwritten>, String> {
        let Some(kept) = crate::last_good::read_whole::<Unwritten>(path, "a file of run updates")? else { return Ok(None) };
        if kept.format != FORMAT {
            return Err(format!("{} is of format {}, this allot reads format {FORMAT}", path.display(), kept.format));
        }
        Ok(Some(kept))
    }

    /// Writes the file to `path`, whole or not at all.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let json = serde_json::to_vec(self).map_err(|e| format!("cannot encode the run updates: {e}"))?;
        crate::last_good::write_whole(path, &json)
    }

    /// Removes the file at `path` (none is fine).
    pub fn remove(path: &Path) -> Result<(), String> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("cannot remove {}: {e}", path.display())),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        assert_eq!(Unwritten::read(&path).unwrap(), None, "no file yet");
        Unwritten::remove(&path).unwrap();
        let updates = vec![
            RunUpdate::Open(RunRow {
                job_id: 7,
                run_start: 100,
                run_end: None,
                leaf: Some("lab/a".into()),
                account: Some("a".into()),
                user: Some("alice".into()),
                gpus: 2,
                allocated: true,
                end_reason: None,
            }),
            RunUpdate::Close { job_id: 7, run_start: 100, run_end: 160, reason: "finished".into() },
            RunUpdate::Open(RunRow {
                job_id: 8,
                run_start: 90,
                run_end: Some(95),
                leaf: None,
                account: None,
                user: None,
                gpus: 0,
                allocated: false,
                end_reason: Some("requeued".into()),
            }),
        ];
        let kept = Unwritten::new(200, &allot_ledger::Location::File("/var/lib/allot/ledger.db".into()), &updates);
        kept.write(&path).unwrap();
        let back = Unwritten::read(&path).unwrap().unwrap();
        assert_eq!(back, kept);
        assert_eq!(back.run_updates(), updates);
        Unwritten::remove(&path).unwrap();
        assert!(!path.exists());

        std::fs::write(&path, b"{ not json").unwrap();
        let e = Unwritten::read(&path).unwrap_err();
        assert!(e.contains(&path.display().to_string()) && e.contains("not a file of run updates"), "{e}");
        let mut other = kept.clone();
        other.format = 99;
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(Unwritten::read(&path).unwrap_err().contains("format 99"));
    }
}
