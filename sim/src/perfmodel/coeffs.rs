//! The calibrated performance model: its parameters, its formulas and the
//! calibration file that stores them (`profiles/calibration.json`,
//! format `cephalo-calibration/1`).
//!
//! Per block pass (times in ms, `F` = forward matmul FLOPs of the
//! micro-batch, `E` = elementwise bytes, `P` = block parameters):
//!
//! ```text
//! rate  = smoothmin(eff[class,path] * peak, u * f_sus)
//!         * h / (h + h_half[path]) * T / (T + T_half[path])        (T = m*s tokens)
//! f_sus = f0[path] * k[class] * (node_nm / 8)^-beta * (W / u / W_ref[path])^gamma
//!         (u = peak / boost clock, FLOP per cycle; W = board power)
//! E     = m*(A - S) + k_s[half|fp32] * m*S + act_bytes * c_m[fam] * m*s^2
//!         (A = ModelSpec::block_activation_io_bytes_fwd, S its score-shaped
//!          part, features::score_io_bytes_per_sample)
//! fwd   = F / rate + (E + w_fwd*P) / (bw * bw_eff) + fixed_fwd
//! bwd   = r_gemm * 2F / rate + (r_elem*E + w_bwd*P) / (bw * bw_eff) + fixed_bwd
//! ```
//!
//! and both are clamped from below by the roofline bound (peak FLOPs and full
//! bandwidth, see [`super::roofline_bound_ms`]). Non-state memory (GiB):
//!
//! ```text
//! act(m) = fixed + (act_bytes/4 * (w_block*P + w_edge*P_edge)
//!          + m*(act_bytes*(b_h*s*h + b_f*s*ffn + b_s*a*s^2) + b_v*4*logits)) / 2^30
//! ```
//!
//! `f_sus` is the clock a card can hold under dense GEMMs within its board
//! power: dynamic power grows with units x clock x voltage^2 and voltage
//! rises with clock, so the sustainable clock grows like a power `gamma < 1`
//! of the watts per unit (1/3 is the ideal DVFS cube law); a newer process
//! node spends less energy per FLOP. This is what lets a 70 W T4 or a 72 W
//! L4 be predicted from the other cards' data: their slowness is power, not
//! a property of their generation.
//!
//! Internally the parameters are an unconstrained vector ([`TimeTheta`],
//! [`MemTheta`]): positive quantities are `base * exp(x)`, fractions are
//! logistic. The file stores the physical values.

use super::arch::{ArchClass, MathPath};
use super::errors::{ErrorStats, GroupErrors};
use super::features::{MemFeat, TimeFeat, FAMILIES};
use super::kernels;
use crate::error::SpecError;
use crate::strategy::Attention;
use crate::units::GIB;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const NC: usize = 7;
/// Index of the efficiency logit of (class, path).
pub(crate) const fn eff(c: usize, p: usize) -> usize {
    2 * c + p
}
/// Index of the power factor of a class.
pub(crate) const fn pwf(c: usize) -> usize {
    14 + c
}
/// Index of the sustained-clock factor of a path (tensor, then CUDA cores).
pub(crate) const CLK: usize = 21;
pub(crate) const H0: usize = 23;
pub(crate) const T0: usize = 25;
pub(crate) const EBW: usize = 27;
pub(crate) const CM: usize = 28;
pub(crate) const WB: usize = 32;
pub(crate) const RMM: usize = 36;
pub(crate) const REL: usize = 37;
pub(crate) const T0F: usize = 38;
pub(crate) const T0B: usize = 39;
/// Index of the global efficiency logit of a path.
pub(crate) const EG: usize = 40;
/// Index of the dual-issue FP32 factor.
pub(crate) const DUAL: usize = 42;
/// Index of the process-node exponent of the power cap.
pub(crate) const NODE: usize = 43;
/// Index of the score-traffic factor of 16-bit (then fp32) training.
pub(crate) const SCR: usize = 44;
/// Index of the power exponent `gamma` of the sustained clock.
pub(crate) const GAM: usize = 46;
/// Number of time parameters.
pub(crate) const N_TIME: usize = 47;
/// Process node (nm) at which `power_clock_ghz` applies as is.
const NODE_REF_NM: f64 = 8.0;
const DUAL_BASE: f64 = 0.6;

/// Base sustained clock (Hz) of the power cap, per path.
const CLOCK_BASE_HZ: f64 = 1.5e9;
/// Board watts per FLOP/cycle at which `power_clock_ghz` applies, per path
/// (tensor, CUDA cores): about a V100's.
const W_PER_CYCLE_FLOP_REF: [f64; 2] = [0.003, 0.02];
const GAM_BASE: f64 = 0.5;
const H0_BASE: f64 = 1000.0;
const T0_BASE: f64 = 500.0;
const CM_BASE: f64 = 4.0;
const W_BASE: [f64; 4] = [2.0, 12.0, 4.0, 12.0];
const RMM_BASE: f64 = 1.0;
const REL_BASE: f64 = 1.5;
const FIXED_BASE_MS: f64 = 0.05;

/// One block pass's predicted times for one attention kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeParts {
    /// Forward, ms.
    pub fwd_ms: f64,
    /// Backward, ms.
    pub bwd_ms: f64,
    /// The part of the forward op-level selective recompute reruns, ms.
    pub selective_ms: f64,
    /// The part of the forward core-attention recompute reruns, ms.
    pub attention_ms: f64,
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(1e-9, 1.0 - 1e-9);
    (p / (1.0 - p)).ln()
}

/// Smooth minimum of two rates (a p-norm of the reciprocals, p = 4).
fn smooth_min(a: f64, b: f64) -> f64 {
    (a.powi(-4) + b.powi(-4)).powf(-0.25)
}

