//! Training logs of real frameworks read into measured figures: step time,
//! throughput, peak memory and MFU as torchtitan, llm-foundry (Composer's
//! console logger), DeepSpeed and Megatron-LM print them, so a run made
//! without cephalo can be compared with the simulator's prediction
//! (`cephalo validate --from-log`).
//!
//! One parser per format ([`torchtitan`], [`composer`], [`deepspeed`],
//! [`megatron`]), each taking the log's text (no I/O) and returning
//! [`Record`]s, one per logged step; [`detect`] picks the format with the
//! most step lines; [`summarize`] merges records of one step, skips the
//! warm-up steps and takes the median of each figure over the rest,
//! deriving what a log does not print from what it does and the run's
//! workload ([`RunShape`]); [`compare`] sets them beside the simulator's
//! prediction (which memory each format logs, the errors). Errors name the
//! origin (the file), the line and what was expected. Units: ms, tokens/s, GiB, MFU as a fraction.

pub mod compare;
pub mod composer;
pub mod deepspeed;
pub mod megatron;
pub mod record;
pub mod torchtitan;

use crate::error::SpecError;
pub use record::Record;
use serde::Serialize;

/// A log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// torchtitan's metrics line (`step: 10  loss: ...  tps: 6,543 ...`).
    Torchtitan,
    /// llm-foundry / Composer's console logger (`[batch=10/100]:` blocks).
    Composer,
    /// DeepSpeed's engine and ThroughputTimer lines.
    Deepspeed,
    /// Megatron-LM's `iteration N/M | ...` lines.
    Megatron,
}

impl LogFormat {
    /// Every format, in detection order.
    pub const ALL: [LogFormat; 4] = [
        LogFormat::Torchtitan,
        LogFormat::Composer,
        LogFormat::Deepspeed,
        LogFormat::Megatron,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Torchtitan => "torchtitan",
            LogFormat::Composer => "composer",
            LogFormat::Deepspeed => "deepspeed",
            LogFormat::Megatron => "megatron",
        }
    }

    /// Parses a name (`llm-foundry` is Composer's).
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "torchtitan" => Some(LogFormat::Torchtitan),
            "composer" | "llm-foundry" | "llmfoundry" | "mosaic" => Some(LogFormat::Composer),
            "deepspeed" => Some(LogFormat::Deepspeed),
            "megatron" | "megatron-lm" => Some(LogFormat::Megatron),
            _ => None,
        }
    }

    /// The step line it expects, for errors.
    pub fn expected(self) -> &'static str {
        match self {
            LogFormat::Torchtitan => "a torchtitan step line (`step: 10  loss: 7.8  memory: 39.27GiB(41.33%)  tps: 6,543  tflops: 302.12  mfu: 30.55%`)",
            LogFormat::Composer => "a Composer console block (`[batch=10/100]:` then indented `Train throughput/...: value` lines)",
            LogFormat::Deepspeed => "a DeepSpeed step line (`steps: 10 loss: 2.1 iter time (s): 1.234 samples/sec: 25.9` or `epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., MemAllocated=...GB, MaxMemAllocated=...GB`)",
            LogFormat::Megatron => "a Megatron-LM line (` iteration 10/ 100 | ... | elapsed time per iteration (ms): 1234.5 | ...`)",
        }
    }

    fn parse_text(self, text: &str, origin: &str) -> Result<Vec<Record>, SpecError> {
        match self {
            LogFormat::Torchtitan => torchtitan::parse(text, origin),
            LogFormat::Composer => composer::parse(text, origin),
            LogFormat::Deepspeed => deepspeed::parse(text, origin),
            LogFormat::Megatron => megatron::parse(text, origin),
        }
    }
}

/// The run a log came from, as far as turning its figures into each other
/// needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunShape {
    /// GPUs of the run.
    pub gpus: u32,
    /// Global batch, samples per iteration.
    pub global_batch: u32,
    /// Tokens per sample.
    pub seq_len: u32,
}

/// A log's measured figures: the median of each over the steps after the
/// warm-up (`None`: the log neither prints it nor anything it follows from).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// The log's format.
    pub format: LogFormat,
    /// Step records found (after merging records of one step).
    pub steps_logged: usize,
    /// Records skipped as warm-up.
    pub warmup_skipped: usize,
    /// Records the medians are taken over.
    pub steps_used: usize,
    /// Iteration time, ms.
    pub iteration_ms: Option<f64>,
    /// Throughput of all GPUs, tokens/s.
    pub tokens_per_s: Option<f64>,
    /// Throughput per GPU, tokens/s.
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Peak memory of the logging rank, GiB (the largest over the steps
    /// used; torchtitan logs the allocator's reserved peak, the others the
    /// allocated peak).
    pub peak_mem_gib: Option<f64>,
    /// Model FLOPs utilisation, fraction.
    pub mfu: Option<f64>,
    /// What the log prints and what was derived from it, one sentence each.
    pub provenance: Vec<String>,
}

