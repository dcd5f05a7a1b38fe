//! What a `cephalo validate` run is, apart from running it: the plan it
//! trains when none is given (the uneven demonstration plan), how its
//! prediction simulates (the trainer's strategy context and blocking
//! collectives), which collective sizes it profiles, and the thresholds
//! that decide whether a measurement was disturbed (other processes'
//! load, iterations spread) and must be run again. The CLI keeps its
//! flags, the calls and the printing.
//!
//! Units: ms, % of all cores, fractions.

use crate::config::BlockConfig;
use crate::report::median;
use crate::sim_glue::{self, Comparison};
use serde::Serialize;
use sim::cluster::Cluster;
use sim::cost::CostModel;
use sim::iteration::SimOptions;
use sim::plan::rank::RankPlan;
use sim::plan::Plan;
use sim::profile::Source;
use sim::strategy::{Attention, Stack, Strategy, StrategyContext, StrategySpec};

/// Background load above which a measurement counts as disturbed, % of
/// all cores.
pub const BUSY_PCT: f64 = 5.0;

/// Spread of the measured iterations ((max - min) / median) above which
/// the machine's speed counts as changed while it measured. Iterations of
/// one plan repeat the same work, so on a quiet machine they agree within
/// a few percent (2% on the idle 2-core CPU host of exec/README.md); 15%
/// means something outside the run took its share.
pub const SPREAD_LIMIT: f64 = 0.15;

/// How the default plan ([`demo_plan`]) is described where a run says
/// where its plan came from.
pub const DEMO_PLAN_ORIGIN: &str = "default uneven demo plan: batches proportional to 3, 5, 7, ..., micro-batch counts 1, 2, 3, ..., state fractions proportional to 2, 3, 4, ...";

/// Why the trainer refuses the Megatron stack and `torch.compile`.
pub const TRAINER_STACK_ONLY: &str = "--stack / --compile: validate's trainer runs the PyTorch stack op by op (tch blocks); Megatron-Core's fused kernels and torch.compile are simulated only (use simulate)";

/// Fractions proportional to 2, 3, 4, ... (an uneven split of `n` pieces).
pub fn ramp(n: usize) -> Vec<f64> {
    let total: f64 = (0..n).map(|i| (i + 2) as f64).sum();
    (0..n).map(|i| (i + 2) as f64 / total).collect()
}

/// The default uneven plan of `ranks` ranks for `global_batch` samples
/// under `strategy`: batches proportional to 3, 5, 7, ... (largest
/// remainders, at least 1 each), micro-batch counts 1, 2, 3, ... (at most
/// the batch; 2 for a single rank, so it still accumulates), state
/// fractions proportional to 2, 3, 4, ... inside each shard group (the
/// same at each position of every group). Unequal batches, gradient
/// accumulation and uneven shards are all exercised even on identical
/// devices where a planner would split evenly. `None` when `global_batch
/// < ranks`.
pub fn demo_plan(ranks: usize, global_batch: u32, strategy: Strategy) -> Option<Plan> {
    if ranks == 0 || (global_batch as usize) < ranks {
        return None;
    }
    let w: Vec<f64> = (0..ranks).map(|i| (3 + 2 * i) as f64).collect();
    let total: f64 = w.iter().sum();
    // One sample each, the rest by largest remainder of the weights.
    let rest = global_batch as usize - ranks;
    let exact: Vec<f64> = w.iter().map(|x| x / total * rest as f64).collect();
    let mut b: Vec<u32> = exact.iter().map(|e| e.floor() as u32 + 1).collect();
    let mut left = global_batch - b.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..ranks).collect();
    order.sort_by(|&x, &y| {
        let (rx, ry) = (exact[x] - exact[x].floor(), exact[y] - exact[y].floor());
        ry.total_cmp(&rx).then(y.cmp(&x))
    });
    let mut k = 0;
    while left > 0 {
        b[order[k % ranks]] += 1;
        left -= 1;
        k += 1;
    }
    let g = strategy.groups(ranks).group_size.max(1);
    let fr = ramp(g);
    // One rank alone still accumulates gradients (2 micro-batches).
    let first = if ranks == 1 { 2 } else { 1 };
    let gpus = (0..ranks)
        .map(|i| RankPlan::new(b[i], (i as u32 + first).min(b[i]), fr[i % g]))
        .collect();
    Some(Plan {
        planner: "demo-uneven".into(),
        pipeline: None,
        strategy,
        gpus,
    })
}

/// The strategy context of a run: the trainer's blocks use eager
/// attention.
pub fn trainer_context(cluster: &Cluster, dtype: sim::precision::NumFormat) -> StrategyContext<'_> {
    StrategyContext {
        cluster,
        dtype,
        profile_attention: Attention::Eager,
    }
}

