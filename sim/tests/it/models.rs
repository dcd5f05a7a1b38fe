//! Every model of an iteration held to the discrete-event simulator (the
//! reference) on random clusters and plans, each within a stated margin
//! measured on those clusters and plans:
//!
//! * the data-parallel closed form (`sim::planner::closed_form`, what the
//!   native planner searches): time against the simulator with every op
//!   alone and with links shared, memory against the simulated peaks
//!   ([`closed_form_follows_the_simulator`], and where it is weakest,
//!   hybrid sharding across many nodes,
//!   [`closed_form_follows_the_simulator_on_many_node_hybrid`]);
//! * the fast model (`sim::fast::evaluate`) against the simulator with
//!   links shared ([`fast_model_bounds_the_simulator_with_contention`]);
//! * the pipeline estimate (`sim::pipeline::estimate`)
//!   ([`pipeline_estimate_follows_the_simulator_on_random_clusters`]);
//! * and the reported gap (hybrid no-sync on the shipped 1,024-GPU
//!   cluster), closed
//!   ([`hybrid_no_sync_on_the_1024_gpu_cluster_follows_the_simulator`]).
//!
//! The clusters: 1 to 3 kinds of node (a GPU type from the catalog, or two
//! sharing a node half and half) replicated into 1 to 96 nodes of 1 to 8
//! GPUs, five networks (10 to 400 Gbit/s, aggregate or NIC rails, with and
//! without GPUDirect RDMA); identical nodes are simulated once, so 768
//! GPUs cost what a few nodes do. The plans: every sharding (hybrid groups
//! of half a node, a node or two), accumulation, checkpointing
//! (none, full, selective, every:2, every:3) and offload, fp16 or fp32
//! gathers and reductions, per node kind a batch and micro-batch count
//! (state-only GPUs included) and one odd GPU; the state fractions are the
//! closed form's own (water-filled, or even shares).
//!
//! The margins come from [`measure`] (`#[ignore]`d; it runs the same checks
//! on hundreds of cases and prints the distributions they were set from:
//! `CASES=400 SEED=7 cargo test -p cephalo-sim --test it models::measure
//! -- --exact --ignored --nocapture`, and `models::measure_pipeline`
//! likewise; `CASES` also sets the property tests' case count).
//! Distributions quoted below: the data-parallel models on seven seeds
//! (`SEED`) of 300 to 400 small and as many many-node cases, the pipeline
//! estimate on five seeds of 800; each margin leaves room above what was
//! measured. The property tests draw their cases from a fixed seed
//! (`SEED` overrides it), so every run checks the same cases.

use proptest::prelude::*;
use proptest::strategy::{Strategy as _, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use sim::cluster::Cluster;
use sim::comm::CollectiveKind;
use sim::cost::{CostModel, CostOptions, Workload};
use sim::gpu::GpuCatalog;
use sim::iteration::SimOptions;
use sim::model::ModelCatalog;
use sim::plan::pipeline::{PipeSchedule, Pipeline, Stage};
use sim::plan::Plan;
use sim::planner::closed_form::ClosedForm;
use sim::precision::NumFormat;
use sim::profile::ProfileSet;
use sim::report::Report;
use sim::simulate::simulate;
use sim::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding, Strategy};
use sim::units::GIB;

/// GPU types of the random clusters and the link inside their nodes.
const GPUS: [(&str, &str); 10] = [
    ("t4", "pcie3"),
    ("l4", "pcie4"),
    ("a10g", "pcie4"),
    ("rtx-a6000", "nvlink-bridge"),
    ("v100-16gb", "nvlink"),
    ("v100-32gb", "nvlink"),
    ("a100-40gb", "nvlink"),
    ("a100-80gb", "nvswitch"),
    ("h100-sxm", "nvswitch"),
    ("l40s", "pcie4"),
];

/// Networks between nodes: an aggregate figure per node, or NICs by line
/// rate (one without GPUDirect RDMA, eight as rails).
const NETS: [&str; 5] = [
    "bw_gbit_s = 10\nlatency_us = 30\n",
    "bw_gbit_s = 25\n",
    "bw_gbit_s = 100\nlatency_us = 10\n",
    "nics = 1\nnic_gbit_s = 100\ngpudirect_rdma = false\n",
    "nics = 8\nnic_gbit_s = 400\n",
];

/// Models of the data-parallel cases (0.3 to 3.4 B parameters).
const MODELS: [&str; 5] = [
    "bert-large",
    "llama-tiny",
    "gpt-1.3b",
    "gpt-2.7b",
    "llama-3b",
];

/// Models of the pipeline cases (22 to 24 blocks).
const PIPE_MODELS: [&str; 3] = ["gpt-1.3b", "llama-tiny", "bert-large"];

