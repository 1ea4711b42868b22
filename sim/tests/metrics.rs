//! Every number of the report, worked out by hand on workloads of a few
//! jobs, against what `allot_sim::metrics::report` computes: the definitions
//! in docs/src/simulator/report.md, each checked once.

use allot::budget::BudgetTree;
use allot_sim::check::invariants;
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, Report, Workload};

const H: f64 = 3600.0;

fn run(csv: &str, shape: &str, cluster_toml: &str) -> Report {
    let w = Workload::from_csv(csv.as_bytes(), false).unwrap_or_else(|e| panic!("{e}"));
    let tree = BudgetTree::parse(&format!(
        "[cluster]\n{cluster_toml}\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n"
    ))
    .unwrap();
    let mut cfg = Config::new(shape.parse::<ClusterSpec>().unwrap(), tree, PolicyKind::Allot);
    cfg.check_policy = true;
    let sim = simulate(&w, &cfg, &mut |_| {});
    let broken = invariants(&w, &cfg, &sim);
    assert!(broken.is_empty(), "{broken:#?}");
    sim.report
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

/// One node of 2 GPUs, teams a and b with equal shares:
/// - job 0, a, 2 GPUs, 1 h, protected 1 h, submitted at 0: runs 0-3600;
/// - job 1, b, 1 GPU, 30 min, submitted at 0: no GPU until job 0 ends
///   (protected), runs 3600-5400 (wait 3600);
/// - job 2, b, 3 GPUs (4 held: two whole 2-GPU nodes), 15 min, at 600:
///   larger than the cluster, refused;
/// - job 3, a, 1 GPU, 10 min, unallocated, at 1200: runs 3600-4200 (wait 2400).
#[test]
fn a_small_workload_without_preemption_by_hand() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n\
               0,0,2,3600,a,3600,true,training\n1,0,1,1800,b,3600,true,debug\n\
               2,600,3,900,b,3600,true,training\n3,1200,1,600,a,0,true,sweep\n";
    let r = run(csv, "1x2", "lookback = \"1h\"");
    assert_eq!((r.jobs, r.jobs_completed, r.jobs_refused, r.jobs_cancelled, r.jobs_unfinished), (4, 3, 1, 0, 0));
    // Waits of the queued jobs: 0, 2400, 3600; nearest rank: p50 is the
    // 2nd of 3, p90 and p99 the 3rd.
    assert_eq!((r.wait_p50_s, r.wait_p90_s, r.wait_p99_s), (2400, 3600, 3600));
    assert_eq!((r.by_size["1"].jobs, r.by_size["1"].wait_p50_s, r.by_size["1"].wait_p90_s), (2, 2400, 3600));
    assert_eq!((r.by_size["2-8"].jobs, r.by_size["2-8"].wait_p90_s), (1, 0));
    assert!(!r.by_size.contains_key("9-32"), "a refused job has no wait");
    // Submitted work: 2x3600 + 1x1800 + 4x900 + 1x600 = 13,200 GPU-s; the
    // refused job's 3,600 was never done.
    assert!(close(r.submitted_gpu_hours, 13200.0 / H));
    assert!(close(r.not_completed_gpu_hours.values().sum(), 3600.0 / H), "{:?}", r.not_completed_gpu_hours);
    assert!(close(r.work_not_done_fraction, 3600.0 / 13200.0));
    assert!(r.warnings.iter().any(|w| w.contains("27.3% of the submitted work") && w.contains("1 job(s) refused")), "{:?}", r.warnings);
    // Delivered 2x3600 + 1800 + 600 = 9,600 GPU-s, 600 of it unallocated.
    assert_eq!(r.gpu_seconds_delivered, 9600);
    assert!(close(r.unallocated_fraction, 600.0 / 9600.0));
    // Occupancy over the submission span 0-1200: job 0's 2 GPUs throughout.
    assert!(close(r.occupancy, 1.0));
    assert_eq!(r.idle_gpu_hours_while_jobs_waited, 0.0);
    let (a, b) = (&r.teams[0], &r.teams[1]);
    assert_eq!((a.team.as_str(), a.jobs, b.jobs, b.jobs_refused), ("a", 2, 1, 1));
    assert!(close(b.refused_gpu_hours, 3600.0 / H));
    // Charged: a's allocated job only (the unallocated one is free).
    assert!(close(a.charged_gpu_hours, 2.0) && close(b.charged_gpu_hours, 0.5));
    assert!(close(a.delivered_gpu_hours, 7800.0 / H) && close(b.delivered_gpu_hours, 1800.0 / H));
    // Owed from the queue, hour by hour (7,200 GPU-s in an hour of 2 GPUs):
    // hour 1: a wants 7,200 (job 0) + 2,400 (job 3 queued 1200-3600), b
    // 3,600 (job 1 queued): b gets all it wants, a the other 3,600; the last
    // half hour (3,600 GPU-s): a wants 600, b 1,800, both served. a: 4,200,
    // b: 5,400.
    assert!(close(a.owed_gpu_hours, 4200.0 / H) && close(b.owed_gpu_hours, 5400.0 / H));
    assert!(close(a.delivered_over_owed.unwrap(), 7800.0 / 4200.0) && close(b.delivered_over_owed.unwrap(), 1800.0 / 5400.0));
    // Owed at submission, over the span 0-1200 (2,400 GPU-s): a would use
    // 2x1200, b 1x1200 + 4x600 (the refused job asked too): 1,200 each.
    assert!(close(a.owed_at_submission_gpu_hours, 1200.0 / H) && close(b.owed_at_submission_gpu_hours, 1200.0 / H));
    assert!(close(a.delivered_in_span_gpu_hours, 2400.0 / H) && close(b.delivered_in_span_gpu_hours, 0.0));
    assert!(close(a.delivered_over_owed_at_submission.unwrap(), 2.0) && close(b.delivered_over_owed_at_submission.unwrap(), 0.0));
    // Both teams submitted; only a got 95% of what it was owed.
    assert!(close(r.teams_at_95pct_of_owed, 0.5) && close(r.teams_at_95pct_of_owed_at_submission, 0.5));
    // Allocated work first changes nothing here: in hour 1 the allocated
    // jobs want 7,200 (a) and 3,600 (b), more than the cluster's 7,200
    // together: each is owed 3,600 and a's free job nothing; in the last
    // half hour b's allocated job is owed its 1,800 and a's free job its 600
    // of what is left.
    assert!(close(a.owed_allocated_first_gpu_hours, 4200.0 / H) && close(b.owed_allocated_first_gpu_hours, 5400.0 / H));
    assert!(close(r.teams_at_95pct_of_owed_allocated_first, 0.5));
}

