//! Nothing is free: a researcher who wants GPUs without paying, and an admin
//! whose ledger just failed, against a real Slurm (each supported release) with allot's four
//! plugins. One test per trick; each asserts the charge or the refusal.
//!
//! Needs root and the packages of `scripts/install-deps.sh`, and the release
//! build: the README's test command does all of it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use allot_cluster_tests::{now, secs, sleep_job, text, with_unallocated_grace, JobInfo, Options, TestCluster, BUDGET};
use allot_ledger::{Ledger, RunRow};

/// The shipped RecomputePeriod (conf/allot.conf): charging must not depend on it.
const SHIPPED_PERIOD: u32 = 30;

fn field_i64(job: &JobInfo, key: &str) -> i64 {
    job.get(key).parse().unwrap_or_else(|_| panic!("job {} {key}={:?} is not a number (SLURM_TIME_FORMAT=%s?)", job.id, job.get(key)))
}

/// GPUs a job asked for, from Slurm's record (`TresPerNode=gres:gpu:N`, one node).
fn gpus_of(job: &JobInfo) -> i64 {
    job.get("TresPerNode").rsplit(':').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Wakes the priority plugin's thread now (`priority_p_reconfig`), so a test
/// need not wait out the shipped 30-second period for the ledger write.
/// Changing the debug flags (here: clearing one that is not set) calls it
/// on every release, without more: `scontrol reconfigure` does too on
/// 22.05, but on 24.11 it restarts slurmctld instead.
fn wake_recompute(c: &TestCluster) {
    let out = c.scontrol(&["setdebugflags", "-Priority"]);
    assert!(out.status.success(), "scontrol setdebugflags: {}", text(&out));
}

/// The runs of `jobs` in the ledger (oldest first), once every one of them
/// has at least `want` closed runs.
fn wait_for_runs(c: &TestCluster, jobs: &[u32], want: usize) -> HashMap<u32, Vec<RunRow>> {
    let mut runs = HashMap::new();
    c.wait_for(&format!("{} jobs' runs in the ledger", jobs.len()), secs(90), || {
        let Ok(l) = Ledger::open_read_only(c.ledger_path()) else { return false };
        runs = jobs.iter().map(|&j| (j, l.runs_of_job(j).unwrap_or_default())).collect();
        let done = runs.values().all(|r: &Vec<RunRow>| r.iter().filter(|r| r.run_end.is_some()).count() >= want);
        if !done {
            wake_recompute(c);
        }
        done
    });
    runs
}

#[test]
fn h1_short_jobs_are_charged_whatever_the_recompute_period() {
    let c = TestCluster::start("shortjobs", BUDGET, Options { recompute_period: SHIPPED_PERIOD, grace: 3, ..Options::default() });
    // Twenty 1-GPU jobs of 1 to 3 seconds, chained as a free-rider would.
    let jobs: Vec<u32> = (0..20u32)
        .map(|i| {
            let user = if i % 2 == 0 { "alice" } else { "bob" };
            c.sbatch(user, &["--gres=gpu:1", "--comment=min_runtime=10s", &sleep_job(1 + i % 3)]).unwrap()
        })
        .collect();
    // And an array of five 1-second tasks: each task is a job of its own.
    let array = c.sbatch("alice", &["--gres=gpu:1", "--array=0-4", "--comment=min_runtime=10s", &sleep_job(1)]).unwrap();
    c.wait_for("all short jobs complete", secs(120), || {
        let all = c.jobs();
        jobs.iter().all(|&j| c.job(j).state() == "COMPLETED")
            && all.iter().filter(|j| j.get("ArrayJobId") == array.to_string()).count() == 5
            && all.iter().filter(|j| j.get("ArrayJobId") == array.to_string()).all(|j| j.state() == "COMPLETED")
    });
    let slurm: HashMap<u32, JobInfo> = c.jobs_epoch().into_iter().map(|j| (j.id, j)).collect();
    let tasks: Vec<u32> = slurm.values().filter(|j| j.get("ArrayJobId") == array.to_string()).map(|j| j.id).collect();
    assert_eq!(tasks.len(), 5);
    let task_runs = wait_for_runs(&c, &tasks, 1);
    for id in &tasks {
        let (r, s) = (&task_runs[id], &slurm[id]);
        assert_eq!(r.len(), 1, "array task {id}: {r:?}");
        assert_eq!(
            (r[0].run_start, r[0].run_end, r[0].leaf.as_deref()),
            (field_i64(s, "StartTime"), Some(field_i64(s, "EndTime")), Some("lab/teama")),
            "array task {id}"
        );
    }
    let runs = wait_for_runs(&c, &jobs, 1);
    for (i, &id) in jobs.iter().enumerate() {
        let r = &runs[&id];
        assert_eq!(r.len(), 1, "job {id}: {r:?}");
        let s = &slurm[&id];
        assert_eq!((r[0].run_start, r[0].run_end), (field_i64(s, "StartTime"), Some(field_i64(s, "EndTime"))), "job {id}: the ledger's run is Slurm's");
        let leaf = if i % 2 == 0 { "lab/teama" } else { "lab/teamb" };
        assert_eq!((r[0].leaf.as_deref(), r[0].gpus, r[0].allocated), (Some(leaf), 1, true), "job {id}");
        assert_eq!(r[0].end_reason.as_deref(), Some("completed"));
    }
}

#[test]
fn h2_odd_account_spellings_are_charged_to_the_budget_checked() {
    let c = TestCluster::start("spellings", BUDGET, Options::default());
    let spellings = [" teama", "TeamA ", "", "  TEAMA  "];
    let jobs: Vec<u32> =
        spellings.iter().map(|a| c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &format!("--account={a}"), &sleep_job(2)]).unwrap()).collect();
    for (&id, a) in jobs.iter().zip(spellings) {
        assert_eq!(c.job(id).get("Account"), "teama", "-A {a:?} must become the budget's own account");
    }
    // The same spellings cannot smuggle a non-member in.
    let e = c.sbatch("bob", &["--account= TeamA", &sleep_job(2)]).unwrap_err();
    assert!(e.contains("not a member of budget lab/teama"), "{e}");
    let e = c.sbatch("erin", &["--account=", &sleep_job(2)]).unwrap_err();
    assert!(e.contains("user 'erin' has no default budget"), "{e}");
    let e = c.sbatch("alice", &["--account=nosuch ", &sleep_job(2)]).unwrap_err();
    assert!(e.contains("account 'nosuch' is not in the allot budget tree"), "{e}");
    // An account that is not UTF-8 is refused, not charged to a default.
    let mut bad = b"--account=teama".to_vec();
    bad.push(0xff);
    let out = c.slurm_os(Some("alice"), "sbatch", &[OsString::from("--gres=gpu:1"), OsString::from_vec(bad), OsString::from(sleep_job(2))]);
    assert!(!out.status.success(), "a non-UTF-8 account was accepted: {}", text(&out));
    assert!(text(&out).contains("is not valid UTF-8 text"), "{}", text(&out));

    let runs = wait_for_runs(&c, &jobs, 1);
    for id in &jobs {
        assert_eq!(runs[id][0].leaf.as_deref(), Some("lab/teama"), "job {id} charged to {:?}", runs[id][0].leaf);
        assert_eq!(runs[id][0].account.as_deref(), Some("teama"));
    }
}