/// Time-model parameters in unconstrained form, plus which (class, path)
/// pairs were fitted to data (the others fall back, see [`ArchClass::fallback`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TimeTheta {
    /// The parameter vector (length `N_TIME`).
    pub v: Vec<f64>,
    /// `fitted[class][path]`: the pair had training points.
    pub fitted: [[bool; 2]; NC],
}

impl Default for TimeTheta {
    fn default() -> Self {
        let mut v = vec![0.0; N_TIME];
        v[EBW] = logit(0.7);
        v[EG] = logit(0.8);
        v[EG + 1] = logit(0.8);
        TimeTheta {
            v,
            fitted: [[false; 2]; NC],
        }
    }
}

impl TimeTheta {
    /// The class whose efficiency stands for `class` on path `p`: itself when
    /// fitted, else the first fitted class along the fallback chain.
    fn fitted_along_chain(&self, class: ArchClass, p: usize) -> Option<ArchClass> {
        let mut c = class;
        for _ in 0..NC {
            if self.fitted[c.index()][p] {
                return Some(c);
            }
            c = c.fallback();
        }
        None
    }

    /// The class whose fit stands in for `class`'s matmuls when `class` has
    /// no measurements of its own (`None`: fitted itself, or nothing is).
    pub fn borrowed_class(&self, class: ArchClass) -> Option<ArchClass> {
        let c = self.power_class(class);
        (c != class && self.fitted[c.index()].iter().any(|f| *f)).then_some(c)
    }

    fn power_class(&self, class: ArchClass) -> ArchClass {
        let mut c = class;
        for _ in 0..NC {
            if self.fitted[c.index()].iter().any(|f| *f) {
                return c;
            }
            c = c.fallback();
        }
        class
    }

    /// Asymptotic fraction of peak of (class, path): the global value of the
    /// path shifted by the class's own deviation when the class was fitted,
    /// times the dual-issue factor for CUDA-core math on GA10x / Ada.
    pub fn efficiency(&self, class: ArchClass, path: MathPath) -> f64 {
        let p = path.index();
        let dev = match self.fitted_along_chain(class, p) {
            Some(c) => self.v[eff(c.index(), p)],
            None => 0.0,
        };
        let mut e = logistic(self.v[EG + p] + dev);
        if path == MathPath::Simt && class.dual_issue_fp32() {
            e *= DUAL_BASE * self.v[DUAL].exp();
        }
        e.min(1.0)
    }

    /// Fraction of HBM bandwidth memory-bound kernels reach on `class`:
    /// the fitted fraction, or, for a generation with no measurements
    /// that has a published one ([`kernels::hbm_efficiency`]), that.
    pub fn bw_efficiency(&self, class: ArchClass) -> f64 {
        match kernels::hbm_efficiency(class) {
            Some(e) if self.borrowed_class(class).is_some() => e,
            _ => logistic(self.v[EBW]),
        }
    }

    /// Sustained matmul rate (FLOP/s) for these features.
    pub fn rate(&self, f: &TimeFeat) -> f64 {
        let p = f.path.index();
        let top = self.efficiency(f.class, f.path) * f.peak_flops;
        let pc = self.power_class(f.class).index();
        let gamma = GAM_BASE * self.v[GAM].exp();
        let clock_hz = CLOCK_BASE_HZ
            * self.v[CLK + p].exp()
            * self.v[pwf(pc)].exp()
            * (f.node_nm / NODE_REF_NM).powf(-self.v[NODE])
            * (f.power_w / f.cycle_flops / W_PER_CYCLE_FLOP_REF[p]).powf(gamma);
        let cap = f.cycle_flops * clock_hz;
        let h0 = H0_BASE * self.v[H0 + p].exp();
        let t0 = T0_BASE * self.v[T0 + p].exp();
        smooth_min(top, cap) * f.hidden / (f.hidden + h0) * f.tokens / (f.tokens + t0)
    }

    /// Forward and backward ms of one block (before the roofline clamp).
    pub fn time_ms(&self, f: &TimeFeat) -> (f64, f64) {
        let v = &self.v;
        let rate = self.rate(f);
        let bw = f.bw_bps * self.bw_efficiency(f.class);
        let score = if f.half { v[SCR] } else { v[SCR + 1] }.exp();
        let elem = f.act_io_bytes - f.score_io_bytes
            + score * f.score_io_bytes
            + f.act_bytes * CM_BASE * v[CM + f.family].exp() * f.elem_mask;
        let (wf, wb) = if f.half {
            (W_BASE[0] * v[WB].exp(), W_BASE[1] * v[WB + 1].exp())
        } else {
            (W_BASE[2] * v[WB + 2].exp(), W_BASE[3] * v[WB + 3].exp())
        };
        let gemm = f.flops / rate * 1e3;
        let fwd = gemm + (elem + wf * f.params) / bw * 1e3 + FIXED_BASE_MS * v[T0F].exp();
        let bwd = RMM_BASE * v[RMM].exp() * 2.0 * gemm
            + (REL_BASE * v[REL].exp() * elem + wb * f.params) / bw * 1e3
            + FIXED_BASE_MS * v[T0B].exp();
        (fwd, bwd)
    }

