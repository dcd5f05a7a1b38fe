//! What the baseline planners share: the standard (PyTorch-style) rule
//! ([`standard_plan`]: even state shards, micro-batch-major accumulation,
//! the least recompute that fits), batch splits (even, proportional to
//! speed), and the per-GPU memory checks planners size micro-batches with
//! ([`fits`], on the planners' bound [`crate::bounds::rank_peak`]). Units:
//! samples, fractions of the state, GiB.

use super::{Planned, Planner, Problem};
use crate::bounds::rank_peak;
use crate::cost::CostModel;
use crate::data_parallel::Routine;
use crate::error::PlanError;
use crate::plan::rank::RankPlan;
use crate::plan::Plan;
use crate::strategy::{Accumulation, Checkpointing, Sharding, Strategy, StrategySpec};
use crate::units::GIB;

/// Even state fractions under `strategy`: `1/g` in every shard group.
pub fn even_fractions(strategy: &Strategy, ranks: usize) -> Vec<f64> {
    let g = strategy.groups(ranks).group_size.max(1);
    vec![1.0 / g as f64; ranks]
}

/// Parameters whose state a GPU holding `fraction` of it keeps under
/// `routine` (all of them without sharding).
pub fn local_params(routine: &Routine<'_>, fraction: f64) -> f64 {
    let total = routine.costs.workload.model.total_params() as f64;
    match routine.strategy.sharding {
        Sharding::NoShard => total,
        _ => fraction * total,
    }
}

/// Whether `rank` fits running `sizes` under `routine` holding
/// `fraction` of the state, by the fast model's per-GPU bound (and its
/// node's host memory for the offload it uses by itself), in an iteration
/// of `passes` micro-batch passes.
pub fn fits(
    routine: &Routine<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    fraction: f64,
) -> Result<bool, PlanError> {
    let costs = routine.costs;
    let local = local_params(routine, fraction);
    let node = &costs.workload.cluster.nodes[costs.workload.cluster.gpus[rank].node];
    // Offloaded activations the host cannot hold fail without a walk.
    let host_floor = crate::bounds::host_floor(routine, rank, sizes, local)?;
    if host_floor as f64 / GIB > node.host_mem_gib {
        return Ok(false);
    }
    let p = rank_peak(routine, rank, sizes, passes, local)?;
    Ok(p.device_bytes as f64 / GIB <= costs.usable_gib(rank)
        && p.host_bytes as f64 / GIB <= node.host_mem_gib)
}

/// Sizes of `b` samples in `n` near-equal micro-batches (largest first).
pub fn sizes(b: u32, n: u32) -> Vec<u32> {
    RankPlan::new(b, n, 0.0).microbatch_sizes()
}

/// Largest micro-batch size that fits on `rank` under `routine` while it
/// holds state fraction `r` in `n` micro-batches (0 when not even one
/// sample fits). Capped at `limit`.
pub fn max_microbatch(
    routine: &Routine<'_>,
    rank: usize,
    r: f64,
    n: u32,
    limit: u32,
) -> Result<u32, PlanError> {
    let mut lo = 0u32;
    while lo < limit && fits(routine, rank, &vec![lo + 1; n.max(1) as usize], n, r)? {
        lo += 1;
    }
    Ok(lo)
}

/// The checkpointing levels a planner may choose, least recompute first:
/// `none`, then `selective`, `every:2` and `full` ordered by the recompute
/// time each costs one block on rank 0 (or just the user's pin).
pub fn checkpointing_by_recompute(problem: &Problem<'_>) -> Vec<Checkpointing> {
    if let Some(c) = problem.strategy.checkpointing {
        return vec![c];
    }
    let costs = problem.costs;
    let attention = problem
        .strategy
        .attention
        .unwrap_or_else(|| costs.profile_attention());
    let imp = crate::perfmodel::BlockImpl {
        stack: problem.strategy.stack.unwrap_or_default(),
        compile: problem.strategy.compile.unwrap_or(false),
        attention,
    };
    let (f, _) = costs.block_ms_with(0, 1, imp).unwrap_or((1.0, 2.0));
    let sel = costs.selective_recompute_ms(0, 1, imp, false, f);
    let mut v = vec![
        (Checkpointing::Selective, sel),
        (Checkpointing::Every(2), 0.5 * f),
        (Checkpointing::Full, f),
    ];
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    std::iter::once(Checkpointing::None)
        .chain(v.into_iter().map(|x| x.0))
        .collect()
}

