//! `hetero-3d`: a 3D planner for mixed GPU types in the line of Metis (Um
//! et al., USENIX ATC 2024), FlashFlex / HexiScale (Yan et al., arXiv
//! 2409.01143) and Sailor (Strati et al., SOSP 2025): a pipeline whose
//! stages are groups of one GPU type, each stage with its own tensor
//! parallel degree and data-parallel replicas, or cross-sections of the
//! types whose replicas split micro-batches by speed, the blocks
//! partitioned exactly by the stages' speed and memory (REAL-SYSTEMS-2
//! section 4.4).
//!
//! Search space:
//!
//! * **GPU types kept**: every type, then without the smallest-memory
//!   type (a GPU that cannot hold a block is better left idle than made a
//!   stage), as `pipeline-hetero` does.
//! * **Stage order**: the types by usable memory, largest first (1F1B's
//!   first stages hold the most micro-batches), and in rank order; a
//!   type's stages are consecutive.
//! * **TP per type** (Sailor's and Metis' ranges are per type): for each
//!   level `l` of the degrees the model allows ([`crate::tensor::degrees`]),
//!   every type takes the largest degree `<= l` that divides each of its
//!   nodes' GPU counts (TP groups stay inside a node); a second assignment
//!   per level gives the types of below-median memory twice that (small
//!   GPUs need the larger split to hold a stage). Sequence parallelism is
//!   on wherever `t > 1` (torchtitan always runs TP with SP; Megatron's
//!   SP moves the same bytes as its all-reduces and divides the
//!   activations).
//! * **GPUs per stage** `q` = 1, 2, 4, ... up to the largest type's count:
//!   each type's TP groups (in rank order) cut into `ceil(G / (q / t))`
//!   near-equal runs, at most one stage per block.
//! * **and** `pipeline-hetero`'s stage groupings without TP (same-type
//!   runs of at most a node, in rank and memory orders), so its space is
//!   part of this one.
//! * **and stages that mix types** (Metis' data-parallel groups of mixed
//!   devices, FlashFlex's asymmetric replicas): for every TP degree all
//!   kept types allow, `p` = 1, 2, 4, ... stages each holding a near-equal
//!   part of every kept type's TP groups (whole nodes where the counts
//!   divide), every micro-batch split over a stage's replicas in
//!   proportion to their speed (the stage's `shares`: samples per ms of
//!   each replica's slowest GPU at the even slice, apportioned by largest
//!   remainder; [`crate::plan::pipeline::apportion`]).
//! * **Expert parallelism** (a model with experts in every block): every
//!   degree dividing its experts and every stage's replicas, expert-TP =
//!   each stage's TP ([`crate::expert_parallel`]); FSDP inside the stages
//!   is not tried with it.
//! * **Micro-batches**: sizes 1, 2, 3, 4, 6, 8, ... samples (as
//!   `pipeline-hetero`), each split over a stage's replicas (near-equally
//!   in same-type stages, by speed in mixed ones), at least one sample
//!   per replica.
//! * **Strategy**: recompute none, core attention (Megatron's selective),
//!   full; stage replicas plain (`none`) or with the distributed optimizer
//!   (`grad-op`, ZeRO-1), and the winner with the distributed optimizer
//!   also under FSDP inside its stages (`full`, as torchtitan runs it:
//!   same memory, the parameter gathers at the step's start); user pins
//!   narrow these.
//! * **Blocks per stage**: the exact contiguous partition
//!   ([`crate::pipeline::partition::min_max`]) minimising the slowest
//!   stage's period within every stage's memory under 1F1B.
//!
//! Pins ([`crate::plan::shape::ShapePins`]): a pinned TP degree keeps the
//! layouts whose every stage has it, a pinned depth those of that many
//! stages, a pinned EP degree those whose every stage's replicas it
//! divides, a pinned schedule runs every candidate under it (no other
//! schedule tried).
//!
//! Ranking: the pipeline closed form ([`crate::pipeline::estimate`],
//! held to the simulator by the property tests); the [`CONFIRM`] best are
//! simulated and the fastest that fits is tried again under ZB-H1, GPipe
//! and (where its stages split evenly) interleaved 1F1B. Pruning: layouts
//! deeper than the model, micro-batch counts above the simulator's limits
//! and stage ranges over memory never reach the estimate; identical
//! layouts reached two ways are searched once. Units: samples, ms, bytes.

