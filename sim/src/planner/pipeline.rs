//! `pipeline`: the pipeline-parallel baseline as DeepSpeed's pipeline
//! engine runs it with its `'uniform'` partition (the Cephalo authors'
//! DeepSpeed comparison point): equal blocks per stage
//! (`partition_uniform`: the first `L mod p` stages one more), one GPU
//! per stage in rank order, or, with more GPUs than blocks, equal
//! data-parallel groups of consecutive ranks (the smallest group size
//! that divides the GPUs and leaves at most `L` stages); the 1F1B
//! schedule (`TrainSchedule`) with replicas inside a stage (ZeRO 0).
//! Micro-batches: `m = 4p` (GPipe's guideline that `m >= 4p` makes the
//! bubble negligible, arXiv 1811.06965 section 2.2), capped by the batch;
//! when that does not fit (the fast model's memory), no recompute then
//! full recompute, then twice the micro-batches, down to one sample per
//! GPU. When nothing fits the plan is infeasible, naming the stage and
//! its shortfall. Units: samples, GiB.

use super::{Planned, Planner, Problem, SearchStats};
use crate::error::PlanError;
use crate::fast::evaluate;
use crate::iteration::SimOptions;
use crate::plan::pipeline::{PipeSchedule, Pipeline, Stage};
use crate::plan::Plan;
use crate::strategy::{
    Accumulation, Checkpointing, Offload, Sharding, Stack, Strategy, StrategySpec,
};

/// Uniform-partition 1F1B pipeline.
#[derive(Debug, Clone, Copy, Default)]
pub struct UniformPipeline;

/// DeepSpeed's `partition_uniform`: `layers` blocks in `p` parts, the
/// first `layers mod p` one larger.
pub fn uniform_counts(layers: u32, p: usize) -> Vec<u32> {
    let p32 = p.max(1) as u32;
    let (q, r) = (layers / p32, layers % p32);
    (0..p32).map(|s| q + u32::from(s < r)).collect()
}

/// The data-parallel shardings a pipeline planner may give a stage's
/// group: the user's pin (every sharding runs inside a stage: replicas,
/// ZeRO-1 as DeepSpeed's pipeline engine and Megatron's distributed
/// optimizer, FSDP and HSDP as torchtitan runs them), else `candidates`;
/// the second list (notes) is kept for pins a planner cannot apply.
pub fn pipeline_shardings(
    problem: &Problem<'_>,
    candidates: &[Sharding],
) -> (Vec<Sharding>, Vec<String>) {
    match problem.strategy.sharding {
        Some(s) => (vec![s], vec![]),
        None => (candidates.to_vec(), vec![]),
    }
}

/// The strategy of a pipeline plan under the user's other pins: `sharding`
/// inside a stage, local accumulation, no offload, checkpointing `ckpt`,
/// the training stack `stack` unless the user names one; notes for pins
/// that cannot apply.
pub fn pipeline_strategy(
    problem: &Problem<'_>,
    sharding: Sharding,
    ckpt: Checkpointing,
    stack: Stack,
) -> Result<(Strategy, Vec<String>), PlanError> {
    let base = StrategySpec {
        sharding: Some(sharding),
        stack: Some(stack),
        ..StrategySpec::NONE
    };
    let forced = StrategySpec {
        sharding: Some(sharding),
        accumulation: Some(Accumulation::NoSync),
        offload: Some(Offload::None),
        checkpointing: Some(ckpt),
        ..StrategySpec::NONE
    };
    let user = StrategySpec {
        sharding: None,
        ..*problem.strategy
    };
    let scoped = Problem {
        strategy: &user,
        ..*problem
    };
    scoped.resolve(&base, &forced)
}

/// The simulator's verdicts on `plans`, judged in parallel: the index and
/// simulated time, ms, of the fastest that fits (the first of equals),
/// `None` when all run out of memory; each counted in `stats`.
pub fn fastest_fitting<'p>(
    judge: &dyn super::Judge,
    plans: impl IntoIterator<Item = &'p Plan>,
    stats: &mut SearchStats,
) -> Result<Option<(usize, f64)>, PlanError> {
    use rayon::prelude::*;
    let plans: Vec<&Plan> = plans.into_iter().collect();
    let verdicts: Vec<_> = plans.par_iter().map(|p| judge.judge(p)).collect();
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in verdicts.into_iter().enumerate() {
        let v = v?;
        stats.simulated += 1;
        if !v.oom && best.is_none_or(|b| v.iteration_ms < b.1) {
            best = Some((i, v.iteration_ms));
        }
    }
    Ok(best)
}

/// What every pipeline plan fixes: gradients accumulate locally over the
/// micro-batches (`no-sync`), nothing is offloaded.
pub const PIPELINE_AXES: StrategySpec = StrategySpec {
    accumulation: Some(Accumulation::NoSync),
    offload: Some(Offload::None),
    ..StrategySpec::NONE
};

