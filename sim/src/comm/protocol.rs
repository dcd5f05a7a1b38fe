//! NCCL's protocols and fast paths as its tuning model prices them
//! (`src/graph/tuning.cc`, NCCL 2.30; REAL-SYSTEMS §1.4 and REAL-SYSTEMS-2
//! §7 transcribe the tables): for every enabled (algorithm, protocol) pair
//! a time `latency + bytes / bandwidth`, the minimum wins.
//!
//! The model keeps its achievable link bandwidths (the link catalog,
//! [`crate::link`]) and its Simple-protocol hop latencies; the protocols
//! scale them by NCCL's own ratios:
//!
//! | | LL | LL128 | Simple |
//! |---|---|---|---|
//! | ring base latency, µs | 6.6 | 14.0 | 8.4 |
//! | tree base latency, µs | 6.8 | 14.0 | 8.4 |
//! | NVLink hop (ring), µs | 0.6 | 1.9 | 3.4 |
//! | PCIe hop (ring), µs | 1.0 | 2.5 | 5.7 |
//! | network hop (ring), µs | 2.7 | 4.0 | 14.0 |
//! | bandwidth | 0.5 x bus, capped at `llMaxBw` | 0.92 x bus | bus |
//!
//! LL128 is enabled only where every hop inside a node is NVLink and the
//! GPUs are one generation or Hopper and newer (NCCL's default). NVLink
//! SHARP (NVLS) all-reduce needs an NVSwitch and SM90+ (H100, H200): the
//! switch reduces and multicasts, so each GPU pushes its buffer once and
//! pulls the result once (`S` per direction instead of the ring's
//! `2 (p - 1) / p S`); NCCL prices it at `nvlsEfficiency` = 0.85 of the
//! NVLink bandwidth over 16 channels of which one is the overhead
//! (`(nCh - 1) / nCh`), with a 25 µs NVLink latency and no base. Across
//! nodes NVLS_TREE reduces inside each node with NVLS and runs a tree over
//! the NICs between them (20.9 µs per network level), the tree's bandwidth
//! doubled at two nodes (each node both sends and receives half on each of
//! the two trees). NVLS for all-gather and reduce-scatter moves the same
//! bytes as the ring at 0.85 of its bandwidth, so it never wins in NCCL's
//! model for large buffers and is not priced here.

use crate::gpu::Arch;

/// The GPU generation NCCL's tables are indexed by (`compCapIndex`):
/// Volta (and older), Ampere (sm80-sm89: A100, A10G, L4, RTX 3090 / A6000,
/// L40S), Hopper (sm90: H100, H200). NCCL 2.30 has a fourth row, Blackwell
/// (sm100: `llMaxBw` 282 on one node, `nvlsEfficiency` 0.74; REAL-SYSTEMS
/// §1.4), which this model does not carry yet: no Blackwell GPU is in the
/// catalog ([`NcclGen::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum NcclGen {
    /// Volta and older (sm < 80).
    #[default]
    Volta,
    /// sm80-sm89.
    Ampere,
    /// sm90 and newer.
    Hopper,
}

impl NcclGen {
    /// The generation whose tables NCCL uses for a GPU of `arch`
    /// (`minCompCap`: sm80 and up Ampere, sm90 and up Hopper). For the
    /// architectures without a catalog GPU yet:
    ///
    /// * `blackwell` (sm100): Hopper, the newest row carried here (NCCL's
    ///   own Blackwell row is faster still, see [`NcclGen`]);
    /// * `cdna3`, `cdna4`: RCCL, NCCL's port to AMD, keeps NCCL's tuning
    ///   model with its own per-gfx constants (REAL-SYSTEMS-3 §4.4), not
    ///   transcribed here: counted as the sm80 row (LL128 inside one
    ///   generation, the x1.4 ring plateau; no NVLS, which needs an NVSwitch
    ///   of the Hopper row) until a CDNA GPU enters the catalog;
    /// * `cpu`: real execution's host ranks run no NCCL; the oldest row.
    pub fn of(arch: Arch) -> NcclGen {
        match arch {
            Arch::Pascal | Arch::Volta | Arch::Turing | Arch::Cpu => NcclGen::Volta,
            Arch::Ampere | Arch::Ada | Arch::Cdna3 | Arch::Cdna4 => NcclGen::Ampere,
            Arch::Hopper | Arch::Blackwell => NcclGen::Hopper,
        }
    }

    /// `llMaxBws`: the LL protocol's bandwidth cap, GB/s: per generation on
    /// one node (Volta 39.0, Ampere 87.7, Hopper 141.0); across nodes the
    /// CPU row (Intel x86: 39.0 at two nodes, 20.4 beyond).
    pub fn ll_max_gbps(self, nodes: usize) -> f64 {
        match (nodes, self) {
            (1, NcclGen::Volta) => 39.0,
            (1, NcclGen::Ampere) => 87.7,
            (1, NcclGen::Hopper) => 141.0,
            (2, _) => 39.0,
            _ => 20.4,
        }
    }
}

/// One of NCCL's three protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// 8-byte stores with inline flags: lowest latency, half the bandwidth.
    Ll,
    /// 128-byte lines with 8 flag bytes: NVLink-only, 92% of the bandwidth.
    Ll128,
    /// Bulk copies with a flag per step: the full bandwidth.
    Simple,
}

