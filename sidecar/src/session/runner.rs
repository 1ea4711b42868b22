//! The job's side of a session: `allot session run DIR`, the batch script's
//! one process. It restores the last checkpoint if there is one (else starts
//! the session's program under dtach), then waits: when the program ends the
//! session ends; when the grace signal comes (preemption, or a node drained
//! as its jobs reach their minimum runtime) it checkpoints the program with
//! criu and exits, and Slurm requeues the job, whose next run restores it.
//!
//! Every line it prints goes to the session's log (`DIR/session.log`).
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::{image, store};

fn say(what: &str) {
    let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    println!("{at} allot session: {what}");
}

fn node() -> String {
    std::env::var("SLURMD_NODENAME").ok().or_else(|| nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok())).unwrap_or_else(|| "?".into())
}

pub fn run(dir: &Path) -> Result<i32> {
    store::check_private(dir, true)?;
    store::check_ancestors(dir)?;
    let settings = store::read_settings(dir)?;
    // Orphans (dtach's program, criu's restored tree) become our children, so
    // that we can wait for them.
    nix::sys::prctl::set_child_subreaper(true).context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let grace = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGUSR1, signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&grace)).context("installing the signal handlers")?;
    }
    let job = std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| "?".into());
    let restarts = std::env::var("SLURM_RESTART_COUNT").unwrap_or_else(|_| "0".into());
    say(&format!("session {} on node {} (job {job}, run {})", settings.name, node(), restarts.parse::<u32>().unwrap_or(0) + 1));

    let image = dir.join(store::IMAGE);
    let pid = match store::read_checkpoint(&image) {
        Some(cp) => match restore(dir, &image, &settings, &cp) {
            Ok(pid) => pid,
            Err(e) => {
                let kept = keep_failed(dir, &image);
                say(&format!(
                    "the checkpoint of {} ({} on node {}) was not restored: {e:#}. It is kept in {} for another try (move it back to {} and requeue the job); the session starts afresh",
                    settings.name,
                    crate::format_time(cp.at),
                    cp.node,
                    kept.display(),
                    image.display()
                ));
                start(dir, &settings)?
            }
        },
        None => {
            if image.exists() {
                // An interrupted dump: never restored.
                let _ = fs::remove_dir_all(&image);
            }
            start(dir, &settings)?
        }
    };

    loop {
        if grace.load(Ordering::Relaxed) {
            return Ok(on_signal(dir, &image, &settings, pid));
        }
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            // dtach, and so the first process, ends when the program does.
            Ok(WaitStatus::Exited(p, _)) if p == pid => {
                say(&format!("the session's program ended; session {} is over", settings.name));
                return Ok(0);
            }
            Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => {
                say(&format!("the session's first process was killed by {sig}; session {} is over", settings.name));
                return Ok(128 + sig as i32);
            }
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => std::thread::sleep(Duration::from_millis(100)),
            _ => {} // another child reaped: look again at once
        }
    }
}