#[test]
fn h3_a_started_job_keeps_the_contract_and_budget_it_started_under() {
    let c = TestCluster::start("frozen", BUDGET, Options::default());
    // A free job tries to give itself hours of protection once it holds GPUs.
    let free = c.sbatch("dave", &["--gres=gpu:8", "--comment=min_runtime=0", &sleep_job(600)]).unwrap();
    c.wait_state(free, "RUNNING", secs(30));
    let up = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={free}"), "comment=min_runtime=8h"]);
    assert!(!up.status.success(), "a running job changed its contract: {}", text(&up));
    assert!(text(&up).contains("no longer pending"), "{}", text(&up));
    let up = c.scontrol(&["update", &format!("jobid={free}"), "comment=min_runtime=8h"]);
    assert!(!up.status.success(), "even root may not rewrite a running job's contract: {}", text(&up));
    assert_eq!(c.job(free).comment(), "min_runtime=0 priority=normal");
    assert!(c.ctld_log().contains(&format!("JobId={free} has started: its contract 'min_runtime=0 priority=normal' holds until it ends")));
    // Nor move it to another budget mid-run (dave may charge both).
    let up = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={free}"), "account=teamb"]);
    assert!(!up.status.success(), "a running job changed budget: {}", text(&up));
    // Free text may still change; the contract stays.
    let up = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={free}"), "comment=note min_runtime=0"]);
    assert!(up.status.success(), "{}", text(&up));
    assert_eq!(c.job(free).comment(), "note min_runtime=0 priority=normal");

    // A pending job's contract may change, and is written out canonically.
    let held = c.sbatch("dave", &["--gres=gpu:8", "--hold", "--comment=min_runtime=1m", &sleep_job(5)]).unwrap();
    let up = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={held}"), "comment=min_runtime=2h priority=HIGH"]);
    assert!(up.status.success(), "{}", text(&up));
    assert_eq!(c.job(held).comment(), "min_runtime=2h priority=high");

    // A comment that is not UTF-8 is refused rather than replaced by the default.
    let bad = b"--comment=min_runtime=8h \xfe".to_vec();
    let out = c.slurm_os(Some("alice"), "sbatch", &[OsString::from_vec(bad), OsString::from(sleep_job(2))]);
    assert!(!out.status.success() && text(&out).contains("is not valid UTF-8 text"), "{}", text(&out));
    // A contract that would overflow Slurm's 1,024-byte comment is refused by
    // allot, saying so (not Slurm's "Pathname too long").
    let long = format!("--comment={} min_runtime=1h", "x".repeat(1000));
    let e = c.sbatch("alice", &[&long, &sleep_job(2)]).unwrap_err();
    assert!(e.contains("Slurm keeps at most 1024: shorten its other text by 7 bytes"), "{e}");
    let fits = format!("--comment={} min_runtime=1h", "x".repeat(993));
    c.sbatch("alice", &["--hold", &fits, &sleep_job(2)]).expect("1,024 bytes with the contract fit");

    // The ledger agrees with Slurm: recorded unallocated, uncharged.
    c.wait_for("the free job's run and contract are recorded", secs(20), || {
        let l = c.ledger();
        l.contract(free).ok().flatten().is_some() && !l.runs_of_job(free).unwrap_or_default().is_empty()
    });
    let l = c.ledger();
    assert_eq!(l.contract(free).unwrap().unwrap().min_runtime, 0);
    assert!(!l.runs_of_job(free).unwrap()[0].allocated);
    let why = c.allot(&["why", &free.to_string()]);
    assert!(text(&why).contains("min_runtime=0"), "{}", text(&why));
}

/// A job that ignores SIGTERM, so it is still running in its grace time.
const STUBBORN: &str = "#!/bin/bash\ntrap 'echo term' TERM\nwhile true; do sleep 1; done\n";

