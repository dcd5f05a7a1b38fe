//! Lowers a pipeline plan to ops for any [`Sink`] (the engine graph, the
//! fast model's timeline), in an order that respects every dependency and
//! every stream's issue order ([`super::schedule::topological`]).
//!
//! Per GPU of stage `s` and micro-batch `k` (its slice of `n` samples):
//!
//! * **Forward**: embedding (first stage), then per block a forward op
//!   (the layer's index in its label), then the head's forward (last
//!   stage). The first op waits for every transfer that brings its input.
//! * **Sends**: after its last forward, one point-to-point transfer per
//!   GPU of the next stage whose slice overlaps this one (activations of
//!   the overlap, `s·h·bytes` per sample, REAL-SYSTEMS.md 6.2), on the
//!   sender's communication stream, over the links between the two GPUs
//!   (shared with every other transfer, as collectives share them); after
//!   its last backward, the same for the input gradient to the previous
//!   stage. The receiver's first op of that micro-batch waits for it: no
//!   stage computes before its input arrived.
//! * **Backward**: the head's backward (last stage), then per block in
//!   reverse its recompute (if the block's checkpointing policy asks) and
//!   its backward, then the embedding's backward (first stage).
//! * **After the last backward**: the stage's data-parallel group reduces
//!   its gradients (`none`: one all-reduce; `grad-op`: reduce-scatter,
//!   the optimizer on the shard, all-gather of the updated parameters) on
//!   the reduce stream, and every GPU steps its optimizer.
//!
//! Memory (anchored activation sizes of the slice, as the data-parallel
//! schedules use, [`crate::cost::ActivationModel`]): a block's input `c`
//! is held from when it is produced (embedding, previous block, arriving
//! transfer) until the block's backward ends; the forward adds what the
//! checkpointing policy keeps beyond the input (and, for a checkpointed
//! block, the no-grad working set while it runs); the recompute regenerates
//! the rest before the backward, which allocates its working gradients and
//! the input gradient and frees the block's activations and the output
//! gradient it consumed. Sends free the sender's copy when they end and
//! allocate the receiver's. Constant memory: framework overhead, the
//! fixed workspace, the stage's state (see [`base_device_bytes`]).

use super::schedule::{topological, Action};
use crate::comm::CollectiveKind;
use crate::cost::{collective_ranks, CostModel};
use crate::engine::{Category, Graph, MemChange, OpId, OpLabel, Stream, NO_INDEX};
use crate::error::PlanError;
use crate::plan::pipeline::Pipeline;
use crate::plan::Plan;
use crate::schedule::lower::{at, CollectiveRecord, Group, Lowered, LoweredParts, Sink};
use crate::schedule::{dur, micro_costs, round, Micro};
use crate::strategy::{Recompute, Sharding};
use crate::symmetry::NodeClasses;
use std::collections::HashMap;

/// Constant GPU memory of a GPU holding stage `s` of `pipe` under the
/// plan's strategy, bytes: framework overhead and fixed workspace, then
/// per parameter of the stage: `none` the full mixed-precision Adam
/// state (16 B) and a gradient buffer in `reduce_dtype` (DeepSpeed's
/// all-reduce buckets, as DDP's); `grad-op` (ZeRO-1) the 16 B state over
/// the group's `d` GPUs, plus the full parameters in `param_dtype` that
/// compute reads and the full gradient in `reduce_dtype` it accumulates.
pub fn base_device_bytes(costs: &CostModel, plan: &Plan, pipe: &Pipeline, s: usize) -> i64 {
    let params = pipe.stage_params(s, &costs.workload.model) as f64;
    round(super::state_bytes(
        costs,
        &plan.strategy,
        params,
        pipe.stages[s].gpus.len(),
    ))
}

/// Ops per (GPU, micro-batch) of a stage holding `blocks` blocks at most
/// (forward, recompute and backward per block, embedding / head, sends),
/// for the size check.
pub fn ops_estimate(pipe: &Pipeline) -> u64 {
    let per: u64 = pipe
        .stages
        .iter()
        .map(|s| s.gpus.len() as u64 * (3 * s.blocks as u64 + 8))
        .sum();
    per.saturating_mul(pipe.microbatches as u64)
}

