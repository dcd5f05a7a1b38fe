//! Profiles: per (gpu, model, seq_len, dtype) cost tables and where they came from.
//!
//! A [`BlockProfile`] holds the forward and backward time of ONE transformer
//! block (ms) against micro-batch size; a [`MemoryProfile`] holds the
//! non-state GPU memory of one training step (GiB) against micro-batch size,
//! with the meaning of the reference `profiled_compute_memory`: activations,
//! unsharded unit buffers, logits and temporaries, everything except the
//! 16 bytes/parameter of sharded training state.
//!
//! Three formats are read:
//! * the reference JSON (`model_latencies.json`, `model_memory.json`) in all
//!   four leaf forms of its README, with data-quality flags ([`mod@reference`]);
//! * the project's own profile format, `cephalo-profile/1` ([`native`]),
//!   written by `cephalo profile`;
//! * nothing at all: the analytic predictor fills gaps (see `crate::perfmodel`).
//!
//! Every curve carries its [`Source`], so a report can say where each number
//! came from.

pub mod native;
pub mod nccl;
pub mod reference;

use crate::precision::NumFormat;
use crate::strategy::Attention;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a cost number came from, in order of trust.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Source {
    /// Measured by this project's profiler (`cephalo profile`).
    Measured {
        /// File it was read from.
        origin: String,
    },
    /// Imported from a reference-format file.
    Imported {
        /// File it was read from.
        origin: String,
        /// Entry key inside the file (`model/gpu/seq/dtype`).
        entry: String,
    },
    /// Predicted by the analytic performance model.
    Analytic {
        /// Which model and coefficients (e.g. `roofline`, `calibrated:profiles/calibration.json`).
        model: String,
    },
}

impl Source {
    /// Trust rank: lower is more trusted (measured 0, imported 1, analytic 2).
    pub fn rank(&self) -> u8 {
        match self {
            Source::Measured { .. } => 0,
            Source::Imported { .. } => 1,
            Source::Analytic { .. } => 2,
        }
    }

    /// Short label: `measured`, `imported` or `analytic`.
    pub fn label(&self) -> &'static str {
        match self {
            Source::Measured { .. } => "measured",
            Source::Imported { .. } => "imported",
            Source::Analytic { .. } => "analytic",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Measured { origin } => write!(f, "measured ({origin})"),
            Source::Imported { origin, entry } => write!(f, "imported ({origin}: {entry})"),
            Source::Analytic { model } => write!(f, "analytic ({model})"),
        }
    }
}

/// A straight line `y = slope * x + intercept` (ms per sample, ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    /// Slope (ms per sample, or GiB per sample).
    pub slope: f64,
    /// Intercept (ms or GiB).
    pub intercept: f64,
}

impl LinearFit {
    /// Evaluates the line at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }

    /// Least-squares fit through the points; `None` with fewer than 2 distinct x.
    pub fn least_squares(xs: &[f64], ys: &[f64]) -> Option<LinearFit> {
        let n = xs.len().min(ys.len());
        if n == 0 {
            return None;
        }
        if n == 1 {
            return None;
        }
        let mx = xs[..n].iter().sum::<f64>() / n as f64;
        let my = ys[..n].iter().sum::<f64>() / n as f64;
        let sxx: f64 = xs[..n].iter().map(|x| (x - mx) * (x - mx)).sum();
        if sxx <= 0.0 {
            return None;
        }
        let sxy: f64 = xs[..n]
            .iter()
            .zip(&ys[..n])
            .map(|(x, y)| (x - mx) * (y - my))
            .sum();
        let slope = sxy / sxx;
        Some(LinearFit {
            slope,
            intercept: my - slope * mx,
        })
    }
}

/// Where a raw per-batch list first drops by more than the fraction `rel`
/// (`raw[i + 1] < raw[i] * (1 - rel)`): the index `i`, or `None`.
pub fn first_drop(raw: &[f64], rel: f64) -> Option<usize> {
    raw.windows(2).position(|w| w[1] < w[0] * (1.0 - rel))
}

