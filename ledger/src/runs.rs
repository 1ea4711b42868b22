//! Runs (occupancy intervals), contracts and events, written by the
//! priority plugin once per period in one transaction.

use allot::occupancy::Interval;
use crate::db::{params, DbResult, Dialect, Row};
use crate::snapshot::UsageSnapshot;
use crate::{Ledger, Result};

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
fn open_run_sql(dialect: Dialect) -> String {
    match dialect {
        Dialect::Sqlite => format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT(job_id, run_start) DO UPDATE SET run_end = excluded.run_end, end_reason = excluded.end_reason,
                 leaf = excluded.leaf, account = excluded.account, user = excluded.user, gpus = excluded.gpus, allocated = excluded.allocated
             WHERE runs.run_end = runs.run_start AND (excluded.run_end IS NULL OR excluded.run_end > runs.run_end)"
        ),
        // The server applies assignments left to right, each seeing the
        // ones before: run_end, which the condition reads, goes last.
        Dialect::MySql => {
            let give_way = "run_end = run_start AND (VALUES(run_end) IS NULL OR VALUES(run_end) > run_end)";
            let set = ["end_reason", "leaf", "account", "user", "gpus", "allocated", "run_end"]
                .iter()
                .map(|c| format!("{c} = IF({give_way}, VALUES({c}), {c})"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE {set}")
        }
    }
}

/// A job's submit time is its first submission: Slurm moves a requeued
/// job's to the requeue, and a restarted slurmctld records every contract
/// again. (A job id that ended and is used again is another job: its own
/// submit time.)
fn contract_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "INSERT INTO contracts (job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT(job_id) DO UPDATE SET user = excluded.user, account = excluded.account, leaf = excluded.leaf,
                 min_runtime = excluded.min_runtime, priority = excluded.priority, resumable = excluded.resumable,
                 submit_time = CASE WHEN contracts.end_time IS NULL THEN MIN(contracts.submit_time, excluded.submit_time) ELSE excluded.submit_time END,
                 comment = excluded.comment, gpus = excluded.gpus"
        }
        Dialect::MySql => {
            "INSERT INTO contracts (job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment, gpus)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE user = VALUES(user), account = VALUES(account), leaf = VALUES(leaf),
                 min_runtime = VALUES(min_runtime), priority = VALUES(priority), resumable = VALUES(resumable),
                 submit_time = IF(end_time IS NULL, LEAST(submit_time, VALUES(submit_time)), VALUES(submit_time)),
                 comment = VALUES(comment), gpus = VALUES(gpus)"
        }
    }
}

