//! Fixtures shared by the CLI tests.

use assert_cmd::Command;
use std::path::PathBuf;

/// What one `cephalo` run printed and its exit code.
pub struct Out {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs the `cephalo` binary with `args`.
pub fn run(args: &[&str]) -> Out {
    let o = Command::cargo_bin("cephalo")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8(o.stdout).unwrap(),
        stderr: String::from_utf8(o.stderr).unwrap(),
    }
}

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

/// A small reference directory in `dir`, cut at test time from
/// `../shared/reference-profiles` (never committed): the latencies and
/// memory of two models, enough for `calibrate` to fit in about a second
/// in a debug build. `None` (with the reason printed) where the reference
/// profiles are absent, as [`shared_dir`].
pub fn small_reference(dir: &std::path::Path) -> Option<PathBuf> {
    let shared = shared_dir()?;
    const KEEP: [&str; 2] = ["deepspeedgpt_1.3b", "deepspeedbert_large"];
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(shared.join(name)).unwrap()).unwrap()
    };
    let mut lat = read("model_latencies.json");
    lat.as_object_mut()
        .unwrap()
        .retain(|k, _| KEEP.contains(&k.as_str()));
    let mut mem = read("model_memory.json");
    for by_model in mem.as_object_mut().unwrap().values_mut() {
        by_model
            .as_object_mut()
            .unwrap()
            .retain(|k, _| KEEP.contains(&k.as_str()));
    }
    let out = dir.join("small-reference");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("model_latencies.json"), lat.to_string()).unwrap();
    std::fs::write(out.join("model_memory.json"), mem.to_string()).unwrap();
    Some(out)
}
