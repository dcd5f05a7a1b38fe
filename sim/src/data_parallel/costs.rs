//! The cost table of an iteration, read instead of the cost model while
//! lowering: per (GPU type, micro-batch size) what one micro-batch's steps
//! take ([`Micro`]: compute durations, activation bytes and the host copies
//! an offloading rank issues), and per rank what its iteration adds
//! ([`RankCosts`]: the optimizer step and an offloaded optimizer's copies).
//! A [`super::Description`] tabulates both once from the
//! [`CostModel`] before anything is lowered; the event simulation, the
//! fast model and the planners' closed form read the same rows
//! ([`super::Routine::micro`]).
//!
//! Units: durations [`SimTime`] (ns, rounded from the cost model's ms by
//! [`dur`]), memory bytes.

use super::phase::Rules;
use crate::activation::BlockActivations;
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::perfmodel::BlockImpl;
use crate::strategy::Recompute;
use crate::tensor::TensorParallel;
use crate::units::SimTime;

/// A duration in ms as engine time: 0 for zero or negative, and an
/// infinite or NaN one (a zero bandwidth, a broken fit) saturates at
/// [`SimTime::MAX`], which the engine reports as an error rather than
/// ever shortening it.
pub fn dur(ms: f64) -> SimTime {
    if ms.is_nan() || ms == f64::INFINITY {
        SimTime::MAX
    } else if ms > 0.0 {
        SimTime::from_ms(ms)
    } else {
        SimTime::ZERO
    }
}

/// Bytes as an integer: rounded, saturating at the `i64` range (an
/// infinite or NaN size reads as the largest, never as 0).
pub(crate) fn round(b: f64) -> i64 {
    if b.is_nan() {
        i64::MAX
    } else {
        // `as` saturates (and maps infinities to the range's ends).
        b.round() as i64
    }
}

/// Index of a block recompute policy in per-policy tables.
pub(crate) fn policy_index(r: Recompute) -> usize {
    match r {
        Recompute::Full => 0,
        Recompute::Selective => 1,
        Recompute::None => 2,
    }
}

/// The recompute policies, in [`policy_index`] order.
const POLICIES: [Recompute; 3] = [Recompute::Full, Recompute::Selective, Recompute::None];

/// The host copies of one micro-batch's steps on an offloading rank
/// (zero where the routine copies nothing).
#[derive(Debug, Clone, Copy, Default)]
pub struct Copies {
    /// One block output `C` (the head's input and the activation
    /// gradients that go through the host).
    pub(crate) out: SimTime,
    /// A block forward's output and what its policy keeps, per policy.
    pub(crate) fwd: [SimTime; 3],
    /// The last block's forward when the head input stays on the GPU:
    /// what its policy keeps, per policy.
    pub(crate) fwd_last: [SimTime; 3],
    /// A block backward's copy back: its input, what it kept and (under
    /// [`Rules::offload_gradients`]) its output gradient, per policy.
    pub(crate) bwd: [SimTime; 3],
}

/// Durations and activation bytes of one micro-batch size on one GPU type.
#[derive(Debug, Clone, Copy)]
pub struct Micro {
    pub(crate) f_blk: SimTime,
    pub(crate) b_blk: SimTime,
    pub(crate) re_full: SimTime,
    pub(crate) re_sel: SimTime,
    pub(crate) f_emb: SimTime,
    pub(crate) b_emb: SimTime,
    pub(crate) f_head: SimTime,
    pub(crate) b_head: SimTime,
    /// Anchored activation sizes of the micro-batch (bytes).
    pub act: BlockActivations,
    /// Physical bytes of one block output (what copies move per `C`).
    pub(crate) out_phys: f64,
    /// Physical over anchored bytes (copies move physical bytes).
    pub(crate) phys_per_byte: f64,
    /// Its steps' host copies ([`step_costs`]; zero from [`micro_costs`]).
    pub(crate) copies: Copies,
}

impl Micro {
    /// What a block of recompute policy `r` keeps beyond its input, bytes.
    pub(crate) fn internal(&self, r: Recompute) -> i64 {
        round((self.act.kept(r) - self.act.checkpoint).max(0.0))
    }
}

