//! A plan as a real framework runs it: the framework's own config file,
//! what of the plan the framework cannot express, and the plan it would
//! actually run (the *approximation*), simulated beside the plan.
//!
//! Frameworks run one local batch and a `1/N` state shard on every rank and
//! accumulate micro-batch by micro-batch; a Cephalo plan may give every GPU
//! its own batch, micro-batch count and state fraction and accumulate layer
//! by layer. [`export`] builds the approximation (same world size, the
//! global batch split evenly, even shards, the framework's accumulation
//! style, the micro-batch size of the plan's tightest GPU, the plan's
//! recompute, offload and dtypes where the framework has them; a pipeline
//! keeps its reduction once per iteration and, when its stages differ,
//! becomes the equal-stage TP x PP x DP shape nearest to it), simulates it
//! with [`crate::simulate::simulate`] and renders the config with the notes
//! and both predictions as comments.
//!
//! One module per framework ([`torchtitan`], [`megatron`], [`deepspeed`],
//! [`accelerate`]),
//! each a [`Target`]; [`TARGETS`] is the registry: a new framework is one
//! module plus a registry line. No I/O: configs are returned as text.
//! Units: samples, ms, tokens/s, GiB.

pub mod accelerate;
pub mod deepspeed;
pub mod megatron;
pub mod target;
pub mod torchtitan;

use crate::cost::{CostModel, Workload};
use crate::error::PlanError;
use crate::iteration::SimOptions;
use crate::plan::pipeline::{PipeSchedule, Pipeline};
use crate::plan::shape::Shape3d;
use crate::plan::Plan;
use crate::report::Report;
use crate::simulate::simulate;
use crate::strategy::{Accumulation, Sharding, Strategy};
pub use target::{comment_block, header_lines, quoted, Exported, Figures, Shape, Target};

/// Every framework, in the order `--help` lists them.
pub const TARGETS: &[&dyn Target] = &[
    &torchtitan::Torchtitan,
    &megatron::Megatron,
    &deepspeed::DeepSpeed,
    &accelerate::Accelerate,
];

/// The names of [`TARGETS`].
pub fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|t| t.name()).collect()
}

/// The target named `name` (case-insensitive).
pub fn by_name(name: &str) -> Option<&'static dyn Target> {
    TARGETS
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
}

