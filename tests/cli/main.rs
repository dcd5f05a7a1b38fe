//! End-to-end tests of the `cephalo` command line (one binary).

mod comm;
mod common;
mod experiment;
mod explain;
mod export;
mod from_log;
mod fuzz;
mod fuzz_surfaces;
mod golden;
mod inputs;
mod outputs;
mod pipeline;
mod plan;
mod predict;
mod simulate;
mod slurm;
mod strategy;
mod whatif;
// Real execution: compiled with `--features exec` only (the feature-less
// build has no `validate` / `profile` subcommands); there, a missing
// mpirun fails the tests under CI=true.
#[cfg(feature = "exec")]
mod validate;