use super::pipeline::{fastest_fitting, pipeline_shardings, pipeline_strategy, PIPELINE_AXES};
use super::pipeline_hetero::micro_counts;
use super::{Judge, Planned, Planner, Problem, SearchStats};
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::pipeline::costs::Rows;
use crate::pipeline::estimate::{
    estimate_ms, even_slices, held, place, replica_slices, stage_ms, staged, Over, Run,
};
use crate::pipeline::partition::min_max;
use crate::plan::pipeline::{PipeSchedule, Pipeline, Stage};
use crate::plan::shape::ShapePins;
use crate::plan::Plan;
use crate::strategy::{Checkpointing, Sharding, Stack, Strategy, StrategySpec};
use crate::tensor::TensorParallel;
use crate::units::GIB;
use std::collections::BTreeSet;

/// Candidates the simulator confirms (the closed form's best).
pub const CONFIRM: usize = 4;

/// The heterogeneous 3D planner.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hetero3d;

/// One GPU type of the cluster: its node runs and TP degrees.
#[derive(Debug, Clone)]
struct GpuType {
    /// Usable memory of one GPU, GiB.
    mem_gib: f64,
    /// Its GPUs on each node (rank order), one run per node.
    units: Vec<Vec<usize>>,
    /// TP degrees the model allows that divide every run.
    degrees: Vec<u32>,
}

impl GpuType {
    /// GPUs of the type.
    fn count(&self) -> usize {
        self.units.iter().map(Vec::len).sum()
    }

    /// The largest allowed degree `<= level` (1 always is).
    fn at_most(&self, level: u32) -> u32 {
        self.degrees
            .iter()
            .copied()
            .filter(|&t| t <= level)
            .max()
            .unwrap_or(1)
    }
}

/// The cluster's GPU types, in rank order of their first GPU.
fn gpu_types(costs: &CostModel) -> Vec<GpuType> {
    let c = &costs.workload.cluster;
    let allowed = crate::tensor::degrees(&costs.workload.model);
    let mut names: Vec<String> = Vec::new();
    let mut out: Vec<GpuType> = Vec::new();
    for k in 0..c.nodes.len() {
        let ranks = c.node_ranks(k);
        let mut runs: Vec<(String, Vec<usize>)> = Vec::new();
        for r in ranks {
            let name = costs.gpu(r).name.clone();
            match runs.iter_mut().find(|x| x.0 == name) {
                Some(x) => x.1.push(r),
                None => runs.push((name, vec![r])),
            }
        }
        for (name, run) in runs {
            let at = match names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    out.push(GpuType {
                        mem_gib: costs.usable_gib(run[0]),
                        units: Vec::new(),
                        degrees: Vec::new(),
                    });
                    out.len() - 1
                }
            };
            out[at].units.push(run);
        }
    }
    for ty in &mut out {
        ty.degrees = allowed
            .iter()
            .copied()
            .filter(|&t| ty.units.iter().all(|u| u.len().is_multiple_of(t as usize)))
            .collect();
    }
    out
}

/// A layout: each stage's GPUs (TP groups of its degree, consecutive) and
/// its TP degree, in stage order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Layout {
    /// Ranks of each stage, in Megatron's order.
    pub groups: Vec<Vec<usize>>,
    /// TP degree of each stage.
    pub tps: Vec<u32>,
    /// Replicas split each micro-batch by their speed (stages that mix
    /// GPU types); otherwise equally.
    pub by_speed: bool,
    /// Expert parallelism over every stage's replicas (1: none; expert-TP
    /// = each stage's TP, [`crate::expert_parallel`]).
    pub ep: u32,
}

impl Layout {
    /// Data-parallel replicas of the widest stage.
    fn widest_dp(&self) -> u32 {
        self.groups
            .iter()
            .zip(&self.tps)
            .map(|(g, &t)| (g.len() / t as usize) as u32)
            .max()
            .unwrap_or(1)
    }
}

