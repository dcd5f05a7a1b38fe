//! `zero2`: ZeRO-2 / FSDP SHARD_GRAD_OP with the rule of [`super::fsdp`]:
//! gradients and optimizer state sharded, parameters gathered once per
//! micro-batch for its forward and kept unsharded until its backward (under
//! `no_sync()`, across all micro-batches until the last one), so there is no
//! backward all-gather but every unit's parameters are live at once.
//! Units: samples, GiB.

use super::standard::even_standard_plan;

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Even-batch ZeRO-2.
#[derive(Debug, Clone, Copy, Default)]
pub struct Zero2;

impl Planner for Zero2 {
    fn name(&self) -> &'static str {
        "zero2"
    }

    fn summary(&self) -> &'static str {
        "ZeRO-2 (SHARD_GRAD_OP): same batch everywhere, parameters kept gathered from forward to backward"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            sharding: Some(Sharding::GradOp),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        even_standard_plan(self, problem)
    }
}