    /// [`TimeTheta::time_ms`] for either attention kernel, with the part of
    /// the forward a selective recompute reruns (before the roofline clamp).
    ///
    /// Eager: `time_ms` unchanged; the selective part is the score chain
    /// (its FLOPs at the matmul rate, its traffic and mask elements at the
    /// bandwidth) plus the element-wise traffic.
    ///
    /// Flash: the score FLOPs (halved for causal models, which skip the
    /// masked half) run at the published fused-kernel rate of the GPU's
    /// generation relative to its matmul rate ([`super::kernels`]), the backward does 2.5x the forward's attention FLOPs (it
    /// recomputes the probabilities: FlashAttention's own benchmark count),
    /// and no score-shaped tensor or mask touches memory; the selective part
    /// is the element-wise traffic alone.
    pub fn time_parts(&self, f: &TimeFeat, attention: Attention) -> TimeParts {
        let v = &self.v;
        let rate = self.rate(f);
        let bw = f.bw_bps * self.bw_efficiency(f.class);
        let pointwise = f.pointwise_io_bytes / bw * 1e3;
        match attention {
            Attention::Eager => {
                let (fwd, bwd) = self.time_ms(f);
                let score = if f.half { v[SCR] } else { v[SCR + 1] }.exp();
                let chain = f.score_flops / rate * 1e3
                    + (score * f.score_io_bytes
                        + f.act_bytes * CM_BASE * v[CM + f.family].exp() * f.elem_mask)
                        / bw
                        * 1e3;
                let rerun_mm = f.rerun_matmul_fraction * (f.flops - f.score_flops) / rate * 1e3;
                TimeParts {
                    fwd_ms: fwd,
                    bwd_ms: bwd,
                    selective_ms: (chain + pointwise + rerun_mm).min(fwd),
                    attention_ms: chain.min(fwd),
                }
            }
            Attention::Flash => {
                let (fwd_rel, bwd_rel) =
                    kernels::fused_attention_rel(f.class, f.head_dim, f.seq_tokens, f.causal);
                let linear = f.flops - f.score_flops;
                let attn = f.score_flops * if f.causal { 0.5 } else { 1.0 };
                let elem = f.act_io_bytes - f.score_io_bytes;
                let (wf, wb) = if f.half {
                    (W_BASE[0] * v[WB].exp(), W_BASE[1] * v[WB + 1].exp())
                } else {
                    (W_BASE[2] * v[WB + 2].exp(), W_BASE[3] * v[WB + 3].exp())
                };
                let fwd = linear / rate * 1e3
                    + attn / (rate * fwd_rel) * 1e3
                    + (elem + wf * f.params) / bw * 1e3
                    + FIXED_BASE_MS * v[T0F].exp();
                let bwd = RMM_BASE * v[RMM].exp() * 2.0 * linear / rate * 1e3
                    + 2.5 * attn / (rate * bwd_rel) * 1e3
                    + (REL_BASE * v[REL].exp() * elem + wb * f.params) / bw * 1e3
                    + FIXED_BASE_MS * v[T0B].exp();
                let rerun_mm = f.rerun_matmul_fraction * linear / rate * 1e3;
                TimeParts {
                    fwd_ms: fwd,
                    bwd_ms: bwd,
                    selective_ms: (pointwise + rerun_mm).min(fwd),
                    attention_ms: (attn / (rate * fwd_rel) * 1e3).min(fwd),
                }
            }
        }
    }
}

const MA0: usize = 0;
const MAW: usize = 1;
const MAE: usize = 2;
const MBH: usize = 3;
const MBF: usize = 4;
const MBS: usize = 5;
const MBV: usize = 6;
/// Number of memory parameters.
pub(crate) const N_MEM: usize = 7;
const MEM_BASE: [f64; N_MEM] = [0.3, 8.0, 4.0, 10.0, 2.0, 2.0, 4.0];

/// Memory-model parameters in unconstrained form (`base * exp(x)`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemTheta {
    /// The parameter vector (length `N_MEM`).
    pub v: Vec<f64>,
}

impl MemTheta {
    /// All parameters at their base values.
    pub fn base() -> MemTheta {
        MemTheta {
            v: vec![0.0; N_MEM],
        }
    }

    fn p(&self, i: usize) -> f64 {
        MEM_BASE[i] * self.v[i].exp()
    }

    /// Non-state GiB of one training step.
    pub fn act_gib(&self, f: &MemFeat) -> f64 {
        // Unsharded parameter / gradient buffers are in the compute dtype.
        let scale = f.act_bytes / 4.0;
        let fixed = self.p(MA0) * GIB
            + scale * (self.p(MAW) * f.block_params + self.p(MAE) * f.edge_params);
        let per_sample = f.act_bytes
            * (self.p(MBH) * f.elem_hidden
                + self.p(MBF) * f.elem_ffn
                + self.p(MBS) * f.elem_scores)
            + self.p(MBV) * 4.0 * f.elem_logits;
        (fixed + f.m * per_sample) / GIB
    }
}

/// A value per math path.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerPath {
    /// Tensor-core path (fp16/bf16 on GPUs with tensor cores).
    pub tensor: f64,
    /// CUDA-core path (fp32; fp16 on Pascal).
    pub simt: f64,
}

/// A value per math path, absent where no data was fitted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerPathOpt {
    /// Tensor-core path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<f64>,
    /// CUDA-core path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simt: Option<f64>,
}

/// Bytes of weight traffic per block parameter per pass.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightBytes {
    /// Forward, fp16/bf16 autocast.
    pub fwd_half: f64,
    /// Backward, fp16/bf16 autocast.
    pub bwd_half: f64,
    /// Forward, fp32.
    pub fwd_fp32: f64,
    /// Backward, fp32.
    pub bwd_fp32: f64,
}

