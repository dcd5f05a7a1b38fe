//! The output formats every command offers on stdout (`--format`), and CSV
//! of flat rows.

use clap::ValueEnum;
use serde::Serialize;

/// Output format on stdout: the same three on every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable table and summary.
    Table,
    /// JSON (each command documents its schema).
    Json,
    /// CSV: one row per GPU (or per size / metric), header first.
    Csv,
}

/// CSV of `rows` (flat records: numbers, strings, booleans, options): a
/// header of the field names in declaration order, then one line per row
/// (the `csv` crate quotes where needed).
pub fn csv_of<T: Serialize>(rows: &[T]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
