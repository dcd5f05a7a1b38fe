//! A study's sweep: its axes (the `[sweep]` table), their checks, and
//! its expansion into workloads, every combination of the axes in a
//! fixed order.

use super::cluster_source::{ClusterSource, ClusterText};
use crate::cluster::Cluster;
use crate::comm::CommAlgo;
use crate::cost::MemPolicy;
use crate::error::SpecError;
use crate::gpu::GpuCatalog;
use crate::model::ModelCatalog;
use crate::plan::shape::ShapePins;
use crate::planner;
use crate::precision::NumFormat;
use crate::profile::ProfileSet;
use crate::strategy::StrategySpec;
use serde::{Deserialize, Serialize};

/// The axes of a sweep; every combination is one workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Cluster files (relative to the experiments directory).
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Clusters as `--gpus` lists.
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Models (catalog names or aliases; none with `cases`).
    #[serde(default)]
    pub models: Vec<String>,
    /// Global batches, samples.
    #[serde(default)]
    pub global_batches: Vec<u32>,
    /// Samples per GPU instead (the global batch grows with the cluster).
    #[serde(default)]
    pub batch_per_gpu: Vec<u32>,
    /// Planners (default: every planner).
    #[serde(default)]
    pub planners: Vec<String>,
    /// Sequence lengths (default: each model's).
    #[serde(default)]
    pub seq_lens: Vec<u32>,
    /// Dtypes (default: fp16).
    #[serde(default)]
    pub dtypes: Vec<String>,
    /// Network bandwidths replacing the cluster's, Gbit/s (default: the cluster's).
    #[serde(default)]
    pub network_gbit_s: Vec<f64>,
    /// Copies of the cluster's nodes (default: 1).
    #[serde(default)]
    pub replicate: Vec<u32>,
    /// GPU types added as a one-GPU node each (`""`: none), for
    /// "which GPU should I add next?".
    #[serde(default)]
    pub add_gpu: Vec<String>,
    /// Strategy pins, each `axis=value` pairs as the strategy flags spell
    /// them (`"sharding=full checkpointing=selective"`; `""`: the
    /// planners choose), each a case of every workload.
    #[serde(default)]
    pub strategies: Vec<String>,
    /// Memory policies: `physical` or a fraction of each GPU's memory
    /// (`"0.75"`, the paper's rule), each a case (default: the spec's
    /// `mem_fraction`).
    #[serde(default)]
    pub mem_policies: Vec<String>,
    /// 3D shape pins, `name=value` pairs as `plan --tp/--pp/...` spell
    /// them (`"tp=2 pp=4 schedule=interleaved"`; `""`: the planners
    /// choose), each a case of every workload; the planners that search
    /// within the pins (`megatron`; `hetero-3d` for TP, PP and schedule)
    /// run a pinned case, the others' rows say why they did not.
    #[serde(default)]
    pub shapes: Vec<String>,
    /// Collective algorithms (`auto`, `ring`, `tree`, `hierarchical`, as
    /// `--comm-algo`), each a variant of every cluster (default: auto).
    #[serde(default)]
    pub comm_algos: Vec<String>,
    /// Measured collective tables, each entry the `--comm-profile` values
    /// of one variant separated by spaces (`"all-gather=nccl/ag.log
    /// nccl/rs.log"`, paths relative to the experiments directory; `""`:
    /// the analytic model), each a variant of every cluster.
    #[serde(default)]
    pub comm_profiles: Vec<String>,
    /// The tables of every `comm_profiles` entry, as the caller read them.
    #[serde(skip)]
    pub comm_sets: Vec<ProfileSet>,
    /// A list of cases instead of the model x sequence x dtype x batch x
    /// strategy x memory-policy product (a sampled design space): a CSV
    /// file with a header row, or JSONL (`.jsonl`), relative to the
    /// experiments directory, one workload per line on every cluster
    /// variant ([`Case`]'s fields).
    #[serde(default)]
    pub cases: Option<String>,
    /// The cases file's text, as the caller read it (`cases`).
    #[serde(skip)]
    pub cases_text: Option<String>,
    /// Record every run's timeline (for Gantt figures; slower).
    #[serde(default)]
    pub timeline: bool,
}

