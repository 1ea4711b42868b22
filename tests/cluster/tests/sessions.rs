//! Interactive sessions that survive preemption (`allot session`), in a real
//! Slurm cluster with allot's plugins: a researcher's Python session is
//! preempted by another team, or its node drained, and comes back on another
//! node with its variables and working directory; what an altered image, a
//! stranger and a program criu cannot dump get.
//!
//! Needs root, criu with CAP_CHECKPOINT_RESTORE at $ALLOT_CRIU (default
//! /usr/local/lib/allot/criu) and dtach: `scripts/install-deps.sh` installs
//! them. Slurm 22.05 only here: 24.11's test daemons run chrooted in a Debian
//! 13 root, where criu cannot see the host's mounts (scripts/test.sh).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use allot_cluster_tests::{secs, sleep_job, target_release, text, Options, TestCluster, BUDGET};

fn criu() -> String {
    std::env::var("ALLOT_CRIU").unwrap_or_else(|_| "/usr/local/lib/allot/criu".into())
}

/// Each user's session store: a directory of the cluster's, made by root
/// with a world-writable sticky parent, as a home directory would be.
fn store(c: &TestCluster, user: &str) -> PathBuf {
    let parent = c.job_dir().join("sessions");
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
    parent.join(user)
}

/// `allot session ARGS --store <user's>` as `user`.
fn session(c: &TestCluster, user: &str, args: &[&str]) -> Output {
    let store = store(c, user);
    c.slurm_command(Some(user), target_release().join("allot").to_str().unwrap())
        .arg("session")
        .arg(args[0])
        // Before a `--` that starts the session's command.
        .arg("--store")
        .arg(&store)
        .args(&args[1..])
        .env("ALLOT_CRIU", criu())
        .output()
        .expect("allot runs")
}

fn log(c: &TestCluster, user: &str, name: &str) -> String {
    std::fs::read_to_string(store(c, user).join(name).join("session.log")).unwrap_or_default()
}

fn wait_log(c: &TestCluster, user: &str, name: &str, what: &str, count: usize) {
    c.wait_for(&format!("{count} x {what:?} in {name}'s log:\n{}", log(c, user, name)), secs(90), || log(c, user, name).matches(what).count() >= count);
}

/// Starts a Python session for alice on n1 and waits until it runs.
fn start_python(c: &TestCluster, name: &str, extra: &[&str]) -> u32 {
    let mut args = vec!["start", name, "--min-runtime", "10s", "--sbatch=--account=teama", "--sbatch=--gres=gpu:1", "--sbatch=--nodelist=n1"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "python3", "-i", "-q"]);
    let out = session(c, "alice", &args);
    assert!(out.status.success(), "{}", text(&out));
    let job: u32 = text(&out).split("job ").nth(1).and_then(|t| t.split(',').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{}", text(&out)));
    wait_log(c, "alice", name, "started python3", 1);
    job
}

/// Types a line into the session.
fn send(c: &TestCluster, name: &str, line: &str) {
    let out = session(c, "alice", &["send", name, line]);
    assert!(out.status.success(), "{}", text(&out));
}

/// What the session's Python says of `expr`, through a file in its directory.
fn ask(c: &TestCluster, name: &str, expr: &str) -> String {
    let out = store(c, "alice").join(name).join("answer");
    let _ = std::fs::remove_file(&out);
    send(c, name, &format!("open({:?}, 'w').write(str({expr}))", out.display().to_string()));
    c.wait_for(&format!("the session answers {expr}"), secs(20), || out.exists() && !std::fs::read_to_string(&out).unwrap_or_default().is_empty());
    std::fs::read_to_string(&out).unwrap()
}

