//! What the plugins decide from, kept fresh from the ledger off slurmctld's
//! locked paths.
//!
//! A [`Follower`] reads the ledger (budget version, usage snapshot) and
//! publishes an immutable [`PolicySnapshot`] through an atomic pointer swap;
//! the Slurm callbacks only ever `load()` it, which never blocks and never
//! touches SQLite. If the ledger disappears, is locked or corrupt, the last
//! good snapshot stays in place and the problem is logged once (and its end,
//! once). If no budget was read since slurmctld started, the last good copy
//! in `StateSaveLocation` ([`crate::last_good`]) stands in for the ledger;
//! with neither, nothing is published and the plugins refuse to decide.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use allot::budget::BudgetTree;
use allot::contract::ContractRules;
use allot::fairshare::Ranking;
use allot_ledger::health::Header;
use allot_ledger::{Ledger, Location, UsageSnapshot};
use arc_swap::ArcSwapOption;

use crate::last_good::LastGood;

/// One consistent view of the budget and the fair-share order.
#[derive(Debug)]
pub struct PolicySnapshot {
    pub budget_version: i64,
    pub tree: Arc<BudgetTree>,
    pub rules: ContractRules,
    /// The order from the usage the priority plugin last recorded; all
    /// leaves unused until it has recorded any.
    pub ranking: Ranking,
    /// `computed_at` of the usage snapshot behind `ranking` (0: none yet).
    pub usage_at: i64,
    /// `Some(written_at)` when this comes from the last good copy, not the
    /// ledger (which could not be read since slurmctld started).
    pub from_copy: Option<i64>,
}

/// Logs a recurring problem once, and its end once: a broken ledger must not
/// flood slurmctld's log every period.
#[derive(Debug, Default)]
pub struct ProblemLog {
    current: Option<String>,
    /// When a problem was last logged: at most one line a minute, however
    /// the message changes (counts in it, per-job details).
    last_logged: Option<std::time::Instant>,
}

/// The least time between two logged problems of one [`ProblemLog`].
const PROBLEM_LOG_INTERVAL: Duration = Duration::from_secs(60);

impl ProblemLog {
    /// Records the outcome of one attempt.
    pub fn report(&mut self, what: &str, outcome: Result<(), String>) {
        match (outcome, &self.current) {
            (Ok(()), Some(_)) => {
                log::info!("{what}: recovered");
                self.current = None;
                self.last_logged = None;
            }
            (Ok(()), None) => {}
            (Err(e), _) => {
                let due = self.last_logged.is_none_or(|t| t.elapsed() >= PROBLEM_LOG_INTERVAL);
                if due && self.current.as_ref() != Some(&e) || self.last_logged.is_none() {
                    log::error!("{what}: {e}; carrying on with the last good state");
                    self.last_logged = Some(std::time::Instant::now());
                }
                self.current = Some(e);
            }
        }
    }
    pub fn is_failing(&self) -> bool {
        self.current.is_some()
    }
}

/// The ledger, with a connection that follows it. A file: a ledger
/// replaced or deleted under us is reopened, since a connection to an
/// unlinked file would go on using a ledger nobody else sees. A server:
/// reconnected after any error (`close`).
pub struct LedgerFile {
    location: Location,
    /// The cluster its rows are this slurmctld's (Slurm's ClusterName):
    /// several clusters may share one server ledger.
    cluster: Option<String>,
    writable: bool,
    /// The connection, the inode of the file it was opened on, and that of
    /// the write-ahead log it writes to once there is one (0 and `None` on
    /// a server).
    open: Option<(Ledger, u64, Option<u64>)>,
    /// Counts openings: what was read under another one may come from
    /// another file (a deleted file's inode number may be reused).
    generation: u64,
    /// The last use of the connection failed (or connecting did): it was
    /// dropped and is not open again yet.
    failed: bool,
}

