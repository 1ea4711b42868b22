//! `allot report`: the live cluster's fairness figures, from the ledger.
//!
//! The figures are the simulator's (`allot simulate --json`), computed by
//! the same code (`allot::owed`: hourly buckets, owed by weighted
//! water-filling down the tree; `allot_sim::metrics`: nearest-rank
//! percentiles) from what the
//! plugins recorded instead of from a simulated run:
//!
//! - **span**: `[now - since, now)`, starting later if the ledger's demand
//!   records start later (before them, owed is unknown).
//! - **demand** of a leaf: the GPUs of its jobs pending (not held) or
//!   running, as the priority plugin sampled them at each recompute (a step
//!   that holds until the next change). **owed**: each hour, the cluster's
//!   GPUs shared down the tree by share, each node capped at its subtree's
//!   demand, the surplus to siblings still wanting; a node is owed what its
//!   subtree is. **owed allocated first**: the same, as the contract owes
//!   it: each hour the allocated demand (`min_runtime` > 0) is owed the
//!   cluster first, the unallocated demand (free, preemptible by any
//!   allocated job) only what allocated demand left.
//! - **delivered**: GPU-seconds the runs held in the span, allocated or not;
//!   **charged**: the allocated part; **unallocated**: the rest.
//! - **occupancy**: delivered by every run (outside the tree too) over the
//!   cluster's GPU-seconds in the span; **unallocated_fraction**: the
//!   unallocated part of all delivered time.
//! - **wait** of a job submitted in the span: its first start minus its
//!   submission; a job still waiting counts with its wait so far (a lower
//!   bound); one that left the queue without starting (cancelled) is not
//!   counted. **kind**: `unallocated` (`min_runtime=0`), `debug` (a small
//!   job: at most `small_job_gpus` GPUs and a minimum runtime of at most
//!   `small_job_min_runtime`, the budget's settings), else `training`.
//! - **preemptions**: the plugin's preemption events in the span;
//!   **gpu_hours_lost_to_preemption**: the preempted runs of jobs that are
//!   not resumable (a resumable job resumes from its checkpoint, as the
//!   simulator assumes by default).

use allot_ledger::Location;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use allot::budget::BudgetTree;
use allot::contract::{Contract, PriorityLevel};
use allot::duration::{format_duration, parse_duration};
use allot::owed::{bucketed, hourly, owed_by_node, owed_by_node_allocated_first, owed_by_node_and_bucket};
use allot::preempt::{PreemptRules, WaitingJob};
use allot_ledger::Ledger;
use allot_sim::metrics::{human, percentile, round3, round6, size_class, wait_stats, WaitStats, SIZE_CLASSES};
use allot_sim::plot::{self, Buckets, SharePanel};
use anyhow::{anyhow, Context};
use serde::Serialize;

const HOUR: f64 = 3600.0;

/// One node of the budget tree (inner nodes sum their subtree).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeStats {
    /// The node's path; `""` is the root (the whole cluster).
    pub path: String,
    pub is_leaf: bool,
    pub share: f64,
    pub effective_share: f64,
    pub demand_gpu_hours: f64,
    pub owed_gpu_hours: f64,
    pub delivered_gpu_hours: f64,
    /// `null` when nothing was owed.
    pub delivered_over_owed: Option<f64>,
    /// Owed allocated work first, free work only what allocated work left
    /// (`allot::owed::owed_by_node_allocated_first`).
    pub owed_allocated_first_gpu_hours: f64,
    /// `null` when nothing was owed that way.
    pub delivered_over_owed_allocated_first: Option<f64>,
    pub charged_gpu_hours: f64,
    pub unallocated_gpu_hours: f64,
    /// Jobs submitted in the span, and their wait percentiles.
    pub jobs: usize,
    pub wait_p50_s: i64,
    pub wait_p90_s: i64,
}

/// The live cluster's report over one span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    pub ledger: String,
    pub budget_version: i64,
    /// What the budget shares: `GPU`, or `CPU` (`charge = "cpus"`); every
    /// GPU figure below is then in CPUs.
    pub unit: String,
    pub gpus: u32,
    pub from: i64,
    pub to: i64,
    pub span_seconds: i64,
    pub days: f64,
    pub jobs: usize,
    pub jobs_started: usize,
    pub jobs_completed: usize,
    pub jobs_waiting: usize,
    /// Left the queue without ever starting (cancelled while pending).
    pub jobs_left_without_starting: usize,
    pub wait_p50_s: i64,
    pub wait_p90_s: i64,
    pub wait_p99_s: i64,
    pub by_kind: BTreeMap<String, WaitStats>,
    pub by_size: BTreeMap<String, WaitStats>,
    pub preemptions: usize,
    pub gpu_hours_lost_to_preemption: f64,
    pub preemptions_of_unallocated: usize,
    pub occupancy: f64,
    pub unallocated_fraction: f64,
    pub max_gpus_in_use: u32,
    pub gpu_seconds_delivered: i64,
    /// Delivered to jobs outside the current budget tree.
    pub gpu_hours_outside_tree: f64,
    /// Every node of the tree, parents before children.
    pub nodes: Vec<NodeStats>,
    /// Of the leaves that wanted GPUs in the span, the share delivered at
    /// least 95% of what they were owed.
    pub teams_at_95pct_of_owed: f64,
    /// The same, owed allocated work first (a budget owed nothing that way
    /// counts as at 95%).
    pub teams_at_95pct_of_owed_allocated_first: f64,
    pub warnings: Vec<String>,
}

