//! One simulated training iteration: the plan's schedule is described
//! ([`crate::data_parallel::Description`]), lowered to an engine graph
//! ([`crate::lower::data_parallel`]), run on the discrete-event engine with the
//! report's observers, and assembled into a [`Report`]
//! ([`crate::report`]).
//!
//! # A single GPU
//!
//! With one rank every collective costs 0 and with one micro-batch there are
//! no copies, so under Cephalo's strategy the iteration is exactly the sum of
//! (each rounded to ns): `embed_fwd(m) + L x block_fwd(m) + head_fwd(m) +
//! head_bwd(m) + L x (block_fwd(m) + block_bwd(m)) + embed_bwd(m) +
//! optimizer(all params)`; without checkpointing the recompute term goes.

use crate::cost::CostModel;
use crate::engine::{run, MemKind, NullObserver, Observer, OpId, OpRecord};
use crate::error::PlanError;
use crate::iteration::{Iteration, SimOptions};
use crate::lower::Lowered;
use crate::memory::MemoryTracker;
use crate::plan::Plan;
use crate::report::{assemble, Assembly, Breakdown, Folding, Report};
use crate::strategy::{Attention, Recompute};
use crate::trace::TraceRecorder;
use crate::units::SimTime;

/// The engine graph of one iteration of `plan` (validated first, origin
/// `plan`): the ops of the ranks [`crate::iteration::node_classes`] simulates.
pub fn build_graph(
    costs: &CostModel,
    plan: &Plan,
    opts: &SimOptions,
) -> Result<Lowered, PlanError> {
    graph_of(&Iteration::new(costs, plan, opts)?, opts, None)
}

/// The engine graph of `it` (of `layout`'s reduced run of passes, when
/// given), with compute slowed while collectives run where they overlap.
fn graph_of(
    it: &Iteration<'_>,
    opts: &SimOptions,
    layout: Option<&crate::fold::Layout>,
) -> Result<Lowered, PlanError> {
    let mut low = it.lower_graph(opts, layout)?;
    // Interference only where communication overlaps compute (not on CPU ranks).
    let costs = it.costs();
    if opts.contention && costs.comm_overlaps_compute() {
        low.graph.set_interference(costs.options.comm_interference);
    }
    Ok(low)
}

/// Executed FLOPs of one iteration beyond the model's: every sample's
/// recomputed block forwards (full recompute: the whole forward; op-level
/// selective: the matmuls it does not keep, and with eager attention the
/// score matmuls `4 s^2 h`; core-attention selective: the score matmuls,
/// or the fused kernel's causal half).
pub fn recompute_flops(costs: &CostModel, plan: &Plan) -> f64 {
    let w = &costs.workload;
    let s = plan.strategy;
    let causal = w.model.family.is_causal();
    let per_sample: f64 = (1..=w.model.layers)
        .map(|b| match s.checkpointing.block(b) {
            Recompute::None => 0.0,
            Recompute::Full => w.model.block_flops_fwd(w.seq_len),
            Recompute::Selective => {
                let score = w.model.score_flops_fwd(w.seq_len);
                let linear = w.model.block_flops_fwd(w.seq_len) - score;
                let eager_score = match s.attention {
                    Attention::Eager => score,
                    Attention::Flash => 0.0,
                };
                if s.checkpointing.attention_core() {
                    // The fused kernel is rerun too (its causal half).
                    match s.attention {
                        Attention::Eager => score,
                        Attention::Flash => score * if causal { 0.5 } else { 1.0 },
                    }
                } else {
                    crate::activation::recomputed_matmul_fraction(&w.model) * linear + eager_score
                }
            }
        })
        .sum();
    per_sample * w.global_batch as f64
}

/// An op execution kept for a later pass over the report's breakdown
/// (a folded run weighs the ops only once the run proved periodic).
#[derive(Debug, Clone, Copy)]
struct Kept {
    op: OpId,
    rank: u32,
    stream: crate::engine::Stream,
    label: crate::engine::OpLabel,
    start: SimTime,
    end: SimTime,
    nominal: SimTime,
    participants: u32,
}

/// Fans engine calls out to the report's observers and an extra one.
struct Fan<'a, 'g> {
    breakdown: Breakdown<'g>,
    /// Every op execution, when the breakdown is taken afterwards.
    kept: Option<Vec<Kept>>,
    memory: MemoryTracker,
    trace: Option<TraceRecorder>,
    extra: &'a mut dyn Observer,
}

