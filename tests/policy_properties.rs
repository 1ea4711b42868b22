//! Properties of the policy core that must hold for every budget tree, every
//! usage pattern and every contract, checked with proptest.

use allot::budget::{BudgetTree, LeafId};
use allot::contract::{parse_comment, Contract, ContractRules, PriorityLevel};
use allot::duration::{format_duration, parse_duration};
use allot::fairshare::{Ranker, Ranking};
use allot::occupancy::{usage_in_window, Interval, OccupancyWindow};
use allot::order::{order_groups, order_jobs, PendingJob, PriorityMap, QueueGroup};
use allot::preempt::{grace_for, may_preempt, may_preempt_with, outranks_by, victim_order, Outranking, PreemptDecision, PreemptRules, RunningJob, WaitingJob};
use proptest::prelude::*;

/// A random tree: node i (1-based) hangs under an earlier node; shares are
/// positive. Returned as budget TOML.
fn tree_toml(parents: &[usize], shares: &[f64], scale: f64) -> String {
    let n = parents.len();
    let mut path = vec![String::new(); n + 1];
    let mut has_child = vec![false; n + 1];
    for i in 1..=n {
        let p = parents[i - 1] % i; // 0 is the root
        path[i] = if p == 0 { format!("n{i}") } else { format!("{}.n{i}", path[p]) };
        has_child[p] = true;
    }
    let mut out = String::from("[cluster]\nlookback = \"1d\"\n[budget]\n");
    for i in 1..=n {
        out.push_str(&format!("[budget.{}]\nshare = {:?}\n", path[i], shares[i - 1] * scale));
        if !has_child[i] {
            out.push_str(&format!("accounts = [\"acct{i}\"]\n"));
        }
    }
    out
}

fn arb_tree() -> impl Strategy<Value = (Vec<usize>, Vec<f64>)> {
    (1usize..40).prop_flat_map(|n| (prop::collection::vec(0usize..1000, n), prop::collection::vec(0.01f64..100.0, n)))
}

/// Per-leaf usage where about half the leaves are unused.
fn arb_usage() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(prop_oneof![Just(0i64), 1i64..1_000_000], 40)
}