/// One case of a `cases` list: a workload's model and batch, and
/// optionally its sequence length, dtype, strategy pins and memory policy
/// (as the sweep's lists spell them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Model (catalog name or alias).
    pub model: String,
    /// Global batch, samples.
    pub global_batch: u32,
    /// Tokens per sample (empty: the model's).
    #[serde(default)]
    pub seq_len: Option<u32>,
    /// `fp16`, `bf16` or `fp32` (empty: fp16).
    #[serde(default)]
    pub dtype: Option<String>,
    /// Strategy pins, `axis=value` pairs (empty: the planners choose).
    #[serde(default)]
    pub strategy: Option<String>,
    /// `physical` or a fraction (empty: the spec's).
    #[serde(default)]
    pub mem_policy: Option<String>,
    /// 3D shape pins, `name=value` pairs (empty: the planners choose).
    #[serde(default)]
    pub shape: Option<String>,
}

/// Most cases one list may hold (a sampled design space, not a dump).
pub const MAX_CASES: usize = 100_000;

/// The cases of a `cases` file's `text` (`origin` its name: `.jsonl` is
/// one JSON object per line, anything else CSV with a header row), each
/// checked as the sweep's lists are; errors name the file and the line.
pub fn parse_cases(text: &str, origin: &str) -> Result<Vec<Case>, SpecError> {
    let line_err =
        |line: usize, msg: String| SpecError::invalid(origin, format!("line {line}"), msg);
    let mut cases: Vec<(usize, Case)> = Vec::new();
    if origin.ends_with(".jsonl") {
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let c: Case = serde_json::from_str(l).map_err(|e| line_err(i + 1, e.to_string()))?;
            cases.push((i + 1, c));
        }
    } else {
        let mut r = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        for (i, rec) in r.deserialize::<Case>().enumerate() {
            // Line i + 2: the header is line 1.
            let c = rec.map_err(|e| line_err(i + 2, e.to_string()))?;
            cases.push((i + 2, c));
        }
    }
    if cases.is_empty() || cases.len() > MAX_CASES {
        return Err(SpecError::invalid(
            origin,
            "cases",
            format!("expected 1..={MAX_CASES} cases, got {}", cases.len()),
        ));
    }
    for (line, c) in &cases {
        let at = format!("line {line}");
        ModelCatalog::builtin().lookup(&c.model, &format!("{origin}: {at}: model"))?;
        if c.global_batch == 0 || c.global_batch > crate::limits::MAX_GLOBAL_BATCH {
            return Err(line_err(
                *line,
                format!(
                    "global_batch: expected 1..={} samples, got {}",
                    crate::limits::MAX_GLOBAL_BATCH,
                    c.global_batch
                ),
            ));
        }
        if let Some(d) = c.dtype.as_deref().filter(|d| !d.is_empty()) {
            if NumFormat::parse(d).is_none() {
                return Err(line_err(
                    *line,
                    format!("dtype: expected fp16, bf16 or fp32, got `{d}`"),
                ));
            }
        }
        StrategySpec::parse_pins(c.strategy.as_deref().unwrap_or(""), origin, &at)?;
        ShapePins::parse(c.shape.as_deref().unwrap_or(""), origin, &at)?;
        if let Some(m) = c.mem_policy.as_deref().filter(|m| !m.is_empty()) {
            parse_mem_policy(m, origin, &at)?;
        }
    }
    Ok(cases.into_iter().map(|x| x.1).collect())
}