#[test]
fn h4_only_an_exit_in_the_grace_time_is_requeued_not_a_users_scancel() {
    let c = TestCluster::start("graceend", &with_unallocated_grace(BUDGET), Options { recompute_period: 1, grace: 20, ..Options::default() });
    let script = c.job_dir().join("stubborn.sh");
    std::fs::write(&script, STUBBORN).unwrap();
    let free = c
        .sbatch("alice", &["--gres=gpu:8", "-w", "n4", "--comment=min_runtime=0", "--requeue", "--signal=B:TERM@20", c.inner(&script).to_str().unwrap()])
        .unwrap();
    c.wait_state(free, "RUNNING", secs(30));
    let preemptor = c.sbatch("bob", &["--gres=gpu:8", "-w", "n4", "--comment=min_runtime=5m", &sleep_job(600)]).unwrap();
    c.wait_for("the free job is being preempted", secs(60), || {
        let j = c.job(free);
        !j.get("PreemptTime").is_empty() && j.get("PreemptTime") != "None"
    });
    // In its grace time, its owner cancels it: that is the end of it.
    let out = c.slurm(Some("alice"), "scancel", &[&free.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    c.wait_state(free, "CANCELLED", secs(30));
    c.wait_state(preemptor, "RUNNING", secs(60));
    std::thread::sleep(secs(5));
    let j = c.job(free);
    assert_eq!((j.state(), j.restarts()), ("CANCELLED", 0), "a user's scancel in the grace time requeued the job");
    let l = c.ledger();
    assert!(l.events_of_job(free).unwrap().iter().all(|e| e.kind != "requeued_after_grace"));
    c.wait_for("the cancelled run is recorded", secs(20), || c.ledger().runs_of_job(free).unwrap().iter().any(|r| r.run_end.is_some()));
    let runs = c.ledger().runs_of_job(free).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].end_reason.as_deref(), Some("cancelled"));
}

#[test]
fn h5_runs_end_as_slurm_ended_them_and_a_suspension_is_not_charged() {
    let c = TestCluster::start("endings", BUDGET, Options { recompute_period: SHIPPED_PERIOD, grace: 3, ..Options::default() });
    // Preempted and requeued: end_reason "preempted", then a second run.
    let free = c.sbatch("alice", &["--gres=gpu:8", "-w", "n4", "--comment=min_runtime=0", "--requeue", &sleep_job(600)]).unwrap();
    c.wait_state(free, "RUNNING", secs(30));
    let preemptor = c.sbatch("bob", &["--gres=gpu:8", "-w", "n4", "--comment=min_runtime=5m", &sleep_job(600)]).unwrap();
    c.wait_state(preemptor, "RUNNING", secs(60));
    // Requeued by an admin: "requeued".
    let admin = c.sbatch("carol", &["--gres=gpu:4", "-w", "n3", "--comment=min_runtime=5m", &sleep_job(600)]).unwrap();
    c.wait_state(admin, "RUNNING", secs(30));
    std::thread::sleep(secs(2));
    assert!(c.scontrol(&["requeue", &admin.to_string()]).status.success());
    // Suspended for about 8 s in a 20-second job: charged its running time only.
    let sus = c.sbatch("dave", &["--gres=gpu:8", "-w", "n1", "--comment=min_runtime=5s", &sleep_job(20)]).unwrap();
    c.wait_state(sus, "RUNNING", secs(30));
    std::thread::sleep(secs(4));
    assert!(c.scontrol(&["suspend", &sus.to_string()]).status.success());
    std::thread::sleep(secs(8));
    assert!(c.scontrol(&["resume", &sus.to_string()]).status.success());
    c.wait_state(sus, "COMPLETED", secs(60));

    let runs = wait_for_runs(&c, &[free, admin, sus], 1);
    assert_eq!(runs[&free][0].end_reason.as_deref(), Some("preempted"), "{:?}", runs[&free]);
    assert_eq!(runs[&admin][0].end_reason.as_deref(), Some("requeued"), "{:?}", runs[&admin]);
    let s = c.jobs_epoch().into_iter().find(|j| j.id == sus).unwrap();
    let wall = field_i64(&s, "EndTime") - field_i64(&s, "StartTime");
    let charged: i64 = runs[&sus].iter().map(|r| r.run_end.unwrap() - r.run_start).sum();
    assert!(charged <= wall - 6, "the suspension was charged: {charged} s of {wall} s wall time, runs {:?}", runs[&sus]);
    assert!(charged >= wall - 10, "running time went missing: {charged} s of {wall} s, runs {:?}", runs[&sus]);
}

/// Every closed run of the ledger, by (job, start).
fn closed_runs(l: &Ledger) -> BTreeMap<(u32, i64), (i64, u32, Option<String>)> {
    l.runs_since(0).unwrap().into_iter().filter_map(|r| Some(((r.job_id, r.run_start), (r.run_end?, r.gpus, r.leaf)))).collect()
}

