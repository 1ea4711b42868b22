//! The simulator's workload CSV reader (`allot_sim::Workload::from_csv`).
//!
//! The reader's source file is included by path rather than through the
//! `allot-sim` crate, so that the fuzz build does not compile and instrument
//! the simulator's plotting stack (plotters, image codecs, fonts): it keeps
//! the short fuzz run in scripts/test.sh short. workload.rs depends only on
//! `allot`, `csv`, `serde` and `thiserror`.
//!
//! Properties: every accepted row has gpus >= 1, runtime >= 1, a declared
//! min_runtime >= 0, all within the reader's limits, a team and kind that
//! exist, and a unique job id; jobs come sorted by (submit, job_id); a
//! strict read fails with exactly the problems a lenient one skips, and only
//! a problem of the whole file (one error, on the header's line 1 or of no
//! line) fails a lenient read; every row error has a line within the input,
//! a column within the header, and a message; and an accepted workload
//! written back with `to_csv` reads back equal.
#![no_main]

#[allow(dead_code)]
#[path = "../../sim/src/workload.rs"]
mod workload;

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use workload::{LoadError, Workload, MAX_GPUS, MAX_RUNTIME_S, MAX_SUBMIT_S};

fuzz_target!(|data: &[u8]| {
    let lines = data.iter().filter(|&&b| b == b'\n' || b == b'\r').count() as u64 + 1;
    let strict = Workload::from_csv(data, false);
    let w = match Workload::from_csv(data, true) {
        Ok(w) => w,
        Err(e) => {
            // Only a problem of the whole file can fail a read that skips bad rows.
            let LoadError::File(errors) = &e else { panic!("a lenient read failed on rows: {e}") };
            assert_eq!(errors.len(), 1, "{e}");
            assert!(errors[0].line <= 1, "{e}");
            assert!(!errors[0].message.is_empty());
            assert_eq!(strict, Err(e));
            return;
        }
    };
    match &strict {
        Ok(s) => {
            assert!(w.skipped.is_empty());
            assert_eq!(s, &w);
        }
        Err(LoadError::Rows(errors)) => assert_eq!(errors, &w.skipped),
        Err(e) => panic!("a strict read failed on the file where a lenient one did not: {e}"),
    }
    // A bound on the header's fields that holds whatever the quoting and blank lines.
    let header_fields = data.iter().filter(|&&b| b == b',').count() + 1;
    for e in &w.skipped {
        assert!(e.line >= 2 && e.line <= lines, "line {} of {lines}: {}", e.line, e.message);
        assert!(!e.message.is_empty());
        if let Some(c) = &e.column {
            assert!(c.number >= 1 && c.number <= header_fields, "{e} (at most {header_fields} fields)");
            assert!(!c.name.is_empty(), "{e}");
        }
    }
    let mut ids = HashSet::new();
    for j in &w.jobs {
        assert!(j.gpus >= 1 && j.gpus <= MAX_GPUS, "{j:?}");
        assert!(j.runtime >= 1 && j.runtime <= MAX_RUNTIME_S, "{j:?}");
        assert!(j.submit.abs() <= MAX_SUBMIT_S, "{j:?}");
        assert!(j.min_runtime.is_none_or(|m| (0..=MAX_RUNTIME_S).contains(&m)), "{j:?}");
        assert!((j.team as usize) < w.teams.len() && (j.kind as usize) < w.kinds.len());
        assert!(!w.teams[j.team as usize].is_empty());
        assert!(ids.insert(j.job_id), "job id {} twice", j.job_id);
    }
    assert!(w.jobs.windows(2).all(|p| (p[0].submit, p[0].job_id) < (p[1].submit, p[1].job_id)));
    let mut out = Vec::new();
    w.to_csv(&mut out).expect("writing to memory");
    let back = Workload::from_csv(out.as_slice(), false).unwrap_or_else(|e| panic!("written workload refused: {e}"));
    // Team and kind indices follow first appearance, which sorting by submit
    // time may change: compare the jobs with their names.
    let named = |w: &Workload| -> Vec<(workload::Job, String, String)> {
        w.jobs.iter().map(|j| (workload::Job { team: 0, kind: 0, ..j.clone() }, w.teams[j.team as usize].clone(), w.kinds[j.kind as usize].clone())).collect()
    };
    assert_eq!(named(&back), named(&w));
    // Written back, the teams and kinds are those of the jobs.
    assert_eq!(back.teams.iter().collect::<HashSet<_>>(), w.jobs.iter().map(|j| &w.teams[j.team as usize]).collect::<HashSet<_>>());
    assert_eq!(back.kinds.iter().collect::<HashSet<_>>(), w.jobs.iter().map(|j| &w.kinds[j.kind as usize]).collect::<HashSet<_>>());
});