/// The layouts of the search (module docs).
pub fn layouts(costs: &CostModel) -> Vec<Layout> {
    let layers = costs.workload.model.layers as usize;
    let types = gpu_types(costs);
    let mut by_mem: Vec<usize> = (0..types.len()).collect();
    by_mem.sort_by(|&a, &b| {
        types[b]
            .mem_gib
            .total_cmp(&types[a].mem_gib)
            .then(a.cmp(&b))
    });
    let smallest = by_mem.last().copied();
    let mut keeps: Vec<Vec<usize>> = vec![(0..types.len()).collect()];
    if types.len() > 1 {
        keeps.push((0..types.len()).filter(|&i| Some(i) != smallest).collect());
    }
    let mut levels: Vec<u32> = types.iter().flat_map(|t| t.degrees.clone()).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut mems: Vec<f64> = types.iter().map(|t| t.mem_gib).collect();
    mems.sort_by(f64::total_cmp);
    let median = mems[mems.len() / 2];
    let largest = types.iter().map(GpuType::count).max().unwrap_or(1);
    let mut seen: BTreeSet<Layout> = BTreeSet::new();
    let mut out = Vec::new();
    // `pipeline-hetero`'s groupings (no TP), so this space holds its.
    for g in super::pipeline_hetero::groupings(costs) {
        let l = Layout {
            tps: vec![1; g.len()],
            groups: g,
            by_speed: false,
            ep: 1,
        };
        if seen.insert(l.clone()) {
            out.push(l);
        }
    }
    for keep in &keeps {
        let mem_order: Vec<usize> = by_mem
            .iter()
            .copied()
            .filter(|i| keep.contains(i))
            .collect();
        for order in [mem_order, keep.clone()] {
            for &level in &levels {
                for boost in [false, true] {
                    let tps: Vec<u32> = (0..types.len())
                        .map(|i| {
                            let ty = &types[i];
                            let l = if boost && ty.mem_gib < median {
                                level * 2
                            } else {
                                level
                            };
                            ty.at_most(l)
                        })
                        .collect();
                    let mut q = 1usize;
                    while q <= largest {
                        if let Some(l) = layout(&types, &order, &tps, q, layers) {
                            if seen.insert(l.clone()) {
                                out.push(l);
                            }
                        }
                        q *= 2;
                    }
                }
            }
        }
    }
    // Stages that mix the types: each a cross-section of the kept types,
    // one TP degree for all, replicas split by speed.
    for keep in &keeps {
        if keep.len() < 2 {
            continue;
        }
        for &t in &levels {
            if !keep.iter().all(|&i| types[i].degrees.contains(&t)) {
                continue;
            }
            let mut p = 1usize;
            while p <= layers {
                if let Some(l) = cross_section(&types, keep, t, p) {
                    if seen.insert(l.clone()) {
                        out.push(l);
                    }
                }
                p *= 2;
            }
        }
    }
    out
}

/// `p` stages, each a near-equal part of every type of `keep` (its TP
/// groups of degree `t`, in rank order, cut into `p` runs), replicas split
/// by speed; `None` when a stage would be empty.
fn cross_section(types: &[GpuType], keep: &[usize], t: u32, p: usize) -> Option<Layout> {
    let mut groups = vec![Vec::new(); p];
    for &i in keep {
        let tg: Vec<&[usize]> = types[i]
            .units
            .iter()
            .flat_map(|u| u.chunks(t as usize))
            .collect();
        let (base, extra) = (tg.len() / p, tg.len() % p);
        let mut at = 0;
        for (s, g) in groups.iter_mut().enumerate() {
            let n = base + usize::from(s < extra);
            g.extend(tg[at..at + n].concat());
            at += n;
        }
    }
    if groups.iter().any(Vec::is_empty) {
        return None;
    }
    Some(Layout {
        tps: vec![t; p],
        groups,
        by_speed: true,
        ep: 1,
    })
}

/// The layout of the types `order` under TP degrees `tps` (by type) with
/// about `q` GPUs per stage; `None` above one stage per block.
fn layout(
    types: &[GpuType],
    order: &[usize],
    tps: &[u32],
    q: usize,
    layers: usize,
) -> Option<Layout> {
    let mut l = Layout {
        groups: Vec::new(),
        tps: Vec::new(),
        by_speed: false,
        ep: 1,
    };
    for &i in order {
        let t = tps[i] as usize;
        let groups: Vec<&[usize]> = types[i].units.iter().flat_map(|u| u.chunks(t)).collect();
        let per = (q / t).max(1);
        let k = groups.len().div_ceil(per);
        let (base, extra) = (groups.len() / k, groups.len() % k);
        let mut at = 0;
        for s in 0..k {
            let n = base + usize::from(s < extra);
            l.groups.push(groups[at..at + n].concat());
            l.tps.push(t as u32);
            at += n;
        }
    }
    (!l.groups.is_empty() && l.groups.len() <= layers).then_some(l)
}

/// The strategies tried (module docs).
fn strategies(problem: &Problem<'_>) -> Result<Vec<Strategy>, PlanError> {
    let cks = match problem.strategy.checkpointing {
        Some(c) => vec![c],
        None => vec![
            Checkpointing::None,
            Checkpointing::SelectiveAttention,
            Checkpointing::Full,
        ],
    };
    let (shardings, _) = pipeline_shardings(problem, &[Sharding::NoShard, Sharding::GradOp]);
    let mut out = Vec::new();
    for &ck in &cks {
        for &sh in &shardings {
            out.push(pipeline_strategy(problem, sh, ck, Stack::PyTorch)?.0);
        }
    }
    Ok(out)
}

