//! What each budget was owed, hour by hour, and the buckets it is counted
//! in: the cluster's GPU-seconds shared down the budget tree by share, each
//! node capped at what its subtree's jobs wanted (weighted water-filling).
//! The simulator's report counts owed with these functions and the live
//! `allot report` with the same by-node ones, so owed means one thing in
//! both. Time is passed in.

use crate::budget::{BudgetTree, NodeId};

const HOUR: i64 = 3600;

/// GPU-seconds per hour bucket of a step function given as (time, change)
/// pairs in time order, over `[start, end)`.
pub fn hourly(log: &[(i64, i64)], start: i64, end: i64) -> Vec<f64> {
    bucketed(log, start, end, HOUR)
}

/// Of the whole hours of `[from, to)` in which a team wanted at least its
/// share (`share_gpus`; `demand` and `held` as the engine logs them, GPU
/// changes over time), how many it wanted it and how many it held less than
/// half of it: (hours wanting, hours below half). A partial last hour is
/// left out.
pub fn starved_hours(demand: &[(i64, i64)], held: &[(i64, i64)], share_gpus: f64, from: i64, to: i64) -> (usize, usize) {
    if share_gpus <= 0.0 || to <= from {
        return (0, 0);
    }
    let full = ((to - from) / HOUR) as usize;
    let share = share_gpus * HOUR as f64;
    let (wanted, got) = (hourly(demand, from, to), hourly(held, from, to));
    let mut out = (0, 0);
    for (d, g) in wanted.iter().zip(&got).take(full) {
        // A hair under the share still counts: GPU-seconds are summed in f64.
        if *d >= share * (1.0 - 1e-9) {
            out.0 += 1;
            out.1 += usize::from(*g < 0.5 * share);
        }
    }
    out
}

/// Like [`hourly`], with buckets of `len` seconds (pictures of short spans).
pub fn bucketed(log: &[(i64, i64)], start: i64, end: i64, len: i64) -> Vec<f64> {
    let len = len.max(1);
    let buckets = ((end - start).max(0) as usize).div_ceil(len as usize).max(1);
    let mut out = vec![0.0; buckets];
    let mut level: i64 = 0;
    let mut t = start;
    let add = |from: i64, to: i64, level: i64, out: &mut Vec<f64>| {
        let mut a = from.max(start);
        let to = to.min(end);
        while a < to {
            let b = ((a - start) / len + 1) * len + start;
            let seg_end = b.min(to);
            out[((a - start) / len) as usize] += (level * (seg_end - a)) as f64;
            a = seg_end;
        }
    };
    for &(at, delta) in log {
        if at > t {
            add(t, at, level, &mut out);
            t = at;
        }
        level += delta;
    }
    add(t, end, level, &mut out);
    out
}

/// Weighted water-filling: shares `amount` among claimants by `weights`,
/// none getting more than its demand; what a capped one leaves goes to the
/// others. Gives min(amount, total demand) in all.
pub fn water_fill(amount: f64, demands: &[f64], weights: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; demands.len()];
    let mut active: Vec<usize> = (0..demands.len()).filter(|&i| demands[i] > 0.0 && weights[i] > 0.0).collect();
    let mut left = amount;
    while !active.is_empty() && left > 0.0 {
        let total_w: f64 = active.iter().map(|&i| weights[i]).sum();
        let level = left / total_w;
        let (capped, open): (Vec<usize>, Vec<usize>) = active.iter().partition(|&&i| demands[i] <= level * weights[i]);
        if capped.is_empty() {
            for &i in &open {
                out[i] = level * weights[i];
            }
            return out;
        }
        for &i in &capped {
            out[i] = demands[i];
            left -= demands[i];
        }
        active = open;
    }
    out
}

/// Owed GPU-seconds per leaf for one hour: `capacity` shared down the tree.
pub fn owed_in_hour(tree: &BudgetTree, leaf_demand: &[f64], capacity: f64) -> Vec<f64> {
    let given = owed_in_hour_by_node(tree, leaf_demand, capacity);
    tree.leaves.iter().map(|&node| given[node as usize]).collect()
}

