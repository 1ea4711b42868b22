//! `allot doctor`: does this host's allot match its slurmctld?
//!
//! An admin runs it after installing or rebuilding allot, and at each Slurm
//! micro update (slurmctld loads a plugin only when its `plugin_version` is
//! the running version, micro included). It reads what the running
//! slurmctld says of itself (`scontrol show config`; slurm.conf and
//! `slurmctld -V` when it does not answer), finds allot's four plugins in
//! its PluginDir and reads each file's own symbols, without loading it:
//! the version it was built for, its type, and every symbol that release's
//! plugin loader looks up (Slurm's `syms[]` tables in src/interfaces or
//! src/common, which changed at 24.11, 25.05 and 25.11). Then the
//! slurm.conf lines, allot.conf's ledger, its permissions for the
//! SlurmUser and its filesystem. Each check prints `ok` or `PROBLEM` with
//! what to do; the exit status is 1 if any problem was found.
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use object::{Object, ObjectSection, ObjectSymbol};

use crate::identity::conf_value;

/// The four plugins and their slurm.conf keys.
const PLUGINS: [(&str, &str); 4] = [("priority", "PriorityType"), ("job_submit", "JobSubmitPlugins"), ("preempt", "PreemptType"), ("jobcomp", "JobCompType")];

/// What slurmctld's plugin loader of `kind` looks up in Slurm `version`
/// (major, minor): a missing one makes slurmctld refuse the plugin. Read
/// from each release's syms[] table; every plugin also needs the loader's
/// own symbols.
fn required_symbols(kind: &str, version: (u32, u32)) -> Vec<&'static str> {
    let ge = |r: (u32, u32)| version >= r;
    let mut s = vec!["plugin_name", "plugin_type", "plugin_version", "init", "fini"];
    match kind {
        "priority" => {
            s.extend(["priority_p_set", "priority_p_reconfig", "priority_p_set_assoc_usage", "priority_p_get_priority_factors_list", "priority_p_job_end"]);
            if !ge((25, 11)) {
                s.push("priority_p_calc_fs_factor");
            }
            if ge((24, 11)) {
                s.extend(["priority_p_recover", "priority_p_thread_start"]);
            }
        }
        "job_submit" => s.extend(["job_submit", "job_modify"]),
        "preempt" => {
            s.extend(["preempt_p_job_preempt_check", "preempt_p_preemptable"]);
            if ge((25, 5)) {
                s.extend(["preempt_p_get_grace_time", "preempt_p_get_mode", "preempt_p_get_prio"]);
            } else {
                s.push("preempt_p_get_data");
            }
        }
        "jobcomp" => {
            s.extend(["jobcomp_p_set_location", "jobcomp_p_get_jobs"]);
            if ge((25, 5)) {
                s.extend(["jobcomp_p_record_job_end", "jobcomp_p_record_job_start"]);
            } else {
                s.push("jobcomp_p_log_record");
            }
        }
        _ => unreachable!("one of PLUGINS"),
    }
    s
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub ok: bool,
    pub what: String,
    /// What to do about a problem.
    pub fix: Option<String>,
}

fn ok(what: impl Into<String>) -> Finding {
    Finding { ok: true, what: what.into(), fix: None }
}
fn problem(what: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { ok: false, what: what.into(), fix: Some(fix.into()) }
}

/// Slurm's configuration as the checks need it: `Key -> value` (keys as
/// slurm.conf spells them, compared case-insensitively).
#[derive(Debug, Default, Clone)]
pub struct SlurmConfig {
    pub values: BTreeMap<String, String>,
    /// Where it came from, for the report.
    pub source: String,
    /// The Slurm version (`25.11.7`).
    pub version: Option<String>,
    /// Told by the running slurmctld (`scontrol show config`), not read from files.
    pub live: bool,
}

impl SlurmConfig {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
    }
}

