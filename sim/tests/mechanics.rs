//! Small hand-made cases whose every number can be worked out by hand: the
//! contract (protection, unallocated jobs, grace, requeue, cancel),
//! backfill, placement and the baseline's limits.

use allot::budget::BudgetTree;
use allot_sim::check::invariants;
use allot_sim::{simulate, ClusterSpec, Config, Fate, MainClock, PolicyKind, RunEnd, Simulation, Workload};

const H: i64 = 3600;

fn workload(rows: &str) -> Workload {
    let csv = format!("job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,priority\n{rows}");
    Workload::from_csv(csv.as_bytes(), false).unwrap_or_else(|e| panic!("{e}"))
}

/// Two teams, equal shares; `cluster` extra settings in TOML.
fn tree(cluster: &str) -> BudgetTree {
    BudgetTree::parse(&format!("[cluster]\n{cluster}\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n"))
        .unwrap()
}

fn run(w: &Workload, cfg: &Config) -> Simulation {
    let sim = simulate(w, cfg, &mut |_| {});
    let broken = invariants(w, cfg, &sim);
    assert!(broken.is_empty(), "{broken:#?}");
    sim
}

fn config(shape: &str, cluster: &str, policy: PolicyKind) -> Config {
    let mut cfg = Config::new(shape.parse::<ClusterSpec>().unwrap(), tree(cluster), policy);
    cfg.check_policy = true;
    cfg
}

/// Runs of job `id`, in order.
fn runs_of(sim: &Simulation, w: &Workload, id: u32) -> Vec<allot_sim::Run> {
    let idx = w.jobs.iter().position(|j| j.job_id == id).unwrap() as u32;
    sim.outcome.runs.iter().filter(|r| r.job == idx).cloned().collect()
}

fn fate(sim: &Simulation, w: &Workload, id: u32) -> Fate {
    let idx = w.jobs.iter().position(|j| j.job_id == id).unwrap();
    sim.outcome.jobs[idx].fate.clone()
}

