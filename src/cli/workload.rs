//! Workload and strategy flags shared by `simulate`, `plan` and `compare`,
//! and their resolution (files read here, everything else by
//! [`sim::session`]) into a validated [`sim::cost::CostModel`] and a
//! [`sim::strategy::StrategySpec`].

use crate::error::UserError;
use crate::load;
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::choice;
use sim::cost::{CostModel, CostOptions, MemPolicy};
use sim::error::SpecError;
use sim::perfmodel::Calibrated;
use sim::precision::NumFormat;
use sim::profile::ProfileSet;
use sim::session::{build_workload, WorkloadSpec};
use sim::strategy::{
    Accumulation, Attention, Checkpointing, Offload, Sharding, Stack, StrategySpec,
};
use std::path::PathBuf;

/// The training strategy flags (every one optional; defaults in
/// `sim::strategy`). Names follow PyTorch FSDP and DeepSpeed.
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct StrategyArgs {
    // The values' help comes from their table in `sim::strategy`.
    #[arg(long, help_heading = "Strategy", help = choice::help("Sharding", Sharding::CHOICES))]
    pub sharding: Option<String>,
    /// GPUs per shard group with --sharding hybrid (default: the GPUs of one node).
    #[arg(long, help_heading = "Strategy")]
    pub shard_group: Option<u32>,
    #[arg(long, help_heading = "Strategy", help = choice::help("Gradient accumulation", Accumulation::CHOICES))]
    pub accumulation: Option<String>,
    #[arg(long, help_heading = "Strategy", help = choice::help("Activation checkpointing", Checkpointing::CHOICES))]
    pub checkpointing: Option<String>,
    #[arg(long, help_heading = "Strategy", help = choice::help("Offload to host memory", Offload::CHOICES))]
    pub offload: Option<String>,
    /// Dtype all-gathers carry and gathered parameters occupy: fp32 | bf16 | fp16.
    #[arg(long, help_heading = "Strategy")]
    pub param_dtype: Option<String>,
    /// Dtype of gradient reductions: fp32 | bf16 | fp16.
    #[arg(long, help_heading = "Strategy")]
    pub reduce_dtype: Option<String>,
    #[arg(long, help_heading = "Strategy", help = format!("{} (default: what the profile measured)", choice::help("Attention kernel", Attention::CHOICES)))]
    pub attention: Option<String>,
    #[arg(long, help_heading = "Strategy", help = format!("{} (default: megatron for TP / PP plans with replicated or ZeRO-1 stages, pytorch otherwise)", choice::help("Training stack", Stack::CHOICES)))]
    pub stack: Option<String>,
    /// torch.compile on every block (PyTorch stack): fused memory-bound ops, fewer saved intermediates.
    #[arg(long, help_heading = "Strategy")]
    pub compile: bool,
}

/// The `--batch`, `--microbatches` and `--state-fractions` lists of a
/// plan given on the command line, through the one list parser
/// ([`sim::lists`]): batches and counts are whole numbers >= 0, fractions
/// in [0, 1]; without `--microbatches` every rank with samples runs one.
pub type PlanLists = (Vec<u32>, Vec<u32>, Option<Vec<f64>>);

/// Parses the plan lists (see [`PlanLists`]); errors name the flag and item.
pub fn plan_lists(
    batch: &str,
    microbatches: Option<&str>,
    fractions: Option<&str>,
) -> Result<PlanLists, SpecError> {
    let batch = sim::lists::counts(batch, "--batch", 0)?;
    let micro = match microbatches {
        Some(m) => sim::lists::counts(m, "--microbatches", 0)?,
        None => batch.iter().map(|&b| u32::from(b > 0)).collect(),
    };
    let fractions = fractions
        .map(|f| sim::lists::numbers(f, "--state-fractions", 0.0, 1.0, "a fraction of the state"))
        .transpose()?;
    Ok((batch, micro, fractions))
}

fn bad(flag: &str, msg: String) -> SpecError {
    SpecError::invalid(flag, flag.trim_start_matches('-').replace('-', "_"), msg)
}

