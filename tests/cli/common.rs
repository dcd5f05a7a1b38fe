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
