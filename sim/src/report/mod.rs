//! The result of simulating one iteration: timing, throughput, per-GPU time
//! breakdown and memory, and how each is written (JSON, table, CSV).
//!
//! Units: times in ms (`_ms`), memory in GiB (`_gib`, 2^30 bytes),
//! throughput in samples/s and tokens/s, model TFLOPS (10^12 FLOP/s), MFU
//! and HFU as fractions in [0, 1], memory use as a percentage of capacity
//! (`mem_pct`) and of the usable memory (`usable_pct`, above 100 exactly
//! when the GPU is out of memory).
//!
//! `assemble` turns a run of a lowered iteration (the engine's stats and
//! the breakdown and memory observers) into a [`Report`]; it knows nothing
//! of schedules.
//!
//! The children, each importing only those above it: `memory` (what a
//! GPU's peak holds), `schema` (the report's types, JSON and CSV),
//! `table` (the human-readable tables), `breakdown` (the time-breakdown
//! observer) and `assemble` (a run into a report).
//!
//! # Per-GPU time breakdown
//!
//! For every GPU, `compute_ms + exposed_comm_ms + copy_ms + host_ms +
//! idle_ms = iteration_ms` exactly (the parts are accumulated in integer
//! ns). `compute_ms` is the busy time of the compute stream. Every gap on
//! the compute stream is charged to what the next compute op waited for:
//! its dependency that finished last. If that is a collective, the part of
//! the gap during which this GPU's communication streams (data-parallel and
//! replica) were busy is `exposed_comm_ms` and the rest (the collective had
//! not started because some other rank had not joined it yet: a straggler
//! stall) is `idle_ms`; if it is a host copy, the part during which the
//! copy stream was busy is `copy_ms` and the rest `idle_ms`; anything else
//! is `idle_ms`. After the GPU's last compute op, until its own last op
//! ends (an offloaded optimizer: gradient copies, the host step, the
//! parameter copy back), time is charged to the host stream when busy
//! (`host_ms`), else the copy stream, else the communication streams, else
//! idle; the wait from there to the end of the iteration (the barrier) is
//! `idle_ms`.
//!
//! # Out of memory
//!
//! A GPU is out of memory when its simulated peak exceeds its usable memory
//! (capacity x the allowed fraction); a node's host is out of memory when
//! its peak exceeds the host memory of the cluster spec. An out-of-memory
//! plan is a valid answer, not an error: [`Report::oom`] is true,
//! [`Report::oom_gpus`] / [`Report::oom_hosts`] list the offenders with
//! peak and capacity, and the JSON and table do not present the iteration
//! time as a result (see [`Report::to_json`]).

mod assemble;
mod breakdown;
mod intervals;
mod memory;
mod schema;
mod table;

pub(crate) use assemble::assemble;
pub use assemble::{Assembly, Folding};
pub(crate) use breakdown::Breakdown;
pub use intervals::{Interval, Intervals, Share};
pub use memory::{Limits, MemoryBreakdown};
pub use schema::{
    CollectiveStat, CommSourceStat, GpuReport, HostReport, KindSummary, OomGpu, PipelineReport,
    Report, SimulatedSummary, SourceLine, StageReport, Timing, REPORT_FORMAT,
};
pub use table::{comm_sources_text, group_rows, memory_table, sources_text, GROUP_ROWS_ABOVE};
