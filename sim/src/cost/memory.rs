//! Activation memory of a workload: the non-state memory curve
//! ([`ActMemory`]: a memory profile, or the predictor's) and the analytic
//! per-tensor sizes anchored to it ([`ActivationModel`]; see the `cost`
//! module docs). Bytes, GiB where named.

use super::gpu_type::{GpuTypeCost, ANALYTIC_TABLE_MAX_BATCH};
use super::workload::{CostOptions, Workload};
use crate::activation::BlockActivations;
use crate::error::SpecError;
use crate::model::ModelSpec;
use crate::perfmodel::Predictor;
use crate::profile::{MemoryProfile, ProfileSet, Source};
use crate::strategy::Attention;
use crate::units::GIB;
use std::sync::Arc;

/// Bytes per parameter of the unit buffers Cephalo's trainer held when the
/// reference non-state memory was measured: fp32 gathered parameters and
/// fp32 gradient buffers (4 B each).
pub const REFERENCE_BUFFER_BYTES_PER_PARAM: f64 = 4.0;

/// Activation memory of the workload: the analytic sizes anchored to the
/// measured non-state memory (see the module docs). Bytes.
#[derive(Debug, Clone)]
pub struct ActivationModel {
    /// Analytic sizes per attention kernel and fusion
    /// (`attention.index() + 2 * fused`), bytes per sample.
    pub per_sample: [BlockActivations; 4],
    /// The part of each size replicated on every TP rank without sequence
    /// parallelism ([`crate::tensor::replicated_activations`]), per fusion
    /// (`fused` as an index), bytes per sample.
    pub replicated: [BlockActivations; 2],
    /// Of each kept size, the bytes per sample every TP rank keeps whole,
    /// with or without sequence parallelism: the routing of experts in
    /// every block ([`crate::model::ModelSpec::routing_bytes_per_token`]: the dispatcher
    /// gathers the tokens over TP, and every rank runs its slice of every
    /// expert on all `k` copies). Zero for a dense model.
    pub whole_per_sample: f64,
    /// The kernel the non-state memory curve was measured with.
    pub measured_attention: Attention,
    /// Unit buffers inside the measured curve (`B_ref`), bytes.
    pub buffers_ref_bytes: f64,
    /// Constant part of the measured curve beyond the buffers (workspaces,
    /// allocator slack), bytes; part of every GPU's base memory.
    pub fixed_bytes: f64,
    /// `s(m)` for m = 1..=N (the last value beyond): measured activation
    /// peak over the analytic one.
    pub scale: Vec<f64>,
}

impl ActivationModel {
    /// The analytic sizes unanchored (`s = 1`, `F0 = 0`).
    fn analytic(
        per_sample: [BlockActivations; 4],
        measured_attention: Attention,
        buffers_ref_bytes: f64,
    ) -> ActivationModel {
        ActivationModel {
            per_sample,
            // Set by `activation_memory` once the model is known.
            replicated: [per_sample[0]; 2],
            whole_per_sample: 0.0,
            measured_attention,
            buffers_ref_bytes,
            fixed_bytes: 0.0,
            scale: vec![1.0; ANALYTIC_TABLE_MAX_BATCH as usize],
        }
    }

    /// Whether the sizes are anchored to a measurement.
    pub fn anchored(&self) -> bool {
        self.fixed_bytes != 0.0 || self.scale.iter().any(|&s| s != 1.0)
    }

