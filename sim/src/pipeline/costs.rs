//! The cost table of a pipeline iteration, built once from the
//! [`CostModel`] before the lowering ([`crate::lower::pipeline`]) walks, as the
//! data-parallel lowering reads [`crate::data_parallel::costs`]:
//!
//! * [`Rows`]: per (GPU type, slice size, TP shape) one [`Micro`] row (compute
//!   durations and anchored activation bytes of one GPU's slice of a
//!   micro-batch). The planners' closed form ([`super::estimate`]) prices
//!   its stage groups from the same rows.
//! * [`PipeCosts`]: the rows of every slice a plan's GPUs compute, per
//!   rank its optimizer step, the bytes of a block output for every
//!   sample count a point-to-point transfer moves, and per TP group and
//!   slice its exposed TP communication ([`TpTimes`]).
//!
//! Transfers and collectives are priced where they are emitted (they
//! depend on the pair or group of GPUs, through the communication model).
//! Units: durations [`SimTime`], bytes.

use crate::cost::CostModel;
use crate::data_parallel::{dur, micro_costs_tp, Micro};
use crate::error::PlanError;
use crate::perfmodel::BlockImpl;
use crate::plan::pipeline::{overlaps, Pipeline};
use crate::plan::Plan;
use crate::strategy::Attention;
use crate::tensor::{Pass, TensorParallel};
use crate::units::SimTime;
// Fx hashing (rustc's): the keys are small integers, tuples and
// strings hashed millions of times per planner search; SipHash's DoS
// resistance buys nothing here (no key comes from outside) and cost
// about a tenth of a 4,096-GPU `hetero-3d` search (`perf`).
use rustc_hash::FxHashMap as HashMap;

/// Cost-table rows: one [`Micro`] per (GPU type, slice size, tensor
/// parallelism), each built once by `micro_costs_tp` (a row depends on the
/// GPU's type only, so GPUs of one type share it).
#[derive(Debug, Clone)]
pub struct Rows<'a> {
    costs: &'a CostModel,
    imp: BlockImpl,
    core: bool,
    index: HashMap<(usize, u32, TensorParallel), usize>,
    rows: Vec<Micro>,
}

impl<'a> Rows<'a> {
    /// An empty table for slices computed with the `attention` kernel and
    /// selective policy of `strategy`.
    pub fn new(costs: &'a CostModel, strategy: &crate::strategy::Strategy) -> Rows<'a> {
        Rows {
            costs,
            imp: crate::perfmodel::BlockImpl::of(strategy),
            core: strategy.checkpointing.attention_core(),
            index: HashMap::default(),
            rows: Vec::new(),
        }
    }

    /// The attention kernel the rows are priced with.
    pub fn attention(&self) -> Attention {
        self.imp.attention
    }

    /// The row of a slice of `n` samples on `rank`'s GPU type as one rank
    /// of the TP group `tp`, built from the cost model the first time it
    /// is asked for (`Err` when the GPU has no block times for the
    /// attention kernel or the split).
    pub fn add(&mut self, rank: usize, n: u32, tp: &TensorParallel) -> Result<Micro, PlanError> {
        let key = (self.costs.rank_type[rank], n, *tp);
        if let Some(&i) = self.index.get(&key) {
            return Ok(self.rows[i]);
        }
        let row = micro_costs_tp(self.costs, rank, n, self.imp, self.core, tp)?;
        self.index.insert(key, self.rows.len());
        self.rows.push(row);
        Ok(row)
    }

    /// How many rows the table holds (one per GPU type, slice size and
    /// TP shape asked for).
    pub fn built(&self) -> usize {
        self.rows.len()
    }

    /// The row of a slice of `n` samples on `rank`'s GPU type under `tp`,
    /// which [`Rows::add`] built before.
    pub fn get(&self, rank: usize, n: u32, tp: &TensorParallel) -> &Micro {
        let i = self.index[&(self.costs.rank_type[rank], n, *tp)];
        &self.rows[i]
    }
}

/// Exposed TP communication of one TP group for one slice, per pass
/// ([`TensorParallel::exposed_ms`]): what the lowering adds after each
/// block's, the embedding's and the head's compute (zero without TP).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TpTimes {
    /// A block's forward (and a full recompute's).
    pub block_fwd: SimTime,
    /// A block's backward.
    pub block_bwd: SimTime,
    /// The embedding's forward.
    pub embed_fwd: SimTime,
    /// The embedding's backward.
    pub embed_bwd: SimTime,
    /// The head's forward (its input gathered, the loss's all-reduces).
    pub head_fwd: SimTime,
    /// The head's backward.
    pub head_bwd: SimTime,
    /// A MoE block's forward expert-parallel exchanges (dispatch and
    /// combine, expert-TP's gather and reduce-scatter) and the wait for
    /// the EP group's slowest replica ([`crate::expert_parallel`]).
    pub ep_fwd: SimTime,
    /// The same in a MoE block's backward.
    pub ep_bwd: SimTime,
}

