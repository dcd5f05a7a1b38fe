//! `cephalo-compat`: the reference Cephalo optimizer's rules (strategy
//! `dp_ga`), reproduced exactly so its plans can be checked against the
//! paper's code (the authors' optimizer, `dp_ga`, as the Cephalo paper (ICS 2025)
//! describes it; its plans for the paper's workloads ship with the reference
//! profiles).
//!
//! Algorithm (as read from the reference code):
//! * per-block times `f(m)`, `b(m)`: the raw profile value at micro-batch size
//!   `m` when measured, else the linear fit `slope * m + intercept`;
//! * rank `i` with `n` micro-batches of `m`: `F = n f(m)`,
//!   `B = n b(m) + 10 ms (n - 1)`, `T_i = max(AG', F) + max(AG' + RS', F + B)`
//!   where `AG'`/`RS'` are the given per-block collective times, x1.25 when
//!   `m` exceeds the rank's even-shard bound;
//! * memory of a micro-batch `act(m) + 2 GiB` (the memory cluster's profile);
//!   even-shard bound: largest `m` with `act(m) + 2 <= 0.75 mem_i - 16 P / G`;
//!   hard bound: the same without the state term (`mem_i` from the reference
//!   GPU memory table, `P` the memory entry's `parameters`);
//! * a dynamic program over (ranks so far, samples so far, sum of micro-batch
//!   sizes so far) minimises the slowest `T_i`, every rank getting at least
//!   one sample with `b_i = n_i m_i`, candidates tried in increasing `m` then
//!   `n`, replacing the incumbent only when strictly better;
//! * for each sum of micro-batch sizes `s = 1..B` the DP's plan is a
//!   candidate; the one with the highest `B / T` (strictly higher replaces)
//!   among those whose `sum(act(m_i) + 2) + 16 P` stays under
//!   `0.75 sum(mem_i)` wins; the first plan is kept if none fits.
//!
//! Units: ms, GiB, samples. Cost: `O(G B^2 B log B)` cell updates in the
//! worst case, a vectorised min-max fill with rows in parallel. The plan's state
//! fractions are the corrected split (water-filling into each rank's free
//! memory); [`super::CompatDetails::reference_state_fractions`] keeps the
//! reference code's own (even) output.

use super::{CompatDetails, Objective, Planned, Planner, Problem, SearchStats};
use crate::error::PlanError;
use crate::plan::Plan;
use crate::profile::{ComputeCurve, MemoryProfile};
use crate::units::GIB;
use rayon::prelude::*;

/// Extra ms the reference charges per additional micro-batch.
pub const GA_OVERHEAD_MS: f64 = 10.0;
/// Factor on collective times for a rank whose micro-batch exceeds its
/// even-shard bound (its state is assumed moved elsewhere).
pub const COLLECTIVE_PENALTY: f64 = 1.25;
/// Largest global batch the compat tables accept (each rank's table holds
/// `(B + 1)^2` values).
pub const MAX_GLOBAL_BATCH: u32 = 2048;
/// Largest estimated DP work (cell updates) compat mode accepts; the
/// reference table grows like `G B^3 log B`.
pub const MAX_CELLS: f64 = 4e9;

/// The reference optimizer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Compat;

/// Reference lookup of a block time: raw value at `m` if measured, else the fit.
pub fn reference_ms(curve: &ComputeCurve, m: u32, fwd: bool) -> f64 {
    let (vals, fit) = if fwd {
        (&curve.fwd_ms, &curve.fwd_fit)
    } else {
        (&curve.bwd_ms, &curve.bwd_fit)
    };
    match curve.batch_sizes.binary_search(&m) {
        Ok(i) => vals[i],
        Err(_) => fit.at(m as f64),
    }
}

/// The reference memory curve (`act(m)`, GiB) and parameter count.
#[derive(Debug, Clone)]
struct MemoryCurve {
    act: Option<MemoryProfile>,
    parameters: f64,
}

