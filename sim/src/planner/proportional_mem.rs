//! `speed-proportional-mem`: speed-proportional local batches (as
//! [`super::proportional`]) made memory-aware by gradient accumulation on
//! the standard PyTorch FSDP schedule, but without rebalancing the training
//! state: every GPU keeps `1/G` of it and splits its batch into the fewest
//! micro-batches that fit next to that shard (all GPUs run as many passes
//! as the GPU that needs most; one with fewer micro-batches joins the
//! remaining passes' collectives without computing), with the least
//! recompute that fits. Where nothing fits, the plan is returned anyway and
//! the simulator reports the OOM. Units: samples, GiB.

use super::proportional::speed_batches;
use super::standard::standard_plan;
use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Speed-proportional batch, memory-sized micro-batches, even shards.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpeedProportionalMem;

impl Planner for SpeedProportionalMem {
    fn name(&self) -> &'static str {
        "speed-proportional-mem"
    }

    fn summary(&self) -> &'static str {
        "speed-proportional batch with memory-sized gradient accumulation, even state shards (no state rebalancing)"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            sharding: Some(Sharding::Full),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let forced = self.fixed_axes();
        standard_plan(
            problem,
            self.name(),
            &speed_batches(problem),
            &forced,
            true,
            None,
        )
    }
}
