//! Fuzz-style property test of the command line: random combinations of
//! flags, values (valid, absurd and malformed) and input files only ever
//! exit 0 (an answer, possibly "out of memory") or 2 (bad input or
//! infeasible, with a message), within a time limit, and never print NaN,
//! an infinity, a negative time or an MFU above 1.

use crate::common::{run_limited, scratch, write};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

// Each flag's values: (valid, bad). A case draws a valid value most of the
// time, so that most cases reach the planners and the simulator with
// extreme but legal numbers, and some carry one or two bad inputs.
type Values = (&'static [&'static str], &'static [&'static str]);
const GPUS: Values = (
    &[
        "l4,a100",
        "t4,t4,l4",
        "h100-sxm",
        "l4,l4,a6000,p40",
        "p40,v100-16gb",
    ],
    &["a100,xyz", "", "l4,,a100"],
);
const MODELS: Values = (
    &[
        "gpt-tiny",
        "gpt-1.3b",
        "llama2-7b",
        "bert-large",
        "vit-b-16",
        "deepspeedllama_3b",
        "gpt-test",
    ],
    &["no-such-model", ""],
);
const BATCHES: Values = (
    &["1", "3", "8", "64", "257"],
    &["0", "100000000", "-1", "abc", "1e3"],
);
const SEQ: Values = (&["1", "128", "4096", "32768"], &["0", "99999999", "-5"]);
const DTYPES: Values = (&["fp16", "bf16", "fp32"], &["int8"]);
const LISTS: Values = (
    &["4,4", "0,8", "1,2,5", "8", "2,2,2,2"],
    &["-1,3", "1e3,2", ""],
);
const FRACTIONS: Values = (
    &["0.05", "0.5", "0.75", "1"],
    &["0", "1.5", "nan", "-1", "inf"],
);
const OVERHEADS: Values = (&["0", "2", "40"], &["-1", "1e30", "nan"]);
const INTERFERENCE: Values = (&["0", "0.1", "3"], &["5", "nan"]);
const SHARDING: Values = (&["full", "grad-op", "none", "hybrid"], &["zero9"]);
const ACCUMULATION: Values = (&["layered", "no-sync", "sync"], &["maybe"]);
const CHECKPOINTING: Values = (&["none", "full", "selective", "every:2"], &["every:0"]);
const OFFLOAD: Values = (&["none", "activations", "optimizer"], &["disk"]);

/// A value of `v`: valid 9 times in 10.
fn value(v: Values) -> BoxedStrategy<&'static str> {
    prop_oneof![9 => proptest::sample::select(v.0), 1 => proptest::sample::select(v.1)].boxed()
}

/// A flag given a third of the time.
fn maybe(v: Values) -> BoxedStrategy<Option<&'static str>> {
    prop::option::weighted(0.33, value(v)).boxed()
}

/// Input files the flags may point at: well-formed, physically absurd and
/// malformed ones.
fn files(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let w = |name: &str, text: &str| PathBuf::from(write(dir.join(name), text));
    let clusters = vec![
        root.join("experiments/clusters/paper-4gpu.toml"),
        w(
            "zero-bw.toml",
            "[network]\nbw_gbit_s = 0\n[[nodes]]\nname = \"a\"\ngpus = [\"l4\", \"l4\"]\n",
        ),
        w("garbage.toml", "this is = = not toml"),
        w(
            "negative-host.toml",
            "[[nodes]]\nname = \"a\"\ngpus = [\"t4\"]\nhost_mem_gib = -5\n",
        ),
    ];
    let plans = vec![
        w("empty.json", "{}"),
        w("array.json", "[1, 2]"),
        w("garbage.json", "{\"format\": "),
        w(
            "wrong.json",
            "{\"format\": \"cephalo-plan/1\", \"gpus\": [{\"batch\": -3}]}",
        ),
    ];
    (clusters, plans)
}

/// Every JSON number is finite (serde writes NaN / inf as null, so every
/// `*_ms` must be a non-negative number, or null only on an OOM report),
/// and no MFU or HFU exceeds 1.
pub fn check_json(v: &Value, path: &str, oom: bool) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            // Null times are "not evaluated" on an OOM report, a compare
            // row that failed (with its error), or a considered strategy
            // that is infeasible (its note says why) or ranked by its
            // closed-form time alone.
            let oom = oom
                || m.get("oom") == Some(&Value::Bool(true))
                || m.get("error").is_some_and(Value::is_string)
                || m.get("note")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.starts_with("infeasible"))
                || m.get("closed_form_ms").is_some_and(Value::is_number);
            for (k, x) in m {
                let p = format!("{path}.{k}");
                if k.ends_with("_ms") || k == "mfu" || k == "hfu" {
                    match x {
                        Value::Number(n) => {
                            let f = n.as_f64().unwrap();
                            if f < 0.0 && !k.starts_with("headroom") {
                                return Err(format!("{p} = {f} is negative"));
                            }
                            if (k == "mfu" || k == "hfu") && f > 1.0 + 1e-9 {
                                return Err(format!("{p} = {f} above 1"));
                            }
                        }
                        Value::Null if oom => {}
                        // A seed plan has a simulated time and no closed form.
                        Value::Null
                            if k == "closed_form_ms"
                                && m.get("iteration_ms").is_some_and(Value::is_number) => {}
                        Value::Null => return Err(format!("{p} is null (NaN?)")),
                        _ => {}
                    }
                }
                check_json(x, &p, oom)?;
            }
            Ok(())
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| check_json(x, &format!("{path}[{i}]"), oom)),
        _ => Ok(()),
    }
}