/// `scontrol show config`'s `Key = value` lines.
pub fn parse_show_config(text: &str) -> SlurmConfig {
    let mut c = SlurmConfig::default();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(" = ") {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("SLURM_VERSION") {
                c.version = Some(v.to_owned());
            }
            c.values.insert(k.to_owned(), v.to_owned());
        }
    }
    c
}

/// slurm.conf's own lines, `Include`d files too (relative to its directory).
pub fn read_slurm_conf(path: &Path) -> anyhow::Result<SlurmConfig> {
    fn read(path: &Path, into: &mut BTreeMap<String, String>, depth: u32) -> anyhow::Result<()> {
        anyhow::ensure!(depth < 8, "{}: Include nested too deep", path.display());
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.splitn(2, char::is_whitespace);
            if words.next().is_some_and(|w| w.eq_ignore_ascii_case("include")) {
                let target = PathBuf::from(words.next().unwrap_or("").trim());
                let target = if target.is_absolute() { target } else { path.parent().unwrap_or(Path::new("/")).join(target) };
                read(&target, into, depth + 1)?;
            } else if let Some((k, v)) = line.split_once('=') {
                // Node and partition lines hold several keys: only the first counts, and none is one we read.
                into.insert(k.trim().to_owned(), v.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
        Ok(())
    }
    let mut values = BTreeMap::new();
    read(path, &mut values, 0)?;
    Ok(SlurmConfig { values, source: path.display().to_string(), version: None, live: false })
}

/// `25.11.7` -> (25, 11, 7).
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// What a plugin file says of itself.
#[derive(Debug, Clone, Default)]
pub struct PluginFile {
    pub version: Option<u32>,
    pub plugin_type: Option<String>,
    pub symbols: HashSet<String>,
}

/// Reads a plugin's exported symbols and the values of `plugin_version` and
/// `plugin_type` from its ELF file, without loading it.
pub fn read_plugin(path: &Path) -> anyhow::Result<PluginFile> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = object::File::parse(&*data).with_context(|| format!("{} is not an ELF shared object", path.display()))?;
    let mut out = PluginFile::default();
    for sym in file.dynamic_symbols() {
        if sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        out.symbols.insert(name.to_owned());
        let bytes = || -> Option<&[u8]> {
            let section = file.section_by_index(sym.section_index()?).ok()?;
            let offset = sym.address().checked_sub(section.address())? as usize;
            section.data().ok()?.get(offset..offset + sym.size() as usize)
        };
        match name {
            "plugin_version" => out.version = bytes().and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes),
            "plugin_type" => out.plugin_type = bytes().map(|b| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(b)).into_owned()),
            _ => {}
        }
    }
    Ok(out)
}

