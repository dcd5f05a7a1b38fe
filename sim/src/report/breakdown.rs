//! The observer that charges every GPU's time to compute, exposed
//! communication, copies, host work and idle (rules in the module docs of
//! [`crate::report`]).

use crate::engine::{Category, Graph, Observer, OpRecord, Stream};
use std::collections::VecDeque;

/// Per-rank accumulators of the time breakdown, in ns.
#[derive(Debug, Clone, Default)]
pub(crate) struct RankTimes {
    pub(crate) compute: u64,
    pub(crate) exposed_comm: u64,
    pub(crate) copy: u64,
    pub(crate) host: u64,
    pub(crate) idle: u64,
    /// forward, recompute, backward, optimizer.
    pub(crate) by_kind: [u64; 4],
    pub(crate) comm_busy: u64,
    pub(crate) copy_busy: u64,
    pub(crate) host_busy: u64,
    pub(crate) interference: u64,
    pub(crate) contention: u64,
    /// Blocking collectives on the compute stream (TP communication):
    /// exposed communication, also counted here.
    pub(crate) tp_comm: u64,
    /// Expert parallelism's exchanges on the compute stream (all-to-all
    /// ops): exposed communication, also counted here (not in `tp_comm`).
    pub(crate) ep_comm: u64,
    pub(crate) finish: u64,
    prev_compute_end: u64,
    /// Pass of the previous compute op (`None`: none yet), and of the
    /// rank's latest-ending op.
    prev_compute_pass: Option<u32>,
    last_pass: Option<u32>,
    comm_iv: VecDeque<(u64, u64)>,
    copy_iv: VecDeque<(u64, u64)>,
    host_iv: VecDeque<(u64, u64)>,
}

/// Busy time of `iv` inside `[a, b)`.
fn overlap(iv: &VecDeque<(u64, u64)>, a: u64, b: u64) -> u64 {
    iv.iter()
        .map(|&(s, e)| e.min(b).saturating_sub(s.max(a)))
        .sum()
}

/// Whether `t` lies inside one of `iv`'s intervals.
fn covered(iv: &VecDeque<(u64, u64)>, t: u64) -> bool {
    iv.iter().any(|&(s, e)| s <= t && t < e)
}

/// Observer computing the per-GPU time breakdown (see the module docs).
#[derive(Debug)]
pub(crate) struct Breakdown<'g> {
    graph: &'g Graph,
    start_ns: Vec<u64>,
    end_ns: Vec<u64>,
    pub(crate) ranks: Vec<RankTimes>,
    /// Actual duration of every collective op (ns), by op.
    pub(crate) collective_ns: rustc_hash::FxHashMap<u32, u64>,
    /// The folded blocks of a reduced run ([`crate::fold::Unfold::blocks`])
    /// and, per block and rank, when the rank's first op of the block
    /// starts (ns; `None`: the rank has none): the window `[start, start +
    /// delta)` holds one period of its timeline.
    pub(crate) blocks: Vec<(crate::fold::Block, Vec<Option<u64>>)>,
}

