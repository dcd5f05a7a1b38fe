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
//! the communication model is a [`MeasuredTable`] over them (each sample at
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
//! calibration. Without such a measurement (no profile, or one taken at
//! another sequence length) the analytic sizes stand as they are (`s = 1`,
//! `F0 = 0`): the calibrated memory curve was fitted at each model's default
//! length only and extrapolates the `s^2` terms poorly.
//!
//! CPU devices (catalog `arch = "cpu"`): device memory is host memory, so
//! host copies cost nothing ([`CostModel::host_copy_ms`]), and MPI moves
//! data with the same cores that compute, so communication cannot hide
//! behind compute ([`CostModel::comm_overlaps_compute`] is false and the
//! simulator serialises them).

use crate::activation::BlockActivations;
use crate::cluster::Cluster;
use crate::comm::{
    CollectiveKind, CollectiveRank, CommAlgo, CommModel, CommTopology, LinkKind, LinkRef,
    MeasuredPoint, MeasuredTable, NodeLinks, RingModel,
};
use crate::dtype::Dtype;
use crate::error::SpecError;
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;
use crate::perfmodel::Predictor;
use crate::profile::{ComputeCurve, MemoryProfile, ProfileSet, Source, UnitProfile};
use crate::strategy::{Attention, STATE_BYTES_PER_PARAM};
use crate::units::GIB;
use std::sync::Arc;

/// Micro-batch sizes at which an analytic curve is tabulated (1..=N); beyond
/// it the curve's least-squares line answers.
pub const ANALYTIC_TABLE_MAX_BATCH: u32 = 64;
/// Fraction of peak FLOPS reached by the head matmul in estimates.
pub const UNIT_COMPUTE_EFFICIENCY: f64 = 0.5;
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
/// Bytes per parameter of the unit buffers Cephalo's trainer held when the
/// reference non-state memory was measured: fp32 gathered parameters and
/// fp32 gradient buffers (4 B each).
pub const REFERENCE_BUFFER_BYTES_PER_PARAM: f64 = 4.0;

/// What a simulation or plan is about.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The GPUs and their links.
    pub cluster: Cluster,
    /// The model.
    pub model: ModelSpec,
    /// Tokens per sample (for ViT: the real token count, e.g. 577).
    pub seq_len: u32,
    /// Precision.
    pub dtype: Dtype,
    /// Global batch (samples per iteration).
    pub global_batch: u32,
}

/// Knobs of the cost and memory model.
#[derive(Debug, Clone)]
pub struct CostOptions {
    /// Fraction of each GPU's memory a plan may use (the paper's 0.75).
    pub mem_fraction: f64,
    /// Fixed framework overhead per GPU (CUDA context, allocator slack), GiB.
    pub overhead_gib: f64,
    /// Memory cluster of the reference data to take non-state memory from.
    pub memory_cluster: Option<String>,
    /// Collective algorithm choice (default: as NCCL picks).
    pub comm_algo: CommAlgo,
    /// Compute slowdown while a collective runs on the same GPU, as a
    /// fraction (0.1: kernels take 10% longer); 0 turns it off. Default
    /// [`DEFAULT_COMM_INTERFERENCE`].
    pub comm_interference: f64,
}

/// Default compute slowdown while NCCL kernels run on the same GPU.
///
/// NCCL's ring kernels occupy one thread block per channel (typically 8-16
/// of an A100's 108 SMs for large collectives, ~7-15%) and a share of HBM
/// bandwidth for the reduction and copies; measurements of overlapped
/// GEMMs and all-reduces report compute kernels slowed by roughly 10-30%
/// (Rashidi et al., "Enabling Compute-Communication Overlap in Distributed
/// Deep Learning Training Platforms", ISCA 2021; Jangda et al., "Breaking
/// the Computation and Communication Abstraction Barrier", ASPLOS 2022).
/// 0.1 is the low end of that range, the SM share of a typical channel
/// count; set `--comm-interference` for your system.
pub const DEFAULT_COMM_INTERFERENCE: f64 = 0.1;

/// Largest accepted `comm_interference` (a 4x slowdown is already beyond
/// anything measured).
pub const MAX_COMM_INTERFERENCE: f64 = 3.0;

impl Default for CostOptions {
    fn default() -> Self {
        CostOptions {
            mem_fraction: 0.75,
            overhead_gib: 2.0,
            memory_cluster: None,
            comm_algo: CommAlgo::Auto,
            comm_interference: DEFAULT_COMM_INTERFERENCE,
        }
    }
}

