//! Published kernel anchors per GPU generation: how fast the fused attention
//! kernel PyTorch's SDPA runs is, relative to the large-GEMM rate on the same
//! GPU, by head dimension, sequence length and causal masking.
//!
//! The calibrated model fits the matmul rate of every generation it has
//! measurements for (and its power cap); fused attention never appears in
//! those measurements (the reference profiles run eager attention), so its
//! rate comes from published kernel benchmarks instead, as a ratio to the
//! achieved GEMM fraction of the same GPU. A ratio, not an absolute
//! fraction of peak, so that a power-capped part (H100 PCIe, L4) slows its
//! attention as much as its GEMMs.
//!
//! Anchors (dense BF16/FP16, head dimension 128, non-causal forward, long
//! sequences):
//!
//! | generation | kernel SDPA runs | attention / peak | GEMM / peak | source |
//! |---|---|---|---|---|
//! | Ampere DC (A100) | FlashAttention-2 | 0.70 | 0.75 | FA2 paper (Dao 2023, arXiv 2307.08691): forward 50-73% of A100 peak, the top of the range at head dim 128 and long sequences; GEMM: 234 TFLOPS `torch.matmul` 4096^3 on A100 PCIe (`zzc0721/torch-performance-test-data` #108), ~235 in CUTLASS's profiler docs (`NVIDIA/cutlass` #956) |
//! | Hopper (H100, H200) | FlashAttention-2 | 0.374 | 0.81 | FA3 paper (Shah et al. 2024, arXiv 2407.08608) forward figure, FA2 column on H100 SXM: 370 TFLOPS of 989 at 8k-16k; GEMM: 798 TFLOPS 8192^3 on H100 SXM (`zzc0721/...` #79) |
//!
//! PyTorch's SDPA dispatches to FlashAttention-2 on sm80+ (its cuDNN backend
//! reaches FA3-like rates on Hopper but is not the default in most releases
//! people train with), so Hopper is priced at FA2, which reaches about half
//! the fraction of peak it reaches on an A100 (FA3 paper: "FA2 reaches only
//! ~35% utilization on H100"): the kernel does not use Hopper's wgmma/TMA.
//!
//! Generations without published numbers borrow, and say so
//! ([`borrowed_from`]): GA10x and Ada run the same FA2 kernel design
//! (`mma.sync`, sm86/sm89) with less shared memory per SM, so they take the
//! A100 ratio (expect +-25%); Volta, Turing and Pascal have no FA2 kernel,
//! SDPA runs the memory-efficient (xformers / CUTLASS) kernel there, priced
//! at 0.6 of the A100 ratio (an estimate; expect +-40%).
//!
//! Shape effects, from the same FA3 figure (FA2 column, H100, head dim 128:
//! 309, 350, 362, 368, 370 TFLOPS at 512, 1k, 2k, 4k, 8k tokens): the rate
//! saturates as `s / (s + s_half)` with `s_half` = 100 tokens (309/370 at
//! 512). Head dimension 256 reaches 298/370 = 0.80 of head dimension 128
//! (same figure); head dimension 64 is taken as 0.85 (smaller tiles, less
//! work per load; an estimate from the FA2 paper's A100 plots). Causal
//! masking skips half the blocks but the diagonal blocks and the shorter
//! rows lower the achieved rate: 0.9 of the non-causal rate at long
//! sequences, with the saturation length doubled (estimate; the trend of
//! `Dao-AILab/flash-attention` #1310). The backward (2.5x the forward's
//! FLOPs, counted by FlashAttention's benchmark formula) runs at 0.8 of the
//! forward's rate: the FA2 paper's 50-73% range puts the backward at its
//! lower end (estimate; per-pass backward numbers were not found).

use super::arch::ArchClass;

/// Achieved fraction of dense peak of the fused attention forward (head
/// dimension 128, non-causal, long sequences), and the GPU it was measured on.
fn attention_anchor(class: ArchClass) -> (f64, &'static str) {
    match class {
        ArchClass::Hopper => (0.374, "h100-sxm"),
        _ => (0.70, "a100"),
    }
}

/// Achieved fraction of dense peak of a large GEMM on the anchor's GPU.
fn gemm_anchor(class: ArchClass) -> f64 {
    match class {
        ArchClass::Hopper => 0.81,
        _ => 0.75,
    }
}

/// Scale of the borrowed ratio for generations without published numbers.
fn kernel_factor(class: ArchClass) -> f64 {
    match class {
        ArchClass::Pascal | ArchClass::Volta | ArchClass::Turing => 0.6,
        _ => 1.0,
    }
}