fn version_text(n: u32) -> String {
    format!("{}.{:02}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff)
}

/// Every check, against a Slurm described by `running` (what slurmctld
/// said, or slurm.conf) and the slurm.conf at `slurm_conf`.
pub fn check(running: &SlurmConfig, slurm_conf: &Path) -> Vec<Finding> {
    let mut f = Vec::new();
    let rebuild = |v: &str| {
        format!(
            "rebuild allot against the source tree of Slurm {v}, configured as slurmctld was (`SLURM_SRC_DIR=TREE cargo build --release --workspace`), \
             install the four plugins into PluginDir (scripts/install-plugins.sh) and restart slurmctld"
        )
    };
    let Some(version) = running.version.as_deref().and_then(parse_version) else {
        f.push(problem(
            "the Slurm version is unknown (neither `scontrol show config` nor `slurmctld -V` said it)",
            "put Slurm's commands on PATH, or pass --slurm-conf",
        ));
        return f;
    };
    let (a, b, c) = version;
    let vtext = format!("{a}.{b:02}.{c}");
    let number = (a << 16) | (b << 8) | c;

    // slurm.conf's lines for allot.
    for (kind, key) in PLUGINS {
        let value = running.get(key).unwrap_or("");
        let wanted = format!("{kind}/allot");
        let set = if kind == "job_submit" { value.split(',').any(|p| p.trim() == "allot" || p.trim() == wanted) } else { value == wanted };
        if set {
            f.push(ok(format!("{key}={value}")));
        } else {
            let line = if kind == "job_submit" { "JobSubmitPlugins=allot".to_owned() } else { format!("{key}={wanted}") };
            f.push(problem(
                format!("{key} is '{}' ({}), not {wanted}", if value.is_empty() { "(unset)" } else { value }, running.source),
                format!("add `{line}` to slurm.conf (conf/slurm-allot.conf has every line allot needs) and restart slurmctld"),
            ));
        }
    }
    match running.get("PreemptMode").unwrap_or("OFF") {
        m if m.eq_ignore_ascii_case("OFF") || m.is_empty() => f.push(problem(
            "PreemptMode is OFF: the contract cannot preempt anything past its minimum runtime",
            "set PreemptMode=REQUEUE in slurm.conf (and JobRequeue=1) and restart slurmctld",
        )),
        m => f.push(ok(format!("PreemptMode={m}"))),
    }

    // The plugin files.
    let plugin_dirs: Vec<PathBuf> = running.get("PluginDir").unwrap_or("/usr/lib/slurm").split(':').map(PathBuf::from).collect();
    for (kind, _) in PLUGINS {
        let name = format!("{kind}_allot.so");
        let Some(path) = plugin_dirs.iter().map(|d| d.join(&name)).find(|p| p.exists()) else {
            f.push(problem(
                format!("{name} is in no PluginDir ({})", plugin_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")),
                rebuild(&vtext),
            ));
            continue;
        };
        let plugin = match read_plugin(&path) {
            Ok(p) => p,
            Err(e) => {
                f.push(problem(format!("{}: {e:#}", path.display()), rebuild(&vtext)));
                continue;
            }
        };
        let mut wrong = Vec::new();
        match plugin.version {
            Some(v) if v == number => {}
            Some(v) => wrong.push(format!("built for Slurm {} (plugin_version), but slurmctld is {vtext}: slurmctld refuses it and exits", version_text(v))),
            None => wrong.push("has no plugin_version".to_owned()),
        }
        if plugin.plugin_type.as_deref() != Some(&format!("{kind}/allot")) {
            wrong.push(format!("its plugin_type is {:?}, not {kind}/allot", plugin.plugin_type.as_deref().unwrap_or("(none)")));
        }
        let missing: Vec<&str> = required_symbols(kind, (a, b)).into_iter().filter(|s| !plugin.symbols.contains(*s)).collect();
        if !missing.is_empty() {
            wrong.push(format!("lacks what Slurm {a}.{b:02}'s loader looks up: {}", missing.join(", ")));
        }
        if wrong.is_empty() {
            f.push(ok(format!("{}: built for Slurm {vtext}, every symbol its loader needs", path.display())));
        } else {
            f.push(problem(format!("{}: {}", path.display(), wrong.join("; ")), rebuild(&vtext)));
        }
        f.extend(file_permissions(&path, "plugin"));
    }

    // allot.conf and its ledger.
    let conf = slurm_conf.parent().unwrap_or(Path::new("/etc/slurm")).join("allot.conf");
    let ledger = match std::fs::read_to_string(&conf) {
        Ok(text) => match allot_ledger::Location::from_conf(conf_value(&text, "LedgerPath").as_deref(), conf_value(&text, "LedgerUrl").as_deref()) {
            Ok(Some(location @ allot_ledger::Location::Server(_))) => {
                f.push(ok(format!("{}: LedgerUrl={location}", conf.display())));
                f.extend(server_ledger_checks(&location, running));
                f.extend(last_good_check(running));
                None
            }
            Ok(Some(allot_ledger::Location::File(p))) => {
                f.push(ok(format!("{}: LedgerPath={}", conf.display(), p.display())));
                Some(p)
            }
            Ok(None) => {
                f.push(ok(format!("{}: no LedgerPath, the default {}", conf.display(), allot_ledger::DEFAULT_LEDGER_PATH)));
                Some(PathBuf::from(allot_ledger::DEFAULT_LEDGER_PATH))
            }
            Err(e) => {
                f.push(problem(format!("{}: {e}", conf.display()), "LedgerPath=/absolute/path.db (SQLite) or LedgerUrl=mysql://USER@HOST/DATABASE?password_file=... (allot's book, \"A ledger on a database server\")"));
                None
            }
        },
        Err(e) => {
            f.push(problem(format!("cannot read {} ({e})", conf.display()), "install allot.conf beside slurm.conf (conf/allot.conf is the example)"));
            None
        }
    };
    if let Some(ledger) = ledger {
        f.extend(ledger_checks(&ledger, running));
        f.extend(last_good_check(running));
    }
    if let Some(small) = std::fs::read_to_string(&conf).ok().and_then(|text| conf_value(&text, "SmallJobPartition")).filter(|s| !s.is_empty()) {
        f.extend(small_job_partition_check(&small, running, slurm_conf));
    }
    f
}

/// allot.conf's `SmallJobPartition` (shipped: `small`) against the running
/// slurmctld's partitions: without it, nothing is kept for small jobs and
/// job_submit/allot routes nothing (it logs so once).
fn small_job_partition_check(small: &str, running: &SlurmConfig, slurm_conf: &Path) -> Option<Finding> {
    if !running.live {
        return None; // slurmctld does not answer: said above
    }
    let shown = Command::new("scontrol").args(["show", "partition", "-o"]).env("SLURM_CONF", slurm_conf).output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&shown.stdout);
    let nodes_of = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(&format!("PartitionName={name}")))
            .map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("Nodes=")).unwrap_or("(none)").to_owned())
    };
    Some(match nodes_of(small) {
        Some(nodes) => ok(format!("SmallJobPartition={small}: the partition of the nodes kept for small jobs spans {nodes}")),
        None => problem(
            format!("allot.conf's SmallJobPartition={small} names no partition of the running slurmctld: no nodes are kept for small jobs, so debug jobs wait for running jobs' minimum runtimes"),
            format!("in slurm.conf, PartitionName={small} over the whole cluster and one node per 100 left out of the default partition (allot's book, \"Debug jobs under overload\"), then restart slurmctld; or SmallJobPartition= (empty) in allot.conf for none"),
        ),
    })
}

