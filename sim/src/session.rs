//! The workflows users run, as library calls: build a workload's cost
//! model ([`build_workload`]), resolve the strategy of a command
//! ([`resolve_strategy`]), plan and simulate ([`plan_and_simulate`]), and
//! compare planners ([`compare`], [`Comparison`]). The command-line tool
//! only parses flags, reads files, calls these and prints; experiment
//! runners call them too.
//!
//! Units: times in ms, throughput in samples/s, memory in % of usable.

use crate::cluster::Cluster;
use crate::cost::{CostModel, CostOptions, Workload};
use crate::error::{PlanError, SpecError};
use crate::iteration::SimOptions;
use crate::model::ModelSpec;
use crate::perfmodel::Predictor;
use crate::plan::file::{PlanFile, PlanWorkload};
use crate::plan::Plan;
use crate::planner::registry::{self, Family};
use crate::planner::{Planned, Planner, PlannerOptions, Problem, SimJudge};
use crate::precision::NumFormat;
use crate::profile::ProfileSet;
use crate::report::Report;
use crate::simulate::simulate;
use crate::strategy::{Strategy, StrategyContext, StrategySpec};
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Instant;

/// What a user says about a workload (flags), before it is resolved.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// The cluster.
    pub cluster: Cluster,
    /// The model (from a catalog, `--model-catalog` or a Hugging Face
    /// `config.json`; the caller resolves the name).
    pub model: ModelSpec,
    /// Samples per iteration.
    pub global_batch: u32,
    /// Tokens per sample (`None`: the model's default; ViT ignores it).
    pub seq_len: Option<u32>,
    /// Training precision.
    pub dtype: NumFormat,
    /// Memory knobs and the memory cluster.
    pub options: CostOptions,
}

/// Resolves a workload into its cost model: looks the model up, checks the
/// numbers, and fills every rank's costs from `profiles` and `predictor`.
/// Errors name the flag (`--model`, `--seq-len`, `--global-batch`,
/// `--memory-cluster`).
pub fn build_workload(
    spec: &WorkloadSpec,
    profiles: &ProfileSet,
    predictor: &dyn Predictor,
) -> Result<CostModel, SpecError> {
    let model = spec.model.clone();
    let seq_len = match spec.seq_len {
        Some(0) => {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "seq_len",
                "expected a sequence length >= 1",
            ))
        }
        Some(s) => model.tokens_per_sample(s),
        None => model.tokens_per_sample(model.seq_len),
    };
    if spec.global_batch == 0 {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "global_batch",
            "expected a global batch >= 1",
        ));
    }
    if spec.options.memory_cluster.is_some() && profiles.memory.is_empty() {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "memory_cluster",
            "no memory profiles loaded (load profiles with a model_memory.json)",
        ));
    }
    let workload = Workload {
        cluster: spec.cluster.clone(),
        model,
        seq_len,
        dtype: spec.dtype,
        global_batch: spec.global_batch,
    };
    CostModel::build(workload, profiles, predictor, spec.options.clone())
}

/// The strategy of a command: the axes of `spec` with the defaults of
/// [`crate::strategy`] for the rest, checked against the cluster.
pub fn resolve_strategy(costs: &CostModel, spec: &StrategySpec) -> Result<Strategy, SpecError> {
    spec.resolve(&strategy_context(costs))
}

/// What strategy defaults depend on, for the workload of `costs`
/// ([`CostModel::strategy_context`]).
pub fn strategy_context(costs: &CostModel) -> StrategyContext<'_> {
    costs.strategy_context()
}

/// Where a user's own plan comes from (`simulate --plan` or `--batch`,
/// `validate`'s the same).
#[derive(Debug, Clone, Copy)]
pub enum PlanInput<'a> {
    /// A plan file's text (`cephalo plan --out`, or the reference
    /// optimizer's output), named `origin` (its path) in errors.
    File {
        /// The file's text.
        text: &'a str,
        /// Its name in errors.
        origin: &'a str,
    },
    /// Per-rank lists, named `origin` in errors.
    Lists {
        /// Local batch per rank (samples).
        batch: &'a [u32],
        /// Micro-batch count per rank.
        microbatches: &'a [u32],
        /// State fraction per rank (`None`: even in every shard group).
        state_fractions: Option<&'a [f64]>,
        /// Their name in errors.
        origin: &'a str,
    },
    /// A homogeneous 3D shape (`--tp`, `--pp`, ...): the pipeline it
    /// implies on the cluster ([`crate::plan::shape::Shape3d::pipeline`]).
    Shape {
        /// The shape.
        shape: &'a crate::plan::shape::Shape3d,
        /// The model's blocks.
        layers: u32,
    },
}

impl PlanInput<'_> {
    /// The name errors give the input.
    pub fn origin(&self) -> &str {
        match self {
            PlanInput::File { origin, .. } | PlanInput::Lists { origin, .. } => origin,
            PlanInput::Shape { .. } => crate::plan::shape::ORIGIN,
        }
    }
}

