//! The scheduling passes, as Slurm's: the main scheduler after the events
//! of an instant, backfill every `bf_interval`; placement on free GPUs and
//! the backfill reservation (EASY: one per pass).

use allot::fairshare::Ranking;
use allot::order::{order_jobs, PendingJob, QueueGroup};
use allot::preempt::may_preempt_with;

use super::preemption::SmallerFailed;
use super::waiting::{ChunkSummary, Position};
use super::{Engine, Placement, PolicyKind};

/// What a pass has learnt so far.
pub(super) struct PassState {
    mode: Mode,
    victims_exist: bool,
    /// Node-level preemption searches made.
    searches: usize,
    /// Held-GPU count from which nothing fits on free GPUs any more
    /// (fitting is monotone in size, and free GPUs only shrink in a pass),
    /// for jobs that may not (`[0]`) and may (`[1]`) use the small-job nodes.
    min_fail: [u32; 2],
    /// The same for jobs that would end after the reservation's start
    /// (they must also leave its GPUs alone; its slack only shrinks too).
    min_fail_late: [u32; 2],
    shadow: Option<Shadow>,
    /// (group, the most GPUs a job of the group could find free or by
    /// preemption) when first asked this pass: an upper bound for the rest
    /// of the pass (a pass only takes GPUs and runs away).
    group_room: Option<(usize, u32)>,
    /// Past the reservation, the walk through one group.
    walk: Walk,
}

/// Past the reservation, the walk through one group's line: its position
/// (a pass adds no pending job, and jobs that start leave their place, so
/// positions hold for the pass).
#[derive(Default, Clone, Copy)]
pub(super) struct Walk {
    group: Option<usize>,
    /// Entries before it were visited or skipped.
    position: Position,
}

/// A group's turn in a pass: what its jobs share, read once.
pub(super) struct GroupTurn {
    group: usize,
    /// Its first job at the start of its turn.
    head: u32,
    allocated: bool,
    leaf: usize,
    priority: allot::contract::PriorityLevel,
}

impl GroupTurn {
    fn of(engine: &Engine, group: usize, head: u32) -> GroupTurn {
        match engine.cfg.policy {
            // Allot's groups are the policy's: their index says it all.
            PolicyKind::Allot => {
                let q = QueueGroup::at(group, engine.leaves);
                GroupTurn { group, head, allocated: q.allocated, leaf: q.leaf as usize, priority: q.priority }
            }
            PolicyKind::Baseline => {
                let job = &engine.jobs[head as usize];
                GroupTurn { group, head, allocated: job.contract.is_allocated(), leaf: job.leaf as usize, priority: job.contract.priority }
            }
        }
    }

    /// [`Engine::same_leaf_possible`] for the group's jobs.
    fn same_leaf_possible(&self, engine: &Engine) -> bool {
        engine.same_leaf_possible_in(self.leaf, self.allocated, self.priority)
    }
}

/// Which scheduler runs a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// After events: starts jobs in order until one cannot start.
    Main,
    /// Every `bf_interval`: deeper, with a reservation for the first
    /// blocked job and backfill around it.
    Backfill,
}

/// The earliest start of the first blocked job, and the GPUs it needs then.
pub(super) struct Shadow {
    time: i64,
    /// (node, GPUs that may still be used past `time`).
    slack: Vec<(u32, u32)>,
}

impl Shadow {
    pub(super) fn slack_of(&self, node: u32) -> Option<u32> {
        self.slack.iter().find(|(n, _)| *n == node).map(|&(_, s)| s)
    }
    pub(super) fn allows(&self, node: u32, gpus: u32, end: i64) -> bool {
        end <= self.time || self.slack_of(node).is_none_or(|s| s >= gpus)
    }
    pub(super) fn consume(&mut self, node: u32, gpus: u32, end: i64) {
        if end > self.time {
            if let Some(e) = self.slack.iter_mut().find(|(n, _)| *n == node) {
                e.1 -= gpus;
            }
        }
    }
}