/// Physical time coefficients (see the module doc for the formula).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeCoefficients {
    /// Asymptotic fraction of dense peak reached by block matmuls, per arch
    /// class and math path (only pairs with measurements).
    pub gemm_efficiency: BTreeMap<ArchClass, PerPathOpt>,
    /// The efficiency of classes (or paths) without measurements.
    pub gemm_efficiency_default: PerPath,
    /// Factor on CUDA-core efficiency for GA10x / Ada, whose datasheet FP32
    /// rate counts dual-issue lanes shared with integer work.
    pub dual_issue_simt_factor: f64,
    /// Sustained clock (GHz) under dense GEMMs of a card at 8 nm with the
    /// reference board watts per FLOP/cycle (0.003 on tensor cores, 0.02 on
    /// CUDA cores, about a V100's), per path.
    pub power_clock_ghz: PerPath,
    /// Exponent `gamma` of the sustained clock in board watts per FLOP/cycle
    /// (dimensionless; 1/3 is the DVFS cube law with voltage proportional to
    /// clock, 1 a fixed energy per FLOP).
    pub power_clock_exponent: f64,
    /// Per-class multiplier of `power_clock_ghz` (classes with data).
    pub power_class_factor: BTreeMap<ArchClass, f64>,
    /// Exponent `beta` of the process-node scaling of the sustained clock:
    /// it is multiplied by `(node_nm / 8)^-beta` (dimensionless; 0 = no node
    /// effect).
    #[serde(default)]
    pub power_node_exponent: f64,
    /// Model width at which matmul efficiency is half its maximum.
    pub hidden_half: PerPath,
    /// Tokens per micro-batch at which matmul efficiency is half its maximum.
    pub tokens_half: PerPath,
    /// Fraction of HBM bandwidth reached by elementwise kernels.
    pub bw_efficiency: f64,
    /// Extra memory passes over `s x s` mask-shaped tensors per sample, per
    /// family, on top of the catalog's activation traffic.
    pub passes_mask: BTreeMap<String, f64>,
    /// Weight traffic per parameter.
    pub weight_bytes_per_param: WeightBytes,
    /// Factor on the catalog's score-shaped (`heads x s x s`) traffic of
    /// eager attention: `tensor` applies to 16-bit training, `simt` to fp32
    /// (dimensionless; 1 = the catalog's count, absent in older files).
    #[serde(default = "unit_per_path")]
    pub score_traffic_factor: PerPath,
    /// Backward matmul time over twice the forward's.
    pub bwd_gemm_ratio: f64,
    /// Backward elementwise traffic over the forward's.
    pub bwd_elem_ratio: f64,
    /// Fixed forward cost per block (kernel floor), ms.
    pub fixed_fwd_ms: f64,
    /// Fixed backward cost per block, ms.
    pub fixed_bwd_ms: f64,
}

/// Physical memory coefficients (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryCoefficients {
    /// Fixed GiB (allocator, workspace).
    pub fixed_gib: f64,
    /// Bytes per block parameter in fp32 (unsharded units in flight,
    /// gradients); scaled by `act_bytes / 4` for 16-bit training.
    pub bytes_per_block_param: f64,
    /// Bytes per embedding + head parameter in fp32 (scaled like
    /// `bytes_per_block_param`).
    pub bytes_per_edge_param: f64,
    /// Saved width-h activations per token (elements).
    pub passes_hidden: f64,
    /// Saved MLP activations per token (elements).
    pub passes_ffn: f64,
    /// Saved score matrices per sample (elements / (a s^2)).
    pub passes_scores: f64,
    /// fp32 logit copies per token.
    pub logit_copies: f64,
}

/// What a calibration was fitted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Where the measurements came from (directory as given).
    pub reference: String,
    /// Timing entries (gpu, model, seq, dtype) fitted.
    pub time_entries: usize,
    /// Timing points (batch sizes) fitted.
    pub time_points: usize,
    /// Memory entries (cluster, model, dtype) fitted.
    pub memory_entries: usize,
    /// Entries left out, each with the reason.
    pub excluded: Vec<String>,
}

/// The calibration file (`cephalo-calibration/1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Format tag, `cephalo-calibration/1`.
    pub format: String,
    /// Timing coefficients.
    pub time: TimeCoefficients,
    /// Memory coefficients.
    pub memory: MemoryCoefficients,
    /// What the fit used.
    pub provenance: Provenance,
    /// How far its predictions are off on data it was not fitted on
    /// (cross-validation when it was made; absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_band: Option<ErrorBand>,
}

/// Cross-validated error of a calibration: what a prediction for a GPU (or
/// model) the fit never saw is off by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBand {
    /// Block time, every GPU type left out in turn: pooled over all points.
    pub time_leave_one_gpu_out: ErrorStats,
    /// Block time, leave-one-GPU-out, per GPU (catalog name).
    pub time_leave_one_gpu_out_per_gpu: Vec<GroupErrors>,
    /// Block time, every model left out in turn: pooled.
    pub time_leave_one_model_out: ErrorStats,
    /// Activation memory, leave-one-model-out: pooled.
    pub memory_leave_one_model_out: ErrorStats,
}

impl ErrorBand {
    /// Checks every statistic of the band: percentages in
    /// [`ranges::ERROR_PCT`], the 90th percentile not below the median, and
    /// at least one point behind each; errors name the field.
    pub fn check(&self, origin: &str) -> Result<(), SpecError> {
        let one = |field: String, s: &ErrorStats| -> Result<(), SpecError> {
            crate::physical::check(
                origin,
                &format!("{field}.median_ape_pct"),
                s.median_ape_pct,
                &ranges::ERROR_PCT,
            )?;
            crate::physical::check(
                origin,
                &format!("{field}.p90_ape_pct"),
                s.p90_ape_pct,
                &ranges::ERROR_PCT,
            )?;
            if s.p90_ape_pct < s.median_ape_pct || s.points == 0 {
                return Err(SpecError::invalid(
                    origin,
                    field,
                    format!(
                        "expected a 90th percentile at or above the median over at least one point, got median {}%, p90 {}%, {} points",
                        s.median_ape_pct, s.p90_ape_pct, s.points
                    ),
                ));
            }
            Ok(())
        };
        one(
            "error_band.time_leave_one_gpu_out".into(),
            &self.time_leave_one_gpu_out,
        )?;
        one(
            "error_band.time_leave_one_model_out".into(),
            &self.time_leave_one_model_out,
        )?;
        one(
            "error_band.memory_leave_one_model_out".into(),
            &self.memory_leave_one_model_out,
        )?;
        for (i, g) in self.time_leave_one_gpu_out_per_gpu.iter().enumerate() {
            one(
                format!("error_band.time_leave_one_gpu_out_per_gpu[{i}].stats"),
                &g.stats,
            )?;
        }
        Ok(())
    }