/// Costs of one GPU type for this workload.
#[derive(Debug, Clone)]
pub struct GpuTypeCost {
    /// The GPU.
    pub gpu: GpuSpec,
    /// Block forward/backward curve as profiled (or predicted), with the
    /// kernel of [`GpuTypeCost::measured_attention`]; carries its source.
    pub block: ComputeCurve,
    /// The attention kernel `block` was measured (or predicted) with.
    pub measured_attention: Attention,
    /// Block curve per attention kernel ([`Attention::index`]); the
    /// measured kernel's entry is `block`, the other one scaled from it by
    /// the predictor's kernel ratio (`None` when the predictor cannot run
    /// this GPU and dtype).
    pub kernels: [Option<ComputeCurve>; 2],
    /// Per attention kernel: the fraction of the forward a selective
    /// recompute reruns, at micro-batch sizes 1..=N (the last value beyond).
    pub selective_fraction: [Vec<f64>; 2],
    /// Data-quality flags of the block profile used.
    pub block_flags: Vec<String>,
    /// Measured unit costs, if any.
    pub units: Option<UnitProfile>,
    /// The predictor's cross-validated error band for this GPU, when
    /// the block curve is analytic ([`Predictor::error_band`]).
    pub analytic_error_band: Option<String>,
}

impl GpuTypeCost {
    /// The block curve of `attention`, if this GPU has one.
    pub fn curve(&self, attention: Attention) -> Option<&ComputeCurve> {
        self.kernels[attention.index()].as_ref()
    }

    /// Where the block times of `attention` come from, for reports.
    pub fn curve_source(&self, attention: Attention) -> String {
        let band = match &self.analytic_error_band {
            Some(b) => format!(", {b}"),
            None => String::new(),
        };
        if attention == self.measured_attention {
            format!("{}{band}", self.block.source)
        } else {
            format!(
                "{}{band}, scaled to {} attention by the predictor's kernel ratio",
                self.block.source,
                attention.name()
            )
        }
    }
}

/// Activation memory of the workload: the analytic sizes anchored to the
/// measured non-state memory (see the module docs). Bytes.
#[derive(Debug, Clone)]
pub struct ActivationModel {
    /// Analytic sizes per attention kernel ([`Attention::index`]), bytes per sample.
    pub per_sample: [BlockActivations; 2],
    /// The kernel the non-state memory curve was measured with.
    pub measured_attention: Attention,
    /// Unit buffers inside the measured curve (`B_ref`), bytes.
    pub buffers_ref_bytes: f64,
    /// Constant part of the measured curve beyond the buffers (workspaces,
    /// allocator slack), bytes; part of every GPU's base memory.
    pub fixed_bytes: f64,
    /// `s(m)` for m = 1..=N (the last value beyond): measured activation
    /// peak over the analytic one.
    pub scale: Vec<f64>,
}

impl ActivationModel {
    /// The analytic sizes unanchored (`s = 1`, `F0 = 0`).
    fn analytic(
        per_sample: [BlockActivations; 2],
        measured_attention: Attention,
        buffers_ref_bytes: f64,
    ) -> ActivationModel {
        ActivationModel {
            per_sample,
            measured_attention,
            buffers_ref_bytes,
            fixed_bytes: 0.0,
            scale: vec![1.0; ANALYTIC_TABLE_MAX_BATCH as usize],
        }
    }

    /// Whether the sizes are anchored to a measurement.
    pub fn anchored(&self) -> bool {
        self.fixed_bytes != 0.0 || self.scale.iter().any(|&s| s != 1.0)
    }

    /// Anchors the analytic sizes to `act_gib(m)` measured at m = 1..=`measured`.
    fn anchor(
        act: &ActMemory,
        per_sample: [BlockActivations; 2],
        measured_attention: Attention,
        layers: u32,
        buffers_ref_bytes: f64,
        measured: usize,
    ) -> ActivationModel {
        let a_ref = per_sample[measured_attention.index()].reference_peak(layers);
        let n = measured.clamp(1, ANALYTIC_TABLE_MAX_BATCH as usize);
        let y: Vec<f64> = (1..=n as u32)
            .map(|m| act.gib(m) * GIB - buffers_ref_bytes)
            .collect();
        // Least squares y = F0 + s x with x = m * a_ref; F0 >= 0, no more
        // than the smallest measurement.
        let fixed = if n >= 2 && a_ref > 0.0 {
            let xs: Vec<f64> = (1..=n).map(|m| m as f64 * a_ref).collect();
            let (mx, my) = (
                xs.iter().sum::<f64>() / n as f64,
                y.iter().sum::<f64>() / n as f64,
            );
            let var: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
            let cov: f64 = xs.iter().zip(&y).map(|(x, v)| (x - mx) * (v - my)).sum();
            let slope = if var > 0.0 { cov / var } else { 0.0 };
            (my - slope * mx).clamp(
                0.0,
                y.iter().copied().fold(f64::INFINITY, f64::min).max(0.0),
            )
        } else {
            0.0
        };
        let scale = (1..=ANALYTIC_TABLE_MAX_BATCH)
            .map(|m| {
                let ym = act.gib(m) * GIB - buffers_ref_bytes - fixed;
                let x = m as f64 * a_ref;
                if x > 0.0 && ym.is_finite() {
                    (ym / x).max(0.0)
                } else {
                    0.0
                }
            })
            .collect();
        ActivationModel {
            per_sample,
            measured_attention,
            buffers_ref_bytes,
            fixed_bytes: fixed,
            scale,
        }
    }

