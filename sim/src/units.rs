//! Units used across the crate.
//!
//! Public APIs carry plain `f64` values whose names end in their unit
//! (`time_ms`, `mem_gib`, `bw_gbps`). Inside the event engine time is
//! [`SimTime`], integer nanoseconds, so event ordering is exact and runs are
//! bit-reproducible.

use serde::{Deserialize, Serialize};

/// Bytes in one GiB (2^30).
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Simulated time in integer nanoseconds since the start of the iteration.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct SimTime(pub u64);

impl SimTime {
    /// Time zero.
    pub const ZERO: SimTime = SimTime(0);

    /// The largest time: what a duration too long for the clock saturates
    /// to; the engine reports an op ending there as an error.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// Converts milliseconds (non-negative, finite) to nanoseconds, rounding
    /// to nearest; more than the clock holds saturates at [`SimTime::MAX`].
    pub fn from_ms(ms: f64) -> SimTime {
        debug_assert!(ms.is_finite() && ms >= 0.0, "bad duration {ms} ms");
        SimTime((ms.max(0.0) * 1e6).round() as u64)
    }

    /// This time in milliseconds.
    pub fn as_ms(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl std::ops::Add for SimTime {
    type Output = SimTime;
    /// Saturates at [`SimTime::MAX`] (never wraps to a small time).
    fn add(self, rhs: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(rhs.0))
    }
}

impl std::ops::AddAssign for SimTime {
    /// Saturates as [`SimTime`]'s `+` does.
    fn add_assign(&mut self, rhs: SimTime) {
        *self = *self + rhs;
    }
}

impl std::ops::Sub for SimTime {
    type Output = SimTime;
    fn sub(self, rhs: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(rhs.0))
    }
}

/// Converts bytes to GiB.
pub fn bytes_to_gib(bytes: f64) -> f64 {
    bytes / GIB
}

/// Converts GiB to bytes.
pub fn gib_to_bytes(gib: f64) -> f64 {
    gib * GIB
}

/// Time in ms to move `bytes` at `bw_gbps` (GB/s, 10^9 bytes per second).
pub fn transfer_ms(bytes: f64, bw_gbps: f64) -> f64 {
    if bytes <= 0.0 {
        return 0.0;
    }
    bytes / (bw_gbps * 1e9) * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simtime_roundtrip() {
        assert_eq!(SimTime::from_ms(1.5).0, 1_500_000);
        assert!((SimTime::from_ms(2.25).as_ms() - 2.25).abs() < 1e-12);
    }

    #[test]
    fn huge_times_saturate() {
        assert_eq!(SimTime::from_ms(1e300), SimTime::MAX);
        assert_eq!(SimTime::from_ms(1e300) + SimTime(5), SimTime::MAX);
    }

    #[test]
    fn transfer_time() {
        // 1 GB at 10 GB/s = 100 ms.
        assert!((transfer_ms(1e9, 10.0) - 100.0).abs() < 1e-9);
        assert_eq!(transfer_ms(0.0, 10.0), 0.0);
    }
}
