//! Runs (occupancy intervals), contracts and events, written by the
//! priority plugin once per period in one transaction.

use crate::db::{params, DbResult, Dialect, Row, Value};
use crate::snapshot::UsageSnapshot;
use crate::{Ledger, Result};
use allot::occupancy::Interval;

/// One run of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub job_id: u32,
    pub run_start: i64,
    /// `None` while the run goes on.
    pub run_end: Option<i64>,
    /// Budget path charged; `None` for a job outside the budget tree.
    pub leaf: Option<String>,
    pub account: Option<String>,
    pub user: Option<String>,
    pub gpus: u32,
    pub allocated: bool,
    pub end_reason: Option<String>,
}

/// A change to the runs table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunUpdate {
    /// A run began (recording it twice is harmless).
    Open(RunRow),
    /// A run ended. Ending an already-ended run changes nothing.
    Close { job_id: u32, run_start: i64, run_end: i64, reason: String },
}

/// A job's contract as accepted at submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractRow {
    pub job_id: u32,
    pub user: String,
    pub account: Option<String>,
    pub leaf: Option<String>,
    pub min_runtime: i64,
    pub priority: String,
    pub resumable: bool,
    pub submit_time: i64,
    pub comment: String,
    /// GPUs asked for (at most); `None` in rows from before schema 3.
    pub gpus: Option<u32>,
}

/// A job left the queue for good (completed, failed, cancelled) at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobEnd {
    pub job_id: u32,
    pub at: i64,
}

/// A leaf's demand from `at` until its next row: GPUs of its jobs pending
/// (not held) and running, allocated (`min_runtime > 0`) and unallocated apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemandRow {
    pub leaf: String,
    pub at: i64,
    pub pending_allocated: u32,
    pub pending_unallocated: u32,
    pub running_allocated: u32,
    pub running_unallocated: u32,
}

impl DemandRow {
    /// Every GPU the leaf's jobs want: what owed is capped at.
    pub fn total(&self) -> u32 {
        self.pending_allocated + self.pending_unallocated + self.running_allocated + self.running_unallocated
    }
}

/// Something worth explaining later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub at: i64,
    pub job_id: u32,
    /// `preempted`, `requeued`, `drained`, ...
    pub kind: String,
    pub detail: String,
}

/// Everything one period of the priority plugin writes, committed together
/// so that readers see runs and the usage snapshot agree.
#[derive(Debug, Clone, Default)]
pub struct Period {
    pub runs: Vec<RunUpdate>,
    pub contracts: Vec<ContractRow>,
    pub events: Vec<EventRow>,
    /// Leaves whose demand changed.
    pub demand: Vec<DemandRow>,
    pub job_ends: Vec<JobEnd>,
    pub snapshot: Option<UsageSnapshot>,
}

const CONTRACT_COLUMNS: &str = "job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus, end_time";

fn row_to_contract(r: &Row) -> DbResult<(ContractRow, Option<i64>)> {
    let contract = ContractRow {
        job_id: r.get(0)?,
        user: r.get(1)?,
        account: r.get(2)?,
        leaf: r.get(3)?,
        min_runtime: r.get(4)?,
        priority: r.get(5)?,
        resumable: r.get(6)?,
        submit_time: r.get(7)?,
        comment: r.get(8)?,
        gpus: r.get(9)?,
    };
    Ok((contract, r.get(10)?))
}

const RUN_COLUMNS: &str = "job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason";

fn row_to_run(r: &Row) -> DbResult<RunRow> {
    Ok(RunRow {
        job_id: r.get(0)?,
        run_start: r.get(1)?,
        run_end: r.get(2)?,
        leaf: r.get(3)?,
        account: r.get(4)?,
        user: r.get(5)?,
        gpus: r.get(6)?,
        allocated: r.get(7)?,
        end_reason: r.get(8)?,
    })
}

fn row_to_event(r: &Row) -> DbResult<EventRow> {
    Ok(EventRow { at: r.get(0)?, job_id: r.get(1)?, kind: r.get(2)?, detail: r.get(3)? })
}

fn collect<T>(rows: Vec<Row>, f: impl Fn(&Row) -> DbResult<T>) -> DbResult<Vec<T>> {
    rows.iter().map(f).collect()
}

impl RunRow {
    /// This run as the policy core's interval, given the leaf's id in the
    /// current tree (`None` when the leaf is gone from the budget).
    pub fn interval(&self, leaf: allot::budget::LeafId) -> Interval {
        Interval { leaf, gpus: self.gpus, start: self.run_start, end: self.run_end, allocated: self.allocated }
    }
}