/// The first bytes of the file at `path`, read through a descriptor that
/// stays open for the life of the process (one per file: a handful over
/// slurmctld's life). SQLite holds POSIX advisory locks on the ledger, and
/// closing any descriptor of a file drops all of the process's locks on it:
/// another process could then take the ledger for unused, checkpoint and
/// delete the write-ahead log under the plugins' connections, or truncate
/// the shared-memory file they have mapped (slurmctld died of SIGBUS so).
fn header_kept_open(path: &Path) -> std::io::Result<Header> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    static KEPT: Mutex<Vec<((u64, u64), std::fs::File)>> = Mutex::new(Vec::new());
    let meta = std::fs::metadata(path)?;
    let key = (meta.dev(), meta.ino());
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let index = match kept.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            let file = std::fs::File::open(path)?;
            let m = file.metadata()?;
            // Filed under the inode actually opened (the path may have been
            // replaced in between).
            kept.push(((m.dev(), m.ino()), file));
            kept.len() - 1
        }
    };
    let mut buf = [0u8; 16];
    let n = kept[index].1.read_at(&mut buf, 0)?;
    Ok(Header::of(&buf[..n]))
}

/// SQLite's write-ahead log beside a database file.
fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

impl LedgerFile {
    /// For reading, as `cluster` (its runs and usage; `None`: every
    /// cluster's): the file (or the server's schema) must exist.
    pub fn read_only(location: impl Into<Location>, cluster: Option<&str>) -> LedgerFile {
        LedgerFile { location: location.into(), cluster: cluster.map(str::to_owned), writable: false, open: None, generation: 0, failed: false }
    }
    /// For writing, as `cluster`: a missing file is created (empty, no
    /// budget); a server's schema is created or migrated. On each new
    /// connection, the rows of no cluster (a ledger from before clusters
    /// were named, schema 3 or older) become this cluster's.
    pub fn writable(location: impl Into<Location>, cluster: Option<&str>) -> LedgerFile {
        LedgerFile { location: location.into(), cluster: cluster.map(str::to_owned), writable: true, open: None, generation: 0, failed: false }
    }

