//! `speed-proportional-mem`: speed-proportional local batches (as
//! [`super::proportional`]) made memory-aware by gradient accumulation, but
//! without rebalancing the training state: every GPU keeps `1/G` of it and
//! splits its batch into the fewest micro-batches that fit next to that
//! shard. Where not even one sample fits, the plan is returned anyway and the
//! simulator reports the OOM. Units: samples, GiB.

use super::fsdp_ga::even_shard_plan;
use super::proportional::speed_batches;
use super::{Planned, Planner, Problem};
use crate::error::PlanError;

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

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        Ok(even_shard_plan(
            self.name(),
            problem,
            &speed_batches(problem),
        ))
    }
}
