//! Preemption: which running jobs a waiting one may take (the policy
//! core's answer, with the books' shortcuts cross-checked against it), on
//! which nodes, and the preemption itself (grace time, claim, requeue).

use allot::budget::LeafId;
use allot::contract::{Contract, PriorityLevel};
use allot::fairshare::Ranking;
use allot::preempt::{grace_for, may_preempt_with, victim_order, within_team, Outranking, RunningJob, WaitingJob};

use super::events::EventKind;
use super::passes::Shadow;
use super::{Engine, JobRt, PolicyKind, Status};

/// What a failed preemption search depended on (the engine's room growth
/// and the signature of the leaves it may take from): while both stay the
/// same, searching again cannot succeed. Kept as one 64-bit hash, so the
/// per-job record is small: for one signature distinct growths give
/// distinct keys, and signatures are themselves 64 bits (the set of leaves
/// as bits, or beyond 64 leaves a hash of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SearchKey(std::num::NonZeroU64);

impl SearchKey {
    fn new(growth: u64, allowed: u64) -> SearchKey {
        // Multiplying by an odd constant is one-to-one.
        let key = allowed ^ growth.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        SearchKey(std::num::NonZeroU64::new(key).unwrap_or(std::num::NonZeroU64::MIN))
    }
}

/// [`Engine::smaller_failed`] for one leaf and priority: which of its
/// jobs a smaller teammate's failed search rules out this pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct SmallerFailed {
    /// A smaller teammate failed this pass, with no fewer possible victims.
    active: bool,
    from_gpus: u32,
    from_min_runtime: i64,
    /// Small jobs too (the one that failed was small: no job of the leaf may take more).
    small_too: bool,
}

impl SmallerFailed {
    pub(super) fn holds(&self, held: u32, min_runtime: i64, small: bool) -> bool {
        self.active && held >= self.from_gpus && min_runtime >= self.from_min_runtime && (self.small_too || !small)
    }
}

/// Buffers of [`Engine::plan_preemption`], reused so that a search
/// allocates nothing but its plan.
#[derive(Debug, Default)]
pub(super) struct PreemptScratch {
    candidates: Vec<u32>,
    victims: Vec<((u32, i64, u32), u32)>,
    /// Per node that could be made room on: (worst victim order, GPUs
    /// preempted, node) and its victims, `taken[from..to]`.
    best: Vec<((u32, u32, u32), usize, usize)>,
    taken: Vec<u32>,
    /// Wholly free nodes, for a job of whole nodes.
    free_nodes: Vec<u32>,
}

/// What [`Engine::is_victim_by_books`] asks of the waiting job.
struct VictimsOf {
    leaf: usize,
    row: usize,
    /// [`Engine::same_leaf_possible`].
    same_leaf: bool,
    contract: Contract,
}

impl VictimsOf {
    fn new(engine: &Engine, j: u32) -> VictimsOf {
        let job = &engine.jobs[j as usize];
        VictimsOf { leaf: job.leaf as usize, row: engine.row_of(j), same_leaf: engine.same_leaf_possible(j), contract: job.contract }
    }
}

/// A way to place a job by preempting: nodes, and victims.
pub(super) struct PreemptPlan {
    nodes: Vec<(u32, u32)>,
    victims: Vec<u32>,
    /// Made under rule 6 ([`Engine::plan_long_wait`]).
    long_wait: bool,
}

impl PreemptPlan {
    /// (node, GPUs the preemptor will hold there).
    pub(super) fn nodes(&self) -> &[(u32, u32)] {
        &self.nodes
    }
}

/// A plan from the nodes a search found, best first (each with the runs to
/// take there) and the nodes already free: as many of the found nodes as
/// the job needs beyond the free ones (at least one), then the free nodes.
fn assemble_plan<'a>(found: impl Iterator<Item = (u32, &'a [u32])>, free_nodes: &[u32], nodes_needed: usize, need: u32, long_wait: bool) -> PreemptPlan {
    let from_victims = nodes_needed - free_nodes.len().min(nodes_needed - 1);
    let mut plan = PreemptPlan { nodes: Vec::new(), victims: Vec::new(), long_wait };
    for (n, taken) in found.take(from_victims) {
        plan.nodes.push((n, need));
        for &v in taken {
            if !plan.victims.contains(&v) {
                plan.victims.push(v);
            }
        }
    }
    for &n in free_nodes.iter().take(nodes_needed - plan.nodes.len()) {
        plan.nodes.push((n, need));
    }
    plan
}