fn parse(text: &str) -> BudgetTree {
    BudgetTree::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

static COMPARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn unused_sibling_property_compares_something() {
    an_unused_sibling_ranks_above_used_ones();
    assert!(COMPARED.load(std::sync::atomic::Ordering::Relaxed) > 100, "the generator made too few unused siblings");
}

proptest! {
    #[test]
    fn effective_shares_of_the_leaves_sum_to_one((parents, shares) in arb_tree()) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let sum: f64 = t.leaves.iter().map(|&n| t.node(n).effective_share).sum();
        prop_assert!((sum - 1.0).abs() < 1e-9, "sum {sum}");
        // And each leaf's share is the product down its path.
        for &leaf in &t.leaves {
            let mut product = 1.0;
            for id in t.path_ids(leaf).into_iter().skip(1) {
                let node = t.node(id);
                let siblings: f64 = t.node(node.parent.unwrap()).children.iter().map(|&c| t.node(c).share).sum();
                product *= node.share / siblings;
            }
            prop_assert!((product - t.node(leaf).effective_share).abs() < 1e-12);
        }
    }

    #[test]
    fn scaling_every_share_leaves_the_order_unchanged(
        (parents, shares) in arb_tree(),
        scale in 0.001f64..1000.0,
        usage in arb_usage(),
    ) {
        let a = parse(&tree_toml(&parents, &shares, 1.0));
        let b = parse(&tree_toml(&parents, &shares, scale));
        let usage = &usage[..a.leaves.len().min(usage.len())];
        let ra = Ranking::compute(&a, usage, 8, 0);
        let rb = Ranking::compute(&b, usage, 8, 0);
        prop_assert_eq!(ra.leaves_in_order, rb.leaves_in_order);
    }

    #[test]
    fn an_unused_sibling_ranks_above_used_ones(
        (parents, shares) in arb_tree(),
        usage in arb_usage(),
    ) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let charged: Vec<i64> = (0..t.leaves.len()).map(|i| usage.get(i).copied().unwrap_or(0)).collect();
        let r = Ranking::compute(&t, &charged, 8, 0);
        let mut compared = 0;
        for node in &t.nodes {
            let kids = &node.children;
            for &unused in kids.iter().filter(|&&k| r.standings[k as usize].usage == 0) {
                for &used in kids.iter().filter(|&&k| r.standings[k as usize].usage > 0) {
                    prop_assert!(r.standings[unused as usize].sibling_rank < r.standings[used as usize].sibling_rank);
                    compared += 1;
                }
            }
        }
        // Count the cases that compared something, so a generator that never
        // makes unused siblings cannot pass vacuously.
        COMPARED.fetch_add(compared, std::sync::atomic::Ordering::Relaxed);
    }

    #[test]
    fn more_use_never_improves_a_rank(
        (parents, shares) in arb_tree(),
        usage in arb_usage(),
        which in 0usize..40,
        extra in 1i64..1_000_000,
    ) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let mut charged: Vec<i64> = (0..t.leaves.len()).map(|i| usage.get(i).copied().unwrap_or(0)).collect();
        let leaf = which % t.leaves.len();
        let before = Ranking::compute(&t, &charged, 8, 0).leaf_rank[leaf];
        charged[leaf] += extra;
        let after = Ranking::compute(&t, &charged, 8, 0).leaf_rank[leaf];
        prop_assert!(after >= before, "rank went from {before} to {after}");
    }

    /// The precomputed answer is `outranks_by`'s, for every pair of leaves,
    /// margins from none to large, over several rankings of one tree.
    #[test]
    fn outranking_answers_as_outranks_by(
        (parents, shares) in arb_tree(),
        usages in prop::collection::vec(arb_usage(), 1..4),
        margin in prop_oneof![Just(0.0f64), 0.0f64..0.5],
    ) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let mut table: Option<Outranking> = None;
        for usage in &usages {
            let r = Ranking::compute(&t, usage, 64, 86_400);
            let table = table.get_or_insert_with(|| Outranking::new(&r));
            for v in 0..t.leaves.len() as LeafId {
                for w in 0..t.leaves.len() as LeafId {
                    prop_assert_eq!(table.allowed(v, w, &r, margin), outranks_by(v, w, &r, margin).allowed(), "victim {} waiting {}", v, w);
                }
            }
            for w in 0..t.leaves.len() as LeafId {
                let mask = table.allowed_mask(w, &r, margin);
                prop_assert_eq!(mask.is_some(), t.leaves.len() <= 64);
                if let Some(mask) = mask {
                    for v in 0..t.leaves.len() as LeafId {
                        prop_assert_eq!(mask >> v & 1 == 1, outranks_by(v, w, &r, margin).allowed(), "mask: victim {} waiting {}", v, w);
                    }
                }
            }
        }
    }

    /// The ranking by its documented rule, written plainly: siblings by
    /// ratio (to 1e-9), then the larger effective share, then the name.
    /// A ranker reused over many usages (its sibling orders left from the
    /// previous one) and a ranking written over another tree's agree with it.
    #[test]
    fn a_reused_ranker_ranks_by_the_documented_rule(
        (parents, _) in arb_tree(),
        share_steps in prop::collection::vec(1u32..4, 40),
        usages in prop::collection::vec(arb_usage(), 1..6),
        capacity in 1u32..2000,
    ) {
        let shares: Vec<f64> = parents.iter().enumerate().map(|(i, _)| f64::from(share_steps[i % 40])).collect();
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let mut ranker = Ranker::new(&t);
        let other = parse(&tree_toml(&[0, 0, 1], &[1.0, 2.0, 3.0], 1.0));
        let mut out = Ranking::compute(&other, &[5, 0], 8, 0);
        for usage in &usages {
            ranker.rank_into(usage, capacity, 7, &mut out);
            // The reference.
            let n = t.nodes.len();
            let mut sub = vec![0i64; n];
            for (leaf, &node) in t.leaves.iter().enumerate() {
                let mut cur = Some(node);
                while let Some(c) = cur {
                    sub[c as usize] += usage.get(leaf).copied().unwrap_or(0);
                    cur = t.nodes[c as usize].parent;
                }
            }
            let window = f64::from(capacity) * t.settings.lookback as f64;
            let ratio = |id: usize| if sub[id] == 0 { 0.0 } else { sub[id] as f64 / (t.nodes[id].effective_share * window) };
            let mut expected = Vec::new();
            let mut stack = vec![0usize];
            while let Some(id) = stack.pop() {
                if let Some(leaf) = t.nodes[id].leaf {
                    expected.push(leaf);
                }
                let mut kids: Vec<usize> = t.nodes[id].children.iter().map(|&k| k as usize).collect();
                kids.sort_by(|&a, &b| {
                    ((ratio(a) * 1e9).round() as u64)
                        .cmp(&((ratio(b) * 1e9).round() as u64))
                        .then(t.nodes[b].effective_share.total_cmp(&t.nodes[a].effective_share))
                        .then_with(|| t.nodes[a].name.cmp(&t.nodes[b].name))
                });
                for (rank, &k) in kids.iter().enumerate() {
                    prop_assert_eq!(out.standings[k].sibling_rank, rank as u32);
                    prop_assert_eq!(out.standings[k].siblings, kids.len() as u32);
                    prop_assert_eq!(out.standings[k].usage, sub[k]);
                }
                stack.extend(kids.iter().rev());
            }
            prop_assert_eq!(&out.leaves_in_order, &expected);
            for (rank, &leaf) in expected.iter().enumerate() {
                prop_assert_eq!(out.leaf_rank[leaf as usize], rank as u32);
            }
            prop_assert_eq!(out.now, 7);
            let fresh = Ranking::compute(&t, usage, capacity, 7);
            prop_assert_eq!(&fresh.leaves_in_order, &out.leaves_in_order);
            prop_assert_eq!(&fresh.standings, &out.standings);
            for &a in &t.leaves.iter().map(|&nd| t.nodes[nd as usize].leaf.unwrap()).collect::<Vec<_>>() {
                prop_assert_eq!(fresh.levels_of(a), out.levels_of(a));
                prop_assert_eq!(fresh.divergence(a, 0), out.divergence(a, 0));
            }
        }
    }

    #[test]
    fn durations_round_trip(secs in 0i64..(3650 * 86400)) {
        prop_assert_eq!(parse_duration(&format_duration(secs)), Ok(secs));
    }

    #[test]
    fn contracts_round_trip(
        min_runtime in 0i64..=8 * 3600,
        level in prop::sample::select(vec![PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High]),
        words in prop::collection::vec("[a-zA-Z0-9_.:/-]{1,12}", 0..5),
    ) {
        let rules = ContractRules { min_runtime_cap: 8 * 3600, default_min_runtime: 3600 };
        let contract = Contract { min_runtime, priority: level };
        let comment = format!("{} {}", words.join(" "), contract.canonical());
        let parsed = parse_comment(&comment, rules).unwrap();
        prop_assert_eq!(parsed.contract, contract);
        prop_assert_eq!(&parsed.other_text, &words.join(" "));
        // The canonical comment is a fixed point.
        let again = parse_comment(&parsed.canonical_comment(), rules).unwrap();
        prop_assert_eq!(again, parsed);
    }

    #[test]
    fn the_incremental_window_equals_the_batch_sum(
        runs in prop::collection::vec((0u32..3, 1u32..9, 0i64..500, 1i64..200, any::<bool>()), 0..40),
        probes in prop::collection::vec(0i64..800, 1..10),
        lookback in 1i64..300,
    ) {
        let intervals: Vec<Interval> = runs
            .iter()
            .map(|&(leaf, gpus, start, len, allocated)| Interval { leaf, gpus, start, end: Some(start + len), allocated })
            .collect();
        // Feed the window every start and stop in time order, probing as we go.
        let mut events: Vec<(i64, u32, i64)> = Vec::new();
        for iv in intervals.iter().filter(|iv| iv.allocated) {
            events.push((iv.start, iv.leaf, iv.gpus as i64));
            events.push((iv.end.unwrap(), iv.leaf, -(iv.gpus as i64)));
        }
        events.sort();
        let mut probes = probes;
        probes.sort();
        let mut window = OccupancyWindow::new(3, lookback, 0);
        let mut next = 0;
        for probe in probes {
            while next < events.len() && events[next].0 <= probe {
                let (t, leaf, d) = events[next];
                window.change(leaf, t, d);
                next += 1;
            }
            let mut incremental = Vec::new();
            window.usage_all(probe, &mut incremental);
            // The batch sum only counts runs that have started by `probe`,
            // and ends them at `probe` if they are still going.
            let seen: Vec<Interval> = intervals
                .iter()
                .filter(|iv| iv.start <= probe)
                .map(|iv| Interval { end: iv.end.filter(|&e| e <= probe), ..*iv })
                .collect();
            let batch = usage_in_window(&seen, 3, probe, lookback);
            prop_assert_eq!(incremental, batch.charged, "at t={}", probe);
        }
    }

    #[test]
    fn priorities_follow_the_order_and_arrivals_slot_in(
        (parents, shares) in arb_tree(),
        usage in prop::collection::vec(0i64..1_000_000, 40),
        jobs in prop::collection::vec((0u32..40, any::<bool>(), 0u8..3, 0i64..1000), 1..200),
        arrivals in prop::collection::vec((0u32..40, any::<bool>(), 0u8..3), 0..50),
    ) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let leaves = t.leaves.len() as u32;
        let charged: Vec<i64> = (0..t.leaves.len()).map(|i| usage.get(i).copied().unwrap_or(0)).collect();
        let r = Ranking::compute(&t, &charged, 8, 0);
        let level = |l: u8| [PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High][l as usize];
        let mut all: Vec<PendingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(leaf, allocated, l, submit))| PendingJob {
                job_id: i as u32 + 1,
                leaf: leaf % leaves as LeafId,
                allocated,
                priority: level(l),
                submit_time: submit,
            })
            .collect();
        let (mut map, mut prio) = PriorityMap::build(&r, &all);
        // Strictly decreasing along the order: no ties.
        let order = order_jobs(&r, &all);
        for w in order.windows(2) {
            prop_assert!(prio[w[0]] > prio[w[1]]);
        }
        // New jobs, later than everything, land where a recompute would put them.
        for (k, &(leaf, allocated, l)) in arrivals.iter().enumerate() {
            let job = PendingJob {
                job_id: 10_000 + k as u32,
                leaf: leaf % leaves as LeafId,
                allocated,
                priority: level(l),
                submit_time: 5_000 + k as i64,
            };
            prio.push(map.assign_new(&r, &job));
            all.push(job);
        }
        prop_assert!(!map.exhausted);
        let order = order_jobs(&r, &all);
        for w in order.windows(2) {
            prop_assert!(prio[w[0]] > prio[w[1]], "{:?} then {:?}", all[w[0]], all[w[1]]);
        }
    }

    /// The simulator keeps pending jobs per group and orders only groups:
    /// that merge must be exactly `order_jobs`.
    #[test]
    fn ordering_groups_then_each_group_by_arrival_is_order_jobs(
        (parents, shares) in arb_tree(),
        usage in prop::collection::vec(0i64..1_000_000, 40),
        jobs in prop::collection::vec((0u32..40, any::<bool>(), 0u8..3, 0i64..50), 1..200),
    ) {
        let t = parse(&tree_toml(&parents, &shares, 1.0));
        let leaves = t.leaves.len();
        let charged: Vec<i64> = (0..leaves).map(|i| usage.get(i).copied().unwrap_or(0)).collect();
        let r = Ranking::compute(&t, &charged, 8, 0);
        let level = |l: u8| [PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High][l as usize];
        // Few submit times, so ties on submit time are broken by job id.
        let all: Vec<PendingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(leaf, allocated, l, submit))| PendingJob {
                job_id: (jobs.len() - i) as u32,
                leaf: (leaf as usize % leaves) as LeafId,
                allocated,
                priority: level(l),
                submit_time: submit,
            })
            .collect();
        let mut table: Vec<Vec<usize>> = vec![Vec::new(); QueueGroup::count(leaves)];
        for (i, job) in all.iter().enumerate() {
            let g = QueueGroup::of(job);
            prop_assert_eq!(QueueGroup::at(g.index(leaves), leaves), g);
            table[g.index(leaves)].push(i);
        }
        for members in &mut table {
            members.sort_by_key(|&i| (all[i].submit_time, all[i].job_id));
        }
        let nonempty: Vec<usize> = (0..table.len()).filter(|&g| !table[g].is_empty()).collect();
        let keys: Vec<QueueGroup> = nonempty.iter().map(|&g| QueueGroup::at(g, leaves)).collect();
        let merged: Vec<usize> = order_groups(&r, &keys).into_iter().flat_map(|k| table[nonempty[k]].clone()).collect();
        prop_assert_eq!(merged, order_jobs(&r, &all));
    }
}