/// The plan a user gave, with its strategy: a file's own (checked against
/// the pinned axes `spec`) or, for a file without one and for lists, `spec`
/// resolved in `ctx`. A file must have been made for `workload`; the plan
/// is validated against its GPUs and global batch. Errors name the input
/// ([`PlanInput::origin`]) and the field.
pub fn user_plan(
    input: PlanInput<'_>,
    spec: &StrategySpec,
    ctx: &StrategyContext<'_>,
    workload: &PlanWorkload,
) -> Result<Plan, PlanError> {
    let plan = match input {
        PlanInput::File { text, origin } => {
            let file = PlanFile::from_json(text, origin)?;
            file.check_workload(workload, origin)?;
            let strategy = file.strategy_under(spec, ctx, origin)?;
            file.into_plan(strategy)
        }
        PlanInput::Lists {
            batch,
            microbatches,
            state_fractions,
            origin,
        } => {
            let strategy = spec.resolve(ctx)?;
            let mut plan = Plan::from_lists(batch, microbatches, state_fractions, origin)?
                .with_strategy(strategy);
            if state_fractions.is_none() {
                let even = crate::planner::standard::even_fractions(&strategy, workload.gpus.len());
                for (g, f) in plan.gpus.iter_mut().zip(even) {
                    g.state_fraction = f;
                }
            }
            plan
        }
        PlanInput::Shape { shape, layers } => {
            let pipe = shape.pipeline(workload.gpus.len(), layers, workload.global_batch)?;
            if let Some(lists) = one_stage_lists(shape, &pipe, spec, workload) {
                // One stage over every GPU without TP is the data-parallel
                // plan: one spec of pins, one plan, whichever flags spelled
                // it (`--tp 1 --pp 1 --microbatch-size b` = `--batch` /
                // `--microbatches` lists of `b x m` and `m` per GPU), its
                // strategy resolved as every data-parallel plan's.
                let (batch, microbatches) = lists;
                return user_plan(
                    PlanInput::Lists {
                        batch: &batch,
                        microbatches: &microbatches,
                        state_fractions: None,
                        origin: crate::plan::shape::ORIGIN,
                    },
                    spec,
                    ctx,
                    workload,
                );
            }
            // The stage's replicas keep full state unless `--sharding`
            // (`grad-op`: Megatron's distributed optimizer) says otherwise.
            // A pipeline accumulates without sync and offloads nothing
            // unless pinned (a one-stage plan over every GPU without TP is
            // the data-parallel plan and takes any accumulation and
            // offload, FSDP at one stage `sync` too: the pipeline's
            // validation says); FSDP / HSDP at one stage reduce-scatters
            // every micro-batch's gradients by default, as torchtitan
            // accumulates without a pipeline.
            let sharding = spec.sharding.unwrap_or(crate::strategy::Sharding::NoShard);
            let accumulation =
                if crate::plan::pipeline::reshards_after_forward(sharding, pipe.depth()) {
                    crate::strategy::Accumulation::Sync
                } else {
                    crate::strategy::Accumulation::NoSync
                };
            let spec = StrategySpec {
                sharding: Some(sharding),
                accumulation: spec.accumulation.or(Some(accumulation)),
                offload: spec.offload.or(Some(crate::strategy::Offload::None)),
                // A TP / PP plan runs Megatron-Core unless it shards with
                // FSDP; `--tp 1 --pp 1` is the data-parallel plan and runs
                // what data-parallel plans run.
                stack: spec.stack.or(Some(if shape.tp > 1 || shape.pp > 1 {
                    crate::strategy::default_3d_stack(sharding)
                } else {
                    crate::strategy::Stack::PyTorch
                })),
                ..*spec
            };
            let strategy = spec.resolve(ctx)?;
            shape.check_sharding(strategy.sharding)?;
            Plan::pipelined(
                "manual",
                strategy,
                pipe,
                workload.gpus.len(),
                workload.global_batch,
            )
        }
    };
    plan.validate(workload.gpus.len(), workload.global_batch, input.origin())?;
    Ok(plan)
}

/// The per-GPU lists (local batch, micro-batch count) of a shape whose
/// pipeline is the data-parallel plan: one stage over every GPU in order,
/// no TP, no model chunks, none of Megatron's overlap knobs (which only a
/// pipeline's data-parallel groups take). `None` for any other shape.
fn one_stage_lists(
    shape: &crate::plan::shape::Shape3d,
    pipe: &crate::plan::pipeline::Pipeline,
    spec: &StrategySpec,
    workload: &PlanWorkload,
) -> Option<(Vec<u32>, Vec<u32>)> {
    let n = workload.gpus.len();
    // Megatron-Core's DDP (`--stack megatron`, replicas or the distributed
    // optimizer; a shape's sharding defaults to replicas, as below)
    // reduces after the backward unless `--overlap-grad-reduce`: the
    // one-stage layout, not PyTorch DDP's overlapped buckets
    // (`Pipeline::runs_data_parallel`).
    let sharding = spec.sharding.unwrap_or(crate::strategy::Sharding::NoShard);
    let megatron_ddp = spec
        .stack
        .is_some_and(|stack| crate::plan::pipeline::megatron_ddp(stack, sharding));
    let plain = shape.tp == 1
        && shape.pp == 1
        && !shape.overlap_grad_reduce
        && !shape.overlap_param_gather
        && !shape.tp_comm_overlap
        && !megatron_ddp
        && pipe.data_parallel_shape(n);
    plain.then(|| {
        let m = pipe.microbatches;
        (vec![shape.microbatch_size * m; n], vec![m; n])
    })
}

/// A planned and simulated workload.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// The planner's output.
    pub planned: Planned,
    /// The simulator's report on the plan.
    pub report: Report,
    /// Wall time of the planner, s (for logs; never in outputs).
    pub elapsed_s: f64,
}

