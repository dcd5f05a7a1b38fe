//! Shape-derived work of one block pass: the inputs of the calibrated model.
//!
//! Everything here is catalog facts (GPU peaks, bandwidth, board power) and
//! model shapes (FLOPs, element counts, parameters) for one
//! (GPU, model, tokens per sample, dtype, micro-batch) query; nothing is
//! fitted. Units: FLOP, elements, bytes, FLOP/s, B/s, W.

use super::arch::{power_and_cycle_flops, ArchClass, MathPath};
use crate::dtype::Dtype;
use crate::gpu::GpuSpec;
use crate::model::{Family, ModelSpec};

/// Block families with their own attention/elementwise coefficients
/// (Mistral shares LLaMA's block).
pub const FAMILIES: [&str; 4] = ["gpt", "bert", "vit", "llama"];

/// Index of a model family into [`FAMILIES`].
pub fn family_index(f: Family) -> usize {
    match f {
        Family::Gpt => 0,
        Family::Bert => 1,
        Family::Vit => 2,
        Family::Llama | Family::Mistral => 3,
    }
}

/// Work of one block forward for a micro-batch, plus the GPU it runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeFeat {
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
    /// Model width h.
    pub hidden: f64,
    /// Tokens in the micro-batch (`m * s`).
    pub tokens: f64,
    /// Tokens per sample `s` (the attention kernels' sequence length).
    pub seq_tokens: f64,
    /// Attention head dimension (`hidden / heads`).
    pub head_dim: f64,
    /// Share of the linear matmul FLOPs op-level selective recompute reruns
    /// ([`crate::activation::recomputed_matmul_fraction`]).
    pub rerun_matmul_fraction: f64,
    /// Matmul FLOPs of the forward (projections, MLP, `QK^T`, `AV`).
    pub flops: f64,
    /// The part of `flops` in the attention scores and weighted values
    /// (`QK^T`, `AV`: `m * 4 * s^2 * h`), over the full square.
    pub score_flops: f64,
    /// Causal attention (GPT, LLaMA, Mistral): a fused kernel skips the
    /// masked half of `score_flops`.
    pub causal: bool,
    /// Activation traffic of the forward (bytes), from the model's shapes
    /// (`m * ModelSpec::block_activation_io_bytes_fwd`).
    pub act_io_bytes: f64,
    /// The part of `act_io_bytes` that moves `heads x s x s` score tensors
    /// (bytes; [`score_io_bytes_per_sample`] times `m`).
    pub score_io_bytes: f64,
    /// The part of `act_io_bytes` moved by element-wise ops (norms,
    /// activations, dropout, residuals, rotary;
    /// [`ModelSpec::block_pointwise_io_bytes_fwd`] times `m`).
    pub pointwise_io_bytes: f64,
    /// Mask-shaped elements: `m * s^2`.
    pub elem_mask: f64,
    /// Family index into [`FAMILIES`].
    pub family: usize,
    /// Whether the compute dtype is 16-bit (fp16/bf16 autocast).
    pub half: bool,
    /// Bytes of one activation element (2 or 4).
    pub act_bytes: f64,
    /// Parameters of the block.
    pub params: f64,
}

