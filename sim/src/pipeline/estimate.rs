//! The closed form of a pipeline iteration the planners search with
//! (the simulator then confirms their best candidates). It reads the same
//! cost-table rows ([`super::costs::Rows`]: per-block costs and activation
//! sizes of a slice) as the lowering ([`crate::lower::pipeline`]):
//!
//! * **Stage time** per micro-batch `t_s`: its blocks' forward, recompute
//!   and backward, plus the embedding (first) or head (last), on the GPU
//!   of its group with the largest slice (the slowest, for a tie).
//! * **Period** of a stage: the larger of `t_s` and the time its
//!   communication stream needs per micro-batch (activations out, input
//!   gradients back): a link slower than the stage paces the pipeline.
//! * **Iteration** under GPipe: the forwards' pipeline then the
//!   backwards', `sum_s f_s + (m - 1) max_s f_s` and the same for the
//!   backward parts. Under 1F1B: the largest over stages `s` of `(m - 1) period_s +
//!   t_s` (its micro-batches), plus `sum_{s' < s} t_s'` (the stages before
//!   it fill and drain), plus the round trip through the stages after it
//!   less what its `in_flight - 1` warm-up forwards hide; then the
//!   forward transfers' latency and the last gradient sync + optimizer
//!   (stage `s` ends its backwards the stages before it earlier).
//!   Metis' `HeteroCostEstimator` (Um et al., USENIX ATC 2024) adds every
//!   stage's fill, `sum_s t_s + (m - 1) max_s t_s`, which overstates a
//!   pipeline paced by an early stage; both are the simulator's
//!   `(m + p - 1) t` for identical stages and free communication.
//! * **Peak memory** of a stage GPU: its constant memory
//!   ([`super::state_bytes`]), `f` in-flight micro-batches (GPipe `m`, 1F1B
//!   `min(p - s, m)`) times its blocks' held activations (input plus what
//!   the policy keeps, and on the last stage the head's logits), one
//!   transfer buffer, and the largest transient of one op (a backward's
//!   working gradients and regenerated activations); at one stage the
//!   unit buffers the data-parallel bound counts (under FSDP the running
//!   and the next unit's parameters and gradients, [`super::reshard`]).
//!   Held against the simulator's peak by the tests.
//! * **One stage under FSDP / HSDP** (per unit): the data-parallel closed
//!   form's sum over the micro-batches' phases ([`crate::planner::closed_form`]
//!   module docs), every schedule alike (no bubble at one stage).

use super::buckets::{chunk_buckets, grad_sync, GradSync};
use super::costs::Rows;
use crate::comm::CollectiveKind;
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::plan::pipeline::{DpOverlap, PipeSchedule, Pipeline};
use crate::plan::Plan;
use crate::precision::Precision;
use crate::strategy::{Checkpointing, Recompute, Sharding, Strategy};
use crate::tensor::TensorParallel;
use crate::units::GIB;

/// What one stage group costs per micro-batch, per block and fixed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupCost {
    /// Forward + recompute + backward of one block, ms (slowest GPU).
    pub block_ms: f64,
    /// Forward of one block, ms (slowest GPU).
    pub block_fwd_ms: f64,
    /// The weight-gradient part of one block's backward, ms (slowest GPU;
    /// what a zero-bubble schedule defers).
    pub block_w_ms: f64,
    /// Embedding forward, ms.
    pub embed_fwd_ms: f64,
    /// Head forward, ms.
    pub head_fwd_ms: f64,
    /// Embedding forward + backward, ms (when the group is the first stage).
    pub embed_ms: f64,
    /// Head forward + backward, ms (when the group is the last stage).
    pub head_ms: f64,
    /// Bytes one block holds per in-flight micro-batch (its input plus
    /// what the policy keeps).
    pub held_bytes: f64,
    /// Largest transient of one block's forward or backward, bytes.
    pub block_work_bytes: f64,
    /// What the head holds per micro-batch (its logits and their gradient,
    /// and its input, the last block's output), bytes.
    pub head_work_bytes: f64,
    /// A block's input (one transfer buffer), bytes.
    pub input_bytes: f64,
    /// What a block holds between its input-gradient and weight-gradient
    /// parts under a zero-bubble schedule (all but the score tensors), bytes.
    pub w_held_bytes: f64,
    /// Usable memory of the group's smallest GPU, bytes.
    pub usable_bytes: f64,
    /// Physical bytes of one slice's activations (what a transfer moves).
    pub transfer_bytes: f64,
    /// Parameters one GPU holds of each FSDP unit: the embedding, a block
    /// and the head (its TP share).
    pub unit_params: [f64; 3],
}

impl GroupCost {
    /// The pace of two groups together: each time the slower one's, the
    /// smaller usable memory, the larger transfer; the other memory
    /// fields `mem`'s.
    fn slower(&self, other: &GroupCost, mem: &GroupCost) -> GroupCost {
        GroupCost {
            block_ms: self.block_ms.max(other.block_ms),
            block_fwd_ms: self.block_fwd_ms.max(other.block_fwd_ms),
            block_w_ms: self.block_w_ms.max(other.block_w_ms),
            embed_fwd_ms: self.embed_fwd_ms.max(other.embed_fwd_ms),
            head_fwd_ms: self.head_fwd_ms.max(other.head_fwd_ms),
            embed_ms: self.embed_ms.max(other.embed_ms),
            head_ms: self.head_ms.max(other.head_ms),
            usable_bytes: self.usable_bytes.min(other.usable_bytes),
            transfer_bytes: self.transfer_bytes.max(other.transfer_bytes),
            ..*mem
        }
    }
}

/// The costs of a group of GPUs `ranks` each computing at most `n`
/// samples of a micro-batch under `strategy` (uniform checkpointing:
/// every block as block 1 of the policy; `every:K` averaged), from the
/// rows of `rows` (priced with the strategy's attention kernel).
pub fn group_cost(
    costs: &CostModel,
    strategy: &Strategy,
    rows: &mut Rows<'_>,
    ranks: &[usize],
    n: u32,
    tp: &TensorParallel,
) -> Result<GroupCost, PlanError> {
    let d = (ranks.len() / tp.degree.max(1) as usize).max(1);
    Ok(stage_cost(costs, strategy, rows, ranks, &vec![n; d], tp, None)?.time)
}

/// What a stage costs per micro-batch: its slowest replica's time, and
/// the memory of each distinct replica (GPU type and slice).
#[derive(Debug, Clone, PartialEq)]
pub struct StageCost {
    /// The slowest replica's times; memory fields of the first replica
    /// with the largest slice, usable memory the stage's smallest.
    pub time: GroupCost,
    /// The distinct replicas' costs (memory: each against its own usable
    /// memory, [`Staged::over_bytes`]).
    pub replicas: Vec<GroupCost>,
}

