//! `pipeline-hetero`: a heterogeneity-aware pipeline planner in the line
//! of Metis (Um et al., USENIX ATC 2024), FlashFlex (Yan et al., 2024) and
//! HetPipe (Park et al., USENIX ATC 2020): it chooses the
//! number of stages, which GPUs form each stage, how many blocks each
//! stage holds, the micro-batch size and count, and the schedule.
//!
//! * **Stage groups**: GPUs of one type, consecutive in one of three
//!   orders (rank order, which keeps neighbours on a node; nodes by
//!   memory with each node's GPUs by memory; all GPUs by memory, so the
//!   first stages, which hold the most micro-batches under 1F1B, get the
//!   largest memories), cut into groups of at most `d` for `d` = 1, 2, 4,
//!   ... up to the largest node; at most one stage per block.
//! * **Blocks per stage**: for every grouping, checkpointing level
//!   (none, full; or the user's pin) and micro-batch size, the exact
//!   contiguous partition ([`crate::pipeline::partition::min_max`]) of
//!   the blocks over the stages minimising the slowest stage's period
//!   ([`crate::pipeline::estimate`]: its compute per micro-batch, or its
//!   transfers when the link is slower), each stage bounded by its GPUs'
//!   memory with 1F1B's `min(p - s, m)` micro-batches in flight.
//! * **Ranking**: the closed-form iteration time (Metis' cost shape);
//!   the best candidates are simulated under 1F1B, the best of them also
//!   under GPipe, and the fastest simulated plan that fits wins; the
//!   `pipeline` baseline's plan is simulated too, so this planner is never
//!   worse than it.
//!
//! Micro-batch sizes: 1, 2, 3, 4, 6, 8, 12, ... (powers of two and 1.5x
//! them) up to the global batch; a micro-batch splits near-equally inside
//! a stage. When no candidate fits, the plan is infeasible, naming the
//! stage with the smallest worst shortfall (single-sample slices, full
//! recompute, the memory-minimising partition). Units: ms, bytes, samples.

use super::pipeline::{pipeline_checkpointing, pipeline_shardings, pipeline_strategy};
use super::{Judge, Planned, Planner, Problem, SearchStats};
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::pipeline::costs::Rows;
use crate::pipeline::estimate::{
    estimate_ms, even_slices, held, place, stage_ms, staged, Over, Run, Staged,
};
use crate::pipeline::partition::min_max;
use crate::plan::pipeline::{PipeSchedule, Pipeline, Stage};
use crate::plan::Plan;
use crate::strategy::{Sharding, Stack, Strategy, StrategySpec};
use crate::tensor::TensorParallel;
use crate::units::GIB;
use std::collections::BTreeSet;

/// The heterogeneity-aware pipeline planner.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeteroPipeline;

/// Candidates the planner simulates (the closed form's best), then the
/// best of them again under GPipe.
const CONFIRM: usize = 4;

/// A grouping: the ranks of each stage, in stage order.
type Grouping = Vec<Vec<usize>>;

/// The stage groupings searched (module docs): over every GPU, then
/// without the smallest-memory GPU type, the two smallest, ... (a GPU
/// that cannot hold a block is better left out than made a stage).
pub fn groupings(costs: &CostModel) -> Vec<Grouping> {
    let c = &costs.workload.cluster;
    let n = c.len();
    let mem = |r: usize| costs.usable_gib(r);
    // GPU types by usable memory, smallest first.
    let mut types: Vec<(f64, String)> = (0..n)
        .map(|r| (mem(r), costs.gpu(r).name.clone()))
        .collect();
    types.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    types.dedup_by(|a, b| a.1 == b.1);
    let mut seen: BTreeSet<Grouping> = BTreeSet::new();
    let mut out = Vec::new();
    for dropped in 0..types.len() {
        let gone: Vec<&str> = types[..dropped].iter().map(|t| t.1.as_str()).collect();
        let keep: Vec<usize> = (0..n)
            .filter(|&r| !gone.contains(&costs.gpu(r).name.as_str()))
            .collect();
        for g in groupings_of(costs, &keep) {
            if seen.insert(g.clone()) {
                out.push(g);
            }
        }
    }
    out
}

