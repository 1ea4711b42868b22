//! Hierarchical fair-share: which allocation is most owed, level by level.
//!
//! Every node's *allocation* is its effective share of the cluster's GPU time
//! over the window: `effective_share x capacity_gpus x lookback` GPU-seconds.
//! Its *ratio* is its charged occupancy in the window (its subtree's) divided
//! by that. At each level, siblings are ordered by ratio, lowest (most owed)
//! first; a node with no use has ratio 0 and so comes first. Walking the tree
//! depth-first in that order gives every leaf a rank: the lineage of Slurm's
//! Fair Tree and YARN's Fair Scheduler, with occupancy as the input.
//!
//! **Ties** (most often: several unused siblings) go to the larger effective
//! share, then to the name in byte order, so the order is deterministic.
//! Ratios are compared at a resolution of 1e-9 (one billionth of the node's
//! allocation) so that rounding noise in the shares cannot reorder nodes.

use crate::budget::{BudgetTree, LeafId, NodeId};
use crate::{Seconds, UnixTime};

/// Where one node stands in the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    /// Charged GPU-seconds of the node's subtree in the window.
    pub usage: i64,
    /// GPU-seconds the node is owed over the window.
    pub allocation: f64,
    /// `usage / allocation`: 0 is unused, 1 is exactly its share.
    pub ratio: f64,
    /// Position among its siblings, 0 first.
    pub sibling_rank: u32,
    /// Number of siblings, itself included.
    pub siblings: u32,
}

impl Standing {
    /// The node's use of its share over the window as a researcher reads
    /// it: "0.50%", "14%", "130%" (two significant figures below 10%), or
    /// "no share here" for a node not funded on this cluster.
    pub fn share_used_text(&self) -> String {
        percent_of_share(self.ratio)
    }

    /// Its place among its siblings, least used first: "1st of 3
    /// siblings", "no siblings".
    pub fn rank_text(&self) -> String {
        if self.siblings <= 1 {
            "no siblings".to_owned()
        } else {
            format!("{} of {} siblings", ordinal(self.sibling_rank + 1), self.siblings)
        }
    }

    /// Both, as one phrase: "used 0.50% of its share, 1st of 2 siblings".
    pub fn in_words(&self) -> String {
        if self.ratio.is_finite() {
            format!("used {} of its share, {}", self.share_used_text(), self.rank_text())
        } else {
            format!("no share on this cluster, {}", self.rank_text())
        }
    }
}

/// `ratio` (use over share) as a percentage with two significant figures
/// below 10%, so that a tiny use still reads as more than none.
pub fn percent_of_share(ratio: f64) -> String {
    if !ratio.is_finite() {
        return "no share here".to_owned();
    }
    let pct = 100.0 * ratio;
    if pct <= 0.0 {
        "0%".to_owned()
    } else if pct >= 9.95 {
        format!("{pct:.0}%")
    } else {
        // Two significant figures; at most 12 decimals (the smallest use of
        // the largest allocation is far above 1e-12 of it).
        let decimals = ((-pct.log10()).ceil() as i64 + 1).clamp(1, 12) as usize;
        format!("{pct:.decimals$}%")
    }
}

/// 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st.
pub fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The fair-share order at one moment, and every number behind it.
#[derive(Debug, Clone)]
pub struct Ranking {
    pub now: UnixTime,
    pub capacity_gpus: u32,
    pub lookback: Seconds,
    /// The anti-thrash margin, from the budget's settings.
    pub preempt_margin: f64,
    /// By [`NodeId`].
    pub standings: Vec<Standing>,
    /// Rank of every leaf, 0 best, by [`LeafId`].
    pub leaf_rank: Vec<u32>,
    /// Leaves, best first.
    pub leaves_in_order: Vec<LeafId>,
    parent: Vec<NodeId>,
    depth: Vec<u32>,
    leaf_node: Vec<NodeId>,
}

/// Ratio resolution: one billionth of a node's allocation.
const RATIO_SCALE: f64 = 1e9;

