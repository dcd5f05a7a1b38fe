//! The one parser of comma-separated lists (`--batch`, `--microbatches`,
//! `--state-fractions`, `--batch-sizes`, `--sizes`, `--ranks`, `--gpus`,
//! `--planners`, ...): every list flag of the command line goes through
//! here, so an empty item, a sign or junk is refused the same way
//! everywhere, naming the flag, the item's position and the item.
//!
//! Items are trimmed of surrounding spaces (`4, 4` is two items). Numbers
//! are plain decimal: no sign (`-1`, `+4`), no hexadecimal, no `nan` or
//! `inf`; counts are whole numbers without an exponent (`1e3` is refused:
//! write `1000`).
//!
//! Its inverse for printing, a long list as runs of equal values
//! ([`runs`], [`name_runs`]), is here too.

use crate::error::SpecError;

/// The items of `text`, trimmed; an empty list or an empty item is an
/// error naming `flag` and the item's position (1-based).
pub fn items<'a>(text: &'a str, flag: &str) -> Result<Vec<&'a str>, SpecError> {
    if text.trim().is_empty() {
        return Err(bad(
            flag,
            "expected a comma-separated list, got nothing".into(),
        ));
    }
    let v: Vec<&str> = text.split(',').map(str::trim).collect();
    if let Some(i) = v.iter().position(|s| s.is_empty()) {
        return Err(bad(
            flag,
            format!("item {} of `{text}` is empty (a stray comma?)", i + 1),
        ));
    }
    Ok(v)
}

fn bad(flag: &str, msg: String) -> SpecError {
    SpecError::invalid(flag, flag.trim_start_matches('-').replace('-', "_"), msg)
}

fn item_err(flag: &str, i: usize, item: &str, expected: &str) -> SpecError {
    bad(
        flag,
        format!("item {} `{item}`: expected {expected}", i + 1),
    )
}

/// Whole numbers (samples, counts) of at least `min`: digits only.
pub fn counts(text: &str, flag: &str, min: u32) -> Result<Vec<u32>, SpecError> {
    let expected = format!("a whole number >= {min} (digits only, no sign or exponent)");
    items(text, flag)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(item_err(flag, i, s, &expected));
            }
            let v: u32 = s
                .parse()
                .map_err(|_| item_err(flag, i, s, &format!("a whole number up to {}", u32::MAX)))?;
            if v < min {
                return Err(item_err(flag, i, s, &expected));
            }
            Ok(v)
        })
        .collect()
}

/// Whether `s` is a plain unsigned decimal: digits with an optional
/// fraction and an optional exponent (`0.25`, `.5`, `2.5e-1`).
fn is_decimal(s: &str) -> bool {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(k) => (&s[..k], Some(&s[k + 1..])),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(int) && digits(frac) && !(int.is_empty() && frac.is_empty());
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exp_ok
}

/// Unsigned decimal numbers, each inside `[lo, hi]` (`what` says what
/// they are, for the error).
pub fn numbers(
    text: &str,
    flag: &str,
    lo: f64,
    hi: f64,
    what: &str,
) -> Result<Vec<f64>, SpecError> {
    let expected = format!("{what} in [{lo}, {hi}] (a plain decimal, no sign)");
    items(text, flag)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let v: f64 = if is_decimal(s) {
                s.parse().map_err(|_| item_err(flag, i, s, &expected))?
            } else {
                return Err(item_err(flag, i, s, &expected));
            };
            if !(v.is_finite() && v >= lo && v <= hi) {
                return Err(item_err(flag, i, s, &expected));
            }
            Ok(v)
        })
        .collect()
}

/// Byte sizes with an optional `K`, `M` or `G` suffix (powers of 1024, as
/// nccl-tests), each above 0 and at most `max_bytes`.
pub fn byte_sizes(text: &str, flag: &str, max_bytes: f64) -> Result<Vec<f64>, SpecError> {
    let expected = format!("a positive size like 1M, 64M or 1G (K, M, G = 2^10, 2^20, 2^30 bytes), at most {max_bytes:e} bytes");
    items(text, flag)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let (num, mult) = match s.as_bytes().last() {
                Some(b'K' | b'k') => (&s[..s.len() - 1], 1024.0),
                Some(b'M' | b'm') => (&s[..s.len() - 1], 1024.0 * 1024.0),
                Some(b'G' | b'g') => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0),
                _ => (s, 1.0),
            };
            let v: f64 = if is_decimal(num) {
                num.parse().map_err(|_| item_err(flag, i, s, &expected))?
            } else {
                return Err(item_err(flag, i, s, &expected));
            };
            let bytes = v * mult;
            if !(bytes.is_finite() && bytes > 0.0 && bytes <= max_bytes) {
                return Err(item_err(flag, i, s, &expected));
            }
            Ok(bytes)
        })
        .collect()
}