    /// A new connection, scoped to this file's cluster. A writer on a file
    /// ledger (one controller host, so one cluster) adopts the rows
    /// written before clusters were named; on a server, which several
    /// clusters may share, which cluster wrote them is for an admin to say
    /// (`allot ledger adopt --cluster NAME`), and the writer says so.
    fn scoped(&self, mut ledger: Ledger) -> Result<Ledger, String> {
        ledger.set_cluster(self.cluster.as_deref()).map_err(|e| e.to_string())?;
        if !self.writable || self.cluster.is_none() {
            return Ok(ledger);
        }
        let cluster = self.cluster.as_deref().unwrap_or("");
        if self.location.is_server() {
            let unnamed = ledger.unclustered_rows().map_err(|e| e.to_string())?;
            if unnamed > 0 {
                log::error!(
                    "ledger {}: {unnamed} runs, contracts and snapshots were written before clusters were named and count for no cluster; if cluster {cluster} wrote them, run `allot ledger adopt --cluster {cluster}` (as an admin)",
                    self.location
                );
            }
        } else {
            let adopted = ledger.adopt_unclustered().map_err(|e| e.to_string())?;
            if adopted > 0 {
                log::info!("ledger {}: {adopted} rows written before clusters were named are now cluster {cluster}'s", self.location);
            }
        }
        Ok(ledger)
    }
    pub fn location(&self) -> &Location {
        &self.location
    }
    /// The cluster its rows are (`None`: every cluster's).
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The connection, (re)opened if needed, and its generation: after a
    /// reopening the file may be another, whose version numbers are a
    /// different history.
    pub fn get(&mut self) -> Result<(&mut Ledger, u64), String> {
        let path = match &self.location {
            Location::File(path) => path.clone(),
            Location::Server(_) => {
                if self.open.is_none() {
                    // Connecting to a dead server takes at most
                    // SERVER_CONNECT_TIMEOUT, on this thread, never on
                    // slurmctld's locked paths.
                    self.failed = true;
                    let ledger = Ledger::connect(&self.location, self.writable).map_err(|e| e.to_string())?;
                    let ledger = self.scoped(ledger)?;
                    self.open = Some((ledger, 0, None));
                    self.generation += 1;
                    self.failed = false;
                }
                let (ledger, _, _) = self.open.as_mut().expect("opened above");
                return Ok((ledger, self.generation));
            }
        };
        let now_inode = inode(&path);
        if self.open.as_ref().is_some_and(|(_, ino, _)| Some(*ino) != now_inode) {
            self.open = None;
        }
        // A file overwritten in place keeps its inode: its first bytes tell.
        // (SQLite would go on using its cached pages and its WAL, and the
        // runs written meanwhile would be lost with the file.)
        if let Ok(Header::NotSqlite) = header_kept_open(&path) {
            self.open = None;
            return Err(format!(
                "{} is not a SQLite database any more (overwritten?); nothing is written to it. Move it aside with `allot ledger recover`: the runs kept in memory are then written to the new ledger",
                path.display()
            ));
        }
        // A write-ahead log deleted or replaced under an open connection
        // takes every later write with it: reopen (the caller writes again
        // what the lost log held, see the priority plugin's worker).
        let wal = wal_path(&path);
        if let Some((_, _, wal_inode)) = self.open.as_mut() {
            match (*wal_inode, inode(&wal)) {
                (Some(was), now) if now != Some(was) => {
                    log::warn!("the ledger's write-ahead log {} was deleted or replaced; reopening the ledger", wal.display());
                    self.open = None;
                }
                (None, now) => *wal_inode = now,
                _ => {}
            }
        }
        if self.open.is_none() {
            let ledger = if self.writable { Ledger::open(&path) } else { Ledger::open_read_only(&path) }.map_err(|e| e.to_string())?;
            ledger.no_checkpoint_on_close().map_err(|e| e.to_string())?;
            let ledger = self.scoped(ledger)?;
            let ino = inode(&path).ok_or_else(|| format!("{} vanished while opening it", path.display()))?;
            self.open = Some((ledger, ino, inode(&wal)));
            self.generation += 1;
        }
        let (ledger, _, _) = self.open.as_mut().expect("opened above");
        Ok((ledger, self.generation))
    }

    /// After a failed read from a server: drop the connection, which may be
    /// dead (server restarted, network cut), so the next `get` reconnects.
    /// (A file's connection is reopened when the file changes; see `get`.)
    pub fn close_if_server_failed<T>(&mut self, result: &Result<T, String>) {
        if result.is_err() && self.location.is_server() {
            self.close();
        }
    }

    /// Drops the connection (after an error): the next `get` reopens it.
    pub fn close(&mut self) {
        self.open = None;
        self.failed = true;
    }

    /// A server ledger whose connection failed and was dropped: the next
    /// `get` would connect again, which a server that does not answer holds
    /// for the I/O timeout. (Not a connection never opened yet: that server
    /// has not failed.)
    pub fn is_server_that_failed(&self) -> bool {
        self.location.is_server() && self.failed && self.open.is_none()
    }
}

/// A budget as read: ((file generation, version), tree, the file's text).
type KnownBudget = ((u64, i64), Arc<BudgetTree>, Arc<str>);

/// Reads the ledger into snapshots.
pub struct Follower {
    ledger: LedgerFile,
    /// (file generation, budget version, digest of the usage) of the last
    /// snapshot: the lab's usage may change while this cluster's time does not.
    seen: Option<(u64, i64, u64)>,
    published: Arc<ArcSwapOption<PolicySnapshot>>,
    problems: ProblemLog,
    /// The last good budget: (file generation, version) it was read at
    /// (generation 0: the last good copy), and the budget file's text.
    /// Kept while the ledger is broken or gone, so scheduling goes on.
    tree: Option<KnownBudget>,
    /// Where the last good copy is (slurmctld's StateSaveLocation).
    last_good: Option<PathBuf>,
    /// The copy the budget came from, while it does.
    copy: Option<LastGood>,
    copy_problems: ProblemLog,
}