/// Plans one workload with one planner (the simulator as its judge) and
/// simulates the plan.
pub fn plan_and_simulate(
    costs: &CostModel,
    profiles: &ProfileSet,
    planner: &dyn Planner,
    options: &PlannerOptions,
    strategy: &StrategySpec,
) -> Result<PlannedRun, PlanError> {
    if let Some(why) = shape_conflict(planner, &options.shape) {
        return Err(PlanError::invalid(
            format!("the 3D shape pins ({})", options.shape.text()),
            "planner",
            why,
        ));
    }
    let judge = SimJudge::new(costs);
    let problem = Problem {
        costs,
        profiles,
        options,
        strategy,
        judge: Some(&judge),
    };
    let t0 = Instant::now();
    let planned = planner.plan(&problem).map_err(|e| match e {
        // An infeasible answer names the knobs that would make it fit.
        PlanError::Infeasible {
            message,
            shortfall_gib,
            rank,
        } => {
            let knobs = crate::planner::knobs::what_would_fit(costs, strategy);
            let mut message = message;
            for (i, k) in knobs.iter().enumerate() {
                message.push_str(if i == 0 { "\n  " } else { "\n    - " });
                message.push_str(k);
            }
            PlanError::Infeasible {
                message,
                shortfall_gib,
                rank,
            }
        }
        e => e,
    })?;
    let elapsed_s = t0.elapsed().as_secs_f64();
    // The judge simulated the winner already when it confirmed it.
    let opts = SimOptions::default();
    let report = match judge.take_report(&planned.plan, &opts) {
        Some(r) => r,
        None => simulate(costs, &planned.plan, &opts)?,
    };
    Ok(PlannedRun {
        planned,
        report,
        elapsed_s,
    })
}

/// One contender of [`plan_best`]: its planner, family and outcome.
#[derive(Debug, Clone)]
pub struct Contender {
    /// The planner's name.
    pub planner: &'static str,
    /// The family of plans it makes.
    pub family: crate::planner::registry::Family,
    /// Its plan and simulation, or why it has none.
    pub run: Result<PlannedRun, PlanError>,
}

impl Contender {
    /// Its simulated iteration when its plan fits, ms.
    pub fn fitting_ms(&self) -> Option<f64> {
        self.run
            .as_ref()
            .ok()
            .filter(|r| !r.report.oom)
            .map(|r| r.report.iteration_ms)
    }
}

/// The best plan of every family ([`plan_best`]).
#[derive(Debug, Clone)]
pub struct BestOfFamilies {
    /// Every contender, in registry order.
    pub contenders: Vec<Contender>,
}

/// Plans one workload with every family's planners
/// ([`crate::planner::registry::contenders`]: `cephalo` for data-parallel
/// plans, every pipeline and 3D planner), each confirmed by the simulator,
/// and picks the fastest plan that fits.
pub fn plan_best(
    costs: &CostModel,
    profiles: &ProfileSet,
    options: &PlannerOptions,
    strategy: &StrategySpec,
) -> BestOfFamilies {
    let contenders: Vec<Contender> = crate::planner::registry::contenders()
        .into_iter()
        // Pinned 3D shapes: the planners that take them.
        .filter(|(_, pl)| shape_conflict(pl.as_ref(), &options.shape).is_none())
        .map(|(family, pl)| Contender {
            planner: pl.name(),
            family,
            run: match pin_conflict(&pl.fixed_axes(), strategy) {
                Some(why) => Err(PlanError::invalid("plan", "strategy", why)),
                None => plan_and_simulate(costs, profiles, pl.as_ref(), options, strategy),
            },
        })
        .collect();
    BestOfFamilies { contenders }
}

/// The planner name that stands for every family's planners
/// ([`plan_best`]), `--planner`'s default.
pub const BEST: &str = "best";

/// Plans with the planner named `planner` (case-insensitive; [`BEST`]:
/// [`plan_best`]'s winner) and simulates the plan: the run and the name of
/// the planner that made it. An unknown name is an error naming `origin`.
pub fn plan_named(
    costs: &CostModel,
    profiles: &ProfileSet,
    planner: &str,
    origin: &str,
    options: &PlannerOptions,
    strategy: &StrategySpec,
) -> Result<(PlannedRun, &'static str), PlanError> {
    if planner.eq_ignore_ascii_case(BEST) {
        let all = plan_best(costs, profiles, options, strategy);
        let ran = all
            .winner()
            .map_or_else(registry::native_name, |w| all.contenders[w].planner);
        return Ok((all.into_winner()?, ran));
    }
    let pl = crate::planner::registry::by_name(planner, origin)?;
    let run = plan_and_simulate(costs, profiles, pl.as_ref(), options, strategy)?;
    Ok((run, pl.name()))
}

/// The planner a run logged by `format`'s framework is predicted with
/// when the user names none: its family's standard ([`registry::standard`]:
/// Megatron-LM's 3D for Megatron-LM logs, plain FSDP for the others).
pub fn planner_for_log(format: crate::runlog::LogFormat) -> &'static str {
    let family = if format.runs_3d() {
        Family::ThreeD
    } else {
        Family::DataParallel
    };
    registry::standard(family).name()
}

/// A planner's own memory rule, taken in place of the workload's default
/// ([`planner_mem_default`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerMemDefault {
    /// The planner whose rule it is.
    pub planner: &'static str,
    /// The rule ([`Planner::default_mem_policy`]).
    pub policy: crate::cost::MemPolicy,
}

