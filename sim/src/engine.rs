//! Deterministic discrete-event engine over a task graph of GPU stream ops.
//!
//! Units: time is [`SimTime`] (integer nanoseconds from the start of the
//! run); memory changes are signed byte counts (`i64`).
//!
//! # Model
//!
//! Every rank (GPU) has five in-order streams ([`Stream`]): compute,
//! communication (the data-parallel communicator), reduce (a second
//! communicator, for the replica all-reduce of hybrid sharding), host copy
//! and host (work the CPU does for this rank, e.g. an offloaded optimizer
//! step). A [`Graph`] holds ops; each op has a duration, dependencies (other
//! ops whose *completion* it waits for), a label for observers, and the
//! memory changes it causes, given together with the op ([`MemChange`]:
//! a signed byte count on one memory *pool*, at the op's start or end; the
//! caller decides what pools mean, e.g. one per GPU and one per host). An op
//! is *issued* on one or more `(rank, stream)` queues:
//!
//! * a **local op** ([`Graph::add_op`]) is issued on one stream;
//! * a **collective** ([`Graph::add_collective`], or [`Graph::new_collective`]
//!   plus one [`Graph::join`] per rank) is one op issued on several ranks'
//!   streams. It starts only when every participant has issued it (it is at
//!   the head of each participant's queue and that stream is free) and all its
//!   dependencies are done; it then occupies all those streams for its
//!   duration and ends on all of them at the same time. This is where a slow
//!   rank stalls every other rank of the group.
//!
//! A stream runs its ops in issue order (the order of `add_op` / `join`
//! calls naming it), one at a time. An op starts at the earliest instant at
//! which it heads every queue it was issued on, those streams are free and
//! its dependencies are complete; there is no other delay.
//!
//! # Shared links and interference
//!
//! An op's duration is what it takes alone. Two effects stretch it while it
//! runs, so its end is decided as the run unfolds, not when the graph is
//! built:
//!
//! * **Link sharing.** An op may name the links (resources) it keeps busy
//!   and the fraction of its duration each is busy ([`Graph::add_shares`]).
//!   While ops overlap on a link whose busy fractions sum to `L > 1`, each
//!   of them progresses at `1 / L` of its own pace on that link (capacity
//!   shared in proportion to demand); an op progresses at the pace of its
//!   most oversubscribed link. Two transfers that each saturate a link take
//!   twice as long together; a link with spare capacity slows nobody; a
//!   latency-bound collective (small busy fraction) barely loads a link.
//! * **Compute-communication interference** ([`Graph::set_interference`]):
//!   while a rank has an op running on its communication or reduce stream,
//!   its compute op runs `1 + f` times slower (NCCL kernels take SMs and
//!   memory bandwidth).
//!
//! Progress is tracked in nanoseconds of the op's own work; whenever the
//! set of ops on a link (or a rank's collectives) changes, the affected ops'
//! remaining work is brought up to date and their ends are rescheduled.
//! Ops that are never slowed end exactly `duration` after they start.
//!
//! # Determinism
//!
//! Pending completions sit in a binary heap keyed by `(time, seq)`, where
//! `seq` counts op starts, so completions at equal times are processed in
//! the order the ops started (FIFO). Ops made ready by one completion start
//! in a fixed order: dependents in the order their edges were added, then the
//! next op of each stream the finished op occupied, in issue order. Same
//! graph, same event order, same observer calls.
//!
//! # Cost
//!
//! `run` is `O(E log S)` for `E` = ops + dependency edges + issues and `S` =
//! ops running at once (at most the stream count): it builds successor and
//! stream queues with counting sorts and touches each edge once. Ops that can
//! never run (a dependency cycle, collectives issued in different orders on
//! different ranks, an op issued nowhere) are reported as
//! [`SimError::Deadlock`] when the event queue drains; the engine never hangs.

use crate::units::SimTime;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// One of a rank's in-order streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// Kernels: forward, backward, recompute, optimizer.
    Compute,
    /// Collectives of the data-parallel communicator (NCCL-like): all-gather,
    /// reduce-scatter, DDP all-reduce; one at a time, in issue order.
    Comm,
    /// Collectives of a second communicator: the all-reduce across replica
    /// groups of hybrid sharding (FSDP runs it on its own stream and process
    /// group, so it overlaps the shard group's all-gathers).
    Reduce,
    /// Host copies over PCIe: activation offload (D2H) and reload (H2D),
    /// gradient and parameter copies of an offloaded optimizer.
    Copy,
    /// Work of the host CPU on this rank's behalf (an offloaded optimizer step).
    Host,
}

impl Stream {
    /// Number of streams per rank.
    pub const COUNT: usize = 5;
    /// All streams in index order.
    pub const ALL: [Stream; Stream::COUNT] = [
        Stream::Compute,
        Stream::Comm,
        Stream::Reduce,
        Stream::Copy,
        Stream::Host,
    ];

    /// Index of this stream within a rank, `0..Stream::COUNT`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Lower-case name, used as a trace track name.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Comm => "comm",
            Stream::Reduce => "reduce",
            Stream::Copy => "copy",
            Stream::Host => "host",
        }
    }
}

/// What an op does; reports group time by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Forward pass of a unit.
    Forward,
    /// Backward pass of a unit.
    Backward,
    /// Recomputed forward during the backward pass.
    Recompute,
    /// Optimizer step on the local shard.
    Optimizer,
    /// Parameter all-gather.
    AllGather,
    /// Gradient reduce-scatter.
    ReduceScatter,
    /// Gradient all-reduce (DDP buckets, hybrid sharding across replicas).
    AllReduce,
    /// Point-to-point transfer between pipeline stages (activations
    /// forward, gradients backward), issued by the sender.
    P2p,
    /// Device-to-host copy (activation offload).
    CopyD2H,
    /// Host-to-device copy (activation reload).
    CopyH2D,
    /// Zero-work synchronisation point (e.g. the iteration barrier).
    Barrier,
    /// Anything else.
    Other,
}

