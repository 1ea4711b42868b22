//! The pending jobs of one queue group, in order, laid out for the
//! backfill walk: short sorted chunks (so a job requeued into the middle of
//! a long line moves a chunk, not the line), whose removed jobs stay in
//! place as tombstones until the next tidy, so a walk's position stays
//! valid while jobs start; and a summary per chunk, so a walk can step over
//! a chunk whose every job would be skipped without reading it.

/// What a pass asks of a pending job, kept beside it in its line (none of
/// it changes while the job waits), so a walk reads no job's record.
#[derive(Debug, Clone, Copy)]
pub(super) struct WaitingFacts {
    pub(super) job: u32,
    pub(super) held: u32,
    pub(super) remaining: i64,
    pub(super) min_runtime: i64,
    pub(super) small: bool,
    /// Removed from the line: its place stays until the line is tidied.
    /// (The one fact that changes; it fits in the padding.)
    pub(super) gone: bool,
}

/// Entries per chunk at most; a full chunk splits in two.
const CHUNK: usize = 16;

/// Lower bounds over one chunk's jobs (removed ones included: a bound over
/// more jobs is still a bound), for skipping the chunk as a whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkSummary {
    pub(super) min_held: u32,
    pub(super) min_runtime: i64,
    pub(super) any_small: bool,
}

#[derive(Debug, Clone)]
struct Chunk {
    /// By job index; never empty (a chunk is dropped when tidied empty).
    entries: Vec<WaitingFacts>,
    live: usize,
    summary: ChunkSummary,
}

impl Chunk {
    fn new(entries: Vec<WaitingFacts>) -> Chunk {
        let live = entries.iter().filter(|e| !e.gone).count();
        let mut c = Chunk { entries, live, summary: ChunkSummary { min_held: 0, min_runtime: 0, any_small: true } };
        c.summarise();
        c
    }

    fn summarise(&mut self) {
        self.summary = ChunkSummary {
            min_held: self.entries.iter().map(|e| e.held).min().unwrap_or(u32::MAX),
            min_runtime: self.entries.iter().map(|e| e.min_runtime).min().unwrap_or(i64::MAX),
            any_small: self.entries.iter().any(|e| e.small),
        };
    }

    fn first_job(&self) -> u32 {
        self.entries[0].job
    }
}

/// A place in a line: (chunk, entry within it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Position {
    chunk: usize,
    entry: usize,
}

impl Position {
    pub(super) fn at_chunk_start(self) -> bool {
        self.entry == 0
    }
    pub(super) fn next_chunk(self) -> Position {
        Position { chunk: self.chunk + 1, entry: 0 }
    }
    /// The next entry of the same chunk (or just past its end).
    pub(super) fn next_entry(self) -> Position {
        Position { chunk: self.chunk, entry: self.entry + 1 }
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct WaitingLine {
    chunks: Vec<Chunk>,
    live: usize,
    /// Some job was removed since the last tidy.
    untidy: bool,
}

impl WaitingLine {
    pub(super) fn len(&self) -> usize {
        self.live
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The chunk `job` belongs in: the last whose first job is not after it.
    fn chunk_for(&self, job: u32) -> usize {
        self.chunks.partition_point(|c| c.first_job() <= job).saturating_sub(1)
    }

    /// Adds a job (outside passes: it shifts positions).
    pub(super) fn insert(&mut self, facts: WaitingFacts) {
        let facts = WaitingFacts { gone: false, ..facts };
        self.live += 1;
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::new(vec![facts]));
            return;
        }
        let c = self.chunk_for(facts.job);
        let chunk = &mut self.chunks[c];
        let at = chunk.entries.partition_point(|e| e.job < facts.job);
        if chunk.entries.get(at).is_some_and(|e| e.job == facts.job) {
            // Requeued before its old place was tidied away: it takes it again.
            assert!(chunk.entries[at].gone, "job {} queued twice", facts.job);
            chunk.entries[at] = facts;
            chunk.live += 1;
            chunk.summarise();
            return;
        }
        if at == chunk.entries.len() && chunk.entries.len() == CHUNK {
            // Past a full chunk: the next chunk's start, or a new chunk.
            if c + 1 == self.chunks.len() {
                self.chunks.push(Chunk::new(vec![facts]));
            } else {
                let next = &mut self.chunks[c + 1];
                next.entries.insert(0, facts);
                next.live += 1;
                next.summarise();
                self.split_if_full(c + 1);
            }
            return;
        }
        chunk.entries.insert(at, facts);
        chunk.live += 1;
        chunk.summarise();
        self.split_if_full(c);
    }

    fn split_if_full(&mut self, c: usize) {
        if self.chunks[c].entries.len() > CHUNK {
            let chunk = &mut self.chunks[c];
            let tail = Chunk::new(chunk.entries.split_off(chunk.entries.len() / 2));
            chunk.live -= tail.live;
            chunk.summarise();
            self.chunks.insert(c + 1, tail);
        }
    }

    /// Removes a job, leaving positions as they are.
    pub(super) fn remove(&mut self, job: u32) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let c = self.chunk_for(job);
        let chunk = &mut self.chunks[c];
        let at = chunk.entries.partition_point(|e| e.job < job);
        if chunk.entries.get(at).is_none_or(|e| e.job != job || e.gone) {
            return false;
        }
        chunk.entries[at].gone = true;
        chunk.live -= 1;
        self.live -= 1;
        self.untidy = true;
        true
    }