/// What kind of job a contract makes it (see the module's definitions).
pub fn job_kind(rules: &PreemptRules, leaf: Option<u32>, min_runtime: i64, gpus: u32) -> &'static str {
    let contract = Contract { min_runtime, priority: PriorityLevel::default() };
    if !contract.is_allocated() {
        "unallocated"
    } else if rules.is_small(&WaitingJob { leaf, contract, gpus, queued_since: None }) {
        "debug"
    } else {
        "training"
    }
}

/// Per-job facts gathered for waits and preemptions.
struct JobFacts {
    kind: &'static str,
    size: &'static str,
    resumable: bool,
    allocated: bool,
}

impl JobFacts {
    fn of(c: &allot_ledger::ContractRow, tree: &BudgetTree, rules: &PreemptRules) -> JobFacts {
        let leaf = c.leaf.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
        let gpus = c.gpus.unwrap_or(0);
        JobFacts { kind: job_kind(rules, leaf, c.min_runtime, gpus), size: size_class(gpus), resumable: c.resumable, allocated: c.min_runtime > 0 }
    }
}

/// Per budget leaf of the current tree, (time, change of GPUs) of its demand
/// and of the GPUs its runs held, over the report's span: what the pictures
/// draw.
pub struct Timelines {
    pub tree: BudgetTree,
    pub demand: Vec<Vec<(i64, i64)>>,
    pub held: Vec<Vec<(i64, i64)>>,
}

/// Computes the report of the span `[now - since, now)`.
pub fn compute(l: &Ledger, since: i64, now: i64) -> anyhow::Result<ClusterReport> {
    compute_with_timelines(l, since, now).map(|(report, _)| report)
}

