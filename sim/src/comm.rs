//! Communication model for data-parallel collectives (all-gather,
//! reduce-scatter, all-reduce), as NCCL runs them.
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
//! t_ring = (p - 1) * (latency + max_piece / bw_bottleneck)
//! ```
//!
//! where `latency` is the slowest hop's per-step latency and
//! `bw_bottleneck` the slowest hop's bandwidth. With even pieces this is the
//! nccl-tests convention `busbw = algbw * (p - 1) / p` with busbw the
//! bottleneck bandwidth. A ring reduce-scatter moves the same volume in the
//! reverse direction (its additions run at memory bandwidth, two orders of
//! magnitude above the links, and are ignored). A ring all-reduce is a
//! reduce-scatter plus an all-gather of `S / p` pieces:
//! `2 (p - 1) (latency + S / p / bw)`, i.e. `busbw = algbw * 2 (p - 1) / p`.
//!
//! # Tree all-reduce (groups spanning nodes)
//!
//! NCCL's double binary tree across nodes (a chain inside each node): the
//! same bus bandwidth as the ring derated by [`TREE_BW_FACTOR`] (NCCL's own
//! tuning model), but a latency of `2 (ceil(log2 nodes) * net latency +
//! (ranks per node - 1) * intra latency)` instead of `2 (p - 1)` ring
//! steps. [`CommAlgo::Auto`] takes the faster of ring and tree for an
//! all-reduce, as NCCL's tuner does: tree for small buffers over many
//! nodes, ring for large ones.
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

use crate::error::SpecError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// NCCL's bandwidth derating of the tree algorithm against the ring
/// (`src/graph/tuning.cc`: tree bus bandwidth = 0.92 x the ring's when the
/// tree is not limited per channel).
pub const TREE_BW_FACTOR: f64 = 0.92;

/// One participant of a collective: its node, its position on the node and
/// its piece size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveRank {
    /// Index of the node (into [`CommTopology::nodes`]).
    pub node: usize,
    /// Position among the node's GPUs (bridge pairs, NIC rails).
    pub local: usize,
    /// Bytes this rank contributes (all-gather) or receives (reduce-scatter);
    /// for an all-reduce, the whole buffer (the same on every rank).
    pub piece_bytes: f64,
}

/// The links of one node the model needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeLinks {
    /// Achievable NVLink bandwidth between linked GPUs, GB/s; `None` without NVLink.
    pub nvlink_gbps: Option<f64>,
    /// True when NVLink joins pairs only (bridges: local GPUs `2k`, `2k + 1`).
    pub bridged: bool,
    /// Achievable GPU-to-GPU bandwidth over PCIe, GB/s.
    pub pcie_gbps: f64,
    /// Ring-step latency over NVLink, µs.
    pub nvlink_latency_us: f64,
    /// Ring-step latency over PCIe, µs.
    pub pcie_latency_us: f64,
    /// GPUs on the node (for NIC rails).
    pub gpus: usize,
    /// NICs of the node (at least 1).
    pub nics: usize,
    /// Achievable bandwidth of each NIC, GB/s.
    pub nic_gbps: f64,
    /// Ring-step latency over the network, µs.
    pub net_latency_us: f64,
}

impl NodeLinks {
    /// A node whose GPUs talk over PCIe at `pcie_gbps` and whose network
    /// is one NIC of `nic_gbps` (tests, simple what-ifs).
    pub fn simple(gpus: usize, pcie_gbps: f64, nic_gbps: f64) -> NodeLinks {
        NodeLinks {
            nvlink_gbps: None,
            bridged: false,
            pcie_gbps,
            nvlink_latency_us: 5.0,
            pcie_latency_us: 5.0,
            gpus,
            nics: 1,
            nic_gbps,
            net_latency_us: 20.0,
        }
    }

    fn on_nvlink(&self, a: usize, b: usize) -> bool {
        self.nvlink_gbps.is_some() && (!self.bridged || a / 2 == b / 2)
    }

    /// Bandwidth and latency of the hop between local GPUs `a` and `b`.
    fn pair(&self, a: usize, b: usize) -> (f64, f64, bool) {
        match self.nvlink_gbps {
            Some(bw) if self.on_nvlink(a, b) => (bw, self.nvlink_latency_us, true),
            _ => (self.pcie_gbps, self.pcie_latency_us, false),
        }
    }

    /// The NIC (rail) of local GPU `local`.
    fn rail(&self, local: usize) -> usize {
        let g = self.gpus.max(1);
        (local.min(g - 1) * self.nics.max(1)) / g
    }
}

/// Which algorithm a collective uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommAlgo {
    /// As NCCL picks: ring for all-gather / reduce-scatter, the faster of
    /// ring and tree for all-reduce.
    #[default]
    Auto,
    /// Ring for everything.
    Ring,
    /// Tree for all-reduce across nodes (ring otherwise).
    Tree,
    /// Three-phase hierarchical schedule for groups spanning nodes.
    Hierarchical,
}

impl CommAlgo {
    /// Parses `auto`, `ring`, `tree` or `hierarchical`.
    pub fn parse(s: &str) -> Option<CommAlgo> {
        match s {
            "auto" => Some(CommAlgo::Auto),
            "ring" => Some(CommAlgo::Ring),
            "tree" => Some(CommAlgo::Tree),
            "hierarchical" => Some(CommAlgo::Hierarchical),
            _ => None,
        }
    }

    /// The name [`CommAlgo::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            CommAlgo::Auto => "auto",
            CommAlgo::Ring => "ring",
            CommAlgo::Tree => "tree",
            CommAlgo::Hierarchical => "hierarchical",
        }
    }
}

/// The network the communication model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CommTopology {
    /// Per node: its links.
    pub nodes: Vec<NodeLinks>,
    /// Algorithm choice.
    pub algo: CommAlgo,
}

