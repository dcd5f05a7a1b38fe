//! The fast model: the same iteration as the event simulation, evaluated
//! without building a graph, and a per-GPU memory bound planners can ask
//! about hypothetical micro-batches.
//!
//! # Whole-plan evaluation ([`evaluate`])
//!
//! The lowering ([`crate::schedule::lower`]) emits ops in an order that
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
//! # Per-GPU memory bound ([`rank_peak`])
//!
//! For one GPU running `sizes` micro-batches with a state share, without
//! the rest of the plan: its own steps in program order, compute back to
//! back (no waits for collectives, the worst case for the backlog of
//! device-to-host copies), host-to-device copies allocated as early as
//! their prefetch allows, and the collectives' buffers as the worst timing
//! allows: during phase `q` the unit buffers of every gathered-and-not-freed
//! unit and every unreduced gradient, plus the larger of the next phase's
//! prefetched parameters and the gradient buffers whose reduce-scatter may
//! still run (the communication stream runs them before that all-gather,
//! so never both): the previous phase's when the phase waits for an
//! all-gather, every one since the last gathering phase when it does not
//! (SHARD_GRAD_OP's backward: a fast GPU races ahead while its
//! reduce-scatters wait for the slowest). Planners size micro-batches and
//! state shares with it; candidates are then judged by the simulator.
//!
//! Units: ms for times, bytes for memory.

use crate::cost::CostModel;
use crate::engine::NameId;
use crate::engine::{Category, MemAt, MemChange, OpId, OpLabel, Stream, NO_INDEX};
use crate::error::PlanError;
use crate::iteration::{Iteration, SimOptions};
use crate::plan::Plan;
use crate::schedule::lower::Sink;
use crate::schedule::Schedule;
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
        for m in mems {
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

/// The memory one GPU needs, from [`rank_peak`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankPeak {
    /// Peak GPU memory, bytes.
    pub device_bytes: i64,
    /// Peak host memory its offload uses, bytes.
    pub host_bytes: i64,
}

/// Upper bound on the peak memory of `rank` (its GPU type, node and
/// micro-batch costs) running micro-batches of `sizes` under `schedule` in
/// an iteration of `passes` micro-batch passes (micro-batch-major
/// schedules: the plan's largest micro-batch count, at least
/// `sizes.len()`), holding the state of `local_params` parameters (see the
/// module docs). `sizes` empty: a GPU with no samples (state, overhead and
/// one unit's buffers at a time).
pub fn rank_peak(
    schedule: &Schedule<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    local_params: f64,
) -> Result<RankPeak, PlanError> {
    let s = &schedule.strategy;
    let n = sizes.len();
    crate::limits::check_microbatches("plan", &format!("gpus[{rank}].microbatches"), n as u64)?;
    // Micro-batch-major passes between the first and the last start from
    // the same memory (accumulated gradients, gathered or resharded
    // parameters) and, without activation copies whose backlog could carry
    // over, repeat the same pattern per micro-batch size: three passes of
    // each size (first, middle, last of its run) peak as all of them do,
    // so the walk stays O(1) in the pass count.
    // Passes past this GPU's micro-batches (it joins their collectives
    // idle) repeat too: three of them are kept.
    let idle = (passes as usize).saturating_sub(n);
    if n > 0 && s.accumulation.is_microbatch_major() && !s.offloads_activations(n as u32) {
        let big = sizes[0];
        let a = sizes.iter().take_while(|&&m| m == big).count();
        let rest_even = sizes[a..].windows(2).all(|w| w[0] == w[1]);
        let mut short: Vec<u32> = vec![big; a.min(3)];
        short.extend(sizes[a..].iter().take(3));
        if rest_even && (short.len() < n || idle > 3) {
            let p = (short.len() + idle.min(3)) as u32;
            return walk_peak(schedule, rank, &short, p, local_params, true);
        }
    }
    walk_peak(schedule, rank, sizes, passes, local_params, true)
}