impl Follower {
    /// Follows the ledger at `path` as `cluster` (its usage snapshot);
    /// `last_good`: the copy to fall back on when no budget could be read
    /// from it since this process started.
    pub fn new(path: impl Into<Location>, cluster: Option<&str>, last_good: Option<PathBuf>) -> Follower {
        Follower {
            ledger: LedgerFile::read_only(path, cluster),
            seen: None,
            published: Arc::new(ArcSwapOption::empty()),
            problems: ProblemLog::default(),
            tree: None,
            last_good,
            copy: None,
            copy_problems: ProblemLog::default(),
        }
    }

    /// The handle callbacks read from.
    pub fn handle(&self) -> Arc<ArcSwapOption<PolicySnapshot>> {
        self.published.clone()
    }

    /// Reads the ledger once; publishes a new snapshot if anything changed.
    /// Returns whether it did.
    pub fn refresh(&mut self) -> bool {
        let result = self.try_refresh();
        self.ledger.close_if_server_failed(&result);
        let mut changed = *result.as_ref().unwrap_or(&false);
        if result.is_err() {
            changed |= self.fall_back_to_copy();
        }
        self.problems.report("reading the ledger", result.map(|_| ()));
        changed
    }

    /// Reads only the current budget (for the priority plugin, which
    /// computes usage itself). Returns its version and tree, or the last
    /// good ones if the ledger cannot be read.
    pub fn refresh_budget(&mut self) -> Option<(i64, Arc<BudgetTree>)> {
        let result = self.read_budget().map(|_| ());
        self.ledger.close_if_server_failed(&result);
        if result.is_ok() {
            self.copy = None;
        } else {
            self.fall_back_to_copy();
        }
        self.problems.report("reading the ledger", result);
        self.current_budget()
    }

    /// The budget as last read (or the last good copy's), without reading.
    pub fn current_budget(&self) -> Option<(i64, Arc<BudgetTree>)> {
        self.tree.as_ref().map(|((_, version), tree, _)| (*version, tree.clone()))
    }

    /// See [`LedgerFile::is_server_that_failed`].
    pub fn is_server_that_failed(&self) -> bool {
        self.ledger.is_server_that_failed()
    }

    /// The budget's version and the text of its file, as last read.
    pub fn budget_source(&self) -> Option<(i64, Arc<str>)> {
        self.tree.as_ref().map(|((_, version), _, toml)| (*version, toml.clone()))
    }

    /// While the budget comes from the last good copy: the usage it holds.
    pub fn copy_usage(&self) -> Option<UsageSnapshot> {
        self.copy.as_ref().and_then(|c| c.usage.as_ref()).map(|u| u.snapshot())
    }

    /// With no budget read since this process started, takes the last good
    /// copy's, and publishes a snapshot from it. Returns whether it did.
    fn fall_back_to_copy(&mut self) -> bool {
        self.take_copy(true)
    }