/// A study's memory-policy spelling (`physical`, or a fraction in (0, 1]).
pub(super) fn parse_mem_policy(
    text: &str,
    origin: &str,
    field: &str,
) -> Result<MemPolicy, SpecError> {
    let p = if text.trim().eq_ignore_ascii_case("physical") {
        MemPolicy::Physical
    } else {
        let f = text.trim().parse::<f64>().map_err(|_| {
            SpecError::invalid(
                origin,
                field,
                format!("expected `physical` or a fraction in (0, 1], got `{text}`"),
            )
        })?;
        MemPolicy::Fraction(f)
    };
    p.check(origin, field)?;
    Ok(p)
}

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
    /// Compute format.
    pub dtype: NumFormat,
    /// Network bandwidth override, Gbit/s.
    pub network_gbit_s: Option<f64>,
    /// Copies of the cluster's nodes.
    pub replicate: u32,
    /// Added GPU type (`""`: none).
    pub add_gpu: String,
    /// The strategy pins of this case (nothing pinned: the planners choose).
    pub strategy: StrategySpec,
    /// The memory policy of this case (`None`: the spec's).
    pub mem_policy: Option<MemPolicy>,
    /// The 3D shape pins of this case (nothing pinned: the planners choose).
    pub shape: ShapePins,
    /// The collective algorithm (`None`: auto).
    pub comm_algo: Option<CommAlgo>,
    /// The index of the measured tables in the sweep's `comm_profiles`
    /// (`None`: the analytic model).
    pub comm_profile: Option<usize>,
}

impl Sweep {
    /// Checks every list of the sweep, before any work (the first error
    /// found, in the order of the fields).
    pub(super) fn check(&self, origin: &str) -> Result<(), SpecError> {
        self.check_shape(origin)?;
        self.check_items(origin)
    }

    /// The sweep names clusters, models and batches (one kind of batch).
    fn check_shape(&self, origin: &str) -> Result<(), SpecError> {
        let bad = |field: &str, msg: String| Err(SpecError::invalid(origin, field, msg));
        let w = self;
        if w.clusters.is_empty() && w.gpus.is_empty() {
            return bad(
                "sweep.clusters",
                "the sweep names no cluster (clusters or gpus)".into(),
            );
        }
        if w.cases.is_some() {
            let product = [
                ("models", w.models.is_empty()),
                ("global_batches", w.global_batches.is_empty()),
                ("batch_per_gpu", w.batch_per_gpu.is_empty()),
                ("seq_lens", w.seq_lens.is_empty()),
                ("dtypes", w.dtypes.is_empty()),
                ("strategies", w.strategies.is_empty()),
                ("mem_policies", w.mem_policies.is_empty()),
                ("shapes", w.shapes.is_empty()),
            ];
            if let Some((name, _)) = product.iter().find(|x| !x.1) {
                return bad(
                    &format!("sweep.{name}"),
                    "`cases` lists whole workloads (model, batch, sequence, dtype, strategy, memory policy, shape): drop this list or the cases".into(),
                );
            }
            return Ok(());
        }
        if w.models.is_empty() {
            return bad("sweep.models", "the sweep names no model".into());
        }
        if w.global_batches.is_empty() == w.batch_per_gpu.is_empty() {
            return bad(
                "sweep.global_batches",
                "the sweep needs global batches or batch_per_gpu (one of the two)".into(),
            );
        }
        for (i, &b) in w.batch_per_gpu.iter().enumerate() {
            if b == 0 || b > 1 << 16 {
                return bad(
                    &format!("sweep.batch_per_gpu[{i}]"),
                    format!("expected 1..=65536 samples per GPU, got {b}"),
                );
            }
        }
        Ok(())
    }

