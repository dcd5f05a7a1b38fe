//! Cluster specification: nodes, their GPUs, the links between GPUs inside
//! a node and the NICs between nodes.
//!
//! Written by users as TOML (see `experiments/clusters/*.toml`):
//!
//! ```toml
//! name = "paper"
//! [network]                 # defaults for every node's network
//! bw_gbit_s = 25.0          # what one node achieves in all, Gbit/s (as before) ...
//! latency_us = 20.0         # µs per ring step over the network
//! # ... or NICs by their line rate (derated by the link catalog):
//! # nics = 4                # NICs per node
//! # nic_gbit_s = 200        # line rate of each, Gbit/s
//! # gpudirect_rdma = true   # NIC reads GPU memory directly (default true)
//! [[nodes]]
//! name = "box0"
//! intra_link = "pcie4"      # nvswitch | nvlink-bridge | pcie3 | pcie4 | pcie5 | nvlink
//! # intra_bw_gbps = 20.0    # optional override: achievable GPU-to-GPU GB/s per direction
//! # nics = 1, nic_gbit_s = 100, gpudirect_rdma = false   # this node's own NICs
//! # host_mem_gib = 512      # host (pinned) memory for offload; default below
//! # host_mem_bw_gbps = 100  # host memory bandwidth (CPU optimizer step); default below
//! gpus = [ { type = "l4", count = 2 }, { type = "a6000", price_per_hour_usd = 0.8 } ]
//! [[nodes]]                 # 128 identical servers in one block
//! count = 128
//! intra_link = "nvswitch"
//! gpus = [ { type = "h100", count = 8 } ]
//! ```
//!
//! # Links inside a node
//!
//! `nvswitch` (SXM parts): every GPU pair at the NVLink rate. `nvlink-bridge`
//! (PCIe cards with bridges): GPUs `2k` and `2k + 1` of the node are joined,
//! every other pair crosses PCIe, so a ring over more than two bridged GPUs
//! is paced by PCIe. `nvlink` is accepted: a switch for SXM parts, bridges
//! for PCIe cards (the catalog's `peer_link.bridge`). `pcieN`: peer-to-peer
//! over PCIe generation N, capped by each GPU's own host link. Achievable
//! bandwidths are the line rate times the link catalog's efficiency
//! ([`crate::link`]); `intra_bw_gbps` overrides the node fabric's figure.
//!
//! # The network
//!
//! A node's network is `nics` NICs of `nic_gbit_s` line rate each, derated
//! by the catalog (GPUDirect RDMA on or off); a collective reaches one NIC
//! per GPU it has on the node (NICs are assigned to GPUs in order, as rails),
//! up to `nics`. The `[network]` table's `bw_gbit_s` keeps its meaning: the
//! bandwidth a node achieves, one aggregate link, not derated, so existing
//! files give the figures they gave. Node fields override `[network]`.
//!
//! Host memory (what activation and optimizer offload may use, per node):
//! by default twice the node's GPU memory, at least
//! [`DEFAULT_HOST_MEM_MIN_GIB`] (cloud GPU instances ship 2-4x their GPU
//! memory: p4d.24xlarge 1152 GiB for 320 GiB of A100s, g5.12xlarge 192 GiB
//! for 96 GiB of A10Gs). Host memory bandwidth defaults to
//! [`DEFAULT_HOST_MEM_BW_GBPS`].
//!
//! or as the `--gpus l4,l4,a6000,p40` shorthand (one node, PCIe between GPUs).
//! Ranks are numbered in file order. Bandwidths are GB/s (10^9 bytes/s) per
//! direction once resolved; the network is given in Gbit/s as users quote it.

use crate::error::SpecError;
use crate::gpu::{GpuCatalog, GpuSpec, PeerLink};
use crate::link::LinkClass;
use serde::{Deserialize, Serialize};

/// Default latency of one intra-node ring step (µs) when the node gives
/// an `intra_bw_gbps` override without a latency: PCIe / NVLink P2P.
pub const DEFAULT_INTRA_LATENCY_US: f64 = 10.0;
/// Default inter-node network when a spec gives none (Gbit/s): 25 GbE.
pub const DEFAULT_INTER_BW_GBIT_S: f64 = 25.0;
/// Default latency of one inter-node ring step (µs) of the `[network]`
/// aggregate: TCP over Ethernet.
pub const DEFAULT_INTER_LATENCY_US: f64 = 30.0;
/// Smallest default host memory of a node (GiB); the default is twice the
/// node's GPU memory, at least this.
pub const DEFAULT_HOST_MEM_MIN_GIB: f64 = 64.0;
/// Default host memory per GiB of the node's GPU memory.
pub const DEFAULT_HOST_MEM_PER_GPU_GIB: f64 = 2.0;
/// Default host memory bandwidth of a node (GB/s): one socket of a
/// server-class host (8-channel DDR4-3200, 205 GB/s peak) at the ~50% a
/// multi-threaded optimizer loop sustains. Set `host_mem_bw_gbps` for yours.
pub const DEFAULT_HOST_MEM_BW_GBPS: f64 = 100.0;
/// Most NICs a node may list (the largest servers carry 8-16).
pub const MAX_NICS_PER_NODE: i64 = 64;

/// Raw TOML form of a cluster file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Cluster name used in reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Inter-node network (defaults for every node).
    #[serde(default)]
    pub network: Option<NetworkFile>,
    /// Nodes in rank order.
    pub nodes: Vec<NodeFile>,
}

/// Raw TOML form of the network defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// Per-node achieved bandwidth, Gbit/s (one aggregate link, not derated).
    #[serde(default)]
    pub bw_gbit_s: Option<f64>,
    /// Per ring step latency over the network, µs.
    #[serde(default)]
    pub latency_us: Option<f64>,
    /// NICs per node (with `nic_gbit_s`).
    #[serde(default)]
    pub nics: Option<i64>,
    /// Line rate of each NIC, Gbit/s.
    #[serde(default)]
    pub nic_gbit_s: Option<f64>,
    /// Whether NICs read GPU memory directly (GPUDirect RDMA; default true).
    #[serde(default)]
    pub gpudirect_rdma: Option<bool>,
}

