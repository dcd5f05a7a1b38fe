//! Every input refuses nonsense where it enters, one test per mechanism:
//! profiles that hold nothing usable, a dtype a GPU cannot run, memory
//! lists that fall, calibration coefficients, calibrate's measurements,
//! list flags, reference-optimizer plan files, and impossible against
//! merely large numbers.

use crate::common::{native_profile, run, scratch, shared_dir, small_reference, write, Out};
use std::path::PathBuf;

fn simulate(extra: &[&str]) -> Out {
    let mut a = vec![
        "simulate",
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--batch",
        "4,4",
    ];
    a.extend_from_slice(extra);
    run(&a)
}

fn refused(o: &Out, needles: &[&str]) {
    assert_eq!(o.code, 2, "{}", o.stderr);
    for n in needles {
        assert!(o.stderr.contains(n), "missing `{n}` in: {}", o.stderr);
    }
    assert!(o.stdout.is_empty(), "answered anyway: {}", o.stdout);
}

#[test]
fn profiles_that_hold_nothing_usable_are_errors_naming_the_path() {
    let d = scratch("inputs-empty-profiles");
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    refused(
        &simulate(&["--profiles", empty.to_str().unwrap()]),
        &["empty", "no profile in this directory"],
    );
    let braces = write(d.join("braces/x.json"), "{}");
    refused(
        &simulate(&["--profiles", &braces]),
        &["x.json", "no profile entries"],
    );
    let unknown = write(
        d.join("unknown.json"),
        r#"{"no-such-model": {"l4": {"512": {"float16": 3.0}}}}"#,
    );
    refused(
        &simulate(&["--profiles", &unknown]),
        &[
            "unknown.json",
            "none of its entries can be used",
            "no-such-model",
        ],
    );
    let native_empty = write(
        d.join("native-empty.json"),
        r#"{"format": "cephalo-profile/1", "device": "x", "blocks": [], "units": [], "collectives": []}"#,
    );
    refused(
        &simulate(&["--profiles", &native_empty]),
        &["native-empty.json", "no blocks, units or collectives"],
    );
}

#[test]
fn a_dtype_a_gpu_cannot_run_is_refused_wherever_they_meet() {
    let d = scratch("inputs-dtype");
    for gpus in ["v100-16gb,l4", "t4,t4", "p40,a100"] {
        let o = run(&[
            "simulate",
            "--gpus",
            gpus,
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "8",
            "--batch",
            "4,4",
            "--dtype",
            "bf16",
        ]);
        refused(&o, &["--dtype", "cannot train in bf16"]);
        let o = run(&[
            "plan",
            "--gpus",
            gpus,
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "8",
            "--dtype",
            "bf16",
        ]);
        refused(&o, &["--dtype", "cannot train in bf16"]);
    }
    let o = run(&[
        "predict", "--gpu", "t4", "--model", "gpt-1.3b", "--dtype", "bf16",
    ]);
    refused(&o, &["t4 cannot train in bf16", "fp16, fp32"]);
    // Profiles: a native block and a reference entry measured in bf16 on a T4.
    let p = write(
        d.join("bf16-t4.json"),
        &native_profile("t4", "bf16", "null"),
    );
    refused(
        &simulate(&["--profiles", &p]),
        &["bf16-t4.json", "blocks[0].dtype", "cannot train in bf16"],
    );
    let r = write(
        d.join("ref-bf16.json"),
        r#"{"deepspeedgpt_1.3b": {"t4": {"512": {"bfloat16": 3.0}}}}"#,
    );
    refused(
        &simulate(&["--profiles", &r]),
        &["ref-bf16.json", "deepspeedgpt_1.3b/t4/512/bfloat16"],
    );
}

