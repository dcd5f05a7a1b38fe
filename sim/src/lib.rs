//! `sim`: the planning and simulation core of cephalo.
//!
//! Data flows one way (see `ARCHITECTURE.md`):
//! specs ([`gpu`], [`model`], [`cluster`]) + profiles ([`profile`]) ->
//! per-rank cost model ([`cost`]) -> plan ([`plan::Plan`]) ->
//! discrete-event simulation -> report.
//!
//! This crate does no I/O: it never prints, reads files or environment
//! variables. Callers hand it text (TOML / JSON) or values and get values back.
//! Built-in catalogs are compiled in with `include_str!`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod cluster;
pub mod comm;
pub mod cost;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod fsdp;
pub mod gpu;
pub mod memory;
pub mod model;
pub mod perfmodel;
pub mod plan;
pub mod planner;
pub mod profile;
pub mod report;
pub mod trace;
pub mod units;