/// The costs of a stage on the GPUs `ranks` (TP groups of `tp`'s degree,
/// consecutive, its replicas) whose replica `j` computes `slices[j]`
/// samples of a micro-batch, with the fraction of blocks recomputed in
/// full given (`every_full`: a stage's own share under `every:K`,
/// instead of `1/K`).
#[allow(clippy::too_many_arguments)]
pub fn stage_cost(
    costs: &CostModel,
    strategy: &Strategy,
    rows: &mut Rows<'_>,
    ranks: &[usize],
    slices: &[u32],
    tp: &TensorParallel,
    every_full: Option<f64>,
) -> Result<StageCost, PlanError> {
    debug_assert_eq!(rows.attention(), strategy.attention);
    let t = (tp.degree as usize).clamp(1, ranks.len().max(1));
    // TP groups of one shape and slice are priced once.
    let mut tp_seen: rustc_hash::FxHashMap<_, super::costs::TpTimes> =
        rustc_hash::FxHashMap::default();
    let mut time: Option<GroupCost> = None;
    let mut largest = 0u32;
    let mut replicas: Vec<(u32, GroupCost)> = Vec::new();
    // Replicas of one shape (GPU types, node pattern, links) and slice
    // cost the same: priced once.
    let mut priced: rustc_hash::FxHashMap<(u32, super::costs::GroupShape<'_>), GroupCost> =
        rustc_hash::FxHashMap::default();
    for (j, group) in ranks.chunks(t).enumerate() {
        let n = slices.get(j).copied().unwrap_or(1);
        // With EP, the replica's first rank's dispatch group (its exchanges).
        let ep_group: Vec<usize> = if tp.experts > 1 {
            crate::expert_parallel::dispatch_indices(ranks.len(), tp, j * t)
                .into_iter()
                .map(|q| ranks[q])
                .collect()
        } else {
            Vec::new()
        };
        let mut shape = super::costs::group_shape(costs, group);
        shape.extend(super::costs::group_shape(costs, &ep_group));
        let key = (n, shape);
        let g = match priced.get(&key) {
            Some(&g) => g,
            None => {
                let g = replica_cost(
                    costs,
                    strategy,
                    rows,
                    (group, &ep_group),
                    n,
                    tp,
                    every_full,
                    &mut tp_seen,
                )?;
                priced.insert(key, g);
                g
            }
        };
        if !replicas.iter().any(|(m, x)| *m == n && *x == g) {
            replicas.push((n, g));
        }
        time = Some(match time {
            None => g,
            Some(o) => o.slower(&g, if n > largest { &g } else { &o }),
        });
        largest = largest.max(n);
    }
    let time = time.ok_or_else(|| {
        PlanError::invalid("plan", "pipeline.stages[].gpus", "a stage needs a GPU")
    })?;
    Ok(StageCost {
        time,
        replicas: replicas.into_iter().map(|x| x.1).collect(),
    })
}

/// The costs of one replica: the TP group `group` computing `n` samples
/// of a micro-batch, paced by its slowest GPU, with its exposed TP
/// communication and its EP exchanges over `ep_group` (empty without EP;
/// priced once per group shape and slice in `tp_seen`).
#[allow(clippy::too_many_arguments)]
fn replica_cost<'c>(
    costs: &'c CostModel,
    strategy: &Strategy,
    rows: &mut Rows<'_>,
    (group, ep_group): (&[usize], &[usize]),
    n: u32,
    tp: &TensorParallel,
    every_full: Option<f64>,
    tp_seen: &mut rustc_hash::FxHashMap<(u32, super::costs::GroupShape<'c>), super::costs::TpTimes>,
) -> Result<GroupCost, PlanError> {
    let ck = strategy.checkpointing;
    // Fraction of blocks recomputed in full (every:K: 1/K), selective.
    let (full, selective) = match ck {
        Checkpointing::None => (0.0, false),
        Checkpointing::Full => (1.0, false),
        Checkpointing::Selective | Checkpointing::SelectiveAttention => (0.0, true),
        Checkpointing::Every(k) => (every_full.unwrap_or(1.0 / k.max(1) as f64), false),
    };
    let mut out: Option<GroupCost> = None;
    let mut bwd_ms = 0.0f64;
    let w_share = crate::tensor::weight_grad_share(&costs.workload.model, costs.workload.seq_len);
    for &r in group {
        let mc = rows.add(r, n, tp)?;
        bwd_ms = bwd_ms.max(mc.b_blk.as_ms());
        let a = mc.act;
        let ms = |t: crate::units::SimTime| t.as_ms();
        let re = if selective {
            ms(mc.re_sel)
        } else {
            full * ms(mc.re_full)
        };
        let keep = |pol: Recompute| (a.kept(pol) - a.checkpoint).max(0.0) + a.checkpoint;
        let held = if selective {
            keep(Recompute::Selective)
        } else {
            full * keep(Recompute::Full) + (1.0 - full) * keep(Recompute::None)
        };
        let pol = if selective {
            Recompute::Selective
        } else if full > 0.0 {
            Recompute::Full
        } else {
            Recompute::None
        };
        let work = (a.regenerated(pol) + a.grad_work + 2.0 * a.checkpoint).max(
            if pol == Recompute::Full {
                a.nograd_work
            } else {
                0.0
            },
        );
        let g = GroupCost {
            block_ms: ms(mc.f_blk) + re + ms(mc.b_blk),
            block_w_ms: ms(mc.b_blk) * w_share,
            block_fwd_ms: ms(mc.f_blk),
            embed_fwd_ms: ms(mc.f_emb),
            head_fwd_ms: ms(mc.f_head),
            embed_ms: ms(mc.f_emb) + ms(mc.b_emb),
            head_ms: ms(mc.f_head) + ms(mc.b_head),
            held_bytes: held,
            block_work_bytes: work,
            head_work_bytes: a.head_work + a.checkpoint,
            input_bytes: a.checkpoint,
            w_held_bytes: a.saved_attention,
            usable_bytes: costs.usable_gib(r) * GIB,
            transfer_bytes: costs.block_output_bytes(n)
                / if tp.sequence_parallel {
                    tp.degree as f64
                } else {
                    1.0
                },
            unit_params: unit_params(costs, tp),
        };
        out = Some(match out {
            None => g,
            Some(o) => o.slower(&g, &o),
        });
    }
    let mut g = out.ok_or_else(|| {
        PlanError::invalid("plan", "pipeline.stages[].gpus", "a stage needs a GPU")
    })?;
    if tp.communicates() {
        // The group's exposed communication (a full recompute reruns the
        // forward's).
        let mut shape = super::costs::group_shape(costs, group);
        shape.extend(super::costs::group_shape(costs, ep_group));
        let c = *tp_seen.entry((n, shape)).or_insert_with(|| {
            super::costs::tp_times(costs, tp, (group, ep_group), n, g.block_fwd_ms, bwd_ms)
        });
        g.add_comm(&c, full);
    }
    Ok(g)
}

impl GroupCost {
    /// Adds a replica's exposed model-parallel communication `c` (TP's and
    /// EP's), the forward's rerun by the fraction `full` of blocks
    /// recomputed in full.
    fn add_comm(&mut self, c: &super::costs::TpTimes, full: f64) {
        let ms = |x: crate::units::SimTime| x.as_ms();
        self.block_ms += ms(c.block_fwd) * (1.0 + full) + ms(c.block_bwd);
        self.block_fwd_ms += ms(c.block_fwd);
        self.block_ms += ms(c.ep_fwd) * (1.0 + full) + ms(c.ep_bwd);
        self.block_fwd_ms += ms(c.ep_fwd);
        self.embed_fwd_ms += ms(c.embed_fwd);
        self.embed_ms += ms(c.embed_fwd) + ms(c.embed_bwd);
        self.head_fwd_ms += ms(c.head_fwd);
        self.head_ms += ms(c.head_fwd) + ms(c.head_bwd);
    }
}

/// Parameters one GPU holds of each FSDP unit under `tp`: the embedding,
/// a block, the head ([`GroupCost::unit_params`]).
fn unit_params(costs: &CostModel, tp: &TensorParallel) -> [f64; 3] {
    let m = &costs.workload.model;
    [
        tp.embedding_params(m),
        tp.block_params(m),
        tp.head_params(m),
    ]
}

/// Where a stage sits: first, last, in-flight micro-batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Place {
    /// Holds the embedding.
    pub first: bool,
    /// Holds the head.
    pub last: bool,
    /// Micro-batches whose activations it holds at once.
    pub in_flight: f64,
    /// Micro-batches whose weight-gradient parts wait at once beyond those
    /// in flight (zero-bubble schedules: stage `s` defers up to `s`).
    pub pending_w: f64,
    /// Zero-bubble: at most this many pending while another runs its
    /// backward (the distinct micro-batches held, less one).
    pub pending_w_max: f64,
    /// The schedule splits the backward (zero-bubble).
    pub zero_bubble: bool,
    /// Micro-batches of the iteration.
    pub microbatches: u32,
    /// The stage holds several model chunks (interleaved).
    pub chunked: bool,
}

/// Per-micro-batch time of a stage of `blocks` blocks, ms.
pub fn stage_ms(g: &GroupCost, blocks: u32, at: Place) -> f64 {
    blocks as f64 * g.block_ms
        + if at.first { g.embed_ms } else { 0.0 }
        + if at.last { g.head_ms } else { 0.0 }
}

/// Per-micro-batch forward time of a stage of `blocks` blocks, ms.
pub fn stage_fwd_ms(g: &GroupCost, blocks: u32, at: Place) -> f64 {
    blocks as f64 * g.block_fwd_ms
        + if at.first { g.embed_fwd_ms } else { 0.0 }
        + if at.last { g.head_fwd_ms } else { 0.0 }
}

/// Estimated peak GPU memory of a stage GPU, bytes: constant memory for
/// the parameters it holds (`held`, their state split as it says), plus
/// activations (module docs).
pub fn stage_peak_bytes(
    costs: &CostModel,
    strategy: &Strategy,
    g: &GroupCost,
    blocks: u32,
    held: crate::plan::pipeline::RankParams,
    at: Place,
) -> f64 {
    // The head keeps its logits (and their gradient buffer) from its
    // forward to its backward: once per micro-batch in flight.
    let head = if at.last { g.head_work_bytes } else { 0.0 };
    // Interleaved: the head's chunk runs each micro-batch's forward and
    // backward back to back (one set of logits at a time).
    let heads = if at.chunked { 1.0 } else { at.in_flight };
    let mut in_flight = at.in_flight * blocks as f64 * g.held_bytes + heads * head;
    if at.zero_bubble {
        // Zero-bubble: the deferred weight-gradient parts, and in the
        // running backward the blocks whose input-gradient part is done
        // keeping what their weight gradients need. Where a pending one
        // holds more than one in flight (recomputed blocks), as many
        // pending as can be while one runs.
        let extra = (g.w_held_bytes - g.held_bytes).max(0.0);
        let pending = if extra > 0.0 {
            let swap = (at.pending_w_max - at.pending_w).max(0.0);
            in_flight -= swap * blocks as f64 * g.held_bytes;
            at.pending_w_max
        } else {
            at.pending_w
        };
        in_flight += blocks as f64 * (pending * g.w_held_bytes + extra);
    }
    let work = g.block_work_bytes;
    let one_stage = at.first && at.last;
    let reshards = one_stage && crate::plan::pipeline::reshards_after_forward(strategy.sharding, 1);
    let units = if one_stage {
        let precision = strategy.precision(costs.workload.dtype);
        unit_buffer_bytes(
            strategy,
            &precision,
            g,
            at.microbatches,
            held.params,
            reshards,
        )
    } else {
        0.0
    };
    let state = super::state_bytes(costs, strategy, held, reshards);
    state + in_flight + g.input_bytes + work + units
}