impl PlannerMemDefault {
    /// What a report says about the rule on a `gpus`-GPU workload of
    /// `options` (which took it): whose default it is, the fraction, and
    /// the memory outside the allocator per GPU (the user's, else the
    /// rule's own allowance, a default too).
    pub fn note(&self, options: &CostOptions, gpus: usize) -> String {
        let rule = self.policy.summary(options.overhead_gib_on(gpus));
        if options.overhead_gib.is_some() {
            format!(
                "memory rule: {}'s default fraction, the rule of the method it follows ({rule}, that from --overhead-gib); --mem-fraction sets it",
                self.planner
            )
        } else {
            format!(
                "memory rule: {}'s default, the rule of the method it follows ({rule}); --mem-fraction and --overhead-gib set it",
                self.planner
            )
        }
    }
}

/// The one place a planner's memory rule becomes a workload's: for a
/// workload planned by the planner named `planner` alone (a `--planner`
/// value, aliases included; [`BEST`] and unknown names have none of their
/// own) when the user gave no fraction (`user_fraction`, `--mem-fraction`),
/// the planner's rule ([`Planner::default_mem_policy`]: `cephalo-compat`
/// takes the reference optimizer's, 0.75 of each GPU with 2 GiB outside
/// it); `None` when the user's fraction or the workload's default
/// (physical) holds. Commands that judge several planners' plans against
/// each other (`compare`, [`plan_best`]) keep one rule for all and do not
/// ask.
pub fn planner_mem_default(planner: &str, user_fraction: Option<f64>) -> Option<PlannerMemDefault> {
    if user_fraction.is_some() || planner.eq_ignore_ascii_case(BEST) {
        return None;
    }
    let pl = crate::planner::registry::by_name(planner, "--planner").ok()?;
    pl.default_mem_policy().map(|policy| PlannerMemDefault {
        planner: pl.name(),
        policy,
    })
}

/// Why a planner that fixes `fixed` cannot honour the user's pins `user`
/// (so [`plan_best`] leaves it out instead of returning a plan that
/// ignores them), `None` when it can.
/// Why `planner` cannot run under the shape pins `pins` (`None`: it can):
/// it searches within the parts it takes ([`Planner::shape_pins`]); a
/// pin of another part refuses it, except the trivial `tp=1 pp=1` of a
/// data-parallel planner's plans.
fn shape_conflict(planner: &dyn Planner, pins: &crate::plan::shape::ShapePins) -> Option<String> {
    use crate::planner::registry::entry;
    let takes = planner.shape_pins();
    let other: Vec<&str> = pins
        .pinned()
        .into_iter()
        .filter(|p| !takes.contains(p))
        .collect();
    if other.is_empty() {
        return None;
    }
    let family = entry(planner.name()).map_or(Family::DataParallel, |e| e.family);
    if family == Family::DataParallel && !pins.needs_model_parallel() {
        return None;
    }
    Some(format!(
        "`{}` makes {} plans and does not search a pinned {}; `megatron` searches every part of a pinned shape",
        planner.name(),
        family.name(),
        other.join(", ")
    ))
}

fn pin_conflict(fixed: &StrategySpec, user: &StrategySpec) -> Option<String> {
    let differ = |a: Option<String>, b: Option<String>, flag: &str| match (a, b) {
        (Some(a), Some(b)) if a != b => Some(format!(
            "not searched: {flag} {b} is pinned and its plans run {a}"
        )),
        _ => None,
    };
    differ(
        fixed.accumulation.map(|x| x.name().to_string()),
        user.accumulation.map(|x| x.name().to_string()),
        "--accumulation",
    )
    .or_else(|| {
        differ(
            fixed.offload.map(|x| x.name().to_string()),
            user.offload.map(|x| x.name().to_string()),
            "--offload",
        )
    })
    .or_else(|| {
        differ(
            fixed.sharding.map(|x| x.name().to_string()),
            user.sharding.map(|x| x.name().to_string()),
            "--sharding",
        )
    })
}

