//! Planners: turn a workload (cluster, model, profiles, global batch) and
//! the strategy axes the user pinned into a [`Plan`] (a [`Strategy`] and
//! per GPU: local batch `b_i`, micro-batch count `n_i`, micro-batch size
//! `m_i`, state fraction `r_i`).
//!
//! Every planner implements [`Planner`] and lives in a file of its own whose
//! doc cites its algorithm:
//!
//! | name | file | strategy | what |
//! |---|---|---|---|
//! | `cephalo` | [`cephalo`] | searched: full or hybrid sharding, any accumulation and checkpointing | Cephalo's optimizer, native: exact closed-form search per strategy, fast-model ranking, simulator confirmation |
//! | `cephalo-compat` | [`compat`] | Cephalo's trainer | the reference optimizer's rules (DESIGN.md section 5), bit-for-bit |
//! | `fsdp` | [`fsdp`] | PyTorch FSDP FULL_SHARD | even batch and shards, no-sync accumulation when the batch does not fit, least recompute that fits |
//! | `fsdp-ga` | [`fsdp_ga`] | Cephalo's trainer | even batch and shards, each GPU's largest micro-batch, layered accumulation |
//! | `zero2` | [`zero2`] | SHARD_GRAD_OP | as `fsdp` with ZeRO-2 sharding |
//! | `ddp` | [`ddp`] | NO_SHARD | as `fsdp` with full replicas and bucketed all-reduce |
//! | `hsdp` | [`hsdp`] | HYBRID_SHARD | as `fsdp`, sharded inside each node, replicated across |
//! | `speed-proportional` | [`proportional`] | PyTorch FSDP | batch proportional to GPU speed, one micro-batch, even shards |
//! | `speed-proportional-mem` | [`proportional_mem`] | PyTorch FSDP | speed-proportional batch, micro-batches sized to memory, even shards |
//! | `balance-compute` | [`ablation`] | Cephalo's trainer | ablation: batches by speed, even shards |
//! | `balance-state` | [`ablation`] | Cephalo's trainer | ablation: even batches, shards by memory |
//! | `pipeline` | [`pipeline`] | DeepSpeed pipeline, 1F1B, replicas per stage | equal blocks per stage, one GPU (or an equal group) per stage, m = 4p |
//! | `pipeline-hetero` | [`pipeline_hetero`] | 1F1B or GPipe, replicas or ZeRO-1 per stage | same-type stage groups, exact block partition by speed and memory, micro-batch size and schedule searched |
//!
//! All planners emit the same [`Plan`] type so the simulator judges them all
//! the same way. Strategy axes the user pinned ([`Problem::strategy`]) are
//! honoured by every planner except on the axis that defines it (`zero2`
//! always shards SHARD_GRAD_OP); a note says when a pin was overridden.
//! Units: times in ms, memory in GiB, batches in samples.
//!
//! Invariants: a returned plan passes [`Plan::validate`] for the problem's
//! ranks and global batch; planners are deterministic (same problem, same
//! plan); `sim` does no I/O, so search statistics come back in
//! [`SearchStats`] for the caller to log.

pub mod ablation;
pub mod cephalo;
pub mod closed_form;
pub mod compat;
pub mod ddp;
pub mod fsdp;
pub mod fsdp_ga;
pub mod hsdp;
pub mod pipeline;
pub mod pipeline_hetero;
pub mod proportional;
pub mod proportional_mem;
pub mod zero2;

use crate::cost::CostModel;
use crate::error::PlanError;
use crate::fast::rank_peak;
use crate::iteration::SimOptions;
use crate::plan::rank::RankPlan;
use crate::plan::Plan;
use crate::profile::ProfileSet;
use crate::schedule::Schedule;
use crate::strategy::{
    Accumulation, Checkpointing, Sharding, Strategy, StrategyContext, StrategySpec,
};
use crate::units::GIB;

/// What the simulator says about a plan (what [`Judge`] returns).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Simulated iteration time, ms.
    pub iteration_ms: f64,
    /// Whether some GPU or host ran out of memory.
    pub oom: bool,
}

/// Judges plans (normally the discrete-event simulator, [`SimJudge`]); the
/// native planner confirms its best candidates with it.
pub trait Judge: Sync + std::fmt::Debug {
    /// Simulates one plan of the problem's workload.
    fn judge(&self, plan: &Plan) -> Result<Verdict, PlanError>;
}

/// The discrete-event simulator as a [`Judge`] (what `plan` and `compare`
/// use): [`crate::simulate::simulate`] with the given options.
#[derive(Debug, Clone)]
pub struct SimJudge<'a> {
    /// The workload's cost model.
    pub costs: &'a CostModel,
    /// Simulation options (no trace).
    pub options: SimOptions,
}

