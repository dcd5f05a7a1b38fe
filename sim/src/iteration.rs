//! One iteration of a plan, ready to lower: validated, checked against the
//! simulator's size limit, its identical nodes grouped, and the layouts
//! its folded passes may take. The event simulation ([`crate::simulate`])
//! and the fast model ([`crate::fast`]) are the two consumers, siblings
//! over this one entry: each lowers the same [`Iteration`] into its own
//! [`Sink`] (an engine graph, a timeline) and times what it receives.
//!
//! A data-parallel plan lowers through its [`Description`]
//! ([`crate::lower::data_parallel`]), and so does a one-stage plan without TP
//! that runs micro-batch by micro-batch
//! ([`crate::plan::pipeline::Pipeline::runs_data_parallel`]: it is that
//! data-parallel plan, whatever flags built it); any other pipeline plan
//! through [`crate::lower::pipeline`], which emits the same kinds of ops
//! into the same sinks.
//!
//! The size limit ([`crate::limits::MAX_SIM_OPS`]) counts the ops built:
//! those of the ranks simulated after identical nodes are merged, of the
//! passes kept when runs fold.

use crate::cost::CostModel;
use crate::data_parallel::Description;
use crate::error::PlanError;
use crate::fold::Layout;
use crate::lower::data_parallel::{lower, lower_into, Lowering};
use crate::lower::{Lowered, LoweredParts, Sink};
use crate::plan::pipeline::Pipeline;
use crate::plan::Plan;
use crate::symmetry::NodeClasses;

/// Knobs of an evaluation of an iteration (the event simulation's, and
/// the fast model's where they apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Record a Chrome trace into [`crate::report::Report::trace`].
    pub trace: bool,
    /// Prefetch the next unit's all-gather (default true).
    pub prefetch: bool,
    /// Share links between overlapping transfers and slow compute while
    /// collectives run (the cost model's `comm_interference`); default
    /// true. Off, every op takes its duration alone: the fast model's
    /// timing ([`crate::fast::evaluate`]), equal to the simulator then.
    pub contention: bool,
    /// Simulate one node per class of identical nodes and give the others
    /// its timeline ([`NodeClasses`]; exact, held equal to the full
    /// simulation by the tests); default true. A trace always shows every
    /// GPU, so tracing simulates them all.
    pub merge_identical_nodes: bool,
    /// Every collective blocks its ranks' next compute op, as in a trainer
    /// that issues collectives synchronously (`exec`'s: what `validate`
    /// predicts); default false. CPU ranks always block.
    pub blocking_collectives: bool,
    /// Simulate a few passes of each long run of identical micro-batch
    /// passes and stand one exactly periodic pass pattern for the rest
    /// ([`crate::fold`]; checked on the simulated times, held equal to the
    /// full simulation by the tests); default true. A trace always shows
    /// every pass, so tracing simulates them all.
    pub fold_passes: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            trace: false,
            prefetch: true,
            contention: true,
            merge_identical_nodes: true,
            blocking_collectives: false,
            fold_passes: true,
        }
    }
}

/// The nodes an evaluation under `opts` runs (all of them, or one per
/// class of identical nodes).
pub fn node_classes(costs: &CostModel, plan: &Plan, opts: &SimOptions) -> NodeClasses {
    if opts.merge_identical_nodes && !opts.trace {
        match &plan.pipeline {
            Some(pipe) if !pipe.runs_data_parallel(costs.ranks(), &plan.strategy) => {
                NodeClasses::of_pipeline(costs, pipe)
            }
            _ => NodeClasses::of(costs, plan),
        }
    } else {
        let c = &costs.workload.cluster;
        NodeClasses::identity(c.len(), c.nodes.len())
    }
}

/// Validates a pipeline plan against the workload (origin `plan`): the
/// plan, its pipeline against the model's blocks, its TP groups.
pub fn validate_pipeline(costs: &CostModel, plan: &Plan, pipe: &Pipeline) -> Result<(), PlanError> {
    let w = &costs.workload;
    plan.validate(costs.ranks(), w.global_batch, "plan")?;
    pipe.validate(
        costs.ranks(),
        Some(w.model.layers),
        w.global_batch,
        &plan.strategy,
        "plan",
    )?;
    crate::expert_parallel::check(pipe, &w.model, &plan.strategy, "plan")?;
    check_tensor_groups(costs, pipe)
}