impl BestOfFamilies {
    /// The fastest contender whose plan fits among those `keep` admits
    /// (the first of equals, in registry order).
    fn fastest(&self, keep: impl Fn(&Contender) -> bool) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, c) in self.contenders.iter().enumerate() {
            if let Some(ms) = c.fitting_ms().filter(|_| keep(c)) {
                if best.is_none_or(|b| ms < b.1) {
                    best = Some((i, ms));
                }
            }
        }
        best.map(|b| b.0)
    }

    /// The fastest contender whose plan fits (`None`: none fits).
    pub fn winner(&self) -> Option<usize> {
        self.fastest(|_| true)
    }

    /// Each family's fastest fitting contender (`None`: none of its
    /// planners has a plan that fits), in [`Family::ALL`] order; a family
    /// none of whose planners ran (pinned 3D shapes) is left out.
    ///
    /// [`Family::ALL`]: crate::planner::registry::Family::ALL
    pub fn family_best(&self) -> Vec<(crate::planner::registry::Family, Option<usize>)> {
        crate::planner::registry::Family::ALL
            .iter()
            .filter(|&&f| self.contenders.iter().any(|c| c.family == f))
            .map(|&f| (f, self.fastest(|c| c.family == f)))
            .collect()
    }

    /// Lines saying each family's best plan and which family won by how
    /// much (throughput ratio to the next family's best).
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        let fams = self.family_best();
        for &(f, best) in &fams {
            let line = match best {
                Some(i) => {
                    let c = &self.contenders[i];
                    let ms = c.fitting_ms().unwrap_or(f64::NAN);
                    format!(
                        "family {}: best {} at {ms:.1} ms per iteration",
                        f.name(),
                        c.planner
                    )
                }
                None => {
                    let why: Vec<String> = self
                        .contenders
                        .iter()
                        .filter(|c| c.family == f)
                        .map(|c| match &c.run {
                            Ok(_) => format!("{}: out of memory", c.planner),
                            Err(e) => format!(
                                "{}: {}",
                                c.planner,
                                e.to_string().lines().next().unwrap_or_default()
                            ),
                        })
                        .collect();
                    format!(
                        "family {}: no plan that fits ({})",
                        f.name(),
                        why.join("; ")
                    )
                }
            };
            out.push(line);
        }
        if let Some(w) = self.winner() {
            let c = &self.contenders[w];
            let ms = c.fitting_ms().unwrap_or(f64::NAN);
            // The next family: the fastest plan of another family.
            let next = self.fastest(|o| o.family != c.family);
            out.push(match next {
                Some(i) => {
                    let other = &self.contenders[i];
                    let oms = other.fitting_ms().unwrap_or(f64::NAN);
                    format!(
                        "{} won ({}): {:.2}x the throughput of the best {} plan ({}, {oms:.1} ms)",
                        c.family.name(),
                        c.planner,
                        oms / ms,
                        other.family.name(),
                        other.planner
                    )
                }
                None => format!(
                    "{} won ({}): no other family has a plan that fits",
                    c.family.name(),
                    c.planner
                ),
            });
        }
        out
    }

    /// The winner's run, its notes led by [`Self::summary`]; when nothing
    /// fits, the data-parallel planner's answer (its error, or its plan
    /// that runs out of memory), else the first contender's.
    pub fn into_winner(self) -> Result<PlannedRun, PlanError> {
        let summary = self.summary();
        let pick = self.winner().unwrap_or_else(|| {
            self.contenders
                .iter()
                .position(|c| c.family == crate::planner::registry::Family::DataParallel)
                .unwrap_or(0)
        });
        let mut run = self
            .contenders
            .into_iter()
            .nth(pick)
            .map(|c| c.run)
            .unwrap_or_else(|| Err(PlanError::invalid("plan", "planner", "no planner to run")))?;
        let mut notes = summary;
        notes.append(&mut run.planned.notes);
        run.planned.notes = notes;
        Ok(run)
    }
}

/// One row of a comparison (the JSON output is an array of these).
///
/// Throughput fields are `null` when the planner found no plan (`error`
/// says why); an out-of-memory plan keeps its simulated numbers but has
/// `oom: true` and no speed-ups.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Planner name (`cephalo` is ours).
    pub planner: String,
    /// The plan's strategy (one line, [`Strategy::label`]).
    pub strategy: Option<String>,
    /// Simulated samples per second.
    pub samples_per_s: Option<f64>,
    /// Simulated tokens per second (samples x tokens per sample).
    pub tokens_per_s: Option<f64>,
    /// Model FLOPs utilisation: the model's training FLOPs per second over
    /// the GPUs' dense peak (fraction).
    pub mfu: Option<f64>,
    /// Simulated iteration time, ms.
    pub iteration_ms: Option<f64>,
    /// samples_per_s / that of `fsdp` (null when either OOMs or is missing).
    pub speedup_vs_even_fsdp: Option<f64>,
    /// samples_per_s / that of the fastest baseline that fits (null when
    /// this row OOMs or no baseline fits).
    pub speedup_vs_best_baseline: Option<f64>,
    /// The fastest baseline that fits: every planner but Cephalo's own
    /// (`cephalo`, `cephalo-compat`) whose plan fits.
    pub best_baseline: Option<String>,
    /// `cephalo`'s samples_per_s / this row's (null when either OOMs).
    pub cephalo_speedup: Option<f64>,
    /// Whether some GPU or host runs out of memory.
    pub oom: bool,
    /// By how much the worst GPU's peak exceeds its usable memory, GiB
    /// (null unless a GPU runs out of memory).
    pub oom_over_gib: Option<f64>,
    /// Peak memory per GPU, % of capacity.
    pub peak_mem_pct: Vec<f64>,
    /// Peak memory per GPU, % of the usable memory (above 100 = OOM).
    pub peak_usable_pct: Vec<f64>,
    /// Local batch per rank.
    pub batch_sizes: Vec<u32>,
    /// Micro-batch count per rank.
    pub microbatches: Vec<u32>,
    /// State fraction per rank.
    pub state_fractions: Vec<f64>,
    /// Why there is no plan (infeasible, missing profiles).
    pub error: Option<String>,
    /// Where each GPU type's numbers came from ([`Report::sources`];
    /// empty without a plan).
    pub sources: Vec<crate::report::SourceLine>,
    /// Planner search statistics and wall time (for logs; not serialised).
    #[serde(skip)]
    pub run: Option<(crate::planner::SearchStats, f64)>,
}

/// Every planner's row on one workload.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// One line naming the workload.
    pub title: String,
    /// Rows in planner order.
    pub rows: Vec<Row>,
    /// The native planner's error when it found the workload infeasible.
    pub native_error: Option<PlanError>,
}

