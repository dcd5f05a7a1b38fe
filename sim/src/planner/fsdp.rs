//! `fsdp`: plain FSDP / ZeRO-3 data parallelism, as a user would run it on a
//! mixed cluster.
//!
//! Every GPU gets the same local batch (`B / G`, the first `B mod G` ranks
//! one more) and the same `1/G` of the training state. When the local batch
//! does not fit in one pass, the user accumulates gradients: the planner
//! picks the fewest micro-batches (same count on every GPU) whose size fits
//! on the tightest GPU with its even shard. When not even one sample fits,
//! the plan is returned anyway (one sample per micro-batch) and the
//! simulator reports the out-of-memory GPU. Units: samples, GiB.

use super::{even_split, max_microbatch, plan_from, Planned, Planner, Problem};
use crate::error::PlanError;

/// Even-batch, even-shard FSDP.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fsdp;

/// The fewest micro-batches, the same on every rank, for which every rank's
/// largest micro-batch fits with state fraction `r`; with `None` when not
/// even single-sample micro-batches fit.
pub fn uniform_microbatches(problem: &Problem<'_>, batch: &[u32], r: f64) -> (u32, Option<usize>) {
    let costs = problem.costs;
    let bmax = batch.iter().copied().max().unwrap_or(0).max(1);
    let limits: Vec<u32> = (0..costs.ranks())
        .map(|i| max_microbatch(costs, i, r, bmax))
        .collect();
    let worst = (0..limits.len()).min_by_key(|&i| (limits[i], i));
    for n in 1..=bmax {
        let ok = batch
            .iter()
            .zip(&limits)
            .all(|(&b, &lim)| b == 0 || b.div_ceil(n.min(b)) <= lim);
        if ok {
            return (n, None);
        }
    }
    (bmax, worst)
}

impl Planner for Fsdp {
    fn name(&self) -> &'static str {
        "fsdp"
    }

    fn summary(&self) -> &'static str {
        "plain FSDP: same batch and same 1/G state shard on every GPU, fewest micro-batches that fit"
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let g = problem.costs.ranks();
        let batch = even_split(problem.costs.workload.global_batch, g);
        let r = 1.0 / g as f64;
        let (n, oom) = uniform_microbatches(problem, &batch, r);
        let pairs: Vec<(u32, u32)> = batch.iter().map(|&b| (b, n.min(b))).collect();
        let mut out = Planned::bare(plan_from(self.name(), &pairs, &vec![r; g]));
        if let Some(i) = oom {
            out.notes.push(format!(
                "not even one sample per micro-batch fits on GPU {i} ({}) with an even state shard",
                problem.costs.gpu(i).name
            ));
        }
        Ok(out)
    }
}