/// Rank indices and inclusive ranges (`0-7,16`), in order; a range may
/// hold at most `max_span` ranks.
pub fn ranks(text: &str, flag: &str, max_span: usize) -> Result<Vec<usize>, SpecError> {
    let expected = "a rank or a range of ranks like 0-7 (digits only)";
    let index = |i: usize, s: &str, t: &str| -> Result<usize, SpecError> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(item_err(flag, i, s, expected));
        }
        t.parse().map_err(|_| item_err(flag, i, s, expected))
    };
    let mut out = Vec::new();
    for (i, s) in items(text, flag)?.into_iter().enumerate() {
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(i, s, a.trim())?, index(i, s, b.trim())?);
                if b < a || b - a >= max_span {
                    return Err(item_err(
                        flag,
                        i,
                        s,
                        &format!("a rising range of at most {max_span} ranks"),
                    ));
                }
                out.extend(a..=b);
            }
            None => out.push(index(i, s, s)?),
        }
    }
    Ok(out)
}

/// Ranks as [`ranks`] reads them, consecutive ones as ranges (`0-7,16`):
/// a list of eight or fewer ranks in full (`0,1,2`), else its ranges, at
/// most `max` of them (the first `max - 1`, `...`, the last, and the
/// count: `0-1,8-9,...,56-57 (16)`).
pub fn rank_ranges(v: &[usize], max: usize) -> String {
    if v.len() <= 8 {
        return v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    }
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    let max = max.max(2);
    let shown = if parts.len() > max {
        let last = parts[parts.len() - 1].clone();
        let mut head = parts[..max - 1].to_vec();
        head.push("...".into());
        head.push(last);
        head.join(",")
    } else {
        parts.join(",")
    };
    format!("{shown} ({})", v.len())
}

/// Runs of equal consecutive values as cells: `8x 64`, `2`.
/// Runs of equal values as cells (`8x 64`, `2`), in order.
pub fn run_cells<T: PartialEq + std::fmt::Display>(v: &[T]) -> Vec<String> {
    let mut out: Vec<(usize, &T)> = Vec::new();
    for x in v {
        match out.last_mut() {
            Some((n, y)) if *y == x => *n += 1,
            _ => out.push((1, x)),
        }
    }
    out.iter()
        .map(|&(n, x)| {
            if n == 1 {
                x.to_string()
            } else {
                format!("{n}x {x}")
            }
        })
        .collect()
}

/// `name=value` pairs separated by spaces or commas (`"tp=2 pp=4"`, empty:
/// none), each trimmed; an item without `=` is an error naming `origin`
/// and `field`, with `example` as what was expected.
pub fn pairs<'a>(
    text: &'a str,
    origin: &str,
    field: &str,
    example: &str,
) -> Result<Vec<(&'a str, &'a str)>, SpecError> {
    text.split([' ', ','])
        .filter(|p| !p.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| {
                    SpecError::invalid(
                        origin,
                        field,
                        format!("expected name=value pairs (e.g. `{example}`), got `{pair}`"),
                    )
                })
        })
        .collect()
}

/// Most runs [`name_runs`] lists before it counts per type instead.
pub const MAX_NAME_RUNS: usize = 8;