/// Tokens at which the attention forward reaches half its asymptotic rate.
const SEQ_HALF_TOKENS: f64 = 100.0;
/// Causal rate relative to non-causal at long sequences.
const CAUSAL_FACTOR: f64 = 0.9;
/// Backward rate relative to the forward's.
const BACKWARD_FACTOR: f64 = 0.8;

/// Head-dimension factor relative to head dimension 128 (piecewise linear
/// in log2 between the anchors 64: 0.85, 128: 1, 256: 0.80; flat outside).
fn head_dim_factor(head_dim: f64) -> f64 {
    let x = head_dim.max(1.0).log2();
    if x <= 6.0 {
        0.85
    } else if x <= 7.0 {
        0.85 + 0.15 * (x - 6.0)
    } else if x <= 8.0 {
        1.0 - 0.2 * (x - 7.0)
    } else {
        0.80
    }
}

/// Rates of the fused attention forward and backward relative to the large
/// GEMM rate on the same GPU, for a generation, head dimension, tokens per
/// sample and masking. Both in (0, 1.2]: attention never outruns a large
/// GEMM by more than the anchors' own spread.
pub fn fused_attention_rel(
    class: ArchClass,
    head_dim: f64,
    seq_tokens: f64,
    causal: bool,
) -> (f64, f64) {
    let (attn, _) = attention_anchor(class);
    let base = attn / gemm_anchor(class) * kernel_factor(class);
    let (mask, half) = if causal {
        (CAUSAL_FACTOR, 2.0 * SEQ_HALF_TOKENS)
    } else {
        (1.0, SEQ_HALF_TOKENS)
    };
    let s = seq_tokens.max(1.0);
    let fwd = (base * head_dim_factor(head_dim) * mask * s / (s + half)).clamp(1e-3, 1.2);
    (fwd, fwd * BACKWARD_FACTOR)
}

/// Achieved fraction of HBM bandwidth of memory-bound kernels on a
/// generation, where published: Hopper 0.83 (an optimized block-copy
/// kernel reached 82-84% of H100 HBM3 peak, an unoptimized one ~62%:
/// `vllm-project/vllm` PR #48110, REAL-SYSTEMS-2 §5.3; copy-engine
/// numbers read lower and are not the kernel roofline). `None`: the
/// calibration's fitted fraction stands (it was measured on those GPUs).
pub fn hbm_efficiency(class: ArchClass) -> Option<f64> {
    match class {
        ArchClass::Hopper => Some(0.83),
        _ => None,
    }
}

/// For `sources:` lines: which GPU's published attention numbers a
/// generation's fused-attention rate comes from, and how.
pub fn borrowed_from(class: ArchClass) -> &'static str {
    match class {
        ArchClass::Hopper => "FlashAttention-2 on H100 SXM (FA3 paper)",
        ArchClass::AmpereDc => "FlashAttention-2 on A100 (FA2 paper)",
        ArchClass::Ampere | ArchClass::Ada => {
            "FlashAttention-2 on A100 (FA2 paper), borrowed: same kernel, +-25%"
        }
        ArchClass::Pascal | ArchClass::Volta | ArchClass::Turing => {
            "memory-efficient attention at 0.6x FlashAttention-2 on A100, an estimate: +-40%"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_rates_are_physical_and_monotone() {
        for class in ArchClass::ALL {
            for causal in [false, true] {
                let mut last = 0.0;
                for s in [128.0, 512.0, 2048.0, 8192.0, 32768.0] {
                    let (f, b) = fused_attention_rel(class, 128.0, s, causal);
                    // Rates grow with the sequence, stay below a large GEMM's
                    // and the backward is slower than the forward.
                    assert!(f > last && f <= 1.0 && b < f && b > 0.0, "{class:?} {s}");
                    last = f;
                }
                let (c, _) = fused_attention_rel(class, 128.0, 4096.0, true);
                let (n, _) = fused_attention_rel(class, 128.0, 4096.0, false);
                assert!(c < n);
            }
        }
        // FA2 reaches a much smaller part of Hopper's peak than of Ampere's.
        let h = fused_attention_rel(ArchClass::Hopper, 128.0, 8192.0, false).0 * 0.81;
        let a = fused_attention_rel(ArchClass::AmpereDc, 128.0, 8192.0, false).0 * 0.75;
        assert!(h < 0.4 && a > 0.65, "{h} {a}");
        // Head dimension 128 is the kernels' best.
        for hd in [32.0, 64.0, 96.0, 192.0, 256.0, 512.0] {
            assert!(head_dim_factor(hd) < 1.0 && head_dim_factor(hd) >= 0.8);
        }
    }
}
