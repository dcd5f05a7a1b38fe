//! `cephalo plan` and `cephalo compare` end to end: the issue-3 compat case
//! (needs `../shared/reference-profiles`), the JSON contracts, `--out` read
//! back by `simulate --plan`, determinism, and infeasible workloads exiting
//! 2 with the shortfall and the GPU.

use crate::common::{run, scratch, shared_dir, tmp, write};
use serde_json::Value;

fn paper(cmd: &str, d: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        cmd,
        "--gpus",
        "l4,l4,a6000,p40",
        "--model",
        "deepspeedgpt_2.7b",
        "--global-batch",
        "64",
        "--dtype",
        "fp16",
        "--profiles",
        d,
        "--memory-cluster",
        "paper",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn r3_compat_plan_matches_the_reference() {
    // See: issue 3 ("Must show", first bullet).
    let Some(d) = shared_dir() else { return };
    let d = d.to_str().unwrap();
    let o = run(&paper("plan", d, &["--compat", "--format", "json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["batch_sizes"], serde_json::json!([13, 12, 34, 5]));
    assert_eq!(v["microbatches"], serde_json::json!([1, 2, 1, 1]));
    assert_eq!(v["microbatch_sizes"], serde_json::json!([13, 6, 34, 5]));
    assert!((v["makespan_ms_per_block"].as_f64().unwrap() / 342.2968480000001 - 1.0).abs() < 1e-6);
    for k in ["state_fractions", "simulated", "plan"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert!(v["simulated"]["iteration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(v["simulated"]["oom"], Value::Bool(false));
    // Same inputs, same bytes.
    let again = run(&paper("plan", d, &["--compat", "--format", "json"]));
    assert_eq!(again.stdout, o.stdout);
}

/// The arguments of `cephalo plan --compat` for one case of
/// `reference_plans.json`, as the library test
/// (`sim/tests/it/planner.rs`, `compat_reproduces_every_reference_plan`)
/// builds it: the GPUs in rank order, the model key, global batch, dtype,
/// sequence length, memory cluster and per-block collective times; the
/// memory rule left to `--compat`'s default.
fn reference_case_args(case: &Value, d: &str) -> Vec<String> {
    let s = |k: &str| match &case[k] {
        Value::String(x) => x.clone(),
        Value::Array(xs) => xs
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    };
    let mut v: Vec<String> = vec!["plan".into(), "--compat".into()];
    for (flag, key) in [
        ("--gpus", "gpus"),
        ("--model", "model"),
        ("--global-batch", "global_batch"),
        ("--dtype", "dtype"),
        ("--seq-len", "seq_len"),
        ("--memory-cluster", "memory_cluster"),
        ("--ag-ms", "ag_ms"),
        ("--rs-ms", "rs_ms"),
    ] {
        v.extend([flag.to_string(), s(key)]);
    }
    v.extend(["--profiles", d, "--format", "json"].map(String::from));
    v
}

#[test]
fn compat_cli_reproduces_every_reference_plan() {
    // See: issue 42, item 8 ("Must show"): `plan --compat` through the
    // binary, the reference optimizer's memory rule by default.
    let Some(dir) = shared_dir() else { return };
    let text = std::fs::read_to_string(dir.join("reference_plans.json")).unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(!cases.is_empty());
    let d = dir.to_str().unwrap();
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let o = run(&reference_case_args(case, d));
        assert_eq!(o.code, 0, "{id}: {}", o.stderr);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        for k in ["batch_sizes", "microbatches", "max_bs_even_shard", "max_bs"] {
            assert_eq!(v[k], case[k], "{id}: {k}");
        }
        // The objective is a sum of the profile's floats, equal to the
        // reference's but for the last bit or two of rounding (the
        // library test allows 1e-6).
        let (got, want) = (
            v["makespan_ms_per_block"].as_f64().unwrap(),
            case["makespan_ms_per_block"].as_f64().unwrap(),
        );
        assert!(
            (got / want - 1.0).abs() < 1e-9,
            "{id}: makespan {got} vs {want}"
        );
        assert_eq!(v["planner"], "cephalo-compat", "{id}");
        // The rule was compat's default, and the output says so.
        assert_eq!(v["mem_policy"], "fraction", "{id}");
        assert_eq!(v["mem_fraction"], 0.75, "{id}");
        assert_eq!(v["overhead_gib"], 2.0, "{id}");
        let notes = v["notes"].to_string();
        assert!(notes.contains("cephalo-compat's default"), "{id}: {notes}");
        assert!(
            o.stderr
                .contains("note: memory rule: cephalo-compat's default"),
            "{id}: {}",
            o.stderr
        );
    }
}

#[test]
fn compat_memory_rule_yields_to_the_users_flags() {
    // An explicit --mem-fraction / --overhead-gib replaces compat's
    // default; the notes say which part was still the default.
    let Some(dir) = shared_dir() else { return };
    let d = dir.to_str().unwrap();
    let json = |extra: &[&str]| {
        let o = run(&paper(
            "plan",
            d,
            &[&["--compat", "--format", "json"], extra].concat(),
        ));
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str::<Value>(&o.stdout).unwrap()
    };
    let user = json(&["--mem-fraction", "0.9"]);
    assert_eq!(user["mem_fraction"], 0.9);
    assert_eq!(user["overhead_gib"], 2.0);
    assert!(
        !user["notes"].to_string().contains("memory rule"),
        "{}",
        user["notes"]
    );
    assert_ne!(user["max_bs"], serde_json::json!([38, 38, 89, 38]));
    let outside = json(&["--overhead-gib", "1.5"]);
    assert_eq!(outside["mem_fraction"], 0.75);
    assert_eq!(outside["overhead_gib"], 1.5);
    let notes = outside["notes"].to_string();
    assert!(
        notes.contains("cephalo-compat's default fraction") && notes.contains("--overhead-gib"),
        "{notes}"
    );
    // The planner named by --planner takes its rule the same way.
    let named = run(&paper(
        "plan",
        d,
        &["--planner", "reference", "--format", "json"],
    ));
    assert_eq!(named.code, 0, "{}", named.stderr);
    let named: Value = serde_json::from_str(&named.stdout).unwrap();
    assert_eq!(named["max_bs"], serde_json::json!([38, 38, 89, 38]));
    // Other planners keep the physical default.
    let native = run(&paper(
        "plan",
        d,
        &["--planner", "cephalo", "--format", "json"],
    ));
    let native: Value = serde_json::from_str(&native.stdout).unwrap();
    assert_eq!(native["mem_policy"], "physical");
    assert_eq!(native["mem_fraction"], Value::Null);
}

#[test]
fn plan_out_is_read_back_by_simulate() {
    let Some(d) = shared_dir() else { return };
    let d = d.to_str().unwrap();
    let path = tmp("cli-plan-out.json");
    let p = path.to_str().unwrap();
    let o = run(&paper("plan", d, &["--format", "json", "--out", p]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let planned: Value = serde_json::from_str(&o.stdout).unwrap();
    // The best of every family: Cephalo's or a heterogeneous 3D plan, both
    // read back.
    let winner = planned["planner"].as_str().unwrap();
    assert!(["cephalo", "hetero-3d"].contains(&winner), "{winner}");
    let s = run(&paper("simulate", d, &["--plan", p, "--format", "json"]));
    assert_eq!(s.code, 0, "{}", s.stderr);
    let sim: Value = serde_json::from_str(&s.stdout).unwrap();
    let a = sim["iteration_ms"].as_f64().unwrap();
    let b = planned["simulated"]["iteration_ms"].as_f64().unwrap();
    assert!((a - b).abs() <= 1e-9 * b, "{a} vs {b}");
}

#[test]
fn compare_rows_contract_and_ours_wins() {
    let Some(d) = shared_dir() else { return };
    let d = d.to_str().unwrap();
    let o = run(&paper("compare", d, &["--format", "json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["format"], "cephalo-compare/2");
    let rows: Vec<Value> = v["rows"].as_array().unwrap().clone();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["planner"].as_str().unwrap())
        .collect();
    for want in [
        "cephalo",
        "cephalo-compat",
        "fsdp",
        "fsdp-ga",
        "zero2",
        "ddp",
        "hsdp",
        "speed-proportional",
        "speed-proportional-mem",
        "pipeline",
        "pipeline-hetero",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    for r in &rows {
        for k in [
            "planner",
            "strategy",
            "samples_per_s",
            "iteration_ms",
            "speedup_vs_even_fsdp",
            "oom",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
    }
    let ours = rows[0]["samples_per_s"].as_f64().unwrap();
    assert_eq!(rows[0]["planner"], "cephalo");
    // Ours beats every data-parallel row (pipelines and 3D plans are
    // other families, which can win on some workloads).
    let other_family = ["pipeline", "pipeline-hetero", "megatron", "hetero-3d"];
    for r in rows
        .iter()
        .filter(|r| !other_family.contains(&r["planner"].as_str().unwrap()))
    {
        if r["oom"] == Value::Bool(false) {
            if let Some(x) = r["samples_per_s"].as_f64() {
                assert!(ours >= x * (1.0 - 1e-9), "{} beats cephalo", r["planner"]);
            }
        }
    }
    let fsdp = rows.iter().find(|r| r["planner"] == "fsdp").unwrap();
    assert!((fsdp["speedup_vs_even_fsdp"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    let csv = run(&paper("compare", d, &["--format", "csv"]));
    assert_eq!(csv.code, 0);
    assert!(csv
        .stdout
        .starts_with("planner,strategy,samples_per_s,tokens_per_s,mfu,iteration_ms,speedup_vs_even_fsdp,speedup_vs_best_baseline,best_baseline"));
    assert_eq!(csv.stdout.lines().count(), rows.len() + 1);
}

#[test]
fn infeasible_workload_exits_2_with_shortfall_and_gpu() {
    // LLaMA-2-70B's training state (~1 TiB) on two T4s.
    let o = run(&[
        "plan",
        "--gpus",
        "t4,t4",
        "--model",
        "llama2-70b",
        "--global-batch",
        "8",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("infeasible"), "{}", o.stderr);
    assert!(o.stderr.contains("short by"), "{}", o.stderr);
    let c = run(&[
        "compare",
        "--gpus",
        "t4,t4",
        "--model",
        "llama2-70b",
        "--global-batch",
        "8",
    ]);
    assert_eq!(c.code, 2, "{}", c.stderr);
    assert!(c.stdout.contains("cephalo"), "the table is still printed");
    assert!(!o.stderr.contains("panicked"));
}

#[test]
fn unknown_planner_exits_2() {
    let o = run(&[
        "plan",
        "--gpus",
        "l4,a6000",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--planner",
        "nope",
    ]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("unknown planner `nope`"), "{}", o.stderr);
}

/// Compat mode on built-in data alone: the reference rules run on the
/// calibrated curves, and the output says so for every GPU.
#[test]
fn compat_without_reference_profiles_says_which_curves_it_used() {
    let o = run(&[
        "plan",
        "--compat",
        "--gpus",
        "l4,a6000",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--format",
        "json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let b: u64 = v["batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(b, 16);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("no reference profile for l4") && notes.contains("analytic"),
        "{notes}"
    );
}

#[test]
fn calibration_flag_replaces_the_shipped_model() {
    // A calibration whose kernel floor is 100x the shipped one must slow a
    // built-in-data plan down; a stale or missing file exits 2.
    let shipped: Value =
        serde_json::from_str(&std::fs::read_to_string("profiles/calibration.json").unwrap())
            .unwrap();
    let mut slow = shipped.clone();
    let v = slow["time"]["kernel_floor_us"].as_f64().unwrap();
    slow["time"]["kernel_floor_us"] = Value::from(v * 100.0);
    let dir = scratch("cli-plan-calibration");
    let slow_path = write(dir.join("slow.json"), &slow.to_string());
    let mut stale = shipped;
    stale["time"]
        .as_object_mut()
        .unwrap()
        .remove("power_clock_ghz");
    let stale_path = write(dir.join("stale.json"), &stale.to_string());

    let base = [
        "plan",
        "--gpus",
        "t4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--format",
        "json",
    ];
    let iter_ms = |extra: &[&str]| {
        let o = run(&[&base[..], extra].concat());
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: Value = serde_json::from_str(&o.stdout).unwrap();
        v["simulated"]["iteration_ms"].as_f64().unwrap()
    };
    let default_ms = iter_ms(&[]);
    let slow_ms = iter_ms(&["--calibration", &slow_path]);
    assert!(slow_ms > default_ms * 1.05, "{slow_ms} vs {default_ms}");

    let o = run(&[&base[..], &["--calibration", &stale_path]].concat());
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("stale.json") && o.stderr.contains("power_clock_ghz"),
        "{}",
        o.stderr
    );
    let o = run(&[&base[..], &["--calibration", "no/such/calibration.json"]].concat());
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("no/such/calibration.json"),
        "{}",
        o.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// At more than 32 GPUs the plan and compare tables print each run of
/// identical GPUs once, lists as runs (`20x 2`), the workload's GPUs as
/// counts; every table ends with the sources of its numbers (analytic
/// here, with the cross-validated error band); notes go to stderr.
#[test]
fn large_clusters_read_as_groups_with_their_sources() {
    let gpus = [vec!["t4"; 20], vec!["l4"; 20]].concat().join(",");
    let o = crate::common::run(&[
        "plan",
        "--gpus",
        &gpus,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "80",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("[20x t4, 20x l4]"), "{}", o.stdout);
    let ranks: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("0-") || l.trim_start().starts_with("20-"))
        .collect();
    // Two groups in the plan table and two in the memory table.
    assert_eq!(ranks.len(), 4, "{}", o.stdout);
    assert!(
        o.stdout.contains("sources:\n  20x t4: compute analytic"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("cross-validated error"), "{}", o.stdout);
    assert!(
        !o.stdout.contains("note:"),
        "notes belong on stderr: {}",
        o.stdout
    );
    let c = crate::common::run(&[
        "compare",
        "--gpus",
        &gpus,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "80",
        "--planners",
        "fsdp",
    ]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(
        c.stdout.contains("[40x 2] / [40x 1]") || c.stdout.contains("[40x 2] / [40x 2]"),
        "{}",
        c.stdout
    );
    assert!(c.stdout.contains("sources:"), "{}", c.stdout);
}

#[test]
fn the_native_planner_refuses_more_gpus_than_its_stated_limit() {
    // The stated limit (planner::cephalo::MAX_GPUS, 2,048, what plans in
    // about 10 s): above it the planner says so before any search and names the
    // alternatives.
    let toml: String = std::iter::once("[network]\nbw_gbit_s = 100\n".to_string())
        .chain((0..257).map(|n| {
            format!("[[nodes]]\nname = \"n{n}\"\ngpus = [ {{ type = \"l4\", count = 8 }} ]\n")
        }))
        .collect();
    let path = write(tmp("cli-plan-cluster-2056.toml"), &toml);
    let o = run(&[
        "plan",
        "--cluster",
        &path,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "4112",
        "--planner",
        "cephalo",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("up to 2048 GPUs")
            && o.stderr.contains("2056")
            && o.stderr.contains("planner fsdp"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.is_empty());
    // Another planner plans it.
    let o = run(&[
        "plan",
        "--cluster",
        &path,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "4112",
        "--planner",
        "fsdp",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // The default search (every family) says why the data-parallel family
    // has no plan and returns another family's.
    let o = run(&[
        "plan",
        "--cluster",
        &path,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "4112",
        "--format",
        "json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("family data-parallel: no plan that fits (cephalo: ")
            && o.stderr.contains("up to 2048 GPUs"),
        "{}",
        o.stderr
    );
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let fams = j["families"].as_array().unwrap();
    assert_eq!(fams.len(), 3);
    assert!(fams[0]["planner"].is_null() && fams.iter().any(|f| f["won"] == true));
}

/// Issue 26: an infeasible answer names the knobs that would make it fit,
/// each with the memory it needs against what the GPU may use.
#[test]
fn infeasible_names_the_knobs_that_would_fit() {
    let o = run(&[
        "plan",
        "--gpus",
        "a100-40gb,a100-40gb",
        "--model",
        "llama-2-13b",
        "--seq-len",
        "4096",
        "--global-batch",
        "8",
        "--dtype",
        "bf16",
        "--attention",
        "eager",
        "--checkpointing",
        "none",
        "--mem-fraction",
        "0.75",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    for knob in [
        "--attention flash",
        "--checkpointing full",
        "--offload optimizer",
        "the physical memory limit instead of --mem-fraction 0.75",
        "all of these together",
        "more GPUs: ",
    ] {
        assert!(o.stderr.contains(knob), "no `{knob}` in:\n{}", o.stderr);
    }
    // Every knob line says how much it needs of what is usable.
    let lines: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("    - "))
        .collect();
    assert!(lines.len() >= 5, "{}", o.stderr);
    assert!(lines.iter().all(|l| l.contains("GiB")), "{}", o.stderr);
}

/// `compare` answers its question on a mixed cluster where plain FSDP runs
/// out of memory: every row has tokens/s, MFU and the iteration time in
/// JSON and CSV; Cephalo's row names its speed-up over the best baseline
/// that fits; the FSDP row says by how much it is over; and the table
/// stays within 200 columns on 256 GPUs.
#[test]
fn compare_names_the_best_baseline_and_fits_200_columns() {
    let args = [
        "compare",
        "--gpus",
        "a100-80gb,t4,t4,t4",
        "--model",
        "gpt-2.7b",
        "--global-batch",
        "32",
        "--planners",
        "cephalo,fsdp,fsdp-ga,ddp",
    ];
    let j = run(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(j.code, 0, "{}", j.stderr);
    let v: Value = serde_json::from_str(&j.stdout).unwrap();
    assert!(
        v["headline"].as_str().unwrap().starts_with("cephalo: "),
        "{v}"
    );
    let rows: Vec<Value> = v["rows"].as_array().unwrap().clone();
    for r in &rows {
        for k in [
            "tokens_per_s",
            "mfu",
            "iteration_ms",
            "speedup_vs_best_baseline",
            "best_baseline",
            "oom_over_gib",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        if r["error"].is_null() {
            assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
            let mfu = r["mfu"].as_f64().unwrap();
            assert!(mfu > 0.0 && mfu < 1.0, "{r}");
        }
        if r["oom"] == false {
            assert!(r["oom_over_gib"].is_null(), "{r}");
        }
    }
    let by = |n: &str| rows.iter().find(|r| r["planner"] == n).unwrap().clone();
    let fsdp = by("fsdp");
    let ours = by("cephalo");
    let fitting: Vec<&Value> = rows
        .iter()
        .filter(|r| r["planner"] != "cephalo" && r["oom"] == false && r["error"].is_null())
        .collect();
    let best = fitting.iter().max_by(|a, b| {
        a["samples_per_s"]
            .as_f64()
            .partial_cmp(&b["samples_per_s"].as_f64())
            .unwrap()
    });
    match best {
        Some(b) => {
            assert_eq!(ours["best_baseline"], b["planner"]);
            let want =
                ours["samples_per_s"].as_f64().unwrap() / b["samples_per_s"].as_f64().unwrap();
            assert!((ours["speedup_vs_best_baseline"].as_f64().unwrap() - want).abs() < 1e-9);
        }
        None => assert!(ours["speedup_vs_best_baseline"].is_null()),
    }
    let t = run(&args);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let head = t
        .stdout
        .lines()
        .find(|l| l.starts_with("cephalo: "))
        .unwrap_or_else(|| panic!("no headline:\n{}", t.stdout));
    if let Some(b) = best {
        assert!(head.contains(b["planner"].as_str().unwrap()), "{head}");
        assert!(head.contains("the best baseline that fits"), "{head}");
    }
    if fsdp["oom"] == true {
        assert!(
            head.contains("plain FSDP runs out of memory (by "),
            "{head}"
        );
        assert!(fsdp["oom_over_gib"].as_f64().unwrap() > 0.0);
    } else {
        assert!(head.contains("x plain FSDP"), "{head}");
    }
    let csv = run(&[&args[..], &["--format", "csv"]].concat());
    assert_eq!(csv.code, 0);
    let header: Vec<&str> = csv.stdout.lines().next().unwrap().split(',').collect();
    for k in [
        "tokens_per_s",
        "mfu",
        "iteration_ms",
        "speedup_vs_best_baseline",
        "oom_over_gib",
    ] {
        assert!(header.contains(&k), "{header:?}");
    }
    // 256 GPUs: the table reads in 200 columns.
    let big = run(&[
        "compare",
        "--nodes",
        "32",
        "--gpus-per-node",
        "8",
        "--gpu",
        "a100-80gb",
        "--add-gpu",
        "l4:8",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "528",
        "--planners",
        "cephalo,fsdp",
    ]);
    assert_eq!(big.code, 0, "{}", big.stderr);
    // ... and so does one whose planners have no plan: each says why
    // below the table, wrapped, the sources too.
    let none = run(&[
        "compare",
        "--gpus",
        "l4,l4,l4,l4",
        "--model",
        "llama2-13b",
        "--global-batch",
        "16",
    ]);
    // (Cephalo itself has none: the table, then exit 2 with why.)
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(
        none.stdout.contains("no plan (why: below)")
            && none.stdout.contains("\npipeline:\n  infeasible:"),
        "{}",
        none.stdout
    );
    for l in big.stdout.lines().chain(none.stdout.lines()) {
        assert!(
            l.chars().count() <= 200,
            "{} columns: {l}",
            l.chars().count()
        );
    }
}

/// `plan --tp/--pp/...` pins the 3D planner's shape: fully pinned, its
/// plan is the one `simulate` runs with the same shape flags (same
/// iteration); partly pinned, every plan has the pins; `best` and
/// `compare` run only the planners that search within the pins; a planner
/// that does not is refused (exit 2) and a pin no shape matches is
/// infeasible with what the search allows.
#[test]
fn shape_pins_narrow_the_3d_search() {
    let c = [
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--gpu",
        "a100-80gb",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
    ];
    let shape = [
        "--tp",
        "4",
        "--pp",
        "2",
        "--pp-schedule",
        "1f1b",
        "--microbatch-size",
        "2",
        "--checkpointing",
        "full",
        "--sharding",
        "none",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        c.iter()
            .chain(shape.iter())
            .chain(extra.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let p = with(&["--planner", "megatron", "--sequence-parallel", "on"]);
    let p: Vec<&str> = p.iter().map(|s| s.as_str()).collect();
    let planned = crate::common::json_of("plan", &p);
    let s = with(&["--sequence-parallel"]);
    let s: Vec<&str> = s.iter().map(|s| s.as_str()).collect();
    let simulated = crate::common::json_of("simulate", &s);
    let (a, b) = (
        planned["simulated"]["iteration_ms"].as_f64().unwrap(),
        simulated["iteration_ms"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-9 * b, "plan {a} vs simulate {b}");
    // Partly pinned, through `best`: a 3D plan of TP 4 from a planner
    // that searches within the pin.
    let mut best: Vec<&str> = c.to_vec();
    best.extend(["--tp", "4"]);
    let v = crate::common::json_of("plan", &best);
    assert!(
        v["planner"] == "megatron" || v["planner"] == "hetero-3d",
        "{}",
        v["planner"]
    );
    let text = run(&[&["plan"][..], &best[..]].concat());
    assert!(text.stdout.contains("3d tp4"), "{}", text.stdout);
    // compare: only the planners that take the pins.
    let cmp = crate::common::json_of("compare", &best);
    let names: Vec<&str> = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["planner"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["megatron", "hetero-3d"], "{cmp}");
    // A planner that does not search shapes: refused, naming it.
    let mut fsdp: Vec<&str> = best.clone();
    fsdp.extend(["--planner", "fsdp"]);
    let o = run(&[&["plan"][..], &fsdp[..]].concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("`fsdp` makes data-parallel plans") && o.stderr.contains("tp=4"),
        "{}",
        o.stderr
    );
    // No shape matches TP 3: infeasible, with the degrees the model allows.
    let mut three: Vec<&str> = c.to_vec();
    three.extend(["--planner", "megatron", "--tp", "3"]);
    let o = run(&[&["plan"][..], &three[..]].concat());
    assert_ne!(o.code, 0);
    assert!(
        o.stderr.contains("matches the pinned tp=3") && o.stderr.contains("it allows"),
        "{}",
        o.stderr
    );
    // A bad pin names its flag before any work.
    let mut bad: Vec<&str> = c.to_vec();
    bad.extend(["--pp-schedule", "zigzag"]);
    let o = run(&[&["plan"][..], &bad[..]].concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--pp-schedule"), "{}", o.stderr);
}

/// `plan`'s table reads in 200 columns on 1,024 GPUs of five types (the
/// GPU list counted per type, the sources wrapped).
#[test]
fn plan_reads_in_200_columns_at_1024_gpus() {
    let cluster = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/experiments/clusters/mixed-1024gpu-5types.toml"
    );
    let o = run(&[
        "plan",
        "--cluster",
        cluster,
        "--model",
        "llama2-13b",
        "--seq-len",
        "4096",
        "--global-batch",
        "2048",
        "--planner",
        "fsdp",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("on [256x h100-sxm, 256x a100-40gb, 128x v100-16gb, 256x l4, 128x t4]"),
        "{}",
        o.stdout
    );
    for l in o.stdout.lines() {
        assert!(
            l.chars().count() <= 200,
            "{} columns: {l}",
            l.chars().count()
        );
    }
}

/// `hetero-3d` searches within pinned TP degrees, stage counts and
/// schedules (sized under the pinned schedule: a GPipe plan that fits),
/// and refuses the parts of a shape it does not search, naming them.
#[test]
fn hetero_3d_searches_within_its_pins() {
    let cluster = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/experiments/clusters/mixed-3node-25gbe.toml"
    );
    let plan = |extra: &[&str]| {
        let mut a = vec![
            "plan",
            "--planner",
            "hetero-3d",
            "--cluster",
            cluster,
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "64",
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    let strategy = |o: &crate::common::Out| -> String {
        assert_eq!(o.code, 0, "{}", o.stderr);
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with("strategy: "))
            .unwrap();
        line.to_string()
    };
    let s = strategy(&plan(&["--pp", "3"]));
    assert!(s.contains(" 3 stages "), "{s}");
    let o = plan(&["--pp-schedule", "gpipe"]);
    let s = strategy(&o);
    assert!(s.contains(" gpipe "), "{s}");
    assert!(o.stdout.contains("OOM: no"), "{}", o.stdout);
    let o = plan(&["--microbatch-size", "2"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("`hetero-3d` makes 3d plans and does not search a pinned microbatch_size"),
        "{}",
        o.stderr
    );
    // TP 2 on the 3-GPU A100 node: no layout has it on every stage.
    let o = plan(&["--tp", "2"]);
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("no hetero-3d layout of the 15 GPUs has the pinned tp=2"),
        "{}",
        o.stderr
    );
}
