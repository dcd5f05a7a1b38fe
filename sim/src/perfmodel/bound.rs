//! The roofline bound: the least time a block's forward and backward can
//! take at 100% of the catalog's peak and HBM bandwidth. Every prediction
//! is at least this.

use super::features;
use crate::dtype::Dtype;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::strategy::Attention;

/// Lower bound of one block's forward and backward ms (the roofline at 100%
/// of the catalog's dense peak and HBM bandwidth): forward
/// `max(m*F/peak, (W + m*A)/bw)`, backward `max(2*m*F/peak, (W + m*A)/bw)`,
/// with `F` = [`ModelSpec::block_flops_fwd`], `W` the block weights
/// ([`ModelSpec::block_weight_bytes`]) and `A` the forward activation traffic
/// per sample ([`ModelSpec::block_activation_io_bytes_fwd`]).
/// `None` when the GPU has no peak for `dtype`.
pub fn roofline_bound_ms(
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq_len: u32,
    dtype: Dtype,
    m: u32,
) -> Option<(f64, f64)> {
    let peak = gpu.peak_tflops(dtype)? * 1e12;
    let m = m as f64;
    let flops = model.block_flops_fwd(seq_len) * m;
    let bytes =
        model.block_weight_bytes(dtype) + model.block_activation_io_bytes_fwd(seq_len, dtype) * m;
    let mem_ms = bytes / (gpu.mem_bw_gbps * 1e9) * 1e3;
    Some((
        (flops / peak * 1e3).max(mem_ms),
        (2.0 * flops / peak * 1e3).max(mem_ms),
    ))
}

/// [`roofline_bound_ms`] for either attention kernel: with flash, causal
/// models count half the score FLOPs and no score traffic moves.
pub fn roofline_bound_ms_with(
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq_len: u32,
    dtype: Dtype,
    m: u32,
    attention: Attention,
) -> Option<(f64, f64)> {
    if attention == Attention::Eager {
        return roofline_bound_ms(gpu, model, seq_len, dtype, m);
    }
    let peak = gpu.peak_tflops(dtype)? * 1e12;
    let s = model.tokens_per_sample(seq_len) as f64;
    let m = m as f64;
    let causal = model.family.is_causal();
    let score = 4.0 * s * s * model.hidden as f64 * if causal { 0.5 } else { 1.0 };
    let linear = 2.0 * model.block_matmul_params() as f64 * s;
    let bytes = model.block_weight_bytes(dtype)
        + (model.block_activation_io_bytes_fwd(seq_len, dtype)
            - features::score_io_bytes_per_sample(model, seq_len, dtype))
            * m;
    let mem_ms = bytes / (gpu.mem_bw_gbps * 1e9) * 1e3;
    Some((
        ((linear + score) * m / peak * 1e3).max(mem_ms),
        ((2.0 * linear + 2.5 * score) * m / peak * 1e3).max(mem_ms),
    ))
}
