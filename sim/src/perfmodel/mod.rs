//! Analytic performance model: predicted per-block time and non-state memory
//! for any (GPU, model, seq_len, dtype, micro-batch) from the catalogs alone.
//!
//! The [`Predictor`] trait is what the cost model asks when no measured or
//! imported profile exists. Two implementations:
//! * [`Roofline`], the uncalibrated baseline:
//!   `max(FLOPs / (peak x efficiency), bytes / bandwidth)` per block pass;
//! * [`Calibrated`], the shipped model ([`builtin`]): matmul FLOPs at a
//!   per-generation efficiency of peak (bounded by board power, growing with
//!   model width and micro-batch tokens), elementwise and weight traffic at a
//!   fraction of HBM bandwidth, and a fixed kernel floor; forward and
//!   backward separately. Its coefficients are fitted by [`calibrate`] to
//!   measured profiles and shipped in `profiles/calibration.json`.
//!
//! Times are ms of ONE transformer block, memory GiB. Every prediction is at
//! least the roofline bound ([`roofline_bound_ms`]).

pub mod arch;
mod bound;
pub mod calibrate;
pub mod coeffs;
mod errors;
pub mod features;
pub mod kernels;
mod lm;

pub use bound::{roofline_bound_ms, roofline_bound_ms_with};

use crate::dtype::Dtype;
use crate::error::SpecError;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::strategy::Attention;
use crate::units::GIB;
use coeffs::{Calibration, MemTheta, TimeTheta, CALIBRATION_FORMAT};
use features::{MemFeat, TimeFeat};

/// One block's predicted times for one attention kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockPrediction {
    /// Forward ms.
    pub fwd_ms: f64,
    /// Backward ms.
    pub bwd_ms: f64,
    /// The part of `fwd_ms` op-level selective recompute reruns
    /// (torchtitan's `selective`: element-wise ops, the matmuls it does not
    /// keep and, with eager attention, the score chain), ms.
    pub selective_recompute_ms: f64,
    /// The part of `fwd_ms` core-attention recompute reruns (Megatron's
    /// selective: the score chain, or the fused attention kernel), ms.
    pub attention_recompute_ms: f64,
}

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
    /// Forward, backward and selective-recompute ms of ONE block with the
    /// given attention kernel (eager: the same forward and backward as
    /// [`Predictor::block_ms`]). `Err` when this GPU cannot run the dtype.
    fn block_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
        attention: Attention,
    ) -> Result<BlockPrediction, String>;
    /// [`Predictor::block_prediction`] for one rank of the TP group `tp`
    /// (its share of the block, [`crate::tensor`]). A predictor without a
    /// model of the split divides the whole block's times by the degree.
    #[allow(clippy::too_many_arguments)]
    fn block_prediction_tp(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
        attention: Attention,
        tp: &crate::tensor::TensorParallel,
    ) -> Result<BlockPrediction, String> {
        let p = self.block_prediction(gpu, model, seq_len, dtype, m, attention)?;
        let t = tp.degree.max(1) as f64;
        Ok(BlockPrediction {
            fwd_ms: p.fwd_ms / t,
            bwd_ms: p.bwd_ms / t,
            selective_recompute_ms: p.selective_recompute_ms / t,
            attention_recompute_ms: p.attention_recompute_ms / t,
        })
    }
    /// Non-state GPU memory of one training step at micro-batch size `m`
    /// (activations of one micro-batch, unsharded unit buffers, logits), GiB.
    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: Dtype, m: u32) -> f64;
    /// Name and coefficients source, for provenance (`roofline`, `calibrated:...`).
    fn name(&self) -> String;
    /// How far its block times are expected to be off on `gpu`, as printed
    /// (cross-validated; `None`: not known), and, for a GPU whose
    /// generation has no measurements, what its numbers borrow from where.
    fn error_band(&self, gpu: &GpuSpec) -> Option<String> {
        let _ = gpu;
        None
    }
    /// How far its activation memory is expected to be off, as printed
    /// (cross-validated; `None`: not known).
    fn memory_error_band(&self) -> Option<String> {
        None
    }
    /// Its block times' cross-validated absolute percentage error on
    /// `gpu`: (median, 90th percentile), % (`None`: not known).
    fn time_error_pct(&self, gpu: &GpuSpec) -> Option<(f64, f64)> {
        let _ = gpu;
        None
    }
}

