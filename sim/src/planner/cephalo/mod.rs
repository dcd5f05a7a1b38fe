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
//!    total rank time (a min-plus pass over the cells a Lagrangian bound
//!    leaves, which keeps its ties; where every GPU type's
//!    Lagrangian-optimal batches cost exactly the same, the tie policy of
//!    `ties` picks the same plan from subset sums instead, [`TIE_TOL`]);
//!    variants of the optimum (fewest micro-batches, most memory headroom)
//!    and the least-total-time plans under slightly relaxed bottlenecks
//!    ([`RELAXED_SLACK`]) are kept as near-optimal candidates;
//! 5. the candidates: per strategy, its closed-form optimum and
//!    near-optimal variants, plus the baselines' and the compat planner's
//!    plans whose strategy lies in the space, as seeds (those that can
//!    land under a micro-batch-major strategy planned while the search
//!    runs, the layered-only ones after it, and only when a strategy they
//!    reach is within [`CLOSED_FORM_MARGIN`] of the best or has no plan).
//!    With fewer candidates than the simulator confirms, or no
//!    closed-form plan at all, every seed is planned (with none, the seeds
//!    that fit stand in);
//! 6. the candidates whose closed-form time is within
//!    [`CLOSED_FORM_MARGIN`] of the best are evaluated by the fast model
//!    ([`crate::fast::evaluate`], the simulator's times without building a
//!    graph), and the others too when all of those overflow; the fast
//!    model ranks them;
//! 7. the fastest that fit run through the simulator ([`super::Judge`], in
//!    parallel with rayon), then the best of every strategy that could
//!    still win, and the fastest plan that fits wins. The best plan under
//!    every strategy considered comes back in
//!    [`super::Planned::considered`].
//!
//! Layout: the planner's [`Planner::plan`] (here) runs the steps in order
//! on a `candidates::Run`, the state they pass on. Steps 1-4 are `search`
//! (`options`: step 1; `tables`: the option tables on the batch grid of
//! `grid`; `bottleneck`: steps 2 and 4 (`bitset`: its subset sums), `ties`
//! the tie policy of step 4; `knapsack`: step 3; `refine` and `classes`:
//! the completion of grid plans to the sample; `infeasible`: why nothing
//! fits), run per strategy of `space`; step 5 is `candidates` and `seeds`,
//! step 6 `rank`, step 7 `confirm`, and `outcome` the answer.

mod bitset;
mod bottleneck;
mod candidates;
mod classes;
mod confirm;
mod grid;
mod infeasible;
mod knapsack;
mod options;
mod outcome;
mod rank;
mod refine;
mod search;
mod seeds;
mod space;
mod tables;
mod ties;

pub use candidates::{plan_of, CLOSED_FORM_MARGIN};
pub use grid::{batch_unit, EXACT_BATCH, MIN_UNITS_PER_GPU, SEARCH_CELLS};
pub use search::{search, search_in_units, Found, LEVEL_GAP, MAX_INTERVALS, RELAXED_SLACK};
pub use space::{pass_ladder, strategy_space, PASS_LADDER};
pub use tables::{Choice, OPT_TOL};
pub use ties::TIE_TOL;

use super::{Planned, Planner, Problem};
use crate::error::PlanError;
use crate::strategy::StrategySpec;
use candidates::Run;
use seeds::Seeds;
use space::search_space;

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

/// Most GPUs the planner searches: what plans within about 10 s on this
/// project's 2-core machine whatever the batch. Its sub-problems walk every
/// GPU over every batch unit (at least 4 units per GPU, [`batch_unit`]), and
/// a search solves hundreds of them. The subset-sum checks take a GPU
/// type's GPUs at once; the exact tie-break pass (`Search::min_sum`) walks
/// only the cells a Lagrangian bound cannot rule out, and where many
/// batches cost exactly the same (the multiplier near zero), which made
/// nearly every cell tie with the optimum, the tie policy of `ties` takes
/// the plan from word-parallel subset sums instead ([`TIE_TOL`]). What is
/// left still grows faster than the GPU count: tied batches whose times
/// rise with the multiplier's slope keep the exact pass wide, and at 16
/// samples per GPU the branch and bound on the water level can run to
/// [`MAX_INTERVALS`], pricing every option per interval. Measured on the
/// 5-type mixed cluster replicated (whole process, `cephalo plan --planner
/// cephalo --cluster C --model M --seq-len S --global-batch PxGPUs`). On
/// the quiet machine (load average about 1.5, nothing else building):
/// 2,048 GPUs in at most about 7 s (BERT-Large at 16 per GPU 7.2 s, at 4
/// per GPU 3.4 s; LLaMA-2-7B at 16 per GPU 1.8 s), 1,536 in 5.2 s and
/// 1,024 in 3.4 s (BERT-Large at 16 per GPU); 4,096 took 13.6 s, so it is
/// refused rather than promised. With the 2 cores shared (load about 3.5)
/// the same runs take about twice as long: 2,048 up to 15 s, 4,096 up to
/// 29 s (BERT-Large at 4 per GPU at 2,048: 6.0 s, 22 s before the tie
/// policy).
pub const MAX_GPUS: usize = 2048;

impl Planner for Cephalo {
    fn name(&self) -> &'static str {
        "cephalo"
    }

    fn summary(&self) -> &'static str {
        "Cephalo: speed- and memory-balanced batches, state where memory is free, the best strategy (sharding, accumulation, recompute)"
    }

    /// The steps of the module doc, in order.
    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        within_gpu_limit(problem.costs)?;
        let space = strategy_space(problem);
        if space.is_empty() {
            // The pins themselves do not resolve: report why.
            problem.resolve(&StrategySpec::default(), &StrategySpec::default())?;
        }
        // Steps 1-4 under every strategy, while the seeds that can land
        // under a micro-batch-major strategy are planned; then the
        // layered-only seeds that can matter.
        let mut seeds = Seeds::choose(*problem, &space, self.seeds);
        let (results, mut seeded) = rayon::join(
            || search_space(problem.costs, &space),
            || seeds.plan_eager(),
        );
        seeded.extend(seeds.plan_near(&space, &results));
        // 5. The candidates: closed-form optima and variants, then seeds.
        let mut run = Run::new(self.name(), *problem, space);
        run.add_closed_form(&results);
        run.add_seeds(seeded);
        run.seeds_stand_in(&mut seeds)?;
        // 6. The margin filter and the fast model's ranking.
        let wanted = run.near_best();
        run.evaluate_fast(&wanted);
        run.evaluate_rest_if_all_overflow(&mut seeds);
        run.rank();
        // 7. Simulator confirmation, and the answer.
        run.confirm();
        Ok(run.into_planned())
    }
}

/// The problem's cluster within [`MAX_GPUS`].
fn within_gpu_limit(costs: &crate::cost::CostModel) -> Result<(), PlanError> {
    if costs.ranks() > MAX_GPUS {
        return Err(PlanError::invalid(
            crate::error::WORKLOAD,
            "nodes",
            format!(
                "the cephalo planner searches clusters of up to {MAX_GPUS} GPUs, this one has {}: \
                 its search grows faster than the GPU count (2,048 GPUs plan in up to about 7 s on a \
                 quiet 2-core machine, 4,096 in up to 14 s); plan it with a baseline \
                 (planner fsdp, hsdp, speed-proportional, ...), or plan a sub-cluster of identical \
                 nodes and replicate the plan",
                costs.ranks()
            ),
        ));
    }
    Ok(())
}