#[test]
fn an_unallocated_job_yields_at_once_loses_work_since_its_checkpoint_and_resumes() {
    // 1 node of 2 GPUs. a's free job runs from 0; b's allocated job arrives at 1h.
    let w = workload("1,0,2,36000,a,0,true,normal\n2,3600,2,3600,b,3600,true,normal\n");
    // Unallocated victims get the full grace time here (default: none, see below).
    let cfg = config("1x2", "grace = \"5m\"\nunallocated_grace = \"5m\"", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    let a = runs_of(&sim, &w, 1);
    let b = runs_of(&sim, &w, 2);
    // Signalled at 1h, killed after the 5-minute grace; b starts then.
    assert_eq!(a[0].ended, RunEnd::Preempted { signal: H });
    assert_eq!(a[0].end, H + 300);
    assert_eq!(b[0].start, H + 300);
    // Checkpoints every 30 minutes: 65 minutes of work, 60 saved, 5 lost.
    assert_eq!(a[0].lost, 300);
    // a runs again when b is done and finishes its remaining 9 hours.
    assert_eq!(a[1].start, b[0].end);
    assert_eq!(a[1].end - a[1].start, 36000 - 2 * 1800);
    assert_eq!(fate(&sim, &w, 1), Fate::Completed);
    assert_eq!(sim.report.preemptions, 1);
    assert!((sim.report.gpu_hours_lost_to_preemption - 2.0 * 300.0 / 3600.0).abs() < 1e-3);
    // The unallocated run was never charged, b's run was.
    assert_eq!(sim.outcome.charged, vec![0, 2 * 3600]);
}

#[test]
fn by_default_an_unallocated_victim_is_killed_at_once() {
    let w = workload("1,0,2,36000,a,0,true,normal\n2,3600,2,3600,b,3600,true,normal\n");
    let sim = run(&w, &config("1x2", "grace = \"5m\"", PolicyKind::Allot));
    let a = runs_of(&sim, &w, 1);
    assert_eq!((a[0].ended, a[0].end), (RunEnd::Preempted { signal: H }, H));
    assert_eq!(runs_of(&sim, &w, 2)[0].start, H);
    // Its work since the last checkpoint (at 1h) is lost: none.
    assert_eq!(a[0].lost, 0);
}

#[test]
fn within_a_team_a_higher_priority_job_takes_a_teammate_past_its_minimum_runtime() {
    // One node of 8 GPUs. a's normal training job (8 GPUs, protected 2h)
    // runs from 0; a's high-priority debug job (1 GPU, 10 min) arrives at 1h:
    // it waits for the end of the protection, then preempts (5-minute grace).
    // A normal-priority debug job of a never preempts, nor does one of b
    // (the margin keeps a running: a 7-day window; small jobs across teams
    // off here, see the next test).
    let w = workload("1,0,8,36000,a,7200,true,normal\n2,3600,1,600,a,600,false,high\n3,3600,1,600,a,600,false,normal\n4,3600,1,600,b,600,false,normal\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"\nsmall_job_gpus = 0", PolicyKind::Allot));
    let train = runs_of(&sim, &w, 1);
    assert_eq!(train[0].ended, RunEnd::Preempted { signal: 2 * H }, "{train:?}");
    let debug = runs_of(&sim, &w, 2);
    assert_eq!(debug[0].start, 2 * H + 300);
    assert_eq!(train[0].preempted_by, Some(1));
    assert_eq!(sim.report.preemptions_within_team, 1);
    // The other GPUs freed by the kill go to the waiting normal jobs at once.
    assert_eq!(runs_of(&sim, &w, 3)[0].start, 2 * H + 300);
    assert_eq!(runs_of(&sim, &w, 4)[0].start, 2 * H + 300);
    assert_eq!(sim.report.ping_pongs, 0);
    // Switched off: the high-priority job waits like the others.
    let sim = run(&w, &config("1x8", "grace = \"5m\"\npreempt_within_team = false\nsmall_job_gpus = 0", PolicyKind::Allot));
    assert_eq!(runs_of(&sim, &w, 1).len(), 1);
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 36000);
    // A high-priority job that declares a longer minimum runtime than its teammate's does not preempt it.
    let w = workload("1,0,8,36000,a,3600,true,normal\n2,3600,1,600,a,7200,false,high\n");
    let sim = run(&w, &config("1x8", "", PolicyKind::Allot));
    assert_eq!(sim.report.preemptions, 0);
}

#[test]
fn a_small_job_of_another_team_needs_no_margin() {
    // One node of 8 GPUs. a's training job (8 GPUs, protected 2h) runs from
    // 0; at 1h b's debug job (1 GPU, min_runtime 10m: small) arrives. a has
    // used 8 GPU-hours of a 7-day window, b nothing: far less than the
    // margin of a tenth of an allocation apart, but a above b. b's job
    // preempts a's when its protection ends.
    let w = workload("1,0,8,36000,a,7200,true,normal\n2,3600,1,600,b,600,false,normal\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"", PolicyKind::Allot));
    let train = runs_of(&sim, &w, 1);
    assert_eq!(train[0].ended, RunEnd::Preempted { signal: 2 * H }, "{train:?}");
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 2 * H + 300);
    assert_eq!((sim.report.preemptions_by_small_jobs, sim.report.preemptions_within_team), (1, 0));
    // Not small (2 GPUs over small_job_gpus = 1, or a guarantee over
    // small_job_min_runtime = 5m): the margin applies and b waits for a's end.
    for knobs in ["small_job_gpus = 0", "small_job_min_runtime = \"5m\""] {
        let sim = run(&w, &config("1x8", &format!("grace = \"5m\"\n{knobs}"), PolicyKind::Allot));
        assert_eq!(sim.report.preemptions, 0, "{knobs}");
        assert_eq!(runs_of(&sim, &w, 2)[0].start, 36000, "{knobs}");
    }
    // Never the other way round: an over-served team's small job does not
    // take an under-served team's GPUs: a's training started half an hour
    // before b's, so a is above b; a's small job waits for a GPU to free up.
    let w = workload("1,1800,8,36000,b,3600,true,normal\n2,0,8,36000,a,3600,true,normal\n3,7200,1,600,a,600,false,normal\n");
    let sim = run(&w, &config("2x8", "grace = \"5m\"", PolicyKind::Allot));
    assert_eq!(sim.report.preemptions, 0);
    assert_eq!(runs_of(&sim, &w, 3)[0].start, 36000);
}

#[test]
fn small_job_nodes_take_only_small_and_unallocated_jobs() {
    // Two nodes of 4; node 1 (the last) kept for small jobs. a's 4-GPU
    // training job (min_runtime 2h) runs on node 0 from 0; a second one at
    // 10 s cannot use node 1 and waits for the first to end at 10h. b's free
    // job (unallocated, 4 GPUs; submitted at 20 s behind a's blocked job, so
    // started by a backfill pass, every 10 s from the first submission as
    // the shipped bf_interval: at 20 s) takes node 1; b's debug job (1 GPU,
    // min_runtime 10m: small) at 1h takes its GPUs at once (no grace for an
    // unallocated victim), on node 1 while node 0 stays a's.
    let w = workload("1,0,4,36000,a,7200,true,normal\n2,10,4,36000,a,7200,true,normal\n3,20,4,36000,b,0,true,low\n4,3600,1,600,b,600,false,normal\n");
    let mut cfg = config("2x4", "grace = \"5m\"", PolicyKind::Allot);
    cfg.small_job_nodes = 1;
    let sim = run(&w, &cfg);
    assert_eq!(runs_of(&sim, &w, 1)[0].slots.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0]);
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 36000);
    let free = runs_of(&sim, &w, 3);
    assert_eq!((free[0].start, free[0].slots[0].0, free[0].ended, free[0].end), (20, 1, RunEnd::Preempted { signal: H }, H));
    let debug = runs_of(&sim, &w, 4);
    assert_eq!((debug[0].start, debug[0].slots[0].0), (H, 1));
    // Without the kept node the second training job takes node 1 at 10 s
    // and the debug job waits for a's first job's protection to end (2h),
    // then preempts it as a small job of the less-used team, after the grace.
    let sim = run(&w, &config("2x4", "grace = \"5m\"", PolicyKind::Allot));
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 10);
    assert_eq!(runs_of(&sim, &w, 1)[0].ended, RunEnd::Preempted { signal: 2 * H });
    assert_eq!(runs_of(&sim, &w, 4)[0].start, 2 * H + 300);
}

