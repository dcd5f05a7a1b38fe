//! Closed-form iteration cost of a plan under one strategy: the objective
//! the native `cephalo` planner searches exactly before the fast model and
//! the simulator confirm. It is derived from the same description the
//! simulator lowers ([`crate::data_parallel::Routine`]): the same phases, the
//! same steps (durations, copies) and, for memory, the fast model's
//! per-GPU bound ([`crate::bounds::rank_peak`]).
//!
//! Per rank the phases of one micro-batch pass fall into a few *templates*
//! (embedding forward, block forward per recompute policy, head, block
//! backward per policy, embedding backward). A template's cost for a rank
//! choosing local batch `b` in `n` micro-batches (sizes `m`, `q`) is the
//! longer of its compute and of the host copies it issues (two streams in
//! parallel): layered accumulation sums both over the rank's micro-batches,
//! micro-batch-major orders take one micro-batch per pass. Each phase
//! takes the longer of its compute and the communication that runs under
//! it: the previous phase's gradient reduction and the next phase's
//! prefetched all-gather (they share the communication stream). The first
//! all-gather and the last reduction are exposed, then the optimizer step:
//!
//! ```text
//! C = AG(first) + sum over phases p of max(c(template(p)), R(p-1) + AG(p+1)) + R(last) + opt(λ)
//! ```
//!
//! grouped by (template, communication) pairs, so a rank's cost is a short
//! sum whatever the model depth. Collective times come from the
//! communication model with every piece equal to the plan's largest state
//! fraction `λ` in the shard group (exact for a flat ring, an upper bound
//! for hierarchical ones), so `C` is nondecreasing in `λ`; each is the
//! slowest over every distinct shard group (and replica group), and
//! hybrid sharding's replica all-reduces are charged the replica groups
//! that leave each node through its NICs at once. Under hybrid sharding
//! the replica all-reduces of every unit run one after the other on the
//! reduce stream, which bounds `C` from below (they set the iteration
//! when they take longer than the backward). An offloaded optimizer's
//! step follows the copy of the last reduced gradient to the host. The
//! plan's closed-form time is the largest rank cost.
//!
//! Memory: a rank's *cap* is the largest state fraction that fits next to
//! its micro-batches: `(usable - peak without state) / (state bytes per
//! parameter x P)`, with the peak from [`crate::bounds::rank_peak`]. State is
//! water-filled into the caps ([`super::water::water_fill`]) under full sharding;
//! hybrid sharding holds even shards in every group. Units: ms, GiB,
//! samples.

use crate::bounds::rank_peak;
use crate::comm::CollectiveKind;
use crate::cost::CostModel;
use crate::data_parallel::{Phase, PhaseKind, Routine};
use crate::error::PlanError;
use crate::strategy::{Offload, Recompute, Sharding, StateSplit, Strategy};
use crate::units::GIB;

/// Safety margin kept free below the usable memory when computing caps, so
/// that byte rounding in the simulator never turns an exact fit into an
/// OOM (GiB).
pub const CAP_MARGIN_GIB: f64 = 1e-6;

/// Phase templates (see the module docs).
const EF: usize = 0;
const BF: usize = 1; // + policy index (full, selective, none)
const HD: usize = 4;
const BB: usize = 5; // + policy index
const EB: usize = 8;
/// Number of templates.
pub const TEMPLATES: usize = 9;

fn policy_index(r: Recompute) -> usize {
    match r {
        Recompute::Full => 0,
        Recompute::Selective => 1,
        Recompute::None => 2,
    }
}

/// Unit classes for communication: embedding, block, head.
fn class(u: u32, layers: u32) -> usize {
    if u == 0 {
        0
    } else if u == layers + 1 {
        2
    } else {
        1
    }
}

/// λ-independent closed-form costs of one rank's choice `(b, n)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankCost {
    /// Local batch.
    pub batch: u32,
    /// Micro-batch count.
    pub microbatches: u32,
    /// Largest micro-batch size.
    pub microbatch_size: u32,
    /// Template costs, ms: layered, over all the rank's micro-batches
    /// (`phase_ms[0]`); micro-batch-major, of one micro-batch of size `m`
    /// (`phase_ms[0]`) and of size `m - 1` (`phase_ms[1]`).
    pub phase_ms: [[f64; TEMPLATES]; 2],
    /// Micro-batches of the largest size (the first `rem` passes).
    pub rem: u32,
    /// Largest state fraction that still fits next to the micro-batches.
    pub cap: f64,
}

/// Collective times per unit class (embedding, block, head) at a given
/// largest state fraction, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommTimes {
    /// All-gather in the shard group.
    pub ag: [f64; 3],
    /// Gradient reduction in the shard group (reduce-scatter; DDP: the
    /// unit's bucket all-reduces, a block's averaged over the blocks).
    pub reduce: [f64; 3],
    /// Hybrid sharding's replica all-reduce (0 otherwise).
    pub replica: [f64; 3],
}

/// One (template, communication) pair of a pass and how often it occurs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pair {
    template: usize,
    /// Unit class whose reduction runs under the phase.
    reduce: Option<usize>,
    /// Unit class whose all-gather runs under the phase.
    gather: Option<usize>,
    count: f64,
}

