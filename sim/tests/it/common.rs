//! Fixtures shared by the `sim` integration tests: clusters, workloads,
//! cost models and plans built from the catalogs, and the reference
//! profiles from `../shared` (never part of the repository).

use sim::cluster::Cluster;
use sim::cost::{CostModel, CostOptions, Workload};
use sim::gpu::GpuCatalog;
use sim::model::ModelCatalog;
use sim::perfmodel::Roofline;
use sim::plan::Plan;
use sim::precision::NumFormat;
use sim::profile::{reference, ProfileSet};
use sim::strategy::Strategy;
use std::path::PathBuf;
use std::sync::OnceLock;

/// One PCIe node of the catalog GPUs in `list` (as `--gpus` takes them).
pub fn gpu_list(list: &str) -> Cluster {
    Cluster::from_gpu_list(list, "--gpus", GpuCatalog::builtin()).unwrap()
}

/// The cluster of a cluster file's `text`.
pub fn cluster_toml(text: &str) -> Cluster {
    Cluster::from_toml(text, "test.toml", GpuCatalog::builtin()).unwrap()
}

/// Catalog model `model` (at its own sequence length) in `dtype` on
/// `cluster`, `global_batch` samples per iteration.
pub fn workload(cluster: Cluster, model: &str, dtype: NumFormat, global_batch: u32) -> Workload {
    let model = ModelCatalog::builtin()
        .lookup(model, "test")
        .unwrap()
        .clone();
    Workload {
        cluster,
        seq_len: model.tokens_per_sample(model.seq_len),
        model,
        dtype,
        global_batch,
    }
}

/// The cost model of `w` from `profiles`, the uncalibrated roofline where
/// they hold nothing (stable numbers for simulator tests), memory curves
/// of `memory_cluster`.
pub fn build(w: Workload, profiles: &ProfileSet, memory_cluster: Option<&str>) -> CostModel {
    let options = CostOptions {
        memory_cluster: memory_cluster.map(str::to_string),
        ..CostOptions::default()
    };
    CostModel::build(w, profiles, &Roofline::default(), options).unwrap()
}

/// The cost model of the cluster `toml` training `model` in bf16 at `seq`
/// tokens per sample, global batch `batch`, on the calibrated performance
/// model (what 3D tests need: its tensor-parallel slices).
pub fn calibrated_bf16(toml: &str, model: &str, seq: u32, batch: u32) -> CostModel {
    let mut w = workload(cluster_toml(toml), model, NumFormat::Bf16, batch);
    w.seq_len = seq;
    CostModel::build(
        w,
        &ProfileSet::new(),
        &sim::perfmodel::Calibrated::builtin(),
        CostOptions::default(),
    )
    .unwrap()
}

/// Analytic cost model of `gpus` (one PCIe node).
pub fn costs(gpus: &str, model: &str, dtype: NumFormat, global_batch: u32) -> CostModel {
    build(
        workload(gpu_list(gpus), model, dtype, global_batch),
        &ProfileSet::new(),
        None,
    )
}

/// A plan of `batch` samples per GPU in `micro` micro-batches each (state
/// split by `fractions`, evenly without).
pub fn plan(batch: &[u32], micro: &[u32], fractions: Option<&[f64]>) -> Plan {
    Plan::from_lists(batch, micro, fractions, "test").unwrap()
}

/// `plan` under strategy `s`, each GPU holding an even share of its shard
/// group's state.
pub fn under(plan: &Plan, s: Strategy) -> Plan {
    let mut p = plan.clone().with_strategy(s);
    let group = s.groups(p.gpus.len()).group_size as f64;
    for gp in &mut p.gpus {
        gp.state_fraction = 1.0 / group;
    }
    p
}

/// `../shared/reference-profiles`, or `None` (with a printed reason) when it
/// is absent; under `CI=true` its absence fails the calling test.
pub fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference-profiles");
    if d.join("model_latencies.json").is_file() {
        return Some(d);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {} has no reference profiles", d.display());
    }
    eprintln!(
        "skipping: {} not found (reference profiles are not part of the repository)",
        d.display()
    );
    None
}

/// The reference latencies and memory, imported once per test binary;
/// `None` as [`shared_dir`] (each caller prints why it skips, or fails
/// under `CI=true`).
pub fn reference_profiles() -> Option<&'static ProfileSet> {
    static SET: OnceLock<ProfileSet> = OnceLock::new();
    let d = shared_dir()?;
    Some(SET.get_or_init(|| {
        let (g, m) = (GpuCatalog::builtin(), ModelCatalog::builtin());
        let lat = std::fs::read_to_string(d.join("model_latencies.json")).unwrap();
        let mem = std::fs::read_to_string(d.join("model_memory.json")).unwrap();
        let mut set = reference::import_latencies(&lat, "model_latencies.json", g, m).unwrap();
        set.merge(reference::import_memory(&mem, "model_memory.json", m).unwrap());
        set
    }))
}
