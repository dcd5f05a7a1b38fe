//! Pricing a block's work ([`super::work::BlockWork`]) on a GPU: every
//! GEMM at its shape, the attention core, the element-wise and
//! per-parameter traffic and the kernel launches, given the resolved rates
//! of one GPU ([`Prices`], from the calibrated coefficients or the plain
//! roofline).
//!
//! ```text
//! gemm(M, N, K)  = max(2MNK / (C * eta), bytes / bw)      per copy
//! eta(M, N, K)   = B*M*N / (waves * SMs * 128^2) * K/(K + k0)
//! waves          = ceil(ceil(M/128) * ceil(N/128) * B / SMs)
//! fused attention = FLOPs / (C * rel)                       (rel: the kernel's rate over a large GEMM's)
//! memory-bound   = bytes * factor / bw
//! fixed          = kernels * floor
//! ```
//!
//! `C` is the GPU's large-GEMM rate (its generation's published maximum
//! achievable matmul rate where one exists, else the calibrated ceiling),
//! `bw` the achieved HBM bandwidth; the small-GEMM loss `eta`: the `B`
//! copies' 128 x 128 output tiles fill the GPU's SMs in waves, so the last
//! wave and partial tiles run part empty ([`GEMM_TILE`]), and a short
//! reduction pays its prologue and epilogue (`k0`, a multiple of the GPU's
//! machine balance).

use super::arch::ArchClass;
use super::kernels;
use super::work::{BlockWork, Gemm, PassWork};
use crate::stack::Stack;

/// One GPU's resolved rates for one block implementation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    /// GPU generation (for the fused-attention anchors).
    pub class: ArchClass,
    /// Large-GEMM rate, FLOP/s.
    pub gemm_flops: f64,
    /// Streaming multiprocessors (what a GEMM's output tiles fill, in waves).
    pub sms: f64,
    /// Reduction length at which a GEMM runs at half its rate.
    pub k_half: f64,
    /// Achieved bandwidth of memory-bound kernels, B/s.
    pub bw_bps: f64,
    /// Factor on the element-wise bytes (the stack's implementation
    /// against the per-op count; 1 where the count is exact).
    pub elem_factor: f64,
    /// Factor on the eager score chain's bytes (likewise).
    pub chain_factor: f64,
    /// Bytes per token of an implementation's cost no op accounts for
    /// (PyTorch eager, fitted; 0 elsewhere), on the tokens of the
    /// replicated ops, each pass.
    pub token_bytes: f64,
    /// Bytes per block parameter of the forward's per-parameter passes
    /// (PyTorch: fitted; others: [`PassWork::weight_bytes`] instead).
    pub weight_fwd_bytes: f64,
    /// The same for the backward.
    pub weight_bwd_bytes: f64,
    /// Time of one kernel launch on the GPU (the floor of a tiny kernel), ms.
    pub kernel_floor_ms: f64,
}

/// One pass's time by part, ms.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PassTime {
    /// The linear layers' GEMMs.
    pub gemm_ms: f64,
    /// The attention core (eager: batched GEMMs and score chain; fused: the kernel).
    pub attention_ms: f64,
    /// Element-wise ops.
    pub elementwise_ms: f64,
    /// Per-parameter passes.
    pub weight_ms: f64,
    /// Kernel launch floors.
    pub fixed_ms: f64,
}

impl PassTime {
    /// The pass, ms.
    pub fn total_ms(&self) -> f64 {
        self.gemm_ms + self.attention_ms + self.elementwise_ms + self.weight_ms + self.fixed_ms
    }
}

/// A block's priced work, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockTimes {
    /// The forward.
    pub fwd: PassTime,
    /// The backward.
    pub bwd: PassTime,
    /// What op-level selective recompute reruns of the forward.
    pub selective_ms: f64,
    /// What core-attention recompute reruns of the forward.
    pub attention_ms: f64,
}

impl Prices {
    /// ms of all copies of one GEMM shape.
    pub fn gemm_ms(&self, g: &Gemm, e: f64) -> f64 {
        if g.count <= 0.0 {
            return 0.0;
        }
        let eta = self.efficiency(g.m, g.n, g.k, g.count);
        let compute = 2.0 * g.m * g.n * g.k / (self.gemm_flops * eta);
        let memory = ((g.m * g.k + g.k * g.n) * e + g.m * g.n * g.out_bytes) / self.bw_bps;
        g.count * compute.max(memory) * 1e3
    }

    /// The shape efficiency `eta` of `count` GEMMs of `(m, n, k)`
    /// ([`gemm_efficiency`] on this GPU).
    pub fn efficiency(&self, m: f64, n: f64, k: f64, count: f64) -> f64 {
        gemm_efficiency(m, n, k, count, self.sms, self.k_half)
    }

    fn gemms_ms(&self, v: &[Gemm], e: f64) -> f64 {
        v.iter().map(|g| self.gemm_ms(g, e)).sum()
    }

    fn memory_ms(&self, bytes: f64) -> f64 {
        bytes / self.bw_bps * 1e3
    }

