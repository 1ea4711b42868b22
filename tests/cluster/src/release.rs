//! The Slurm release a cluster runs, from scripts/release.sh: the one table
//! of releases that the scripts, slurm-sys and this harness share.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::repo;

/// One release of the table: where its Slurm is installed and where its
/// plugins were built.
#[derive(Debug, Clone)]
pub struct Release {
    /// `22.05`, `24.11`.
    pub name: String,
    /// `22.05.8`, `24.11.5`.
    pub version: String,
    /// The root its Slurm is installed in (None: this host's own).
    pub root: Option<PathBuf>,
    /// Its installation prefix on this host, for a site build
    /// (scripts/build-slurm.sh: `/opt/slurm-25.11.7`); None: Debian's /usr.
    pub prefix: Option<PathBuf>,
    /// Cargo's target directory for its plugins (the table's, absolute).
    pub target: PathBuf,
    /// Where that release's plugins were built (cargo's `release` directory
    /// in `target`, or under `ALLOT_PLUGINS_TARGET_DIR` for the tests).
    pub plugins: PathBuf,
}

impl Release {
    /// The release under test: `ALLOT_SLURM_RELEASE`, else the table's
    /// default (read once; panics with the table's message if unknown).
    pub fn current() -> &'static Release {
        static CURRENT: OnceLock<Release> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let mut release = Release::load(std::env::var("ALLOT_SLURM_RELEASE").ok().as_deref()).unwrap_or_else(|e| panic!("{e}"));
            if let Some(dir) = std::env::var_os("ALLOT_PLUGINS_TARGET_DIR") {
                release.plugins = PathBuf::from(dir).join("release");
            }
            release
        })
    }

    /// Release `name` of the table (None or empty: the default release), or
    /// the table's own message saying which releases it has.
    pub fn load(name: Option<&str>) -> Result<Release, String> {
        let table = repo().join("scripts/release.sh");
        let run = |args: &[&str]| -> Result<String, String> {
            let out = Command::new(&table).args(args).output().map_err(|e| format!("{}: {e}", table.display()))?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let name = match name.filter(|n| !n.is_empty()) {
            Some(n) => n.to_owned(),
            None => run(&["default"])?.trim().to_owned(),
        };
        let fields = run(&[&name])?;
        // `all`, `ci`, `site` and `default` are lists, not releases.
        if !fields.lines().any(|l| l.starts_with("version=")) {
            return Err(format!("Slurm release '{name}' is not in allot's test table (scripts/release.sh all lists them)"));
        }
        let field = |key: &str| -> String { fields.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('='))).unwrap_or_default().to_owned() };
        let path = |v: String| Some(v).filter(|v| !v.is_empty()).map(PathBuf::from);
        let target = repo().join(field("target"));
        Ok(Release { version: field("version"), root: path(field("root")), prefix: path(field("prefix")), plugins: target.join("release"), target, name })
    }

    /// `path` (on this host) as the release's daemons and commands see it.
    pub fn inner(&self, path: &Path) -> PathBuf {
        match &self.root {
            Some(root) => Path::new("/").join(path.strip_prefix(root).unwrap_or_else(|_| panic!("{} is outside {}", path.display(), root.display()))),
            None => path.to_owned(),
        }
    }

    /// `PATH` with a site build's commands first (None: Debian's, on the
    /// usual PATH).
    pub fn path_env(&self) -> Option<String> {
        let prefix = self.prefix.as_ref()?;
        let path = std::env::var("PATH").unwrap_or_default();
        Some(format!("{}/bin:{}/sbin:{path}", prefix.display(), prefix.display()))
    }

    /// A command of this release's Slurm installation: chrooted into its
    /// root (starting in `cwd`, as the daemons see it), or run here.
    pub fn command(&self, program: &str, cwd: &Path) -> Command {
        match &self.root {
            Some(root) => {
                let mut c = Command::new("chroot");
                c.arg(root).arg("env").arg(format!("--chdir={}", self.inner(cwd).display())).arg(program);
                c
            }
            None => {
                let mut c = Command::new(program);
                c.current_dir(cwd);
                if let Some(path) = self.path_env() {
                    // Command searches the PATH it is given.
                    c.env("PATH", path);
                }
                c
            }
        }
    }
}
