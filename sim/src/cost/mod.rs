//! Per-rank cost model of one workload: what each GPU pays for each piece of
//! an FSDP iteration, and where each number came from.
//!
//! Built once from (cluster, model, seq_len, dtype) + profiles + a predictor;
//! the simulator and every planner ask it, so all of them judge plans with
//! the same numbers. Times are ms, memory GiB, bytes bytes.
//!
//! Sources, in order of trust: a measured profile (`cephalo profile`), an
//! imported reference profile, the analytic predictor. Embedding, LM head and
//! optimizer step are never in the reference data: they come from measured
//! unit profiles when present, else from a roofline estimate.
//!
//! Collectives: when the profiles carry measured collective times
//! ([`ProfileSet::collectives`], written by `cephalo profile --ranks N`),
//! the communication model is a [`MeasuredTable`](crate::comm::MeasuredTable) over them (each sample at
//! its even-equivalent size `bytes x imbalance`), with the analytic ring as
//! its fallback; otherwise the analytic ring alone.
//!
//! Attention kernels: every GPU type has a block curve per kernel (eager,
//! flash). The curve of the kernel a profile was measured with is the
//! profile; the other one is the profile scaled point by point by the
//! predictor's ratio of the two kernels on that GPU (a measured eager
//! profile becomes a flash estimate that keeps the GPU's measured speed).
//! Selective recompute costs the predictor's fraction of the forward.
//!
//! Activation memory ([`ActivationModel`]): the analytic tensor-by-tensor
//! sizes of [`crate::activation`]. When a memory profile measured this
//! model at this sequence length (imported or measured), they are anchored
//! to it: the measured non-state curve `act(m)` of the reference
//! configuration is read as `B_ref + F0 + s(m) x A_ref(m)` (unit buffers, a
//! fixed workspace fitted over the measured sizes, and the analytic
//! reference peak scaled by `s(m)`), and every strategy's activation bytes
//! are the analytic ones times `s(m)`; the reference configuration then
//! reproduces the measurement, and other strategies inherit its
//! calibration. A size whose measurement does not rise above `B_ref + F0`
//! (the reference GPT-2.7B fp16 curve at micro-batch 1) takes activations
//! proportional to `m` from the first size that does, and a dip in the
//! curve keeps the previous size's peak: a non-empty micro-batch always
//! holds activations, and a larger one no fewer. Without such a
//! measurement (no profile, or one taken at another sequence length) the
//! analytic sizes stand as they are (`s = 1`, `F0 = 0`): the calibrated
//! memory curve was fitted at each model's default length only and
//! extrapolates the `s^2` terms poorly.
//!
//! CPU devices (catalog `arch = "cpu"`): device memory is host memory, so
//! host copies cost nothing ([`CostModel::host_copy_ms`]), and MPI moves
//! data with the same cores that compute, so communication cannot hide
//! behind compute ([`CostModel::comm_overlaps_compute`] is false and the
//! simulator serialises them).

pub mod gpu_type;
pub mod links;
pub mod mem_policy;
pub mod memory;
pub mod workload;

pub use gpu_type::{is_cpu, GpuTypeCost, ANALYTIC_TABLE_MAX_BATCH};
pub use links::{collective_ranks, comm_model, comm_topology, measured_points, LinkIds, LinkShare};
pub use mem_policy::MemPolicy;
pub use memory::{reference_buffers_bytes, ActMemory, ActivationModel};
pub use workload::{CostOptions, Workload, DEFAULT_COMM_INTERFERENCE, MAX_COMM_INTERFERENCE};

use crate::comm::{CollectiveKind, CollectiveRank, CommModel};
use crate::error::SpecError;
use crate::gpu::GpuSpec;
use crate::perfmodel::{BlockImpl, Predictor};
use crate::profile::{ComputeCurve, ProfileSet, UnitProfile};
use crate::strategy::{Attention, STATE_BYTES_PER_PARAM};
use crate::units::GIB;
use links::rescale_warnings;
use memory::activation_memory;
use std::sync::Arc;

/// Fraction of HBM bandwidth reached by memory-bound unit kernels.
pub const UNIT_BANDWIDTH_EFFICIENCY: f64 = 0.7;

/// Fixed cost of launching the optimizer step (ms).
pub const OPTIMIZER_LAUNCH_MS: f64 = 0.2;

