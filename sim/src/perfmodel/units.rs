//! The work of the units around the blocks on one TP rank: the head
//! (final norm, LM head or classifier, loss) and the embedding, as
//! [`PassWork`]s priced like a block's ([`super::price`]).
//!
//! * **Head** forward: the final norm on the tokens (fused or per op, as
//!   [`super::work`]), the output GEMM `(T, V/t, h)` (BERT's MLM transform
//!   `(T, h, h)` before it; ViT's classifier on the class token only), and
//!   the loss over the `T x V/t` logits: PyTorch casts them to fp32 and
//!   runs `log_softmax` (`2 + 4` and `4 + 4` bytes per logit), Megatron's
//!   vocabulary-parallel cross-entropy casts, takes the max, subtracts,
//!   exponentiates, sums and normalises in place (`6 + 4 + 8 + 8 + 4 + 8`
//!   bytes per logit, `megatron/core/tensor_parallel/cross_entropy.py`).
//!   Backward: the loss gradient (PyTorch: `nll_loss` and `log_softmax`
//!   backward and the cast back, `4 + 12 + 6`; Megatron: the in-place
//!   `softmax - onehot` and the cast, `8 + 6`), the input-gradient and
//!   weight-gradient GEMMs, the norm's backward.
//! * **Embedding** forward: the row gather (`2e` bytes per token and
//!   hidden unit), GPT/BERT's learned positions added (`3e`) and dropout
//!   (`2e + 1`); ViT's patch convolution is a GEMM `(patches, h, 3p^2)`.
//!   Backward: the dense gradient of the table (`embedding_dense_backward`:
//!   the rank's table zeroed in fp32, `4 V h / t` bytes, and the rows
//!   accumulated, `3e` per token and hidden unit); ViT's patch weight
//!   gradient GEMM.

use super::work::{BlockImpl, Gemm, PassWork};
use crate::model::{Family, ModelSpec};
use crate::precision::NumFormat;
use crate::stack::Stack;
use crate::tensor::TensorParallel;

/// Channels of a ViT input image.
const VIT_CHANNELS: f64 = 3.0;

fn gemm(m: f64, n: f64, k: f64, out_bytes: f64) -> Gemm {
    Gemm {
        m,
        n,
        k,
        count: 1.0,
        out_bytes,
    }
}

/// Forward and backward work of the head on one rank of `tp` for `m`
/// samples of `tokens_per_sample` tokens.
pub fn head_work(
    model: &ModelSpec,
    tokens_per_sample: u32,
    dtype: NumFormat,
    m: u32,
    tp: &TensorParallel,
    imp: BlockImpl,
) -> (PassWork, PassWork) {
    let e = dtype.bytes();
    let t = tp.degree.max(1) as f64;
    let s = model.tokens_per_sample(tokens_per_sample) as f64;
    let (h, v) = (model.hidden as f64, model.vocab as f64);
    let tokens = m.max(1) as f64 * s;
    let fused = imp.fused();
    let wgrad_out = if imp.stack.fuses_weight_grad_accumulation() {
        8.0
    } else {
        e
    };
    // The final norm, on 1/t of the tokens with sequence parallelism.
    let norm_tokens = if tp.sequence_parallel {
        tokens / t
    } else {
        tokens
    };
    let (norm_f, norm_b) = match (model.family.is_llama_like(), fused) {
        (true, false) if e < 4.0 => (h * (4.0 * e + 28.0), 2.0 * h * (4.0 * e + 28.0)),
        (true, false) => (28.0 * h, 56.0 * h),
        _ => (2.0 * h * e + 8.0, 3.0 * h * e + 8.0),
    };
    let mut fwd = PassWork {
        elem_bytes: norm_f * norm_tokens,
        kernels: if fused { 1.0 } else { 6.0 },
        ..PassWork::default()
    };
    let mut bwd = PassWork {
        elem_bytes: norm_b * norm_tokens,
        kernels: if fused { 2.0 } else { 8.0 },
        ..PassWork::default()
    };
    // Rows the output layer sees and the vocabulary shard it computes.
    let (rows, out) = match model.family {
        Family::Vit => (m.max(1) as f64, v),
        _ => (tokens, v / t),
    };
    if model.family == Family::Bert {
        fwd.gemms.push(gemm(tokens, h, h, e));
        bwd.gemms.push(gemm(tokens, h, h, e));
        bwd.gemms.push(gemm(h, h, tokens, wgrad_out));
    }
    fwd.gemms.push(gemm(rows, out, h, e));
    bwd.gemms.push(gemm(rows, h, out, e));
    bwd.gemms.push(gemm(h, out, rows, wgrad_out));
    let (loss_f, loss_b, kf, kb) = match imp.stack {
        Stack::Megatron => (38.0, 14.0, 6.0, 2.0),
        Stack::PyTorch => (14.0, 22.0, 2.0, 3.0),
    };
    fwd.elem_bytes += loss_f * rows * out;
    bwd.elem_bytes += loss_b * rows * out;
    fwd.kernels += kf + fwd.gemms.len() as f64;
    bwd.kernels += kb + bwd.gemms.len() as f64;
    (fwd, bwd)
}

