//! Steps 2 and 4 of the search: the bottleneck assignment (binary search on
//! the threshold over the candidate costs, each check a bitset subset-sum)
//! and the min-plus pass that breaks its ties by the least total rank time,
//! also under slightly relaxed bottlenecks.

use super::bitset::sum_copies;
use super::tables::{Choice, Search};

/// All ones when `yes`, else zero: a mask that selects without a branch,
/// so the dynamic programmes' compare-and-select loops run in vector
/// lanes (a branch there is mispredicted on about every other cell).
pub(super) fn pick(yes: bool) -> u64 {
    (yes as u64).wrapping_neg()
}

/// Per rank of a min-plus pass: the first cell of its window and the batch
/// chosen at each cell of it.
type Windows<A> = Vec<(usize, Vec<A>)>;

/// A bound on the min-plus programme of [`Search::min_sum`] that rules out
/// cells no plan of total at most [`Prune::most`] passes through, without
/// changing the programme's answer. For a multiplier `lam`, the ranks
/// after rank `i` place the `B - y` samples left at a cost of at least
/// `rest[i] + lam (B - y)`, `rest[i]` the sum over those ranks of the least
/// `w - lam b` of their options (Lagrangian relaxation of the sum
/// constraint). A cell whose total plus that bound exceeds `most` is ruled
/// out. The bound is consistent (a cell's bound is at most an option's cost
/// plus its successor's), so every cell whose best predecessor is ruled
/// out is ruled out itself: the cells kept keep the values and choices of
/// the full programme, ties included, and so does the plan at `B` once
/// `most` is at least its total. Floating-point sums round, so the bound
/// allows `step` per rank still to come, far above their rounding.
struct Prune {
    /// The multiplier, ms per batch unit.
    lam: f64,
    /// Per rank: the least `w - lam b` summed over the ranks after it, ms.
    rest: Vec<f64>,
    /// The global batch in units.
    big_b: f64,
    /// The largest total a plan may have, ms.
    most: f64,
    /// The rounding allowance per rank still to add, ms.
    step: f64,
}

/// Relative slacks over the Lagrangian lower bound tried as a plan's most
/// total, smallest first (then no bound): a pass is cheap when its slack
/// holds the optimum and rules out more cells the smaller it is. The
/// relaxation is tight here: in the 320 passes of BERT-Large at 4 per GPU
/// on 1,024 GPUs of the 5-type mixed cluster every least total lay within
/// 1e-6 of the bound, those inspected within 1e-10; so the first slack is
/// 1e-9 and the others fall back by factors of 1,000 (a pass that misses
/// costs one more pass, under the total it found).
const PRUNE_SLACKS: [f64; 3] = [1e-9, 1e-6, 1e-3];

/// Rounding allowance of [`Prune`] per rank, relative to the magnitude of
/// the sums: 1e-12, about 4,500 times the rounding of one f64 addition
/// (2^-53), which the few additions of a rank's step stay far below.
const PRUNE_ROUNDING: f64 = 1e-12;

