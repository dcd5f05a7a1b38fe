//! Identical nodes, simulated once.
//!
//! A cluster of thousands of GPUs is usually a few node types repeated, and
//! a plan gives identical GPUs identical work. Two nodes whose hardware is
//! the same (GPU types in the same local order, fabric, NICs, host memory),
//! whose GPUs carry the same plan entries (batch, micro-batches, state
//! fraction) and that sit in the same place of the same kind of shard group
//! run the same program and meet every collective at the same instants, so
//! their timelines are equal: the simulator lowers and runs one
//! representative node per class ([`NodeClasses::simulated`]) and gives
//! every other member its representative's breakdown and memory timeline.
//!
//! Why that is exact: a rank's timeline is a function of its own ops and of
//! the start times of the collectives it joins; a collective starts when
//! its slowest member is ready and lasts what the cost model says for the
//! whole group (the durations are costed on the full group, not on the
//! simulated members). Link sharing stays inside a node (every link belongs
//! to one node, and a collective loads a node's links the same way on every
//! node of a class: one ring hop in and one out, the same rails), and so
//! does host memory. Classes refine the node key by the shard-group context
//! under hybrid sharding (the classes of the group's nodes and the node's
//! position in it), and nothing is merged when shard groups do not align
//! with nodes or a node's GPUs are not consecutive ranks. The test suite
//! holds the merged report equal to the full simulation's.

use crate::cost::CostModel;
use crate::plan::Plan;
// Fx hashing (rustc's): the keys are small integers, tuples and
// strings hashed millions of times per planner search; SipHash's DoS
// resistance buys nothing here (no key comes from outside) and cost
// about a tenth of a 4,096-GPU `hetero-3d` search (`perf`).
use rustc_hash::FxHashMap as HashMap;

/// Which ranks and nodes are simulated, and whose timeline the others share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClasses {
    /// Per rank: the simulated rank whose timeline it has (itself when simulated).
    pub rep_rank: Vec<usize>,
    /// Per node: the simulated node whose host timeline it has.
    pub rep_node: Vec<usize>,
    /// Per rank: simulated event by event.
    pub simulated: Vec<bool>,
}

impl NodeClasses {
    /// Every rank simulated (no merging).
    pub fn identity(ranks: usize, nodes: usize) -> NodeClasses {
        NodeClasses {
            rep_rank: (0..ranks).collect(),
            rep_node: (0..nodes).collect(),
            simulated: vec![true; ranks],
        }
    }

