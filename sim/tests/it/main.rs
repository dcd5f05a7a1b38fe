//! Integration tests of the `sim` crate (one binary, CONVENTIONS.md item 11).

mod common;
mod fold;
mod house;
mod models;
mod perfmodel;
mod pipeline;
mod planner;
mod simulate;
mod strategies;
mod tidy;