/// A file slurmctld loads or trusts must not be writable by anyone but root.
fn file_permissions(path: &Path, what: &str) -> Option<Finding> {
    let meta = std::fs::metadata(path).ok()?;
    // Its owner, or a group other than root's, could write it too.
    let writable_by_others = meta.uid() != 0 || meta.mode() & 0o002 != 0 || (meta.mode() & 0o020 != 0 && meta.gid() != 0);
    writable_by_others.then(|| {
        problem(
            format!(
                "{}: the {what} file is writable by others (mode {:o}, owner uid {}): anyone who can write it runs code inside slurmctld",
                path.display(),
                meta.mode() & 0o7777,
                meta.uid()
            ),
            format!("chown root: {} && chmod 0644 {}", path.display(), path.display()),
        )
    })
}

/// Filesystems SQLite's locking and WAL do not work on (statfs magic numbers).
/// A server ledger: its password file kept secret, the server answering
/// with this allot's schema.
fn server_ledger_checks(ledger: &allot_ledger::Location, running: &SlurmConfig) -> Vec<Finding> {
    use std::os::unix::fs::MetadataExt;
    let mut f = Vec::new();
    let allot_ledger::Location::Server(server) = ledger else { return f };
    if let Some(file) = server.password_file() {
        match std::fs::metadata(file) {
            Ok(meta) if meta.mode() & 0o077 != 0 => f.push(problem(
                format!("the ledger's password file {} is readable by others (mode {:o})", file.display(), meta.mode() & 0o7777),
                format!("chmod 600 {}", file.display()),
            )),
            Ok(meta) => {
                let slurm_uid =
                    Some(running.get("SlurmUser").unwrap_or("root")).and_then(|u| nix::unistd::User::from_name(u).ok().flatten()).map(|u| u.uid.as_raw());
                if meta.uid() != 0 && Some(meta.uid()) != slurm_uid {
                    f.push(problem(
                        format!("the ledger's password file {} is owned by uid {}, neither root nor the SlurmUser", file.display(), meta.uid()),
                        format!("chown root {}", file.display()),
                    ));
                } else {
                    f.push(ok(format!("the ledger's password file {} is readable by its owner only", file.display())));
                }
            }
            Err(e) => f.push(problem(
                format!("the ledger's password file {}: {e}", file.display()),
                "create it (one line, the password), mode 600, owned by the SlurmUser",
            )),
        }
    }
    match allot_ledger::Ledger::connect_read_only(ledger) {
        Ok(l) => match l.current_budget_version() {
            Ok(Some(v)) => f.push(ok(format!("{ledger}: the server answers; schema {}, budget version {v}", allot_ledger::SCHEMA_VERSION))),
            Ok(None) => {
                f.push(problem(format!("{ledger}: no budget has been synced"), "allot sync budgets.toml (the plugins hold every job until a budget is there)"))
            }
            Err(e) => f.push(problem(format!("{e}"), "see `allot ledger check`")),
        },
        Err(e) => f.push(problem(format!("{e}"), "check the server, the URL's user and database, and the password file; `allot sync` creates the schema")),
    }
    f
}

