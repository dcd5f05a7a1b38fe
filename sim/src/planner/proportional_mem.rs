//! `speed-proportional-mem`: speed-proportional local batches (as
//! [`super::proportional`]) made memory-aware by gradient accumulation, but
//! without rebalancing the training state: every GPU keeps `1/G` of it and
//! splits its batch into the fewest micro-batches that fit next to that
//! shard. Where not even one sample fits, the plan is returned anyway and the
//! simulator reports the OOM. Units: samples, GiB.

use super::fsdp_ga::per_rank_microbatches;
use super::proportional::speed_batches;
use super::{plan_from, Planned, Planner, Problem};
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
        let g = problem.costs.ranks();
        let batch = speed_batches(problem);
        let fr = vec![1.0 / g as f64; g];
        let (n, oom) = per_rank_microbatches(problem, &batch, &fr);
        let pairs: Vec<(u32, u32)> = batch.iter().zip(&n).map(|(&b, &n)| (b, n)).collect();
        let mut out = Planned::bare(plan_from(self.name(), &pairs, &fr));
        for i in oom {
            out.notes.push(format!(
                "not even one sample fits on GPU {i} ({}) with an even state shard",
                problem.costs.gpu(i).name
            ));
        }
        Ok(out)
    }
}
