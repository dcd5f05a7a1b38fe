//! `cephalo`: the Cephalo optimizer (Guo et al., ICS 2025), native form —
//! compute balancing with per-GPU batches and micro-batches plus memory
//! balancing of the sharded state, searched exactly on a closed-form cost
//! for every training strategy in its space, ranked with the fast model and
//! confirmed with the discrete-event simulator.
//!
//! Strategy space (axes the user pinned are fixed): sharding full, or
//! hybrid when the cluster has several shard groups; accumulation layered,
//! no-sync or sync; checkpointing full, selective, every other block or
//! none; the other axes at their defaults for the accumulation style
//! ([`crate::strategy`]). Micro-batch-major strategies run every GPU with
//! samples in the same number of micro-batches, searched over a ladder of
//! pass counts; hybrid sharding holds even shards in every group.
//!
//! Decision per rank: local batch `b_i` in `n_i` near-equal micro-batches
//! (largest `m_i`; `b_i = 0` makes a state-only GPU) and state fraction
//! `r_i`. Objective: the closed-form iteration time of
//! [`super::closed_form`], `J = max_i C_i(b_i, n_i, λ)`, where the state is
//! water-filled into each rank's free memory and `λ` (the largest fraction,
//! which paces the uneven collectives) is the water level.
//!
//! Search (exact up to 1e-9 relative on `J` for global batches up to
//! [`EXACT_BATCH`] samples, or 16 per GPU; larger ones run the same search
//! on a grid of batch units of `ceil(B / that)` samples and then complete
//! and refine each plan to the sample by moving samples off the
//! bottleneck (`refine`), which keeps time and memory flat in `B` but
//! gives up the optimality proof):
//! 1. per GPU type and batch `b`, every micro-batch count `n` whose
//!    micro-batch fits; options that are no cheaper in any cost term and
//!    leave no more room for state than another option of the same `b` are
//!    dropped (Pareto; counts sharing a largest micro-batch are dropped as a
//!    group when the first two show it, see `layered_options`).
//!    Shardings that fix every GPU's share (hybrid, none) need only the
//!    bottleneck search of step 2 at that share, which is then exact;
//! 2. *fast path*: with `λ = 1/G` (even state) the problem is a bottleneck
//!    assignment: binary search on the threshold `τ` over the sorted
//!    candidate costs, each check a bitset subset-sum ("can the ranks' allowed
//!    batches add up to exactly `B`"), options restricted to those whose cap
//!    holds `1/G`. The same search without the cap restriction is a lower
//!    bound on every plan; when the two agree the answer is optimal;
//! 3. otherwise *branch and bound on λ*: for an interval `[lo, hi]` the
//!    bottleneck search with a max-plus knapsack ("largest state the chosen
//!    micro-batches leave room for") gives the best cost at `lo` over plans
//!    feasible at `hi` — a lower bound for every plan whose level lies in the
//!    interval; its plan's exact cost is an upper bound; intervals split at
//!    that plan's level and are pruned when the bound cannot win;
//! 4. the tie among plans with the optimal bottleneck is broken by the least
//!    total rank time (a min-plus pass); variants of the optimum (fewest
//!    micro-batches, most memory headroom) and the least-total-time plans
//!    under slightly relaxed bottlenecks ([`RELAXED_SLACK`]) are kept as
//!    near-optimal candidates;
//! 5. per strategy, its closed-form optimum and near-optimal variants —
//!    plus the baselines' and the compat planner's plans whose strategy
//!    lies in the space, as seeds, planned while the search runs — are
//!    evaluated by the fast model ([`crate::fast::evaluate`], the
//!    simulator's times without building a graph) when their closed-form
//!    time is within [`CLOSED_FORM_MARGIN`] of the best; the fastest that
//!    fit run through the simulator ([`super::Judge`], in
//!    parallel with rayon) and the fastest plan that fits wins. The best
//!    plan under every strategy considered comes back in
//!    [`super::Planned::considered`].

use super::closed_form::{ClosedForm, Evaluation, RankCost};
use super::water::FILL_TOL;
use super::{Considered, Objective, Planned, Planner, Problem, SearchStats};
use crate::error::PlanError;
use crate::iteration::SimOptions;
use crate::plan::Plan;
use crate::strategy::{Accumulation, Checkpointing, Sharding, Strategy, StrategySpec};
use rayon::prelude::*;

/// The native Cephalo planner.
#[derive(Debug, Clone, Copy)]
pub struct Cephalo {
    /// The planners whose plans seed the search (the registry's
    /// [`super::registry::seeds`]: the reference optimizer, then the
    /// data-parallel baselines and ablations), given rather than imported
    /// so the registry, which lists this planner, is not imported back.
    seeds: fn() -> Vec<Box<dyn Planner>>,
}

impl Cephalo {
    /// The native planner, seeding its search with the planners `seeds`
    /// returns.
    pub fn with_seeds(seeds: fn() -> Vec<Box<dyn Planner>>) -> Cephalo {
        Cephalo { seeds }
    }
}

/// Relative tolerance of the optimality proof.
pub const OPT_TOL: f64 = 1e-12;
/// Gap left below a split point of the λ branch and bound.
pub const LEVEL_GAP: f64 = 1e-9;
/// Relative slacks on the optimal bottleneck under which near-optimal,
/// better balanced plans are generated for the simulator to judge.
pub const RELAXED_SLACK: [f64; 3] = [0.003, 0.01, 0.03];
/// Most GPUs the planner searches: what plans within 10 s on this
/// project's 2-core machine whatever the batch. Its sub-problems walk every
/// GPU over every batch unit (at least 4 units per GPU, [`batch_unit`]), a
/// search solves hundreds of them, and the exact tie-break pass
/// (`Search::min_sum`) cannot skip cells, so time grows with the square of
/// the GPU count. Measured (whole process, five models from BERT-Large to
/// LLaMA-2-13B at 1 to 64 samples per GPU on the 5-type mixed cluster
/// replicated): at most about 6 s at 1,024 GPUs (median of five runs of the
/// slowest case, BERT-Large at 4 samples per GPU); 2,048 GPUs took up to 23 s and
/// 4,096 up to 160 s (BERT-Large at 4 samples per GPU), so they are
/// refused rather than promised.
pub const MAX_GPUS: usize = 1024;
/// Most λ intervals the branch and bound explores before giving up the proof.
pub const MAX_INTERVALS: usize = 400;

/// Per GPU type: Pareto options for every local batch `b` (index `b`).
#[derive(Debug, Clone)]
struct TypeOptions {
    by_b: Vec<Vec<RankCost>>,
}

/// A plan as per-rank `(b, n)`.
pub type Choice = Vec<(u32, u32)>;

