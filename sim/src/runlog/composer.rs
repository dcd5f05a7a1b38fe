//! llm-foundry's logs: Composer's console logger
//! (`composer/loggers/console_logger.py`) prints a block per logged batch,
//! `[batch=10/100]:` (after an optional `[epoch=1]`) and then one indented
//! `Name: value` line per metric. Read: `Train throughput/batches_per_sec`,
//! `Train throughput/samples_per_sec` and `Train throughput/tokens_per_sec`
//! (all devices), `Train throughput/device/tokens_per_sec`,
//! `Train throughput/device/mfu` (a fraction) and
//! `Train memory/peak_allocated_mem` (GB, 10^9 bytes). Blocks with none of
//! them (the speed monitor's window still filling) are not steps.

use super::record::{clean, number, step_number, Record, GIB_PER_GB};
use crate::error::SpecError;
use crate::physical::{MEM_GIB, MFU, THROUGHPUT_PER_S};

/// The step records of a Composer console log.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Record>, SpecError> {
    let mut out = Vec::new();
    let mut cur: Option<Record> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = clean(raw);
        let n = i + 1;
        if let Some(pos) = line.find("[batch=") {
            flush(&mut cur, &mut out);
            let rest = &line[pos + "[batch=".len()..];
            let num = rest.split(['/', ']']).next().unwrap_or("");
            cur = Some(Record {
                line: n,
                step: Some(step_number(num.trim(), origin, n)?),
                ..Record::default()
            });
            continue;
        }
        let Some(r) = cur.as_mut() else { continue };
        if !line.starts_with([' ', '\t']) {
            flush(&mut cur, &mut out);
            continue;
        }
        let Some((key, val)) = line.trim().split_once(':') else {
            continue;
        };
        let val = val.split_whitespace().next().unwrap_or("");
        let field = key.trim();
        let thr = |v| number(v, origin, n, field, &THROUGHPUT_PER_S);
        match field {
            "Train throughput/batches_per_sec" => r.batches_per_s = Some(thr(val)?),
            "Train throughput/samples_per_sec" => r.samples_per_s = Some(thr(val)?),
            "Train throughput/tokens_per_sec" => r.tokens_per_s = Some(thr(val)?),
            "Train throughput/device/tokens_per_sec" => r.tokens_per_s_per_gpu = Some(thr(val)?),
            "Train throughput/device/mfu" => r.mfu = Some(number(val, origin, n, field, &MFU)?),
            "Train memory/peak_allocated_mem" => {
                r.peak_mem_gib = Some(number(val, origin, n, field, &MEM_GIB)? * GIB_PER_GB)
            }
            _ => {}
        }
    }
    flush(&mut cur, &mut out);
    Ok(out)
}

/// Keeps the block in `cur` as a step when it has a figure.
fn flush(cur: &mut Option<Record>, out: &mut Vec<Record>) {
    if let Some(r) = cur.take() {
        let some = r.batches_per_s.is_some()
            || r.samples_per_s.is_some()
            || r.tokens_per_s.is_some()
            || r.tokens_per_s_per_gpu.is_some()
            || r.mfu.is_some()
            || r.peak_mem_gib.is_some();
        if some {
            out.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_blocks() {
        let t = "[epoch=1][batch=9/100]:\n\t Train time/batch: 8\n\t Train loss/train/total: 2.5\n[epoch=1][batch=10/100]:\n\t Train time/batch: 9\n\t Train throughput/batches_per_sec: 0.5\n\t Train throughput/samples_per_sec: 4.0\n\t Train throughput/device/tokens_per_sec: 2048.0\n\t Train throughput/tokens_per_sec: 8192.0\n\t Train throughput/device/mfu: 0.41\n\t Train memory/peak_allocated_mem: 20.1\nsome other line\n\t Train throughput/tokens_per_sec: 1.0\n";
        let r = parse(t, "f").unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].step, Some(10));
        assert_eq!(r[0].tokens_per_s, Some(8192.0));
        assert_eq!(r[0].batches_per_s, Some(0.5));
        assert_eq!(r[0].mfu, Some(0.41));
        assert!((r[0].peak_mem_gib.unwrap() - 20.1 * GIB_PER_GB).abs() < 1e-9);
    }

    #[test]
    fn hostile_blocks_name_the_line() {
        for t in [
            "[batch=1/10]:\n\t Train throughput/tokens_per_sec: nan\n",
            "[batch=1/10]:\n\t Train throughput/tokens_per_sec: -5\n",
            "[batch=1/10]:\n\t Train throughput/device/mfu: 3.0\n",
            "[batch=x/10]:\n",
        ] {
            let e = parse(t, "c.log").unwrap_err().to_string();
            assert!(e.contains("c.log:"), "{t:?}: {e}");
        }
        assert!(parse("[batch=1/10]:\n\t Train throughput/tokens_per_sec:", "f").is_err());
    }
}