/// The report, and the timelines it was computed from.
pub fn compute_with_timelines(l: &Ledger, since: i64, now: i64) -> anyhow::Result<(ClusterReport, Timelines)> {
    let v = l.current_budget()?.ok_or_else(|| anyhow!("no budget has been synced into {} yet", l.path()))?;
    // As the cluster read shares its GPUs (the lab: as written).
    let tree = v.tree().map_err(|e| anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?.for_cluster(l.cluster());
    let capacity = match (tree.settings.gpus, l.usage_snapshot()?) {
        (Some(g), _) => g,
        (None, Some(s)) => s.capacity_gpus,
        (None, None) => return Err(anyhow!("the budget gives no GPU count and the plugins have not counted them yet")),
    };
    let leaf_of = |path: Option<&str>| path.and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
    // A run: the leaf it was recorded under, else its account's now (as the plugins charge it).
    let run_leaf = |r: &allot_ledger::RunRow| tree.charged_leaf_of_run(r.leaf.as_deref(), r.account.as_deref());
    let mut warnings = Vec::new();

    // The span, and each leaf's demand as a step log.
    let asked_from = now - since;
    let demand_rows = l.demand_since(asked_from).context("reading demand")?;
    let from = match demand_rows.iter().map(|d| d.at).min() {
        Some(first) if first > asked_from => {
            warnings.push(format!("the ledger's demand records start at {}: the report starts there", crate::format_time(first)));
            first.min(now)
        }
        Some(_) => asked_from,
        None => {
            warnings.push("the ledger has no demand records (the priority plugin writes them at each recompute): nothing is owed".to_owned());
            asked_from
        }
    };
    let to = now.max(from + 1);
    let leaves = tree.leaves.len();
    let mut demand_log: Vec<Vec<(i64, i64)>> = vec![Vec::new(); leaves];
    let mut free_log: Vec<Vec<(i64, i64)>> = vec![Vec::new(); leaves];
    let mut level: HashMap<&str, (i64, i64)> = HashMap::new();
    for d in &demand_rows {
        let (total, free) = (d.total() as i64, (d.pending_unallocated + d.running_unallocated) as i64);
        let prev = level.insert(d.leaf.as_str(), (total, free)).unwrap_or((0, 0));
        if let Some(leaf) = leaf_of(Some(&d.leaf)) {
            demand_log[leaf as usize].push((d.at, total - prev.0));
            free_log[leaf as usize].push((d.at, free - prev.1));
        }
    }
    let demand: Vec<Vec<f64>> = demand_log.iter().map(|log| hourly(log, from, to)).collect();
    let owed = owed_by_node(&tree, &demand, capacity, from, to);
    let free: Vec<Vec<f64>> = free_log.iter().map(|log| hourly(log, from, to)).collect();
    let owed_allocated_first = owed_by_node_allocated_first(&tree, &demand, &free, capacity, from, to);

    // Runs: delivered, charged and unallocated per leaf, in the span.
    // Jobs are keyed by (cluster, job id): a lab's clusters reuse job ids.
    let runs = l.runs_since_by_cluster(from).context("reading runs")?;
    let (mut delivered, mut charged, mut unallocated) = (vec![0i64; leaves], vec![0i64; leaves], vec![0i64; leaves]);
    let (mut total, mut total_unallocated, mut outside) = (0i64, 0i64, 0i64);
    let mut steps: Vec<(i64, i64)> = Vec::new();
    let mut held_log: Vec<Vec<(i64, i64)>> = vec![Vec::new(); leaves];
    let mut first_start: HashMap<(&str, u32), i64> = HashMap::new();
    let mut last_run: HashMap<(&str, u32), (i64, Option<&str>)> = HashMap::new();
    let mut runs_of: HashMap<(&str, u32), Vec<&allot_ledger::RunRow>> = HashMap::new();
    for (cluster, r) in &runs {
        let job = (cluster.as_str(), r.job_id);
        runs_of.entry(job).or_default().push(r);
        let e = first_start.entry(job).or_insert(r.run_start);
        *e = (*e).min(r.run_start);
        let last = last_run.entry(job).or_insert((r.run_start, r.end_reason.as_deref()));
        if r.run_start >= last.0 {
            *last = (r.run_start, r.end_reason.as_deref());
        }
        let (a, b) = (r.run_start.max(from), r.run_end.unwrap_or(to).min(to));
        if b <= a {
            continue;
        }
        let gs = r.gpus as i64 * (b - a);
        total += gs;
        steps.push((a, r.gpus as i64));
        steps.push((b, -(r.gpus as i64)));
        if !r.allocated {
            total_unallocated += gs;
        }
        match run_leaf(r) {
            Some(leaf) => {
                let leaf = leaf as usize;
                held_log[leaf].extend([(a, r.gpus as i64), (b, -(r.gpus as i64))]);
                delivered[leaf] += gs;
                if r.allocated {
                    charged[leaf] += gs;
                } else {
                    unallocated[leaf] += gs;
                }
            }
            None => outside += gs,
        }
    }
    steps.sort_unstable();
    let (mut in_use, mut max_in_use) = (0i64, 0i64);
    for (_, d) in steps {
        in_use += d;
        max_in_use = max_in_use.max(in_use);
    }

    // Jobs submitted in the span: waits by kind, size and leaf.
    let rules = PreemptRules::from_settings(&tree.settings);
    let mut facts: HashMap<(String, u32), JobFacts> = HashMap::new();
    let (mut waits, mut completed) = (Vec::new(), 0usize);
    let (mut started, mut waiting, mut left) = (0, 0, 0);
    let mut by_kind: BTreeMap<&str, (Vec<i64>, usize)> = BTreeMap::new();
    let mut by_size: BTreeMap<&str, (Vec<i64>, usize)> = BTreeMap::new();
    let mut by_leaf: Vec<Vec<i64>> = vec![Vec::new(); leaves];
    let submitted = l.contracts_submitted_by_cluster(from, to).context("reading contracts")?;
    for (cluster, c, end_time) in &submitted {
        let job = (cluster.as_str(), c.job_id);
        let leaf = leaf_of(c.leaf.as_deref());
        let f = JobFacts::of(c, &tree, &rules);
        let wait = match first_start.get(&job) {
            Some(&s) => {
                started += 1;
                // From the first submission: Slurm moves a requeued job's
                // submit time to the requeue, and a ledger written before
                // the contracts kept the earliest may hold that later one.
                s - c.submit_time.min(s)
            }
            None if end_time.is_some() => {
                left += 1;
                facts.insert((cluster.clone(), c.job_id), f);
                continue;
            }
            None => {
                waiting += 1;
                to - c.submit_time
            }
        };
        let done = end_time.is_some() && last_run.get(&job).is_some_and(|(_, reason)| *reason == Some("completed"));
        completed += usize::from(done);
        waits.push(wait);
        for e in [by_kind.entry(f.kind).or_default(), by_size.entry(f.size).or_default()] {
            e.0.push(wait);
            e.1 += usize::from(done);
        }
        if let Some(leaf) = leaf {
            by_leaf[leaf as usize].push(wait);
        }
        facts.insert((cluster.clone(), c.job_id), f);
    }

    // Preemptions, and the work lost by those that cannot resume.
    let events = l.events_between_by_cluster("preempted", from, to).context("reading events")?;
    let (mut preemptions, mut of_unallocated, mut lost) = (0usize, 0usize, 0i64);
    let mut kind_loss: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    let mut size_loss: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for (cluster, e) in &events {
        if let std::collections::hash_map::Entry::Vacant(slot) = facts.entry((cluster.clone(), e.job_id)) {
            // Submitted before the span.
            if let Some(c) = l.contract_in(cluster, e.job_id)? {
                slot.insert(JobFacts::of(&c, &tree, &rules));
            }
        }
        preemptions += 1;
        let run = runs_of
            .get(&(cluster.as_str(), e.job_id))
            .and_then(|rs| rs.iter().copied().find(|r| r.run_start <= e.at && r.run_end.is_none_or(|end| end >= e.at)));
        let f = facts.get(&(cluster.clone(), e.job_id));
        of_unallocated += usize::from(f.is_some_and(|f| !f.allocated) || run.is_some_and(|r| !r.allocated));
        let run_lost = match (f, run) {
            (Some(f), Some(r)) if !f.resumable => r.gpus as i64 * (r.run_end.unwrap_or(to) - r.run_start),
            _ => 0,
        };
        lost += run_lost;
        if let Some(f) = f {
            for e in [kind_loss.entry(f.kind).or_default(), size_loss.entry(f.size).or_default()] {
                e.0 += 1;
                e.1 += run_lost;
            }
        }
    }

    // The tree: each node sums its subtree's leaves.
    let n = tree.nodes.len();
    let node_sum = |per_leaf: &[i64]| {
        let mut out = vec![0i64; n];
        for (leaf, &node) in tree.leaves.iter().enumerate() {
            for id in tree.path_ids(node) {
                out[id as usize] += per_leaf[leaf];
            }
        }
        out
    };
    let demand_leaf: Vec<i64> = demand.iter().map(|h| h.iter().sum::<f64>() as i64).collect();
    let (node_delivered, node_charged, node_unallocated, node_demand) =
        (node_sum(&delivered), node_sum(&charged), node_sum(&unallocated), node_sum(&demand_leaf));
    let mut node_waits: Vec<Vec<i64>> = vec![Vec::new(); n];
    for (leaf, &node) in tree.leaves.iter().enumerate() {
        for id in tree.path_ids(node) {
            node_waits[id as usize].extend_from_slice(&by_leaf[leaf]);
        }
    }
    let (mut wanting, mut at_95, mut at_95_allocated_first) = (0usize, 0usize, 0usize);
    let mut nodes = Vec::with_capacity(n);
    for (id, node) in tree.nodes.iter().enumerate() {
        let owed_h = owed[id] / HOUR;
        let delivered_h = node_delivered[id] as f64 / HOUR;
        let ratio = (owed_h > 1e-9).then(|| delivered_h / owed_h);
        let owed_first_h = owed_allocated_first[id] / HOUR;
        let ratio_first = (owed_first_h > 1e-9).then(|| delivered_h / owed_first_h);
        if node.leaf.is_some() && node_demand[id] > 0 {
            wanting += 1;
            at_95 += usize::from(ratio.is_some_and(|r| r >= 0.95 - 1e-9));
            // A budget that wanted GPUs only for free work in hours others'
            // allocated work filled is owed nothing this way: it got that.
            at_95_allocated_first += usize::from(ratio_first.is_none_or(|r| r >= 0.95 - 1e-9));
        }
        let w = &mut node_waits[id];
        w.sort_unstable();
        nodes.push(NodeStats {
            path: node.path.clone(),
            is_leaf: node.leaf.is_some(),
            share: node.share,
            effective_share: round6(node.effective_share),
            demand_gpu_hours: round3(node_demand[id] as f64 / HOUR),
            owed_gpu_hours: round3(owed_h),
            delivered_gpu_hours: round3(delivered_h),
            delivered_over_owed: ratio.map(round6),
            owed_allocated_first_gpu_hours: round3(owed_first_h),
            delivered_over_owed_allocated_first: ratio_first.map(round6),
            charged_gpu_hours: round3(node_charged[id] as f64 / HOUR),
            unallocated_gpu_hours: round3(node_unallocated[id] as f64 / HOUR),
            jobs: w.len(),
            wait_p50_s: percentile(w, 50.0),
            wait_p90_s: percentile(w, 90.0),
        });
    }
    let stats = |m: BTreeMap<&str, (Vec<i64>, usize)>, loss: &BTreeMap<&str, (usize, i64)>| -> BTreeMap<String, WaitStats> {
        m.into_iter()
            .map(|(k, (w, c))| {
                let (p, lost) = loss.get(k).copied().unwrap_or_default();
                (k.to_owned(), wait_stats(w, c, p, lost))
            })
            .collect()
    };
    let overall = wait_stats(waits, completed, preemptions, lost);
    let span = (to - from) as f64;
    for log in &mut held_log {
        log.sort_unstable();
    }
    let report = ClusterReport {
        unit: tree.settings.charge.unit().to_owned(),
        ledger: l.path().to_owned(),
        budget_version: v.version,
        gpus: capacity,
        from,
        to,
        span_seconds: to - from,
        days: round3(span / 86400.0),
        jobs: submitted.len(),
        jobs_started: started,
        jobs_completed: completed,
        jobs_waiting: waiting,
        jobs_left_without_starting: left,
        wait_p50_s: overall.wait_p50_s,
        wait_p90_s: overall.wait_p90_s,
        wait_p99_s: overall.wait_p99_s,
        by_kind: stats(by_kind, &kind_loss),
        by_size: stats(by_size, &size_loss),
        preemptions,
        gpu_hours_lost_to_preemption: round3(lost as f64 / HOUR),
        preemptions_of_unallocated: of_unallocated,
        occupancy: round6(total as f64 / (capacity as f64 * span)),
        unallocated_fraction: round6(if total > 0 { total_unallocated as f64 / total as f64 } else { 0.0 }),
        max_gpus_in_use: max_in_use as u32,
        gpu_seconds_delivered: total,
        gpu_hours_outside_tree: round3(outside as f64 / HOUR),
        nodes,
        teams_at_95pct_of_owed: round6(if wanting > 0 { at_95 as f64 / wanting as f64 } else { 1.0 }),
        teams_at_95pct_of_owed_allocated_first: round6(if wanting > 0 { at_95_allocated_first as f64 / wanting as f64 } else { 1.0 }),
        warnings,
    };
    Ok((report, Timelines { tree, demand: demand_log, held: held_log }))
}

/// A bucket for a picture of `span` seconds: about 120 of them, of a round length.
pub fn picture_bucket(span: i64) -> i64 {
    const ROUND: [i64; 9] = [10, 30, 60, 120, 300, 600, 900, 1800, 3600];
    ROUND.into_iter().find(|&b| span / b <= 120).unwrap_or(3600)
}

/// `DIR/shares.png`: each budget leaf's GPUs held over the span against
/// what it was owed and its share; with `under`, that node and every node
/// below it (a budget owner's subtree).
pub fn draw_shares(dir: &Path, font: &plot::Font, report: &ClusterReport, t: &Timelines, under: Option<&str>) -> anyhow::Result<std::path::PathBuf> {
    let tree = &t.tree;
    let nodes: Vec<u32> = match under {
        None => tree.leaves.clone(),
        Some(path) => {
            let top = tree.find(path).ok_or_else(|| {
                anyhow!(
                    "--under {path}: the budget has no such node; its nodes are {}",
                    tree.nodes.iter().filter(|n| !n.path.is_empty()).map(|n| n.path.as_str()).collect::<Vec<_>>().join(", ")
                )
            })?;
            // The node and every node it is an ancestor of, parents first.
            (0..tree.nodes.len() as u32).filter(|&id| tree.path_ids(id).contains(&top)).collect()
        }
    };
    let len = picture_bucket(report.to - report.from);
    let (from, to) = (report.from, report.to);
    let demand: Vec<Vec<f64>> = t.demand.iter().map(|log| bucketed(log, from, to, len)).collect();
    let owed = owed_by_node_and_bucket(tree, &demand, report.gpus, (from, to, len));
    let held_leaf: Vec<Vec<f64>> = t.held.iter().map(|log| bucketed(log, from, to, len)).collect();
    let buckets = held_leaf.first().map_or(1, Vec::len);
    // A node holds what the leaves below it hold.
    let mut held = vec![vec![0.0; buckets]; tree.nodes.len()];
    for (leaf, &node) in tree.leaves.iter().enumerate() {
        for id in tree.path_ids(node) {
            for (h, g) in held[id as usize].iter_mut().zip(&held_leaf[leaf]) {
                *h += g;
            }
        }
    }
    let mean = |v: &[f64]| v.iter().map(|g| g / len as f64).collect::<Vec<f64>>();
    // Of the leaves, only those that wanted or held GPUs: an empty panel
    // per idle budget would bury the others. A subtree is drawn whole.
    let idle = |id: u32| owed[id as usize].iter().all(|&g| g == 0.0) && held[id as usize].iter().all(|&g| g == 0.0);
    let busy: Vec<u32> = nodes.iter().copied().filter(|&id| !idle(id)).collect();
    let quiet = nodes.len() - busy.len();
    let nodes = if under.is_none() && !busy.is_empty() { busy } else { nodes };
    let panels: Vec<SharePanel> = nodes
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let n = tree.node(id);
            let stats = report.nodes.iter().find(|s| s.path == n.path);
            let ratio = match stats.and_then(|s| s.delivered_over_owed) {
                Some(r) => format!("{:.0}% of owed", 100.0 * r),
                None => "owed nothing".into(),
            };
            let name = if n.path.is_empty() { "(cluster)" } else { &n.path };
            SharePanel {
                caption: format!("{name} ({:.1}%): {ratio}", 100.0 * n.effective_share),
                share_gpus: n.effective_share * report.gpus as f64,
                held: mean(&held[id as usize]),
                owed: mean(&owed[id as usize]),
                color: plot::team_color(i, nodes.len()),
            }
        })
        .collect();
    let title = match under {
        None if quiet > 0 => format!("the cluster: GPUs held per budget leaf that wanted any ({quiet} wanted none)"),
        None => "the cluster: GPUs held per budget leaf".to_owned(),
        Some("") => "the cluster: GPUs held per node of the budget tree".to_owned(),
        Some(p) => format!("the cluster: GPUs held per node of {p}"),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("shares.png");
    plot::share_panels(&path, font, &title, Buckets { start: from, end: to, len }, &panels).with_context(|| format!("cannot draw {}", path.display()))?;
    Ok(path)
}