/// Cases a property test runs: `default`, or `CASES` from the environment
/// (to re-measure on more).
fn cases(default: u32) -> u32 {
    std::env::var("CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The property tests' configuration: `default` cases (or `CASES`), drawn
/// from a fixed seed (or `SEED`) so a CI run checks the cases the margins
/// were measured on, not new ones each time.
fn config(default: u32) -> ProptestConfig {
    let seed = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2025);
    ProptestConfig {
        cases: cases(default),
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        ..ProptestConfig::default()
    }
}

/// One kind of node: its GPU type, or two types sharing it half and half.
#[derive(Debug, Clone, Copy)]
struct NodeKind {
    gpu: usize,
    second: Option<usize>,
}

/// The TOML of a cluster of `kinds` (each with its node count), `node_gpus`
/// GPUs per node, network `net`.
fn cluster_toml(kinds: &[(NodeKind, u32)], node_gpus: u32, net: usize) -> String {
    let mut t = format!("[network]\n{}", NETS[net]);
    for (k, reps) in kinds {
        let (a, link) = GPUS[k.gpu];
        let (gpus, link) = match k.second {
            Some(b) if node_gpus >= 2 => {
                let h = node_gpus / 2;
                let gpus = format!(
                    "[{{ type = \"{a}\", count = {h} }}, {{ type = \"{}\", count = {h} }}]",
                    GPUS[b].0
                );
                (gpus, "pcie4")
            }
            _ => (format!("[{{ type = \"{a}\", count = {node_gpus} }}]"), link),
        };
        for _ in 0..*reps {
            t.push_str(&format!(
                "[[nodes]]\nintra_link = \"{link}\"\ngpus = {gpus}\n"
            ));
        }
    }
    t
}

/// The cost model of `model` on the cluster `toml` (calibrated predictor,
/// no profile files).
fn cost_model(toml: &str, model: &str, global_batch: u32) -> CostModel {
    let cluster = Cluster::from_toml(toml, "test.toml", GpuCatalog::builtin()).unwrap();
    let model = ModelCatalog::builtin()
        .lookup(model, "test")
        .unwrap()
        .clone();
    let w = Workload {
        cluster,
        seq_len: model.tokens_per_sample(model.seq_len),
        model,
        dtype: NumFormat::Fp16,
        global_batch,
    };
    let pred = sim::perfmodel::builtin();
    CostModel::build(w, &ProfileSet::new(), pred.as_ref(), CostOptions::default()).unwrap()
}

/// The simulator with every op alone (the fast model's timing).
const ALONE: SimOptions = SimOptions {
    trace: false,
    prefetch: true,
    contention: false,
    merge_identical_nodes: true,
    blocking_collectives: false,
    fold_passes: true,
};

/// A random data-parallel case: a cluster of replicated node kinds, a
/// strategy and per node kind (batch, micro-batches).
#[derive(Debug, Clone)]
struct DpCase {
    /// Node kinds with how many nodes of each (in file order).
    kinds: Vec<(NodeKind, u32)>,
    /// GPUs per node.
    node_gpus: u32,
    net: usize,
    model: usize,
    sharding: Sharding,
    /// Hybrid: the shard group in half nodes (1: half a node, 2: a node,
    /// 4: two nodes).
    group_halves: u32,
    accumulation: Accumulation,
    checkpointing: Checkpointing,
    offload: Offload,
    param_fp32: bool,
    reduce_fp32: bool,
    /// Per node kind: batch per GPU (0: state only) and micro-batch count.
    work: Vec<(u32, u32)>,
    /// The first GPU of node kind `.0` gets `.1` more samples.
    odd: Option<(usize, u32)>,
    /// Micro-batch-major pass count.
    passes: u32,
}

impl DpCase {
    fn nodes(&self) -> u32 {
        self.kinds.iter().map(|k| k.1).sum()
    }

    fn strategy(&self, ranks: u32) -> Strategy {
        let shard_group = match self.sharding {
            Sharding::Hybrid => self.node_gpus * self.group_halves / 2,
            _ => ranks,
        };
        let dtype = |fp32| {
            if fp32 {
                NumFormat::Fp32
            } else {
                NumFormat::Fp16
            }
        };
        Strategy {
            sharding: self.sharding,
            shard_group,
            accumulation: self.accumulation,
            checkpointing: self.checkpointing,
            offload: self.offload,
            param_dtype: dtype(self.param_fp32),
            reduce_dtype: dtype(self.reduce_fp32),
            attention: Attention::Eager,
            stack: sim::strategy::Stack::PyTorch,
            compile: false,
        }
    }

    /// Per rank (batch, micro-batches).
    fn choice(&self, cluster: &Cluster) -> Vec<(u32, u32)> {
        let mut kind_of_node = Vec::new();
        for (k, (_, reps)) in self.kinds.iter().enumerate() {
            kind_of_node.extend(std::iter::repeat_n(k, *reps as usize));
        }
        let mut v: Vec<(u32, u32)> = cluster
            .gpus
            .iter()
            .map(|g| self.work[kind_of_node[g.node]])
            .collect();
        if let Some((k, extra)) = self.odd {
            let k = k % self.kinds.len();
            let node = kind_of_node.iter().position(|&x| x == k).unwrap();
            let r = node * self.node_gpus as usize;
            let (b, n) = v[r];
            v[r] = if self.accumulation.is_microbatch_major() {
                (b.max(self.passes) + extra, self.passes)
            } else {
                (b + extra, n.max(1))
            };
        }
        v
    }

    fn costs(&self) -> CostModel {
        let toml = cluster_toml(&self.kinds, self.node_gpus, self.net);
        let cluster = Cluster::from_toml(&toml, "test.toml", GpuCatalog::builtin()).unwrap();
        let batch = self.choice(&cluster).iter().map(|c| c.0).sum();
        cost_model(&toml, MODELS[self.model], batch)
    }

    /// Sharding, accumulation and node count, for the measured tables.
    fn family(&self) -> String {
        let sh = match self.sharding {
            Sharding::Hybrid => "hybrid",
            s => s.name(),
        };
        let nodes = match self.nodes() {
            1 => "1 node",
            2..=8 => "2-8 nodes",
            _ => ">8 nodes",
        };
        format!("{sh} {} {nodes}", self.accumulation.name())
    }
}

fn node_kind() -> impl proptest::strategy::Strategy<Value = NodeKind> {
    (0..GPUS.len(), prop::option::weighted(0.2, 0..GPUS.len()))
        .prop_map(|(gpu, second)| NodeKind { gpu, second })
}

fn checkpointing() -> impl proptest::strategy::Strategy<Value = Checkpointing> {
    prop_oneof![
        Just(Checkpointing::None),
        Just(Checkpointing::Full),
        Just(Checkpointing::Selective),
        (2u32..4).prop_map(Checkpointing::Every),
    ]
}

/// Random data-parallel cases: up to 3 node kinds of up to `max_reps`
/// nodes each, `node_sizes` GPUs per node, shardings `shardings`. Only
/// valid cases: hybrid groups divide the cluster into at least two; a
/// micro-batch-major rank with samples runs exactly the pass count.
fn arb_dp(
    max_reps: u32,
    node_sizes: &'static [u32],
    shardings: &'static [Sharding],
) -> impl proptest::strategy::Strategy<Value = DpCase> {
    (
        prop::collection::vec((node_kind(), 1..=max_reps), 1..=3),
        prop::sample::select(node_sizes),
        0..NETS.len(),
        0..MODELS.len(),
        prop::sample::select(shardings),
        prop::sample::select(&[1u32, 2, 4][..]),
        prop::sample::select(&Accumulation::ALL[..]),
        checkpointing(),
        prop::sample::select(&Offload::ALL[..]),
        any::<(bool, bool)>(),
        (
            prop::collection::vec((0u32..7, 1u32..5), 3),
            prop::option::weighted(0.3, (0usize..3, 1u32..4)),
            1u32..5,
        ),
    )
        .prop_filter_map(
            "hybrid needs two shard groups or more",
            |(kinds, node_gpus, net, model, sharding, halves, acc, ck, off, dt, more)| {
                let (work, odd, passes) = more;
                let mut c = DpCase {
                    kinds,
                    node_gpus,
                    net,
                    model,
                    sharding,
                    group_halves: halves,
                    accumulation: acc,
                    checkpointing: ck,
                    offload: off,
                    param_fp32: dt.0,
                    reduce_fp32: dt.1,
                    work: Vec::new(),
                    odd,
                    passes,
                };
                let ranks = c.nodes() * node_gpus;
                if sharding == Sharding::Hybrid {
                    if node_gpus == 1 && halves == 1 {
                        c.group_halves = 2;
                    }
                    let g = node_gpus * c.group_halves / 2;
                    if !ranks.is_multiple_of(g) || ranks / g < 2 {
                        return None;
                    }
                }
                let mb = acc.is_microbatch_major();
                c.work = work
                    .iter()
                    .map(|&(b, n)| match b {
                        0 => (0, 0),
                        _ if mb => (passes * b.div_ceil(2), passes),
                        _ => (b, n.min(b)),
                    })
                    .collect();
                if c.work[..c.kinds.len()].iter().all(|w| w.0 == 0) {
                    c.work[0] = if mb { (passes, passes) } else { (1, 1) };
                }
                Some(c)
            },
        )
}

/// Up to 9 nodes of 1 to 8 GPUs, every sharding.
fn arb_small() -> impl proptest::strategy::Strategy<Value = DpCase> {
    arb_dp(3, &[1, 2, 4, 8], &Sharding::ALL)
}

/// Hybrid sharding across many nodes: up to 3 node kinds of 8 GPUs, 8 to
/// 96 nodes in all (64 to 768 GPUs).
fn arb_many_hybrid() -> impl proptest::strategy::Strategy<Value = DpCase> {
    arb_dp(32, &[8], &[Sharding::Hybrid]).prop_filter("8 nodes or more", |c| c.nodes() >= 8)
}

/// One GPU's memory in one case, GiB.
#[derive(Debug, Clone)]
struct RankMem {
    usable: f64,
    /// The closed form's bound: its non-state peak plus the GPU's state.
    bound: f64,
    /// Simulated peak with every op alone and with links shared; the fast
    /// model's.
    alone: f64,
    sim: f64,
    fast: f64,
    /// A known gap of the closed form's memory on this GPU ([`memory_gap`]).
    gap: Option<Gap>,
    /// The per-GPU bound `sim::bounds::rank_peak` with the GPU's actual
    /// micro-batches (layered offload of more than two only).
    rank_peak: Option<f64>,
    /// The model's parameters in the gather dtype (every unit gathered).
    gathered: f64,
    /// Micro-batches the GPU runs.
    microbatches: u32,
}

/// Where the closed form's memory is known to miss what the simulator
/// holds (see [`check_closed_form_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gap {
    /// The non-state peak alone exceeds the usable memory, yet the choice
    /// is accepted: the cap is clamped to 0 instead of refused.
    CapClamped,
    /// A GPU with no samples under SHARD_GRAD_OP: its bound leaves out the
    /// parameters it gathers in the forward and keeps to the backward.
    GradOpStateOnly,
    /// Layered accumulation offloading more than two micro-batches: the
    /// closed form extrapolates from a two-micro-batch walk.
    LayeredOffload,
}

