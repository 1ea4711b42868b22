//! Where the ledger lives: a SQLite file on the controller host, or a
//! MariaDB/MySQL database on the site's server (the one slurmdbd uses, or
//! its cluster), named by a URL:
//!
//! ```text
//! mysql://allot@db.example.org:3306/allot?password_file=/etc/slurm/allot-ledger.pass
//! mysql://allot@localhost/allot?socket=/run/mysqld/mysqld.sock&password_file=...
//! ```
//!
//! (`mariadb://` is the same.) The password is never in the URL, which is
//! shown in logs and messages: it is the first line of `password_file`, a
//! file only root (or the Slurm user) can read, as slurmdbd.conf's
//! `StoragePass`. A URL that carries one is refused. Without
//! `password_file` the server must authenticate the user otherwise (for
//! example MariaDB's `unix_socket` plugin over the local socket).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A ledger's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    Server(ServerLocation),
}

/// A server ledger: the URL as given (it holds no password), and where the
/// password is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLocation {
    /// The URL as written, for messages.
    url: String,
    /// The URL handed to the client: `mysql://`, without `password_file`.
    client_url: String,
    password_file: Option<PathBuf>,
}

/// allot.conf sets both ledger keys.
pub const BOTH_LEDGER_KEYS: &str = "LedgerPath and LedgerUrl are both set: the ledger is a file or a server, not both";

/// How long connecting may take, and each statement's reply: a dead server
/// must not hold the plugins' ledger threads for long (they carry on from
/// memory and try again next period).
pub const SERVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const SERVER_IO_TIMEOUT: Duration = Duration::from_secs(30);

impl Location {
    /// A path, or a `mysql://` / `mariadb://` URL.
    pub fn parse(text: &str) -> Result<Location, String> {
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            return ServerLocation::parse(text).map(Location::Server);
        }
        if lower.contains("://") {
            return Err(format!("'{}': a ledger is a file path or a mysql:// (mariadb://) URL", redact(text)));
        }
        if text.is_empty() {
            return Err("the ledger location is empty".into());
        }
        Ok(Location::File(PathBuf::from(text)))
    }

    /// allot.conf's ledger keys, read alike by the plugins, the CLI and
    /// `allot doctor`: `LedgerPath` (an absolute path) or `LedgerUrl` (a
    /// mysql:// URL), never both. Neither: `None`, the default file.
    pub fn from_conf(ledger_path: Option<&str>, ledger_url: Option<&str>) -> Result<Option<Location>, String> {
        match (ledger_path, ledger_url) {
            (Some(_), Some(_)) => Err(BOTH_LEDGER_KEYS.to_owned()),
            (Some(p), None) if p.starts_with('/') => Ok(Some(Location::File(PathBuf::from(p)))),
            (Some(p), None) => Err(format!("LedgerPath must be an absolute path, got '{p}'")),
            (None, Some(url)) => match Location::parse(url) {
                Ok(l @ Location::Server(_)) => Ok(Some(l)),
                Ok(Location::File(_)) => Err("LedgerUrl must be a mysql:// (mariadb://) URL; a file is LedgerPath".to_owned()),
                Err(e) => Err(format!("LedgerUrl: {e}")),
            },
            (None, None) => Ok(None),
        }
    }

    /// The file, for a SQLite ledger.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Location::File(p) => Some(p),
            Location::Server(_) => None,
        }
    }

    pub fn is_server(&self) -> bool {
        matches!(self, Location::Server(_))
    }
}

impl From<PathBuf> for Location {
    fn from(p: PathBuf) -> Location {
        Location::File(p)
    }
}
impl From<&PathBuf> for Location {
    fn from(p: &PathBuf) -> Location {
        Location::File(p.clone())
    }
}
impl From<&Path> for Location {
    fn from(p: &Path) -> Location {
        Location::File(p.to_path_buf())
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(p) => write!(f, "{}", p.display()),
            Location::Server(s) => write!(f, "{}", s.url),
        }
    }
}

