//! Lowers a [`Description`] to ops with their memory changes and the
//! dependencies between them, and records every collective for the report.
//! The ops go to a [`Sink`]: an engine [`Graph`] for the event simulation,
//! or the fast model's timeline (`crate::fast`), which evaluates each op as
//! it arrives. Ops are emitted in an order that respects every dependency
//! and every stream's issue order, so both see the same iteration.
//!
//! With [`Lowering::classes`], only the simulated ranks' ops are emitted
//! (identical nodes simulated once, [`crate::symmetry`]): a collective
//! joins the simulated members of its group and keeps the duration and
//! link loads costed for the whole group (loads on simulated nodes' links
//! only); dependencies on ranks left out are dropped, their twins stand
//! for them.
//!
//! # Dependencies
//!
//! * A rank's first compute op of a phase waits for the phase's all-gather
//!   (when the phase gathers); later ops follow the compute stream.
//! * **Prefetch** (default on): the all-gather of phase `p + 2` is issued
//!   once every rank of the shard group finished the compute of phase `p`
//!   (and, the communication stream being in order, after the reductions
//!   of phase `p`), so at most two phases' parameters are gathered at a
//!   time (FSDP's rate limiter). Without prefetch, or when a rank is a CPU
//!   device ([`CostModel::comm_overlaps_compute`]), the all-gather of `p + 1`
//!   waits for the compute of `p`.
//! * Host-to-device copies of backward steps are prefetched one step ahead:
//!   the copy for step `j + 1` waits for the compute of step `j - 1` (two
//!   input buffers) and precedes step `j`'s device-to-host copy on the copy
//!   stream. A step whose copy was not prefetched issues it when reached.
//! * Gradient reductions of a phase wait for every rank of the group to
//!   finish the phase's compute (FSDP's post-backward hook), a rank with
//!   no micro-batch in that pass for its last backward of the unit; hybrid
//!   sharding's replica all-reduce waits for every group's reduce-scatter
//!   and runs on the separate reduce stream.
//! * The optimizer step of a rank waits for its last reductions (and, when
//!   offloaded, its last gradient copy to the host; the host step is
//!   followed by the copy of the updated parameters back to the GPU).
//!
//! [`CostModel::comm_overlaps_compute`]: crate::cost::CostModel::comm_overlaps_compute

use super::collectives::Collectives;
use super::dp_group::{DpGroup, Gathering, Reduction};
use super::sink::{at, Lowered, LoweredParts, Sink};
use crate::data_parallel::{Description, Mem, OpKind, PhaseKind, Step};
use crate::engine::{Category, Graph, MemAt, MemChange, MemKind, OpId, OpLabel, Stream, NO_INDEX};
use crate::strategy::Offload;
use crate::symmetry::NodeClasses;
use crate::units::SimTime;
use std::rc::Rc;

struct Labels {
    fwd: OpLabel,
    embed_fwd: OpLabel,
    head_fwd: OpLabel,
    bwd: OpLabel,
    embed_bwd: OpLabel,
    head_bwd: OpLabel,
    recompute: OpLabel,
    optimizer: OpLabel,
    host_optimizer: OpLabel,
    ag: OpLabel,
    rs: OpLabel,
    ar_replicas: OpLabel,
    ar_buckets: OpLabel,
    d2h: OpLabel,
    h2d: OpLabel,
    d2h_grads: OpLabel,
    h2d_params: OpLabel,
}

struct Builder<'d, 'a, 's, S: Sink> {
    d: &'d Description<'a>,
    g: &'s mut S,
    lb: Labels,
    /// The collectives: priced, sharing links, recorded.
    c: Collectives<'d>,
    /// Every rank, in order (the data-parallel group).
    all: Rc<[usize]>,
    mems: Vec<MemChange>,
    /// Declare link shares (the engine graph with link sharing on).
    contention: bool,
    /// Collectives block their ranks' next compute op.
    blocking: bool,
    /// Per rank: the collective its next compute op waits for (blocking).
    blocked_by: Vec<Option<OpId>>,
}