    /// `s(m)`: the factor on every analytic activation size at micro-batch `m`.
    pub fn scale_at(&self, m: u32) -> f64 {
        if m == 0 || self.scale.is_empty() {
            return 0.0;
        }
        let i = (m as usize - 1).min(self.scale.len() - 1);
        self.scale[i]
    }

    /// Activation sizes of a micro-batch of `m` samples with `attention`,
    /// bytes (analytic per-sample sizes times `m` times `s(m)`).
    pub fn micro(&self, m: u32, attention: Attention) -> BlockActivations {
        let k = m as f64 * self.scale_at(m);
        let b = &self.per_sample[attention.index()];
        BlockActivations {
            checkpoint: b.checkpoint * k,
            saved_none: b.saved_none * k,
            saved_selective: b.saved_selective * k,
            grad_work: b.grad_work * k,
            nograd_work: b.nograd_work * k,
            head_work: b.head_work * k,
        }
    }
}

/// Non-state memory against micro-batch size.
#[derive(Debug, Clone)]
pub enum ActMemory {
    /// From a memory profile (imported or measured).
    Profile(MemoryProfile),
    /// Tabulated from the predictor for m = 1..=len, linear beyond.
    Analytic {
        /// GiB at micro-batch size i+1.
        act_gib: Vec<f64>,
        /// Predictor description.
        model: String,
    },
}

impl ActMemory {
    /// Non-state GiB at micro-batch size `m` (0 for `m == 0`).
    pub fn gib(&self, m: u32) -> f64 {
        if m == 0 {
            return 0.0;
        }
        match self {
            ActMemory::Profile(p) => p.act_gib(m),
            ActMemory::Analytic { act_gib, .. } => {
                let n = act_gib.len();
                let i = m as usize - 1;
                if i < n {
                    act_gib[i]
                } else {
                    let slope = act_gib[n - 1] - act_gib[n - 2];
                    act_gib[n - 1] + slope * (m as f64 - n as f64)
                }
            }
        }
    }

    /// Where the numbers came from.
    pub fn source(&self) -> Source {
        match self {
            ActMemory::Profile(p) => p.source.clone(),
            ActMemory::Analytic { model, .. } => Source::Analytic {
                model: model.clone(),
            },
        }
    }
}

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

/// Bytes of the unit buffers Cephalo's trainer held at its memory peak in
/// the reference configuration (prefetch on, previous reduce-scatter done):
/// the largest over its phases of this unit's fp32 parameters, the next
/// phase's prefetched parameters and this unit's fp32 gradients. For block
/// phases that is `3 x P_block x 4 B`; the head phase (head parameters and
/// gradients plus the prefetched last block) is larger when the head is
/// untied.
pub fn reference_buffers_bytes(model: &ModelSpec) -> f64 {
    let l = model.layers as usize;
    let mut unit = Vec::with_capacity(l + 2);
    unit.push(model.embedding_params() as f64);
    unit.extend(std::iter::repeat_n(model.params_per_block() as f64, l));
    unit.push(model.head_params() as f64);
    // Phases: Forward(0..=L), Head, Backward(L..=0): (unit, reduces).
    let mut phases: Vec<(usize, bool)> = (0..=l).map(|u| (u, false)).collect();
    phases.push((l + 1, true));
    phases.extend((0..=l).rev().map(|u| (u, true)));
    let b = REFERENCE_BUFFER_BYTES_PER_PARAM;
    (0..phases.len())
        .map(|p| {
            let (u, reduces) = phases[p];
            let next = phases.get(p + 1).map_or(0.0, |q| unit[q.0]);
            b * (unit[u] + next + if reduces { unit[u] } else { 0.0 })
        })
        .fold(0.0, f64::max)
}

/// The comm topology of a cluster (links per node) under algorithm `algo`.
pub fn comm_topology(cluster: &Cluster, algo: CommAlgo) -> CommTopology {
    CommTopology {
        nodes: cluster
            .nodes
            .iter()
            .map(|n| NodeLinks {
                nvlink_gbps: n.nvlink_gbps,
                bridged: n.fabric == crate::cluster::IntraFabric::NvlinkBridge,
                pcie_gbps: n.pcie_gbps,
                nvlink_latency_us: n.nvlink_latency_us,
                pcie_latency_us: n.pcie_latency_us,
                gpus: n.gpus,
                nics: n.nics,
                nic_gbps: n.nic_gbps,
                net_latency_us: n.net_latency_us,
            })
            .collect(),
        algo,
    }
}

/// The GPUs `ranks` of `cluster` (ring order) as collective participants
/// with `pieces` (bytes, one per rank).
pub fn collective_ranks(cluster: &Cluster, ranks: &[usize], pieces: &[f64]) -> Vec<CollectiveRank> {
    ranks
        .iter()
        .zip(pieces)
        .map(|(&r, &p)| {
            let g = &cluster.gpus[r];
            CollectiveRank {
                node: g.node,
                local: g.local,
                piece_bytes: p,
            }
        })
        .collect()
}

