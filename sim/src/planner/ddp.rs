//! `ddp`: PyTorch DDP (FSDP NO_SHARD) with the rule of [`super::fsdp`]:
//! a full replica of the training state and DDP's gradient buckets on
//! every GPU, gradients all-reduced in 25 MiB buckets (the first 1 MiB) as
//! the backward makes them ready, `no_sync()` accumulation. Units: samples,
//! GiB.

use super::standard::even_standard_plan;

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Even-batch DDP.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ddp;

impl Planner for Ddp {
    fn name(&self) -> &'static str {
        "ddp"
    }

    fn summary(&self) -> &'static str {
        "DDP (NO_SHARD): full replicas, bucketed gradient all-reduce overlapping the backward"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            sharding: Some(Sharding::NoShard),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        even_standard_plan(self, problem)
    }
}
