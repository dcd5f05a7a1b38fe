//! What the native planner returns: the chosen plan (with notes on its
//! state-only GPUs and its closed-form objective), the best plan under
//! every strategy it considered, the counts and the notes.

use super::candidates::Run;
use super::search::MAX_INTERVALS;
use super::tables::Choice;
use crate::planner::closed_form::ClosedForm;
use crate::planner::{Considered, Objective, Planned};

impl Run<'_> {
    /// The planner's answer: the chosen candidate's plan and what is known
    /// about it.
    pub(super) fn into_planned(mut self) -> Planned {
        if !self.proven {
            self.notes.push(format!("a closed-form search stopped after {MAX_INTERVALS} intervals without proving optimality"));
        }
        let considered = self.considered();
        let costs = self.problem.costs;
        let mut plan = self.cands.swap_remove(self.chosen).plan;
        for (i, gp) in plan.gpus.iter_mut().enumerate() {
            if gp.batch == 0 {
                let msg = format!(
                    "GPU {i} ({}) gets no samples and only holds {:.1}% of the training state: giving it samples does not shorten the iteration",
                    costs.gpu(i).name,
                    gp.state_fraction * 100.0
                );
                gp.note = Some(msg.clone());
                self.notes.push(msg);
            }
        }
        let choice: Choice = plan
            .gpus
            .iter()
            .map(|g| (g.batch, g.microbatches))
            .collect();
        let objective = ClosedForm::new(costs, plan.strategy, plan.passes())
            .ok()
            .and_then(|cf| cf.evaluate(&choice))
            .map(|e| Objective {
                name: "closed_form_iteration_ms",
                value_ms: e.iteration_ms,
            });
        self.stats.proven_optimal = self.proven;
        Planned {
            plan,
            objective,
            compat: None,
            considered,
            stats: self.stats,
            notes: self.notes,
        }
    }

    /// The best plan under each strategy considered: simulated before
    /// evaluated by the fast model before neither, then the one that fits,
    /// then the faster (a strategy with no plan: why).
    fn considered(&self) -> Vec<Considered> {
        let mut considered: Vec<Considered> = self
            .space
            .iter()
            .map(|&s| Considered {
                strategy: s,
                plan: None,
                closed_form_ms: None,
                iteration_ms: None,
                simulated: false,
                oom: false,
                note: None,
            })
            .collect();
        for (slot, why) in considered.iter_mut().zip(&self.failed) {
            if let Some(e) = why {
                slot.note = Some(e.clone());
            }
        }
        for &i in &self.order {
            let c = &self.cands[i];
            let slot = &mut considered[c.strategy];
            let (ms, oom, sim) = match (self.verdicts[i], self.fast[i]) {
                (Some((ms, oom)), _) => (Some(ms), oom, true),
                (None, Some((ms, oom))) => (Some(ms), oom, false),
                _ => (None, false, false),
            };
            let closed = c.closed_ms.is_finite().then_some(c.closed_ms);
            if slot.plan.is_none() || outranks(slot, ms, oom, sim, closed) {
                slot.plan = Some(c.plan.clone());
                slot.closed_form_ms = closed;
                slot.iteration_ms = ms;
                slot.simulated = sim;
                slot.oom = oom;
            }
        }
        considered
    }
}

/// Whether a plan timed `ms` (`oom`, simulated when `sim`; closed-form time
/// `closed`) is a better example of its strategy than the one in `slot`.
fn outranks(slot: &Considered, ms: Option<f64>, oom: bool, sim: bool, closed: Option<f64>) -> bool {
    match (slot.iteration_ms, ms) {
        // A simulated verdict outranks the fast model's.
        (Some(_), Some(_)) if sim != slot.simulated => sim,
        (None, Some(_)) => true,
        // Neither evaluated: the lower closed-form time.
        (None, None) => match (slot.closed_form_ms, closed) {
            (_, None) => slot.plan.is_none(),
            (None, Some(_)) => true,
            (Some(old), Some(new)) => new < old,
        },
        (Some(_), None) => false,
        (Some(old), Some(new)) => (slot.oom && !oom) || (slot.oom == oom && new < old),
    }
}
