//! The strategy space the native planner searches ([`strategy_space`]),
//! the pass counts of its micro-batch-major strategies ([`pass_ladder`]),
//! and the exact search of every strategy in it ([`search_space`]).

use super::search::{search, Found};
use crate::error::PlanError;
use crate::planner::closed_form::ClosedForm;
use crate::planner::Problem;
use crate::strategy::{Accumulation, Checkpointing, Sharding, Strategy, StrategySpec};
use rayon::prelude::*;

/// Pass counts the planner tries for micro-batch-major strategies (then
/// on up by [`pass_ladder`] while the batch needs more).
pub const PASS_LADDER: [u32; 12] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];

/// The pass counts tried for a global batch of `big_b`: [`PASS_LADDER`],
/// then alternately x1.5 and x1.33 (96, 128, 192, 256, ...) up to the
/// batch and [`crate::limits::MAX_MICROBATCHES`], so a batch too large for
/// 64 passes still finds the count that fits (the search stops climbing
/// at the first count past the best).
pub fn pass_ladder(big_b: u32) -> impl Iterator<Item = u32> {
    let top = big_b.min(crate::limits::MAX_MICROBATCHES);
    let mut v: Vec<u32> = PASS_LADDER.iter().copied().filter(|&n| n <= top).collect();
    let mut n = 64u32;
    while n < top {
        n = if n.is_power_of_two() {
            n + n / 2
        } else {
            n / 3 * 4
        };
        v.push(n.min(top));
    }
    v.dedup();
    v.into_iter()
}

/// The strategies the planner searches for `problem` (pinned axes fixed),
/// with what their search found.
pub fn strategy_space(problem: &Problem<'_>) -> Vec<Strategy> {
    let pins = problem.strategy;
    let costs = problem.costs;
    let shardings: Vec<Sharding> = match pins.sharding {
        Some(s) => vec![s],
        None => {
            let mut v = vec![Sharding::Full];
            let hybrid = StrategySpec {
                sharding: Some(Sharding::Hybrid),
                ..StrategySpec::default()
            };
            if let Ok((s, _)) = problem.resolve(&hybrid, &StrategySpec::default()) {
                if (s.shard_group as usize) < costs.ranks() {
                    v.push(Sharding::Hybrid);
                }
            }
            v
        }
    };
    let accs: Vec<Accumulation> = match pins.accumulation {
        Some(a) => vec![a],
        None => Accumulation::ALL.to_vec(),
    };
    let cks: Vec<Checkpointing> = match pins.checkpointing {
        Some(c) => vec![c],
        None => vec![
            Checkpointing::Full,
            Checkpointing::Selective,
            Checkpointing::Every(2),
            Checkpointing::None,
        ],
    };
    let mut out = Vec::new();
    for &sh in &shardings {
        for &a in &accs {
            for &c in &cks {
                let base = StrategySpec {
                    sharding: Some(sh),
                    accumulation: Some(a),
                    checkpointing: Some(c),
                    ..StrategySpec::default()
                };
                if let Ok((s, _)) = problem.resolve(&base, &StrategySpec::default()) {
                    if !out.contains(&s) {
                        out.push(s);
                    }
                }
            }
        }
    }
    out
}

/// What searching one strategy gives: the closed form and optimum per
/// pass count searched.
pub(super) type Searched<'a> = Result<Vec<(ClosedForm<'a>, Found)>, PlanError>;

/// Searches one strategy: layered once, micro-batch-major over the pass
/// ladder (stopping when a pass count's optimum is 20% worse than the
/// best so far and no better than the previous count's).
fn search_strategy<'a>(
    costs: &'a crate::cost::CostModel,
    s: Strategy,
) -> Result<Vec<(ClosedForm<'a>, Found)>, PlanError> {
    let base = ClosedForm::new(costs, s, 1)?;
    if base.passes().is_none() {
        let f = search(&base)?;
        return Ok(vec![(base, f)]);
    }
    let big_b = costs.workload.global_batch;
    let mut out: Vec<(ClosedForm<'a>, Found)> = Vec::new();
    let mut best = f64::INFINITY;
    let mut prev = f64::INFINITY;
    let mut last_err = None;
    for n in pass_ladder(big_b) {
        let cf = base.with_passes(n);
        // (Too few passes for the batch fail before any search, in
        // `infeasible_at_once`.)
        match search(&cf) {
            Ok(f) => {
                let j = f.eval.iteration_ms;
                // Past the best pass count the time climbs (more, smaller
                // micro-batches and more gathers): stop at the first rise.
                let stop = j > best && j >= prev;
                best = best.min(j);
                prev = j;
                out.push((cf, f));
                if stop {
                    break;
                }
            }
            Err(e) => {
                // Too few passes for the memory: keep climbing.
                if out.is_empty() {
                    last_err = Some(e);
                } else if prev.is_finite() {
                    break;
                }
            }
        }
    }
    if out.is_empty() {
        return Err(last_err.unwrap_or_else(|| PlanError::Infeasible {
            message: format!("nothing fits under {}", s.label()),
            shortfall_gib: 0.0,
            rank: None,
        }));
    }
    Ok(out)
}

/// Steps 1-4 under every strategy of `space` (in parallel): each with what
/// its search found.
pub(super) fn search_space<'a>(
    costs: &'a crate::cost::CostModel,
    space: &[Strategy],
) -> Vec<(Strategy, Searched<'a>)> {
    space
        .par_iter()
        .map(|&s| (s, search_strategy(costs, s)))
        .collect()
}
