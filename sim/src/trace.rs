//! Chrome / Perfetto trace of a simulated iteration.
//!
//! [`TraceRecorder`] is an engine [`Observer`] that keeps every op execution
//! and every memory change; [`Trace::to_json`] writes the Chrome Trace Event
//! format (the JSON object form), which `chrome://tracing` and
//! <https://ui.perfetto.dev> open directly.
//!
//! Layout of the file:
//!
//! * one **process** per GPU (`pid` = rank), named `rank 0: l4` and sorted by rank,
//!   then one per node's host (`host: node0`, memory counter only);
//! * five **threads** per GPU process (`tid` 0 = `compute`, 1 = `comm`,
//!   2 = `reduce`, 3 = `copy`, 4 = `host`), one per engine [`Stream`];
//! * one complete event (`"ph": "X"`) per op per stream: `name` the op name
//!   and its layer (`fwd block 3`, `all_gather embedding`, `bwd head`,
//!   `optimizer`), `cat` its [`Category`] name, `ts` / `dur` in
//!   **microseconds** (exact: written from integer nanoseconds with three
//!   decimals), `args.unit` (FSDP unit: 0 = embedding, 1..=L blocks, L+1
//!   head) and `args.micro` (micro-batch, from 0) where they apply;
//!   collectives add `args.ranks`, `args.bytes` (NCCL's buffer size) and
//!   `args.algbw_gbps` (bytes / duration, GB/s);
//! * on each GPU's `compute` thread, enclosing slices (`cat` `nest`) so the
//!   timeline reads **iteration > phase > micro-batch > op**: one
//!   `iteration` slice, then a phase per run of ops of one direction and
//!   one layer (layered accumulation: `forward block 3` over all
//!   micro-batches) or one micro-batch (micro-batch-major and pipelines:
//!   `backward micro-batch 2`), then the ops of one micro-batch inside a
//!   layered phase (`micro-batch 2`: its recompute and backward) or of one
//!   layer inside a micro-batch phase (`block 3`);
//! * **flow arrows** (`"ph": "s"/"t"/"f"`, `cat` `collective`) chaining the
//!   slices of one collective across its ranks, in rank order;
//! * one counter track per memory pool (`"ph": "C"`, name `memory`,
//!   `args.GiB`): each GPU's and each host's total simulated memory after
//!   each change.
//!
//! The output is deterministic: events are written in the engine's (time,
//! sequence) order, numbers with fixed formatting.

use crate::engine::{Category, MemKind, Observer, OpId, OpRecord, Stream, NO_INDEX};
use crate::units::{SimTime, GIB};
use std::fmt::Write as _;

/// One op execution on one `(rank, stream)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// Rank (GPU).
    pub rank: u32,
    /// Stream.
    pub stream: Stream,
    /// Category.
    pub category: Category,
    /// Index into [`Trace::names`].
    pub name: u32,
    /// FSDP unit, or [`NO_INDEX`].
    pub unit: u32,
    /// Micro-batch, or [`NO_INDEX`].
    pub micro: u32,
    /// Participants (1 for a local op).
    pub participants: u32,
    /// The engine op (the same on every rank of a collective).
    pub op: u32,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
}

/// One sample of a GPU's memory counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemSample {
    /// Rank (GPU).
    pub rank: u32,
    /// Time, ns.
    pub time_ns: u64,
    /// Total memory after the change, bytes.
    pub bytes: i64,
}

/// A recorded trace, ready to be written with [`Trace::to_json`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Process names: GPUs in rank order (`rank 0: l4`), then hosts.
    pub processes: Vec<String>,
    /// How many of `processes` are GPUs (the rest have memory only).
    pub gpu_processes: usize,
    /// Op names, indexed by [`TraceEvent::name`].
    pub names: Vec<String>,
    /// Op executions in engine order.
    pub events: Vec<TraceEvent>,
    /// Memory samples in engine order.
    pub memory: Vec<MemSample>,
    /// Transformer blocks (names unit L+1 the head); 0 names units by number.
    pub layers: u32,
    /// Layer-major (Cephalo's layered accumulation): phases are per layer,
    /// else per micro-batch.
    pub layer_major: bool,
    /// Buffer bytes of each collective, by engine op.
    pub op_bytes: std::collections::BTreeMap<u32, f64>,
}