    /// [`Follower::fall_back_to_copy`]; `failed`: because the ledger could
    /// not be read (else: to start before a server's first answer).
    fn take_copy(&mut self, failed: bool) -> bool {
        if self.tree.is_some() {
            return false; // what this process last read is at least as new
        }
        let Some(path) = self.last_good.clone() else { return false };
        let (copy, tree) = match LastGood::read(&path) {
            Ok(Some(found)) => found,
            // None yet (a first start) is news only when the ledger failed.
            Ok(None) if !failed => return false,
            Ok(None) => {
                self.copy_problems.report("the last good copy", Err(format!("there is none at {}", path.display())));
                return false;
            }
            Err(e) => {
                self.copy_problems.report("the last good copy", Err(e));
                return false;
            }
        };
        if failed {
            log::warn!(
                "no budget can be read from the ledger {}: deciding from the last good copy {} (budget version {}, written {} s ago) until one can",
                self.ledger.location(),
                path.display(),
                copy.budget_version,
                crate::now() - copy.written_at
            );
        } else {
            log::info!("starting from the last good copy {} (budget version {}) until the ledger's server first answers", path.display(), copy.budget_version);
        }
        let tree = Arc::new(tree.for_cluster(self.ledger.cluster()));
        let usage = copy.usage.as_ref().map(|u| u.snapshot());
        let ranking = match &usage {
            Some(u) => u.ranking(&tree),
            None => Ranking::compute(&tree, &vec![0; tree.leaves.len()], tree.settings.gpus.unwrap_or(1), 0),
        };
        let rules = ContractRules::from(&tree.settings);
        self.published.store(Some(Arc::new(PolicySnapshot {
            budget_version: copy.budget_version,
            tree: tree.clone(),
            rules,
            ranking,
            usage_at: usage.as_ref().map_or(0, |u| u.computed_at),
            from_copy: Some(copy.written_at),
        })));
        self.tree = Some(((0, copy.budget_version), tree, Arc::from(copy.budget_toml.as_str())));
        self.copy = Some(copy);
        true
    }

    /// The current budget, re-read only when its (file, version) changed.
    fn read_budget(&mut self) -> Result<(u64, i64, Arc<BudgetTree>), String> {
        let (ledger, generation) = self.ledger.get()?;
        let version = ledger.current_budget_version().map_err(|e| e.to_string())?;
        let Some(version) = version else {
            return Err(format!("{} holds no budget yet (sync one with `allot sync`)", self.ledger.location()));
        };
        if let Some((key, tree, _)) = &self.tree {
            if *key == (generation, version) {
                return Ok((generation, version, tree.clone()));
            }
        }
        let stored = ledger.current_budget().map_err(|e| e.to_string())?.ok_or("the budget vanished while reading")?;
        let tree = stored.tree().map_err(|e| format!("budget version {} does not validate: {e}", stored.version))?;
        // Accounts that edits within the window took from a leaf keep charging it.
        let since = crate::now() - tree.settings.lookback;
        let earlier: Vec<BudgetTree> =
            ledger.earlier_versions_since(stored.version, since).map_err(|e| e.to_string())?.iter().filter_map(|v| v.tree().ok()).collect();
        // As this cluster shares its GPUs (per-cluster shares and funding).
        let tree = Arc::new(tree.with_account_history(&earlier).for_cluster(self.ledger.cluster()));
        self.tree = Some(((generation, stored.version), tree.clone(), Arc::from(stored.toml.as_str())));
        Ok((generation, stored.version, tree))
    }

    fn try_refresh(&mut self) -> Result<bool, String> {
        let (generation, version, tree) = self.read_budget()?;
        self.copy = None;
        // This cluster's usage, or the lab's (`fair_share_usage = "lab"`): the
        // same the priority plugin ranked by.
        let snapshot = self.ledger.get()?.0.ranked_usage(&tree).map_err(|e| e.to_string())?;
        let usage_at = snapshot.as_ref().map_or(0, |s| s.computed_at);
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            snapshot.hash(&mut h);
            h.finish()
        };
        if self.seen == Some((generation, version, digest)) {
            return Ok(false);
        }
        let ranking = match &snapshot {
            Some(s) => s.ranking(&tree),
            None => Ranking::compute(&tree, &vec![0; tree.leaves.len()], tree.settings.gpus.unwrap_or(1), 0),
        };
        let rules = ContractRules::from(&tree.settings);
        self.published.store(Some(Arc::new(PolicySnapshot { budget_version: version, tree, rules, ranking, usage_at, from_copy: None })));
        self.seen = Some((generation, version, digest));
        Ok(true)
    }

    pub fn is_failing(&self) -> bool {
        self.problems.is_failing()
    }
}

