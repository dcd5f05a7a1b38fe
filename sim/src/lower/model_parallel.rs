//! One emitter of a block's model-parallel communication inside its group
//! of GPUs (tensor and sequence parallelism today; the all-to-all dispatch
//! and combine of expert parallelism and the exchanges of context
//! parallelism are the next to enter here): what the compute does not hide
//! of it, priced per slice in the cost table
//! ([`crate::tensor::TensorParallel::exposed_ms`], the overlap a
//! framework's `tp_comm_overlap` buys included), as one op of the whole
//! group on the compute streams, which each member's next compute follows.
//! The data-parallel group's collectives are [`super::dp_group`]'s.

use super::sink::Sink;
use crate::engine::{OpId, OpLabel, Stream};
use crate::units::SimTime;

/// The exposed model-parallel communication `comm` of the group `ranks`
/// after their compute (a block's, the embedding's or the head's), as one
/// op on their compute streams labelled `label` (a local op for a group of
/// one GPU: a replica of one GPU still trades tokens with its EP group);
/// `None` when nothing is exposed.
pub fn exposed<S: Sink>(g: &mut S, ranks: &[u32], comm: SimTime, label: OpLabel) -> Option<OpId> {
    if comm <= SimTime::ZERO {
        return None;
    }
    Some(match ranks {
        [] => return None,
        &[r] => g.op(r, Stream::Compute, comm, &[], label, &[]),
        _ => g.collective(ranks, Stream::Compute, comm, &[], label, &[]),
    })
}
