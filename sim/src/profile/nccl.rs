//! Importer for the stdout of NVIDIA's nccl-tests (`all_gather_perf`,
//! `reduce_scatter_perf`, `all_reduce_perf`, `alltoall_perf`), as users
//! paste it.
//!
//! What is read:
//!
//! * the collective, from the test's banner (`# Collective test starting:
//!   all_gather_perf`), the command line if pasted, or a `KIND=` prefix the
//!   caller passes ([`parse`]'s `kind`);
//! * the ranks and their hosts, from the `#  Rank  N Group G Pid P on HOST
//!   device D ...` lines (rank count = lines, nodes = distinct hosts);
//! * the result rows, by the columns of the `#  size  count  type ...
//!   time  algbw  busbw ...` header: `size` (bytes, nccl-tests' `nBytes`:
//!   the gathered buffer for all-gather and reduce-scatter, the buffer for
//!   all-reduce, each rank's send buffer for all-to-all) and the
//!   out-of-place `time` (µs). Rows whose reported
//!   `algbw` disagrees with `size / time` by more than 5% (a misaligned
//!   paste), that report wrong values, or whose numbers are not positive
//!   are errors naming the line.
//!
//! Every row becomes a [`CollectiveSample`] on `ranks` ranks over `nodes`
//! nodes, marked rescalable (groups of another size may use it at equal bus
//! bandwidth, see [`crate::comm::MeasuredTable`]).

use crate::comm::CollectiveKind;
use crate::error::SpecError;
use crate::profile::CollectiveSample;

/// Relative tolerance between a row's printed `algbw` and `size / time`.
const ALGBW_TOLERANCE: f64 = 0.05;

/// Which collective a log measured, from its text.
fn detect_kind(text: &str) -> Option<CollectiveKind> {
    let names = [
        ("all_gather_perf", CollectiveKind::AllGather),
        ("reduce_scatter_perf", CollectiveKind::ReduceScatter),
        ("all_reduce_perf", CollectiveKind::AllReduce),
        ("alltoall_perf", CollectiveKind::AllToAll),
    ];
    let mut found: Option<CollectiveKind> = None;
    for (name, kind) in names {
        if text.contains(name) {
            if found.is_some_and(|k| k != kind) {
                return None;
            }
            found = Some(kind);
        }
    }
    found
}

/// Parses one nccl-tests log. `kind` overrides detection; `origin` names
/// the file for errors.
pub fn parse(
    text: &str,
    origin: &str,
    kind: Option<CollectiveKind>,
) -> Result<Vec<CollectiveSample>, SpecError> {
    let kind = match kind.or_else(|| detect_kind(text)) {
        Some(k) => k,
        None => {
            return Err(SpecError::invalid(
                origin,
                "line 1",
                "cannot tell which collective this nccl-tests log measured (no all_gather_perf, reduce_scatter_perf, all_reduce_perf or alltoall_perf in it); prefix the path with all-gather=, reduce-scatter=, all-reduce= or all-to-all=",
            ))
        }
    };
    let mut log = Log::default();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            log.comment(rest, origin, line_no)?;
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        let leading_number = toks
            .first()
            .is_some_and(|t| t.chars().all(|c| c.is_ascii_digit()));
        if !leading_number {
            // Command lines, NCCL INFO lines and other chatter.
            continue;
        }
        let Some(columns) = log.columns else {
            return Err(SpecError::invalid(
                origin,
                format!("line {line_no}"),
                "a result row before the `#  size  count  type ... time  algbw  busbw` header",
            ));
        };
        if let Some((size, time_us)) = read_row(&toks, columns, origin, line_no)? {
            log.rows.push((line_no, size, time_us));
        }
    }
    log.samples(kind, origin)
}

/// Where the result columns sit, from the `#  size  count  type ...` header.
#[derive(Debug, Clone, Copy)]
struct Columns {
    size: usize,
    time: usize,
    algbw: usize,
    /// The `#wrong` (or `error`) column, when the header has one.
    wrong: Option<usize>,
}

/// What a log has said so far: its ranks and hosts, its header, its rows.
#[derive(Debug, Default)]
struct Log {
    hosts: Vec<String>,
    ranks: usize,
    columns: Option<Columns>,
    /// (line, size in bytes, time in µs) of every valid row.
    rows: Vec<(usize, f64, f64)>,
}