/// The ledger: there, healthy, writable by the SlurmUser (with its
/// directory: WAL files), not writable by others, not on a network filesystem.
fn ledger_checks(ledger: &Path, running: &SlurmConfig) -> Vec<Finding> {
    let mut f = Vec::new();
    match allot_ledger::health::diagnose(ledger) {
        Ok(h) => match h.budget_version {
            Some(v) => f.push(ok(format!("{}: a healthy ledger, budget version {v}", ledger.display()))),
            None => f.push(problem(
                format!("{}: no budget has been synced", ledger.display()),
                "allot sync budgets.toml (the plugins hold every job until a budget is there)",
            )),
        },
        Err(p) => {
            f.push(problem(p.describe(ledger), format!("see `allot ledger check --ledger {}`", ledger.display())));
            return f;
        }
    }
    // "slurm(64030)" or "root(0)" from scontrol; a name from slurm.conf.
    let user = running.get("SlurmUser").unwrap_or("root");
    let uid = user
        .split_once('(')
        .and_then(|(_, rest)| rest.trim_end_matches(')').parse::<u32>().ok())
        .or_else(|| nix::unistd::User::from_name(user).ok().flatten().map(|u| u.uid.as_raw()));
    let dir = ledger.parent().unwrap_or(Path::new("/"));
    if let (Some(uid), Ok(meta), Ok(dmeta)) = (uid, std::fs::metadata(ledger), std::fs::metadata(dir)) {
        let may_write = |m: &std::fs::Metadata| uid == 0 || m.uid() == uid && m.mode() & 0o200 != 0;
        if may_write(&meta) && may_write(&dmeta) {
            f.push(ok(format!("the SlurmUser ({user}) may write the ledger and its directory (WAL files)")));
        } else {
            f.push(problem(
                format!("the SlurmUser ({user}) cannot write {} or its directory {}: the priority plugin cannot record runs", ledger.display(), dir.display()),
                format!("chown {uid} {} {} (allot sync creates the ledger owned by the SlurmUser when run as root)", dir.display(), ledger.display()),
            ));
        }
        if meta.mode() & 0o002 != 0 || dmeta.mode() & 0o002 != 0 && dmeta.mode() & 0o1000 == 0 {
            f.push(problem(
                format!("{} or its directory is writable by everyone: anyone could replace the budget and the usage", ledger.display()),
                format!("chmod o-w {} {}", dir.display(), ledger.display()),
            ));
        }
    }
    if let Some(name) = allot_ledger::health::network_filesystem(dir) {
        f.push(problem(
            format!(
                "{} is on {name}, a network filesystem: SQLite's locks and write-ahead log do not work there, and the ledger would be corrupted",
                dir.display()
            ),
            "keep LedgerPath on the controller's local disk, or use a server ledger (LedgerUrl=mysql://...)",
        ));
    }
    f
}

