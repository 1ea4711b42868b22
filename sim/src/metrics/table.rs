//! `table()`: reports side by side, as the CLI prints them.

use std::fmt::Write as _;

use super::*;

/// The reports side by side, as a text table.
pub fn table(reports: &[Report]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Report) -> String| rows.push((name.to_owned(), reports.iter().map(f).collect()));
    row("jobs", &|r| r.jobs.to_string());
    row("jobs_completed", &|r| r.jobs_completed.to_string());
    row("jobs_cancelled", &|r| r.jobs_cancelled.to_string());
    row("jobs_refused", &|r| r.jobs_refused.to_string());
    row("jobs_unfinished", &|r| r.jobs_unfinished.to_string());
    row("work not done (GPU-h)", &|r| {
        format!(
            "{} of {} ({}%)",
            fixed(r.not_completed_gpu_hours.values().sum::<f64>(), 0),
            fixed(r.submitted_gpu_hours, 0),
            fixed(100.0 * r.work_not_done_fraction, 1)
        )
    });
    row("wait_p50", &|r| human(r.wait_p50_s));
    row("wait_p90", &|r| human(r.wait_p90_s));
    row("wait_p99", &|r| human(r.wait_p99_s));
    let kinds: Vec<String> = {
        let mut k: Vec<String> = reports.iter().flat_map(|r| r.by_kind.keys().cloned()).collect();
        k.sort();
        k.dedup();
        k
    };
    for kind in &kinds {
        let get = |r: &Report, f: fn(&WaitStats) -> i64| r.by_kind.get(kind).map_or("-".to_owned(), |w| human(f(w)));
        rows.push((
            format!("{kind} wait p50/p90/p99"),
            reports.iter().map(|r| format!("{} / {} / {}", get(r, |w| w.wait_p50_s), get(r, |w| w.wait_p90_s), get(r, |w| w.wait_p99_s))).collect(),
        ));
        rows.push((
            format!("{kind} jobs (completed)"),
            reports.iter().map(|r| r.by_kind.get(kind).map_or("-".into(), |w| format!("{} ({})", w.jobs, w.jobs_completed))).collect(),
        ));
        rows.push((
            format!("{kind} preemptions (GPU-h lost)"),
            reports
                .iter()
                .map(|r| r.by_kind.get(kind).map_or("-".into(), |w| format!("{} ({})", w.preemptions, fixed(w.gpu_hours_lost_to_preemption, 0))))
                .collect(),
        ));
    }
    for class in SIZE_CLASSES {
        let get = |r: &Report, f: fn(&WaitStats) -> i64| r.by_size.get(class).map_or("-".to_owned(), |w| human(f(w)));
        if reports.iter().all(|r| !r.by_size.contains_key(class)) {
            continue;
        }
        rows.push((
            format!("{class} GPU(s) wait p50/p90/p99"),
            reports.iter().map(|r| format!("{} / {} / {}", get(r, |w| w.wait_p50_s), get(r, |w| w.wait_p90_s), get(r, |w| w.wait_p99_s))).collect(),
        ));
        rows.push((
            format!("{class} GPU(s) jobs (completed)"),
            reports.iter().map(|r| r.by_size.get(class).map_or("-".into(), |w| format!("{} ({})", w.jobs, w.jobs_completed))).collect(),
        ));
    }
    let mut row = |name: &str, f: &dyn Fn(&Report) -> String| rows.push((name.to_owned(), reports.iter().map(f).collect()));
    row("preemptions", &|r| r.preemptions.to_string());
    row("gpu_hours_lost_to_preemption", &|r| fixed(r.gpu_hours_lost_to_preemption, 1));
    row("preemptions_of_unallocated", &|r| r.preemptions_of_unallocated.to_string());
    row("preemptions_within_team", &|r| r.preemptions_within_team.to_string());
    row("preemptions_by_small_jobs", &|r| r.preemptions_by_small_jobs.to_string());
    row("preemptions_by_long_waiting_jobs", &|r| r.preemptions_by_long_waiting_jobs.to_string());
    row("ping_pongs", &|r| r.ping_pongs.to_string());
    row("occupancy", &|r| format!("{}%", fixed(100.0 * r.occupancy, 1)));
    row("unallocated_fraction", &|r| format!("{}%", fixed(100.0 * r.unallocated_fraction, 1)));
    row("max_gpus_in_use", &|r| format!("{} of {}", r.max_gpus_in_use, r.gpus));
    row("gpu_hours_delivered", &|r| fixed(r.gpu_seconds_delivered as f64 / 3600.0, 0));
    row("idle_gpu_hours_while_jobs_waited", &|r| fixed(r.idle_gpu_hours_while_jobs_waited, 0));
    row("  idle: backfill_limits", &|r| fixed(r.idle_gpu_hours_by_cause.backfill_limits, 0));
    row("  idle: whole_node_rule", &|r| fixed(r.idle_gpu_hours_by_cause.whole_node_rule, 0));
    row("  idle: no_job_fits", &|r| fixed(r.idle_gpu_hours_by_cause.no_job_fits, 0));
    row("gpu_hours_claimed_in_grace", &|r| fixed(r.gpu_hours_claimed_in_grace, 0));
    row("teams_at_95pct_of_owed", &|r| format!("{}%", fixed(100.0 * r.teams_at_95pct_of_owed, 0)));
    row("teams_at_95pct_of_owed_at_submission", &|r| format!("{}%", fixed(100.0 * r.teams_at_95pct_of_owed_at_submission, 0)));
    row("teams_at_95pct_of_owed_allocated_first", &|r| format!("{}%", fixed(100.0 * r.teams_at_95pct_of_owed_allocated_first, 0)));
    row("worst_team_hours_below_half_share", &|r| format!("{}%", fixed(100.0 * r.worst_team_hours_below_half_share, 1)));
    row("sim_seconds", &|r| r.sim_seconds.map_or("-".into(), |s| format!("{s:.3}")));
    row("simulated_days_per_second", &|r| r.simulated_days_per_second.map_or("-".into(), |s| format!("{s:.0}")));

    let mut out = String::new();
    let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let col_w: Vec<usize> = (0..reports.len()).map(|i| rows.iter().map(|r| r.1[i].len()).max().unwrap_or(0).max(reports[i].policy.name().len())).collect();
    let _ = write!(out, "{:name_w$}", "metric");
    for (i, r) in reports.iter().enumerate() {
        let _ = write!(out, "  {:>w$}", r.policy.name(), w = col_w[i]);
    }
    out.push('\n');
    for (name, cells) in &rows {
        let _ = write!(out, "{name:name_w$}");
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(out, "  {:>w$}", c, w = col_w[i]);
        }
        out.push('\n');
    }

    // Teams: share, owed and delivered per policy.
    out.push('\n');
    let team_w = reports.first().map_or(4, |r| r.teams.iter().map(|t| t.team.len()).max().unwrap_or(4).max(4));
    let _ = write!(out, "{:team_w$}  {:>6}  {:>10}", "team", "share", "owed@sub");
    for r in reports {
        let p = r.policy.name();
        let _ = write!(out, "  {:>10}  {:>10}  {:>6}  {:>7}  {:>9}", format!("{p} owed"), "delivered", "d/o", "d/o@sub", "d/o@alloc");
    }
    out.push('\n');
    if let Some(first) = reports.first() {
        for (i, t) in first.teams.iter().enumerate() {
            let _ = write!(out, "{:team_w$}  {:>5}%  {:>10}", t.team, fixed(100.0 * t.effective_share, 1), fixed(t.owed_at_submission_gpu_hours, 0));
            for r in reports {
                let t = &r.teams[i];
                let pct = |x: Option<f64>| x.map_or("-".into(), |x| format!("{}%", fixed(100.0 * x, 0)));
                let _ = write!(
                    out,
                    "  {:>10.0}  {:>10.0}  {:>6}  {:>7}  {:>9}",
                    t.owed_gpu_hours,
                    t.delivered_gpu_hours,
                    pct(t.delivered_over_owed),
                    pct(t.delivered_over_owed_at_submission),
                    pct(t.delivered_over_owed_allocated_first)
                );
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "(GPU-hours; owed: from each policy's own queue, over the whole run; owed@sub: over the submission span, as if every job started at its submission, the same for every policy; d/o = delivered / owed; d/o@sub = delivered in the span / owed@sub; d/o@alloc = delivered / owed allocated work first, free work only what allocated work left)");
    for r in reports {
        if !r.not_completed.is_empty() {
            let _ = writeln!(out, "\n{}: jobs that did not complete (work never done)", r.policy.name());
            for (why, n) in &r.not_completed {
                let gh = r.not_completed_gpu_hours.get(why).copied().unwrap_or(0.0);
                let _ = writeln!(out, "  {n:>7}  {why} ({} GPU-hours)", fixed(gh, 0));
            }
        }
    }
    for r in reports {
        for w in &r.warnings {
            let _ = writeln!(out, "\nwarning: {}: {w}", r.policy.name());
        }
    }
    out
}
