//! The workload: jobs read from CSV (or made by [`crate::generate`]).
//!
//! Columns, in any order, matched by header name:
//!
//! | column | required | meaning |
//! | --- | --- | --- |
//! | `submit_s` | yes | submit time, whole seconds from any origin |
//! | `gpus` | yes | GPUs wanted, at least 1 |
//! | `runtime_s` | yes | seconds of work the job needs, at least 1 |
//! | `team` | yes | the Slurm account: mapped to a budget leaf |
//! | `job_id` | no | unique id, 0 to 2^32-1 (default: the row's position) |
//! | `user` | no | submitting user (kept for reports) |
//! | `min_runtime_s` | no | declared minimum runtime; 0 = unallocated (default: `--default-min-runtime`) |
//! | `resumable` | no | `true`/`false` (also `1`/`0`, `yes`/`no`); default true |
//! | `priority` | no | `low`, `normal` or `high` (default normal) |
//! | `kind` | no | free text such as `debug` or `training` (default `unspecified`) |
//!
//! Other columns (Philly's `submit_time`) are ignored and listed in
//! [`Workload::ignored_columns`]. An empty optional cell takes the default.
//! Every bad row is reported with its line number; reading fails unless the
//! caller asks to skip them, and skipped rows are still listed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{Read, Write};

use allot::contract::PriorityLevel;
use serde::Serialize;

/// One job as the workload describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Unique id: the CSV's `job_id`, else the row's position.
    pub job_id: u32,
    pub submit: i64,
    pub gpus: u32,
    /// Seconds of work needed to complete.
    pub runtime: i64,
    /// Index into [`Workload::teams`].
    pub team: u32,
    pub user: Option<String>,
    /// Declared minimum runtime in seconds; `None` = not declared.
    pub min_runtime: Option<i64>,
    pub resumable: bool,
    pub priority: PriorityLevel,
    /// Index into [`Workload::kinds`].
    pub kind: u32,
}

/// A whole workload, jobs sorted by (submit, job_id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    pub jobs: Vec<Job>,
    /// Team (account) names, in order of first appearance.
    pub teams: Vec<String>,
    /// Kind names, in order of first appearance.
    pub kinds: Vec<String>,
    /// Header columns that are not ours, ignored.
    pub ignored_columns: Vec<String>,
    /// Rows skipped because they were bad (only with `skip_bad_rows`).
    pub skipped: Vec<RowError>,
}

/// One bad row (or a bad header, line 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowError {
    pub line: u64,
    pub message: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Why a workload could not be read: every bad row, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    pub errors: Vec<RowError>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 20;
        for e in self.errors.iter().take(SHOWN) {
            writeln!(f, "{e}")?;
        }
        if self.errors.len() > SHOWN {
            writeln!(f, "... and {} more bad rows", self.errors.len() - SHOWN)?;
        }
        write!(f, "{} bad row(s); fix them, or pass --skip-bad-rows to run without them (they are then listed in the report)", self.errors.len())
    }
}

/// Largest |submit_s| accepted: 100 years of seconds. Unix times (until
/// 2069) and offsets from the trace's start both fit, and sums of a submit
/// time, a runtime and the engine's few other offsets stay far from `i64`
/// overflow. The reports keep per-hour arrays over the workload's span, so
/// the span, not these bounds, is what a simulation's memory grows with.
pub const MAX_SUBMIT_S: i64 = 100 * YEAR_S;
/// Largest runtime_s (and min_runtime_s) accepted: 10 years, the policy
/// core's longest duration ([`allot::duration::MAX_DURATION`]).
pub const MAX_RUNTIME_S: i64 = 10 * YEAR_S;
/// Largest gpus per job accepted.
pub const MAX_GPUS: u32 = 1_000_000;
const YEAR_S: i64 = 365 * 86_400;

pub const REQUIRED: [&str; 4] = ["submit_s", "gpus", "runtime_s", "team"];
pub const OPTIONAL: [&str; 6] = ["job_id", "user", "min_runtime_s", "resumable", "priority", "kind"];
/// The kind of a job whose row names none.
pub const UNSPECIFIED_KIND: &str = "unspecified";

#[derive(Default)]
struct Columns {
    submit: usize,
    gpus: usize,
    runtime: usize,
    team: usize,
    job_id: Option<usize>,
    user: Option<usize>,
    min_runtime: Option<usize>,
    resumable: Option<usize>,
    priority: Option<usize>,
    kind: Option<usize>,
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" => Some(true),
        "false" | "0" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// Interns names into dense indices, first appearance first.
#[derive(Default)]
struct Names {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(name.to_owned());
        self.index.insert(name.to_owned(), i);
        i
    }
}

