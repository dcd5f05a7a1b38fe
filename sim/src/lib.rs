//! `sim`: the planning and simulation core of cephalo.
//!
//! Data flows one way (see `ARCHITECTURE.md`):
//! specs ([`gpu`], [`model`], [`cluster`]) + profiles ([`profile`]) ->
//! per-rank cost model ([`cost`]) -> strategy ([`strategy`]) and planner
//! ([`planner`]) -> plan ([`plan::Plan`]) -> data-parallel description
//! ([`data_parallel`]) -> discrete-event simulation ([`simulate`]) or fast model
//! ([`fast`]) -> report ([`report`]).
//!
//! This crate does no I/O: it never prints, reads files or environment
//! variables. Callers hand it text (TOML / JSON) or values and get values back.
//! Built-in catalogs are compiled in with `include_str!`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod activation;
pub mod bounds;
pub mod choice;
pub mod cluster;
pub mod comm;
pub mod cost;
pub mod data_parallel;
pub mod engine;
pub mod error;
pub mod experiment;
pub mod expert_parallel;
pub mod experts;
pub mod export;
pub mod fast;
pub mod fold;
pub mod gpu;
pub mod hf_config;
pub mod iteration;
pub mod limits;
pub mod link;
pub mod listing;
pub mod lists;
pub mod lower;
pub mod memory;
pub mod mla;
pub mod model;
pub mod perfmodel;
pub mod physical;
pub mod pipeline;
pub mod plan;
pub mod plan_output;
pub mod planner;
pub mod pool;
pub mod precision;
pub mod prediction;
pub mod profile;
pub mod report;
pub mod runlog;
pub mod session;
pub mod simulate;
pub mod stack;
pub mod stats;
pub mod strategy;
pub mod symmetry;
pub mod tensor;
pub mod text;
pub mod trace;
pub mod units;
pub mod whatif;
pub mod whatif_answer;
