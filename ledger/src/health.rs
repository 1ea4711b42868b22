//! Is the ledger file healthy, and if not, what is wrong with it.
//!
//! The `allot` command uses this to tell a missing ledger from one that is
//! not a SQLite database at all (overwritten, a text file), one that SQLite
//! finds damaged (truncated, garbage in its pages), and one that another
//! process holds locked, and to say what to do about each.

use std::fmt;
use std::io::Read;
use std::path::Path;

use rusqlite::ErrorCode;

use crate::{Ledger, LedgerError};

/// The first 16 bytes of every SQLite 3 database file.
pub const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What a file's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// Zero bytes: SQLite treats it as an empty database.
    Empty,
    /// Begins with [`SQLITE_HEADER`].
    Sqlite,
    /// Anything else, including files shorter than the header.
    NotSqlite,
}

/// Reads the first bytes of the file at `path`.
///
/// Not for a process that has the ledger open with SQLite: closing this
/// descriptor drops every POSIX lock the process holds on the file (see
/// `allot_slurm::snapshot`, which keeps its descriptors open instead).
pub fn header(path: &Path) -> std::io::Result<Header> {
    let mut buf = Vec::with_capacity(SQLITE_HEADER.len());
    std::fs::File::open(path)?.take(SQLITE_HEADER.len() as u64).read_to_end(&mut buf)?;
    Ok(Header::of(&buf))
}

impl Header {
    /// What a file that begins with `bytes` (its first 16 bytes, or all of
    /// a shorter file) is.
    pub fn of(bytes: &[u8]) -> Header {
        match bytes {
            [] => Header::Empty,
            b if b.starts_with(SQLITE_HEADER) => Header::Sqlite,
            _ => Header::NotSqlite,
        }
    }
}

/// Whether the file at `path` begins with SQLite's 16-byte header.
pub fn looks_like_sqlite(path: &Path) -> std::io::Result<bool> {
    Ok(header(path)? == Header::Sqlite)
}

/// What is wrong with a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No file at the path.
    Missing,
    /// The file is not a SQLite database (SQLite: "file is not a database").
    NotADatabase(String),
    /// A SQLite database that SQLite finds damaged ("database disk image is
    /// malformed", or problems reported by its integrity check).
    Corrupt(String),
    /// Another process holds a lock on it ("database is locked").
    Locked(String),
    /// The filesystem it is on has no room left ("database or disk is full").
    Full(String),
    /// A readable database whose schema is not this allot's.
    Schema(String),
    /// It cannot be opened or read (permissions, I/O errors, ...).
    Unreadable(String),
}

impl Problem {
    /// Whether the fix is to move the file aside and start a new ledger
    /// (`allot ledger recover`), rather than wait or fix permissions.
    pub fn needs_recovery(&self) -> bool {
        matches!(self, Problem::NotADatabase(_) | Problem::Corrupt(_))
    }

    /// Whether there is more to tell the user than SQLite's own words:
    /// how to recover, or what to do and what was kept.
    pub fn has_advice(&self) -> bool {
        self.needs_recovery() || matches!(self, Problem::Locked(_) | Problem::Full(_))
    }

    /// One sentence naming the ledger at `path` and what is wrong with it.
    pub fn describe(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            Problem::Missing => format!("the ledger {p} does not exist"),
            Problem::NotADatabase(d) => format!("the ledger {p} is not a valid SQLite database ({d})"),
            Problem::Corrupt(d) => format!("the ledger {p} is damaged ({d})"),
            Problem::Locked(d) => format!("the ledger {p} is locked by another process ({d})"),
            Problem::Full(d) => format!("the disk the ledger {p} is on is full ({d})"),
            Problem::Schema(d) => format!("the ledger {p} has an unexpected schema ({d})"),
            Problem::Unreadable(d) => format!("the ledger {p} cannot be read ({d})"),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing => write!(f, "missing"),
            Problem::NotADatabase(d) => write!(f, "not a database: {d}"),
            Problem::Corrupt(d) => write!(f, "corrupt: {d}"),
            Problem::Locked(d) => write!(f, "locked: {d}"),
            Problem::Full(d) => write!(f, "disk full: {d}"),
            Problem::Schema(d) => write!(f, "schema: {d}"),
            Problem::Unreadable(d) => write!(f, "unreadable: {d}"),
        }
    }
}

/// Checks the file's header without opening it with SQLite, so that a file
/// that is not a database is reported before anything touches it. A missing
/// or empty file passes (a sync creates the ledger in it); so does a file
/// that cannot be read (opening it reports why).
pub fn preflight(path: &Path) -> Result<(), Problem> {
    match header(path) {
        Ok(Header::NotSqlite) => Err(Problem::NotADatabase("file is not a database: it does not begin with the SQLite header".into())),
        _ => Ok(()),
    }
}