/// The known gap of the closed form's memory on a GPU of type `t` running
/// `b` samples in `n` micro-batches, if any.
fn memory_gap(cf: &ClosedForm<'_>, t: usize, b: u32, n: u32) -> Option<Gap> {
    let s = cf.strategy();
    if b == 0 {
        return (s.sharding == Sharding::GradOp).then_some(Gap::GradOpStateOnly);
    }
    if cf.nonstate_gib(t, b.div_ceil(n), n).unwrap() > cf.usable_gib(t) {
        return Some(Gap::CapClamped);
    }
    let layered = !s.accumulation.is_microbatch_major();
    (layered && s.offloads_activations(n) && n > 2).then_some(Gap::LayeredOffload)
}

/// What the models say about one case the closed form accepts.
#[derive(Debug, Clone)]
struct DpOutcome {
    /// Closed form, simulator with every op alone and with links shared,
    /// fast model, ms.
    closed_ms: f64,
    alone_ms: f64,
    sim_ms: f64,
    fast_ms: f64,
    mem: Vec<RankMem>,
    /// Some host overflows in the simulator.
    host_oom: bool,
}

/// Runs every data-parallel model on `case`; `None` when the closed form
/// refuses the choice (a micro-batch or the state does not fit).
fn run_dp(case: &DpCase) -> Option<DpOutcome> {
    let costs = case.costs();
    let ranks = costs.ranks();
    let strategy = case.strategy(ranks as u32);
    sim::strategy::validate(&strategy, &costs.workload.cluster).unwrap();
    let choice = case.choice(&costs.workload.cluster);
    let cf = ClosedForm::new(&costs, strategy, case.passes).unwrap();
    let ev = cf.evaluate(&choice)?;
    let plan = sim::planner::standard::plan_from("test", strategy, &choice, &ev.fractions);
    let a = simulate(&costs, &plan, &ALONE).unwrap();
    let s = simulate(&costs, &plan, &SimOptions::default()).unwrap();
    let f = sim::fast::evaluate(&costs, &plan, &SimOptions::default()).unwrap();
    let total_params = costs.workload.model.total_params() as f64;
    let routine = sim::data_parallel::Routine::new(&costs, strategy);
    let mut rank_peaks: Vec<((usize, u32, u32), f64)> = Vec::new();
    let mem = (0..ranks)
        .map(|r| {
            let t = costs.rank_type[r];
            let (b, n) = choice[r];
            let share = cf.required_share().unwrap_or(ev.fractions[r]);
            let nonstate = match b {
                0 => cf.empty_nonstate_gib(t),
                _ => cf.nonstate_gib(t, b.div_ceil(n), n).unwrap(),
            };
            let gap = memory_gap(&cf, t, b, n);
            let rank_peak = (gap == Some(Gap::LayeredOffload)).then(|| {
                match rank_peaks.iter().find(|x| x.0 == (t, b, n)) {
                    Some(x) => x.1,
                    None => {
                        let sizes = plan.gpus[r].microbatch_sizes();
                        let p =
                            sim::bounds::rank_peak(&routine, r, &sizes, 1, share * total_params)
                                .unwrap();
                        let gib = p.device_bytes as f64 / GIB;
                        rank_peaks.push(((t, b, n), gib));
                        gib
                    }
                }
            });
            RankMem {
                usable: costs.usable_gib(r),
                bound: nonstate + share * cf.state_gib(),
                alone: a.gpus[r].peak_mem_gib,
                sim: s.gpus[r].peak_mem_gib,
                fast: f.peak_gib[r],
                gap,
                rank_peak,
                gathered: total_params * strategy.param_dtype.bytes() / GIB,
                microbatches: n,
            }
        })
        .collect();
    Some(DpOutcome {
        closed_ms: ev.iteration_ms,
        alone_ms: a.iteration_ms,
        sim_ms: s.iteration_ms,
        fast_ms: f.iteration_ms,
        mem,
        host_oom: s.hosts.iter().any(|h| h.oom),
    })
}

/// The closed form's time against the simulator (margins and what they
/// cost the planner: [`closed_form_follows_the_simulator`]).
fn check_closed_form_time(case: &DpCase, o: &DpOutcome) -> Result<(), TestCaseError> {
    let alone = o.closed_ms / o.alone_ms;
    let shared = o.closed_ms / o.sim_ms;
    if case.sharding != Sharding::Hybrid {
        prop_assert!(
            (0.7..=1.3).contains(&alone),
            "closed form {:.1} ms vs simulated alone {:.1} ms",
            o.closed_ms,
            o.alone_ms
        );
        prop_assert!(
            (0.5..=1.3).contains(&shared),
            "closed form {:.1} ms vs simulated {:.1} ms",
            o.closed_ms,
            o.sim_ms
        );
        return Ok(());
    }
    // Hybrid: the replica all-reduces of a node share its NIC, in the
    // closed form as in the simulator with links shared; the simulator
    // with every op alone gives each the NIC alone (no ceiling there).
    prop_assert!(
        (0.45..=1.3).contains(&shared) && alone >= 0.8,
        "closed form {:.1} ms vs simulated {:.1} ms (alone {:.1})",
        o.closed_ms,
        o.sim_ms,
        o.alone_ms
    );
    Ok(())
}