impl<'a> SimJudge<'a> {
    /// A judge with default simulation options.
    pub fn new(costs: &'a CostModel) -> SimJudge<'a> {
        SimJudge {
            costs,
            options: SimOptions::default(),
        }
    }
}

impl Judge for SimJudge<'_> {
    fn judge(&self, plan: &Plan) -> Result<Verdict, PlanError> {
        let mut o = self.options;
        o.trace = false;
        let r = crate::simulate::simulate(self.costs, plan, &o)?;
        Ok(Verdict {
            iteration_ms: r.iteration_ms,
            oom: r.oom,
        })
    }
}

/// Everything a planner may look at.
#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    /// The per-rank cost model of the workload (cluster, model, seq, dtype,
    /// global batch, memory options, communication model).
    pub costs: &'a CostModel,
    /// All loaded profiles (the compat planner looks entries up by the
    /// reference model key; the others go through `costs`).
    pub profiles: &'a ProfileSet,
    /// Knobs of the planners.
    pub options: &'a PlannerOptions,
    /// The strategy axes the user pinned (flags); the rest is the planner's.
    pub strategy: &'a StrategySpec,
    /// The simulator, for planners that confirm candidates (`None`: the
    /// native planner returns its closed-form optimum unconfirmed).
    pub judge: Option<&'a dyn Judge>,
}

impl Problem<'_> {
    /// Resolves a strategy: the planner's `base` choices, overridden by the
    /// user's pins, overridden by the planner's `forced` axes (what defines
    /// it). Returns notes for pins the planner overrode.
    pub fn resolve(
        &self,
        base: &StrategySpec,
        forced: &StrategySpec,
    ) -> Result<(Strategy, Vec<String>), PlanError> {
        let user = self.strategy;
        let mut notes = Vec::new();
        let pinned = |name: &str, u: Option<String>, f: Option<String>, notes: &mut Vec<String>| {
            if let (Some(u), Some(f)) = (u, f) {
                if u != f {
                    notes.push(format!(
                        "this planner runs {name} {f}; the requested {name} {u} does not apply"
                    ));
                }
            }
        };
        pinned(
            "sharding",
            user.sharding.map(|x| x.name().to_string()),
            forced.sharding.map(|x| x.name().to_string()),
            &mut notes,
        );
        pinned(
            "accumulation",
            user.accumulation.map(|x| x.name().to_string()),
            forced.accumulation.map(|x| x.name().to_string()),
            &mut notes,
        );
        pinned(
            "checkpointing",
            user.checkpointing.map(|x| x.name()),
            forced.checkpointing.map(|x| x.name()),
            &mut notes,
        );
        pinned(
            "offload",
            user.offload.map(|x| x.name().to_string()),
            forced.offload.map(|x| x.name().to_string()),
            &mut notes,
        );
        let mut spec = base.with(user).with(forced);
        if spec.sharding != Some(Sharding::Hybrid) {
            spec.shard_group = None;
        }
        let ctx = StrategyContext {
            cluster: &self.costs.workload.cluster,
            dtype: self.costs.workload.dtype,
            profile_attention: self.costs.profile_attention(),
        };
        let s = spec.resolve(&ctx)?;
        Ok((s, notes))
    }
}

/// Knobs shared by the planners.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannerOptions {
    /// The model name exactly as the user wrote it (compat mode uses it as the
    /// reference profile key when profiles have entries under it).
    pub model_key: Option<String>,
    /// Compat mode: per-block all-gather time given to the reference
    /// optimizer (`--ag_time`), ms.
    pub compat_ag_ms: f64,
    /// Compat mode: per-block reduce-scatter time (`--rs_time`), ms.
    pub compat_rs_ms: f64,
    /// How many closed-form candidates the native planner confirms with the
    /// simulator (the best closed-form plans plus the seeds).
    pub confirm_candidates: usize,
    /// Whether the native planner also confirms the baselines' and the
    /// compat planner's plans as seeds (so it is never worse than them).
    pub seed_with_baselines: bool,
}

impl Default for PlannerOptions {
    fn default() -> Self {
        PlannerOptions {
            model_key: None,
            compat_ag_ms: 0.0,
            compat_rs_ms: 0.0,
            confirm_candidates: 8,
            seed_with_baselines: true,
        }
    }
}

/// A planner's objective value, named so outputs can say what it measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// Name of the objective (e.g. `makespan_ms_per_block`).
    pub name: &'static str,
    /// Its value, ms.
    pub value_ms: f64,
}