impl Engine<'_> {
    pub(super) fn pass(&mut self, now: i64, mode: Mode) {
        self.passes += 1;
        if self.pending == 0 {
            return;
        }
        let victims_exist = self.free_for_all_gpus > 0 || self.unprotected_gpus.iter().any(|&g| g > 0);
        if self.nodes.free_total() == 0 && !victims_exist {
            return; // nothing can start and nothing can be preempted
        }
        let ranking = match self.cfg.policy {
            PolicyKind::Allot => {
                self.window.usage_all(now, &mut self.usage);
                let lookahead = self.cfg.tree.settings.lookahead;
                if lookahead > 0 {
                    self.window.running_all(&mut self.running);
                    allot::fairshare::with_lookahead(&mut self.usage, &self.running, lookahead);
                }
                let capacity = self.cfg.cluster.capacity();
                Some(match self.ranking.take() {
                    Some(mut r) => {
                        self.ranker.rank_into(&self.usage, capacity, now, &mut r);
                        r
                    }
                    None => self.ranker.rank(&self.usage, capacity, now),
                })
            }
            PolicyKind::Baseline => None,
        };
        let mut order = std::mem::take(&mut self.group_order_buffer);
        self.group_order(ranking.as_ref(), &mut order);
        if self.cfg.check_policy {
            self.check_order(&order, ranking.as_ref());
        }
        let depth = match mode {
            Mode::Main => self.cfg.default_queue_depth,
            Mode::Backfill => self.cfg.bf_max_job_test,
        };
        let mut st = PassState {
            mode,
            victims_exist,
            searches: 0,
            min_fail: [u32::MAX; 2],
            min_fail_late: [u32::MAX; 2],
            shadow: None,
            group_room: None,
            walk: Walk::default(),
        };
        let mut tested = 0usize;
        'groups: for &g in &order {
            if tested >= depth {
                break;
            }
            // No walk is in this line yet (a job's turn removes only itself).
            self.groups[g].tidy();
            // The jobs this pass tests are the first `depth` in the order;
            // `cutoff` is the last one of this group among them.
            let len = self.groups[g].len();
            let remaining = depth - tested;
            let cutoff = if len > remaining { self.groups[g].nth(remaining - 1) } else { None };
            // Tidied: its first entry is a job (what its group shares is read once).
            let Some(head) = self.groups[g].first() else { continue };
            let turn = GroupTurn::of(self, g, head);
            let mut cursor: Option<u32> = None;
            // Before the reservation: the place of the next job in the line.
            let mut in_order = Position::default();
            loop {
                let next = if st.shadow.is_none() {
                    // In order, until a job blocks and takes the reservation.
                    self.groups[g].live_from(in_order).map(|(at, j)| {
                        in_order = self.groups[g].step(at);
                        j
                    })
                } else {
                    // Past the reservation a job that can neither fit nor
                    // preempt does nothing: visit only jobs that might.
                    self.next_that_might_start(&turn, cursor, cutoff, now, &mut st, ranking.as_ref())
                };
                let Some(j) = next.filter(|&j| cutoff.is_none_or(|c| j <= c)) else { break };
                cursor = Some(j);
                if !self.try_job(j, now, &mut st, ranking.as_ref()) {
                    break 'groups;
                }
            }
            tested += len.min(remaining);
        }
        // Their buffers serve the next pass.
        self.ranking = ranking;
        self.group_order_buffer = order;
    }

    /// One job's turn in a pass: start it, preempt for it, or (the first
    /// blocked one in a backfill pass) reserve for it. False: the pass is over.
    // Out of line, as the other large steps of a pass (find_place,
    // reserve, plan_preemption_with, the walk): the pass loop stays small
    // (measured: fewer instructions than inlined).
    #[inline(never)]
    pub(super) fn try_job(&mut self, j: u32, now: i64, st: &mut PassState, ranking: Option<&Ranking>) -> bool {
        let allocated = self.jobs[j as usize].contract.is_allocated();
        if self.cfg.policy == PolicyKind::Baseline && allocated && !self.within_limit(j) {
            return true; // held by its team's limit (Slurm: pending, QOSGrpGRES); blocks no one
        }
        let held = self.jobs[j as usize].held;
        let end = now + self.remaining(j);
        let all = self.may_use_all_nodes(j);
        let late = st.shadow.as_ref().is_some_and(|s| end > s.time);
        if held < st.min_fail[usize::from(all)] && !(late && held >= st.min_fail_late[usize::from(all)]) {
            if let Some(place) = self.find_place(held, end, st.shadow.as_ref(), all) {
                self.start_now(j, now, place, st.shadow.as_mut(), end);
                return true;
            }
            if late {
                st.min_fail_late[usize::from(all)] = held;
                st.min_fail_late[0] = st.min_fail_late[0].min(held);
            }
            if !self.fits_free(held, all) {
                // What fits nowhere fits nowhere outside the small-job nodes either.
                st.min_fail[usize::from(all)] = held;
                st.min_fail[0] = st.min_fail[0].min(held);
            }
        }
        // Preemptible jobs never preempt (allot: the policy refuses
        // unallocated preemptors itself; skipping the search saves time).
        if allocated && st.searches < self.cfg.preempt_max_job_test {
            let around = if self.cfg.preempt_around_reservation { st.shadow.as_ref() } else { None };
            let plan = if self.is_long_waiting(j, now, ranking) {
                self.plan_long_wait(j, now, ranking, around, &mut st.searches)
            } else {
                self.plan_preemption(j, now, ranking, around, &mut st.searches)
            };
            if let Some(plan) = plan {
                if let Some(s) = st.shadow.as_mut().filter(|_| self.cfg.preempt_around_reservation) {
                    let end = now + self.max_grace() + self.remaining(j);
                    for &(n, c) in plan.nodes() {
                        s.consume(n, c, end);
                    }
                }
                self.execute_preemption(j, now, plan);
                return true;
            }
        }
        if st.mode == Mode::Main {
            return false; // the main scheduler stops at the first job that cannot start
        }
        if st.shadow.is_none() {
            st.shadow = self.reserve(j, now, ranking);
        }
        // No GPU free and none to take (allot: the unallocated tier, which
        // comes last, never preempts): nothing further can start.
        !(st.min_fail[1] <= 1 && (!st.victims_exist || (self.cfg.policy == PolicyKind::Allot && !allocated)))
    }

    /// The next job of group `g` after `cursor` (up to `cutoff`) that could
    /// fit on free GPUs or be made room for by preemption; the jobs skipped
    /// would only fail (`try_job` would change nothing for them; had one
    /// ended the pass, no later job could have started either).
    #[inline(never)]
    pub(super) fn next_that_might_start(
        &mut self,
        turn: &GroupTurn,
        cursor: Option<u32>,
        cutoff: Option<u32>,
        now: i64,
        st: &mut PassState,
        ranking: Option<&Ranking>,
    ) -> Option<u32> {
        let g = turn.group;
        let may_preempt = turn.allocated && st.searches < self.cfg.preempt_max_job_test;
        let mut bound = self.walk_bound(turn, may_preempt, st, ranking);
        // Rule 6: its long-waiting large jobs may take more than the books
        // bound (any other leaf's unprotected runs): none is skipped.
        let leaf = turn.leaf;
        let long_wait = may_preempt
            && self.rules.large_job_wait > 0
            && ranking.is_some_and(|r| (leaf < r.leaves()) && allot::preempt::under_share(r, leaf as allot::budget::LeafId));
        if bound <= 1 && !long_wait {
            return None; // no job has fewer GPUs
        }
        let mut walk = st.walk;
        if walk.group != Some(g) {
            walk.group = Some(g);
            walk.position = cursor.map_or(Position::default(), |c| self.groups[g].position_after(c));
        }
        // Skipped: jobs of `bound` GPUs or more (the bound only falls during
        // a pass), and jobs `try_job` would do nothing for: they fit nowhere
        // free (`min_fail`, `min_fail_late`), and may not preempt, or a
        // smaller teammate found no room, or their last search failed in
        // circumstances that still hold, or fewer GPUs are free and to take
        // than they need (the search's own first tests, which remember
        // nothing). Asked of the next job in order only, in the state it
        // would be visited in: which teammate failed last can change during
        // a pass. A chunk of jobs that would all be skipped is stepped over
        // whole. A job whose search would then find no node to make room on
        // (one for a job of its row and size found none since the pass last
        // placed a job) is skipped too, its failure remembered as the search
        // would: the walk goes on as it would have after its turn, and the
        // pass's outcome is the same as if every job had had its turn.
        let priority = turn.priority;
        let latest_end = st.shadow.as_ref().map_or(i64::MAX, |s| s.time);
        let allot = self.cfg.policy == PolicyKind::Allot;
        // Fixed for the walk: no run is preempted during it.
        let same_possible = turn.same_leaf_possible(self);
        // Not when its turn would end the pass (nothing free, nothing to
        // take), nor around a reservation (a search there remembers nothing).
        let same = (may_preempt && !self.cfg.preempt_around_reservation && !self.cfg.check_policy && (st.min_fail[1] > 1 || st.victims_exist))
            .then_some(same_possible);
        let last = cutoff.unwrap_or(u32::MAX);
        let long_waited = |engine: &Self, j: u32, size: u32| {
            long_wait && size > engine.rules.small_job_gpus && now - engine.jobs[j as usize].queued_since >= engine.rules.large_job_wait
        };
        // Read again whenever the walk changes the leaf's record.
        let mut smaller = self.smaller_failed_test(leaf, priority);
        // Other leaves' GPUs each row may take: nothing starts or ends
        // during the walk, so asked once per row.
        let mut cross_of_row: [Option<u32>; 2] = [None; 2];
        // Out of the engine for the walk, which may remember failures.
        let line = std::mem::take(&mut self.groups[g]);
        let mut best = None;
        'chunks: while let Some((entries, summary)) = line.chunk_from(walk.position) {
            match entries.first() {
                None => {
                    walk.position = walk.position.next_chunk();
                    continue;
                }
                Some(w) if w.job > last => break,
                Some(_) => {}
            }
            if walk.position.at_chunk_start() && !long_wait && self.skips_chunk(summary, bound, &smaller, may_preempt, st) {
                walk.position = walk.position.next_chunk();
                continue;
            }
            for w in entries {
                let (j, size) = (w.job, w.held);
                if j > last {
                    break 'chunks;
                }
                walk.position = walk.position.next_entry();
                if w.gone || cursor.is_some_and(|c| j <= c) {
                    continue;
                }
                if long_waited(self, j, size) {
                    best = Some(j); // its turn: rule 6's search
                    break 'chunks;
                }
                if size >= bound {
                    continue;
                }
                let no_place = size >= st.min_fail[1] || (size >= st.min_fail_late[1] && now + w.remaining > latest_end);
                if !no_place {
                    best = Some(j);
                    break 'chunks;
                }
                if !may_preempt {
                    continue;
                }
                let row = 2 * leaf + usize::from(w.small);
                let contract = allot::contract::Contract { min_runtime: w.min_runtime, priority };
                let all = self.may_use_all_nodes(j);
                if !self.cfg.check_policy {
                    if smaller.holds(size, w.min_runtime, w.small) || self.search_failed_before(j, row, allot) {
                        continue;
                    }
                    // Too few GPUs free and to take: its search would stop
                    // at once, remembering nothing.
                    let cross = match cross_of_row[usize::from(w.small)] {
                        Some(gpus) => gpus,
                        None => *cross_of_row[usize::from(w.small)].insert(self.cross_victim_gpus_of_row(row, true, ranking).0),
                    };
                    let other = self.nodes.free_total_for(all) + cross;
                    if other < size {
                        let same_gpus = if same_possible { self.same_leaf_gpus_for(leaf, &contract) } else { 0 };
                        if other + same_gpus < size {
                            continue;
                        }
                    }
                }
                let found_none = same.is_some_and(|same| self.known_no_candidates(self.no_candidates_key(row, all, same, size.min(self.g))));
                if !found_none || (!allot && !self.within_limit(j)) {
                    // Its turn comes next (a job held by its limit does nothing).
                    best = Some(j);
                    break 'chunks;
                }
                let key = self.search_key(row, allot);
                // Allot: the group's leaf and priority are the job's (the
                // baseline's groups mix leaves).
                let changed = match allot {
                    true => self.remember_failure_of(j, leaf, size, contract, w.small, key),
                    false => self.remember_failure(j, key),
                };
                if changed {
                    // The leaf's smaller-job record bounds the walk.
                    smaller = self.smaller_failed_test(leaf, priority);
                    bound = self.walk_bound(turn, may_preempt, st, ranking);
                    if bound <= 1 && !long_wait {
                        break 'chunks;
                    }
                }
            }
            walk.position = walk.position.next_chunk();
        }
        self.groups[g] = line;
        st.walk = walk;
        best
    }

    /// GPUs from which no job of the group can start now:
    /// none fits on free GPUs, and (`may_preempt`) none could find room by
    /// preemption. The group's jobs share leaf and priority, not minimum
    /// runtimes: their teammates' GPUs are bounded by the most any of them
    /// may take.
    fn walk_bound(&mut self, turn: &GroupTurn, may_preempt: bool, st: &mut PassState, ranking: Option<&Ranking>) -> u32 {
        let bound = st.min_fail[0].max(st.min_fail[1]);
        if !may_preempt {
            return bound;
        }
        let (g, leaf) = (turn.group, turn.leaf);
        let mut room = match st.group_room {
            Some((cached, room)) if cached == g => room,
            _ => {
                let room = self.room_of_group(turn.head, leaf, ranking);
                st.group_room = Some((g, room));
                room
            }
        };
        if self.cfg.policy == PolicyKind::Allot && !turn.same_leaf_possible(self) {
            // A smaller job of this leaf found no room this pass (a small
            // one: no job of the leaf may take more).
            let (stamp, fail_at, _, _, fail_small) = self.leaf_fail[leaf];
            if stamp == self.passes && (fail_small || self.rules.small_job_gpus == 0) {
                room = room.min(fail_at);
            }
        }
        bound.max(room)
    }

    /// One more than the most GPUs a job of `head`'s group could find free
    /// or by preemption now. The group's jobs share leaf and priority, not
    /// minimum runtimes: their teammates' GPUs are bounded by the most any
    /// of them may take.
    fn room_of_group(&mut self, head: u32, leaf: usize, ranking: Option<&Ranking>) -> u32 {
        let (victims, _) = self.cross_victim_gpus_of_row(2 * leaf, true, ranking);
        let same = self.same_leaf_gpus(head, true);
        let mut room = (self.nodes.free_total() + victims + same).saturating_add(1);
        if self.cfg.policy == PolicyKind::Allot && self.rules.small_job_gpus > 0 {
            // Small jobs of the group (at most small_job_gpus GPUs) may
            // take more: every other leaf below its victim, no margin.
            let (small_victims, _) = self.cross_victim_gpus_of_row(2 * leaf + 1, true, ranking);
            let small_room = (self.nodes.free_total() + small_victims + same).saturating_add(1);
            room = room.max(small_room.min(self.rules.small_job_gpus.saturating_add(1)));
        }
        room
    }

    /// Whether every job of a chunk would be skipped by the walk: the
    /// per-job tests that are monotone in GPUs and minimum runtime, asked
    /// of the chunk's least (a removed job is skipped anyway).
    fn skips_chunk(&self, chunk: &ChunkSummary, bound: u32, smaller: &SmallerFailed, may_preempt: bool, st: &PassState) -> bool {
        chunk.min_held >= bound
            || (chunk.min_held >= st.min_fail[1]
                && (!may_preempt || (!self.cfg.check_policy && smaller.holds(chunk.min_held, chunk.min_runtime, chunk.any_small))))
    }

    /// Non-empty groups, first to be served first. For allot, the groups'
    /// order is the policy's (`allot::order::order_groups`); jobs of one
    /// group follow each other in (submit, id) order.
    /// Into `order`, reusing its buffer.
    pub(super) fn group_order(&self, ranking: Option<&Ranking>, order: &mut Vec<usize>) {
        order.clear();
        let n = self.groups.len();
        match ranking {
            Some(r) => {
                // `order_groups` without a sort: every group of this tree has
                // a position, and positions are 0..n, one per group.
                order.resize(n, usize::MAX);
                for g in (0..n).filter(|&g| !self.groups[g].is_empty()) {
                    let position = QueueGroup::at(g, self.leaves).position(r).expect("every leaf is ranked");
                    order[position] = g;
                }
                order.retain(|&g| g != usize::MAX);
            }
            None => order.extend((0..n).filter(|&g| !self.groups[g].is_empty())),
        }
    }

    pub(super) fn pending_job(&self, j: u32) -> PendingJob {
        let job = &self.jobs[j as usize];
        let w = &self.workload.jobs[j as usize];
        PendingJob { job_id: w.job_id, leaf: job.leaf, allocated: job.contract.is_allocated(), priority: job.contract.priority, submit_time: w.submit }
    }

    /// Tests: the walk's order is `order_jobs` over every pending job.
    pub(super) fn check_order(&self, order: &[usize], ranking: Option<&Ranking>) {
        let Some(r) = ranking else { return };
        let ours: Vec<u32> = order.iter().flat_map(|&g| self.groups[g].jobs()).collect();
        let all: Vec<PendingJob> = ours.iter().map(|&j| self.pending_job(j)).collect();
        let policy: Vec<u32> = order_jobs(r, &all).into_iter().map(|i| ours[i]).collect();
        assert_eq!(ours, policy, "the engine's merge of groups differs from allot::order::order_jobs");
    }

    pub(super) fn fits_free(&self, held: u32, all: bool) -> bool {
        if held <= self.g {
            self.nodes.fits_one_for(held, all)
        } else {
            self.nodes.whole_free_for(all) >= held / self.g
        }
    }

    /// Whether `j` may use every node, the small-job nodes included
    /// (`PreemptRules::may_use_small_job_nodes`; true when none are kept).
    pub(super) fn may_use_all_nodes(&self, j: u32) -> bool {
        self.cfg.small_job_nodes == 0 || self.rules.may_use_small_job_nodes(&self.waiting_view(j))
    }

    /// Free GPUs for a job of `held` GPUs ending at `end`: (node, GPUs)
    /// pairs. `all`: it may use the small-job nodes, and takes them first
    /// (Slurm: their lower node `Weight`), leaving the other nodes whole.
    #[inline(never)]
    pub(super) fn find_place(&self, held: u32, end: i64, shadow: Option<&Shadow>, all: bool) -> Option<Vec<(u32, u32)>> {
        let ok = |n: u32, gpus: u32| self.nodes.usable(n, all) && shadow.is_none_or(|s| s.allows(n, gpus, end));
        if held <= self.g {
            let fit = |accept: &dyn Fn(u32) -> bool| match self.cfg.placement {
                Placement::BestFit => self.nodes.best_fit(held, accept),
                Placement::FirstFit => self.nodes.first_fit(held, accept),
            };
            if all && self.cfg.small_job_nodes > 0 {
                if let Some(n) = fit(&|n| self.nodes.is_small_job_node(n) && ok(n, held)) {
                    return Some(vec![(n, held)]);
                }
            }
            fit(&|n| ok(n, held)).map(|n| vec![(n, held)])
        } else {
            let g = self.g;
            self.nodes.whole_nodes(held / g, |n| ok(n, g)).map(|v| v.into_iter().map(|n| (n, g)).collect())
        }
    }

    pub(super) fn start_now(&mut self, j: u32, now: i64, place: Vec<(u32, u32)>, shadow: Option<&mut Shadow>, end: i64) {
        self.placements += 1;
        if let Some(s) = shadow {
            for &(n, c) in &place {
                s.consume(n, c, end);
            }
        }
        let alloc: Vec<(u32, u64)> = place.iter().map(|&(n, c)| (n, self.nodes.take(n, c))).collect();
        for &(n, _) in &place {
            self.refresh_reclaim(n);
        }
        self.dequeue(j);
        self.begin_run(j, now, alloc);
    }

    /// Baseline: whether the job fits within its team's limit on
    /// non-preemptible GPUs.
    pub(super) fn within_limit(&self, j: u32) -> bool {
        let job = &self.jobs[j as usize];
        self.guaranteed_gpus[job.leaf as usize] + job.held <= self.limit[job.leaf as usize]
    }

    /// The earliest time and place `j` fits, from the expected releases
    /// (with `plan_with_protection_ends`, allot: a run `j` may preempt is
    /// released when its protection ends and its grace time is over).
    #[inline(never)]
    pub(super) fn reserve(&mut self, j: u32, now: i64, ranking: Option<&Ranking>) -> Option<Shadow> {
        let held = self.jobs[j as usize].held;
        let g = self.g;
        let all = self.may_use_all_nodes(j);
        // Buffers kept between passes.
        let mut touched = std::mem::take(&mut self.reserve_touched);
        let mut whole = std::mem::take(&mut self.reserve_whole);
        touched.clear();
        whole.clear();
        let planned: Option<Vec<(i64, u32)>> = match ranking {
            Some(r) if self.cfg.plan_with_protection_ends && self.jobs[j as usize].contract.is_allocated() => {
                let waiting = self.waiting_view(j);
                let grace = self.max_grace();
                let mut planned: Vec<(i64, u32)> = self
                    .releases
                    .iter()
                    .map(|&(t, v)| {
                        let running = self.running_view(v);
                        let from = running.protected_until().max(now);
                        // May `j` preempt it once it is unprotected (by today's standings)?
                        let takes = from < t && may_preempt_with(&running, &waiting, from, r, self.rules).allowed();
                        (if takes { (from + grace).min(t) } else { t }, v)
                    })
                    .collect();
                planned.sort_unstable();
                Some(planned)
            }
            _ => None,
        };
        // Add up what each release frees, node by node, until `j` fits: on
        // one node, or (more than a node's GPUs) on enough whole nodes.
        let mut scan = ReserveScan {
            held,
            g,
            all,
            now,
            need: (held / g) as usize,
            nodes: &self.nodes,
            jobs: &self.jobs,
            extra: &mut self.extra,
            touched: &mut touched,
            whole: &mut whole,
        };
        let result = match &planned {
            Some(p) => scan.run(p.iter()),
            None => scan.run(self.releases.iter()),
        };
        for &n in &touched {
            self.extra[n as usize] = 0;
        }
        self.reserve_touched = touched;
        self.reserve_whole = whole;
        result
    }
}

