//! Step 1 of the search: per GPU type and batch, the micro-batch counts
//! worth searching (the Pareto options of the closed form, [`options_at`]).

use crate::planner::closed_form::{ClosedForm, RankCost};

/// Per GPU type: Pareto options for every local batch `b` (index `b`).
#[derive(Debug, Clone)]
pub(super) struct TypeOptions {
    /// `by_b[u]`: the options of `u` batch units.
    pub(super) by_b: Vec<Vec<RankCost>>,
}

/// Whether layered option `b` is at least as good as `a` in every respect:
/// no costlier in any template, at least as much room for state. (Layered
/// costs sum over all micro-batches, so which ones are short is irrelevant;
/// micro-batch-major options are never compared, one per batch.)
fn dominated(a: &RankCost, b: &RankCost) -> bool {
    b.phase_ms[0]
        .iter()
        .zip(&a.phase_ms[0])
        .all(|(x, y)| x <= y)
        && b.cap >= a.cap
}

fn total(o: &RankCost) -> f64 {
    o.phase_ms[0].iter().sum()
}

fn pareto(v: Vec<RankCost>) -> Vec<RankCost> {
    // Sort by cap descending, then cheaper first, so a dominating option
    // comes before what it dominates; ties keep the fewer micro-batches.
    let order = |(ta, a): &(f64, RankCost), (tb, b): &(f64, RankCost)| {
        b.cap
            .total_cmp(&a.cap)
            .then(ta.total_cmp(tb))
            .then(a.microbatches.cmp(&b.microbatches))
    };
    let mut v: Vec<(f64, RankCost)> = v.into_iter().map(|o| (total(&o), o)).collect();
    v.sort_by(order);
    // Survivors so far, by total cost: a dominating option costs no more
    // in total, so only the prefix up to this option's total is checked
    // (on the usual staircase, slower options hold more state, that prefix
    // is short).
    let mut out: Vec<(f64, RankCost)> = Vec::with_capacity(v.len());
    for (t, o) in v {
        let idx = out.partition_point(|x| x.0 <= t);
        if !out[..idx].iter().any(|(_, k)| dominated(&o, k)) {
            out.insert(idx, (t, o));
        }
    }
    out.sort_by(order);
    out.into_iter().map(|x| x.1).collect()
}

/// The layered options of `b` samples on type `t`, before the Pareto
/// filter: every micro-batch count whose micro-batch fits, except those a
/// sibling provably dominates. Counts sharing a largest micro-batch `m`
/// (`n` in `[ceil(b/m), ceil(b/(m-1)))`) form a group along which every
/// template cost is convex in `n` (compute and copy are linear in `n`, the
/// cost their maximum) and the cap does not grow (the memory bound is
/// nondecreasing in `n` at fixed `m`); so when the group's second option
/// is dominated by its first, every later one is too, and only the first
/// is kept. (Per-sample time that does not grow with the micro-batch,
/// the usual case, makes every group collapse to one option: about
/// `2 sqrt(b)` options instead of `b`.)
fn layered_options(cf: &ClosedForm<'_>, t: usize, b: u32, max_m: u32) -> Vec<RankCost> {
    let mut v = Vec::new();
    let first_n = b.div_ceil(max_m);
    let mut n = first_n;
    while n <= b {
        let m = b.div_ceil(n);
        // Last count whose largest micro-batch is still m.
        let last = if m <= 1 { b } else { (b - 1) / (m - 1) };
        let last = last.clamp(n, b);
        let Some(head) = cf.option(t, b, n) else {
            n = last + 1;
            continue;
        };
        let collapses = last == n
            || cf
                .option(t, b, n + 1)
                .is_some_and(|second| dominated(&second, &head));
        v.push(head);
        if !collapses {
            v.extend(((n + 1)..=last).filter_map(|k| cf.option(t, b, k)));
        }
        n = last + 1;
    }
    v
}

/// The Pareto options of `b` samples on type `t` (`b = 0`: the state-only
/// option; micro-batch-major: the one count of the strategy's passes).
/// With `coarse` (the batch-grid search), layered options are built only
/// for the micro-batch sizes of [`coarse_sizes`], one count each.
pub(super) fn options_at(cf: &ClosedForm<'_>, t: usize, b: u32, coarse: bool) -> Vec<RankCost> {
    if b == 0 {
        return cf.option(t, 0, 0).into_iter().collect();
    }
    let max_m = cf.max_microbatch(t);
    if max_m == 0 {
        return vec![];
    }
    if let Some(p) = cf.passes() {
        return cf.option(t, b, p).into_iter().collect();
    }
    if coarse {
        let mut counts: Vec<u32> = coarse_sizes(max_m.min(b)).map(|m| b.div_ceil(m)).collect();
        counts.dedup();
        return pareto(
            counts
                .into_iter()
                .filter_map(|n| cf.option(t, b, n))
                .collect(),
        );
    }
    pareto(layered_options(cf, t, b, max_m))
}

/// Micro-batch sizes the batch-grid search tries, largest first: every
/// size up to 16, then steps of about 1/8 (a size within 12.5% of the
/// best one), up to `max_m`: about 40 sizes, so an option table row costs
/// the same at any batch.
fn coarse_sizes(max_m: u32) -> impl Iterator<Item = u32> {
    let mut v = Vec::new();
    let mut m = 1u32;
    while m <= max_m {
        v.push(m);
        m = if m < 16 { m + 1 } else { m + m.div_ceil(8) };
    }
    if v.last() != Some(&max_m) && max_m > 0 {
        v.push(max_m);
    }
    v.into_iter().rev()
}
