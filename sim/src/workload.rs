//! The workload: jobs read from CSV (or made by [`crate::generate`]).
//!
//! Columns, in any order, matched by header name:
//!
//! | column | required | meaning |
//! | --- | --- | --- |
//! | `submit_s` | yes | submit time, whole seconds from any origin |
//! | `gpus` | yes | GPUs wanted, at least 1 |
//! | `runtime_s` | yes | seconds of work the job needs, at least 1 |
//! | `team` | yes | the Slurm account: mapped to a budget leaf ([`allot::budget::account_name_problem`]) |
//! | `job_id` | no | unique id, 0 to 2^32-1 (default: the row's position) |
//! | `user` | no | submitting user (kept for reports; the same rule as `team`) |
//! | `min_runtime_s` | no | declared minimum runtime; 0 = unallocated (default: `--default-min-runtime`) |
//! | `resumable` | no | `true`/`false` (also `1`/`0`, `yes`/`no`); default true |
//! | `priority` | no | `low`, `normal` or `high` (default normal) |
//! | `kind` | no | a short label such as `debug` or `training`, at most 64 characters, no line break (default `unspecified`) |
//!
//! Other columns (Philly's `submit_time`) are ignored and listed in
//! [`Workload::ignored_columns`]. An empty optional cell takes the default.
//!
//! Errors come in two kinds ([`LoadError`]). A problem with the file as a
//! whole (it cannot be read, is a directory, is empty, or its header lacks a
//! required column or names one twice) fails the read whatever the caller
//! asks: there is no row to skip. Otherwise every problem of every row is
//! reported, one per problem, with its line and its column (by number and
//! name), each saying the rule the cell breaks and the value it holds; the
//! read fails unless the caller asks to skip bad rows, and the skipped rows'
//! problems are still listed. A file with a header and no rows reads as an
//! empty workload (the caller decides whether that is an error).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{Read, Write};

use allot::contract::PriorityLevel;
use serde::Serialize;

/// Longest `kind` label: the tables print it as a row name.
pub const MAX_KIND_CHARS: usize = 64;

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

/// One problem of a row (or of the header, line 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowError {
    /// 1-based; 0 for a problem of the whole file (unreadable, empty).
    pub line: u64,
    /// The cell's column, when the problem is one cell's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<Column>,
    pub message: String,
}

/// A column of the CSV: its 1-based number and its header name (lowercased).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    pub number: usize,
    pub name: String,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {} ({})", self.number, self.name)
    }
}

impl RowError {
    /// The problem without its line: `column 3 (gpus): ...`.
    pub fn what(&self) -> String {
        match &self.column {
            Some(c) => format!("{c}: {}", self.message),
            None => self.message.clone(),
        }
    }
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what())
    }
}

/// Why a workload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file as a whole: unreadable, a directory, empty, or a bad
    /// header (line 1). Skipping rows cannot help.
    File(Vec<RowError>),
    /// Bad rows: every problem of each, in file order.
    Rows(Vec<RowError>),
}

impl LoadError {
    /// Every problem, in file order.
    pub fn errors(&self) -> &[RowError] {
        match self {
            LoadError::File(e) | LoadError::Rows(e) => e,
        }
    }

    /// One line per problem, each prefixed with `file:line:` the way
    /// compilers do (just `file:` for a problem of the whole file), then,
    /// for bad rows, how many and what to do.
    pub fn render(&self, file: &str) -> String {
        self.lines(|line| if line == 0 { format!("{file}: ") } else { format!("{file}:{line}: ") })
    }

    fn lines(&self, place: impl Fn(u64) -> String) -> String {
        const SHOWN: usize = 20;
        let mut out = String::new();
        let errors = self.errors();
        for e in errors.iter().take(SHOWN) {
            out.push_str(&format!("{}{}\n", place(e.line), e.what()));
        }
        if errors.len() > SHOWN {
            out.push_str(&format!("... and {} more problems\n", errors.len() - SHOWN));
        }
        if let LoadError::Rows(_) = self {
            out.push_str(&format!(
                "{} problem(s) in {} row(s); fix them, or pass --skip-bad-rows to run without those rows (they are then listed)",
                errors.len(),
                self.bad_rows()
            ));
        }
        out.trim_end().to_owned()
    }