/// The strategy pins as the trainer runs them: its tch blocks are the
/// PyTorch stack op by op, so every plan is predicted on the `pytorch`
/// stack without `torch.compile`; `None` when the pins ask for the
/// Megatron stack or compilation ([`TRAINER_STACK_ONLY`] says why).
pub fn on_trainer_stack(mut spec: StrategySpec) -> Option<StrategySpec> {
    if spec.stack.is_some_and(|s| s != Stack::PyTorch) || spec.compile == Some(true) {
        return None;
    }
    spec.stack = Some(Stack::PyTorch);
    spec.compile = Some(false);
    Some(spec)
}

/// How the prediction simulates: without prefetch and with blocking
/// collectives, as the trainer issues every collective synchronously (a
/// barrier, then the collective, then compute).
pub fn sim_options() -> SimOptions {
    SimOptions {
        trace: false,
        prefetch: false,
        blocking_collectives: true,
        ..SimOptions::default()
    }
}

/// The largest micro-batch size of `plan` (samples).
pub fn max_microbatch(plan: &Plan) -> u32 {
    plan.gpus
        .iter()
        .map(|g| g.microbatch_size)
        .max()
        .unwrap_or(1)
}

/// The element counts the collectives are profiled at: every unit's
/// parameters (data-parallel reductions), and for a pipelined / 3D plan
/// each TP degree's share of them (a stage's reductions) and the
/// activation of every micro-batch size up to `max_m` (TP all-reduces;
/// with SP its all-gathers and reduce-scatters).
pub fn collective_sizes(cfg: &BlockConfig, plan: Option<&Plan>, max_m: u32) -> Vec<usize> {
    let units = sim_glue::trainer_unit_params(cfg);
    let mut set: std::collections::BTreeSet<usize> = units.iter().map(|&p| p as usize).collect();
    if let Some(pipe) = plan.and_then(|p| p.pipeline.as_ref()) {
        for st in &pipe.stages {
            let t = st.tp.max(1) as usize;
            set.extend(units.iter().map(|&p| p as usize / t));
            if t > 1 {
                set.extend((1..=max_m as usize).map(|m| m * cfg.seq_len * cfg.hidden));
            }
        }
    }
    set.into_iter().collect()
}

/// What the prediction's cost model says about its own inputs: block
/// times without a profile of `gpu` / `model` / seq `seq_len` / `dtype`
/// are analytic, unit times without a measurement estimated, and the cost
/// model's warnings.
pub fn cost_notes(
    costs: &CostModel,
    gpu: &str,
    model: &str,
    seq_len: u32,
    dtype: sim::precision::NumFormat,
) -> Vec<String> {
    let mut notes = Vec::new();
    let compute_source = &costs.gpu_type(0).block.source;
    if !matches!(
        compute_source,
        Source::Measured { .. } | Source::Imported { .. }
    ) {
        notes.push(format!(
            "no profile of {gpu} / {model} / seq {seq_len} / {dtype} was found: block times are analytic"
        ));
    }
    if costs.gpu_type(0).units.is_none() {
        notes.push("no measured embedding / head / optimizer times: they are estimated".into());
    }
    notes.extend(costs.warnings.iter().cloned());
    notes
}

/// (max - min) / median of `xs` (the median the comparison reports; 0 for
/// fewer than two values).
pub fn iteration_spread(xs: &[f64]) -> f64 {
    let median = median(xs);
    if xs.len() < 2 || median <= 0.0 {
        return 0.0;
    }
    let (lo, hi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    (hi - lo) / median
}

/// Why other processes' CPU use `pct` (% of all cores) while `what`
/// (`profiling`, `training`) disturbed the measurement: above
/// [`BUSY_PCT`]; `None` when it did not or is unknown.
pub fn busy(what: &str, pct: Option<f64>) -> Option<String> {
    pct.filter(|p| *p > BUSY_PCT).map(|p| {
        format!(
            "other processes used {p:.0}% of the host's CPU time while {what}: the measurement was disturbed"
        )
    })
}

/// Why iterations of one plan that took different times (load a probe
/// cannot see: other tenants of a shared host, clock changes) disturbed
/// the measurement: `spread` above [`SPREAD_LIMIT`] over at least 3 `runs`.
pub fn uneven(spread: f64, runs: usize) -> Option<String> {
    if runs < 3 || spread <= SPREAD_LIMIT {
        return None;
    }
    Some(format!(
        "the measured iterations differ by {:.0}% of their median (more than {:.0}%): the machine's speed changed while it measured",
        spread * 100.0,
        SPREAD_LIMIT * 100.0
    ))
}

/// Whether a note is one of the disturbance warnings ([`busy`],
/// [`uneven`]), which are warned about as they arise.
pub fn is_disturbance(note: &str) -> bool {
    note.contains("the measurement was disturbed") || note.contains("speed changed")
}

/// One run of `validate`'s attempts, as its output lists them.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// Predicted iteration, ms.
    pub predicted_iteration_ms: f64,
    /// Measured iteration (median), ms.
    pub measured_iteration_ms: f64,
    /// (predicted - measured) / measured.
    pub iteration_error_rel: f64,
    /// Why the measurement was disturbed (empty: it was not, and this is
    /// the run reported).
    pub disturbed_because: Vec<String>,
}