    /// Every item of the sweep's lists is known and in range.
    fn check_items(&self, origin: &str) -> Result<(), SpecError> {
        let bad = |field: &str, msg: String| Err(SpecError::invalid(origin, field, msg));
        let w = self;
        for (i, m) in w.models.iter().enumerate() {
            ModelCatalog::builtin().lookup(m, &format!("{origin}: sweep.models[{i}]"))?;
        }
        for (i, &b) in w.global_batches.iter().enumerate() {
            if b == 0 || b > crate::limits::MAX_GLOBAL_BATCH {
                return bad(
                    &format!("sweep.global_batches[{i}]"),
                    format!(
                        "expected 1..={} samples, got {b}",
                        crate::limits::MAX_GLOBAL_BATCH
                    ),
                );
            }
        }
        for (i, p) in w.planners.iter().enumerate() {
            planner::registry::by_name(p, &format!("{origin}: sweep.planners[{i}]")).map_err(
                |e| SpecError::invalid(origin, format!("sweep.planners[{i}]"), e.to_string()),
            )?;
        }
        for (i, d) in w.dtypes.iter().enumerate() {
            if NumFormat::parse(d).is_none() {
                return bad(
                    &format!("sweep.dtypes[{i}]"),
                    format!("expected fp16, bf16 or fp32, got `{d}`"),
                );
            }
        }
        for (i, &x) in w.network_gbit_s.iter().enumerate() {
            crate::physical::check(
                origin,
                &format!("sweep.network_gbit_s[{i}]"),
                x,
                &crate::physical::NET_GBIT_S,
            )?;
        }
        for (i, &k) in w.replicate.iter().enumerate() {
            if k == 0 || k > 4096 {
                return bad(
                    &format!("sweep.replicate[{i}]"),
                    format!("expected 1..=4096 copies, got {k}"),
                );
            }
        }
        for (i, g) in w.add_gpu.iter().enumerate() {
            if !g.is_empty() {
                GpuCatalog::builtin().lookup(g, &format!("{origin}: sweep.add_gpu[{i}]"))?;
            }
        }
        for (i, t) in w.strategies.iter().enumerate() {
            StrategySpec::parse_pins(t, origin, &format!("sweep.strategies[{i}]"))?;
        }
        for (i, t) in w.mem_policies.iter().enumerate() {
            parse_mem_policy(t, origin, &format!("sweep.mem_policies[{i}]"))?;
        }
        for (i, t) in w.shapes.iter().enumerate() {
            ShapePins::parse(t, origin, &format!("sweep.shapes[{i}]"))?;
        }
        for (i, t) in w.comm_algos.iter().enumerate() {
            CommAlgo::parse_field(t, origin, &format!("sweep.comm_algos[{i}]"))?;
        }
        for (i, l) in w.gpus.iter().enumerate() {
            Cluster::from_gpu_list(
                l,
                &format!("{origin}: sweep.gpus[{i}]"),
                GpuCatalog::builtin(),
            )?;
        }
        Ok(())
    }