/// Labels of the ops, interned once.
struct Labels {
    fwd: OpLabel,
    bwd: OpLabel,
    recompute: OpLabel,
    embed_fwd: OpLabel,
    embed_bwd: OpLabel,
    head_fwd: OpLabel,
    head_bwd: OpLabel,
    send_act: OpLabel,
    send_grad: OpLabel,
    optimizer: OpLabel,
    all_reduce: OpLabel,
    reduce_scatter: OpLabel,
    all_gather: OpLabel,
}

/// Builds the engine graph of one iteration of a pipeline plan.
pub fn lower(
    costs: &CostModel,
    plan: &Plan,
    pipe: &Pipeline,
    contention: bool,
) -> Result<Lowered, PlanError> {
    let ops = ops_estimate(pipe).min(crate::limits::MAX_SIM_OPS) as usize;
    let mut g = Graph::with_capacity(ops, 2 * ops);
    let parts = lower_into(costs, plan, pipe, contention, &mut g)?;
    let c = &costs.workload.cluster;
    Ok(Lowered {
        graph: g,
        base_device_bytes: parts.base_device_bytes,
        base_host_bytes: parts.base_host_bytes,
        collectives: parts.collectives,
        classes: NodeClasses::identity(c.len(), c.nodes.len()),
    })
}

