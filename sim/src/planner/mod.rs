//! Planners: turn a workload (cluster, model, profiles, global batch) and
//! the strategy axes the user pinned into a [`Plan`] (a [`Strategy`] and
//! per GPU: local batch `b_i`, micro-batch count `n_i`, micro-batch size
//! `m_i`, state fraction `r_i`).
//!
//! Every planner implements [`Planner`] and lives in a file of its own whose
//! doc cites its algorithm; [`registry`] lists them all once, with their
//! family, role and the names users may type (`cephalo list planners`
//! prints it). This module is their common interface: what a planner
//! receives ([`Problem`], [`PlannerOptions`], a [`Judge`]) and returns
//! ([`Planned`]); [`standard`] holds the rules and sizing the baselines
//! share, [`water`] the water-filling of state.
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
pub mod hetero3d;
pub mod hsdp;
pub mod knobs;
pub mod megatron;
pub mod pipeline;
pub mod pipeline_hetero;
pub mod proportional;
pub mod proportional_mem;
pub mod registry;
pub mod standard;
pub mod water;
pub mod zero2;

use crate::cost::CostModel;
use crate::error::PlanError;
use crate::iteration::SimOptions;
use crate::plan::Plan;
use crate::profile::ProfileSet;
use crate::report::Report;
use crate::strategy::{Sharding, Strategy, StrategySpec};

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
/// use): [`crate::simulate::simulate`] with the given options. It keeps
/// the report of every plan it judged, so the caller takes the winner's
/// ([`SimJudge::take_report`]) instead of simulating it again.
#[derive(Debug)]
pub struct SimJudge<'a> {
    /// The workload's cost model.
    pub costs: &'a CostModel,
    /// Simulation options (a trace is never recorded).
    pub options: SimOptions,
    /// The reports of the plans judged, in the order judged.
    reports: std::sync::Mutex<Vec<(Plan, Report)>>,
}