/// `strategies` in runs of consecutive ones equal but for their sharding
/// (which the stage costs of [`search_layout`] do not depend on).
fn by_costs(strategies: Vec<Strategy>) -> Vec<Vec<Strategy>> {
    let mut out: Vec<Vec<Strategy>> = Vec::new();
    for s in strategies {
        match out.last_mut() {
            Some(run)
                if Strategy {
                    sharding: s.sharding,
                    ..run[0]
                } == s =>
            {
                run.push(s)
            }
            _ => out.push(vec![s]),
        }
    }
    out
}

/// One searched candidate.
#[derive(Debug, Clone)]
struct Candidate {
    estimate_ms: f64,
    plan: Plan,
}

/// What one layout's search under one strategy gives: its candidates that
/// fit, how many were tried, the smallest worst shortfall seen (GiB, with
/// its message and rank).
#[derive(Debug, Default)]
struct Searched {
    fit: Vec<Candidate>,
    tried: u64,
    closest: Option<(f64, String, usize)>,
}

/// The tensor parallelism of each stage of `l`.
fn tensors(l: &Layout) -> Vec<TensorParallel> {
    l.tps
        .iter()
        .map(|&t| TensorParallel {
            degree: t,
            sequence_parallel: t > 1,
            comm_overlap: false,
            experts: l.ep,
            expert_tensor: t,
            dispatcher: crate::experts::Dispatcher::AllToAll,
        })
        .collect()
}

/// Every micro-batch count of layout `l` under each of `strategies`
/// (which differ in their sharding only: the stage costs and slices of a
/// micro-batch count do not depend on it, so they are priced once for
/// all, [`crate::pipeline::estimate::staged`] reading only the
/// checkpointing and the attention): per strategy, the best partition's
/// candidates and the closest miss when none fits.
fn search_layout(
    costs: &CostModel,
    strategies: &[Strategy],
    schedule: PipeSchedule,
    rows: &mut Rows<'_>,
    l: &Layout,
) -> Result<Vec<Searched>, PlanError> {
    let batch = costs.workload.global_batch;
    let tps = tensors(l);
    let dmax = l.widest_dp();
    let mut out: Vec<Searched> = strategies.iter().map(|_| Searched::default()).collect();
    for m in micro_counts(batch) {
        if batch / m < dmax || m > crate::limits::MAX_MICROBATCHES {
            continue;
        }
        out.iter_mut().for_each(|o| o.tried += 1);
        let largest = batch.div_ceil(m);
        let Some((slices, shares)) = replica_slices_of(rows, l, &tps, largest, batch / m)? else {
            continue;
        };
        let st = staged(costs, &strategies[0], rows, &l.groups, &tps, &slices)?;
        for (strategy, o) in strategies.iter().zip(&mut out) {
            let at = Searching {
                costs,
                strategy,
                schedule,
                l,
                tps: &tps,
                m,
                st: &st,
            };
            at.partition(shares.clone(), o);
        }
    }
    Ok(out)
}

/// One layout, micro-batch count and strategy of the search, its stage
/// costs priced ([`search_layout`]).
struct Searching<'a> {
    costs: &'a CostModel,
    strategy: &'a Strategy,
    schedule: PipeSchedule,
    l: &'a Layout,
    tps: &'a [TensorParallel],
    m: u32,
    st: &'a crate::pipeline::estimate::Staged,
}

