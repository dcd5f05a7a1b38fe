//! Every planner, declared once: its constructor, the family of plans it
//! makes, its role in comparisons and the other names users may type. Each
//! planner's own name and one-line summary are its [`Planner`] impl's; the
//! CLI's help, `cephalo list planners`, `compare`, the studies' baseline
//! sets and the native planner's seeds all read this table.
//!
//! Adding a planner: its file under `planner/` implementing [`Planner`], a
//! `pub mod` line in `planner/mod.rs`, and one [`Entry`] in [`ENTRIES`].

use super::Planner;
use super::{ablation, cephalo, compat, ddp, fsdp, fsdp_ga, hsdp};
use super::{hetero3d, megatron, pipeline, pipeline_hetero, proportional, proportional_mem, zero2};
use crate::error::PlanError;

/// The kind of plan a planner makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Every GPU runs the whole model on its share of the batch (sharded or
    /// replicated state).
    DataParallel,
    /// Stages of contiguous blocks, micro-batches flowing through them.
    Pipeline,
    /// Tensor parallelism inside stages of a pipeline, data-parallel
    /// replicas of both (Megatron-LM's 3D).
    ThreeD,
}

impl Family {
    /// Every family, in the order reports list them.
    pub const ALL: [Family; 3] = [Family::DataParallel, Family::Pipeline, Family::ThreeD];

    /// Name in tables (`data-parallel`, `pipeline`, `3d`).
    pub fn name(self) -> &'static str {
        match self {
            Family::DataParallel => "data-parallel",
            Family::Pipeline => "pipeline",
            Family::ThreeD => "3d",
        }
    }
}

/// A planner's place in comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Cephalo's own optimizer (searches every strategy).
    Native,
    /// The paper authors' reference optimizer, rule for rule.
    Reference,
    /// What people run instead: a framework's or a paper's fixed rule.
    Baseline,
    /// One half of Cephalo's method alone (the paper's ablation).
    Ablation,
}

impl Role {
    /// Whether it is one of Cephalo's own planners (the native optimizer
    /// or the reference one): every other planner is a baseline to them.
    pub fn is_cephalo(self) -> bool {
        matches!(self, Role::Native | Role::Reference)
    }
}

/// One planner of the registry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The kind of plan it makes.
    pub family: Family,
    /// Its place in comparisons.
    pub role: Role,
    /// Whether it is its family's standard: the rule the family's
    /// frameworks apply untuned (PyTorch FSDP, DeepSpeed's uniform
    /// pipeline, Megatron-LM's 3D): the baseline speed-ups are stated
    /// against and a framework's log is predicted with ([`standard`]).
    pub standard: bool,
    /// Whether the paper's ablation takes it as the control with neither
    /// half of Cephalo's method (FSDP with layered accumulation): see
    /// [`ablation()`].
    pub ablation_control: bool,
    /// Other names users may type (lower case, `-` separated); its own
    /// name is [`Planner::name`].
    pub aliases: &'static [&'static str],
    /// Builds it.
    pub make: fn() -> Box<dyn Planner>,
}

impl Entry {
    /// The planner's name (`--planner NAME`).
    pub fn name(&self) -> &'static str {
        (self.make)().name()
    }

    /// Whether the native planner may seed its search with this planner's
    /// plan: every data-parallel planner but itself.
    pub fn seeds_native(&self) -> bool {
        self.family == Family::DataParallel && self.role != Role::Native
    }
}

