//! `fsdp`: PyTorch FSDP FULL_SHARD as users run it on a mixed cluster.
//!
//! Every GPU gets the same local batch (`B / G`, the first `B mod G` ranks
//! one more) and the same `1/G` of the training state. When the local batch
//! does not fit in one pass, gradients are accumulated micro-batch by
//! micro-batch under `no_sync()` (every micro-batch re-gathers every unit
//! for its forward and its backward; the unsharded gradients of the whole
//! model are kept until the last micro-batch): the fewest micro-batches,
//! the same on every GPU, whose size fits on the tightest GPU, and for that
//! count the least activation recompute that fits (none, then selective,
//! every other block, every block). Gathers carry the training dtype,
//! reductions fp32 (FSDP2's `MixedPrecisionPolicy` defaults). When nothing
//! fits, the plan is returned anyway and the simulator reports the OOM.
//! Units: samples, GiB.

use super::standard::even_standard_plan;

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Even-batch, even-shard PyTorch FSDP.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fsdp;

impl Planner for Fsdp {
    fn name(&self) -> &'static str {
        "fsdp"
    }

    fn summary(&self) -> &'static str {
        "PyTorch FSDP FULL_SHARD: same batch and 1/G shard on every GPU, no-sync accumulation and the least recompute that fits"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            sharding: Some(Sharding::Full),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        even_standard_plan(self, problem)
    }
}
