//! Faults injected on purpose, so that the cluster tests can prove what
//! each hook does when allot's own code fails inside slurmctld.
//!
//! `ALLOT_INJECT_FAULT` in slurmctld's environment names points, comma
//! separated (`job_submit,job_modify`), each with how many times it fails
//! if not always (`priority_walk@2`: the first two times); [`inject`]
//! panics at an armed one, and the hook's guard then answers with its
//! fail-safe fallback. Unset (as at every site), each point costs one load
//! of a `OnceLock` and a branch.
//! The variable is read once, at the first point reached: only whoever
//! starts slurmctld can set it. (A fail-point crate would need a second
//! build of every plugin for the tests, or a lock per point in production.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that arms fault points.
pub const VARIABLE: &str = "ALLOT_INJECT_FAULT";

/// Every point a test may arm, with what it stands for.
pub const POINTS: &[(&str, &str)] = &[
    ("job_submit", "job_submit/allot's check of a submission"),
    ("job_modify", "job_submit/allot's check of an update"),
    ("priority_set", "priority/allot's priority of a job being submitted, requeued or released"),
    ("priority_walk", "priority/allot's walk of slurmctld's jobs, under the job write lock, halfway through"),
    ("preemptable", "preempt/allot's answer to may this job be preempted"),
    ("run_ended", "jobcomp/allot's record of a run's end"),
];

/// One armed point: its name, and how many more times it fails (`None`: always).
#[derive(Debug)]
struct Armed {
    point: String,
    left: Option<AtomicU64>,
}

/// `name` or `name@N`, as [`VARIABLE`] spells an armed point.
fn parse(entry: &str) -> Result<Armed, String> {
    let (point, times) = match entry.split_once('@') {
        Some((p, n)) => (p, Some(n.parse::<u64>().map_err(|_| format!("'{entry}': the count after @ is not a number"))?)),
        None => (entry, None),
    };
    if !POINTS.iter().any(|(name, _)| *name == point) {
        return Err(format!("no fault point is called '{point}' (known: {})", POINTS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")));
    }
    Ok(Armed { point: point.to_owned(), left: times.map(AtomicU64::new) })
}

fn armed() -> &'static [Armed] {
    static ARMED: OnceLock<Vec<Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let Ok(list) = std::env::var(VARIABLE) else { return Vec::new() };
        let mut armed = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match parse(entry) {
                Ok(a) => {
                    let what = POINTS.iter().find(|(n, _)| *n == a.point).map_or("", |(_, w)| *w);
                    let times = a.left.as_ref().map_or_else(|| "every time".to_owned(), |n| format!("the first {} times", n.load(Ordering::Relaxed)));
                    log::error!("{VARIABLE}: fault point {} armed: {what} fails on purpose, {times} (a test setting: never set it in production)", a.point);
                    armed.push(a);
                }
                Err(e) => log::error!("{VARIABLE}: {e}"),
            }
        }
        armed
    })
}

/// Whether `point` fails now (an armed point with failures left; each
/// answer of yes uses one up).
pub fn is_armed(point: &str) -> bool {
    let armed = armed();
    if armed.is_empty() {
        return false;
    }
    armed.iter().any(|a| {
        a.point == point
            && match &a.left {
                None => true,
                Some(left) => left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok(),
            }
    })
}

/// Panics if `point` is armed (see the module's documentation).
pub fn inject(point: &'static str) {
    if is_armed(point) {
        panic!("fault injected at {point} ({VARIABLE})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_points_and_counts_and_names_a_wrong_one() {
        let a = parse("priority_walk@2").unwrap();
        assert_eq!((a.point.as_str(), a.left.map(|n| n.into_inner())), ("priority_walk", Some(2)));
        assert!(parse("job_submit").unwrap().left.is_none());
        assert!(parse("job_sumbit").unwrap_err().contains("no fault point is called 'job_sumbit'"));
        assert!(parse("job_submit@x").unwrap_err().contains("'job_submit@x': the count after @ is not a number"));
    }

    #[test]
    fn unarmed_points_never_fail() {
        // The test process has no ALLOT_INJECT_FAULT.
        assert!(std::env::var(VARIABLE).is_err());
        assert!(!is_armed("job_submit"));
        inject("job_submit");
    }
}