fn unsupported(gpu: &GpuSpec, dtype: Dtype) -> String {
    format!(
        "{} cannot run {dtype} (no {dtype} peak in the GPU catalog)",
        gpu.name
    )
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
            .ok_or_else(|| unsupported(gpu, dtype))?;
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

    fn block_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
        attention: Attention,
    ) -> Result<BlockPrediction, String> {
        let peak = gpu
            .peak_tflops(dtype)
            .ok_or_else(|| unsupported(gpu, dtype))?
            * 1e12
            * self.compute_efficiency;
        let bw = gpu.mem_bw_gbps * 1e9 * self.bandwidth_efficiency;
        let mf = m as f64;
        let s = model.tokens_per_sample(seq_len) as f64;
        let score_flops = 4.0 * s * s * model.hidden as f64 * mf;
        let score_io = features::score_io_bytes_per_sample(model, seq_len, dtype) * mf;
        let pointwise = model.block_pointwise_io_bytes_fwd(seq_len, dtype) * mf;
        let t = |flops: f64, bytes: f64| (flops / peak * 1e3).max(bytes / bw * 1e3);
        let linear = model.block_flops_fwd(seq_len) * mf - score_flops;
        let rerun_mm = crate::activation::recomputed_matmul_fraction(model) * linear / peak * 1e3;
        match attention {
            Attention::Eager => {
                let (fwd, bwd) = self.block_ms(gpu, model, seq_len, dtype, m)?;
                let chain = score_flops / peak * 1e3 + score_io / bw * 1e3;
                Ok(BlockPrediction {
                    fwd_ms: fwd,
                    bwd_ms: bwd,
                    selective_recompute_ms: (chain + pointwise / bw * 1e3 + rerun_mm).min(fwd),
                    attention_recompute_ms: chain.min(fwd),
                })
            }
            Attention::Flash => {
                let causal = model.family.is_causal();
                let attn = score_flops * if causal { 0.5 } else { 1.0 };
                let bytes = model.block_bytes_fwd(seq_len, dtype) * mf - score_io;
                let (fwd_rel, bwd_rel) = kernels::fused_attention_rel(
                    arch::ArchClass::of(gpu),
                    model.head_dim() as f64,
                    s,
                    causal,
                );
                let fwd = t(linear + attn / fwd_rel, bytes);
                let bwd = t(2.0 * linear + 2.5 * attn / bwd_rel, 2.0 * bytes);
                Ok(BlockPrediction {
                    fwd_ms: fwd,
                    bwd_ms: bwd,
                    selective_recompute_ms: (pointwise / bw * 1e3 + rerun_mm).min(fwd),
                    attention_recompute_ms: (attn / fwd_rel / peak * 1e3).min(fwd),
                })
            }
        }
    }

    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: Dtype, m: u32) -> f64 {
        // One block's saved activations (recompute keeps only one block live),
        // plus the logits of the head in fp32, plus two unsharded fp32 blocks.
        let act = model.activation_bytes_per_sample(seq_len, dtype) * m as f64;
        let logits = model.fp32_logits_bytes(seq_len) * 2.0 * m as f64;
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

/// The calibrated model (see the module doc and [`coeffs`]).
#[derive(Debug, Clone)]
pub struct Calibrated {
    /// The coefficients as stored in the file.
    pub calibration: Calibration,
    time: TimeTheta,
    mem: MemTheta,
    origin: String,
}

/// The calibration shipped with the project (`profiles/calibration.json`).
pub const BUILTIN_CALIBRATION_JSON: &str = include_str!("../../../profiles/calibration.json");

impl Calibrated {
    /// Builds the predictor from calibration coefficients.
    pub fn new(calibration: Calibration, origin: &str) -> Result<Calibrated, SpecError> {
        if calibration.format != CALIBRATION_FORMAT {
            return Err(SpecError::invalid(
                origin,
                "format",
                format!(
                    "expected `{CALIBRATION_FORMAT}`, got `{}`",
                    calibration.format
                ),
            ));
        }
        let time = TimeTheta::from_coefficients(&calibration.time, origin)?;
        if let Some(b) = &calibration.error_band {
            b.check(origin)?;
        }
        let mem = MemTheta::from_coefficients(&calibration.memory, origin)?;
        Ok(Calibrated {
            calibration,
            time,
            mem,
            origin: origin.to_string(),
        })
    }

    /// Parses a calibration file (`cephalo-calibration/1` JSON).
    pub fn from_json(text: &str, origin: &str) -> Result<Calibrated, SpecError> {
        let c: Calibration = serde_json::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
        Calibrated::new(c, origin)
    }

    /// The shipped calibration. The file is compiled in and checked by a test,
    /// so failing to parse it is a build defect, not a user error.
    pub fn builtin() -> Calibrated {
        Calibrated::from_json(BUILTIN_CALIBRATION_JSON, "profiles/calibration.json")
            .expect("the shipped profiles/calibration.json is valid (checked by tests)")
    }
}

impl Predictor for Calibrated {
    fn block_ms(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
    ) -> Result<(f64, f64), String> {
        let f = TimeFeat::new(gpu, model, seq_len, dtype, m.max(1))
            .ok_or_else(|| unsupported(gpu, dtype))?;
        let bound = roofline_bound_ms(gpu, model, seq_len, dtype, m.max(1))
            .ok_or_else(|| unsupported(gpu, dtype))?;
        Ok(calibrate::clamp_to_bound(self.time.time_ms(&f), bound))
    }

    fn block_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
        attention: Attention,
    ) -> Result<BlockPrediction, String> {
        let whole = crate::tensor::TensorParallel::NONE;
        self.block_prediction_tp(gpu, model, seq_len, dtype, m, attention, &whole)
    }

    /// One rank's share of the block (the whole block at `t = 1`, where
    /// the sliced features and the bound are the block's own).
    fn block_prediction_tp(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: Dtype,
        m: u32,
        attention: Attention,
        tp: &crate::tensor::TensorParallel,
    ) -> Result<BlockPrediction, String> {
        let f = TimeFeat::new(gpu, model, seq_len, dtype, m.max(1))
            .ok_or_else(|| unsupported(gpu, dtype))?
            .tensor_sliced(tp.degree, tp.sequence_parallel);
        // The rank's share of the whole block's roofline bound.
        let (bf, bb) = roofline_bound_ms_with(gpu, model, seq_len, dtype, m.max(1), attention)
            .ok_or_else(|| unsupported(gpu, dtype))?;
        let t = tp.degree.max(1) as f64;
        let p = self.time.time_parts(&f, attention);
        let (fwd, bwd) = calibrate::clamp_to_bound((p.fwd_ms, p.bwd_ms), (bf / t, bb / t));
        Ok(BlockPrediction {
            fwd_ms: fwd,
            bwd_ms: bwd,
            selective_recompute_ms: p.selective_ms.min(fwd),
            attention_recompute_ms: p.attention_ms.min(fwd),
        })
    }

    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: Dtype, m: u32) -> f64 {
        self.mem
            .act_gib(&MemFeat::new(model, seq_len, dtype, m.max(1)))
    }

    fn name(&self) -> String {
        format!("calibrated:{}", self.origin)
    }
    fn error_band(&self, gpu: &GpuSpec) -> Option<String> {
        let band = self.calibration.error_band.as_ref()?.time_for(&gpu.name);
        let class = arch::ArchClass::of(gpu);
        Some(match self.time.borrowed_class(class) {
            Some(from) => format!(
                "{band}; no {} GPU in the data: matmuls borrow the {} fit (its efficiency and power model, with a {:.0} nm process credit against {:.0} nm)",
                class.as_str(),
                from.as_str(),
                class.process_nm(),
                from.process_nm()
            ),
            None => band,
        })
    }
    fn time_error_pct(&self, gpu: &GpuSpec) -> Option<(f64, f64)> {
        let b = self.calibration.error_band.as_ref()?;
        // A generation with no data borrows another's fit: as unsure as the
        // worst GPU left out of the fit (a lone GPU of its generation, such
        // as the T4, left out is exactly such a borrow).
        if self.time.borrowed_class(arch::ArchClass::of(gpu)).is_some() {
            let worst = |f: fn(&errors::ErrorStats) -> f64| {
                b.time_leave_one_gpu_out_per_gpu
                    .iter()
                    .map(|g| f(&g.stats))
                    .fold(f(&b.time_leave_one_gpu_out), f64::max)
            };
            return Some((worst(|s| s.median_ape_pct), worst(|s| s.p90_ape_pct)));
        }
        let s = b
            .time_leave_one_gpu_out_per_gpu
            .iter()
            .find(|g| g.group == gpu.name)
            .map_or(&b.time_leave_one_gpu_out, |g| &g.stats);
        Some((s.median_ape_pct, s.p90_ape_pct))
    }
    fn memory_error_band(&self) -> Option<String> {
        self.calibration.error_band.as_ref().map(|b| {
            let s = &b.memory_leave_one_model_out;
            format!(
                "cross-validated error {:.0}% median, {:.0}% p90 (each model left out of the fit in turn, {} points)",
                s.median_ape_pct, s.p90_ape_pct, s.points
            )
        })
    }
}

/// The predictor the tools use by default: the shipped calibration.
pub fn builtin() -> Box<dyn Predictor> {
    Box::new(Calibrated::builtin())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_files_reject_unknown_fields() {
        assert!(Calibrated::from_json(BUILTIN_CALIBRATION_JSON, "builtin").is_ok());
        // A misspelt or foreign key anywhere is an error, not ignored.
        let bad = BUILTIN_CALIBRATION_JSON.replacen('{', "{\"surprise\": 1, ", 1);
        let e = Calibrated::from_json(&bad, "cal.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cal.json") && e.contains("surprise"), "{e}");
    }
}