/// Builds a plan from per-rank (batch, micro-batch count) with state
/// fractions `fractions` under `strategy`, named `planner`.
pub fn plan_from(
    planner: &str,
    strategy: Strategy,
    batch_n: &[(u32, u32)],
    fractions: &[f64],
) -> Plan {
    Plan {
        planner: planner.to_string(),
        pipeline: None,
        strategy,
        gpus: batch_n
            .iter()
            .zip(fractions)
            .map(|(&(b, n), &r)| RankPlan::new(b, n, r))
            .collect(),
    }
}

/// The standard rule on an even batch split (`fsdp`, `zero2`, `ddp`,
/// `hsdp`): every GPU the same local batch, under `planner`'s fixed axes.
pub fn even_standard_plan(
    planner: &dyn Planner,
    problem: &Problem<'_>,
) -> Result<Planned, PlanError> {
    let batch = even_split(problem.costs.workload.global_batch, problem.costs.ranks());
    standard_plan(
        problem,
        planner.name(),
        &batch,
        &planner.fixed_axes(),
        false,
        None,
    )
}

/// The standard (PyTorch-style) rule shared by `fsdp`, `zero2`, `ddp`,
/// `hsdp` and the speed-proportional baselines: even state shards (per
/// shard group), micro-batch-major accumulation, and per GPU the given
/// `batch`. With `per_rank_micro`, every GPU takes the fewest micro-batches
/// that fit it (the passes are the largest count); otherwise every GPU
/// takes the same count, the fewest that fits them all, capped at `max_n`.
/// For that count, gradients accumulate under `no_sync()` (the documented
/// recipe) or, when the unsharded gradients of the whole model do not fit,
/// sharded after every micro-batch (`sync`: what PyTorch does without
/// `no_sync()`), each with the least recompute that fits
/// ([`checkpointing_by_recompute`]). A pinned accumulation or
/// checkpointing is kept. When nothing fits, the plan with single-sample
/// micro-batches and the most recompute is returned and a note names the
/// GPU (the simulator reports the OOM).
pub fn standard_plan(
    problem: &Problem<'_>,
    name: &str,
    batch: &[u32],
    forced: &StrategySpec,
    per_rank_micro: bool,
    max_n: Option<u32>,
) -> Result<Planned, PlanError> {
    let costs = problem.costs;
    let g = costs.ranks();
    let base = StrategySpec {
        accumulation: Some(Accumulation::NoSync),
        ..StrategySpec::default()
    };
    let levels = checkpointing_by_recompute(problem);
    let bmin = batch.iter().copied().filter(|&b| b > 0).min().unwrap_or(1);
    let bmax = batch.iter().copied().max().unwrap_or(1).max(1);
    let n_limit = max_n
        .unwrap_or(if per_rank_micro { bmax } else { bmin })
        .max(1);
    let accs: Vec<Option<Accumulation>> = match (forced.accumulation, problem.strategy.accumulation)
    {
        (Some(a), _) | (None, Some(a)) => vec![Some(a)],
        (None, None) => vec![Some(Accumulation::NoSync), Some(Accumulation::Sync)],
    };
    let mut options: Vec<Result<Tried<'_>, PlanError>> = Vec::new();
    for (ai, &acc) in accs.iter().enumerate() {
        for &ck in &levels {
            let f = StrategySpec {
                checkpointing: Some(ck),
                accumulation: forced.accumulation.or(acc),
                ..*forced
            };
            options.push(problem.resolve(&base, &f).map(|(strategy, notes)| Tried {
                fallback: ai > 0,
                strategy,
                notes,
                routine: Routine::new(costs, strategy),
                fractions: even_fractions(&strategy, g),
                seen: Vec::new(),
            }));
        }
    }
    // The first option under which every GPU fits with `n` passes, and
    // whether it is the fallback accumulation; `last` keeps the last one
    // tried.
    let mut last: Option<Candidate> = None;
    let mut fits_with =
        |n: u32, last: &mut Option<Candidate>| -> Result<Option<(Candidate, bool)>, PlanError> {
            for opt in options.iter_mut() {
                let o = opt.as_mut().map_err(|e| e.clone())?;
                // One pass: no-sync and sync are the same routine.
                if n == 1 && o.fallback && !per_rank_micro {
                    continue;
                }
                let (ok, cand) = o.try_passes(costs, batch, n, per_rank_micro)?;
                if ok {
                    return Ok(Some((cand, o.fallback)));
                }
                *last = Some(cand);
            }
            Ok(None)
        };
    let found = fewest_passes(n_limit, |n| fits_with(n, &mut last))?;
    if let Some((n, ((strategy, pairs, fr, ns), fallback))) = found {
        let mut notes = ns;
        if fallback {
            notes.push(format!(
                "the unsharded gradients of no_sync() accumulation do not fit with {n} micro-batches: gradients are reduced after every micro-batch"
            ));
        }
        let plan = plan_from(name, strategy, &pairs, &fr);
        let mut out = Planned::bare(plan);
        out.notes = notes;
        return Ok(out);
    }
    let last = last.expect("at least one candidate");
    Ok(nothing_fits(costs, name, batch, n_limit, last))
}