/// HBM bytes moved per local parameter by an Adam step (read param, grad,
/// two moments; write param, two moments; fp32).
pub const OPTIMIZER_BYTES_PER_PARAM: f64 = 28.0;

/// Fixed cost of a host (CPU) optimizer step, ms: thread fork/join of a
/// multi-threaded CPU Adam (DeepSpeed's `DeepSpeedCPUAdam`).
pub const HOST_OPTIMIZER_LAUNCH_MS: f64 = 1.0;

/// The per-rank cost model of one workload.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// The workload.
    pub workload: Workload,
    /// The knobs.
    pub options: CostOptions,
    /// Distinct GPU types of the cluster.
    pub types: Vec<Arc<GpuTypeCost>>,
    /// Index into `types` for every rank.
    pub rank_type: Vec<usize>,
    /// Non-state memory curve (independent of GPU type).
    pub act: ActMemory,
    /// Activation sizes anchored to `act`.
    pub activations: ActivationModel,
    /// Collective cost model.
    pub comm: Arc<dyn CommModel>,
    /// Warnings for the user (flagged profile entries used, fallbacks taken).
    pub warnings: Vec<String>,
    /// Resource ids of the cluster's links (engine link sharing).
    pub links: LinkIds,
}

impl CostModel {
    /// Resolves every rank's costs. Fails (naming the GPU, model, seq and
    /// dtype) only when neither a profile nor the predictor can answer.
    pub fn build(
        workload: Workload,
        profiles: &ProfileSet,
        predictor: &dyn Predictor,
        options: CostOptions,
    ) -> Result<CostModel, SpecError> {
        workload.check(&options)?;
        let mut warnings = Vec::new();
        let mut types: Vec<Arc<GpuTypeCost>> = Vec::new();
        let mut rank_type = Vec::with_capacity(workload.cluster.len());
        for g in &workload.cluster.gpus {
            if let Some(i) = types.iter().position(|t| t.gpu.name == g.spec.name) {
                rank_type.push(i);
                continue;
            }
            let t = GpuTypeCost::build(&g.spec, &workload, profiles, predictor, &mut warnings)?;
            rank_type.push(types.len());
            types.push(Arc::new(t));
        }
        let (act, activations) = activation_memory(
            &workload,
            &types,
            profiles,
            predictor,
            &options,
            &mut warnings,
        )?;
        let comm = comm_model(&workload.cluster, options.comm_algo, profiles)?;
        warnings.extend(rescale_warnings(&workload.cluster, profiles));
        let links = LinkIds::new(&workload.cluster);
        Ok(CostModel {
            workload,
            options,
            types,
            rank_type,
            act,
            activations,
            comm,
            warnings,
            links,
        })
    }

    /// Replaces the communication model (e.g. a measured table).
    pub fn with_comm(mut self, comm: Arc<dyn CommModel>) -> CostModel {
        self.comm = comm;
        self
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.rank_type.len()
    }

    /// The cost entry of a rank's GPU type.
    pub fn gpu_type(&self, rank: usize) -> &GpuTypeCost {
        &self.types[self.rank_type[rank]]
    }

    /// The GPU of a rank.
    pub fn gpu(&self, rank: usize) -> &GpuSpec {
        &self.gpu_type(rank).gpu
    }

    /// Forward ms of one block for a micro-batch of `m` samples on `rank`,
    /// with the attention kernel the profile was measured with.
    pub fn block_fwd_ms(&self, rank: usize, m: u32) -> f64 {
        self.gpu_type(rank).block.fwd_ms(m)
    }

    /// Backward ms of one block for a micro-batch of `m` samples on `rank`,
    /// with the attention kernel the profile was measured with.
    pub fn block_bwd_ms(&self, rank: usize, m: u32) -> f64 {
        self.gpu_type(rank).block.bwd_ms(m)
    }