/// The copy of the budget and usage that priority/allot keeps in
/// StateSaveLocation, which a slurmctld that starts without a readable ledger
/// decides from (plugin/slurm/src/last_good.rs writes it).
fn last_good_check(running: &SlurmConfig) -> Option<Finding> {
    let dir = running.get("StateSaveLocation")?;
    let path = Path::new(dir.trim()).join("allot-last-good.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(ok(format!(
                "no last good copy at {} yet: priority/allot writes it after its first recompute with a budget; until then a slurmctld started without a readable ledger refuses every job",
                path.display()
            )))
        }
        Err(e) => return Some(problem(format!("cannot read the last good copy {}: {e}", path.display()), "let the SlurmUser read and write StateSaveLocation")),
    };
    let copy: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Some(problem(
                format!("the last good copy {} cannot be read ({e})", path.display()),
                format!("remove {}: priority/allot writes a new one within a recompute period", path.display()),
            ))
        }
    };
    let age = copy["written_at"].as_i64().map(|t| crate::now() - t);
    Some(ok(format!(
        "last good copy {}: budget version {}, written {} s ago (what a slurmctld started without a readable ledger decides from)",
        path.display(),
        copy["budget_version"].as_i64().unwrap_or(0),
        age.unwrap_or(0)
    )))
}

/// The running Slurm: `scontrol show config`, or, when slurmctld does not
/// answer, slurm.conf and `slurmctld -V`; plus a finding that says which.
pub fn running_config(slurm_conf: &Path) -> (SlurmConfig, Vec<Finding>) {
    let mut notes = Vec::new();
    let shown = Command::new("scontrol").args(["show", "config"]).env("SLURM_CONF", slurm_conf).output();
    if let Ok(out) = &shown {
        if out.status.success() {
            let mut c = parse_show_config(&String::from_utf8_lossy(&out.stdout));
            c.source = "the running slurmctld (scontrol show config)".to_owned();
            c.live = true;
            if c.version.is_some() {
                return (c, notes);
            }
        }
    }
    let why = match shown {
        Ok(out) => String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no answer").to_owned(),
        Err(e) => format!("scontrol: {e}"),
    };
    let mut c = match read_slurm_conf(slurm_conf) {
        Ok(c) => c,
        Err(e) => {
            notes.push(problem(format!("{e:#}"), "pass --slurm-conf PATH (or set SLURM_CONF)"));
            return (SlurmConfig::default(), notes);
        }
    };
    let v = Command::new("slurmctld").arg("-V").output().ok().filter(|o| o.status.success());
    c.version = v.and_then(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(1).map(str::to_owned));
    notes.push(problem(
        format!("slurmctld does not answer ({why}): checked {} and the installed `slurmctld -V` instead", slurm_conf.display()),
        "start slurmctld and run allot doctor again to check what it runs",
    ));
    (c, notes)
}