/// The unit buffers a one-stage plan holds beyond its constant memory at
/// its peak, bytes, as the data-parallel memory bound counts them
/// ([`crate::bounds::rank_peak`]): a sharded strategy's backward holds the
/// parameter-dtype gradient of the unit it runs before casting it
/// (`param_dtype` unlike `reduce_dtype`); FSDP resharding per unit
/// (`reshards`) holds the running unit's gathered parameters and its
/// gradient buffer (every unit's under `no-sync` with several
/// micro-batches, `params` of them), plus the larger of the next unit's
/// prefetched parameters and the previous unit's gradient still being
/// reduced; units at their largest (embedding, block or head).
fn unit_buffer_bytes(
    strategy: &Strategy,
    precision: &Precision,
    g: &GroupCost,
    m: u32,
    params: f64,
    reshards: bool,
) -> f64 {
    let (pb, rb) = (precision.params.bytes(), precision.grads.bytes());
    let unit = g.unit_params.iter().copied().fold(0.0, f64::max);
    // (The formats, not their sizes, decide: fp16 parameters with bf16
    // reductions cast too, as the data-parallel steps count it.)
    let cast = if strategy.sharding.shards_params() && precision.casts_grads() {
        pb * unit
    } else {
        0.0
    };
    if !reshards {
        return cast;
    }
    let held_grads = strategy.accumulation == crate::strategy::Accumulation::NoSync && m > 1;
    let (grads, next) = if held_grads {
        (rb * params, pb * unit)
    } else {
        (rb * unit, pb.max(rb) * unit)
    };
    pb * unit + grads + next + cast
}

/// Per-stage inputs of the partition for one grouping, micro-batch count
/// and strategy.
#[derive(Debug, Clone)]
pub struct Staged {
    /// Each stage group's costs (its slowest replica's times).
    pub costs: Vec<GroupCost>,
    /// Each stage's distinct replicas' costs (their memory).
    pub replicas: Vec<Vec<GroupCost>>,
    /// Communication-stream time per micro-batch of each stage, ms.
    pub comm_ms: Vec<f64>,
    /// Per boundary between stages `b` and `b + 1`, the transfer of one
    /// micro-batch's activations and that of its gradient back, ms: what
    /// 1F1B's steady state waits for per micro-batch on top of the
    /// stages' compute (stage `b + 1` runs one forward and one backward
    /// while stage `b`'s next activations wait for its backward, which
    /// waits for `b + 1`'s gradient).
    pub hop_ms: Vec<f64>,
    /// Per stage and node, the stage's data-parallel groups (one per TP
    /// rank) that cross nodes with a member on the node: what reduces
    /// through that node's NICs at once ([`Staged::others`]).
    pub crossing: Vec<Vec<usize>>,
    /// Per node, [`Staged::crossing`] summed over every stage.
    pub crossing_total: Vec<usize>,
}

impl Staged {
    /// Per node, the data-parallel groups of the stages other than `s`
    /// that cross nodes through it: stages sharing a node (the `tp-pp-dp`
    /// rank order) synchronise at about the same time, through the same
    /// NICs (`nic_sharing`).
    pub fn others(&self, s: usize) -> Vec<usize> {
        // Every stage's groups through the node, less stage `s`'s: O(nodes)
        // per stage (summing the others was O(stages x nodes), which a
        // 4,096-GPU search paid for every stage of every candidate).
        self.crossing_total
            .iter()
            .zip(&self.crossing[s])
            .map(|(&all, &own)| all - own)
            .collect()
    }

    /// How far stage `s` holding `blocks` blocks (`held` per GPU, its
    /// state split as it says) at `at` runs over memory, bytes: the
    /// largest of its replicas' estimated peak less that replica's usable
    /// memory (at most zero: it fits), with that replica's peak and usable
    /// bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn over_bytes(
        &self,
        costs: &CostModel,
        strategy: &Strategy,
        s: usize,
        blocks: u32,
        held: crate::plan::pipeline::RankParams,
        at: Place,
    ) -> Over {
        let mut worst: Option<Over> = None;
        let mut highest = 0.0f64;
        for g in &self.replicas[s] {
            let peak = stage_peak_bytes(costs, strategy, g, blocks, held, at);
            highest = highest.max(peak);
            let o = Over {
                over_bytes: peak - g.usable_bytes,
                peak_bytes: peak,
                usable_bytes: g.usable_bytes,
                stage_peak_bytes: 0.0,
            };
            if worst.is_none_or(|w| o.over_bytes > w.over_bytes) {
                worst = Some(o);
            }
        }
        let mut o = worst.unwrap_or(Over {
            over_bytes: f64::INFINITY,
            peak_bytes: f64::INFINITY,
            usable_bytes: 0.0,
            stage_peak_bytes: 0.0,
        });
        o.stage_peak_bytes = highest;
        o
    }
}

/// A stage's tightest replica against its memory ([`Staged::over_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Over {
    /// Estimated peak less usable memory, bytes (at most zero: fits).
    pub over_bytes: f64,
    /// Its estimated peak, bytes.
    pub peak_bytes: f64,
    /// Its usable memory, bytes.
    pub usable_bytes: f64,
    /// The highest estimated peak of any of the stage's replicas, bytes.
    pub stage_peak_bytes: f64,
}

/// Per replica of a stage of `d` replicas (shares `shares`, equal when
/// empty), its samples of a micro-batch of `size`
/// ([`crate::plan::pipeline::apportion`]).
pub fn replica_slices(size: u32, d: usize, shares: &[u32]) -> Vec<u32> {
    crate::plan::pipeline::apportion(size, d, shares)
        .into_iter()
        .map(|(lo, hi)| hi - lo)
        .collect()
}

/// Per stage of `groups` (TP degrees `tps`), its replicas' equal slices
/// of a micro-batch of `largest` samples ([`replica_slices`]).
pub fn even_slices(groups: &[Vec<usize>], tps: &[TensorParallel], largest: u32) -> Vec<Vec<u32>> {
    groups
        .iter()
        .zip(tps)
        .map(|(g, tp)| replica_slices(largest, g.len() / tp.degree.max(1) as usize, &[]))
        .collect()
}

/// The costs of every stage group of `groups` (TP degrees `tps`) whose
/// replicas compute `slices[s][j]` samples of the largest micro-batch,
/// and their transfer times; slices priced from `rows` (built under the
/// strategy's attention, and shared across calls so each row is built
/// once).
pub fn staged(
    costs: &CostModel,
    strategy: &Strategy,
    rows: &mut Rows<'_>,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    slices: &[Vec<u32>],
) -> Result<Staged, PlanError> {
    let p = groups.len();
    let mut gc = Vec::with_capacity(p);
    let mut replicas = Vec::with_capacity(p);
    for ((g, tp), sl) in groups.iter().zip(tps).zip(slices) {
        let c = stage_cost(costs, strategy, rows, g, sl, tp, None)?;
        gc.push(c.time);
        replicas.push(c.replicas);
    }
    // A stage sends its activations forward and its input gradient back,
    // per micro-batch, each GPU its slice: the slowest of the replicas'
    // pairs (one-to-one, the first GPU of each TP group; the rank order
    // decides whether they share a node), times the stage's GPUs sending
    // through each NIC of that node at once ([`p2p_sharing`]).
    let mut comm_ms = vec![0.0; p];
    let pair_ms = |a: usize, b: usize, bytes: f64| {
        let (ta, tb) = (tps[a].degree.max(1) as usize, tps[b].degree.max(1) as usize);
        let (ga, gb) = (&groups[a], &groups[b]);
        let reps = (ga.len() / ta).min(gb.len() / tb).max(1);
        let senders = p2p_senders(costs, ga, gb);
        // Pairs alike in hardware and place ([`pair_key`]) take the same
        // time: priced once (a stage of thousands of replicas has a few).
        let mut priced: rustc_hash::FxHashMap<PairKey<'_>, f64> = Default::default();
        (0..reps)
            .map(|j| {
                let (x, y) = (
                    ga[(j * ta).min(ga.len() - 1)],
                    gb[(j * tb).min(gb.len() - 1)],
                );
                let ms = *priced
                    .entry(pair_key(costs, x, y))
                    .or_insert_with(|| costs.p2p(x, y, bytes).0);
                ms * p2p_sharing(costs, &senders, x, y)
            })
            .fold(0.0, f64::max)
    };
    // Per boundary `b` (stages b, b + 1): its activations out and its
    // gradients back.
    let mut hop_ms = vec![0.0; p.saturating_sub(1)];
    for s in 0..p {
        let bytes = gc[s].transfer_bytes;
        if s + 1 < p {
            let ms = pair_ms(s, s + 1, bytes);
            comm_ms[s] += ms;
            hop_ms[s] += ms;
        }
        if s > 0 {
            let ms = pair_ms(s, s - 1, bytes);
            comm_ms[s] += ms;
            hop_ms[s - 1] += ms;
        }
    }
    let crossing = crossing(costs, groups, tps);
    let mut crossing_total = vec![0usize; costs.workload.cluster.nodes.len()];
    for per_node in &crossing {
        for (t, &x) in crossing_total.iter_mut().zip(per_node) {
            *t += x;
        }
    }
    Ok(Staged {
        costs: gc,
        replicas,
        comm_ms,
        hop_ms,
        crossing,
        crossing_total,
    })
}

