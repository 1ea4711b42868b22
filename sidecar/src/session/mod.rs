//! `allot session`: interactive sessions that survive preemption.
//!
//! A session is a batch job with a contract (`--comment min_runtime=...`)
//! whose one process, `allot session run` ([`runner`]), runs the researcher's
//! program under dtach; `allot session attach` connects a terminal to it.
//! When the job gets its grace signal the program is checkpointed with CRIU
//! into the session's private directory ([`store`]); the requeued job
//! restores it, on whichever node it gets, after checking that the image
//! would restore nothing but the owner's own processes ([`image`]).
pub mod image;
pub mod runner;
pub mod store;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};

#[derive(Args, Clone)]
pub struct StoreArg {
    /// Where sessions live: a directory on storage the login and compute
    /// nodes share, private to you. Default: $ALLOT_SESSION_STORE, else
    /// ~/.allot/sessions.
    #[arg(long, value_name = "DIR", env = "ALLOT_SESSION_STORE")]
    pub store: Option<PathBuf>,
}

impl StoreArg {
    fn dir(&self) -> Result<PathBuf> {
        let dir = self
            .store
            .clone()
            .or_else(store::default_store)
            .ok_or_else(|| anyhow!("no session store: give --store DIR (or set ALLOT_SESSION_STORE; there is no $HOME)"))?;
        // Absolute: the job runs it from elsewhere.
        Ok(if dir.is_absolute() { dir } else { std::env::current_dir()?.join(dir) })
    }
    fn session(&self, name: &str) -> Result<PathBuf> {
        store::check_name(name)?;
        let dir = self.dir()?.join(name);
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("no session {name:?} in {} (see `allot session list`)", self.dir()?.display()),
            Err(e) => bail!("cannot read {}: {e}", dir.display()),
            Ok(_) => {}
        }
        store::check_private(&dir, true)?;
        store::check_ancestors(&dir)?;
        Ok(dir)
    }
}

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Start a session: a job with a contract that runs COMMAND (default:
    /// your shell) detached; when preempted it is checkpointed and, when the
    /// job runs again, restored as it was.
    Start {
        /// The session's name (letters, digits, '.', '_', '-').
        name: String,
        /// The contract's minimum runtime (as `--comment min_runtime=`).
        #[arg(long, default_value = "2h", value_name = "DURATION")]
        min_runtime: String,
        /// An option for sbatch (repeat it): `--sbatch=--gres=gpu:1`.
        #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
        sbatch: Vec<String>,
        /// The criu program (run as you, with CAP_CHECKPOINT_RESTORE).
        #[arg(long, env = "ALLOT_CRIU", default_value = "criu")]
        criu: PathBuf,
        /// The dtach program.
        #[arg(long, env = "ALLOT_DTACH", default_value = "dtach")]
        dtach: PathBuf,
        #[command(flatten)]
        store: StoreArg,
        /// The program and its arguments (after `--`).
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Submit a new job for a session whose job has ended (its time limit,
    /// a cancel) and that kept a checkpoint: the job restores it.
    Resume {
        name: String,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Connect this terminal to a running session (detach with Ctrl-\).
    Attach {
        name: String,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Type TEXT into a session (a line; for scripts).
    Send {
        name: String,
        text: String,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Your sessions: their jobs, states and last checkpoints.
    List {
        #[command(flatten)]
        store: StoreArg,
    },
    /// End a session: cancel its job and delete its checkpoint.
    Stop {
        name: String,
        #[command(flatten)]
        store: StoreArg,
    },
    /// The job's side of a session (the batch script `start` submits).
    #[command(hide = true)]
    Run { dir: PathBuf },
    /// The session's first process, inside the checkpoint: runs COMMAND and
    /// adopts the session's orphans (a daemon started with `setsid ... &`),
    /// so that they stay in the tree criu dumps.
    #[command(hide = true)]
    Reap {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

pub fn run(cmd: SessionCommand) -> Result<i32> {
    match cmd {
        SessionCommand::Start { name, min_runtime, sbatch, criu, dtach, store, command } => start(&name, &min_runtime, &sbatch, criu, dtach, &store, command),
        SessionCommand::Resume { name, store } => resume(&store.session(&name)?),
        SessionCommand::Attach { name, store } => attach(&store.session(&name)?),
        SessionCommand::Send { name, text, store } => send(&store.session(&name)?, &text),
        SessionCommand::List { store } => list(&store),
        SessionCommand::Stop { name, store } => stop(&store.session(&name)?),
        SessionCommand::Run { dir } => runner::run(&dir),
        SessionCommand::Reap { command } => runner::reap(&command),
    }
}

/// A session's job says so in its comment (a word beside the contract, which
/// the contract's parser leaves alone), so that `allot why` can tell.
const COMMENT_WORD: &str = "allot-session:";

/// The session a job's comment names, if it is a session's.
pub fn name_in_comment(comment: &str) -> Option<&str> {
    comment.split([' ', ',', ';']).find_map(|w| w.strip_prefix(COMMENT_WORD)).filter(|n| store::check_name(n).is_ok())
}

/// A program by name is looked up in PATH here, so that the job runs the
/// same one (the job's PATH may differ).
fn resolve(program: PathBuf) -> PathBuf {
    if program.components().count() > 1 {
        return program;
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(&program)).find(|p| p.is_file())).unwrap_or(program)
}

fn start(name: &str, min_runtime: &str, sbatch: &[String], criu: PathBuf, dtach: PathBuf, store_arg: &StoreArg, command: Vec<String>) -> Result<i32> {
    store::check_name(name)?;
    let root = store_arg.dir()?;
    store::ensure_private_dir(&root)?;
    store::check_ancestors(&root)?;
    let dir = root.join(name);
    if dir.exists() {
        bail!("session {name:?} exists ({}): attach to it, or `allot session stop {name}` first", dir.display());
    }
    store::ensure_private_dir(&dir)?;
    let command = if command.is_empty() { vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/bash".into()), "-i".into()] } else { command };
    let settings = store::Settings {
        name: name.into(),
        command,
        cwd: std::env::current_dir().context("the current directory")?,
        criu: resolve(criu),
        dtach: resolve(dtach),
        min_runtime: min_runtime.into(),
        sbatch: sbatch.to_vec(),
        job: None,
    };
    store::write_settings(&dir, &settings)?;
    match submit(&dir, settings) {
        Ok(job) => {
            println!(
                "session {name}: job {job}, minimum runtime {min_runtime}; `allot session attach {name}` once it runs (log: {})",
                dir.join(store::LOG).display()
            );
            Ok(0)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Submits the session's job (`start`, `resume`) and records its id.
fn submit(dir: &Path, mut settings: store::Settings) -> Result<u32> {
    let me = std::env::current_exe().context("the allot command's own path")?;
    let script = format!(
        "exec {} session run {}",
        shlex::try_quote(&me.to_string_lossy()).map_err(|e| anyhow!("{e}"))?,
        shlex::try_quote(&dir.to_string_lossy()).map_err(|e| anyhow!("{e}"))?
    );
    // sbatch expands % in --output (%j, ...): a literal one is %%.
    let log = dir.join(store::LOG).to_string_lossy().replace('%', "%%");
    let out = Command::new("sbatch")
        .args(["--parsable", "--requeue", "--open-mode=append", "--signal=B:USR1@60"])
        .arg(format!("--job-name=allot-session:{}", settings.name))
        .arg(format!("--comment={COMMENT_WORD}{} min_runtime={}", settings.name, settings.min_runtime))
        .arg(format!("--output={log}"))
        .args(&settings.sbatch)
        .arg(format!("--wrap={script}"))
        .output()
        .context("cannot run sbatch")?;
    if !out.status.success() {
        bail!("sbatch refused the session: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let job: u32 = String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or("").parse().context("sbatch printed no job id")?;
    settings.job = Some(job);
    store::write_settings(dir, &settings)?;
    Ok(job)
}

fn resume(dir: &Path) -> Result<i32> {
    let s = store::read_settings(dir)?;
    if let Some(job) = s.job {
        if let Some((state, _)) = job_state(job)? {
            bail!("session {}'s job {job} is {state}: it restores the checkpoint itself when it runs", s.name);
        }
    }
    if store::read_checkpoint(&dir.join(store::IMAGE)).is_none() {
        bail!("session {} has no checkpoint to restore (see {})", s.name, dir.join(store::LOG).display());
    }
    let _ = std::fs::remove_file(dir.join(store::STOPPING));
    let name = s.name.clone();
    let job = submit(dir, s)?;
    println!("session {name}: job {job} restores its checkpoint when it runs");
    Ok(0)
}

/// The job's state and nodes from squeue; `Ok(None)` once it has left the
/// queue (ended); `Err` when squeue cannot say.
fn job_state(job: u32) -> Result<Option<(String, String)>> {
    let out = Command::new("squeue").args(["-h", "-j", &job.to_string(), "-o", "%T %N"]).output().context("cannot run squeue")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // A job slurmctld has forgotten: squeue says so and fails.
        if err.contains("Invalid job id") {
            return Ok(None);
        }
        bail!("squeue -j {job}: {}", err.trim());
    }
    let mut words = text.split_whitespace();
    Ok(words.next().map(|state| (state.to_string(), words.next().unwrap_or("").to_string())))
}

/// dtach's socket is on the node the job runs on: from there (or a
/// single-host cluster) dtach reaches it; from elsewhere through srun.
fn dtach_here(dir: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(dir.join(store::SOCKET)).is_ok()
}

fn attach(dir: &Path) -> Result<i32> {
    let s = store::read_settings(dir)?;
    let socket = dir.join(store::SOCKET);
    let status = if dtach_here(dir) {
        Command::new(&s.dtach).arg("-a").arg(&socket).arg("-z").status()
    } else {
        let job = s.job.ok_or_else(|| anyhow!("session {} has no job", s.name))?;
        running_job(&s, dir)?;
        Command::new("srun").args(["--jobid", &job.to_string(), "--overlap", "--pty"]).arg(&s.dtach).arg("-a").arg(&socket).arg("-z").status()
    }
    .context("cannot run dtach")?;
    Ok(status.code().unwrap_or(1))
}

/// The session's job, which must be running.
fn running_job(s: &store::Settings, dir: &Path) -> Result<u32> {
    let job = s.job.ok_or_else(|| anyhow!("session {} has no job", s.name))?;
    match job_state(job)? {
        Some((state, _)) if state == "RUNNING" => Ok(job),
        Some((state, _)) => bail!("session {}'s job {job} is {state}: once it runs", s.name),
        None => bail!(
            "session {}'s job {job} has ended (see {}; `allot session resume {}` if it kept a checkpoint)",
            s.name,
            dir.join(store::LOG).display(),
            s.name
        ),
    }
}

fn send(dir: &Path, text: &str) -> Result<i32> {
    use std::io::Write;
    let s = store::read_settings(dir)?;
    let socket = dir.join(store::SOCKET);
    let mut cmd = if dtach_here(dir) {
        Command::new(&s.dtach)
    } else {
        let job = running_job(&s, dir)?;
        let mut c = Command::new("srun");
        c.args(["--jobid", &job.to_string(), "--overlap", "--quiet"]).arg(&s.dtach);
        c
    };
    let mut child = cmd.arg("-p").arg(&socket).stdin(std::process::Stdio::piped()).spawn().context("cannot run dtach")?;
    child.stdin.take().expect("piped").write_all(format!("{text}\n").as_bytes())?;
    Ok(child.wait()?.code().unwrap_or(1))
}

fn list(store_arg: &StoreArg) -> Result<i32> {
    let root = store_arg.dir()?;
    if !root.exists() {
        println!("no sessions in {}", root.display());
        return Ok(0);
    }
    store::check_private(&root, true)?;
    let entries = std::fs::read_dir(&root).with_context(|| format!("cannot read {}", root.display()))?;
    let mut names: Vec<String> = entries.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| store::check_name(n).is_ok()).collect();
    names.sort();
    if names.is_empty() {
        println!("no sessions in {}", root.display());
        return Ok(0);
    }
    let width = names.iter().map(String::len).max().unwrap_or(0).max(7);
    println!("{:<width$} {:>8} {:<10} {:<10} last checkpoint", "SESSION", "JOB", "STATE", "NODE");
    for name in names {
        let dir = root.join(&name);
        let s = match store::read_settings(&dir) {
            Ok(s) => s,
            Err(e) => {
                println!("{name:<width$} (unreadable: {e:#})");
                continue;
            }
        };
        let (state, node) = match s.job.map(job_state) {
            None => ("-".into(), String::new()),
            Some(Ok(Some(found))) => found,
            Some(Ok(None)) => ("ENDED".into(), String::new()),
            Some(Err(e)) => (format!("? ({e:#})"), String::new()),
        };
        let checkpoint = match store::read_checkpoint(&dir.join(store::IMAGE)) {
            Some(cp) => format!(
                "{} on {} ({:.1} MB), {}",
                crate::format_time(cp.at),
                cp.node,
                cp.bytes as f64 / 1e6,
                if state == "ENDED" { format!("kept: `allot session resume {name}` restores it") } else { "restored when the job runs".into() }
            ),
            None => "-".into(),
        };
        let failed = std::fs::read_dir(&dir).map(|e| e.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("image.failed-")).count()).unwrap_or(0);
        let failed = if failed > 0 { format!("; {failed} kept after a failed restore") } else { String::new() };
        println!("{name:<width$} {:>8} {state:<10} {node:<10} {checkpoint}{failed}", s.job.map_or("-".into(), |j| j.to_string()));
    }
    Ok(0)
}

fn stop(dir: &Path) -> Result<i32> {
    let s = store::read_settings(dir)?;
    store::write_private(&dir.join(store::STOPPING), "")?;
    if let Some(job) = s.job {
        let out = Command::new("scancel").arg(job.to_string()).output().context("cannot run scancel")?;
        if !out.status.success() {
            eprintln!("allot: scancel {job}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        // The job's side ends the program (no checkpoint) on the signal.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while matches!(job_state(job), Ok(Some(_))) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    println!("session {} stopped and removed", s.name);
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sessions_comment_names_it_beside_the_contract() {
        assert_eq!(super::name_in_comment("allot-session:nb min_runtime=2h"), Some("nb"));
        assert_eq!(super::name_in_comment("sweep,allot-session:a.b_c;priority=high"), Some("a.b_c"));
        assert_eq!(super::name_in_comment("min_runtime=2h"), None);
        assert_eq!(super::name_in_comment("allot-session:../x"), None);
        // The contract's parser takes the word as a plain word.
        let rules = allot::contract::ContractRules { min_runtime_cap: 8 * 3600, default_min_runtime: 3600 };
        let parsed = allot::contract::parse_comment("allot-session:nb min_runtime=2h", rules).unwrap();
        assert_eq!((parsed.contract.min_runtime, parsed.other_text.as_str()), (7200, "allot-session:nb"));
    }
}
