//! What-if questions answered from a simulated plan: how long and how much
//! a token budget costs ([`train_cost`]), and the smallest GPU count that
//! fits and trains ([`min_gpus`], a search over counts with the caller's
//! judgement of each). Thin layers over the planners and the simulator the
//! `cephalo whatif` subcommands and the studies share.
//!
//! Units: tokens, seconds, days, GPU-hours, USD.

use crate::cluster::Cluster;
use crate::error::SpecError;
use crate::report::Report;
use serde::Serialize;

/// Time and money to train on a token budget at a plan's throughput.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainCost {
    /// Tokens to train on.
    pub tokens: f64,
    /// The plan's simulated throughput, tokens/s.
    pub tokens_per_s: f64,
    /// Wall-clock days (tokens / throughput; no restarts or evaluation).
    pub days: f64,
    /// GPU-hours (days x 24 x GPUs).
    pub gpu_hours: f64,
    /// The whole cluster's price per hour, USD.
    pub price_per_hour_usd: f64,
    /// Cost of the run, USD.
    pub usd: f64,
}

/// [`TrainCost`] of `tokens` on the plan `report` simulated on `cluster`.
/// Fails naming the GPUs without a price (the cost needs every one; a
/// cluster file's `price_per_hour_usd` gives it), for a plan that runs
/// out of memory or trains nothing, and for a token count that is not a
/// positive number.
pub fn train_cost(report: &Report, cluster: &Cluster, tokens: f64) -> Result<TrainCost, SpecError> {
    if !(tokens.is_finite() && tokens > 0.0) {
        return Err(SpecError::invalid(
            "--tokens",
            "tokens",
            format!("expected a positive token count, got {tokens}"),
        ));
    }
    if report.oom || report.tokens_per_s.is_nan() || report.tokens_per_s <= 0.0 {
        return Err(SpecError::invalid(
            "the plan",
            "oom",
            "the plan runs out of memory or trains nothing: no time or cost to give",
        ));
    }
    let unpriced: Vec<String> = cluster
        .gpus
        .iter()
        .filter(|g| g.price_per_hour_usd.is_none())
        .map(|g| g.spec.name.clone())
        .collect();
    if !unpriced.is_empty() {
        return Err(SpecError::invalid(
            "the cluster",
            "price_per_hour_usd",
            format!(
                "the cost needs a price for every GPU; {} {} none (no public list price in the catalog): give price_per_hour_usd in a cluster file's GPU group",
                crate::lists::name_runs(&unpriced),
                if unpriced.len() == 1 { "has" } else { "have" }
            ),
        ));
    }
    let price: f64 = cluster
        .gpus
        .iter()
        .filter_map(|g| g.price_per_hour_usd)
        .sum();
    let seconds = tokens / report.tokens_per_s;
    let hours = seconds / 3600.0;
    Ok(TrainCost {
        tokens,
        tokens_per_s: report.tokens_per_s,
        days: hours / 24.0,
        gpu_hours: hours * cluster.len() as f64,
        price_per_hour_usd: price,
        usd: hours * price,
    })
}

/// One GPU count tried by [`min_gpus`] and whether it fits and trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tried {
    /// GPUs.
    pub gpus: u32,
    /// Whether a plan fits and trains on them.
    pub fits: bool,
}

/// The counts [`min_gpus`] may try: `1, 2, 4, ...` up to one node of
/// `per_node`, then whole nodes (what clouds rent) up to `max`.
pub fn candidate_counts(per_node: u32, max: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let mut n = 1;
    while n < per_node && n <= max {
        v.push(n);
        n *= 2;
    }
    let per = per_node.max(1);
    v.extend((1..=max / per).map(|k| k * per));
    v.dedup();
    v
}

/// The smallest of [`candidate_counts`] for which `fits` says a plan fits
/// and trains, and every count it tried: doubling from one GPU until a
/// count fits, then bisection below it. More GPUs give every rank a
/// smaller share of the state, so fitting is taken as monotone in the
/// count (a global batch smaller than the count is the caller's `false`).
/// `None` when not even `max` fits. `fits` errors stop the search.
pub fn min_gpus<E>(
    per_node: u32,
    max: u32,
    mut fits: impl FnMut(u32) -> Result<bool, E>,
) -> Result<(Option<u32>, Vec<Tried>), E> {
    let counts = candidate_counts(per_node, max);
    let mut tried = Vec::new();
    let mut check = |i: usize, tried: &mut Vec<Tried>| -> Result<bool, E> {
        let ok = fits(counts[i])?;
        tried.push(Tried {
            gpus: counts[i],
            fits: ok,
        });
        Ok(ok)
    };
    // Doubling over the candidate indices.
    let (mut lo, mut hi) = (None::<usize>, None::<usize>);
    let mut i = 0;
    while i < counts.len() {
        if check(i, &mut tried)? {
            hi = Some(i);
            break;
        }
        lo = Some(i);
        i = if i == 0 {
            1
        } else {
            (2 * i + 1).min(counts.len() - 1).max(i + 1)
        };
    }
    let Some(mut hi) = hi else {
        return Ok((None, tried));
    };
    // Bisection between the last count that did not fit and the first that did.
    let mut lo = lo.map_or(0, |l| l + 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if check(mid, &mut tried)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok((Some(counts[hi]), tried))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_powers_of_two_then_whole_nodes() {
        assert_eq!(candidate_counts(8, 40), [1, 2, 4, 8, 16, 24, 32, 40]);
        assert_eq!(candidate_counts(1, 3), [1, 2, 3]);
        assert_eq!(candidate_counts(8, 5), [1, 2, 4]);
    }

    /// The search finds the smallest fitting count for every threshold,
    /// trying far fewer counts than there are.
    #[test]
    fn min_gpus_finds_the_threshold() {
        let counts = candidate_counts(8, 1024);
        for need in [1u32, 3, 8, 9, 17, 200, 1000, 1024] {
            let (found, tried) = min_gpus::<()>(8, 1024, |n| Ok(n >= need)).unwrap();
            let want = counts.iter().copied().find(|&c| c >= need);
            assert_eq!(found, want, "need {need}");
            assert!(
                tried.len() <= 2 * 8 + 4,
                "need {need}: {} tries",
                tried.len()
            );
            for t in &tried {
                assert_eq!(t.fits, t.gpus >= need);
            }
        }
        let (none, _) = min_gpus::<()>(8, 64, |n| Ok(n > 64)).unwrap();
        assert_eq!(none, None);
        let err = min_gpus(8, 64, |n| if n > 2 { Err("boom") } else { Ok(false) });
        assert_eq!(err.unwrap_err(), "boom");
    }
}
