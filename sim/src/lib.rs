//! `sim`: the planning and simulation core of cephalo.
//!
//! Data flows one way (see `ARCHITECTURE.md`):
//! specs ([`gpu`], [`model`], [`cluster`]) + profiles ([`profile`]) ->
//! per-rank cost model ([`cost`], [`comm`]) -> planner ([`planner`]) -> [`plan::Plan`] ->
//! discrete-event simulation ([`engine`], [`fsdp`]) -> [`report::Report`].
//!
//! This crate does no I/O: it never prints, reads files or environment
//! variables. Callers hand it text (TOML / JSON) or values and get values back.
//! Built-in catalogs are compiled in with `include_str!`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod cluster;
pub mod dtype;
pub mod error;
pub mod gpu;
pub mod model;
pub mod profile;
pub mod units;