/// Starts the program under dtach (its master is our child: `-N` neither
/// daemonizes nor attaches) in a session of its own, so that criu can dump
/// the tree without a terminal or a session leader outside it.
fn start(dir: &Path, s: &store::Settings) -> Result<Pid> {
    let socket = dir.join(store::SOCKET);
    let _ = fs::remove_file(&socket);
    if !s.cwd.is_dir() {
        bail!("the session's directory {} is not on node {} (the session starts where `allot session start` ran)", s.cwd.display(), node());
    }
    if !s.dtach.is_file() {
        bail!("dtach is not at {} on node {} (install dtach on the compute nodes, or give --dtach)", s.dtach.display(), node());
    }
    let me = std::env::current_exe().context("the allot command's own path")?;
    let child = Command::new("setsid")
        .arg(me)
        .args(["session", "reap", "--"])
        .arg(&s.dtach)
        .arg("-N")
        .arg(&socket)
        .arg("-z")
        .args(&s.command)
        .current_dir(&s.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run setsid {} on node {}", s.dtach.display(), node()))?;
    let pid = Pid::from_raw(child.id() as i32);
    say(&format!(
        "started {} (pid {pid}); attach with `allot session attach {}`",
        shlex::try_join(s.command.iter().map(String::as_str)).unwrap_or_default(),
        s.name
    ));
    Ok(pid)
}

fn restore(dir: &Path, image: &Path, s: &store::Settings, cp: &store::Checkpoint) -> Result<Pid> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let groups: Vec<u32> = nix::unistd::getgroups().unwrap_or_default().iter().map(|g| g.as_raw()).collect();
    image::check(image, uid, gid, &groups).context("refused")?;
    let _ = fs::remove_file(dir.join(store::SOCKET));
    let begun = Instant::now();
    // CRIU restores the processes with their own PIDs: on the node the
    // session just left, the last ones may not be reaped yet. A few tries.
    let mut tries = 0;
    loop {
        let out = Command::new(&s.criu)
            .args(["restore", "--unprivileged", "--restore-detached", "--images-dir"])
            .arg(image)
            .args(["--log-file", "restore.log", "--pidfile", "restore.pid"])
            .current_dir(image)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", s.criu.display()))?;
        if out.status.success() {
            break;
        }
        let why = criu_errors(&image.join("restore.log"), &out.stderr);
        tries += 1;
        if !why.contains("File exists") || tries == 10 {
            let taken = if why.contains("File exists") { " (a process ID the session needs is in use on this node)" } else { "" };
            bail!("criu restore failed ({}){taken}: {why}", out.status);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let pid: i32 = fs::read_to_string(image.join("restore.pid")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(cp.pid);
    say(&format!(
        "restored session {} (pid {pid}) on node {} in {:.2} s from its checkpoint of {} on node {} ({:.1} MB); attach with `allot session attach {}`",
        s.name,
        node(),
        begun.elapsed().as_secs_f64(),
        crate::format_time(cp.at),
        cp.node,
        cp.bytes as f64 / 1e6,
        s.name
    ));
    // Restored: the image has served (the next grace signal makes a new one).
    let _ = fs::remove_dir_all(image);
    Ok(Pid::from_raw(pid))
}

/// The grace signal: checkpoint, unless `allot session stop` asked to end.
fn on_signal(dir: &Path, image: &Path, s: &store::Settings, pid: Pid) -> i32 {
    if dir.join(store::STOPPING).exists() {
        say(&format!("session {} stopped by its owner", s.name));
        end(pid);
        return 0;
    }
    say(&format!("grace signal: checkpointing session {} (a checkpoint the grace time cuts short leaves no image, and the session starts afresh)", s.name));
    match checkpoint(dir, image, s, pid) {
        Ok(cp) => {
            say(&format!(
                "checkpointed session {} in {:.2} s ({:.1} MB); it is restored when the job runs again (if the job ends instead, at its time limit: `allot session resume {}`)",
                s.name,
                cp.dump_seconds,
                cp.bytes as f64 / 1e6,
                s.name
            ));
            0
        }
        Err(e) => {
            say(&format!(
                "the checkpoint of session {} failed: {e:#}. Its programs get SIGTERM as without a checkpoint; when the job runs again the session starts afresh",
                s.name
            ));
            end(pid);
            1
        }
    }
}

fn checkpoint(dir: &Path, image: &Path, s: &store::Settings, pid: Pid) -> Result<store::Checkpoint> {
    let fresh = dir.join("image.new");
    let _ = fs::remove_dir_all(&fresh);
    store::ensure_private_dir(&fresh)?;
    let begun = Instant::now();
    let out = Command::new(&s.criu)
        .args(["dump", "--unprivileged", "--tree"])
        .arg(pid.to_string())
        .arg("--images-dir")
        .arg(&fresh)
        .args(["--log-file", "dump.log"])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", s.criu.display()))?;
    if !out.status.success() {
        let why = criu_errors(&fresh.join("dump.log"), &out.stderr);
        let _ = fs::remove_dir_all(&fresh);
        bail!("criu dump failed ({}): {why}", out.status);
    }
    let cp =
        store::Checkpoint { at: crate::now(), node: node(), pid: pid.as_raw(), bytes: store::size_of(&fresh), dump_seconds: begun.elapsed().as_secs_f64() };
    store::write_private(&fresh.join(store::CHECKPOINT), &serde_json::to_string_pretty(&cp)?)?;
    let _ = fs::remove_dir_all(image);
    if let Err(e) = fs::rename(&fresh, image) {
        let _ = fs::remove_dir_all(&fresh);
        bail!("cannot rename {} to {}: {e}", fresh.display(), image.display());
    }
    // criu's dump ended the processes: reap them all (ours as the subreaper)
    // before the job ends, so that their PIDs are free for the restore.
    reap_all(Duration::from_secs(5));
    Ok(cp)
}

/// `allot session reap -- COMMAND`: the session's first process. A child
/// subreaper, so that what the session leaves behind (a daemon, a `setsid
/// ... &`) is re-parented to it, inside the tree criu dumps, rather than to
/// the runner outside it (CRIU restores the subreaper flag). Ends when
/// COMMAND (dtach) does; its status is COMMAND's.
pub fn reap(command: &[String]) -> Result<i32> {
    nix::sys::prctl::set_child_subreaper(true).context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let (program, args) = command.split_first().ok_or_else(|| anyhow::anyhow!("allot session reap: no command"))?;
    let child = Command::new(program).args(args).spawn().with_context(|| format!("cannot run {program}"))?;
    let pid = Pid::from_raw(child.id() as i32);
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(p, code)) if p == pid => return Ok(code),
            Ok(WaitStatus::Signaled(p, sig, _)) if p == pid => return Ok(128 + sig as i32),
            Err(nix::errno::Errno::ECHILD) => return Ok(0),
            _ => {} // an orphan of the session: reaped
        }
    }
}

