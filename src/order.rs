//! The order of pending jobs, and its mapping to Slurm's job priority.
//!
//! Jobs are ordered by:
//! 1. allocated jobs before unallocated ones (`min_runtime=0` jobs only get
//!    GPUs that no allocated job is waiting for);
//! 2. their leaf's fair-share rank (see [`crate::fairshare`]);
//! 3. their declared priority, high to low (it only orders within the leaf);
//! 4. submit time, then job id (first come, first served).
//!
//! Slurm schedules by a 32-bit priority, highest first. [`PriorityMap`] turns
//! the order into priorities that are monotone (earlier in the order means a
//! strictly higher value: no two pending jobs share one, since Slurm scans
//! the whole queue for each tie) and that leave room for jobs submitted
//! between two recomputes: every group of jobs (tier, leaf, declared
//! priority) gets, after its last job, a reserved run of values that new
//! arrivals of that group take one by one, so a new job lands exactly where
//! a full recompute would put it. Only when a group's reserve runs out before
//! the next recompute do new jobs share its lowest value, and
//! [`PriorityMap::exhausted`] says a recompute is due.

use crate::budget::LeafId;
use crate::contract::PriorityLevel;
use crate::fairshare::Ranking;
use crate::UnixTime;

/// A job waiting to run, as the order sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingJob {
    pub job_id: u32,
    pub leaf: LeafId,
    /// `min_runtime > 0`.
    pub allocated: bool,
    pub priority: PriorityLevel,
    pub submit_time: UnixTime,
}

/// Highest priority allot hands out. Values above stay free for admins
/// (`scontrol update priority=...`, `scontrol top`).
pub const PRIORITY_TOP: u32 = 4_000_000_000;
/// Lowest priority allot hands out; 0 means "held" to Slurm, and small values
/// stay free for admins too.
pub const PRIORITY_BOTTOM: u32 = 1_000;

const LEVELS: usize = 3;

/// What of a job's place in the order stays fixed while it waits: its tier
/// (allocated or not), its leaf and its declared priority. Jobs of one group
/// follow each other in (submit time, job id) order whatever the ranking;
/// the ranking only orders the groups ([`order_groups`]). So a scheduler may
/// keep its pending jobs per group and order just the groups, as the
/// simulator does, and [`order_jobs`] is that merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueGroup {
    pub allocated: bool,
    pub leaf: LeafId,
    pub priority: PriorityLevel,
}

impl QueueGroup {
    pub fn of(job: &PendingJob) -> QueueGroup {
        QueueGroup { allocated: job.allocated, leaf: job.leaf, priority: job.priority }
    }

    /// How many groups a tree of `leaves` leaves has.
    pub fn count(leaves: usize) -> usize {
        2 * leaves * LEVELS
    }

    /// A dense index in `0..count(leaves)` that does not depend on the
    /// ranking (for tables of groups).
    pub fn index(&self, leaves: usize) -> usize {
        (usize::from(!self.allocated) * leaves + self.leaf as usize) * LEVELS + Self::level(self.priority)
    }

    /// The group at `index` (the inverse of [`QueueGroup::index`]).
    #[inline] // asked by the simulator at every pass, from another crate
    pub fn at(index: usize, leaves: usize) -> QueueGroup {
        let level = index % LEVELS;
        let rest = index / LEVELS;
        let priority = [PriorityLevel::High, PriorityLevel::Normal, PriorityLevel::Low][level];
        QueueGroup { allocated: rest < leaves, leaf: (rest % leaves.max(1)) as LeafId, priority }
    }

    /// Position of the group in the order under `ranking`, 0 first: tier,
    /// then the leaf's rank, then the declared priority, high first. `None`
    /// if the leaf is unknown to this ranking.
    #[inline] // asked by the simulator at every pass, from another crate
    pub fn position(&self, ranking: &Ranking) -> Option<usize> {
        let rank = *ranking.leaf_rank.get(self.leaf as usize)? as usize;
        Some((usize::from(!self.allocated) * ranking.leaves() + rank) * LEVELS + Self::level(self.priority))
    }

