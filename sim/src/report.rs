//! The result of simulating one iteration: timing, throughput, per-GPU time
//! breakdown and memory, and how each is written (JSON, table, CSV).
//!
//! Units: times in ms (`_ms`), memory in GiB (`_gib`, 2^30 bytes),
//! throughput in samples/s and tokens/s, model TFLOPS (10^12 FLOP/s), MFU as
//! a fraction in [0, 1], memory use as a percentage of capacity (`mem_pct`)
//! and of the usable memory (`usable_pct`, above 100 exactly when the GPU is
//! out of memory).
//!
//! # Per-GPU time breakdown
//!
//! For every GPU, `compute_ms + exposed_comm_ms + copy_ms + idle_ms =
//! iteration_ms` exactly (the parts are accumulated in integer ns).
//! `compute_ms` is the busy time of the compute stream. Every gap on the
//! compute stream is charged to what the next compute op waited for: its
//! dependency that finished last. If that is a collective, the part of the gap
//! during which this GPU's communication stream was busy is `exposed_comm_ms`
//! and the rest (the collective had not started because some other rank had
//! not joined it yet: a straggler stall) is `idle_ms`; if it is a host copy,
//! the part during which the copy stream was busy is `copy_ms` and the rest
//! `idle_ms`; anything else, and the wait from this GPU's last op to the end
//! of the iteration (the barrier), is `idle_ms`.
//!
//! # Out of memory
//!
//! A GPU is out of memory when its simulated peak exceeds its usable memory
//! (capacity x the allowed fraction). An out-of-memory plan is a valid
//! answer, not an error: [`Report::oom`] is true, [`Report::oom_gpus`] lists
//! the offending GPUs with peak and capacity, and the JSON and table do not
//! present the iteration time as a result (see [`Report::to_json`]).

use crate::engine::{Category, Graph, Observer, OpRecord, Stream};
use crate::trace::Trace;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt::Write as _;

/// Identifier of the JSON schema written by [`Report::to_json`].
pub const REPORT_FORMAT: &str = "cephalo-report/1";

/// What one GPU did during the iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuReport {
    /// Rank.
    pub rank: usize,
    /// Canonical GPU name.
    pub gpu: String,
    /// Node index in the cluster.
    pub node: usize,
    /// Local batch (samples).
    pub batch: u32,
    /// Micro-batch count.
    pub microbatches: u32,
    /// Largest micro-batch size (samples).
    pub microbatch_size: u32,
    /// Fraction of the sharded training state held.
    pub state_fraction: f64,
    /// Busy time of the compute stream, ms.
    pub compute_ms: f64,
    /// Compute-stream wait while this GPU's communication stream was busy, ms.
    pub exposed_comm_ms: f64,
    /// Compute-stream wait while this GPU's host-copy stream was busy, ms.
    pub copy_ms: f64,
    /// Remaining wait: straggler stalls and the end-of-iteration barrier, ms.
    pub idle_ms: f64,
    /// Part of `compute_ms` spent in forward passes (embedding, blocks, head), ms.
    pub forward_ms: f64,
    /// Part of `compute_ms` spent recomputing block forwards in the backward, ms.
    pub recompute_ms: f64,
    /// Part of `compute_ms` spent in backward passes, ms.
    pub backward_ms: f64,
    /// Part of `compute_ms` spent in the optimizer step, ms.
    pub optimizer_ms: f64,
    /// Total busy time of the communication stream (overlapped or not), ms.
    pub comm_busy_ms: f64,
    /// Total busy time of the host-copy stream (overlapped or not), ms.
    pub copy_busy_ms: f64,
    /// When this GPU's last op ended, ms.
    pub finish_ms: f64,
    /// Peak simulated memory, GiB.
    pub peak_mem_gib: f64,
    /// When the peak was first reached, ms.
    pub peak_at_ms: f64,
    /// Constant part of the memory: sharded state + framework overhead, GiB.
    pub base_mem_gib: f64,
    /// Memory capacity, GiB.
    pub capacity_gib: f64,
    /// Memory a plan may use (capacity x allowed fraction), GiB.
    pub usable_gib: f64,
    /// Peak as a percentage of capacity.
    pub mem_pct: f64,
    /// Peak as a percentage of the usable memory (above 100 exactly when
    /// `oom`): the headroom a plan really has.
    pub usable_pct: f64,
    /// Peak exceeds the usable memory.
    pub oom: bool,
    /// Where the block times came from (`imported (...)`, `analytic (...)`).
    pub compute_source: String,
    /// Where the non-state memory curve came from.
    pub memory_source: String,
    /// Where the embedding / head / optimizer times came from.
    pub unit_source: String,
}

