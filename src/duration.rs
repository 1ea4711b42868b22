//! Durations as people write them in job comments and budget files.
//!
//! Accepted forms (all whole seconds, no fractions):
//! - unit form: `90s`, `15m`, `2h`, `1h30m`, `1d12h`, in decreasing unit order,
//!   each unit at most once (`d`, `h`, `m`, `s`);
//! - Slurm's clock form: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`, `D-HH:MM`, `D-HH`;
//! - a bare `0`, meaning zero.
//!
//! A bare number other than `0` is refused: Slurm reads `90` as minutes and
//! most people read it as seconds, so we ask for a unit instead of guessing.
//!
//! [`format_duration`] prints the canonical unit form (`5400` s -> `1h30m`),
//! which [`parse_duration`] reads back to the same number of seconds.

use std::fmt;

use crate::Seconds;

/// Why a duration could not be read. The text names the rule that was broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    /// The text as given.
    pub input: String,
    /// What is wrong with it, in words a researcher understands.
    pub reason: String,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' is not a duration: {}", self.input, self.reason)
    }
}

impl std::error::Error for DurationError {}

const MINUTE: Seconds = 60;
const HOUR: Seconds = 60 * MINUTE;
const DAY: Seconds = 24 * HOUR;

/// Longest duration accepted anywhere: ten years. Larger values are typos, and
/// the cap keeps every sum of durations far from `i64` overflow.
pub const MAX_DURATION: Seconds = 3650 * DAY;

/// Reads a duration; see the module documentation for the accepted forms.
pub fn parse_duration(text: &str) -> Result<Seconds, DurationError> {
    let fail = |reason: &str| DurationError { input: text.to_owned(), reason: reason.to_owned() };
    let s = text.trim();
    if s.is_empty() {
        return Err(fail("it is empty"));
    }
    if s.starts_with('-') {
        return Err(fail("a duration cannot be negative"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return if s.bytes().all(|b| b == b'0') { Ok(0) } else { Err(fail("give a unit, for example 90m, 2h or 45s (a bare number is ambiguous)")) };
    }
    let secs = if s.contains(':') || s.contains('-') { parse_clock(s).map_err(fail)? } else { parse_units(s).map_err(fail)? };
    if secs > MAX_DURATION {
        return Err(fail("it is longer than ten years"));
    }
    Ok(secs)
}

fn number(digits: &str) -> Result<Seconds, &'static str> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected digits");
    }
    // More than 12 digits cannot be a sane duration and could overflow below.
    if digits.len() > 12 {
        return Err("the number is too large");
    }
    digits.parse::<Seconds>().map_err(|_| "the number is too large")
}

fn parse_units(s: &str) -> Result<Seconds, &'static str> {
    const UNITS: [(char, Seconds); 4] = [('d', DAY), ('h', HOUR), ('m', MINUTE), ('s', 1)];
    let mut total: Seconds = 0;
    let mut next_unit = 0; // index into UNITS: units must come in decreasing order
    let mut rest = s;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits_end == 0 {
            return Err("expected a number before each unit, as in 1h30m");
        }
        let value = number(&rest[..digits_end])?;
        let unit = rest[digits_end..].chars().next().ok_or("the last number has no unit (use d, h, m or s)")?;
        let index = UNITS.iter().position(|(u, _)| *u == unit.to_ascii_lowercase()).ok_or("units are d, h, m and s")?;
        if index < next_unit {
            return Err("units must go from largest to smallest, each at most once (1h30m, not 30m1h)");
        }
        next_unit = index + 1;
        total = total.checked_add(value.checked_mul(UNITS[index].1).ok_or("the number is too large")?).ok_or("the number is too large")?;
        rest = &rest[digits_end + unit.len_utf8()..];
    }
    Ok(total)
}