/// The same for every node of the tree (a node is owed what its subtree is).
pub fn owed_in_hour_by_node(tree: &BudgetTree, leaf_demand: &[f64], capacity: f64) -> Vec<f64> {
    let n = tree.nodes.len();
    let mut demand = vec![0.0; n];
    for (leaf, &node) in tree.leaves.iter().enumerate() {
        demand[node as usize] = leaf_demand[leaf];
    }
    for id in (1..n).rev() {
        let parent = tree.nodes[id].parent.unwrap_or(0) as usize;
        demand[parent] += demand[id];
    }
    let mut given = vec![0.0; n];
    given[0] = capacity.min(demand[0]);
    // Parents come before children in `nodes`.
    for id in 0..n {
        let kids: &[NodeId] = &tree.nodes[id].children;
        if kids.is_empty() {
            continue;
        }
        let d: Vec<f64> = kids.iter().map(|&k| demand[k as usize]).collect();
        let w: Vec<f64> = kids.iter().map(|&k| tree.nodes[k as usize].share).collect();
        for (k, amount) in kids.iter().zip(water_fill(given[id], &d, &w)) {
            given[*k as usize] = amount;
        }
    }
    given
}

/// Owed GPU-seconds per leaf and hour of `[start, end)`: each hour's
/// GPU-seconds (`capacity` GPUs x the hour's length, shorter for a last
/// partial hour) shared down the tree by [`owed_in_hour`]. `demand` is per
/// leaf the GPU-seconds wanted in each hour, as [`hourly`] gives them over
/// the same span.
pub fn owed_by_hour(tree: &BudgetTree, demand: &[Vec<f64>], capacity: u32, start: i64, end: i64) -> Vec<Vec<f64>> {
    let hours = demand.first().map_or(0, Vec::len);
    let mut owed = vec![vec![0.0; hours]; demand.len()];
    for_each_owed_bucket(tree, demand, capacity, (start, end, HOUR), |h, by_node| {
        for (l, &node) in tree.leaves.iter().enumerate() {
            owed[l][h] = by_node[node as usize];
        }
    });
    owed
}

/// Owed GPU-seconds per node for one hour as the contract owes them:
/// allocated work (`min_runtime` > 0) is owed the hour's `gpu_seconds`
/// first, shared down the tree as [`owed_in_hour_by_node`] shares them;
/// unallocated work (free, preemptible by any allocated job) is owed only
/// what allocated work left, by the same shares (the queue orders free work
/// by its budget's standing too, after every allocated job). `allocated`
/// and `free` are per leaf the GPU-seconds each kind of work wanted in the
/// hour. [`owed_in_hour_by_node`] of their sum owes free work like
/// allocated work: a budget whose only work is free is owed its share even
/// while the contract gives that share to others' allocated work. Both
/// share out the same total: the hour's GPU-seconds, or all that was wanted.
pub fn owed_in_hour_by_node_allocated_first(tree: &BudgetTree, allocated: &[f64], free: &[f64], gpu_seconds: f64) -> Vec<f64> {
    let mut owed = owed_in_hour_by_node(tree, allocated, gpu_seconds);
    let left = (gpu_seconds - owed[0]).max(0.0);
    for (o, f) in owed.iter_mut().zip(owed_in_hour_by_node(tree, free, left)) {
        *o += f;
    }
    owed
}

/// Calls `f(hour, owed per node)` for each hour of `[start, end)`, owed
/// allocated work first ([`owed_in_hour_by_node_allocated_first`]).
/// `wanted` is per leaf and hour all the work wanted (as [`owed_by_hour`]
/// takes it), `free` the unallocated part of it, in the same shape; the
/// allocated part is their difference (never below 0).
fn for_each_owed_hour_allocated_first(
    tree: &BudgetTree,
    wanted: &[Vec<f64>],
    free: &[Vec<f64>],
    capacity: u32,
    (start, end): (i64, i64),
    mut f: impl FnMut(usize, &[f64]),
) {
    debug_assert_eq!(wanted.len(), free.len(), "wanted and free: one row per leaf");
    let hours = wanted.first().map_or(0, Vec::len);
    let leaves = wanted.len();
    let (mut a, mut u) = (vec![0.0; leaves], vec![0.0; leaves]);
    for h in 0..hours {
        let gpu_seconds = capacity as f64 * (end - (start + h as i64 * HOUR)).clamp(0, HOUR) as f64;
        for ((a, u), (all, free)) in a.iter_mut().zip(u.iter_mut()).zip(wanted.iter().zip(free)) {
            let (all, free) = (all[h].max(0.0), free.get(h).copied().unwrap_or(0.0).clamp(0.0, all[h].max(0.0)));
            (*a, *u) = (all - free, free);
        }
        f(h, &owed_in_hour_by_node_allocated_first(tree, &a, &u, gpu_seconds));
    }
}

