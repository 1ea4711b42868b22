//! allot with Slurm's accounting: slurmdbd and a real MariaDB (Debian's),
//! `AccountingStorageEnforce=associations`, gres/gpu recorded. Slurm then
//! admits only jobs whose user has an association with their account, moves
//! pending jobs between accounts on `scontrol update`, and keeps its own
//! record of every run (sacct): allot's associations, its checks of account
//! changes and its charges are tested against that.
//!
//! Needs root and `scripts/install-deps.sh --accounting`, and the release
//! build: the README's test command does all of it.

use std::collections::{BTreeMap, HashMap};

use allot_cluster_tests::{secs, sleep_job, text, Options, Release, TestCluster, BUDGET};
use allot_ledger::{Ledger, RunRow};

fn accounting() -> Options {
    Options { accounting: true, ..Options::default() }
}

/// `sacctmgr -nP show assoc format=account,user` as (account, user) pairs.
fn associations(c: &TestCluster) -> Vec<(String, String)> {
    let out = c.slurm(None, "sacctmgr", &["-nP", "show", "assoc", "cluster=allot", "format=account,user"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut pairs: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(a, u)| !u.is_empty() && *a != "root")
        .map(|(a, u)| (a.to_owned(), u.to_owned()))
        .collect();
    pairs.sort();
    pairs
}

#[test]
fn a1_the_budget_gives_slurmdbd_its_accounts_and_associations() {
    let c = TestCluster::start("assocs", BUDGET, accounting());
    // Without associations, Slurm refuses even a member's job.
    let e = c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap_err();
    assert!(e.contains("Invalid account or account/partition combination"), "{e}");

    // The printed lines, run as an admin would, give every member what allot lets them charge.
    let printed = c.allot_in_release(&["associations"]);
    assert!(printed.status.success(), "{}", text(&printed));
    let script = String::from_utf8_lossy(&printed.stdout).into_owned();
    assert!(script.contains("sacctmgr -i add account teama Cluster=allot 'Description=allot budget lab/teama' Organization=lab"), "{script}");
    let ran = c.run_script(&script);
    assert!(ran.status.success(), "the printed sacctmgr lines failed:\n{}", text(&ran));
    let want: Vec<(String, String)> = [("other", "carol"), ("teama", "alice"), ("teama", "dave"), ("teamb", "bob"), ("teamb", "dave")]
        .iter()
        .map(|(a, u)| (a.to_string(), u.to_string()))
        .collect();
    assert_eq!(associations(&c), want);
    // --apply finds nothing missing.
    assert!(c.apply_associations().contains("every account and association the budget needs is there (3 accounts, 4 users)"));

    // Jobs go in, charged where allot says: dave's default is teama.
    let alice = c.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", "--hold", &sleep_job(1)]).unwrap();
    let dave = c.sbatch("dave", &["--gres=gpu:1", "--comment=min_runtime=5s", "--hold", &sleep_job(1)]).unwrap();
    assert_eq!((c.job(alice).get("Account"), c.job(dave).get("Account")), ("teama", "teama"));
    // An odd spelling is the budget's account before Slurm looks for the association.
    let spelled = c.sbatch("alice", &["--account= TeamA ", "--gres=gpu:1", "--comment=min_runtime=5s", "--hold", &sleep_job(1)]).unwrap();
    assert_eq!(c.job(spelled).get("Account"), "teama");
    // A user of no budget has no association and no default leaf.
    let e = c.sbatch("erin", &["--gres=gpu:1", &sleep_job(1)]).unwrap_err();
    assert!(e.contains("user 'erin' has no default budget"), "{e}");

    // An admin's stray association does not open a budget: Slurm would take
    // bob's job in teama, allot refuses it; --apply names the stray.
    let out = c.slurm(None, "sacctmgr", &["-i", "add", "user", "bob", "account=teama", "cluster=allot"]);
    assert!(out.status.success(), "{}", text(&out));
    let e = c.sbatch("bob", &["--account=teama", "--gres=gpu:1", &sleep_job(1)]).unwrap_err();
    assert!(e.contains("user 'bob' is not a member of budget lab/teama"), "{e}");
    let applied = c.apply_associations();
    assert!(applied.contains("bob has an association with teama, which the budget does not give them"), "{applied}");
}

#[test]
fn a2_account_changes_take_effect_in_slurm_only_where_allot_allows_them() {
    let c = TestCluster::start("acctmoves", BUDGET, accounting());
    c.apply_associations();
    // bob also has a stray Slurm association with teama.
    let out = c.slurm(None, "sacctmgr", &["-i", "add", "user", "bob", "account=teama", "cluster=allot"]);
    assert!(out.status.success(), "{}", text(&out));

    // dave belongs to both teams: his pending job moves, in Slurm too, and
    // its run is charged to the budget it moved to.
    let moved = c.sbatch("dave", &["--hold", "--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(3)]).unwrap();
    assert_eq!(c.job(moved).get("Account"), "teama");
    let out = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={moved}"), "account=TeamB"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(c.job(moved).get("Account"), "teamb", "with slurmdbd, Slurm moves the job");
    let out = c.slurm(Some("dave"), "scontrol", &["release", &moved.to_string()]);
    assert!(out.status.success(), "{}", text(&out));

    // bob may not move his job to teama, whatever slurmdbd says.
    let kept = c.sbatch("bob", &["--hold", "--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    let out = c.slurm(Some("bob"), "scontrol", &["update", &format!("jobid={kept}"), "account=teama"]);
    assert!(!out.status.success(), "bob moved his job to teama: {}", text(&out));
    if Release::current().name != "22.05" {
        assert!(text(&out).contains("not a member of budget lab/teama"), "{}", text(&out));
    }
    assert_eq!(c.job(kept).get("Account"), "teamb");

    // A running job keeps its budget (allot's rule; Slurm's too).
    let running = c.sbatch("dave", &["--gres=gpu:1", "--comment=min_runtime=1m", &sleep_job(60)]).unwrap();
    c.wait_state(running, "RUNNING", secs(30));
    let out = c.slurm(Some("dave"), "scontrol", &["update", &format!("jobid={running}"), "account=teamb"]);
    assert!(!out.status.success(), "a running job changed budget: {}", text(&out));
    assert_eq!(c.job(running).get("Account"), "teama");

    c.wait_state(moved, "COMPLETED", secs(60));
    c.wait_for("the moved job's run in the ledger", secs(30), || c.ledger().runs_of_job(moved).unwrap().iter().any(|r| r.run_end.is_some()));
    let runs = c.ledger().runs_of_job(moved).unwrap();
    assert_eq!((runs[0].leaf.as_deref(), runs[0].account.as_deref(), runs[0].gpus), (Some("lab/teamb"), Some("teamb"), 2), "{runs:?}");
}

#[test]
fn a3_allot_charges_what_sacct_records_within_one_percent() {
    // A mixed workload: allocated jobs of several sizes and lengths, an
    // array, unallocated jobs that allocated ones preempt and requeue, an
    // admin's requeue, a failure and a cancellation mid-run.
    let c = TestCluster::start("sacct", BUDGET, accounting());
    c.apply_associations();
    let t0 = allot_cluster_tests::now();
    let mut jobs = Vec::new();
    let free: Vec<u32> = (0..3).map(|_| c.sbatch("carol", &["--gres=gpu:8", "--comment=min_runtime=0", "--requeue", &sleep_job(25)]).unwrap()).collect();
    jobs.extend(&free);
    c.wait_for("the unallocated jobs run", secs(30), || free.iter().all(|&j| c.job(j).state() == "RUNNING"));
    for (i, user) in ["alice", "bob", "dave", "alice", "bob", "carol"].iter().enumerate() {
        let gpus = [8, 4, 2, 1, 8, 3][i];
        jobs.push(c.sbatch(user, &[&format!("--gres=gpu:{gpus}"), "--comment=min_runtime=5s", "--requeue", &sleep_job(4 + 3 * i as u32)]).unwrap());
    }
    let array = c.sbatch("bob", &["--gres=gpu:1", "--array=0-3", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap();
    let failing = c.sbatch("alice", &["--gres=gpu:2", "--comment=min_runtime=5s", "--wrap=sleep 3; exit 1"]).unwrap();
    let cancelled = c.sbatch("dave", &["--gres=gpu:1", "--account=teamb", "--comment=min_runtime=5s", &sleep_job(60)]).unwrap();
    let requeued = c.sbatch("carol", &["--gres=gpu:2", "--comment=min_runtime=5s", "--requeue", &sleep_job(8)]).unwrap();
    jobs.extend([failing, cancelled, requeued]);
    c.wait_state(requeued, "RUNNING", secs(60));
    std::thread::sleep(secs(2));
    let out = c.scontrol(&["requeue", &requeued.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    c.wait_state(cancelled, "RUNNING", secs(60));
    std::thread::sleep(secs(3));
    c.slurm(None, "scancel", &[&cancelled.to_string()]);
    let tasks = || c.jobs().into_iter().filter(|j| j.get("ArrayJobId") == array.to_string()).map(|j| j.id).collect::<Vec<_>>();
    c.wait_for("every job ends", secs(240), || {
        let all = c.jobs();
        let done = |id: &u32| all.iter().any(|j| j.id == *id && ["COMPLETED", "FAILED", "CANCELLED"].contains(&j.state()));
        jobs.iter().all(done) && tasks().len() == 4 && tasks().iter().all(done)
    });
    jobs.extend(tasks());
    let preempted = free.iter().filter(|&&j| c.job(j).restarts() > 0).count();
    assert!(preempted >= 1, "no unallocated job was preempted: the workload lost its point");

    // Slurm's record (sacct) against allot's (the ledger), per account.
    let mut slurm: Vec<allot_cluster_tests::SacctRun> = Vec::new();
    let mut ledger: HashMap<u32, Vec<RunRow>> = HashMap::new();
    c.wait_for("every run in sacct and in the ledger", secs(90), || {
        slurm = c.sacct_runs(&jobs);
        let Ok(l) = Ledger::open_read_only(c.ledger_path()) else { return false };
        ledger = jobs.iter().map(|&j| (j, l.runs_of_job(j).unwrap_or_default())).collect();
        let started: usize = slurm.iter().filter(|r| r.gpus > 0).count();
        let closed: usize = ledger.values().flatten().filter(|r| r.run_end.is_some() && r.run_start >= t0 - 1).count();
        closed >= started && ledger.values().flatten().all(|r| r.run_end.is_some())
    });
    let allocated: HashMap<u32, bool> = ledger.iter().filter_map(|(j, runs)| Some((*j, runs.first()?.allocated))).collect();
    let mut by_account: BTreeMap<String, [i64; 4]> = BTreeMap::new(); // [sacct all, ledger all, sacct allocated, ledger charged]
    for r in &slurm {
        let e = by_account.entry(r.account.clone()).or_default();
        let gpu_s = (r.end - r.start) * r.gpus;
        e[0] += gpu_s;
        if allocated.get(&r.job).copied().unwrap_or(true) {
            e[2] += gpu_s;
        }
    }
    for r in ledger.values().flatten() {
        let e = by_account.entry(r.account.clone().unwrap_or_default()).or_default();
        let gpu_s = (r.run_end.unwrap() - r.run_start) * r.gpus as i64;
        e[1] += gpu_s;
        if r.allocated {
            e[3] += gpu_s;
        }
    }
    eprintln!(
        "GPU-seconds per account [sacct, ledger, sacct of allocated jobs, ledger charged]: {by_account:?}; {} sacct runs, {} ledger runs",
        slurm.len(),
        ledger.values().flatten().count()
    );
    assert!(by_account.len() >= 3, "{by_account:?}");
    let within = |a: i64, b: i64| (a - b).abs() as f64 <= 0.01 * a.max(b) as f64;
    for (account, [s_all, l_all, s_alloc, l_charged]) in &by_account {
        assert!(*s_all > 0, "{account}: sacct recorded nothing");
        assert!(within(*s_all, *l_all), "{account}: sacct {s_all} GPU-s, ledger {l_all}");
        assert!(within(*s_alloc, *l_charged), "{account}: sacct {s_alloc} GPU-s of allocated jobs, ledger charged {l_charged}");
    }
    // carol's unallocated time is recorded, never charged.
    let carol = by_account["other"];
    assert!(carol[1] > carol[3], "carol's unallocated runs are not apart from her charged ones: {carol:?}");
}
