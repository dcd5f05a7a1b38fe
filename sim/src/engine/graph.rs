//! The task graph: ops, their dependencies, the streams they are issued on, their link shares.

use super::ops::{Category, MemChange, NameId, OpId, OpLabel, Stream, NO_INDEX};
use crate::units::SimTime;
use std::collections::BTreeMap;

/// Per-op data, kept small (32 bytes) for cache behaviour on million-op graphs.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpData {
    /// Duration alone (without link sharing or interference), ns.
    pub(super) duration_ns: u64,
    /// How observers see the op.
    pub(super) label: OpLabel,
    /// Start of this op's dependencies in `Graph::deps`.
    pub(super) dep_start: u32,
    /// Start of this op's memory changes in `Graph::mems`.
    pub(super) mem_start: u32,
}

/// A task graph: ops, their dependencies, the streams they are issued on.
///
/// Build it with [`Graph::add_op`] / [`Graph::add_collective`], then call
/// [`run`](super::run). Ops issued on a stream run in issue order, so build each rank's
/// program in the order its streams execute it.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Ops in creation order (indexed by [`OpId`]).
    pub(super) ops: Vec<OpData>,
    /// Creation-time dependencies of every op, op after op (`OpData::dep_start`).
    pub(super) deps: Vec<u32>,
    /// Memory changes of every op, op after op (`OpData::mem_start`).
    pub(super) mems: Vec<MemChange>,
    /// (stream slot = rank * Stream::COUNT + stream, op), in issue order.
    pub(super) issues: Vec<(u32, u32)>,
    /// Deps added after creation with [`Graph::add_dep`]: (op, dep).
    pub(super) extra_deps: Vec<(u32, u32)>,
    names: Vec<String>,
    name_index: BTreeMap<String, NameId>,
    /// One more than the highest rank used.
    pub(super) ranks: u32,
    pools: u32,
    /// Ops with link shares, ascending, and where each one's shares start
    /// in `shares`.
    share_ops: Vec<(u32, u32)>,
    /// (resource, busy fraction) of every op in `share_ops`.
    pub(super) shares: Vec<(u32, f32)>,
    /// Compute slowdown fraction while a collective runs on the rank.
    pub(super) interference: f64,
}

/// Per op, its link shares ([`Graph::share_index`]).
pub(super) struct ShareIndex<'g> {
    /// `ops + 1` offsets into `shares`: op `i`'s are `off[i]..off[i + 1]`
    /// (empty for an op without shares).
    off: Vec<u32>,
    shares: &'g [(u32, f32)],
}

impl<'g> ShareIndex<'g> {
    /// Link shares of `op` (empty if none), as [`Graph::op_shares`].
    #[inline]
    pub(super) fn of(&self, op: u32) -> &'g [(u32, f32)] {
        &self.shares[self.off[op as usize] as usize..self.off[op as usize + 1] as usize]
    }
}

/// The stream slot of `(rank, stream)`: `rank * Stream::COUNT + stream`.
fn slot(rank: u32, stream: Stream) -> u32 {
    rank * Stream::COUNT as u32 + stream.index() as u32
}

/// The rank of stream slot `slot`.
pub(super) fn slot_rank(slot: u32) -> u32 {
    slot / Stream::COUNT as u32
}

/// The stream of stream slot `slot`.
pub(super) fn slot_stream(slot: u32) -> Stream {
    Stream::ALL[(slot % Stream::COUNT as u32) as usize]
}