fn ratio_key(ratio: f64) -> u64 {
    // `(ratio * RATIO_SCALE).round() as u64`, without `round`'s library call
    // (a pass ranks every node): truncate, then add one from a half up. The
    // subtraction is exact below 2^53, and above it every f64 is whole.
    // `as` saturates: an infinite ratio sorts last, NaN (never produced)
    // and negatives first.
    let scaled = ratio * RATIO_SCALE;
    // Below 2^63 a signed conversion (one instruction; the unsigned one
    // branches) gives the same whole part.
    if (0.0..9_223_372_036_854_775_808.0).contains(&scaled) {
        let whole = scaled as i64;
        return whole as u64 + u64::from(scaled - whole as f64 >= 0.5);
    }
    let whole = scaled as u64;
    if whole != u64::MAX && scaled - whole as f64 >= 0.5 {
        whole + 1
    } else {
        whole
    }
}

/// The usage a leaf is ranked by under `lookahead`
/// ([`crate::budget::ClusterSettings::lookahead`]): its charged GPU-seconds
/// in the window plus, for each charged GPU its jobs hold now, `lookahead`
/// seconds more, as if what it runs now went on that long. A team that just
/// took many GPUs then ranks by them at once, not hours later as the window
/// fills, so freed GPUs go round the teams instead of to one team until its
/// use catches up. `running_gpus[leaf]`: charged GPUs running now. The
/// plugins (the priority plugin's order, and every reader of its usage
/// snapshot) and the simulator rank by this.
pub fn with_lookahead(charged: &mut [i64], running_gpus: &[i64], lookahead: Seconds) {
    if lookahead <= 0 {
        return;
    }
    for (used, &gpus) in charged.iter_mut().zip(running_gpus) {
        *used = used.saturating_add(gpus.max(0).saturating_mul(lookahead));
    }
}

impl Ranking {
    /// Ranks the tree's nodes given each leaf's charged GPU-seconds in the
    /// window (`charged[leaf]`, see [`crate::occupancy`]). To rank one tree
    /// again and again, a [`Ranker`] does the same without allocating.
    pub fn compute(tree: &BudgetTree, charged: &[i64], capacity_gpus: u32, now: UnixTime) -> Ranking {
        Ranker::new(tree).rank(charged, capacity_gpus, now)
    }

    /// [`Ranking::compute`], with usage that belongs to inner nodes: what the
    /// leaves removed from the budget within the window used, counted in the
    /// nearest node still in the tree (`BudgetTree::charged_node_of_run`), so
    /// removing a leaf lowers no node's usage against its siblings.
    pub fn compute_with_orphans(tree: &BudgetTree, charged: &[i64], orphans: &[(NodeId, i64)], capacity_gpus: u32, now: UnixTime) -> Ranking {
        Ranker::new(tree).rank_with_orphans(charged, orphans, capacity_gpus, now)
    }

    pub fn leaves(&self) -> usize {
        self.leaf_rank.len()
    }

    /// The node of a leaf.
    pub fn node_of(&self, leaf: LeafId) -> NodeId {
        self.leaf_node[leaf as usize]
    }

    /// Where the paths of two leaves part: the two sibling nodes, one on
    /// each path, whose comparison decides which leaf ranks higher. `None`
    /// for the same leaf.
    pub fn divergence(&self, a: LeafId, b: LeafId) -> Option<(NodeId, NodeId)> {
        let (mut x, mut y) = (self.node_of(a), self.node_of(b));
        if x == y {
            return None;
        }
        while self.depth[x as usize] > self.depth[y as usize] {
            x = self.parent[x as usize];
        }
        while self.depth[y as usize] > self.depth[x as usize] {
            y = self.parent[y as usize];
        }
        // Leaves have no children, so neither leaf is an ancestor of the other
        // and the two climbs meet strictly above x and y.
        while self.parent[x as usize] != self.parent[y as usize] {
            x = self.parent[x as usize];
            y = self.parent[y as usize];
        }
        Some((x, y))
    }

    /// Node ids from the root's child down to the leaf: the levels at which
    /// the leaf was ranked, for explanations.
    pub fn levels_of(&self, leaf: LeafId) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut cur = self.node_of(leaf);
        while cur != 0 {
            out.push(cur);
            cur = self.parent[cur as usize];
        }
        out.reverse();
        out
    }
}