/// Output of the exact closed-form search.
#[derive(Debug, Clone)]
pub struct Found {
    /// The optimal choice (least total rank time among optimal ones).
    pub best: Choice,
    /// Its closed-form evaluation.
    pub eval: Evaluation,
    /// Variants of the optimum and near-optimal plans, best first (distinct,
    /// `best` excluded).
    pub alternatives: Vec<Choice>,
    /// Search counts.
    pub stats: SearchStats,
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
fn options_at(cf: &ClosedForm<'_>, t: usize, b: u32, coarse: bool) -> Vec<RankCost> {
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

/// Global batches up to this many samples (or 16 per GPU, when more) are
/// searched sample by sample; larger ones on a grid of `ceil(B / that)`
/// samples, then refined to the sample (`refine`). The exact search's
/// option tables and knapsacks grow with the square of the batch it
/// counts in, so the grid keeps planning time and memory flat in the
/// global batch (benchmark `planner_native_batch`). 256: the whole exact
/// planner took 0.19 s at 256 samples and 1.86 s at 1,024 on the paper
/// cluster (gpt-2.7b, this project's 2-core machine).
pub const EXACT_BATCH: u32 = 256;

/// Most knapsack cells (GPUs x batch units) one sub-problem of the search
/// counts before its grid gets coarser than 16 units per GPU: 2^22, i.e.
/// 512 GPUs at 16 units each. A sub-problem's dynamic programme walks every
/// GPU over every unit, and a search solves hundreds of them, so time grows
/// with GPUs x units; this keeps it near what 512 GPUs at 16 samples each
/// take (5.4 s measured on this project's 2-core machine, LLaMA-2-7B), and from
/// 513 GPUs on the grid shrinks towards [`MIN_UNITS_PER_GPU`].
pub const SEARCH_CELLS: usize = 1 << 22;

/// The coarsest grid the search runs on: 4 batch units per GPU on average
/// (the plan is then completed and refined to the sample by `refine`).
pub const MIN_UNITS_PER_GPU: usize = 4;

/// Samples per batch unit of the search for a global batch of `big_b`
/// samples on `gpus` GPUs (1: exact): the batch counts in at most
/// max(256, 16 per GPU) units, and at most [`SEARCH_CELLS`] / GPUs (but no
/// fewer than [`MIN_UNITS_PER_GPU`] per GPU).
pub fn batch_unit(big_b: u32, gpus: usize) -> u32 {
    let g = gpus.max(1);
    let per_budget = (SEARCH_CELLS / g).max(MIN_UNITS_PER_GPU * g);
    let units = (EXACT_BATCH as usize)
        .max((16 * g).min(per_budget))
        .min(u32::MAX as usize) as u32;
    if big_b <= units {
        1
    } else {
        big_b.div_ceil(units)
    }
}

/// Whether score `a` is better than `b`: a score orders plans by least
/// iteration time, then fewest GPUs at it, then least total rank time
/// ([`ClassScore::score`]), each compared within [`OPT_TOL`].
fn better(a: &(f64, usize, f64), b: &(f64, usize, f64)) -> bool {
    a.0 < b.0 * (1.0 - OPT_TOL)
        || (a.0 <= b.0 * (1.0 + OPT_TOL)
            && (a.1 < b.1 || (a.1 == b.1 && a.2 < b.2 * (1.0 - OPT_TOL))))
}

/// Most moves [`refine`] makes: a guard against cycling, far above what
/// it needs (each halving of the step ends after a few moves per GPU).
const MAX_REFINE_MOVES: usize = 4096;

/// Completes a choice found on a batch grid of `unit` samples to the
/// global batch and refines it to the sample: the samples the grid left
/// over go, `d` at a time, where they raise the objective least; then `d`
/// samples move from a bottleneck GPU to the GPU where they help most,
/// while that improves ([`score`]), `d` halving from `unit` to 1. Each GPU
/// takes its best micro-batch count for its batch at the current water
/// level. Identical GPUs (type, batch, count) are tried once. `None` when
/// no completion fits.
fn refine(s: &Search<'_, '_>, start: &Choice) -> Option<Choice> {
    let cf = s.cf;
    let target = cf.costs().workload.global_batch;
    let g = start.len();
    let mut cur = Classes::of(s, start);
    let cache = std::cell::RefCell::new(std::collections::HashMap::new());
    // Times of `cur` with `changes` (rank, new class) applied.
    let times = |c: &Classes, changes: &[(usize, ClassKey)]| c.times_with(changes, cf, &cache);
    // Best count for `b` samples on a rank of type `t` at `level`.
    let count = |t: usize, b: u32, level: f64| -> Option<u32> {
        if b == 0 {
            return Some(0);
        }
        let c = cf.comm(level);
        let opts = s.options(t, b);
        let fit = opts
            .iter()
            .filter(|o| o.cap >= level - FILL_TOL)
            .min_by(|a, b| {
                cf.rank_ms(t, a, &c, level)
                    .total_cmp(&cf.rank_ms(t, b, &c, level))
            });
        fit.or_else(|| opts.iter().max_by(|a, b| a.cap.total_cmp(&b.cap)))
            .map(|o| o.microbatches)
    };
    // Rank `r` at `b` samples, with its best count at `level`.
    let at = |r: usize, b: u32, level: f64| -> Option<(usize, ClassKey)> {
        let t = s.rank_type[r];
        Some((r, (t, b, count(t, b, level)?)))
    };
    // 1. The samples the grid left over.
    let placed: u64 = cur.choice.iter().map(|x| x.0 as u64).sum();
    let mut rem = (target as u64).checked_sub(placed)? as u32;
    let mut d = s.unit.max(1);
    while rem > 0 {
        let step = d.min(rem);
        let level = times(&cur, &[]).map_or(1.0 / g as f64, |t| t.level);
        let best = cur
            .representatives(None)
            .into_iter()
            .filter_map(|r| at(r, cur.choice[r].0 + step, level))
            .filter_map(|ch| times(&cur, &[ch]).map(|t| (t.score(), ch)))
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
    // 2. Moves off the bottleneck.
    let mut d = s.unit.max(1);
    let mut moves = 0usize;
    let mut now = times(&cur, &[])?.score();
    while d >= 1 && moves < MAX_REFINE_MOVES {
        let t = times(&cur, &[])?;
        let level = t.level;
        let Some(from) = t.bottleneck_rank(&cur) else {
            break;
        };
        let step = d.min(cur.choice[from].0);
        let mut found: Option<(Score, [(usize, ClassKey); 2])> = None;
        if let Some(off) = at(from, cur.choice[from].0 - step, level) {
            for to in cur
                .representatives(Some(off))
                .into_iter()
                .filter(|&r| r != from)
            {
                let Some(on) = at(to, cur.choice[to].0 + step, level) else {
                    continue;
                };
                let Some(sc) = times(&cur, &[off, on]).map(|t| t.score()) else {
                    continue;
                };
                if better(&sc, &now) && found.as_ref().is_none_or(|f| better(&sc, &f.0)) {
                    found = Some((sc, [off, on]));
                }
            }
        }
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
    Some(cur.choice)
}

/// Identical ranks of a choice: (type, batch, count).
type ClassKey = (usize, u32, u32);

/// A plan's score for [`better`]: iteration time, GPUs at it, total rank time.
type Score = (f64, usize, f64);

/// A choice kept with its classes of identical ranks, so that [`refine`]
/// prices a candidate (the choice with one or two ranks changed) in the
/// number of classes, not of GPUs: a 4,096-GPU plan has a few dozen.
#[derive(Debug, Clone)]
struct Classes {
    /// Per rank `(b, n)`.
    choice: Choice,
    /// Rank types.
    rank_type: Vec<usize>,
    /// Per class: its ranks.
    members: std::collections::BTreeMap<ClassKey, std::collections::BTreeSet<usize>>,
}

/// A choice's closed-form times by class ([`Classes::times_with`]).
struct ClassScore {
    level: f64,
    /// Per class (in key order): key, ranks in it, rank time (ms).
    ms: Vec<(ClassKey, usize, f64)>,
}

impl Classes {
    fn of(s: &Search<'_, '_>, choice: &Choice) -> Classes {
        let mut members: std::collections::BTreeMap<ClassKey, std::collections::BTreeSet<usize>> =
            Default::default();
        for (r, &(b, n)) in choice.iter().enumerate() {
            members.entry((s.rank_type[r], b, n)).or_default().insert(r);
        }
        Classes {
            choice: choice.clone(),
            rank_type: s.rank_type.clone(),
            members,
        }
    }

    /// The class of rank `r`.
    fn key(&self, r: usize) -> ClassKey {
        let (b, n) = self.choice[r];
        (self.rank_type[r], b, n)
    }

    /// Rank `r` moves to class `key`.
    fn set(&mut self, r: usize, key: ClassKey) {
        let old = self.key(r);
        if let Some(m) = self.members.get_mut(&old) {
            m.remove(&r);
            if m.is_empty() {
                self.members.remove(&old);
            }
        }
        self.members.entry(key).or_default().insert(r);
        self.choice[r] = (key.1, key.2);
    }

    /// The first rank of every class, in rank order, of this choice with
    /// `change` (a rank and its new class) applied.
    fn representatives(&self, change: Option<(usize, ClassKey)>) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::with_capacity(self.members.len() + 1);
        let moved = change.map(|(r, _)| (r, self.key(r)));
        for (key, m) in &self.members {
            let first = match moved {
                Some((r, old)) if old == *key => m.iter().copied().find(|&x| x != r),
                _ => m.first().copied(),
            };
            let first = match change {
                Some((r, new)) if new == *key => Some(first.map_or(r, |f| f.min(r))),
                _ => first,
            };
            v.extend(first);
        }
        if let Some((r, new)) = change {
            if !self.members.contains_key(&new) {
                v.push(r);
            }
        }
        v.sort_unstable();
        v
    }

    /// The closed-form times of this choice with `changes` applied, by class
    /// (`None` when an option or the state does not fit), priced by
    /// [`ClosedForm::price_classes`]; options are priced once per class over
    /// the whole refinement (`cache`).
    fn times_with(
        &self,
        changes: &[(usize, ClassKey)],
        cf: &ClosedForm<'_>,
        cache: &std::cell::RefCell<std::collections::HashMap<ClassKey, Option<RankCost>>>,
    ) -> Option<ClassScore> {
        let mut counts: std::collections::BTreeMap<ClassKey, usize> =
            self.members.iter().map(|(k, m)| (*k, m.len())).collect();
        for &(r, new) in changes {
            let old = self.key(r);
            if let Some(c) = counts.get_mut(&old) {
                *c -= 1;
            }
            *counts.entry(new).or_insert(0) += 1;
        }
        counts.retain(|_, c| *c > 0);
        let mut keys = Vec::with_capacity(counts.len());
        let mut priced = Vec::with_capacity(counts.len());
        for (&key, &n) in &counts {
            let o = *cache
                .borrow_mut()
                .entry(key)
                .or_insert_with(|| cf.option(key.0, key.1, key.2));
            keys.push((key, n));
            priced.push((key.0, o?, n));
        }
        let (level, times) = cf.price_classes(&priced)?;
        let ms = keys
            .into_iter()
            .zip(times)
            .map(|((k, n), t)| (k, n, t))
            .collect();
        Some(ClassScore { level, ms })
    }
}

impl ClassScore {
    /// The score [`better`] compares: the iteration time, the GPUs at it
    /// and the total rank time.
    fn score(&self) -> (f64, usize, f64) {
        let top = self.ms.iter().map(|m| m.2).fold(0.0, f64::max);
        let at_top = self
            .ms
            .iter()
            .filter(|m| m.2 >= top * (1.0 - OPT_TOL))
            .map(|m| m.1)
            .sum();
        (top, at_top, self.ms.iter().map(|m| m.2 * m.1 as f64).sum())
    }

    /// The rank with samples whose time is the largest (the lowest such
    /// rank on a tie).
    fn bottleneck_rank(&self, c: &Classes) -> Option<usize> {
        let busy = self.ms.iter().filter(|m| m.0 .1 > 0);
        let top = busy.clone().map(|m| m.2).max_by(f64::total_cmp)?;
        busy.filter(|m| m.2.total_cmp(&top).is_eq())
            .filter_map(|m| c.members.get(&m.0)?.first().copied())
            .min()
    }
}

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

struct Search<'c, 'a> {
    cf: &'c ClosedForm<'a>,
    /// Samples per batch unit: option tables and the knapsacks count
    /// batches in units (1 below [`EXACT_BATCH`]).
    unit: u32,
    /// The global batch in units (rounded down).
    big_b: usize,
    rank_type: Vec<usize>,
    types: Vec<TypeOptions>,
    stats: SearchStats,
}

/// Per type and batch: the option costs at one λ.
struct Priced {
    /// `cost[t][b][k]` = rank time of option k of batch b on type t.
    cost: Vec<Vec<Vec<f64>>>,
}

impl<'c, 'a> Search<'c, 'a> {
    fn new(cf: &'c ClosedForm<'a>, bmax: &[u32], unit: u32) -> Search<'c, 'a> {
        let costs = cf.costs();
        let big_b = (costs.workload.global_batch / unit) as usize;
        let types: Vec<TypeOptions> = (0..cf.type_count())
            .into_par_iter()
            .map(|t| {
                let by_b = (0..=(bmax[t] / unit).min(big_b as u32))
                    .map(|u| options_at(cf, t, u * unit, unit > 1))
                    .collect();
                TypeOptions { by_b }
            })
            .collect();
        let mut stats = SearchStats::default();
        for t in &types {
            for v in &t.by_b {
                stats.candidates += v.len() as u64;
            }
        }
        stats.feasible = stats.candidates;
        Search {
            cf,
            unit,
            big_b,
            rank_type: costs.rank_type.clone(),
            types,
            stats,
        }
    }

    fn price(&self, level: f64) -> Priced {
        let c = self.cf.comm(level);
        Priced {
            cost: self
                .types
                .iter()
                .enumerate()
                .map(|(t, to)| {
                    let opt = self.cf.optimizer_ms(t, level);
                    to.by_b
                        .iter()
                        .map(|v| v.iter().map(|o| self.cf.rank_ms_with(o, &c, opt)).collect())
                        .collect()
                })
                .collect(),
        }
    }

    /// Bottleneck search without the state-sum constraint: options need a
    /// cap of at least `min_cap` (`None`: any option that fits with no
    /// state). Returns the optimal threshold and (when `want_plan`) the
    /// least-total-time plan under it.
    fn solve_bottleneck(
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

    /// Per type and batch: the cheapest option at `cost_level` among those
    /// whose cap is at least `min_cap` (`(cost, option index)`).
    fn best_table(&self, cost_level: f64, min_cap: Option<f64>) -> Vec<Vec<(f64, usize)>> {
        let priced = self.price(cost_level);
        self.types
            .iter()
            .enumerate()
            .map(|(t, to)| {
                to.by_b
                    .iter()
                    .enumerate()
                    .map(|(b, opts)| {
                        let mut r = (f64::INFINITY, usize::MAX);
                        for (k, o) in opts.iter().enumerate() {
                            if min_cap.is_some_and(|l| o.cap < l - FILL_TOL) {
                                continue;
                            }
                            let c = priced.cost[t][b][k];
                            if c < r.0 {
                                r = (c, k);
                            }
                        }
                        r
                    })
                    .collect()
            })
            .collect()
    }

    /// Min-plus pass: the plan of least total rank time among plans whose
    /// every rank is within `tau` (`None` when there is none).
    fn min_sum(&mut self, best: &[Vec<(f64, usize)>], tau: f64) -> Option<Choice> {
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
    fn relaxed(&mut self, level: f64, tau: f64, slack: &[f64]) -> Vec<Choice> {
        let best = self.best_table(level, Some(level));
        slack
            .iter()
            .filter_map(|d| self.min_sum(&best, tau * (1.0 + d)))
            .collect()
    }

    /// Bottleneck search with the state constraint `sum min(cap_i, feas) >= 1`
    /// and costs at `cost_level`, over plans strictly better than `below`.
    /// Returns the optimal threshold and the plan with the most room for
    /// state under it (`None`: no such plan).
    fn solve_knapsack(&mut self, cost_level: f64, feas: f64, below: f64) -> Option<(f64, Choice)> {
        let priced = self.price(cost_level);
        let nb = self.big_b + 1;
        let limit = below * (1.0 - OPT_TOL);
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
        if th.is_empty() {
            return None;
        }
        let g = self.rank_type.len();
        // For a threshold: per type and b, (weight, option index).
        let weights = |tau: f64| -> Vec<Vec<(f64, usize)>> {
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
        };
        let run = |w: &Vec<Vec<(f64, usize)>>, keep: bool| -> (f64, Vec<Vec<u32>>) {
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
            let mut reach = 0usize;
            let mut args = Vec::new();
            for (i, &t) in self.rank_type.iter().enumerate() {
                let floor = self.big_b.saturating_sub(after[i + 1]);
                let mut nd = vec![f64::NEG_INFINITY; nb];
                let mut arg = vec![u32::MAX; if keep { nb } else { 0 }];
                for &b in &allowed[t] {
                    let wb = w[t][b].0;
                    let hi = (reach + b).min(nb - 1);
                    let lo = floor.max(b);
                    if lo > hi {
                        continue;
                    }
                    let src = &dp[lo - b..=hi - b];
                    if keep {
                        for (y, &x) in (lo..=hi).zip(src) {
                            let v = x + wb;
                            if v > nd[y] {
                                nd[y] = v;
                                arg[y] = b as u32;
                            }
                        }
                    } else {
                        for (d, &x) in nd[lo..=hi].iter_mut().zip(src) {
                            let v = x + wb;
                            *d = if v > *d { v } else { *d };
                        }
                    }
                }
                reach = (reach + top(t)).min(nb - 1);
                dp = nd;
                if keep {
                    args.push(arg);
                }
            }
            (dp[self.big_b], args)
        };
        let ok = |v: f64| v >= 1.0 - FILL_TOL;
        self.stats.subproblems += 1;
        if !ok(run(&weights(th[th.len() - 1]), false).0) {
            return None;
        }
        let (mut lo, mut hi) = (0usize, th.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            self.stats.subproblems += 1;
            if ok(run(&weights(th[mid]), false).0) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let tau = th[lo];
        let w = weights(tau);
        let (_, args) = run(&w, true);
        let mut choice = vec![(0u32, 0u32); g];
        let mut y = self.big_b;
        for i in (0..g).rev() {
            let b = args[i][y] as usize;
            let t = self.rank_type[i];
            let o = &self.types[t].by_b[b][w[t][b].1];
            choice[i] = (o.batch, o.microbatches);
            y -= b;
        }
        Some((tau, choice))
    }

    /// The options of `b` samples on type `t`: from the table when `b` is
    /// on its grid, else built.
    fn options(&self, t: usize, b: u32) -> std::borrow::Cow<'_, [RankCost]> {
        let u = (b / self.unit) as usize;
        match self.types[t].by_b.get(u) {
            Some(v) if b.is_multiple_of(self.unit) => std::borrow::Cow::Borrowed(v),
            _ => std::borrow::Cow::Owned(options_at(self.cf, t, b, self.unit > 1)),
        }
    }

    /// Largest state sum any plan leaves room for (for the infeasibility
    /// message), with no time limit.
    fn max_state_room(&mut self) -> f64 {
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

    /// Variants of a choice: same batches with the fewest micro-batches, and
    /// with the most room for state, among options within `tau` at `level`.
    fn variants(&self, choice: &Choice, level: f64, tau: f64) -> Vec<Choice> {
        let c = self.cf.comm(level);
        let mut fewest = choice.clone();
        let mut roomy = choice.clone();
        for (i, &(b, _)) in choice.iter().enumerate() {
            let t = self.rank_type[i];
            let at = self.options(t, b);
            let ok: Vec<&RankCost> = at
                .iter()
                .filter(|o| self.cf.rank_ms(t, o, &c, level) <= tau && o.cap >= level - FILL_TOL)
                .collect();
            if let Some(o) = ok.iter().min_by_key(|o| o.microbatches) {
                fewest[i] = (b, o.microbatches);
            }
            if let Some(o) = ok.iter().max_by(|a, b| {
                a.cap
                    .total_cmp(&b.cap)
                    .then(b.microbatches.cmp(&a.microbatches))
            }) {
                roomy[i] = (b, o.microbatches);
            }
        }
        vec![fewest, roomy]
    }
}

/// Non-state GiB of one single-sample micro-batch on `rank` (for the
/// infeasibility message when the closed form tabulated nothing).
fn one_sample_gib(cf: &ClosedForm<'_>, rank: usize) -> f64 {
    let sch = crate::schedule::Schedule::new(cf.costs(), cf.strategy());
    crate::fast::rank_peak(&sch, rank, &[1], 1, 0.0)
        .map(|p| p.device_bytes as f64 / crate::units::GIB)
        .unwrap_or(f64::INFINITY)
}

/// More samples than the GPUs can take at their largest micro-batch in the
/// strategy's passes (micro-batch-major) or in
/// [`crate::limits::MAX_MICROBATCHES`] micro-batches (layered).
fn too_many_samples(cf: &ClosedForm<'_>) -> Option<PlanError> {
    let costs = cf.costs();
    let per = cf.passes().unwrap_or(crate::limits::MAX_MICROBATCHES);
    let most: u64 = costs
        .rank_type
        .iter()
        .map(|&t| cf.max_microbatch(t) as u64 * per as u64)
        .sum();
    if most >= costs.workload.global_batch as u64 {
        return None;
    }
    let per = match cf.passes() {
        Some(p) => format!("{p} micro-batch passes"),
        None => format!(
            "the limit of {} micro-batches per GPU",
            crate::limits::MAX_MICROBATCHES
        ),
    };
    Some(PlanError::Infeasible {
        message: format!(
            "the GPUs take at most {most} of the {} samples (each GPU's largest micro-batch x {per})",
            costs.workload.global_batch
        ),
        shortfall_gib: 0.0,
        rank: None,
    })
}

/// The reasons no plan exists that need no search: a GPU that cannot hold
/// the share of the state its sharding fixes; for water-filled state, a
/// state larger than all free memory, or no GPU holding one sample; more
/// samples than the micro-batches can take ([`too_many_samples`], so a
/// micro-batch-major pass count that is too small costs no search).
fn infeasible_at_once(cf: &ClosedForm<'_>) -> Option<PlanError> {
    let costs = cf.costs();
    let g = costs.ranks();
    let s = cf.state_gib();
    if let Some(share) = cf.required_share() {
        return share_unholdable(cf, share).or_else(|| too_many_samples(cf));
    }
    // 1. The state alone is larger than all free memory.
    let free: f64 = (0..g)
        .map(|r| costs.usable_gib(r) - cf.empty_nonstate_gib(costs.rank_type[r]))
        .map(|x| x.max(0.0))
        .sum();
    if s > free {
        let short = s - free;
        let (r, most) = (0..g)
            .map(|r| (r, costs.usable_gib(r)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .unwrap_or((0, 0.0));
        let fixed = cf.empty_nonstate_gib(costs.rank_type[r]);
        let message = if free <= 0.0 {
            format!(
                "no GPU has memory left for the training state: the fixed overhead and buffers alone \
                 ({} on the largest GPU, rank {r} {}, with --overhead-gib {}) fill its usable {}",
                size_gib(fixed),
                costs.gpu(r).name,
                costs.options.overhead_gib,
                size_gib(most)
            )
        } else {
            format!(
                "the training state ({} at {} B/param) is larger than the free memory of all GPUs combined \
                 ({} after overhead): short by {} even with zero samples anywhere \
                 (the largest GPU, {r} {}, has {} usable)",
                size_gib(s),
                cf.strategy().gpu_state_bytes_per_param(),
                size_gib(free),
                size_gib(short),
                costs.gpu(r).name,
                size_gib(most)
            )
        };
        return Some(PlanError::Infeasible {
            message,
            shortfall_gib: short,
            rank: None,
        });
    }
    // 2. No GPU can hold one sample even with no state.
    if (0..cf.type_count()).all(|t| cf.max_microbatch(t) == 0) {
        let need = |r: usize| {
            cf.nonstate_gib(costs.rank_type[r], 1, 1)
                .unwrap_or_else(|| one_sample_gib(cf, r))
        };
        let (r, short) = (0..g)
            .map(|r| (r, need(r) - costs.usable_gib(r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        return Some(PlanError::Infeasible {
            message: format!(
                "no GPU can hold a micro-batch of one sample even with no training state ({}): \
                 the closest, GPU {r} ({}), needs {:.2} GiB of {:.2} GiB usable (short by {short:.2} GiB)",
                cf.strategy().label(),
                costs.gpu(r).name,
                need(r),
                costs.usable_gib(r)
            ),
            shortfall_gib: short,
            rank: Some(r),
        });
    }
    too_many_samples(cf)
}

/// What the sharding of `cf` keeps on every GPU, for messages.
fn share_rule(cf: &ClosedForm<'_>) -> String {
    let g = cf.strategy().shard_group;
    match cf.strategy().sharding {
        Sharding::NoShard => "no sharding keeps the whole state".to_string(),
        _ => format!("hybrid sharding in groups of {g} keeps 1/{g} of the state"),
    }
}

/// The GPU with least room for state, when it cannot hold `share` of it
/// even with no samples.
fn share_unholdable(cf: &ClosedForm<'_>, share: f64) -> Option<PlanError> {
    let costs = cf.costs();
    let s = cf.state_gib();
    let need = share * s;
    let what = share_rule(cf);
    // Room for state of a GPU of type t with no samples.
    let empty = |t: usize| cf.option(t, 0, 0).map_or(0.0, |o| o.cap);
    let worst = (0..costs.ranks())
        .map(|r| (r, empty(costs.rank_type[r])))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    if let Some((r, cap)) = worst.filter(|w| w.1 < share - FILL_TOL) {
        let t = costs.rank_type[r];
        let room = cap * s;
        return Some(PlanError::Infeasible {
            message: format!(
                "{what} ({need:.2} GiB) on every GPU: GPU {r} ({}) has room for {room:.2} GiB of state \
                 even with no samples ({:.2} GiB usable, {:.2} GiB for buffers and overhead): short by {:.2} GiB",
                costs.gpu(r).name,
                cf.usable_gib(t),
                cf.empty_nonstate_gib(t),
                need - room
            ),
            shortfall_gib: need - room,
            rank: Some(r),
        });
    }
    None
}

/// [`infeasible`] for shardings that fix every GPU's share `share` of the
/// state: a GPU that cannot hold it even with no samples, or the most
/// samples the GPUs can take next to it.
fn infeasible_share(search: &Search<'_, '_>, share: f64) -> PlanError {
    let cf = search.cf;
    let costs = cf.costs();
    let need = share * cf.state_gib();
    let what = share_rule(cf);
    // Largest batch each type takes with the share beside it.
    let most = |t: usize| -> u32 {
        search.types[t]
            .by_b
            .iter()
            .enumerate()
            .filter(|(_, v)| v.iter().any(|o| o.cap >= share - FILL_TOL))
            .map(|(u, _)| u as u32 * search.unit)
            .max()
            .unwrap_or(0)
    };
    let total: u64 = costs.rank_type.iter().map(|&t| most(t) as u64).sum();
    let mut per_type: Vec<String> = Vec::new();
    for t in 0..cf.type_count() {
        let r = costs.rank_type.iter().position(|&x| x == t).unwrap_or(0);
        per_type.push(format!("{} up to {}", costs.gpu(r).name, most(t)));
    }
    let mut passes = String::new();
    if let Some(p) = cf.passes() {
        passes = format!(" in {p} micro-batch passes");
    }
    PlanError::Infeasible {
        message: format!(
            "{what} ({need:.2} GiB) on every GPU: beside it the GPUs hold at most {total} of the {} samples{passes} \
             ({})",
            costs.workload.global_batch,
            per_type.join(", ")
        ),
        shortfall_gib: 0.0,
        rank: None,
    }
}

/// Explains why no plan exists (called when the search finds none).
fn infeasible(search: &mut Search<'_, '_>) -> PlanError {
    if let Some(e) = infeasible_at_once(search.cf) {
        return e;
    }
    let cf = search.cf;
    let costs = cf.costs();
    let s = cf.state_gib();
    if let Some(share) = cf.required_share() {
        return infeasible_share(search, share);
    }
    // 3. Activations of the batch plus the state do not fit together.
    let room = search.max_state_room().max(0.0);
    let short = (1.0 - room) * s;
    PlanError::Infeasible {
        message: format!(
            "placing all {} samples leaves room for at most {:.1}% of the {s:.2} GiB training state: \
             short by {short:.2} GiB across the cluster",
            costs.workload.global_batch,
            room * 100.0
        ),
        shortfall_gib: short,
        rank: None,
    }
}

/// Exact search of the closed-form objective (steps 1-4 of the module doc).
///
/// Each GPU type first gets a batch range of about 1.5x its speed share
/// (the options of larger batches are never built); any option of batch `b`
/// costs at least `b` times the type's per-sample floor
/// ([`ClosedForm::per_sample_floor_ms`]), so when the optimum found is below
/// the floor of every excluded batch it is the optimum over all batches;
/// otherwise the ranges grow to what the found optimum certifies and the
/// search runs once more.
pub fn search(cf: &ClosedForm<'_>) -> Result<Found, PlanError> {
    let costs = cf.costs();
    search_in_units(cf, batch_unit(costs.workload.global_batch, costs.ranks()))
}

/// [`search`] on a batch grid of `unit` samples (1: exact at any batch).
pub fn search_in_units(cf: &ClosedForm<'_>, unit: u32) -> Result<Found, PlanError> {
    let unit = unit.max(1);
    let costs = cf.costs();
    let big_b = costs.workload.global_batch;
    let nt = cf.type_count();
    let floor: Vec<f64> = (0..nt).map(|t| cf.per_sample_floor_ms(t)).collect();
    let speed: f64 = costs
        .rank_type
        .iter()
        .map(|&t| 1.0 / floor[t])
        .filter(|x| x.is_finite())
        .sum();
    let mut bmax: Vec<u32> = floor
        .iter()
        .map(|&f| {
            let share = if speed > 0.0 && f.is_finite() && f > 0.0 {
                big_b as f64 / f / speed
            } else {
                big_b as f64
            };
            ((1.5 * share).ceil() as u32).saturating_add(8).min(big_b)
        })
        .collect();
    if let Some(e) = infeasible_at_once(cf) {
        return Err(e);
    }
    let mut stats = SearchStats::default();
    loop {
        let full = bmax.iter().all(|&b| b >= big_b);
        match search_with(cf, &bmax, unit) {
            Ok(mut found) => {
                stats.candidates += found.stats.candidates;
                stats.feasible += found.stats.feasible;
                stats.subproblems += found.stats.subproblems;
                let j = found.eval.iteration_ms;
                let certified =
                    (0..nt).all(|t| bmax[t] >= big_b || floor[t] * (bmax[t] as f64 + 1.0) >= j);
                if certified {
                    stats.proven_optimal = found.stats.proven_optimal;
                    found.stats = stats;
                    return Ok(found);
                }
                bmax = (0..nt)
                    .map(|t| {
                        if floor[t].is_finite() && floor[t] > 0.0 {
                            ((j / floor[t]).floor() as u32)
                                .saturating_add(1)
                                .clamp(bmax[t], big_b)
                        } else {
                            big_b
                        }
                    })
                    .collect();
            }
            Err(e) if full => return Err(e),
            Err(_) => bmax = vec![big_b; nt],
        }
    }
}

/// [`search`] over options whose batch on type `t` is at most `bmax[t]`.
fn search_with(cf: &ClosedForm<'_>, bmax: &[u32], unit: u32) -> Result<Found, PlanError> {
    let mut s = Search::new(cf, bmax, unit);
    let g = s.rank_type.len();
    let lmin = 1.0 / g as f64;
    let mut best: Option<(Choice, Evaluation, f64)> = None;
    let mut alternatives: Vec<Choice> = Vec::new();
    let consider = |best: &mut Option<(Choice, Evaluation, f64)>,
                    alts: &mut Vec<Choice>,
                    choice: Choice,
                    tau: f64| {
        let Some(ev) = cf.evaluate(&choice) else {
            return;
        };
        let better = match best {
            Some((_, b, _)) => ev.iteration_ms < b.iteration_ms,
            None => true,
        };
        if better {
            if let Some((old, _, _)) = best.take() {
                alts.insert(0, old);
            }
            *best = Some((choice, ev, tau));
        } else {
            alts.push(choice);
        }
    };
    // Shardings that fix every GPU's share (hybrid, none): one bottleneck
    // search at that share is exact (the state is not water-filled, so the
    // level is known), the least total time breaking ties.
    if let Some(share) = cf.required_share() {
        let found = s.solve_bottleneck(share, Some(share), true);
        let Some((tau, Some(choice))) = found else {
            return Err(infeasible(&mut s));
        };
        consider(&mut best, &mut alternatives, choice, tau);
        let Some((choice, eval, tau)) = best else {
            return Err(infeasible(&mut s));
        };
        return finish(&mut s, choice, eval, tau, alternatives, true);
    }
    // Fast path: even state.
    let fast = s.solve_bottleneck(lmin, Some(lmin), true);
    if let Some((tau, Some(choice))) = fast.clone() {
        consider(&mut best, &mut alternatives, choice, tau);
    }
    let relaxed = s.solve_bottleneck(lmin, None, false);
    let Some((lower, _)) = relaxed else {
        return Err(infeasible(&mut s));
    };
    let mut proven =
        matches!(&best, Some((_, ev, _)) if ev.iteration_ms <= lower * (1.0 + OPT_TOL));
    if !proven {
        // Branch and bound on the water level.
        let mut stack = vec![(lmin, 1.0f64)];
        let mut explored = 0usize;
        proven = true;
        while let Some((lo, hi)) = stack.pop() {
            explored += 1;
            if explored > MAX_INTERVALS {
                proven = false;
                break;
            }
            let incumbent = best.as_ref().map_or(f64::INFINITY, |b| b.1.iteration_ms);
            let Some((lb, choice)) = s.solve_knapsack(lo, hi, incumbent) else {
                continue;
            };
            let ev_level = cf.evaluate(&choice).map(|e| e.level);
            consider(&mut best, &mut alternatives, choice, lb);
            let incumbent = best.as_ref().map_or(f64::INFINITY, |b| b.1.iteration_ms);
            if lb >= incumbent * (1.0 - OPT_TOL) {
                continue;
            }
            let Some(level) = ev_level else { continue };
            if level <= lo {
                continue;
            }
            stack.push((level, hi));
            if level - LEVEL_GAP >= lo {
                stack.push((lo, level - LEVEL_GAP));
            }
        }
    }
    let Some((choice, eval, tau)) = best else {
        return Err(infeasible(&mut s));
    };
    finish(&mut s, choice, eval, tau, alternatives, proven)
}

/// The search's result around its optimum `choice`: variants and
/// near-optimal plans (distinct, feasible), and the counts. On a batch
/// grid ([`batch_unit`] > 1) every plan is completed and refined to the
/// sample first ([`refine`]) and optimality is not claimed.
fn finish(
    s: &mut Search<'_, '_>,
    choice: Choice,
    eval: Evaluation,
    tau: f64,
    alternatives: Vec<Choice>,
    proven: bool,
) -> Result<Found, PlanError> {
    let cf = s.cf;
    let mut alts = s.variants(&choice, eval.level, tau.max(eval.iteration_ms));
    alts.extend(s.relaxed(eval.level, eval.iteration_ms, &RELAXED_SLACK));
    alts.extend(alternatives);
    let (choice, eval, proven) = if s.unit > 1 {
        alts = alts.iter().filter_map(|a| refine(s, a)).collect();
        let refined = refine(s, &choice).and_then(|c| cf.evaluate(&c).map(|e| (c, e)));
        // The best completed plan leads (the grid's optimum may complete
        // worse than one of its neighbours).
        let mut all: Vec<(Choice, Evaluation)> = refined.into_iter().collect();
        all.extend(
            alts.iter()
                .filter_map(|a| cf.evaluate(a).map(|e| (a.clone(), e))),
        );
        let Some(lead) = all
            .iter()
            .min_by(|a, b| a.1.iteration_ms.total_cmp(&b.1.iteration_ms))
            .cloned()
        else {
            return Err(infeasible(s));
        };
        (lead.0, lead.1, false)
    } else {
        (choice, eval, proven)
    };
    let mut distinct: Vec<Choice> = Vec::new();
    for a in alts {
        if a != choice && !distinct.contains(&a) && cf.evaluate(&a).is_some() {
            distinct.push(a);
        }
    }
    let mut stats = s.stats.clone();
    stats.proven_optimal = proven;
    Ok(Found {
        best: choice,
        eval,
        alternatives: distinct,
        stats,
    })
}

/// Builds the plan of a choice with its state fractions, under the closed
/// form's strategy.
pub fn plan_of(cf: &ClosedForm<'_>, name: &str, choice: &Choice) -> Option<(Plan, Evaluation)> {
    let ev = cf.evaluate(choice)?;
    Some((
        super::standard::plan_from(name, cf.strategy(), choice, &ev.fractions),
        ev,
    ))
}

/// Candidates whose closed-form time exceeds the best one by more than this
/// factor are not run through the fast model (unless none of those that
/// are fits): measured over the best plan of every strategy of the paper
/// cluster's five models, a two-node and a 64-GPU cluster (42 plans), the
/// simulated time was 0.97x to 1.15x the closed form's, well inside it.
pub const CLOSED_FORM_MARGIN: f64 = 1.25;

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

/// A list of planners (the native planner's seeds).
type Planners = Vec<Box<dyn Planner>>;

/// What searching one strategy gives: the closed form and optimum per
/// pass count searched.
type Searched<'a> = Result<Vec<(ClosedForm<'a>, Found)>, PlanError>;

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

impl Planner for Cephalo {
    fn name(&self) -> &'static str {
        "cephalo"
    }

    fn summary(&self) -> &'static str {
        "Cephalo: speed- and memory-balanced batches, state where memory is free, the best strategy (sharding, accumulation, recompute)"
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let costs = problem.costs;
        if costs.ranks() > MAX_GPUS {
            return Err(PlanError::invalid(
                "--cluster",
                "nodes",
                format!(
                    "the cephalo planner searches clusters of up to {MAX_GPUS} GPUs, this one has {}: \
                     its search grows with the square of the GPU count (1,024 GPUs plan in at most about 6 s, \
                     2,048 in up to 25 s, 4,096 in up to 3 min); plan it with a baseline \
                     (--planner fsdp, hsdp, speed-proportional, ...), or plan a sub-cluster of identical \
                     nodes and replicate the plan",
                    costs.ranks()
                ),
            ));
        }
        let space = strategy_space(problem);
        if space.is_empty() {
            // The pins themselves do not resolve: report why.
            problem.resolve(&StrategySpec::default(), &StrategySpec::default())?;
        }
        // The seeds: baselines whose rule can land in the space, as
        // candidates next to the search's own.
        let seeding = problem.options.seed_with_baselines && problem.judge.is_some();
        let mut seeds: Vec<Box<dyn Planner>> = Vec::new();
        if seeding {
            seeds = (self.seeds)();
        }
        let reaches = |p: &dyn Planner| -> Vec<usize> {
            let fixed = p.fixed_axes();
            (0..space.len())
                .filter(|&i| {
                    let s = &space[i];
                    fixed.sharding.is_none_or(|x| x == s.sharding)
                        && fixed.accumulation.is_none_or(|x| x == s.accumulation)
                        && fixed.checkpointing.is_none_or(|x| x == s.checkpointing)
                        && fixed.offload.is_none_or(|x| x == s.offload)
                })
                .collect()
        };
        seeds.retain(|p| !reaches(p.as_ref()).is_empty());
        // Seeds that can land under a micro-batch-major strategy are planned
        // while the strategies are searched (their memory walks are O(1) in
        // the pass count); layered-only ones (whose walks grow with the
        // micro-batch count) once the search is done, and only if they can
        // matter: the closed form being exact, a seed under a strategy
        // whose optimum is more than CLOSED_FORM_MARGIN slower than the
        // best is no closer, so it is never evaluated by the fast model and
        // ranks after every closed-form candidate; it is planned only if a
        // strategy it reaches has no closed-form plan or one within the
        // margin (or, below, when there are fewer candidates than the
        // simulator confirms, or every near candidate overflows the host).
        let (eager, lazy): (Planners, Planners) = seeds.into_iter().partition(|p| {
            reaches(p.as_ref())
                .iter()
                .any(|&i| space[i].accumulation.is_microbatch_major())
        });
        let plan_seeds =
            |list: &[Box<dyn Planner>]| -> Vec<(&'static str, Result<Planned, PlanError>)> {
                list.par_iter()
                    .map(|p| (p.name(), p.plan(problem)))
                    .collect()
            };
        let (results, mut seeded): (Vec<(Strategy, Searched<'_>)>, _) = rayon::join(
            || {
                space
                    .par_iter()
                    .map(|&s| (s, search_strategy(costs, s)))
                    .collect()
            },
            || plan_seeds(&eager),
        );
        // The closed-form optimum per strategy (`None`: it found no plan).
        let strategy_best: Vec<Option<f64>> = results
            .iter()
            .map(|(_, r)| {
                r.as_ref().ok().and_then(|l| {
                    l.iter()
                        .map(|(_, f)| f.eval.iteration_ms)
                        .min_by(f64::total_cmp)
                })
            })
            .collect();
        let best_found = strategy_best
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let (now, later): (Planners, Planners) = lazy.into_iter().partition(|p| {
            reaches(p.as_ref())
                .iter()
                .any(|&i| strategy_best[i].is_none_or(|b| b <= best_found * CLOSED_FORM_MARGIN))
        });
        seeded.extend(plan_seeds(&now));
        let mut stats = SearchStats {
            strategies: space.len() as u64,
            ..SearchStats::default()
        };
        let mut notes = Vec::new();
        // Candidates per strategy: its optimum, then variants.
        struct Cand {
            strategy: usize,
            label: String,
            plan: Plan,
            closed_ms: f64,
        }
        let mut cands: Vec<Cand> = Vec::new();
        let mut first_err: Option<PlanError> = None;
        let per_strategy = problem.options.confirm_candidates.max(1);
        let mut proven = true;
        for (si, (s, r)) in results.iter().enumerate() {
            match r {
                Ok(list) => {
                    // Micro-batch-major: the two best pass counts by closed
                    // form go on (the others only cost simulations of
                    // long schedules).
                    let mut order: Vec<&(ClosedForm<'_>, Found)> = list.iter().collect();
                    order.sort_by(|a, b| a.1.eval.iteration_ms.total_cmp(&b.1.eval.iteration_ms));
                    order.truncate(2);
                    for (cf, found) in order {
                        stats.candidates += found.stats.candidates;
                        stats.feasible += found.stats.feasible;
                        stats.subproblems += found.stats.subproblems;
                        proven &= found.stats.proven_optimal;
                        let passes = cf
                            .passes()
                            .map_or(String::new(), |n| format!(", {n} passes"));
                        if let Some((p, ev)) = plan_of(cf, self.name(), &found.best) {
                            cands.push(Cand {
                                strategy: si,
                                label: format!("{}{passes}: closed-form optimum", s.label()),
                                plan: p,
                                closed_ms: ev.iteration_ms,
                            });
                        }
                        for (k, a) in found
                            .alternatives
                            .iter()
                            .take(per_strategy.saturating_sub(1).max(2))
                            .enumerate()
                        {
                            if let Some((p, ev)) = plan_of(cf, self.name(), a) {
                                cands.push(Cand {
                                    strategy: si,
                                    label: format!(
                                        "{}{passes}: closed-form candidate {}",
                                        s.label(),
                                        k + 1
                                    ),
                                    plan: p,
                                    closed_ms: ev.iteration_ms,
                                });
                            }
                        }
                    }
                }
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e.clone());
                    }
                }
            }
        }
        let add_seeds = |seeded: Vec<(&'static str, Result<Planned, PlanError>)>,
                         cands: &mut Vec<Cand>| {
            for (name, result) in seeded {
                if let Ok(mut pl) = result {
                    let Some(si) = space.iter().position(|s| *s == pl.plan.strategy) else {
                        continue;
                    };
                    pl.plan.planner = self.name().to_string();
                    for gp in &mut pl.plan.gpus {
                        gp.note = None;
                    }
                    if !cands.iter().any(|c| c.plan == pl.plan) {
                        cands.push(Cand {
                            strategy: si,
                            label: format!("seed: {name}"),
                            plan: pl.plan,
                            closed_ms: f64::INFINITY,
                        });
                    }
                }
            }
        };
        add_seeds(seeded, &mut cands);
        // A seed left out ranks after every candidate here (it would not
        // be evaluated: key (2, infinity)), so the simulator would only
        // have confirmed it with fewer candidates than confirmations; then,
        // or with no closed-form plan at all, the seeds left out are
        // planned too.
        let mut later = Some(later);
        if cands.len() < per_strategy || cands.iter().all(|c| !c.closed_ms.is_finite()) {
            add_seeds(plan_seeds(&later.take().unwrap_or_default()), &mut cands);
        }
        // No closed-form plan under any strategy: only seeds that fit may
        // stand in (the closed form bounds memory conservatively, e.g. the
        // host split evenly; the fast model's memory is never below the
        // simulator's); none: the first strategy's reason.
        if cands.iter().all(|c| !c.closed_ms.is_finite()) {
            let opts = SimOptions::default();
            cands.retain(|c| crate::fast::evaluate(costs, &c.plan, &opts).is_ok_and(|e| !e.oom));
        }
        if cands.is_empty() {
            return Err(first_err.unwrap_or_else(|| PlanError::Infeasible {
                message: "no strategy in the search space fits".into(),
                shortfall_gib: 0.0,
                rank: None,
            }));
        }
        // Fast model on every candidate that can matter: the closed-form
        // optimum of each strategy (for the per-strategy table), the seeds,
        // and every candidate within CLOSED_FORM_MARGIN of the best
        // closed-form time (the closed form misses only second-order
        // effects, so a plan that much slower there does not win).
        let best_closed = cands
            .iter()
            .map(|c| c.closed_ms)
            .fold(f64::INFINITY, f64::min);
        let mut first_of_strategy = vec![None; space.len()];
        for (i, c) in cands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.closed_ms.is_finite())
        {
            let slot: &mut Option<usize> = &mut first_of_strategy[c.strategy];
            if slot.is_none_or(|j| c.closed_ms < cands[j].closed_ms) {
                *slot = Some(i);
            }
        }
        // A strategy's best closed-form time (a seed under that strategy
        // is no faster in the closed form, the search being exact; a seed
        // under a strategy the closed form finds no plan for is evaluated).
        let strategy_closed = |si: usize| first_of_strategy[si].map_or(0.0, |j| cands[j].closed_ms);
        let near = |ms: f64| ms <= best_closed * CLOSED_FORM_MARGIN;
        let wanted = |c: &Cand| {
            if c.closed_ms.is_finite() {
                near(c.closed_ms)
            } else {
                near(strategy_closed(c.strategy))
            }
        };
        let evaluate = |c: &Cand| {
            crate::fast::evaluate(costs, &c.plan, &SimOptions::default())
                .ok()
                .map(|e| (e.iteration_ms, e.oom))
        };
        let mut fast: Vec<Option<(f64, bool)>> = cands
            .par_iter()
            .map(|c| if wanted(c) { evaluate(c) } else { None })
            .collect();
        // The closed form does not check host memory: when every candidate
        // near the best overflows somewhere, the others (and the seeds left
        // out) get their turn.
        if !fast.iter().any(|f| matches!(f, Some((_, false)))) {
            if let Some(l) = later.take() {
                add_seeds(plan_seeds(&l), &mut cands);
                fast.resize(cands.len(), None);
            }
            let rest: Vec<Option<(f64, bool)>> = cands
                .par_iter()
                .zip(&fast)
                .map(|(c, f)| if f.is_none() { evaluate(c) } else { *f })
                .collect();
            fast = rest;
        }
        stats.fast_evaluated = fast.iter().filter(|f| f.is_some()).count() as u64;
        // Order: fitting by fast time, then the rest.
        let mut order: Vec<usize> = (0..cands.len()).collect();
        let key = |i: usize| match fast[i] {
            Some((ms, false)) => (0u8, ms),
            Some((ms, true)) => (1, ms),
            None => (2, cands[i].closed_ms),
        };
        order.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(a.cmp(&b))
        });
        let mut chosen = order[0];
        let mut verdicts: Vec<Option<(f64, bool)>> = vec![None; cands.len()];
        if let Some(judge) = problem.judge {
            // Simulates the candidates `idx` (in parallel).
            let judge_all = |idx: &[usize]| -> Vec<(usize, Option<(f64, bool)>)> {
                idx.par_iter()
                    .map(|&i| {
                        (
                            i,
                            judge
                                .judge(&cands[i].plan)
                                .ok()
                                .map(|v| (v.iteration_ms, v.oom)),
                        )
                    })
                    .collect()
            };
            let confirm: Vec<usize> = order.iter().copied().take(per_strategy).collect();
            let v = judge_all(&confirm);
            let mut best = f64::INFINITY;
            let take = |v: Vec<(usize, Option<(f64, bool)>)>,
                        verdicts: &mut Vec<Option<(f64, bool)>>,
                        best: &mut f64,
                        chosen: &mut usize| {
                for (i, x) in v {
                    verdicts[i] = x;
                    if let Some((ms, false)) = x {
                        if ms < *best || (ms == *best && i < *chosen) {
                            *best = ms;
                            *chosen = i;
                        }
                    }
                }
            };
            take(v, &mut verdicts, &mut best, &mut chosen);
            // The fast model and the closed form time ops alone; the
            // simulator shares links and slows compute beside collectives,
            // so a strategy whose best fast (or closed-form) time is below
            // the best simulated one could still win: confirm its best
            // candidate too, until none is left.
            loop {
                let mut seen = vec![false; space.len()];
                let more: Vec<usize> = order
                    .iter()
                    .copied()
                    .filter(|&i| {
                        let first = !std::mem::replace(&mut seen[cands[i].strategy], true);
                        let could_win = match fast[i] {
                            Some((ms, oom)) => !oom && ms < best,
                            None => cands[i].closed_ms < best,
                        };
                        first && verdicts[i].is_none() && could_win
                    })
                    .collect();
                if more.is_empty() {
                    break;
                }
                let v = judge_all(&more);
                let before = verdicts.iter().filter(|x| x.is_some()).count();
                take(v, &mut verdicts, &mut best, &mut chosen);
                if verdicts.iter().filter(|x| x.is_some()).count() == before {
                    break;
                }
            }
            stats.simulated = verdicts.iter().filter(|x| x.is_some()).count() as u64;
            if !best.is_finite() {
                notes.push("the simulator reports every confirmed candidate out of memory; returning the fast model's best".into());
                chosen = order[0];
            } else if cands[chosen].label != cands[order[0]].label {
                notes.push(format!(
                    "the simulator rated {} best ({best:.1} ms)",
                    cands[chosen].label
                ));
            }
        } else {
            notes.push(
                "not confirmed with the simulator (no judge given): the fast model's best".into(),
            );
        }
        if !proven {
            notes.push(format!("a closed-form search stopped after {MAX_INTERVALS} intervals without proving optimality"));
        }
        // The best plan under each strategy considered.
        let mut considered: Vec<Considered> = space
            .iter()
            .map(|&s| Considered {
                strategy: s,
                plan: None,
                closed_form_ms: None,
                iteration_ms: None,
                simulated: false,
                oom: false,
                note: None,
            })
            .collect();
        for (si, (_, r)) in results.iter().enumerate() {
            if let Err(e) = r {
                considered[si].note = Some(e.to_string());
            }
        }
        for &i in &order {
            let c = &cands[i];
            let slot = &mut considered[c.strategy];
            let (ms, oom, sim) = match (verdicts[i], fast[i]) {
                (Some((ms, oom)), _) => (Some(ms), oom, true),
                (None, Some((ms, oom))) => (Some(ms), oom, false),
                _ => (None, false, false),
            };
            let closed = c.closed_ms.is_finite().then_some(c.closed_ms);
            let better = match (slot.iteration_ms, ms) {
                // A simulated verdict outranks the fast model's.
                (Some(_), Some(_)) if sim != slot.simulated => sim,
                (None, Some(_)) => true,
                // Neither evaluated: the lower closed-form time.
                (None, None) => match (slot.closed_form_ms, closed) {
                    (_, None) => slot.plan.is_none(),
                    (None, Some(_)) => true,
                    (Some(old), Some(new)) => new < old,
                },
                (Some(_), None) => false,
                (Some(old), Some(new)) => (slot.oom && !oom) || (slot.oom == oom && new < old),
            };
            if slot.plan.is_none() || better {
                slot.plan = Some(c.plan.clone());
                slot.closed_form_ms = closed;
                slot.iteration_ms = ms;
                slot.simulated = sim;
                slot.oom = oom;
            }
        }
        let mut plan = cands.swap_remove(chosen).plan;
        for (i, gp) in plan.gpus.iter_mut().enumerate() {
            if gp.batch == 0 {
                let msg = format!(
                    "GPU {i} ({}) gets no samples and only holds {:.1}% of the training state: giving it samples does not shorten the iteration",
                    costs.gpu(i).name,
                    gp.state_fraction * 100.0
                );
                gp.note = Some(msg.clone());
                notes.push(msg);
            }
        }
        let choice: Choice = plan
            .gpus
            .iter()
            .map(|g| (g.batch, g.microbatches))
            .collect();
        let objective = ClosedForm::new(costs, plan.strategy, plan.passes())
            .ok()
            .and_then(|cf| cf.evaluate(&choice))
            .map(|e| Objective {
                name: "closed_form_iteration_ms",
                value_ms: e.iteration_ms,
            });
        stats.proven_optimal = proven;
        Ok(Planned {
            plan,
            objective,
            compat: None,
            considered,
            stats,
            notes,
        })
    }
}

/// A memory size for a message: GiB with two decimals, MiB below 0.1 GiB
/// (a tiny model's state is not "0.00 GiB").
fn size_gib(gib: f64) -> String {
    if gib.abs() >= 0.1 || gib == 0.0 {
        format!("{gib:.2} GiB")
    } else {
        format!("{:.2} MiB", gib * 1024.0)
    }
}
