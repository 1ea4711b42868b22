//! The pending jobs of one queue group, in order, laid out for the
//! backfill walk: a sorted vector whose removed jobs stay in place (as
//! tombstones) until the next pass tidies, so a walk's position stays
//! valid while jobs start, and a summary per block of jobs, so a walk can
//! step over a block whose every job would be skipped without reading it.

/// What a pass asks of a pending job, kept beside it in its line (none of
/// it changes while the job waits), so a walk reads no job's record.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitingFacts {
    pub(super) job: u32,
    pub(super) held: u32,
    pub(super) remaining: i64,
    pub(super) min_runtime: i64,
    pub(super) small: bool,
}

/// Jobs per block summary.
pub(super) const BLOCK: usize = 16;

/// Lower bounds over one block's jobs (removed ones included: a bound over
/// more jobs is still a bound), for skipping the block as a whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockSummary {
    pub(super) min_held: u32,
    pub(super) min_runtime: i64,
    pub(super) any_small: bool,
}

#[derive(Debug, Clone, Default)]
pub(super) struct WaitingLine {
    /// By job index (the workload's (submit, id) order); removed jobs stay
    /// until `tidy`.
    entries: Vec<WaitingFacts>,
    gone: Vec<bool>,
    summaries: Vec<BlockSummary>,
    live: usize,
    /// Every entry before it is removed.
    head: usize,
}

impl WaitingLine {
    pub(super) fn len(&self) -> usize {
        self.live
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Adds a job (outside passes: it shifts positions).
    pub(super) fn insert(&mut self, facts: WaitingFacts) {
        let at = self.entries.partition_point(|e| e.job < facts.job);
        debug_assert!(self.entries.get(at).is_none_or(|e| e.job != facts.job), "job {} queued twice", facts.job);
        self.entries.insert(at, facts);
        self.gone.insert(at, false);
        self.live += 1;
        self.head = self.head.min(at);
        self.summarise_from(at / BLOCK);
    }

    /// Removes a job, leaving positions as they are.
    pub(super) fn remove(&mut self, job: u32) -> bool {
        let at = self.entries.partition_point(|e| e.job < job);
        if self.entries.get(at).is_none_or(|e| e.job != job) || self.gone[at] {
            return false;
        }
        self.gone[at] = true;
        self.live -= 1;
        while self.head < self.entries.len() && self.gone[self.head] {
            self.head += 1;
        }
        true
    }

    /// Drops removed entries once they outnumber the jobs left (between
    /// passes only: it shifts positions).
    pub(super) fn tidy(&mut self) {
        let removed = self.entries.len() - self.live;
        if removed > BLOCK && removed > self.live {
            let mut keep = self.gone.iter().map(|&g| !g);
            self.entries.retain(|_| keep.next().expect("one flag per entry"));
            self.gone.clear();
            self.gone.resize(self.entries.len(), false);
            self.head = 0;
            self.summaries.clear();
            self.summarise_from(0);
        }
    }

    fn summarise_from(&mut self, block: usize) {
        self.summaries.truncate(block);
        for chunk in self.entries[block * BLOCK..].chunks(BLOCK) {
            self.summaries.push(BlockSummary {
                min_held: chunk.iter().map(|e| e.held).min().expect("chunks are not empty"),
                min_runtime: chunk.iter().map(|e| e.min_runtime).min().expect("chunks are not empty"),
                any_small: chunk.iter().any(|e| e.small),
            });
        }
    }

    /// The first job in order.
    pub(super) fn first(&self) -> Option<u32> {
        self.next_live(self.head).map(|p| self.entries[p].job)
    }

    /// The first job after `job` in order.
    pub(super) fn next_after(&self, job: u32) -> Option<u32> {
        self.next_live(self.position_after(job)).map(|p| self.entries[p].job)
    }

    /// The `n`th job in order (from 0).
    pub(super) fn nth(&self, n: usize) -> Option<u32> {
        (self.head..self.entries.len()).filter(|&p| !self.gone[p]).nth(n).map(|p| self.entries[p].job)
    }

    /// The position of the first entry after `job` (removed or not).
    pub(super) fn position_after(&self, job: u32) -> usize {
        self.head.max(self.entries.partition_point(|e| e.job <= job))
    }

    fn next_live(&self, from: usize) -> Option<usize> {
        (from..self.entries.len()).find(|&p| !self.gone[p])
    }

    /// The entry at `position`, if any: its facts, and whether it was removed.
    pub(super) fn at(&self, position: usize) -> Option<(&WaitingFacts, bool)> {
        self.entries.get(position).map(|e| (e, self.gone[position]))
    }

    /// The summary of the block that starts at `position`, if one does.
    pub(super) fn block_at(&self, position: usize) -> Option<&BlockSummary> {
        if position.is_multiple_of(BLOCK) {
            self.summaries.get(position / BLOCK)
        } else {
            None
        }
    }

    /// The jobs in order.
    pub(super) fn jobs(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().zip(&self.gone).filter(|(_, &g)| !g).map(|(e, _)| e.job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(job: u32, held: u32) -> WaitingFacts {
        WaitingFacts { job, held, remaining: 10, min_runtime: 5, small: held == 1 }
    }

    #[test]
    fn keeps_order_through_inserts_removals_and_tidying() {
        let mut line = WaitingLine::default();
        for j in (0..100).rev().step_by(3) {
            line.insert(facts(j, 1 + j % 8));
        }
        line.insert(facts(50, 3)); // into the middle
        let mut expect: Vec<u32> = (0..100).rev().step_by(3).chain([50]).collect();
        expect.sort();
        assert_eq!(line.jobs().collect::<Vec<_>>(), expect);
        assert_eq!(line.first(), Some(expect[0]));
        for &j in &expect[..20] {
            assert!(line.remove(j));
        }
        assert!(!line.remove(expect[0]), "removed twice");
        assert!(!line.remove(1000), "never queued");
        assert_eq!(line.len(), expect.len() - 20);
        assert_eq!(line.first(), Some(expect[20]));
        assert_eq!(line.next_after(expect[20]), Some(expect[21]));
        assert_eq!(line.next_after(expect[5]), Some(expect[20]), "after a removed job: the next one left");
        assert_eq!(line.nth(3), Some(expect[23]));
        line.tidy();
        assert_eq!(line.jobs().collect::<Vec<_>>(), expect[20..].to_vec());
        assert_eq!(line.at(0).map(|(e, gone)| (e.job, gone)), Some((expect[20], false)));
    }

    #[test]
    fn block_summaries_bound_every_job_of_their_block() {
        let mut line = WaitingLine::default();
        for j in 0..70 {
            line.insert(facts(j * 2, 2 + (j * 7) % 9));
        }
        line.insert(facts(1, 9));
        line.remove(0);
        for block in 0..line.summaries.len() {
            let s = line.block_at(block * BLOCK).expect("a summary per block");
            for p in block * BLOCK..((block + 1) * BLOCK).min(line.entries.len()) {
                let (e, _) = line.at(p).unwrap();
                assert!(s.min_held <= e.held && s.min_runtime <= e.min_runtime && (s.any_small || !e.small));
            }
        }
        assert!(line.block_at(3).is_none(), "summaries only at block starts");
    }
}
