//! `cephalo simulate` end to end: the issue-2 paper case (needs
//! `../shared/reference-profiles`), the JSON contract, determinism, the
//! trace, out-of-memory reporting, and bad input exiting 2 with the file or
//! field named and no panic.

use crate::common::{device_node, json_of, run, run_command, scratch, shared_dir, tmp, write};
use serde_json::Value;
use std::path::PathBuf;

const CONTRACT_TOP: [&str; 6] = [
    "iteration_ms",
    "samples_per_s",
    "tokens_per_s",
    "tflops",
    "mfu",
    "oom",
];
const CONTRACT_GPU: [&str; 13] = [
    "gpu",
    "batch",
    "microbatches",
    "microbatch_size",
    "state_fraction",
    "compute_ms",
    "exposed_comm_ms",
    "copy_ms",
    "idle_ms",
    "peak_mem_gib",
    "capacity_gib",
    "oom",
    "rank",
];

fn check_contract(j: &Value, gpus: usize) {
    for k in CONTRACT_TOP {
        assert!(j.get(k).is_some(), "missing `{k}`");
    }
    let g = j["gpus"].as_array().unwrap();
    assert_eq!(g.len(), gpus);
    for x in g {
        for k in CONTRACT_GPU {
            assert!(x.get(k).is_some(), "missing gpus[].{k}");
        }
        // The % of usable memory crosses 100 exactly where the GPU is OOM.
        let pct = x["usable_pct"].as_f64().unwrap();
        assert_eq!(pct > 100.0, x["oom"].as_bool().unwrap(), "{x}");
    }
}

