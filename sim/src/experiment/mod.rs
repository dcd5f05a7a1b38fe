//! Experiments: a study one TOML file long (under `experiments/`), a sweep
//! over clusters x models x global batches x sequence lengths x dtypes x
//! network bandwidths x cluster sizes x added GPUs, every workload planned
//! and simulated by every planner named, the metric to report and the
//! figures to draw. Reading files and drawing figures are the caller's
//! (`sim` does no I/O).
//!
//! One concept per module, each importing only those above it:
//! - `spelled`: the `spelled!` enums (one spelling per value, declared once);
//! - `rows`, `validation`: the rows a study writes, and the measurements
//!   it holds the simulator against;
//! - `axis`, `metric`: [`Axis`] and [`Metric`], what a figure reads from a row;
//! - `results`: [`Results`] and the merge of shards (`--shard K/N`:
//!   workloads `i` with `i mod N = K - 1`);
//! - `figure`: [`FigureKind`] (declared once: what each kind needs and says
//!   in the report) and [`FigureSpec`];
//! - `cluster_source`: where a workload's cluster comes from, and a
//!   sweep's edits to it (replicated nodes, an added GPU, another network);
//! - `sweep`: [`Sweep`] (the `[sweep]` table), its checks, and its
//!   expansion into [`Workload`]s;
//! - `spec`: [`ExperimentSpec`] and its checks (before any work);
//! - `run`: [`run`] (in parallel over workloads with rayon, results in case
//!   order, so every run gives the same rows);
//! - `report`: the report text ([`report_section`], [`speedup_range`],
//!   and the whole `results/REPORT.md`, [`full_report`]).
//!
//! ```toml
//! name = "paper-4gpu"
//! title = "Throughput on the paper's 4-GPU cluster"
//! description = "..."
//! profiles = "reference"          # reference measurements, or "calibrated"
//! memory_cluster = "paper"        # the reference memory profile's cluster
//! [sweep]
//! clusters = ["clusters/paper-4gpu.toml"]   # or gpus = ["l4,l4,a6000,p40"]
//! models = ["deepspeedgpt_2.7b"]
//! global_batches = [64]
//! planners = ["cephalo", "fsdp"]            # default: every planner
//! [[figure]]
//! kind = "bars"                   # a FigureKind: bars | lines | time | ...
//! x = "model"                     # an Axis
//! y = "samples_per_s"             # a Metric
//! ```
//!
//! Units: ms, samples/s, GiB, Gbit/s, USD.

mod axis;
mod claim;
mod cluster_source;
mod figure;
mod metric;
mod report;
mod results;
mod rows;
mod run;
mod spec;
mod spelled;
mod sweep;
mod validation;

pub use axis::Axis;
pub use claim::Claim;
pub use cluster_source::{ClusterSource, ClusterText};
pub use figure::{FigureKind, FigureSpec};
pub use metric::Metric;
pub use report::{
    figure_refs, full_report, is_data_parallel_baseline, is_pipeline, report_section,
    speedup_range, FigureRef, Study,
};
pub use results::Results;
pub use rows::{GpuRow, ResultRow, SpanRow};
pub use run::{run, Inputs};
pub use spec::{ExperimentSpec, ProfilesUse};
pub use sweep::{cluster_of, parse_cases, Case, Sweep, Workload, MAX_CASES};
pub use validation::ValidationPoint;
