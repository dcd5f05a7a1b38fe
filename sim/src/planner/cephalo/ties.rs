//! The tie policy of the least-total pass ([`flat_plan`]): which plan wins
//! among plans of exactly equal total rank time, decided per GPU type (its
//! identical ranks share one set of tied batches) and found with
//! word-parallel subset sums instead of the min-plus programme.
//!
//! Where many batches cost a rank exactly the same (the rank time is
//! bound by communication, not by its samples: the Lagrangian multiplier
//! of the batch sum is near zero), nearly every cell of the exact dynamic
//! programme ties with the optimum and none can be pruned, so its pass
//! over the ranks costs GPUs x batch units x batches, the square of the
//! GPU count. Policy: at the multiplier `lam` of the Lagrangian bound, if
//! every type's batches whose `w - lam b` lies within [`TIE_TOL`] of the
//! type's least all have one same rank time `w` (the type's tied set), and
//! some choice from the tied sets adds up to the global batch, the plan is
//! taken from the tied sets: going back from the last rank, each rank
//! takes the smallest batch of its type's set that leaves a sum the ranks
//! before it can make (with consecutive sets, ranks of one type hold
//! non-increasing batches in rank order; the plan depends only on the
//! sequence of GPU types, not on which GPU of a type is where). Every rank
//! then lies within [`TIE_TOL`] of its Lagrangian least, so the plan's
//! total is within `G x TIE_TOL` (relative to the rank times) of the
//! Lagrangian bound, hence of the optimum; and since every such plan sums
//! the same rank times in the same order, it is the plan the exact
//! programme picks among them (the first smallest sum, batches ascending),
//! so plans do not change. The sums the ranks before each rank can make
//! are bitsets (GPUs x batch units / 64 words, each type's set added run
//! of consecutive batches by run). Otherwise (tied batches of different
//! rank times: a slope equal to the multiplier) the exact programme runs.

use super::bitset::sum_copies;

/// Relative tolerance (on a type's rank times and `lam x b`) within which
/// a batch counts as Lagrangian-optimal for `flat_plan`: 1e-12, as the
/// rounding allowance of the exact pass's bound.
pub const TIE_TOL: f64 = 1e-12;

/// The canonical plan of the module doc (per rank, its batch in units)
/// among plans whose every rank of type `t` takes a batch of `allowed[t]`
/// (ascending), rank time `best[t][b].0` (ms), the batches adding up to
/// `big_b` units, at the Lagrangian multiplier `lam` (ms per unit). `None`
/// where the policy does not apply (a type's Lagrangian-optimal batches
/// differ in rank time, or no plan of them makes `big_b`): the exact
/// programme decides.
pub(super) fn flat_plan(
    rank_type: &[usize],
    big_b: usize,
    best: &[Vec<(f64, usize)>],
    allowed: &[Vec<usize>],
    lam: f64,
) -> Option<Vec<usize>> {
    let mut counts = vec![0usize; allowed.len()];
    for &t in rank_type {
        counts[t] += 1;
    }
    // Per type with ranks: its Lagrangian-optimal batches (ascending).
    let mut sets = vec![Vec::new(); allowed.len()];
    for (t, a) in allowed.iter().enumerate() {
        if counts[t] > 0 {
            sets[t] = flat_set(&best[t], a, lam)?;
        }
    }
    let ends = |end: fn(&Vec<usize>) -> Option<&usize>| -> usize {
        (0..sets.len())
            .map(|t| counts[t] * end(&sets[t]).copied().unwrap_or(0))
            .sum()
    };
    if !(ends(|s| s.first())..=ends(|s| s.last())).contains(&big_b) {
        return None;
    }
    let sums = prefix_sums(rank_type, &sets, big_b);
    let words = (big_b + 1).div_ceil(64);
    let has = |i: usize, y: usize| (sums[i * words + y / 64] >> (y % 64)) & 1 == 1;
    if !has(rank_type.len(), big_b) {
        return None;
    }
    // Going back from the last rank: the smallest batch that leaves a sum
    // the ranks before it can make.
    let mut y = big_b;
    let mut plan = vec![0usize; rank_type.len()];
    for (i, &t) in rank_type.iter().enumerate().rev() {
        let b = *sets[t].iter().find(|&&b| b <= y && has(i, y - b))?;
        plan[i] = b;
        y -= b;
    }
    Some(plan)
}

