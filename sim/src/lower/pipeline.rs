//! Lowers a pipeline plan to ops for any [`Sink`] (the engine graph, the
//! fast model's timeline), in an order that respects every dependency and
//! every stream's issue order ([`crate::pipeline::schedule::topological`]).
//!
//! Per GPU of stage `s` and micro-batch `k` (its slice of `n` samples):
//!
//! * **Forward**: embedding (first stage), then per block a forward op
//!   (the layer's index in its label), then the head's forward (last
//!   stage). The first op waits for every transfer that brings its input.
//! * **Sends**: after its last forward, one point-to-point transfer per
//!   GPU of the next stage whose slice overlaps this one (activations of
//!   the overlap, `s·h·bytes` per sample, as DeepSpeed's and Megatron's
//!   pipelines send them), on the
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
//! * **FSDP / HSDP**: with a pipeline, each unit gathered once at the
//!   step's start, reduce-scattered after the last backward. At one stage
//!   per unit ([`crate::pipeline::reshard`]): the stage's order walked one use of a
//!   unit at a time, each on every replica before the next (so a shard
//!   group's collectives follow all its members); a use waits for its
//!   all-gather (prefetched after the use two phases before, on the
//!   communication stream, allocating the gathered parameters), its op
//!   frees them when it reshards and holds the unsharded gradient (and the
//!   parameter-dtype one it casts) as the data-parallel steps do; a
//!   complete gradient is reduce-scattered (freed when it ends), under HSDP
//!   then all-reduced across the shard groups on the reduce stream; each
//!   GPU steps after its last reduction.
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

use super::collectives::Collectives;
use super::dp_group::{DpGroup, Gathering, Reduced, Reduction};
use super::sink::{at, Lowered, LoweredParts, Sink};
use crate::cost::CostModel;
use crate::data_parallel::{dur, round, Micro};
use crate::engine::{Category, Graph, MemChange, MemKind, OpId, OpLabel, Stream, NO_INDEX};
use crate::error::PlanError;
use crate::pipeline::buckets::{grad_sync, stage_buckets, Bucket};
use crate::pipeline::costs::{PipeCosts, TpTimes};
use crate::pipeline::reshard::{prefetch_after, Use};
use crate::pipeline::schedule::{topological, Action};
use crate::plan::pipeline::{overlaps, Pipeline};
use crate::plan::Plan;
use crate::precision::Precision;
use crate::strategy::Recompute;
use crate::symmetry::NodeClasses;
use crate::units::SimTime;

/// Constant GPU memory of a GPU holding stage `s` of `pipe` under the
/// plan's strategy, bytes: framework overhead and fixed workspace, then
/// per parameter of the stage: `none` the full mixed-precision Adam
/// state (16 B) and a gradient buffer in `reduce_dtype` (DeepSpeed's
/// all-reduce buckets, as DDP's); `grad-op` (ZeRO-1), and FSDP / HSDP with
/// a pipeline, the 16 B state over the group's `d` GPUs, plus the full
/// parameters in `param_dtype` that compute reads and the full gradient in
/// `reduce_dtype` it accumulates; FSDP / HSDP at one stage only the state
/// over `d` (its units come and go, [`crate::pipeline::reshard`]).
pub fn base_device_bytes(costs: &CostModel, plan: &Plan, pipe: &Pipeline, s: usize) -> i64 {
    let held = pipe.rank_held(s, &costs.workload.model, &plan.strategy);
    round(crate::pipeline::state_bytes(
        costs,
        &plan.strategy,
        held,
        pipe.reshards_after_forward(&plan.strategy),
    ))
}

/// Ops the lowering of `pipe` emits for the ranks `simulated` (every
/// other rank takes a twin's timeline and emits nothing,
/// [`NodeClasses::simulated`]; empty: every rank), at most: per simulated
/// GPU and micro-batch its compute (forward, recompute and backward per
/// block, the weight-gradient parts of split backwards, embedding / head)
/// and transfers; per simulated TP group its TP collectives; per shard
/// group with a simulated member its parameter gathers (once per step, or
/// per use and micro-batch with the reductions at one stage) and the
/// gradient synchronisation; per simulated GPU its optimizer step. What
/// the simulator's size limit counts ([`crate::iteration::check_pipeline`]).
pub fn ops_estimate(
    pipe: &Pipeline,
    strategy: &crate::strategy::Strategy,
    simulated: &[bool],
) -> u64 {
    let on = |r: u32| simulated.get(r as usize).copied().unwrap_or(true);
    let m = pipe.microbatches as u64;
    let per_block = if pipe.schedule.splits_backward() {
        4
    } else {
        3
    };
    let per_unit = pipe.reshards_after_forward(strategy);
    let mut ops = 0u64;
    for st in &pipe.stages {
        let (t, d) = (st.tp.max(1) as usize, st.dp());
        let blocks = st.blocks as u64;
        let gpus = st.gpus.iter().filter(|&&r| on(r)).count() as u64;
        let replicas = (0..d)
            .filter(|&j| st.group(j).iter().any(|&r| on(r)))
            .count() as u64;
        let h = st.shard_width(strategy).max(1);
        let groups = (0..t)
            .flat_map(|i| {
                let g = st.dp_group(i);
                g.chunks(h)
                    .map(|c| c.iter().any(|&r| on(r as u32)))
                    .collect::<Vec<_>>()
            })
            .filter(|&x| x)
            .count() as u64;
        let tp_ops = if t > 1 {
            replicas * (3 * blocks + 6)
        } else {
            0
        };
        let units = blocks + 2;
        // HSDP: per TP rank an all-reduce per place in the shard group.
        let all_reduces = if strategy.sharding.reduces_across_groups() {
            (t * h) as u64
        } else {
            0
        };
        // Per GPU: its blocks' ops, per chunk its sends both ways (a
        // slice may meet two replicas of a neighbour), the embedding's or
        // the head's two.
        let per_micro = gpus * (per_block * blocks + 4 * pipe.chunks() as u64 + 2)
            + tp_ops
            // Per use a gather, per backward a reduction.
            + if per_unit { (3 * groups + all_reduces) * units } else { 0 };
        ops = ops
            .saturating_add(per_micro.saturating_mul(m))
            // Once per step: the gathers, the synchronisation, the optimizer.
            .saturating_add(groups * (units + 3) + all_reduces + gpus);
    }
    ops
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
    param_gather: OpLabel,
    tp_fwd: OpLabel,
    tp_bwd: OpLabel,
    ep_fwd: OpLabel,
    ep_bwd: OpLabel,
    wgrad: OpLabel,
    unit_gather: OpLabel,
    unit_reduce: OpLabel,
    unit_all_reduce: OpLabel,
}

impl Labels {
    /// Interns every label in `g`.
    fn intern<S: Sink>(g: &mut S) -> Labels {
        Labels {
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
            param_gather: g.label(Category::AllGather, "stage_param_gather"),
            tp_fwd: g.label(Category::AllReduce, "tp_forward"),
            tp_bwd: g.label(Category::AllReduce, "tp_backward"),
            ep_fwd: g.label(Category::AllToAll, "ep_dispatch_combine"),
            ep_bwd: g.label(Category::AllToAll, "ep_dispatch_combine_backward"),
            wgrad: g.label(Category::Backward, "bwd_weight"),
            unit_gather: g.label(Category::AllGather, "all_gather"),
            unit_reduce: g.label(Category::ReduceScatter, "reduce_scatter"),
            unit_all_reduce: g.label(Category::AllReduce, "all_reduce_replicas"),
        }
    }
}

impl Labels {
    /// The labels of a whole-stage or bucket reduction of `grp` (its
    /// all-reduce or reduce-scatter, HSDP's all-reduce), with a bucket's
    /// unit and micro-batch when `at_unit` gives them.
    fn stage(&self, grp: &DpGroup<'_>, at_unit: Option<(u32, u32)>) -> (OpLabel, OpLabel) {
        let l = |l: OpLabel| at_unit.map_or(l, |(u, k)| at(l, u, k));
        let first = if grp.sharding.keeps_full_grads() {
            self.all_reduce
        } else {
            self.reduce_scatter
        };
        (l(first), l(self.all_reduce))
    }
}

