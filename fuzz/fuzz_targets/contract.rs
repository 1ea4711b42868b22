//! The job-comment contract parser (`allot::contract::parse_comment`).
//!
//! Properties: an accepted comment's contract respects the rules (0 <=
//! min_runtime <= cap; the default when none is given); its canonical form
//! parses back to the same contract and other words, and is a fixed point.
#![no_main]

use allot::contract::{parse_comment, ContractRules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the rules, so that caps other than 8h are explored.
    let (rules, text) = match data.split_first() {
        Some((&b, rest)) => {
            let cap = [0, 60, 3600, 8 * 3600, 3650 * 86_400][usize::from(b % 5)];
            let default = [0, 30, 3600][usize::from(b / 5 % 3)].min(cap);
            (ContractRules { min_runtime_cap: cap, default_min_runtime: default }, rest)
        }
        None => (ContractRules { min_runtime_cap: 8 * 3600, default_min_runtime: 3600 }, data),
    };
    let comment = String::from_utf8_lossy(text);
    let Ok(parsed) = parse_comment(&comment, rules) else {
        return;
    };
    let c = parsed.contract;
    assert!(c.min_runtime >= 0 && c.min_runtime <= rules.min_runtime_cap, "{c:?} outside {rules:?}");
    if !parsed.min_runtime_given {
        assert_eq!(c.min_runtime, rules.default_min_runtime);
    }
    let canonical = parsed.canonical_comment();
    let again = parse_comment(&canonical, rules)
        .unwrap_or_else(|e| panic!("canonical {canonical:?} of {comment:?} is refused: {e}"));
    assert_eq!(again.contract, c, "{comment:?} -> {canonical:?}");
    assert_eq!(again.other_text, parsed.other_text, "{comment:?} -> {canonical:?}");
    assert!(again.min_runtime_given);
    assert_eq!(again.canonical_comment(), canonical, "the canonical form is not a fixed point");
    assert_eq!(parse_comment(&c.canonical(), rules).map(|p| p.contract), Ok(c));
});