/// Every planner, in the order `compare` and `list planners` print them
/// (ours first).
pub const ENTRIES: [Entry; 15] = [
    Entry {
        family: Family::DataParallel,
        role: Role::Native,
        standard: false,
        ablation_control: false,
        aliases: &["native"],
        make: || Box::new(native()),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Reference,
        standard: false,
        ablation_control: false,
        aliases: &["compat", "reference"],
        make: || Box::new(compat::Compat),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: true,
        ablation_control: false,
        aliases: &["even", "even-fsdp"],
        make: || Box::new(fsdp::Fsdp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: true,
        aliases: &["even-ga", "ga"],
        make: || Box::new(fsdp_ga::FsdpGa),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["zero-2", "shard-grad-op"],
        make: || Box::new(zero2::Zero2),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["no-shard"],
        make: || Box::new(ddp::Ddp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["hybrid", "hybrid-shard"],
        make: || Box::new(hsdp::Hsdp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["proportional", "whale"],
        make: || Box::new(proportional::SpeedProportional),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["proportional-mem", "memory-aware-proportional"],
        make: || Box::new(proportional_mem::SpeedProportionalMem),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Ablation,
        standard: false,
        ablation_control: false,
        aliases: &["compute-balancing"],
        make: || Box::new(ablation::BalanceCompute),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Ablation,
        standard: false,
        ablation_control: false,
        aliases: &["state-balancing"],
        make: || Box::new(ablation::BalanceState),
    },
    Entry {
        family: Family::Pipeline,
        role: Role::Baseline,
        standard: true,
        ablation_control: false,
        aliases: &["deepspeed-pipeline", "pp"],
        make: || Box::new(pipeline::UniformPipeline),
    },
    Entry {
        family: Family::Pipeline,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["hetero-pipeline", "metis"],
        make: || Box::new(pipeline_hetero::HeteroPipeline),
    },
    Entry {
        family: Family::ThreeD,
        role: Role::Baseline,
        standard: true,
        ablation_control: false,
        aliases: &["megatron-lm", "3d", "calculon"],
        make: || Box::new(megatron::Megatron),
    },
    Entry {
        family: Family::ThreeD,
        role: Role::Baseline,
        standard: false,
        ablation_control: false,
        aliases: &["hetero3d", "flashflex", "hexiscale"],
        make: || Box::new(hetero3d::Hetero3d),
    },
];

/// The native planner, seeded with every planner [`Entry::seeds_native`]
/// admits.
pub fn native() -> cephalo::Cephalo {
    cephalo::Cephalo::with_seeds(seeds)
}

/// The planners of the entries `keep` admits, in registry order.
pub fn select(keep: impl Fn(&Entry) -> bool) -> Vec<Box<dyn Planner>> {
    ENTRIES
        .iter()
        .filter(|e| keep(e))
        .map(|e| (e.make)())
        .collect()
}

/// The names of the entries `keep` admits, in registry order.
pub fn names(keep: impl Fn(&Entry) -> bool) -> Vec<&'static str> {
    ENTRIES
        .iter()
        .filter(|e| keep(e))
        .map(Entry::name)
        .collect()
}

/// Every planner.
pub fn all() -> Vec<Box<dyn Planner>> {
    select(|_| true)
}

/// The contenders of `plan`'s default search for the best plan of every
/// family: the native planner for data-parallel plans (its search seeds
/// every data-parallel baseline) and every pipeline and 3D planner.
pub fn contenders() -> Vec<(Family, Box<dyn Planner>)> {
    ENTRIES
        .iter()
        .filter(|e| e.role == Role::Native || e.family != Family::DataParallel)
        .map(|e| (e.family, (e.make)()))
        .collect()
}

/// The pipeline-parallel planners (not seeds of the native planner,
/// whose plans are data-parallel).
pub fn pipelines() -> Vec<Box<dyn Planner>> {
    select(|e| e.family == Family::Pipeline)
}

/// The data-parallel baselines and ablations (every data-parallel planner
/// but the two Cephalo ones).
pub fn baselines() -> Vec<Box<dyn Planner>> {
    select(|e| {
        e.family == Family::DataParallel && matches!(e.role, Role::Baseline | Role::Ablation)
    })
}

/// The native planner's seeds: the reference optimizer, then the
/// data-parallel baselines and ablations.
pub fn seeds() -> Vec<Box<dyn Planner>> {
    select(Entry::seeds_native)
}

/// The data-parallel baselines (the paper's comparison family): their
/// names, for the reports' speed-up ranges.
pub fn data_parallel_baselines() -> Vec<&'static str> {
    names(|e| e.family == Family::DataParallel && e.role == Role::Baseline)
}

/// The entry of the native planner (the one [`Role::Native`] entry).
pub fn native_entry() -> &'static Entry {
    the(|e| e.role == Role::Native, "the native planner")
}