/// The closed form's memory against the simulated peaks (margins:
/// [`closed_form_follows_the_simulator`]).
fn check_closed_form_memory(o: &DpOutcome) -> Result<(), TestCaseError> {
    for (r, m) in o.mem.iter().enumerate() {
        match m.gap {
            None => {
                prop_assert!(
                    m.alone <= m.usable * 1.01 && m.bound >= m.alone * 0.99,
                    "rank {r}: simulated peak {:.3} GiB, closed-form bound {:.3}, usable {:.3}",
                    m.alone,
                    m.bound,
                    m.usable
                );
            }
            // The bound is right; the cap that should refuse it is not.
            Some(Gap::CapClamped) => prop_assert!(
                m.bound >= m.alone * 0.99 && m.bound > m.usable,
                "rank {r}: bound {:.3} GiB, peak {:.3}, usable {:.3}",
                m.bound,
                m.alone,
                m.usable
            ),
            // What is missing is the gathered parameters.
            Some(Gap::GradOpStateOnly) => prop_assert!(
                m.alone <= m.bound + m.gathered + 1e-6,
                "rank {r}: peak {:.3} GiB above bound {:.3} + parameters {:.3}",
                m.alone,
                m.bound,
                m.gathered
            ),
            // The per-GPU bound with the actual micro-batches holds; the
            // two-micro-batch extrapolation is low by at most 30%.
            Some(Gap::LayeredOffload) => {
                let walked = m.rank_peak.unwrap();
                prop_assert!(
                    walked >= m.alone * 0.99 && m.bound >= m.alone * 0.7,
                    "rank {r}: peak {:.3} GiB, rank_peak {walked:.3}, closed-form bound {:.3}",
                    m.alone,
                    m.bound
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(20))]
    /// The data-parallel closed form (`ClosedForm::evaluate`, what the
    /// native planner searches) against the simulator on random clusters
    /// of 1 to 9 nodes, every strategy; choices it refuses are rejects.
    ///
    /// **Time, no hybrid sharding**: 0.7x to 1.3x of the simulator with
    /// every op alone, every offload (measured 0.78 to 1.20 on 400 cases
    /// of seed 7, median 1.00; the low end is DDP under layered
    /// accumulation, the high end every:2 checkpointing under sync, where
    /// the closed form charges each phase the longer of its compute and
    /// the communication under it); 0.5x to 1.3x of the simulation with
    /// links shared (measured 0.56 to 1.14). Before the closed form
    /// charged an offloaded optimizer's last gradient copy and the
    /// lowering made a single GPU's gradient copies wait for their
    /// backward, the optimizer offload needed 0.5x to 2x (measured 0.63 to
    /// 1.63); now 0.92 to 1.02 with every op alone.
    /// What this costs the planner: it hands a candidate to the fast model
    /// only when its closed-form time is within `CLOSED_FORM_MARGIN` (1.25)
    /// of the best; with errors in [0.78, 1.20] a candidate left out can
    /// still take as little as 1.25 x 0.78 / 1.20 = 0.81 of the fast-model
    /// time of the plan the closed form ranks first: plans up to 19%
    /// faster may go unevaluated (the planner's last loop still simulates
    /// the first remaining candidate of each strategy whose closed-form
    /// time beats the best simulated time).
    ///
    /// **Time, hybrid sharding**: 0.45x to 1.3x of the simulation with
    /// links shared and at least 0.8x of the simulator with every op alone
    /// (measured 0.58 to 1.06 and 0.91 up; 0.55 to 1.17 over many nodes).
    /// The closed form prices every distinct shard and replica group and
    /// takes the slowest of each, charges each replica all-reduce the
    /// replica groups sharing its node's NICs, and bounds the iteration by
    /// the replica all-reduces of every unit run one after the other on
    /// the reduce stream. It priced shard group 0 and replica group 0
    /// alone, without the sharing, and the last unit's all-reduce only:
    /// then no floor held (measured down to 0.07x with every op alone and
    /// 0.009x with links shared, a hybrid plan looking 15x faster than it
    /// ran, while the planner filters candidates at a 1.25 margin). With
    /// every op alone the simulator gives each all-reduce the NIC alone,
    /// so the closed form may be far above it (measured up to 7.8x): not
    /// bounded above there.
    ///
    /// **Memory** (every op alone), on every GPU the closed form accepts:
    /// the simulated peak is at most 1% above the usable memory and the
    /// closed form's bound (non-state peak + state share) at most 1% below
    /// it (measured: peaks at most 1.000x usable, bound 0.994x to 2.97x the
    /// peak, about 500,000 GPUs), except on three kinds of GPU where the
    /// closed form lets a plan the simulator finds out of memory look
    /// feasible, each held to what it misses:
    /// * `ClosedForm::cap` clamps a negative room for state to 0 instead of
    ///   refusing the option, and `option` refuses only micro-batches whose
    ///   one-micro-batch walk overflows: a rank whose micro-batches alone
    ///   overflow (no-sync keeps unsharded gradients across micro-batches)
    ///   is accepted holding no state (measured up to 1.61x its usable
    ///   memory; the bound itself is right: 1.00x to 1.61x the peak);
    /// * a GPU with no samples under grad-op sharding: `rank_peak` with no
    ///   micro-batches counts one unit's buffers, while the simulator gathers
    ///   every unit in the forward and frees it at its reduce-scatter
    ///   (bound 0.26x to 0.86x the peak, peak up to 1.76x usable; held:
    ///   peak at most bound + every parameter in the gather dtype);
    /// * layered accumulation offloading more than two micro-batches: the
    ///   closed form extrapolates from a two-micro-batch walk plus a copy
    ///   backlog term, which misses up to 21% (measured bound 0.79x the
    ///   peak, peak up to 1.07x usable); `rank_peak` with the GPU's actual
    ///   micro-batches holds (held: at least 0.99x the peak; bound at
    ///   least 0.7x).
    /// The planner catches these in the fast model and the simulator (it
    /// ranks fitting plans first), at the cost of candidates. No host
    /// overflowed in the simulator (measured; not held: the closed form
    /// checks host memory for activation offload only).
    #[test]
    fn closed_form_follows_the_simulator(case in arb_small()) {
        let o = run_dp(&case);
        prop_assume!(o.is_some(), "the closed form refuses the choice");
        let o = o.unwrap();
        check_closed_form_time(&case, &o)?;
        check_closed_form_memory(&o)?;
    }
}

proptest! {
    #![proptest_config(config(8))]
    /// [`closed_form_follows_the_simulator`] where the closed form was
    /// weakest: hybrid sharding (every accumulation) on 64 to 768 GPUs of
    /// up to three node kinds of 8 GPUs, same margins. Measured (400 cases
    /// of seed 7): closed form / simulated with links shared 0.55 to 1.17
    /// (median 1.00; before the fixes 0.009 to 1.10), / simulated alone
    /// 0.99 to 7.8 (before 0.07 to 1.31).
    #[test]
    fn closed_form_follows_the_simulator_on_many_node_hybrid(case in arb_many_hybrid()) {
        let o = run_dp(&case);
        prop_assume!(o.is_some(), "the closed form refuses the choice");
        let o = o.unwrap();
        check_closed_form_time(&case, &o)?;
        check_closed_form_memory(&o)?;
    }
}

/// The reported case: on the shipped 1,024-GPU cluster (five node types
/// of 8 GPUs, the first two H100 on NVLink) the closed form's optimum
/// under hybrid no-sync (gpt-1.3b, 4,096 samples, 2 passes) was 473 ms
/// when the closed form priced shard group 0 (the H100s') alone, against
/// 1,352 ms simulated with every op alone (2.9x) and 1,824 ms with links
/// shared (3.9x). Held: with every distinct group priced, the slowest of
/// each, a node's replica all-reduces sharing its NIC and the replica
/// all-reduces run one after the other, the closed form follows the
/// simulator with links shared within 10%, and is above the simulator
/// with every op alone (which prices each all-reduce as if it had the NIC
/// alone).
#[test]
fn hybrid_no_sync_on_the_1024_gpu_cluster_follows_the_simulator() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/clusters");
    let toml = std::fs::read_to_string(dir.join("mixed-1024gpu-5types.toml")).unwrap();
    let costs = cost_model(&toml, "gpt-1.3b", 4096);
    let s = Strategy {
        accumulation: Accumulation::NoSync,
        checkpointing: Checkpointing::Full,
        param_dtype: NumFormat::Fp16,
        ..hybrid(8)
    };
    let cf = ClosedForm::new(&costs, s, 2).unwrap();
    let found = sim::planner::cephalo::search(&cf).unwrap();
    let ev = &found.eval;
    let plan = sim::planner::standard::plan_from("test", s, &found.best, &ev.fractions);
    let alone = simulate(&costs, &plan, &ALONE).unwrap().iteration_ms;
    let shared = simulate(&costs, &plan, &SimOptions::default())
        .unwrap()
        .iteration_ms;
    let closed = ev.iteration_ms;
    assert!(
        (closed / shared - 1.0).abs() <= 0.1 && closed >= alone,
        "closed form {closed:.1} ms, simulated {shared:.1}, alone {alone:.1}"
    );
}

/// A hybrid strategy (shard groups of `group` GPUs, layered
/// accumulation, no recompute, fp16 gathers and fp32 reductions).
fn hybrid(group: u32) -> Strategy {
    Strategy {
        sharding: Sharding::Hybrid,
        shard_group: group,
        accumulation: Accumulation::Layered,
        checkpointing: Checkpointing::None,
        offload: Offload::None,
        param_dtype: NumFormat::Fp16,
        reduce_dtype: NumFormat::Fp32,
        attention: Attention::Eager,
        stack: sim::strategy::Stack::PyTorch,
        compile: false,
    }
}

/// The closed form of `choice` under `s` on `costs`, and the simulator's
/// times of its plan with every op alone and with links shared, ms.
fn closed_and_simulated<'c>(
    costs: &'c CostModel,
    s: Strategy,
    choice: &[(u32, u32)],
) -> (ClosedForm<'c>, f64, f64, f64) {
    let cf = ClosedForm::new(costs, s, 1).unwrap();
    let ev = cf.evaluate(choice).unwrap();
    let plan = sim::planner::standard::plan_from("test", s, choice, &ev.fractions);
    let alone = simulate(costs, &plan, &ALONE).unwrap().iteration_ms;
    let shared = simulate(costs, &plan, &SimOptions::default())
        .unwrap()
        .iteration_ms;
    (cf, ev.iteration_ms, alone, shared)
}

