//! FSDP iteration model: a [`Plan`] and a [`CostModel`] become an engine
//! task graph ([`build_graph`]) whose run becomes a [`Report`] ([`simulate`]).
//!
//! Units: op durations come from the cost model in ms and are rounded to
//! integer ns ([`SimTime`]); memory changes are bytes; the report converts
//! back to ms and GiB.
//!
//! # Schedule (DESIGN.md section 4, Cephalo's trainer)
//!
//! FSDP units `u`: 0 = embedding, 1..=L = transformer blocks, L+1 = head.
//! The iteration is a sequence of *phases*, each using one unit:
//! `Forward(0..=L)`, `Head`, `Backward(L..=1)`, `Backward(0)`. Every phase
//! starts with an all-gather (AG) of its unit's parameters over ALL ranks
//! (ranks with batch 0 too; pieces = the plan's state fractions). Per rank
//! `i` with micro-batch sizes `m_1..m_n` ([`crate::plan::RankPlan::microbatch_sizes`]):
//!
//! * `Forward(u)`: `F(u,k)` for k = 1..n on the compute stream (embedding or
//!   block forward), the first one waiting for AG(u). With `n > 1` each
//!   output is copied device-to-host on the copy stream (layered gradient
//!   accumulation offloads activations); with `n = 1` there are no copies.
//! * `Head`: per micro-batch, head forward then head backward.
//! * `Backward(u)`, u >= 1: per micro-batch, with `n > 1` a host-to-device
//!   copy of the saved input and of the output gradient (2 x
//!   [`CostModel::block_output_bytes`]), a recomputed forward (category
//!   `Recompute`), the backward, and with `n > 1` a device-to-host copy of
//!   the input gradient. `Backward(0)` (embedding) copies in only the output
//!   gradient, runs the embedding backward (a lookup needs no recompute) and
//!   copies nothing out. The head copies its input in and its input gradient
//!   out (1 x the block output each) when `n > 1`.
//! * After its last backward on every rank, a phase's gradients are
//!   reduce-scattered (RS, head and backward phases) asynchronously on the
//!   communication stream.
//! * Finally the optimizer step on the local shard
//!   ([`CostModel::optimizer_ms`] of `r_i x` total parameters) after the
//!   rank's last RS. The iteration ends when every rank is done.
//!
//! **Prefetch** ([`SimOptions::prefetch`], default on): AG of phase p+1 is
//! issued once the AG of phase p is done (the communication stream is in
//! order) and every rank finished the compute of phase p-1, so at most two
//! units are unsharded at a time. After the compute of phase p ends on every
//! rank, the communication stream receives RS(p) (FSDP's post-backward hook
//! fires first) and then AG(p+2). Without prefetch, AG(p+1) waits for the
//! compute of phase p, so each rank's collectives and compute run one after
//! the other. Prefetch is also off when a rank is a CPU device
//! ([`CostModel::comm_overlaps_compute`]): its collectives run on the cores
//! that compute. Host-to-device copies of the backward are prefetched
//! one micro-batch ahead: the copy for step j+1 waits for the compute of
//! step j-1 (two input buffers), and on the copy stream it precedes the
//! device-to-host copy of step j.
//!
//! # Memory per rank
//!
//! Constant: `state_gib(r_i)` + `overhead_gib`. Dynamic (bytes, attached to
//! op starts and ends):
//! * unsharded parameters of unit u (`params x comm_bytes_per_param`) from
//!   the start of AG(u) to the end of the last compute op of that phase (to
//!   the end of the AG on a rank with no compute);
//! * the unsharded gradient buffer (`params x 4 B`) from the first backward
//!   of u to the end of RS(u) (from the start of RS(u) on a rank with no
//!   compute);
//! * activations of the micro-batch being computed, `act_alloc(m) = max(0,
//!   act_mem_gib(m) - B_ref)`, from the start of each forward / recompute /
//!   head forward / embedding backward to the end of that forward (forward
//!   phases keep nothing: the backward recomputes) or of the matching
//!   backward.
//!
//! `act_mem_gib(m)` is the non-state peak of a whole step *as measured*: it
//! already contains the unit buffers that were live at that peak. `B_ref`
//! is the largest buffer set this schedule holds during one phase's compute
//! in the measured configuration (prefetch on, previous reduce-scatter
//! finished): `max over phases of params(u) + params(next phase's unit) +
//! grads(u)`. For block phases that is the "two gathered blocks and one
//! gradient buffer" of `3 x P_block x 4 B`; the head phase (head
//! parameters and gradients plus the prefetched last block) is larger when
//! the head is untied, and then sets `B_ref`. Subtracting it avoids counting
//! the buffers twice, so **in the typical case the simulated peak is exactly
//! `state + overhead + act_mem_gib(m)`**, the reference optimizer's own
//! memory check. It is higher when timing keeps more buffers alive (a
//! straggler delays a reduce-scatter, so a fast rank holds two gradient
//! buffers) and when `act_mem_gib(m) < B_ref` (tiny micro-batches: the
//! buffers alone exceed the measurement). The peak is compared with
//! `usable_gib` = capacity x `mem_fraction` to decide OOM.
//!
//! # A single GPU
//!
//! With one rank every collective costs 0 and with one micro-batch there are
//! no copies, so the iteration is exactly the sum of (each rounded to ns):
//! `embed_fwd(m) + L x block_fwd(m) + head_fwd(m) + head_bwd(m) + L x
//! (block_fwd(m) + block_bwd(m)) + embed_bwd(m) + optimizer(all params)`.

