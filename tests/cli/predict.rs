//! `cephalo predict` end to end (issue 5): the JSON contract from the
//! calibrated model alone, the best-source mode with imported profiles, and
//! bad queries exiting 2.

use crate::common::{run, run_command, shared_dir};
use serde_json::Value;

const H100_13B: [&str; 12] = [
    "predict",
    "--gpu",
    "h100-sxm",
    "--model",
    "llama2-13b",
    "--seq-len",
    "512",
    "--dtype",
    "bf16",
    "--batch-sizes",
    "1,2,4,8,16",
    "--format",
];

#[test]
fn analytic_json_for_an_unmeasured_gpu() {
    let mut args = H100_13B.to_vec();
    args.extend(["json", "--source", "analytic"]);
    let o = run(&args);
    let (code, out, err) = (o.code, o.stdout, o.stderr);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["format"], "cephalo-predict/1");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let mut last = 0.0;
    for (r, b) in rows.iter().zip([1, 2, 4, 8, 16]) {
        assert_eq!(r["batch"], b);
        let (f, bw, mem) = (
            r["fwd_ms"].as_f64().unwrap(),
            r["bwd_ms"].as_f64().unwrap(),
            r["act_mem_gib"].as_f64().unwrap(),
        );
        assert!(f > 0.0 && bw > f && mem > 0.0);
        assert!(f + bw > last);
        last = f + bw;
        assert!(r["time_source"].as_str().unwrap().starts_with("analytic"));
    }
    // Same inputs, same bytes.
    assert_eq!(run(&args).stdout, out);
}

#[test]
fn best_source_prefers_imported_profiles_and_says_so() {
    let Some(d) = shared_dir() else { return };
    let d = d.display().to_string();
    let base = [
        "predict",
        "--gpu",
        "a100x40",
        "--model",
        "deepspeedllama_7b",
        "--seq-len",
        "512",
        "--dtype",
        "fp16",
        "--batch-sizes",
        "1,2",
        "--format",
        "json",
        "--profiles",
        &d,
    ];
    let o = run(&base);
    let (code, out, err) = (o.code, o.stdout, o.stderr);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["rows"][0]["time_source"]
            .as_str()
            .unwrap()
            .starts_with("imported"),
        "{out}"
    );
    // --source analytic never uses the imported entry.
    let mut a = base.to_vec();
    a.extend(["--source", "analytic"]);
    let o = run(&a);
    let (code, out) = (o.code, o.stdout);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["rows"][0]["time_source"]
        .as_str()
        .unwrap()
        .starts_with("analytic"));
    assert!(v["rows"][0]["mem_source"]
        .as_str()
        .unwrap()
        .starts_with("analytic"));
}

#[test]
fn bad_queries_exit_2() {
    let cases: [(&[&str], &str); 7] = [
        (&["--gpu", "gtx-9090", "--model", "llama-7b"], "unknown GPU"),
        (&["--gpu", "t4", "--model", "llama-999b"], "unknown model"),
        (
            &["--gpu", "t4", "--model", "llama-7b", "--batch-sizes", "0,1"],
            "batch",
        ),
        (
            &["--gpu", "t4", "--model", "llama-7b", "--seq-len", "0"],
            "seq",
        ),
        (
            &["--gpu", "v100x16", "--model", "llama-7b", "--dtype", "bf16"],
            "cannot train in bf16",
        ),
        (
            &["--gpu", "t4", "--model", "llama-7b", "--dtype", "bf16"],
            "cannot train in bf16",
        ),
        (
            &["--gpu", "p40", "--model", "llama-7b", "--dtype", "bf16"],
            "cannot train in bf16",
        ),
    ];
    for (args, want) in cases {
        let o = run_command("predict", args);
        let (code, err) = (o.code, o.stderr);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