/// Raw TOML form of one node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// Node name (defaults to `node<i>`).
    #[serde(default)]
    pub name: Option<String>,
    /// `nvswitch`, `nvlink-bridge`, `pcie3`, `pcie4`, `pcie5` or `nvlink`
    /// (default: PCIe of the GPUs' host links).
    #[serde(default)]
    pub intra_link: Option<String>,
    /// Override of the node fabric's achievable bandwidth, GB/s per direction.
    #[serde(default)]
    pub intra_bw_gbps: Option<f64>,
    /// Override of the intra-node latency per ring step, µs.
    #[serde(default)]
    pub intra_latency_us: Option<f64>,
    /// This node's NIC count (overrides `[network]`).
    #[serde(default)]
    pub nics: Option<i64>,
    /// This node's NIC line rate, Gbit/s (overrides `[network]`).
    #[serde(default)]
    pub nic_gbit_s: Option<f64>,
    /// GPUDirect RDMA on this node's NICs (overrides `[network]`).
    #[serde(default)]
    pub gpudirect_rdma: Option<bool>,
    /// Host memory offload may use, GiB (default: see the module docs).
    #[serde(default)]
    pub host_mem_gib: Option<f64>,
    /// Host memory bandwidth, GB/s (default [`DEFAULT_HOST_MEM_BW_GBPS`]).
    #[serde(default)]
    pub host_mem_bw_gbps: Option<f64>,
    /// How many identical nodes this block stands for (default 1): 128
    /// eight-GPU servers are one block with `count = 128`, ranks in order.
    /// Copies are named `<name>-<k>` (`node<i>` without a name).
    #[serde(default)]
    pub count: Option<u32>,
    /// GPU groups of this node.
    pub gpus: Vec<GpuGroupFile>,
}

impl NodeFile {
    /// A node of `gpus` GPU groups and every other field at its default.
    pub fn of(gpus: Vec<GpuGroupFile>) -> NodeFile {
        NodeFile {
            name: None,
            intra_link: None,
            intra_bw_gbps: None,
            intra_latency_us: None,
            nics: None,
            nic_gbit_s: None,
            gpudirect_rdma: None,
            host_mem_gib: None,
            host_mem_bw_gbps: None,
            count: None,
            gpus,
        }
    }
}

/// Raw TOML form of a group of identical GPUs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuGroupFile {
    /// GPU type (catalog name or alias).
    #[serde(rename = "type")]
    pub gpu_type: String,
    /// How many (default 1).
    #[serde(default)]
    pub count: Option<u32>,
    /// Optional price per GPU-hour (USD).
    #[serde(default)]
    pub price_per_hour_usd: Option<f64>,
}

/// One GPU of a resolved cluster.
#[derive(Debug, Clone)]
pub struct ClusterGpu {
    /// Global rank (0-based, file order).
    pub rank: usize,
    /// Index of the node it sits in.
    pub node: usize,
    /// Position among its node's GPUs (0-based): bridge pairs and NIC rails.
    pub local: usize,
    /// Catalog entry.
    pub spec: GpuSpec,
    /// Price per GPU-hour (USD), from the cluster file or the catalog.
    pub price_per_hour_usd: Option<f64>,
}

/// How the GPUs of a node talk to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntraFabric {
    /// NVLink through NVSwitch: every pair at the NVLink rate.
    Nvswitch,
    /// NVLink bridges joining local GPUs `2k` and `2k + 1`; other pairs over PCIe.
    NvlinkBridge,
    /// Peer-to-peer over PCIe.
    Pcie,
}

/// One node of a resolved cluster.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// GPUs of the node.
    pub gpus: usize,
    /// The node's GPU-to-GPU fabric.
    pub fabric: IntraFabric,
    /// Achievable NVLink bandwidth between linked GPUs (switch: any pair;
    /// bridge: a pair), GB/s per direction; `None` on PCIe nodes.
    pub nvlink_gbps: Option<f64>,
    /// Achievable GPU-to-GPU bandwidth over PCIe, GB/s per direction.
    pub pcie_gbps: f64,
    /// Latency of one ring step over NVLink, µs.
    pub nvlink_latency_us: f64,
    /// Latency of one ring step over PCIe, µs.
    pub pcie_latency_us: f64,
    /// Human description of the fabric (e.g. `pcie4 x16`, `nvswitch`).
    pub intra_link: String,
    /// NICs of the node.
    pub nics: usize,
    /// Achievable bandwidth of each NIC, GB/s per direction.
    pub nic_gbps: f64,
    /// Latency of one ring step over the network, µs.
    pub net_latency_us: f64,
    /// Human description of the network (e.g. `4x 200 Gbit/s, GPUDirect RDMA`).
    pub network: String,
    /// Host (pinned) memory offload may use, GiB.
    pub host_mem_gib: f64,
    /// Host memory bandwidth, GB/s (paces a CPU optimizer step).
    pub host_mem_bw_gbps: f64,
}

impl Node {
    /// Everything about the node but its name, as a comparable key: two
    /// nodes with equal keys have the same links, NICs and host memory
    /// (its GPUs are compared separately). Destructures every field, so a
    /// new field must be added here.
    pub fn hardware_key(&self) -> String {
        let Node {
            name: _,
            gpus,
            fabric,
            nvlink_gbps,
            pcie_gbps,
            nvlink_latency_us,
            pcie_latency_us,
            intra_link,
            nics,
            nic_gbps,
            net_latency_us,
            network,
            host_mem_gib,
            host_mem_bw_gbps,
        } = self;
        // f64 `Debug` prints the shortest text that reads back to the same
        // value, so equal keys mean equal numbers.
        format!(
            "{gpus} {fabric:?} {nvlink_gbps:?} {pcie_gbps:?} {nvlink_latency_us:?} \
             {pcie_latency_us:?} {intra_link:?} {nics} {nic_gbps:?} {net_latency_us:?} \
             {network:?} {host_mem_gib:?} {host_mem_bw_gbps:?}"
        )
    }

    /// Achievable bandwidth between local GPUs `a` and `b` of this node,
    /// GB/s per direction: NVLink when the fabric links them, else PCIe.
    pub fn pair_gbps(&self, a: usize, b: usize) -> f64 {
        match (self.fabric, self.nvlink_gbps) {
            (IntraFabric::Nvswitch, Some(bw)) => bw,
            (IntraFabric::NvlinkBridge, Some(bw)) if a / 2 == b / 2 => bw,
            _ => self.pcie_gbps,
        }
    }

    /// Whether local GPUs `a` and `b` talk over NVLink.
    pub fn pair_on_nvlink(&self, a: usize, b: usize) -> bool {
        match self.fabric {
            IntraFabric::Nvswitch => true,
            IntraFabric::NvlinkBridge => a / 2 == b / 2,
            IntraFabric::Pcie => false,
        }
    }