/// Forward and backward work of the embedding on one rank of `tp` for
/// `m` samples of `tokens_per_sample` tokens.
pub fn embedding_work(
    model: &ModelSpec,
    tokens_per_sample: u32,
    dtype: NumFormat,
    m: u32,
    tp: &TensorParallel,
) -> (PassWork, PassWork) {
    let e = dtype.bytes();
    let t = tp.degree.max(1) as f64;
    let s = model.tokens_per_sample(tokens_per_sample) as f64;
    let h = model.hidden as f64;
    let samples = m.max(1) as f64;
    let tokens = samples * s;
    if model.family == Family::Vit {
        let patches = (s - 1.0).max(1.0) * samples;
        let p = model.patch_size.unwrap_or(16) as f64;
        let k = VIT_CHANNELS * p * p;
        let fwd = PassWork {
            gemms: vec![gemm(patches, h, k, e)],
            elem_bytes: 3.0 * e * tokens * h,
            kernels: 3.0,
            ..PassWork::default()
        };
        let bwd = PassWork {
            gemms: vec![gemm(k, h, patches, e)],
            elem_bytes: 3.0 * e * tokens * h,
            kernels: 3.0,
            ..PassWork::default()
        };
        return (fwd, bwd);
    }
    let mut per_token = 2.0 * e;
    if model.family.learned_positions() {
        per_token += 3.0 * e;
    }
    if model.family.has_dropout() {
        per_token += 2.0 * e + 1.0;
    }
    let fwd = PassWork {
        elem_bytes: per_token * tokens * h,
        kernels: 3.0,
        ..PassWork::default()
    };
    let table = model.vocab as f64 * h / t;
    let bwd = PassWork {
        elem_bytes: 4.0 * table + 3.0 * e * tokens * h,
        kernels: 3.0,
        ..PassWork::default()
    };
    (fwd, bwd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelCatalog;
    use crate::strategy::Attention;

    #[test]
    fn the_head_gemm_is_the_models_and_splits_over_tp() {
        let m = ModelCatalog::builtin().get("llama3-8b").unwrap();
        let imp = BlockImpl::pytorch(Attention::Flash);
        let (f, b) = head_work(m, 4096, NumFormat::Bf16, 2, &TensorParallel::NONE, imp);
        let flops: f64 = f.gemms.iter().map(Gemm::flops).sum();
        assert!((flops / (m.head_flops_fwd(4096) * 2.0) - 1.0).abs() < 1e-12);
        let bflops: f64 = b.gemms.iter().map(Gemm::flops).sum();
        assert!((bflops / (2.0 * flops) - 1.0).abs() < 1e-12);
        let (f8, _) = head_work(
            m,
            4096,
            NumFormat::Bf16,
            2,
            &TensorParallel::new(8, true),
            imp,
        );
        let flops8: f64 = f8.gemms.iter().map(Gemm::flops).sum();
        assert!((flops8 * 8.0 / flops - 1.0).abs() < 1e-12);
        assert!(f8.elem_bytes * 8.0 <= f.elem_bytes * 1.0001);
    }
}
