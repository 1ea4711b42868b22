//! The scheduling contract a job declares in its comment.
//!
//! ```text
//! sbatch --comment "resnet sweep min_runtime=2h priority=high" ...
//! ```
//!
//! - `min_runtime=DURATION`: how long the job is protected from preemption
//!   and charged to its budget (durations as in [`crate::duration`]:
//!   `2h`, `1h30m`, `90s`, `15m`, `02:00:00`). At most the cluster's cap.
//!   `min_runtime=0` makes the job **unallocated**: free, never charged,
//!   preemptible at any time. A job that declares none gets the cluster's
//!   `default_min_runtime`.
//! - `priority=low|normal|high`: orders the job only among its own leaf's
//!   jobs. Default `normal`.
//!
//! The keys may stand anywhere among other words, separated by spaces, commas
//! or semicolons; the other words are kept as they are. A word that looks
//! like a misspelt key (`min_runtim=2h`) is refused rather than ignored, so a
//! typo cannot silently cost a job its protection.
//!
//! [`Contract::canonical`] prints the contract back (`min_runtime=1h30m
//! priority=normal`), and parsing that gives the same contract.

use std::fmt;

use crate::duration::{format_duration, parse_duration};
use crate::Seconds;

/// A job's declared priority within its own leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum PriorityLevel {
    Low,
    #[default]
    Normal,
    High,
}

impl PriorityLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            PriorityLevel::Low => "low",
            PriorityLevel::Normal => "normal",
            PriorityLevel::High => "high",
        }
    }
    pub fn parse(s: &str) -> Option<PriorityLevel> {
        match s.to_ascii_lowercase().as_str() {
            "low" => Some(PriorityLevel::Low),
            "normal" => Some(PriorityLevel::Normal),
            "high" => Some(PriorityLevel::High),
            _ => None,
        }
    }
}

impl fmt::Display for PriorityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a job declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Contract {
    /// Seconds of protection; 0 means unallocated.
    pub min_runtime: Seconds,
    pub priority: PriorityLevel,
}

impl Contract {
    /// Charged and protected (as opposed to `min_runtime=0`).
    pub fn is_allocated(&self) -> bool {
        self.min_runtime > 0
    }

    /// `min_runtime=2h priority=normal`.
    pub fn canonical(&self) -> String {
        format!("min_runtime={} priority={}", format_duration(self.min_runtime), self.priority)
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

/// The limits a contract is checked against, from the budget's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractRules {
    pub min_runtime_cap: Seconds,
    pub default_min_runtime: Seconds,
}

impl From<&crate::budget::ClusterSettings> for ContractRules {
    fn from(s: &crate::budget::ClusterSettings) -> Self {
        ContractRules { min_runtime_cap: s.min_runtime_cap, default_min_runtime: s.default_min_runtime }
    }
}

/// A job comment, split into the contract and everything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedComment {
    pub contract: Contract,
    /// Whether the comment named a minimum runtime (else the default applies).
    pub min_runtime_given: bool,
    /// The comment's other words, as written.
    pub other_text: String,
}

impl ParsedComment {
    /// The comment as stored back on the job: other text, then the
    /// canonical contract.
    pub fn canonical_comment(&self) -> String {
        if self.other_text.is_empty() {
            self.contract.canonical()
        } else {
            format!("{} {}", self.other_text, self.contract.canonical())
        }
    }
}

/// A contract that cannot be accepted. `Display` is what the researcher sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractError {
    /// The offending word of the comment (`min_runtime=9h`).
    pub token: String,
    pub reason: String,
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.token, self.reason)
    }
}

impl std::error::Error for ContractError {}

const KEYS: [&str; 2] = ["min_runtime", "priority"];

fn is_separator(c: char) -> bool {
    c.is_whitespace() || c == ',' || c == ';'
}