/// The report as text: the cluster's figures, then the tree.
/// [`render`], in the budget's unit: on a budget that shares CPUs, every
/// "GPU" of the text says "CPU".
pub fn render_in_unit(r: &ClusterReport) -> String {
    let text = render(r);
    if r.unit == "GPU" {
        text
    } else {
        text.replace("GPU", &r.unit)
    }
}

pub fn render(r: &ClusterReport) -> String {
    let mut out = String::new();
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let _ = writeln!(
        out,
        "{} to {} ({}, budget version {}, {} GPUs), from {}",
        crate::format_time(r.from),
        crate::format_time(r.to),
        human(r.span_seconds),
        r.budget_version,
        r.gpus,
        r.ledger
    );
    let _ = writeln!(out, "occupancy {}  unallocated {}  most GPUs in use {} of {}", pct(r.occupancy), pct(r.unallocated_fraction), r.max_gpus_in_use, r.gpus);
    let _ = writeln!(
        out,
        "jobs {} (started {}, completed {}, still waiting {}, left without starting {})  wait p50/p90/p99 {} / {} / {}",
        r.jobs,
        r.jobs_started,
        r.jobs_completed,
        r.jobs_waiting,
        r.jobs_left_without_starting,
        human(r.wait_p50_s),
        human(r.wait_p90_s),
        human(r.wait_p99_s)
    );
    let _ = writeln!(
        out,
        "preemptions {} ({} of unallocated jobs), GPU-hours lost {:.2}",
        r.preemptions, r.preemptions_of_unallocated, r.gpu_hours_lost_to_preemption
    );
    let mut groups: Vec<(String, &WaitStats)> = r.by_kind.iter().map(|(k, w)| (k.clone(), w)).collect();
    groups.extend(SIZE_CLASSES.iter().filter_map(|c| r.by_size.get(*c).map(|w| (format!("{c} GPU(s)"), w))));
    for (name, w) in groups {
        let _ = writeln!(
            out,
            "  {name:<12} jobs {:>5} (completed {:>5})  wait p50/p90/p99 {} / {} / {}  preemptions {}",
            w.jobs,
            w.jobs_completed,
            human(w.wait_p50_s),
            human(w.wait_p90_s),
            human(w.wait_p99_s),
            w.preemptions
        );
    }
    let _ = writeln!(
        out,
        "budgets at 95% or more of what they were owed: {} ({} owing allocated work first)",
        pct(r.teams_at_95pct_of_owed),
        pct(r.teams_at_95pct_of_owed_allocated_first)
    );
    out.push('\n');
    let header = ["BUDGET", "SHARE", "DEMAND", "OWED", "DELIVERED", "D/O", "D/O@ALLOC", "CHARGED", "UNALLOCATED", "JOBS", "WAIT P50", "WAIT P90"];
    let mut rows: Vec<[String; 12]> = vec![header.map(str::to_owned)];
    for node in &r.nodes {
        let depth = node.path.matches('/').count() + usize::from(!node.path.is_empty());
        let name =
            if node.path.is_empty() { "(cluster)".to_owned() } else { format!("{}{}", "  ".repeat(depth - 1), node.path.rsplit('/').next().unwrap_or("")) };
        rows.push([
            name,
            format!("{:.1}%", 100.0 * node.effective_share),
            format!("{:.2}", node.demand_gpu_hours),
            format!("{:.2}", node.owed_gpu_hours),
            format!("{:.2}", node.delivered_gpu_hours),
            node.delivered_over_owed.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)),
            node.delivered_over_owed_allocated_first.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x)),
            format!("{:.2}", node.charged_gpu_hours),
            format!("{:.2}", node.unallocated_gpu_hours),
            node.jobs.to_string(),
            if node.jobs > 0 { human(node.wait_p50_s) } else { "-".into() },
            if node.jobs > 0 { human(node.wait_p90_s) } else { "-".into() },
        ]);
    }
    let widths: Vec<usize> = (0..12).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        let cells: Vec<String> =
            row.iter().enumerate().map(|(c, s)| if c == 0 { format!("{s:<w$}", w = widths[c]) } else { format!("{s:>w$}", w = widths[c]) }).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    let _ = writeln!(out, "(GPU-hours; owed: each hour the cluster's GPUs shared down the tree, each budget capped at its demand; D/O = delivered / owed; D/O@ALLOC = delivered / owed allocated work first, free work only what allocated work left)");
    if r.gpu_hours_outside_tree > 0.0 {
        let _ = writeln!(out, "(and {:.2} GPU-hours delivered to jobs outside the current budget tree)", r.gpu_hours_outside_tree);
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// The jobs the ledger recorded in a span, as a simulator workload, with
/// what happened to them (`allot simulate --from-ledger`).
pub struct LedgerWorkload {
    pub workload: allot_sim::workload::Workload,
    /// The budget in force (its TOML, as synced).
    pub budget_toml: String,
    pub budget_version: i64,
    /// What actually happened over the same span.
    pub actual: ClusterReport,
    /// Jobs left out, by reason.
    pub left_out: BTreeMap<&'static str, usize>,
    /// Jobs still running: their runtime is the time they ran so far.
    pub still_running: usize,
}

/// Each job submitted in `[now - since, now)` with its GPUs, its work (the
/// sum of its runs: a requeued resumable job resumes where it stopped), its
/// contract and its account; what the span's report says happened.
pub fn ledger_workload(l: &Ledger, since: i64, now: i64) -> anyhow::Result<LedgerWorkload> {
    let v = l.current_budget()?.ok_or_else(|| anyhow!("no budget has been synced into {} yet", l.path()))?;
    // As the cluster read shares its GPUs (the lab: as written).
    let tree = v.tree().map_err(|e| anyhow!("budget version {} does not validate:\n{}", v.version, e.render("ledger")))?.for_cluster(l.cluster());
    let actual = compute(l, since, now)?;
    let rules = PreemptRules::from_settings(&tree.settings);
    let mut work: HashMap<u32, (i64, bool)> = HashMap::new(); // job -> (seconds run, a run still going)
    for r in l.runs_since(actual.from).context("reading runs")? {
        let e = work.entry(r.job_id).or_default();
        e.0 += r.run_end.unwrap_or(now) - r.run_start;
        e.1 |= r.run_end.is_none();
    }
    let mut w = allot_sim::workload::Workload::default();
    let mut left_out: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut still_running = 0;
    let index = |names: &mut Vec<String>, name: &str| -> u32 {
        match names.iter().position(|n| n == name) {
            Some(i) => i as u32,
            None => {
                names.push(name.to_owned());
                (names.len() - 1) as u32
            }
        }
    };
    for (c, end) in l.contracts_submitted(actual.from, actual.to).context("reading contracts")? {
        let leaf = c.leaf.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf);
        // The account the job charged, or the first of its budget's.
        let account =
            c.account.clone().filter(|a| tree.leaf_of_account(a).is_some()).or_else(|| leaf.and_then(|l| tree.leaf_node(l).accounts.first().cloned()));
        let reason = match (c.gpus, work.get(&c.job_id), &account) {
            (None, _, _) => Some("recorded before schema 3 (no GPU count)"),
            (Some(0), _, _) => Some("asked for no GPU"),
            (_, _, None) => Some("outside the budget tree"),
            (_, None, _) if end.is_some() => Some("left the queue without starting"),
            (_, None, _) => Some("still waiting (runtime unknown)"),
            _ => None,
        };
        if let Some(reason) = reason {
            *left_out.entry(reason).or_default() += 1;
            continue;
        }
        let (ran, running) = work[&c.job_id];
        still_running += usize::from(running);
        let gpus = c.gpus.unwrap_or(0);
        let kind = job_kind(&rules, leaf, c.min_runtime, gpus);
        let team = index(&mut w.teams, account.as_deref().unwrap_or(""));
        let kind = index(&mut w.kinds, kind);
        w.jobs.push(allot_sim::workload::Job {
            job_id: c.job_id,
            submit: c.submit_time,
            gpus,
            runtime: ran.max(1),
            team,
            user: Some(c.user.clone()),
            min_runtime: Some(c.min_runtime),
            resumable: c.resumable,
            priority: PriorityLevel::parse(&c.priority).unwrap_or_default(),
            kind,
        });
    }
    w.jobs.sort_by_key(|j| (j.submit, j.job_id));
    Ok(LedgerWorkload { workload: w, budget_toml: v.toml, budget_version: v.version, actual, left_out, still_running })
}

