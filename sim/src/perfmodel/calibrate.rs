//! Calibration: choosing the measurements, fitting the coefficients, and
//! cross-validating them.
//!
//! Input: a [`ProfileSet`] imported from the reference JSON (or any measured
//! profiles). Timing entries are (gpu, model, seq, dtype) with raw per-batch
//! lists; memory entries are (cluster, model, dtype) lists of non-state GiB.
//! The fit minimises squared log errors (relative errors) of forward and
//! backward ms, each point weighted `1/sqrt(points of its entry)` so long
//! lists do not drown short ones, plus a weak prior pulling every
//! parameter towards its physical base value. Memory is fitted the same way.
//!
//! Cross-validation refits from scratch without one GPU type (leave-one-GPU-
//! out) or one model (leave-one-model-out) and predicts the held-out points;
//! errors are absolute percentage errors of forward+backward ms per point.
//! Everything is deterministic (folds in sorted order, no randomness).

use super::arch::{ArchClass, MathPath};
use super::coeffs::{
    eff, pwf, Calibration, MemTheta, PinnedCoefficient, Provenance, TimeTheta, CALIBRATION_FORMAT,
    CHAIN, EBW, K0, K0_BASE, N_MEM, N_TIME, PTOK, PTOK_BASE, SUS,
};
pub use super::errors::{ErrorStats, GroupErrors};
use super::features::{MemFeat, TimeFeat, FAMILIES};
use super::lm::{minimize, LmOptions};
use super::price::roofline_ms;
use crate::gpu::{GpuCatalog, GpuSpec};
use crate::model::{ModelCatalog, ModelSpec};
use crate::precision::NumFormat;
use crate::profile::{
    first_drop, superlinear_growth, BlockProfile, LinearFit, MemoryProfile, ProfileSet,
};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// A raw value this far below its predecessor marks a list non-monotonic.
pub const EXCLUDE_DROP_REL: f64 = 0.10;
/// Per-sample time at the largest batch this much above the per-sample time
/// at half of it marks superlinear growth (thermal throttling).
pub const EXCLUDE_SUPERLINEAR_REL: f64 = 0.20;
/// The batch-2 value this far (relative) from the mean of its neighbours
/// marks a hand-edited batch-2 value.
pub const EXCLUDE_BS2_REL: f64 = 0.20;

/// Memory cluster of the reference data left out of the memory fit.
pub const EXCLUDED_MEMORY_CLUSTER: &str = "trpro";

/// One measured timing entry with its points.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeEntry {
    /// Canonical GPU name.
    pub gpu: String,
    /// Canonical model name.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// Entry label (`model_key/gpu_key/seq/dtype`).
    pub entry: String,
    /// Micro-batch sizes.
    pub batches: Vec<u32>,
    /// Measured forward ms.
    pub fwd_ms: Vec<f64>,
    /// Measured backward ms.
    pub bwd_ms: Vec<f64>,
    feats: Vec<TimeFeat>,
    bounds: Vec<(f64, f64)>,
}

/// One measured memory entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MemEntry {
    /// Memory cluster label.
    pub cluster: String,
    /// Canonical model name.
    pub model: String,
    /// Precision.
    pub dtype: NumFormat,
    /// Entry label.
    pub entry: String,
    /// Non-state GiB at micro-batch 1..=n.
    pub act_gib: Vec<f64>,
    feats: Vec<MemFeat>,
}

/// An entry left out of the fit, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excluded {
    /// Entry label.
    pub entry: String,
    /// Reason.
    pub reason: String,
}

/// The measurements a calibration uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dataset {
    /// Timing entries kept.
    pub time: Vec<TimeEntry>,
    /// Memory entries kept.
    pub memory: Vec<MemEntry>,
    /// Entries left out.
    pub excluded: Vec<Excluded>,
    /// Fit-only entries (linear fits without measured points): never fitted,
    /// compared as a hold-out at [`HOLDOUT_BATCHES`], their "measured" values
    /// being their own lines there.
    pub holdout: Vec<TimeEntry>,
}

/// Micro-batch sizes at which fit-only entries are compared (inside the
/// range the reference fits were made on for every GPU that has them).
pub const HOLDOUT_BATCHES: [u32; 3] = [1, 2, 4];