    /// Anchors the analytic sizes to `act_gib(m)` measured at m = 1..=`measured`.
    fn anchor(
        act: &ActMemory,
        per_sample: [BlockActivations; 4],
        measured_attention: Attention,
        layers: u32,
        buffers_ref_bytes: f64,
        measured: usize,
    ) -> ActivationModel {
        let a_ref = per_sample[measured_attention.index()].reference_peak(layers);
        let n = measured.clamp(1, ANALYTIC_TABLE_MAX_BATCH as usize);
        let y: Vec<f64> = (1..=n as u32)
            .map(|m| act.gib(m) * GIB - buffers_ref_bytes)
            .collect();
        // Least squares y = F0 + s x with x = m * a_ref; F0 >= 0, no more
        // than the smallest measurement.
        let fixed = if n >= 2 && a_ref > 0.0 {
            let xs: Vec<f64> = (1..=n).map(|m| m as f64 * a_ref).collect();
            let (mx, my) = (
                xs.iter().sum::<f64>() / n as f64,
                y.iter().sum::<f64>() / n as f64,
            );
            let var: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
            let cov: f64 = xs.iter().zip(&y).map(|(x, v)| (x - mx) * (v - my)).sum();
            let slope = if var > 0.0 { cov / var } else { 0.0 };
            (my - slope * mx).clamp(
                0.0,
                y.iter().copied().fold(f64::INFINITY, f64::min).max(0.0),
            )
        } else {
            0.0
        };
        let point: Vec<Option<f64>> = (1..=ANALYTIC_TABLE_MAX_BATCH)
            .map(|m| {
                let ym = act.gib(m) * GIB - buffers_ref_bytes - fixed;
                let x = m as f64 * a_ref;
                (x > 0.0 && ym.is_finite() && ym > 0.0).then(|| ym / x)
            })
            .collect();
        ActivationModel {
            per_sample,
            // Set by `activation_memory` once the model is known.
            replicated: [per_sample[0]; 2],
            whole_per_sample: 0.0,
            measured_attention,
            buffers_ref_bytes,
            fixed_bytes: fixed,
            scale: monotone_scale(&point),
        }
    }

    /// `s(m)`: the factor on every analytic activation size at micro-batch `m`.
    pub fn scale_at(&self, m: u32) -> f64 {
        if m == 0 || self.scale.is_empty() {
            return 0.0;
        }
        let i = (m as usize - 1).min(self.scale.len() - 1);
        self.scale[i]
    }

    /// Activation sizes of a micro-batch of `m` samples with `attention`,
    /// its memory-bound ops `fused` or not, bytes (analytic per-sample
    /// sizes times `m` times `s(m)`).
    pub fn micro(&self, m: u32, attention: Attention, fused: bool) -> BlockActivations {
        scaled(
            &self.per_sample[attention.index() + 2 * usize::from(fused)],
            m as f64 * self.scale_at(m),
        )
    }

    /// [`ActivationModel::micro`] on one rank of the TP group `tp`
    /// (Korthikanti's split, [`crate::tensor::TensorParallel::activations`]),
    /// anchored by the same `s(m)`.
    pub fn micro_tp(
        &self,
        m: u32,
        attention: Attention,
        fused: bool,
        tp: &crate::tensor::TensorParallel,
    ) -> BlockActivations {
        let k = m as f64 * self.scale_at(m);
        let full = self.micro(m, attention, fused);
        let mut a = tp.activations(&full, &scaled(&self.replicated[usize::from(fused)], k));
        if tp.is_on() {
            // What the split divided by `t`, kept whole on each expert-TP
            // group (whole experts: each rank its own sequence shard's).
            let t = tp.degree as f64;
            let kept = if tp.expert_tensor >= tp.degree {
                1.0 - 1.0 / t
            } else {
                (tp.expert_tensor.max(1) as f64 - 1.0) / t
            };
            let whole = self.whole_per_sample * k * kept;
            a.saved_none += whole;
            a.saved_selective += whole;
            a.saved_attention += whole;
        }
        a
    }
}

/// Every size of `b` times `k`.
fn scaled(b: &BlockActivations, k: f64) -> BlockActivations {
    BlockActivations {
        checkpoint: b.checkpoint * k,
        saved_none: b.saved_none * k,
        saved_selective: b.saved_selective * k,
        saved_attention: b.saved_attention * k,
        grad_work: b.grad_work * k,
        nograd_work: b.nograd_work * k,
        head_work: b.head_work * k,
    }
}