/// The groupings of the GPUs `ranks` (module docs).
fn groupings_of(costs: &CostModel, ranks: &[usize]) -> Vec<Grouping> {
    let c = &costs.workload.cluster;
    let layers = costs.workload.model.layers as usize;
    let mem = |r: usize| costs.usable_gib(r);
    let by_mem = |a: &usize, b: &usize| mem(*b).total_cmp(&mem(*a)).then(a.cmp(b));
    let mut orders: Vec<Vec<usize>> = vec![ranks.to_vec()];
    let node_ranks = |k: usize| -> Vec<usize> {
        c.node_ranks(k)
            .into_iter()
            .filter(|r| ranks.contains(r))
            .collect()
    };
    let mut nodes: Vec<usize> = (0..c.nodes.len()).collect();
    let node_mem = |k: usize| -> f64 { node_ranks(k).iter().map(|&r| mem(r)).sum() };
    nodes.sort_by(|&a, &b| node_mem(b).total_cmp(&node_mem(a)).then(a.cmp(&b)));
    let mut o = Vec::with_capacity(ranks.len());
    for k in nodes {
        let mut v = node_ranks(k);
        v.sort_by(by_mem);
        o.extend(v);
    }
    orders.push(o);
    let mut o = ranks.to_vec();
    o.sort_by(by_mem);
    orders.push(o);
    let widest = (0..c.nodes.len())
        .map(|k| node_ranks(k).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let mut sizes = vec![1usize];
    while *sizes.last().unwrap() < widest {
        let next = (sizes.last().unwrap() * 2).min(widest);
        sizes.push(next);
    }
    let mut out = Vec::new();
    for order in &orders {
        for &d in &sizes {
            let mut g: Grouping = Vec::new();
            for &r in order {
                match g.last_mut() {
                    Some(last)
                        if last.len() < d && costs.gpu(last[0]).name == costs.gpu(r).name =>
                    {
                        last.push(r)
                    }
                    _ => g.push(vec![r]),
                }
            }
            if !g.is_empty() && g.len() <= layers {
                out.push(g);
            }
        }
    }
    out
}

/// Micro-batch counts for `batch` samples: sizes 1, 2, 3, 4, 6, 8, ...
/// (each count once, largest size first).
pub(super) fn micro_counts(batch: u32) -> Vec<u32> {
    let mut sizes = Vec::new();
    let mut x = 1u64;
    while x <= batch as u64 {
        sizes.push(x as u32);
        let half = x + x / 2;
        if x >= 2 && half < 2 * x && half <= batch as u64 {
            sizes.push(half as u32);
        }
        x *= 2;
    }
    sizes.push(batch);
    let mut counts: Vec<u32> = sizes.iter().map(|&s| batch.div_ceil(s.max(1))).collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// One searched candidate.
#[derive(Debug, Clone)]
struct Candidate {
    estimate_ms: f64,
    plan: Plan,
}

impl Planner for HeteroPipeline {
    fn name(&self) -> &'static str {
        "pipeline-hetero"
    }

    fn summary(&self) -> &'static str {
        "heterogeneous pipeline (Metis / FlashFlex style): stages of same-type GPU groups, exact block partition by speed and memory, micro-batch size and schedule searched"
    }

    fn fixed_axes(&self) -> StrategySpec {
        super::pipeline::PIPELINE_AXES
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let mut stats = SearchStats::default();
        let groups = groupings(problem.costs);
        let mut cands: Vec<Candidate> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        let levels = pipeline_checkpointing(problem);
        let (shardings, pin_notes) =
            pipeline_shardings(problem, &[Sharding::NoShard, Sharding::GradOp]);
        notes.extend(pin_notes);
        let strategies: Vec<(Sharding, crate::strategy::Checkpointing)> = shardings
            .iter()
            .flat_map(|&sh| levels.iter().map(move |&ck| (sh, ck)))
            .collect();
        for &(sh, ck) in &strategies {
            let (strategy, more) = pipeline_strategy(problem, sh, ck, Stack::PyTorch)?;
            for x in more {
                if !notes.contains(&x) {
                    notes.push(x);
                }
            }
            stats.strategies += 1;
            self.search(problem, &strategy, &groups, &mut stats, &mut cands)?;
        }
        // The uniform baseline's plan competes too, so this planner is never
        // worse than it in the simulator.
        if let Ok(u) = super::pipeline::UniformPipeline.plan(problem) {
            let mut plan = u.plan;
            plan.planner = self.name().to_string();
            cands.push(Candidate {
                estimate_ms: f64::NEG_INFINITY,
                plan,
            });
        }
        if cands.is_empty() {
            return Err(self.infeasible(problem, &groups));
        }
        cands.sort_by(|a, b| a.estimate_ms.total_cmp(&b.estimate_ms));
        let plan = match problem.judge {
            Some(judge) => confirm(judge, cands, &mut stats, &mut notes)?,
            None => {
                // Without a simulator the closed form decides (the seed has none).
                let at = cands
                    .iter()
                    .position(|c| c.estimate_ms.is_finite())
                    .unwrap_or(0);
                cands.swap_remove(at).plan
            }
        };
        let mut planned = Planned::bare(plan);
        planned.stats = stats;
        planned.notes = notes;
        Ok(planned)
    }
}