/// The communication model of `cluster` under `algo`: the analytic NCCL
/// model, or a measured table over the profiles' collectives (nccl-tests
/// imports, the exec profiler's tables) with the analytic model behind it.
pub fn comm_model(
    cluster: &Cluster,
    algo: CommAlgo,
    profiles: &ProfileSet,
) -> Result<Arc<dyn CommModel>, SpecError> {
    let topo = comm_topology(cluster, algo);
    topo.validate("cluster")?;
    let ring = RingModel::new(topo);
    let points = measured_points(profiles);
    Ok(if points.is_empty() {
        Arc::new(ring)
    } else {
        Arc::new(MeasuredTable::new("profiles: collectives", ring, &points)?)
    })
}

/// One link an op keeps busy while it runs, for the engine's link sharing:
/// the engine's resource id and the fraction of the op's duration (alone)
/// the link is busy, in `(0, 1]`.
pub type LinkShare = (u32, f32);

/// Maps the cluster's directed links to dense resource ids: per GPU `g`
/// `4g + {0: NVLink out, 1: NVLink in, 2: PCIe out, 3: PCIe in}`, then
/// two per NIC (out, in).
#[derive(Debug, Clone)]
pub struct LinkIds {
    node_first_rank: Vec<usize>,
    nic_offset: Vec<usize>,
    ranks: usize,
}

impl LinkIds {
    fn new(cluster: &Cluster) -> LinkIds {
        let mut node_first_rank = vec![usize::MAX; cluster.nodes.len()];
        for g in &cluster.gpus {
            node_first_rank[g.node] = node_first_rank[g.node].min(g.rank);
        }
        let mut nic_offset = Vec::with_capacity(cluster.nodes.len());
        let mut off = 0;
        for n in &cluster.nodes {
            nic_offset.push(off);
            off += n.nics;
        }
        LinkIds {
            node_first_rank,
            nic_offset,
            ranks: cluster.len(),
        }
    }

    /// Resource id of `link`.
    pub fn id(&self, link: LinkRef) -> u32 {
        let dir = usize::from(!link.tx);
        let id = match link.kind {
            LinkKind::Nvlink => 4 * (self.node_first_rank[link.node] + link.index) + dir,
            LinkKind::Pcie => 4 * (self.node_first_rank[link.node] + link.index) + 2 + dir,
            LinkKind::Nic => 4 * self.ranks + 2 * (self.nic_offset[link.node] + link.index) + dir,
        };
        id as u32
    }

    /// The PCIe link of GPU `rank`, out (device to host) or in.
    pub fn pcie(&self, rank: usize, out: bool) -> u32 {
        (4 * rank + 2 + usize::from(!out)) as u32
    }

    /// A rank of the node link `id` belongs to: the GPU itself for its
    /// NVLink and PCIe links, the node's first GPU for a NIC.
    pub fn owner_rank(&self, id: u32) -> usize {
        let id = id as usize;
        if id < 4 * self.ranks {
            return id / 4;
        }
        let nic = (id - 4 * self.ranks) / 2;
        // The last node whose first NIC is at or before `nic`.
        let node = self
            .nic_offset
            .partition_point(|&o| o <= nic)
            .saturating_sub(1);
        self.node_first_rank[node]
    }
}

fn analytic_curve(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: Dtype,
) -> Result<ComputeCurve, String> {
    let sizes: Vec<u32> = (1..=ANALYTIC_TABLE_MAX_BATCH).collect();
    let mut f = Vec::with_capacity(sizes.len());
    let mut b = Vec::with_capacity(sizes.len());
    for &m in &sizes {
        let (x, y) = pred.block_ms(gpu, model, seq, dtype, m)?;
        f.push(x);
        b.push(y);
    }
    Ok(with_tail_fit(ComputeCurve::from_points(
        sizes,
        f,
        b,
        Source::Analytic { model: pred.name() },
    )))
}

/// `c` with its extrapolation replaced by the line through its last two
/// points, which keeps large micro-batches on the predictor's asymptotic
/// slope.
fn with_tail_fit(mut c: ComputeCurve) -> ComputeCurve {
    let n = c.batch_sizes.len();
    if n < 2 {
        return c;
    }
    for (vals, fit) in [(&c.fwd_ms, &mut c.fwd_fit), (&c.bwd_ms, &mut c.bwd_fit)] {
        let slope = vals[n - 1] - vals[n - 2];
        fit.slope = slope;
        fit.intercept = vals[n - 1] - slope * n as f64;
    }
    c
}

/// The curve of the attention kernel `to`, from `measured` (taken with
/// `from`) scaled at every micro-batch size 1..=N by the predictor's ratio
/// of the two kernels on `gpu`; beyond N the line through the last two
/// points. `None` when the predictor cannot run this GPU and dtype.
#[allow(clippy::too_many_arguments)]
fn kernel_curve(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: Dtype,
    measured: &ComputeCurve,
    from: Attention,
    to: Attention,
) -> Option<ComputeCurve> {
    let sizes: Vec<u32> = (1..=ANALYTIC_TABLE_MAX_BATCH).collect();
    let mut f = Vec::with_capacity(sizes.len());
    let mut b = Vec::with_capacity(sizes.len());
    for &m in &sizes {
        let p0 = pred
            .block_prediction(gpu, model, seq, dtype, m, from)
            .ok()?;
        let p1 = pred.block_prediction(gpu, model, seq, dtype, m, to).ok()?;
        if !(p0.fwd_ms > 0.0 && p0.bwd_ms > 0.0) {
            return None;
        }
        f.push(measured.fwd_ms(m) * p1.fwd_ms / p0.fwd_ms);
        b.push(measured.bwd_ms(m) * p1.bwd_ms / p0.bwd_ms);
    }
    Some(with_tail_fit(ComputeCurve::from_points(
        sizes,
        f,
        b,
        measured.source.clone(),
    )))
}