impl MemoryCurve {
    fn act(&self, problem: &Problem<'_>, m: u32) -> f64 {
        match &self.act {
            Some(p) => p.act_gib(m),
            None => problem.costs.act_mem_gib(m),
        }
    }
}

/// Everything the reference DP needs, resolved once.
#[derive(Debug, Clone)]
pub struct CompatInputs {
    /// GPUs with no reference entry under the key, and the source of the
    /// curve used instead (empty when every GPU has its reference entry).
    pub substituted: Vec<(String, String)>,
    /// Model key whose profiles are used.
    pub model_key: String,
    /// Per rank: largest micro-batch with an even state shard.
    pub even_bound: Vec<u32>,
    /// Per rank: largest micro-batch with no state.
    pub hard_bound: Vec<u32>,
    /// Per rank: `f(m)` for m = 1..=hard (index m-1).
    pub fwd_ms: Vec<Vec<f64>>,
    /// Per rank: `b(m)` for m = 1..=hard (index m-1).
    pub bwd_ms: Vec<Vec<f64>>,
    /// `act(m) + overhead` for m = 1..=max hard (index m-1), GiB.
    pub mb_mem_gib: Vec<f64>,
    /// Training state of the whole model, GiB (`16 P / 2^30`).
    pub state_gib: f64,
    /// Per rank: reference memory x allowed fraction, GiB.
    pub usable_gib: Vec<f64>,
    /// Per-block all-gather time, ms.
    pub ag_ms: f64,
    /// Per-block reduce-scatter time, ms.
    pub rs_ms: f64,
    /// Global batch.
    pub global_batch: u32,
}

impl CompatInputs {
    /// Resolves the reference inputs of a problem: profiles by the exact
    /// reference model key, reference GPU memory, the memory cluster's curve.
    pub fn resolve(problem: &Problem<'_>) -> Result<CompatInputs, PlanError> {
        let costs = problem.costs;
        let g = costs.ranks();
        let big_b = costs.workload.global_batch;
        check_table_size(g, big_b)?;
        let model_key = reference_model_key(problem);
        let memory = reference_memory(problem, &model_key);
        let (policy, overhead_gib) = (costs.options.mem_policy, costs.overhead_gib());
        let state_gib = crate::strategy::STATE_BYTES_PER_PARAM * memory.parameters / GIB;
        let usable_gib: Vec<f64> = (0..g)
            .map(|r| policy.usable_gib(costs.gpu(r).reference_capacity_gib(), overhead_gib))
            .collect();
        let mb = |m: u32| memory.act(problem, m) + overhead_gib;
        let bound = |room: f64| {
            let mut m = 0u32;
            while m < 1 << 20 && mb(m + 1) <= room {
                m += 1;
            }
            m
        };
        let even_bound: Vec<u32> = usable_gib
            .iter()
            .map(|u| bound(u - state_gib / g as f64))
            .collect();
        let hard_bound: Vec<u32> = usable_gib.iter().map(|&u| bound(u)).collect();
        let max_hard = hard_bound.iter().copied().max().unwrap_or(0).min(big_b);
        let mb_mem_gib: Vec<f64> = (1..=max_hard.max(1)).map(mb).collect();
        let curves = reference_curves(problem, &model_key, &hard_bound);
        Ok(CompatInputs {
            substituted: curves.substituted,
            model_key,
            even_bound,
            hard_bound,
            fwd_ms: curves.fwd_ms,
            bwd_ms: curves.bwd_ms,
            mb_mem_gib,
            state_gib,
            usable_gib,
            ag_ms: problem.options.compat_ag_ms,
            rs_ms: problem.options.compat_rs_ms,
            global_batch: big_b,
        })
    }

