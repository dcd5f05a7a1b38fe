//! Pipeline parallelism: the model's blocks split into stages of
//! contiguous blocks (the embedding with the first, the head with the
//! last), each stage held by one GPU or a data-parallel group of GPUs
//! (PP x DP), micro-batches flowing through the stages under a GPipe or
//! 1F1B schedule (GPipe, Huang et al. 2019; PipeDream-Flush, Narayanan et al.
//! 2021; DeepSpeed's `TrainSchedule`,
//! PyTorch's `ScheduleGPipe` / `Schedule1F1B`, Megatron's non-interleaved
//! schedule).
//!
//! A [`crate::plan::pipeline::Pipeline`] (its spec lives in [`crate::plan::pipeline`]) is part of a [`crate::plan::Plan`]: the plan's strategy
//! says how each stage's data-parallel group keeps its state (`none`:
//! full replicas, gradients all-reduced once after the last backward, as
//! DeepSpeed's pipeline engine with ZeRO 0; `grad-op`: ZeRO-1 inside the
//! group, the optimizer state sharded, gradients reduce-scattered and the
//! updated parameters all-gathered; `full` / `hybrid`: FSDP / HSDP as
//! torchtitan runs them, with a pipeline each unit gathered once per step
//! and held, at one stage per unit, gathered for its forward and again for
//! its backward, [`reshard`]), which blocks recompute (activation
//! checkpointing), the dtypes and the attention kernel. Gradients
//! accumulate locally over the micro-batches (`no-sync`; at one stage
//! under FSDP / HSDP `sync` reduces every micro-batch's); nothing is
//! offloaded. A one-stage plan over every GPU without TP that runs micro-batch
//! by micro-batch is the data-parallel plan of its per-GPU entries and
//! lowers as one ([`crate::iteration`]), with any data-parallel strategy.
//!
//! Samples: the global batch `B` is split into `m` micro-batches of
//! near-equal size (largest first); inside a stage of `d` GPUs every
//! micro-batch is split near-equally (position `j` takes the `j`-th slice),
//! so the same sample passes every stage. Between stages, each GPU sends
//! the part of its slice each GPU of the next stage holds (one-to-one when
//! the groups are equal, as in Megatron / DeepSpeed PP x DP). The plan's
//! per-GPU entries are derived from the pipeline ([`crate::plan::pipeline::Pipeline::rank_plans`]):
//! batch = samples the GPU computes, micro-batches = `m` (those with a
//! non-empty slice), micro-batch size = its largest slice, state fraction =
//! its share of its stage's state. A GPU in no stage does nothing.
//!
//! `exec`'s stage trainer runs these plans for real (GPipe, 1F1B and
//! interleaved orders from [`schedule::actions`], tensor parallelism
//! inside the stages; ZB-H1 is simulated only), and `cephalo validate`
//! holds its measurements against this lowering.
//!
//! Parts: [`schedule`] (each stage's order of forwards and backwards),
//! [`buckets`] (when and in which pieces a stage's data-parallel group
//! reduces its gradients: after the last backward, Megatron's buckets
//! under `--overlap-grad-reduce`, FSDP2 per unit),
//! [`partition`] (the exact contiguous partition the planners use),
//! [`costs`] (the cost table of an iteration, built before lowering),
//! [`reshard`] (FSDP / HSDP per unit inside a one-stage plan: which use
//! gathers, reshards, reduces),
//! [`crate::lower::pipeline`] (the ops: per block forward / recompute / backward, the
//! point-to-point transfers on the cluster's links, the gradient
//! synchronisation and the optimizer step), [`estimate`] (the planners'
//! closed form, priced from the same table rows).

pub mod buckets;
pub mod costs;
pub mod estimate;
pub mod partition;
pub mod reshard;
pub mod schedule;

use crate::cost::CostModel;
use crate::strategy::{Sharding, Strategy};
use crate::units::GIB;

