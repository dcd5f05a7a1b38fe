//! The calibrated performance model: its parameters, how they price a
//! block's work, and the calibration file that stores them
//! (`profiles/calibration.json`, format `cephalo-calibration/2`).
//!
//! A block pass is priced kernel by kernel ([`super::price`]): every GEMM
//! of the block's work ([`super::work`]) at its shape, the attention core,
//! the element-wise and per-parameter traffic and the kernel launches.
//! The parameters fix the GPU's rates:
//!
//! ```text
//! C      = MAMF fraction * s_train * peak * min(1, (W/u / (W/u)_anchor)^gamma)   anchored generations (tensor cores)
//!        = smoothmin(eff[class,path] * peak, u * f_sus)                  the others
//! f_sus  = f0[path] * k[class] * (node_nm / 8)^-beta * (W / u / W_ref[path])^gamma
//!          (u = peak / boost clock, FLOP per cycle; W = board power)
//! eta    = M/(M + n0[path]) * N/(N + n0[path]) * K/(K + k0[path])
//! bw     = HBM bandwidth * bw_eff          (Hopper: the published 0.83)
//! PyTorch eager: element-wise bytes * elem[family], score chain * chain[family],
//!                per-parameter passes w_fwd / w_bwd bytes per parameter
//! fixed  = kernels * floor
//! ```
//!
//! `f_sus` is the clock a card can hold under dense GEMMs within its board
//! power: dynamic power grows with units x clock x voltage^2 and voltage
//! rises with clock, so the sustainable clock grows like a power `gamma < 1`
//! of the watts per unit (1/3 is the ideal DVFS cube law); a newer process
//! node spends less energy per FLOP. This is what lets a 70 W T4 or a 72 W
//! L4 be predicted from the other cards' data: their slowness is power, not
//! a property of their generation. A generation with a published maximum
//! achievable matmul rate ([`super::kernels::gemm_anchor`]: A100, H100)
//! takes it as its ceiling instead of a fitted one, derated by the same
//! power law for parts with less power per unit than the anchor's GPU,
//! times `s_train`, the fraction of that microbenchmark maximum (the best
//! shape of a sweep, on one otherwise idle GPU) that a training step's
//! GEMMs hold: one number for every anchored generation, fitted where the
//! data measured one (the A100s) and pinned to 1 where it did not.
//!
//! What the reference profiles measured is the `pytorch` stack run op by
//! op: its element-wise factor and per-parameter bytes describe that stack
//! (autocast's fp32 norms, the wrapper's casts and gradient accumulation)
//! for every model it runs; the score-chain factor and per-token overhead
//! of a family describe the reference builds' own blocks (the Cephalo
//! authors' DeepSpeed implementations, [`crate::model::ModelSpec::is_reference_build`])
//! and apply to them alone. A factor the data cannot identify is pinned,
//! and the calibration says so ([`TimeCoefficients::pinned`]): the score
//! chain of a family measured at one sequence length (its `s^2` cost
//! cannot be told from a per-token one) stays the per-op count, the
//! per-token overhead of a family measured at one width nothing, the
//! bandwidth reached the published one. Fused stacks (Megatron,
//! `torch.compile`) take the counts as they are.
//!
//! Internally the parameters are an unconstrained vector ([`TimeTheta`],
//! [`MemTheta`]): positive quantities are `base * exp(x)`, fractions are
//! logistic. The file stores the physical values. Non-state memory (GiB):
//!
//! ```text
//! act(m) = fixed + (act_bytes/4 * (w_block*P + w_edge*P_edge)
//!          + m*(act_bytes*(b_h*s*h + b_f*s*ffn + b_s*a*s^2) + b_v*4*logits)) / 2^30
//! ```

