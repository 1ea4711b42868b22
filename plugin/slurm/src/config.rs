//! `allot.conf`: the plugins' own settings, beside slurm.conf.
//!
//! Slurm-style `Key=Value` lines, keys case-insensitive, `#` starts a
//! comment. Every problem is reported with the file and line; an unknown key
//! is an error (a typo must not silently fall back to a default).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use allot_ledger::Location;

/// The plugins' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllotConf {
    /// Where the ledger lives: `LedgerPath` (a SQLite file) or `LedgerUrl`
    /// (a MariaDB/MySQL server).
    pub ledger: Location,
    /// How often the priority plugin recomputes the order.
    pub recompute_period: Duration,
    /// Seconds between the preemption signal and the kill; `None`: use the
    /// budget file's `grace`.
    pub grace_time: Option<u32>,
    /// Refuse jobs whose account is not in the budget tree.
    pub refuse_unknown_accounts: bool,
    /// The Slurm partition holding the nodes kept for small jobs
    /// (`PreemptRules::may_use_small_job_nodes`): job_submit sends small and
    /// unallocated jobs that name no partition there and refuses other jobs
    /// that name it. `None`: no nodes are kept.
    pub small_job_partition: Option<String>,
    /// The file these came from, for messages (`None`: built-in defaults).
    pub source: Option<PathBuf>,
}

impl Default for AllotConf {
    fn default() -> Self {
        AllotConf {
            ledger: Location::File(PathBuf::from(allot_ledger::DEFAULT_LEDGER_PATH)),
            recompute_period: Duration::from_secs(30),
            grace_time: None,
            refuse_unknown_accounts: true,
            small_job_partition: None,
            source: None,
        }
    }
}

/// A problem in allot.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

const KEYS: [&str; 6] = ["LedgerPath", "LedgerUrl", "RecomputePeriod", "GraceTime", "RefuseUnknownAccounts", "SmallJobPartition"];

impl AllotConf {
    /// `allot.conf` in the directory of `slurm_conf` (the path of slurm.conf).
    pub fn path_beside(slurm_conf: &Path) -> PathBuf {
        slurm_conf.parent().unwrap_or(Path::new("/etc/slurm")).join("allot.conf")
    }