    /// The sweep's workloads in order: clusters (files, then lists) x
    /// replicate x added GPU x network x collective algorithm x measured
    /// tables x model x sequence length x dtype x global batch x strategy
    /// pins x shape pins x memory policy. `clusters` holds the text of
    /// every file the spec names.
    pub fn workloads(&self, clusters: &[ClusterText]) -> Result<Vec<Workload>, SpecError> {
        let w = self;
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
        let comms = comm_variants(w)?;
        let cases = cases_of(w)?;
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
                        let source = src.edited(replicate, add_gpu, network_gbit_s)?;
                        for &(comm_algo, comm_profile) in &comms {
                            let v = Variant {
                                source: source.clone(),
                                cluster: cluster.clone(),
                                replicate,
                                add_gpu: add_gpu.clone(),
                                network_gbit_s,
                                comm_algo,
                                comm_profile,
                            };
                            push_cases(&v, &cases, &mut out)?;
                        }
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
    /// Collective algorithm (`None`: auto).
    comm_algo: Option<CommAlgo>,
    /// Index of the measured tables in `comm_profiles` (`None`: analytic).
    comm_profile: Option<usize>,
}

/// A communication variant: the algorithm (`None`: auto) and the index
/// of the measured tables in `comm_profiles` (`None`: analytic).
type CommVariant = (Option<CommAlgo>, Option<usize>);

/// The sweep's communication variants, algorithms outermost: (algorithm,
/// index of the measured tables); one `(None, None)` when it sweeps
/// neither. Every `comm_profiles` entry must have been read.
fn comm_variants(w: &Sweep) -> Result<Vec<CommVariant>, SpecError> {
    if w.comm_sets.len() != w.comm_profiles.len() {
        return Err(SpecError::invalid(
            "experiment",
            "sweep.comm_profiles",
            format!(
                "{} entries but {} read: the caller reads each entry's tables",
                w.comm_profiles.len(),
                w.comm_sets.len()
            ),
        ));
    }
    let algos: Vec<Option<CommAlgo>> = if w.comm_algos.is_empty() {
        vec![None]
    } else {
        w.comm_algos
            .iter()
            .map(|t| CommAlgo::parse_field(t, "experiment", "sweep.comm_algos").map(Some))
            .collect::<Result<_, _>>()?
    };
    let tables: Vec<Option<usize>> = if w.comm_profiles.is_empty() {
        vec![None]
    } else {
        // An empty entry is the analytic model.
        (0..w.comm_profiles.len())
            .map(|i| (!w.comm_profiles[i].trim().is_empty()).then_some(i))
            .collect()
    };
    Ok(algos
        .iter()
        .flat_map(|&a| tables.iter().map(move |&t| (a, t)))
        .collect())
}

/// A global batch as the sweep gives it: fixed, or per GPU (times the
/// variant's GPUs, at most [`crate::limits::MAX_GLOBAL_BATCH`]).
#[derive(Debug, Clone, Copy)]
enum Batch {
    Global(u32),
    PerGpu(u32),
}

/// What a workload holds besides its cluster: one case of the cases list
/// or of the model x sequence x dtype x batch x strategy x memory-policy
/// product, parsed once per sweep.
#[derive(Debug, Clone)]
struct CaseOf {
    model: String,
    batch: Batch,
    seq_len: Option<u32>,
    dtype: NumFormat,
    strategy: StrategySpec,
    mem_policy: Option<MemPolicy>,
    shape: ShapePins,
}

/// The sweep's cases, in order: its `cases` list (read by the caller), or
/// the product of its lists (models outermost, memory policies innermost).
fn cases_of(w: &Sweep) -> Result<Vec<CaseOf>, SpecError> {
    if let Some(name) = &w.cases {
        let text = w.cases_text.as_deref().ok_or_else(|| {
            SpecError::invalid(
                "experiment",
                "sweep.cases",
                format!("cases file `{name}` was not read"),
            )
        })?;
        return parse_cases(text, name)?
            .into_iter()
            .map(|c| {
                let policy = c.mem_policy.as_deref().filter(|m| !m.is_empty());
                Ok(CaseOf {
                    batch: Batch::Global(c.global_batch),
                    seq_len: c.seq_len,
                    dtype: c
                        .dtype
                        .as_deref()
                        .and_then(NumFormat::parse)
                        .unwrap_or(NumFormat::Fp16),
                    strategy: StrategySpec::parse_pins(
                        c.strategy.as_deref().unwrap_or(""),
                        name,
                        "strategy",
                    )?,
                    mem_policy: policy
                        .map(|m| parse_mem_policy(m, name, "mem_policy"))
                        .transpose()?,
                    shape: ShapePins::parse(c.shape.as_deref().unwrap_or(""), name, "shape")?,
                    model: c.model,
                })
            })
            .collect();
    }
    let batches: Vec<Batch> = if w.batch_per_gpu.is_empty() {
        w.global_batches.iter().map(|&b| Batch::Global(b)).collect()
    } else {
        w.batch_per_gpu.iter().map(|&b| Batch::PerGpu(b)).collect()
    };
    let seqs: Vec<Option<u32>> = if w.seq_lens.is_empty() {
        vec![None]
    } else {
        w.seq_lens.iter().map(|&s| Some(s)).collect()
    };
    let dtypes: Vec<NumFormat> = if w.dtypes.is_empty() {
        vec![NumFormat::Fp16]
    } else {
        w.dtypes.iter().filter_map(|d| d.parse().ok()).collect()
    };
    let strategies: Vec<StrategySpec> = if w.strategies.is_empty() {
        vec![StrategySpec::NONE]
    } else {
        w.strategies
            .iter()
            .map(|t| StrategySpec::parse_pins(t, "experiment", "sweep.strategies"))
            .collect::<Result<_, _>>()?
    };
    let policies: Vec<Option<MemPolicy>> = if w.mem_policies.is_empty() {
        vec![None]
    } else {
        w.mem_policies
            .iter()
            .map(|t| parse_mem_policy(t, "experiment", "sweep.mem_policies").map(Some))
            .collect::<Result<_, _>>()?
    };
    let shapes: Vec<ShapePins> = if w.shapes.is_empty() {
        vec![ShapePins::default()]
    } else {
        w.shapes
            .iter()
            .map(|t| ShapePins::parse(t, "experiment", "sweep.shapes"))
            .collect::<Result<_, _>>()?
    };
    let mut out = Vec::new();
    for m in &w.models {
        for &seq_len in &seqs {
            for &dtype in &dtypes {
                for &batch in &batches {
                    for &strategy in &strategies {
                        for shape in &shapes {
                            for &mem_policy in &policies {
                                out.push(CaseOf {
                                    model: m.clone(),
                                    batch,
                                    seq_len,
                                    dtype,
                                    strategy,
                                    mem_policy,
                                    shape: shape.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Appends to `out` the workloads on cluster variant `v`: every case,
/// indexed in order.
fn push_cases(v: &Variant, cases: &[CaseOf], out: &mut Vec<Workload>) -> Result<(), SpecError> {
    let gpus = v.source.build()?.len();
    for c in cases {
        let global_batch = match c.batch {
            Batch::Global(b) => b,
            Batch::PerGpu(b) => {
                (b as u64 * gpus as u64).min(crate::limits::MAX_GLOBAL_BATCH as u64) as u32
            }
        };
        out.push(Workload {
            index: out.len(),
            cluster: v.cluster.clone(),
            cluster_source: v.source.clone(),
            model: c.model.clone(),
            global_batch,
            seq_len: c.seq_len,
            dtype: c.dtype,
            network_gbit_s: v.network_gbit_s,
            replicate: v.replicate,
            add_gpu: v.add_gpu.clone(),
            strategy: c.strategy,
            mem_policy: c.mem_policy,
            shape: c.shape.clone(),
            comm_algo: v.comm_algo,
            comm_profile: v.comm_profile,
        });
    }
    Ok(())
}

/// Builds a workload's cluster.
pub fn cluster_of(w: &Workload) -> Result<Cluster, SpecError> {
    w.cluster_source.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWEEP: &str = r#"
gpus = ["a100-80gb,l4"]
models = ["gpt-1.3b", "llama2-7b"]
global_batches = [8, 16]
replicate = [1, 3]
add_gpu = ["", "t4"]
network_gbit_s = [10, 100]
"#;

    fn sweep(text: &str) -> Result<Sweep, SpecError> {
        let s: Sweep = toml::from_str(text).unwrap();
        s.check("t.toml")?;
        Ok(s)
    }

    #[test]
    fn the_sweep_expands_in_order_with_its_variants() {
        let w = sweep(SWEEP).unwrap().workloads(&[]).unwrap();
        assert_eq!(w.len(), 2 * 2 * 2 * 2 * 2);
        assert!(w.iter().enumerate().all(|(i, x)| x.index == i));
        // Batches vary fastest, then models; the cluster variant slowest.
        assert_eq!((w[0].global_batch, w[1].global_batch), (8, 16));
        assert_eq!(w[2].model, "llama2-7b");
        let sizes: Vec<usize> = w.iter().map(|x| cluster_of(x).unwrap().len()).collect();
        assert_eq!(sizes[0], 2);
        let plus_t4 = w.iter().position(|x| x.add_gpu == "t4").unwrap();
        assert_eq!(sizes[plus_t4], 3);
        assert_eq!(w[plus_t4].cluster, "a100-80gb,l4 +t4");
        let tripled = w
            .iter()
            .position(|x| x.replicate == 3 && x.add_gpu.is_empty())
            .unwrap();
        assert_eq!(sizes[tripled], 6);
        assert_eq!(w[tripled].cluster, "a100-80gb,l4 x3");
        let c = cluster_of(&w[tripled]).unwrap();
        assert_eq!(c.nodes.len(), 3, "each copy of the node is a node");
    }

    #[test]
    fn batch_per_gpu_grows_with_the_cluster() {
        let text = SWEEP.replace("global_batches = [8, 16]", "batch_per_gpu = [4]");
        for w in sweep(&text).unwrap().workloads(&[]).unwrap() {
            assert_eq!(w.global_batch as usize, 4 * cluster_of(&w).unwrap().len());
        }
        let both = SWEEP.replace(
            "global_batches = [8, 16]",
            "global_batches = [8]\nbatch_per_gpu = [4]",
        );
        let e = sweep(&both).unwrap_err().to_string();
        assert!(e.contains("sweep.global_batches"), "{e}");
    }

    #[test]
    fn a_cluster_file_the_caller_did_not_read_is_an_error() {
        let text = SWEEP.replace("gpus = [\"a100-80gb,l4\"]", "clusters = [\"c.toml\"]");
        let e = sweep(&text)
            .unwrap()
            .workloads(&[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cluster file `c.toml` was not read"), "{e}");
    }

    #[test]
    fn cases_and_lists_carry_shape_pins_and_communication_variants() {
        let text = "model,global_batch,shape\ngpt-1.3b,16,tp=2 pp=2\ngpt-1.3b,16,\n";
        let mut s = sweep(
            "gpus = [\"a100-80gb,l4\"]\ncases = \"c.csv\"\ncomm_algos = [\"auto\", \"ring\"]",
        )
        .unwrap();
        s.cases_text = Some(text.into());
        let w = s.workloads(&[]).unwrap();
        assert_eq!(w.len(), 2 * 2, "two algorithms x two cases");
        assert_eq!(w[0].shape.text(), "tp=2 pp=2");
        assert!(w[1].shape.is_empty());
        assert_eq!(
            (w[0].comm_algo, w[2].comm_algo),
            (Some(CommAlgo::Auto), Some(CommAlgo::Ring))
        );
        let e = parse_cases("model,global_batch,shape\ngpt-1.3b,16,tp=two\n", "c.csv")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("c.csv") && e.contains("line 2") && e.contains("tp"),
            "{e}"
        );
        // Tables named but not read by the caller: an error, not analytic rows.
        let t = sweep("gpus = [\"l4\"]\nmodels = [\"gpt-1.3b\"]\nglobal_batches = [8]\ncomm_profiles = [\"\", \"ag.log\"]").unwrap();
        let e = t.workloads(&[]).unwrap_err().to_string();
        assert!(e.contains("sweep.comm_profiles"), "{e}");
        let shapes = sweep("gpus = [\"l4\"]\nmodels = [\"gpt-1.3b\"]\nglobal_batches = [8]\nshapes = [\"\", \"pp=2\"]\ncases = \"c.csv\"");
        assert!(shapes.unwrap_err().to_string().contains("sweep.models"));
    }
}