impl<'a> SimJudge<'a> {
    /// A judge with default simulation options.
    pub fn new(costs: &'a CostModel) -> SimJudge<'a> {
        SimJudge::with_options(costs, SimOptions::default())
    }

    /// A judge simulating with `options` (a trace is never recorded).
    pub fn with_options(costs: &'a CostModel, options: SimOptions) -> SimJudge<'a> {
        SimJudge {
            costs,
            options: SimOptions {
                trace: false,
                ..options
            },
            reports: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The report of `plan` if this judge simulated it under `options`
    /// (what [`crate::simulate::simulate`] would return again), taken out
    /// of the judge.
    pub fn take_report(&self, plan: &Plan, options: &SimOptions) -> Option<Report> {
        if *options != self.options {
            return None;
        }
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        let i = reports.iter().position(|(p, _)| p == plan)?;
        Some(reports.swap_remove(i).1)
    }
}

impl Judge for SimJudge<'_> {
    fn judge(&self, plan: &Plan) -> Result<Verdict, PlanError> {
        let r = crate::simulate::simulate(self.costs, plan, &self.options)?;
        let verdict = Verdict {
            iteration_ms: r.iteration_ms,
            oom: r.oom,
        };
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if !reports.iter().any(|(p, _)| p == plan) {
            reports.push((plan.clone(), r));
        }
        Ok(verdict)
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
        let s = spec.resolve(&self.costs.strategy_context())?;
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
    /// The 3D shape the user pinned (`--tp`, `--pp`, ..., a study's
    /// `shapes`): planners search within the parts they take
    /// ([`Planner::shape_pins`]) and refuse pins of the others.
    pub shape: crate::plan::shape::ShapePins,
}

impl Default for PlannerOptions {
    fn default() -> Self {
        PlannerOptions {
            model_key: None,
            compat_ag_ms: 0.0,
            compat_rs_ms: 0.0,
            confirm_candidates: 8,
            seed_with_baselines: true,
            shape: crate::plan::shape::ShapePins::default(),
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

impl SearchStats {
    /// One line of these counts for planner `name` after `elapsed_s`
    /// seconds that cannot contradict itself: a planner that follows a
    /// rule says so; a search gives only the counts it kept (strategies,
    /// candidate evaluations, plans checked against memory and how many fit,
    /// sub-problems, plans evaluated fast and simulated).
    pub fn line(&self, name: &str, elapsed_s: f64) -> String {
        let s = self;
        let ms = elapsed_s * 1e3;
        if s.candidates == 0 && s.simulated == 0 && s.fast_evaluated == 0 {
            return format!("planner {name}: follows its framework's rule (no search), {ms:.3} ms");
        }
        let mut parts = Vec::new();
        if s.strategies > 0 {
            parts.push(format!("{} strategies", s.strategies));
        }
        let rate = if elapsed_s > 0.0 {
            format!(" ({:.3e}/s)", s.candidates as f64 / elapsed_s)
        } else {
            String::new()
        };
        parts.push(format!("{} candidate evaluations{rate}", s.candidates));
        let checked = s.feasible + s.infeasible;
        if checked > 0 {
            parts.push(format!(
                "{} of {checked} plans checked against memory fit",
                s.feasible
            ));
        }
        for (n, what) in [
            (s.subproblems, "sub-problems"),
            (s.fast_evaluated, "fast-evaluated"),
            (s.simulated, "simulated"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        format!(
            "planner {name}: {}, {ms:.3} ms{}",
            parts.join(", "),
            if s.proven_optimal {
                ", proven optimal"
            } else {
                ""
            }
        )
    }
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

/// A planner: turns a problem into a plan.
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
    /// The parts of a 3D shape ([`crate::plan::shape::ShapePins::AXES`])
    /// it searches within when [`PlannerOptions::shape`] pins them; a pin
    /// of another part refuses it (beyond the trivial `tp=1 pp=1` of
    /// data-parallel plans). Default: none.
    fn shape_pins(&self) -> &'static [&'static str] {
        &[]
    }
    /// The memory rule this planner's method prescribes, taken when the
    /// user sets none and the plan is this planner's alone (`plan
    /// --planner`, `whatif ... --planner`;
    /// [`crate::session::planner_mem_default`]). Default: `None`, the
    /// workload's own default ([`crate::cost::MemPolicy::Physical`]).
    fn default_mem_policy(&self) -> Option<crate::cost::MemPolicy> {
        None
    }
}

/// A search's counts as `cephalo plan --format json` prints them (no
/// timings: output bytes depend on inputs only).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SearchSummary {
    /// Closed-form candidate evaluations (options or DP cells).
    pub candidates: u64,
    /// Sub-problems solved.
    pub subproblems: u64,
    /// Plans run through the fast model.
    pub fast_evaluated: u64,
    /// Plans run through the simulator.
    pub simulated: u64,
    /// Strategies searched.
    pub strategies: u64,
    /// Whether the planner proved its answer optimal on its own objective.
    pub proven_optimal: bool,
}

impl From<&SearchStats> for SearchSummary {
    fn from(s: &SearchStats) -> Self {
        SearchSummary {
            candidates: s.candidates,
            subproblems: s.subproblems,
            fast_evaluated: s.fast_evaluated,
            simulated: s.simulated,
            strategies: s.strategies,
            proven_optimal: s.proven_optimal,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_lines_do_not_contradict_themselves() {
        let rule = SearchStats::default();
        assert_eq!(
            rule.line("fsdp", 0.0001),
            "planner fsdp: follows its framework's rule (no search), 0.100 ms"
        );
        let s = SearchStats {
            candidates: 312_240,
            feasible: 61,
            infeasible: 0,
            simulated: 9,
            ..SearchStats::default()
        };
        let l = s.line("cephalo", 1.0);
        assert!(
            !l.contains("0 strategies") && !l.contains("0 do not"),
            "{l}"
        );
        assert!(
            l.contains("312240 candidate evaluations")
                && l.contains("61 of 61 plans checked against memory fit")
                && l.contains("9 simulated"),
            "{l}"
        );
    }
}