/// A GPU whose peak memory exceeds its usable memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomGpu {
    /// Rank.
    pub rank: usize,
    /// Canonical GPU name.
    pub gpu: String,
    /// Simulated peak, GiB.
    pub peak_mem_gib: f64,
    /// Usable memory (capacity x allowed fraction), GiB.
    pub usable_gib: f64,
    /// Capacity, GiB.
    pub capacity_gib: f64,
}

/// Iteration timing and throughput (what [`Report`] reports at top level).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Simulated iteration time (makespan over all GPUs), ms.
    pub iteration_ms: f64,
    /// Global batch / iteration time, samples/s.
    pub samples_per_s: f64,
    /// `samples_per_s` x tokens per sample.
    pub tokens_per_s: f64,
    /// Model FLOPs of the iteration (no recompute) / iteration time, TFLOPS (whole cluster).
    pub tflops: f64,
    /// `tflops` / sum of the GPUs' dense peak at the dtype.
    pub mfu: f64,
}

/// Durations of one collective per FSDP unit kind (ms), as simulated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CollectiveTimes {
    /// All-gather of the embedding unit.
    pub ag_embedding_ms: f64,
    /// All-gather of one block.
    pub ag_block_ms: f64,
    /// All-gather of the head unit.
    pub ag_head_ms: f64,
    /// Reduce-scatter of the embedding unit.
    pub rs_embedding_ms: f64,
    /// Reduce-scatter of one block.
    pub rs_block_ms: f64,
    /// Reduce-scatter of the head unit.
    pub rs_head_ms: f64,
}

/// The simulated iteration.
///
/// In Rust the timing fields always hold the simulated numbers; check
/// [`Report::oom`] (or use [`Report::time_ms`]) before treating them as a
/// result. In JSON they are `null` when the plan is out of memory.
///
/// # JSON schema (`cephalo-report/1`, written by [`Report::to_json`])
///
/// ```text
/// {
///   "format": "cephalo-report/1",
///   "planner": str, "model": str, "cluster": str, "dtype": "fp16"|"bf16"|"fp32",
///   "seq_len": int (tokens per sample), "global_batch": int,
///   "oom": bool,
///   "iteration_ms": num|null, "samples_per_s": num|null, "tokens_per_s": num|null,
///   "tflops": num|null, "mfu": num|null,            -- null exactly when oom
///   "timing_if_it_fit": {iteration_ms, samples_per_s, tokens_per_s, tflops, mfu}
///                                                   -- present only when oom: what the
///                                                      iteration would take with unlimited memory
///   "oom_gpus": [{rank, gpu, peak_mem_gib, usable_gib, capacity_gib}],  -- empty unless oom
///   "peak_tflops": num (sum of dense peaks at the dtype),
///   "price_per_hour_usd": num|null (whole cluster; null unless every GPU is priced),
///   "usd_per_million_tokens": num|null (null when unpriced or oom),
///   "model_tflop": num (per iteration),
///   "mem_fraction": num, "overhead_gib": num, "buffers_ref_gib": num,
///   "collectives": {ag_embedding_ms, ag_block_ms, ag_head_ms,
///                   rs_embedding_ms, rs_block_ms, rs_head_ms},
///   "comm_model": str,
///   "gpus": [{rank, gpu, node, batch, microbatches, microbatch_size, state_fraction,
///             compute_ms, exposed_comm_ms, copy_ms, idle_ms,      -- sum = iteration time
///             forward_ms, recompute_ms, backward_ms, optimizer_ms, -- sum = compute_ms
///             comm_busy_ms, copy_busy_ms, finish_ms,
///             peak_mem_gib, peak_at_ms, base_mem_gib, capacity_gib, usable_gib, mem_pct,
///             usable_pct, oom, compute_source, memory_source, unit_source}],
///   "warnings": [str],
///   "ops": int, "events": int                       -- size of the simulated task graph
/// }
/// ```
///
/// Per-GPU times are kept when `oom` is true (they describe the iteration as
/// if memory were unlimited). Field order is fixed; same inputs give the
/// same bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Planner that produced the plan (`manual` for a user-given plan).
    pub planner: String,
    /// Canonical model name.
    pub model: String,
    /// Cluster name.
    pub cluster: String,
    /// Precision (`fp16`, `bf16`, `fp32`).
    pub dtype: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Samples per iteration.
    pub global_batch: u32,
    /// Some GPU is out of memory.
    pub oom: bool,
    /// Simulated iteration time, ms (meaningful only when `!oom`).
    pub iteration_ms: f64,
    /// Samples/s (meaningful only when `!oom`).
    pub samples_per_s: f64,
    /// Tokens/s (meaningful only when `!oom`).
    pub tokens_per_s: f64,
    /// Model TFLOPS of the whole cluster (meaningful only when `!oom`).
    pub tflops: f64,
    /// Model FLOPS utilisation, fraction (meaningful only when `!oom`).
    pub mfu: f64,
    /// Sum of the GPUs' dense peak TFLOPS at the dtype.
    pub peak_tflops: f64,
    /// Price of the whole cluster per hour (USD), when every GPU has a price
    /// (cluster file or catalog).
    pub price_per_hour_usd: Option<f64>,
    /// Model TFLOP of one iteration (10^12 FLOP, no recompute).
    pub model_tflop: f64,
    /// Allowed fraction of each GPU's memory.
    pub mem_fraction: f64,
    /// Framework overhead per GPU, GiB.
    pub overhead_gib: f64,
    /// Unit buffers assumed inside the measured non-state memory (`B_ref`
    /// of [`crate::fsdp`]), GiB.
    pub buffers_ref_gib: f64,
    /// GPUs out of memory (empty unless `oom`).
    pub oom_gpus: Vec<OomGpu>,
    /// Collective durations per unit kind.
    pub collectives: CollectiveTimes,
    /// Communication model description.
    pub comm_model: String,
    /// Per-GPU details in rank order.
    pub gpus: Vec<GpuReport>,
    /// Warnings from the cost model (flagged profiles, fallbacks).
    pub warnings: Vec<String>,
    /// Ops in the simulated task graph.
    pub ops: u64,
    /// Engine events processed (a start and an end per op).
    pub events: u64,
    /// The trace, when requested.
    pub trace: Option<Trace>,
}

