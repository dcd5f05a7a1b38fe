//! A rental pool: the GPU servers a user could rent, with how many of each
//! are available and at what price, and the network between them (TOML).
//! `cephalo whatif cheapest` picks from it ([`crate::whatif::cheapest`]).
//!
//! ```toml
//! name = "cloud offers"          # optional
//! [network]                      # optional: a cluster file's [network]
//! bw_gbit_s = 100
//!
//! [[offer]]
//! gpu = "h100-sxm"               # catalog name or alias
//! gpus_per_node = 8
//! max_nodes = 4                  # how many such servers can be rented
//! price_per_hour_usd = 4.5       # per GPU-hour (default: the catalog's)
//! intra_link = "nvswitch"        # default: as `--nodes` (NVSwitch on SXM parts)
//! ```
//!
//! Units: GPUs, nodes, USD per GPU-hour, Gbit/s.

use crate::cluster::{ClusterFile, NetworkFile};
use crate::error::SpecError;
use crate::gpu::GpuCatalog;
use serde::Deserialize;

/// Largest `max_nodes` of one offer (what a search tries, not a cloud
/// limit: 1,024 nodes of 8 is the simulator's cluster scale).
pub const MAX_NODES_PER_OFFER: u32 = 1024;

/// One kind of server for rent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    /// GPU type (catalog name or alias).
    pub gpu: String,
    /// GPUs per server.
    pub gpus_per_node: u32,
    /// How many servers are available.
    pub max_nodes: u32,
    /// Price per GPU-hour, USD (default: the catalog's list price).
    #[serde(default)]
    pub price_per_hour_usd: Option<f64>,
    /// Link inside a server (a cluster file's `intra_link`).
    #[serde(default)]
    pub intra_link: Option<String>,
}

/// A rental pool (module docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// Name used in outputs.
    #[serde(default)]
    pub name: Option<String>,
    /// Network between the servers (default: a cluster file's default).
    #[serde(default)]
    pub network: Option<NetworkFile>,
    /// The offers, in the file's order.
    #[serde(default)]
    pub offer: Vec<Offer>,
}

