//! `allot report` on a ledger whose every figure is worked out by hand.

use allot::budget::BudgetTree;
use allot_cli::cluster_report::{compute, render};
use allot_ledger::{ContractRow, DemandRow, EventRow, JobEnd, Ledger, Period, RunRow, RunUpdate};

const T0: i64 = 1_000_000;
const H: f64 = 3600.0;

/// 4 GPUs; the root splits evenly between project p (one team, a) and team b.
const BUDGET: &str = "[cluster]\ngpus = 4\n[budget]\n[budget.p]\nshare = 1\n[budget.p.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n";

fn demand(leaf: &str, at: i64, pending: u32, running: u32, running_unallocated: u32) -> DemandRow {
    DemandRow { leaf: leaf.into(), at: T0 + at, pending_allocated: pending, pending_unallocated: 0, running_allocated: running, running_unallocated }
}

fn run(job_id: u32, leaf: &str, gpus: u32, start: i64, end: Option<i64>, allocated: bool, reason: Option<&str>) -> RunUpdate {
    RunUpdate::Open(RunRow {
        job_id,
        run_start: T0 + start,
        run_end: end.map(|e| T0 + e),
        leaf: Some(leaf.into()),
        account: None,
        user: None,
        gpus,
        allocated,
        end_reason: reason.map(str::to_owned),
    })
}

fn contract(job_id: u32, leaf: &str, submit: i64, min_runtime: i64, gpus: u32, resumable: bool) -> ContractRow {
    ContractRow {
        job_id,
        user: "u".into(),
        account: Some(leaf.rsplit('/').next().unwrap().into()),
        leaf: Some(leaf.into()),
        min_runtime,
        priority: "normal".into(),
        resumable,
        submit_time: T0 + submit,
        comment: String::new(),
        gpus: Some(gpus),
    }
}

/// Two hours from T0 (times below are seconds after T0):
/// - job 1 (a, 4 GPUs, 1 h contract, not resumable) runs from -1000 until a
///   preemption signalled at 4100 ends it at 4200; it waits again after.
/// - job 2 (b, 2 GPUs, 10 min: a debug job) is submitted at 3600, starts at 4200.
/// - job 3 (a, 2 GPUs, unallocated) is submitted at 4000, runs 4200-7000.
/// - job 4 (b, 8 GPUs, 2 h) is submitted at 5000 and never starts.
/// - job 5 (a) is submitted at 6000 and cancelled at 6500 without starting.
fn ledger(dir: &tempfile::TempDir) -> Ledger {
    let mut l = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let tree = BudgetTree::parse(BUDGET).unwrap();
    l.sync_budget(BUDGET, &tree, "admin", "b.toml", T0 - 5000).unwrap();
    let period = Period {
        runs: vec![
            run(1, "p/a", 4, -1000, Some(4200), true, Some("preempted")),
            run(2, "b", 2, 4200, None, true, None),
            run(3, "p/a", 2, 4200, Some(7000), false, Some("completed")),
        ],
        contracts: vec![
            contract(1, "p/a", -1200, 3600, 4, false),
            contract(2, "b", 3600, 600, 2, true),
            contract(3, "p/a", 4000, 0, 2, true),
            contract(4, "b", 5000, 7200, 8, true),
            contract(5, "p/a", 6000, 3600, 1, true),
        ],
        events: vec![EventRow { at: T0 + 4100, job_id: 1, kind: "preempted".into(), detail: String::new() }],
        demand: vec![
            demand("p/a", -1000, 0, 4, 0),
            demand("p/a", 4200, 4, 0, 2),
            demand("p/a", 7000, 4, 0, 0),
            demand("b", -1000, 0, 0, 0),
            demand("b", 3600, 2, 0, 0),
            demand("b", 4200, 0, 2, 0),
            demand("b", 5000, 8, 2, 0),
        ],
        job_ends: vec![JobEnd { job_id: 3, at: T0 + 7000 }, JobEnd { job_id: 5, at: T0 + 6500 }],
        snapshot: None,
    };
    l.record_period(&period).unwrap();
    l
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

#[test]
fn every_figure_matches_the_hand_computed_one() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let r = compute(&l, 7200, T0 + 7200).unwrap();
    assert_eq!((r.from, r.to, r.gpus), (T0, T0 + 7200, 4));
    let node = |path: &str| r.nodes.iter().find(|n| n.path == path).unwrap_or_else(|| panic!("no node {path:?}")).clone();
    let (a, b, p, root) = (node("p/a"), node("b"), node("p"), node(""));

    // Demand, GPU-seconds: a 4 x 3600 in hour 1; in hour 2 4 x 600 + 6 x 2800 + 4 x 200.
    assert!(close(a.demand_gpu_hours, (4.0 * 3600.0 + 20000.0) / H), "{a:?}");
    // b: 2 x 1400, then 10 x 2200.
    assert!(close(b.demand_gpu_hours, (2.0 * 1400.0 + 10.0 * 2200.0) / H), "{b:?}");
    // Owed: hour 1 all 4 GPU-hours to a (b wants nothing); hour 2 both
    // want more than half: 2 and 2.
    assert_eq!((a.owed_gpu_hours, b.owed_gpu_hours, p.owed_gpu_hours, root.owed_gpu_hours), (6.0, 2.0, 6.0, 8.0));
    // Delivered: a 4 x 4200 (its run clipped at T0) + 2 x 2800; b 2 x 3000.
    assert!(close(a.delivered_gpu_hours, 22400.0 / H) && close(a.charged_gpu_hours, 16800.0 / H) && close(a.unallocated_gpu_hours, 5600.0 / H), "{a:?}");
    assert!(close(b.delivered_gpu_hours, 6000.0 / H) && close(b.charged_gpu_hours, 6000.0 / H) && b.unallocated_gpu_hours == 0.0, "{b:?}");
    assert_eq!(p.delivered_gpu_hours, a.delivered_gpu_hours);
    assert!(close(root.delivered_gpu_hours, 28400.0 / H));
    assert!(close(a.delivered_over_owed.unwrap(), 22400.0 / 21600.0) && close(b.delivered_over_owed.unwrap(), 6000.0 / 7200.0));
    // a is at 95% of what it was owed, b is not.
    assert_eq!(r.teams_at_95pct_of_owed, 0.5);
    assert!(close(r.occupancy, 28400.0 / 28800.0) && close(r.unallocated_fraction, 5600.0 / 28400.0), "{r:?}");
    assert_eq!(r.max_gpus_in_use, 4, "job 1's end and jobs 2 and 3's starts in the same second");
    assert_eq!(r.gpu_seconds_delivered, 28400);

    // Jobs submitted in the span: 2 (waited 600 s), 3 (200 s), 4 (still
    // waiting: 2200 s so far); 5 left without starting; 1 came before.
    assert_eq!((r.jobs, r.jobs_started, r.jobs_waiting, r.jobs_left_without_starting, r.jobs_completed), (4, 2, 1, 1, 1));
    assert_eq!((r.wait_p50_s, r.wait_p90_s, r.wait_p99_s), (600, 2200, 2200));
    let kind = |k: &str| r.by_kind.get(k).unwrap_or_else(|| panic!("no kind {k}: {:?}", r.by_kind)).clone();
    assert_eq!((kind("debug").jobs, kind("debug").wait_p50_s), (1, 600));
    assert_eq!((kind("unallocated").jobs, kind("unallocated").jobs_completed, kind("unallocated").wait_p50_s), (1, 1, 200));
    assert_eq!((kind("training").jobs, kind("training").wait_p50_s), (1, 2200));
    assert_eq!(r.by_size["2-8"].jobs, 3, "jobs 2, 3 and 4's 8 GPUs");
    assert_eq!((b.jobs, b.wait_p50_s, b.wait_p90_s, root.jobs), (2, 600, 2200, 3));

    // One preemption: job 1, not resumable, loses its whole run (4 x 5200).
    assert_eq!((r.preemptions, r.preemptions_of_unallocated), (1, 0));
    assert!(close(r.gpu_hours_lost_to_preemption, 20800.0 / H), "{r:?}");
    assert_eq!(kind("training").preemptions, 1, "job 1's contract (1 h, 4 GPUs) is a training job's");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    let text = render(&r);
    if std::env::var_os("SHOW").is_some() { println!("{text}"); }
    for wanted in ["(cluster)", "occupancy 98.6%", "budgets at 95% or more of what they were owed: 50.0%", "preemptions 1"] {
        assert!(text.contains(wanted), "{wanted:?} not in:\n{text}");
    }
}