/// Costs of one micro-batch of `m` samples on `rank`'s GPU type, without
/// host copies (pipelines, which never offload).
pub(crate) fn micro_costs(
    costs: &CostModel,
    rank: usize,
    m: u32,
    imp: BlockImpl,
    core: bool,
) -> Result<Micro, PlanError> {
    micro_costs_tp(costs, rank, m, imp, core, &TensorParallel::NONE)
}

/// [`micro_costs`] of one rank of the TP group `tp` (pipelines and 3D
/// plans): its share of every block ([`CostModel::block_ms_tp`]), its
/// activations ([`crate::cost::ActivationModel::micro_tp`]), a block
/// output of `1/t` of the tokens with sequence parallelism, and the
/// vocabulary-parallel embedding and head at `1/t` of their work.
pub(crate) fn micro_costs_tp(
    costs: &CostModel,
    rank: usize,
    m: u32,
    imp: BlockImpl,
    core: bool,
    tp: &TensorParallel,
) -> Result<Micro, PlanError> {
    let (f, b) = costs
        .block_ms_tp(rank, m, imp, tp)
        .map_err(|why| PlanError::invalid(crate::error::STRATEGY, "attention", why))?;
    let sel = costs.selective_recompute_ms_tp(rank, m, imp, core, f, tp);
    let act = costs
        .activations
        .micro_tp(m, imp.attention, imp.fused(), tp)
        .for_selective(core);
    let t = tp.degree.max(1) as f64;
    let out_phys = costs.block_output_bytes(m) / if tp.sequence_parallel { t } else { 1.0 };
    Ok(Micro {
        f_blk: dur(f),
        b_blk: dur(b),
        re_full: dur(f),
        re_sel: dur(sel),
        f_emb: dur(costs.embed_fwd_ms(rank, m, imp, tp)),
        b_emb: dur(costs.embed_bwd_ms(rank, m, imp, tp)),
        f_head: dur(costs.head_fwd_ms(rank, m, imp, tp)),
        b_head: dur(costs.head_bwd_ms(rank, m, imp, tp)),
        act,
        out_phys,
        phys_per_byte: if act.checkpoint > 0.0 {
            out_phys / act.checkpoint
        } else {
            0.0
        },
        copies: Copies::default(),
    })
}

/// [`micro_costs`] with the host copies an offloading rank's steps issue
/// under `rules` (what [`super::Routine::step`] reads).
pub(crate) fn step_costs(
    costs: &CostModel,
    rank: usize,
    m: u32,
    imp: BlockImpl,
    core: bool,
    rules: Rules,
) -> Result<Micro, PlanError> {
    let mut mc = micro_costs(costs, rank, m, imp, core)?;
    let c = round(mc.act.checkpoint);
    let copy = |bytes: i64| dur(costs.host_copy_ms(rank, bytes as f64 * mc.phys_per_byte));
    let out = dur(costs.host_copy_ms(rank, mc.out_phys));
    let grads = if rules.offload_gradients { c } else { 0 };
    let mut copies = Copies {
        out,
        ..Copies::default()
    };
    for (i, &r) in POLICIES.iter().enumerate() {
        let internal = mc.internal(r);
        copies.fwd[i] = if internal == 0 {
            out
        } else {
            copy(c + internal)
        };
        copies.fwd_last[i] = if c == 0 && internal == 0 {
            out
        } else {
            copy(internal)
        };
        copies.bwd[i] = if internal == 0 {
            if grads > 0 {
                dur(costs.host_copy_ms(rank, 2.0 * mc.out_phys))
            } else {
                out
            }
        } else {
            copy(c + internal + grads)
        };
    }
    mc.copies = copies;
    Ok(mc)
}

/// What one rank's iteration costs beyond its micro-batches' steps.
#[derive(Debug, Clone, Default)]
pub struct RankCosts {
    /// Its optimizer step: on the GPU, or on the host when offloaded.
    pub optimizer: SimTime,
    /// Offloaded optimizer: the copy of the updated parameters back to the
    /// GPU (zero otherwise).
    pub params_up: SimTime,
    /// Offloaded optimizer: per unit, the copy of the reduced gradient
    /// shard to the host (empty otherwise).
    pub grads_down: Vec<SimTime>,
}
