//! allot inside a real Slurm (each supported release: ALLOT_SLURM_RELEASE): munged, slurmctld and four slurmd with
//! eight fake GPUs each, the four plugins loaded, real sbatch jobs. Each
//! test asserts on what sbatch/scontrol say or on the ledger.
//!
//! Needs root and the packages of `scripts/install-deps.sh`, and the release
//! build (`cargo build --release --workspace`): the README's test command
//! does all of it.

use std::collections::HashMap;

use allot_cluster_tests::{now, secs, sleep_job, text, with_unallocated_grace, Options, Release, TestCluster, BUDGET};
use allot_ledger::{Ledger, Period, RunRow, RunUpdate};

/// Plants in the cluster's ledger a finished run of `gpus` GPUs from
/// `start` to `end` seconds ago, charged to `team` (lab/team, account team)
/// by `user`: usage from before the test, as slurmctld's plugins recorded it.
fn plant_run(cluster: &TestCluster, job_id: u32, team: &str, user: &str, gpus: u32, start: i64, end: i64) {
    let mut l = Ledger::open(cluster.ledger_path()).unwrap();
    let t = now();
    let run = RunRow {
        job_id,
        run_start: t - start,
        run_end: Some(t - end),
        leaf: Some(format!("lab/{team}")),
        account: Some(team.into()),
        user: Some(user.into()),
        gpus,
        allocated: true,
        end_reason: Some("finished".into()),
    };
    l.record_period(&Period { runs: vec![RunUpdate::Open(run)], ..Default::default() }).unwrap();
}

/// Team A used 32 GPUs for the last half hour: twice its allocation (a
/// quarter of 32 GPUs over the one-hour window).
fn plant_history(cluster: &TestCluster) {
    for i in 0..4 {
        plant_run(cluster, 900_000 + i, "teama", "alice", 8, 1800, 60);
    }
}

/// A cluster whose ledger holds that history; slurmctld is restarted so
/// that the priority plugin reads it, as after any restart.
fn start_with_history(name: &str, options: Options) -> TestCluster {
    let c = TestCluster::start(name, BUDGET, options);
    plant_history(&c);
    c.restart_slurmctld();
    c
}

/// The harness itself: a daemon that crashes fails its test, and the failure
/// shows the crashed program's stack (all CI keeps is the output).
#[test]
fn t0_a_crashed_daemon_fails_the_test_and_shows_its_stack() {
    let c = TestCluster::start("crashcheck", BUDGET, Options::default());
    let pid = std::fs::read_to_string(c.dir.join("pids/slurmd-n4.pid")).unwrap();
    let out = std::process::Command::new("kill").args(["-SEGV", pid.trim()]).output().unwrap();
    assert!(out.status.success(), "kill: {}", text(&out));
    c.wait_for("slurmd n4 dumps core", secs(20), || {
        std::fs::read_dir(c.dir.join("run")).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("core"))
    });
    let dir = c.dir.clone();
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(c))).expect_err("dropping a cluster whose daemon crashed fails the test");
    let message = failure.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("crashed"), "{message}");
    assert!(message.contains("slurmd"), "names the program: {message}");
    assert!(message.contains("SIGSEGV") && message.contains("#0 "), "shows the signal and the stack: {message}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn t1_bad_contracts_and_non_members_are_refused_at_submission() {
    let c = TestCluster::start("refusals", BUDGET, Options::default());
    let refused = |user: &str, args: &[&str], wanted: &str| {
        let e = c.sbatch(user, args).expect_err(&format!("{args:?} was accepted"));
        assert!(e.contains(wanted), "sbatch {args:?}: wanted {wanted:?}, got:\n{e}");
    };
    refused("alice", &["--gres=gpu:1", "--comment=min_runtime=9h", &sleep_job(5)], "allot: min_runtime=9h exceeds the cluster cap of 8h");
    refused("alice", &["--comment=min_runtime=2", &sleep_job(5)], "min_runtime=2 is not valid: give a unit");
    refused("alice", &["--comment=priority=urgent", &sleep_job(5)], "priority=urgent is not valid: priority is low, normal or high");
    refused("alice", &["--comment=min_runtim=2h", &sleep_job(5)], "did you mean min_runtime");
    refused("alice", &["--account=teamb", &sleep_job(5)], "user 'alice' is not a member of budget lab/teamb (account 'teamb'); budgets you may use: teama");
    refused("alice", &["--account=nosuch", &sleep_job(5)], "account 'nosuch' is not in the allot budget tree; budgets you may use: teama");
    refused("erin", &[&sleep_job(5)], "user 'erin' has no default budget");

    // srun and salloc go through job_submit too.
    let srun = c.slurm(Some("alice"), "srun", &["--comment=min_runtime=9h", "true"]);
    assert!(!srun.status.success() && text(&srun).contains("min_runtime=9h exceeds the cluster cap of 8h"), "{}", text(&srun));
    let salloc = c.slurm(Some("bob"), "salloc", &["--account=teama", "true"]);
    assert!(!salloc.status.success() && text(&salloc).contains("not a member of budget lab/teama"), "{}", text(&salloc));

    // Accepted jobs carry the canonical contract and their leaf's account.
    let id = c.sbatch("dave", &["--comment=sweep 3 min_runtime=90m priority=HIGH", "--hold", &sleep_job(5)]).unwrap();
    let job = c.job(id);
    assert_eq!(job.comment(), "sweep 3 min_runtime=1h30m priority=high");
    assert_eq!(job.get("Account"), "teama", "dave's default leaf");
    let id2 = c.sbatch("bob", &["--hold", &sleep_job(5)]).unwrap();
    assert_eq!(c.job(id2).comment(), "min_runtime=30s priority=normal", "the default minimum runtime is written out");

    // scontrol update is checked the same way.
    let up = c.scontrol(&["update", &format!("jobid={id}"), "comment=min_runtime=12h"]);
    assert!(!up.status.success(), "raising min_runtime past the cap was accepted: {}", text(&up));
    // 24.11 hands job_modify's message to the user (22.05 has no channel for it).
    if Release::current().name != "22.05" {
        assert!(text(&up).contains("allot: min_runtime=12h exceeds the cluster cap of 8h"), "{}", text(&up));
    }
    assert_eq!(c.job(id).comment(), "sweep 3 min_runtime=1h30m priority=high");
    let up = c.scontrol(&["update", &format!("jobid={id2}"), "account=teama"]);
    assert!(!up.status.success(), "bob moved a job to a budget he does not belong to: {}", text(&up));
    // dave belongs to teamb too, so allot lets the update through. (Without
    // slurmdbd Slurm has no associations and keeps the account as it was;
    // that part is Slurm's.)
    let up = c.scontrol(&["update", &format!("jobid={id}"), "account=teamb"]);
    assert!(up.status.success(), "dave belongs to teamb too: {}", text(&up));
}

