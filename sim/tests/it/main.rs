//! Integration tests of the `sim` crate (one binary, CONVENTIONS.md item 11).

mod fsdp;
mod planner;
mod perfmodel;