impl Searching<'_> {
    /// The exact partition of the blocks within every stage's memory and
    /// its candidate (stage replicas' `shares`), added to `out`; else the
    /// closest miss, kept in `out` when closer than its last.
    fn partition(&self, shares: Vec<Vec<u32>>, out: &mut Searched) {
        let (costs, strategy, schedule, l, tps, m, st) = (
            self.costs,
            self.strategy,
            self.schedule,
            self.l,
            self.tps,
            self.m,
            self.st,
        );
        let w = &costs.workload;
        let (n, layers, batch) = (costs.ranks(), w.model.layers as usize, w.global_batch);
        let p = l.groups.len();
        let over = |s: usize, k: usize| -> Over {
            let at = place(schedule, p, s, m, 1);
            let d = l.groups[s].len() / l.tps[s] as usize;
            let d = crate::plan::pipeline::shard_width(strategy, d, l.tps[s]);
            let held = held(costs, k as u32, at, &tps[s], (strategy.sharding, d));
            st.over_bytes(costs, strategy, s, k as u32, held, at)
        };
        let most = layers - (p - 1);
        let table: Vec<Vec<Option<f64>>> = (0..p)
            .map(|s| {
                let at = place(schedule, p, s, m, 1);
                (1..=most)
                    .map(|k| {
                        (over(s, k).over_bytes <= 0.0)
                            .then(|| stage_ms(&st.costs[s], k as u32, at).max(st.comm_ms[s]))
                    })
                    .collect()
            })
            .collect();
        let Some(part) = min_max(p, layers, |s, _, k| table[s][k - 1]) else {
            // The closest miss: the partition of the smallest worst shortfall.
            if let Some(c) = min_max(p, layers, |s, _, k| Some(over(s, k).over_bytes / GIB)) {
                if out.closest.as_ref().is_none_or(|b| c.bottleneck < b.0) {
                    out.closest = Some(closest(costs, strategy, l, &c.counts, m, &over));
                }
            }
            return;
        };
        let mut pipe = Pipeline::new(
            schedule,
            m,
            l.groups
                .iter()
                .zip(&part.counts)
                .zip(&l.tps)
                .zip(shares)
                .map(|(((g, &blocks), &tp), shares)| Stage {
                    blocks,
                    gpus: g.iter().map(|&r| r as u32).collect(),
                    tp,
                    shares,
                    chunks: Vec::new(),
                })
                .collect(),
        );
        pipe.sequence_parallel = pipe.has_tp();
        pipe.expert_parallel = l.ep;
        if !crate::iteration::pipeline_fits_simulator(costs, strategy, &pipe)
            || crate::expert_parallel::check(&pipe, &w.model, strategy, "hetero-3d").is_err()
        {
            return;
        }
        let est = estimate_ms(
            costs,
            strategy,
            &l.groups,
            tps,
            st,
            &part.counts,
            m,
            Run::plain(schedule, 1),
        );
        let plan = Plan::pipelined("hetero-3d", *strategy, pipe, n, batch);
        // (A pinned hybrid sharding's shard group must fit the layout.)
        if strategy.sharding == Sharding::Hybrid && plan.validate(n, batch, "hetero-3d").is_err() {
            return;
        }
        out.fit.push(Candidate {
            estimate_ms: est,
            plan,
        });
    }
}

/// Per stage, its replicas' samples of the largest micro-batch, and its
/// `shares` ([`replica_slices_of`]).
type SlicesAndShares = (Vec<Vec<u32>>, Vec<Vec<u32>>);

/// Per stage of `l` (TP `tps`), its replicas' samples of the largest
/// micro-batch of `largest` samples, and the stage's `shares`: equal
/// (no shares), or with `l.by_speed` in proportion to each replica's speed
/// (samples per ms of its slowest GPU's block forward and backward at the
/// equal slice, Metis' and FlashFlex's split by throughput; the shares are
/// those samples, none where they come out equal); `None` when a replica
/// would get no sample of the smallest micro-batch (`smallest` samples).
fn replica_slices_of(
    rows: &mut Rows<'_>,
    l: &Layout,
    tps: &[TensorParallel],
    largest: u32,
    smallest: u32,
) -> Result<Option<SlicesAndShares>, PlanError> {
    if !l.by_speed {
        let even = even_slices(&l.groups, tps, largest);
        let none = vec![Vec::new(); even.len()];
        return Ok(Some((even, none)));
    }
    let (mut out, mut all_shares) = (Vec::new(), Vec::new());
    for (g, tp) in l.groups.iter().zip(tps) {
        let t = tp.degree.max(1) as usize;
        let d = g.len() / t;
        let n0 = largest.div_ceil(d as u32).max(1);
        let mut weights = Vec::with_capacity(d);
        for grp in g.chunks(t) {
            let mut ms = 0.0f64;
            for &r in grp {
                let mc = rows.add(r, n0, tp)?;
                ms = ms.max((mc.f_blk + mc.b_blk).as_ms());
            }
            // Samples per second, to 1 in 10^6 of the fastest's scale.
            weights.push((n0 as f64 / ms.max(1e-9) * 1e3).round().max(1.0) as u32);
        }
        let sl = replica_slices(largest, d, &weights);
        let shares = if sl.iter().any(|&n| n != sl[0]) {
            sl.clone()
        } else {
            Vec::new()
        };
        if sl.contains(&0) || replica_slices(smallest, d, &shares).contains(&0) {
            return Ok(None);
        }
        out.push(sl);
        all_shares.push(shares);
    }
    Ok(Some((out, all_shares)))
}

