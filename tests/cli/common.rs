//! Fixtures shared by the CLI tests.

use std::path::PathBuf;

/// `../shared/reference-profiles`, or `None` (with a printed reason) when it
/// is absent; under `CI=true` its absence fails the calling test.
pub fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference-profiles");
    if d.join("model_latencies.json").is_file() {
        return Some(d);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {} has no reference profiles", d.display());
    }
    eprintln!(
        "skipping: {} not found (reference profiles are not part of the repository)",
        d.display()
    );
    None
}