/// What happened against what the simulator says would have, for the
/// figures both have (same names as `allot simulate`'s table).
pub fn side_by_side(actual: &ClusterReport, reports: &[allot_sim::metrics::Report]) -> String {
    let mut rows: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, a: String, f: &dyn Fn(&allot_sim::metrics::Report) -> String| rows.push((name.to_owned(), a, reports.iter().map(f).collect()));
    row("jobs", actual.jobs_started.to_string(), &|r| r.jobs.to_string());
    row("wait_p50", human(actual.wait_p50_s), &|r| human(r.wait_p50_s));
    row("wait_p90", human(actual.wait_p90_s), &|r| human(r.wait_p90_s));
    row("wait_p99", human(actual.wait_p99_s), &|r| human(r.wait_p99_s));
    let mut kinds: Vec<&String> = actual.by_kind.keys().collect();
    kinds.extend(reports.iter().flat_map(|r| r.by_kind.keys()));
    kinds.sort();
    kinds.dedup();
    for k in kinds {
        let get = |m: &BTreeMap<String, WaitStats>| m.get(k).map_or("-".to_owned(), |w| format!("{} / {}", human(w.wait_p50_s), human(w.wait_p90_s)));
        row(&format!("{k} wait p50/p90"), get(&actual.by_kind), &|r| get(&r.by_kind));
    }
    row("preemptions", actual.preemptions.to_string(), &|r| r.preemptions.to_string());
    row("occupancy", format!("{:.1}%", 100.0 * actual.occupancy), &|r| format!("{:.1}%", 100.0 * r.occupancy));
    row("unallocated_fraction", format!("{:.1}%", 100.0 * actual.unallocated_fraction), &|r| format!("{:.1}%", 100.0 * r.unallocated_fraction));
    row("teams_at_95pct_of_owed", format!("{:.0}%", 100.0 * actual.teams_at_95pct_of_owed), &|r| format!("{:.0}%", 100.0 * r.teams_at_95pct_of_owed));
    row("teams_at_95pct_of_owed_allocated_first", format!("{:.0}%", 100.0 * actual.teams_at_95pct_of_owed_allocated_first), &|r| {
        format!("{:.0}%", 100.0 * r.teams_at_95pct_of_owed_allocated_first)
    });
    let mut out = String::new();
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(6);
    let cols: Vec<String> = reports.iter().map(|r| format!("{} (simulated)", r.policy.name())).collect();
    let _ = write!(out, "{:w0$}  {:>16}", "metric", "actual (ledger)");
    for c in &cols {
        let _ = write!(out, "  {c:>20}");
    }
    out.push('\n');
    for (name, a, sims) in &rows {
        let _ = write!(out, "{name:w0$}  {a:>16}");
        for s in sims {
            let _ = write!(out, "  {s:>20}");
        }
        out.push('\n');
    }
    out
}