/// The native planner's name (what its plans' `planner` field records).
pub fn native_name() -> &'static str {
    native_entry().name()
}

/// The reference optimizer's entry (the one [`Role::Reference`] entry).
pub fn reference() -> &'static Entry {
    the(|e| e.role == Role::Reference, "the reference optimizer")
}

/// The standard of `family` (its one [`Entry::standard`] entry): plain
/// FSDP for data parallelism, the uniform pipeline, Megatron-LM's 3D.
pub fn standard(family: Family) -> &'static Entry {
    the(
        |e| e.family == family && e.standard,
        "a family's standard planner",
    )
}

/// The paper's ablation, in order: each half of Cephalo's method alone
/// ([`Role::Ablation`]), then the control with neither half
/// ([`Entry::ablation_control`]).
pub fn ablation() -> Vec<&'static str> {
    let mut v = names(|e| e.role == Role::Ablation);
    v.extend(names(|e| e.ablation_control));
    v
}

/// Whether the planner called `name` is one of Cephalo's own
/// ([`Role::is_cephalo`]); an unknown name is not.
pub fn is_cephalo(name: &str) -> bool {
    entry(name).is_some_and(|e| e.role.is_cephalo())
}

/// The one entry `keep` admits (the table holds exactly one: a test
/// checks every such question).
fn the(keep: impl Fn(&Entry) -> bool, what: &str) -> &'static Entry {
    match ENTRIES.iter().find(|e| keep(e)) {
        Some(e) => e,
        None => unreachable!("the registry has {what} (registry tests)"),
    }
}

/// The entry of the planner called `name` (its own name or an alias, any
/// case, `_` or `-`).
pub fn entry(name: &str) -> Option<&'static Entry> {
    let n = name.trim().to_ascii_lowercase().replace('_', "-");
    ENTRIES
        .iter()
        .find(|e| e.name() == n || e.aliases.contains(&n.as_str()))
}

/// Looks a planner up by name or alias (`compat`, `even`, `whale`, ...);
/// the error (origin `origin`, field `planner`) lists the names.
pub fn by_name(name: &str, origin: &str) -> Result<Box<dyn Planner>, PlanError> {
    entry(name).map(|e| (e.make)()).ok_or_else(|| {
        PlanError::invalid(
            origin,
            "planner",
            format!(
                "unknown planner `{name}` (known: {})",
                names(|_| true).join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(all().len(), ENTRIES.len());
        assert_eq!(all().len(), 15);
        for p in all() {
            assert_eq!(by_name(p.name(), "t").unwrap().name(), p.name());
        }
        assert_eq!(by_name("compat", "t").unwrap().name(), "cephalo-compat");
        assert!(by_name("nope", "--planner").is_err());
    }

    #[test]
    fn roles_and_standards_are_each_one_entry() {
        let count = |keep: &dyn Fn(&Entry) -> bool| ENTRIES.iter().filter(|e| keep(e)).count();
        assert_eq!(count(&|e| e.role == Role::Native), 1);
        assert_eq!(count(&|e| e.role == Role::Reference), 1);
        for f in Family::ALL {
            assert_eq!(count(&|e| e.family == f && e.standard), 1, "{}", f.name());
            assert_eq!(standard(f).role, Role::Baseline);
        }
        assert_eq!(native_name(), cephalo::Cephalo::with_seeds(Vec::new).name());
        assert_eq!(standard(Family::DataParallel).name(), fsdp::Fsdp.name());
        assert_eq!(standard(Family::ThreeD).name(), megatron::Megatron.name());
        assert_eq!(
            ablation(),
            ["balance-compute", "balance-state", "fsdp-ga"],
            "the paper's ablation: each half, then neither"
        );
        assert!(is_cephalo(reference().name()) && is_cephalo("native"));
        assert!(!is_cephalo("fsdp") && !is_cephalo("nope"));
    }

    #[test]
    fn names_and_aliases_are_unique() {
        let mut seen: Vec<&str> = Vec::new();
        for e in &ENTRIES {
            for n in std::iter::once(e.name()).chain(e.aliases.iter().copied()) {
                assert!(!seen.contains(&n), "`{n}` names two planners");
                seen.push(n);
            }
        }
    }
}