impl CommTopology {
    /// Checks that every bandwidth is finite and positive, every latency
    /// finite and non-negative and every node has a GPU and a NIC; `origin`
    /// names the file or flag for the error.
    pub fn validate(&self, origin: &str) -> Result<(), SpecError> {
        if self.nodes.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "nodes",
                "expected at least one node, got none",
            ));
        }
        let bw_ok = |v: f64| v.is_finite() && v > 0.0;
        let lat_ok = |v: f64| v.is_finite() && v >= 0.0;
        for (i, n) in self.nodes.iter().enumerate() {
            let bws = [
                ("pcie_gbps", n.pcie_gbps),
                ("nic_gbps", n.nic_gbps),
                ("nvlink_gbps", n.nvlink_gbps.unwrap_or(1.0)),
            ];
            for (f, v) in bws {
                if !bw_ok(v) {
                    return Err(SpecError::invalid(
                        origin,
                        format!("nodes[{i}].{f}"),
                        format!("expected a positive bandwidth in GB/s, got {v}"),
                    ));
                }
            }
            let lats = [
                ("nvlink_latency_us", n.nvlink_latency_us),
                ("pcie_latency_us", n.pcie_latency_us),
                ("net_latency_us", n.net_latency_us),
            ];
            for (f, v) in lats {
                if !lat_ok(v) {
                    return Err(SpecError::invalid(
                        origin,
                        format!("nodes[{i}].{f}"),
                        format!("expected a non-negative latency in µs, got {v}"),
                    ));
                }
            }
            if n.gpus == 0 || n.nics == 0 {
                return Err(SpecError::invalid(
                    origin,
                    format!("nodes[{i}]"),
                    "expected at least one GPU and one NIC",
                ));
            }
        }
        Ok(())
    }

    /// Checks that every rank names a GPU of this topology and has a
    /// finite, non-negative piece.
    pub fn validate_ranks(&self, origin: &str, ranks: &[CollectiveRank]) -> Result<(), SpecError> {
        for (i, r) in ranks.iter().enumerate() {
            let Some(node) = self.nodes.get(r.node) else {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].node"),
                    format!(
                        "expected a node index below {}, got {}",
                        self.nodes.len(),
                        r.node
                    ),
                ));
            };
            if r.local >= node.gpus {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].local"),
                    format!(
                        "expected a GPU index below {} on node {}, got {}",
                        node.gpus, r.node, r.local
                    ),
                ));
            }
            if !(r.piece_bytes.is_finite() && r.piece_bytes >= 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].piece_bytes"),
                    format!("expected a non-negative byte count, got {}", r.piece_bytes),
                ));
            }
        }
        Ok(())
    }

    /// The links of `node`; an index outside the list (which
    /// [`CommTopology::validate_ranks`] rejects) gets the slowest node's
    /// figures, so the model never panics.
    fn node(&self, node: usize) -> NodeLinks {
        match self.nodes.get(node) {
            Some(n) => *n,
            None => {
                let mut slow = NodeLinks::simple(1, f64::INFINITY, f64::INFINITY);
                for n in &self.nodes {
                    slow.pcie_gbps = slow.pcie_gbps.min(n.pcie_gbps);
                    slow.nic_gbps = slow.nic_gbps.min(n.nic_gbps);
                }
                if !slow.pcie_gbps.is_finite() {
                    slow.pcie_gbps = 1.0;
                    slow.nic_gbps = 1.0;
                }
                slow
            }
        }
    }
}

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Every rank ends with the concatenation of all pieces.
    AllGather,
    /// Every rank ends with its piece of the element-wise sum.
    ReduceScatter,
    /// Every rank ends with the whole element-wise sum.
    AllReduce,
}

impl CollectiveKind {
    /// Every kind.
    pub const ALL: [CollectiveKind; 3] = [
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllReduce,
    ];

    /// The name profiles and reports use (`all_gather`, `reduce_scatter`, `all_reduce`).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::AllReduce => "all_reduce",
        }
    }

    /// Parses a profile's kind name.
    pub fn parse(s: &str) -> Option<CollectiveKind> {
        match s {
            "all_gather" => Some(CollectiveKind::AllGather),
            "reduce_scatter" => Some(CollectiveKind::ReduceScatter),
            "all_reduce" => Some(CollectiveKind::AllReduce),
            _ => None,
        }
    }

    /// nccl-tests' bus-bandwidth factor for `p` ranks: `(p - 1) / p` for
    /// all-gather and reduce-scatter, `2 (p - 1) / p` for all-reduce
    /// (`busbw = algbw x factor`).
    pub fn busbw_factor(self, p: usize) -> f64 {
        if p == 0 {
            return 0.0;
        }
        let f = (p as f64 - 1.0) / p as f64;
        match self {
            CollectiveKind::AllReduce => 2.0 * f,
            _ => f,
        }
    }

    /// The buffer a collective over `ranks` moves, the size nccl-tests and
    /// NCCL call `nBytes`: the gathered size (sum of pieces at the pace of
    /// the largest, `p x max piece`) for all-gather and reduce-scatter, the
    /// buffer for an all-reduce.
    pub fn buffer_bytes(self, ranks: &[CollectiveRank]) -> f64 {
        let max_piece = ranks
            .iter()
            .map(|r| r.piece_bytes.max(0.0))
            .fold(0.0, f64::max);
        match self {
            CollectiveKind::AllReduce => max_piece,
            _ => max_piece * ranks.len() as f64,
        }
    }
}

/// A directed link a collective or a copy keeps busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkRef {
    /// Node of the link.
    pub node: usize,
    /// GPU position on the node (NVLink, PCIe) or NIC index (network).
    pub index: usize,
    /// Which link.
    pub kind: LinkKind,
    /// Sending (true) or receiving direction.
    pub tx: bool,
}

/// Kind of a [`LinkRef`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkKind {
    /// A GPU's NVLink ports.
    Nvlink,
    /// A GPU's PCIe link (peer traffic, host copies, its rail's NIC traffic).
    Pcie,
    /// A NIC.
    Nic,
}

/// A communication cost model: time of one collective over given ranks.
pub trait CommModel: Send + Sync + std::fmt::Debug {
    /// Time in ms of collective `kind` over `ranks` (one entry per rank, in
    /// ring order). Zero for fewer than two ranks.
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64;
    /// The links the collective keeps busy and for how long each (ms) when
    /// it runs alone; every busy time is at most [`CommModel::time_ms`].
    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)>;
    /// A point-to-point transfer of `bytes` from `from` to `to` (a pipeline
    /// stage handing activations or gradients to its neighbour, NCCL
    /// send/recv): its time in ms (one hop's latency plus the bytes over
    /// the hop's bandwidth, as one step of a ring between the two) and the
    /// directed links it keeps busy (sender's out, receiver's in, no
    /// reverse traffic). Zero on the same GPU.
    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>);
    /// One line naming the model and its parameters (for report provenance).
    fn describe(&self) -> String;
}

/// Time in ms of a ring over `p` ranks with largest piece `max_piece_bytes`,
/// per-step latency `latency_us` and bottleneck bandwidth `bw_gbps`:
/// `(p - 1) * (latency + max_piece / bw)`; zero when `p < 2`.
pub fn ring_ms(p: usize, max_piece_bytes: f64, bw_gbps: f64, latency_us: f64) -> f64 {
    if p < 2 {
        return 0.0;
    }
    let step_ms = latency_us * 1e-3 + max_piece_bytes.max(0.0) / (bw_gbps * 1e9) * 1e3;
    (p - 1) as f64 * step_ms
}

