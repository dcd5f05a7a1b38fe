//! What a run reports: the records observers receive, the observers, the run's summary.

use super::ops::{MemKind, OpId, OpLabel, Stream};
use crate::units::SimTime;

/// One op execution on one `(rank, stream)`, as an [`Observer`] sees it.
/// A collective produces one record per participant, all with equal times.
#[derive(Debug, Clone, Copy)]
pub struct OpRecord<'a> {
    /// The op.
    pub op: OpId,
    /// Rank executing it.
    pub rank: u32,
    /// Stream it occupies.
    pub stream: Stream,
    /// Category, name and indices.
    pub label: OpLabel,
    /// Resolved name string.
    pub name: &'a str,
    /// Start time.
    pub start: SimTime,
    /// End time (start + duration, plus any stretch from shared links or
    /// interference).
    pub end: SimTime,
    /// Duration the op takes alone ([`Graph::op_duration`](super::Graph::op_duration)).
    pub nominal: SimTime,
    /// Number of participants (1 for a local op).
    pub participants: u32,
}

/// Receives the run as it happens (the report, Chrome trace and memory
/// tracker are observers). `on_op` calls arrive in non-decreasing order of
/// the ops' end times, `on_mem` calls in non-decreasing time order.
pub trait Observer {
    /// An op ran on one `(rank, stream)` (called when it ends).
    fn on_op(&mut self, rec: &OpRecord<'_>);
    /// Memory of `pool` changed by `delta_bytes` (holding `kind`) at `time`
    /// because of `op`.
    fn on_mem(&mut self, _pool: u32, _time: SimTime, _delta_bytes: i64, _kind: MemKind, _op: OpId) {
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn on_op(&mut self, _rec: &OpRecord<'_>) {}
}

/// Summary of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// Time the last op ended (zero for an empty graph).
    pub makespan: SimTime,
    /// Ops executed (all of the graph's ops on success).
    pub ops: u64,
    /// Events processed: one start and one end per op, plus one per
    /// rescheduled end (shared links, interference).
    pub events: u64,
}

/// An observer that keeps every record (for tests and small graphs).
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    /// `(op, rank, stream, start, end)` in the order the engine reported them.
    pub ops: Vec<(OpId, u32, Stream, SimTime, SimTime)>,
    /// `(pool, time, delta_bytes, kind, op)` in the order the engine reported them.
    pub mems: Vec<(u32, SimTime, i64, MemKind, OpId)>,
}

impl Observer for Recorder {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        self.ops
            .push((rec.op, rec.rank, rec.stream, rec.start, rec.end));
    }

    fn on_mem(&mut self, pool: u32, time: SimTime, delta_bytes: i64, kind: MemKind, op: OpId) {
        self.mems.push((pool, time, delta_bytes, kind, op));
    }
}