/// `text` with whatever stands between `//` and `@` cut to the user name:
/// an error about a mistyped URL must not print a password written in it.
fn redact(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &text[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &text[..scheme + 3], &text[at..]),
                None => text.to_owned(),
            }
        }
        _ => text.to_owned(),
    }
}

impl ServerLocation {
    fn parse(text: &str) -> Result<ServerLocation, String> {
        let shown = redact(text);
        let url = url::Url::parse(text).map_err(|e| format!("ledger URL '{shown}': {e}"))?;
        if url.password().is_some() {
            return Err(format!(
                "ledger URL '{shown}' carries a password; URLs are shown in logs and messages: put the password in a file only root can read and name it with ?password_file=/path"
            ));
        }
        if url.username().is_empty() {
            return Err(format!("ledger URL '{shown}' names no user (mysql://USER@HOST/DATABASE)"));
        }
        let database = url.path().trim_start_matches('/');
        if database.is_empty() || database.contains('/') {
            return Err(format!("ledger URL '{shown}' names no database (mysql://USER@HOST/DATABASE)"));
        }
        let mut password_file = None;
        let mut kept = Vec::new();
        for (key, value) in url.query_pairs() {
            match key.as_ref() {
                "password_file" => {
                    if !value.starts_with('/') {
                        return Err(format!("ledger URL '{shown}': password_file must be an absolute path, got '{value}'"));
                    }
                    password_file = Some(PathBuf::from(value.as_ref()));
                }
                // What the client understands (see the mysql crate's Opts::from_url).
                "socket" | "prefer_socket" | "tcp_nodelay" | "compress" | "stmt_cache_size" => kept.push((key.into_owned(), value.into_owned())),
                other => {
                    return Err(format!(
                    "ledger URL '{shown}': unknown parameter '{other}' (known: password_file, socket, prefer_socket, tcp_nodelay, compress, stmt_cache_size)"
                ))
                }
            }
        }
        let mut client = url.clone();
        // Url cannot change a special scheme into another; both are plain here.
        let rest = &client.as_str()[client.scheme().len()..];
        let mut client_url = format!("mysql{rest}");
        if let Ok(mut c) = url::Url::parse(&client_url) {
            c.set_query(None);
            if !kept.is_empty() {
                c.query_pairs_mut().extend_pairs(kept.iter());
            }
            client = c;
            client_url = client.to_string();
        }
        Ok(ServerLocation { url: text.to_owned(), client_url, password_file })
    }

    pub fn password_file(&self) -> Option<&Path> {
        self.password_file.as_deref()
    }