impl<S: Sink> Builder<'_, '_, '_, S> {
    /// Whether rank `r`'s ops are emitted.
    fn on(&self, r: usize) -> bool {
        self.c.on(r)
    }

    /// A local op of `rank`; device changes go to its GPU's pool, host
    /// changes to its node's host pool.
    fn local(
        &mut self,
        rank: usize,
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[Mem],
    ) -> OpId {
        let host_pool =
            self.d.ranks() as u32 + self.d.costs.workload.cluster.gpus[rank].node as u32;
        self.mems.clear();
        for m in mems {
            self.mems.push(MemChange {
                pool: if m.host { host_pool } else { rank as u32 },
                at: m.at,
                delta_bytes: m.bytes,
                kind: m.kind,
            });
        }
        let blocked = match stream {
            Stream::Compute => self.blocked_by[rank].take(),
            _ => None,
        };
        let op = match blocked {
            Some(c) => {
                let mut all = deps.to_vec();
                all.push(c);
                self.g.op(rank as u32, stream, dur, &all, label, &self.mems)
            }
            None => self.g.op(rank as u32, stream, dur, deps, label, &self.mems),
        };
        if self.contention && stream == Stream::Copy && dur.0 > 0 {
            let to_host = label.category == Category::CopyD2H;
            if let Some(share) = self.d.costs.host_copy_share(rank, to_host) {
                self.g.shares(op, &[share]);
            }
        }
        op
    }

    /// Under blocking collectives: each GPU's next compute op waits for
    /// the last collective it joined among `ops` (by position in `ranks`).
    fn block(&mut self, ranks: &[usize], ops: impl Fn(usize) -> Option<OpId>) {
        if self.blocking {
            for (pos, &r) in ranks.iter().enumerate() {
                if let Some(op) = ops(pos) {
                    self.blocked_by[r] = Some(op);
                }
            }
        }
    }

    /// The data-parallel group: every GPU, in the plan's shard groups.
    fn group<'r>(&self, all: &'r [usize]) -> DpGroup<'r> {
        DpGroup {
            ranks: all,
            shard_width: self.d.groups.group_size,
            sharding: self.d.strategy.sharding,
        }
    }

    /// All-gathers of phase `p` (one per shard group; `None` for a group
    /// with no emitted rank), after `deps[r]` of the group's ranks.
    fn gather(&mut self, p: usize, after: &[Option<OpId>]) -> Vec<Option<OpId>> {
        let d = self.d;
        let ph = d.phases[p];
        let u = ph.unit as usize;
        let pb = d.units[u].param_bytes;
        let pass = ph.pass.unwrap_or(NO_INDEX);
        let all = Rc::clone(&self.all);
        let grp = self.group(&all);
        let pieces = |k: usize| (pb as f64, d.gather_pieces(u, k));
        let deps = |sub: &[usize]| sub.iter().filter_map(|&r| after[r]).collect();
        let mems = |part: &[usize]| {
            let mut mems = Vec::with_capacity(2 * part.len());
            for &r in part {
                mems.push(MemChange::start(r as u32, pb).of(MemKind::Params));
                // A GPU with nothing to compute in the phase frees at
                // once when the phase reshards (a GPU with no samples).
                if d.step_count(r, p) == 0 && ph.reshard {
                    mems.push(MemChange::end(r as u32, -pb).of(MemKind::Params));
                }
            }
            mems
        };
        let a = Gathering {
            unit: ph.unit,
            pieces: &pieces,
            deps: &deps,
            mems: &mems,
            stream: Stream::Comm,
            label: at(self.lb.ag, ph.unit, pass),
        };
        let ops = grp.gather(&mut self.c, self.g, &a);
        let h = grp.shard_width.max(1);
        self.block(&all, |pos| ops[pos / h]);
        ops
    }
}

/// Per-rank construction state.
#[derive(Debug, Clone, Default)]
struct RankState {
    /// Last compute op of the previous step.
    prev_step_end: Option<OpId>,
    /// Host-to-device copy already issued for the next step.
    pending_h2d: Option<OpId>,
    /// The rank's last reductions (comm and reduce streams) and gradient
    /// copy: what its optimizer step waits for.
    last_reduce: Option<OpId>,
    last_replica: Option<OpId>,
    last_grad_copy: Option<OpId>,
    /// Per unit: the unsharded gradient buffer is allocated (by a backward
    /// op) and not yet reduced.
    grad_live: Vec<bool>,
    /// Per unit: the rank's latest backward op of it (its gradient's last
    /// contribution, which a later pass's reduction waits for).
    last_bwd: Vec<Option<OpId>>,
    /// The rank's next step, already described while prefetching its copy.
    next_step: Option<Step>,
}

