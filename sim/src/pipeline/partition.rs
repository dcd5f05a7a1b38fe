//! The exact contiguous partition: `n` blocks into `p` stages, each a
//! non-empty run of consecutive blocks, minimising the slowest stage (the
//! pipeline's steady-state bottleneck), then the sum of the stages' times
//! (the fill and drain). A dynamic program over prefixes, `O(p n^2)` cost
//! lookups, as DeepSpeed's `partition_balanced` (which minimises the
//! spread of parameter counts instead) and Metis-style layer balancers do;
//! a stage that cannot hold a range (memory) costs `None` and is never
//! chosen.

/// A partition and its objective.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Blocks per stage, in order (each at least 1, summing to `n`).
    pub counts: Vec<u32>,
    /// Cost of the slowest stage.
    pub bottleneck: f64,
    /// Sum of the stages' costs.
    pub sum: f64,
}

/// The best partition of `n` blocks into `p` stages under `cost(stage,
/// first, count)` (blocks `first .. first + count`, 0-based; `None`:
/// the stage cannot hold them); `None` when no partition is feasible.
// Index loops read as the recurrence does (stage s, prefix ends i < j).
#[allow(clippy::needless_range_loop)]
pub fn min_max<F>(p: usize, n: usize, mut cost: F) -> Option<Partition>
where
    F: FnMut(usize, usize, usize) -> Option<f64>,
{
    if p == 0 || n < p {
        return None;
    }
    // best[j] after stage s: (bottleneck, sum) covering blocks 0..j.
    let inf = (f64::INFINITY, f64::INFINITY);
    let mut best = vec![inf; n + 1];
    // choice[s][j]: where stage s starts in the best cover of 0..j.
    let mut choice = vec![vec![usize::MAX; n + 1]; p];
    for j in 1..=n - (p - 1) {
        if let Some(c) = cost(0, 0, j) {
            best[j] = (c, c);
            choice[0][j] = 0;
        }
    }
    for s in 1..p {
        let mut next = vec![inf; n + 1];
        // Stage s ends at j (exclusive): at least s blocks before it, at
        // least p - 1 - s after.
        for j in s + 1..=n - (p - 1 - s) {
            let mut here = inf;
            let mut at = usize::MAX;
            for i in s..j {
                let prev = best[i];
                if !prev.0.is_finite() {
                    continue;
                }
                let Some(c) = cost(s, i, j - i) else { continue };
                let cand = (prev.0.max(c), prev.1 + c);
                if cand < here {
                    here = cand;
                    at = i;
                }
            }
            next[j] = here;
            choice[s][j] = at;
        }
        best = next;
    }
    let (bottleneck, sum) = best[n];
    if !bottleneck.is_finite() {
        return None;
    }
    let mut counts = vec![0u32; p];
    let mut j = n;
    for s in (0..p).rev() {
        let i = choice[s][j];
        counts[s] = (j - i) as u32;
        j = i;
    }
    Some(Partition {
        counts,
        bottleneck,
        sum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every composition of `n` into `p` positive parts.
    fn compositions(p: usize, n: usize, out: &mut Vec<Vec<usize>>, cur: &mut Vec<usize>) {
        if cur.len() + 1 == p {
            if n >= 1 {
                cur.push(n);
                out.push(cur.clone());
                cur.pop();
            }
            return;
        }
        for k in 1..=n.saturating_sub(p - cur.len() - 1) {
            cur.push(k);
            compositions(p, n - k, out, cur);
            cur.pop();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Random per-block, per-stage costs and per-stage capacities: the
        /// dynamic program's bottleneck equals the brute force's.
        #[test]
        fn optimal_against_brute_force(
            p in 1usize..=6,
            extra in 0usize..=18,
            seed in prop::collection::vec(0.1f64..10.0, 6 * 24),
            speed in prop::collection::vec(0.2f64..3.0, 6),
            cap in prop::collection::vec(1usize..=24, 6),
        ) {
            let n = (p + extra).min(24);
            let cost = |s: usize, first: usize, count: usize| -> Option<f64> {
                if count > cap[s] { return None; }
                Some((first..first + count).map(|b| seed[s * 24 + b]).sum::<f64>() / speed[s])
            };
            let mut all = Vec::new();
            compositions(p, n, &mut all, &mut Vec::new());
            let mut brute: Option<f64> = None;
            for c in &all {
                let mut at = 0;
                let mut worst = 0.0f64;
                let mut ok = true;
                for (s, &k) in c.iter().enumerate() {
                    match cost(s, at, k) {
                        Some(x) => worst = worst.max(x),
                        None => { ok = false; break; }
                    }
                    at += k;
                }
                if ok && brute.is_none_or(|b| worst < b) {
                    brute = Some(worst);
                }
            }
            let dp = min_max(p, n, cost);
            match (brute, dp) {
                (None, None) => {}
                (Some(b), Some(d)) => {
                    prop_assert!((b - d.bottleneck).abs() <= 1e-9 * b.max(1.0), "brute {b} dp {}", d.bottleneck);
                    prop_assert_eq!(d.counts.iter().map(|&k| k as usize).sum::<usize>(), n);
                    prop_assert!(d.counts.iter().all(|&k| k >= 1));
                    // The counts it returns achieve the bottleneck it claims.
                    let mut at = 0;
                    let mut worst = 0.0f64;
                    for (s, &k) in d.counts.iter().enumerate() {
                        worst = worst.max(cost(s, at, k as usize).unwrap());
                        at += k as usize;
                    }
                    prop_assert!((worst - d.bottleneck).abs() <= 1e-9 * worst.max(1.0));
                }
                (b, d) => prop_assert!(false, "brute {b:?} dp {d:?}"),
            }
        }
    }

    #[test]
    fn equal_stages_split_equal_blocks() {
        let p = min_max(4, 32, |_, _, k| Some(k as f64)).unwrap();
        assert_eq!(p.counts, vec![8, 8, 8, 8]);
        assert_eq!(p.bottleneck, 8.0);
        // A stage twice as fast takes twice the blocks.
        let p = min_max(2, 30, |s, _, k| {
            Some(k as f64 / if s == 0 { 2.0 } else { 1.0 })
        })
        .unwrap();
        assert_eq!(p.counts, vec![20, 10]);
        assert!(min_max(5, 4, |_, _, k| Some(k as f64)).is_none());
        assert!(min_max(2, 4, |_, _, k| (k <= 1).then_some(1.0)).is_none());
    }
}