/// What the collectives of a group of GPUs cost depends on, as a key: per
/// member its GPU type, its node's place relative to the first member's,
/// and that node's fabric and NIC count. Groups with equal keys are priced
/// once (the lowering's TP groups, the estimate's TP and data-parallel
/// groups).
pub type GroupShape<'c> = Vec<(usize, isize, &'c str, usize)>;

/// The [`GroupShape`] of the GPUs `ranks`.
pub fn group_shape<'c>(costs: &'c CostModel, ranks: &[usize]) -> GroupShape<'c> {
    let c = &costs.workload.cluster;
    let n0 = ranks.first().map_or(0, |&r| c.gpus[r].node) as isize;
    ranks
        .iter()
        .map(|&r| {
            let nd = c.gpus[r].node;
            let node = &c.nodes[nd];
            (
                costs.rank_type[r],
                nd as isize - n0,
                node.intra_link.as_str(),
                node.nics,
            )
        })
        .collect()
}

/// The [`TpTimes`] of the TP group `group` (ranks) under `tp` on a slice
/// of `n` samples whose block forward and backward take `fwd_ms` /
/// `bwd_ms` on the group's slowest GPU; with expert parallelism its first
/// rank's EP group `ep_group` ([`crate::expert_parallel::ep_group`]), whose
/// exchanges each MoE block adds on the critical path.
pub fn tp_times(
    costs: &CostModel,
    tp: &TensorParallel,
    (group, ep_group): (&[usize], &[usize]),
    n: u32,
    fwd_ms: f64,
    bwd_ms: f64,
) -> TpTimes {
    if !tp.communicates() || n == 0 {
        return TpTimes::default();
    }
    let w = &costs.workload;
    let tokens = n as f64 * w.model.tokens_per_sample(w.seq_len) as f64;
    let mut out = TpTimes::default();
    if tp.is_on() {
        let shares = crate::tensor::gemm_shares(&w.model, w.seq_len);
        let pieces = |b: f64| vec![b; group.len()];
        let price = |k, b: f64| costs.group_collective_ms(k, group, &pieces(b));
        let time = |cs: &[crate::tensor::TpCollective], pass, ms| {
            dur(tp.exposed_ms(cs, pass, ms, &shares, price))
        };
        let block = tp.block_collectives(&w.model, tokens, w.dtype);
        let embed = tp.embedding_collectives(&w.model, tokens, w.dtype);
        let head = tp.head_collectives(&w.model, tokens, w.dtype);
        out = TpTimes {
            block_fwd: time(&block, Pass::Forward, fwd_ms),
            block_bwd: time(&block, Pass::Backward, bwd_ms),
            embed_fwd: time(&embed, Pass::Forward, 0.0),
            embed_bwd: time(&embed, Pass::Backward, 0.0),
            head_fwd: time(&head, Pass::Forward, 0.0),
            head_bwd: time(&head, Pass::Backward, 0.0),
            ..TpTimes::default()
        };
    }
    let ep = crate::expert_parallel::block_collectives(tp, &w.model, tokens, w.dtype);
    if !ep.is_empty() {
        use crate::expert_parallel::{pass_ms, Over};
        let price = |k, b: f64, over| {
            let ranks = match over {
                Over::Experts => ep_group,
                Over::Tensor => group,
            };
            costs.group_collective_ms(k, ranks, &vec![b; ranks.len()])
        };
        out.ep_fwd = dur(pass_ms(&ep, Pass::Forward, price));
        out.ep_bwd = dur(pass_ms(&ep, Pass::Backward, price));
    }
    out
}

/// The slowest block forward and backward, ms, of the replicas of stage
/// `st` in the EP group `ep_group` (their slices `slices`), under `tp`.
fn ep_pace(
    rows: &mut Rows<'_>,
    st: &crate::plan::pipeline::Stage,
    slices: &[(u32, u32)],
    ep_group: &[usize],
    tp: &TensorParallel,
) -> Result<(f64, f64), PlanError> {
    let (mut f, mut b) = (0.0f64, 0.0f64);
    for (j, &(lo, hi)) in slices.iter().enumerate() {
        let group = st.group(j);
        if !ep_group.iter().any(|&r| group.contains(&(r as u32))) {
            continue;
        }
        for &rank in group {
            let row = rows.add(rank as usize, hi - lo, tp)?;
            f = f.max(row.f_blk.as_ms());
            b = b.max(row.b_blk.as_ms());
        }
    }
    Ok((f, b))
}

/// What one iteration of a pipeline plan costs, tabulated before its
/// ops are lowered.
#[derive(Debug, Clone)]
pub struct PipeCosts<'a> {
    /// The rows of every slice a GPU of the pipeline computes.
    pub rows: Rows<'a>,
    /// Per rank: its optimizer step over the parameters it updates (its
    /// share of its stage's, or its shard of them under `grad-op`); zero
    /// for a rank in no stage.
    pub optimizer: Vec<SimTime>,
    /// Bytes of a block output per sample count a transfer moves.
    out_bytes: HashMap<u32, f64>,
    /// Per (stage, replica, slice size): its TP group's exposed communication.
    tp: HashMap<(usize, usize, u32), TpTimes>,
    /// Per (stage, micro-batch size): its replicas' slices, in order.
    slices: HashMap<(usize, u32), Vec<(u32, u32)>>,
}

