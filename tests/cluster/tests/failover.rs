//! Failover with nothing lost: a primary and a backup slurmctld
//! on this host (scripts/cluster.sh ALLOT_BACKUP_CTLD) sharing
//! StateSaveLocation and a server ledger (a private MariaDB). The primary is
//! killed (SIGKILL) while jobs are inside their minimum runtime and one is
//! in its grace time; the backup takes over; then the primary comes back.
//!
//! Slurm 22.05 only (scripts/test.sh runs it there): on 24.11 and later
//! Slurm's own handback takes ~29 s and may drop the backup's last changes
//! (scripts/cluster.sh, ALLOT_BACKUP_CTLD).
//!
//! Needs root, the packages of `scripts/install-deps.sh --accounting` and
//! the release build: the README's test command does all of it.

use std::collections::BTreeMap;

use allot_cluster_tests::{now, secs, sleep_job, with_unallocated_grace, Options, Release, TestCluster, BUDGET};

/// Pending jobs by priority, highest first (the order Slurm starts them in).
fn pending_order(c: &TestCluster, jobs: &[u32]) -> Vec<u32> {
    let mut pending: Vec<(u32, u32)> = jobs.iter().map(|&j| c.job(j)).filter(|j| j.state() == "PENDING").map(|j| (j.priority(), j.id)).collect();
    pending.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    pending.into_iter().map(|(_, id)| id).collect()
}

/// A run as the ledger has it: (job, start) -> (end, GPUs, end reason).
type LedgerRuns = BTreeMap<(u32, i64), (Option<i64>, u32, Option<String>)>;

/// The ledger's runs of `jobs`.
fn ledger_runs(c: &TestCluster, jobs: &[u32]) -> LedgerRuns {
    let Ok(l) = c.read_ledger() else { return BTreeMap::new() };
    jobs.iter().flat_map(|&j| l.runs_of_job(j).unwrap_or_default()).map(|r| ((r.job_id, r.run_start), (r.run_end, r.gpus, r.end_reason))).collect()
}

fn wake_recompute(c: &TestCluster) {
    let _ = c.scontrol(&["setdebugflags", "-Priority"]);
}

/// slurmctld saves its state at most every 5 s: a change younger than that
/// dies with a killed controller (scripts/cluster.sh, kill-ctld).
fn let_state_save() {
    std::thread::sleep(secs(7));
}