impl TimeFeat {
    /// Features of a query; `None` when the GPU has no peak for the dtype.
    pub fn new(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tokens_per_sample: u32,
        dtype: Dtype,
        m: u32,
    ) -> Option<TimeFeat> {
        let peak = gpu.peak_tflops(dtype)?;
        let s = model.tokens_per_sample(tokens_per_sample) as f64;
        let m = m as f64;
        let h = model.hidden as f64;
        // Without power or clock the cap never binds (infinite watts); the
        // cycle count then only needs to be finite.
        let (power_w, cycle_flops) =
            power_and_cycle_flops(gpu, dtype).unwrap_or((f64::INFINITY, peak * 1e12 / 1.5e9));
        Some(TimeFeat {
            class: ArchClass::of(gpu),
            path: MathPath::of(gpu, dtype),
            peak_flops: peak * 1e12,
            bw_bps: gpu.mem_bw_gbps * 1e9,
            power_w,
            cycle_flops,
            node_nm: ArchClass::of(gpu).process_nm(),
            hidden: h,
            tokens: m * s,
            seq_tokens: s,
            head_dim: model.head_dim() as f64,
            rerun_matmul_fraction: crate::activation::recomputed_matmul_fraction(model),
            flops: m * (2.0 * model.block_matmul_params() as f64 * s + 4.0 * s * s * h),
            score_flops: m * 4.0 * s * s * h,
            causal: model.family.is_causal(),
            act_io_bytes: m * model.block_activation_io_bytes_fwd(tokens_per_sample, dtype),
            score_io_bytes: m * score_io_bytes_per_sample(model, tokens_per_sample, dtype),
            pointwise_io_bytes: m * model.block_pointwise_io_bytes_fwd(tokens_per_sample, dtype),
            elem_mask: m * s * s,
            family: family_index(model.family),
            half: dtype != Dtype::Fp32,
            act_bytes: dtype.bytes(),
            params: model.params_per_block() as f64,
        })
    }
}

impl TimeFeat {
    /// The work of one rank of a TP group of `t` GPUs running this block
    /// (Megatron's split, [`crate::tensor`]): matmul and attention FLOPs,
    /// weights and the split layers' activation traffic over `t`; the
    /// element-wise traffic (norms, dropout, residuals) over `t` only with
    /// sequence parallelism (`sp`), else replicated. The GEMM width the
    /// rate saturates on becomes `h / sqrt(t)`: the fitted width term
    /// describes square-ish block GEMMs (`K = N = h`), and a TP rank's
    /// column- or row-parallel GEMM keeps one of the two at `h` and cuts
    /// the other by `t`, so their geometric mean stands for its size. The
    /// token count (`m * s`) is unchanged: every rank sees the whole
    /// micro-batch.
    pub fn tensor_sliced(mut self, t: u32, sp: bool) -> TimeFeat {
        // The whole block is itself, bit for bit.
        if t <= 1 {
            return self;
        }
        let t = t as f64;
        let pointwise = self.pointwise_io_bytes;
        let split_io = self.act_io_bytes - pointwise;
        let pointwise = if sp { pointwise / t } else { pointwise };
        self.act_io_bytes = split_io / t + pointwise;
        self.pointwise_io_bytes = pointwise;
        self.score_io_bytes /= t;
        self.flops /= t;
        self.score_flops /= t;
        self.params /= t;
        self.hidden /= t.sqrt();
        self
    }
}

/// Bytes of the forward's score-shaped (`heads x s x s`) traffic for ONE
/// sample, as [`ModelSpec::block_activation_io_bytes_fwd`] counts it for
/// eager attention: LLaMA-like `a*s^2*(4e + (e + 4) + (4 + e if e < 4))`
/// (QK^T write, scale+mask, AV read; softmax to fp32; cast back), others
/// `a*s^2*(e*(6 + 2 if dropout) + 1 if dropout)` (QK^T write, scale+mask,
/// softmax, AV read, dropout; `e` = activation bytes).
pub fn score_io_bytes_per_sample(model: &ModelSpec, tokens_per_sample: u32, dtype: Dtype) -> f64 {
    let e = dtype.bytes();
    let s = model.tokens_per_sample(tokens_per_sample) as f64;
    let scores = model.heads as f64 * s * s;
    if model.family.is_llama_like() {
        let mut b = scores * e * 4.0 + scores * (e + 4.0);
        if e < 4.0 {
            b += scores * (4.0 + e);
        }
        b
    } else if model.family.has_dropout() {
        scores * (8.0 * e + 1.0)
    } else {
        scores * 6.0 * e
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
    pub fn new(model: &ModelSpec, tokens_per_sample: u32, dtype: Dtype, m: u32) -> MemFeat {
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
            elem_ffn: s * model.ffn as f64,
            elem_scores: model.heads as f64 * s * s,
            elem_logits: logits_per_sample,
            act_bytes: dtype.bytes(),
        }
    }
}
