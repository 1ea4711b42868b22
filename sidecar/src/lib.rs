//! The `allot` command's building blocks, as a library so that tests drive
//! the very code the command runs.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub mod associations;
pub mod budget_cmd;
pub mod cluster_report;
pub mod doctor;
pub mod history;
pub mod identity;
pub mod ledger_cmd;
pub mod report;
pub mod serve;
pub mod session;
pub mod sync;
pub mod watch;

/// Which cluster's rows a read command shows, when several clusters share
/// the ledger (`--cluster`); `None`: the lab as a whole.
pub type ClusterScope<'a> = Option<&'a str>;

/// Whether a command can show the lab as a whole: `usage`, `report`, `why`
/// and `budget show` can (sums per budget add up across clusters, and jobs
/// are told apart by their cluster); the page and a replay follow one
/// cluster's queue, in that cluster's order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    LabOrCluster,
    OneCluster,
}

/// Opens `ledger` for reading, scoped to `cluster`. A cluster the ledger has
/// no rows of is refused, naming those it has (a typo would show nothing);
/// a command that follows jobs on a ledger of several clusters asks which.
/// `choose`: how the command names a cluster (`allot report --cluster NAME`).
pub fn open_reader(ledger: &allot_ledger::Location, cluster: ClusterScope<'_>, reads: Reads, choose: &str) -> anyhow::Result<allot_ledger::Ledger> {
    let l = allot_ledger::Ledger::connect_read_only(ledger)?;
    let known = l.clusters()?;
    let named: Vec<&str> = known.iter().map(String::as_str).filter(|c| !c.is_empty()).collect();
    match cluster {
        Some(c) if !named.contains(&c) => {
            let has = if named.is_empty() {
                "rows of no named cluster yet (the plugins name theirs once they write)".to_owned()
            } else {
                format!("clusters {}", named.join(", "))
            };
            Err(anyhow::anyhow!("the ledger {ledger} has no cluster '{c}' (`{choose}`); it has {has}"))
        }
        Some(_) => Ok(l.for_cluster(cluster)?),
        None if reads == Reads::OneCluster && known.len() > 1 => Err(anyhow::anyhow!(
            "the ledger {ledger} holds several clusters ({}), whose job ids repeat: say which with `{choose}`",
            known.iter().map(|c| if c.is_empty() { "(unnamed)" } else { c.as_str() }).collect::<Vec<_>>().join(", ")
        )),
        None => Ok(l),
    }
}

/// Now, in Unix seconds. The CLI is the one layer that reads the clock.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// A Unix time as `2026-11-29T10:00:00Z`.
pub fn format_time(t: i64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t.max(0) as u64)).to_string()
}