/// Why a raw list should not be trusted, if it should not.
pub fn raw_list_problem(name: &str, raw: &[f64]) -> Option<String> {
    if let Some(i) = first_drop(raw, EXCLUDE_DROP_REL) {
        return Some(format!(
            "{name} non-monotonic: batch {} is {:.0}% below batch {} ({:.2} -> {:.2} ms)",
            i + 2,
            (1.0 - raw[i + 1] / raw[i]) * 100.0,
            i + 1,
            raw[i],
            raw[i + 1]
        ));
    }
    if let Some((half, a, b)) = superlinear_growth(raw, EXCLUDE_SUPERLINEAR_REL) {
        return Some(format!(
            "{name} superlinear (thermal throttling?): {a:.2} ms/sample at batch {half}, {b:.2} at {}",
            raw.len()
        ));
    }
    if raw.len() >= 3 {
        let mid = 0.5 * (raw[0] + raw[2]);
        if (raw[1] - mid).abs() > EXCLUDE_BS2_REL * raw[1] {
            return Some(format!(
                "{name} batch-2 value {:.2} ms is off the line through batches 1 and 3 ({mid:.2} ms; hand-edited?)",
                raw[1]
            ));
        }
    }
    None
}

impl TimeEntry {
    /// The entry of profile `b` (its seq len and dtype) on catalog `gpu` x
    /// `model`, with per-batch features and roofline bounds; `None` when the
    /// GPU cannot run the dtype.
    fn new(
        b: &BlockProfile,
        gpu: &GpuSpec,
        model: &ModelSpec,
        entry: String,
        batches: Vec<u32>,
        fwd_ms: Vec<f64>,
        bwd_ms: Vec<f64>,
    ) -> Option<TimeEntry> {
        let (seq_len, dtype) = (b.seq_len, b.dtype);
        let mut feats = Vec::new();
        let mut bounds = Vec::new();
        for &m in &batches {
            let f = TimeFeat::reference(gpu, model, seq_len, dtype, m)?;
            bounds.push(roofline_ms(&f.work, f.gpu.peak_flops, f.gpu.bw_bps));
            feats.push(f);
        }
        Some(TimeEntry {
            gpu: gpu.name.clone(),
            model: model.name.clone(),
            seq_len,
            dtype,
            entry,
            batches,
            fwd_ms,
            bwd_ms,
            feats,
            bounds,
        })
    }
}

/// A fit-only entry as hold-out points: its fit lines at [`HOLDOUT_BATCHES`];
/// `None` when its GPU, model or dtype is outside the catalogs or a line is
/// not positive there. (Legacy HuggingFace keys never get here: `dataset`
/// excludes them first.)
fn holdout_entry(
    b: &BlockProfile,
    label: &str,
    gpus: &GpuCatalog,
    models: &ModelCatalog,
) -> Option<TimeEntry> {
    let at = |fit: &LinearFit| -> Vec<f64> {
        HOLDOUT_BATCHES.iter().map(|&m| fit.at(m as f64)).collect()
    };
    let (fwd_ms, bwd_ms) = (at(&b.curve.fwd_fit), at(&b.curve.bwd_fit));
    if !fwd_ms
        .iter()
        .chain(&bwd_ms)
        .all(|x| x.is_finite() && *x > 0.0)
    {
        return None;
    }
    TimeEntry::new(
        b,
        gpus.get(&b.gpu)?,
        models.get(&b.model)?,
        label.to_string(),
        HOLDOUT_BATCHES.to_vec(),
        fwd_ms,
        bwd_ms,
    )
}

/// Selects the usable measurements of a profile set.
///
/// Timing: entries with raw per-batch lists from the current trainer
/// (`deepspeed*` keys, or measured by this project); legacy HuggingFace keys,
/// fit-only entries, entries whose fit disagrees with the least-squares line
/// of their raw list (the importer's flag: hand-edited values), and entries
/// with non-monotonic, superlinear or hand-edited raw lists are excluded
/// (listed with the reason); the fit-only ones are kept aside as hold-out
/// points ([`Dataset::holdout`]). Memory: every
/// `deepspeed*` (or measured) memory list of a catalog model.
pub fn dataset(profiles: &ProfileSet, gpus: &GpuCatalog, models: &ModelCatalog) -> Dataset {
    let mut ds = Dataset::default();
    for b in &profiles.blocks {
        ds.add_block(b, gpus, models);
    }
    for m in &profiles.memory {
        ds.add_memory(m, models);
    }
    ds
}

