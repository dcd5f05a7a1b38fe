//! Communication model for collectives (all-gather, reduce-scatter,
//! all-reduce, all-to-all), as NCCL runs them.
//!
//! Units: piece and buffer sizes in bytes (`f64`), bandwidths in GB/s
//! (10^9 bytes per second, per direction, *achievable*: line rate times the
//! link catalog's efficiency, [`crate::link`]), latencies in microseconds,
//! and every returned time in milliseconds.
//!
//! The inputs are plain numbers ([`CollectiveRank`], [`CommTopology`]) so the
//! model does not depend on the plan types; `cost::comm_topology` maps a
//! cluster onto a [`CommTopology`].
//!
//! # Ring (all-gather, reduce-scatter; all-reduce)
//!
//! The ring visits the group in the order given (node order). Every hop has
//! a class: inside a node NVLink (any pair through NVSwitch; bridged pairs
//! `2k, 2k + 1` only) or PCIe; between nodes the network, where a ring
//! with `g` GPUs on a node reaches `min(g, nics)` of its NICs (NCCL runs one
//! channel per NIC, NICs assigned to GPUs as rails). In every step each rank
//! forwards one piece to its neighbour and a step ends when its slowest
//! transfer ends, so with uneven pieces the ring is paced by the largest:
//!
//! ```text
//! t_ring = base + intra steps * intra hop + inter steps * network hop
//!        + steps * max_piece / bw_bottleneck          (steps = p - 1)
//! ```
//!
//! with NCCL's base latency and per-hop latencies of the protocol
//! (`protocol`: LL, LL128 or Simple, the fastest that NCCL enables, each
//! with its bandwidth factor) and `bw_bottleneck` the slowest hop's
//! bandwidth. With even pieces this is the nccl-tests convention `busbw =
//! algbw * (p - 1) / p` with busbw the bottleneck bandwidth. A ring
//! reduce-scatter moves the same volume in the reverse direction (its
//! additions run at memory bandwidth, two orders of magnitude above the
//! links, and are ignored). A ring all-reduce is a reduce-scatter plus an
//! all-gather of `S / p` pieces: `2 (p - 1)` steps, `busbw = algbw * 2 (p -
//! 1) / p`, and NCCL's x1.4 "plateau" on its Simple latency across nodes.
//!
//! # Tree all-reduce (groups spanning nodes)
//!
//! NCCL's double binary tree across nodes (a chain inside each node): the
//! same bus bandwidth as the ring derated by [`TREE_BW_FACTOR`] (NCCL's own
//! tuning model; LL and LL128 by their factors), but a latency of `base + 2
//! (ceil(log2 nodes) * net latency + (ranks per node - 1) * intra latency)`
//! instead of `2 (p - 1)` ring steps.
//!
//! # NVLS (NVLink SHARP) all-reduce
//!
//! On NVSwitch nodes of Hopper and newer the switch reduces: each GPU moves
//! `S` per direction at NCCL's NVLS efficiency; across such nodes NVLS_TREE
//! adds a tree over the NICs ([`RingModel::nvls_time_ms`]).
//! [`CommAlgo::Auto`] takes the fastest of ring, tree and NVLS for an
//! all-reduce, as NCCL's tuner does: tree for small buffers over many
//! nodes, NVLS on H100/H200 nodes, the ring otherwise.
//!
//! # All-to-all
//!
//! No ring: grouped send / receive pairs to every peer, the NVLink / PCIe
//! pieces inside a node and the NIC pieces across nodes at once, the
//! slowest link's time plus a latency per peer (`alltoall`).
//!
//! # Hierarchical (only when asked, [`CommAlgo::Hierarchical`])
//!
//! (1) ring inside every node over its own links (nodes in parallel),
//! (2) ring between the nodes over the NICs where each node's piece is the
//! sum of its ranks' pieces, (3) ring inside every node of the bytes that
//! came from the other nodes. NCCL does not run this schedule for
//! all-gather or reduce-scatter; it is a what-if, never a silent minimum.
//!
//! # Link loads
//!
//! [`CommModel::loads`] says which directed links a collective keeps busy
//! and for how long alone (bytes over the link / the link's bandwidth), so
//! the engine can share links between transfers that overlap in time
//! (`crate::engine`). Inter-node traffic crosses the NIC and the PCIe link
//! of the GPU that owns the NIC's rail.
//!
//! # Measured tables
//!
//! [`MeasuredTable`] answers from measured `(kind, group size, total bytes)
//! -> ms` points instead (see its docs).
//!
//! Invariants (property-tested): time is non-increasing in every bandwidth,
//! non-decreasing in every piece size, and the even-piece case matches the
//! closed form.

mod alltoall;
mod analytic;
mod collective;
mod loads;
mod measured;
mod protocol;
mod ring;
mod topology;

pub use analytic::{ring_ms, RingModel};
pub use collective::{
    CollectiveKind, CommModel, CommSource, GroupSource, LinkKind, LinkRef, ANALYTIC_COMM_ERROR_PCT,
    MEASURED_COMM_ERROR_PCT,
};
pub use measured::{MeasuredPoint, MeasuredTable};
pub use protocol::{
    ring_plateau, HopKind, NcclGen, Protocol, NVLS_CHANNELS, NVLS_EFFICIENCY, NVLS_NVLINK_US,
    NVLS_TREE_NET_US, SIMPLE_NET_HOP_US, SIMPLE_NVLINK_HOP_US, TREE_BW_FACTOR,
};
pub use topology::{CollectiveRank, CommAlgo, CommTopology, NodeLinks};

#[cfg(test)]
mod tests;
