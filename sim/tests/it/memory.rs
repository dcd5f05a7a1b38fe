//! Activation memory in every profile format: the reference profiles'
//! curves (`model_memory.json`), a measured curve as `cephalo profile`
//! writes it (any shape, drawn at random), and the analytic predictor.
//! Whatever the curve, a non-empty micro-batch holds activations (above
//! zero) and a larger one holds at least as much.

use crate::common::{gpu_list, reference_profiles, workload};
use proptest::prelude::*;
use sim::cost::{CostModel, CostOptions};
use sim::perfmodel::{builtin, Roofline};
use sim::precision::NumFormat;
use sim::profile::{MemoryProfile, ProfileSet, Source};
use sim::strategy::Attention;

/// Largest micro-batch checked (past every measured curve's end).
const MAX_M: u32 = 64;

/// Fails unless the activation peak of `costs` at micro-batch m (every
/// kernel, every saved-tensor kind) is above zero and non-decreasing for
/// m = 1..=MAX_M; `what` names the case.
fn grows_from_above_zero(costs: &CostModel, what: &str) {
    let a = &costs.activations;
    let layers = costs.workload.model.layers;
    for att in [Attention::Eager, Attention::Flash] {
        let mut prev = [0.0_f64; 3];
        for m in 1..=MAX_M {
            let b = a.micro(m, att, false);
            let now = [b.reference_peak(layers), b.checkpoint, b.saved_none];
            for (k, (&n, &p)) in now.iter().zip(&prev).enumerate() {
                assert!(n > 0.0, "{what}: {att:?} m={m}: activation size {k} is {n}");
                assert!(
                    n >= p * (1.0 - 1e-12),
                    "{what}: {att:?} m={m}: activation size {k} shrinks {p} -> {n}"
                );
            }
            prev = now;
        }
    }
}

/// The cost model of `model` in `dtype` on two L4s whose memory curve is
/// `profile` alone (at the profile's sequence length, so it anchors),
/// compute from the uncalibrated roofline.
fn with_profile(profile: &MemoryProfile) -> CostModel {
    let mut w = workload(gpu_list("l4,l4"), &profile.model, profile.dtype, 8);
    w.seq_len = w
        .model
        .tokens_per_sample(profile.seq_len.unwrap_or(w.model.seq_len));
    let mut set = ProfileSet::new();
    set.memory.push(profile.clone());
    CostModel::build(w, &set, &Roofline::default(), CostOptions::default()).unwrap()
}

#[test]
fn every_reference_memory_curve_gives_growing_activations() {
    let Some(profiles) = reference_profiles() else {
        return;
    };
    assert!(
        profiles.memory.len() >= 20,
        "{} curves",
        profiles.memory.len()
    );
    let mut anchored = 0;
    for p in &profiles.memory {
        let c = with_profile(p);
        anchored += usize::from(c.activations.anchored());
        let what = format!("{} {} {} ({})", p.cluster, p.model_key, p.dtype, p.source);
        grows_from_above_zero(&c, &what);
    }
    // The curves are anchored ones, not the analytic fallback.
    assert!(anchored * 2 > profiles.memory.len(), "{anchored} anchored");
}

#[test]
fn the_analytic_predictor_gives_growing_activations() {
    for model in ["gpt-2.7b", "llama-2-7b", "bert-large"] {
        let w = workload(gpu_list("a100-80gb,h100"), model, NumFormat::Bf16, 8);
        let c =
            CostModel::build(w, &ProfileSet::new(), &*builtin(), CostOptions::default()).unwrap();
        grows_from_above_zero(&c, model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A measured curve of any shape: rising, flat, dipping, or below the
    /// unit buffers at small sizes (as the reference GPT-2.7B fp16 curve is
    /// at micro-batch 1).
    #[test]
    fn any_measured_curve_gives_growing_activations(
        start_gib in 0.0f64..4.0,
        steps_gib in prop::collection::vec(-0.3f64..1.0, 0..16),
    ) {
        let mut act_gib = vec![start_gib];
        for s in &steps_gib {
            act_gib.push((act_gib[act_gib.len() - 1] + s).max(0.0));
        }
        let p = MemoryProfile {
            cluster: "measured".into(),
            model: "gpt-2.7b".into(),
            model_key: "gpt-2.7b".into(),
            dtype: NumFormat::Fp16,
            parameters: 2_700_000_000,
            seq_len: None,
            act_gib,
            source: Source::Measured { origin: "proptest".into() },
        };
        grows_from_above_zero(&with_profile(&p), "measured");
    }
}
