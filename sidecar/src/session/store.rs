//! A session's directory: `STORE/NAME`, private to its owner (mode 0700),
//! holding the session's settings (`session.json`), its job's log, the
//! socket `allot session attach` connects to, and its checkpoint (`image/`).
//!
//! Everything here is checked before use: the directory, and every file of a
//! checkpoint, must belong to the user who runs the command and be writable
//! by nobody else, so that no other user can read a session or hand it an
//! image to restore.
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// What `allot session start` decided; the job's side reads it at every run
/// (first start and each restore after a requeue).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    pub name: String,
    /// The session's program and its arguments.
    pub command: Vec<String>,
    /// Where the program starts (the directory `start` was run in).
    pub cwd: PathBuf,
    /// The criu and dtach programs the job runs.
    pub criu: PathBuf,
    pub dtach: PathBuf,
    pub min_runtime: String,
    /// The options for sbatch it was started with (`resume` submits again).
    #[serde(default)]
    pub sbatch: Vec<String>,
    /// The batch job, once submitted.
    pub job: Option<u32>,
}

/// The record of the last checkpoint, written after criu's dump succeeded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Checkpoint {
    /// Unix seconds.
    pub at: i64,
    pub node: String,
    /// The session's first process (the restore makes it again with this PID).
    pub pid: i32,
    pub bytes: u64,
    pub dump_seconds: f64,
}

pub const SETTINGS: &str = "session.json";
pub const IMAGE: &str = "image";
/// Written last into a checkpoint's directory: without it the directory is
/// an interrupted dump and is never restored.
pub const CHECKPOINT: &str = "checkpoint.json";
pub const SOCKET: &str = "sock";
pub const LOG: &str = "session.log";
/// `allot session stop` leaves it before cancelling the job, so that the
/// job's side ends the session instead of checkpointing it.
pub const STOPPING: &str = "stopping";

/// A session name: letters, digits, `.`, `_`, `-`; it names a directory and
/// the Slurm job (`allot-session:NAME`).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty() && name.len() <= 64 && !name.starts_with('.') && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        bail!("session name {name:?}: use 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.')")
    }
}

/// The default store: `$HOME/.allot/sessions` (a home directory is what a
/// cluster's login and compute nodes share).
pub fn default_store() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".allot/sessions"))
}

/// Creates `dir` (and its parents) private to the caller, or checks that it is.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // A directory made by `recursive` over an umask could be wider.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).with_context(|| format!("cannot chmod 700 {}", dir.display()))?;
    }
    check_private(dir, true)
}

/// A session directory must also be where nobody else can replace it: every
/// directory above it (as written and as resolved) owned by root or the
/// caller, and writable by nobody else unless sticky (as /tmp), as sshd's
/// StrictModes asks of a home directory. Otherwise another user could swap
/// the session for a link to their own between the checks and criu's read.
pub fn check_ancestors(dir: &Path) -> Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    let absolute = if dir.is_absolute() { dir.to_path_buf() } else { std::env::current_dir()?.join(dir) };
    let resolved = fs::canonicalize(&absolute).with_context(|| format!("cannot resolve {}", absolute.display()))?;
    for path in [&absolute, &resolved] {
        for ancestor in path.ancestors().skip(1) {
            let meta = fs::metadata(ancestor).with_context(|| format!("cannot read {}", ancestor.display()))?;
            let mode = meta.mode();
            if meta.uid() != 0 && meta.uid() != uid {
                bail!(
                    "{} belongs to uid {}: a session must sit in directories only you and root own ({} is under it)",
                    ancestor.display(),
                    meta.uid(),
                    dir.display()
                );
            }
            if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                bail!(
                    "{} has mode {:o}: others may replace what is in it, so a session under it is not private (choose a --store whose directories only you can write, or make it sticky, chmod +t)",
                    ancestor.display(),
                    mode & 0o7777
                );
            }
        }
    }
    Ok(())
}

/// `path` must be the caller's own, not a symbolic link, and (for a
/// directory) readable by nobody else; a file must be writable by nobody else.
pub fn check_private(path: &Path, is_dir: bool) -> Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    let meta = fs::symlink_metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.file_type().is_symlink() {
        bail!("{} is a symbolic link: a session's files must be its own, not links", path.display());
    }
    if is_dir != meta.is_dir() || (!is_dir && !meta.is_file()) {
        bail!("{} is not a {}", path.display(), if is_dir { "directory" } else { "regular file" });
    }
    if meta.uid() != uid {
        bail!("{} belongs to uid {}, not to you (uid {uid}): a session is used only by its owner", path.display(), meta.uid());
    }
    let mode = meta.mode() & 0o777;
    let wide = if is_dir { mode & 0o077 != 0 } else { mode & 0o022 != 0 };
    if wide {
        let fix = if is_dir { "chmod 700" } else { "chmod go-w" };
        bail!("{} has mode {mode:o}: a session must be private to its owner ({fix} it)", path.display());
    }
    Ok(())
}

pub fn read_settings(dir: &Path) -> Result<Settings> {
    let path = dir.join(SETTINGS);
    check_private(&path, false)?;
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a session's settings", path.display()))
}

pub fn write_settings(dir: &Path, s: &Settings) -> Result<()> {
    write_private(&dir.join(SETTINGS), &serde_json::to_string_pretty(s)?)
}

pub fn read_checkpoint(image: &Path) -> Option<Checkpoint> {
    let path = image.join(CHECKPOINT);
    check_private(&path, false).ok()?;
    serde_json::from_str(&fs::read_to_string(path).ok()?).ok()
}

/// Writes `text` into `path` (mode 0600 when new) through a temporary file
/// and a rename, so that a reader never sees half of it.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    crate::budget_cmd::write_atomically(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The bytes under `dir` (a checkpoint's size).
pub fn size_of(dir: &Path) -> u64 {
    fs::read_dir(dir).map(|entries| entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["nb", "train-2", "a.b_c"] {
            check_name(good).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "a b", "x;rm", &"n".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn a_directory_open_to_others_or_a_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        ensure_private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        let e = check_private(&dir, true).unwrap_err().to_string();
        assert!(e.contains("mode 750") && e.contains("chmod 700"), "{e}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = check_private(&link, true).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let file = dir.join("f");
        write_private(&file, "x").unwrap();
        check_private(&file, false).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_private(&file, false).unwrap_err().to_string().contains("go-w"));
        // Under a directory others may write (not sticky): refused; sticky: fine.
        check_ancestors(&dir).unwrap();
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let under = open.join("s");
        ensure_private_dir(&under).unwrap();
        let e = check_ancestors(&under).unwrap_err().to_string();
        assert!(e.contains("mode 777") && e.contains("others may replace"), "{e}");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        check_ancestors(&under).unwrap();
    }
}
