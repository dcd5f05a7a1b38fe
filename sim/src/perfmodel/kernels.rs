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
//! sequences), as fractions of peak; the GEMM column is the generation's
//! maximum achievable matmul rate ([`gemm_anchor`]):
//!
//! | generation | kernel | attention / peak | GEMM / peak | source |
//! |---|---|---|---|---|
//! | Ampere DC (A100) | FlashAttention-2 (SDPA and TE) | 0.70 | 0.869 | FA2 paper (Dao 2023, arXiv 2307.08691): forward 50-73% of A100 peak, the top of the range at head dimension 128 and long sequences |
//! | Hopper (H100, H200) | FlashAttention-2 (PyTorch SDPA) | 0.374 | 0.803 | FA3 paper (Shah et al. 2024, arXiv 2407.08608) forward figure, FA2 column on H100 SXM: 370 TFLOPS of 989 at 8k-16k |
//! | Hopper (H100, H200) | cuDNN fused attention (Transformer Engine) | 0.61 | 0.803 | same figure, cuDNN column: 595-617 TFLOPS at 2k-16k (FA3 itself: 625-648) |
//!
//! PyTorch's SDPA dispatches to FlashAttention-2 on sm80+ (its cuDNN
//! backend is not the default in the releases people train with), which on
//! Hopper reaches about half the fraction of peak it reaches on an A100
//! (FA3 paper: "FA2 reaches only ~35% utilization on H100": the kernel does
//! not use Hopper's wgmma/TMA); Transformer Engine stacks (Megatron-Core,
//! NeMo) run cuDNN's fused attention there ([`FusedKernel::of`]).
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
use crate::stack::Stack;

/// The fused attention kernel a stack runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusedKernel {
    /// FlashAttention-2 (PyTorch SDPA's flash backend on sm80+; the
    /// memory-efficient kernel before Ampere).
    Fa2,
    /// cuDNN fused attention (Transformer Engine's default on Hopper),
    /// FlashAttention-3-class rates.
    Cudnn,
}

impl FusedKernel {
    /// The kernel `stack` runs on `class`: Transformer Engine picks cuDNN's
    /// fused attention on Hopper (`NVTE_FUSED_ATTN`, its default backend
    /// there), PyTorch SDPA FlashAttention-2 (REAL-SYSTEMS-2 §5.2); before
    /// Hopper both run FlashAttention-2-class kernels.
    pub fn of(stack: Stack, class: ArchClass) -> FusedKernel {
        match (stack, class) {
            (Stack::Megatron, ArchClass::Hopper) => FusedKernel::Cudnn,
            _ => FusedKernel::Fa2,
        }
    }

    /// The kernel's name in sources.
    pub fn name(self) -> &'static str {
        match self {
            FusedKernel::Fa2 => "FlashAttention-2",
            FusedKernel::Cudnn => "cuDNN fused attention",
        }
    }
}

/// A published dense GEMM anchor of a generation: the maximum achievable
/// matmul rate on one GPU (BF16, the best of a shape sweep), the GPU's
/// datasheet peak and board power.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmAnchor {
    /// The GPU it was measured on (catalog name).
    pub gpu: &'static str,
    /// Achieved TFLOPS.
    pub tflops: f64,
    /// The GPU's dense BF16 peak, TFLOPS.
    pub peak_tflops: f64,
    /// The GPU's board power, W.
    pub board_power_w: f64,
    /// The GPU's boost clock, MHz (its peak's clock).
    pub boost_clock_mhz: f64,
    /// The GPU's streaming multiprocessors.
    pub sms: f64,
    /// The GPU's HBM bandwidth, GB/s.
    pub mem_bw_gbps: f64,
    /// The GEMM shape `(M, N, K)` that reached `tflops` (the sweep's best).
    pub best_shape: (f64, f64, f64),
    /// Where the number comes from.
    pub source: &'static str,
}

impl GemmAnchor {
    /// Achieved fraction of peak.
    pub fn fraction(&self) -> f64 {
        self.tflops / self.peak_tflops
    }
}

/// Maximum achievable matmul FLOPS (MAMF) of the generations that have a
/// published single-GPU measurement: `torch.mm` BF16 swept over shapes,
/// the best kept (Stas Bekman, `stas00/ml-engineering`,
/// `compute/accelerator/README.md`, "Maximum Achievable Matmul FLOPS
/// comparison table", measured with its `mamf-finder.py`): A100 SXM 271.2
/// of 312 TFLOPS (86.9%) at 1024 x 10240 x 5120, H100 SXM 794.5 of 989
/// (80.3%) at 2048 x 2048 x 13312. The ceiling is set so that the shape
/// terms give that rate at that shape. Other
/// generations have no such table entry; their ceiling is fitted to the
/// reference profiles. A GPU of an anchored generation with less board
/// power per unit of math than the anchor's (H100 PCIe, H100 NVL) is
/// derated by the calibrated power law.
pub fn gemm_anchor(class: ArchClass) -> Option<GemmAnchor> {
    const SRC: &str = "maximum achievable matmul FLOPS, stas00/ml-engineering compute/accelerator/README.md (mamf-finder.py, BF16)";
    match class {
        ArchClass::AmpereDc => Some(GemmAnchor {
            gpu: "a100-80gb",
            tflops: 271.2,
            peak_tflops: 312.0,
            board_power_w: 400.0,
            boost_clock_mhz: 1410.0,
            sms: 108.0,
            mem_bw_gbps: 2039.0,
            best_shape: (1024.0, 10240.0, 5120.0),
            source: SRC,
        }),
        ArchClass::Hopper => Some(GemmAnchor {
            gpu: "h100-sxm",
            tflops: 794.5,
            peak_tflops: 989.4,
            board_power_w: 700.0,
            boost_clock_mhz: 1980.0,
            sms: 132.0,
            mem_bw_gbps: 3350.0,
            best_shape: (2048.0, 2048.0, 13312.0),
            source: SRC,
        }),
        _ => None,
    }
}