    /// The client's options: the URL's, the password from its file,
    /// timeouts, and a session that compares text byte for byte and refuses
    /// bad values rather than truncating them.
    pub(crate) fn options(&self, writable: bool) -> Result<mysql::Opts, String> {
        let opts = mysql::Opts::from_url(&self.client_url).map_err(|e| format!("ledger URL '{}': {e}", self.url))?;
        let mut builder = mysql::OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(SERVER_CONNECT_TIMEOUT))
            .read_timeout(Some(SERVER_IO_TIMEOUT))
            .write_timeout(Some(SERVER_IO_TIMEOUT))
            .init(vec![
                "SET NAMES utf8mb4 COLLATE utf8mb4_bin",
                "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'",
                "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            ]);
        if let Some(file) = &self.password_file {
            builder = builder.pass(Some(read_password(file, writable)?));
        }
        Ok(builder.into())
    }
}

/// The first line of the password file. Never put in a message: only the
/// file's name and what is wrong with it.
fn read_password(file: &Path, writable: bool) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).map_err(|e| format!("the ledger's password file {}: {e}", file.display()))?;
    // Like slurmdbd.conf: a password every user can read is no secret. A
    // read-only account (for `allot why` on login nodes) may be readable by all.
    if writable && meta.mode() & 0o004 != 0 {
        return Err(format!(
            "the ledger's password file {} is readable by every user (mode {:o}); `chmod 600` it (owner root or the Slurm user)",
            file.display(),
            meta.mode() & 0o7777
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            format!(
                "the ledger's password file {}: permission denied (a server ledger is opened by root or the Slurm user, or with a read-only account's file)",
                file.display()
            )
        } else {
            format!("the ledger's password file {}: {e}", file.display())
        }
    })?;
    let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if line.is_empty() {
        return Err(format!("the ledger's password file {} is empty", file.display()));
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls() {
        assert_eq!(Location::parse("/var/lib/allot/ledger.db").unwrap(), Location::File("/var/lib/allot/ledger.db".into()));
        let l = Location::parse("mariadb://allot@db:3306/allot?password_file=/etc/slurm/p&socket=/run/m.sock").unwrap();
        let Location::Server(s) = &l else { panic!() };
        assert_eq!(s.password_file(), Some(Path::new("/etc/slurm/p")));
        assert_eq!(s.client_url, "mysql://allot@db:3306/allot?socket=%2Frun%2Fm.sock");
        assert_eq!(l.to_string(), "mariadb://allot@db:3306/allot?password_file=/etc/slurm/p&socket=/run/m.sock");
    }

    #[test]
    fn a_password_is_never_taken_nor_shown() {
        for bad in ["mysql://allot:hunter2@db/allot", "mysql://allot:hunter2@db/allot?nonsense=1", "mysql://allot:hunter2@db"] {
            let e = Location::parse(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("allot:***@db"), "{e}");
        }
        assert!(Location::parse("mysql://allot:hunter2@db/allot").unwrap_err().contains("password_file"));
        assert!(!Location::parse("postgres://allot:hunter2@db/allot").unwrap_err().contains("hunter2"));
    }

    #[test]
    fn allot_conf_names_a_file_or_a_server_never_both() {
        assert_eq!(Location::from_conf(None, None), Ok(None));
        assert_eq!(Location::from_conf(Some("/l.db"), None), Ok(Some(Location::File("/l.db".into()))));
        assert!(Location::from_conf(None, Some("mysql://a@h/d")).unwrap().unwrap().is_server());
        assert_eq!(Location::from_conf(Some("/l.db"), Some("mysql://a@h/d")).unwrap_err(), BOTH_LEDGER_KEYS);
        assert_eq!(Location::from_conf(Some("l.db"), None).unwrap_err(), "LedgerPath must be an absolute path, got 'l.db'");
        assert!(Location::from_conf(None, Some("/l.db")).unwrap_err().contains("a file is LedgerPath"));
        assert!(Location::from_conf(None, Some("mysql://a:pw@h/d")).unwrap_err().starts_with("LedgerUrl: "));
    }

    #[test]
    fn what_is_missing_is_named() {
        assert!(Location::parse("mysql://db/allot").unwrap_err().contains("no user"));
        assert!(Location::parse("mysql://allot@db").unwrap_err().contains("no database"));
        assert!(Location::parse("mysql://allot@db/allot?password_file=rel").unwrap_err().contains("absolute"));
        assert!(Location::parse("mysql://allot@db/allot?pool_max=3").unwrap_err().contains("unknown parameter 'pool_max'"));
        assert!(Location::parse("").is_err());
    }

    #[test]
    fn the_password_file_is_checked_and_never_quoted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        std::fs::write(&file, "s3cret\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_password(&file, true).unwrap_err();
        assert!(e.contains("readable by every user") && !e.contains("s3cret"), "{e}");
        assert_eq!(read_password(&file, false).unwrap(), "s3cret", "a read-only account's file may be readable by all");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&file, true).unwrap(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(read_password(&file, true).unwrap_err().contains("is empty"));
        assert!(read_password(&dir.path().join("none"), true).unwrap_err().contains("none"));
    }
}