    /// The reference per-block time of rank `r` with `n` micro-batches of `m`.
    pub fn rank_ms(&self, r: usize, m: u32, n: u32) -> f64 {
        let f = self.fwd_ms[r][m as usize - 1];
        let b = self.bwd_ms[r][m as usize - 1];
        let big_f = n as f64 * f;
        let big_b = n as f64 * b + GA_OVERHEAD_MS * (n - 1) as f64;
        let (mut ag, mut rs) = (self.ag_ms, self.rs_ms);
        if m > self.even_bound[r] {
            ag *= COLLECTIVE_PENALTY;
            rs *= COLLECTIVE_PENALTY;
        }
        ag.max(big_f) + (ag + rs).max(big_f + big_b)
    }

    /// `act(m) + overhead`, GiB.
    pub fn mb_gib(&self, m: u32) -> f64 {
        self.mb_mem_gib[m as usize - 1]
    }

    /// Whether a choice of micro-batch sizes passes the cluster-wide cap.
    pub fn fits_cluster(&self, ms: &[u32]) -> bool {
        let need: f64 = ms.iter().map(|&m| self.mb_gib(m)).sum::<f64>() + self.state_gib;
        need < self.usable_gib.iter().sum::<f64>()
    }
}

/// Refuses a global batch of `big_b` on `g` GPUs whose reference tables
/// would be too large (the batch over [`MAX_GLOBAL_BATCH`], the estimated
/// cell updates over [`MAX_CELLS`]).
fn check_table_size(g: usize, big_b: u32) -> Result<(), PlanError> {
    if big_b > MAX_GLOBAL_BATCH {
        return Err(PlanError::invalid(
            crate::error::WORKLOAD,
            "global_batch",
            format!("compat mode handles global batches up to {MAX_GLOBAL_BATCH}, got {big_b}"),
        ));
    }
    let est =
        (g.saturating_sub(2).max(1) as f64) * (big_b as f64).powi(3) * (big_b.max(2) as f64).ln()
            / 6.0;
    if est > MAX_CELLS {
        return Err(PlanError::invalid(
            crate::error::WORKLOAD,
            "global_batch",
            format!("compat mode's table for {g} GPUs at global batch {big_b} is too large (~{est:.1e} cells); use the native planner"),
        ));
    }
    Ok(())
}

/// The model key whose profiles the reference uses: the name the user
/// typed when profiles use it, else the key of the memory entry in use,
/// else any block entry of the model (DeepSpeed's first), else the model
/// name.
fn reference_model_key(problem: &Problem<'_>) -> String {
    let w = &problem.costs.workload;
    let profiles = problem.profiles;
    let cluster = problem.costs.options.memory_cluster.as_deref();
    let user_key = problem.options.model_key.as_deref();
    let has_blocks = |k: &str| {
        profiles
            .blocks
            .iter()
            .any(|b| b.model_key == k && b.dtype == w.dtype)
    };
    match user_key {
        Some(k) if has_blocks(k) => k.to_string(),
        _ => match profiles.memory(cluster, &w.model.name, w.dtype) {
            Some(m) if has_blocks(&m.model_key) => m.model_key.clone(),
            _ => profiles
                .blocks
                .iter()
                .filter(|b| b.model == w.model.name && b.dtype == w.dtype && b.seq_len == w.seq_len)
                .min_by_key(|b| (!b.model_key.starts_with("deepspeed"), b.model_key.clone()))
                .map(|b| b.model_key.clone())
                .unwrap_or_else(|| w.model.name.clone()),
        },
    }
}

/// The reference memory curve: the memory cluster's entry under
/// `model_key`, else its entry for the model, else the cost model's
/// curve with the model's parameter count.
fn reference_memory(problem: &Problem<'_>, model_key: &str) -> MemoryCurve {
    let w = &problem.costs.workload;
    let cluster = problem.costs.options.memory_cluster.as_deref();
    let mem_entry = |k: Option<&str>| {
        problem
            .profiles
            .memory
            .iter()
            .filter(|m| m.dtype == w.dtype && cluster.is_none_or(|c| m.cluster == c))
            .find(|m| match k {
                Some(k) => m.model_key == k,
                None => m.model == w.model.name,
            })
    };
    match mem_entry(Some(model_key)).or_else(|| mem_entry(None)) {
        Some(m) => MemoryCurve {
            act: Some(m.clone()),
            parameters: m.parameters as f64,
        },
        None => MemoryCurve {
            act: None,
            parameters: w.model.total_params() as f64,
        },
    }
}

