//! Activation memory of one transformer block, tensor by tensor: what a
//! block keeps from its forward to its backward under each recompute policy
//! and attention kernel, and the transient working memory of its passes and
//! of the head. Units: bytes per SAMPLE (one sequence of
//! `tokens_per_sample` tokens); a micro-batch of `m` samples needs `m` times.
//!
//! Symbols: `s` tokens, `h` width, `kv` key/value width, `f` MLP width, `a`
//! heads, `V` vocabulary, `e` bytes of the compute dtype (2 for fp16/bf16,
//! 4 for fp32). The lists follow the autograd graph of the public block
//! implementations (Megatron/DeepSpeed GPT, HF/Meta/torchtitan LLaMA);
//! Korthikanti et al. 2022 (arXiv 2205.05198) section 4 is the classic
//! accounting this generalises.
//!
//! # Kept tensors per block
//!
//! * **`checkpoint`** (full recompute): the block input, `e*s*h`.
//! * **`none`**, GPT/BERT/ViT, eager: LayerNorm inputs (2h), the QKV input
//!   (h), q and k (h + kv), v (kv), the out-projection input (h), the fc1
//!   input (h), GeLU input and fc2 input (2f): `e*s*(6h + 2kv + 2f)`; the
//!   softmax output and its dropout output (`2*e*a*s^2`); 1-byte dropout
//!   masks (`a*s^2 + 2*s*h`, GPT/BERT only). With `kv = h, f = 4h, e = 2`
//!   this is Korthikanti's `s*h*(34 + 5*a*s/h)`. Flash: the two score
//!   tensors and the attention mask are replaced by the kernel's fp32
//!   log-sum-exp (`4*a*s`), FlashAttention's saved `q, k, v, out` are
//!   already counted.
//! * **`none`**, LLaMA/Mistral: per RMSNorm (HF, Meta's reference code and
//!   torchtitan normalise in fp32) the fp32 copy of its input (4h bytes,
//!   kept instead of the half input), the half copy of the normalised
//!   values (h) and its output (h); q and k after rotary and v expanded to
//!   all heads (3h), the attention output (h) and SwiGLU's gate, up, SiLU
//!   and product (4f): `e*s*(8h + 4f) + 8*s*h`; eager adds the fp32 softmax
//!   and (below fp32) its cast copy (`a*s^2*(4 + e)`), flash the
//!   log-sum-exp (`4*a*s`).
//! * **`none`**, LLaMA/Mistral, fused (Megatron-Core's TE kernels, or
//!   `torch.compile`, whose min-cut partitioner recomputes cheap pointwise
//!   intermediates: REAL-SYSTEMS-3 §5.1): the norms keep their input and
//!   `rstd` (`e*h + 4` each), the GEMMs their inputs (the two norm outputs,
//!   the attention output, the SwiGLU output), attention q, k and v
//!   unexpanded (`h + 2kv`), SwiGLU its gate and up (`2f`):
//!   `e*s*(6h + 2kv + 3f) + 8*s`, plus the log-sum-exp with flash or the
//!   softmax in the compute dtype with eager. GPT/BERT/ViT keep the same
//!   tensors fused or not (Korthikanti's accounting is Megatron's).
//! * **`selective`**: torchtitan's op-level selective checkpointing
//!   (`selective_ac_option = "op"`, `torchtitan/distributed/
//!   activation_checkpoint.py`): the outputs of the ops on its save list
//!   are kept (every second `aten.mm` in program order: the counter makes
//!   the others PREFER_RECOMPUTE; SDPA's output), everything else is
//!   recomputed from the block input in the backward (norms, rotary,
//!   activation functions, residual adds, the other matmuls). LLaMA's
//!   seven matmuls q, k, v, o, gate, up, down keep q, v, gate and down;
//!   GPT's four (fused qkv, out, fc1, fc2) keep qkv and fc1. Kept:
//!   LLaMA `e*s*(4h + kv + f)` (input, q, attention output, down output;
//!   v; gate), GPT `e*s*(3h + 2kv + f)` (input, qkv, attention output;
//!   fc1), plus the log-sum-exp with flash; with eager attention the score
//!   chain is recomputed from the kept q, k, v (its `bmm`s are not on the
//!   list). [`recomputed_matmul_fraction`] is the share of the linear
//!   matmul FLOPs the backward reruns.
//! * **`selective:attention`**: Megatron-LM's selective recompute
//!   (`--recompute-granularity selective`, `recompute_modules =
//!   ["core_attn"]`): only the core attention (`QK^T`, softmax, dropout,
//!   `AV`) is recomputed; every other activation is kept. Eager: `none`
//!   without the score-shaped tensors; flash keeps nothing score-shaped
//!   anyway, so it keeps what `none` keeps and reruns the attention kernel.
//!
//! # Transient working memory
//!
//! * **backward** of a block, besides what it kept or regenerated and the
//!   gradients of its input and output: the largest pair of intermediate
//!   gradients: eager attention `2*e_s*a*s^2` (the softmax gradient and the
//!   score gradient, `e_s` = 4 for LLaMA's fp32 softmax), flash the q/k/v
//!   gradients plus FlashAttention's fp32 `dq` accumulator
//!   (`e*s*(h + 2kv) + 4*s*h`); or the MLP's `2*e*s*f`, whichever is larger.
//! * **forward without saving** (a checkpointed block's first forward):
//!   its input plus the largest live pair (`e*s*h` + eager scores and
//!   softmax `a*s^2*(e + e_s)`, flash `e*s*(h + 2kv)`, or `2*e*s*f`).
//! * **head** forward + backward: the logits in the compute dtype, the fp32
//!   log-softmax the loss keeps and its fp32 gradient: `s*V*(e + 8)` (the
//!   ViT classifier sees one token: `V*(e + 8)`); BERT's MLM transform adds
//!   `2*e*s*h`.
//!
//! For LLaMA-style models whose heads are not `h / a` wide (Qwen3), the
//! query-shaped tensors (q, the attention output, their gradients) are `q =
//! a d` wide, the norm-shaped ones `h`.
//!
//! With experts in every block, `f` is the width a token runs through
//! (`k f_e + E_s f_s`: the `k` routed experts' SwiGLU tensors are each
//! token's `k` copies), and every policy but full recompute also keeps
//! [`ModelSpec::routing_bytes_per_token`].
//!
//! These analytic sizes are anchored to the measured (or calibrated)
//! non-state memory of the reference configuration in `crate::cost`.