/// `s(m)` for m = 1, 2, ... from the per-size anchors (`None` where the
/// measurement does not rise above the unit buffers and the fixed part, so
/// it cannot say how large the activations are), such that the activation
/// peak `m s(m) A_ref` is above zero for every non-empty micro-batch and
/// never shrinks as the micro-batch grows:
///
/// * below the first size the measurement resolves, the activations are
///   taken as proportional to the micro-batch (every activation tensor is),
///   so those sizes get that size's scale;
/// * a later size that is unresolved, or whose peak would fall below the
///   previous size's, keeps the previous size's peak (an allocator's
///   rounding can make a measured curve dip; the tensors do not shrink);
/// * a curve that resolves no size leaves the analytic sizes as they are
///   (`s = 1`).
fn monotone_scale(point: &[Option<f64>]) -> Vec<f64> {
    let Some(first) = point.iter().flatten().next().copied() else {
        return vec![1.0; point.len()];
    };
    let mut scale = Vec::with_capacity(point.len());
    let mut peak = 0.0_f64; // m s(m) of the previous size
    let mut resolved = false; // a size at or before this one is resolved
    for (i, p) in point.iter().enumerate() {
        let m = (i + 1) as f64;
        resolved |= p.is_some();
        let s = match *p {
            Some(s) if m * s >= peak => s,
            _ if !resolved => first,
            _ => peak / m,
        };
        peak = m * s;
        scale.push(s);
    }
    scale
}

/// Non-state memory against micro-batch size.
#[derive(Debug, Clone)]
pub enum ActMemory {
    /// From a memory profile (imported or measured).
    Profile(MemoryProfile),
    /// Tabulated from the predictor for m = 1..=len, linear beyond.
    Analytic {
        /// GiB at micro-batch size i+1.
        act_gib: Vec<f64>,
        /// Predictor description.
        model: String,
    },
}

impl ActMemory {
    /// Non-state GiB at micro-batch size `m` (0 for `m == 0`).
    pub fn gib(&self, m: u32) -> f64 {
        if m == 0 {
            return 0.0;
        }
        match self {
            ActMemory::Profile(p) => p.act_gib(m),
            ActMemory::Analytic { act_gib, .. } => {
                let n = act_gib.len();
                let i = m as usize - 1;
                if i < n {
                    act_gib[i]
                } else {
                    let slope = act_gib[n - 1] - act_gib[n - 2];
                    act_gib[n - 1] + slope * (m as f64 - n as f64)
                }
            }
        }
    }

    /// Where the numbers came from.
    pub fn source(&self) -> Source {
        match self {
            ActMemory::Profile(p) => p.source.clone(),
            ActMemory::Analytic { model, .. } => Source::Analytic {
                model: model.clone(),
            },
        }
    }
}

/// Bytes of the unit buffers Cephalo's trainer held at its memory peak in
/// the reference configuration (prefetch on, previous reduce-scatter done):
/// the largest over its phases of this unit's fp32 parameters, the next
/// phase's prefetched parameters and this unit's fp32 gradients. For block
/// phases that is `3 x P_block x 4 B`; the head phase (head parameters and
/// gradients plus the prefetched last block) is larger when the head is
/// untied.
pub fn reference_buffers_bytes(model: &ModelSpec) -> f64 {
    let l = model.layers as usize;
    let mut unit = Vec::with_capacity(l + 2);
    unit.push(model.embedding_params() as f64);
    unit.extend(std::iter::repeat_n(model.params_per_block() as f64, l));
    unit.push(model.head_params() as f64);
    // Phases: Forward(0..=L), Head, Backward(L..=0): (unit, reduces).
    let mut phases: Vec<(usize, bool)> = (0..=l).map(|u| (u, false)).collect();
    phases.push((l + 1, true));
    phases.extend((0..=l).rev().map(|u| (u, true)));
    let b = REFERENCE_BUFFER_BYTES_PER_PARAM;
    (0..phases.len())
        .map(|p| {
            let (u, reduces) = phases[p];
            let next = phases.get(p + 1).map_or(0.0, |q| unit[q.0]);
            b * (unit[u] + next + if reduces { unit[u] } else { 0.0 })
        })
        .fold(0.0, f64::max)
}