/// [`Engine::reserve`]'s scan of the expected releases, over either order
/// of them (a generic loop: no boxed iterator in the hot path).
struct ReserveScan<'a> {
    held: u32,
    g: u32,
    all: bool,
    now: i64,
    /// Whole nodes needed (jobs of more than a node's GPUs).
    need: usize,
    nodes: &'a crate::cluster::Nodes,
    jobs: &'a [super::JobRt],
    extra: &'a mut Vec<u32>,
    touched: &'a mut Vec<u32>,
    whole: &'a mut Vec<u32>,
}

impl ReserveScan<'_> {
    fn run<'r>(&mut self, releases: impl Iterator<Item = &'r (i64, u32)>) -> Option<Shadow> {
        let (held, g, all) = (self.held, self.g, self.all);
        for &(t, v) in releases {
            for &(n, mask) in &self.jobs[v as usize].alloc {
                if !self.nodes.usable(n, all) {
                    continue;
                }
                if self.extra[n as usize] == 0 {
                    self.touched.push(n);
                }
                self.extra[n as usize] += mask.count_ones();
                let free_then = self.nodes.free_on(n) + self.extra[n as usize];
                if held <= g {
                    if free_then >= held {
                        return Some(Shadow { time: t.max(self.now), slack: vec![(n, free_then - held)] });
                    }
                } else if free_then == g {
                    self.whole.push(n);
                    if self.whole.len() + self.nodes.whole_free_for(all) as usize >= self.need {
                        // Reserve the nodes that free up, then wholly free ones.
                        let mut nodes = self.whole.clone();
                        nodes.extend(self.nodes.with_free(g).filter(|&n| self.nodes.usable(n, all)).take(self.need - self.whole.len().min(self.need)));
                        nodes.truncate(self.need);
                        return Some(Shadow { time: t.max(self.now), slack: nodes.into_iter().map(|n| (n, 0)).collect() });
                    }
                }
            }
        }
        None
    }
}