impl StrategyArgs {
    /// The pinned axes; a malformed value is an error naming its flag
    /// (parsed by [`StrategySpec::set`], as studies' `strategies` are).
    pub fn spec(&self) -> Result<StrategySpec, SpecError> {
        let mut spec = StrategySpec::NONE;
        let group = self.shard_group.map(|g| g.to_string());
        let compile = self.compile.then(|| "on".to_string());
        let flags: [(&str, &Option<String>); 10] = [
            ("sharding", &self.sharding),
            ("shard_group", &group),
            ("accumulation", &self.accumulation),
            ("checkpointing", &self.checkpointing),
            ("offload", &self.offload),
            ("param_dtype", &self.param_dtype),
            ("reduce_dtype", &self.reduce_dtype),
            ("attention", &self.attention),
            ("stack", &self.stack),
            ("compile", &compile),
        ];
        for (axis, value) in flags {
            if let Some(v) = value {
                let flag = format!("--{}", axis.replace('_', "-"));
                spec.set(axis, v, &flag, axis)?;
            }
        }
        Ok(spec)
    }
}

/// Where the GPUs are: a list, a cluster file, or identical nodes; then
/// what-if edits to it (the network, added GPUs).
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct ClusterArgs {
    /// GPUs of a one-node PCIe cluster, in rank order (e.g. `l4,l4,a6000,p40`).
    #[arg(long, conflicts_with_all = ["cluster", "nodes"], help_heading = "Cluster")]
    pub gpus: Option<String>,
    /// Cluster spec (TOML); see experiments/clusters/.
    #[arg(long, conflicts_with = "nodes", help_heading = "Cluster")]
    pub cluster: Option<PathBuf>,
    /// Identical nodes, with `--gpus-per-node` and `--gpu` (no file needed).
    #[arg(long, requires_all = ["gpus_per_node", "gpu"], help_heading = "Cluster")]
    pub nodes: Option<u32>,
    /// GPUs per node with `--nodes`.
    #[arg(long, requires = "nodes", help_heading = "Cluster")]
    pub gpus_per_node: Option<u32>,
    /// GPU type of every node with `--nodes` (catalog name or alias).
    #[arg(long, requires = "nodes", help_heading = "Cluster")]
    pub gpu: Option<String>,
    /// Link inside each node with `--nodes`: nvswitch | nvlink-bridge |
    /// nvlink | pcie3 | pcie4 | pcie5 (default: nvswitch where the GPU has
    /// switched NVLink, as SXM servers do; else PCIe).
    #[arg(long, requires = "nodes", help_heading = "Cluster")]
    pub intra_link: Option<String>,
    /// Network per node, Gbit/s, replacing the cluster's (one link of this
    /// rate per node, as a file's `[network] bw_gbit_s`).
    #[arg(long, help_heading = "Cluster", allow_hyphen_values = true)]
    pub network_gbit_s: Option<f64>,
    /// Adds a node of GPUs after the cluster's: `TYPE` or `TYPE:COUNT`
    /// (PCIe inside, the cluster's network); repeatable.
    #[arg(long, help_heading = "Cluster")]
    pub add_gpu: Vec<String>,
}

impl ClusterArgs {
    /// The cluster these flags describe, checked (errors name the flag or
    /// the file's field).
    pub fn load(&self) -> Result<sim::cluster::Cluster> {
        let (file, origin) = self.file()?;
        Ok(sim::cluster::Cluster::from_file(
            &file,
            &origin,
            load::gpus(),
        )?)
    }

