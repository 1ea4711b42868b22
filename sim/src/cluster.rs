//! The cluster: nodes of identical GPU slots, and where a job fits.
//!
//! Placement follows the usual Slurm GPU setup: a job that fits on one node
//! goes on one node, the one with the fewest free GPUs that still fit (best
//! fit, lowest node number on ties, so small jobs pack and whole nodes stay
//! free for large ones). A job larger than a node takes whole nodes, and
//! holds all their GPUs (Slurm's `--exclusive`); see [`ClusterSpec::held_gpus`].
//!
//! Free slots are kept per node as a bit mask (which GPU, for the Gantt
//! chart) and the nodes are bucketed by their free count, so finding a fit
//! costs O(GPUs per node x nodes / 64), not a scan of the jobs.

use std::fmt;
use std::str::FromStr;

/// `75x8`: 75 nodes of 8 GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub gpus_per_node: u32,
}

/// Most GPUs one node may have: slots are bits of a `u64`.
pub const MAX_GPUS_PER_NODE: u32 = 64;

impl ClusterSpec {
    pub fn capacity(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// GPUs a job asking for `gpus` holds: itself on one node, else whole nodes.
    pub fn held_gpus(&self, gpus: u32) -> u32 {
        if gpus <= self.gpus_per_node {
            gpus
        } else {
            gpus.div_ceil(self.gpus_per_node) * self.gpus_per_node
        }
    }
}

impl fmt::Display for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.nodes, self.gpus_per_node)
    }
}

impl FromStr for ClusterSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a cluster shape: write NODESxGPUS, such as 75x8 (75 nodes of 8 GPUs)");
        let (n, g) = s.trim().split_once(['x', 'X']).ok_or_else(bad)?;
        let nodes: u32 = n.trim().parse().map_err(|_| bad())?;
        let gpus_per_node: u32 = g.trim().parse().map_err(|_| bad())?;
        if nodes == 0 || gpus_per_node == 0 {
            return Err(format!("'{s}': a cluster needs at least one node and one GPU per node"));
        }
        if gpus_per_node > MAX_GPUS_PER_NODE {
            return Err(format!("'{s}': at most {MAX_GPUS_PER_NODE} GPUs per node"));
        }
        if nodes > 1_000_000 {
            return Err(format!("'{s}': at most 1000000 nodes"));
        }
        Ok(ClusterSpec { nodes, gpus_per_node })
    }
}

/// Which slots are free on which node.
///
/// The last nodes may be kept for small jobs (`small_from..`): jobs that
/// may not use them see them as full (the `_for(false)` queries).
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    g: u32,
    /// First small-job node (= the node count when none is kept).
    small_from: u32,
    /// Free GPUs on the small-job nodes.
    small_free: u32,
    /// Per node: bit i set = GPU i free.
    free_mask: Vec<u64>,
    /// Free GPUs per node: `free_mask`'s bit counts, kept because the
    /// searches ask for them far more often than GPUs change hands.
    free_count: Vec<u32>,
    /// `buckets[f]`: bit set of the nodes with exactly `f` free GPUs.
    buckets: Vec<Vec<u64>>,
    free_total: u32,
}

fn full_mask(g: u32) -> u64 {
    if g == 64 {
        u64::MAX
    } else {
        (1u64 << g) - 1
    }
}

impl Nodes {
    #[cfg(test)]
    pub fn new(spec: ClusterSpec) -> Nodes {
        Nodes::with_small_job_nodes(spec, 0)
    }

    /// A cluster whose last `small` nodes are kept for small jobs.
    pub fn with_small_job_nodes(spec: ClusterSpec, small: u32) -> Nodes {
        let small = small.min(spec.nodes);
        let words = (spec.nodes as usize).div_ceil(64);
        let mut buckets = vec![vec![0u64; words]; spec.gpus_per_node as usize + 1];
        for n in 0..spec.nodes as usize {
            buckets[spec.gpus_per_node as usize][n / 64] |= 1 << (n % 64);
        }
        Nodes {
            g: spec.gpus_per_node,
            small_from: spec.nodes - small,
            small_free: small * spec.gpus_per_node,
            free_mask: vec![full_mask(spec.gpus_per_node); spec.nodes as usize],
            free_count: vec![spec.gpus_per_node; spec.nodes as usize],
            buckets,
            free_total: spec.capacity(),
        }
    }

