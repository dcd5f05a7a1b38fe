//! `exec`: real execution of cephalo plans: an FSDP trainer with uneven
//! batches, layered gradient accumulation and uneven shards over MPI, the
//! single-process reference it must match, and a profiler.
//!
//! tch (libtorch) sits behind the `torch` feature and MPI behind the `mpi`
//! feature; `cuda` adds the CUDA link flags and device memory readings.
//! Without them the same API compiles and returns
//! [`ExecError::NotCompiled`]. Plain data types ([`config`], [`report`],
//! [`shard`], [`layout`]) and the launcher ([`mod@launch`]) are always there.
//!
//! Set-up: `. scripts/exec-env.sh` (libtorch 2.11.0, OpenMPI), then
//! `cargo build -p cephalo-exec --features torch,mpi`.
//!
//! Entry points:
//! - [`launch()`]: validate a [`Job`] (model, per-rank [`RankPlan`]s, device,
//!   dtype, Adam) and run it on `plan.len()` MPI ranks through `mpirun` and
//!   the `cephalo-exec-rank` binary (or any program calling [`rank_main`]);
//!   returns rank 0's [`TrainReport`].
//! - [`train`]: the same in-process on a [`Collectives`] group
//!   ([`SelfComm`] for one rank, `MpiComm` inside an MPI program).
//! - [`reference_train`]: plain single-process full-batch training.
//! - [`profile_compute`] and [`launch_collectives`] /
//!   [`profile_collectives`]: profiler tables as plain structs.
//! - [`sim_glue`]: conversions to and from the simulator's types (catalog
//!   model -> [`BlockConfig`], plan -> [`Job`], profiler tables ->
//!   `cephalo-profile/1`, [`TrainReport`] -> a report comparable with the
//!   simulator's).
//!
//! Units throughout: ms, bytes, samples, f32 elements (see each module).
#![warn(missing_docs, missing_debug_implementations)]

pub mod comm;
pub mod commprof;
pub mod config;
pub mod launch;
pub mod layout;
pub mod report;
pub mod shard;
pub mod sim_glue;

#[cfg(feature = "torch")]
pub mod adam;
#[cfg(feature = "torch")]
pub mod model;
#[cfg(feature = "torch")]
mod profiler;
#[cfg(feature = "torch")]
mod trainer;

pub use comm::{Collectives, SelfComm};
pub use commprof::{profile_collectives, CollectiveConfig};
pub use config::{
    AdamConfig, BlockConfig, DeviceKind, Dtype, Family, Fault, FaultKind, Job, ProfileConfig,
    RankPlan,
};
pub use launch::{
    launch, launch_collectives, launch_compute, rank_main, LaunchOptions, RankOutput, RankTask,
};
pub use report::{
    CollectiveOp, CollectiveTiming, ComputeProfile, IterationRecord, PassTiming, RankIteration,
    ReferenceRun, TrainReport,
};

#[cfg(feature = "mpi")]
pub use comm::MpiComm;

/// Errors of real execution.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The binary was built without the features real execution needs.
    #[error("real execution is not compiled in: rebuild with `--features exec` (see README)")]
    NotCompiled,
    /// A job or profile request is malformed (rejected before any work).
    #[error("invalid job: {field}: {message}")]
    InvalidJob {
        /// Field path, e.g. `plan[2].state_fraction`.
        field: String,
        /// What was expected and what was found.
        message: String,
    },
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(String),
    /// A collective failed or was called with inconsistent buffers.
    #[error("collective: {0}")]
    Comm(String),
    /// The requested device is not available.
    #[error("device: {0}")]
    NoDevice(String),
    /// Reading or writing a job/report file failed.
    #[error("i/o: {0}")]
    Io(String),
    /// `mpirun` could not be started.
    #[error("launch: {0}")]
    Launch(String),
    /// A rank died or failed; the whole job was ended.
    #[error(
        "a rank failed (mpirun exit status {status} after {secs:.1} s): {cause}\nlast output:\n{detail}"
    )]
    RankFailed {
        /// mpirun's exit status.
        status: i32,
        /// The most telling line of the ranks' output (a rank's error, a
        /// panic, or mpirun's note of a rank's exit or signal).
        cause: String,
        /// Seconds from launch to the end of the job.
        secs: f64,
        /// Tail of the ranks' output.
        detail: String,
    },
    /// The job ran past its wall-clock limit and was killed.
    #[error("the job ran past its {secs:.0} s limit and was killed; last output:\n{detail}")]
    Timeout {
        /// The limit (s).
        secs: f64,
        /// Tail of the ranks' output.
        detail: String,
    },
}