    /// The cluster file these flags describe (what-if edits applied, not
    /// yet checked) and where it came from, for errors.
    pub fn file(&self) -> Result<(sim::cluster::ClusterFile, String)> {
        use sim::cluster::ClusterFile;
        let catalog = load::gpus();
        let (mut file, mut origin) = match (&self.gpus, &self.cluster, self.nodes) {
            (Some(list), None, None) => {
                let names = sim::lists::items(list, "--gpus")?;
                for (i, n) in names.iter().enumerate() {
                    catalog.lookup(n, &format!("--gpus (entry {})", i + 1))?;
                }
                (ClusterFile::gpu_list(&names), "--gpus".to_string())
            }
            (None, Some(path), None) => {
                let origin = path.display().to_string();
                (ClusterFile::parse(&load::read_text(path)?, &origin)?, origin)
            }
            (None, None, Some(nodes)) => {
                let per = self.gpus_per_node.unwrap_or(0);
                if nodes == 0 || per == 0 {
                    return Err(UserError(format!(
                        "--nodes / --gpus-per-node: expected at least 1 node of at least 1 GPU, got {nodes} x {per}"
                    ))
                    .into());
                }
                let gpu = catalog.lookup(self.gpu.as_deref().unwrap_or_default(), "--gpu")?;
                (
                    ClusterFile::homogeneous(nodes, per, gpu, self.intra_link.as_deref()),
                    "--nodes / --gpus-per-node / --gpu / --intra-link".to_string(),
                )
            }
            _ => {
                return Err(UserError(
                    "give the GPUs with --gpus LIST, --cluster FILE or --nodes N --gpus-per-node G --gpu TYPE"
                        .into(),
                )
                .into())
            }
        };
        if let Some(bw) = self.network_gbit_s {
            if !(bw.is_finite() && bw > 0.0) {
                return Err(UserError(format!(
                    "--network-gbit-s: expected a positive bandwidth in Gbit/s, got {bw}"
                ))
                .into());
            }
            file.set_network_gbit_s(bw);
            origin.push_str(" with --network-gbit-s");
        }
        for spec in &self.add_gpu {
            let (name, count) = match spec.split_once(':') {
                Some((n, c)) => {
                    let count = c.trim().parse::<u32>().ok().filter(|&c| c >= 1).ok_or_else(|| {
                        UserError(format!(
                            "--add-gpu {spec}: expected TYPE or TYPE:COUNT with a count >= 1, got `{c}`"
                        ))
                    })?;
                    (n.trim(), count)
                }
                None => (spec.trim(), 1),
            };
            let gpu = catalog.lookup(name, &format!("--add-gpu {spec}"))?;
            file.add_node(&gpu.name, count);
        }
        if !self.add_gpu.is_empty() {
            origin.push_str(" with --add-gpu");
        }
        Ok((file, origin))
    }
}

/// Flags that describe what is trained where.
#[derive(Debug, Clone, ClapArgs)]
pub struct WorkloadArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
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
    /// Let a plan use only this fraction of each GPU's memory (the Cephalo
    /// paper's rule, 0.75 in its experiments; a flat 2 GiB framework
    /// allowance). Default: the physical limit, what fits the device as
    /// PyTorch uses it (CUDA context, NCCL buffers, allocator
    /// fragmentation, a 1% margin); with `--compat` (`--planner
    /// cephalo-compat`), the reference optimizer's 0.75.
    #[arg(long)]
    pub mem_fraction: Option<f64>,
    /// Memory outside the allocator per GPU (CUDA context, NCCL buffers),
    /// GiB. Default: 0.75 GiB of context plus 0.45 GiB per NCCL
    /// communicator (two on a multi-GPU job); 2 with --mem-fraction.
    #[arg(long)]
    pub overhead_gib: Option<f64>,
    /// Measured routing imbalance of a mixture-of-experts run: the routed
    /// token copies the busiest expert-parallel rank receives over the
    /// mean (1 = balanced). Default: the expected maximum under balanced
    /// top-k routing (a percent or two at training token counts).
    #[arg(long)]
    pub moe_imbalance: Option<f64>,
    /// Collective flags (algorithm, interference, measured tables).
    #[command(flatten)]
    pub comm: CommArgs,
}

/// Communication-model flags shared by `simulate`, `plan`, `compare` and `comm`.
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct CommArgs {
    /// Collective algorithm: auto (as NCCL picks: ring, tree for all-reduce
    /// where faster) | ring | tree | hierarchical (three-phase, a what-if).
    #[arg(long, default_value = "auto", help_heading = "Communication")]
    pub comm_algo: String,
    /// Compute slowdown while a collective runs on the same GPU, as a
    /// fraction (0.1 = 10% slower; 0 = off; default from published measurements).
    #[arg(long, help_heading = "Communication")]
    pub comm_interference: Option<f64>,
    /// Measured collectives: nccl-tests output (all_gather_perf,
    /// reduce_scatter_perf, all_reduce_perf, alltoall_perf stdout; prefix `all-gather=` etc.
    /// when the log does not say which) or a cephalo-profile/1 JSON; repeatable.
    #[arg(long, help_heading = "Communication")]
    pub comm_profile: Vec<String>,
}

impl CommArgs {
    /// The algorithm flag, parsed.
    pub fn algo(&self) -> Result<sim::comm::CommAlgo, SpecError> {
        sim::comm::CommAlgo::parse_field(&self.comm_algo, "--comm-algo", "comm_algo")
    }

