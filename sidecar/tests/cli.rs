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
        c.env("ALLOT_LEDGER", self.ledger()).env_remove("SUDO_USER").env("SLURM_CONF", "/nonexistent");
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

#[test]
fn owners_edit_their_subtree_and_nobody_else_does() {
    if !is_root() {
        eprintln!("SKIPPED: acting for another user (sudo) needs root");
        return;
    }
    let s = Scratch::new();
    let file = s.file("budgets.toml", &std::fs::read_to_string(EXAMPLE).unwrap());
    assert!(s.run(&["sync", file.to_str().unwrap()]).status.success());
    let as_user = |user: &str, args: &[&str]| s.allot().env("SUDO_USER", user).args(args).output().unwrap();

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
    // Nor sync a first budget into a new ledger it does not own.
    let fresh = Scratch::new();
    let first = fresh.allot().env("SUDO_USER", "nobody").args(["sync", EXAMPLE]).output().unwrap();
    assert!(text(&first).contains("may not sync the first budget"), "{}", text(&first));
    assert!(!fresh.ledger().exists());

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
    let budget = "[cluster]\ngpus = 4\n[budget]\n[budget.p]\nshare = 1\n[budget.p.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n";
    let out = s.run(&["sync", s.file("b.toml", budget).to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));

    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let run = |job_id: u32, leaf: &str, gpus: u32, start: i64, end: Option<i64>, allocated: bool| {
        RunUpdate::Open(RunRow { job_id, run_start: now + start, run_end: end.map(|e| now + e), leaf: Some(leaf.into()), account: None, user: None, gpus, allocated, end_reason: None })
    };
    let runs = vec![
        run(1, "p/a", 2, -3000, Some(-1200), true),  // 1.00 GPU-h
        run(2, "p/a", 1, -7200, Some(-1800), true),  // 0.50 GPU-h inside the hour
        run(3, "b", 4, -600, None, false),           // 0.67 GPU-h, unallocated
        run(4, "p", 1, -2000, Some(-1100), true),    // 0.25 GPU-h, "p" is no leaf
        run(5, "gone", 2, -1000, Some(-100), true),  // 0.50 GPU-h, no such node
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
