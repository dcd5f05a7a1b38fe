//! The ablation of Cephalo's two balancing steps (the paper's ablation:
//! "FSDP + GA" = [`super::fsdp_ga`], then compute balancing only, state
//! balancing only, and both = [`super::cephalo`]), each on Cephalo's
//! trainer (layered gradient accumulation, full recompute, activations
//! offloaded), every GPU using the fewest micro-batches that fit:
//!
//! * `balance-compute`: local batches proportional to each GPU's speed
//!   (as [`super::proportional`]), even `1/G` state shards.
//! * `balance-state`: even local batches, state shards proportional to
//!   each GPU's usable memory.
//!
//! Units: samples, GiB.

use super::fsdp_ga::{layered_plan, FsdpGa};
use super::proportional::speed_batches;
use super::standard::even_split;
use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::StrategySpec;

/// Compute balancing only.
#[derive(Debug, Clone, Copy, Default)]
pub struct BalanceCompute;

/// State balancing only.
#[derive(Debug, Clone, Copy, Default)]
pub struct BalanceState;

impl Planner for BalanceCompute {
    fn name(&self) -> &'static str {
        "balance-compute"
    }

    fn summary(&self) -> &'static str {
        "ablation: Cephalo's trainer with batches by GPU speed and even state shards"
    }

    fn fixed_axes(&self) -> StrategySpec {
        FsdpGa.fixed_axes()
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        layered_plan(self.name(), problem, &speed_batches(problem), None)
    }
}

/// State fractions proportional to each GPU's usable memory.
pub fn memory_fractions(problem: &Problem<'_>) -> Vec<f64> {
    let c = problem.costs;
    let mem: Vec<f64> = (0..c.ranks()).map(|r| c.usable_gib(r).max(0.0)).collect();
    let total: f64 = mem.iter().sum();
    if total <= 0.0 {
        return vec![1.0 / c.ranks().max(1) as f64; c.ranks()];
    }
    mem.iter().map(|m| m / total).collect()
}

impl Planner for BalanceState {
    fn name(&self) -> &'static str {
        "balance-state"
    }

    fn summary(&self) -> &'static str {
        "ablation: Cephalo's trainer with even batches and state shards by GPU memory"
    }

    fn fixed_axes(&self) -> StrategySpec {
        FsdpGa.fixed_axes()
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let c = problem.costs;
        let batch = even_split(c.workload.global_batch, c.ranks());
        layered_plan(
            self.name(),
            problem,
            &batch,
            Some(memory_fractions(problem)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::gpu::GpuCatalog;

    #[test]
    fn state_follows_memory_and_sums_to_one() {
        let cl = Cluster::from_gpu_list("a100-80gb,l4", "t", GpuCatalog::builtin()).unwrap();
        let m = crate::model::ModelCatalog::builtin()
            .lookup("gpt-1.3b", "t")
            .unwrap()
            .clone();
        let w = crate::cost::Workload {
            cluster: cl,
            seq_len: m.seq_len,
            model: m,
            dtype: crate::precision::NumFormat::Fp16,
            global_batch: 8,
        };
        let costs = crate::cost::CostModel::build(
            w,
            &crate::profile::ProfileSet::new(),
            &crate::perfmodel::Roofline::default(),
            crate::cost::CostOptions::default(),
        )
        .unwrap();
        let profiles = crate::profile::ProfileSet::new();
        let opts = super::super::PlannerOptions::default();
        let p = Problem {
            costs: &costs,
            profiles: &profiles,
            options: &opts,
            strategy: &StrategySpec::NONE,
            judge: None,
        };
        let f = memory_fractions(&p);
        assert!((f.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(f[0] > 3.0 * f[1], "80 GB against 24 GB: {f:?}");
        let planned = BalanceState.plan(&p).unwrap();
        planned.plan.validate(2, 8, "t").unwrap();
        assert_eq!(planned.plan.gpus[0].batch, planned.plan.gpus[1].batch);
        let planned = BalanceCompute.plan(&p).unwrap();
        planned.plan.validate(2, 8, "t").unwrap();
        assert!(planned.plan.gpus[0].batch > planned.plan.gpus[1].batch);
        assert_eq!(planned.plan.gpus[0].state_fraction, 0.5);
    }
}