#[test]
fn s1_a_session_preempted_by_another_team_comes_back_with_its_state_on_another_node() {
    let c = TestCluster::start("session-preempt", BUDGET, Options::default());
    let job = start_python(&c, "nb", &[]);
    send(&c, "nb", "import os; x = 42; os.chdir('/tmp')");
    assert_eq!(ask(&c, "nb", "(x, os.getcwd())"), "(42, '/tmp')");
    // Team B (unused) needs all of n1 once the session is past its 10 s.
    std::thread::sleep(secs(10));
    let b = c.sbatch("bob", &["--account=teamb", "--nodelist=n1", "--gres=gpu:8", "--comment=min_runtime=5s", &sleep_job(15)]).unwrap();
    wait_log(&c, "alice", "nb", "checkpointed session nb", 1);
    c.wait_state(b, "RUNNING", secs(60));
    assert_eq!(c.job(job).restarts(), 1, "the session's job was requeued once");
    // The requeued job cannot go back to n1 (bob holds it); let it go anywhere.
    c.wait_for("the session's job is requeued", secs(30), || c.job(job).state() == "PENDING");
    let out = c.scontrol(&["update", &format!("jobid={job}"), "nodelist="]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "restored session nb", 1);
    let l = log(&c, "alice", "nb");
    assert!(!l.contains("on node n1 in"), "restored on n1, which bob's job holds:\n{l}");
    assert_eq!(ask(&c, "nb", "(x, os.getcwd())"), "(42, '/tmp')", "the restored session lost its state:\n{l}");
    send(&c, "nb", "x += 1");
    assert_eq!(ask(&c, "nb", "x"), "43");
    // list shows it; stop ends the job and removes the session.
    let out = session(&c, "alice", &["list"]);
    assert!(text(&out).contains("nb") && text(&out).contains("RUNNING"), "{}", text(&out));
    let out = session(&c, "alice", &["stop", "nb"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!store(&c, "alice").join("nb").exists());
    c.wait_for("the session's job is gone", secs(30), || !c.jobs().iter().any(|j| j.id == job && matches!(j.state(), "RUNNING" | "PENDING")));
}

#[test]
fn s2_a_session_on_a_drained_node_moves_once_its_minimum_runtime_is_over() {
    let c = TestCluster::start("session-drain", BUDGET, Options::default());
    let job = start_python(&c, "work", &[]);
    send(&c, "work", "data = list(range(1000)); import os; os.chdir('/')");
    let out = c.scontrol(&["update", "nodename=n1", "state=drain", "reason=maintenance"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "work", "checkpointed session work", 1);
    // Its job exited in its grace time (the checkpoint done): allot requeues it.
    c.wait_for("the session's job is requeued", secs(30), || c.job(job).state() == "PENDING");
    let out = c.scontrol(&["update", &format!("jobid={job}"), "nodelist="]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "work", "restored session work", 1);
    assert_eq!(ask(&c, "work", "(sum(data), os.getcwd())"), "(499500, '/')");
    let l = log(&c, "alice", "work");
    assert!(l.contains("(job ") && l.contains("run 2)"), "{l}");
}

#[test]
fn s3_an_altered_or_foreign_checkpoint_is_refused_and_kept_and_strangers_get_nothing() {
    let c = TestCluster::start("session-hostile", BUDGET, Options::default());
    let job = start_python(&c, "nb", &[]);
    send(&c, "nb", "secret = 'alice-only'");
    let dir = store(&c, "alice").join("nb");

    // A stranger can neither read, list, drive nor run alice's session.
    for args in [&["list"][..], &["send", "nb", "print(secret)"][..]] {
        let out = c
            .slurm_command(Some("bob"), target_release().join("allot").to_str().unwrap())
            .arg("session")
            .args(args)
            .arg("--store")
            .arg(store(&c, "alice"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "bob ran `allot session {args:?}` on alice's store: {}", text(&out));
        assert!(text(&out).contains("Permission denied") || text(&out).contains("not to you"), "{}", text(&out));
    }
    let out = c.slurm_command(Some("bob"), target_release().join("allot").to_str().unwrap()).args(["session", "run"]).arg(&dir).output().unwrap();
    assert!(!out.status.success() && text(&out).contains("Permission denied"), "{}", text(&out));
    // criu, with its capability, still cannot dump another user's process.
    let pid = std::fs::read_to_string(format!("/proc/{}/task/{}/children", session_pid(&c, "nb"), session_pid(&c, "nb"))).unwrap_or_default();
    let victim = pid.split_whitespace().next().map(str::to_owned).unwrap_or_else(|| session_pid(&c, "nb").to_string());
    let scratch = c.job_dir().join("bob-scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = c
        .slurm_command(Some("bob"), &criu())
        .args(["dump", "--unprivileged", "--leave-running", "--tree", &victim, "--images-dir"])
        .arg(&scratch)
        .args(["--log-file", "dump.log"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "bob's criu dumped alice's process {victim}");
    assert!(std::fs::read_dir(&scratch).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().starts_with("pages-")), "bob got alice's memory");

    // Checkpoint (the grace signal), then alter the image as if alice wanted
    // root: the restore is refused, the image kept, the session starts afresh.
    let out = c.slurm(None, "scancel", &["--signal=USR1", "--batch", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "checkpointed session nb", 1);
    c.wait_for("the job ends after its checkpoint", secs(30), || c.job(job).state() == "COMPLETED");
    let image = dir.join("image");
    let core = std::fs::read_dir(&image).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with("core-")).unwrap();
    let bytes = std::fs::read(&core).unwrap();
    let mut entry = allot_cli::session::image::read_core(&bytes).unwrap();
    let creds = entry.thread_core.as_mut().and_then(|t| t.creds.as_mut()).expect("credentials in the image");
    (creds.uid, creds.euid, creds.suid, creds.fsuid) = (Some(0), Some(0), Some(0), Some(0));
    std::fs::write(&core, allot_cli::session::image::write_core(&bytes, &entry)).unwrap();
    let out = c.scontrol(&["requeue", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "was not restored", 1);
    wait_log(&c, "alice", "nb", "started python3", 2);
    let l = log(&c, "alice", "nb");
    assert!(l.contains("would run with uid 0") && l.contains("image.failed-1"), "{l}");
    assert!(dir.join("image.failed-1").join(core.file_name().unwrap()).exists(), "the refused image was not kept");
    assert_eq!(ask(&c, "nb", "'secret' in globals()"), "False");
    let out = session(&c, "alice", &["list"]);
    assert!(text(&out).contains("1 kept after a failed restore"), "{}", text(&out));
}

#[test]
fn s4_a_session_criu_cannot_dump_gets_the_plain_grace_signal_and_says_why() {
    let c = TestCluster::start("session-fallback", BUDGET, Options::default());
    // An established TCP connection to a peer outside the session: criu
    // refuses to dump it (it would break the peer).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let job = start_python(&c, "net", &[]);
    send(&c, "net", &format!("import socket; s = socket.create_connection(('127.0.0.1', {port}))"));
    let _peer = listener.accept().unwrap();
    let out = c.slurm(None, "scancel", &["--signal=USR1", "--batch", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "net", "the checkpoint of session net failed", 1);
    let l = log(&c, "alice", "net");
    assert!(l.contains("criu dump failed") && l.contains("starts afresh"), "{l}");
    assert!(!Path::new(&store(&c, "alice").join("net").join("image")).exists(), "a failed dump left an image");
    c.wait_for("the job ends", secs(30), || c.job(job).state() != "RUNNING");
}

/// The PID of the session's first process (dtach's), from its log.
fn session_pid(c: &TestCluster, name: &str) -> u32 {
    let l = log(c, "alice", name);
    l.split("(pid ").nth(1).and_then(|t| t.split(')').next()).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid in the log:\n{l}"))
}
