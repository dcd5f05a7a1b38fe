//! The vocabulary of an iteration's order: a [`Phase`] (one unit's
//! forward, head or backward on every GPU, with what it gathers, reshards
//! and reduces) and the copy [`Rules`] an accumulation style sets. The
//! styles (`layered`, `microbatch`) build their phase lists from these;
//! [`super::phases`] places the sharding on them.

/// The kind of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhaseKind {
    /// Forward of a unit (embedding or block).
    Forward,
    /// Head forward and backward.
    Head,
    /// Backward of a unit (block or embedding).
    Backward,
}

/// One phase of the iteration (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// Unit index (0 embedding, 1..=L blocks, L+1 head).
    pub unit: u32,
    /// Forward, head or backward.
    pub kind: PhaseKind,
    /// Micro-batch pass of a micro-batch-major schedule (`None`: layered,
    /// every micro-batch of each rank).
    pub pass: Option<u32>,
    /// All-gather the unit before the compute.
    pub gather: bool,
    /// Free the gathered parameters when the compute ends.
    pub reshard: bool,
    /// Reduce the unit's gradients after the phase.
    pub reduce: bool,
    /// The phase's first backward op allocates the unit's gradient buffer.
    pub grad_alloc: bool,
}

/// What an accumulation style decides about copies (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Activation gradients between units go through the host too (layered:
    /// the next unit's backward runs after every micro-batch of this one).
    pub offload_gradients: bool,
    /// The last block's output goes to the host (layered: the head runs
    /// after every micro-batch of the last block).
    pub offload_head_input: bool,
}
