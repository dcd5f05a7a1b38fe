//! What one GPU type costs for a workload ([`GpuTypeCost`]): its block
//! curve per attention kernel (profiled, or predicted analytically), the
//! selective-recompute fractions and measured unit costs, each with its
//! source.

use super::workload::Workload;
use crate::error::SpecError;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::perfmodel::{BlockImpl, Predictor};
use crate::precision::NumFormat;
use crate::profile::{ComputeCurve, ProfileSet, Source, UnitProfile};
use crate::strategy::Attention;

/// Micro-batch sizes at which an analytic curve is tabulated (1..=N); beyond
/// it the chord through the points at N/2 and N answers (`with_tail_fit`).
pub const ANALYTIC_TABLE_MAX_BATCH: u32 = 64;

/// Costs of one GPU type for this workload.
#[derive(Debug, Clone)]
pub struct GpuTypeCost {
    /// The GPU.
    pub gpu: GpuSpec,
    /// Block forward/backward curve as profiled (or predicted), with the
    /// kernel of [`GpuTypeCost::measured_attention`]; carries its source.
    pub block: ComputeCurve,
    /// The attention kernel `block` was measured (or predicted) with, on
    /// the PyTorch stack (what profiles measure).
    pub measured_attention: Attention,
    /// Block curve per implementation ([`BlockImpl::index`]); the measured
    /// one's entry is `block`, the others scaled from it by the
    /// predictor's ratio of the two implementations (`None` when the
    /// predictor cannot run this GPU and dtype).
    pub kernels: [Option<ComputeCurve>; 6],
    /// Per selective policy (op-level, core attention) and implementation:
    /// the fraction of the forward the recompute reruns, at micro-batch
    /// sizes 1..=N (the last value beyond).
    pub selective_fraction: [[Vec<f64>; 6]; 2],
    /// Per TP configuration the model allows (degree, sequence
    /// parallelism) and implementation: how one rank's block and unit
    /// times compare with the whole block's and units' ([`TpTable`]).
    pub tp: Vec<TpTable>,
    /// The predictor's embedding and head curves per implementation
    /// (whole units, micro-batch sizes 1..=N; `None` when it cannot run
    /// this GPU and dtype).
    pub unit_curves: [Option<UnitCurves>; 6],
    /// Data-quality flags of the block profile used.
    pub block_flags: Vec<String>,
    /// Measured unit costs, if any.
    pub units: Option<UnitProfile>,
    /// The predictor's cross-validated error band for this GPU, when
    /// the block curve is analytic ([`Predictor::error_band`]).
    pub analytic_error_band: Option<String>,
    /// How far its block times are expected to be off: (median, 90th
    /// percentile) absolute error, %: the predictor's cross-validated
    /// errors for an analytic curve, [`MEASURED_TIME_ERROR_PCT`] for a
    /// measured or imported one, [`UNKNOWN_TIME_ERROR_PCT`] for a predictor
    /// that states none.
    pub time_error_pct: (f64, f64),
}

/// Run-to-run spread of a replayed GPU timing profile, (median, p90) %:
/// CUDA kernel timings of one configuration repeat within 1-3% on an idle
/// GPU, more under clock and thermal variation (an estimate; the paper's
/// profiles average repeated runs).
pub const MEASURED_TIME_ERROR_PCT: (f64, f64) = (2.0, 6.0);

/// The error band of a predictor with no cross-validation, (median, p90) %:
/// the uncalibrated roofline's spread against the reference profiles
/// (order of magnitude; an estimate).
pub const UNKNOWN_TIME_ERROR_PCT: (f64, f64) = (30.0, 60.0);

/// The predictor's curves of the units around the blocks, whole (no TP).
#[derive(Debug, Clone)]
pub struct UnitCurves {
    /// Embedding forward and backward.
    pub embed: ComputeCurve,
    /// Head (final norm, output layer, loss) forward and backward.
    pub head: ComputeCurve,
}

impl GpuTypeCost {
    /// The block curve of implementation `imp`, if this GPU has one.
    pub fn curve(&self, imp: BlockImpl) -> Option<&ComputeCurve> {
        self.kernels[imp.index()].as_ref()
    }