/// Emits the ops of one iteration of `plan` (whose pipeline is `pipe`)
/// into `g`; with `contention`, transfers and collectives declare the
/// links they keep busy.
pub fn lower_into<S: Sink>(
    costs: &CostModel,
    plan: &Plan,
    pipe: &Pipeline,
    contention: bool,
    g: &mut S,
) -> Result<LoweredParts, PlanError> {
    let w = &costs.workload;
    let strategy = plan.strategy;
    let attention = strategy.attention;
    let ranks = costs.ranks();
    let p = pipe.depth();
    let m = pipe.microbatches;
    let sizes = pipe.micro_sizes(w.global_batch);
    let order = topological(pipe.schedule, p, m).ok_or_else(|| {
        PlanError::invalid(
            "plan",
            "pipeline.schedule",
            "internal: the stages' orders deadlock",
        )
    })?;
    let lb = Labels {
        fwd: g.label(Category::Forward, "fwd"),
        bwd: g.label(Category::Backward, "bwd"),
        recompute: g.label(Category::Recompute, "recompute"),
        embed_fwd: g.label(Category::Forward, "embed_fwd"),
        embed_bwd: g.label(Category::Backward, "embed_bwd"),
        head_fwd: g.label(Category::Forward, "head_fwd"),
        head_bwd: g.label(Category::Backward, "head_bwd"),
        send_act: g.label(Category::P2p, "send_activation"),
        send_grad: g.label(Category::P2p, "send_gradient"),
        optimizer: g.label(Category::Optimizer, "optimizer"),
        all_reduce: g.label(Category::AllReduce, "stage_all_reduce"),
        reduce_scatter: g.label(Category::ReduceScatter, "stage_reduce_scatter"),
        all_gather: g.label(Category::AllGather, "stage_all_gather"),
    };
    // Costs per (rank, slice size), computed once.
    let mut micro: HashMap<(usize, u32), Micro> = HashMap::new();
    let mut cost_of = |r: usize, n: u32| -> Result<Micro, PlanError> {
        if let Some(x) = micro.get(&(r, n)) {
            return Ok(*x);
        }
        let x = micro_costs(costs, r, n, attention)?;
        micro.insert((r, n), x);
        Ok(x)
    };
    // Per (stage, position, micro-batch): transfers that bring its input
    // (forward) or its output gradient (backward), and their bytes.
    let slot = |s: usize, j: usize, k: u32| -> usize {
        let before: usize = pipe.stages[..s].iter().map(|x| x.gpus.len()).sum();
        (before + j) * m as usize + k as usize
    };
    let slots: usize = pipe.stages.iter().map(|x| x.gpus.len()).sum::<usize>() * m as usize;
    let mut act_in: Vec<Vec<OpId>> = vec![Vec::new(); slots];
    let mut grad_in: Vec<Vec<OpId>> = vec![Vec::new(); slots];
    let mut act_in_bytes = vec![0i64; slots];
    let mut grad_in_bytes = vec![0i64; slots];
    let mut last_compute: Vec<Option<OpId>> = vec![None; ranks];
    let ckpt = strategy.checkpointing;
    for (s, action) in order {
        let st = &pipe.stages[s];
        let d = st.gpus.len();
        let first = pipe.first_block(s);
        let last = first + st.blocks - 1;
        let (is_first, is_last) = (s == 0, s + 1 == p);
        for (j, &rank) in st.gpus.iter().enumerate() {
            let r = rank as usize;
            let k = match action {
                Action::Fwd(k) | Action::Bwd(k) => k,
            };
            let (lo, hi) = Pipeline::slice(sizes[k as usize], d, j);
            let n = hi - lo;
            let mc = cost_of(r, n)?;
            let a = mc.act;
            let c = round(a.checkpoint);
            let here = slot(s, j, k);
            let mut op = |g: &mut S, dur_ms, deps: &[OpId], label, mems: &[MemChange]| {
                let id = g.op(rank, Stream::Compute, dur_ms, deps, label, mems);
                last_compute[r] = Some(id);
                id
            };
            match action {
                Action::Fwd(k) => {
                    let mut deps = std::mem::take(&mut act_in[here]);
                    // The first stage's input is the embedding's output; a
                    // later stage's arrived with the transfers.
                    if is_first {
                        let id = op(
                            g,
                            mc.f_emb,
                            &deps,
                            at(lb.embed_fwd, 0, k),
                            &[MemChange::end(rank, c)],
                        );
                        deps = vec![id];
                    }
                    let mut prev = None;
                    for b in first..=last {
                        let pol = ckpt.block(b);
                        let wf = if pol == Recompute::Full {
                            round(a.nograd_work)
                        } else {
                            0
                        };
                        let extra = round((a.kept(pol) - a.checkpoint).max(0.0));
                        let ds: &[OpId] = match prev {
                            None => &deps,
                            Some(_) => &[],
                        };
                        let id = op(
                            g,
                            mc.f_blk,
                            ds,
                            at(lb.fwd, b, k),
                            &[
                                MemChange::start(rank, wf),
                                MemChange::end(rank, extra + c - wf),
                            ],
                        );
                        prev = Some(id);
                    }
                    let done = prev.expect("a stage has at least one block");
                    if is_last {
                        op(
                            g,
                            mc.f_head,
                            &[],
                            at(lb.head_fwd, w.model.layers + 1, k),
                            &[MemChange::start(rank, round(a.head_work))],
                        );
                    } else {
                        // Activations to the next stage's GPUs holding these samples.
                        for (h, to, ov, recv_n) in overlaps(pipe, s + 1, sizes[k as usize], lo, hi)
                        {
                            let ra = cost_of(to as usize, recv_n)?.act.checkpoint;
                            let mem = transfer_mem(a.checkpoint, n, ra, ov, recv_n);
                            let bytes = costs.block_output_bytes(ov);
                            let label = at(lb.send_act, last + 1, k);
                            let id =
                                send(g, costs, contention, (rank, to), bytes, done, label, mem);
                            let t = slot(s + 1, h, k);
                            act_in[t].push(id);
                            act_in_bytes[t] += mem.1;
                        }
                    }
                }
                Action::Bwd(k) => {
                    let deps = std::mem::take(&mut grad_in[here]);
                    // The output gradient this stage's last block consumes.
                    let mut out_grad = grad_in_bytes[here];
                    let mut prev: Option<OpId> = None;
                    if is_last {
                        // The head frees its working memory and its input's
                        // stand-in, and hands the last block its gradient.
                        let id = op(
                            g,
                            mc.b_head,
                            &deps,
                            at(lb.head_bwd, w.model.layers + 1, k),
                            &[MemChange::end(rank, -round(a.head_work))],
                        );
                        prev = Some(id);
                        out_grad = c;
                    }
                    for b in (first..=last).rev() {
                        let pol = ckpt.block(b);
                        let regen = round(a.regenerated(pol));
                        let extra = round((a.kept(pol) - a.checkpoint).max(0.0));
                        let input = if b == first && !is_first {
                            act_in_bytes[here]
                        } else {
                            c
                        };
                        let ds: Vec<OpId> = match prev {
                            None => deps.clone(),
                            Some(_) => vec![],
                        };
                        if pol != Recompute::None {
                            let t = match pol {
                                Recompute::Full => mc.re_full,
                                _ => mc.re_sel,
                            };
                            prev = Some(op(
                                g,
                                t,
                                &ds,
                                at(lb.recompute, b, k),
                                &[MemChange::start(rank, regen)],
                            ));
                        }
                        let ds: &[OpId] = if prev.is_none() { &ds } else { &[] };
                        let gw = round(a.grad_work);
                        let id = op(
                            g,
                            mc.b_blk,
                            ds,
                            at(lb.bwd, b, k),
                            &[
                                MemChange::start(rank, gw + c),
                                MemChange::end(rank, -(gw + regen + extra + input + out_grad)),
                            ],
                        );
                        prev = Some(id);
                        out_grad = c;
                    }
                    let done = prev.expect("a stage has at least one block");
                    if is_first {
                        op(
                            g,
                            mc.b_emb,
                            &[],
                            at(lb.embed_bwd, 0, k),
                            &[MemChange::end(rank, -c)],
                        );
                    } else {
                        // The input gradient to the previous stage's GPUs.
                        for (h, to, ov, recv_n) in overlaps(pipe, s - 1, sizes[k as usize], lo, hi)
                        {
                            let ra = cost_of(to as usize, recv_n)?.act.checkpoint;
                            let mem = transfer_mem(a.checkpoint, n, ra, ov, recv_n);
                            let bytes = costs.block_output_bytes(ov);
                            let label = at(lb.send_grad, first, k);
                            let id =
                                send(g, costs, contention, (rank, to), bytes, done, label, mem);
                            let t = slot(s - 1, h, k);
                            grad_in[t].push(id);
                            grad_in_bytes[t] += mem.1;
                        }
                    }
                }
            }
        }
    }
    // Gradient synchronisation inside each stage's group, then the optimizer.
    let mut collectives = Vec::new();
    for (s, st) in pipe.stages.iter().enumerate() {
        let params = pipe.stage_params(s, &w.model) as f64;
        let group: Vec<usize> = st.gpus.iter().map(|&r| r as usize).collect();
        let members: Vec<u32> = st.gpus.clone();
        let d = group.len();
        let after: Vec<OpId> = group.iter().filter_map(|&r| last_compute[r]).collect();
        let mut collective =
            |g: &mut S, kind: CollectiveKind, label: OpLabel, pieces: f64, deps: &[OpId]| {
                let pieces = vec![pieces; d];
                let ms = costs.group_collective_ms(kind, &group, &pieces);
                let t = dur(ms);
                let id = g.collective(&members, Stream::Reduce, t, deps, label, &[]);
                if contention {
                    g.shares(
                        id,
                        &costs.group_collective_shares(kind, &group, &pieces, ms),
                    );
                }
                collectives.push(CollectiveRecord {
                    op: id,
                    kind,
                    unit: s as u32,
                    group: Group::Shard(s),
                    count: 1,
                    buffer_bytes: kind.buffer_bytes(&collective_ranks(&w.cluster, &group, &pieces)),
                    dur: t,
                });
                id
            };
        let reduce_bytes = strategy.reduce_dtype.bytes() * params;
        match strategy.sharding {
            Sharding::NoShard => {
                let ar = (d > 1).then(|| {
                    collective(
                        g,
                        CollectiveKind::AllReduce,
                        lb.all_reduce,
                        reduce_bytes,
                        &after,
                    )
                });
                for &r in &group {
                    let deps: Vec<OpId> = ar.into_iter().collect();
                    let t = dur(costs.optimizer_ms(r, params));
                    g.op(
                        r as u32,
                        Stream::Compute,
                        t,
                        &deps,
                        at(lb.optimizer, NO_INDEX, NO_INDEX),
                        &[],
                    );
                }
            }
            _ => {
                let rs = (d > 1).then(|| {
                    collective(
                        g,
                        CollectiveKind::ReduceScatter,
                        lb.reduce_scatter,
                        reduce_bytes / d as f64,
                        &after,
                    )
                });
                let mut steps = Vec::with_capacity(d);
                for &r in &group {
                    let deps: Vec<OpId> = rs.into_iter().collect();
                    let t = dur(costs.optimizer_ms(r, params / d as f64));
                    steps.push(g.op(
                        r as u32,
                        Stream::Compute,
                        t,
                        &deps,
                        at(lb.optimizer, NO_INDEX, NO_INDEX),
                        &[],
                    ));
                }
                if d > 1 {
                    let bytes = strategy.param_dtype.bytes() * params / d as f64;
                    collective(g, CollectiveKind::AllGather, lb.all_gather, bytes, &steps);
                }
            }
        }
    }
    let positions = pipe.positions(ranks);
    let base_device_bytes = (0..ranks)
        .map(|r| match positions[r] {
            Some((s, _)) => base_device_bytes(costs, plan, pipe, s),
            None => 0,
        })
        .collect();
    Ok(LoweredParts {
        base_device_bytes,
        base_host_bytes: vec![0; w.cluster.nodes.len()],
        collectives,
    })
}

