//! When a stage's data-parallel group reduces its gradients, and in which
//! pieces (REAL-SYSTEMS-2 sections 2.1, 2.2 and 2.4):
//!
//! * **After the last backward** ([`GradSync::AfterBackward`]): one
//!   reduction of the stage's whole gradient once its last backward is
//!   done, as Megatron-LM runs replicas and its distributed optimizer by
//!   default (`--overlap-grad-reduce` off: a single bucket reduced in
//!   `finalize_model_grads`) and DeepSpeed's pipeline engine does.
//! * **Megatron's buckets** ([`GradSync::Buckets`], `--overlap-grad-reduce`):
//!   the gradient buffer of each model chunk (a stage's blocks, one DDP
//!   module per interleaved chunk) is cut into buckets in backward order,
//!   and each bucket's all-reduce (replicas) or reduce-scatter (the
//!   distributed optimizer) is launched as soon as the last micro-batch's
//!   backward has produced all its gradients, overlapping the rest of that
//!   backward. Only the first pipeline stage's first chunk is cut, into
//!   buckets of `max(40M, 1M x DP)` parameters ([`bucket_params`]);
//!   Megatron turns bucketing off on later stages and chunks ("data-parallel
//!   communication on these stages is not on the critical path"), which
//!   then reduce as one bucket as soon as their last backward ends, under
//!   the backwards still running elsewhere.
//! * **FSDP2 per unit** ([`GradSync::PerUnit`]): torchtitan inside pipeline
//!   stages enables gradient sync for the last micro-batch's backward
//!   only, and FSDP2 reduce-scatters each unit's gradient (embedding,
//!   every block, `[norm, output]`) as soon as that unit's backward of the
//!   last micro-batch is done.
//!
//! Buckets hold whole units (0 the embedding, 1 to `L` the blocks, `L + 1`
//! the head): the simulator runs a block's backward as one op, so a bucket
//! closes at the first unit boundary where it reaches its size; a block
//! larger than a bucket (GPT-3 175B at TP 8 holds 226M parameters per GPU)
//! is one bucket, launched when its backward ends rather than in parts
//! during it. What the lowering ([`crate::lower::pipeline`]) emits and the estimate
//! ([`super::estimate`]) prices both read these buckets.

use crate::plan::pipeline::DpOverlap;
use crate::strategy::Sharding;

/// Parameters of a Megatron gradient bucket at least (its
/// `DistributedDataParallelConfig.bucket_size` default, 40M).
pub const MIN_BUCKET_PARAMS: f64 = 40e6;

/// Parameters per data-parallel rank a Megatron bucket grows by (its
/// default `1M x DP` when that is larger than 40M).
pub const BUCKET_PARAMS_PER_RANK: f64 = 1e6;

/// Parameters of a Megatron gradient bucket over `d` data-parallel ranks:
/// `max(40M, 1M x d)` (`megatron/core/distributed/distributed_data_parallel.py`).
pub fn bucket_params(d: usize) -> f64 {
    MIN_BUCKET_PARAMS.max(BUCKET_PARAMS_PER_RANK * d as f64)
}

/// When a stage reduces its gradients (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradSync {
    /// Once, after the stage's last backward.
    AfterBackward,
    /// Megatron's buckets during the last micro-batch's backward.
    Buckets,
    /// FSDP2's per-unit reduce-scatters during the last micro-batch's backward.
    PerUnit,
}

/// How a pipeline whose stages keep their state under `sharding` reduces
/// gradients with the overlap knobs `overlap`: FSDP /
/// HSDP per unit (at one stage they reshard per unit, which
/// [`super::reshard`] describes, and this rule is not read), replicas and
/// the distributed optimizer in Megatron's buckets when
/// `overlap.grad_reduce`, else once after the last backward.
pub fn grad_sync(sharding: Sharding, overlap: DpOverlap) -> GradSync {
    if sharding.reshards_per_unit() {
        GradSync::PerUnit
    } else if overlap.grad_reduce {
        GradSync::Buckets
    } else {
        GradSync::AfterBackward
    }
}

/// One bucket: the units whose gradients it reduces at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The virtual stage (model chunk) its units belong to.
    pub x: usize,
    /// Its units, in backward order.
    pub units: Vec<u32>,
    /// Parameters one GPU reduces in it (its TP share of the units').
    pub params: f64,
}

