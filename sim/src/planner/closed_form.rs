//! Closed-form iteration cost of a plan: the fast objective the native
//! `cephalo` planner searches exactly before the simulator confirms. It
//! mirrors the schedule of [`crate::fsdp`] phase by phase.
//!
//! Per rank choosing local batch `b` in `n` near-equal micro-batches
//! (sizes `s_k`, largest `m`), the compute of each phase (copies on the copy
//! stream overlap the compute and only exist for `n > 1`):
//!
//! * `Ef = max(sum e_f(s_k), sum d2h)` embedding forward,
//! * `F = max(sum f(s_k), sum d2h)` one block forward,
//! * `H = max(sum (h_f + h_b)(s_k), 2 sum d2h)` head forward + backward,
//! * `W = max(sum (f + b)(s_k), sum (h2d2 + d2h))` one block recompute +
//!   backward,
//! * `Eb = max(sum e_b(s_k), sum h2d)` embedding backward.
//!
//! Each phase takes the longer of its compute and the communication that
//! runs under it (the next unit's prefetched all-gather, plus in the
//! backward the previous unit's reduce-scatter); the first all-gather and the
//! last reduce-scatter are exposed, then the optimizer step runs on the
//! rank's shard. With `L` blocks:
//!
//! ```text
//! C = AG_e + max(AG_b, Ef) + (L-1) max(AG_b, F) + max(AG_h, F) + max(AG_b, H)
//!   + max(AG_b + RS_h, W) + (L-2) max(AG_b + RS_b, W) + max(AG_e + RS_b, W)
//!   + max(RS_b, Eb) + RS_e + opt(λ P)
//! ```
//!
//! and the plan's closed-form iteration time is the largest rank time.
//! Collective times come from the workload's communication model with every
//! piece equal to the plan's largest state fraction `λ` (exact for a flat
//! ring, an upper bound for hierarchical ones), so `C` is nondecreasing in
//! `λ`.
//!
//! Memory mirrors the simulator's accounting: a rank needs
//! [`non_state_gib`] — the fixed overhead plus the activations of its
//! largest micro-batch and the unsharded parameter and gradient buffers that
//! can be in flight at once (the worst phase, assuming every queued
//! reduce-scatter is still pending, so it never under-counts) — plus its
//! state `r S` (`S` = 16 B/param of the whole model), within `mem_fraction`
//! of its capacity. Its *cap* is the largest state fraction that still fits;
//! state is water-filled into the caps ([`super::water_fill`]), so the
//! largest fraction is the water level. Units: ms, GiB, samples.

use crate::comm::CollectiveKind;
use crate::cost::CostModel;
use crate::fsdp::GRAD_BYTES_PER_PARAM;
use crate::units::GIB;

/// Safety margin kept free below the usable memory when computing caps, so
/// that byte rounding in the simulator never turns an exact fit into an
/// OOM (GiB).
pub const CAP_MARGIN_GIB: f64 = 1e-6;

/// Non-state memory (GiB) of a rank running micro-batches of at most `m`
/// samples under the simulator's accounting, worst phase: overhead +
/// activations of one micro-batch (the profile's non-state figure minus the
/// two gathered blocks and the gradient buffer it already contains) + the
/// largest set of unsharded parameter / gradient buffers in flight at once.
/// `m == 0` (a rank that only holds state): overhead + the largest single
/// unit buffer (its gathers and reduce-scatters run one at a time).
pub fn non_state_gib(costs: &CostModel, m: u32) -> f64 {
    let up = costs.unit_params();
    let bpp = costs.options.comm_bytes_per_param;
    let gb = GRAD_BYTES_PER_PARAM;
    let pe = up.first().copied().unwrap_or(0) as f64;
    let ph = up.last().copied().unwrap_or(0) as f64;
    let pb = if up.len() > 2 { up[1] as f64 } else { 0.0 };
    let over = costs.options.overhead_gib;
    if m == 0 {
        let unit = pe.max(pb).max(ph);
        return over + unit * bpp.max(gb) / GIB;
    }
    let act = (costs.act_mem_gib(m) * GIB - pb * (2.0 * bpp + gb)).max(0.0);
    let buffers = [
        bpp * (pe + pb),
        bpp * (2.0 * pb),
        bpp * (pb + ph) + gb * ph,
        bpp * (2.0 * pb) + gb * (pb + ph),
        bpp * (pe + pb) + gb * (2.0 * pb),
        bpp * (2.0 * pb) + gb * (2.0 * pb),
        bpp * pe + gb * (pe + pb),
        bpp * (pe + ph) + gb * (pe + ph),
    ]
    .into_iter()
    .fold(0.0, f64::max);
    over + (act + buffers) / GIB
}