/// A stage's (or a bucket's) gradient reduction over `grp`, `op` = (the
/// stage its record carries, gradient bytes per GPU), after `after` of its
/// GPUs, on the reduce stream ([`DpGroup::reduce`]; nothing for a group of
/// one GPU).
fn stage_reduce<S: Sink>(
    c: &mut Collectives<'_>,
    g: &mut S,
    grp: &DpGroup<'_>,
    op: (usize, f64),
    after: &dyn Fn(&[usize]) -> Vec<OpId>,
    labels: (OpLabel, OpLabel),
) -> Reduced {
    let (s, bytes) = op;
    let (n, h) = (grp.ranks.len(), grp.shard_width.max(1));
    let pieces = |k: usize| {
        let m = h.min(n - k * h);
        (bytes, vec![bytes / m as f64; m])
    };
    let replica_bytes = |_| bytes / h as f64;
    grp.reduce(
        c,
        g,
        Reduction {
            unit: s as u32,
            buckets: &[bytes],
            pieces: &pieces,
            replica_bytes: &replica_bytes,
            deps: after,
            mems: &mut |_| Vec::new(),
            stream: Stream::Reduce,
            labels,
        },
    )
}

/// An all-gather of `op` = (the stage its record carries, parameter bytes
/// per GPU) over `grp`, one shard group, after `deps`, on the reduce
/// stream.
fn stage_gather<S: Sink>(
    c: &mut Collectives<'_>,
    g: &mut S,
    grp: &DpGroup<'_>,
    op: (usize, f64),
    deps: &[OpId],
    label: OpLabel,
) -> OpId {
    let (s, bytes) = op;
    let n = grp.ranks.len();
    let pieces = |_| (bytes, vec![bytes / n as f64; n]);
    let a = Gathering {
        unit: s as u32,
        pieces: &pieces,
        deps: &|_| deps.to_vec(),
        mems: &|_| Vec::new(),
        stream: Stream::Reduce,
        label,
    };
    let grp = DpGroup {
        shard_width: n,
        ..*grp
    };
    grp.gather(c, g, &a)[0].expect("an emitted member")
}

/// Builds the engine graph of one iteration of a pipeline plan.
pub fn lower(
    costs: &CostModel,
    plan: &Plan,
    pipe: &Pipeline,
    contention: bool,
    classes: &NodeClasses,
) -> Result<Lowered, PlanError> {
    let ops = ops_estimate(pipe, &plan.strategy, &classes.simulated).min(crate::limits::MAX_SIM_OPS)
        as usize;
    let mut g = Graph::with_capacity(ops, 2 * ops);
    let parts = lower_into(costs, plan, pipe, contention, classes, &mut g)?;
    Ok(Lowered {
        graph: g,
        base_device_bytes: parts.base_device_bytes,
        base_host_bytes: parts.base_host_bytes,
        collectives: parts.collectives,
        classes: classes.clone(),
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
    classes: &NodeClasses,
    g: &mut S,
) -> Result<LoweredParts, PlanError> {
    let (p, m) = (pipe.depth(), pipe.microbatches);
    let order = topological(pipe.schedule, p, m, pipe.chunks()).ok_or_else(|| {
        PlanError::invalid(
            "plan",
            "pipeline.schedule",
            "internal: the stages' orders deadlock",
        )
    })?;
    let table = PipeCosts::new(costs, plan, pipe)?;
    let mut walk = Walk::new(costs, plan, pipe, table, contention, classes, g);
    if pipe.reshards_after_forward(&plan.strategy) {
        // FSDP / HSDP at one stage: unit by unit, every replica at once.
        walk.per_unit_walk(&order);
        walk.sync_and_step(0);
        return Ok(walk.finish());
    }
    walk.plan_buckets();
    if plan.strategy.sharding.reshards_per_unit() {
        walk.gather_params();
    } else if plan.strategy.sharding.gathers_after_step() && pipe.overlap_param_gather {
        walk.gather_buckets();
    }
    // Every virtual stage's forwards and backwards, each on every replica
    // of its physical stage; a bucket's reduction once every replica has
    // completed its gradients.
    for (x, action) in order {
        for j in 0..pipe.stages[x % p].dp() {
            // Replicas of a merged node take their representative's timeline.
            if !walk.simulated[pipe.stages[x % p].group(j)[0] as usize] {
                continue;
            }
            walk.run_pass(x, j, action);
        }
        walk.reduce_ready(x, action);
    }
    // Gradient synchronisation inside each stage's group, then the optimizer.
    for s in 0..p {
        walk.sync_and_step(s);
    }
    Ok(walk.finish())
}

/// Which way a transfer between neighbouring stages goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// A slice's activations, to the next stage.
    Activations,
    /// A slice's input gradient, to the previous stage.
    Gradients,
}

/// Per slot (stage, position, micro-batch): the transfers that bring its
/// input (forward) or its output gradient (backward), and their bytes.
struct Inbox {
    ops: Vec<Vec<OpId>>,
    bytes: Vec<i64>,
}

impl Inbox {
    fn new(slots: usize) -> Inbox {
        Inbox {
            ops: vec![Vec::new(); slots],
            bytes: vec![0; slots],
        }
    }
}

/// One replica's slice of one micro-batch: where it sits, its TP group and
/// their rows of the cost table.
struct Slice {
    /// Its virtual stage (its stage when `v = 1`).
    x: usize,
    /// Its physical stage.
    s: usize,
    /// Its micro-batch.
    k: u32,
    /// The GPUs computing it (its TP group, in TP-rank order).
    ranks: Vec<u32>,
    /// Its samples `[lo, hi)` of the micro-batch.
    lo: u32,
    hi: u32,
    /// Per TP rank its slot (see [`Inbox`]).
    here: Vec<usize>,
    /// Per TP rank its row of the cost table.
    mc: Vec<Micro>,
    /// Its TP group's exposed communication.
    tp: TpTimes,
}

/// One replica's pass (a forward, backward or weight-gradient part of a
/// micro-batch) through a virtual stage, in progress: its slice, what its
/// next op waits for per TP rank, and per TP rank the output gradient its
/// next block consumes and the input that arrived (a backward frees them).
struct Pass {
    /// Its virtual stage.
    v: usize,
    /// Forward, backward or weight-gradient part, and its micro-batch.
    action: Action,
    x: Slice,
    deps: Vec<Vec<OpId>>,
    out_grad: Vec<i64>,
    inputs: Vec<i64>,
}

/// A lowering in progress: what it reads (the plan, its cost table, the
/// labels), what the ops emitted so far leave for later ones (transfers
/// per slot, each GPU's last compute op, the collectives), and the sink.
struct Walk<'a, S: Sink> {
    costs: &'a CostModel,
    plan: &'a Plan,
    /// The element formats of the plan's strategy on the workload
    /// ([`crate::strategy::Strategy::precision`]).
    precision: Precision,
    pipe: &'a Pipeline,
    table: PipeCosts<'a>,
    lb: Labels,
    contention: bool,
    /// Samples of each micro-batch.
    sizes: Vec<u32>,
    /// Per virtual stage: the GPUs of the virtual stages before it (slot
    /// numbering).
    gpus_before: Vec<usize>,
    /// Physical stages `p`.
    p: usize,
    /// Share of a block's backward in its weight-gradient part (split off
    /// by zero-bubble schedules, else 0).
    w_share: f64,
    act_in: Inbox,
    grad_in: Inbox,
    last_compute: Vec<Option<OpId>>,
    /// FSDP / HSDP inside the stages: per unit (0 the embedding, blocks 1
    /// to `L`, `L + 1` the head), by rank (sorted), the gather of its
    /// parameters micro-batch 0's forward waits for (empty otherwise).
    gathers: Vec<Vec<(u32, OpId)>>,
    /// The collectives: priced, sharing links, recorded.
    c: Collectives<'a>,
    /// Per rank: simulated event by event ([`NodeClasses::simulated`]).
    simulated: Vec<bool>,
    /// FSDP / HSDP per unit at one stage (`None` otherwise).
    per_unit: Option<PerUnit>,
    /// Per rank: memory changes the next forward or backward op it runs
    /// carries (a unit's buffers; empty unless per unit).
    extra: Vec<Vec<MemChange>>,
    /// Per physical stage, its gradient buckets reduced during the last
    /// micro-batch's backward ([`crate::pipeline::buckets`]; empty: one reduction
    /// after its last backward), and per bucket whether it was reduced.
    buckets: Vec<Vec<Bucket>>,
    reduced: Vec<Vec<bool>>,
    /// Per (rank, unit), the op that completed the unit's gradient in the
    /// last micro-batch (stages with buckets only).
    grad_ops: rustc_hash::FxHashMap<(u32, u32), OpId>,
    /// Per unit: its last micro-batch's gradient is complete.
    grad_done: Vec<bool>,
    /// Per rank, its latest bucket reduction (what its optimizer waits for).
    last_reduce: Vec<Option<OpId>>,
    /// Point-to-point transfers priced so far, by (from, to, bytes' bits):
    /// every micro-batch sends the same slices between the same GPUs, so
    /// each pair and size is priced once ([`CostModel::p2p`] is a pure
    /// function of them; pricing it per transfer was about a twentieth of
    /// a 4,096-GPU pipeline's simulation).
    p2p: rustc_hash::FxHashMap<(u32, u32, u64), Priced>,
    g: &'a mut S,
}

