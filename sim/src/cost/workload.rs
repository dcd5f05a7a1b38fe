//! What a cost model is built for: the [`Workload`] (cluster, model,
//! tokens per sample, precision, global batch) and the memory and
//! communication knobs ([`CostOptions`]), with the checks of their numbers.

use super::mem_policy::MemPolicy;
use crate::cluster::Cluster;
use crate::comm::CommAlgo;
use crate::error::SpecError;
use crate::model::ModelSpec;
use crate::precision::NumFormat;

/// What a simulation or plan is about.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The GPUs and their links.
    pub cluster: Cluster,
    /// The model.
    pub model: ModelSpec,
    /// Tokens per sample (for ViT: the real token count, e.g. 577).
    pub seq_len: u32,
    /// Precision.
    pub dtype: NumFormat,
    /// Global batch (samples per iteration).
    pub global_batch: u32,
}

impl Workload {
    /// Checks the numbers of the workload and the memory options before
    /// anything is built for them: lengths and sizes, the simulator's
    /// limits, a model whose blocks the simulator prices
    /// ([`ModelSpec::check_simulated`]), the dtype on every GPU type, the
    /// memory knobs.
    pub fn check(&self, options: &CostOptions) -> Result<(), SpecError> {
        if self.seq_len == 0 {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "seq_len",
                "expected a sequence length >= 1",
            ));
        }
        if self.global_batch == 0 {
            return Err(SpecError::invalid(
                crate::error::WORKLOAD,
                "global_batch",
                "expected a global batch >= 1",
            ));
        }
        crate::limits::check_workload(self.cluster.len(), self.global_batch, self.seq_len)?;
        self.model
            .check_simulated(self.seq_len)
            .map_err(|e| SpecError::invalid(crate::error::WORKLOAD, "model", e))?;
        // Where the dtype meets the cluster's GPUs: each type once, in rank order.
        let mut seen: Vec<&str> = Vec::new();
        for g in &self.cluster.gpus {
            if !seen.contains(&g.spec.name.as_str()) {
                seen.push(&g.spec.name);
                g.spec
                    .check_dtype(self.dtype, crate::error::WORKLOAD, "dtype")?;
            }
        }
        options
            .mem_policy
            .check(crate::error::WORKLOAD, "mem_fraction")?;
        if let Some(o) = options.overhead_gib {
            crate::physical::check(
                crate::error::WORKLOAD,
                "overhead_gib",
                o,
                &crate::physical::MEM_GIB,
            )?;
        }
        Ok(())
    }
}

/// Knobs of the cost and memory model.
#[derive(Debug, Clone)]
pub struct CostOptions {
    /// When a plan fits a GPU (default: physical; the paper's fraction rule
    /// on request).
    pub mem_policy: MemPolicy,
    /// Memory outside the allocator per GPU (CUDA context, NCCL buffers),
    /// GiB; `None`: the policy's estimate for the cluster
    /// ([`MemPolicy::default_overhead_gib`], `CostModel::overhead_gib`).
    pub overhead_gib: Option<f64>,
    /// Memory cluster of the reference data to take non-state memory from.
    pub memory_cluster: Option<String>,
    /// Collective algorithm choice (default: as NCCL picks).
    pub comm_algo: CommAlgo,
    /// Compute slowdown while a collective runs on the same GPU, as a
    /// fraction (0.1: kernels take 10% longer); 0 turns it off. Default
    /// [`DEFAULT_COMM_INTERFERENCE`].
    pub comm_interference: f64,
}

/// Default compute slowdown while NCCL kernels run on the same GPU.
///
/// NCCL's ring kernels occupy one thread block per channel (typically 8-16
/// of an A100's 108 SMs for large collectives, ~7-15%) and a share of HBM
/// bandwidth for the reduction and copies; measurements of overlapped
/// GEMMs and all-reduces report compute kernels slowed by roughly 10-30%
/// (Rashidi et al., "Enabling Compute-Communication Overlap in Distributed
/// Deep Learning Training Platforms", ISCA 2021; Jangda et al., "Breaking
/// the Computation and Communication Abstraction Barrier", ASPLOS 2022).
/// 0.1 is the low end of that range, the SM share of a typical channel
/// count; set `--comm-interference` for your system.
pub const DEFAULT_COMM_INTERFERENCE: f64 = 0.1;

/// Largest accepted `comm_interference` (a 4x slowdown is already beyond
/// anything measured).
pub const MAX_COMM_INTERFERENCE: f64 = 3.0;

impl CostOptions {
    /// Memory outside the allocator on every GPU of a `gpus`-GPU cluster
    /// (CUDA context, NCCL buffers), GiB: the user's figure, else the
    /// policy's estimate ([`MemPolicy::default_overhead_gib`]).
    pub fn overhead_gib_on(&self, gpus: usize) -> f64 {
        self.overhead_gib
            .unwrap_or_else(|| self.mem_policy.default_overhead_gib(gpus))
    }
}

impl Default for CostOptions {
    fn default() -> Self {
        CostOptions {
            mem_policy: MemPolicy::Physical,
            overhead_gib: None,
            memory_cluster: None,
            comm_algo: CommAlgo::Auto,
            comm_interference: DEFAULT_COMM_INTERFERENCE,
        }
    }
}