/// Per stage of `groups` (TP `tps`) and node, its data-parallel groups
/// (one per TP rank: the rank's GPU of every replica) that span nodes and
/// have a member on the node ([`Staged::crossing`]).
fn crossing(costs: &CostModel, groups: &[Vec<usize>], tps: &[TensorParallel]) -> Vec<Vec<usize>> {
    let c = &costs.workload.cluster;
    let node = |r: usize| c.gpus[r].node;
    groups
        .iter()
        .zip(tps)
        .map(|(st, tp)| {
            let t = (tp.degree.max(1) as usize).min(st.len().max(1));
            let mut count = vec![0usize; c.nodes.len()];
            for i in 0..t {
                let g: Vec<usize> = st.iter().skip(i).step_by(t).copied().collect();
                if g.iter().all(|&r| node(r) == node(g[0])) {
                    continue;
                }
                let mut nodes: Vec<usize> = g.iter().map(|&r| node(r)).collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes.into_iter().for_each(|n| count[n] += 1);
            }
            count
        })
        .collect()
}

/// What a point-to-point transfer's time depends on: each end's GPU
/// type, place in its node, node fabric and NICs (count, rate, latency),
/// and whether both ends share a node.
type PairKey<'c> = (bool, [(usize, usize, &'c str, usize, u64, u64); 2]);

/// The [`PairKey`] of a transfer from `x` to `y`.
fn pair_key(costs: &CostModel, x: usize, y: usize) -> PairKey<'_> {
    let c = &costs.workload.cluster;
    let end = |r: usize| {
        let g = &c.gpus[r];
        let n = &c.nodes[g.node];
        (
            costs.rank_type[r],
            g.local,
            n.intra_link.as_str(),
            n.nics,
            n.nic_gbps.to_bits(),
            n.net_latency_us.to_bits(),
        )
    };
    (c.gpus[x].node == c.gpus[y].node, [end(x), end(y)])
}

/// Per node, how many GPUs of stage `from` on it send to a GPU of stage
/// `to` on another node (position `i` of `from` sends to position `i` of
/// `to`, scaled when the stages differ in size): every such GPU sends its
/// slice at the same time (the replicas run in step).
fn p2p_senders(
    costs: &CostModel,
    from: &[usize],
    to: &[usize],
) -> rustc_hash::FxHashMap<usize, usize> {
    let c = &costs.workload.cluster;
    let node = |r: usize| c.gpus[r].node;
    let peer = |i: usize| to[(i * to.len() / from.len().max(1)).min(to.len() - 1)];
    let mut out = rustc_hash::FxHashMap::default();
    for (i, &r) in from.iter().enumerate() {
        if node(peer(i)) != node(r) {
            *out.entry(node(r)).or_insert(0) += 1;
        }
    }
    out
}

/// How many point-to-point transfers share each NIC of the node of `x`
/// when it sends to `y` on another node: the stage's GPUs on that node
/// sending across nodes (`senders`, [`p2p_senders`]) over the node's
/// NICs, rounded up; 1 when `x` and `y` share a node.
fn p2p_sharing(
    costs: &CostModel,
    senders: &rustc_hash::FxHashMap<usize, usize>,
    x: usize,
    y: usize,
) -> f64 {
    let c = &costs.workload.cluster;
    let n = c.gpus[x].node;
    if n == c.gpus[y].node {
        return 1.0;
    }
    let senders = senders.get(&n).copied().unwrap_or(0).max(1);
    senders.div_ceil(c.nodes[n].nics.max(1)) as f64
}

/// Parameters one GPU of a stage of `k` blocks at place `at` holds under
/// the tensor parallelism `tp` (all of them at `t = 1`).
pub fn params(costs: &CostModel, k: u32, at: Place, tp: &TensorParallel) -> f64 {
    let m = &costs.workload.model;
    k as f64 * tp.block_params(m)
        + if at.first {
            tp.embedding_params(m)
        } else {
            0.0
        }
        + if at.last { tp.head_params(m) } else { 0.0 }
}

/// What one GPU of a stage of `k` blocks at place `at` holds under `tp`
/// with its dense state split over `width` ranks
/// ([`crate::plan::pipeline::RankParams`]; with expert parallelism the routed
/// experts' over the expert-data-parallel group's width).
pub fn held(
    costs: &CostModel,
    k: u32,
    at: Place,
    tp: &TensorParallel,
    width: (Sharding, usize),
) -> crate::plan::pipeline::RankParams {
    let m = &costs.workload.model;
    crate::plan::pipeline::RankParams::of(params(costs, k, at, tp), width, k, tp, m)
}

/// Stage `s` of `p` under `schedule` with `m` micro-batches.
pub fn place(schedule: PipeSchedule, p: usize, s: usize, m: u32, v: u32) -> Place {
    Place {
        first: s == 0,
        last: s + 1 == p,
        in_flight: schedule.in_flight(p, s, m, v),
        // Distinct micro-batches: no more pending than are not in flight.
        pending_w: if schedule.splits_backward() {
            let in_flight = schedule.in_flight(p, s, m, v) as usize;
            s.min((m as usize).saturating_sub(in_flight)) as f64
        } else {
            0.0
        },
        pending_w_max: if schedule.splits_backward() {
            let in_flight = schedule.in_flight(p, s, m, v) as usize;
            let distinct = (in_flight + s).min(m as usize);
            s.min(distinct.saturating_sub(1)) as f64
        } else {
            0.0
        },
        zero_bubble: schedule.splits_backward(),
        microbatches: m,
        // (with m = p Megatron runs every forward first: no interleaving
        // of the head's passes)
        chunked: schedule == PipeSchedule::Interleaved && v > 1 && m as usize != p,
    }
}

/// How a pipeline runs: its schedule, model chunks per GPU `v` and the
/// data-parallel overlap knobs (what [`estimate_ms`] needs beyond the
/// stages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    /// The schedule.
    pub schedule: PipeSchedule,
    /// Model chunks per GPU.
    pub v: u32,
    /// Megatron's DDP overlap knobs.
    pub overlap: DpOverlap,
    /// Per stage, the blocks of each of its chunks where they differ
    /// ([`crate::plan::pipeline::Stage::chunks`]; empty: the stage's
    /// blocks split evenly over its `v` chunks).
    pub chunk_blocks: &'a [Vec<u32>],
}

impl Run<'_> {
    /// `schedule` with `v` even chunks per GPU and no data-parallel
    /// overlap.
    pub fn plain(schedule: PipeSchedule, v: u32) -> Run<'static> {
        Run {
            schedule,
            v,
            overlap: DpOverlap::default(),
            chunk_blocks: &[],
        }
    }
}

/// The closed-form iteration of stages `groups` holding `counts` blocks
/// with `m` micro-batches run as `run` says (module docs), ms: one stage
/// under FSDP / HSDP per unit (`per_unit_ms`), else the pipeline's
/// (`pipelined_ms`).
#[allow(clippy::too_many_arguments)]
pub fn estimate_ms(
    costs: &CostModel,
    strategy: &Strategy,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    st: &Staged,
    counts: &[u32],
    m: u32,
    run: Run<'_>,
) -> f64 {
    if crate::plan::pipeline::reshards_after_forward(strategy.sharding, groups.len()) {
        let (g, tp) = (&groups[0], &tps[0]);
        return per_unit_ms(costs, strategy, g, tp, &st.costs[0], counts[0], m);
    }
    pipelined_ms(costs, strategy, groups, tps, st, counts, m, run)
}

