//! The run: dependency and stream bookkeeping, starting ops when they are
//! ready, ending them in `(time, seq)` order, reporting them to the
//! observer, and explaining a deadlock.

use super::graph::{slot_rank, slot_stream, Graph, ShareIndex, NONE};
use super::observe::{Observer, OpRecord, RunStats};
use super::ops::{MemAt, OpId, Stream, NO_INDEX};
use super::pace::Dynamic;
use super::queue::EventQueue;
use crate::error::SimError;
use crate::units::SimTime;

/// Compressed adjacency: `items[off[i]..off[i + 1]]` belong to `i`.
struct Csr {
    off: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    /// Groups `pairs` (key, item) by key with a stable counting sort.
    fn build(keys: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Csr {
        let mut off = vec![0u32; keys + 1];
        for (k, _) in pairs.clone() {
            off[k as usize + 1] += 1;
        }
        for i in 0..keys {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut items = vec![0u32; off[keys] as usize];
        for (k, v) in pairs {
            let at = &mut fill[k as usize];
            items[*at as usize] = v;
            *at += 1;
        }
        Csr { off, items }
    }

    fn get(&self, k: usize) -> &[u32] {
        &self.items[self.off[k] as usize..self.off[k + 1] as usize]
    }
}

/// Runs `graph` to completion, pushing every op start and memory change to
/// `observer`; returns the makespan and event counts, or an error if some
/// ops can never run.
pub fn run(graph: &Graph, observer: &mut dyn Observer) -> Result<RunStats, SimError> {
    let n = graph.ops.len();
    let slots = graph.ranks as usize * Stream::COUNT;
    let (mut pending, succ) = dependencies(graph)?;

    // Participants (op -> slots) and, per participant, the next op issued on
    // that slot, so a finished op hands its streams on without a queue lookup.
    let parts = Participants::build(n, slots, &graph.issues);
    count_issues(&parts, &mut pending, slots)?;

    let shares = graph.share_index();
    let mut state = RunState::new(graph, observer, &parts, &succ, pending, slots, &shares);
    state.start_streams();
    let (finished, events) = state.drain();

    if let Some(op) = state.queue.overflow {
        return Err(SimError::TimeOverflow {
            op,
            name: graph.name(graph.ops[op as usize].label.name).to_string(),
        });
    }
    if finished < n {
        return Err(deadlock(graph, &state.pending, &parts, n - finished));
    }
    Ok(RunStats {
        makespan: SimTime(state.makespan),
        ops: finished as u64,
        events: finished as u64 + events + state.dynamic.rescheduled,
    })
}

/// Dependency edges (dep -> op), validated: per op, how many dependencies
/// it waits for, and per op, the ops waiting for it.
fn dependencies(graph: &Graph) -> Result<(Vec<u32>, Csr), SimError> {
    let n = graph.ops.len();
    let mut pending = vec![0u32; n];
    for (i, p) in pending.iter_mut().enumerate() {
        let range = graph.dep_range(i);
        *p = range.len() as u32;
        if let Some(&d) = graph.deps[range].iter().find(|&&d| d as usize >= n) {
            return Err(SimError::UnknownOp {
                op: i as u32,
                dep: d,
            });
        }
    }
    for &(op, dep) in &graph.extra_deps {
        if dep as usize >= n || op as usize >= n {
            return Err(SimError::UnknownOp { op, dep });
        }
        pending[op as usize] += 1;
    }
    let dep_pairs = (0..n).flat_map(|i| {
        graph.deps[graph.dep_range(i)]
            .iter()
            .map(move |&d| (d, i as u32))
    });
    let succ = if graph.extra_deps.is_empty() {
        Csr::build(n, dep_pairs)
    } else {
        Csr::build(
            n,
            dep_pairs.chain(graph.extra_deps.iter().map(|&(op, dep)| (dep, op))),
        )
    };
    Ok((pending, succ))
}

/// Adds to every op's `pending` count the streams it waits for (one per
/// participant); an op issued twice on one stream is an error.
fn count_issues(parts: &Participants, pending: &mut [u32], slots: usize) -> Result<(), SimError> {
    let mut stamp = vec![NONE; slots];
    for (i, p) in pending.iter_mut().enumerate() {
        let (ps, _) = parts.get(i);
        *p += ps.len() as u32;
        for &s in ps {
            if stamp[s as usize] == i as u32 {
                return Err(SimError::DoubleIssue {
                    op: i as u32,
                    rank: slot_rank(s),
                    stream: slot_stream(s).name(),
                });
            }
            stamp[s as usize] = i as u32;
        }
    }
    Ok(())
}

/// Op -> participant slots, with the next op issued on each slot.
struct Participants {
    off: Vec<u32>,
    slot: Vec<u32>,
    /// For the participant at the same index: next op on its slot, or `NONE`.
    next: Vec<u32>,
    /// Per slot: first op issued on it, or `NONE`.
    first: Vec<u32>,
}

impl Participants {
    fn build(n: usize, slots: usize, issues: &[(u32, u32)]) -> Participants {
        let mut off = vec![0u32; n + 1];
        for &(_, op) in issues {
            off[op as usize + 1] += 1;
        }
        for i in 0..n {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut slot = vec![0u32; issues.len()];
        let mut next = vec![NONE; issues.len()];
        let mut first = vec![NONE; slots];
        let mut last_at = vec![NONE; slots];
        for &(s, op) in issues {
            let at = fill[op as usize];
            fill[op as usize] += 1;
            slot[at as usize] = s;
            match last_at[s as usize] {
                NONE => first[s as usize] = op,
                prev => next[prev as usize] = op,
            }
            last_at[s as usize] = at;
        }
        Participants {
            off,
            slot,
            next,
            first,
        }
    }

    fn get(&self, op: usize) -> (&[u32], &[u32]) {
        let r = self.off[op] as usize..self.off[op + 1] as usize;
        (&self.slot[r.clone()], &self.next[r])
    }
}

/// Mutable state of a run shared by the start and end paths.
struct RunState<'g, 'o> {
    graph: &'g Graph,
    observer: &'o mut dyn Observer,
    /// Pending ends.
    queue: EventQueue,
    makespan: u64,
    parts: &'g Participants,
    /// Per op: the ops waiting for its completion.
    succ: &'g Csr,
    /// Per op: its link shares.
    shares: &'g ShareIndex<'g>,
    /// Per op: dependencies and streams it still waits for.
    pending: Vec<u32>,
    /// Start time of the op running on each slot (its first participant's).
    start_ns: Vec<u64>,
    dynamic: Dynamic,
}

impl<'g, 'o> RunState<'g, 'o> {
    /// Nothing started yet: `pending` holds every op's dependencies and
    /// streams, `slots` is the number of stream slots, `shares` the ops'
    /// link shares.
    fn new(
        graph: &'g Graph,
        observer: &'o mut dyn Observer,
        parts: &'g Participants,
        succ: &'g Csr,
        pending: Vec<u32>,
        slots: usize,
        shares: &'g ShareIndex<'g>,
    ) -> RunState<'g, 'o> {
        let resources = graph
            .shares
            .iter()
            .map(|s| s.0 as usize + 1)
            .max()
            .unwrap_or(0);
        RunState {
            graph,
            observer,
            queue: EventQueue::with_capacity(slots.max(16)),
            makespan: 0,
            parts,
            succ,
            shares,
            pending,
            start_ns: vec![0; slots],
            dynamic: Dynamic::new(graph.interference, slots, resources, graph.ranks as usize),
        }
    }
}

impl RunState<'_, '_> {
    /// Time zero: every stream hands its token to its first op; those with
    /// nothing else to wait for start.
    fn start_streams(&mut self) {
        let mut ready: Vec<u32> = Vec::new();
        for &op in &self.parts.first {
            if op != NONE {
                let p = &mut self.pending[op as usize];
                *p -= 1;
                if *p == 0 {
                    ready.push(op);
                }
            }
        }
        for op in ready {
            self.start(op, 0);
        }
    }

    /// Pops ends until the queue drains; returns the ops finished and the
    /// end events processed.
    fn drain(&mut self) -> (usize, u64) {
        let mut finished = 0usize;
        let mut events = 0u64;
        while let Some((now, seq, op)) = self.queue.pop() {
            if !self.ends(op, seq, now) {
                continue;
            }
            events += 1;
            finished += 1;
            let o = op as usize;
            for m in self
                .graph
                .op_mems(OpId(op))
                .iter()
                .filter(|m| m.at == MemAt::End)
            {
                self.observer
                    .on_mem(m.pool, SimTime(now), m.delta_bytes, m.kind, OpId(op));
            }
            let succ = self.succ;
            for &s in succ.get(o) {
                self.satisfy(s, now);
            }
            let (_, next) = self.parts.get(o);
            for &nx in next {
                if nx != NONE {
                    self.satisfy(nx, now);
                }
            }
        }
        (finished, events)
    }

    /// One thing `op` waited for is done at `now`; starts it if it was the
    /// last.
    fn satisfy(&mut self, op: u32, now: u64) {
        let p = &mut self.pending[op as usize];
        *p -= 1;
        if *p == 0 {
            self.start(op, now);
        }
    }

    /// Whether `op` (first participant slot `first`) occupies a
    /// communication stream for some time: what slows compute beside it.
    fn counts_as_comm(&self, op: u32, first: u32) -> bool {
        first != NONE
            && matches!(slot_stream(first), Stream::Comm | Stream::Reduce)
            && self.graph.ops[op as usize].duration_ns > 0
    }

    /// Whether `op` is a compute op slowed by interference.
    fn interferes(&self, op: u32) -> bool {
        self.dynamic.interference > 0.0 && {
            let (p, _) = self.parts.get(op as usize);
            p.len() == 1 && slot_stream(p[0]) == Stream::Compute
        }
    }

    /// Starts `op` at `now`: schedules its end (or, for an op whose pace
    /// may change, registers it on its links and re-paces its neighbours).
    #[inline]
    fn start(&mut self, op: u32, now: u64) {
        let g = self.graph;
        let data = &g.ops[op as usize];
        let (p, _) = self.parts.get(op as usize);
        let first = p.first().copied().unwrap_or(NONE);
        if first != NONE {
            self.start_ns[first as usize] = now;
        }
        for m in g.op_mems(OpId(op)).iter().filter(|m| m.at == MemAt::Start) {
            self.observer
                .on_mem(m.pool, SimTime(now), m.delta_bytes, m.kind, OpId(op));
        }
        let shares = self.shares.of(op);
        let comm = self.counts_as_comm(op, first);
        let interferes = self.interferes(op);
        if first == NONE || (shares.is_empty() && !interferes) {
            let end = self.queue.end_at(op, now, data.duration_ns);
            self.makespan = self.makespan.max(end);
            self.queue.push(op, end);
        } else {
            self.dynamic
                .begin(op, first, data.duration_ns, shares, interferes, now);
        }
        if comm && self.dynamic.interference > 0.0 {
            self.dynamic.comm_started(p);
        }
        self.dynamic.repace(now, self.shares, &mut self.queue);
    }

    /// Handles a popped end of `op` (key seq `seq`) at `now`: false for a
    /// stale entry (the op was rescheduled); else releases the op's links,
    /// re-paces its neighbours and reports it to the observer.
    fn ends(&mut self, op: u32, seq: u32, now: u64) -> bool {
        let g = self.graph;
        let (p, _) = self.parts.get(op as usize);
        let first = p.first().copied().unwrap_or(NONE);
        let shares = self.shares.of(op);
        let dynamic = first != NONE && (!shares.is_empty() || self.interferes(op));
        if dynamic && !self.dynamic.end(op, seq, first, shares) {
            return false;
        }
        let data = &g.ops[op as usize];
        if self.counts_as_comm(op, first) && self.dynamic.interference > 0.0 {
            self.dynamic.comm_ended(p);
        }
        self.dynamic.repace(now, self.shares, &mut self.queue);
        self.makespan = self.makespan.max(now);
        let start = if first != NONE {
            self.start_ns[first as usize]
        } else {
            now
        };
        let name = g.name(data.label.name);
        for &s in p {
            self.observer.on_op(&OpRecord {
                op: OpId(op),
                rank: slot_rank(s),
                stream: slot_stream(s),
                label: data.label,
                name,
                start: SimTime(start),
                end: SimTime(now),
                nominal: SimTime(data.duration_ns),
                participants: p.len() as u32,
            });
        }
        true
    }
}

/// Describes the first few ops that never ran and what each waits for.
fn deadlock(graph: &Graph, pending: &[u32], parts: &Participants, stuck: usize) -> SimError {
    // Every op with participants and nothing pending has started and ended.
    let done = |i: usize| pending[i] == 0 && !parts.get(i).0.is_empty();
    // Head of each slot: its first op that did not run.
    let mut head = vec![NONE; parts.first.len()];
    for (s, h) in head.iter_mut().enumerate() {
        let mut op = parts.first[s];
        while op != NONE && done(op as usize) {
            let (ps, next) = parts.get(op as usize);
            op = ps
                .iter()
                .position(|&x| x as usize == s)
                .map_or(NONE, |k| next[k]);
        }
        *h = op;
    }
    let mut lines = Vec::new();
    for i in (0..pending.len()).filter(|&i| !done(i)) {
        let label = graph.ops[i].label;
        let (slots, _) = parts.get(i);
        let mut waits = Vec::new();
        if slots.is_empty() {
            waits.push("issued on no stream".to_string());
        }
        for &s in slots {
            if head[s as usize] != i as u32 {
                waits.push(format!(
                    "rank {} {} busy",
                    slot_rank(s),
                    slot_stream(s).name()
                ));
            }
        }
        lines.push(format!(
            "op {i} `{}` ({}, unit {}, micro {}): {} unmet, {}",
            graph.name(label.name),
            label.category.name(),
            fmt_index(label.unit),
            fmt_index(label.micro),
            pending[i],
            if waits.is_empty() {
                "waits for dependencies".to_string()
            } else {
                waits.join(", ")
            }
        ));
        if lines.len() == 3 {
            break;
        }
    }
    SimError::Deadlock {
        stuck,
        total: graph.ops.len(),
        first: lines.join("; "),
    }
}

fn fmt_index(i: u32) -> String {
    if i == NO_INDEX {
        "-".to_string()
    } else {
        i.to_string()
    }
}
