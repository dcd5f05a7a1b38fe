//! Build script of `cephalo-exec`: rpath to libtorch (feature `torch`) and the
//! CUDA link flags (feature `cuda`) for this package's binaries, examples and
//! tests. See `link_args.rs`.
include!("link_args.rs");

fn main() {
    emit_libtorch_link_args(
        std::env::var_os("CARGO_FEATURE_TORCH").is_some(),
        std::env::var_os("CARGO_FEATURE_CUDA").is_some(),
    );
}