    /// The implementation `block` was measured (or predicted) with.
    pub fn measured_impl(&self) -> BlockImpl {
        BlockImpl::pytorch(self.measured_attention)
    }

    /// Where the block times of `imp` come from, for reports.
    pub fn curve_source(&self, imp: BlockImpl) -> String {
        let band = match &self.analytic_error_band {
            Some(b) => format!(", {b}"),
            None => String::new(),
        };
        if imp == self.measured_impl() {
            format!("{}{band}", self.block.source)
        } else {
            let class = crate::perfmodel::arch::ArchClass::of(&self.gpu);
            let fused = match imp.attention {
                Attention::Flash => format!(
                    " (fused attention: {})",
                    crate::perfmodel::kernels::borrowed_from(class, imp.fused_kernel(class))
                ),
                Attention::Eager => String::new(),
            };
            format!(
                "{}{band}, scaled to {} by the predictor's ratio of the two implementations{fused}",
                self.block.source,
                imp.label(),
            )
        }
    }
}

impl GpuTypeCost {
    /// The costs of `gpu` for `workload`: its block curve from a profile
    /// (or, with none, the predictor), checked physical; the other attention
    /// kernel's curve scaled from it; selective-recompute fractions; unit
    /// costs when measured. Warnings (flagged entries used, very long
    /// passes) go to `warnings`.
    pub fn build(
        gpu: &GpuSpec,
        workload: &Workload,
        profiles: &ProfileSet,
        predictor: &dyn Predictor,
        warnings: &mut Vec<String>,
    ) -> Result<GpuTypeCost, SpecError> {
        let (model, seq, dtype) = (&workload.model, workload.seq_len, workload.dtype);
        let (block, flags, measured_attention) =
            match profiles.block(&gpu.name, &model.name, seq, dtype) {
                Some(p) => {
                    for f in &p.flags {
                        warnings.push(format!(
                            "{} / {} / {seq} / {dtype}: {f}",
                            gpu.name, model.name
                        ));
                    }
                    (p.curve.clone(), p.flags.clone(), p.attention)
                }
                None => {
                    if let Some(r) = profiles.rejected_block(&gpu.name, &model.name, seq, dtype) {
                        return Err(SpecError::invalid(
                            r.origin.clone(),
                            r.entry.clone(),
                            format!("{} (this run needs the entry; fix or remove it)", r.why),
                        ));
                    }
                    let c = analytic_curve(predictor, gpu, model, seq, dtype).map_err(|why| {
                        SpecError::MissingProfile {
                            gpu: gpu.name.clone(),
                            model: model.name.clone(),
                            seq_len: seq,
                            dtype: dtype.to_string(),
                            why,
                        }
                    })?;
                    (c, vec![], Attention::Eager)
                }
            };
        // Whatever its source, the curve this run uses must be physical;
        // the error names the file and entry (or the predictor).
        let peak = gpu.peak_tflops(dtype).unwrap_or(0.0);
        if let Some(why) = block.physical_problem(model.block_flops_fwd(seq), peak) {
            let key = format!("{}/{}/{seq}/{dtype}", gpu.name, model.name);
            return Err(match &block.source {
                Source::Imported { origin, entry } => {
                    SpecError::invalid(origin.clone(), entry.clone(), why)
                }
                Source::Measured { origin } => SpecError::invalid(origin.clone(), key, why),
                other => SpecError::invalid(
                    other.to_string(),
                    key,
                    format!("the performance model's prediction is not physical: {why}"),
                ),
            });
        }
        let units = profiles.unit(&gpu.name, &model.name, seq, dtype).cloned();
        // A curve this project's profiler measured ran this project's
        // trainer: the ratios that scale it to other kernels, TP slices
        // and recompute price that implementation, not a reference build's.
        let own;
        let model = if matches!(block.source, Source::Measured { .. }) {
            own = model.as_own_build();
            &own
        } else {
            model
        };
        let measured = BlockImpl::pytorch(measured_attention);
        let kernels = BlockImpl::ALL.map(|imp| {
            if imp == measured {
                Some(block.clone())
            } else {
                kernel_curve(predictor, gpu, model, seq, dtype, &block, measured, imp)
            }
        });
        // A long prediction is an answer, said once: the fastest kernel's
        // smallest micro-batch.
        let fastest = kernels
            .iter()
            .flatten()
            .filter_map(|c| {
                Some((
                    *c.batch_sizes.first()?,
                    c.fwd_ms.first()? + c.bwd_ms.first()?,
                ))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((m, ms)) = fastest.filter(|f| f.1 > crate::physical::LONG_PASS_MS) {
            warnings.push(format!(
                "{} / {} / {seq} / {dtype}: one block's forward + backward takes {:.1} h at micro-batch {m} ({}): a long run, not an error",
                gpu.name,
                model.name,
                ms / 3.6e6,
                block.source.label()
            ));
        }
        let selective_fraction = [false, true].map(|core| {
            BlockImpl::ALL
                .map(|imp| selective_fractions(predictor, gpu, model, seq, dtype, imp, core))
        });
        let tp = tp_tables(predictor, gpu, model, seq, dtype);
        let unit_curves =
            BlockImpl::ALL.map(|imp| unit_curves(predictor, gpu, model, seq, dtype, imp));
        let (analytic_error_band, time_error_pct) = error_bands(predictor, gpu, &block);
        Ok(GpuTypeCost {
            gpu: gpu.clone(),
            block,
            measured_attention,
            kernels,
            selective_fraction,
            tp,
            unit_curves,
            analytic_error_band,
            time_error_pct,
            block_flags: flags,
            units,
        })
    }
}

/// The predictor's printed error band for an analytic curve, and the
/// curve's expected (median, p90) error, % ([`GpuTypeCost::time_error_pct`]).
fn error_bands(
    predictor: &dyn Predictor,
    gpu: &GpuSpec,
    block: &ComputeCurve,
) -> (Option<String>, (f64, f64)) {
    if block.source.rank() == 2 {
        (
            predictor.error_band(gpu),
            predictor
                .time_error_pct(gpu)
                .unwrap_or(UNKNOWN_TIME_ERROR_PCT),
        )
    } else {
        (None, MEASURED_TIME_ERROR_PCT)
    }
}

fn analytic_curve(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: NumFormat,
) -> Result<ComputeCurve, String> {
    let sizes: Vec<u32> = (1..=ANALYTIC_TABLE_MAX_BATCH).collect();
    let mut f = Vec::with_capacity(sizes.len());
    let mut b = Vec::with_capacity(sizes.len());
    for &m in &sizes {
        let (x, y) = pred.block_ms(gpu, model, seq, dtype, m)?;
        f.push(x);
        b.push(y);
    }
    Ok(with_tail_fit(ComputeCurve::from_points(
        sizes,
        f,
        b,
        Source::Analytic { model: pred.name() },
    )))
}

/// `c` (points at micro-batch sizes 1..=n) with its extrapolation
/// replaced by the chord through its last point and the point at half its
/// size, which keeps large micro-batches on the predictor's asymptotic
/// slope: wide enough that one step of the wave model's tile quantization
/// (a wave filled or a split-K changed between two neighbouring sizes)
/// does not set it, and never falling (more samples never take less
/// time).
fn with_tail_fit(mut c: ComputeCurve) -> ComputeCurve {
    let n = c.batch_sizes.len();
    if n < 2 {
        return c;
    }
    let half = n / 2;
    for (vals, fit) in [(&c.fwd_ms, &mut c.fwd_fit), (&c.bwd_ms, &mut c.bwd_fit)] {
        let slope = ((vals[n - 1] - vals[half - 1]) / (n - half) as f64).max(0.0);
        fit.slope = slope;
        fit.intercept = vals[n - 1] - slope * n as f64;
    }
    c
}

/// The curve of implementation `to`, from `measured` (taken with `from`)
/// scaled at every micro-batch size 1..=N by the predictor's ratio of the
/// two implementations on `gpu`; beyond N the chord of its upper half
/// ([`with_tail_fit`]). `None` when the predictor cannot run this GPU and dtype.
#[allow(clippy::too_many_arguments)]
fn kernel_curve(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: NumFormat,
    measured: &ComputeCurve,
    from: BlockImpl,
    to: BlockImpl,
) -> Option<ComputeCurve> {
    let sizes: Vec<u32> = (1..=ANALYTIC_TABLE_MAX_BATCH).collect();
    let mut f = Vec::with_capacity(sizes.len());
    let mut b = Vec::with_capacity(sizes.len());
    for &m in &sizes {
        let p0 = pred
            .block_prediction(gpu, model, seq, dtype, m, from)
            .ok()?;
        let p1 = pred.block_prediction(gpu, model, seq, dtype, m, to).ok()?;
        if !(p0.fwd_ms > 0.0 && p0.bwd_ms > 0.0) {
            return None;
        }
        f.push(measured.fwd_ms(m) * p1.fwd_ms / p0.fwd_ms);
        b.push(measured.bwd_ms(m) * p1.bwd_ms / p0.bwd_ms);
    }
    Some(with_tail_fit(ComputeCurve::from_points(
        sizes,
        f,
        b,
        measured.source.clone(),
    )))
}

/// Micro-batch sizes at which [`TpTable`]s are tabulated (linear in
/// between, the last beyond): the ratios change slowly with the size.
pub const TP_TABLE_SIZES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// One TP configuration's times on a GPU type, relative to the whole
/// block's and units': a rank's block forward and backward over the
/// unsplit block's (the predictor's ratio, applied to the GPU's profiled or
/// predicted curve, so a measured GPU keeps its measured speed), the
/// fractions of the rank's forward each selective recompute reruns
/// (op-level, core attention), and the rank's head and embedding forward
/// and backward over the whole units', at [`TP_TABLE_SIZES`].
#[derive(Debug, Clone, PartialEq)]
pub struct TpTable {
    /// TP degree.
    pub degree: u32,
    /// Sequence parallelism.
    pub sequence_parallel: bool,
    /// How the block is implemented.
    pub imp: BlockImpl,
    /// Expert parallelism (1: none).
    pub experts: u32,
    /// Expert-TP degree as it prices
    /// ([`crate::tensor::TensorParallel::priced_expert_tensor`]).
    pub expert_tensor: u32,
    /// Per size: (block forward ratio, block backward ratio, op-level
    /// selective fraction, core-attention fraction, head forward ratio,
    /// head backward ratio, embedding forward ratio, embedding backward
    /// ratio).
    pub points: Vec<[f64; 8]>,
}

impl TpTable {
    /// The eight values at micro-batch `m` (linear between tabulated sizes).
    pub fn at(&self, m: u32) -> [f64; 8] {
        let m = m.max(1) as f64;
        let sizes = TP_TABLE_SIZES.map(|x| x as f64);
        let last = self.points.len().min(sizes.len()) - 1;
        if m >= sizes[last] {
            return self.points[last];
        }
        let i = sizes.iter().rposition(|&x| x <= m).unwrap_or(0);
        let w = (m - sizes[i]) / (sizes[i + 1] - sizes[i]);
        let (a, b) = (self.points[i], self.points[i + 1]);
        std::array::from_fn(|k| a[k] + w * (b[k] - a[k]))
    }
}

/// The [`TpTable`]s of a GPU type: every TP degree the model allows
/// ([`crate::tensor::degrees`]), with and without SP, times every
/// expert-parallel degree ([`crate::tensor::expert_degrees`]) with
/// expert-TP = TP or 1, both kernels; none where the predictor cannot run
/// the GPU and dtype. Under EP a rank's expert GEMMs are fewer and taller
/// and carry the busiest rank's routing load, so their ratio to the whole
/// block is the predictor's, not `1 / t`.
fn tp_tables(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: NumFormat,
) -> Vec<TpTable> {
    use crate::tensor::{degrees, TensorParallel};
    let mut out = Vec::new();
    for imp in BlockImpl::ALL {
        let whole: Option<Vec<_>> = TP_TABLE_SIZES
            .iter()
            .map(|&m| {
                let b = pred.block_prediction(gpu, model, seq, dtype, m, imp).ok()?;
                let u = pred
                    .unit_prediction(gpu, model, seq, dtype, m, imp, &TensorParallel::NONE)
                    .ok()?;
                Some((b, u))
            })
            .collect();
        let Some(whole) = whole else { continue };
        let mut splits = Vec::new();
        for t in degrees(model) {
            for sp in [false, true].into_iter().filter(|&sp| t > 1 || !sp) {
                for e in crate::tensor::expert_degrees(model) {
                    let etps = if e > 1 && t > 1 { vec![t, 1] } else { vec![t] };
                    for te in etps {
                        let tp = TensorParallel::new(t, sp)
                            .with_experts(e)
                            .with_expert_tensor(te);
                        if tp.communicates() {
                            splits.push(tp);
                        }
                    }
                }
            }
        }
        for tp in splits {
            let t = tp.degree;
            let points: Option<Vec<[f64; 8]>> = TP_TABLE_SIZES
                .iter()
                .zip(&whole)
                .map(|(&m, (w, wu))| {
                    let p = pred
                        .block_prediction_tp(gpu, model, seq, dtype, m, imp, &tp)
                        .ok()?;
                    let u = pred
                        .unit_prediction(gpu, model, seq, dtype, m, imp, &tp)
                        .ok()?;
                    let frac = |x: f64| {
                        if p.fwd_ms > 0.0 {
                            (x / p.fwd_ms).clamp(0.0, 1.0)
                        } else {
                            0.0
                        }
                    };
                    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 1.0 / t as f64 };
                    (w.fwd_ms > 0.0 && w.bwd_ms > 0.0).then(|| {
                        [
                            p.fwd_ms / w.fwd_ms,
                            p.bwd_ms / w.bwd_ms,
                            frac(p.selective_recompute_ms),
                            frac(p.attention_recompute_ms),
                            ratio(u.head_fwd_ms, wu.head_fwd_ms),
                            ratio(u.head_bwd_ms, wu.head_bwd_ms),
                            ratio(u.embed_fwd_ms, wu.embed_fwd_ms),
                            ratio(u.embed_bwd_ms, wu.embed_bwd_ms),
                        ]
                    })
                })
                .collect();
            if let Some(points) = points {
                out.push(TpTable {
                    degree: t,
                    sequence_parallel: tp.sequence_parallel,
                    imp,
                    experts: tp.experts,
                    expert_tensor: tp.priced_expert_tensor(),
                    points,
                });
            }
        }
    }
    out
}

/// The predictor's embedding and head curves of `imp` at micro-batch sizes
/// 1..=N (whole units); `None` where it cannot predict.
fn unit_curves(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: NumFormat,
    imp: BlockImpl,
) -> Option<UnitCurves> {
    let sizes: Vec<u32> = (1..=ANALYTIC_TABLE_MAX_BATCH).collect();
    let none = crate::tensor::TensorParallel::NONE;
    let u: Vec<_> = sizes
        .iter()
        .map(|&m| {
            pred.unit_prediction(gpu, model, seq, dtype, m, imp, &none)
                .ok()
        })
        .collect::<Option<_>>()?;
    let curve = |f: fn(&crate::perfmodel::UnitPrediction) -> (f64, f64)| {
        let (fw, bw): (Vec<f64>, Vec<f64>) = u.iter().map(f).unzip();
        with_tail_fit(ComputeCurve::from_points(
            sizes.clone(),
            fw,
            bw,
            Source::Analytic { model: pred.name() },
        ))
    };
    Some(UnitCurves {
        embed: curve(|p| (p.embed_fwd_ms, p.embed_bwd_ms)),
        head: curve(|p| (p.head_fwd_ms, p.head_bwd_ms)),
    })
}

/// Per micro-batch size 1..=N, the predictor's fraction of the forward a
/// selective recompute reruns: op-level, or core attention (`core`); 0
/// where it cannot predict.
fn selective_fractions(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: NumFormat,
    imp: BlockImpl,
    core: bool,
) -> Vec<f64> {
    (1..=ANALYTIC_TABLE_MAX_BATCH)
        .map(
            |m| match pred.block_prediction(gpu, model, seq, dtype, m, imp) {
                Ok(p) if p.fwd_ms > 0.0 => {
                    let rerun = if core {
                        p.attention_recompute_ms
                    } else {
                        p.selective_recompute_ms
                    };
                    (rerun / p.fwd_ms).clamp(0.0, 1.0)
                }
                _ => 0.0,
            },
        )
        .collect()
}

/// Whether a catalog device is a CPU (arch `cpu`).
pub fn is_cpu(gpu: &GpuSpec) -> bool {
    gpu.arch.is_cpu()
}
