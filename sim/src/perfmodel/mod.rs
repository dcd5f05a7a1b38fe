//! Analytic performance model: predicted per-block time and non-state memory
//! for any (GPU, model, seq_len, dtype, micro-batch) from the catalogs alone.
//!
//! The [`Predictor`] trait is what the cost model asks when no measured or
//! imported profile exists. [`Roofline`] is the uncalibrated baseline:
//! `max(FLOPs / (peak x efficiency), bytes / bandwidth)` per block pass.
//! Times are ms, memory GiB.

use crate::dtype::Dtype;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::units::GIB;

/// Predicts block costs where no profile exists.
pub trait Predictor: Send + Sync + std::fmt::Debug {
    /// Forward and backward ms of ONE block for a micro-batch of `m` samples.
    /// `Err` with a reason when this GPU cannot run the dtype.
    fn block_ms(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
    ) -> Result<(f64, f64), String>;
    /// Non-state GPU memory of one training step at micro-batch size `m`
    /// (activations of one micro-batch, unsharded unit buffers, logits), GiB.
    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: Dtype, m: u32) -> f64;
    /// Name and coefficients source, for provenance (`roofline`, `calibrated:...`).
    fn name(&self) -> String;
}

/// Uncalibrated roofline: compute at a fixed fraction of peak, memory-bound
/// terms at a fixed fraction of HBM bandwidth.
#[derive(Debug, Clone)]
pub struct Roofline {
    /// Fraction of dense peak FLOPS reached by block matmuls (0..1].
    pub compute_efficiency: f64,
    /// Fraction of HBM bandwidth reached by memory-bound kernels (0..1].
    pub bandwidth_efficiency: f64,
}

impl Default for Roofline {
    fn default() -> Self {
        Roofline {
            compute_efficiency: 0.5,
            bandwidth_efficiency: 0.7,
        }
    }
}

impl Predictor for Roofline {
    fn block_ms(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
    ) -> Result<(f64, f64), String> {
        let peak = gpu
            .peak_tflops(dtype)
            .ok_or_else(|| format!("{} cannot run {dtype}", gpu.name))?;
        let m = m as f64;
        let flops_f = model.block_flops_fwd(seq_len) * m;
        let bytes_f = model.block_bytes_fwd(seq_len, dtype) * m;
        let t = |flops: f64, bytes: f64| {
            let c = flops / (peak * 1e12 * self.compute_efficiency) * 1e3;
            let b = bytes / (gpu.mem_bw_gbps * 1e9 * self.bandwidth_efficiency) * 1e3;
            c.max(b)
        };
        Ok((t(flops_f, bytes_f), t(2.0 * flops_f, 2.0 * bytes_f)))
    }

    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: Dtype, m: u32) -> f64 {
        // One block's saved activations (recompute keeps only one block live),
        // plus the logits of the head in fp32, plus two unsharded fp32 blocks.
        let act = model.activation_bytes_per_sample(seq_len, dtype) * m as f64;
        let logits =
            model.tokens_per_sample(seq_len) as f64 * model.vocab as f64 * 4.0 * 2.0 * m as f64;
        let buffers = 2.0 * 4.0 * model.params_per_block() as f64;
        (act + logits + buffers) / GIB
    }

    fn name(&self) -> String {
        format!(
            "roofline (compute {:.0}% of peak, bandwidth {:.0}%)",
            self.compute_efficiency * 100.0,
            self.bandwidth_efficiency * 100.0
        )
    }
}

/// The predictor the tools use by default (the best one the project ships).
pub fn builtin() -> Box<dyn Predictor> {
    Box::new(Roofline::default())
}