#[test]
fn t2_the_under_served_team_gets_higher_priority_and_starts_first() {
    let c = start_with_history("fairshare", Options::default());
    // Fill the cluster with protected jobs of the other program.
    let blockers: Vec<u32> = (0..4).map(|_| c.sbatch("carol", &["--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("the blockers run", secs(30), || blockers.iter().all(|&b| c.job(b).state() == "RUNNING"));
    // Team A (over its share) submits first, team B (unused) after.
    let a: Vec<u32> = (0..3).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap()).collect();
    std::thread::sleep(secs(1));
    let b: Vec<u32> = (0..3).map(|_| c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap()).collect();
    std::thread::sleep(secs(3));
    let lowest_b = b.iter().map(|&j| c.job(j).priority()).min().unwrap();
    let highest_a = a.iter().map(|&j| c.job(j).priority()).max().unwrap();
    assert!(lowest_b > highest_a, "team B's priorities must all beat team A's: B min {lowest_b}, A max {highest_a}");
    // Within a team, first come first served, and no ties.
    let pa: Vec<u32> = a.iter().map(|&j| c.job(j).priority()).collect();
    assert!(pa.windows(2).all(|w| w[0] > w[1]), "{pa:?}");
    // sprio shows the same priorities, and each budget's fair-share factor
    // (1000 x 2^-(usage/share)): team A at twice its share, team B unused.
    let out = c.slurm(None, "sprio", &["-h", "-o", "%i %Y %F"]);
    let rows: Vec<(u32, u32, u32)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<u32> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (f.len() == 3).then(|| (f[0], f[1], f[2]))
        })
        .collect();
    assert_eq!(rows.len(), 6, "sprio: {}", text(&out));
    for (id, prio, fairshare) in rows {
        assert_eq!(prio, c.job(id).priority(), "sprio's priority of job {id}");
        if a.contains(&id) {
            assert!((200..=300).contains(&fairshare), "team A's factor: {fairshare}");
        } else {
            assert_eq!(fairshare, 1000, "team B's factor");
        }
    }
    // Free the cluster: B's three jobs and one of A's start.
    for blocker in &blockers {
        c.slurm(None, "scancel", &[&blocker.to_string()]);
    }
    c.wait_for("four jobs run", secs(60), || a.iter().chain(&b).filter(|&&j| c.job(j).state() == "RUNNING").count() == 4);
    for &j in &b {
        assert_eq!(c.job(j).state(), "RUNNING", "team B's job {j} should have started first");
    }
    assert_eq!(c.job(a[0]).state(), "RUNNING", "then team A's oldest");
}

#[test]
fn t3_an_unallocated_job_is_requeued_for_an_allocated_one() {
    let c = TestCluster::start("unallocated", BUDGET, Options::default());
    let free: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("the unallocated jobs run", secs(30), || free.iter().all(|&j| c.job(j).state() == "RUNNING"));
    let t0 = std::time::Instant::now();
    let allocated = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=5m", &sleep_job(600)]).unwrap();
    c.wait_state(allocated, "RUNNING", secs(60));
    eprintln!("allocated job started {:?} after submission", t0.elapsed());
    let requeued: Vec<u32> = free.iter().copied().filter(|&j| c.job(j).restarts() == 1).collect();
    assert_eq!(requeued.len(), 1, "exactly one unallocated job gives way");
    assert_eq!(c.job(requeued[0]).state(), "PENDING");
    assert_eq!(c.job(requeued[0]).comment(), "min_runtime=0 priority=normal", "the contract survives the requeue");
    // An unallocated job never preempts: a new one just waits.
    let waiting = c.sbatch("carol", &["--gres=gpu:8", "--comment=min_runtime=0", &sleep_job(600)]).unwrap();
    std::thread::sleep(secs(8));
    assert_eq!(c.job(waiting).state(), "PENDING");
    assert!(free.iter().all(|&j| c.job(j).restarts() <= 1));
    assert_eq!(c.job(allocated).state(), "RUNNING");
}

#[test]
fn t4_protected_until_its_minimum_runtime_then_preempted_when_it_ranks_lower() {
    let c = start_with_history("protection", Options::default());
    // Team A (twice over its share) holds every GPU, protected for 40 s.
    let a: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=40s", "--requeue", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("team A runs", secs(30), || a.iter().all(|&j| c.job(j).state() == "RUNNING"));
    let started = now();
    // Team B (unused) wants 8 GPUs.
    let b = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=10s", &sleep_job(600)]).unwrap();
    // Inside the minimum runtime nothing moves.
    while now() < started + 30 {
        assert_eq!(c.job(b).state(), "PENDING", "B started inside A's minimum runtime");
        assert!(a.iter().all(|&j| c.job(j).restarts() == 0), "an A job was preempted inside its minimum runtime");
        std::thread::sleep(secs(2));
    }
    // After it, B's under-served allocation takes one A job's GPUs.
    c.wait_state(b, "RUNNING", secs(90));
    assert!(now() >= started + 40, "B started before A's minimum runtime was over");
    assert_eq!(a.iter().filter(|&&j| c.job(j).restarts() == 1).count(), 1, "exactly one A job was preempted");
    // The other way round: B's job is past its own minimum runtime, yet
    // team A (still over-served) may not take it back.
    let a2 = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    std::thread::sleep(secs(25));
    assert_eq!(c.job(b).state(), "RUNNING", "an over-served allocation preempted an under-served one");
    assert_eq!(c.job(b).restarts(), 0);
    assert_eq!(c.job(a2).state(), "PENDING");
}

#[test]
fn t5_a_preempted_resumable_job_runs_again_even_if_it_exits_on_sigterm() {
    let c = TestCluster::start("resume", &with_unallocated_grace(BUDGET), Options { recompute_period: 1, grace: 6, ..Options::default() });
    // Three plain unallocated jobs, and one that checkpoints on SIGTERM and exits 0.
    let plain: Vec<u32> =
        (0..3).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", "-x", "n4", &sleep_job(600)]).unwrap()).collect();
    let script = "#!/bin/bash\ntrap 'echo checkpoint; exit 0' TERM\nsleep 600 &\nwait\n";
    let script_path = c.job_dir().join("ckpt.sh");
    std::fs::write(&script_path, script).unwrap();
    let ckpt = c
        .sbatch(
            "alice",
            &["--gres=gpu:8", "--comment=ckpt min_runtime=0", "--requeue", "-w", "n4", "--signal=B:TERM@6", c.inner(&script_path).to_str().unwrap()],
        )
        .unwrap();
    c.wait_for("all run", secs(30), || plain.iter().chain([&ckpt]).all(|&j| c.job(j).state() == "RUNNING"));
    // An allocated job that can only run on n4 takes the checkpointing job's GPUs.
    let preemptor = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=5m", "-w", "n4", &sleep_job(600)]).unwrap();
    c.wait_state(preemptor, "RUNNING", secs(90));
    // The checkpointing job exited 0 during its grace time; it is requeued
    // anyway: by allot on 22.05, by slurmctld itself on 24.11 (which now
    // requeues a requeueable job that ends during its preemption grace time).
    c.wait_for("the checkpointing job is requeued", secs(30), || {
        let j = c.job(ckpt);
        j.restarts() == 1 && j.state() == "PENDING"
    });
    c.wait_for("the preemption is in the ledger", secs(10), || c.ledger().events_of_job(ckpt).unwrap().iter().any(|e| e.kind == "preempted"));
    let events = c.ledger().events_of_job(ckpt).unwrap();
    if Release::current().name == "22.05" {
        assert!(events.iter().any(|e| e.kind == "requeued_after_grace"), "{events:?}");
    }
    // Free n4: it runs again, contract intact.
    c.slurm(None, "scancel", &[&preemptor.to_string()]);
    c.wait_state(ckpt, "RUNNING", secs(60));
    let j = c.job(ckpt);
    assert_eq!(j.restarts(), 1);
    assert_eq!(j.comment(), "ckpt min_runtime=0 priority=normal");
}