/// Every process below `pid` (from /proc's children lists).
fn descendants(pid: Pid) -> Vec<Pid> {
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        let tasks = fs::read_dir(format!("/proc/{p}/task")).map(|t| t.flatten().map(|e| e.path()).collect::<Vec<_>>()).unwrap_or_default();
        for task in tasks {
            let children = fs::read_to_string(task.join("children")).unwrap_or_default();
            for c in children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                found.push(Pid::from_raw(c));
                next.push(Pid::from_raw(c));
            }
        }
    }
    found
}

/// Reaps every child until none is left, or for `at_most`.
fn reap_all(at_most: Duration) {
    let until = Instant::now() + at_most;
    while Instant::now() < until {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The session's programs get SIGTERM (what they would get without allot),
/// then SIGKILL. dtach's program runs in a session and process group of its
/// own (dtach's pty), so each of dtach's children's groups is signalled, then
/// dtach.
fn end(pid: Pid) {
    for p in descendants(pid) {
        let _ = killpg(p, Signal::SIGTERM);
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = killpg(pid, Signal::SIGTERM);
    let _ = kill(pid, Signal::SIGTERM);
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if matches!(waitpid(pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = killpg(pid, Signal::SIGKILL);
}

fn keep_failed(dir: &Path, image: &Path) -> PathBuf {
    let kept = (1..).map(|n| dir.join(format!("image.failed-{n}"))).find(|p| !p.exists()).expect("a free name");
    if fs::rename(image, &kept).is_err() {
        return image.to_path_buf();
    }
    kept
}

/// criu's own error lines (its log), or what it printed.
fn criu_errors(log: &Path, stderr: &[u8]) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error")).take(3).collect();
    if errors.is_empty() {
        String::from_utf8_lossy(stderr).trim().to_string()
    } else {
        errors.join(" | ")
    }
}