    /// The interference flag, checked (default [`sim::cost::DEFAULT_COMM_INTERFERENCE`]).
    pub fn interference(&self) -> Result<f64, SpecError> {
        let v = self
            .comm_interference
            .unwrap_or(sim::cost::DEFAULT_COMM_INTERFERENCE);
        if !(v.is_finite() && (0.0..=sim::cost::MAX_COMM_INTERFERENCE).contains(&v)) {
            return Err(bad(
                "--comm-interference",
                format!(
                    "expected a slowdown fraction from 0 (off) to {}, got {v}",
                    sim::cost::MAX_COMM_INTERFERENCE
                ),
            ));
        }
        Ok(v)
    }

    /// The measured collectives of every `--comm-profile`.
    pub fn profiles(&self) -> Result<ProfileSet> {
        let mut set = ProfileSet::new();
        for spec in &self.comm_profile {
            set.merge(load::load_comm_profile(spec)?);
        }
        Ok(set)
    }
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
    /// These flags for a workload planned by the planner named `planner`
    /// alone: without `--mem-fraction`, the planner's own memory rule where
    /// it has one (`cephalo-compat`: the reference optimizer's), returned
    /// too so the command can say it was that planner's default
    /// ([`sim::session::planner_mem_default`], the one place it is decided).
    pub fn for_planner(
        &self,
        planner: &str,
    ) -> (WorkloadArgs, Option<sim::session::PlannerMemDefault>) {
        let mut w = self.clone();
        let default = sim::session::planner_mem_default(planner, self.mem_fraction);
        if let Some(d) = &default {
            w.mem_fraction = d.policy.fraction();
        }
        (w, default)
    }

    /// Validates the flags, loads the cluster and profiles and builds the cost model.
    pub fn resolve(&self) -> Result<Resolved> {
        let (spec, profiles, predictor) = self.parts()?;
        let costs: CostModel = build_workload(&spec, &profiles, &predictor)?;
        let mut warnings = profiles.warnings.clone();
        warnings.extend(costs.warnings.iter().cloned());
        Ok(Resolved {
            costs,
            profiles,
            warnings,
        })
    }

    /// What the cost model is built from: the workload (cluster loaded and
    /// checked), the profiles and the predictor.
    pub fn parts(&self) -> Result<(WorkloadSpec, ProfileSet, Calibrated)> {
        self.parts_on(self.cluster.load()?)
    }

    /// [`WorkloadArgs::parts`] on `cluster` instead of the cluster flags'.
    pub fn parts_on(
        &self,
        cluster: sim::cluster::Cluster,
    ) -> Result<(WorkloadSpec, ProfileSet, Calibrated)> {
        let dtype = NumFormat::parse(&self.dtype).ok_or_else(|| {
            UserError(format!(
                "--dtype: expected fp16, bf16 or fp32, got `{}`",
                self.dtype
            ))
        })?;
        let mut profiles = ProfileSet::new();
        for p in &self.profiles {
            profiles.merge(load::load_profiles(p)?);
        }
        profiles.merge(self.comm.profiles()?);
        let options = CostOptions {
            mem_policy: MemPolicy::from_fraction(self.mem_fraction),
            overhead_gib: self.overhead_gib,
            memory_cluster: self.memory_cluster.clone(),
            comm_algo: self.comm.algo()?,
            comm_interference: self.comm.interference()?,
        };
        let predictor = load::calibration(self.calibration.as_deref())?;
        let spec = WorkloadSpec {
            cluster,
            model: self.routed(load::model(&self.model, "--model")?)?,
            global_batch: self.global_batch,
            seq_len: self.seq_len,
            dtype,
            options,
        };
        Ok((spec, profiles, predictor))
    }
}

impl WorkloadArgs {
    /// `model` with `--moe-imbalance` applied, when given.
    fn routed(&self, model: sim::model::ModelSpec) -> Result<sim::model::ModelSpec> {
        match self.moe_imbalance {
            None => Ok(model),
            Some(x) => Ok(model
                .with_routing_imbalance(x)
                .map_err(|m| bad("--moe-imbalance", m))?),
        }
    }
}

/// The help heading of the 3D shape flags.
const SHAPE: &str = "3D shape (simulate, validate: the plan's; plan, compare, whatif: pins the 3D planners search within)";

