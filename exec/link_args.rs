// Shared by exec/build.rs and the root build.rs (`include!`): linker arguments
// that make binaries linked against libtorch find it at run time (rpath) and,
// for CUDA, keep libtorch_cuda loaded although no symbol of it is referenced.
// `cargo:rustc-link-arg` of a library's build script reaches only that
// package's own binaries, examples and tests, hence the root build.rs too.

/// Prints the `cargo:rustc-link-arg` lines for a package whose `torch` /
/// `cuda` features are `torch` / `cuda` (booleans, from CARGO_FEATURE_*).
fn emit_libtorch_link_args(torch: bool, cuda: bool) {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_LIB");
    if !torch {
        return;
    }
    let lib = match (std::env::var("LIBTORCH_LIB"), std::env::var("LIBTORCH")) {
        (Ok(lib), _) => Some(format!("{lib}/lib")),
        (_, Ok(root)) => Some(format!("{root}/lib")),
        _ => None,
    };
    if let Some(lib) = lib {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    if cuda {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-ltorch");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
