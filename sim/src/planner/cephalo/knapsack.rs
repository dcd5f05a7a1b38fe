//! Step 3 of the search: the sub-problem of the branch and bound on the
//! water level, a bottleneck search whose every check is a max-plus
//! knapsack ("largest state the chosen micro-batches leave room for"), and
//! the largest state any plan leaves room for.

use super::bottleneck::pick;
use super::tables::{Choice, Priced, Search, OPT_TOL};
use crate::planner::water::FILL_TOL;

/// The distinct finite option costs of `priced` below `limit`, ascending:
/// the thresholds the bottleneck search tries.
fn thresholds(priced: &Priced, limit: f64) -> Vec<f64> {
    let mut th: Vec<f64> = priced
        .cost
        .iter()
        .flatten()
        .flatten()
        .copied()
        .filter(|c| c.is_finite() && *c < limit)
        .collect();
    th.sort_by(f64::total_cmp);
    th.dedup();
    th
}

impl Search<'_, '_> {
    /// Bottleneck search with the state constraint `sum min(cap_i, feas) >= 1`
    /// and costs at `cost_level`, over plans strictly better than `below`.
    /// Returns the optimal threshold and the plan with the most room for
    /// state under it (`None`: no such plan).
    pub(super) fn solve_knapsack(
        &mut self,
        cost_level: f64,
        feas: f64,
        below: f64,
    ) -> Option<(f64, Choice)> {
        let priced = self.price(cost_level);
        let th = thresholds(&priced, below * (1.0 - OPT_TOL));
        if th.is_empty() {
            return None;
        }
        // Whether the options within `tau` leave room for all the state.
        let fits = |s: &Self, tau: f64| {
            let (room, _) = s.most_state(&s.state_weights(&priced, tau, feas), false);
            room >= 1.0 - FILL_TOL
        };
        self.stats.subproblems += 1;
        if !fits(self, th[th.len() - 1]) {
            return None;
        }
        let (mut lo, mut hi) = (0usize, th.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            self.stats.subproblems += 1;
            if fits(self, th[mid]) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let tau = th[lo];
        let w = self.state_weights(&priced, tau, feas);
        let (_, args) = self.most_state(&w, true);
        Some((tau, self.backtrack(&args, &w)))
    }

    /// For the threshold `tau`: per type and batch, among the options whose
    /// cost in `priced` is within `tau`, the most room for state, counted up
    /// to `feas` (`(room, option index)`; none: negative infinity).
    fn state_weights(&self, priced: &Priced, tau: f64, feas: f64) -> Vec<Vec<(f64, usize)>> {
        self.types
            .iter()
            .enumerate()
            .map(|(t, to)| {
                (0..to.by_b.len())
                    .map(|b| {
                        let mut r = (f64::NEG_INFINITY, usize::MAX);
                        for (k, o) in to.by_b[b].iter().enumerate() {
                            if priced.cost[t][b][k] <= tau {
                                let w = o.cap.min(feas);
                                if w > r.0 {
                                    r = (w, k);
                                }
                            }
                        }
                        r
                    })
                    .collect()
            })
            .collect()
    }

    /// Max-plus knapsack over the ranks: the largest state sum that options
    /// of weights `w` ([`Search::state_weights`]) leave room for with all
    /// the global batch placed; with `keep`, also every rank's batch per
    /// cell of its window (the first cell, then the batches; for
    /// [`Search::backtrack`]).
    fn most_state(&self, w: &[Vec<(f64, usize)>], keep: bool) -> (f64, Vec<(usize, Vec<u32>)>) {
        let nb = self.big_b + 1;
        let g = self.rank_type.len();
        let allowed: Vec<Vec<usize>> = w
            .iter()
            .map(|wt| (0..wt.len()).filter(|&b| wt[b].0.is_finite()).collect())
            .collect();
        let top = |t: usize| allowed[t].last().map_or(0, |&b| b);
        // Samples the ranks after rank i can still take: a partial sum
        // below B minus that can never reach B, so it is not computed.
        let mut after = vec![0usize; g + 1];
        for i in (0..g).rev() {
            after[i] = after[i + 1] + top(self.rank_type[i]);
        }
        let mut dp = vec![f64::NEG_INFINITY; nb];
        dp[0] = 0.0;
        // The next rank's cells, and the window of the cells it last held
        // (only those are reset: the others are negative infinity).
        let mut nd = vec![f64::NEG_INFINITY; nb];
        let (mut dp_win, mut nd_win) = ((0usize, 0usize), (0usize, 0usize));
        let mut reach = 0usize;
        let mut args = Vec::new();
        // A rank's batches while it is walked, as wide as a cell so that
        // the compare-and-select runs in vector lanes.
        let mut arg = Vec::<u64>::new();
        for (i, &t) in self.rank_type.iter().enumerate() {
            let floor = self.big_b.saturating_sub(after[i + 1]);
            let hi_all = (reach + top(t)).min(nb - 1);
            nd[nd_win.0..=nd_win.1].fill(f64::NEG_INFINITY);
            if keep {
                arg.clear();
                arg.resize(hi_all.saturating_sub(floor) + 1, u32::MAX as u64);
            }
            for &b in &allowed[t] {
                let wb = w[t][b].0;
                let hi = (reach + b).min(nb - 1);
                let lo = floor.max(b);
                if lo > hi {
                    continue;
                }
                let (src, dst) = (&dp[lo - b..=hi - b], &mut nd[lo..=hi]);
                if keep {
                    // The first largest sum wins (batches ascending).
                    let bb = b as u64;
                    let ar = &mut arg[lo - floor..=hi - floor];
                    for ((d, &x), a) in dst.iter_mut().zip(src).zip(ar.iter_mut()) {
                        let v = x + wb;
                        let keep = pick(v > *d);
                        *d = f64::from_bits((d.to_bits() & !keep) | (v.to_bits() & keep));
                        *a = (*a & !keep) | (bb & keep);
                    }
                } else {
                    for (d, &x) in dst.iter_mut().zip(src) {
                        let v = x + wb;
                        *d = if v > *d { v } else { *d };
                    }
                }
            }
            reach = hi_all;
            std::mem::swap(&mut dp, &mut nd);
            nd_win = dp_win;
            dp_win = (floor.min(hi_all), hi_all);
            if keep {
                args.push((floor, arg.iter().map(|&b| b as u32).collect()));
            }
        }
        (dp[self.big_b], args)
    }

    /// The choice [`Search::most_state`] found: every rank's batch, walked
    /// back from the global batch through `args`, with its option in `w`.
    fn backtrack(&self, args: &[(usize, Vec<u32>)], w: &[Vec<(f64, usize)>]) -> Choice {
        let g = self.rank_type.len();
        let mut choice = vec![(0u32, 0u32); g];
        let mut y = self.big_b;
        for i in (0..g).rev() {
            let (floor, arg) = &args[i];
            let b = arg[y - floor] as usize;
            let t = self.rank_type[i];
            let o = &self.types[t].by_b[b][w[t][b].1];
            choice[i] = (o.batch, o.microbatches);
            y -= b;
        }
        choice
    }

    /// Largest state sum any plan leaves room for (for the infeasibility
    /// message), with no time limit.
    pub(super) fn max_state_room(&mut self) -> f64 {
        let nb = self.big_b + 1;
        let w: Vec<Vec<f64>> = self
            .types
            .iter()
            .map(|to| {
                (0..nb)
                    .map(|b| {
                        to.by_b.get(b).map_or(f64::NEG_INFINITY, |v| {
                            v.iter().map(|o| o.cap).fold(f64::NEG_INFINITY, f64::max)
                        })
                    })
                    .collect()
            })
            .collect();
        // Batches a type was tabulated for (larger ones never fit).
        let top: Vec<usize> = self.types.iter().map(|to| to.by_b.len()).collect();
        let mut dp = vec![f64::NEG_INFINITY; nb];
        dp[0] = 0.0;
        let mut reach = 0usize;
        for &t in &self.rank_type {
            let mut nd = vec![f64::NEG_INFINITY; nb];
            for b in 0..top[t].min(nb) {
                let wb = w[t][b];
                if !wb.is_finite() {
                    continue;
                }
                let hi = (reach + b).min(nb - 1);
                for (d, &x) in nd[b..=hi].iter_mut().zip(&dp[..=hi - b]) {
                    let v = x + wb;
                    if v > *d {
                        *d = v;
                    }
                }
            }
            reach = (reach + top[t].saturating_sub(1)).min(nb - 1);
            dp = nd;
        }
        dp[self.big_b]
    }
}