/// One hop of a ring.
#[derive(Debug, Clone, Copy)]
enum Hop {
    /// Inside `node` from local GPU `a` to `b`.
    Intra {
        node: usize,
        a: usize,
        b: usize,
        nvlink: bool,
        bw: f64,
    },
    /// From node `from` to node `to`.
    Inter { from: usize, to: usize },
}

/// A ring's hops with its bottleneck bandwidth and slowest step latency.
#[derive(Debug, Clone)]
struct Ring {
    hops: Vec<Hop>,
    bw_gbps: f64,
    latency_us: f64,
}

/// Per node of a group: ranks, NIC rails used (and the first rank on each).
#[derive(Debug, Clone, Default)]
struct NodeGroup {
    ranks: usize,
    max_piece_bytes: f64,
    sum_bytes: f64,
    /// (rail, local GPU owning it in the group), sorted by rail.
    rails: Vec<(usize, usize)>,
}

/// The analytic NCCL-style model described in the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct RingModel {
    /// The network.
    pub topo: CommTopology,
}

impl RingModel {
    /// A model over `topo` (call [`CommTopology::validate`] first on user input).
    pub fn new(topo: CommTopology) -> RingModel {
        RingModel { topo }
    }

    /// Per-node summary of the group, in node order (deterministic).
    fn groups(&self, ranks: &[CollectiveRank]) -> BTreeMap<usize, NodeGroup> {
        let mut groups: BTreeMap<usize, NodeGroup> = BTreeMap::new();
        for r in ranks {
            let g = groups.entry(r.node).or_default();
            let piece = r.piece_bytes.max(0.0);
            g.ranks += 1;
            g.max_piece_bytes = g.max_piece_bytes.max(piece);
            g.sum_bytes += piece;
            let rail = self.topo.node(r.node).rail(r.local);
            if let Err(at) = g.rails.binary_search_by_key(&rail, |x| x.0) {
                g.rails.insert(at, (rail, r.local));
            }
        }
        groups
    }

    /// Bandwidth a ring reaches through the NICs of `node` (one per rail).
    fn net_gbps(&self, node: usize, groups: &BTreeMap<usize, NodeGroup>) -> f64 {
        let n = self.topo.node(node);
        let rails = groups.get(&node).map_or(1, |g| g.rails.len().max(1));
        rails as f64 * n.nic_gbps
    }

    /// The ring over `ranks` in the order given.
    fn ring(&self, ranks: &[CollectiveRank], groups: &BTreeMap<usize, NodeGroup>) -> Ring {
        let p = ranks.len();
        let mut hops = Vec::with_capacity(p);
        let mut bw = f64::INFINITY;
        let mut latency_us = 0.0f64;
        for i in 0..p {
            let (x, y) = (ranks[i], ranks[(i + 1) % p]);
            if x.node == y.node {
                let n = self.topo.node(x.node);
                let (b, lat, nvlink) = n.pair(x.local, y.local);
                bw = bw.min(b);
                latency_us = latency_us.max(lat);
                hops.push(Hop::Intra {
                    node: x.node,
                    a: x.local,
                    b: y.local,
                    nvlink,
                    bw: b,
                });
            } else {
                let b = self
                    .net_gbps(x.node, groups)
                    .min(self.net_gbps(y.node, groups));
                bw = bw.min(b);
                let lat = self
                    .topo
                    .node(x.node)
                    .net_latency_us
                    .max(self.topo.node(y.node).net_latency_us);
                latency_us = latency_us.max(lat);
                hops.push(Hop::Inter {
                    from: x.node,
                    to: y.node,
                });
            }
        }
        Ring {
            hops,
            bw_gbps: bw,
            latency_us,
        }
    }

