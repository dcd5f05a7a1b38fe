//! DeepSpeed's step lines (0.19.8): the pipeline engine's
//! `steps: 10 loss: 2.1 iter time (s): 1.234 samples/sec: 25.9`
//! (`runtime/pipe/engine.py`; samples/s of the global batch) and the
//! ThroughputTimer's `epoch=0/micro_step=10/global_step=10,
//! RunningAvgSamplesPerSec=25.6, CurrSamplesPerSec=26.1, MemAllocated=4.2GB,
//! MaxMemAllocated=6.5GB` (`utils/timer.py`; the memory is bytes / 1024^3,
//! GiB despite the label). Lines of one step merge.

use super::record::{after, after_ws, clean, number, step_number, Record};
use crate::error::SpecError;
use crate::physical::{MEM_GIB, OP_MS, THROUGHPUT_PER_S};

/// The step records of a DeepSpeed log.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Record>, SpecError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = clean(raw);
        let n = i + 1;
        if line.contains("iter time (s):") {
            let mut r = Record {
                line: n,
                ..Record::default()
            };
            if let Some(s) = after_ws(&line, "steps:") {
                r.step = Some(step_number(s, origin, n)?);
            }
            let s = number(
                after_ws(&line, "iter time (s):").unwrap_or(""),
                origin,
                n,
                "iter time (s)",
                &OP_MS,
            )?;
            r.iteration_ms = Some(number(
                &(s * 1e3).to_string(),
                origin,
                n,
                "iter time (s)",
                &OP_MS,
            )?);
            if let Some(v) = after_ws(&line, "samples/sec:") {
                r.samples_per_s = Some(number(v, origin, n, "samples/sec", &THROUGHPUT_PER_S)?);
            }
            out.push(r);
        } else if line.contains("CurrSamplesPerSec=") {
            let step = after(&line, "global_step=").unwrap_or("");
            let mut r = Record {
                line: n,
                step: Some(step_number(step, origin, n)?),
                ..Record::default()
            };
            r.samples_per_s = Some(number(
                after(&line, "CurrSamplesPerSec=").unwrap_or(""),
                origin,
                n,
                "CurrSamplesPerSec",
                &THROUGHPUT_PER_S,
            )?);
            if let Some(m) = after(&line, "MaxMemAllocated=") {
                r.peak_mem_gib = Some(number(
                    m.trim_end_matches("GB"),
                    origin,
                    n,
                    "MaxMemAllocated",
                    &MEM_GIB,
                )?);
            }
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_both_line_kinds() {
        let t = "[2025-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=25.6, CurrSamplesPerSec=26.1, MemAllocated=4.2GB, MaxMemAllocated=6.5GB\nsteps: 10 loss: 2.1000 iter time (s): 1.234 samples/sec: 25.930\n";
        let r = parse(t, "f").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].peak_mem_gib, Some(6.5));
        assert_eq!(r[1].iteration_ms, Some(1234.0));
        let (_, merged) = crate::runlog::parse(t, None, "f").unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].iteration_ms, Some(1234.0));
        assert_eq!(merged[0].samples_per_s, Some(26.1));
    }

    #[test]
    fn hostile_lines_name_the_line() {
        for t in [
            "steps: 1 loss: 2 iter time (s): abc samples/sec: 1\n",
            "steps: 1 loss: 2 iter time (s): -1 samples/sec: 1\n",
            "steps: 1 loss: 2 iter time (s):",
            "epoch=0/micro_step=1/global_step=1, CurrSamplesPerSec=inf, MaxMemAllocated=1GB\n",
            "epoch=0/micro_step=1/global_step=1, CurrSamplesPerSec=1, MaxMemAllocated=1e9GB\n",
        ] {
            let e = parse(t, "d.log").unwrap_err().to_string();
            assert!(e.contains("d.log:"), "{t:?}: {e}");
        }
    }
}