#[test]
fn memory_lists_that_fall_are_refused_in_every_format() {
    let d = scratch("inputs-memory");
    // Within allocator noise (2% or 64 MiB): accepted.
    let ok = write(
        d.join("ok.json"),
        &native_profile("l4", "fp16", "[2.0, 1.98, 3.0]"),
    );
    let o = simulate(&["--profiles", &ok]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Beyond it, in the native format and in the reference one.
    let bad = write(
        d.join("falls.json"),
        &native_profile("l4", "fp16", "[4.0, 3.0, 5.0]"),
    );
    refused(
        &simulate(&["--profiles", &bad]),
        &[
            "falls.json",
            "blocks[0].act_mem_gib",
            "size 2",
            "2% or 64 MiB",
        ],
    );
    let zero = write(
        d.join("zero.json"),
        &native_profile("l4", "fp16", "[0.0, 1.0, 2.0]"),
    );
    refused(
        &simulate(&["--profiles", &zero]),
        &["zero.json", "act_mem_gib", "holds activations"],
    );
    let mem = write(
        d.join("model_memory.json"),
        r#"{"paper": {"deepspeedgpt_1.3b": {"parameters": 1315575808, "profiled_compute_memory": {"float16": [3.0, 4.0, 3.5, 5.0]}}}}"#,
    );
    refused(
        &simulate(&["--profiles", &mem]),
        &[
            "model_memory.json",
            "paper.deepspeedgpt_1.3b.profiled_compute_memory.float16",
            "size 3",
        ],
    );
}

#[test]
fn calibration_coefficients_are_physically_checked() {
    let d = scratch("inputs-calibration");
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/calibration.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let cases: [(&str, &str, serde_json::Value, &str); 5] = [
        ("memory", "fixed_gib", 1e10.into(), "memory.fixed_gib"),
        (
            "memory",
            "passes_hidden",
            1e9.into(),
            "memory.passes_hidden",
        ),
        ("memory", "logit_copies", 0.0.into(), "memory.logit_copies"),
        ("time", "bw_efficiency", 1e-9.into(), "time.bw_efficiency"),
        (
            "time",
            "kernel_floor_us",
            1e6.into(),
            "time.kernel_floor_us",
        ),
    ];
    for (part, key, value, field) in cases {
        let mut c = shipped.clone();
        c[part][key] = value;
        let p = write(d.join(format!("{key}.json")), &c.to_string());
        refused(
            &simulate(&["--calibration", &p]),
            &[&p, field, "expected a value in"],
        );
        let o = run(&[
            "predict",
            "--gpu",
            "l4",
            "--model",
            "gpt-1.3b",
            "--calibration",
            &p,
        ]);
        refused(&o, &[field]);
    }
    let mut c = shipped.clone();
    c["error_band"]["time_leave_one_model_out"]["p90_ape_pct"] = (-3.0).into();
    let p = write(d.join("band.json"), &c.to_string());
    refused(
        &simulate(&["--calibration", &p]),
        &["error_band.time_leave_one_model_out.p90_ape_pct"],
    );
    // The shipped file passes its own checks.
    let p = write(d.join("shipped.json"), &shipped.to_string());
    assert_eq!(simulate(&["--calibration", &p]).code, 0);
}

#[test]
fn calibrate_refuses_measurements_that_are_zero_naming_the_entry() {
    let d = scratch("inputs-calibrate-zero");
    let Some(reference) = small_reference(&d) else {
        return;
    };
    let lat_path = reference.join("model_latencies.json");
    let mut lat: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&lat_path).unwrap()).unwrap();
    // The first entry with raw lists: its lists zeroed.
    let (mut model, mut gpu, mut seq, mut dtype) =
        (String::new(), String::new(), String::new(), String::new());
    'find: for (m, by_gpu) in lat.as_object().unwrap() {
        for (g, by_seq) in by_gpu.as_object().unwrap() {
            for (s, by_dtype) in by_seq.as_object().unwrap() {
                for (t, leaf) in by_dtype.as_object().unwrap() {
                    if leaf.as_array().is_some_and(|a| a.len() == 4) {
                        (model, gpu, seq, dtype) = (m.clone(), g.clone(), s.clone(), t.clone());
                        break 'find;
                    }
                }
            }
        }
    }
    assert!(!model.is_empty());
    let leaf = &mut lat[&model][&gpu][&seq][&dtype];
    for i in [2, 3] {
        let n = leaf[i].as_array().unwrap().len();
        leaf[i] = serde_json::Value::Array(vec![0.0.into(); n]);
    }
    std::fs::write(&lat_path, lat.to_string()).unwrap();
    let out = d.join("c.json");
    let o = run(&[
        "calibrate",
        "--reference",
        reference.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--report-dir",
        d.join("report").to_str().unwrap(),
        "--no-figures",
    ]);
    let entry = format!("{model}/{gpu}/{seq}/{dtype}");
    refused(&o, &["--reference", &entry, "value 0 at size 1"]);
    assert!(!out.exists(), "wrote a calibration fitted to zeros");
}

