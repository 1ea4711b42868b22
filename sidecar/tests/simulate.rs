//! `allot simulate` end to end, on the inputs a new user gets wrong: the
//! real binary, its exit status and what it prints.

use std::path::PathBuf;
use std::process::{Command, Output};

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().unwrap() }
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    /// `allot ARGS`, from the scratch directory (file names in messages stay short).
    fn allot(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_allot")).current_dir(self.dir.path()).args(args).output().unwrap()
    }
    /// `allot simulate ARGS -q`.
    fn simulate(&self, args: &[&str]) -> Output {
        self.allot(&[&["simulate"], args, &["-q"]].concat())
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails (exit status 1) saying `wanted`, and prints no report.
#[track_caller]
fn refused(o: &Output, wanted: &str) {
    refused_with(o, 1, wanted);
}

#[test]
fn problems_of_the_whole_workload_file_are_one_error_without_the_skip_hint() {
    let s = Scratch::new();
    s.file("missing.csv", "submit_s,gpus,team\n0,1,a\n");
    s.file("empty.csv", "");
    s.file("header.csv", "submit_s,gpus,runtime_s,team\r\n");
    std::fs::create_dir(s.dir.path().join("dir.csv")).unwrap();
    let cases = [
        (
            "missing.csv",
            "allot: missing.csv:1: the header lacks the required column(s) runtime_s: it names submit_s,gpus,team; the columns are submit_s,gpus,runtime_s,team (optional: ",
        ),
        ("empty.csv", "allot: empty.csv: the file is empty: a workload CSV starts with a header line naming its columns, submit_s,gpus,runtime_s,team"),
        ("header.csv", "allot: header.csv: no jobs: the file has only a header"),
        ("dir.csv", "allot: dir.csv: is a directory, not a CSV file"),
    ];
    for (file, wanted) in cases {
        for skip in [false, true] {
            let mut args = vec![file, "--cluster", "2x8"];
            if skip {
                args.push("--skip-bad-rows");
            }
            let out = s.simulate(&args);
            refused(&out, wanted);
            assert!(!stderr(&out).contains("skip-bad-rows") && !stderr(&out).contains("bad row"), "{args:?}: {}", stderr(&out));
            assert_eq!(stderr(&out).lines().count(), 1, "{args:?}: one error: {}", stderr(&out));
        }
    }
}

#[test]
fn every_problem_of_every_row_is_reported_with_its_line_and_column() {
    let s = Scratch::new();
    s.file(
        "jobs.csv",
        "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,priority\r\n\
         1,0,1,60,a,,,\r\n\
         2,0,-2,60,a,,,\r\n\
         1,x,1,0,,-5,maybe,urgent\r\n\
         4294967296,0,1,60,a,,,\r\n\
         5,0,1,60,b,,,\r\n",
    );
    let out = s.simulate(&["jobs.csv", "--cluster", "2x8"]);
    refused(&out, "allot: jobs.csv:3: column 3 (gpus): gpus must be a whole number of at least 1, got -2\n");
    let said = stderr(&out);
    for wanted in [
        "jobs.csv:4: column 1 (job_id): job_id 1 is already used on line 2\n",
        "jobs.csv:4: column 2 (submit_s): submit_s must be a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0), got 'x'\n",
        "jobs.csv:4: column 4 (runtime_s): runtime_s must be a whole number of seconds of at least 1, got 0\n",
        "jobs.csv:4: column 5 (team): team is empty",
        "jobs.csv:4: column 6 (min_runtime_s): min_runtime_s must be a whole number of seconds of at least 0 (0: unallocated), got -5\n",
        "jobs.csv:4: column 7 (resumable): resumable must be true or false (or 1/0, yes/no), got 'maybe'\n",
        "jobs.csv:4: column 8 (priority): priority must be low, normal or high, got 'urgent'\n",
        "jobs.csv:5: column 1 (job_id): job_id must be a whole number from 0 to 4294967295, got 4294967296\n",
        "9 problem(s) in 3 row(s); fix them, or pass --skip-bad-rows to run without those rows",
    ] {
        assert!(said.contains(wanted), "wanted\n  {wanted}\ngot\n{said}");
    }
    // Skipped: the good rows run, every problem is still listed, and the report counts the good rows only.
    let out = s.simulate(&["jobs.csv", "--cluster", "2x8", "--skip-bad-rows", "--policy", "allot"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert_eq!(said.lines().filter(|l| l.contains(": skipped the row: column ")).count(), 9, "{said}");
    assert!(said.contains("jobs.csv:4: skipped the row: column 8 (priority): priority must be low, normal or high, got 'urgent'"), "{said}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["jobs", "2"]), "{report}");
    // All rows bad and skipped: nothing to run, said as such.
    s.file("all-bad.csv", "submit_s,gpus,runtime_s,team\n0,0,1,a\n0,1,0,a\n");
    refused(&s.simulate(&["all-bad.csv", "--cluster", "2x8", "--skip-bad-rows"]), "allot: all-bad.csv: no jobs: every row is bad (2 skipped, listed above)");
}

/// Exits with `code` (1: allot's own refusal, 2: the argument parser's), saying `wanted`, and simulates nothing.
#[track_caller]
fn refused_with(o: &Output, code: i32, wanted: &str) {
    let said = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{said}");
    assert!(said.contains(wanted), "wanted\n  {wanted}\ngot\n{said}");
    assert!(o.stdout.is_empty(), "printed a report: {}", String::from_utf8_lossy(&o.stdout));
}

const GOOD: &str = "submit_s,gpus,runtime_s,team\n0,1,60,a\n10,2,600,b\n";

#[test]
fn options_with_meaningless_values_are_refused_naming_the_option_and_the_value() {
    let s = Scratch::new();
    s.file("jobs.csv", GOOD);
    s.file("a-file", "");
    std::fs::create_dir(s.dir.path().join("a-dir")).unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        // The cluster's shape.
        (&["--cluster", "0x8"], 2, "invalid value '0x8' for '--cluster <CLUSTER>': '0x8': a cluster needs at least one node and one GPU per node"),
        (&["--cluster", "10x0"], 2, "'10x0': a cluster needs at least one node and one GPU per node"),
        (&["--cluster", "2x65"], 2, "'2x65': at most 64 GPUs per node"),
        // Durations: none is negative; the horizon and the backfill interval are longer than zero.
        (
            &["--checkpoint-interval=-5m"],
            2,
            "invalid value '-5m' for '--checkpoint-interval <CHECKPOINT_INTERVAL>': '-5m' is not a duration: a duration cannot be negative",
        ),
        (&["--horizon", "0"], 1, "allot: --horizon 0: must be longer than zero (the simulation stops this long after the first submission)"),
        (&["--restorable-kinds", "sessions"], 1, "allot: --restorable-kinds: the workload has no jobs of kind 'sessions' (its kinds: "),
        (&["--bf-interval", "0"], 1, "allot: --bf-interval 0: must be at least 1s"),
        (&["--lookback", "0s"], 1, "allot: --lookback 0: lookback: the lookback window must be longer than zero"),
        // The Gantt chart's window.
        (&["--gantt-from", "3d", "--gantt-to", "1d"], 1, "allot: --gantt-from 3d is not before --gantt-to 1d: the Gantt chart's window would be empty"),
        (&["--gantt-from", "1d", "--gantt-to", "1d"], 1, "allot: --gantt-from 1d is not before --gantt-to 1d"),
        (&["--gantt-from", "3d"], 1, "allot: --gantt-from 3d is not before --gantt-to 2d (the default)"),
        // Numbers.
        (&["--baseline-limit-factor", "0"], 1, "allot: --baseline-limit-factor 0: must be a positive finite number, such as 1 or 1.5"),
        (&["--baseline-limit-factor=-1"], 1, "allot: --baseline-limit-factor -1: must be a positive finite number"),
        (&["--baseline-limit-factor", "NaN"], 1, "allot: --baseline-limit-factor NaN: must be a positive finite number"),
        (&["--baseline-limit-factor", "inf"], 1, "allot: --baseline-limit-factor inf: must be a positive finite number"),
        (&["--preempt-margin", "inf"], 1, "allot: --preempt-margin inf: preempt_margin: must be a number of at least 0"),
        (&["--default-queue-depth", "0"], 1, "allot: --default-queue-depth 0: must be at least 1 (a main scheduler that considers no job starts none)"),
        (&["--preempt-max-job-test", "0"], 1, "allot: --preempt-max-job-test 0: must be at least 1"),
        (&["--bf-max-job-test", "0"], 1, "allot: --bf-max-job-test 0: must be at least 1"),
        (&["--small-job-nodes", "2"], 1, "allot: --small-job-nodes 2 keeps every node of the 2x8 cluster for small jobs"),
        // Where the outputs go, before any time is spent.
        (&["--json", "a-dir"], 1, "allot: --json a-dir: is a directory; give the name of the file to write"),
        (&["--json", "nowhere/r.json"], 1, "allot: --json nowhere/r.json: the directory nowhere does not exist"),
        (&["--plots", "a-file"], 1, "allot: --plots a-file: is a file, not a directory"),
    ];
    for (extra, code, wanted) in cases {
        let mut args = vec!["jobs.csv", "--cluster", "2x8"];
        if extra.first() == Some(&"--cluster") {
            args.truncate(1);
        }
        args.extend_from_slice(extra);
        refused_with(&s.simulate(&args), *code, wanted);
    }
    // Every broken rule at once.
    let out = s.simulate(&["jobs.csv", "--cluster", "2x8", "--horizon", "0", "--default-queue-depth", "0", "--baseline-limit-factor", "0"]);
    refused_with(&out, 1, "allot: --baseline-limit-factor 0: ");
    let said = stderr(&out);
    assert!(said.contains("\n--default-queue-depth 0: ") && said.contains("\n--horizon 0: "), "{said}");
}

#[test]
fn generator_options_with_meaningless_values_are_refused() {
    let s = Scratch::new();
    s.file("trace.csv", GOOD);
    let cases: &[(&[&str], i32, &str)] = &[
        (&["scenario", "--days", "0", "--out", "x.csv"], 1, "allot: --days 0: must be more than 0 and at most 3650"),
        (&["scenario", "--teams", "0", "--load", "inf", "--out", "x.csv"], 1, "allot: --load inf: must be more than 0 and at most 100"),
        (&["scenario", "--teams", "0", "--out", "x.csv"], 1, "allot: --teams 0: must be from 1 to 1000"),
        (&["scenario", "--cluster", "0x8", "--out", "x.csv"], 2, "'0x8': a cluster needs at least one node"),
        (&["scenario", "--seed=-1", "--out", "x.csv"], 2, "invalid value '-1' for '--seed <SEED>'"),
        (&["debug", "--days", "NaN", "--out", "x.csv"], 1, "allot: --days NaN: must be more than 0 and at most 3650"),
        (&["debug", "--load", "0", "--out", "x.csv"], 1, "allot: --load 0: must be more than 0 and at most 100"),
        (&["trace", "trace.csv", "--copies", "0", "--out", "x.csv"], 1, "allot: --copies 0: must be at least 1"),
        (&["trace", "trace.csv", "--runtime-scale", "inf", "--out", "x.csv"], 1, "allot: --runtime-scale inf: must be a positive finite number"),
        (&["trace", "trace.csv", "--runtime-scale", "0", "--out", "x.csv"], 1, "allot: --runtime-scale 0: must be a positive finite number"),
        (&["trace", "trace.csv", "--gpus-per-node", "0", "--out", "x.csv"], 1, "allot: --gpus-per-node 0: must be from 1 to 64"),
        (
            &["trace", "trace.csv", "--copies", "4294967295", "--out", "x.csv"],
            1,
            "allot: --copies 4294967295: 2 jobs x 4294967295 copies is more jobs than job ids (2^32)",
        ),
    ];
    for (extra, code, wanted) in cases {
        let mut args = vec!["simulate", "generate"];
        args.extend_from_slice(extra);
        let out = s.allot(&args);
        refused_with(&out, *code, wanted);
        assert!(!s.dir.path().join("x.csv").exists(), "{args:?} wrote its output");
    }
}

#[test]
fn a_budget_whose_gpus_disagree_with_the_cluster_is_said_and_the_cluster_used() {
    let s = Scratch::new();
    s.file("jobs.csv", GOOD);
    s.file("b.toml", "[cluster]\ngpus = 999\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n");
    let out = s.simulate(&["jobs.csv", "--cluster", "75x8", "--budgets", "b.toml", "--policy", "allot"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("warning: b.toml: [cluster] gpus = 999, but --cluster 75x8 has 600 GPUs: the simulation models 600 GPUs and scales fair-share by them (on the cluster, the plugins would scale by 999)"),
        "{said}"
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("of 600"), "{report}");
    // A budget the parser refuses is refused here too, with its line and field.
    s.file("tiny.toml", "[budget]\n[budget.a]\nshare = 1e308\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n");
    refused(
        &s.simulate(&["jobs.csv", "--cluster", "2x8", "--budgets", "tiny.toml"]),
        "allot: tiny.toml:6: budget.b.share: the node's effective share of the cluster is 1e-308, below the least allowed, 1e-12",
    );
    // Agreeing, or not given: nothing said.
    s.file("b600.toml", "[cluster]\ngpus = 600\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\", \"b\"]\n");
    let out = s.simulate(&["jobs.csv", "--cluster", "75x8", "--budgets", "b600.toml", "--policy", "allot"]);
    assert!(out.status.success() && !stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn settings_that_do_nothing_as_given_are_said() {
    let s = Scratch::new();
    s.file("jobs.csv", GOOD);
    let out = s.simulate(&["jobs.csv", "--cluster", "2x8", "--unallocated-grace", "10m", "--gantt-to", "1d"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("warning: --unallocated-grace 10m is longer than the grace time 5m: unallocated victims get 5m, never more than allocated ones"),
        "{said}"
    );
    assert!(said.contains("warning: --gantt-from and --gantt-to set the window of a picture that only --plots draws"), "{said}");
}

#[test]
fn jobs_refused_before_the_queue_are_said_once_and_a_run_of_nothing_fails() {
    let s = Scratch::new();
    s.file("b.toml", "[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n");
    s.file("jobs.csv", "job_id,submit_s,gpus,runtime_s,team\n1,0,1,60,a\n2,0,1,60,zz\n3,5,64,60,a\n4,9,1,60,zz\n5,9,1,60,yy\n6,10,16,60,b\n7,11,2,60,b\n");
    // Both policies, one warning.
    let out = s.simulate(&["jobs.csv", "--cluster", "2x8", "--budgets", "b.toml", "--small-job-nodes", "1"]);
    let said = stderr(&out);
    assert!(out.status.success(), "{said}");
    let warning = "warning: jobs refused before the queue: 5 of 7 (the report counts them as refused):\n\
                   \x20 3 jobs of teams no budget leaf charges: 'zz' (2 jobs), 'yy' (1 job); the budget's accounts are 'a', 'b'; jobs 2, 4, 5\n\
                   \x20 1 job larger than the cluster's 16 GPUs (the largest wants 64); job 3\n\
                   \x20 1 job larger than the 8 GPUs outside the 1 node(s) kept for small jobs, which they may not use; job 6\n";
    assert!(said.contains(warning), "wanted\n{warning}got\n{said}");
    assert_eq!(said.matches("warning: jobs refused").count(), 1, "{said}");
    // None refused: nothing said.
    let out = s.simulate(&["jobs.csv", "--cluster", "8x8", "--skip-bad-rows", "--small-job-nodes", "0"]);
    assert!(out.status.success() && !stderr(&out).contains("refused"), "{}", stderr(&out));
    // The shipped layout keeps one node of eight: a job of the whole cluster
    // can never run, and is said to be refused.
    let out = s.simulate(&["jobs.csv", "--cluster", "8x8", "--skip-bad-rows"]);
    let said = stderr(&out);
    assert!(
        out.status.success() && said.contains("1 job larger than the 56 GPUs outside the 1 node(s) kept for small jobs, which they may not use; job 3"),
        "{said}"
    );
    // Every job refused: a failure that says why, and no report.
    s.file("strangers.csv", "submit_s,gpus,runtime_s,team\n0,1,60,zz\n0,1,60,zz\n1,1,60,yy\n");
    refused(
        &s.simulate(&["strangers.csv", "--cluster", "2x8", "--budgets", "b.toml"]),
        "allot: nothing could be simulated: all 3 jobs of strangers.csv are refused before they are queued:\n\
         \x20 3 jobs of teams no budget leaf charges: 'zz' (2 jobs), 'yy' (1 job); the budget's accounts are 'a', 'b'; jobs 0, 1, 2\n",
    );
    s.file("huge.csv", "submit_s,gpus,runtime_s,team\n0,100,60,a\n");
    refused(
        &s.simulate(&["huge.csv", "--cluster", "2x8"]),
        "allot: nothing could be simulated: the one job of huge.csv is refused before it is queued:\n  1 job larger than the cluster's 16 GPUs (the largest wants 100); job 0",
    );
}

/// Names that once broke a run: a team with a line break, a space, or a
/// cell longer than a table can print (the run panicked after simulating
/// everything and the JSON was lost). Each is refused before the run, at
/// its line and column.
#[test]
fn names_a_budget_or_a_table_cannot_take_are_refused_at_their_line_and_column() {
    let s = Scratch::new();
    let long = "x".repeat(70_000);
    s.file(
        "names.csv",
        &format!(
            "submit_s,gpus,runtime_s,team,user,kind\n\
             0,1,60,a,u1,debug\n\
             0,1,60,\"c\nd\",u1,debug\n\
             0,1,60,a b,u1,debug\n\
             0,1,60,{long},u1,debug\n\
             0,1,60,a,u 2,debug\n\
             0,1,60,a,u1,{long}\n\
             0,1,60,a,u1,\"two\nlines\"\n\
             0,1,60,e;f,u1,debug\n"
        ),
    );
    let out = s.simulate(&["names.csv", "--cluster", "2x8", "--json", "out.json"]);
    refused(&out, "allot: names.csv:3: column 4 (team): team must be a Slurm account name, as a budget's accounts list takes it: 'c\\nd' is not a valid name (no spaces, line breaks, '/', ':' or ',')\n");
    let said = stderr(&out);
    for wanted in [
        "names.csv:5: column 4 (team): team must be a Slurm account name, as a budget's accounts list takes it: 'a b' is not a valid name",
        "names.csv:6: column 4 (team): team must be a Slurm account name, as a budget's accounts list takes it: a name of 70000 characters is longer than the 255",
        "names.csv:7: column 5 (user): user must be a user name: 'u 2' is not a valid name",
        "names.csv:8: column 6 (kind): kind is 70000 characters long",
        "names.csv:9: column 6 (kind): kind 'two\\nlines' holds a line break",
        "6 problem(s) in 6 row(s)",
    ] {
        assert!(said.contains(wanted), "wanted\n  {wanted}\ngot\n{said}");
    }
    assert!(!s.dir.path().join("out.json").exists(), "nothing ran, nothing written");
    // A ';' is a name Slurm and the budget take: with the bad rows skipped, the run ends with its JSON.
    let out = s.simulate(&["names.csv", "--cluster", "2x8", "--skip-bad-rows", "--json", "out.json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = std::fs::read_to_string(s.dir.path().join("out.json")).unwrap();
    assert!(json.contains("e;f"), "{json}");
}

/// Nothing left undone prints as 0, not -0 (a sum of no values is -0.0).
#[test]
fn tables_never_print_minus_zero() {
    let s = Scratch::new();
    s.file("w.csv", GOOD);
    let out = s.allot(&["simulate", "w.csv", "--cluster", "2x8", "--no-timing"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    let undone = table.lines().find(|l| l.starts_with("work not done")).expect("the work-not-done row");
    assert_eq!(undone.matches("  0 of ").count(), 2, "both policies did all the work: {undone}");
    assert!(!table.split(|c: char| c.is_whitespace() || c == '(').any(|w| w.starts_with("-0")), "{table}");
}