impl<'a> PipeCosts<'a> {
    /// The table of `plan`'s iteration, whose pipeline is `pipe`. Rows are
    /// built in the order the lowering first meets them (so a GPU type
    /// without block times for the plan's attention fails as it would).
    pub fn new(
        costs: &'a CostModel,
        plan: &Plan,
        pipe: &Pipeline,
    ) -> Result<PipeCosts<'a>, PlanError> {
        let mut rows = Rows::new(costs, &plan.strategy);
        let mut out_bytes = HashMap::default();
        let mut tp_map = HashMap::default();
        // TP groups of one shape are priced once per slice size.
        let mut by_shape: HashMap<(usize, u32, GroupShape<'a>), TpTimes> = HashMap::default();
        let p = pipe.depth();
        let mut sizes: Vec<u32> = Vec::new();
        for x in pipe.micro_sizes(costs.workload.global_batch) {
            if !sizes.contains(&x) {
                sizes.push(x);
            }
        }
        // Every slice, and what it sends the next stage (the gradients
        // coming back cover the same pairs and sample counts).
        let mut slices = HashMap::default();
        for &size in &sizes {
            for (s, st) in pipe.stages.iter().enumerate() {
                slices.insert((s, size), st.slices(size));
            }
        }
        for &size in &sizes {
            for (s, st) in pipe.stages.iter().enumerate() {
                let tp = pipe.tensor(s);
                for (j, &(lo, hi)) in slices[&(s, size)].iter().enumerate() {
                    let group: Vec<usize> = st.group(j).iter().map(|&r| r as usize).collect();
                    let (mut f, mut b) = (0.0f64, 0.0f64);
                    for &rank in &group {
                        let row = rows.add(rank, hi - lo, &tp)?;
                        f = f.max(row.f_blk.as_ms());
                        b = b.max(row.b_blk.as_ms());
                    }
                    let n = hi - lo;
                    let e = tp.experts;
                    let ep_group = if e > 1 {
                        crate::expert_parallel::dispatch_group(st, &tp, j)
                    } else {
                        Vec::new()
                    };
                    let mut shape = group_shape(costs, &group);
                    shape.extend(group_shape(costs, &ep_group));
                    let mut times = *by_shape
                        .entry((s, n, shape))
                        .or_insert_with(|| tp_times(costs, &tp, (&group, &ep_group), n, f, b));
                    if e > 1 {
                        // The EP group's replicas meet at every exchange:
                        // each MoE block waits for the group's slowest.
                        let (sf, sb) = ep_pace(&mut rows, st, &slices[&(s, size)], &ep_group, &tp)?;
                        times.ep_fwd += dur((sf - f).max(0.0));
                        times.ep_bwd += dur((sb - b).max(0.0));
                    }
                    tp_map.insert((s, j, n), times);
                    // With model chunks the last stage feeds the first
                    // stage's next chunk.
                    if s + 1 == p && pipe.chunks() == 1 {
                        continue;
                    }
                    let ns = (s + 1) % p;
                    let next = &pipe.stages[ns];
                    let ntp = pipe.tensor(ns);
                    for (h, ov, recv_n) in overlaps(&slices[&(ns, size)], lo, hi) {
                        for &to in next.group(h) {
                            rows.add(to as usize, recv_n, &ntp)?;
                        }
                        out_bytes
                            .entry(ov)
                            .or_insert_with(|| costs.block_output_bytes(ov));
                    }
                }
            }
        }
        let mut optimizer = vec![SimTime::ZERO; costs.ranks()];
        for (s, st) in pipe.stages.iter().enumerate() {
            let local = pipe
                .rank_held(s, &costs.workload.model, &plan.strategy)
                .state_params();
            for &r in &st.gpus {
                optimizer[r as usize] = dur(costs.optimizer_ms(r as usize, local));
            }
        }
        Ok(PipeCosts {
            rows,
            optimizer,
            out_bytes,
            tp: tp_map,
            slices,
        })
    }

    /// The row of `rank`'s slice of `n` samples under `tp`.
    pub fn row(&self, rank: usize, n: u32, tp: &TensorParallel) -> &Micro {
        self.rows.get(rank, n, tp)
    }

    /// The exposed TP communication of replica `j` of stage `s` on a slice
    /// of `n` samples.
    pub fn tp(&self, s: usize, j: usize, n: u32) -> TpTimes {
        self.tp.get(&(s, j, n)).copied().unwrap_or_default()
    }

    /// Stage `s`'s replicas' slices `[lo, hi)` of a micro-batch of `size`
    /// samples, in replica order ([`crate::plan::pipeline::apportion`]).
    pub fn slices(&self, s: usize, size: u32) -> &[(u32, u32)] {
        &self.slices[&(s, size)]
    }

    /// Bytes of a block output of `n` samples (a transfer of `n` samples
    /// of the pipeline, the whole sequence).
    pub fn block_output_bytes(&self, n: u32) -> f64 {
        self.out_bytes[&n]
    }
}