impl<'g> Breakdown<'g> {
    pub(crate) fn new(graph: &'g Graph, ranks: usize) -> Breakdown<'g> {
        Breakdown {
            graph,
            start_ns: vec![0; graph.len()],
            end_ns: vec![0; graph.len()],
            ranks: vec![RankTimes::default(); ranks],
            collective_ns: rustc_hash::FxHashMap::default(),
            blocks: Vec::new(),
        }
    }

    /// Closes every rank's timeline at the iteration end (`makespan_ns`):
    /// the tail after its last compute op, by priority host, copy,
    /// communication, idle; then the barrier.
    pub(crate) fn finish(&mut self, makespan_ns: u64) {
        for (r_index, r) in self.ranks.iter_mut().enumerate() {
            let (a, f) = (r.prev_compute_end, r.finish.max(r.prev_compute_end));
            if f > a {
                let mut t = tail(r, a, f);
                let rank = r_index;
                for (b, starts) in &self.blocks {
                    if spans(b, r.prev_compute_pass, r.last_pass) {
                        let x = starts[rank].map_or([0, 0, 0, b.delta_ns], |w0| {
                            tail(r, w0, w0.saturating_add(b.delta_ns))
                        });
                        for (t, x) in t.iter_mut().zip(x) {
                            *t = t.saturating_add(x.saturating_mul(b.copies));
                        }
                    }
                }
                r.host += t[0];
                r.copy += t[1];
                r.exposed_comm += t[2];
                r.idle += t[3];
            }
            r.idle += makespan_ns.saturating_sub(f);
            r.prev_compute_end = makespan_ns;
        }
    }
}

/// Whether a rank's wait from an op of pass `from` to one of pass `to`
/// (`None`: the iteration's start) spans the folded block `b`.
fn spans(b: &crate::fold::Block, from: Option<u32>, to: Option<u32>) -> bool {
    from.is_none_or(|p| p < b.passes.start) && to.is_some_and(|p| p >= b.passes.end)
}

/// The span `[a, f)` of a rank's timeline after its last compute op, ns:
/// `[host, copy, communication, idle]` by that priority.
fn tail(r: &RankTimes, a: u64, f: u64) -> [u64; 4] {
    let mut out = [0u64; 4];
    // Sweep the breakpoints of the tail's intervals.
    let mut points: Vec<u64> = vec![a, f];
    for iv in [&r.host_iv, &r.copy_iv, &r.comm_iv] {
        for &(s, e) in iv {
            points.extend([s.clamp(a, f), e.clamp(a, f)]);
        }
    }
    points.sort_unstable();
    points.dedup();
    for w in points.windows(2) {
        let (x, y) = (w[0], w[1]);
        let d = y - x;
        let k = if covered(&r.host_iv, x) {
            0
        } else if covered(&r.copy_iv, x) {
            1
        } else if covered(&r.comm_iv, x) {
            2
        } else {
            3
        };
        out[k] += d;
    }
    out
}

impl Observer for Breakdown<'_> {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        self.on_op_weighted(rec, 1);
    }
}