/// The label an entry of block profile `b` is listed under: its imported
/// entry, else its model, GPU, sequence length, dtype and source.
fn block_label(b: &BlockProfile) -> String {
    match &b.curve.source {
        crate::profile::Source::Imported { entry, .. } => entry.clone(),
        s => format!(
            "{}/{}/{}/{} ({})",
            b.model,
            b.gpu,
            b.seq_len,
            b.dtype,
            s.label()
        ),
    }
}

impl Dataset {
    /// Adds block profile `b`: a timing entry, or an exclusion with its
    /// reason (and, for a fit-only entry, its hold-out points).
    fn add_block(&mut self, b: &BlockProfile, gpus: &GpuCatalog, models: &ModelCatalog) {
        let label = block_label(b);
        let imported = matches!(b.curve.source, crate::profile::Source::Imported { .. });
        if imported && !b.model_key.starts_with("deepspeed") {
            self.excluded.push(Excluded {
                entry: label,
                reason: "legacy HuggingFace-model key (a different block implementation); not a current-trainer measurement"
                    .into(),
            });
            return;
        }
        if let Some(flag) = b
            .flags
            .iter()
            .find(|f| f.contains("fit disagrees with the least-squares line"))
        {
            self.excluded.push(Excluded {
                entry: label,
                reason: flag.clone(),
            });
            return;
        }
        let c = &b.curve;
        if c.batch_sizes.is_empty() {
            let held = holdout_entry(b, &label, gpus, models);
            self.excluded.push(Excluded {
                entry: label,
                reason: if held.is_some() {
                    "linear fits only, no measured points (not fitted; checked as a hold-out)"
                        .into()
                } else {
                    "linear fits only, no measured points".into()
                },
            });
            self.holdout.extend(held);
            return;
        }
        if let Some(why) = raw_list_problem("forward", &c.fwd_ms)
            .or_else(|| raw_list_problem("backward", &c.bwd_ms))
        {
            self.excluded.push(Excluded {
                entry: label,
                reason: why,
            });
            return;
        }
        let (Some(gpu), Some(model)) = (gpus.get(&b.gpu), models.get(&b.model)) else {
            self.excluded.push(Excluded {
                entry: label,
                reason: "GPU or model not in the catalogs".into(),
            });
            return;
        };
        let Some(entry) = TimeEntry::new(
            b,
            gpu,
            model,
            label.clone(),
            c.batch_sizes.clone(),
            c.fwd_ms.clone(),
            c.bwd_ms.clone(),
        ) else {
            self.excluded.push(Excluded {
                entry: label,
                reason: format!("{} cannot run {} in the catalog", gpu.name, b.dtype),
            });
            return;
        };
        self.time.push(entry);
    }

    /// Adds memory profile `m` of a catalog model: a memory entry, or an
    /// exclusion with its reason.
    fn add_memory(&mut self, m: &MemoryProfile, models: &ModelCatalog) {
        let label = match &m.source {
            crate::profile::Source::Imported { entry, .. } => entry.clone(),
            s => format!("{}/{}/{} ({})", m.cluster, m.model, m.dtype, s.label()),
        };
        let imported = matches!(m.source, crate::profile::Source::Imported { .. });
        if imported && !m.model_key.starts_with("deepspeed") {
            self.excluded.push(Excluded {
                entry: label,
                reason: "legacy HuggingFace-model memory entry; not used".into(),
            });
            return;
        }
        let Some(model) = models.get(&m.model) else {
            return;
        };
        if imported && m.cluster == EXCLUDED_MEMORY_CLUSTER {
            self.excluded.push(Excluded {
                entry: label,
                reason: "memory cluster `trpro`: undocumented set-up whose lists barely grow with the batch \
                         (vit_1b 0.25 -> 0.26 GiB over batches 1-4); not comparable with the other clusters"
                    .into(),
            });
            return;
        }
        if m.act_gib.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            self.excluded.push(Excluded {
                entry: label,
                reason: "non-positive memory value".into(),
            });
            return;
        }
        let s = model.tokens_per_sample(model.seq_len);
        let feats = (1..=m.act_gib.len() as u32)
            .map(|i| MemFeat::new(model, s, m.dtype, i))
            .collect();
        self.memory.push(MemEntry {
            cluster: m.cluster.clone(),
            model: model.name.clone(),
            dtype: m.dtype,
            entry: label,
            act_gib: m.act_gib.clone(),
            feats,
        });
    }
}