/// A lower bound on [`rank_peak`]'s host bytes in O(sizes x units), for
/// refusing a count whose offloaded activations cannot fit before walking
/// it: the host state plus every device-to-host copy of the iteration's
/// leading forward phases (all micro-batches under layered accumulation,
/// the first pass's otherwise). Each of those copies starts, and
/// allocates its host bytes, before the first host-to-device copy (the
/// first host free) ends, since the copy stream runs them in program
/// order. Checks the same limits as [`rank_peak`].
pub fn host_floor(
    schedule: &Schedule<'_>,
    rank: usize,
    sizes: &[u32],
    local_params: f64,
) -> Result<i64, PlanError> {
    let s = &schedule.strategy;
    let n = sizes.len();
    crate::limits::check_microbatches("plan", &format!("gpus[{rank}].microbatches"), n as u64)?;
    let mut floor = (s.host_state_bytes_per_param() * local_params).round() as i64;
    if n == 0 || !s.offloads_activations(n as u32) {
        return Ok(floor);
    }
    // Micro-batches per size: (size, count, costs).
    let mut by_size: Vec<(u32, i64, crate::schedule::Micro)> = Vec::new();
    for &m in sizes {
        match by_size.iter_mut().find(|x| x.0 == m) {
            Some(x) => x.1 += 1,
            None => by_size.push((m, 1, schedule.micro(rank, m)?)),
        }
    }
    // The leading forward phases are the same units in any pass count
    // (a step depends on its phase's unit and kind only): one pass's.
    for ph in schedule
        .phases(1)
        .iter()
        .take_while(|ph| ph.kind == crate::schedule::PhaseKind::Forward)
    {
        for (m, count, mc) in &by_size {
            let k = match ph.pass {
                None => *count,
                // A micro-batch-major pass runs the first size once.
                Some(_) if *m == sizes[0] => 1,
                Some(_) => continue,
            };
            let st = schedule.step(mc, ph, 0, true);
            let bytes: i64 = st
                .d2h
                .iter()
                .flat_map(|c| c.mem.as_slice())
                .filter(|x| x.host && x.bytes > 0)
                .map(|x| x.bytes)
                .fold(0i64, i64::saturating_add);
            floor = floor.saturating_add(bytes.saturating_mul(k));
        }
    }
    Ok(floor)
}