/// Superlinear growth of a raw per-batch list of at least 6 points (batch
/// sizes 1..=n): `(half, per-sample ms at batch half, per-sample ms at n)`
/// when the latter is more than the fraction `rel` above the former.
pub fn superlinear_growth(raw: &[f64], rel: f64) -> Option<(usize, f64, f64)> {
    let n = raw.len();
    if n < 6 {
        return None;
    }
    let half = n / 2;
    let (per_half, per_last) = (raw[half - 1] / half as f64, raw[n - 1] / n as f64);
    (per_last > per_half * (1.0 + rel)).then_some((half, per_half, per_last))
}

/// Smallest time any curve returns (ms): a kernel launch is never free and a
/// negative fit intercept must not yield a negative duration.
pub const MIN_OP_MS: f64 = 0.005;

/// Forward / backward time of one block against micro-batch size.
///
/// Lookup rule (the reference optimizer's): the raw value when the micro-batch
/// size was measured, linear interpolation between measured sizes, and the
/// linear fit outside the measured range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeCurve {
    /// Measured micro-batch sizes, strictly increasing (may be empty).
    pub batch_sizes: Vec<u32>,
    /// Forward ms of one block at each size.
    pub fwd_ms: Vec<f64>,
    /// Backward ms (weight + input gradients) of one block at each size.
    pub bwd_ms: Vec<f64>,
    /// Forward fit used outside the measured sizes.
    pub fwd_fit: LinearFit,
    /// Backward fit used outside the measured sizes.
    pub bwd_fit: LinearFit,
    /// Where these numbers came from.
    pub source: Source,
}

fn curve_lookup(sizes: &[u32], vals: &[f64], fit: &LinearFit, m: u32) -> f64 {
    let v = match sizes.binary_search(&m) {
        Ok(i) => vals[i],
        Err(i) if i > 0 && i < sizes.len() => {
            let (x0, x1) = (sizes[i - 1] as f64, sizes[i] as f64);
            let t = (m as f64 - x0) / (x1 - x0);
            vals[i - 1] * (1.0 - t) + vals[i] * t
        }
        _ => fit.at(m as f64),
    };
    v.max(MIN_OP_MS)
}

impl ComputeCurve {
    /// Why this curve is not physical for a block of `fwd_flops` FLOPs per
    /// sample forward (backward twice that) on a GPU of `peak_tflops`
    /// (`None`: fine): a measured time outside [`crate::physical::OP_MS`]
    /// (a prediction outside [`crate::physical::PREDICTED_MS`]),
    /// a total (forward + backward) that falls with the micro-batch beyond
    /// noise, a fit that goes to zero or below for a micro-batch size it
    /// serves (1 to [`crate::limits::MAX_MICROBATCH`] outside
    /// the measured sizes), or a time faster than the GPU's peak allows.
    pub fn physical_problem(&self, fwd_flops: f64, peak_tflops: f64) -> Option<String> {
        use crate::physical::{outside, series_problem, OP_MS, PREDICTED_MS};
        debug_assert_eq!(self.fwd_ms.len(), self.batch_sizes.len());
        // A measured time has a unit-mix-up bound; a prediction may be as
        // long as the simulator's clock holds (a long run is an answer).
        let range = match self.source {
            Source::Analytic { .. } => &PREDICTED_MS,
            _ => &OP_MS,
        };
        for (name, v) in [("fwd_ms", &self.fwd_ms), ("bwd_ms", &self.bwd_ms)] {
            if let Some(e) = outside(&self.batch_sizes, v, range) {
                return Some(format!("{name}: {e}"));
            }
        }
        let totals: Vec<f64> = self
            .fwd_ms
            .iter()
            .zip(&self.bwd_ms)
            .map(|(f, b)| f + b)
            .collect();
        if let Some(e) = series_problem(&self.batch_sizes, &totals, range) {
            return Some(format!("forward + backward: {e}"));
        }
        let top = crate::limits::MAX_MICROBATCH;
        let (first, last) = (
            self.batch_sizes.first().copied().unwrap_or(u32::MAX),
            self.batch_sizes.last().copied().unwrap_or(0),
        );
        for (name, fit) in [("forward", &self.fwd_fit), ("backward", &self.bwd_fit)] {
            for m in [1u32, top] {
                if (m < first || m > last)
                    && fit.at(m as f64).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
                {
                    return Some(format!(
                        "the {name} fit ({} ms per sample + {} ms) gives {:.4} ms at micro-batch {m}, a size it serves: a time must be positive",
                        fit.slope,
                        fit.intercept,
                        fit.at(m as f64)
                    ));
                }
            }
        }
        if peak_tflops > 0.0 && fwd_flops > 0.0 {
            for (k, &m) in self.batch_sizes.iter().enumerate() {
                let ms = totals[k];
                let tflops = 3.0 * fwd_flops * m as f64 / (ms * 1e-3) / 1e12;
                if tflops > peak_tflops {
                    return Some(format!(
                        "micro-batch {m} runs forward + backward in {ms:.4} ms, {tflops:.1} TFLOPS: faster than the GPU's peak of {peak_tflops} TFLOPS"
                    ));
                }
            }
        }
        None
    }

