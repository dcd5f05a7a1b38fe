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

/// One planner of the registry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The kind of plan it makes.
    pub family: Family,
    /// Its place in comparisons.
    pub role: Role,
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
        aliases: &["native"],
        make: || Box::new(native()),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Reference,
        aliases: &["compat", "reference"],
        make: || Box::new(compat::Compat),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["even", "even-fsdp"],
        make: || Box::new(fsdp::Fsdp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["even-ga", "ga"],
        make: || Box::new(fsdp_ga::FsdpGa),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["zero-2", "shard-grad-op"],
        make: || Box::new(zero2::Zero2),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["no-shard"],
        make: || Box::new(ddp::Ddp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["hybrid", "hybrid-shard"],
        make: || Box::new(hsdp::Hsdp),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["proportional", "whale"],
        make: || Box::new(proportional::SpeedProportional),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Baseline,
        aliases: &["proportional-mem", "memory-aware-proportional"],
        make: || Box::new(proportional_mem::SpeedProportionalMem),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Ablation,
        aliases: &["compute-balancing"],
        make: || Box::new(ablation::BalanceCompute),
    },
    Entry {
        family: Family::DataParallel,
        role: Role::Ablation,
        aliases: &["state-balancing"],
        make: || Box::new(ablation::BalanceState),
    },
    Entry {
        family: Family::Pipeline,
        role: Role::Baseline,
        aliases: &["deepspeed-pipeline", "pp"],
        make: || Box::new(pipeline::UniformPipeline),
    },
    Entry {
        family: Family::Pipeline,
        role: Role::Baseline,
        aliases: &["hetero-pipeline", "metis"],
        make: || Box::new(pipeline_hetero::HeteroPipeline),
    },
    Entry {
        family: Family::ThreeD,
        role: Role::Baseline,
        aliases: &["megatron-lm", "3d", "calculon"],
        make: || Box::new(megatron::Megatron),
    },
    Entry {
        family: Family::ThreeD,
        role: Role::Baseline,
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