impl Pool {
    /// Parses and checks a pool file's text: every offer's GPU in
    /// `catalog`, at least one GPU per node and one node, a price (given
    /// or the catalog's) that is a non-negative number. Errors name
    /// `origin` and the field (`offer[2].price_per_hour_usd`).
    pub fn parse(text: &str, origin: &str, catalog: &GpuCatalog) -> Result<Pool, SpecError> {
        let mut pool: Pool = toml::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
        if pool.offer.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "offer",
                "expected at least one [[offer]] (gpu, gpus_per_node, max_nodes)",
            ));
        }
        for (i, o) in pool.offer.iter_mut().enumerate() {
            let field = |f: &str| format!("offer[{i}].{f}");
            let spec = catalog.lookup(&o.gpu, &format!("{origin}: {}", field("gpu")))?;
            o.gpu = spec.name.clone();
            if o.gpus_per_node == 0 || o.gpus_per_node as usize > crate::limits::MAX_GPUS_PER_NODE {
                return Err(SpecError::invalid(
                    origin,
                    field("gpus_per_node"),
                    format!(
                        "expected 1..={} GPUs per server, got {}",
                        crate::limits::MAX_GPUS_PER_NODE,
                        o.gpus_per_node
                    ),
                ));
            }
            if o.max_nodes == 0 || o.max_nodes > MAX_NODES_PER_OFFER {
                return Err(SpecError::invalid(
                    origin,
                    field("max_nodes"),
                    format!(
                        "expected 1..={MAX_NODES_PER_OFFER} servers, got {}",
                        o.max_nodes
                    ),
                ));
            }
            let price = o.price_per_hour_usd.or(spec.price_per_hour_usd);
            match price {
                Some(p) if p.is_finite() && p >= 0.0 => o.price_per_hour_usd = Some(p),
                Some(p) => {
                    return Err(SpecError::invalid(
                        origin,
                        field("price_per_hour_usd"),
                        format!("expected a price per GPU-hour >= 0 USD, got {p}"),
                    ))
                }
                None => {
                    return Err(SpecError::invalid(
                        origin,
                        field("price_per_hour_usd"),
                        format!(
                            "{} has no list price in the catalog: give price_per_hour_usd (USD per GPU-hour)",
                            spec.name
                        ),
                    ))
                }
            }
        }
        Ok(pool)
    }

    /// The cluster of `nodes[i]` servers of offer `i` (offers with 0 left
    /// out), in the pool's order, on the pool's network; `None` when every
    /// count is 0.
    pub fn cluster(&self, nodes: &[u32], catalog: &GpuCatalog) -> Option<ClusterFile> {
        let mut file = ClusterFile {
            name: Some(self.describe(nodes)),
            network: self.network.clone(),
            nodes: Vec::new(),
        };
        for (o, &k) in self.offer.iter().zip(nodes).filter(|(_, &k)| k > 0) {
            let spec = catalog.get(&o.gpu)?;
            let mut f = ClusterFile::homogeneous(k, o.gpus_per_node, spec, o.intra_link.as_deref());
            let mut node = f.nodes.remove(0);
            node.name = Some(o.gpu.clone());
            for g in &mut node.gpus {
                g.price_per_hour_usd = o.price_per_hour_usd;
            }
            file.nodes.push(node);
        }
        (!file.nodes.is_empty()).then_some(file)
    }

    /// `4x8 h100-sxm + 2x8 a100-80gb`: the servers of a selection.
    pub fn describe(&self, nodes: &[u32]) -> String {
        let parts: Vec<String> = self
            .offer
            .iter()
            .zip(nodes)
            .filter(|(_, &k)| k > 0)
            .map(|(o, k)| format!("{k}x{} {}", o.gpus_per_node, o.gpu))
            .collect();
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(" + ")
        }
    }

    /// USD per hour of a selection (`nodes[i]` servers of offer `i`).
    pub fn usd_per_hour(&self, nodes: &[u32]) -> f64 {
        self.offer
            .iter()
            .zip(nodes)
            .map(|(o, &k)| k as f64 * o.gpus_per_node as f64 * o.price_per_hour_usd.unwrap_or(0.0))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;

    fn cat() -> &'static GpuCatalog {
        GpuCatalog::builtin()
    }

    #[test]
    fn a_pool_builds_clusters_of_its_offers() {
        let text = r#"
            [network]
            bw_gbit_s = 100
            [[offer]]
            gpu = "h100"
            gpus_per_node = 8
            max_nodes = 2
            price_per_hour_usd = 4.0
            [[offer]]
            gpu = "l4"
            gpus_per_node = 4
            max_nodes = 8
        "#;
        let p = Pool::parse(text, "pool.toml", cat()).unwrap();
        assert_eq!(p.offer[0].gpu, "h100-sxm");
        assert!(p.offer[1].price_per_hour_usd.unwrap() > 0.0);
        let f = p.cluster(&[1, 2], cat()).unwrap();
        let c = Cluster::from_file(&f, "pool.toml", cat()).unwrap();
        assert_eq!(c.len(), 8 + 8);
        assert_eq!(c.gpus[0].price_per_hour_usd, Some(4.0));
        assert_eq!(p.describe(&[1, 2]), "1x8 h100-sxm + 2x4 l4");
        let usd = 8.0 * 4.0 + 8.0 * p.offer[1].price_per_hour_usd.unwrap();
        assert!((p.usd_per_hour(&[1, 2]) - usd).abs() < 1e-9);
        assert!(p.cluster(&[0, 0], cat()).is_none());
    }

    #[test]
    fn bad_pools_name_the_field() {
        let err = |t: &str| Pool::parse(t, "p.toml", cat()).unwrap_err().to_string();
        assert!(err("").contains("offer"));
        let e = err("[[offer]]\ngpu = \"h100\"\ngpus_per_node = 0\nmax_nodes = 1\n");
        assert!(e.contains("offer[0].gpus_per_node"), "{e}");
        let e = err("[[offer]]\ngpu = \"h100\"\ngpus_per_node = 8\nmax_nodes = 0\n");
        assert!(e.contains("offer[0].max_nodes"), "{e}");
        let e = err("[[offer]]\ngpu = \"h100\"\ngpus_per_node = 8\nmax_nodes = 1\nprice_per_hour_usd = -1\n");
        assert!(e.contains("price_per_hour_usd"), "{e}");
        let e = err("[[offer]]\ngpu = \"p40\"\ngpus_per_node = 8\nmax_nodes = 1\n");
        assert!(e.contains("p40") && e.contains("price"), "{e}");
        let e = err("[[offer]]\ngpu = \"nope\"\ngpus_per_node = 8\nmax_nodes = 1\n");
        assert!(e.contains("offer[0].gpu"), "{e}");
        let e = err("[[offer]]\ngpu = \"h100\"\ngpus_per_node = 8\nmax_nodes = 1\ncolour = 1\n");
        assert!(e.contains("colour"), "{e}");
    }
}