fn arb_level() -> impl Strategy<Value = PriorityLevel> {
    prop::sample::select(vec![PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High])
}

/// A contract: unallocated about a quarter of the time.
fn arb_contract() -> impl Strategy<Value = Contract> {
    (prop_oneof![Just(0i64), 1i64..=8 * 3600], arb_level()).prop_map(|(min_runtime, priority)| Contract { min_runtime, priority })
}

/// Two jobs, often of the same leaf, sometimes of none, a time and the rules.
fn arb_pair() -> impl Strategy<Value = (RunningJob, WaitingJob, i64, PreemptRules)> {
    (
        prop::option::weighted(0.9, 0u32..4),
        prop::option::weighted(0.9, 0u32..4),
        arb_contract(),
        arb_contract(),
        0i64..10 * 3600,
        0i64..20 * 3600,
        (any::<bool>(), any::<bool>()),
        (1u32..64, prop_oneof![Just(0u32), 1u32..16], 0i64..4 * 3600),
    )
        .prop_map(|(lv, lw, cv, cw, start, now, (within_team, smallest_first), (gpus, small_job_gpus, small_job_min_runtime))| {
            let lw = if lv.is_some() && lw.is_some() && now % 2 == 0 { lv } else { lw }; // same leaf half the time
            (
                RunningJob { leaf: lv, contract: cv, run_start: start },
                WaitingJob { leaf: lw, contract: cw, gpus, queued_since: None },
                now,
                PreemptRules { within_team, smallest_first, small_job_gpus, small_job_min_runtime, large_job_wait: 0 },
            )
        })
}

