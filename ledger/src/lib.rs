//! # allot ledger
//!
//! The one durable truth of allot, in SQLite: every budget version ever
//! synced (append-only), every job run's occupancy interval, each job's
//! contract, each leaf's demand over time, and the latest usage snapshot
//! the plugins ranked by.
//!
//! - **Writers** (the `allot` CLI for budgets, the priority plugin for runs,
//!   contracts and snapshots) open with [`Ledger::open`]; it applies schema
//!   migrations and turns on WAL, so readers never block writers.
//! - **Readers** (the preempt and job_submit plugins, `allot history`) open
//!   with [`Ledger::open_read_only`].
//! - Every multi-row read happens inside one read transaction and every write
//!   inside one `BEGIN IMMEDIATE` transaction, so a reader sees a whole budget
//!   version or none of it: never a torn read.
//!
//! Tests use [`Ledger::in_memory`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use rusqlite_migration::{Migrations, M};

mod budgets;
mod db;
pub mod health;
mod location;
mod runs;
mod snapshot;
#[cfg(feature = "testing")]
pub mod testing;

pub use db::DbError;
use db::DbResult;
use db::{params, Conn, Dialect};
pub use location::{Location, ServerLocation, BOTH_LEDGER_KEYS};

pub use budgets::{BudgetVersion, Replaced, SyncOutcome};
pub use runs::{ContractRow, DemandRow, EventRow, JobEnd, Period, RunRow, RunUpdate};
pub use snapshot::{LeafUsage, UsageSnapshot};

/// What can go wrong with the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("ledger {path}: {source}")]
    Server {
        path: String,
        #[source]
        source: mysql::Error,
    },
    #[error("ledger {path}: cannot migrate the schema: {source}")]
    Migration {
        path: String,
        #[source]
        source: MigrationError,
    },
    /// A value the ledger did not write (edited by hand?).
    #[error("ledger {path}: unexpected value in {problem}")]
    Decode { path: String, problem: String },
    /// A ledger location or its password file that cannot be used.
    #[error("{0}")]
    Config(String),
    #[error("ledger {path}: schema version {found} but this allot expects {expected}; {}", schema_remedy(*found, *expected))]
    SchemaMismatch { path: String, found: usize, expected: usize },
    #[error("ledger {path} is on {filesystem}, a network filesystem: SQLite's locks and write-ahead log work on one host only, so a ledger there would be corrupted by a second host (a backup slurmctld, `allot` on a login node). Keep the file on the controller's local disk, or put the ledger on the site's MariaDB/MySQL server (LedgerUrl=mysql://... in allot.conf)")]
    NetworkFilesystem { path: String, filesystem: &'static str },
    #[error("ledger {path} does not exist; sync a budget first (`allot sync budgets.toml`)")]
    Missing { path: String },
    #[error("ledger {path}: this machine's SQLite is {found}, allot needs {MIN_SQLITE} or later (its tables are STRICT); upgrade libsqlite3-0")]
    SqliteTooOld { path: String, found: String },
    /// A budget sync refused by its permission check; nothing was written.
    #[error("{0}")]
    Refused(String),
}

/// What to do about a ledger of another schema version. A newer one was
/// migrated by a newer allot: typically `allot sync` of an upgraded package
/// while slurmctld still runs the plugins it loaded before the upgrade.
fn schema_remedy(found: usize, expected: usize) -> &'static str {
    if found > expected {
        "a newer allot migrated it: restart slurmctld so that it loads the installed plugins, and use the allot command of the same version"
    } else {
        "run `allot sync` (as the ledger's owner) to migrate it"
    }
}

/// A schema migration that failed, on either engine.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error(transparent)]
    Sqlite(rusqlite_migration::Error),
    #[error("migration {version}: {source}")]
    Server {
        version: usize,
        #[source]
        source: mysql::Error,
    },
}

impl LedgerError {
    /// SQLite's BUSY: another connection holds a lock this one needed.
    fn is_busy(&self) -> bool {
        let code = |e: &rusqlite::Error| e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy);
        match self {
            LedgerError::Sqlite { source, .. } => code(source),
            LedgerError::Migration { source: MigrationError::Sqlite(rusqlite_migration::Error::RusqliteError { err, .. }), .. } => code(err),
            _ => false,
        }
    }

    fn from_db(path: &str, e: DbError) -> LedgerError {
        let path = path.to_owned();
        match e {
            DbError::Sqlite(source) => LedgerError::Sqlite { path, source },
            DbError::Server(source) => LedgerError::Server { path, source },
            DbError::Decode { column, problem } => LedgerError::Decode { path, problem: format!("column {column}: {problem}") },
            DbError::Refused(why) => LedgerError::Refused(why),
        }
    }
}

pub type Result<T> = std::result::Result<T, LedgerError>;

/// The oldest SQLite the ledger's schema works with: STRICT tables came in
/// 3.37.0 (Debian 12 has 3.40.1, Debian 13 3.46.1).
pub const MIN_SQLITE: &str = "3.37.0";
const MIN_SQLITE_NUMBER: i32 = 3_037_000;

