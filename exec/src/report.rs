//! What a real run measured: per-iteration training records
//! ([`TrainReport`]) and profiler tables ([`ComputeProfile`],
//! [`CollectiveTiming`]).
//!
//! Units: times in milliseconds (`_ms`), memory in bytes (`_bytes`), sizes in
//! samples or elements as named. Plain serde data, available without the
//! `torch`/`mpi` features; the glue to the simulator's report and profile
//! formats lives outside this crate.

use serde::{Deserialize, Serialize};

use crate::config::{BlockConfig, DeviceKind};
use sim::precision::NumFormat;

/// One rank's share of one iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankIteration {
    /// Rank.
    pub rank: usize,
    /// Local batch b_i (samples).
    pub batch: usize,
    /// Micro-batch count n_i.
    pub micro_batches: usize,
    /// Forward, head, recompute + backward and optimizer time (ms,
    /// device-synchronised).
    pub compute_ms: f64,
    /// Time inside all-gathers and reduce-scatters after every rank arrived
    /// (ms), including host staging copies on CUDA.
    pub comm_ms: f64,
    /// Time blocked before collectives waiting for other ranks (ms; the
    /// barrier before each collective when `Job::measure_wait`).
    pub wait_ms: f64,
    /// Activation offload/reload copies between device and host buffers (ms;
    /// 0 on the CPU, where outputs already are in host memory, and without
    /// gradient accumulation, where they stay on the device).
    pub copy_ms: f64,
    /// Peak device memory in use during the iteration (bytes; CUDA only:
    /// `cudaMemGetInfo` total - free sampled after every unit phase, so it
    /// includes the CUDA context and the caching allocator's reserve).
    pub peak_mem_bytes: Option<u64>,
    /// Sum of this rank's token losses (nats).
    pub loss_sum: f64,
    /// This rank's own iteration time (ms, from leaving the first barrier
    /// to reaching the last; ranks leave a barrier at slightly different
    /// instants, so it differs from rank 0's by that skew).
    #[serde(default)]
    pub own_iteration_ms: f64,
    /// Part of `compute_ms`: the units' forward, head, recompute and
    /// backward passes (ms).
    #[serde(default)]
    pub passes_ms: f64,
    /// Part of `compute_ms`: the optimizer step (ms). The rest of
    /// `compute_ms` is the casts of gathered parameters to the compute
    /// dtype.
    #[serde(default)]
    pub optimizer_ms: f64,
}

/// One measured iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// Iteration index (0-based, warm-up included).
    pub iteration: usize,
    /// Wall time from a barrier at the start to a barrier at the end (ms),
    /// measured on rank 0: the makespan.
    pub iteration_ms: f64,
    /// Per-rank breakdown, in rank order.
    pub ranks: Vec<RankIteration>,
}

/// Result of a training run (assembled on rank 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Rank count.
    pub ranks: usize,
    /// Global batch B (samples).
    pub global_batch: usize,
    /// Parameter count per unit (embedding, blocks, head).
    pub unit_params: Vec<usize>,
    /// Recorded iterations (warm-up excluded).
    pub iterations: Vec<IterationRecord>,
    /// Global sum of token losses per iteration, warm-up included (nats).
    pub loss_sums: Vec<f64>,
    /// Final full parameters per unit when `Job::return_params`.
    pub final_params: Option<Vec<Vec<f32>>>,
    /// Full gradient per unit of the first iteration when
    /// `Job::return_grads` (the reduce-scattered shards, gathered).
    #[serde(default)]
    pub first_grads: Option<Vec<Vec<f32>>>,
    /// The compute profile the ranks took between their recorded
    /// iterations ([`crate::config::InRunProfile`]; the mean over the
    /// ranks), `None` when the job asked for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_profile: Option<ComputeProfile>,
}

impl TrainReport {
    /// Mean iteration time over the recorded iterations (ms); 0 if none.
    pub fn mean_iteration_ms(&self) -> f64 {
        if self.iterations.is_empty() {
            return 0.0;
        }
        self.iterations.iter().map(|i| i.iteration_ms).sum::<f64>() / self.iterations.len() as f64
    }

    /// Median iteration time over the recorded iterations (ms); 0 if none.
    pub fn median_iteration_ms(&self) -> f64 {
        median(
            &self
                .iterations
                .iter()
                .map(|i| i.iteration_ms)
                .collect::<Vec<_>>(),
        )
    }
}

/// Median of `xs` ([`sim::stats::median`]); 0 for empty.
pub fn median(xs: &[f64]) -> f64 {
    sim::stats::median(xs.iter().copied()).unwrap_or(0.0)
}

/// Timing of one unit kind at one micro-batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassTiming {
    /// Micro-batch size m (samples).
    pub micro_batch_size: usize,
    /// Forward without autograd (the trainer's forward pass), median (ms).
    pub forward_ms: f64,
    /// Backward alone: median(forward with autograd + backward) minus
    /// median(forward with autograd) (ms). The trainer's backward step per
    /// micro-batch is `recompute_backward_ms`.
    pub backward_ms: f64,
    /// Forward with autograd + backward, median (ms): what the trainer does
    /// per micro-batch in the backward pass (recompute, then backward).
    pub recompute_backward_ms: f64,
    /// Peak device memory during the measurement (bytes; CUDA only, see
    /// [`RankIteration::peak_mem_bytes`]).
    pub peak_mem_bytes: Option<u64>,
}