/// See: issue 2, first "Must show" item.
#[test]
fn r2_paper_case_runs_with_a_bounded_time_and_a_valid_trace() {
    let Some(d) = shared_dir() else { return };
    let d = d.to_str().unwrap();
    let trace = tmp("cli-simulate-paper-trace.json");
    let csv = tmp("cli-simulate-paper.csv");
    let args = [
        "--gpus",
        "l4,l4,a6000,p40",
        "--model",
        "deepspeedgpt_2.7b",
        "--global-batch",
        "64",
        "--dtype",
        "fp16",
        "--batch",
        "13,12,34,5",
        "--microbatches",
        "1,2,1,1",
        "--profiles",
        d,
        "--memory-cluster",
        "paper",
        "--format",
        "json",
    ];
    let mut with_files = args.to_vec();
    with_files.extend([
        "--trace",
        trace.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let o = run_command("simulate", &with_files);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"));
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    check_contract(&j, 4);
    assert_eq!(j["oom"], false);
    // Slowest GPU's per-block compute from the profile, recompute counted:
    // rank 0, L4, one micro-batch of 13: fits fwd = 7.415036 m + 1.181504,
    // bwd = 10.94616 m + 4.842824 (model_latencies.json, float16).
    let f = 7.415035999999968 * 13.0 + 1.1815040000000743;
    let b = 10.946160000000095 * 13.0 + 4.842823999999591;
    let lower = 32.0 * (2.0 * f + b);
    let it = j["iteration_ms"].as_f64().unwrap();
    assert!(it >= lower && it < 1.05 * lower, "{it} vs {lower}");
    for g in j["gpus"].as_array().unwrap() {
        let sum: f64 = [
            "compute_ms",
            "exposed_comm_ms",
            "copy_ms",
            "host_ms",
            "idle_ms",
        ]
        .iter()
        .map(|k| g[k].as_f64().unwrap())
        .sum();
        assert!((sum - it).abs() < 1e-6);
    }
    // Trace: valid JSON, one process per GPU (five streams each) and one
    // for the host.
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let evs = t["traceEvents"].as_array().unwrap();
    let tracks = evs.iter().filter(|e| e["name"] == "thread_name").count();
    assert_eq!(tracks, 20);
    assert!(evs.iter().filter(|e| e["ph"] == "X").count() > 500);
    let c = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(c.lines().count(), 5);
    assert!(c.starts_with("rank,gpu,"));
    // Same bytes again (stdout and trace).
    let first_trace = std::fs::read(&trace).unwrap();
    let again = run_command("simulate", &with_files);
    assert_eq!(again.stdout, o.stdout);
    assert_eq!(std::fs::read(&trace).unwrap(), first_trace);
    // The table says the same.
    let mut table = args.to_vec();
    table.truncate(table.len() - 2);
    let o = run_command("simulate", &table);
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.contains("iteration ") && o.stdout.contains("MFU"),
        "{}",
        o.stdout
    );
}

#[test]
fn output_is_byte_identical_across_runs() {
    let (t1, t2) = (tmp("cli-simulate-det1.json"), tmp("cli-simulate-det2.json"));
    let go = |t: &PathBuf| {
        run_command(
            "simulate",
            &[
                "--gpus",
                "a10g,t4,v100x16",
                "--model",
                "llama-tiny",
                "--global-batch",
                "24",
                "--batch",
                "12,4,8",
                "--microbatches",
                "3,1,2",
                "--state-fractions",
                "0.5,0.2,0.3",
                "--format",
                "json",
                "--trace",
                t.to_str().unwrap(),
            ],
        )
    };
    let (a, b) = (go(&t1), go(&t2));
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(std::fs::read(&t1).unwrap(), std::fs::read(&t2).unwrap());
    check_contract(&serde_json::from_str(&a.stdout).unwrap(), 3);
}

#[test]
fn plan_file_and_lists_agree() {
    let plan = tmp("cli-simulate-plan.json");
    write(
        &plan,
        r#"{"uneven_batch_sizes":[6,2],"uneven_microbatches":[2,1],"split_uneven_partitions":[0.6,0.4]}"#,
    );
    let common = [
        "--gpus",
        "a10g,t4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--format",
        "json",
    ];
    let mut a = common.to_vec();
    a.extend(["--plan", plan.to_str().unwrap()]);
    let mut b = common.to_vec();
    b.extend([
        "--batch",
        "6,2",
        "--microbatches",
        "2,1",
        "--state-fractions",
        "0.6,0.4",
    ]);
    let (x, y) = (run_command("simulate", &a), run_command("simulate", &b));
    assert_eq!(x.code, 0, "{}", x.stderr);
    let (jx, jy): (Value, Value) = (
        serde_json::from_str(&x.stdout).unwrap(),
        serde_json::from_str(&y.stdout).unwrap(),
    );
    assert_eq!(jx["iteration_ms"], jy["iteration_ms"]);
    assert_eq!(jx["gpus"], jy["gpus"]);
}

/// See: issue 2 ("an even plan that cannot fit ... reported as out of memory").
#[test]
fn r2_llama7b_fp32_batch_8_on_four_t4_is_out_of_memory() {
    let args = [
        "--gpus",
        "t4,t4,t4,t4",
        "--model",
        "deepspeedllama_7b",
        "--dtype",
        "fp32",
        "--global-batch",
        "32",
        "--batch",
        "8,8,8,8",
    ];
    let o = run_command("simulate", &args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("OUT OF MEMORY"), "{}", o.stdout);
    assert!(
        o.stdout.contains("rank 0 (t4): peak") && o.stdout.contains("physical: 16.00 GiB capacity"),
        "{}",
        o.stdout
    );
    assert!(
        !o.stdout.contains("samples/s"),
        "no time is presented as a result:\n{}",
        o.stdout
    );
    let mut j = args.to_vec();
    j.extend(["--format", "json"]);
    let o = run_command("simulate", &j);
    assert_eq!(o.code, 0);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    check_contract(&v, 4);
    assert_eq!(v["oom"], true);
    for k in [
        "iteration_ms",
        "samples_per_s",
        "tokens_per_s",
        "tflops",
        "mfu",
    ] {
        assert!(v[k].is_null(), "{k} must be null when out of memory");
    }
    let bad = v["oom_gpus"].as_array().unwrap();
    assert_eq!(bad.len(), 4);
    for g in bad {
        assert_eq!(g["gpu"], "t4");
        assert!(g["peak_mem_gib"].as_f64().unwrap() > g["usable_gib"].as_f64().unwrap());
        assert_eq!(g["capacity_gib"].as_f64().unwrap(), 16.0);
    }
}

/// Bad input exits 2, names the file / flag / field, and never panics.
#[test]
fn bad_input_exits_2_naming_the_culprit() {
    let neg = tmp("cli-simulate-neg.toml");
    write(&neg, "name = \"x\"\n[network]\nbw_gbit_s = -10.0\n[[nodes]]\ngpus = [ { type = \"l4\", count = 2 } ]\n");
    let bad_toml = tmp("cli-simulate-bad.toml");
    write(&bad_toml, "nodes = [\n");
    let bad_json = tmp("cli-simulate-bad.json");
    write(&bad_json, "{ \"gpus\": [ ");
    let missing = tmp("cli-simulate-missing.json");
    let (neg, bad_toml, bad_json, missing) = (
        neg.to_str().unwrap().to_string(),
        bad_toml.to_str().unwrap().to_string(),
        bad_json.to_str().unwrap().to_string(),
        missing.to_str().unwrap().to_string(),
    );
    let m = ["--model", "gpt-1.3b", "--global-batch", "2"];
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--cluster", &neg, "--batch", "1,1"],
            vec![&neg, "bw_gbit_s"],
        ),
        (
            vec!["--cluster", &bad_toml, "--batch", "1,1"],
            vec![&bad_toml, "parse"],
        ),
        (
            vec!["--gpus", "l4,l4", "--plan", &bad_json],
            vec![&bad_json, "JSON"],
        ),
        (vec!["--gpus", "l4,l4", "--plan", &missing], vec![&missing]),
        (
            vec!["--gpus", "l4,xyz", "--batch", "1,1"],
            vec!["--gpus", "unknown GPU `xyz`"],
        ),
        (
            vec!["--gpus", "l4,l4", "--batch", "1,2"],
            vec!["--batch", "batch", "sum to 3", "global batch is 2"],
        ),
        (
            vec!["--gpus", "l4,l4", "--batch", "1,1,0"],
            vec!["--batch", "3 entries", "2 GPUs"],
        ),
        (
            vec![
                "--gpus",
                "l4,l4",
                "--batch",
                "1,1",
                "--state-fractions",
                "0.3,0.3",
            ],
            vec!["state_fractions"],
        ),
        (
            vec!["--gpus", "l4,l4", "--batch", "1,1", "--microbatches", "2,1"],
            vec!["microbatches[0]"],
        ),
        (
            vec!["--gpus", "p40,p40", "--dtype", "bf16", "--batch", "1,1"],
            vec!["p40", "bf16"],
        ),
        (
            vec!["--gpus", "l4,l4", "--dtype", "fp8", "--batch", "1,1"],
            vec!["--dtype"],
        ),
        (
            vec!["--gpus", "l4,l4", "--batch", "1,1", "--mem-fraction", "1.5"],
            vec!["mem_fraction"],
        ),
        (vec!["--gpus", "l4,l4"], vec!["--plan", "--batch"]),
    ];
    for (args, needles) in cases {
        let mut a = args.clone();
        a.extend(m);
        let o = run_command("simulate", &a);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
        for n in needles {
            assert!(o.stderr.contains(n), "{args:?}: `{n}` not in: {}", o.stderr);
        }
    }
    let o = run_command(
        "simulate",
        &[
            "--gpus",
            "l4,l4",
            "--model",
            "gpt-9000",
            "--global-batch",
            "2",
            "--batch",
            "1,1",
        ],
    );
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("--model") && o.stderr.contains("gpt-9000"),
        "{}",
        o.stderr
    );
    let o = run_command(
        "simulate",
        &[
            "--gpus",
            "l4,l4",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "2",
            "--batch",
            "-1,3",
        ],
    );
    assert_eq!(o.code, 2);
    assert!(!o.stderr.contains("panicked"));
}