impl Observer for Fan<'_, '_> {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        match &mut self.kept {
            Some(k) => k.push(Kept {
                op: rec.op,
                rank: rec.rank,
                stream: rec.stream,
                label: rec.label,
                start: rec.start,
                end: rec.end,
                nominal: rec.nominal,
                participants: rec.participants,
            }),
            None => self.breakdown.on_op(rec),
        }
        if let Some(t) = &mut self.trace {
            t.on_op(rec);
        }
        self.extra.on_op(rec);
    }

    fn on_mem(&mut self, pool: u32, time: SimTime, delta_bytes: i64, kind: MemKind, op: OpId) {
        self.memory.on_mem(pool, time, delta_bytes, kind, op);
        if let Some(t) = &mut self.trace {
            t.on_mem(pool, time, delta_bytes, kind, op);
        }
        self.extra.on_mem(pool, time, delta_bytes, kind, op);
    }
}

/// Simulates one iteration of `plan` on the workload of `costs`.
///
/// Validates the plan first (origin `plan`): rank count, batch sum,
/// micro-batch consistency, state fractions, what its strategy requires.
/// An out-of-memory plan is an `Ok` report with `oom: true`. Long runs of
/// identical micro-batch passes are folded (`opts.fold_passes`,
/// [`crate::fold`]).
pub fn simulate(costs: &CostModel, plan: &Plan, opts: &SimOptions) -> Result<Report, PlanError> {
    let it = Iteration::new(costs, plan, opts)?;
    for layout in it.fold_layouts(opts) {
        let low = graph_of(&it, opts, Some(&layout))?;
        if let Some(r) = run_lowered(costs, plan, opts, &low, &mut NullObserver, Some(&layout))? {
            return Ok(r);
        }
    }
    // Nothing to fold, or nothing periodic: every pass, from the same
    // iteration.
    let low = graph_of(&it, opts, None)?;
    let r = run_lowered(costs, plan, opts, &low, &mut NullObserver, None)?;
    Ok(r.expect("an unfolded run always reports"))
}

/// [`simulate`], also pushing every engine call to `extra` (tests use an
/// [`crate::engine::Recorder`] to check invariants on the raw timeline;
/// memory pools are the GPUs' ranks, then `ranks + node` for hosts). With
/// `opts.merge_identical_nodes`, `extra` sees the simulated ranks only
/// ([`crate::iteration::node_classes`]); passes are never folded here, so `extra` sees every
/// pass.
pub fn simulate_observed(
    costs: &CostModel,
    plan: &Plan,
    opts: &SimOptions,
    extra: &mut dyn Observer,
) -> Result<Report, PlanError> {
    let low = build_graph(costs, plan, opts)?;
    let r = run_lowered(costs, plan, opts, &low, extra, None)?;
    Ok(r.expect("an unfolded run always reports"))
}

/// Runs the lowered iteration `low` of `plan` and assembles its report.
/// With `fold`, `low` is the reduced iteration of that layout: `None` when
/// its folded runs are not exactly periodic (nothing is reported then).
fn run_lowered(
    costs: &CostModel,
    plan: &Plan,
    opts: &SimOptions,
    low: &Lowered,
    extra: &mut dyn Observer,
    fold: Option<&crate::fold::Layout>,
) -> Result<Option<Report>, PlanError> {
    let ranks = costs.ranks();
    let mut pools = low.base_device_bytes.clone();
    pools.extend(&low.base_host_bytes);
    let stage = plan.pipeline.as_ref().map(|p| (p, p.positions(ranks)));
    let trace = opts.trace.then(|| {
        let mut names: Vec<String> = (0..ranks)
            .map(|r| {
                let node = &costs.workload.cluster.nodes[costs.workload.cluster.gpus[r].node].name;
                let mut n = format!("rank {r}: {} ({node})", costs.gpu(r).name);
                if let Some((p, pos)) = &stage {
                    match pos[r] {
                        Some((s, j)) => {
                            let st = &p.stages[s];
                            let first = p.first_block(s);
                            n.push_str(&format!(
                                " stage {s}: blocks {first}-{}",
                                first + st.blocks - 1
                            ));
                            // The groups it belongs to: its replica (a TP
                            // group under TP) and its data-parallel group.
                            if st.tp > 1 {
                                let g = st.group(j);
                                let i = g.iter().position(|&x| x as usize == r).unwrap_or(0);
                                n.push_str(&format!(
                                    ", replica {j} of {} (TP group ranks {}-{}, TP rank {i})",
                                    st.dp(),
                                    g[0],
                                    g[g.len() - 1]
                                ));
                            } else if st.dp() > 1 {
                                n.push_str(&format!(", replica {j} of {}", st.dp()));
                            }
                        }
                        None => n.push_str(" unused"),
                    }
                }
                n
            })
            .collect();
        names.extend(
            costs
                .workload
                .cluster
                .nodes
                .iter()
                .map(|n| format!("host: {}", n.name)),
        );
        TraceRecorder::new(names, ranks, pools.clone())
    });
    let mut fan = Fan {
        breakdown: Breakdown::new(&low.graph, ranks),
        kept: fold.map(|_| Vec::with_capacity(2 * low.graph.len())),
        memory: MemoryTracker::new(pools),
        trace,
        extra,
    };
    let stats = run(&low.graph, &mut fan)?;
    let mut folding = None;
    if let (Some(layout), Some(kept)) = (fold, fan.kept.take()) {
        let Some(f) = unfold(low, layout, &kept, &mut fan)? else {
            return Ok(None);
        };
        folding = Some(f);
    }
    fan.breakdown.finish(stats.makespan.0);
    if let Some(f) = &folding {
        for (r, t) in fan.breakdown.ranks.iter_mut().enumerate() {
            t.finish = f.finish_ns[r];
        }
    }
    let trace = fan.trace.take().map(|t| {
        let mut t = t.finish();
        t.layers = costs.workload.model.layers;
        t.layer_major = plan.pipeline.is_none()
            && plan.strategy.accumulation == crate::strategy::Accumulation::Layered;
        t.op_bytes = low
            .collectives
            .iter()
            .map(|c| (c.op.0, c.buffer_bytes))
            .collect();
        t
    });
    let a = Assembly {
        costs,
        plan,
        base_device_bytes: &low.base_device_bytes,
        base_host_bytes: &low.base_host_bytes,
        collectives: &low.collectives,
        recompute_flops: recompute_flops(costs, plan),
        classes: &low.classes,
        folding: folding.as_ref(),
    };
    let mut stats_full = stats;
    if let Some(f) = &folding {
        stats_full.makespan = SimTime(f.makespan_ns);
    }
    Ok(Some(assemble(
        &a,
        &stats_full,
        &fan.breakdown,
        &fan.memory,
        trace,
    )))
}