/// The queue picture draws at most this many jobs.
pub const QUEUE_PICTURE_ROWS: usize = 40;

/// `DIR/queue.png`: the jobs the ledger has as waiting, in allot's order
/// under the plugins' last ranking, each with its budget's standing level
/// by level (`allot why` for all of them at a glance).
pub fn draw_queue(dir: &Path, font: &plot::Font, l: &Ledger, tree: &BudgetTree) -> anyhow::Result<std::path::PathBuf> {
    let QueueView { rows, more, title } = queue_rows(l, tree)?;
    let rows: Vec<plot::QueueRow> = rows.into_iter().map(|(_, row)| row).collect();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("queue.png");
    plot::queue(&path, font, &title, &rows, more).with_context(|| format!("cannot draw {}", path.display()))?;
    Ok(path)
}

/// The waiting jobs as the queue picture and the page show them.
pub struct QueueView {
    /// At most [`QUEUE_PICTURE_ROWS`], first to start first, with their job ids.
    pub rows: Vec<(u32, plot::QueueRow)>,
    /// How many more jobs wait.
    pub more: usize,
    pub title: String,
}

/// The waiting jobs in allot's order under the plugins' last ranking.
pub fn queue_rows(l: &Ledger, tree: &BudgetTree) -> anyhow::Result<QueueView> {
    use allot::order::{order_jobs, PendingJob};
    let waiting = l.waiting_contracts().context("reading the waiting jobs")?;
    let snapshot = l.ranked_usage(tree)?;
    let ranking = snapshot.as_ref().map(|s| s.ranking(tree));
    let jobs: Vec<(PendingJob, &allot_ledger::ContractRow)> = waiting
        .iter()
        .filter_map(|c| {
            let leaf = c.leaf.as_deref().and_then(|p| tree.find(p)).and_then(|n| tree.node(n).leaf)?;
            let priority = PriorityLevel::parse(&c.priority).unwrap_or_default();
            Some((PendingJob { job_id: c.job_id, leaf, allocated: c.min_runtime > 0, priority, submit_time: c.submit_time }, c))
        })
        .collect();
    let mut rows = Vec::new();
    if let Some(ranking) = &ranking {
        let pending: Vec<PendingJob> = jobs.iter().map(|(p, _)| *p).collect();
        for i in order_jobs(ranking, &pending).into_iter().take(QUEUE_PICTURE_ROWS) {
            let (p, c) = &jobs[i];
            let tier = if p.allocated { format!("{} {}", format_duration(c.min_runtime), c.priority) } else { "unallocated".to_owned() };
            let levels = ranking
                .levels_of(p.leaf)
                .into_iter()
                .map(|node| {
                    let s = ranking.standings[node as usize];
                    let name = tree.node(node).path.rsplit('/').next().unwrap_or("").to_owned();
                    plot::LevelStanding { name, ratio: s.ratio, sibling_rank: s.sibling_rank, siblings: s.siblings }
                })
                .collect();
            rows.push((c.job_id, plot::QueueRow { label: format!("job {} ({}): {} GPUs, {tier}", c.job_id, c.user, c.gpus.unwrap_or(0)), levels }));
        }
    }
    let at = snapshot.map_or("no ranking recorded yet".to_owned(), |s| format!("ranked at {}", crate::format_time(s.computed_at)));
    let more = jobs.len().saturating_sub(rows.len());
    Ok(QueueView { rows, more, title: format!("waiting jobs in allot's order ({at})") })
}

