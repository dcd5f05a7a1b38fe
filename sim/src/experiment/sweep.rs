//! A sweep's expansion into workloads: every combination of its axes, in
//! a fixed order, each cluster variant (replicated nodes, an added GPU,
//! another network) as the cluster text it builds from.

use super::spec::{ExperimentSpec, Sweep};
use crate::cluster::Cluster;
use crate::dtype::Dtype;
use crate::error::SpecError;
use crate::gpu::GpuCatalog;

/// One workload of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Index among the sweep's workloads.
    pub index: usize,
    /// The cluster's label (file stem or `--gpus` list) and variant.
    pub cluster: String,
    /// Cluster text (TOML) or `--gpus` list, after the variant's edits.
    pub cluster_source: ClusterSource,
    /// Model as named in the spec.
    pub model: String,
    /// Global batch.
    pub global_batch: u32,
    /// Sequence length (`None`: the model's).
    pub seq_len: Option<u32>,
    /// Dtype.
    pub dtype: Dtype,
    /// Network bandwidth override, Gbit/s.
    pub network_gbit_s: Option<f64>,
    /// Copies of the cluster's nodes.
    pub replicate: u32,
    /// Added GPU type (`""`: none).
    pub add_gpu: String,
}

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

impl ExperimentSpec {
    /// The sweep's workloads in order: clusters (files, then lists) x
    /// replicate x added GPU x network x model x sequence length x dtype x
    /// global batch. `clusters` holds the text of every file the spec names.
    pub fn workloads(&self, clusters: &[ClusterText]) -> Result<Vec<Workload>, SpecError> {
        let w = &self.sweep;
        let copies = if w.replicate.is_empty() {
            vec![1]
        } else {
            w.replicate.clone()
        };
        let adds: Vec<String> = if w.add_gpu.is_empty() {
            vec![String::new()]
        } else {
            w.add_gpu.clone()
        };
        let nets: Vec<Option<f64>> = if w.network_gbit_s.is_empty() {
            vec![None]
        } else {
            w.network_gbit_s.iter().map(|&x| Some(x)).collect()
        };
        let mut out = Vec::new();
        for (label, src) in cluster_bases(w, clusters)? {
            for &replicate in &copies {
                for add_gpu in &adds {
                    for &network_gbit_s in &nets {
                        let mut cluster = label.clone();
                        if replicate > 1 {
                            cluster.push_str(&format!(" x{replicate}"));
                        }
                        if !add_gpu.is_empty() {
                            cluster.push_str(&format!(" +{add_gpu}"));
                        }
                        let v = Variant {
                            source: edit_cluster(&src, replicate, add_gpu, network_gbit_s)?,
                            cluster,
                            replicate,
                            add_gpu: add_gpu.clone(),
                            network_gbit_s,
                        };
                        push_cases(w, &v, &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The sweep's clusters before their variants: (label, source), files
/// first (labelled by their stem), then `--gpus` lists.
fn cluster_bases(
    w: &Sweep,
    clusters: &[ClusterText],
) -> Result<Vec<(String, ClusterSource)>, SpecError> {
    let mut bases: Vec<(String, ClusterSource)> = Vec::new();
    for name in &w.clusters {
        let c = clusters.iter().find(|c| &c.name == name).ok_or_else(|| {
            SpecError::invalid(
                "experiment",
                "sweep.clusters",
                format!("cluster file `{name}` was not read"),
            )
        })?;
        let stem = name
            .rsplit('/')
            .next()
            .unwrap_or(name)
            .trim_end_matches(".toml");
        bases.push((
            stem.to_string(),
            ClusterSource::Toml {
                origin: name.clone(),
                text: c.text.clone(),
            },
        ));
    }
    for l in &w.gpus {
        bases.push((l.clone(), ClusterSource::Gpus(l.clone())));
    }
    Ok(bases)
}

/// One cluster of a sweep as run: a base cluster with its edits.
struct Variant {
    /// Label (`paper-4gpu x2 +t4`).
    cluster: String,
    /// The cluster, edits applied.
    source: ClusterSource,
    /// Copies of the base cluster's nodes.
    replicate: u32,
    /// Added GPU type (`""`: none).
    add_gpu: String,
    /// Network bandwidth override, Gbit/s.
    network_gbit_s: Option<f64>,
}

/// Appends to `out` the workloads on cluster variant `v`: model x
/// sequence length x dtype x global batch, indexed in order.
fn push_cases(w: &Sweep, v: &Variant, out: &mut Vec<Workload>) -> Result<(), SpecError> {
    let gpus = match &v.source {
        ClusterSource::Toml { origin, text } => {
            Cluster::from_toml(text, origin, GpuCatalog::builtin())?.len()
        }
        ClusterSource::Gpus(l) => Cluster::from_gpu_list(l, "--gpus", GpuCatalog::builtin())?.len(),
    };
    let batches: Vec<u32> = if w.batch_per_gpu.is_empty() {
        w.global_batches.clone()
    } else {
        w.batch_per_gpu
            .iter()
            .map(|&b| (b as u64 * gpus as u64).min(crate::limits::MAX_GLOBAL_BATCH as u64) as u32)
            .collect()
    };
    let seqs: Vec<Option<u32>> = if w.seq_lens.is_empty() {
        vec![None]
    } else {
        w.seq_lens.iter().map(|&s| Some(s)).collect()
    };
    let dtypes: Vec<Dtype> = if w.dtypes.is_empty() {
        vec![Dtype::Fp16]
    } else {
        w.dtypes.iter().filter_map(|d| Dtype::parse(d)).collect()
    };
    for m in &w.models {
        for &seq_len in &seqs {
            for &dtype in &dtypes {
                for &global_batch in &batches {
                    out.push(Workload {
                        index: out.len(),
                        cluster: v.cluster.clone(),
                        cluster_source: v.source.clone(),
                        model: m.clone(),
                        global_batch,
                        seq_len,
                        dtype,
                        network_gbit_s: v.network_gbit_s,
                        replicate: v.replicate,
                        add_gpu: v.add_gpu.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// A cluster with its nodes repeated `k` times, a one-GPU node of `add`
/// appended (unless empty) and the network set to `net` Gbit/s. A `--gpus`
/// list becomes the equivalent TOML first when it needs editing.
fn edit_cluster(
    src: &ClusterSource,
    k: u32,
    add: &str,
    net: Option<f64>,
) -> Result<ClusterSource, SpecError> {
    if k == 1 && add.is_empty() && net.is_none() {
        return Ok(src.clone());
    }
    let (origin, mut doc): (String, toml::Table) = match src {
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
        .ok_or_else(|| SpecError::invalid(origin.clone(), "nodes", "expected [[nodes]] tables"))?;
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

/// Builds a workload's cluster.
pub fn cluster_of(w: &Workload) -> Result<Cluster, SpecError> {
    match &w.cluster_source {
        ClusterSource::Toml { origin, text } => {
            Cluster::from_toml(text, origin, GpuCatalog::builtin())
        }
        ClusterSource::Gpus(l) => Cluster::from_gpu_list(l, "--gpus", GpuCatalog::builtin()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
name = "t"
title = "t"
profiles = "calibrated"
[sweep]
gpus = ["a100-80gb,l4"]
models = ["gpt-1.3b", "llama2-7b"]
global_batches = [8, 16]
replicate = [1, 3]
add_gpu = ["", "t4"]
network_gbit_s = [10, 100]
"#;

    #[test]
    fn the_sweep_expands_in_order_with_its_variants() {
        let s = ExperimentSpec::from_toml(SPEC, "t.toml").unwrap();
        let w = s.workloads(&[]).unwrap();
        assert_eq!(w.len(), 2 * 2 * 2 * 2 * 2);
        assert!(w.iter().enumerate().all(|(i, x)| x.index == i));
        // Batches vary fastest, then models; the cluster variant slowest.
        assert_eq!((w[0].global_batch, w[1].global_batch), (8, 16));
        assert_eq!(w[2].model, "llama2-7b");
        let sizes: Vec<usize> = w.iter().map(|x| cluster_of(x).unwrap().len()).collect();
        assert_eq!(sizes[0], 2);
        let plus_t4 = w.iter().position(|x| x.add_gpu == "t4").unwrap();
        assert_eq!(sizes[plus_t4], 3);
        let tripled = w
            .iter()
            .position(|x| x.replicate == 3 && x.add_gpu.is_empty())
            .unwrap();
        assert_eq!(sizes[tripled], 6);
        let c = cluster_of(&w[tripled]).unwrap();
        assert_eq!(c.nodes.len(), 3, "each copy of the node is a node");
    }

    #[test]
    fn batch_per_gpu_grows_with_the_cluster() {
        let text = SPEC.replace("global_batches = [8, 16]", "batch_per_gpu = [4]");
        let s = ExperimentSpec::from_toml(&text, "t.toml").unwrap();
        for w in s.workloads(&[]).unwrap() {
            assert_eq!(w.global_batch as usize, 4 * cluster_of(&w).unwrap().len());
        }
        let both = SPEC.replace(
            "global_batches = [8, 16]",
            "global_batches = [8]\nbatch_per_gpu = [4]",
        );
        assert!(ExperimentSpec::from_toml(&both, "t.toml").is_err());
    }
}