    /// The time error band for a GPU, as printed: its own leave-one-GPU-out
    /// errors when the fit had it, else the pooled ones.
    pub fn time_for(&self, gpu: &str) -> String {
        match self.time_leave_one_gpu_out_per_gpu.iter().find(|g| g.group == gpu) {
            Some(g) => format!(
                "cross-validated error {:.0}% median, {:.0}% p90 ({gpu} left out of the fit, {} points)",
                g.stats.median_ape_pct, g.stats.p90_ape_pct, g.stats.points
            ),
            None => {
                let s = &self.time_leave_one_gpu_out;
                format!(
                    "cross-validated error {:.0}% median, {:.0}% p90 (each GPU type left out in turn, {} points; no {gpu} in the data)",
                    s.median_ape_pct, s.p90_ape_pct, s.points
                )
            }
        }
    }
}

/// The format tag of calibration files.
pub const CALIBRATION_FORMAT: &str = "cephalo-calibration/1";

fn unit_per_path() -> PerPath {
    PerPath {
        tensor: 1.0,
        simt: 1.0,
    }
}

fn fam_map(v: &[f64], base: f64) -> BTreeMap<String, f64> {
    FAMILIES
        .iter()
        .enumerate()
        .map(|(i, f)| (f.to_string(), base * v[i].exp()))
        .collect()
}

impl TimeTheta {
    /// Physical coefficients of this parameter vector.
    pub fn to_coefficients(&self) -> TimeCoefficients {
        let v = &self.v;
        let mut gemm_efficiency = BTreeMap::new();
        let mut power_class_factor = BTreeMap::new();
        for c in ArchClass::ALL {
            let i = c.index();
            let get = |p: usize| self.fitted[i][p].then(|| logistic(v[EG + p] + v[eff(i, p)]));
            if self.fitted[i].iter().any(|f| *f) {
                gemm_efficiency.insert(
                    c,
                    PerPathOpt {
                        tensor: get(0),
                        simt: get(1),
                    },
                );
                power_class_factor.insert(c, v[pwf(i)].exp());
            }
        }
        let pp = |i: usize, base: [f64; 2]| PerPath {
            tensor: base[0] * v[i].exp(),
            simt: base[1] * v[i + 1].exp(),
        };
        TimeCoefficients {
            gemm_efficiency,
            gemm_efficiency_default: PerPath {
                tensor: logistic(v[EG]),
                simt: logistic(v[EG + 1]),
            },
            dual_issue_simt_factor: DUAL_BASE * v[DUAL].exp(),
            power_clock_ghz: {
                let p = pp(CLK, [CLOCK_BASE_HZ; 2]);
                PerPath {
                    tensor: p.tensor / 1e9,
                    simt: p.simt / 1e9,
                }
            },
            power_clock_exponent: GAM_BASE * v[GAM].exp(),
            power_class_factor,
            power_node_exponent: v[NODE],
            hidden_half: pp(H0, [H0_BASE; 2]),
            tokens_half: pp(T0, [T0_BASE; 2]),
            bw_efficiency: logistic(v[EBW]),
            passes_mask: fam_map(&v[CM..CM + 4], CM_BASE),
            weight_bytes_per_param: WeightBytes {
                fwd_half: W_BASE[0] * v[WB].exp(),
                bwd_half: W_BASE[1] * v[WB + 1].exp(),
                fwd_fp32: W_BASE[2] * v[WB + 2].exp(),
                bwd_fp32: W_BASE[3] * v[WB + 3].exp(),
            },
            score_traffic_factor: PerPath {
                tensor: v[SCR].exp(),
                simt: v[SCR + 1].exp(),
            },
            bwd_gemm_ratio: RMM_BASE * v[RMM].exp(),
            bwd_elem_ratio: REL_BASE * v[REL].exp(),
            fixed_fwd_ms: FIXED_BASE_MS * v[T0F].exp(),
            fixed_bwd_ms: FIXED_BASE_MS * v[T0B].exp(),
        }
    }

    /// Parameter vector of physical coefficients; every coefficient is
    /// checked against its physical range ([`ranges`]) and an error names
    /// the field, the range and why.
    pub fn from_coefficients(t: &TimeCoefficients, origin: &str) -> Result<TimeTheta, SpecError> {
        let mut th = TimeTheta::default();
        th.read_gemm_efficiency(t, origin)?;
        th.read_power(t, origin)?;
        th.read_saturation(t, origin)?;
        th.read_traffic(t, origin)?;
        th.read_backward_and_fixed(t, origin)?;
        if !th.fitted.iter().any(|c| c.iter().any(|f| *f)) {
            return Err(SpecError::invalid(
                origin,
                "time.gemm_efficiency",
                "expected at least one fitted class",
            ));
        }
        Ok(th)
    }