    /// The fabric's headline bandwidth (NVLink where it has it, else PCIe), GB/s.
    pub fn intra_bw_gbps(&self) -> f64 {
        self.nvlink_gbps.unwrap_or(self.pcie_gbps)
    }

    /// All NICs together, GB/s.
    pub fn net_gbps(&self) -> f64 {
        self.nics as f64 * self.nic_gbps
    }
}

/// A validated cluster: GPUs in rank order and nodes with their links.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Name for reports.
    pub name: String,
    /// GPUs in rank order.
    pub gpus: Vec<ClusterGpu>,
    /// Nodes.
    pub nodes: Vec<Node>,
}

fn non_negative(origin: &str, field: &str, v: f64) -> Result<f64, SpecError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(SpecError::invalid(
            origin,
            field,
            format!("expected a number >= 0, got {v}"),
        ))
    }
}

/// Achievable GPU-to-GPU bandwidth over PCIe (GB/s per direction) of a
/// generation at x16: the line rate after encoding times the catalog's
/// PCIe efficiency ([`LinkClass::Pcie`]).
pub fn pcie_p2p_x16_gbps(gen: u32) -> Option<f64> {
    crate::gpu::HostLink::lane_raw_gbps(gen)
        .filter(|_| (3..=6).contains(&gen))
        .map(|lane| 16.0 * lane * LinkClass::Pcie.efficiency())
}

/// A count field that must be a whole number in `1..=max`.
fn count_in(origin: &str, field: &str, v: i64, max: i64) -> Result<usize, SpecError> {
    if (1..=max).contains(&v) {
        Ok(v as usize)
    } else {
        Err(SpecError::invalid(
            origin,
            field,
            format!("expected a whole number from 1 to {max}, got {v}"),
        ))
    }
}

/// A node's network after `[network]` defaults and the node's own fields.
struct NetworkSpec {
    nics: usize,
    nic_gbps: f64,
    latency_us: f64,
    describe: String,
}

fn resolve_network(
    origin: &str,
    ni: usize,
    net: &NetworkFile,
    node: &NodeFile,
) -> Result<NetworkSpec, SpecError> {
    let nf = format!("nodes[{ni}]");
    let nic_gbit = node.nic_gbit_s.or(net.nic_gbit_s);
    let nics = node.nics.or(net.nics);
    if net.bw_gbit_s.is_some() && net.nic_gbit_s.is_some() {
        return Err(SpecError::invalid(
            origin,
            "network",
            "give either bw_gbit_s (what a node achieves) or nics and nic_gbit_s (line rate per NIC), not both",
        ));
    }
    let latency = |default: f64, field: &str| -> Result<f64, SpecError> {
        let v = net.latency_us.unwrap_or(default);
        crate::physical::check(origin, field, v, &crate::physical::LATENCY_US)
    };
    match nic_gbit {
        Some(g) => {
            let field = if node.nic_gbit_s.is_some() {
                format!("{nf}.nic_gbit_s")
            } else {
                "network.nic_gbit_s".into()
            };
            let line = crate::physical::check(origin, &field, g, &crate::physical::NET_GBIT_S)?;
            let nics = match nics {
                Some(n) => {
                    let field = if node.nics.is_some() {
                        format!("{nf}.nics")
                    } else {
                        "network.nics".into()
                    };
                    count_in(origin, &field, n, MAX_NICS_PER_NODE)?
                }
                None => 1,
            };
            let rdma = node.gpudirect_rdma.or(net.gpudirect_rdma).unwrap_or(true);
            let class = if rdma {
                LinkClass::NicRdma
            } else {
                LinkClass::NicHost
            };
            Ok(NetworkSpec {
                nics,
                nic_gbps: line / 8.0 * class.efficiency(),
                latency_us: latency(class.latency_us(), "network.latency_us")?,
                describe: format!(
                    "{nics}x {line} Gbit/s, GPUDirect RDMA {}",
                    if rdma { "on" } else { "off" }
                ),
            })
        }
        None => {
            if let Some(n) = nics {
                let field = if node.nics.is_some() {
                    format!("{nf}.nics")
                } else {
                    "network.nics".into()
                };
                count_in(origin, &field, n, MAX_NICS_PER_NODE)?;
                return Err(SpecError::invalid(
                    origin,
                    field,
                    "nics needs nic_gbit_s, the line rate of each NIC (bw_gbit_s is one aggregate per node)",
                ));
            }
            let bw = crate::physical::check(
                origin,
                "network.bw_gbit_s",
                net.bw_gbit_s.unwrap_or(DEFAULT_INTER_BW_GBIT_S),
                &crate::physical::NET_GBIT_S,
            )?;
            Ok(NetworkSpec {
                nics: 1,
                nic_gbps: bw / 8.0,
                latency_us: latency(DEFAULT_INTER_LATENCY_US, "network.latency_us")?,
                describe: format!("{bw} Gbit/s per node"),
            })
        }
    }
}

/// Checks the GPU counts of every node and of the whole cluster against
/// the limits, before anything is allocated for them.
fn check_sizes(file: &ClusterFile, origin: &str) -> Result<(), SpecError> {
    let mut total: u64 = 0;
    for (ni, node) in file.nodes.iter().enumerate() {
        let copies = node.count.unwrap_or(1) as u64;
        if copies == 0 {
            return Err(SpecError::invalid(
                origin,
                format!("nodes[{ni}].count"),
                "expected a count of identical nodes >= 1",
            ));
        }
        let here: u64 = node.gpus.iter().map(|g| g.count.unwrap_or(1) as u64).sum();
        if here > crate::limits::MAX_GPUS_PER_NODE as u64 {
            return Err(SpecError::invalid(
                origin,
                format!("nodes[{ni}].gpus"),
                format!(
                    "{here} GPUs in one node is above the limit of {} GPUs per node (the largest NVLink domain)",
                    crate::limits::MAX_GPUS_PER_NODE
                ),
            ));
        }
        total += here * copies;
        if copies > crate::limits::MAX_GPUS as u64 {
            return Err(SpecError::invalid(
                origin,
                format!("nodes[{ni}].count"),
                format!(
                    "{copies} nodes is above the limit of {} GPUs per cluster",
                    crate::limits::MAX_GPUS
                ),
            ));
        }
    }
    if total > crate::limits::MAX_GPUS as u64 {
        return Err(SpecError::invalid(
            origin,
            "nodes",
            format!(
                "{total} GPUs is above the limit of {} GPUs per cluster",
                crate::limits::MAX_GPUS
            ),
        ));
    }
    Ok(())
}

