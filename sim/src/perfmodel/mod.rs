//! Analytic performance model: predicted per-block time and non-state memory
//! for any (GPU, model, seq_len, dtype, micro-batch) from the catalogs alone.
//!
//! The [`Predictor`] trait is what the cost model asks when no measured or
//! imported profile exists. Two implementations:
//! * [`Roofline`], the uncalibrated baseline: every kernel at a fixed
//!   fraction of peak or of HBM bandwidth;
//! * [`Calibrated`], the shipped model ([`builtin`]).
//!
//! Both price the same work ([`work`]: the block's kernels on one TP rank,
//! as the training stack runs them; [`units`]: the head and embedding)
//! kernel by kernel ([`price`]): every GEMM at its shape against the GPU's
//! large-GEMM rate (the published maximum achievable matmul rate of A100
//! and H100, [`kernels::gemm_anchor`]; a calibrated, power-bounded ceiling
//! elsewhere) with the small-GEMM loss, the attention core (eager score
//! chain or fused kernel), element-wise and per-parameter traffic at the
//! achieved HBM bandwidth, and a floor per kernel launch. The calibrated
//! coefficients are fitted by [`calibrate`] to measured profiles and
//! shipped in `profiles/calibration.json`.
//!
//! Times are ms of ONE transformer block (or unit) on one rank, memory GiB.
//! Every prediction is at least the roofline bound ([`roofline_bound_ms`]).

pub mod arch;
mod bound;
pub mod calibrate;
pub mod coeffs;
mod errors;
pub mod features;
pub mod kernels;
mod lm;
pub mod price;
pub mod units;
pub mod work;

pub use bound::{roofline_bound_ms, roofline_bound_ms_with};
pub use price::{BlockTimes, PassTime};
pub use work::BlockImpl;

use crate::error::SpecError;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::precision::NumFormat;
use crate::tensor::TensorParallel;
use crate::units::GIB;
use coeffs::{Calibration, MemTheta, TimeTheta, CALIBRATION_FORMAT};
use features::{GpuFacts, MemFeat, TimeFeat};
use price::Prices;

/// One block's predicted times on one rank for one implementation.
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
    /// The forward by part (GEMMs, attention, element-wise, per-parameter,
    /// launches), ms.
    pub fwd_parts: PassTime,
    /// The backward by part, ms.
    pub bwd_parts: PassTime,
}

impl BlockPrediction {
    /// A prediction of `times` clamped from below by the roofline `bound`
    /// (forward, backward ms).
    fn of(times: &BlockTimes, bound: (f64, f64)) -> BlockPrediction {
        let fwd_ms = times.fwd.total_ms().max(bound.0);
        BlockPrediction {
            fwd_ms,
            bwd_ms: times.bwd.total_ms().max(bound.1),
            selective_recompute_ms: times.selective_ms.min(fwd_ms),
            attention_recompute_ms: times.attention_ms.min(fwd_ms),
            fwd_parts: times.fwd,
            bwd_parts: times.bwd,
        }
    }
}

/// The units around the blocks, forward and backward ms on one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitPrediction {
    /// Embedding forward ms.
    pub embed_fwd_ms: f64,
    /// Embedding backward ms.
    pub embed_bwd_ms: f64,
    /// Head (final norm, output layer, loss) forward ms.
    pub head_fwd_ms: f64,
    /// Head backward ms.
    pub head_bwd_ms: f64,
}

/// Predicts block costs where no profile exists.
pub trait Predictor: Send + Sync + std::fmt::Debug {
    /// Forward, backward and recompute ms of one rank of the TP group `tp`
    /// running ONE block of `model` on a micro-batch of `m` samples,
    /// implemented as `imp` (the whole block at `t = 1`). `Err` with a
    /// reason when this GPU cannot run the dtype.
    #[allow(clippy::too_many_arguments)]
    fn block_prediction_tp(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<BlockPrediction, String>;
    /// The embedding and head on one rank of `tp` for `m` samples.
    #[allow(clippy::too_many_arguments)]
    fn unit_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<UnitPrediction, String>;
    /// [`Predictor::block_prediction_tp`] of the whole block.
    fn block_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
    ) -> Result<BlockPrediction, String> {
        self.block_prediction_tp(gpu, model, seq_len, dtype, m, imp, &TensorParallel::NONE)
    }
    /// Forward and backward ms of ONE whole block as the reference profiles
    /// run it ([`BlockImpl::REFERENCE`]: PyTorch eager, eager attention).
    fn block_ms(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
    ) -> Result<(f64, f64), String> {
        let p = self.block_prediction(gpu, model, seq_len, dtype, m, BlockImpl::REFERENCE)?;
        Ok((p.fwd_ms, p.bwd_ms))
    }
    /// Non-state GPU memory of one training step at micro-batch size `m`
    /// (activations of one micro-batch, unsharded unit buffers, logits), GiB.
    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: NumFormat, m: u32) -> f64;
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