/// Forward and backward ms of a point: model time, clamped by the roofline.
pub(crate) fn clamp_to_bound(t: (f64, f64), bound: (f64, f64)) -> (f64, f64) {
    (t.0.max(bound.0), t.1.max(bound.1))
}

/// Prior strength on every time parameter (towards its base value).
const PRIOR_TIME: f64 = 0.05;
/// Prior strength on the per-class power factors (log units): a class's
/// sustained clock should follow from board power, FLOP per cycle and
/// process node like every other class's, so its own factor is shrunk hard
/// towards 1 (0.5 let P40 / T4 absorb their slowness into factors that do
/// not transfer: leave-one-GPU-out p90 24.3% against 21.5% at 2).
const PRIOR_POWER_CLASS: f64 = 2.0;
const PRIOR_MEM: f64 = 0.02;
/// Prior strength on a class's deviation from the global matmul efficiency
/// (logit units). With the power cap in the model, the reference data no
/// longer asks for per-class efficiencies (the fit leaves them within 0.001
/// of the global value); a weak prior (0.05) let T4, L4 and P40 explain
/// their power-bound slowness as "low efficiency", which no other GPU of a
/// class can inherit (leave-one-GPU-out p90 26% vs 21.5%).
const PRIOR_CLASS_EFFICIENCY: f64 = 1.0;

/// Which time parameters the entries can identify, and the pinned ones
/// with their values and reasons.
#[derive(Debug, Clone, PartialEq)]
pub struct Identified {
    /// `free[i]`: parameter `i` is fitted.
    pub free: Vec<bool>,
    /// The internal values of pinned parameters that differ from their
    /// base: (index, value).
    pub values: Vec<(usize, f64)>,
    /// Every coefficient not fitted, with its value and why.
    pub pinned: Vec<PinnedCoefficient>,
}