impl Workload {
    /// Reads a workload CSV. With `skip_bad_rows`, bad rows are left out and
    /// listed in [`Workload::skipped`]; otherwise any bad row fails the read
    /// with all of them listed.
    pub fn from_csv(mut reader: impl Read, skip_bad_rows: bool) -> Result<Workload, LoadError> {
        let header_error = |message: String| LoadError { errors: vec![RowError { line: 1, message }] };
        // Read whole, to number the lines ourselves: the csv crate counts
        // only '\n', so rows of a file with '\r\n' line ends (as spreadsheets
        // on Windows write them) were reported a line early, and every row
        // of a '\r' file on line 1.
        let mut text = Vec::new();
        reader.read_to_end(&mut text).map_err(|e| header_error(format!("cannot read the file: {e}")))?;
        let mut lines = LineCounter::new(&text);
        let mut rdr = csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(text.as_slice());
        let headers = rdr.headers().map_err(|e| header_error(format!("cannot read the header: {e}")))?.clone();
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        let mut ignored = Vec::new();
        for (i, h) in headers.iter().enumerate() {
            let h = h.to_ascii_lowercase();
            if by_name.insert(h.clone(), i).is_some() {
                return Err(header_error(format!("column '{h}' appears twice")));
            }
            if !REQUIRED.contains(&h.as_str()) && !OPTIONAL.contains(&h.as_str()) {
                ignored.push(h);
            }
        }
        let missing: Vec<&str> = REQUIRED.iter().copied().filter(|c| !by_name.contains_key(*c)).collect();
        if !missing.is_empty() {
            return Err(header_error(format!(
                "missing required column(s) {}; the header must name submit_s,gpus,runtime_s,team (optional: {})",
                missing.join(", "),
                OPTIONAL.join(",")
            )));
        }
        let col = |name: &str| by_name.get(name).copied();
        let cols = Columns {
            submit: col("submit_s").unwrap_or_default(),
            gpus: col("gpus").unwrap_or_default(),
            runtime: col("runtime_s").unwrap_or_default(),
            team: col("team").unwrap_or_default(),
            job_id: col("job_id"),
            user: col("user"),
            min_runtime: col("min_runtime_s"),
            resumable: col("resumable"),
            priority: col("priority"),
            kind: col("kind"),
        };

        let mut teams = Names::default();
        let mut kinds = Names::default();
        let mut jobs = Vec::new();
        let mut errors = Vec::new();
        let mut seen_ids: HashMap<u32, u64> = HashMap::new();
        let mut record = csv::StringRecord::new();
        let mut position: u32 = 0;
        loop {
            let line = lines.line_at(rdr.position().byte());
            match rdr.read_record(&mut record) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    // A malformed record (wrong field count, bad UTF-8): keep going past it.
                    let line = e.position().map_or(line, |p| lines.line_at(p.byte()));
                    errors.push(RowError { line, message: format!("unreadable row: {e}") });
                    continue;
                }
            }
            let line = record.position().map_or(line, |p| lines.line_at(p.byte()));
            let this_position = position;
            position = position.saturating_add(1);
            match parse_row(&record, &cols, this_position, &mut teams, &mut kinds) {
                Ok(job) => {
                    if let Some(first) = seen_ids.insert(job.job_id, line) {
                        errors.push(RowError { line, message: format!("job_id {} already used on line {first}", job.job_id) });
                        continue;
                    }
                    jobs.push(job);
                }
                Err(message) => errors.push(RowError { line, message }),
            }
        }
        if !errors.is_empty() && !skip_bad_rows {
            return Err(LoadError { errors });
        }
        jobs.sort_by_key(|j| (j.submit, j.job_id));
        Ok(Workload { jobs, teams: teams.list, kinds: kinds.list, ignored_columns: ignored, skipped: errors })
    }

    /// Writes every column, so that reading it back gives the same workload.
    pub fn to_csv(&self, writer: impl Write) -> csv::Result<()> {
        let mut w = csv::Writer::from_writer(writer);
        w.write_record(["job_id", "submit_s", "gpus", "runtime_s", "team", "user", "min_runtime_s", "resumable", "priority", "kind"])?;
        for j in &self.jobs {
            w.write_record([
                j.job_id.to_string(),
                j.submit.to_string(),
                j.gpus.to_string(),
                j.runtime.to_string(),
                self.teams[j.team as usize].clone(),
                j.user.clone().unwrap_or_default(),
                j.min_runtime.map(|m| m.to_string()).unwrap_or_default(),
                j.resumable.to_string(),
                j.priority.to_string(),
                self.kinds[j.kind as usize].clone(),
            ])?;
        }
        w.flush()?;
        Ok(())
    }

    /// Builds a workload from jobs whose `team`/`kind` index the given names.
    /// Sorts the jobs; checks nothing else (the generator's own output).
    pub fn from_parts(mut jobs: Vec<Job>, teams: Vec<String>, kinds: Vec<String>) -> Workload {
        jobs.sort_by_key(|j| (j.submit, j.job_id));
        // Number teams and kinds by first appearance, as reading the CSV
        // back does, so that a written workload reads back equal.
        let (mut team_names, mut kind_names) = (Names::default(), Names::default());
        for j in &mut jobs {
            j.team = team_names.id(&teams[j.team as usize]);
            j.kind = kind_names.id(&kinds[j.kind as usize]);
        }
        Workload { jobs, teams: team_names.list, kinds: kind_names.list, ignored_columns: Vec::new(), skipped: Vec::new() }
    }

    /// First and last submit time (0, 0 when empty).
    pub fn span(&self) -> (i64, i64) {
        match (self.jobs.first(), self.jobs.last()) {
            (Some(a), Some(b)) => (a.submit, b.submit),
            _ => (0, 0),
        }
    }

    /// Distinct job ids; used by tests.
    pub fn ids(&self) -> HashSet<u32> {
        self.jobs.iter().map(|j| j.job_id).collect()
    }
}

