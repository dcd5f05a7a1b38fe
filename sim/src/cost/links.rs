//! The cluster as the communication model and the engine see it: its
//! topology per node, collective participants, the communication model
//! (analytic NCCL, or measured tables over it) and the dense ids of its
//! directed links for link sharing.

use crate::cluster::Cluster;
use crate::comm::{
    CollectiveKind, CollectiveRank, CommAlgo, CommModel, CommTopology, LinkKind, LinkRef,
    MeasuredPoint, MeasuredTable, NcclGen, NodeLinks, RingModel,
};
use crate::error::SpecError;
use crate::profile::ProfileSet;
use std::sync::Arc;

/// The comm topology of a cluster (links per node) under algorithm `algo`.
pub fn comm_topology(cluster: &Cluster, algo: CommAlgo) -> CommTopology {
    // The oldest GPU generation of every node, in one pass over the GPUs.
    let mut gens: Vec<Option<NcclGen>> = vec![None; cluster.nodes.len()];
    for g in &cluster.gpus {
        if let Some(x) = gens.get_mut(g.node) {
            let gen = NcclGen::of(g.spec.arch);
            *x = Some(x.map_or(gen, |y| y.min(gen)));
        }
    }
    CommTopology {
        nodes: cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeLinks {
                nvlink_gbps: n.nvlink_gbps,
                bridged: n.fabric == crate::cluster::IntraFabric::NvlinkBridge,
                pcie_gbps: n.pcie_gbps,
                nvlink_latency_us: n.nvlink_latency_us,
                pcie_latency_us: n.pcie_latency_us,
                gpus: n.gpus,
                nics: n.nics,
                nic_gbps: n.nic_gbps,
                net_latency_us: n.net_latency_us,
                gen: gens[i].unwrap_or_default(),
                nvswitch: n.fabric == crate::cluster::IntraFabric::Nvswitch
                    && n.nvlink_gbps.is_some(),
            })
            .collect(),
        algo,
    }
}

/// The GPUs `ranks` of `cluster` (ring order) as collective participants
/// with `pieces` (bytes, one per rank).
pub fn collective_ranks(cluster: &Cluster, ranks: &[usize], pieces: &[f64]) -> Vec<CollectiveRank> {
    ranks
        .iter()
        .zip(pieces)
        .map(|(&r, &p)| {
            let g = &cluster.gpus[r];
            CollectiveRank {
                node: g.node,
                local: g.local,
                piece_bytes: p,
            }
        })
        .collect()
}

/// The communication model of `cluster` under `algo`: the analytic NCCL
/// model, or a measured table over the profiles' collectives (nccl-tests
/// imports, the exec profiler's tables) with the analytic model behind it.
pub fn comm_model(
    cluster: &Cluster,
    algo: CommAlgo,
    profiles: &ProfileSet,
) -> Result<Arc<dyn CommModel>, SpecError> {
    let topo = comm_topology(cluster, algo);
    topo.validate("cluster")?;
    let ring = RingModel::new(topo);
    let points = measured_points(profiles);
    Ok(if points.is_empty() {
        Arc::new(ring)
    } else {
        Arc::new(MeasuredTable::new("profiles: collectives", ring, &points)?)
    })
}

/// One link an op keeps busy while it runs, for the engine's link sharing:
/// the engine's resource id and the fraction of the op's duration (alone)
/// the link is busy, in `(0, 1]`.
pub type LinkShare = (u32, f32);

/// Maps the cluster's directed links to dense resource ids: per GPU `g`
/// `4g + {0: NVLink out, 1: NVLink in, 2: PCIe out, 3: PCIe in}`, then
/// two per NIC (out, in).
#[derive(Debug, Clone)]
pub struct LinkIds {
    node_first_rank: Vec<usize>,
    nic_offset: Vec<usize>,
    ranks: usize,
}