/// Per-rank reference block times and the GPUs that lacked a reference
/// entry (see [`CompatInputs`]).
struct ReferenceCurves {
    /// Per rank: `f(m)` for m = 1..=hard (index m-1).
    fwd_ms: Vec<Vec<f64>>,
    /// Per rank: `b(m)` for m = 1..=hard (index m-1).
    bwd_ms: Vec<Vec<f64>>,
    /// GPUs with no reference entry under the key, and the source of the
    /// curve used instead.
    substituted: Vec<(String, String)>,
}

/// Every rank's block times up to its hard bound (capped at the global
/// batch): the reference entry under `model_key`; without one, the curve
/// the cost model resolved (another profile or the calibrated prediction),
/// so the reference rules still apply.
fn reference_curves(problem: &Problem<'_>, model_key: &str, hard_bound: &[u32]) -> ReferenceCurves {
    let costs = problem.costs;
    let w = &costs.workload;
    let g = costs.ranks();
    let mut fwd_ms = Vec::with_capacity(g);
    let mut bwd_ms = Vec::with_capacity(g);
    let mut substituted = Vec::new();
    for (r, &hb) in hard_bound.iter().enumerate() {
        let gpu = &costs.gpu(r).name;
        let curve = match problem
            .profiles
            .block_by_key(gpu, model_key, w.seq_len, w.dtype)
        {
            Some(p) => &p.curve,
            None => {
                let c = &costs.gpu_type(r).block;
                if !substituted.iter().any(|(g, _): &(String, String)| g == gpu) {
                    substituted.push((gpu.clone(), c.source.to_string()));
                }
                c
            }
        };
        let h = hb.min(w.global_batch);
        fwd_ms.push((1..=h).map(|m| reference_ms(curve, m, true)).collect());
        bwd_ms.push((1..=h).map(|m| reference_ms(curve, m, false)).collect());
    }
    ReferenceCurves {
        fwd_ms,
        bwd_ms,
        substituted,
    }
}

/// Result of the reference search: per rank (m, n) and the objective.
#[derive(Debug, Clone, PartialEq)]
pub struct CompatSolution {
    /// Per rank (micro-batch size, micro-batch count).
    pub choice: Vec<(u32, u32)>,
    /// Slowest rank's per-block time, ms.
    pub makespan_ms_per_block: f64,
    /// Whether it passed the cluster-wide memory cap.
    pub fits_cluster_memory: bool,
    /// DP value for every sum of micro-batch sizes s = 1..=B (index s-1;
    /// infinity where no plan has that sum).
    pub per_sum_ms: Vec<f64>,
    /// DP cell updates performed.
    pub cells: u64,
}

const INF: f64 = f64::INFINITY;

/// `max(prev, t)` exactly as the table fill computes it (backtracking must
/// reproduce the same bits).
#[inline]
fn cell(prev: f64, t: f64) -> f64 {
    if prev > t {
        prev
    } else {
        t
    }
}

/// Runs the reference dynamic program and selection. `None` when no plan
/// gives every rank a sample within its hard bound.
///
/// The tables hold values only (a vectorisable min-max fill, rows in
/// parallel); the reference's choice at a cell — the first `(m, n)` in
/// increasing `m`, then `n` that attains the cell's value, which is what
/// "replace only when strictly better" keeps — is recovered afterwards for
/// the cells on the backtracking paths.
pub fn solve(inp: &CompatInputs) -> Option<CompatSolution> {
    let g = inp.hard_bound.len();
    let bb = inp.global_batch as usize;
    if g == 0 || bb < g {
        return None;
    }
    let tables = Tables::fill(inp);
    let fin = &tables.layers[g - 1];
    let w = tables.w;
    let per_sum_ms: Vec<f64> = (1..=bb).map(|s| fin[bb * w + s]).collect();
    let best = tables.select(inp);
    best.map(|(choice, v, fits)| CompatSolution {
        choice,
        makespan_ms_per_block: v,
        fits_cluster_memory: fits,
        per_sum_ms,
        cells: tables.cells,
    })
}