use crate::model::{Family, ModelSpec};
use crate::precision::NumFormat;
use crate::strategy::{Attention, Recompute};

/// Analytic activation sizes of one block (bytes per sample), see the module docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockActivations {
    /// The block input (what full recompute keeps, and what a block hands
    /// the next one).
    pub checkpoint: f64,
    /// Everything the backward needs, nothing recomputed.
    pub saved_none: f64,
    /// What the selective policy priced keeps: op-level (torchtitan's
    /// `selective`) from [`BlockActivations::new`]; the cost tables of a
    /// `selective:attention` strategy hold [`BlockActivations::saved_attention`]
    /// here ([`BlockActivations::for_selective`]).
    pub saved_selective: f64,
    /// What core-attention recompute (Megatron's selective) keeps.
    pub saved_attention: f64,
    /// Intermediate gradients live during the backward.
    pub grad_work: f64,
    /// Live tensors of a forward that saves nothing (checkpointed block).
    pub nograd_work: f64,
    /// Head forward + backward working memory (logits and their gradient).
    pub head_work: f64,
}

impl BlockActivations {
    /// Sizes for `model` at `seq_len` tokens, compute dtype `dtype`, kernel
    /// `attention`, its memory-bound ops run per op (`fused` false: eager
    /// PyTorch) or fused (Megatron's kernels, `torch.compile`; module docs).
    pub fn new(
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        attention: Attention,
        fused: bool,
    ) -> Self {
        let e = dtype.bytes();
        let s = model.tokens_per_sample(seq_len) as f64;
        let (h, kv, f, a, v) = (
            model.hidden as f64,
            model.kv_dim() as f64,
            model.mlp_width_per_token(),
            model.heads as f64,
            model.vocab as f64,
        );
        let routing = model.routing_bytes_per_token(e) * s;
        // Query / attention-output width (`h` unless the model sets its
        // head width).
        let q = model.q_dim() as f64;
        let flash = attention == Attention::Flash;
        let scores = a * s * s;
        let lse = 4.0 * a * s;
        let llama = model.family.is_llama_like();
        // Bytes of a softmax element: LLaMA's eager implementations softmax
        // in fp32; fused ones keep the compute dtype.
        let e_soft = if llama && !fused { 4.0 } else { e };
        let saved_none = if llama && fused {
            // Norm inputs and rstd, the GEMM inputs (norm outputs, attention
            // output, SwiGLU output), q and k, v unexpanded, gate and up.
            let base = e * s * (4.0 * h + 2.0 * q + 2.0 * kv + 3.0 * f) + 8.0 * s;
            base + if flash { lse } else { e * scores }
        } else if llama {
            let base = e * s * (4.0 * h + 4.0 * q + 4.0 * f) + 8.0 * s * h;
            if flash {
                base + lse
            } else {
                let cast = if e < 4.0 { e } else { 0.0 };
                base + scores * (4.0 + cast)
            }
        } else {
            let masks = model.family.has_dropout();
            let mut b = e * s * (6.0 * h + 2.0 * kv + 2.0 * f);
            if flash {
                b += lse;
            } else {
                let softmax_copies = if masks { 2.0 } else { 1.0 };
                b += softmax_copies * e * scores;
                if masks {
                    b += scores;
                }
            }
            if masks {
                b += 2.0 * s * h;
            }
            b
        };
        // Op-level SAC keeps every second matmul output (see the module docs).
        let saved_selective = if llama {
            e * s * (2.0 * h + 2.0 * q + kv + f)
        } else {
            e * s * (3.0 * h + 2.0 * kv + f)
        } + if flash { lse } else { 0.0 };
        let saved_attention = if flash || llama {
            // LLaMA's eager score tensors are the fp32 softmax and its cast
            // (fused: the softmax in the compute dtype).
            let cast = if e < 4.0 { e } else { 0.0 };
            if flash {
                saved_none
            } else if fused {
                saved_none - e * scores
            } else {
                saved_none - scores * (4.0 + cast)
            }
        } else {
            let masks = model.family.has_dropout();
            let softmax_copies = if masks { 2.0 } else { 1.0 };
            saved_none - softmax_copies * e * scores - if masks { scores } else { 0.0 }
        };
        let attn_grad = if flash {
            e * s * (q + 2.0 * kv) + 4.0 * s * q
        } else {
            2.0 * e_soft * scores
        };
        let grad_work = attn_grad.max(2.0 * e * s * f);
        let attn_live = if flash {
            e * s * (q + 2.0 * kv)
        } else {
            scores * (e + e_soft)
        };
        let nograd_work = e * s * h + attn_live.max(2.0 * e * s * f);
        let head_work = match model.family {
            Family::Vit => v * (e + 8.0),
            Family::Bert => s * v * (e + 8.0) + 2.0 * e * s * h,
            _ => s * v * (e + 8.0),
        };
        let (saved_none, saved_selective, saved_attention) = (
            saved_none + routing,
            saved_selective + routing,
            saved_attention + routing,
        );
        BlockActivations {
            checkpoint: e * s * h,
            saved_none,
            saved_selective: saved_selective.min(saved_none),
            saved_attention: saved_attention.clamp(e * s * h, saved_none),
            grad_work,
            nograd_work,
            head_work,
        }
    }