/// Counts gathered while searching (for the caller to log; no I/O here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchStats {
    /// Candidate (per-rank option or whole-plan) evaluations of the closed form.
    pub candidates: u64,
    /// Of those, how many fit in memory.
    pub feasible: u64,
    /// Of those, how many did not fit in memory.
    pub infeasible: u64,
    /// Sub-problems (dynamic programs, threshold checks) solved.
    pub subproblems: u64,
    /// Plans run through the fast model.
    pub fast_evaluated: u64,
    /// Plans run through the simulator.
    pub simulated: u64,
    /// Strategies searched.
    pub strategies: u64,
    /// True when the search proved its answer optimal on its own objective.
    pub proven_optimal: bool,
}

/// Extra output of the compat planner (the reference optimizer's figures).
#[derive(Debug, Clone, PartialEq)]
pub struct CompatDetails {
    /// The reference objective: slowest rank's per-block time, ms.
    pub makespan_ms_per_block: f64,
    /// Per rank: largest micro-batch that fits with an even state shard.
    pub max_bs_even_shard: Vec<u32>,
    /// Per rank: largest micro-batch that fits with no state at all.
    pub max_bs: Vec<u32>,
    /// The reference model key whose profiles were used.
    pub model_key: String,
    /// Whether the chosen plan passed the reference's cluster-wide memory cap.
    pub fits_cluster_memory: bool,
    /// State fractions the reference code itself prints (even, because of
    /// its swapped micro-batch size / count bug); the plan carries the
    /// corrected split.
    pub reference_state_fractions: Vec<f64>,
}

/// The best plan the native planner found under one strategy it considered.
#[derive(Debug, Clone, PartialEq)]
pub struct Considered {
    /// The strategy.
    pub strategy: Strategy,
    /// Its best plan (`None`: nothing fits under it).
    pub plan: Option<Plan>,
    /// Closed-form iteration time of that plan, ms.
    pub closed_form_ms: Option<f64>,
    /// Simulated (or, when not confirmed, fast-model) iteration time, ms;
    /// `None` for a plan the closed form already puts well behind the best
    /// (not evaluated further).
    pub iteration_ms: Option<f64>,
    /// Whether `iteration_ms` comes from the simulator.
    pub simulated: bool,
    /// Whether that plan runs out of memory.
    pub oom: bool,
    /// Why there is no plan, or what else to know.
    pub note: Option<String>,
}

/// What a planner returns: the plan plus what it knows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The plan.
    pub plan: Plan,
    /// The planner's own objective for this plan, if it has one.
    pub objective: Option<Objective>,
    /// Compat planner only: the reference optimizer's figures.
    pub compat: Option<CompatDetails>,
    /// Native planner only: the best plan under each strategy it considered.
    pub considered: Vec<Considered>,
    /// Search counts.
    pub stats: SearchStats,
    /// Remarks for the user (zero-sample GPUs, fallbacks, ties).
    pub notes: Vec<String>,
}

impl Planned {
    /// A plan with no objective, details or notes.
    pub fn bare(plan: Plan) -> Planned {
        Planned {
            plan,
            objective: None,
            compat: None,
            considered: vec![],
            stats: SearchStats::default(),
            notes: vec![],
        }
    }
}

/// A planner: turns a problem into a plan (CONVENTIONS.md item 9).
pub trait Planner: Send + Sync + std::fmt::Debug {
    /// Name users pass to `--planner` (and what reports print).
    fn name(&self) -> &'static str;
    /// One line: what it does, as users know it.
    fn summary(&self) -> &'static str;
    /// Plans the problem. `Err(PlanError::Infeasible)` when no plan fits in
    /// memory (with the smallest shortfall and its GPU); baselines instead
    /// return their fixed rule's plan and let the simulator report the OOM.
    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError>;
    /// The strategy axes this planner's rule always fixes, whatever the
    /// user pins ([`StrategySpec::NONE`]: it lets every axis be chosen).
    fn fixed_axes(&self) -> StrategySpec {
        StrategySpec::NONE
    }
}

/// Every planner, in the order `compare` prints them (ours first).
pub fn all() -> Vec<Box<dyn Planner>> {
    let mut v: Vec<Box<dyn Planner>> = vec![Box::new(cephalo::Cephalo), Box::new(compat::Compat)];
    v.extend(baselines());
    v.extend(pipelines());
    v
}

/// The pipeline-parallel planners (a separate family: not seeds of the
/// native planner, whose plans are data-parallel).
pub fn pipelines() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(pipeline::UniformPipeline),
        Box::new(pipeline_hetero::HeteroPipeline),
    ]
}

