//! `allot history`: every budget version, who synced it, when, and what changed.

use allot_ledger::Location;

use allot_ledger::Ledger;

pub fn run(ledger: &Location, limit: Option<usize>) -> anyhow::Result<()> {
    let l = Ledger::connect_read_only(ledger)?;
    let history = l.budget_history()?;
    if history.is_empty() {
        println!("no budget has been synced into {} yet", ledger);
    }
    for v in history.iter().take(limit.unwrap_or(usize::MAX)) {
        println!("version {}  {}  by {}  from {}", v.version, crate::format_time(v.synced_at), v.author, v.source);
        for line in v.changes.lines() {
            println!("    {line}");
        }
    }
    Ok(())
}