    /// GEMM efficiency of `t`: the defaults per math path, the SIMT
    /// dual-issue factor, and every fitted class (marked fitted).
    fn read_gemm_efficiency(
        &mut self,
        t: &TimeCoefficients,
        origin: &str,
    ) -> Result<(), SpecError> {
        use ranges::*;
        self.v[EG] = logit_checked(
            t.gemm_efficiency_default.tensor,
            origin,
            "time.gemm_efficiency_default.tensor",
            &EFFICIENCY,
        )?;
        self.v[EG + 1] = logit_checked(
            t.gemm_efficiency_default.simt,
            origin,
            "time.gemm_efficiency_default.simt",
            &EFFICIENCY,
        )?;
        self.v[DUAL] = ln_checked(
            t.dual_issue_simt_factor,
            DUAL_BASE,
            origin,
            "time.dual_issue_simt_factor",
            &DUAL_ISSUE,
        )?;
        for (c, pp) in &t.gemm_efficiency {
            let i = c.index();
            if let Some(x) = pp.tensor {
                self.v[eff(i, 0)] = logit_checked(
                    x,
                    origin,
                    &format!("time.gemm_efficiency.{}.tensor", c.as_str()),
                    &EFFICIENCY,
                )? - self.v[EG];
                self.fitted[i][0] = true;
            }
            if let Some(x) = pp.simt {
                self.v[eff(i, 1)] = logit_checked(
                    x,
                    origin,
                    &format!("time.gemm_efficiency.{}.simt", c.as_str()),
                    &EFFICIENCY,
                )? - self.v[EG + 1];
                self.fitted[i][1] = true;
            }
        }
        Ok(())
    }

    /// Power limits of `t`: the per-class factors, the process-node
    /// exponent, the clock held under load and its exponent.
    fn read_power(&mut self, t: &TimeCoefficients, origin: &str) -> Result<(), SpecError> {
        use ranges::*;
        for (c, x) in &t.power_class_factor {
            self.v[pwf(c.index())] = ln_checked(
                *x,
                1.0,
                origin,
                &format!("time.power_class_factor.{}", c.as_str()),
                &CLASS_FACTOR,
            )?;
        }
        let v = &mut self.v;
        v[NODE] = crate::physical::check(
            origin,
            "time.power_node_exponent",
            t.power_node_exponent,
            &NODE_EXPONENT,
        )?;
        v[CLK] = ln_checked(
            t.power_clock_ghz.tensor,
            CLOCK_BASE_HZ / 1e9,
            origin,
            "time.power_clock_ghz.tensor",
            &CLOCK_GHZ,
        )?;
        v[CLK + 1] = ln_checked(
            t.power_clock_ghz.simt,
            CLOCK_BASE_HZ / 1e9,
            origin,
            "time.power_clock_ghz.simt",
            &CLOCK_GHZ,
        )?;
        v[GAM] = ln_checked(
            t.power_clock_exponent,
            GAM_BASE,
            origin,
            "time.power_clock_exponent",
            &CLOCK_EXPONENT,
        )?;
        Ok(())
    }

    /// The widths and token counts at which GEMM efficiency reaches half
    /// its peak.
    fn read_saturation(&mut self, t: &TimeCoefficients, origin: &str) -> Result<(), SpecError> {
        use ranges::*;
        let v = &mut self.v;
        v[H0] = ln_checked(
            t.hidden_half.tensor,
            H0_BASE,
            origin,
            "time.hidden_half.tensor",
            &HIDDEN_HALF,
        )?;
        v[H0 + 1] = ln_checked(
            t.hidden_half.simt,
            H0_BASE,
            origin,
            "time.hidden_half.simt",
            &HIDDEN_HALF,
        )?;
        v[T0] = ln_checked(
            t.tokens_half.tensor,
            T0_BASE,
            origin,
            "time.tokens_half.tensor",
            &TOKENS_HALF,
        )?;
        v[T0 + 1] = ln_checked(
            t.tokens_half.simt,
            T0_BASE,
            origin,
            "time.tokens_half.simt",
            &TOKENS_HALF,
        )?;
        Ok(())
    }

    /// Memory traffic of `t`: bandwidth efficiency, passes over the mask
    /// per family, weight bytes per parameter, score traffic.
    fn read_traffic(&mut self, t: &TimeCoefficients, origin: &str) -> Result<(), SpecError> {
        use ranges::*;
        let v = &mut self.v;
        v[EBW] = logit_checked(t.bw_efficiency, origin, "time.bw_efficiency", &EFFICIENCY)?;
        for (i, fam) in FAMILIES.iter().enumerate() {
            let get = |m: &BTreeMap<String, f64>, field: &str| {
                m.get(*fam).copied().ok_or_else(|| {
                    SpecError::invalid(origin, format!("time.{field}.{fam}"), "missing family")
                })
            };
            v[CM + i] = ln_checked(
                get(&t.passes_mask, "passes_mask")?,
                CM_BASE,
                origin,
                &format!("time.passes_mask.{fam}"),
                &MASK_PASSES,
            )?;
        }
        let w = &t.weight_bytes_per_param;
        v[WB] = ln_checked(
            w.fwd_half,
            W_BASE[0],
            origin,
            "time.weight_bytes_per_param.fwd_half",
            &BYTES_PER_PARAM,
        )?;
        v[WB + 1] = ln_checked(
            w.bwd_half,
            W_BASE[1],
            origin,
            "time.weight_bytes_per_param.bwd_half",
            &BYTES_PER_PARAM,
        )?;
        v[WB + 2] = ln_checked(
            w.fwd_fp32,
            W_BASE[2],
            origin,
            "time.weight_bytes_per_param.fwd_fp32",
            &BYTES_PER_PARAM,
        )?;
        v[WB + 3] = ln_checked(
            w.bwd_fp32,
            W_BASE[3],
            origin,
            "time.weight_bytes_per_param.bwd_fp32",
            &BYTES_PER_PARAM,
        )?;
        v[SCR] = ln_checked(
            t.score_traffic_factor.tensor,
            1.0,
            origin,
            "time.score_traffic_factor.tensor",
            &TRAFFIC_FACTOR,
        )?;
        v[SCR + 1] = ln_checked(
            t.score_traffic_factor.simt,
            1.0,
            origin,
            "time.score_traffic_factor.simt",
            &TRAFFIC_FACTOR,
        )?;
        Ok(())
    }

