//! The op vocabulary: streams, categories, ids, labels and memory changes.

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
    /// All-to-all (expert and context parallelism's token exchanges).
    AllToAll,
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
            Category::AllToAll => "all_to_all",
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

    /// True for collectives (all-gather, reduce-scatter, all-reduce,
    /// all-to-all).
    pub fn is_collective(self) -> bool {
        matches!(
            self,
            Category::AllGather
                | Category::ReduceScatter
                | Category::AllReduce
                | Category::AllToAll
        )
    }
}

/// Identifier of an op in a [`Graph`](super::Graph) (dense, in creation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u32);

/// Identifier of an interned op name ([`Graph::intern`](super::Graph::intern)).
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