#[test]
fn occupancy_stops_at_the_horizon() {
    // One GPU busy from 0 to 20h; a second job submitted at 20h. Stopped at
    // 10h, the GPU was busy for all of the span simulated.
    let w = workload("1,0,1,72000,a,3600,true,normal\n2,72000,1,60,b,60,true,normal\n");
    let mut cfg = config("1x1", "", PolicyKind::Allot);
    cfg.horizon = Some(10 * H);
    assert_eq!(run(&w, &cfg).report.occupancy, 1.0);
    cfg.horizon = None;
    assert_eq!(run(&w, &cfg).report.occupancy, 1.0);
}

#[test]
fn a_small_job_takes_the_smallest_victim() {
    // Two nodes of 8: a's 8-GPU job on one, a's two 4-GPU jobs on the other,
    // all normal and past their protection at 2h; a's high-priority 1-GPU job
    // arrives: it takes the most recently started of the 4-GPU jobs, not the 8.
    let w = workload("1,0,8,36000,a,3600,true,normal\n2,0,4,36000,a,3600,true,normal\n3,10,4,36000,a,3600,true,normal\n4,7200,1,600,a,600,false,high\n");
    let sim = run(&w, &config("2x8", "grace = \"1m\"", PolicyKind::Allot));
    assert_eq!(runs_of(&sim, &w, 1).len(), 1);
    assert_eq!(runs_of(&sim, &w, 2).len(), 1);
    assert_eq!(runs_of(&sim, &w, 3)[0].ended, RunEnd::Preempted { signal: 7200 });
    // By leaf rank alone all three tie: the most recently started goes, on the node with fewest GPUs to free.
    let sim = run(&w, &config("2x8", "grace = \"1m\"\npreempt_smallest_first = false", PolicyKind::Allot));
    assert_eq!(sim.report.preemptions, 1);
}

#[test]
fn an_allocated_job_is_protected_for_its_minimum_runtime_then_preempted_by_rank() {
    // 4-hour window, 1 GPU: each team owns 2 GPU-hours. After 2 hours a has
    // used all of its share (ratio 1.0), b none: past a's protection, b preempts.
    let w = workload("1,0,1,36000,a,7200,true,normal\n2,600,1,3600,b,3600,true,normal\n");
    let cfg = config("1x1", "lookback = \"4h\"\ngrace = \"5m\"", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    let a = runs_of(&sim, &w, 1);
    assert_eq!(a[0].ended, RunEnd::Preempted { signal: 2 * H }, "{a:?}");
    assert_eq!(a[0].preemptible_from, 2 * H);
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 2 * H + 300);
    // b waited from 600 s to 2h05.
    let kinds = &sim.report.by_kind["unspecified"];
    assert_eq!(kinds.jobs, 2);
}