/// A [`Follower`] on its own thread, refreshing every `period` until dropped.
pub struct FollowerThread {
    published: Arc<ArcSwapOption<PolicySnapshot>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl FollowerThread {
    /// Reads the ledger once right away (so the first callbacks have a
    /// snapshot), then every `period` on a thread named `name`.
    pub fn start(name: &str, path: &Location, cluster: Option<&str>, last_good: Option<PathBuf>, period: Duration) -> std::io::Result<FollowerThread> {
        let mut follower = Follower::new(path.clone(), cluster, last_good);
        // A file is read at once (milliseconds). A server may be down or cut
        // off, and this runs on slurmctld's main thread while it starts:
        // decide from the last good copy until the thread's first read,
        // which it makes right away.
        let mut read_now = path.is_server();
        if read_now {
            follower.take_copy(false);
        } else {
            follower.refresh();
        }
        let published = follower.handle();
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop_thread = stop.clone();
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            let (lock, cvar) = &*stop_thread;
            loop {
                let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let wait = if std::mem::take(&mut read_now) { Duration::ZERO } else { period };
                let (guard, _) = cvar.wait_timeout_while(guard, wait, |stopped| !*stopped).unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
                drop(guard);
                // A panic here must not take slurmctld down: catch it, log it,
                // and keep the last snapshot.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| follower.refresh())).is_err() {
                    log::error!("ledger refresh panicked; keeping the last snapshot");
                }
            }
        })?;
        Ok(FollowerThread { published, stop, thread: Some(thread) })
    }

    /// The current snapshot, if any was ever read. Lock-free, and without
    /// touching the snapshot's reference count (preempt_p_preemptable calls
    /// this for every running job on every pass).
    pub fn load(&self) -> arc_swap::Guard<Option<Arc<PolicySnapshot>>> {
        self.published.load()
    }
}

impl Drop for FollowerThread {
    fn drop(&mut self) {
        let (lock, cvar) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cvar.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_ledger::{LeafUsage, Period, UsageSnapshot};

    const BUDGET: &str = "[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n";

    #[test]
    fn a_server_has_failed_only_once_a_connection_to_it_failed() {
        // Nothing listens on port 1: connecting is refused at once.
        let location = Location::parse("mysql://allot@127.0.0.1:1/allot?password_file=/nonexistent").unwrap();
        let mut server = LedgerFile::writable(location, Some("c"));
        assert!(!server.is_server_that_failed(), "never connected is not failed");
        assert!(server.get().is_err());
        assert!(server.is_server_that_failed());
        let dir = tempfile::tempdir().unwrap();
        let mut file = LedgerFile::writable(dir.path().join("l.db"), None);
        file.close();
        assert!(!file.is_server_that_failed(), "a file is no server");
    }

    #[test]
    fn follows_versions_and_usage_and_survives_a_broken_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut f = Follower::new(&path, None, None);
        assert!(!f.refresh());
        assert!(f.is_failing(), "a missing ledger is a problem");
        assert!(f.handle().load().is_none());

        let mut l = Ledger::open(&path).unwrap();
        l.sync_budget(BUDGET, &BudgetTree::parse(BUDGET).unwrap(), "root", "t", 1).unwrap();
        assert!(f.refresh());
        assert!(!f.is_failing());
        let s = f.handle().load_full().unwrap();
        assert_eq!((s.budget_version, s.usage_at), (1, 0));
        assert!(!f.refresh(), "nothing changed");

        // a used a lot: b ranks first.
        let snapshot = UsageSnapshot {
            computed_at: 50,
            budget_version: 1,
            capacity_gpus: 8,
            leaves: vec![LeafUsage { leaf: "a".into(), charged: 1000, unallocated: 0, running: 0 }],
        };
        l.record_period(&Period { snapshot: Some(snapshot), ..Default::default() }).unwrap();
        assert!(f.refresh());
        let s = f.handle().load_full().unwrap();
        assert_eq!(s.ranking.leaves_in_order, vec![1, 0]);

        // Corrupt the file: the snapshot stays.
        drop(l);
        std::fs::write(&path, b"this is not a database").unwrap();
        let _ = std::fs::remove_file(dir.path().join("l.db-wal"));
        let _ = std::fs::remove_file(dir.path().join("l.db-shm"));
        // An open connection may not notice until it re-reads a page; either
        // way the last good snapshot stays, and a fresh reader reports it.
        assert!(!f.refresh());
        assert_eq!(f.handle().load_full().unwrap().ranking.leaves_in_order, vec![1, 0]);
        let mut fresh = Follower::new(&path, None, None);
        assert!(!fresh.refresh());
        assert!(fresh.is_failing());

        // Deleted, then a fresh ledger appears: followed again.
        std::fs::remove_file(&path).unwrap();
        assert!(!f.refresh());
        let (version, tree) = f.refresh_budget().expect("the last good budget stays while the ledger is gone");
        assert_eq!((version, tree.leaves.len()), (1, 2));
        let mut l = Ledger::open(&path).unwrap();
        let v2 = BUDGET.replace("share=1\naccounts=[\"b\"]", "share=3\naccounts=[\"b\"]");
        l.sync_budget(&v2, &BudgetTree::parse(&v2).unwrap(), "root", "t", 2).unwrap();
        assert!(f.refresh());
        assert!(!f.is_failing());
        let s = f.handle().load_full().unwrap();
        assert_eq!(s.budget_version, 1, "the fresh ledger starts at version 1 again");
        assert!((s.tree.node(s.tree.find("b").unwrap()).effective_share - 0.75).abs() < 1e-12);
    }

