//! What would make an infeasible problem fit: for each knob a user can
//! turn (attention kernel, checkpointing, optimizer offload, the memory
//! policy, more GPUs), the memory one GPU then needs for the smallest
//! plan (full sharding over every GPU, one sample per micro-batch) against
//! what it may use. Each figure is the planners' own per-GPU bound
//! ([`crate::bounds::rank_peak`]) on the strategy with that knob turned.

use crate::bounds::rank_peak;
use crate::cost::{CostModel, MemPolicy};
use crate::data_parallel::Routine;
use crate::strategy::{
    Accumulation, Attention, Checkpointing, Offload, Sharding, Strategy, StrategySpec,
};
use crate::units::GIB;

/// GiB GPU `rank` needs for one one-sample micro-batch under `s`, holding
/// `local_params` parameters' state.
fn need_gib(costs: &CostModel, s: Strategy, rank: usize, local_params: f64) -> Option<f64> {
    let sch = Routine::new(costs, s);
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
    spec.resolve(&costs.strategy_context()).ok()
}

/// The GPU a knob is judged on and what it may use.
struct Judge<'c> {
    costs: &'c CostModel,
    pins: &'c StrategySpec,
    /// The rank with the most usable memory.
    rank: usize,
    usable: f64,
    gpu: String,
}

impl Judge<'_> {
    /// Parameters whose state one GPU holds under `s`.
    fn local(&self, s: &Strategy) -> f64 {
        let total = self.costs.workload.model.total_params() as f64;
        match s.sharding {
            Sharding::NoShard => total,
            Sharding::Hybrid => total / s.shard_group.max(1) as f64,
            _ => total / self.costs.ranks() as f64,
        }
    }

    /// GiB the judged GPU needs under the smallest plan with `tweak`.
    fn need(&self, tweak: impl Fn(&mut StrategySpec)) -> Option<(Strategy, f64)> {
        let s = smallest(self.costs, self.pins, tweak)?;
        need_gib(self.costs, s, self.rank, self.local(&s)).map(|n| (s, n))
    }

    /// `what: N GiB on GPU of U GiB usable (fits | still short)`.
    fn line(&self, what: &str, need: f64) -> String {
        let verdict = if need <= self.usable {
            "fits"
        } else {
            "still short"
        };
        format!(
            "{what}: {need:.2} GiB on {} of {:.2} GiB usable ({verdict})",
            self.gpu, self.usable
        )
    }

    /// How many GPUs of the judged type would hold the state next to a
    /// one-sample micro-batch with flash attention and full checkpointing.
    fn more_gpus(&self) -> Option<String> {
        let (lean, need) = self.need(|x| {
            x.attention = Some(Attention::Flash);
            x.checkpointing = Some(Checkpointing::Full);
        })?;
        if lean.sharding != Sharding::Full {
            return None;
        }
        let g = self.costs.ranks() as f64;
        let total = self.costs.workload.model.total_params() as f64;
        let precision = lean.precision(self.costs.workload.dtype);
        let per = precision.gpu_state_bytes_per_param(lean.offloads_optimizer()) * total / GIB;
        let rest = need - per / g;
        Some(if rest < self.usable {
            let n = (per / (self.usable - rest)).ceil().max(g + 1.0);
            format!(
                "more GPUs: {n:.0} of {} hold the {per:.1} GiB training state fully sharded next to a one-sample micro-batch with flash attention and full checkpointing ({g} here)",
                self.gpu
            )
        } else {
            format!(
                "more GPUs do not help: one sample alone needs {rest:.2} GiB of the {:.2} GiB usable on {}, even with flash attention and full checkpointing",
                self.usable, self.gpu
            )
        })
    }
}

/// Lines naming the knobs that would make the workload of `costs` fit
/// (or how far each leaves it), for an infeasible answer; empty when the
/// smallest data-parallel plan fits as pinned (the reason lies elsewhere).
pub fn what_would_fit(costs: &CostModel, pins: &StrategySpec) -> Vec<String> {
    // The GPU with the most usable memory (ties: the first).
    let Some(rank) = (0..costs.ranks()).max_by(|&a, &b| {
        costs
            .usable_gib(a)
            .total_cmp(&costs.usable_gib(b))
            .then(b.cmp(&a))
    }) else {
        return Vec::new();
    };
    let j = Judge {
        costs,
        pins,
        rank,
        usable: costs.usable_gib(rank),
        gpu: costs.gpu(rank).name.clone(),
    };
    let Some((base, now)) = j.need(|_| {}) else {
        return Vec::new();
    };
    // The smallest data-parallel plan fits: the reason lies elsewhere (a
    // pipeline's stage, too many samples for the micro-batch limits).
    if now <= j.usable {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut knob = |what: &str, tweak: &dyn Fn(&mut StrategySpec)| {
        if let Some((_, need)) = j.need(tweak).filter(|x| x.1 < now - 1e-6) {
            out.push(j.line(what, need));
        }
    };
    if base.attention == Attention::Eager {
        knob(
            "--attention flash (a fused kernel: no s x s scores)",
            &|x| x.attention = Some(Attention::Flash),
        );
    }
    if base.checkpointing != Checkpointing::Full {
        knob("--checkpointing full", &|x| {
            x.checkpointing = Some(Checkpointing::Full)
        });
    }
    if base.offload != Offload::Optimizer {
        knob(
            "--offload optimizer (ZeRO-Offload: Adam state on the host)",
            &|x| x.offload = Some(Offload::Optimizer),
        );
    }
    if let Some(f) = costs.options.mem_policy.fraction() {
        let physical =
            MemPolicy::Physical.usable_gib(costs.capacity_gib(rank), costs.overhead_gib());
        out.push(format!(
            "the physical memory limit instead of --mem-fraction {f}: {physical:.2} GiB usable on {} (needs {now:.2})",
            j.gpu
        ));
    }
    // Every knob on the GPU at once, when more than one applies.
    if out.len() > 1 {
        let all = j.need(|x| {
            x.attention = Some(Attention::Flash);
            x.checkpointing = Some(Checkpointing::Full);
            x.offload = Some(Offload::Optimizer);
        });
        if let Some((_, need)) = all {
            out.push(j.line("all of these together", need));
        }
    }
    out.extend(j.more_gpus());
    if !out.is_empty() {
        out.insert(
            0,
            format!(
                "even the smallest data-parallel plan ({}, one sample per micro-batch) needs {now:.2} GiB on {} of {:.2} GiB usable; what would change that:",
                base.label(),
                j.gpu,
                j.usable
            ),
        );
    }
    out
}
