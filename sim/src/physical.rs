//! Physical ranges of the numbers that enter the tool (profile times,
//! memory sizes, bandwidths, latencies, measured collectives), and the one
//! check every input site calls, so an impossible number is an error that
//! names the file, the entry and the range, never a silent wrong answer.
//!
//! The ranges are deliberately wide (they catch typos, unit mix-ups and
//! corrupted files, not unusual hardware); each says where its bounds come
//! from.

use crate::error::SpecError;

/// A closed or half-open range of one physical quantity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lower bound.
    pub lo: f64,
    /// Whether `lo` itself is allowed (`false`: strictly above).
    pub lo_inclusive: bool,
    /// Upper bound (inclusive).
    pub hi: f64,
    /// Unit, as printed.
    pub unit: &'static str,
    /// Why the bounds are what they are (printed with the error).
    pub why: &'static str,
}

impl Range {
    /// Whether `v` lies in the range (NaN never does).
    pub fn contains(&self, v: f64) -> bool {
        v.is_finite() && (v > self.lo || (self.lo_inclusive && v == self.lo)) && v <= self.hi
    }

    /// The range as printed: `(0, 1e7] ms`.
    pub fn describe(&self) -> String {
        format!(
            "{}{}, {}] {}",
            if self.lo_inclusive { "[" } else { "(" },
            self.lo,
            self.hi,
            self.unit
        )
    }
}

/// One op's measured time, ms: above 0 (a kernel launch alone takes
/// microseconds) and at most 10^7 ms (2.8 hours; the slowest block pass of
/// any profile is seconds).
pub const OP_MS: Range = Range {
    lo: 0.0,
    lo_inclusive: false,
    hi: 1e7,
    unit: "ms",
    why: "a measured pass takes more than zero time and less than hours",
};

/// A memory size, GiB: 0 to 10^5 (100 TiB; the largest GPU holds 288 GB,
/// the largest hosts a few TB).
pub const MEM_GIB: Range = Range {
    lo: 0.0,
    lo_inclusive: true,
    hi: 1e5,
    unit: "GiB",
    why: "no device or host holds 100 TiB",
};

/// A link's bandwidth, GB/s: 0.01 (10 MB/s, below any PCIe or memory
/// link) to 10^4 (NVLink 5 is 900 GB/s per direction per GPU).
pub const LINK_GBPS: Range = Range {
    lo: 0.01,
    lo_inclusive: true,
    hi: 1e4,
    unit: "GB/s",
    why: "GPU and host links run from 10 MB/s to NVLink 5's 900 GB/s per direction",
};

/// A network bandwidth, Gbit/s: 0.001 (1 Mbit/s, below any data-centre
/// link) to 10^5 (a node with eight 800G NICs has 6,400 Gbit/s).
pub const NET_GBIT_S: Range = Range {
    lo: 0.001,
    lo_inclusive: true,
    hi: 1e5,
    unit: "Gbit/s",
    why: "data-centre networks run from 1 Mbit/s to eight 800G NICs (6,400 Gbit/s) per node",
};

/// A link or network latency, microseconds: 0 to 10^6 (one second; NVLink
/// hops are under 1 us, WAN round trips 100 ms).
pub const LATENCY_US: Range = Range {
    lo: 0.0,
    lo_inclusive: true,
    hi: 1e6,
    unit: "us",
    why: "a hop between GPUs takes under a second",
};

/// Bus bandwidth a measured collective may imply, GB/s (nccl-tests'
/// busbw): at most 10^4, above any fabric (see [`LINK_GBPS`]).
pub const BUS_GBPS_MAX: f64 = 1e4;

/// How much a measured series (a block's forward + backward time, a memory
/// list) may fall from one micro-batch size to a larger one and still
/// count as measurement noise: 50%. GPU kernels repeat within a few
/// percent, but millisecond timings of a tiny model on a loaded CPU were
/// seen to fall 35% from size 1 to 2 (this project's own profiler under
/// CI load); less than half the time for more work is not noise anywhere.
pub const DECREASE_NOISE: f64 = 0.5;