/// The distinct values of `key` over the entries of family `fam`.
fn distinct_in_family(
    entries: &[&TimeEntry],
    fam: usize,
    key: impl Fn(&TimeEntry) -> u64,
) -> usize {
    let mut v: Vec<u64> = entries
        .iter()
        .filter(|e| e.feats.first().is_some_and(|f| f.work.family == fam))
        .map(|e| key(e))
        .collect();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// What the entries can identify (module docs of [`super::coeffs`]):
/// tensor-core GEMM ceilings of generations with a published maximum
/// achievable matmul rate are pinned to it; a family's score-chain factor
/// needs two sequence lengths (with one, its `s^2` cost cannot be told
/// from a per-token cost) and its element-wise factor two widths (with
/// one, a per-token cost cannot be told from the GEMMs' rate); the rest is
/// fitted.
pub fn identify(entries: &[&TimeEntry]) -> Identified {
    let mut free = vec![true; N_TIME];
    let mut values = Vec::new();
    let mut pinned = Vec::new();
    for class in ArchClass::ALL {
        if let Some(a) = super::kernels::gemm_anchor(class) {
            free[eff(class.index(), MathPath::Tensor.index())] = false;
            pinned.push(PinnedCoefficient {
                coefficient: format!("time.gemm_efficiency.{}.tensor", class.as_str()),
                value: a.fraction(),
                why: format!(
                    "published: {} TFLOPS of {} on {} ({})",
                    a.tflops, a.peak_tflops, a.gpu, a.source
                ),
            });
        }
    }
    // The in-training fraction of the anchors: identified by measured
    // tensor-core blocks of an anchored generation, else the anchor as is.
    let anchored_data = entries.iter().any(|e| {
        e.feats.iter().any(|f| {
            f.gpu.path == MathPath::Tensor && super::kernels::gemm_anchor(f.gpu.class).is_some()
        })
    });
    if !anchored_data {
        free[SUS] = false;
        pinned.push(PinnedCoefficient {
            coefficient: "time.anchor_sustained_fraction".into(),
            value: 1.0,
            why: "cannot be identified: no tensor-core block of a generation with a published maximum achievable matmul rate was measured; pinned to the published rate as is".into(),
        });
    }
    // The bandwidth reached: every memory-bound term divides by it, and the
    // PyTorch stack's element-wise factor multiplies the same bytes.
    free[EBW] = false;
    pinned.push(PinnedCoefficient {
        coefficient: "time.bw_efficiency".into(),
        value: super::kernels::HBM_EFFICIENCY,
        why: "cannot be identified by whole blocks (the element-wise factor scales the same bytes); pinned to the published fraction an optimized memory-bound kernel reaches (82-84% of H100 HBM3, vllm-project/vllm PR #48110)".into(),
    });
    // The reduction term: a block's GEMMs have K = its width, which moves
    // every other term too; the published square-GEMM sweeps (one shape
    // varied alone, REAL-SYSTEMS-2 §5.1) put an epilogue half exposed.
    for (p, path) in ["tensor", "simt"].iter().enumerate() {
        free[K0 + p] = false;
        pinned.push(PinnedCoefficient {
            coefficient: format!("time.gemm_reduction_half.{path}"),
            value: K0_BASE,
            why: "cannot be identified by whole blocks (their reduction length is the model width, which moves every other term); pinned to an epilogue half exposed, which reproduces the published H100 square-GEMM rates at 2048^3 and 8192^3".into(),
        });
    }
    for (fam, name) in FAMILIES.iter().enumerate() {
        let seqs = distinct_in_family(entries, fam, |e| u64::from(e.seq_len));
        if seqs < 2 {
            free[CHAIN + fam] = false;
            pinned.push(PinnedCoefficient {
                coefficient: format!("time.score_chain_factor.{name}"),
                value: 1.0,
                why: format!(
                    "cannot be identified: {name} is measured at {seqs} sequence length{} (an s^2 cost needs two to be told from a per-token one); pinned to the per-op count of the eager chain",
                    if seqs == 1 { "" } else { "s" }
                ),
            });
        }
        let widths = distinct_in_family(entries, fam, |e| e.feats[0].work.params as u64);
        if widths < 2 {
            free[PTOK + fam] = false;
            values.push((PTOK + fam, (NO_TOKEN_OVERHEAD / PTOK_BASE).ln()));
            pinned.push(PinnedCoefficient {
                coefficient: format!("time.token_overhead_elements.{name}"),
                value: NO_TOKEN_OVERHEAD,
                why: format!(
                    "cannot be identified: {name} is measured at {widths} model width{} (a per-token cost needs two to be told from the GEMMs' rate); pinned to the per-op count (nothing)",
                    if widths == 1 { "" } else { "s" }
                ),
            });
        }
    }
    Identified {
        free,
        values,
        pinned,
    }
}

/// The per-token overhead a family is pinned to when its data cannot
/// identify one: nothing (a value the file's range accepts).
const NO_TOKEN_OVERHEAD: f64 = 1e-6;

/// Where the fit of the anchors' sustained fraction starts: below the
/// saturation at 1, so forward differences see the data's slope.
const SUS_START: f64 = 0.9;

/// Fits the time parameters to the entries: the ones [`identify`] frees,
/// the others at their pinned values.
pub fn fit_time(entries: &[&TimeEntry]) -> TimeTheta {
    let mut th = TimeTheta::default();
    for e in entries {
        for f in &e.feats {
            th.fitted[f.gpu.class.index()][f.gpu.path.index()] = true;
        }
    }
    let fitted = th.fitted;
    let id = identify(entries);
    let mut base = th.v.clone();
    // The sustained fraction saturates at 1 (the published maximum): a fit
    // started there would see no slope in either direction, so it starts
    // below and the data alone moves it (no prior).
    if id.free[SUS] {
        base[SUS] = SUS_START.ln();
    }
    for &(i, x) in &id.values {
        base[i] = x;
    }
    let index: Vec<usize> = (0..N_TIME).filter(|&i| id.free[i]).collect();
    let x0: Vec<f64> = index.iter().map(|&i| base[i]).collect();
    let full = |x: &[f64]| {
        let mut v = base.clone();
        for (k, &i) in index.iter().enumerate() {
            v[i] = x[k];
        }
        v
    };
    let x = minimize(
        |x, r| {
            r.clear();
            let t = TimeTheta { v: full(x), fitted };
            for e in entries {
                let w = 1.0 / (e.feats.len() as f64).sqrt();
                for (i, f) in e.feats.iter().enumerate() {
                    let (pf, pb) = clamp_to_bound(t.time_ms(&f.gpu, &f.work), e.bounds[i]);
                    r.push(w * (pf / e.fwd_ms[i]).ln());
                    r.push(w * (pb / e.bwd_ms[i]).ln());
                }
            }
            for (k, &i) in index.iter().enumerate() {
                let lam = if i == SUS {
                    0.0
                } else if (pwf(0)..pwf(0) + 7).contains(&i) {
                    PRIOR_POWER_CLASS
                } else if i < pwf(0) {
                    PRIOR_CLASS_EFFICIENCY
                } else {
                    PRIOR_TIME
                };
                // Parameters of pairs without data only feel the prior.
                r.push(lam * (x[k] - x0[k]));
            }
        },
        &x0,
        LmOptions {
            max_iter: 120,
            rel_tol: 1e-8,
            ..LmOptions::default()
        },
    );
    TimeTheta {
        v: full(&x),
        fitted,
    }
}

/// Fits the memory parameters to the entries.
pub fn fit_memory(entries: &[&MemEntry]) -> MemTheta {
    let x0 = MemTheta::base().v;
    let x = minimize(
        |v, r| {
            r.clear();
            let t = MemTheta { v: v.to_vec() };
            for e in entries {
                let w = 1.0 / (e.feats.len() as f64).sqrt();
                for (f, y) in e.feats.iter().zip(&e.act_gib) {
                    r.push(w * (t.act_gib(f) / y).ln());
                }
            }
            r.extend(v.iter().map(|x| PRIOR_MEM * x));
        },
        &x0,
        LmOptions::default(),
    );
    debug_assert_eq!(x.len(), N_MEM);
    MemTheta { v: x }
}

/// One predicted-vs-measured point of forward+backward time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvPoint {
    /// GPU.
    pub gpu: String,
    /// Model.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// Micro-batch size.
    pub batch: u32,
    /// Measured forward+backward ms.
    pub measured_ms: f64,
    /// Predicted forward+backward ms.
    pub predicted_ms: f64,
}