    /// Forward ms of one block for a micro-batch of `m` samples (`m >= 1`).
    pub fn fwd_ms(&self, m: u32) -> f64 {
        curve_lookup(&self.batch_sizes, &self.fwd_ms, &self.fwd_fit, m)
    }

    /// Backward ms of one block for a micro-batch of `m` samples (`m >= 1`).
    pub fn bwd_ms(&self, m: u32) -> f64 {
        curve_lookup(&self.batch_sizes, &self.bwd_ms, &self.bwd_fit, m)
    }

    /// Builds a curve from measured points, fitting the lines by least squares
    /// (a single point gives a proportional line through the origin). A
    /// time never falls as the micro-batch grows: when noise tilts the
    /// least-squares line down, or its value at one sample is not
    /// positive, the fit is the least-squares line through the origin
    /// (time proportional to work), which extrapolates to every size the
    /// curve serves with a positive time.
    pub fn from_points(
        batch_sizes: Vec<u32>,
        fwd_ms: Vec<f64>,
        bwd_ms: Vec<f64>,
        source: Source,
    ) -> ComputeCurve {
        let xs: Vec<f64> = batch_sizes.iter().map(|&b| b as f64).collect();
        let fit = |ys: &[f64]| {
            let through_origin = || {
                let sxx: f64 = xs.iter().map(|x| x * x).sum();
                let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| x * y).sum();
                LinearFit {
                    slope: if sxx > 0.0 { sxy / sxx } else { 0.0 },
                    intercept: 0.0,
                }
            };
            match LinearFit::least_squares(&xs, ys) {
                Some(f) if f.slope >= 0.0 && f.at(1.0) > 0.0 => f,
                _ => through_origin(),
            }
        };
        let fwd_fit = fit(&fwd_ms);
        let bwd_fit = fit(&bwd_ms);
        ComputeCurve {
            batch_sizes,
            fwd_ms,
            bwd_ms,
            fwd_fit,
            bwd_fit,
            source,
        }
    }
}

/// Block timing profile for one (gpu, model, seq_len, dtype).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockProfile {
    /// Canonical GPU name.
    pub gpu: String,
    /// Canonical model name.
    pub model: String,
    /// Model key as written in the file (e.g. `deepspeedgpt_2.7b`).
    pub model_key: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// The timing curve.
    pub curve: ComputeCurve,
    /// The attention kernel the blocks ran when measured (the reference
    /// profiles: eager; `cephalo profile`: eager unless the file says so).
    pub attention: Attention,
    /// Data-quality warnings about this entry (empty when clean).
    pub flags: Vec<String>,
}

/// Non-state memory of one training step against micro-batch size (GiB).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryProfile {
    /// Cluster label the measurement belongs to (e.g. `paper`), or `measured`.
    pub cluster: String,
    /// Canonical model name.
    pub model: String,
    /// Model key as written in the file.
    pub model_key: String,
    /// Precision.
    pub dtype: NumFormat,
    /// Total trainable parameters of the model as built for that measurement.
    pub parameters: u64,
    /// Tokens per sample it was measured at (`None`: the model's default,
    /// as the reference `model_memory.json`, which records none).
    pub seq_len: Option<u32>,
    /// GiB at micro-batch size i+1.
    pub act_gib: Vec<f64>,
    /// Where these numbers came from.
    pub source: Source,
}