/// The format with the most step records in `text` (`None`: no format
/// recognises a step). A format whose parser fails on a line it recognised
/// counts as recognising it, so the error surfaces in [`parse`].
pub fn detect(text: &str) -> Option<LogFormat> {
    LogFormat::ALL
        .iter()
        .map(|&f| {
            let n = match f.parse_text(text, "") {
                Ok(v) => v.len(),
                Err(_) => usize::MAX,
            };
            (f, n)
        })
        .filter(|&(_, n)| n > 0)
        .max_by_key(|&(f, n)| (n, std::cmp::Reverse(f as u8)))
        .map(|(f, _)| f)
}

/// Parses `text` (from `origin`, e.g. the file's path) as `format` (`None`:
/// detected). Errors: an empty log, no recognisable step, or a recognised
/// step line whose number is not a number in range (origin `FILE:LINE`).
pub fn parse(
    text: &str,
    format: Option<LogFormat>,
    origin: &str,
) -> Result<(LogFormat, Vec<Record>), SpecError> {
    if text.trim().is_empty() {
        return Err(SpecError::invalid(
            origin,
            "log",
            "the log is empty: expected the training log of a run",
        ));
    }
    let format = match format.or_else(|| detect(text)) {
        Some(f) => f,
        None => {
            return Err(SpecError::invalid(
                origin,
                "log",
                format!(
                    "no recognisable step line in {} lines: expected one of {}",
                    text.lines().count(),
                    LogFormat::ALL
                        .iter()
                        .map(|f| f.expected())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ))
        }
    };
    let recs = format.parse_text(text, origin)?;
    if recs.is_empty() {
        let other = detect(text)
            .filter(|&f| f != format)
            .map_or(String::new(), |f| {
                format!(
                    " (it reads as a {} log: --log-format {})",
                    f.name(),
                    f.name()
                )
            });
        return Err(SpecError::invalid(
            origin,
            "log",
            format!(
                "no {} step line in {} lines: expected {}{other}",
                format.name(),
                text.lines().count(),
                format.expected()
            ),
        ));
    }
    Ok((format, merge_steps(recs)))
}

/// Records of one step number merged into its first (logs print a step's
/// figures on several lines), in log order.
fn merge_steps(recs: Vec<Record>) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for r in recs {
        match r
            .step
            .and_then(|s| out.iter_mut().find(|o| o.step == Some(s)))
        {
            Some(o) => o.merge(&r),
            None => out.push(r),
        }
    }
    out
}

/// The measured figures of `records` (from [`parse`]) after skipping the
/// first `warmup` steps, derived for a run of `shape`. Errors when no step
/// is left.
pub fn summarize(
    format: LogFormat,
    records: &[Record],
    warmup: usize,
    shape: RunShape,
    origin: &str,
) -> Result<Measured, SpecError> {
    if records.len() <= warmup {
        return Err(SpecError::invalid(
            origin,
            "log",
            format!(
                "{} logged step(s), all skipped as warm-up ({warmup}): expected more steps, or fewer skipped (--warmup-steps)",
                records.len()
            ),
        ));
    }
    let used = &records[warmup..];
    let tokens_per_step = f64::from(shape.global_batch) * f64::from(shape.seq_len);
    let gpus = f64::from(shape.gpus.max(1));
    let mut provenance = Vec::new();
    let first = &used[0];
    let says = |f: &str| provenance_line(format, f);
    for (have, what) in [
        (first.iteration_ms.is_some(), "iteration time"),
        (first.tokens_per_s.is_some(), "tokens/s of all GPUs"),
        (first.tokens_per_s_per_gpu.is_some(), "tokens/s per GPU"),
        (first.samples_per_s.is_some(), "samples/s of all GPUs"),
        (first.batches_per_s.is_some(), "iterations/s"),
        (first.peak_mem_gib.is_some(), "peak memory"),
        (first.mfu.is_some(), "MFU"),
    ] {
        if have {
            provenance.push(says(what));
        }
    }
    // Each step's total tokens/s and iteration time, from whichever the
    // step prints.
    let total = |r: &Record| {
        r.tokens_per_s
            .or(r.tokens_per_s_per_gpu.map(|t| t * gpus))
            .or(r.samples_per_s.map(|s| s * f64::from(shape.seq_len)))
            .or(r.iteration_ms.map(|ms| tokens_per_step / (ms / 1e3)))
            .or(r.batches_per_s.map(|b| b * tokens_per_step))
    };
    let iter_ms = |r: &Record| {
        r.iteration_ms
            .or(r.batches_per_s.map(|b| 1e3 / b))
            .or(total(r).map(|t| tokens_per_step / t * 1e3))
    };
    if first.iteration_ms.is_none() {
        provenance.push(format!(
            "iteration time derived: global batch {} x seq len {} tokens / tokens/s of all GPUs",
            shape.global_batch, shape.seq_len
        ));
    }
    if first.tokens_per_s.is_none() {
        provenance.push(if first.tokens_per_s_per_gpu.is_some() {
            format!(
                "tokens/s of all GPUs derived: per GPU x {} GPUs",
                shape.gpus
            )
        } else {
            "tokens/s of all GPUs derived from the iteration rate and global batch x seq len"
                .to_string()
        });
    }
    let col = |f: &dyn Fn(&Record) -> Option<f64>| crate::stats::median(used.iter().filter_map(f));
    let tokens_per_s = col(&total);
    let per_gpu = col(&|r: &Record| r.tokens_per_s_per_gpu.or(total(r).map(|t| t / gpus)));
    let peak = used
        .iter()
        .filter_map(|r| r.peak_mem_gib)
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
    Ok(Measured {
        format,
        steps_logged: records.len(),
        warmup_skipped: warmup,
        steps_used: used.len(),
        iteration_ms: col(&iter_ms),
        tokens_per_s,
        tokens_per_s_per_gpu: per_gpu,
        peak_mem_gib: peak,
        mfu: col(&|r: &Record| r.mfu),
        provenance,
    })
}