/// The baselines (every planner but the two Cephalo ones).
pub fn baselines() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(fsdp::Fsdp),
        Box::new(fsdp_ga::FsdpGa),
        Box::new(zero2::Zero2),
        Box::new(ddp::Ddp),
        Box::new(hsdp::Hsdp),
        Box::new(proportional::SpeedProportional),
        Box::new(proportional_mem::SpeedProportionalMem),
        Box::new(ablation::BalanceCompute),
        Box::new(ablation::BalanceState),
    ]
}

/// Looks a planner up by name or alias (`compat`, `even`, `whale`, ...).
pub fn by_name(name: &str, origin: &str) -> Result<Box<dyn Planner>, PlanError> {
    let n = name.trim().to_ascii_lowercase().replace('_', "-");
    let found: Option<Box<dyn Planner>> = match n.as_str() {
        "cephalo" | "native" => Some(Box::new(cephalo::Cephalo)),
        "cephalo-compat" | "compat" | "reference" => Some(Box::new(compat::Compat)),
        "fsdp" | "even" | "even-fsdp" => Some(Box::new(fsdp::Fsdp)),
        "fsdp-ga" | "even-ga" | "ga" => Some(Box::new(fsdp_ga::FsdpGa)),
        "zero2" | "zero-2" | "shard-grad-op" => Some(Box::new(zero2::Zero2)),
        "ddp" | "no-shard" => Some(Box::new(ddp::Ddp)),
        "hsdp" | "hybrid" | "hybrid-shard" => Some(Box::new(hsdp::Hsdp)),
        "speed-proportional" | "proportional" | "whale" => {
            Some(Box::new(proportional::SpeedProportional))
        }
        "speed-proportional-mem" | "proportional-mem" | "memory-aware-proportional" => {
            Some(Box::new(proportional_mem::SpeedProportionalMem))
        }
        "balance-compute" | "compute-balancing" => Some(Box::new(ablation::BalanceCompute)),
        "balance-state" | "state-balancing" => Some(Box::new(ablation::BalanceState)),
        "pipeline" | "deepspeed-pipeline" | "pp" => Some(Box::new(pipeline::UniformPipeline)),
        "pipeline-hetero" | "hetero-pipeline" | "metis" => {
            Some(Box::new(pipeline_hetero::HeteroPipeline))
        }
        _ => None,
    };
    found.ok_or_else(|| {
        let known: Vec<&str> = all().iter().map(|p| p.name()).collect();
        PlanError::invalid(
            origin,
            "planner",
            format!("unknown planner `{name}` (known: {})", known.join(", ")),
        )
    })
}

/// Even state fractions under `strategy`: `1/g` in every shard group.
pub fn even_fractions(strategy: &Strategy, ranks: usize) -> Vec<f64> {
    let g = strategy.groups(ranks).group_size.max(1);
    vec![1.0 / g as f64; ranks]
}

/// Parameters whose state a GPU holding `fraction` of it keeps under
/// `schedule` (all of them without sharding).
pub fn local_params(schedule: &Schedule<'_>, fraction: f64) -> f64 {
    let total = schedule.costs.workload.model.total_params() as f64;
    match schedule.strategy.sharding {
        Sharding::NoShard => total,
        _ => fraction * total,
    }
}

/// Whether `rank` fits running `sizes` under `schedule` holding
/// `fraction` of the state, by the fast model's per-GPU bound (and its
/// node's host memory for the offload it uses by itself), in an iteration
/// of `passes` micro-batch passes.
pub fn fits(
    schedule: &Schedule<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    fraction: f64,
) -> Result<bool, PlanError> {
    let costs = schedule.costs;
    let local = local_params(schedule, fraction);
    let node = &costs.workload.cluster.nodes[costs.workload.cluster.gpus[rank].node];
    // Offloaded activations the host cannot hold fail without a walk.
    let host_floor = crate::fast::host_floor(schedule, rank, sizes, local)?;
    if host_floor as f64 / GIB > node.host_mem_gib {
        return Ok(false);
    }
    let p = rank_peak(schedule, rank, sizes, passes, local)?;
    Ok(p.device_bytes as f64 / GIB <= costs.usable_gib(rank)
        && p.host_bytes as f64 / GIB <= node.host_mem_gib)
}

/// Sizes of `b` samples in `n` near-equal micro-batches (largest first).
pub fn sizes(b: u32, n: u32) -> Vec<u32> {
    RankPlan::new(b, n, 0.0).microbatch_sizes()
}

