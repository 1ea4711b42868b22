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
use prost::encoding::{decode_key, decode_varint, encode_key, encode_varint, WireType};

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
    let deadline = std::time::Instant::now() + secs(90);
    while log(c, user, name).matches(what).count() < count {
        if std::time::Instant::now() > deadline {
            // The log as it is now, and Slurm's view (wait_for's panic).
            let now = log(c, user, name);
            c.wait_for(&format!("{count} x {what:?} in {name}'s log:\n{now}"), secs(0), || false);
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
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
    // A daemon the session leaves behind (its shell exits at once).
    send(&c, "nb", "os.system('setsid sleep 1001 &')");
    let first = session_pid(&c, "nb");
    c.wait_for("the session's daemon runs", secs(10), || daemons_of(first, 1001).len() == 1);
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
    // The daemon came back too, still the session's (adopted by its first
    // process, which the restore made again with the same PID).
    assert_eq!(session_pid(&c, "nb"), first);
    assert_eq!(daemons_of(first, 1001).len(), 1, "the session's daemon did not come back: alice's are {:?}", daemons(1001));
    // allot why tells the session, its preemption and its two runs.
    c.wait_for("allot why shows the preemption and the second run", secs(30), || {
        let why = text(&c.allot(&["why", &job.to_string()]));
        why.contains("preempted") && why.contains("run 2:")
    });
    let why = text(&c.allot(&["why", &job.to_string()]));
    assert!(why.contains("an interactive session (allot session nb)") && why.contains("run 2:"), "{why}");
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
    let why = text(&c.allot(&["why", &job.to_string()]));
    assert!(why.contains("drained: its node is draining") && why.contains("allot session work"), "{why}");
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

    // Checkpoint (the grace signal), then give every thread in the image
    // criu's own capabilities, changing nothing else (criu itself restores
    // such an image as it is): the restore is refused, the image kept aside,
    // the session started afresh, and the log says why.
    let out = c.slurm(None, "scancel", &["--signal=USR1", "--batch", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "checkpointed session nb", 1);
    c.wait_for("the job ends after its checkpoint", secs(30), || c.job(job).state() == "COMPLETED");
    let image = dir.join("image");
    // alice's uid is whatever this machine gave her (other users may predate her).
    let alice_uid = nix::unistd::User::from_name("alice").unwrap().expect("the harness created alice").uid.as_raw();
    let cores: Vec<PathBuf> =
        std::fs::read_dir(&image).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("core-")).collect();
    assert!(!cores.is_empty());
    for core in &cores {
        let bytes = std::fs::read(core).unwrap();
        std::fs::write(core, with_capabilities(&bytes)).unwrap();
        let creds = allot_cli::session::image::read_core(&std::fs::read(core).unwrap()).unwrap().thread_core.unwrap().creds.unwrap();
        assert_eq!((creds.uid, creds.cap_prm.clone()), (Some(alice_uid), vec![1 << 8, 1 << 8]), "the alteration");
    }
    let out = c.scontrol(&["requeue", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "was not restored", 1);
    wait_log(&c, "alice", "nb", "started python3", 2);
    let l = log(&c, "alice", "nb");
    assert!(l.contains("would hold permitted capabilities") && l.contains("image.failed-1"), "{l}");
    assert!(dir.join("image.failed-1").join(cores[0].file_name().unwrap()).exists(), "the refused image was not kept");
    assert_eq!(ask(&c, "nb", "'secret' in globals()"), "False");

    // A foreign image: root's own process, dumped by root, put in place of
    // alice's checkpoint as if it were hers (restored by a privileged
    // helper, it would be a root shell).
    let rooted = c.job_dir().join("root-image");
    std::fs::create_dir_all(&rooted).unwrap();
    let mut victim = std::process::Command::new("setsid").args(["sleep", "600"]).stdin(std::process::Stdio::null()).spawn().unwrap();
    std::thread::sleep(secs(1));
    let out = std::process::Command::new(criu())
        .args(["dump", "--tree", &victim.id().to_string(), "--images-dir"])
        .arg(&rooted)
        .args(["--log-file", "dump.log"])
        .output()
        .unwrap();
    let _ = victim.wait();
    assert!(out.status.success(), "root's dump: {}", std::fs::read_to_string(rooted.join("dump.log")).unwrap_or_default());
    let out = c.slurm(None, "scancel", &["--signal=USR1", "--batch", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "checkpointed session nb", 2);
    c.wait_for("the job ends after its checkpoint", secs(30), || c.job(job).state() == "COMPLETED");
    let checkpoint = std::fs::read(image.join("checkpoint.json")).unwrap();
    std::fs::remove_dir_all(&image).unwrap();
    std::fs::rename(&rooted, &image).unwrap();
    std::fs::write(image.join("checkpoint.json"), checkpoint).unwrap();
    let alice = nix::unistd::User::from_name("alice").unwrap().unwrap();
    for entry in std::fs::read_dir(&image).unwrap().flatten() {
        nix::unistd::chown(&entry.path(), Some(alice.uid), Some(alice.gid)).unwrap();
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    nix::unistd::chown(&image, Some(alice.uid), Some(alice.gid)).unwrap();
    std::fs::set_permissions(&image, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = c.scontrol(&["requeue", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "was not restored", 2);
    wait_log(&c, "alice", "nb", "started python3", 3);
    let l = log(&c, "alice", "nb");
    assert!(l.contains("would run with uid 0") && l.contains("image.failed-2"), "{l}");
    let out = session(&c, "alice", &["list"]);
    assert!(text(&out).contains("2 kept after a failed restore"), "{}", text(&out));
}

/// A core image whose every thread holds CAP_SETPCAP and
/// CAP_CHECKPOINT_RESTORE (permitted, effective, inheritable), every other
/// byte as it was: protobuf fields are copied through, the capability
/// fields of `thread_core.creds` replaced (CRIU's images/core.proto: field 5,
/// then 10, then 9, 10, 11).
fn with_capabilities(image: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes(image[8..12].try_into().unwrap()) as usize;
    let mut caps = Vec::new();
    for tag in [9u32, 10, 11] {
        for word in [1u64 << 8, 1u64 << 8] {
            encode_key(tag, WireType::Varint, &mut caps);
            encode_varint(word, &mut caps);
        }
    }
    let body = rewrite(&image[12..12 + len], 5, &mut |thread_core| rewrite(thread_core, 10, &mut |creds| [strip(creds, &[9, 10, 11]), caps.clone()].concat()));
    [&image[..8], &(body.len() as u32).to_le_bytes(), &body, &image[12 + len..]].concat()
}

/// The fields of a protobuf message, each as (tag, its bytes, key included).
fn fields(mut msg: &[u8]) -> Vec<(u32, WireType, &[u8])> {
    let mut out = Vec::new();
    while !msg.is_empty() {
        let start = msg;
        let (tag, wire) = decode_key(&mut msg).unwrap();
        let mut rest = msg;
        match wire {
            WireType::Varint => {
                decode_varint(&mut rest).unwrap();
            }
            WireType::SixtyFourBit => rest = &rest[8..],
            WireType::ThirtyTwoBit => rest = &rest[4..],
            WireType::LengthDelimited => {
                let l = decode_varint(&mut rest).unwrap() as usize;
                rest = &rest[l..];
            }
            other => panic!("wire type {other:?} in a CRIU image"),
        }
        out.push((tag, wire, &start[..start.len() - rest.len()]));
        msg = rest;
    }
    out
}

fn strip(msg: &[u8], tags: &[u32]) -> Vec<u8> {
    fields(msg).into_iter().filter(|(t, ..)| !tags.contains(t)).flat_map(|(.., b)| b.to_vec()).collect()
}

/// `msg` with the embedded message of field `tag` passed through `f`.
fn rewrite(msg: &[u8], tag: u32, f: &mut dyn FnMut(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, wire, bytes) in fields(msg) {
        if t != tag || wire != WireType::LengthDelimited {
            out.extend_from_slice(bytes);
            continue;
        }
        let mut inner = bytes;
        decode_key(&mut inner).unwrap();
        let l = decode_varint(&mut inner).unwrap() as usize;
        let new = f(&inner[..l]);
        encode_key(t, WireType::LengthDelimited, &mut out);
        encode_varint(new.len() as u64, &mut out);
        out.extend_from_slice(&new);
    }
    out
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

/// alice's `sleep SECONDS` processes.
fn daemons(seconds: u32) -> Vec<u32> {
    let out = std::process::Command::new("pgrep").args(["-u", "alice", "-f", &format!("^sleep {seconds}$")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// Those of them whose parent is `parent`.
fn daemons_of(parent: u32, seconds: u32) -> Vec<u32> {
    daemons(seconds).into_iter().filter(|&p| parent_of(p) == parent).collect()
}

fn parent_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|p| p.trim().parse().ok()).unwrap_or(0)
}

/// The PID of the session's first process (`allot session reap`), from its log.
fn session_pid(c: &TestCluster, name: &str) -> u32 {
    let l = log(c, "alice", name);
    l.split("(pid ").nth(1).and_then(|t| t.split(')').next()).and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no pid in the log:\n{l}"))
}

#[test]
fn s5_a_session_whose_job_ended_after_its_checkpoint_is_resumed_by_a_new_job() {
    // As at the job's time limit: the warning signal checkpoints the
    // session, then the job ends and nothing requeues it.
    let c = TestCluster::start("session-resume", BUDGET, Options::default());
    let job = start_python(&c, "nb", &[]);
    send(&c, "nb", "y = 'kept'");
    let out = c.slurm(None, "scancel", &["--signal=USR1", "--batch", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "checkpointed session nb", 1);
    c.wait_for("the job ends after its checkpoint", secs(30), || c.job(job).state() == "COMPLETED");
    let out = session(&c, "alice", &["send", "nb", "print(y)"]);
    assert!(!out.status.success() && text(&out).contains("allot session resume nb"), "{}", text(&out));
    let out = session(&c, "alice", &["resume", "nb"]);
    assert!(out.status.success(), "{}", text(&out));
    wait_log(&c, "alice", "nb", "restored session nb", 1);
    assert_eq!(ask(&c, "nb", "y"), "kept");
    let out = session(&c, "alice", &["resume", "nb"]);
    assert!(!out.status.success() && text(&out).contains("RUNNING"), "a second resume while the job runs: {}", text(&out));
}