/// The 3D shape flags (Megatron's and torchtitan's knobs), declared once
/// for every command: `simulate` and `validate` build the plan of the
/// shape they pin, `plan`, `compare` and `whatif` search within it. On /
/// off flags take `on` or `off` (the flag alone: on). One parser,
/// [`sim::plan::shape::ShapePins::parse`], as a study's `shapes` entry.
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct ShapeArgs {
    /// Tensor-parallel degree: GPUs per TP group (Megatron's
    /// `--tensor-model-parallel-size`); DP = GPUs / (TP x PP).
    #[arg(long, help_heading = SHAPE)]
    pub tp: Option<u32>,
    /// Pipeline stages (Megatron's `--pipeline-model-parallel-size`).
    #[arg(long, help_heading = SHAPE)]
    pub pp: Option<u32>,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1.
    #[arg(long, help_heading = SHAPE)]
    pub pp_schedule: Option<String>,
    /// Model chunks per GPU of the interleaved schedule (default 2 with
    /// `--pp-schedule interleaved`).
    #[arg(long, help_heading = SHAPE)]
    pub virtual_stages: Option<u32>,
    /// Samples per micro-batch of one data-parallel replica; micro-batches
    /// = global batch / (DP x this).
    #[arg(long, help_heading = SHAPE)]
    pub microbatch_size: Option<u32>,
    /// Sequence parallelism inside every TP group (Korthikanti et al.): on
    /// (the flag alone) or off.
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub sequence_parallel: Option<String>,
    /// Overlap TP communication with the GEMMs of both passes as
    /// Transformer Engine's userbuffers do (Megatron's `--tp-comm-overlap`;
    /// needs --sequence-parallel): on or off (Megatron's default path).
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub tp_comm_overlap: Option<String>,
    /// Let TP groups span nodes (priced over the network): on or off.
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub tp_across_nodes: Option<String>,
    /// Reduce each stage's gradients bucket by bucket during the last
    /// micro-batch's backward (Megatron's `--overlap-grad-reduce`; replicas
    /// and the distributed optimizer, `--sharding none` or `grad-op`): on
    /// or off (Megatron's default).
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub overlap_grad_reduce: Option<String>,
    /// Defer the distributed optimizer's parameter all-gathers to the next
    /// step's forward, bucket by bucket (Megatron's
    /// `--overlap-param-gather`; needs --overlap-grad-reduce and
    /// `--sharding grad-op`): on or off (Megatron's default).
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub overlap_param_gather: Option<String>,
    /// Rank order: `tp-cp-ep-dp-pp` (Megatron's default: TP, then DP, then
    /// PP outermost) or `tp-pp-dp` (Megatron's `--use-tp-pp-dp-mapping`: a
    /// replica's stages on consecutive ranks); unpinned, the megatron
    /// planner tries both.
    #[arg(long, help_heading = SHAPE)]
    pub rank_order: Option<String>,
    /// Transformer blocks of the first pipeline stage, the rest split
    /// evenly over the middle stages (Megatron's
    /// `--decoder-first-pipeline-num-layers`).
    #[arg(long, help_heading = SHAPE)]
    pub first_stage_layers: Option<u32>,
    /// Transformer blocks of the last pipeline stage (Megatron's
    /// `--decoder-last-pipeline-num-layers`).
    #[arg(long, help_heading = SHAPE)]
    pub last_stage_layers: Option<u32>,
    /// Count the embedding and the loss as one layer each in the pipeline
    /// split (Megatron's `--account-for-embedding-in-pipeline-split` and
    /// `--account-for-loss-in-pipeline-split`): e.g. 126 blocks on PP 8 x
    /// VP 8, two per model chunk, the first and last chunk one: on or off.
    #[arg(long, help_heading = SHAPE, num_args = 0..=1, default_missing_value = "on")]
    pub embedding_loss_in_split: Option<String>,
    /// Every model chunk's layers, in Megatron's
    /// `--pipeline-model-parallel-layout` syntax: chunks in virtual-stage
    /// order separated by `|`, `E` the embedding, `t` a transformer block,
    /// `L` the loss, `t*N` and `(...)*N` repeats, commas cosmetic; PP x VP
    /// chunks set VP (e.g. DeepSeek-V3's 61 blocks on PP 4 x VP 4:
    /// `Et*3|(t*4|)*14,t*2L`).
    #[arg(long, help_heading = SHAPE)]
    pub pipeline_layout: Option<String>,
    /// Expert-parallel degree for a mixture-of-experts model (Megatron's
    /// `--expert-model-parallel-size`, torchtitan's
    /// `expert_parallel_degree`): each block's routed experts split over
    /// this many data-parallel replicas, tokens dispatched by all-to-all;
    /// must divide the experts, and EP x expert-TP the GPUs of a stage.
    #[arg(long, help_heading = SHAPE)]
    pub ep: Option<u32>,
    /// Expert-tensor-parallel degree (Megatron's
    /// `--expert-tensor-parallel-size`): the TP degree (default: each
    /// expert split over its TP group) or 1 (whole experts, the EP groups
    /// taking TP ranks too: Megatron's advice for fine-grained experts).
    #[arg(long, help_heading = SHAPE)]
    pub etp: Option<u32>,
    /// How tokens reach their experts under EP (Megatron's
    /// `--moe-token-dispatcher-type`): alltoall (default: the `k` copies of
    /// each token to their experts' ranks) or allgather (every token of the
    /// expert-TP x EP group gathered, outputs reduce-scattered back).
    #[arg(long, help_heading = SHAPE)]
    pub moe_dispatcher: Option<String>,
}