/// One node of 2 GPUs, stopped at 3600: b's allocated job (2 GPUs, 1 h,
/// protected) runs 0-3600 while a's free job (2 GPUs) waits the whole hour.
/// As both wanted, a was owed half the hour and got nothing; as the
/// contract owes it, b's allocated work was owed the whole hour and a's
/// free work nothing, which it got: a counts as served.
#[test]
fn free_work_owed_nothing_allocated_first_counts_as_served() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n0,0,2,3600,a,0,true,sweep\n1,0,2,3600,b,3600,true,training\n";
    let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
    let tree = BudgetTree::parse("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n").unwrap();
    let mut cfg = Config::new("1x2".parse::<ClusterSpec>().unwrap(), tree, PolicyKind::Allot);
    cfg.horizon = Some(3600);
    let sim = simulate(&w, &cfg, &mut |_| {});
    assert!(invariants(&w, &cfg, &sim).is_empty());
    let r = sim.report;
    let (a, b) = (&r.teams[0], &r.teams[1]);
    assert!(close(a.delivered_gpu_hours, 0.0) && close(b.delivered_gpu_hours, 2.0), "{r:?}");
    assert!(close(a.owed_gpu_hours, 1.0) && close(b.owed_gpu_hours, 1.0));
    assert!(close(a.owed_allocated_first_gpu_hours, 0.0) && close(b.owed_allocated_first_gpu_hours, 2.0));
    assert_eq!((a.delivered_over_owed, a.delivered_over_owed_allocated_first), (Some(0.0), None));
    assert_eq!(b.delivered_over_owed_allocated_first, Some(1.0));
    assert!(close(r.teams_at_95pct_of_owed, 0.5) && close(r.teams_at_95pct_of_owed_allocated_first, 1.0));
}