/// The part of a ranking that follows from the sibling orders alone.
#[derive(Debug, Clone, Default)]
struct SiblingOrders {
    sibling_rank: Vec<u32>,
    siblings: Vec<u32>,
    leaves_in_order: Vec<LeafId>,
    leaf_rank: Vec<u32>,
}

/// Ranks one tree again and again (a scheduler ranks at every pass): what
/// does not change between rankings (the tree's shape, each node's tie
/// order among its siblings) is worked out once, and the buffers are kept.
/// [`Ranker::rank_into`] gives exactly [`Ranking::compute`]'s result.
#[derive(Debug, Clone)]
pub struct Ranker {
    lookback: Seconds,
    preempt_margin: f64,
    effective_share: Vec<f64>,
    parent: Vec<NodeId>,
    depth: Vec<u32>,
    leaf_node: Vec<NodeId>,
    node_leaf: Vec<Option<LeafId>>,
    /// Children of node `i`: `children[child_start[i]..child_start[i + 1]]`,
    /// sorted in place by each ranking.
    child_start: Vec<usize>,
    children: Vec<NodeId>,
    /// Position among its siblings when ratios tie: larger effective share
    /// first, then the name in byte order.
    tie: Vec<u32>,
    /// Nodes with children, parents first.
    inner: Vec<NodeId>,
    usage: Vec<i64>,
    key: Vec<u128>,
    stack: Vec<NodeId>,
    /// Each node's allocation in GPU-seconds, for `allocation_of` GPUs.
    allocation: Vec<f64>,
    allocation_of: Option<u32>,
    /// What the last ranking's sibling orders gave (`None` before the
    /// first): each node's rank and sibling count, the leaves in order and
    /// their ranks. Orders seldom change, so they are kept, not walked again.
    orders: Option<SiblingOrders>,
}

impl Ranker {
    pub fn new(tree: &BudgetTree) -> Ranker {
        let n = tree.nodes.len();
        let mut child_start = Vec::with_capacity(n + 1);
        let mut children = Vec::with_capacity(n);
        let mut tie = vec![0u32; n];
        for node in &tree.nodes {
            child_start.push(children.len());
            let mut kids = node.children.clone();
            kids.sort_by(|&a, &b| {
                let (na, nb) = (&tree.nodes[a as usize], &tree.nodes[b as usize]);
                nb.effective_share.total_cmp(&na.effective_share).then_with(|| na.name.cmp(&nb.name))
            });
            for (pos, &k) in kids.iter().enumerate() {
                tie[k as usize] = pos as u32;
            }
            children.extend(kids);
        }
        child_start.push(children.len());
        Ranker {
            lookback: tree.settings.lookback,
            preempt_margin: tree.settings.preempt_margin,
            effective_share: tree.nodes.iter().map(|nd| nd.effective_share).collect(),
            parent: tree.nodes.iter().map(|nd| nd.parent.unwrap_or(0)).collect(),
            depth: tree.nodes.iter().map(|nd| nd.depth).collect(),
            leaf_node: tree.leaves.clone(),
            node_leaf: tree.nodes.iter().map(|nd| nd.leaf).collect(),
            child_start,
            children,
            tie,
            inner: (0..n as NodeId).filter(|&id| !tree.nodes[id as usize].children.is_empty()).collect(),
            usage: vec![0; n],
            key: vec![0; n],
            stack: Vec::with_capacity(n),
            allocation: vec![0.0; n],
            allocation_of: None,
            orders: None,
        }
    }

    /// [`Ranking::compute`] for this ranker's tree.
    pub fn rank(&mut self, charged: &[i64], capacity_gpus: u32, now: UnixTime) -> Ranking {
        self.rank_with_orphans(charged, &[], capacity_gpus, now)
    }

    /// [`Ranker::rank`] with usage of inner nodes ([`Ranking::compute_with_orphans`]).
    pub fn rank_with_orphans(&mut self, charged: &[i64], orphans: &[(NodeId, i64)], capacity_gpus: u32, now: UnixTime) -> Ranking {
        let mut out = Ranking {
            now,
            capacity_gpus,
            lookback: self.lookback,
            preempt_margin: self.preempt_margin,
            standings: Vec::new(),
            leaf_rank: Vec::new(),
            leaves_in_order: Vec::new(),
            parent: Vec::new(),
            depth: Vec::new(),
            leaf_node: Vec::new(),
        };
        self.rank_into_with_orphans(charged, orphans, capacity_gpus, now, &mut out);
        out
    }