/// How long one fuzzed `cephalo` run may take before it counts as a hang
/// (a failure, not a stuck suite).
pub const LIMIT: Duration = Duration::from_secs(120);

/// What a table or message may never say.
pub fn check_text(s: &str) -> Result<(), String> {
    for w in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.')) {
        let l = w.to_ascii_lowercase();
        if matches!(l.as_str(), "nan" | "inf" | "-inf" | "infinity" | "-nan") {
            return Err(format!("prints `{w}`"));
        }
    }
    if s.contains("panicked") || s.contains("RUST_BACKTRACE") {
        return Err("panics".into());
    }
    Ok(())
}

#[test]
fn random_flags_and_files_exit_0_or_2_with_sane_numbers() {
    let dir = scratch("cli-fuzz");
    let (clusters, plans) = files(&dir);
    let case = (
        0usize..3,
        (value(GPUS), value(MODELS), value(BATCHES)),
        maybe(SEQ),
        maybe(DTYPES),
        (maybe(LISTS), maybe(LISTS)),
        (maybe(FRACTIONS), maybe(OVERHEADS), maybe(INTERFERENCE)),
        (
            maybe(SHARDING),
            maybe(ACCUMULATION),
            maybe(CHECKPOINTING),
            maybe(OFFLOAD),
        ),
        (
            prop::option::weighted(0.15, 0..clusters.len()),
            prop::option::weighted(0.1, 0..plans.len()),
        ),
        any::<bool>(),
    );
    // Fixed seed: the same cases on every run (a failure reproduces);
    // CEPHALO_FUZZ_SEED=N explores other corpora.
    let seed = std::env::var("CEPHALO_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xCE_FA_10);
    let mut runner = TestRunner::new(Config {
        cases: 240,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let answers = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(
        &case,
        |(
            cmd,
            (gpus, model, batch),
            seq,
            dtype,
            (blist, mlist),
            (frac, over, inter),
            (sh, acc, ck, off),
            (cl, pl),
            json,
        )| {
            let command = ["simulate", "plan", "compare"][cmd];
            // compare runs every planner: keep it to small models.
            let model = if command == "compare" && !matches!(model, "gpt-tiny" | "") {
                "gpt-tiny"
            } else {
                model
            };
            let mut args: Vec<String> = vec![command.into()];
            let mut push = |k: &str, v: &str| {
                args.push(k.into());
                args.push(v.into());
            };
            match cl {
                Some(i) => push("--cluster", clusters[i].to_str().unwrap()),
                None => push("--gpus", gpus),
            }
            push("--model", model);
            push("--global-batch", batch);
            if let Some(v) = seq {
                push("--seq-len", v);
            }
            if let Some(v) = dtype {
                push("--dtype", v);
            }
            if command == "simulate" {
                match (pl, blist) {
                    (Some(i), _) => push("--plan", plans[i].to_str().unwrap()),
                    (None, Some(b)) => push("--batch", b),
                    (None, None) => {}
                }
                if let Some(m) = mlist {
                    push("--microbatches", m);
                }
            }
            if let Some(v) = frac {
                push("--mem-fraction", v);
            }
            if let Some(v) = over {
                push("--overhead-gib", v);
            }
            if let Some(v) = inter {
                push("--comm-interference", v);
            }
            for (flag, v) in [
                ("--sharding", sh),
                ("--accumulation", acc),
                ("--checkpointing", ck),
                ("--offload", off),
            ] {
                if let Some(v) = v {
                    push(flag, v);
                }
            }
            if json {
                push("--format", "json");
            }
            let o = run_limited(&args, LIMIT);
            let (code, stdout, stderr) = (o.code, o.stdout, o.stderr);
            let why = |what: String| {
                TestCaseError::fail(format!(
                    "cephalo {}: {what}\nstdout: {stdout}\nstderr: {stderr}",
                    args.join(" ")
                ))
            };
            match code {
                0 => {
                    answers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                2 => {
                    // CEPHALO_FUZZ_TRACE=1 lists why each refused case was.
                    if std::env::var("CEPHALO_FUZZ_TRACE").is_ok() {
                        eprintln!(
                            "EXIT2 {} :: {}",
                            args.join(" "),
                            stderr
                                .lines()
                                .find(|l| l.starts_with("error"))
                                .unwrap_or("")
                        );
                    }
                    if !stderr.lines().any(|l| l.starts_with("error: ")) {
                        return Err(why("exit 2 without an error message".into()));
                    }
                }
                other => return Err(why(format!("exit {other:?} (a panic, a crash or a hang)"))),
            }
            check_text(&stdout).map_err(&why)?;
            // An error message may quote the bad input (`got NaN`); notes
            // and warnings of an answer may not.
            if code == 0 {
                check_text(&stderr).map_err(&why)?;
            } else if stderr.contains("panicked") {
                return Err(why("panics".into()));
            }
            if json && code == 0 {
                let v: Value =
                    serde_json::from_str(&stdout).map_err(|e| why(format!("not JSON: {e}")))?;
                check_json(&v, "", false).map_err(&why)?;
            }
            Ok(())
        },
    );
    std::fs::remove_dir_all(&dir).unwrap();
    if let Err(e) = result {
        panic!("{e}");
    }
    // The corpus must reach answers too, not only input errors.
    let answers = answers.into_inner();
    eprintln!("fuzz: {answers} of 240 cases answered (exit 0), the rest exit 2");
    assert!(
        answers >= 40,
        "only {answers} cases got past input checking"
    );
}
