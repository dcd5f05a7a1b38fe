//! Completing a plan the search found on a batch grid to the global batch
//! and refining it to the sample ([`refine`]), priced by classes of
//! identical ranks ([`Classes`]).

use super::classes::{better, ClassKey, ClassScore, Classes, Score};
use super::tables::{Choice, Search};
use crate::planner::closed_form::RankCost;
use crate::planner::water::FILL_TOL;
use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;

/// Most moves [`refine`] makes: a guard against cycling, far above what
/// it needs (each halving of the step ends after a few moves per GPU).
const MAX_REFINE_MOVES: usize = 4096;

/// Completes a choice found on a batch grid of `unit` samples to the
/// global batch and refines it to the sample: the samples the grid left
/// over go, `d` at a time, where they raise the objective least; then `d`
/// samples move from a bottleneck GPU to the GPU where they help most,
/// while that improves ([`ClassScore::score`]), `d` halving from `unit`
/// to 1. Each GPU takes its best micro-batch count for its batch at the
/// current water level. Identical GPUs (type, batch, count) are tried
/// once. `None` when no completion fits.
pub(super) fn refine(s: &Search<'_, '_>, start: &Choice) -> Option<Choice> {
    let refiner = Refiner {
        s,
        cache: RefCell::new(HashMap::default()),
    };
    let mut cur = Classes::of(s, start);
    refiner.complete(&mut cur)?;
    refiner.rebalance(&mut cur)?;
    Some(cur.choice)
}

/// One refinement: the search's option tables, and the options it priced
/// so far, per class (priced once over the whole refinement).
struct Refiner<'r, 'c, 'a> {
    /// The search whose choice is refined.
    s: &'r Search<'c, 'a>,
    /// Per class: its option (`None`: it does not fit).
    cache: RefCell<HashMap<ClassKey, Option<RankCost>>>,
}

impl Refiner<'_, '_, '_> {
    /// Times of `c` with `changes` (rank, new class) applied.
    fn times(&self, c: &Classes, changes: &[(usize, ClassKey)]) -> Option<ClassScore> {
        c.times_with(changes, self.s.cf, &self.cache)
    }

    /// Best count for `b` samples on a rank of type `t` at `level`.
    fn count(&self, t: usize, b: u32, level: f64) -> Option<u32> {
        let cf = self.s.cf;
        if b == 0 {
            return Some(0);
        }
        let c = cf.comm(level);
        let opts = self.s.options(t, b);
        let fit = opts
            .iter()
            .filter(|o| o.cap >= level - FILL_TOL)
            .min_by(|a, b| {
                cf.rank_ms(t, a, &c, level)
                    .total_cmp(&cf.rank_ms(t, b, &c, level))
            });
        fit.or_else(|| opts.iter().max_by(|a, b| a.cap.total_cmp(&b.cap)))
            .map(|o| o.microbatches)
    }

    /// Rank `r` at `b` samples, with its best count at `level`.
    fn at(&self, r: usize, b: u32, level: f64) -> Option<(usize, ClassKey)> {
        let t = self.s.rank_type[r];
        Some((r, (t, b, self.count(t, b, level)?)))
    }

    /// First step: the samples the grid left over go, `d` at a time,
    /// where they raise the objective least (`None`: they fit nowhere).
    fn complete(&self, cur: &mut Classes) -> Option<()> {
        let target = self.s.cf.costs().workload.global_batch;
        let g = cur.choice.len();
        let placed: u64 = cur.choice.iter().map(|x| x.0 as u64).sum();
        let mut rem = (target as u64).checked_sub(placed)? as u32;
        let mut d = self.s.unit.max(1);
        while rem > 0 {
            let step = d.min(rem);
            let level = self.times(cur, &[]).map_or(1.0 / g as f64, |t| t.level);
            let best = cur
                .representatives(None)
                .into_iter()
                .filter_map(|r| self.at(r, cur.choice[r].0 + step, level))
                .filter_map(|ch| self.times(cur, &[ch]).map(|t| (t.score(), ch)))
                .min_by(|a, b| {
                    if better(&a.0, &b.0) {
                        std::cmp::Ordering::Less
                    } else if better(&b.0, &a.0) {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                });
            match best {
                Some((_, (r, key))) => {
                    cur.set(r, key);
                    rem -= step;
                }
                None if step > 1 => d = step / 2,
                None => return None,
            }
        }
        Some(())
    }

    /// Second step, moves off the bottleneck: `d` samples from a
    /// bottleneck GPU to the GPU where they help most, while that improves
    /// the score, `d` halving from the grid's unit to 1 (`None`: the plan
    /// does not fit).
    fn rebalance(&self, cur: &mut Classes) -> Option<()> {
        let mut d = self.s.unit.max(1);
        let mut moves = 0usize;
        let mut now = self.times(cur, &[])?.score();
        while d >= 1 && moves < MAX_REFINE_MOVES {
            let t = self.times(cur, &[])?;
            let level = t.level;
            let Some(from) = t.bottleneck_rank(cur) else {
                break;
            };
            let step = d.min(cur.choice[from].0);
            let found = self.best_move(cur, from, step, level, &now);
            moves += 1;
            match found {
                Some((sc, changes)) => {
                    for (r, key) in changes {
                        cur.set(r, key);
                    }
                    now = sc;
                }
                None => d /= 2,
            }
        }
        Some(())
    }

    /// The move of `step` samples off rank `from` (at water level `level`)
    /// to the rank where the score improves most on `now`, with that score
    /// (`None`: no move improves it).
    fn best_move(
        &self,
        cur: &Classes,
        from: usize,
        step: u32,
        level: f64,
        now: &Score,
    ) -> Option<(Score, [(usize, ClassKey); 2])> {
        let mut found: Option<(Score, [(usize, ClassKey); 2])> = None;
        let off = self.at(from, cur.choice[from].0 - step, level)?;
        for to in cur
            .representatives(Some(off))
            .into_iter()
            .filter(|&r| r != from)
        {
            let Some(on) = self.at(to, cur.choice[to].0 + step, level) else {
                continue;
            };
            let Some(sc) = self.times(cur, &[off, on]).map(|t| t.score()) else {
                continue;
            };
            if better(&sc, now) && found.as_ref().is_none_or(|f| better(&sc, &f.0)) {
                found = Some((sc, [off, on]));
            }
        }
        found
    }
}