/// Compute profile of one model on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeProfile {
    /// Model measured.
    pub model: BlockConfig,
    /// Device kind.
    pub device: DeviceKind,
    /// Compute dtype.
    pub dtype: NumFormat,
    /// libtorch intra-op threads used (CPU).
    pub threads: usize,
    /// Parameters of one block.
    pub params_per_block: usize,
    /// Parameters of the embedding unit.
    pub params_embedding: usize,
    /// Parameters of the head unit.
    pub params_head: usize,
    /// One block, per micro-batch size.
    pub block: Vec<PassTiming>,
    /// Embedding unit (forward; backward of the embedding gradient).
    pub embedding: Vec<PassTiming>,
    /// Head unit; `forward_ms` includes the loss, `recompute_backward_ms` is
    /// the head's forward + backward as done once per micro-batch.
    pub head: Vec<PassTiming>,
    /// Adam step over one block's worth of parameters, median (ms): timed
    /// as the trainer steps, one call per unit over the model's units
    /// (at most 64 Mi parameters in all), and scaled.
    pub optimizer_ms_per_block: f64,
    /// Adam step cost per parameter (ns), from that measurement.
    pub optimizer_ns_per_param: f64,
    /// Warm-up runs before timing.
    pub warmup: usize,
    /// Timed repetitions per point.
    pub repetitions: usize,
    /// Device memory in use before any unit was materialised (bytes; CUDA
    /// only): subtracted from the units' peaks to get what a step adds.
    #[serde(default)]
    pub baseline_mem_bytes: Option<u64>,
    /// Processes that profiled at the same time (one per rank, see
    /// [`crate::launch_compute`]); the timings are their means. 1 for a
    /// profile taken by a single process.
    #[serde(default = "one")]
    pub concurrent_ranks: usize,
}

fn one() -> usize {
    1
}

impl ComputeProfile {
    /// Every timing as one flat list (block, embedding, head passes:
    /// forward, backward, recompute + backward; then the optimizer step), ms.
    pub fn timings(&self) -> Vec<f64> {
        let mut v = Vec::new();
        for list in [&self.block, &self.embedding, &self.head] {
            for p in list {
                v.extend([p.forward_ms, p.backward_ms, p.recompute_backward_ms]);
            }
        }
        v.push(self.optimizer_ms_per_block);
        v
    }

    /// Replaces every timing by its mean over `ranks` concatenated
    /// [`ComputeProfile::timings`] lists (as gathered from the ranks that
    /// profiled at the same time) and records `ranks`.
    pub fn set_mean_timings(&mut self, all: &[f64], ranks: usize) {
        let n = self.timings().len();
        if ranks == 0 || all.len() != n * ranks {
            return;
        }
        let mean = |k: usize| (0..ranks).map(|r| all[r * n + k]).sum::<f64>() / ranks as f64;
        let mut k = 0;
        for list in [&mut self.block, &mut self.embedding, &mut self.head] {
            for p in list.iter_mut() {
                p.forward_ms = mean(k);
                p.backward_ms = mean(k + 1);
                p.recompute_backward_ms = mean(k + 2);
                k += 3;
            }
        }
        self.optimizer_ms_per_block = mean(k);
        self.optimizer_ns_per_param =
            self.optimizer_ms_per_block * 1e6 / self.params_per_block.max(1) as f64;
        self.concurrent_ranks = ranks;
    }
}

/// Collective operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    /// `MPI_Allgatherv`.
    AllGather,
    /// `MPI_Reduce_scatter` (sum).
    ReduceScatter,
    /// `MPI_Allreduce` (sum) of the whole buffer (DDP's buckets, hybrid
    /// sharding's replica reduction); timed on the even split only.
    AllReduce,
}

/// Time of one collective at one message size and split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveTiming {
    /// Operation.
    pub op: CollectiveOp,
    /// Ranks taking part.
    pub ranks: usize,
    /// Full (unsharded) buffer length (f32 elements).
    pub elems: usize,
    /// Full buffer size (bytes).
    pub bytes: usize,
    /// Piece fractions per rank.
    pub fractions: Vec<f64>,
    /// Largest piece (bytes).
    pub max_piece_bytes: usize,
    /// Median over repetitions of the slowest rank's time (ms), each
    /// repetition started after a barrier.
    pub time_ms: f64,
}

/// Result of the single-process reference ([`crate::reference_train`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceRun {
    /// Final parameters per unit.
    pub params: Vec<Vec<f32>>,
    /// Loss sum per step (nats).
    pub loss_sums: Vec<f64>,
    /// Full-batch gradient per unit at the first step (before any update).
    pub first_grads: Vec<Vec<f32>>,
}
