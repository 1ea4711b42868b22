//! `allot report` on a ledger whose every figure is worked out by hand.

use allot::budget::BudgetTree;
use allot_cli::cluster_report::{compute, render};
use allot_ledger::{ContractRow, DemandRow, EventRow, JobEnd, Ledger, Period, RunRow, RunUpdate};

const T0: i64 = 1_000_000;
const H: f64 = 3600.0;

/// 4 GPUs; the root splits evenly between project p (one team, a) and team b.
const BUDGET: &str =
    "[cluster]\ngpus = 4\n[budget]\n[budget.p]\nshare = 1\n[budget.p.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n";

fn demand(t0: i64, leaf: &str, at: i64, pending: u32, running: u32, running_unallocated: u32) -> DemandRow {
    DemandRow { leaf: leaf.into(), at: t0 + at, pending_allocated: pending, pending_unallocated: 0, running_allocated: running, running_unallocated }
}

/// A run from `start` to `end` (`None`: going on), seconds after `t0`.
fn run(t0: i64, job_id: u32, leaf: &str, gpus: u32, (start, end): (i64, Option<i64>), allocated: bool, reason: Option<&str>) -> RunUpdate {
    RunUpdate::Open(RunRow {
        job_id,
        run_start: t0 + start,
        run_end: end.map(|e| t0 + e),
        leaf: Some(leaf.into()),
        account: None,
        user: None,
        gpus,
        allocated,
        end_reason: reason.map(str::to_owned),
    })
}