#[test]
fn f1_a_killed_primary_controller_loses_no_run_no_contract_and_no_order() {
    assert_eq!(Release::current().name, "22.05", "the failover test runs on Slurm 22.05 (see this file's header); scripts/test.sh runs it there only");
    const GRACE: i64 = 20;
    let options = Options { recompute_period: 2, grace: GRACE as u32, run_log: true, server_ledger: true, backup_ctld: true, ..Options::default() };
    let c = TestCluster::start("failover", &with_unallocated_grace(BUDGET), options);
    // (The controller in control shows itself by its heartbeat, every
    // SlurmctldTimeout/4 s.)
    c.wait_for("the primary in control", secs(15), || c.in_control().as_deref() == Some("primary"));

    // Three nodes: allocated jobs inside a 90-s minimum runtime that they
    // never leave (they end at 85 s); one node: an unallocated job (free,
    // preemptible by any allocated job).
    let protected: Vec<u32> =
        ["alice", "carol", "alice"].iter().map(|u| c.sbatch(u, &["--gres=gpu:8", "--comment=min_runtime=90s", "--requeue", &sleep_job(85)]).unwrap()).collect();
    // (Long enough that only the preemption ends its first run.)
    let free = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", &sleep_job(150)]).unwrap();
    let mut jobs: Vec<u32> = protected.iter().copied().chain([free]).collect();
    c.wait_for("every node busy", secs(30), || jobs.iter().all(|&j| c.job(j).state() == "RUNNING"));
    // carol's allocated job preempts the free one: its grace time begins.
    let preemptor = c.sbatch("carol", &["--gres=gpu:8", "--comment=min_runtime=30s", &sleep_job(20)]).unwrap();
    jobs.push(preemptor);
    let mut preempt_time = 0;
    c.wait_for("the free job's grace time to begin", secs(30), || {
        preempt_time = c.jobs_epoch().into_iter().find(|j| j.id == free).and_then(|j| j.get("PreemptTime").parse::<i64>().ok()).unwrap_or(0);
        preempt_time > 0
    });
    // Waiting work of two teams, which can start only when the protected
    // runs end: its order must survive the failover.
    let waiting: Vec<u32> = ["alice", "bob"].iter().map(|u| c.sbatch(u, &["--gres=gpu:8", "--comment=min_runtime=10s", &sleep_job(5)]).unwrap()).collect();
    jobs.extend(&waiting);
    let_state_save();
    wake_recompute(&c);
    std::thread::sleep(secs(3));
    let order_before = pending_order(&c, &waiting);
    assert_eq!(order_before.len(), waiting.len(), "the waiting jobs wait");
    let before = c.read_ledger().unwrap().usage_snapshot().unwrap().unwrap();
    let in_grace = now() - preempt_time;
    assert!(in_grace < GRACE, "the kill comes inside the grace time ({in_grace} s of {GRACE})");

    // The primary dies.
    let killed_at = now();
    c.kill_ctld("primary");
    c.wait_for("the backup to take control", secs(40), || c.in_control().as_deref() == Some("backup"));
    let took_over = now() - killed_at;
    eprintln!("failover: the primary killed {in_grace} s into the free job's grace time; the backup in control {took_over} s later");
    // The grace time runs its course under the backup, then the preemptor
    // starts. (Slurm ends a grace time in its periodic job-time check,
    // every 30 s: up to that long after the grace.)
    c.wait_state(preemptor, "RUNNING", secs(90));
    let free_job = c.job(free);
    assert_eq!(free_job.restarts(), 1, "the free job was requeued once");
    // Every contract kept: no protected run ended early.
    for &j in &protected {
        assert_eq!((c.job(j).state(), c.job(j).restarts()), ("RUNNING", 0), "job {j} is inside its minimum runtime");
    }
    // The same order from the backup's plugins.
    wake_recompute(&c);
    std::thread::sleep(secs(3));
    let order_after = pending_order(&c, &waiting);
    assert_eq!(order_after, order_before, "the waiting jobs' order after the failover");
    let after = c.read_ledger().unwrap().usage_snapshot().unwrap().unwrap();
    assert!(after.computed_at > before.computed_at, "the backup's priority plugin records usage");
    assert_eq!(after.budget_version, before.budget_version);
    let backup_log = c.backup_ctld_log();
    assert!(backup_log.contains("priority/allot") || backup_log.contains("allot"), "the backup loaded allot's plugins:\n{backup_log}");

    // The primary comes back and takes control again.
    let_state_save();
    if let Err(e) = c.start_ctld("primary") {
        // Slurm 22.05's backup now and then hangs handing control back
        // (LocalCluster::start_ctld_again); the primary goes on after 29 s.
        eprintln!("start-ctld primary: {e}");
        c.kill_ctld("backup");
        if let Err(e) = c.start_ctld("backup") {
            panic!("start-ctld backup: {e}");
        }
    }
    c.wait_for("the primary in control again", secs(60), || c.in_control().as_deref() == Some("primary"));
    c.wait_for("every job ends", secs(400), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));

    // Nothing lost: the ledger's runs against Slurm's records.
    let mut ledger = BTreeMap::new();
    c.wait_for("every run closed in the ledger", secs(60), || {
        wake_recompute(&c);
        ledger = ledger_runs(&c, &jobs);
        let closed = ledger.values().filter(|(end, ..)| end.is_some()).count();
        closed == ledger.len() && closed == jobs.len() + 1
    });
    // Slurm's record of each job's last run (the free job's first run ends
    // in a requeue, whose epilog sees the job pending again: checked apart).
    let slurm_last: BTreeMap<u32, (i64, i64)> = c
        .run_ends()
        .iter()
        .filter(|j| jobs.contains(&j.id) && j.state() != "PENDING")
        .filter_map(|j| Some((j.id, (j.get("StartTime").parse().ok()?, j.get("EndTime").parse().ok()?))))
        .collect();
    assert_eq!(slurm_last.len(), jobs.len(), "Slurm's record of every job's last run");
    let mut slurm_gpu_s = 0;
    for (&j, &(start, end)) in &slurm_last {
        let (run_end, gpus, _) = ledger.get(&(j, start)).unwrap_or_else(|| panic!("job {j}'s run from {start} is not in the ledger: {ledger:?}"));
        assert_eq!(*run_end, Some(end), "job {j}: the run's end");
        assert_eq!(*gpus, 8);
        slurm_gpu_s += (end - start) * 8;
    }
    // The free job's first run: ended by its grace time, not before, and
    // never charged (min_runtime=0).
    let first = ledger.iter().find(|((j, start), _)| *j == free && slurm_last.get(j).is_none_or(|(s, _)| s != start)).expect("the free job's preempted run");
    let first_end = first.1 .0.unwrap();
    assert!(first_end >= preempt_time + GRACE - 1, "the free job kept its grace time: preempted at {preempt_time}, run ended at {first_end}");
    assert!(first_end <= preempt_time + GRACE + 45, "the free job was requeued at its grace time's end: preempted at {preempt_time}, run ended at {first_end}");
    eprintln!("failover: the free job's run ended {} s after its preemption (grace {GRACE} s)", first_end - preempt_time);
    let ledger_gpu_s: i64 = ledger
        .iter()
        .filter(|((j, s), _)| slurm_last.get(j).is_some_and(|(start, _)| start == s))
        .map(|((_, s), (e, g, _))| (e.unwrap() - s) * *g as i64)
        .sum();
    eprintln!(
        "failover: {} runs in Slurm's records and {} in the ledger; {slurm_gpu_s} GPU-s each side ({ledger_gpu_s} in the ledger); order before {order_before:?}, after {order_after:?}",
        jobs.len() + 1,
        ledger.len()
    );
    assert_eq!(ledger_gpu_s, slurm_gpu_s);
}