impl HeteroPipeline {
    /// Under `strategy`, over every grouping of `groups` and micro-batch
    /// count: the candidate of the best partition (module docs), added to
    /// `cands`. Slices are priced from one table of rows, built as they
    /// are first needed.
    fn search(
        &self,
        problem: &Problem<'_>,
        strategy: &Strategy,
        groups: &[Grouping],
        stats: &mut SearchStats,
        cands: &mut Vec<Candidate>,
    ) -> Result<(), PlanError> {
        let costs = problem.costs;
        let batch = costs.workload.global_batch;
        let mut rows = Rows::new(costs, strategy);
        for g in groups {
            let dmax = g.iter().map(Vec::len).max().unwrap_or(1) as u32;
            for m in micro_counts(batch) {
                // Every GPU of a stage takes at least one sample.
                if batch / m < dmax || m > crate::limits::MAX_MICROBATCHES {
                    continue;
                }
                let tps = no_tp(g.len());
                let slices = even_slices(g, &tps, batch.div_ceil(m));
                let st = staged(costs, strategy, &mut rows, g, &tps, &slices)?;
                if let Some(c) = self.candidate(costs, strategy, g, &st, m, stats) {
                    cands.push(c);
                }
            }
        }
        Ok(())
    }

    /// The candidate of grouping `g` (priced `st`) with `m` micro-batches
    /// under 1F1B: the blocks partitioned to minimise the slowest stage's
    /// period within every stage's memory (`None`: nothing fits, or the
    /// plan would be too large to simulate).
    fn candidate(
        &self,
        costs: &CostModel,
        strategy: &Strategy,
        g: &Grouping,
        st: &Staged,
        m: u32,
        stats: &mut SearchStats,
    ) -> Option<Candidate> {
        let w = &costs.workload;
        let (n, layers, batch) = (costs.ranks(), w.model.layers, w.global_batch);
        let p = g.len();
        let table = periods(costs, strategy, g, st, m);
        stats.subproblems += 1;
        stats.candidates += 1;
        let Some(part) = min_max(p, layers as usize, |s, _, k| table[s][k - 1]) else {
            stats.infeasible += 1;
            return None;
        };
        stats.feasible += 1;
        let pipe = Pipeline::new(
            PipeSchedule::OneFOneB,
            m,
            g.iter()
                .zip(&part.counts)
                .map(|(ranks, &blocks)| {
                    Stage::new(blocks, ranks.iter().map(|&r| r as u32).collect())
                })
                .collect(),
        );
        if !crate::iteration::pipeline_fits_simulator(costs, strategy, &pipe) {
            return None;
        }
        let schedule = PipeSchedule::OneFOneB;
        let est = estimate_ms(
            costs,
            strategy,
            g,
            &no_tp(g.len()),
            st,
            &part.counts,
            m,
            Run::plain(schedule, 1),
        );
        let plan = Plan::pipelined(self.name(), *strategy, pipe, n, batch);
        // (A pinned hybrid sharding's shard group must fit the grouping.)
        if strategy.sharding == Sharding::Hybrid {
            plan.validate(n, batch, self.name()).ok()?;
        }
        Some(Candidate {
            estimate_ms: est,
            plan,
        })
    }

