//! Subcommands: one file each, with its clap `Args` and a `run`.

pub mod calibrate;
pub mod comm;
pub mod compare;
pub mod experiment;
pub mod format;
pub mod from_log;
pub mod list;
pub mod notes;
pub mod plan;
pub mod predict;
#[cfg(feature = "exec")]
pub mod profile;
pub mod progress;
pub mod simulate;
#[cfg(feature = "exec")]
pub mod validate;
pub mod whatif;
pub mod workload;

use crate::error::UserError;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Plan, simulate and validate FSDP training on heterogeneous GPU clusters.
#[derive(Debug, Parser)]
#[command(name = "cephalo", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
    /// Extra GPU types (TOML `[[gpu]]` tables, the format of
    /// profiles/gpus.toml); an entry with a built-in name replaces it.
    #[arg(long, global = true, value_name = "FILE")]
    pub gpu_catalog: Option<PathBuf>,
    /// Extra models (TOML `[[model]]` tables, the format of
    /// profiles/models.toml); an entry with a built-in name replaces it.
    #[arg(long, global = true, value_name = "FILE")]
    pub model_catalog: Option<PathBuf>,
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
    /// What-if questions: train-cost --tokens N | min-gpus.
    Whatif(whatif::Args),
    /// Studies one command away: list, run NAME | --all, merge shards.
    Experiment(experiment::Args),
    /// What names this build understands: gpus | models | planners | strategies.
    List(list::Args),
    /// Shell completions: `cephalo completions bash > /etc/bash_completion.d/cephalo`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Measure a device (compute, memory, collectives) into a cephalo-profile/1 file.
    #[cfg(feature = "exec")]
    Profile(profile::Args),
    /// Compare predicted vs measured: train for real (exec builds), or read
    /// a torchtitan / llm-foundry / DeepSpeed / Megatron-LM log
    /// (`--from-log FILE`, every build; `validate --from-log x --help`).
    #[command(disable_help_flag = true)]
    Validate(from_log::ValidateArgs),
    /// One MPI rank of a real run (started by `validate` / `profile`).
    #[cfg(feature = "exec")]
    #[command(name = "exec-rank", hide = true)]
    ExecRank(validate::RankArgs),
    /// Measure a device (needs a build with `--features exec`; this one has none).
    #[cfg(not(feature = "exec"))]
    #[command(disable_help_flag = true)]
    Profile(NoExec),
}

/// The arguments of a real-execution subcommand in a build without it:
/// anything, so the user gets the build hint instead of a flag error.
#[cfg(not(feature = "exec"))]
#[derive(Debug, clap::Args)]
pub struct NoExec {
    /// Ignored.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<String>,
}

/// How to get `profile` / `validate`: what `scripts/exec-env.sh` sets up.
#[cfg(not(feature = "exec"))]
fn no_exec(command: &str) -> anyhow::Result<ExitCode> {
    Err(UserError(format!(
        "`cephalo {command}` runs training for real (libtorch + MPI) and this binary was built without it. \
         Build it with: `. scripts/exec-env.sh && cargo build --release --features exec` \
         (add `cuda` for GPUs: --features cuda); exec/README.md says more"
    ))
    .into())
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // A study is reproducible from its spec alone: the library runs it on
    // the built-in catalogs, so extra ones would be silently ignored.
    if matches!(cli.command, Command::Experiment(_))
        && (cli.gpu_catalog.is_some() || cli.model_catalog.is_some())
    {
        return Err(UserError(
            "--gpu-catalog / --model-catalog: experiments run on the built-in catalogs (a study must be reproducible from its spec); use them with simulate, plan, compare, predict or list".into(),
        )
        .into());
    }
    for note in
        crate::load::install_catalogs(cli.gpu_catalog.as_deref(), cli.model_catalog.as_deref())?
    {
        eprintln!("note: {note}");
    }
    match cli.command {
        Command::List(a) => list::run(a),
        Command::Completions { shell } => {
            let mut buf = Vec::new();
            // `validate` passes its flags through to one of two parsers:
            // complete the flags of both.
            let mut cmd =
                Cli::command().mut_subcommand("validate", |_| from_log::completion_command());
            clap_complete::generate(shell, &mut cmd, "cephalo", &mut buf);
            out!("{}", String::from_utf8_lossy(&buf));
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(not(feature = "exec"))]
        Command::Profile(_) => no_exec("profile"),
        Command::Validate(a) => from_log::dispatch(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Predict(a) => predict::run(a),
        Command::Comm(a) => comm::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Whatif(a) => whatif::run(a),
        Command::Experiment(a) => experiment::run(a),
        #[cfg(feature = "exec")]
        Command::Profile(a) => profile::run(a),
        #[cfg(feature = "exec")]
        Command::ExecRank(a) => validate::run_rank(a),
    }
}
