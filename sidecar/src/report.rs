//! `allot usage` and `allot why`: what the ledger knows, explained.

use allot_ledger::Location;
use std::fmt::Write as _;

use allot::budget::BudgetTree;
use allot::duration::{format_duration, parse_duration};
use allot::fairshare::Ranking;
use allot::occupancy::usage_in_window;
use allot_ledger::Ledger;
use anyhow::{anyhow, Context};

fn current_tree(l: &Ledger) -> anyhow::Result<(i64, BudgetTree)> {
    let v = l.current_budget()?.ok_or_else(|| anyhow!("no budget has been synced into {} yet", l.path()))?;
    // As the cluster read shares its GPUs (the lab: as written).
    let tree = v.tree().map_err(|e| anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?.for_cluster(l.cluster());
    Ok((v.version, tree))
}

/// The ranking the plugins last computed (same usage, same code), if any.
fn last_ranking(l: &Ledger, tree: &BudgetTree) -> anyhow::Result<Option<(Ranking, i64)>> {
    Ok(l.ranked_usage(tree)?.map(|s| (s.ranking(tree), s.computed_at)))
}

fn hours(gpu_seconds: f64) -> String {
    format!("{:.2}", gpu_seconds / 3600.0)
}

/// `allot usage [--window D]`: GPU-hours charged per leaf over the window
/// ending now, against each leaf's allocation.
pub fn usage(ledger: &Location, cluster: crate::ClusterScope<'_>, window: Option<&str>, now: i64) -> anyhow::Result<()> {
    let l = crate::open_reader(ledger, cluster, crate::Reads::LabOrCluster, "allot usage --cluster NAME")?;
    let (version, tree) = current_tree(&l)?;
    let window = match window {
        Some(w) => parse_duration(w).map_err(|e| anyhow!("--window: {e}"))?,
        None => tree.settings.lookback,
    };
    let capacity = match (tree.settings.gpus, l.usage_snapshot()?) {
        (Some(g), _) => g,
        (None, Some(s)) => s.capacity_gpus,
        (None, None) => return Err(anyhow!("the budget gives no GPU count and the plugins have not counted them yet")),
    };
    let from = now - window;
    let runs = l.runs_since(from).context("reading runs")?;
    println!(
        "usage over the last {} (budget version {version}, {capacity} {unit}s): {unit}-hours charged to each leaf against its allocation",
        format_duration(window),
        unit = tree.settings.charge.unit()
    );
    // One pass: each run to its leaf in the current tree, or to "other".
    let mut intervals = Vec::with_capacity(runs.len());
    let mut run_count = vec![0usize; tree.leaves.len()];
    let mut other = 0i64;
    for r in &runs {
        // The leaf it was recorded under, else its account's now: as the plugins charge it.
        match tree.charged_leaf_of_run(r.leaf.as_deref(), r.account.as_deref()) {
            Some(leaf) => {
                run_count[leaf as usize] += 1;
                intervals.push(r.interval(leaf));
            }
            None => other += r.interval(0).gpu_seconds_within(from, now),
        }
    }
    let used = usage_in_window(&intervals, tree.leaves.len(), now, window);
    let mut rows = vec![["LEAF".to_owned(), "SHARE".into(), "OWED".into(), "CHARGED".into(), "USED".into(), "UNALLOCATED".into(), "RUNS".into()]];
    for (i, &node) in tree.leaves.iter().enumerate() {
        let n = tree.node(node);
        let charged = used.charged[i] as f64;
        let owed = n.effective_share * capacity as f64 * window as f64;
        rows.push([
            n.path.clone(),
            format!("{:.2}%", n.effective_share * 100.0),
            hours(owed),
            hours(charged),
            format!("{:.2}", if owed > 0.0 { charged / owed } else { 0.0 }),
            hours(used.unallocated[i] as f64),
            run_count[i].to_string(),
        ]);
    }
    print_table(&rows, &[1, 2, 3, 4, 5, 6]);
    if other > 0 {
        println!("(and {} {}-hours by jobs outside the current budget tree)", hours(other as f64), tree.settings.charge.unit());
    }
    Ok(())
}

/// `allot why JOB`: the job's contract, runs and events, and where its leaf
/// stands in the fair-share order, level by level.
pub fn why(ledger: &Location, cluster: crate::ClusterScope<'_>, job: u32) -> anyhow::Result<()> {
    let mut l = crate::open_reader(ledger, cluster, crate::Reads::LabOrCluster, "allot why JOB --cluster NAME")?;
    scope_to_the_job(&mut l, job)?;
    print!("{}", why_text(&l, job)?);
    Ok(())
}

/// A lab's reader becomes that of the job's cluster, when one cluster has
/// a job of that number: `why` explains the job with its own cluster's
/// shares and usage. (With two, [`why_text`] asks which.)
pub fn scope_to_the_job(l: &mut Ledger, job: u32) -> anyhow::Result<()> {
    if l.cluster().is_none() {
        if let [only] = l.clusters_of_job(job)?.as_slice() {
            if !only.is_empty() {
                l.set_cluster(Some(&only.clone()))?;
            }
        }
    }
    Ok(())
}

/// What `allot why JOB` prints (`allot serve` shows it too).
pub fn why_text(l: &Ledger, job: u32) -> anyhow::Result<String> {
    let mut out = String::new();
    let (_, tree) = current_tree(l)?;
    if l.cluster().is_none() {
        let on = l.clusters_of_job(job)?;
        if on.len() > 1 {
            return Err(anyhow!("job {job} is on clusters {}: say which with `allot why {job} --cluster NAME`", on.join(", ")));
        }
    }
    let contract = l.contract(job)?;
    let runs = l.runs_of_job(job)?;
    let events = l.events_of_job(job)?;
    if contract.is_none() && runs.is_empty() {
        return Err(anyhow!("the ledger has no job {job} (the plugins record jobs within one RecomputePeriod of submission)"));
    }
    let _ = writeln!(out, "job {job}");
    let leaf_path = contract.as_ref().and_then(|c| c.leaf.clone()).or_else(|| runs.iter().find_map(|r| r.leaf.clone()));
    if let Some(c) = &contract {
        let kind = if c.min_runtime > 0 { "allocated: charged to its budget and protected" } else { "unallocated: free, preemptible at any time" };
        let _ = writeln!(
            out,
            "  user {}, account {}, budget {}",
            c.user,
            c.account.as_deref().unwrap_or("-"),
            c.leaf.as_deref().unwrap_or("(outside the budget tree)")
        );
        let _ = writeln!(
            out,
            "  contract: min_runtime={} priority={} ({kind}); {}",
            format_duration(c.min_runtime),
            c.priority,
            if c.resumable { "resumable (requeued when preempted)" } else { "not resumable (cancelled when preempted)" }
        );
        let _ = writeln!(out, "  submitted {}", crate::format_time(c.submit_time));
        if let Some(name) = crate::session::name_in_comment(&c.comment) {
            let _ = writeln!(
                out,
                "  an interactive session (allot session {name}): checkpointed at each grace signal, restored when its job runs again; its own log says each step (allot session list)"
            );
        }
    }
    for (i, r) in runs.iter().enumerate() {
        let end = match r.run_end {
            Some(e) => format!("to {} ({}), {}", crate::format_time(e), format_duration(e - r.run_start), r.end_reason.as_deref().unwrap_or("ended")),
            None => "still running".to_owned(),
        };
        let charge = if r.allocated { "charged" } else { "not charged" };
        let _ = writeln!(out, "  run {}: {} GPUs from {} {end}; {charge}", i + 1, r.gpus, crate::format_time(r.run_start));
    }
    for e in &events {
        let _ = writeln!(out, "  {} {}: {}", crate::format_time(e.at), e.kind, e.detail);
    }
    let Some(path) = leaf_path else { return Ok(out) };
    let Some(leaf) = tree.find(&path).and_then(|n| tree.node(n).leaf) else {
        let _ = writeln!(out, "  its budget {path} is no longer in the budget tree");
        return Ok(out);
    };
    let Some((ranking, at)) = last_ranking(l, &tree)? else {
        let _ = writeln!(out, "  no usage recorded yet: every budget ranks as unused");
        return Ok(out);
    };
    let _ = writeln!(
        out,
        "  queue position: allocated jobs first, then by budget (this one ranks {} of {} at {}), then declared priority, then submit time",
        allot::fairshare::ordinal(ranking.leaf_rank[leaf as usize] + 1),
        ranking.leaves(),
        crate::format_time(at)
    );
    let _ = writeln!(out, "  why the budget ranks there, level by level (lower use of its share ranks higher):");
    if tree.settings.lookahead > 0 {
        // The figures below are what the order used, not the window's use alone.
        let _ = writeln!(
            out,
            "    (use counts the GPUs each budget's jobs held then as used {} longer: the budget's lookahead)",
            format_duration(tree.settings.lookahead)
        );
    }
    for node in ranking.levels_of(leaf) {
        let s = ranking.standings[node as usize];
        let n = tree.node(node);
        let _ = writeln!(
            out,
            "    {:<28} {}: used {} of {} GPU-hours owed in the window ({} of its share)",
            n.path,
            s.rank_text(),
            hours(s.usage as f64),
            hours(s.allocation),
            s.share_used_text()
        );
    }
    Ok(out)
}

fn print_table(rows: &[[String; 7]], right: &[usize]) {
    let widths: Vec<usize> = (0..7).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, cell)| if right.contains(&c) { format!("{cell:>w$}", w = widths[c]) } else { format!("{cell:<w$}", w = widths[c]) })
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}
