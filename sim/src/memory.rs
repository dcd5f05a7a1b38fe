//! Memory timeline of every memory pool (each GPU, each node's host) during
//! a simulated iteration.
//!
//! Units: bytes (`i64`), times [`SimTime`] (ns). A [`MemoryTracker`] is an
//! engine [`Observer`]: it starts each pool at a constant base (for a GPU:
//! training state + framework overhead, which never change during an
//! iteration; for a host: an offloaded optimizer's state) and applies the
//! signed changes the task graph attaches to op starts and ends (unsharded
//! parameters, gradient buffers, activations, offloaded tensors). Methods
//! take a pool index (`rank` for GPUs).
//!
//! Peaks are taken per instant: all changes at one simulated time are
//! applied together (an op starting as another ends reuses its memory, as
//! the caching allocator does), so the peak does not depend on the order
//! in which the engine reports simultaneous events.
//!
//! Invariants (checked by the simulator tests): the dynamic part never goes
//! below zero, and every allocation of an iteration is freed by its end, so
//! [`MemoryTracker::current_bytes`] equals the base after a run.

use crate::engine::{MemKind, Observer, OpId, OpRecord};
use crate::units::SimTime;

/// Per-pool running memory total, its peak and when the peak was reached.
#[derive(Debug, Clone)]
pub struct MemoryTracker {
    base: Vec<i64>,
    current: Vec<i64>,
    peak: Vec<i64>,
    peak_at: Vec<SimTime>,
    /// Per pool: the op of the last change applied, and that op at the peak.
    last_op: Vec<OpId>,
    peak_op: Vec<Option<OpId>>,
    min_dynamic: Vec<i64>,
    /// Dynamic bytes per [`MemKind`] now, and at the peak.
    by_kind: Vec<[i64; MemKind::COUNT]>,
    peak_by_kind: Vec<[i64; MemKind::COUNT]>,
    /// The instant whose changes are being applied, the pools it touched
    /// (in order, and as a per-pool flag).
    now: SimTime,
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl MemoryTracker {
    /// A tracker whose rank `r` starts at `base_bytes[r]` bytes.
    pub fn new(base_bytes: Vec<i64>) -> MemoryTracker {
        let n = base_bytes.len();
        MemoryTracker {
            current: base_bytes.clone(),
            peak: base_bytes.clone(),
            base: base_bytes,
            peak_at: vec![SimTime::ZERO; n],
            last_op: vec![OpId(0); n],
            peak_op: vec![None; n],
            min_dynamic: vec![0; n],
            by_kind: vec![[0; MemKind::COUNT]; n],
            peak_by_kind: vec![[0; MemKind::COUNT]; n],
            now: SimTime::ZERO,
            touched: Vec::new(),
            is_touched: vec![false; n],
        }
    }

    /// Closes the current instant: the totals after all its changes count
    /// for the peak and the minimum.
    fn settle(&mut self) {
        for &r in &self.touched {
            let r = r as usize;
            let c = self.current[r];
            if c > self.peak[r] {
                self.peak[r] = c;
                self.peak_at[r] = self.now;
                self.peak_op[r] = Some(self.last_op[r]);
                self.peak_by_kind[r] = self.by_kind[r];
            }
            let d = c - self.base[r];
            if d < self.min_dynamic[r] {
                self.min_dynamic[r] = d;
            }
            self.is_touched[r] = false;
        }
        self.touched.clear();
    }

    /// Number of pools tracked.
    pub fn ranks(&self) -> usize {
        self.base.len()
    }

    /// Constant base of `rank` (bytes).
    pub fn base_bytes(&self, rank: usize) -> i64 {
        self.base[rank]
    }

    /// Highest total of `rank` seen so far (bytes).
    pub fn peak_bytes(&self, rank: usize) -> i64 {
        if self.is_touched[rank] {
            self.peak[rank].max(self.current[rank])
        } else {
            self.peak[rank]
        }
    }

    /// First time `rank` reached its peak.
    pub fn peak_time(&self, rank: usize) -> SimTime {
        if self.is_touched[rank] && self.current[rank] > self.peak[rank] {
            self.now
        } else {
            self.peak_at[rank]
        }
    }

    /// An op whose memory change made the peak of `rank` (the last one
    /// applied at [`Self::peak_time`]); `None` while at the base.
    pub fn peak_op(&self, rank: usize) -> Option<OpId> {
        if self.is_touched[rank] && self.current[rank] > self.peak[rank] {
            Some(self.last_op[rank])
        } else {
            self.peak_op[rank]
        }
    }

    /// The dynamic part of the peak of `rank` by [`MemKind`] (bytes, indexed
    /// by [`MemKind::index`]; with the base they sum to [`Self::peak_bytes`]).
    pub fn peak_by_kind(&self, rank: usize) -> [i64; MemKind::COUNT] {
        if self.is_touched[rank] && self.current[rank] > self.peak[rank] {
            self.by_kind[rank]
        } else {
            self.peak_by_kind[rank]
        }
    }

    /// Current total of `rank` (bytes); equals the base after a full iteration.
    pub fn current_bytes(&self, rank: usize) -> i64 {
        self.current[rank]
    }

    /// Lowest value of the dynamic part (total - base) of `rank` after any
    /// instant (bytes); negative would mean a free without an allocation.
    pub fn min_dynamic_bytes(&self, rank: usize) -> i64 {
        if self.is_touched[rank] {
            self.min_dynamic[rank].min(self.current[rank] - self.base[rank])
        } else {
            self.min_dynamic[rank]
        }
    }
}

impl Observer for MemoryTracker {
    fn on_op(&mut self, _rec: &OpRecord<'_>) {}

    fn on_mem(&mut self, rank: u32, time: SimTime, delta_bytes: i64, kind: MemKind, op: OpId) {
        let r = rank as usize;
        if r >= self.current.len() {
            return;
        }
        if time != self.now {
            self.settle();
            self.now = time;
        }
        // Saturating: an absurd size reads as huge (out of memory), never wraps.
        self.current[r] = self.current[r].saturating_add(delta_bytes);
        let k = &mut self.by_kind[r][kind.index()];
        *k = k.saturating_add(delta_bytes);
        self.last_op[r] = op;
        if !self.is_touched[r] {
            self.is_touched[r] = true;
            self.touched.push(rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const A: MemKind = MemKind::Activations;

    #[test]
    fn absurd_sizes_saturate_instead_of_wrapping() {
        let mut m = MemoryTracker::new(vec![i64::MAX - 10]);
        m.on_mem(0, SimTime(1), i64::MAX, A, OpId(0));
        m.on_mem(0, SimTime(2), 5, A, OpId(1));
        assert_eq!(m.peak_bytes(0), i64::MAX);
    }

    #[test]
    fn tracks_peak_and_time() {
        let mut m = MemoryTracker::new(vec![100, 0]);
        m.on_mem(0, SimTime(5), 50, MemKind::Params, OpId(0));
        m.on_mem(0, SimTime(6), 30, A, OpId(1));
        m.on_mem(0, SimTime(7), -80, A, OpId(1));
        m.on_mem(1, SimTime(8), -1, A, OpId(2));
        assert_eq!(m.peak_bytes(0), 180);
        assert_eq!(m.peak_time(0), SimTime(6));
        assert_eq!(m.peak_op(0), Some(OpId(1)));
        assert_eq!(m.current_bytes(0), 100);
        assert_eq!(m.min_dynamic_bytes(1), -1);
        assert_eq!(m.peak_bytes(1), 0);
        // At the peak (t = 6): 50 bytes of parameters, 30 of activations.
        assert_eq!(m.peak_by_kind(0), [30, 50, 0]);
    }

    #[test]
    fn simultaneous_changes_count_together() {
        // An op ends (-40) as the next starts (+40) at t = 3, in either order.
        for order in [[-40i64, 40], [40, -40]] {
            let mut m = MemoryTracker::new(vec![0]);
            m.on_mem(0, SimTime(1), 40, A, OpId(0));
            for d in order {
                m.on_mem(0, SimTime(3), d, A, OpId(1));
            }
            m.on_mem(0, SimTime(5), -40, A, OpId(2));
            assert_eq!(m.peak_bytes(0), 40);
            assert_eq!(m.min_dynamic_bytes(0), 0);
        }
    }
}