#[test]
fn t6_the_ledger_charges_the_right_leaf_and_never_unallocated_time() {
    let c = TestCluster::start("charges", BUDGET, Options::default());
    let charged = c.sbatch("alice", &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(8)]).unwrap();
    let free = c.sbatch("bob", &["--gres=gpu:4", "--comment=min_runtime=0", &sleep_job(8)]).unwrap();
    let dave = c.sbatch("dave", &["--gres=gpu:1", "--account=teamb", "--comment=min_runtime=5s", &sleep_job(8)]).unwrap();
    for id in [charged, free, dave] {
        c.wait_for(&format!("job {id} completes"), secs(60), || c.job(id).state() == "COMPLETED");
    }
    std::thread::sleep(secs(4)); // a recompute records the ends
    let l = c.ledger();
    let runs = |id| l.runs_of_job(id).unwrap();
    let a = &runs(charged)[0];
    assert_eq!((a.leaf.as_deref(), a.gpus, a.allocated), (Some("lab/teama"), 2, true));
    let seconds = a.run_end.unwrap() - a.run_start;
    assert!((7..=11).contains(&seconds), "ran about 8 s, recorded {seconds}");
    let f = &runs(free)[0];
    assert_eq!((f.leaf.as_deref(), f.gpus, f.allocated), (Some("lab/teamb"), 4, false));
    assert_eq!(runs(dave)[0].leaf.as_deref(), Some("lab/teamb"), "dave charged the account he named");
    // GPU-seconds per leaf: unallocated time is never charged.
    let by_leaf: std::collections::HashMap<String, i64> = l.charged_by_leaf(now() - 3600, now()).unwrap().into_iter().collect();
    let teama = by_leaf["lab/teama"];
    assert!((14..=22).contains(&teama), "teama: 2 GPUs x ~8 s, got {teama}");
    let teamb = by_leaf["lab/teamb"];
    assert!((7..=11).contains(&teamb), "teamb: only dave's 1 GPU x ~8 s, got {teamb}");
    // The usage snapshot the plugins rank by agrees.
    let snap = l.usage_snapshot().unwrap().unwrap();
    let leaf = |p: &str| snap.leaves.iter().find(|u| u.leaf == p).unwrap().clone();
    assert_eq!(leaf("lab/teama").charged, teama);
    assert!(leaf("lab/teamb").unallocated >= 28, "bob's 4 GPUs x ~8 s recorded as unallocated");
    assert_eq!(leaf("other").charged, 0);
    assert_eq!(snap.capacity_gpus, 32, "capacity counted from Slurm's nodes");
    // And the contracts are in the ledger.
    let contract = l.contract(charged).unwrap().unwrap();
    assert_eq!((contract.min_runtime, contract.leaf.as_deref()), (5, Some("lab/teama")));
}

#[test]
fn t7_a_draining_node_empties_as_its_jobs_reach_their_minimum_runtime() {
    let c = TestCluster::start("drain", BUDGET, Options::default());
    let short = c.sbatch("alice", &["--gres=gpu:4", "-w", "n1", "--comment=min_runtime=15s", "--requeue", &sleep_job(600)]).unwrap();
    let long = c.sbatch("bob", &["--gres=gpu:4", "-w", "n1", "--comment=min_runtime=35s", "--requeue", &sleep_job(600)]).unwrap();
    c.wait_for("both run on n1", secs(30), || c.job(short).state() == "RUNNING" && c.job(long).state() == "RUNNING");
    let started = now();
    let out = c.scontrol(&["update", "nodename=n1", "state=drain", "reason=repair"]);
    assert!(out.status.success(), "{}", text(&out));
    // Before 15 s: both stay.
    std::thread::sleep(secs(8));
    assert_eq!((c.job(short).restarts(), c.job(long).restarts()), (0, 0), "requeued inside the minimum runtime");
    c.wait_for("the 15 s job is requeued", secs(30), || c.job(short).restarts() == 1);
    assert!(now() >= started + 14, "requeued too early");
    assert_eq!(c.job(long).restarts(), 0, "the 35 s job must stay until its minimum runtime");
    c.wait_for("the 35 s job is requeued", secs(45), || c.job(long).restarts() == 1);
    assert!(now() >= started + 34, "requeued too early");
    c.wait_for("n1 is drained and empty", secs(30), || {
        let out = c.slurm(None, "sinfo", &["-h", "-n", "n1", "-o", "%T"]);
        String::from_utf8_lossy(&out.stdout).trim() == "drained"
    });
    let events = c.ledger().events_of_job(short).unwrap();
    assert!(events.iter().any(|e| e.kind == "drained"), "{events:?}");
}

#[test]
fn t8_a_slurmctld_restart_keeps_usage_and_contracts() {
    let c = TestCluster::start("restart", BUDGET, Options::default());
    let running = c.sbatch("alice", &["--gres=gpu:8", "--comment=keep me min_runtime=10m", &sleep_job(600)]).unwrap();
    let pending = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=2m priority=low", "--begin=now+1hour", &sleep_job(600)]).unwrap();
    c.wait_state(running, "RUNNING", secs(30));
    std::thread::sleep(secs(6));
    let before = c.ledger().usage_snapshot().unwrap().unwrap();
    let a_before = before.leaves.iter().find(|u| u.leaf == "lab/teama").unwrap().charged;
    assert!(a_before >= 8 * 4, "usage is being recorded: {a_before}");

    c.restart_slurmctld();
    std::thread::sleep(secs(5));
    // Jobs and their contracts survive (Slurm's state), usage continues
    // from the ledger rather than restarting at zero.
    assert_eq!(c.job(running).state(), "RUNNING");
    assert_eq!(c.job(running).comment(), "keep me min_runtime=10m priority=normal");
    assert_eq!(c.job(pending).comment(), "min_runtime=2m priority=low");
    let after = c.ledger().usage_snapshot().unwrap().unwrap();
    assert!(after.computed_at > before.computed_at, "the restarted plugin records again");
    let a_after = after.leaves.iter().find(|u| u.leaf == "lab/teama").unwrap().charged;
    assert!(a_after > a_before, "usage went from {a_before} to {a_after}: lost in the restart");
    // One run, still open: not closed and reopened by the restart.
    let runs = c.ledger().runs_of_job(running).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].run_end, None);
    assert!(c.ledger().contract(running).unwrap().is_some());
}

