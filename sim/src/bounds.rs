//! The planners' per-GPU memory bounds: [`rank_peak`], the peak memory of
//! one GPU running hypothetical micro-batches, and [`host_floor`], a quick
//! lower bound on its host memory. The fast model ([`crate::fast`]) and the
//! simulator evaluate whole plans; these answer about one GPU alone.
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
//! Units: bytes.

use crate::data_parallel::{CopyWork, Mems, Micro, Phase, PhaseKind, Routine, Step, UnitInfo};
use crate::engine::MemAt;
use crate::error::PlanError;

/// The memory one GPU needs, from [`rank_peak`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankPeak {
    /// Peak GPU memory, bytes.
    pub device_bytes: i64,
    /// Peak host memory its offload uses, bytes.
    pub host_bytes: i64,
}

/// Upper bound on the peak memory of `rank` (its GPU type, node and
/// micro-batch costs) running micro-batches of `sizes` under `routine` in
/// an iteration of `passes` micro-batch passes (micro-batch-major
/// routines: the plan's largest micro-batch count, at least
/// `sizes.len()`), holding the state of `local_params` parameters (see the
/// module docs). `sizes` empty: a GPU with no samples (state, overhead and
/// one unit's buffers at a time).
pub fn rank_peak(
    routine: &Routine<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    local_params: f64,
) -> Result<RankPeak, PlanError> {
    let s = &routine.strategy;
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
            return walk_peak(routine, rank, &short, p, local_params, true);
        }
    }
    walk_peak(routine, rank, sizes, passes, local_params, true)
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
    routine: &Routine<'_>,
    rank: usize,
    sizes: &[u32],
    local_params: f64,
) -> Result<i64, PlanError> {
    let s = &routine.strategy;
    let n = sizes.len();
    crate::limits::check_microbatches("plan", &format!("gpus[{rank}].microbatches"), n as u64)?;
    let mut floor = (routine.host_state_bytes_per_param() * local_params).round() as i64;
    if n == 0 || !s.offloads_activations(n as u32) {
        return Ok(floor);
    }
    // Micro-batches per size: (size, count, costs).
    let mut by_size: Vec<(u32, i64, crate::data_parallel::Micro)> = Vec::new();
    for &m in sizes {
        match by_size.iter_mut().find(|x| x.0 == m) {
            Some(x) => x.1 += 1,
            None => by_size.push((m, 1, routine.micro(rank, m)?)),
        }
    }
    // The leading forward phases are the same units in any pass count
    // (a step depends on its phase's unit and kind only): one pass's.
    for ph in routine
        .phases(1)
        .iter()
        .take_while(|ph| ph.kind == crate::data_parallel::PhaseKind::Forward)
    {
        for (m, count, mc) in &by_size {
            let k = match ph.pass {
                None => *count,
                // A micro-batch-major pass runs the first size once.
                Some(_) if *m == sizes[0] => 1,
                Some(_) => continue,
            };
            let st = routine.step(mc, ph, 0, true);
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

/// What a GPU's memory walk reads: its micro-batches' cost-table rows,
/// the phases, and which micro-batches each layered phase walks.
struct Program<'s, 'a> {
    routine: &'s Routine<'a>,
    /// Per micro-batch, its row ([`Routine::micro`]).
    micro: Vec<Micro>,
    /// The micro-batches a layered phase walks, each with the count of
    /// equal ones folded in before it.
    walked: Vec<(usize, u32)>,
    phases: Vec<Phase>,
    /// Micro-batches of the GPU.
    n: usize,
    offloads: bool,
}

impl<'s, 'a> Program<'s, 'a> {
    fn new(
        routine: &'s Routine<'a>,
        rank: usize,
        sizes: &[u32],
        passes: u32,
        fold_runs: bool,
    ) -> Result<Program<'s, 'a>, PlanError> {
        let n = sizes.len();
        let mut micro = Vec::with_capacity(n);
        let mut distinct: Vec<(u32, Micro)> = Vec::new();
        for &m in sizes {
            let mc = match distinct.iter().find(|x| x.0 == m) {
                Some(x) => x.1,
                None => {
                    let mc = routine.micro(rank, m)?;
                    distinct.push((m, mc));
                    mc
                }
            };
            micro.push(mc);
        }
        let offloads = routine.strategy.offloads_activations(n as u32);
        Ok(Program {
            routine,
            micro,
            walked: Self::walked(sizes, fold_runs && !offloads),
            phases: routine.phases(passes.max(n as u32)),
            n,
            offloads,
        })
    }

    /// The micro-batches a layered phase walks: all of them, or, with
    /// `fold` (no copies: compute back to back, nothing else on the GPU's
    /// timeline), two at each end of every run of equal sizes and the net
    /// memory of the ones between as one change. The level at each instant
    /// of such a run is its first step's plus a whole number of steps' net
    /// change, so it peaks at the run's first or last steps (or the
    /// boundary next to them), which are kept: exact, and O(1) in the run's
    /// length.
    fn walked(sizes: &[u32], fold: bool) -> Vec<(usize, u32)> {
        let n = sizes.len();
        let mut walked: Vec<(usize, u32)> = Vec::with_capacity(n.min(64));
        let mut k = 0;
        while k < n {
            let len = sizes[k..].iter().take_while(|&&m| m == sizes[k]).count();
            if !fold || len <= 4 {
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
        walked
    }

    /// The GPU's steps of phase `p`, in program order, each with the net
    /// memory of the steps folded in before it (bytes); described as the
    /// walk reaches them.
    fn steps(&self, p: usize) -> Vec<(i64, Step)> {
        let Some(ph) = self.phases.get(p) else {
            return vec![];
        };
        let routine = self.routine;
        match ph.pass {
            None => self
                .walked
                .iter()
                .map(|&(k, skipped)| {
                    let st = routine.step(&self.micro[k], ph, k as u32, self.offloads);
                    let net: i64 = st
                        .works()
                        .flat_map(|w| w.mem.as_slice())
                        .filter(|m| !m.host)
                        .map(|m| m.bytes)
                        .fold(0i64, i64::saturating_add);
                    (net.saturating_mul(i64::from(skipped)), st)
                })
                .collect(),
            Some(k) if (k as usize) < self.n => {
                let k = k as usize;
                vec![(0, routine.step(&self.micro[k], ph, k as u32, self.offloads))]
            }
            Some(_) => vec![],
        }
    }
}

/// The walk's clocks and the memory events it records.
#[derive(Default)]
struct Clock {
    /// Activation events (time, delta) on the device and the host.
    dev: Vec<(u64, i64)>,
    host: Vec<(u64, i64)>,
    /// Buffer windows (start, end, bytes), one per phase.
    windows: Vec<(u64, u64, i64)>,
    /// The compute and copy streams' clocks.
    compute: u64,
    copy: u64,
    /// The compute end of the previous step (what a prefetched copy waits
    /// for).
    prev_step_end: u64,
    /// The end of an already issued copy of the next step.
    pending: Option<u64>,
}

impl Clock {
    /// An op's changes at its start, then at its end: compute back to back
    /// keeps the events in time order.
    fn add(v: &mut Vec<(u64, i64)>, t0: u64, t1: u64, m: &Mems, host: bool) {
        for (at, t) in [(MemAt::Start, t0), (MemAt::End, t1)] {
            for x in m.as_slice().iter().filter(|x| x.host == host && x.at == at) {
                v.push((t, x.bytes));
            }
        }
    }

    /// Issues a copy on the copy stream no earlier than `after`; its end.
    fn issue(&mut self, c: &CopyWork, after: u64) -> u64 {
        let start = self.copy.max(after);
        let end = start.saturating_add(c.dur.0);
        Self::add(&mut self.dev, start, end, &c.mem, false);
        Self::add(&mut self.host, start, end, &c.mem, true);
        self.copy = end;
        end
    }

    /// Runs the steps of phase `p` as the lowering does: each step's copy
    /// in (prefetched, or now), then (a backward step of an offloading GPU)
    /// the next step's prefetch, then its compute, then its copy out.
    /// `upcoming` receives the next phase's steps when a prefetch looked
    /// ahead.
    fn run(
        &mut self,
        prog: &Program<'_, '_>,
        p: usize,
        steps: &[(i64, Step)],
        upcoming: &mut Option<Vec<(i64, Step)>>,
    ) {
        let backward_kind = matches!(prog.phases[p].kind, PhaseKind::Head | PhaseKind::Backward);
        for (j, (skipped_bytes, st)) in steps.iter().enumerate() {
            let mut ready = self.compute;
            if *skipped_bytes != 0 {
                self.dev.push((self.compute, *skipped_bytes));
            }
            if let Some(h) = &st.h2d {
                let end = match self.pending.take() {
                    Some(e) => e,
                    None => self.issue(h, 0),
                };
                ready = ready.max(end);
            }
            // (Only offloading steps have copies to prefetch.)
            if backward_kind && prog.offloads {
                let next = match steps.get(j + 1) {
                    Some(x) => Some(&x.1),
                    None => upcoming
                        .get_or_insert_with(|| prog.steps(p + 1))
                        .first()
                        .map(|x| &x.1),
                }
                .and_then(|x| x.h2d.as_ref());
                if let Some(h) = next {
                    let after = self.prev_step_end;
                    self.pending = Some(self.issue(h, after));
                }
            }
            let mut t = ready;
            for w in st.works() {
                let end = t.saturating_add(w.dur.0);
                Self::add(&mut self.dev, t, end, &w.mem, false);
                t = end;
            }
            self.compute = t;
            self.prev_step_end = t;
            if let Some(dc) = &st.d2h {
                self.issue(dc, t);
            }
        }
    }
}

/// The unit buffers live on the GPU during the walk: gathered parameters,
/// unreduced gradients, and gradients whose reduction may still run.
struct Buffers<'u> {
    units: &'u [UnitInfo],
    gathered: Vec<bool>,
    grads: Vec<bool>,
    params_live: i64,
    grads_live: i64,
    /// Gradient buffers reduced after phase q, bytes: (q, bytes).
    reducing: Vec<(usize, i64)>,
}

impl<'u> Buffers<'u> {
    fn new(units: &'u [UnitInfo]) -> Buffers<'u> {
        Buffers {
            units,
            gathered: vec![false; units.len()],
            grads: vec![false; units.len()],
            params_live: 0,
            grads_live: 0,
            reducing: Vec::new(),
        }
    }

    /// Phase `p` (`ph`) starts: its unit gathered, its gradient buffer
    /// allocated (sharded strategies, a GPU with steps in it); the bytes
    /// the phase holds beyond its steps (see the module docs).
    fn enter(
        &mut self,
        p: usize,
        ph: &Phase,
        next: Option<&Phase>,
        computes: bool,
        shards: bool,
    ) -> i64 {
        let units = self.units;
        let u = ph.unit as usize;
        if ph.gather && !self.gathered[u] {
            self.gathered[u] = true;
            self.params_live = self.params_live.saturating_add(units[u].param_bytes);
        }
        if ph.grad_alloc && shards && !self.grads[u] && computes {
            self.grads[u] = true;
            self.grads_live = self.grads_live.saturating_add(units[u].grad_bytes);
        }
        // The next phase's all-gather may run during this phase: a new
        // buffer unless its unit stays gathered (a unit this phase
        // reshards, e.g. the embedding between one pass's backward and the
        // next pass's forward, is gathered again into a fresh buffer).
        let extra_next = next
            .filter(|q| {
                let qu = q.unit as usize;
                q.gather && (!self.gathered[qu] || (qu == u && ph.reshard))
            })
            .map_or(0, |q| units[q.unit as usize].param_bytes);
        // Gradients reduced earlier whose reduce-scatter may still run: a
        // phase that waits for its all-gather knows every reduce-scatter
        // issued before that all-gather's predecessor ended (only the
        // previous phase's may run); a phase that gathers nothing does not
        // wait, so everything reduced since the last gathering phase may
        // still be pending.
        if ph.gather {
            self.reducing.retain(|&(q, _)| q + 1 >= p);
        }
        let reducing_bytes: i64 = self.reducing.iter().map(|x| x.1).sum();
        // The next all-gather starts only after every queued
        // reduce-scatter: it and the pending gradients never coexist.
        self.params_live + self.grads_live + extra_next.max(reducing_bytes)
    }

    /// Phase `p` (`ph`) ends: its gradients reduced, its unit resharded.
    fn leave(&mut self, p: usize, ph: &Phase) {
        let u = ph.unit as usize;
        if ph.reduce && self.grads[u] {
            self.grads[u] = false;
            self.grads_live -= self.units[u].grad_bytes;
            self.reducing.push((p, self.units[u].grad_bytes));
        }
        if ph.reshard && self.gathered[u] {
            self.gathered[u] = false;
            self.params_live -= self.units[u].param_bytes;
        }
    }
}

/// [`rank_peak`] by walking every step of every pass (`fold_runs`: runs
/// of equal micro-batches in a layered phase walked as four steps, exact).
fn walk_peak(
    routine: &Routine<'_>,
    rank: usize,
    sizes: &[u32],
    passes: u32,
    local_params: f64,
    fold_runs: bool,
) -> Result<RankPeak, PlanError> {
    let s = &routine.strategy;
    let base = routine.base_device_bytes(local_params);
    let host_base = (routine.host_state_bytes_per_param() * local_params).round() as i64;
    let units = &routine.units;
    let shards = s.sharding.shards_params();
    if sizes.is_empty() {
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
    let prog = Program::new(routine, rank, sizes, passes, fold_runs)?;
    let mut clock = Clock {
        windows: Vec::with_capacity(prog.phases.len()),
        ..Clock::default()
    };
    let mut buffers = Buffers::new(units);
    // The next phase's steps, when a prefetched copy looked ahead.
    let mut upcoming: Option<Vec<(i64, Step)>> = None;
    for (p, ph) in prog.phases.iter().enumerate() {
        let steps = upcoming.take().unwrap_or_else(|| prog.steps(p));
        let held = buffers.enter(p, ph, prog.phases.get(p + 1), !steps.is_empty(), shards);
        let phase_start = clock.compute;
        clock.run(&prog, p, &steps, &mut upcoming);
        clock
            .windows
            .push((phase_start, clock.compute.max(phase_start + 1), held));
        buffers.leave(p, ph);
    }
    Ok(RankPeak {
        device_bytes: sweep(base, clock.dev, &clock.windows),
        host_bytes: sweep(host_base, clock.host, &[]),
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
    use crate::cost::CostModel;
    use crate::strategy::{Accumulation, Checkpointing, Sharding, StrategySpec};

    /// The analytic cost model of llama-tiny at 256 tokens on `gpus`.
    fn tiny_costs(gpus: &str) -> CostModel {
        crate::cost::tiny_costs(gpus, crate::precision::NumFormat::Fp16, 64)
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
                        let sch = Routine::new(&c, st);
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
                let sch = Routine::new(&c, st);
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