/// "None" marker in the engine's index arrays.
pub(super) const NONE: u32 = u32::MAX;

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// An empty graph with room for `ops` ops, `edges` dependency edges
    /// and two memory changes per op.
    pub fn with_capacity(ops: usize, edges: usize) -> Graph {
        Graph {
            ops: Vec::with_capacity(ops),
            deps: Vec::with_capacity(edges),
            mems: Vec::with_capacity(2 * ops),
            issues: Vec::with_capacity(ops),
            ..Graph::default()
        }
    }

    /// Interns `name` and returns its id (the same id for the same string).
    pub fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.name_index.get(name) {
            return id;
        }
        let id = NameId(self.names.len() as u32);
        self.names.push(name.to_string());
        self.name_index.insert(name.to_string(), id);
        id
    }

    /// The string of an interned name ("?" for an unknown id).
    pub fn name(&self, id: NameId) -> &str {
        self.names
            .get(id.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// A label with no indices.
    pub fn label(&mut self, category: Category, name: &str) -> OpLabel {
        OpLabel {
            category,
            name: self.intern(name),
            unit: NO_INDEX,
            micro: NO_INDEX,
        }
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the graph has no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Number of ranks (one more than the highest rank used).
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// Number of memory pools (one more than the highest pool used).
    pub fn pools(&self) -> u32 {
        self.pools
    }

    /// Number of dependency edges.
    pub fn edges(&self) -> usize {
        self.deps.len() + self.extra_deps.len()
    }

    /// Label of `op`.
    pub fn op_label(&self, op: OpId) -> OpLabel {
        self.ops[op.0 as usize].label
    }

    /// Duration of `op`.
    pub fn op_duration(&self, op: OpId) -> SimTime {
        SimTime(self.ops[op.0 as usize].duration_ns)
    }

    /// Dependencies of `op` given at creation (not those of [`Graph::add_dep`]).
    pub fn op_deps(&self, op: OpId) -> impl Iterator<Item = OpId> + '_ {
        self.deps[self.dep_range(op.0 as usize)]
            .iter()
            .map(|&d| OpId(d))
    }

    /// Range of op `i`'s creation-time dependencies in `self.deps`.
    pub(super) fn dep_range(&self, i: usize) -> std::ops::Range<usize> {
        let end = self
            .ops
            .get(i + 1)
            .map_or(self.deps.len(), |o| o.dep_start as usize);
        self.ops[i].dep_start as usize..end
    }

    fn push_op(
        &mut self,
        duration: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        let id = OpId(self.ops.len() as u32);
        self.ops.push(OpData {
            duration_ns: duration.0,
            label,
            dep_start: self.deps.len() as u32,
            mem_start: self.mems.len() as u32,
        });
        self.deps.extend(deps.iter().map(|d| d.0));
        for m in mems.iter().filter(|m| m.delta_bytes != 0) {
            self.pools = self.pools.max(m.pool + 1);
            self.mems.push(*m);
        }
        id
    }

    fn issue(&mut self, op: OpId, rank: u32, stream: Stream) {
        self.ranks = self.ranks.max(rank + 1);
        self.issues.push((slot(rank, stream), op.0));
    }

    /// Adds a local op on `(rank, stream)`, issued after everything already
    /// issued there; it waits for every op in `deps` to complete and causes
    /// the memory changes `mems` (zero changes are dropped).
    pub fn add_op(
        &mut self,
        rank: u32,
        stream: Stream,
        duration: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        let id = self.push_op(duration, deps, label, mems);
        self.issue(id, rank, stream);
        id
    }

    /// Adds a collective over `ranks`' `stream` queues (normally
    /// [`Stream::Comm`]), issued now on each; it waits for every op in `deps`
    /// (typically each rank's local predecessors) and for every
    /// participant's stream, and causes the memory changes `mems`.
    pub fn add_collective(
        &mut self,
        ranks: &[u32],
        stream: Stream,
        duration: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        let id = self.push_op(duration, deps, label, mems);
        for &r in ranks {
            self.issue(id, r, stream);
        }
        id
    }

    /// Creates a collective issued on no stream yet, with its memory
    /// changes; each participant then calls [`Graph::join`] at its place in
    /// its own program order.
    pub fn new_collective(
        &mut self,
        duration: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        self.push_op(duration, deps, label, mems)
    }

    /// Issues existing op `op` on `(rank, stream)` now (a rank joining a
    /// collective created with [`Graph::new_collective`]).
    pub fn join(&mut self, op: OpId, rank: u32, stream: Stream) {
        self.issue(op, rank, stream);
    }

    /// Adds a dependency of `op` on `dep` after creation (may point forward;
    /// a cycle is reported by [`run`](super::run) as a deadlock).
    pub fn add_dep(&mut self, op: OpId, dep: OpId) {
        self.extra_deps.push((op.0, dep.0));
    }

    /// Declares the links `op` keeps busy while it runs: `(resource, busy
    /// fraction of its duration)` pairs, fractions in `(0, 1]` (others are
    /// dropped; resources are the caller's numbering). Call once per op, in
    /// op creation order.
    pub fn add_shares(&mut self, op: OpId, shares: &[(u32, f32)]) {
        let start = self.shares.len() as u32;
        self.shares.extend(
            shares
                .iter()
                .filter(|s| s.1.is_finite() && s.1 > 0.0)
                .map(|&(r, f)| (r, f.min(1.0))),
        );
        if self.shares.len() as u32 > start {
            debug_assert!(self.share_ops.last().is_none_or(|l| l.0 < op.0));
            self.share_ops.push((op.0, start));
        }
    }

    /// Sets the compute slowdown while a collective runs on the same rank:
    /// compute ops take `1 + fraction` times longer during that time (0:
    /// off; negative or non-finite values count as 0).
    pub fn set_interference(&mut self, fraction: f64) {
        self.interference = if fraction.is_finite() {
            fraction.max(0.0)
        } else {
            0.0
        };
    }

    /// The link shares of every op, indexed by op: what a run reads in
    /// O(1) per start and end instead of [`Graph::op_shares`]' binary
    /// search (that search was about a tenth of the simulation of a
    /// 4,096-GPU pipeline plan, `perf` on `cephalo simulate`).
    pub(super) fn share_index(&self) -> ShareIndex<'_> {
        let mut off = vec![0u32; self.ops.len() + 1];
        let mut at = 0usize;
        for (i, o) in off.iter_mut().enumerate() {
            // Every op up to the next op with shares starts where it does.
            while at < self.share_ops.len() && (self.share_ops[at].0 as usize) < i {
                at += 1;
            }
            *o = match self.share_ops.get(at) {
                Some(&(_, start)) => start,
                None => self.shares.len() as u32,
            };
        }
        ShareIndex {
            off,
            shares: &self.shares,
        }
    }

    /// Link shares of `op` (empty if none).
    pub fn op_shares(&self, op: OpId) -> &[(u32, f32)] {
        match self.share_ops.binary_search_by_key(&op.0, |x| x.0) {
            Ok(i) => {
                let start = self.share_ops[i].1 as usize;
                let end = self
                    .share_ops
                    .get(i + 1)
                    .map_or(self.shares.len(), |x| x.1 as usize);
                &self.shares[start..end]
            }
            Err(_) => &[],
        }
    }

    /// Memory changes of `op`.
    pub fn op_mems(&self, op: OpId) -> &[MemChange] {
        let i = op.0 as usize;
        let end = self
            .ops
            .get(i + 1)
            .map_or(self.mems.len(), |o| o.mem_start as usize);
        &self.mems[self.ops[i].mem_start as usize..end]
    }
}