/// Runs are keyed by (job, start), to the second. A job preempted in its
/// first second and started again within that second has two runs with one
/// start: the run of 0 s gives way to the real one (its row takes the real
/// run's end), so the real run is charged. Otherwise recording a run twice
/// changes nothing, and an ended run stays ended.
fn open_run_sql(dialect: Dialect) -> (String, String) {
    let head = format!("INSERT INTO runs (cluster, {RUN_COLUMNS}) VALUES");
    let tail = match dialect {
        Dialect::Sqlite => "ON CONFLICT(cluster, job_id, run_start) DO UPDATE SET run_end = excluded.run_end, end_reason = excluded.end_reason,
                 leaf = excluded.leaf, account = excluded.account, user = excluded.user, gpus = excluded.gpus, allocated = excluded.allocated
             WHERE runs.run_end = runs.run_start AND (excluded.run_end IS NULL OR excluded.run_end > runs.run_end)"
            .to_owned(),
        // The server applies assignments left to right, each seeing the
        // ones before: run_end, which the condition reads, goes last.
        Dialect::MySql => {
            let give_way = "run_end = run_start AND (VALUES(run_end) IS NULL OR VALUES(run_end) > run_end)";
            let set = ["end_reason", "leaf", "account", "user", "gpus", "allocated", "run_end"]
                .iter()
                .map(|c| format!("{c} = IF({give_way}, VALUES({c}), {c})"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("ON DUPLICATE KEY UPDATE {set}")
        }
    };
    (head, tail)
}

/// A job's submit time is its first submission: Slurm moves a requeued
/// job's to the requeue, and a restarted slurmctld records every contract
/// again. (A job id that ended and is used again is another job: its own
/// submit time.)
fn contract_sql(dialect: Dialect) -> (&'static str, &'static str) {
    let head = "INSERT INTO contracts (cluster, job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus) VALUES";
    let tail = match dialect {
        Dialect::Sqlite => {
            "ON CONFLICT(cluster, job_id) DO UPDATE SET user = excluded.user, account = excluded.account, leaf = excluded.leaf,
                 min_runtime = excluded.min_runtime, priority = excluded.priority, resumable = excluded.resumable,
                 submit_time = CASE WHEN contracts.end_time IS NULL THEN MIN(contracts.submit_time, excluded.submit_time) ELSE excluded.submit_time END,
                 comment = excluded.comment, gpus = excluded.gpus"
        }
        Dialect::MySql => {
            "ON DUPLICATE KEY UPDATE user = VALUES(user), account = VALUES(account), leaf = VALUES(leaf),
                 min_runtime = VALUES(min_runtime), priority = VALUES(priority), resumable = VALUES(resumable),
                 submit_time = IF(end_time IS NULL, LEAST(submit_time, VALUES(submit_time)), VALUES(submit_time)),
                 comment = VALUES(comment), gpus = VALUES(gpus)"
        }
    };
    (head, tail)
}

/// `a` then `b`: a cluster filter's parameter before a query's own.
fn with(mut a: Vec<Value>, b: &[Value]) -> Vec<Value> {
    a.extend_from_slice(b);
    a
}

/// Demand rows of (cluster, row), by leaf then time, as one row per leaf
/// and time: at each time a cluster's demand changes, the sum of every
/// cluster's demand in force. Rows of one cluster pass as they are.
fn sum_demand_over_clusters(rows: Vec<(String, DemandRow)>) -> Vec<DemandRow> {
    let mut out: Vec<DemandRow> = Vec::with_capacity(rows.len());
    // The row in force per cluster, for the current leaf.
    let mut in_force: std::collections::BTreeMap<String, DemandRow> = std::collections::BTreeMap::new();
    for (cluster, row) in rows {
        if out.last().is_some_and(|last| last.leaf != row.leaf) {
            in_force.clear();
        }
        let (leaf, at) = (row.leaf.clone(), row.at);
        in_force.insert(cluster, row);
        let mut sum = DemandRow { leaf, at, pending_allocated: 0, pending_unallocated: 0, running_allocated: 0, running_unallocated: 0 };
        for d in in_force.values() {
            sum.pending_allocated += d.pending_allocated;
            sum.pending_unallocated += d.pending_unallocated;
            sum.running_allocated += d.running_allocated;
            sum.running_unallocated += d.running_unallocated;
        }
        // Several clusters changing in the same second: one row, the last sum.
        match out.last_mut() {
            Some(last) if last.leaf == sum.leaf && last.at == sum.at => *last = sum,
            _ => out.push(sum),
        }
    }
    out
}

impl Ledger {
    /// Writes one period's runs, contracts, events and snapshot atomically.
    pub fn record_period(&mut self, period: &Period) -> Result<()> {
        let cluster = self.cluster_key().to_owned();
        self.write(|c| {
            // Rows go many to a statement (Conn::exec_rows), in the order
            // given: a run's opening before its closing.
            let (open_head, open_tail) = open_run_sql(c.dialect());
            let close = "UPDATE runs SET run_end = ?, end_reason = ? WHERE cluster = ? AND job_id = ? AND run_start = ? AND (run_end IS NULL OR (run_end = run_start AND ? > run_end))";
            let mut opens: Vec<Vec<Value>> = Vec::new();
            for update in &period.runs {
                match update {
                    RunUpdate::Open(r) => opens.push(params![&cluster, r.job_id, r.run_start, r.run_end, &r.leaf, &r.account, &r.user, r.gpus, r.allocated, &r.end_reason].to_vec()),
                    RunUpdate::Close { job_id, run_start, run_end, reason } => {
                        c.exec_rows(&open_head, &open_tail, 10, &std::mem::take(&mut opens))?;
                        c.exec(close, params![*run_end, reason, &cluster, *job_id, *run_start, *run_end])?;
                    }
                }
            }
            c.exec_rows(&open_head, &open_tail, 10, &opens)?;
            let (contract_head, contract_tail) = contract_sql(c.dialect());
            let contracts: Vec<Vec<Value>> = period
                .contracts
                .iter()
                .map(|k| params![&cluster, k.job_id, &k.user, &k.account, &k.leaf, k.min_runtime, &k.priority, k.resumable, k.submit_time, &k.comment, k.gpus].to_vec())
                .collect();
            c.exec_rows(contract_head, contract_tail, 11, &contracts)?;
            // A requeued job may end again later: the last end is kept.
            for e in &period.job_ends {
                c.exec("UPDATE contracts SET end_time = ? WHERE cluster = ? AND job_id = ?", params![e.at, &cluster, e.job_id])?;
            }
            let demand = match c.dialect() {
                Dialect::Sqlite => "INSERT OR REPLACE INTO demand",
                Dialect::MySql => "REPLACE INTO demand",
            };
            let demand = format!("{demand} (cluster, leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated) VALUES");
            let rows: Vec<Vec<Value>> = period
                .demand
                .iter()
                .map(|d| params![&cluster, &d.leaf, d.at, d.pending_allocated, d.pending_unallocated, d.running_allocated, d.running_unallocated].to_vec())
                .collect();
            c.exec_rows(&demand, "", 7, &rows)?;
            let events: Vec<Vec<Value>> = period.events.iter().map(|e| params![&cluster, e.at, e.job_id, &e.kind, &e.detail].to_vec()).collect();
            c.exec_rows("INSERT INTO events (cluster, at, job_id, kind, detail) VALUES", "", 5, &events)?;
            if let Some(snapshot) = &period.snapshot {
                snapshot.write(c, &cluster)?;
            }
            Ok(())
        })
    }

    /// This ledger's identity: random, made when it was created.
    pub fn identity(&self) -> Result<String> {
        self.read(|c| match c.row("SELECT id FROM ledger_identity", &[])? {
            Some(r) => r.get(0),
            None => Err(crate::DbError::Decode { column: 0, problem: "ledger_identity is empty".into() }),
        })
    }

    /// Runs still open: after a restart, the runs to pick up again.
    pub fn open_runs(&self) -> Result<Vec<RunRow>> {
        let (only, p) = self.cluster_filter("");
        self.read(|c| collect(c.rows(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE {only}run_end IS NULL ORDER BY job_id, run_start"), &p)?, row_to_run))
    }

    /// Runs that overlap `[from, ...)`: open ones and those ended after `from`.
    pub fn runs_since(&self, from: i64) -> Result<Vec<RunRow>> {
        Ok(self.runs_since_by_cluster(from)?.into_iter().map(|(_, r)| r).collect())
    }

    /// [`Ledger::runs_since`], each with its cluster: a lab's report keys
    /// jobs by (cluster, job id).
    pub fn runs_since_by_cluster(&self, from: i64) -> Result<Vec<(String, RunRow)>> {
        let (only, p) = self.cluster_filter("");
        let sql = format!("SELECT {RUN_COLUMNS}, cluster FROM runs WHERE {only}(run_end IS NULL OR run_end > ?) ORDER BY run_start, job_id, cluster");
        self.read(|c| collect(c.rows(&sql, &with(p, params![from]))?, |r| Ok((r.get(9)?, row_to_run(r)?))))
    }

    /// Every run of one job, oldest first.
    pub fn runs_of_job(&self, job_id: u32) -> Result<Vec<RunRow>> {
        let (only, p) = self.cluster_filter("");
        self.read(|c| {
            collect(c.rows(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE {only}job_id = ? ORDER BY run_start"), &with(p, params![job_id]))?, row_to_run)
        })
    }

    /// The contract of `job_id`. For the lab, of the first cluster that
    /// has one (job ids repeat across clusters: see [`Ledger::clusters_of_job`]).
    pub fn contract(&self, job_id: u32) -> Result<Option<ContractRow>> {
        let (only, p) = self.cluster_filter("");
        self.read(|c| {
            c.row(&format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE {only}job_id = ? ORDER BY cluster"), &with(p, params![job_id]))?
                .map(|r| Ok(row_to_contract(&r)?.0))
                .transpose()
        })
    }

    /// Jobs submitted in `[from, to)`, with the time each left the queue
    /// for good (`None`: still queued or running), by submission.
    pub fn contracts_submitted(&self, from: i64, to: i64) -> Result<Vec<(ContractRow, Option<i64>)>> {
        Ok(self.contracts_submitted_by_cluster(from, to)?.into_iter().map(|(_, c, end)| (c, end)).collect())
    }

    /// [`Ledger::contracts_submitted`], each with its cluster.
    pub fn contracts_submitted_by_cluster(&self, from: i64, to: i64) -> Result<Vec<(String, ContractRow, Option<i64>)>> {
        let (only, p) = self.cluster_filter("");
        let sql =
            format!("SELECT {CONTRACT_COLUMNS}, cluster FROM contracts WHERE {only}submit_time >= ? AND submit_time < ? ORDER BY submit_time, job_id, cluster");
        self.read(|c| {
            collect(c.rows(&sql, &with(p, params![from, to]))?, |r| {
                let (contract, end) = row_to_contract(r)?;
                Ok((r.get(11)?, contract, end))
            })
        })
    }

    /// The contract of job `job_id` of cluster `cluster` (whatever this
    /// connection's scope).
    pub fn contract_in(&self, cluster: &str, job_id: u32) -> Result<Option<ContractRow>> {
        self.read(|c| {
            c.row(&format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE cluster = ? AND job_id = ?"), params![cluster, job_id])?
                .map(|r| Ok(row_to_contract(&r)?.0))
                .transpose()
        })
    }

    /// Jobs waiting as the ledger last heard: recorded with schema 3 or
    /// later (older rows have no end), not ended, no run going on. By submission.
    pub fn waiting_contracts(&self) -> Result<Vec<ContractRow>> {
        let (only, p) = self.cluster_filter("c.");
        self.read(|c| {
            let rows = c.rows(
                &format!(
                    "SELECT {CONTRACT_COLUMNS} FROM contracts c WHERE {only}end_time IS NULL AND gpus IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.cluster = c.cluster AND r.job_id = c.job_id AND r.run_end IS NULL)
                     ORDER BY submit_time, job_id"
                ),
                &p,
            )?;
            collect(rows, |r| Ok(row_to_contract(r)?.0))
        })
    }

    /// Each leaf's demand rows over `[from, ...)`: the row in force at
    /// `from` (if any) and every later one, by leaf then time.
    /// For the lab, each leaf's demand summed over the clusters: a row at
    /// every time one cluster's changes.
    pub fn demand_since(&self, from: i64) -> Result<Vec<DemandRow>> {
        let (only, p) = self.cluster_filter("d.");
        let rows = self.read(|c| {
            let rows = c.rows(
                &format!(
                    "SELECT cluster, leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated FROM demand d
                     WHERE {only}at >= (SELECT COALESCE(MAX(at), ?) FROM demand e WHERE e.cluster = d.cluster AND e.leaf = d.leaf AND e.at <= ?)
                     ORDER BY leaf, at, cluster"
                ),
                &with(p, params![from, from]),
            )?;
            collect(rows, |r| {
                let row = DemandRow {
                    leaf: r.get(1)?,
                    at: r.get(2)?,
                    pending_allocated: r.get(3)?,
                    pending_unallocated: r.get(4)?,
                    running_allocated: r.get(5)?,
                    running_unallocated: r.get(6)?,
                };
                Ok((r.get::<String>(0)?, row))
            })
        })?;
        Ok(sum_demand_over_clusters(rows))
    }

    /// Events of one kind (`preempted`, ...) in `[from, to)`, oldest first.
    pub fn events_between(&self, kind: &str, from: i64, to: i64) -> Result<Vec<EventRow>> {
        Ok(self.events_between_by_cluster(kind, from, to)?.into_iter().map(|(_, e)| e).collect())
    }

    /// [`Ledger::events_between`], each with its cluster.
    pub fn events_between_by_cluster(&self, kind: &str, from: i64, to: i64) -> Result<Vec<(String, EventRow)>> {
        let (only, p) = self.cluster_filter("");
        let sql = format!("SELECT at, job_id, kind, detail, cluster FROM events WHERE {only}kind = ? AND at >= ? AND at < ? ORDER BY at, id");
        self.read(|c| collect(c.rows(&sql, &with(p, params![kind, from, to]))?, |r| Ok((r.get(4)?, row_to_event(r)?))))
    }

    /// The clusters that know job `job_id` (a contract or a run of it):
    /// one, unless the lab's clusters reused the id.
    pub fn clusters_of_job(&self, job_id: u32) -> Result<Vec<String>> {
        self.read(|c| {
            let rows =
                c.rows("SELECT cluster FROM contracts WHERE job_id = ? UNION SELECT cluster FROM runs WHERE job_id = ? ORDER BY 1", params![job_id, job_id])?;
            rows.iter().map(|r| r.get::<String>(0)).collect()
        })
    }

    /// Events of one job, oldest first.
    pub fn events_of_job(&self, job_id: u32) -> Result<Vec<EventRow>> {
        let (only, p) = self.cluster_filter("");
        self.read(|c| {
            collect(
                c.rows(&format!("SELECT at, job_id, kind, detail FROM events WHERE {only}job_id = ? ORDER BY id"), &with(p, params![job_id]))?,
                row_to_event,
            )
        })
    }

    /// Charged (allocated) GPU-seconds per leaf path over `[from, to]`, from
    /// the runs; unallocated runs are excluded by definition.
    pub fn charged_by_leaf(&self, from: i64, to: i64) -> Result<Vec<(String, i64)>> {
        let (only, p) = self.cluster_filter("");
        self.read(|c| {
            let (least, greatest) = match c.dialect() {
                Dialect::Sqlite => ("MIN", "MAX"),
                Dialect::MySql => ("LEAST", "GREATEST"),
            };
            let rows = c.rows(
                &format!(
                    "SELECT leaf, SUM(gpus * ({least}(COALESCE(run_end, ?), ?) - {greatest}(run_start, ?)))
                     FROM runs
                     WHERE {only}allocated = 1 AND leaf IS NOT NULL AND run_start < ? AND (run_end IS NULL OR run_end > ?)
                     GROUP BY leaf ORDER BY leaf"
                ),
                &[params![to, to, from], &p[..], params![to, from]].concat(),
            )?;
            collect(rows, |r| Ok((r.get(0)?, r.get(1)?)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job_id: u32, start: i64, gpus: u32, allocated: bool) -> RunRow {
        RunRow {
            job_id,
            run_start: start,
            run_end: None,
            leaf: Some("a".into()),
            account: Some("a".into()),
            user: Some("u".into()),
            gpus,
            allocated,
            end_reason: None,
        }
    }

    #[test]
    fn runs_open_close_and_charge() {
        let mut l = Ledger::in_memory().unwrap();
        let period = Period {
            runs: vec![RunUpdate::Open(run(1, 100, 2, true)), RunUpdate::Open(run(2, 100, 4, false)), RunUpdate::Open(run(1, 100, 2, true))],
            ..Default::default()
        };
        l.record_period(&period).unwrap();
        assert_eq!(l.open_runs().unwrap().len(), 2);
        let close = Period { runs: vec![RunUpdate::Close { job_id: 1, run_start: 100, run_end: 200, reason: "completed".into() }], ..Default::default() };
        l.record_period(&close).unwrap();
        // Closing twice keeps the first end.
        let again = Period { runs: vec![RunUpdate::Close { job_id: 1, run_start: 100, run_end: 999, reason: "x".into() }], ..Default::default() };
        l.record_period(&again).unwrap();
        let runs = l.runs_of_job(1).unwrap();
        assert_eq!((runs[0].run_end, runs[0].end_reason.as_deref()), (Some(200), Some("completed")));
        // Window [150, 300]: job 1 charged 2 GPUs x 50 s; job 2 is unallocated.
        assert_eq!(l.charged_by_leaf(150, 300).unwrap(), vec![("a".to_owned(), 100)]);
        assert_eq!(l.runs_since(250).unwrap().len(), 1);
    }

    #[test]
    fn a_run_of_0_s_gives_way_to_the_run_that_starts_in_the_same_second() {
        let ended = |job_id, start, end| RunRow { run_end: Some(end), end_reason: Some("x".into()), ..run(job_id, start, 2, true) };
        // Reported ended (the 0-s run), then the next run, ended or open, in either order.
        for updates in [
            vec![RunUpdate::Open(ended(1, 100, 100)), RunUpdate::Open(ended(1, 100, 160))],
            vec![
                RunUpdate::Open(ended(1, 100, 100)),
                RunUpdate::Open(run(1, 100, 2, true)),
                RunUpdate::Close { job_id: 1, run_start: 100, run_end: 160, reason: "x".into() },
            ],
            vec![
                RunUpdate::Open(run(1, 100, 2, true)),
                RunUpdate::Open(ended(1, 100, 100)),
                RunUpdate::Close { job_id: 1, run_start: 100, run_end: 160, reason: "x".into() },
            ],
        ] {
            // In one period, and one update per period (as when writes failed and resumed).
            for split in [false, true] {
                let mut l = Ledger::in_memory().unwrap();
                if split {
                    for u in &updates {
                        l.record_period(&Period { runs: vec![u.clone()], ..Default::default() }).unwrap();
                    }
                } else {
                    l.record_period(&Period { runs: updates.clone(), ..Default::default() }).unwrap();
                }
                let rows: Vec<_> = l.runs_of_job(1).unwrap().iter().map(|r| (r.run_start, r.run_end)).collect();
                assert_eq!(rows, vec![(100, Some(160))], "{updates:?}");
                assert_eq!(l.charged_by_leaf(0, 200).unwrap(), vec![("a".to_owned(), 120)]);
            }
        }
        // A run that lasted longer keeps its end whatever comes after.
        let mut l = Ledger::in_memory().unwrap();
        let updates = vec![RunUpdate::Open(ended(1, 100, 130)), RunUpdate::Open(ended(1, 100, 160)), RunUpdate::Open(run(1, 100, 2, true))];
        l.record_period(&Period { runs: updates, ..Default::default() }).unwrap();
        assert_eq!(l.runs_of_job(1).unwrap()[0].run_end, Some(130));
    }

    fn demand(leaf: &str, at: i64, pending: u32, running: u32) -> DemandRow {
        DemandRow { leaf: leaf.into(), at, pending_allocated: pending, pending_unallocated: 1, running_allocated: running, running_unallocated: 0 }
    }

    #[test]
    fn demand_since_starts_with_the_row_in_force() {
        let mut l = Ledger::in_memory().unwrap();
        let rows = vec![demand("a", 100, 4, 0), demand("a", 200, 2, 2), demand("a", 300, 0, 0), demand("b", 250, 8, 0)];
        l.record_period(&Period { demand: rows, ..Default::default() }).unwrap();
        let at = |rows: Vec<DemandRow>| rows.iter().map(|d| (d.leaf.clone(), d.at)).collect::<Vec<_>>();
        // At 220, a's row of 200 is in force; b has none yet.
        assert_eq!(at(l.demand_since(220).unwrap()), vec![("a".into(), 200), ("a".into(), 300), ("b".into(), 250)]);
        // Exactly at a row: that row; before every row: all of them.
        assert_eq!(at(l.demand_since(300).unwrap()), vec![("a".into(), 300), ("b".into(), 250)]);
        assert_eq!(l.demand_since(0).unwrap().len(), 4);
        assert_eq!(demand("a", 0, 2, 3).total(), 6);
    }

    /// A contract of leaf `a` with a one-minute minimum runtime.
    fn contract(job_id: u32, submit_time: i64, gpus: u32) -> ContractRow {
        ContractRow {
            job_id,
            user: "u".into(),
            account: Some("a".into()),
            leaf: Some("a".into()),
            min_runtime: 60,
            priority: "normal".into(),
            resumable: true,
            submit_time,
            comment: "min_runtime=1m".into(),
            gpus: Some(gpus),
        }
    }

    #[test]
    fn contracts_keep_their_gpus_and_last_end() {
        let mut l = Ledger::in_memory().unwrap();
        let c = contract(7, 1000, 4);
        l.record_period(&Period { contracts: vec![c.clone()], ..Default::default() }).unwrap();
        assert_eq!(l.contracts_submitted(0, 2000).unwrap(), vec![(c.clone(), None)]);
        l.record_period(&Period { job_ends: vec![JobEnd { job_id: 7, at: 1500 }], ..Default::default() }).unwrap();
        l.record_period(&Period { job_ends: vec![JobEnd { job_id: 7, at: 1700 }], ..Default::default() }).unwrap();
        // Re-recording the contract (a pending job's comment changed) keeps the end.
        l.record_period(&Period { contracts: vec![c.clone()], ..Default::default() }).unwrap();
        assert_eq!(l.contracts_submitted(0, 2000).unwrap(), vec![(c, Some(1700))]);
        assert!(l.contracts_submitted(1001, 2000).unwrap().is_empty());
    }

    #[test]
    fn a_requeued_job_keeps_its_first_submit_time_and_a_reused_id_gets_its_own() {
        let mut l = Ledger::in_memory().unwrap();
        let c = |submit_time| contract(9, submit_time, 1);
        let submit = |l: &Ledger| l.contracts_submitted(0, 10_000).unwrap()[0].0.submit_time;
        l.record_period(&Period { contracts: vec![c(1000)], ..Default::default() }).unwrap();
        // Preempted and requeued: Slurm says it was submitted at 1400 (and a
        // restarted slurmctld records it again).
        l.record_period(&Period { contracts: vec![c(1400)], ..Default::default() }).unwrap();
        assert_eq!(submit(&l), 1000);
        // It ends; later a new job gets the same id.
        l.record_period(&Period { job_ends: vec![JobEnd { job_id: 9, at: 2000 }], ..Default::default() }).unwrap();
        l.record_period(&Period { contracts: vec![c(5000)], ..Default::default() }).unwrap();
        assert_eq!(submit(&l), 5000);
    }

    /// Two clusters on one ledger: the same job id is two jobs, each cluster
    /// reads its own rows, and the lab sums them.
    #[test]
    fn clusters_share_a_ledger_without_colliding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        let mut alpha = Ledger::open(&path).unwrap().for_cluster(Some("alpha")).unwrap();
        let mut beta = Ledger::open(&path).unwrap().for_cluster(Some("beta")).unwrap();
        let snapshot = |gpus, charged| crate::UsageSnapshot {
            computed_at: 500,
            budget_version: 1,
            capacity_gpus: gpus,
            leaves: vec![crate::LeafUsage { leaf: "a".into(), charged, unallocated: 0, running: 0 }],
        };
        for (l, gpus, leaf_gpus, end) in [(&mut alpha, 8, 2, 200), (&mut beta, 4, 1, 300)] {
            let period = Period {
                runs: vec![
                    RunUpdate::Open(run(1, 100, leaf_gpus, true)),
                    RunUpdate::Close { job_id: 1, run_start: 100, run_end: end, reason: "completed".into() },
                ],
                contracts: vec![contract(1, 90, leaf_gpus)],
                demand: vec![demand("a", 100, leaf_gpus, 0)],
                events: vec![EventRow { at: 150, job_id: 1, kind: "preempted".into(), detail: format!("{gpus}") }],
                job_ends: vec![JobEnd { job_id: 1, at: end }],
                snapshot: Some(snapshot(gpus, i64::from(leaf_gpus) * 100)),
            };
            l.record_period(&period).unwrap();
        }
        // Each cluster sees its own job 1.
        assert_eq!(alpha.runs_of_job(1).unwrap()[0].run_end, Some(200));
        assert_eq!(beta.runs_of_job(1).unwrap()[0].run_end, Some(300));
        assert_eq!(alpha.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 200)]);
        assert_eq!(beta.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 200)]);
        assert_eq!(beta.events_of_job(1).unwrap().len(), 1);
        assert_eq!(alpha.usage_snapshot().unwrap().unwrap().capacity_gpus, 8);
        assert_eq!(beta.contracts_submitted(0, 1000).unwrap()[0].0.gpus, Some(1));
        // The lab: both clusters' rows, usage and capacity summed.
        let lab = Ledger::open_read_only(&path).unwrap();
        assert_eq!(lab.clusters().unwrap(), vec!["alpha".to_owned(), "beta".to_owned()]);
        assert_eq!(lab.clusters_of_job(1).unwrap().len(), 2);
        assert_eq!(lab.runs_of_job(1).unwrap().len(), 2);
        assert_eq!(lab.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 400)]);
        assert_eq!(lab.events_between("preempted", 0, 1000).unwrap().len(), 2);
        let sum = lab.usage_snapshot().unwrap().unwrap();
        assert_eq!((sum.capacity_gpus, sum.leaves[0].charged), (12, 300));
        assert_eq!(lab.usage_snapshots().unwrap().len(), 2);
        let d = lab.demand_since(0).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].pending_allocated, 3);
        // A job end on one cluster does not end the other's job of that id.
        let mut alpha2 = Ledger::open(&path).unwrap().for_cluster(Some("alpha")).unwrap();
        alpha2.record_period(&Period { contracts: vec![contract(2, 400, 1)], ..Default::default() }).unwrap();
        beta.record_period(&Period { job_ends: vec![JobEnd { job_id: 2, at: 500 }], ..Default::default() }).unwrap();
        assert_eq!(alpha2.contracts_submitted(400, 401).unwrap()[0].1, None);
    }

    #[test]
    fn lab_demand_is_the_sum_of_what_is_in_force_on_each_cluster() {
        let rows = vec![
            ("alpha".to_owned(), demand("a", 100, 4, 0)),
            ("beta".to_owned(), demand("a", 150, 2, 0)),
            ("alpha".to_owned(), demand("a", 200, 0, 1)),
            ("alpha".to_owned(), demand("b", 100, 1, 0)),
            ("beta".to_owned(), demand("b", 100, 1, 0)),
        ];
        let sums: Vec<_> = sum_demand_over_clusters(rows).iter().map(|d| (d.leaf.clone(), d.at, d.pending_allocated, d.running_allocated)).collect();
        assert_eq!(sums, vec![("a".into(), 100, 4, 0), ("a".into(), 150, 6, 0), ("a".into(), 200, 2, 1), ("b".into(), 100, 2, 0)]);
    }

    /// A ledger of schema 3 (one cluster, rows of no cluster) migrates, and
    /// the first cluster that writes adopts its history; another cluster
    /// adopts nothing.
    #[test]
    fn a_one_cluster_ledger_is_adopted_by_its_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.db");
        {
            let mut c = rusqlite::Connection::open(&path).unwrap();
            crate::migrations().to_version(&mut c, 3).unwrap();
            c.execute_batch(
                "INSERT INTO runs (job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason) VALUES (5, 100, 300, 'a', 'a', 'u', 2, 1, 'completed');
                 INSERT INTO contracts (job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus) VALUES (5, 'u', 'a', 'a', 60, 'normal', 1, 90, '', 2);
                 INSERT INTO usage_snapshot (leaf, charged, unallocated) VALUES ('a', 400, 0);
                 INSERT INTO usage_snapshot_meta (id, computed_at, budget_version, capacity_gpus) VALUES (1, 300, 1, 8);
                 INSERT INTO demand (leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated) VALUES ('a', 100, 0, 0, 2, 0);
                 INSERT INTO events (at, job_id, kind, detail) VALUES (200, 5, 'preempted', 'x');",
            )
            .unwrap();
        }
        let lab = Ledger::open(&path).unwrap();
        assert_eq!(lab.clusters().unwrap(), vec![String::new()]);
        assert_eq!(lab.charged_by_leaf(0, 1000).unwrap(), vec![("a".to_owned(), 400)]);
        let mut alpha = Ledger::open(&path).unwrap().for_cluster(Some("alpha")).unwrap();
        assert!(alpha.runs_of_job(5).unwrap().is_empty(), "not adopted yet");
        assert_eq!(alpha.adopt_unclustered().unwrap(), 6);
        assert_eq!(alpha.runs_of_job(5).unwrap()[0].run_end, Some(300));
        assert_eq!(alpha.contract(5).unwrap().unwrap().gpus, Some(2));
        assert_eq!(alpha.usage_snapshot().unwrap().unwrap().capacity_gpus, 8);
        assert_eq!(alpha.events_of_job(5).unwrap().len(), 1);
        assert_eq!(alpha.demand_since(0).unwrap().len(), 1);
        let mut beta = Ledger::open(&path).unwrap().for_cluster(Some("beta")).unwrap();
        assert_eq!(beta.adopt_unclustered().unwrap(), 0);
        assert_eq!(lab.clusters().unwrap(), vec!["alpha".to_owned()]);
        assert!(lab.check().unwrap().is_empty());
    }

    #[test]
    fn a_cluster_name_that_cannot_key_a_ledger_is_refused() {
        for bad in ["", "a\nb", &"x".repeat(65)] {
            let e = Ledger::in_memory().unwrap().for_cluster(Some(bad)).err().unwrap();
            assert!(e.to_string().contains("cannot key a ledger"), "{e}");
        }
    }
}
