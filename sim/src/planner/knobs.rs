//! What would make an infeasible problem fit: for each knob a user can
//! turn (attention kernel, checkpointing, optimizer offload, the memory
//! policy, more GPUs), the memory one GPU then needs for the smallest
//! plan (full sharding over every GPU, one sample per micro-batch) against
//! what it may use. Each figure is the planners' own per-GPU bound
//! ([`crate::bounds::rank_peak`]) on the strategy with that knob turned.

use crate::bounds::rank_peak;
use crate::cost::{CostModel, MemPolicy};
use crate::schedule::Schedule;
use crate::strategy::{
    Accumulation, Attention, Checkpointing, Offload, Sharding, Strategy, StrategyContext,
    StrategySpec,
};
use crate::units::GIB;

/// GiB GPU `rank` needs for one one-sample micro-batch under `s`, holding
/// `local_params` parameters' state.
fn need_gib(costs: &CostModel, s: Strategy, rank: usize, local_params: f64) -> Option<f64> {
    let sch = Schedule::new(costs, s);
    rank_peak(&sch, rank, &[1], 1, local_params)
        .ok()
        .map(|p| p.device_bytes as f64 / GIB)
}

/// The smallest plan's strategy: the user's pins, full sharding over every
/// GPU where sharding is free, synchronous accumulation, and `tweak`.
fn smallest(
    costs: &CostModel,
    pins: &StrategySpec,
    tweak: impl Fn(&mut StrategySpec),
) -> Option<Strategy> {
    let mut spec = StrategySpec {
        sharding: pins.sharding.or(Some(Sharding::Full)),
        accumulation: pins.accumulation.or(Some(Accumulation::Sync)),
        checkpointing: pins.checkpointing.or(Some(Checkpointing::Full)),
        ..*pins
    };
    tweak(&mut spec);
    spec.resolve(&StrategyContext {
        cluster: &costs.workload.cluster,
        dtype: costs.workload.dtype,
        profile_attention: costs.profile_attention(),
    })
    .ok()
}

/// Lines naming the knobs that would make the workload of `costs` fit
/// (or how far each leaves it), for an infeasible answer; empty when the
/// smallest data-parallel plan fits as pinned (the reason lies elsewhere).
pub fn what_would_fit(costs: &CostModel, pins: &StrategySpec) -> Vec<String> {
    let g = costs.ranks();
    let total = costs.workload.model.total_params() as f64;
    // The GPU with the most usable memory (ties: the first).
    let Some(r) = (0..g).max_by(|&a, &b| {
        costs
            .usable_gib(a)
            .total_cmp(&costs.usable_gib(b))
            .then(b.cmp(&a))
    }) else {
        return Vec::new();
    };
    let usable = costs.usable_gib(r);
    let gpu = costs.gpu(r).name.clone();
    let local = |s: &Strategy| match s.sharding {
        Sharding::NoShard => total,
        Sharding::Hybrid => total / s.shard_group.max(1) as f64,
        _ => total / g as f64,
    };
    let Some(base) = smallest(costs, pins, |_| {}) else {
        return Vec::new();
    };
    let Some(now) = need_gib(costs, base, r, local(&base)) else {
        return Vec::new();
    };
    // The smallest data-parallel plan fits: the reason lies elsewhere (a
    // pipeline's stage, too many samples for the micro-batch limits).
    if now <= usable {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut knob = |what: String, s: Option<Strategy>| {
        if let Some(s) = s {
            if let Some(need) = need_gib(costs, s, r, local(&s)) {
                if need < now - 1e-6 {
                    let verdict = if need <= usable {
                        "fits"
                    } else {
                        "still short"
                    };
                    out.push(format!(
                        "{what}: {need:.2} GiB on {gpu} of {usable:.2} GiB usable ({verdict})"
                    ));
                }
            }
        }
    };
    if base.attention == Attention::Eager && pins.attention != Some(Attention::Flash) {
        knob(
            "--attention flash (a fused kernel: no s x s scores)".into(),
            smallest(costs, pins, |x| x.attention = Some(Attention::Flash)),
        );
    }
    if base.checkpointing != Checkpointing::Full {
        knob(
            "--checkpointing full".into(),
            smallest(costs, pins, |x| x.checkpointing = Some(Checkpointing::Full)),
        );
    }
    if base.offload != Offload::Optimizer {
        knob(
            "--offload optimizer (ZeRO-Offload: Adam state on the host)".into(),
            smallest(costs, pins, |x| x.offload = Some(Offload::Optimizer)),
        );
    }
    if let Some(f) = costs.options.mem_policy.fraction() {
        let physical = MemPolicy::Physical.usable_gib(costs.capacity_gib(r), costs.overhead_gib());
        out.push(format!(
            "the physical memory limit instead of --mem-fraction {f}: {physical:.2} GiB usable on {gpu} (needs {now:.2})"
        ));
    }
    // Every knob on the GPU at once (flash, full checkpointing, the
    // optimizer on the host), when more than one applies.
    let all = smallest(costs, pins, |x| {
        x.attention = Some(Attention::Flash);
        x.checkpointing = Some(Checkpointing::Full);
        x.offload = Some(Offload::Optimizer);
    });
    if out.len() > 1 {
        if let Some(need) = all.and_then(|s| need_gib(costs, s, r, local(&s))) {
            let verdict = if need <= usable {
                "fits"
            } else {
                "still short"
            };
            out.push(format!(
                "all of these together: {need:.2} GiB on {gpu} of {usable:.2} GiB usable ({verdict})"
            ));
        }
    }
    // More GPUs of the largest type: the state spread over more of them,
    // with flash attention and full checkpointing.
    let lean = smallest(costs, pins, |x| {
        x.attention = Some(Attention::Flash);
        x.checkpointing = Some(Checkpointing::Full);
    });
    if let Some(lean) = lean.filter(|s| s.sharding == Sharding::Full) {
        if let Some(need) = need_gib(costs, lean, r, local(&lean)) {
            let per = lean.gpu_state_bytes_per_param() * total / GIB;
            let rest = need - per / g as f64;
            if rest < usable {
                let n = (per / (usable - rest)).ceil().max(g as f64 + 1.0);
                out.push(format!(
                    "more GPUs: {n:.0} of {gpu} hold the {per:.1} GiB training state fully sharded next to a one-sample micro-batch with flash attention and full checkpointing ({g} here)"
                ));
            } else {
                out.push(format!(
                    "more GPUs do not help: one sample alone needs {rest:.2} GiB of the {usable:.2} GiB usable on {gpu}, even with flash attention and full checkpointing"
                ));
            }
        }
    }
    if !out.is_empty() {
        out.insert(
            0,
            format!(
                "even the smallest data-parallel plan ({}, one sample per micro-batch) needs {now:.2} GiB on {gpu} of {usable:.2} GiB usable; what would change that:",
                base.label()
            ),
        );
    }
    out
}
