//! `fsdp-ga`: even batches on Cephalo's trainer (layered gradient
//! accumulation) but no balancing (the paper's "FSDP + GA" configuration).
//!
//! Same batch and same `1/G` state shard on every GPU, like
//! [`super::fsdp`]; every GPU then uses the largest micro-batch that fits
//! *its own* memory (so a large GPU runs fewer, bigger micro-batches), with
//! layered gradient accumulation: each unit is gathered once per pass
//! whatever the micro-batch count, every block recomputed, activations
//! offloaded. Units: samples, GiB.

use super::standard::{even_split, fits, plan_from, sizes};

use super::{Planned, Planner, Problem};
use crate::data_parallel::Routine;
use crate::error::PlanError;
use crate::strategy::{Accumulation, StrategySpec};

/// Why GPU `i` cannot hold its `b` samples in as many micro-batches as
/// the simulator allows (state fraction `r`): the memory it would still
/// need at that count, on the GPU or (offloaded activations) on the host.
fn too_many_microbatches(
    problem: &Problem<'_>,
    routine: &Routine<'_>,
    i: usize,
    b: u32,
    r: f64,
) -> PlanError {
    let costs = problem.costs;
    let n = crate::limits::MAX_MICROBATCHES;
    let local = super::standard::local_params(routine, r);
    let node = &costs.workload.cluster.nodes[costs.workload.cluster.gpus[i].node];
    let gib = |x: i64| x as f64 / crate::units::GIB;
    let floor = crate::bounds::host_floor(routine, i, &sizes(b, n), local).map_or(0.0, gib);
    let (what, short) = if floor > node.host_mem_gib {
        (
            format!(
                "its offloaded activations alone need at least {floor:.1} GiB of host memory on node {}, which has {:.1} GiB",
                node.name, node.host_mem_gib
            ),
            floor - node.host_mem_gib,
        )
    } else {
        let dev = crate::bounds::rank_peak(routine, i, &sizes(b, n), n, local)
            .map_or(f64::INFINITY, |p| gib(p.device_bytes));
        let usable = costs.usable_gib(i);
        (
            format!("it would still need {dev:.1} GiB of {usable:.1} GiB usable GPU memory"),
            (dev - usable).max(0.0),
        )
    };
    PlanError::Infeasible {
        message: format!(
            "GPU {i} ({}) cannot fit its {b} samples under {} in up to {n} micro-batches (the simulator's limit): at {n}, {what}",
            costs.gpu(i).name,
            routine.strategy.label()
        ),
        shortfall_gib: short,
        rank: Some(i),
    }
}

/// Even batch, even shard, per-GPU largest micro-batch, layered.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsdpGa;

/// The plan of given local batches on Cephalo's trainer (the user's pins
/// on other axes kept) with even `1/G` state shards, each GPU using the
/// fewest micro-batches that fit next to its shard; GPUs where not even
/// one sample fits are named in the notes (the simulator reports the OOM).
pub fn even_shard_plan(
    name: &str,
    problem: &Problem<'_>,
    batch: &[u32],
) -> Result<Planned, PlanError> {
    layered_plan(name, problem, batch, None)
}

/// [`even_shard_plan`] with state fractions `fractions` (one per GPU,
/// summing to 1; `None`: even).
pub fn layered_plan(
    name: &str,
    problem: &Problem<'_>,
    batch: &[u32],
    fractions: Option<Vec<f64>>,
) -> Result<Planned, PlanError> {
    let g = problem.costs.ranks();
    let (strategy, notes) = problem.resolve(&StrategySpec::default(), &FsdpGa.fixed_axes())?;
    let routine = Routine::new(problem.costs, strategy);
    let fr = fractions.unwrap_or_else(|| super::standard::even_fractions(&strategy, g));
    let mut pairs = Vec::with_capacity(g);
    let mut oom = Vec::new();
    let mut seen: Vec<(usize, u32, u32)> = Vec::new();
    for (i, &b) in batch.iter().enumerate() {
        if b == 0 {
            pairs.push((0, 0));
            continue;
        }
        let t = problem.costs.rank_type[i];
        if let Some(&(_, _, n)) = seen.iter().find(|x| x.0 == t && x.1 == b) {
            pairs.push((b, n));
            continue;
        }
        // No count fits whose largest micro-batch does not fit alone
        // (more micro-batches keep more), and a larger one alone needs
        // more: bisect the largest micro-batch that fits alone, start at
        // its count. Counts sharing a largest micro-batch need no less
        // memory than the first of them, so only the first count of each
        // micro-batch size is tried after it.
        let alone = |m: u32| fits(&routine, i, &[m], 1, fr[i]);
        let (mut lo, mut hi) = (0u32, b);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if alone(mid)? {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let mut n = if lo == 0 { b + 1 } else { b.div_ceil(lo) };
        while n <= b {
            if n > crate::limits::MAX_MICROBATCHES {
                return Err(too_many_microbatches(problem, &routine, i, b, fr[i]));
            }
            if fits(&routine, i, &sizes(b, n), n, fr[i])? {
                break;
            }
            let m = b.div_ceil(n);
            n = if m <= 1 { b + 1 } else { b.div_ceil(m - 1) };
        }
        if n > b {
            oom.push(i);
            n = b;
        }
        seen.push((t, b, n));
        pairs.push((b, n));
    }
    let mut out = Planned::bare(plan_from(name, strategy, &pairs, &fr));
    out.notes = notes;
    for i in oom {
        out.notes.push(format!(
            "not even one sample fits on GPU {i} ({}) next to its state shard",
            problem.costs.gpu(i).name
        ));
    }
    Ok(out)
}

impl Planner for FsdpGa {
    fn name(&self) -> &'static str {
        "fsdp-ga"
    }

    fn summary(&self) -> &'static str {
        "FSDP + layered gradient accumulation: same batch and shard everywhere, each GPU's largest micro-batch"
    }

    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec {
            accumulation: Some(Accumulation::Layered),
            ..StrategySpec::NONE
        }
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let batch = even_split(problem.costs.workload.global_batch, problem.costs.ranks());
        even_shard_plan(self.name(), problem, &batch)
    }
}
