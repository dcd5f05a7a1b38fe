//! `megatron`: the homogeneous 3D search Megatron-LM users do by hand
//! (Narayanan et al. 2021, section 3's takeaways) or with Calculon
//! (Isaev et al. SC'23, `OptimalExecution`): every shape of the cluster in
//! Megatron's rank order (TP fastest, then DP, then PP,
//! [`crate::plan::shape::Shape3d`]), ranked by the pipeline closed form
//! ([`crate::pipeline::estimate`], held to the simulator by the tests) and
//! the best confirmed by the simulator.
//!
//! Search space (Megatron's constraints, REAL-SYSTEMS-2 section 4.1):
//!
//! * TP `t`: the degrees the model allows ([`crate::tensor::degrees`]:
//!   dividing its heads, KV heads and MLP width) that divide the smallest
//!   node, so every TP group is one node's NVLink domain;
//! * PP `p`: dividing both the TP groups (`N / t`) and the blocks (`L mod
//!   p = 0`, Megatron's rule without a custom layout); DP `d = N / (t p)`;
//! * micro-batch size `b` in 1, 2, 4, 8, 16 with `B mod (d b) = 0`
//!   (`m = B / (d b)` micro-batches per replica);
//! * schedule: 1F1B, and with `p > 1` interleaved 1F1B with `v` in 2, 4
//!   chunks where `v` divides `L / p` and `p` divides `m`;
//! * sequence parallelism off / on (with `t > 1`);
//! * recompute none, core attention (Megatron's selective), full;
//! * distributed optimizer (ZeRO-1 over the DP group, `grad-op`) off / on
//!   (with `d > 1`);
//! * rank order (with `p > 1` and `d > 1`, where they differ): Megatron's
//!   `tp-cp-ep-dp-pp` and `tp-pp-dp` ([`RankOrder`]: pipeline neighbours
//!   or data-parallel peers on a node's NVLink).
//!
//! User pins narrow the space (the 3D shape's [`ShapePins`]: TP, PP,
//! schedule, chunks, micro-batch size, SP, rank order; checkpointing,
//! sharding `none` / `grad-op`, attention). Megatron's DDP overlap knobs
//! (`--overlap-grad-reduce`, `--overlap-param-gather`) are not searched:
//! off, Megatron's defaults, unless pinned (a pinned parameter-gather
//! overlap brings the gradient one with it, which Megatron requires, and
//! keeps the distributed optimizer only). Pruning: a shape whose constant memory (its state share)
//! alone exceeds the smallest GPU is dropped before its estimate; the
//! estimate's per-stage peaks drop the rest that do not fit. The
//! [`CONFIRM`] best estimates are simulated and the fastest that fits
//! wins; with no judge the best estimate stands. Units: samples, ms, bytes.

use super::pipeline::{pipeline_shardings, pipeline_strategy, PIPELINE_AXES};
use super::{Judge, Planned, Planner, Problem, SearchStats};
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::plan::pipeline::PipeSchedule;
use crate::plan::shape::{RankOrder, Shape3d, ShapePins};
use crate::plan::Plan;
use crate::strategy::{default_3d_stack, Checkpointing, Sharding, Strategy, StrategySpec};
use crate::units::GIB;

/// Candidates the simulator confirms (the best estimates).
pub const CONFIRM: usize = 3;

/// Micro-batch sizes tried (Megatron runs use 1 to a few; beyond 16 the
/// bubble rarely pays for the memory).
const MICRO_SIZES: [u32; 5] = [1, 2, 4, 8, 16];

/// Chunks per GPU the interleaved schedule tries.
const CHUNKS: [u32; 2] = [2, 4];

/// Megatron-LM's homogeneous 3D search.
#[derive(Debug, Clone, Copy, Default)]
pub struct Megatron;

/// One shape of the search, estimated.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The shape.
    pub shape: Shape3d,
    /// The plan it implies.
    pub plan: Plan,
    /// The closed form's iteration, ms.
    pub estimate_ms: f64,
}

