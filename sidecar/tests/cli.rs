//! The `allot` command end to end: the real binary, a real SQLite ledger in
//! a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use allot_ledger::Ledger;
use common::fingerprint;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/budgets.toml");

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().unwrap() }
    }
    fn ledger(&self) -> PathBuf {
        self.dir.path().join("ledger.db")
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn allot(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_allot"));
        c.env("ALLOT_LEDGER", self.ledger()).env_remove("SUDO_USER").env_remove("SUDO_UID").env("SLURM_CONF", "/nonexistent");
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.allot().args(args).output().unwrap()
    }
    fn fingerprint(&self) -> (u64, u64) {
        fingerprint(&self.ledger())
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn is_root() -> bool {
    nix::unistd::Uid::current().is_root()
}

#[test]
fn sync_show_and_history() {
    let s = Scratch::new();
    let out = s.run(&["sync", EXAMPLE]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("synced budget version 1"), "{}", text(&out));
    // The same file again writes nothing.
    let again = s.run(&["sync", EXAMPLE]);
    assert!(text(&again).contains("unchanged: the file is budget version 1"), "{}", text(&again));

    let show = s.run(&["budget", "show", "vision/detection"]);
    let shown = text(&show);
    assert!(show.status.success(), "{shown}");
    // vision 45% x detection 30/100 x tracking 1/3 = 4.5%.
    assert!(shown.lines().any(|l| l.contains("tracking") && l.contains("4.50%") && l.contains("tomas")), "{shown}");
    assert!(!shown.contains("language"), "showed more than the subtree:\n{shown}");

    let l = Ledger::open_read_only(s.ledger()).unwrap();
    let v = l.current_budget().unwrap().unwrap();
    assert_eq!(v.version, 1);
    assert_eq!(v.toml, std::fs::read_to_string(EXAMPLE).unwrap());
    assert_eq!(l.budget_nodes(1).unwrap().len(), 38);
}

/// Every file in tests/bad-budgets starts with `# expect: ...`: the text
/// the error must contain, after the file name (`:LINE: field: message`).
#[test]
fn bad_budget_files_are_refused_with_their_line_and_change_nothing() {
    let s = Scratch::new();
    assert!(s.run(&["sync", EXAMPLE]).status.success());
    let before = s.fingerprint();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-budgets");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 20, "the corpus is missing");
    for file in files {
        let body = std::fs::read_to_string(&file).unwrap();
        let expect = body.lines().next().and_then(|l| l.strip_prefix("# expect: ")).unwrap_or_else(|| panic!("{} has no # expect line", file.display()));
        let name = file.display().to_string();
        let wanted = if expect.starts_with(':') { format!("{name}{expect}") } else { format!("{name}: {expect}") };
        let out = s.run(&["sync", &name]);
        let said = text(&out);
        assert!(!out.status.success(), "{name} was accepted");
        assert!(said.contains(&wanted), "{name}: wanted\n  {wanted}\ngot\n{said}");
        assert!(said.contains("the ledger was not changed"), "{said}");
        assert_eq!(s.fingerprint(), before, "{name} changed the ledger");
    }
}

#[test]
fn every_error_in_a_file_is_reported() {
    let s = Scratch::new();
    let f = s.file("many.toml", "[cluster]\nlookback = \"x\"\n[budget]\n[budget.a]\nshare = 0\naccounts = [\"a\"]\n[budget.b]\nshare = 1\n");
    let out = s.run(&["sync", f.to_str().unwrap()]);
    let said = text(&out);
    assert!(said.contains(":2: cluster.lookback"), "{said}");
    assert!(said.contains(":5: budget.a.share"), "{said}");
    assert!(said.contains(":7: budget.b.accounts"), "{said}");
    assert!(said.contains("3 error(s)"), "{said}");
    assert!(!s.ledger().exists(), "a refused first sync created the ledger");
}

/// Test users, created once if missing (the cluster tests' harness does the
/// same). Creation is one at a time, across threads and test processes
/// (an flock): CI once saw a user's uid read in one test differ from the
/// one `allot` read a moment later while other tests were adding users.
fn ensure_user(user: &str) -> (u32, u32) {
    let lock = std::fs::File::create("/run/allot-test-users.lock").expect("a lock file in /run (the tests run as root)");
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).expect("flock");
    if nix::unistd::User::from_name(user).unwrap().is_none() {
        let out = Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", user]).output().expect("useradd runs");
        assert!(out.status.success(), "useradd {user}: {}", text(&out));
    }
    let u = nix::unistd::User::from_name(user).unwrap().unwrap();
    (u.uid.as_raw(), u.gid.as_raw())
}

/// `allot` as `sudo` runs it for `user`: as root, with SUDO_USER, SUDO_UID
/// and SUDO_GID set. `$SLURM_CONF` names a slurm.conf that makes `user` the
/// SlurmUser, which must not count under sudo.
fn sudo_allot(s: &Scratch, user: &str) -> Command {
    let (uid, gid) = ensure_user(user);
    let conf = s.file("user-slurm.conf", &format!("SlurmUser={user}\n"));
    let mut c = s.allot();
    c.env("SUDO_USER", user).env("SUDO_UID", uid.to_string()).env("SUDO_GID", gid.to_string()).env("SLURM_CONF", conf);
    c
}

/// Whether this machine lets the tests run `allot` in a private mount
/// namespace (root, and unshare permitted), where /etc/slurm is a directory
/// of the test's own.
fn namespaces_work() -> bool {
    is_root() && Command::new("unshare").args(["--mount", "true"]).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Run (`--ignored`) where it cannot work: a failure that says why, never a
/// silent pass.
#[track_caller]
fn require_namespaces() {
    assert!(
        namespaces_work(),
        "this test acts for other users (sudo) in a private mount namespace: run it as root where unshare --mount works (scripts/test.sh does)"
    );
}

/// [`sudo_allot`] in a private mount namespace where /etc/slurm holds only
/// an allot.conf (root's, mode 0644) whose LedgerPath is this scratch
/// ledger: the configured ledger, the only one a sudo user may use.
fn sudo_configured(s: &Scratch, user: &str, args: &[&str]) -> Output {
    use std::os::unix::fs::PermissionsExt;
    let etc = s.dir.path().join("etc-slurm");
    if !etc.exists() {
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(etc.join("allot.conf"), format!("# the test's allot.conf\nLedgerPath={}\n", s.ledger().display())).unwrap();
        std::fs::set_permissions(etc.join("allot.conf"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir_all("/etc/slurm").unwrap();
    }
    let template = sudo_allot(s, user);
    let mut c = Command::new("unshare");
    c.args(["--mount", "sh", "-c", "mount --make-rprivate / && mount --bind \"$1\" /etc/slurm && shift && exec \"$@\"", "sh"])
        .arg(&etc)
        .arg(template.get_program())
        .args(args);
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.env_remove("ALLOT_LEDGER").output().unwrap()
}

#[test]
#[ignore = "needs root and a private mount namespace (unshare): scripts/test.sh runs it"]
fn owners_edit_their_subtree_and_nobody_else_does() {
    require_namespaces();
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let as_user = |user: &str, args: &[&str]| sudo_configured(&s, user, args);

    // tomas owns vision/detection/tracking: members yes, its own share no.
    let ok = as_user("tomas", &["budget", "set", "vision/detection/tracking", "members=tomas,mia,leo,newbie"]);
    assert!(ok.status.success(), "{}", text(&ok));
    let before = s.fingerprint();
    let file_before = std::fs::read_to_string(&file).unwrap();
    let refused = as_user("tomas", &["budget", "set", "vision/detection/tracking", "share=5"]);
    let said = text(&refused);
    assert!(!refused.status.success());
    assert!(said.contains("needs an owner of vision/detection: dario, vera, director or an admin"), "{said}");
    assert_eq!(s.fingerprint(), before, "a refused edit changed the ledger");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), file_before, "a refused edit changed the file");

    // dario owns vision/detection: may set the share, add and remove teams.
    for args in [
        &["budget", "set", "vision/detection/tracking", "share=2"][..],
        &["budget", "add", "vision/detection/newteam", "share=1", "accounts=newteam", "members=kim", "owners=kim"][..],
        &["budget", "remove", "vision/detection/open-vocab"][..],
    ] {
        let out = as_user("dario", args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    // A stranger may change nothing, not even a member list.
    let stranger = as_user("nobody", &["budget", "set", "vision/detection/newteam", "members=nobody"]);
    assert!(!stranger.status.success());
    assert!(text(&stranger).contains("needs an owner of vision/detection/newteam: kim, dario, vera, director or an admin"), "{}", text(&stranger));
    // Nor name a budget file of their own to sync.
    let before = s.fingerprint();
    let first = as_user("nobody", &["sync", EXAMPLE]);
    assert!(!first.status.success());
    assert!(text(&first).contains("nobody may not choose the budget file under sudo (the FILE of `allot sync`)"), "{}", text(&first));
    assert_eq!(s.fingerprint(), before);

    // History records who did what.
    let history = text(&s.run(&["history"]));
    assert!(history.contains("version 5") && history.contains("by dario"), "{history}");
    assert!(history.contains("- vision/detection/open-vocab"), "{history}");
    assert!(history.contains("~ vision/detection/tracking share 1 -> 2"), "{history}");
    assert!(history.contains("by tomas"), "{history}");
    // The file kept its comments and reads top-down.
    let edited = std::fs::read_to_string(&file).unwrap();
    assert!(edited.starts_with("# allot budget tree of the Example Lab"), "comments lost");
    let newteam = edited.find("[budget.vision.detection.newteam]").unwrap();
    assert!(newteam > edited.find("[budget.vision.detection.detect3d]").unwrap());
    assert!(newteam < edited.find("[budget.vision.segmentation]").unwrap());
    assert!(!edited.contains("open-vocab]"));
}

/// Under the README's sudo rule (`allot budget *` as root), a manager must
/// not steer root to another ledger or budget file: `--ledger`,
/// `$ALLOT_LEDGER`, `--file`, and the FILE of `sync` and `watch` are
/// refused, `$SLURM_CONF` does not make them the SlurmUser, and nothing
/// changes.
#[test]
#[ignore = "needs root and a private mount namespace (unshare): scripts/test.sh runs it"]
fn under_sudo_a_manager_chooses_neither_the_ledger_nor_the_budget_file() {
    require_namespaces();
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    // alice's own ledger, in which she owns the root, and her own file.
    let mine = s.file("mine.toml", "[budget]\nowners = [\"alice\"]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n");
    let before = s.fingerprint();
    let file_before = std::fs::read(&file).unwrap();
    let mine_before = std::fs::read(&mine).unwrap();
    let ledger = s.ledger().display().to_string();
    let (mine_s, file_s) = (mine.display().to_string(), file.display().to_string());

    let cases: Vec<(Vec<&str>, bool, &str)> = vec![
        // (arguments, keep $ALLOT_LEDGER, what the refusal names)
        (
            vec!["budget", "--ledger", &ledger, "set", "vision", "share=90"],
            false,
            "alice may not choose the ledger under sudo (--ledger): only an admin (root, the SlurmUser",
        ),
        (vec!["budget", "set", "vision", "share=90"], true, "alice may not choose the ledger under sudo (ALLOT_LEDGER)"),
        (vec!["budget", "set", "--file", &mine_s, "a", "share=2"], false, "alice may not choose the budget file under sudo (--file)"),
        (vec!["budget", "add", "--file", &file_s, "vision/x", "share=2"], false, "alice may not choose the budget file under sudo (--file)"),
        (vec!["budget", "remove", "--file", &file_s, "vision"], false, "alice may not choose the budget file under sudo (--file)"),
        (vec!["sync", &file_s], false, "alice may not choose the budget file under sudo (the FILE of `allot sync`)"),
        (vec!["sync", "--check", "/etc/shadow"], false, "alice may not choose the budget file under sudo (the FILE of `allot sync`)"),
        (vec!["watch", &file_s], false, "alice may not choose the budget file under sudo (the FILE of `allot watch`)"),
        (vec!["ledger", "recover", "--force"], false, "alice may not recover the ledger: only an admin"),
    ];
    for (args, keep_env, wanted) in cases {
        let mut c = sudo_allot(&s, "alice");
        if !keep_env {
            c.env_remove("ALLOT_LEDGER");
        }
        let out = c.args(&args).stdin(Stdio::null()).output().unwrap();
        let said = text(&out);
        assert!(!out.status.success(), "{args:?} was accepted: {said}");
        assert!(said.contains(wanted), "{args:?}: wanted\n  {wanted}\ngot\n{said}");
        assert!(!said.contains("SlurmUser (alice)"), "$SLURM_CONF was read under sudo: {said}");
        assert_eq!(s.fingerprint(), before, "{args:?} changed the ledger");
        assert_eq!(std::fs::read(&file).unwrap(), file_before, "{args:?} changed the budget file");
        assert_eq!(std::fs::read(&mine).unwrap(), mine_before, "{args:?} changed alice's file");
    }
    // Reading is fine: the numbers are meant to be seen.
    {
        let show = sudo_configured(&s, "alice", &["budget", "show", "vision"]);
        assert!(show.status.success() && text(&show).contains("vision"), "{}", text(&show));
        let check = sudo_configured(&s, "alice", &["ledger", "check"]);
        assert!(check.status.success() && text(&check).contains(": ok"), "{}", text(&check));
        // The same refusal with the configured ledger in place.
        let refused = sudo_configured(&s, "alice", &["budget", "--ledger", &ledger, "set", "vision", "share=90"]);
        // --ledger naming the configured ledger itself chooses nothing: the edit is judged as usual.
        assert!(!refused.status.success() && text(&refused).contains("needs an owner of (root): director or an admin"), "{}", text(&refused));
        assert_eq!(s.fingerprint(), before);
    }
}

/// Under sudo allot runs as root, so a user who is not an admin names no file
/// or directory it would write or read with root's rights: every such
/// option is refused before anything is written, and `--json -` prints
/// instead (the user's shell writes it, with the user's rights).
#[test]
#[ignore = "needs root and a private mount namespace (unshare): scripts/test.sh runs it"]
fn under_sudo_a_user_names_no_file_that_root_would_write_or_read() {
    require_namespaces();
    let s = Scratch::new();
    // (A GPU count, so that `allot report` has figures before any plugin ran.)
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap().replacen("[cluster]", "[cluster]\ngpus = 32", 1));
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let out = s.dir.path().join("written-as-root");
    let at = |name: &str| out.join(name).display().to_string();
    let (json, plots, man, completions, csv, toml) = (at("report.json"), at("plots"), at("man"), at("completions"), at("w.csv"), at("b.toml"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["report", "--json", &json], "--json"),
        (vec!["report", "--plots", &plots], "--plots"),
        (vec!["report", "--plots", &plots, "--font", "/etc/shadow"], "--font /etc/shadow"),
        (vec!["serve", "--font", "/etc/shadow"], "--font /etc/shadow"),
        (vec!["doctor", "--slurm-conf", "/etc/shadow"], "--slurm-conf /etc/shadow"),
        (vec!["generate", "man", &man], "DIR"),
        (vec!["generate", "completions", &completions], "DIR"),
        (vec!["simulate", "generate", "debug", "--out", &csv, "--budgets-out", &toml], "--out"),
        (vec!["simulate", "/etc/shadow", "--cluster", "2x8"], "/etc/shadow"),
        (vec!["simulate", &csv, "--cluster", "2x8", "--json", &json], "--json"),
    ];
    for (args, named) in cases {
        let o = sudo_configured(&s, "alice", &args);
        let said = text(&o);
        assert!(!o.status.success(), "{args:?} was accepted: {said}");
        assert!(said.contains("alice may not name files under sudo (") && said.contains(named), "{args:?}: wanted a refusal naming {named}, got\n{said}");
        assert!(!out.exists(), "{args:?} wrote {} as root", out.display());
    }
    // `--json -` names no file: the JSON comes on standard output.
    let o = sudo_configured(&s, "alice", &["report", "--json", "-"]);
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)));
    assert!(report.is_object(), "{report}");
    // An admin (root, acting for nobody) may name files, as without sudo.
    std::fs::create_dir(&out).unwrap();
    let o = s.run(&["report", "--json", &json]);
    assert!(o.status.success() && out.join("report.json").exists(), "{}", text(&o));
}