/// Checkpointing levels a pipeline planner tries: the user's pin, else
/// none then full.
pub fn pipeline_checkpointing(problem: &Problem<'_>) -> Vec<Checkpointing> {
    match problem.strategy.checkpointing {
        Some(c) => vec![c],
        None => vec![Checkpointing::None, Checkpointing::Full],
    }
}

/// The stage of `plan` (a pipeline plan) with the largest memory
/// shortfall in `peaks` (GiB per rank), as an infeasibility error saying
/// what was tried.
pub fn infeasible_stage(
    problem: &Problem<'_>,
    plan: &Plan,
    peaks_gib: &[f64],
    tried: &str,
) -> PlanError {
    let costs = problem.costs;
    let pipe = plan.pipeline.as_ref().expect("a pipeline plan");
    let mut worst: Option<(f64, usize, usize)> = None;
    for (s, st) in pipe.stages.iter().enumerate() {
        for &r in &st.gpus {
            let over = peaks_gib[r as usize] - costs.usable_gib(r as usize);
            if worst.is_none_or(|w| over > w.0) {
                worst = Some((over, s, r as usize));
            }
        }
    }
    let (over, s, r) = worst.unwrap_or((0.0, 0, 0));
    let first = pipe.first_block(s);
    PlanError::Infeasible {
        message: format!(
            "stage {s} (blocks {first}-{}, rank {r} {}) needs {:.2} GiB, {:.2} GiB over its usable {:.2} GiB, {tried}",
            first + pipe.stages[s].blocks - 1,
            costs.gpu(r).name,
            peaks_gib[r],
            over.max(0.0),
            costs.usable_gib(r)
        ),
        shortfall_gib: over.max(0.0),
        rank: Some(r),
    }
}

impl Planner for UniformPipeline {
    fn name(&self) -> &'static str {
        "pipeline"
    }

    fn summary(&self) -> &'static str {
        "DeepSpeed pipeline (1F1B, uniform partition): equal blocks per stage, one GPU per stage (or equal data-parallel groups), m = 4p micro-batches"
    }

    fn fixed_axes(&self) -> StrategySpec {
        PIPELINE_AXES
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let costs = problem.costs;
        let w = &costs.workload;
        let (n, layers, batch) = (costs.ranks(), w.model.layers, w.global_batch);
        // The smallest group size that divides the GPUs and leaves at
        // most one stage per block.
        let d = (1..=n)
            .find(|d| n.is_multiple_of(*d) && n / d <= layers as usize)
            .unwrap_or(n);
        let p = n / d;
        if (batch as usize) < d {
            return Err(PlanError::Infeasible {
                message: format!(
                    "a pipeline of {p} stages on groups of {d} GPUs needs at least {d} samples per micro-batch, the global batch is {batch}"
                ),
                shortfall_gib: 0.0,
                rank: None,
            });
        }
        let counts = uniform_counts(layers, p);
        let stages: Vec<Stage> = counts
            .iter()
            .enumerate()
            .map(|(s, &blocks)| {
                Stage::new(blocks, ((s * d) as u32..((s + 1) * d) as u32).collect())
            })
            .collect();
        let most = (batch as usize / d) as u32;
        let mut m = (4 * p as u32).min(most).max(1);
        let mut stats = SearchStats::default();
        let mut last: Option<(Plan, Vec<f64>)> = None;
        let opts = SimOptions::default();
        let (shardings, pin_notes) = pipeline_shardings(problem, &[Sharding::NoShard]);
        loop {
            for &ck in &pipeline_checkpointing(problem) {
                let (strategy, mut notes) =
                    pipeline_strategy(problem, shardings[0], ck, Stack::PyTorch)?;
                notes.extend(pin_notes.iter().cloned());
                let pipe = Pipeline::new(PipeSchedule::OneFOneB, m, stages.clone());
                let plan = Plan::pipelined(self.name(), strategy, pipe, n, batch);
                let e = evaluate(costs, &plan, &opts)?;
                stats.candidates += 1;
                stats.fast_evaluated += 1;
                if !e.oom {
                    stats.feasible += 1;
                    let mut planned = Planned::bare(plan);
                    planned.notes = notes;
                    planned.stats = stats;
                    return Ok(planned);
                }
                stats.infeasible += 1;
                last = Some((plan, e.peak_gib));
            }
            if m >= most {
                break;
            }
            m = (2 * m).min(most);
        }
        let (plan, peaks) = last.expect("at least one micro-batch count was tried");
        Err(infeasible_stage(
            problem,
            &plan,
            &peaks,
            &format!(
                "with {} sample(s) per GPU per micro-batch and {} recompute (the uniform partition of {layers} blocks into {p} stages)",
                batch.div_ceil(m).div_ceil(d as u32),
                plan.strategy.checkpointing.name()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_counts_match_deepspeed() {
        assert_eq!(uniform_counts(24, 4), vec![6, 6, 6, 6]);
        assert_eq!(uniform_counts(26, 4), vec![7, 7, 6, 6]);
        assert_eq!(uniform_counts(3, 3), vec![1, 1, 1]);
    }
}
