//! `plots`: figure rendering (PNG and SVG) over `sim` reports. No simulation logic.
#![warn(missing_docs, missing_debug_implementations)]

pub mod bars;
pub mod experiment;
pub mod gantt;
pub mod lines;
pub mod render;
pub mod scatter;
pub mod stacked;

pub use render::{render, Figure};