impl Log {
    /// Reads comment line `line_no` (`rest`, after its `#`): a rank line
    /// counts a rank and its host, a header sets the columns.
    fn comment(&mut self, rest: &str, origin: &str, line_no: usize) -> Result<(), SpecError> {
        let toks: Vec<&str> = rest.split_whitespace().collect();
        if toks.first() == Some(&"Rank") {
            self.ranks += 1;
            if let Some(p) = toks.iter().position(|t| *t == "on") {
                if let Some(h) = toks.get(p + 1) {
                    if !self.hosts.iter().any(|x| x == h) {
                        self.hosts.push(h.to_string());
                    }
                }
            }
        } else if toks.first() == Some(&"size") && toks.contains(&"time") {
            let pos = |name: &str| toks.iter().position(|t| *t == name);
            let (Some(size), Some(time), Some(algbw)) = (pos("size"), pos("time"), pos("algbw"))
            else {
                return Err(SpecError::invalid(
                    origin,
                    format!("line {line_no}"),
                    "expected a header with size, time and algbw columns",
                ));
            };
            let wrong = pos("#wrong").or_else(|| pos("error"));
            self.columns = Some(Columns {
                size,
                time,
                algbw,
                wrong,
            });
        }
        Ok(())
    }

    /// The samples of a log of `kind` read to its end: at least 2 ranks and
    /// one row.
    fn samples(
        self,
        kind: CollectiveKind,
        origin: &str,
    ) -> Result<Vec<CollectiveSample>, SpecError> {
        let ranks = self.ranks;
        if ranks < 2 {
            return Err(SpecError::invalid(
                origin,
                "line 1",
                format!(
                    "expected the `#  Rank N Group G Pid P on HOST device D` lines of at least 2 ranks, found {ranks}: cannot tell how many ranks the test ran on"
                ),
            ));
        }
        if self.rows.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "line 1",
                "no result rows (size, count, type, ..., time, algbw, busbw)",
            ));
        }
        let hosts = self.hosts;
        Ok(self
            .rows
            .into_iter()
            .map(|(_, size, time_us)| CollectiveSample {
                kind: kind.name().to_string(),
                ranks: ranks as u32,
                bytes: size,
                imbalance: 1.0,
                time_ms: time_us * 1e-3,
                nodes: Some(hosts.len().max(1) as u32),
                rescalable: true,
            })
            .collect())
    }
}