/// [`estimate_ms`] of a pipeline (or a stage whose data-parallel group
/// synchronises once after its last backward), ms.
#[allow(clippy::too_many_arguments)]
fn pipelined_ms(
    costs: &CostModel,
    strategy: &Strategy,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    st: &Staged,
    counts: &[u32],
    m: u32,
    run: Run<'_>,
) -> f64 {
    let (schedule, v) = (run.schedule, run.v);
    let p = groups.len();
    let pc = Paced::of(st, counts, m, run);
    let steady = match schedule {
        // Every forward, then every backward: two pipelines in a row.
        PipeSchedule::Gpipe => {
            let b: Vec<f64> = (0..p).map(|s| pc.t[s] - pc.f[s]).collect();
            let pace = |x: &[f64]| {
                (0..p)
                    .map(|s| x[s].max(st.comm_ms[s] / 2.0))
                    .fold(0.0, f64::max)
            };
            let m1 = m.saturating_sub(1) as f64;
            pc.f.iter().sum::<f64>() + m1 * pace(&pc.f) + b.iter().sum::<f64>() + m1 * pace(&b)
        }
        PipeSchedule::OneFOneB | PipeSchedule::ZbH1 => one_f_one_b_ms(st, &pc, m, schedule),
        // Interleaved: each stage as the pacing one, its m micro-batches
        // (its chunks send v times as often), the others' fill and drain
        // cut into v chunks (`(p - 1) / (v m)` on identical stages).
        PipeSchedule::Interleaved => {
            let vf = v.max(1) as f64;
            let total: f64 = pc.t.iter().sum();
            (0..p)
                .map(|s| {
                    let period = pc.t[s].max(vf * st.comm_ms[s]);
                    m as f64 * period + (total - pc.t[s]) / vf
                })
                .fold(0.0, f64::max)
        }
    };
    let fill: f64 = st.comm_ms[..p.saturating_sub(1)].iter().sum();
    let split = schedule.splits_backward();
    let chunks = Chunks {
        p,
        v,
        counts,
        per_chunk: run.chunk_blocks,
        split,
    };
    let start = if strategy.sharding.reshards_per_unit() {
        fsdp_start_ms(costs, strategy, groups, tps, st, counts, &pc.at, &pc.f)
    } else if strategy.sharding.gathers_after_step() && run.overlap.param_gather {
        bucket_start_ms(costs, strategy, groups, tps, st, chunks, run.overlap, &pc.f)
    } else {
        0.0
    };
    // A stage's gradient sync and optimizer follow its last backward, which
    // ends the backward parts of the stages before it earlier than stage 0's
    // (with buckets, what of the sync its last backward does not hide).
    let mut tail = 0.0f64;
    let mut earlier = 0.0;
    for s in 0..p {
        let prm = params(costs, counts[s], pc.at[s], &tps[s]);
        let bucketed = bucket_sync_ms(costs, strategy, run.overlap, groups, tps, st, chunks, s);
        let (sync, opt) = bucketed.unwrap_or_else(|| {
            let others = st.others(s);
            let experts = if tps[s].experts > 1 {
                counts[s] as f64 * tps[s].expert_block_params(&costs.workload.model)
            } else {
                0.0
            };
            let ep = (experts, &tps[s]);
            stage_sync_ms(
                costs,
                strategy,
                (&groups[s], &others),
                tps[s].degree,
                prm,
                ep,
            )
        });
        // Under zero-bubble the input-gradient chain moves on without the
        // weight-gradient parts, which each stage still runs before its
        // sync (stage 0's ends the steady part).
        tail = tail.max(sync + opt + pc.w[s] - pc.w[0] - earlier);
        earlier += pc.t[s] - pc.f[s] - pc.w[s];
    }
    steady + fill + tail + start
}

/// Per stage of a pipeline: where it sits, its time per micro-batch, its
/// forward's, and (zero-bubble) its weight-gradient parts', ms.
struct Paced {
    at: Vec<Place>,
    t: Vec<f64>,
    f: Vec<f64>,
    w: Vec<f64>,
}

impl Paced {
    /// The stages of `st` holding `counts` blocks, `m` micro-batches run
    /// as `run` says.
    fn of(st: &Staged, counts: &[u32], m: u32, run: Run<'_>) -> Paced {
        let p = counts.len();
        let at: Vec<Place> = (0..p)
            .map(|s| place(run.schedule, p, s, m, run.v))
            .collect();
        let t = (0..p)
            .map(|s| stage_ms(&st.costs[s], counts[s], at[s]))
            .collect();
        let f = (0..p)
            .map(|s| stage_fwd_ms(&st.costs[s], counts[s], at[s]))
            .collect();
        let split = run.schedule.splits_backward();
        let w = (0..p)
            .map(|s| {
                if split {
                    counts[s] as f64 * st.costs[s].block_w_ms
                } else {
                    0.0
                }
            })
            .collect();
        Paced { at, t, f, w }
    }
}

/// The steady part of a 1F1B or ZB-H1 pipeline, ms: each stage as the
/// pacing one, its m micro-batches (at its period), the stages before it
/// filling and draining, and the round trip through the stages after it,
/// less what its warm-up forwards hide.
fn one_f_one_b_ms(st: &Staged, pc: &Paced, m: u32, schedule: PipeSchedule) -> f64 {
    let (t, f, w) = (&pc.t, &pc.f, &pc.w);
    let p = t.len();
    // ZB-H1: the deferred weight-gradient parts fill the bubbles, each
    // other stage's `W` and as much again as its forward allows (`(p -
    // 1)(T_F + T_B - T_W)` on identical stages). The second part needs
    // later micro-batches' forwards (with fewer than p only m - 1 of the p
    // - 1 others get it) and stages as fast as the pacing one: counted
    // only for stages of equal time (within 5%), so an unbalanced pipeline
    // is not promised the identical stages' saving.
    let later = if p > 1 {
        (m.saturating_sub(1) as f64 / (p - 1) as f64).min(1.0)
    } else {
        0.0
    };
    let tmax = t.iter().copied().fold(0.0, f64::max);
    let tmin = t.iter().copied().fold(f64::INFINITY, f64::min);
    let balanced = if tmin >= 0.95 * tmax { 1.0 } else { 0.0 };
    let filled: Vec<f64> = (0..p)
        .map(|s| w[s] + balanced * later * w[s].min(f[s]))
        .collect();
    // Stage 0 defers nothing: its last `W` ends the iteration.
    let all_filled: f64 = filled.iter().skip(1).sum();
    let mut steady = 0.0f64;
    let (mut before, mut after) = (0.0, t.iter().sum::<f64>());
    for s in 0..p {
        after -= t[s];
        // 1F1B: the round trip to a neighbour on top of the compute
        // (ZB-H1 fills it with deferred weight gradients).
        let hop = if schedule == PipeSchedule::OneFOneB {
            let near = |b: usize| st.hop_ms.get(b).copied().unwrap_or(0.0);
            near(s).max(s.checked_sub(1).map_or(0.0, near))
        } else {
            0.0
        };
        let period = (t[s] + hop).max(st.comm_ms[s]);
        let hidden = (pc.at[s].in_flight - 1.0).max(0.0) * f[s];
        let bubble = (before + (after - hidden).max(0.0) - all_filled).max(0.0);
        let span = (m.saturating_sub(1)) as f64 * period + t[s] + bubble;
        steady = steady.max(span);
        before += t[s];
    }
    steady
}