/// Owed GPU-seconds per leaf and hour of `[start, end)` as the contract owes
/// them ([`owed_in_hour_by_node_allocated_first`]): `wanted` as
/// [`owed_by_hour`] takes it, `free` its unallocated part (both as
/// [`hourly`] gives them over the same span).
pub fn owed_by_hour_allocated_first(tree: &BudgetTree, wanted: &[Vec<f64>], free: &[Vec<f64>], capacity: u32, start: i64, end: i64) -> Vec<Vec<f64>> {
    let hours = wanted.first().map_or(0, Vec::len);
    let mut owed = vec![vec![0.0; hours]; wanted.len()];
    for_each_owed_hour_allocated_first(tree, wanted, free, capacity, (start, end), |h, by_node| {
        for (l, &node) in tree.leaves.iter().enumerate() {
            owed[l][h] = by_node[node as usize];
        }
    });
    owed
}

/// The same summed over the hours, for every node of the tree (the live
/// `allot report`'s [`owed_by_node`], allocated work first).
pub fn owed_by_node_allocated_first(tree: &BudgetTree, wanted: &[Vec<f64>], free: &[Vec<f64>], capacity: u32, start: i64, end: i64) -> Vec<f64> {
    let mut owed = vec![0.0; tree.nodes.len()];
    for_each_owed_hour_allocated_first(tree, wanted, free, capacity, (start, end), |_, by_node| {
        for (o, g) in owed.iter_mut().zip(by_node) {
            *o += g;
        }
    });
    owed
}

/// Owed GPU-seconds per node of the tree over `[start, end)`, summed over
/// the hours: [`owed_by_hour`] for every node, not only the leaves.
pub fn owed_by_node(tree: &BudgetTree, demand: &[Vec<f64>], capacity: u32, start: i64, end: i64) -> Vec<f64> {
    let mut owed = vec![0.0; tree.nodes.len()];
    for_each_owed_bucket(tree, demand, capacity, (start, end, HOUR), |_, by_node| {
        for (o, g) in owed.iter_mut().zip(by_node) {
            *o += g;
        }
    });
    owed
}

/// Owed GPU-seconds per node and bucket of `len` seconds (node-major), from
/// demand per leaf in the same buckets ([`bucketed`]): [`owed_by_hour`] at
/// another grain, for pictures of short spans.
pub fn owed_by_node_and_bucket(tree: &BudgetTree, demand: &[Vec<f64>], capacity: u32, (start, end, len): (i64, i64, i64)) -> Vec<Vec<f64>> {
    let buckets = demand.first().map_or(0, Vec::len);
    let mut owed = vec![vec![0.0; buckets]; tree.nodes.len()];
    for_each_owed_bucket(tree, demand, capacity, (start, end, len), |b, by_node| {
        for (o, g) in owed.iter_mut().zip(by_node) {
            o[b] = *g;
        }
    });
    owed
}

/// Calls `f(bucket, owed per node)` for each bucket of `len` seconds of `[start, end)`.
fn for_each_owed_bucket(tree: &BudgetTree, demand: &[Vec<f64>], capacity: u32, (start, end, bucket): (i64, i64, i64), mut f: impl FnMut(usize, &[f64])) {
    let hours = demand.first().map_or(0, Vec::len);
    let mut hour_demand = vec![0.0; demand.len()];
    for h in 0..hours {
        let len = (end - (start + h as i64 * bucket)).clamp(0, bucket) as f64;
        for (d, leaf) in hour_demand.iter_mut().zip(demand) {
            *d = leaf[h];
        }
        f(h, &owed_in_hour_by_node(tree, &hour_demand, capacity as f64 * len));
    }
}
