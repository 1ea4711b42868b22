//! The last good budget and usage, kept where slurmctld keeps its own state.
//!
//! If slurmctld starts while the ledger cannot be read (garbage in its
//! place, a fresh empty file after `allot ledger recover`, a disk that is
//! not mounted yet), the plugins must not accept jobs unchecked. So the
//! priority plugin writes, after every recompute it recorded in the ledger,
//! a small copy of what the other plugins decide from: the budget file's
//! text, its version, and each leaf's usage in the window. It lives in
//! slurm.conf's `StateSaveLocation` (which a backup controller shares), as
//! `allot-last-good.json`, written to a temporary file and renamed, so a
//! reader sees the old copy or the new one, never half of one.
//!
//! Contracts need no copy: they are the jobs' comments, in Slurm's own state.

use std::io::Write;
use std::path::{Path, PathBuf};

use allot::budget::BudgetTree;
use allot_ledger::{LeafUsage, UsageSnapshot};
use serde::{Deserialize, Serialize};

/// The file's name in `StateSaveLocation`.
pub const FILE_NAME: &str = "allot-last-good.json";

/// Bumped when the layout changes; a copy of another format is not used.
const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastGood {
    pub format: u32,
    /// When it was written (Unix seconds).
    pub written_at: i64,
    /// The ledger it was read from.
    pub ledger: String,
    pub budget_version: i64,
    /// The budget file's text, as `allot sync` stored it.
    pub budget_toml: String,
    pub usage: Option<UsageCopy>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageCopy {
    pub computed_at: i64,
    pub budget_version: i64,
    pub capacity_gpus: u32,
    /// (leaf path, charged GPU-seconds, unallocated GPU-seconds).
    pub leaves: Vec<(String, i64, i64)>,
    /// Charged GPUs running, leaf by leaf as `leaves` (none in a copy
    /// written before the budget's `lookahead` existed: 0 each).
    #[serde(default)]
    pub running: Vec<i64>,
}

impl UsageCopy {
    pub fn of(s: &UsageSnapshot) -> UsageCopy {
        UsageCopy {
            computed_at: s.computed_at,
            budget_version: s.budget_version,
            capacity_gpus: s.capacity_gpus,
            leaves: s.leaves.iter().map(|l| (l.leaf.clone(), l.charged, l.unallocated)).collect(),
            running: s.leaves.iter().map(|l| l.running).collect(),
        }
    }
    pub fn snapshot(&self) -> UsageSnapshot {
        UsageSnapshot {
            computed_at: self.computed_at,
            budget_version: self.budget_version,
            capacity_gpus: self.capacity_gpus,
            leaves: self
                .leaves
                .iter()
                .enumerate()
                .map(|(i, (leaf, charged, unallocated))| LeafUsage {
                    leaf: leaf.clone(),
                    charged: *charged,
                    unallocated: *unallocated,
                    running: self.running.get(i).copied().unwrap_or(0),
                })
                .collect(),
        }
    }
}

/// The path of the copy in a `StateSaveLocation`.
pub fn path_in(state_save_location: &Path) -> PathBuf {
    state_save_location.join(FILE_NAME)
}

impl LastGood {
    pub fn new(written_at: i64, ledger: &allot_ledger::Location, budget_version: i64, budget_toml: &str, usage: Option<&UsageSnapshot>) -> LastGood {
        LastGood {
            format: FORMAT,
            written_at,
            ledger: ledger.to_string(),
            budget_version,
            budget_toml: budget_toml.to_owned(),
            usage: usage.map(UsageCopy::of),
        }
    }

    /// Reads the copy at `path`: `Ok(None)` if there is none; an error that
    /// names the file if it cannot be used.
    pub fn read(path: &Path) -> Result<Option<(LastGood, BudgetTree)>, String> {
        let Some(copy) = read_whole::<LastGood>(path, "a copy")? else { return Ok(None) };
        if copy.format != FORMAT {
            return Err(format!("{} is of format {}, this allot reads format {FORMAT}", path.display(), copy.format));
        }
        let tree = BudgetTree::parse(&copy.budget_toml).map_err(|e| format!("the budget in {} does not validate: {e}", path.display()))?;
        Ok(Some((copy, tree)))
    }

    /// Writes the copy to `path`: a temporary file beside it, flushed to
    /// disk, then renamed over it.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let json = serde_json::to_vec(self).map_err(|e| format!("cannot encode the last good copy: {e}"))?;
        write_whole(path, &json)
    }
}

/// Reads the JSON file at `path`: `Ok(None)` if there is none; an error
/// that names the file and says it is not `what` allot can read.
pub(crate) fn read_whole<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<Option<T>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| format!("{} is not {what} allot can read: {e}", path.display()))
}

/// Writes `bytes` to `path` whole or not at all: a temporary file beside
/// it, flushed to disk, then renamed over it (a reader sees the old file or
/// the new one, never half of one).
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    tmp.write_all(bytes).and_then(|_| tmp.as_file().sync_all()).map_err(|e| format!("cannot write {}: {e}", tmp.path().display()))?;
    tmp.persist(path).map_err(|e| format!("cannot rename {} to {}: {}", e.file.path().display(), path.display(), e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: &str = "[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n";

    #[test]
    fn round_trips_and_refuses_what_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        assert_eq!(LastGood::read(&path).unwrap(), None, "no copy yet");
        let usage = UsageSnapshot {
            computed_at: 7,
            budget_version: 3,
            capacity_gpus: 8,
            leaves: vec![LeafUsage { leaf: "a".into(), charged: 100, unallocated: 5, running: 2 }],
        };
        let copy = LastGood::new(9, &allot_ledger::Location::File("/var/lib/allot/ledger.db".into()), 3, BUDGET, Some(&usage));
        copy.write(&path).unwrap();
        let (back, tree) = LastGood::read(&path).unwrap().unwrap();
        assert_eq!(back, copy);
        assert_eq!(back.usage.unwrap().snapshot(), usage);
        assert_eq!(tree.leaves.len(), 2);
        // A copy written before `running` was kept still reads: none running.
        let mut older = serde_json::to_value(&copy).unwrap();
        older["usage"].as_object_mut().unwrap().remove("running").unwrap();
        std::fs::write(&path, serde_json::to_vec(&older).unwrap()).unwrap();
        let read = LastGood::read(&path).unwrap().unwrap().0.usage.unwrap().snapshot();
        assert_eq!((read.leaves[0].charged, read.leaves[0].running), (100, 0));

        std::fs::write(&path, b"{ not json").unwrap();
        let e = LastGood::read(&path).unwrap_err();
        assert!(e.contains(&path.display().to_string()) && e.contains("not a copy"), "{e}");
        let mut other = copy.clone();
        other.format = 99;
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(LastGood::read(&path).unwrap_err().contains("format 99"));
        other.format = FORMAT;
        other.budget_toml = "[budget]\n[budget.a]\nshare=-1\n".into();
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(LastGood::read(&path).unwrap_err().contains("does not validate"));
    }
}