    /// Rows with at least one problem (0 for a problem of the whole file).
    pub fn bad_rows(&self) -> usize {
        match self {
            LoadError::File(_) => 0,
            LoadError::Rows(e) => e.iter().map(|e| e.line).collect::<HashSet<_>>().len(),
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines(|line| if line == 0 { String::new() } else { format!("line {line}: ") }))
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
    /// their problems listed in [`Workload::skipped`]; otherwise any bad row
    /// fails the read with every problem of every row listed. A problem of
    /// the file as a whole fails the read either way.
    pub fn from_csv(mut reader: impl Read, skip_bad_rows: bool) -> Result<Workload, LoadError> {
        let file_error = |line: u64, column: Option<Column>, message: String| LoadError::File(vec![RowError { line, column, message }]);
        // Read whole, to number the lines ourselves: the csv crate counts
        // only '\n', so rows of a file with '\r\n' line ends (as spreadsheets
        // on Windows write them) were reported a line early, and every row
        // of a '\r' file on line 1.
        let mut text = Vec::new();
        if let Err(e) = reader.read_to_end(&mut text) {
            let message = match e.kind() {
                std::io::ErrorKind::IsADirectory => "is a directory, not a CSV file".to_owned(),
                _ => format!("cannot read the file: {e}"),
            };
            return Err(file_error(0, None, message));
        }
        let columns_wanted = format!("submit_s,gpus,runtime_s,team (optional: {})", OPTIONAL.join(","));
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(file_error(0, None, format!("the file is empty: a workload CSV starts with a header line naming its columns, {columns_wanted}")));
        }
        let mut lines = LineCounter::new(&text);
        let mut rdr = csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(text.as_slice());
        let headers = match rdr.headers() {
            Ok(h) => h.clone(),
            Err(e) => return Err(file_error(1, None, format!("cannot read the header: {}", csv_problem(&e)))),
        };
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        let mut ignored = Vec::new();
        for (i, h) in headers.iter().enumerate() {
            let h = h.to_ascii_lowercase();
            if h.is_empty() {
                ignored.push(format!("column {} (no name)", i + 1));
                continue;
            }
            if let Some(first) = by_name.insert(h.clone(), i) {
                let message = format!("column '{h}' appears twice, as columns {} and {}", first + 1, i + 1);
                return Err(file_error(1, Some(Column { number: i + 1, name: h }), message));
            }
            if !REQUIRED.contains(&h.as_str()) && !OPTIONAL.contains(&h.as_str()) {
                ignored.push(h);
            }
        }
        let missing: Vec<&str> = REQUIRED.iter().copied().filter(|c| !by_name.contains_key(*c)).collect();
        if !missing.is_empty() {
            let found = if headers.iter().all(str::is_empty) { "nothing".to_owned() } else { headers.iter().collect::<Vec<_>>().join(",") };
            return Err(file_error(
                1,
                None,
                format!("the header lacks the required column(s) {}: it names {found}; the columns are {columns_wanted}", missing.join(", ")),
            ));
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
        let column = |i: usize| {
            let name = headers.get(i).unwrap_or("").to_ascii_lowercase();
            Column { number: i + 1, name: if name.is_empty() { "no name".to_owned() } else { name } }
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
                    let col = match e.kind() {
                        csv::ErrorKind::Utf8 { err, .. } => Some(column(err.field())),
                        _ => None,
                    };
                    errors.push(RowError { line, column: col, message: csv_problem(&e) });
                    continue;
                }
            }
            let line = record.position().map_or(line, |p| lines.line_at(p.byte()));
            let this_position = position;
            position = position.saturating_add(1);
            match parse_row(&record, &cols, this_position, &seen_ids) {
                Ok(row) => {
                    seen_ids.insert(row.job_id, line);
                    jobs.push(Job {
                        job_id: row.job_id,
                        submit: row.submit,
                        gpus: row.gpus,
                        runtime: row.runtime,
                        team: teams.id(row.team),
                        user: row.user.map(str::to_owned),
                        min_runtime: row.min_runtime,
                        resumable: row.resumable,
                        priority: row.priority,
                        kind: kinds.id(row.kind),
                    });
                }
                Err(problems) => errors.extend(problems.into_iter().map(|(i, message)| RowError { line, column: Some(column(i)), message })),
            }
        }
        if !errors.is_empty() && !skip_bad_rows {
            return Err(LoadError::Rows(errors));
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

/// What the csv crate found wrong with a record, in the reader's words.
fn csv_problem(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => format!("the row has {len} field(s) where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => "the cell is not valid UTF-8 text".to_owned(),
        _ => format!("unreadable row: {e}"),
    }
}

/// A row's cells once each has been read: the caller interns the names.
struct Row<'r> {
    job_id: u32,
    submit: i64,
    gpus: u32,
    runtime: i64,
    team: &'r str,
    user: Option<&'r str>,
    min_runtime: Option<i64>,
    resumable: bool,
    priority: PriorityLevel,
    kind: &'r str,
}

/// A whole number within `min..=max`. `rule` says in words what the column
/// takes (the message for a cell that is no number or is below `min`);
/// `above`, if given, what a number above `max` breaks (`rule` otherwise).
/// Numbers beyond `i64` are refused by the bound they break, not as "not a
/// number".
fn whole(name: &str, s: &str, min: i64, max: i64, rule: &str, above: Option<&str>) -> Result<i64, String> {
    if s.is_empty() {
        return Err(format!("{name} must be {rule}, got an empty cell"));
    }
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
        Err(_) => return Err(format!("{name} must be {rule}, got '{s}'")),
    };
    if n < min {
        return Err(format!("{name} must be {rule}, got {s}"));
    }
    if n > max {
        return Err(match above {
            Some(above) => format!("{name} must be {above}, got {s}"),
            None => format!("{name} must be {rule}, got {s}"),
        });
    }
    Ok(n)
}