/// One node of 4 GPUs:
/// - job 0, a, 2 GPUs, unallocated, 10 h of work, resumable, at 0;
/// - job 1, b, 3 GPUs, 1 h, protected 1 h, at 3600: 2 GPUs are free, it
///   preempts job 0 and holds the 2 free ones idle through the 5-minute
///   grace (claimed: 600 GPU-s), runs 3900-7500;
/// - job 0, killed at 3900, checkpointed at 1800 and 3600: 300 s of 2 GPUs
///   lost; requeued, it waits for 2 GPUs while 1 is free (3,600 GPU-s idle
///   while a job waited) and runs again from 7500 to 39900.
#[test]
fn a_preemption_by_hand() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n0,0,2,36000,a,0,true,sweep\n1,3600,3,3600,b,3600,true,training\n";
    let r = run(csv, "1x4", "grace = \"5m\"\nunallocated_grace = \"5m\"");
    assert_eq!((r.preemptions, r.preemptions_of_unallocated, r.preemptions_within_team), (1, 1, 0));
    assert!(close(r.gpu_hours_lost_to_preemption, 600.0 / H));
    assert!(close(r.gpu_hours_claimed_in_grace, 600.0 / H));
    assert!(close(r.idle_gpu_hours_by_cause.grace_time, 600.0 / H));
    // 1 GPU free while job 0 (2 GPUs) waits: no waiting job fits.
    assert!(close(r.idle_gpu_hours_by_cause.no_job_fits, 1.0));
    assert!(close(r.idle_gpu_hours_while_jobs_waited, 1.0));
    // Job 1 waited its victim's grace time: waits 0 and 300.
    assert_eq!((r.wait_p50_s, r.wait_p90_s), (0, 300));
    // Delivered: 2x3900 + 2x32400 (job 0) + 3x3600 (job 1) = 83,400.
    assert_eq!(r.gpu_seconds_delivered, 83_400);
    assert!(close(r.unallocated_fraction, 72_600.0 / 83_400.0));
    // Occupancy over the span 0-3600: 2 of 4 GPUs.
    assert!(close(r.occupancy, 0.5));
    assert_eq!((r.work_not_done_fraction, r.jobs_completed), (0.0, 2));
    // Owed from the queue, by hour: a wants its 2 GPUs throughout (2 x
    // 39,900); b wants 3 from 3600 to 7500. Hour 2 (14,400 GPU-s): a 7,200,
    // b 10,800 wanted, b gets the other 7,200; hour 3: b's last 300 s (900).
    let (a, b) = (&r.teams[0], &r.teams[1]);
    assert!(close(a.owed_gpu_hours, 2.0 * 39_900.0 / H), "{}", a.owed_gpu_hours);
    assert!(close(b.owed_gpu_hours, 8100.0 / H), "{}", b.owed_gpu_hours);
    // At submission over the span 0-3600: a's job 0 only, b's comes at 3600.
    assert!(close(a.owed_at_submission_gpu_hours, 2.0) && b.owed_at_submission_gpu_hours == 0.0);
    assert_eq!(b.delivered_over_owed_at_submission, None);
    assert!(close(b.charged_gpu_hours, 3.0) && a.charged_gpu_hours == 0.0);
    // Owed allocated work first: in hour 2 b's allocated job is owed all
    // 10,800 it wants and a's free job only the 3,600 left; every other
    // hour is as above. a: 79,800 - 3,600 = 76,200; b: 10,800 + 900.
    assert!(close(a.owed_allocated_first_gpu_hours, 76_200.0 / H), "{}", a.owed_allocated_first_gpu_hours);
    assert!(close(b.owed_allocated_first_gpu_hours, 11_700.0 / H), "{}", b.owed_allocated_first_gpu_hours);
    // Delivered a 72,600, b 10,800: a at 95% by the contract's count and
    // not by the other, b the other way round.
    assert!(close(a.delivered_over_owed_allocated_first.unwrap(), 72_600.0 / 76_200.0));
    assert!(close(b.delivered_over_owed_allocated_first.unwrap(), 10_800.0 / 11_700.0));
    assert!(a.delivered_over_owed.unwrap() < 0.95 && b.delivered_over_owed.unwrap() > 1.0);
    assert!(close(r.teams_at_95pct_of_owed_allocated_first, 0.5));
}

