//! Runs (occupancy intervals), contracts and events, written by the
//! priority plugin once per period in one transaction.

use allot::occupancy::Interval;
use rusqlite::{params, OptionalExtension};

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
    pub snapshot: Option<UsageSnapshot>,
}

const RUN_COLUMNS: &str = "job_id, run_start, run_end, leaf, account, user, gpus, allocated, end_reason";

fn row_to_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
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

impl RunRow {
    /// This run as the policy core's interval, given the leaf's id in the
    /// current tree (`None` when the leaf is gone from the budget).
    pub fn interval(&self, leaf: allot::budget::LeafId) -> Interval {
        Interval { leaf, gpus: self.gpus, start: self.run_start, end: self.run_end, allocated: self.allocated }
    }
}

impl Ledger {
    /// Writes one period's runs, contracts, events and snapshot atomically.
    pub fn record_period(&mut self, period: &Period) -> Result<()> {
        self.write(|tx| {
            {
                let mut open = tx.prepare_cached(&format!("INSERT OR IGNORE INTO runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"))?;
                let mut close = tx.prepare_cached("UPDATE runs SET run_end = ?3, end_reason = ?4 WHERE job_id = ?1 AND run_start = ?2 AND run_end IS NULL")?;
                for update in &period.runs {
                    match update {
                        RunUpdate::Open(r) => {
                            open.execute(params![r.job_id, r.run_start, r.run_end, r.leaf, r.account, r.user, r.gpus, r.allocated, r.end_reason])?;
                        }
                        RunUpdate::Close { job_id, run_start, run_end, reason } => {
                            close.execute(params![job_id, run_start, run_end, reason])?;
                        }
                    }
                }
            }
            {
                let mut contract = tx.prepare_cached(
                    "INSERT INTO contracts (job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT(job_id) DO UPDATE SET user = excluded.user, account = excluded.account, leaf = excluded.leaf,
                         min_runtime = excluded.min_runtime, priority = excluded.priority, resumable = excluded.resumable,
                         submit_time = excluded.submit_time, comment = excluded.comment",
                )?;
                for c in &period.contracts {
                    contract.execute(params![c.job_id, c.user, c.account, c.leaf, c.min_runtime, c.priority, c.resumable, c.submit_time, c.comment])?;
                }
            }
            {
                let mut event = tx.prepare_cached("INSERT INTO events (at, job_id, kind, detail) VALUES (?1, ?2, ?3, ?4)")?;
                for e in &period.events {
                    event.execute(params![e.at, e.job_id, e.kind, e.detail])?;
                }
            }
            if let Some(snapshot) = &period.snapshot {
                snapshot.write(tx)?;
            }
            Ok(())
        })
    }

    /// This ledger file's identity: random, made when the file was created.
    pub fn identity(&self) -> Result<String> {
        self.read(|c| c.query_row("SELECT id FROM ledger_identity", [], |r| r.get(0)))
    }

    /// Runs still open: after a restart, the runs to pick up again.
    pub fn open_runs(&self) -> Result<Vec<RunRow>> {
        self.read(|c| {
            let mut stmt = c.prepare(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_end IS NULL ORDER BY job_id, run_start"))?;
            let rows = stmt.query_map([], row_to_run)?;
            rows.collect()
        })
    }

    /// Runs that overlap `[from, ...)`: open ones and those ended after `from`.
    pub fn runs_since(&self, from: i64) -> Result<Vec<RunRow>> {
        self.read(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE run_end IS NULL OR run_end > ?1 ORDER BY run_start, job_id"
            ))?;
            let rows = stmt.query_map([from], row_to_run)?;
            rows.collect()
        })
    }

    /// Every run of one job, oldest first.
    pub fn runs_of_job(&self, job_id: u32) -> Result<Vec<RunRow>> {
        self.read(|c| {
            let mut stmt = c.prepare(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE job_id = ?1 ORDER BY run_start"))?;
            let rows = stmt.query_map([job_id], row_to_run)?;
            rows.collect()
        })
    }

    pub fn contract(&self, job_id: u32) -> Result<Option<ContractRow>> {
        self.read(|c| {
            c.query_row(
                "SELECT job_id, user, account, leaf, min_runtime, priority, resumable, submit_time, comment FROM contracts WHERE job_id = ?1",
                [job_id],
                |r| {
                    Ok(ContractRow {
                        job_id: r.get(0)?,
                        user: r.get(1)?,
                        account: r.get(2)?,
                        leaf: r.get(3)?,
                        min_runtime: r.get(4)?,
                        priority: r.get(5)?,
                        resumable: r.get(6)?,
                        submit_time: r.get(7)?,
                        comment: r.get(8)?,
                    })
                },
            )
            .optional()
        })
    }

    /// Events of one job, oldest first.
    pub fn events_of_job(&self, job_id: u32) -> Result<Vec<EventRow>> {
        self.read(|c| {
            let mut stmt = c.prepare("SELECT at, job_id, kind, detail FROM events WHERE job_id = ?1 ORDER BY id")?;
            let rows = stmt.query_map([job_id], |r| Ok(EventRow { at: r.get(0)?, job_id: r.get(1)?, kind: r.get(2)?, detail: r.get(3)? }))?;
            rows.collect()
        })
    }

    /// Charged (allocated) GPU-seconds per leaf path over `[from, to]`, from
    /// the runs; unallocated runs are excluded by definition.
    pub fn charged_by_leaf(&self, from: i64, to: i64) -> Result<Vec<(String, i64)>> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT leaf, SUM(gpus * (MIN(COALESCE(run_end, ?2), ?2) - MAX(run_start, ?1)))
                 FROM runs
                 WHERE allocated = 1 AND leaf IS NOT NULL AND run_start < ?2 AND (run_end IS NULL OR run_end > ?1)
                 GROUP BY leaf ORDER BY leaf",
            )?;
            let rows = stmt.query_map([from, to], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
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
}