    /// Ranks into `out`, reusing its buffers (`out` may come from any
    /// earlier ranking, of this tree or another).
    pub fn rank_into(&mut self, charged: &[i64], capacity_gpus: u32, now: UnixTime, out: &mut Ranking) {
        self.rank_into_with_orphans(charged, &[], capacity_gpus, now, out)
    }

    /// [`Ranker::rank_into`] with usage of inner nodes ([`Ranking::compute_with_orphans`]).
    pub fn rank_into_with_orphans(&mut self, charged: &[i64], orphans: &[(NodeId, i64)], capacity_gpus: u32, now: UnixTime, out: &mut Ranking) {
        let n = self.parent.len();
        if self.allocation_of != Some(capacity_gpus) {
            let capacity = capacity_gpus.max(1) as f64 * self.lookback.max(1) as f64;
            for (a, share) in self.allocation.iter_mut().zip(&self.effective_share) {
                *a = share * capacity;
            }
            self.allocation_of = Some(capacity_gpus);
        }
        self.usage.iter_mut().for_each(|u| *u = 0);
        for (leaf, &node) in self.leaf_node.iter().enumerate() {
            self.usage[node as usize] = charged.get(leaf).copied().unwrap_or(0);
        }
        for &(node, used) in orphans {
            if let Some(u) = self.usage.get_mut(node as usize) {
                *u += used;
            }
        }
        // Nodes are stored parents-first, so one reverse pass sums subtrees.
        for id in (1..n).rev() {
            let parent = self.parent[id] as usize;
            self.usage[parent] += self.usage[id];
        }
        out.standings.resize(n, Standing { usage: 0, allocation: 0.0, ratio: 0.0, sibling_rank: 0, siblings: 1 });
        out.standings.truncate(n);
        for (id, standing) in out.standings.iter_mut().enumerate() {
            let allocation = self.allocation[id];
            let usage = self.usage[id];
            // No allocation (a node not funded on this cluster): never owed.
            let ratio = if allocation <= 0.0 {
                f64::INFINITY
            } else if usage == 0 {
                0.0
            } else {
                usage as f64 / allocation
            };
            // The ratio, then the tie order: a total order among siblings.
            self.key[id] = (u128::from(ratio_key(ratio)) << 32) | u128::from(self.tie[id]);
            standing.usage = usage;
            standing.allocation = allocation;
            standing.ratio = ratio;
        }
        // Order siblings (ratio, then the tie order: a total order, so the
        // result does not depend on the previous ranking's order).
        let mut orders = self.orders.take();
        let mut changed = orders.is_none();
        for &id in &self.inner {
            let id = id as usize;
            let kids = &mut self.children[self.child_start[id]..self.child_start[id + 1]];
            let key = &self.key;
            let order = |&k: &NodeId| key[k as usize];
            // Orders seldom change from one ranking to the next.
            if !kids.is_sorted_by_key(order) {
                kids.sort_unstable_by_key(order);
                changed = true;
            }
        }
        if changed {
            let o = orders.get_or_insert_with(SiblingOrders::default);
            // The root's rank and count stay 0 and 1; every other node's are set here.
            o.sibling_rank.clear();
            o.sibling_rank.resize(n, 0);
            o.siblings.clear();
            o.siblings.resize(n, 1);
            for &id in &self.inner {
                let kids = &self.children[self.child_start[id as usize]..self.child_start[id as usize + 1]];
                for (rank, &k) in kids.iter().enumerate() {
                    o.sibling_rank[k as usize] = rank as u32;
                    o.siblings[k as usize] = kids.len() as u32;
                }
            }
            // Depth-first, best sibling first.
            o.leaves_in_order.clear();
            self.stack.clear();
            self.stack.push(0);
            while let Some(id) = self.stack.pop() {
                if let Some(leaf) = self.node_leaf[id as usize] {
                    o.leaves_in_order.push(leaf);
                }
                self.stack.extend(self.children[self.child_start[id as usize]..self.child_start[id as usize + 1]].iter().rev());
            }
            o.leaf_rank.clear();
            o.leaf_rank.resize(self.leaf_node.len(), 0);
            for (rank, &leaf) in o.leaves_in_order.iter().enumerate() {
                o.leaf_rank[leaf as usize] = rank as u32;
            }
        }
        let o = orders.as_ref().expect("set above when missing");
        for ((standing, &rank), &count) in out.standings.iter_mut().zip(&o.sibling_rank).zip(&o.siblings) {
            standing.sibling_rank = rank;
            standing.siblings = count;
        }
        out.leaves_in_order.clone_from(&o.leaves_in_order);
        out.leaf_rank.clone_from(&o.leaf_rank);
        self.orders = orders;
        out.now = now;
        out.capacity_gpus = capacity_gpus;
        out.lookback = self.lookback;
        out.preempt_margin = self.preempt_margin;
        out.parent.clone_from(&self.parent);
        out.depth.clone_from(&self.depth);
        out.leaf_node.clone_from(&self.leaf_node);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lookahead_ranks_a_team_by_the_gpus_it_just_took() {
        // Two equal teams: a used 10 GPU-hours earlier in the window and
        // holds nothing; b has used 1 GPU-hour so far but holds 8 GPUs now.
        let t = BudgetTree::parse("[budget]\n[budget.a]\nshare = 1\naccounts = [\"a\"]\n[budget.b]\nshare = 1\naccounts = [\"b\"]\n").unwrap();
        let (a, b, h) = (0, 1, 3600);
        let running = [0, 8];
        let ranked = |lookahead: Seconds| {
            let mut used = [10 * h, h];
            with_lookahead(&mut used, &running, lookahead);
            (used, Ranking::compute(&t, &used, 16, 0).leaves_in_order)
        };
        assert_eq!(ranked(0), ([10 * h, h], vec![b, a]), "0 is off: the window's use alone");
        // An hour ahead b counts 9 GPU-hours, still first; two hours ahead, 17: second.
        assert_eq!(ranked(h), ([10 * h, 9 * h], vec![b, a]));
        assert_eq!(ranked(2 * h), ([10 * h, 17 * h], vec![a, b]));
        // Nothing overflows, however long.
        assert_eq!(ranked(Seconds::MAX).0[1], i64::MAX);
    }

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn ratio_key_rounds_as_round_does(ratio in prop_oneof![0.0f64..10.0, any::<f64>(), (0u64..4_000_000_000u64).prop_map(|n| n as f64 / 2e9)]) {
            prop_assert_eq!(ratio_key(ratio), (ratio * RATIO_SCALE).round() as u64, "ratio {}", ratio);
        }
    }

