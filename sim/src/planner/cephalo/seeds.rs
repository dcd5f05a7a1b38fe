//! The seeds of the native planner: the baselines' and the compat planner's
//! plans whose strategy lies in the space join the candidates ([`Seeds`]),
//! planned while the strategies are searched or, for those that can only be
//! layered, once the search shows whether they can matter; and the seeds
//! that stand in when the closed form finds too little.

use super::candidates::{Run, Seeded, CLOSED_FORM_MARGIN};
use super::space::Searched;
use crate::error::PlanError;
use crate::iteration::SimOptions;
use crate::planner::{Planner, Problem};
use crate::strategy::Strategy;
use rayon::prelude::*;

/// A list of planners (the native planner's seeds).
pub(super) type Planners = Vec<Box<dyn Planner>>;

/// The strategies of `space` (indices) the plans of `p` can land under.
fn reaches(p: &dyn Planner, space: &[Strategy]) -> Vec<usize> {
    let fixed = p.fixed_axes();
    (0..space.len())
        .filter(|&i| {
            let s = &space[i];
            fixed.sharding.is_none_or(|x| x == s.sharding)
                && fixed.accumulation.is_none_or(|x| x == s.accumulation)
                && fixed.checkpointing.is_none_or(|x| x == s.checkpointing)
                && fixed.offload.is_none_or(|x| x == s.offload)
        })
        .collect()
}

/// The seeds of one planning run, by when they are planned.
pub(super) struct Seeds<'a> {
    /// The problem they plan.
    problem: Problem<'a>,
    /// Those that can land under a micro-batch-major strategy.
    eager: Planners,
    /// The others, until the search is done.
    lazy: Planners,
    /// Those of `lazy` the search showed cannot matter, until planned.
    later: Option<Planners>,
}

impl<'a> Seeds<'a> {
    /// The seeds (`make`'s planners) whose rule can land in `space`, when
    /// the problem asks for them and has a judge to confirm them.
    ///
    /// Seeds that can land under a micro-batch-major strategy are planned
    /// while the strategies are searched (their memory walks are O(1) in
    /// the pass count); layered-only ones (whose walks grow with the
    /// micro-batch count) once the search is done, and only if they can
    /// matter: the closed form being exact, a seed under a strategy
    /// whose optimum is more than CLOSED_FORM_MARGIN slower than the
    /// best is no closer, so it is never evaluated by the fast model and
    /// ranks after every closed-form candidate; it is planned only if a
    /// strategy it reaches has no closed-form plan or one within the
    /// margin (or when there are fewer candidates than the simulator
    /// confirms, or every near candidate overflows the host).
    pub(super) fn choose(
        problem: Problem<'a>,
        space: &[Strategy],
        make: fn() -> Planners,
    ) -> Seeds<'a> {
        let seeding = problem.options.seed_with_baselines && problem.judge.is_some();
        let mut seeds: Planners = Vec::new();
        if seeding {
            seeds = make();
        }
        seeds.retain(|p| !reaches(p.as_ref(), space).is_empty());
        let (eager, lazy): (Planners, Planners) = seeds.into_iter().partition(|p| {
            reaches(p.as_ref(), space)
                .iter()
                .any(|&i| space[i].accumulation.is_microbatch_major())
        });
        Seeds {
            problem,
            eager,
            lazy,
            later: None,
        }
    }

    /// Plans the planners `list` (in parallel).
    fn plan(&self, list: &[Box<dyn Planner>]) -> Vec<Seeded> {
        list.par_iter()
            .map(|p| (p.name(), p.plan(&self.problem)))
            .collect()
    }

    /// Plans the seeds that can land under a micro-batch-major strategy.
    pub(super) fn plan_eager(&self) -> Vec<Seeded> {
        self.plan(&self.eager)
    }

    /// Plans the layered-only seeds that reach a strategy with no
    /// closed-form plan in `results` (the searches of `space`) or one
    /// within [`CLOSED_FORM_MARGIN`] of the best; keeps the others for
    /// [`Seeds::plan_later`].
    pub(super) fn plan_near(
        &mut self,
        space: &[Strategy],
        results: &[(Strategy, Searched<'_>)],
    ) -> Vec<Seeded> {
        // The closed-form optimum per strategy (`None`: it found no plan).
        let strategy_best: Vec<Option<f64>> = results
            .iter()
            .map(|(_, r)| {
                r.as_ref().ok().and_then(|l| {
                    l.iter()
                        .map(|(_, f)| f.eval.iteration_ms)
                        .min_by(f64::total_cmp)
                })
            })
            .collect();
        let best_found = strategy_best
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let lazy = std::mem::take(&mut self.lazy);
        let (now, later): (Planners, Planners) = lazy.into_iter().partition(|p| {
            reaches(p.as_ref(), space)
                .iter()
                .any(|&i| strategy_best[i].is_none_or(|b| b <= best_found * CLOSED_FORM_MARGIN))
        });
        self.later = Some(later);
        self.plan(&now)
    }

    /// Plans the seeds [`Seeds::plan_near`] left out, once (`None`: done
    /// before).
    pub(super) fn plan_later(&mut self) -> Option<Vec<Seeded>> {
        let later = self.later.take()?;
        Some(self.plan(&later))
    }
}

impl Run<'_> {
    /// Special case of step 5: with fewer candidates than the simulator
    /// confirms, or no closed-form plan at all, the seeds left out are
    /// planned too; with no closed-form plan, only seeds that fit stand in;
    /// none: the first strategy's reason.
    pub(super) fn seeds_stand_in(&mut self, seeds: &mut Seeds<'_>) -> Result<(), PlanError> {
        // A seed left out ranks after every candidate here (it would not
        // be evaluated: key (2, infinity)), so the simulator would only
        // have confirmed it with fewer candidates than confirmations; then,
        // or with no closed-form plan at all, the seeds left out are
        // planned too.
        let no_closed_form = |run: &Run<'_>| run.cands.iter().all(|c| !c.closed_ms.is_finite());
        if self.cands.len() < self.per_strategy || no_closed_form(self) {
            if let Some(seeded) = seeds.plan_later() {
                self.add_seeds(seeded);
            }
        }
        // No closed-form plan under any strategy: only seeds that fit may
        // stand in (the closed form bounds memory conservatively, e.g. the
        // host split evenly; the fast model's memory is never below the
        // simulator's); none: the first strategy's reason.
        if no_closed_form(self) {
            let opts = SimOptions::default();
            let costs = self.problem.costs;
            self.cands
                .retain(|c| crate::fast::evaluate(costs, &c.plan, &opts).is_ok_and(|e| !e.oom));
        }
        if self.cands.is_empty() {
            return Err(self
                .first_err
                .take()
                .unwrap_or_else(|| PlanError::Infeasible {
                    message: "no strategy in the search space fits".into(),
                    shortfall_gib: 0.0,
                    rank: None,
                }));
        }
        Ok(())
    }
}