use super::arch::{ArchClass, MathPath};
use super::errors::{ErrorStats, GroupErrors};
use super::features::{GpuFacts, MemFeat, FAMILIES};
use super::kernels;
use super::price::Prices;
use super::work::BlockWork;
use crate::error::SpecError;
use crate::stack::Stack;
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
/// Index of the GEMM reduction half length of a path (a multiple of the
/// machine balance).
pub(crate) const K0: usize = 23;
/// Index of the bandwidth-efficiency logit.
pub(crate) const EBW: usize = 25;
/// Index of the PyTorch element-wise factor (one for every family).
pub(crate) const ELEM: usize = 26;
/// Index of the PyTorch per-parameter bytes (fwd half, bwd half, fwd fp32, bwd fp32).
pub(crate) const WB: usize = 27;
/// Index of the PyTorch score-chain factor of a family.
pub(crate) const CHAIN: usize = 31;
/// Index of the kernel floor.
pub(crate) const FLOOR: usize = 35;
/// Index of the global efficiency logit of a path.
pub(crate) const EG: usize = 36;
/// Index of the dual-issue FP32 factor.
pub(crate) const DUAL: usize = 38;
/// Index of the process-node exponent of the power cap.
pub(crate) const NODE: usize = 39;
/// Index of the power exponent `gamma` of the sustained clock.
pub(crate) const GAM: usize = 40;
/// Index of the PyTorch per-token overhead of a family.
pub(crate) const PTOK: usize = 41;
/// Index of the in-training fraction of the published matmul maxima (every
/// anchored generation).
pub(crate) const SUS: usize = 45;
/// Number of time parameters.
pub(crate) const N_TIME: usize = 46;
/// Process node (nm) at which `power_clock_ghz` applies as is.
const NODE_REF_NM: f64 = 8.0;
const DUAL_BASE: f64 = 0.6;