impl MemoryProfile {
    /// Non-state GiB at micro-batch size `m` (`m >= 1`): the list value, or past
    /// its end a linear extrapolation with the mean slope of its last (up to) 5
    /// points (the reference optimizer's rule).
    pub fn act_gib(&self, m: u32) -> f64 {
        let n = self.act_gib.len();
        if n == 0 {
            return 0.0;
        }
        let i = m.max(1) as usize - 1;
        if i < n {
            return self.act_gib[i];
        }
        if n == 1 {
            return self.act_gib[0] * m as f64;
        }
        let k = n.min(5);
        let tail = &self.act_gib[n - k..];
        let slope = tail.windows(2).map(|w| w[1] - w[0]).sum::<f64>() / (k - 1) as f64;
        self.act_gib[n - 1] + slope * (m as f64 - n as f64)
    }
}

/// Measured time of one collective (for the measured-table communication mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSample {
    /// `all_gather` or `reduce_scatter`.
    pub kind: String,
    /// Group size (ranks).
    pub ranks: u32,
    /// Total buffer bytes (sum of pieces).
    pub bytes: f64,
    /// Largest piece / mean piece (1.0 = even).
    #[serde(default = "one")]
    pub imbalance: f64,
    /// Median time, ms.
    pub time_ms: f64,
    /// Nodes the measured group spanned, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Whether groups of another size may use the curve rescaled to equal
    /// bus bandwidth (imported nccl-tests logs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rescalable: bool,
}

fn one() -> f64 {
    1.0
}

/// Fixed per-iteration costs of the non-block units, measured (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitProfile {
    /// Canonical GPU name.
    pub gpu: String,
    /// Canonical model name.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// Measured micro-batch sizes.
    pub batch_sizes: Vec<u32>,
    /// Embedding forward ms at each size.
    pub embed_fwd_ms: Vec<f64>,
    /// Embedding backward ms at each size.
    pub embed_bwd_ms: Vec<f64>,
    /// Head (final norm + LM head + loss) forward ms at each size.
    pub head_fwd_ms: Vec<f64>,
    /// Head backward ms at each size.
    pub head_bwd_ms: Vec<f64>,
    /// Optimizer step ms per million local parameters.
    pub optimizer_ms_per_mparam: f64,
    /// Where it came from.
    pub source: Source,
}

/// All profiles loaded for a run, plus warnings gathered while loading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileSet {
    /// Block timing profiles.
    pub blocks: Vec<BlockProfile>,
    /// Non-state memory profiles.
    pub memory: Vec<MemoryProfile>,
    /// Measured collective times.
    pub collectives: Vec<CollectiveSample>,
    /// Measured embedding / head / optimizer costs.
    pub units: Vec<UnitProfile>,
    /// Warnings (known-bad entries, skipped names) for the user.
    pub warnings: Vec<String>,
    /// Entries for a known GPU, model, sequence length and dtype that could
    /// not be read: a run that needs one fails with its reason instead of
    /// falling back to another source.
    #[serde(default, skip)]
    pub rejected: Vec<Rejected>,
}

/// A profile entry that names a known workload but is malformed.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// Canonical GPU name.
    pub gpu: String,
    /// Canonical model name.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// File.
    pub origin: String,
    /// Entry key in the file.
    pub entry: String,
    /// What is wrong.
    pub why: String,
}

impl ProfileSet {
    /// An empty set (analytic predictions only).
    pub fn new() -> ProfileSet {
        ProfileSet::default()
    }

    /// Adds everything of `other` to this set.
    pub fn merge(&mut self, other: ProfileSet) {
        self.blocks.extend(other.blocks);
        self.memory.extend(other.memory);
        self.collectives.extend(other.collectives);
        self.units.extend(other.units);
        self.warnings.extend(other.warnings);
        self.rejected.extend(other.rejected);
    }

