//! A ledger on a database server: a real Slurm with allot's
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

/// GPUs a job held, from Slurm's record (`TresPerNode=gres:gpu:N` on each
/// of its `NumNodes`).
fn gpus_of(job: &JobInfo) -> i64 {
    let per_node: i64 = job.get("TresPerNode").rsplit(':').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    per_node * job.get("NumNodes").parse::<i64>().unwrap_or(1)
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

/// The ledger's closed runs of `jobs` on `c`'s cluster: (job, start) ->
/// (end, GPUs).
fn ledger_runs(c: &TestCluster, jobs: &[u32]) -> BTreeMap<(u32, i64), (i64, i64)> {
    let Ok(l) = c.read_ledger().and_then(|l| l.for_cluster(Some(c.cluster_name.as_str()))) else { return BTreeMap::new() };
    jobs.iter().flat_map(|&j| l.runs_of_job(j).unwrap_or_default()).filter_map(|r| Some(((r.job_id, r.run_start), (r.run_end?, r.gpus as i64)))).collect()
}

fn gpu_seconds(runs: &BTreeMap<(u32, i64), (i64, i64)>) -> i64 {
    runs.iter().map(|((_, start), (end, gpus))| (end - start) * gpus).sum()
}

/// Waits for Slurm's record of every run of `jobs` (ALLOT_RUN_LOG) and for
/// the ledger to hold as many of `c`'s cluster; asserts they are the same
/// runs, start, end and GPUs; prints both totals under `what`.
fn assert_runs_as_slurm_recorded(c: &TestCluster, jobs: &[u32], what: &str) {
    let mut slurm = BTreeMap::new();
    c.wait_for("Slurm's record of every run end", secs(30), || {
        slurm = slurm_runs(c, jobs);
        slurm.len() >= jobs.len()
    });
    let mut ledger = BTreeMap::new();
    wait_ranked(c, &format!("{what}: every run in the ledger"), |c| {
        ledger = ledger_runs(c, jobs);
        ledger.len() >= slurm.len()
    });
    eprintln!("{what}: Slurm {} runs, {} GPU-s; ledger {} runs, {} GPU-s", slurm.len(), gpu_seconds(&slurm), ledger.len(), gpu_seconds(&ledger));
    assert_eq!(ledger, slurm, "{what}: every run, its start, end and GPUs, as Slurm recorded them");
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
    let down_jobs: Vec<u32> =
        (0..4).map(|i| c.sbatch(["alice", "bob"][i % 2], &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2 + i as u32)]).unwrap()).collect();
    jobs.extend(&down_jobs);
    c.wait_for("the jobs submitted while the server is down end", secs(60), || down_jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    let log = c.ctld_log();
    assert!(log.contains("writing the ledger") && log.contains("kept in memory"), "slurmctld logs the server's fault and that runs are kept:\n{log}");
    assert!(!log.contains("w-secret"), "the password never reaches the log");

    // The server comes back: everything held in memory is written.
    c.with_server(|s| s.restart());
    c.wait_for("every job ends", secs(90), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
    assert_runs_as_slurm_recorded(&c, &jobs, "server ledger");
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

/// Wakes `c`'s priority plugin until `check` holds of its jobs.
fn wait_ranked(c: &TestCluster, what: &str, mut check: impl FnMut(&TestCluster) -> bool) {
    c.wait_for(what, secs(30), || {
        wake_recompute(c);
        check(c)
    });
}

/// Two clusters of a lab (ClusterName alpha and beta, each its own
/// slurmctld, nodes and ports) on one server ledger and one budget: job ids
/// collide and each cluster's runs stay its own; the commands show one
/// cluster or the lab; fair-share counts each cluster's usage, or the
/// lab's once the budget says `fair_share_usage = "lab"`.
#[test]
fn s3_two_clusters_share_one_server_ledger_and_one_budget() {
    let options = Options { recompute_period: 2, grace: 3, run_log: true, ..Options::default() };
    let alpha = TestCluster::start("labalpha", BUDGET, Options { server_ledger: true, cluster_name: "alpha", ..options.clone() });
    let beta = alpha.start_beside("labbeta", Options { cluster_name: "beta", ..options });

    // Job 1 of each cluster: teama uses all 32 GPUs of alpha, teamb 2 of beta's.
    let a: Vec<u32> = vec![
        // (Protected for all its run: carol's small job waits rather than preempt it.)
        alpha.sbatch("alice", &["-N4", "--gres=gpu:8", "--comment=min_runtime=1m", &sleep_job(6)]).unwrap(),
        alpha.sbatch("carol", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap(),
    ];
    let b: Vec<u32> = vec![beta.sbatch("bob", &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(5)]).unwrap()];
    assert_eq!((a[0], b[0]), (1, 1), "job ids start at 1 on both clusters");
    for (c, jobs) in [(&alpha, &a), (&beta, &b)] {
        c.wait_for("the jobs end", secs(60), || jobs.iter().all(|&j| c.job(j).state() == "COMPLETED"));
        assert_runs_as_slurm_recorded(c, jobs, &format!("cluster {}", c.cluster_name));
    }
    let lab = alpha.read_ledger().unwrap();
    assert_eq!(lab.clusters().unwrap(), vec!["alpha".to_owned(), "beta".to_owned()]);
    assert_eq!(lab.clusters_of_job(1).unwrap(), vec!["alpha".to_owned(), "beta".to_owned()]);
    let charged = |l: &allot_ledger::Ledger| l.charged_by_leaf(0, allot_cluster_tests::now() + 1).unwrap().into_iter().collect::<BTreeMap<_, _>>();
    let (on_alpha, on_beta, on_lab) = (
        charged(&lab.for_cluster(Some("alpha")).unwrap()),
        charged(&alpha.read_ledger().unwrap().for_cluster(Some("beta")).unwrap()),
        charged(&alpha.read_ledger().unwrap()),
    );
    assert!(on_alpha["lab/teama"] >= 32 * 5 && !on_alpha.contains_key("lab/teamb"), "{on_alpha:?}");
    assert!(on_beta["lab/teamb"] >= 2 * 4 && !on_beta.contains_key("lab/teama"), "{on_beta:?}");
    assert_eq!(
        on_lab["lab/teama"] + on_lab["lab/teamb"] + on_lab["other"],
        on_alpha.values().sum::<i64>() + on_beta.values().sum::<i64>(),
        "the lab is both clusters"
    );
    let snapshot = alpha.read_ledger().unwrap().usage_snapshot().unwrap().unwrap();
    assert_eq!(snapshot.capacity_gpus, 64, "the lab's GPUs: both clusters' 32");

    // The commands: one cluster, or the lab.
    let said = |o: std::process::Output| (o.status.success(), text(&o));
    let (ok, usage) = said(alpha.allot(&["usage", "--cluster", "beta"]));
    assert!(ok && usage.contains("32 GPUs"), "{usage}");
    let (ok, lab_usage) = said(alpha.allot(&["usage"]));
    assert!(ok && lab_usage.contains("64 GPUs"), "allot usage shows the lab: {lab_usage}");
    let (ok, why) = said(alpha.allot(&["why", "1"]));
    assert!(!ok && why.contains("job 1 is on clusters alpha, beta") && why.contains("--cluster"), "{why}");
    let (ok, why) = said(alpha.allot(&["why", "1", "--cluster", "beta"]));
    assert!(ok && why.contains("user bob") && !why.contains("user alice"), "{why}");
    let json = |args: &[&str]| -> serde_json::Value {
        let (ok, out) = said(alpha.allot(args));
        assert!(ok, "{args:?}: {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let lab_report = json(&["report", "--json", "-"]);
    assert_eq!(
        (lab_report["jobs"].as_u64(), lab_report["jobs_started"].as_u64(), lab_report["gpus"].as_u64()),
        (Some(3), Some(3), Some(64)),
        "the lab's report: both clusters' jobs"
    );
    let alpha_report = json(&["report", "--json", "-", "--cluster", "alpha"]);
    assert_eq!((alpha_report["jobs"].as_u64(), alpha_report["gpus"].as_u64()), (Some(2), Some(32)));
    // The page: the lab, with a link to each cluster's queue; a cluster's own.
    let (lab_page, beta_page, why_page) = {
        let mut serve = std::process::Command::new(allot_cluster_tests::target_release().join("allot"))
            .args(["--ledger", &alpha.ledger_location().to_string(), "serve", "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(serve.stdout.take().unwrap()), &mut first).unwrap();
        let addr = first.split("http://").nth(1).and_then(|r| r.split('/').next()).unwrap_or_else(|| panic!("allot serve said: {first}")).to_owned();
        let get = |path: &str| {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
            let mut body = String::new();
            c.read_to_string(&mut body).unwrap();
            body
        };
        let pages = (get("/"), get("/?cluster=beta"), get("/why?job=1&cluster=beta"));
        let _ = serve.kill();
        let _ = serve.wait();
        pages
    };
    assert!(lab_page.contains("the lab (alpha, beta), 64 GPUs") && lab_page.contains("href=\"/?cluster=beta#queue\""), "{lab_page}");
    assert!(beta_page.contains("cluster beta, 32 GPUs") && beta_page.contains("No job is waiting"), "{beta_page}");
    assert!(why_page.contains("user bob") && !why_page.contains("user alice"), "{why_page}");
    let (ok, unknown) = said(alpha.allot(&["usage", "--cluster", "gamma"]));
    assert!(!ok && unknown.contains("no cluster 'gamma'") && unknown.contains("clusters alpha, beta"), "{unknown}");

    // Fair-share on beta, which is full: teama waits beside teamb. By beta's
    // own usage teamb used more (teama ran on alpha only), so teama's job
    // ranks first; counting the lab's, teama (32 GPUs on alpha) ranks last.
    let blocker = beta.sbatch("carol", &["-N4", "--gres=gpu:8", "--comment=min_runtime=2m", &sleep_job(120)]).unwrap();
    beta.wait_state(blocker, "RUNNING", secs(30));
    let teama = beta.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    let teamb = beta.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    wait_ranked(&beta, "teama's job ahead by beta's own usage", |c| c.job(teama).priority() > c.job(teamb).priority());
    let lab_budget = alpha.dir.join("lab.toml");
    std::fs::write(&lab_budget, BUDGET.replacen("[cluster]\n", "[cluster]\nfair_share_usage = \"lab\"\n", 1)).unwrap();
    let (ok, sync) = said(alpha.allot(&["sync", lab_budget.to_str().unwrap()]));
    assert!(ok && sync.contains("fair_share_usage"), "one sync for every cluster: {sync}");
    wait_ranked(&beta, "teamb's job ahead by the lab's usage", |c| c.job(teamb).priority() > c.job(teama).priority());
    // `allot why` ranks by the same usage.
    let rank = |job: u32| {
        let (ok, why) = said(alpha.allot(&["why", &job.to_string(), "--cluster", "beta"]));
        assert!(ok, "{why}");
        why.split("ranks ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.trim_end_matches(char::is_alphabetic).parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no rank in: {why}"))
    };
    assert!(rank(teamb) < rank(teama), "allot why ranks teamb above teama by the lab's usage");
    // And back: each cluster's own usage again.
    let (ok, sync) = said(alpha.allot(&["sync", alpha.dir.join("budgets.toml").to_str().unwrap()]));
    assert!(ok, "{sync}");
    wait_ranked(&beta, "teama's job ahead again by beta's own usage", |c| c.job(teama).priority() > c.job(teamb).priority());
    let cancel = beta.slurm(None, "scancel", &[&blocker.to_string(), &teama.to_string(), &teamb.to_string()]);
    assert!(cancel.status.success(), "scancel: {}", text(&cancel));

    // Per-cluster funding in the one budget file: teamb is funded on alpha
    // only, and `other` gets three times lab's share on beta.
    let funded = alpha.dir.join("funded.toml");
    let funded_text = BUDGET.replacen("[budget.lab.teamb]\n", "[budget.lab.teamb]\nclusters = [\"alpha\"]\n", 1).replacen(
        "[budget.other]\nshare = 1\n",
        "[budget.other]\nshare = 1\ncluster_shares = { beta = 3 }\n",
        1,
    );
    std::fs::write(&funded, funded_text).unwrap();
    // Accepted before teamb loses its funding on beta, waiting on a full beta:
    // teamb's allocated job, and teama's unallocated one behind it.
    let blocker = beta.sbatch("carol", &["-N4", "--gres=gpu:8", "--comment=min_runtime=2m", &sleep_job(120)]).unwrap();
    beta.wait_state(blocker, "RUNNING", secs(30));
    let teamb_paid = beta.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    let teama_free = beta.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=0", &sleep_job(1)]).unwrap();
    wait_ranked(&beta, "an allocated job ahead of an unallocated one", |c| c.job(teamb_paid).priority() > c.job(teama_free).priority());
    let (ok, sync) = said(alpha.allot(&["sync", funded.to_str().unwrap()]));
    assert!(
        ok && sync.contains("lab/teamb funded on every cluster -> on alpha")
            && sync.contains("other funded on every cluster -> on every cluster (beta: share 3)"),
        "{sync}"
    );
    let percent_of = |shown: &str, node: &str| -> String {
        let line =
            shown.lines().find(|l| l.contains(&format!(" {node} ")) || l.contains(&format!("─ {node} "))).unwrap_or_else(|| panic!("no {node} in:\n{shown}"));
        line.split_whitespace().find(|w| w.ends_with('%')).unwrap().to_owned()
    };
    let (ok, shown) = said(alpha.allot(&["budget", "show", "--cluster", "beta"]));
    assert!(ok, "{shown}");
    assert_eq!(
        (percent_of(&shown, "teama"), percent_of(&shown, "teamb"), percent_of(&shown, "other")),
        ("25.00%".into(), "0.00%".into(), "75.00%".into()),
        "{shown}"
    );
    let (ok, shown) = said(alpha.allot(&["budget", "show", "--cluster", "alpha"]));
    assert!(ok && percent_of(&shown, "teamb") == "25.00%" && shown.contains("[funded on alpha]"), "{shown}");
    // Unfunded on beta, teamb's accepted job holds no allocation there: it
    // waits as an unallocated job, behind teama's.
    wait_ranked(&beta, "teamb's job waits as an unallocated one once teamb is unfunded on beta", |c| {
        c.job(teama_free).priority() > c.job(teamb_paid).priority()
    });
    let cancel = beta.slurm(None, "scancel", &[&blocker.to_string(), &teamb_paid.to_string(), &teama_free.to_string()]);
    assert!(cancel.status.success(), "scancel: {}", text(&cancel));
    // The plugins of beta take the new budget within their follow period.
    let mut refused = String::new();
    beta.wait_for("beta refuses teamb's allocated jobs", secs(30), || match beta.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]) {
        Err(e) => {
            refused = e;
            true
        }
        Ok(j) => {
            beta.slurm(None, "scancel", &[&j.to_string()]);
            false
        }
    });
    assert!(refused.contains("budget lab/teamb is not funded on cluster beta (it is on: alpha)") && refused.contains("min_runtime=0"), "{refused}");
    let free = beta.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=0", &sleep_job(1)]);
    assert!(free.is_ok(), "an unallocated job runs anywhere: {free:?}");
    let paid = alpha.sbatch("bob", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]);
    assert!(paid.is_ok(), "teamb is funded on alpha: {paid:?}");
    beta.wait_state(free.unwrap(), "COMPLETED", secs(30));
    alpha.wait_state(paid.unwrap(), "COMPLETED", secs(30));
}

/// A lab's faults between one cluster and the ledger's server, the other
/// cluster's link untouched: beta reaches the server through a proxy that
/// first makes every exchange slow (hundreds of milliseconds), then cuts the
/// link for a while. Submissions on beta stay fast and checked, its jobs run,
/// alpha's runs are written all along, and beta's are written once its link
/// is back, exactly as its Slurm recorded them.
#[test]
fn s4_a_cluster_whose_link_to_the_server_is_slow_or_cut_keeps_scheduling_and_loses_nothing() {
    let options = Options { recompute_period: 2, grace: 3, run_log: true, ..Options::default() };
    let alpha = TestCluster::start("linkalpha", BUDGET, Options { server_ledger: true, cluster_name: "alpha", ..options.clone() });
    let proxy = alpha.ledger_proxy();
    let beta = alpha.start_beside_through("linkbeta", Options { cluster_name: "beta", ..options }, &proxy);
    let conf = std::fs::read_to_string(beta.dir.join("etc/allot.conf")).unwrap();
    assert!(conf.contains("ledger-proxy.sock"), "beta's ledger is reached through the proxy: {conf}");
    let first = beta.sbatch("bob", &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    wait_ranked(&beta, "beta's first run in the ledger", |c| ledger_runs(c, &[first]).len() == 1);

    // Slow: every chunk either way waits 150 ms, so a statement takes 300 ms or more.
    proxy.set_delay(std::time::Duration::from_millis(150));
    let computed =
        |c: &TestCluster| c.read_ledger().unwrap().for_cluster(Some(c.cluster_name.as_str())).unwrap().usage_snapshot().unwrap().map_or(0, |s| s.computed_at);
    let t = std::time::Instant::now();
    let before = computed(&beta);
    let one_read = t.elapsed();
    assert!(one_read >= std::time::Duration::from_millis(300), "the link is slow: connecting and one read took {one_read:?}");
    let (mut slow_jobs, mut slowest) = (vec![first], std::time::Duration::ZERO);
    for i in 0..6u32 {
        let t = std::time::Instant::now();
        slow_jobs.push(beta.sbatch(["alice", "bob", "carol"][i as usize % 3], &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap());
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let bad = beta.sbatch("alice", &["--gres=gpu:1", "--comment=min_runtime=9h", &sleep_job(1)]);
    assert!(bad.is_err(), "submissions are still checked: {bad:?}");
    beta.wait_for("the jobs submitted over the slow link run and end", secs(60), || slow_jobs.iter().all(|&j| beta.job(j).state() == "COMPLETED"));
    wait_ranked(&beta, "their runs in the ledger over the slow link", |c| ledger_runs(c, &slow_jobs).len() == slow_jobs.len());
    assert!(computed(&beta) > before, "beta's usage snapshot is still written over the slow link");
    eprintln!("slow link (150 ms a chunk; a connection and one read took {one_read:?}): the slowest of 6 submissions took {slowest:?}");
    assert!(slowest < secs(1), "a submission waited {slowest:?} on the slow link");

    // Cut: beta schedules on, alpha's runs are written meanwhile.
    proxy.set_delay(std::time::Duration::ZERO);
    proxy.set_cut(true);
    let cut_jobs: Vec<u32> =
        (0..4u32).map(|i| beta.sbatch(["alice", "bob"][i as usize % 2], &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2 + i)]).unwrap()).collect();
    let refused = beta.sbatch("mallory", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]);
    assert!(refused.is_err(), "an account outside the budget is refused while the link is cut: {refused:?}");
    let alpha_jobs: Vec<u32> = (0..2u32).map(|i| alpha.sbatch("carol", &["--gres=gpu:4", "--comment=min_runtime=5s", &sleep_job(2 + i)]).unwrap()).collect();
    beta.wait_for("beta's jobs run and end while cut off", secs(60), || cut_jobs.iter().all(|&j| beta.job(j).state() == "COMPLETED"));
    wait_ranked(&alpha, "alpha's runs written while beta is cut off", |c| ledger_runs(c, &alpha_jobs).len() == alpha_jobs.len());
    assert!(ledger_runs(&beta, &cut_jobs).is_empty(), "nothing of beta's reached the server while cut off");
    let log = beta.ctld_log();
    assert!(log.contains("writing the ledger") && log.contains("kept in memory"), "beta's slurmctld says its runs are kept:\n{log}");

    // Back: everything beta kept in memory is written, as its Slurm recorded it.
    proxy.set_cut(false);
    let all: Vec<u32> = slow_jobs.iter().chain(&cut_jobs).copied().collect();
    assert_runs_as_slurm_recorded(&beta, &all, "link cut and restored, beta");
    assert!(beta.ctld_log().contains("writing the ledger: recovered"), "beta's slurmctld logs the recovery");
}

/// A slurmctld that starts while its ledger's server does not answer (the
/// link hangs: connections taken, never answered) starts as fast as with a
/// live server, from the last good copy, and checks and schedules jobs; once
/// the server answers, the runs are written.
#[test]
fn s5_a_slurmctld_starts_without_waiting_for_a_server_that_does_not_answer() {
    let options = Options { recompute_period: 2, grace: 3, run_log: true, ..Options::default() };
    let alpha = TestCluster::start("hangalpha", BUDGET, Options { server_ledger: true, cluster_name: "alpha", ..options.clone() });
    let proxy = alpha.ledger_proxy();
    let beta = alpha.start_beside_through("hangbeta", Options { cluster_name: "beta", ..options }, &proxy);
    let first = beta.sbatch("bob", &["--gres=gpu:2", "--comment=min_runtime=5s", &sleep_job(1)]).unwrap();
    wait_ranked(&beta, "a first run in the ledger (and a last good copy)", |c| ledger_runs(c, &[first]).len() == 1);
    let t = std::time::Instant::now();
    beta.restart_slurmctld();
    let answering = t.elapsed();

    proxy.set_hang(true);
    let t = std::time::Instant::now();
    beta.restart_slurmctld();
    let hanging = t.elapsed();
    eprintln!("slurmctld restart: {answering:?} with the server answering, {hanging:?} with it hanging");
    assert!(hanging < answering + secs(3), "slurmctld waited for a server that does not answer: {hanging:?} against {answering:?}");
    assert!(beta.ctld_log().contains("starting from the last good copy"), "{}", beta.ctld_log());
    let t = std::time::Instant::now();
    let refused = beta.sbatch("mallory", &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(1)]);
    assert!(refused.is_err(), "checked against the last good copy's budget: {refused:?}");
    let jobs: Vec<u32> =
        (0..3u32).map(|i| beta.sbatch(["alice", "bob", "carol"][i as usize], &["--gres=gpu:1", "--comment=min_runtime=5s", &sleep_job(2)]).unwrap()).collect();
    let submitting = t.elapsed();
    assert!(submitting < secs(2), "4 submissions took {submitting:?} while the server hangs");
    beta.wait_for("the jobs run and end while the server hangs", secs(60), || jobs.iter().all(|&j| beta.job(j).state() == "COMPLETED"));

    proxy.set_hang(false);
    assert_runs_as_slurm_recorded(&beta, &jobs, "server answering again");
}
