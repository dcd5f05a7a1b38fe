//! The candidates of one planning run ([`Run`], the state its steps pass
//! on): every strategy's closed-form optimum and near-optimal variants
//! ([`plan_of`]) and the seeds' plans, each with its closed-form time, and
//! how far behind the best closed-form time one is still worth the fast
//! model ([`CLOSED_FORM_MARGIN`]).

use super::search::Found;
use super::space::Searched;
use super::tables::Choice;
use crate::error::PlanError;
use crate::plan::Plan;
use crate::planner::closed_form::{ClosedForm, Evaluation};
use crate::planner::{Planned, Problem, SearchStats};
use crate::strategy::Strategy;

/// Candidates whose closed-form time exceeds the best one by more than this
/// factor are not run through the fast model (unless none of those that
/// are fits): measured over the best plan of every strategy of the paper
/// cluster's five models, a two-node and a 64-GPU cluster (42 plans), the
/// simulated time was 0.97x to 1.15x the closed form's, well inside it.
///
/// On random clusters (`sim/tests/it/models.rs`) the closed form is 0.81x
/// to 1.27x the simulator (every op alone) outside hybrid sharding, so a
/// candidate this margin drops is at most about 20% faster in the
/// simulator than the best it keeps. Under hybrid sharding across nodes it
/// can be up to 15x too fast (it prices the first shard and replica group
/// only, and the replica all-reduces in the tail only): such a plan takes
/// the best closed-form slot, the other strategies' candidates then fall
/// outside the margin and skip the fast model, and only the first
/// candidate per strategy is confirmed in the simulator; the planner still
/// returns the best plan it simulated, but may miss a better one.
pub const CLOSED_FORM_MARGIN: f64 = 1.25;

/// Builds the plan of a choice with its state fractions, under the closed
/// form's strategy.
pub fn plan_of(cf: &ClosedForm<'_>, name: &str, choice: &Choice) -> Option<(Plan, Evaluation)> {
    let ev = cf.evaluate(choice)?;
    Some((
        crate::planner::standard::plan_from(name, cf.strategy(), choice, &ev.fractions),
        ev,
    ))
}

/// A seed's name and what it planned.
pub(super) type Seeded = (&'static str, Result<Planned, PlanError>);

/// What an evaluation says about a candidate: its iteration time (ms) and
/// whether it runs out of memory (`None`: not evaluated).
pub(super) type Timing = Option<(f64, bool)>;

/// A candidate plan.
pub(super) struct Cand {
    /// Its strategy's index in the space.
    pub(super) strategy: usize,
    /// What it is, for notes (`seed: NAME`, or the strategy and which
    /// closed-form plan).
    pub(super) label: String,
    /// The plan.
    pub(super) plan: Plan,
    /// Its closed-form iteration time, ms (infinity for a seed).
    pub(super) closed_ms: f64,
}

/// One planning run of the native planner: the state its steps pass on.
pub(super) struct Run<'a> {
    /// The problem planned.
    pub(super) problem: Problem<'a>,
    /// The planner's name (its plans carry it).
    pub(super) planner: &'static str,
    /// The strategies searched.
    pub(super) space: Vec<Strategy>,
    /// How many candidates the simulator confirms first (at least 1).
    pub(super) per_strategy: usize,
    /// The candidates: per strategy its optimum, then variants; then seeds.
    pub(super) cands: Vec<Cand>,
    /// Per strategy: why its search found no plan.
    pub(super) failed: Vec<Option<String>>,
    /// The first strategy's reason there is no plan under it.
    pub(super) first_err: Option<PlanError>,
    /// Whether every search proved its optimum.
    pub(super) proven: bool,
    /// Search counts.
    pub(super) stats: SearchStats,
    /// Remarks for the user.
    pub(super) notes: Vec<String>,
    /// Per candidate: the fast model's timing (step 6).
    pub(super) fast: Vec<Timing>,
    /// The candidates, best first by the fast model (step 6).
    pub(super) order: Vec<usize>,
    /// Per candidate: the simulator's timing (step 7).
    pub(super) verdicts: Vec<Timing>,
    /// The candidate that wins (step 7).
    pub(super) chosen: usize,
}