/// Whether a planner is a baseline: anything but Cephalo's own planners.
fn is_baseline(planner: &str) -> bool {
    !registry::is_cephalo(planner)
}

fn ok(r: &Row) -> Option<f64> {
    if r.oom {
        None
    } else {
        r.samples_per_s
    }
}

/// Runs every planner of `planners` on the workload and simulates each
/// plan; speed-ups are against the `fsdp` and `cephalo` rows when present.
pub fn compare(
    costs: &CostModel,
    profiles: &ProfileSet,
    planners: &[Box<dyn Planner>],
    options: &PlannerOptions,
    strategy: &StrategySpec,
) -> Comparison {
    let mut rows = Vec::with_capacity(planners.len());
    let mut native_error = None;
    // Pinned 3D shapes compare the planners that take them.
    for pl in planners
        .iter()
        .filter(|pl| shape_conflict(pl.as_ref(), &options.shape).is_none())
    {
        match plan_and_simulate(costs, profiles, pl.as_ref(), options, strategy) {
            Ok(run) => {
                let p = &run.planned.plan;
                let report = &run.report;
                rows.push(Row {
                    planner: pl.name().to_string(),
                    strategy: Some(p.label()),
                    samples_per_s: Some(report.samples_per_s),
                    tokens_per_s: Some(report.tokens_per_s),
                    mfu: Some(report.mfu),
                    iteration_ms: Some(report.iteration_ms),
                    speedup_vs_even_fsdp: None,
                    speedup_vs_best_baseline: None,
                    best_baseline: None,
                    cephalo_speedup: None,
                    oom: report.oom,
                    oom_over_gib: report
                        .gpus
                        .iter()
                        .map(|g| g.peak_mem_gib - g.usable_gib)
                        .filter(|&x| x > 0.0)
                        .reduce(f64::max),
                    peak_mem_pct: report.gpus.iter().map(|g| g.mem_pct).collect(),
                    peak_usable_pct: report.gpus.iter().map(|g| g.usable_pct).collect(),
                    batch_sizes: p.gpus.iter().map(|g| g.batch).collect(),
                    microbatches: p.gpus.iter().map(|g| g.microbatches).collect(),
                    state_fractions: p.state_fractions(),
                    error: None,
                    sources: report.sources(),
                    run: Some((run.planned.stats.clone(), run.elapsed_s)),
                });
            }
            Err(e) => {
                if pl.name() == registry::native_name() {
                    native_error = Some(e.clone());
                }
                rows.push(Row {
                    planner: pl.name().to_string(),
                    strategy: None,
                    samples_per_s: None,
                    tokens_per_s: None,
                    mfu: None,
                    iteration_ms: None,
                    speedup_vs_even_fsdp: None,
                    speedup_vs_best_baseline: None,
                    best_baseline: None,
                    cephalo_speedup: None,
                    oom: false,
                    oom_over_gib: None,
                    peak_mem_pct: vec![],
                    peak_usable_pct: vec![],
                    batch_sizes: vec![],
                    microbatches: vec![],
                    state_fractions: vec![],
                    error: Some(e.to_string()),
                    sources: vec![],
                    run: None,
                });
            }
        }
    }
    let (fsdp_name, ours_name) = (
        registry::standard(Family::DataParallel).name(),
        registry::native_name(),
    );
    let fsdp = rows.iter().find(|r| r.planner == fsdp_name).and_then(ok);
    let ours = rows.iter().find(|r| r.planner == ours_name).and_then(ok);
    let best = rows
        .iter()
        .filter(|r| is_baseline(&r.planner))
        .filter_map(|r| ok(r).map(|x| (r.planner.clone(), x)))
        .fold(None, |b: Option<(String, f64)>, (n, x)| match b {
            Some((_, bx)) if bx >= x => b,
            _ => Some((n, x)),
        });
    for r in &mut rows {
        if let Some(x) = ok(r) {
            r.speedup_vs_even_fsdp = fsdp.map(|f| x / f);
            r.cephalo_speedup = ours.map(|o| o / x);
            r.speedup_vs_best_baseline = best.as_ref().map(|(_, b)| x / b);
        }
        r.best_baseline = best.as_ref().map(|(n, _)| n.clone());
    }
    let w = &costs.workload;
    let names = w.cluster.gpu_names();
    let title = format!(
        "{} on [{}], global batch {}, {}, seq {}",
        w.model.name,
        if names.len() > crate::report::GROUP_ROWS_ABOVE {
            crate::lists::name_runs(&names)
        } else {
            names.join(", ")
        },
        w.global_batch,
        w.dtype,
        w.seq_len
    );
    Comparison {
        title,
        rows,
        native_error,
    }
}