    /// Ring time of `kind` in ms (all-reduce: reduce-scatter + all-gather
    /// of `S / p` pieces).
    pub fn ring_time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        if p < 2 {
            return 0.0;
        }
        let groups = self.groups(ranks);
        let ring = self.ring(ranks, &groups);
        let buffer = kind.buffer_bytes(ranks);
        match kind {
            CollectiveKind::AllReduce => {
                2.0 * ring_ms(p, buffer / p as f64, ring.bw_gbps, ring.latency_us)
            }
            _ => ring_ms(p, buffer / p as f64, ring.bw_gbps, ring.latency_us),
        }
    }

    /// Tree all-reduce time in ms (groups spanning nodes; the ring's time
    /// on one node).
    pub fn tree_time_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        let groups = self.groups(ranks);
        if groups.len() < 2 {
            return self.ring_time_ms(CollectiveKind::AllReduce, ranks);
        }
        let ring = self.ring(ranks, &groups);
        let buffer = CollectiveKind::AllReduce.buffer_bytes(ranks);
        let bw_ms = CollectiveKind::AllReduce.busbw_factor(p) * buffer
            / (TREE_BW_FACTOR * ring.bw_gbps * 1e9)
            * 1e3;
        let depth = (groups.len() as f64).log2().ceil();
        let net_lat = groups
            .keys()
            .map(|&n| self.topo.node(n).net_latency_us)
            .fold(0.0, f64::max);
        let mut chain_us = 0.0f64;
        for (&n, g) in &groups {
            let node = self.topo.node(n);
            let lat = if node.nvlink_gbps.is_some() && !node.bridged {
                node.nvlink_latency_us
            } else {
                node.pcie_latency_us
            };
            chain_us = chain_us.max((g.ranks as f64 - 1.0) * lat);
        }
        bw_ms + 2.0 * (depth * net_lat + chain_us) * 1e-3
    }

    /// Hierarchical schedule in ms: intra phase + inter-node ring + intra
    /// phase (see module docs). Equals the ring for a single node.
    pub fn hierarchical_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        let (t, _) = self.hierarchical(kind, ranks, false);
        t
    }

    /// Hierarchical time and (when `with_loads`) link busy times.
    fn hierarchical(
        &self,
        kind: CollectiveKind,
        ranks: &[CollectiveRank],
        with_loads: bool,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        let groups = self.groups(ranks);
        if groups.len() < 2 {
            let t = self.ring_time_ms(kind, ranks);
            let loads = if with_loads {
                self.ring_loads(kind, ranks)
            } else {
                Vec::new()
            };
            return (t, loads);
        }
        let even: Vec<CollectiveRank>;
        let (ranks, factor) = match kind {
            CollectiveKind::AllReduce => {
                let p = ranks.len() as f64;
                let buffer = kind.buffer_bytes(ranks);
                even = ranks
                    .iter()
                    .map(|r| CollectiveRank {
                        piece_bytes: buffer / p,
                        ..*r
                    })
                    .collect();
                (&even[..], 2.0)
            }
            _ => (ranks, 1.0),
        };
        let groups = self.groups(ranks);
        let total: f64 = groups.values().map(|g| g.sum_bytes).sum();
        let mut phase1 = 0.0f64;
        let mut phase3 = 0.0f64;
        let mut max_node_bytes = 0.0f64;
        let mut loads = Vec::new();
        for (&node, g) in &groups {
            let members: Vec<CollectiveRank> =
                ranks.iter().copied().filter(|r| r.node == node).collect();
            let sub = self.groups(&members);
            let ring = self.ring(&members, &sub);
            let remote = (total - g.sum_bytes).max(0.0);
            let t1 = ring_ms(g.ranks, g.max_piece_bytes, ring.bw_gbps, ring.latency_us);
            let t3 = ring_ms(
                g.ranks,
                remote / g.ranks as f64,
                ring.bw_gbps,
                ring.latency_us,
            );
            phase1 = phase1.max(t1);
            phase3 = phase3.max(t3);
            max_node_bytes = max_node_bytes.max(g.sum_bytes);
            if with_loads && g.ranks >= 2 {
                let hop_bytes =
                    (g.ranks - 1) as f64 * (g.max_piece_bytes + remote / g.ranks as f64) * factor;
                self.hop_loads(&ring.hops, hop_bytes, &sub, &mut loads);
            }
        }
        let node_ring: Vec<CollectiveRank> = groups
            .iter()
            .map(|(&node, g)| CollectiveRank {
                node,
                local: g.rails.first().map_or(0, |r| r.1),
                piece_bytes: g.sum_bytes,
            })
            .collect();
        let ring = self.ring(&node_ring, &groups);
        let phase2 = ring_ms(groups.len(), max_node_bytes, ring.bw_gbps, ring.latency_us);
        if with_loads {
            let hop_bytes = (groups.len() - 1) as f64 * max_node_bytes * factor;
            self.hop_loads(&ring.hops, hop_bytes, &groups, &mut loads);
        }
        (factor * (phase1 + phase2 + phase3), merge_loads(loads))
    }

    /// Busy time (ms) of every link a ring's hops use, `hop_bytes` over each hop.
    fn hop_loads(
        &self,
        hops: &[Hop],
        hop_bytes: f64,
        groups: &BTreeMap<usize, NodeGroup>,
        out: &mut Vec<(LinkRef, f64)>,
    ) {
        let ms = |bytes: f64, bw: f64| bytes / (bw * 1e9) * 1e3;
        for hop in hops {
            match *hop {
                Hop::Intra {
                    node,
                    a,
                    b,
                    nvlink,
                    bw,
                } => {
                    let kind = if nvlink {
                        LinkKind::Nvlink
                    } else {
                        LinkKind::Pcie
                    };
                    let t = ms(hop_bytes, bw);
                    for (index, tx) in [(a, true), (b, false)] {
                        out.push((
                            LinkRef {
                                node,
                                index,
                                kind,
                                tx,
                            },
                            t,
                        ));
                    }
                }
                Hop::Inter { from, to } => {
                    for (node, tx) in [(from, true), (to, false)] {
                        let n = self.topo.node(node);
                        let rails: &[(usize, usize)] =
                            groups.get(&node).map_or(&[], |g| &g.rails[..]);
                        let share = hop_bytes / rails.len().max(1) as f64;
                        for &(rail, owner) in rails {
                            out.push((
                                LinkRef {
                                    node,
                                    index: rail,
                                    kind: LinkKind::Nic,
                                    tx,
                                },
                                ms(share, n.nic_gbps),
                            ));
                            out.push((
                                LinkRef {
                                    node,
                                    index: owner,
                                    kind: LinkKind::Pcie,
                                    tx,
                                },
                                ms(share, n.pcie_gbps),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Link busy times of the ring schedule.
    fn ring_loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        let p = ranks.len();
        if p < 2 {
            return Vec::new();
        }
        let groups = self.groups(ranks);
        let ring = self.ring(ranks, &groups);
        let piece = kind.buffer_bytes(ranks) / p as f64;
        let steps = match kind {
            CollectiveKind::AllReduce => 2 * (p - 1),
            _ => p - 1,
        };
        let mut out = Vec::with_capacity(2 * p);
        self.hop_loads(&ring.hops, steps as f64 * piece, &groups, &mut out);
        merge_loads(out)
    }

    /// Whether `kind` over `ranks` runs as a tree under this model's algorithm.
    fn uses_tree(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> bool {
        if kind != CollectiveKind::AllReduce {
            return false;
        }
        match self.topo.algo {
            CommAlgo::Tree => true,
            CommAlgo::Auto => {
                let first = ranks.first().map(|r| r.node);
                ranks.iter().any(|r| Some(r.node) != first)
                    && self.tree_time_ms(ranks) < self.ring_time_ms(kind, ranks)
            }
            _ => false,
        }
    }
}

/// Sums busy times per link (sorted, deterministic).
fn merge_loads(mut loads: Vec<(LinkRef, f64)>) -> Vec<(LinkRef, f64)> {
    loads.sort_by_key(|a| a.0);
    let mut out: Vec<(LinkRef, f64)> = Vec::with_capacity(loads.len());
    for (l, t) in loads {
        match out.last_mut() {
            Some(last) if last.0 == l => last.1 += t,
            _ => out.push((l, t)),
        }
    }
    out
}

impl CommModel for RingModel {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        if ranks.len() < 2 {
            return 0.0;
        }
        match self.topo.algo {
            CommAlgo::Hierarchical => self.hierarchical_ms(kind, ranks),
            _ if self.uses_tree(kind, ranks) => self.tree_time_ms(ranks),
            _ => self.ring_time_ms(kind, ranks),
        }
    }

    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        if ranks.len() < 2 {
            return Vec::new();
        }
        let (t, loads) = match self.topo.algo {
            CommAlgo::Hierarchical => self.hierarchical(kind, ranks, true),
            _ => (self.time_ms(kind, ranks), self.ring_loads(kind, ranks)),
        };
        // The tree moves the ring's volume at a derated pace: same links,
        // busy at most the whole collective.
        loads.into_iter().map(|(l, b)| (l, b.min(t))).collect()
    }

    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        if from.node == to.node && from.local == to.local {
            return (0.0, Vec::new());
        }
        let pair = [*from, *to];
        let groups = self.groups(&pair);
        let ring = self.ring(&pair, &groups);
        // The first hop is from -> to; its bandwidth is the pair's link
        // (the ring's bottleneck over both directions, symmetric links).
        let hop = &ring.hops[..1];
        let t = ring_ms(2, bytes, ring.bw_gbps, ring.latency_us);
        let mut loads = Vec::with_capacity(4);
        self.hop_loads(hop, bytes.max(0.0), &groups, &mut loads);
        (t, merge_loads(loads))
    }

    fn describe(&self) -> String {
        let t = &self.topo;
        let mut nodes: Vec<String> = Vec::new();
        for n in &t.nodes {
            let intra = match n.nvlink_gbps {
                Some(b) if n.bridged => format!("bridge {b:.1}/pcie {:.1}", n.pcie_gbps),
                Some(b) => format!("nvlink {b:.1}"),
                None => format!("pcie {:.1}", n.pcie_gbps),
            };
            let s = format!("{intra}, {}x{:.2} net", n.nics, n.nic_gbps);
            if nodes.last() != Some(&s) {
                nodes.push(s);
            }
        }
        format!(
            "analytic NCCL model (algorithm {}): GB/s per node [{}]",
            t.algo.name(),
            nodes.join("; ")
        )
    }
}

/// One measured collective time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPoint {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Number of ranks in the group.
    pub group_size: usize,
    /// Nodes the measured group spanned, when known (nccl-tests logs name
    /// each rank's host); `None` serves groups on any number of nodes.
    #[serde(default)]
    pub nodes: Option<usize>,
    /// Buffer in bytes ([`CollectiveKind::buffer_bytes`]: the sum of the
    /// even pieces for all-gather / reduce-scatter, the buffer for all-reduce).
    pub total_bytes: f64,
    /// Measured time, ms.
    pub time_ms: f64,
    /// Whether groups of another size on the same nodes may use this curve
    /// rescaled to equal bus bandwidth (imported nccl-tests logs).
    #[serde(default)]
    pub rescalable: bool,
}

/// Where a collective time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommSource {
    /// Interpolated between measured points.
    Measured,
    /// Outside the measured byte range: analytic model scaled to the nearest point.
    Extrapolated,
    /// A curve measured on another number of ranks, rescaled to equal bus bandwidth.
    Rescaled,
    /// No measurement for this kind and group size: analytic model.
    Analytic,
}

/// A measured curve: points sorted by bytes, times non-decreasing.
#[derive(Debug, Clone)]
struct Curve {
    points: Vec<(f64, f64)>,
    rescalable: bool,
}

/// Measured-table mode: `(kind, group size, nodes, total bytes) -> ms` points.
///
/// Lookup for a group of `p` ranks on `k` nodes uses
/// [`CollectiveKind::buffer_bytes`]: the even-equivalent buffer
/// `p * max_piece` for all-gather and reduce-scatter (a ring is paced by its
/// largest piece, so uneven pieces cost what even pieces of that size
/// cost), the buffer for all-reduce. A curve of the same kind and size
/// measured on `k` nodes is preferred, then one whose node count is not
/// known. Inside the measured byte range the time is interpolated linearly
/// in bytes between the neighbouring points; outside it the analytic
/// fallback answers, scaled by `measured / analytic` at the nearest
/// measured point so the curve stays continuous. A group size nobody
/// measured uses a rescalable curve of the same kind on the same nodes (the
/// nearest size), at equal bus bandwidth: `t_p = t_q x f(p) / f(q)` with
/// `f` [`CollectiveKind::busbw_factor`]; else the analytic model. Measured
/// times are made non-decreasing in bytes at construction (running
/// maximum), so measurement noise cannot make a larger buffer cheaper.
#[derive(Debug, Clone)]
pub struct MeasuredTable {
    fallback: RingModel,
    curves: BTreeMap<(CollectiveKind, usize, Option<usize>), Curve>,
}

impl MeasuredTable {
    /// Builds a table from `points`; `origin` names their file for errors.
    /// Rejects non-finite or negative values and group sizes below 2; for
    /// duplicate byte sizes the first point listed is kept.
    pub fn new(
        origin: &str,
        fallback: RingModel,
        points: &[MeasuredPoint],
    ) -> Result<MeasuredTable, SpecError> {
        let mut curves: BTreeMap<(CollectiveKind, usize, Option<usize>), Curve> = BTreeMap::new();
        for (i, pt) in points.iter().enumerate() {
            if pt.group_size < 2 {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].group_size"),
                    format!("expected at least 2 ranks, got {}", pt.group_size),
                ));
            }
            if !(pt.total_bytes.is_finite() && pt.total_bytes > 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].total_bytes"),
                    format!("expected a positive byte count, got {}", pt.total_bytes),
                ));
            }
            if !(pt.time_ms.is_finite() && pt.time_ms >= 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].time_ms"),
                    format!("expected a non-negative time in ms, got {}", pt.time_ms),
                ));
            }
            let c = curves
                .entry((pt.kind, pt.group_size, pt.nodes))
                .or_insert(Curve {
                    points: Vec::new(),
                    rescalable: pt.rescalable,
                });
            c.rescalable &= pt.rescalable;
            c.points.push((pt.total_bytes, pt.time_ms));
        }
        for curve in curves.values_mut() {
            let curve = &mut curve.points;
            // Stable sort keeps the first of equal byte sizes first.
            curve.sort_by(|a, b| a.0.total_cmp(&b.0));
            curve.dedup_by(|later, earlier| later.0 == earlier.0);
            let mut running = 0.0f64;
            for pt in curve.iter_mut() {
                running = running.max(pt.1);
                pt.1 = running;
            }
        }
        Ok(MeasuredTable { fallback, curves })
    }

    /// Number of measured curves (kind, group size, nodes).
    pub fn curves(&self) -> usize {
        self.curves.len()
    }

    /// The curve serving `kind` over `p` ranks on `nodes` nodes, and the
    /// rank count it was measured on.
    fn curve_for(&self, kind: CollectiveKind, p: usize, nodes: usize) -> Option<(&Curve, usize)> {
        let exact = self
            .curves
            .get(&(kind, p, Some(nodes)))
            .or_else(|| self.curves.get(&(kind, p, None)));
        if let Some(c) = exact.filter(|c| !c.points.is_empty()) {
            return Some((c, p));
        }
        self.curves
            .iter()
            .filter(|((k, q, n), c)| {
                *k == kind
                    && *q != p
                    && c.rescalable
                    && !c.points.is_empty()
                    && n.is_none_or(|n| n == nodes)
            })
            .min_by_key(|((_, q, _), _)| q.abs_diff(p))
            .map(|((_, q, _), c)| (c, *q))
    }

    /// Time in ms and its source for `kind` over `ranks`.
    pub fn time_with_source(
        &self,
        kind: CollectiveKind,
        ranks: &[CollectiveRank],
    ) -> (f64, CommSource) {
        let p = ranks.len();
        if p < 2 {
            return (0.0, CommSource::Measured);
        }
        let mut nodes: Vec<usize> = ranks.iter().map(|r| r.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let Some((curve, q)) = self.curve_for(kind, p, nodes.len()) else {
            return (self.fallback.time_ms(kind, ranks), CommSource::Analytic);
        };
        let rescale = kind.busbw_factor(p) / kind.busbw_factor(q);
        let curve = &curve.points;
        let bytes = kind.buffer_bytes(ranks);
        let first = curve[0];
        let last = curve[curve.len() - 1];
        let (t, source) = if bytes < first.0 || bytes > last.0 {
            let anchor = if bytes < first.0 { first } else { last };
            let analytic = self.fallback.time_ms(kind, ranks);
            let anchor_piece = match kind {
                CollectiveKind::AllReduce => anchor.0,
                _ => anchor.0 / p as f64,
            };
            let anchor_ranks: Vec<CollectiveRank> = ranks
                .iter()
                .map(|r| CollectiveRank {
                    piece_bytes: anchor_piece,
                    ..*r
                })
                .collect();
            let analytic_anchor = self.fallback.time_ms(kind, &anchor_ranks);
            let t = if analytic_anchor > 0.0 {
                anchor.1 * rescale * analytic / analytic_anchor
            } else {
                (anchor.1 * rescale).max(analytic)
            };
            (t, CommSource::Extrapolated)
        } else {
            // First point with bytes >= query (exists because bytes <= last.0).
            let hi = curve.partition_point(|pt| pt.0 < bytes);
            let (b1, t1) = curve[hi];
            if hi == 0 || b1 == bytes {
                (t1 * rescale, CommSource::Measured)
            } else {
                let (b0, t0) = curve[hi - 1];
                let w = (bytes - b0) / (b1 - b0);
                ((t0 + w * (t1 - t0)) * rescale, CommSource::Measured)
            }
        };
        if q != p && source == CommSource::Measured {
            return (t, CommSource::Rescaled);
        }
        (t, source)
    }
}

