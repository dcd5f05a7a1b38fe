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

/// The JSON of a command whose output is a list of rows: `{"format":
/// "<tag>", "rows": [...]}`, pretty, newline-terminated, so every JSON
/// output carries its schema version (`tag`, e.g. `cephalo-list/1`).
pub fn json_rows<T: Serialize>(tag: &str, rows: &[T]) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Rows<'a, T> {
        format: &'a str,
        rows: &'a [T],
    }
    let mut s = serde_json::to_string_pretty(&Rows { format: tag, rows })?;
    s.push('\n');
    Ok(s)
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
