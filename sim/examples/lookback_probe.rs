//! Instrumented runs of the lookback study: one simulation of the steady
//! workload, and per team, over days 7-21, what the fair-share order saw.
//! Everything is recomputed from the simulation's runs with the policy
//! core's batch sum (`allot::occupancy::usage_in_window`) and
//! `Ranking::compute`, independently of the engine's incremental window.
//!
//! ```sh
//! LB=6h cargo run --release -p allot-sim --example lookback_probe
//! # knobs (environment): LB (lookback), BUDGET=flat|two|shares:1,9 (a flat budget of those shares), MARGIN, RT=1,2,3 (hours),
//! # G=1,2 (GPUs), MINRT=1h|all (all: min_runtime = runtime, never preempted),
//! # LOAD=2, NODES=4, DAYS=21, FROM=7 (measure from that day), SEED=0 (0: steady's jobs), COMPACT=1 (one line), TRACE=team (print that team's ratio every TRACE_STEP s, days 7-7.5),
//! # ALLOT_REACH=slurm (Slurm's own scheduler reach instead of the shipped one)
//! ```
use allot::budget::BudgetTree;
use allot::fairshare::Ranking;
use allot::occupancy::{usage_in_window, Interval};
use allot_sim::{simulate, ClusterSpec, Config, PolicyKind, RunEnd};