    #[test]
    fn a_process_that_never_read_the_ledger_decides_from_the_last_good_copy() {
        use crate::last_good::{self, LastGood};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let copy_path = last_good::path_in(dir.path());
        std::fs::write(&path, b"garbage, not a ledger").unwrap();

        // No copy: nothing is published (the plugins refuse to decide).
        let mut f = Follower::new(&path, None, Some(copy_path.clone()));
        assert!(!f.refresh());
        assert!(f.handle().load().is_none());
        assert!(f.refresh_budget().is_none());

        // A copy where b used a lot: a ranks first, from the copy.
        let usage = UsageSnapshot {
            computed_at: 50,
            budget_version: 4,
            capacity_gpus: 8,
            leaves: vec![LeafUsage { leaf: "b".into(), charged: 900, unallocated: 0, running: 0 }],
        };
        LastGood::new(60, &(&path).into(), 4, BUDGET, Some(&usage)).write(&copy_path).unwrap();
        assert!(f.refresh());
        let s = f.handle().load_full().unwrap();
        assert_eq!((s.budget_version, s.usage_at, s.from_copy), (4, 50, Some(60)));
        assert_eq!(s.ranking.leaves_in_order, vec![0, 1]);
        assert_eq!(f.copy_usage(), Some(usage));
        assert_eq!(f.budget_source().map(|(v, t)| (v, t.to_string())), Some((4, BUDGET.to_owned())));
        assert!(!f.refresh(), "published once");

        // The ledger comes back (an admin synced a budget): it wins, and the copy is dropped.
        std::fs::remove_file(&path).unwrap();
        let mut l = Ledger::open(&path).unwrap();
        l.sync_budget(BUDGET, &BudgetTree::parse(BUDGET).unwrap(), "root", "t", 1).unwrap();
        assert!(f.refresh());
        let s = f.handle().load_full().unwrap();
        assert_eq!((s.budget_version, s.from_copy), (1, None));
        assert_eq!(f.copy_usage(), None);

        // A process that read the ledger once keeps that, not the copy.
        drop(l);
        std::fs::write(&path, b"garbage again").unwrap();
        assert!(!f.refresh());
        assert_eq!(f.handle().load_full().unwrap().budget_version, 1);

        // A copy it cannot use is not used.
        std::fs::write(&copy_path, b"{").unwrap();
        let mut g = Follower::new(&path, None, Some(copy_path));
        assert!(!g.refresh());
        assert!(g.handle().load().is_none());
    }
}
