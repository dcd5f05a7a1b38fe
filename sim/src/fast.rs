//! The fast model: the same iteration as the event simulation, evaluated
//! without building a graph. (The per-GPU memory bound planners ask about
//! hypothetical micro-batches is [`crate::bounds`].)
//!
//! # Whole-plan evaluation ([`evaluate`])
//!
//! The lowering ([`crate::lower::data_parallel`]) emits ops in an order that
//! respects every dependency and every stream's issue order. The engine's
//! rule is that an op starts as soon as its dependencies are done and it
//! heads every queue it was issued on, i.e. at
//! `max(end of the previous op on each of its streams, end of each
//! dependency)`. [`Timeline`] applies that rule to each op as it arrives,
//! so it needs no task graph and no event queue, and gives the simulator's
//! times. Memory changes are stamped with those times and swept per pool,
//! all changes of one instant together, as [`crate::memory::MemoryTracker`]
//! counts them, so its peaks are the simulator's.
//!
//! Units: ms for times, bytes for memory.

use crate::cost::CostModel;
use crate::engine::NameId;
use crate::engine::{Category, MemAt, MemChange, OpId, OpLabel, Stream, NO_INDEX};
use crate::error::PlanError;
use crate::iteration::{Iteration, SimOptions};
use crate::lower::Sink;
use crate::plan::Plan;
use crate::units::{SimTime, GIB};

/// A [`Sink`] that evaluates each op on arrival (see the module docs).
#[derive(Debug, Clone)]
pub struct Timeline {
    streams: Vec<u64>,
    /// Per op: its start, end, pass and what it is (as folding reads
    /// them, [`crate::fold`]).
    ops: Vec<crate::fold::OpTime>,
    /// Per op: where its memory changes and its ranks start in `mems` and
    /// `ranks`.
    mem_at: Vec<u32>,
    rank_at: Vec<u32>,
    ranks: Vec<u32>,
    /// (pool, time, delta) of every memory change.
    mems: Vec<(u32, u64, i64)>,
    finish: Vec<u64>,
    makespan: u64,
}

impl Timeline {
    /// An empty timeline for `ranks` GPUs.
    pub fn new(ranks: usize) -> Timeline {
        Timeline {
            streams: vec![0; ranks * Stream::COUNT],
            ops: Vec::new(),
            mem_at: Vec::new(),
            rank_at: Vec::new(),
            ranks: Vec::new(),
            mems: Vec::new(),
            finish: vec![0; ranks],
            makespan: 0,
        }
    }

    fn slot(rank: u32, stream: Stream) -> usize {
        rank as usize * Stream::COUNT + stream.index()
    }

    fn push(
        &mut self,
        start: u64,
        dur: SimTime,
        mems: &[MemChange],
        label: OpLabel,
        ranks: &[u32],
    ) -> (OpId, u64) {
        let end = start.saturating_add(dur.0);
        let id = OpId(self.ops.len() as u32);
        self.ops
            .push(crate::fold::OpTime::new(label, dur, start, end));
        self.mem_at.push(self.mems.len() as u32);
        self.rank_at.push(self.ranks.len() as u32);
        self.ranks.extend_from_slice(ranks);
        for m in mems.iter().filter(|m| m.delta_bytes != 0) {
            let t = match m.at {
                MemAt::Start => start,
                MemAt::End => end,
            };
            self.mems.push((m.pool, t, m.delta_bytes));
        }
        self.makespan = self.makespan.max(end);
        for &r in ranks {
            self.finish[r as usize] = self.finish[r as usize].max(end);
        }
        (id, end)
    }

    /// The index range of op `i`'s entries in a per-op CSR array.
    fn range(at: &[u32], i: usize, len: usize) -> std::ops::Range<usize> {
        at[i] as usize..at.get(i + 1).map_or(len, |&x| x as usize)
    }

    fn ready(&self, deps: &[OpId]) -> u64 {
        deps.iter()
            .map(|d| self.ops[d.0 as usize].end)
            .max()
            .unwrap_or(0)
    }

    /// The whole iteration's per-rank finish and makespan (ns) when this
    /// timeline is the reduced run of `layout`, or `None` when a folded
    /// run is not exactly periodic ([`crate::fold::Layout::detect`]).
    fn unfold(&self, layout: &crate::fold::Layout) -> Option<(Vec<u64>, u64)> {
        let net_zero = |block: &[u32]| {
            crate::fold::sums_to_zero(block.iter().flat_map(|&o| {
                self.mems[Self::range(&self.mem_at, o as usize, self.mems.len())]
                    .iter()
                    .map(|&(p, _, d)| (p, d))
            }))
        };
        let u = layout.detect(&self.ops, &net_zero)?;
        let mut finish = vec![0u64; self.finish.len()];
        let mut makespan = 0u64;
        for (i, t) in self.ops.iter().enumerate() {
            let end = t.end.saturating_add(u.shift_last_ns(t.pass));
            makespan = makespan.max(end);
            for &r in &self.ranks[Self::range(&self.rank_at, i, self.ranks.len())] {
                finish[r as usize] = finish[r as usize].max(end);
            }
        }
        Some((finish, makespan))
    }