#[test]
fn h6_a_corrupt_or_deleted_ledger_loses_no_run() {
    let c = TestCluster::start("ledgerfault", BUDGET, Options::default());
    let t0 = now();
    let short: Vec<u32> =
        (0..6).map(|i| c.sbatch(if i % 2 == 0 { "alice" } else { "bob" }, &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap()).collect();
    let long = c.sbatch("carol", &["--gres=gpu:4", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    c.wait_for("the short jobs end", secs(60), || short.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    c.wait_state(long, "RUNNING", secs(30));
    let before = wait_for_runs(&c, &short, 1);
    std::thread::sleep(secs(3));
    let fault = now();
    let history = closed_runs(&c.ledger());
    let charged_before: HashMap<String, i64> = c.ledger().charged_by_leaf(t0 - 60, fault).unwrap().into_iter().collect();
    assert_eq!(history.len(), short.len(), "{history:?}");

    // 1. Overwritten in place with garbage (same file, WAL left behind).
    let garbage: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(c.ledger_path(), &garbage).unwrap();
    let during: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap()).collect();
    c.wait_for("jobs run and end while the ledger is garbage", secs(60), || during.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    std::thread::sleep(secs(4));
    let now_bytes = std::fs::read(c.ledger_path()).unwrap();
    let first_change = now_bytes.iter().zip(&garbage).position(|(a, b)| a != b);
    assert!(
        now_bytes.len() == garbage.len() && first_change.is_none(),
        "the plugin wrote into a file that is not a ledger: {} bytes (was {}), first change at {first_change:?}",
        now_bytes.len(),
        garbage.len()
    );
    let log = c.ctld_log();
    // One line for the thread that reads the budget, one for the writer:
    // not one per period or per job (the fault lasted several periods and
    // four jobs).
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("priority/allot") && l.contains("is not a SQLite database any more")).collect();
    assert!(!lines.is_empty() && lines.len() <= 2, "the fault is logged once a minute at most:\n{}", lines.join("\n"));
    assert_eq!(lines.iter().filter(|l| l.contains("writing the ledger")).count(), 1, "{}", lines.join("\n"));
    // allot says what is wrong and how to recover; recovery moves it aside.
    let sync = c.allot(&["sync", c.dir.join("budgets.toml").to_str().unwrap()]);
    assert!(!sync.status.success());
    assert!(text(&sync).contains("allot ledger recover"), "{}", text(&sync));
    let recover = c.allot(&["ledger", "recover"]);
    assert!(recover.status.success(), "{}", text(&recover));
    let aside: Vec<_> = std::fs::read_dir(&c.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("ledger.db.corrupt-") && !name.ends_with("-wal") && !name.ends_with("-shm")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the bad file is kept aside");
    assert!(std::fs::read(aside[0].path()).unwrap() == garbage, "the file moved aside is the bad file, byte for byte");
    let sync = c.allot(&["sync", c.dir.join("budgets.toml").to_str().unwrap()]);
    assert!(sync.status.success(), "{}", text(&sync));
    let runs = wait_for_runs(&c, &during, 1);
    assert_eq!(runs.len(), during.len());
    // Everything from before the fault is back, run for run, and so is the
    // usage of that period.
    let l = c.ledger();
    let after = closed_runs(&l);
    for (key, run) in &history {
        assert_eq!(after.get(key), Some(run), "run {key:?} lost or changed in the recovery");
    }
    let charged_after: HashMap<String, i64> = l.charged_by_leaf(t0 - 60, fault).unwrap().into_iter().collect();
    assert_eq!(charged_after, charged_before, "usage before the fault changed");
    assert!(l.runs_of_job(long).unwrap().iter().any(|r| r.run_end.is_none()), "the running job's run is back");
    demand_is_back(&l, "recovered");

    // 2. Deleted, then re-synced: the same.
    let history = closed_runs(&l);
    drop(l);
    std::fs::remove_file(c.ledger_path()).unwrap();
    let _ = std::fs::remove_file(c.dir.join("ledger.db-wal"));
    let _ = std::fs::remove_file(c.dir.join("ledger.db-shm"));
    let gone = c.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    c.wait_state(gone, "COMPLETED", secs(60));
    let sync = c.allot(&["sync", c.dir.join("budgets.toml").to_str().unwrap()]);
    assert!(sync.status.success(), "{}", text(&sync));
    wait_for_runs(&c, &[gone], 1);
    let after = closed_runs(&c.ledger());
    for (key, run) in &history {
        assert_eq!(after.get(key), Some(run), "run {key:?} lost when the ledger was deleted");
    }
    let charged_after: HashMap<String, i64> = c.ledger().charged_by_leaf(t0 - 60, fault).unwrap().into_iter().collect();
    assert_eq!(charged_after, charged_before);
    demand_is_back(&c.ledger(), "deleted");
    let _ = before;
}

/// A new ledger file gets each leaf's demand as it stands (what `allot
/// report` computes owed from): carol's long job still runs on 4 GPUs.
fn demand_is_back(l: &Ledger, how: &str) {
    let rows = l.demand_since(now()).unwrap();
    let leaves: BTreeSet<&str> = rows.iter().map(|d| d.leaf.as_str()).collect();
    assert_eq!(leaves.into_iter().collect::<Vec<_>>(), ["lab/teama", "lab/teamb", "other"], "the {how} ledger lacks a leaf's demand: {rows:?}");
    let other = rows.iter().rev().find(|d| d.leaf == "other").unwrap();
    assert_eq!((other.running_allocated, other.pending_allocated), (4, 0), "the {how} ledger's demand of carol's budget: {other:?}");
}

#[test]
fn h7_the_ledger_agrees_with_slurms_job_records_within_one_percent() {
    // Slurm's own record of every run: slurmdbd's (`sacct -D`), which keeps
    // each run whoever ended it (an admin's requeue, or one Slurm made by
    // itself, as 24.11 does now and then for a job whose launch straddled
    // the controller restart), once it has ended. An EpilogSlurmctld's dump
    // of the job record was no such reference: it raced the record's next
    // state, and a run Slurm requeued by itself was seen half.
    let options = Options { recompute_period: SHIPPED_PERIOD, grace: 3, accounting: true, ..Options::default() };
    let c = TestCluster::start("reconcile", BUDGET, options);
    c.apply_associations();
    let mut jobs = Vec::new();
    // Long jobs across a slurmctld restart.
    for user in ["alice", "bob"] {
        jobs.push(c.sbatch(user, &["--gres=gpu:8", "--comment=min_runtime=10s", &sleep_job(40)]).unwrap());
    }
    // Jobs that an admin requeues once, then run to the end.
    let requeued: Vec<u32> = (0..3).map(|_| c.sbatch("carol", &["--gres=gpu:4", "--comment=min_runtime=10s", "--requeue", &sleep_job(20)]).unwrap()).collect();
    jobs.extend(&requeued);
    // Short jobs, 1 to 5 s.
    for i in 0..20u32 {
        let user = ["alice", "bob", "dave"][i as usize % 3];
        jobs.push(c.sbatch(user, &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1 + i % 5)]).unwrap());
        if i == 8 {
            c.wait_for("the requeue candidates run", secs(30), || requeued.iter().all(|&j| c.job(j).state() == "RUNNING"));
            for &j in &requeued {
                let out = c.scontrol(&["requeue", &j.to_string()]);
                assert!(out.status.success(), "{}", text(&out));
            }
        }
        if i == 14 {
            c.restart_slurmctld();
        }
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    c.wait_for("every job ends", secs(180), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    // Runs per job, from Slurm's final record: its restarts (ours and Slurm's), plus one.
    let runs_of: HashMap<u32, usize> = jobs.iter().map(|&j| (j, c.job(j).restarts() as usize + 1)).collect();
    for &j in &requeued {
        assert!(runs_of[&j] >= 2, "job {j} was requeued but Slurm counts no restart");
    }

    // Slurm's runs: (job, start) -> (end, GPUs), once slurmdbd has them all.
    let mut slurm: BTreeMap<(u32, i64), (i64, i64)> = BTreeMap::new();
    c.wait_for("slurmdbd's record of every run's end", secs(60), || {
        slurm = c.sacct_runs(&jobs).into_iter().map(|r| ((r.job, r.start), (r.end, r.gpus))).collect();
        jobs.iter().all(|j| slurm.keys().filter(|(id, _)| id == j).count() >= runs_of[j])
    });
    for (&(j, start), &(end, gpus)) in &slurm {
        assert!(end >= start && gpus > 0, "job {j}: slurmdbd's run {start}..{end} with {gpus} GPUs");
    }
    let mut wanted: HashMap<u32, usize> = HashMap::new();
    for (job, _) in slurm.keys() {
        *wanted.entry(*job).or_default() += 1;
    }
    let mut ledger_runs: HashMap<u32, Vec<RunRow>> = HashMap::new();
    c.wait_for("every run in the ledger", secs(90), || {
        let Ok(l) = Ledger::open_read_only(c.ledger_path()) else { return false };
        ledger_runs = jobs.iter().map(|&j| (j, l.runs_of_job(j).unwrap_or_default())).collect();
        let done = ledger_runs.iter().all(|(j, r)| r.len() >= wanted[j] && r.iter().all(|r| r.run_end.is_some()));
        if !done {
            wake_recompute(&c);
        }
        done
    });
    let slurm_gpu_s: i64 = slurm.iter().map(|((_, start), (end, gpus))| (end - start) * gpus).sum();
    let ledger_gpu_s: i64 = ledger_runs.values().flatten().map(|r| (r.run_end.unwrap() - r.run_start) * r.gpus as i64).sum();
    let runs_ledger: usize = ledger_runs.values().map(Vec::len).sum();
    let short_runs = slurm.iter().filter(|((_, s), (e, _))| e - s <= 5).count();
    eprintln!(
        "reconciliation: Slurm {} runs ({short_runs} of 5 s or less, {} after a requeue), {slurm_gpu_s} GPU-s; ledger {runs_ledger} runs, {ledger_gpu_s} GPU-s",
        slurm.len(),
        slurm.len() - jobs.len()
    );
    assert_eq!(runs_ledger, slurm.len(), "runs: ledger {ledger_runs:?}\nslurm {slurm:?}");
    for (j, runs) in &ledger_runs {
        for r in runs {
            let s = slurm.get(&(*j, r.run_start));
            assert_eq!(s.map(|&(end, gpus)| (end, gpus)), Some((r.run_end.unwrap(), r.gpus as i64)), "job {j}: ledger run {r:?} is not one of Slurm's");
        }
    }
    let diff = (ledger_gpu_s - slurm_gpu_s).abs() as f64 / slurm_gpu_s as f64;
    assert!(diff <= 0.01, "ledger {ledger_gpu_s} GPU-s vs Slurm {slurm_gpu_s} GPU-s: {:.2}% apart", diff * 100.0);
}

/// A tmpfs of `size` at `dir`, unmounted on drop (lazily: slurmctld may
/// still hold the ledger's files open when the test ends).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: std::path::PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "mount a tmpfs: {}", text(&out));
        SmallDisk(dir)
    }

    /// Fills what is left of it with one file; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        for chunk in [1 << 16, 1 << 12, 1 << 9, 1] {
            let buf = vec![0u8; chunk];
            while f.write_all(&buf).is_ok() {}
        }
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// The disk the ledger lives on fills up. Scheduling goes on, the plugins
/// keep every run in memory and say so, and once space is freed every run
/// of the fault reaches the ledger as Slurm ran it; the ledger is intact.
#[test]
fn h8_a_full_ledger_disk_loses_no_run_even_across_a_restart() {
    let c = TestCluster::start("ledgerfull", BUDGET, Options::default());
    // The ledger on a small disk of its own: a fresh one there, then
    // slurmctld pointed at it.
    let disk = SmallDisk::mount(c.dir.join("ledgerdisk"), "16m");
    let ledger = disk.0.join("ledger.db");
    let allot = |args: &[&str]| {
        std::process::Command::new(allot_cluster_tests::target_release().join("allot")).arg("--ledger").arg(&ledger).args(args).output().unwrap()
    };
    let sync = allot(&["sync", c.dir.join("budgets.toml").to_str().unwrap()]);
    assert!(sync.status.success(), "{}", text(&sync));
    let conf = c.dir.join("etc/allot.conf");
    let text_conf = std::fs::read_to_string(&conf).unwrap();
    let moved: String = text_conf
        .lines()
        .map(|l| if l.starts_with("LedgerPath=") { format!("LedgerPath={}\n", c.inner(&ledger).display()) } else { format!("{l}\n") })
        .collect();
    assert_ne!(moved, text_conf, "allot.conf has a LedgerPath line");
    std::fs::write(&conf, moved).unwrap();
    c.restart_slurmctld();
    let runs_of = |jobs: &[u32]| -> Option<HashMap<u32, Vec<RunRow>>> {
        let l = Ledger::open_read_only(&ledger).ok()?;
        Some(jobs.iter().map(|&j| (j, l.runs_of_job(j).unwrap_or_default())).collect())
    };
    let before: Vec<u32> = (0..2).map(|_| c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap()).collect();
    c.wait_for("runs reach the ledger on its own disk", secs(60), || {
        runs_of(&before).is_some_and(|r| r.values().all(|runs| runs.iter().any(|r| r.run_end.is_some())))
    });

    // Full. Jobs still start and end, and each is still checked at sbatch.
    let filler = disk.fill();
    let during: Vec<u32> = (0..6)
        .map(|i| c.sbatch(if i % 2 == 0 { "alice" } else { "bob" }, &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(1 + i % 3)]).unwrap())
        .collect();
    let refused = c.sbatch("alice", &["--comment=min_runtime=9h", &sleep_job(5)]);
    assert!(refused.unwrap_err().contains("exceeds the cluster cap of 8h"), "contracts are checked on a full disk");
    // A manager's edit is refused with what to do, and changes nothing.
    let version = || Ledger::open_read_only(&ledger).unwrap().current_budget_version().unwrap();
    let was = version();
    let edited = c.dir.join("budgets-edited.toml");
    std::fs::write(&edited, std::fs::read_to_string(c.dir.join("budgets.toml")).unwrap().replacen("share = 1", "share = 2", 1)).unwrap();
    let sync = allot(&["sync", edited.to_str().unwrap()]);
    assert!(!sync.status.success(), "a sync onto a full disk succeeded: {}", text(&sync));
    assert!(text(&sync).contains("is full") && text(&sync).contains("df -h"), "{}", text(&sync));
    assert_eq!(version(), was, "the refused sync changed the ledger");
    c.wait_for("jobs run and end on a full ledger disk", secs(60), || during.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    c.wait_for("the plugin says the ledger cannot be written", secs(30), || {
        c.ctld_log().lines().any(|l| l.contains("priority/allot") && l.contains("writing the ledger") && l.contains("kept in memory"))
    });
    let log = c.ctld_log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("priority/allot") && l.contains("error:") && l.contains("writing the ledger")).collect();
    assert!(lines.iter().any(|l| l.contains("full")), "the message says the disk is full:\n{}", lines.join("\n"));
    assert!(lines.len() <= 2, "logged once a minute at most, not per period:\n{}", lines.join("\n"));
    let missing = runs_of(&during).map_or(during.len(), |r| r.values().filter(|runs| !runs.iter().any(|r| r.run_end.is_some())).count());
    assert!(missing > 0, "nothing failed to be written: the disk was not full");
    let slurm: HashMap<u32, JobInfo> = c.jobs_epoch().into_iter().map(|j| (j.id, j)).collect();

    // slurmctld restarts while the disk is still full (an on-call engineer,
    // a crash, the backup taking over), after Slurm has forgotten the jobs
    // that ended (MinJobAge): the runs kept in memory are not in Slurm's job
    // list any more, only in StateSaveLocation/allot-unwritten.json.
    let slurm_conf = c.dir.join("etc/slurm.conf");
    let mut conf_text = std::fs::read_to_string(&slurm_conf).unwrap();
    conf_text.push_str("MinJobAge=2\n");
    std::fs::write(&slurm_conf, conf_text).unwrap();
    c.restart_slurmctld();
    c.wait_for("Slurm forgets the jobs that ended", secs(150), || {
        let known: BTreeSet<u32> = c.jobs().iter().map(|j| j.id).collect();
        during.iter().all(|j| !known.contains(j))
    });
    let kept = c.dir.join("state/allot-unwritten.json");
    assert!(kept.exists(), "no {} while runs wait to be written", kept.display());
    c.restart_slurmctld();
    c.wait_for("the restarted plugin says it took the kept runs back", secs(30), || {
        c.ctld_log().lines().any(|l| l.contains("priority/allot") && l.contains("run updates not yet in the ledger") && l.contains("allot-unwritten.json"))
    });

    // Space again: every run of the fault arrives, as Slurm ran it.
    std::fs::remove_file(filler).unwrap();
    c.wait_for("the kept runs reach the ledger", secs(60), || {
        runs_of(&during).is_some_and(|r| r.values().all(|runs| runs.iter().any(|r| r.run_end.is_some())))
    });
    c.wait_for("the kept runs' file goes once they are written", secs(30), || !kept.exists());
    let runs = runs_of(&during).unwrap();
    for &id in before.iter().chain(&during) {
        let r = if during.contains(&id) { &runs[&id] } else { &runs_of(&[id]).unwrap()[&id] };
        let s = &slurm[&id];
        assert_eq!(r.len(), 1, "job {id}: {r:?}");
        assert_eq!((r[0].run_start, r[0].run_end), (field_i64(s, "StartTime"), Some(field_i64(s, "EndTime"))), "job {id}: the ledger's run is Slurm's");
        assert_eq!(r[0].gpus as i64, gpus_of(s), "job {id}");
    }
    let check = allot(&["ledger", "check"]);
    assert!(check.status.success() && text(&check).contains("ok"), "{}", text(&check));
    // As on a failure: the disk goes (lazily: slurmctld still has the
    // ledger open), then the cluster.
    drop(disk);
    drop(c);
}

/// The teams' charged GPU-seconds in the last good copy slurmctld keeps in
/// its StateSaveLocation (None: no copy, or one without usage).
fn copy_usage(c: &TestCluster) -> Option<HashMap<String, i64>> {
    let text = std::fs::read_to_string(c.dir.join("state/allot-last-good.json")).ok()?;
    let copy: serde_json::Value = serde_json::from_str(&text).ok()?;
    let leaves = copy["usage"]["leaves"].as_array()?;
    Some(leaves.iter().map(|l| (l[0].as_str().unwrap().to_owned(), l[1].as_i64().unwrap())).collect())
}

#[test]
fn h9_a_slurmctld_started_without_a_readable_ledger_never_accepts_a_job_unchecked() {
    let c = TestCluster::start("failclosed", BUDGET, Options::default());
    let running = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(900)]).unwrap();
    c.wait_state(running, "RUNNING", secs(30));
    c.wait_for("the last good copy holds teama's usage", secs(30), || copy_usage(&c).is_some_and(|u| u.get("lab/teama").is_some_and(|&g| g >= 8 * 4)));

    // What a fail-open plugin let through, and what each check must say.
    let refused = |user: &str, args: &[&str], wanted: &str| {
        let e = c.sbatch(user, args).expect_err(&format!("{user}: {args:?} was accepted"));
        assert!(e.contains(wanted), "sbatch {args:?} by {user}: wanted {wanted:?}, got:\n{e}");
    };
    let checks_hold = |when: &str| {
        refused("alice", &["--account=nosuch", &sleep_job(5)], "account 'nosuch' is not in the allot budget tree");
        refused("alice", &["--account=teamb", &sleep_job(5)], "not a member of budget lab/teamb");
        refused("alice", &["--comment=min_runtime=9h", &sleep_job(5)], "exceeds the cluster cap of 8h");
        refused("alice", &["--comment=min_runtime=1h,min_runtime=0", &sleep_job(5)], "min_runtime");
        let ok =
            c.sbatch("carol", &["--hold", "--comment=sweep min_runtime=1m", &sleep_job(5)]).unwrap_or_else(|e| panic!("{when}: a good job was refused: {e}"));
        assert_eq!(c.job(ok).comment(), "sweep min_runtime=1m priority=normal", "{when}");
        assert_eq!(c.job(ok).get("Account"), "other", "{when}");
    };

    // 1. Garbage in place of the ledger, then a restart: the checks and the
    //    order come from the last good copy.
    let garbage: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(c.ledger_path(), &garbage).unwrap();
    let _ = std::fs::remove_file(c.dir.join("ledger.db-wal"));
    let _ = std::fs::remove_file(c.dir.join("ledger.db-shm"));
    c.restart_slurmctld();
    checks_hold("garbage ledger, last good copy");
    // teama used 8 GPUs for a while (the copy says so): teamb's waiting job
    // ranks above teama's, as it did before the restart.
    let a_waits = c.sbatch("alice", &["-N", "4", "--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    let b_waits = c.sbatch("bob", &["-N", "4", "--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    c.wait_for("the waiting jobs are ranked", secs(30), || c.job(b_waits).priority() > c.job(a_waits).priority());
    assert!(c.ctld_log().contains("deciding from the last good copy"), "the log says where the budget comes from");

    // 2. `allot ledger recover` leaves an empty ledger (no budget): after a
    //    restart, still the copy.
    let recover = c.allot(&["ledger", "recover"]);
    assert!(recover.status.success(), "{}", text(&recover));
    c.restart_slurmctld();
    checks_hold("recovered empty ledger, last good copy");

    // 3. No copy either (garbage again, so that the running slurmctld
    //    cannot write a new copy before it stops): every submission is
    //    refused, saying what to do.
    std::fs::write(c.ledger_path(), &garbage).unwrap();
    let _ = std::fs::remove_file(c.dir.join("ledger.db-wal"));
    let _ = std::fs::remove_file(c.dir.join("ledger.db-shm"));
    std::thread::sleep(secs(3));
    std::fs::remove_file(c.dir.join("state/allot-last-good.json")).unwrap();
    c.restart_slurmctld();
    assert!(!c.dir.join("state/allot-last-good.json").exists(), "a copy was written from a garbage ledger");
    for user in ["carol", "alice", "root"] {
        refused(user, &["--comment=min_runtime=1m", &sleep_job(5)], "cannot be checked against the budget");
    }
    refused("carol", &["--account=nosuch", &sleep_job(5)], "allot doctor");
    let log = c.ctld_log();
    assert!(!log.contains("unchecked"), "a job was accepted unchecked:\n{log}");

    // 4. The admin recovers the ledger and syncs the budget: submissions
    //    are accepted again.
    let recover = c.allot(&["ledger", "recover"]);
    assert!(recover.status.success(), "{}", text(&recover));
    let budget = c.dir.join("budgets.toml");
    let out = c.allot(&["sync", budget.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    c.wait_for("submissions are accepted once a budget is synced", secs(20), || c.sbatch("carol", &["--hold", &sleep_job(5)]).is_ok());
    checks_hold("after the sync");
}

/// Every number of a report whose key names a wait, with its path.
fn waits_in(v: &serde_json::Value, path: &str, out: &mut Vec<(String, f64)>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                match x.as_f64() {
                    Some(n) if k.contains("wait") => out.push((p, n)),
                    _ => waits_in(x, &p, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| waits_in(x, &format!("{path}[{i}]"), out)),
        _ => {}
    }
}

#[test]
fn h10_waits_count_from_the_first_submission_across_requeues() {
    let c = TestCluster::start("firstsubmit", &with_unallocated_grace(BUDGET), Options { recompute_period: 1, grace: 3, ..Options::default() });
    let victim = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", "-w", "n4", &sleep_job(600)]).unwrap();
    let submit_time = |id: u32| field_i64(&c.jobs_epoch().into_iter().find(|j| j.id == id).expect("slurmctld knows the job"), "SubmitTime");
    let submitted = submit_time(victim);
    c.wait_state(victim, "RUNNING", secs(30));
    std::thread::sleep(secs(3));
    let preemptor = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=5m", "-w", "n4", &sleep_job(600)]).unwrap();
    c.wait_state(preemptor, "RUNNING", secs(60));
    c.wait_for("the victim is requeued", secs(30), || {
        let j = c.job(victim);
        j.restarts() >= 1 && j.state() == "PENDING"
    });
    let moved = submit_time(victim);
    eprintln!("Slurm's SubmitTime of the requeued job: {submitted} -> {moved}");
    // A restart records every contract again, with the submit time Slurm has now.
    c.restart_slurmctld();
    c.slurm(None, "scancel", &[&preemptor.to_string()]);
    c.wait_state(victim, "RUNNING", secs(60));
    c.wait_for("the victim's contract is in the ledger", secs(20), || c.ledger().contract(victim).ok().flatten().is_some());
    std::thread::sleep(secs(3));
    let contract = c.ledger().contract(victim).unwrap().unwrap();
    assert_eq!(contract.submit_time, submitted, "the ledger keeps the first submission (Slurm now says {moved})");
    let out = c.allot(&["report", "--json", "-"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out)));
    let mut waits = Vec::new();
    waits_in(&report, "report", &mut waits);
    assert!(!waits.is_empty(), "the report has waits: {report}");
    let negative: Vec<_> = waits.iter().filter(|(_, w)| *w < 0.0).collect();
    assert!(negative.is_empty(), "negative waits: {negative:?}");
}

#[test]
fn h11_a_job_pays_for_the_gpus_its_cpus_or_memory_keep_from_others() {
    let c = TestCluster::start("blocked", BUDGET, Options::default());
    // The test nodes: 8 GPUs, 32 CPUs, 64,000 MB each (conf/cluster/slurm.conf.in).
    let one_gpu_all_cpus = c.sbatch("alice", &["--gres=gpu:1", "-c", "32", "-w", "n1", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let no_gpu_all_cpus = c.sbatch("alice", &["-c", "32", "-w", "n2", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let one_gpu_all_memory = c.sbatch("alice", &["--gres=gpu:1", "--mem=64000", "-w", "n3", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let plain = c.sbatch("alice", &["--gres=gpu:1", "-w", "n4", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let blocking = [one_gpu_all_cpus, no_gpu_all_cpus, one_gpu_all_memory];
    c.wait_for("all four run", secs(30), || blocking.iter().chain([&plain]).all(|&j| c.job(j).state() == "RUNNING"));
    // What the trick does: the node's seven other GPUs are out of reach.
    let kept_out = c.sbatch("bob", &["--gres=gpu:1", "-w", "n1", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    std::thread::sleep(secs(3));
    assert_eq!(c.job(kept_out).state(), "PENDING", "a 1-GPU job fits beside a job that holds all of n1's CPUs?");
    std::thread::sleep(secs(3));
    c.slurm(
        None,
        "scancel",
        &[&one_gpu_all_cpus.to_string(), &no_gpu_all_cpus.to_string(), &one_gpu_all_memory.to_string(), &plain.to_string(), &kept_out.to_string()],
    );
    let runs = wait_for_runs(&c, &[one_gpu_all_cpus, no_gpu_all_cpus, one_gpu_all_memory, plain], 1);
    for id in blocking {
        assert_eq!(runs[&id][0].gpus, 8, "job {id} kept a whole node from others and must pay for it: {:?}", runs[&id]);
    }
    assert_eq!(runs[&plain][0].gpus, 1, "an ordinary 1-GPU job pays for one GPU: {:?}", runs[&plain]);
}

#[test]
fn h12_budget_edits_move_usage_never_drop_it() {
    let c = TestCluster::start("edits", BUDGET, Options { recompute_period: 1, ..Options::default() });
    let budget = |args: &[&str]| {
        let mut all = vec!["budget"];
        all.extend_from_slice(args);
        let out = c.allot(&all);
        assert!(out.status.success(), "allot {all:?}: {}", text(&out));
        // The plugins follow the ledger within a couple of seconds.
        std::thread::sleep(secs(4));
    };
    // 3. A leaf renames its account while its team's job is queued, the job
    //    runs, the name goes back: the run is charged to the leaf all along.
    let held = c.sbatch("alice", &["--hold", "--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(4)]).unwrap();
    budget(&["set", "lab/teama", "accounts=teama2"]);
    let fresh = c.sbatch("alice", &["--account=teama", &sleep_job(5)]);
    assert!(fresh.is_err(), "a new job may not use the account the leaf gave up");
    let out = c.scontrol(&["release", &held.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let runs = wait_for_runs(&c, &[held], 1);
    budget(&["set", "lab/teama", "accounts=teama"]);
    assert_eq!(runs[&held][0].leaf.as_deref(), Some("lab/teama"), "the run of a job queued under the old account: {:?}", runs[&held]);
    assert_eq!(runs[&held][0].gpus, 8);

    // 4. A leaf removed and added again under a new name with its account
    //    keeps its usage (and so its rank among its siblings).
    let b = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(5)]).unwrap();
    wait_for_runs(&c, &[b], 1);
    let usage = |leaf: &str| c.ledger().usage_snapshot().unwrap().and_then(|s| s.leaves.iter().find(|u| u.leaf == leaf).map(|u| u.charged));
    c.wait_for("teamb's usage is recorded", secs(20), || usage("lab/teamb").is_some_and(|g| g >= 8 * 5));
    let before = usage("lab/teamb").unwrap();
    budget(&["remove", "lab/teamb"]);
    budget(&["add", "lab/teamb2", "share=1", "accounts=teamb", "members=bob,dave"]);
    wake_recompute(&c);
    c.wait_for("the new leaf carries the old one's usage", secs(20), || usage("lab/teamb2").is_some_and(|g| g >= before));
    let report = c.allot(&["report", "--json", "-"]);
    assert!(report.status.success(), "{}", text(&report));
    let text_report = c.allot(&["report"]);
    assert!(!text(&text_report).contains("outside the current budget tree"), "usage fell outside the tree:\n{}", text(&text_report));

    // 5. A leaf removed with its account: its usage stays in its parent's
    //    (lab's), so lab does not rise over its sibling `other`.
    let moved = usage("lab/teamb2").unwrap();
    budget(&["remove", "lab/teamb2"]);
    let history = c.allot(&["history", "-n", "1"]);
    assert!(
        text(&history).contains("= account teamb: no leaf has it now and lab/teamb2 is gone: its usage in the window counts in lab's"),
        "{}",
        text(&history)
    );
    wake_recompute(&c);
    c.wait_for("lab keeps the removed leaf's usage", secs(20), || usage("lab").is_some_and(|g| g >= moved));
}
