//! The exact search's state ([`Search`]): every GPU type's option tables on
//! the batch grid, their costs at a water level, and the counts; the
//! sub-problems of steps 2-4 (`bottleneck`, `knapsack`) run on it.

use super::options::{options_at, TypeOptions};
use crate::planner::closed_form::{ClosedForm, RankCost};
use crate::planner::water::FILL_TOL;
use crate::planner::SearchStats;
use rayon::prelude::*;

/// Relative tolerance of the optimality proof.
pub const OPT_TOL: f64 = 1e-12;

/// A plan as per-rank `(b, n)`.
pub type Choice = Vec<(u32, u32)>;

/// The exact search's state: the option tables of every GPU type on the
/// batch grid and the counts of the search so far.
pub(super) struct Search<'c, 'a> {
    /// The closed form searched.
    pub(super) cf: &'c ClosedForm<'a>,
    /// Samples per batch unit: option tables and the knapsacks count
    /// batches in units (1 below [`super::grid::EXACT_BATCH`]).
    pub(super) unit: u32,
    /// The global batch in units (rounded down).
    pub(super) big_b: usize,
    /// Per rank: its GPU type.
    pub(super) rank_type: Vec<usize>,
    /// Per GPU type: its options by batch unit.
    pub(super) types: Vec<TypeOptions>,
    /// The search's counts so far.
    pub(super) stats: SearchStats,
}

/// Per type and batch: the option costs at one λ.
pub(super) struct Priced {
    /// `cost[t][b][k]` = rank time of option k of batch b on type t.
    pub(super) cost: Vec<Vec<Vec<f64>>>,
}

impl<'c, 'a> Search<'c, 'a> {
    /// The option tables of `cf` for batches up to `bmax[t]` samples on
    /// type `t`, on a grid of `unit` samples.
    pub(super) fn new(cf: &'c ClosedForm<'a>, bmax: &[u32], unit: u32) -> Search<'c, 'a> {
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

    /// Ranks of every GPU type, by type.
    pub(super) fn type_counts(&self) -> Vec<usize> {
        let mut counts = vec![0usize; self.types.len()];
        for &t in &self.rank_type {
            counts[t] += 1;
        }
        counts
    }

    /// Every option's rank time at water level `level`.
    pub(super) fn price(&self, level: f64) -> Priced {
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

    /// Per type and batch: the cheapest option at `cost_level` among those
    /// whose cap is at least `min_cap` (`(cost, option index)`).
    pub(super) fn best_table(
        &self,
        cost_level: f64,
        min_cap: Option<f64>,
    ) -> Vec<Vec<(f64, usize)>> {
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

    /// The options of `b` samples on type `t`: from the table when `b` is
    /// on its grid, else built.
    pub(super) fn options(&self, t: usize, b: u32) -> std::borrow::Cow<'_, [RankCost]> {
        let u = (b / self.unit) as usize;
        match self.types[t].by_b.get(u) {
            Some(v) if b.is_multiple_of(self.unit) => std::borrow::Cow::Borrowed(v),
            _ => std::borrow::Cow::Owned(options_at(self.cf, t, b, self.unit > 1)),
        }
    }

    /// Variants of a choice: same batches with the fewest micro-batches, and
    /// with the most room for state, among options within `tau` at `level`.
    pub(super) fn variants(&self, choice: &Choice, level: f64, tau: f64) -> Vec<Choice> {
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