/// Resolves the GPU groups of the file's node `ni` against the catalog,
/// appends its GPUs (ranks in order) to `gpus` as those of the cluster's
/// node `index` and returns their specs in local order.
fn resolve_gpus(
    origin: &str,
    ni: usize,
    index: usize,
    node: &NodeFile,
    catalog: &GpuCatalog,
    gpus: &mut Vec<ClusterGpu>,
) -> Result<Vec<GpuSpec>, SpecError> {
    if node.gpus.is_empty() {
        return Err(SpecError::invalid(
            origin,
            format!("nodes[{ni}].gpus"),
            "expected at least one GPU group",
        ));
    }
    let mut node_specs: Vec<GpuSpec> = Vec::new();
    for (gi, g) in node.gpus.iter().enumerate() {
        let field = format!("nodes[{ni}].gpus[{gi}]");
        let spec = catalog
            .lookup(&g.gpu_type, &format!("{origin}: {field}.type"))?
            .clone();
        let count = g.count.unwrap_or(1);
        if count == 0 {
            return Err(SpecError::invalid(
                origin,
                format!("{field}.count"),
                "expected a count >= 1",
            ));
        }
        if let Some(p) = g.price_per_hour_usd {
            non_negative(origin, &format!("{field}.price_per_hour_usd"), p)?;
        }
        for _ in 0..count {
            gpus.push(ClusterGpu {
                rank: gpus.len(),
                node: index,
                local: node_specs.len(),
                spec: spec.clone(),
                price_per_hour_usd: g.price_per_hour_usd.or(spec.price_per_hour_usd),
            });
            node_specs.push(spec.clone());
        }
    }
    Ok(node_specs)
}

/// Node `name`, the file's node `ni`, with GPUs `node_specs`: its
/// intra-node links (with the file's overrides), its network (`net` the
/// `[network]` defaults) and its host.
fn resolve_node(
    origin: &str,
    ni: usize,
    name: String,
    node: &NodeFile,
    net: &NetworkFile,
    node_specs: &[GpuSpec],
) -> Result<Node, SpecError> {
    let intra = resolve_intra(origin, ni, node.intra_link.as_deref(), node_specs)?;
    let mut fabric_bw = intra.nvlink_gbps.unwrap_or(intra.pcie_gbps);
    if let Some(bw) = node.intra_bw_gbps {
        fabric_bw = crate::physical::check(
            origin,
            &format!("nodes[{ni}].intra_bw_gbps"),
            bw,
            &crate::physical::LINK_GBPS,
        )?;
    }
    let (nvlink_gbps, pcie_gbps) = match intra.nvlink_gbps {
        Some(_) => (Some(fabric_bw), intra.pcie_gbps),
        None => (None, fabric_bw),
    };
    let lat_override = node
        .intra_latency_us
        .map(|v| {
            crate::physical::check(
                origin,
                &format!("nodes[{ni}].intra_latency_us"),
                v,
                &crate::physical::LATENCY_US,
            )
        })
        .transpose()?;
    let nvlink_latency_us = lat_override.unwrap_or(match intra.fabric {
        IntraFabric::Nvswitch => LinkClass::Nvswitch.latency_us(),
        _ => LinkClass::NvlinkBridge.latency_us(),
    });
    // An `intra_bw_gbps` override without a latency keeps the old default.
    let pcie_latency_us = lat_override.unwrap_or(if node.intra_bw_gbps.is_some() {
        DEFAULT_INTRA_LATENCY_US
    } else {
        LinkClass::Pcie.latency_us()
    });
    let network = resolve_network(origin, ni, net, node)?;
    let (host_mem_gib, host_mem_bw_gbps) = resolve_host(origin, ni, node, node_specs)?;
    Ok(Node {
        name,
        gpus: node_specs.len(),
        fabric: intra.fabric,
        nvlink_gbps,
        pcie_gbps,
        nvlink_latency_us,
        pcie_latency_us,
        intra_link: intra.describe,
        nics: network.nics,
        nic_gbps: network.nic_gbps,
        net_latency_us: network.latency_us,
        network: network.describe,
        host_mem_gib,
        host_mem_bw_gbps,
    })
}

/// Host memory (GiB) and its bandwidth (GB/s) of node `ni` with GPUs
/// `node_specs`: the file's values or the defaults.
fn resolve_host(
    origin: &str,
    ni: usize,
    node: &NodeFile,
    node_specs: &[GpuSpec],
) -> Result<(f64, f64), SpecError> {
    let gpu_mem: f64 = node_specs.iter().map(|s| s.mem_gib).sum();
    let host_mem_gib = crate::physical::check(
        origin,
        &format!("nodes[{ni}].host_mem_gib"),
        node.host_mem_gib
            .unwrap_or((DEFAULT_HOST_MEM_PER_GPU_GIB * gpu_mem).max(DEFAULT_HOST_MEM_MIN_GIB)),
        &crate::physical::MEM_GIB,
    )?;
    let host_mem_bw_gbps = crate::physical::check(
        origin,
        &format!("nodes[{ni}].host_mem_bw_gbps"),
        node.host_mem_bw_gbps.unwrap_or(DEFAULT_HOST_MEM_BW_GBPS),
        &crate::physical::LINK_GBPS,
    )?;
    Ok((host_mem_gib, host_mem_bw_gbps))
}

impl ClusterFile {
    /// Parses a cluster TOML file's text (checked when resolved).
    pub fn parse(text: &str, origin: &str) -> Result<ClusterFile, SpecError> {
        toml::from_str(text).map_err(|e| SpecError::parse(origin, e))
    }

    /// The `--gpus l4,l4,a6000` shorthand: one node of these GPUs, one
    /// each, in rank order, over PCIe.
    pub fn gpu_list(names: &[&str]) -> ClusterFile {
        ClusterFile {
            name: Some(names.join(",")),
            network: None,
            nodes: vec![NodeFile {
                name: Some("node0".into()),
                ..NodeFile::of(names.iter().map(|n| GpuGroupFile::of(n, 1)).collect())
            }],
        }
    }