/// The buckets of virtual stage `x` (its units `units` in backward order,
/// each with its parameters per GPU) under `sync`, for a data-parallel
/// group of `d` ranks, in the order they fill: none after the last
/// backward; per unit under FSDP2; under Megatron's buckets, virtual
/// stage 0 (the first stage's first chunk) cut at [`bucket_params`] (a
/// bucket closes after the unit that makes it reach the size), every
/// other chunk one bucket.
pub fn chunk_buckets(sync: GradSync, x: usize, units: &[(u32, f64)], d: usize) -> Vec<Bucket> {
    let one = |us: &[(u32, f64)]| Bucket {
        x,
        units: us.iter().map(|u| u.0).collect(),
        params: us.iter().map(|u| u.1).sum(),
    };
    match sync {
        GradSync::AfterBackward => Vec::new(),
        GradSync::PerUnit => units.iter().map(|u| one(std::slice::from_ref(u))).collect(),
        GradSync::Buckets if x > 0 => vec![one(units)],
        GradSync::Buckets => {
            let size = bucket_params(d);
            let mut out = Vec::new();
            let mut from = 0;
            let mut filled = 0.0;
            for (i, u) in units.iter().enumerate() {
                filled += u.1;
                if filled >= size {
                    out.push(one(&units[from..=i]));
                    from = i + 1;
                    filled = 0.0;
                }
            }
            if from < units.len() {
                out.push(one(&units[from..]));
            }
            out
        }
    }
}

/// The buckets of physical stage `s` of `pipe` for a model `model` under
/// `sync`, its chunks in the order their last backwards end (the last
/// chunk first) and each chunk's buckets in the order they fill.
pub fn stage_buckets(
    pipe: &crate::plan::pipeline::Pipeline,
    model: &crate::model::ModelSpec,
    sync: GradSync,
    s: usize,
) -> Vec<Bucket> {
    let p = pipe.depth();
    let tp = pipe.tensor(s);
    let layers = model.layers;
    let d = pipe.stages[s].dp();
    let params = |u: u32| {
        if u == 0 {
            tp.embedding_params(model)
        } else if u == layers + 1 {
            tp.head_params(model)
        } else {
            tp.block_params(model)
        }
    };
    let chunks: Vec<usize> = (s..pipe.virtual_depth()).step_by(p).collect();
    chunks
        .into_iter()
        .rev()
        .flat_map(|x| {
            let bwd = super::schedule::Action::Bwd(0);
            let units: Vec<(u32, f64)> = super::reshard::units(pipe, layers, x, bwd)
                .into_iter()
                .map(|u| (u, params(u)))
                .collect();
            chunk_buckets(sync, x, &units, d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_cuts_only_the_first_chunk_at_its_bucket_size() {
        // Units of 15M, 30M, 30M, 5M parameters, backward order.
        let units = [(4, 15e6), (3, 30e6), (2, 30e6), (1, 5e6)];
        let b = chunk_buckets(GradSync::Buckets, 0, &units, 8);
        // 15 + 30 = 45M >= 40M closes the first bucket; 30 + 5 is left.
        let cut: Vec<Vec<u32>> = b.iter().map(|x| x.units.clone()).collect();
        assert_eq!(cut, vec![vec![4, 3], vec![2, 1]]);
        assert_eq!(b[0].params, 45e6);
        // 1M x 64 replicas = 64M: one bucket of 75M, then 5M.
        assert_eq!(chunk_buckets(GradSync::Buckets, 0, &units, 64).len(), 2);
        assert_eq!(bucket_params(64), 64e6);
        // A later chunk is one bucket; FSDP2 a bucket per unit; the
        // default none.
        assert_eq!(chunk_buckets(GradSync::Buckets, 3, &units, 8).len(), 1);
        assert_eq!(chunk_buckets(GradSync::PerUnit, 3, &units, 8).len(), 4);
        assert!(chunk_buckets(GradSync::AfterBackward, 0, &units, 8).is_empty());
    }

    #[test]
    fn the_rule_follows_the_sharding_and_the_knob() {
        let on = DpOverlap {
            grad_reduce: true,
            param_gather: false,
        };
        let off = DpOverlap::default();
        assert_eq!(grad_sync(Sharding::NoShard, off), GradSync::AfterBackward);
        assert_eq!(grad_sync(Sharding::GradOp, on), GradSync::Buckets);
        assert_eq!(grad_sync(Sharding::Full, off), GradSync::PerUnit);
        assert_eq!(grad_sync(Sharding::Hybrid, off), GradSync::PerUnit);
    }
}