#[test]
fn t9_losing_the_ledger_does_not_stop_scheduling() {
    let c = TestCluster::start("ledgerloss", BUDGET, Options::default());
    let first = c.sbatch("alice", &["--gres=gpu:2", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    c.wait_state(first, "RUNNING", secs(30));

    // Corrupt it: scheduling and contract checks go on from memory.
    std::fs::write(c.ledger_path(), vec![0x5a; 64 * 1024]).unwrap();
    let _ = std::fs::remove_file(c.dir.join("ledger.db-wal"));
    let _ = std::fs::remove_file(c.dir.join("ledger.db-shm"));
    let refused = c.sbatch("alice", &["--comment=min_runtime=9h", &sleep_job(5)]);
    assert!(refused.unwrap_err().contains("exceeds the cluster cap of 8h"), "checks continue on the last good budget");
    let jobs: Vec<u32> = (0..5).map(|_| c.sbatch("bob", &["--gres=gpu:2", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("new jobs start with a corrupt ledger", secs(60), || jobs.iter().all(|&j| c.job(j).state() == "RUNNING"));
    std::thread::sleep(secs(5));

    // Delete it: the same.
    std::fs::remove_file(c.ledger_path()).unwrap();
    let more: Vec<u32> = (0..3).map(|_| c.sbatch("carol", &["--gres=gpu:2", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("new jobs start with no ledger", secs(60), || more.iter().all(|&j| c.job(j).state() == "RUNNING"));
    std::thread::sleep(secs(5));

    // Each plugin reports each problem once: not once per job or per period
    // (the test ran through some 15 periods and 9 submissions).
    let log = c.ctld_log();
    for plugin in ["priority/allot:", "preempt/allot:", "job_submit/allot:"] {
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("error:") && l.contains(plugin)).collect();
        assert!(!errors.is_empty(), "{plugin} did not report the broken ledger:\n{log}");
        assert!(errors.len() <= 4, "{plugin} logged {} errors, the problem once per period?\n{}", errors.len(), errors.join("\n"));
    }

    // Sync a budget again: the ledger is back, and the runs still going are in it.
    let budget = c.dir.join("budgets.toml");
    let out = c.allot(&["sync", budget.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    c.wait_for("the plugin writes the new ledger", secs(20), || {
        Ledger::open_read_only(c.ledger_path()).ok().and_then(|l| l.usage_snapshot().ok().flatten()).is_some()
    });
    let l = c.ledger();
    assert!(!l.runs_of_job(more[0]).unwrap().is_empty(), "runs kept in memory reached the new ledger");
}

#[test]
fn t10_a_teams_high_priority_job_preempts_its_own_normal_job_only_past_its_minimum_runtime() {
    let c = TestCluster::start("withinteam", BUDGET, Options::default());
    // Team A's normal-priority training jobs hold every GPU, protected for 25 s.
    let training: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=25s", "--requeue", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("team A's training runs", secs(30), || training.iter().all(|&j| c.job(j).state() == "RUNNING"));
    let started = now();
    // The same team's debug job, declared high priority, 1 GPU.
    let debug = c.sbatch("alice", &["--gres=gpu:1", "--comment=debug min_runtime=10s priority=high", &sleep_job(600)]).unwrap();
    // A teammate's job of the same (normal) priority never preempts.
    let peer = c.sbatch("dave", &["--gres=gpu:8", "--comment=min_runtime=10s", &sleep_job(600)]).unwrap();
    // Inside the training jobs' minimum runtime nothing moves.
    while now() < started + 20 {
        assert_eq!(c.job(debug).state(), "PENDING", "the debug job started inside its teammates' minimum runtime");
        assert!(training.iter().all(|&j| c.job(j).restarts() == 0), "a training job was preempted inside its minimum runtime");
        std::thread::sleep(secs(2));
    }
    // After it, the debug job takes one training job's GPUs: the team
    // spends its own budget as it declared.
    c.wait_state(debug, "RUNNING", secs(60));
    assert!(now() >= started + 25, "the debug job started before its teammates' minimum runtime was over");
    let preempted: Vec<u32> = training.iter().copied().filter(|&j| c.job(j).restarts() == 1).collect();
    assert_eq!(preempted.len(), 1, "exactly one training job made room: {preempted:?}");
    // The normal-priority teammate and the requeued training job wait: no
    // one takes GPUs from a job of its own or a higher priority.
    std::thread::sleep(secs(10));
    assert_eq!(c.job(peer).state(), "PENDING");
    assert_eq!(training.iter().filter(|&&j| c.job(j).restarts() >= 1).count(), 1, "a normal-priority job preempted a teammate");
    assert_eq!(c.job(debug).restarts(), 0);
    let events = c.ledger().events_of_job(preempted[0]).unwrap();
    assert!(events.iter().any(|e| e.kind == "preempted"), "{events:?}");
}

#[test]
fn t11_a_small_job_of_a_less_used_team_preempts_without_the_margin_a_large_one_does_not() {
    // A margin of half an allocation: team A, holding every GPU, stays
    // within it for the whole test (an allocation is 8 GPU-hours of the
    // 1-hour window; A's 32 GPUs take 7.5 minutes to use half of it).
    let budget = BUDGET.replace("preempt_margin = 0.05", "preempt_margin = 0.5");
    let c = TestCluster::start("smalljob", &budget, Options::default());
    let a: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=20s", "--requeue", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("team A runs", secs(30), || a.iter().all(|&j| c.job(j).state() == "RUNNING"));
    let started = now();
    // Team B (unused, so below A but within the margin): a large job (a
    // guarantee over small_job_min_runtime) and a small one (1 GPU, 10 s),
    // first in B's order as debug jobs declare. (Slurm gives GPUs that a
    // preemption frees to the first job in the order that fits, not to the
    // preemptor: a large job ahead of it would take them.)
    let large = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=1h", &sleep_job(600)]).unwrap();
    // A short guarantee on a request that may grow to 32 GPUs is not small
    // (Slurm's own count says 8: the minimum of one node).
    let range = c.sbatch("bob", &["--gres=gpu:8", "--nodes=1-4", "--comment=min_runtime=10s", &sleep_job(600)]).unwrap();
    let small = c.sbatch("bob", &["--gres=gpu:1", "--comment=debug min_runtime=10s priority=high", &sleep_job(600)]).unwrap();
    // Inside A's minimum runtime nothing moves.
    while now() < started + 15 {
        assert_eq!(c.job(small).state(), "PENDING", "the small job started inside A's minimum runtime");
        assert!(a.iter().all(|&j| c.job(j).restarts() == 0), "an A job was preempted inside its minimum runtime");
        std::thread::sleep(secs(2));
    }
    // After it, the small job takes one A job's GPUs: B is below A, and a
    // small job asks no margin.
    c.wait_state(small, "RUNNING", secs(60));
    assert!(now() >= started + 20, "the small job started before A's minimum runtime was over");
    let preempted: Vec<u32> = a.iter().copied().filter(|&j| c.job(j).restarts() == 1).collect();
    assert_eq!(preempted.len(), 1, "exactly one A job made room: {preempted:?}");
    let events = c.ledger().events_of_job(preempted[0]).unwrap();
    assert!(events.iter().any(|e| e.kind == "preempted"), "{events:?}");
    // The large job needs the margin: it waits, and no other A job goes.
    std::thread::sleep(secs(20));
    assert_eq!(c.job(large).state(), "PENDING", "a large job preempted within the margin");
    assert_eq!(c.job(range).state(), "PENDING", "a job that may grow to 32 GPUs passed for small");
    assert_eq!(a.iter().filter(|&&j| c.job(j).restarts() >= 1).count(), 1, "a second A job was preempted");
    assert_eq!(c.job(small).restarts(), 0);
}

#[test]
fn t11b_a_long_waiting_large_job_asks_no_margin_and_never_takes_a_protected_run() {
    // Rule 6 (large_job_wait): with a margin of half an allocation (as in
    // t11) team B's 2-node job never outranks team A by rule 4 here; after
    // waiting large_job_wait, its budget under its share, it asks no margin.
    let budget = BUDGET.replace("preempt_margin = 0.05", "preempt_margin = 0.5\nlarge_job_wait = \"35s\"");
    let c = TestCluster::start("longwait", &budget, Options::default());
    // Team A fills the four nodes: two runs protected for 15 s, two for 10 minutes.
    let short: Vec<u32> = (0..2).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=15s", "--requeue", &sleep_job(600)]).unwrap()).collect();
    let long: Vec<u32> = (0..2).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=10m", "--requeue", &sleep_job(600)]).unwrap()).collect();
    let a: Vec<u32> = short.iter().chain(&long).copied().collect();
    c.wait_for("team A runs", secs(30), || a.iter().all(|&j| c.job(j).state() == "RUNNING"));
    // Team B (unused): 16 GPUs on two whole nodes, a 10 s guarantee: large.
    // Submitted held and with a --begin long past, and kept held beyond
    // large_job_wait: neither counts as waiting (Slurm sets the job's
    // eligible time when it is released, which the plugins read), so that a
    // researcher cannot bank a long wait ahead of need.
    let large = c
        .sbatch("bob", &["--hold", "--begin=2020-01-01T00:00:00", "--gres=gpu:8", "--nodes=2", "--comment=min_runtime=10s", "--requeue", &sleep_job(600)])
        .unwrap();
    std::thread::sleep(secs(40));
    assert!(a.iter().all(|&j| c.job(j).restarts() == 0), "an A job was preempted for a held job");
    let out = c.slurm(Some("bob"), "scontrol", &["release", &large.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let submitted = now();
    // Past the short runs' guarantee, within large_job_wait: rule 4 alone
    // (the margin) keeps it waiting.
    while now() < submitted + 30 {
        assert_eq!(c.job(large).state(), "PENDING", "the large job started before large_job_wait, within the margin");
        assert!(a.iter().all(|&j| c.job(j).restarts() == 0), "an A job was preempted before large_job_wait");
        std::thread::sleep(secs(2));
    }
    // After it: the two runs past their guarantee go, the protected two stay.
    c.wait_state(large, "RUNNING", secs(90));
    let waited = now() - submitted;
    assert!(waited >= 35, "started after {waited} s, before large_job_wait");
    let preempted: Vec<u32> = a.iter().copied().filter(|&j| c.job(j).restarts() >= 1).collect();
    assert_eq!(preempted, short, "exactly the runs past their minimum runtime made room");
    assert!(long.iter().all(|&j| c.job(j).state() == "RUNNING" && c.job(j).restarts() == 0), "a protected run was preempted");
    for &j in &short {
        let events = c.ledger().events_of_job(j).unwrap();
        assert!(events.iter().any(|e| e.kind == "preempted"), "job {j}: {events:?}");
    }
    // And none later: the protected runs keep their GPUs for their guarantee.
    std::thread::sleep(secs(10));
    assert!(long.iter().all(|&j| c.job(j).state() == "RUNNING" && c.job(j).restarts() == 0), "a protected run was preempted");
}

#[test]
fn t11c_with_a_lookahead_a_team_ranks_by_the_gpus_it_just_took() {
    // Team B used 8 GPUs for 10 minutes earlier in the hour's window (4,800
    // GPU-seconds); team A takes the whole cluster now. By the window alone
    // A ranks first for the next 2.5 minutes (32 GPUs x 150 s); with a
    // 10-minute lookahead its 32 running GPUs count 19,200 GPU-seconds at once.
    let budget = BUDGET.replace("preempt_margin = 0.05", "preempt_margin = 0.05\nlookahead = \"10m\"");
    let c = TestCluster::start("lookahead", &budget, Options::default());
    plant_run(&c, 900_000, "teamb", "bob", 8, 1800, 1200);
    c.restart_slurmctld();
    let a: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("team A holds the cluster", secs(30), || a.iter().all(|&j| c.job(j).state() == "RUNNING"));
    let started = now();
    let a_waits = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(600)]).unwrap();
    let b_waits = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(600)]).unwrap();
    c.wait_for("teamb's waiting job ranks above teama's", secs(30), || {
        let (pa, pb) = (c.job(a_waits).priority(), c.job(b_waits).priority());
        pa > 0 && pb > pa
    });
    assert!(now() - started < 120, "ranked after the window alone would have put team A behind too");
    // `allot why` ranks as the plugins do and says what the figures count
    // (once the priority plugin recorded the job).
    c.wait_for("the ledger records the waiting job", secs(30), || c.allot(&["why", &a_waits.to_string()]).status.success());
    let why = text(&c.allot(&["why", &a_waits.to_string()]));
    assert!(why.lines().any(|l| l.contains("lab/teama") && l.contains("2nd of 2 siblings")), "{why}");
    assert!(why.contains("as used 10m longer: the budget's lookahead"), "{why}");
    let show = text(&c.allot(&["budget", "show"]));
    assert!(show.contains("lookback 1h (running GPUs counted 10m ahead)"), "{show}");
}

#[test]
fn t12_a_node_kept_for_small_jobs_starts_debug_jobs_at_once_and_admits_nothing_else() {
    // n4 kept: partition gpu is n[1-3], partition small n[1-4], and
    // allot.conf names small as SmallJobPartition.
    let c = TestCluster::start("smallnodes", BUDGET, Options { small_job_nodes: 1, ..Options::default() });
    let conf = c.slurm_conf();
    let doctor = c.allot_in_release(&["doctor", "--slurm-conf", conf.to_str().unwrap()]);
    assert!(text(&doctor).contains("SmallJobPartition=small: the partition of the nodes kept for small jobs spans n[1-4]"), "{}", text(&doctor));
    // Team A's training fills n1-n3; its fourth job may not use n4.
    let training: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=1h", "--requeue", &sleep_job(600)]).unwrap()).collect();
    c.wait_for("three training jobs run", secs(30), || training[..3].iter().all(|&j| c.job(j).state() == "RUNNING"));
    assert!(training.iter().all(|&j| c.job(j).get("Partition") == "gpu"), "training jobs were sent to the small partition");
    // An unallocated job (free, any size) is sent to the small partition and takes n4.
    let free = c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", &sleep_job(600)]).unwrap();
    c.wait_state(free, "RUNNING", secs(30));
    assert_eq!((c.job(free).get("Partition"), c.job(free).nodes()), ("small", "n4"));
    for _ in 0..5 {
        assert_eq!(c.job(training[3]).state(), "PENDING", "a training job ran on the node kept for small jobs");
        std::thread::sleep(secs(1));
    }
    // Team B's debug job (1 GPU, min_runtime 10m: small, no partition named)
    // goes to the small partition and takes the free job's GPUs at once,
    // while every training job is inside its minimum runtime.
    let submitted = now();
    let debug = c.sbatch("bob", &["--gres=gpu:1", "--comment=debug min_runtime=10m", &sleep_job(600)]).unwrap();
    c.wait_state(debug, "RUNNING", secs(30));
    let waited = now() - submitted;
    assert_eq!((c.job(debug).get("Partition"), c.job(debug).nodes()), ("small", "n4"));
    assert!(waited <= 15, "the debug job waited {waited} s for a free job's GPUs");
    assert!(c.job(free).restarts() >= 1 || c.job(free).state() != "RUNNING", "the free job still holds n4");
    assert!(training[..3].iter().all(|&j| c.job(j).state() == "RUNNING" && c.job(j).restarts() == 0), "a protected training job was preempted");
    assert_eq!(c.job(training[3]).state(), "PENDING");

    // A job that may not use the kept node is refused when it names it.
    let refused = |user: &str, args: &[&str], wanted: &str| {
        let e = c.sbatch(user, args).expect_err(&format!("{args:?} was accepted"));
        assert!(e.contains(wanted), "sbatch {args:?}: wanted {wanted:?}, got:\n{e}");
    };
    let kept = "partition 'small' is kept for small jobs (at most 8 GPUs and min_runtime at most 30m) and unallocated ones (min_runtime=0)";
    refused(
        "bob",
        &["-p", "small", "--gres=gpu:8", "--comment=min_runtime=2h", &sleep_job(5)],
        &format!("{kept}; this job can be given up to 8 GPUs with min_runtime=2h"),
    );
    refused(
        "bob",
        &["-p", "gpu,small", "--gres=gpu:4", "--nodes=1-4", "--comment=min_runtime=10m", &sleep_job(5)],
        "this job can be given up to 16 GPUs with min_runtime=10m",
    );
    // A small job that names another partition stays there.
    let named = c.sbatch("bob", &["-p", "gpu", "--hold", "--gres=gpu:1", "--comment=min_runtime=10m", &sleep_job(5)]).unwrap();
    assert_eq!(c.job(named).get("Partition"), "gpu");

    // A pending small job may not become a large one while in the small
    // partition; moved out in the same update, it may.
    let held = c.sbatch("bob", &["--hold", "--gres=gpu:1", "--comment=min_runtime=10m", &sleep_job(5)]).unwrap();
    assert_eq!(c.job(held).get("Partition"), "small");
    let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("JobId={held}"), "Comment=min_runtime=2h"]);
    assert!(!out.status.success(), "the contract edit was accepted: {}", text(&out));
    // 22.05 gives job_modify no message channel: the user sees the code, the
    // log the reason; 24.11 shows the user the reason too.
    assert!(text(&out).contains("Invalid partition name"), "{}", text(&out));
    if Release::current().name != "22.05" {
        assert!(text(&out).contains(kept), "{}", text(&out));
    }
    assert!(c.ctld_log().contains(&format!("refused update of JobId={held}: allot: JobId={held}: {kept}")), "the reason is not in slurmctld's log");
    let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("JobId={held}"), "Gres=gpu:8", "NumNodes=2"]);
    assert!(!out.status.success(), "growing to 16 GPUs was accepted: {}", text(&out));
    // The node count alone grows a job of 8 GPUs a node: to 32 with NumNodes=4.
    let eight = c.sbatch("bob", &["--hold", "--gres=gpu:8", "--comment=min_runtime=10m", &sleep_job(5)]).unwrap();
    assert_eq!(c.job(eight).get("Partition"), "small");
    let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("JobId={eight}"), "NumNodes=4"]);
    assert!(!out.status.success(), "NumNodes=4 grew a small job of 8 GPUs a node to 32: {}", text(&out));
    assert!(c.ctld_log().contains(&format!("refused update of JobId={eight}")), "the reason is not in slurmctld's log");
    assert!(c.job(held).comment().contains("min_runtime=10m"), "{}", c.job(held).comment());
    let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("JobId={held}"), "Partition=gpu", "Comment=min_runtime=2h"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!((c.job(held).get("Partition"), c.job(held).comment()), ("gpu", "min_runtime=2h priority=normal"));

    // Valid partition changes of fresh jobs always pass. Without slurmdbd,
    // slurmctld answers such an update with whatever errno its RPC thread
    // last left (24.11: often EAGAIN, "Resource temporarily unavailable",
    // 8 of 20 with Slurm's own plugins); job_modify/allot clears it when it
    // accepts the update (allot_slurm::guard::clear_errno).
    for i in 0..12 {
        let id = c.sbatch("bob", &["--hold", "--gres=gpu:1", "--comment=min_runtime=10m", &sleep_job(5)]).unwrap();
        let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("JobId={id}"), "Partition=gpu", "Comment=min_runtime=20m"]);
        assert!(out.status.success(), "update {i} of a fresh job: {}", text(&out));
        assert_eq!(c.job(id).get("Partition"), "gpu");
    }
}

