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

    /// What an error says of `v` outside the range: the range, why, and
    /// `v`.
    pub fn expected(&self, v: f64) -> String {
        format!(
            "expected a value in {} ({}), got {v}",
            self.describe(),
            self.why
        )
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
/// microseconds) and at most 10^9 ms (11.6 days). The upper bound only
/// catches unit mix-ups (a 10 s pass written in nanoseconds reads as 10^10
/// "ms"): a measured pass of hours is large, not impossible (a 1M-token
/// sequence on one GPU), and passes.
pub const OP_MS: Range = Range {
    lo: 0.0,
    lo_inclusive: false,
    hi: 1e9,
    unit: "ms",
    why:
        "a measured pass takes more than zero time; over 11.6 days is a unit mix-up, not a profile",
};

/// One op's predicted time, ms (the analytic model's): above 0 and at most
/// what the simulator's clock holds (2^64 ns, 584 years). A prediction is
/// never refused for being long: the report says how long; only a time no
/// clock can hold, zero, negative, NaN or faster than the GPU's peak
/// ([`crate::profile::ComputeCurve::physical_problem`]) are errors.
pub const PREDICTED_MS: Range = Range {
    lo: 0.0,
    lo_inclusive: false,
    hi: u64::MAX as f64 / 1e6,
    unit: "ms",
    why: "a pass takes more than zero time and fits the simulator's clock (584 years)",
};

/// A block pass (forward + backward at one micro-batch size) above this
/// many ms, 1 hour, is reported as a long prediction in the notes.
pub const LONG_PASS_MS: f64 = 3.6e6;

/// A memory size, GiB: 0 to 10^5 (100 TiB; the largest GPU holds 288 GB,
/// the largest hosts a few TB).
pub const MEM_GIB: Range = Range {
    lo: 0.0,
    lo_inclusive: true,
    hi: 1e5,
    unit: "GiB",
    why: "no device or host holds 100 TiB",
};

/// A measured training throughput, per GPU or in all, tokens/s (or
/// samples/s, batches/s): above 0 and at most 10^12 (a million H100s at
/// 10^6 tokens/s each).
pub const THROUGHPUT_PER_S: Range = Range {
    lo: 0.0,
    lo_inclusive: false,
    hi: 1e12,
    unit: "per s",
    why: "a logged training step makes progress, and no cluster trains 10^12 tokens a second",
};

/// A model FLOPs utilisation, fraction: 0 to 1 (a log's percentage is
/// divided by 100 first).
pub const MFU: Range = Range {
    lo: 0.0,
    lo_inclusive: true,
    hi: 1.0,
    unit: "(fraction)",
    why: "no GPU runs above its peak",
};

/// The non-state memory of one training step of at least one sample, GiB
/// (a memory profile's entries): above 0 (a step holds its activations)
/// and at most [`MEM_GIB`]'s bound.
pub const ACT_GIB: Range = Range {
    lo: 0.0,
    lo_inclusive: false,
    hi: 1e5,
    unit: "GiB",
    why: "a step of at least one sample holds activations, and no device holds 100 TiB",
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

/// An expert capacity factor (tokens an expert takes, per routed copy it
/// would get under balanced routing): 0.1 (nine copies in ten dropped,
/// which no recipe runs; Switch Transformer used 1.0-2.0, GShard 2.0) to
/// [`crate::limits::MAX_EXPERTS`] (a factor of `E` already takes every
/// token; [`crate::experts::Moe::check`] holds it to the model's `E`).
pub const CAPACITY_FACTOR: Range = Range {
    lo: 0.1,
    lo_inclusive: true,
    hi: crate::limits::MAX_EXPERTS as f64,
    unit: "(factor)",
    why: "below 0.1 nearly every token is dropped; a factor of E takes every token",
};

/// A measured routing imbalance (the busiest expert-parallel rank's routed
/// copies over the mean): 1 (perfectly balanced) to 64 (every copy of a
/// 64-rank group on one rank, the largest group a model of 256 experts
/// and top-4 could so skew: well past any published run).
pub const ROUTING_IMBALANCE: Range = Range {
    lo: 1.0,
    lo_inclusive: true,
    hi: 64.0,
    unit: "(factor)",
    why: "the busiest rank receives at least the mean and at most every copy",
};

/// Bus bandwidth a measured collective may imply, GB/s (nccl-tests'
/// busbw): at most 10^4, above any fabric (see [`LINK_GBPS`]).
pub const BUS_GBPS_MAX: f64 = 1e4;

/// How far a measured series may fall from one size to a larger one and
/// still count as measurement noise: by at most the fraction `rel` of the
/// smaller size's value, or by at most `abs` (in the series' unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// Relative tolerance (0.5 = may fall to half).
    pub rel: f64,
    /// Absolute tolerance, in the series' unit.
    pub abs: f64,
    /// Why the tolerance is what it is (printed with the error).
    pub why: &'static str,
}

/// A block's measured forward + backward time may fall by up to 50% from
/// one micro-batch size to a larger one. GPU kernels repeat within a few
/// percent, but millisecond timings of a tiny model on a loaded CPU were
/// seen to fall 35% from size 1 to 2 (this project's own profiler under CI
/// load); less than half the time for more work is not noise anywhere.
pub const TIME_NOISE: Noise = Noise {
    rel: 0.5,
    abs: 0.0,
    why: "more than 50% less time for more work is not measurement noise",
};

/// Peak non-state memory may fall by up to 2% or 64 MiB from one batch
/// size to a larger one. A larger micro-batch allocates the same tensors,
/// each larger, so the peak cannot really fall; what moves a measured peak
/// down is the allocator and the libraries: PyTorch's caching allocator
/// rounds blocks (512 B, 2 MiB segments for large ones), cuBLAS keeps up to
/// 32 MiB of workspace per stream (`CUBLAS_WORKSPACE_CONFIG`'s default
/// 4096 KiB x 8) and cuDNN / SDPA pick kernels with other workspaces per
/// shape. None of the authors' 41 memory lists (six clusters, all models
/// and dtypes of `model_memory.json`) falls at all.
pub const MEM_NOISE: Noise = Noise {
    rel: 0.02,
    abs: 0.0625,
    why: "a larger batch holds the same tensors, each larger: more than 2% or 64 MiB less is not allocator or workspace noise",
};

/// Checks `v` against `range`; the error names `origin`, `field`, the range
/// and why.
pub fn check(origin: &str, field: &str, v: f64, range: &Range) -> Result<f64, SpecError> {
    if range.contains(v) {
        Ok(v)
    } else {
        Err(SpecError::invalid(origin, field, range.expected(v)))
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
/// a value outside `range`, or a larger size measured below a smaller one
/// by more than `noise` allows (`None`: fine).
pub fn series_problem_with(
    sizes: &[u32],
    totals: &[f64],
    range: &Range,
    noise: &Noise,
) -> Option<String> {
    if let Some(e) = outside(sizes, totals, range) {
        return Some(e);
    }
    for k in 1..totals.len() {
        let (prev, now) = (totals[k - 1], totals[k]);
        let drop = prev - now;
        if drop > prev * noise.rel && drop > noise.abs {
            let (a, b) = (
                sizes.get(k - 1).copied().unwrap_or(k as u32),
                sizes.get(k).copied().unwrap_or(k as u32 + 1),
            );
            return Some(format!(
                "size {b} takes {now:.4} {} but the smaller size {a} takes {prev:.4}: {}",
                range.unit, noise.why
            ));
        }
    }
    None
}

/// [`series_problem_with`] for times ([`TIME_NOISE`]).
pub fn series_problem(sizes: &[u32], totals: &[f64], range: &Range) -> Option<String> {
    series_problem_with(sizes, totals, range, &TIME_NOISE)
}

/// Why a measured memory list (non-state GiB per batch size, any profile
/// format) is not physical: an entry outside [`ACT_GIB`], or one that falls
/// as the batch grows by more than [`MEM_NOISE`] (`None`: fine).
pub fn memory_series_problem(sizes: &[u32], gib: &[f64]) -> Option<String> {
    series_problem_with(sizes, gib, &ACT_GIB, &MEM_NOISE)
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
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e10] {
            let e = check("f", "x", bad, &OP_MS).unwrap_err().to_string();
            assert!(
                e.contains("f: field `x`") && e.contains("(0, 1000000000] ms"),
                "{e}"
            );
        }
        // Large is not impossible: a measured pass of hours passes, and a
        // prediction may be as long as the simulator's clock holds.
        assert!(check("f", "x", 3.6e7, &OP_MS).is_ok());
        assert!(check("f", "x", 1e12, &PREDICTED_MS).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e20] {
            assert!(check("f", "x", bad, &PREDICTED_MS).is_err(), "{bad}");
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
    fn memory_lists_fall_only_within_allocator_noise() {
        // Rounding and workspace choices: 1% or 40 MiB less is noise.
        assert_eq!(memory_series_problem(&[1, 2, 3], &[1.0, 0.99, 2.0]), None);
        assert_eq!(memory_series_problem(&[1, 2], &[0.5, 0.47]), None);
        // More than both tolerances: refused, naming the sizes.
        let e = memory_series_problem(&[1, 2, 3], &[4.0, 3.5, 6.0]).unwrap();
        assert!(e.contains("size 2") && e.contains("size 1"), "{e}");
        // The time tolerance (50%) does not apply to memory.
        assert!(memory_series_problem(&[1, 2], &[10.0, 6.0]).is_some());
        assert_eq!(series_problem(&[1, 2], &[10.0, 6.0], &OP_MS), None);
        // A step of one sample holds activations: zero is not a measurement.
        assert!(memory_series_problem(&[1, 2], &[0.0, 0.0]).is_some());
    }

    #[test]
    fn a_gigabyte_in_no_time_is_refused() {
        assert!(collective_problem(1e9, 0.0).is_some());
        assert!(collective_problem(1e9, 1e-6).is_some());
        assert_eq!(collective_problem(1e9, 10.0), None);
    }
}
