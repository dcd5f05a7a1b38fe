//! The closed form of a pipeline iteration the planners search with
//! (the simulator then confirms their best candidates). It reads the same
//! per-block costs and activation sizes as the lowering ([`super::lower`]):
//!
//! * **Stage time** per micro-batch `t_s`: its blocks' forward, recompute
//!   and backward, plus the embedding (first) or head (last), on the GPU
//!   of its group with the largest slice (the slowest, for a tie).
//! * **Period** of a stage: the larger of `t_s` and the time its
//!   communication stream needs per micro-batch (activations out, input
//!   gradients back): a link slower than the stage paces the pipeline.
//! * **Iteration** (Metis' `HeteroCostEstimator` shape, REAL-SYSTEMS.md
//!   6.3): `sum_s t_s + (m - 1) max_s period_s + sum_boundaries (fwd +
//!   bwd transfer) + max_s (gradient sync + optimizer)`. With identical
//!   stages and free communication this is the simulator's
//!   `(m + p - 1) t`.
//! * **Peak memory** of a stage GPU: its constant memory
//!   ([`state_bytes`]), `f` in-flight micro-batches (GPipe `m`, 1F1B
//!   `min(p - s, m)`) times its blocks' held activations (input plus what
//!   the policy keeps), one transfer buffer, and the largest transient of
//!   one op (a backward's working gradients and regenerated activations,
//!   the head's logits). Held against the simulator's peak by the tests.

use crate::cost::CostModel;
use crate::error::PlanError;
use crate::schedule::micro_costs;
use crate::strategy::{Checkpointing, Recompute, Sharding, Strategy};
use crate::units::GIB;

/// Constant GPU memory of a GPU holding `params` parameters of a stage
/// whose group has `d` GPUs, bytes (see [`super::lower::base_device_bytes`]).
pub fn state_bytes(costs: &CostModel, strategy: &Strategy, params: f64, d: usize) -> f64 {
    let st = strategy;
    let d = d.max(1) as f64;
    let mut b = costs.options.overhead_gib * GIB + costs.activations.fixed_bytes;
    b += match st.sharding {
        Sharding::NoShard => (st.gpu_state_bytes_per_param() + st.reduce_dtype.bytes()) * params,
        _ => {
            st.gpu_state_bytes_per_param() * params / d
                + (st.param_dtype.bytes() + st.reduce_dtype.bytes()) * params
        }
    };
    b
}

/// What one stage group costs per micro-batch, per block and fixed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupCost {
    /// Forward + recompute + backward of one block, ms (slowest GPU).
    pub block_ms: f64,
    /// Embedding forward + backward, ms (when the group is the first stage).
    pub embed_ms: f64,
    /// Head forward + backward, ms (when the group is the last stage).
    pub head_ms: f64,
    /// Bytes one block holds per in-flight micro-batch (its input plus
    /// what the policy keeps).
    pub held_bytes: f64,
    /// Largest transient of one block's forward or backward, bytes.
    pub block_work_bytes: f64,
    /// The head's working memory, bytes.
    pub head_work_bytes: f64,
    /// A block's input (one transfer buffer), bytes.
    pub input_bytes: f64,
    /// Usable memory of the group's smallest GPU, bytes.
    pub usable_bytes: f64,
    /// Physical bytes of one slice's activations (what a transfer moves).
    pub transfer_bytes: f64,
}

/// The costs of a group of GPUs `ranks` each computing at most `n`
/// samples of a micro-batch under `strategy` (uniform checkpointing:
/// every block as block 1 of the policy; `every:K` averaged).
pub fn group_cost(
    costs: &CostModel,
    strategy: &Strategy,
    ranks: &[usize],
    n: u32,
) -> Result<GroupCost, PlanError> {
    let ck = strategy.checkpointing;
    // Fraction of blocks recomputed in full (every:K: 1/K), selective.
    let (full, selective) = match ck {
        Checkpointing::None => (0.0, false),
        Checkpointing::Full => (1.0, false),
        Checkpointing::Selective => (0.0, true),
        Checkpointing::Every(k) => (1.0 / k.max(1) as f64, false),
    };
    let mut out: Option<GroupCost> = None;
    for &r in ranks {
        let mc = micro_costs(costs, r, n, strategy.attention)?;
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
            embed_ms: ms(mc.f_emb) + ms(mc.b_emb),
            head_ms: ms(mc.f_head) + ms(mc.b_head),
            held_bytes: held,
            block_work_bytes: work,
            head_work_bytes: a.head_work + a.checkpoint,
            input_bytes: a.checkpoint,
            usable_bytes: costs.usable_gib(r) * GIB,
            transfer_bytes: costs.block_output_bytes(n),
        };
        out = Some(match out {
            None => g,
            Some(o) => GroupCost {
                block_ms: o.block_ms.max(g.block_ms),
                embed_ms: o.embed_ms.max(g.embed_ms),
                head_ms: o.head_ms.max(g.head_ms),
                usable_bytes: o.usable_bytes.min(g.usable_bytes),
                ..o
            },
        });
    }
    out.ok_or_else(|| PlanError::invalid("plan", "pipeline.stages[].gpus", "a stage needs a GPU"))
}

/// Where a stage sits: first, last, in-flight micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Holds the embedding.
    pub first: bool,
    /// Holds the head.
    pub last: bool,
    /// Micro-batches whose activations it holds at once.
    pub in_flight: u32,
}

/// Per-micro-batch time of a stage of `blocks` blocks, ms.
pub fn stage_ms(g: &GroupCost, blocks: u32, at: Place) -> f64 {
    blocks as f64 * g.block_ms
        + if at.first { g.embed_ms } else { 0.0 }
        + if at.last { g.head_ms } else { 0.0 }
}

/// Estimated peak GPU memory of a stage GPU, bytes: constant memory for
/// `params` parameters in a group of `d`, plus activations (module docs).
pub fn stage_peak_bytes(
    costs: &CostModel,
    strategy: &Strategy,
    g: &GroupCost,
    blocks: u32,
    params: f64,
    d: usize,
    at: Place,
) -> f64 {
    let held = at.in_flight as f64 * blocks as f64 * g.held_bytes;
    let work = if at.last {
        g.block_work_bytes.max(g.head_work_bytes)
    } else {
        g.block_work_bytes
    };
    state_bytes(costs, strategy, params, d) + held + g.input_bytes + work
}
