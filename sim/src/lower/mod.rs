//! Lowering: a plan's iteration turned into ops, their memory changes and
//! the dependencies between them, emitted into a [`Sink`] (the engine
//! graph, or the fast model's timeline).
//!
//! * [`sink`]: the sink, the collective records and the lowered iteration;
//! * [`collectives`]: one place where a lowering's collectives are priced,
//!   declare the links they keep busy and are recorded;
//! * [`dp_group`]: one emitter of a data-parallel group's gradient
//!   reduction (DDP's all-reduce, ZeRO / FSDP's reduce-scatter per shard
//!   group, HSDP's all-reduce across the shard groups) and parameter
//!   all-gathers, for every layout;
//! * [`model_parallel`]: one emitter of a block's model-parallel
//!   communication inside its group (TP / SP today);
//! * [`data_parallel`]: the walk of a one-stage layout's phases (layered,
//!   no-sync or sync accumulation, uneven per-GPU batches and state
//!   fractions, offload);
//! * [`pipeline`]: the walk of a pipeline schedule's passes over stages
//!   (GPipe, 1F1B, interleaved, ZB-H1), with TP, buckets and FSDP per unit.

pub mod collectives;
pub mod data_parallel;
pub mod dp_group;
pub mod model_parallel;
pub mod pipeline;
pub mod sink;

pub use sink::{at, CollectiveRecord, Lowered, LoweredParts, Sink};