/// λ-independent closed-form costs of one rank's choice `(b, n)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankCost {
    /// Local batch.
    pub batch: u32,
    /// Micro-batch count.
    pub microbatches: u32,
    /// Largest micro-batch size.
    pub microbatch_size: u32,
    /// Phase compute times `[Ef, F, H, W, Eb]` (module doc), ms.
    pub phase_ms: [f64; 5],
    /// Largest state fraction that still fits next to the micro-batch.
    pub cap: f64,
}

/// Collective times per unit at a given largest state fraction, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommTimes {
    /// All-gather of one block.
    pub block_ag: f64,
    /// Reduce-scatter of one block.
    pub block_rs: f64,
    /// All-gather of the embedding.
    pub embed_ag: f64,
    /// Reduce-scatter of the embedding.
    pub embed_rs: f64,
    /// All-gather of the head.
    pub head_ag: f64,
    /// Reduce-scatter of the head.
    pub head_rs: f64,
}

/// Per GPU type tables for micro-batch sizes 0..=max_m (index m).
#[derive(Debug, Clone)]
struct TypeTable {
    rank: usize,
    max_m: u32,
    usable_gib: f64,
    fwd: Vec<f64>,
    bwd: Vec<f64>,
    copy1: Vec<f64>,
    copy2: Vec<f64>,
    embed_f: Vec<f64>,
    embed_b: Vec<f64>,
    head: Vec<f64>,
    cap: Vec<f64>,
}

/// The closed-form model of one workload.
#[derive(Debug, Clone)]
pub struct ClosedForm<'a> {
    costs: &'a CostModel,
    layers: f64,
    state_gib: f64,
    types: Vec<TypeTable>,
    units: (u64, u64, u64),
}

/// The closed-form evaluation of a whole plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Closed-form iteration time (slowest rank), ms.
    pub iteration_ms: f64,
    /// Largest state fraction (water level).
    pub level: f64,
    /// State fractions (water-filling into the caps).
    pub fractions: Vec<f64>,
    /// Per rank closed-form time, ms.
    pub rank_ms: Vec<f64>,
}