    #[test]
    fn a_standing_reads_as_a_percentage_of_the_share_and_a_place() {
        let cases = [
            (0.0, "0%"),
            (0.00496, "0.50%"),
            (0.001, "0.10%"),
            (0.00022, "0.022%"),
            (0.01389, "1.4%"),
            (0.0996, "10%"),
            (1.254, "125%"),
            (3e-13, "0.000000000030%"),
        ];
        for (ratio, text) in cases {
            assert_eq!(percent_of_share(ratio), text, "ratio {ratio}");
        }
        assert_eq!(percent_of_share(f64::INFINITY), "no share here");
        let names: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111].into_iter().map(ordinal).collect();
        assert_eq!(names, ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]);
        let s = Standing { usage: 6000, allocation: 1_209_600.0, ratio: 6000.0 / 1_209_600.0, sibling_rank: 0, siblings: 2 };
        assert_eq!(s.in_words(), "used 0.50% of its share, 1st of 2 siblings");
        let only = Standing { sibling_rank: 0, siblings: 1, ..s };
        assert_eq!(only.in_words(), "used 0.50% of its share, no siblings");
        let unfunded = Standing { ratio: f64::INFINITY, sibling_rank: 2, siblings: 3, ..s };
        assert_eq!(unfunded.in_words(), "no share on this cluster, 3rd of 3 siblings");
    }

    #[test]
    fn ratio_key_at_the_edges() {
        // Where the fast path (a signed conversion) hands over: 2^63, scaled.
        let two_63 = 2f64.powi(63) / RATIO_SCALE;
        for ratio in [
            0.0,
            -0.0,
            0.5e-9,
            1.5e-9,
            2.5e-9,
            (0.5e-9f64).next_down(),
            (2.5e-9f64).next_up(),
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            1e10,
            9.007199254740993e6,
            -3.0,
            two_63,
            two_63.next_down(),
            two_63.next_up(),
            2f64.powi(64) / RATIO_SCALE,
        ] {
            assert_eq!(ratio_key(ratio), (ratio * RATIO_SCALE).round() as u64, "ratio {ratio}");
        }
    }

    const TREE: &str = r#"
