//! Planners: turn a workload (cluster, model, profiles, global batch) into a
//! [`Plan`] (per GPU: local batch `b_i`, micro-batch count `n_i`, micro-batch
//! size `m_i`, state fraction `r_i`).
//!
//! Every planner implements [`Planner`] and lives in a file of its own whose
//! doc cites its algorithm:
//!
//! | name | file | what |
//! |---|---|---|
//! | `cephalo` | [`cephalo`] | Cephalo's optimizer, native: exact closed-form search + simulator confirmation |
//! | `cephalo-compat` | [`compat`] | the reference optimizer's rules (DESIGN.md section 5), bit-for-bit |
//! | `fsdp` | [`fsdp`] | plain FSDP: even batch, even shard, largest micro-batch that fits |
//! | `fsdp-ga` | [`fsdp_ga`] | even batch, even shard, Cephalo's layered gradient accumulation |
//! | `speed-proportional` | [`proportional`] | batch proportional to GPU speed, even shards, no memory awareness |
//! | `speed-proportional-mem` | [`proportional_mem`] | speed-proportional batch, micro-batches sized to memory, even shards |
//!
//! All planners emit the same [`Plan`] type so the simulator judges them all
//! the same way. Units: times in ms, memory in GiB, batches in samples.
//!
//! Invariants: a returned plan passes [`Plan::validate`] for the problem's
//! ranks and global batch; planners are deterministic (same problem, same
//! plan); `sim` does no I/O, so search statistics come back in
//! [`SearchStats`] for the caller to log.

pub mod cephalo;
pub mod closed_form;
pub mod compat;
pub mod fsdp;
pub mod fsdp_ga;
pub mod proportional;
pub mod proportional_mem;

use crate::cost::CostModel;
use crate::error::PlanError;
use crate::fsdp::SimOptions;
use crate::plan::{Plan, RankPlan};
use crate::profile::ProfileSet;

/// What the simulator says about a plan (what [`Judge`] returns).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Simulated iteration time, ms.
    pub iteration_ms: f64,
    /// Whether some GPU ran out of memory.
    pub oom: bool,
}

/// Judges plans (normally the discrete-event simulator, [`SimJudge`]); the
/// native planner confirms its best candidates with it.
pub trait Judge: Sync + std::fmt::Debug {
    /// Simulates one plan of the problem's workload.
    fn judge(&self, plan: &Plan) -> Result<Verdict, PlanError>;
}

/// The discrete-event simulator as a [`Judge`] (what `plan` and `compare`
/// use): [`crate::fsdp::simulate`] with the given options.
#[derive(Debug, Clone)]
pub struct SimJudge<'a> {
    /// The workload's cost model.
    pub costs: &'a CostModel,
    /// Simulation options (no trace).
    pub options: SimOptions,
}

impl<'a> SimJudge<'a> {
    /// A judge with default simulation options.
    pub fn new(costs: &'a CostModel) -> SimJudge<'a> {
        SimJudge {
            costs,
            options: SimOptions::default(),
        }
    }
}

impl Judge for SimJudge<'_> {
    fn judge(&self, plan: &Plan) -> Result<Verdict, PlanError> {
        let mut o = self.options;
        o.trace = false;
        let r = crate::fsdp::simulate(self.costs, plan, &o)?;
        Ok(Verdict {
            iteration_ms: r.iteration_ms,
            oom: r.oom,
        })
    }
}

/// Everything a planner may look at.
#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    /// The per-rank cost model of the workload (cluster, model, seq, dtype,
    /// global batch, memory options, communication model).
    pub costs: &'a CostModel,
    /// All loaded profiles (the compat planner looks entries up by the
    /// reference model key; the others go through `costs`).
    pub profiles: &'a ProfileSet,
    /// Knobs of the planners.
    pub options: &'a PlannerOptions,
    /// The simulator, for planners that confirm candidates (`None`: the
    /// native planner returns its closed-form optimum unconfirmed).
    pub judge: Option<&'a dyn Judge>,
}

/// Knobs shared by the planners.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannerOptions {
    /// The model name exactly as the user wrote it (compat mode uses it as the
    /// reference profile key when profiles have entries under it).
    pub model_key: Option<String>,
    /// Compat mode: per-block all-gather time given to the reference
    /// optimizer (`--ag_time`), ms.
    pub compat_ag_ms: f64,
    /// Compat mode: per-block reduce-scatter time (`--rs_time`), ms.
    pub compat_rs_ms: f64,
    /// How many closed-form candidates the native planner confirms with the
    /// simulator (the best closed-form plans plus the seeds).
    pub confirm_candidates: usize,
    /// Whether the native planner also confirms the baselines' and the
    /// compat planner's plans as seeds (so it is never worse than them).
    pub seed_with_baselines: bool,
}