/// The knobs of a lowering.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lowering<'a> {
    /// Prefetch the next unit's all-gather.
    pub prefetch: bool,
    /// Collectives and host copies declare the links they keep busy, so the
    /// engine shares links between overlapping transfers.
    pub contention: bool,
    /// Emit only the ranks these classes simulate (`None`: every rank).
    /// Collectives keep the full group's duration.
    pub classes: Option<&'a NodeClasses>,
    /// Every collective blocks its ranks' next compute (a trainer that
    /// issues collectives synchronously, as `exec`'s does). CPU ranks
    /// always block ([`crate::cost::CostModel::comm_overlaps_compute`]):
    /// MPI moves their data with the cores that compute.
    pub blocking_collectives: bool,
}

/// Builds the engine graph of `d` lowered as `how` says.
pub fn lower(d: &Description<'_>, how: &Lowering<'_>) -> Lowered {
    // Up to four ops per step (a copy in, two computes, a copy out); most
    // steps have two or three.
    let simulated = how.classes.map(|c| &c.simulated[..]);
    let on = |r: usize| simulated.is_none_or(|s| s[r]);
    let emitted = (0..d.ranks()).filter(|&r| on(r)).count();
    let steps: usize = (0..d.phases.len())
        .map(|p| {
            (0..d.ranks())
                .filter(|&r| on(r))
                .map(|r| d.step_count(r, p))
                .sum::<usize>()
        })
        .sum();
    let ops = 3 * steps + 2 * emitted + d.phases.len() * d.groups.count();
    let mut g = Graph::with_capacity(ops, 2 * ops);
    let parts = lower_into(d, how, &mut g);
    let cluster = &d.costs.workload.cluster;
    Lowered {
        classes: how
            .classes
            .cloned()
            .unwrap_or_else(|| NodeClasses::identity(cluster.len(), cluster.nodes.len())),
        graph: g,
        base_device_bytes: parts.base_device_bytes,
        base_host_bytes: parts.base_host_bytes,
        collectives: parts.collectives,
    }
}

impl Labels {
    /// The labels of the ops, interned in `g` once.
    fn new<S: Sink>(g: &mut S) -> Labels {
        Labels {
            fwd: g.label(Category::Forward, "fwd"),
            embed_fwd: g.label(Category::Forward, "embed_fwd"),
            head_fwd: g.label(Category::Forward, "head_fwd"),
            bwd: g.label(Category::Backward, "bwd"),
            embed_bwd: g.label(Category::Backward, "embed_bwd"),
            head_bwd: g.label(Category::Backward, "head_bwd"),
            recompute: g.label(Category::Recompute, "recompute"),
            optimizer: g.label(Category::Optimizer, "optimizer"),
            host_optimizer: g.label(Category::Optimizer, "host_optimizer"),
            ag: g.label(Category::AllGather, "all_gather"),
            rs: g.label(Category::ReduceScatter, "reduce_scatter"),
            ar_replicas: g.label(Category::AllReduce, "all_reduce_replicas"),
            ar_buckets: g.label(Category::AllReduce, "all_reduce_buckets"),
            d2h: g.label(Category::CopyD2H, "d2h"),
            h2d: g.label(Category::CopyH2D, "h2d"),
            d2h_grads: g.label(Category::CopyD2H, "d2h_grads"),
            h2d_params: g.label(Category::CopyH2D, "h2d_params"),
        }
    }

    /// The label of a compute op of kind `kind`.
    fn of(&self, kind: OpKind) -> OpLabel {
        match kind {
            OpKind::EmbedFwd => self.embed_fwd,
            OpKind::Fwd => self.fwd,
            OpKind::HeadFwd => self.head_fwd,
            OpKind::HeadBwd => self.head_bwd,
            OpKind::Recompute => self.recompute,
            OpKind::Bwd => self.bwd,
            OpKind::EmbedBwd => self.embed_bwd,
        }
    }
}

