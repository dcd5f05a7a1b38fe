//! End-to-end tests of the `cephalo` command line (one binary, CONVENTIONS.md item 11).

mod comm;
mod common;
mod plan;
mod predict;
mod simulate;
mod strategy;
mod validate;