impl LinkIds {
    pub(crate) fn new(cluster: &Cluster) -> LinkIds {
        let mut node_first_rank = vec![usize::MAX; cluster.nodes.len()];
        for g in &cluster.gpus {
            node_first_rank[g.node] = node_first_rank[g.node].min(g.rank);
        }
        let mut nic_offset = Vec::with_capacity(cluster.nodes.len());
        let mut off = 0;
        for n in &cluster.nodes {
            nic_offset.push(off);
            off += n.nics;
        }
        LinkIds {
            node_first_rank,
            nic_offset,
            ranks: cluster.len(),
        }
    }

    /// Resource id of `link`.
    pub fn id(&self, link: LinkRef) -> u32 {
        let dir = usize::from(!link.tx);
        let id = match link.kind {
            LinkKind::Nvlink => 4 * (self.node_first_rank[link.node] + link.index) + dir,
            LinkKind::Pcie => 4 * (self.node_first_rank[link.node] + link.index) + 2 + dir,
            LinkKind::Nic => 4 * self.ranks + 2 * (self.nic_offset[link.node] + link.index) + dir,
        };
        id as u32
    }

    /// The PCIe link of GPU `rank`, out (device to host) or in.
    pub fn pcie(&self, rank: usize, out: bool) -> u32 {
        (4 * rank + 2 + usize::from(!out)) as u32
    }

    /// A rank of the node link `id` belongs to: the GPU itself for its
    /// NVLink and PCIe links, the node's first GPU for a NIC.
    pub fn owner_rank(&self, id: u32) -> usize {
        let id = id as usize;
        if id < 4 * self.ranks {
            return id / 4;
        }
        let nic = (id - 4 * self.ranks) / 2;
        // The last node whose first NIC is at or before `nic`.
        let node = self
            .nic_offset
            .partition_point(|&o| o <= nic)
            .saturating_sub(1);
        self.node_first_rank[node]
    }
}

/// Warnings for imported collective curves (nccl-tests logs) measured on a
/// shape (ranks, nodes) no group of this cluster has (the whole cluster or
/// one node): those groups use them rescaled to equal bus bandwidth.
pub(crate) fn rescale_warnings(cluster: &Cluster, profiles: &ProfileSet) -> Vec<String> {
    // (ranks, nodes) of the whole cluster and of each node.
    let mut shapes: Vec<(usize, usize)> = vec![(cluster.len(), cluster.nodes.len())];
    shapes.extend(cluster.nodes.iter().map(|n| (n.gpus, 1)));
    let mut seen: Vec<(String, u32)> = Vec::new();
    let mut out = Vec::new();
    for c in profiles.collectives.iter().filter(|c| c.rescalable) {
        let key = (c.kind.clone(), c.ranks);
        let fits = shapes
            .iter()
            .any(|&(r, n)| r == c.ranks as usize && c.nodes.is_none_or(|m| m as usize == n));
        if fits || seen.contains(&key) {
            continue;
        }
        out.push(format!(
            "{} measured on {} ranks{}: no group of this cluster has that shape; groups of another size on the same number of nodes use it rescaled to equal bus bandwidth (time x f(p)/f({}), f = (p-1)/p, or 2(p-1)/p for all-reduce), the rest the analytic model",
            c.kind,
            c.ranks,
            c.nodes.map(|n| format!(" on {n} nodes")).unwrap_or_default(),
            c.ranks
        ));
        seen.push(key);
    }
    out
}

/// Measured collective samples as table points: kind, group size and the
/// even-equivalent buffer `bytes x imbalance` (the table's lookup key: a
/// ring is paced by its largest piece). Samples of one rank or zero bytes
/// carry no information and are skipped; unknown kinds were rejected when
/// the profile was read.
pub fn measured_points(profiles: &ProfileSet) -> Vec<MeasuredPoint> {
    profiles
        .collectives
        .iter()
        .filter(|c| c.ranks >= 2 && c.bytes > 0.0)
        .filter_map(|c| {
            let kind = CollectiveKind::parse(&c.kind)?;
            Some(MeasuredPoint {
                kind,
                group_size: c.ranks as usize,
                nodes: c.nodes.map(|n| n as usize),
                total_bytes: c.bytes * c.imbalance.max(1.0),
                time_ms: c.time_ms,
                rescalable: c.rescalable,
            })
        })
        .collect()
}
