//! What a lowering emits into, and what it yields: the [`Sink`] (an engine
//! [`Graph`] for the event simulation, or the fast model's timeline,
//! `crate::fast`), the record of every collective the report reads, and
//! the lowered iteration.

use crate::comm::CollectiveKind;
use crate::engine::{Category, Graph, MemChange, OpId, OpLabel, Stream};
use crate::symmetry::NodeClasses;
use crate::units::SimTime;

/// One collective op of the iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveRecord {
    /// The op.
    pub op: OpId,
    /// Which collective.
    pub kind: CollectiveKind,
    /// Unit whose parameters or gradients it moves.
    pub unit: u32,
    /// GPUs in its group (all of them, simulated or not).
    pub group_size: u32,
    /// Whether GPU 0 is one of them (the report lists GPU 0's collectives).
    pub joins_rank0: bool,
    /// Collectives it stands for (DDP buckets ready together run as one op).
    pub count: u32,
    /// Buffer bytes of all of them together ([`CollectiveKind::buffer_bytes`]).
    pub buffer_bytes: f64,
    /// Duration.
    pub dur: SimTime,
    /// Where its time came from and its group's shape (`None`: the
    /// analytic model, nothing measured).
    pub source: Option<crate::comm::GroupSource>,
}

/// What receives the lowered ops (an engine [`Graph`], or the fast model's
/// timeline). Memory pools: GPU `r` is pool `r`, node `n`'s host is pool
/// `ranks + n`.
pub trait Sink {
    /// Interns a label.
    fn label(&mut self, category: Category, name: &str) -> OpLabel;
    /// A local op (see [`Graph::add_op`]).
    fn op(
        &mut self,
        rank: u32,
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId;
    /// A collective (see [`Graph::add_collective`]).
    fn collective(
        &mut self,
        ranks: &[u32],
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId;
    /// The links `op` keeps busy (see [`Graph::add_shares`]); sinks that
    /// do not share links ignore it.
    fn shares(&mut self, _op: OpId, _shares: &[(u32, f32)]) {}
}

impl Sink for Graph {
    fn label(&mut self, category: Category, name: &str) -> OpLabel {
        Graph::label(self, category, name)
    }
    fn op(
        &mut self,
        rank: u32,
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        self.add_op(rank, stream, dur, deps, label, mems)
    }
    fn collective(
        &mut self,
        ranks: &[u32],
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        self.add_collective(ranks, stream, dur, deps, label, mems)
    }
    fn shares(&mut self, op: OpId, shares: &[(u32, f32)]) {
        self.add_shares(op, shares);
    }
}

/// What lowering yields besides the ops themselves.
#[derive(Debug, Clone)]
pub struct LoweredParts {
    /// Constant GPU memory per rank, bytes.
    pub base_device_bytes: Vec<i64>,
    /// Constant host memory per node, bytes.
    pub base_host_bytes: Vec<i64>,
    /// Every collective, in creation order.
    pub collectives: Vec<CollectiveRecord>,
}

/// The lowered iteration as an engine graph.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// The task graph.
    pub graph: Graph,
    /// Constant GPU memory per rank, bytes.
    pub base_device_bytes: Vec<i64>,
    /// Constant host memory per node, bytes.
    pub base_host_bytes: Vec<i64>,
    /// Every collective, in creation order.
    pub collectives: Vec<CollectiveRecord>,
    /// The ranks simulated, and whose timeline the others have.
    pub classes: NodeClasses,
}

/// `l` with its unit and micro-batch indices set (the pipeline lowering
/// labels its ops with it too).
pub fn at(l: OpLabel, unit: u32, micro: u32) -> OpLabel {
    OpLabel { unit, micro, ..l }
}