/// One point-to-point link between the TP ranks of neighbouring stages:
/// sender rank `from` (of its group) feeds receiver rank `to`, handing over
/// `send_share` of its activation buffer and filling `recv_share` of the
/// receiver's; `seq_share` is the share of the sequence it moves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpLink {
    /// Sender's TP rank.
    pub from: usize,
    /// Receiver's TP rank.
    pub to: usize,
    /// Share of the sender's buffer it frees.
    pub send_share: f64,
    /// Share of the receiver's buffer it fills.
    pub recv_share: f64,
    /// Share of the sequence's tokens it carries.
    pub seq_share: f64,
}

/// How a replica's TP group of `from_t` ranks hands a micro-batch slice to
/// the next stage's group of `to_t` (Megatron's `get_tensor_shapes`):
/// with sequence parallelism each rank holds a `1/t` run of the sequence
/// and sends each receiver the part of its run the receiver holds;
/// without, every rank holds the whole activation and receiver `i` takes
/// it from sender `i mod from_t` (rank to rank when the degrees match).
pub fn tp_links(from_t: u32, to_t: u32, sequence_parallel: bool) -> Vec<TpLink> {
    let (ft, tt) = (from_t.max(1) as usize, to_t.max(1) as usize);
    if !sequence_parallel || (ft == 1 && tt == 1) {
        let fans = |i: usize| (0..tt).filter(|r| r % ft == i).count().max(1) as f64;
        return (0..tt)
            .map(|to| TpLink {
                from: to % ft,
                to,
                send_share: 1.0 / fans(to % ft),
                recv_share: 1.0,
                seq_share: 1.0,
            })
            .collect();
    }
    let mut v = Vec::new();
    for from in 0..ft {
        for to in 0..tt {
            // Overlap of [from/ft, (from+1)/ft) and [to/tt, (to+1)/tt), in
            // units of 1/(ft*tt).
            let lo = (from * tt).max(to * ft);
            let hi = ((from + 1) * tt).min((to + 1) * ft);
            if hi > lo {
                let o = (hi - lo) as f64 / (ft * tt) as f64;
                v.push(TpLink {
                    from,
                    to,
                    send_share: o * ft as f64,
                    recv_share: o * tt as f64,
                    seq_share: o,
                });
            }
        }
    }
    v
}

/// Constant GPU memory of a GPU holding `held.params` parameters (its
/// share, under TP and EP) of a stage whose state is split as `held` says,
/// bytes (see [`crate::lower::pipeline::base_device_bytes`]): what the
/// lowering holds constant and the planners' estimate counts. Framework
/// overhead and the fixed workspace, then the training state: replicas
/// (`none`) the whole mixed-precision state and a gradient buffer in
/// `reduce_dtype`; sharded, the state over the `d` GPUs (the routed
/// experts' over the expert-data-parallel group), plus, unless FSDP
/// reshards per unit (`reshards`, one stage:
/// [`crate::plan::pipeline::reshards_after_forward`], the gathered units
/// and gradients then come and go with the ops), the full parameters in
/// `param_dtype` compute reads and the full gradient in `reduce_dtype` it
/// accumulates (ZeRO-1's, and FSDP2's with a pipeline, whose unsharded
/// gradients accumulate in `reduce_dtype`, REAL-SYSTEMS section 2.7).
pub fn state_bytes(
    costs: &CostModel,
    strategy: &Strategy,
    held: crate::plan::pipeline::RankParams,
    reshards: bool,
) -> f64 {
    let st = strategy;
    let p = st.precision(costs.workload.dtype);
    let state = p.gpu_state_bytes_per_param(st.offloads_optimizer());
    let (params, experts) = (held.params - held.experts, held.experts);
    let d = held.width.max(1) as f64;
    let de = held.expert_width.max(1) as f64;
    let mut b = costs.overhead_gib() * GIB + costs.activations.fixed_bytes;
    b += match st.sharding {
        Sharding::NoShard => (state + p.grads.bytes()) * params,
        _ if reshards => state * params / d,
        _ => state * params / d + (p.params.bytes() + p.grads.bytes()) * params,
    };
    if experts > 0.0 {
        b += match st.sharding {
            Sharding::NoShard => (state + p.grads.bytes()) * experts,
            _ if reshards => state * experts / de,
            _ => state * experts / de + (p.params.bytes() + p.grads.bytes()) * experts,
        };
    }
    b
}