fn contract(t0: i64, job_id: u32, leaf: &str, submit: i64, min_runtime: i64, gpus: u32, resumable: bool) -> ContractRow {
    ContractRow {
        job_id,
        user: "u".into(),
        account: Some(leaf.rsplit('/').next().unwrap().into()),
        leaf: Some(leaf.into()),
        min_runtime,
        priority: "normal".into(),
        resumable,
        submit_time: t0 + submit,
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
    ledger_at(dir, T0)
}

fn ledger_at(dir: &tempfile::TempDir, t0: i64) -> Ledger {
    let mut l = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let tree = BudgetTree::parse(BUDGET).unwrap();
    l.sync_budget(BUDGET, &tree, "admin", "b.toml", t0 - 5000).unwrap();
    let period = Period {
        runs: vec![
            run(t0, 1, "p/a", 4, (-1000, Some(4200)), true, Some("preempted")),
            run(t0, 2, "b", 2, (4200, None), true, None),
            run(t0, 3, "p/a", 2, (4200, Some(7000)), false, Some("completed")),
        ],
        contracts: vec![
            contract(t0, 1, "p/a", -1200, 3600, 4, false),
            contract(t0, 2, "b", 3600, 600, 2, true),
            contract(t0, 3, "p/a", 4000, 0, 2, true),
            contract(t0, 4, "b", 5000, 7200, 8, true),
            contract(t0, 5, "p/a", 6000, 3600, 1, true),
        ],
        events: vec![EventRow { at: t0 + 4100, job_id: 1, kind: "preempted".into(), detail: String::new() }],
        demand: vec![
            demand(t0, "p/a", -1000, 0, 4, 0),
            demand(t0, "p/a", 4200, 4, 0, 2),
            demand(t0, "p/a", 7000, 4, 0, 0),
            demand(t0, "b", -1000, 0, 0, 0),
            demand(t0, "b", 3600, 2, 0, 0),
            demand(t0, "b", 4200, 0, 2, 0),
            demand(t0, "b", 5000, 8, 2, 0),
        ],
        job_ends: vec![JobEnd { job_id: 3, at: t0 + 7000 }, JobEnd { job_id: 5, at: t0 + 6500 }],
        snapshot: None,
    };
    l.record_period(&period).unwrap();
    l
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

/// Two hours on 4 GPUs, b running 2 GPUs (allocated) throughout and
/// waiting for 2 more, allocated. Hour 1: a's free run (2 GPUs,
/// `min_runtime=0`) holds the other half. Hour 2: a's run has ended and its
/// next free job (2 GPUs) waits.
/// - Owed as both wanted: 2 GPU-hours each per hour; a got 2 of 4 (50%),
///   b 4 of 4.
/// - Owed as the contract owes it: each hour b's allocated work all 4 (free
///   work yields to any allocated job), a's free work, running or waiting,
///   nothing. a got more than it was owed, b 4 of 8: the free run held
///   GPUs b's allocated work was owed.
#[test]
fn owed_allocated_first_owes_free_work_only_what_allocated_work_left() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path().join("ledger.db")).unwrap();
    l.sync_budget(BUDGET, &BudgetTree::parse(BUDGET).unwrap(), "admin", "b.toml", T0 - 100).unwrap();
    let free_pending = |at: i64, gpus: u32| DemandRow {
        leaf: "p/a".into(),
        at: T0 + at,
        pending_allocated: 0,
        pending_unallocated: gpus,
        running_allocated: 0,
        running_unallocated: 0,
    };
    let period = Period {
        runs: vec![run(T0, 1, "p/a", 2, (-10, Some(3600)), false, Some("completed")), run(T0, 2, "b", 2, (-10, None), true, None)],
        contracts: vec![
            contract(T0, 1, "p/a", -20, 0, 2, true),
            contract(T0, 2, "b", -20, 7200, 2, true),
            contract(T0, 3, "b", -20, 3600, 2, true),
            contract(T0, 4, "p/a", 3600, 0, 2, true),
        ],
        events: vec![],
        demand: vec![demand(T0, "p/a", -10, 0, 0, 2), free_pending(3600, 2), demand(T0, "b", -10, 2, 2, 0)],
        job_ends: vec![JobEnd { job_id: 1, at: T0 + 3600 }],
        snapshot: None,
    };
    l.record_period(&period).unwrap();
    let r = compute(&l, 7200, T0 + 7200).unwrap();
    let node = |path: &str| r.nodes.iter().find(|n| n.path == path).unwrap_or_else(|| panic!("no node {path:?}")).clone();
    let (a, b, root) = (node("p/a"), node("b"), node(""));
    assert_eq!((a.owed_gpu_hours, b.owed_gpu_hours), (4.0, 4.0), "{r:?}");
    assert_eq!((a.delivered_gpu_hours, b.delivered_gpu_hours), (2.0, 4.0));
    assert_eq!((a.delivered_over_owed, b.delivered_over_owed), (Some(0.5), Some(1.0)));
    // Hour 2's free demand is a job pending, not running: free all the same.
    assert_eq!((a.owed_allocated_first_gpu_hours, b.owed_allocated_first_gpu_hours, root.owed_allocated_first_gpu_hours), (0.0, 8.0, 8.0));
    assert_eq!((a.delivered_over_owed_allocated_first, b.delivered_over_owed_allocated_first), (None, Some(0.5)), "{r:?}");
    // a was owed nothing that way and counts as served; b does not.
    assert_eq!((r.teams_at_95pct_of_owed, r.teams_at_95pct_of_owed_allocated_first), (0.5, 0.5));
    let text = render(&r);
    assert!(text.contains("budgets at 95% or more of what they were owed: 50.0% (50.0% owing allocated work first)"), "{text}");
    assert!(text.contains("D/O@ALLOC"), "{text}");
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
    if std::env::var_os("SHOW").is_some() {
        println!("{text}");
    }
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
    // The queue: jobs 1 (preempted, waiting again) and 4 wait; b used less
    // of its share than a in the plugins' last ranking, so b's job 4 goes first.
    use allot_cli::cluster_report::{draw_queue, queue_rows};
    let mut w = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let leaf = |leaf: &str, charged| allot_ledger::LeafUsage { leaf: leaf.into(), charged, unallocated: 0, running: 0 };
    let snapshot =
        allot_ledger::UsageSnapshot { computed_at: T0 + 7200, budget_version: 1, capacity_gpus: 4, leaves: vec![leaf("p/a", 16800), leaf("b", 6000)] };
    w.record_period(&Period { snapshot: Some(snapshot), ..Default::default() }).unwrap();
    let allot_cli::cluster_report::QueueView { rows, more, .. } = queue_rows(&l, &t.tree).unwrap();
    let labels: Vec<&str> = rows.iter().map(|(_, r)| r.label.as_str()).collect();
    assert_eq!((labels, more), (vec!["job 4 (u): 8 GPUs, 2h normal", "job 1 (u): 4 GPUs, 1h normal"], 0));
    let names: Vec<&str> = rows[1].1.levels.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["p", "a"], "job 1's budget, level by level");
    assert_eq!((rows[0].1.levels[0].sibling_rank, rows[1].1.levels[0].sibling_rank), (0, 1));
    assert_eq!((rows[0].0, rows[1].0), (4, 1));
    let q = draw_queue(&out.join("leaves"), &font, &l, &t.tree).unwrap();
    assert_eq!(png_size(&q).0, 330 + 300 * 2 + 30);
    // About 120 buckets of a round length.
    assert_eq!((picture_bucket(180), picture_bucket(900), picture_bucket(7200), picture_bucket(30 * 86400)), (10, 10, 60, 3600));
}

