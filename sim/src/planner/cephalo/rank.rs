//! Step 6 of the native planner: the candidates within
//! [`CLOSED_FORM_MARGIN`] of the best closed-form time go through the fast
//! model ([`crate::fast::evaluate`]) and are ranked by it.

use super::candidates::{Cand, Run, Timing, CLOSED_FORM_MARGIN};
use super::seeds::Seeds;
use crate::cost::CostModel;
use crate::iteration::SimOptions;
use rayon::prelude::*;

/// The fast model's timing of candidate `c` (`None`: it cannot run).
fn fast_timing(costs: &CostModel, c: &Cand) -> Timing {
    crate::fast::evaluate(costs, &c.plan, &SimOptions::default())
        .ok()
        .map(|e| (e.iteration_ms, e.oom))
}

impl Run<'_> {
    /// The margin filter: per candidate, whether it can matter. The fast
    /// model runs on the closed-form optimum of each strategy (for the
    /// per-strategy table), the seeds, and every candidate within
    /// CLOSED_FORM_MARGIN of the best closed-form time (the closed form
    /// misses only second-order effects, so a plan that much slower there
    /// does not win).
    pub(super) fn near_best(&self) -> Vec<bool> {
        let cands = &self.cands;
        let best_closed = cands
            .iter()
            .map(|c| c.closed_ms)
            .fold(f64::INFINITY, f64::min);
        let mut first_of_strategy = vec![None; self.space.len()];
        for (i, c) in cands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.closed_ms.is_finite())
        {
            let slot: &mut Option<usize> = &mut first_of_strategy[c.strategy];
            if slot.is_none_or(|j| c.closed_ms < cands[j].closed_ms) {
                *slot = Some(i);
            }
        }
        // A strategy's best closed-form time (a seed under that strategy
        // is no faster in the closed form, the search being exact; a seed
        // under a strategy the closed form finds no plan for is evaluated).
        let strategy_closed = |si: usize| first_of_strategy[si].map_or(0.0, |j| cands[j].closed_ms);
        let near = |ms: f64| ms <= best_closed * CLOSED_FORM_MARGIN;
        cands
            .iter()
            .map(|c| {
                if c.closed_ms.is_finite() {
                    near(c.closed_ms)
                } else {
                    near(strategy_closed(c.strategy))
                }
            })
            .collect()
    }

    /// Runs the fast model on the candidates `wanted` (in parallel).
    pub(super) fn evaluate_fast(&mut self, wanted: &[bool]) {
        let costs = self.problem.costs;
        self.fast = self
            .cands
            .par_iter()
            .zip(wanted)
            .map(|(c, &w)| if w { fast_timing(costs, c) } else { None })
            .collect();
    }

    /// Special case of step 6: the closed form does not check host memory,
    /// so when every candidate near the best overflows somewhere, the
    /// others (and the seeds left out) get their turn.
    pub(super) fn evaluate_rest_if_all_overflow(&mut self, seeds: &mut Seeds<'_>) {
        if self.fast.iter().any(|f| matches!(f, Some((_, false)))) {
            return;
        }
        if let Some(seeded) = seeds.plan_later() {
            self.add_seeds(seeded);
            self.fast.resize(self.cands.len(), None);
        }
        let costs = self.problem.costs;
        let rest: Vec<Timing> = self
            .cands
            .par_iter()
            .zip(&self.fast)
            .map(|(c, f)| {
                if f.is_none() {
                    fast_timing(costs, c)
                } else {
                    *f
                }
            })
            .collect();
        self.fast = rest;
    }

    /// Orders the candidates: those that fit by fast time, then those that
    /// overflow, then the rest by closed-form time (ties: the earlier).
    pub(super) fn rank(&mut self) {
        self.stats.fast_evaluated = self.fast.iter().filter(|f| f.is_some()).count() as u64;
        let mut order: Vec<usize> = (0..self.cands.len()).collect();
        let key = |i: usize| match self.fast[i] {
            Some((ms, false)) => (0u8, ms),
            Some((ms, true)) => (1, ms),
            None => (2, self.cands[i].closed_ms),
        };
        order.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(a.cmp(&b))
        });
        self.order = order;
    }
}
