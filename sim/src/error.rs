//! Error types, one per layer.
//!
//! Every error names where the bad input came from (`origin`: a file path or a
//! command-line flag), the field inside it, and what was expected. The CLI
//! maps all of them to exit code 2. Out-of-memory is *not* an error: it is a
//! simulation outcome carried in the report.

use thiserror::Error;

/// Origin of errors about a workload's fields (`seq_len`, `global_batch`,
/// `dtype`, `mem_fraction`, `overhead_gib`, `memory_cluster`, the cluster's
/// size as `nodes`): the library names the field; a caller that knows where
/// the field came from (the CLI: a flag) says so.
pub const WORKLOAD: &str = "workload";

/// Origin of errors about a strategy's fields (`sharding`, `shard_group`,
/// `accumulation`, `checkpointing`, `offload`, `param_dtype`,
/// `reduce_dtype`, `attention`), as [`WORKLOAD`] for the workload's.
pub const STRATEGY: &str = "strategy";

/// Bad specification input: cluster, GPU, model, profile or workload.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SpecError {
    /// A field has a value outside what is accepted.
    #[error("{origin}: field `{field}`: {message}")]
    Invalid {
        /// File path or flag the value came from.
        origin: String,
        /// Field path inside it (e.g. `nodes[1].gpus[0].type`).
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// Text could not be parsed as TOML / JSON.
    #[error("{origin}: cannot parse: {message}")]
    Parse {
        /// File path or flag.
        origin: String,
        /// Parser message (with line / column where known).
        message: String,
    },
    /// A GPU name is not in the catalog.
    #[error("{origin}: unknown GPU `{name}` (known: {known})")]
    UnknownGpu {
        /// File path or flag.
        origin: String,
        /// The name given.
        name: String,
        /// Comma-separated canonical names of the catalog.
        known: String,
    },
    /// A model name is not in the catalog.
    #[error("{origin}: unknown model `{name}` (known: {known})")]
    UnknownModel {
        /// File path or flag.
        origin: String,
        /// The name given.
        name: String,
        /// Comma-separated canonical names of the catalog.
        known: String,
    },
    /// No profile and no analytic fallback for a (gpu, model, seq, dtype).
    #[error("no profile for gpu `{gpu}`, model `{model}`, seq {seq_len}, {dtype}: {why}")]
    MissingProfile {
        /// GPU name.
        gpu: String,
        /// Model name.
        model: String,
        /// Sequence length (tokens).
        seq_len: u32,
        /// Precision.
        dtype: String,
        /// Why no fallback was possible.
        why: String,
    },
}

impl SpecError {
    /// Shorthand for [`SpecError::Invalid`].
    pub fn invalid(
        origin: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> SpecError {
        SpecError::Invalid {
            origin: origin.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`SpecError::Parse`].
    pub fn parse(origin: impl Into<String>, message: impl std::fmt::Display) -> SpecError {
        SpecError::Parse {
            origin: origin.into(),
            message: message.to_string(),
        }
    }
}

/// A plan that does not match its workload (wrong rank count, sums, zeros).
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum PlanError {
    /// A field of the plan is inconsistent with the workload.
    #[error("{origin}: plan field `{field}`: {message}")]
    Invalid {
        /// Plan file or flag.
        origin: String,
        /// Field path (e.g. `gpus[2].batch`).
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// No plan fits in memory; says by how much the best attempt misses.
    #[error("infeasible: {message}")]
    Infeasible {
        /// Human explanation including GPU, need and capacity.
        message: String,
        /// Smallest memory shortfall found (GiB).
        shortfall_gib: f64,
        /// The GPU (rank) with that shortfall, if one.
        rank: Option<usize>,
    },
    /// Input specs were bad.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The simulator could not run the plan's task graph: a simulated time
    /// that does not fit the clock (absurd input durations), or an
    /// internal bug (plan graphs are acyclic by construction).
    #[error("simulator: {0}")]
    Sim(SimError),
}

impl PlanError {
    /// Shorthand for [`PlanError::Invalid`].
    pub fn invalid(
        origin: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> PlanError {
        PlanError::Invalid {
            origin: origin.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<SimError> for PlanError {
    fn from(e: SimError) -> PlanError {
        PlanError::Sim(e)
    }
}

/// Errors of the discrete-event engine ([`crate::engine::run`]).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// Some ops could never start: a dependency cycle, collectives issued in
    /// different orders on different ranks, or an op issued on no stream.
    #[error("deadlock: {stuck} of {total} ops never ran (first stuck: {first})")]
    Deadlock {
        /// Number of ops that never ran.
        stuck: usize,
        /// Number of ops in the graph.
        total: usize,
        /// Description of the lowest-numbered stuck ops and what they wait for.
        first: String,
    },
    /// The graph refers to an op that does not exist.
    #[error("op {op}: dependency on unknown op {dep}")]
    UnknownOp {
        /// The op with the bad dependency.
        op: u32,
        /// The unknown op id.
        dep: u32,
    },
    /// A simulated time does not fit the engine's clock (2^64 ns, about
    /// 584 years): some duration is absurd (a profile time, a bandwidth
    /// near zero). Never reported as a small number.
    #[error("op {op} (`{name}`) ends after 2^64 ns (about 584 years) of simulated time: a duration is absurdly large (check the profile times and bandwidths it comes from)")]
    TimeOverflow {
        /// The op whose end does not fit.
        op: u32,
        /// Its name.
        name: String,
    },
    /// An op is issued twice on the same stream.
    #[error("op {op} issued twice on rank {rank} stream {stream}")]
    DoubleIssue {
        /// The op.
        op: u32,
        /// The rank.
        rank: u32,
        /// The stream name.
        stream: &'static str,
    },
}