/// A transfer's duration (ms) and the link shares it declares.
type Priced = (f64, Vec<(u32, f32)>);

/// FSDP / HSDP per unit inside a one-stage plan, in progress
/// ([`crate::pipeline::reshard`]).
struct PerUnit {
    /// Every use of a unit, in order.
    uses: Vec<Use>,
    /// Per use, the use whose all-gather follows it ([`prefetch_after`]).
    after: Vec<Option<usize>>,
    /// The shard groups (per TP rank, its data-parallel group in groups of
    /// the shard width) with a simulated member.
    groups: Vec<Vec<usize>>,
    /// Per rank, its shard group's index in `groups` (`usize::MAX`: none).
    group_of: Vec<usize>,
    /// The all-gathers issued and not yet used: (use, per group its op).
    gathers: Vec<(usize, Vec<OpId>)>,
    /// Per rank, its latest reduction (what its optimizer step waits for).
    last_reduce: Vec<Option<OpId>>,
}

impl<'a, S: Sink> Walk<'a, S> {
    fn new(
        costs: &'a CostModel,
        plan: &'a Plan,
        pipe: &'a Pipeline,
        table: PipeCosts<'a>,
        contention: bool,
        classes: &NodeClasses,
        g: &'a mut S,
    ) -> Walk<'a, S> {
        let lb = Labels::intern(g);
        let p = pipe.depth();
        let gpus_before: Vec<usize> = (0..=pipe.virtual_depth())
            .map(|x| (0..x).map(|y| pipe.stages[y % p].gpus.len()).sum())
            .collect();
        let slots = gpus_before[pipe.virtual_depth()] * pipe.microbatches as usize;
        let w = &costs.workload;
        let w_share = if pipe.schedule.splits_backward() {
            crate::tensor::weight_grad_share(&w.model, w.seq_len)
        } else {
            0.0
        };
        Walk {
            costs,
            plan,
            precision: plan.strategy.precision(w.dtype),
            pipe,
            table,
            lb,
            contention,
            sizes: pipe.micro_sizes(costs.workload.global_batch),
            gpus_before,
            p,
            w_share,
            act_in: Inbox::new(slots),
            grad_in: Inbox::new(slots),
            last_compute: vec![None; costs.ranks()],
            gathers: Vec::new(),
            c: Collectives::new(costs, Some(&classes.simulated), contention),
            simulated: classes.simulated.clone(),
            per_unit: None,
            extra: Vec::new(),
            buckets: vec![Vec::new(); p],
            reduced: vec![Vec::new(); p],
            grad_ops: rustc_hash::FxHashMap::default(),
            grad_done: vec![false; w.model.layers as usize + 2],
            last_reduce: vec![None; costs.ranks()],
            p2p: rustc_hash::FxHashMap::default(),
            g,
        }
    }

    /// The slot of the GPU at index `pos` of virtual stage `x`'s list in
    /// micro-batch `k`.
    fn slot(&self, x: usize, pos: usize, k: u32) -> usize {
        (self.gpus_before[x] + pos) * self.pipe.microbatches as usize + k as usize
    }

    /// Replica `j` of virtual stage `x`'s slice of micro-batch `k`.
    fn slice(&self, x: usize, j: usize, k: u32) -> Slice {
        let s = x % self.p;
        let st = &self.pipe.stages[s];
        let tp = self.pipe.tensor(s);
        let t = tp.degree as usize;
        let ranks = st.group(j).to_vec();
        let (lo, hi) = self.table.slices(s, self.sizes[k as usize])[j];
        Slice {
            x,
            s,
            k,
            here: (0..t).map(|i| self.slot(x, j * t + i, k)).collect(),
            mc: ranks
                .iter()
                .map(|&r| *self.table.row(r as usize, hi - lo, &tp))
                .collect(),
            ranks,
            lo,
            hi,
            tp: self.table.tp(s, j, hi - lo),
        }
    }

    /// The first and last block of virtual stage `x`.
    fn blocks(&self, x: usize) -> (u32, u32) {
        let first = self.pipe.virtual_first_block(x);
        (first, first + self.pipe.virtual_blocks(x) - 1)
    }

    /// Whether virtual stage `x` is the last (it holds the head).
    fn is_last(&self, x: usize) -> bool {
        x + 1 == self.pipe.virtual_depth()
    }

    /// A compute op on `rank` (its last so far).
    fn compute(
        &mut self,
        rank: u32,
        t: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        // A unit's buffers ride on its forward or backward op, not on a
        // recompute.
        let extra = match self.extra.get_mut(rank as usize) {
            Some(e) if !e.is_empty() && label.category != Category::Recompute => std::mem::take(e),
            _ => Vec::new(),
        };
        let id = if extra.is_empty() {
            self.g.op(rank, Stream::Compute, t, deps, label, mems)
        } else {
            let all: Vec<MemChange> = mems.iter().copied().chain(extra).collect();
            self.g.op(rank, Stream::Compute, t, deps, label, &all)
        };
        self.last_compute[rank as usize] = Some(id);
        id
    }

    /// One step of a slice on its TP group: per TP rank `i` a compute op
    /// of `time(i)` after `deps[i]` (only when `first`) with `mems(i)`,
    /// then each of the group's exposed model-parallel communications
    /// `comms` (TP, then EP's exchanges) on the compute streams (a
    /// collective of the group each, absent when zero or for one GPU). Per
    /// rank the op the next step follows.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        x: &Slice,
        deps: &[Vec<OpId>],
        label: OpLabel,
        comms: &[(SimTime, OpLabel)],
        time: impl Fn(&Micro) -> SimTime,
        mems: impl Fn(u32, &Micro) -> [MemChange; 2],
    ) -> Vec<OpId> {
        let mut done: Vec<OpId> = Vec::with_capacity(x.ranks.len());
        for (i, &rank) in x.ranks.iter().enumerate() {
            let d: &[OpId] = deps.get(i).map_or(&[], |v| v.as_slice());
            let m = mems(rank, &x.mc[i]);
            done.push(self.compute(rank, time(&x.mc[i]), d, label, &m));
        }
        for &(comm, comm_label) in comms {
            if let Some(id) = super::model_parallel::exposed(self.g, &x.ranks, comm, comm_label) {
                for &r in &x.ranks {
                    self.last_compute[r as usize] = Some(id);
                }
                done.iter_mut().for_each(|d| *d = id);
            }
        }
        done
    }

    /// Replica `j`'s pass `action` through virtual stage `x` (its forward,
    /// backward or weight-gradient part of a micro-batch), unit by unit.
    fn run_pass(&mut self, x: usize, j: usize, action: Action) {
        let mut ps = self.open(x, j, action);
        let layers = self.costs.workload.model.layers;
        for u in crate::pipeline::reshard::units(self.pipe, layers, x, action) {
            self.unit(&mut ps, u);
            self.note_grad(&ps, u);
        }
        self.close(ps);
    }

    /// Replica `j`'s pass `action` through virtual stage `v`, begun: its
    /// slice, and what its first op waits for (the transfers that bring its
    /// input or its output gradient).
    fn open(&mut self, v: usize, j: usize, action: Action) -> Pass {
        let (Action::Fwd(k) | Action::Bwd(k) | Action::Wgt(k)) = action;
        let x = self.slice(v, j, k);
        let inbox = match action {
            Action::Fwd(_) => Some(&mut self.act_in),
            Action::Bwd(_) => Some(&mut self.grad_in),
            Action::Wgt(_) => None,
        };
        let deps: Vec<Vec<OpId>> = match inbox {
            None => vec![Vec::new(); x.ranks.len()],
            Some(inbox) => x
                .here
                .iter()
                .map(|&h| std::mem::take(&mut inbox.ops[h]))
                .collect(),
        };
        // The output gradient its last block consumes, and what arrived as
        // its input (a later stage's first block frees it).
        let out_grad = x.here.iter().map(|&h| self.grad_in.bytes[h]).collect();
        let inputs = x.here.iter().map(|&h| self.act_in.bytes[h]).collect();
        Pass {
            v,
            action,
            x,
            deps,
            out_grad,
            inputs,
        }
    }

    /// Unit `u`'s step of pass `ps`.
    fn unit(&mut self, ps: &mut Pass, u: u32) {
        match ps.action {
            Action::Fwd(_) => self.fwd_unit(ps, u),
            Action::Bwd(_) => self.bwd_unit(ps, u),
            Action::Wgt(_) => self.wgt_unit(ps, u),
        }
    }

    /// Pass `ps` ended: a forward that is not the last virtual stage's
    /// sends its activations on, a backward that is not the first's its
    /// input gradient back.
    fn close(&mut self, ps: Pass) {
        let x = &ps.x;
        let done: Vec<OpId> = x
            .ranks
            .iter()
            .map(|&r| self.last_compute[r as usize].expect("a stage has at least one block"))
            .collect();
        let (first, last) = self.blocks(ps.v);
        match ps.action {
            Action::Fwd(k) if !self.is_last(ps.v) => {
                // Activations to the next stage's GPUs holding these samples.
                let label = at(self.lb.send_act, last + 1, k);
                self.send(x, Flow::Activations, label, &done);
            }
            Action::Bwd(k) if ps.v > 0 => {
                // The input gradient to the previous stage's GPUs.
                let label = at(self.lb.send_grad, first, k);
                self.send(x, Flow::Gradients, label, &done);
            }
            _ => {}
        }
    }

    /// Unit `u` of a forward: the embedding, a block (its forward adds what
    /// its checkpointing policy keeps beyond its input, and a checkpointed
    /// block holds its no-grad working set while it runs) or the head; on
    /// every TP rank, then its TP communication.
    fn fwd_unit(&mut self, ps: &mut Pass, u: u32) {
        let x = &ps.x;
        let k = x.k;
        let t = x.ranks.len();
        let none = MemChange::end(0, 0);
        let head = self.costs.workload.model.layers + 1;
        self.gathered(&x.ranks, u as usize, k, &mut ps.deps);
        if u == 0 {
            let label = at(self.lb.embed_fwd, 0, k);
            let done = self.step(
                x,
                &ps.deps,
                label,
                &[(x.tp.embed_fwd, self.lb.tp_fwd)],
                |m| m.f_emb,
                |r, m| [MemChange::end(r, round(m.act.checkpoint)), none],
            );
            ps.deps = done.into_iter().map(|d| vec![d]).collect();
        } else if u == head {
            let label = at(self.lb.head_fwd, head, k);
            self.step(
                x,
                &ps.deps,
                label,
                &[(x.tp.head_fwd, self.lb.tp_fwd)],
                |m| m.f_head,
                |r, m| [MemChange::start(r, round(m.act.head_work)), none],
            );
            ps.deps = vec![Vec::new(); t];
        } else {
            let pol = self.plan.strategy.checkpointing.block(u);
            let mems = |r: u32, m: &Micro| {
                let a = m.act;
                let c = round(a.checkpoint);
                let wf = if pol == Recompute::Full {
                    round(a.nograd_work)
                } else {
                    0
                };
                let extra = round((a.kept(pol) - a.checkpoint).max(0.0));
                [MemChange::start(r, wf), MemChange::end(r, extra + c - wf)]
            };
            let label = at(self.lb.fwd, u, k);
            let comms = [
                (x.tp.block_fwd, self.lb.tp_fwd),
                (x.tp.ep_fwd, self.lb.ep_fwd),
            ];
            self.step(x, &ps.deps, label, &comms, |m| m.f_blk, mems);
            ps.deps = vec![Vec::new(); t];
        }
    }

    /// Unit `u` of a backward: the head (it frees its working memory and
    /// hands the last block its gradient), a block (its recompute if the
    /// policy asks, then its backward, which allocates its working
    /// gradients and the input gradient and frees the block's activations
    /// and the output gradient it consumed) or the embedding; on every TP
    /// rank, then its TP communication.
    fn bwd_unit(&mut self, ps: &mut Pass, u: u32) {
        let x = &ps.x;
        let k = x.k;
        let t = x.ranks.len();
        let none = MemChange::end(0, 0);
        let head = self.costs.workload.model.layers + 1;
        if u == head {
            let label = at(self.lb.head_bwd, head, k);
            self.step(
                x,
                &ps.deps,
                label,
                &[(x.tp.head_bwd, self.lb.tp_bwd)],
                |m| m.b_head,
                |r, m| [MemChange::end(r, -round(m.act.head_work)), none],
            );
            ps.deps = vec![Vec::new(); t];
            ps.out_grad = x.mc.iter().map(|m| round(m.act.checkpoint)).collect();
            return;
        }
        if u == 0 {
            let label = at(self.lb.embed_bwd, 0, k);
            self.step(
                x,
                &ps.deps,
                label,
                &[(x.tp.embed_bwd, self.lb.tp_bwd)],
                |m| m.b_emb,
                |r, m| [MemChange::end(r, -round(m.act.checkpoint)), none],
            );
            ps.deps = vec![Vec::new(); t];
            return;
        }
        let b = u;
        let pol = self.plan.strategy.checkpointing.block(b);
        if pol != Recompute::None {
            let label = at(self.lb.recompute, b, k);
            // (A full recompute reruns the forward's exchanges.)
            let comms = if pol == Recompute::Full {
                [
                    (x.tp.block_fwd, self.lb.tp_fwd),
                    (x.tp.ep_fwd, self.lb.ep_fwd),
                ]
            } else {
                [(SimTime::ZERO, self.lb.tp_fwd); 2]
            };
            let time = move |m: &Micro| match pol {
                Recompute::Full => m.re_full,
                _ => m.re_sel,
            };
            self.step(x, &ps.deps, label, &comms, time, |r, m| {
                [MemChange::start(r, round(m.act.regenerated(pol))), none]
            });
            ps.deps = vec![Vec::new(); t];
        }
        let (first, _) = self.blocks(ps.v);
        let is_first = ps.v == 0;
        let rank_of: Vec<u32> = x.ranks.clone();
        let grads = &ps.out_grad;
        let inputs = &ps.inputs;
        let split = self.w_share > 0.0;
        let mems = |r: u32, m: &Micro| {
            let i = rank_of.iter().position(|&q| q == r).unwrap_or(0);
            let a = m.act;
            let c = round(a.checkpoint);
            let arrived = (b == first && !is_first).then(|| inputs[i]);
            let (regen, extra, input) = block_held(&a, pol, arrived);
            let gw = round(a.grad_work);
            let held = if split {
                w_held(&a, extra + input + regen)
            } else {
                0
            };
            [
                MemChange::start(r, gw + c),
                MemChange::end(r, -(gw + regen + extra + input + grads[i] - held)),
            ]
        };
        let label = at(self.lb.bwd, b, k);
        let ws = self.w_share;
        let time = move |m: &Micro| dur(m.b_blk.as_ms() * (1.0 - ws));
        self.step(
            x,
            &ps.deps,
            label,
            &[
                (x.tp.block_bwd, self.lb.tp_bwd),
                (x.tp.ep_bwd, self.lb.ep_bwd),
            ],
            time,
            mems,
        );
        ps.deps = vec![Vec::new(); t];
        ps.out_grad = x.mc.iter().map(|m| round(m.act.checkpoint)).collect();
    }

    /// Block `b`'s weight-gradient part of a split backward (zero-bubble
    /// schedules): its share of the backward, freeing what the
    /// input-gradient part left for it ([`w_held`]).
    fn wgt_unit(&mut self, ps: &mut Pass, b: u32) {
        let x = &ps.x;
        let (first, _) = self.blocks(ps.v);
        let is_first = ps.v == 0;
        let pol = self.plan.strategy.checkpointing.block(b);
        let rank_of = x.ranks.clone();
        let inputs = &ps.inputs;
        let mems = |r: u32, m: &Micro| {
            let i = rank_of.iter().position(|&q| q == r).unwrap_or(0);
            let arrived = (b == first && !is_first).then(|| inputs[i]);
            let (regen, extra, input) = block_held(&m.act, pol, arrived);
            let a = m.act;
            [
                MemChange::end(r, -w_held(&a, extra + input + regen)),
                MemChange::end(r, 0),
            ]
        };
        let label = at(self.lb.wgrad, b, x.k);
        let ws = self.w_share;
        let time = move |m: &Micro| dur(m.b_blk.as_ms() * ws);
        self.step(x, &ps.deps, label, &[], time, mems);
    }

    /// After `done` (per TP rank), slice `x`'s transfers of `flow` to every
    /// GPU of the neighbouring stage that holds part of its samples (and,
    /// under TP, of its sequence: [`crate::pipeline::tp_links`]); the receiving slots
    /// wait for them.
    fn send(&mut self, x: &Slice, flow: Flow, label: OpLabel, done: &[OpId]) {
        let to_virtual = match flow {
            Flow::Activations => x.x + 1,
            Flow::Gradients => x.x - 1,
        };
        let to_stage = to_virtual % self.p;
        let n = x.hi - x.lo;
        let size = self.sizes[x.k as usize];
        let pipe = self.pipe;
        let (ft, tt) = (pipe.stages[x.s].tp.max(1), pipe.stages[to_stage].tp.max(1));
        let ttp = pipe.tensor(to_stage);
        let links = crate::pipeline::tp_links(ft, tt, pipe.sequence_parallel);
        let targets = overlaps(self.table.slices(to_stage, size), x.lo, x.hi);
        for (h, ov, recv_n) in targets {
            let group = pipe.stages[to_stage].group(h).to_vec();
            for l in &links {
                let to = group[l.to];
                let ra = self.table.row(to as usize, recv_n, &ttp).act.checkpoint;
                let sent = x.mc[l.from].act.checkpoint * l.send_share;
                let mem = transfer_mem(sent, n, ra * l.recv_share, ov, recv_n);
                let bytes = self.table.block_output_bytes(ov) * l.seq_share;
                let id = self.transfer((x.ranks[l.from], to), bytes, done[l.from], label, mem);
                let t = self.slot(to_virtual, h * tt as usize + l.to, x.k);
                let inbox = match flow {
                    Flow::Activations => &mut self.act_in,
                    Flow::Gradients => &mut self.grad_in,
                };
                inbox.ops[t].push(id);
                inbox.bytes[t] += mem.1;
            }
        }
    }

    /// One point-to-point transfer of `bytes` from `ends.0` to `ends.1`
    /// after `after`, freeing `mem.0` bytes on the sender and allocating
    /// `mem.1` on the receiver when it ends.
    fn transfer(
        &mut self,
        ends: (u32, u32),
        bytes: f64,
        after: OpId,
        label: OpLabel,
        mem: (i64, i64),
    ) -> OpId {
        let (from, to) = ends;
        let costs = self.costs;
        let (ms, shares) = self
            .p2p
            .entry((from, to, bytes.to_bits()))
            .or_insert_with(|| costs.p2p(from as usize, to as usize, bytes));
        let mems = [MemChange::end(from, -mem.0), MemChange::end(to, mem.1)];
        let id = self
            .g
            .op(from, Stream::Comm, dur(*ms), &[after], label, &mems);
        if self.contention && !shares.is_empty() {
            self.g.shares(id, shares);
        }
        id
    }

    /// Stage `s`'s gradient synchronisation after its GPUs' last compute,
    /// per TP rank over the replicas holding the same shard (`none`:
    /// all-reduce; `grad-op`: reduce-scatter, then the optimizer on the
    /// shard, then all-gather of the updated parameters), and every GPU's
    /// optimizer step; a stage with buckets reduced them during its last
    /// backward ([`Self::step_after_buckets`]).
    fn sync_and_step(&mut self, s: usize) {
        if let Some(pu) = &self.per_unit {
            // Reduced unit by unit: each GPU steps after its last reduction.
            let last = pu.last_reduce.clone();
            for r in self.pipe.stages[s].gpus.clone() {
                let r = r as usize;
                if !self.simulated[r] {
                    continue;
                }
                let deps: Vec<OpId> = last[r].into_iter().collect();
                let time = self.table.optimizer[r];
                let label = at(self.lb.optimizer, NO_INDEX, NO_INDEX);
                self.g
                    .op(r as u32, Stream::Compute, time, &deps, label, &[]);
            }
            return;
        }
        if !self.buckets[s].is_empty() {
            self.step_after_buckets(s);
            return;
        }
        let pipe = self.pipe;
        let strategy = self.plan.strategy;
        let st = &pipe.stages[s];
        let held = pipe.rank_held(s, &self.costs.workload.model, &strategy);
        // With expert parallelism the routed experts' gradients reduce
        // over their expert-data-parallel groups, the rest over all
        // replicas ([`crate::expert_parallel`]).
        let (params, experts) = (held.params - held.experts, held.experts);
        let (d, t) = (st.dp(), st.tp.max(1) as usize);
        let (edp, expert_done) = self.expert_reductions(s, held);
        let mut all_steps = Vec::new();
        for i in 0..t {
            let group = st.dp_group(i);
            let last = &self.last_compute;
            let after = |ranks: &[usize]| ranks.iter().filter_map(|&r| last[r]).collect();
            let grp = self.dp_group(s, &group);
            let reduced = stage_reduce(
                &mut self.c,
                self.g,
                &grp,
                (s, self.precision.grads.bytes() * params),
                &after,
                self.lb.stage(&grp, None),
            );
            let mut done: Vec<Vec<OpId>> = (0..d).map(|pos| reduced.done(pos, &[])).collect();
            if !expert_done.is_empty() {
                for (pos, &rank) in group.iter().enumerate() {
                    done[pos].extend(expert_done[rank].iter().copied());
                }
            }
            let steps = self.optimizer_steps(&group, &done);
            // (FSDP inside a stage gathers at the next step's start.)
            if strategy.sharding.gathers_after_step() && d > 1 {
                let bytes = self.precision.comm.bytes() * params;
                let label = self.lb.all_gather;
                let grp = self.dp_group(s, &group);
                stage_gather(&mut self.c, self.g, &grp, (s, bytes), &steps, label);
            }
            all_steps.extend(steps);
        }
        if strategy.sharding.gathers_after_step() {
            // The updated expert shards, after the stage's steps.
            for members in edp.iter().filter(|m| m.len() > 1) {
                let egrp = DpGroup {
                    ranks: members,
                    shard_width: members.len(),
                    sharding: strategy.sharding,
                };
                let bytes = self.precision.comm.bytes() * experts;
                let label = self.lb.all_gather;
                stage_gather(&mut self.c, self.g, &egrp, (s, bytes), &all_steps, label);
            }
        }
    }

    /// Stage `s`'s expert-data-parallel groups with a simulated member
    /// (none without expert parallelism) and their gradient reductions of
    /// the `held.experts` parameters each GPU holds, after each GPU's last
    /// compute; per rank its reductions' last ops (empty without groups).
    fn expert_reductions(
        &mut self,
        s: usize,
        held: crate::plan::pipeline::RankParams,
    ) -> (Vec<Vec<usize>>, Vec<Vec<OpId>>) {
        if held.experts <= 0.0 {
            return (Vec::new(), Vec::new());
        }
        let st = &self.pipe.stages[s];
        // (A group none of whose GPUs is simulated takes a twin's
        // timeline: nothing to emit.)
        let edp: Vec<Vec<usize>> = crate::expert_parallel::edp_groups(st, &self.pipe.tensor(s))
            .into_iter()
            .filter(|m| m.iter().any(|&r| self.simulated[r]))
            .collect();
        let mut done: Vec<Vec<OpId>> = vec![Vec::new(); self.costs.ranks()];
        for members in &edp {
            let last = &self.last_compute;
            let after = |ranks: &[usize]| ranks.iter().filter_map(|&r| last[r]).collect();
            let egrp = DpGroup {
                ranks: members,
                shard_width: held.expert_width,
                sharding: self.plan.strategy.sharding,
            };
            let bytes = self.precision.grads.bytes() * held.experts;
            let labels = self.lb.stage(&egrp, None);
            let r = stage_reduce(&mut self.c, self.g, &egrp, (s, bytes), &after, labels);
            for (k, &rank) in members.iter().enumerate() {
                done[rank].extend(r.done(k, &[]));
            }
        }
        (edp, done)
    }

    /// Stage `s`'s data-parallel group `ranks` (one TP rank's replicas).
    fn dp_group<'r>(&self, s: usize, ranks: &'r [usize]) -> DpGroup<'r> {
        DpGroup {
            ranks,
            shard_width: self.pipe.stages[s].shard_width(&self.plan.strategy),
            sharding: self.plan.strategy.sharding,
        }
    }

    /// The optimizer step of every simulated GPU of `group`, each after
    /// its `deps` (by position in `group`); the steps emitted.
    fn optimizer_steps(&mut self, group: &[usize], deps: &[Vec<OpId>]) -> Vec<OpId> {
        let mut steps = Vec::with_capacity(group.len());
        for (&r, deps) in group.iter().zip(deps) {
            if !self.simulated[r] {
                continue;
            }
            let time = self.table.optimizer[r];
            let label = at(self.lb.optimizer, NO_INDEX, NO_INDEX);
            steps.push(self.g.op(r as u32, Stream::Compute, time, deps, label, &[]));
        }
        steps
    }

    /// The buckets of every stage whose data-parallel group reduces during
    /// the last micro-batch's backward ([`crate::pipeline::buckets`]: Megatron's
    /// under `overlap_grad_reduce`, FSDP2's per unit inside pipeline
    /// stages); a stage of one replica reduces nothing.
    fn plan_buckets(&mut self) {
        let sync = grad_sync(self.plan.strategy.sharding, self.pipe.dp_overlap());
        let model = &self.costs.workload.model;
        for s in 0..self.p {
            if self.pipe.stages[s].dp() < 2 {
                continue;
            }
            self.buckets[s] = stage_buckets(self.pipe, model, sync, s);
            self.reduced[s] = vec![false; self.buckets[s].len()];
        }
    }

    /// After unit `u`'s step of pass `ps`: when it completes the unit's
    /// gradient in the last micro-batch (its backward, or a block's
    /// weight-gradient part under a split backward) on a stage with
    /// buckets, the op that did on each of its GPUs.
    fn note_grad(&mut self, ps: &Pass, u: u32) {
        let m = self.pipe.microbatches;
        if self.buckets[ps.x.s].is_empty() {
            return;
        }
        let block = (1..=self.costs.workload.model.layers).contains(&u);
        let split = self.pipe.schedule.splits_backward();
        let completes = match ps.action {
            Action::Bwd(k) => k + 1 == m && !(split && block),
            Action::Wgt(k) => k + 1 == m,
            Action::Fwd(_) => false,
        };
        if !completes {
            return;
        }
        for &r in &ps.x.ranks {
            if let Some(op) = self.last_compute[r as usize] {
                self.grad_ops.insert((r, u), op);
            }
        }
        self.grad_done[u as usize] = true;
    }

    /// After every replica's pass `action` through virtual stage `x`: the
    /// reductions of its stage's buckets whose gradients are now complete,
    /// in the order they filled.
    fn reduce_ready(&mut self, x: usize, action: Action) {
        let s = x % self.p;
        if matches!(action, Action::Fwd(_)) || self.buckets[s].is_empty() {
            return;
        }
        for b in 0..self.buckets[s].len() {
            let bucket = &self.buckets[s][b];
            let ready = bucket.x == x && bucket.units.iter().all(|&u| self.grad_done[u as usize]);
            if ready && !self.reduced[s][b] {
                self.reduced[s][b] = true;
                self.reduce_bucket(s, b);
            }
        }
    }

    /// Bucket `b` of stage `s` reduced per TP rank over its data-parallel
    /// group after its members completed its units' gradients (`none`:
    /// all-reduce; `grad-op` and `full`: reduce-scatter; `hybrid`:
    /// reduce-scatter in the shard groups, all-reduce across them), on
    /// the reduce stream.
    fn reduce_bucket(&mut self, s: usize, b: usize) {
        let st = &self.pipe.stages[s];
        let bucket = self.buckets[s][b].clone();
        let bytes = self.precision.grads.bytes() * bucket.params;
        let unit = bucket.units[0];
        let k = self.pipe.microbatches - 1;
        for i in 0..st.tp.max(1) as usize {
            let group = st.dp_group(i);
            let grad_ops = &self.grad_ops;
            let after = |ranks: &[usize]| {
                let units = &bucket.units;
                ranks
                    .iter()
                    .flat_map(|&r| {
                        units
                            .iter()
                            .filter_map(move |&u| grad_ops.get(&(r as u32, u)).copied())
                    })
                    .collect()
            };
            let grp = self.dp_group(s, &group);
            let labels = self.lb.stage(&grp, Some((unit, k)));
            let done = stage_reduce(&mut self.c, self.g, &grp, (s, bytes), &after, labels);
            for (pos, &r) in group.iter().enumerate() {
                if let Some(&op) = done.done(pos, &[]).last() {
                    self.last_reduce[r] = Some(op);
                }
            }
        }
    }

    /// Stage `s`'s optimizer steps after its bucket reductions, and under
    /// the distributed optimizer (`grad-op`) the updated parameters
    /// all-gathered bucket by bucket, unless `overlap_param_gather` defers
    /// them to the next step's forward ([`Self::gather_buckets`]).
    fn step_after_buckets(&mut self, s: usize) {
        let pipe = self.pipe;
        let strategy = self.plan.strategy;
        let st = &pipe.stages[s];
        for i in 0..st.tp.max(1) as usize {
            let group = st.dp_group(i);
            let deps: Vec<Vec<OpId>> = group
                .iter()
                .map(|&r| self.last_reduce[r].into_iter().collect())
                .collect();
            let steps = self.optimizer_steps(&group, &deps);
            if !strategy.sharding.gathers_after_step() || pipe.overlap_param_gather {
                continue;
            }
            for b in (0..self.buckets[s].len()).rev() {
                let bucket = &self.buckets[s][b];
                let bytes = self.precision.comm.bytes() * bucket.params;
                let label = at(
                    self.lb.all_gather,
                    *bucket.units.last().expect("a unit"),
                    NO_INDEX,
                );
                let grp = self.dp_group(s, &group);
                stage_gather(&mut self.c, self.g, &grp, (s, bytes), &steps, label);
            }
        }
    }

    /// The distributed optimizer's parameter all-gathers deferred to this
    /// step's forward (`overlap_param_gather`, Megatron's steady state:
    /// the all-gathers of the previous step's updated parameters, one per
    /// bucket): per stage with buckets and TP rank, each bucket's
    /// all-gather over the data-parallel group on the reduce stream from
    /// the iteration's start, in the order the forward first uses them;
    /// micro-batch 0's forward of each of its units waits for it
    /// ([`Self::gathered`]).
    fn gather_buckets(&mut self) {
        let pipe = self.pipe;
        let layers = self.costs.workload.model.layers as usize;
        let bytes = self.precision.comm.bytes();
        self.gathers = vec![Vec::new(); layers + 2];
        for s in 0..self.p {
            let st = &pipe.stages[s];
            let t = st.tp.max(1) as usize;
            for b in (0..self.buckets[s].len()).rev() {
                let bucket = self.buckets[s][b].clone();
                let first = *bucket.units.last().expect("a unit");
                for i in 0..t {
                    let group = st.dp_group(i);
                    if !group.iter().any(|&r| self.simulated[r]) {
                        continue;
                    }
                    let label = at(self.lb.param_gather, first, NO_INDEX);
                    let grp = self.dp_group(s, &group);
                    let op = (s, bytes * bucket.params);
                    let id = stage_gather(&mut self.c, self.g, &grp, op, &[], label);
                    for &u in &bucket.units {
                        self.gathers[u as usize].extend(group.iter().map(|&r| (r as u32, id)));
                    }
                }
            }
        }
        for g in &mut self.gathers {
            g.sort_unstable();
        }
    }

    /// FSDP / HSDP inside a one-stage plan, unit by unit
    /// ([`crate::pipeline::reshard`]): the stage's `order` walked one use at a time,
    /// each use on every simulated replica before the next (so a shard
    /// group's collectives follow all its members), its all-gather
    /// prefetched two phases ahead, its reduction after it when its
    /// gradient is complete.
    fn per_unit_walk(&mut self, order: &[(usize, Action)]) {
        let pipe = self.pipe;
        let st = &pipe.stages[0];
        let layers = self.costs.workload.model.layers;
        let sync = self.plan.strategy.accumulation == crate::strategy::Accumulation::Sync;
        let uses = crate::pipeline::reshard::uses(pipe, layers, order, sync);
        let (after, first) = prefetch_after(&uses);
        let (t, h) = (st.tp.max(1) as usize, st.shard_width(&self.plan.strategy));
        let ranks = self.costs.ranks();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of = vec![usize::MAX; ranks];
        for i in 0..t {
            for g in st.dp_group(i).chunks(h) {
                if g.iter().any(|&r| self.simulated[r]) {
                    g.iter().for_each(|&r| group_of[r] = groups.len());
                    groups.push(g.to_vec());
                }
            }
        }
        self.extra = vec![Vec::new(); ranks];
        self.per_unit = Some(PerUnit {
            uses,
            after,
            groups,
            group_of,
            gathers: Vec::new(),
            last_reduce: vec![None; ranks],
        });
        for n in first {
            self.unit_gather(n);
        }
        let replicas: Vec<usize> = (0..st.dp())
            .filter(|&j| self.simulated[st.group(j)[0] as usize])
            .collect();
        let mut n = 0;
        for &(x, action) in order {
            let mut passes: Vec<Pass> = replicas.iter().map(|&j| self.open(x, j, action)).collect();
            for u in crate::pipeline::reshard::units(pipe, layers, x, action) {
                self.before_use(n, &mut passes);
                for ps in &mut passes {
                    self.unit(ps, u);
                }
                self.after_use(n);
                n += 1;
            }
            for ps in passes {
                self.close(ps);
            }
        }
    }

    /// Parameters one GPU holds of unit `u` (its TP share).
    fn unit_params(&self, u: u32) -> f64 {
        let model = &self.costs.workload.model;
        let tp = self.pipe.tensor(0);
        if u == 0 {
            tp.embedding_params(model)
        } else if u == model.layers + 1 {
            tp.head_params(model)
        } else {
            tp.block_params(model)
        }
    }

    /// Before use `n`: its all-gather (issued earlier, or now) is what each
    /// pass's first op of the unit waits for, and the ops of the use carry
    /// its buffers: the gathered parameters freed when it reshards, the
    /// unsharded gradient allocated where the step's gradient of the unit
    /// begins, and a sharded backward's parameter-dtype gradient while it
    /// runs (as the data-parallel steps hold them, [`crate::data_parallel`]).
    fn before_use(&mut self, n: usize, passes: &mut [Pass]) {
        let pu = self.per_unit.as_ref().expect("per unit");
        let u = pu.uses[n];
        let gathered = if u.gathers {
            if !pu.gathers.iter().any(|g| g.0 == n) {
                self.unit_gather(n);
            }
            let pu = self.per_unit.as_mut().expect("per unit");
            let at = pu
                .gathers
                .iter()
                .position(|g| g.0 == n)
                .expect("just gathered");
            Some(pu.gathers.remove(at).1)
        } else {
            None
        };
        let p = self.precision;
        let prm = self.unit_params(u.unit);
        let (pb, gb) = (round(p.params.bytes() * prm), round(p.grads.bytes() * prm));
        let cast = (u.grads && p.casts_grads()).then_some(pb);
        let pu = self.per_unit.as_ref().expect("per unit");
        for ps in passes.iter_mut() {
            for (i, &r) in ps.x.ranks.iter().enumerate() {
                if let Some(ops) = &gathered {
                    ps.deps[i].push(ops[pu.group_of[r as usize]]);
                }
                let e = &mut self.extra[r as usize];
                if u.grad_alloc {
                    e.push(MemChange::start(r, gb).of(MemKind::Grads));
                }
                if let Some(c) = cast {
                    e.push(MemChange::start(r, c).of(MemKind::Grads));
                    e.push(MemChange::end(r, -c).of(MemKind::Grads));
                }
                if u.reshards {
                    e.push(MemChange::end(r, -pb).of(MemKind::Params));
                }
            }
        }
    }

    /// After use `n` on every replica: its reduction when the unit's
    /// gradient is complete (per shard group a reduce-scatter freeing the
    /// unsharded gradient, under HSDP then an all-reduce of the shard
    /// across the groups on the reduce stream), then the all-gather it
    /// prefetches.
    fn after_use(&mut self, n: usize) {
        let pu = self.per_unit.as_ref().expect("per unit");
        let (u, next) = (pu.uses[n], pu.after[n]);
        if u.reduces {
            self.unit_reduce(u);
        }
        if let Some(next) = next {
            self.unit_gather(next);
        }
    }

    /// The all-gather of use `n`'s unit in every shard group, after the
    /// group's simulated members' last compute, allocating the gathered
    /// parameters on them.
    fn unit_gather(&mut self, n: usize) {
        let pu = self.per_unit.as_ref().expect("per unit");
        let u = pu.uses[n];
        let groups = pu.groups.clone();
        let prm = self.unit_params(u.unit);
        let bytes = self.precision.comm.bytes() * prm;
        let held = round(self.precision.params.bytes() * prm);
        let sharding = self.plan.strategy.sharding;
        let label = at(self.lb.unit_gather, u.unit, u.k);
        let last = &self.last_compute;
        let deps = |ranks: &[usize]| ranks.iter().filter_map(|&r| last[r]).collect();
        let mems = |part: &[usize]| {
            part.iter()
                .map(|&r| MemChange::start(r as u32, held).of(MemKind::Params))
                .collect()
        };
        let ops: Vec<OpId> = groups
            .iter()
            .map(|g| {
                let h = g.len();
                let pieces = |_| (bytes, vec![bytes / h as f64; h]);
                let a = Gathering {
                    unit: u.unit,
                    pieces: &pieces,
                    deps: &deps,
                    mems: &mems,
                    stream: Stream::Comm,
                    label,
                };
                // One shard group.
                let grp = DpGroup {
                    ranks: g,
                    shard_width: h,
                    sharding,
                };
                grp.gather(&mut self.c, self.g, &a)[0].expect("a live shard group")
            })
            .collect();
        let pu = self.per_unit.as_mut().expect("per unit");
        pu.gathers.push((n, ops));
    }

    /// Use `u`'s reduction (see [`Self::after_use`]).
    fn unit_reduce(&mut self, u: Use) {
        let prm = self.unit_params(u.unit);
        let bytes = self.precision.grads.bytes() * prm;
        let free = -round(bytes);
        let st = &self.pipe.stages[0];
        let labels = (
            at(self.lb.unit_reduce, u.unit, u.k),
            at(self.lb.unit_all_reduce, u.unit, u.k),
        );
        for i in 0..st.tp.max(1) as usize {
            let group = st.dp_group(i);
            let grp = self.dp_group(0, &group);
            let h = grp.shard_width.max(1);
            let last = &self.last_compute;
            let deps = |ranks: &[usize]| ranks.iter().filter_map(|&r| last[r]).collect();
            // The reduce-scatter frees the unsharded gradient (a shard
            // group of one GPU reduces nothing: a zero-time op frees it).
            let mut mems = |part: &[usize]| {
                part.iter()
                    .map(|&r| MemChange::end(r as u32, free).of(MemKind::Grads))
                    .collect()
            };
            let pieces = |k: usize| {
                let n = h.min(group.len() - k * h);
                (bytes, vec![bytes / n as f64; n])
            };
            let replica_bytes = |_| bytes / h as f64;
            let done = grp.reduce(
                &mut self.c,
                self.g,
                Reduction {
                    unit: u.unit,
                    buckets: &[],
                    pieces: &pieces,
                    replica_bytes: &replica_bytes,
                    deps: &deps,
                    mems: &mut mems,
                    stream: Stream::Comm,
                    labels,
                },
            );
            let pu = self.per_unit.as_mut().expect("per unit");
            for (pos, &r) in group.iter().enumerate() {
                if let Some(op) = done.last(pos) {
                    pu.last_reduce[r] = Some(op);
                }
            }
        }
    }

    /// FSDP inside the stages as torchtitan runs it with a pipeline
    /// (`reshard_after_forward = False`, REAL-SYSTEMS-2 section 2.1): per
    /// stage and TP rank, the data-parallel group all-gathers each unit's
    /// parameters (embedding, every block, head: one FSDP unit each) once
    /// per step, in the order the stage first runs them, on the reduce
    /// stream from the iteration's start (prefetched); micro-batch 0's
    /// forward of a unit waits for its gather, no backward re-gathers (the
    /// unsharded weights stay resident for the step).
    /// Under HSDP each shard group (its [`crate::plan::pipeline::shard_width`]
    /// replicas) gathers its own copy.
    fn gather_params(&mut self) {
        let pipe = self.pipe;
        let model = &self.costs.workload.model;
        let layers = model.layers as usize;
        let bytes = self.precision.comm.bytes();
        self.gathers = vec![Vec::new(); layers + 2];
        for s in 0..self.p {
            let st = &pipe.stages[s];
            let (t, d) = (st.tp.max(1) as usize, st.shard_width(&self.plan.strategy));
            if d < 2 {
                continue;
            }
            let tp = pipe.tensor(s);
            let mut units: Vec<(usize, f64)> = Vec::new();
            if s == 0 {
                units.push((0, tp.embedding_params(model)));
            }
            for x in (s..pipe.virtual_depth()).step_by(self.p) {
                let (first, last) = self.blocks(x);
                units.extend((first..=last).map(|b| (b as usize, tp.block_params(model))));
            }
            if s + 1 == self.p {
                units.push((layers + 1, tp.head_params(model)));
            }
            let groups: Vec<Vec<usize>> = (0..t)
                .flat_map(|i| {
                    let all = st.dp_group(i);
                    all.chunks(d).map(<[usize]>::to_vec).collect::<Vec<_>>()
                })
                .collect();
            // (Groups of merged replicas only are their representatives'.)
            let sim = &self.simulated;
            let groups: Vec<Vec<usize>> = groups
                .into_iter()
                .filter(|g| g.iter().any(|&r| sim[r]))
                .collect();
            let sharding = self.plan.strategy.sharding;
            for group in groups {
                // One shard group.
                let grp = DpGroup {
                    ranks: &group,
                    shard_width: d,
                    sharding,
                };
                for &(b, prm) in &units {
                    let label = at(self.lb.param_gather, b as u32, NO_INDEX);
                    let op = (s, bytes * prm);
                    let id = stage_gather(&mut self.c, self.g, &grp, op, &[], label);
                    self.gathers[b].extend(group.iter().map(|&r| (r as u32, id)));
                }
            }
        }
        for g in &mut self.gathers {
            g.sort_unstable();
        }
    }

    /// Adds to `deps` (one list per rank of `ranks`) the gathers of unit
    /// `b`'s parameters when micro-batch `k` is the step's first (FSDP /
    /// HSDP inside the stages).
    fn gathered(&self, ranks: &[u32], b: usize, k: u32, deps: &mut [Vec<OpId>]) {
        if k != 0 {
            return;
        }
        let Some(slot) = self.gathers.get(b) else {
            return;
        };
        for (&r, d) in ranks.iter().zip(deps.iter_mut()) {
            if let Ok(at) = slot.binary_search_by_key(&r, |x| x.0) {
                d.push(slot[at].1);
            }
        }
    }

    /// The lowered iteration's constant memory and collectives.
    fn finish(self) -> LoweredParts {
        let (costs, plan, pipe) = (self.costs, self.plan, self.pipe);
        let ranks = costs.ranks();
        let positions = pipe.positions(ranks);
        let base_device_bytes = (0..ranks)
            .map(|r| match positions[r] {
                Some((s, _)) => base_device_bytes(costs, plan, pipe, s),
                None => 0,
            })
            .collect();
        LoweredParts {
            base_device_bytes,
            base_host_bytes: vec![0; costs.workload.cluster.nodes.len()],
            collectives: self.c.records,
        }
    }
}

/// What a block of recompute policy `pol` holds into its backward, bytes:
/// what the recompute regenerated, what the policy kept beyond the input,
/// and the input itself (`arrived`: the bytes a transfer brought, for a
/// stage's first block; else a block output).
fn block_held(
    a: &crate::activation::BlockActivations,
    pol: Recompute,
    arrived: Option<i64>,
) -> (i64, i64, i64) {
    let regen = round(a.regenerated(pol));
    let extra = round((a.kept(pol) - a.checkpoint).max(0.0));
    (regen, extra, arrived.unwrap_or_else(|| round(a.checkpoint)))
}

/// What a block's input-gradient part leaves for its weight-gradient part
/// under a zero-bubble schedule, bytes: of the `held` bytes it would free
/// (its input, what its policy kept, what the recompute regenerated),
/// everything but the attention's score-shaped tensors (Qi et al.: `W`
/// needs `32 sbh` of a layer's `34 sbh + 5 a s^2 b`).
fn w_held(a: &crate::activation::BlockActivations, held: i64) -> i64 {
    let scores = round((a.saved_none - a.saved_attention).max(0.0));
    (held - scores).max(0)
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