impl<'a> Run<'a> {
    /// A run of the planner `planner` on `problem` over the strategies
    /// `space`, with no candidates yet.
    pub(super) fn new(
        planner: &'static str,
        problem: Problem<'a>,
        space: Vec<Strategy>,
    ) -> Run<'a> {
        Run {
            problem,
            planner,
            per_strategy: problem.options.confirm_candidates.max(1),
            cands: Vec::new(),
            failed: vec![None; space.len()],
            first_err: None,
            proven: true,
            stats: SearchStats {
                strategies: space.len() as u64,
                ..SearchStats::default()
            },
            notes: Vec::new(),
            fast: Vec::new(),
            order: Vec::new(),
            verdicts: Vec::new(),
            chosen: 0,
            space,
        }
    }

    /// Step 5: every strategy's closed-form optimum and near-optimal
    /// variants from its search (`results`, in the order of the space), with
    /// the searches' counts; a strategy with no plan keeps its reason.
    pub(super) fn add_closed_form(&mut self, results: &[(Strategy, Searched<'_>)]) {
        for (si, (s, r)) in results.iter().enumerate() {
            match r {
                Ok(list) => {
                    // Micro-batch-major: the two best pass counts by closed
                    // form go on (the others only cost simulations of
                    // long schedules).
                    let mut order: Vec<&(ClosedForm<'_>, Found)> = list.iter().collect();
                    order.sort_by(|a, b| a.1.eval.iteration_ms.total_cmp(&b.1.eval.iteration_ms));
                    order.truncate(2);
                    for (cf, found) in order {
                        self.add_found(si, s, cf, found);
                    }
                }
                Err(e) => {
                    if self.first_err.is_none() {
                        self.first_err = Some(e.clone());
                    }
                    self.failed[si] = Some(e.to_string());
                }
            }
        }
    }

    /// The optimum and near-optimal variants one search `found` under the
    /// strategy `s` (index `si`) and closed form `cf`, and its counts.
    fn add_found(&mut self, si: usize, s: &Strategy, cf: &ClosedForm<'_>, found: &Found) {
        self.stats.candidates += found.stats.candidates;
        self.stats.feasible += found.stats.feasible;
        self.stats.subproblems += found.stats.subproblems;
        self.proven &= found.stats.proven_optimal;
        let passes = cf
            .passes()
            .map_or(String::new(), |n| format!(", {n} passes"));
        if let Some((p, ev)) = plan_of(cf, self.planner, &found.best) {
            self.cands.push(Cand {
                strategy: si,
                label: format!("{}{passes}: closed-form optimum", s.label()),
                plan: p,
                closed_ms: ev.iteration_ms,
            });
        }
        for (k, a) in found
            .alternatives
            .iter()
            .take(self.per_strategy.saturating_sub(1).max(2))
            .enumerate()
        {
            if let Some((p, ev)) = plan_of(cf, self.planner, a) {
                self.cands.push(Cand {
                    strategy: si,
                    label: format!("{}{passes}: closed-form candidate {}", s.label(), k + 1),
                    plan: p,
                    closed_ms: ev.iteration_ms,
                });
            }
        }
    }

    /// The seeds' plans whose strategy lies in the space, as candidates
    /// (under this planner's name, without the seeds' notes, once each).
    pub(super) fn add_seeds(&mut self, seeded: Vec<Seeded>) {
        for (name, result) in seeded {
            if let Ok(mut pl) = result {
                let Some(si) = self.space.iter().position(|s| *s == pl.plan.strategy) else {
                    continue;
                };
                pl.plan.planner = self.planner.to_string();
                for gp in &mut pl.plan.gpus {
                    gp.note = None;
                }
                if !self.cands.iter().any(|c| c.plan == pl.plan) {
                    self.cands.push(Cand {
                        strategy: si,
                        label: format!("seed: {name}"),
                        plan: pl.plan,
                        closed_ms: f64::INFINITY,
                    });
                }
            }
        }
    }
}