use crate::comm::CollectiveKind;
use crate::cost::{
    CostModel, OPTIMIZER_BYTES_PER_PARAM, UNIT_BANDWIDTH_EFFICIENCY, UNIT_COMPUTE_EFFICIENCY,
};
use crate::engine::{
    run, Category, Graph, MemAt, NullObserver, Observer, OpId, OpLabel, OpRecord, Stream,
};
use crate::error::PlanError;
use crate::memory::MemoryTracker;
use crate::plan::Plan;
use crate::report::{Breakdown, CollectiveTimes, GpuReport, OomGpu, Report};
use crate::trace::TraceRecorder;
use crate::units::{SimTime, GIB};

/// Bytes per parameter of an unsharded gradient buffer (fp32 reduction).
pub const GRAD_BYTES_PER_PARAM: f64 = 4.0;

/// Knobs of a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Record a Chrome trace into [`Report::trace`].
    pub trace: bool,
    /// Prefetch the next unit's all-gather (default true).
    pub prefetch: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            trace: false,
            prefetch: true,
        }
    }
}

/// One compute phase of the iteration (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Forward of unit `u` (0 = embedding, 1..=L blocks).
    Forward(u32),
    /// Head forward + backward (unit L+1).
    Head,
    /// Backward of unit `u` (L..=1 blocks, then 0 = embedding).
    Backward(u32),
}

impl Phase {
    /// The unit this phase uses, for a model of `layers` blocks.
    pub fn unit(self, layers: u32) -> u32 {
        match self {
            Phase::Forward(u) | Phase::Backward(u) => u,
            Phase::Head => layers + 1,
        }
    }

    /// Whether the phase ends with a reduce-scatter of its unit's gradients.
    pub fn reduces(self) -> bool {
        !matches!(self, Phase::Forward(_))
    }
}

/// The phases of one iteration for a model of `layers` blocks, in order.
pub fn phases(layers: u32) -> Vec<Phase> {
    let mut v: Vec<Phase> = (0..=layers).map(Phase::Forward).collect();
    v.push(Phase::Head);
    v.extend((0..=layers).rev().map(Phase::Backward));
    v
}

/// The task graph of one iteration and what its observers need.
#[derive(Debug, Clone)]
pub struct IterationGraph {
    /// The graph (ranks = the cluster's GPUs).
    pub graph: Graph,
    /// Constant memory per rank (state + overhead), bytes.
    pub base_mem_bytes: Vec<i64>,
    /// Phases in order.
    pub phases: Vec<Phase>,
    /// Reference buffer footprint subtracted from the measured non-state
    /// memory to get activations (see the module docs), bytes.
    pub buffers_ref_bytes: i64,
    /// Collective durations used.
    pub collectives: CollectiveTimes,
}

/// Per micro-batch durations and activation bytes of one rank.
#[derive(Debug, Clone, Copy)]
struct Micro {
    f_blk: SimTime,
    b_blk: SimTime,
    f_emb: SimTime,
    b_emb: SimTime,
    f_head: SimTime,
    b_head: SimTime,
    /// Host copy of one block output.
    copy1: SimTime,
    /// Host copy of two block outputs.
    copy2: SimTime,
    act: i64,
}

