//! Integration tests of the `sim` crate (one binary).

mod common;
mod expert_parallel;
mod experts;
mod fold;
mod hetero3d;
mod house;
mod layout;
mod memory;
mod models;
mod perfmodel;
mod pipeline;
mod planner;
mod simulate;
mod strategies;
mod threed;
mod tidy;
