//! The event queue: pending op ends ordered by `(time, seq)`, FIFO at equal times.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pending op ends, popped in `(time, seq)` order, where `seq` counts the
/// ends pushed so far (so ties pop in the order the ops started or were
/// rescheduled).
pub(super) struct EventQueue {
    /// Pending ends keyed by `time << 64 | seq << 32 | op`: ordered by
    /// (time, seq), so ties pop in start order.
    heap: BinaryHeap<Reverse<u128>>,
    seq: u32,
    /// First op whose end did not fit the clock.
    pub(super) overflow: Option<u32>,
}

impl EventQueue {
    /// An empty queue with room for `capacity` pending ends.
    pub(super) fn with_capacity(capacity: usize) -> EventQueue {
        EventQueue {
            heap: BinaryHeap::with_capacity(capacity),
            seq: 0,
            overflow: None,
        }
    }

    /// `now + dur`, remembering the first op whose end does not fit the
    /// clock (`run` then fails with [`SimError::TimeOverflow`](crate::error::SimError::TimeOverflow)).
    pub(super) fn end_at(&mut self, op: u32, now: u64, dur: u64) -> u64 {
        match now.checked_add(dur).filter(|&e| e < u64::MAX) {
            Some(e) => e,
            None => {
                self.overflow.get_or_insert(op);
                u64::MAX
            }
        }
    }

    /// Schedules the end of `op` at `end`; returns the entry's seq.
    pub(super) fn push(&mut self, op: u32, end: u64) -> u32 {
        let seq = self.seq;
        let key = (end as u128) << 64 | (seq as u128) << 32 | op as u128;
        self.heap.push(Reverse(key));
        self.seq += 1;
        seq
    }

    /// The earliest pending end as `(time, seq, op)`, or `None` when the
    /// queue is drained.
    pub(super) fn pop(&mut self) -> Option<(u64, u32, u32)> {
        let Reverse(key) = self.heap.pop()?;
        Some(((key >> 64) as u64, (key >> 32) as u32, key as u32))
    }
}
