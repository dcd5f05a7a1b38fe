//! Memory timeline of every GPU during a simulated iteration.
//!
//! Units: bytes (`i64`), times [`SimTime`] (ns). A [`MemoryTracker`] is an
//! engine [`Observer`]: it starts each rank at a constant base (sharded
//! training state + framework overhead, which never changes during an
//! iteration) and applies the signed changes the task graph attaches to op
//! starts and ends (unsharded parameters, gradient buffers, activations).
//!
//! Invariants (checked by the FSDP tests): the dynamic part never goes
//! below zero, and every allocation of an iteration is freed by its end, so
//! [`MemoryTracker::current_bytes`] equals the base after a run.

use crate::engine::{Observer, OpId, OpRecord};
use crate::units::SimTime;

/// Per-rank running memory total, its peak and when the peak was reached.
#[derive(Debug, Clone)]
pub struct MemoryTracker {
    base: Vec<i64>,
    current: Vec<i64>,
    peak: Vec<i64>,
    peak_at: Vec<SimTime>,
    min_dynamic: Vec<i64>,
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
            min_dynamic: vec![0; n],
        }
    }

    /// Number of ranks tracked.
    pub fn ranks(&self) -> usize {
        self.base.len()
    }

    /// Constant base of `rank` (bytes).
    pub fn base_bytes(&self, rank: usize) -> i64 {
        self.base[rank]
    }

    /// Highest total of `rank` seen so far (bytes).
    pub fn peak_bytes(&self, rank: usize) -> i64 {
        self.peak[rank]
    }

    /// First time `rank` reached its peak.
    pub fn peak_time(&self, rank: usize) -> SimTime {
        self.peak_at[rank]
    }

    /// Current total of `rank` (bytes); equals the base after a full iteration.
    pub fn current_bytes(&self, rank: usize) -> i64 {
        self.current[rank]
    }

    /// Lowest value of the dynamic part (total - base) of `rank` (bytes);
    /// negative would mean a free without an allocation.
    pub fn min_dynamic_bytes(&self, rank: usize) -> i64 {
        self.min_dynamic[rank]
    }
}

impl Observer for MemoryTracker {
    fn on_op(&mut self, _rec: &OpRecord<'_>) {}

    fn on_mem(&mut self, rank: u32, time: SimTime, delta_bytes: i64, _op: OpId) {
        let r = rank as usize;
        if r >= self.current.len() {
            return;
        }
        let c = self.current[r] + delta_bytes;
        self.current[r] = c;
        if c > self.peak[r] {
            self.peak[r] = c;
            self.peak_at[r] = time;
        }
        let d = c - self.base[r];
        if d < self.min_dynamic[r] {
            self.min_dynamic[r] = d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_peak_and_time() {
        let mut m = MemoryTracker::new(vec![100, 0]);
        m.on_mem(0, SimTime(5), 50, OpId(0));
        m.on_mem(0, SimTime(6), 30, OpId(1));
        m.on_mem(0, SimTime(7), -80, OpId(1));
        m.on_mem(1, SimTime(8), -1, OpId(2));
        assert_eq!(m.peak_bytes(0), 180);
        assert_eq!(m.peak_time(0), SimTime(6));
        assert_eq!(m.current_bytes(0), 100);
        assert_eq!(m.min_dynamic_bytes(1), -1);
        assert_eq!(m.peak_bytes(1), 0);
    }
}