#[test]
fn a_span_longer_than_the_records_starts_at_the_first_demand_record() {
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let r = compute(&l, 30 * 86400, T0 + 7200).unwrap();
    assert_eq!(r.from, T0 - 1000, "the first demand rows are at T0 - 1000");
    assert!(r.warnings.iter().any(|w| w.contains("demand records start at")), "{:?}", r.warnings);
    // Job 1's run now lies wholly in the span: 4 x 5200 more GPU-seconds for a.
    let a = r.nodes.iter().find(|n| n.path == "p/a").unwrap();
    assert!(close(a.delivered_gpu_hours, (4.0 * 5200.0 + 5600.0) / H), "{a:?}");
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &std::path::Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    let be = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (be(16), be(20))
}

#[test]
fn the_pictures_are_drawn_for_the_leaves_or_a_subtree() {
    use allot_cli::cluster_report::{compute_with_timelines, draw_shares, picture_bucket};
    let dir = tempfile::tempdir().unwrap();
    let l = ledger(&dir);
    let (r, t) = compute_with_timelines(&l, 7200, T0 + 7200).unwrap();
    let font = allot_sim::plot::load_font(std::path::Path::new(allot_sim::plot::DEFAULT_FONT)).unwrap_or_else(|e| panic!("{e}"));
    // Kept for a look when ALLOT_KEEP_PICTURES names a directory.
    let out = std::env::var_os("ALLOT_KEEP_PICTURES").map(std::path::PathBuf::from).unwrap_or_else(|| dir.path().join("plots"));
    let leaves = draw_shares(&out.join("leaves"), &font, &r, &t, None).unwrap();
    assert_eq!(png_size(&leaves), (1500, 110 + 260));
    // The root's subtree: 4 nodes, one row of panels; a deeper tree wraps at 3 a row.
    let all = draw_shares(&out.join("all"), &font, &r, &t, Some("")).unwrap();
    assert_eq!(png_size(&all).0, 1500);
    let e = draw_shares(&out.join("x"), &font, &r, &t, Some("nosuch")).unwrap_err().to_string();
    assert!(e.contains("--under nosuch: the budget has no such node; its nodes are p, p/a, b"), "{e}");
    // About 120 buckets of a round length.
    assert_eq!((picture_bucket(180), picture_bucket(900), picture_bucket(7200), picture_bucket(30 * 86400)), (10, 10, 60, 3600));
}
