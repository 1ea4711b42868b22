//! allot's own faults inside slurmctld: each hook's fail-safe answer, with
//! a fault injected on purpose (allot_slurm::fault, ALLOT_INJECT_FAULT in
//! slurmctld's environment) on a real Slurm of each supported release. A
//! fault never lets a job run protected or uncharged, never stops every
//! submission, and never leaves slurmctld's job list or priorities half done.
//!
//! Needs root and the packages of `scripts/install-deps.sh`, and the release
//! build: the README's test command does all of it.

use allot_cluster_tests::{secs, sleep_job, text, Options, Release, TestCluster, BUDGET};

fn with_fault(point: &'static str) -> Options {
    Options { inject_fault: Some(point), ..Options::default() }
}

/// The comment job_submit/allot gives a job it could not check
/// (allot_slurm::export::UNCHECKED_COMMENT).
const UNCHECKED_COMMENT: &str = "min_runtime=0 priority=normal";

#[test]
fn f1_a_failing_submission_check_accepts_the_job_only_unallocated_and_says_so() {
    // The check fails for the first submission only.
    let c = TestCluster::start("fault-submit", BUDGET, with_fault("job_submit@1"));
    // carol asks for 32 GPUs, protected for an hour, on a budget she is
    // not in: unchecked, that would be a free, protected cluster.
    let out = c.slurm(
        Some("carol"),
        "sbatch",
        &["--parsable", "-o", "/dev/null", "-A", "teama", "--gres=gpu:8", "-N", "4", "--requeue", "--comment=min_runtime=1h", &sleep_job(120)],
    );
    assert!(out.status.success(), "a fault in the check stopped the submission: {}", text(&out));
    let said = text(&out);
    assert!(said.contains("the budget check failed inside slurmctld") && said.contains("accepted unallocated"), "sbatch did not tell why: {said}");
    let free: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(c.job(free).comment(), UNCHECKED_COMMENT, "the job kept the contract it asked for");
    assert!(c.ctld_log().contains("accepted unallocated"), "slurmctld's log does not say what happened");
    c.wait_state(free, "RUNNING", secs(30));

    // The next submission is checked again: carol's own budget, allocated.
    let e = c.sbatch("carol", &["-A", "teama", "--gres=gpu:8", "--comment=min_runtime=1h", &sleep_job(1)]).unwrap_err();
    assert!(e.contains("not a member of budget lab/teama"), "{e}");
    // An allocated job takes the unchecked one's GPUs at once: it is
    // free and unprotected, as it says.
    let allocated = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=10s", &sleep_job(5)]).unwrap();
    c.wait_state(allocated, "RUNNING", secs(60));
    let j = c.job(free);
    assert!(j.restarts() >= 1 || j.state() == "PENDING", "the unchecked job was not preempted: {} restarts {}", j.state(), j.restarts());
    // Its runs are never charged.
    c.wait_for("the unchecked job's run in the ledger", secs(30), || c.ledger().runs_of_job(free).unwrap().iter().any(|r| r.run_end.is_some()));
    let runs = c.ledger().runs_of_job(free).unwrap();
    assert!(runs.iter().all(|r| !r.allocated), "the unchecked job was charged: {runs:?}");
}

#[test]
fn f2_a_failing_update_check_refuses_what_allot_checks_and_lets_the_rest_through() {
    let c = TestCluster::start("fault-modify", BUDGET, with_fault("job_modify"));
    let id = c.sbatch("alice", &["--hold", "--gres=gpu:1", "--comment=min_runtime=0", &sleep_job(3)]).unwrap();
    // A contract raised while the check cannot run: refused.
    let out = c.slurm(Some("alice"), "scontrol", &["update", &format!("jobid={id}"), "comment=min_runtime=8h"]);
    assert!(!out.status.success(), "an unchecked update of the contract went through: {}", text(&out));
    if Release::current().name != "22.05" {
        // 22.05 shows the user only the error code's text.
        assert!(text(&out).contains("the budget check failed inside slurmctld"), "{}", text(&out));
    }
    assert!(c.job(id).comment().starts_with("min_runtime=0"), "{}", c.job(id).comment());
    // So are a new account and a new size.
    let out = c.slurm(Some("alice"), "scontrol", &["update", &format!("jobid={id}"), "NumNodes=4"]);
    assert!(!out.status.success(), "an unchecked update of the size went through: {}", text(&out));
    // A release touches nothing allot checks: it goes through, and the job runs.
    let out = c.slurm(Some("alice"), "scontrol", &["release", &id.to_string()]);
    assert!(out.status.success(), "a fault in allot stopped a release: {}", text(&out));
    c.wait_state(id, "COMPLETED", secs(60));
    assert!(c.ctld_log().contains(&format!("could not check an update of JobId={id}")), "slurmctld's log does not say what happened");
}