    fn level(priority: PriorityLevel) -> usize {
        match priority {
            PriorityLevel::High => 0,
            PriorityLevel::Normal => 1,
            PriorityLevel::Low => 2,
        }
    }
}

/// Indices into `groups`, first served first: each group where its jobs
/// come in [`order_jobs`]; unknown leaves last, in the order given.
pub fn order_groups(ranking: &Ranking, groups: &[QueueGroup]) -> Vec<usize> {
    let mut keyed: Vec<(usize, usize)> = groups.iter().enumerate().map(|(i, g)| (g.position(ranking).unwrap_or(usize::MAX), i)).collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The job's group's position in the order (see [`QueueGroup::position`]).
fn group_of(ranking: &Ranking, job: &PendingJob) -> Option<usize> {
    QueueGroup::of(job).position(ranking)
}

/// Sort key: group, then submit time, then job id; unknown leaves last.
fn sort_key(ranking: &Ranking, job: &PendingJob) -> u128 {
    let group = group_of(ranking, job).map_or(u32::MAX, |g| g as u32);
    // Flip the sign bit so that signed times sort correctly as unsigned.
    let submit = (job.submit_time as u64) ^ (1 << 63);
    (group as u128) << 96 | (submit as u128) << 32 | job.job_id as u128
}

/// Indices into `jobs`, first to run first.
pub fn order_jobs(ranking: &Ranking, jobs: &[PendingJob]) -> Vec<usize> {
    let mut keyed: Vec<(u128, u32)> = jobs.iter().enumerate().map(|(i, j)| (sort_key(ranking, j), i as u32)).collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i as usize).collect()
}

/// Priorities for one recompute, and the reserve for new arrivals.
#[derive(Debug, Clone)]
pub struct PriorityMap {
    /// Per group: the value the next new job of that group takes (below
    /// `floor` once the reserve is used up).
    cursor: Vec<u32>,
    /// Per group: the lowest value its new jobs may take.
    floor: Vec<u32>,
    /// A group ran out of reserved values since this map was built.
    pub exhausted: bool,
}

impl PriorityMap {
    /// Orders `jobs` and gives each a priority: returns the map and the
    /// priorities, by index into `jobs`.
    pub fn build(ranking: &Ranking, jobs: &[PendingJob]) -> (PriorityMap, Vec<u32>) {
        let groups = 2 * ranking.leaves() * LEVELS;
        let order = order_jobs(ranking, jobs);
        let known = order.iter().filter(|&&i| group_of(ranking, &jobs[i]).is_some()).count();
        // One slot per job, plus one reserved slot per group.
        let slots = (known + groups).max(1) as u64;
        let step = ((PRIORITY_TOP - PRIORITY_BOTTOM) as u64 / slots).max(1) as u32;
        let value_at = |slot: u64| -> u32 { (PRIORITY_TOP as u64).saturating_sub(slot * step as u64).max(PRIORITY_BOTTOM as u64) as u32 };

        let mut priorities = vec![PRIORITY_BOTTOM; jobs.len()];
        let mut cursor = vec![PRIORITY_BOTTOM; groups];
        let mut floor = vec![PRIORITY_BOTTOM; groups];
        let mut slot: u64 = 0;
        let mut next = order.iter().peekable();
        for group in 0..groups {
            while let Some(&&i) = next.peek() {
                if group_of(ranking, &jobs[i]) != Some(group) {
                    break;
                }
                priorities[i] = value_at(slot);
                slot += 1;
                next.next();
            }
            // The reserve: the values between this group's last job and the next group's first.
            cursor[group] = value_at(slot);
            floor[group] = value_at(slot + 1).saturating_add(1).min(cursor[group]);
            slot += 1;
        }
        // Whatever is left belongs to unknown leaves: the bottom value.
        (PriorityMap { cursor, floor, exhausted: false }, priorities)
    }