/// A strategy the standard rule tries, resolved once with its routine,
/// even shards and fit memo (ranks of one type with one batch fit alike).
struct Tried<'c> {
    /// The fallback accumulation (sync after no-sync).
    fallback: bool,
    strategy: Strategy,
    notes: Vec<String>,
    routine: Routine<'c>,
    fractions: Vec<f64>,
    seen: Vec<FitMemo>,
}

/// A plan the standard rule may return: strategy, per GPU (samples,
/// micro-batches), state fractions, notes.
type Candidate = (Strategy, Vec<(u32, u32)>, Vec<f64>, Vec<String>);

impl Tried<'_> {
    /// Whether every GPU fits `batch` with `n` passes under this strategy
    /// (each GPU the fewest micro-batches that fit with `per_rank_micro`,
    /// else `n`), and the candidate.
    fn try_passes(
        &mut self,
        costs: &CostModel,
        batch: &[u32],
        n: u32,
        per_rank_micro: bool,
    ) -> Result<(bool, Candidate), PlanError> {
        let fr = &self.fractions;
        let mut pairs = Vec::with_capacity(batch.len());
        let mut ok = true;
        for (r, &b) in batch.iter().enumerate() {
            let t = costs.rank_type[r];
            let nr = if b == 0 {
                0
            } else if per_rank_micro {
                // The fewest micro-batches that fit (fewer, larger
                // micro-batches never need less memory).
                let (mut lo, mut hi) = (1u32, n.min(b));
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if fits_cached(&self.routine, r, t, (b, mid, n), fr[r], &mut self.seen)? {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                lo
            } else {
                n.min(b)
            };
            if b > 0 && !fits_cached(&self.routine, r, t, (b, nr, n), fr[r], &mut self.seen)? {
                ok = false;
            }
            pairs.push((b, nr));
        }
        Ok((ok, (self.strategy, pairs, fr.clone(), self.notes.clone())))
    }
}

/// The fewest passes in `1..=n_limit` for which `fits_with` finds a plan,
/// with it: memory never grows with more (smaller) micro-batches, so a
/// doubling search then bisection finds the first.
fn fewest_passes<T>(
    n_limit: u32,
    mut fits_with: impl FnMut(u32) -> Result<Option<T>, PlanError>,
) -> Result<Option<(u32, T)>, PlanError> {
    let mut found = None;
    let (mut lo, mut hi) = (0u32, None);
    let mut n = 1u32;
    while n <= n_limit {
        match fits_with(n)? {
            Some(c) => {
                found = Some((n, c));
                hi = Some(n);
                break;
            }
            None => {
                lo = n;
                if n == n_limit {
                    break;
                }
                n = (n * 2).min(n_limit);
            }
        }
    }
    if let Some(mut h) = hi {
        while h - lo > 1 {
            let mid = lo + (h - lo) / 2;
            match fits_with(mid)? {
                Some(c) => {
                    found = Some((mid, c));
                    h = mid;
                }
                None => lo = mid,
            }
        }
    }
    Ok(found)
}

