//! Build script of the `cephalo` binary: with `--features exec` it links
//! libtorch, so it needs the same rpath (and with `cuda` the same CUDA link
//! flags) as `cephalo-exec`'s own binaries; see `exec/link_args.rs`.
include!("exec/link_args.rs");

fn main() {
    emit_libtorch_link_args(
        std::env::var_os("CARGO_FEATURE_EXEC").is_some(),
        std::env::var_os("CARGO_FEATURE_CUDA").is_some(),
    );
}