/// Base sustained clock (Hz) of the power cap, per path.
const CLOCK_BASE_HZ: f64 = 1.5e9;
/// Board watts per FLOP/cycle at which `power_clock_ghz` applies, per path
/// (tensor, CUDA cores): about a V100's.
const W_PER_CYCLE_FLOP_REF: [f64; 2] = [0.003, 0.02];
const GAM_BASE: f64 = 0.5;
/// The DVFS cube law's exponent of the sustained clock in the watts per
/// unit (power ~ f V^2 with V ~ f): an H100 PCIe (350 W, 0.58 of the SXM's
/// watts per FLOP/cycle) then holds 0.83 of the SXM's clock, 522 of its
/// 756 TFLOPS against 496 measured at 8192^3 (REAL-SYSTEMS-2 §5.1).
const DVFS_EXPONENT: f64 = 1.0 / 3.0;
/// Base of the GEMM reduction term (the prior of the fit): an epilogue
/// half exposed. A tile's main loop does `2 K` FLOPs per output against
/// one output write of `e` bytes, so a reduction of `K0 = kappa * e * C /
/// bw` (the GPU's machine balance) spends as long writing its tile as
/// computing it.
pub(crate) const K0_BASE: f64 = 0.5;
const W_BASE: [f64; 4] = [2.0, 12.0, 4.0, 12.0];
/// Base per-token overhead, elements per token: the fit's starting point
/// and weak prior (a few hidden widths' worth, large enough for the fit to
/// feel it); a family that cannot identify it is pinned to nothing.
pub(crate) const PTOK_BASE: f64 = 1e4;
/// Base kernel floor, ms: a few microseconds per launch (REAL-SYSTEMS-2
/// §5.4 estimates 4-8 us on H100 with eager PyTorch).
const FLOOR_BASE_MS: f64 = 0.005;

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
        v[EBW] = logit(kernels::HBM_EFFICIENCY);
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

    /// Asymptotic fraction of peak of (class, path) where no published
    /// anchor sets it: the global value of the path shifted by the class's
    /// own deviation when the class was fitted, times the dual-issue factor
    /// for CUDA-core math on GA10x / Ada.
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

    /// Fraction of HBM bandwidth memory-bound kernels reach on `class`
    /// (the calibration's, pinned to the published
    /// [`kernels::HBM_EFFICIENCY`] when it was fitted to block profiles).
    pub fn bw_efficiency(&self, class: ArchClass) -> f64 {
        let _ = class;
        logistic(self.v[EBW])
    }

    /// The fraction of a published maximum achievable matmul rate that a
    /// training step's GEMMs hold on an anchored generation.
    pub fn sustained_fraction(&self) -> f64 {
        self.v[SUS].exp().min(1.0)
    }

    /// The exponent `gamma` of the sustained clock in the watts per unit.
    fn gamma(&self) -> f64 {
        GAM_BASE * self.v[GAM].exp()
    }

    /// The reduction half length of path `p` on a GPU whose large-GEMM
    /// rate over its achieved bandwidth is `balance` FLOP/B, for `e`-byte
    /// outputs.
    fn k_half(&self, p: usize, balance: f64, e: f64) -> f64 {
        K0_BASE * self.v[K0 + p].exp() * e * balance
    }

    /// The large-GEMM rate (FLOP/s) of a GPU (module docs' `C`).
    pub fn ceiling(&self, g: &GpuFacts) -> f64 {
        if let (MathPath::Tensor, Some(a)) = (g.path, kernels::gemm_anchor(g.class)) {
            // The anchor's rate at its shape, divided by what the shape
            // terms take there, is its generation's large-GEMM fraction
            // (bf16 outputs; the balance of the anchor's GPU at its
            // measured rate).
            let balance = a.tflops * 1e12 / (a.mem_bw_gbps * 1e9 * self.bw_efficiency(g.class));
            let (m, n, k) = a.best_shape;
            let eta =
                super::price::gemm_efficiency(m, n, k, 1.0, a.sms, self.k_half(0, balance, 2.0));
            // A training step's GEMMs hold a fraction of the microbenchmark
            // maximum (the best of a shape sweep on one otherwise idle GPU):
            // the data's anchored generations identify it, else it is 1.
            let fraction = (a.fraction() / eta * self.sustained_fraction()).min(1.0);
            // A part with less board power per unit of math than the
            // anchor's holds a lower clock: the DVFS cube law (power ~
            // clock x voltage^2, voltage ~ clock) in the voltage-scaling
            // range these data-center parts run in; the fitted exponent
            // describes the 70 W cards at their voltage floor.
            let anchor_wu = a.board_power_w / (a.peak_tflops * 1e12 / (a.boost_clock_mhz * 1e6));
            let derate = (g.power_w / g.cycle_flops / anchor_wu)
                .powf(DVFS_EXPONENT)
                .min(1.0);
            return fraction * g.peak_flops * derate;
        }
        let p = g.path.index();
        let top = self.efficiency(g.class, g.path) * g.peak_flops;
        let pc = self.power_class(g.class).index();
        let clock_hz = CLOCK_BASE_HZ
            * self.v[CLK + p].exp()
            * self.v[pwf(pc)].exp()
            * (g.node_nm / NODE_REF_NM).powf(-self.v[NODE])
            * (g.power_w / g.cycle_flops / W_PER_CYCLE_FLOP_REF[p]).powf(self.gamma());
        smooth_min(top, g.cycle_flops * clock_hz)
    }

    /// The rates this calibration gives `work` on `g` ([`Prices`]): the
    /// PyTorch eager factors and per-parameter bytes apply to PyTorch
    /// stacks that do not compile.
    pub fn prices(&self, g: &GpuFacts, work: &BlockWork) -> Prices {
        let v = &self.v;
        let p = g.path.index();
        let eager_pytorch = work.imp.stack == Stack::PyTorch && !work.imp.fused();
        // The stack's element-wise factor applies to every model it runs;
        // the family's score-chain and per-token factors describe the
        // reference builds' own implementation.
        let elem_factor = if eager_pytorch { v[ELEM].exp() } else { 1.0 };
        let (chain_factor, token_elems) = if eager_pytorch && work.reference_build {
            (
                v[CHAIN + work.family].exp(),
                PTOK_BASE * v[PTOK + work.family].exp(),
            )
        } else {
            (1.0, 0.0)
        };
        let w = if work.half { 0 } else { 2 };
        let gemm_flops = self.ceiling(g);
        let bw_bps = g.bw_bps * self.bw_efficiency(g.class);
        Prices {
            class: g.class,
            gemm_flops,
            sms: g.sms,
            k_half: self.k_half(p, gemm_flops / bw_bps, work.e),
            bw_bps,
            elem_factor,
            chain_factor,
            token_bytes: token_elems * work.e,
            weight_fwd_bytes: W_BASE[w] * v[WB + w].exp(),
            weight_bwd_bytes: W_BASE[w + 1] * v[WB + w + 1].exp(),
            kernel_floor_ms: FLOOR_BASE_MS * v[FLOOR].exp(),
        }
    }

    /// Forward and backward ms of a block (before the roofline clamp).
    pub fn time_ms(&self, g: &GpuFacts, work: &BlockWork) -> (f64, f64) {
        let t = self.prices(g, work).block(work);
        (t.fwd.total_ms(), t.bwd.total_ms())
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

/// Physical time coefficients (see the module doc for the formulas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeCoefficients {
    /// Asymptotic fraction of dense peak reached by large matmuls, per arch
    /// class and math path (only pairs with measurements; a generation
    /// with a published anchor uses it on tensor cores instead, see
    /// `pinned`).
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
    pub power_node_exponent: f64,
    /// The reduction length at which a GEMM runs at half its rate, per
    /// path, as a multiple of the GPU's machine balance times the output
    /// bytes (`K0 = this * e * C / bw`; dimensionless: 1 = the epilogue's
    /// write fully exposed).
    pub gemm_reduction_half: PerPath,
    /// Fraction of HBM bandwidth reached by memory-bound kernels.
    pub bw_efficiency: f64,
    /// PyTorch eager: factor on the per-op count of element-wise bytes
    /// (dimensionless; 1 = the count): what autocast's fp32 norms and
    /// casts add, the same for every family.
    pub elementwise_factor: f64,
    /// PyTorch eager, reference builds: factor on the per-op count of the
    /// eager score chain's bytes, per family (dimensionless; 1 = the count).
    pub score_chain_factor: BTreeMap<String, f64>,
    /// PyTorch eager, reference builds: a cost per token of a family's
    /// implementation that none of its ops accounts for, elements (of the
    /// compute dtype) moved per token each pass, on every rank of a TP
    /// group (split with SP).
    pub token_overhead_elements: BTreeMap<String, f64>,
    /// PyTorch: per-parameter passes outside the GEMMs, bytes per parameter.
    pub weight_bytes_per_param: WeightBytes,
    /// Time of one kernel launch's floor on the GPU, microseconds.
    pub kernel_floor_us: f64,
    /// Fraction of a generation's published maximum achievable matmul rate
    /// ([`kernels::gemm_anchor`]) that the GEMMs of a training step hold
    /// (dimensionless; 1 = the microbenchmark's best shape, which ran on one
    /// otherwise idle GPU): fitted on the anchored generations' measured
    /// blocks when there are some, else pinned to 1.
    pub anchor_sustained_fraction: f64,
    /// Coefficients fixed by physics or a published measurement rather
    /// than fitted, each with its value and why.
    #[serde(default)]
    pub pinned: Vec<PinnedCoefficient>,
}