    /// Peak of every pool `0..bases.len()` starting from `bases`, bytes
    /// (totals after each instant's changes).
    pub fn peaks(&self, bases: &[i64]) -> Vec<i64> {
        let mut by_pool: Vec<Vec<(u64, i64)>> = vec![Vec::new(); bases.len()];
        for &(p, t, d) in &self.mems {
            if let Some(v) = by_pool.get_mut(p as usize) {
                v.push((t, d));
            }
        }
        by_pool
            .into_iter()
            .zip(bases)
            .map(|(mut v, &b)| {
                v.sort_by_key(|x| x.0);
                let (mut cur, mut peak) = (b, b);
                let mut i = 0;
                while i < v.len() {
                    let t = v[i].0;
                    while i < v.len() && v[i].0 == t {
                        cur = cur.saturating_add(v[i].1);
                        i += 1;
                    }
                    peak = peak.max(cur);
                }
                peak
            })
            .collect()
    }
}

impl Sink for Timeline {
    fn label(&mut self, category: Category, _name: &str) -> OpLabel {
        OpLabel {
            category,
            name: NameId(0),
            unit: NO_INDEX,
            micro: NO_INDEX,
        }
    }

    fn op(
        &mut self,
        rank: u32,
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        let s = Self::slot(rank, stream);
        let start = self.streams[s].max(self.ready(deps));
        let (id, end) = self.push(start, dur, mems, label, &[rank]);
        self.streams[s] = end;
        id
    }

    fn collective(
        &mut self,
        ranks: &[u32],
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
    ) -> OpId {
        let mut start = self.ready(deps);
        for &r in ranks {
            start = start.max(self.streams[Self::slot(r, stream)]);
        }
        let (id, end) = self.push(start, dur, mems, label, ranks);
        for &r in ranks {
            self.streams[Self::slot(r, stream)] = end;
        }
        id
    }
}

/// What the fast model says about a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct FastEval {
    /// Iteration time, ms.
    pub iteration_ms: f64,
    /// When each GPU's last op ends, ms.
    pub finish_ms: Vec<f64>,
    /// Peak memory per GPU, GiB.
    pub peak_gib: Vec<f64>,
    /// Peak host memory per node, GiB.
    pub host_peak_gib: Vec<f64>,
    /// Some GPU exceeds its usable memory or some host its capacity.
    pub oom: bool,
}

/// Evaluates one iteration of `plan` (validated first, origin `plan`).
/// Long runs of identical micro-batch passes are folded as the simulator
/// folds them (`opts.fold_passes`, [`crate::fold`]).
pub fn evaluate(costs: &CostModel, plan: &Plan, opts: &SimOptions) -> Result<FastEval, PlanError> {
    let ranks = costs.ranks();
    // Identical nodes are timed once, as the simulator simulates them once
    // ([`crate::symmetry`]); every other GPU and host takes its twin's times
    // and peaks below. Exact by the same construction.
    let it = Iteration::new(costs, plan, opts)?;
    let classes = it.classes();
    let merged = !classes.is_identity();
    let mut found = None;
    for layout in it.fold_layouts(opts) {
        let mut reduced = Timeline::new(ranks);
        let parts = it.lower_into(opts, false, Some(&layout), &mut reduced)?;
        if let Some(u) = reduced.unfold(&layout) {
            found = Some((parts, reduced, u));
            break;
        }
    }
    let (t, parts, unfolded) = match found {
        Some((parts, reduced, u)) => (reduced, parts, Some(u)),
        None => {
            let mut t = Timeline::new(ranks);
            let parts = it.lower_into(opts, false, None, &mut t)?;
            (t, parts, None)
        }
    };
    let (mut finish, makespan) = unfolded.unwrap_or_else(|| (t.finish.clone(), t.makespan));
    let mut bases = parts.base_device_bytes.clone();
    bases.extend(&parts.base_host_bytes);
    let mut peaks = t.peaks(&bases);
    if merged {
        for r in 0..ranks {
            finish[r] = finish[classes.rep_rank[r]];
            peaks[r] = peaks[classes.rep_rank[r]];
        }
        for (n, &rep) in classes.rep_node.iter().enumerate() {
            peaks[ranks + n] = peaks[ranks + rep];
        }
    }
    let peak_gib: Vec<f64> = peaks[..ranks].iter().map(|&b| b as f64 / GIB).collect();
    let host_peak_gib: Vec<f64> = peaks[ranks..].iter().map(|&b| b as f64 / GIB).collect();
    let oom = (0..ranks).any(|r| peak_gib[r] > costs.usable_gib(r))
        || costs
            .workload
            .cluster
            .nodes
            .iter()
            .zip(&host_peak_gib)
            .any(|(n, &h)| h > n.host_mem_gib);
    Ok(FastEval {
        iteration_ms: makespan as f64 / 1e6,
        finish_ms: finish.iter().map(|&x| x as f64 / 1e6).collect(),
        peak_gib,
        host_peak_gib,
        oom,
    })
}
