//! Occupancy: GPU-seconds per leaf over the sliding lookback window.
//!
//! A job's run is an [`Interval`]. Only *allocated* runs are charged; the
//! window `[now - lookback, now]` is exact, and a run that straddles its
//! edge counts pro rata (only the part inside). All arithmetic is in whole
//! GPU-seconds (`i64`), so sums never drift.
//!
//! Two ways to get the same numbers:
//! - [`usage_in_window`] sums a list of intervals (the plugins: a few
//!   thousand runs, recomputed every period);
//! - [`OccupancyWindow`] keeps per-leaf running sums up to date as runs start
//!   and stop, at O(changes) per step (the simulator: many steps). A property
//!   test holds the two equal.

use std::collections::VecDeque;

use crate::budget::LeafId;
use crate::{Seconds, UnixTime};

/// One run of one job on some GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub leaf: LeafId,
    pub gpus: u32,
    pub start: UnixTime,
    /// `None` while the job is still running.
    pub end: Option<UnixTime>,
    /// Unallocated runs (`min_runtime=0`) are recorded but never charged.
    pub allocated: bool,
}

impl Interval {
    /// GPU-seconds of this run inside `[from, to]`.
    pub fn gpu_seconds_within(&self, from: UnixTime, to: UnixTime) -> i64 {
        let end = self.end.unwrap_or(to).min(to);
        let start = self.start.max(from);
        if end > start {
            (end - start) * self.gpus as i64
        } else {
            0
        }
    }
}

/// GPU-seconds per leaf in one window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Charged GPU-seconds (allocated runs), by [`LeafId`].
    pub charged: Vec<i64>,
    /// Unallocated GPU-seconds, recorded for reports, never charged.
    pub unallocated: Vec<i64>,
}

impl Usage {
    pub fn zero(leaves: usize) -> Usage {
        Usage { charged: vec![0; leaves], unallocated: vec![0; leaves] }
    }
}

/// Sums `intervals` over `[now - lookback, now]`. Intervals whose leaf is out
/// of range (a leaf since removed from the budget) are skipped.
pub fn usage_in_window<'a>(intervals: impl IntoIterator<Item = &'a Interval>, leaves: usize, now: UnixTime, lookback: Seconds) -> Usage {
    let from = now - lookback;
    let mut usage = Usage::zero(leaves);
    for iv in intervals {
        let Some(slot) = (if iv.allocated { usage.charged.get_mut(iv.leaf as usize) } else { usage.unallocated.get_mut(iv.leaf as usize) }) else {
            continue;
        };
        *slot += iv.gpu_seconds_within(from, now);
    }
    usage
}

/// Charged GPU-seconds per leaf over a sliding window, kept up to date
/// incrementally. Time only moves forward.
#[derive(Debug, Clone)]
pub struct OccupancyWindow {
    lookback: Seconds,
    leaves: Vec<LeafWindow>,
}

#[derive(Debug, Clone, Default)]
struct LeafWindow {
    /// Charged GPUs running at `last`.
    running: i64,
    /// GPUs running at the window's start, `last - lookback`.
    base: i64,
    /// Changes of the running count inside `(last - lookback, last]`: (time,
    /// count from then on), oldest first.
    changes: VecDeque<(UnixTime, i64)>,
    /// GPU-seconds inside `[last - lookback, last]`.
    usage: i64,
    last: UnixTime,
}

impl LeafWindow {
    /// Moves the window's right edge to `t` (>= last).
    fn advance(&mut self, t: UnixTime, lookback: Seconds) {
        if t <= self.last {
            return;
        }
        self.usage += self.running * (t - self.last);
        // Subtract what leaves the window: the running count over
        // [last - lookback, t - lookback], a step function.
        let mut from = self.last - lookback;
        let to = t - lookback;
        while let Some(&(at, count)) = self.changes.front() {
            if at > to {
                break;
            }
            self.usage -= self.base * (at - from);
            from = at;
            self.base = count;
            self.changes.pop_front();
        }
        self.usage -= self.base * (to - from);
        self.last = t;
    }
}