impl Category {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Category::Forward => "forward",
            Category::Backward => "backward",
            Category::Recompute => "recompute",
            Category::Optimizer => "optimizer",
            Category::AllGather => "all_gather",
            Category::ReduceScatter => "reduce_scatter",
            Category::AllReduce => "all_reduce",
            Category::P2p => "p2p",
            Category::CopyD2H => "copy_d2h",
            Category::CopyH2D => "copy_h2d",
            Category::Barrier => "barrier",
            Category::Other => "other",
        }
    }

    /// True for compute kernels (forward, backward, recompute, optimizer).
    pub fn is_compute(self) -> bool {
        matches!(
            self,
            Category::Forward | Category::Backward | Category::Recompute | Category::Optimizer
        )
    }

    /// True for collectives (all-gather, reduce-scatter, all-reduce).
    pub fn is_collective(self) -> bool {
        matches!(
            self,
            Category::AllGather | Category::ReduceScatter | Category::AllReduce
        )
    }
}

/// Identifier of an op in a [`Graph`] (dense, in creation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

/// Identifier of an interned op name ([`Graph::intern`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NameId(pub u32);

/// Marker for "no index" in [`OpLabel::unit`] / [`OpLabel::micro`].
pub const NO_INDEX: u32 = u32::MAX;

/// How observers see an op: a category, an interned name and two free indices.
///
/// The FSDP model uses `unit` for the FSDP unit and `micro` for the
/// micro-batch; [`NO_INDEX`] means none. Names are interned so that a
/// million-op graph does not allocate a million strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpLabel {
    /// What the op does.
    pub category: Category,
    /// Interned name (e.g. "fwd").
    pub name: NameId,
    /// First index (FSDP: unit), or [`NO_INDEX`].
    pub unit: u32,
    /// Second index (FSDP: micro-batch), or [`NO_INDEX`].
    pub micro: u32,
}

/// When a memory change applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemAt {
    /// At the op's start.
    Start,
    /// At the op's end.
    End,
}

/// What a memory change holds (the per-component breakdown of a peak).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Saved activations, recompute and backward workspaces, activation
    /// gradients, offload staging: the working memory of compute (the
    /// default of [`MemChange::start`] / [`MemChange::end`]).
    Activations,
    /// Unsharded (all-gathered) parameters.
    Params,
    /// Unsharded gradient buffers (and their dtype casts) before the
    /// reduction.
    Grads,
}

impl MemKind {
    /// Number of kinds (the length of per-kind arrays).
    pub const COUNT: usize = 3;

    /// Index into per-kind arrays.
    pub fn index(self) -> usize {
        match self {
            MemKind::Activations => 0,
            MemKind::Params => 1,
            MemKind::Grads => 2,
        }
    }
}

/// A memory change on one pool tied to an op's start or end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemChange {
    /// Memory pool that changes (the caller's numbering, e.g. GPUs first,
    /// then hosts).
    pub pool: u32,
    /// Start or end of the op.
    pub at: MemAt,
    /// Signed change in bytes (positive = allocate, negative = free).
    pub delta_bytes: i64,
    /// What the bytes hold.
    pub kind: MemKind,
}

impl MemChange {
    /// `delta_bytes` of activations / working memory on `pool` at the op's start.
    pub fn start(pool: u32, delta_bytes: i64) -> MemChange {
        MemChange {
            pool,
            at: MemAt::Start,
            delta_bytes,
            kind: MemKind::Activations,
        }
    }

    /// `delta_bytes` of activations / working memory on `pool` at the op's end.
    pub fn end(pool: u32, delta_bytes: i64) -> MemChange {
        MemChange {
            pool,
            at: MemAt::End,
            delta_bytes,
            kind: MemKind::Activations,
        }
    }

    /// The same change, holding `kind`.
    pub fn of(self, kind: MemKind) -> MemChange {
        MemChange { kind, ..self }
    }
}

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
    /// Duration the op takes alone ([`Graph::op_duration`]).
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

/// Errors of the engine (defined in [`crate::error`], re-exported here).
pub use crate::error::SimError;

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

/// Per-op data, kept small (32 bytes) for cache behaviour on million-op graphs.
#[derive(Debug, Clone, Copy)]
struct OpData {
    duration_ns: u64,
    label: OpLabel,
    /// Start of this op's dependencies in `Graph::deps`.
    dep_start: u32,
    /// Start of this op's memory changes in `Graph::mems`.
    mem_start: u32,
}

/// A task graph: ops, their dependencies, the streams they are issued on.
///
/// Build it with [`Graph::add_op`] / [`Graph::add_collective`], then call
/// [`run`]. Ops issued on a stream run in issue order, so build each rank's
/// program in the order its streams execute it.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    ops: Vec<OpData>,
    deps: Vec<u32>,
    mems: Vec<MemChange>,
    /// (stream slot = rank * Stream::COUNT + stream, op), in issue order.
    issues: Vec<(u32, u32)>,
    /// Deps added after creation with [`Graph::add_dep`]: (op, dep).
    extra_deps: Vec<(u32, u32)>,
    names: Vec<String>,
    name_index: BTreeMap<String, NameId>,
    ranks: u32,
    pools: u32,
    /// Ops with link shares, ascending, and where each one's shares start
    /// in `shares`.
    share_ops: Vec<(u32, u32)>,
    /// (resource, busy fraction) of every op in `share_ops`.
    shares: Vec<(u32, f32)>,
    /// Compute slowdown fraction while a collective runs on the rank.
    interference: f64,
}

fn slot(rank: u32, stream: Stream) -> u32 {
    rank * Stream::COUNT as u32 + stream.index() as u32
}

fn slot_rank(slot: u32) -> u32 {
    slot / Stream::COUNT as u32
}

