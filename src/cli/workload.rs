//! Workload flags shared by `simulate`, `plan` and `compare`, and their
//! resolution into a validated [`sim::cost::CostModel`].

use crate::cli::UserError;
use crate::load;
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::cluster::Cluster;
use sim::cost::{CostModel, CostOptions, Workload};
use sim::dtype::Dtype;
use sim::gpu::GpuCatalog;
use sim::model::ModelCatalog;
use sim::profile::ProfileSet;
use std::path::PathBuf;

/// Flags that describe what is trained where.
#[derive(Debug, Clone, ClapArgs)]
pub struct WorkloadArgs {
    /// GPUs of a one-node PCIe cluster, in rank order (e.g. `l4,l4,a6000,p40`).
    #[arg(long, conflicts_with = "cluster")]
    pub gpus: Option<String>,
    /// Cluster spec (TOML); see experiments/clusters/.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Model name or alias (e.g. `gpt-2.7b`, `deepspeedgpt_2.7b`, `llama2-13b`).
    #[arg(long)]
    pub model: String,
    /// Global batch (samples per iteration).
    #[arg(long)]
    pub global_batch: u32,
    /// Tokens per sample (default: the model's; ViT ignores it).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Precision: fp16 | bf16 | fp32 (fp16/bf16 = mixed precision).
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    /// Profile file or directory (reference JSON or cephalo-profile/1); repeatable.
    #[arg(long)]
    pub profiles: Vec<PathBuf>,
    /// Calibration file (`cephalo calibrate --out`) for GPUs and models
    /// without a profile, instead of the shipped `profiles/calibration.json`.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Memory cluster of the reference `model_memory.json` to take non-state memory from.
    #[arg(long)]
    pub memory_cluster: Option<String>,
    /// Fraction of each GPU's memory a plan may use.
    #[arg(long, default_value_t = 0.75)]
    pub mem_fraction: f64,
    /// Fixed framework overhead per GPU, GiB.
    #[arg(long, default_value_t = 2.0)]
    pub overhead_gib: f64,
}

/// A resolved workload: costs plus what the user should be told.
#[derive(Debug)]
pub struct Resolved {
    /// The cost model.
    pub costs: CostModel,
    /// All loaded profiles (planners in compat mode read them directly).
    pub profiles: ProfileSet,
    /// Warnings from loading and resolving.
    pub warnings: Vec<String>,
}

impl WorkloadArgs {
    /// Validates the flags, loads the cluster and profiles and builds the cost model.
    pub fn resolve(&self) -> Result<Resolved> {
        let gpus = GpuCatalog::builtin();
        let models = ModelCatalog::builtin();
        let cluster = match (&self.gpus, &self.cluster) {
            (Some(list), None) => Cluster::from_gpu_list(list, "--gpus", gpus)?,
            (None, Some(path)) => {
                Cluster::from_toml(&load::read_text(path)?, &path.display().to_string(), gpus)?
            }
            _ => {
                return Err(
                    UserError("give the GPUs with --gpus LIST or --cluster FILE".into()).into(),
                )
            }
        };
        let model = models.lookup(&self.model, "--model")?.clone();
        let dtype = Dtype::parse(&self.dtype).ok_or_else(|| {
            UserError(format!(
                "--dtype: expected fp16, bf16 or fp32, got `{}`",
                self.dtype
            ))
        })?;
        let seq_len = match self.seq_len {
            Some(0) => {
                return Err(UserError("--seq-len: expected a sequence length >= 1".into()).into())
            }
            Some(s) => model.tokens_per_sample(s),
            None => model.tokens_per_sample(model.seq_len),
        };
        if self.global_batch == 0 {
            return Err(UserError("--global-batch: expected a global batch >= 1".into()).into());
        }
        let mut profiles = ProfileSet::new();
        for p in &self.profiles {
            profiles.merge(load::load_profiles(p)?);
        }
        if self.memory_cluster.is_some() && profiles.memory.is_empty() {
            return Err(UserError("--memory-cluster: no memory profiles loaded (pass --profiles with model_memory.json)".into()).into());
        }
        let options = CostOptions {
            mem_fraction: self.mem_fraction,
            overhead_gib: self.overhead_gib,
            memory_cluster: self.memory_cluster.clone(),
            ..CostOptions::default()
        };
        let predictor = load::calibration(self.calibration.as_deref())?;
        let workload = Workload {
            cluster,
            model,
            seq_len,
            dtype,
            global_batch: self.global_batch,
        };
        let costs = CostModel::build(workload, &profiles, &predictor, options)?;
        let mut warnings = profiles.warnings.clone();
        warnings.extend(costs.warnings.iter().cloned());
        Ok(Resolved {
            costs,
            profiles,
            warnings,
        })
    }
}