/// A non-negative finite ms value as a duration (anything else is 0).
fn dur(ms: f64) -> SimTime {
    if ms.is_finite() && ms > 0.0 {
        SimTime::from_ms(ms)
    } else {
        SimTime::ZERO
    }
}

/// Labels used by the FSDP graph.
struct Labels {
    fwd: OpLabel,
    embed_fwd: OpLabel,
    head_fwd: OpLabel,
    bwd: OpLabel,
    embed_bwd: OpLabel,
    head_bwd: OpLabel,
    recompute: OpLabel,
    optimizer: OpLabel,
    ag: OpLabel,
    rs: OpLabel,
    d2h: OpLabel,
    h2d: OpLabel,
}

fn at(l: OpLabel, unit: u32, micro: usize) -> OpLabel {
    OpLabel {
        unit,
        micro: micro as u32,
        ..l
    }
}

/// Per-rank construction state.
#[derive(Debug, Clone, Default)]
struct RankState {
    micro: Vec<Micro>,
    /// Last compute op of the previous backward step.
    prev_step_end: Option<OpId>,
    /// Host-to-device copy already issued for the next backward step.
    pending_h2d: Option<OpId>,
    /// Backward steps built so far.
    steps: usize,
}

/// Builds the task graph of one iteration of `plan` (validated first, with
/// origin `plan`).
pub fn build_graph(
    costs: &CostModel,
    plan: &Plan,
    opts: &SimOptions,
) -> Result<IterationGraph, PlanError> {
    let ranks = costs.ranks();
    plan.validate(ranks, costs.workload.global_batch, "plan")?;
    let layers = costs.workload.model.layers;
    let unit_params = costs.unit_params();
    let total_params: f64 = unit_params.iter().map(|&p| p as f64).sum();
    let phases = phases(layers);
    let np = phases.len();
    let fr = plan.state_fractions();
    let bpp = costs.options.comm_bytes_per_param;
    let param_bytes: Vec<i64> = unit_params
        .iter()
        .map(|&p| (p as f64 * bpp).round() as i64)
        .collect();
    let grad_bytes: Vec<i64> = unit_params
        .iter()
        .map(|&p| (p as f64 * GRAD_BYTES_PER_PARAM).round() as i64)
        .collect();
    // Largest set of unit buffers live during one phase's compute in the
    // measured configuration (prefetch on, previous reduce-scatter done):
    // this phase's parameters, the next phase's prefetched parameters, and
    // this phase's gradients.
    let buffers_ref: i64 = (0..np)
        .map(|p| {
            let u = phases[p].unit(layers) as usize;
            let next = phases
                .get(p + 1)
                .map_or(0, |q| param_bytes[q.unit(layers) as usize]);
            let grad = if phases[p].reduces() {
                grad_bytes[u]
            } else {
                0
            };
            param_bytes[u] + next + grad
        })
        .max()
        .unwrap_or(0);
    let head_u = layers + 1;

    // Collective durations by unit class (embedding, block, head).
    let class = |u: u32| -> usize {
        if u == 0 {
            0
        } else if u == head_u {
            2
        } else {
            1
        }
    };
    let class_unit = [0usize, 1.min(layers as usize), head_u as usize];
    let coll = |kind: CollectiveKind| -> [SimTime; 3] {
        class_unit.map(|u| dur(costs.collective_ms(kind, unit_params[u], &fr)))
    };
    let ag_d = coll(CollectiveKind::AllGather);
    let rs_d = coll(CollectiveKind::ReduceScatter);

    // Per-rank micro-batch costs (computed once per distinct size).
    let mut st: Vec<RankState> = Vec::with_capacity(ranks);
    for (r, rp) in plan.gpus.iter().enumerate() {
        let mut cache: Vec<(u32, Micro)> = Vec::new();
        let mut micro = Vec::with_capacity(rp.microbatches as usize);
        for m in rp.microbatch_sizes() {
            let mc = match cache.iter().find(|c| c.0 == m) {
                Some(c) => c.1,
                None => {
                    let out = costs.block_output_bytes(m);
                    let act = (costs.act_mem_gib(m) * GIB - buffers_ref as f64).max(0.0);
                    let mc = Micro {
                        f_blk: dur(costs.block_fwd_ms(r, m)),
                        b_blk: dur(costs.block_bwd_ms(r, m)),
                        f_emb: dur(costs.embed_fwd_ms(r, m)),
                        b_emb: dur(costs.embed_bwd_ms(r, m)),
                        f_head: dur(costs.head_fwd_ms(r, m)),
                        b_head: dur(costs.head_bwd_ms(r, m)),
                        copy1: dur(costs.host_copy_ms(r, out)),
                        copy2: dur(costs.host_copy_ms(r, 2.0 * out)),
                        act: if act.is_finite() {
                            act.round() as i64
                        } else {
                            0
                        },
                    };
                    cache.push((m, mc));
                    mc
                }
            };
            micro.push(mc);
        }
        st.push(RankState {
            micro,
            ..RankState::default()
        });
    }

    let per_rank_ops: usize = st.iter().map(|s| s.micro.len() * 4 * np + 1).sum();
    let mut g = Graph::with_capacity(per_rank_ops + 3 * np, per_rank_ops + 2 * np * ranks);
    let lb = Labels {
        fwd: g.label(Category::Forward, "fwd"),
        embed_fwd: g.label(Category::Forward, "embed_fwd"),
        head_fwd: g.label(Category::Forward, "head_fwd"),
        bwd: g.label(Category::Backward, "bwd"),
        embed_bwd: g.label(Category::Backward, "embed_bwd"),
        head_bwd: g.label(Category::Backward, "head_bwd"),
        recompute: g.label(Category::Recompute, "recompute"),
        optimizer: g.label(Category::Optimizer, "optimizer"),
        ag: g.label(Category::AllGather, "all_gather"),
        rs: g.label(Category::ReduceScatter, "reduce_scatter"),
        d2h: g.label(Category::CopyD2H, "d2h"),
        h2d: g.label(Category::CopyH2D, "h2d"),
    };

    // Collectives: one op joined by every rank now (all ranks join in the
    // same global order, so they can never deadlock).
    let make_ag = |g: &mut Graph, p: usize, deps: &[OpId], st: &[RankState]| -> OpId {
        let u = phases[p].unit(layers);
        let mut l = lb.ag;
        l.unit = u;
        let op = g.new_collective(ag_d[class(u)], deps, l);
        for r in 0..ranks as u32 {
            g.join(op, r, Stream::Comm);
        }
        for (r, s) in st.iter().enumerate() {
            g.add_mem(r as u32, MemAt::Start, param_bytes[u as usize]);
            if s.micro.is_empty() {
                g.add_mem(r as u32, MemAt::End, -param_bytes[u as usize]);
            }
        }
        op
    };
    let make_rs = |g: &mut Graph, p: usize, deps: &[OpId], st: &[RankState]| -> OpId {
        let u = phases[p].unit(layers);
        let mut l = lb.rs;
        l.unit = u;
        let op = g.new_collective(rs_d[class(u)], deps, l);
        for r in 0..ranks as u32 {
            g.join(op, r, Stream::Comm);
        }
        for (r, s) in st.iter().enumerate() {
            if s.micro.is_empty() {
                g.add_mem(r as u32, MemAt::Start, grad_bytes[u as usize]);
            }
            g.add_mem(r as u32, MemAt::End, -grad_bytes[u as usize]);
        }
        op
    };

    // CPU ranks cannot overlap communication with compute (see the docs).
    let ahead = usize::from(opts.prefetch && costs.comm_overlaps_compute());
    let mut ag: Vec<Option<OpId>> = vec![None; np];
    for (p, a) in ag.iter_mut().enumerate().take(ahead + 1) {
        *a = Some(make_ag(&mut g, p, &[], &st));
    }
    let mut last_rs: Option<OpId> = None;
    let mut phase_ends: Vec<OpId> = Vec::with_capacity(ranks);
    let mut deps: Vec<OpId> = Vec::with_capacity(2);
    for p in 0..np {
        let phase = phases[p];
        let u = phase.unit(layers);
        let ui = u as usize;
        let ag_p = ag[p].expect("all-gather created before its phase");
        phase_ends.clear();
        for (r, s) in st.iter_mut().enumerate() {
            let n = s.micro.len();
            if n == 0 {
                continue;
            }
            let r32 = r as u32;
            let mut last = ag_p;
            match phase {
                Phase::Forward(_) => {
                    for k in 0..n {
                        let mc = s.micro[k];
                        let (d, l) = if u == 0 {
                            (mc.f_emb, lb.embed_fwd)
                        } else {
                            (mc.f_blk, lb.fwd)
                        };
                        let dp: &[OpId] = if k == 0 { &[ag_p] } else { &[] };
                        let op = g.add_op(r32, Stream::Compute, d, dp, at(l, u, k));
                        if mc.act != 0 {
                            g.add_mem(r32, MemAt::Start, mc.act);
                            g.add_mem(r32, MemAt::End, -mc.act);
                        }
                        if k == n - 1 {
                            g.add_mem(r32, MemAt::End, -param_bytes[ui]);
                        }
                        if n > 1 {
                            g.add_op(r32, Stream::Copy, mc.copy1, &[op], at(lb.d2h, u, k));
                        }
                        last = op;
                    }
                }
                Phase::Head | Phase::Backward(_) => {
                    // Host-to-device bytes of a backward step: head input
                    // (1x), block input + output gradient (2x), embedding
                    // output gradient (1x).
                    let h2d = |ph: Phase, mc: &Micro| match ph {
                        Phase::Backward(x) if x > 0 => mc.copy2,
                        _ => mc.copy1,
                    };
                    for k in 0..n {
                        let mc = s.micro[k];
                        let mut next_h2d = None;
                        if n > 1 {
                            if s.steps == 0 {
                                s.pending_h2d = Some(g.add_op(
                                    r32,
                                    Stream::Copy,
                                    h2d(phase, &mc),
                                    &[],
                                    at(lb.h2d, u, k),
                                ));
                            }
                            let next = if k + 1 < n {
                                Some((phase, k + 1))
                            } else if p + 1 < np {
                                Some((phases[p + 1], 0))
                            } else {
                                None
                            };
                            if let Some((ph, kk)) = next {
                                next_h2d = Some(g.add_op(
                                    r32,
                                    Stream::Copy,
                                    h2d(ph, &s.micro[kk]),
                                    s.prev_step_end.as_slice(),
                                    at(lb.h2d, ph.unit(layers), kk),
                                ));
                            }
                        }
                        deps.clear();
                        if k == 0 {
                            deps.push(ag_p);
                        }
                        deps.extend(s.pending_h2d);
                        let first_bwd = |g: &mut Graph| {
                            if k == 0 {
                                g.add_mem(r32, MemAt::Start, grad_bytes[ui]);
                            }
                        };
                        let end_op = match phase {
                            Phase::Head => {
                                g.add_op(
                                    r32,
                                    Stream::Compute,
                                    mc.f_head,
                                    &deps,
                                    at(lb.head_fwd, u, k),
                                );
                                if mc.act != 0 {
                                    g.add_mem(r32, MemAt::Start, mc.act);
                                }
                                let op = g.add_op(
                                    r32,
                                    Stream::Compute,
                                    mc.b_head,
                                    &[],
                                    at(lb.head_bwd, u, k),
                                );
                                first_bwd(&mut g);
                                op
                            }
                            Phase::Backward(0) => {
                                let op = g.add_op(
                                    r32,
                                    Stream::Compute,
                                    mc.b_emb,
                                    &deps,
                                    at(lb.embed_bwd, u, k),
                                );
                                if mc.act != 0 {
                                    g.add_mem(r32, MemAt::Start, mc.act);
                                }
                                first_bwd(&mut g);
                                op
                            }
                            _ => {
                                g.add_op(
                                    r32,
                                    Stream::Compute,
                                    mc.f_blk,
                                    &deps,
                                    at(lb.recompute, u, k),
                                );
                                if mc.act != 0 {
                                    g.add_mem(r32, MemAt::Start, mc.act);
                                }
                                let op =
                                    g.add_op(r32, Stream::Compute, mc.b_blk, &[], at(lb.bwd, u, k));
                                first_bwd(&mut g);
                                op
                            }
                        };
                        if mc.act != 0 {
                            g.add_mem(r32, MemAt::End, -mc.act);
                        }
                        if k == n - 1 {
                            g.add_mem(r32, MemAt::End, -param_bytes[ui]);
                        }
                        if n > 1 && phase != Phase::Backward(0) {
                            g.add_op(r32, Stream::Copy, mc.copy1, &[end_op], at(lb.d2h, u, k));
                        }
                        s.prev_step_end = Some(end_op);
                        s.pending_h2d = next_h2d;
                        s.steps += 1;
                        last = end_op;
                    }
                }
            }
            phase_ends.push(last);
        }
        // After the compute of phase p: its reduce-scatter (FSDP's
        // post-backward hook fires first), then the prefetch all-gather.
        if phase.reduces() {
            last_rs = Some(make_rs(&mut g, p, &phase_ends, &st));
        }
        let next = p + 1 + ahead;
        if next < np {
            ag[next] = Some(make_ag(&mut g, next, &phase_ends, &st));
        }
    }
    for (r, &f) in fr.iter().enumerate() {
        let d = dur(costs.optimizer_ms(r, f * total_params));
        g.add_op(
            r as u32,
            Stream::Compute,
            d,
            last_rs.as_slice(),
            lb.optimizer,
        );
    }

    let base_mem_bytes: Vec<i64> = fr
        .iter()
        .map(|&f| ((costs.state_gib(f) + costs.options.overhead_gib) * GIB).round() as i64)
        .collect();
    let ms = |t: SimTime| t.as_ms();
    Ok(IterationGraph {
        graph: g,
        base_mem_bytes,
        phases,
        buffers_ref_bytes: buffers_ref,
        collectives: CollectiveTimes {
            ag_embedding_ms: ms(ag_d[0]),
            ag_block_ms: ms(ag_d[1]),
            ag_head_ms: ms(ag_d[2]),
            rs_embedding_ms: ms(rs_d[0]),
            rs_block_ms: ms(rs_d[1]),
            rs_head_ms: ms(rs_d[2]),
        },
    })
}