/// `allot serve` in a real headless browser (Debian's Chromium): the page
/// shows the tree, the waiting jobs and the pictures, a job's explanation
/// opens, `/metrics` speaks Prometheus; a screenshot is kept in
/// `target/test-artifacts/allot-serve.png`.
#[test]
fn the_page_shows_the_tree_and_a_jobs_explanation_in_a_real_browser() {
    use std::io::{BufRead, Read, Write};
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| std::path::Path::new(p).exists());
    let chromium = chromium.expect("this test drives Debian's Chromium: apt-get install chromium (scripts/install-deps.sh --browser installs it)");
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let t0 = now - 7200;
    let l = ledger_at(&dir, t0);
    drop(l);
    let mut w = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let leaf = |leaf: &str, charged| allot_ledger::LeafUsage { leaf: leaf.into(), charged, unallocated: 0, running: 0 };
    let snapshot = allot_ledger::UsageSnapshot { computed_at: now, budget_version: 1, capacity_gpus: 4, leaves: vec![leaf("p/a", 16800), leaf("b", 6000)] };
    w.record_period(&Period { snapshot: Some(snapshot), ..Default::default() }).unwrap();

    /// The server, killed when the test ends however it ends.
    struct Serving(std::process::Child);
    impl Drop for Serving {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let ledger_path = dir.path().join("ledger.db");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["--ledger", ledger_path.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--since", "2h"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let _serving = Serving(child);
    assert!(first.starts_with("allot serve: http://127.0.0.1:"), "{first}");
    let url = first.split_whitespace().nth(2).unwrap().to_owned();
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_owned();

    let profile = tempfile::tempdir().unwrap();
    let browser = |args: &[&str]| {
        let out = std::process::Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", &format!("--user-data-dir={}", profile.path().display())])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "chromium {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let page = browser(&["--dump-dom", &url]);
    for wanted in ["(cluster)", "title=\"p/a\"", "Budgets", "Waiting jobs", "job 4 (u): 8 GPUs, 2h normal", "/why?job=4", "src=\"/shares.png\""] {
        assert!(page.contains(wanted), "{wanted:?} not in the page:\n{page}");
    }
    // Standing in words: p and b are half the cluster each, owed 0.5 x 4
    // GPUs x 7 days = 336 GPU-hours; p used 16,800 GPU-s (1.4%), b 6,000
    // (0.50%), so b is first of the two; a, p's only child, has all of p's share.
    for wanted in [
        "used 1.4% of its share, 2nd of 2 siblings",
        "used 0.50% of its share, 1st of 2 siblings",
        "a: used 1.4% of its share, no siblings",
        "b: used 0.50% of its share, 1st of 2 siblings",
    ] {
        assert!(page.contains(wanted), "{wanted:?} not in the page:\n{page}");
    }
    let why = browser(&["--dump-dom", &format!("{url}why?job=1")]);
    assert!(why.contains("contract: min_runtime=1h") && why.contains("preempted"), "job 1's explanation:\n{why}");
    for wanted in [
        "this one ranks 2nd of 2",
        "2nd of 2 siblings: used 4.67 of 336.00",
        "(1.4% of its share)",
        "no siblings: used 4.67 of 336.00 GPU-hours owed in the window (1.4% of its share)",
    ] {
        assert!(why.contains(wanted), "{wanted:?} not in job 1's explanation:\n{why}");
    }
    let unknown = browser(&["--dump-dom", &format!("{url}why?job=99")]);
    assert!(unknown.contains("the ledger has no job 99"), "{unknown}");

    // The screenshot, kept as the test's artifact.
    let artifacts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("allot-serve.png");
    let _ = std::fs::remove_file(&shot);
    browser(&["--window-size=1400,1500", &format!("--screenshot={}", shot.display()), &url]);
    assert_eq!(png_size(&shot), (1400, 1500), "{}", shot.display());

    // /metrics and the pictures, over plain HTTP.
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut body = Vec::new();
        s.read_to_end(&mut body).unwrap();
        body
    };
    let metrics = String::from_utf8(get("/metrics")).unwrap();
    for wanted in [
        "application/openmetrics-text",
        "allot_owed_gpu_hours{budget=\"p/a\"} ",
        "allot_delivered_gpu_hours{budget=\"/\"} ",
        "allot_waiting_jobs 2",
        "allot_ledger_ok 1",
        "allot_gpus 4",
        "# EOF",
    ] {
        assert!(metrics.contains(wanted), "{wanted:?} not in /metrics:\n{metrics}");
    }
    for picture in ["/shares.png", "/queue.png"] {
        let body = get(picture);
        let start = body.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(&body[start..start + 8], b"\x89PNG\r\n\x1a\n", "{picture} is not a PNG");
    }
    assert!(String::from_utf8_lossy(&get("/nosuch")).starts_with("HTTP/1.0 404") || String::from_utf8_lossy(&get("/nosuch")).starts_with("HTTP/1.1 404"));
}

/// `allot simulate --from-ledger`: the ledger's jobs of the span replayed
/// (GPUs, work done, contract, account), those without a runtime left out
/// and said, and what actually happened printed beside the simulation.
#[test]
fn the_ledger_s_jobs_replay_in_the_simulator_beside_what_happened() {
    use allot_cli::cluster_report::ledger_workload;
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let t0 = now - 7200;
    let l = ledger_at(&dir, t0);
    let lw = ledger_workload(&l, 7200, now).unwrap();
    let jobs: Vec<(u32, u32, i64, &str)> =
        lw.workload.jobs.iter().map(|j| (j.job_id, j.gpus, j.runtime, lw.workload.teams[j.team as usize].as_str())).collect();
    // Job 2 still runs (since t0 + 4200); job 3 ran 2800 s; 4 never started, 5 left; 1 came before the span.
    assert_eq!(jobs, vec![(2, 2, now - (t0 + 4200), "b"), (3, 2, 2800, "a")]);
    assert_eq!(lw.still_running, 1);
    assert_eq!(lw.left_out.get("still waiting (runtime unknown)"), Some(&1));
    assert_eq!(lw.left_out.get("left the queue without starting"), Some(&1));
    assert_eq!(lw.workload.jobs[1].min_runtime, Some(0), "job 3 ran unallocated");
    assert_eq!(lw.workload.kinds[lw.workload.jobs[0].kind as usize], "debug");

    let json = dir.path().join("whatif.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_allot"))
        .args([
            "--ledger",
            dir.path().join("ledger.db").to_str().unwrap(),
            "simulate",
            "--from-ledger",
            "--since",
            "2h",
            "--cluster",
            "2x4",
            "--lookback",
            "1d",
            "--no-timing",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("left out 1 job(s): still waiting (runtime unknown)") && stderr.contains("1 job(s) still running"), "{stderr}");
    assert!(stdout.contains("what actually happened") && stdout.contains("actual (ledger)") && stdout.contains("allot (simulated)"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["actual"]["jobs_started"], 2, "{}", doc["actual"]);
    assert_eq!(doc["settings"]["lookback_s"], 86400, "the knob given applies");
    // The ledger does not know the site's partitions: no kept node unless told (the shipped rule would keep one of 2).
    assert_eq!(doc["settings"]["small_job_nodes"], 0, "{}", doc["settings"]);
    assert!(stderr.contains("--from-ledger: modelling no nodes kept for small jobs"), "{stderr}");
    assert_eq!(doc["reports"][0]["jobs"], 2);
    // A CSV and --from-ledger are one too many workloads.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_allot")).args(["simulate", "w.csv", "--from-ledger", "--cluster", "1x4"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot be used with"), "{}", String::from_utf8_lossy(&out.stderr));
    // An empty span is refused the same way by the three commands that take one.
    for args in [&["report", "--since", "0s"][..], &["serve", "--since", "0s"], &["simulate", "--from-ledger", "--since", "0s", "--cluster", "1x4"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_allot"))
            .args(["--ledger", dir.path().join("ledger.db").to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("--since 0: give a span longer than 0"), "{args:?}: {said}");
    }
}

/// Two clusters of a lab both have a job 1: the lab's report keeps them
/// apart (alpha's waited 100 s, beta's 600 s), and each cluster's report
/// has its own.
#[test]
fn a_lab_report_tells_apart_two_clusters_jobs_of_one_number() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(dir.path().join("ledger.db")).unwrap();
    // No `gpus`: each cluster's plugins count their own (4 each).
    let budget = BUDGET.replace("gpus = 4\n", "");
    let tree = BudgetTree::parse(&budget).unwrap();
    l.sync_budget(&budget, &tree, "admin", "b.toml", T0 - 5000).unwrap();
    for (cluster, leaf, submit, start) in [("alpha", "p/a", -100, 0), ("beta", "b", 500, 1100)] {
        let mut c = Ledger::open(dir.path().join("ledger.db")).unwrap().for_cluster(Some(cluster)).unwrap();
        c.record_period(&Period {
            runs: vec![run(T0, 1, leaf, 2, (start, Some(3600)), true, Some("completed"))],
            contracts: vec![contract(T0, 1, leaf, submit, 600, 2, true)],
            job_ends: vec![JobEnd { job_id: 1, at: T0 + 3600 }],
            demand: vec![demand(T0, leaf, -200, 2, 0, 0)],
            snapshot: Some(allot_ledger::UsageSnapshot { computed_at: T0 + 3600, budget_version: 1, capacity_gpus: 4, leaves: vec![] }),
            ..Default::default()
        })
        .unwrap();
    }
    let lab = compute(&Ledger::open_read_only(dir.path().join("ledger.db")).unwrap(), 7200, T0 + 3600).unwrap();
    assert_eq!((lab.jobs, lab.jobs_started, lab.jobs_completed, lab.gpus), (2, 2, 2, 8));
    assert_eq!((lab.wait_p50_s, lab.wait_p90_s), (100, 600), "each job's wait from its own cluster's runs");
    let beta = compute(&Ledger::open_read_only(dir.path().join("ledger.db")).unwrap().for_cluster(Some("beta")).unwrap(), 7200, T0 + 3600).unwrap();
    assert_eq!((beta.jobs, beta.wait_p90_s, beta.gpus), (1, 600, 4));
}