/// Schema migrations, oldest first. Never edit a released one: append.
const MIGRATIONS: &[&str] = &[
    // 1: budgets, runs, contracts, usage snapshot, events.
    r#"
    CREATE TABLE budget_versions (
        version    INTEGER PRIMARY KEY,  -- 1, 2, 3, ...: never reused
        synced_at  INTEGER NOT NULL,     -- Unix seconds
        author     TEXT    NOT NULL,     -- Unix user who synced
        source     TEXT    NOT NULL,     -- the file given to sync
        toml       TEXT    NOT NULL,     -- the exact text synced
        changes    TEXT    NOT NULL      -- one change per line, from the previous version
    ) STRICT;
    CREATE TABLE budget_nodes (
        version         INTEGER NOT NULL REFERENCES budget_versions(version),
        path            TEXT    NOT NULL, -- '' is the root
        share           REAL    NOT NULL,
        effective_share REAL    NOT NULL,
        is_leaf         INTEGER NOT NULL,
        owners          TEXT    NOT NULL, -- comma-separated
        accounts        TEXT    NOT NULL,
        members         TEXT    NOT NULL,
        PRIMARY KEY (version, path)
    ) STRICT, WITHOUT ROWID;
    -- History is append-only: who changed what, when, stays true.
    CREATE TRIGGER budget_versions_no_update BEFORE UPDATE ON budget_versions
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_versions_no_delete BEFORE DELETE ON budget_versions
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_nodes_no_update BEFORE UPDATE ON budget_nodes
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;
    CREATE TRIGGER budget_nodes_no_delete BEFORE DELETE ON budget_nodes
        BEGIN SELECT RAISE(ABORT, 'budget history is append-only'); END;

    -- One row per run of a job: occupancy intervals.
    CREATE TABLE runs (
        job_id     INTEGER NOT NULL,
        run_start  INTEGER NOT NULL,
        run_end    INTEGER,              -- NULL while the run goes on
        leaf       TEXT,                 -- budget path charged; NULL: outside the tree
        account    TEXT,
        user       TEXT,
        gpus       INTEGER NOT NULL,
        allocated  INTEGER NOT NULL,     -- 0: min_runtime=0, never charged
        end_reason TEXT,                 -- completed, preempted, requeued, cancelled, lost, ...
        PRIMARY KEY (job_id, run_start)
    ) STRICT;
    CREATE INDEX runs_open ON runs(run_end) WHERE run_end IS NULL;
    CREATE INDEX runs_by_end ON runs(run_end);

    -- Each job's contract as accepted at submission.
    CREATE TABLE contracts (
        job_id      INTEGER PRIMARY KEY,
        user        TEXT    NOT NULL,
        account     TEXT,
        leaf        TEXT,
        min_runtime INTEGER NOT NULL,
        priority    TEXT    NOT NULL,
        resumable   INTEGER NOT NULL,
        submit_time INTEGER NOT NULL,
        comment     TEXT    NOT NULL     -- the canonical comment stored on the job
    ) STRICT;

    -- The latest usage the order was computed from (replaced each period).
    CREATE TABLE usage_snapshot (
        leaf            TEXT    PRIMARY KEY,
        charged         INTEGER NOT NULL,  -- GPU-seconds in the window
        unallocated     INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE usage_snapshot_meta (
        id              INTEGER PRIMARY KEY CHECK (id = 1),
        computed_at     INTEGER NOT NULL,
        budget_version  INTEGER NOT NULL,
        capacity_gpus   INTEGER NOT NULL
    ) STRICT;

    -- Things worth explaining later: preemptions, requeues, drains.
    CREATE TABLE events (
        id      INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        job_id  INTEGER NOT NULL,
        kind    TEXT    NOT NULL,
        detail  TEXT    NOT NULL
    ) STRICT;
    CREATE INDEX events_by_job ON events(job_id);
    "#,
    // 2: an identity per ledger file, so a plugin can tell a ledger that
    // replaced the one it wrote to (deleted and re-created, recovered,
    // restored from a backup) from the same one reopened.
    r#"
    CREATE TABLE ledger_identity (
        id TEXT NOT NULL
    ) STRICT;
    INSERT INTO ledger_identity (id) VALUES (lower(hex(randomblob(16))));
    "#,
    // 3: what `allot report` needs beside the runs: each leaf's demand over
    // time (what it is owed is computed from it), and each job's GPUs and
    // the time it left the queue for good.
    r#"
    ALTER TABLE contracts ADD COLUMN gpus INTEGER;      -- GPUs asked for (at most); NULL: recorded before schema 3
    ALTER TABLE contracts ADD COLUMN end_time INTEGER;  -- completed, failed or cancelled; NULL while queued or running
    -- One row each time a leaf's demand changes: it holds from `at` until
    -- the leaf's next row. GPUs of jobs pending (not held) and running.
    CREATE TABLE demand (
        leaf                TEXT    NOT NULL,
        at                  INTEGER NOT NULL,
        pending_allocated   INTEGER NOT NULL,
        pending_unallocated INTEGER NOT NULL,
        running_allocated   INTEGER NOT NULL,
        running_unallocated INTEGER NOT NULL,
        PRIMARY KEY (leaf, at)
    ) STRICT, WITHOUT ROWID;
    -- What `allot report` and `allot serve` read by time, not by job.
    CREATE INDEX contracts_by_submit ON contracts(submit_time);
    CREATE INDEX contracts_waiting ON contracts(submit_time) WHERE end_time IS NULL;
    CREATE INDEX events_by_kind ON events(kind, at);
    "#,
    // 4: several clusters on one ledger. Every row of a run, a contract, an
    // event, a demand change or a snapshot names its cluster (Slurm's
    // ClusterName), and job ids are unique per cluster only. Rows from
    // before have cluster '': the first plugin that writes as a named
    // cluster adopts them (`Ledger::adopt_unclustered`). SQLite cannot
    // change a primary key in place: the keyed tables are rebuilt.
    r#"
    CREATE TABLE runs_4 (
        cluster    TEXT    NOT NULL DEFAULT '',
        job_id     INTEGER NOT NULL,
        run_start  INTEGER NOT NULL,
        run_end    INTEGER,
        leaf       TEXT,
        account    TEXT,
        user       TEXT,
        gpus       INTEGER NOT NULL,
        allocated  INTEGER NOT NULL,
        end_reason TEXT,
        PRIMARY KEY (cluster, job_id, run_start)
    ) STRICT;
    INSERT INTO runs_4 (job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason)
        SELECT job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_4 RENAME TO runs;
    CREATE INDEX runs_open ON runs(run_end) WHERE run_end IS NULL;
    CREATE INDEX runs_by_end ON runs(run_end);

    CREATE TABLE contracts_4 (
        cluster     TEXT    NOT NULL DEFAULT '',
        job_id      INTEGER NOT NULL,
        user        TEXT    NOT NULL,
        account     TEXT,
        leaf        TEXT,
        min_runtime INTEGER NOT NULL,
        priority    TEXT    NOT NULL,
        resumable   INTEGER NOT NULL,
        submit_time INTEGER NOT NULL,
        comment     TEXT    NOT NULL,
        gpus        INTEGER,
        end_time    INTEGER,
        PRIMARY KEY (cluster, job_id)
    ) STRICT;
    INSERT INTO contracts_4 (job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus, end_time)
        SELECT job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus, end_time FROM contracts;
    DROP TABLE contracts;
    ALTER TABLE contracts_4 RENAME TO contracts;
    CREATE INDEX contracts_by_submit ON contracts(submit_time);
    CREATE INDEX contracts_waiting ON contracts(submit_time) WHERE end_time IS NULL;

    CREATE TABLE demand_4 (
        cluster             TEXT    NOT NULL DEFAULT '',
        leaf                TEXT    NOT NULL,
        at                  INTEGER NOT NULL,
        pending_allocated   INTEGER NOT NULL,
        pending_unallocated INTEGER NOT NULL,
        running_allocated   INTEGER NOT NULL,
        running_unallocated INTEGER NOT NULL,
        PRIMARY KEY (cluster, leaf, at)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO demand_4 (leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated)
        SELECT leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated FROM demand;
    DROP TABLE demand;
    ALTER TABLE demand_4 RENAME TO demand;

    CREATE TABLE usage_snapshot_4 (
        cluster     TEXT    NOT NULL DEFAULT '',
        leaf        TEXT    NOT NULL,
        charged     INTEGER NOT NULL,
        unallocated INTEGER NOT NULL,
        PRIMARY KEY (cluster, leaf)
    ) STRICT;
    INSERT INTO usage_snapshot_4 (leaf, charged, unallocated) SELECT leaf, charged, unallocated FROM usage_snapshot;
    DROP TABLE usage_snapshot;
    ALTER TABLE usage_snapshot_4 RENAME TO usage_snapshot;
    -- One snapshot per cluster.
    CREATE TABLE usage_snapshot_meta_4 (
        cluster         TEXT    NOT NULL PRIMARY KEY,
        computed_at     INTEGER NOT NULL,
        budget_version  INTEGER NOT NULL,
        capacity_gpus   INTEGER NOT NULL
    ) STRICT;
    INSERT INTO usage_snapshot_meta_4 (cluster, computed_at, budget_version, capacity_gpus)
        SELECT '', computed_at, budget_version, capacity_gpus FROM usage_snapshot_meta;
    DROP TABLE usage_snapshot_meta;
    ALTER TABLE usage_snapshot_meta_4 RENAME TO usage_snapshot_meta;

    ALTER TABLE events ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
    "#,
    // 5: each leaf's charged GPUs running when the usage was computed, for
    // the budget's `lookahead` (0 in snapshots written before).
    r#"
    ALTER TABLE usage_snapshot ADD COLUMN running INTEGER NOT NULL DEFAULT 0;
    "#,
];

/// The same schema on a MariaDB/MySQL server, migration for migration:
/// schema version N means the same tables on both engines. Each migration
/// is a list of statements (the server runs one per call). Text compares
/// byte for byte (`utf8mb4_bin`), as in SQLite: `Alice` is not `alice`.
const SERVER_MIGRATIONS: &[&[&str]] = &[
    &[
        "CREATE TABLE budget_versions (
            version    BIGINT       NOT NULL PRIMARY KEY,
            synced_at  BIGINT       NOT NULL,
            author     VARCHAR(255) NOT NULL,
            source     TEXT         NOT NULL,
            toml       LONGTEXT     NOT NULL,
            changes    LONGTEXT     NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE budget_nodes (
            version         BIGINT       NOT NULL,
            path            VARCHAR(700) NOT NULL,
            share           DOUBLE       NOT NULL,
            effective_share DOUBLE       NOT NULL,
            is_leaf         TINYINT      NOT NULL,
            owners          TEXT         NOT NULL,
            accounts        TEXT         NOT NULL,
            members         TEXT         NOT NULL,
            PRIMARY KEY (version, path),
            FOREIGN KEY (version) REFERENCES budget_versions(version)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TRIGGER budget_versions_no_update BEFORE UPDATE ON budget_versions FOR EACH ROW
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'budget history is append-only'",
        "CREATE TRIGGER budget_versions_no_delete BEFORE DELETE ON budget_versions FOR EACH ROW
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'budget history is append-only'",
        "CREATE TRIGGER budget_nodes_no_update BEFORE UPDATE ON budget_nodes FOR EACH ROW
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'budget history is append-only'",
        "CREATE TRIGGER budget_nodes_no_delete BEFORE DELETE ON budget_nodes FOR EACH ROW
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'budget history is append-only'",
        "CREATE TABLE runs (
            job_id     BIGINT       NOT NULL,
            run_start  BIGINT       NOT NULL,
            run_end    BIGINT       NULL,
            leaf       VARCHAR(700) NULL,
            account    VARCHAR(255) NULL,
            user       VARCHAR(255) NULL,
            gpus       BIGINT       NOT NULL,
            allocated  TINYINT      NOT NULL,
            end_reason VARCHAR(255) NULL,
            PRIMARY KEY (job_id, run_start),
            KEY runs_by_end (run_end)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE contracts (
            job_id      BIGINT       NOT NULL PRIMARY KEY,
            user        VARCHAR(255) NOT NULL,
            account     VARCHAR(255) NULL,
            leaf        VARCHAR(700) NULL,
            min_runtime BIGINT       NOT NULL,
            priority    VARCHAR(255) NOT NULL,
            resumable   TINYINT      NOT NULL,
            submit_time BIGINT       NOT NULL,
            comment     TEXT         NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE usage_snapshot (
            leaf        VARCHAR(700) NOT NULL PRIMARY KEY,
            charged     BIGINT       NOT NULL,
            unallocated BIGINT       NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE usage_snapshot_meta (
            id             INT    NOT NULL PRIMARY KEY CHECK (id = 1),
            computed_at    BIGINT NOT NULL,
            budget_version BIGINT NOT NULL,
            capacity_gpus  BIGINT NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE TABLE events (
            id      BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
            at      BIGINT      NOT NULL,
            job_id  BIGINT      NOT NULL,
            kind    VARCHAR(64) NOT NULL,
            detail  TEXT        NOT NULL,
            KEY events_by_job (job_id)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    ],
    &[
        "CREATE TABLE ledger_identity (id VARCHAR(64) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        // RANDOM_BYTES is MariaDB 10.10+ only: this works on every server.
        "INSERT INTO ledger_identity (id) VALUES (MD5(CONCAT(UUID(), RAND(), NOW(6))))",
    ],
    &[
        "ALTER TABLE contracts ADD COLUMN gpus BIGINT NULL, ADD COLUMN end_time BIGINT NULL",
        "CREATE TABLE demand (
            leaf                VARCHAR(700) NOT NULL,
            at                  BIGINT       NOT NULL,
            pending_allocated   BIGINT       NOT NULL,
            pending_unallocated BIGINT       NOT NULL,
            running_allocated   BIGINT       NOT NULL,
            running_unallocated BIGINT       NOT NULL,
            PRIMARY KEY (leaf, at)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "CREATE INDEX contracts_by_submit ON contracts(submit_time)",
        "CREATE INDEX contracts_waiting ON contracts(end_time, submit_time)",
        "CREATE INDEX events_by_kind ON events(kind, at)",
    ],
    // Cluster names are at most 64 characters (`MAX_CLUSTER_NAME`): with a
    // leaf path of 700, a key stays within InnoDB's 3,072 bytes.
    &[
        "ALTER TABLE runs ADD COLUMN cluster VARCHAR(64) NOT NULL DEFAULT '' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, job_id, run_start)",
        "ALTER TABLE contracts ADD COLUMN cluster VARCHAR(64) NOT NULL DEFAULT '' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, job_id)",
        "ALTER TABLE demand ADD COLUMN cluster VARCHAR(64) NOT NULL DEFAULT '' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, leaf, at)",
        "ALTER TABLE usage_snapshot ADD COLUMN cluster VARCHAR(64) NOT NULL DEFAULT '' FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, leaf)",
        "CREATE TABLE usage_snapshot_meta_4 (
            cluster        VARCHAR(64) NOT NULL PRIMARY KEY,
            computed_at    BIGINT      NOT NULL,
            budget_version BIGINT      NOT NULL,
            capacity_gpus  BIGINT      NOT NULL
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "INSERT INTO usage_snapshot_meta_4 (cluster, computed_at, budget_version, capacity_gpus)
            SELECT '', computed_at, budget_version, capacity_gpus FROM usage_snapshot_meta",
        "DROP TABLE usage_snapshot_meta",
        "RENAME TABLE usage_snapshot_meta_4 TO usage_snapshot_meta",
        "ALTER TABLE events ADD COLUMN cluster VARCHAR(64) NOT NULL DEFAULT '' AFTER id",
    ],
    &["ALTER TABLE usage_snapshot ADD COLUMN running BIGINT NOT NULL DEFAULT 0"],
];

/// The schema version of this allot (the same on both engines).
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();
const _: () = assert!(MIGRATIONS.len() == SERVER_MIGRATIONS.len());

fn migrations() -> Migrations<'static> {
    Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect())
}

/// A connection to the ledger.
pub struct Ledger {
    conn: Conn,
    /// Where it is, for messages (a server's URL holds no password).
    path: String,
    /// The cluster this connection reads and writes as (Slurm's
    /// ClusterName); `None`: the lab, every cluster's rows (writes: '').
    cluster: Option<String>,
}

/// The longest cluster name a ledger keeps (Slurm's own limit for
/// slurmdbd's per-cluster tables is shorter).
pub const MAX_CLUSTER_NAME: usize = 64;

/// How long a writer waits for another writer before giving up. Writes are
/// short (milliseconds), so this only bites when something is stuck.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl Ledger {
    /// Opens (creating if needed) the ledger at `path` for reading and
    /// writing, migrating its schema to this version's.
    pub fn open(path: impl AsRef<Path>) -> Result<Ledger> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if let Some(filesystem) = health::network_filesystem(path) {
            return Err(LedgerError::NetworkFilesystem { path: name, filesystem });
        }
        let conn = Connection::open(path).map_err(|source| LedgerError::Sqlite { path: name.clone(), source })?;
        Self::setup(conn, name, true)
    }

    /// Opens an existing ledger for reading only. Refuses a ledger whose
    /// schema is not this version's, rather than misread it.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Ledger> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if !path.exists() {
            return Err(LedgerError::Missing { path: name });
        }
        if let Some(filesystem) = health::network_filesystem(path) {
            return Err(LedgerError::NetworkFilesystem { path: name, filesystem });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|source| LedgerError::Sqlite { path: name.clone(), source })?;
        Self::setup(conn, name, false)
    }

    /// Opens the ledger wherever it is: [`Ledger::open`] (`writable`) or
    /// [`Ledger::open_read_only`] for a file; for a server, connects, and
    /// when `writable` creates or migrates the schema (else refuses a
    /// database without this version's schema).
    pub fn connect(location: &Location, writable: bool) -> Result<Ledger> {
        match location {
            Location::File(path) if writable => Ledger::open(path),
            Location::File(path) => Ledger::open_read_only(path),
            Location::Server(server) => Self::connect_server(server, writable),
        }
    }

    /// [`Ledger::connect`] for reading only.
    pub fn connect_read_only(location: &Location) -> Result<Ledger> {
        Self::connect(location, false)
    }

    fn connect_server(server: &ServerLocation, writable: bool) -> Result<Ledger> {
        let path = Location::Server(server.clone()).to_string();
        let opts = server.options(writable).map_err(LedgerError::Config)?;
        let conn = mysql::Conn::new(opts).map_err(|source| LedgerError::Server { path: path.clone(), source })?;
        let ledger = Ledger { conn: Conn::Server(std::cell::RefCell::new(conn)), path, cluster: None };
        let found = ledger.server_schema_version()?;
        if writable {
            if found > SERVER_MIGRATIONS.len() {
                return Err(LedgerError::SchemaMismatch { path: ledger.path, found, expected: SCHEMA_VERSION });
            }
            if found < SERVER_MIGRATIONS.len() {
                ledger.migrate_server(SERVER_MIGRATIONS.len())?;
            }
        } else if found == 0 {
            return Err(LedgerError::Missing { path: ledger.path });
        } else if found != SCHEMA_VERSION {
            return Err(LedgerError::SchemaMismatch { path: ledger.path, found, expected: SCHEMA_VERSION });
        }
        Ok(ledger)
    }

    /// The server's schema version: 0 for a database allot never wrote.
    fn server_schema_version(&self) -> Result<usize> {
        let exists = self
            .conn
            .row("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'allot_schema_version'", &[])
            .map_err(self.err())?
            .map(|r| r.get::<i64>(0))
            .transpose()
            .map_err(self.err())?
            .unwrap_or(0);
        if exists == 0 {
            return Ok(0);
        }
        let row = self.conn.row("SELECT version FROM allot_schema_version", &[]).map_err(self.err())?;
        Ok(row.map(|r| r.get::<usize>(0)).transpose().map_err(self.err())?.unwrap_or(0))
    }

    /// Brings the server's schema to this version. The server commits each
    /// schema statement on its own, so migrations run under a named lock
    /// (two writers starting at once migrate once) and record their version
    /// one by one: one interrupted half-way is reported, not guessed at.
    fn migrate_server(&self, to: usize) -> Result<()> {
        let err = self.err();
        let locked = self.conn.row("SELECT GET_LOCK(CONCAT(DATABASE(), '.allot_schema'), 30)", &[]).map_err(&err)?;
        if locked.map(|r| r.get::<Option<i64>>(0)).transpose().map_err(&err)?.flatten() != Some(1) {
            return Err(LedgerError::Config(format!("ledger {}: another allot has been migrating the schema for 30 s; try again", self.path)));
        }
        let result = (|| {
            self.conn.exec("CREATE TABLE IF NOT EXISTS allot_schema_version (version INT NOT NULL) ENGINE=InnoDB", &[]).map_err(&err)?;
            let found = self.server_schema_version()?;
            if found == 0 && self.conn.row("SELECT version FROM allot_schema_version", &[]).map_err(&err)?.is_none() {
                self.conn.exec("INSERT INTO allot_schema_version (version) VALUES (0)", &[]).map_err(&err)?;
            }
            for (i, statements) in SERVER_MIGRATIONS.iter().enumerate().take(to).skip(found) {
                for sql in *statements {
                    self.conn.exec(sql, &[]).map_err(|e| match e {
                        DbError::Server(source) => {
                            LedgerError::Migration { path: self.path.clone(), source: MigrationError::Server { version: i + 1, source } }
                        }
                        e => (self.err())(e),
                    })?;
                }
                self.conn.exec("UPDATE allot_schema_version SET version = ?", params![(i + 1) as i64]).map_err(&err)?;
            }
            Ok(())
        })();
        let _ = self.conn.exec("DO RELEASE_LOCK(CONCAT(DATABASE(), '.allot_schema'))", &[]);
        result
    }

    /// A server database brought to an older schema `version` only (and
    /// left unusable by this allot), for tests of the migrations from it.
    #[cfg(feature = "testing")]
    pub fn create_server_schema_version(location: &Location, version: usize) -> Result<Ledger> {
        let Location::Server(server) = location else { return Err(LedgerError::Config("not a server ledger".into())) };
        let path = location.to_string();
        let opts = server.options(true).map_err(LedgerError::Config)?;
        let conn = mysql::Conn::new(opts).map_err(|source| LedgerError::Server { path: path.clone(), source })?;
        let ledger = Ledger { conn: Conn::Server(std::cell::RefCell::new(conn)), path, cluster: None };
        ledger.migrate_server(version)?;
        Ok(ledger)
    }

    /// A private in-memory ledger, for tests.
    pub fn in_memory() -> Result<Ledger> {
        let conn = Connection::open_in_memory().map_err(|source| LedgerError::Sqlite { path: ":memory:".into(), source })?;
        Self::setup(conn, ":memory:".into(), true)
    }

    fn setup(mut conn: Connection, path: String, writable: bool) -> Result<Ledger> {
        // The SQLite is the system's (see the workspace Cargo.toml), so it may be old.
        if rusqlite::version_number() < MIN_SQLITE_NUMBER {
            return Err(LedgerError::SqliteTooOld { path, found: rusqlite::version().to_owned() });
        }
        let sql = |source| LedgerError::Sqlite { path: path.clone(), source };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        if writable {
            // Switching to WAL and a migration's deferred transaction take
            // the write lock while holding a read lock; SQLite answers BUSY
            // at once then (waiting could deadlock) instead of calling the
            // busy handler. So when another writer is setting up the same
            // new file, try again until the busy timeout.
            let deadline = Instant::now() + BUSY_TIMEOUT;
            loop {
                match Self::setup_for_writing(&mut conn, &path) {
                    Err(e) if e.is_busy() && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                    result => break result?,
                }
            }
        } else {
            let found: usize = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(sql)?;
            if found != MIGRATIONS.len() {
                return Err(LedgerError::SchemaMismatch { path, found, expected: MIGRATIONS.len() });
            }
        }
        Ok(Ledger { conn: Conn::Sqlite(conn), path, cluster: None })
    }

    /// WAL, durability and the schema migrated to this version's.
    fn setup_for_writing(conn: &mut Connection, path: &str) -> Result<()> {
        let sql = |source| LedgerError::Sqlite { path: path.to_owned(), source };
        // WAL: readers (the plugins) never wait for a writer, nor it for them.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        // NORMAL is durable across application crashes in WAL mode; only
        // a power loss may drop the last transactions.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(sql)?;
        if let Err(source) = migrations().to_latest(conn) {
            // Two writers opening a new file at once both read version
            // 0; the one that loses the race finds the tables made. If
            // the other one's migration brought it to this version,
            // there is nothing left to do.
            let now: usize = conn.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap_or(0);
            if now != MIGRATIONS.len() {
                return Err(LedgerError::Migration { path: path.to_owned(), source: MigrationError::Sqlite(source) });
            }
        }
        Ok(())
    }

    /// Leaves the write-ahead log to others when this connection closes,
    /// instead of checkpointing it into the database file. For a long-lived
    /// writer (the priority plugin) that drops its connection when it finds
    /// the file overwritten in place: a checkpoint on close would write
    /// ledger pages into whatever now occupies the file. (Nothing to do on
    /// a server.)
    pub fn no_checkpoint_on_close(&self) -> Result<()> {
        if let Conn::Sqlite(c) = &self.conn {
            c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .map_err(|source| LedgerError::Sqlite { path: self.path.clone(), source })?;
        }
        Ok(())
    }

    /// This connection as `cluster` (`None`: the lab as a whole): its writes
    /// are that cluster's, its reads see that cluster's rows only. The lab
    /// sees every cluster's, with usage summed per leaf.
    pub fn for_cluster(mut self, cluster: Option<&str>) -> Result<Ledger> {
        self.set_cluster(cluster)?;
        Ok(self)
    }

    /// [`Ledger::for_cluster`] in place.
    pub fn set_cluster(&mut self, cluster: Option<&str>) -> Result<()> {
        if let Some(name) = cluster {
            if name.is_empty() || name.len() > MAX_CLUSTER_NAME || name.chars().any(|c| c.is_control()) {
                return Err(LedgerError::Config(format!(
                    "cluster name '{}' cannot key a ledger: it must be 1 to {MAX_CLUSTER_NAME} characters, none of them control characters",
                    name.escape_debug()
                )));
            }
        }
        self.cluster = cluster.map(str::to_owned);
        Ok(())
    }

    /// The cluster this connection is scoped to; `None`: the lab.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The cluster written into rows: '' for an unscoped connection.
    fn cluster_key(&self) -> &str {
        self.cluster.as_deref().unwrap_or("")
    }

    /// `cluster = ? AND ` (qualified by `alias.` if given) and its
    /// parameter when scoped to one cluster; nothing for the lab.
    fn cluster_filter(&self, alias: &str) -> (String, Vec<db::Value>) {
        match &self.cluster {
            Some(c) => (format!("{alias}cluster = ? AND "), vec![db::Value::from(c)]),
            None => (String::new(), Vec::new()),
        }
    }

    /// Every cluster the ledger holds rows of, by name ('' for rows written
    /// before schema 4 and not adopted yet, or by an unscoped writer).
    pub fn clusters(&self) -> Result<Vec<String>> {
        self.read(|c| {
            let rows = c.rows(
                "SELECT cluster FROM usage_snapshot_meta UNION SELECT DISTINCT cluster FROM contracts UNION SELECT DISTINCT cluster FROM runs ORDER BY 1",
                &[],
            )?;
            rows.iter().map(|r| r.get::<String>(0)).collect()
        })
    }

    /// How many runs, contracts and snapshots belong to no cluster (written
    /// before schema 4, or by an unscoped writer).
    pub fn unclustered_rows(&self) -> Result<u64> {
        self.read(|c| {
            let row = c.row(
                "SELECT (SELECT COUNT(*) FROM runs WHERE cluster = '') + (SELECT COUNT(*) FROM contracts WHERE cluster = '') + (SELECT COUNT(*) FROM usage_snapshot_meta WHERE cluster = '')",
                &[],
            )?;
            row.map_or(Ok(0), |r| r.get::<i64>(0)).map(|n| n.max(0) as u64)
        })
    }

    /// Makes the rows of no cluster (written before schema 4, when the
    /// ledger served one cluster) this connection's cluster's, in one
    /// write; returns how many rows it adopted. Nothing for an unscoped
    /// connection. A row that would collide with one the cluster already
    /// has stays as it was.
    pub fn adopt_unclustered(&mut self) -> Result<u64> {
        let Some(cluster) = self.cluster.clone() else { return Ok(0) };
        self.write(|c| {
            let ignore = match c.dialect() {
                Dialect::Sqlite => "UPDATE OR IGNORE",
                Dialect::MySql => "UPDATE IGNORE",
            };
            let mut adopted = 0;
            let mut tables = vec!["runs", "contracts", "demand", "events"];
            // A snapshot is whole: the old one moves only if the cluster has none.
            if c.row("SELECT 1 FROM usage_snapshot_meta WHERE cluster = ?", params![&cluster])?.is_none() {
                tables.extend(["usage_snapshot", "usage_snapshot_meta"]);
            }
            for table in tables {
                adopted += c.exec(&format!("{ignore} {table} SET cluster = ? WHERE cluster = ''"), params![&cluster])?;
            }
            c.exec("DELETE FROM usage_snapshot WHERE cluster = ''", &[])?;
            c.exec("DELETE FROM usage_snapshot_meta WHERE cluster = ''", &[])?;
            Ok(adopted)
        })
    }

    /// Where this ledger lives, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether this ledger is on a database server.
    pub fn is_server(&self) -> bool {
        self.conn.dialect() == Dialect::MySql
    }

    fn err(&self) -> impl Fn(DbError) -> LedgerError + '_ {
        move |e| LedgerError::from_db(&self.path, e)
    }

    /// Runs `f` in one write transaction. SQLite: `BEGIN IMMEDIATE` takes
    /// the write lock up front, so it cannot fail half-way on a lock
    /// upgrade. Server: the identity row, locked first, is the same one
    /// writer lock: writes never interleave, as on SQLite. Anything but
    /// success rolls back.
    fn write<T>(&mut self, f: impl FnOnce(&Conn) -> DbResult<T>) -> Result<T> {
        let (begin, lock) = match self.conn.dialect() {
            Dialect::Sqlite => ("BEGIN IMMEDIATE", None),
            Dialect::MySql => ("START TRANSACTION", Some("SELECT id FROM ledger_identity FOR UPDATE")),
        };
        self.conn.batch(begin).map_err(self.err())?;
        let out = lock.map_or(Ok(()), |sql| self.conn.rows(sql, &[]).map(drop)).and_then(|()| f(&self.conn));
        match out {
            Ok(v) => match self.conn.batch("COMMIT") {
                Ok(()) => Ok(v),
                Err(e) => {
                    let _ = self.conn.batch("ROLLBACK");
                    Err((self.err())(e))
                }
            },
            Err(e) => {
                let _ = self.conn.batch("ROLLBACK");
                Err((self.err())(e))
            }
        }
    }

    /// Runs `f` in one read transaction: everything it reads is one snapshot.
    fn read<T>(&self, f: impl FnOnce(&Conn) -> DbResult<T>) -> Result<T> {
        let err = self.err();
        let begin = match self.conn.dialect() {
            Dialect::Sqlite => "BEGIN DEFERRED",
            Dialect::MySql => "START TRANSACTION WITH CONSISTENT SNAPSHOT",
        };
        self.conn.batch(begin).map_err(&err)?;
        let out = f(&self.conn);
        // A read transaction has nothing to commit; end it either way.
        let end = self.conn.batch("COMMIT");
        let out = out.map_err(&err)?;
        end.map_err(&err)?;
        Ok(out)
    }

    /// Checks the database's integrity: SQLite's `PRAGMA quick_check`; a
    /// server's `CHECK TABLE` of every ledger table. Returns the problems.
    pub fn check(&self) -> Result<Vec<String>> {
        match self.conn.dialect() {
            Dialect::Sqlite => self
                .read(|c| c.rows("PRAGMA quick_check", &[])?.iter().map(|r| r.get::<String>(0)).collect::<DbResult<Vec<String>>>())
                .map(|v| v.into_iter().filter(|s| s != "ok").collect()),
            Dialect::MySql => {
                let rows = self
                    .conn
                    .rows(
                        "CHECK TABLE budget_versions, budget_nodes, runs, contracts, usage_snapshot, usage_snapshot_meta, events, ledger_identity, demand",
                        &[],
                    )
                    .map_err(self.err())?;
                // Columns: Table, Op, Msg_type, Msg_text; one "status OK" per table.
                let mut problems = Vec::new();
                for r in rows {
                    let (table, kind, text) =
                        (r.get::<String>(0).map_err(self.err())?, r.get::<String>(2).map_err(self.err())?, r.get::<String>(3).map_err(self.err())?);
                    if !(kind == "status" && text == "OK") && kind != "note" {
                        problems.push(format!("{table}: {kind}: {text}"));
                    }
                }
                Ok(problems)
            }
        }
    }

    /// The SQLite connection, for tests that reach past the ledger's API.
    #[doc(hidden)]
    pub fn sqlite_connection(&self) -> Option<&rusqlite::Connection> {
        match &self.conn {
            Conn::Sqlite(c) => Some(c),
            Conn::Server(_) => None,
        }
    }

    /// Runs one statement of the caller's, for tests that check what the
    /// schema refuses (history rewritten by hand, ...).
    #[doc(hidden)]
    pub fn execute_raw(&self, sql: &str) -> std::result::Result<u64, DbError> {
        self.conn.exec(sql, &[])
    }
}

/// The default ledger location when neither `--ledger` nor `ALLOT_LEDGER`
/// says otherwise.
pub const DEFAULT_LEDGER_PATH: &str = "/var/lib/allot/ledger.db";

/// `--ledger`, else `$ALLOT_LEDGER`, else [`DEFAULT_LEDGER_PATH`].
pub fn resolve_path(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("ALLOT_LEDGER") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_LEDGER_PATH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_valid_and_idempotent() {
        migrations().validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        drop(Ledger::open(&path).unwrap());
        let again = Ledger::open(&path).unwrap();
        assert!(again.check().unwrap().is_empty());
        let mode: String = again.sqlite_connection().unwrap().pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let ro = Ledger::open_read_only(&path).unwrap();
        assert!(ro.current_budget().unwrap().is_none());
    }

    #[test]
    fn read_only_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = Ledger::open_read_only(dir.path().join("nope.db")).err().unwrap();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
