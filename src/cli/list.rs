//! `cephalo list gpus|models|planners|strategies`: what names this build
//! (plus `--gpu-catalog` / `--model-catalog`) understands, with the numbers
//! a user checks before trusting a plan (memory, peaks, parameter counts).

use crate::cli::format::{csv_of, Format};
use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use sim::listing::{
    gpu_rows, gpu_table, model_rows, model_table, planner_rows, planner_table, strategy_rows,
    strategy_table,
};
use std::process::ExitCode;

/// What to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// GPU types: memory, peak TFLOPS, links, price.
    Gpus,
    /// Models: shapes and parameter counts.
    Models,
    /// Planners (`--planner`, `compare` rows).
    Planners,
    /// Strategy axes and their values (`--sharding`, `--accumulation`, ...).
    Strategies,
}

/// Arguments of `cephalo list`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// What to list.
    #[arg(value_enum)]
    pub what: What,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// Runs `cephalo list`.
pub fn run(a: Args) -> Result<ExitCode> {
    match a.what {
        What::Gpus => emit(a.format, &gpu_rows(crate::load::gpus()), gpu_table),
        What::Models => emit(a.format, &model_rows(crate::load::models()), model_table),
        What::Planners => emit(a.format, &planner_rows(), planner_table),
        What::Strategies => emit(a.format, &strategy_rows(), strategy_table),
    }
}

fn emit<T: Serialize>(format: Format, rows: &[T], table: fn(&[T]) -> String) -> Result<ExitCode> {
    match format {
        Format::Table => out!("{}", table(rows)),
        Format::Json => out!("{}", crate::cli::format::json_rows("cephalo-list/1", rows)?),
        Format::Csv => out!("{}", csv_of(rows)?),
    }
    Ok(ExitCode::SUCCESS)
}