/// Three nodes of 4 GPUs, every job protected for its whole runtime:
/// - jobs 0-2, 3 GPUs, 1 h, at 0: one per node (best fit: each takes the
///   emptiest node left);
/// - jobs 3-5, 1 GPU, 7 h, at 0: the last GPU of each node;
/// - job 6, 8 GPUs (two whole nodes), 1 h, at 1 s: waits. From 1 h to 7 h
///   9 GPUs are free, 3 per node: enough in number, but no node is whole:
///   6 h x 9 GPUs idle by the whole-node rule.
#[test]
fn idle_gpus_split_by_cause_whole_nodes_by_hand() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n\
               0,0,3,3600,a,3600,true,training\n1,0,3,3600,a,3600,true,training\n2,0,3,3600,a,3600,true,training\n\
               3,0,1,25200,a,25200,true,training\n4,0,1,25200,a,25200,true,training\n5,0,1,25200,a,25200,true,training\n\
               6,1,8,3600,a,3600,true,training\n";
    let r = run(csv, "3x4", "");
    let c = r.idle_gpu_hours_by_cause;
    assert!(close(c.whole_node_rule, 54.0), "{c:?}");
    assert!(close(c.backfill_limits, 0.0) && close(c.no_job_fits, 0.0), "{c:?}");
    assert!(close(r.idle_gpu_hours_while_jobs_waited, 54.0));
}

/// One node of 4 GPUs, every job protected for its whole runtime:
/// - job 0, 2 GPUs, 2 h, at 0: runs 0-7200;
/// - job 1, 4 GPUs, 1 h, at 1 s: waits for job 0; backfill reserves the
///   node for it at 7200. From 1 s to 2 s no waiting job fits the 2 free
///   GPUs: 2 GPU-seconds idle because no job fits;
/// - job 2, 2 GPUs, 3 h, at 2 s: it fits the 2 free GPUs but would end
///   after 7200 and delay job 1, so backfill leaves it: 2 GPUs idle from 2 s
///   to 7200 s by the scheduler's limits (the reservation). Job 1 runs
///   7200-10800, job 2 10800-21600.
#[test]
fn idle_gpus_split_by_cause_reservation_by_hand() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n\
               0,0,2,7200,a,7200,true,training\n1,1,4,3600,a,3600,true,training\n2,2,2,10800,a,10800,true,training\n";
    let r = run(csv, "1x4", "");
    let c = r.idle_gpu_hours_by_cause;
    assert!(close(c.no_job_fits, 2.0 / H), "{c:?}");
    assert!(close(c.backfill_limits, 2.0 * 7198.0 / H), "{c:?}");
    assert!(close(c.whole_node_rule, 0.0), "{c:?}");
    assert!(close(r.idle_gpu_hours_while_jobs_waited, 2.0 * 7199.0 / H));
    assert_eq!(r.wait_p50_s, 7199);
}

/// Two nodes of 4 GPUs, teams a and b, a 2-hour window:
/// - jobs 0 and 1, a, 4 GPUs each, at 0: job 0 protected 1 h, job 1 2 h
///   (and done at 2 h);
/// - job 2, b, 4 GPUs, protected 8 h, at 1.5 h: a used 1.5 of its share, b
///   none, so it preempts job 0 (the only one past its protection);
/// - job 0, requeued, starts again at 2 h on job 1's node;
/// - job 3, b, 4 GPUs, at 2.5 h: at 3 h, job 0 past its protection again,
///   a has used 1.29 of its share and b 0.71, so it preempts job 0 again.
///
/// Job 0 lost its GPUs twice within the 8 hours the job that first took
/// them is protected: one ping-pong (job 0's own minimum runtime, 1 h, had
/// passed; the count before took only that into account and said 0).
#[test]
fn a_second_preemption_within_the_first_preemptor_s_protection_is_a_ping_pong() {
    let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,kind\n\
               0,0,4,36000,a,3600,true,training\n\
               1,0,4,7200,a,7200,true,training\n\
               2,5400,4,36000,b,28800,true,training\n\
               3,9000,4,3600,b,3600,true,training\n";
    let r = run(csv, "2x4", "grace = \"5m\"\nlookback = \"2h\"\nsmall_job_gpus = 0");
    assert_eq!((r.preemptions, r.preemptions_within_team), (2, 0), "{r:#?}");
    assert_eq!(r.ping_pongs, 1);
}