impl Ledger {
    /// Writes one period's runs, contracts, events and snapshot atomically.
    pub fn record_period(&mut self, period: &Period) -> Result<()> {
        self.write(|c| {
            let open = open_run_sql(c.dialect());
            let close = "UPDATE runs SET run_end = ?, end_reason = ? WHERE job_id = ? AND run_start = ? AND (run_end IS NULL OR (run_end = run_start AND ? > run_end))";
            for update in &period.runs {
                match update {
                    RunUpdate::Open(r) => {
                        c.exec(&open, params![r.job_id, r.run_start, r.run_end, &r.leaf, &r.account, &r.user, r.gpus, r.allocated, &r.end_reason])?;
                    }
                    RunUpdate::Close { job_id, run_start, run_end, reason } => {
                        c.exec(close, params![*run_end, reason, *job_id, *run_start, *run_end])?;
                    }
                }
            }
            let contract = contract_sql(c.dialect());
            for k in &period.contracts {
                c.exec(contract, params![k.job_id, &k.user, &k.account, &k.leaf, k.min_runtime, &k.priority, k.resumable, k.submit_time, &k.comment, k.gpus])?;
            }
            // A requeued job may end again later: the last end is kept.
            for e in &period.job_ends {
                c.exec("UPDATE contracts SET end_time = ? WHERE job_id = ?", params![e.at, e.job_id])?;
            }
            let demand = match c.dialect() {
                Dialect::Sqlite => "INSERT OR REPLACE INTO demand",
                Dialect::MySql => "REPLACE INTO demand",
            };
            let demand = format!("{demand} (leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated) VALUES (?, ?, ?, ?, ?, ?)");
            for d in &period.demand {
                c.exec(&demand, params![&d.leaf, d.at, d.pending_allocated, d.pending_unallocated, d.running_allocated, d.running_unallocated])?;
            }
            for e in &period.events {
                c.exec("INSERT INTO events (at, job_id, kind, detail) VALUES (?, ?, ?, ?)", params![e.at, e.job_id, &e.kind, &e.detail])?;
            }
            if let Some(snapshot) = &period.snapshot {
                snapshot.write(c)?;
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
        self.read(|c| collect(c.rows(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_end IS NULL ORDER BY job_id, run_start"), &[])?, row_to_run))
    }

    /// Runs that overlap `[from, ...)`: open ones and those ended after `from`.
    pub fn runs_since(&self, from: i64) -> Result<Vec<RunRow>> {
        self.read(|c| {
            collect(c.rows(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_end IS NULL OR run_end > ? ORDER BY run_start, job_id"), params![from])?, row_to_run)
        })
    }

    /// Every run of one job, oldest first.
    pub fn runs_of_job(&self, job_id: u32) -> Result<Vec<RunRow>> {
        self.read(|c| collect(c.rows(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE job_id = ? ORDER BY run_start"), params![job_id])?, row_to_run))
    }

    pub fn contract(&self, job_id: u32) -> Result<Option<ContractRow>> {
        self.read(|c| {
            c.row(&format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE job_id = ?"), params![job_id])?.map(|r| Ok(row_to_contract(&r)?.0)).transpose()
        })
    }

    /// Jobs submitted in `[from, to)`, with the time each left the queue
    /// for good (`None`: still queued or running), by submission.
    pub fn contracts_submitted(&self, from: i64, to: i64) -> Result<Vec<(ContractRow, Option<i64>)>> {
        self.read(|c| {
            collect(
                c.rows(&format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE submit_time >= ? AND submit_time < ? ORDER BY submit_time, job_id"), params![from, to])?,
                row_to_contract,
            )
        })
    }

    /// Jobs waiting as the ledger last heard: recorded with schema 3 or
    /// later (older rows have no end), not ended, no run going on. By submission.
    pub fn waiting_contracts(&self) -> Result<Vec<ContractRow>> {
        self.read(|c| {
            let rows = c.rows(
                &format!(
                    "SELECT {CONTRACT_COLUMNS} FROM contracts c WHERE end_time IS NULL AND gpus IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = c.job_id AND r.run_end IS NULL)
                     ORDER BY submit_time, job_id"
                ),
                &[],
            )?;
            collect(rows, |r| Ok(row_to_contract(r)?.0))
        })
    }

    /// Each leaf's demand rows over `[from, ...)`: the row in force at
    /// `from` (if any) and every later one, by leaf then time.
    pub fn demand_since(&self, from: i64) -> Result<Vec<DemandRow>> {
        self.read(|c| {
            let rows = c.rows(
                "SELECT leaf, at, pending_allocated, pending_unallocated, running_allocated, running_unallocated FROM demand d
                 WHERE at >= (SELECT COALESCE(MAX(at), ?) FROM demand e WHERE e.leaf = d.leaf AND e.at <= ?)
                 ORDER BY leaf, at",
                params![from, from],
            )?;
            collect(rows, |r| {
                Ok(DemandRow {
                    leaf: r.get(0)?,
                    at: r.get(1)?,
                    pending_allocated: r.get(2)?,
                    pending_unallocated: r.get(3)?,
                    running_allocated: r.get(4)?,
                    running_unallocated: r.get(5)?,
                })
            })
        })
    }

    /// Events of one kind (`preempted`, ...) in `[from, to)`, oldest first.
    pub fn events_between(&self, kind: &str, from: i64, to: i64) -> Result<Vec<EventRow>> {
        self.read(|c| collect(c.rows("SELECT at, job_id, kind, detail FROM events WHERE kind = ? AND at >= ? AND at < ? ORDER BY at, id", params![kind, from, to])?, row_to_event))
    }

    /// Events of one job, oldest first.
    pub fn events_of_job(&self, job_id: u32) -> Result<Vec<EventRow>> {
        self.read(|c| collect(c.rows("SELECT at, job_id, kind, detail FROM events WHERE job_id = ? ORDER BY id", params![job_id])?, row_to_event))
    }

    /// Charged (allocated) GPU-seconds per leaf path over `[from, to]`, from
    /// the runs; unallocated runs are excluded by definition.
    pub fn charged_by_leaf(&self, from: i64, to: i64) -> Result<Vec<(String, i64)>> {
        self.read(|c| {
            let (least, greatest) = match c.dialect() {
                Dialect::Sqlite => ("MIN", "MAX"),
                Dialect::MySql => ("LEAST", "GREATEST"),
            };
            let rows = c.rows(
                &format!(
                    "SELECT leaf, SUM(gpus * ({least}(COALESCE(run_end, ?), ?) - {greatest}(run_start, ?)))
                     FROM runs
                     WHERE allocated = 1 AND leaf IS NOT NULL AND run_start < ? AND (run_end IS NULL OR run_end > ?)
                     GROUP BY leaf ORDER BY leaf"
                ),
                params![to, to, from, to, from],
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
            vec![RunUpdate::Open(ended(1, 100, 100)), RunUpdate::Open(run(1, 100, 2, true)), RunUpdate::Close { job_id: 1, run_start: 100, run_end: 160, reason: "x".into() }],
            vec![RunUpdate::Open(run(1, 100, 2, true)), RunUpdate::Open(ended(1, 100, 100)), RunUpdate::Close { job_id: 1, run_start: 100, run_end: 160, reason: "x".into() }],
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
}
