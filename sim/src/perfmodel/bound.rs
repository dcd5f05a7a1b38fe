//! The roofline bound: the least time a block's forward and backward can
//! take at 100% of the catalog's peak and HBM bandwidth. Every prediction
//! is at least this.

use super::features::TimeFeat;
use super::price::roofline_ms;
use super::work::BlockImpl;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::precision::NumFormat;
use crate::tensor::TensorParallel;

/// Lower bound of one block's forward and backward ms as the reference
/// profiles run it (PyTorch eager, eager attention, whole block): every
/// FLOP at the catalog's dense peak, or every GEMM operand moved once at
/// full HBM bandwidth, whichever is longer ([`roofline_ms`]). `None` when
/// the GPU has no peak for `dtype`.
pub fn roofline_bound_ms(
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq_len: u32,
    dtype: NumFormat,
    m: u32,
) -> Option<(f64, f64)> {
    roofline_bound_ms_with(
        gpu,
        model,
        seq_len,
        dtype,
        m,
        &TensorParallel::NONE,
        BlockImpl::REFERENCE,
    )
}

/// [`roofline_bound_ms`] of one rank of `tp` with implementation `imp`
/// (a fused causal kernel counts half the score FLOPs).
pub fn roofline_bound_ms_with(
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq_len: u32,
    dtype: NumFormat,
    m: u32,
    tp: &TensorParallel,
    imp: BlockImpl,
) -> Option<(f64, f64)> {
    let f = TimeFeat::new(gpu, model, seq_len, dtype, m, tp, imp)?;
    Some(roofline_ms(&f.work, f.gpu.peak_flops, f.gpu.bw_bps))
}