/// Hybrid sharding with a fast first node (8 H100 on NVSwitch) and a slow
/// second one (8 T4 on PCIe 3), a NIC per GPU (no NIC shared): the closed
/// form prices every shard group and takes the slowest (it priced shard
/// group 0's, the H100s', and was 0.2x of the simulator here), and follows
/// the simulator.
#[test]
fn closed_form_prices_every_shard_group() {
    let toml = format!(
        "[network]\n{}[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{{ type = \"h100-sxm\", count = 8 }}]\n\
         [[nodes]]\nintra_link = \"pcie3\"\ngpus = [{{ type = \"t4\", count = 8 }}]\n",
        NETS[4]
    );
    let costs = cost_model(&toml, "gpt-1.3b", 16);
    let choice = vec![(1u32, 1u32); 16];
    let (cf, closed, alone, shared) = closed_and_simulated(&costs, hybrid(8), &choice);
    let level = 1.0 / 8.0;
    let block = costs.unit_params()[1] as f64 * level * 2.0;
    let ag = |g: std::ops::Range<usize>| {
        let g: Vec<usize> = g.collect();
        costs.group_collective_ms(CollectiveKind::AllGather, &g, &[block; 8])
    };
    let (fast, slow) = (ag(0..8), ag(8..16));
    assert!(
        slow > 2.0 * fast,
        "T4 group {slow:.3} ms, H100 group {fast:.3}"
    );
    assert_eq!(cf.comm(level).ag[1], slow);
    for sim in [alone, shared] {
        assert!(
            (0.8..=1.25).contains(&(closed / sim)),
            "closed form {closed:.1} ms, simulated {sim:.1} (alone {alone:.1})"
        );
    }
}

/// Hybrid sharding of one node per shard group over four nodes with one
/// NIC each: a node's eight replica all-reduces leave through its one NIC
/// at once. The closed form charges each 8x its time alone, as the
/// simulator with links shared runs them (without the sharing it was
/// about 0.3x of the simulator here).
#[test]
fn closed_form_shares_a_node_nic_between_replica_all_reduces() {
    let mut toml = format!("[network]\n{}", NETS[3]);
    for _ in 0..4 {
        toml.push_str(
            "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"a100-80gb\", count = 8 }]\n",
        );
    }
    let costs = cost_model(&toml, "gpt-1.3b", 32);
    let choice = vec![(1u32, 1u32); 32];
    let (cf, closed, _, shared) = closed_and_simulated(&costs, hybrid(8), &choice);
    let level = 1.0 / 8.0;
    let block = costs.unit_params()[1] as f64 * level * 4.0;
    let rep: Vec<usize> = (0..4).map(|k| 8 * k).collect();
    let alone = costs.group_collective_ms(CollectiveKind::AllReduce, &rep, &[block; 4]);
    assert!((cf.comm(level).replica[1] / (8.0 * alone) - 1.0).abs() < 1e-9);
    assert!(
        (0.8..=1.25).contains(&(closed / shared)),
        "closed form {closed:.1} ms, simulated with links shared {shared:.1}"
    );
}

/// The fast model against the simulator with links shared (margins:
/// [`fast_model_bounds_the_simulator_with_contention`]).
fn check_fast_model(case: &DpCase, o: &DpOutcome) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        sim::units::SimTime::from_ms(o.fast_ms),
        sim::units::SimTime::from_ms(o.alone_ms)
    );
    let slower = o.sim_ms / o.fast_ms;
    let most = match case.sharding {
        Sharding::Hybrid => 1.1 * (case.node_gpus + 1) as f64,
        _ => 2.5,
    };
    prop_assert!(
        (1.0 - 1e-9..=most).contains(&slower),
        "simulated {:.1} ms with links shared, fast model {:.1} ms",
        o.sim_ms,
        o.fast_ms
    );
    let offloaded = case.offload != Offload::None;
    for (r, m) in o.mem.iter().enumerate() {
        prop_assert!(
            m.fast >= m.alone * (1.0 - 1e-12) && m.fast <= m.alone * 1.03 + 1e-9,
            "rank {r}: fast {:.4} GiB vs simulated alone {:.4}",
            m.fast,
            m.alone
        );
        let low = if offloaded { 0.5 } else { 1.0 - 1e-9 };
        prop_assert!(
            m.fast >= m.sim * low && m.fast <= m.sim * 1.5,
            "rank {r}: fast {:.4} GiB vs simulated {:.4} with links shared",
            m.fast,
            m.sim
        );
    }
    Ok(())
}

/// Multi-node cases: up to 9 nodes, every sharding, or hybrid on 8 to 96.
fn arb_multi_node() -> impl proptest::strategy::Strategy<Value = DpCase> {
    prop_oneof![
        3 => arb_small().prop_filter("two nodes or more", |c| c.nodes() >= 2),
        1 => arb_many_hybrid(),
    ]
}

proptest! {
    #![proptest_config(config(12))]
    /// The fast model (`sim::fast::evaluate`: every op alone) against the
    /// simulator with links shared and interference on, on random
    /// multi-node plans (offload included).
    ///
    /// **Time**: it is a lower bound (the simulator is never faster;
    /// measured 1.000x at least in 3,220 cases) and equals the simulator
    /// with every op alone (to the ns). Above it by at most 2.5x without
    /// hybrid sharding (measured up to 1.82x: collectives and host copies
    /// sharing a node's links) and by at most 1.1 x (GPUs per node + 1)
    /// under hybrid sharding (measured up to 7.8x with 8 GPUs per node,
    /// 3.6x with 4, 2.0x with 2, 1.6x with 1): a node's GPUs sit in as
    /// many replica groups, whose all-reduces run together and share the
    /// node's network link (one aggregate link at 10 Gbit/s: median 3.2x;
    /// eight NIC rails: at most 1.8x), while the communication model
    /// prices each as if it had the link alone. What this costs the planner: it orders
    /// candidates by fast-model time and confirms the first in the
    /// simulator, so hybrid plans look up to 7.8x better there than they
    /// are; its last loop (simulate a strategy whose fast-model time beats
    /// the best simulated time) is sound because this is a lower bound.
    ///
    /// **Memory**: within 3% of the simulated peak with every op alone and
    /// never below it (measured: equal); with links shared, never below the
    /// simulated peak without offload, at most 1.5x above it (measured up
    /// to 1.36x).
    /// With offload (activations or optimizer) the simulated peak can be
    /// higher, held at 0.5x (measured down to 0.64x; 0.96x seen with the
    /// optimizer offloaded): shared host links slow the device-to-host
    /// copies and what they copy waits on the GPU longer. A plan the fast
    /// model and the closed form find fitting may then be out of memory in
    /// the simulator, which the planner only learns when it simulates it.
    #[test]
    fn fast_model_bounds_the_simulator_with_contention(case in arb_multi_node()) {
        let o = run_dp(&case);
        prop_assume!(o.is_some(), "the closed form refuses the choice");
        check_fast_model(&case, &o.unwrap())?;
    }
}

/// A random pipeline case: a cluster of replicated node kinds, stages of
/// consecutive GPUs with random block counts, a schedule and a strategy.
#[derive(Debug, Clone)]
struct PipeCase {
    kinds: Vec<(NodeKind, u32)>,
    node_gpus: u32,
    net: usize,
    model: usize,
    /// Replicas per stage (TP groups of `tp` consecutive ranks, in stage
    /// order; the last GPUs may be in no stage).
    stage_gpus: Vec<u32>,
    /// GPUs per TP group of every stage (groups may span nodes).
    tp: u32,
    /// Sequence parallelism.
    sp: bool,
    /// Relative block counts per stage.
    weights: Vec<u32>,
    microbatches: u32,
    /// Samples per GPU of the widest stage in each micro-batch.
    per_gpu: u32,
    /// Index into `PipeSchedule::ALL` (interleaved falls back to 1F1B
    /// where the stages' blocks or the micro-batches do not allow 2 chunks).
    schedule: usize,
    /// Inside each stage: replicas, ZeRO-1, FSDP or HSDP.
    sharding: Sharding,
    /// Megatron's DDP overlap (replicas and ZeRO-1 only):
    /// `overlap_grad_reduce`, and under ZeRO-1 `overlap_param_gather` too.
    overlap: bool,
    checkpointing: Checkpointing,
    /// Relative shares the replicas split micro-batches by (stage `s`'s
    /// replica `j` takes `shares[(s + j) % 3]`); empty: equal slices.
    shares: Vec<u32>,
}