/// Refuses a pipeline plan whose graph would exceed
/// [`crate::limits::MAX_SIM_OPS`] on the ranks `classes` simulates: the
/// ops the lowering builds ([`crate::lower::pipeline::ops_estimate`]),
/// not those of the replicas merged away.
pub fn check_pipeline(
    plan: &Plan,
    pipe: &Pipeline,
    classes: &NodeClasses,
) -> Result<(), PlanError> {
    let ops = crate::lower::pipeline::ops_estimate(pipe, &plan.strategy, &classes.simulated);
    if ops > crate::limits::MAX_SIM_OPS {
        let sim = classes.simulated_ranks();
        let merged = match classes.simulated.len() - sim {
            0 => String::new(),
            n => format!(", the other {n} taking an identical twin's timeline"),
        };
        return Err(PlanError::invalid(
            "plan",
            "pipeline.microbatches",
            format!(
                "one iteration would need about {ops} simulated ops ({} micro-batches on {sim} simulated GPUs{merged}), above the simulator's limit of {} ops: use fewer micro-batches",
                pipe.microbatches,
                crate::limits::MAX_SIM_OPS
            ),
        ));
    }
    Ok(())
}

/// Whether the simulator builds a pipeline plan of `pipe` under
/// `strategy` within its size limit with identical nodes merged (as the
/// planners' judge simulates): what the pipeline planners filter their
/// candidates by before simulating them. A data-parallel iteration
/// ([`Pipeline::runs_data_parallel`]) is sized when simulated.
pub fn pipeline_fits_simulator(
    costs: &CostModel,
    strategy: &crate::strategy::Strategy,
    pipe: &Pipeline,
) -> bool {
    if pipe.runs_data_parallel(costs.ranks(), strategy) {
        return true;
    }
    let classes = NodeClasses::of_pipeline(costs, pipe);
    crate::lower::pipeline::ops_estimate(pipe, strategy, &classes.simulated)
        <= crate::limits::MAX_SIM_OPS
}