/// One rank's `(m, n)` candidate with its reference time, ms.
type Candidate = (u32, u32, f64);

/// A selected plan: per rank `(m, n)`, its slowest rank's per-block time
/// (ms) and whether it passes the cluster-wide memory cap.
type Pick = (Vec<(u32, u32)>, f64, bool);

/// The reference DP's filled tables.
struct Tables {
    /// Row width: global batch + 1; cell `(b, s)` is at `b * w + s`.
    w: usize,
    /// Per rank: its `(m, n)` candidates in the reference order (increasing
    /// `m`, then `n`) with their times.
    cands: Vec<Vec<Candidate>>,
    /// Per rank `i`: the smallest slowest-rank time over ranks `0..=i`
    /// giving `b` samples with micro-batch sizes summing to `s`, per cell
    /// (infinity where unreachable).
    layers: Vec<Vec<f64>>,
    /// DP cell updates performed.
    cells: u64,
}

impl Tables {
    /// Fills the table of every rank in turn (the last one only at the
    /// global batch).
    fn fill(inp: &CompatInputs) -> Tables {
        let g = inp.hard_bound.len();
        let bb = inp.global_batch as usize;
        let w = bb + 1;
        let cands: Vec<Vec<Candidate>> = (0..g).map(|r| candidates(inp, r)).collect();
        let mut cells = 0u64;
        let mut layers: Vec<Vec<f64>> = Vec::with_capacity(g);
        for (i, cand) in cands.iter().enumerate() {
            let last = i + 1 == g;
            let (cur, count) = if i == 0 {
                first_layer(cand, last, bb, w)
            } else {
                next_layer(&layers[i - 1], cand, i, last, bb, w)
            };
            cells += count;
            layers.push(cur);
        }
        Tables {
            w,
            cands,
            layers,
            cells,
        }
    }

    /// The reference's choice at cell (b, s) of rank i.
    fn choose(&self, i: usize, b: usize, s: usize) -> (u32, u32) {
        let (w, layers) = (self.w, &self.layers);
        let target = layers[i][b * w + s];
        for &(m, n, t) in &self.cands[i] {
            let (x, mu) = ((n * m) as usize, m as usize);
            if x > b || mu > s {
                continue;
            }
            let pv = if i == 0 {
                if x == b && mu == s {
                    0.0
                } else {
                    continue;
                }
            } else {
                layers[i - 1][(b - x) * w + s - mu]
            };
            let c = if i == 0 { t } else { cell(pv, t) };
            if c == target {
                return (m, n);
            }
        }
        unreachable!("a finite cell has a candidate attaining it")
    }

    /// The per-rank `(m, n)` of the DP's plan for the whole global batch
    /// `bb` with micro-batch sizes summing to `s`, backtracked from the
    /// last rank.
    fn backtrack(&self, bb: usize, s: usize) -> Vec<(u32, u32)> {
        let g = self.layers.len();
        let mut plan = vec![(0u32, 0u32); g];
        let (mut b, mut ss) = (bb, s);
        for r in (0..g).rev() {
            let (m, n) = self.choose(r, b, ss);
            plan[r] = (m, n);
            b -= (m * n) as usize;
            ss -= m as usize;
        }
        plan
    }