/// Fans engine calls out to the report's observers and an extra one.
struct Fan<'a, 'g> {
    breakdown: Breakdown<'g>,
    memory: MemoryTracker,
    trace: Option<TraceRecorder>,
    extra: &'a mut dyn Observer,
}

impl Observer for Fan<'_, '_> {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        self.breakdown.on_op(rec);
        if let Some(t) = &mut self.trace {
            t.on_op(rec);
        }
        self.extra.on_op(rec);
    }

    fn on_mem(&mut self, rank: u32, time: SimTime, delta_bytes: i64, op: OpId) {
        self.memory.on_mem(rank, time, delta_bytes, op);
        if let Some(t) = &mut self.trace {
            t.on_mem(rank, time, delta_bytes, op);
        }
        self.extra.on_mem(rank, time, delta_bytes, op);
    }
}

/// Simulates one iteration of `plan` on the workload of `costs`.
///
/// Validates the plan first (origin `plan`): rank count, batch sum,
/// micro-batch consistency, state fractions. An out-of-memory plan is an
/// `Ok` report with `oom: true`.
pub fn simulate(costs: &CostModel, plan: &Plan, opts: &SimOptions) -> Result<Report, PlanError> {
    simulate_observed(costs, plan, opts, &mut NullObserver)
}

/// [`simulate`], also pushing every engine call to `extra` (tests use an
/// [`crate::engine::Recorder`] to check invariants on the raw timeline).
pub fn simulate_observed(
    costs: &CostModel,
    plan: &Plan,
    opts: &SimOptions,
    extra: &mut dyn Observer,
) -> Result<Report, PlanError> {
    let ig = build_graph(costs, plan, opts)?;
    let ranks = costs.ranks();
    let names: Vec<String> = (0..ranks)
        .map(|r| format!("rank {r}: {}", costs.gpu(r).name))
        .collect();
    let mut fan = Fan {
        breakdown: Breakdown::new(&ig.graph, ranks),
        memory: MemoryTracker::new(ig.base_mem_bytes.clone()),
        trace: opts
            .trace
            .then(|| TraceRecorder::new(names, ig.base_mem_bytes.clone())),
        extra,
    };
    let stats = run(&ig.graph, &mut fan)?;
    let makespan = stats.makespan.0;
    fan.breakdown.finish(makespan);

    let w = &costs.workload;
    let dtype = w.dtype;
    let iteration_ms = makespan as f64 / 1e6;
    let secs = iteration_ms / 1e3;
    let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    let samples_per_s = per_s(w.global_batch as f64);
    let tokens_per_s = samples_per_s * w.model.tokens_per_sample(w.seq_len) as f64;
    let model_flops = costs.iteration_model_flops();
    let tflops = per_s(model_flops) / 1e12;
    let peak_tflops: f64 = (0..ranks)
        .map(|r| {
            let g = costs.gpu(r);
            g.peak_tflops(dtype).unwrap_or(g.fp32_tflops)
        })
        .sum();
    let mfu = if peak_tflops > 0.0 {
        tflops / peak_tflops
    } else {
        0.0
    };

    let ns_ms = |ns: u64| ns as f64 / 1e6;
    let memory_source = costs.act.source().to_string();
    let mut gpus = Vec::with_capacity(ranks);
    let mut oom_gpus = Vec::new();
    for r in 0..ranks {
        let t = &fan.breakdown.ranks[r];
        let rp = &plan.gpus[r];
        let ty = costs.gpu_type(r);
        let peak_gib = fan.memory.peak_bytes(r) as f64 / GIB;
        let capacity_gib = costs.capacity_gib(r);
        let usable_gib = costs.usable_gib(r);
        let oom = peak_gib > usable_gib;
        if oom {
            oom_gpus.push(OomGpu {
                rank: r,
                gpu: ty.gpu.name.clone(),
                peak_mem_gib: peak_gib,
                usable_gib,
                capacity_gib,
            });
        }
        gpus.push(GpuReport {
            rank: r,
            gpu: ty.gpu.name.clone(),
            node: w.cluster.gpus[r].node,
            batch: rp.batch,
            microbatches: rp.microbatches,
            microbatch_size: rp.microbatch_size,
            state_fraction: rp.state_fraction,
            compute_ms: ns_ms(t.compute),
            exposed_comm_ms: ns_ms(t.exposed_comm),
            copy_ms: ns_ms(t.copy),
            idle_ms: ns_ms(t.idle),
            forward_ms: ns_ms(t.by_kind[0]),
            recompute_ms: ns_ms(t.by_kind[1]),
            backward_ms: ns_ms(t.by_kind[2]),
            optimizer_ms: ns_ms(t.by_kind[3]),
            comm_busy_ms: ns_ms(t.comm_busy),
            copy_busy_ms: ns_ms(t.copy_busy),
            finish_ms: ns_ms(t.finish),
            peak_mem_gib: peak_gib,
            peak_at_ms: fan.memory.peak_time(r).as_ms(),
            base_mem_gib: ig.base_mem_bytes[r] as f64 / GIB,
            capacity_gib,
            usable_gib,
            mem_pct: if capacity_gib > 0.0 { 100.0 * peak_gib / capacity_gib } else { 0.0 },
            usable_pct: if usable_gib > 0.0 { 100.0 * peak_gib / usable_gib } else { 0.0 },
            oom,
            compute_source: ty.block.source.to_string(),
            memory_source: memory_source.clone(),
            unit_source: match &ty.units {
                Some(u) => u.source.to_string(),
                None => format!(
                    "estimated (roofline: embedding/head at {:.0}% of peak FLOPS, optimizer {} B/param at {:.0}% of HBM bandwidth)",
                    UNIT_COMPUTE_EFFICIENCY * 100.0,
                    OPTIMIZER_BYTES_PER_PARAM,
                    UNIT_BANDWIDTH_EFFICIENCY * 100.0
                ),
            },
        });
    }
    let trace = fan.trace.take().map(TraceRecorder::finish);
    Ok(Report {
        planner: plan.planner.clone(),
        model: w.model.name.clone(),
        cluster: w.cluster.name.clone(),
        dtype: dtype.to_string(),
        seq_len: w.seq_len,
        global_batch: w.global_batch,
        oom: !oom_gpus.is_empty(),
        iteration_ms,
        samples_per_s,
        tokens_per_s,
        tflops,
        mfu,
        peak_tflops,
        price_per_hour_usd: w.cluster.gpus.iter().map(|g| g.price_per_hour_usd).sum(),
        model_tflop: model_flops / 1e12,
        mem_fraction: costs.options.mem_fraction,
        overhead_gib: costs.options.overhead_gib,
        buffers_ref_gib: ig.buffers_ref_bytes as f64 / GIB,
        oom_gpus,
        collectives: ig.collectives,
        comm_model: costs.comm.describe(),
        gpus,
        warnings: costs.warnings.clone(),
        ops: stats.ops,
        events: stats.events,
        trace,
    })
}
