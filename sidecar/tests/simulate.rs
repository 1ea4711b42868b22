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
    /// `allot simulate ARGS -q`, from the scratch directory (file names in messages stay short).
    fn simulate(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_allot")).current_dir(self.dir.path()).arg("simulate").args(args).arg("-q").output().unwrap()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails with exactly this on stderr (after `allot: `), and prints no report.
#[track_caller]
fn refused(o: &Output, wanted: &str) {
    let said = stderr(o);
    assert_eq!(o.status.code(), Some(1), "accepted, or not as an error: {said}");
    assert!(said.contains(wanted), "wanted\n  {wanted}\ngot\n{said}");
    assert!(o.stdout.is_empty(), "printed a report: {}", String::from_utf8_lossy(&o.stdout));
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
