//! `cephalo`: plan, simulate and validate FSDP training on heterogeneous GPU clusters.
fn main() {}