impl Attempt {
    /// The attempt of `comparison`, disturbed for the reasons `why`.
    pub fn of(comparison: &Comparison, why: &[String]) -> Attempt {
        Attempt {
            predicted_iteration_ms: comparison.predicted_iteration_ms,
            measured_iteration_ms: comparison.measured_iteration_ms,
            iteration_error_rel: comparison.iteration_error_rel,
            disturbed_because: why.to_vec(),
        }
    }

    /// The note on this attempt (run `k`, counting from 1) that was not
    /// counted, the comparison being run `last`'s.
    pub fn not_counted(&self, k: usize, last: usize) -> String {
        format!(
            "run {k} was disturbed ({}): predicted {:.1} ms, measured {:.1} ms ({:+.1}%), not counted; the comparison is run {last}'s",
            self.disturbed_because.join("; "),
            self.predicted_iteration_ms,
            self.measured_iteration_ms,
            self.iteration_error_rel * 100.0,
        )
    }
}

/// Background CPU use during the two measured steps, % of all cores.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BackgroundLoad {
    /// While profiling (`null` with a profile file).
    pub profile: Option<f64>,
    /// While training.
    pub run: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_iterations() {
        assert_eq!(iteration_spread(&[100.0]), 0.0);
        assert!((iteration_spread(&[100.0, 110.0, 90.0]) - 0.2).abs() < 1e-12);
        assert!(iteration_spread(&[2611.2, 2643.8, 3759.4]) > SPREAD_LIMIT);
        assert!(uneven(0.2, 2).is_none() && uneven(0.1, 5).is_none());
        assert!(is_disturbance(&uneven(0.2, 3).unwrap()));
        assert!(busy("training", Some(BUSY_PCT)).is_none() && busy("x", None).is_none());
        assert!(is_disturbance(&busy("training", Some(6.0)).unwrap()));
    }

    #[test]
    fn the_trainer_runs_the_pytorch_stack_only() {
        let free = StrategySpec::default();
        let s = on_trainer_stack(free).unwrap();
        assert_eq!((s.stack, s.compile), (Some(Stack::PyTorch), Some(false)));
        let compiled = StrategySpec {
            compile: Some(true),
            ..free
        };
        assert!(on_trainer_stack(compiled).is_none());
    }

    #[test]
    fn demo_plan_is_uneven_with_accumulation() {
        let cephalo = |r: usize| Strategy::cephalo(r as u32, Attention::Eager);
        let p = demo_plan(2, 8, cephalo(2)).unwrap();
        let b: Vec<u32> = p.gpus.iter().map(|g| g.batch).collect();
        let n: Vec<u32> = p.gpus.iter().map(|g| g.microbatches).collect();
        assert_eq!(b, vec![3, 5]);
        assert_eq!(n, vec![1, 2]);
        assert!((p.gpus[0].state_fraction - 0.4).abs() < 1e-12);
        for (r, gb) in [(1, 1), (3, 3), (3, 16), (4, 100), (2, 2)] {
            let p = demo_plan(r, gb, cephalo(r)).unwrap();
            p.validate(r, gb, "t").unwrap();
        }
        assert!(demo_plan(3, 2, cephalo(3)).is_none());
        // Hybrid: fractions ramp inside each group, the same per position.
        let hybrid = Strategy {
            sharding: sim::strategy::Sharding::Hybrid,
            shard_group: 2,
            ..cephalo(4)
        };
        let h = demo_plan(4, 16, hybrid).unwrap();
        h.validate(4, 16, "t").unwrap();
        assert_eq!(h.gpus[0].state_fraction, h.gpus[2].state_fraction);
        let one = demo_plan(1, 8, cephalo(1)).unwrap();
        assert_eq!((one.gpus[0].batch, one.gpus[0].microbatches), (8, 2));
    }
}