    /// What a block with policy `r` keeps between its forward and backward.
    pub fn kept(&self, r: Recompute) -> f64 {
        match r {
            Recompute::None => self.saved_none,
            Recompute::Full => self.checkpoint,
            Recompute::Selective => self.saved_selective,
        }
    }

    /// These sizes with `selective:attention` as the selective policy
    /// (`attention_core`), or op-level as built.
    pub fn for_selective(mut self, attention_core: bool) -> Self {
        if attention_core {
            self.saved_selective = self.saved_attention;
        }
        self
    }

    /// What the recompute of a block with policy `r` regenerates before its
    /// backward (0 without recompute).
    pub fn regenerated(&self, r: Recompute) -> f64 {
        (self.saved_none - self.kept(r)).max(0.0)
    }

    /// The activation peak of the reference configuration (Cephalo's
    /// trainer with one micro-batch: every block checkpointed, inputs kept
    /// on the GPU) for a model of `layers` blocks, per sample: the larger of
    /// the head (`L + 1` block outputs, the head's working memory and the
    /// gradient it hands back) and the last block's backward (`L` inputs,
    /// the gradients of its input and output, the regenerated activations
    /// and the intermediate gradients). What measured non-state memory is
    /// anchored to (`crate::cost`).
    pub fn reference_peak(&self, layers: u32) -> f64 {
        let l = layers as f64;
        let c = self.checkpoint;
        let head = (l + 2.0) * c + self.head_work;
        let block = (l + 1.0) * c + self.saved_none + self.grad_work;
        head.max(block)
    }
}