/// A coefficient the calibration did not fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedCoefficient {
    /// Its field, as the file names it (`time.score_chain_factor.gpt`).
    pub coefficient: String,
    /// The value it is pinned to.
    pub value: f64,
    /// Why it is not fitted, and where the value comes from.
    pub why: String,
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
pub const CALIBRATION_FORMAT: &str = "cephalo-calibration/2";

fn fam_map(v: &[f64], base: f64) -> BTreeMap<String, f64> {
    FAMILIES
        .iter()
        .enumerate()
        .map(|(i, f)| (f.to_string(), base * v[i].exp()))
        .collect()
}

impl TimeTheta {
    /// Physical coefficients of this parameter vector, with the pinned
    /// ones listed (`pinned`).
    pub fn to_coefficients(&self, pinned: Vec<PinnedCoefficient>) -> TimeCoefficients {
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
        let pp = |i: usize, base: f64| PerPath {
            tensor: base * v[i].exp(),
            simt: base * v[i + 1].exp(),
        };
        TimeCoefficients {
            gemm_efficiency,
            gemm_efficiency_default: PerPath {
                tensor: logistic(v[EG]),
                simt: logistic(v[EG + 1]),
            },
            dual_issue_simt_factor: DUAL_BASE * v[DUAL].exp(),
            power_clock_ghz: pp(CLK, CLOCK_BASE_HZ / 1e9),
            power_clock_exponent: self.gamma(),
            power_class_factor,
            power_node_exponent: v[NODE],
            gemm_reduction_half: pp(K0, K0_BASE),
            bw_efficiency: logistic(v[EBW]),
            elementwise_factor: v[ELEM].exp(),
            score_chain_factor: fam_map(&v[CHAIN..CHAIN + 4], 1.0),
            token_overhead_elements: fam_map(&v[PTOK..PTOK + 4], PTOK_BASE),
            weight_bytes_per_param: WeightBytes {
                fwd_half: W_BASE[0] * v[WB].exp(),
                bwd_half: W_BASE[1] * v[WB + 1].exp(),
                fwd_fp32: W_BASE[2] * v[WB + 2].exp(),
                bwd_fp32: W_BASE[3] * v[WB + 3].exp(),
            },
            kernel_floor_us: FLOOR_BASE_MS * 1e3 * v[FLOOR].exp(),
            anchor_sustained_fraction: self.sustained_fraction(),
            pinned,
        }
    }