/// Per rank `i` (and after the last), the sums up to `big_b` the ranks
/// before it can make with the batches `sets` of their types: bitsets of
/// `(big_b + 1).div_ceil(64)` words, one after another. A type's batches
/// are added run of consecutive batches by run (a shift and a spread).
fn prefix_sums(rank_type: &[usize], sets: &[Vec<usize>], big_b: usize) -> Vec<u64> {
    let words = (big_b + 1).div_ceil(64);
    let runs: Vec<Vec<Vec<usize>>> = sets
        .iter()
        .map(|s| {
            let mut runs: Vec<Vec<usize>> = Vec::new();
            for &b in s {
                match runs.last_mut() {
                    Some(r) if r.last() == Some(&(b - 1)) => r.push(b),
                    _ => runs.push(vec![b]),
                }
            }
            runs
        })
        .collect();
    let mut sums = vec![0u64; (rank_type.len() + 1) * words];
    sums[0] = 1;
    for (i, &t) in rank_type.iter().enumerate() {
        let (done, next) = sums.split_at_mut((i + 1) * words);
        let cur = &done[i * words..];
        for run in &runs[t] {
            let add = sum_copies(cur, run, 1);
            for (d, a) in next[..words].iter_mut().zip(&add) {
                *d |= a;
            }
        }
        // Sums above `big_b` are dropped (the last word's spare bits).
        if big_b % 64 != 63 {
            next[words - 1] &= (1u64 << (big_b % 64 + 1)) - 1;
        }
    }
    sums
}

/// The batches of `allowed` (ascending) whose `w - lam b` (`w` from
/// `costs`) lies within [`TIE_TOL`] of their least: `None` unless they are
/// of one same rank time.
fn flat_set(costs: &[(f64, usize)], allowed: &[usize], lam: f64) -> Option<Vec<usize>> {
    let slack = |b: usize| costs[b].0 - lam * b as f64;
    let least = allowed
        .iter()
        .map(|&b| slack(b))
        .fold(f64::INFINITY, f64::min);
    let scale = allowed
        .iter()
        .map(|&b| costs[b].0.abs() + (lam * b as f64).abs())
        .fold(0.0, f64::max);
    if !least.is_finite() || !scale.is_finite() {
        return None;
    }
    let tol = TIE_TOL * scale;
    let near: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|&b| slack(b) <= least + tol)
        .collect();
    let w = costs[*near.first()?].0;
    near.iter().all(|&b| costs[b].0 == w).then_some(near)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two types of flat costs: ranks of one type get non-increasing
    /// batches in rank order, the plan depends only on the type sequence.
    #[test]
    fn flat_costs_give_the_canonical_plan() {
        let best = vec![vec![(5.0, 0); 4], vec![(7.0, 0); 3]];
        let allowed = vec![vec![0, 1, 2, 3], vec![0, 1, 2]];
        let plan = flat_plan(&[0, 1, 0, 1], 6, &best, &allowed, 0.0).unwrap();
        assert_eq!(plan, vec![3, 2, 1, 0]);
        // A hole in a type's batches: still the smallest batch that lets
        // the ranks before complete the batch, from the last rank back.
        let holes = vec![vec![0, 3], vec![0, 1, 2]];
        let plan = flat_plan(&[0, 1, 0, 1], 6, &best, &holes, 0.0).unwrap();
        assert_eq!(plan, vec![3, 0, 3, 0]);
        // Batches of different times among the tied ones: the exact pass.
        let sloped = vec![vec![(5.0, 0), (6.0, 0)], vec![(7.0, 0); 3]];
        let two = vec![vec![0, 1], vec![0, 1, 2]];
        assert_eq!(flat_plan(&[0, 1], 2, &sloped, &two, 1.0), None);
    }
}