/// The GPUs of stage `t` that hold part of the samples `[lo, hi)` of a
/// micro-batch of `size` samples: (position, rank, samples in common, the
/// size of their slice).
fn overlaps(pipe: &Pipeline, t: usize, size: u32, lo: u32, hi: u32) -> Vec<(usize, u32, u32, u32)> {
    let st = &pipe.stages[t];
    let d = st.gpus.len();
    st.gpus
        .iter()
        .enumerate()
        .filter_map(|(h, &to)| {
            let (l2, h2) = Pipeline::slice(size, d, h);
            let ov = hi.min(h2).saturating_sub(lo.max(l2));
            (ov > 0).then_some((h, to, ov, h2 - l2))
        })
        .collect()
}

/// Memory a transfer of `ov` samples moves: the sender's share of its
/// `n`-sample buffer of `sent` bytes, the receiver's share of its
/// `recv_n`-sample buffer of `recv` bytes.
fn transfer_mem(sent: f64, n: u32, recv: f64, ov: u32, recv_n: u32) -> (i64, i64) {
    (
        round(sent * ov as f64 / n as f64),
        round(recv * ov as f64 / recv_n as f64),
    )
}

/// One point-to-point transfer of `bytes` from `ends.0` to `ends.1` after
/// `after`, freeing `mem.0` bytes on the sender and allocating `mem.1` on
/// the receiver when it ends.
#[allow(clippy::too_many_arguments)]
fn send<S: Sink>(
    g: &mut S,
    costs: &CostModel,
    contention: bool,
    ends: (u32, u32),
    bytes: f64,
    after: OpId,
    label: OpLabel,
    mem: (i64, i64),
) -> OpId {
    let (from, to) = ends;
    let (ms, shares) = costs.p2p(from as usize, to as usize, bytes);
    let id = g.op(
        from,
        Stream::Comm,
        dur(ms),
        &[after],
        label,
        &[MemChange::end(from, -mem.0), MemChange::end(to, mem.1)],
    );
    if contention && !shares.is_empty() {
        g.shares(id, &shares);
    }
    id
}