    /// Backward-to-forward ratios (GEMM, element-wise) and the fixed
    /// forward and backward times of `t`.
    fn read_backward_and_fixed(
        &mut self,
        t: &TimeCoefficients,
        origin: &str,
    ) -> Result<(), SpecError> {
        use ranges::*;
        let v = &mut self.v;
        v[RMM] = ln_checked(
            t.bwd_gemm_ratio,
            RMM_BASE,
            origin,
            "time.bwd_gemm_ratio",
            &BWD_GEMM_RATIO,
        )?;
        v[REL] = ln_checked(
            t.bwd_elem_ratio,
            REL_BASE,
            origin,
            "time.bwd_elem_ratio",
            &BWD_ELEM_RATIO,
        )?;
        v[T0F] = ln_checked(
            t.fixed_fwd_ms,
            FIXED_BASE_MS,
            origin,
            "time.fixed_fwd_ms",
            &FIXED_MS,
        )?;
        v[T0B] = ln_checked(
            t.fixed_bwd_ms,
            FIXED_BASE_MS,
            origin,
            "time.fixed_bwd_ms",
            &FIXED_MS,
        )?;
        Ok(())
    }
}

/// `ln(x / base)` of coefficient `x` (field `field` of `origin`) once
/// checked against its physical `range`.
fn ln_checked(
    x: f64,
    base: f64,
    origin: &str,
    field: &str,
    range: &crate::physical::Range,
) -> Result<f64, SpecError> {
    Ok((crate::physical::check(origin, field, x, range)? / base).ln())
}

/// `logit(x)` of fraction `x` (field `field` of `origin`) once checked
/// against its physical `range`.
fn logit_checked(
    x: f64,
    origin: &str,
    field: &str,
    range: &crate::physical::Range,
) -> Result<f64, SpecError> {
    Ok(logit(crate::physical::check(origin, field, x, range)?))
}

impl MemTheta {
    /// Physical coefficients.
    pub fn to_coefficients(&self) -> MemoryCoefficients {
        MemoryCoefficients {
            fixed_gib: self.p(MA0),
            bytes_per_block_param: self.p(MAW),
            bytes_per_edge_param: self.p(MAE),
            passes_hidden: self.p(MBH),
            passes_ffn: self.p(MBF),
            passes_scores: self.p(MBS),
            logit_copies: self.p(MBV),
        }
    }

    /// Parameter vector of physical coefficients, each checked against its
    /// physical range ([`ranges`]); errors name the field.
    pub fn from_coefficients(m: &MemoryCoefficients, origin: &str) -> Result<MemTheta, SpecError> {
        use ranges::{FIXED_GIB, LOGIT_COPIES, MEM_BYTES_PER_PARAM, TENSORS_PER_TOKEN};
        let vals = [
            ("memory.fixed_gib", m.fixed_gib, &FIXED_GIB),
            (
                "memory.bytes_per_block_param",
                m.bytes_per_block_param,
                &MEM_BYTES_PER_PARAM,
            ),
            (
                "memory.bytes_per_edge_param",
                m.bytes_per_edge_param,
                &MEM_BYTES_PER_PARAM,
            ),
            ("memory.passes_hidden", m.passes_hidden, &TENSORS_PER_TOKEN),
            ("memory.passes_ffn", m.passes_ffn, &TENSORS_PER_TOKEN),
            ("memory.passes_scores", m.passes_scores, &TENSORS_PER_TOKEN),
            ("memory.logit_copies", m.logit_copies, &LOGIT_COPIES),
        ];
        let mut v = vec![0.0; N_MEM];
        for (i, (field, x, range)) in vals.iter().enumerate() {
            v[i] = (crate::physical::check(origin, field, *x, range)? / MEM_BASE[i]).ln();
        }
        Ok(MemTheta { v })
    }
}

/// The physical range of every calibration coefficient: a calibration file
/// (`--calibration`, `cephalo calibrate --out`) whose coefficient lies
/// outside is refused naming it, so a corrupted or hand-edited file cannot
/// predict 10^10 GiB of activations or a block in a nanosecond. The ranges
/// are wide (they catch corruption and unit slips, not unusual fits) and
/// hold the shipped calibration with room to spare.
pub mod ranges {
    use crate::physical::Range;

    const fn r(
        lo: f64,
        lo_inclusive: bool,
        hi: f64,
        unit: &'static str,
        why: &'static str,
    ) -> Range {
        Range {
            lo,
            lo_inclusive,
            hi,
            unit,
            why,
        }
    }