/// The plan when nothing fits: the last candidate tried (single-sample
/// micro-batches, the most recompute), with a note naming the first GPU
/// that does not fit.
fn nothing_fits(
    costs: &CostModel,
    name: &str,
    batch: &[u32],
    n_limit: u32,
    (strategy, pairs, fr, ns): Candidate,
) -> Planned {
    let mut notes = ns;
    let routine = Routine::new(costs, strategy);
    let worst = (0..costs.ranks())
        .find(|&r| {
            batch[r] > 0
                && !fits(&routine, r, &sizes(pairs[r].0, pairs[r].1), n_limit, fr[r])
                    .unwrap_or(false)
        })
        .unwrap_or(0);
    notes.push(format!(
        "nothing fits on GPU {worst} ({}) with even state shards, even with {} micro-batches and {} checkpointing",
        costs.gpu(worst).name,
        pairs[worst].1,
        strategy.checkpointing.name()
    ));
    let mut out = Planned::bare(plan_from(name, strategy, &pairs, &fr));
    out.notes = notes;
    out
}

/// A memoised [`fits`] verdict: (GPU type, batch, micro-batches, passes,
/// fits).
type FitMemo = (usize, u32, u32, u32, bool);

/// [`fits`] of `b` samples in `n` micro-batches over `passes` passes on a
/// GPU of type `t`, memoised in `seen`.
fn fits_cached(
    routine: &Routine<'_>,
    rank: usize,
    t: usize,
    (b, n, passes): (u32, u32, u32),
    r: f64,
    seen: &mut Vec<FitMemo>,
) -> Result<bool, PlanError> {
    if let Some(x) = seen
        .iter()
        .find(|x| (x.0, x.1, x.2, x.3) == (t, b, n, passes))
    {
        return Ok(x.4);
    }
    let ok = fits(routine, rank, &sizes(b, n), passes, r)?;
    seen.push((t, b, n, passes, ok));
    Ok(ok)
}

/// Splits `total` samples over ranks in proportion to `weights` (largest
/// remainder; ties to the lower rank), giving every rank at least `min_each`
/// when `total` allows it.
pub fn proportional_split(total: u32, weights: &[f64], min_each: u32) -> Vec<u32> {
    let g = weights.len();
    if g == 0 {
        return vec![];
    }
    let floor_each = if total >= min_each * g as u32 {
        min_each
    } else {
        0
    };
    let rest = total - floor_each * g as u32;
    let wsum: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    let shares: Vec<f64> = weights
        .iter()
        .map(|w| {
            if wsum > 0.0 {
                w.max(0.0) / wsum * rest as f64
            } else {
                rest as f64 / g as f64
            }
        })
        .collect();
    let mut out: Vec<u32> = shares.iter().map(|s| s.floor() as u32).collect();
    let mut left = rest - out.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..g).collect();
    order.sort_by(|&a, &b| {
        (shares[b] - shares[b].floor())
            .total_cmp(&(shares[a] - shares[a].floor()))
            .then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out.iter().map(|b| b + floor_each).collect()
}

/// Even split of `total` samples: the first `total % g` ranks get one more.
pub fn even_split(total: u32, g: usize) -> Vec<u32> {
    let g32 = g as u32;
    (0..g32)
        .map(|i| total / g32 + u32::from(i < total % g32))
        .collect()
}

/// Relative speed of every rank, in samples per ms of one block's forward,
/// recompute and backward at micro-batch size `m` (what a speed-proportional
/// split divides by).
pub fn rank_speeds(costs: &CostModel, m: u32) -> Vec<f64> {
    let m = m.max(1);
    (0..costs.ranks())
        .map(|r| m as f64 / (2.0 * costs.block_fwd_ms(r, m) + costs.block_bwd_ms(r, m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_conserve_samples() {
        assert_eq!(even_split(10, 4), vec![3, 3, 2, 2]);
        let p = proportional_split(64, &[1.0, 1.0, 3.0, 0.5], 1);
        assert_eq!(p.iter().sum::<u32>(), 64);
        assert!(p.iter().all(|&b| b >= 1));
        assert_eq!(
            proportional_split(3, &[1.0, 1.0, 1.0, 1.0], 1)
                .iter()
                .sum::<u32>(),
            3
        );
    }
}
