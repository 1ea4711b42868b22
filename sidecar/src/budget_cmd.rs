//! `allot budget show|set|add|remove`.
//!
//! Edits go to the budget file (the one last synced, or `--file`), keeping
//! its comments and layout, then through the same validate-authorize-sync
//! path as `allot sync`. The file is replaced only after the ledger accepted
//! the new version.

use allot_ledger::Location;
use std::io::Write;
use std::path::{Path, PathBuf};

use allot::budget::NodeId;
use allot_ledger::Ledger;
use anyhow::{anyhow, bail, Context};
use toml_edit::{value, Array, DocumentMut, Item, Table};

use crate::identity::Invocation;
use crate::sync::{report, sync_text};

#[derive(clap::Subcommand)]
pub enum BudgetCommand {
    /// Show the budget tree (or the subtree at NODE) with shares, effective
    /// percentages, owners and, when the plugins have recorded usage, how much
    /// of its allocation each node has used in the window.
    Show {
        /// A node path such as vision/detection.
        node: Option<String>,
        /// Show an older version.
        #[arg(long)]
        version: Option<i64>,
        /// When several clusters share the ledger: the shares and usage of
        /// this one (its Slurm ClusterName). Default: the tree as written,
        /// ranked by the lab's usage.
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// Change fields of a node: share=N, owners=a,b, accounts=x,y, members=u,v, description=TEXT.
    Set {
        node: String,
        #[arg(required = true, value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        /// The budget file to edit (default: the file last synced).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Add a node: allot budget add vision/newteam share=1 accounts=newteam members=u1,u2.
    Add {
        node: String,
        #[arg(required = true, value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Remove a node and everything below it.
    Remove {
        node: String,
        #[arg(long)]
        file: Option<PathBuf>,
    },
}

pub fn run(cmd: BudgetCommand, inv: &Invocation, now: i64) -> anyhow::Result<()> {
    match cmd {
        BudgetCommand::Show { node, version, cluster } => show(&inv.ledger, cluster.as_deref(), node.as_deref(), version),
        BudgetCommand::Set { node, fields, file } => edit(inv, file, now, |doc| set_fields(doc, &node, &fields, false)),
        BudgetCommand::Add { node, fields, file } => edit(inv, file, now, |doc| set_fields(doc, &node, &fields, true)),
        BudgetCommand::Remove { node, file } => edit(inv, file, now, |doc| remove(doc, &node)),
    }
}

fn percent(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

fn show(ledger_path: &Location, cluster: crate::ClusterScope<'_>, node: Option<&str>, version: Option<i64>) -> anyhow::Result<()> {
    let ledger = crate::open_reader(ledger_path, cluster, crate::Reads::LabOrCluster, "allot budget show --cluster NAME")?;
    let v = match version {
        Some(n) => ledger.budget_version(n)?.ok_or_else(|| anyhow!("budget version {n} does not exist"))?,
        None => ledger.current_budget()?.ok_or_else(|| anyhow!("no budget has been synced into {} yet", ledger_path))?,
    };
    let tree = v.tree().map_err(|e| anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?.for_cluster(cluster);
    let start = match node {
        Some(path) => tree.find(path).ok_or_else(|| anyhow!("no node '{path}' in budget version {}", v.version))?,
        None => 0,
    };
    // Usage (by leaf path, so it applies to a newly synced version too), for
    // the current version only: an old version's is not in the ledger.
    let is_current = ledger.current_budget_version()? == Some(v.version);
    let ranking = if is_current { ledger.ranked_usage(&tree)?.map(|s| (s.ranking(&tree), s.computed_at)) } else { None };

    let s = &tree.settings;
    println!("budget version {} synced {} by {} from {}", v.version, crate::format_time(v.synced_at), v.author, v.source);
    println!(
        "cluster: GPUs {}, lookback {}{}, min_runtime cap {}, default min_runtime {}, grace {}, preempt margin {}",
        s.gpus.map(|g| g.to_string()).unwrap_or_else(|| "counted by Slurm".into()),
        allot::duration::format_duration(s.lookback),
        if s.lookahead > 0 { format!(" (running GPUs counted {} ahead)", allot::duration::format_duration(s.lookahead)) } else { String::new() },
        allot::duration::format_duration(s.min_runtime_cap),
        allot::duration::format_duration(s.default_min_runtime),
        allot::duration::format_duration(s.grace),
        s.preempt_margin
    );
    let small = if s.small_job_gpus == 0 {
        "none".to_owned()
    } else {
        format!("at most {} GPUs and min_runtime {}, no margin", s.small_job_gpus, allot::duration::format_duration(s.small_job_min_runtime))
    };
    let long_wait = if s.large_job_wait == 0 {
        "off".to_owned()
    } else {
        format!("no margin after {} under its share", allot::duration::format_duration(s.large_job_wait))
    };
    println!(
        "preemption: within a team by priority {}, smallest victims first {}, unallocated grace {}, small jobs: {small}, large jobs: {long_wait}",
        if s.preempt_within_team { "on" } else { "off" },
        if s.preempt_smallest_first { "on" } else { "off" },
        allot::duration::format_duration(s.unallocated_grace),
    );
    if let Some((_, at)) = &ranking {
        println!("usage: window ending {} (USED = the part of its share used over the window; RANK = fair-share order of leaves)", crate::format_time(*at));
    }
    println!();
    let mut rows: Vec<[String; 6]> =
        vec![["NODE".into(), "SHARE".into(), "CLUSTER".into(), "USED".into(), "RANK".into(), "OWNERS / ACCOUNTS / MEMBERS".into()]];
    let mut stack: Vec<(NodeId, String, bool)> = vec![(start, String::new(), true)];
    let top_depth = tree.node(start).depth;
    while let Some((id, prefix, last)) = stack.pop() {
        let n = tree.node(id);
        let branch = if n.depth == top_depth { String::new() } else { format!("{prefix}{}", if last { "└─ " } else { "├─ " }) };
        let label = if n.path.is_empty() { "(root)".to_owned() } else { n.name.clone() };
        let (used, rank) = match &ranking {
            Some((r, _)) => (r.standings[id as usize].share_used_text(), n.leaf.map(|l| (r.leaf_rank[l as usize] + 1).to_string()).unwrap_or_default()),
            None => (String::new(), String::new()),
        };
        let mut who = n.owners.join(",");
        if n.is_leaf() {
            who = format!("{who} / {} / {}", n.accounts.join(","), n.members.join(","));
        }
        if n.clusters.is_some() || !n.cluster_shares.is_empty() {
            who = format!("{who} [funded {}]", n.funding());
        }
        rows.push([
            format!("{branch}{label}"),
            if n.parent.is_some() { format!("{}", n.share) } else { String::new() },
            percent(n.effective_share),
            used,
            rank,
            who,
        ]);
        let child_prefix = if n.depth == top_depth { String::new() } else { format!("{prefix}{}", if last { "   " } else { "│  " }) };
        for (i, &c) in n.children.iter().enumerate().rev() {
            stack.push((c, child_prefix.clone(), i + 1 == n.children.len()));
        }
    }
    let widths: Vec<usize> = (0..6).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = std::io::stdout().lock();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 1 || c == 2 || c == 3 || c == 4 {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < r.len() {
                    line.push_str(&" ".repeat(pad));
                }
            }
            line.push_str("  ");
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The TOML keys of a node path: `vision/detection` -> ["budget", "vision", "detection"].
fn keys_of(path: &str) -> anyhow::Result<Vec<String>> {
    let norm = path.trim().trim_matches('/').replace('.', "/");
    if norm.is_empty() {
        bail!("name a node below the root, such as vision/detection");
    }
    Ok(std::iter::once("budget".to_owned()).chain(norm.split('/').map(str::to_owned)).collect())
}

fn table_at<'a>(doc: &'a mut DocumentMut, keys: &[String]) -> Option<&'a mut Table> {
    let mut t = doc.as_table_mut();
    for k in keys {
        t = t.get_mut(k)?.as_table_mut()?;
    }
    Some(t)
}

fn list(v: &str) -> Array {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

fn set_fields(doc: &mut DocumentMut, node: &str, fields: &[String], add: bool) -> anyhow::Result<String> {
    let keys = keys_of(node)?;
    let (name, parent_keys) = keys.split_last().expect("keys_of returns at least two keys");
    let exists = table_at(doc, &keys).is_some();
    if add && exists {
        bail!("node '{node}' already exists; use `allot budget set` to change it");
    }
    if !add && !exists {
        bail!("no node '{node}' in the budget file; use `allot budget add` to create it");
    }
    if add {
        // A table without a position is printed right after the table
        // visited before it: its parent's last descendant, where a person
        // would have written it.
        let parent = table_at(doc, parent_keys).ok_or_else(|| anyhow!("no parent node '{}' for '{node}'", parent_keys[1..].join("/")))?;
        parent.insert(name, Item::Table(Table::new()));
    }
    let table = table_at(doc, &keys).expect("exists or was just added");
    let mut summary = Vec::new();
    for field in fields {
        let (k, v) = field.split_once('=').ok_or_else(|| anyhow!("'{field}' is not FIELD=VALUE (fields: share, owners, accounts, members, description)"))?;
        match k {
            "share" => {
                let share: f64 = v.parse().map_err(|_| anyhow!("share={v}: not a number"))?;
                if share.fract() == 0.0 && share.abs() < 1e15 {
                    table["share"] = value(share as i64);
                } else {
                    table["share"] = value(share);
                }
            }
            "owners" | "accounts" | "members" => table[k] = value(list(v)),
            "description" => table["description"] = value(v),
            _ => bail!("unknown field '{k}' (fields: share, owners, accounts, members, description)"),
        }
        summary.push(field.clone());
    }
    Ok(format!("{} {node} {}", if add { "add" } else { "set" }, summary.join(" ")))
}

fn remove(doc: &mut DocumentMut, node: &str) -> anyhow::Result<String> {
    let keys = keys_of(node)?;
    let (name, parent_keys) = keys.split_last().expect("keys_of returns at least two keys");
    let parent = table_at(doc, parent_keys).ok_or_else(|| anyhow!("no node '{node}' in the budget file"))?;
    if parent.remove(name).is_none() {
        bail!("no node '{node}' in the budget file");
    }
    Ok(format!("remove {node}"))
}

/// Applies `change` to the budget file, syncs the result, then replaces the file.
///
/// The file is `--file` (an admin's choice only, under sudo), else the one
/// the ledger records as last synced: under sudo, never a path the sudo
/// user chose.
fn edit(inv: &Invocation, file: Option<PathBuf>, now: i64, change: impl FnOnce(&mut DocumentMut) -> anyhow::Result<String>) -> anyhow::Result<()> {
    let ledger = &inv.ledger;
    let file = match file {
        Some(f) => {
            inv.may_choose("the budget file", "--file", "without it, `allot budget` edits the file last synced into the ledger")?;
            std::path::absolute(&f).with_context(|| format!("cannot resolve {}", f.display()))?
        }
        None => {
            let l = Ledger::connect_read_only(ledger)?;
            let v = l.current_budget()?.ok_or_else(|| anyhow!("no budget synced yet: pass --file FILE.toml"))?;
            let recorded = PathBuf::from(&v.source);
            if !recorded.is_absolute() {
                if inv.sudo {
                    bail!(
                        "the ledger records the budget file as '{}', a relative path, which under sudo would be read from the sudo user's directory; an admin must sync it once by its absolute path (`allot sync /etc/allot/budgets.toml`)",
                        v.source
                    );
                }
                std::path::absolute(&recorded).with_context(|| format!("cannot resolve {}", recorded.display()))?
            } else {
                recorded
            }
        }
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read budget file {} (pass --file)", file.display()))?;
    let mut doc: DocumentMut = text.parse().map_err(|e| anyhow!("{}: invalid TOML: {e}", file.display()))?;
    let what = change(&mut doc)?;
    let new_text = doc.to_string();
    let outcome = sync_text(ledger, &new_text, &file.display().to_string(), &inv.actor, now)?;
    write_atomically(&file, &new_text).with_context(|| format!("the ledger has the new version, but {} could not be rewritten", file.display()))?;
    println!("{what}");
    report(&outcome, ledger);
    Ok(())
}

/// Replaces `path` with `text` via a temporary file and a rename, keeping
/// the file's permissions.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(tmp.path(), meta.permissions())?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