/// Splits `comment` into the contract and the other words; see the module
/// documentation for the grammar.
pub fn parse_comment(comment: &str, rules: ContractRules) -> Result<ParsedComment, ContractError> {
    let mut min_runtime: Option<(Seconds, &str)> = None;
    let mut priority: Option<(PriorityLevel, &str)> = None;
    let mut other: Vec<&str> = Vec::new();
    for token in comment.split(is_separator).filter(|t| !t.is_empty()) {
        let Some((key, value)) = token.split_once('=') else {
            other.push(token);
            continue;
        };
        let key_lower = key.to_ascii_lowercase();
        let err = |reason: String| ContractError { token: token.to_owned(), reason };
        match key_lower.as_str() {
            "min_runtime" => {
                if let Some((_, first)) = min_runtime {
                    return Err(err(format!("repeats min_runtime (already {first}); give it once")));
                }
                let secs = parse_duration(value).map_err(|e| err(format!("is not valid: {}", e.reason)))?;
                if secs > rules.min_runtime_cap {
                    return Err(err(format!("exceeds the cluster cap of {}", format_duration(rules.min_runtime_cap))));
                }
                min_runtime = Some((secs, token));
            }
            "priority" => {
                if let Some((_, first)) = priority {
                    return Err(err(format!("repeats priority (already {first}); give it once")));
                }
                let level = PriorityLevel::parse(value).ok_or_else(|| err("is not valid: priority is low, normal or high".to_owned()))?;
                priority = Some((level, token));
            }
            _ => {
                let near = KEYS.iter().find(|k| strsim::levenshtein(&key_lower, k) <= 2 || key_lower.contains("runtime"));
                if let Some(k) = near {
                    return Err(err(format!("is not a contract key; did you mean {k}=...? (keys: min_runtime, priority)")));
                }
                other.push(token);
            }
        }
    }
    Ok(ParsedComment {
        contract: Contract {
            min_runtime: min_runtime.map(|(s, _)| s).unwrap_or(rules.default_min_runtime),
            priority: priority.map(|(p, _)| p).unwrap_or_default(),
        },
        min_runtime_given: min_runtime.is_some(),
        other_text: other.join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: ContractRules = ContractRules { min_runtime_cap: 8 * 3600, default_min_runtime: 3600 };

    fn contract(s: &str) -> Contract {
        parse_comment(s, RULES).unwrap_or_else(|e| panic!("{e}")).contract
    }

    #[test]
    fn reads_the_contract_among_other_words() {
        let p = parse_comment("resnet sweep, min_runtime=1h30m; priority=HIGH lr=0.1", RULES).unwrap();
        assert_eq!(p.contract, Contract { min_runtime: 5400, priority: PriorityLevel::High });
        assert_eq!(p.other_text, "resnet sweep lr=0.1");
        assert_eq!(p.canonical_comment(), "resnet sweep lr=0.1 min_runtime=1h30m priority=high");
        assert!(p.min_runtime_given);
    }

    #[test]
    fn forms_and_defaults() {
        assert_eq!(contract("min_runtime=2h").min_runtime, 7200);
        assert_eq!(contract("min_runtime=90s").min_runtime, 90);
        assert_eq!(contract("min_runtime=02:00:00").min_runtime, 7200);
        assert_eq!(contract("min_runtime=15m").min_runtime, 900);
        let free = contract("min_runtime=0");
        assert!(!free.is_allocated());
        let none = parse_comment("", RULES).unwrap();
        assert_eq!(none.contract, Contract { min_runtime: 3600, priority: PriorityLevel::Normal });
        assert!(!none.min_runtime_given);
        assert_eq!(contract("min_runtime=8h").min_runtime, 8 * 3600);
    }

    #[test]
    fn refusals_name_the_token_and_the_rule() {
        let e = parse_comment("min_runtime=9h", RULES).unwrap_err();
        assert_eq!(e.to_string(), "min_runtime=9h exceeds the cluster cap of 8h");
        let e = parse_comment("min_runtime=2 priority=high", RULES).unwrap_err();
        assert!(e.to_string().starts_with("min_runtime=2 is not valid: give a unit"), "{e}");
        let e = parse_comment("priority=urgent", RULES).unwrap_err();
        assert_eq!(e.to_string(), "priority=urgent is not valid: priority is low, normal or high");
        let e = parse_comment("min_runtime=1h min_runtime=2h", RULES).unwrap_err();
        assert!(e.to_string().contains("repeats min_runtime"), "{e}");
        let e = parse_comment("min_runtim=2h", RULES).unwrap_err();
        assert!(e.to_string().contains("did you mean min_runtime"), "{e}");
        let e = parse_comment("max_runtime=2h", RULES).unwrap_err();
        assert!(e.to_string().contains("did you mean"), "{e}");
    }

    #[test]
    fn canonical_round_trips() {
        for c in ["min_runtime=0 priority=low", "min_runtime=1h1s priority=normal", "x y min_runtime=8h priority=high"] {
            let p = parse_comment(c, RULES).unwrap();
            assert_eq!(p.canonical_comment(), c);
        }
    }
}
