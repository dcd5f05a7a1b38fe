//! Integration tests of `cephalo-exec`: the uneven-FSDP proof (3 MPI ranks
//! vs single-process training), fault handling, job rejection and the
//! profilers.
//!
//! Needs `--features torch,mpi` and `. scripts/exec-env.sh`. Built without
//! the features, the real-execution tests print why they skip. Built with
//! them but without a working `mpirun`, MPI tests skip, except under
//! `CI=true` where they fail.

mod validation;

#[cfg(all(feature = "torch", feature = "mpi"))]
mod parallel;
#[cfg(all(feature = "torch", feature = "mpi"))]
mod real;