/// The shortfall message of layout `l` partitioned `counts` (its worst
/// stage), with the worst shortfall in GiB and the stage's first rank.
fn closest(
    costs: &CostModel,
    strategy: &Strategy,
    l: &Layout,
    counts: &[u32],
    m: u32,
    over: &dyn Fn(usize, usize) -> Over,
) -> (f64, String, usize) {
    let (mut worst, mut at, mut first, mut start) = (None::<Over>, 0, 1u32, 1u32);
    for (s, &k) in counts.iter().enumerate() {
        let o = over(s, k as usize);
        if worst.is_none_or(|w| o.over_bytes > w.over_bytes) {
            (worst, at, first) = (Some(o), s, start);
        }
        start += k;
    }
    let worst = worst.expect("a stage");
    let r = l.groups[at][0];
    let msg = format!(
        "no 3D layout fits: at best stage {at} ({}, TP {}, blocks {first}-{}) needs {:.2} GiB, {:.2} GiB over its usable {:.2} GiB, with {m} micro-batches and {} recompute ({} stages)",
        gpu_mix(costs, &l.groups[at]),
        l.tps[at],
        first + counts[at] - 1,
        worst.peak_bytes / GIB,
        (worst.over_bytes / GIB).max(0.0),
        worst.usable_bytes / GIB,
        strategy.checkpointing.name(),
        l.groups.len()
    );
    (worst.over_bytes / GIB, msg, r)
}