impl Default for PlannerOptions {
    fn default() -> Self {
        PlannerOptions {
            model_key: None,
            compat_ag_ms: 0.0,
            compat_rs_ms: 0.0,
            confirm_candidates: 8,
            seed_with_baselines: true,
        }
    }
}

/// A planner's objective value, named so outputs can say what it measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Objective {
    /// Name of the objective (e.g. `makespan_ms_per_block`).
    pub name: &'static str,
    /// Its value, ms.
    pub value_ms: f64,
}

/// Counts gathered while searching (for the caller to log; no I/O here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchStats {
    /// Candidate (per-rank option or whole-plan) evaluations of the closed form.
    pub candidates: u64,
    /// Of those, how many fit in memory.
    pub feasible: u64,
    /// Of those, how many did not fit in memory.
    pub infeasible: u64,
    /// Sub-problems (dynamic programs, threshold checks) solved.
    pub subproblems: u64,
    /// Plans run through the simulator.
    pub simulated: u64,
    /// True when the search proved its answer optimal on its own objective.
    pub proven_optimal: bool,
}

/// Extra output of the compat planner (the reference optimizer's figures).
#[derive(Debug, Clone, PartialEq)]
pub struct CompatDetails {
    /// The reference objective: slowest rank's per-block time, ms.
    pub makespan_ms_per_block: f64,
    /// Per rank: largest micro-batch that fits with an even state shard.
    pub max_bs_even_shard: Vec<u32>,
    /// Per rank: largest micro-batch that fits with no state at all.
    pub max_bs: Vec<u32>,
    /// The reference model key whose profiles were used.
    pub model_key: String,
    /// Whether the chosen plan passed the reference's cluster-wide memory cap.
    pub fits_cluster_memory: bool,
    /// State fractions the reference code itself prints (even, because of
    /// its swapped micro-batch size / count bug); the plan carries the
    /// corrected split.
    pub reference_state_fractions: Vec<f64>,
}

/// What a planner returns: the plan plus what it knows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The plan.
    pub plan: Plan,
    /// The planner's own objective for this plan, if it has one.
    pub objective: Option<Objective>,
    /// Compat planner only: the reference optimizer's figures.
    pub compat: Option<CompatDetails>,
    /// Search counts.
    pub stats: SearchStats,
    /// Remarks for the user (zero-sample GPUs, fallbacks, ties).
    pub notes: Vec<String>,
}

impl Planned {
    /// A plan with no objective, details or notes.
    pub fn bare(plan: Plan) -> Planned {
        Planned {
            plan,
            objective: None,
            compat: None,
            stats: SearchStats::default(),
            notes: vec![],
        }
    }
}

/// A planner: turns a problem into a plan (CONVENTIONS.md item 9).
pub trait Planner: Send + Sync + std::fmt::Debug {
    /// Name users pass to `--planner` (and what reports print).
    fn name(&self) -> &'static str;
    /// One line: what it does, as users know it.
    fn summary(&self) -> &'static str;
    /// Plans the problem. `Err(PlanError::Infeasible)` when no plan fits in
    /// memory (with the smallest shortfall and its GPU); baselines instead
    /// return their fixed rule's plan and let the simulator report the OOM.
    fn plan(&self, problem: &Problem<'_>) -> Result<Planned, PlanError>;
}

/// Every planner, in the order `compare` prints them (ours first).
pub fn all() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(cephalo::Cephalo),
        Box::new(compat::Compat),
        Box::new(fsdp::Fsdp),
        Box::new(fsdp_ga::FsdpGa),
        Box::new(proportional::SpeedProportional),
        Box::new(proportional_mem::SpeedProportionalMem),
    ]
}

/// The baselines (every planner but the two Cephalo ones).
pub fn baselines() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(fsdp::Fsdp),
        Box::new(fsdp_ga::FsdpGa),
        Box::new(proportional::SpeedProportional),
        Box::new(proportional_mem::SpeedProportionalMem),
    ]
}

/// Looks a planner up by name or alias (`compat`, `even`, `whale`, ...).
pub fn by_name(name: &str, origin: &str) -> Result<Box<dyn Planner>, PlanError> {
    let n = name.trim().to_ascii_lowercase().replace('_', "-");
    let found: Option<Box<dyn Planner>> = match n.as_str() {
        "cephalo" | "native" => Some(Box::new(cephalo::Cephalo)),
        "cephalo-compat" | "compat" | "reference" => Some(Box::new(compat::Compat)),
        "fsdp" | "even" | "even-fsdp" => Some(Box::new(fsdp::Fsdp)),
        "fsdp-ga" | "even-ga" | "ga" => Some(Box::new(fsdp_ga::FsdpGa)),
        "speed-proportional" | "proportional" | "whale" => {
            Some(Box::new(proportional::SpeedProportional))
        }
        "speed-proportional-mem" | "proportional-mem" | "memory-aware-proportional" => {
            Some(Box::new(proportional_mem::SpeedProportionalMem))
        }
        _ => None,
    };
    found.ok_or_else(|| {
        let known: Vec<&str> = all().iter().map(|p| p.name()).collect();
        PlanError::invalid(
            origin,
            "planner",
            format!("unknown planner `{name}` (known: {})", known.join(", ")),
        )
    })
}