/// A one-stage plan whose FSDP / HSDP reshards per unit
/// ([`super::reshard`]) on the GPUs `stage` (TP groups of `tp`), costing
/// `g` per micro-batch, with `blocks` blocks and `m` micro-batches, ms: the
/// data-parallel closed form's sum ([`crate::planner::closed_form`]) over
/// the micro-batches' phases (embedding, blocks and head forward, the
/// head, blocks and embedding backward), each the longer of its compute
/// and the communication under it (the previous phase's reduce-scatter,
/// in the passes that reduce: every one under `sync`, the last under
/// `no-sync`, and the next phase's prefetched all-gather), after the
/// first all-gather and before the last reduction (and HSDP's all-reduce
/// of it) and the optimizer step. The schedule does not matter at one
/// stage: every order runs the same phases without a bubble.
fn per_unit_ms(
    costs: &CostModel,
    strategy: &Strategy,
    stage: &[usize],
    tp: &TensorParallel,
    g: &GroupCost,
    blocks: u32,
    m: u32,
) -> f64 {
    let t = tp.degree.max(1) as usize;
    let all: Vec<usize> = stage.iter().step_by(t).copied().collect();
    let h = crate::plan::pipeline::shard_width(strategy, all.len(), t as u32);
    let shard = &all[..h.min(all.len())];
    let share = nic_sharing(costs, stage, shard, t as u32, &[]);
    let precision = strategy.precision(costs.workload.dtype);
    let (pb, rb) = (precision.comm.bytes(), precision.grads.bytes());
    let coll = |kind: CollectiveKind, bytes: f64| {
        if h > 1 {
            costs.group_collective_ms(kind, shard, &vec![bytes / h as f64; h]) * share
        } else {
            0.0
        }
    };
    // Per unit class (embedding, block, head): all-gather, reduction.
    let ag: Vec<f64> = g
        .unit_params
        .iter()
        .map(|&u| coll(CollectiveKind::AllGather, pb * u))
        .collect();
    let rs: Vec<f64> = g
        .unit_params
        .iter()
        .map(|&u| coll(CollectiveKind::ReduceScatter, rb * u))
        .collect();
    // Phases of a pass: (compute, unit class, reduces after it).
    let l = blocks as usize;
    let mut phases: Vec<(f64, usize, bool)> = Vec::with_capacity(2 * l + 3);
    phases.push((g.embed_fwd_ms, 0, false));
    phases.extend(std::iter::repeat_n((g.block_fwd_ms, 1, false), l));
    phases.push((g.head_ms, 2, true));
    phases.extend(std::iter::repeat_n(
        (g.block_ms - g.block_fwd_ms, 1, true),
        l,
    ));
    phases.push((g.embed_ms - g.embed_fwd_ms, 0, true));
    let pass = |reduces: bool, last: bool| -> f64 {
        (0..phases.len())
            .map(|i| {
                let prev = match i.checked_sub(1).map(|j| phases[j]) {
                    Some((_, c, true)) if reduces => rs[c],
                    _ => 0.0,
                };
                let next = match phases.get(i + 1) {
                    Some(&(_, c, _)) => ag[c],
                    None if !last => ag[0],
                    None => 0.0,
                };
                phases[i].0.max(prev + next)
            })
            .sum()
    };
    let sync = strategy.accumulation == crate::strategy::Accumulation::Sync;
    let reducing = if sync { m } else { 1 };
    let quiet = m - reducing.min(m);
    let steady = quiet as f64 * pass(false, false)
        + reducing.saturating_sub(1) as f64 * pass(true, false)
        + pass(true, true);
    // HSDP: the last unit's shard all-reduced across the shard groups.
    let reps: Vec<usize> = all.iter().step_by(h.max(1)).copied().collect();
    let ar = if strategy.sharding.reduces_across_groups() && reps.len() > 1 {
        costs.group_collective_ms(
            CollectiveKind::AllReduce,
            &reps,
            &vec![rb * g.unit_params[0] / h as f64; reps.len()],
        ) * nic_sharing(costs, stage, &reps, (t * h) as u32, &[])
    } else {
        0.0
    };
    let params = l as f64 * g.unit_params[1] + g.unit_params[0] + g.unit_params[2];
    let none = TensorParallel::NONE;
    let (_, opt) = stage_sync_ms(
        costs,
        strategy,
        (stage, &[]),
        t as u32,
        params,
        (0.0, &none),
    );
    ag[0] + steady + rs[0] + ar + opt
}

/// A pipeline's stages as model chunks: `p` stages of `v` chunks each,
/// stage `s` holding `counts[s]` blocks; `split`: the schedule splits the
/// backward (zero-bubble), so a block's gradient is complete only after
/// its weight-gradient part.
#[derive(Debug, Clone, Copy)]
struct Chunks<'a> {
    p: usize,
    v: u32,
    counts: &'a [u32],
    /// Per stage, blocks per chunk where they differ ([`Run::chunk_blocks`]).
    per_chunk: &'a [Vec<u32>],
    split: bool,
}

/// One unit of a model chunk in the closed form: its id (0 the embedding,
/// blocks `1..=k`, `k + 1` the head), parameters per GPU, when its
/// gradient of the last micro-batch is complete (ms from the start of the
/// chunk's last backward) and its forward, ms.
type ChunkUnit = (u32, f64, f64, f64);

/// The units of chunk `c` of stage `s` (costing `g` per unit) in backward
/// order ([`ChunkUnit`]), and the chunk's last backward, ms: the units'
/// backwards (with recompute and TP communication) in order; under a
/// split backward the input-gradient parts first, then the blocks'
/// weight-gradient parts, which complete the blocks' gradients.
fn chunk_units(g: &GroupCost, ch: Chunks<'_>, s: usize, c: usize) -> (Vec<ChunkUnit>, f64) {
    let v = ch.v.max(1) as usize;
    let k = ch
        .per_chunk
        .get(s)
        .and_then(|blocks| blocks.get(c))
        .copied()
        .unwrap_or(ch.counts[s] / v as u32);
    let last = s + 1 == ch.p && c + 1 == v;
    let first = s == 0 && c == 0;
    let w = if ch.split { g.block_w_ms } else { 0.0 };
    let block_bwd = g.block_ms - g.block_fwd_ms;
    // (id, params, backward part before the weight gradients, forward)
    let mut units: Vec<(u32, f64, f64, f64)> = Vec::with_capacity(k as usize + 2);
    if last {
        let bwd = g.head_ms - g.head_fwd_ms;
        units.push((k + 1, g.unit_params[2], bwd, g.head_fwd_ms));
    }
    units.extend(
        (1..=k)
            .rev()
            .map(|b| (b, g.unit_params[1], block_bwd - w, g.block_fwd_ms)),
    );
    if first {
        let bwd = g.embed_ms - g.embed_fwd_ms;
        units.push((0, g.unit_params[0], bwd, g.embed_fwd_ms));
    }
    let input_part: f64 = units.iter().map(|u| u.2).sum();
    let (mut at, mut weights) = (0.0, input_part);
    let out = units
        .into_iter()
        .map(|(id, prm, b, f)| {
            at += b;
            let block = id >= 1 && id <= k;
            let done = if ch.split && block {
                weights += w;
                weights
            } else {
                at
            };
            (id, prm, done, f)
        })
        .collect();
    (out, input_part + k as f64 * w)
}

/// Stage `s`'s buckets ([`super::buckets`]) under `rule` for `d`
/// replicas, with when each is ready: (ms from the end of the stage's
/// last backward, negative before it; parameters per GPU; the forward of
/// micro-batch 0 before the bucket's first unit, ms), in the order they
/// fill. Chunk `c`'s last backward ends `c p` chunk backwards before the
/// stage's (the last micro-batch's backward runs through the `c p`
/// virtual stages below it), its first forward of micro-batch 0 `c p`
/// chunk forwards after the stage's first.
fn timed_buckets(
    g: &GroupCost,
    ch: Chunks<'_>,
    s: usize,
    rule: GradSync,
    d: usize,
) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::new();
    for c in (0..ch.v.max(1) as usize).rev() {
        let (units, bwd) = chunk_units(g, ch, s, c);
        let fwd: f64 = units.iter().map(|u| u.3).sum();
        let start = -((c * ch.p) as f64 + 1.0) * bwd;
        let fwd_start = (c * ch.p) as f64 * fwd;
        let ids: Vec<(u32, f64)> = units.iter().map(|u| (u.0, u.1)).collect();
        for b in chunk_buckets(rule, c * ch.p + s, &ids, d) {
            let pos = |id: u32| units.iter().position(|u| u.0 == id).unwrap_or(0);
            let done = b
                .units
                .iter()
                .map(|&id| units[pos(id)].2)
                .fold(0.0, f64::max);
            // Forward of the units after the bucket's last in backward
            // order, i.e. before its first in forward order.
            let last = pos(b.units.last().copied().unwrap_or(0));
            let ahead: f64 = units[last + 1..].iter().map(|u| u.3).sum();
            out.push((start + done, b.params, fwd_start + ahead));
        }
    }
    out
}

/// The data-parallel groups of a stage on the GPUs `stage` (TP groups of
/// `t`), one per TP rank, each shape once.
fn dp_groups(costs: &CostModel, stage: &[usize], t: usize) -> Vec<Vec<usize>> {
    let mut seen = std::collections::HashSet::new();
    (0..t.min(stage.len()))
        .map(|i| {
            stage
                .iter()
                .skip(i)
                .step_by(t)
                .copied()
                .collect::<Vec<usize>>()
        })
        .filter(|g| seen.insert(super::costs::group_shape(costs, g)))
        .collect()
}