impl<'d, 'a, 's, S: Sink> Builder<'d, 'a, 's, S> {
    /// A builder emitting `d` into `g` as `how` says.
    fn new(d: &'d Description<'a>, how: &Lowering<'d>, g: &'s mut S) -> Builder<'d, 'a, 's, S> {
        let lb = Labels::new(g);
        Builder {
            d,
            g,
            lb,
            c: Collectives::new(
                d.costs,
                how.classes.map(|c| &c.simulated[..]),
                how.contention,
            ),
            all: (0..d.ranks()).collect(),
            mems: Vec::with_capacity(16),
            contention: how.contention,
            blocking: how.blocking_collectives || !d.costs.comm_overlaps_compute(),
            blocked_by: vec![None; d.ranks()],
        }
    }

    /// Step `j` of rank `r` in phase `p` (`ag`: the phase's all-gather per
    /// shard group, if it gathers): its unit buffers, its copy in
    /// (prefetched or now), the next step's prefetched copy (backward
    /// phases), its compute and its copy out. Returns its last compute op.
    fn step(
        &mut self,
        p: usize,
        r: usize,
        j: usize,
        ag: &Option<Vec<Option<OpId>>>,
        sr: &mut RankState,
    ) -> Option<OpId> {
        let d = self.d;
        let ph = d.phases[p];
        let (u, ui) = (ph.unit, ph.unit as usize);
        let backward_kind = matches!(ph.kind, PhaseKind::Head | PhaseKind::Backward);
        let n = d.step_count(r, p);
        let mut step: Step = sr.next_step.take().unwrap_or_else(|| d.step(r, p, j));
        if j == 0 && ph.grad_alloc && d.strategy.sharding.shards_params() && !sr.grad_live[ui] {
            if let Some(w) = step.backward_work_mut() {
                w.mem
                    .push(Mem::dev(MemAt::Start, d.units[ui].grad_bytes).of(MemKind::Grads));
                sr.grad_live[ui] = true;
            }
        }
        if j + 1 == n && ph.reshard && d.units[ui].param_bytes != 0 {
            step.last_work_mut()
                .mem
                .push(Mem::dev(MemAt::End, -d.units[ui].param_bytes).of(MemKind::Params));
        }
        let this_h2d = self.copy_in(r, u, &step, sr);
        // Prefetch the next step's copy (backward steps only).
        if backward_kind {
            if let Some((nu, next)) = d.next_step(r, p, j) {
                if let Some(c) = &next.h2d {
                    let prev = sr.prev_step_end;
                    let op = self.local(
                        r,
                        Stream::Copy,
                        c.dur,
                        prev.as_slice(),
                        at(self.lb.h2d, nu, next.micro),
                        c.mem.as_slice(),
                    );
                    sr.pending_h2d = Some(op);
                }
                sr.next_step = Some(next);
            }
        }
        let first_deps = if j == 0 {
            ag.as_ref().and_then(|v| v[d.groups.group_of(r)])
        } else {
            None
        };
        let last = self.compute(r, u, &step, first_deps, this_h2d);
        if let Some(c) = &step.d2h {
            let label = at(self.lb.d2h, u, step.micro);
            self.local(
                r,
                Stream::Copy,
                c.dur,
                last.as_slice(),
                label,
                c.mem.as_slice(),
            );
        }
        sr.prev_step_end = last;
        if backward_kind {
            sr.last_bwd[ui] = last;
        }
        last
    }

    /// The host-to-device copy `step` of rank `r` (unit `u`) needs:
    /// prefetched earlier, or issued now.
    fn copy_in(&mut self, r: usize, u: u32, step: &Step, sr: &mut RankState) -> Option<OpId> {
        let c = step.h2d.as_ref()?;
        if sr.pending_h2d.is_none() {
            let label = at(self.lb.h2d, u, step.micro);
            let op = self.local(r, Stream::Copy, c.dur, &[], label, c.mem.as_slice());
            sr.pending_h2d = Some(op);
        }
        sr.pending_h2d.take()
    }

    /// The compute ops of `step` of rank `r` (unit `u`), in order; the
    /// first waits for the phase's all-gather (`gathered`) and the copy
    /// in. Returns the last.
    fn compute(
        &mut self,
        r: usize,
        u: u32,
        step: &Step,
        gathered: Option<OpId>,
        copied: Option<OpId>,
    ) -> Option<OpId> {
        let mut last = None;
        let mut deps: Vec<OpId> = Vec::with_capacity(3);
        for (w_i, w) in step.works().enumerate() {
            deps.clear();
            if w_i == 0 {
                deps.extend(gathered);
                deps.extend(copied);
            }
            let label = at(self.lb.of(w.kind), u, step.micro);
            last = Some(self.local(r, Stream::Compute, w.dur, &deps, label, w.mem.as_slice()));
        }
        last
    }

    /// Every emitted rank's optimizer step, after its last reductions: on
    /// its GPU, or (offloaded) on the host after its last gradient copy,
    /// followed by the copy of the updated parameters back.
    fn optimizer_steps(&mut self, st: &[RankState]) {
        let d = self.d;
        for (r, sr) in st.iter().enumerate() {
            if !self.on(r) {
                continue;
            }
            let rc = &d.rank_costs[r];
            let dur = rc.optimizer;
            if d.strategy.offload == Offload::Optimizer {
                let after: Vec<OpId> = sr
                    .last_grad_copy
                    .or(sr.last_replica)
                    .or(sr.last_reduce)
                    .into_iter()
                    .collect();
                let host = self.local(r, Stream::Host, dur, &after, self.lb.host_optimizer, &[]);
                self.local(
                    r,
                    Stream::Copy,
                    rc.params_up,
                    &[host],
                    self.lb.h2d_params,
                    &[],
                );
            } else {
                let after: Vec<OpId> = sr.last_reduce.into_iter().chain(sr.last_replica).collect();
                self.local(r, Stream::Compute, dur, &after, self.lb.optimizer, &[]);
            }
        }
    }
}