fn provenance_line(format: LogFormat, what: &str) -> String {
    let how = match (format, what) {
        (LogFormat::Torchtitan, "tokens/s per GPU") => " (`tps`: tokens per second per device)",
        (LogFormat::Torchtitan, "peak memory") => {
            " (`memory`: the caching allocator's reserved peak, GiB)"
        }
        (LogFormat::Composer, "peak memory") => {
            " (`Train memory/peak_allocated_mem`, GB converted to GiB)"
        }
        (LogFormat::Deepspeed, "peak memory") => " (`MaxMemAllocated`, GiB despite its `GB`)",
        (LogFormat::Megatron, "peak memory") => " (`max allocated`, MB = MiB)",
        _ => "",
    };
    format!("{} prints {what}{how}", format.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_every_format_and_refuses_junk() {
        let tt =
            "step:  1  loss: 9.1  memory: 10.00GiB(10.00%)  tps: 1,000  tflops: 1.00  mfu: 1.00%\n";
        assert_eq!(detect(tt), Some(LogFormat::Torchtitan));
        let ds = "steps: 1 loss: 2.1 iter time (s): 1.234 samples/sec: 25.9\n";
        assert_eq!(detect(ds), Some(LogFormat::Deepspeed));
        let mg = " iteration        1/     100 | consumed samples:           64 | elapsed time per iteration (ms): 1234.5 | global batch size:    64 |\n";
        assert_eq!(detect(mg), Some(LogFormat::Megatron));
        let cp = "[batch=1/10]:\n\t Train throughput/batches_per_sec: 0.5\n";
        assert_eq!(detect(cp), Some(LogFormat::Composer));
        assert_eq!(detect("hello\n\u{0}\u{1}\u{ff}garbage"), None);
        assert!(parse("", None, "f").is_err());
        let e = parse("hello\n", None, "f.log").unwrap_err().to_string();
        assert!(
            e.contains("f.log") && e.contains("no recognisable step"),
            "{e}"
        );
        let e = parse(ds, Some(LogFormat::Torchtitan), "f.log")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--log-format deepspeed"), "{e}");
    }

    #[test]
    fn medians_skip_warmup_and_derive() {
        let recs: Vec<Record> = [100.0, 10.0, 20.0, 30.0, 1000.0]
            .iter()
            .enumerate()
            .map(|(i, &t)| Record {
                line: i + 1,
                step: Some(i as u64 + 1),
                tokens_per_s_per_gpu: Some(t),
                ..Record::default()
            })
            .collect();
        let shape = RunShape {
            gpus: 4,
            global_batch: 8,
            seq_len: 100,
        };
        let m = summarize(LogFormat::Torchtitan, &recs, 1, shape, "f").unwrap();
        assert_eq!(m.steps_used, 4);
        assert_eq!(m.tokens_per_s_per_gpu, Some(25.0));
        assert_eq!(m.tokens_per_s, Some(100.0));
        // 800 tokens a step: per-step times 20, 10, 6.67 and 0.2 s, the
        // median of the middle two.
        assert!((m.iteration_ms.unwrap() - (10_000.0 + 20_000.0 / 3.0) / 2.0).abs() < 1e-6);
        assert!(summarize(LogFormat::Torchtitan, &recs, 5, shape, "f").is_err());
    }
}