#[path = "lookback/common.rs"]
mod common;
use common::*;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn main() {
    let lb = parse_lookback(&env("LB").unwrap_or_else(|| "6h".into()));
    let spec = env("BUDGET");
    let flat_of = |shares: &str| -> String {
        let mut b = String::from("[budget]\n");
        for (i, sh) in shares.split(',').enumerate() {
            b += &format!("[budget.t{i}]\nshare={sh}\naccounts=[\"t{i}\"]\n");
        }
        b
    };
    let budget: String = match spec.as_deref() {
        Some("two") => TWO_LEVEL.into(),
        Some(s) if s.starts_with("shares:") => flat_of(&s["shares:".len()..]),
        _ => FLAT.into(),
    };
    let budget = budget.as_str();
    let tree = BudgetTree::parse(budget).unwrap();
    let mut shape = Shape::steady();
    if let Some(rt) = env("RT") {
        shape.runtimes = rt.split(',').map(|h| (h.parse::<f64>().unwrap() * H as f64) as i64).collect();
    }
    if let Some(g) = env("G") {
        shape.gpus = g.split(',').map(|g| g.parse().unwrap()).collect();
    }
    match env("MINRT").as_deref() {
        None => {}
        Some("all") => shape.min_runtime = None,
        Some(m) => shape.min_runtime = Some(parse_lookback(m)),
    }
    if let Some(l) = env("LOAD") {
        shape.load = l.parse().unwrap();
    }
    let nodes: u32 = env("NODES").map_or(4, |n| n.parse().unwrap());
    let cluster = ClusterSpec { nodes, gpus_per_node: 8 };
    let days: i64 = env("DAYS").map_or(21, |d| d.parse().unwrap());
    if let Some(seed) = env("SEED") {
        shape.seed = seed.parse().unwrap();
    }
    let w = steady_shaped(&tree, cluster, days, &shape);
    let mut cfg = Config::new(cluster, tree.clone(), PolicyKind::Allot);
    // The shipped scheduler reach unless ALLOT_REACH=slurm (Slurm's own, as the
    // study was first measured: docs/src/admin/configuration.md).
    if env("ALLOT_REACH").as_deref() == Some("slurm") {
        cfg.set_reach(allot_sim::Reach::SLURM_DEFAULTS);
    }
    cfg.tree.settings.lookback = lb;
    if let Some(m) = env("MARGIN") {
        cfg.tree.settings.preempt_margin = m.parse().unwrap();
    }
    cfg.horizon = Some(days * DAY);
    let sim = simulate(&w, &cfg, &mut |_| {});
    let leaves = tree.leaves.len();
    let from_day: i64 = env("FROM").map_or(7, |d| d.parse().unwrap());
    let (from, to) = (from_day * DAY, days * DAY);
    let got = delivered_shares(&sim, leaves, from, to);
    if env("COMPACT").is_some() {
        // One line: lookback, then each leaf's delivered minus budget share (points), preemptions.
        let dev: Vec<String> = (0..leaves).map(|l| format!("{:+.2}", 100.0 * (got[l] - tree.leaf_node(l as u32).effective_share))).collect();
        println!("{} {} preemptions {}", allot::duration::format_duration(lb), dev.join(" "), sim.report.preemptions);
        return;
    }
    let out = &sim.outcome;
    let leaf_of = |job: u32| out.prepared.leaf[job as usize].unwrap();
    let intervals: Vec<Interval> =
        out.runs.iter().map(|r| Interval { leaf: leaf_of(r.job), gpus: r.gpus, start: r.start, end: Some(r.end), allocated: r.charged }).collect();
    let capacity = cluster.capacity();
    let alloc: Vec<f64> = (0..leaves).map(|l| tree.leaf_node(l as u32).effective_share * capacity as f64 * lb as f64).collect();
    let ranking_at = |t: i64| {
        let u = usage_in_window(&intervals, leaves, t, lb);
        Ranking::compute(&cfg.tree, &u.charged, capacity, t)
    };
    let leaf_ratio = |r: &Ranking, l: usize| r.standings[tree.leaves[l] as usize].ratio;

    // Time averages, sampled every minute.
    let step = 60;
    let mut ratio_sum = vec![0.0; leaves];
    let mut ratio_sq = vec![0.0; leaves];
    let mut inflight_sum = vec![0.0; leaves];
    let mut rank0 = vec![0usize; leaves];
    let mut samples = 0usize;
    // Samples where some leaf had no usage in the window (ratio 0), and
    // where two leaves' ratios were equal at the order's resolution (a tie
    // that the share, then the name, breaks).
    let (mut zero, mut ties) = (0usize, 0usize);
    let mut t = from;
    while t < to {
        let r = ranking_at(t);
        let keys: Vec<u64> = (0..leaves).map(|l| (leaf_ratio(&r, l) * 1e9).round() as u64).collect();
        zero += usize::from(keys.contains(&0));
        ties += usize::from((0..leaves).any(|x| (x + 1..leaves).any(|y| keys[x] == keys[y])));
        for l in 0..leaves {
            let x = leaf_ratio(&r, l);
            ratio_sum[l] += x;
            ratio_sq[l] += x * x;
        }
        rank0[r.leaves_in_order[0] as usize] += 1;
        // Committed but not yet charged: running GPUs x time to their run's end.
        for iv in &intervals {
            if iv.allocated && iv.start <= t && iv.end.unwrap() > t {
                inflight_sum[iv.leaf as usize] += (iv.gpus as i64 * (iv.end.unwrap() - t)) as f64 / alloc[iv.leaf as usize];
            }
        }
        samples += 1;
        t += step;
    }

    // Grants: every run started in [from, to), decided at its start or,
    // for a preemptor, at its victims' signal.
    let mut signal_of: std::collections::BTreeMap<u32, i64> = std::collections::BTreeMap::new();
    let mut victim = vec![0usize; leaves];
    let mut preemptor = vec![0usize; leaves];
    let mut lost = vec![0.0; leaves];
    let mut pairs = vec![vec![0usize; leaves]; leaves];
    for r in &out.runs {
        if let (RunEnd::Preempted { signal }, Some(by)) = (r.ended, r.preempted_by) {
            if r.end >= from && r.end < to {
                let (v, p) = (leaf_of(r.job) as usize, leaf_of(by) as usize);
                victim[v] += 1;
                preemptor[p] += 1;
                pairs[v][p] += 1;
                lost[v] += (r.lost * r.gpus as i64) as f64 / H as f64;
            }
            let e = signal_of.entry(by).or_insert(signal);
            *e = (*e).max(signal);
        }
    }
    let mut grants = vec![0usize; leaves];
    let mut granted_gpu_h = vec![0.0; leaves];
    let mut excess = vec![0.0; leaves];
    let mut grant_rank0 = vec![0usize; leaves];
    for r in &out.runs {
        if r.start < from || r.start >= to {
            continue;
        }
        let l = leaf_of(r.job) as usize;
        let decided = match signal_of.get(&r.job) {
            Some(&s) if s <= r.start && r.start - s <= cfg.tree.settings.grace => s,
            _ => r.start,
        };
        let rk = ranking_at(decided);
        let min = (0..leaves).map(|m| leaf_ratio(&rk, m)).fold(f64::INFINITY, f64::min);
        grants[l] += 1;
        granted_gpu_h[l] += (r.gpus as i64 * (r.end - r.start)) as f64 / H as f64;
        excess[l] += leaf_ratio(&rk, l) - min;
        grant_rank0[l] += usize::from(rk.leaves_in_order[0] as usize == l);
    }

    println!(
        "lookback {} budget {} shape {:?} margin {} occupancy {:.1}% preemptions {}",
        allot::duration::format_duration(lb),
        spec.as_deref().unwrap_or("flat"),
        shape,
        cfg.tree.settings.preempt_margin,
        100.0 * sim.report.occupancy,
        sim.report.preemptions
    );
    println!("| team | share | delivered | mean ratio | sd ratio | in flight / alloc | first in order | grants | GPU-h/grant | rank 0 at grant | ratio - min at grant | preempted | preempted others | GPU-h lost |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for l in 0..leaves {
        let n = samples as f64;
        let mean = ratio_sum[l] / n;
        let sd = (ratio_sq[l] / n - mean * mean).max(0.0).sqrt();
        println!(
            "| {} | {:.1}% | {:.2}% | {:.3} | {:.3} | {:.3} | {:.1}% | {} | {:.2} | {:.1}% | {:.3} | {} | {} | {:.1} |",
            tree.leaf_node(l as u32).path,
            100.0 * tree.leaf_node(l as u32).effective_share,
            100.0 * got[l],
            mean,
            sd,
            inflight_sum[l] / n,
            100.0 * rank0[l] as f64 / n,
            grants[l],
            granted_gpu_h[l] / grants[l].max(1) as f64,
            100.0 * grant_rank0[l] as f64 / grants[l].max(1) as f64,
            excess[l] / grants[l].max(1) as f64,
            victim[l],
            preemptor[l],
            lost[l]
        );
    }
    println!("preemptions victim (row) by preemptor (column): {pairs:?}");
    println!("samples (every {step} s) with a leaf at zero usage: {zero} of {samples}; with tied leaf ratios: {ties}");

    if let Some(team) = env("TRACE") {
        let l = (0..leaves).find(|&l| tree.leaf_node(l as u32).path == team).expect("TRACE names a leaf");
        let step: i64 = env("TRACE_STEP").map_or(600, |s| s.parse().unwrap());
        let until: i64 = env("TRACE_UNTIL").map_or(from + DAY / 2, |s| from + (s.parse::<f64>().unwrap() * H as f64) as i64);
        let mut t = from;
        println!("t (h from day 7) | ratio of each leaf | running GPUs of {team}");
        while t <= until {
            let r = ranking_at(t);
            let running: u32 = intervals.iter().filter(|iv| iv.leaf as usize == l && iv.start <= t && iv.end.unwrap() > t).map(|iv| iv.gpus).sum();
            let ratios: Vec<String> = (0..leaves).map(|m| format!("{:.3}", leaf_ratio(&r, m))).collect();
            println!("{:6.2} | {} | {running}", (t - from) as f64 / H as f64, ratios.join(" "));
            t += step;
        }
    }
}