/// GPU names as runs: `256x a100-80gb, 256x h100-sxm`; beyond
/// [`MAX_NAME_RUNS`] runs (nodes of several types repeated), the count of
/// each type in order of first appearance, so a 1,024-GPU cluster stays
/// one short line.
pub fn name_runs(names: &[String]) -> String {
    let cells = run_cells(names);
    if cells.len() <= MAX_NAME_RUNS {
        return cells.join(", ");
    }
    let mut types: Vec<(&String, usize)> = Vec::new();
    for n in names {
        match types.iter_mut().find(|(t, _)| *t == n) {
            Some((_, k)) => *k += 1,
            None => types.push((n, 1)),
        }
    }
    types
        .iter()
        .map(|(t, k)| {
            if *k == 1 {
                t.to_string()
            } else {
                format!("{k}x {t}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A long list as runs of equal values, `[8x 64, 4x 40, 2]`, so a
/// 1,024-GPU row stays one readable line.
pub fn runs(v: &[u32]) -> String {
    format!("[{}]", run_cells(v).join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_ranges_print_runs_that_ranks_reads() {
        assert_eq!(rank_ranges(&[0, 1, 2], 4), "0,1,2");
        let contiguous: Vec<usize> = (0..16).collect();
        assert_eq!(rank_ranges(&contiguous, 4), "0-15 (16)");
        // TP 2 x PP 4 in tp-pp-dp order: stage 0 of 8 replicas.
        let strided: Vec<usize> = (0..8).flat_map(|j| [8 * j, 8 * j + 1]).collect();
        assert_eq!(rank_ranges(&strided, 4), "0-1,8-9,16-17,...,56-57 (16)");
        let some: Vec<usize> = (0..3).flat_map(|j| [8 * j, 8 * j + 1, 8 * j + 2]).collect();
        let text = rank_ranges(&some, 4);
        assert_eq!(text, "0-2,8-10,16-18 (9)");
        assert_eq!(
            ranks(text.split(' ').next().unwrap(), "f", 64).unwrap(),
            some
        );
    }

    #[test]
    fn counts_refuse_empty_items_signs_and_junk_naming_the_item() {
        assert_eq!(counts("4,4", "--batch", 0).unwrap(), vec![4, 4]);
        assert_eq!(counts(" 4, 12 ", "--batch", 0).unwrap(), vec![4, 12]);
        for (text, item) in [
            ("4,,4", "item 2"),
            ("4,", "item 2"),
            ("+4,4", "item 1 `+4`"),
            ("4,-4", "item 2 `-4`"),
            ("1e3", "item 1 `1e3`"),
            ("4x", "item 1 `4x`"),
            ("0x10", "item 1 `0x10`"),
            ("99999999999", "item 1"),
        ] {
            let e = counts(text, "--batch", 0).unwrap_err().to_string();
            assert!(e.contains("--batch") && e.contains(item), "{text}: {e}");
        }
        assert!(counts("", "--batch", 0).is_err());
        assert!(counts("1,0", "--batch-sizes", 1)
            .unwrap_err()
            .to_string()
            .contains("item 2"));
    }

    #[test]
    fn numbers_sizes_and_ranks() {
        assert_eq!(
            numbers("0.25,.75", "--state-fractions", 0.0, 1.0, "a fraction").unwrap(),
            vec![0.25, 0.75]
        );
        assert_eq!(
            numbers("2.5e-1", "--f", 0.0, 1.0, "a fraction").unwrap(),
            vec![0.25]
        );
        for bad in ["nan", "inf", "-0.1", "+0.5", "1.5", "0.5.5", "e3", "."] {
            assert!(
                numbers(bad, "--f", 0.0, 1.0, "a fraction").is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            byte_sizes("1K,2M", "--sizes", 1e15).unwrap(),
            vec![1024.0, 2.0 * 1048576.0]
        );
        for bad in ["-1M", "1M,,2M", "M", "1T", "0", "1e20"] {
            assert!(byte_sizes(bad, "--sizes", 1e15).is_err(), "{bad}");
        }
        assert_eq!(
            ranks("0-3,7", "--ranks", 1 << 20).unwrap(),
            vec![0, 1, 2, 3, 7]
        );
        for bad in ["3-1", "-1", "0-", "a", "1,,2", "0-9999999"] {
            assert!(ranks(bad, "--ranks", 1000).is_err(), "{bad}");
        }
    }

    #[test]
    fn many_runs_count_per_type() {
        let names: Vec<String> = ["a", "a", "b", "c"]
            .iter()
            .cycle()
            .take(4 * 5)
            .map(|s| s.to_string())
            .collect();
        assert_eq!(name_runs(&names), "10x a, 5x b, 5x c");
        assert_eq!(name_runs(&names[..8]), "2x a, b, c, 2x a, b, c");
    }
}
