//! Who is running `allot`, which ledger it works on, and whether they are an
//! admin.
//!
//! Managers usually run `sudo allot budget ...` through a sudoers rule (the
//! ledger belongs to root or the Slurm user). Under sudo (effective uid 0,
//! with `SUDO_USER` or `SUDO_UID` naming someone other than root), the person
//! acting is the sudo user, not root: their ownership of budget nodes is what
//! counts, and nothing they can steer decides what root does:
//!
//! - the ledger is the configured one: `LedgerPath` of /etc/slurm/allot.conf
//!   (the plugins' file beside the default slurm.conf; it must be owned by
//!   root and writable by nobody else), else /var/lib/allot/ledger.db.
//!   `--ledger` and `$ALLOT_LEDGER` are refused unless the sudo user is an
//!   admin; so are the budget file options (`--file`, the FILE of `allot
//!   sync` and `allot watch`): `allot budget` edits the file the ledger
//!   records as last synced.
//! - the `SlurmUser` is read from /etc/slurm/slurm.conf, never `$SLURM_CONF`.
//! - no other file or directory may be named by a sudo user who is not an
//!   admin (`--json`, `--plots`, `--font`, `--slurm-conf`, simulate's
//!   inputs and outputs, ...: every path argument of every subcommand):
//!   root would read or write it. `--json -` prints instead.
//!
//! Admins may change anything: root (when not acting for a sudo user), the
//! `SlurmUser` of slurm.conf, and the owner of the ledger file, who could
//! write it with sqlite3 anyway. Under sudo, "the ledger file" is the
//! configured one, whatever the command line says.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use allot_ledger::{Location, DEFAULT_LEDGER_PATH};
use anyhow::{anyhow, bail, Context};
use nix::unistd::{Uid, User};

/// slurm.conf where Slurm looks for it by default; the one trusted under sudo.
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// The person on whose behalf a change is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub name: String,
    pub is_admin: bool,
}

/// The user a sudo invocation acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SudoUser {
    name: String,
    uid: Option<Uid>,
}

fn env_nonempty(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// Whether this process runs as root on behalf of a sudo user (cheap: the
/// environment and the effective uid only).
pub fn under_sudo() -> bool {
    Uid::effective().is_root() && (env_nonempty("SUDO_USER").is_some_and(|u| u != "root") || env_nonempty("SUDO_UID").is_some_and(|u| u != "0"))
}

/// The sudo user, if running as root on someone's behalf.
fn sudo_user() -> anyhow::Result<Option<SudoUser>> {
    if !under_sudo() {
        return Ok(None);
    }
    let env_uid = match env_nonempty("SUDO_UID") {
        Some(u) => Some(Uid::from_raw(u.parse().map_err(|_| anyhow!("SUDO_UID={u} is not a number"))?)),
        None => None,
    };
    let user = match env_nonempty("SUDO_USER").filter(|u| u != "root") {
        Some(name) => {
            let uid = User::from_name(&name)?.map(|u| u.uid);
            if let (Some(a), Some(b)) = (uid, env_uid) {
                if a != b {
                    bail!("SUDO_USER={name} (uid {a}) and SUDO_UID={b} disagree; refusing to guess who is acting");
                }
            }
            SudoUser { name, uid: uid.or(env_uid) }
        }
        None => {
            let uid = env_uid.expect("under_sudo: SUDO_USER or SUDO_UID is set");
            let name = User::from_uid(uid)?.map(|u| u.name).unwrap_or_else(|| uid.to_string());
            SudoUser { name, uid: Some(uid) }
        }
    };
    Ok(Some(user))
}

/// slurm.conf: `$SLURM_CONF` unless under sudo, else [`DEFAULT_SLURM_CONF`].
pub fn slurm_conf_path() -> PathBuf {
    match std::env::var_os("SLURM_CONF") {
        Some(p) if !p.is_empty() && !under_sudo() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SLURM_CONF),
    }
}

/// The value of `key=` in a Slurm-style file (keys case-insensitive, `#`
/// comments), if set.
pub fn conf_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.split('#').next()?.trim();
        let (k, value) = line.split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then(|| value.trim().to_owned())
    })
}

