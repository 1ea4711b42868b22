//! The cluster's bookkeeping: which job holds which GPUs, the queues of
//! pending jobs, runs that begin and end (charged, delivered, owed), the
//! GPUs claimed by preemptors, and the per-node counts of the runs a
//! preemption could take.

use allot::contract::PriorityLevel;
use allot::order::QueueGroup;

use super::events::EventKind;
use super::waiting::WaitingFacts;
use super::{Engine, PolicyKind, Run, RunEnd, Status};

impl Engine<'_> {
    pub(super) fn group_of(&self, j: u32) -> usize {
        let job = &self.jobs[j as usize];
        // High first: the reverse of `PriorityLevel`'s order.
        let level = PriorityLevel::High as usize - job.contract.priority as usize;
        let tier = usize::from(!job.contract.is_allocated());
        match self.cfg.policy {
            PolicyKind::Allot => QueueGroup { allocated: job.contract.is_allocated(), leaf: job.leaf, priority: job.contract.priority }.index(self.leaves),
            // Preemptible (scavenger) jobs after all others, as a low-priority QOS.
            PolicyKind::Baseline if self.cfg.baseline_priority_levels => tier * 3 + level,
            PolicyKind::Baseline => tier * 3,
        }
    }

    pub(super) fn enqueue(&mut self, j: u32, now: i64) {
        self.jobs[j as usize].queued_since = now;
        // Rule 6 may apply from `large_job_wait` on: a scheduling pass then.
        let job = &self.jobs[j as usize];
        if self.cfg.policy == PolicyKind::Allot && self.rules.large_job_wait > 0 && job.contract.is_allocated() && job.held > self.rules.small_job_gpus {
            self.queue.push(now + self.rules.large_job_wait, EventKind::LongWait, j, job.run_no);
        }
        let g = self.group_of(j);
        let facts = WaitingFacts {
            job: j,
            held: self.jobs[j as usize].held,
            remaining: self.remaining(j),
            min_runtime: self.jobs[j as usize].contract.min_runtime,
            small: self.is_small(j),
            gone: false,
        };
        self.groups[g].insert(facts);
        let all = usize::from(self.may_use_all_nodes(j));
        *self.pending_sizes[all].entry(facts.held).or_insert(0) += 1;
        self.jobs[j as usize].status = Status::Pending;
        self.pending += 1;
    }

    pub(super) fn dequeue(&mut self, j: u32) {
        let g = self.group_of(j);
        let removed = self.groups[g].remove(j);
        debug_assert!(removed);
        let (all, held) = (usize::from(self.may_use_all_nodes(j)), self.jobs[j as usize].held);
        let sizes = &mut self.pending_sizes[all];
        let count = sizes.get_mut(&held).expect("size counted");
        *count -= 1;
        if *count == 0 {
            sizes.remove(&held);
        }
        self.pending -= 1;
    }

    pub(super) fn remaining(&self, j: u32) -> i64 {
        self.workload.jobs[j as usize].runtime - self.jobs[j as usize].done
    }

    pub(super) fn set_release(&mut self, j: u32, time: i64) {
        self.clear_release(j);
        self.releases.insert((time, j));
        self.jobs[j as usize].release_key = Some((time, j));
    }

    pub(super) fn clear_release(&mut self, j: u32) {
        if let Some(k) = self.jobs[j as usize].release_key.take() {
            self.releases.remove(&k);
        }
    }

    /// Starts a run of `j` on `alloc` (slots already taken from the free pool).
    pub(super) fn begin_run(&mut self, j: u32, now: i64, alloc: Vec<(u32, u64)>) {
        let remaining = self.remaining(j);
        let allot = self.cfg.policy == PolicyKind::Allot;
        let job = &mut self.jobs[j as usize];
        job.status = Status::Running;
        job.run_no += 1;
        job.run_start = now;
        job.natural_end = now + remaining;
        job.first_start.get_or_insert(now);
        job.unprotected = false;
        job.claim_for = None;
        // Protected and (allot) charged, or (baseline) counted against the
        // team's limit: the job declared a minimum runtime. Only unallocated
        // (`min_runtime=0`) jobs run preemptible.
        let (leaf, held, run_no, allocated) = (job.leaf, job.held, job.run_no, job.contract.is_allocated());
        for &(n, _) in &alloc {
            if !self.on_node[n as usize].contains(&j) {
                self.on_node[n as usize].push(j);
            }
        }
        self.jobs[j as usize].alloc = alloc;
        self.queue.push(now + remaining, EventKind::Release, j, run_no);
        self.set_release(j, now + remaining);
        if allocated {
            if allot {
                self.window.change(leaf, now, held as i64);
                let until = self.running_view(j).protected_until();
                if until < now + remaining {
                    self.queue.push(until, EventKind::ProtectionEnd, j, run_no);
                }
            } else {
                self.guaranteed_gpus[leaf as usize] += held;
            }
        } else {
            self.free_for_all_gpus += held;
            self.victim_books_on_nodes(j, false, 1);
        }
        self.delivered_log[leaf as usize].push((now, held as i64));
        self.in_use += held;
        self.max_in_use = self.max_in_use.max(self.in_use);
    }

    /// Ends the current run at `now`, hands its GPUs back (or to its
    /// preemptor) and records it.
    pub(super) fn end_run(&mut self, j: u32, now: i64, ended: RunEnd, lost: i64) {
        let allot = self.cfg.policy == PolicyKind::Allot;
        let job = &self.jobs[j as usize];
        let (leaf, held, start, allocated, status) = (job.leaf, job.held, job.run_start, job.contract.is_allocated(), job.status);
        let charged = allot && allocated;
        if status == Status::Running {
            self.drop_victim_books(j);
        }
        if allocated {
            if allot {
                self.window.change(leaf, now, -(held as i64));
                self.charged[leaf as usize] += held as i64 * (now - start);
            } else {
                self.guaranteed_gpus[leaf as usize] -= held;
            }
        }
        self.delivered_log[leaf as usize].push((now, -(held as i64)));
        self.in_use -= held;
        self.clear_release(j);
        let alloc = std::mem::take(&mut self.jobs[j as usize].alloc);
        let claim_for = self.jobs[j as usize].claim_for.take();
        let by_long_wait = std::mem::take(&mut self.jobs[j as usize].claim_long_wait) && claim_for.is_some();
        for &(n, mask) in &alloc {
            self.on_node[n as usize].retain(|&x| x != j);
            let mut rest = mask;
            if let Some(c) = claim_for {
                rest = self.transfer(c, n, mask);
            }
            if rest != 0 {
                self.nodes.give(n, rest);
                self.refresh_reclaim(n);
            }
        }
        let preemptible_from = match self.cfg.policy {
            PolicyKind::Allot => self.running_view(j).protected_until(),
            PolicyKind::Baseline if allocated => i64::MAX,
            PolicyKind::Baseline => start,
        };
        let preempted_by = if matches!(ended, RunEnd::Preempted { .. }) { claim_for } else { None };
        let by_long_wait = by_long_wait && preempted_by.is_some();
        self.runs.push(Run { job: j, start, end: now, gpus: held, slots: alloc, charged, preemptible_from, ended, lost, preempted_by, by_long_wait });
        self.growth += 1;
    }

    /// Gives `claimer` the slots of `mask` on `node` that it is still owed;
    /// returns the rest.
    pub(super) fn transfer(&mut self, claimer: u32, node: u32, mask: u64) -> u64 {
        let c = &mut self.jobs[claimer as usize];
        let Some(entry) = c.owed.iter_mut().find(|(n, _)| *n == node) else { return mask };
        let mut given = 0u64;
        let mut rest = mask;
        while entry.1 > 0 && rest != 0 {
            let low = rest & rest.wrapping_neg();
            given |= low;
            rest &= !low;
            entry.1 -= 1;
        }
        if given != 0 {
            self.claimed += given.count_ones();
            match c.alloc.iter_mut().find(|(n, _)| *n == node) {
                Some(a) => a.1 |= given,
                None => c.alloc.push((node, given)),
            }
            if !self.on_node[node as usize].contains(&claimer) {
                self.on_node[node as usize].push(claimer);
            }
        }
        rest
    }

    /// Books run `j` as unprotected (`true`: its protection ended) or no
    /// longer (it ends or is preempted): its leaf's set, GPUs and GPUs by
    /// contract, and the per-node victim counts.
    pub(super) fn book_unprotected(&mut self, j: u32, unprotected: bool) {
        let job = &self.jobs[j as usize];
        let (leaf, minrt, held) = (job.leaf as usize, job.contract.min_runtime, job.held);
        let counts = &mut self.unprotected_by_contract[leaf][job.contract.priority as usize];
        // Longest minimum runtime first.
        let at = counts.partition_point(|&(m, _)| m > minrt);
        if unprotected {
            self.unprotected[leaf].insert(j);
            self.unprotected_gpus[leaf] += held;
            match counts.get_mut(at) {
                Some(e) if e.0 == minrt => e.1 += held,
                _ => counts.insert(at, (minrt, held)),
            }
        } else {
            self.unprotected[leaf].remove(&j);
            self.unprotected_gpus[leaf] -= held;
            let e = counts.get_mut(at).filter(|e| e.0 == minrt).expect("an unprotected run is counted by its contract");
            e.1 -= held;
            if e.1 == 0 {
                counts.remove(at);
            }
        }
        if leaf < 64 {
            let bit = 1u64 << leaf;
            self.unprotected_leaves = if self.unprotected[leaf].is_empty() { self.unprotected_leaves & !bit } else { self.unprotected_leaves | bit };
        }
        self.jobs[j as usize].unprotected = unprotected;
        self.victim_books_on_nodes(j, true, if unprotected { 1 } else { -1 });
    }

    /// Removes a running job from the preemption candidates.
    pub(super) fn drop_victim_books(&mut self, j: u32) {
        let job = &self.jobs[j as usize];
        if !job.contract.is_allocated() {
            self.free_for_all_gpus -= job.held;
            self.victim_books_on_nodes(j, false, -1);
        } else if job.unprotected {
            self.book_unprotected(j, false);
        }
    }

    /// Adds (`sign` 1) or removes (-1) `j`'s GPUs to the per-node victim
    /// counts: free for all, or unprotected in its leaf.
    pub(super) fn victim_books_on_nodes(&mut self, j: u32, unprotected: bool, sign: i32) {
        let leaf = self.jobs[j as usize].leaf as usize;
        let level = self.jobs[j as usize].contract.priority as usize;
        let words = self.reclaim.words(); // of a node set
        for i in 0..self.jobs[j as usize].alloc.len() {
            let (n, mask) = self.jobs[j as usize].alloc[i];
            let c = mask.count_ones();
            let apply = |x: &mut u32| *x = if sign > 0 { *x + c } else { *x - c };
            let (word, node_bit) = (n as usize / 64, 1u64 << (n % 64));
            if unprotected {
                let cell = n as usize * self.leaves + leaf;
                apply(&mut self.unprot_on[cell]);
                apply(&mut self.unprot_on_total[n as usize]);
                mark(&mut self.unprot_nodes[leaf * words + word], node_bit, self.unprot_on[cell] > 0);
                if let Some(below) = self.unprot_on_below[cell].get_mut(level) {
                    apply(below);
                    mark(&mut self.below_nodes[(leaf * 2 + level) * words + word], node_bit, *below > 0);
                }
                if leaf < 64 {
                    mark(&mut self.unprot_leaves_on[n as usize], 1 << leaf, self.unprot_on[cell] > 0);
                }
            } else {
                apply(&mut self.ffa_on[n as usize]);
                mark(&mut self.ffa_nodes[word], node_bit, self.ffa_on[n as usize] > 0);
            }
            self.refresh_reclaim(n);
        }
    }

    pub(super) fn refresh_reclaim(&mut self, n: u32) {
        let v = self.nodes.free_on(n) + self.ffa_on[n as usize] + self.unprot_on_total[n as usize];
        self.reclaim.set(n, v);
    }

    /// Job `j`'s GPUs join (`sign` 1, at submission) or leave (-1, at its
    /// end) its leaf's wanted GPUs, and its free part if it is unallocated.
    pub(super) fn log_demand(&mut self, j: u32, now: i64, sign: i64) {
        let job = &self.jobs[j as usize];
        let (leaf, change) = (job.leaf as usize, sign * i64::from(job.held));
        self.demand_log[leaf].push((now, change));
        if !job.contract.is_allocated() {
            self.free_demand_log[leaf].push((now, change));
        }
    }

    pub(super) fn complete(&mut self, j: u32, now: i64) {
        self.end_run(j, now, RunEnd::Completed, 0);
        let job = &mut self.jobs[j as usize];
        job.done = self.workload.jobs[j as usize].runtime;
        job.status = Status::Completed;
        job.end = Some(now);
        self.log_demand(j, now, -1);
    }

    /// The grace time is over: requeue or cancel.
    pub(super) fn kill(&mut self, j: u32, now: i64) {
        let w = &self.workload.jobs[j as usize];
        let job = &self.jobs[j as usize];
        let progress = now - job.run_start;
        let ci = self.cfg.checkpoint_interval;
        let restorable = self.cfg.restorable_kinds.contains(&w.kind);
        let saved = if restorable {
            progress
        } else if !w.resumable {
            0
        } else if ci <= 0 {
            progress
        } else {
            progress / ci * ci
        };
        let signal = job.signal_at;
        self.end_run(j, now, RunEnd::Preempted { signal }, progress - saved);
        let resumable = w.resumable || restorable;
        let job = &mut self.jobs[j as usize];
        job.preemptions += 1;
        if resumable {
            job.done += saved;
            job.status = Status::Future;
            let run_no = job.run_no;
            self.queue.push(now + self.cfg.requeue_delay.max(0), EventKind::Requeue, j, run_no);
        } else {
            job.status = Status::Cancelled;
            job.end = Some(now);
            job.fate_reason = Some("preempted and not resumable".into());
            self.log_demand(j, now, -1);
        }
    }

    // ---- the scheduling pass -------------------------------------------
}

/// Sets (`on`) or clears `bit` of `set`.
fn mark(set: &mut u64, bit: u64, on: bool) {
    *set = if on { *set | bit } else { *set & !bit };
}