    /// The priority of a job submitted since the map was built: after every
    /// job of its group, before the next group. Jobs of unknown leaves get
    /// the bottom value.
    pub fn assign_new(&mut self, ranking: &Ranking, job: &PendingJob) -> u32 {
        let Some(group) = group_of(ranking, job).filter(|&g| g < self.cursor.len()) else {
            return PRIORITY_BOTTOM;
        };
        let value = self.cursor[group];
        if value < self.floor[group] {
            // Reserve used up: share the lowest value until the next recompute.
            self.exhausted = true;
            return self.floor[group];
        }
        self.cursor[group] -= 1;
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetTree;

    fn ranking() -> (BudgetTree, Ranking) {
        let t = BudgetTree::parse("[budget]\n[budget.a]\nshare=1\naccounts=[\"a\"]\n[budget.b]\nshare=1\naccounts=[\"b\"]\n").unwrap();
        // a used more than b: b ranks first.
        let r = Ranking::compute(&t, &[100, 0], 1, 0);
        (t, r)
    }

    fn job(job_id: u32, leaf: LeafId, allocated: bool, priority: PriorityLevel, submit_time: i64) -> PendingJob {
        PendingJob { job_id, leaf, allocated, priority, submit_time }
    }

    #[test]
    fn order_is_tier_rank_level_then_fifo() {
        let (_, r) = ranking();
        use PriorityLevel::*;
        let jobs = [
            job(1, 0, true, High, 10),   // a: ranks second
            job(2, 1, true, Low, 20),    // b low
            job(3, 1, true, Normal, 30), // b normal
            job(4, 1, false, High, 5),   // unallocated: after all allocated work
            job(5, 1, true, Normal, 25), // b normal, earlier
            job(6, 0, true, High, 10),   // same time as 1: by id
        ];
        let order: Vec<u32> = order_jobs(&r, &jobs).into_iter().map(|i| jobs[i].job_id).collect();
        assert_eq!(order, vec![5, 3, 2, 1, 6, 4]);
        let (_, prio) = PriorityMap::build(&r, &jobs);
        let by_order: Vec<u32> = order_jobs(&r, &jobs).into_iter().map(|i| prio[i]).collect();
        assert!(by_order.windows(2).all(|w| w[0] > w[1]), "{by_order:?}");
    }

    #[test]
    fn groups_index_both_ways_and_order_as_their_jobs_do() {
        let (_, r) = ranking();
        use PriorityLevel::*;
        for i in 0..QueueGroup::count(2) {
            assert_eq!(QueueGroup::at(i, 2).index(2), i);
        }
        let groups = [
            QueueGroup { allocated: false, leaf: 1, priority: High },
            QueueGroup { allocated: true, leaf: 0, priority: High },
            QueueGroup { allocated: true, leaf: 1, priority: Low },
            QueueGroup { allocated: true, leaf: 1, priority: Normal },
        ];
        // b ranks first; within b, normal before low; the unallocated tier last.
        assert_eq!(order_groups(&r, &groups), vec![3, 2, 1, 0]);
    }

    #[test]
    fn new_jobs_slot_in_where_a_recompute_would_put_them() {
        let (_, r) = ranking();
        use PriorityLevel::*;
        let jobs = [job(1, 1, true, Normal, 10), job(2, 0, true, Normal, 10)];
        let (mut map, prio) = PriorityMap::build(&r, &jobs);
        let late_b = map.assign_new(&r, &job(3, 1, true, Normal, 20));
        let later_b = map.assign_new(&r, &job(4, 1, true, Normal, 21));
        let high_a = map.assign_new(&r, &job(5, 0, true, High, 30));
        assert!(prio[0] > late_b && late_b > later_b && later_b > high_a && high_a > prio[1]);
        assert!(!map.exhausted);
    }
}
