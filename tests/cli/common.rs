//! Fixtures shared by the CLI tests: running the debug build's `cephalo`,
//! temporary files and directories, device nodes, input files.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What one `cephalo` run printed and its exit code.
pub struct Out {
    /// Exit code (-1 when killed by a signal, a timeout included).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// How long one `cephalo` run may take before it counts as a hang (killed,
/// so that the test fails instead of stalling the suite; real execution
/// under MPI is the slowest, a few minutes at most).
pub const HANG_LIMIT: Duration = Duration::from_secs(600);

/// Runs the `cephalo` binary with `args` (killed after [`HANG_LIMIT`]).
pub fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Out {
    run_limited(args, HANG_LIMIT)
}

/// Runs `cephalo COMMAND ARGS`.
/// `cephalo <command> <args> --format json`, checked to exit 0, parsed.
pub fn json_of(command: &str, args: &[&str]) -> serde_json::Value {
    let o = run_command(command, &[args, &["--format", "json"]].concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

pub fn run_command(command: &str, args: &[&str]) -> Out {
    run(&[&[command], args].concat())
}

/// Runs the `cephalo` binary with `args`, killed after `timeout`.
pub fn run_limited<S: AsRef<std::ffi::OsStr>>(args: &[S], timeout: Duration) -> Out {
    run_with_env(args, &[], timeout)
}

/// Runs the `cephalo` binary with `args` and the environment variables
/// `env` set, killed after `timeout`.
pub fn run_with_env<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Out {
    let mut cmd = Command::cargo_bin("cephalo").unwrap();
    cmd.args(args).timeout(timeout);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let text = |bytes: Vec<u8>, stream: &str| {
        String::from_utf8(bytes).unwrap_or_else(|e| {
            let shown: Vec<String> = args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect();
            panic!("cephalo {}: {stream} is not UTF-8: {e}", shown.join(" "))
        })
    };
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: text(o.stdout, "stdout"),
        stderr: text(o.stderr, "stderr"),
    }
}

/// `name` in the test binary's temporary directory (nothing is created).
/// Tests run in parallel in one process: each module starts its names
/// with its own prefix.
pub fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A fresh, empty directory [`tmp`]`(name)` (what a previous run left
/// there is removed first).
pub fn scratch(name: &str) -> PathBuf {
    let d = tmp(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` to `path`, creating its directory; returns the path as
/// a command-line argument. Atomic (a sibling file renamed over it): tests
/// running in parallel that write the same fixture never let a command
/// read it half written.
pub fn write(path: impl AsRef<Path>, text: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let p = path.as_ref();
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let part = p.with_extension(format!("part{}-{n}", std::process::id()));
    std::fs::write(&part, text).unwrap();
    std::fs::rename(&part, p).unwrap();
    p.display().to_string()
}

/// Whether the environment says this is CI (`CI=true`), where missing test
/// data or tools fail a test instead of skipping it.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A character device 1:`minor` at `path` (7 is a stand-in for
/// `/dev/full`, 3 for `/dev/null`; tests never touch the real `/dev`), or
/// `None` (with the reason printed) where this user may not make device
/// nodes; under `CI=true` (CI runs as root) that fails the test.
pub fn device_node(path: &Path, minor: u32) -> Option<()> {
    let made = std::process::Command::new("mknod")
        .arg(path)
        .args(["c", "1", &minor.to_string()])
        .output()
        .unwrap();
    if made.status.success() {
        return Some(());
    }
    let why = String::from_utf8_lossy(&made.stderr).into_owned();
    if under_ci() {
        panic!("CI=true but mknod failed (CI runs as root): {why}");
    }
    eprintln!("skipping the device-node cases: mknod failed (not root?): {why}");
    None
}

/// `../shared/reference-profiles`, or `None` (with a printed reason) when it
/// is absent; under `CI=true` its absence fails the calling test.
pub fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference-profiles");
    if d.join("model_latencies.json").is_file() {
        return Some(d);
    }
    if under_ci() {
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
pub fn small_reference(dir: &Path) -> Option<PathBuf> {
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
    write(out.join("model_latencies.json"), &lat.to_string());
    write(out.join("model_memory.json"), &mem.to_string());
    Some(out)
}

/// A native profile (`cephalo-profile/1`) of one GPT-1.3B block entry on
/// `gpu` in `dtype`, with activation memory `act` (a JSON list of GiB,
/// one per batch size 1, 2, 3).
pub fn native_profile(gpu: &str, dtype: &str, act: &str) -> String {
    format!(
        r#"{{"format": "cephalo-profile/1", "device": "test", "blocks": [{{"gpu": "{gpu}", "model": "gpt-1.3b", "seq_len": 512, "dtype": "{dtype}", "batch_sizes": [1, 2, 3], "fwd_ms": [10.0, 19.0, 28.0], "bwd_ms": [20.0, 38.0, 56.0], "act_mem_gib": {act}}}], "units": [], "collectives": []}}"#
    )
}

/// OLMoE-1B-7B (64 experts, top-8) at 4,096 tokens, global batch 64, bf16
/// on 2 HGX-like H100 nodes (3.2 Tbit/s each): the MoE workload of the
/// export and log tests.
pub const OLMOE_2X8_H100: &[&str] = &[
    "--nodes",
    "2",
    "--gpus-per-node",
    "8",
    "--gpu",
    "h100",
    "--network-gbit-s",
    "3200",
    "--model",
    "olmoe-1b-7b",
    "--global-batch",
    "64",
    "--seq-len",
    "4096",
    "--dtype",
    "bf16",
];
