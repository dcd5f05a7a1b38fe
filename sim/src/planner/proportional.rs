//! `speed-proportional`: local batch proportional to each GPU's measured
//! speed, even state shards, no memory awareness (the load balancing of
//! heterogeneity-aware data-parallel systems such as Whale / HetPipe's data
//! parallel stage), on the standard PyTorch FSDP schedule of
//! [`super::fsdp`] with one micro-batch per GPU (the least recompute that
//! lets the largest batch fit).
//!
//! Speed = samples per ms of one block's forward + recompute + backward at
//! the even micro-batch size `ceil(B / G)`; batches are rounded by largest
//! remainder with at least one sample per GPU. Every GPU runs its batch in
//! one pass: when that does not fit, the simulator reports the OOM — which
//! is what this baseline does to users. Units: samples, ms.

use super::standard::{proportional_split, rank_speeds, standard_plan};

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Speed-proportional batch, even shards, one micro-batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpeedProportional;

/// The speed-proportional local batches of a problem.
pub fn speed_batches(problem: &Problem<'_>) -> Vec<u32> {
    let costs = problem.costs;
    let g = costs.ranks();
    let big_b = costs.workload.global_batch;
    let speeds = rank_speeds(costs, big_b.div_ceil(g as u32));
    proportional_split(big_b, &speeds, 1)
}

impl Planner for SpeedProportional {
    fn name(&self) -> &'static str {
        "speed-proportional"
    }

    fn summary(&self) -> &'static str {
        "batch proportional to GPU speed, even state shards, one micro-batch, no memory awareness (Whale-style)"
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
            false,
            Some(1),
        )
    }
}