/// Observer that records a [`Trace`].
#[derive(Debug, Clone)]
pub struct TraceRecorder {
    trace: Trace,
    /// Per rank: end of its latest compute op (ns), to mark idle gaps.
    compute_end: Vec<u64>,
    current: Vec<i64>,
    /// Per rank: index in `trace.memory` of its latest sample.
    last: Vec<usize>,
}

impl TraceRecorder {
    /// A recorder for processes named `processes` (the first `gpus` are
    /// GPUs in rank order, the rest hosts) whose memory pools start at
    /// `base_bytes` (one entry per process, pool = pid).
    pub fn new(processes: Vec<String>, gpus: usize, base_bytes: Vec<i64>) -> TraceRecorder {
        let mut trace = Trace {
            processes,
            gpu_processes: gpus,
            ..Trace::default()
        };
        for (r, &b) in base_bytes.iter().enumerate() {
            trace.memory.push(MemSample {
                rank: r as u32,
                time_ns: 0,
                bytes: b,
            });
        }
        TraceRecorder {
            trace,
            compute_end: vec![0; gpus],
            last: (0..base_bytes.len()).collect(),
            current: base_bytes,
        }
    }

    /// The recorded trace.
    pub fn finish(self) -> Trace {
        self.trace
    }
}

impl Observer for TraceRecorder {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        // A gap on the compute stream (waiting for data, a collective, a
        // pipeline bubble) shows as an `idle` slice. Compute ops of a rank
        // end in issue order, so each arrives after the one before it.
        if rec.stream == Stream::Compute {
            let r = rec.rank as usize;
            if r >= self.compute_end.len() {
                self.compute_end.resize(r + 1, 0);
            }
            let prev = self.compute_end[r];
            if rec.start.0 > prev {
                self.trace.events.push(TraceEvent {
                    rank: rec.rank,
                    stream: Stream::Compute,
                    category: Category::Other,
                    name: IDLE_NAME,
                    unit: NO_INDEX,
                    micro: NO_INDEX,
                    participants: 1,
                    op: u32::MAX,
                    start_ns: prev,
                    end_ns: rec.start.0,
                });
            }
            self.compute_end[r] = self.compute_end[r].max(rec.end.0);
        }
        let id = rec.label.name.0 as usize;
        if self.trace.names.len() <= id {
            self.trace.names.resize(id + 1, String::new());
        }
        if self.trace.names[id].is_empty() {
            self.trace.names[id] = rec.name.to_string();
        }
        self.trace.events.push(TraceEvent {
            rank: rec.rank,
            stream: rec.stream,
            category: rec.label.category,
            name: id as u32,
            unit: rec.label.unit,
            micro: rec.label.micro,
            participants: rec.participants,
            op: rec.op.0,
            start_ns: rec.start.0,
            end_ns: rec.end.0,
        });
    }

    fn on_mem(&mut self, rank: u32, time: SimTime, delta_bytes: i64, _kind: MemKind, _op: OpId) {
        let r = rank as usize;
        if r >= self.current.len() {
            self.current.resize(r + 1, 0);
            self.last.resize(r + 1, usize::MAX);
        }
        self.current[r] += delta_bytes;
        let bytes = self.current[r];
        // Several changes at one instant collapse into one sample.
        if let Some(s) = self.trace.memory.get_mut(self.last[r]) {
            if s.time_ns == time.0 {
                s.bytes = bytes;
                return;
            }
        }
        self.last[r] = self.trace.memory.len();
        self.trace.memory.push(MemSample {
            rank,
            time_ns: time.0,
            bytes,
        });
    }
}

/// Name id of the `idle` slices (no op has it: op names are interned densely from 0).
const IDLE_NAME: u32 = u32::MAX;

/// Writes integer nanoseconds as microseconds with three decimals.
fn write_us(out: &mut String, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".to_string())
}