    /// The attention kernel a strategy runs unless the user names one.
    /// Where block times were measured or imported, the kernel they were
    /// measured with (flash only when every GPU's profile was), so a plan
    /// replays its measurements. Where every GPU type is predicted, the
    /// fused kernel, as PyTorch's `scaled_dot_product_attention` picks it
    /// on any CUDA GPU (FlashAttention-2 on sm80+ in fp16/bf16, the
    /// memory-efficient kernel elsewhere, fp32 included); eager on the
    /// `cpu` device, whose trainer runs the eager block.
    pub fn profile_attention(&self) -> Attention {
        let predicted = self.types.iter().all(|t| t.block.source.rank() == 2);
        if predicted && self.types.iter().all(|t| !is_cpu(&t.gpu)) {
            Attention::Flash
        } else {
            self.activations.measured_attention
        }
    }

    /// Forward and backward ms of one block at micro-batch `m` on `rank`
    /// implemented as `imp`; `Err` naming the GPU when it has no such curve.
    pub fn block_ms_with(&self, rank: usize, m: u32, imp: BlockImpl) -> Result<(f64, f64), String> {
        let t = self.gpu_type(rank);
        match t.curve(imp) {
            Some(c) => Ok((c.fwd_ms(m), c.bwd_ms(m))),
            None => Err(format!(
                "no {} times for {}: the profile was measured with {} attention on the pytorch stack and the predictor cannot run {} {}",
                imp.label(),
                t.gpu.name,
                t.measured_attention.name(),
                t.gpu.name,
                self.workload.dtype
            )),
        }
    }

    /// Forward and backward ms of one rank's share of a block at
    /// micro-batch `m` on `rank` implemented as `imp` in the TP group `tp`:
    /// the GPU's curve times the predictor's TP ratio
    /// ([`gpu_type::TpTable`]); the whole block's at `t = 1`. `Err` naming
    /// the GPU when it has no such curve or the predictor cannot split it.
    pub fn block_ms_tp(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> Result<(f64, f64), String> {
        let (f, b) = self.block_ms_with(rank, m, imp)?;
        if !tp.communicates() {
            return Ok((f, b));
        }
        let r = self.tp_table(rank, imp, tp)?.at(m);
        Ok((f * r[0], b * r[1]))
    }

    /// The [`gpu_type::TpTable`] of `rank`'s GPU type for `tp` and `imp`.
    fn tp_table(
        &self,
        rank: usize,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> Result<&gpu_type::TpTable, String> {
        let t = self.gpu_type(rank);
        t.tp.iter()
            .find(|x| {
                x.degree == tp.degree.max(1)
                    && x.sequence_parallel == (tp.sequence_parallel && tp.degree > 1)
                    && x.imp == imp
                    && x.experts == tp.experts.max(1)
                    && x.expert_tensor == tp.priced_expert_tensor()
            })
            .ok_or_else(|| {
                format!(
                    "no TP {} prediction for {} with {}: the degree must divide the heads, KV heads and MLP width of {} and the predictor must run {} {}",
                    tp.degree,
                    t.gpu.name,
                    imp.label(),
                    self.workload.model.name,
                    t.gpu.name,
                    self.workload.dtype
                )
            })
    }

    /// [`CostModel::selective_recompute_ms`] for one rank of the TP group
    /// `tp`, whose forward takes `fwd_ms`.
    pub fn selective_recompute_ms_tp(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        core: bool,
        fwd_ms: f64,
        tp: &crate::tensor::TensorParallel,
    ) -> f64 {
        if !tp.is_on() {
            return self.selective_recompute_ms(rank, m, imp, core, fwd_ms);
        }
        match self.tp_table(rank, imp, tp) {
            Ok(t) if m > 0 => t.at(m)[2 + usize::from(core)] * fwd_ms,
            _ => 0.0,
        }
    }

    /// What strategy defaults depend on for this workload: the cluster, the
    /// dtype and the default attention kernel ([`CostModel::profile_attention`]).
    pub fn strategy_context(&self) -> crate::strategy::StrategyContext<'_> {
        crate::strategy::StrategyContext {
            cluster: &self.workload.cluster,
            dtype: self.workload.dtype,
            profile_attention: self.profile_attention(),
        }
    }

    /// ms of a selective recompute of one block at micro-batch `m` on
    /// `rank` with `attention` (the predictor's fraction of that forward):
    /// op-level, or core attention (`core`, Megatron's selective).
    pub fn selective_recompute_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        core: bool,
        fwd_ms: f64,
    ) -> f64 {
        let v = &self.gpu_type(rank).selective_fraction[usize::from(core)][imp.index()];
        if m == 0 || v.is_empty() {
            return 0.0;
        }
        v[(m as usize - 1).min(v.len() - 1)] * fwd_ms
    }

