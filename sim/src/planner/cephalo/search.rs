//! The exact search of the closed-form objective under one strategy
//! ([`search`], steps 1-4 of the module doc): option tables on the batch
//! grid, the fast path at even state, the branch and bound on the water
//! level, then the optimum's ties, variants and near-optimal plans.

use super::grid::batch_unit;
use super::infeasible::{infeasible, infeasible_at_once};
use super::refine::refine;
use super::tables::{Choice, Search, OPT_TOL};
use crate::error::PlanError;
use crate::planner::closed_form::{ClosedForm, Evaluation};
use crate::planner::SearchStats;

/// Gap left below a split point of the λ branch and bound.
pub const LEVEL_GAP: f64 = 1e-9;
/// Relative slacks on the optimal bottleneck under which near-optimal,
/// better balanced plans are generated for the simulator to judge.
pub const RELAXED_SLACK: [f64; 3] = [0.003, 0.01, 0.03];
/// Most λ intervals the branch and bound explores before giving up the proof.
pub const MAX_INTERVALS: usize = 400;

/// Output of the exact closed-form search.
#[derive(Debug, Clone)]
pub struct Found {
    /// The optimal choice (least total rank time among optimal ones).
    pub best: Choice,
    /// Its closed-form evaluation.
    pub eval: Evaluation,
    /// Variants of the optimum and near-optimal plans, best first (distinct,
    /// `best` excluded).
    pub alternatives: Vec<Choice>,
    /// Search counts.
    pub stats: SearchStats,
}

/// Exact search of the closed-form objective (steps 1-4 of the module doc).
///
/// Each GPU type first gets a batch range of about 1.5x its speed share
/// (the options of larger batches are never built); any option of batch `b`
/// costs at least `b` times the type's per-sample floor
/// ([`ClosedForm::per_sample_floor_ms`]), so when the optimum found is below
/// the floor of every excluded batch it is the optimum over all batches;
/// otherwise the ranges grow to what the found optimum certifies and the
/// search runs once more.
pub fn search(cf: &ClosedForm<'_>) -> Result<Found, PlanError> {
    let costs = cf.costs();
    search_in_units(cf, batch_unit(costs.workload.global_batch, costs.ranks()))
}

/// [`search`] on a batch grid of `unit` samples (1: exact at any batch).
pub fn search_in_units(cf: &ClosedForm<'_>, unit: u32) -> Result<Found, PlanError> {
    let unit = unit.max(1);
    let costs = cf.costs();
    let big_b = costs.workload.global_batch;
    let nt = cf.type_count();
    let floor: Vec<f64> = (0..nt).map(|t| cf.per_sample_floor_ms(t)).collect();
    let speed: f64 = costs
        .rank_type
        .iter()
        .map(|&t| 1.0 / floor[t])
        .filter(|x| x.is_finite())
        .sum();
    let mut bmax: Vec<u32> = floor
        .iter()
        .map(|&f| {
            let share = if speed > 0.0 && f.is_finite() && f > 0.0 {
                big_b as f64 / f / speed
            } else {
                big_b as f64
            };
            ((1.5 * share).ceil() as u32).saturating_add(8).min(big_b)
        })
        .collect();
    if let Some(e) = infeasible_at_once(cf) {
        return Err(e);
    }
    let mut stats = SearchStats::default();
    loop {
        let full = bmax.iter().all(|&b| b >= big_b);
        match search_with(cf, &bmax, unit) {
            Ok(mut found) => {
                stats.candidates += found.stats.candidates;
                stats.feasible += found.stats.feasible;
                stats.subproblems += found.stats.subproblems;
                let j = found.eval.iteration_ms;
                let certified =
                    (0..nt).all(|t| bmax[t] >= big_b || floor[t] * (bmax[t] as f64 + 1.0) >= j);
                if certified {
                    stats.proven_optimal = found.stats.proven_optimal;
                    found.stats = stats;
                    return Ok(found);
                }
                bmax = (0..nt)
                    .map(|t| {
                        if floor[t].is_finite() && floor[t] > 0.0 {
                            ((j / floor[t]).floor() as u32)
                                .saturating_add(1)
                                .clamp(bmax[t], big_b)
                        } else {
                            big_b
                        }
                    })
                    .collect();
            }
            Err(e) if full => return Err(e),
            Err(_) => bmax = vec![big_b; nt],
        }
    }
}

/// [`search`] over options whose batch on type `t` is at most `bmax[t]`:
/// steps 2-4 of the module doc on the option tables of step 1.
fn search_with(cf: &ClosedForm<'_>, bmax: &[u32], unit: u32) -> Result<Found, PlanError> {
    let mut s = Search::new(cf, bmax, unit);
    let g = s.rank_type.len();
    let lmin = 1.0 / g as f64;
    let mut found = Incumbent::default();
    // Shardings that fix every GPU's share (hybrid, none): one bottleneck
    // search at that share is exact (the state is not water-filled, so the
    // level is known), the least total time breaking ties.
    if let Some(share) = cf.required_share() {
        let Some((tau, Some(choice))) = s.solve_bottleneck(share, Some(share), true) else {
            return Err(infeasible(&mut s));
        };
        found.consider(cf, choice, tau);
        return finish(&mut s, found, true);
    }
    // 2. Fast path: even state; the same search without the cap
    // restriction bounds every plan from below.
    if let Some((tau, Some(choice))) = s.solve_bottleneck(lmin, Some(lmin), true) {
        found.consider(cf, choice, tau);
    }
    let Some((lower, _)) = s.solve_bottleneck(lmin, None, false) else {
        return Err(infeasible(&mut s));
    };
    let mut proven =
        matches!(&found.best, Some((_, ev, _)) if ev.iteration_ms <= lower * (1.0 + OPT_TOL));
    if !proven {
        // 3. Otherwise branch and bound on the water level.
        proven = branch_and_bound(&mut s, &mut found, lmin);
    }
    // 4. Ties, variants and near-optimal plans.
    finish(&mut s, found, proven)
}