/// The shipped allot.conf names `SmallJobPartition=small`. On a cluster
/// whose slurm.conf has no such partition (yet), jobs are accepted as if it
/// named none (Slurm would refuse every small job sent to a partition it
/// does not know) and slurmctld's log says why, once.
#[test]
fn t12b_a_small_job_partition_slurm_does_not_know_routes_nothing_and_is_said_once() {
    let c = TestCluster::start("nosmallpart", BUDGET, Options { small_job_nodes: 0, ..Options::default() });
    let conf = c.dir.join("etc/allot.conf");
    let text_conf = std::fs::read_to_string(&conf).unwrap();
    let named: String =
        text_conf.lines().map(|l| if l.starts_with("SmallJobPartition=") { "SmallJobPartition=small\n".to_owned() } else { format!("{l}\n") }).collect();
    assert_ne!(named, text_conf, "the test cluster's allot.conf had no empty SmallJobPartition line");
    std::fs::write(&conf, named).unwrap();
    c.restart_slurmctld();
    // A debug job, a free job and a training job: each accepted, in gpu.
    let jobs: Vec<u32> = [("bob", "--comment=debug min_runtime=10m"), ("carol", "--comment=min_runtime=0"), ("alice", "--comment=min_runtime=1h")]
        .iter()
        .map(|(user, comment)| c.sbatch(user, &["--gres=gpu:1", comment, &sleep_job(2)]).unwrap_or_else(|e| panic!("{user} {comment}: refused: {e}")))
        .collect();
    for &j in &jobs {
        assert_eq!(c.job(j).get("Partition"), "gpu", "JobId={j}");
    }
    c.wait_for("the jobs complete", secs(60), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    // A job that names the missing partition gets Slurm's own answer.
    let e = c
        .sbatch("bob", &["-p", "small", "--gres=gpu:1", "--comment=min_runtime=10m", &sleep_job(2)])
        .expect_err("a job in a partition Slurm does not know was accepted");
    assert!(e.contains("Invalid partition name"), "{e}");
    let log = c.ctld_log();
    let said = "allot.conf's SmallJobPartition=small names no partition in slurm.conf";
    assert_eq!(log.matches(said).count(), 1, "said {} times, not once:\n{log}", log.matches(said).count());
    // allot doctor names it, with the fix.
    let conf = c.slurm_conf();
    let doctor = c.allot_in_release(&["doctor", "--slurm-conf", conf.to_str().unwrap()]);
    assert!(!doctor.status.success(), "allot doctor passes a SmallJobPartition Slurm does not know:\n{}", text(&doctor));
    assert!(text(&doctor).contains("allot.conf's SmallJobPartition=small names no partition of the running slurmctld"), "{}", text(&doctor));
    assert!(text(&doctor).contains("fix: in slurm.conf, PartitionName=small over the whole cluster"), "{}", text(&doctor));
}

/// `allot report` on the live cluster: each budget's demand is what its jobs
/// asked for from submission to their end (Slurm's times), a held job and
/// one parked with `--begin` add none, delivered is what they ran, the waits are Slurm's, and owed never
/// exceeds a budget's demand nor the cluster's GPUs.
#[test]
fn t13_allot_report_gives_each_budget_the_demand_delivery_and_waits_slurm_saw() {
    let c = TestCluster::start("report", BUDGET, Options::default());
    // Training jobs (protected for longer than a small job's 30 min) fill the cluster.
    let mut jobs: Vec<u32> = (0..4).map(|_| c.sbatch("alice", &["--gres=gpu:8", "--comment=min_runtime=1h", &sleep_job(15)]).unwrap()).collect();
    c.wait_for("teama fills the cluster", secs(30), || jobs.iter().all(|&j| c.job(j).state() == "RUNNING"));
    // They wait for teama's protected jobs: a debug job, a training job, an unallocated one.
    jobs.push(c.sbatch("bob", &["--gres=gpu:4", "--comment=min_runtime=1m", &sleep_job(6)]).unwrap());
    jobs.push(c.sbatch("dave", &["--gres=gpu:8", "--account=teamb", "--comment=min_runtime=1h", &sleep_job(5)]).unwrap());
    jobs.push(c.sbatch("carol", &["--gres=gpu:2", "--comment=min_runtime=0", &sleep_job(6)]).unwrap());
    let held = c.sbatch("bob", &["--hold", "--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(5)]).unwrap();
    // Parked to start in an hour: no demand before then either.
    let later = c.sbatch("dave", &["--begin=now+1hour", "--gres=gpu:8", "--account=teamb", "--comment=min_runtime=1m", &sleep_job(5)]).unwrap();
    c.wait_for("every job completes", secs(120), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    for id in [held, later] {
        c.slurm(None, "scancel", &[&id.to_string()]);
        c.wait_for("the held and the parked job are cancelled", secs(30), || c.job(id).state() == "CANCELLED");
    }
    std::thread::sleep(secs(5)); // recomputes record the ends

    let json = c.job_dir().join("report.json");
    let out = c.allot(&["report", "--since", "1h", "--json", json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    eprintln!("{}", text(&out));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let node = |path: &str| r["nodes"].as_array().unwrap().iter().find(|n| n["path"] == path).unwrap_or_else(|| panic!("no node {path} in {r}")).clone();
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));

    // Slurm's times, per budget leaf: GPU-seconds wanted (submit to end) and run (start to end), and the waits.
    let slurm = c.jobs_epoch();
    let mut want: HashMap<&str, (f64, f64, f64)> = HashMap::new(); // (demand, delivered, tolerance)
    let mut waits = Vec::new();
    for &id in &jobs {
        let j = slurm.iter().find(|j| j.id == id).unwrap();
        let t = |k: &str| j.get(k).parse::<i64>().unwrap_or_else(|_| panic!("job {id} {k}={:?}", j.get(k)));
        let gpus = [8.0, 8.0, 8.0, 8.0, 4.0, 8.0, 2.0][jobs.iter().position(|&x| x == id).unwrap()];
        let leaf = match j.get("Account") {
            "teama" => "lab/teama",
            "teamb" => "lab/teamb",
            _ => "other",
        };
        let e = want.entry(leaf).or_default();
        e.0 += gpus * (t("EndTime") - t("SubmitTime")) as f64;
        e.1 += gpus * (t("EndTime") - t("StartTime")) as f64;
        // The demand is sampled at each recompute (every 2 s): each end is
        // seen up to a period late (and a second of rounding), the lags of
        // the two ends partly cancelling.
        e.2 += gpus * 5.0;
        waits.push(t("StartTime") - t("SubmitTime"));
    }
    for (leaf, (demand, delivered, tolerance)) in &want {
        let n = node(leaf);
        let (d, g) = (f(&n["demand_gpu_hours"]) * 3600.0, f(&n["delivered_gpu_hours"]) * 3600.0);
        assert!(
            (d - demand).abs() <= *tolerance,
            "{leaf}: demand {d} GPU-s in the report, {demand} from Slurm's times (the held and the parked job add none), tolerance {tolerance}"
        );
        assert!((g - delivered).abs() <= 0.01 * delivered + 3.6, "{leaf}: delivered {g} GPU-s in the report, {delivered} from Slurm's times");
        assert!(f(&n["owed_gpu_hours"]) <= f(&n["demand_gpu_hours"]) + 1e-3, "{leaf}: owed more than it wanted: {n}");
    }
    let root = node("");
    let span = f(&r["span_seconds"]);
    assert!(f(&root["owed_gpu_hours"]) <= 32.0 * span / 3600.0 + 1e-3, "owed more than the cluster has: {root}");
    assert!(f(&node("lab/teamb")["owed_gpu_hours"]) > 0.0, "teamb waited for GPUs and was owed nothing: {r}");
    // teama had the cluster to itself while the others were not there: all it delivered was owed.
    assert!(f(&node("lab/teama")["owed_gpu_hours"]) >= 0.99 * f(&node("lab/teama")["delivered_gpu_hours"]), "{r}");
    let delivered: f64 = want.values().map(|w| w.1).sum();
    assert!(
        (f(&r["occupancy"]) * 32.0 * span - delivered).abs() <= 0.01 * delivered + 36.0,
        "occupancy {} over {span} s against {delivered} GPU-s delivered",
        r["occupancy"]
    );

    // Waits, by Slurm's start and submit times (nearest rank), and by kind.
    waits.sort_unstable();
    let rank = |p: f64| waits[((p * waits.len() as f64).ceil() as usize).clamp(1, waits.len()) - 1];
    assert_eq!((r["wait_p50_s"].as_i64(), r["wait_p90_s"].as_i64()), (Some(rank(0.5)), Some(rank(0.9))), "{r}");
    assert_eq!((r["jobs"].as_u64(), r["jobs_completed"].as_u64(), r["jobs_left_without_starting"].as_u64()), (Some(9), Some(7), Some(2)), "{r}");
    let kind = |k: &str| r["by_kind"][k]["jobs"].as_u64();
    assert_eq!((kind("training"), kind("debug"), kind("unallocated")), (Some(5), Some(1), Some(1)), "{}", r["by_kind"]);
    assert!(r["by_kind"]["training"]["wait_p90_s"].as_i64() >= Some(5), "dave's training job waited for teama's: {}", r["by_kind"]);
    assert!(r["unallocated_fraction"].as_f64().unwrap() > 0.0, "carol's run is unallocated: {r}");
}

/// Three plugins open the ledger inside one slurmctld. Each must use the
/// process's one SQLite (the system's libsqlite3), never a copy of its own:
/// copies cannot see each other's POSIX locks, so one that reopened the
/// ledger reset the WAL index another had mapped (SIGBUS in t9, once in a
/// dozen runs under load) and each copy's close dropped the others' locks.
#[test]
fn t14_the_plugins_share_slurmctlds_one_sqlite() {
    let c = TestCluster::start("onesqlite", BUDGET, Options::default());
    // Every plugin has opened the ledger by the first submission.
    c.sbatch("alice", &["--comment=min_runtime=1m", &sleep_job(5)]).unwrap();
    let pid = std::fs::read_to_string(c.dir.join("pids/slurmctld.pid")).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", pid.trim())).unwrap();
    let mapped: std::collections::BTreeSet<&str> = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).filter(|p| p.starts_with('/')).collect();
    let sqlites: Vec<&&str> = mapped.iter().filter(|p| p.contains("libsqlite3")).collect();
    assert_eq!(sqlites.len(), 1, "slurmctld maps one SQLite library: {sqlites:?}");
    let plugins: Vec<&&str> = mapped.iter().filter(|p| p.ends_with("_allot.so")).collect();
    assert_eq!(plugins.len(), 4, "the four plugins are loaded: {plugins:?}");
    for plugin in plugins {
        // As this host sees the file (a release root's daemons see it without the root).
        let here = match &Release::current().root {
            Some(root) if !std::path::Path::new(plugin).starts_with(root) => root.join(plugin.trim_start_matches('/')),
            _ => std::path::PathBuf::from(plugin),
        };
        let nm = std::process::Command::new("nm").arg(&here).output().expect("nm (binutils) runs");
        assert!(nm.status.success(), "nm {}: {}", here.display(), text(&nm));
        let own: Vec<String> =
            String::from_utf8_lossy(&nm.stdout).lines().filter(|l| l.contains(" T sqlite3_") || l.contains(" t sqlite3_")).map(str::to_owned).take(3).collect();
        assert!(own.is_empty(), "{} has SQLite of its own: {own:?}", here.display());
    }
}

/// `allot doctor` on a real cluster of this release: ok as the cluster runs;
/// then each thing an admin gets wrong at a Slurm update is named with its
/// fix, and the command fails: a plugin built for another micro version, a
/// plugin file of the wrong kind (missing the symbols this release's loader
/// looks up), a plugin file others may write.
#[test]
fn t15_allot_doctor_passes_here_and_names_a_plugin_of_another_version() {
    let c = TestCluster::start("doctor", BUDGET, Options::default());
    let release = Release::current();
    let conf = c.slurm_conf(); // as the release's commands see it
    let doctor = || c.allot_in_release(&["doctor", "--slurm-conf", conf.to_str().unwrap()]);
    let out = doctor();
    let said = text(&out);
    assert!(out.status.success(), "allot doctor fails on a working cluster:\n{said}");
    assert!(said.contains(&format!("verdict: ok: allot's plugins match this slurmctld ({})", release.version)), "{said}");
    assert_eq!(said.matches(&format!("built for Slurm {}, every symbol its loader needs", release.version)).count(), 4, "{said}");

    let plugins = c.dir.join("plugins");
    let replace = |name: &str, bytes: &[u8]| {
        let tmp = plugins.join(format!("{name}.new"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, plugins.join(name)).unwrap(); // as an admin installs: the running slurmctld keeps its mapping
    };
    // The same plugin, its plugin_version one micro release on (what an
    // un-rebuilt plugin looks like after `dnf update slurm`, the other way round).
    let original = std::fs::read(plugins.join("preempt_allot.so")).unwrap();
    let mut patched = original.clone();
    let (offset, version) = plugin_version_offset(&original);
    patched[offset..offset + 4].copy_from_slice(&(version + 1).to_ne_bytes());
    replace("preempt_allot.so", &patched);
    let (a, b, m) = (version >> 16, (version >> 8) & 0xff, version & 0xff);
    let out = doctor();
    let said = text(&out);
    assert!(!out.status.success(), "allot doctor passes a plugin of another version:\n{said}");
    assert!(said.contains(&format!("preempt_allot.so: built for Slurm {a}.{b:02}.{} (plugin_version), but slurmctld is {}", m + 1, release.version)), "{said}");
    assert!(said.contains(&format!("fix: rebuild allot against the source tree of Slurm {}", release.version)), "{said}");
    assert!(said.contains("1 problem(s) found"), "{said}");

    // A file of the wrong kind, writable by others.
    replace("preempt_allot.so", &original);
    replace("priority_allot.so", &std::fs::read(plugins.join("jobcomp_allot.so")).unwrap());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(plugins.join("job_submit_allot.so"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let said = text(&doctor());
    assert!(said.contains("priority_allot.so: its plugin_type is \"jobcomp/allot\", not priority/allot"), "{said}");
    assert!(said.contains("lacks what Slurm") && said.contains("priority_p_set"), "{said}");
    assert!(said.contains("job_submit_allot.so: the plugin file is writable by others (mode 666, owner uid 0)"), "{said}");
    assert!(said.contains("2 problem(s) found"), "{said}");
}

/// Where `plugin_version`'s value lies in a plugin file, and the value.
fn plugin_version_offset(elf: &[u8]) -> (usize, u32) {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(elf).unwrap();
    let sym = file.dynamic_symbols().find(|s| s.name() == Ok("plugin_version")).expect("plugin_version is exported");
    let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
    let (start, _) = section.file_range().expect("plugin_version lies in the file");
    let offset = (start + sym.address() - section.address()) as usize;
    (offset, u32::from_ne_bytes(elf[offset..offset + 4].try_into().unwrap()))
}

#[test]
fn t16_a_cpu_only_cluster_shares_and_charges_cpus() {
    // The seed's development cluster: nodes without GPUs (32 CPUs, 64,000 MB
    // each), a budget that shares CPUs.
    let budget = BUDGET.replace("[cluster]\n", "[cluster]\ncharge = \"cpus\"\n");
    let c = TestCluster::start("cpuonly", &budget, Options { cpu_only: true, ..Options::default() });
    let whole_node = c.sbatch("alice", &["-c", "32", "-w", "n1", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let memory_node = c.sbatch("carol", &["--mem=64000", "-w", "n2", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    let four = c.sbatch("bob", &["-c", "4", "-w", "n3", "--comment=min_runtime=1m", &sleep_job(600)]).unwrap();
    c.wait_for("the three run", secs(30), || [whole_node, memory_node, four].iter().all(|&j| c.job(j).state() == "RUNNING"));
    // The contract's checks hold as on a GPU cluster.
    let refused = c.sbatch("alice", &["--comment=min_runtime=9h", &sleep_job(5)]).expect_err("min_runtime past the cap was accepted");
    assert!(refused.contains("exceeds the cluster cap of 8h"), "{refused}");
    // Usage in CPUs: capacity 4 x 32, teama's 32 CPUs a second.
    c.wait_for("teama's CPU usage is recorded", secs(20), || {
        c.ledger().usage_snapshot().unwrap().is_some_and(|s| s.capacity_gpus == 128 && s.leaves.iter().any(|u| u.leaf == "lab/teama" && u.charged >= 32 * 3))
    });
    // Fair-share in CPUs: teama used 32 CPUs, teamb 4: teamb's waiting job first.
    let a_waits = c.sbatch("alice", &["-N", "4", "-c", "32", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    let b_waits = c.sbatch("bob", &["-N", "4", "-c", "32", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    c.wait_for("teamb's waiting job ranks above teama's", secs(30), || c.job(b_waits).priority() > c.job(a_waits).priority());
    c.slurm(None, "scancel", &[&whole_node.to_string(), &memory_node.to_string(), &four.to_string(), &a_waits.to_string(), &b_waits.to_string()]);
    let l = || c.ledger();
    c.wait_for("the runs are closed in the ledger", secs(30), || {
        [whole_node, memory_node, four].iter().all(|&j| l().runs_of_job(j).unwrap().iter().any(|r| r.run_end.is_some()))
    });
    // Charged what each kept from others: a whole node's CPUs, a whole node's
    // memory (its CPUs' worth), four CPUs.
    let charged = |j: u32| l().runs_of_job(j).unwrap()[0].gpus;
    assert_eq!((charged(whole_node), charged(memory_node), charged(four)), (32, 32, 4));
    let report = c.allot(&["report"]);
    assert!(report.status.success() && text(&report).contains("CPU") && !text(&report).contains("GPU"), "the report speaks CPUs:\n{}", text(&report));
}

/// The harness brings up a cluster of any size (here 16 nodes of 4 GPUs,
/// 16 CPUs and 32,000 MB), with the kept node the shipped rule gives, and
/// the plugins order, place and charge on it as on four nodes.
#[test]
fn t17_a_cluster_of_any_size() {
    let size = allot_cluster_tests::Size { nodes: 16, gpus_per_node: 4, cpus_per_node: 16, memory_per_node: 32000 };
    let c = TestCluster::start("sized", BUDGET, Options { size, small_job_nodes: size.shipped_kept_nodes(), ..Options::default() });
    let sinfo = |args: &[&str]| text(&c.slurm(None, "sinfo", args)).trim().to_owned();
    assert_eq!(sinfo(&["-h", "-p", "gpu", "-o", "%D %G %c %m"]), "15 gpu:4 16 32000");
    assert_eq!(sinfo(&["-h", "-p", "small", "-o", "%D"]), "16");
    // A job on all 15 nodes of the default partition, and a 1-GPU job that
    // only the kept node can take meanwhile.
    let wide = c.sbatch("alice", &["-N", "15", "--gres=gpu:4", "--comment=min_runtime=5s", &sleep_job(4)]).unwrap();
    let small = c.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap();
    c.wait_state(wide, "COMPLETED", secs(60));
    c.wait_state(small, "COMPLETED", secs(60));
    assert_eq!(c.job(small).get("Partition"), "small");
    assert_eq!(c.job(small).nodes(), "n16");
    let slurm: HashMap<u32, allot_cluster_tests::JobInfo> = c.jobs_epoch().into_iter().map(|j| (j.id, j)).collect();
    c.wait_for("both runs in the ledger", secs(30), || [wide, small].iter().all(|&j| c.ledger().runs_of_job(j).unwrap().iter().any(|r| r.run_end.is_some())));
    for (job, gpus) in [(wide, 60), (small, 1)] {
        let runs = c.ledger().runs_of_job(job).unwrap();
        let s = &slurm[&job];
        let want = (s.get("StartTime").parse::<i64>().unwrap(), s.get("EndTime").parse::<i64>().unwrap(), gpus);
        assert_eq!((runs[0].run_start, runs[0].run_end.unwrap(), runs[0].gpus), want, "job {job}: {runs:?}");
    }
}