/// A pipeline's TP groups against the model (the degree divides its
/// heads, KV heads and MLP width) and the cluster (every TP group inside
/// one node unless `pipeline.tp_across_nodes`).
fn check_tensor_groups(costs: &CostModel, pipe: &Pipeline) -> Result<(), PlanError> {
    let c = &costs.workload.cluster;
    for (s, st) in pipe.stages.iter().enumerate() {
        let field = format!("pipeline.stages[{s}].tp");
        crate::tensor::TensorParallel::check(st.tp, &costs.workload.model, "plan", &field)?;
        if pipe.tp_across_nodes || st.tp <= 1 {
            continue;
        }
        for j in 0..st.dp() {
            let g = st.group(j);
            let node = |r: u32| c.gpus[r as usize].node;
            if let Some(&other) = g.iter().find(|&&r| node(r) != node(g[0])) {
                return Err(PlanError::invalid(
                    "plan",
                    format!("pipeline.stages[{s}].gpus"),
                    format!(
                        "TP group {j} of stage {s} (ranks {}) spans nodes {} and {}: TP groups stay inside one node, where NVLink carries their per-layer collectives (set pipeline.tp_across_nodes, or --tp-across-nodes, to price them over the network)",
                        crate::lists::runs(g),
                        c.nodes[node(g[0])].name,
                        c.nodes[node(other)].name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Ops per step a lowered graph holds at most (compute, gather, reduce,
/// copy), for the size check.
const OPS_PER_STEP: u64 = 4;

/// Refuses a plan whose graph would exceed [`crate::limits::MAX_SIM_OPS`]
/// on the `simulated` ranks, before it is built.
pub fn check_size(d: &Description<'_>, simulated: usize) -> Result<(), PlanError> {
    let ranks = d.ranks().max(1) as u64;
    let ops = d
        .total_steps()
        .saturating_mul(OPS_PER_STEP)
        .saturating_mul(simulated as u64)
        / ranks;
    if ops > crate::limits::MAX_SIM_OPS {
        return Err(PlanError::invalid(
            "plan",
            "gpus[].microbatches",
            format!(
                "one iteration would need about {ops} simulated ops ({} steps of {} phases on {simulated} simulated GPUs), \
                 above the simulator's limit of {} ops: use fewer micro-batches",
                d.total_steps(),
                d.phases.len(),
                crate::limits::MAX_SIM_OPS
            ),
        ));
    }
    Ok(())
}

/// What an iteration lowers from.
#[derive(Debug)]
pub enum Iteration<'a> {
    /// A pipeline plan (passes never folded).
    Pipeline {
        /// The cost model.
        costs: &'a CostModel,
        /// The plan.
        plan: &'a Plan,
        /// Its pipeline.
        pipe: &'a Pipeline,
        /// The ranks simulated, and whose timeline the others take.
        classes: NodeClasses,
    },
    /// A data-parallel plan: its description and the nodes simulated.
    DataParallel {
        /// The iteration's description.
        d: Box<Description<'a>>,
        /// The ranks simulated, and whose timeline the others take.
        classes: NodeClasses,
    },
}

impl<'a> Iteration<'a> {
    /// The iteration of `plan` on the workload of `costs` under `opts`:
    /// validated (origin `plan`), its size checked, identical nodes
    /// grouped when `opts` merges them.
    pub fn new(
        costs: &'a CostModel,
        plan: &'a Plan,
        opts: &SimOptions,
    ) -> Result<Iteration<'a>, PlanError> {
        if let Some(pipe) = &plan.pipeline {
            validate_pipeline(costs, plan, pipe)?;
            if !pipe.runs_data_parallel(costs.ranks(), &plan.strategy) {
                let classes = node_classes(costs, plan, opts);
                check_pipeline(plan, pipe, &classes)?;
                return Ok(Iteration::Pipeline {
                    costs,
                    plan,
                    pipe,
                    classes,
                });
            }
            // One stage without TP, micro-batch by micro-batch: the
            // data-parallel plan of its per-GPU entries.
        }
        let d = Description::new(costs, plan)?;
        let classes = node_classes(costs, plan, opts);
        let it = Iteration::DataParallel {
            d: Box::new(d),
            classes,
        };
        // What is built first: the coarsest folded run, else every pass
        // (a finer one, or every pass when no run folds, is checked when
        // lowered).
        if let Iteration::DataParallel { d, classes } = &it {
            let sim = classes.simulated_ranks();
            match it.fold_layouts(opts).first() {
                Some(l) => check_size(&d.with_passes(&l.kept), sim)?,
                None => check_size(d, sim)?,
            }
        }
        Ok(it)
    }

    /// The ranks simulated, and whose timeline the others take.
    pub fn classes(&self) -> NodeClasses {
        match self {
            Iteration::Pipeline { classes, .. } | Iteration::DataParallel { classes, .. } => {
                classes.clone()
            }
        }
    }

    /// The fold layouts to try, coarsest first, when `opts` folds passes
    /// and nothing (a trace) needs every pass: empty when the iteration has
    /// no run long enough to fold ([`crate::fold::LEVELS`]).
    pub fn fold_layouts(&self, opts: &SimOptions) -> Vec<Layout> {
        let Iteration::DataParallel { d, .. } = self else {
            return Vec::new();
        };
        if !opts.fold_passes || opts.trace {
            return Vec::new();
        }
        let runs = d.pass_runs();
        crate::fold::LEVELS
            .into_iter()
            .map_while(|level| Layout::new(&runs, level))
            .collect()
    }

    /// How a data-parallel description is lowered under `opts`.
    fn lowering<'c>(opts: &SimOptions, contention: bool, classes: &'c NodeClasses) -> Lowering<'c> {
        Lowering {
            prefetch: opts.prefetch,
            contention,
            classes: (!classes.is_identity()).then_some(classes),
            blocking_collectives: opts.blocking_collectives,
        }
    }

    /// Emits the ops of the iteration (of `layout`'s reduced run of
    /// passes, when given) into `sink`: with `contention`, transfers and
    /// collectives declare the links they keep busy.
    pub fn lower_into<S: Sink>(
        &self,
        opts: &SimOptions,
        contention: bool,
        layout: Option<&Layout>,
        sink: &mut S,
    ) -> Result<LoweredParts, PlanError> {
        match self {
            Iteration::Pipeline {
                costs,
                plan,
                pipe,
                classes,
            } => crate::lower::pipeline::lower_into(costs, plan, pipe, contention, classes, sink),
            Iteration::DataParallel { d, classes } => {
                let how = Self::lowering(opts, contention, classes);
                let sim = classes.simulated_ranks();
                Ok(match layout {
                    Some(l) => {
                        let reduced = d.with_passes(&l.kept);
                        check_size(&reduced, sim)?;
                        lower_into(&reduced, &how, sink)
                    }
                    None => {
                        check_size(d, sim)?;
                        lower_into(d, &how, sink)
                    }
                })
            }
        }
    }

    /// The iteration (of `layout`'s reduced run of passes, when given) as
    /// an engine graph, links shared as `opts.contention` says.
    pub fn lower_graph(
        &self,
        opts: &SimOptions,
        layout: Option<&Layout>,
    ) -> Result<Lowered, PlanError> {
        match self {
            Iteration::Pipeline {
                costs,
                plan,
                pipe,
                classes,
            } => crate::lower::pipeline::lower(costs, plan, pipe, opts.contention, classes),
            Iteration::DataParallel { d, classes } => {
                let how = Self::lowering(opts, opts.contention, classes);
                let sim = classes.simulated_ranks();
                Ok(match layout {
                    Some(l) => {
                        let reduced = d.with_passes(&l.kept);
                        check_size(&reduced, sim)?;
                        lower(&reduced, &how)
                    }
                    None => {
                        check_size(d, sim)?;
                        lower(d, &how)
                    }
                })
            }
        }
    }

    /// The cost model.
    pub fn costs(&self) -> &'a CostModel {
        match self {
            Iteration::Pipeline { costs, .. } => costs,
            Iteration::DataParallel { d, .. } => d.costs,
        }
    }
}