/// A priced cluster reports its hourly price and the cost of a million
/// tokens; a cluster with an unpriced GPU (P40: no public list price) reports
/// neither.
#[test]
fn cost_per_million_tokens_follows_prices() {
    let priced = run_command(
        "simulate",
        &[
            "--gpus",
            "l4,l4",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "4",
            "--batch",
            "2,2",
            "--microbatches",
            "1,1",
            "--format",
            "json",
        ],
    );
    assert_eq!(priced.code, 0, "{}", priced.stderr);
    let v: Value = serde_json::from_str(&priced.stdout).unwrap();
    let p = v["price_per_hour_usd"].as_f64().unwrap();
    let tok = v["tokens_per_s"].as_f64().unwrap();
    let c = v["usd_per_million_tokens"].as_f64().unwrap();
    assert!(p > 0.0);
    assert!(
        (c - p / 3600.0 / tok * 1e6).abs() < 1e-9 * c,
        "{c} vs {p} {tok}"
    );
    let unpriced = run_command(
        "simulate",
        &[
            "--gpus",
            "l4,p40",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "4",
            "--batch",
            "2,2",
            "--microbatches",
            "1,1",
            "--format",
            "json",
        ],
    );
    let v: Value = serde_json::from_str(&unpriced.stdout).unwrap();
    assert!(v["price_per_hour_usd"].is_null() && v["usd_per_million_tokens"].is_null());
}