#[test]
fn the_margin_keeps_a_barely_ahead_team_running() {
    // 7-day window: after 2 hours a's ratio is 2 / (0.5 x 168) = 0.024, b's 0:
    // not more than the 0.1 margin apart, so a keeps its GPU to the end.
    let w = workload("1,0,1,36000,a,7200,true,normal\n2,600,1,3600,b,3600,true,normal\n");
    let cfg = config("1x1", "", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    assert_eq!(runs_of(&sim, &w, 1).len(), 1);
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 36000);
    assert_eq!(sim.report.preemptions, 0);
}

#[test]
fn a_non_resumable_victim_is_cancelled_and_all_its_work_is_lost() {
    let w = workload("1,0,1,36000,a,7200,false,normal\n2,600,1,3600,b,3600,true,normal\n");
    let cfg = config("1x1", "lookback = \"4h\"\ngrace = \"1m\"", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    assert_eq!(fate(&sim, &w, 1), Fate::Cancelled("preempted and not resumable".into()));
    let a = runs_of(&sim, &w, 1);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].lost, 2 * H + 60);
    assert_eq!(sim.report.jobs_cancelled, 1);
    let why = "cancelled: preempted and not resumable (unspecified jobs): past its minimum runtime, by a job of a team that had used less of its share by more than the margin";
    assert_eq!(sim.report.not_completed[why], 1, "{:?}", sim.report.not_completed);
}

#[test]
fn checkpointing_in_the_grace_time_loses_nothing() {
    let w = workload("1,0,2,36000,a,0,true,normal\n2,3600,2,3600,b,3600,true,normal\n");
    let mut cfg = config("1x2", "grace = \"5m\"\nunallocated_grace = \"5m\"", PolicyKind::Allot);
    cfg.checkpoint_interval = 0;
    let sim = run(&w, &cfg);
    let a = runs_of(&sim, &w, 1);
    assert_eq!(a[0].lost, 0);
    assert_eq!(a[1].end - a[1].start, 36000 - (H + 300));
}