/// 1-based line numbers of records' starts, for line ends `\n`, `\r\n`
/// and `\r`. The csv crate gives a record's start as where the previous
/// record ended: possibly on the `\n` of a `\r\n`, or before blank lines it
/// skipped; so the line is that of the first byte from there on that ends no
/// line. A `\r` ends a line, and a `\n` does unless it follows a `\r`.
struct LineCounter<'a> {
    text: &'a [u8],
    at: usize,
    line: u64,
}

impl<'a> LineCounter<'a> {
    fn new(text: &'a [u8]) -> Self {
        LineCounter { text, at: 0, line: 1 }
    }

    /// The line of the record starting at `offset`. Offsets mostly come in increasing
    /// order; an earlier one counts again from the start.
    fn line_at(&mut self, offset: u64) -> u64 {
        let mut offset = usize::try_from(offset).unwrap_or(usize::MAX).min(self.text.len());
        while matches!(self.text.get(offset), Some(b'\r' | b'\n')) {
            offset += 1;
        }
        if offset < self.at {
            (self.at, self.line) = (0, 1);
        }
        for i in self.at..offset {
            let ends_line = match self.text[i] {
                b'\r' => true,
                b'\n' => i == 0 || self.text[i - 1] != b'\r',
                _ => false,
            };
            self.line += u64::from(ends_line);
        }
        self.at = offset;
        self.line
    }
}