/// What a compute op does, for the phase slices.
fn direction(c: Category) -> &'static str {
    match c {
        Category::Forward => "forward",
        Category::Recompute | Category::Backward => "backward",
        Category::Optimizer => "optimizer",
        _ => "other",
    }
}

impl Trace {
    /// The layer unit `u` is: `embedding`, `block k`, `head`.
    fn layer(&self, unit: u32) -> String {
        match unit {
            0 if self.layers > 0 => "embedding".into(),
            u if self.layers > 0 && u == self.layers + 1 => "head".into(),
            u if self.layers > 0 => format!("block {u}"),
            u => format!("unit {u}"),
        }
    }

    /// The compute ops of every GPU rank (idle slices left out), in engine
    /// order, from one pass over the events.
    fn compute_ops(&self) -> Vec<Vec<&TraceEvent>> {
        let mut by_rank: Vec<Vec<&TraceEvent>> = vec![Vec::new(); self.gpu_processes];
        for e in &self.events {
            if e.stream == Stream::Compute && e.name != IDLE_NAME {
                if let Some(v) = by_rank.get_mut(e.rank as usize) {
                    v.push(e);
                }
            }
        }
        by_rank
    }

    /// The enclosing slices of one rank's compute thread, given its compute
    /// ops in order: `(name, start_ns, end_ns)`, outermost first.
    fn nesting(&self, ops: &[&TraceEvent]) -> Vec<(String, u64, u64)> {
        let Some(last) = ops.iter().map(|e| e.end_ns).max() else {
            return Vec::new();
        };
        let mut out = vec![("iteration".to_string(), 0, last)];
        // Runs of consecutive ops with an equal key, as (first, last) indices.
        let runs = |from: usize, to: usize, key: &dyn Fn(&TraceEvent) -> (u32, &'static str)| {
            let mut v = Vec::new();
            let mut i = from;
            while i < to {
                let mut j = i + 1;
                while j < to && key(ops[j]) == key(ops[i]) {
                    j += 1;
                }
                v.push((i, j));
                i = j;
            }
            v
        };
        // Layered: a phase is one layer's run (its forwards, or its
        // backwards; the head's forward and backward alternate per
        // micro-batch and form one phase), micro-batches inside. Otherwise
        // a phase is one micro-batch's forward or backward, layers inside.
        let unit_key = |e: &TraceEvent| (e.unit, "");
        let micro_key = |e: &TraceEvent| (e.micro, "");
        let micro_dir_key = |e: &TraceEvent| (e.micro, direction(e.category));
        type Key<'k> = &'k dyn Fn(&TraceEvent) -> (u32, &'static str);
        let (outer, inner): (Key<'_>, Key<'_>) = if self.layer_major {
            (&unit_key, &micro_key)
        } else {
            (&micro_dir_key, &unit_key)
        };
        for (i, j) in runs(0, ops.len(), outer) {
            let e = ops[i];
            let mut dirs: Vec<&str> = Vec::new();
            for o in &ops[i..j] {
                if !dirs.contains(&direction(o.category)) {
                    dirs.push(direction(o.category));
                }
            }
            let what = match (self.layer_major, e.unit, e.micro) {
                (true, u, _) if u != NO_INDEX => format!(" {}", self.layer(u)),
                (false, _, m) if m != NO_INDEX => format!(" micro-batch {m}"),
                _ => String::new(),
            };
            out.push((
                format!("{}{what}", dirs.join("+")),
                e.start_ns,
                ops[j - 1].end_ns,
            ));
            for (a, b) in runs(i, j, inner) {
                if b - a < 2 {
                    continue;
                }
                let f = ops[a];
                let name = if self.layer_major {
                    format!("micro-batch {}", f.micro)
                } else {
                    self.layer(f.unit)
                };
                out.push((name, f.start_ns, ops[b - 1].end_ns));
            }
        }
        out
    }

    /// Number of op records.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The trace as Chrome Trace Event JSON (object form, one event per
    /// line), see the module docs for the layout.
    pub fn to_json(&self) -> String {
        let mut w = EventWriter {
            out: String::with_capacity(64 + 160 * (self.events.len() + self.memory.len())),
            first: true,
        };
        w.out
            .push_str("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        self.write_tracks(&mut w);
        self.write_nesting(&mut w);
        // Each collective's slices, by op, for the flow arrows.
        let mut flows: std::collections::BTreeMap<u32, Vec<&TraceEvent>> = Default::default();
        for e in &self.events {
            self.write_op(&mut w, e);
            if e.participants > 1 {
                flows.entry(e.op).or_default().push(e);
            }
        }
        self.write_flows(&mut w, flows);
        self.write_memory(&mut w);
        let mut out = w.out;
        out.push_str("\n]}\n");
        out
    }

    /// The metadata events: a named, sorted process per GPU and host, a
    /// named, sorted thread per stream of each GPU.
    fn write_tracks(&self, w: &mut EventWriter) {
        for (pid, name) in self.processes.iter().enumerate() {
            let _ = write!(
                w.next(),
                "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
                json_str(name)
            );
            let _ = write!(
                w.next(),
                "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{pid}}}}}"
            );
            let streams: &[Stream] = if pid < self.gpu_processes {
                &Stream::ALL
            } else {
                &[]
            };
            for &s in streams {
                let _ = write!(
                    w.next(),
                    "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"{}\"}}}}",
                    s.index(),
                    s.name()
                );
                let _ = write!(
                    w.next(),
                    "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
                    s.index(),
                    s.index()
                );
            }
        }
    }

    /// The enclosing slices (iteration > phase > micro-batch) on every
    /// GPU's compute thread.
    fn write_nesting(&self, w: &mut EventWriter) {
        for (rank, ops) in self.compute_ops().iter().enumerate() {
            for (name, start, end) in self.nesting(ops) {
                let out = w.next();
                let _ = write!(
                    out,
                    "{{\"ph\":\"X\",\"pid\":{rank},\"tid\":{},\"name\":{},\"cat\":\"nest\",\"ts\":",
                    Stream::Compute.index(),
                    json_str(&name)
                );
                write_us(out, start);
                out.push_str(",\"dur\":");
                write_us(out, end - start);
                out.push_str(",\"args\":{}}");
            }
        }
    }

    /// The complete event of op execution `e`: its name and layer (or
    /// `idle`), category, time and args (unit, micro-batch, ranks, bytes
    /// and bandwidth).
    fn write_op(&self, w: &mut EventWriter, e: &TraceEvent) {
        let out = w.next();
        let (name, cat) = if e.name == IDLE_NAME {
            ("idle".to_string(), "idle")
        } else {
            let base = self.names.get(e.name as usize).map_or("?", String::as_str);
            (
                if e.unit == NO_INDEX {
                    base.to_string()
                } else {
                    format!("{base} {}", self.layer(e.unit))
                },
                e.category.name(),
            )
        };
        let _ = write!(
            out,
            "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"name\":{},\"cat\":\"{}\",\"ts\":",
            e.rank,
            e.stream.index(),
            json_str(&name),
            cat
        );
        write_us(out, e.start_ns);
        out.push_str(",\"dur\":");
        write_us(out, e.end_ns - e.start_ns);
        out.push_str(",\"args\":{");
        let mut args = Vec::new();
        if e.unit != NO_INDEX {
            args.push(format!("\"unit\":{}", e.unit));
        }
        if e.micro != NO_INDEX {
            args.push(format!("\"micro\":{}", e.micro));
        }
        if e.participants > 1 {
            args.push(format!("\"ranks\":{}", e.participants));
        }
        if let Some(&b) = self.op_bytes.get(&e.op) {
            args.push(format!("\"bytes\":{b:.0}"));
            let ns = e.end_ns - e.start_ns;
            if ns > 0 {
                args.push(format!("\"algbw_gbps\":{:.3}", b / ns as f64));
            }
        }
        out.push_str(&args.join(","));
        out.push_str("}}");
    }

    /// The flow arrows chaining each collective's slices (`flows`, by op)
    /// across its ranks, in rank order.
    fn write_flows(
        &self,
        w: &mut EventWriter,
        flows: std::collections::BTreeMap<u32, Vec<&TraceEvent>>,
    ) {
        for (op, mut evs) in flows {
            evs.sort_by_key(|e| e.rank);
            let n = evs.len();
            for (i, e) in evs.iter().enumerate() {
                let ph = if i == 0 {
                    "s"
                } else if i + 1 == n {
                    "f"
                } else {
                    "t"
                };
                let out = w.next();
                let _ = write!(
                    out,
                    "{{\"ph\":\"{ph}\",\"id\":{op},\"pid\":{},\"tid\":{},\"name\":{},\"cat\":\"collective\",{}\"ts\":",
                    e.rank,
                    e.stream.index(),
                    json_str(self.names.get(e.name as usize).map_or("?", String::as_str)),
                    if ph == "s" { "" } else { "\"bp\":\"e\"," }
                );
                write_us(out, e.start_ns);
                out.push('}');
            }
        }
    }

    /// The memory counter samples of every GPU and host.
    fn write_memory(&self, w: &mut EventWriter) {
        for m in &self.memory {
            let out = w.next();
            let _ = write!(
                out,
                "{{\"ph\":\"C\",\"pid\":{},\"tid\":0,\"name\":\"memory\",\"ts\":",
                m.rank
            );
            write_us(out, m.time_ns);
            let _ = write!(out, ",\"args\":{{\"GiB\":{:.6}}}}}", m.bytes as f64 / GIB);
        }
    }
}

/// The trace's event list as it is written: events separated by `,\n`.
struct EventWriter {
    out: String,
    /// No event written yet.
    first: bool,
}

impl EventWriter {
    /// The output, ready for the next event (a separator written after
    /// any previous one).
    fn next(&mut self) -> &mut String {
        if !self.first {
            self.out.push_str(",\n");
        }
        self.first = false;
        &mut self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{run, Graph, MemChange};

    #[test]
    fn trace_is_valid_json_with_tracks() {
        let mut g = Graph::new();
        let f = g.label(Category::Forward, "fwd");
        let ag = g.label(Category::AllGather, "all_gather");
        let c = g.add_collective(
            &[0, 1],
            Stream::Comm,
            SimTime(1500),
            &[],
            ag,
            &[MemChange::start(0, 1 << 30), MemChange::start(1, 1 << 30)],
        );
        let mut l = f;
        l.unit = 1;
        l.micro = 0;
        g.add_op(
            0,
            Stream::Compute,
            SimTime(2001),
            &[c],
            l,
            &[MemChange::end(0, -(1 << 30))],
        );
        let mut rec = TraceRecorder::new(
            vec!["rank 0: l4".into(), "rank 1: \"p40\"".into()],
            2,
            vec![0, 0],
        );
        run(&g, &mut rec).unwrap();
        let mut t = rec.finish();
        t.layers = 2;
        let text = t.to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let x: Vec<_> = evs
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] != "nest")
            .collect();
        // The collective on both ranks, the compute op, and the compute
        // stream's wait for the collective as an idle slice.
        assert_eq!(x.len(), 4);
        let idle: Vec<_> = x.iter().filter(|e| e["cat"] == "idle").collect();
        assert_eq!(idle.len(), 1);
        assert_eq!(idle[0]["ts"].as_f64().unwrap(), 0.0);
        assert_eq!(idle[0]["dur"].as_f64().unwrap(), 1.5);
        let fwd = x.iter().find(|e| e["name"] == "fwd block 1").unwrap();
        assert_eq!(fwd["ts"].as_f64().unwrap(), 1.5);
        assert_eq!(fwd["dur"].as_f64().unwrap(), 2.001);
        assert_eq!(fwd["args"]["unit"], 1);
        let c: Vec<_> = evs
            .iter()
            .filter(|e| e["ph"] == "C" && e["pid"] == 0)
            .collect();
        // Base and the all-gather's allocation share t = 0: one sample.
        assert_eq!(c.len(), 2);
        assert_eq!(c[0]["args"]["GiB"].as_f64().unwrap(), 1.0);
        assert_eq!(c[1]["args"]["GiB"].as_f64().unwrap(), 0.0);
        assert!(text.contains("rank 1: \\\"p40\\\""));
    }
}