/// Per micro-batch size 1..=N, the predictor's fraction of the forward a
/// selective recompute reruns (0 where it cannot predict).
fn selective_fractions(
    pred: &dyn Predictor,
    gpu: &GpuSpec,
    model: &ModelSpec,
    seq: u32,
    dtype: Dtype,
    attention: Attention,
) -> Vec<f64> {
    (1..=ANALYTIC_TABLE_MAX_BATCH)
        .map(
            |m| match pred.block_prediction(gpu, model, seq, dtype, m, attention) {
                Ok(p) if p.fwd_ms > 0.0 => (p.selective_recompute_ms / p.fwd_ms).clamp(0.0, 1.0),
                _ => 0.0,
            },
        )
        .collect()
}

/// Whether a catalog device is a CPU (arch `cpu`).
pub fn is_cpu(gpu: &GpuSpec) -> bool {
    gpu.arch == "cpu"
}

/// Warnings for imported collective curves (nccl-tests logs) measured on a
/// shape (ranks, nodes) no group of this cluster has (the whole cluster or
/// one node): those groups use them rescaled to equal bus bandwidth.
fn rescale_warnings(cluster: &Cluster, profiles: &ProfileSet) -> Vec<String> {
    // (ranks, nodes) of the whole cluster and of each node.
    let mut shapes: Vec<(usize, usize)> = vec![(cluster.len(), cluster.nodes.len())];
    shapes.extend(cluster.nodes.iter().map(|n| (n.gpus, 1)));
    let mut seen: Vec<(String, u32)> = Vec::new();
    let mut out = Vec::new();
    for c in profiles.collectives.iter().filter(|c| c.rescalable) {
        let key = (c.kind.clone(), c.ranks);
        let fits = shapes
            .iter()
            .any(|&(r, n)| r == c.ranks as usize && c.nodes.is_none_or(|m| m as usize == n));
        if fits || seen.contains(&key) {
            continue;
        }
        out.push(format!(
            "{} measured on {} ranks{}: no group of this cluster has that shape; groups of another size on the same number of nodes use it rescaled to equal bus bandwidth (time x f(p)/f({}), f = (p-1)/p, or 2(p-1)/p for all-reduce), the rest the analytic model",
            c.kind,
            c.ranks,
            c.nodes.map(|n| format!(" on {n} nodes")).unwrap_or_default(),
            c.ranks
        ));
        seen.push(key);
    }
    out
}