/// The workload's non-state memory curve (a memory profile, else the
/// predictor's) and the activation sizes anchored to it (see the module
/// docs); warnings for a memory cluster without the entry or a profile
/// measured at another length go to `warnings`.
pub(crate) fn activation_memory(
    workload: &Workload,
    types: &[Arc<GpuTypeCost>],
    profiles: &ProfileSet,
    predictor: &dyn Predictor,
    options: &CostOptions,
    warnings: &mut Vec<String>,
) -> Result<(ActMemory, ActivationModel), SpecError> {
    let (model, seq, dtype) = (&workload.model, workload.seq_len, workload.dtype);
    let act = match profiles.memory(options.memory_cluster.as_deref(), &model.name, dtype) {
        Some(p) => ActMemory::Profile(p.clone()),
        None => {
            if let Some(c) = &options.memory_cluster {
                let have = profiles.memory_clusters();
                if !have.contains(c) {
                    return Err(SpecError::invalid(
                        crate::error::WORKLOAD,
                        "memory_cluster",
                        format!(
                            "no memory cluster `{c}` in the profiles (have: {})",
                            have.join(", ")
                        ),
                    ));
                }
                warnings.push(format!(
                    "memory cluster `{c}` has no {dtype} entry for {}; non-state memory is predicted analytically",
                    model.name
                ));
            }
            ActMemory::Analytic {
                act_gib: (1..=ANALYTIC_TABLE_MAX_BATCH)
                    .map(|m| predictor.act_mem_gib(model, seq, dtype, m))
                    .collect(),
                model: match predictor.memory_error_band() {
                    Some(b) => format!("{}, {b}", predictor.name()),
                    None => predictor.name(),
                },
            }
        }
    };
    let measured_len = match &act {
        ActMemory::Profile(p) => p.act_gib.len(),
        ActMemory::Analytic { act_gib, .. } => act_gib.len(),
    };
    let measured_attention = if types
        .iter()
        .all(|t| t.measured_attention == Attention::Flash)
    {
        Attention::Flash
    } else {
        Attention::Eager
    };
    let per_sample = [
        (Attention::Eager, false),
        (Attention::Flash, false),
        (Attention::Eager, true),
        (Attention::Flash, true),
    ]
    .map(|(a, fused)| BlockActivations::new(model, seq, dtype, a, fused));
    let mut activations = match &act {
        ActMemory::Profile(p)
            if model.tokens_per_sample(p.seq_len.unwrap_or(model.seq_len)) == seq =>
        {
            ActivationModel::anchor(
                &act,
                per_sample,
                measured_attention,
                model.layers,
                reference_buffers_bytes(model),
                measured_len,
            )
        }
        other => {
            if let ActMemory::Profile(p) = other {
                warnings.push(format!(
                    "the memory profile of {} ({}) was measured at {} tokens per sample, not {seq}: activation memory comes from the analytic per-tensor model",
                    model.name,
                    p.source,
                    model.tokens_per_sample(p.seq_len.unwrap_or(model.seq_len))
                ));
            }
            ActivationModel::analytic(
                per_sample,
                measured_attention,
                reference_buffers_bytes(model),
            )
        }
    };
    activations.replicated =
        [false, true].map(|fused| crate::tensor::replicated_activations(model, seq, dtype, fused));
    activations.whole_per_sample =
        model.routing_bytes_per_token(dtype.bytes()) * model.tokens_per_sample(seq) as f64;
    Ok((act, activations))
}

#[cfg(test)]
mod tests {
    use super::monotone_scale;

    /// `m s(m)` for m = 1, 2, ...
    fn peaks(s: &[f64]) -> Vec<f64> {
        s.iter()
            .enumerate()
            .map(|(i, s)| (i + 1) as f64 * s)
            .collect()
    }

    #[test]
    fn unresolved_sizes_are_proportional_and_dips_are_held() {
        // Sizes 1 and 2 below the buffers: proportional to m from size 3.
        let s = monotone_scale(&[None, None, Some(1.0), Some(1.5)]);
        assert_eq!(peaks(&s), vec![1.0, 2.0, 3.0, 6.0]);
        // A dip (size 3's peak below size 2's) and a later unresolved size
        // keep the previous peak.
        let s = monotone_scale(&[Some(2.0), Some(2.0), Some(1.0), None, Some(2.0)]);
        assert_eq!(peaks(&s), vec![2.0, 4.0, 4.0, 4.0, 10.0]);
        // Nothing resolved: the analytic sizes (s = 1).
        assert_eq!(monotone_scale(&[None, None]), vec![1.0, 1.0]);
    }
}
