//! The inputs of the calibrated model: the GPU's catalog facts (peaks,
//! bandwidth, board power) and the block's work on it ([`BlockWork`]) for
//! one (GPU, model, tokens per sample, dtype, micro-batch, TP rank,
//! implementation) query, and the shape terms of the memory model; nothing
//! here is fitted. Units: FLOP, elements, bytes, FLOP/s, B/s, W.

use super::arch::{power_and_cycle_flops, ArchClass, MathPath};
pub use super::work::{family_index, FAMILIES};
use super::work::{BlockImpl, BlockWork};
use crate::gpu::GpuSpec;
use crate::model::{Family, ModelSpec};
use crate::precision::NumFormat;
use crate::tensor::TensorParallel;

/// What the pricing needs to know about the GPU a block runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuFacts {
    /// GPU generation.
    pub class: ArchClass,
    /// Math path of the dtype on this GPU.
    pub path: MathPath,
    /// Dense peak of that path, FLOP/s.
    pub peak_flops: f64,
    /// Memory bandwidth, B/s.
    pub bw_bps: f64,
    /// Board power, W (infinite when the catalog has no power or clock).
    pub power_w: f64,
    /// FLOP per clock cycle on this math path (`peak / boost clock`).
    pub cycle_flops: f64,
    /// Process node of the GPU's chip, nm ([`ArchClass::process_nm`]).
    pub node_nm: f64,
    /// Streaming multiprocessors ([`GpuSpec::sms`]).
    pub sms: f64,
}

impl GpuFacts {
    /// The facts of `gpu` running `dtype`; `None` when the GPU has no peak
    /// for the dtype.
    pub fn new(gpu: &GpuSpec, dtype: NumFormat) -> Option<GpuFacts> {
        let peak = gpu.peak_tflops(dtype)?;
        // Without power or clock the cap never binds (infinite watts); the
        // cycle count then only needs to be finite.
        let (power_w, cycle_flops) =
            power_and_cycle_flops(gpu, dtype).unwrap_or((f64::INFINITY, peak * 1e12 / 1.5e9));
        Some(GpuFacts {
            class: ArchClass::of(gpu),
            path: MathPath::of(gpu, dtype),
            peak_flops: peak * 1e12,
            bw_bps: gpu.mem_bw_gbps * 1e9,
            power_w,
            cycle_flops,
            node_nm: ArchClass::of(gpu).process_nm(),
            sms: gpu.sms(),
        })
    }
}

/// One query of the time model: the GPU and the block's work on it.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeFeat {
    /// The GPU.
    pub gpu: GpuFacts,
    /// The work of the block pass on one rank ([`BlockWork`]).
    pub work: BlockWork,
}

impl TimeFeat {
    /// Features of a query: one rank of `tp` running a block of `model` on
    /// `m` samples of `tokens_per_sample` tokens in `dtype`, implemented
    /// as `imp`; `None` when the GPU has no peak for the dtype.
    pub fn new(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tokens_per_sample: u32,
        dtype: NumFormat,
        m: u32,
        tp: &TensorParallel,
        imp: BlockImpl,
    ) -> Option<TimeFeat> {
        Some(TimeFeat {
            gpu: GpuFacts::new(gpu, dtype)?,
            work: BlockWork::new(model, tokens_per_sample, dtype, m.max(1), tp, imp),
        })
    }

    /// The whole block as the reference profiles measure it (PyTorch
    /// eager, eager attention, no TP).
    pub fn reference(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tokens_per_sample: u32,
        dtype: NumFormat,
        m: u32,
    ) -> Option<TimeFeat> {
        TimeFeat::new(
            gpu,
            model,
            tokens_per_sample,
            dtype,
            m,
            &TensorParallel::NONE,
            BlockImpl::REFERENCE,
        )
    }
}

/// Shape terms of the non-state memory of one training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemFeat {
    /// Micro-batch size.
    pub m: f64,
    /// Parameters of one block.
    pub block_params: f64,
    /// Parameters of the embedding and head units.
    pub edge_params: f64,
    /// `s * h` per sample.
    pub elem_hidden: f64,
    /// `s * ffn` per sample.
    pub elem_ffn: f64,
    /// `heads * s^2` per sample.
    pub elem_scores: f64,
    /// `s * vocab` per sample (logits; ViT: classes, tiny).
    pub elem_logits: f64,
    /// Bytes of one activation element.
    pub act_bytes: f64,
}

impl MemFeat {
    /// Features of a model at `tokens_per_sample`, `dtype`, micro-batch `m`.
    pub fn new(model: &ModelSpec, tokens_per_sample: u32, dtype: NumFormat, m: u32) -> MemFeat {
        let s = model.tokens_per_sample(tokens_per_sample) as f64;
        let logits_per_sample = match model.family {
            Family::Vit => model.vocab as f64,
            _ => s * model.vocab as f64,
        };
        MemFeat {
            m: m as f64,
            block_params: model.params_per_block() as f64,
            edge_params: (model.embedding_params() + model.head_params()) as f64,
            elem_hidden: s * model.hidden as f64,
            elem_ffn: s * model.mlp_width_per_token(),
            elem_scores: model.heads as f64 * s * s,
            elem_logits: logits_per_sample,
            act_bytes: dtype.bytes(),
        }
    }
}