/// Largest micro-batch size that fits on `rank` under `schedule` while it
/// holds state fraction `r` in `n` micro-batches (0 when not even one
/// sample fits). Capped at `limit`.
pub fn max_microbatch(
    schedule: &Schedule<'_>,
    rank: usize,
    r: f64,
    n: u32,
    limit: u32,
) -> Result<u32, PlanError> {
    let mut lo = 0u32;
    while lo < limit && fits(schedule, rank, &vec![lo + 1; n.max(1) as usize], n, r)? {
        lo += 1;
    }
    Ok(lo)
}

/// The checkpointing levels a planner may choose, least recompute first:
/// `none`, then `selective`, `every:2` and `full` ordered by the recompute
/// time each costs one block on rank 0 (or just the user's pin).
pub fn checkpointing_by_recompute(problem: &Problem<'_>) -> Vec<Checkpointing> {
    if let Some(c) = problem.strategy.checkpointing {
        return vec![c];
    }
    let costs = problem.costs;
    let attention = problem
        .strategy
        .attention
        .unwrap_or_else(|| costs.profile_attention());
    let (f, _) = costs.block_ms_with(0, 1, attention).unwrap_or((1.0, 2.0));
    let sel = costs.selective_recompute_ms(0, 1, attention, f);
    let mut v = vec![
        (Checkpointing::Selective, sel),
        (Checkpointing::Every(2), 0.5 * f),
        (Checkpointing::Full, f),
    ];
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    std::iter::once(Checkpointing::None)
        .chain(v.into_iter().map(|x| x.0))
        .collect()
}

/// Builds a plan from per-rank (batch, micro-batch count) with state
/// fractions `fractions` under `strategy`, named `planner`.
pub fn plan_from(
    planner: &str,
    strategy: Strategy,
    batch_n: &[(u32, u32)],
    fractions: &[f64],
) -> Plan {
    Plan {
        planner: planner.to_string(),
        pipeline: None,
        strategy,
        gpus: batch_n
            .iter()
            .zip(fractions)
            .map(|(&(b, n), &r)| RankPlan::new(b, n, r))
            .collect(),
    }
}

/// The standard rule on an even batch split (`fsdp`, `zero2`, `ddp`,
/// `hsdp`): every GPU the same local batch, under `planner`'s fixed axes.
pub fn even_standard_plan(
    planner: &dyn Planner,
    problem: &Problem<'_>,
) -> Result<Planned, PlanError> {
    let batch = even_split(problem.costs.workload.global_batch, problem.costs.ranks());
    standard_plan(
        problem,
        planner.name(),
        &batch,
        &planner.fixed_axes(),
        false,
        None,
    )
}