    /// `nodes` identical nodes of `gpus_per_node` GPUs of type `gpu`,
    /// joined inside a node by `intra_link` (as the file's field), by
    /// default NVSwitch where the catalog's GPU has switched NVLink (SXM
    /// parts: a DGX / HGX server) and PCIe otherwise; the default network.
    pub fn homogeneous(
        nodes: u32,
        gpus_per_node: u32,
        gpu: &GpuSpec,
        intra_link: Option<&str>,
    ) -> ClusterFile {
        let switched = matches!(gpu.peer_link, PeerLink::Nvlink { bridge: false, .. });
        let link = match intra_link {
            Some(l) => Some(l.to_string()),
            None if switched && gpus_per_node > 1 => Some("nvswitch".into()),
            None => None,
        };
        ClusterFile {
            name: Some(format!("{nodes}x{gpus_per_node} {}", gpu.name)),
            network: None,
            nodes: vec![NodeFile {
                name: Some("node".into()),
                intra_link: link,
                count: Some(nodes),
                ..NodeFile::of(vec![GpuGroupFile::of(&gpu.name, gpus_per_node)])
            }],
        }
    }

    /// `copies` more nodes like node block `block`, holding only its GPUs
    /// of type `gpu` (the same fabric, host and NICs; named
    /// `<name>-added`), after every other node: how a cluster grows by
    /// renting more of the servers it has. The number of GPUs each added
    /// node holds, 0 when the block has none of `gpu` (nothing is added).
    pub fn add_copies(&mut self, block: usize, gpu: &str, copies: u32) -> u32 {
        let Some(node) = self.nodes.get(block) else {
            return 0;
        };
        let groups: Vec<GpuGroupFile> = node
            .gpus
            .iter()
            .filter(|g| g.gpu_type == gpu)
            .cloned()
            .collect();
        let per_node: u32 = groups.iter().map(|g| g.count.unwrap_or(1)).sum();
        if per_node == 0 || copies == 0 {
            return per_node;
        }
        let name = format!(
            "{}-added",
            node.name.clone().unwrap_or_else(|| format!("node{block}"))
        );
        self.nodes.push(NodeFile {
            name: Some(name),
            count: Some(copies),
            gpus: groups,
            ..node.clone()
        });
        if let Some(n) = &mut self.name {
            n.push_str(&format!(" + {} {gpu}", copies * per_node));
        }
        per_node
    }

    /// Every node's network replaced by one link of `gbit_s` per node (the
    /// `[network]` table's `bw_gbit_s`; NIC counts and rates dropped).
    pub fn set_network_gbit_s(&mut self, gbit_s: f64) {
        let net = self.network.get_or_insert_with(NetworkFile::default);
        net.bw_gbit_s = Some(gbit_s);
        net.nics = None;
        net.nic_gbit_s = None;
        for n in &mut self.nodes {
            n.nics = None;
            n.nic_gbit_s = None;
        }
    }

    /// Appends a node of `count` GPUs of type `gpu` (PCIe inside, the
    /// cluster's network), named `added<k>`.
    pub fn add_node(&mut self, gpu: &str, count: u32) {
        let k = self.nodes.len();
        self.nodes.push(NodeFile {
            name: Some(format!("added{k}")),
            ..NodeFile::of(vec![GpuGroupFile::of(gpu, count)])
        });
        if let Some(name) = &mut self.name {
            name.push_str(&format!(" + {count} {gpu}"));
        }
    }
}

impl GpuGroupFile {
    /// `count` GPUs of type `gpu`, the catalog's price.
    pub fn of(gpu: &str, count: u32) -> GpuGroupFile {
        GpuGroupFile {
            gpu_type: gpu.to_string(),
            count: Some(count),
            price_per_hour_usd: None,
        }
    }
}

impl Cluster {
    /// Parses and validates a cluster TOML file's text. `origin` is the path (for errors).
    pub fn from_toml(text: &str, origin: &str, catalog: &GpuCatalog) -> Result<Cluster, SpecError> {
        Cluster::from_file(&ClusterFile::parse(text, origin)?, origin, catalog)
    }

    /// Validates the raw file form.
    pub fn from_file(
        file: &ClusterFile,
        origin: &str,
        catalog: &GpuCatalog,
    ) -> Result<Cluster, SpecError> {
        if file.nodes.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "nodes",
                "expected at least one [[nodes]] entry",
            ));
        }
        // Sizes first, before anything is allocated for them.
        check_sizes(file, origin)?;
        let net = file.network.clone().unwrap_or_default();
        let mut gpus = Vec::new();
        let mut nodes = Vec::new();
        for (ni, node) in file.nodes.iter().enumerate() {
            let copies = node.count.unwrap_or(1) as usize;
            for k in 0..copies {
                let index = nodes.len();
                let node_specs = resolve_gpus(origin, ni, index, node, catalog, &mut gpus)?;
                let name = match &node.name {
                    Some(name) if copies > 1 => format!("{name}-{k}"),
                    Some(name) => name.clone(),
                    None => format!("node{index}"),
                };
                nodes.push(resolve_node(origin, ni, name, node, &net, &node_specs)?);
            }
        }
        Ok(Cluster {
            name: file.name.clone().unwrap_or_else(|| "cluster".to_string()),
            gpus,
            nodes,
        })
    }

    /// The `--gpus l4,l4,a6000,p40` shorthand: one node, GPUs talk over PCIe.
    pub fn from_gpu_list(
        list: &str,
        origin: &str,
        catalog: &GpuCatalog,
    ) -> Result<Cluster, SpecError> {
        let names = crate::lists::items(list, origin)?;
        // Name each unknown entry by its position in the list, not by the
        // internal node/group path the shorthand expands to.
        for (i, n) in names.iter().enumerate() {
            catalog.lookup(n, &format!("{origin} (entry {})", i + 1))?;
        }
        let file = ClusterFile::gpu_list(&names);
        Cluster::from_file(&file, origin, catalog)
    }

    /// Number of GPUs (ranks).
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    /// True when the cluster has no GPU (never, once validated).
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// A copy with every node's network bandwidth multiplied by `factor`
    /// (what-if studies).
    pub fn with_inter_bw_scaled(&self, factor: f64) -> Cluster {
        let mut c = self.clone();
        for n in &mut c.nodes {
            n.nic_gbps *= factor;
        }
        c
    }

    /// Names of the GPUs in rank order.
    pub fn gpu_names(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.spec.name.clone()).collect()
    }

    /// A copy with every bandwidth (intra-node links, network, host memory)
    /// multiplied by `factor` (what-if studies, monotonicity tests).
    pub fn with_all_bw_scaled(&self, factor: f64) -> Cluster {
        let mut c = self.clone();
        for n in &mut c.nodes {
            n.nic_gbps *= factor;
            n.pcie_gbps *= factor;
            n.nvlink_gbps = n.nvlink_gbps.map(|b| b * factor);
            n.host_mem_bw_gbps *= factor;
        }
        c
    }

    /// GPUs (ranks) on node `n`.
    pub fn node_ranks(&self, n: usize) -> Vec<usize> {
        self.gpus
            .iter()
            .filter(|g| g.node == n)
            .map(|g| g.rank)
            .collect()
    }
}