#[test]
fn backfill_lets_a_short_job_past_a_blocked_one_but_not_a_long_one() {
    // Two nodes of 4 GPUs, one team. Node 0 busy until 10h, node 1 until 2h.
    // Job 3 wants both nodes: it waits for 10h and reserves them. Job 4 (1h)
    // fits on node 1 and ends well before: it starts. Job 5 (20h) would
    // delay job 3: it waits until job 3 has started.
    let rows = "1,0,4,36000,a,3600,true,normal\n\
                2,0,2,7200,a,3600,true,normal\n\
                3,10,8,3600,a,3600,true,normal\n\
                4,20,2,3600,a,3600,true,normal\n\
                5,30,2,72000,a,3600,true,normal\n";
    let w = workload(rows);
    let cfg = config("2x4", "", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    let start = |id| runs_of(&sim, &w, id)[0].start;
    assert_eq!(start(3), 36000);
    assert!(start(4) <= 20 + 30, "the short job backfills within a backfill interval: {}", start(4));
    assert!(start(5) >= start(3), "the long job must not delay the reservation: {} vs {}", start(5), start(3));
    // Job 3 holds both nodes whole.
    let r3 = &runs_of(&sim, &w, 3)[0];
    assert_eq!(r3.slots, vec![(0, 0b1111), (1, 0b1111)]);
}

#[test]
fn a_job_larger_than_a_node_holds_whole_nodes() {
    let w = workload("1,0,12,3600,a,3600,true,normal\n2,0,1,3600,b,3600,true,normal\n");
    let cfg = config("3x8", "", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    let r = &runs_of(&sim, &w, 1)[0];
    assert_eq!(r.gpus, 16);
    assert_eq!(r.slots.len(), 2);
    assert!(r.slots.iter().all(|&(_, m)| m == 0xff));
    // The small job went to the third node, not into the big job's nodes.
    let small = &runs_of(&sim, &w, 2)[0];
    assert!(r.slots.iter().all(|&(n, _)| n != small.slots[0].0));
    assert_eq!(sim.report.gpu_seconds_delivered, 16 * 3600 + 3600);
}

#[test]
fn baseline_limits_non_preemptible_gpus_and_scavengers_use_the_rest() {
    // 8 GPUs, two teams: limits of 4 each. a submits three 2-GPU jobs: the
    // third waits for the limit though GPUs are free. a's free job runs on
    // the idle GPUs, and b's job preempts it.
    let rows = "1,0,2,7200,a,3600,true,normal\n\
                2,0,2,7200,a,3600,true,normal\n\
                3,0,2,7200,a,3600,true,normal\n\
                4,0,4,36000,a,0,true,normal\n\
                5,100,4,3600,b,3600,true,normal\n";
    let w = workload(rows);
    let cfg = config("1x8", "grace = \"1m\"", PolicyKind::Baseline);
    let sim = run(&w, &cfg);
    let start = |id| runs_of(&sim, &w, id)[0].start;
    assert_eq!(start(1), 0);
    assert_eq!(start(2), 0);
    assert_eq!(start(3), 7200, "over the limit until a job of a ends");
    assert_eq!(start(4), 0, "the free job takes the idle GPUs");
    assert_eq!(runs_of(&sim, &w, 4)[0].ended, RunEnd::Preempted { signal: 100 });
    assert_eq!(start(5), 160);
    // Baseline charges nothing.
    assert!(sim.outcome.charged.iter().all(|&c| c == 0));
}

#[test]
fn baseline_refuses_jobs_larger_than_the_team_limit() {
    let w = workload("1,0,8,3600,a,3600,true,normal\n2,0,8,3600,a,0,true,normal\n");
    let cfg = config("1x8", "", PolicyKind::Baseline);
    let sim = run(&w, &cfg);
    assert!(matches!(fate(&sim, &w, 1), Fate::Refused(r) if r.contains("limit of 4")));
    // A preemptible job is not bound by the limit.
    assert_eq!(fate(&sim, &w, 2), Fate::Completed);
}

#[test]
fn jobs_outside_the_budget_and_the_cluster_are_refused_with_the_reason() {
    let w = workload("1,0,1,60,zz,60,true,normal\n2,0,99,60,a,60,true,normal\n3,0,1,60,a,60,true,normal\n");
    let cfg = config("1x8", "", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    assert!(matches!(fate(&sim, &w, 1), Fate::Refused(r) if r.contains("account 'zz' is not in the allot budget tree")));
    assert!(matches!(fate(&sim, &w, 2), Fate::Refused(r) if r.contains("needs 99 GPUs; the cluster has 8")));
    assert_eq!(sim.report.jobs_refused, 2);
    assert_eq!(sim.report.jobs_completed, 1);
}

#[test]
fn a_horizon_stops_the_clock_and_says_what_was_left() {
    let w = workload("1,0,1,36000,a,3600,true,normal\n2,0,1,60,a,3600,true,normal\n3,100,1,60,a,3600,true,normal\n4,90000,1,60,a,3600,true,normal\n");
    let mut cfg = config("1x1", "", PolicyKind::Allot);
    cfg.horizon = Some(7200);
    let sim = run(&w, &cfg);
    assert_eq!(fate(&sim, &w, 1), Fate::Unfinished("running at the horizon".into()));
    assert_eq!(fate(&sim, &w, 2), Fate::Unfinished("still waiting at the horizon".into()));
    assert_eq!(fate(&sim, &w, 4), Fate::Unfinished("submitted after the horizon".into()));
    assert_eq!(sim.report.jobs_unfinished, 4);
    assert_eq!(runs_of(&sim, &w, 1)[0].ended, RunEnd::Horizon);
    // Waits of jobs that never started count up to the horizon.
    assert_eq!(sim.report.wait_p99_s, 7200);
}

#[test]
fn within_a_leaf_declared_priority_goes_first() {
    // One GPU busy; then a low, a normal and a high job of the same team.
    let rows = "1,0,1,3600,a,3600,true,normal\n\
                2,10,1,60,a,60,true,low\n\
                3,20,1,60,a,60,true,normal\n\
                4,30,1,60,a,60,true,high\n";
    let w = workload(rows);
    let cfg = config("1x1", "", PolicyKind::Allot);
    let sim = run(&w, &cfg);
    let start = |id| runs_of(&sim, &w, id)[0].start;
    assert!(start(4) < start(3) && start(3) < start(2));
    // The baseline ignores it by default: first come, first served.
    let base = run(&w, &config("1x1", "", PolicyKind::Baseline));
    let bstart = |id| runs_of(&base, &w, id)[0].start;
    assert!(bstart(2) < bstart(3) && bstart(3) < bstart(4));
}

/// Placement, by hand, on two nodes of 4 GPUs:
/// - job 0, 2 GPUs, 1 h, and job 1, 3 GPUs, 10 h, at 0: node 0 and node 1;
/// - at 2 h node 0 is whole again and node 1 has 1 GPU free. Job 2, 1 GPU,
///   10 h, at 2 h: best fit puts it on node 1 (the fullest that fits),
///   first fit on node 0 (the lowest-numbered);
/// - job 3, 4 GPUs, 1 h, at 2 h + 1 s: with best fit node 0 is whole and it
///   starts at once; with first fit it waits for a whole node until 12 h,
///   when jobs 1 and 2 end.
#[test]
fn best_fit_keeps_a_node_whole_that_first_fit_breaks() {
    let w = workload("0,0,2,3600,a,3600,true,normal\n1,0,3,36000,a,28800,true,normal\n2,7200,1,36000,a,28800,true,normal\n3,7201,4,3600,a,3600,true,normal\n");
    let best = run(&w, &config("2x4", "", PolicyKind::Allot));
    let mut cfg = config("2x4", "", PolicyKind::Allot);
    cfg.placement = allot_sim::Placement::FirstFit;
    let first = run(&w, &cfg);
    let node_of = |sim: &Simulation, id| runs_of(sim, &w, id)[0].slots[0].0;
    assert_eq!((node_of(&best, 2), node_of(&first, 2)), (1, 0));
    assert_eq!(runs_of(&best, &w, 3)[0].start, 7201);
    assert_eq!(runs_of(&first, &w, 3)[0].start, 36_000);
}

/// A job cancelled by preemption is never left unexplained: the report's
/// reason names the job's kind and the rule that took its GPUs.
#[test]
fn a_cancelled_job_s_reason_says_which_rule_preempted_it() {
    // a's job (8 GPUs, protected 2h, not resumable) runs from 0; at 1h b's
    // small job (1 GPU, 10m) arrives and takes its GPUs at 2h, as above.
    let w = workload("1,0,8,36000,a,7200,false,normal\n2,3600,1,600,b,600,false,normal\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"", PolicyKind::Allot));
    let why = "cancelled: preempted and not resumable (unspecified jobs): past its minimum runtime, by a small job of a team that had used less of its share";
    assert_eq!(sim.report.not_completed.get(why), Some(&1), "{:?}", sim.report.not_completed);
    // An unallocated job (min_runtime=0) yields to any allocated one.
    let w = workload("1,0,8,36000,a,0,false,normal\n2,600,8,600,b,3600,false,normal\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"", PolicyKind::Allot));
    let why = "cancelled: preempted and not resumable (unspecified jobs): it ran unallocated (min_runtime=0), which any allocated job may preempt";
    assert_eq!(sim.report.not_completed.get(why), Some(&1), "{:?}", sim.report.not_completed);
    // Slurm's own plugins (the baseline) preempt only unallocated runs: the same words.
    let w = workload("1,0,8,36000,a,0,false,normal\n2,600,4,600,b,3600,false,normal\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"", PolicyKind::Baseline));
    let why = "cancelled: preempted and not resumable (unspecified jobs): it ran unallocated (min_runtime=0), which any allocated job may preempt";
    assert_eq!(sim.report.not_completed.get(why), Some(&1), "{:?}", sim.report.not_completed);
    // Within a team: a higher declared priority, past the victim's protection.
    let w = workload("1,0,8,36000,a,3600,false,low\n2,600,8,600,a,600,false,high\n");
    let sim = run(&w, &config("1x8", "grace = \"5m\"", PolicyKind::Allot));
    let why = "cancelled: preempted and not resumable (unspecified jobs): past its minimum runtime, by a job of its own team that declared a higher priority";
    assert_eq!(sim.report.not_completed.get(why), Some(&1), "{:?}", sim.report.not_completed);
}

#[test]
fn a_restorable_session_is_requeued_and_loses_nothing_where_a_plain_one_is_cancelled() {
    // Team a's session (not resumable: a shell's state) holds both GPUs; team
    // b's job arrives after the session's minimum runtime and ranks first.
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,priority,kind\n\
               1,0,2,36000,a,3600,false,normal,interactive\n\
               2,7200,2,3600,b,3600,true,normal,training\n";
    let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
    // A one-hour window: a's two hours are far past the anti-thrash margin.
    let mut cfg = config("1x2", "grace = \"5m\"\nlookback = \"1h\"", PolicyKind::Allot);
    let plain = run(&w, &cfg);
    let session = runs_of(&plain, &w, 1);
    assert_eq!(session.len(), 1, "{session:?} {:?}", runs_of(&plain, &w, 2));
    assert_eq!(session[0].lost, 7200 + 300, "the plain session loses everything it did: {session:?}");
    assert!(matches!(fate(&plain, &w, 1), Fate::Cancelled(_)), "{:?}", fate(&plain, &w, 1));

    // As `allot session` does: checkpointed at the grace signal, restored.
    let mut restorable = w.clone();
    let interactive = restorable.kinds.iter().position(|k| k == "interactive").unwrap() as u32;
    restorable.jobs.iter_mut().filter(|j| j.kind == interactive).for_each(|j| j.resumable = true);
    cfg.restorable_kinds = vec![interactive];
    let sim = run(&restorable, &cfg);
    let session = runs_of(&sim, &restorable, 1);
    assert_eq!(session.len(), 2, "{session:?}");
    assert_eq!(session[0].lost, 0);
    assert_eq!(session[1].start, runs_of(&sim, &restorable, 2)[0].end, "restored when b's job ends");
    assert_eq!(session[1].end - session[1].start, 36000 - (7200 + 300), "the rest of the session's work, none redone");
    assert_eq!(fate(&sim, &restorable, 1), Fate::Completed);
}

#[test]
fn a_long_waiting_large_job_takes_runs_past_their_minimum_runtime_and_never_sooner() {
    // 2 nodes of 4 GPUs. Team b's four 2-GPU jobs fill both nodes from 0 for
    // 10 h (1 h minimum runtime); team a's 8-GPU job, its budget unused,
    // arrives a minute later. b has used far less than the margin ahead of
    // a, so rule 4 never lets a take b's runs: a waits for them to end.
    let w = workload(
        "1,0,2,36000,b,3600,true,normal\n2,0,2,36000,b,3600,true,normal\n3,0,2,36000,b,3600,true,normal\n4,0,2,36000,b,3600,true,normal\n\
         5,60,8,3600,a,3600,true,normal\n",
    );
    let settings = "grace = \"5m\"\nsmall_job_gpus = 4";
    let plain = run(&w, &config("2x4", settings, PolicyKind::Allot));
    assert_eq!(runs_of(&plain, &w, 5)[0].start, 36000, "without rule 6 it waits for b's runs to end");
    assert_eq!(plain.report.preemptions, 0);

    // Rule 6 after 2 h: at 2 h 1 min b's runs are past their minimum runtime; a takes them.
    let sim = run(&w, &config("2x4", &format!("{settings}\nlarge_job_wait = \"2h\""), PolicyKind::Allot));
    let a = runs_of(&sim, &w, 5);
    assert_eq!(a[0].start, 60 + 2 * H + 300, "{a:?}");
    for id in 1..=4 {
        let b = runs_of(&sim, &w, id);
        assert_eq!(b[0].ended, RunEnd::Preempted { signal: 60 + 2 * H }, "job {id}: {b:?}");
        assert!(b[0].by_long_wait);
        assert_eq!(b[1].start, a[0].end, "job {id} resumes when a's job ends");
    }
    assert_eq!(sim.report.preemptions_by_long_waiting_jobs, 4);

    // Not while b's runs are protected: rule 6 after 10 minutes still waits for the hour.
    let early = run(&w, &config("2x4", &format!("{settings}\nlarge_job_wait = \"10m\""), PolicyKind::Allot));
    let a = runs_of(&early, &w, 5);
    assert_eq!(a[0].start, H + 300, "taken when b's minimum runtime ends, at 1 h: {a:?}");

    // Nor for a small job (8 GPUs is a small job's size by default); a
    // budget over its share is the policy core's property test.
    let small = run(&w, &config("2x4", "grace = \"5m\"\nlarge_job_wait = \"2h\"", PolicyKind::Allot));
    assert_eq!(runs_of(&small, &w, 5)[0].start, 36000);
}

/// The simulator models the scheduler's reach the shipped
/// conf/slurm-allot.conf sets (its SchedulerParameters line), not Slurm's
/// own defaults: `allot simulate` models the cluster an admin installs.
#[test]
fn the_modeled_scheduler_reach_is_the_shipped_confs() {
    let conf = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/slurm-allot.conf")).unwrap();
    let line = conf.lines().find_map(|l| l.strip_prefix("SchedulerParameters=")).expect("a SchedulerParameters line");
    // Slurm reads each option with a substring search: the first occurrence wins.
    let value = |key: &str| -> i64 {
        line.split(',').find_map(|o| o.strip_prefix(&format!("{key}="))).unwrap_or_else(|| panic!("no {key} in {line}")).parse().unwrap()
    };
    let reach = allot_sim::Reach::SHIPPED;
    assert_eq!(value("bf_max_job_test"), reach.bf_max_job_test as i64);
    assert_eq!(value("default_queue_depth"), reach.default_queue_depth as i64);
    assert_eq!(value("bf_interval"), reach.bf_interval);
    let cfg = Config::new("4x8".parse().unwrap(), BudgetTree::parse("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n").unwrap(), PolicyKind::Allot);
    assert_eq!((cfg.bf_max_job_test, cfg.default_queue_depth, cfg.bf_interval), (reach.bf_max_job_test, reach.default_queue_depth, reach.bf_interval));
}

#[test]
fn with_slurms_main_clock_a_submission_waits_for_its_pass() {
    // 1 node of 8 GPUs, always room. Full passes every 10 s from the tick
    // after the first submission (1, 11, 21, ...); a submission asks for a
    // pass at the next second, but no sooner than 3 s after the clock's last
    // pass.
    let w = workload("1,0,1,600,a,60,false,normal\n2,5,1,600,a,60,false,normal\n3,7,1,600,b,60,false,normal\n4,19,1,600,b,60,false,normal\n");
    let mut cfg = config("1x8", "", PolicyKind::Allot);
    let starts = |cfg: &Config| (1..=4).map(|id| runs_of(&run(&w, cfg), &w, id)[0].start).collect::<Vec<_>>();
    // Without the clock: in the second of the submission.
    assert_eq!(starts(&cfg), vec![0, 5, 7, 19]);
    cfg.main_clock = Some(MainClock { sched_interval: 10, batch_sched_delay: 3 });
    // 0: the full pass at 1. 5: the next tick, 6 (3 s after 1 already).
    // 7: 3 s after the pass at 6: 9. 19: the next tick, 20 (3 s after the
    // full pass at 11), before the full pass at 21.
    assert_eq!(starts(&cfg), vec![1, 6, 9, 20]);
}

#[test]
fn with_slurms_main_clock_a_preemptor_waits_for_the_full_pass_after_protection_ends() {
    // As an_allocated_job_is_protected_for_its_minimum_runtime_then_preempted_by_rank:
    // a's protection ends at 2h (7200 s); nothing tells Slurm, whose next
    // full pass preempts: with full passes every 700 s from 1 s, the first
    // after 7200 s is 7701 s.
    let w = workload("1,0,1,36000,a,7200,true,normal\n2,600,1,3600,b,3600,true,normal\n");
    let mut cfg = config("1x1", "lookback = \"4h\"\ngrace = \"5m\"", PolicyKind::Allot);
    cfg.main_clock = Some(MainClock { sched_interval: 700, batch_sched_delay: 3 });
    let sim = run(&w, &cfg);
    let a = runs_of(&sim, &w, 1);
    assert_eq!(a[0].ended, RunEnd::Preempted { signal: 7701 }, "{a:?}");
    assert_eq!(runs_of(&sim, &w, 2)[0].start, 7701 + 300);
}

#[test]
fn a_victim_that_ignores_its_signals_holds_its_gpus_for_kill_wait() {
    // As an_unallocated_job_yields_at_once...: a's free job is signalled at
    // 1h and killed at once (no grace for unallocated victims); with
    // Slurm's KillWait of 5 s its processes, ignoring SIGTERM, hold the
    // GPUs until SIGKILL: its run ends at 1h, b starts 5 s later.
    let w = workload("1,0,2,36000,a,0,true,normal\n2,3600,2,3600,b,3600,true,normal\n");
    let mut cfg = config("1x2", "grace = \"5m\"", PolicyKind::Allot);
    cfg.kill_wait = 5;
    let sim = run(&w, &cfg);
    let a = runs_of(&sim, &w, 1);
    assert_eq!((a[0].ended, a[0].end), (RunEnd::Preempted { signal: H }, H));
    assert_eq!(runs_of(&sim, &w, 2)[0].start, H + 5);
}
