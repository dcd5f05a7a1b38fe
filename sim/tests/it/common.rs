//! Fixtures shared by the `sim` integration tests: the reference profiles
//! from `../shared` (never part of the repository).

use sim::gpu::GpuCatalog;
use sim::model::ModelCatalog;
use sim::profile::{reference, ProfileSet};
use std::path::PathBuf;
use std::sync::OnceLock;

/// `../shared/reference-profiles`, or `None` (with a printed reason) when it
/// is absent; under `CI=true` its absence fails the calling test.
pub fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference-profiles");
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

/// The reference latencies and memory, imported once per test binary;
/// `None` as [`shared_dir`] (each caller prints why it skips, or fails
/// under `CI=true`).
pub fn reference_profiles() -> Option<&'static ProfileSet> {
    static SET: OnceLock<ProfileSet> = OnceLock::new();
    let d = shared_dir()?;
    Some(SET.get_or_init(|| {
        let (g, m) = (GpuCatalog::builtin(), ModelCatalog::builtin());
        let lat = std::fs::read_to_string(d.join("model_latencies.json")).unwrap();
        let mem = std::fs::read_to_string(d.join("model_memory.json")).unwrap();
        let mut set = reference::import_latencies(&lat, "model_latencies.json", g, m).unwrap();
        set.merge(reference::import_memory(&mem, "model_memory.json", m).unwrap());
        set
    }))
}