/// The standard (PyTorch-style) rule shared by `fsdp`, `zero2`, `ddp`,
/// `hsdp` and the speed-proportional baselines: even state shards (per
/// shard group), micro-batch-major accumulation, and per GPU the given
/// `batch`. With `per_rank_micro`, every GPU takes the fewest micro-batches
/// that fit it (the passes are the largest count); otherwise every GPU
/// takes the same count, the fewest that fits them all, capped at `max_n`.
/// For that count, gradients accumulate under `no_sync()` (the documented
/// recipe) or, when the unsharded gradients of the whole model do not fit,
/// sharded after every micro-batch (`sync`: what PyTorch does without
/// `no_sync()`), each with the least recompute that fits
/// ([`checkpointing_by_recompute`]). A pinned accumulation or
/// checkpointing is kept. When nothing fits, the plan with single-sample
/// micro-batches and the most recompute is returned and a note names the
/// GPU (the simulator reports the OOM).
pub fn standard_plan(
    problem: &Problem<'_>,
    name: &str,
    batch: &[u32],
    forced: &StrategySpec,
    per_rank_micro: bool,
    max_n: Option<u32>,
) -> Result<Planned, PlanError> {
    let costs = problem.costs;
    let g = costs.ranks();
    let base = StrategySpec {
        accumulation: Some(Accumulation::NoSync),
        ..StrategySpec::default()
    };
    let levels = checkpointing_by_recompute(problem);
    let bmin = batch.iter().copied().filter(|&b| b > 0).min().unwrap_or(1);
    let bmax = batch.iter().copied().max().unwrap_or(1).max(1);
    let n_limit = max_n
        .unwrap_or(if per_rank_micro { bmax } else { bmin })
        .max(1);
    let accs: Vec<Option<Accumulation>> = match (forced.accumulation, problem.strategy.accumulation)
    {
        (Some(a), _) | (None, Some(a)) => vec![Some(a)],
        (None, None) => vec![Some(Accumulation::NoSync), Some(Accumulation::Sync)],
    };
    // The strategies to try, in preference order (accumulation, then
    // checkpointing), each resolved once with its schedule, even shards
    // and fit memo (ranks of one type with one batch fit alike); a
    // resolution error surfaces only when the search reaches it.
    struct Tried<'c> {
        fallback: bool,
        strategy: Strategy,
        notes: Vec<String>,
        schedule: Schedule<'c>,
        fractions: Vec<f64>,
        seen: Vec<FitMemo>,
    }
    let mut options: Vec<Result<Tried<'_>, PlanError>> = Vec::new();
    for (ai, &acc) in accs.iter().enumerate() {
        for &ck in &levels {
            let f = StrategySpec {
                checkpointing: Some(ck),
                accumulation: forced.accumulation.or(acc),
                ..*forced
            };
            options.push(problem.resolve(&base, &f).map(|(strategy, notes)| Tried {
                fallback: ai > 0,
                strategy,
                notes,
                schedule: Schedule::new(costs, strategy),
                fractions: even_fractions(&strategy, g),
                seen: Vec::new(),
            }));
        }
    }
    // The first option under which every GPU fits with `n` passes, as
    // (strategy, pairs, fractions, notes) and whether it is the fallback
    // accumulation; `last` keeps the last one tried.
    type Candidate = (Strategy, Vec<(u32, u32)>, Vec<f64>, Vec<String>);
    let mut last: Option<Candidate> = None;
    let mut fits_with =
        |n: u32, last: &mut Option<Candidate>| -> Result<Option<(Candidate, bool)>, PlanError> {
            for opt in options.iter_mut() {
                let o = opt.as_mut().map_err(|e| e.clone())?;
                // One pass: no-sync and sync are the same schedule.
                if n == 1 && o.fallback && !per_rank_micro {
                    continue;
                }
                let fr = &o.fractions;
                let mut pairs = Vec::with_capacity(g);
                let mut ok = true;
                for (r, &b) in batch.iter().enumerate() {
                    let t = costs.rank_type[r];
                    let nr = if b == 0 {
                        0
                    } else if per_rank_micro {
                        // The fewest micro-batches that fit (fewer, larger
                        // micro-batches never need less memory).
                        let (mut lo, mut hi) = (1u32, n.min(b));
                        while lo < hi {
                            let mid = (lo + hi) / 2;
                            if fits_cached(&o.schedule, r, t, (b, mid, n), fr[r], &mut o.seen)? {
                                hi = mid;
                            } else {
                                lo = mid + 1;
                            }
                        }
                        lo
                    } else {
                        n.min(b)
                    };
                    if b > 0 && !fits_cached(&o.schedule, r, t, (b, nr, n), fr[r], &mut o.seen)? {
                        ok = false;
                    }
                    pairs.push((b, nr));
                }
                let cand = (o.strategy, pairs, fr.clone(), o.notes.clone());
                if ok {
                    return Ok(Some((cand, o.fallback)));
                }
                *last = Some(cand);
            }
            Ok(None)
        };
    // The fewest passes that fit: memory never grows with more (smaller)
    // micro-batches, so a doubling search then bisection finds the first.
    let mut found = None;
    let (mut lo, mut hi) = (0u32, None);
    let mut n = 1u32;
    while n <= n_limit {
        match fits_with(n, &mut last)? {
            Some(c) => {
                found = Some((n, c));
                hi = Some(n);
                break;
            }
            None => {
                lo = n;
                if n == n_limit {
                    break;
                }
                n = (n * 2).min(n_limit);
            }
        }
    }
    if let Some(mut h) = hi {
        while h - lo > 1 {
            let mid = lo + (h - lo) / 2;
            match fits_with(mid, &mut last)? {
                Some(c) => {
                    found = Some((mid, c));
                    h = mid;
                }
                None => lo = mid,
            }
        }
    }
    if let Some((n, ((strategy, pairs, fr, ns), fallback))) = found {
        let mut notes = ns;
        if fallback {
            notes.push(format!(
                "the unsharded gradients of no_sync() accumulation do not fit with {n} micro-batches: gradients are reduced after every micro-batch"
            ));
        }
        let plan = plan_from(name, strategy, &pairs, &fr);
        let mut out = Planned::bare(plan);
        out.notes = notes;
        return Ok(out);
    }
    let mut notes = Vec::new();
    let (strategy, pairs, fr, ns) = last.expect("at least one candidate");
    notes.extend(ns);
    let schedule = Schedule::new(costs, strategy);
    let worst = (0..g)
        .find(|&r| {
            batch[r] > 0
                && !fits(&schedule, r, &sizes(pairs[r].0, pairs[r].1), n_limit, fr[r])
                    .unwrap_or(false)
        })
        .unwrap_or(0);
    notes.push(format!(
        "nothing fits on GPU {worst} ({}) with even state shards, even with {} micro-batches and {} checkpointing",
        costs.gpu(worst).name,
        pairs[worst].1,
        strategy.checkpointing.name()
    ));
    let mut out = Planned::bare(plan_from(name, strategy, &pairs, &fr));
    out.notes = notes;
    Ok(out)
}