    /// Drops the places of removed jobs, and chunks with no job left, so a
    /// walk passes only the jobs removed during its own pass and chunk
    /// summaries bound live jobs only (only while no walk is in the line:
    /// it shifts positions).
    pub(super) fn tidy(&mut self) {
        if self.untidy {
            self.chunks.retain(|c| c.live > 0);
            for chunk in self.chunks.iter_mut().filter(|c| c.live < c.entries.len()) {
                chunk.entries.retain(|e| !e.gone);
                chunk.summarise();
            }
            self.untidy = false;
        }
    }

    /// The first job in order.
    pub(super) fn first(&self) -> Option<u32> {
        self.live_from(Position::default()).map(|(_, j)| j)
    }

    /// The `n`th job in order (from 0).
    pub(super) fn nth(&self, mut n: usize) -> Option<u32> {
        for chunk in &self.chunks {
            if n < chunk.live {
                return chunk.entries.iter().filter(|e| !e.gone).nth(n).map(|e| e.job);
            }
            n -= chunk.live;
        }
        None
    }

    /// The position of the first entry after `job` (removed or not).
    pub(super) fn position_after(&self, job: u32) -> Position {
        if self.chunks.is_empty() {
            return Position::default();
        }
        let c = self.chunk_for(job);
        let entry = self.chunks[c].entries.partition_point(|e| e.job <= job);
        self.normalise(Position { chunk: c, entry })
    }

    /// A position past its chunk's end moves to the next chunk's start.
    fn normalise(&self, mut p: Position) -> Position {
        while self.chunks.get(p.chunk).is_some_and(|c| p.entry >= c.entries.len()) {
            p = Position { chunk: p.chunk + 1, entry: 0 };
        }
        p
    }

    /// The first job at or after `p` still in the line, and its place.
    pub(super) fn live_from(&self, mut p: Position) -> Option<(Position, u32)> {
        while let Some(e) = self.at(p) {
            if !e.gone {
                return Some((p, e.job));
            }
            p = self.step(p);
        }
        None
    }

    /// The entry at `p`, if any.
    pub(super) fn at(&self, p: Position) -> Option<&WaitingFacts> {
        self.chunks.get(p.chunk)?.entries.get(p.entry)
    }

    /// The position after `p`.
    pub(super) fn step(&self, p: Position) -> Position {
        self.normalise(Position { chunk: p.chunk, entry: p.entry + 1 })
    }

    /// The rest of `p`'s chunk from `p` on, and the chunk's summary;
    /// `None` past the last chunk.
    pub(super) fn chunk_from(&self, p: Position) -> Option<(&[WaitingFacts], &ChunkSummary)> {
        let chunk = self.chunks.get(p.chunk)?;
        Some((&chunk.entries[p.entry.min(chunk.entries.len())..], &chunk.summary))
    }