/// `--since D` of `allot report`, `allot serve` and `allot simulate
/// --from-ledger`: the span ending now, 30 days when not given.
pub fn parse_since(since: Option<&str>) -> anyhow::Result<i64> {
    let since = match since {
        Some(s) => parse_duration(s).map_err(|e| anyhow!("--since: {e}"))?,
        None => 30 * 86400,
    };
    if since <= 0 {
        return Err(anyhow!("--since {}: give a span longer than 0", format_duration(since)));
    }
    Ok(since)
}

/// What `allot report` was asked for.
pub struct ReportArgs<'a> {
    pub since: Option<&'a str>,
    pub json: Option<&'a Path>,
    pub plots: Option<&'a Path>,
    pub under: Option<&'a str>,
    pub font: &'a Path,
}

/// `allot report [--since D] [--json FILE] [--plots DIR [--under NODE]]`.
pub fn run(ledger: &Location, cluster: crate::ClusterScope<'_>, args: &ReportArgs<'_>, now: i64) -> anyhow::Result<()> {
    let ReportArgs { since, json, plots, under, font } = *args;
    if under.is_some() && plots.is_none() {
        return Err(anyhow!("--under draws a subtree's pictures: give --plots DIR too"));
    }
    // A missing font fails before any work.
    let font = plots.map(|_| plot::load_font(font)).transpose()?;
    let since = parse_since(since)?;
    let l = crate::open_reader(ledger, cluster, crate::Reads::LabOrCluster, "allot report --cluster NAME")?;
    let (report, timelines) = compute_with_timelines(&l, since, now)?;
    let clusters: Vec<String> = l.clusters()?.into_iter().filter(|c| !c.is_empty()).collect();
    let heading = match l.cluster() {
        Some(c) => format!("cluster {c}\n"),
        None if clusters.len() > 1 => format!("the lab: clusters {} (their GPUs and jobs together; --cluster NAME for one)\n", clusters.join(", ")),
        None => String::new(),
    };
    let shown = || heading.clone() + &render_in_unit(&report);
    match json {
        // `--json -`: the JSON on standard output, instead of the text (so a
        // user under sudo writes it with the shell's, i.e. their own, rights).
        Some(path) if path == Path::new("-") => println!("{}", serde_json::to_string_pretty(&report)?),
        Some(path) => {
            let text = serde_json::to_string_pretty(&report)?;
            std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
            print!("{}", shown());
        }
        None => print!("{}", shown()),
    }
    if let (Some(dir), Some(font)) = (plots, font) {
        let path = draw_shares(dir, &font, &report, &timelines, under)?;
        println!("picture: {}", path.display());
        // The queue is one cluster's, in that cluster's order.
        if l.cluster().is_some() || l.clusters()?.len() <= 1 {
            let path = draw_queue(dir, &font, &l, &timelines.tree)?;
            println!("picture: {}", path.display());
        } else {
            println!("(no queue picture for the lab: each cluster orders its own queue; give --cluster NAME)");
        }
    }
    Ok(())
}