    pub fn free_total(&self) -> u32 {
        self.free_total
    }

    /// Whether `node` is kept for small jobs.
    pub fn is_small_job_node(&self, node: u32) -> bool {
        node >= self.small_from
    }

    /// Whether a job that may (`all`) or may not use the small-job nodes may use `node`.
    pub fn usable(&self, node: u32, all: bool) -> bool {
        all || node < self.small_from
    }

    /// Free GPUs a job may use: all, or those outside the small-job nodes.
    pub fn free_total_for(&self, all: bool) -> u32 {
        if all {
            self.free_total
        } else {
            self.free_total - self.small_free
        }
    }

    /// `fits_one` among the nodes a job may use.
    pub fn fits_one_for(&self, gpus: u32, all: bool) -> bool {
        if all || self.small_free == 0 {
            self.fits_one(gpus)
        } else {
            self.best_fit(gpus, |n| n < self.small_from).is_some()
        }
    }

    /// `whole_free` among the nodes a job may use.
    pub fn whole_free_for(&self, all: bool) -> u32 {
        let whole = self.whole_free();
        if all || self.small_free == 0 {
            whole
        } else {
            let n = self.free_mask.len() as u32;
            whole - (self.small_from..n).filter(|&x| self.free_on(x) == self.g).count() as u32
        }
    }

    /// Word `word` (as [`Buckets::at_least`]) of the set of nodes with
    /// fewer than `gpus` free GPUs that a job may use (`all`: the small-job
    /// nodes too).
    pub fn with_fewer_free_than(&self, gpus: u32, all: bool, word: usize) -> u64 {
        let fewer = self.buckets.iter().take(gpus as usize).fold(0, |acc, set| acc | set[word]);
        if all {
            return fewer;
        }
        // Nodes below small_from only.
        let first = word as u32 * 64;
        let usable = match self.small_from.saturating_sub(first) {
            0 => 0,
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        fewer & usable
    }

    pub fn free_on(&self, node: u32) -> u32 {
        self.free_count[node as usize]
    }

    fn rebucket(&mut self, node: u32, before: u32, after: u32) {
        let (w, b) = (node as usize / 64, node % 64);
        self.buckets[before as usize][w] &= !(1 << b);
        self.buckets[after as usize][w] |= 1 << b;
    }

    /// Takes `count` free slots of `node` (the lowest-numbered), returns them.
    pub fn take(&mut self, node: u32, count: u32) -> u64 {
        let free = self.free_mask[node as usize];
        debug_assert!(free.count_ones() >= count, "node {node} has {} free, {count} wanted", free.count_ones());
        let mut mask = 0u64;
        let mut rest = free;
        for _ in 0..count {
            let low = rest & rest.wrapping_neg();
            mask |= low;
            rest &= !low;
        }
        self.take_mask(node, mask);
        mask
    }

    /// Takes exactly the slots in `mask`, which must be free.
    pub fn take_mask(&mut self, node: u32, mask: u64) {
        let before = self.free_mask[node as usize];
        assert_eq!(before & mask, mask, "slots {mask:#b} of node {node} are not all free");
        let after = before & !mask;
        self.free_mask[node as usize] = after;
        self.free_count[node as usize] = after.count_ones();
        self.free_total -= mask.count_ones();
        if node >= self.small_from {
            self.small_free -= mask.count_ones();
        }
        self.rebucket(node, before.count_ones(), after.count_ones());
    }

    /// Frees the slots in `mask`, which must be taken.
    pub fn give(&mut self, node: u32, mask: u64) {
        let before = self.free_mask[node as usize];
        assert_eq!(before & mask, 0, "slots {mask:#b} of node {node} are already free");
        let after = before | mask;
        self.free_mask[node as usize] = after;
        self.free_count[node as usize] = after.count_ones();
        self.free_total += mask.count_ones();
        if node >= self.small_from {
            self.small_free += mask.count_ones();
        }
        self.rebucket(node, before.count_ones(), after.count_ones());
    }

    /// Nodes with exactly `free` free GPUs, lowest first.
    pub fn with_free(&self, free: u32) -> impl Iterator<Item = u32> + '_ {
        set_bits(&self.buckets[free as usize])
    }

