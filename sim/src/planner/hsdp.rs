//! `hsdp`: FSDP HYBRID_SHARD with the rule of [`super::fsdp`]: the state is
//! fully sharded inside each shard group (the GPUs of one node unless
//! `--shard-group` says otherwise) and replicated across groups; gradients
//! are reduce-scattered inside the group, then all-reduced across groups
//! on a second communicator that overlaps the group's collectives. Units:
//! samples, GiB.

use super::standard::even_standard_plan;

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::{Sharding, StrategySpec};

/// Even-batch hybrid sharding.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hsdp;

impl Planner for Hsdp {
    fn name(&self) -> &'static str {
        "hsdp"
    }

    fn summary(&self) -> &'static str {
        "HSDP (HYBRID_SHARD): full shard inside each node, replicas across nodes"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            sharding: Some(Sharding::Hybrid),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        even_standard_plan(self, problem)
    }
}