impl Comparison {
    /// The comparison as pretty JSON, newline-terminated: `{"format":
    /// "cephalo-compare/2", "title", "headline" ([`Self::headline`]),
    /// "rows": [`Row`]...}`.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            format: &'static str,
            title: &'a str,
            headline: String,
            rows: &'a [Row],
        }
        let out = Out {
            format: "cephalo-compare/2",
            title: &self.title,
            headline: self.headline().trim_end().to_string(),
            rows: &self.rows,
        };
        let mut s =
            serde_json::to_string_pretty(&out).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }

    /// The rows as CSV (lists joined with `;`, text quoted).
    pub fn to_csv(&self) -> String {
        let join = |v: Vec<String>| v.join(";");
        let opt = |x: Option<f64>| x.map(|v| format!("{v}")).unwrap_or_default();
        let q = |t: &str| format!("\"{}\"", t.replace('"', "'"));
        let mut s = String::from(
            "planner,strategy,samples_per_s,tokens_per_s,mfu,iteration_ms,speedup_vs_even_fsdp,speedup_vs_best_baseline,best_baseline,cephalo_speedup,oom,oom_over_gib,peak_mem_pct,peak_usable_pct,batch_sizes,microbatches,state_fractions,error\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                r.planner,
                q(r.strategy.as_deref().unwrap_or("")),
                opt(r.samples_per_s),
                opt(r.tokens_per_s),
                opt(r.mfu),
                opt(r.iteration_ms),
                opt(r.speedup_vs_even_fsdp),
                opt(r.speedup_vs_best_baseline),
                r.best_baseline.as_deref().unwrap_or(""),
                opt(r.cephalo_speedup),
                r.oom,
                opt(r.oom_over_gib),
                join(r.peak_mem_pct.iter().map(|x| format!("{x:.2}")).collect()),
                join(
                    r.peak_usable_pct
                        .iter()
                        .map(|x| format!("{x:.2}"))
                        .collect()
                ),
                join(r.batch_sizes.iter().map(|x| x.to_string()).collect()),
                join(r.microbatches.iter().map(|x| x.to_string()).collect()),
                join(r.state_fractions.iter().map(|x| format!("{x}")).collect()),
                q(r.error.as_deref().unwrap_or(""))
            );
        }
        s
    }

    /// A human-readable table, one row per planner, at most about 200
    /// columns at any cluster size (per-GPU lists as runs of equal values,
    /// cut with `...`; the JSON has them in full), then why each planner
    /// without a plan has none (wrapped to [`crate::text::WIDTH`]), then a line with
    /// Cephalo's speed-up over the best baseline that fits and over plain
    /// FSDP, each named, and the sources.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.title);
        let _ = writeln!(
            s,
            "{:<22} {:>10} {:>11} {:>5} {:>10} {:>8} {:>8}  {:<14} {:<11} {:<44} batches / micro-batches",
            "planner",
            "samples/s",
            "tokens/s",
            "MFU",
            "iter ms",
            "vs best",
            "vs fsdp",
            "peak % usable",
            "OOM",
            "strategy"
        );
        let f =
            |x: Option<f64>, p: usize| x.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
        let x = |v: Option<f64>| v.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into());
        for r in &self.rows {
            let mem = match r.peak_usable_pct.len() {
                0 => "-".to_string(),
                n if n <= 3 => r
                    .peak_usable_pct
                    .iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                n => {
                    let max = r.peak_usable_pct.iter().copied().fold(0.0, f64::max);
                    format!("max {max:.0} of {n}")
                }
            };
            let plan = if r.batch_sizes.is_empty() {
                "no plan (why: below)".to_string()
            } else {
                clip(
                    &format!(
                        "{} / {}",
                        crate::lists::runs(&r.batch_sizes),
                        crate::lists::runs(&r.microbatches)
                    ),
                    40,
                )
            };
            let oom = match (&r.error, r.oom, r.oom_over_gib) {
                (Some(_), _, _) => "n/a".to_string(),
                (None, true, Some(g)) => format!("+{g:.1} GiB"),
                (None, true, None) => "yes (host)".to_string(),
                (None, false, _) => "no".to_string(),
            };
            let _ = writeln!(
                s,
                "{:<22} {:>10} {:>11} {:>5} {:>10} {:>8} {:>8}  {:<14} {:<11} {:<44} {}",
                clip(&r.planner, 22),
                f(r.samples_per_s, 2),
                f(r.tokens_per_s, 0),
                r.mfu
                    .map(|m| format!("{:.0}%", m * 100.0))
                    .unwrap_or_else(|| "-".into()),
                f(r.iteration_ms, 1),
                x(r.speedup_vs_best_baseline),
                x(r.speedup_vs_even_fsdp),
                mem,
                oom,
                clip(r.strategy.as_deref().unwrap_or("-"), 44),
                plan
            );
        }
        // Why a planner has no plan, each line wrapped to the table's width.
        for r in self.rows.iter().filter(|r| r.batch_sizes.is_empty()) {
            let why = r.error.as_deref().unwrap_or("no plan");
            let _ = writeln!(s, "{}:", r.planner);
            let indented: String = why.lines().map(|l| format!("  {l}\n")).collect();
            s.push_str(&crate::text::wrap(&indented));
        }
        s.push_str(&crate::text::wrap(&self.headline()));
        // The sources are the workload's, the same under every planner.
        if let Some(r) = self.rows.iter().find(|r| !r.sources.is_empty()) {
            s.push_str(&crate::text::wrap(&crate::report::sources_text(&r.sources)));
        }
        s
    }

    /// Cephalo against the baselines in words: its speed-up over the best
    /// baseline that fits and over plain FSDP, each named, or why there is
    /// none (Cephalo has no plan or runs out of memory, no baseline fits,
    /// FSDP runs out of memory by how much).
    pub fn headline(&self) -> String {
        let native = registry::native_name();
        let Some(ours) = self.rows.iter().find(|r| r.planner == native) else {
            return String::new();
        };
        let mut s = String::from("cephalo: ");
        match (ok(ours), ours.oom_over_gib) {
            (None, Some(g)) => {
                let _ = writeln!(s, "its plan runs out of memory (by {g:.1} GiB)");
                return s;
            }
            (None, None) => {
                let _ = writeln!(
                    s,
                    "no plan ({})",
                    // The first line: the rest is the planner's own listing.
                    ours.error
                        .as_deref()
                        .and_then(|e| e.lines().next())
                        .unwrap_or("runs out of host memory")
                );
                return s;
            }
            _ => {}
        }
        let best = self
            .rows
            .iter()
            .find(|r| Some(&r.planner) == ours.best_baseline.as_ref());
        match (ours.speedup_vs_best_baseline, best) {
            (Some(v), Some(b)) => {
                let _ = write!(
                    s,
                    "{v:.2}x the best baseline that fits ({}, {:.2} samples/s)",
                    b.planner,
                    b.samples_per_s.unwrap_or(0.0)
                );
            }
            _ => {
                let _ = write!(s, "no baseline fits");
            }
        }
        match (
            ours.speedup_vs_even_fsdp,
            self.rows
                .iter()
                .find(|r| r.planner == registry::standard(Family::DataParallel).name()),
        ) {
            (Some(v), _) => {
                let _ = writeln!(s, "; {v:.2}x plain FSDP");
            }
            (None, Some(f)) if f.oom => {
                let _ = writeln!(
                    s,
                    "; plain FSDP runs out of memory{}",
                    f.oom_over_gib
                        .map(|g| format!(" (by {g:.1} GiB)"))
                        .unwrap_or_default()
                );
            }
            (None, Some(f)) => {
                let _ = writeln!(
                    s,
                    "; plain FSDP has no plan ({})",
                    f.error
                        .as_deref()
                        .and_then(|e| e.lines().next())
                        .unwrap_or("-")
                );
            }
            (None, None) => s.push('\n'),
        }
        s
    }
}