/// Checks `v` against `range`; the error names `origin`, `field`, the range
/// and why.
pub fn check(origin: &str, field: &str, v: f64, range: &Range) -> Result<f64, SpecError> {
    if range.contains(v) {
        Ok(v)
    } else {
        Err(SpecError::invalid(
            origin,
            field,
            format!(
                "expected a value in {} ({}), got {v}",
                range.describe(),
                range.why
            ),
        ))
    }
}

/// The first value of a series (one per size) outside `range`, as printed
/// (`None`: all inside).
pub fn outside(sizes: &[u32], vals: &[f64], range: &Range) -> Option<String> {
    let (i, v) = vals
        .iter()
        .enumerate()
        .find(|(_, v)| !range.contains(**v))?;
    let at = sizes
        .get(i)
        .map_or(String::new(), |s| format!(" at size {s}"));
    Some(format!(
        "value {v}{at} is outside {} ({})",
        range.describe(),
        range.why
    ))
}

/// Why a series of measured totals over increasing sizes is not physical:
/// a value outside `range`, or a larger size measured more than
/// [`DECREASE_NOISE`] faster than a smaller one (`None`: fine).
pub fn series_problem(sizes: &[u32], totals: &[f64], range: &Range) -> Option<String> {
    if let Some(e) = outside(sizes, totals, range) {
        return Some(e);
    }
    for k in 1..totals.len() {
        if totals[k] < totals[k - 1] * (1.0 - DECREASE_NOISE) {
            let (a, b) = (
                sizes.get(k - 1).copied().unwrap_or(k as u32),
                sizes.get(k).copied().unwrap_or(k as u32 + 1),
            );
            return Some(format!(
                "size {b} takes {:.4} {} but the smaller size {a} takes {:.4}: more than {:.0}% less for more work is not measurement noise",
                totals[k],
                range.unit,
                totals[k - 1],
                DECREASE_NOISE * 100.0
            ));
        }
    }
    None
}

/// Why a measured collective is not physical: not a positive time, or
/// `bytes` moved faster than [`BUS_GBPS_MAX`] (`None`: fine).
pub fn collective_problem(bytes: f64, time_ms: f64) -> Option<String> {
    if !OP_MS.contains(time_ms) {
        return Some(format!(
            "time {time_ms} ms is outside {} ({})",
            OP_MS.describe(),
            OP_MS.why
        ));
    }
    let gbps = bytes / (time_ms * 1e-3) / 1e9;
    (gbps > BUS_GBPS_MAX).then(|| {
        format!(
            "{bytes} bytes in {time_ms} ms is {gbps:.0} GB/s, above any fabric ({BUS_GBPS_MAX} GB/s)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_reject_what_is_not_physical() {
        assert!(check("f", "x", 1.0, &OP_MS).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e8] {
            let e = check("f", "x", bad, &OP_MS).unwrap_err().to_string();
            assert!(
                e.contains("f: field `x`") && e.contains("(0, 10000000] ms"),
                "{e}"
            );
        }
        assert!(check("f", "m", 0.0, &MEM_GIB).is_ok());
        assert!(check("f", "m", -0.5, &MEM_GIB).is_err());
        assert!(check("f", "l", 0.0, &LATENCY_US).is_ok());
        assert!(check("f", "b", 0.0, &LINK_GBPS).is_err());
        assert!(check("f", "n", 1e-290, &NET_GBIT_S).is_err());
    }

    #[test]
    fn series_allow_noise_but_not_less_time_for_more_work() {
        assert_eq!(series_problem(&[1, 2, 4], &[1.0, 1.9, 3.8], &OP_MS), None);
        // 35% lower (a loaded CPU timing a tiny model): noise.
        assert_eq!(series_problem(&[1, 2], &[5.2, 3.4], &OP_MS), None);
        let e = series_problem(&[1, 2, 4], &[2.0, 4.0, 1.0], &OP_MS).unwrap();
        assert!(e.contains("size 4") && e.contains("size 2"), "{e}");
        assert!(series_problem(&[1, 2], &[1.0, 0.0], &OP_MS).is_some());
    }

    #[test]
    fn a_gigabyte_in_no_time_is_refused() {
        assert!(collective_problem(1e9, 0.0).is_some());
        assert!(collective_problem(1e9, 1e-6).is_some());
        assert_eq!(collective_problem(1e9, 10.0), None);
    }
}