impl<'a> ClosedForm<'a> {
    /// Tabulates every GPU type of the workload up to the largest micro-batch
    /// that fits it with no state (capped at the global batch).
    pub fn new(costs: &'a CostModel) -> ClosedForm<'a> {
        let w = &costs.workload;
        let state_gib = costs.state_gib(1.0);
        let big_b = w.global_batch;
        let mut types = Vec::with_capacity(costs.types.len());
        for t in 0..costs.types.len() {
            let rank = costs.rank_type.iter().position(|&x| x == t).unwrap_or(0);
            let usable = costs.usable_gib(rank);
            let mut max_m = 0;
            while max_m < big_b && non_state_gib(costs, max_m + 1) <= usable {
                max_m += 1;
            }
            let sizes = 0..=max_m;
            let z = |f: &dyn Fn(u32) -> f64| -> Vec<f64> {
                sizes
                    .clone()
                    .map(|m| if m == 0 { 0.0 } else { f(m) })
                    .collect()
            };
            let out = |m: u32| costs.block_output_bytes(m);
            types.push(TypeTable {
                rank,
                max_m,
                usable_gib: usable,
                fwd: z(&|m| costs.block_fwd_ms(rank, m)),
                bwd: z(&|m| costs.block_bwd_ms(rank, m)),
                copy1: z(&|m| costs.host_copy_ms(rank, out(m))),
                copy2: z(&|m| costs.host_copy_ms(rank, 2.0 * out(m))),
                embed_f: z(&|m| costs.embed_fwd_ms(rank, m)),
                embed_b: z(&|m| costs.embed_bwd_ms(rank, m)),
                head: z(&|m| costs.head_fwd_ms(rank, m) + costs.head_bwd_ms(rank, m)),
                cap: (0..=max_m)
                    .map(|m| {
                        ((usable - non_state_gib(costs, m) - CAP_MARGIN_GIB) / state_gib)
                            .clamp(0.0, 1.0)
                    })
                    .collect(),
            });
        }
        let up = costs.unit_params();
        let block = if up.len() > 2 { up[1] } else { 0 };
        ClosedForm {
            costs,
            layers: (w.model.layers as f64).max(1.0),
            state_gib,
            types,
            units: (
                up.first().copied().unwrap_or(0),
                block,
                up.last().copied().unwrap_or(0),
            ),
        }
    }

    /// The cost model.
    pub fn costs(&self) -> &CostModel {
        self.costs
    }

    /// Number of GPU types (index of `CostModel::types`).
    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// Largest micro-batch that fits a GPU of type `t` holding no state.
    pub fn max_microbatch(&self, t: usize) -> u32 {
        self.types[t].max_m
    }

    /// Usable memory of type `t`, GiB.
    pub fn usable_gib(&self, t: usize) -> f64 {
        self.types[t].usable_gib
    }

    /// Training state of the whole model, GiB.
    pub fn state_gib(&self) -> f64 {
        self.state_gib
    }

    /// Cap (largest state fraction that fits) of type `t` at micro-batch `m`.
    pub fn cap(&self, t: usize, m: u32) -> Option<f64> {
        self.types[t].cap.get(m as usize).copied()
    }

    /// λ-independent costs of `b` samples in `n` micro-batches on type `t`;
    /// `None` when the micro-batch does not fit even with no state, or
    /// `n` is inconsistent with `b` (`b = 0` needs `n = 0`).
    pub fn option(&self, t: usize, b: u32, n: u32) -> Option<RankCost> {
        let tt = &self.types[t];
        if b == 0 {
            return (n == 0).then(|| RankCost {
                batch: 0,
                microbatches: 0,
                microbatch_size: 0,
                phase_ms: [0.0; 5],
                cap: tt.cap[0],
            });
        }
        if n == 0 || n > b {
            return None;
        }
        let q = b / n;
        let rem = b % n;
        let m = q + u32::from(rem > 0);
        if m > tt.max_m {
            return None;
        }
        let (hi, lo) = (rem as f64, (n - rem) as f64);
        let (qi, mi) = (q as usize, m as usize);
        let sum = |v: &[f64]| hi * v[mi] + lo * v[qi];
        let f = sum(&tt.fwd);
        let copies = n > 1;
        let c1 = if copies { sum(&tt.copy1) } else { 0.0 };
        let c2 = if copies { sum(&tt.copy2) } else { 0.0 };
        Some(RankCost {
            batch: b,
            microbatches: n,
            microbatch_size: m,
            phase_ms: [
                sum(&tt.embed_f).max(c1),
                f.max(c1),
                sum(&tt.head).max(2.0 * c1),
                (f + sum(&tt.bwd)).max(c2 + c1),
                sum(&tt.embed_b).max(c1),
            ],
            cap: tt.cap[mi],
        })
    }

    /// Collective times with every piece equal to `level` of a unit.
    pub fn comm(&self, level: f64) -> CommTimes {
        let g = self.costs.ranks();
        let fr = vec![level; g];
        let c = |kind, p| self.costs.collective_ms(kind, p, &fr);
        let (e, b, h) = self.units;
        CommTimes {
            block_ag: c(CollectiveKind::AllGather, b),
            block_rs: c(CollectiveKind::ReduceScatter, b),
            embed_ag: c(CollectiveKind::AllGather, e),
            embed_rs: c(CollectiveKind::ReduceScatter, e),
            head_ag: c(CollectiveKind::AllGather, h),
            head_rs: c(CollectiveKind::ReduceScatter, h),
        }
    }

    /// Optimizer step of type `t` on a shard of `level` of the model, ms.
    pub fn optimizer_ms(&self, t: usize, level: f64) -> f64 {
        let p = self.costs.workload.model.total_params() as f64;
        self.costs.optimizer_ms(self.types[t].rank, level * p)
    }

    /// Closed-form time of a rank of type `t` with costs `o`, collective
    /// times `c` and largest state fraction `level`, ms. Nondecreasing in
    /// `level` (through `c` and the optimizer term).
    pub fn rank_ms(&self, t: usize, o: &RankCost, c: &CommTimes, level: f64) -> f64 {
        self.rank_ms_with(o, c, self.optimizer_ms(t, level))
    }

    /// [`ClosedForm::rank_ms`] with the optimizer term given (ms).
    pub fn rank_ms_with(&self, o: &RankCost, c: &CommTimes, optimizer_ms: f64) -> f64 {
        let [ef, f, h, w, eb] = o.phase_ms;
        let l = self.layers;
        let fwd =
            c.embed_ag + c.block_ag.max(ef) + (l - 1.0) * c.block_ag.max(f) + c.head_ag.max(f);
        let head = c.block_ag.max(h);
        let bwd = if l >= 2.0 {
            (c.block_ag + c.head_rs).max(w)
                + (l - 2.0) * (c.block_ag + c.block_rs).max(w)
                + (c.embed_ag + c.block_rs).max(w)
        } else {
            (c.embed_ag + c.head_rs).max(w)
        };
        let tail = c.block_rs.max(eb) + c.embed_rs;
        fwd + head + bwd + tail + optimizer_ms
    }

    /// A lower bound on the rank time per sample of type `t`, ms: every
    /// sample costs at least `L` blocks of forward, recompute and backward at
    /// the most efficient micro-batch size (`L min_s (2 f(s) + b(s)) / s`);
    /// infinite when not even one sample fits.
    pub fn per_sample_floor_ms(&self, t: usize) -> f64 {
        let tt = &self.types[t];
        (1..=tt.max_m as usize)
            .map(|s| (2.0 * tt.fwd[s] + tt.bwd[s]) / s as f64)
            .fold(f64::INFINITY, f64::min)
            * self.layers
    }

    /// Evaluates a whole choice (per rank `(b, n)`): `None` when a
    /// micro-batch does not fit or the state does not fit in the caps.
    pub fn evaluate(&self, choice: &[(u32, u32)]) -> Option<Evaluation> {
        let opts: Vec<RankCost> = choice
            .iter()
            .enumerate()
            .map(|(r, &(b, n))| self.option(self.costs.rank_type[r], b, n))
            .collect::<Option<_>>()?;
        let caps: Vec<f64> = opts.iter().map(|o| o.cap).collect();
        let level = super::water_level(&caps)?;
        let fractions = super::water_fill(&caps)?;
        let c = self.comm(level);
        let rank_ms: Vec<f64> = opts
            .iter()
            .enumerate()
            .map(|(r, o)| self.rank_ms(self.costs.rank_type[r], o, &c, level))
            .collect();
        let iteration_ms = rank_ms.iter().copied().fold(0.0, f64::max);
        Some(Evaluation {
            iteration_ms,
            level,
            fractions,
            rank_ms,
        })
    }
}