/// A node's fabric before overrides.
struct IntraSpec {
    fabric: IntraFabric,
    nvlink_gbps: Option<f64>,
    pcie_gbps: f64,
    describe: String,
}

/// Node `ni`'s fabric from the link its file names (`None`: PCIe of its
/// GPUs' oldest generation).
fn resolve_intra(
    origin: &str,
    ni: usize,
    link: Option<&str>,
    specs: &[GpuSpec],
) -> Result<IntraSpec, SpecError> {
    let req = IntraRequest::new(origin, ni, link, specs);
    match link.map(|l| l.trim().to_ascii_lowercase()) {
        None => Ok(req.pcie(req.min_gen)),
        Some(l) if l == "nvlink" => req.nvlink(None),
        Some(l) if l == "nvswitch" => req.nvlink(Some(IntraFabric::Nvswitch)),
        Some(l) if l == "nvlink-bridge" => req.nvlink(Some(IntraFabric::NvlinkBridge)),
        Some(l) => {
            let gen = l
                .strip_prefix("pcie")
                .and_then(|g| g.parse::<u32>().ok())
                .filter(|g| pcie_p2p_x16_gbps(*g).is_some());
            match gen {
                Some(g) => Ok(req.pcie(g)),
                None => Err(SpecError::invalid(
                    origin,
                    &req.field,
                    format!(
                        "expected nvswitch, nvlink-bridge, nvlink, pcie3, pcie4 or pcie5, got `{l}`"
                    ),
                )),
            }
        }
    }
}

/// What resolving a node's intra-node link needs: where errors point, the
/// link the file asks for, the node's GPUs and what their host links allow.
struct IntraRequest<'a> {
    origin: &'a str,
    /// The field errors name (`nodes[i].intra_link`).
    field: String,
    /// The link the file names, as written.
    link: Option<&'a str>,
    specs: &'a [GpuSpec],
    /// Oldest PCIe generation among the GPUs.
    min_gen: u32,
    /// PCIe peer bandwidth the slowest GPU's host link allows, GB/s.
    host_p2p: f64,
}