fn slot_stream(slot: u32) -> Stream {
    Stream::ALL[(slot % Stream::COUNT as u32) as usize]
}

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
    fn dep_range(&self, i: usize) -> std::ops::Range<usize> {
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
    /// a cycle is reported by [`run`] as a deadlock).
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

/// Compressed adjacency: `items[off[i]..off[i + 1]]` belong to `i`.
struct Csr {
    off: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    /// Groups `pairs` (key, item) by key with a stable counting sort.
    fn build(keys: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Csr {
        let mut off = vec![0u32; keys + 1];
        for (k, _) in pairs.clone() {
            off[k as usize + 1] += 1;
        }
        for i in 0..keys {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut items = vec![0u32; off[keys] as usize];
        for (k, v) in pairs {
            let at = &mut fill[k as usize];
            items[*at as usize] = v;
            *at += 1;
        }
        Csr { off, items }
    }

    fn get(&self, k: usize) -> &[u32] {
        &self.items[self.off[k] as usize..self.off[k + 1] as usize]
    }
}

/// Runs `graph` to completion, pushing every op start and memory change to
/// `observer`; returns the makespan and event counts, or an error if some
/// ops can never run.
pub fn run(graph: &Graph, observer: &mut dyn Observer) -> Result<RunStats, SimError> {
    let n = graph.ops.len();
    let slots = graph.ranks as usize * Stream::COUNT;

    // Dependency edges (dep -> op), validated.
    let mut pending = vec![0u32; n];
    for (i, p) in pending.iter_mut().enumerate() {
        let range = graph.dep_range(i);
        *p = range.len() as u32;
        if let Some(&d) = graph.deps[range].iter().find(|&&d| d as usize >= n) {
            return Err(SimError::UnknownOp {
                op: i as u32,
                dep: d,
            });
        }
    }
    for &(op, dep) in &graph.extra_deps {
        if dep as usize >= n || op as usize >= n {
            return Err(SimError::UnknownOp { op, dep });
        }
        pending[op as usize] += 1;
    }
    let dep_pairs = (0..n).flat_map(|i| {
        graph.deps[graph.dep_range(i)]
            .iter()
            .map(move |&d| (d, i as u32))
    });
    let succ = if graph.extra_deps.is_empty() {
        Csr::build(n, dep_pairs)
    } else {
        Csr::build(
            n,
            dep_pairs.chain(graph.extra_deps.iter().map(|&(op, dep)| (dep, op))),
        )
    };

    // Participants (op -> slots) and, per participant, the next op issued on
    // that slot, so a finished op hands its streams on without a queue lookup.
    let parts = Participants::build(n, slots, &graph.issues);
    let mut stamp = vec![NONE; slots];
    for (i, p) in pending.iter_mut().enumerate() {
        let (ps, _) = parts.get(i);
        *p += ps.len() as u32;
        for &s in ps {
            if stamp[s as usize] == i as u32 {
                return Err(SimError::DoubleIssue {
                    op: i as u32,
                    rank: slot_rank(s),
                    stream: slot_stream(s).name(),
                });
            }
            stamp[s as usize] = i as u32;
        }
    }

    let resources = graph
        .shares
        .iter()
        .map(|s| s.0 as usize + 1)
        .max()
        .unwrap_or(0);
    let mut state = RunState {
        graph,
        observer,
        heap: BinaryHeap::with_capacity(slots.max(16)),
        seq: 0,
        makespan: 0,
        parts: &parts,
        start_ns: vec![0; slots],
        dynamic: Dynamic {
            interference: graph.interference,
            running: vec![None; slots],
            load: vec![0.0; resources],
            on_link: vec![Vec::new(); resources],
            comm_active: vec![0; graph.ranks as usize],
            compute_slot: vec![NONE; graph.ranks as usize],
            touched: Vec::new(),
            mark: vec![false; slots],
        },
        dynamic_events: 0,
        overflow: None,
    };

    // Time zero: every stream hands its token to its first op.
    let mut ready: Vec<u32> = Vec::new();
    for &op in &parts.first {
        if op != NONE {
            let p = &mut pending[op as usize];
            *p -= 1;
            if *p == 0 {
                ready.push(op);
            }
        }
    }
    for op in ready {
        state.start(op, 0);
    }

    let mut finished = 0usize;
    let mut events = 0u64;
    while let Some(Reverse(key)) = state.heap.pop() {
        let now = (key >> 64) as u64;
        let op = key as u32;
        let seq = (key >> 32) as u32;
        if !state.ends(op, seq, now) {
            continue;
        }
        events += 1;
        finished += 1;
        let o = op as usize;
        for m in graph
            .op_mems(OpId(op))
            .iter()
            .filter(|m| m.at == MemAt::End)
        {
            state
                .observer
                .on_mem(m.pool, SimTime(now), m.delta_bytes, m.kind, OpId(op));
        }
        for &s in succ.get(o) {
            let p = &mut pending[s as usize];
            *p -= 1;
            if *p == 0 {
                state.start(s, now);
            }
        }
        let (_, next) = parts.get(o);
        for &nx in next {
            if nx != NONE {
                let p = &mut pending[nx as usize];
                *p -= 1;
                if *p == 0 {
                    state.start(nx, now);
                }
            }
        }
    }

    if let Some(op) = state.overflow {
        return Err(SimError::TimeOverflow {
            op,
            name: graph.name(graph.ops[op as usize].label.name).to_string(),
        });
    }
    if finished < n {
        return Err(deadlock(graph, &pending, &parts, n - finished));
    }
    Ok(RunStats {
        makespan: SimTime(state.makespan),
        ops: finished as u64,
        events: finished as u64 + events + state.dynamic_events,
    })
}

/// "None" marker in the engine's index arrays.
const NONE: u32 = u32::MAX;

/// Op -> participant slots, with the next op issued on each slot.
struct Participants {
    off: Vec<u32>,
    slot: Vec<u32>,
    /// For the participant at the same index: next op on its slot, or `NONE`.
    next: Vec<u32>,
    /// Per slot: first op issued on it, or `NONE`.
    first: Vec<u32>,
}

impl Participants {
    fn build(n: usize, slots: usize, issues: &[(u32, u32)]) -> Participants {
        let mut off = vec![0u32; n + 1];
        for &(_, op) in issues {
            off[op as usize + 1] += 1;
        }
        for i in 0..n {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut slot = vec![0u32; issues.len()];
        let mut next = vec![NONE; issues.len()];
        let mut first = vec![NONE; slots];
        let mut last_at = vec![NONE; slots];
        for &(s, op) in issues {
            let at = fill[op as usize];
            fill[op as usize] += 1;
            slot[at as usize] = s;
            match last_at[s as usize] {
                NONE => first[s as usize] = op,
                prev => next[prev as usize] = op,
            }
            last_at[s as usize] = at;
        }
        Participants {
            off,
            slot,
            next,
            first,
        }
    }

    fn get(&self, op: usize) -> (&[u32], &[u32]) {
        let r = self.off[op] as usize..self.off[op + 1] as usize;
        (&self.slot[r.clone()], &self.next[r])
    }
}

/// A running op whose pace may change (it has link shares, or it is a
/// compute op under interference).
#[derive(Debug, Clone, Copy)]
struct Running {
    op: u32,
    /// Seq of its scheduled end (older heap entries are stale).
    seq: u32,
    /// Whether an end has been scheduled.
    scheduled: bool,
    /// Own work left at `last`, ns.
    remaining_ns: f64,
    /// Current slowdown (>= 1).
    slowdown: f64,
    last: u64,
    /// Largest load over its links, and how many of its links carry it.
    link_max: f64,
    at_max: u32,
    /// The link maximum must be recomputed (no link carries it any more).
    stale_max: bool,
}

/// State of link sharing and interference.
struct Dynamic {
    interference: f64,
    /// Per slot (the op's first participant): the running dynamic op.
    running: Vec<Option<Running>>,
    /// Per resource: sum of busy fractions of the ops on it.
    load: Vec<f64>,
    /// Per resource: slots of the running ops on it.
    on_link: Vec<Vec<u32>>,
    /// Per rank: ops running on its comm and reduce streams.
    comm_active: Vec<u32>,
    /// Per rank: slot of its running dynamic compute op, or `NONE`.
    compute_slot: Vec<u32>,
    /// Slots whose pace must be recomputed (deduplicated by `mark`).
    touched: Vec<u32>,
    mark: Vec<bool>,
}

/// Mutable state of a run shared by the start and end paths.
struct RunState<'g, 'o> {
    graph: &'g Graph,
    observer: &'o mut dyn Observer,
    /// Pending ends keyed by `time << 64 | seq << 32 | op`: ordered by
    /// (time, seq), so ties pop in start order.
    heap: BinaryHeap<Reverse<u128>>,
    seq: u32,
    makespan: u64,
    parts: &'g Participants,
    /// Start time of the op running on each slot (its first participant's).
    start_ns: Vec<u64>,
    dynamic: Dynamic,
    dynamic_events: u64,
    /// First op whose end did not fit the clock.
    overflow: Option<u32>,
}

impl RunState<'_, '_> {
    /// `now + dur`, remembering the first op whose end does not fit the
    /// clock (`run` then fails with [`SimError::TimeOverflow`]).
    fn end_at(&mut self, op: u32, now: u64, dur: u64) -> u64 {
        match now.checked_add(dur).filter(|&e| e < u64::MAX) {
            Some(e) => e,
            None => {
                self.overflow.get_or_insert(op);
                u64::MAX
            }
        }
    }

    fn push_end(&mut self, op: u32, end: u64) -> u32 {
        let seq = self.seq;
        let key = (end as u128) << 64 | (seq as u128) << 32 | op as u128;
        self.heap.push(Reverse(key));
        self.seq += 1;
        seq
    }

    /// Whether `op` (first participant slot `first`) occupies a
    /// communication stream for some time: what slows compute beside it.
    fn counts_as_comm(&self, op: u32, first: u32) -> bool {
        first != NONE
            && matches!(slot_stream(first), Stream::Comm | Stream::Reduce)
            && self.graph.ops[op as usize].duration_ns > 0
    }

    /// Whether `op` is a compute op slowed by interference.
    fn interferes(&self, op: u32) -> bool {
        self.dynamic.interference > 0.0 && {
            let (p, _) = self.parts.get(op as usize);
            p.len() == 1 && slot_stream(p[0]) == Stream::Compute
        }
    }

    /// Starts `op` at `now`: schedules its end (or, for an op whose pace
    /// may change, registers it on its links and re-paces its neighbours).
    #[inline]
    fn start(&mut self, op: u32, now: u64) {
        let g = self.graph;
        let data = &g.ops[op as usize];
        let (p, _) = self.parts.get(op as usize);
        let first = p.first().copied().unwrap_or(NONE);
        if first != NONE {
            self.start_ns[first as usize] = now;
        }
        for m in g.op_mems(OpId(op)).iter().filter(|m| m.at == MemAt::Start) {
            self.observer
                .on_mem(m.pool, SimTime(now), m.delta_bytes, m.kind, OpId(op));
        }
        let shares = g.op_shares(OpId(op));
        let comm = self.counts_as_comm(op, first);
        let interferes = self.interferes(op);
        if first == NONE || (shares.is_empty() && !interferes) {
            let end = self.end_at(op, now, data.duration_ns);
            self.makespan = self.makespan.max(end);
            self.push_end(op, end);
        } else {
            let d = &mut self.dynamic;
            d.running[first as usize] = Some(Running {
                op,
                seq: 0,
                scheduled: false,
                remaining_ns: data.duration_ns as f64,
                slowdown: 1.0,
                last: now,
                link_max: 0.0,
                at_max: 0,
                stale_max: true,
            });
            if interferes {
                d.compute_slot[slot_rank(first) as usize] = first;
            }
            for &(r, f) in shares {
                let old = self.dynamic.load[r as usize];
                self.dynamic.load[r as usize] = old + f as f64;
                self.link_changed(r, old);
                self.dynamic.on_link[r as usize].push(first);
            }
            self.touch(first);
        }
        if comm && self.dynamic.interference > 0.0 {
            for &s in p {
                let r = slot_rank(s) as usize;
                self.dynamic.comm_active[r] += 1;
                if self.dynamic.comm_active[r] == 1 {
                    let c = self.dynamic.compute_slot[r];
                    if c != NONE {
                        self.touch(c);
                    }
                }
            }
        }
        self.repace(now);
    }

    fn touch(&mut self, slot: u32) {
        let d = &mut self.dynamic;
        if !d.mark[slot as usize] {
            d.mark[slot as usize] = true;
            d.touched.push(slot);
        }
    }

    /// The load of link `r` changed from `old` (to `load[r]`): updates the
    /// link maximum of the ops on it and touches those whose pace may change.
    fn link_changed(&mut self, r: u32, old: f64) {
        let new = self.dynamic.load[r as usize];
        for i in 0..self.dynamic.on_link[r as usize].len() {
            let s = self.dynamic.on_link[r as usize][i];
            let Some(run) = self.dynamic.running[s as usize].as_mut() else {
                continue;
            };
            if run.stale_max {
                continue;
            }
            let was_max = old == run.link_max;
            let changed = if new > run.link_max {
                run.link_max = new;
                run.at_max = 1;
                true
            } else if new == run.link_max {
                if !was_max {
                    run.at_max += 1;
                }
                false
            } else if was_max {
                run.at_max -= 1;
                if run.at_max == 0 {
                    run.stale_max = true;
                    true
                } else {
                    false
                }
            } else {
                false
            };
            if changed {
                self.touch(s);
            }
        }
    }

    /// Brings every touched op's progress up to `now`, recomputes its
    /// slowdown and reschedules its end when it changed.
    fn repace(&mut self, now: u64) {
        let touched = std::mem::take(&mut self.dynamic.touched);
        for &slot in &touched {
            self.dynamic.mark[slot as usize] = false;
            let Some(mut run) = self.dynamic.running[slot as usize] else {
                continue;
            };
            if run.stale_max {
                run.link_max = 0.0;
                run.at_max = 0;
                for &(r, _) in self.graph.op_shares(OpId(run.op)) {
                    let l = self.dynamic.load[r as usize];
                    if l > run.link_max {
                        run.link_max = l;
                        run.at_max = 1;
                    } else if l == run.link_max {
                        run.at_max += 1;
                    }
                }
                run.stale_max = false;
            }
            let mut slowdown = run.link_max.max(1.0);
            let rank = slot_rank(slot) as usize;
            if self.dynamic.compute_slot[rank] == slot && self.dynamic.comm_active[rank] > 0 {
                slowdown *= 1.0 + self.dynamic.interference;
            }
            let fresh = !run.scheduled;
            if !fresh && slowdown == run.slowdown {
                self.dynamic.running[slot as usize] = Some(run);
                continue;
            }
            let elapsed = (now - run.last) as f64;
            run.remaining_ns = (run.remaining_ns - elapsed / run.slowdown).max(0.0);
            run.last = now;
            run.slowdown = slowdown;
            let end = self.end_at(run.op, now, (run.remaining_ns * slowdown).ceil() as u64);
            if !fresh {
                self.dynamic_events += 1;
            }
            run.seq = self.push_end(run.op, end);
            run.scheduled = true;
            self.dynamic.running[slot as usize] = Some(run);
        }
        let mut touched = touched;
        touched.clear();
        self.dynamic.touched = touched;
    }

    /// Handles a popped end of `op` (key seq `seq`) at `now`: false for a
    /// stale entry (the op was rescheduled); else releases the op's links,
    /// re-paces its neighbours and reports it to the observer.
    fn ends(&mut self, op: u32, seq: u32, now: u64) -> bool {
        let g = self.graph;
        let (p, _) = self.parts.get(op as usize);
        let first = p.first().copied().unwrap_or(NONE);
        let shares = g.op_shares(OpId(op));
        let dynamic = first != NONE && (!shares.is_empty() || self.interferes(op));
        if dynamic {
            match self.dynamic.running[first as usize] {
                Some(run) if run.op == op && run.seq == seq => {}
                _ => return false,
            }
            self.dynamic.running[first as usize] = None;
            for &(r, f) in shares {
                let d = &mut self.dynamic;
                let old = d.load[r as usize];
                d.load[r as usize] = if old - (f as f64) < 1e-9 {
                    0.0
                } else {
                    old - f as f64
                };
                let list = &mut d.on_link[r as usize];
                if let Some(i) = list.iter().position(|&x| x == first) {
                    list.swap_remove(i);
                }
                self.link_changed(r, old);
            }
            let rank = slot_rank(first) as usize;
            if self.dynamic.compute_slot[rank] == first {
                self.dynamic.compute_slot[rank] = NONE;
            }
        }
        let data = &g.ops[op as usize];
        if self.counts_as_comm(op, first) && self.dynamic.interference > 0.0 {
            for &s in p {
                let r = slot_rank(s) as usize;
                self.dynamic.comm_active[r] -= 1;
                if self.dynamic.comm_active[r] == 0 {
                    let c = self.dynamic.compute_slot[r];
                    if c != NONE {
                        self.touch(c);
                    }
                }
            }
        }
        self.repace(now);
        self.makespan = self.makespan.max(now);
        let start = if first != NONE {
            self.start_ns[first as usize]
        } else {
            now
        };
        let name = g.name(data.label.name);
        for &s in p {
            self.observer.on_op(&OpRecord {
                op: OpId(op),
                rank: slot_rank(s),
                stream: slot_stream(s),
                label: data.label,
                name,
                start: SimTime(start),
                end: SimTime(now),
                nominal: SimTime(data.duration_ns),
                participants: p.len() as u32,
            });
        }
        true
    }
}

/// Describes the first few ops that never ran and what each waits for.
fn deadlock(graph: &Graph, pending: &[u32], parts: &Participants, stuck: usize) -> SimError {
    // Every op with participants and nothing pending has started and ended.
    let done = |i: usize| pending[i] == 0 && !parts.get(i).0.is_empty();
    // Head of each slot: its first op that did not run.
    let mut head = vec![NONE; parts.first.len()];
    for (s, h) in head.iter_mut().enumerate() {
        let mut op = parts.first[s];
        while op != NONE && done(op as usize) {
            let (ps, next) = parts.get(op as usize);
            op = ps
                .iter()
                .position(|&x| x as usize == s)
                .map_or(NONE, |k| next[k]);
        }
        *h = op;
    }
    let mut lines = Vec::new();
    for i in (0..pending.len()).filter(|&i| !done(i)) {
        let label = graph.ops[i].label;
        let (slots, _) = parts.get(i);
        let mut waits = Vec::new();
        if slots.is_empty() {
            waits.push("issued on no stream".to_string());
        }
        for &s in slots {
            if head[s as usize] != i as u32 {
                waits.push(format!(
                    "rank {} {} busy",
                    slot_rank(s),
                    slot_stream(s).name()
                ));
            }
        }
        lines.push(format!(
            "op {i} `{}` ({}, unit {}, micro {}): {} unmet, {}",
            graph.name(label.name),
            label.category.name(),
            fmt_index(label.unit),
            fmt_index(label.micro),
            pending[i],
            if waits.is_empty() {
                "waits for dependencies".to_string()
            } else {
                waits.join(", ")
            }
        ));
        if lines.len() == 3 {
            break;
        }
    }
    SimError::Deadlock {
        stuck,
        total: graph.ops.len(),
        first: lines.join("; "),
    }
}

fn fmt_index(i: u32) -> String {
    if i == NO_INDEX {
        "-".to_string()
    } else {
        i.to_string()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: f64) -> SimTime {
        SimTime::from_ms(v)
    }

    #[test]
    fn empty_graph() {
        let g = Graph::new();
        let s = run(&g, &mut NullObserver).unwrap();
        assert_eq!(
            s,
            RunStats {
                makespan: SimTime::ZERO,
                ops: 0,
                events: 0
            }
        );
    }

    #[test]
    fn a_time_past_the_clock_is_an_error_not_a_wrap() {
        let mut g = Graph::new();
        let l = g.label(Category::Forward, "huge");
        let a = g.add_op(0, Stream::Compute, SimTime(u64::MAX / 2 + 1), &[], l, &[]);
        g.add_op(0, Stream::Compute, SimTime(u64::MAX / 2 + 1), &[a], l, &[]);
        match run(&g, &mut NullObserver) {
            Err(SimError::TimeOverflow { op, name }) => {
                assert_eq!((op, name.as_str()), (1, "huge"))
            }
            other => panic!("expected an overflow error, got {other:?}"),
        }
        let mut g = Graph::new();
        g.add_op(0, Stream::Compute, SimTime::MAX, &[], l, &[]);
        assert!(matches!(
            run(&g, &mut NullObserver),
            Err(SimError::TimeOverflow { .. })
        ));
    }

    #[test]
    fn chain_makespan_is_sum() {
        let mut g = Graph::new();
        let l = g.label(Category::Forward, "f");
        let mut prev: Vec<OpId> = vec![];
        let mut total = 0u64;
        for i in 0..50u64 {
            let stream = Stream::ALL[(i % 5) as usize];
            let d = SimTime(1000 + 37 * i);
            total += d.0;
            prev = vec![g.add_op((i % 4) as u32, stream, d, &prev, l, &[])];
        }
        assert_eq!(run(&g, &mut NullObserver).unwrap().makespan, SimTime(total));
    }

    #[test]
    fn stream_serialises_and_streams_overlap() {
        let mut g = Graph::new();
        let l = g.label(Category::Forward, "f");
        g.add_op(0, Stream::Compute, ms(2.0), &[], l, &[]);
        g.add_op(0, Stream::Compute, ms(3.0), &[], l, &[]);
        g.add_op(0, Stream::Copy, ms(4.0), &[], l, &[]);
        let mut r = Recorder::default();
        let s = run(&g, &mut r).unwrap();
        assert_eq!(s.makespan, ms(5.0));
        assert_eq!(r.ops[2].3, ms(2.0));
    }

    #[test]
    fn collective_waits_for_slowest_rank() {
        let mut g = Graph::new();
        let f = g.label(Category::Forward, "f");
        let ag = g.label(Category::AllGather, "ag");
        let a = g.add_op(0, Stream::Compute, ms(1.0), &[], f, &[]);
        let b = g.add_op(1, Stream::Compute, ms(7.0), &[], f, &[]);
        // Rank 1's comm stream is busy until 9 ms.
        g.add_op(2, Stream::Comm, ms(9.0), &[], ag, &[]);
        let c = g.add_collective(&[0, 1, 2], Stream::Comm, ms(2.0), &[a, b], ag, &[]);
        let mut r = Recorder::default();
        run(&g, &mut r).unwrap();
        let recs: Vec<_> = r.ops.iter().filter(|x| x.0 == c).collect();
        assert_eq!(recs.len(), 3);
        for x in recs {
            assert_eq!((x.3, x.4), (ms(9.0), ms(11.0)));
            assert_eq!(x.2, Stream::Comm);
        }
    }

    #[test]
    fn join_builds_rank_by_rank() {
        let mut g = Graph::new();
        let ag = g.label(Category::AllGather, "ag");
        let f = g.label(Category::Forward, "f");
        let c0 = g.new_collective(ms(1.0), &[], ag, &[]);
        let c1 = g.new_collective(ms(1.0), &[], ag, &[]);
        for r in 0..2 {
            g.join(c0, r, Stream::Comm);
            g.add_op(r, Stream::Compute, ms(5.0), &[c0], f, &[]);
            g.join(c1, r, Stream::Comm);
        }
        let s = run(&g, &mut NullObserver).unwrap();
        assert_eq!(s.makespan, ms(6.0));
    }

    #[test]
    fn mismatched_collective_order_deadlocks() {
        let mut g = Graph::new();
        let ag = g.label(Category::AllGather, "ag");
        let x = g.new_collective(ms(1.0), &[], ag, &[]);
        let y = g.new_collective(ms(1.0), &[], ag, &[]);
        g.join(x, 0, Stream::Comm);
        g.join(y, 0, Stream::Comm);
        g.join(y, 1, Stream::Comm);
        g.join(x, 1, Stream::Comm);
        match run(&g, &mut NullObserver) {
            Err(SimError::Deadlock {
                stuck: 2,
                total: 2,
                first,
            }) => {
                assert!(first.contains("busy"), "{first}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cycle_and_bad_graphs_are_errors() {
        let mut g = Graph::new();
        let l = g.label(Category::Other, "x");
        let a = g.add_op(0, Stream::Compute, ms(1.0), &[], l, &[]);
        let b = g.add_op(1, Stream::Compute, ms(1.0), &[a], l, &[]);
        g.add_dep(a, b);
        assert!(matches!(
            run(&g, &mut NullObserver),
            Err(SimError::Deadlock { stuck: 2, .. })
        ));

        let mut g = Graph::new();
        g.new_collective(ms(1.0), &[], l, &[]);
        let e = run(&g, &mut NullObserver).unwrap_err();
        assert!(e.to_string().contains("issued on no stream"), "{e}");

        let mut g = Graph::new();
        g.add_op(0, Stream::Compute, ms(1.0), &[OpId(7)], l, &[]);
        assert_eq!(
            run(&g, &mut NullObserver),
            Err(SimError::UnknownOp { op: 0, dep: 7 })
        );

        let mut g = Graph::new();
        g.add_collective(&[0, 0], Stream::Comm, ms(1.0), &[], l, &[]);
        assert!(matches!(
            run(&g, &mut NullObserver),
            Err(SimError::DoubleIssue { .. })
        ));
    }

    #[test]
    fn ties_are_fifo() {
        // Three independent equal ops on different ranks start together and
        // end together; dependents start in the order their parents started.
        let mut g = Graph::new();
        let l = g.label(Category::Forward, "f");
        let parents: Vec<OpId> = (0..3)
            .map(|r| g.add_op(r, Stream::Compute, ms(1.0), &[], l, &[]))
            .collect();
        for (i, &p) in parents.iter().enumerate().rev() {
            g.add_op(10 + i as u32, Stream::Compute, SimTime::ZERO, &[p], l, &[]);
        }
        let mut r = Recorder::default();
        run(&g, &mut r).unwrap();
        let order: Vec<u32> = r.ops.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![0, 1, 2, 10, 11, 12]);
    }

    #[test]
    fn memory_events_in_time_order() {
        let mut g = Graph::new();
        let l = g.label(Category::AllGather, "ag");
        g.add_collective(
            &[0, 1],
            Stream::Comm,
            ms(2.0),
            &[],
            l,
            &[MemChange::start(0, 100), MemChange::start(1, 100)],
        );
        let c = g.label(Category::Forward, "f");
        g.add_op(0, Stream::Comm, ms(1.0), &[], c, &[MemChange::end(0, -100)]);
        let mut r = Recorder::default();
        run(&g, &mut r).unwrap();
        assert_eq!(
            r.mems,
            vec![
                (0, ms(0.0), 100, MemKind::Activations, OpId(0)),
                (1, ms(0.0), 100, MemKind::Activations, OpId(0)),
                (0, ms(3.0), -100, MemKind::Activations, OpId(1))
            ]
        );
    }

    /// (op, start, end) on one stream.
    type Interval = (u32, SimTime, SimTime);

    /// A random graph whose stream order and deps follow op ids (never deadlocks).
    fn arb_graph() -> impl Strategy<Value = Graph> {
        let op = (
            0u32..4,                              // rank
            0usize..5,                            // stream
            prop::collection::vec(0u32..4, 0..4), // extra collective ranks
            0u64..5,                              // duration (coarse: many ties)
            prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        );
        prop::collection::vec(op, 1..60).prop_map(|ops| {
            let mut g = Graph::new();
            let l = g.label(Category::Other, "x");
            for (i, (rank, stream, coll, d, deps)) in ops.into_iter().enumerate() {
                let deps: Vec<OpId> = if i == 0 {
                    vec![]
                } else {
                    deps.iter().map(|x| OpId(x.index(i) as u32)).collect()
                };
                if coll.is_empty() {
                    g.add_op(rank, Stream::ALL[stream], SimTime(d), &deps, l, &[]);
                } else {
                    let mut ranks = coll;
                    ranks.push(rank);
                    ranks.sort_unstable();
                    ranks.dedup();
                    g.add_collective(&ranks, Stream::Comm, SimTime(d), &deps, l, &[]);
                }
            }
            g
        })
    }

    #[test]
    fn transfers_on_one_link_share_it() {
        let run_ends = |g: &Graph| {
            let mut r = Recorder::default();
            run(g, &mut r).unwrap();
            let mut end = vec![SimTime::ZERO; g.len()];
            for &(op, _, _, _, e) in &r.ops {
                end[op.0 as usize] = e;
            }
            end
        };
        // Two copies on two ranks saturating one link: each takes twice as
        // long together; a third transfer on another link is unaffected.
        let mut g = Graph::new();
        let l = g.label(Category::CopyD2H, "copy");
        let a = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
        let b = g.add_op(1, Stream::Copy, ms(10.0), &[], l, &[]);
        let c = g.add_op(2, Stream::Copy, ms(10.0), &[], l, &[]);
        g.add_shares(a, &[(7, 1.0)]);
        g.add_shares(b, &[(7, 1.0)]);
        g.add_shares(c, &[(8, 1.0)]);
        let end = run_ends(&g);
        assert_eq!(end[a.0 as usize], ms(20.0));
        assert_eq!(end[b.0 as usize], ms(20.0));
        assert_eq!(end[c.0 as usize], ms(10.0));
        // Overlapping half the time: the first is slowed only while both run.
        let mut g = Graph::new();
        let l = g.label(Category::CopyD2H, "copy");
        let x = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
        let w = g.add_op(1, Stream::Compute, ms(5.0), &[], l, &[]);
        let y = g.add_op(1, Stream::Copy, ms(10.0), &[w], l, &[]);
        g.add_shares(x, &[(0, 1.0)]);
        g.add_shares(y, &[(0, 1.0)]);
        let end = run_ends(&g);
        // x: 5 ms alone, then half pace: its last 5 ms of work take 10.
        assert_eq!(end[x.0 as usize], ms(15.0));
        // y: 10 ms at half pace (5 ms of work), then 5 ms alone.
        assert_eq!(end[y.0 as usize], ms(20.0));
        // Spare capacity slows nobody: two transfers at 40% of the link.
        let mut g = Graph::new();
        let l = g.label(Category::CopyD2H, "copy");
        let p = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
        let q = g.add_op(1, Stream::Copy, ms(10.0), &[], l, &[]);
        g.add_shares(p, &[(0, 0.4)]);
        g.add_shares(q, &[(0, 0.4)]);
        assert_eq!(run_ends(&g)[q.0 as usize], ms(10.0));
    }

    #[test]
    fn compute_slows_while_a_collective_runs() {
        let mut g = Graph::new();
        let f = g.label(Category::Forward, "fwd");
        let ag = g.label(Category::AllGather, "ag");
        let k = g.add_op(0, Stream::Compute, ms(10.0), &[], f, &[]);
        let c = g.add_collective(&[0, 1], Stream::Comm, ms(5.0), &[], ag, &[]);
        let other = g.add_op(2, Stream::Compute, ms(10.0), &[], f, &[]);
        g.set_interference(0.25);
        let mut r = Recorder::default();
        run(&g, &mut r).unwrap();
        let end = |op: OpId| r.ops.iter().find(|x| x.0 == op).unwrap().4;
        // 5 ms at 1/1.25 pace (4 ms of work), then 6 ms alone.
        assert_eq!(end(k), ms(11.0));
        assert_eq!(end(c), ms(5.0));
        // A rank without a collective is not slowed.
        assert_eq!(end(other), ms(10.0));
        // Off: nominal.
        g.set_interference(0.0);
        let mut r = Recorder::default();
        run(&g, &mut r).unwrap();
        assert_eq!(r.ops.iter().find(|x| x.0 == k).unwrap().4, ms(10.0));
    }

    proptest! {
        #[test]
        fn invariants(g in arb_graph()) {
            let mut r = Recorder::default();
            let stats = run(&g, &mut r).unwrap();
            prop_assert_eq!(stats.ops as usize, g.len());
            // Per-op (start, end) and per-stream intervals in issue order.
            let mut start = vec![None; g.len()];
            let mut end = vec![SimTime::ZERO; g.len()];
            let mut by_stream: BTreeMap<(u32, Stream), Vec<Interval>> = BTreeMap::new();
            let mut last_time = SimTime::ZERO;
            for &(op, rank, stream, s, e) in &r.ops {
                prop_assert!(e >= last_time, "records out of end-time order");
                last_time = e;
                prop_assert_eq!(e, s + g.op_duration(op));
                if let Some(prev) = start[op.0 as usize] { prop_assert_eq!(prev, s); }
                start[op.0 as usize] = Some(s);
                end[op.0 as usize] = e;
                by_stream.entry((rank, stream)).or_default().push((op.0, s, e));
            }
            // Readiness of each op: deps done and every participant's previous op done.
            let mut ready = vec![SimTime::ZERO; g.len()];
            for (i, r) in ready.iter_mut().enumerate() {
                for d in g.op_deps(OpId(i as u32)) {
                    *r = (*r).max(end[d.0 as usize]);
                }
            }
            for ops in by_stream.values() {
                for w in ops.windows(2) {
                    prop_assert!(w[0].0 < w[1].0, "stream runs in issue order");
                    prop_assert!(w[1].1 >= w[0].2, "overlap on a stream");
                    ready[w[1].0 as usize] = ready[w[1].0 as usize].max(w[0].2);
                }
            }
            for i in 0..g.len() {
                // Starts exactly when the last participant and dependency is ready.
                prop_assert_eq!(start[i], Some(ready[i]));
            }
            // Determinism.
            let mut r2 = Recorder::default();
            run(&g, &mut r2).unwrap();
            prop_assert_eq!(&r.ops, &r2.ops);
        }
    }

    /// Synthetic FSDP-shaped graph: `ranks` x `units` x `micro`.
    pub(crate) fn fsdp_like(ranks: u32, units: u32, micro: u32) -> Graph {
        let mut g = Graph::with_capacity((ranks * units * micro * 6) as usize, 0);
        let fwd = g.label(Category::Forward, "fwd");
        let bwd = g.label(Category::Backward, "bwd");
        let d2h = g.label(Category::CopyD2H, "d2h");
        let ag = g.label(Category::AllGather, "ag");
        let rs = g.label(Category::ReduceScatter, "rs");
        let all: Vec<u32> = (0..ranks).collect();
        let mut last: Vec<Option<OpId>> = vec![None; ranks as usize];
        let mut deps = Vec::new();
        for pass in 0..2 {
            for u in 0..units {
                let gather = g.add_collective(&all, Stream::Comm, SimTime(50_000), &[], ag, &[]);
                for r in 0..ranks {
                    let d = SimTime(100_000 + 1_000 * (r as u64 % 7));
                    for m in 0..micro {
                        deps.clear();
                        deps.push(gather);
                        deps.extend(last[r as usize]);
                        let mut l = if pass == 0 { fwd } else { bwd };
                        l.unit = u;
                        l.micro = m;
                        let c = g.add_op(r, Stream::Compute, d, &deps, l, &[]);
                        g.add_op(r, Stream::Copy, SimTime(20_000), &[c], d2h, &[]);
                        last[r as usize] = Some(c);
                    }
                }
                if pass == 1 {
                    let deps: Vec<OpId> = last.iter().flatten().copied().collect();
                    g.add_collective(&all, Stream::Comm, SimTime(50_000), &deps, rs, &[]);
                }
            }
        }
        g
    }

    #[test]
    fn fsdp_like_runs() {
        let g = fsdp_like(8, 4, 2);
        let s = run(&g, &mut NullObserver).unwrap();
        assert_eq!(s.ops as usize, g.len());
        assert!(s.makespan > SimTime::ZERO);
    }
}