    /// Reads the file at `path`. A missing file means the built-in defaults.
    pub fn load(path: &Path) -> Result<AllotConf, Vec<ConfError>> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AllotConf::default()),
            Err(e) => Err(vec![ConfError { file: path.display().to_string(), line: None, message: format!("cannot read: {e}") }]),
        }
    }

    /// Parses the text of an allot.conf read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<AllotConf, Vec<ConfError>> {
        let file = path.display().to_string();
        let mut conf = AllotConf { source: Some(path.to_path_buf()), ..AllotConf::default() };
        let mut errors = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut error = |message: String| errors.push(ConfError { file: file.clone(), line: Some(i + 1), message });
            let Some((key, value)) = line.split_once('=') else {
                error(format!("expected Key=Value, got '{line}'"));
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            let Some(&canonical) = KEYS.iter().find(|k| k.eq_ignore_ascii_case(key)) else {
                error(format!("unknown key '{key}' (keys: {})", KEYS.join(", ")));
                continue;
            };
            if seen.contains(&canonical) {
                error(format!("{canonical} is set twice"));
                continue;
            }
            seen.push(canonical);
            match canonical {
                "LedgerPath" | "LedgerUrl" if seen.contains(&"LedgerPath") && seen.contains(&"LedgerUrl") => {
                    error(allot_ledger::BOTH_LEDGER_KEYS.to_owned());
                }
                "LedgerPath" | "LedgerUrl" => {
                    let (path, url) = if canonical == "LedgerPath" { (Some(value), None) } else { (None, Some(value)) };
                    match Location::from_conf(path, url) {
                        Ok(Some(l)) => conf.ledger = l,
                        Ok(None) => {}
                        Err(e) => error(e),
                    }
                }
                "RecomputePeriod" => match value.parse::<u64>() {
                    Ok(s) if (1..=3600).contains(&s) => conf.recompute_period = Duration::from_secs(s),
                    _ => error(format!("RecomputePeriod must be whole seconds from 1 to 3600, got '{value}'")),
                },
                "GraceTime" => match value.parse::<u32>() {
                    Ok(s) if s <= 86_400 => conf.grace_time = Some(s),
                    _ => error(format!("GraceTime must be whole seconds from 0 to 86400, got '{value}'")),
                },
                "RefuseUnknownAccounts" => match value.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "1" => conf.refuse_unknown_accounts = true,
                    "no" | "false" | "0" => conf.refuse_unknown_accounts = false,
                    _ => error(format!("RefuseUnknownAccounts must be yes or no, got '{value}'")),
                },
                "SmallJobPartition" => {
                    if value.is_empty() {
                        conf.small_job_partition = None;
                    } else if value.contains([',', ' ', '\t']) {
                        error(format!("SmallJobPartition must be one partition name, got '{value}'"));
                    } else {
                        conf.small_job_partition = Some(value.to_owned());
                    }
                }
                _ => unreachable!("every key in KEYS is handled"),
            }
        }
        if errors.is_empty() {
            Ok(conf)
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shipped_template() {
        let text = include_str!("../../../conf/allot.conf");
        let conf = AllotConf::parse(text, Path::new("allot.conf")).unwrap();
        assert_eq!(conf.ledger, Location::File(PathBuf::from("/var/lib/allot/ledger.db")));
        assert_eq!(conf.recompute_period, Duration::from_secs(30));
        assert_eq!(conf.grace_time, Some(30));
        assert!(conf.refuse_unknown_accounts);
        // Shipped on: the seed's debug latency needs kept nodes.
        assert_eq!(conf.small_job_partition.as_deref(), Some("small"));
    }

    #[test]
    fn small_job_partition_is_one_name_or_none() {
        let conf = AllotConf::parse("SmallJobPartition=small\n", Path::new("a.conf")).unwrap();
        assert_eq!(conf.small_job_partition.as_deref(), Some("small"));
        assert_eq!(AllotConf::parse("SmallJobPartition=\n", Path::new("a.conf")).unwrap().small_job_partition, None);
        let e = AllotConf::parse("SmallJobPartition=small,gpu\n", Path::new("a.conf")).unwrap_err();
        assert_eq!(e[0].to_string(), "a.conf:1: SmallJobPartition must be one partition name, got 'small,gpu'");
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = AllotConf::parse(
            "LedgerPath=/x.db\n\nrecomputeperiod=0\nGrace=5\nRefuseUnknownAccounts=maybe\nLedgerPath=/y\nnonsense\n",
            Path::new("/etc/slurm/allot.conf"),
        )
        .unwrap_err();
        let lines: Vec<String> = e.iter().map(|e| e.to_string()).collect();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].starts_with("/etc/slurm/allot.conf:3: RecomputePeriod must be"), "{}", lines[0]);
        assert!(lines[1].contains(":4: unknown key 'Grace'"), "{}", lines[1]);
        assert!(lines[2].contains(":5: RefuseUnknownAccounts must be yes or no"), "{}", lines[2]);
        assert!(lines[3].contains(":6: LedgerPath is set twice"), "{}", lines[3]);
        assert!(lines[4].contains(":7: expected Key=Value"), "{}", lines[4]);
    }

    #[test]
    fn a_server_ledger_is_a_url_without_its_password() {
        let conf = AllotConf::parse("LedgerUrl=mysql://allot@db/allot?password_file=/etc/slurm/allot-ledger.pass\n", Path::new("a.conf")).unwrap();
        assert!(conf.ledger.is_server());
        assert_eq!(conf.ledger.to_string(), "mysql://allot@db/allot?password_file=/etc/slurm/allot-ledger.pass");
        let e = AllotConf::parse("LedgerUrl=mysql://allot:hunter2@db/allot\n", Path::new("a.conf")).unwrap_err();
        assert!(e[0].to_string().starts_with("a.conf:1: LedgerUrl: ") && e[0].to_string().contains("carries a password"), "{}", e[0]);
        assert!(!e[0].to_string().contains("hunter2"));
        let e = AllotConf::parse("LedgerPath=/x.db\nLedgerUrl=mysql://allot@db/allot\n", Path::new("a.conf")).unwrap_err();
        assert_eq!(e[0].to_string(), "a.conf:2: LedgerPath and LedgerUrl are both set: the ledger is a file or a server, not both");
        let e = AllotConf::parse("LedgerUrl=/var/lib/allot/ledger.db\n", Path::new("a.conf")).unwrap_err();
        assert!(e[0].to_string().contains("a file is LedgerPath"), "{}", e[0]);
    }

    #[test]
    fn missing_file_means_defaults() {
        assert_eq!(AllotConf::load(Path::new("/nonexistent/allot.conf")).unwrap(), AllotConf::default());
        assert_eq!(AllotConf::path_beside(Path::new("/etc/slurm/slurm.conf")), PathBuf::from("/etc/slurm/allot.conf"));
    }
}