impl ShapeArgs {
    /// The pins these flags set, each checked by the one parser (errors
    /// name the flag).
    pub fn pins(&self) -> Result<sim::plan::shape::ShapePins> {
        let num = |x: Option<u32>| x.map(|x| x.to_string());
        // (Commas in a layout are cosmetic, as Megatron reads it; the pin
        // parser splits pairs at them.)
        let layout = self.pipeline_layout.as_ref().map(|l| l.replace(',', ""));
        let flags: [(&str, &str, Option<String>); 18] = [
            ("--tp", "tp", num(self.tp)),
            ("--pp", "pp", num(self.pp)),
            ("--pp-schedule", "schedule", self.pp_schedule.clone()),
            (
                "--virtual-stages",
                "virtual_stages",
                num(self.virtual_stages),
            ),
            (
                "--microbatch-size",
                "microbatch_size",
                num(self.microbatch_size),
            ),
            (
                "--sequence-parallel",
                "sequence_parallel",
                self.sequence_parallel.clone(),
            ),
            (
                "--tp-comm-overlap",
                "tp_comm_overlap",
                self.tp_comm_overlap.clone(),
            ),
            (
                "--tp-across-nodes",
                "tp_across_nodes",
                self.tp_across_nodes.clone(),
            ),
            (
                "--overlap-grad-reduce",
                "overlap_grad_reduce",
                self.overlap_grad_reduce.clone(),
            ),
            (
                "--overlap-param-gather",
                "overlap_param_gather",
                self.overlap_param_gather.clone(),
            ),
            ("--rank-order", "rank_order", self.rank_order.clone()),
            (
                "--first-stage-layers",
                "first_stage_layers",
                num(self.first_stage_layers),
            ),
            (
                "--last-stage-layers",
                "last_stage_layers",
                num(self.last_stage_layers),
            ),
            (
                "--embedding-loss-in-split",
                "embedding_loss_in_split",
                self.embedding_loss_in_split.clone(),
            ),
            ("--pipeline-layout", "pipeline_layout", layout),
            ("--ep", "ep", num(self.ep)),
            ("--etp", "etp", num(self.etp)),
            (
                "--moe-dispatcher",
                "moe_dispatcher",
                self.moe_dispatcher.clone(),
            ),
        ];
        let mut pins = sim::plan::shape::ShapePins::default();
        for (flag, name, value) in flags {
            if let Some(v) = value {
                let one = sim::plan::shape::ShapePins::parse(
                    &format!("{name}={v}"),
                    "the 3D shape flags",
                    flag,
                )?;
                pins = pins.with(&one);
            }
        }
        Ok(pins)
    }

    /// The shape the flags pin (`None` when none is given), every part
    /// not pinned at its default ([`sim::plan::shape::ShapePins::shape`]);
    /// refused beside `others`, the plan's other sources (flag, given).
    pub fn shape(&self, others: &[(&str, bool)]) -> Result<Option<sim::plan::shape::Shape3d>> {
        let pins = self.pins()?;
        if pins.is_empty() {
            return Ok(None);
        }
        if let Some((flag, _)) = others.iter().find(|(_, given)| *given) {
            return Err(crate::error::UserError(format!(
                "{flag}: a plan comes from one source; the 3D shape flags ({}) build one too: give one or the other",
                pins.text()
            ))
            .into());
        }
        Ok(Some(pins.shape()))
    }
}