/// The problem behind a SQLite error, if it is one of the kinds above.
pub fn classify_sqlite(err: &rusqlite::Error) -> Option<Problem> {
    let rusqlite::Error::SqliteFailure(e, _) = err else {
        return None;
    };
    let detail = err.to_string();
    Some(match e.code {
        ErrorCode::NotADatabase => Problem::NotADatabase(detail),
        ErrorCode::DatabaseCorrupt => Problem::Corrupt(detail),
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Problem::Locked(detail),
        ErrorCode::DiskFull => Problem::Full(detail),
        ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly | ErrorCode::SystemIoFailure => Problem::Unreadable(detail),
        _ => return None,
    })
}

/// The problem behind a ledger error, if it is one of the kinds above.
pub fn classify(err: &LedgerError) -> Option<Problem> {
    match err {
        LedgerError::Missing { .. } => Some(Problem::Missing),
        LedgerError::Sqlite { source, .. } => classify_sqlite(source),
        LedgerError::Migration { source: crate::MigrationError::Sqlite(rusqlite_migration::Error::RusqliteError { err, .. }), .. } => classify_sqlite(err),
        LedgerError::SchemaMismatch { found, expected, .. } => Some(Problem::Schema(format!("schema version {found}, this allot expects {expected}"))),
        _ => None,
    }
}

/// What [`diagnose`] found in a readable ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healthy {
    /// The current budget version, if one has been synced.
    pub budget_version: Option<i64>,
}

/// Opens the ledger at `path` read-only and runs SQLite's integrity check
/// (`PRAGMA quick_check`) on it. Writes nothing.
pub fn diagnose(path: &Path) -> Result<Healthy, Problem> {
    if !path.exists() {
        return Err(Problem::Missing);
    }
    preflight(path)?;
    let problem = |e: LedgerError| classify(&e).unwrap_or_else(|| Problem::Unreadable(e.to_string()));
    let ledger = Ledger::open_read_only(path).map_err(problem)?;
    let problems = ledger.check().map_err(problem)?;
    if !problems.is_empty() {
        return Err(Problem::Corrupt(problems.join("; ")));
    }
    let budget_version = ledger.current_budget_version().map_err(problem)?;
    Ok(Healthy { budget_version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"").unwrap();
        assert_eq!(header(&p).unwrap(), Header::Empty);
        std::fs::write(&p, b"SQLite").unwrap();
        assert_eq!(header(&p).unwrap(), Header::NotSqlite);
        std::fs::write(&p, b"SQLite format 3\0 and more").unwrap();
        assert!(looks_like_sqlite(&p).unwrap());
        assert!(header(&dir.path().join("none")).is_err());
    }
}

/// The network or cluster filesystem `path` (or, for a file not made yet,
/// its directory) is on, if any. SQLite's locks and its write-ahead log's
/// shared memory work between processes of one host only: two hosts
/// writing one ledger file there corrupt it (sqlite.org/wal.html,
/// "all processes using a database must be on the same host computer").
#[allow(clippy::unnecessary_cast)] // __fsword_t is i64 on x86_64 Linux, narrower elsewhere
pub fn network_filesystem(path: &Path) -> Option<&'static str> {
    let probe = if path.exists() { path.to_path_buf() } else { path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf() };
    let kind = nix::sys::statfs::statfs(&probe).ok()?.filesystem_type().0 as u64;
    filesystem_name(kind)
}

/// Network and cluster filesystems by their statfs magic (linux/magic.h
/// and each filesystem's own headers).
fn filesystem_name(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x00C3_6400 => "CephFS",
        0x0BD0_0BD0 => "Lustre",
        0x4750_4653 => "GPFS (Spectrum Scale)",
        0x1983_0326 => "BeeGFS",
        0x5346_414F => "AFS",
        0x0102_1997 => "9p",
        0x7461_636F => "OCFS2",
        0x0116_1970 => "GFS2",
        0x2003_0528 => "OrangeFS",
        // sshfs, GlusterFS, and others served from another host.
        0x6573_5546 => "FUSE",
        _ => return None,
    })
}

#[cfg(test)]
mod filesystem_tests {
    use super::*;

    #[test]
    fn network_filesystems_are_named_and_local_ones_are_not() {
        assert_eq!(filesystem_name(0x6969), Some("NFS"));
        assert_eq!(filesystem_name(0x0BD0_0BD0), Some("Lustre"));
        assert_eq!(filesystem_name(0xEF53), None, "ext4");
        assert_eq!(filesystem_name(0x0102_1994), None, "tmpfs");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(network_filesystem(&dir.path().join("ledger.db")), None);
    }
}