/// A memoised [`fits`] verdict: (GPU type, batch, micro-batches, passes,
/// fits).
type FitMemo = (usize, u32, u32, u32, bool);

/// [`fits`] of `b` samples in `n` micro-batches over `passes` passes on a
/// GPU of type `t`, memoised in `seen`.
fn fits_cached(
    schedule: &Schedule<'_>,
    rank: usize,
    t: usize,
    (b, n, passes): (u32, u32, u32),
    r: f64,
    seen: &mut Vec<FitMemo>,
) -> Result<bool, PlanError> {
    if let Some(x) = seen
        .iter()
        .find(|x| (x.0, x.1, x.2, x.3) == (t, b, n, passes))
    {
        return Ok(x.4);
    }
    let ok = fits(schedule, rank, &sizes(b, n), passes, r)?;
    seen.push((t, b, n, passes, ok));
    Ok(ok)
}

/// Water-filling state split: every rank holds `min(cap_i, level)` where the
/// level is the smallest that makes the fractions sum to 1, so state goes
/// where memory is free and the largest piece (which paces the uneven
/// collectives) is as small as possible. `caps` are fractions of the total
/// state each rank has room for. `None` when `sum(caps) < 1`.
pub fn water_fill(caps: &[f64]) -> Option<Vec<f64>> {
    Some(water_fill_at(caps, water_level(caps)?))
}

/// [`water_fill`] at its known level (`water_level(caps)`), so a caller
/// that needs both sorts the caps once.
pub fn water_fill_at(caps: &[f64], level: f64) -> Vec<f64> {
    let mut r: Vec<f64> = caps.iter().map(|&c| c.clamp(0.0, 1.0).min(level)).collect();
    // Put the rounding residue (~1e-16) on the first largest piece.
    let sum: f64 = r.iter().sum();
    let big = (0..r.len()).fold(0, |best, i| if r[i] > r[best] { i } else { best });
    r[big] = (r[big] + 1.0 - sum).max(0.0);
    r
}

/// Tolerance on "the fractions reach 1" in water-filling and feasibility.
pub const FILL_TOL: f64 = 1e-12;

/// The water level of [`water_fill`]: the smallest `l >= 1/G` with
/// `sum(min(cap_i, l)) >= 1`; `None` when `sum(caps) < 1 - FILL_TOL`.
pub fn water_level(caps: &[f64]) -> Option<f64> {
    let g = caps.len();
    if g == 0 {
        return None;
    }
    let mut c: Vec<f64> = caps.iter().map(|&x| x.clamp(0.0, 1.0)).collect();
    let total: f64 = c.iter().sum();
    if total < 1.0 - FILL_TOL {
        return None;
    }
    c.sort_by(f64::total_cmp);
    let mut prefix = 0.0;
    for (k, &ck) in c.iter().enumerate() {
        let level = (1.0 - prefix) / (g - k) as f64;
        if level <= ck {
            return Some(level);
        }
        prefix += ck;
    }
    Some(c[g - 1])
}

/// [`water_level`] of caps given as classes: `caps[k]` held by `counts[k]`
/// ranks. The level is the same arithmetic in the same order (the prefix
/// over the caps in ascending order, one rank at a time), so the same bits,
/// without sorting one cap per rank: a plan of thousands of GPUs has a few
/// dozen classes. (Only the feasibility sum is taken per class.)
pub fn water_level_counted(caps: &[f64], counts: &[usize]) -> Option<f64> {
    let g: usize = counts.iter().sum();
    if g == 0 {
        return None;
    }
    let c: Vec<f64> = caps.iter().map(|&x| x.clamp(0.0, 1.0)).collect();
    let total: f64 = c.iter().zip(counts).map(|(x, &n)| x * n as f64).sum();
    if total < 1.0 - FILL_TOL {
        return None;
    }
    let mut order: Vec<usize> = (0..c.len()).filter(|&k| counts[k] > 0).collect();
    order.sort_by(|&a, &b| c[a].total_cmp(&c[b]));
    let (mut prefix, mut k) = (0.0, 0usize);
    for &cls in &order {
        let ck = c[cls];
        for _ in 0..counts[cls] {
            let level = (1.0 - prefix) / (g - k) as f64;
            if level <= ck {
                return Some(level);
            }
            prefix += ck;
            k += 1;
        }
    }
    order.last().map(|&cls| c[cls])
}