[cluster]
lookback = "10h"
[budget]
[budget.a]
share = 3
[budget.a.x]
share = 1
accounts = ["ax"]
[budget.a.y]
share = 1
accounts = ["ay"]
[budget.b]
share = 1
accounts = ["b"]
"#;

    #[test]
    fn ranks_level_by_level() {
        let t = BudgetTree::parse(TREE).unwrap();
        let (ax, ay, b) = (0, 1, 2);
        // 4 GPUs, 10 h: a owns 30 GPU-hours, b 10; x and y 15 each.
        // a used 15 GPU-h (ratio 0.5), all of it by x; b used 8 (ratio 0.8).
        let h = 3600;
        let r = Ranking::compute(&t, &[15 * h, 0, 8 * h], 4, 0);
        assert!((r.standings[t.find("a").unwrap() as usize].ratio - 0.5).abs() < 1e-12);
        assert!((r.standings[t.find("b").unwrap() as usize].ratio - 0.8).abs() < 1e-12);
        // y unused first, then x (ratio 1.0) still above b: a beat b one level up.
        assert_eq!(r.leaves_in_order, vec![ay, ax, b]);
        assert_eq!(r.divergence(ax, b), Some((t.find("a").unwrap(), t.find("b").unwrap())));
        assert_eq!(r.divergence(ax, ay), Some((t.find("a/x").unwrap(), t.find("a/y").unwrap())));
        assert_eq!(r.divergence(b, b), None);
        assert_eq!(r.levels_of(ax), vec![t.find("a").unwrap(), t.find("a/x").unwrap()]);
    }

    #[test]
    fn unused_ties_go_to_the_larger_share_then_the_name() {
        let t = BudgetTree::parse(TREE).unwrap();
        let r = Ranking::compute(&t, &[0, 0, 0], 4, 0);
        // a (0.75) before b (0.25); x before y by name.
        assert_eq!(r.leaves_in_order, vec![0, 1, 2]);
    }

    #[test]
    fn usage_of_a_removed_leaf_stays_in_its_parent() {
        // vision (two teams) and nlp, equal shares; vision's second team was
        // removed, with its account, after using the cluster.
        let t = BudgetTree::parse(
            "[budget]\n[budget.vision]\nshare = 1\n[budget.vision.a]\nshare = 1\naccounts = [\"a\"]\n[budget.nlp]\nshare = 1\naccounts = [\"nlp\"]\n",
        )
        .unwrap();
        let vision = t.find("vision").unwrap();
        let leaf = |p: &str| t.node(t.find(p).unwrap()).leaf.unwrap();
        assert_eq!(t.charged_node_of_run(Some("vision/gone"), Some("gone")), Some(vision));
        assert_eq!(t.charged_node_of_run(Some("gone"), None), None, "a removed top-level leaf counts nowhere: the root has no siblings");
        // nlp used some; vision's remaining team nothing; the removed team more.
        let mut charged = vec![0; t.leaves.len()];
        charged[leaf("nlp") as usize] = 1000;
        let without = Ranking::compute(&t, &charged, 8, 0);
        assert_eq!(without.leaves_in_order[0], leaf("vision/a"), "without its removed team's usage, vision ranks first");
        let with = Ranking::compute_with_orphans(&t, &charged, &[(vision, 5000)], 8, 0);
        assert_eq!(with.leaves_in_order[0], leaf("nlp"), "the removed team's usage keeps vision below nlp");
        assert_eq!(with.standings[vision as usize].usage, 5000);
    }
}