/// Emits the ops of `d`, lowered as `how` says, into `g`.
pub fn lower_into<S: Sink>(d: &Description<'_>, how: &Lowering<'_>, g: &mut S) -> LoweredParts {
    let ranks = d.ranks();
    let np = d.phases.len();
    let mut b = Builder::new(d, how, g);
    let ahead = usize::from(how.prefetch && d.costs.comm_overlaps_compute());
    let mut ag: Vec<Option<Vec<Option<OpId>>>> = vec![None; np];
    let none: Vec<Option<OpId>> = vec![None; ranks];
    for (p, slot) in ag.iter_mut().enumerate().take(ahead + 1) {
        if d.phases[p].gather {
            *slot = Some(b.gather(p, &none));
        }
    }
    let mut st: Vec<RankState> = vec![
        RankState {
            grad_live: vec![false; d.units.len()],
            last_bwd: vec![None; d.units.len()],
            ..RankState::default()
        };
        ranks
    ];
    let mut phase_end: Vec<Option<OpId>> = vec![None; ranks];
    for p in 0..np {
        phase_end.iter_mut().for_each(|x| *x = None);
        for r in 0..ranks {
            if !b.on(r) {
                continue;
            }
            for j in 0..d.step_count(r, p) {
                phase_end[r] = b.step(p, r, j, &ag[p], &mut st[r]);
            }
        }
        if d.phases[p].reduce {
            reduce(&mut b, p, &phase_end, &mut st);
        }
        let next = p + 1 + ahead;
        if next < np && d.phases[next].gather {
            ag[next] = Some(b.gather(next, &phase_end));
        }
    }
    b.optimizer_steps(&st);
    let base_device_bytes = (0..ranks).map(|r| d.base_device_bytes(r)).collect();
    let base_host_bytes = (0..d.costs.workload.cluster.nodes.len())
        .map(|n| d.base_host_bytes(n))
        .collect();
    LoweredParts {
        base_device_bytes,
        base_host_bytes,
        collectives: b.c.records,
    }
}

