//! Micro-batch-major gradient accumulation, as PyTorch FSDP / DDP users run
//! it: every micro-batch is a whole forward and backward over all units, so
//! every pass re-gathers the parameters (FULL_SHARD: before each forward
//! and each backward of each unit).
//!
//! * `no-sync` (`with model.no_sync():` for all but the last micro-batch):
//!   unsharded gradients accumulate over the passes, allocated at the first
//!   pass's backward and reduced once, after the last pass;
//! * `sync`: gradients are reduced after every pass's backward of each unit
//!   (sharded gradients accumulate; FSDP's `_accumulate_sharded_grad`).
//!
//! The passes are the largest micro-batch count of the plan; every pass's
//! collectives include every GPU, so a GPU with fewer micro-batches joins
//! the remaining passes without computing. Activations flow from one unit
//! straight into the next, so only what blocks keep for their backward is
//! offloaded ([`RULES`]).

use super::phase::{Phase, PhaseKind, Rules};
use crate::strategy::Accumulation;

/// Copies of micro-batch-major schedules: only the tensors blocks keep.
pub const RULES: Rules = Rules {
    offload_gradients: false,
    offload_head_input: false,
};

/// The phase slots of `passes` micro-batch passes over a model of
/// `layers` blocks under `no-sync` or `sync` accumulation.
pub fn phases(layers: u32, passes: u32, accumulation: Accumulation) -> Vec<Phase> {
    let passes = passes.max(1);
    let mut v = Vec::with_capacity(passes as usize * (2 * layers as usize + 3));
    for k in 0..passes {
        let last = k + 1 == passes;
        let (reduce, alloc) = match accumulation {
            Accumulation::NoSync => (last, k == 0),
            _ => (true, true),
        };
        let slot = |unit, kind, bwd: bool| Phase {
            unit,
            kind,
            pass: Some(k),
            gather: false,
            reshard: false,
            reduce: bwd && reduce,
            grad_alloc: bwd && alloc,
        };
        v.extend((0..=layers).map(|u| slot(u, PhaseKind::Forward, false)));
        v.push(slot(layers + 1, PhaseKind::Head, true));
        v.extend(
            (0..=layers)
                .rev()
                .map(|u| slot(u, PhaseKind::Backward, true)),
        );
    }
    v
}