/// Checks the reduced run `kept` of `layout` for periodic passes and, when
/// they are, feeds the breakdown every op weighted by the ops it stands
/// for; `None` when a folded run is not exactly periodic. A whole
/// iteration that ends past the engine's clock is the engine's error.
fn unfold(
    low: &Lowered,
    layout: &crate::fold::Layout,
    kept: &[Kept],
    fan: &mut Fan<'_, '_>,
) -> Result<Option<Folding>, crate::error::SimError> {
    let g = &low.graph;
    let mut times: Vec<crate::fold::OpTime> = (0..g.len() as u32)
        .map(|i| crate::fold::OpTime::new(g.op_label(OpId(i)), g.op_duration(OpId(i)), 0, 0))
        .collect();
    for k in kept {
        let t = &mut times[k.op.0 as usize];
        t.start = k.start.0;
        t.end = k.end.0;
    }
    let net_zero = |block: &[u32]| {
        crate::fold::sums_to_zero(
            block
                .iter()
                .flat_map(|&o| g.op_mems(OpId(o)))
                .map(|m| (m.pool, m.delta_bytes)),
        )
    };
    let Some(u) = layout.detect(&times, &net_zero) else {
        return Ok(None);
    };
    let pass = |op: OpId| times[op.0 as usize].pass;
    let ranks = fan.breakdown.ranks.len();
    let mut finish_ns = vec![0u64; ranks];
    let mut makespan_ns = 0u64;
    fan.breakdown.blocks = u
        .blocks()
        .map(|b| {
            let mut starts: Vec<Option<u64>> = vec![None; ranks];
            for k in kept.iter().filter(|k| b.passes.contains(&pass(k.op))) {
                if let Some(s) = starts.get_mut(k.rank as usize) {
                    *s = Some(s.map_or(k.start.0, |x| x.min(k.start.0)));
                }
            }
            (b, starts)
        })
        .collect();
    for k in kept {
        let p = pass(k.op);
        let rec = OpRecord {
            op: k.op,
            rank: k.rank,
            stream: k.stream,
            label: k.label,
            name: g.name(k.label.name),
            start: k.start,
            end: k.end,
            nominal: k.nominal,
            participants: k.participants,
        };
        fan.breakdown.on_op_weighted(&rec, u.weight(p));
        let end = k.end.0.saturating_add(u.shift_last_ns(p));
        if end == SimTime::MAX.0 {
            return Err(crate::error::SimError::TimeOverflow {
                op: k.op.0,
                name: g.name(k.label.name).to_string(),
            });
        }
        if let Some(f) = finish_ns.get_mut(k.rank as usize) {
            *f = (*f).max(end);
        }
        makespan_ns = makespan_ns.max(end);
    }
    let op_weight = times.iter().map(|t| u.weight(t.pass)).collect();
    let peak_shift_ns = (0..fan.memory.ranks())
        .map(|q| {
            fan.memory
                .peak_op(q)
                .map_or(0, |op| u.shift_first_ns(pass(op)))
        })
        .collect();
    Ok(Some(Folding {
        op_weight,
        peak_shift_ns,
        finish_ns,
        makespan_ns,
        folded_passes: u.folded_passes(),
    }))
}