impl PipeCase {
    /// The cost model, the plan and its pipeline.
    fn build(&self) -> (CostModel, Plan, Pipeline) {
        let widest = *self.stage_gpus.iter().max().unwrap();
        let batch = self.microbatches * widest * self.per_gpu;
        let toml = cluster_toml(&self.kinds, self.node_gpus, self.net);
        let costs = cost_model(&toml, PIPE_MODELS[self.model], batch);
        let layers = costs.workload.model.layers;
        // Blocks in proportion to the weights, at least one per stage.
        let p = self.stage_gpus.len() as u32;
        let total: u32 = self.weights.iter().sum();
        let mut blocks: Vec<u32> = self
            .weights
            .iter()
            .map(|&w| 1 + (layers - p) * w / total)
            .collect();
        blocks[0] += layers - blocks.iter().sum::<u32>();
        let mut next = 0u32;
        let stages = self
            .stage_gpus
            .iter()
            .zip(&blocks)
            .enumerate()
            .map(|(s, (&d, &blocks))| {
                let n = d * self.tp;
                next += n;
                let mut st = Stage::new(blocks, (next - n..next).collect());
                st.tp = self.tp;
                if !self.shares.is_empty() {
                    st.shares = (0..d as usize).map(|j| self.shares[(s + j) % 3]).collect();
                    // (Kept only where the smallest micro-batch gives every
                    // replica a sample.)
                    let smallest = batch / self.microbatches;
                    if st.slices(smallest).iter().any(|&(lo, hi)| hi == lo) {
                        st.shares.clear();
                    }
                }
                st
            })
            .collect();
        let mut schedule = PipeSchedule::ALL[self.schedule];
        let p = self.stage_gpus.len() as u32;
        let chunks_fit = |st: &Vec<Stage>| st.iter().all(|x| x.blocks % 2 == 0);
        let v = if schedule == PipeSchedule::Interleaved
            && chunks_fit(&stages)
            && self.microbatches.is_multiple_of(p)
        {
            2
        } else {
            if schedule == PipeSchedule::Interleaved {
                schedule = PipeSchedule::OneFOneB;
            }
            1
        };
        let pipe = Pipeline {
            schedule,
            microbatches: self.microbatches,
            sequence_parallel: self.sp && self.tp > 1,
            tp_comm_overlap: false,
            overlap_grad_reduce: self.overlap,
            overlap_param_gather: self.overlap && self.sharding == Sharding::GradOp,
            tp_across_nodes: true,
            virtual_stages: v,
            expert_parallel: 1,
            expert_tensor_parallel: None,
            moe_dispatcher: Default::default(),
            stages,
        };
        let ranks = costs.ranks();
        let strategy = Strategy {
            sharding: self.sharding,
            // HSDP: shard groups of the replicas every stage's count divides.
            shard_group: if self.sharding == Sharding::Hybrid {
                let gcd = |a: u32, b: u32| {
                    let (mut a, mut b) = (a, b);
                    while b != 0 {
                        (a, b) = (b, a % b);
                    }
                    a
                };
                self.tp * self.stage_gpus.iter().fold(0, |g, &d| gcd(g, d))
            } else {
                ranks as u32
            },
            accumulation: Accumulation::NoSync,
            checkpointing: self.checkpointing,
            offload: Offload::None,
            param_dtype: NumFormat::Fp16,
            reduce_dtype: NumFormat::Fp16,
            attention: Attention::Eager,
            stack: sim::strategy::Stack::PyTorch,
            compile: false,
        };
        let plan = Plan::pipelined("test", strategy, pipe.clone(), ranks, batch);
        (costs, plan, pipe)
    }
}

/// Random pipelines: up to 3 node kinds of 1 to 3 nodes of 1, 2 or 4 GPUs,
/// 1 to 6 stages of 1 to 3 GPUs, 1 to 12 micro-batches, GPipe or 1F1B,
/// replicas, ZeRO-1, FSDP or HSDP in a stage, any checkpointing, half of
/// them with replicas splitting micro-batches by random shares.
fn arb_pipe() -> impl proptest::strategy::Strategy<Value = PipeCase> {
    (
        prop::collection::vec((node_kind(), 1u32..=3), 1..=3),
        prop::sample::select(&[1u32, 2, 4][..]),
        0..NETS.len(),
        0..PIPE_MODELS.len(),
        prop::collection::vec((1u32..=3, 1u32..=5), 1..=6),
        1u32..=12,
        1u32..=2,
        (any::<bool>(), 0u8..4),
        checkpointing(),
        (
            prop::sample::select(&[1u32, 1, 2, 4][..]),
            any::<bool>(),
            0..PipeSchedule::ALL.len(),
        ),
        (any::<bool>(), prop::collection::vec(1u32..=4, 3)),
    )
        .prop_map(
            |(
                kinds,
                node_gpus,
                net,
                model,
                stages,
                microbatches,
                per_gpu,
                flags,
                ck,
                (tp, sp, sched),
                (split, shares),
            )| {
                let ranks: u32 = kinds.iter().map(|k| k.1).sum::<u32>() * node_gpus;
                let tp = if ranks >= tp { tp } else { 1 };
                // Stages while TP groups of GPUs are left.
                let mut used = 0;
                let (mut stage_gpus, mut weights) = (Vec::new(), Vec::new());
                for (d, w) in stages {
                    let d = d.min((ranks - used) / tp);
                    if d == 0 {
                        break;
                    }
                    used += d * tp;
                    stage_gpus.push(d);
                    weights.push(w);
                }
                PipeCase {
                    kinds,
                    node_gpus,
                    net,
                    model,
                    stage_gpus,
                    weights,
                    microbatches,
                    per_gpu,
                    schedule: sched,
                    sharding: [
                        Sharding::NoShard,
                        Sharding::GradOp,
                        Sharding::Full,
                        Sharding::Hybrid,
                    ][flags.1 as usize],
                    overlap: flags.0 && flags.1 < 2,
                    checkpointing: ck,
                    tp,
                    sp,
                    shares: if split { shares } else { Vec::new() },
                }
            },
        )
}

/// What the pipeline estimate and the simulator say about one case.
#[derive(Debug, Clone)]
struct PipeOutcome {
    /// Estimate, simulator with every op alone and with links shared, ms.
    estimate_ms: f64,
    fast_ms: f64,
    alone_ms: f64,
    sim_ms: f64,
    /// Per stage: estimated peak / simulated peak (every op alone).
    mem: Vec<f64>,
    /// Some stage holds GPUs of different types.
    mixed_stage: bool,
}

fn run_pipe(case: &PipeCase) -> PipeOutcome {
    let (costs, plan, pipe) = case.build();
    let a = simulate(&costs, &plan, &ALONE).unwrap();
    let s = simulate(&costs, &plan, &SimOptions::default()).unwrap();
    let e = sim::pipeline::estimate::estimate(&costs, &plan, &pipe).unwrap();
    let f = sim::fast::evaluate(&costs, &plan, &ALONE).unwrap();
    let peak = |r: &Report, st: &Stage| {
        st.gpus
            .iter()
            .map(|&g| r.gpus[g as usize].peak_mem_gib)
            .fold(0.0, f64::max)
    };
    let mem = pipe
        .stages
        .iter()
        .enumerate()
        .map(|(k, st)| e.peak_bytes[k] / GIB / peak(&a, st))
        .collect();
    let name = |g: &u32| costs.gpu(*g as usize).name.clone();
    let mixed_stage = pipe
        .stages
        .iter()
        .any(|st| st.gpus.iter().any(|g| name(g) != name(&st.gpus[0])));
    PipeOutcome {
        estimate_ms: e.iteration_ms,
        fast_ms: f.iteration_ms,
        alone_ms: a.iteration_ms,
        sim_ms: s.iteration_ms,
        mem,
        mixed_stage,
    }
}