    fn act_bytes(&self, m: u32) -> f64 {
        let w = &self.workload;
        m as f64
            * w.model.tokens_per_sample(w.seq_len) as f64
            * w.model.hidden as f64
            * w.dtype.bytes()
    }

    /// The predictor's unit time `pick` (embedding or head, forward or
    /// backward) for `m` samples on one rank of `tp` implemented as `imp`:
    /// the whole unit's curve times the TP table's ratio `col`. A GPU the
    /// predictor cannot run takes its block curve's scale: 0.
    fn predicted_unit_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
        pick: fn(&gpu_type::UnitCurves, u32) -> f64,
        col: usize,
    ) -> f64 {
        let Some(u) = &self.gpu_type(rank).unit_curves[imp.index()] else {
            return 0.0;
        };
        let whole = pick(u, m);
        if !tp.is_on() {
            return whole;
        }
        match self.tp_table(rank, imp, tp) {
            Ok(t) => whole * t.at(m)[col],
            Err(_) => whole / tp.degree.max(1) as f64,
        }
    }

    /// A measured unit time `pick` for `m` samples on `rank`, split over
    /// `tp` (the vocabulary- and sequence-parallel units divide by `t`), or
    /// `None` when no unit profile was measured.
    fn measured_unit_ms(
        &self,
        rank: usize,
        m: u32,
        tp: &crate::tensor::TensorParallel,
        pick: fn(&UnitProfile) -> &Vec<f64>,
    ) -> Option<f64> {
        let u = self.gpu_type(rank).units.as_ref()?;
        let c = ComputeCurve::from_points(
            u.batch_sizes.clone(),
            pick(u).clone(),
            pick(u).clone(),
            u.source.clone(),
        );
        Some(c.fwd_ms(m) / tp.degree.max(1) as f64)
    }

    /// Embedding forward ms for `m` samples on one rank of `tp`.
    pub fn embed_fwd_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> f64 {
        self.measured_unit_ms(rank, m, tp, |u| &u.embed_fwd_ms)
            .unwrap_or_else(|| {
                self.predicted_unit_ms(rank, m, imp, tp, |u, m| u.embed.fwd_ms(m), 6)
            })
    }

    /// Embedding backward ms for `m` samples on one rank of `tp` (the dense
    /// gradient of the table).
    pub fn embed_bwd_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> f64 {
        self.measured_unit_ms(rank, m, tp, |u| &u.embed_bwd_ms)
            .unwrap_or_else(|| {
                self.predicted_unit_ms(rank, m, imp, tp, |u, m| u.embed.bwd_ms(m), 7)
            })
    }

    /// Head (final norm, LM head / classifier, loss) forward ms for `m`
    /// samples on one rank of `tp`.
    pub fn head_fwd_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> f64 {
        self.measured_unit_ms(rank, m, tp, |u| &u.head_fwd_ms)
            .unwrap_or_else(|| self.predicted_unit_ms(rank, m, imp, tp, |u, m| u.head.fwd_ms(m), 4))
    }

    /// Head backward ms for `m` samples on one rank of `tp`.
    pub fn head_bwd_ms(
        &self,
        rank: usize,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> f64 {
        self.measured_unit_ms(rank, m, tp, |u| &u.head_bwd_ms)
            .unwrap_or_else(|| self.predicted_unit_ms(rank, m, imp, tp, |u, m| u.head.bwd_ms(m), 5))
    }

    /// Optimizer step ms on `rank` for `local_params` parameters.
    pub fn optimizer_ms(&self, rank: usize, local_params: f64) -> f64 {
        if local_params <= 0.0 {
            return 0.0;
        }
        match &self.gpu_type(rank).units {
            Some(u) => u.optimizer_ms_per_mparam * local_params / 1e6,
            None => {
                let gpu = self.gpu(rank);
                OPTIMIZER_LAUNCH_MS
                    + local_params * OPTIMIZER_BYTES_PER_PARAM
                        / (gpu.mem_bw_gbps * 1e9 * UNIT_BANDWIDTH_EFFICIENCY)
                        * 1e3
            }
        }
    }

    /// Host (CPU) optimizer step of `rank` over `local_params` parameters,
    /// ms, while `sharing` ranks of its node step at the same time: Adam
    /// is memory-bound on a CPU (DeepSpeed's CPU Adam is vectorised and
    /// multi-threaded), so it streams [`OPTIMIZER_BYTES_PER_PARAM`] plus the
    /// updated parameter in `param_bytes` per parameter through the node's
    /// host memory bandwidth, shared by the `sharing` ranks.
    pub fn host_optimizer_ms(
        &self,
        rank: usize,
        local_params: f64,
        param_bytes: f64,
        sharing: usize,
    ) -> f64 {
        if local_params <= 0.0 {
            return 0.0;
        }
        let node = &self.workload.cluster.nodes[self.workload.cluster.gpus[rank].node];
        let bw = node.host_mem_bw_gbps * 1e9 / sharing.max(1) as f64;
        HOST_OPTIMIZER_LAUNCH_MS
            + local_params * (OPTIMIZER_BYTES_PER_PARAM + param_bytes) / bw * 1e3
    }

    /// Bytes of one block's output for `m` samples (what layered gradient
    /// accumulation offloads to the host, and loads back for the backward).
    pub fn block_output_bytes(&self, m: u32) -> f64 {
        self.act_bytes(m)
    }

    /// ms to copy `bytes` between `rank`'s GPU and host memory (PCIe); 0 on
    /// a CPU device, whose memory is host memory.
    pub fn host_copy_ms(&self, rank: usize, bytes: f64) -> f64 {
        if is_cpu(self.gpu(rank)) {
            return 0.0;
        }
        crate::units::transfer_ms(bytes, self.gpu(rank).host_link.bw_gbps())
    }

    /// Whether communication can overlap compute on every rank: false when
    /// some rank is a CPU device (arch `cpu`), whose collectives run on the
    /// cores that compute (MPI copies through shared memory with the rank's
    /// own core), so a collective and a compute op of that rank cannot run
    /// at the same time. The simulator then runs without prefetch, which
    /// serialises every rank's collectives with its compute.
    pub fn comm_overlaps_compute(&self) -> bool {
        !self.types.iter().any(|t| is_cpu(&t.gpu))
    }

    /// Non-state memory (GiB) of one step at micro-batch size `m`.
    pub fn act_mem_gib(&self, m: u32) -> f64 {
        self.act.gib(m)
    }

    /// Mixed-precision Adam training state (GiB, 16 B per parameter) held
    /// by a rank with state fraction `fraction` of the whole model.
    pub fn state_gib(&self, fraction: f64) -> f64 {
        STATE_BYTES_PER_PARAM * self.workload.model.total_params() as f64 * fraction / GIB
    }

    /// GPU memory capacity of `rank` (GiB).
    pub fn capacity_gib(&self, rank: usize) -> f64 {
        self.gpu(rank).mem_gib
    }

    /// The limit on `rank`'s simulated peak under the memory policy
    /// ([`MemPolicy::usable_gib`]), GiB.
    pub fn usable_gib(&self, rank: usize) -> f64 {
        self.options
            .mem_policy
            .usable_gib(self.capacity_gib(rank), self.overhead_gib())
    }

    /// Memory outside the allocator on every GPU (CUDA context, NCCL
    /// buffers), GiB: the user's figure, else the policy's estimate for a
    /// cluster of this size.
    pub fn overhead_gib(&self) -> f64 {
        self.options.overhead_gib_on(self.workload.cluster.len())
    }

    /// Parameters of each FSDP unit in execution order: embedding, blocks, head.
    pub fn unit_params(&self) -> Vec<u64> {
        let m = &self.workload.model;
        let mut v = Vec::with_capacity(m.layers as usize + 2);
        v.push(m.embedding_params());
        v.extend(std::iter::repeat_n(m.params_per_block(), m.layers as usize));
        v.push(m.head_params());
        v
    }

    /// ms of collective `kind` over the GPUs `ranks` (in ring order) with
    /// per-rank `pieces` (bytes: each rank's piece for all-gather and
    /// reduce-scatter, the buffer for all-reduce).
    pub fn group_collective_ms(
        &self,
        kind: CollectiveKind,
        ranks: &[usize],
        pieces: &[f64],
    ) -> f64 {
        self.comm
            .time_ms(kind, &self.collective_ranks(ranks, pieces))
    }

    /// Where the time of a `kind` collective over `ranks` with `pieces`
    /// (bytes per rank) comes from, with the group's size and nodes;
    /// `None` (and no work) when the communication model is purely
    /// analytic.
    pub fn comm_source(
        &self,
        kind: CollectiveKind,
        ranks: &[usize],
        pieces: &[f64],
    ) -> Option<crate::comm::GroupSource> {
        if !self.comm.is_measured() || ranks.len() < 2 {
            return None;
        }
        let cr = self.collective_ranks(ranks, pieces);
        let mut nodes: Vec<usize> = cr.iter().map(|r| r.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        Some(crate::comm::GroupSource {
            source: self.comm.source(kind, &cr)?,
            ranks: ranks.len() as u32,
            nodes: nodes.len() as u32,
        })
    }

    fn collective_ranks(&self, ranks: &[usize], pieces: &[f64]) -> Vec<CollectiveRank> {
        collective_ranks(&self.workload.cluster, ranks, pieces)
    }

    /// The links collective `kind` over `ranks` with `pieces` keeps busy,
    /// as engine shares of a collective lasting `time_ms` (see [`LinkShare`]).
    pub fn group_collective_shares(
        &self,
        kind: CollectiveKind,
        ranks: &[usize],
        pieces: &[f64],
        time_ms: f64,
    ) -> Vec<LinkShare> {
        if time_ms <= 0.0 {
            return Vec::new();
        }
        self.comm
            .loads(kind, &self.collective_ranks(ranks, pieces))
            .into_iter()
            .filter(|&(_, b)| b > 0.0)
            .map(|(l, b)| (self.links.id(l), (b / time_ms).clamp(0.0, 1.0) as f32))
            .collect()
    }

    /// A point-to-point transfer of `bytes` from GPU `from` to GPU `to`
    /// (pipeline activations and gradients): ms, and the engine shares of
    /// the links it keeps busy for that long (see [`LinkShare`]).
    pub fn p2p(&self, from: usize, to: usize, bytes: f64) -> (f64, Vec<LinkShare>) {
        let c = &self.workload.cluster;
        let r = |i: usize| collective_ranks(c, &[i], &[0.0])[0];
        let (t, loads) = self.comm.p2p(&r(from), &r(to), bytes);
        let shares = if t > 0.0 {
            loads
                .into_iter()
                .filter(|&(_, b)| b > 0.0)
                .map(|(l, b)| (self.links.id(l), (b / t).clamp(0.0, 1.0) as f32))
                .collect()
        } else {
            Vec::new()
        };
        (t, shares)
    }

    /// The link share of a host copy on `rank` (its PCIe link, busy all
    /// the copy long); none on a CPU device.
    pub fn host_copy_share(&self, rank: usize, to_host: bool) -> Option<LinkShare> {
        (!is_cpu(self.gpu(rank))).then(|| (self.links.pcie(rank, to_host), 1.0))
    }

    /// [`CostModel::group_collective_ms`] over all ranks for a unit of
    /// `unit_params` parameters of `bytes_per_param` split by `fractions`.
    pub fn collective_ms(
        &self,
        kind: CollectiveKind,
        unit_params: u64,
        bytes_per_param: f64,
        fractions: &[f64],
    ) -> f64 {
        let bytes = unit_params as f64 * bytes_per_param;
        let ranks: Vec<usize> = (0..fractions.len()).collect();
        let pieces: Vec<f64> = fractions.iter().map(|f| bytes * f).collect();
        self.group_collective_ms(kind, &ranks, &pieces)
    }

    /// Model FLOPs of one iteration (no recompute), for MFU.
    pub fn iteration_model_flops(&self) -> f64 {
        let w = &self.workload;
        w.model.model_flops_per_sample(w.seq_len) * w.global_batch as f64
    }
}

/// The analytic cost model of llama-tiny at 256 tokens on `gpus` (a GPU
/// list, e.g. `"l4,a10g"`), in `dtype` at global batch `batch`: what the
/// unit tests of the modules above the cost model build on.
#[cfg(test)]
pub(crate) fn tiny_costs(gpus: &str, dtype: crate::precision::NumFormat, batch: u32) -> CostModel {
    let w = Workload {
        cluster: crate::cluster::Cluster::from_gpu_list(
            gpus,
            "--gpus",
            crate::gpu::GpuCatalog::builtin(),
        )
        .unwrap(),
        model: crate::model::ModelCatalog::builtin()
            .get("llama-tiny")
            .unwrap()
            .clone(),
        seq_len: 256,
        dtype,
        global_batch: batch,
    };
    CostModel::build(
        w,
        &crate::profile::ProfileSet::new(),
        &*crate::perfmodel::builtin(),
        CostOptions::default(),
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::comm::CollectiveKind;
    use crate::gpu::GpuCatalog;
    use crate::model::ModelCatalog;
    use crate::model::ModelSpec;
    use crate::precision::NumFormat;
    use crate::profile::CollectiveSample;
    use crate::profile::Source;

    /// A constant predictor (the tests below do not depend on its numbers;
    /// 100 ms per sample keeps even a CPU below its peak).
    #[derive(Debug)]
    struct Flat;

    impl Predictor for Flat {
        fn block_prediction_tp(
            &self,
            _: &GpuSpec,
            _: &ModelSpec,
            _: u32,
            _: NumFormat,
            m: u32,
            imp: BlockImpl,
            tp: &crate::tensor::TensorParallel,
        ) -> Result<crate::perfmodel::BlockPrediction, String> {
            let k = if imp.attention == Attention::Flash {
                50.0
            } else {
                100.0
            } / tp.degree.max(1) as f64;
            let parts = crate::perfmodel::PassTime::default();
            Ok(crate::perfmodel::BlockPrediction {
                fwd_ms: k * m as f64,
                bwd_ms: 2.0 * k * m as f64,
                selective_recompute_ms: 0.25 * k * m as f64,
                attention_recompute_ms: 0.1 * k * m as f64,
                fwd_parts: parts,
                bwd_parts: parts,
            })
        }
        fn unit_prediction(
            &self,
            _: &GpuSpec,
            _: &ModelSpec,
            _: u32,
            _: NumFormat,
            m: u32,
            _: BlockImpl,
            tp: &crate::tensor::TensorParallel,
        ) -> Result<crate::perfmodel::UnitPrediction, String> {
            let k = m as f64 / tp.degree.max(1) as f64;
            Ok(crate::perfmodel::UnitPrediction {
                embed_fwd_ms: k,
                embed_bwd_ms: 2.0 * k,
                head_fwd_ms: 3.0 * k,
                head_bwd_ms: 6.0 * k,
            })
        }
        fn act_mem_gib(&self, _: &ModelSpec, _: u32, _: NumFormat, m: u32) -> f64 {
            0.1 * m as f64
        }
        fn name(&self) -> String {
            "flat".into()
        }
    }

    fn costs(gpus: &str, profiles: &ProfileSet) -> CostModel {
        let w = Workload {
            cluster: Cluster::from_gpu_list(gpus, "--gpus", GpuCatalog::builtin()).unwrap(),
            model: ModelCatalog::builtin().get("gpt-test").unwrap().clone(),
            seq_len: 64,
            dtype: NumFormat::Fp32,
            global_batch: 8,
        };
        CostModel::build(w, profiles, &Flat, CostOptions::default()).unwrap()
    }

    #[test]
    fn cpu_devices_copy_for_free_and_do_not_overlap() {
        let none = ProfileSet::new();
        let cpu = costs("cpu,cpu", &none);
        assert_eq!(cpu.host_copy_ms(0, 1e9), 0.0);
        assert!(!cpu.comm_overlaps_compute());
        let gpu = costs("l4,l4", &none);
        assert!(gpu.host_copy_ms(0, 1e9) > 10.0);
        assert!(gpu.comm_overlaps_compute());
    }

    #[test]
    fn both_kernels_and_the_activation_anchor() {
        let c = costs("l4,l4", &ProfileSet::new());
        // The flat predictor makes flash half as long as eager.
        let eager = BlockImpl::pytorch(Attention::Eager);
        let (fe, be) = c.block_ms_with(0, 4, eager).unwrap();
        let (ff, bf) = c
            .block_ms_with(0, 4, BlockImpl::pytorch(Attention::Flash))
            .unwrap();
        assert!((ff - 0.5 * fe).abs() < 1e-9 && (bf - 0.5 * be).abs() < 1e-9);
        assert!((c.selective_recompute_ms(0, 4, eager, false, fe) - 0.25 * fe).abs() < 1e-9);
        // Without a memory measurement the analytic sizes stand (s = 1).
        assert!(!c.activations.anchored());
        assert_eq!(c.activations.scale_at(7), 1.0);
        // A measurement at this sequence length anchors them: the reference
        // peak reproduces act(m) = B_ref + F0 + s(m) A_ref(m) wherever the
        // measurement exceeds the unit buffers (below that, the activations
        // are proportional to m from the first size that does).
        let mut p = ProfileSet::new();
        let mem = |seq| crate::profile::MemoryProfile {
            cluster: "x".into(),
            model: "gpt-test".into(),
            model_key: "gpt-test".into(),
            dtype: NumFormat::Fp32,
            parameters: 1,
            seq_len: Some(seq),
            act_gib: (1..=8).map(|m| 0.3 + 0.05 * m as f64).collect(),
            source: Source::Measured { origin: "t".into() },
        };
        p.memory.push(mem(64));
        let c = costs("l4,l4", &p);
        let a = &c.activations;
        assert!(a.anchored());
        let l = c.workload.model.layers;
        let mut checked = 0;
        for m in [1, 3, 8, 64, 100] {
            let peak = a.micro(m, Attention::Eager, false);
            let per = a.per_sample[0];
            let k = m as f64 * a.scale_at(m);
            assert!((peak.checkpoint - per.checkpoint * k).abs() < 1e-6);
            let got = a.buffers_ref_bytes + a.fixed_bytes + per.reference_peak(l) * k;
            let want = c.act_mem_gib(m) * GIB;
            if want > a.buffers_ref_bytes && m <= 64 {
                assert!((got - want).abs() < 1e-3 * want, "m={m}: {got} vs {want}");
                checked += 1;
            } else if want <= a.buffers_ref_bytes {
                assert!(a.scale_at(m) > 0.0, "m={m}: no activations");
            }
        }
        assert!(checked >= 2);
        // Measured at another length: not used for activations, and said so.
        let mut q = ProfileSet::new();
        q.memory.push(mem(128));
        let c = costs("l4,l4", &q);
        assert!(!c.activations.anchored());
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("measured at 128 tokens")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn measured_collectives_drive_the_comm_model() {
        let mut p = ProfileSet::new();
        for (kind, t) in [("all_gather", 2.0), ("reduce_scatter", 3.0)] {
            for (bytes, imbalance, scale) in [(1e6, 1.0, 1.0), (1e8, 1.0, 50.0), (1e6, 1.5, 1.2)] {
                p.collectives.push(CollectiveSample {
                    kind: kind.into(),
                    ranks: 2,
                    bytes,
                    imbalance,
                    time_ms: t * scale,
                    nodes: None,
                    rescalable: false,
                });
            }
        }
        let pts = measured_points(&p);
        assert_eq!(pts.len(), 6);
        assert_eq!(pts[2].total_bytes, 1.5e6);
        let c = costs("cpu,cpu", &p);
        assert!(
            c.comm.describe().starts_with("measured table"),
            "{}",
            c.comm.describe()
        );
        // 1e6 bytes as params of 4 bytes, even split: the measured point.
        let ag = c.collective_ms(CollectiveKind::AllGather, 250_000, 4.0, &[0.5, 0.5]);
        assert!((ag - 2.0).abs() < 1e-9, "{ag}");
        let rs = c.collective_ms(CollectiveKind::ReduceScatter, 250_000, 4.0, &[0.5, 0.5]);
        assert!((rs - 3.0).abs() < 1e-9, "{rs}");
        // Uneven 0.25 / 0.75: even-equivalent 1.5e6 bytes, the measured uneven point.
        let un = c.collective_ms(CollectiveKind::AllGather, 250_000, 4.0, &[0.25, 0.75]);
        assert!((un - 2.4).abs() < 1e-9, "{un}");
        // Without samples: the analytic ring.
        let ring = costs("cpu,cpu", &ProfileSet::new());
        assert!(ring.comm.describe().starts_with("analytic"));
    }
}