    /// Whether some node has at least `gpus` free (`gpus` <= per node).
    pub fn fits_one(&self, gpus: u32) -> bool {
        (gpus..=self.g).any(|f| self.buckets[f as usize].iter().any(|&w| w != 0))
    }

    /// Number of wholly free nodes.
    pub fn whole_free(&self) -> u32 {
        self.buckets[self.g as usize].iter().map(|w| w.count_ones()).sum()
    }

    /// Best fit for a job of `gpus` <= per node among nodes `ok` accepts.
    pub fn best_fit(&self, gpus: u32, mut ok: impl FnMut(u32) -> bool) -> Option<u32> {
        (gpus..=self.g).find_map(|f| self.with_free(f).find(|&n| ok(n)))
    }

    /// The lowest-numbered node with at least `gpus` free that `ok` accepts.
    pub fn first_fit(&self, gpus: u32, mut ok: impl FnMut(u32) -> bool) -> Option<u32> {
        (gpus..=self.g).filter_map(|f| self.with_free(f).find(|&n| ok(n))).min()
    }

    /// The `count` lowest-numbered wholly free nodes that `ok` accepts.
    pub fn whole_nodes(&self, count: u32, mut ok: impl FnMut(u32) -> bool) -> Option<Vec<u32>> {
        let picked: Vec<u32> = self.with_free(self.g).filter(|&n| ok(n)).take(count as usize).collect();
        (picked.len() == count as usize).then_some(picked)
    }
}

/// Nodes bucketed by a small per-node number (0..=max), to find the nodes
/// with at least some value without scanning them all.
#[derive(Debug, Clone)]
pub(crate) struct Buckets {
    value: Vec<u32>,
    sets: Vec<Vec<u64>>,
}

impl Buckets {
    pub fn new(nodes: u32, max: u32, initial: u32) -> Buckets {
        let words = (nodes as usize).div_ceil(64);
        let mut sets = vec![vec![0u64; words]; max as usize + 1];
        for n in 0..nodes as usize {
            sets[initial as usize][n / 64] |= 1 << (n % 64);
        }
        Buckets { value: vec![initial; nodes as usize], sets }
    }

    pub fn set(&mut self, node: u32, value: u32) {
        let old = self.value[node as usize];
        if old == value {
            return;
        }
        let (w, b) = (node as usize / 64, node % 64);
        self.sets[old as usize][w] &= !(1 << b);
        self.sets[value as usize][w] |= 1 << b;
        self.value[node as usize] = value;
    }

    /// Words of the node bit sets (node n: bit n % 64 of word n / 64).
    pub fn words(&self) -> usize {
        self.sets.first().map_or(0, Vec::len)
    }

    /// Word `word` of the set of nodes whose value is at least `value`.
    pub fn at_least(&self, value: u32, word: usize) -> u64 {
        self.sets.iter().skip(value as usize).fold(0, |acc, set| acc | set[word])
    }
}