/// The `SlurmUser=` of slurm.conf (see [`slurm_conf_path`]), if it can be
/// read. Slurm's own default is root.
pub fn slurm_user() -> Option<String> {
    let text = std::fs::read_to_string(slurm_conf_path()).ok()?;
    conf_value(&text, "SlurmUser")
}

/// The ledger the plugins use: `LedgerPath` of the allot.conf beside
/// slurm.conf, else [`DEFAULT_LEDGER_PATH`]. Under sudo, the allot.conf must
/// be owned by root and writable by nobody else, or it is refused.
pub fn configured_ledger() -> anyhow::Result<(Location, String)> {
    let conf = slurm_conf_path().parent().unwrap_or(Path::new("/etc/slurm")).join("allot.conf");
    let meta = match std::fs::metadata(&conf) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((Location::File(PathBuf::from(DEFAULT_LEDGER_PATH)), format!("the default; {} does not exist", conf.display())));
        }
        Err(e) => bail!("cannot read {}: {e}", conf.display()),
    };
    if under_sudo() && (meta.uid() != 0 || meta.mode() & 0o022 != 0) {
        bail!(
            "{} must be owned by root and writable by nobody else: under sudo, allot takes the ledger's location only from a file the sudo user cannot change",
            conf.display()
        );
    }
    let text = std::fs::read_to_string(&conf).with_context(|| format!("cannot read {}", conf.display()))?;
    match Location::from_conf(conf_value(&text, "LedgerPath").as_deref(), conf_value(&text, "LedgerUrl").as_deref()) {
        Ok(Some(l)) => {
            let key = if l.is_server() { "LedgerUrl" } else { "LedgerPath" };
            Ok((l, format!("{key} of {}", conf.display())))
        }
        Ok(None) => Ok((Location::File(PathBuf::from(DEFAULT_LEDGER_PATH)), format!("the default; {} sets no LedgerPath", conf.display()))),
        Err(e) => bail!("{}: {e}", conf.display()),
    }
}

/// Who should own a ledger that allot creates: the SlurmUser (the priority
/// plugin writes runs into it), when running as root and that is someone
/// else; `None`: whoever runs allot.
pub fn ledger_owner() -> Option<(u32, u32)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let user = User::from_name(&slurm_user()?).ok()??;
    (!user.uid.is_root()).then(|| (user.uid.as_raw(), user.gid.as_raw()))
}

/// Whether `a` and `b` name the same ledger.
fn same_ledger(a: &Location, b: &Location) -> bool {
    match (a, b) {
        (Location::File(a), Location::File(b)) => match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
        },
        (a, b) => a == b,
    }
}

/// Under sudo, refuses a user who is not an admin any file or directory
/// named on the command line (`named`: "--json /etc/x", ...): allot runs as
/// root, and would read or write it with root's rights.
pub fn may_name_files_under_sudo(named: &[String]) -> anyhow::Result<()> {
    if named.is_empty() || !under_sudo() {
        return Ok(());
    }
    let (configured, _) = configured_ledger()?;
    let actor = Actor::resolve(sudo_user()?.as_ref(), &configured)?;
    if actor.is_admin {
        return Ok(());
    }
    bail!(
        "{} may not name files under sudo ({}): allot runs as root there and would read or write them with root's rights; run it without sudo, or print instead (`allot report --json -` prints the JSON, for you to redirect), or ask an admin",
        actor.name,
        named.join(", ")
    )
}

/// Who runs this command and on which ledger.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub actor: Actor,
    /// Running as root on behalf of [`Actor::name`].
    pub sudo: bool,
    /// The ledger this command works on.
    pub ledger: Location,
    /// The configured ledger, and where that setting came from.
    pub configured: Location,
    pub configured_by: String,
}