/// `allot doctor`: prints every finding; Err (exit 1) if any is a problem.
pub fn run(slurm_conf: &Path) -> anyhow::Result<()> {
    let (running, mut findings) = running_config(slurm_conf);
    findings.extend(check(&running, slurm_conf));
    let mut out = String::new();
    let v = running.version.as_deref().unwrap_or("unknown");
    writeln!(
        out,
        "allot doctor: Slurm {v}, as told by {}; slurm.conf {}",
        if running.source.is_empty() { "nobody" } else { &running.source },
        slurm_conf.display()
    )
    .unwrap();
    for x in &findings {
        writeln!(out, "  {:8} {}", if x.ok { "ok" } else { "PROBLEM" }, x.what).unwrap();
        if let Some(fix) = &x.fix {
            writeln!(out, "  {:8} fix: {fix}", "").unwrap();
        }
    }
    let problems = findings.iter().filter(|x| !x.ok).count();
    print!("{out}");
    if problems == 0 {
        println!("verdict: ok: allot's plugins match this slurmctld ({v}) and its configuration");
        Ok(())
    } else {
        anyhow::bail!("{problems} problem(s) found (each with its fix above)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaders_changed_at_25_05_and_25_11() {
        assert!(required_symbols("preempt", (24, 11)).contains(&"preempt_p_get_data"));
        assert!(!required_symbols("preempt", (25, 5)).contains(&"preempt_p_get_data"));
        assert!(required_symbols("preempt", (26, 5)).contains(&"preempt_p_get_mode"));
        assert!(required_symbols("jobcomp", (22, 5)).contains(&"jobcomp_p_log_record"));
        assert!(required_symbols("jobcomp", (25, 11)).contains(&"jobcomp_p_record_job_start"));
        assert!(required_symbols("priority", (25, 5)).contains(&"priority_p_calc_fs_factor"));
        assert!(!required_symbols("priority", (25, 11)).contains(&"priority_p_calc_fs_factor"));
        assert!(!required_symbols("priority", (22, 5)).contains(&"priority_p_thread_start"));
    }

    #[test]
    fn show_config_and_slurm_conf_are_read() {
        let c = parse_show_config("Configuration data as of 2026-12-03T10:00:00\nPluginDir               = /a:/b\nSLURM_VERSION           = 25.11.7\nSlurmUser               = slurm(64030)\n");
        assert_eq!((c.version.as_deref(), c.get("plugindir")), (Some("25.11.7"), Some("/a:/b")));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("extra.conf"), "PreemptType=preempt/allot # the contract\n").unwrap();
        std::fs::write(dir.path().join("slurm.conf"), "SlurmUser=slurm\nInclude extra.conf\nNodeName=n1 CPUs=8\n").unwrap();
        let c = read_slurm_conf(&dir.path().join("slurm.conf")).unwrap();
        assert_eq!((c.get("PreemptType"), c.get("slurmuser")), (Some("preempt/allot"), Some("slurm")));
        assert_eq!(parse_version("26.05.3"), Some((26, 5, 3)));
        assert_eq!(version_text(0x19_0b_07), "25.11.7");
    }

    #[test]
    fn a_file_that_is_no_plugin_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("priority_allot.so");
        std::fs::write(&p, b"not an ELF").unwrap();
        let e = read_plugin(&p).unwrap_err();
        assert!(format!("{e:#}").contains("is not an ELF shared object"), "{e:#}");
    }

    /// The test binary itself is an ELF: its symbols are read, and a plugin
    /// made of it fails every check with the fix.
    #[test]
    fn a_foreign_elf_fails_every_plugin_check() {
        let me = std::env::current_exe().unwrap();
        let file = read_plugin(&me).unwrap();
        assert!(file.version.is_none());
        let dir = tempfile::tempdir().unwrap();
        for (kind, _) in PLUGINS {
            std::fs::copy(&me, dir.path().join(format!("{kind}_allot.so"))).unwrap();
        }
        let running = SlurmConfig {
            values: [("PluginDir", dir.path().to_str().unwrap()), ("PriorityType", "priority/basic"), ("PreemptMode", "REQUEUE")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            source: "test".into(),
            version: Some("25.11.7".into()),
            live: false,
        };
        let findings = check(&running, &dir.path().join("slurm.conf"));
        let bad: Vec<&Finding> = findings.iter().filter(|f| !f.ok).collect();
        assert!(bad.iter().any(|f| f.what.contains("PriorityType is 'priority/basic'")), "{findings:#?}");
        for (kind, _) in PLUGINS {
            let f = bad.iter().find(|f| f.what.contains(&format!("{kind}_allot.so"))).unwrap_or_else(|| panic!("{kind}: {findings:#?}"));
            assert!(f.what.contains("has no plugin_version") && f.what.contains("lacks what Slurm 25.11's loader looks up"), "{f:?}");
            assert!(f.fix.as_deref().unwrap().contains("Slurm 25.11.7"), "{f:?}");
        }
        assert!(bad.iter().any(|f| f.what.contains("allot.conf")), "{findings:#?}");
    }
}