/// Trains `job` on this rank of `comm` (every rank calls it with the same
/// job): Cephalo's FSDP schedule (layer-major forward with outputs kept in
/// host buffers, head, backward with recompute, unequal all-gathers and
/// reduce-scatters, Adam on the local shard) with uneven batches,
/// micro-batches and shards. Returns the report on rank 0, `None` on the
/// others. For one rank, `comm` is [`SelfComm`] and no MPI is needed.
pub fn train<C: Collectives>(job: &Job, comm: &C) -> Result<Option<TrainReport>, ExecError> {
    #[cfg(feature = "torch")]
    {
        trainer::train(job, comm)
    }
    #[cfg(not(feature = "torch"))]
    {
        let _ = (job, comm);
        Err(ExecError::NotCompiled)
    }
}

/// Single-process reference: plain autograd on the whole global batch
/// (samples 0..`global_batch`), same initialisation (`seed`), data, summed
/// loss and Adam, for `steps` steps, CPU f32.
pub fn reference_train(
    model: &BlockConfig,
    global_batch: usize,
    steps: usize,
    adam: &AdamConfig,
    seed: u64,
) -> Result<ReferenceRun, ExecError> {
    #[cfg(feature = "torch")]
    {
        trainer::reference_train(model, global_batch, steps, adam, seed)
    }
    #[cfg(not(feature = "torch"))]
    {
        let _ = (model, global_batch, steps, adam, seed);
        Err(ExecError::NotCompiled)
    }
}

/// Profiles one block, the embedding and the head at each micro-batch size,
/// and the Adam step (one process).
pub fn profile_compute(cfg: &ProfileConfig) -> Result<ComputeProfile, ExecError> {
    #[cfg(feature = "torch")]
    {
        profiler::profile_compute(cfg)
    }
    #[cfg(not(feature = "torch"))]
    {
        let _ = cfg;
        Err(ExecError::NotCompiled)
    }
}

/// Whether libtorch sees a usable CUDA device (always `false` without the
/// `torch` feature or with a CPU-only libtorch).
pub fn cuda_available() -> bool {
    #[cfg(feature = "torch")]
    {
        tch::Cuda::is_available()
    }
    #[cfg(not(feature = "torch"))]
    {
        false
    }
}

/// Makes this process keep freed host memory for reuse: glibc's `malloc`
/// serves every block from its heap (no `mmap` per large block) and never
/// gives the heap's top back to the system (below 2 GiB).
///
/// Without it every large CPU tensor (a gathered unit, the logits, the
/// embedding's dense gradient, a gradient buffer: tens of MB for small
/// models) is a fresh `mmap` whose pages are faulted in and zeroed on first
/// touch, every iteration. That costs more than the arithmetic on small
/// models, and on a CPU it makes ranks of one host fight over memory
/// bandwidth. Keeping freed memory is what PyTorch's caching allocator does
/// on CUDA. The profiler and every rank call this first, so profiles and
/// runs see the same allocator. A no-op without the `torch` feature or
/// outside glibc.
pub fn keep_freed_memory() {
    #[cfg(all(feature = "torch", target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}

/// Whether this build can train and profile (`torch` and `mpi` features).
pub const COMPILED: bool = cfg!(all(feature = "torch", feature = "mpi"));
