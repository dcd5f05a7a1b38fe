//! Subcommands: one file each, with its clap `Args` and a `run`.

pub mod calibrate;
pub mod comm;
pub mod compare;
pub mod experiment;
pub mod format;
pub mod notes;
pub mod plan;
pub mod predict;
#[cfg(feature = "exec")]
pub mod profile;
pub mod simulate;
#[cfg(feature = "exec")]
pub mod validate;
pub mod workload;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Plan, simulate and validate FSDP training on heterogeneous GPU clusters.
#[derive(Debug, Parser)]
#[command(name = "cephalo", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate one training iteration of a plan on a cluster.
    Simulate(simulate::Args),
    /// Choose a plan with one planner (default: Cephalo) and simulate it.
    Plan(plan::Args),
    /// Run every planner on one workload and compare the simulated plans.
    Compare(compare::Args),
    /// Fit the performance model to measured profiles and cross-validate it.
    Calibrate(calibrate::Args),
    /// Predict per-block forward/backward ms and activation memory.
    Predict(predict::Args),
    /// The nccl-tests of a cluster spec: time, algbw and busbw per buffer size.
    Comm(comm::Args),
    /// Studies one command away: list, run NAME | --all, merge shards.
    Experiment(experiment::Args),
    /// Measure a device (compute, memory, collectives) into a cephalo-profile/1 file.
    #[cfg(feature = "exec")]
    Profile(profile::Args),
    /// Profile, plan, simulate, train for real and compare predicted vs measured.
    #[cfg(feature = "exec")]
    Validate(validate::Args),
    /// One MPI rank of a real run (started by `validate` / `profile`).
    #[cfg(feature = "exec")]
    #[command(name = "exec-rank", hide = true)]
    ExecRank(validate::RankArgs),
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Simulate(a) => simulate::run(a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Predict(a) => predict::run(a),
        Command::Comm(a) => comm::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Experiment(a) => experiment::run(a),
        #[cfg(feature = "exec")]
        Command::Profile(a) => profile::run(a),
        #[cfg(feature = "exec")]
        Command::Validate(a) => validate::run(a),
        #[cfg(feature = "exec")]
        Command::ExecRank(a) => validate::run_rank(a),
    }
}

/// An error the user caused (bad input, infeasible workload): exit code 2.
#[derive(Debug)]
pub struct UserError(pub String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// Exit code for an error: 2 for input / plan / infeasibility errors, else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let user = e.chain().any(|c| {
        c.is::<UserError>()
            || c.is::<sim::error::SpecError>()
            || c.is::<sim::error::PlanError>()
            || c.is::<clap::Error>()
    });
    if user {
        2
    } else {
        1
    }
}
