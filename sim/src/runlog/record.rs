//! One logged step ([`Record`]) and the line helpers every log parser
//! shares: ANSI colours stripped, the token after a key, numbers checked
//! against their physical range with the file and line named. Units: ms,
//! tokens/s, GiB, MFU as a fraction.

use crate::error::SpecError;
use crate::physical::{self, Range};
use serde::Serialize;

/// One logged step (what a line or block says; `None`: not printed).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Record {
    /// 1-based line of the log where the step was printed.
    pub line: usize,
    /// The step (iteration) number, when printed.
    pub step: Option<u64>,
    /// Iteration time, ms.
    pub iteration_ms: Option<f64>,
    /// Throughput of all GPUs, tokens/s.
    pub tokens_per_s: Option<f64>,
    /// Throughput per GPU, tokens/s.
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Throughput of all GPUs, samples/s.
    pub samples_per_s: Option<f64>,
    /// Iterations (batches) per second.
    pub batches_per_s: Option<f64>,
    /// Peak memory of the logging rank, GiB.
    pub peak_mem_gib: Option<f64>,
    /// Model FLOPs utilisation, fraction (0..1).
    pub mfu: Option<f64>,
}

impl Record {
    /// `other`'s figures where this record has none.
    pub(crate) fn merge(&mut self, other: &Record) {
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = other.$f; } )* };
        }
        fill!(
            iteration_ms,
            tokens_per_s,
            tokens_per_s_per_gpu,
            samples_per_s,
            batches_per_s,
            peak_mem_gib,
            mfu
        );
    }
}

/// `line` without ANSI colour sequences (`ESC [ ... m`) and control
/// characters other than tabs.
pub(crate) fn clean(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        if c.is_control() && c != '\t' {
            continue;
        }
        out.push(c);
    }
    out
}

/// The token after `key` in `line` (spaces skipped; up to whitespace, `|`
/// or `,`): `None` when `key` is absent, `Some("")` when nothing follows.
pub(crate) fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    let rest = line[i + key.len()..].trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '|' || c == ',')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The token after `key` in `line` up to whitespace only (`6,543` stays
/// whole).
pub(crate) fn after_ws<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    let rest = line[i + key.len()..].trim_start();
    Some(rest.split_whitespace().next().unwrap_or(""))
}

/// `tok` as a number in `range` (thousands separators `,` are removed by
/// the caller), or an error at `origin:line` naming `field`.
pub(crate) fn number(
    tok: &str,
    origin: &str,
    line: usize,
    field: &str,
    range: &Range,
) -> Result<f64, SpecError> {
    let at = format!("{origin}:{line}");
    let v: f64 = tok.parse().map_err(|_| {
        SpecError::invalid(
            &at,
            field,
            format!(
                "expected a number, got `{}`",
                tok.chars().take(40).collect::<String>()
            ),
        )
    })?;
    physical::check(&at, field, v, range)
}

/// A whole step number, or an error at `origin:line`.
pub(crate) fn step_number(tok: &str, origin: &str, line: usize) -> Result<u64, SpecError> {
    tok.parse::<u64>().map_err(|_| {
        SpecError::invalid(
            format!("{origin}:{line}"),
            "step",
            format!(
                "expected a whole step number, got `{}`",
                tok.chars().take(40).collect::<String>()
            ),
        )
    })
}

/// A percentage as a log prints it: 0 to 100.
pub(crate) const PERCENT: Range = Range {
    lo: 0.0,
    lo_inclusive: true,
    hi: 100.0,
    unit: "%",
    why: "no GPU runs above its peak",
};

/// GB (10^9 bytes) in GiB.
pub(crate) const GIB_PER_GB: f64 = 1e9 / (1u64 << 30) as f64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning_and_tokens() {
        assert_eq!(clean("\u{1b}[31mstep: 1\u{1b}[0m\u{7}"), "step: 1");
        assert_eq!(after("a tps: 6,543  x", "tps:"), Some("6"));
        assert_eq!(after("a | b: 1.5 | c", "b:"), Some("1.5"));
        assert_eq!(after("end b:", "b:"), Some(""));
        let r = physical::MFU;
        assert!(number("NaN", "f", 3, "mfu", &r).is_err());
        assert!(number("1e400", "f", 3, "mfu", &r).is_err());
        let e = number("abc", "f", 3, "mfu", &r).unwrap_err().to_string();
        assert!(e.contains("f:3") && e.contains("mfu"), "{e}");
    }
}