fn parse_row(record: &csv::StringRecord, cols: &Columns, position: u32, teams: &mut Names, kinds: &mut Names) -> Result<Job, String> {
    let cell = |i: usize| record.get(i).unwrap_or("");
    let opt = |i: Option<usize>| i.map(cell).filter(|s| !s.is_empty());
    fn int<T: std::str::FromStr>(name: &str, s: &str) -> Result<T, String> {
        s.parse::<T>().map_err(|_| format!("{name} '{s}' is not a whole number"))
    }
    /// A whole number within `min..=max`. Out-of-range numbers, even beyond
    /// `i64`, are refused by the bound they break (`limit` says it in words),
    /// not as "not a whole number".
    fn bounded(name: &str, s: &str, min: i64, max: i64, too_small: &str, limit: &str) -> Result<i64, String> {
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        let n: i64 = match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                if s.starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                }
            }
            Err(_) if min >= 1 => return Err(format!("{name} '{s}' is not a positive whole number")),
            Err(_) => return Err(format!("{name} '{s}' is not a whole number")),
        };
        if n < min {
            return Err(if min < 0 {
                format!("{name} {s} is below the limit of {min} ({limit} before 0)")
            } else {
                format!("{name} must be {too_small}, got {s}")
            });
        }
        if n > max {
            return Err(format!("{name} {s} exceeds the limit of {max} ({limit})"));
        }
        Ok(n)
    }
    let submit = bounded("submit_s", cell(cols.submit), -MAX_SUBMIT_S, MAX_SUBMIT_S, "", "100 years")?;
    let gpus = bounded("gpus", cell(cols.gpus), 1, MAX_GPUS.into(), "a positive whole number", "GPUs for one job")?;
    let gpus = u32::try_from(gpus).expect("at most MAX_GPUS");
    let runtime = bounded("runtime_s", cell(cols.runtime), 1, MAX_RUNTIME_S, "at least 1", "10 years")?;
    let team = cell(cols.team);
    if team.is_empty() {
        return Err("team is empty".into());
    }
    let job_id = match opt(cols.job_id) {
        Some(s) => int::<u32>("job_id", s)?,
        None => position,
    };
    let min_runtime = match opt(cols.min_runtime) {
        Some(s) => {
            Some(bounded("min_runtime_s", s, 0, MAX_RUNTIME_S, "0 or more", "10 years")?)
        }
        None => None,
    };
    let resumable = match opt(cols.resumable) {
        Some(s) => parse_bool(s).ok_or_else(|| format!("resumable '{s}' is not true or false"))?,
        None => true,
    };
    let priority = match opt(cols.priority) {
        Some(s) => PriorityLevel::parse(s).ok_or_else(|| format!("priority '{s}' is not low, normal or high"))?,
        None => PriorityLevel::Normal,
    };
    let kind = kinds.id(opt(cols.kind).unwrap_or(UNSPECIFIED_KIND));
    Ok(Job { job_id, submit, gpus, runtime, team: teams.id(team), user: opt(cols.user).map(str::to_owned), min_runtime, resumable, priority, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_required_and_optional_columns_in_any_order() {
        let csv = "team,gpus,submit_s,runtime_s,kind,min_runtime_s,extra\n\
                   a,2,10,100,debug,900,x\n\
                   b,1,5,50,,,y\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        assert_eq!(w.jobs.len(), 2);
        // Sorted by submit time; ids default to the row position.
        assert_eq!(w.jobs[0].job_id, 1);
        assert_eq!(w.teams[w.jobs[0].team as usize], "b");
        assert_eq!(w.kinds[w.jobs[0].kind as usize], UNSPECIFIED_KIND);
        assert_eq!(w.jobs[0].min_runtime, None);
        assert!(w.jobs[0].resumable);
        assert_eq!(w.jobs[1].min_runtime, Some(900));
        assert_eq!(w.ignored_columns, vec!["extra"]);
    }

    #[test]
    fn bad_rows_are_all_reported_with_line_numbers() {
        let csv = "submit_s,gpus,runtime_s,team,priority\n\
                   0,1,10,a,normal\n\
                   x,1,10,a,normal\n\
                   0,0,10,a,normal\n\
                   0,1,10,a,urgent\n\
                   0,1,10\n\
                   0,1,0,a,low\n";
        let e = Workload::from_csv(csv.as_bytes(), false).unwrap_err();
        let lines: Vec<u64> = e.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 6, 7], "{e}");
        assert!(e.errors[0].message.contains("submit_s 'x'"), "{e}");
        assert_eq!(e.errors[1].message, "gpus must be a positive whole number, got 0", "{e}");
        assert!(e.errors[2].message.contains("urgent"), "{e}");
        assert!(e.to_string().contains("--skip-bad-rows"));
        // Skipping keeps the good row and lists the rest.
        let w = Workload::from_csv(csv.as_bytes(), true).unwrap();
        assert_eq!(w.jobs.len(), 1);
        assert_eq!(w.skipped.len(), 5);
    }

    #[test]
    fn header_problems_are_line_one() {
        let e = Workload::from_csv("submit_s,gpus,team\n1,1,a\n".as_bytes(), false).unwrap_err();
        assert_eq!(e.errors[0].line, 1);
        assert!(e.errors[0].message.contains("runtime_s"), "{e}");
        let e = Workload::from_csv("submit_s,gpus,runtime_s,team,job_id\n0,1,1,a,7\n0,1,1,a,7\n".as_bytes(), false).unwrap_err();
        assert!(e.errors[0].message.contains("already used on line 2"), "{e}");
        assert_eq!(e.errors[0].line, 3);
    }

    #[test]
    fn csv_round_trips() {
        let csv = "job_id,submit_s,gpus,runtime_s,team,user,min_runtime_s,resumable,priority,kind\n\
                   3,0,8,7200,a,alice,3600,false,high,training\n\
                   4,1,1,60,b,,0,true,low,debug\n";
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let mut out = Vec::new();
        w.to_csv(&mut out).unwrap();
        let back = Workload::from_csv(out.as_slice(), false).unwrap();
        assert_eq!(w, back);
        assert_eq!(String::from_utf8(out).unwrap(), csv);
    }

    fn errors_of(csv: &str) -> Vec<String> {
        Workload::from_csv(csv.as_bytes(), false).unwrap_err().errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn extreme_values_are_refused_with_the_column_and_the_bound() {
        let csv = "submit_s,gpus,runtime_s,team,min_runtime_s\n\
                   0,1,10,a,\n\
                   9223372036854775807,1,10,a,\n\
                   -3153600001,1,10,a,\n\
                   99999999999999999999999,1,10,a,\n\
                   0,1,1000000000000,a,\n\
                   0,-2,10,a,\n\
                   0,1000001,10,a,\n\
                   0,1.5,10,a,\n\
                   0,1,10,a,315360001\n\
                   0,1,10,a,-1\n\
                   0,1,-5,a,\n";
        assert_eq!(
            errors_of(csv),
            [
                "line 3: submit_s 9223372036854775807 exceeds the limit of 3153600000 (100 years)",
                "line 4: submit_s -3153600001 is below the limit of -3153600000 (100 years before 0)",
                "line 5: submit_s 99999999999999999999999 exceeds the limit of 3153600000 (100 years)",
                "line 6: runtime_s 1000000000000 exceeds the limit of 315360000 (10 years)",
                "line 7: gpus must be a positive whole number, got -2",
                "line 8: gpus 1000001 exceeds the limit of 1000000 (GPUs for one job)",
                "line 9: gpus '1.5' is not a positive whole number",
                "line 10: min_runtime_s 315360001 exceeds the limit of 315360000 (10 years)",
                "line 11: min_runtime_s must be 0 or more, got -1",
                "line 12: runtime_s must be at least 1, got -5",
            ]
        );
    }

    #[test]
    fn the_largest_accepted_values_are_read() {
        let csv = format!(
            "submit_s,gpus,runtime_s,team,min_runtime_s\n{},{MAX_GPUS},{MAX_RUNTIME_S},a,{MAX_RUNTIME_S}\n{},1,1,a,0\n",
            MAX_SUBMIT_S, -MAX_SUBMIT_S
        );
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        assert_eq!(w.span(), (-MAX_SUBMIT_S, MAX_SUBMIT_S));
        assert_eq!(w.jobs[1].runtime, MAX_RUNTIME_S);
        assert_eq!(w.jobs[1].gpus, MAX_GPUS);
    }

    /// The simulator runs to the end on the largest values the reader
    /// accepts: no overflow, and no memory or time out of proportion.
    #[test]
    fn the_simulator_finishes_on_the_largest_accepted_values() {
        use crate::{simulate, ClusterSpec, Config, PolicyKind};
        let csv = format!(
            "submit_s,gpus,runtime_s,team,min_runtime_s\n\
             {lo},1,{MAX_RUNTIME_S},a,0\n\
             {lo},8,{MAX_RUNTIME_S},b,\n\
             {lo},{MAX_GPUS},{MAX_RUNTIME_S},a,{MAX_RUNTIME_S}\n\
             {hi},8,{MAX_RUNTIME_S},a,28800\n\
             {hi},4,{MAX_RUNTIME_S},b,0\n",
            lo = -MAX_SUBMIT_S,
            hi = MAX_SUBMIT_S
        );
        let w = Workload::from_csv(csv.as_bytes(), false).unwrap();
        let tree = crate::prepare::equal_share_budget(&w).unwrap();
        for policy in [PolicyKind::Allot, PolicyKind::Baseline] {
            let cfg = Config::new(ClusterSpec { nodes: 1, gpus_per_node: 8 }, tree.clone(), policy);
            let sim = simulate(&w, &cfg, &mut |_| {});
            assert_eq!(sim.outcome.jobs.len(), w.jobs.len(), "{policy:?}");
            assert!(sim.outcome.end >= MAX_SUBMIT_S, "{policy:?} stopped at {}", sim.outcome.end);
        }
    }

    /// Found by fuzzing (fuzz/corpus/workload_csv/crlf-line-numbers): with
    /// `\r\n` line ends every row was reported one line early, and with `\r`
    /// all on line 1.
    #[test]
    fn line_numbers_with_any_line_ends() {
        for end in ["\n", "\r\n", "\r"] {
            let csv = ["submit_s,gpus,runtime_s,team", "0,1,10,a", "", "x,1,10,a", "0,1", "\"0\",1,10,\"two", "lines\"", "0,0,1,a", ""].join(end);
            let e = Workload::from_csv(csv.as_bytes(), false).unwrap_err();
            let lines: Vec<u64> = e.errors.iter().map(|e| e.line).collect();
            assert_eq!(lines, [4, 5, 8], "line ends {end:?}: {e}");
        }
    }
}
