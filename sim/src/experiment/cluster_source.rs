//! Where a workload's cluster comes from: a cluster file's text or a
//! `--gpus` list, the edits a sweep makes to it (replicated nodes, an
//! added GPU, another network), and building it.

use crate::cluster::Cluster;
use crate::error::SpecError;
use crate::gpu::GpuCatalog;

/// Where a workload's cluster comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterSource {
    /// A cluster TOML text (its origin for errors).
    Toml {
        /// File it came from.
        origin: String,
        /// The text, variant applied.
        text: String,
    },
    /// A `--gpus` list.
    Gpus(String),
}

/// A cluster file's text as the experiment's caller read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterText {
    /// The name in the spec (`clusters/paper-4gpu.toml`).
    pub name: String,
    /// The file's text.
    pub text: String,
}

impl ClusterSource {
    /// Builds the cluster.
    pub fn build(&self) -> Result<Cluster, SpecError> {
        match self {
            ClusterSource::Toml { origin, text } => {
                Cluster::from_toml(text, origin, GpuCatalog::builtin())
            }
            ClusterSource::Gpus(l) => {
                Cluster::from_gpu_list(l, "sweep.gpus", GpuCatalog::builtin())
            }
        }
    }

    /// A cluster with its nodes repeated `k` times, a one-GPU node of `add`
    /// appended (unless empty) and the network set to `net` Gbit/s. A `--gpus`
    /// list becomes the equivalent TOML first when it needs editing.
    pub(super) fn edited(
        &self,
        k: u32,
        add: &str,
        net: Option<f64>,
    ) -> Result<ClusterSource, SpecError> {
        if k == 1 && add.is_empty() && net.is_none() {
            return Ok(self.clone());
        }
        let (origin, mut doc): (String, toml::Table) = match self {
            ClusterSource::Toml { origin, text } => (
                origin.clone(),
                toml::from_str(text).map_err(|e| SpecError::parse(origin.clone(), e))?,
            ),
            ClusterSource::Gpus(list) => {
                let mut t = toml::Table::new();
                let gpus: Vec<toml::Value> = crate::lists::items(list, "sweep.clusters")?
                    .into_iter()
                    .map(|g| {
                        let mut e = toml::Table::new();
                        e.insert("type".into(), toml::Value::String(g.trim().to_string()));
                        toml::Value::Table(e)
                    })
                    .collect();
                let mut node = toml::Table::new();
                node.insert("name".into(), toml::Value::String("node0".into()));
                node.insert("gpus".into(), toml::Value::Array(gpus));
                t.insert(
                    "nodes".into(),
                    toml::Value::Array(vec![toml::Value::Table(node)]),
                );
                (format!("--gpus {list}"), t)
            }
        };
        let nodes = doc
            .get("nodes")
            .and_then(|n| n.as_array())
            .cloned()
            .ok_or_else(|| {
                SpecError::invalid(origin.clone(), "nodes", "expected [[nodes]] tables")
            })?;
        let mut all = Vec::with_capacity(nodes.len() * k as usize + 1);
        for copy in 0..k {
            for (i, n) in nodes.iter().enumerate() {
                let mut n = n.clone();
                if let Some(t) = n.as_table_mut() {
                    let name = t
                        .get("name")
                        .and_then(|v| v.as_str())
                        .map_or(format!("node{i}"), str::to_string);
                    let name = if k > 1 {
                        format!("{name}-{copy}")
                    } else {
                        name
                    };
                    t.insert("name".into(), toml::Value::String(name));
                }
                all.push(n);
            }
        }
        if !add.is_empty() {
            let mut e = toml::Table::new();
            e.insert("type".into(), toml::Value::String(add.to_string()));
            let mut node = toml::Table::new();
            node.insert("name".into(), toml::Value::String(format!("added-{add}")));
            node.insert(
                "gpus".into(),
                toml::Value::Array(vec![toml::Value::Table(e)]),
            );
            all.push(toml::Value::Table(node));
        }
        doc.insert("nodes".into(), toml::Value::Array(all));
        if let Some(bw) = net {
            let net = doc
                .entry("network")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let Some(t) = net.as_table_mut() {
                t.insert("bw_gbit_s".into(), toml::Value::Float(bw));
            }
        }
        let text = toml::to_string(&doc)
            .map_err(|e| SpecError::invalid(origin.clone(), "<root>", e.to_string()))?;
        Ok(ClusterSource::Toml { origin, text })
    }
}
