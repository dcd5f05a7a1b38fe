//! `exec`: real execution of cephalo plans (profiler, trainer, validator).
//!
//! tch and MPI sit behind the `torch` and `mpi` features; without them the
//! public API returns [`ExecError::NotCompiled`].
#![warn(missing_docs, missing_debug_implementations)]

/// Errors of real execution.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The binary was built without the features real execution needs.
    #[error("real execution is not compiled in: rebuild with `--features exec` (see README)")]
    NotCompiled,
}