/// Achieved fraction of dense peak of the fused attention forward (head
/// dimension 128, non-causal, long sequences), and the GPU it was measured on.
fn attention_anchor(class: ArchClass, kernel: FusedKernel) -> (f64, &'static str) {
    match (class, kernel) {
        // FA3 paper figure, cuDNN column at 2k-16k: 595-617 TFLOPS of 989.
        (ArchClass::Hopper, FusedKernel::Cudnn) => (0.61, "h100-sxm"),
        (ArchClass::Hopper, FusedKernel::Fa2) => (0.374, "h100-sxm"),
        _ => (0.70, "a100"),
    }
}

/// Achieved fraction of dense peak of a large GEMM on the anchor's GPU
/// (the generation's [`gemm_anchor`]; the A100's for generations without).
fn gemm_fraction(class: ArchClass) -> f64 {
    gemm_anchor(class)
        .or_else(|| gemm_anchor(ArchClass::AmpereDc))
        .map_or(0.869, |a| a.fraction())
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
/// GEMM rate on the same GPU, for a generation, kernel, head dimension,
/// tokens per sample and masking. Both in (0, 1.2]: attention never
/// outruns a large GEMM by more than the anchors' own spread.
pub fn fused_attention_rel(
    class: ArchClass,
    kernel: FusedKernel,
    head_dim: f64,
    seq_tokens: f64,
    causal: bool,
) -> (f64, f64) {
    let (attn, _) = attention_anchor(class, kernel);
    let base = attn / gemm_fraction(class) * kernel_factor(class);
    let (mask, half) = if causal {
        (CAUSAL_FACTOR, 2.0 * SEQ_HALF_TOKENS)
    } else {
        (1.0, SEQ_HALF_TOKENS)
    };
    let s = seq_tokens.max(1.0);
    let fwd = (base * head_dim_factor(head_dim) * mask * s / (s + half)).clamp(1e-3, 1.2);
    (fwd, fwd * BACKWARD_FACTOR)
}

/// Achieved fraction of HBM bandwidth of an optimized memory-bound
/// kernel: 0.83 (an optimized block-copy kernel reached 82-84% of H100
/// HBM3 peak, an unoptimized one ~62%: `vllm-project/vllm` PR #48110,
/// REAL-SYSTEMS-2 §5.3; copy-engine numbers read lower and are not the
/// kernel roofline). The calibration pins its bandwidth efficiency to it:
/// whole-block profiles cannot tell the bandwidth reached from the bytes
/// moved (the PyTorch stack's element-wise factor scales the same bytes).
pub const HBM_EFFICIENCY: f64 = 0.83;

/// For `sources:` lines: which GPU's published attention numbers a
/// generation's fused-attention rate comes from, and how.
pub fn borrowed_from(class: ArchClass, kernel: FusedKernel) -> &'static str {
    match class {
        ArchClass::Hopper if kernel == FusedKernel::Cudnn => {
            "cuDNN fused attention on H100 SXM (FA3 paper figure)"
        }
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
                    let (f, b) = fused_attention_rel(class, FusedKernel::Fa2, 128.0, s, causal);
                    // Rates grow with the sequence, stay below a large GEMM's
                    // and the backward is slower than the forward.
                    assert!(f > last && f <= 1.0 && b < f && b > 0.0, "{class:?} {s}");
                    last = f;
                }
                let (c, _) = fused_attention_rel(class, FusedKernel::Fa2, 128.0, 4096.0, true);
                let (n, _) = fused_attention_rel(class, FusedKernel::Fa2, 128.0, 4096.0, false);
                assert!(c < n);
            }
        }
        // FA2 reaches a much smaller part of Hopper's peak than of Ampere's.
        let rel = |c, k| fused_attention_rel(c, k, 128.0, 8192.0, false).0;
        let h = rel(ArchClass::Hopper, FusedKernel::Fa2) * 0.803;
        let a = rel(ArchClass::AmpereDc, FusedKernel::Fa2) * 0.869;
        assert!(h < 0.4 && a > 0.65, "{h} {a}");
        // cuDNN's Hopper kernel runs at the FA3 paper's cuDNN column.
        let c = rel(ArchClass::Hopper, FusedKernel::Cudnn) * 0.803;
        assert!((0.58..0.62).contains(&c), "{c}");
        // The MAMF anchors are the published table's values.
        let a100 = gemm_anchor(ArchClass::AmpereDc).unwrap();
        let h100 = gemm_anchor(ArchClass::Hopper).unwrap();
        assert!((a100.fraction() - 0.869).abs() < 1e-3 && (h100.fraction() - 0.803).abs() < 1e-3);
        // Head dimension 128 is the kernels' best.
        for hd in [32.0, 64.0, 96.0, 192.0, 256.0, 512.0] {
            assert!(head_dim_factor(hd) < 1.0 && head_dim_factor(hd) >= 0.8);
        }
    }
}
