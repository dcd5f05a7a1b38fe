//! torchtitan's metrics line (`torchtitan/components/metrics.py`, 0.2.2):
//! `step: 10  loss:  7.8235  grad_norm: 1.2  memory: 39.27GiB(41.33%)
//! tps: 6,543  tflops: 302.12  mfu: 30.55%`, with ANSI colours and any
//! prefix (`[rank0]:`, a timestamp). `memory` is the allocator's reserved
//! peak in GiB, `tps` tokens per second per device (over the non-data-
//! parallel degree too), `mfu` a percentage. Validation lines (`validate
//! step:`) are skipped. The step time is not printed.

use super::record::{after_ws, clean, number, step_number, Record};
use crate::error::SpecError;
use crate::physical::{MEM_GIB, THROUGHPUT_PER_S};

/// The step records of a torchtitan log. A line with `step:` and `loss:`
/// but no `tps:` is an error (a truncated line).
pub fn parse(text: &str, origin: &str) -> Result<Vec<Record>, SpecError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = clean(raw);
        let n = i + 1;
        if line.contains("validate") || !line.contains("step:") {
            continue;
        }
        let has_tps = line.contains("tps:");
        if !has_tps {
            if line.contains("loss:") {
                return Err(SpecError::invalid(
                    format!("{origin}:{n}"),
                    "tps",
                    "expected `tps: N` on a torchtitan step line (is the line truncated?)",
                ));
            }
            continue;
        }
        let step = step_number(after_ws(&line, "step:").unwrap_or(""), origin, n)?;
        let tps = after_ws(&line, "tps:").unwrap_or("").replace(',', "");
        let mut r = Record {
            line: n,
            step: Some(step),
            tokens_per_s_per_gpu: Some(number(&tps, origin, n, "tps", &THROUGHPUT_PER_S)?),
            ..Record::default()
        };
        if let Some(m) = after_ws(&line, "memory:") {
            let v = m.split("GiB").next().unwrap_or("");
            r.peak_mem_gib = Some(number(v, origin, n, "memory", &MEM_GIB)?);
        }
        if let Some(m) = after_ws(&line, "mfu:") {
            let pct = number(
                m.trim_end_matches('%'),
                origin,
                n,
                "mfu",
                &super::record::PERCENT,
            )?;
            r.mfu = Some(pct / 100.0);
        }
        out.push(r);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_coloured_prefixed_lines() {
        let t = "[rank0]:[titan] 2025-01-01 12:00:00,000 - root - INFO - \u{1b}[31mstep: 10  \u{1b}[32mloss:  7.8235  \u{1b}[33mgrad_norm:  1.2000  \u{1b}[36mmemory: 39.27GiB(41.33%)  \u{1b}[34mtps: 6,543  \u{1b}[36mtflops: 302.12  \u{1b}[35mmfu: 30.55%\u{1b}[39m\n[rank0]: validate step: 10  loss: 7.0  memory: 1GiB(1%)  tps: 5\n";
        let r = parse(t, "f").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].step, Some(10));
        assert_eq!(r[0].tokens_per_s_per_gpu, Some(6543.0));
        assert_eq!(r[0].peak_mem_gib, Some(39.27));
        assert!((r[0].mfu.unwrap() - 0.3055).abs() < 1e-12);
    }

    #[test]
    fn hostile_lines_name_the_line() {
        for (t, field) in [
            (
                "step: 1  loss: 2\nstep: 2  loss: 3  memory: 1GiB(1%)  tps: NaN\n",
                "tps",
            ),
            ("step: 1  loss: 2  memory: 1GiB(1%)  tps: 1e999\n", "tps"),
            ("step: 1  loss: 2  memory: xxGiB(1%)  tps: 10\n", "memory"),
            ("step: x  loss: 2  tps: 10\n", "step"),
            ("step: 1  loss: 2  tps: 10  mfu: 300%\n", "mfu"),
            ("step: 1  loss: 2  mem", "tps"),
        ] {
            let e = parse(t, "run.log").unwrap_err().to_string();
            assert!(e.contains("run.log:") && e.contains(field), "{t:?}: {e}");
        }
        assert!(parse("\u{0}\u{1}\u{fffd}\u{fffd}step", "f")
            .unwrap()
            .is_empty());
    }
}
