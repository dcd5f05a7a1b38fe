//! Steps 2 and 4 of the search: the bottleneck assignment (binary search on
//! the threshold over the candidate costs, each check a bitset subset-sum)
//! and the min-plus pass that breaks its ties by the least total rank time,
//! also under slightly relaxed bottlenecks.

use super::tables::{Choice, Search};

/// `dst |= src << s` on bitsets of `u64` words (bit `k` of the set is bit
/// `k % 64` of word `k / 64`).
fn shl_or(dst: &mut [u64], src: &[u64], s: usize) {
    let (ws, bs) = (s / 64, s % 64);
    let n = dst.len();
    if ws >= n {
        return;
    }
    if bs == 0 {
        for i in ws..n {
            dst[i] |= src[i - ws];
        }
    } else {
        dst[ws] |= src[0] << bs;
        for i in ws + 1..n {
            dst[i] |= (src[i - ws] << bs) | (src[i - ws - 1] >> (64 - bs));
        }
    }
}

impl Search<'_, '_> {
    /// Bottleneck search without the state-sum constraint: options need a
    /// cap of at least `min_cap` (`None`: any option that fits with no
    /// state). Returns the optimal threshold and (when `want_plan`) the
    /// least-total-time plan under it.
    pub(super) fn solve_bottleneck(
        &mut self,
        cost_level: f64,
        min_cap: Option<f64>,
        want_plan: bool,
    ) -> Option<(f64, Option<Choice>)> {
        let best = self.best_table(cost_level, min_cap);
        let nb = self.big_b + 1;
        let mut th: Vec<f64> = best
            .iter()
            .flatten()
            .map(|x| x.0)
            .filter(|c| c.is_finite())
            .collect();
        th.sort_by(f64::total_cmp);
        th.dedup();
        if th.is_empty() {
            return None;
        }
        let words = nb.div_ceil(64);
        let feasible = |tau: f64| -> bool {
            let allowed: Vec<Vec<usize>> = best
                .iter()
                .map(|v| (0..v.len()).filter(|&b| v[b].0 <= tau).collect())
                .collect();
            let mut cur = vec![0u64; words];
            cur[0] = 1;
            let mut nxt = vec![0u64; words];
            for &t in &self.rank_type {
                nxt.iter_mut().for_each(|w| *w = 0);
                for &b in &allowed[t] {
                    shl_or(&mut nxt, &cur, b);
                }
                std::mem::swap(&mut cur, &mut nxt);
            }
            (cur[self.big_b / 64] >> (self.big_b % 64)) & 1 == 1
        };
        let (mut lo, mut hi) = (0usize, th.len() - 1);
        self.stats.subproblems += 1;
        if !feasible(th[hi]) {
            return None;
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            self.stats.subproblems += 1;
            if feasible(th[mid]) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let tau = th[lo];
        if !want_plan {
            return Some((tau, None));
        }
        let plan = self.min_sum(&best, tau);
        plan.map(|p| (tau, Some(p)))
    }

    /// Min-plus pass: the plan of least total rank time among plans whose
    /// every rank is within `tau` (`None` when there is none).
    pub(super) fn min_sum(&mut self, best: &[Vec<(f64, usize)>], tau: f64) -> Option<Choice> {
        self.stats.subproblems += 1;
        let allowed: Vec<Vec<usize>> = best
            .iter()
            .map(|bt| (0..bt.len()).filter(|&b| bt[b].0 <= tau).collect())
            .collect();
        let top = |t: usize| allowed[t].last().map_or(0, |&b| b);
        // Each rank's choice is kept for the cells it can reach: as u16 when
        // every batch fits (a quarter of the memory of u32 at thousands of
        // GPUs), else u32.
        if (0..allowed.len()).all(|t| top(t) < u16::MAX as usize) {
            self.min_sum_with::<u16>(best, &allowed)
        } else {
            self.min_sum_with::<u32>(best, &allowed)
        }
    }

    /// [`Search::min_sum`] with choices stored as `A`.
    fn min_sum_with<A: Copy + TryFrom<usize> + Into<u64>>(
        &self,
        best: &[Vec<(f64, usize)>],
        allowed: &[Vec<usize>],
    ) -> Option<Choice> {
        let nb = self.big_b + 1;
        let g = self.rank_type.len();
        let top = |t: usize| allowed[t].last().map_or(0, |&b| b);
        // Samples the ranks after rank i can still take: a partial sum below
        // B minus that can never reach B, so it is not computed (as in the
        // knapsack's pass).
        let mut after = vec![0usize; g + 1];
        for i in (0..g).rev() {
            after[i] = after[i + 1] + top(self.rank_type[i]);
        }
        let mut dp = vec![f64::INFINITY; nb];
        dp[0] = 0.0;
        let mut reach = 0usize;
        // Per rank: the first cell of its window and the batch chosen there.
        let mut args: Vec<(usize, Vec<A>)> = Vec::with_capacity(g);
        let none = A::try_from(0).ok()?;
        for (i, &t) in self.rank_type.iter().enumerate() {
            let floor = self.big_b.saturating_sub(after[i + 1]);
            let hi_all = (reach + top(t)).min(nb - 1);
            let mut nd = vec![f64::INFINITY; nb];
            let mut arg = vec![none; hi_all.saturating_sub(floor) + 1];
            for &b in &allowed[t] {
                let wb = best[t][b].0;
                let hi = (reach + b).min(nb - 1);
                let lo = floor.max(b);
                if lo > hi {
                    continue;
                }
                let bb = A::try_from(b).ok()?;
                let (src, dst) = (&dp[lo - b..=hi - b], &mut nd[lo..=hi]);
                let ar = &mut arg[lo - floor..=hi - floor];
                for ((d, &x), a) in dst.iter_mut().zip(src).zip(ar.iter_mut()) {
                    let v = x + wb;
                    if v < *d {
                        *d = v;
                        *a = bb;
                    }
                }
            }
            reach = hi_all;
            dp = nd;
            args.push((floor, arg));
        }
        if !dp[self.big_b].is_finite() {
            return None;
        }
        let mut choice = vec![(0u32, 0u32); g];
        let mut y = self.big_b;
        for i in (0..g).rev() {
            let (floor, arg) = &args[i];
            let b = arg[y - floor].into() as usize;
            let t = self.rank_type[i];
            let o = &self.types[t].by_b[b][best[t][b].1];
            choice[i] = (o.batch, o.microbatches);
            y -= b;
        }
        Some(choice)
    }

    /// Near-optimal plans: the least total rank time under slightly relaxed
    /// bottlenecks `tau x (1 + d)` (more balanced plans the simulator may
    /// prefer, since it synchronises every phase separately).
    pub(super) fn relaxed(&mut self, level: f64, tau: f64, slack: &[f64]) -> Vec<Choice> {
        let best = self.best_table(level, Some(level));
        slack
            .iter()
            .filter_map(|d| self.min_sum(&best, tau * (1.0 + d)))
            .collect()
    }
}