impl Invocation {
    /// Resolves the ledger (`--ledger`, else `$ALLOT_LEDGER`, else the
    /// configured one) and the actor. Under sudo, a non-admin may not name
    /// a ledger other than the configured one.
    pub fn resolve(flag: Option<&Path>) -> anyhow::Result<Invocation> {
        let sudo = sudo_user()?;
        let chosen = match flag {
            Some(p) => Some(("--ledger", p.to_string_lossy().into_owned())),
            None => env_nonempty("ALLOT_LEDGER").map(|p| ("ALLOT_LEDGER", p)),
        };
        let chosen = match chosen {
            Some((option, text)) => Some((option, Location::parse(&text).map_err(|e| anyhow!("{option}: {e}"))?)),
            None => None,
        };
        let (configured, configured_by) = match configured_ledger() {
            Ok(c) => c,
            // Without sudo, a ledger named on the command line needs no allot.conf.
            Err(e) if sudo.is_none() && chosen.is_some() => (Location::File(PathBuf::from(DEFAULT_LEDGER_PATH)), format!("the default; {e:#}")),
            Err(e) => return Err(e),
        };
        let ledger = chosen.as_ref().map(|(_, p)| p.clone()).unwrap_or_else(|| configured.clone());
        // Under sudo, admin status comes from the configured ledger only.
        let actor = Actor::resolve(sudo.as_ref(), if sudo.is_some() { &configured } else { &ledger })?;
        let inv = Invocation { actor, sudo: sudo.is_some(), ledger, configured, configured_by };
        if let Some((option, path)) = chosen {
            if !same_ledger(&path, &inv.configured) {
                inv.may_choose("the ledger", option, &format!("without it, allot uses {} ({})", inv.configured, inv.configured_by))?;
            }
        }
        Ok(inv)
    }

    /// Who counts as an admin, for messages.
    pub fn admins(&self) -> String {
        let slurm = match slurm_user() {
            Some(u) => format!("the SlurmUser ({u})"),
            None => "the SlurmUser".to_owned(),
        };
        match &self.configured {
            Location::File(path) => format!("root, {slurm}, or the owner of {}", path.display()),
            Location::Server(s) => match s.password_file() {
                Some(file) => format!("root, {slurm}, or the owner of {} (the server ledger's password file)", file.display()),
                None => format!("root or {slurm}"),
            },
        }
    }

    /// Refuses a non-admin under sudo the choice of `what` through `option`.
    pub fn may_choose(&self, what: &str, option: &str, instead: &str) -> anyhow::Result<()> {
        if self.sudo && !self.actor.is_admin {
            bail!("{} may not choose {what} under sudo ({option}): only an admin ({}) may; {instead}", self.actor.name, self.admins());
        }
        Ok(())
    }

    /// Refuses anyone but an admin.
    pub fn require_admin(&self, what: &str) -> anyhow::Result<()> {
        if !self.actor.is_admin {
            bail!("{} may not {what}: only an admin ({}) may", self.actor.name, self.admins());
        }
        Ok(())
    }
}

impl Actor {
    /// The invoking user, for changes to the ledger at `ledger`. Under sudo,
    /// pass the configured ledger: see [`Invocation::resolve`].
    pub fn current(ledger: &Location) -> anyhow::Result<Actor> {
        Actor::resolve(sudo_user()?.as_ref(), ledger)
    }

    fn resolve(sudo: Option<&SudoUser>, ledger: &Location) -> anyhow::Result<Actor> {
        let uid = Uid::effective();
        let (name, acting_uid, delegated) = match sudo {
            Some(s) => (s.name.clone(), s.uid, true),
            None => (User::from_uid(uid)?.map(|u| u.name).unwrap_or_else(|| uid.to_string()), Some(uid), false),
        };
        let owns_ledger = match ledger {
            Location::File(path) => match std::fs::metadata(path) {
                Ok(meta) => acting_uid.map(|u| u.as_raw()) == Some(meta.uid()),
                // Whoever creates the ledger will own it, unless acting through sudo.
                Err(_) => !delegated,
            },
            // A server ledger's writer is whoever holds its password: the
            // password file's owner could write it with the mysql client.
            Location::Server(s) => {
                s.password_file().and_then(|f| std::fs::metadata(f).ok()).is_some_and(|meta| acting_uid.map(|u| u.as_raw()) == Some(meta.uid()))
            }
        };
        let is_admin = (uid.is_root() && !delegated) || slurm_user().as_deref() == Some(name.as_str()) || owns_ledger;
        Ok(Actor { name, is_admin })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_values() {
        let text = "# c\nslurmuser = slurm # the daemons\nLedgerPath=/x/l.db\n";
        assert_eq!(conf_value(text, "SlurmUser").as_deref(), Some("slurm"));
        assert_eq!(conf_value(text, "ledgerpath").as_deref(), Some("/x/l.db"));
        assert_eq!(conf_value(text, "Nope"), None);
    }
}
