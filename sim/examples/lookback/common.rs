//! Shared by the lookback study's examples (`lookback_table`, `lookback_probe`):
//! the `steady` workload and `delivered_shares` of tests/invariants.rs, and
//! the two budgets of its convergence test.
#![allow(dead_code)]
use allot::budget::BudgetTree;
use allot::contract::PriorityLevel;
use allot_sim::{ClusterSpec, Job, Simulation, Workload};

pub const H: i64 = 3600;
pub const DAY: i64 = 86_400;

pub const FLAT: &str = "[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=2\naccounts=[\"b\"]\n[budget.c]\nshare=3\naccounts=[\"c\"]\n[budget.d]\nshare=4\naccounts=[\"d\"]\n";
pub const TWO_LEVEL: &str = "[budget]\n[budget.x]\nshare=3\n[budget.x.p]\nshare=2\naccounts=[\"p\"]\n[budget.x.q]\nshare=1\naccounts=[\"q\"]\n[budget.y]\nshare=2\n[budget.y.r]\nshare=1\naccounts=[\"r\"]\n[budget.y.s]\nshare=1\naccounts=[\"s\"]\n";

/// `steady` of tests/invariants.rs, verbatim.
pub fn steady(tree: &BudgetTree, cluster: ClusterSpec, days: i64) -> Workload {
    let mut jobs = Vec::new();
    let teams: Vec<String> = tree.leaves.iter().map(|&id| tree.node(id).accounts[0].clone()).collect();
    for (t, _) in teams.iter().enumerate() {
        let share = tree.leaf_node(t as u32).effective_share;
        let gpus_wanted = 2.0 * share * cluster.capacity() as f64;
        let mean_job = 1.5 * 2.0 * H as f64;
        let interval = (mean_job / gpus_wanted).round() as i64;
        let mut k = 0i64;
        while k * interval < days * DAY {
            jobs.push(Job {
                job_id: 0,
                submit: k * interval,
                gpus: 1 + (k % 2) as u32,
                runtime: H + (k * 7919 % 3) * H,
                team: t as u32,
                user: None,
                min_runtime: Some(H),
                resumable: true,
                priority: PriorityLevel::Normal,
                kind: 0,
            });
            k += 1;
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.team));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    Workload::from_parts(jobs, teams, vec!["steady".into()])
}

/// `delivered_shares` of tests/invariants.rs, verbatim.
pub fn delivered_shares(sim: &Simulation, leaves: usize, from: i64, to: i64) -> Vec<f64> {
    let mut per = vec![0.0; leaves];
    for (l, log) in sim.outcome.delivered_log.iter().enumerate() {
        let mut level = 0i64;
        let mut last = from;
        for &(t, d) in log {
            let (a, b) = (last.max(from), t.min(to));
            if b > a {
                per[l] += (level * (b - a)) as f64;
            }
            level += d;
            last = t;
        }
        if to > last.max(from) {
            per[l] += (level * (to - last.max(from))) as f64;
        }
    }
    let total: f64 = per.iter().sum();
    per.iter().map(|x| x / total).collect()
}

pub fn parse_lookback(s: &str) -> i64 {
    allot::duration::parse_duration(s).unwrap_or_else(|e| panic!("lookback {s}: {e}"))
}


/// A job shape for [`steady_shaped`]: the k-th job of a team takes
/// `gpus[k % len]` GPUs and runs `runtimes[k * 7919 % len]`.
#[derive(Debug, Clone)]
pub struct Shape {
    pub gpus: Vec<u32>,
    pub runtimes: Vec<i64>,
    /// `None`: min_runtime = the runtime (never preemptible).
    pub min_runtime: Option<i64>,
    /// Demand as a multiple of the team's share.
    pub load: f64,
    /// 0: `steady`'s jobs exactly; otherwise each team's submissions and
    /// job mix are shifted by an amount drawn from this number.
    pub seed: u64,
}

impl Shape {
    /// The shape of `steady`: 1-2 GPUs, 1-3 h, min_runtime 1h, twice the share.
    pub fn steady() -> Shape {
        Shape { gpus: vec![1, 2], runtimes: vec![H, 2 * H, 3 * H], min_runtime: Some(H), load: 2.0, seed: 0 }
    }
    pub fn mean_job(&self) -> f64 {
        let g = self.gpus.iter().map(|&g| g as f64).sum::<f64>() / self.gpus.len() as f64;
        let r = self.runtimes.iter().map(|&r| r as f64).sum::<f64>() / self.runtimes.len() as f64;
        g * r
    }
}

/// `steady` with another job shape (`Shape::steady()` gives `steady`'s jobs).
pub fn steady_shaped(tree: &BudgetTree, cluster: ClusterSpec, days: i64, shape: &Shape) -> Workload {
    let mut jobs = Vec::new();
    let teams: Vec<String> = tree.leaves.iter().map(|&id| tree.node(id).accounts[0].clone()).collect();
    let mean_job = shape.mean_job();
    for (t, _) in teams.iter().enumerate() {
        let share = tree.leaf_node(t as u32).effective_share;
        let gpus_wanted = shape.load * share * cluster.capacity() as f64;
        let interval = (mean_job / gpus_wanted).round() as i64;
        // seed 0: no shift (steady's jobs).
        let mix = (shape.seed as i64).wrapping_mul(2_654_435_761).wrapping_mul(t as i64 + 1).rem_euclid(1 << 20);
        let offset = if shape.seed == 0 { 0 } else { mix % interval };
        let mut k = 0i64;
        while offset + k * interval < days * DAY {
            let kk = k + mix;
            let runtime = shape.runtimes[(kk * 7919) as usize % shape.runtimes.len()];
            jobs.push(Job {
                job_id: 0,
                submit: offset + k * interval,
                gpus: shape.gpus[kk as usize % shape.gpus.len()],
                runtime,
                team: t as u32,
                user: None,
                min_runtime: Some(shape.min_runtime.unwrap_or(runtime)),
                resumable: true,
                priority: PriorityLevel::Normal,
                kind: 0,
            });
            k += 1;
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.team));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.job_id = i as u32;
    }
    Workload::from_parts(jobs, teams, vec!["steady".into()])
}