    /// Asymptotic fraction of peak a matmul (or a memory stream) reaches:
    /// tuned cuBLAS GEMMs reach 60-95% of peak, STREAM-like kernels 80-95%
    /// of HBM bandwidth; below 1% is no kernel's steady state.
    pub const EFFICIENCY: Range = r(
        0.01,
        true,
        0.9999,
        "of peak",
        "a kernel reaches between 1% and 100% of its peak",
    );
    /// Fraction of GA10x / Ada's doubled FP32 peak that dual issue sustains
    /// (the second FP32 path shares its issue slot with INT32: 50-100%).
    pub const DUAL_ISSUE: Range = r(
        0.05,
        true,
        1.0,
        "of the doubled peak",
        "dual issue sustains a fraction of the doubled FP32 rate",
    );
    /// Sustained clock under dense GEMMs at the reference power, GHz: GPUs
    /// clock between 0.3 and 2.6 GHz.
    pub const CLOCK_GHZ: Range = r(
        0.1,
        true,
        5.0,
        "GHz",
        "GPU clocks run between 0.1 and 5 GHz",
    );
    /// Exponent of the power-limited clock in the watts per unit (1/3 is the
    /// ideal DVFS cube law).
    pub const CLOCK_EXPONENT: Range = r(
        0.0,
        false,
        3.0,
        "",
        "the DVFS law's exponent is about 1/3, never above 3",
    );
    /// A GPU class's factor on the sustained clock.
    pub const CLASS_FACTOR: Range = r(
        0.1,
        true,
        10.0,
        "x",
        "a class changes the sustained clock by at most 10x",
    );
    /// Exponent of the process node in the power cap ((node / 8 nm)^-beta).
    pub const NODE_EXPONENT: Range = r(
        -4.0,
        true,
        4.0,
        "",
        "process nodes from 4 to 16 nm change energy per FLOP by at most 2^4",
    );
    /// Hidden size at which a matmul runs at half its asymptotic rate.
    pub const HIDDEN_HALF: Range = r(
        0.0,
        false,
        1e5,
        "",
        "a hidden size of 10^5 already fills every GPU",
    );
    /// Tokens per micro-batch at which a matmul runs at half its rate.
    pub const TOKENS_HALF: Range = r(
        0.0,
        false,
        1e6,
        "tokens",
        "10^6 tokens already fill every GPU",
    );
    /// Passes over a seq x seq score tensor per block (the eager softmax's
    /// mask, dropout and casts; the shipped GPT fit takes 1,828).
    pub const MASK_PASSES: Range = r(
        0.0,
        false,
        1e4,
        "passes",
        "a block reads its score tensor at most thousands of times",
    );
    /// Bytes read per block parameter in a pass (weights, their casts and
    /// gradients: a few to tens of bytes).
    pub const BYTES_PER_PARAM: Range = r(
        0.0,
        false,
        1e3,
        "bytes",
        "a pass reads each parameter's bytes a bounded number of times",
    );
    /// Factor on the score-shaped traffic of a pass.
    pub const TRAFFIC_FACTOR: Range = r(
        0.0,
        false,
        1e3,
        "x",
        "score traffic is at most 1,000x its tensor's size",
    );
    /// Backward matmul FLOPs over twice the forward's (1 for a dense block).
    pub const BWD_GEMM_RATIO: Range = r(
        0.1,
        true,
        10.0,
        "x",
        "a backward's matmuls are about twice the forward's",
    );
    /// Backward elementwise traffic over the forward's.
    pub const BWD_ELEM_RATIO: Range = r(
        0.1,
        true,
        100.0,
        "x",
        "a backward moves a small multiple of the forward's bytes",
    );
    /// A block pass's fixed time (launches, syncs), ms.
    pub const FIXED_MS: Range = r(
        0.0,
        false,
        1e3,
        "ms",
        "a block's fixed cost is microseconds to milliseconds",
    );

    /// Non-state memory that does not grow with the batch, GiB (CUDA
    /// context, workspaces): the largest GPU holds 288 GB.
    pub const FIXED_GIB: Range = r(0.0, false, 300.0, "GiB", "no GPU holds more than 288 GB");
    /// Bytes per parameter held as non-state memory (unsharded parameters,
    /// gradient buffers: fp32 copies of both are 8 bytes, a few buffers more).
    pub const MEM_BYTES_PER_PARAM: Range = r(
        0.0,
        false,
        64.0,
        "bytes",
        "unsharded parameters and gradients hold tens of bytes per parameter at most",
    );
    /// Hidden-, ffn- or score-sized tensors kept per token and block
    /// (Korthikanti et al.: 34 bytes per token and hidden unit for GPT,
    /// about 17 fp16 tensors; eager attention keeps a few score tensors).
    pub const TENSORS_PER_TOKEN: Range = r(
        0.0,
        false,
        1e3,
        "tensors",
        "a block keeps tens of tensors per token, not thousands",
    );
    /// A cross-validated error, % (absolute percentage error): 0 to 10^4
    /// (a prediction 100x off).
    pub const ERROR_PCT: Range = r(
        0.0,
        true,
        1e4,
        "%",
        "an error band is a percentage, at most 100x off",
    );
    /// Copies of the logits a step holds.
    pub const LOGIT_COPIES: Range = r(
        0.0,
        false,
        100.0,
        "copies",
        "a step holds a few copies of its logits",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_roundtrip() {
        let mut th = TimeTheta::default();
        for (i, x) in th.v.iter_mut().enumerate() {
            *x += 0.01 * i as f64 - 0.2;
        }
        th.fitted[1] = [true, true];
        th.fitted[4][1] = true;
        let c = th.to_coefficients();
        let back = TimeTheta::from_coefficients(&c, "t").unwrap();
        for i in 0..N_TIME {
            let used = !(i < 21 && {
                let c = if i < 14 { i / 2 } else { i - 14 };
                !th.fitted[c].iter().any(|f| *f) || (i < 14 && !th.fitted[i / 2][i % 2])
            });
            if used {
                assert!((back.v[i] - th.v[i]).abs() < 1e-9, "param {i}");
            }
        }
        let m = MemTheta {
            v: vec![0.1; N_MEM],
        };
        let mb = MemTheta::from_coefficients(&m.to_coefficients(), "t").unwrap();
        assert!(m.v.iter().zip(&mb.v).all(|(a, b)| (a - b).abs() < 1e-12));
    }
}