    /// The jobs in order.
    pub(super) fn jobs(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks.iter().flat_map(|c| c.entries.iter().filter(|e| !e.gone).map(|e| e.job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(job: u32, held: u32) -> WaitingFacts {
        WaitingFacts { job, held, remaining: 10, min_runtime: 5 + i64::from(job % 3), small: held == 1, gone: false }
    }

    /// The first job after `job` in order.
    fn next_after(line: &WaitingLine, job: u32) -> Option<u32> {
        line.live_from(line.position_after(job)).map(|(_, j)| j)
    }

    /// Every entry, walked by `step`, with whether it was removed.
    fn walked(line: &WaitingLine) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        let mut p = Position::default();
        while let Some(e) = line.at(p) {
            out.push((e.job, e.gone));
            p = line.step(p);
        }
        out
    }

    #[test]
    fn keeps_order_through_inserts_removals_and_tidying() {
        let mut line = WaitingLine::default();
        // Appends, inserts into the middle and before the start, enough to split chunks.
        let mut expect: Vec<u32> = Vec::new();
        for j in (0..400).step_by(2).chain((1..400).step_by(6)).chain([1000, 999]) {
            line.insert(facts(j, 1 + j % 8));
            expect.push(j);
        }
        expect.sort();
        assert_eq!(line.jobs().collect::<Vec<_>>(), expect);
        assert_eq!(walked(&line).iter().map(|&(j, _)| j).collect::<Vec<_>>(), expect);
        assert!(line.chunks.iter().all(|c| !c.entries.is_empty() && c.entries.len() <= CHUNK));
        assert_eq!(line.first(), Some(expect[0]));
        for &j in &expect[..70] {
            assert!(line.remove(j));
        }
        assert!(!line.remove(expect[0]), "removed twice");
        assert!(!line.remove(5000), "never queued");
        assert_eq!(line.len(), expect.len() - 70);
        assert_eq!(line.first(), Some(expect[70]));
        assert_eq!(next_after(&line, expect[70]), Some(expect[71]));
        assert_eq!(next_after(&line, expect[5]), Some(expect[70]), "after a removed job: the next one left");
        assert_eq!(line.nth(3), Some(expect[73]));
        assert_eq!(line.nth(expect.len() - 70), None);
        let before = walked(&line);
        line.tidy();
        let after = walked(&line);
        assert!(after.len() < before.len(), "chunks with no job left are dropped");
        assert_eq!(after.iter().filter(|&&(_, g)| !g).map(|&(j, _)| j).collect::<Vec<_>>(), expect[70..].to_vec());
        assert_eq!(line.jobs().collect::<Vec<_>>(), expect[70..].to_vec());
        // Positions: after a job, at its successor (removed or not).
        let p = line.position_after(expect[100]);
        assert_eq!(line.at(p).map(|e| e.job), Some(expect[101]));
        assert!(line.at(line.position_after(1000)).is_none());
    }

    /// Random inserts (appends and requeues into the middle), removals and
    /// tidies, against a sorted set.
    #[test]
    fn answers_as_a_sorted_set_does() {
        let mut line = WaitingLine::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x: u64 = 7;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000 {
            let r = next();
            match r % 10 {
                0..=4 => {
                    let j = (next() % 3000) as u32;
                    if model.insert(j) {
                        line.insert(facts(j, 1 + j % 8));
                    }
                }
                5..=8 => {
                    let j = if r % 2 == 0 { model.iter().next().copied() } else { model.iter().nth((next() % (model.len() as u64 + 1)) as usize).copied() };
                    if let Some(j) = j {
                        model.remove(&j);
                        assert!(line.remove(j), "step {step}: remove {j}");
                    }
                }
                _ => line.tidy(),
            }
            assert_eq!(line.len(), model.len(), "step {step}");
            assert_eq!(line.first(), model.iter().next().copied(), "step {step}");
            let probe = (next() % 3000) as u32;
            assert_eq!(next_after(&line, probe), model.range(probe + 1..).next().copied(), "step {step}: after {probe}");
            let k = (next() % 50) as usize;
            assert_eq!(line.nth(k), model.iter().nth(k).copied(), "step {step}: nth {k}");
        }
        assert_eq!(line.jobs().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn chunk_summaries_bound_every_job_of_their_chunk() {
        let mut line = WaitingLine::default();
        for j in 0..200 {
            line.insert(facts(j * 2, 2 + (j * 7) % 9));
        }
        for j in 0..50 {
            line.insert(facts(j * 8 + 1, 1));
        }
        line.remove(0);
        let mut p = Position::default();
        let mut chunks = 0;
        while let Some((entries, s)) = line.chunk_from(p) {
            chunks += 1;
            assert!(!entries.is_empty() && entries.len() <= CHUNK);
            for e in entries {
                assert!(s.min_held <= e.held && s.min_runtime <= e.min_runtime && (s.any_small || !e.small));
            }
            p = p.next_chunk();
        }
        assert!(chunks > 250 / CHUNK, "{chunks} chunks");
    }
}
