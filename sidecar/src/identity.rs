//! Who is running `allot`, and whether they are an admin.
//!
//! Managers usually run `sudo allot budget ...` through a sudoers rule (the
//! ledger belongs to root or the Slurm user). Under sudo, the person acting
//! is `SUDO_USER`, not root: their ownership of budget nodes is what counts.
//!
//! Admins may change anything: root (when not acting for a sudo user), the
//! `SlurmUser` of slurm.conf, and the owner of the ledger file, who could
//! write it with sqlite3 anyway. Permission checks therefore matter where
//! they can be enforced: when the ledger is reachable only through sudo.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Uid, User};

/// The person on whose behalf a change is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub name: String,
    pub is_admin: bool,
}

/// The `SlurmUser=` of slurm.conf (`$SLURM_CONF`, else /etc/slurm/slurm.conf),
/// if it can be read. Slurm's own default is root.
fn slurm_user() -> Option<String> {
    let path = std::env::var_os("SLURM_CONF").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let line = line.split('#').next()?.trim();
        let (key, value) = line.split_once('=')?;
        key.trim().eq_ignore_ascii_case("SlurmUser").then(|| value.trim().to_owned())
    })
}

impl Actor {
    /// The invoking user, for changes to the ledger at `ledger`.
    pub fn current(ledger: &Path) -> anyhow::Result<Actor> {
        let uid = Uid::current();
        let sudo_user = std::env::var("SUDO_USER").ok().filter(|u| uid.is_root() && !u.is_empty() && u != "root");
        let (name, acting_uid) = match sudo_user {
            Some(name) => {
                let uid = User::from_name(&name)?.map(|u| u.uid);
                (name, uid)
            }
            None => (User::from_uid(uid)?.map(|u| u.name).unwrap_or_else(|| uid.to_string()), Some(uid)),
        };
        let delegated = acting_uid != Some(uid);
        let owns_ledger = match std::fs::metadata(ledger) {
            Ok(meta) => acting_uid.map(|u| u.as_raw()) == Some(meta.uid()),
            // Whoever creates the ledger will own it, unless acting through sudo.
            Err(_) => !delegated,
        };
        let is_admin = (uid.is_root() && !delegated) || slurm_user().as_deref() == Some(name.as_str()) || owns_ledger;
        Ok(Actor { name, is_admin })
    }
}