/// Under sudo, the owner of the configured ledger is an admin; a sudo user's
/// ownership of some other file makes nobody an admin.
#[test]
#[ignore = "needs root and a private mount namespace (unshare): scripts/test.sh runs it"]
fn under_sudo_only_the_configured_ledger_decides_who_is_admin() {
    require_namespaces();
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let (bob, bob_gid) = ensure_user("bob");
    // carol owns a ledger of her own: that makes her nothing.
    let (carol, carol_gid) = ensure_user("carol");
    let other = s.dir.path().join("other.db");
    std::fs::copy(s.ledger(), &other).unwrap();
    std::os::unix::fs::chown(&other, Some(carol), Some(carol_gid)).unwrap();
    let out = sudo_configured(&s, "carol", &["budget", "--ledger", other.to_str().unwrap(), "show"]);
    assert!(text(&out).contains("carol may not choose the ledger under sudo (--ledger)"), "{}", text(&out));
    // bob owns the configured ledger: an admin, who may name files and ledgers.
    std::os::unix::fs::chown(s.ledger(), Some(bob), Some(bob_gid)).unwrap();
    let out = sudo_configured(&s, "bob", &["budget", "set", "--file", file.to_str().unwrap(), "vision", "share=50"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = sudo_configured(&s, "bob", &["budget", "--ledger", other.to_str().unwrap(), "show", "vision"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn edits_that_break_the_tree_are_refused() {
    let s = Scratch::new();
    let file = s.file("b.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let before = s.fingerprint();
    // Adding a child under a team makes it an inner node that still has accounts.
    let out = s.run(&["budget", "add", "vision/detection/tracking/sub", "share=1", "accounts=sub"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("budget.vision.detection.tracking.accounts: only leaves"), "{}", text(&out));
    let out = s.run(&["budget", "set", "vision/detection", "share=0"]);
    assert!(text(&out).contains("share must be a positive number, got 0"), "{}", text(&out));
    let out = s.run(&["budget", "set", "vision/nope", "share=1"]);
    assert!(text(&out).contains("no node 'vision/nope'"), "{}", text(&out));
    assert_eq!(s.fingerprint(), before);
}

#[test]
fn watch_resyncs_on_change_and_survives_a_bad_edit() {
    let s = Scratch::new();
    let original = std::fs::read_to_string(EXAMPLE).unwrap();
    let file = s.file("watched.toml", &original);
    let mut child = s.allot().args(["watch", file.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let version = || Ledger::open_read_only(s.ledger()).ok().and_then(|l| l.current_budget_version().ok().flatten());
    let wait_for = |v: i64| {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if version() == Some(v) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    assert!(wait_for(1), "watch did not sync the file at start");
    // An editor-style save: write elsewhere, rename over.
    let edited = original.replace("[budget.vision]\nshare = 45", "[budget.vision]\nshare = 50");
    let tmp = s.file("watched.toml.tmp", &edited);
    std::fs::rename(&tmp, &file).unwrap();
    assert!(wait_for(2), "watch did not pick up the edit");
    // A bad save is reported and skipped.
    std::fs::write(&file, "[budget]\nshare = = 1\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(version(), Some(2));
    assert!(child.try_wait().unwrap().is_none(), "watch died on a bad file");
    // And the next good save goes through.
    std::fs::write(&file, &original).unwrap();
    assert!(wait_for(3), "watch stopped syncing after a bad file");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("not synced") && log.contains("invalid TOML"), "{log}");
}

/// `allot usage`: each run charged to its leaf in the current tree over the
/// window (pro rata at its edge), unallocated time apart, and runs whose
/// budget is no longer a leaf (removed, or now an inner node) counted as
/// outside the tree.
#[test]
fn usage_charges_each_leaf_over_the_window() {
    use allot_ledger::{Period, RunRow, RunUpdate};
    let s = Scratch::new();
    let budget =
        "[cluster]\ngpus = 4\n[budget]\n[budget.p]\nshare = 1\n[budget.p.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n";
    let out = s.run(&["sync", s.file("b.toml", budget).to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let run = |job_id: u32, leaf: &str, gpus: u32, start: i64, end: Option<i64>, allocated: bool| {
        RunUpdate::Open(RunRow {
            job_id,
            run_start: now + start,
            run_end: end.map(|e| now + e),
            leaf: Some(leaf.into()),
            account: None,
            user: None,
            gpus,
            allocated,
            end_reason: None,
        })
    };
    let runs = vec![
        run(1, "p/a", 2, -3000, Some(-1200), true), // 1.00 GPU-h
        run(2, "p/a", 1, -7200, Some(-1800), true), // 0.50 GPU-h inside the hour
        run(3, "b", 4, -600, None, false),          // 0.67 GPU-h, unallocated
        run(4, "p", 1, -2000, Some(-1100), true),   // 0.25 GPU-h, "p" is no leaf
        run(5, "gone", 2, -1000, Some(-100), true), // 0.50 GPU-h, no such node
    ];
    Ledger::open(s.ledger()).unwrap().record_period(&Period { runs, ..Default::default() }).unwrap();

    let out = s.run(&["usage", "--window", "1h"]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let row = |leaf: &str| shown.lines().find(|l| l.split_whitespace().next() == Some(leaf)).map(|l| l.split_whitespace().collect::<Vec<_>>());
    // LEAF SHARE OWED CHARGED USED UNALLOCATED RUNS; owed = 50% x 4 GPUs x 1 h.
    assert_eq!(row("p/a").unwrap(), ["p/a", "50.00%", "2.00", "1.50", "0.75", "0.00", "2"], "{shown}");
    assert_eq!(row("b").unwrap(), ["b", "50.00%", "2.00", "0.00", "0.00", "0.67", "1"], "{shown}");
    assert!(shown.contains("(and 0.75 GPU-hours by jobs outside the current budget tree)"), "{shown}");
}

/// Deterministic garbage.
fn garbage(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The files `allot ledger recover` moved aside: `ledger.db.KIND-<UTC time>`.
fn moved_aside(s: &Scratch, kind: &str) -> Vec<PathBuf> {
    let prefix = format!("ledger.db.{kind}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && !name.ends_with("-wal") && !name.ends_with("-shm")
        })
        .collect();
    found.sort();
    found
}

const RECOVERY_HINT: &str = "To recover: `allot ledger recover` moves the bad file (and its -wal and -shm) aside to ledger.db.corrupt-<UTC time>";

#[test]
fn a_ledger_that_is_not_a_database_is_explained_and_left_alone() {
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    for (what, bytes) in [("random bytes", garbage(100_000)), ("a text file", b"[budget]\nthis is not a ledger\n".to_vec())] {
        std::fs::write(s.ledger(), &bytes).unwrap();
        for args in
            [&["sync", file.to_str().unwrap()][..], &["budget", "show"], &["budget", "set", "vision", "share=50"], &["history"], &["usage"], &["why", "1"]]
        {
            let out = s.run(args);
            let said = text(&out);
            assert!(!out.status.success(), "{what}: {args:?} succeeded");
            let wanted = format!("allot: the ledger {} is not a valid SQLite database (file is not a database", s.ledger().display());
            assert!(said.contains(&wanted) && said.contains(RECOVERY_HINT), "{what}: {args:?}:\n{said}");
            assert!(said.contains("then run `allot sync <budget file>`"), "{said}");
            assert_eq!(std::fs::read(s.ledger()).unwrap(), bytes, "{what}: {args:?} changed the ledger file");
        }
        let check = s.run(&["ledger", "check"]);
        assert!(!check.status.success() && text(&check).contains(RECOVERY_HINT), "{}", text(&check));
    }
}

#[test]
fn ledger_check_says_ok_or_what_is_wrong() {
    let s = Scratch::new();
    let missing = s.run(&["ledger", "check"]);
    assert!(!missing.status.success() && text(&missing).contains("does not exist"), "{}", text(&missing));
    assert!(s.run(&["sync", EXAMPLE]).status.success());
    let ok = s.run(&["ledger", "check"]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert_eq!(text(&ok).trim(), format!("ledger {}: ok (integrity check passed; budget version 1)", s.ledger().display()));
    // Truncated: the header is there, the pages are not.
    let len = std::fs::metadata(s.ledger()).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(s.ledger()).unwrap().set_len(len / 3).unwrap();
    let bad = s.run(&["ledger", "check"]);
    let said = text(&bad);
    assert!(!bad.status.success(), "{said}");
    assert!(said.contains(&format!("the ledger {} is damaged (", s.ledger().display())) && said.contains(RECOVERY_HINT), "{said}");
}

#[test]
fn recover_moves_a_bad_ledger_aside_and_starts_a_new_one() {
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let bytes = garbage(100_000);
    std::fs::write(s.ledger(), &bytes).unwrap();
    let out = s.run(&["ledger", "recover"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("is not a valid SQLite database"), "{said}");
    assert!(said.contains("no budget could be read from the old ledger"), "{said}");
    assert!(said.contains("the new ledger is empty: run `allot sync <budget file>`"), "{said}");
    let aside = moved_aside(&s, "corrupt");
    assert_eq!(aside.len(), 1, "{said}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "the bad file was not kept as it was");
    assert!(said.contains(&format!("moved {} to {}", s.ledger().display(), aside[0].display())), "{said}");
    // The new ledger works.
    let check = s.run(&["ledger", "check"]);
    assert!(check.status.success() && text(&check).contains("no budget synced yet"), "{}", text(&check));
    let sync = s.run(&["sync", file.to_str().unwrap()]);
    assert!(sync.status.success() && text(&sync).contains("synced budget version 1"), "{}", text(&sync));
    // And a healthy ledger is left alone.
    let before = s.fingerprint();
    let fine = s.run(&["ledger", "recover"]);
    assert!(fine.status.success() && text(&fine).contains("is fine (integrity check passed; budget version 1): nothing to recover"), "{}", text(&fine));
    assert_eq!(s.fingerprint(), before);
    assert_eq!(moved_aside(&s, "corrupt").len(), 1);
}

#[test]
fn recover_resyncs_the_budget_a_damaged_ledger_still_holds() {
    let s = Scratch::new();
    let original = std::fs::read_to_string(EXAMPLE).unwrap();
    let file = s.file("budgets.toml", &original);
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let edited = original.replace("[budget.vision]\nshare = 45", "[budget.vision]\nshare = 50");
    std::fs::write(&file, &edited).unwrap();
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    // Pages of other data after the budget's, then damage to those only.
    {
        let c = rusqlite::Connection::open(s.ledger()).unwrap();
        c.execute_batch("CREATE TABLE filler (x BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) INSERT INTO filler SELECT zeroblob(4000) FROM n;")
            .unwrap();
    }
    let mut bytes = std::fs::read(s.ledger()).unwrap();
    let n = bytes.len();
    bytes[n - 40_000..].copy_from_slice(&garbage(40_000));
    std::fs::write(s.ledger(), &bytes).unwrap();
    let check = s.run(&["ledger", "check"]);
    assert!(!check.status.success() && text(&check).contains("is damaged"), "{}", text(&check));

    let out = s.run(&["ledger", "recover"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let wanted = "re-synced the old ledger's budget (version 2, synced";
    assert!(said.contains(wanted) && said.contains(&format!("from {}) into the new ledger as version 1", file.display())), "{said}");
    let aside = moved_aside(&s, "corrupt");
    assert_eq!(aside.len(), 1, "{said}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "the damaged file was not kept as it was");
    let l = Ledger::open_read_only(s.ledger()).unwrap();
    let v = l.current_budget().unwrap().unwrap();
    assert_eq!((v.version, v.toml.as_str(), v.source.as_str()), (1, edited.as_str(), file.to_str().unwrap()));
    drop(l);
    // Edits go on in the same file.
    let set = s.run(&["budget", "set", "vision", "share=55"]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(std::fs::read_to_string(&file).unwrap().contains("share = 55"));
}

#[test]
fn recover_force_replaces_a_healthy_ledger_keeping_its_budget() {
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let bytes = std::fs::read(s.ledger()).unwrap();
    let out = s.run(&["ledger", "recover", "--force"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("re-synced the old ledger's budget (version 1"), "{said}");
    let aside = moved_aside(&s, "replaced");
    assert_eq!(aside.len(), 1, "{said}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes);
    assert_eq!(Ledger::open_read_only(s.ledger()).unwrap().current_budget_version().unwrap(), Some(1));
}

/// A ledger created by `allot sync` is readable by all and writable by its
/// owner only, whatever the umask; so is a directory made for it.
#[test]
fn sync_creates_the_ledger_with_sane_modes() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let ledger = s.dir.path().join("state/allot/ledger.db");
    let out = Command::new("sh")
        .args(["-c", "umask 000 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_allot"))
        .args(["--ledger", ledger.to_str().unwrap(), "sync", EXAMPLE])
        .env("SLURM_CONF", "/nonexistent")
        .env_remove("SUDO_USER")
        .env_remove("SUDO_UID")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&ledger), 0o644);
    assert_eq!(mode(ledger.parent().unwrap()), 0o755);
    assert_eq!(mode(ledger.parent().unwrap().parent().unwrap()), 0o755);
    let wal = PathBuf::from(format!("{}-wal", ledger.display()));
    if wal.exists() {
        assert_eq!(mode(&wal), 0o644);
    }
}

#[test]
fn associations_are_printed_for_anyone_and_applied_by_admins_only() {
    let s = Scratch::new();
    let out = s.run(&["sync", EXAMPLE]);
    assert!(out.status.success(), "{}", text(&out));
    let out = s.run(&["associations", "--cluster", "lab"]);
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("sacctmgr -i add account tracking Cluster=lab 'Description=allot budget vision/detection/tracking' Organization=vision\n"),
        "{printed}"
    );
    assert!(printed.lines().any(|l| l.starts_with("sacctmgr -i add user ") && l.contains("tomas") && l.contains("Account=tracking")), "{printed}");
    // The cluster comes from slurm.conf when not given; a missing one is said.
    let out = s.run(&["associations"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("cannot read /nonexistent for its ClusterName (or give --cluster)"), "{}", text(&out));
    let conf = s.file("slurm.conf", "ClusterName=Lab2\n");
    let out = s.allot().env("SLURM_CONF", &conf).arg("associations").output().unwrap();
    assert!(text(&out).contains("Cluster=lab2 "), "{}", text(&out));
}

/// Applying associations changes Slurm: admins only, not a manager under sudo.
#[test]
#[ignore = "needs root and a private mount namespace (unshare): scripts/test.sh runs it"]
fn applying_associations_is_for_admins_only() {
    require_namespaces();
    let s = Scratch::new();
    let out = s.run(&["sync", EXAMPLE]);
    assert!(out.status.success(), "{}", text(&out));
    let out = sudo_configured(&s, "tomas", &["associations", "--cluster", "lab", "--apply"]);
    assert!(!out.status.success(), "a manager applied associations: {}", text(&out));
    assert!(text(&out).contains("tomas may not change Slurm's associations: only an admin"), "{}", text(&out));
}

/// A ledger from before clusters were named: `allot ledger adopt` gives its
/// rows to the cluster that wrote them, once.
#[test]
fn ledger_adopt_gives_unnamed_rows_to_a_cluster() {
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let run = allot_ledger::RunRow {
        job_id: 7,
        run_start: 100,
        run_end: Some(200),
        leaf: Some("vision/detection/tracking".into()),
        account: Some("tracking".into()),
        user: Some("tomas".into()),
        gpus: 2,
        allocated: true,
        end_reason: Some("completed".into()),
    };
    Ledger::open(s.ledger()).unwrap().record_period(&allot_ledger::Period { runs: vec![allot_ledger::RunUpdate::Open(run)], ..Default::default() }).unwrap();
    assert_eq!(Ledger::open_read_only(s.ledger()).unwrap().clusters().unwrap(), vec![String::new()]);
    let out = s.run(&["ledger", "adopt", "--cluster", "Alpha"]);
    assert!(out.status.success() && text(&out).contains("1 rows written before clusters were named are now cluster alpha's"), "{}", text(&out));
    let l = Ledger::open_read_only(s.ledger()).unwrap();
    assert_eq!((l.clusters().unwrap(), l.unclustered_rows().unwrap()), (vec!["alpha".to_owned()], 0));
    assert_eq!(l.for_cluster(Some("alpha")).unwrap().runs_of_job(7).unwrap().len(), 1);
    let again = s.run(&["ledger", "adopt", "--cluster", "beta"]);
    assert!(again.status.success() && text(&again).contains("nothing to adopt"), "{}", text(&again));
}