impl Protocol {
    /// Every protocol.
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    /// NCCL's name (`LL`, `LL128`, `Simple`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    /// Base latency of a ring (`tree`: of a tree), µs.
    pub fn base_us(self, tree: bool) -> f64 {
        match (self, tree) {
            (Protocol::Ll, false) => 6.6,
            (Protocol::Ll, true) => 6.8,
            (Protocol::Ll128, _) => 14.0,
            (Protocol::Simple, _) => 8.4,
        }
    }

    /// A hop's latency under this protocol relative to Simple's (NCCL's ring
    /// table): on NVLink, PCIe or the network.
    pub fn hop_scale(self, hop: HopKind) -> f64 {
        let (ll, ll128, simple) = match hop {
            HopKind::Nvlink => (0.6, 1.9, SIMPLE_NVLINK_HOP_US),
            HopKind::Pcie => (1.0, 2.5, 5.7),
            HopKind::Net => (2.7, 4.0, SIMPLE_NET_HOP_US),
        };
        match self {
            Protocol::Ll => ll / simple,
            Protocol::Ll128 => ll128 / simple,
            Protocol::Simple => 1.0,
        }
    }

    /// The bus bandwidth a ring reaches under this protocol, GB/s, from
    /// its Simple bandwidth `bus` (LL: half, capped at `ll_max`; LL128:
    /// 0.92).
    pub fn ring_gbps(self, bus: f64, ll_max: f64) -> f64 {
        match self {
            Protocol::Ll => (0.5 * bus).min(ll_max),
            Protocol::Ll128 => 0.92 * bus,
            Protocol::Simple => bus,
        }
    }

    /// The bus bandwidth a tree all-reduce reaches, GB/s, from the ring's
    /// Simple bandwidth `bus` (Simple 0.92; LL `/ 3.8`, capped; LL128
    /// `120 / 128` across nodes).
    pub fn tree_gbps(self, bus: f64, ll_max: f64) -> f64 {
        match self {
            Protocol::Ll => (bus / 3.8).min(ll_max),
            Protocol::Ll128 => bus * 120.0 / 128.0,
            Protocol::Simple => TREE_BW_FACTOR * bus,
        }
    }
}

/// What a hop crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopKind {
    /// NVLink (direct, bridged pair or NVSwitch).
    Nvlink,
    /// PCIe peer-to-peer (or through host memory).
    Pcie,
    /// The network between nodes.
    Net,
}

/// NCCL's Simple-protocol ring hop latency over NVLink, µs
/// (`hwLatencies[NVLINK][RING][Simple]`): the other protocols' and NVLS's
/// NVLink latencies are taken relative to it.
pub const SIMPLE_NVLINK_HOP_US: f64 = 3.4;
/// NCCL's Simple-protocol ring hop latency over the network, µs
/// (`hwLatencies[NET][RING][Simple]`).
pub const SIMPLE_NET_HOP_US: f64 = 14.0;

/// NCCL's bandwidth derating of the tree algorithm against the ring
/// (`src/graph/tuning.cc`: tree bus bandwidth = 0.92 x the ring's when the
/// tree is not limited per channel).
pub const TREE_BW_FACTOR: f64 = 0.92;

/// NVLS's efficiency on the NVLink bandwidth (`nvlsEfficiency`, Hopper).
pub const NVLS_EFFICIENCY: f64 = 0.85;
/// NVLS channels on SM90 (`NVLS_NCHANNELS_SM90`): `(n - 1) / n` of them
/// carry data in NCCL's model.
pub const NVLS_CHANNELS: f64 = 16.0;
/// NVLS's NVLink latency, µs (`hwLatencies[NVLINK][NVLS][Simple]`, relative
/// to the Simple ring hop's 3.4 µs).
pub const NVLS_NVLINK_US: f64 = 25.0;
/// NVLS_TREE's network latency per tree level, µs (relative to 14.0).
pub const NVLS_TREE_NET_US: f64 = 20.9;
/// The Simple ring all-reduce's multi-node latency factor (NCCL's
/// "plateau effect of ring": x1.4 on sm80+, x1.9 before).
pub fn ring_plateau(gen: NcclGen) -> f64 {
    if gen >= NcclGen::Ampere {
        1.4
    } else {
        1.9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_trade_latency_for_bandwidth() {
        for hop in [HopKind::Nvlink, HopKind::Pcie, HopKind::Net] {
            assert!(Protocol::Ll.hop_scale(hop) < Protocol::Ll128.hop_scale(hop));
            assert!(Protocol::Ll128.hop_scale(hop) < 1.0);
        }
        let bus = 200.0;
        assert!(Protocol::Ll.ring_gbps(bus, 1e9) < Protocol::Ll128.ring_gbps(bus, 1e9));
        assert!(Protocol::Ll128.ring_gbps(bus, 1e9) < Protocol::Simple.ring_gbps(bus, 1e9));
        assert_eq!(NcclGen::of(Arch::Hopper), NcclGen::Hopper);
        assert_eq!(NcclGen::of(Arch::Blackwell), NcclGen::Hopper);
        assert_eq!(NcclGen::of(Arch::Ada), NcclGen::Ampere);
        assert_eq!(NcclGen::of(Arch::Cdna3), NcclGen::Ampere);
        assert_eq!(NcclGen::of(Arch::Turing), NcclGen::Volta);
        assert_eq!(NcclGen::of(Arch::Cpu), NcclGen::Volta);
        assert!(NcclGen::Hopper.ll_max_gbps(1) > NcclGen::Hopper.ll_max_gbps(4));
    }
}