/// The GPUs `ranks` by type, in order of first appearance: `128 a100`,
/// `64 a100 + 32 v100`.
fn gpu_mix(costs: &CostModel, ranks: &[usize]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for &r in ranks {
        let name = costs.gpu(r).name.as_str();
        match counts.iter_mut().find(|x| x.0 == name) {
            Some(x) => x.1 += 1,
            None => counts.push((name, 1)),
        }
    }
    counts
        .iter()
        .map(|(n, c)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The winner's schedule variants worth simulating: ZB-H1, GPipe and,
/// when every stage's blocks split in two and `p` divides `m`,
/// interleaved 1F1B with two chunks per GPU.
fn variants(plan: &Plan) -> Vec<Plan> {
    [
        PipeSchedule::ZbH1,
        PipeSchedule::Gpipe,
        PipeSchedule::Interleaved,
    ]
    .into_iter()
    .filter_map(|schedule| {
        let mut v = plan.clone();
        with_schedule(&mut v, schedule).then_some(v)
    })
    .collect()
}

/// Sets `plan`'s pipeline to run `schedule` (interleaved: two chunks per
/// GPU, where every stage's blocks split in two and the stages divide the
/// micro-batches); false when it cannot.
fn with_schedule(plan: &mut Plan, schedule: PipeSchedule) -> bool {
    let pipe = plan.pipeline.as_mut().expect("a pipeline plan");
    if schedule == PipeSchedule::Interleaved {
        let p = pipe.depth() as u32;
        if !(p > 1
            && pipe.microbatches.is_multiple_of(p)
            && pipe.stages.iter().all(|s| s.blocks.is_multiple_of(2)))
        {
            return false;
        }
        pipe.virtual_stages = 2;
    }
    pipe.schedule = schedule;
    true
}

/// The plan of `cands` (sorted by estimate) the simulator confirms (module
/// docs; `fsdp`: try FSDP inside the winner's stages; `schedules`: try
/// the winner under the other schedules), with a note saying what it
/// tried.
fn confirm(
    judge: &dyn Judge,
    fsdp: bool,
    schedules: bool,
    cands: &[Candidate],
    stats: &mut SearchStats,
    notes: &mut Vec<String>,
) -> Result<(f64, Plan), PlanError> {
    let top = &cands[..cands.len().min(CONFIRM)];
    let Some((i, t)) = fastest_fitting(judge, top.iter().map(|c| &c.plan), stats)? else {
        notes.push(format!(
            "hetero-3d: the closed form's {} best layouts all run out of memory in the simulator; returning the best of them",
            top.len()
        ));
        return Ok((f64::INFINITY, cands[0].plan.clone()));
    };
    let mut win = (t, top[i].plan.clone());
    // A variant replaces the winner only when strictly faster.
    let better = |win: &mut (f64, Plan), others: Vec<Plan>, stats: &mut SearchStats| {
        if let Some((j, t)) = fastest_fitting(judge, &others, stats)? {
            if t < win.0 {
                *win = (t, others[j].clone());
            }
        }
        Ok::<(), PlanError>(())
    };
    if schedules {
        let others = variants(&win.1);
        better(&mut win, others, stats)?;
    }
    // With the distributed optimizer, FSDP inside the stages instead
    // (torchtitan's composition: the same memory, the parameter gathers
    // moved from the step's tail to its start).
    // (Not under expert parallelism: FSDP's per-unit expert shards are
    // not modelled.)
    let ep = win.1.pipeline.as_ref().map_or(1, |x| x.expert_parallel);
    if fsdp && win.1.strategy.sharding == Sharding::GradOp && ep <= 1 {
        let mut p = win.1.clone();
        p.strategy.sharding = Sharding::Full;
        better(&mut win, vec![p], stats)?;
    }
    Ok(win)
}

/// [`confirm`] of the candidates with and without expert parallelism
/// apart (FSDP inside the stages is tried on the best without it), the
/// faster of the two (`cands` sorted by estimate).
fn confirm_apart(
    judge: &dyn Judge,
    (fsdp, schedules): (bool, bool),
    cands: Vec<Candidate>,
    stats: &mut SearchStats,
    notes: &mut Vec<String>,
) -> Result<Plan, PlanError> {
    let (with_ep, without): (Vec<Candidate>, Vec<Candidate>) = cands.into_iter().partition(|c| {
        c.plan
            .pipeline
            .as_ref()
            .is_some_and(|p| p.expert_parallel > 1)
    });
    let mut best: Option<(f64, Plan)> = None;
    for part in [without, with_ep].iter().filter(|p| !p.is_empty()) {
        let won = confirm(judge, fsdp, schedules, part, stats, notes)?;
        if best.as_ref().is_none_or(|b| won.0 < b.0) {
            best = Some(won);
        }
    }
    best.map(|b| b.1)
        .ok_or_else(|| PlanError::invalid("plan", "hetero-3d", "no candidate to confirm"))
}

/// One line for notes: `7 stages [2x (128 h100-sxm, TP 2, 13 blocks);
/// ...], 32 micro-batches, 1f1b, recompute none`.
pub fn describe(costs: &CostModel, plan: &Plan) -> String {
    let pipe = plan.pipeline.as_ref().expect("a pipeline plan");
    let stages: Vec<String> = pipe
        .stages
        .iter()
        .map(|s| {
            let ranks: Vec<usize> = s.gpus.iter().map(|&r| r as usize).collect();
            format!(
                "({}, TP {}, {} blocks{})",
                gpu_mix(costs, &ranks),
                s.tp,
                s.blocks,
                if s.uneven() { ", split by speed" } else { "" }
            )
        })
        .collect();
    format!(
        "{} stages [{}], {} micro-batches, {}{}, recompute {}{}",
        pipe.depth(),
        crate::lists::run_cells(&stages).join("; "),
        pipe.microbatches,
        pipe.schedule,
        match pipe.expert_parallel {
            0 | 1 => String::new(),
            e => format!(", EP {e}"),
        },
        plan.strategy.checkpointing.name(),
        match plan.strategy.sharding {
            Sharding::GradOp => ", distributed optimizer",
            Sharding::Full => ", FSDP inside stages",
            _ => "",
        }
    )
}

/// The layouts of the search with the pinned TP degree on every stage and
/// the pinned stage count; an infeasible error when none has them.
fn pinned_layouts(costs: &CostModel, pins: &ShapePins) -> Result<Vec<Layout>, PlanError> {
    if let Some(e) = pins.ep {
        crate::expert_parallel::check_degree(&costs.workload.model, e)
            .map_err(|msg| PlanError::invalid("the 3D shape flags", "--ep", msg))?;
    }
    let all: Vec<Layout> = layouts(costs)
        .into_iter()
        .filter(|l| {
            pins.tp.is_none_or(|t| l.tps.iter().all(|&x| x == t))
                && pins.pp.is_none_or(|p| l.groups.len() == p as usize)
        })
        .flat_map(|l| with_experts(costs, pins, l))
        .collect();
    if all.is_empty() {
        return Err(PlanError::Infeasible {
            message: format!(
                "no hetero-3d layout of the {} GPUs has the pinned {}: every stage's TP degree must divide its GPU type's nodes and the model's heads, and the stages must number at most the blocks (and an EP degree divide every stage's replicas)",
                costs.ranks(),
                pins.text()
            ),
            shortfall_gib: 0.0,
            rank: None,
        });
    }
    Ok(all)
}

/// Layout `l` under every expert-parallel degree of the search: a pinned
/// one, else for a model with experts in every block each degree dividing
/// its experts and every stage's replicas (1 for a dense model); only
/// those every stage's replicas divide.
fn with_experts(costs: &CostModel, pins: &ShapePins, l: Layout) -> Vec<Layout> {
    let dp: Vec<u32> = l
        .groups
        .iter()
        .zip(&l.tps)
        .map(|(g, &t)| (g.len() / t.max(1) as usize) as u32)
        .collect();
    let degrees = match pins.ep {
        Some(e) => vec![e],
        None => crate::tensor::expert_degrees(&costs.workload.model),
    };
    degrees
        .into_iter()
        .filter(|&e| dp.iter().all(|d| d.is_multiple_of(e)))
        .map(|e| Layout { ep: e, ..l.clone() })
        .collect()
}

/// A pinned schedule: every candidate under it (ranked by the estimate of
/// its search, confirmed under the schedule by the simulator); an
/// infeasible error when none can run it.
fn under_schedule(cands: &mut Vec<Candidate>, schedule: PipeSchedule) -> Result<(), PlanError> {
    cands.retain_mut(|c| with_schedule(&mut c.plan, schedule));
    if cands.is_empty() {
        return Err(PlanError::Infeasible {
            message: format!(
                "no hetero-3d plan that fits can run the pinned schedule {schedule}: interleaving needs every stage's blocks to split in two and the micro-batches to be a multiple of the stages"
            ),
            shortfall_gib: 0.0,
            rank: None,
        });
    }
    Ok(())
}

impl Planner for Hetero3d {
    fn name(&self) -> &'static str {
        "hetero-3d"
    }

    fn summary(&self) -> &'static str {
        "heterogeneous 3D (Metis / FlashFlex style): stages of same-type GPU groups, each with its own TP degree and replicas, or of mixed types with per-replica batches by speed; exact block partition by speed and memory, micro-batches, recompute and schedule searched"
    }

    fn fixed_axes(&self) -> StrategySpec {
        PIPELINE_AXES
    }

    fn shape_pins(&self) -> &'static [&'static str] {
        // Every stage's TP degree, the stage count, the schedule and the
        // expert parallelism; its micro-batches split by speed, its SP
        // follows TP and its expert-TP is TP.
        &["tp", "pp", "schedule", "ep"]
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        use rayon::prelude::*;
        let costs = problem.costs;
        let pins = &problem.options.shape;
        let all = pinned_layouts(costs, pins)?;
        // The schedule the layouts are sized and ranked under: a pinned
        // one, else 1F1B (interleaving is tried on the winner, or on every
        // candidate when pinned).
        let searched = match pins.schedule {
            Some(x) if x != PipeSchedule::Interleaved => x,
            _ => PipeSchedule::OneFOneB,
        };
        let mut stats = SearchStats::default();
        let mut notes = pipeline_shardings(problem, &[]).1;
        let mut cands: Vec<Candidate> = Vec::new();
        let mut miss: Option<(f64, String, usize)> = None;
        for group in by_costs(strategies(problem)?) {
            stats.strategies += group.len() as u64;
            // Layouts in parallel, each thread its own cost rows, every
            // strategy of the group searched on one pricing of the
            // stages; merged in the order of the strategies, then the
            // layouts (deterministic, as one strategy at a time was).
            let parts: Vec<Result<Vec<Searched>, PlanError>> = all
                .par_iter()
                .map_init(
                    || Rows::new(costs, &group[0]),
                    |rows, l| search_layout(costs, &group, searched, rows, l),
                )
                .collect();
            let mut parts: Vec<std::vec::IntoIter<Searched>> = parts
                .into_iter()
                .map(|p| p.map(Vec::into_iter))
                .collect::<Result<_, _>>()?;
            for _ in &group {
                for part in &mut parts {
                    let part = part.next().expect("one search per strategy");
                    stats.subproblems += part.tried;
                    stats.candidates += part.tried;
                    stats.feasible += part.fit.len() as u64;
                    stats.infeasible += part.tried - part.fit.len() as u64;
                    if let Some(c) = part.closest {
                        if miss.as_ref().is_none_or(|b| c.0 < b.0) {
                            miss = Some(c);
                        }
                    }
                    cands.extend(part.fit);
                }
            }
        }
        if cands.is_empty() {
            return Err(match miss {
                Some((short, message, r)) => PlanError::Infeasible {
                    message,
                    shortfall_gib: short.max(0.0),
                    rank: Some(r),
                },
                None => PlanError::Infeasible {
                    message: format!(
                        "no 3D layout of the {} GPUs gives every replica of a stage a sample of a {}-sample batch within the simulator's limits ({} layouts)",
                        costs.ranks(),
                        costs.workload.global_batch,
                        all.len()
                    ),
                    shortfall_gib: 0.0,
                    rank: None,
                },
            });
        }
        cands.sort_by(|a, b| a.estimate_ms.total_cmp(&b.estimate_ms));
        if let Some(schedule) = pins.schedule {
            under_schedule(&mut cands, schedule)?;
        }
        let plan = match problem.judge {
            Some(judge) => {
                // FSDP inside the stages is tried unless the user pinned a sharding.
                let fsdp = problem.strategy.sharding.is_none();
                let others = pins.schedule.is_none();
                confirm_apart(judge, (fsdp, others), cands, &mut stats, &mut notes)?
            }
            None => cands[0].plan.clone(),
        };
        notes.push(format!(
            "hetero-3d: {} (best of {} layouts x {} strategies, {} fit)",
            describe(costs, &plan),
            all.len(),
            stats.strategies,
            stats.feasible
        ));
        let mut planned = Planned::bare(plan);
        planned.notes = notes;
        planned.stats = stats;
        Ok(planned)
    }
}
