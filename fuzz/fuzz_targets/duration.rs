//! The duration parser and printer (`allot::duration`).
//!
//! Properties: an accepted duration is within 0..=MAX_DURATION; printing it
//! and reading that back gives the same seconds, in the same printed form;
//! surrounding whitespace and letter case do not matter; and every number of
//! seconds in range (taken from the input's first 8 bytes) round-trips.
#![no_main]

use allot::duration::{format_duration, parse_duration, MAX_DURATION};
use libfuzzer_sys::fuzz_target;

fn round_trips(secs: i64) {
    let text = format_duration(secs);
    assert_eq!(parse_duration(&text), Ok(secs), "{secs} s printed as {text:?}");
    assert_eq!(format_duration(parse_duration(&text).unwrap_or(-1)), text);
}

fuzz_target!(|data: &[u8]| {
    if let Some(first8) = data.get(..8) {
        let n = i64::from_le_bytes(first8.try_into().unwrap_or_default());
        round_trips(n.rem_euclid(MAX_DURATION + 1));
    }
    let text = String::from_utf8_lossy(data);
    match parse_duration(&text) {
        Ok(secs) => {
            assert!((0..=MAX_DURATION).contains(&secs), "{text:?} -> {secs}");
            round_trips(secs);
            assert_eq!(parse_duration(&format!(" {text}\t")), Ok(secs));
            assert_eq!(parse_duration(&text.to_ascii_uppercase()), Ok(secs));
        }
        Err(e) => {
            assert_eq!(e.input, text);
            assert!(!e.reason.is_empty());
        }
    }
});
