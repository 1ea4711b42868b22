//! A ledger on a database server (issue 27): a real Slurm with allot's
//! plugins whose ledger is a private MariaDB (`Options::server_ledger`,
//! LedgerUrl in allot.conf), and that server's faults.
//!
//! Needs root, the packages of `scripts/install-deps.sh --accounting`
//! (MariaDB) and the release build: the README's test command does all of it.

use std::collections::BTreeMap;

use allot_cluster_tests::{secs, sleep_job, text, JobInfo, Options, TestCluster, BUDGET};
use allot_ledger::Location;

fn field_i64(job: &JobInfo, key: &str) -> i64 {
    job.get(key).parse().unwrap_or_else(|_| panic!("job {} {key}={:?} is not a number (SLURM_TIME_FORMAT=%s?)", job.id, job.get(key)))
}

/// GPUs a job asked for, from Slurm's record (`TresPerNode=gres:gpu:N`).
fn gpus_of(job: &JobInfo) -> i64 {
    job.get("TresPerNode").rsplit(':').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Wakes the priority plugin's thread now (see hostile.rs).
fn wake_recompute(c: &TestCluster) {
    let out = c.scontrol(&["setdebugflags", "-Priority"]);
    assert!(out.status.success(), "scontrol setdebugflags: {}", text(&out));
}

/// Slurm's runs of `jobs` (ALLOT_RUN_LOG): (job, start) -> (end, GPUs).
fn slurm_runs(c: &TestCluster, jobs: &[u32]) -> BTreeMap<(u32, i64), (i64, i64)> {
    c.run_ends().iter().filter(|j| jobs.contains(&j.id)).map(|j| ((j.id, field_i64(j, "StartTime")), (field_i64(j, "EndTime"), gpus_of(j)))).collect()
}

/// The ledger's closed runs of `jobs`: (job, start) -> (end, GPUs).
fn ledger_runs(c: &TestCluster, jobs: &[u32]) -> BTreeMap<(u32, i64), (i64, i64)> {
    let Ok(l) = c.read_ledger() else { return BTreeMap::new() };
    jobs.iter()
        .flat_map(|&j| l.runs_of_job(j).unwrap_or_default())
        .filter_map(|r| Some(((r.job_id, r.run_start), (r.run_end?, r.gpus as i64))))
        .collect()
}

fn gpu_seconds(runs: &BTreeMap<(u32, i64), (i64, i64)>) -> i64 {
    runs.iter().map(|((_, start), (end, gpus))| (end - start) * gpus).sum()
}

#[test]
fn s1_a_server_ledger_charges_every_run_and_its_server_dying_mid_run_loses_none() {
    let options = Options { recompute_period: 2, grace: 3, run_log: true, server_ledger: true, ..Options::default() };
    let c = TestCluster::start("serverledger", BUDGET, options);
    let conf = std::fs::read_to_string(c.dir.join("etc/allot.conf")).unwrap();
    assert!(conf.lines().any(|l| l.starts_with("LedgerUrl=mysql://")) && !conf.lines().any(|l| l.starts_with("LedgerPath=")), "{conf}");
    assert!(c.ledger_location().is_server());

    // Jobs before, through and after the server's death.
    let mut jobs = Vec::new();
    for (i, user) in ["alice", "bob", "dave"].iter().enumerate() {
        jobs.push(c.sbatch(user, &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(3 + i as u32)]).unwrap());
    }
    // One long job runs through the whole outage.
    jobs.push(c.sbatch("carol", &["--gres=gpu:4", "--comment=min_runtime=10s", &sleep_job(35)]).unwrap());
    c.wait_for("the first runs in the server ledger", secs(60), || {
        wake_recompute(&c);
        ledger_runs(&c, &jobs[..3]).len() == 3
    });
    let before = c.read_ledger().unwrap().usage_snapshot().unwrap().expect("a usage snapshot on the server").computed_at;

    // The server dies (SIGKILL) with runs going on.
    c.with_server(|s| s.kill());
    // While it is down, jobs are still checked (the budget held in memory)
    // and scheduled, and their runs start and end.
    let refused = c.sbatch("mallory", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]);
    assert!(refused.is_err(), "an account outside the budget is refused while the server is down: {refused:?}");
    let down_jobs: Vec<u32> = (0..4).map(|i| c.sbatch(["alice", "bob"][i % 2], &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2 + i as u32)]).unwrap()).collect();
    jobs.extend(&down_jobs);
    c.wait_for("the jobs submitted while the server is down end", secs(60), || down_jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    let log = c.ctld_log();
    assert!(log.contains("writing the ledger") && log.contains("kept in memory"), "slurmctld logs the server's fault and that runs are kept:\n{log}");
    assert!(!log.contains("w-secret"), "the password never reaches the log");

    // The server comes back: everything held in memory is written.
    c.with_server(|s| s.restart());
    c.wait_for("every job ends", secs(90), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    let mut slurm = BTreeMap::new();
    c.wait_for("Slurm's record of every run end", secs(30), || {
        slurm = slurm_runs(&c, &jobs);
        slurm.len() == jobs.len()
    });
    let mut ledger = BTreeMap::new();
    c.wait_for("every run in the server ledger", secs(60), || {
        wake_recompute(&c);
        ledger = ledger_runs(&c, &jobs);
        ledger.len() >= slurm.len()
    });
    eprintln!("server ledger: Slurm {} runs, {} GPU-s; ledger {} runs, {} GPU-s", slurm.len(), gpu_seconds(&slurm), ledger.len(), gpu_seconds(&ledger));
    assert_eq!(ledger, slurm, "every run, its start, end and GPUs, as Slurm recorded them");
    let after = c.read_ledger().unwrap().usage_snapshot().unwrap().unwrap().computed_at;
    assert!(after > before, "the usage snapshot is written again after the server's return");
    assert!(c.ctld_log().contains("writing the ledger: recovered"), "slurmctld logs the recovery");

    // The CLI reads the same server ledger.
    let usage = c.allot(&["usage"]);
    assert!(usage.status.success(), "allot usage on the server ledger: {}", text(&usage));
    let check = c.allot(&["ledger", "check"]);
    assert!(check.status.success() && text(&check).contains("server ledger"), "{}", text(&check));
    // allot doctor reads allot.conf's LedgerUrl and checks the server.
    let conf = c.slurm_conf();
    let doctor = c.allot_in_release(&["doctor", "--slurm-conf", conf.to_str().unwrap()]);
    let said = text(&doctor);
    assert!(doctor.status.success(), "allot doctor on a server ledger:\n{said}");
    assert!(said.contains("LedgerUrl=mysql://") && said.contains("the server answers; schema") && said.contains("readable by its owner only"), "{said}");
    // A URL with a password in it is refused, and not echoed.
    let bad = std::process::Command::new(allot_cluster_tests::target_release().join("allot"))
        .args(["--ledger", "mysql://allot:hunter2@localhost/allot", "usage"])
        .output()
        .unwrap();
    assert!(!bad.status.success() && text(&bad).contains("carries a password") && !text(&bad).contains("hunter2"), "{}", text(&bad));
    let _ = Location::parse(&c.ledger_url(false)).unwrap();
}

#[test]
fn s2_a_server_that_stops_answering_writes_never_slows_submission_or_scheduling() {
    let options = Options { recompute_period: 2, grace: 3, server_ledger: true, ..Options::default() };
    let c = TestCluster::start("serverslow", BUDGET, options);
    let first = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap();
    c.wait_for("a first run in the server ledger", secs(60), || {
        wake_recompute(&c);
        c.read_ledger().is_ok_and(|l| l.runs_of_job(first).is_ok_and(|r| r.iter().any(|r| r.run_end.is_some())))
    });
    // The server takes every write and answers none for 20 s (a global
    // read lock held by another session): the priority plugin's writes
    // hang on its own thread, up to the client's 30-s timeout.
    let mut lock = c.with_server(|s| s.spawn_sql("FLUSH TABLES WITH READ LOCK; SELECT SLEEP(20); UNLOCK TABLES;"));
    std::thread::sleep(secs(2));
    let held_from = std::time::Instant::now();
    let mut jobs = Vec::new();
    let mut slowest = std::time::Duration::ZERO;
    for i in 0..8u32 {
        let t = std::time::Instant::now();
        jobs.push(c.sbatch(["alice", "bob", "carol", "dave"][i as usize % 4], &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap());
        slowest = slowest.max(t.elapsed());
        wake_recompute(&c);
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let bad = c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=9h", &sleep_job(1)]);
    assert!(bad.is_err(), "submissions are still checked: {bad:?}");
    c.wait_for("the jobs submitted under the lock start and end", secs(30), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    let elapsed = held_from.elapsed();
    assert!(ledger_runs(&c, &jobs).is_empty(), "the server held every write meanwhile (its readers still answer)");
    eprintln!("slow server: 8 submissions under the lock, the slowest took {slowest:?}; all 8 ran and ended {elapsed:?} after the lock began");
    assert!(slowest < secs(2), "a submission waited {slowest:?} for the ledger's server");
    assert!(elapsed < secs(18), "the jobs ran while the server held every write ({elapsed:?})");
    assert!(lock.wait().unwrap().success());
    // Once it answers, every run is written.
    jobs.push(first);
    c.wait_for("every run in the server ledger", secs(60), || {
        wake_recompute(&c);
        ledger_runs(&c, &jobs).len() == jobs.len()
    });
}