#[test]
fn f3_a_walk_that_fails_halfway_loses_no_run_and_the_next_one_recovers() {
    // The priority plugin's walk of the job list fails halfway, twice.
    let options = Options { recompute_period: 2, ..with_fault("priority_walk@2") };
    let c = TestCluster::start("fault-walk", BUDGET, options);
    let mut jobs = Vec::new();
    for (i, user) in ["alice", "bob", "carol", "dave", "alice", "bob"].iter().enumerate() {
        jobs.push(c.sbatch(user, &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(2 + i as u32)]).unwrap());
    }
    c.wait_for("every job ends", secs(90), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    let log = c.ctld_log();
    assert!(log.contains("fault injected at priority_walk"), "the fault never fired:\n{log}");
    assert!(log.contains("a recompute failed"), "{log}");
    // Every run reaches the ledger, as Slurm ran it, charged.
    let slurm: std::collections::HashMap<u32, allot_cluster_tests::JobInfo> = c.jobs_epoch().into_iter().map(|j| (j.id, j)).collect();
    c.wait_for("every run in the ledger", secs(60), || jobs.iter().all(|&j| c.ledger().runs_of_job(j).unwrap().iter().any(|r| r.run_end.is_some())));
    let l = c.ledger();
    for &j in &jobs {
        let runs = l.runs_of_job(j).unwrap();
        let s = &slurm[&j];
        assert_eq!(runs.len(), 1, "job {j}: {runs:?}");
        let want = (s.get("StartTime").parse::<i64>().unwrap(), s.get("EndTime").parse::<i64>().unwrap());
        assert_eq!((runs[0].run_start, runs[0].run_end.unwrap()), want, "job {j}: the ledger's run is not Slurm's");
        assert!(runs[0].allocated && runs[0].gpus == 2, "job {j}: {runs:?}");
    }
    // And the job list is whole: slurmctld answers, and takes new work.
    let after = c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    c.wait_state(after, "COMPLETED", secs(60));
}

#[test]
fn f4_a_refusal_quoting_a_huge_word_is_logged_bounded() {
    // H5: each refused update logs the offending word; a 1 MB word twenty
    // times must not grow slurmctld's log by 20 MB.
    let c = TestCluster::start("fault-log", BUDGET, Options::default());
    let id = c.sbatch("alice", &["--hold", "--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    let before = std::fs::metadata(c.dir.join("log/slurmctld.log")).unwrap().len();
    // A word Slurm takes in an update (its 1 KiB bound on comments holds
    // at submission only), allot refuses, and the refusal names: 100 kB,
    // near the most one argument of a command may carry (128 KiB).
    let word = format!("min_runtime={}", "9".repeat(100_000));
    for _ in 0..20 {
        let out = c.slurm(Some("alice"), "scontrol", &["update", &format!("jobid={id}"), &format!("comment={word}")]);
        assert!(!out.status.success(), "{}", text(&out));
    }
    let log = c.ctld_log();
    let refusals: Vec<&str> = log.lines().filter(|l| l.contains(&format!("refused update of JobId={id}"))).collect();
    assert_eq!(refusals.len(), 20, "{log}");
    for line in &refusals {
        assert!(line.len() <= 2048 + 120, "a refusal's log line is {} bytes", line.len());
    }
    let grown = std::fs::metadata(c.dir.join("log/slurmctld.log")).unwrap().len() - before;
    assert!(grown < 20 * 4096, "20 refusals grew the log by {grown} bytes");
    // Control characters in a comment never reach the log as they are.
    let out = c.slurm(Some("alice"), "scontrol", &["update", &format!("jobid={id}"), "comment=min_runtime=\u{1b}[2J"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!c.ctld_log().contains('\u{1b}'), "an escape byte reached slurmctld's log");
}

#[test]
fn f5_a_failing_preemption_check_keeps_free_work_free_and_preempts_nothing_else() {
    let c = TestCluster::start("fault-preempt", BUDGET, with_fault("preemptable"));
    // Free work on the whole cluster: an allocated job still takes its GPUs.
    let free = c.sbatch("carol", &["-N", "4", "--gres=gpu:8", "--requeue", "--comment=min_runtime=0", &sleep_job(300)]).unwrap();
    c.wait_state(free, "RUNNING", secs(30));
    let allocated = c.sbatch("alice", &["-N", "4", "--gres=gpu:8", "--comment=min_runtime=5s", &sleep_job(40)]).unwrap();
    c.wait_state(allocated, "RUNNING", secs(60));
    assert!(c.job(free).restarts() >= 1, "the free job was not preempted");
    assert!(c.ctld_log().contains("fault injected at preemptable"), "the fault never fired");
    // Past alice's minimum runtime, bob's team (which has used nothing)
    // ranks above hers: the policy would preempt her. Unchecked, nothing
    // allocated is preempted.
    std::thread::sleep(secs(6));
    let waiting = c.sbatch("bob", &["--gres=gpu:8", "--comment=min_runtime=5s", &sleep_job(5)]).unwrap();
    std::thread::sleep(secs(15));
    assert_eq!(c.job(allocated).restarts(), 0, "an allocated run was preempted while the check could not run");
    assert_eq!(c.job(allocated).state(), "RUNNING");
    assert_eq!(c.job(waiting).state(), "PENDING");
}