/// `text` cut to `width` characters, ending in `...` when cut.
fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut out: String = text.chars().take(width.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// One row of [`comm_sweep`], the nccl-tests columns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommRow {
    /// Buffer size, bytes (nccl-tests' `size`: the gathered buffer for
    /// all-gather / reduce-scatter, the buffer for all-reduce).
    pub size_bytes: f64,
    /// Time of one collective, µs.
    pub time_us: f64,
    /// Algorithm bandwidth, `size / time`, GB/s.
    pub algbw_gb_s: f64,
    /// Bus bandwidth, `algbw x (n-1)/n` (all-reduce: `x 2(n-1)/n`), GB/s.
    pub busbw_gb_s: f64,
    /// The algorithm and protocol that ran it (`ring/Simple`, `nvls/Simple`,
    /// `tree`, `measured`).
    pub algorithm: String,
}

/// The nccl-tests of a cluster: `kind` over the GPUs `ranks` (ring order)
/// at every buffer size of `sizes_bytes`, even pieces, under `comm`.
/// Fails (naming the field `ranks`) for fewer than two ranks, a rank
/// outside the cluster or a repeated one, and (naming `sizes`) for a size
/// that is not positive.
pub fn comm_sweep(
    cluster: &Cluster,
    comm: &dyn crate::comm::CommModel,
    kind: crate::comm::CollectiveKind,
    ranks: &[usize],
    sizes_bytes: &[f64],
) -> Result<Vec<CommRow>, SpecError> {
    if ranks.len() < 2 {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "ranks",
            format!("expected at least 2 ranks, got {}", ranks.len()),
        ));
    }
    let mut seen = vec![false; cluster.len()];
    for &r in ranks {
        if r >= cluster.len() {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "ranks",
                format!(
                    "rank {r} is not in the cluster (ranks 0..{})",
                    cluster.len()
                ),
            ));
        }
        if std::mem::replace(&mut seen[r], true) {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "ranks",
                format!("rank {r} is listed twice"),
            ));
        }
    }
    let p = ranks.len();
    let mut rows = Vec::with_capacity(sizes_bytes.len());
    for &size in sizes_bytes {
        if !(size.is_finite() && size > 0.0) {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "sizes",
                format!("expected positive byte counts, got {size}"),
            ));
        }
        let piece = kind.piece_bytes(size, p);
        let group = crate::cost::collective_ranks(cluster, ranks, &vec![piece; p]);
        let ms = comm.time_ms(kind, &group);
        let algbw = if ms > 0.0 {
            size / (ms * 1e-3) / 1e9
        } else {
            0.0
        };
        rows.push(CommRow {
            size_bytes: size,
            time_us: ms * 1e3,
            algbw_gb_s: algbw,
            busbw_gb_s: algbw * kind.busbw_factor(p),
            algorithm: comm.algorithm(kind, &group),
        });
    }
    Ok(rows)
}

/// [`comm_sweep`] rows as an aligned table (nccl-tests' columns).
pub fn comm_table(rows: &[CommRow]) -> String {
    let mut s = format!(
        "{:>14}  {:>12}  {:>11}  {:>11}  {}\n",
        "size_bytes", "time_us", "algbw_gb_s", "busbw_gb_s", "algorithm"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:>14}  {:>12.2}  {:>11.2}  {:>11.2}  {}",
            r.size_bytes, r.time_us, r.algbw_gb_s, r.busbw_gb_s, r.algorithm
        );
    }
    s
}