/// Splits `total` samples over ranks in proportion to `weights` (largest
/// remainder; ties to the lower rank), giving every rank at least `min_each`
/// when `total` allows it.
pub fn proportional_split(total: u32, weights: &[f64], min_each: u32) -> Vec<u32> {
    let g = weights.len();
    if g == 0 {
        return vec![];
    }
    let floor_each = if total >= min_each * g as u32 {
        min_each
    } else {
        0
    };
    let rest = total - floor_each * g as u32;
    let wsum: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    let shares: Vec<f64> = weights
        .iter()
        .map(|w| {
            if wsum > 0.0 {
                w.max(0.0) / wsum * rest as f64
            } else {
                rest as f64 / g as f64
            }
        })
        .collect();
    let mut out: Vec<u32> = shares.iter().map(|s| s.floor() as u32).collect();
    let mut left = rest - out.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..g).collect();
    order.sort_by(|&a, &b| {
        (shares[b] - shares[b].floor())
            .total_cmp(&(shares[a] - shares[a].floor()))
            .then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out.iter().map(|b| b + floor_each).collect()
}

/// Even split of `total` samples: the first `total % g` ranks get one more.
pub fn even_split(total: u32, g: usize) -> Vec<u32> {
    let g32 = g as u32;
    (0..g32)
        .map(|i| total / g32 + u32::from(i < total % g32))
        .collect()
}

/// Relative speed of every rank, in samples per ms of one block's forward,
/// recompute and backward at micro-batch size `m` (what a speed-proportional
/// split divides by).
pub fn rank_speeds(costs: &CostModel, m: u32) -> Vec<f64> {
    let m = m.max(1);
    (0..costs.ranks())
        .map(|r| m as f64 / (2.0 * costs.block_fwd_ms(r, m) + costs.block_bwd_ms(r, m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_fill_matches_reference_fix() {
        // The README's corrected split for the GPT-2.7B example: the first L4
        // is capped at its free memory, the rest share evenly.
        let caps = [
            0.22532744711597988,
            0.2882273881968276,
            0.4996839220012677,
            0.29721309406552004,
        ];
        let r = water_fill(&caps).unwrap();
        assert!((r[0] - 0.2253).abs() < 1e-4, "{r:?}");
        for x in &r[1..] {
            assert!((x - 0.2582).abs() < 1e-4, "{r:?}");
        }
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(water_fill(&[0.2, 0.3]), None);
        // By classes: the same bits as one cap per rank.
        let mut x = 0x9e3779b97f4a7c15u64;
        for _ in 0..200 {
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let classes: Vec<f64> = (0..1 + next() % 6)
                .map(|_| (next() % 1000) as f64 / 997.0)
                .collect();
            let class_of: Vec<usize> = (0..1 + next() % 40)
                .map(|_| (next() % classes.len() as u64) as usize)
                .collect();
            let caps: Vec<f64> = class_of.iter().map(|&k| classes[k]).collect();
            let mut counts = vec![0usize; classes.len()];
            for &k in &class_of {
                counts[k] += 1;
            }
            assert_eq!(
                water_level_counted(&classes, &counts).map(f64::to_bits),
                water_level(&caps).map(f64::to_bits),
                "{classes:?} {class_of:?}"
            );
        }
        let even = water_fill(&[1.0, 1.0, 1.0, 1.0]).unwrap();
        assert!(even.iter().all(|x| (x - 0.25).abs() < 1e-15));
    }

    #[test]
    fn splits_conserve_samples() {
        assert_eq!(even_split(10, 4), vec![3, 3, 2, 2]);
        let p = proportional_split(64, &[1.0, 1.0, 3.0, 0.5], 1);
        assert_eq!(p.iter().sum::<u32>(), 64);
        assert!(p.iter().all(|&b| b >= 1));
        assert_eq!(
            proportional_split(3, &[1.0, 1.0, 1.0, 1.0], 1)
                .iter()
                .sum::<u32>(),
            3
        );
    }

    #[test]
    fn names_resolve() {
        assert_eq!(all().len(), 13);
        for p in all() {
            assert_eq!(by_name(p.name(), "t").unwrap().name(), p.name());
        }
        assert_eq!(by_name("compat", "t").unwrap().name(), "cephalo-compat");
        assert!(by_name("nope", "--planner").is_err());
    }
}