#[test]
fn every_list_flag_goes_through_one_parser() {
    let w = [
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
    ];
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["simulate", "--batch", "4,,4"], "--batch", "item 2"),
        (
            vec!["simulate", "--batch", "+4,4"],
            "--batch",
            "item 1 `+4`",
        ),
        (
            vec!["simulate", "--batch", "-4,12"],
            "--batch",
            "item 1 `-4`",
        ),
        (
            vec!["simulate", "--batch", "1e3"],
            "--batch",
            "item 1 `1e3`",
        ),
        (
            vec!["simulate", "--batch", "4,4", "--microbatches", "1,x"],
            "--microbatches",
            "item 2 `x`",
        ),
        (
            vec!["simulate", "--batch", "4,4", "--state-fractions", "0.5,nan"],
            "--state-fractions",
            "item 2 `nan`",
        ),
        (
            vec!["compare", "--planners", "fsdp,,cephalo"],
            "--planners",
            "item 2",
        ),
    ];
    for (mut a, flag, item) in cases {
        a.splice(1..1, w);
        let o = run(&a);
        refused(&o, &[flag, item]);
    }
    // Spaces around items are not nonsense.
    let mut a = vec!["simulate"];
    a.extend(w);
    a.extend(["--batch", "4, 4"]);
    assert_eq!(run(&a).code, 0);
    for (a, flag, item) in [
        (
            vec![
                "predict",
                "--gpu",
                "l4",
                "--model",
                "gpt-1.3b",
                "--batch-sizes",
                "1,,2",
            ],
            "--batch-sizes",
            "item 2",
        ),
        (
            vec![
                "predict",
                "--gpu",
                "l4",
                "--model",
                "gpt-1.3b",
                "--batch-sizes",
                "0",
            ],
            "--batch-sizes",
            "item 1 `0`",
        ),
        (
            vec![
                "comm",
                "--gpus",
                "l4,l4",
                "--op",
                "all-gather",
                "--sizes",
                "1M,-2M",
            ],
            "--sizes",
            "item 2 `-2M`",
        ),
        (
            vec![
                "comm",
                "--gpus",
                "l4,l4",
                "--op",
                "all-gather",
                "--ranks",
                "0-x",
            ],
            "--ranks",
            "item 1 `0-x`",
        ),
        (
            vec![
                "simulate",
                "--gpus",
                "l4,,l4",
                "--model",
                "gpt-1.3b",
                "--global-batch",
                "8",
                "--batch",
                "4,4",
            ],
            "--gpus",
            "item 2",
        ),
    ] {
        refused(&run(&a), &[flag, item]);
    }
}

#[test]
fn reference_plan_files_are_checked_against_the_workload() {
    let Some(shared) = shared_dir() else {
        return;
    };
    let plan = shared.join("example_plan_gpt_2.7b.json");
    let cluster =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments/clusters/paper-4gpu.toml");
    let go = |model: &str, batch: &str, extra: &[&str]| {
        let mut a = vec![
            "simulate",
            "--cluster",
            cluster.to_str().unwrap(),
            "--model",
            model,
            "--global-batch",
            batch,
            "--plan",
            plan.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    assert_eq!(go("gpt-2.7b", "64", &[]).code, 0);
    refused(
        &go("gpt-1.3b", "64", &[]),
        &["example_plan_gpt_2.7b.json", "model_name"],
    );
    refused(
        &go("gpt-2.7b", "64", &["--seq-len", "1024"]),
        &["seq_length"],
    );
    refused(
        &go("gpt-2.7b", "64", &["--dtype", "fp32"]),
        &["autocast_dtype"],
    );
    refused(
        &go("gpt-2.7b", "65", &[]),
        &["uneven_batch_sizes", "global batch of 64"],
    );
}

#[test]
fn long_predictions_are_reported_and_impossible_numbers_refused() {
    // A 2M-token sequence: 20 minutes an iteration on two P40s, an answer;
    // on two T4s with GPT-1.3B one block pass takes an hour: an answer too
    // (here: out of memory), with a note that it is long, not an error.
    let long = |gpus: &str, model: &str| {
        run(&[
            "simulate",
            "--gpus",
            gpus,
            "--model",
            model,
            "--global-batch",
            "2",
            "--batch",
            "1,1",
            "--seq-len",
            "2000000",
            "--attention",
            "flash",
        ])
    };
    let o = long("p40,p40", "gpt-tiny");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("iteration"), "{}", o.stdout);
    let o = long("t4,t4", "gpt-1.3b");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("a long run, not an error"),
        "{}",
        o.stderr
    );
    // A measured pass of hours is large, not impossible; zero is impossible.
    let d = scratch("inputs-long");
    let hours = write(
        d.join("hours.json"),
        &native_profile("l4", "fp16", "null")
            .replace("[10.0, 19.0, 28.0]", "[7.2e6, 1.4e7, 2.1e7]"),
    );
    assert_eq!(simulate(&["--profiles", &hours]).code, 0);
    let zero = write(
        d.join("zero.json"),
        &native_profile("l4", "fp16", "null").replace("[10.0, 19.0, 28.0]", "[0.0, 19.0, 28.0]"),
    );
    refused(
        &simulate(&["--profiles", &zero]),
        &["zero.json", "blocks[0].fwd_ms", "size 1"],
    );
    // A unit mix-up (nanoseconds read as ms) is still refused.
    let ns = write(
        d.join("ns.json"),
        &native_profile("l4", "fp16", "null")
            .replace("[10.0, 19.0, 28.0]", "[1e10, 1.9e10, 2.8e10]"),
    );
    refused(&simulate(&["--profiles", &ns]), &["ns.json", "unit mix-up"]);
}