impl Prune {
    /// The bounds to try for the options `allowed` of costs `best`, in
    /// reverse order (pop the next): most total from the smallest slack of
    /// [`PRUNE_SLACKS`] over the best Lagrangian bound to the largest.
    fn slacks(
        rank_type: &[usize],
        big_b: usize,
        best: &[Vec<(f64, usize)>],
        allowed: &[Vec<usize>],
    ) -> Vec<Prune> {
        let mut counts = vec![0usize; allowed.len()];
        for &t in rank_type {
            counts[t] += 1;
        }
        if (0..allowed.len()).any(|t| counts[t] > 0 && allowed[t].is_empty()) {
            return Vec::new();
        }
        // h_t(lam) and the batch that attains it.
        let least = |t: usize, lam: f64| {
            let mut r = (f64::INFINITY, 0usize);
            for &b in &allowed[t] {
                let v = best[t][b].0 - lam * b as f64;
                if v < r.0 {
                    r = (v, b);
                }
            }
            r
        };
        // The best multiplier: the dual is concave, its slope B minus the
        // batches the ranks' least options take; bisect on that slope.
        let wmax = allowed
            .iter()
            .enumerate()
            .flat_map(|(t, a)| a.iter().map(move |&b| best[t][b].0.abs()))
            .fold(0.0, f64::max);
        let (mut lo, mut hi) = (-2.0 * wmax - 2.0, 2.0 * wmax + 2.0);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            let took: usize = (0..allowed.len())
                .map(|t| counts[t] * least(t, mid).1)
                .sum();
            if took < big_b {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let lam = 0.5 * (lo + hi);
        let g = rank_type.len();
        let mut rest = vec![0.0; g];
        for i in (0..g.saturating_sub(1)).rev() {
            rest[i] = rest[i + 1] + least(rank_type[i + 1], lam).0;
        }
        let big_b = big_b as f64;
        let dual = rest
            .first()
            .map_or(0.0, |&r| r + least(rank_type[0], lam).0)
            + lam * big_b;
        if !dual.is_finite() {
            return Vec::new();
        }
        let size = dual.abs()
            + rest.iter().map(|r| r.abs()).fold(0.0, f64::max)
            + (lam * big_b).abs()
            + wmax
            + 1.0;
        PRUNE_SLACKS
            .iter()
            .rev()
            .map(|d| Prune {
                lam,
                rest: rest.clone(),
                big_b,
                most: dual + d * (dual.abs() + 1.0),
                step: PRUNE_ROUNDING * (size + d * (dual.abs() + 1.0)),
            })
            .collect()
    }

    /// This bound with most total `total` (the total of a plan found).
    fn under(self, total: f64) -> Prune {
        let step = self.step.max(PRUNE_ROUNDING * total.abs());
        Prune {
            most: total,
            step,
            ..self
        }
    }

    /// Whether the cell `y` of rank `i`, of total `v`, is ruled out.
    fn rules_out(&self, i: usize, y: usize, v: f64) -> bool {
        let left = (self.rest.len() - i) as f64;
        v + (self.rest[i] + self.lam * (self.big_b - y as f64)) > self.most + left * self.step
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
        let counts = self.type_counts();
        let feasible = |tau: f64| -> bool {
            let allowed: Vec<Vec<usize>> = best
                .iter()
                .map(|v| (0..v.len()).filter(|&b| v[b].0 <= tau).collect())
                .collect();
            let mut cur = vec![0u64; words];
            cur[0] = 1;
            for (t, &m) in counts.iter().enumerate() {
                cur = sum_copies(&cur, &allowed[t], m);
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
    /// every rank is within `tau` (`None` when there is none), by
    /// [`least_total`].
    pub(super) fn min_sum(&mut self, best: &[Vec<(f64, usize)>], tau: f64) -> Option<Choice> {
        self.stats.subproblems += 1;
        let allowed: Vec<Vec<usize>> = best
            .iter()
            .map(|bt| (0..bt.len()).filter(|&b| bt[b].0 <= tau).collect())
            .collect();
        let batches = least_total(&self.rank_type, self.big_b, best, &allowed)?;
        let choice = batches
            .iter()
            .zip(&self.rank_type)
            .map(|(&b, &t)| {
                let o = &self.types[t].by_b[b][best[t][b].1];
                (o.batch, o.microbatches)
            })
            .collect();
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

/// The plan of least total rank time whose every rank takes one of the
/// batches `allowed` for its type (`best[t][b].0`: the rank time of batch
/// unit `b` on type `t`, ms) with the batches adding up to `big_b` units,
/// as every rank's batch (`None`: no such plan). Where the tie policy of
/// [`super::ties`] applies (every type's Lagrangian-optimal batches cost
/// the same), its canonical plan, found per type in time linear in the
/// ranks; otherwise [`exact_least_total`].
pub(super) fn least_total(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
) -> Option<Vec<usize>> {
    let tries = Prune::slacks(rank_type, big_b, best, allowed);
    if let Some(p) = tries.first() {
        if let Some(plan) = super::ties::flat_plan(rank_type, big_b, best, allowed, p.lam) {
            return Some(plan);
        }
    }
    exact_with(rank_type, big_b, best, allowed, tries)
}

/// [`least_total`] by the exact dynamic programme over the ranks in order
/// (no tie policy: the first smallest floating-point sum in rank order
/// wins); what the tie policy is checked against.
#[cfg(test)]
pub(super) fn exact_least_total(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
) -> Option<Vec<usize>> {
    let tries = Prune::slacks(rank_type, big_b, best, allowed);
    exact_with(rank_type, big_b, best, allowed, tries)
}

/// [`exact_least_total`] under the bounds `tries` (popped from the back).
fn exact_with(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
    tries: Vec<Prune>,
) -> Option<Vec<usize>> {
    let top = |t: usize| allowed[t].last().map_or(0, |&b| b);
    // Each rank's choice is kept for the cells it can reach: as u16 when
    // every batch fits (a quarter of the memory of u32 at thousands of
    // GPUs), else u32.
    if (0..allowed.len()).all(|t| top(t) < u16::MAX as usize) {
        min_sum_with::<u16>(rank_type, big_b, best, allowed, tries)
    } else {
        min_sum_with::<u32>(rank_type, big_b, best, allowed, tries)
    }
}

/// [`exact_least_total`] with choices stored as `A`: passes of the
/// dynamic programme that drop the cells a [`Prune`] bound rules out,
/// with bounds from tight to none, until one's result proves it is the
/// full programme's.
fn min_sum_with<A: Copy + TryFrom<usize> + Into<u64>>(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
    mut tries: Vec<Prune>,
) -> Option<Vec<usize>> {
    let g = rank_type.len();
    let (total, args) = loop {
        let bound = tries.pop();
        let (total, args) = min_sum_pass::<A>(rank_type, big_b, best, allowed, bound.as_ref())?;
        match bound {
            None => break (total, args),
            Some(p) if total <= p.most => break (total, args),
            // A plan of this total exists, so the least is no more:
            // one more pass under it is exact.
            Some(p) if total.is_finite() => tries.push(p.under(total)),
            Some(_) => {}
        }
    };
    if !total.is_finite() {
        return None;
    }
    let mut batches = vec![0usize; g];
    let mut y = big_b;
    for i in (0..g).rev() {
        let (first, arg) = &args[i];
        let b = arg[y - first].into() as usize;
        batches[i] = b;
        y -= b;
    }
    Some(batches)
}

/// One pass of the min-plus programme over the ranks in order, each
/// rank's cells kept as a window of consecutive sums, trimmed at both
/// ends of the cells `bound` rules out (`None`: only the sums that
/// cannot reach the global batch). Returns the least total at the
/// global batch (infinite: none within the bound) and per rank its
/// first cell and the batch chosen at each cell; `None` when a batch
/// does not fit `A`.
fn min_sum_pass<A: Copy + TryFrom<usize> + Into<u64>>(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
    bound: Option<&Prune>,
) -> Option<(f64, Windows<A>)> {
    let nb = big_b + 1;
    let g = rank_type.len();
    let top = |t: usize| allowed[t].last().map_or(0, |&b| b);
    // Samples the ranks after rank i can still take: a partial sum below
    // B minus that can never reach B, so it is not computed (as in the
    // knapsack's pass).
    let mut after = vec![0usize; g + 1];
    for i in (0..g).rev() {
        after[i] = after[i + 1] + top(rank_type[i]);
    }
    let mut dp = vec![f64::INFINITY; nb];
    dp[0] = 0.0;
    let mut nd = vec![f64::INFINITY; nb];
    // The cells of the last rank that may be finite: `lo..=hi`.
    let (mut lo, mut hi) = (0usize, 0usize);
    let mut args: Vec<(usize, Vec<A>)> = Vec::with_capacity(g);
    // A rank's batches while it is walked, as wide as a cell so that the
    // compare-and-select below runs in vector lanes.
    let mut arg = Vec::<u64>::new();
    for (i, &t) in rank_type.iter().enumerate() {
        let (Some(&first), Some(&last)) = (allowed[t].first(), allowed[t].last()) else {
            return Some((f64::INFINITY, args));
        };
        let nlo = big_b.saturating_sub(after[i + 1]).max(lo + first);
        let nhi = (hi + last).min(nb - 1);
        if nlo > nhi {
            return Some((f64::INFINITY, args));
        }
        nd[nlo..=nhi].fill(f64::INFINITY);
        arg.clear();
        arg.resize(nhi - nlo + 1, 0);
        for &b in &allowed[t] {
            let wb = best[t][b].0;
            let (l, h) = (nlo.max(lo + b), nhi.min(hi + b));
            if l > h {
                continue;
            }
            A::try_from(b).ok()?;
            let bb = b as u64;
            let (src, dst) = (&dp[l - b..=h - b], &mut nd[l..=h]);
            let ar = &mut arg[l - nlo..=h - nlo];
            // The first smallest sum wins (batches ascending), as a
            // branch would keep it.
            for ((d, &x), a) in dst.iter_mut().zip(src).zip(ar.iter_mut()) {
                let v = x + wb;
                let keep = pick(v < *d);
                *d = f64::from_bits((d.to_bits() & !keep) | (v.to_bits() & keep));
                *a = (*a & !keep) | (bb & keep);
            }
        }
        let out = |y: usize| !nd[y].is_finite() || bound.is_some_and(|p| p.rules_out(i, y, nd[y]));
        let (mut l, mut h) = (nlo, nhi);
        while l <= h && out(l) {
            l += 1;
        }
        while h > l && out(h) {
            h -= 1;
        }
        if l > h {
            return Some((f64::INFINITY, args));
        }
        let kept = arg[l - nlo..=h - nlo]
            .iter()
            .map(|&b| A::try_from(b as usize).ok())
            .collect::<Option<Vec<A>>>()?;
        args.push((l, kept));
        std::mem::swap(&mut dp, &mut nd);
        (lo, hi) = (l, h);
    }
    let total = if (lo..=hi).contains(&big_b) {
        dp[big_b]
    } else {
        f64::INFINITY
    };
    Some((total, args))
}

#[cfg(test)]
mod tests {
    use super::super::ties::TIE_TOL;
    use super::*;

    /// A small seeded generator (xorshift64*), so the property test needs
    /// no dependency and repeats exactly.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in `0..n`.
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A random instance: rank types, per type the rank time of every
    /// batch unit (flat up to a knee, then rising or flat, with steps),
    /// the allowed batches (consecutive or with holes) and a global batch.
    type Instance = (Vec<usize>, Vec<Vec<(f64, usize)>>, Vec<Vec<usize>>, usize);

    fn instance(r: &mut Rng) -> Instance {
        let nt = 1 + r.below(4);
        let g = 1 + r.below(12);
        let rank_type: Vec<usize> = (0..g).map(|_| r.below(nt)).collect();
        let mut best = Vec::new();
        let mut allowed = Vec::new();
        for _ in 0..nt {
            let len = 1 + r.below(10);
            // Levels shared across types now and then (ties between types).
            let base = 100.0 + 0.25 * r.below(4) as f64;
            let knee = r.below(len + 1);
            let mut w = base;
            let mut costs = Vec::new();
            for b in 0..len {
                if b > knee {
                    w += [0.0, 0.5, 1.0 / 3.0, 2.0][r.below(4)];
                }
                costs.push((w, 0usize));
            }
            let holes = r.below(4) == 0;
            let a: Vec<usize> = (0..len).filter(|_| !holes || r.below(3) > 0).collect();
            best.push(costs);
            allowed.push(a);
        }
        let most: usize = rank_type
            .iter()
            .map(|&t| allowed[t].last().copied().unwrap_or(0))
            .sum();
        let big_b = r.below(most + 2);
        (rank_type, best, allowed, big_b)
    }

    /// The total rank time of `plan`, summed in rank order (ms).
    fn total(plan: &[usize], rank_type: &[usize], best: &[Vec<(f64, usize)>]) -> f64 {
        plan.iter()
            .zip(rank_type)
            .map(|(&b, &t)| best[t][b].0)
            .sum()
    }

    /// The grouped pass (the tie policy where it applies) against the
    /// exact pass over the ranks one by one, on seeded random small
    /// clusters: the same feasibility, plans that place the global batch
    /// within the allowed batches, the same least total within the
    /// policy's tolerance, and where the policy applied the very plan the
    /// exact pass picks.
    #[test]
    fn grouped_pass_matches_the_exact_pass() {
        let mut r = Rng(0x5eed_cafe_f00d_1234);
        let mut applied = 0;
        for _ in 0..4000 {
            let (rank_type, best, allowed, big_b) = instance(&mut r);
            let exact = exact_least_total(&rank_type, big_b, &best, &allowed);
            let grouped = least_total(&rank_type, big_b, &best, &allowed);
            assert_eq!(exact.is_some(), grouped.is_some(), "{rank_type:?} {big_b}");
            let (Some(e), Some(p)) = (exact, grouped) else {
                continue;
            };
            assert_eq!(p.iter().sum::<usize>(), big_b);
            for (&b, &t) in p.iter().zip(&rank_type) {
                assert!(allowed[t].contains(&b));
            }
            let (te, tp) = (total(&e, &rank_type, &best), total(&p, &rank_type, &best));
            let tol = TIE_TOL * rank_type.len() as f64 * te.abs().max(1.0);
            assert!((tp - te).abs() <= tol, "{tp} vs {te}");
            let tried = (0..allowed.len()).all(|t| !allowed[t].is_empty());
            if tried
                && super::super::ties::flat_plan(&rank_type, big_b, &best, &allowed, 0.0).is_some()
            {
                applied += 1;
                assert_eq!(p, e, "{rank_type:?} {big_b} {allowed:?}");
            }
        }
        assert!(
            applied > 200,
            "the policy applied to only {applied} instances"
        );
    }
}