/// The share of a block's linear matmul FLOPs (projections and MLP, not
/// the score matmuls) that torchtitan's op-level selective checkpointing
/// reruns in the backward: the matmuls in even positions (LLaMA: k, o,
/// up; GPT: out, fc2).
pub fn recomputed_matmul_fraction(model: &ModelSpec) -> f64 {
    let (h, kv, q) = (
        model.hidden as f64,
        model.kv_dim() as f64,
        model.q_dim() as f64,
    );
    let f = model.mlp_width_per_token();
    let (rerun, all) = if model.family.is_llama_like() {
        (
            h * kv + h * q + h * f,
            2.0 * h * q + 2.0 * h * kv + 3.0 * h * f,
        )
    } else {
        (h * h + h * f, 2.0 * h * h + 2.0 * h * kv + 2.0 * h * f)
    };
    rerun / all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelCatalog;

    fn model(n: &str) -> ModelSpec {
        ModelCatalog::builtin().get(n).unwrap().clone()
    }

    #[test]
    fn gpt_matches_korthikanti_and_orders_policies() {
        let m = model("gpt-2.7b");
        let (s, h, a) = (512.0, 2560.0, 32.0);
        let b = BlockActivations::new(&m, 512, NumFormat::Fp16, Attention::Eager, false);
        assert_eq!(b.saved_none, s * h * (34.0 + 5.0 * a * s / h));
        // Agrees with the catalog's own count.
        assert_eq!(
            b.saved_none,
            m.activation_bytes_per_sample(512, NumFormat::Fp16)
        );
        assert_eq!(b.checkpoint, 2.0 * s * h);
        assert!(b.saved_none > b.saved_selective && b.saved_selective > b.checkpoint);
        assert_eq!(b.kept(Recompute::Full), b.checkpoint);
        assert_eq!(b.regenerated(Recompute::None), 0.0);
        // Flash drops the s^2 terms: 34 s h (the hidden dropout masks stay).
        let f = BlockActivations::new(&m, 512, NumFormat::Fp16, Attention::Flash, false);
        assert_eq!(f.saved_none, 34.0 * s * h + 4.0 * a * s);
        assert!(f.grad_work < b.grad_work && f.nograd_work < b.nograd_work);
    }

    #[test]
    fn llama_counts_fp32_norms_and_grows_with_seq() {
        let m = model("llama-7b");
        let (s, h, f, a) = (2048.0, 4096.0, 11008.0, 32.0);
        let fl = BlockActivations::new(&m, 2048, NumFormat::Bf16, Attention::Flash, false);
        assert_eq!(
            fl.saved_none,
            2.0 * s * (8.0 * h + 4.0 * f) + 8.0 * s * h + 4.0 * a * s
        );
        let eg = BlockActivations::new(&m, 2048, NumFormat::Bf16, Attention::Eager, false);
        assert_eq!(eg.saved_none - fl.saved_none, 6.0 * a * s * s - 4.0 * a * s);
        // ~0.4 GB per sample per block with flash at 2k tokens.
        assert!(
            fl.saved_none > 0.3e9 && fl.saved_none < 0.5e9,
            "{}",
            fl.saved_none
        );
        // torchtitan's op SAC: input, q, v, attention output, gate, down.
        assert_eq!(fl.saved_selective, 2.0 * s * (5.0 * h + f) + 4.0 * a * s);
        // Megatron's core-attention recompute keeps everything but scores.
        assert_eq!(fl.saved_attention, fl.saved_none);
        assert_eq!(eg.saved_attention, eg.saved_none - 6.0 * a * s * s);
        // k, o and up of q, k, v, o, gate, up, down (kv = h for llama-7b).
        let frac = recomputed_matmul_fraction(&m);
        assert!((frac - (2.0 * h * h + h * f) / (4.0 * h * h + 3.0 * h * f)).abs() < 1e-12);
        let short = BlockActivations::new(&m, 1024, NumFormat::Bf16, Attention::Eager, false);
        assert!(eg.saved_none > 2.0 * short.saved_none);
        assert!(eg.reference_peak(32) > 32.0 * eg.checkpoint);
    }

    /// Compiled or Megatron blocks keep the GEMM inputs, norm inputs and
    /// `rstd` (REAL-SYSTEMS-3 §5.1): no fp32 norm copies, no SiLU output,
    /// v unexpanded; GPT keeps Korthikanti's count either way.
    #[test]
    fn fused_blocks_keep_fewer_intermediates() {
        let m = model("llama3-8b");
        let (s, h, kv, f, a) = (8192.0, 4096.0, 1024.0, 14336.0, 32.0);
        let eager = BlockActivations::new(&m, 8192, NumFormat::Bf16, Attention::Flash, false);
        let fused = BlockActivations::new(&m, 8192, NumFormat::Bf16, Attention::Flash, true);
        assert_eq!(
            fused.saved_none,
            2.0 * s * (6.0 * h + 2.0 * kv + 3.0 * f) + 8.0 * s + 4.0 * a * s
        );
        // Per token: the eager block's fp32 norm inputs (8h bytes) and
        // SiLU output (2f) are the difference, less v's expansion.
        assert!(fused.saved_none < 0.85 * eager.saved_none);
        let g = model("gpt-2.7b");
        for att in [Attention::Eager, Attention::Flash] {
            assert_eq!(
                BlockActivations::new(&g, 2048, NumFormat::Bf16, att, true),
                BlockActivations::new(&g, 2048, NumFormat::Bf16, att, false)
            );
        }
    }

    #[test]
    fn every_family_is_positive_and_ordered() {
        for m in ModelCatalog::builtin().all() {
            for (att, fused) in [Attention::Eager, Attention::Flash]
                .into_iter()
                .flat_map(|a| [(a, false), (a, true)])
            {
                for d in NumFormat::ALL {
                    let b = BlockActivations::new(m, m.seq_len, d, att, fused);
                    assert!(b.checkpoint > 0.0 && b.head_work > 0.0, "{}", m.name);
                    assert!(b.saved_none >= b.saved_selective, "{}", m.name);
                    assert!(b.saved_none >= b.saved_attention, "{}", m.name);
                    assert!(b.saved_attention >= b.saved_selective, "{} {att:?}", m.name);
                    assert!(b.saved_selective >= b.checkpoint, "{} {att:?}", m.name);
                }
            }
        }
    }
}
