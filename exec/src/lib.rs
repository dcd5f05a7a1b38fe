//! `exec`: real execution of cephalo plans: an FSDP trainer with uneven
//! batches, layered gradient accumulation and uneven shards over MPI, a
//! trainer of pipelined and tensor-parallel (3D) plans, the
//! single-process reference they must match, and a profiler.
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
//!   dtype, Adam) and run it on `plan.len()` MPI ranks through `mpirun`
//!   (this machine or a hostfile's hosts) or `srun` ([`Launcher`]) and the
//!   `cephalo-exec-rank` binary (or any program calling [`rank_main`]);
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
//! - [`validation`]: what a `validate` run trains and predicts when none
//!   is given, and the thresholds of a disturbed measurement.
//!
//! Units throughout: ms, bytes, samples, f32 elements (see each module).
#![warn(missing_docs, missing_debug_implementations)]

pub mod alloc;
pub mod comm;
pub mod commprof;
pub mod config;
pub mod error;
pub mod launch;
pub mod layout;
pub mod report;
pub mod shard;
pub mod sim_glue;
pub mod validate_output;
pub mod validation;

#[cfg(feature = "torch")]
pub mod adam;
#[cfg(feature = "torch")]
mod host;
#[cfg(feature = "torch")]
pub mod model;
#[cfg(feature = "torch")]
mod profiler;
#[cfg(feature = "torch")]
mod records;
#[cfg(feature = "torch")]
mod stage_trainer;
#[cfg(feature = "torch")]
mod tensor_parallel;
#[cfg(feature = "torch")]
mod trainer;

pub use comm::{Collectives, SelfComm};
pub use commprof::{profile_collectives, CollectiveConfig};
pub use config::{
    AdamConfig, BlockConfig, BlockKind, DeviceKind, Fault, FaultKind, InRunProfile, Job,
    ProfileConfig, RankPlan,
};
pub use launch::{
    launch, launch_collectives, launch_compute, rank_main, LaunchOptions, Launcher, RankOutput,
    RankTask,
};
pub use report::{
    CollectiveOp, CollectiveTiming, ComputeProfile, IterationRecord, PassTiming, RankIteration,
    ReferenceRun, TrainReport,
};

pub use alloc::keep_freed_memory;
#[cfg(feature = "mpi")]
pub use comm::MpiComm;
pub use error::ExecError;
pub use sim::precision::NumFormat;

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

/// Whether this build can train and profile (`torch` and `mpi` features).
pub const COMPILED: bool = cfg!(all(feature = "torch", feature = "mpi"));