/// A run of consecutive passes with the same pairs.
#[derive(Debug, Clone, PartialEq)]
struct PassRun {
    /// First pass of the run.
    start: u32,
    /// Passes in the run.
    len: u32,
    /// The pairs of each of its passes.
    pairs: Vec<Pair>,
}

/// Pass classes of a micro-batch-major iteration.
#[derive(Debug, Clone, Default)]
struct Tally {
    /// Every pass (layered: the only one), in order, as runs of identical
    /// passes (the middle passes of a micro-batch-major iteration are all
    /// alike, so the closed form costs O(1) in the pass count).
    passes: Vec<PassRun>,
    /// First gather and last reduction (exposed).
    first_gather: Option<usize>,
    last_reduce: Option<usize>,
}

/// Per GPU type tables for micro-batch sizes 0..=max_m (index m).
#[derive(Debug, Clone)]
struct TypeTable {
    rank: usize,
    max_m: u32,
    usable_gib: f64,
    /// Per m: per template (compute ms, copy ms when offloading).
    tmpl: Vec<[(f64, f64); TEMPLATES]>,
    /// Per m: peak GiB without state for n = 1 and n >= 2.
    mem: Vec<[f64; 2]>,
    /// Per m: per-step forward compute (ms), its copy (ms), the GiB one
    /// forward step keeps (the device-to-host backlog correction) and the
    /// GiB one micro-batch keeps over a whole forward (layered without
    /// offload keeps every micro-batch's).
    backlog: Vec<(f64, f64, f64, f64)>,
    /// Per m: block forward + recompute + backward of the strategy, ms
    /// (per-sample floor).
    block_ms: Vec<f64>,
    /// Per m: host GiB with two micro-batches and what each further one
    /// adds (activations offloaded for the whole forward under layered
    /// accumulation).
    host: Vec<(f64, f64)>,
    /// Host memory this type's GPUs may use: the least, over its GPUs, of
    /// their node's host memory split evenly over the node's GPUs (the
    /// node's pool is shared; an even split is the conservative bound).
    host_budget_gib: f64,
}

/// Collective times already priced, by water level (its bits): a search
/// prices the same few levels thousands of times (every rank's count at the
/// level of the plan at hand), and one pricing walks the shard group's
/// rings, O(GPUs). Memoised, a 1,024-GPU search no longer spends most of
/// its time there. Bounded: cleared when it holds [`CommCache::MAX`] levels.
#[derive(Debug, Default)]
struct CommCache(std::sync::Mutex<std::collections::HashMap<u64, CommTimes>>);

impl CommCache {
    /// Levels kept before the cache is cleared.
    const MAX: usize = 4096;

    fn get_or(&self, level: f64, price: impl FnOnce() -> CommTimes) -> CommTimes {
        let key = level.to_bits();
        if let Some(c) = self.0.lock().ok().and_then(|m| m.get(&key).copied()) {
            return c;
        }
        let c = price();
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= Self::MAX {
                m.clear();
            }
            m.insert(key, c);
        }
        c
    }
}

impl Clone for CommCache {
    fn clone(&self) -> Self {
        CommCache(std::sync::Mutex::new(
            self.0.lock().map(|m| m.clone()).unwrap_or_default(),
        ))
    }
}

/// The closed-form model of one workload under one strategy.
#[derive(Debug, Clone)]
pub struct ClosedForm<'a> {
    costs: &'a CostModel,
    routine: Routine<'a>,
    /// Micro-batch passes of micro-batch-major orders (every rank runs
    /// exactly this many); `None` for layered accumulation.
    passes: Option<u32>,
    layers: u32,
    state_gib: f64,
    types: Vec<TypeTable>,
    tally: Tally,
    unit_params: [u64; 3],
    ddp_reduce_bytes: [Vec<f64>; 3],
    /// One shard group of each distinct kind, and one replica group of
    /// each distinct kind with how many replica groups share its busiest
    /// NIC ([`DistinctGroups`]).
    groups: DistinctGroups,
    comm_cache: CommCache,
}

/// The shard and replica groups a plan's collectives run in, one of each
/// distinct kind: two groups are alike when their ranks, in order, have
/// the same GPU types, the same node hardware, the same places in their
/// nodes and the same node pattern (which of the group's nodes each sits
/// on), and, for replica groups, the same NIC sharing. Pricing one of
/// each prices every group (thousands of identical groups are priced
/// once), and the slowest of each kind is the closed form's time.
#[derive(Debug, Clone, Default)]
struct DistinctGroups {
    /// A shard group of each kind (hybrid: the shard groups; other
    /// shardings: one group of every rank).
    shard: Vec<Vec<usize>>,
    /// A replica group of each kind (hybrid with two shard groups or
    /// more; else none) and how many replica all-reduces share a NIC of
    /// its busiest node ([`replica_nic_sharing`]).
    replica: Vec<(Vec<usize>, f64)>,
}