#[derive(Serialize)]
struct ReportJson<'a> {
    format: &'static str,
    planner: &'a str,
    model: &'a str,
    cluster: &'a str,
    dtype: &'a str,
    seq_len: u32,
    global_batch: u32,
    oom: bool,
    iteration_ms: Option<f64>,
    samples_per_s: Option<f64>,
    tokens_per_s: Option<f64>,
    tflops: Option<f64>,
    mfu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timing_if_it_fit: Option<Timing>,
    oom_gpus: &'a [OomGpu],
    peak_tflops: f64,
    price_per_hour_usd: Option<f64>,
    usd_per_million_tokens: Option<f64>,
    model_tflop: f64,
    mem_fraction: f64,
    overhead_gib: f64,
    buffers_ref_gib: f64,
    collectives: CollectiveTimes,
    comm_model: &'a str,
    gpus: &'a [GpuReport],
    warnings: &'a [String],
    ops: u64,
    events: u64,
}

impl Report {
    /// The timing block.
    pub fn timing(&self) -> Timing {
        Timing {
            iteration_ms: self.iteration_ms,
            samples_per_s: self.samples_per_s,
            tokens_per_s: self.tokens_per_s,
            tflops: self.tflops,
            mfu: self.mfu,
        }
    }

    /// The iteration time, or `None` when the plan is out of memory.
    pub fn time_ms(&self) -> Option<f64> {
        (!self.oom).then_some(self.iteration_ms)
    }

    /// Cluster cost of training on one million tokens (USD), when the
    /// cluster is priced and the plan fits.
    pub fn usd_per_million_tokens(&self) -> Option<f64> {
        match self.price_per_hour_usd {
            Some(p) if !self.oom && self.tokens_per_s > 0.0 => {
                Some(p / 3600.0 / self.tokens_per_s * 1e6)
            }
            _ => None,
        }
    }

    /// The report as pretty JSON (schema on [`Report`]), newline-terminated.
    pub fn to_json(&self) -> String {
        let ok = |v: f64| (!self.oom).then_some(v);
        let j = ReportJson {
            format: REPORT_FORMAT,
            planner: &self.planner,
            model: &self.model,
            cluster: &self.cluster,
            dtype: &self.dtype,
            seq_len: self.seq_len,
            global_batch: self.global_batch,
            oom: self.oom,
            iteration_ms: ok(self.iteration_ms),
            samples_per_s: ok(self.samples_per_s),
            tokens_per_s: ok(self.tokens_per_s),
            tflops: ok(self.tflops),
            mfu: ok(self.mfu),
            timing_if_it_fit: self.oom.then(|| self.timing()),
            oom_gpus: &self.oom_gpus,
            peak_tflops: self.peak_tflops,
            price_per_hour_usd: self.price_per_hour_usd,
            usd_per_million_tokens: self.usd_per_million_tokens(),
            model_tflop: self.model_tflop,
            mem_fraction: self.mem_fraction,
            overhead_gib: self.overhead_gib,
            buffers_ref_gib: self.buffers_ref_gib,
            collectives: self.collectives,
            comm_model: &self.comm_model,
            gpus: &self.gpus,
            warnings: &self.warnings,
            ops: self.ops,
            events: self.events,
        };
        let mut s =
            serde_json::to_string_pretty(&j).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }

    /// Per-GPU rows as CSV (header + one row per GPU, `,`-separated, text
    /// fields quoted): `rank,gpu,node,batch,microbatches,microbatch_size,
    /// state_fraction,compute_ms,exposed_comm_ms,copy_ms,idle_ms,forward_ms,
    /// recompute_ms,backward_ms,optimizer_ms,finish_ms,peak_mem_gib,
    /// capacity_gib,usable_gib,mem_pct,usable_pct,oom,compute_source,memory_source`.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "rank,gpu,node,batch,microbatches,microbatch_size,state_fraction,compute_ms,exposed_comm_ms,copy_ms,idle_ms,forward_ms,recompute_ms,backward_ms,optimizer_ms,finish_ms,peak_mem_gib,capacity_gib,usable_gib,mem_pct,usable_pct,oom,compute_source,memory_source\n",
        );
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for g in &self.gpus {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3},{},{},{}",
                g.rank,
                q(&g.gpu),
                g.node,
                g.batch,
                g.microbatches,
                g.microbatch_size,
                g.state_fraction,
                g.compute_ms,
                g.exposed_comm_ms,
                g.copy_ms,
                g.idle_ms,
                g.forward_ms,
                g.recompute_ms,
                g.backward_ms,
                g.optimizer_ms,
                g.finish_ms,
                g.peak_mem_gib,
                g.capacity_gib,
                g.usable_gib,
                g.mem_pct,
                g.usable_pct,
                g.oom,
                q(&g.compute_source),
                q(&g.memory_source)
            );
        }
        s
    }

    /// A human-readable table: one row per GPU, then the summary (or an
    /// OUT OF MEMORY block naming each GPU with its peak and capacity).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}, seq {}), global batch {}, planner {}, cluster {}",
            self.model, self.dtype, self.seq_len, self.global_batch, self.planner, self.cluster
        );
        let header = [
            "rank",
            "gpu",
            "batch",
            "n",
            "m",
            "state",
            "compute ms",
            "exp.comm ms",
            "copy ms",
            "idle ms",
            "peak GiB",
            "% usable",
            "OOM",
            "source",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for g in &self.gpus {
            let t = |v: f64| {
                if self.oom {
                    "-".to_string()
                } else {
                    format!("{v:.1}")
                }
            };
            rows.push(vec![
                g.rank.to_string(),
                g.gpu.clone(),
                g.batch.to_string(),
                g.microbatches.to_string(),
                g.microbatch_size.to_string(),
                format!("{:.4}", g.state_fraction),
                t(g.compute_ms),
                t(g.exposed_comm_ms),
                t(g.copy_ms),
                t(g.idle_ms),
                format!("{:.2}", g.peak_mem_gib),
                format!("{:.1}", g.usable_pct),
                if g.oom { "OOM".into() } else { "ok".into() },
                g.compute_source.split(' ').next().unwrap_or("").to_string(),
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let w = widths[c];
                // Text columns left-aligned, numbers right-aligned.
                if c == 1 || c == 12 || c == 13 {
                    let _ = write!(line, "{cell:<w$}  ");
                } else {
                    let _ = write!(line, "{cell:>w$}  ");
                }
            }
            let _ = writeln!(s, "{}", line.trim_end());
        }
        s.push('\n');
        if self.oom {
            let _ = writeln!(
                s,
                "OUT OF MEMORY: this plan does not fit; no iteration time is reported."
            );
            for o in &self.oom_gpus {
                let _ = writeln!(
                    s,
                    "  rank {} ({}): peak {:.2} GiB > usable {:.2} GiB (capacity {:.2} GiB x {})",
                    o.rank, o.gpu, o.peak_mem_gib, o.usable_gib, o.capacity_gib, self.mem_fraction
                );
            }
        } else {
            let _ = writeln!(
                s,
                "iteration {:.1} ms | {:.2} samples/s | {:.0} tokens/s | {:.2} TFLOPS | MFU {:.1}%",
                self.iteration_ms,
                self.samples_per_s,
                self.tokens_per_s,
                self.tflops,
                self.mfu * 100.0
            );
            if let (Some(p), Some(c)) = (self.price_per_hour_usd, self.usd_per_million_tokens()) {
                let _ = writeln!(
                    s,
                    "cost ${p:.2}/h for the cluster | ${c:.3} per million tokens"
                );
            }
        }
        s
    }
}