/// [`rank_peak`] by walking every step of every pass (`fold_runs`: runs
/// of equal micro-batches in a layered phase walked as four steps, exact).
fn walk_peak(
    schedule: &Schedule<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    local_params: f64,
    fold_runs: bool,
) -> Result<RankPeak, PlanError> {
    let s = &schedule.strategy;
    let base = schedule.base_device_bytes(local_params);
    let host_base = (s.host_state_bytes_per_param() * local_params).round() as i64;
    let n = sizes.len();
    let units = &schedule.units;
    let shards = s.sharding.shards_params();
    if n == 0 {
        let unit = if shards {
            units
                .iter()
                .map(|u| u.param_bytes.max(u.grad_bytes))
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        return Ok(RankPeak {
            device_bytes: base + unit,
            host_bytes: host_base,
        });
    }
    let mut micro = Vec::with_capacity(n);
    let mut distinct: Vec<(u32, crate::schedule::Micro)> = Vec::new();
    for &m in sizes {
        let mc = match distinct.iter().find(|x| x.0 == m) {
            Some(x) => x.1,
            None => {
                let mc = schedule.micro(rank, m)?;
                distinct.push((m, mc));
                mc
            }
        };
        micro.push(mc);
    }
    let offloads = s.offloads_activations(n as u32);
    let phases = schedule.phases(passes.max(n as u32));
    // The micro-batches a layered phase walks: all of them, or, without
    // copies (compute back to back, nothing else on the GPU's timeline),
    // two at each end of every run of equal sizes and the net memory of
    // the ones between as one change. The level at each instant of such a
    // run is its first step's plus a whole number of steps' net change, so
    // it peaks at the run's first or last steps (or the boundary next to
    // them), which are kept: exact, and O(1) in the run's length.
    let mut walked: Vec<(usize, u32)> = Vec::with_capacity(n.min(64));
    let mut k = 0;
    while k < n {
        let len = sizes[k..].iter().take_while(|&&m| m == sizes[k]).count();
        if !fold_runs || offloads || len <= 4 {
            walked.extend((k..k + len).map(|j| (j, 0)));
        } else {
            walked.extend([
                (k, 0),
                (k + 1, 0),
                (k + len - 2, len as u32 - 4),
                (k + len - 1, 0),
            ]);
        }
        k += len;
    }
    // The rank's steps of phase `p`, in program order, each with the net
    // memory of the steps folded in before it (bytes); described as the
    // walk reaches them.
    let steps_of = |p: usize| -> Vec<(i64, crate::schedule::Step)> {
        let Some(ph) = phases.get(p) else {
            return vec![];
        };
        match ph.pass {
            None => walked
                .iter()
                .map(|&(k, skipped)| {
                    let st = schedule.step(&micro[k], ph, k as u32, offloads);
                    let net: i64 = st
                        .works()
                        .flat_map(|w| w.mem.as_slice())
                        .filter(|m| !m.host)
                        .map(|m| m.bytes)
                        .fold(0i64, i64::saturating_add);
                    (net.saturating_mul(i64::from(skipped)), st)
                })
                .collect(),
            Some(k) if (k as usize) < n => {
                let k = k as usize;
                vec![(0, schedule.step(&micro[k], ph, k as u32, offloads))]
            }
            Some(_) => vec![],
        }
    };
    // The next phase's steps, when a prefetched copy looked ahead.
    let mut upcoming: Option<Vec<(i64, crate::schedule::Step)>> = None;
    let mut gathered = vec![false; units.len()];
    let mut grads = vec![false; units.len()];
    let (mut params_live, mut grads_live) = (0i64, 0i64);
    // Gradient buffers reduced after phase q, bytes: (q, bytes).
    let mut reducing: Vec<(usize, i64)> = Vec::new();
    // Activation events (time, delta) on the device and the host; buffer
    // windows (start, end, bytes) per phase.
    let mut dev: Vec<(u64, i64)> = Vec::new();
    let mut host: Vec<(u64, i64)> = Vec::new();
    let mut windows: Vec<(u64, u64, i64)> = Vec::with_capacity(phases.len());
    // Stream clocks, the compute end of the previous step (what a prefetched
    // copy waits for) and the end of an already issued copy of this step.
    let (mut compute, mut copy) = (0u64, 0u64);
    let mut prev_step_end = 0u64;
    let mut pending: Option<u64> = None;
    // An op's changes at its start, then at its end: compute back to back
    // keeps the events in time order.
    let add = |v: &mut Vec<(u64, i64)>, t0: u64, t1: u64, m: &crate::schedule::Mems, host: bool| {
        for (at, t) in [(MemAt::Start, t0), (MemAt::End, t1)] {
            for x in m.as_slice().iter().filter(|x| x.host == host && x.at == at) {
                v.push((t, x.bytes));
            }
        }
    };
    // Issues a copy on the copy stream no earlier than `after`.
    let issue = |c: &crate::schedule::CopyWork,
                 after: u64,
                 copy: &mut u64,
                 dev: &mut Vec<(u64, i64)>,
                 host: &mut Vec<(u64, i64)>| {
        let start = (*copy).max(after);
        let end = start.saturating_add(c.dur.0);
        add(dev, start, end, &c.mem, false);
        add(host, start, end, &c.mem, true);
        *copy = end;
        end
    };
    for (p, ph) in phases.iter().enumerate() {
        let steps = upcoming.take().unwrap_or_else(|| steps_of(p));
        let u = ph.unit as usize;
        if ph.gather && !gathered[u] {
            gathered[u] = true;
            params_live = params_live.saturating_add(units[u].param_bytes);
        }
        if ph.grad_alloc && shards && !grads[u] && !steps.is_empty() {
            grads[u] = true;
            grads_live = grads_live.saturating_add(units[u].grad_bytes);
        }
        let extra_next = phases
            .get(p + 1)
            .filter(|q| q.gather && !gathered[q.unit as usize])
            .map_or(0, |q| units[q.unit as usize].param_bytes);
        // Gradients reduced earlier whose reduce-scatter may still run: a
        // phase that waits for its all-gather knows every reduce-scatter
        // issued before that all-gather's predecessor ended (only the
        // previous phase's may run); a phase that gathers nothing does not
        // wait, so everything reduced since the last gathering phase may
        // still be pending.
        if ph.gather {
            reducing.retain(|&(q, _)| q + 1 >= p);
        }
        let reducing_bytes: i64 = reducing.iter().map(|x| x.1).sum();
        let backward_kind = matches!(
            ph.kind,
            crate::schedule::PhaseKind::Head | crate::schedule::PhaseKind::Backward
        );
        let phase_start = compute;
        for (j, (skipped_bytes, st)) in steps.iter().enumerate() {
            // As the lowering: this step's copy (prefetched, or now), then
            // the next step's prefetch, then compute, then the copy out.
            let mut ready = compute;
            if *skipped_bytes != 0 {
                dev.push((compute, *skipped_bytes));
            }
            if let Some(h) = &st.h2d {
                let end = match pending.take() {
                    Some(e) => e,
                    None => issue(h, 0, &mut copy, &mut dev, &mut host),
                };
                ready = ready.max(end);
            }
            // (Only offloading steps have copies to prefetch.)
            if backward_kind && offloads {
                let next = match steps.get(j + 1) {
                    Some(x) => Some(&x.1),
                    None => upcoming
                        .get_or_insert_with(|| steps_of(p + 1))
                        .first()
                        .map(|x| &x.1),
                }
                .and_then(|x| x.h2d.as_ref());
                if let Some(h) = next {
                    pending = Some(issue(h, prev_step_end, &mut copy, &mut dev, &mut host));
                }
            }
            let mut t = ready;
            for w in st.works() {
                let end = t.saturating_add(w.dur.0);
                add(&mut dev, t, end, &w.mem, false);
                t = end;
            }
            compute = t;
            prev_step_end = t;
            if let Some(dc) = &st.d2h {
                issue(dc, t, &mut copy, &mut dev, &mut host);
            }
        }
        // The next all-gather starts only after every queued
        // reduce-scatter: it and the pending gradients never coexist.
        windows.push((
            phase_start,
            compute.max(phase_start + 1),
            params_live + grads_live + extra_next.max(reducing_bytes),
        ));
        if ph.reduce && grads[u] {
            grads[u] = false;
            grads_live -= units[u].grad_bytes;
            reducing.push((p, units[u].grad_bytes));
        }
        if ph.reshard && gathered[u] {
            gathered[u] = false;
            params_live -= units[u].param_bytes;
        }
    }
    Ok(RankPeak {
        device_bytes: sweep(base, dev, &windows),
        host_bytes: sweep(host_base, host, &[]),
    })
}

/// Peak of `base` plus the running sum of `events` (allocations before
/// frees at equal instants) plus, at every instant inside a window
/// `(start, end, bytes)`, that window's bytes. `events` in time order cost
/// no sort (a walk without copies emits them so).
fn sweep(base: i64, mut events: Vec<(u64, i64)>, windows: &[(u64, u64, i64)]) -> i64 {
    if !events.is_sorted_by_key(|e| e.0) {
        events.sort_unstable_by_key(|e| e.0);
    }
    let mut peak = base;
    let mut cur = 0i64;
    let mut w = 0usize;
    let mut i = 0usize;
    loop {
        let t = events.get(i).map(|e| e.0);
        // Close windows that end before the next event (or all at the end).
        while w < windows.len() && t.is_none_or(|t| windows[w].1 <= t) {
            peak = peak.max(base.saturating_add(cur).saturating_add(windows[w].2));
            w += 1;
        }
        let Some(t) = t else { break };
        // The instant's changes: its highest level is after all its
        // allocations (or, with none, after its smallest free).
        let (mut allocated, mut net, mut top) = (0i64, 0i64, i64::MIN);
        while i < events.len() && events[i].0 == t {
            let d = events[i].1;
            if d > 0 {
                allocated = allocated.saturating_add(d);
            }
            top = top.max(d);
            net = net.saturating_add(d);
            i += 1;
        }
        let high = if allocated > 0 { allocated } else { top };
        let win = windows
            .get(w)
            .filter(|x| x.0 <= t && t < x.1)
            .map_or(0, |x| x.2);
        peak = peak.max(
            base.saturating_add(cur)
                .saturating_add(high)
                .saturating_add(win),
        );
        cur = cur.saturating_add(net);
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::{Accumulation, Checkpointing, Sharding, StrategySpec};

    /// The analytic cost model of llama-tiny at 256 tokens on `gpus`.
    fn tiny_costs(gpus: &str) -> CostModel {
        let w = crate::cost::Workload {
            cluster: crate::cluster::Cluster::from_gpu_list(
                gpus,
                "--gpus",
                crate::gpu::GpuCatalog::builtin(),
            )
            .unwrap(),
            model: crate::model::ModelCatalog::builtin()
                .get("llama-tiny")
                .unwrap()
                .clone(),
            seq_len: 256,
            dtype: crate::dtype::Dtype::Fp16,
            global_batch: 64,
        };
        CostModel::build(
            w,
            &crate::profile::ProfileSet::new(),
            &*crate::perfmodel::builtin(),
            crate::cost::CostOptions::default(),
        )
        .unwrap()
    }

    /// The shortcuts of [`rank_peak`] for long micro-batch-major iterations
    /// (three passes of each size) and long layered runs (four steps of
    /// each run of equal micro-batches) give exactly the full walk's peaks.
    #[test]
    fn repeated_passes_peak_as_three_of_each_size() {
        for gpus in ["l4,a10g", "t4,t4"] {
            let c = tiny_costs(gpus);
            let mut checked = 0;
            for sh in [Sharding::Full, Sharding::GradOp, Sharding::NoShard] {
                for acc in [
                    Accumulation::NoSync,
                    Accumulation::Sync,
                    Accumulation::Layered,
                ] {
                    for ck in [Checkpointing::Full, Checkpointing::None] {
                        let spec = StrategySpec {
                            sharding: Some(sh),
                            accumulation: Some(acc),
                            checkpointing: Some(ck),
                            ..StrategySpec::default()
                        };
                        let Ok(st) = crate::session::resolve_strategy(&c, &spec) else {
                            assert_eq!(acc, Accumulation::Layered, "{sh:?} {acc:?} resolves");
                            continue;
                        };
                        let sch = Schedule::new(&c, st);
                        for (b, n) in [
                            (7u32, 7u32),
                            (20, 9),
                            (33, 11),
                            (64, 16),
                            (50, 50),
                            (3, 2),
                            (1, 1),
                        ] {
                            let sizes = crate::planner::standard::sizes(b, n);
                            let local = 0.5 * c.workload.model.total_params() as f64;
                            for passes in [n, n + 1, n + 2, n + 9] {
                                let fast = rank_peak(&sch, 0, &sizes, passes, local).unwrap();
                                let full =
                                    walk_peak(&sch, 0, &sizes, passes, local, false).unwrap();
                                assert_eq!(fast, full, "{} {b}/{n} in {passes}", st.label());
                                checked += 1;
                            }
                        }
                    }
                }
            }
            // Micro-batch-major: 3 x 2 x 2 x 7 x 4; layered adds its
            // shardings' (each run of equal sizes walked as four steps).
            assert!(checked > 336, "{checked}");
        }
    }

    /// [`host_floor`] never exceeds the walk's host peak (it is what
    /// `planner::fits` refuses counts with), and under layered offload it
    /// grows with the samples while the host peak does.
    #[test]
    fn host_floor_bounds_the_host_peak() {
        let c = tiny_costs("l4,a10g");
        let mut bounded = 0;
        for acc in [
            Accumulation::Layered,
            Accumulation::NoSync,
            Accumulation::Sync,
        ] {
            for ck in [
                Checkpointing::Full,
                Checkpointing::Selective,
                Checkpointing::None,
            ] {
                let spec = StrategySpec {
                    sharding: Some(Sharding::Full),
                    accumulation: Some(acc),
                    checkpointing: Some(ck),
                    offload: Some(crate::strategy::Offload::Activations),
                    ..StrategySpec::default()
                };
                let Ok(st) = crate::session::resolve_strategy(&c, &spec) else {
                    continue;
                };
                let sch = Schedule::new(&c, st);
                let local = 0.5 * c.workload.model.total_params() as f64;
                let mut last = 0;
                for (b, n) in [(4u32, 2u32), (9, 3), (20, 5), (40, 8), (64, 16)] {
                    let sizes = crate::planner::standard::sizes(b, n);
                    let floor = host_floor(&sch, 0, &sizes, local).unwrap();
                    let peak = walk_peak(&sch, 0, &sizes, n, local, false).unwrap();
                    assert!(
                        floor <= peak.host_bytes,
                        "{}: {b}/{n}: {floor} > {}",
                        st.label(),
                        peak.host_bytes
                    );
                    if acc == Accumulation::Layered {
                        assert!(floor > last, "{}: {b}/{n}", st.label());
                        last = floor;
                    }
                    bounded += 1;
                }
            }
        }
        assert!(bounded >= 30, "{bounded}");
    }

    /// The sweep as first written (sort by time, allocations first, a peak
    /// after every event): the reference for [`sweep`].
    /// Peak of `base` plus the running sum of `events` (allocations before
    /// frees at equal instants) plus, at every instant inside a window
    /// `(start, end, bytes)`, that window's bytes.
    fn sweep_sorted(base: i64, mut events: Vec<(u64, i64)>, windows: &[(u64, u64, i64)]) -> i64 {
        // Stable (adaptive) sort: the events arrive in nearly time order.
        events.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
        let mut peak = base;
        let mut cur = 0i64;
        let mut w = 0usize;
        let mut i = 0usize;
        loop {
            let t = events.get(i).map(|e| e.0);
            // Close windows that end before the next event (or all at the end).
            while w < windows.len() && t.is_none_or(|t| windows[w].1 <= t) {
                peak = peak.max(base.saturating_add(cur).saturating_add(windows[w].2));
                w += 1;
            }
            let Some(t) = t else { break };
            cur = cur.saturating_add(events[i].1);
            let win = windows
                .get(w)
                .filter(|x| x.0 <= t && t < x.1)
                .map_or(0, |x| x.2);
            peak = peak.max(base.saturating_add(cur).saturating_add(win));
            i += 1;
        }
        peak
    }

    /// [`sweep`] (per instant, no sort for ordered events) peaks where the
    /// reference per-event sweep does, on random events and windows.
    #[test]
    fn sweep_per_instant_equals_the_reference() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let n = next(30) as usize;
            let events: Vec<(u64, i64)> =
                (0..n).map(|_| (next(12), next(200) as i64 - 100)).collect();
            let mut windows = Vec::new();
            let mut t = 0;
            for _ in 0..next(4) {
                let s0 = t + next(3);
                let e0 = s0 + 1 + next(4);
                windows.push((s0, e0, next(50) as i64));
                t = e0;
            }
            let base = next(100) as i64;
            let mut sorted = events.clone();
            sorted.sort_by_key(|e| e.0);
            for ev in [events, sorted] {
                assert_eq!(
                    sweep(base, ev.clone(), &windows),
                    sweep_sorted(base, ev.clone(), &windows),
                    "{ev:?} {windows:?}"
                );
            }
        }
    }
}