/// Indices of the set bits of a bit set stored as 64-bit words, lowest first.
fn set_bits(words: &[u64]) -> impl Iterator<Item = u32> + '_ {
    words.iter().enumerate().flat_map(|(w, &word)| {
        let mut bits = word;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let b = bits.trailing_zeros();
            bits &= bits - 1;
            Some(w as u32 * 64 + b)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shapes() {
        assert_eq!("75x8".parse::<ClusterSpec>().unwrap(), ClusterSpec { nodes: 75, gpus_per_node: 8 });
        assert_eq!("2X4".parse::<ClusterSpec>().unwrap().capacity(), 8);
        assert!("75".parse::<ClusterSpec>().unwrap_err().contains("NODESxGPUS"));
        assert!("0x8".parse::<ClusterSpec>().is_err());
        assert!("1x65".parse::<ClusterSpec>().is_err());
        let c = ClusterSpec { nodes: 4, gpus_per_node: 8 };
        assert_eq!(c.held_gpus(3), 3);
        assert_eq!(c.held_gpus(12), 16);
    }

    #[test]
    fn small_job_nodes_are_full_to_other_jobs() {
        let spec = ClusterSpec { nodes: 3, gpus_per_node: 4 };
        let mut n = Nodes::with_small_job_nodes(spec, 1);
        assert!(n.is_small_job_node(2) && !n.is_small_job_node(1));
        assert_eq!((n.free_total_for(true), n.free_total_for(false)), (12, 8));
        assert_eq!((n.whole_free_for(true), n.whole_free_for(false)), (3, 2));
        n.take(0, 4);
        n.take(1, 2);
        assert!(n.fits_one_for(3, true) && !n.fits_one_for(3, false));
        let m = n.take(2, 1);
        assert_eq!((n.free_total_for(true), n.free_total_for(false), n.whole_free_for(false)), (5, 2, 0));
        n.give(2, m);
        assert_eq!(n.free_total_for(true) - n.free_total_for(false), 4);
    }

    #[test]
    fn best_fit_packs_and_keeps_whole_nodes() {
        let mut n = Nodes::new(ClusterSpec { nodes: 3, gpus_per_node: 4 });
        assert_eq!(n.best_fit(1, |_| true), Some(0));
        n.take(0, 1);
        // The partly used node is the best fit for the next small job.
        assert_eq!(n.best_fit(2, |_| true), Some(0));
        n.take(0, 2);
        assert_eq!(n.best_fit(2, |_| true), Some(1));
        assert_eq!(n.whole_free(), 2);
        assert_eq!(n.whole_nodes(2, |_| true), Some(vec![1, 2]));
        assert_eq!(n.whole_nodes(2, |x| x != 1), None);
        assert_eq!(n.free_total(), 9);
        assert!(n.fits_one(4));
        let m = n.take(1, 4);
        n.take(2, 4);
        assert!(!n.fits_one(2));
        assert!(n.fits_one(1));
        n.give(1, m);
        assert_eq!(n.free_on(1), 4);
        assert_eq!(n.with_free(4).collect::<Vec<_>>(), vec![1]);
    }

    /// The bit-set queries of the preemption scan against a scan of every
    /// node, across a word boundary and the small-job nodes' start.
    #[test]
    fn bit_set_queries_match_a_scan_of_the_nodes() {
        let spec = ClusterSpec { nodes: 70, gpus_per_node: 8 };
        let mut nodes = Nodes::with_small_job_nodes(spec, 5);
        let mut reclaim = Buckets::new(spec.nodes, 8, 8);
        for n in 0..spec.nodes {
            nodes.take(n, (n * 7 + 3) % 9);
            reclaim.set(n, (n * 5 + 1) % 9);
        }
        let words = reclaim.words();
        assert_eq!(words, 2);
        let set = |word_of: &dyn Fn(usize) -> u64| -> Vec<u32> { (0..spec.nodes).filter(|&n| word_of(n as usize / 64) >> (n % 64) & 1 == 1).collect() };
        for gpus in 0..=9 {
            for all in [false, true] {
                let want: Vec<u32> = (0..spec.nodes).filter(|&n| nodes.usable(n, all) && nodes.free_on(n) < gpus).collect();
                assert_eq!(set(&|w| nodes.with_fewer_free_than(gpus, all, w)), want, "fewer than {gpus} free, all {all}");
            }
            let want: Vec<u32> = (0..spec.nodes).filter(|&n| (n * 5 + 1) % 9 >= gpus).collect();
            assert_eq!(set(&|w| reclaim.at_least(gpus, w)), want, "at least {gpus}");
        }
    }
}