impl OccupancyWindow {
    /// An empty window for `leaves` leaves, starting at time `start`.
    pub fn new(leaves: usize, lookback: Seconds, start: UnixTime) -> Self {
        OccupancyWindow { lookback, leaves: vec![LeafWindow { last: start, ..Default::default() }; leaves] }
    }

    pub fn lookback(&self) -> Seconds {
        self.lookback
    }

    /// `gpus` charged GPUs of `leaf` start (positive) or stop (negative) at `t`.
    /// Calls must come in time order per leaf.
    pub fn change(&mut self, leaf: LeafId, t: UnixTime, gpus: i64) {
        let lookback = self.lookback;
        let w = &mut self.leaves[leaf as usize];
        w.advance(t, lookback);
        w.running += gpus;
        debug_assert!(w.running >= 0, "more GPUs stopped than started on leaf {leaf}");
        match w.changes.back_mut() {
            Some((at, count)) if *at == t => *count = w.running,
            _ => w.changes.push_back((t, w.running)),
        }
    }

    /// Charged GPU-seconds of `leaf` in `[t - lookback, t]`.
    pub fn usage(&mut self, leaf: LeafId, t: UnixTime) -> i64 {
        let lookback = self.lookback;
        let w = &mut self.leaves[leaf as usize];
        w.advance(t, lookback);
        w.usage
    }

    /// Charged GPU-seconds of every leaf at `t`, into `out` (resized).
    pub fn usage_all(&mut self, t: UnixTime, out: &mut Vec<i64>) {
        out.clear();
        let lookback = self.lookback;
        out.extend(self.leaves.iter_mut().map(|w| {
            w.advance(t, lookback);
            w.usage
        }));
    }

    /// Charged GPUs running now on `leaf`.
    pub fn running(&self, leaf: LeafId) -> i64 {
        self.leaves[leaf as usize].running
    }

    /// Charged GPUs running now, every leaf's (for
    /// [`crate::fairshare::with_lookahead`]).
    pub fn running_all(&self, out: &mut Vec<i64>) {
        out.clear();
        out.extend(self.leaves.iter().map(|w| w.running));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3600;

    #[test]
    fn straddling_runs_count_pro_rata() {
        let runs = [
            // 2 GPUs from 1h before the window to 1h inside it: 1h counts.
            Interval { leaf: 0, gpus: 2, start: 0, end: Some(2 * H), allocated: true },
            // still running: counts up to now.
            Interval { leaf: 0, gpus: 1, start: 9 * H, end: None, allocated: true },
            // unallocated: recorded, not charged.
            Interval { leaf: 1, gpus: 4, start: 5 * H, end: Some(6 * H), allocated: false },
            // entirely before the window.
            Interval { leaf: 1, gpus: 8, start: 0, end: Some(H / 2), allocated: true },
        ];
        let u = usage_in_window(&runs, 2, 10 * H, 9 * H);
        assert_eq!(u.charged, vec![2 * H + H, 0]);
        assert_eq!(u.unallocated, vec![0, 4 * H]);
    }

    #[test]
    fn window_matches_the_batch_sum() {
        let mut w = OccupancyWindow::new(1, 10, 0);
        w.change(0, 0, 2); // 2 GPUs from 0 to 5
        w.change(0, 5, -2);
        w.change(0, 7, 1); // 1 GPU from 7 on
        assert_eq!(w.usage(0, 5), 10);
        assert_eq!(w.usage(0, 10), 13);
        assert_eq!(w.usage(0, 12), 6 + 5); // window [2,12]: 2 GPUs x 3s + 1 GPU x 5s
        assert_eq!(w.usage(0, 30), 10);
        assert_eq!(w.running(0), 1);
    }
}