    /// The classes of identical nodes of `plan` on the workload of `costs`
    /// (the identity where merging is not known to be exact). `plan` must
    /// have one entry per rank.
    pub fn of(costs: &CostModel, plan: &Plan) -> NodeClasses {
        let cluster = &costs.workload.cluster;
        let ranks = cluster.len();
        let identity = NodeClasses::identity(ranks, cluster.nodes.len());
        if plan.gpus.len() != ranks || cluster.nodes.len() < 2 {
            return identity;
        }
        // Each node's ranks, consecutive.
        let Some((first, count)) = node_spans(cluster) else {
            return identity;
        };
        // Node key: hardware, then each GPU's type and plan entry.
        let mut ids: HashMap<String, usize> = HashMap::default();
        let mut class: Vec<usize> = cluster
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let mut key = node.hardware_key();
                for r in first[n]..first[n] + count[n] {
                    let p = &plan.gpus[r];
                    key.push_str(&format!(
                        "|{} {} {} {} {:x}",
                        costs.rank_type[r],
                        p.batch,
                        p.microbatches,
                        p.microbatch_size,
                        p.state_fraction.to_bits()
                    ));
                }
                let next = ids.len();
                *ids.entry(key).or_insert(next)
            })
            .collect();
        // Shard-group context (hybrid): groups must align with nodes.
        let groups = plan.strategy.groups(ranks);
        if groups.count() > 1 {
            let size = groups.group_size;
            let within = count.iter().all(|&c| c % size == 0);
            // Every group starts where a node starts: no node straddles two.
            let starts: std::collections::HashSet<usize> = first.iter().copied().collect();
            let spanning = (0..groups.count()).all(|k| starts.contains(&(k * size)));
            if within {
                // Every group lies inside one node: the node key decides.
            } else if spanning {
                let group_nodes = |k: usize| -> Vec<usize> {
                    let mut v: Vec<usize> = groups
                        .shard_group(k)
                        .map(|r| cluster.gpus[r].node)
                        .collect();
                    v.dedup();
                    v
                };
                let mut ctx: HashMap<Vec<usize>, usize> = HashMap::default();
                let refined: Vec<usize> = (0..cluster.nodes.len())
                    .map(|n| {
                        let k = groups.group_of(first[n]);
                        let members = group_nodes(k);
                        let mut key: Vec<usize> = members.iter().map(|&m| class[m]).collect();
                        key.push(usize::MAX);
                        key.push(members.iter().position(|&m| m == n).unwrap_or(0));
                        key.push(class[n]);
                        let next = ctx.len();
                        *ctx.entry(key).or_insert(next)
                    })
                    .collect();
                class = refined;
            } else {
                return identity;
            }
        }
        // The first node of each class is simulated.
        let mut rep_of_class: HashMap<usize, usize> = HashMap::default();
        let rep_node: Vec<usize> = class
            .iter()
            .enumerate()
            .map(|(n, &c)| *rep_of_class.entry(c).or_insert(n))
            .collect();
        NodeClasses::from_representatives(cluster, &first, rep_node)
    }

    /// The classes of identical nodes of a pipeline (3D) plan `pipe` on
    /// the workload of `costs`: where every stage has the same TP degree
    /// and replica count, each node holds whole TP groups of one stage
    /// (consecutive ranks, replicas `j0 .. j0 + k`), the nodes of a stage
    /// with the same hardware, GPU types and replica shares form a class
    /// (every stage split alike), and every stage's
    /// representatives hold the same replicas (so each simulated slice's
    /// sends reach a simulated peer, rank to rank). A replica's timeline is
    /// then its representative's: the stage's data-parallel collectives
    /// are costed on the full group. Otherwise the identity.
    pub fn of_pipeline(costs: &CostModel, pipe: &crate::plan::pipeline::Pipeline) -> NodeClasses {
        let cluster = &costs.workload.cluster;
        let ranks = cluster.len();
        let identity = NodeClasses::identity(ranks, cluster.nodes.len());
        let (t, d) = (pipe.stages[0].tp.max(1) as usize, pipe.stages[0].dp());
        // (Replicas split by shares meet the next stage's one to one only
        // when every stage splits alike.)
        if cluster.nodes.len() < 2
            || pipe.stages.iter().any(|st| {
                st.tp.max(1) as usize != t || st.dp() != d || st.shares != pipe.stages[0].shares
            })
        {
            return identity;
        }
        let Some((first, count)) = node_spans(cluster) else {
            return identity;
        };
        // Where each rank sits: (stage, index in the stage's list).
        let mut at = vec![None; ranks];
        for (s, st) in pipe.stages.iter().enumerate() {
            for (i, &r) in st.gpus.iter().enumerate() {
                at[r as usize] = Some((s, i));
            }
        }
        // Per node: its stage and first replica, when it holds whole
        // consecutive TP groups of one stage.
        let mut place = Vec::with_capacity(cluster.nodes.len());
        for n in 0..cluster.nodes.len() {
            let Some((s, i0)) = at[first[n]] else {
                return identity;
            };
            let whole = i0 % t == 0
                && count[n].is_multiple_of(t)
                && (0..count[n]).all(|x| at[first[n] + x] == Some((s, i0 + x)));
            if !whole {
                return identity;
            }
            place.push((s, i0 / t));
        }
        let mut ids: HashMap<String, usize> = HashMap::default();
        let mut rep_of: HashMap<usize, usize> = HashMap::default();
        let mut rep_node = Vec::with_capacity(cluster.nodes.len());
        for (n, node) in cluster.nodes.iter().enumerate() {
            let mut key = format!("{}|stage {}|{}", node.hardware_key(), place[n].0, count[n]);
            for r in first[n]..first[n] + count[n] {
                key.push_str(&format!("|{}", costs.rank_type[r]));
            }
            // Each replica's share of a micro-batch (its slice sizes).
            let st = &pipe.stages[place[n].0];
            for j in place[n].1..place[n].1 + count[n] / t {
                key.push_str(&format!(
                    "|share {}",
                    st.shares.get(j).copied().unwrap_or(1)
                ));
            }
            let next = ids.len();
            let class = *ids.entry(key).or_insert(next);
            rep_node.push(*rep_of.entry(class).or_insert(n));
        }
        // Every stage's representatives hold the same replicas.
        let mut reps: Vec<std::collections::BTreeSet<usize>> =
            vec![Default::default(); pipe.depth()];
        for n in 0..cluster.nodes.len() {
            if rep_node[n] == n {
                reps[place[n].0].insert(place[n].1);
            }
        }
        if reps.iter().any(|r| r != &reps[0]) {
            return identity;
        }
        NodeClasses::from_representatives(cluster, &first, rep_node)
    }

    /// The classes whose representative of node `n` is `rep_node[n]`
    /// (each node's first rank `first`): a rank takes the timeline of the
    /// rank at its local position on its node's representative.
    fn from_representatives(
        cluster: &crate::cluster::Cluster,
        first: &[usize],
        rep_node: Vec<usize>,
    ) -> NodeClasses {
        let rep_rank: Vec<usize> = cluster
            .gpus
            .iter()
            .map(|g| first[rep_node[g.node]] + g.local)
            .collect();
        let simulated = rep_rank.iter().enumerate().map(|(r, &q)| r == q).collect();
        NodeClasses {
            rep_rank,
            rep_node,
            simulated,
        }
    }

    /// Ranks simulated event by event.
    pub fn simulated_ranks(&self) -> usize {
        self.simulated.iter().filter(|&&s| s).count()
    }

    /// Whether every rank is simulated.
    pub fn is_identity(&self) -> bool {
        self.simulated.iter().all(|&s| s)
    }
}

/// Each node's first rank and GPU count, when every node holds at least
/// one GPU and its GPUs are consecutive ranks in local order (what merging
/// needs); `None` otherwise.
fn node_spans(cluster: &crate::cluster::Cluster) -> Option<(Vec<usize>, Vec<usize>)> {
    let mut first = vec![usize::MAX; cluster.nodes.len()];
    let mut count = vec![0usize; cluster.nodes.len()];
    for g in &cluster.gpus {
        first[g.node] = first[g.node].min(g.rank);
        count[g.node] += 1;
    }
    let consecutive = cluster
        .gpus
        .iter()
        .all(|g| g.rank == first[g.node] + g.local && g.local < count[g.node]);
    (consecutive && !count.contains(&0)).then_some((first, count))
}