impl Breakdown<'_> {
    /// Adds `rec` as `weight` executions of the op (a folded period's op
    /// stands for its copies, [`crate::fold`]): every time it adds counts
    /// `weight` times; its timeline (stall attribution, the rank's finish)
    /// is the reduced run's.
    pub(crate) fn on_op_weighted(&mut self, rec: &OpRecord<'_>, weight: u64) {
        let w = weight;
        let (s, e) = (rec.start.0, rec.end.0);
        self.end_ns[rec.op.0 as usize] = e;
        self.start_ns[rec.op.0 as usize] = s;
        if rec.label.category.is_collective() {
            self.collective_ns.entry(rec.op.0).or_insert(e - s);
        }
        let Some(r) = self.ranks.get_mut(rec.rank as usize) else {
            return;
        };
        if e >= r.finish {
            r.finish = e;
            r.last_pass = Some(rec.label.micro);
        }
        let stretch = (e - s).saturating_sub(rec.nominal.0);
        if rec.stream == Stream::Compute {
            r.interference += stretch.saturating_mul(w);
        } else {
            r.contention += stretch.saturating_mul(w);
        }
        match rec.stream {
            Stream::Comm | Stream::Reduce => busy_stream(&mut r.comm_busy, &mut r.comm_iv, s, e, w),
            Stream::Copy => busy_stream(&mut r.copy_busy, &mut r.copy_iv, s, e, w),
            Stream::Host => busy_stream(&mut r.host_busy, &mut r.host_iv, s, e, w),
            Stream::Compute => self.on_compute(rec, w),
        }
    }

    /// Adds compute op `rec` (`w` times): the compute stream's gap before
    /// it charged to what it waited for, then its busy time by kind.
    fn on_compute(&mut self, rec: &OpRecord<'_>, w: u64) {
        let (s, e) = (rec.start.0, rec.end.0);
        let a = self.ranks[rec.rank as usize].prev_compute_end;
        let wait = (s > a).then(|| self.gap_wait(rec, a, s));
        let r = &mut self.ranks[rec.rank as usize];
        if let Some(g) = wait {
            if g.is_comm {
                r.exposed_comm += g.busy.saturating_mul(w);
            } else {
                r.copy += g.busy.saturating_mul(w);
            }
            r.idle += (g.gap - g.busy).saturating_mul(w);
        }
        let d = e - s;
        if rec.label.category.is_collective() {
            // A collective the compute stream waits in (TP's per-layer
            // collectives): exposed communication, not compute.
            r.exposed_comm += d.saturating_mul(w);
            if rec.label.category == Category::AllToAll {
                r.ep_comm += d.saturating_mul(w);
            } else {
                r.tp_comm += d.saturating_mul(w);
            }
            r.prev_compute_end = e;
            return;
        }
        r.compute += d.saturating_mul(w);
        let k = match rec.label.category {
            Category::Forward => 0,
            Category::Recompute => 1,
            Category::Backward => 2,
            _ => 3,
        };
        r.by_kind[k] += d.saturating_mul(w);
        r.prev_compute_end = e;
        r.prev_compute_pass = Some(rec.label.micro);
        // Intervals ending before this op starts cannot overlap later gaps.
        for iv in [&mut r.comm_iv, &mut r.copy_iv, &mut r.host_iv] {
            while iv.front().is_some_and(|&(_, x)| x <= s) {
                iv.pop_front();
            }
        }
    }

    /// How the compute stream's gap `[a, s)` before compute op `rec` splits
    /// (once; the caller weighs it): the busy time of what it waited for,
    /// the gap, both grown by the folded blocks it spans (a wait through a
    /// folded block waits through its copies too).
    fn gap_wait(&self, rec: &OpRecord<'_>, a: u64, s: u64) -> GapWait {
        let r = &self.ranks[rec.rank as usize];
        let kind = self.last_dependency(rec);
        let busy_in = |x: u64, y: u64| self.busy_in(r, kind, x, y);
        let gap = s - a;
        let (busy, is_comm) = busy_in(a, s);
        let mut busy = busy.min(gap);
        let mut gap = gap;
        for (b, starts) in &self.blocks {
            if spans(b, r.prev_compute_pass, Some(rec.label.micro)) {
                let len = b.delta_ns;
                let x = starts[rec.rank as usize]
                    .map_or(0, |w0| busy_in(w0, w0.saturating_add(len)).0.min(len));
                busy = busy.saturating_add(x.saturating_mul(b.copies));
                gap = gap.saturating_add(len.saturating_mul(b.copies));
            }
        }
        GapWait { busy, gap, is_comm }
    }

    /// The category and index of `rec`'s dependency that finished last
    /// (the first of those that tie); `None` without dependencies.
    fn last_dependency(&self, rec: &OpRecord<'_>) -> Option<(Category, usize)> {
        let mut last: Option<(u64, Category, usize)> = None;
        for d in self.graph.op_deps(rec.op) {
            let de = self.end_ns[d.0 as usize];
            if last.is_none_or(|(t, _, _)| de > t) {
                last = Some((de, self.graph.op_label(d).category, d.0 as usize));
            }
        }
        last.map(|x| (x.1, x.2))
    }

    /// Busy time inside `[x, y)` of what a gap of rank `r` waited for (its
    /// last dependency `kind`), and whether that is communication: a
    /// collective's communication streams, a pipeline transfer from another
    /// GPU (waiting while it runs is exposed communication, before it
    /// idle), the copy stream for a host copy, nothing otherwise.
    fn busy_in(
        &self,
        r: &RankTimes,
        kind: Option<(Category, usize)>,
        x: u64,
        y: u64,
    ) -> (u64, bool) {
        match kind {
            Some((c, _)) if c.is_collective() => (overlap(&r.comm_iv, x, y), true),
            Some((Category::P2p, d)) => {
                let (ds, de) = (self.start_ns[d].max(x), self.end_ns[d].min(y));
                (de.saturating_sub(ds), true)
            }
            Some((Category::CopyD2H | Category::CopyH2D, _)) => (overlap(&r.copy_iv, x, y), false),
            _ => (0, false),
        }
    }
}

/// How one wait of the compute stream splits, ns (unweighted).
struct GapWait {
    /// Part of the wait during which what it waited for was busy.
    busy: u64,
    /// The whole wait.
    gap: u64,
    /// What it waited for is communication (else a host copy or nothing).
    is_comm: bool,
}

/// Adds an op of `[s, e)` on a communication, copy or host stream, `w`
/// times, to the stream's busy time, and its interval (when not empty) to
/// the stream's intervals.
fn busy_stream(busy: &mut u64, iv: &mut VecDeque<(u64, u64)>, s: u64, e: u64, w: u64) {
    *busy += (e - s).saturating_mul(w);
    if e > s {
        iv.push_back((s, e));
    }
}