/// The pipeline estimate against the simulator (margins:
/// [`pipeline_estimate_follows_the_simulator_on_random_clusters`]).
fn check_pipeline(case: &PipeCase, o: &PipeOutcome) -> Result<(), TestCaseError> {
    // The fast model lowers the same ops: equal to every op alone.
    prop_assert!(
        (o.fast_ms - o.alone_ms).abs() <= 1e-6 * o.alone_ms.max(1.0),
        "fast {:.4} ms vs simulated alone {:.4} ms",
        o.fast_ms,
        o.alone_ms
    );
    let high = if o.mixed_stage { 1.9 } else { 1.5 };
    let ratio = o.estimate_ms / o.alone_ms;
    prop_assert!(
        ratio >= 0.83,
        "estimate {:.1} ms vs simulated alone {:.1} ms",
        o.estimate_ms,
        o.alone_ms
    );
    // A stage's data-parallel groups (one per TP rank, and those of the
    // other stages on its nodes) reduce at once through their nodes' NICs,
    // and a stage's GPUs send their transfers to the next stage's nodes at
    // once: the estimate counts that sharing (`nic_sharing`,
    // `p2p_sharing`), every op alone does not, so above it the estimate
    // follows the simulation with links shared.
    let upper = o.alone_ms.max(o.sim_ms);
    prop_assert!(
        o.estimate_ms / upper <= high,
        "estimate {:.1} ms vs simulated {:.1} ms (alone {:.1} ms)",
        o.estimate_ms,
        o.sim_ms,
        o.alone_ms
    );
    let shared = o.estimate_ms / o.sim_ms;
    prop_assert!(
        (0.45..=high).contains(&shared),
        "estimate {:.1} ms vs simulated {:.1} ms with links shared",
        o.estimate_ms,
        o.sim_ms
    );
    let (low, high) = match case.checkpointing {
        Checkpointing::Every(_) => (0.8, 1.6),
        _ => (0.99, 1.25),
    };
    for (s, &m) in o.mem.iter().enumerate() {
        prop_assert!(
            (low..=high).contains(&m),
            "stage {s}: estimated peak / simulated {m:.4}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(48))]
    /// The pipeline estimate (`sim::pipeline::estimate`, what the pipeline
    /// and 3D planners rank with) and the fast model against the simulator
    /// on random clusters (GPU types, 1 to 9 nodes, five networks), stage
    /// shapes (1 to 6 stages of 1 to 3 replicas, uneven blocks), TP groups
    /// of 1, 2 or 4 GPUs (with or without SP, across nodes allowed), every
    /// schedule (GPipe, 1F1B, interleaved with 2 chunks, ZB-H1), shardings
    /// (replicas, ZeRO-1, FSDP and HSDP inside the stages) and checkpointing; the sibling of
    /// `pipeline::closed_form_follows_the_simulator` (one fixed two-node
    /// cluster, where it is within 8%). Measured on 800 cases
    /// (`measure_pipeline`), margins as stated.
    ///
    /// **Fast model**: equal to the simulator with every op alone (1e-6).
    ///
    /// **Time**: at least 0.83x the simulator with every op alone
    /// (measured min 0.89 on 800 cases; 0.837 on 400 of seed 7, a tiny
    /// model on 10 Gbit/s whose transfers, not its compute, pace the
    /// pipeline: the estimate takes each stage's period as the larger of
    /// its compute and its transfers, while a chain of sends and waits
    /// between neighbours stretches it) and at most 1.5x when each stage's GPUs are of
    /// one type, 1.9x when a stage mixes types (`group_cost` charges every
    /// GPU the largest slice), of the simulator alone, or under TP of the
    /// larger of alone and links shared: a stage's TP ranks' data-parallel
    /// groups reduce at once through the same NICs (`nic_sharing`), which
    /// every op alone ignores (measured max against that reference 1.29);
    /// 0.45x to the same upper margin of the simulator with links shared
    /// (measured 0.60 to 1.29). What this costs the planners: they simulate
    /// their best-estimated candidates, so a plan estimated up to 1.5x slow
    /// may not be among them.
    ///
    /// **Memory**: the estimated stage peak at most 25% above the simulated
    /// one and at most 1% below it (measured 0.996 to 1.20), except under
    /// every:K checkpointing: 0.8x to 1.6x (measured 0.96 to 1.13; the
    /// estimate of a plan counts each stage's own recomputed blocks, the
    /// planners' search averages 1/K).
    ///
    /// **One stage** (`measure_pipeline`'s "one stage" families, 257 of
    /// 600 cases of seed 9: FSDP / HSDP per unit, the data-parallel
    /// iteration of a TP-1 stage over every GPU, replicas and ZeRO-1 under
    /// TP): within the same margins, measured 0.945 to 1.168 of the
    /// simulator with links shared, peaks 1.001 to 1.134 of the simulated.
    #[test]
    fn pipeline_estimate_follows_the_simulator_on_random_clusters(case in arb_pipe()) {
        check_pipeline(&case, &run_pipe(&case))?;
    }
}

/// `v`'s count, minimum, 10th percentile, median, 90th percentile and
/// maximum, for the measured tables.
fn summarize(name: &str, v: &[f64]) -> String {
    if v.is_empty() {
        return format!("{name}: none");
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "{name}: n={} min {:.3} p10 {:.3} median {:.3} p90 {:.3} max {:.3}",
        v.len(),
        q(0.0),
        q(0.1),
        q(0.5),
        q(0.9),
        q(1.0)
    )
}

/// `CASES` random cases of `gen` from a fixed seed (`SEED` from the
/// environment, or `seed`).
fn sample<T: std::fmt::Debug>(
    gen: impl proptest::strategy::Strategy<Value = T>,
    seed: u8,
    default: usize,
) -> Vec<T> {
    let seed = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    );
    (0..cases(default as u32))
        .map(|_| gen.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// The data-parallel distributions the margins above were set from, per
/// family (sharding, accumulation, node count), with the same checks run
/// on every case (long: run with `--ignored --nocapture`, `CASES=400`).
#[test]
#[ignore = "a measuring tool: CASES=400 SEED=7 ... --ignored --nocapture"]
fn measure() {
    let mut failures = Vec::new();
    for (label, cases) in [
        ("small", sample(arb_small(), 7, 200)),
        ("many-node hybrid", sample(arb_many_hybrid(), 7, 200)),
    ] {
        let t0 = std::time::Instant::now();
        let total = cases.len();
        let out: Vec<(DpCase, DpOutcome)> = cases
            .into_iter()
            .filter_map(|c| run_dp(&c).map(|o| (c, o)))
            .collect();
        println!(
            "== {label}: {} cases the closed form accepts of {total}, {:.1} s",
            out.len(),
            t0.elapsed().as_secs_f64()
        );
        let mut fams: Vec<String> = out.iter().map(|o| o.0.family()).collect();
        fams.sort();
        fams.dedup();
        fams.insert(0, "all".into());
        for fam in &fams {
            let sel: Vec<&(DpCase, DpOutcome)> = out
                .iter()
                .filter(|(c, _)| fam == "all" || &c.family() == fam)
                .collect();
            let col =
                |f: &dyn Fn(&DpOutcome) -> f64| sel.iter().map(|x| f(&x.1)).collect::<Vec<_>>();
            let mem = |f: &dyn Fn(&RankMem) -> Option<f64>| {
                sel.iter()
                    .flat_map(|x| x.1.mem.iter().filter_map(f))
                    .collect::<Vec<_>>()
            };
            println!("-- {fam}");
            for (name, v) in [
                ("closed / alone", col(&|o| o.closed_ms / o.alone_ms)),
                ("closed / sim", col(&|o| o.closed_ms / o.sim_ms)),
                ("sim / fast", col(&|o| o.sim_ms / o.fast_ms)),
                (
                    "peak / usable, no gap",
                    mem(&|m| m.gap.is_none().then_some(m.alone / m.usable)),
                ),
                (
                    "peak / usable, gap",
                    mem(&|m| m.gap.map(|_| m.alone / m.usable)),
                ),
                (
                    "bound / peak, no gap",
                    mem(&|m| m.gap.is_none().then_some(m.bound / m.alone)),
                ),
                (
                    "bound / peak, gap",
                    mem(&|m| m.gap.map(|_| m.bound / m.alone)),
                ),
                ("fast / alone peak", mem(&|m| Some(m.fast / m.alone))),
                ("fast / sim peak", mem(&|m| Some(m.fast / m.sim))),
            ] {
                println!("  {}", summarize(name, &v));
            }
            println!(
                "  host overflows: {}",
                sel.iter().filter(|x| x.1.host_oom).count()
            );
        }
        for gap in [Gap::CapClamped, Gap::GradOpStateOnly, Gap::LayeredOffload] {
            let of = |f: &dyn Fn(&RankMem) -> f64| {
                out.iter()
                    .flat_map(|x| x.1.mem.iter().filter(|m| m.gap == Some(gap)).map(f))
                    .collect::<Vec<_>>()
            };
            println!("gap {gap:?}:");
            println!(
                "  {}",
                summarize("bound / peak", &of(&|m| m.bound / m.alone))
            );
            for n in 3..=6 {
                let v: Vec<f64> = out
                    .iter()
                    .flat_map(|x| x.1.mem.iter())
                    .filter(|m| m.gap == Some(gap) && m.microbatches == n)
                    .map(|m| m.bound / m.alone)
                    .collect();
                if !v.is_empty() {
                    println!(
                        "  {}",
                        summarize(&format!("bound / peak, {n} micro-batches"), &v)
                    );
                }
            }
            println!(
                "  {}",
                summarize("peak / usable", &of(&|m| m.alone / m.usable))
            );
        }
        for hybrid in [false, true] {
            let sel: Vec<&(DpCase, DpOutcome)> = out
                .iter()
                .filter(|(c, _)| (c.sharding == Sharding::Hybrid) == hybrid)
                .collect();
            let by_alone: fn(&DpOutcome) -> f64 = |o| o.closed_ms / o.alone_ms;
            let by_sim: fn(&DpOutcome) -> f64 = |o| o.closed_ms / o.sim_ms;
            let ratios = [("closed / alone", by_alone), ("closed / sim", by_sim)];
            for (name, f) in ratios {
                let v: Vec<f64> = sel.iter().map(|x| f(&x.1)).collect();
                println!("{}", summarize(&format!("{name}, hybrid {hybrid}"), &v));
                for worst in [
                    sel.iter().min_by(|a, b| f(&a.1).total_cmp(&f(&b.1))),
                    sel.iter().max_by(|a, b| f(&a.1).total_cmp(&f(&b.1))),
                ]
                .into_iter()
                .flatten()
                {
                    println!(
                        "  {:.3}: closed {:.1} alone {:.1} sim {:.1} {:?}",
                        f(&worst.1),
                        worst.1.closed_ms,
                        worst.1.alone_ms,
                        worst.1.sim_ms,
                        worst.0
                    );
                }
            }
        }
        for off in Offload::ALL {
            for acc in Accumulation::ALL {
                let v: Vec<f64> = out
                    .iter()
                    .filter(|(c, _)| {
                        c.sharding != Sharding::Hybrid && c.offload == off && c.accumulation == acc
                    })
                    .map(|(_, o)| o.closed_ms / o.alone_ms)
                    .collect();
                let name = format!(
                    "closed / alone, not hybrid, offload {}, {}",
                    off.name(),
                    acc.name()
                );
                println!("{}", summarize(&name, &v));
                let v: Vec<f64> = out
                    .iter()
                    .filter(|(c, _)| {
                        c.sharding != Sharding::Hybrid && c.offload == off && c.accumulation == acc
                    })
                    .map(|(_, o)| o.closed_ms / o.sim_ms)
                    .collect();
                let name = format!(
                    "closed / sim, not hybrid, offload {}, {}",
                    off.name(),
                    acc.name()
                );
                println!("{}", summarize(&name, &v));
            }
        }
        for hybrid in [false, true] {
            for g in [1u32, 2, 4, 8] {
                for net in 0..NETS.len() {
                    let v: Vec<f64> = out
                        .iter()
                        .filter(|(c, _)| {
                            (c.sharding == Sharding::Hybrid) == hybrid
                                && c.node_gpus == g
                                && c.net == net
                        })
                        .map(|(_, o)| o.sim_ms / o.fast_ms)
                        .collect();
                    if !v.is_empty() {
                        let name = format!("sim / fast, hybrid {hybrid}, {g} GPUs/node, net {net}");
                        println!("{}", summarize(&name, &v));
                    }
                }
            }
        }
        for (c, o) in &out {
            let checks = [
                check_closed_form_time(c, o),
                check_closed_form_memory(o),
                check_fast_model(c, o),
            ];
            failures.extend(
                checks
                    .into_iter()
                    .filter_map(Result::err)
                    .map(|e| format!("{e} {c:?}")),
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A family of pipeline cases in [`measure_pipeline`]: its name and
/// which cases it holds.
type PipeFamily<'a> = (&'a str, &'a dyn Fn(&PipeCase, &PipeOutcome) -> bool);

/// The pipeline distributions the margins above were set from, with the
/// same checks run on every case (long: `--ignored --nocapture`).
#[test]
#[ignore = "a measuring tool: CASES=400 SEED=7 ... --ignored --nocapture"]
fn measure_pipeline() {
    let t0 = std::time::Instant::now();
    let out: Vec<(PipeCase, PipeOutcome)> = sample(arb_pipe(), 9, 600)
        .into_iter()
        .map(|c| {
            let o = run_pipe(&c);
            (c, o)
        })
        .collect();
    println!(
        "== pipelines: {} cases, {:.1} s",
        out.len(),
        t0.elapsed().as_secs_f64()
    );
    let every = |c: &PipeCase| matches!(c.checkpointing, Checkpointing::Every(_));
    let one = |c: &PipeCase| c.stage_gpus.len() == 1;
    let fams: [PipeFamily<'_>; 13] = [
        ("all", &|_, _| true),
        ("one stage", &|c, _| one(c)),
        ("one stage, fsdp / hsdp", &|c, _| {
            one(c) && matches!(c.sharding, Sharding::Full | Sharding::Hybrid)
        }),
        ("split by shares", &|c, _| !c.shares.is_empty()),
        ("fsdp in stages", &|c, _| c.sharding == Sharding::Full),
        ("megatron overlap", &|c, _| c.overlap),
        ("hsdp in stages", &|c, _| c.sharding == Sharding::Hybrid),
        ("uniform stages", &|_, o| !o.mixed_stage),
        ("mixed stages", &|_, o| o.mixed_stage),
        ("gpipe", &|c, _| c.schedule == 1),
        ("1f1b, interleaved, zb-h1", &|c, _| c.schedule != 1),
        ("every:K", &|c, _| every(c)),
        ("other checkpointing", &|c, _| !every(c)),
    ];
    for (name, f) in fams {
        let sel: Vec<&PipeOutcome> = out.iter().filter(|x| f(&x.0, &x.1)).map(|x| &x.1).collect();
        let col = |g: &dyn Fn(&PipeOutcome) -> f64| sel.iter().map(|o| g(o)).collect::<Vec<_>>();
        println!("-- {name}");
        println!(
            "  {}",
            summarize("estimate / alone", &col(&|o| o.estimate_ms / o.alone_ms))
        );
        println!(
            "  {}",
            summarize("estimate / sim", &col(&|o| o.estimate_ms / o.sim_ms))
        );
        let mem: Vec<f64> = sel.iter().flat_map(|o| o.mem.clone()).collect();
        println!("  {}", summarize("estimated / simulated peak", &mem));
    }
    let failures: Vec<String> = out
        .iter()
        .filter_map(|(c, o)| check_pipeline(c, o).err().map(|e| format!("{e} {c:?}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
