//! Cluster specification: nodes, their GPUs, the intra-node link and the
//! inter-node network.
//!
//! Written by users as TOML (see `experiments/clusters/*.toml`):
//!
//! ```toml
//! name = "paper"
//! [network]                 # inter-node network (per node NIC)
//! bw_gbit_s = 25.0          # Gbit/s
//! latency_us = 20.0         # µs per message step
//! [[nodes]]
//! name = "box0"
//! intra_link = "pcie4"      # pcie3 | pcie4 | pcie5 | nvlink
//! # intra_bw_gbps = 20.0    # optional override, GB/s per direction
//! # host_mem_gib = 512      # host (pinned) memory for offload; default below
//! # host_mem_bw_gbps = 100  # host memory bandwidth (CPU optimizer step); default below
//! gpus = [ { type = "l4", count = 2 }, { type = "a6000", price_per_hour_usd = 0.8 } ]
//! ```
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
use crate::gpu::{GpuCatalog, GpuSpec};
use serde::{Deserialize, Serialize};

/// Default latency of one intra-node message step (µs): PCIe / NVLink P2P.
pub const DEFAULT_INTRA_LATENCY_US: f64 = 10.0;
/// Default inter-node network when a spec gives none (Gbit/s): 25 GbE.
pub const DEFAULT_INTER_BW_GBIT_S: f64 = 25.0;
/// Default latency of one inter-node message step (µs): TCP over Ethernet.
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

/// Raw TOML form of a cluster file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Cluster name used in reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Inter-node network.
    #[serde(default)]
    pub network: Option<NetworkFile>,
    /// Nodes in rank order.
    pub nodes: Vec<NodeFile>,
}

/// Raw TOML form of the inter-node network.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFile {
    /// Per-node bandwidth, Gbit/s.
    pub bw_gbit_s: f64,
    /// Per-message latency, µs.
    #[serde(default)]
    pub latency_us: Option<f64>,
}

/// Raw TOML form of one node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// Node name (defaults to `node<i>`).
    #[serde(default)]
    pub name: Option<String>,
    /// `pcie3`, `pcie4`, `pcie5` or `nvlink` (default: PCIe of the GPUs' host links).
    #[serde(default)]
    pub intra_link: Option<String>,
    /// Override of the intra-node bandwidth, GB/s per direction.
    #[serde(default)]
    pub intra_bw_gbps: Option<f64>,
    /// Override of the intra-node latency, µs.
    #[serde(default)]
    pub intra_latency_us: Option<f64>,
    /// Host memory offload may use, GiB (default: see the module docs).
    #[serde(default)]
    pub host_mem_gib: Option<f64>,
    /// Host memory bandwidth, GB/s (default [`DEFAULT_HOST_MEM_BW_GBPS`]).
    #[serde(default)]
    pub host_mem_bw_gbps: Option<f64>,
    /// GPU groups of this node.
    pub gpus: Vec<GpuGroupFile>,
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
    /// Catalog entry.
    pub spec: GpuSpec,
    /// Price per GPU-hour (USD), from the cluster file or the catalog.
    pub price_per_hour_usd: Option<f64>,
}

/// One node of a resolved cluster.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// Link between GPUs of this node, GB/s per direction.
    pub intra_bw_gbps: f64,
    /// Link latency per message step, µs.
    pub intra_latency_us: f64,
    /// Human description of the link (e.g. `pcie4 x16`).
    pub intra_link: String,
    /// Host (pinned) memory offload may use, GiB.
    pub host_mem_gib: f64,
    /// Host memory bandwidth, GB/s (paces a CPU optimizer step).
    pub host_mem_bw_gbps: f64,
}

/// A validated cluster: GPUs in rank order, nodes and the network.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Name for reports.
    pub name: String,
    /// GPUs in rank order.
    pub gpus: Vec<ClusterGpu>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Inter-node bandwidth per node, Gbit/s.
    pub inter_bw_gbit_s: f64,
    /// Inter-node latency per message step, µs.
    pub inter_latency_us: f64,
}