fn unsupported(gpu: &GpuSpec, dtype: NumFormat) -> String {
    format!(
        "{} cannot run {dtype} (no {dtype} peak in the GPU catalog)",
        gpu.name
    )
}

/// The units' times of `model` on one rank, priced at `prices`.
#[allow(clippy::too_many_arguments)]
fn price_units(
    prices: &Prices,
    model: &ModelSpec,
    seq_len: u32,
    dtype: NumFormat,
    m: u32,
    imp: BlockImpl,
    tp: &TensorParallel,
) -> UnitPrediction {
    let e = dtype.bytes();
    let (ef, eb) = units::embedding_work(model, seq_len, dtype, m, tp);
    let (hf, hb) = units::head_work(model, seq_len, dtype, m, tp, imp);
    UnitPrediction {
        embed_fwd_ms: prices.unit(&ef, e).total_ms(),
        embed_bwd_ms: prices.unit(&eb, e).total_ms(),
        head_fwd_ms: prices.unit(&hf, e).total_ms(),
        head_bwd_ms: prices.unit(&hb, e).total_ms(),
    }
}

/// Uncalibrated roofline: compute at a fixed fraction of peak, memory-bound
/// terms at a fixed fraction of HBM bandwidth, the per-op counts as they
/// are, no launch floors.
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

impl Roofline {
    fn prices(&self, g: &GpuFacts) -> Prices {
        Prices {
            class: g.class,
            gemm_flops: g.peak_flops * self.compute_efficiency,
            sms: g.sms,
            k_half: 0.0,
            bw_bps: g.bw_bps * self.bandwidth_efficiency,
            elem_factor: 1.0,
            chain_factor: 1.0,
            token_bytes: 0.0,
            // Autocast reads the fp32 master and writes the half copy; the
            // backward's cast and accumulation about twice that.
            weight_fwd_bytes: 6.0,
            weight_bwd_bytes: 18.0,
            kernel_floor_ms: 0.0,
        }
    }
}

impl Predictor for Roofline {
    fn block_prediction_tp(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<BlockPrediction, String> {
        let f = TimeFeat::new(gpu, model, seq_len, dtype, m, tp, imp)
            .ok_or_else(|| unsupported(gpu, dtype))?;
        let times = self.prices(&f.gpu).block(&f.work);
        let bound = price::roofline_ms(&f.work, f.gpu.peak_flops, f.gpu.bw_bps);
        Ok(BlockPrediction::of(&times, bound))
    }

    fn unit_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<UnitPrediction, String> {
        let g = GpuFacts::new(gpu, dtype).ok_or_else(|| unsupported(gpu, dtype))?;
        Ok(price_units(
            &self.prices(&g),
            model,
            seq_len,
            dtype,
            m,
            imp,
            tp,
        ))
    }

    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: NumFormat, m: u32) -> f64 {
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
    fn block_prediction_tp(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<BlockPrediction, String> {
        let f = TimeFeat::new(gpu, model, seq_len, dtype, m, tp, imp)
            .ok_or_else(|| unsupported(gpu, dtype))?;
        let times = self.time.prices(&f.gpu, &f.work).block(&f.work);
        let bound = price::roofline_ms(&f.work, f.gpu.peak_flops, f.gpu.bw_bps);
        Ok(BlockPrediction::of(&times, bound))
    }

    fn unit_prediction(
        &self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        seq_len: u32,
        dtype: NumFormat,
        m: u32,
        imp: BlockImpl,
        tp: &TensorParallel,
    ) -> Result<UnitPrediction, String> {
        let f = TimeFeat::new(gpu, model, seq_len, dtype, m, tp, imp)
            .ok_or_else(|| unsupported(gpu, dtype))?;
        let prices = self.time.prices(&f.gpu, &f.work);
        Ok(price_units(&prices, model, seq_len, dtype, m, imp, tp))
    }

    fn act_mem_gib(&self, model: &ModelSpec, seq_len: u32, dtype: NumFormat, m: u32) -> f64 {
        self.mem
            .act_gib(&MemFeat::new(model, seq_len, dtype, m.max(1)))
    }

    fn name(&self) -> String {
        format!("calibrated:{}", self.origin)
    }
    fn error_band(&self, gpu: &GpuSpec) -> Option<String> {
        let band = self.calibration.error_band.as_ref()?.time_for(&gpu.name);
        let class = arch::ArchClass::of(gpu);
        let anchor = kernels::gemm_anchor(class);
        Some(match self.time.borrowed_class(class) {
            Some(_) if anchor.is_some() => {
                let a = anchor.expect("checked");
                format!(
                    "{band}; no {} GPU in the data: tensor-core GEMMs at the published maximum achievable matmul rate ({:.1} of {:.0} TFLOPS on {}), memory-bound kernels at its published HBM fraction",
                    class.as_str(),
                    a.tflops,
                    a.peak_tflops,
                    a.gpu
                )
            }
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