/// Exports `plan` (simulated as `report`) on the workload of `costs` to
/// `target`: builds and simulates the approximation and renders the config.
/// Errors when the target cannot run the plan's kind at all (a pipeline
/// where it has none).
pub fn export(
    costs: &CostModel,
    plan: &Plan,
    report: &Report,
    target: &dyn Target,
) -> Result<Exported, PlanError> {
    let w = &costs.workload;
    if plan.pipeline.is_some() && !target.pipelines() {
        return Err(PlanError::invalid(
            "--export",
            "pipeline",
            format!(
                "{} cannot run a pipeline plan ({}); export it to {} or choose a data-parallel planner",
                target.name(),
                plan.label(),
                TARGETS
                    .iter()
                    .filter(|t| t.pipelines())
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    let mut notes = lost(plan);
    let ep = plan
        .pipeline
        .as_ref()
        .map_or(1, |p| p.expert_parallel.max(1));
    notes.extend(experts_note(target, &w.model, ep));
    let (mut strategy, mut snotes) = target.strategy(&plan.strategy);
    if strategy.sharding != Sharding::Hybrid {
        // Without hybrid sharding the shard group is every GPU.
        strategy.shard_group = w.cluster.len() as u32;
    }
    if plan.pipeline.is_none() {
        // A pipeline accumulates over its micro-batches and reduces once.
        strategy.accumulation = target.accumulation(strategy.sharding);
    }
    notes.append(&mut snotes);
    let (approximation, shape, mut anotes) = approximate(w, plan, strategy, target);
    notes.append(&mut anotes);
    if plan.strategy.accumulation == Accumulation::Layered
        && plan.gpus.iter().any(|g| g.microbatches > 1)
    {
        notes.push(format!(
            "layered gradient accumulation (one gather and one reduce per unit for all micro-batches) is Cephalo's own: no framework runs it; {} accumulates {}",
            target.name(),
            accumulation_words(strategy.accumulation)
        ));
    }
    let approximated = match approximation.validate(w.cluster.len(), w.global_batch, "export") {
        Err(e) => {
            notes.push(format!("the approximation is not a valid plan here: {e}"));
            None
        }
        Ok(()) => match simulate(costs, &approximation, &SimOptions::default()) {
            Ok(r) => Some(Figures::of(&r)),
            Err(e) => {
                notes.push(format!("the approximation could not be simulated: {e}"));
                None
            }
        },
    };
    let planned = Figures::of(report);
    if let Some(a) = &approximated {
        if a.oom {
            notes.push(format!(
                "the approximation runs out of memory: {}",
                a.oom_gpus.join("; ")
            ));
        }
    }
    let slowdown = approximated
        .as_ref()
        .filter(|a| !a.oom && !planned.oom && planned.iteration_ms > 0.0)
        .map(|a| a.iteration_ms / planned.iteration_ms);
    let mut e = Exported {
        framework: target.name(),
        planner: plan.planner.clone(),
        model: w.model.name.clone(),
        model_spec: w.model.clone(),
        dtype: w.dtype.to_string(),
        shape,
        strategy,
        planned_strategy: plan.strategy,
        approximation,
        notes,
        planned,
        approximated,
        slowdown,
        config: String::new(),
    };
    e.config = target.render(&e);
    Ok(e)
}

/// How `target` builds the model's experts, ended with what the
/// simulation assumed (capacity, expert parallelism); `None` without
/// experts in every block.
fn experts_note(target: &dyn Target, model: &crate::model::ModelSpec, ep: u32) -> Option<String> {
    let m = model.uniform_moe()?;
    let split = match ep {
        0 | 1 => "every rank holding a slice of every expert as the simulation runs them (no expert parallelism)".to_string(),
        e => format!(
            "the experts split over EP {e} (each rank {} of them, tokens dispatched and combined by all-to-all), as the simulation runs them",
            m.experts / e
        ),
    };
    let capacity = match m.capacity_factor {
        Some(cf) => format!("capacity factor {cf}, every expert padded to it"),
        None => "dropless (no capacity factor)".to_string(),
    };
    Some(format!(
        "{}: {capacity}, {split}",
        target.experts(m, &model.name, ep)
    ))
}

/// How an accumulation style reads in a note.
fn accumulation_words(a: Accumulation) -> &'static str {
    match a {
        Accumulation::Layered => "layer by layer",
        Accumulation::NoSync => {
            "micro-batch by micro-batch under no_sync() (one reduction after the last)"
        }
        Accumulation::Sync => {
            "micro-batch by micro-batch, reducing gradients after every micro-batch"
        }
    }
}

/// What of `plan` no framework config expresses (batches, shards and
/// micro-batch counts that differ per GPU, state-only GPUs, pipeline stages
/// that differ), one sentence each.
pub fn lost(plan: &Plan) -> Vec<String> {
    let mut v = Vec::new();
    let batches: Vec<u32> = plan.gpus.iter().map(|g| g.batch).collect();
    let (bmin, bmax) = min_max(&batches);
    if plan.pipeline.is_none() && bmin != bmax {
        v.push(format!(
            "uneven per-GPU batches ({}): frameworks run one local batch on every rank",
            crate::lists::runs(&batches)
        ));
    }
    if plan.pipeline.is_none() && bmin == 0 {
        v.push(
            "state-only GPUs (batch 0, holding state and joining collectives): frameworks give every rank samples"
                .into(),
        );
    }
    let fr = plan.state_fractions();
    let (fmin, fmax) = fr
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    if plan.strategy.sharding.shards_params() && plan.pipeline.is_none() && fmax - fmin > 1e-9 {
        v.push(format!(
            "uneven state shards ({:.2}% to {:.2}% of the state per GPU): frameworks shard 1/N",
            fmin * 100.0,
            fmax * 100.0
        ));
    }
    let micro: Vec<u32> = plan
        .gpus
        .iter()
        .filter(|g| g.batch > 0)
        .map(|g| g.microbatches)
        .collect();
    let (nmin, nmax) = min_max(&micro);
    if plan.pipeline.is_none() && nmin != nmax {
        v.push(format!(
            "per-GPU micro-batch counts ({}): frameworks run one count on every rank",
            crate::lists::runs(&micro)
        ));
    }
    if let Some(p) = &plan.pipeline {
        if !homogeneous(p) {
            v.push(format!(
                "heterogeneous pipeline stages ({}): frameworks split blocks evenly over equal stages with equal replica shares",
                p.label()
            ));
        }
    }
    v
}

fn min_max(v: &[u32]) -> (u32, u32) {
    (
        v.iter().copied().min().unwrap_or(0),
        v.iter().copied().max().unwrap_or(0),
    )
}

/// Whether every stage has the same width, TP degree, block count (within
/// one) and equal replica shares.
fn homogeneous(p: &Pipeline) -> bool {
    let Some(s0) = p.stages.first() else {
        return true;
    };
    let (bmin, bmax) = min_max(&p.stages.iter().map(|s| s.blocks).collect::<Vec<_>>());
    p.stages.iter().all(|s| {
        s.gpus.len() == s0.gpus.len() && s.tp == s0.tp && s.shares.windows(2).all(|w| w[0] == w[1])
    }) && bmax - bmin <= 1
}

/// The plan `target` would run for `plan` under `strategy`, its shape, and
/// notes on what changed.
fn approximate(
    w: &Workload,
    plan: &Plan,
    strategy: Strategy,
    target: &dyn Target,
) -> (Plan, Shape, Vec<String>) {
    match &plan.pipeline {
        Some(p) => approximate_pipeline(w, plan, p, strategy, target),
        None => approximate_data_parallel(w, plan, strategy, target.name()),
    }
}

/// The largest divisor of `b` not above `m` (at least 1).
fn divisor_at_most(b: u32, m: u32) -> u32 {
    (1..=m.min(b).max(1))
        .rev()
        .find(|d| b.is_multiple_of(*d))
        .unwrap_or(1)
}

/// `b` rounded to the nearest multiple of `unit` (at least `unit`).
fn nearest_multiple(b: u32, unit: u32) -> u32 {
    let unit = unit.max(1);
    (((b as f64 / unit as f64).round() as u32).max(1)) * unit
}

fn approximate_data_parallel(
    w: &Workload,
    plan: &Plan,
    strategy: Strategy,
    name: &str,
) -> (Plan, Shape, Vec<String>) {
    let g = plan.gpus.len().max(1) as u32;
    let big_b = w.global_batch;
    let mut notes = Vec::new();
    let batch = crate::planner::standard::even_split(big_b, g as usize);
    // The micro-batch size of the plan's tightest GPU fits there; the
    // framework runs it everywhere.
    let m_plan = plan
        .gpus
        .iter()
        .filter(|r| r.batch > 0)
        .map(|r| r.microbatch_size)
        .min()
        .unwrap_or(1)
        .max(1);
    let even = big_b.is_multiple_of(g);
    let b = big_b / g;
    let m = if even {
        divisor_at_most(b, m_plan)
    } else {
        m_plan.min(b.max(1))
    };
    let n = batch[0].div_ceil(m).max(1);
    if m != m_plan {
        notes.push(format!(
            "micro-batch size {m} (the plan's smallest is {m_plan}): {name} needs the local batch {b} to be a whole number of micro-batches"
        ));
    }
    let (dp_replicate, dp_shard) = match strategy.sharding {
        Sharding::Full | Sharding::GradOp => (1, g),
        Sharding::NoShard => (g, 1),
        Sharding::Hybrid => {
            let k = strategy.shard_group.clamp(1, g);
            (g / k, k)
        }
    };
    let unit = m * n * g;
    let global = if even && big_b == unit {
        big_b
    } else {
        nearest_multiple(big_b, m * g)
    };
    if !even {
        notes.push(format!(
            "the global batch {big_b} is not a multiple of the {g} GPUs: {name} needs global = micro-batch x accumulation steps x {g}; the config states {global}, and the side-by-side simulation keeps {big_b} with the first {} GPUs taking one sample more (which {name} cannot run)",
            big_b % g
        ));
    }
    let fractions = crate::planner::standard::even_fractions(&strategy, g as usize);
    let pairs: Vec<(u32, u32)> = batch.iter().map(|&bi| (bi, bi.div_ceil(m))).collect();
    let approx = crate::planner::standard::plan_from(
        &format!("{name} (export approximation)"),
        strategy,
        &pairs,
        &fractions,
    );
    let shape = Shape {
        world: g,
        nodes: w.cluster.nodes.len() as u32,
        dp_replicate,
        dp_shard,
        tp: 1,
        pp: 1,
        micro_batch: m,
        accumulation_steps: n,
        global_batch: global,
        global_batch_exact: global == big_b,
        seq_len: w.seq_len,
        ep: 1,
        etp: 1,
    };
    (approx, shape, notes)
}

/// The equal-stage pipeline a framework runs on `world` GPUs in place of
/// the heterogeneous `p` (TP the plan's smallest where it divides the GPUs,
/// as many stages as the plan's that divide the TP groups, even blocks,
/// the largest micro-batch up to the plan's that divides the batch), and a
/// note saying so (`None`: no such shape; the plan's stages are kept).
fn even_pipeline(w: &Workload, world: u32, p: &Pipeline, name: &str) -> (Option<Pipeline>, String) {
    let tp = p.stages.iter().map(|s| s.tp).min().unwrap_or(1).max(1);
    let tp = if world.is_multiple_of(tp) { tp } else { 1 };
    let groups = (world / tp).max(1);
    let pp = divisor_at_most(groups, p.stages.len() as u32);
    let dp = groups / pp;
    let want = w
        .global_batch
        .div_ceil(p.microbatches.max(1))
        .div_ceil(dp)
        .max(1);
    let b = (1..=want)
        .rev()
        .find(|b| w.global_batch.is_multiple_of(dp * b))
        .unwrap_or(1);
    let schedule = match p.schedule {
        PipeSchedule::Interleaved => PipeSchedule::OneFOneB,
        s => s,
    };
    // Expert parallelism carries over where the new replicas take it (and
    // whole experts only with TP to fold them into).
    let ep = p.expert_parallel.max(1);
    let ep = if dp.is_multiple_of(ep) { ep } else { 1 };
    let shape = Shape3d {
        tp,
        pp,
        sequence_parallel: p.sequence_parallel || (ep > 1 && tp > 1),
        schedule,
        microbatch_size: b,
        expert_parallel: ep,
        expert_tensor_parallel: p.expert_tensor_parallel.filter(|_| ep > 1 && tp > 1),
        ..Shape3d::default()
    };
    match shape.pipeline(world as usize, w.model.layers, w.global_batch) {
        Ok(e) => (
            Some(e),
            format!(
                "{name} runs equal stages: approximated as TP {tp} x PP {pp} x DP {dp}{}, {b}-sample micro-batches, blocks split evenly, {schedule}",
                match (p.expert_parallel.max(1), ep) {
                    (1, _) => String::new(),
                    (a, b) if a == b => format!(" x EP {b}"),
                    (a, _) => format!(" (the plan's EP {a} does not divide the {dp} replicas: no expert parallelism)"),
                }
            ),
        ),
        Err(e) => (
            None,
            format!(
                "{name} runs equal stages but no TP x PP x DP shape near the plan's fits this workload ({e}); the side-by-side simulation keeps the plan's stages (its figures understate what {name} loses)"
            ),
        ),
    }
}

fn approximate_pipeline(
    w: &Workload,
    plan: &Plan,
    p: &Pipeline,
    strategy: Strategy,
    target: &dyn Target,
) -> (Plan, Shape, Vec<String>) {
    let name = target.name();
    let mut notes = Vec::new();
    let mut pipe = p.clone();
    notes.extend(target.pipeline(&mut pipe));
    if homogeneous(p) {
        // Even blocks (the first stages one more) and equal shares.
        let total: u32 = p.stages.iter().map(|s| s.blocks).sum();
        let blocks = crate::planner::standard::even_split(total, p.stages.len());
        for (s, b) in pipe.stages.iter_mut().zip(blocks) {
            s.blocks = b;
            s.shares.clear();
        }
    } else {
        let (even, note) = even_pipeline(w, plan.gpus.len() as u32, &pipe, name);
        notes.push(note);
        if let Some(e) = even {
            pipe = e;
        }
    }
    let pp = pipe.stages.len().max(1) as u32;
    let tp = pipe.stages.first().map_or(1, |s| s.tp).max(1);
    let width = pipe
        .stages
        .first()
        .map_or(1, |s| s.gpus.len() as u32)
        .max(1);
    let dp = (width / tp).max(1);
    let m = pipe.microbatches.max(1);
    // (What the approximation runs, which the config states.)
    let (ep, etp) = (
        pipe.expert_parallel.max(1),
        pipe.expert_tensor_parallel.unwrap_or(tp).max(1),
    );
    let approx = Plan::pipelined(
        &format!("{name} (export approximation)"),
        strategy,
        pipe,
        plan.gpus.len(),
        w.global_batch,
    );
    let per_micro = w.global_batch.div_ceil(m);
    let micro = per_micro.div_ceil(dp).max(1);
    let global = micro * m * dp;
    if global != w.global_batch {
        notes.push(format!(
            "the global batch {} does not split into {m} micro-batches over {dp} replicas evenly: the config states {global}",
            w.global_batch
        ));
    }
    let (dp_replicate, dp_shard) = match strategy.sharding {
        Sharding::Full | Sharding::GradOp => (1, dp),
        Sharding::NoShard => (dp, 1),
        Sharding::Hybrid => {
            let k = strategy.shard_group.clamp(1, dp);
            (dp / k, k)
        }
    };
    let shape = Shape {
        world: plan.gpus.len() as u32,
        nodes: w.cluster.nodes.len() as u32,
        dp_replicate,
        dp_shard,
        tp,
        pp,
        micro_batch: micro,
        accumulation_steps: m,
        global_batch: global,
        global_batch_exact: global == w.global_batch,
        seq_len: w.seq_len,
        ep,
        etp,
    };
    (approx, shape, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_and_multiples() {
        assert_eq!(divisor_at_most(12, 5), 4);
        assert_eq!(divisor_at_most(7, 3), 1);
        assert_eq!(divisor_at_most(8, 8), 8);
        assert_eq!(nearest_multiple(10, 4), 12);
        assert_eq!(nearest_multiple(1, 4), 4);
    }

    #[test]
    fn registry_names_are_unique_and_found() {
        let n = names();
        for (i, a) in n.iter().enumerate() {
            assert!(!n[i + 1..].contains(a), "{a} twice");
            assert_eq!(by_name(&a.to_uppercase()).map(|t| t.name()), Some(*a));
        }
        assert!(by_name("nemo").is_none());
    }

    #[test]
    fn quoted_escapes() {
        assert_eq!(quoted("a\"b\n"), "\"a\\\"b\\n\"");
    }
}