/// One bucket's reduction over the data-parallel group `g` of a stage on
/// the GPUs `stage` (TP groups of `t`), `params` per GPU, ms: `none` an
/// all-reduce, `grad-op` and `full` a reduce-scatter, `hybrid` a
/// reduce-scatter in the shard group and an all-reduce across them; times
/// the groups sharing a NIC ([`nic_sharing`], with `others` of other
/// stages).
fn bucket_reduce_ms(
    costs: &CostModel,
    strategy: &Strategy,
    (stage, others): (&[usize], &[usize]),
    g: &[usize],
    t: usize,
    params: f64,
) -> f64 {
    let d = g.len();
    let bytes = strategy.precision(costs.workload.dtype).grads.bytes() * params;
    let share = nic_sharing(costs, stage, g, t as u32, others);
    let ms = |kind, ranks: &[usize], piece: f64| {
        costs.group_collective_ms(kind, ranks, &vec![piece; ranks.len()])
    };
    match strategy.sharding {
        Sharding::NoShard => ms(CollectiveKind::AllReduce, g, bytes) * share,
        Sharding::GradOp | Sharding::Full => {
            ms(CollectiveKind::ReduceScatter, g, bytes / d as f64) * share
        }
        Sharding::Hybrid => {
            let h = crate::plan::pipeline::shard_width(strategy, d, t as u32);
            let piece = bytes / h as f64;
            let rs = if h > 1 {
                ms(CollectiveKind::ReduceScatter, &g[..h], piece) * share
            } else {
                0.0
            };
            let reps: Vec<usize> = g.iter().step_by(h).copied().collect();
            let ar = if reps.len() > 1 {
                ms(CollectiveKind::AllReduce, &reps, piece)
                    * nic_sharing(costs, stage, &reps, (t * h) as u32, &[])
            } else {
                0.0
            };
            rs + ar
        }
    }
}

/// Stage `s`'s gradient synchronisation when its group reduces buckets
/// during its last backward ([`super::buckets`]: Megatron's under
/// `overlap.grad_reduce`, FSDP2's per unit inside pipeline stages), ms:
/// what of the queue of bucket reductions (each launched when it is
/// ready, [`timed_buckets`], one after another on the group's stream)
/// outlasts the stage's last backward, plus under the distributed
/// optimizer the all-gathers of the updated parameters unless
/// `overlap.param_gather` defers them; and the optimizer step. The
/// slowest of the stage's data-parallel group shapes. `None` when the
/// stage reduces once after its last backward (or has one replica).
#[allow(clippy::too_many_arguments)]
fn bucket_sync_ms(
    costs: &CostModel,
    strategy: &Strategy,
    overlap: DpOverlap,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    st: &Staged,
    ch: Chunks<'_>,
    s: usize,
) -> Option<(f64, f64)> {
    let rule = grad_sync(strategy.sharding, overlap);
    let stage = &groups[s];
    let t = (tps[s].degree.max(1) as usize).min(stage.len().max(1));
    let d = stage.len() / t;
    if rule == GradSync::AfterBackward || d < 2 {
        return None;
    }
    let items = timed_buckets(&st.costs[s], ch, s, rule, d);
    let others = st.others(s);
    let h = crate::plan::pipeline::shard_width(strategy, d, t as u32);
    let total: f64 = items.iter().map(|x| x.1).sum();
    let (mut sync, mut opt) = (0.0f64, 0.0f64);
    for g in dp_groups(costs, stage, t) {
        opt = g
            .iter()
            .map(|&r| costs.optimizer_ms(r, total / h as f64))
            .fold(opt, f64::max);
        let mut priced: Vec<(f64, f64)> = Vec::new();
        let mut dur = |prm: f64| match priced.iter().find(|x| x.0 == prm) {
            Some(x) => x.1,
            None => {
                let ms = bucket_reduce_ms(costs, strategy, (stage, &others), &g, t, prm);
                priced.push((prm, ms));
                ms
            }
        };
        let mut ready: Vec<(f64, f64)> = items.iter().map(|x| (x.0, x.1)).collect();
        ready.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut end = f64::NEG_INFINITY;
        for (at, prm) in ready {
            end = end.max(at) + dur(prm);
        }
        let gather = if strategy.sharding.gathers_after_step() && !overlap.param_gather {
            let share = nic_sharing(costs, stage, &g, t as u32, &others);
            let pb = strategy.precision(costs.workload.dtype).comm.bytes();
            items
                .iter()
                .map(|x| {
                    let piece = pb * x.1 / d as f64;
                    costs.group_collective_ms(CollectiveKind::AllGather, &g, &vec![piece; d])
                        * share
                })
                .sum()
        } else {
            0.0
        };
        sync = sync.max(end.max(0.0) + gather);
    }
    Some((sync, opt))
}

/// The distributed optimizer's parameter all-gathers deferred to the
/// step's forward (`overlap_param_gather`, [`crate::lower::pipeline`]'s
/// steady state): how long they hold up micro-batch 0's forward, ms. On
/// stage `s` the all-gathers of its buckets run back to back from the
/// start in forward order, each TP rank's group at once (sharing NICs);
/// a bucket's first unit waits for its all-gather, and the stage's first
/// forward cannot begin before the forwards of the stages before it
/// (`f`); the slowest stage's wait delays what follows it.
#[allow(clippy::too_many_arguments)]
fn bucket_start_ms(
    costs: &CostModel,
    strategy: &Strategy,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    st: &Staged,
    ch: Chunks<'_>,
    overlap: DpOverlap,
    f: &[f64],
) -> f64 {
    let rule = grad_sync(strategy.sharding, overlap);
    let pb = strategy.precision(costs.workload.dtype).comm.bytes();
    let mut before = 0.0;
    let mut worst = 0.0f64;
    for s in 0..groups.len() {
        let stage = &groups[s];
        let t = (tps[s].degree.max(1) as usize).min(stage.len().max(1));
        let d = stage.len() / t;
        if d >= 2 {
            let others = st.others(s);
            let mut items = timed_buckets(&st.costs[s], ch, s, rule, d);
            items.sort_by(|a, b| a.2.total_cmp(&b.2));
            for g in dp_groups(costs, stage, t) {
                let share = nic_sharing(costs, stage, &g, t as u32, &others);
                let mut gathered = 0.0;
                for &(_, prm, ahead) in &items {
                    let piece = pb * prm / d as f64;
                    gathered +=
                        costs.group_collective_ms(CollectiveKind::AllGather, &g, &vec![piece; d])
                            * share;
                    worst = worst.max(gathered - before - ahead);
                }
            }
        }
        before += f[s];
    }
    worst.max(0.0)
}

/// FSDP inside the stages ([`crate::lower::pipeline`]'s parameter
/// gathers at the step's start): how long the gathers hold up micro-batch
/// 0's forward, ms. On stage `s` (TP rank groups as in
/// [`stage_sync_ms`]) the gathers of its units run back to back from the
/// start; block `j`'s forward waits for the `j`-th, and the stage's first
/// forward cannot begin before the forwards of the stages before it
/// (`f`); the slowest stage's wait delays what follows it.
#[allow(clippy::too_many_arguments)]
fn fsdp_start_ms(
    costs: &CostModel,
    strategy: &Strategy,
    groups: &[Vec<usize>],
    tps: &[TensorParallel],
    st: &Staged,
    counts: &[u32],
    at: &[Place],
    f: &[f64],
) -> f64 {
    let m = &costs.workload.model;
    let bytes = strategy.precision(costs.workload.dtype).comm.bytes();
    let mut before = 0.0;
    let mut worst = 0.0f64;
    for s in 0..groups.len() {
        let t = tps[s].degree.max(1) as usize;
        let all: Vec<usize> = groups[s].iter().step_by(t).copied().collect();
        // (HSDP: one shard group's gathers.)
        let d = crate::plan::pipeline::shard_width(strategy, all.len(), t as u32);
        let g = &all[..d];
        if d > 1 {
            let ag = |prm: f64| {
                costs.group_collective_ms(
                    CollectiveKind::AllGather,
                    g,
                    &vec![bytes * prm / d as f64; d],
                )
            };
            let share = nic_sharing(costs, &groups[s], g, t as u32, &st.others(s));
            let emb = if at[s].first {
                ag(tps[s].embedding_params(m)) * share
            } else {
                0.0
            };
            let blk = ag(tps[s].block_params(m)) * share;
            let head = if at[s].last {
                ag(tps[s].head_params(m)) * share
            } else {
                0.0
            };
            let k = counts[s] as f64;
            let fb = st.costs[s].block_fwd_ms;
            let wait = (emb + blk - before)
                .max(emb + k * blk - before - (k - 1.0) * fb)
                .max(emb + k * blk + head - before - k * fb);
            worst = worst.max(wait);
        }
        before += f[s];
    }
    worst.max(0.0)
}