fn positive(origin: &str, field: &str, v: f64) -> Result<f64, SpecError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(SpecError::invalid(
            origin,
            field,
            format!("expected a positive number, got {v}"),
        ))
    }
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

/// PCIe bandwidth (GB/s per direction, usable) of a generation at x16.
pub fn pcie_x16_gbps(gen: u32) -> Option<f64> {
    (3..=6).contains(&gen).then(|| {
        crate::gpu::HostLink {
            pcie_gen: gen,
            lanes: 16,
        }
        .bw_gbps()
    })
}

impl Cluster {
    /// Parses and validates a cluster TOML file's text. `origin` is the path (for errors).
    pub fn from_toml(text: &str, origin: &str, catalog: &GpuCatalog) -> Result<Cluster, SpecError> {
        let file: ClusterFile = toml::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
        Cluster::from_file(&file, origin, catalog)
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
        let (inter_bw_gbit_s, inter_latency_us) = match &file.network {
            Some(n) => (
                positive(origin, "network.bw_gbit_s", n.bw_gbit_s)?,
                non_negative(
                    origin,
                    "network.latency_us",
                    n.latency_us.unwrap_or(DEFAULT_INTER_LATENCY_US),
                )?,
            ),
            None => (DEFAULT_INTER_BW_GBIT_S, DEFAULT_INTER_LATENCY_US),
        };
        let mut gpus = Vec::new();
        let mut nodes = Vec::new();
        for (ni, node) in file.nodes.iter().enumerate() {
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
                        node: ni,
                        spec: spec.clone(),
                        price_per_hour_usd: g.price_per_hour_usd.or(spec.price_per_hour_usd),
                    });
                    node_specs.push(spec.clone());
                }
            }
            let name = node.name.clone().unwrap_or_else(|| format!("node{ni}"));
            let (link_bw, link_name) =
                resolve_intra(origin, ni, node.intra_link.as_deref(), &node_specs)?;
            let intra_bw_gbps = match node.intra_bw_gbps {
                Some(bw) => positive(origin, &format!("nodes[{ni}].intra_bw_gbps"), bw)?,
                None => link_bw,
            };
            let intra_latency_us = non_negative(
                origin,
                &format!("nodes[{ni}].intra_latency_us"),
                node.intra_latency_us.unwrap_or(DEFAULT_INTRA_LATENCY_US),
            )?;
            let gpu_mem: f64 = node_specs.iter().map(|s| s.mem_gib).sum();
            let host_mem_gib = non_negative(
                origin,
                &format!("nodes[{ni}].host_mem_gib"),
                node.host_mem_gib.unwrap_or(
                    (DEFAULT_HOST_MEM_PER_GPU_GIB * gpu_mem).max(DEFAULT_HOST_MEM_MIN_GIB),
                ),
            )?;
            let host_mem_bw_gbps = positive(
                origin,
                &format!("nodes[{ni}].host_mem_bw_gbps"),
                node.host_mem_bw_gbps.unwrap_or(DEFAULT_HOST_MEM_BW_GBPS),
            )?;
            nodes.push(Node {
                name,
                intra_bw_gbps,
                intra_latency_us,
                intra_link: link_name,
                host_mem_gib,
                host_mem_bw_gbps,
            });
        }
        Ok(Cluster {
            name: file.name.clone().unwrap_or_else(|| "cluster".to_string()),
            gpus,
            nodes,
            inter_bw_gbit_s,
            inter_latency_us,
        })
    }

    /// The `--gpus l4,l4,a6000,p40` shorthand: one node, GPUs talk over PCIe.
    pub fn from_gpu_list(
        list: &str,
        origin: &str,
        catalog: &GpuCatalog,
    ) -> Result<Cluster, SpecError> {
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        if names.iter().any(|n| n.is_empty()) {
            return Err(SpecError::invalid(
                origin,
                "gpus",
                format!("expected a comma-separated list of GPU names, got `{list}`"),
            ));
        }
        // Name each unknown entry by its position in the list, not by the
        // internal node/group path the shorthand expands to.
        for (i, n) in names.iter().enumerate() {
            catalog.lookup(n, &format!("{origin} (entry {})", i + 1))?;
        }
        let file = ClusterFile {
            name: Some(names.join(",")),
            network: None,
            nodes: vec![NodeFile {
                name: Some("node0".into()),
                intra_link: None,
                intra_bw_gbps: None,
                intra_latency_us: None,
                host_mem_gib: None,
                host_mem_bw_gbps: None,
                gpus: names
                    .iter()
                    .map(|n| GpuGroupFile {
                        gpu_type: n.to_string(),
                        count: Some(1),
                        price_per_hour_usd: None,
                    })
                    .collect(),
            }],
        };
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

    /// Inter-node bandwidth in GB/s (10^9 bytes per second).
    pub fn inter_bw_gbps(&self) -> f64 {
        self.inter_bw_gbit_s / 8.0
    }

    /// A copy with the inter-node bandwidth multiplied by `factor` (what-if studies).
    pub fn with_inter_bw_scaled(&self, factor: f64) -> Cluster {
        let mut c = self.clone();
        c.inter_bw_gbit_s *= factor;
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
        c.inter_bw_gbit_s *= factor;
        for n in &mut c.nodes {
            n.intra_bw_gbps *= factor;
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

fn resolve_intra(
    origin: &str,
    ni: usize,
    link: Option<&str>,
    specs: &[GpuSpec],
) -> Result<(f64, String), SpecError> {
    let host_min = specs
        .iter()
        .map(|s| s.host_link.bw_gbps())
        .fold(f64::INFINITY, f64::min);
    let min_gen = specs
        .iter()
        .map(|s| s.host_link.pcie_gen)
        .min()
        .unwrap_or(3);
    match link.map(|l| l.trim().to_ascii_lowercase()) {
        None => Ok((host_min, format!("pcie{min_gen} x16"))),
        Some(l) if l == "nvlink" => {
            let mut bw = f64::INFINITY;
            for s in specs {
                match s.peer_link {
                    crate::gpu::PeerLink::Nvlink { bw_gbps } => bw = bw.min(bw_gbps),
                    crate::gpu::PeerLink::None => {
                        return Err(SpecError::invalid(
                            origin,
                            format!("nodes[{ni}].intra_link"),
                            format!(
                                "`nvlink` but {} has no NVLink; use pcie3|pcie4|pcie5",
                                s.name
                            ),
                        ))
                    }
                }
            }
            Ok((bw, "nvlink".into()))
        }
        Some(l) => {
            let gen = l
                .strip_prefix("pcie")
                .and_then(|g| g.parse::<u32>().ok())
                .and_then(|g| pcie_x16_gbps(g).map(|bw| (g, bw)));
            match gen {
                // A GPU's own host link caps what the node link can deliver.
                Some((g, bw)) => Ok((bw.min(host_min), format!("pcie{g} x16"))),
                None => Err(SpecError::invalid(
                    origin,
                    format!("nodes[{ni}].intra_link"),
                    format!("expected pcie3, pcie4, pcie5 or nvlink, got `{l}`"),
                )),
            }
        }
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
            c.nodes[0].intra_bw_gbps < 13.0,
            "{}",
            c.nodes[0].intra_bw_gbps
        );
        let e = Cluster::from_gpu_list("l4,,p40", "--gpus", cat()).unwrap_err();
        assert!(e.to_string().contains("--gpus"), "{e}");
        let e = Cluster::from_gpu_list("l4,h900", "--gpus", cat()).unwrap_err();
        assert!(
            matches!(e, SpecError::UnknownGpu { ref name, .. } if name == "h900"),
            "{e}"
        );
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
        assert!((c.inter_bw_gbps() - 12.5).abs() < 1e-12);
        assert!(c.nodes[0].intra_bw_gbps > c.nodes[1].intra_bw_gbps);
        assert_eq!(c.with_inter_bw_scaled(2.0).inter_bw_gbit_s, 200.0);
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
}