    /// Selection over the sum of micro-batch sizes: the plan with the
    /// highest throughput (strictly higher replaces) among those under the
    /// cluster-wide cap, else the first plan; with its time and whether it
    /// fits. `None` when no sum has a plan.
    fn select(&self, inp: &CompatInputs) -> Option<Pick> {
        let bb = inp.global_batch as usize;
        let fin = &self.layers[self.layers.len() - 1];
        let mut best: Option<Pick> = None;
        let mut best_tput = -1.0f64;
        for s in 1..=bb {
            let v = fin[bb * self.w + s];
            if !v.is_finite() {
                continue;
            }
            let plan = self.backtrack(bb, s);
            let ms: Vec<u32> = plan.iter().map(|p| p.0).collect();
            let fits = inp.fits_cluster(&ms);
            let tput = inp.global_batch as f64 / v;
            if best.is_none() {
                best = Some((plan.clone(), v, fits));
            }
            if fits && tput > best_tput {
                best_tput = tput;
                best = Some((plan, v, fits));
            }
        }
        best
    }
}

/// Rank `r`'s `(m, n)` candidates in the reference order (increasing `m`
/// up to its hard bound, then `n`) with their times.
fn candidates(inp: &CompatInputs, r: usize) -> Vec<Candidate> {
    let h = inp.hard_bound[r].min(inp.global_batch);
    let mut v = Vec::new();
    for m in 1..=h {
        for n in 1..=inp.global_batch / m {
            v.push((m, n, inp.rank_ms(r, m, n)));
        }
    }
    v
}

/// Rank 0's table (`w`-wide rows; only the global batch `bb` when it is
/// also the `last` rank) and its cell updates: only (0, 0) is reachable
/// before it, so each cell has one candidate.
fn first_layer(cand: &[Candidate], last: bool, bb: usize, w: usize) -> (Vec<f64>, u64) {
    let mut cur = vec![INF; w * w];
    let mut cells = 0u64;
    for &(m, n, t) in cand {
        let (b, s) = ((n * m) as usize, m as usize);
        if last && b != bb {
            continue;
        }
        cur[b * w + s] = t;
        cells += 1;
    }
    (cur, cells)
}

/// Rank `i`'s table (`i > 0`) from the previous rank's `prev`, rows in
/// parallel (only the global batch `bb` when it is the `last` rank), and
/// its cell updates.
fn next_layer(
    prev: &[f64],
    cand: &[Candidate],
    i: usize,
    last: bool,
    bb: usize,
    w: usize,
) -> (Vec<f64>, u64) {
    let mut cur = vec![INF; w * w];
    let first = if last { bb } else { i + 1 };
    let cells = cur
        .par_chunks_mut(w)
        .enumerate()
        .skip(first)
        .map(|(b, row)| {
            let mut count = 0u64;
            for &(m, n, t) in cand {
                let x = (n * m) as usize;
                if x + i > b {
                    continue;
                }
                let m = m as usize;
                // prev valid for s' in [i, b - x]; s = s' + m.
                let lo = m + i;
                let hi = (b - x + m).min(bb);
                if lo > hi {
                    continue;
                }
                let base = (b - x) * w + lo - m;
                let pr = &prev[base..base + (hi - lo + 1)];
                for (r, &p) in row[lo..=hi].iter_mut().zip(pr) {
                    let c = cell(p, t);
                    *r = if c < *r { c } else { *r };
                }
                count += (hi - lo + 1) as u64;
            }
            count
        })
        .sum::<u64>();
    (cur, cells)
}

