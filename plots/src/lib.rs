//! `plots`: figure rendering (PNG and SVG) over `sim` reports. No simulation logic.
#![warn(missing_docs, missing_debug_implementations)]

pub mod scatter;
