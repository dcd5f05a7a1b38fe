//! `cephalo comm`: the nccl-tests of a cluster spec. Prints, per buffer
//! size, `size_bytes`, `time_us`, `algbw_gb_s` and `busbw_gb_s` of one
//! collective over the chosen ranks, from the same communication model the
//! simulator uses (analytic, or the `--comm-profile` tables), so it can be
//! held against a real nccl-tests run. JSON: an array of rows with exactly
//! those keys.

use crate::cli::workload::CommArgs;
use crate::error::UserError;
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::comm::CollectiveKind;
use sim::session::{comm_sweep, comm_table};
use std::process::ExitCode;

pub use crate::cli::format::Format;

/// Flags of `cephalo comm`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The cluster.
    #[command(flatten)]
    pub cluster: crate::cli::workload::ClusterArgs,
    /// Collective: all-gather | reduce-scatter | all-reduce | all-to-all.
    #[arg(long)]
    pub op: String,
    /// Buffer sizes (nccl-tests' size), comma-separated; suffixes K, M, G
    /// are powers of 1024 as in nccl-tests (`1M,64M,1G`).
    #[arg(long, default_value = "1M,16M,64M,256M,1G", allow_hyphen_values = true)]
    pub sizes: String,
    /// Ranks in ring order: a list with ranges (`0-7,16-23`); default all.
    #[arg(long, allow_hyphen_values = true)]
    pub ranks: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Communication-model flags.
    #[command(flatten)]
    pub comm: CommArgs,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    let cluster = args.cluster.load()?;
    let kind = CollectiveKind::parse(&args.op.replace('-', "_")).ok_or_else(|| {
        UserError(format!(
            "--op: expected {}, got `{}`",
            CollectiveKind::names(true),
            args.op
        ))
    })?;
    let sizes = sim::lists::byte_sizes(&args.sizes, "--sizes", 1e15)?;
    let ranks = match &args.ranks {
        Some(s) => sim::lists::ranks(s, "--ranks", 1 << 20)?,
        None => (0..cluster.len()).collect(),
    };
    let profiles = args.comm.profiles()?;
    let comm = sim::cost::comm_model(&cluster, args.comm.algo()?, &profiles)?;
    let rows = comm_sweep(&cluster, comm.as_ref(), kind, &ranks, &sizes)?;
    match args.format {
        Format::Table => {
            outln!(
                "# {} over {} ranks of {} ({})",
                kind.name(),
                ranks.len(),
                cluster.name,
                comm.describe()
            );
            out!("{}", comm_table(&rows));
        }
        Format::Json => out!(
            "{}",
            crate::cli::format::json_rows("cephalo-comm/1", &rows)?
        ),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&rows)?),
    }
    Ok(ExitCode::SUCCESS)
}
