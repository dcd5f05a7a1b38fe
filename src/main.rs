//! `cephalo`: plan, simulate and validate FSDP training on heterogeneous GPU clusters.
//!
//! Parses the command line, dispatches to one subcommand under `cli/`, and
//! turns errors into exit codes: 0 success (an out-of-memory plan is a valid
//! answer), 2 bad input or infeasible workload, 1 internal failure.

#[macro_use]
mod out;
mod cli;
mod error;
mod load;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        // `| head` closed the pipe: the reader has what it wanted.
        Err(e) if e.is::<out::ClosedStdout>() => ExitCode::SUCCESS,
        Err(e) => {
            let e = error::with_flags(e);
            eprintln!("error: {e:#}");
            ExitCode::from(error::exit_code(&e))
        }
    }
}
