//! `fsdp-ga`: even batches with Cephalo's layered gradient accumulation but
//! no balancing (the paper's "FSDP + GA" configuration).
//!
//! Same batch and same `1/G` state shard on every GPU, like [`super::fsdp`];
//! every GPU then uses the largest micro-batch that fits *its own* memory
//! (so a large GPU runs fewer, bigger micro-batches), with layered gradient
//! accumulation keeping activation memory at one micro-batch. Units:
//! samples, GiB.

use super::{even_split, max_microbatch, plan_from, Planned, Planner, Problem};
use crate::error::PlanError;

/// Even batch, even shard, per-GPU largest micro-batch.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsdpGa;

/// The plan of given local batches with even `1/G` state shards, each GPU
/// using the fewest micro-batches that fit next to its shard; GPUs where not
/// even one sample fits are named in the notes (the simulator reports the OOM).
pub fn even_shard_plan(name: &str, problem: &Problem<'_>, batch: &[u32]) -> Planned {
    let g = problem.costs.ranks();
    let fr = vec![1.0 / g as f64; g];
    let (n, oom) = per_rank_microbatches(problem, batch, &fr);
    let pairs: Vec<(u32, u32)> = batch.iter().zip(&n).map(|(&b, &n)| (b, n)).collect();
    let mut out = Planned::bare(plan_from(name, &pairs, &fr));
    for i in oom {
        out.notes.push(format!(
            "not even one sample fits on GPU {i} ({}) with an even state shard",
            problem.costs.gpu(i).name
        ));
    }
    out
}

/// Per rank, the fewest micro-batches whose size fits with state fraction
/// `fractions[i]`; ranks where one sample does not fit get single-sample
/// micro-batches and are returned in the second list.
pub fn per_rank_microbatches(
    problem: &Problem<'_>,
    batch: &[u32],
    fractions: &[f64],
) -> (Vec<u32>, Vec<usize>) {
    let costs = problem.costs;
    let mut oom = Vec::new();
    let n = batch
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if b == 0 {
                return 0;
            }
            let lim = max_microbatch(costs, i, fractions[i], b);
            if lim == 0 {
                oom.push(i);
                b
            } else {
                b.div_ceil(lim)
            }
        })
        .collect();
    (n, oom)
}

impl Planner for FsdpGa {
    fn name(&self) -> &'static str {
        "fsdp-ga"
    }

    fn summary(&self) -> &'static str {
        "FSDP + layered gradient accumulation: same batch and shard everywhere, each GPU's largest micro-batch"
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let batch = even_split(problem.costs.workload.global_batch, problem.costs.ranks());
        Ok(even_shard_plan(self.name(), problem, &batch))
    }
}