impl Engine<'_> {
    pub(super) fn running_view(&self, v: u32) -> RunningJob {
        let job = &self.jobs[v as usize];
        RunningJob { leaf: Some(job.leaf), contract: job.contract, run_start: job.run_start }
    }

    pub(super) fn waiting_view(&self, j: u32) -> WaitingJob {
        let job = &self.jobs[j as usize];
        WaitingJob { leaf: Some(job.leaf), contract: job.contract, gpus: job.held, queued_since: Some(job.queued_since) }
    }

    /// Whether `j` is a small job (`PreemptRules::is_small`: it preempts
    /// other leaves with no margin).
    pub(super) fn is_small(&self, j: u32) -> bool {
        self.rules.is_small(&self.waiting_view(j))
    }

    /// `j`'s preemption row: its leaf, and whether it is small. Jobs of one
    /// row may take the same other leaves' runs.
    pub(super) fn row_of(&self, j: u32) -> usize {
        self.jobs[j as usize].leaf as usize * 2 + usize::from(self.is_small(j))
    }

    /// Whether running job `v` may be preempted for `j` now: the policy's answer.
    pub(super) fn is_victim(&self, v: u32, j: u32, now: i64, ranking: Option<&Ranking>) -> bool {
        let victim = &self.jobs[v as usize];
        if victim.status != Status::Running {
            return false;
        }
        match ranking {
            Some(r) => may_preempt_with(&self.running_view(v), &self.waiting_view(j), now, r, self.rules).allowed(),
            None => !victim.contract.is_allocated(),
        }
    }

    /// The same answer from the books, for the search: free for all, or
    /// unprotected in a leaf whose jobs `j`'s leaf may take (row `w` of
    /// `allowed`, filled by `cross_victim_gpus` this pass), or unprotected in
    /// `j`'s own leaf with a contract rule 5 lets `j` take.
    pub(super) fn is_victim_by_books(&self, v: u32, j: u32) -> bool {
        self.is_victim_by_books_for(v, &VictimsOf::new(self, j))
    }

    /// [`Self::is_victim_by_books`] with what it asks of the waiting job read once.
    fn is_victim_by_books_for(&self, v: u32, of: &VictimsOf) -> bool {
        let victim = &self.jobs[v as usize];
        victim.status == Status::Running
            && (!victim.contract.is_allocated()
                || (victim.unprotected
                    && if victim.leaf as usize == of.leaf {
                        of.same_leaf && within_team(&victim.contract, &of.contract).allowed()
                    } else {
                        self.row_takes(of.row, victim.leaf as usize)
                    }))
    }

    /// Victim order, lowest first: the policy's `preemption_order`, then
    /// the latest start (least work lost), then the job id.
    pub(super) fn victim_key(&self, v: u32, ranking: Option<&Ranking>) -> (u32, i64, u32) {
        let job = &self.jobs[v as usize];
        let order = match ranking {
            Some(r) => victim_order(&self.running_view(v), job.held, self.workload.jobs[v as usize].resumable, r, self.rules),
            // Baseline: low priority first, when levels are in use.
            None if self.cfg.baseline_priority_levels => job.contract.priority as u32,
            None => 0,
        };
        (order, -job.run_start, self.workload.jobs[v as usize].job_id)
    }

    /// GPUs of other leaves' runs that `j` could take by preemption (with
    /// [`Self::same_leaf_gpus`], a fast necessary condition before the
    /// node-level search), and a signature of which leaves' jobs it may
    /// take. Fills `j`'s row of `allowed`. Allot: unallocated runs, plus the
    /// unprotected runs of every leaf that `allot::preempt::outranks` lets
    /// `j`'s leaf preempt (`check_policy` verifies the choice against
    /// `may_preempt` for every running job).
    pub(super) fn cross_victim_gpus(&mut self, j: u32, ranking: Option<&Ranking>) -> (u32, u64) {
        let allocated = self.jobs[j as usize].contract.is_allocated();
        self.cross_victim_gpus_of_row(self.row_of(j), allocated, ranking)
    }

    /// [`Self::cross_victim_gpus`] for the jobs of preemption row `row`.
    pub(super) fn cross_victim_gpus_of_row(&mut self, row: usize, allocated: bool, ranking: Option<&Ranking>) -> (u32, u64) {
        let Some(r) = ranking else { return (self.free_for_all_gpus, 0) };
        if self.victim_gpus_cache[row].0 == self.passes {
            // Which leaves is fixed for the pass (the ranking is); how many
            // of their GPUs are still running is not.
            let gpus = self.free_for_all_gpus
                + if self.leaves <= 64 {
                    self.unprotected_gpus_of(self.allowed_bits[row])
                } else {
                    self.allowed_list[row].iter().map(|&v| self.unprotected_gpus[v as usize]).sum::<u32>()
                };
            return (gpus, self.victim_gpus_cache[row].1);
        }
        let (w, small) = (row / 2, row % 2 == 1);
        // The margin of rule 4: none for small jobs.
        let margin = if small { 0.0 } else { r.preempt_margin };
        let outranking = self.outranking.get_or_insert_with(|| Outranking::new(r));
        // Unprotected allocated runs of leaf v: the policy's answer for them
        // depends only on the two leaves and the margin.
        let mask = match allocated {
            _ if self.leaves > 64 => None,
            true => outranking.allowed_mask(w as LeafId, r, margin),
            false => Some(0),
        };
        if let Some(m) = mask {
            // At most 64 leaves: the allowed leaves with unprotected runs,
            // as bits, are their own signature.
            let bits = m & self.unprotected_leaves;
            self.allowed_bits[row] = bits;
            self.victim_gpus_cache[row] = (self.passes, bits);
            return (self.free_for_all_gpus + self.unprotected_gpus_of(bits), bits);
        }
        let mut gpus = self.free_for_all_gpus;
        let mut sig: u64 = 0xcbf2_9ce4_8422_2325;
        let mut list = std::mem::take(&mut self.allowed_list[row]);
        list.clear();
        for v in 0..self.leaves {
            let allowed = allocated && !self.unprotected[v].is_empty() && outranking.allowed(v as LeafId, w as LeafId, r, margin);
            self.allowed[row * self.leaves + v] = allowed;
            if allowed {
                gpus += self.unprotected_gpus[v];
                sig = (sig ^ v as u64).wrapping_mul(0x100_0000_01b3);
                list.push(v as u32);
            }
        }
        self.allowed_list[row] = list;
        self.allowed_bits[row] = 0;
        self.victim_gpus_cache[row] = (self.passes, sig);
        (gpus, sig)
    }

    /// Unprotected GPUs of the leaves in `bits` (at most 64 leaves).
    fn unprotected_gpus_of(&self, mut bits: u64) -> u32 {
        let mut gpus = 0;
        while bits != 0 {
            gpus += self.unprotected_gpus[bits.trailing_zeros() as usize];
            bits &= bits - 1;
        }
        gpus
    }

    /// Word `word` of the set of nodes where some run that a job of row
    /// `row` (`same`: taking its own leaf's runs too) may take is: a node
    /// without one cannot be made room on.
    fn nodes_with_victims(&self, word: usize, row: usize, same: bool) -> u64 {
        let words = self.reclaim.words();
        let mut nodes = self.ffa_nodes[word];
        let mut with_leaf = |leaf: usize| nodes |= self.unprot_nodes[leaf * words + word];
        if self.leaves <= 64 {
            let mut bits = self.allowed_bits[row] & self.unprotected_leaves;
            while bits != 0 {
                with_leaf(bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        } else {
            self.allowed_list[row].iter().for_each(|&v| with_leaf(v as usize));
        }
        if same {
            with_leaf(row / 2);
        }
        nodes
    }

    /// Whether jobs of preemption row `row` may take leaf `v`'s unprotected
    /// runs (this pass, for the rows `cross_victim_gpus` filled).
    fn row_takes(&self, row: usize, v: usize) -> bool {
        if self.leaves <= 64 {
            self.allowed_bits[row] >> v & 1 == 1
        } else {
            self.allowed[row * self.leaves + v]
        }
    }

    /// GPUs on node `n` of the runs of other leaves that a job of
    /// preemption row `row` may take, and of free-for-all runs (from the
    /// books, for the rows `cross_victim_gpus` filled this pass).
    pub(super) fn reclaimable_on(&self, n: u32, row: usize) -> u32 {
        let mut r = self.ffa_on[n as usize];
        if self.unprot_on_total[n as usize] > 0 {
            let base = n as usize * self.leaves;
            if self.leaves <= 64 {
                // Only the allowed leaves that have unprotected GPUs here.
                let mut bits = self.allowed_bits[row] & self.unprot_leaves_on[n as usize];
                while bits != 0 {
                    r += self.unprot_on[base + bits.trailing_zeros() as usize];
                    bits &= bits - 1;
                }
            } else {
                for &v in &self.allowed_list[row] {
                    r += self.unprot_on[base + v as usize];
                }
            }
        }
        r
    }

    /// GPUs on node `n` of leaf `leaf`'s unprotected runs: all, and those
    /// of a priority below `priority` (what rule 5 may let a job of
    /// that priority take, whatever the minimum runtimes).
    fn own_leaf_on(&self, n: u32, leaf: usize, priority: PriorityLevel) -> (u32, u32) {
        let cell = n as usize * self.leaves + leaf;
        (self.unprot_on[cell], self.unprot_on_below[cell][..priority as usize].iter().sum())
    }

    /// Allot with preemption within a team: `j` may take GPUs of some
    /// unprotected runs of its own leaf: some of them declare a lower
    /// priority than `j` (rule 5 takes no other). Where none does, rule 5
    /// changes nothing for `j`, and `j`'s searches are those it would have
    /// with `preempt_within_team` off.
    pub(super) fn same_leaf_possible(&self, j: u32) -> bool {
        let job = &self.jobs[j as usize];
        self.same_leaf_possible_in(job.leaf as usize, job.contract.is_allocated(), job.contract.priority)
    }

    /// [`Self::same_leaf_possible`] for a job of `leaf`, allocated or not,
    /// of declared `priority`.
    pub(super) fn same_leaf_possible_in(&self, leaf: usize, allocated: bool, priority: PriorityLevel) -> bool {
        self.cfg.policy == PolicyKind::Allot
            && self.rules.within_team
            && allocated
            && self.unprotected_by_contract[leaf][..priority as usize].iter().any(|runs| !runs.is_empty())
    }

    /// GPUs of the unprotected runs of `j`'s own leaf that `j` may take
    /// (rule 5, `allot::preempt::within_team`). `any_guarantee`: ignoring
    /// the minimum-runtime part, for a bound over every job of `j`'s group.
    pub(super) fn same_leaf_gpus(&self, j: u32, any_guarantee: bool) -> u32 {
        if !self.same_leaf_possible(j) {
            return 0;
        }
        let job = &self.jobs[j as usize];
        let mut waiting = job.contract;
        if any_guarantee {
            waiting.min_runtime = 0;
        }
        self.same_leaf_gpus_for(job.leaf as usize, &waiting)
    }

    /// [`Self::same_leaf_gpus`] for a job of `leaf` with contract `waiting`,
    /// once [`Self::same_leaf_possible`] holds for it.
    pub(super) fn same_leaf_gpus_for(&self, leaf: usize, waiting: &Contract) -> u32 {
        // Rule 5 depends on the two contracts only: asked once per contract
        // the leaf's unprotected runs have.
        let mut gpus = 0;
        for (level, counts) in [PriorityLevel::Low, PriorityLevel::Normal, PriorityLevel::High].into_iter().zip(&self.unprotected_by_contract[leaf]) {
            for &(min_runtime, held) in counts {
                if within_team(&Contract { min_runtime, priority: level }, waiting).allowed() {
                    gpus += held;
                }
            }
        }
        gpus
    }

    /// Whether a job of leaf `w` (`held` GPUs, priority, minimum runtime,
    /// small or not) cannot find room by preemption because a smaller job
    /// of its leaf, with no fewer possible victims, found none this pass
    /// (room only shrinks during a pass).
    pub(super) fn smaller_failed(&self, w: usize, held: u32, prio: PriorityLevel, minrt: i64, small: bool) -> bool {
        self.smaller_failed_test(w, prio).holds(held, minrt, small)
    }

    /// [`Self::smaller_failed`] for the jobs of leaf `w` and priority
    /// `prio`, read once (it holds until the leaf's record changes).
    pub(super) fn smaller_failed_test(&self, w: usize, prio: PriorityLevel) -> SmallerFailed {
        let (stamp, fail_at, fail_prio, fail_minrt, fail_small) = self.leaf_fail[w];
        // Rule 5 matters only where a job of this priority could take a
        // teammate's run; elsewhere the test is the one without rule 5.
        let within_team = self.same_leaf_possible_in(w, true, prio);
        if stamp != self.passes || (within_team && prio > fail_prio) {
            return SmallerFailed { active: false, from_gpus: 0, from_min_runtime: 0, small_too: false };
        }
        SmallerFailed { active: true, from_gpus: fail_at, from_min_runtime: if within_team { fail_minrt } else { i64::MIN }, small_too: fail_small }
    }

    /// Whether the last preemption search of `j` (of preemption row `row`)
    /// failed in circumstances that still hold (then searching again
    /// cannot succeed). Allot: only once the row's victims are known this pass.
    pub(super) fn search_failed_before(&self, j: u32, row: usize, allot: bool) -> bool {
        self.search_key(row, allot).is_some_and(|key| self.failed_search[j as usize] == Some(key))
    }

    /// A failed search for `j`: for its leaf's smaller-job test this pass
    /// and, with its key, for searching again (a failure that depended on
    /// a reservation has none: the next pass may have no reservation).
    pub(super) fn remember_failure(&mut self, j: u32, key: Option<SearchKey>) -> bool {
        let small = self.is_small(j);
        let job = &self.jobs[j as usize];
        let (leaf, held, contract) = (job.leaf as usize, job.held, job.contract);
        self.remember_failure_of(j, leaf, held, contract, small, key)
    }

    /// [`Self::remember_failure`] given the job's leaf, GPUs, contract and
    /// whether it is small; whether its leaf's smaller-job record changed.
    pub(super) fn remember_failure_of(&mut self, j: u32, leaf: usize, held: u32, contract: Contract, small: bool, key: Option<SearchKey>) -> bool {
        if key.is_some() {
            self.failed_search[j as usize] = key;
        }
        let record = (self.passes, held, contract.priority, contract.min_runtime, small);
        let e = &mut self.leaf_fail[leaf];
        let changed = e.0 != record.0 || record.1 < e.1;
        if changed {
            *e = record;
        }
        changed
    }

    /// What a search for a job of preemption row `row` now depends on
    /// (allot: once the row's victims are known this pass).
    pub(super) fn search_key(&self, row: usize, allot: bool) -> Option<SearchKey> {
        let allowed = match allot {
            false => 0,
            true if self.victim_gpus_cache[row].0 == self.passes => self.victim_gpus_cache[row].1,
            true => return None,
        };
        Some(SearchKey::new(self.growth, allowed))
    }

    /// Finds nodes and victims that make room for `j`, or `None`.
    /// Preemption ignores the backfill reservation, as Slurm's main
    /// scheduler preempts without knowing of backfill's plans.
    /// `around`: a backfill reservation to leave alone.
    pub(super) fn plan_preemption(
        &mut self,
        j: u32,
        now: i64,
        ranking: Option<&Ranking>,
        around: Option<&Shadow>,
        searches: &mut usize,
    ) -> Option<PreemptPlan> {
        let mut scratch = std::mem::take(&mut self.preempt_scratch);
        let plan = self.plan_preemption_with(&mut scratch, j, now, ranking, around, searches);
        self.preempt_scratch = scratch;
        plan
    }

    #[inline(never)]
    fn plan_preemption_with(
        &mut self,
        scratch: &mut PreemptScratch,
        j: u32,
        now: i64,
        ranking: Option<&Ranking>,
        around: Option<&Shadow>,
        searches: &mut usize,
    ) -> Option<PreemptPlan> {
        let held = self.jobs[j as usize].held;
        let w = self.jobs[j as usize].leaf as usize;
        // Room only shrinks during a pass: a smaller job of the same leaf,
        // with no fewer possible victims, found none. (Asked first, as it
        // is the cheapest answer; tests ask it after checking the victims.)
        let (prio, minrt) = (self.jobs[j as usize].contract.priority, self.jobs[j as usize].contract.min_runtime);
        let small = self.is_small(j);
        let smaller_failed = self.smaller_failed(w, held, prio, minrt, small);
        if smaller_failed && !self.cfg.check_policy {
            return None;
        }
        let all = self.may_use_all_nodes(j);
        let (cross, sig) = self.cross_victim_gpus(j, ranking);
        // Every unprotected GPU of its own leaf bounds what rule 5 lets it take.
        let same_bound = if self.same_leaf_possible(j) { self.unprotected_gpus[w] } else { 0 };
        if self.nodes.free_total_for(all) + cross + same_bound < held && !self.cfg.check_policy {
            return None;
        }
        let victim_gpus = cross + self.same_leaf_gpus(j, false);
        if self.cfg.check_policy {
            self.check_victim_total(j, now, ranking, victim_gpus);
        }
        if self.nodes.free_total_for(all) + victim_gpus < held {
            return None;
        }
        let g = self.g;
        let whole = held > g;
        let need = held.min(g);
        let nodes_needed = if whole { (held / g) as usize } else { 1 };
        let key = SearchKey::new(self.growth, sig);
        if self.failed_search[j as usize] == Some(key) {
            return None; // nothing that could help has changed since the last search failed
        }
        let row = self.row_of(j);
        if smaller_failed {
            return None;
        }
        // Where a reservation must be left alone (its nodes, if the
        // preemptor would still run at its start). A failure that depended
        // on it is not remembered past this pass: the next may have none.
        let end = now + self.max_grace() + self.remaining(j);
        let reserved = |n: u32, gpus: u32| around.is_some_and(|s| !s.allows(n, gpus, end));
        let fail = |this: &mut Self| {
            this.remember_failure(j, around.is_none().then_some(key));
        };
        let same = self.same_leaf_possible(j);
        // Nodes where free GPUs and this job's possible victims make room
        // (none if none were for a job of the same row, nodes and need
        // since the last start or preemption: nothing else adds room). The
        // possible victims of its own leaf, for the count of searches
        // (`preempt_max_job_test`): all its unprotected runs; for the nodes
        // searched: those of a lower priority (rule 5 takes no other).
        let none_key = self.no_candidates_key(row, all, same, need);
        let candidates = &mut scratch.candidates;
        candidates.clear();
        let mut counted = 0;
        if around.is_some() || !self.known_no_candidates(none_key) {
            // Nodes usable, with too few free GPUs, and room enough counting
            // every possible victim (the bit sets narrow before any is read).
            for word in 0..self.reclaim.words() {
                let mut bits = self.reclaim.at_least(need, word) & self.nodes.with_fewer_free_than(need, all, word) & self.nodes_with_victims(word, row, same);
                while bits != 0 {
                    let n = word as u32 * 64 + bits.trailing_zeros();
                    bits &= bits - 1;
                    if reserved(n, need) {
                        continue;
                    }
                    let room = self.nodes.free_on(n) + self.reclaimable_on(n, row);
                    let (own, below) = if same { self.own_leaf_on(n, w, prio) } else { (0, 0) };
                    if room + own >= need {
                        counted += 1;
                        if room + below >= need {
                            candidates.push(n);
                        }
                    }
                }
            }
            if counted == 0 && around.is_none() {
                self.no_candidates[none_key] = (self.passes, self.placements);
            }
        }
        if self.cfg.check_policy && around.is_none() {
            self.check_candidates(j, need, all, candidates);
        }
        let free_nodes = &mut scratch.free_nodes;
        free_nodes.clear();
        if whole {
            free_nodes.extend(self.nodes.with_free(g).filter(|&n| self.nodes.usable(n, all) && !reserved(n, g)).take(nodes_needed));
        }
        if counted == 0 || counted + free_nodes.len() < nodes_needed {
            fail(self);
            return None;
        }
        if candidates.is_empty() || candidates.len() + free_nodes.len() < nodes_needed {
            // No node can be made room on by the runs rule 5 lets it take.
            fail(self);
            return None;
        }
        // Only a search that can succeed counts (`preempt_max_job_test`):
        // in Slurm a job's preemptee list holds only the runs the preempt
        // plugin allows (`slurm_find_preemptable_jobs`, src/interfaces/
        // preempt.c, 24.11), and with none cons_tres does not try it with
        // preemption at all (`_will_run_test`, job_test.c); so a rule that
        // adds no candidate changes nothing there, nor here.
        *searches += 1;
        self.preempt_searches += 1;
        let (best, victims, taken) = (&mut scratch.best, &mut scratch.victims, &mut scratch.taken);
        let of = VictimsOf::new(self, j);
        best.clear();
        taken.clear();
        for &n in candidates.iter() {
            victims.clear();
            let mut blocked = false;
            for &v in &self.on_node[n as usize] {
                if self.is_victim_by_books_for(v, &of) {
                    victims.push((self.victim_key(v, ranking), v));
                } else if whole {
                    blocked = true; // a whole node is needed and this job stays
                    break;
                }
            }
            if blocked {
                continue;
            }
            victims.sort_unstable();
            let mut got = self.nodes.free_on(n);
            let from = taken.len();
            let (mut worst, mut preempted) = (0u32, 0u32);
            for &(key, v) in victims.iter() {
                if got >= need {
                    break;
                }
                let on = self.gpus_on(v, n);
                got += on;
                preempted += on;
                worst = worst.max(key.0);
                taken.push(v);
            }
            if got >= need {
                best.push(((worst, preempted, n), from, taken.len()));
            } else {
                taken.truncate(from);
            }
        }
        if best.is_empty() || best.len() + free_nodes.len() < nodes_needed {
            fail(self);
            return None;
        }
        // Lowest in the preemption order first, then fewest GPUs preempted.
        best.sort_unstable_by_key(|b| b.0);
        let plan = assemble_plan(best.iter().map(|&((_, _, n), from, to)| (n, &taken[from..to])), free_nodes, nodes_needed, need, false);
        // Every victim, asked of the policy itself.
        for &v in &plan.victims {
            if !self.is_victim(v, j, now, ranking) {
                assert!(!self.cfg.check_policy, "job {v} chosen from the books as a victim for job {j}, but may_preempt refuses");
                fail(self);
                return None;
            }
        }
        Some(plan)
    }

    /// Whether `j` is one of rule 6's jobs now (`PreemptRules::is_long_waiting`).
    pub(super) fn is_long_waiting(&self, j: u32, now: i64, ranking: Option<&Ranking>) -> bool {
        self.rules.large_job_wait > 0 && ranking.is_some_and(|r| self.rules.is_long_waiting(&self.waiting_view(j), now, r))
    }

    /// Rule 6's search, for a long-waiting large job `j`: the nodes where
    /// free GPUs and the runs it may take (unallocated; another leaf's past
    /// their minimum runtime and `j`'s, of a leaf above `j`'s with no margin;
    /// its own leaf's as rule 5 allows) make room, as
    /// Slurm's node selection with preemption picks them; the fewest and
    /// lowest victims first, then wholly free nodes. Such jobs are few (a
    /// large job's team under its share, after a long wait), so a plain
    /// scan of the nodes, skipped while nothing has been freed or become
    /// unprotected since its last search failed. `around`: a backfill
    /// reservation to leave alone.
    pub(super) fn plan_long_wait(&mut self, j: u32, now: i64, ranking: Option<&Ranking>, around: Option<&Shadow>, searches: &mut usize) -> Option<PreemptPlan> {
        let (held, w, contract) = (self.jobs[j as usize].held, self.jobs[j as usize].leaf, self.jobs[j as usize].contract);
        let g = self.g;
        let whole = held > g;
        let need = held.min(g);
        let nodes_needed = if whole { (held / g) as usize } else { 1 };
        // Remembered per pass, as the ranking it asks is (the growth alone
        // would miss a standing that changed).
        let key = SearchKey::new(self.growth ^ self.passes.rotate_left(32), u64::MAX);
        if self.failed_search[j as usize] == Some(key) {
            return None;
        }
        let all = self.may_use_all_nodes(j);
        let end = now + self.max_grace() + self.remaining(j);
        let takes = |v: &JobRt| {
            v.status == Status::Running
                && (!v.contract.is_allocated()
                    || (v.unprotected
                        && if v.leaf == w {
                            self.rules.within_team && within_team(&v.contract, &contract).allowed()
                        } else {
                            now - v.run_start >= contract.min_runtime // rule 6's anti-thrash part
                                && ranking.is_some_and(|r| allot::preempt::outranks_by(v.leaf, w, r, 0.0).allowed())
                        }))
        };
        let mut free_nodes: Vec<u32> = Vec::new();
        // ((worst victim key, GPUs preempted, node), victims).
        let mut best: Vec<((u32, u32, u32), Vec<u32>)> = Vec::new();
        for n in 0..self.cfg.cluster.nodes {
            if !self.nodes.usable(n, all) || around.is_some_and(|s| !s.allows(n, need, end)) {
                continue;
            }
            let free = self.nodes.free_on(n);
            if free >= need {
                free_nodes.push(n);
                continue;
            }
            let mut victims: Vec<((u32, i64, u32), u32)> = Vec::new();
            let mut blocked = false;
            for &v in &self.on_node[n as usize] {
                if takes(&self.jobs[v as usize]) {
                    victims.push((self.victim_key(v, ranking), v));
                } else if whole {
                    blocked = true; // a whole node is needed and this job stays
                    break;
                }
            }
            if blocked {
                continue;
            }
            victims.sort_unstable();
            let (mut got, mut preempted, mut worst, mut taken) = (free, 0u32, 0u32, Vec::new());
            for &(key, v) in &victims {
                if got >= need {
                    break;
                }
                let on = self.gpus_on(v, n);
                got += on;
                preempted += on;
                worst = worst.max(key.0);
                taken.push(v);
            }
            if got >= need {
                best.push(((worst, preempted, n), taken));
            }
        }
        if best.is_empty() || best.len() + free_nodes.len() < nodes_needed {
            if around.is_none() {
                self.failed_search[j as usize] = Some(key);
            }
            return None;
        }
        *searches += 1;
        self.preempt_searches += 1;
        best.sort_unstable_by_key(|b| b.0);
        let plan = assemble_plan(best.iter().map(|((_, _, n), taken)| (*n, taken.as_slice())), &free_nodes, nodes_needed, need, true);
        // Every victim, asked of the policy itself.
        for &v in &plan.victims {
            if !self.is_victim(v, j, now, ranking) {
                assert!(!self.cfg.check_policy, "job {v} chosen as a victim for long-waiting job {j}, but may_preempt refuses");
                return None;
            }
        }
        Some(plan)
    }

    /// Where [`Self::plan_preemption`] remembers that no node could be made
    /// room on for a job of preemption row `row`, using the small-job nodes
    /// or not (`all`), taking its own leaf's runs or not (`same`), needing
    /// `need` GPUs on a node.
    pub(super) fn no_candidates_key(&self, row: usize, all: bool, same: bool, need: u32) -> usize {
        ((row * 2 + usize::from(all)) * 2 + usize::from(same)) * (self.g as usize + 1) + need as usize
    }

    /// Whether no node could be made room on for such a job since the last
    /// start or preemption of this pass (nothing else adds room).
    pub(super) fn known_no_candidates(&self, key: usize) -> bool {
        self.no_candidates[key] == (self.passes, self.placements)
    }

    /// The longest grace time a victim gets: when a preemptor starts, at the latest.
    pub(super) fn max_grace(&self) -> i64 {
        self.cfg.tree.settings.grace.max(self.cfg.tree.settings.unallocated_grace)
    }

    pub(super) fn gpus_on(&self, v: u32, node: u32) -> u32 {
        self.jobs[v as usize].alloc.iter().filter(|(n, _)| *n == node).map(|(_, m)| m.count_ones()).sum()
    }

    /// Tests: every node left out of `j`'s search (by the bounds, or the
    /// record that none had room) has too few GPUs free and to take from
    /// the runs the books let `j` preempt.
    fn check_candidates(&self, j: u32, need: u32, all: bool, candidates: &[u32]) {
        let of = VictimsOf::new(self, j);
        for n in 0..self.cfg.cluster.nodes {
            if !self.nodes.usable(n, all) || self.nodes.free_on(n) >= need || candidates.contains(&n) {
                continue;
            }
            let victims: u32 = self.on_node[n as usize].iter().filter(|&&v| self.is_victim_by_books_for(v, &of)).map(|&v| self.gpus_on(v, n)).sum();
            let room = self.nodes.free_on(n) + victims;
            assert!(room < need, "node {n} has room for job {j} ({room} of {need} GPUs, free and to take), but its search left the node out");
        }
    }

    /// Tests: the fast victim total is what asking `may_preempt` of every
    /// running job gives.
    pub(super) fn check_victim_total(&self, j: u32, now: i64, ranking: Option<&Ranking>, fast: u32) {
        let slow: u32 = (0..self.jobs.len() as u32).filter(|&v| self.is_victim(v, j, now, ranking)).map(|v| self.jobs[v as usize].held).sum();
        if fast != slow {
            let detail: Vec<String> = (0..self.jobs.len() as u32)
                .filter(|&v| self.jobs[v as usize].status == Status::Running)
                .map(|v| {
                    let job = &self.jobs[v as usize];
                    format!(
                        "job {v} leaf {} held {} allocated {} unprotected {} policy {}",
                        job.leaf,
                        job.held,
                        job.contract.is_allocated(),
                        job.unprotected,
                        self.is_victim(v, j, now, ranking)
                    )
                })
                .collect();
            panic!(
                "{:?}: victim GPUs for job {j} (leaf {}) at {now}: shortcut {fast}, policy {slow}\n{}",
                self.cfg.policy,
                self.jobs[j as usize].leaf,
                detail.join("\n")
            );
        }
        for v in 0..self.jobs.len() as u32 {
            if ranking.is_some() && self.jobs[v as usize].status == Status::Running {
                assert_eq!(self.is_victim_by_books(v, j), self.is_victim(v, j, now, ranking), "books and policy disagree on job {v} as a victim of job {j}");
            }
        }
    }

    /// A victim's grace time: allot's `grace_for` (unallocated runs get
    /// `unallocated_grace`); baseline: the one grace time for all.
    pub(super) fn grace_of(&self, v: u32) -> i64 {
        match self.cfg.policy {
            PolicyKind::Allot => grace_for(&self.running_view(v), &self.cfg.tree.settings),
            PolicyKind::Baseline => self.cfg.tree.settings.grace.max(0),
        }
    }

    pub(super) fn execute_preemption(&mut self, j: u32, now: i64, plan: PreemptPlan) {
        self.placements += 1;
        // The preemptor starts when the last of its victims is gone.
        let grace = plan.victims.iter().map(|&v| self.grace_of(v)).max().unwrap_or(0);
        self.dequeue(j);
        let mut alloc = Vec::new();
        let mut owed = Vec::new();
        for &(n, need) in &plan.nodes {
            let take = self.nodes.free_on(n).min(need);
            if take > 0 {
                self.claimed += take;
                alloc.push((n, self.nodes.take(n, take)));
                self.refresh_reclaim(n);
                if !self.on_node[n as usize].contains(&j) {
                    self.on_node[n as usize].push(j);
                }
            }
            owed.push((n, need - take));
        }
        if self.cfg.policy == PolicyKind::Baseline {
            // Hold its place within the team's limit through the grace time.
            let job = &self.jobs[j as usize];
            self.guaranteed_gpus[job.leaf as usize] += job.held;
        }
        let job = &mut self.jobs[j as usize];
        job.status = Status::Starting;
        job.alloc = alloc;
        job.owed = owed;
        // The victims' runs end at the kill; their GPUs are free once they
        // are gone, `kill_wait` later if they ignore the signals.
        let start_at = now + grace + self.cfg.kill_wait.max(0);
        let expected_end = start_at + self.remaining(j);
        self.set_release(j, expected_end);
        let preemptor_leaf = self.jobs[j as usize].leaf;
        for &v in &plan.victims {
            let grace = self.grace_of(v);
            self.drop_victim_books(v);
            let victim = &mut self.jobs[v as usize];
            victim.status = Status::Grace;
            victim.signal_at = now;
            victim.kill_at = now + grace;
            victim.claim_for = Some(j);
            // Rule 6 itself took it (not rule 2's unallocated, nor rule 5's teammate).
            victim.claim_long_wait = plan.long_wait && victim.contract.is_allocated() && victim.leaf != preemptor_leaf;
            let (natural_end, run_no) = (victim.natural_end, victim.run_no);
            if now + grace < natural_end {
                self.queue.push(now + grace, EventKind::Release, v, run_no);
            }
            // Its GPUs go to j, free for others only when j ends.
            self.set_release(v, expected_end);
        }
        self.queue.push(start_at, EventKind::StartClaimed, j, 0);
    }
}