/// The best plan found so far and the others found.
#[derive(Default)]
struct Incumbent {
    /// The best choice, its evaluation and the bottleneck threshold it was
    /// found under.
    best: Option<(Choice, Evaluation, f64)>,
    /// The other choices found: the bests they replaced (most recent
    /// first), then the others in the order found.
    alternatives: Vec<Choice>,
}

impl Incumbent {
    /// Takes `choice` (found under the threshold `tau`) as the best when it
    /// is faster in the closed form, else as an alternative; a choice that
    /// does not fit is dropped.
    fn consider(&mut self, cf: &ClosedForm<'_>, choice: Choice, tau: f64) {
        let Some(ev) = cf.evaluate(&choice) else {
            return;
        };
        let better = match &self.best {
            Some((_, b, _)) => ev.iteration_ms < b.iteration_ms,
            None => true,
        };
        if better {
            if let Some((old, _, _)) = self.best.take() {
                self.alternatives.insert(0, old);
            }
            self.best = Some((choice, ev, tau));
        } else {
            self.alternatives.push(choice);
        }
    }

    /// The best's closed-form iteration time (infinity: none yet), ms.
    fn iteration_ms(&self) -> f64 {
        self.best
            .as_ref()
            .map_or(f64::INFINITY, |b| b.1.iteration_ms)
    }
}

/// Step 3: branch and bound on the water level from `lmin` (even state) to 1:
/// the knapsack sub-problem of an interval bounds every plan whose level
/// lies in it, its plan's exact cost is an upper bound; intervals split at
/// that plan's level and are pruned when the bound cannot win. Returns
/// whether it proved the best optimal (false: it stopped after
/// [`MAX_INTERVALS`] intervals).
fn branch_and_bound(s: &mut Search<'_, '_>, found: &mut Incumbent, lmin: f64) -> bool {
    let cf = s.cf;
    let mut stack = vec![(lmin, 1.0f64)];
    let mut explored = 0usize;
    while let Some((lo, hi)) = stack.pop() {
        explored += 1;
        if explored > MAX_INTERVALS {
            return false;
        }
        let incumbent = found.iteration_ms();
        let Some((lb, choice)) = s.solve_knapsack(lo, hi, incumbent) else {
            continue;
        };
        let ev_level = cf.evaluate(&choice).map(|e| e.level);
        found.consider(cf, choice, lb);
        let incumbent = found.iteration_ms();
        if lb >= incumbent * (1.0 - OPT_TOL) {
            continue;
        }
        let Some(level) = ev_level else { continue };
        if level <= lo {
            continue;
        }
        stack.push((level, hi));
        if level - LEVEL_GAP >= lo {
            stack.push((lo, level - LEVEL_GAP));
        }
    }
    true
}

/// Step 4: the search's result around the best choice `found`: variants
/// and near-optimal plans (distinct, feasible), and the counts. On a batch
/// grid ([`batch_unit`] > 1) every plan is completed and refined to the
/// sample first ([`refine`]) and optimality is not claimed.
fn finish(s: &mut Search<'_, '_>, found: Incumbent, proven: bool) -> Result<Found, PlanError> {
    let Some((choice, eval, tau)) = found.best else {
        return Err(infeasible(s));
    };
    let cf = s.cf;
    let mut alts = s.variants(&choice, eval.level, tau.max(eval.iteration_ms));
    alts.extend(s.relaxed(eval.level, eval.iteration_ms, &RELAXED_SLACK));
    alts.extend(found.alternatives);
    let (choice, eval, proven) = if s.unit > 1 {
        alts = alts.iter().filter_map(|a| refine(s, a)).collect();
        let refined = refine(s, &choice).and_then(|c| cf.evaluate(&c).map(|e| (c, e)));
        // The best completed plan leads (the grid's optimum may complete
        // worse than one of its neighbours).
        let mut all: Vec<(Choice, Evaluation)> = refined.into_iter().collect();
        all.extend(
            alts.iter()
                .filter_map(|a| cf.evaluate(a).map(|e| (a.clone(), e))),
        );
        let Some(lead) = all
            .iter()
            .min_by(|a, b| a.1.iteration_ms.total_cmp(&b.1.iteration_ms))
            .cloned()
        else {
            return Err(infeasible(s));
        };
        (lead.0, lead.1, false)
    } else {
        (choice, eval, proven)
    };
    let mut distinct: Vec<Choice> = Vec::new();
    for a in alts {
        if a != choice && !distinct.contains(&a) && cf.evaluate(&a).is_some() {
            distinct.push(a);
        }
    }
    let mut stats = s.stats.clone();
    stats.proven_optimal = proven;
    Ok(Found {
        best: choice,
        eval,
        alternatives: distinct,
        stats,
    })
}
