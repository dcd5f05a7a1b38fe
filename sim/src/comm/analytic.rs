//! The analytic NCCL-style model: ring, tree and hierarchical times of a
//! collective, point-to-point transfers.

use super::collective::{CollectiveKind, CommModel, LinkRef};
use super::loads::merge_loads;
use super::protocol::{
    ring_plateau, HopKind, NcclGen, Protocol, NVLS_CHANNELS, NVLS_EFFICIENCY, NVLS_NVLINK_US,
    NVLS_TREE_NET_US, SIMPLE_NET_HOP_US, SIMPLE_NVLINK_HOP_US,
};
use super::topology::{CollectiveRank, CommAlgo, CommTopology};

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

    /// Ring time of `kind` in ms (all-reduce: reduce-scatter + all-gather
    /// of `S / p` pieces), under the protocol NCCL's model picks
    /// ([`RingModel::ring_choice`]).
    pub fn ring_time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        self.ring_choice(kind, ranks).0
    }

    /// The oldest GPU generation of the nodes of a group (whose tables
    /// the communicator uses), the kind of its hops inside a node (`pcie`:
    /// some hop crosses PCIe) and whether NCCL enables LL128 on it: every
    /// hop inside a node NVLink, and one generation or Hopper and newer.
    fn protocols(&self, ranks: &[CollectiveRank], pcie: bool) -> (NcclGen, HopKind, bool) {
        let mut lo = NcclGen::Hopper;
        let mut hi = NcclGen::Volta;
        for r in ranks {
            let g = self.topo.node(r.node).gen;
            lo = lo.min(g);
            hi = hi.max(g);
        }
        let ll128 = !pcie && (lo == hi || lo >= NcclGen::Hopper);
        let intra = if pcie { HopKind::Pcie } else { HopKind::Nvlink };
        (lo, intra, ll128)
    }

    /// The ring's time in ms and protocol: the fastest of LL, LL128 (where
    /// NCCL enables it) and Simple, each `base + intra steps x intra hop +
    /// inter steps x network hop + steps x piece / bandwidth`
    /// (NCCL's tables, `comm::protocol`). An all-to-all runs no ring: its
    /// send / receive pairs' time ([`RingModel::all_to_all_ms`]), Simple.
    pub fn ring_choice(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> (f64, Protocol) {
        let p = ranks.len();
        if p < 2 {
            return (0.0, Protocol::Simple);
        }
        if kind == CollectiveKind::AllToAll {
            return (self.all_to_all_ms(ranks), Protocol::Simple);
        }
        let groups = self.topo.groups(ranks);
        let ring = self.topo.ring(ranks, &groups);
        let piece = kind.buffer_bytes(ranks) / p as f64;
        let nodes = groups.len();
        let all_reduce = kind == CollectiveKind::AllReduce;
        let steps = if all_reduce { 2 * (p - 1) } else { p - 1 };
        let inter_steps = match (nodes, all_reduce) {
            (1, _) => 0,
            (n, true) => 2 * (n - 1),
            (n, false) => n - 1,
        };
        let (lo, intra_kind, ll128) = self.protocols(ranks, ring.pcie_hop);
        let mut best = (f64::INFINITY, Protocol::Simple);
        for proto in Protocol::ALL {
            if proto == Protocol::Ll128 && !ll128 {
                continue;
            }
            let mut intra = ring.intra_latency_us * proto.hop_scale(intra_kind);
            if nodes > 1 {
                // NCCL's network overhead on x86 Intel hosts: 1 µs, x3 Simple.
                let overhead = if proto == Protocol::Simple { 3.0 } else { 1.0 };
                intra = intra.max(overhead);
            }
            let inter = ring.inter_latency_us * proto.hop_scale(HopKind::Net);
            let mut lat = proto.base_us(false)
                + (steps - inter_steps) as f64 * intra
                + inter_steps as f64 * inter;
            if all_reduce && proto == Protocol::Simple && nodes > 1 {
                lat *= ring_plateau(lo);
            }
            let bw = proto.ring_gbps(ring.bw_gbps, lo.ll_max_gbps(nodes));
            let t = lat * 1e-3 + steps as f64 * piece / (bw * 1e9) * 1e3;
            if t < best.0 {
                best = (t, proto);
            }
        }
        best
    }

    /// Tree all-reduce time in ms (groups spanning nodes; the ring's time
    /// on one node), under the fastest protocol.
    pub fn tree_time_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        let groups = self.topo.groups(ranks);
        if groups.len() < 2 {
            return self.ring_time_ms(CollectiveKind::AllReduce, ranks);
        }
        let ring = self.topo.ring(ranks, &groups);
        let buffer = CollectiveKind::AllReduce.buffer_bytes(ranks);
        let depth = (groups.len() as f64).log2().ceil();
        let net_lat = groups
            .keys()
            .map(|&n| self.topo.node(n).net_latency_us)
            .fold(0.0, f64::max);
        let mut chain_us = 0.0f64;
        let mut pcie = false;
        for (&n, g) in &groups {
            let node = self.topo.node(n);
            let lat = if node.nvlink_gbps.is_some() && !node.bridged {
                node.nvlink_latency_us
            } else {
                pcie |= g.ranks > 1;
                node.pcie_latency_us
            };
            chain_us = chain_us.max((g.ranks as f64 - 1.0) * lat);
        }
        let (lo, intra_kind, ll128) = self.protocols(ranks, pcie);
        let mut best = f64::INFINITY;
        for proto in Protocol::ALL {
            if proto == Protocol::Ll128 && !ll128 {
                continue;
            }
            let bw = proto.tree_gbps(ring.bw_gbps, lo.ll_max_gbps(groups.len()));
            let bw_ms = CollectiveKind::AllReduce.busbw_factor(p) * buffer / (bw * 1e9) * 1e3;
            let lat = proto.base_us(true)
                + 2.0
                    * (depth * net_lat * proto.hop_scale(HopKind::Net)
                        + chain_us * proto.hop_scale(intra_kind));
            best = best.min(bw_ms + lat * 1e-3);
        }
        best
    }

    /// NVLink SHARP all-reduce time in ms (NVLS on one node, NVLS_TREE
    /// across nodes), when every node of the group has an NVSwitch of a
    /// generation with NVLS (Hopper and newer); `None` otherwise.
    pub fn nvls_time_ms(&self, ranks: &[CollectiveRank]) -> Option<f64> {
        if ranks.len() < 2 {
            return None;
        }
        let groups = self.topo.groups(ranks);
        let mut intra = f64::INFINITY;
        let mut net = f64::INFINITY;
        let (mut nvl_lat, mut net_lat) = (0.0f64, 0.0f64);
        for &n in groups.keys() {
            let node = self.topo.node(n);
            let bw = node
                .nvlink_gbps
                .filter(|_| node.nvswitch && node.gen >= NcclGen::Hopper)?;
            intra = intra.min(bw * NVLS_EFFICIENCY * (NVLS_CHANNELS - 1.0) / NVLS_CHANNELS);
            net = net.min(node.nics as f64 * node.nic_gbps);
            nvl_lat = nvl_lat.max(node.nvlink_latency_us);
            net_lat = net_lat.max(node.net_latency_us);
        }
        let buffer = CollectiveKind::AllReduce.buffer_bytes(ranks);
        // NCCL's NVLS latencies against its Simple ring hops, applied to
        // this model's hops.
        let mut lat = NVLS_NVLINK_US * nvl_lat / SIMPLE_NVLINK_HOP_US;
        let nodes = groups.len();
        // NCCL prices the tree between nodes in bus bandwidth: the NICs'
        // aggregate (doubled at two nodes, where each node is a leaf of one
        // tree and the root of the other), converted to algorithm bandwidth
        // by `n / (2 (n - 1))` like a ring all-reduce.
        let n = ranks.len() as f64;
        let algbw = if nodes == 1 {
            intra
        } else {
            lat +=
                2.0 * (nodes as f64).log2().ceil() * NVLS_TREE_NET_US * net_lat / SIMPLE_NET_HOP_US;
            let bus = net * if nodes <= 2 { 2.0 } else { 1.0 };
            intra.min(bus * n / (2.0 * (n - 1.0)))
        };
        Some(lat * 1e-3 + buffer / (algbw * 1e9) * 1e3)
    }

    /// All-to-all time in ms: grouped send / receive pairs to every peer,
    /// paced by the slowest NVLink, PCIe or NIC plus a latency per peer
    /// (`comm::alltoall`).
    pub fn all_to_all_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        self.topo.all_to_all(ranks).time_ms
    }

    /// Hierarchical schedule in ms: intra phase + inter-node ring + intra
    /// phase (see module docs). Equals the ring for a single node; an
    /// all-to-all has no hierarchical form (its send / receive pairs).
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
        if kind == CollectiveKind::AllToAll {
            let a = self.topo.all_to_all(ranks);
            return (a.time_ms, if with_loads { a.loads } else { Vec::new() });
        }
        let groups = self.topo.groups(ranks);
        if groups.len() < 2 {
            let t = self.ring_time_ms(kind, ranks);
            let loads = if with_loads {
                self.topo.ring_loads(kind, ranks)
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
            CollectiveKind::AllGather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::AllToAll => (ranks, 1.0),
        };
        let groups = self.topo.groups(ranks);
        let total: f64 = groups.values().map(|g| g.sum_bytes).sum();
        let mut phase1 = 0.0f64;
        let mut phase3 = 0.0f64;
        let mut max_node_bytes = 0.0f64;
        let mut loads = Vec::new();
        for (&node, g) in &groups {
            let members: Vec<CollectiveRank> =
                ranks.iter().copied().filter(|r| r.node == node).collect();
            let sub = self.topo.groups(&members);
            let ring = self.topo.ring(&members, &sub);
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
                self.topo.hop_loads(&ring.hops, hop_bytes, &sub, &mut loads);
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
        let ring = self.topo.ring(&node_ring, &groups);
        let phase2 = ring_ms(groups.len(), max_node_bytes, ring.bw_gbps, ring.latency_us);
        if with_loads {
            let hop_bytes = (groups.len() - 1) as f64 * max_node_bytes * factor;
            self.topo
                .hop_loads(&ring.hops, hop_bytes, &groups, &mut loads);
        }
        (factor * (phase1 + phase2 + phase3), merge_loads(loads))
    }

    /// The algorithm NCCL's model picks for `kind` over `ranks` under this
    /// model's setting, with its time in ms: ring for all-gather and
    /// reduce-scatter; for an all-reduce the fastest of ring, tree (groups
    /// spanning nodes) and NVLS / NVLS_TREE (NVSwitch Hopper nodes); for an
    /// all-to-all its send / receive pairs (`p2p`) under every setting.
    pub fn choose(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> (f64, &'static str) {
        if ranks.len() < 2 {
            return (0.0, "none");
        }
        if kind == CollectiveKind::AllToAll {
            return (self.all_to_all_ms(ranks), "p2p");
        }
        let ring = || self.ring_time_ms(kind, ranks);
        let spans = {
            let first = ranks.first().map(|r| r.node);
            ranks.iter().any(|r| Some(r.node) != first)
        };
        match self.topo.algo {
            CommAlgo::Hierarchical => (self.hierarchical_ms(kind, ranks), "hierarchical"),
            CommAlgo::Ring => (ring(), "ring"),
            CommAlgo::Tree if kind == CollectiveKind::AllReduce && spans => {
                (self.tree_time_ms(ranks), "tree")
            }
            CommAlgo::Tree => (ring(), "ring"),
            CommAlgo::Auto => {
                let mut best = (ring(), "ring");
                if kind == CollectiveKind::AllReduce {
                    if spans {
                        let t = self.tree_time_ms(ranks);
                        if t < best.0 {
                            best = (t, "tree");
                        }
                    }
                    if let Some(t) = self.nvls_time_ms(ranks) {
                        if t < best.0 {
                            best = (t, if spans { "nvls_tree" } else { "nvls" });
                        }
                    }
                }
                best
            }
        }
    }
}

impl CommModel for RingModel {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        if ranks.len() < 2 {
            return 0.0;
        }
        self.choose(kind, ranks).0
    }

    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        if ranks.len() < 2 {
            return Vec::new();
        }
        if kind == CollectiveKind::AllToAll {
            return self.topo.all_to_all(ranks).loads;
        }
        let (t, loads) = match self.topo.algo {
            CommAlgo::Hierarchical => self.hierarchical(kind, ranks, true),
            _ => (self.time_ms(kind, ranks), self.topo.ring_loads(kind, ranks)),
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
        let groups = self.topo.groups(&pair);
        let ring = self.topo.ring(&pair, &groups);
        // The first hop is from -> to; its bandwidth is the pair's link
        // (the ring's bottleneck over both directions, symmetric links).
        let hop = &ring.hops[..1];
        let t = ring_ms(2, bytes, ring.bw_gbps, ring.latency_us);
        let mut loads = Vec::with_capacity(4);
        self.topo
            .hop_loads(hop, bytes.max(0.0), &groups, &mut loads);
        (t, merge_loads(loads))
    }

    fn error_pct(&self) -> (f64, f64) {
        super::collective::ANALYTIC_COMM_ERROR_PCT
    }

    fn algorithm(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> String {
        match self.choose(kind, ranks).1 {
            "ring" => format!("ring/{}", self.ring_choice(kind, ranks).1.name()),
            a @ ("nvls" | "nvls_tree") => format!("{a}/Simple"),
            a => a.to_string(),
        }
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