/// Water-filling state split: every rank holds `min(cap_i, level)` where the
/// level is the smallest that makes the fractions sum to 1, so state goes
/// where memory is free and the largest piece (which paces the uneven
/// collectives) is as small as possible. `caps` are fractions of the total
/// state each rank has room for. `None` when `sum(caps) < 1`.
pub fn water_fill(caps: &[f64]) -> Option<Vec<f64>> {
    let level = water_level(caps)?;
    let mut r: Vec<f64> = caps.iter().map(|&c| c.clamp(0.0, 1.0).min(level)).collect();
    // Put the rounding residue (~1e-16) on the first largest piece.
    let sum: f64 = r.iter().sum();
    let big = (0..r.len()).fold(0, |best, i| if r[i] > r[best] { i } else { best });
    r[big] = (r[big] + 1.0 - sum).max(0.0);
    Some(r)
}

/// Tolerance on "the fractions reach 1" in water-filling and feasibility.
pub const FILL_TOL: f64 = 1e-12;

/// The water level of [`water_fill`]: the smallest `l >= 1/G` with
/// `sum(min(cap_i, l)) >= 1`; `None` when `sum(caps) < 1 - FILL_TOL`.
pub fn water_level(caps: &[f64]) -> Option<f64> {
    let g = caps.len();
    if g == 0 {
        return None;
    }
    let mut c: Vec<f64> = caps.iter().map(|&x| x.clamp(0.0, 1.0)).collect();
    let total: f64 = c.iter().sum();
    if total < 1.0 - FILL_TOL {
        return None;
    }
    c.sort_by(f64::total_cmp);
    let mut prefix = 0.0;
    for (k, &ck) in c.iter().enumerate() {
        let level = (1.0 - prefix) / (g - k) as f64;
        if level <= ck {
            return Some(level);
        }
        prefix += ck;
    }
    Some(c[g - 1])
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

/// Non-state memory (GiB) a rank needs for micro-batches of `m` samples
/// under the project's memory model: activations of one micro-batch (the
/// profile's non-state figure) plus the fixed framework overhead. `m == 0`
/// (a rank that only holds state) needs the overhead alone.
pub fn non_state_gib(costs: &CostModel, m: u32) -> f64 {
    closed_form::non_state_gib(costs, m)
}

/// Largest micro-batch size that fits on `rank` while it holds state
/// fraction `r` (0 when not even one sample fits). Capped at `limit`.
pub fn max_microbatch(costs: &CostModel, rank: usize, r: f64, limit: u32) -> u32 {
    let room = costs.usable_gib(rank) - costs.state_gib(r);
    let mut lo = 0u32;
    // Memory grows with m; walk up (profiles are short and the limit small
    // relative to the cost of a simulation).
    while lo < limit && non_state_gib(costs, lo + 1) <= room {
        lo += 1;
    }
    lo
}

/// Builds a plan from per-rank (batch, micro-batch count) with state
/// fractions `fractions`, named `planner`.
pub fn plan_from(planner: &str, batch_n: &[(u32, u32)], fractions: &[f64]) -> Plan {
    Plan {
        planner: planner.to_string(),
        gpus: batch_n
            .iter()
            .zip(fractions)
            .map(|(&(b, n), &r)| RankPlan::new(b, n, r))
            .collect(),
    }
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
    fn water_fill_matches_reference_fix() {
        // The README's corrected split for the GPT-2.7B example: the first L4
        // is capped at its free memory, the rest share evenly.
        let caps = [
            0.22532744711597988,
            0.2882273881968276,
            0.4996839220012677,
            0.29721309406552004,
        ];
        let r = water_fill(&caps).unwrap();
        assert!((r[0] - 0.2253).abs() < 1e-4, "{r:?}");
        for x in &r[1..] {
            assert!((x - 0.2582).abs() < 1e-4, "{r:?}");
        }
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(water_fill(&[0.2, 0.3]), None);
        let even = water_fill(&[1.0, 1.0, 1.0, 1.0]).unwrap();
        assert!(even.iter().all(|x| (x - 0.25).abs() < 1e-15));
    }

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

    #[test]
    fn names_resolve() {
        for p in all() {
            assert_eq!(by_name(p.name(), "t").unwrap().name(), p.name());
        }
        assert_eq!(by_name("compat", "t").unwrap().name(), "cephalo-compat");
        assert!(by_name("nope", "--planner").is_err());
    }
}