/// The shapes of the search space for `costs` (module docs), before the
/// strategy axes, narrowed to those matching `pins` (a pinned schedule
/// outside the search's, GPipe or ZB-H1, replaces 1F1B; a pinned chunk
/// count replaces 2 and 4).
pub fn shapes(costs: &CostModel, pins: &ShapePins) -> Vec<Shape3d> {
    let w = &costs.workload;
    let n = costs.ranks();
    let (layers, batch) = (w.model.layers as usize, w.global_batch as u64);
    let node = w
        .cluster
        .nodes
        .iter()
        .map(|x| x.gpus)
        .min()
        .unwrap_or(1)
        .max(1);
    let sizes: Vec<u32> = match pins.microbatch_size {
        Some(b) => vec![b],
        None => MICRO_SIZES.to_vec(),
    };
    let chunks: Vec<u32> = match pins.virtual_stages {
        Some(v) => vec![v],
        None => CHUNKS.to_vec(),
    };
    let plain = match pins.schedule {
        Some(s) if s != PipeSchedule::Interleaved => s,
        _ => PipeSchedule::OneFOneB,
    };
    let mut out = Vec::new();
    for t in crate::tensor::degrees(&w.model) {
        let t = t as usize;
        if !node.is_multiple_of(t) || !n.is_multiple_of(t) {
            continue;
        }
        for p in (1..=(n / t).min(layers)).filter(|&p| (n / t).is_multiple_of(p)) {
            let d = (n / (t * p)) as u64;
            for &b in &sizes {
                if !batch.is_multiple_of(d * b as u64) {
                    continue;
                }
                let m = (batch / (d * b as u64)) as u32;
                let base = Shape3d {
                    tp: t as u32,
                    pp: p as u32,
                    microbatch_size: b,
                    overlap_grad_reduce: pins
                        .overlap_grad_reduce
                        .unwrap_or(pins.overlap_param_gather == Some(true)),
                    overlap_param_gather: pins.overlap_param_gather.unwrap_or(false),
                    tp_comm_overlap: pins.tp_comm_overlap.unwrap_or(false),
                    tp_across_nodes: pins.tp_across_nodes.unwrap_or(false),
                    first_stage_layers: pins.first_stage_layers,
                    last_stage_layers: pins.last_stage_layers,
                    embedding_loss_in_split: pins.embedding_loss_in_split.unwrap_or(false),
                    pipeline_layout: pins.pipeline_layout.clone(),
                    moe_dispatcher: pins.moe_dispatcher.unwrap_or_default(),
                    ..Shape3d::default()
                };
                // The orders differ only with several stages and replicas.
                let orders: &[RankOrder] = if p > 1 && d > 1 {
                    &RankOrder::ALL
                } else {
                    &RankOrder::ALL[..1]
                };
                let scheds = schedules(&base, pins, (layers as u32, m), &chunks, plain);
                let axes = block_axes(costs, pins, (t, d as usize), base.tp_comm_overlap);
                for (schedule, v) in scheds {
                    for &(sp, e, te) in &axes {
                        for &rank_order in orders {
                            let shape = Shape3d {
                                schedule,
                                virtual_stages: v,
                                sequence_parallel: sp,
                                rank_order,
                                expert_parallel: e,
                                expert_tensor_parallel: te,
                                ..base.clone()
                            };
                            // (A pinned order of a shape where both are one
                            // layout: the layout.)
                            let pinned = Shape3d {
                                rank_order: pins.rank_order.unwrap_or(rank_order),
                                ..shape.clone()
                            };
                            if pins.matches(if orders.len() == 1 { &pinned } else { &shape }) {
                                out.push(shape);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The per-block axes tried on a shape of TP `t` and DP `d`: sequence
/// parallelism, the expert-parallel degree and expert-TP (`None`: the TP
/// degree), those Megatron runs: SP needs TP, TP communication overlap
/// (`tco`) and EP beside TP need SP, whole experts need EP, and EP x
/// expert-TP divides the stage's GPUs.
fn block_axes(
    costs: &CostModel,
    pins: &ShapePins,
    (t, d): (usize, usize),
    tco: bool,
) -> Vec<(bool, u32, Option<u32>)> {
    // EP may take TP ranks too under whole experts: up to DP x TP.
    let eps = expert_degrees(costs, pins, d * t);
    let etps: Vec<Option<u32>> = match pins.etp {
        Some(x) => vec![Some(x)],
        None if t > 1 && eps.iter().any(|&e| e > 1) => vec![None, Some(1)],
        None => vec![None],
    };
    let mut out = Vec::new();
    for sp in [false, true] {
        for &e in &eps {
            for &te in &etps {
                let ete = te.unwrap_or(t as u32);
                let skip = sp && t == 1
                    || !sp && tco
                    || !sp && t > 1 && e > 1
                    || te.is_some() && e == 1 && ete != t as u32
                    || !(d * t).is_multiple_of((e * ete) as usize);
                if !skip {
                    out.push((sp, e, te));
                }
            }
        }
    }
    out
}

/// The expert-parallel degrees tried on a shape of `d` GPUs per stage (DP
/// x TP): a pinned one, else for a model with experts in every block every
/// degree dividing both its experts and `d` (Megatron-Core's EP inside the
/// data-parallel dimension, or over TP ranks too with whole experts; the
/// caller keeps those EP x expert-TP divides), unless the pinned bucketed reductions rule EP out
/// ([`crate::expert_parallel::check`]); 1 for a dense model.
fn expert_degrees(costs: &CostModel, pins: &ShapePins, d: usize) -> Vec<u32> {
    if let Some(e) = pins.ep {
        return vec![e];
    }
    let bucketed =
        pins.overlap_grad_reduce == Some(true) || pins.overlap_param_gather == Some(true);
    if bucketed {
        return vec![1];
    }
    crate::tensor::expert_degrees(&costs.workload.model)
        .into_iter()
        .filter(|&e| d.is_multiple_of(e as usize))
        .collect()
}

/// The schedules (and chunks per GPU) tried on `base` with `m`
/// micro-batches on a model of `layers` blocks: `plain` and the
/// interleaved one at each of `chunks` (and a pinned layout's), those whose
/// blocks split as Megatron-Core builds them (the shape's own decision,
/// [`Shape3d::megatron_splits`]) and, interleaved, whose micro-batches come
/// in groups of the stages.
fn schedules(
    base: &Shape3d,
    pins: &ShapePins,
    (layers, m): (u32, u32),
    chunks: &[u32],
    plain: PipeSchedule,
) -> Vec<(PipeSchedule, u32)> {
    let p = base.pp;
    let mut vs = chunks.to_vec();
    let laid = pins
        .pipeline_layout
        .as_ref()
        .and_then(|l| l.virtual_stages(p));
    vs.extend(laid.filter(|v| !chunks.contains(v)));
    let splits = |schedule, virtual_stages| {
        Shape3d {
            schedule,
            virtual_stages,
            ..base.clone()
        }
        .megatron_splits(layers)
    };
    let mut out = Vec::new();
    if splits(plain, 1) {
        out.push((plain, 1));
    }
    if p > 1 && m.is_multiple_of(p) {
        for &v in &vs {
            if v > 1 && splits(PipeSchedule::Interleaved, v) {
                out.push((PipeSchedule::Interleaved, v));
            }
        }
    }
    out
}

/// The strategies tried on a shape with `d` replicas: the user's pins, else
/// recompute none / core attention / full and, with `d > 1`, the
/// distributed optimizer off / on.
fn strategies(problem: &Problem<'_>, d: usize) -> Result<Vec<Strategy>, PlanError> {
    let cks = match problem.strategy.checkpointing {
        Some(c) => vec![c],
        None => vec![
            Checkpointing::None,
            Checkpointing::SelectiveAttention,
            Checkpointing::Full,
        ],
    };
    let candidates: &[Sharding] = if d > 1 {
        &[Sharding::NoShard, Sharding::GradOp]
    } else {
        &[Sharding::NoShard]
    };
    let (shardings, _) = pipeline_shardings(problem, candidates);
    let mut out = Vec::new();
    for &ck in &cks {
        for &sh in &shardings {
            out.push(pipeline_strategy(problem, sh, ck, default_3d_stack(sh))?.0);
        }
    }
    Ok(out)
}

/// Every candidate of the search that fits by the closed form, sorted by
/// its estimate (ties: fewer model-parallel GPUs, then the shape), with
/// the search counts and the smallest shortfall seen (GiB) when none fits.
pub fn search(problem: &Problem<'_>) -> Result<(Vec<Candidate>, SearchStats, f64), PlanError> {
    use rayon::prelude::*;
    let costs = problem.costs;
    let n = costs.ranks();
    let usable = (0..n)
        .map(|r| costs.usable_gib(r))
        .fold(f64::INFINITY, f64::min)
        * GIB;
    if let Some(e) = problem.options.shape.ep {
        crate::expert_parallel::check_degree(&costs.workload.model, e)
            .map_err(|msg| PlanError::invalid("the 3D shape flags", "--ep", msg))?;
    }
    let all = shapes(costs, &problem.options.shape);
    let mut by_d: std::collections::BTreeMap<usize, Vec<Strategy>> = Default::default();
    for shape in &all {
        let d = shape.dp(n);
        if let std::collections::btree_map::Entry::Vacant(e) = by_d.entry(d) {
            e.insert(strategies(problem, d)?);
        }
    }
    // Shapes in parallel, merged in order (deterministic).
    let parts: Vec<Result<Shaped, PlanError>> = all
        .par_iter()
        .map(|shape| estimate_shape(costs, shape, &by_d[&shape.dp(n)], usable))
        .collect();
    let mut stats = SearchStats::default();
    let mut out = Vec::new();
    let mut shortfall = f64::INFINITY;
    for part in parts {
        let part = part?;
        stats.candidates += part.tried;
        stats.feasible += part.fit.len() as u64;
        stats.infeasible += part.tried - part.fit.len() as u64;
        shortfall = shortfall.min(part.shortfall_gib);
        out.extend(part.fit);
    }
    out.sort_by(|a, b| {
        a.estimate_ms
            .total_cmp(&b.estimate_ms)
            .then((a.shape.tp * a.shape.pp).cmp(&(b.shape.tp * b.shape.pp)))
    });
    Ok((out, stats, shortfall))
}

/// One shape's candidates: how many strategies were tried, those that fit
/// and the smallest shortfall of those that did not, GiB.
struct Shaped {
    tried: u64,
    fit: Vec<Candidate>,
    shortfall_gib: f64,
}

/// The candidates of `shape` under each of `strategies` on GPUs of at most
/// `usable` bytes.
fn estimate_shape(
    costs: &CostModel,
    shape: &Shape3d,
    strategies: &[Strategy],
    usable: f64,
) -> Result<Shaped, PlanError> {
    let w = &costs.workload;
    let n = costs.ranks();
    let mut part = Shaped {
        tried: 0,
        fit: Vec::new(),
        shortfall_gib: f64::INFINITY,
    };
    let Ok(pipe) = shape.pipeline(n, w.model.layers, w.global_batch) else {
        return Ok(part);
    };
    for strategy in strategies {
        // (Pinned overlap knobs keep the shardings they run with.)
        if shape.check_sharding(strategy.sharding).is_err()
            || crate::expert_parallel::check(&pipe, &w.model, strategy, "megatron").is_err()
        {
            continue;
        }
        part.tried += 1;
        // The state share alone must fit (cheap: no cost rows).
        let state = (0..pipe.depth())
            .map(|s| {
                crate::pipeline::state_bytes(
                    costs,
                    strategy,
                    pipe.rank_held(s, &w.model, strategy),
                    pipe.reshards_after_forward(strategy),
                )
            })
            .fold(0.0, f64::max);
        if state > usable {
            part.shortfall_gib = part.shortfall_gib.min((state - usable) / GIB);
            continue;
        }
        let plan = Plan::pipelined("megatron", *strategy, pipe.clone(), n, w.global_batch);
        // (A pinned hybrid sharding's shard group must fit the shape.)
        if strategy.sharding == Sharding::Hybrid
            && plan.validate(n, w.global_batch, "megatron").is_err()
        {
            continue;
        }
        let e = crate::pipeline::estimate::estimate(costs, &plan, &pipe)?;
        let peak = e.peak_bytes.iter().copied().fold(0.0, f64::max);
        if peak > usable {
            part.shortfall_gib = part.shortfall_gib.min((peak - usable) / GIB);
            continue;
        }
        part.fit.push(Candidate {
            shape: shape.clone(),
            plan,
            estimate_ms: e.iteration_ms,
        });
    }
    Ok(part)
}

/// One line for notes: `TP 2 x PP 4 x DP 128, micro-batch 1 (8 per
/// replica), 1f1b, SP, recompute full, distributed optimizer`.
pub fn describe(c: &Candidate, ranks: usize) -> String {
    let s = &c.shape;
    let pipe = c.plan.pipeline.as_ref().expect("a 3D plan");
    let mut v = format!(
        "TP {} x PP {} x DP {}, micro-batch {} ({} per replica), {}",
        s.tp,
        s.pp,
        s.dp(ranks),
        s.microbatch_size,
        pipe.microbatches,
        s.schedule
    );
    if s.expert_parallel > 1 {
        v.push_str(&format!(", EP {}", s.expert_parallel));
        if let Some(te) = s.expert_tensor_parallel.filter(|&x| x != s.tp) {
            v.push_str(&format!(" (expert-TP {te})"));
        }
        if !s.moe_dispatcher.is_default() {
            v.push_str(&format!(" ({} dispatcher)", s.moe_dispatcher.name()));
        }
    }
    if s.virtual_stages > 1 {
        v.push_str(&format!(" with {} chunks per GPU", s.virtual_stages));
    }
    if s.sequence_parallel {
        v.push_str(", SP");
    }
    if s.rank_order != RankOrder::default() {
        v.push_str(&format!(", ranks {}", s.rank_order));
    }
    if s.overlap_grad_reduce {
        v.push_str(", overlap-grad-reduce");
    }
    if s.overlap_param_gather {
        v.push_str(", overlap-param-gather");
    }
    v.push_str(&format!(
        ", recompute {}",
        c.plan.strategy.checkpointing.name()
    ));
    if c.plan.strategy.sharding == Sharding::GradOp {
        v.push_str(", distributed optimizer");
    }
    v
}

/// The candidate of `cands` (sorted by estimate) the simulator confirms:
/// the fastest that fits of the [`CONFIRM`] best and the best of each rank
/// order not among them (the closed form prices a pipeline paced by its
/// transfers low, [`crate::pipeline::estimate`], so the order that keeps
/// them on NVLink is always simulated too), with its simulated time.
fn confirm(
    judge: &dyn Judge,
    cands: &[Candidate],
    stats: &mut SearchStats,
) -> Result<Option<(usize, f64)>, PlanError> {
    let mut picked: Vec<usize> = (0..cands.len().min(CONFIRM)).collect();
    for order in RankOrder::ALL {
        let seen = picked.iter().any(|&i| cands[i].shape.rank_order == order);
        if let Some(i) = cands
            .iter()
            .position(|c| c.shape.rank_order == order)
            .filter(|_| !seen)
        {
            picked.push(i);
        }
    }
    let best =
        super::pipeline::fastest_fitting(judge, picked.iter().map(|&i| &cands[i].plan), stats)?;
    Ok(best.map(|(k, ms)| (picked[k], ms)))
}

impl Planner for Megatron {
    fn name(&self) -> &'static str {
        "megatron"
    }

    fn summary(&self) -> &'static str {
        "Megatron-LM 3D (Calculon-style search): TP inside a node x PP x DP, micro-batch size, interleaving, SP, recompute, distributed optimizer, rank order; ranked by the closed form, the best simulated"
    }

    fn fixed_axes(&self) -> StrategySpec {
        PIPELINE_AXES
    }

    fn shape_pins(&self) -> &'static [&'static str] {
        &ShapePins::AXES
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let n = problem.costs.ranks();
        let (cands, mut stats, shortfall) = search(problem)?;
        let pins = &problem.options.shape;
        if let Some(layout) = pins
            .pipeline_layout
            .as_ref()
            .filter(|_| stats.candidates == 0)
        {
            // A layout that cannot fit says why first.
            let layers = problem.costs.workload.model.layers;
            let placed: u32 = layout.chunks.iter().sum();
            if placed != layers {
                return Err(PlanError::invalid(
                    crate::plan::shape::ORIGIN,
                    "--pipeline-layout",
                    format!("the layout places {placed} transformer blocks `t` but the model has {layers}: expected every block placed once"),
                ));
            }
        }
        if stats.candidates == 0 && !pins.is_empty() {
            return Err(PlanError::Infeasible {
                message: format!(
                    "no Megatron shape of the {n} GPUs matches the pinned {}: TP must divide the smallest node and the model's heads (it allows {}), PP the TP groups and the {} blocks, DP x micro-batch size the global batch {}, interleaving's chunks the blocks per stage, EP the replicas",
                    pins.text(),
                    crate::tensor::degrees(&problem.costs.workload.model)
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    problem.costs.workload.model.layers,
                    problem.costs.workload.global_batch
                ),
                shortfall_gib: 0.0,
                rank: None,
            });
        }
        if stats.candidates == 0 {
            let w = &problem.costs.workload;
            return Err(PlanError::Infeasible {
                message: format!(
                    "no Megatron shape of the {n} GPUs exists: for every TP degree dividing the node and the model's heads and PP depth dividing the blocks, the global batch {} is not a multiple of DP x micro-batch size (Megatron runs whole micro-batches on every replica); use a global batch that DP divides",
                    w.global_batch
                ),
                shortfall_gib: 0.0,
                rank: None,
            });
        }
        if cands.is_empty() {
            return Err(PlanError::Infeasible {
                message: format!(
                    "no Megatron shape of the {n} GPUs fits: {} candidates (TP inside a node x PP x DP, micro-batch sizes, recompute, distributed optimizer), the closest {shortfall:.2} GiB over the smallest GPU's usable memory",
                    stats.candidates
                ),
                shortfall_gib: if shortfall.is_finite() { shortfall } else { 0.0 },
                rank: None,
            });
        }
        // A sharding pin a pipeline stage cannot run is said once.
        let mut notes = pipeline_shardings(problem, &[]).1;
        let pick = match problem.judge {
            Some(judge) => match confirm(judge, &cands, &mut stats)? {
                Some((i, ms)) => {
                    notes.push(format!(
                        "megatron: {} (closed form {:.1} ms, simulated {ms:.1} ms; best of {} shapes that fit, {} simulated)",
                        describe(&cands[i], n),
                        cands[i].estimate_ms,
                        cands.len(),
                        stats.simulated
                    ));
                    i
                }
                None => {
                    notes.push(format!(
                        "megatron: the closed form's {CONFIRM} best shapes all run out of memory in the simulator; returning the best of them"
                    ));
                    0
                }
            },
            None => 0,
        };
        let mut planned = Planned::bare(cands[pick].plan.clone());
        planned.notes = notes;
        planned.stats = stats;
        Ok(planned)
    }
}