    /// The most trusted block profile for the key: measured before imported;
    /// among imported ones the current trainer's (`deepspeed*` keys) first;
    /// then file order.
    pub fn block(
        &self,
        gpu: &str,
        model: &str,
        seq_len: u32,
        dtype: NumFormat,
    ) -> Option<&BlockProfile> {
        self.blocks
            .iter()
            .filter(|b| {
                b.gpu == gpu && b.model == model && b.seq_len == seq_len && b.dtype == dtype
            })
            .min_by_key(|b| (b.curve.source.rank(), !b.model_key.starts_with("deepspeed")))
    }

    /// The rejected entry for a workload, if its profile could not be read.
    pub fn rejected_block(
        &self,
        gpu: &str,
        model: &str,
        seq_len: u32,
        dtype: NumFormat,
    ) -> Option<&Rejected> {
        self.rejected
            .iter()
            .find(|r| r.gpu == gpu && r.model == model && r.seq_len == seq_len && r.dtype == dtype)
    }

    /// The block profile whose file key is exactly `model_key` (compat mode).
    pub fn block_by_key(
        &self,
        gpu: &str,
        model_key: &str,
        seq_len: u32,
        dtype: NumFormat,
    ) -> Option<&BlockProfile> {
        self.blocks
            .iter()
            .filter(|b| {
                b.gpu == gpu && b.model_key == model_key && b.seq_len == seq_len && b.dtype == dtype
            })
            .min_by_key(|b| b.curve.source.rank())
    }

    /// The memory profile for a model and dtype: from the named cluster when
    /// given, else measured ones first, then the first in file order.
    pub fn memory(
        &self,
        cluster: Option<&str>,
        model: &str,
        dtype: NumFormat,
    ) -> Option<&MemoryProfile> {
        let it = self.memory.iter().filter(|m| {
            m.model == model && m.dtype == dtype && cluster.is_none_or(|c| m.cluster == c)
        });
        match cluster {
            Some(_) => it.min_by_key(|m| !m.model_key.starts_with("deepspeed")),
            None => it.min_by_key(|m| (m.source.rank(), !m.model_key.starts_with("deepspeed"))),
        }
    }

    /// Names of the memory clusters present (sorted, unique).
    pub fn memory_clusters(&self) -> Vec<String> {
        let mut v: Vec<String> = self.memory.iter().map(|m| m.cluster.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Measured unit costs for a key, if any.
    pub fn unit(
        &self,
        gpu: &str,
        model: &str,
        seq_len: u32,
        dtype: NumFormat,
    ) -> Option<&UnitProfile> {
        self.units
            .iter()
            .find(|u| u.gpu == gpu && u.model == model && u.seq_len == seq_len && u.dtype == dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> Source {
        Source::Analytic {
            model: "test".into(),
        }
    }

    #[test]
    fn lookup_raw_interp_and_fit() {
        let c = ComputeCurve::from_points(
            vec![1, 2, 4],
            vec![1.0, 2.0, 4.0],
            vec![2.0, 4.0, 8.0],
            src(),
        );
        assert_eq!(c.fwd_ms(2), 2.0);
        assert!((c.fwd_ms(3) - 3.0).abs() < 1e-12);
        assert!((c.fwd_ms(8) - 8.0).abs() < 1e-9);
        assert!((c.bwd_ms(8) - 16.0).abs() < 1e-9);
    }

    #[test]
    fn negative_fit_is_clamped() {
        let mut c = ComputeCurve::from_points(vec![], vec![], vec![], src());
        c.fwd_fit = LinearFit {
            slope: 1.0,
            intercept: -5.0,
        };
        assert_eq!(c.fwd_ms(1), MIN_OP_MS);
    }

    #[test]
    fn memory_extrapolation_uses_mean_tail_slope() {
        let m = MemoryProfile {
            cluster: "x".into(),
            model: "m".into(),
            model_key: "m".into(),
            dtype: NumFormat::Fp16,
            parameters: 1,
            seq_len: None,
            act_gib: vec![1.0, 2.0, 3.0, 5.0, 7.0, 9.0],
            source: src(),
        };
        assert_eq!(m.act_gib(2), 2.0);
        // last 5 points: 2,3,5,7,9 -> mean slope 7/4
        assert!((m.act_gib(8) - (9.0 + 2.0 * 1.75)).abs() < 1e-12);
    }
}