impl<'a> IntraRequest<'a> {
    /// The request for node `ni` with GPUs `specs` and link `link`.
    fn new(
        origin: &'a str,
        ni: usize,
        link: Option<&'a str>,
        specs: &'a [GpuSpec],
    ) -> IntraRequest<'a> {
        let field = format!("nodes[{ni}].intra_link");
        let min_gen = specs
            .iter()
            .map(|s| s.host_link.pcie_gen)
            .min()
            .unwrap_or(3);
        // A GPU's own host link (generation and lanes) caps its PCIe traffic.
        let host_p2p = specs
            .iter()
            .map(|s| {
                crate::gpu::HostLink::lane_raw_gbps(s.host_link.pcie_gen).unwrap_or(0.985)
                    * s.host_link.lanes as f64
                    * LinkClass::Pcie.efficiency()
            })
            .fold(f64::INFINITY, f64::min);
        IntraRequest {
            origin,
            field,
            link,
            specs,
            min_gen,
            host_p2p,
        }
    }

    /// GPUs talking over PCIe generation `gen` (x16, capped by their host links).
    fn pcie(&self, gen: u32) -> IntraSpec {
        let bw = pcie_p2p_x16_gbps(gen)
            .unwrap_or(self.host_p2p)
            .min(self.host_p2p);
        IntraSpec {
            fabric: IntraFabric::Pcie,
            nvlink_gbps: None,
            pcie_gbps: bw,
            describe: format!("pcie{gen} x16"),
        }
    }

    /// GPUs joined by NVLink (of fabric `want` when given): every GPU must
    /// have NVLink, all of one fabric; the slowest GPU's NVLink paces it.
    fn nvlink(&self, want: Option<IntraFabric>) -> Result<IntraSpec, SpecError> {
        let (origin, field, link) = (self.origin, &self.field, self.link);
        let mut bw = f64::INFINITY;
        let mut fabric = None;
        for s in self.specs {
            let PeerLink::Nvlink {
                bw_gbps, bridge, ..
            } = s.peer_link
            else {
                return Err(SpecError::invalid(
                    origin,
                    field,
                    format!(
                        "`{}` but {} has no NVLink; use pcie3|pcie4|pcie5",
                        link.unwrap_or_default(),
                        s.name
                    ),
                ));
            };
            let own = if bridge {
                IntraFabric::NvlinkBridge
            } else {
                IntraFabric::Nvswitch
            };
            if let Some(w) = want {
                if w != own {
                    let (has, use_) = if bridge {
                        ("NVLink bridges only (PCIe card)", "nvlink-bridge")
                    } else {
                        ("switched NVLink (SXM part), no bridge", "nvswitch")
                    };
                    return Err(SpecError::invalid(
                        origin,
                        field,
                        format!(
                            "`{}` but {} has {has}; use {use_}",
                            link.unwrap_or_default(),
                            s.name
                        ),
                    ));
                }
            }
            if fabric.is_some_and(|f| f != own) {
                return Err(SpecError::invalid(
                    origin,
                    field,
                    "the node mixes SXM parts (NVSwitch) and bridged PCIe cards; NVLink cannot join them",
                ));
            }
            fabric = Some(own);
            bw = bw.min(bw_gbps);
        }
        let fabric = fabric.unwrap_or(IntraFabric::Nvswitch);
        let class = match fabric {
            IntraFabric::Nvswitch => LinkClass::Nvswitch,
            _ => LinkClass::NvlinkBridge,
        };
        Ok(IntraSpec {
            fabric,
            nvlink_gbps: Some(bw * class.efficiency()),
            pcie_gbps: self.pcie(self.min_gen).pcie_gbps,
            describe: class.name().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> &'static GpuCatalog {
        GpuCatalog::builtin()
    }

    #[test]
    fn gpu_list_shorthand() {
        let c = Cluster::from_gpu_list("l4,l4,a6000,p40", "--gpus", cat()).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(c.nodes.len(), 1);
        assert_eq!(c.gpus[2].rank, 2);
        // P40 is PCIe 3: the node link runs at its pace.
        assert!(
            c.nodes[0].intra_bw_gbps() < 13.0,
            "{}",
            c.nodes[0].intra_bw_gbps()
        );
        let e = Cluster::from_gpu_list("l4,,p40", "--gpus", cat()).unwrap_err();
        assert!(e.to_string().contains("--gpus"), "{e}");
        let e = Cluster::from_gpu_list("l4,h900", "--gpus", cat()).unwrap_err();
        assert!(
            matches!(e, SpecError::UnknownGpu { ref name, .. } if name == "h900"),
            "{e}"
        );
    }

    /// `count = N` on a node block is N identical nodes, ranks and nodes
    /// in order, the same as N blocks written out; a zero or absurd count
    /// is refused with its field named.
    #[test]
    fn added_copies_keep_the_fabric_and_one_gpu_type() {
        let text = r#"
            [[nodes]]
            name = "dgx"
            intra_link = "pcie4"
            gpus = [ { type = "h100", count = 8 }, { type = "l4", count = 1 } ]
        "#;
        let mut f = ClusterFile::parse(text, "c.toml").unwrap();
        assert_eq!(f.add_copies(0, "h100", 0), 8);
        assert_eq!(f.nodes.len(), 1);
        assert_eq!(f.add_copies(0, "a100", 2), 0);
        assert_eq!(f.add_copies(0, "h100", 2), 8);
        let c = Cluster::from_file(&f, "c.toml", cat()).unwrap();
        assert_eq!(c.len(), 9 + 16);
        assert!(c.gpus[9..].iter().all(|g| g.spec.name == "h100-sxm"));
        assert_eq!(c.nodes[1].name, "dgx-added-0");
        assert_eq!(
            format!("{:?}", c.nodes[1].intra_link),
            format!("{:?}", c.nodes[0].intra_link)
        );
    }

    #[test]
    fn node_count_stands_for_identical_nodes() {
        let one = r#"
            [network]
            bw_gbit_s = 100
            [[nodes]]
            name = "a"
            gpus = [ { type = "l4", count = 2 } ]
            [[nodes]]
            name = "dgx"
            count = 3
            intra_link = "nvswitch"
            gpus = [ { type = "h100", count = 8 } ]
        "#;
        let c = Cluster::from_toml(one, "c.toml", cat()).unwrap();
        assert_eq!(c.len(), 2 + 24);
        let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "dgx-0", "dgx-1", "dgx-2"]);
        assert_eq!(c.gpus[2 + 8].node, 2);
        assert_eq!(c.gpus[25].rank, 25);
        assert_eq!(c.node_ranks(3), (18..26).collect::<Vec<_>>());
        let mut spelled = String::from("[network]\nbw_gbit_s = 100\n[[nodes]]\nname = \"a\"\ngpus = [ { type = \"l4\", count = 2 } ]\n");
        for _ in 0..3 {
            spelled.push_str(
                "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [ { type = \"h100\", count = 8 } ]\n",
            );
        }
        let d = Cluster::from_toml(&spelled, "d.toml", cat()).unwrap();
        for (x, y) in c.nodes.iter().zip(&d.nodes) {
            assert_eq!(x.hardware_key(), y.hardware_key());
        }
        let bad = |count: &str| {
            let t = format!(
                "[[nodes]]\ncount = {count}\ngpus = [ {{ type = \"h100\", count = 8 }} ]\n"
            );
            Cluster::from_toml(&t, "bad.toml", cat())
                .unwrap_err()
                .to_string()
        };
        let e = bad("0");
        assert!(e.contains("nodes[0].count") && e.contains(">= 1"), "{e}");
        let e = bad("100000");
        assert!(e.contains("nodes[0].count") || e.contains("limit"), "{e}");
        let e = bad("-1");
        assert!(e.contains("bad.toml"), "{e}");
    }

    #[test]
    fn shipped_examples_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/clusters");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            let c = Cluster::from_toml(&text, &p.display().to_string(), cat())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!c.is_empty());
            n += 1;
        }
        assert!(n >= 3);
    }

    #[test]
    fn toml_errors_name_the_field() {
        let bad_bw = "[network]\nbw_gbit_s = -5\n[[nodes]]\ngpus = [{ type = \"t4\" }]\n";
        let e = Cluster::from_toml(bad_bw, "c.toml", cat())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("c.toml") && e.contains("network.bw_gbit_s"),
            "{e}"
        );
        let bad_gpu = "[[nodes]]\ngpus = [{ type = \"t4\" }, { type = \"k80\" }]\n";
        let e = Cluster::from_toml(bad_gpu, "c.toml", cat())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes[0].gpus[1]") && e.contains("k80"), "{e}");
        let bad_link =
            "[[nodes]]\nintra_link = \"nvlink\"\ngpus = [{ type = \"t4\", count = 2 }]\n";
        let e = Cluster::from_toml(bad_link, "c.toml", cat())
            .unwrap_err()
            .to_string();
        assert!(e.contains("intra_link"), "{e}");
        let malformed = "[[nodes]\n";
        assert!(matches!(
            Cluster::from_toml(malformed, "c.toml", cat()),
            Err(SpecError::Parse { .. })
        ));
        let typo = "[[nodes]]\ngpu = [{ type = \"t4\" }]\n";
        assert!(Cluster::from_toml(typo, "c.toml", cat()).is_err());
    }

    #[test]
    fn multi_node_counts_and_network() {
        let t = "[network]\nbw_gbit_s = 100\nlatency_us = 5\n[[nodes]]\nintra_link = \"nvlink\"\ngpus = [{ type = \"a100x40\", count = 8 }]\n[[nodes]]\ngpus = [{ type = \"t4\", count = 4, price_per_hour_usd = 0.5 }]\n";
        let c = Cluster::from_toml(t, "c.toml", cat()).unwrap();
        assert_eq!(c.len(), 12);
        assert_eq!(c.gpus[8].node, 1);
        assert_eq!(c.gpus[9].price_per_hour_usd, Some(0.5));
        // `[network] bw_gbit_s` is what a node achieves: one NIC, not derated.
        assert!((c.nodes[0].net_gbps() - 12.5).abs() < 1e-12);
        assert_eq!(c.nodes[1].nics, 1);
        assert_eq!(c.nodes[0].net_latency_us, 5.0);
        assert!(c.nodes[0].intra_bw_gbps() > c.nodes[1].intra_bw_gbps());
        assert_eq!(c.with_inter_bw_scaled(2.0).nodes[1].net_gbps(), 25.0);
        // Host memory: twice the GPU memory (8 x 40 GiB), at least 64 GiB.
        assert_eq!(c.nodes[0].host_mem_gib, 640.0);
        assert_eq!(c.nodes[1].host_mem_gib, 128.0);
        assert_eq!(c.nodes[0].host_mem_bw_gbps, DEFAULT_HOST_MEM_BW_GBPS);
        let t = "[[nodes]]\nhost_mem_gib = 32\nhost_mem_bw_gbps = 40\ngpus = [{ type = \"t4\" }]\n";
        let c = Cluster::from_toml(t, "c.toml", cat()).unwrap();
        assert_eq!(
            (c.nodes[0].host_mem_gib, c.nodes[0].host_mem_bw_gbps),
            (32.0, 40.0)
        );
        let t = "[[nodes]]\nhost_mem_bw_gbps = 0\ngpus = [{ type = \"t4\" }]\n";
        let e = Cluster::from_toml(t, "c.toml", cat())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes[0].host_mem_bw_gbps"), "{e}");
    }

    #[test]
    fn links_and_nics_say_what_clusters_are() {
        let t = "[network]\nnics = 4\nnic_gbit_s = 200\n[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"a100-80gb\", count = 8 }]\n[[nodes]]\nintra_link = \"nvlink-bridge\"\nnics = 1\nnic_gbit_s = 100\ngpudirect_rdma = false\ngpus = [{ type = \"rtx-a6000\", count = 4 }]\n";
        let c = Cluster::from_toml(t, "c.toml", cat()).unwrap();
        let (a, b) = (&c.nodes[0], &c.nodes[1]);
        assert_eq!(a.fabric, IntraFabric::Nvswitch);
        assert_eq!(a.nics, 4);
        assert!((a.nic_gbps - 25.0 * LinkClass::NicRdma.efficiency()).abs() < 1e-9);
        assert!((a.intra_bw_gbps() - 300.0 * LinkClass::Nvswitch.efficiency()).abs() < 1e-9);
        assert_eq!(b.fabric, IntraFabric::NvlinkBridge);
        assert_eq!((b.nics, b.gpus), (1, 4));
        assert!((b.nic_gbps - 12.5 * LinkClass::NicHost.efficiency()).abs() < 1e-9);
        // Bridges join 0-1 and 2-3; 1-2 crosses PCIe.
        assert!(b.pair_on_nvlink(0, 1) && b.pair_on_nvlink(2, 3) && !b.pair_on_nvlink(1, 2));
        assert!(b.pair_gbps(1, 2) < b.pair_gbps(0, 1));
        assert_eq!(c.gpus[9].local, 1);
        // `nvlink` means a switch on SXM parts and bridges on PCIe cards.
        let t = "[[nodes]]\nintra_link = \"nvlink\"\ngpus = [{ type = \"rtx-3090\", count = 2 }]\n";
        let c = Cluster::from_toml(t, "c.toml", cat()).unwrap();
        assert_eq!(c.nodes[0].fabric, IntraFabric::NvlinkBridge);
    }

    #[test]
    fn an_h100_pcie_pair_is_bridged_at_nvidias_600_gb_s() {
        // NVIDIA's H100 PCIe product brief (profiles/gpus.toml): three
        // bridges of four NVLink4 links, 25 GB/s per direction each, 600
        // GB/s bidirectional between the pair; the A100 PCIe's layout.
        let h = cat().get("h100-pcie").unwrap();
        let b = h.peer_link.bridges().unwrap();
        assert_eq!((b.count, b.links_per_bridge, b.links()), (3, 4, 12));
        assert_eq!(b.link_gbps, 25.0);
        assert_eq!(b.per_direction_gbps(), 300.0);
        assert_eq!(h.nvlink_gbps(), Some(300.0));
        assert_eq!(2.0 * h.nvlink_gbps().unwrap(), 600.0, "bidirectional");
        // GA102 cards: one bridge of four x4 links, 112.5 GB/s bidirectional.
        for g in ["rtx-a6000", "rtx-3090"] {
            let b = cat().get(g).unwrap().peer_link.bridges().unwrap();
            assert_eq!((b.count, b.links()), (1, 4), "{g}");
            assert_eq!(2.0 * b.per_direction_gbps(), 112.5, "{g}");
        }
        // The pair as a cluster: bridged, at the line rate times the
        // bridge class's achievable fraction (links.toml).
        let t =
            "[[nodes]]\nintra_link = \"nvlink\"\ngpus = [{ type = \"h100-pcie\", count = 2 }]\n";
        let c = Cluster::from_toml(t, "c.toml", cat()).unwrap();
        let n = &c.nodes[0];
        assert_eq!(n.fabric, IntraFabric::NvlinkBridge);
        assert!(n.pair_on_nvlink(0, 1));
        let achievable = 300.0 * LinkClass::NvlinkBridge.efficiency();
        assert!(
            (n.pair_gbps(0, 1) - achievable).abs() < 1e-9,
            "{}",
            n.pair_gbps(0, 1)
        );
    }

    #[test]
    fn bad_links_and_nics_name_the_field() {
        let err = |t: &str| {
            Cluster::from_toml(t, "c.toml", cat())
                .unwrap_err()
                .to_string()
        };
        let one = |extra: &str, link: &str, gpu: &str| {
            format!("[[nodes]]\n{extra}intra_link = \"{link}\"\ngpus = [{{ type = \"{gpu}\", count = 2 }}]\n")
        };
        let e = err(&one("", "nvlink-bridge", "t4"));
        assert!(
            e.contains("nodes[0].intra_link") && e.contains("no NVLink"),
            "{e}"
        );
        let e = err(&one("", "nvswitch", "rtx-a6000"));
        assert!(e.contains("nvlink-bridge"), "{e}");
        let e = err(&one("", "nvlink-bridge", "a100-80gb"));
        assert!(e.contains("nvswitch"), "{e}");
        for bad in [
            "nics = 0\nnic_gbit_s = 100\n",
            "nics = -2\nnic_gbit_s = 100\n",
        ] {
            let e = err(&one(bad, "pcie4", "l4"));
            assert!(e.contains("nodes[0].nics"), "{e}");
        }
        let e = err(&one("nics = 2\n", "pcie4", "l4"));
        assert!(e.contains("nic_gbit_s"), "{e}");
        let e = err(&one("nic_gbit_s = -100\n", "pcie4", "l4"));
        assert!(e.contains("nodes[0].nic_gbit_s"), "{e}");
        let e = err(
            "[network]\nbw_gbit_s = 100\nnic_gbit_s = 100\n[[nodes]]\ngpus = [{ type = \"l4\" }]\n",
        );
        assert!(e.contains("network"), "{e}");
    }
}
