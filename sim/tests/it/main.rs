//! Integration tests of the `sim` crate (one binary, CONVENTIONS.md item 11).

mod common;
mod fsdp;
mod perfmodel;
mod planner;
mod tidy;