    /// One pass of `w` (`backward` for the fused kernel's rate and the
    /// per-parameter bytes).
    fn pass(&self, p: &PassWork, w: &BlockWork, backward: bool) -> PassTime {
        let e = w.e;
        let fused = if p.fused_attn_flops > 0.0 {
            let (f, b) = kernels::fused_attention_rel(
                self.class,
                w.imp.fused_kernel(self.class),
                w.head_dim,
                w.seq,
                w.causal,
            );
            let rel = if backward { b } else { f };
            p.fused_attn_flops / (self.gemm_flops * rel) * 1e3
        } else {
            0.0
        };
        let per_param = if w.imp.stack == Stack::PyTorch {
            if backward {
                self.weight_bwd_bytes
            } else {
                self.weight_fwd_bytes
            }
        } else {
            0.0
        };
        let weight_bytes = p.weight_bytes + per_param * w.params;
        PassTime {
            gemm_ms: self.gemms_ms(&p.gemms, e),
            attention_ms: self.gemms_ms(&p.attn_gemms, e)
                + self.memory_ms(p.chain_bytes * self.chain_factor)
                + fused,
            // The stack's factor on its per-op count, never below what the
            // same ops move fused (no implementation moves less).
            elementwise_ms: self.memory_ms(
                (p.elem_bytes * self.elem_factor).max(p.elem_floor_bytes)
                    + self.token_bytes * p.replicated_tokens,
            ),
            weight_ms: self.memory_ms(weight_bytes),
            fixed_ms: p.kernels * self.kernel_floor_ms,
        }
    }

    /// One pass of a unit around the blocks (head, embedding): its GEMMs
    /// and memory traffic at these rates, the per-op counts as they are.
    pub fn unit(&self, p: &PassWork, e: f64) -> PassTime {
        PassTime {
            gemm_ms: self.gemms_ms(&p.gemms, e),
            attention_ms: 0.0,
            elementwise_ms: self.memory_ms(p.elem_bytes),
            weight_ms: self.memory_ms(p.weight_bytes),
            fixed_ms: p.kernels * self.kernel_floor_ms,
        }
    }

    /// The block's times.
    pub fn block(&self, w: &BlockWork) -> BlockTimes {
        let fwd = self.pass(&w.fwd, w, false);
        let sel = self.pass(&w.selective, w, false);
        let att = self.pass(&w.attention, w, false);
        BlockTimes {
            fwd,
            bwd: self.pass(&w.bwd, w, true),
            selective_ms: (sel.gemm_ms + sel.attention_ms + sel.elementwise_ms + sel.fixed_ms)
                .min(fwd.total_ms()),
            attention_ms: (att.attention_ms + att.fixed_ms).min(fwd.total_ms()),
        }
    }
}

/// Output tile of the GEMM kernels, elements per side: 128 x 128, the tile
/// cuBLAS / CUTLASS run large BF16 GEMMs with on Ampere and Hopper at
/// full rate (CUTLASS's default `GemmShape<128, 128, 32>`-class tiles).
/// With it, the wave model reproduces the published square-GEMM rates
/// (REAL-SYSTEMS-2 §5.1): on an H100 SXM (132 SMs) 1024^3 fills 64 of 132
/// SMs (48%: 177 of 798 TFLOPS measured, with the launch floor) and
/// 2048^3 two waves of 256 tiles (97%: 677 measured); on an A100 (108 SMs)
/// 4096^3 ten waves of 1024 tiles (95%: 234 of ~250 TFLOPS).
pub const GEMM_TILE: f64 = 128.0;

/// The shortest reduction a split-K GEMM gives each of its splits: two
/// 128-deep main-loop stages (cuBLAS / CUTLASS split the reduction of a
/// GEMM whose output tiles cannot fill the SMs, no finer than a few
/// k-blocks per split).
pub const SPLIT_K_MIN: f64 = 256.0;

/// The shape efficiency of `count` GEMMs of `(m, n, k)` on a GPU of `sms`
/// SMs with reduction half length `k_half`: the copies' output tiles
/// (`GEMM_TILE` square, partial tiles counted whole) run in waves of `sms`
/// tiles, so the last wave and the tiles' edges run part empty; a GEMM
/// whose tiles cannot fill the SMs splits its reduction (split-K, each
/// split at least [`SPLIT_K_MIN`] long) to fill them; a reduction of `k`
/// per split pays its prologue and epilogue as `k / (k + k_half)`.
pub fn gemm_efficiency(m: f64, n: f64, k: f64, count: f64, sms: f64, k_half: f64) -> f64 {
    if m <= 0.0 || n <= 0.0 || k <= 0.0 || count <= 0.0 {
        return 1.0;
    }
    let sms = sms.max(1.0);
    let tiles = (m / GEMM_TILE).ceil() * (n / GEMM_TILE).ceil() * count.ceil();
    let split = if tiles < sms {
        (sms / tiles)
            .floor()
            .min((k / SPLIT_K_MIN).floor())
            .max(1.0)
    } else {
        1.0
    };
    let waves = (tiles * split / sms).ceil();
    let fill = (m * n * count * split / (waves * sms * GEMM_TILE * GEMM_TILE)).min(1.0);
    let k = k / split;
    fill * k / (k + k_half)
}

/// The least time the forward and backward of `w` can take on a GPU with
/// `peak_flops` and `bw_bps`, ms: every FLOP at peak or every GEMM
/// operand moved once at full bandwidth, whichever is longer (the
/// element-wise traffic is left out: its count depends on the
/// implementation, and a fused one may move less than the per-op count).
pub fn roofline_ms(w: &BlockWork, peak_flops: f64, bw_bps: f64) -> (f64, f64) {
    let one = |p: &PassWork| {
        let bytes: f64 = p.gemms.iter().map(|g| g.bytes(w.e)).sum();
        (p.flops() / peak_flops * 1e3).max(bytes / bw_bps * 1e3)
    };
    (one(&w.fwd), one(&w.bwd))
}