/// Measured collective samples as table points: kind, group size and the
/// even-equivalent buffer `bytes x imbalance` (the table's lookup key: a
/// ring is paced by its largest piece). Samples of one rank or zero bytes
/// carry no information and are skipped; unknown kinds were rejected when
/// the profile was read.
pub fn measured_points(profiles: &ProfileSet) -> Vec<MeasuredPoint> {
    profiles
        .collectives
        .iter()
        .filter(|c| c.ranks >= 2 && c.bytes > 0.0)
        .filter_map(|c| {
            let kind = match c.kind.as_str() {
                "all_gather" => CollectiveKind::AllGather,
                "reduce_scatter" => CollectiveKind::ReduceScatter,
                "all_reduce" => CollectiveKind::AllReduce,
                _ => return None,
            };
            Some(MeasuredPoint {
                kind,
                group_size: c.ranks as usize,
                nodes: c.nodes.map(|n| n as usize),
                total_bytes: c.bytes * c.imbalance.max(1.0),
                time_ms: c.time_ms,
                rescalable: c.rescalable,
            })
        })
        .collect()
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
        if workload.seq_len == 0 {
            return Err(SpecError::invalid(
                "--seq-len",
                "seq_len",
                "expected a sequence length >= 1",
            ));
        }
        if workload.global_batch == 0 {
            return Err(SpecError::invalid(
                "--global-batch",
                "global_batch",
                "expected a global batch >= 1",
            ));
        }
        crate::limits::check_workload(
            workload.cluster.len(),
            workload.global_batch,
            workload.seq_len,
        )?;
        // Where the dtype meets the cluster's GPUs: each type once, in rank order.
        let mut seen: Vec<&str> = Vec::new();
        for g in &workload.cluster.gpus {
            if !seen.contains(&g.spec.name.as_str()) {
                seen.push(&g.spec.name);
                g.spec.check_dtype(workload.dtype, "--dtype", "dtype")?;
            }
        }
        if !(options.mem_fraction > 0.0 && options.mem_fraction <= 1.0) {
            return Err(SpecError::invalid(
                "--mem-fraction",
                "mem_fraction",
                format!(
                    "expected a fraction in (0, 1], got {}",
                    options.mem_fraction
                ),
            ));
        }
        crate::physical::check(
            "--overhead-gib",
            "overhead_gib",
            options.overhead_gib,
            &crate::physical::MEM_GIB,
        )?;
        let mut warnings = Vec::new();
        let mut types: Vec<Arc<GpuTypeCost>> = Vec::new();
        let mut rank_type = Vec::with_capacity(workload.cluster.len());
        let (model, seq, dtype) = (&workload.model, workload.seq_len, workload.dtype);
        for g in &workload.cluster.gpus {
            if let Some(i) = types.iter().position(|t| t.gpu.name == g.spec.name) {
                rank_type.push(i);
                continue;
            }
            let (block, flags, measured_attention) =
                match profiles.block(&g.spec.name, &model.name, seq, dtype) {
                    Some(p) => {
                        for f in &p.flags {
                            warnings.push(format!(
                                "{} / {} / {seq} / {dtype}: {f}",
                                g.spec.name, model.name
                            ));
                        }
                        (p.curve.clone(), p.flags.clone(), p.attention)
                    }
                    None => {
                        if let Some(r) =
                            profiles.rejected_block(&g.spec.name, &model.name, seq, dtype)
                        {
                            return Err(SpecError::invalid(
                                r.origin.clone(),
                                r.entry.clone(),
                                format!("{} (this run needs the entry; fix or remove it)", r.why),
                            ));
                        }
                        let c = analytic_curve(predictor, &g.spec, model, seq, dtype).map_err(
                            |why| SpecError::MissingProfile {
                                gpu: g.spec.name.clone(),
                                model: model.name.clone(),
                                seq_len: seq,
                                dtype: dtype.to_string(),
                                why,
                            },
                        )?;
                        (c, vec![], Attention::Eager)
                    }
                };
            // Whatever its source, the curve this run uses must be physical;
            // the error names the file and entry (or the predictor).
            let peak = g.spec.peak_tflops(dtype).unwrap_or(0.0);
            if let Some(why) = block.physical_problem(model.block_flops_fwd(seq), peak) {
                let key = format!("{}/{}/{seq}/{dtype}", g.spec.name, model.name);
                return Err(match &block.source {
                    Source::Imported { origin, entry } => {
                        SpecError::invalid(origin.clone(), entry.clone(), why)
                    }
                    Source::Measured { origin } => SpecError::invalid(origin.clone(), key, why),
                    other => SpecError::invalid(
                        other.to_string(),
                        key,
                        format!("the performance model's prediction is not physical: {why}"),
                    ),
                });
            }
            let units = profiles
                .unit(&g.spec.name, &model.name, seq, dtype)
                .cloned();
            let other = match measured_attention {
                Attention::Eager => Attention::Flash,
                Attention::Flash => Attention::Eager,
            };
            let derived = kernel_curve(
                predictor,
                &g.spec,
                model,
                seq,
                dtype,
                &block,
                measured_attention,
                other,
            );
            let mut kernels = [None, None];
            kernels[measured_attention.index()] = Some(block.clone());
            kernels[other.index()] = derived;
            // A long prediction is an answer, said once: the fastest kernel's
            // smallest micro-batch.
            let fastest = kernels
                .iter()
                .flatten()
                .filter_map(|c| {
                    Some((
                        *c.batch_sizes.first()?,
                        c.fwd_ms.first()? + c.bwd_ms.first()?,
                    ))
                })
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((m, ms)) = fastest.filter(|f| f.1 > crate::physical::LONG_PASS_MS) {
                warnings.push(format!(
                    "{} / {} / {seq} / {dtype}: one block's forward + backward takes {:.1} h at micro-batch {m} ({}): a long run, not an error",
                    g.spec.name,
                    model.name,
                    ms / 3.6e6,
                    block.source.label()
                ));
            }
            let selective_fraction = [Attention::Eager, Attention::Flash]
                .map(|a| selective_fractions(predictor, &g.spec, model, seq, dtype, a));
            rank_type.push(types.len());
            let analytic_error_band = (block.source.rank() == 2)
                .then(|| predictor.error_band(&g.spec.name))
                .flatten();
            types.push(Arc::new(GpuTypeCost {
                gpu: g.spec.clone(),
                block,
                measured_attention,
                kernels,
                selective_fraction,
                analytic_error_band,
                block_flags: flags,
                units,
            }));
        }
        let act = match profiles.memory(options.memory_cluster.as_deref(), &model.name, dtype) {
            Some(p) => ActMemory::Profile(p.clone()),
            None => {
                if let Some(c) = &options.memory_cluster {
                    let have = profiles.memory_clusters();
                    if !have.contains(c) {
                        return Err(SpecError::invalid(
                            "--memory-cluster",
                            "memory_cluster",
                            format!(
                                "no memory cluster `{c}` in the profiles (have: {})",
                                have.join(", ")
                            ),
                        ));
                    }
                    warnings.push(format!(
                        "memory cluster `{c}` has no {dtype} entry for {}; non-state memory is predicted analytically",
                        model.name
                    ));
                }
                ActMemory::Analytic {
                    act_gib: (1..=ANALYTIC_TABLE_MAX_BATCH)
                        .map(|m| predictor.act_mem_gib(model, seq, dtype, m))
                        .collect(),
                    model: match predictor.memory_error_band() {
                        Some(b) => format!("{}, {b}", predictor.name()),
                        None => predictor.name(),
                    },
                }
            }
        };
        let measured_len = match &act {
            ActMemory::Profile(p) => p.act_gib.len(),
            ActMemory::Analytic { act_gib, .. } => act_gib.len(),
        };
        let measured_attention = if types
            .iter()
            .all(|t| t.measured_attention == Attention::Flash)
        {
            Attention::Flash
        } else {
            Attention::Eager
        };
        let per_sample = [Attention::Eager, Attention::Flash]
            .map(|a| BlockActivations::new(model, seq, dtype, a));
        let activations = match &act {
            ActMemory::Profile(p)
                if model.tokens_per_sample(p.seq_len.unwrap_or(model.seq_len)) == seq =>
            {
                ActivationModel::anchor(
                    &act,
                    per_sample,
                    measured_attention,
                    model.layers,
                    reference_buffers_bytes(model),
                    measured_len,
                )
            }
            other => {
                if let ActMemory::Profile(p) = other {
                    warnings.push(format!(
                        "the memory profile of {} ({}) was measured at {} tokens per sample, not {seq}: activation memory comes from the analytic per-tensor model",
                        model.name,
                        p.source,
                        model.tokens_per_sample(p.seq_len.unwrap_or(model.seq_len))
                    ));
                }
                ActivationModel::analytic(
                    per_sample,
                    measured_attention,
                    reference_buffers_bytes(model),
                )
            }
        };
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

    /// The attention kernel the block profiles in use were measured with:
    /// flash only when every GPU's profile was (predictions are eager).
    pub fn profile_attention(&self) -> Attention {
        self.activations.measured_attention
    }

    /// Forward and backward ms of one block at micro-batch `m` on `rank`
    /// with `attention`; `Err` naming the GPU when it has no such curve.
    pub fn block_ms_with(
        &self,
        rank: usize,
        m: u32,
        attention: Attention,
    ) -> Result<(f64, f64), String> {
        let t = self.gpu_type(rank);
        match t.curve(attention) {
            Some(c) => Ok((c.fwd_ms(m), c.bwd_ms(m))),
            None => Err(format!(
                "no {} attention times for {}: the profile was measured with {} attention and the predictor cannot run {} {}",
                attention.name(),
                t.gpu.name,
                t.measured_attention.name(),
                t.gpu.name,
                self.workload.dtype
            )),
        }
    }

    /// ms of a selective recompute of one block at micro-batch `m` on
    /// `rank` with `attention` (the predictor's fraction of that forward).
    pub fn selective_recompute_ms(
        &self,
        rank: usize,
        m: u32,
        attention: Attention,
        fwd_ms: f64,
    ) -> f64 {
        let v = &self.gpu_type(rank).selective_fraction[attention.index()];
        if m == 0 || v.is_empty() {
            return 0.0;
        }
        v[(m as usize - 1).min(v.len() - 1)] * fwd_ms
    }

    fn unit_ms(
        &self,
        rank: usize,
        m: u32,
        pick: fn(&UnitProfile) -> &Vec<f64>,
        estimate: f64,
    ) -> f64 {
        match &self.gpu_type(rank).units {
            Some(u) => {
                let c = ComputeCurve::from_points(
                    u.batch_sizes.clone(),
                    pick(u).clone(),
                    pick(u).clone(),
                    u.source.clone(),
                );
                c.fwd_ms(m)
            }
            None => estimate,
        }
    }

    fn roofline_ms(&self, rank: usize, flops: f64, bytes: f64) -> f64 {
        let gpu = self.gpu(rank);
        let peak = gpu
            .peak_tflops(self.workload.dtype)
            .unwrap_or(gpu.fp32_tflops);
        let c = flops / (peak * 1e12 * UNIT_COMPUTE_EFFICIENCY) * 1e3;
        let b = bytes / (gpu.mem_bw_gbps * 1e9 * UNIT_BANDWIDTH_EFFICIENCY) * 1e3;
        c.max(b)
    }

    fn act_bytes(&self, m: u32) -> f64 {
        let w = &self.workload;
        m as f64
            * w.model.tokens_per_sample(w.seq_len) as f64
            * w.model.hidden as f64
            * w.dtype.bytes()
    }

    /// Embedding forward ms for `m` samples.
    pub fn embed_fwd_ms(&self, rank: usize, m: u32) -> f64 {
        let w = &self.workload;
        let est = self.roofline_ms(
            rank,
            w.model.embedding_flops_fwd(w.seq_len) * m as f64,
            2.0 * self.act_bytes(m),
        );
        self.unit_ms(rank, m, |u| &u.embed_fwd_ms, est)
    }

    /// Embedding backward ms for `m` samples (dense gradient of the table).
    pub fn embed_bwd_ms(&self, rank: usize, m: u32) -> f64 {
        let w = &self.workload;
        let table = w.model.embedding_params() as f64 * 4.0;
        let est = self.roofline_ms(
            rank,
            2.0 * w.model.embedding_flops_fwd(w.seq_len) * m as f64,
            table + self.act_bytes(m),
        );
        self.unit_ms(rank, m, |u| &u.embed_bwd_ms, est)
    }

    /// Head (final norm, LM head / classifier, loss) forward ms for `m` samples.
    pub fn head_fwd_ms(&self, rank: usize, m: u32) -> f64 {
        let w = &self.workload;
        let logits =
            m as f64 * w.model.tokens_per_sample(w.seq_len) as f64 * w.model.vocab as f64 * 4.0;
        let est = self.roofline_ms(
            rank,
            w.model.head_flops_fwd(w.seq_len) * m as f64,
            2.0 * logits,
        );
        self.unit_ms(rank, m, |u| &u.head_fwd_ms, est)
    }

    /// Head backward ms for `m` samples.
    pub fn head_bwd_ms(&self, rank: usize, m: u32) -> f64 {
        let w = &self.workload;
        let logits =
            m as f64 * w.model.tokens_per_sample(w.seq_len) as f64 * w.model.vocab as f64 * 4.0;
        let est = self.roofline_ms(
            rank,
            2.0 * w.model.head_flops_fwd(w.seq_len) * m as f64,
            2.0 * logits,
        );
        self.unit_ms(rank, m, |u| &u.head_bwd_ms, est)
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

    /// Memory a plan may use on `rank` (capacity x allowed fraction), GiB.
    pub fn usable_gib(&self, rank: usize) -> f64 {
        self.capacity_gib(rank) * self.options.mem_fraction
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::CollectiveKind;
    use crate::gpu::GpuCatalog;
    use crate::model::ModelCatalog;
    use crate::profile::CollectiveSample;

    /// A constant predictor (the tests below do not depend on its numbers;
    /// 100 ms per sample keeps even a CPU below its peak).
    #[derive(Debug)]
    struct Flat;

    impl Predictor for Flat {
        fn block_ms(
            &self,
            _: &GpuSpec,
            _: &ModelSpec,
            _: u32,
            _: Dtype,
            m: u32,
        ) -> Result<(f64, f64), String> {
            Ok((100.0 * m as f64, 200.0 * m as f64))
        }
        fn block_prediction(
            &self,
            _: &GpuSpec,
            _: &ModelSpec,
            _: u32,
            _: Dtype,
            m: u32,
            attention: Attention,
        ) -> Result<crate::perfmodel::BlockPrediction, String> {
            let k = if attention == Attention::Flash {
                50.0
            } else {
                100.0
            };
            Ok(crate::perfmodel::BlockPrediction {
                fwd_ms: k * m as f64,
                bwd_ms: 2.0 * k * m as f64,
                selective_recompute_ms: 0.25 * k * m as f64,
            })
        }
        fn act_mem_gib(&self, _: &ModelSpec, _: u32, _: Dtype, m: u32) -> f64 {
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
            dtype: Dtype::Fp32,
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
        let (fe, be) = c.block_ms_with(0, 4, Attention::Eager).unwrap();
        let (ff, bf) = c.block_ms_with(0, 4, Attention::Flash).unwrap();
        assert!((ff - 0.5 * fe).abs() < 1e-9 && (bf - 0.5 * be).abs() < 1e-9);
        assert!((c.selective_recompute_ms(0, 4, Attention::Eager, fe) - 0.25 * fe).abs() < 1e-9);
        // Without a memory measurement the analytic sizes stand (s = 1).
        assert!(!c.activations.anchored());
        assert_eq!(c.activations.scale_at(7), 1.0);
        // A measurement at this sequence length anchors them: the reference
        // peak reproduces act(m) = B_ref + F0 + s(m) A_ref(m) wherever the
        // measurement exceeds the unit buffers (below that, activations are
        // 0 and the buffers alone set the peak).
        let mut p = ProfileSet::new();
        let mem = |seq| crate::profile::MemoryProfile {
            cluster: "x".into(),
            model: "gpt-test".into(),
            model_key: "gpt-test".into(),
            dtype: Dtype::Fp32,
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
            let peak = a.micro(m, Attention::Eager);
            let per = a.per_sample[0];
            let k = m as f64 * a.scale_at(m);
            assert!((peak.checkpoint - per.checkpoint * k).abs() < 1e-6);
            let got = a.buffers_ref_bytes + a.fixed_bytes + per.reference_peak(l) * k;
            let want = c.act_mem_gib(m) * GIB;
            if want > a.buffers_ref_bytes && m <= 64 {
                assert!((got - want).abs() < 1e-3 * want, "m={m}: {got} vs {want}");
                checked += 1;
            } else if want <= a.buffers_ref_bytes {
                assert_eq!(a.scale_at(m), 0.0);
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