    /// Why nothing fits: over every grouping, single-sample slices and
    /// the most recompute searched, the partition with the smallest worst
    /// memory shortfall; its worst stage.
    fn infeasible(&self, problem: &Problem<'_>, groups: &[Grouping]) -> PlanError {
        let costs = problem.costs;
        let w = &costs.workload;
        let (layers, batch) = (w.model.layers as usize, w.global_batch);
        let ck = *pipeline_checkpointing(problem).last().expect("a level");
        let (shardings, _) = pipeline_shardings(problem, &[Sharding::NoShard, Sharding::GradOp]);
        let mut best: Option<(f64, String, usize)> = None;
        for &sh in &shardings {
            let Ok((strategy, _)) = pipeline_strategy(problem, sh, ck, Stack::PyTorch) else {
                continue;
            };
            self.closest(problem, groups, &strategy, &mut best);
        }
        match best {
            Some((short, message, r)) => PlanError::Infeasible {
                message,
                shortfall_gib: short.max(0.0),
                rank: Some(r),
            },
            None => PlanError::Infeasible {
                message: format!(
                    "no pipeline of at most {layers} stages gives every GPU of a stage a sample of a {batch}-sample batch"
                ),
                shortfall_gib: 0.0,
                rank: None,
            },
        }
    }

    /// Over `groups` under `strategy`: the partition with the smallest
    /// worst shortfall, kept in `best` (shortfall GiB, message, rank) when
    /// smaller than what it holds.
    fn closest(
        &self,
        problem: &Problem<'_>,
        groups: &[Grouping],
        strategy: &Strategy,
        best: &mut Option<(f64, String, usize)>,
    ) {
        let costs = problem.costs;
        let w = &costs.workload;
        let (layers, batch) = (w.model.layers as usize, w.global_batch);
        let strategy = *strategy;
        let ck = strategy.checkpointing;
        let mut rows = Rows::new(costs, &strategy);
        for g in groups {
            let p = g.len();
            let dmax = g.iter().map(Vec::len).max().unwrap_or(1) as u32;
            if batch < dmax {
                continue;
            }
            let m = batch / dmax;
            let tps = no_tp(g.len());
            let slices = even_slices(g, &tps, dmax);
            let Ok(st) = staged(costs, &strategy, &mut rows, g, &tps, &slices) else {
                continue;
            };
            let over = |s: usize, k: usize| -> Over {
                let at = place(PipeSchedule::OneFOneB, p, s, m, 1);
                st.over_bytes(
                    costs,
                    &strategy,
                    s,
                    k as u32,
                    held(
                        costs,
                        k as u32,
                        at,
                        &TensorParallel::NONE,
                        (
                            strategy.sharding,
                            crate::plan::pipeline::shard_width(&strategy, g[s].len(), 1),
                        ),
                    ),
                    at,
                )
            };
            let Some(part) = min_max(p, layers, |s, _, k| Some(over(s, k).over_bytes / GIB)) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| part.bottleneck < b.0) {
                let (mut worst, mut at, mut first) = (None::<Over>, 0, 1u32);
                let mut start = 1u32;
                for (s, &k) in part.counts.iter().enumerate() {
                    let o = over(s, k as usize);
                    if worst.is_none_or(|w| o.over_bytes > w.over_bytes) {
                        (worst, at, first) = (Some(o), s, start);
                    }
                    start += k;
                }
                let Some(worst) = worst else { continue };
                let r = g[at][0];
                let msg = format!(
                    "no pipeline fits: at best stage {at} ({}x {}, blocks {first}-{}) needs {:.2} GiB, {:.2} GiB over its usable {:.2} GiB, with one sample per GPU per micro-batch and {} recompute ({p} stages)",
                    g[at].len(),
                    costs.gpu(r).name,
                    first + part.counts[at] - 1,
                    worst.peak_bytes / GIB,
                    (worst.over_bytes / GIB).max(0.0),
                    worst.usable_bytes / GIB,
                    ck.name()
                );
                *best = Some((part.bottleneck, msg, r));
            }
        }
    }
}