/// Reads result row `line_no` (`toks`) by `columns`: its size in bytes and
/// out-of-place time in µs, `None` for a zero-byte row; an error when a
/// number is garbled, the time is not positive, the test reported wrong
/// values, the pair is not physical or `algbw` disagrees with size / time.
fn read_row(
    toks: &[&str],
    columns: Columns,
    origin: &str,
    line_no: usize,
) -> Result<Option<(f64, f64)>, SpecError> {
    let at = || format!("line {line_no}");
    let num = |c: usize, what: &str| -> Result<f64, SpecError> {
        toks.get(c)
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                SpecError::invalid(
                    origin,
                    at(),
                    format!(
                        "expected a number in the {what} column, got `{}`",
                        toks.get(c).unwrap_or(&"")
                    ),
                )
            })
    };
    let size = num(columns.size, "size")?;
    let time_us = num(columns.time, "time (us)")?;
    let algbw = num(columns.algbw, "algbw (GB/s)")?;
    if size <= 0.0 {
        return Ok(None);
    }
    if time_us <= 0.0 {
        return Err(SpecError::invalid(
            origin,
            at(),
            format!("expected a positive time in µs, got {time_us}"),
        ));
    }
    if let Some(w) = columns.wrong.and_then(|c| toks.get(c)) {
        if let Ok(n) = w.parse::<u64>() {
            if n > 0 {
                return Err(SpecError::invalid(
                    origin,
                    at(),
                    format!(
                        "the test reported {n} wrong values; this row is not a valid measurement"
                    ),
                ));
            }
        }
    }
    if let Some(why) = crate::physical::collective_problem(size, time_us * 1e-3) {
        return Err(SpecError::invalid(origin, at(), why));
    }
    let implied = size / (time_us * 1e-6) / 1e9;
    if algbw >= 1.0 && (implied - algbw).abs() > ALGBW_TOLERANCE * algbw {
        return Err(SpecError::invalid(
            origin,
            at(),
            format!(
                "algbw {algbw} GB/s disagrees with size / time = {implied:.2} GB/s (columns misaligned?)"
            ),
        ));
    }
    Ok(Some((size, time_us)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic log in nccl-tests' layout (not a real measurement).
    fn log(rows: &str) -> String {
        format!(
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n#  Rank  0 Group  0 Pid   101 on     hosta device  0 [0x07] NVIDIA A100-SXM4-80GB\n#  Rank  1 Group  0 Pid   102 on     hosta device  1 [0x0b] NVIDIA A100-SXM4-80GB\n#  Rank  2 Group  0 Pid   103 on     hostb device  0 [0x07] NVIDIA A100-SXM4-80GB\n#  Rank  3 Group  0 Pid   104 on     hostb device  1 [0x0b] NVIDIA A100-SXM4-80GB\n#\n#                                                              out-of-place                       in-place\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n{rows}# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 10.0\n"
        )
    }

    #[test]
    fn reads_ranks_hosts_and_rows() {
        let text = log("     1048576        262144     float     sum      -1    200.0    5.24    7.86      0    199.0    5.27    7.90      0\n  1073741824     268435456     float     sum      -1  50000.0   21.47   32.21      0  50100.0   21.43   32.15      0\n");
        let text = format!("$ ./build/all_reduce_perf -b 1M -e 1G -f 4 -g 1\n{text}");
        let s = parse(&text, "ar.log", None).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].kind, "all_reduce");
        assert_eq!((s[0].ranks, s[0].nodes), (4, Some(2)));
        assert_eq!(s[1].bytes, 1073741824.0);
        assert!((s[1].time_ms - 50.0).abs() < 1e-12);
        assert!(s.iter().all(|x| x.rescalable));
    }

    #[test]
    fn an_alltoall_perf_log_is_an_all_to_all() {
        // alltoall_perf's size is each rank's send buffer, algbw = size / time.
        let row = "     1048576        262144     float    none      -1    200.0    5.24    4.92      0    199.0    5.27    4.94      0\n";
        let text = format!("# Collective test starting: alltoall_perf\n{}", log(row));
        let s = parse(&text, "a2a.log", None).unwrap();
        assert_eq!(s[0].kind, "all_to_all");
        assert_eq!(
            CollectiveKind::parse(&s[0].kind),
            Some(CollectiveKind::AllToAll)
        );
        assert_eq!((s[0].ranks, s[0].bytes), (4, 1048576.0));
        let e = parse(&log(row), "x.log", None).unwrap_err().to_string();
        assert!(
            e.contains("alltoall_perf") && e.contains("all-to-all="),
            "{e}"
        );
    }

    #[test]
    fn malformed_logs_name_the_line() {
        let row = "     1048576        262144     float     sum      -1    200.0    5.24    7.86      0    199.0    5.27    7.90      0\n";
        // Which collective?
        let e = parse(&log(row), "x.log", None).unwrap_err().to_string();
        assert!(e.contains("x.log") && e.contains("all-gather="), "{e}");
        let ok = parse(&log(row), "x.log", Some(CollectiveKind::AllGather)).unwrap();
        assert_eq!(ok[0].kind, "all_gather");
        // A garbled number.
        let bad = row.replace("200.0", "2O0.0");
        let e = parse(&log(&bad), "x.log", Some(CollectiveKind::AllGather))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 12"), "{e}");
        // algbw inconsistent with size / time.
        let bad = row.replace("5.24", "9.99");
        let e = parse(&log(&bad), "x.log", Some(CollectiveKind::AllGather))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 12") && e.contains("algbw"), "{e}");
        // Wrong values reported.
        let bad = row.replacen("      0    199.0", "      3    199.0", 1);
        let e = parse(&log(&bad), "x.log", Some(CollectiveKind::AllGather))
            .unwrap_err()
            .to_string();
        assert!(e.contains("wrong values"), "{e}");
        // No rank lines.
        let e = parse(
            &format!(
                "# all_gather_perf\n#  size count type redop root time algbw busbw #wrong\n{row}"
            ),
            "x.log",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("Rank"), "{e}");
    }
}