fn four_leaves(usage: &[i64]) -> (BudgetTree, Ranking) {
    let t = parse("[cluster]\nlookback = \"1d\"\n[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 2\naccounts = [\"b\"]\n[budget.c]\nshare = 1\naccounts = [\"c\"]\n[budget.d]\nshare = 3\naccounts = [\"d\"]\n");
    let r = Ranking::compute(&t, usage, 8, 20 * 3600);
    (t, r)
}

proptest! {
    /// Rule 5 and what it leaves alone: same-leaf preemption only past the
    /// victim's minimum runtime, only by a strictly higher priority and no
    /// longer a guarantee, only with the switch on; unallocated jobs as
    /// before; jobs of different leaves as before (rule 4 ignores
    /// priorities); the decision a function of its arguments alone.
    #[test]
    fn preemption_within_a_team_keeps_the_contract(
        (victim, waiting, now, rules) in arb_pair(),
        usage in prop::collection::vec(0i64..200_000, 4),
    ) {
        let (_, r) = four_leaves(&usage);
        let d = may_preempt_with(&victim, &waiting, now, &r, rules);
        // Deterministic and stateless: the same question, the same answer.
        prop_assert_eq!(d, may_preempt_with(&victim, &waiting, now, &r, rules));
        prop_assert_eq!(may_preempt(&victim, &waiting, now, &r), may_preempt_with(&victim, &waiting, now, &r, PreemptRules::default()));
        // Unallocated rules unchanged.
        if !waiting.is_allocated() {
            prop_assert_eq!(d, PreemptDecision::NoPreemptorUnallocated);
        } else if !victim.is_allocated() {
            prop_assert_eq!(d, PreemptDecision::YesUnallocated);
        }
        // Protection: an allocated victim inside its minimum runtime never goes.
        if victim.is_allocated() && now < victim.run_start + victim.contract.min_runtime {
            prop_assert!(!d.allowed(), "{d:?}");
        }
        let same = victim.leaf.is_some() && victim.leaf == waiting.leaf;
        if same && victim.is_allocated() && d.allowed() {
            prop_assert!(rules.within_team);
            prop_assert!(waiting.contract.priority > victim.contract.priority, "{d:?}");
            prop_assert!(waiting.contract.min_runtime <= victim.contract.min_runtime, "{d:?}");
            // Never the other way round: the victim can never take the preemptor's GPUs back.
            let back = RunningJob { leaf: waiting.leaf, contract: waiting.contract, run_start: 0 };
            let victim_waiting = WaitingJob { leaf: victim.leaf, contract: victim.contract, gpus: waiting.gpus, queued_since: None };
            prop_assert!(!may_preempt_with(&back, &victim_waiting, i64::MAX / 4, &r, rules).allowed());
        }
        if same && victim.is_allocated() && !rules.within_team {
            prop_assert!(!d.allowed());
        }
        // Between leaves, declared priorities change nothing, nor does the switch.
        if !same {
            for level in [PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High] {
                let other = WaitingJob { contract: Contract { priority: level, ..waiting.contract }, ..waiting };
                prop_assert_eq!(may_preempt_with(&victim, &other, now, &r, rules).allowed(), d.allowed());
            }
            let flipped = PreemptRules { within_team: !rules.within_team, ..rules };
            prop_assert_eq!(may_preempt_with(&victim, &waiting, now, &r, flipped), d);
        }
    }

    /// Rule 4 for small jobs: between leaves a small waiting job asks no
    /// margin, any other the ranking's; either way the victim's side must be
    /// above the waiting side (never an under-served victim), and a job that
    /// may preempt as a large job may as a small one. Within a leaf the
    /// small-job settings change nothing.
    #[test]
    fn small_jobs_preempt_other_leaves_without_the_margin(
        (victim, waiting, now, rules) in arb_pair(),
        usage in prop::collection::vec(0i64..200_000, 4),
    ) {
        let (_, r) = four_leaves(&usage);
        let d = may_preempt_with(&victim, &waiting, now, &r, rules);
        let small = rules.is_small(&waiting);
        prop_assert_eq!(small, waiting.is_allocated() && waiting.gpus <= rules.small_job_gpus && waiting.contract.min_runtime <= rules.small_job_min_runtime);
        if let PreemptDecision::YesOutranked(c) | PreemptDecision::NoNotOutranked(c) = d {
            prop_assert_eq!(c.margin, if small { 0.0 } else { r.preempt_margin });
            prop_assert_eq!(d.allowed(), c.preemptee_ratio - c.preemptor_ratio > c.margin);
        }
        if d.allowed() && victim.is_allocated() && victim.leaf != waiting.leaf {
            let PreemptDecision::YesOutranked(c) = d else { panic!("{d:?}") };
            prop_assert!(c.preemptee_ratio > c.preemptor_ratio, "{c:?}");
        }
        let none_small = PreemptRules { small_job_gpus: 0, ..rules };
        let every_small = PreemptRules { small_job_gpus: u32::MAX, small_job_min_runtime: i64::MAX, ..rules };
        if may_preempt_with(&victim, &waiting, now, &r, none_small).allowed() {
            prop_assert!(may_preempt_with(&victim, &waiting, now, &r, every_small).allowed());
        }
        if victim.leaf == waiting.leaf {
            prop_assert_eq!(may_preempt_with(&victim, &waiting, now, &r, every_small), may_preempt_with(&victim, &waiting, now, &r, none_small));
        }
    }

    /// Rule 6: with `large_job_wait` on, a waiting job gains exactly the
    /// runs of other leaves that rule 4 would give it without the margin and
    /// that have run both jobs' minimum runtimes, and only when it is
    /// allocated, larger than a small job, queued at least that long, and
    /// its leaf under its share; it never takes a protected run, nor a run
    /// of a leaf not above its own, nor a teammate's beyond rule 5, and loses
    /// nothing rule 4 gave it.
    #[test]
    fn long_waiting_large_jobs_ask_no_margin_of_runs_past_both_guarantees(
        (victim, waiting, now, rules) in arb_pair(),
        usage in prop::collection::vec(0i64..200_000, 4),
        wait in 1i64..6 * 3600,
        queued in prop::option::weighted(0.8, 0i64..20 * 3600),
    ) {
        let (_, r) = four_leaves(&usage);
        let waiting = WaitingJob { queued_since: queued, ..waiting };
        let on = PreemptRules { large_job_wait: wait, ..rules };
        let (d_off, d_on) = (may_preempt_with(&victim, &waiting, now, &r, rules), may_preempt_with(&victim, &waiting, now, &r, on));
        let long = on.is_long_waiting(&waiting, now, &r);
        prop_assert_eq!(
            long,
            waiting.is_allocated()
                && waiting.gpus > rules.small_job_gpus
                && queued.is_some_and(|q| now - q >= wait)
                && waiting.leaf.is_some_and(|l| r.standings[r.node_of(l) as usize].ratio < 1.0)
        );
        prop_assert!(!rules.is_long_waiting(&waiting, now, &r), "off when large_job_wait is 0");
        if d_off.allowed() {
            prop_assert_eq!(d_on, d_off);
        }
        if victim.is_allocated() && now < victim.run_start + victim.contract.min_runtime {
            prop_assert!(!d_on.allowed(), "{d_on:?}");
        }
        let same = victim.leaf.is_some() && victim.leaf == waiting.leaf;
        if same {
            prop_assert_eq!(d_on, d_off);
        }
        let past_both = now >= victim.run_start + victim.contract.min_runtime.max(waiting.contract.min_runtime);
        let above = match (victim.leaf, waiting.leaf) {
            (Some(v), Some(w)) => outranks_by(v, w, &r, 0.0).allowed(),
            _ => false,
        };
        if d_on.allowed() && !d_off.allowed() {
            prop_assert!(long && victim.is_allocated() && !same && past_both && above, "{d_on:?}");
            let PreemptDecision::YesLongWait { comparison: c, .. } = d_on else { panic!("{d_on:?}") };
            prop_assert!(c.margin == 0.0 && c.preemptee_ratio > c.preemptor_ratio, "{c:?}");
        }
        if long && victim.is_allocated() && !same && past_both && above {
            prop_assert!(d_on.allowed(), "{d_on:?}");
        }
    }

    /// The victim order is a total order on classes: unallocated before
    /// allocated resumable before allocated cancelled, fewer GPUs first
    /// within a class; and the grace time never exceeds the cluster's.
    #[test]
    fn victims_smallest_first_and_grace_bounded(
        (a, _, _, _) in arb_pair(),
        (b, _, _, _) in arb_pair(),
        ga in 1u32..512,
        gb in 1u32..512,
        ra in any::<bool>(),
        rb in any::<bool>(),
        usage in prop::collection::vec(0i64..200_000, 4),
        grace in 0i64..3600,
        unallocated_grace in 0i64..7200,
    ) {
        let (t, r) = four_leaves(&usage);
        let rules = PreemptRules { within_team: true, smallest_first: true, ..PreemptRules::default() };
        let (oa, ob) = (victim_order(&a, ga, ra, &r, rules), victim_order(&b, gb, rb, &r, rules));
        let class = |j: &RunningJob, res: bool| if !j.is_allocated() { 0 } else if res { 1 } else { 2 };
        let (ca, cb) = (class(&a, ra), class(&b, rb));
        if ca != cb {
            prop_assert_eq!(ca < cb, oa < ob);
        } else if ga != gb {
            prop_assert_eq!(ga < gb, oa < ob);
        }
        let mut settings = t.settings.clone();
        settings.grace = grace;
        settings.unallocated_grace = unallocated_grace;
        let g = grace_for(&a, &settings);
        prop_assert!((0..=grace).contains(&g));
        if a.is_allocated() {
            prop_assert_eq!(g, grace);
        }
    }
}