/// The gradient reductions after phase `p` by the data-parallel group
/// ([`DpGroup::reduce`]: DDP's bucketed all-reduce, or each shard group's
/// reduce-scatter and HSDP's all-reduce across the groups), then an
/// offloaded optimizer's gradient copies.
fn reduce<S: Sink>(
    b: &mut Builder<'_, '_, '_, S>,
    p: usize,
    phase_end: &[Option<OpId>],
    st: &mut [RankState],
) {
    let d = b.d;
    let ph = d.phases[p];
    let u = ph.unit as usize;
    let pass = ph.pass.unwrap_or(NO_INDEX);
    let gb = d.units[u].grad_bytes;
    let all = Rc::clone(&b.all);
    let grp = b.group(&all);
    let buckets = if d.strategy.sharding.keeps_full_grads() {
        d.ddp_buckets(u)
    } else {
        Vec::new()
    };
    let pieces = |k: usize| (gb as f64, d.reduce_pieces(u, k));
    let replica_bytes = |q: usize| d.replica_buffer(u, q);
    // Every rank's gradient of the unit: this phase's compute, or its
    // last backward of the unit in an earlier pass.
    let deps = |ranks: &[usize]| {
        ranks
            .iter()
            .filter_map(|&r| phase_end[r].or(st[r].last_bwd[u]))
            .collect()
    };
    let mut freed: Vec<usize> = Vec::new();
    let mut mems = |part: &[usize]| {
        if d.strategy.sharding.keeps_full_grads() {
            return Vec::new();
        }
        let mut mems = Vec::with_capacity(3 * part.len());
        for &r in part {
            // A GPU that produced no gradient for the unit (no samples,
            // or no micro-batch in this pass) still reduces a buffer of
            // zeros.
            if !st[r].grad_live[u] {
                mems.push(MemChange::start(r as u32, gb).of(MemKind::Grads));
            }
            mems.push(MemChange::end(r as u32, -gb).of(MemKind::Grads));
            freed.push(r);
            // Parameters kept since an earlier phase (SHARD_GRAD_OP) free
            // here on a GPU that did not compute this phase.
            if ph.reshard && !ph.gather && d.step_count(r, p) == 0 {
                mems.push(MemChange::end(r as u32, -d.units[u].param_bytes).of(MemKind::Params));
            }
        }
        mems
    };
    let label = if d.strategy.sharding.keeps_full_grads() {
        b.lb.ar_buckets
    } else {
        b.lb.rs
    };
    let done = grp.reduce(
        &mut b.c,
        b.g,
        Reduction {
            unit: ph.unit,
            buckets: &buckets,
            pieces: &pieces,
            replica_bytes: &replica_bytes,
            deps: &deps,
            mems: &mut mems,
            stream: Stream::Comm,
            labels: (
                at(label, ph.unit, pass),
                at(b.lb.ar_replicas, ph.unit, pass),
            ),
        },
    );
    for r in freed {
        st[r].grad_live[u] = false;
    }
    b.block(&all, |pos| done.last(pos));
    let mut final_op: Vec<Option<OpId>> = vec![None; d.ranks()];
    for (r, f) in final_op.iter_mut().enumerate() {
        if let Some(op) = done.shard[r] {
            st[r].last_reduce = Some(op);
        }
        if let Some(op) = done.replica[r] {
            st[r].last_replica = Some(op);
        }
        *f = done.last(r);
    }
    if d.strategy.offload == Offload::Optimizer && ph.reduce {
        copy_grads_down(b, p, phase_end, st, &final_op);
    }
}

/// An offloaded optimizer's copy of each GPU's reduced gradient shard to
/// the host after phase `p`'s reductions; where no reduction ran (one
/// GPU: nothing to reduce), after the backward that produced the gradient
/// (this phase's compute, or the rank's last backward of the unit).
fn copy_grads_down<S: Sink>(
    b: &mut Builder<'_, '_, '_, S>,
    p: usize,
    phase_end: &[Option<OpId>],
    st: &mut [RankState],
    final_op: &[Option<OpId>],
) {
    let d = b.d;
    let ph = d.phases[p];
    let u = ph.unit as usize;
    let pass = ph.pass.unwrap_or(NO_INDEX);
    for r in 0..d.ranks() {
        if !b.on(r) {
            continue;
        }
        let after = final_op[r]
            .or(st[r].last_replica)
            .or(st[r].last_reduce)
            .or(phase_end[r])
            .or(st[r].last_bwd[u]);
        let deps: Vec<OpId> = after.into_iter().collect();
        let dur = d.rank_costs[r].grads_down[u];
        let op = b.local(
            r,
            Stream::Copy,
            dur,
            &deps,
            at(b.lb.d2h_grads, ph.unit, pass),
            &[],
        );
        st[r].last_grad_copy = Some(op);
    }
}