    /// Parameter vector of physical coefficients; every coefficient is
    /// checked against its physical range ([`ranges`]) and an error names
    /// the field, the range and why.
    pub fn from_coefficients(t: &TimeCoefficients, origin: &str) -> Result<TimeTheta, SpecError> {
        let mut th = TimeTheta::default();
        th.read_gemm_efficiency(t, origin)?;
        th.read_power(t, origin)?;
        th.read_shapes_and_traffic(t, origin)?;
        if !th.fitted.iter().any(|c| c.iter().any(|f| *f)) {
            return Err(SpecError::invalid(
                origin,
                "time.gemm_efficiency",
                "expected at least one fitted class",
            ));
        }
        for (i, p) in t.pinned.iter().enumerate() {
            crate::physical::check(
                origin,
                &format!("time.pinned[{i}].value"),
                p.value,
                &ranges::PINNED,
            )?;
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
            for (p, x) in [(0, pp.tensor), (1, pp.simt)] {
                let Some(x) = x else { continue };
                let name = ["tensor", "simt"][p];
                self.v[eff(i, p)] = logit_checked(
                    x,
                    origin,
                    &format!("time.gemm_efficiency.{}.{name}", c.as_str()),
                    &EFFICIENCY,
                )? - self.v[EG + p];
                self.fitted[i][p] = true;
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
        for (p, x) in [(0, t.power_clock_ghz.tensor), (1, t.power_clock_ghz.simt)] {
            v[CLK + p] = ln_checked(
                x,
                CLOCK_BASE_HZ / 1e9,
                origin,
                &format!("time.power_clock_ghz.{}", ["tensor", "simt"][p]),
                &CLOCK_GHZ,
            )?;
        }
        v[GAM] = ln_checked(
            t.power_clock_exponent,
            GAM_BASE,
            origin,
            "time.power_clock_exponent",
            &CLOCK_EXPONENT,
        )?;
        Ok(())
    }

    /// GEMM shape lengths, bandwidth, the PyTorch factors and per-parameter
    /// bytes, and the kernel floor of `t`.
    fn read_shapes_and_traffic(
        &mut self,
        t: &TimeCoefficients,
        origin: &str,
    ) -> Result<(), SpecError> {
        use ranges::*;
        let v = &mut self.v;
        for (p, name) in ["tensor", "simt"].iter().enumerate() {
            let k = if p == 0 {
                t.gemm_reduction_half.tensor
            } else {
                t.gemm_reduction_half.simt
            };
            let field = format!("time.gemm_reduction_half.{name}");
            v[K0 + p] = ln_checked(k, K0_BASE, origin, &field, &EPILOGUE)?;
        }
        v[EBW] = logit_checked(t.bw_efficiency, origin, "time.bw_efficiency", &EFFICIENCY)?;
        v[ELEM] = ln_checked(
            t.elementwise_factor,
            1.0,
            origin,
            "time.elementwise_factor",
            &TRAFFIC_FACTOR,
        )?;
        for (i, fam) in FAMILIES.iter().enumerate() {
            for (base, unit, map, field, range) in [
                (
                    CHAIN,
                    1.0,
                    &t.score_chain_factor,
                    "score_chain_factor",
                    &TRAFFIC_FACTOR,
                ),
                (
                    PTOK,
                    PTOK_BASE,
                    &t.token_overhead_elements,
                    "token_overhead_elements",
                    &TOKEN_ELEMENTS,
                ),
            ] {
                let x = map.get(*fam).copied().ok_or_else(|| {
                    SpecError::invalid(origin, format!("time.{field}.{fam}"), "missing family")
                })?;
                v[base + i] = ln_checked(x, unit, origin, &format!("time.{field}.{fam}"), range)?;
            }
        }
        let w = &t.weight_bytes_per_param;
        for (i, (x, name)) in [
            (w.fwd_half, "fwd_half"),
            (w.bwd_half, "bwd_half"),
            (w.fwd_fp32, "fwd_fp32"),
            (w.bwd_fp32, "bwd_fp32"),
        ]
        .into_iter()
        .enumerate()
        {
            v[WB + i] = ln_checked(
                x,
                W_BASE[i],
                origin,
                &format!("time.weight_bytes_per_param.{name}"),
                &BYTES_PER_PARAM,
            )?;
        }
        v[FLOOR] = ln_checked(
            t.kernel_floor_us,
            FLOOR_BASE_MS * 1e3,
            origin,
            "time.kernel_floor_us",
            &FLOOR_US,
        )?;
        v[SUS] = crate::physical::check(
            origin,
            "time.anchor_sustained_fraction",
            t.anchor_sustained_fraction,
            &SUSTAINED,
        )?
        .ln();
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
    /// Bytes read per block parameter in a pass (weights, their casts and
    /// gradients: a few to tens of bytes).
    pub const BYTES_PER_PARAM: Range = r(
        0.0,
        false,
        1e3,
        "bytes",
        "a pass reads each parameter's bytes a bounded number of times",
    );
    /// Factor on an implementation's per-op count of memory traffic.
    pub const TRAFFIC_FACTOR: Range = r(
        0.0,
        false,
        1e3,
        "x",
        "an implementation moves at most 1,000x its per-op count",
    );
    /// Elements moved per token by an implementation's unaccounted cost:
    /// at most a few vocabularies' worth.
    pub const TOKEN_ELEMENTS: Range = r(
        0.0,
        false,
        1e8,
        "elements",
        "a block moves at most 10^8 elements per token outside its ops",
    );
    /// The exposed share of a GEMM tile's epilogue, as a multiple of the
    /// machine balance: between nothing and ten full writes.
    pub const EPILOGUE: Range = r(
        0.0,
        false,
        10.0,
        "",
        "a tile's epilogue is exposed at most a few times over",
    );
    /// The time floor of one kernel launch, microseconds: a launch takes
    /// 1-10 us of GPU time at the least.
    pub const FLOOR_US: Range = r(
        0.0,
        false,
        1e3,
        "us",
        "a kernel's floor is microseconds, not milliseconds",
    );
    /// The in-training fraction of a published matmul maximum: more than
    /// the microbenchmark's best shape is not sustained, and a training
    /// step's GEMMs that held under half of it would be a different kernel.
    pub const SUSTAINED: Range = r(
        0.5,
        false,
        1.0,
        "of the published maximum",
        "a training step's GEMMs hold between half and all of the published maximum achievable matmul rate",
    );
    /// A pinned coefficient's value (a fraction, a factor, a length).
    pub const PINNED: Range = r(
        0.0,
        true,
        1e6,
        "",
        "a pinned coefficient is a finite, non-negative physical value",
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
        // The sustained fraction is at most 1 (its log at most 0).
        th.v[SUS] = -0.1;
        th.fitted[1] = [true, true];
        th.fitted[4][1] = true;
        let c = th.to_coefficients(Vec::new());
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