/// One cross-validation mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvMode {
    /// `in-sample`, `leave-one-gpu-out` or `leave-one-model-out`.
    pub mode: String,
    /// All points pooled.
    pub overall: ErrorStats,
    /// Per GPU.
    pub per_gpu: Vec<GroupErrors>,
    /// Per model.
    pub per_model: Vec<GroupErrors>,
    /// Every point.
    pub points: Vec<CvPoint>,
}

/// One memory point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemPoint {
    /// Cluster label.
    pub cluster: String,
    /// Model.
    pub model: String,
    /// Precision.
    pub dtype: NumFormat,
    /// Micro-batch size.
    pub batch: u32,
    /// Measured GiB.
    pub measured_gib: f64,
    /// Predicted GiB.
    pub predicted_gib: f64,
}

/// Memory errors of one mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemCv {
    /// `in-sample` or `leave-one-model-out`.
    pub mode: String,
    /// Pooled errors.
    pub overall: ErrorStats,
    /// Per model.
    pub per_model: Vec<GroupErrors>,
    /// Every point.
    pub points: Vec<MemPoint>,
}

/// The cross-validation report written next to a calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvReport {
    /// Timing, fitted on everything.
    pub time_in_sample: CvMode,
    /// Timing, leave one GPU type out.
    pub time_leave_one_gpu_out: CvMode,
    /// Timing, leave one model out.
    pub time_leave_one_model_out: CvMode,
    /// Memory, fitted on everything.
    pub memory_in_sample: MemCv,
    /// Memory, leave one model out.
    pub memory_leave_one_model_out: MemCv,
    /// Timing of the fit-only entries (never fitted) against their own
    /// linear fits, predicted by the in-sample calibration.
    pub time_fit_only_holdout: CvMode,
    /// Coefficients not fitted (published anchors, and the ones the data
    /// cannot identify), with their values and why.
    pub pinned: Vec<PinnedCoefficient>,
    /// Entries left out and why.
    pub excluded: Vec<Excluded>,
}