/// Reads one row: every problem in it, by column index, in column order.
fn parse_row<'r>(record: &'r csv::StringRecord, cols: &Columns, position: u32, seen_ids: &HashMap<u32, u64>) -> Result<Row<'r>, Vec<(usize, String)>> {
    let cell = |i: usize| record.get(i).unwrap_or("");
    let opt = |i: Option<usize>| i.map(|i| (i, cell(i))).filter(|(_, s)| !s.is_empty());
    let mut problems: Vec<(usize, String)> = Vec::new();
    let mut take = |i: usize, r: Result<i64, String>| -> Option<i64> { r.map_err(|m| problems.push((i, m))).ok() };
    let submit = take(
        cols.submit,
        whole(
            "submit_s",
            cell(cols.submit),
            -MAX_SUBMIT_S,
            MAX_SUBMIT_S,
            "a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0)",
            None,
        ),
    );
    let gpus = take(cols.gpus, whole("gpus", cell(cols.gpus), 1, MAX_GPUS.into(), "a whole number of at least 1", Some("at most 1000000 (GPUs for one job)")));
    let runtime = take(
        cols.runtime,
        whole("runtime_s", cell(cols.runtime), 1, MAX_RUNTIME_S, "a whole number of seconds of at least 1", Some("at most 315360000 (10 years)")),
    );
    let job_id = match opt(cols.job_id) {
        Some((i, s)) => take(i, whole("job_id", s, 0, u32::MAX.into(), "a whole number from 0 to 4294967295", None)),
        None => Some(position.into()),
    };
    let min_runtime = match opt(cols.min_runtime) {
        Some((i, s)) => take(
            i,
            whole("min_runtime_s", s, 0, MAX_RUNTIME_S, "a whole number of seconds of at least 0 (0: unallocated)", Some("at most 315360000 (10 years)")),
        )
        .map(Some),
        None => Some(None),
    };
    let job_id = job_id.map(|id| u32::try_from(id).expect("within 0..=u32::MAX"));
    if let (Some(id), Some(i)) = (job_id, cols.job_id) {
        if let Some(first) = seen_ids.get(&id) {
            problems.push((i, format!("job_id {id} is already used on line {first}")));
        }
    }
    let team = cell(cols.team);
    if team.is_empty() {
        problems.push((cols.team, "team is empty: every job needs a team, the Slurm account its budget leaf charges".into()));
    } else if let Some(problem) = allot::budget::account_name_problem(team) {
        problems.push((cols.team, format!("team must be a Slurm account name, as a budget's accounts list takes it: {problem}")));
    }
    if let Some((i, user)) = opt(cols.user) {
        if let Some(problem) = allot::budget::account_name_problem(user) {
            problems.push((i, format!("user must be a user name: {problem}")));
        }
    }
    if let Some((i, kind)) = opt(cols.kind) {
        if kind.chars().count() > MAX_KIND_CHARS {
            problems.push((i, format!("kind is {} characters long: a kind is a short label such as debug, at most {MAX_KIND_CHARS}", kind.chars().count())));
        } else if kind.chars().any(char::is_control) {
            problems
                .push((i, format!("kind '{}' holds a line break or another control character: a kind is a short label such as debug", kind.escape_debug())));
        }
    }
    let resumable = match opt(cols.resumable) {
        Some((i, s)) => parse_bool(s).or_else(|| {
            problems.push((i, format!("resumable must be true or false (or 1/0, yes/no), got '{s}'")));
            None
        }),
        None => Some(true),
    };
    let priority = match opt(cols.priority) {
        Some((i, s)) => PriorityLevel::parse(s).or_else(|| {
            problems.push((i, format!("priority must be low, normal or high, got '{s}'")));
            None
        }),
        None => Some(PriorityLevel::Normal),
    };
    match (submit, gpus, runtime, job_id, min_runtime, resumable, priority) {
        (Some(submit), Some(gpus), Some(runtime), Some(job_id), Some(min_runtime), Some(resumable), Some(priority)) if problems.is_empty() => Ok(Row {
            job_id,
            submit,
            gpus: u32::try_from(gpus).expect("at most MAX_GPUS"),
            runtime,
            team,
            user: opt(cols.user).map(|(_, s)| s),
            min_runtime,
            resumable,
            priority,
            kind: opt(cols.kind).map_or(UNSPECIFIED_KIND, |(_, s)| s),
        }),
        _ => {
            problems.sort_by_key(|&(i, _)| i);
            Err(problems)
        }
    }
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
        assert!(matches!(e, LoadError::Rows(_)), "{e:?}");
        let lines: Vec<u64> = e.errors().iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 6, 7], "{e}");
        assert!(e.errors()[0].to_string().contains("line 3: column 1 (submit_s): submit_s must be a whole number of seconds"), "{e}");
        assert_eq!(e.errors()[1].to_string(), "line 4: column 2 (gpus): gpus must be a whole number of at least 1, got 0", "{e}");
        assert!(e.errors()[2].message.contains("urgent"), "{e}");
        assert_eq!(e.errors()[3].to_string(), "line 6: the row has 3 field(s) where the header has 5");
        assert!(e.to_string().ends_with("5 problem(s) in 5 row(s); fix them, or pass --skip-bad-rows to run without those rows (they are then listed)"), "{e}");
        // Skipping keeps the good row and lists the rest.
        let w = Workload::from_csv(csv.as_bytes(), true).unwrap();
        assert_eq!(w.jobs.len(), 1);
        assert_eq!(w.skipped.len(), 5);
    }

    /// Every problem of a row is its own error, with the line and the
    /// column; skipping leaves out the row once, listing each problem.
    #[test]
    fn every_problem_of_a_row_is_reported_with_its_column() {
        let csv = "job_id,submit_s,gpus,runtime_s,team,min_runtime_s,resumable,priority\n\
                   7,0,1,10,a,,,\n\
                   7,x,-2,0,,-1,maybe,urgent\n\
                   8,0,1,10,b,60,yes,high\n";
        let e = Workload::from_csv(csv.as_bytes(), false).unwrap_err();
        let got: Vec<String> = e.errors().iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "line 3: column 1 (job_id): job_id 7 is already used on line 2",
                "line 3: column 2 (submit_s): submit_s must be a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0), got 'x'",
                "line 3: column 3 (gpus): gpus must be a whole number of at least 1, got -2",
                "line 3: column 4 (runtime_s): runtime_s must be a whole number of seconds of at least 1, got 0",
                "line 3: column 5 (team): team is empty: every job needs a team, the Slurm account its budget leaf charges",
                "line 3: column 6 (min_runtime_s): min_runtime_s must be a whole number of seconds of at least 0 (0: unallocated), got -1",
                "line 3: column 7 (resumable): resumable must be true or false (or 1/0, yes/no), got 'maybe'",
                "line 3: column 8 (priority): priority must be low, normal or high, got 'urgent'",
            ]
        );
        assert_eq!(e.bad_rows(), 1);
        assert!(e.to_string().ends_with("8 problem(s) in 1 row(s); fix them, or pass --skip-bad-rows to run without those rows (they are then listed)"), "{e}");
        assert_eq!(e.render("jobs.csv").lines().next(), Some("jobs.csv:3: column 1 (job_id): job_id 7 is already used on line 2"));
        let w = Workload::from_csv(csv.as_bytes(), true).unwrap();
        assert_eq!(w.ids(), HashSet::from([7, 8]));
        assert_eq!(w.skipped, e.errors());
        // The job ids of bad rows are not taken: a later row may use them.
        let w = Workload::from_csv("job_id,submit_s,gpus,runtime_s,team\n5,0,0,1,a\n5,0,1,1,a\n".as_bytes(), true).unwrap();
        assert_eq!((w.ids(), w.skipped.len()), (HashSet::from([5]), 1));
    }

    #[test]
    fn problems_of_the_whole_file_are_one_error_that_skipping_cannot_help() {
        let file_error = |csv: &[u8]| -> String {
            let strict = Workload::from_csv(csv, false).unwrap_err();
            let lenient = Workload::from_csv(csv, true).unwrap_err();
            assert_eq!(strict, lenient);
            assert!(matches!(strict, LoadError::File(ref e) if e.len() == 1), "{strict:?}");
            let shown = strict.render("jobs.csv");
            assert!(!shown.contains("skip-bad-rows"), "{shown}");
            shown
        };
        assert_eq!(
            file_error(b"submit_s,gpus,team\n1,1,a\n"),
            "jobs.csv:1: the header lacks the required column(s) runtime_s: it names submit_s,gpus,team; \
             the columns are submit_s,gpus,runtime_s,team (optional: job_id,user,min_runtime_s,resumable,priority,kind)"
        );
        assert!(file_error(b"")
            .starts_with("jobs.csv: the file is empty: a workload CSV starts with a header line naming its columns, submit_s,gpus,runtime_s,team"));
        assert!(file_error(b"\n\r\n  \n").starts_with("jobs.csv: the file is empty"));
        assert!(file_error(b",,\n1,2,3\n").contains("the header lacks the required column(s) submit_s, gpus, runtime_s, team: it names nothing"));
        assert_eq!(file_error(b"submit_s,gpus,runtime_s,team,GPUS\n"), "jobs.csv:1: column 5 (gpus): column 'gpus' appears twice, as columns 2 and 5");
        let dir = tempfile::tempdir().unwrap();
        let e = Workload::from_csv(std::fs::File::open(dir.path()).unwrap(), true).unwrap_err();
        assert_eq!(e.render("jobs"), "jobs: is a directory, not a CSV file");
        // A header and no rows: an empty workload, for the caller to judge.
        let w = Workload::from_csv("submit_s,gpus,runtime_s,team\n".as_bytes(), false).unwrap();
        assert!(w.jobs.is_empty() && w.skipped.is_empty());
    }

    /// Spreadsheets write a UTF-8 byte order mark before the header.
    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_column() {
        let w = Workload::from_csv("\u{feff}submit_s,gpus,runtime_s,team\r\n0,1,1,a\r\n".as_bytes(), false).unwrap();
        assert_eq!((w.jobs.len(), w.ignored_columns.len()), (1, 0));
    }

    #[test]
    fn header_problems_are_line_one() {
        let e = Workload::from_csv("submit_s,gpus,team\n1,1,a\n".as_bytes(), false).unwrap_err();
        assert_eq!(e.errors()[0].line, 1);
        assert!(e.errors()[0].message.contains("runtime_s"), "{e}");
        let e = Workload::from_csv("submit_s,gpus,runtime_s,team,job_id\n0,1,1,a,7\n0,1,1,a,7\n".as_bytes(), false).unwrap_err();
        assert!(e.errors()[0].message.contains("already used on line 2"), "{e}");
        assert_eq!(e.errors()[0].line, 3);
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
        Workload::from_csv(csv.as_bytes(), false).unwrap_err().errors().iter().map(ToString::to_string).collect()
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
                "line 3: column 1 (submit_s): submit_s must be a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0), got 9223372036854775807",
                "line 4: column 1 (submit_s): submit_s must be a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0), got -3153600001",
                "line 5: column 1 (submit_s): submit_s must be a whole number of seconds from -3153600000 to 3153600000 (100 years either side of 0), got 99999999999999999999999",
                "line 6: column 3 (runtime_s): runtime_s must be at most 315360000 (10 years), got 1000000000000",
                "line 7: column 2 (gpus): gpus must be a whole number of at least 1, got -2",
                "line 8: column 2 (gpus): gpus must be at most 1000000 (GPUs for one job), got 1000001",
                "line 9: column 2 (gpus): gpus must be a whole number of at least 1, got '1.5'",
                "line 10: column 5 (min_runtime_s): min_runtime_s must be at most 315360000 (10 years), got 315360001",
                "line 11: column 5 (min_runtime_s): min_runtime_s must be a whole number of seconds of at least 0 (0: unallocated), got -1",
                "line 12: column 3 (runtime_s): runtime_s must be a whole number of seconds of at least 1, got -5",
            ]
        );
        // job_id: 0 to 2^32-1, and not a number is said as such.
        let csv = "job_id,submit_s,gpus,runtime_s,team\n4294967295,0,1,1,a\n4294967296,0,1,1,a\n-1,0,1,1,a\nj1,0,1,1,a\n";
        assert_eq!(
            errors_of(csv),
            [
                "line 3: column 1 (job_id): job_id must be a whole number from 0 to 4294967295, got 4294967296",
                "line 4: column 1 (job_id): job_id must be a whole number from 0 to 4294967295, got -1",
                "line 5: column 1 (job_id): job_id must be a whole number from 0 to 4294967295, got 'j1'",
            ]
        );
    }

    #[test]
    fn the_largest_accepted_values_are_read() {
        let csv =
            format!("submit_s,gpus,runtime_s,team,min_runtime_s\n{},{MAX_GPUS},{MAX_RUNTIME_S},a,{MAX_RUNTIME_S}\n{},1,1,a,0\n", MAX_SUBMIT_S, -MAX_SUBMIT_S);
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
            // A quoted cell over two lines (in a column the reader ignores: a team may not hold a line break).
            let csv = ["submit_s,gpus,runtime_s,team,note", "0,1,10,a,", "", "x,1,10,a,", "0,1", "\"0\",1,10,a,\"two", "lines\"", "0,0,1,a,", ""].join(end);
            let e = Workload::from_csv(csv.as_bytes(), false).unwrap_err();
            let lines: Vec<u64> = e.errors().iter().map(|e| e.line).collect();
            assert_eq!(lines, [4, 5, 8], "line ends {end:?}: {e}");
        }
    }
}