impl Planner for Compat {
    fn name(&self) -> &'static str {
        "cephalo-compat"
    }

    fn summary(&self) -> &'static str {
        "the reference Cephalo optimizer's rules (dp_ga), bit-compatible with the paper's code"
    }

    /// Cephalo's trainer, every axis but the attention kernel (the
    /// profile's) and the shard group (all GPUs under full sharding).
    fn fixed_axes(&self) -> crate::strategy::StrategySpec {
        let mut s = crate::strategy::StrategySpec::pinned(&crate::strategy::Strategy::cephalo(
            1,
            crate::strategy::Attention::Eager,
        ));
        s.attention = None;
        s.shard_group = None;
        s
    }

    /// The reference optimizer's memory rule ([`crate::cost::MemPolicy::REFERENCE`]):
    /// without it the bounds, and so the plans, are not the reference's.
    fn default_mem_policy(&self) -> Option<crate::cost::MemPolicy> {
        Some(crate::cost::MemPolicy::REFERENCE)
    }

    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError> {
        let inp = CompatInputs::resolve(problem)?;
        let g = inp.hard_bound.len();
        if (inp.global_batch as usize) < g {
            return Err(PlanError::invalid(
                crate::error::WORKLOAD,
                "global_batch",
                format!(
                    "compat mode gives every GPU at least one sample: expected a global batch >= {g}, got {}",
                    inp.global_batch
                ),
            ));
        }
        if let Some((r, _)) = inp.hard_bound.iter().enumerate().find(|(_, &h)| h == 0) {
            let need = inp.mb_mem_gib.first().copied().unwrap_or(0.0);
            let short = need - inp.usable_gib[r];
            return Err(PlanError::Infeasible {
                message: format!(
                    "GPU {r} ({}) cannot hold one sample under the reference memory rule: \
                     act(1) + overhead = {need:.2} GiB > {:.2} GiB usable (short by {short:.2} GiB)",
                    problem.costs.gpu(r).name,
                    inp.usable_gib[r]
                ),
                shortfall_gib: short,
                rank: Some(r),
            });
        }
        let sol = solve(&inp).ok_or_else(|| PlanError::Infeasible {
            message: "the reference dynamic program found no plan".into(),
            shortfall_gib: 0.0,
            rank: None,
        })?;
        // Corrected state split: water-fill into each rank's free memory.
        let caps: Vec<f64> = sol
            .choice
            .iter()
            .enumerate()
            .map(|(r, &(m, _))| (inp.usable_gib[r] - inp.mb_gib(m)) / inp.state_gib)
            .collect();
        let mut notes: Vec<String> = inp
            .substituted
            .iter()
            .map(|(gpu, src)| {
                format!(
                    "no reference profile for {gpu} under `{}`: the reference rules ran on {src}",
                    inp.model_key
                )
            })
            .collect();
        let fractions = match super::water::water_fill(&caps) {
            Some(f) => f,
            None => {
                notes.push("the training state does not fit in the GPUs' free memory under the reference rule; state split evenly".into());
                vec![1.0 / g as f64; g]
            }
        };
        if !sol.fits_cluster_memory {
            notes.push("no candidate passed the reference's cluster-wide memory cap; kept the first plan as the reference does".into());
        }
        let pairs: Vec<(u32, u32)> = sol.choice.iter().map(|&(m, n)| (m * n, n)).collect();
        // The reference optimizer plans for Cephalo's trainer.
        let (strategy, pin_notes) = problem.resolve(
            &crate::strategy::StrategySpec::default(),
            &self.fixed_axes(),
        )?;
        notes.extend(pin_notes);
        let plan: Plan = super::standard::plan_from(self.name(), strategy, &pairs, &fractions);
        let cells = sol.cells;
        Ok(Planned {
            plan,
            objective: Some(Objective {
                name: "makespan_ms_per_block",
                value_ms: sol.makespan_ms_per_block,
            }),
            compat: Some(CompatDetails {
                makespan_ms_per_block: sol.makespan_ms_per_block,
                max_bs_even_shard: inp.even_bound.clone(),
                max_bs: inp.hard_bound.clone(),
                model_key: inp.model_key.clone(),
                fits_cluster_memory: sol.fits_cluster_memory,
                reference_state_fractions: vec![1.0 / g as f64; g],
            }),
            considered: vec![],
            stats: SearchStats {
                candidates: cells,
                feasible: sol.per_sum_ms.iter().filter(|v| v.is_finite()).count() as u64,
                subproblems: g as u64,
                // Exact per sum of micro-batch sizes, but the selection is
                // the reference's heuristic, not a proof.
                proven_optimal: false,
                ..SearchStats::default()
            },
            notes,
        })
    }
}
