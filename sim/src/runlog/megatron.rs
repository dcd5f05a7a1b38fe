//! Megatron-LM's training log (`megatron/training/training.py`,
//! `training_log`): ` iteration       10/     100 | consumed samples:
//! 640 | elapsed time per iteration (ms): 1234.5 | ... | global batch
//! size:    64 | lm loss: ... |` and, once, `[Rank 0] (after 10
//! iterations) memory (MB) | allocated: ... | max allocated: 2345.6 | ...`
//! (MiB: bytes / 1024 / 1024), attached to the step printed before it.

use super::record::{after_ws, clean, number, step_number, Record};
use crate::error::SpecError;
use crate::physical::{MEM_GIB, OP_MS, THROUGHPUT_PER_S};

/// The step records of a Megatron-LM log.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Record>, SpecError> {
    let mut out: Vec<Record> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = clean(raw);
        let n = i + 1;
        if line.contains("elapsed time per iteration (ms):") {
            let it = after_ws(&line, "iteration").unwrap_or("");
            let step = step_number(it.split('/').next().unwrap_or(""), origin, n)?;
            let ms = number(
                after_ws(&line, "elapsed time per iteration (ms):").unwrap_or(""),
                origin,
                n,
                "elapsed time per iteration (ms)",
                &OP_MS,
            )?;
            let mut r = Record {
                line: n,
                step: Some(step),
                iteration_ms: Some(ms),
                ..Record::default()
            };
            if let Some(g) = after_ws(&line, "global batch size:") {
                let g = number(g, origin, n, "global batch size", &THROUGHPUT_PER_S)?;
                r.samples_per_s = Some(g / (ms / 1e3));
            }
            out.push(r);
        } else if line.contains("memory (MB)") && line.contains("max allocated:") {
            let mib = number(
                after_ws(&line, "max allocated:").unwrap_or(""),
                origin,
                n,
                "max allocated",
                &MEM_GIB,
            )?;
            if let Some(last) = out.last_mut() {
                last.peak_mem_gib = Some(mib / 1024.0);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_iterations_and_memory() {
        let t = " [2025-01-01 00:00:00] iteration       10/     100 | consumed samples:          640 | elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 150.2 | learning rate: 1.0E-04 | global batch size:    64 | lm loss: 7.1E+00 | loss scale: 1.0 | grad norm: 1.2 | number of skipped iterations:   0 | number of nan iterations:   0 |\n[Rank 0] (after 10 iterations) memory (MB) | allocated: 1000.0 | max allocated: 2048.0 | reserved: 3000.0 | max reserved: 3000.0\n";
        let r = parse(t, "f").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].step, Some(10));
        assert_eq!(r[0].iteration_ms, Some(1234.5));
        assert_eq!(r[0].peak_mem_gib, Some(2.0));
        assert!((r[0].samples_per_s.unwrap() - 64.0 / 1.2345).abs() < 1e-9);
    }

    #[test]
    fn hostile_lines_name_the_line() {
        for t in [
            " iteration       x/     100 | elapsed time per iteration (ms): 1.0 |\n",
            " iteration       1/     100 | elapsed time per iteration (ms): 0 |\n",
            " iteration       1/     100 | elapsed time per iteration (ms): 99999999999999999999 |\n",
            " iteration       1/     100 | elapsed time per iteration (ms):",
        ] {
            let e = parse(t, "m.log").unwrap_err().to_string();
            assert!(e.contains("m.log:1"), "{t:?}: {e}");
        }
    }
}