/// The gradient synchronisation and optimizer step of a stage whose GPUs
/// `stage` (TP groups of `t`) each hold `prm` parameters, ms: per TP rank
/// its data-parallel group's collectives (`none`: all-reduce; `grad-op`:
/// reduce-scatter + all-gather), the slowest of the distinct group shapes,
/// times the groups sharing a NIC ([`nic_sharing`], with `others` of other
/// stages); and the slowest optimizer step.
fn stage_sync_ms(
    costs: &CostModel,
    strategy: &Strategy,
    (stage, others): (&[usize], &[usize]),
    t: u32,
    prm: f64,
    (experts, etp): (f64, &TensorParallel),
) -> (f64, f64) {
    let prm = prm - experts;
    let expert_ms = expert_sync_ms(costs, strategy, (stage, others), experts, etp);
    let e = etp.experts.max(1);
    let tu = t.max(1) as usize;
    let precision = strategy.precision(costs.workload.dtype);
    let (pb, rb) = (precision.comm.bytes(), precision.grads.bytes());
    let mut seen = std::collections::HashSet::new();
    let (mut sync, mut opt) = (0.0f64, 0.0f64);
    for i in 0..tu.min(stage.len()) {
        let g: Vec<usize> = stage.iter().skip(i).step_by(tu).copied().collect();
        if !seen.insert(super::costs::group_shape(costs, &g)) {
            continue;
        }
        let d = g.len();
        let h = crate::plan::pipeline::shard_width(strategy, d, t);
        let he = crate::plan::pipeline::expert_width(strategy.sharding, h, e, etp.expert_fold());
        let local = prm / h as f64 + experts / he as f64;
        opt = g
            .iter()
            .map(|&r| costs.optimizer_ms(r, local))
            .fold(opt, f64::max);
        if d < 2 {
            sync = sync.max(expert_ms);
            continue;
        }
        let ms = match strategy.sharding {
            // HSDP: reduce-scatter in a shard group, all-reduce of the shard
            // across the groups (each group's GPUs at once).
            Sharding::Hybrid => {
                let piece = prm / h as f64 * rb;
                let rs = if h > 1 {
                    costs.group_collective_ms(
                        CollectiveKind::ReduceScatter,
                        &g[..h],
                        &vec![piece; h],
                    )
                } else {
                    0.0
                };
                let reps: Vec<usize> = g.iter().step_by(h).copied().collect();
                let ar = if reps.len() > 1 {
                    costs.group_collective_ms(
                        CollectiveKind::AllReduce,
                        &reps,
                        &vec![piece; reps.len()],
                    ) * nic_sharing(costs, stage, &reps, (t as usize * h) as u32, &[])
                } else {
                    0.0
                };
                // (NIC sharing counted per collective here.)
                sync = sync.max(rs + ar);
                continue;
            }
            Sharding::NoShard => {
                costs.group_collective_ms(CollectiveKind::AllReduce, &g, &vec![prm * rb; d])
            }
            _ => {
                let piece = prm / d as f64;
                let rs = costs.group_collective_ms(
                    CollectiveKind::ReduceScatter,
                    &g,
                    &vec![piece * rb; d],
                );
                // FSDP inside a stage gathers at the next step's start
                // ([`fsdp_start_ms`]).
                if strategy.sharding == Sharding::Full {
                    rs
                } else {
                    rs + costs.group_collective_ms(
                        CollectiveKind::AllGather,
                        &g,
                        &vec![piece * pb; d],
                    )
                }
            }
        };
        sync = sync.max(ms * nic_sharing(costs, stage, &g, t, others) + expert_ms);
    }
    (sync, opt)
}

/// The expert gradients' synchronisation of a stage whose GPUs `stage`
/// each hold `experts` routed-expert parameters under `etp`, ms: over an
/// expert-data-parallel group (the GPUs holding the same expert slice) after
/// the dense ones, every such group of the stage at once (`t_e e` of them
/// through a node's NICs, [`nic_sharing`]); 0 without expert parallelism.
fn expert_sync_ms(
    costs: &CostModel,
    strategy: &Strategy,
    (stage, others): (&[usize], &[usize]),
    experts: f64,
    etp: &TensorParallel,
) -> f64 {
    let e = etp.experts.max(1);
    // With EP, the experts' gradients over an expert-data-parallel group
    // (the GPUs holding the same expert slice) after the dense ones; every
    // such group of the stage at once, `t_e e` of them through a node.
    let edp: Vec<usize> = crate::expert_parallel::edp_indices(stage.len(), etp.expert_tensor, e)
        .first()
        .map(|g| g.iter().map(|&q| stage[q]).collect())
        .unwrap_or_default();
    if experts > 0.0 && edp.len() > 1 {
        let n = edp.len();
        let precision = strategy.precision(costs.workload.dtype);
        let (pb, rb) = (precision.comm.bytes(), precision.grads.bytes());
        let ms = match strategy.sharding {
            Sharding::NoShard => {
                costs.group_collective_ms(CollectiveKind::AllReduce, &edp, &vec![experts * rb; n])
            }
            _ => {
                let piece = experts / n as f64;
                costs.group_collective_ms(CollectiveKind::ReduceScatter, &edp, &vec![piece * rb; n])
                    + costs.group_collective_ms(
                        CollectiveKind::AllGather,
                        &edp,
                        &vec![piece * pb; n],
                    )
            }
        };
        ms * nic_sharing(costs, stage, &edp, etp.expert_tensor * e, others)
    } else {
        0.0
    }
}

/// How many of a stage's `t` data-parallel groups (one per TP rank, all
/// reducing at once) share each NIC of the nodes the first group `g`
/// crosses: the TP ranks of the stage on the first group's first node,
/// and `others[n]` more groups of other stages through that node (empty:
/// none), over that node's NICs, rounded up (1 when the group stays in a
/// node, or with a NIC per group, as on rail-optimised HGX nodes).
fn nic_sharing(costs: &CostModel, stage: &[usize], g: &[usize], t: u32, others: &[usize]) -> f64 {
    let c = &costs.workload.cluster;
    let node = |r: usize| c.gpus[r].node;
    let Some(&first) = g.first() else { return 1.0 };
    if g.iter().all(|&r| node(r) == node(first)) {
        return 1.0;
    }
    let more = others.get(node(first)).copied().unwrap_or(0);
    let t = t.max(1) as usize;
    let mut positions = vec![false; t];
    for (i, &r) in stage.iter().enumerate() {
        if node(r) == node(first) {
            positions[i % t] = true;
        }
    }
    let local = positions.iter().filter(|&&x| x).count().max(1) + more;
    let nics = c.nodes[node(first)].nics.max(1);
    local.div_ceil(nics) as f64
}

/// What the closed form says about a pipeline plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Iteration time, ms.
    pub iteration_ms: f64,
    /// Peak memory of each stage's GPU that peaks highest, bytes.
    pub peak_bytes: Vec<f64>,
}

/// The closed form of a pipeline plan (its pipeline and strategy).
pub fn estimate(costs: &CostModel, plan: &Plan, pipe: &Pipeline) -> Result<Estimate, PlanError> {
    let groups: Vec<Vec<usize>> = pipe
        .stages
        .iter()
        .map(|s| s.gpus.iter().map(|&r| r as usize).collect())
        .collect();
    let largest = pipe
        .micro_sizes(costs.workload.global_batch)
        .first()
        .copied()
        .unwrap_or(1);
    let slices: Vec<Vec<u32>> = pipe
        .stages
        .iter()
        .map(|s| replica_slices(largest, s.dp(), &s.shares))
        .collect();
    let tps: Vec<TensorParallel> = (0..pipe.depth()).map(|s| pipe.tensor(s)).collect();
    let mut rows = Rows::new(costs, &plan.strategy);
    let mut st = staged(costs, &plan.strategy, &mut rows, &groups, &tps, &slices)?;
    if let Checkpointing::Every(_) = plan.strategy.checkpointing {
        // A plan's stages know their blocks: each its own share of
        // recomputed blocks, not the average 1/K.
        for (s, g) in groups.iter().enumerate() {
            let first = pipe.first_block(s);
            let blocks = pipe.stages[s].blocks;
            let full = (first..first + blocks)
                .filter(|&b| plan.strategy.checkpointing.block(b) == Recompute::Full)
                .count() as f64
                / blocks.max(1) as f64;
            let c = stage_cost(
                costs,
                &plan.strategy,
                &mut rows,
                g,
                &slices[s],
                &tps[s],
                Some(full),
            )?;
            st.costs[s] = c.time;
            st.replicas[s] = c.replicas;
        }
    }
    let counts: Vec<u32> = pipe.stages.iter().map(|s| s.blocks).collect();
    let chunk_blocks: Vec<Vec<u32>> = pipe.stages.iter().map(|s| s.chunks.clone()).collect();
    let m = pipe.microbatches;
    let p = pipe.depth();
    let peak_bytes = (0..p)
        .map(|s| {
            let at = place(pipe.schedule, p, s, m, pipe.chunks());
            st.over_bytes(
                costs,
                &plan.strategy,
                s,
                counts[s],
                pipe.rank_held(s, &costs.workload.model, &plan.strategy),
                at,
            )
            .stage_peak_bytes
        })
        .collect();
    Ok(Estimate {
        iteration_ms: estimate_ms(
            costs,
            &plan.strategy,
            &groups,
            &tps,
            &st,
            &counts,
            m,
            Run {
                schedule: pipe.schedule,
                v: pipe.chunks(),
                overlap: pipe.dp_overlap(),
                chunk_blocks: &chunk_blocks,
            },
        ),
        peak_bytes,
    })
}