/// A fitted calibration with its report.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationRun {
    /// The coefficients (what `profiles/calibration.json` holds).
    pub calibration: Calibration,
    /// Cross-validation.
    pub report: CvReport,
}

fn predict_points(th: &TimeTheta, entries: &[&TimeEntry]) -> Vec<CvPoint> {
    let mut out = Vec::new();
    for e in entries {
        for (i, f) in e.feats.iter().enumerate() {
            let (pf, pb) = clamp_to_bound(th.time_ms(&f.gpu, &f.work), e.bounds[i]);
            out.push(CvPoint {
                gpu: e.gpu.clone(),
                model: e.model.clone(),
                seq_len: e.seq_len,
                dtype: e.dtype,
                batch: e.batches[i],
                measured_ms: e.fwd_ms[i] + e.bwd_ms[i],
                predicted_ms: pf + pb,
            });
        }
    }
    out
}

fn groups<T>(points: &[T], key: impl Fn(&T) -> &str, err: impl Fn(&T) -> f64) -> Vec<GroupErrors> {
    let mut names: Vec<&str> = points.iter().map(&key).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| GroupErrors {
            group: n.to_string(),
            stats: ErrorStats::of(
                &points
                    .iter()
                    .filter(|p| key(p) == n)
                    .map(&err)
                    .collect::<Vec<_>>(),
            ),
        })
        .collect()
}

fn time_mode(mode: &str, points: Vec<CvPoint>) -> CvMode {
    let err = |p: &CvPoint| (p.predicted_ms / p.measured_ms - 1.0).abs();
    CvMode {
        mode: mode.to_string(),
        overall: ErrorStats::of(&points.iter().map(err).collect::<Vec<_>>()),
        per_gpu: groups(&points, |p| p.gpu.as_str(), err),
        per_model: groups(&points, |p| p.model.as_str(), err),
        points,
    }
}

fn mem_points(th: &MemTheta, entries: &[&MemEntry]) -> Vec<MemPoint> {
    let mut out = Vec::new();
    for e in entries {
        for (i, f) in e.feats.iter().enumerate() {
            out.push(MemPoint {
                cluster: e.cluster.clone(),
                model: e.model.clone(),
                dtype: e.dtype,
                batch: i as u32 + 1,
                measured_gib: e.act_gib[i],
                predicted_gib: th.act_gib(f),
            });
        }
    }
    out
}

fn mem_mode(mode: &str, points: Vec<MemPoint>) -> MemCv {
    let err = |p: &MemPoint| (p.predicted_gib / p.measured_gib - 1.0).abs();
    MemCv {
        mode: mode.to_string(),
        overall: ErrorStats::of(&points.iter().map(err).collect::<Vec<_>>()),
        per_model: groups(&points, |p| p.model.as_str(), err),
        points,
    }
}

/// Leave-one-group-out predictions: refits without each group in turn,
/// calling `fitted` after each refit.
fn leave_one_out(
    ds: &Dataset,
    key: impl Fn(&TimeEntry) -> &str + Sync,
    fitted: &(dyn Fn() + Sync),
) -> Vec<CvPoint> {
    let names = distinct(ds.time.iter().map(&key));
    let per: Vec<Vec<CvPoint>> = names
        .par_iter()
        .map(|n| {
            let train: Vec<&TimeEntry> = ds.time.iter().filter(|e| key(e) != *n).collect();
            let test: Vec<&TimeEntry> = ds.time.iter().filter(|e| key(e) == *n).collect();
            let p = predict_points(&fit_time(&train), &test);
            fitted();
            p
        })
        .collect();
    per.into_iter().flatten().collect()
}

/// The distinct values, sorted.
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = it.collect();
    v.sort();
    v.dedup();
    v
}

/// How many fits [`calibrate_observed`] runs on `ds`: the full time and
/// memory fits, one time refit per GPU and per model left out, one memory
/// refit per model left out (what a progress bar counts).
pub fn fits_needed(ds: &Dataset) -> usize {
    2 + distinct(ds.time.iter().map(|e| e.gpu.as_str())).len()
        + distinct(ds.time.iter().map(|e| e.model.as_str())).len()
        + distinct(ds.memory.iter().map(|e| e.model.as_str())).len()
}