impl DistinctGroups {
    /// The distinct groups of `strategy` on `costs`' cluster.
    fn of(costs: &CostModel, strategy: &Strategy) -> DistinctGroups {
        let ranks = costs.ranks();
        let c = &costs.workload.cluster;
        // Nodes by hardware class (one key string per node, once).
        let mut classes: std::collections::HashMap<String, usize> = Default::default();
        let node_class: Vec<usize> = c
            .nodes
            .iter()
            .map(|n| {
                let next = classes.len();
                *classes.entry(n.hardware_key()).or_insert(next)
            })
            .collect();
        // A group's kind: per rank its type, node class, local place and
        // the index of its node among the group's nodes.
        let kind = |g: &[usize]| -> Vec<(usize, usize, usize, usize)> {
            let mut nodes: Vec<usize> = Vec::new();
            g.iter()
                .map(|&r| {
                    let n = c.gpus[r].node;
                    let at = match nodes.iter().position(|&x| x == n) {
                        Some(i) => i,
                        None => {
                            nodes.push(n);
                            nodes.len() - 1
                        }
                    };
                    (costs.rank_type[r], node_class[n], c.gpus[r].local, at)
                })
                .collect()
        };
        let mut out = DistinctGroups::default();
        if strategy.sharding != Sharding::Hybrid {
            out.shard.push((0..ranks).collect());
            return out;
        }
        let groups = strategy.groups(ranks);
        let mut seen = std::collections::HashSet::new();
        for k in 0..groups.count() {
            let g: Vec<usize> = groups.shard_group(k).collect();
            if seen.insert(kind(&g)) {
                out.shard.push(g);
            }
        }
        if groups.count() > 1 {
            let sharing = replica_nic_sharing(costs, &groups);
            let mut seen = std::collections::HashSet::new();
            for (j, &share) in sharing.iter().enumerate() {
                let g = groups.replica_group(j);
                if seen.insert((kind(&g), share.to_bits())) {
                    out.replica.push((g, share));
                }
            }
        }
        out
    }
}

/// Per replica group of `groups`, how many replica all-reduces share each
/// NIC of its busiest node: HSDP's replica groups all reduce at once
/// (every shard group's reduce-scatter of a unit ends together), so on a
/// node every member of a replica group that crosses nodes sends through
/// the node's NICs at the same time, rounded up over its NICs (1 for a
/// group inside one node, or with a NIC per member, as on rail-optimised
/// HGX nodes); the pipeline estimate's `nic_sharing` counts the same way.
/// The simulator with links shared splits the NIC between them.
fn replica_nic_sharing(costs: &CostModel, groups: &crate::strategy::Groups) -> Vec<f64> {
    let c = &costs.workload.cluster;
    let node = |r: usize| c.gpus[r].node;
    let crossing: Vec<bool> = (0..groups.group_size)
        .map(|j| {
            let g = groups.replica_group(j);
            g.iter().any(|&r| node(r) != node(g[0]))
        })
        .collect();
    // Per node, the crossing replica groups with a member on it (a group
    // with two members on a node enters and leaves it once: its ring, or
    // its tree, keeps the node's members together).
    let mut through = vec![0usize; c.nodes.len()];
    let mut on_node: std::collections::HashSet<(usize, usize)> = Default::default();
    for r in 0..groups.ranks {
        let j = groups.position(r);
        if crossing[j] && on_node.insert((node(r), j)) {
            through[node(r)] += 1;
        }
    }
    (0..groups.group_size)
        .map(|j| {
            if !crossing[j] {
                return 1.0;
            }
            groups
                .replica_group(j)
                .iter()
                .map(|&r| {
                    let n = node(r);
                    through[n].div_ceil(c.nodes[n].nics.max(1))
                })
                .max()
                .unwrap_or(1) as f64
        })
        .collect()
}

/// The closed-form evaluation of a whole plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Closed-form iteration time (slowest rank), ms.
    pub iteration_ms: f64,
    /// Largest state fraction (water level).
    pub level: f64,
    /// State fractions.
    pub fractions: Vec<f64>,
    /// Per rank closed-form time, ms.
    pub rank_ms: Vec<f64>,
}

/// A choice priced by class of identical ranks ([`ClosedForm::class_times`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassTimes {
    /// Largest state fraction (water level).
    pub level: f64,
    /// Per class: its cap (room for state, fraction of the model).
    pub caps: Vec<f64>,
    /// Per class: its closed-form rank time at `level`, ms.
    pub ms: Vec<f64>,
    /// Per rank: its class.
    pub class_of: Vec<usize>,
}

/// The (template, communication) pairs of every pass of `phases`.
fn tally_for(routine: &Routine<'_>, phases: &[Phase]) -> Tally {
    let layers = routine.layers();
    let mut tally = Tally::default();
    let np = phases.len();
    let per_pass = 2 * layers as usize + 3;
    let mut passes: Vec<Vec<Pair>> = Vec::new();
    for (p, ph) in phases.iter().enumerate() {
        let k = p / per_pass;
        if passes.len() <= k {
            passes.push(Vec::new());
        }
        let reduce = (p > 0 && phases[p - 1].reduce).then(|| class(phases[p - 1].unit, layers));
        let gather = phases
            .get(p + 1)
            .filter(|q| q.gather)
            .map(|q| class(q.unit, layers));
        let t = template_of(ph, routine);
        let v = &mut passes[k];
        match v
            .iter_mut()
            .find(|x| x.template == t && x.reduce == reduce && x.gather == gather)
        {
            Some(x) => x.count += 1.0,
            None => v.push(Pair {
                template: t,
                reduce,
                gather,
                count: 1.0,
            }),
        }
    }
    for (k, v) in passes.into_iter().enumerate() {
        match tally.passes.last_mut() {
            Some(run) if run.pairs == v => run.len += 1,
            _ => tally.passes.push(PassRun {
                start: k as u32,
                len: 1,
                pairs: v,
            }),
        }
    }
    tally.first_gather = phases
        .first()
        .filter(|q| q.gather)
        .map(|q| class(q.unit, layers));
    tally.last_reduce = phases
        .get(np.wrapping_sub(1))
        .filter(|q| q.reduce)
        .map(|q| class(q.unit, layers));
    tally
}