/// Slurm's `[D-]HH:MM:SS`, `MM:SS`, `D-HH[:MM]`.
fn parse_clock(s: &str) -> Result<Seconds, &'static str> {
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (Some(number(d).map_err(|_| "the day count before '-' must be digits")?), rest),
        None => (None, s),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let nums = parts.iter().map(|p| number(p)).collect::<Result<Vec<_>, _>>().map_err(|_| "each field of HH:MM:SS must be digits")?;
    // In MM:SS the minutes may exceed 59 ("90:00"), as Slurm allows; once
    // hours are written, minutes and seconds are clock fields.
    let (h, m, sec, minutes_bounded) = match (days.is_some(), nums.as_slice()) {
        (false, [m, s]) => (0, *m, *s, false),
        (_, [h, m, s]) => (*h, *m, *s, true),
        (true, [h]) => (*h, 0, 0, true),
        (true, [h, m]) => (*h, *m, 0, true),
        _ => return Err("use HH:MM:SS, MM:SS or D-HH:MM:SS"),
    };
    if sec >= 60 || (minutes_bounded && m >= 60) {
        return Err("minutes and seconds must be below 60");
    }
    if days.is_some() && h >= 24 {
        return Err("hours must be below 24 after a day count");
    }
    Ok(days.unwrap_or(0) * DAY + h * HOUR + m * MINUTE + sec)
}

/// The canonical form: `0`, or units from days down, zero units left out
/// (`1d2h`, `1h30m`, `45s`).
pub fn format_duration(secs: Seconds) -> String {
    if secs <= 0 {
        return "0".to_owned();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [('d', DAY), ('h', HOUR), ('m', MINUTE), ('s', 1)] {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push(unit);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_forms() {
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("7d"), Ok(7 * DAY));
        assert_eq!(parse_duration("1d2h3m4s"), Ok(DAY + 2 * HOUR + 3 * MINUTE + 4));
        assert_eq!(parse_duration("2H"), Ok(7200));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("0s"), Ok(0));
    }

    #[test]
    fn clock_forms() {
        assert_eq!(parse_duration("02:00:00"), Ok(7200));
        assert_eq!(parse_duration("1:30:00"), Ok(5400));
        assert_eq!(parse_duration("15:00"), Ok(900));
        assert_eq!(parse_duration("1-00:00:00"), Ok(DAY));
        assert_eq!(parse_duration("1-12"), Ok(DAY + 12 * HOUR));
        assert_eq!(parse_duration("0:00:00"), Ok(0));
    }

    #[test]
    fn refusals_say_why() {
        let e = parse_duration("90").unwrap_err();
        assert!(e.reason.contains("unit"), "{e}");
        assert!(parse_duration("").is_err());
        assert!(parse_duration("2x").unwrap_err().reason.contains("d, h, m and s"));
        assert!(parse_duration("30m1h").unwrap_err().reason.contains("largest to smallest"));
        assert!(parse_duration("1h1h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("2h30").unwrap_err().reason.contains("no unit"));
        assert!(parse_duration("1:75:00").unwrap_err().reason.contains("below 60"));
        assert!(parse_duration("1-25:00:00").unwrap_err().reason.contains("below 24"));
        assert!(parse_duration("1:2:3:4").is_err());
        // Not the day count of D-HH:MM:SS: a minus sign first is a negative duration.
        assert_eq!(parse_duration("-5m").unwrap_err().to_string(), "'-5m' is not a duration: a duration cannot be negative");
        assert_eq!(parse_duration(" -1-00:00:00").unwrap_err().reason, "a duration cannot be negative");
        assert!(parse_duration("99999999999999h").is_err());
        assert!(parse_duration("4000d").unwrap_err().reason.contains("ten years"));
    }

    #[test]
    fn canonical_form() {
        assert_eq!(format_duration(0), "0");
        assert_eq!(format_duration(90), "1m30s");
        assert_eq!(format_duration(5400), "1h30m");
        assert_eq!(format_duration(8 * HOUR), "8h");
        assert_eq!(format_duration(DAY + 1), "1d1s");
    }
}