/// Fits everything, cross-validates, and returns the calibration file content
/// and the report. `reference` labels where the data came from.
pub fn calibrate(ds: &Dataset, reference: &str) -> CalibrationRun {
    calibrate_observed(ds, reference, &|| {})
}

/// [`calibrate`], calling `fitted` after each of its [`fits_needed`] fits
/// (from several threads: the leave-one-out refits run in parallel).
pub fn calibrate_observed(
    ds: &Dataset,
    reference: &str,
    fitted: &(dyn Fn() + Sync),
) -> CalibrationRun {
    let all: Vec<&TimeEntry> = ds.time.iter().collect();
    let mem_all: Vec<&MemEntry> = ds.memory.iter().collect();
    let ((th, mem), (logo, lomo)) = rayon::join(
        || {
            let th = fit_time(&all);
            fitted();
            let mem = fit_memory(&mem_all);
            fitted();
            (th, mem)
        },
        || {
            rayon::join(
                || leave_one_out(ds, |e| e.gpu.as_str(), fitted),
                || leave_one_out(ds, |e| e.model.as_str(), fitted),
            )
        },
    );
    let mem_names = distinct(ds.memory.iter().map(|e| e.model.as_str()));
    let mem_lomo: Vec<MemPoint> = mem_names
        .iter()
        .flat_map(|n| {
            let train: Vec<&MemEntry> = ds.memory.iter().filter(|e| e.model != *n).collect();
            let test: Vec<&MemEntry> = ds.memory.iter().filter(|e| e.model == *n).collect();
            let p = mem_points(&fit_memory(&train), &test);
            fitted();
            p
        })
        .collect();
    let report = CvReport {
        time_in_sample: time_mode("in-sample", predict_points(&th, &all)),
        time_leave_one_gpu_out: time_mode("leave-one-gpu-out", logo),
        time_leave_one_model_out: time_mode("leave-one-model-out", lomo),
        memory_in_sample: mem_mode("in-sample", mem_points(&mem, &mem_all)),
        memory_leave_one_model_out: mem_mode("leave-one-model-out", mem_lomo),
        time_fit_only_holdout: time_mode(
            "fit-only hold-out",
            predict_points(&th, &ds.holdout.iter().collect::<Vec<_>>()),
        ),
        pinned: identify(&all).pinned,
        excluded: ds.excluded.clone(),
    };
    let calibration = Calibration {
        format: CALIBRATION_FORMAT.to_string(),
        time: th.to_coefficients(identify(&all).pinned),
        memory: mem.to_coefficients(),
        provenance: Provenance {
            reference: reference.to_string(),
            time_entries: ds.time.len(),
            time_points: ds.time.iter().map(|e| e.batches.len()).sum(),
            memory_entries: ds.memory.len(),
            excluded: ds
                .excluded
                .iter()
                .map(|e| format!("{}: {}", e.entry, e.reason))
                .collect(),
        },
        error_band: Some(crate::perfmodel::coeffs::ErrorBand {
            time_leave_one_gpu_out: report.time_leave_one_gpu_out.overall,
            time_leave_one_gpu_out_per_gpu: report.time_leave_one_gpu_out.per_gpu.clone(),
            time_leave_one_model_out: report.time_leave_one_model_out.overall,
            memory_leave_one_model_out: report.memory_leave_one_model_out.overall,
        }),
    };
    CalibrationRun {
        calibration,
        report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_list_checks() {
        assert!(raw_list_problem("f", &[1.0, 2.0, 3.0, 4.0]).is_none());
        assert!(raw_list_problem("f", &[1.0, 2.0, 1.5, 4.0])
            .unwrap()
            .contains("non-monotonic"));
        let hot: Vec<f64> = (1..=8).map(|i| (i * i) as f64).collect();
        assert!(raw_list_problem("f", &hot).unwrap().contains("superlinear"));
        assert!(raw_list_problem("f", &[1.0, 3.0, 3.1])
            .unwrap()
            .contains("batch-2"));
    }

    #[test]
    fn percentiles() {
        let s = ErrorStats::of(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]);
        assert!((s.median_ape_pct - 50.0).abs() < 1e-9);
        assert!((s.p90_ape_pct - 90.0).abs() < 1e-9);
    }
}