impl CommModel for MeasuredTable {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        self.time_with_source(kind, ranks).0
    }

    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        // The analytic schedule's links, busy for the measured time's share.
        let t = self.time_ms(kind, ranks);
        let analytic = self.fallback.time_ms(kind, ranks);
        let scale = if analytic > 0.0 { t / analytic } else { 0.0 };
        self.fallback
            .loads(kind, ranks)
            .into_iter()
            .map(|(l, b)| (l, (b * scale).min(t)))
            .collect()
    }

    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        // Tables hold collectives; a send/recv is costed analytically.
        self.fallback.p2p(from, to, bytes)
    }

    fn describe(&self) -> String {
        let points: usize = self.curves.values().map(|c| c.points.len()).sum();
        format!(
            "measured table ({} curves, {} points), fallback: {}",
            self.curves.len(),
            points,
            self.fallback.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `nodes` nodes of `gpus` GPUs on PCIe at `intra` GB/s, one NIC of `inter`.
    fn topo(nodes: usize, intra: f64, inter: f64) -> CommTopology {
        CommTopology {
            nodes: vec![NodeLinks::simple(16, intra, inter); nodes],
            algo: CommAlgo::Auto,
        }
    }

    /// Even pieces of `total` over ranks on `nodes` (local positions in order).
    fn even(nodes: &[usize], total: f64) -> Vec<CollectiveRank> {
        let p = nodes.len() as f64;
        let mut seen = BTreeMap::new();
        nodes
            .iter()
            .map(|&node| {
                let local = seen.entry(node).or_insert(0usize);
                *local += 1;
                CollectiveRank {
                    node,
                    local: *local - 1,
                    piece_bytes: total / p,
                }
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    fn busbw(kind: CollectiveKind, p: usize, bytes: f64, ms: f64) -> f64 {
        bytes / (ms * 1e-3) / 1e9 * kind.busbw_factor(p)
    }

    #[test]
    fn single_rank_is_free() {
        let m = RingModel::new(topo(1, 10.0, 10.0));
        let r = even(&[0], 1e9);
        assert_eq!(m.time_ms(CollectiveKind::AllGather, &r), 0.0);
        assert_eq!(m.time_ms(CollectiveKind::ReduceScatter, &[]), 0.0);
        assert!(m.loads(CollectiveKind::AllGather, &r).is_empty());
    }

    #[test]
    fn even_pieces_match_closed_form() {
        // 4 ranks on one PCIe node, 1 GB total at 10 GB/s, 5 µs steps:
        // 3 * 5 µs + 3/4 * 100 ms = 75.015 ms.
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let t = m.time_ms(CollectiveKind::AllGather, &even(&[0, 0, 0, 0], 1e9));
        assert!(close(t, 75.015), "{t}");
    }

    #[test]
    fn uneven_pieces_pace_at_the_largest() {
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let mut r = even(&[0, 0, 0, 0], 0.0);
        for (x, b) in r.iter_mut().zip([1e8, 2e8, 5e8, 2e8]) {
            x.piece_bytes = b;
        }
        // 3 * (5 µs + 50 ms)
        assert!(close(m.time_ms(CollectiveKind::AllGather, &r), 150.015));
    }

    #[test]
    fn two_nodes_behind_one_nic_run_a_flat_ring() {
        // 2 nodes x 8 ranks, NVSwitch 234 GB/s, one NIC of 23 GB/s: NCCL's
        // ring crosses the NIC every step, busbw = the NIC's bandwidth.
        let mut t = topo(2, 22.0, 23.0);
        for n in &mut t.nodes {
            n.nvlink_gbps = Some(234.0);
            n.gpus = 8;
        }
        let m = RingModel::new(t.clone());
        let nodes: Vec<usize> = (0..16).map(|i| i / 8).collect();
        let r = even(&nodes, 8e9);
        let ag = m.time_ms(CollectiveKind::AllGather, &r);
        assert!(close(ag, 15.0 * (0.020 + 0.5e9 / 23e9 * 1e3)), "{ag}");
        let bus = busbw(CollectiveKind::AllGather, 16, 8e9, ag);
        assert!((bus - 23.0).abs() < 0.1, "{bus}");
        // The hierarchical schedule only when asked, and then faster here.
        t.algo = CommAlgo::Hierarchical;
        let hier = RingModel::new(t.clone()).time_ms(CollectiveKind::AllGather, &r);
        assert!(hier < 0.7 * ag, "hier {hier} ring {ag}");
        // Four NICs per node: a ring with 8 GPUs per node reaches all four.
        t.algo = CommAlgo::Auto;
        for n in &mut t.nodes {
            n.nics = 4;
        }
        let four = RingModel::new(t.clone()).time_ms(CollectiveKind::AllGather, &r);
        let bus4 = busbw(CollectiveKind::AllGather, 16, 8e9, four);
        assert!((bus4 - 92.0).abs() < 0.5, "{bus4}");
        // One GPU per node reaches one NIC.
        let one = even(&[0, 1], 8e9);
        let t1 = RingModel::new(t).time_ms(CollectiveKind::AllGather, &one);
        assert!((busbw(CollectiveKind::AllGather, 2, 8e9, t1) - 23.0).abs() < 0.1);
    }

    #[test]
    fn bridged_pairs_pace_larger_rings_at_pcie() {
        let mut t = topo(1, 20.0, 10.0);
        t.nodes[0].nvlink_gbps = Some(45.0);
        t.nodes[0].bridged = true;
        t.nodes[0].gpus = 4;
        let m = RingModel::new(t);
        let ag = CollectiveKind::AllGather;
        let two = m.time_ms(ag, &even(&[0, 0], 1e9));
        assert!((busbw(ag, 2, 1e9, two) - 45.0).abs() < 0.1, "{two}");
        let four = m.time_ms(ag, &even(&[0, 0, 0, 0], 1e9));
        assert!((busbw(ag, 4, 1e9, four) - 20.0).abs() < 0.1, "{four}");
        // Loads: the NVLink hops on NVLink ports, the crossing ones on PCIe.
        let loads = m.loads(ag, &even(&[0, 0, 0, 0], 1e9));
        assert!(loads.iter().any(|(l, _)| l.kind == LinkKind::Nvlink));
        assert!(loads.iter().any(|(l, _)| l.kind == LinkKind::Pcie));
        assert!(loads.iter().all(|&(_, b)| b <= four * (1.0 + 1e-12)));
    }

    #[test]
    fn reduce_scatter_costs_as_all_gather() {
        let m = RingModel::new(topo(2, 50.0, 10.0));
        let r = even(&[0, 0, 1, 1, 1], 3e9);
        assert_eq!(
            m.time_ms(CollectiveKind::AllGather, &r),
            m.time_ms(CollectiveKind::ReduceScatter, &r)
        );
    }

    #[test]
    fn all_reduce_ring_and_tree() {
        // 4 ranks, 1 GB buffer, 10 GB/s, 5 µs: 2 x 3 x (5 µs + 250 MB / 10 GB/s).
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let r: Vec<_> = even(&[0, 0, 0, 0], 4e9);
        let t = m.time_ms(CollectiveKind::AllReduce, &r);
        assert!(close(t, 2.0 * 3.0 * (0.005 + 25.0)), "{t}");
        assert_eq!(CollectiveKind::AllReduce.buffer_bytes(&r), 1e9);
        assert_eq!(CollectiveKind::AllGather.buffer_bytes(&r), 4e9);
        for k in CollectiveKind::ALL {
            assert_eq!(CollectiveKind::parse(k.name()), Some(k));
        }
        // 64 nodes of one GPU: tree for a small bucket (latency), ring for
        // a large buffer (bandwidth), as NCCL's tuner picks.
        let m = RingModel::new(topo(64, 20.0, 12.0));
        let nodes: Vec<usize> = (0..64).collect();
        let small: Vec<_> = even(&nodes, 64.0 * 1e6);
        let large: Vec<_> = even(&nodes, 64.0 * 4e9);
        let ar = CollectiveKind::AllReduce;
        assert!(m.tree_time_ms(&small) < m.ring_time_ms(ar, &small));
        assert!(close(m.time_ms(ar, &small), m.tree_time_ms(&small)));
        assert!(m.tree_time_ms(&large) > m.ring_time_ms(ar, &large));
        assert!(close(m.time_ms(ar, &large), m.ring_time_ms(ar, &large)));
        // Ring only when asked.
        let mut t = topo(64, 20.0, 12.0);
        t.algo = CommAlgo::Ring;
        assert!(close(
            RingModel::new(t).time_ms(ar, &small),
            m.ring_time_ms(ar, &small)
        ));
    }

    #[test]
    fn loads_follow_the_ring() {
        // 2 nodes x 2 GPUs on PCIe, one NIC each.
        let m = RingModel::new(topo(2, 10.0, 5.0));
        let r = even(&[0, 0, 1, 1], 4e9);
        let t = m.time_ms(CollectiveKind::AllGather, &r);
        let loads = m.loads(CollectiveKind::AllGather, &r);
        // Every hop carries 3 pieces of 1 GB: the NIC hops at 5 GB/s are
        // the bottleneck, busy 600 ms of t.
        let nic: Vec<_> = loads
            .iter()
            .filter(|(l, _)| l.kind == LinkKind::Nic)
            .collect();
        assert_eq!(nic.len(), 4, "{loads:?}");
        for (_, b) in nic {
            assert!(close(*b, 600.0), "{b}");
        }
        assert!(t >= 600.0);
        assert!(loads.iter().all(|&(_, b)| b > 0.0 && b <= t));
    }

    #[test]
    fn validate_names_the_field() {
        let mut t = topo(2, 10.0, 10.0);
        t.nodes[1].pcie_gbps = -1.0;
        let e = t.validate("cluster.toml").unwrap_err().to_string();
        assert!(e.contains("nodes[1].pcie_gbps"), "{e}");
        let t = topo(2, 10.0, 10.0);
        let bad = [CollectiveRank {
            node: 5,
            local: 0,
            piece_bytes: 1.0,
        }];
        assert!(t.validate_ranks("x", &bad).is_err());
        // Out-of-range nodes never panic.
        let m = RingModel::new(t);
        let r = [bad[0], even(&[0], 1.0)[0]];
        assert!(m.time_ms(CollectiveKind::AllGather, &r).is_finite());
    }

    fn point(group_size: usize, total_bytes: f64, time_ms: f64) -> MeasuredPoint {
        MeasuredPoint {
            kind: CollectiveKind::AllGather,
            group_size,
            nodes: None,
            total_bytes,
            time_ms,
            rescalable: false,
        }
    }

    #[test]
    fn measured_table_interpolates_and_falls_back() {
        let fallback = RingModel::new(topo(1, 10.0, 10.0));
        // Noise: smaller time for bigger buffer gets lifted to 11.
        let pts = [point(4, 1e6, 1.0), point(4, 1e8, 11.0), point(4, 2e8, 9.0)];
        let t = MeasuredTable::new("t.json", fallback.clone(), &pts).unwrap();
        let ag = CollectiveKind::AllGather;
        let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1e6));
        assert_eq!((v, s), (1.0, CommSource::Measured));
        let (v, _) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 50.5e6));
        assert!(close(v, 6.0), "{v}");
        let (v, _) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1.5e8));
        assert!(close(v, 11.0), "{v}");
        // Beyond the table: anchored analytic, continuous and growing.
        let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 4e8));
        assert_eq!(s, CommSource::Extrapolated);
        assert!(v > 11.0);
        // Unmeasured group size (not rescalable) or kind: analytic.
        let r3 = even(&[0, 0, 0], 1e8);
        assert_eq!(
            t.time_with_source(ag, &r3),
            (fallback.time_ms(ag, &r3), CommSource::Analytic)
        );
        let r4 = even(&[0, 0, 0, 0], 1e8);
        assert_eq!(
            t.time_with_source(CollectiveKind::ReduceScatter, &r4).1,
            CommSource::Analytic
        );
        assert!(t.describe().contains("3 points"));
        // Measured loads scale with the measured time, never above it.
        let (v, _) = t.time_with_source(ag, &r4);
        assert!(t.loads(ag, &r4).iter().all(|&(_, b)| b <= v));
        let bad = [MeasuredPoint {
            time_ms: f64::NAN,
            ..pts[0]
        }];
        assert!(MeasuredTable::new("t.json", fallback, &bad).is_err());
    }

    #[test]
    fn rescalable_curves_keep_bus_bandwidth() {
        let fallback = RingModel::new(topo(1, 10.0, 10.0));
        let mut pts = [point(8, 1e8, 10.0), point(8, 1e9, 100.0)];
        for p in &mut pts {
            p.rescalable = true;
            p.nodes = Some(1);
        }
        let t = MeasuredTable::new("nccl.log", fallback, &pts).unwrap();
        let ag = CollectiveKind::AllGather;
        let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1e9));
        assert_eq!(s, CommSource::Rescaled);
        // busbw(8 ranks) = 1 GB / 100 ms x 7/8; same busbw on 4 ranks.
        assert!(close(busbw(ag, 4, 1e9, v), busbw(ag, 8, 1e9, 100.0)), "{v}");
        // A group on two nodes does not use a one-node curve.
        let (_, s) = t.time_with_source(ag, &even(&[0, 0, 1, 1], 1e9));
        assert_eq!(s, CommSource::Analytic);
    }

    fn arb_ranks() -> impl Strategy<Value = (usize, Vec<CollectiveRank>)> {
        (1usize..5).prop_flat_map(|nodes| {
            let rank =
                (0..nodes, 0usize..16, 0.0f64..1e9).prop_map(|(node, local, piece_bytes)| {
                    CollectiveRank {
                        node,
                        local,
                        piece_bytes,
                    }
                });
            (Just(nodes), prop::collection::vec(rank, 1..12))
        })
    }

    fn arb_node() -> impl Strategy<Value = NodeLinks> {
        (
            (
                1.0f64..60.0,
                prop::option::of(20.0f64..300.0),
                any::<bool>(),
            ),
            (0.0f64..20.0, 0.0f64..20.0, 0.0f64..100.0),
            (1usize..9, 0.5f64..50.0),
        )
            .prop_map(|((pcie, nvlink, bridged), (nvl, pcl, netl), (nics, nic))| {
                NodeLinks {
                    nvlink_gbps: nvlink,
                    bridged,
                    pcie_gbps: pcie,
                    nvlink_latency_us: nvl,
                    pcie_latency_us: pcl,
                    gpus: 16,
                    nics,
                    nic_gbps: nic,
                    net_latency_us: netl,
                }
            })
    }

    fn arb_topo(nodes: usize) -> impl Strategy<Value = CommTopology> {
        (
            prop::collection::vec(arb_node(), nodes),
            prop::sample::select(vec![
                CommAlgo::Auto,
                CommAlgo::Ring,
                CommAlgo::Tree,
                CommAlgo::Hierarchical,
            ]),
        )
            .prop_map(|(nodes, algo)| CommTopology { nodes, algo })
    }

    fn arb_case() -> impl Strategy<Value = (CommTopology, Vec<CollectiveRank>)> {
        arb_ranks().prop_flat_map(|(nodes, ranks)| (arb_topo(nodes), Just(ranks)))
    }

    fn kinds() -> impl Strategy<Value = CollectiveKind> {
        prop::sample::select(CollectiveKind::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn non_increasing_in_bandwidth((t, r) in arb_case(), kind in kinds(), node in 0usize..5, f in 1.0f64..4.0, which in 0usize..3) {
            let base = RingModel::new(t.clone()).time_ms(kind, &r);
            let mut faster = t;
            let n = node % faster.nodes.len();
            let x = &mut faster.nodes[n];
            match which {
                0 => x.pcie_gbps *= f,
                1 => x.nvlink_gbps = x.nvlink_gbps.map(|b| b * f),
                _ => x.nic_gbps *= f,
            }
            prop_assert!(RingModel::new(faster).time_ms(kind, &r) <= base * (1.0 + 1e-12));
        }

        #[test]
        fn non_decreasing_in_bytes((t, r) in arb_case(), kind in kinds(), i in 0usize..12, extra in 0.0f64..1e9) {
            let m = RingModel::new(t);
            let base = m.time_ms(kind, &r);
            let mut bigger = r.clone();
            let i = i % bigger.len();
            bigger[i].piece_bytes += extra;
            prop_assert!(m.time_ms(kind, &bigger) >= base * (1.0 - 1e-12));
        }

        #[test]
        fn loads_never_exceed_the_collective((t, r) in arb_case(), kind in kinds()) {
            let m = RingModel::new(t);
            let time = m.time_ms(kind, &r);
            for (_, b) in m.loads(kind, &r) {
                prop_assert!(b >= 0.0 && b <= time * (1.0 + 1e-12));
            }
        }

        #[test]
        fn even_pieces_closed_form(n in arb_node(), p in 1usize..16, total in 0.0f64..1e10) {
            let mut n = n;
            n.nvlink_gbps = None;
            let m = RingModel::new(CommTopology { nodes: vec![n], algo: CommAlgo::Auto });
            let r = even(&vec![0; p], total);
            let pf = p as f64;
            let expect = if p < 2 {
                0.0
            } else {
                (pf - 1.0) * n.pcie_latency_us * 1e-3
                    + (pf - 1.0) / pf * total / (n.pcie_gbps * 1e9) * 1e3
            };
            prop_assert!(close(m.time_ms(CollectiveKind::AllGather, &r), expect));
        }
    }
}