/// Per stage of grouping `g` (priced `st`) with `m` micro-batches under
/// 1F1B, by block count `k` (index `k - 1`): the stage's period, `None`
/// when it does not fit its GPUs' memory.
fn periods(
    costs: &CostModel,
    strategy: &Strategy,
    g: &Grouping,
    st: &Staged,
    m: u32,
) -> Vec<Vec<Option<f64>>> {
    let p = g.len();
    let most = costs.workload.model.layers as usize - (p - 1);
    (0..p)
        .map(|s| {
            let at = place(PipeSchedule::OneFOneB, p, s, m, 1);
            let gc = &st.costs[s];
            (1..=most as u32)
                .map(|k| {
                    let d = crate::plan::pipeline::shard_width(strategy, g[s].len(), 1);
                    let h = held(costs, k, at, &TensorParallel::NONE, (strategy.sharding, d));
                    let over = st.over_bytes(costs, strategy, s, k, h, at).over_bytes;
                    (over <= 0.0).then(|| stage_ms(gc, k, at).max(st.comm_ms[s]))
                })
                .collect()
        })
        .collect()
}

/// The plan of `cands` (sorted by estimate) the simulator confirms: the
/// best candidates simulated under 1F1B, the fastest that fits also
/// under GPipe; when all run out of memory, the closed form's best (noted).
fn confirm(
    judge: &dyn Judge,
    mut cands: Vec<Candidate>,
    stats: &mut SearchStats,
    notes: &mut Vec<String>,
) -> Result<Plan, PlanError> {
    let mut best: Option<(f64, Plan)> = None;
    let mut tried = 0;
    for c in &cands {
        if tried >= 2 * CONFIRM || (tried >= CONFIRM && best.is_some()) {
            break;
        }
        tried += 1;
        let v = judge.judge(&c.plan)?;
        stats.simulated += 1;
        if !v.oom && best.as_ref().is_none_or(|b| v.iteration_ms < b.0) {
            best = Some((v.iteration_ms, c.plan.clone()));
        }
    }
    if let Some((t, plan)) = best.clone() {
        let mut g = plan.clone();
        if let Some(pp) = g.pipeline.as_mut() {
            pp.schedule = PipeSchedule::Gpipe;
        }
        let v = judge.judge(&g)?;
        stats.simulated += 1;
        if !v.oom && v.iteration_ms < t {
            best = Some((v.iteration_ms, g));
        }
    }
    Ok(match best {
        Some((_, p)) => p,
        None => {
            notes.push(format!(
                "the closed form's {tried} best pipeline plans all run out of memory in the simulator; returning the best of them"
            ));
            cands.swap_remove(0).plan
        }
    })
}

/// No tensor parallelism on any of `p` stages (this planner's stages are
/// data-parallel groups).
fn no_tp(p: usize) -> Vec<TensorParallel> {
    vec![TensorParallel::NONE; p]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_counts_cover_sizes_once() {
        assert_eq!(micro_counts(8), vec![1, 2, 3, 4, 8]);
        let v = micro_counts(64);
        assert!(v.contains(&1) && v.contains(&64) && v.contains(&16));
        assert!(v.windows(2).all(|w| w[0] < w[1]));
    }
}