/// Per-rank accumulators of the time breakdown, in ns.
#[derive(Debug, Clone, Default)]
pub(crate) struct RankTimes {
    pub(crate) compute: u64,
    pub(crate) exposed_comm: u64,
    pub(crate) copy: u64,
    pub(crate) idle: u64,
    /// forward, recompute, backward, optimizer.
    pub(crate) by_kind: [u64; 4],
    pub(crate) comm_busy: u64,
    pub(crate) copy_busy: u64,
    pub(crate) finish: u64,
    prev_compute_end: u64,
    comm_iv: VecDeque<(u64, u64)>,
    copy_iv: VecDeque<(u64, u64)>,
}

/// Busy time of `iv` inside `[a, b)`.
fn overlap(iv: &VecDeque<(u64, u64)>, a: u64, b: u64) -> u64 {
    iv.iter()
        .map(|&(s, e)| e.min(b).saturating_sub(s.max(a)))
        .sum()
}

/// Observer computing the per-GPU time breakdown (see the module docs).
#[derive(Debug)]
pub(crate) struct Breakdown<'g> {
    graph: &'g Graph,
    end_ns: Vec<u64>,
    pub(crate) ranks: Vec<RankTimes>,
}

impl<'g> Breakdown<'g> {
    pub(crate) fn new(graph: &'g Graph, ranks: usize) -> Breakdown<'g> {
        Breakdown {
            graph,
            end_ns: vec![0; graph.len()],
            ranks: vec![RankTimes::default(); ranks],
        }
    }

    /// Closes every rank's timeline at the iteration end (`makespan_ns`).
    pub(crate) fn finish(&mut self, makespan_ns: u64) {
        for r in &mut self.ranks {
            r.idle += makespan_ns.saturating_sub(r.prev_compute_end);
            r.prev_compute_end = makespan_ns;
        }
    }
}

impl Observer for Breakdown<'_> {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        let (s, e) = (rec.start.0, rec.end.0);
        self.end_ns[rec.op.0 as usize] = e;
        let Some(r) = self.ranks.get_mut(rec.rank as usize) else {
            return;
        };
        r.finish = r.finish.max(e);
        match rec.stream {
            Stream::Comm => {
                r.comm_busy += e - s;
                if e > s {
                    r.comm_iv.push_back((s, e));
                }
            }
            Stream::Copy => {
                r.copy_busy += e - s;
                if e > s {
                    r.copy_iv.push_back((s, e));
                }
            }
            Stream::Compute => {
                let a = r.prev_compute_end;
                if s > a {
                    let gap = s - a;
                    // The dependency that finished last decides what the gap was.
                    let mut last: Option<(u64, Category)> = None;
                    for d in self.graph.op_deps(rec.op) {
                        let de = self.end_ns[d.0 as usize];
                        if last.is_none_or(|(t, _)| de > t) {
                            last = Some((de, self.graph.op_label(d).category));
                        }
                    }
                    let (busy, is_comm) = match last.map(|x| x.1) {
                        Some(Category::AllGather | Category::ReduceScatter) => {
                            (overlap(&r.comm_iv, a, s), true)
                        }
                        Some(Category::CopyD2H | Category::CopyH2D) => {
                            (overlap(&r.copy_iv, a, s), false)
                        }
                        _ => (0, false),
                    };
                    let busy = busy.min(gap);
                    if is_comm {
                        r.exposed_comm += busy;
                    } else {
                        r.copy += busy;
                    }
                    r.idle += gap - busy;
                }
                let d = e - s;
                r.compute += d;
                let k = match rec.label.category {
                    Category::Forward => 0,
                    Category::Recompute => 1,
                    Category::Backward => 2,
                    _ => 3,
                };
                r.by_kind[k] += d;
                r.prev_compute_end = e;
                // Intervals ending before this op starts cannot overlap later gaps.
                while r.comm_iv.front().is_some_and(|&(_, x)| x <= s) {
                    r.comm_iv.pop_front();
                }
                while r.copy_iv.front().is_some_and(|&(_, x)| x <= s) {
                    r.copy_iv.pop_front();
                }
            }
        }
    }
}