fn template_of(ph: &Phase, routine: &Routine<'_>) -> usize {
    let u = ph.unit as usize;
    let pol = policy_index(routine.units[u].recompute);
    match ph.kind {
        PhaseKind::Forward if u == 0 => EF,
        PhaseKind::Forward => BF + pol,
        PhaseKind::Head => HD,
        PhaseKind::Backward if u == 0 => EB,
        PhaseKind::Backward => BB + pol,
    }
}

impl<'a> ClosedForm<'a> {
    /// Tabulates every GPU type of the workload under `strategy` up to the
    /// largest micro-batch that fits it with no state (capped at the global
    /// batch). `passes`: the common micro-batch count of a
    /// micro-batch-major strategy (ignored for layered accumulation).
    pub fn new(
        costs: &'a CostModel,
        strategy: Strategy,
        passes: u32,
    ) -> Result<ClosedForm<'a>, PlanError> {
        let routine = Routine::new(costs, strategy);
        let w = &costs.workload;
        let layers = w.model.layers;
        let mb = strategy.accumulation.is_microbatch_major();
        let passes = mb.then_some(passes.max(1));
        let state_gib = routine.gpu_state_bytes_per_param() * w.model.total_params() as f64 / GIB;
        let big_b = w.global_batch;
        let phases = routine.phases(passes.unwrap_or(1));
        let tally = tally_for(&routine, &phases);
        // Representative phases of each template.
        let mut rep: [Option<Phase>; TEMPLATES] = [None; TEMPLATES];
        for ph in phases.iter() {
            let t = template_of(ph, &routine);
            rep[t].get_or_insert(*ph);
        }
        let mut types = Vec::with_capacity(costs.types.len());
        for t in 0..costs.types.len() {
            let rank = costs.rank_type.iter().position(|&x| x == t).unwrap_or(0);
            let usable = costs.usable_gib(rank);
            let cl = &w.cluster;
            let host_budget_gib = (0..costs.ranks())
                .filter(|&r| costs.rank_type[r] == t)
                .map(|r| {
                    let node = &cl.nodes[cl.gpus[r].node];
                    node.host_mem_gib / node.gpus.max(1) as f64
                })
                .fold(f64::INFINITY, f64::min);
            let mut tt = TypeTable {
                rank,
                max_m: 0,
                host: vec![(0.0, 0.0)],
                host_budget_gib,
                usable_gib: usable,
                tmpl: vec![[(0.0, 0.0); TEMPLATES]],
                mem: vec![[0.0; 2]],
                backlog: vec![(0.0, 0.0, 0.0, 0.0)],
                block_ms: vec![0.0],
            };
            let fits = |g: f64| g <= usable;
            let mut m = 1u32;
            while m <= big_b.min(crate::limits::MAX_MICROBATCH) {
                let mc = routine.micro(rank, m)?;
                let mut row = [(0.0, 0.0); TEMPLATES];
                for (i, r) in rep.iter().enumerate() {
                    let Some(ph) = r else { continue };
                    let st = routine.step(&mc, ph, 0, true);
                    let compute: f64 = st.works().map(|w| w.dur.as_ms()).sum();
                    let copy = st.h2d.map_or(0.0, |c| c.dur.as_ms())
                        + st.d2h.map_or(0.0, |c| c.dur.as_ms());
                    row[i] = (compute, copy);
                }
                // Cheapest block policy present: forward + backward templates.
                let block = (0..3)
                    .filter(|&pol| rep[BF + pol].is_some() && rep[BB + pol].is_some())
                    .map(|pol| row[BF + pol].0 + row[BB + pol].0)
                    .fold(f64::INFINITY, f64::min);
                let block = if block.is_finite() { block } else { 0.0 };
                let walk =
                    |sizes: &[u32]| rank_peak(&routine, rank, sizes, sizes.len() as u32, 0.0);
                let gib = |bytes: i64| bytes as f64 / GIB;
                let two = walk(&[m, m])?;
                let m1 = gib(walk(&[m])?.device_bytes);
                let m2 = gib(two.device_bytes);
                if !fits(m1.min(m2) + CAP_MARGIN_GIB) {
                    break;
                }
                // Host: two micro-batches' walk, and what a third adds.
                let h2 = gib(two.host_bytes);
                let h3 = gib(walk(&[m, m, m])?.host_bytes);
                let a = &mc.act;
                let kept_step = [Recompute::Full, Recompute::Selective, Recompute::None]
                    .into_iter()
                    .filter(|&r| routine.units.iter().any(|u| u.recompute == r))
                    .map(|r| a.kept(r))
                    .fold(a.checkpoint, f64::max)
                    / GIB;
                let kept_total = (a.checkpoint
                    + routine
                        .units
                        .iter()
                        .skip(1)
                        .take(layers as usize)
                        .map(|u| a.kept(u.recompute))
                        .sum::<f64>())
                    / GIB;
                let fwd_pol = (0..3).find(|&p| rep[BF + p].is_some()).unwrap_or(0);
                tt.tmpl.push(row);
                tt.mem.push([m1, m2]);
                tt.backlog.push((
                    row[BF + fwd_pol].0,
                    row[BF + fwd_pol].1,
                    kept_step,
                    kept_total,
                ));
                tt.block_ms.push(block);
                tt.host.push((h2, (h3 - h2).max(0.0)));
                tt.max_m = m;
                m += 1;
            }
            types.push(tt);
        }
        let up = costs.unit_params();
        let block_params = if up.len() > 2 { up[1] } else { 0 };
        let unit_params = [
            up.first().copied().unwrap_or(0),
            block_params,
            up.last().copied().unwrap_or(0),
        ];
        let mut ddp_reduce_bytes: [Vec<f64>; 3] = Default::default();
        if strategy.sharding == Sharding::NoShard {
            let l = layers as usize;
            ddp_reduce_bytes[0] = routine.ddp_buckets(0);
            ddp_reduce_bytes[2] = routine.ddp_buckets(l + 1);
            for u in 1..=l {
                ddp_reduce_bytes[1].extend(routine.ddp_buckets(u));
            }
        }
        Ok(ClosedForm {
            costs,
            routine,
            passes,
            layers,
            state_gib,
            types,
            tally,
            unit_params,
            ddp_reduce_bytes,
            groups: DistinctGroups::of(costs, &strategy),
            comm_cache: CommCache::default(),
        })
    }

    /// The cost model.
    pub fn costs(&self) -> &CostModel {
        self.costs
    }

    /// The same tables for a micro-batch-major strategy run in `passes`
    /// passes (layered strategies are returned unchanged).
    pub fn with_passes(&self, passes: u32) -> ClosedForm<'a> {
        let mut c = self.clone();
        if c.passes.is_some() {
            let p = passes.max(1);
            c.passes = Some(p);
            let phases = c.routine.phases(p);
            c.tally = tally_for(&c.routine, &phases);
        }
        c
    }

    /// Non-state GiB of a GPU of type `t` with no samples.
    pub fn empty_nonstate_gib(&self, t: usize) -> f64 {
        rank_peak(&self.routine, self.types[t].rank, &[], 1, 0.0)
            .map(|p| p.device_bytes as f64 / GIB)
            .unwrap_or(f64::INFINITY)
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.routine.strategy
    }

    /// The state fraction every GPU must hold when the sharding fixes it
    /// (hybrid: `1 / shard_group`; no sharding: the whole state); `None`
    /// when the state is water-filled over the GPUs (full, grad-op).
    pub fn required_share(&self) -> Option<f64> {
        let s = self.routine.strategy;
        match s.sharding.state_split() {
            StateSplit::Uneven => None,
            StateSplit::EvenPerGroup => Some(1.0 / s.shard_group.max(1) as f64),
            StateSplit::Replicated => Some(1.0),
        }
    }

    /// The common micro-batch count of a micro-batch-major strategy.
    pub fn passes(&self) -> Option<u32> {
        self.passes
    }

    /// Number of GPU types (index of `CostModel::types`).
    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    /// Largest micro-batch that fits a GPU of type `t` holding no state.
    pub fn max_microbatch(&self, t: usize) -> u32 {
        self.types[t].max_m
    }

    /// Usable memory of type `t`, GiB.
    pub fn usable_gib(&self, t: usize) -> f64 {
        self.types[t].usable_gib
    }

    /// Training state of the whole model on the GPU, GiB.
    pub fn state_gib(&self) -> f64 {
        self.state_gib
    }

    /// Peak memory without state (GiB) of type `t` running `n`
    /// micro-batches of at most `m` samples (upper bound).
    pub fn nonstate_gib(&self, t: usize, m: u32, n: u32) -> Option<f64> {
        let tt = &self.types[t];
        let row = tt.mem.get(m as usize)?;
        let mut g = if n <= 1 { row[0] } else { row[1] };
        let s = &self.routine.strategy;
        let layered = !s.accumulation.is_microbatch_major();
        let (c, d, kept_step, kept_total) = tt.backlog[m as usize];
        if n > 2 && layered && s.offloads_activations(n) && d > c && d > 0.0 {
            // Device-to-host backlog when copies are slower than compute.
            g += (n - 2) as f64 * (1.0 - c / d) * kept_step;
        }
        if n > 2 && layered && !s.offloads_activations(n) {
            // Every micro-batch's kept activations stay on the GPU (the
            // two-micro-batch bound holds two of them).
            g += (n - 2) as f64 * kept_total;
        }
        Some(g)
    }

    /// Host GiB type `t` needs running `n` micro-batches of at most `m`
    /// samples (upper bound; 0 when nothing goes to the host). Options
    /// above the type's host budget are infeasible: without this bound the
    /// layered search picked plans whose offloaded activations overflow
    /// the host (paper cluster, 4,096 samples: 354 GiB on a 240 GiB host).
    pub fn host_need_gib(&self, t: usize, m: u32, n: u32) -> f64 {
        let tt = &self.types[t];
        let Some(&(h2, per)) = tt.host.get(m as usize) else {
            return 0.0;
        };
        let s = &self.routine.strategy;
        if !s.offloads_activations(n) {
            return 0.0;
        }
        if s.accumulation.is_microbatch_major() {
            h2
        } else {
            h2 + n.saturating_sub(2) as f64 * per
        }
    }

    /// Cap (largest state fraction that fits) of type `t` at micro-batch
    /// `m` in `n` micro-batches.
    pub fn cap(&self, t: usize, m: u32, n: u32) -> Option<f64> {
        let g = self.nonstate_gib(t, m, n)?;
        let tt = &self.types[t];
        Some(if self.state_gib > 0.0 {
            ((tt.usable_gib - g - CAP_MARGIN_GIB) / self.state_gib).clamp(0.0, 1.0)
        } else if g <= tt.usable_gib {
            1.0
        } else {
            0.0
        })
    }

    /// λ-independent costs of `b` samples in `n` micro-batches on type `t`;
    /// `None` when the micro-batch does not fit even with no state, or
    /// `n` is inconsistent with `b` (`b = 0` needs `n = 0`; a
    /// micro-batch-major strategy needs `n` = its pass count).
    pub fn option(&self, t: usize, b: u32, n: u32) -> Option<RankCost> {
        let tt = &self.types[t];
        if b == 0 {
            return (n == 0).then(|| RankCost {
                batch: 0,
                microbatches: 0,
                microbatch_size: 0,
                phase_ms: [[0.0; TEMPLATES]; 2],
                rem: 0,
                cap: self.cap_empty(t),
            });
        }
        if n == 0 || n > b || n > crate::limits::MAX_MICROBATCHES {
            return None;
        }
        if let Some(p) = self.passes {
            if n != p {
                return None;
            }
        }
        let q = b / n;
        let rem = b % n;
        let m = q + u32::from(rem > 0);
        if m > tt.max_m {
            return None;
        }
        if self.host_need_gib(t, m, n) > tt.host_budget_gib + CAP_MARGIN_GIB {
            return None;
        }
        let cap = self.cap(t, m, n)?;
        let (mi, qi) = (m as usize, q as usize);
        let mut phase_ms = [[0.0; TEMPLATES]; 2];
        if self.passes.is_some() {
            let offload = self.routine.strategy.offloads_activations(n);
            let one = |x: (f64, f64)| if offload { x.0.max(x.1) } else { x.0 };
            let [full, short] = &mut phase_ms;
            for (i, (a, b)) in full.iter_mut().zip(short.iter_mut()).enumerate() {
                *a = one(tt.tmpl[mi][i]);
                *b = if qi > 0 { one(tt.tmpl[qi][i]) } else { 0.0 };
            }
        } else {
            let offload = self.routine.strategy.offloads_activations(n);
            let (hi, lo) = (rem as f64, (n - rem) as f64);
            for (i, v) in phase_ms[0].iter_mut().enumerate() {
                let (cm, dm) = tt.tmpl[mi][i];
                let (cq, dq) = if qi > 0 { tt.tmpl[qi][i] } else { (0.0, 0.0) };
                let comp = hi * cm + lo * cq;
                let copy = if offload { hi * dm + lo * dq } else { 0.0 };
                *v = comp.max(copy);
            }
        }
        Some(RankCost {
            batch: b,
            microbatches: n,
            microbatch_size: m,
            phase_ms,
            rem,
            cap,
        })
    }

    fn cap_empty(&self, t: usize) -> f64 {
        let tt = &self.types[t];
        let g = rank_peak(&self.routine, tt.rank, &[], 1, 0.0)
            .map(|p| p.device_bytes as f64 / GIB)
            .unwrap_or(f64::INFINITY);
        if self.state_gib > 0.0 {
            ((tt.usable_gib - g - CAP_MARGIN_GIB) / self.state_gib).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }

    /// Collective times with every piece equal to `level` of a unit.
    pub fn comm(&self, level: f64) -> CommTimes {
        self.comm_cache.get_or(level, || self.price_comm(level))
    }

    /// [`ClosedForm::comm`], priced: each collective in every distinct
    /// shard and replica group ([`DistinctGroups`]), the slowest of each;
    /// a replica all-reduce times the replica groups sharing its NIC.
    fn price_comm(&self, level: f64) -> CommTimes {
        let s = self.routine.strategy;
        let ranks = self.costs.ranks();
        let pb = self.routine.precision.comm.bytes();
        let rb = self.routine.precision.grads.bytes();
        let mut c = CommTimes {
            ag: [0.0; 3],
            reduce: [0.0; 3],
            replica: [0.0; 3],
        };
        let ms = |kind, g: &[usize], bytes: f64| {
            self.costs
                .group_collective_ms(kind, g, &vec![bytes; g.len()])
        };
        for k in 0..3 {
            let p = self.unit_params[k] as f64;
            if s.sharding == Sharding::NoShard {
                let all: Vec<usize> = (0..ranks).collect();
                let total: f64 = self.ddp_reduce_bytes[k]
                    .iter()
                    .map(|&b| ms(CollectiveKind::AllReduce, &all, b))
                    .sum();
                c.reduce[k] = if k == 1 {
                    total / self.layers.max(1) as f64
                } else {
                    total
                };
                continue;
            }
            for g in &self.groups.shard {
                c.ag[k] = c.ag[k].max(ms(CollectiveKind::AllGather, g, level * p * pb));
                c.reduce[k] = c.reduce[k].max(ms(CollectiveKind::ReduceScatter, g, level * p * rb));
            }
            for (g, share) in &self.groups.replica {
                let t = ms(CollectiveKind::AllReduce, g, level * p * rb) * share;
                c.replica[k] = c.replica[k].max(t);
            }
        }
        c
    }

    /// Optimizer step of type `t` on a shard of `level` of the model, ms
    /// (on the host when the optimizer is offloaded: after the copy of the
    /// last reduced unit's gradient shard to the host, which waits for
    /// that unit's backward and reduction, and before the copy of the
    /// updated parameters back, as the lowering orders them).
    pub fn optimizer_ms(&self, t: usize, level: f64) -> f64 {
        let s = self.routine.strategy;
        let total = self.costs.workload.model.total_params() as f64;
        let share = match s.sharding {
            Sharding::NoShard => 1.0,
            _ => level,
        };
        let local = share * total;
        let rank = self.types[t].rank;
        let step = self.routine.optimizer_ms(rank, local);
        match s.offload {
            Offload::Optimizer => {
                // fp32 gradients, as `Description::offload_grad_bytes`.
                let last = self.tally.last_reduce.unwrap_or(0);
                let grads = self.unit_params[last] as f64 * 4.0 * share;
                step + self.costs.host_copy_ms(rank, grads) + self.routine.params_up_ms(rank, local)
            }
            _ => step,
        }
    }

    /// Closed-form time of a rank of type `t` with costs `o`, collective
    /// times `c` and largest state fraction `level`, ms. Nondecreasing in
    /// `level` (through `c` and the optimizer term).
    pub fn rank_ms(&self, t: usize, o: &RankCost, c: &CommTimes, level: f64) -> f64 {
        self.rank_ms_with(o, c, self.optimizer_ms(t, level))
    }

    /// [`ClosedForm::rank_ms`] with the optimizer term given (ms).
    pub fn rank_ms_with(&self, o: &RankCost, c: &CommTimes, optimizer_ms: f64) -> f64 {
        let x =
            |p: &Pair| p.reduce.map_or(0.0, |k| c.reduce[k]) + p.gather.map_or(0.0, |k| c.ag[k]);
        let pass = |pairs: &[Pair], size: usize| -> f64 {
            pairs
                .iter()
                .map(|p| p.count * o.phase_ms[size][p.template].max(x(p)))
                .sum()
        };
        let body: f64 = match self.passes {
            None => self.tally.passes.first().map_or(0.0, |v| pass(&v.pairs, 0)),
            Some(_) if o.batch == 0 => self
                .tally
                .passes
                .iter()
                .map(|v| v.len as f64 * pass(&v.pairs, 0))
                .sum(),
            // The first `rem` passes run the larger micro-batch (size
            // index 0), the others the smaller one (index 1).
            Some(_) => self
                .tally
                .passes
                .iter()
                .map(|v| {
                    let larger = if o.rem == 0 {
                        v.len
                    } else {
                        o.rem.saturating_sub(v.start).min(v.len)
                    };
                    let mut t = 0.0;
                    if larger > 0 {
                        t += larger as f64 * pass(&v.pairs, 0);
                    }
                    if larger < v.len {
                        t += (v.len - larger) as f64 * pass(&v.pairs, 1);
                    }
                    t
                })
                .sum(),
        };
        let head = self.tally.first_gather.map_or(0.0, |k| c.ag[k]);
        let tail = self
            .tally
            .last_reduce
            .map_or(0.0, |k| c.reduce[k] + c.replica[k]);
        let sum = head + body + tail + optimizer_ms;
        match self.replica_chain_ms(o, c, &pass) {
            Some(chain) => sum.max(head + chain + optimizer_ms),
            None => sum,
        }
    }

    /// HSDP's replica all-reduces one after the other: every unit's, once
    /// per pass that reduces, on the reduce stream, the first after the
    /// first reducing pass's forward and head and the head's
    /// reduce-scatter, ms (from the first all-gather's end to the last
    /// all-reduce's); `None` without replica all-reduces. When they take
    /// longer than the backward they run under, they set the iteration
    /// (the sum's tail charges only the last unit's).
    fn replica_chain_ms(
        &self,
        o: &RankCost,
        c: &CommTimes,
        pass: &dyn Fn(&[Pair], usize) -> f64,
    ) -> Option<f64> {
        if c.replica.iter().all(|&x| x == 0.0) {
            return None;
        }
        // Size index of pass `k`: the first `rem` passes run the larger
        // micro-batch (as `rank_ms_with`).
        let size = |k: u32| usize::from(self.passes.is_some() && o.rem != 0 && k >= o.rem);
        let (mut before, mut reducing, mut started) = (0.0, 0u32, false);
        for v in &self.tally.passes {
            let reduces = v.pairs.iter().any(|p| p.reduce == Some(1));
            for k in v.start..v.start + v.len {
                if !started && reduces {
                    let fwd: Vec<Pair> = v
                        .pairs
                        .iter()
                        .copied()
                        .filter(|p| p.template <= HD)
                        .collect();
                    before += pass(&fwd, size(k));
                    started = true;
                } else if !started {
                    before += pass(&v.pairs, size(k));
                }
                reducing += u32::from(reduces);
            }
        }
        if !started {
            return None;
        }
        let units = c.replica[0] + self.layers as f64 * c.replica[1] + c.replica[2];
        Some(before + c.reduce[2] + reducing as f64 * units)
    }

    /// A lower bound on the rank time per sample of type `t`, ms: every
    /// sample costs at least `L` blocks of forward (and recompute) and
    /// backward at the most efficient micro-batch size; infinite when not
    /// even one sample fits.
    pub fn per_sample_floor_ms(&self, t: usize) -> f64 {
        let tt = &self.types[t];
        (1..=tt.max_m as usize)
            .map(|s| tt.block_ms[s] / s as f64)
            .fold(f64::INFINITY, f64::min)
            * self.layers.max(1) as f64
    }

    /// Evaluates a whole choice (per rank `(b, n)`): `None` when a
    /// micro-batch does not fit or the state does not fit in the caps.
    pub fn evaluate(&self, choice: &[(u32, u32)]) -> Option<Evaluation> {
        let t = self.class_times(choice)?;
        let caps: Vec<f64> = t.class_of.iter().map(|&k| t.caps[k]).collect();
        let ranks = self.costs.ranks();
        let fractions = match self.routine.strategy.sharding {
            Sharding::Full | Sharding::GradOp => super::water::water_fill_at(&caps, t.level),
            _ => vec![
                if self.routine.strategy.sharding == Sharding::NoShard {
                    1.0 / ranks as f64
                } else {
                    t.level
                };
                ranks
            ],
        };
        let rank_ms: Vec<f64> = t.class_of.iter().map(|&k| t.ms[k]).collect();
        let iteration_ms = rank_ms.iter().copied().fold(0.0, f64::max);
        Some(Evaluation {
            iteration_ms,
            level: t.level,
            fractions,
            rank_ms,
        })
    }

    /// The water level and each class's rank time (ms) at it, for classes
    /// of identical ranks given as `(type, option, ranks in it)`: `None`
    /// when the state does not fit in the caps. The one pricing of a choice
    /// by class ([`ClosedForm::class_times`], the native planner's
    /// refinement).
    pub fn price_classes(&self, classes: &[(usize, RankCost, usize)]) -> Option<(f64, Vec<f64>)> {
        let s = self.routine.strategy;
        let level = match s.sharding.state_split() {
            StateSplit::Uneven => {
                let caps: Vec<f64> = classes.iter().map(|c| c.1.cap).collect();
                let counts: Vec<usize> = classes.iter().map(|c| c.2).collect();
                super::water::water_level_counted(&caps, &counts)?
            }
            StateSplit::EvenPerGroup => {
                let even = 1.0 / s.shard_group as f64;
                if classes
                    .iter()
                    .any(|c| c.1.cap < even - super::water::FILL_TOL)
                {
                    return None;
                }
                even
            }
            StateSplit::Replicated => {
                if classes
                    .iter()
                    .any(|c| c.1.cap < 1.0 - super::water::FILL_TOL)
                {
                    return None;
                }
                1.0
            }
        };
        let c = self.comm(level);
        let ms = classes
            .iter()
            .map(|(t, o, _)| self.rank_ms(*t, o, &c, level))
            .collect();
        Some((level, ms))
    }

    /// A choice's times by class of identical ranks (same type, batch and
    /// count, priced once: a plan of thousands of GPUs has a few dozen such
    /// classes); every rank gets exactly the numbers pricing it alone would
    /// give. `None` as [`ClosedForm::evaluate`].
    pub fn class_times(&self, choice: &[(u32, u32)]) -> Option<ClassTimes> {
        let mut index: std::collections::HashMap<(usize, u32, u32), usize> =
            std::collections::HashMap::new();
        let mut classes: Vec<(usize, RankCost)> = Vec::new();
        let mut class_of = Vec::with_capacity(choice.len());
        // Neighbouring ranks mostly share their class: check the last first.
        let mut last: Option<((usize, u32, u32), usize)> = None;
        for (r, &(b, n)) in choice.iter().enumerate() {
            let key = (self.costs.rank_type[r], b, n);
            let k = match last.filter(|l| l.0 == key) {
                Some(l) => l.1,
                None => match index.get(&key) {
                    Some(&k) => k,
                    None => {
                        classes.push((key.0, self.option(key.0, b, n)?));
                        index.insert(key, classes.len() - 1);
                        classes.len() - 1
                    }
                },
            };
            last = Some((key, k));
            class_of.push(k);
        }
        let mut counts = vec![0usize; classes.len()];
        for &k in &class_of {
            counts[k] += 1;
        }
        let priced: Vec<(usize, RankCost, usize)> = classes
            .iter()
            .zip(&counts)
            .map(|(&(t, o), &n)| (t, o, n))
            .collect();
        let (level, ms) = self.price_classes(&priced)?;
        let caps = classes.iter().map(|(_, o)| o.cap).collect();
        Some(ClassTimes {
            level,
            caps,
            ms,
            class_of,
        })
    }
}
