//! Layered gradient accumulation (Cephalo's trainer, as the Cephalo paper,
//! ICS 2025, describes it):
//! layer-major over units, every phase running all of a rank's
//! micro-batches, so each unit is all-gathered once per pass and its
//! gradients reduced once per iteration whatever the micro-batch counts.
//!
//! Order: `Forward(0..=L)`, `Head`, `Backward(L..=0)`; the head and every
//! backward phase reduce, and allocate the unit's gradient buffer at their
//! first backward op. Because a unit's next use comes only after every
//! micro-batch of the current one, an offloading rank (more than one
//! micro-batch) sends block outputs, the head's input and the activation
//! gradients between units through the host ([`RULES`]).

use super::phase::{Phase, PhaseKind, Rules};

/// Copies of the layered schedule: activation gradients and the last
/// block's output go through the host too.
pub const RULES: Rules = Rules {
    offload_gradients: true,
    offload_head_input: true,
};

/// The phase slots of one iteration for a model of `layers` blocks (gather
/// and reshard are set by the sharding, [`super::Description::new`]).
pub fn phases(layers: u32) -> Vec<Phase> {
    let slot = |unit, kind, reduce| Phase {
        unit,
        kind,
        pass: None,
        gather: false,
        reshard: false,
        reduce,
        grad_alloc: reduce,
    };
    let mut v: Vec<Phase> = (0..=layers)
        .map(|u| slot(u, PhaseKind::Forward, false))
        .collect();
    v.push(slot(layers + 1, PhaseKind::Head, true));
    v.extend(
        (0..=layers)
            .rev()
            .map(|u| slot(u, PhaseKind::Backward, true)),
    );
    v
}