#[test]
fn a_closed_or_full_stdout_is_not_a_panic() {
    use std::process::{Command, Stdio};
    let bin = assert_cmd::cargo::cargo_bin("cephalo");
    let args = [
        "simulate",
        "--gpus",
        "l4,l4,a6000,p40",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--batch",
        "4,4,4,4",
    ];
    // `| head -c 0`: the reader is gone before the report is written (the
    // process has to start and simulate first).
    let mut child = Command::new(&bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A full disk behind the redirect: exit 1 naming stdout. The full
    // device is a stand-in for /dev/full (1:7) made in a temporary
    // directory (tests never touch the real /dev); where this user may not
    // make device nodes the case is skipped, saying so (CI runs as root).
    let node = tmp("cli-simulate-stdout-full");
    let _ = std::fs::remove_file(&node);
    if device_node(&node, 7).is_none() {
        return;
    }
    let full = std::fs::OpenOptions::new().write(true).open(&node).unwrap();
    let o = Command::new(&bin).args(args).stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to stdout"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_absurd_duration_is_an_error_not_a_small_number() {
    // 1e-290 Gbit/s between nodes: collectives of ~1e290 ms, past the
    // engine's 584-year clock. It must not wrap into a small time.
    let f = tmp("cli-simulate-absurd-network.toml");
    write(&f, "[network]\nbw_gbit_s = 1e-290\n[[nodes]]\ngpus = [{ type = \"a100-80gb\", count = 2 }]\n[[nodes]]\ngpus = [{ type = \"a100-80gb\", count = 2 }]\n",
    );
    let o = run(&[
        "simulate",
        "--cluster",
        f.to_str().unwrap(),
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--batch",
        "4,4,4,4",
        "--format",
        "json",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    // Refused where it enters (the physical range of a network), before
    // the engine's clock could overflow.
    assert!(
        o.stderr.contains("network.bw_gbit_s") && o.stderr.contains("[0.001, 100000] Gbit/s"),
        "{}",
        o.stderr
    );
    assert!(!o.stdout.contains("18446744073709"), "{}", o.stdout);
}

#[test]
fn output_paths_are_checked_before_the_work() {
    let base = [
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
    ];
    let with = |cmd: &str, extra: &[&str]| {
        let mut a = vec![cmd];
        a.extend(base);
        a.extend(extra);
        run(&a)
    };
    let o = with(
        "simulate",
        &["--batch", "4,4", "--csv", "/nonexistent-dir/x.csv"],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--csv") && o.stderr.contains("does not exist"),
        "{}",
        o.stderr
    );
    assert!(
        o.stdout.is_empty(),
        "simulated before checking: {}",
        o.stdout
    );
    let dir = scratch("cli-simulate-output-paths");
    let o = with("plan", &["--out", dir.to_str().unwrap()]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("is a directory"), "{}", o.stderr);
    // A plan written where it can be: complete JSON, no temporary left.
    let f = dir.join("checked-plan.json");
    let o = with("plan", &["--out", f.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::read_to_string(&f)
        .unwrap()
        .trim_end()
        .ends_with('}'));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
    // `calibrate` does not replace an existing file (the shipped one
    // included) without --force.
    let existing = dir.join("existing-calibration.json");
    write(&existing, "keep");
    let o = run(&["calibrate", "--out", existing.to_str().unwrap()]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--force"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep");
}

#[test]
fn every_command_speaks_table_json_and_csv() {
    let w = [
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&["simulate"][..], &w, &["--batch", "4,4"]].concat(),
            "rank,gpu,",
        ),
        ([&["plan"][..], &w].concat(), "rank,gpu,"),
        ([&["compare"][..], &w].concat(), ","),
        (
            vec![
                "comm",
                "--gpus",
                "l4,l4",
                "--op",
                "all-gather",
                "--sizes",
                "1M",
            ],
            "size_bytes,time_us,algbw_gb_s,busbw_gb_s",
        ),
        (
            vec![
                "predict",
                "--gpu",
                "l4",
                "--model",
                "gpt-1.3b",
                "--batch-sizes",
                "1,2",
            ],
            "batch,",
        ),
    ];
    for (args, header) in cases {
        for (format, check) in [("table", ""), ("json", "{"), ("csv", header)] {
            let mut a = args.clone();
            a.extend(["--format", format]);
            let o = run(&a);
            assert_eq!(o.code, 0, "{a:?}: {}", o.stderr);
            let first = o.stdout.lines().next().unwrap_or("");
            if format == "json" {
                assert!(
                    o.stdout.trim_start().starts_with(['{', '[']),
                    "{a:?}: {first}"
                );
            } else {
                assert!(first.contains(check), "{a:?}: {first}");
            }
        }
    }
}

#[test]
fn a_plan_made_for_another_workload_is_refused() {
    let f = tmp("cli-simulate-plan-for-8.json");
    let o = run(&[
        "plan",
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--out",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let sim = |extra: &[&str]| {
        let mut a = vec!["simulate", "--plan", f.to_str().unwrap(), "--gpus", "l4,l4"];
        a.extend(extra);
        run(&a)
    };
    let ok = sim(&["--model", "gpt-1.3b", "--global-batch", "8"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    for (extra, field) in [
        (
            vec!["--model", "gpt-1.3b", "--global-batch", "16"],
            "workload.global_batch",
        ),
        (
            vec!["--model", "gpt-2.7b", "--global-batch", "8"],
            "workload.model",
        ),
        (
            vec![
                "--model",
                "gpt-1.3b",
                "--global-batch",
                "8",
                "--dtype",
                "bf16",
            ],
            "workload.dtype",
        ),
    ] {
        let o = sim(&extra);
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(o.stderr.contains(field), "{extra:?}: {}", o.stderr);
    }
}

/// Numbers that cannot be physical are refused where they enter, naming
/// the file, the entry and the range: zero or negative profile times, a
/// GPU faster than its peak, a total that falls as the micro-batch grows,
/// a gigabyte moved in no time, a latency of hours, negative memory.
#[test]
fn impossible_numbers_are_refused_where_they_enter() {
    let block = |fwd: &str, bwd: &str| {
        format!(
            "{{\"format\": \"cephalo-profile/1\", \"blocks\": [{{\"gpu\": \"l4\", \"model\": \"gpt-1.3b\", \"seq_len\": 2048, \"dtype\": \"fp16\", \"batch_sizes\": [1, 2, 4], \"fwd_ms\": {fwd}, \"bwd_ms\": {bwd}}}]}}"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("zero", block("[0.0, 20.0, 40.0]", "[20.0, 40.0, 80.0]"), "blocks[0].fwd_ms"),
        ("negative", block("[10.0, -20.0, 40.0]", "[20.0, 40.0, 80.0]"), "blocks[0].fwd_ms"),
        ("falling", block("[10.0, 20.0, 4.0]", "[20.0, 40.0, 8.0]"), "not measurement noise"),
        // gpt-1.3b at 2048 tokens: ~1.6 TFLOP per sample per block pass;
        // 0.001 ms would be millions of TFLOPS on an L4 (121 peak).
        ("too-fast", block("[0.001, 0.002, 0.004]", "[0.002, 0.004, 0.008]"), "faster than the GPU's peak"),
        (
            "collective",
            "{\"format\": \"cephalo-profile/1\", \"collectives\": [{\"kind\": \"all_gather\", \"ranks\": 2, \"bytes\": 1e9, \"time_ms\": 0.0}]}".into(),
            "collectives[0]",
        ),
        (
            "memory",
            "{\"format\": \"cephalo-profile/1\", \"blocks\": [{\"gpu\": \"l4\", \"model\": \"gpt-1.3b\", \"seq_len\": 2048, \"dtype\": \"fp16\", \"batch_sizes\": [1, 2], \"fwd_ms\": [10.0, 20.0], \"bwd_ms\": [20.0, 40.0], \"act_mem_gib\": [-1.0, 2.0]}]}".into(),
            "act_mem_gib",
        ),
    ];
    for (name, text, want) in cases {
        let f = tmp(&format!("cli-simulate-physical-{name}.json"));
        write(&f, &text);
        let o = run_command(
            "simulate",
            &[
                "--gpus",
                "l4,l4",
                "--model",
                "gpt-1.3b",
                "--seq-len",
                "2048",
                "--global-batch",
                "8",
                "--batch",
                "4,4",
                "--profiles",
                f.to_str().unwrap(),
            ],
        );
        assert_eq!(o.code, 2, "{name}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{name}: {}", o.stderr);
        assert!(
            o.stderr.contains(f.to_str().unwrap()),
            "{name}: names the file: {}",
            o.stderr
        );
    }
    let f = tmp("cli-simulate-physical-latency.toml");
    write(
        &f,
        "[network]\nlatency_us = 1e12\n[[nodes]]\ngpus = [{ type = \"l4\", count = 2 }]\n",
    );
    let o = run_command(
        "simulate",
        &[
            "--cluster",
            f.to_str().unwrap(),
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "8",
            "--batch",
            "4,4",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("network.latency_us") && o.stderr.contains("[0, 1000000] us"),
        "{}",
        o.stderr
    );
}

/// Issue 26: the default memory policy is the device's physical limit; the
/// paper's fraction rule is asked for, and when it alone makes a plan out
/// of memory the table says so. Reports carry allocated and reserved peaks.
#[test]
fn the_fraction_rule_says_when_it_decided() {
    let base = [
        "--gpus",
        "a100-80gb,a100-80gb",
        "--model",
        "llama-2-7b",
        "--seq-len",
        "2048",
        "--dtype",
        "bf16",
        "--global-batch",
        "2",
        "--batch",
        "1,1",
        "--sharding",
        "full",
        "--accumulation",
        "sync",
        "--param-dtype",
        "bf16",
        "--checkpointing",
        "none",
    ];
    let j = json_of("simulate", &base);
    assert_eq!(j["oom"], false, "{j}");
    assert_eq!(j["mem_policy"], "physical");
    assert!(j["mem_fraction"].is_null());
    let m = &j["gpus"][0]["memory"];
    let (peak, alloc, resv) = (
        m["peak_gib"].as_f64().unwrap(),
        m["allocated_gib"].as_f64().unwrap(),
        m["reserved_gib"].as_f64().unwrap(),
    );
    let outside = j["overhead_gib"].as_f64().unwrap();
    assert!((peak - outside - alloc).abs() < 1e-9 && resv > alloc && resv < alloc * 1.1);
    let f = run_command(
        "simulate",
        &[&base[..], &["--mem-fraction", "0.75"]].concat(),
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert!(f.stdout.contains("OUT OF MEMORY"), "{}", f.stdout);
    assert!(
        f.stdout.contains("--mem-fraction 0.75 decided this"),
        "{}",
        f.stdout
    );
}

/// Issue 26: every prediction carries an interval from the expected errors
/// of its sources (JSON always; the table's "likely range" line).
#[test]
fn predictions_carry_intervals() {
    let args = [
        "--gpus",
        "a100-80gb,h100-sxm",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--batch",
        "4,4",
    ];
    let j = json_of("simulate", &args);
    let t = j["iteration_ms"].as_f64().unwrap();
    let tok = j["tokens_per_s"].as_f64().unwrap();
    let iv = &j["intervals"];
    let (m, p) = (&iv["median"], &iv["p90"]);
    assert!(m["rel"].as_f64().unwrap() > 0.0);
    assert!(p["rel"].as_f64().unwrap() >= m["rel"].as_f64().unwrap());
    for level in [m, p] {
        let it = &level["iteration_ms"];
        assert!(it[0].as_f64().unwrap() < t && t < it[1].as_f64().unwrap());
        let tk = &level["tokens_per_s"];
        assert!(tk[0].as_f64().unwrap() < tok && tok < tk[1].as_f64().unwrap());
    }
    let basis = iv["basis"].as_str().unwrap();
    assert!(basis.contains("a100-80gb compute") && basis.contains("h100-sxm compute"));
    let table = run_command("simulate", &args);
    assert!(
        table.stdout.contains("likely range: iteration"),
        "{}",
        table.stdout
    );
    // `plan` carries them too, for the plan it recommends.
    let plan = [
        "--gpus",
        "a100-80gb,h100-sxm",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
    ];
    let p = json_of("plan", &plan);
    let rel = p["simulated"]["intervals"]["median"]["rel"]
        .as_f64()
        .unwrap();
    assert!(rel > 0.0 && rel < 1.0, "{rel}");
    let t = run_command("plan", &plan);
    assert!(t.stdout.contains("likely range: iteration"), "{}", t.stdout);
}

/// A cluster from flags is the cluster file that spells it out: `--nodes
/// --gpus-per-node --gpu` (SXM parts on NVSwitch by default), `count = N`
/// on a node block, `--network-gbit-s` and `--add-gpu TYPE:COUNT`; bad
/// values name their flag and exit 2.
#[test]
fn clusters_from_flags_equal_the_files_they_stand_for() {
    let sim = |cluster: &[&str]| -> Value {
        let mut args = vec![
            "plan",
            "--planner",
            "fsdp",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "64",
            "--format",
            "json",
        ];
        args.extend(cluster);
        let o = run(&args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        v["simulated"].clone()
    };
    let file = tmp("cli-cluster-flags.toml");
    write(
        &file,
        "[network]\nbw_gbit_s = 100\n[[nodes]]\ncount = 4\nintra_link = \"nvswitch\"\ngpus = [{ type = \"h100\", count = 8 }]\n[[nodes]]\ngpus = [{ type = \"l4\", count = 2 }]\n",
    );
    let from_file = sim(&["--cluster", file.to_str().unwrap()]);
    let from_flags = sim(&[
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--gpu",
        "h100",
        "--network-gbit-s",
        "100",
        "--add-gpu",
        "l4:2",
    ]);
    assert_eq!(from_flags["peak_mem_gib"].as_array().unwrap().len(), 34);
    for k in ["iteration_ms", "tokens_per_s", "mfu"] {
        assert_eq!(from_file[k], from_flags[k], "{k}");
    }
    assert_eq!(from_file, from_flags);
    // The network flag changes what the file said.
    let slower = sim(&[
        "--cluster",
        file.to_str().unwrap(),
        "--network-gbit-s",
        "10",
    ]);
    assert!(
        slower["iteration_ms"].as_f64().unwrap() > from_file["iteration_ms"].as_f64().unwrap(),
        "10 Gbit/s is not slower than 100"
    );
    let base = ["simulate", "--model", "gpt-1.3b", "--global-batch", "64"];
    for (extra, says) in [
        (
            vec!["--nodes", "0", "--gpus-per-node", "8", "--gpu", "h100"],
            "--nodes",
        ),
        (
            vec!["--nodes", "2", "--gpus-per-node", "8", "--gpu", "h900"],
            "--gpu",
        ),
        (
            vec!["--gpus", "l4,l4", "--network-gbit-s", "-5"],
            "--network-gbit-s",
        ),
        (vec!["--gpus", "l4,l4", "--add-gpu", "l4:0"], "--add-gpu"),
        (vec!["--gpus", "l4,l4", "--add-gpu", "b300x"], "--add-gpu"),
        (vec!["--nodes", "2", "--gpu", "h100"], "--gpus-per-node"),
        (
            vec![
                "--gpus",
                "l4",
                "--nodes",
                "2",
                "--gpus-per-node",
                "1",
                "--gpu",
                "l4",
            ],
            "--nodes",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(&extra);
        let o = run(&args);
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{extra:?}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    }
}

/// Issue 42, item 7: `--compile` is a knob of the PyTorch stack. A
/// compiled block fuses its memory-bound ops (less time) and keeps fewer
/// intermediates (no fp32 norm copies, no SiLU output): Llama-3-8B at
/// 8,192 tokens without activation checkpointing fits eight H100s under
/// FSDP compiled, as torchtitan runs it, and not eager. Megatron, which
/// fuses with its own kernels, refuses the flag.
#[test]
fn compile_fuses_the_block_and_keeps_fewer_activations() {
    let base = [
        "simulate",
        "--nodes",
        "1",
        "--gpus-per-node",
        "8",
        "--gpu",
        "h100-sxm",
        "--model",
        "llama3-8b",
        "--seq-len",
        "8192",
        "--global-batch",
        "8",
        "--dtype",
        "bf16",
        "--sharding",
        "full",
        "--accumulation",
        "no-sync",
        "--checkpointing",
        "none",
        "--batch",
        "1,1,1,1,1,1,1,1",
        "--format",
        "json",
    ];
    let eager = run(&base);
    assert_eq!(eager.code, 0, "{}", eager.stderr);
    let eager: Value = serde_json::from_str(&eager.stdout).unwrap();
    let compiled = run(&[&base[..], &["--compile"]].concat());
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let compiled: Value = serde_json::from_str(&compiled.stdout).unwrap();
    assert_eq!(eager["oom"], Value::Bool(true));
    assert_eq!(compiled["oom"], Value::Bool(false));
    assert_eq!(compiled["strategy"]["compile"], Value::Bool(true));
    assert_eq!(compiled["strategy"]["stack"], "pytorch");
    let peak = |v: &Value| v["gpus"][0]["peak_mem_gib"].as_f64().unwrap();
    assert!(peak(&compiled) < 0.85 * peak(&eager));
    // Faster too: the fused element-wise chains move fewer bytes.
    let t = |v: &Value| v["timing_if_it_fit"]["iteration_ms"].as_f64();
    let fused = compiled["iteration_ms"].as_f64().unwrap();
    if let Some(e) = t(&eager) {
        assert!(fused < e, "{fused} vs {e}");
    }
    let refused = run(&[&base[..], &["--compile", "--stack", "megatron"]].concat());
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("--compile"), "{}", refused.stderr);
}
