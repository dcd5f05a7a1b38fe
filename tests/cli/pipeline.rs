//! Pipeline plans end to end: `plan --planner pipeline-hetero --out` read
//! back by `simulate --plan` with the stages, compare rows with their
//! shape, hand-edited plan files refused naming the field (exit 2), and a
//! workload no pipeline can hold reported as infeasible with its stage.

use crate::common::{run, tmp, write};
use serde_json::Value;

const WORKLOAD: [&str; 8] = [
    "--gpus",
    "a100-80gb,a100-80gb,l4,l4",
    "--model",
    "gpt-1.3b",
    "--global-batch",
    "32",
    "--dtype",
    "fp16",
];

fn with(cmd: &str, extra: &[&str]) -> Vec<String> {
    std::iter::once(cmd)
        .chain(WORKLOAD)
        .chain(extra.iter().copied())
        .map(str::to_string)
        .collect()
}

#[test]
fn pipeline_plan_round_trips_through_simulate() {
    let path = tmp("cli-pipeline-plan.json");
    let p = path.to_str().unwrap();
    let o = run(&with(
        "plan",
        &[
            "--planner",
            "pipeline-hetero",
            "--format",
            "json",
            "--out",
            p,
        ],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let planned: Value = serde_json::from_str(&o.stdout).unwrap();
    let stages = planned["pipeline"]["stages"].as_array().unwrap();
    assert!(!stages.is_empty());
    let blocks: u64 = stages
        .iter()
        .map(|s| s["last_block"].as_u64().unwrap() - s["first_block"].as_u64().unwrap() + 1)
        .sum();
    assert_eq!(blocks, 24, "gpt-1.3b has 24 blocks");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(file["pipeline"]["stages"].is_array(), "{file}");
    let s = run(&with("simulate", &["--plan", p, "--format", "json"]));
    assert_eq!(s.code, 0, "{}", s.stderr);
    let sim: Value = serde_json::from_str(&s.stdout).unwrap();
    let (a, b) = (
        sim["iteration_ms"].as_f64().unwrap(),
        planned["simulated"]["iteration_ms"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-9 * b, "{a} vs {b}");
    assert_eq!(sim["pipeline"]["stages"], planned["pipeline"]["stages"]);
    let t = run(&with("simulate", &["--plan", p]));
    assert!(t.stdout.contains("pipeline: "), "{}", t.stdout);
    assert!(t.stdout.contains("emb+1-"), "{}", t.stdout);
}

#[test]
fn compare_shows_pipeline_rows_with_their_shape() {
    let o = run(&with("compare", &["--format", "json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["format"], "cephalo-compare/2");
    let rows: Vec<Value> = v["rows"].as_array().unwrap().clone();
    for name in ["pipeline", "pipeline-hetero"] {
        let r = rows.iter().find(|r| r["planner"] == name).unwrap();
        let label = r["strategy"].as_str().unwrap();
        assert!(label.starts_with("pipeline "), "{label}");
        assert!(r["samples_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
}

/// A pipeline plan file with `edit` applied must exit 2 naming `field`.
fn refused(edit: impl Fn(&mut Value), field: &str) {
    let good = tmp("cli-pipeline-good.json");
    let o = run(&with(
        "plan",
        &["--planner", "pipeline", "--out", good.to_str().unwrap()],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    edit(&mut v);
    let bad = tmp(&format!(
        "cli-pipeline-bad-{}.json",
        field.replace(['[', ']', '.'], "_")
    ));
    write(&bad, &serde_json::to_string(&v).unwrap());
    let s = run(&with("simulate", &["--plan", bad.to_str().unwrap()]));
    assert_eq!(s.code, 2, "{field}: {}", s.stderr);
    assert!(s.stderr.contains(field), "want {field}: {}", s.stderr);
    assert!(!s.stderr.contains("panicked"), "{}", s.stderr);
}

#[test]
fn bad_pipeline_files_exit_2_naming_the_field() {
    // More stages than blocks.
    refused(
        |v| {
            let s = v["pipeline"]["stages"][0].clone();
            v["pipeline"]["stages"] = Value::Array(vec![s; 25]);
        },
        "pipeline.stages",
    );
    // A stage with no GPU.
    refused(
        |v| v["pipeline"]["stages"][1]["gpus"] = Value::Array(vec![]),
        "pipeline.stages[1].gpus",
    );
    // Blocks that do not add up to the model's.
    refused(
        |v| v["pipeline"]["stages"][0]["blocks"] = Value::from(1),
        "blocks",
    );
    // An unknown schedule and an unknown field.
    refused(
        |v| v["pipeline"]["schedule"] = Value::from("zero-bubble"),
        "zero-bubble",
    );
    refused(
        |v| v["pipeline"]["virtual_stages"] = Value::from(2),
        "virtual_stages",
    );
    // A per-GPU entry that disagrees with the stages.
    refused(|v| v["gpus"][0]["batch"] = Value::from(3), "gpus[0].batch");
    // Megatron's asserts: the parameter gather overlap needs the gradient
    // one and the distributed optimizer.
    refused(
        |v| v["pipeline"]["overlap_param_gather"] = Value::from(true),
        "pipeline.overlap_param_gather",
    );
}

#[test]
fn no_pipeline_fits_is_infeasible_with_the_stage() {
    for planner in ["pipeline", "pipeline-hetero"] {
        let o = run(&[
            "plan",
            "--gpus",
            "t4,t4",
            "--model",
            "llama2-70b",
            "--global-batch",
            "8",
            "--planner",
            planner,
        ]);
        assert_eq!(o.code, 2, "{planner}: {}", o.stderr);
        assert!(o.stderr.contains("infeasible"), "{}", o.stderr);
        assert!(o.stderr.contains("stage "), "{}", o.stderr);
        assert!(o.stderr.contains("GiB over"), "{}", o.stderr);
    }
}

/// Two nodes of 4 A100-80GB on NVSwitch (a 3D cluster).
const HGX: &str = "name = \"hgx2\"\n[network]\nnics = 4\nnic_gbit_s = 200\n[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [ { type = \"a100-80gb\", count = 4 } ]\n[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [ { type = \"a100-80gb\", count = 4 } ]\n";

fn hgx(cmd: &str, extra: &[&str]) -> Vec<String> {
    let cluster = write(tmp("cli-3d-hgx.toml"), HGX);
    [
        cmd,
        "--cluster",
        &cluster,
        "--model",
        "llama2-7b",
        "--seq-len",
        "2048",
        "--dtype",
        "bf16",
        "--global-batch",
        "32",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect()
}

/// `simulate --tp/--pp/...` runs a 3D shape and reports its groups; the
/// `megatron` plan round-trips through `plan --out` and `simulate --plan`.
#[test]
fn three_d_shapes_simulate_and_plans_round_trip() {
    let o = run(&hgx(
        "simulate",
        &[
            "--tp",
            "2",
            "--pp",
            "2",
            "--sequence-parallel",
            "--pp-schedule",
            "interleaved",
            "--format",
            "json",
        ],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r: Value = serde_json::from_str(&o.stdout).unwrap();
    let p = &r["pipeline"];
    assert_eq!(p["schedule"], "interleaved");
    assert_eq!(p["sequence_parallel"], true);
    for st in p["stages"].as_array().unwrap() {
        assert_eq!(st["tp"], 2);
        assert!(st["tp_comm_ms"].as_f64().unwrap() > 0.0, "{st}");
    }
    let trace = tmp("cli-3d-trace.json");
    let table = run(&hgx(
        "simulate",
        &["--tp", "4", "--pp", "2", "--trace", trace.to_str().unwrap()],
    ));
    assert_eq!(table.code, 0, "{}", table.stderr);
    // The trace names each GPU's stage, replica and TP group.
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let names: Vec<String> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("rank 5: ")
            && n.contains("stage 1: blocks 17-32, replica 0 of 1 (TP group ranks 4-7, TP rank 1)")),
        "{names:?}"
    );
    assert!(
        table.stdout.contains("tp comm ms") && table.stdout.contains("3d: 2 stages"),
        "{}",
        table.stdout
    );
    let path = tmp("cli-3d-plan.json");
    let f = path.to_str().unwrap();
    let planned = run(&hgx(
        "plan",
        &["--planner", "megatron", "--format", "json", "--out", f],
    ));
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    let planned: Value = serde_json::from_str(&planned.stdout).unwrap();
    let again = run(&hgx("simulate", &["--plan", f, "--format", "json"]));
    assert_eq!(again.code, 0, "{}", again.stderr);
    let again: Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(again["iteration_ms"], planned["simulated"]["iteration_ms"]);
    // hetero-3d's plan (per-stage TP, FSDP or ZeRO-1 inside stages) too.
    let planned = run(&hgx(
        "plan",
        &["--planner", "hetero-3d", "--format", "json", "--out", f],
    ));
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    let planned: Value = serde_json::from_str(&planned.stdout).unwrap();
    assert_eq!(planned["planner"], "hetero-3d");
    let again = run(&hgx("simulate", &["--plan", f, "--format", "json"]));
    assert_eq!(again.code, 0, "{}", again.stderr);
    let again: Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(again["iteration_ms"], planned["simulated"]["iteration_ms"]);
}

/// `--pipeline-layout` (Megatron's `--pipeline-model-parallel-layout`)
/// places every chunk: 4 chunks on PP 2 are VP 2 under the interleaved
/// schedule, stage 0 holding chunks 0 and 2 (3 + 4 blocks), stage 1 the
/// rest; commas are cosmetic.
#[test]
fn a_pipeline_layout_places_the_chunks() {
    let o = run(&hgx(
        "simulate",
        &[
            "--pp",
            "2",
            "--pipeline-layout",
            "Et*3|t*13,|t*4|t*12L",
            "--format",
            "json",
        ],
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r: Value = serde_json::from_str(&o.stdout).unwrap();
    let p = &r["pipeline"];
    assert_eq!(p["schedule"], "interleaved");
    let stages = p["stages"].as_array().unwrap();
    let blocks: Vec<i64> = stages
        .iter()
        .map(|s| s["blocks"].as_i64().unwrap())
        .collect();
    assert_eq!(blocks, [7, 25]);
    // Stage 0 holds chunks 0 (blocks 1-3) and 2 (17-20), stage 1 chunks 1
    // (4-16) and 3 (21-32).
    assert_eq!(stages[0]["chunks"], serde_json::json!([[1, 3], [17, 20]]));
    assert_eq!(stages[1]["chunks"], serde_json::json!([[4, 16], [21, 32]]));
}

/// Bad 3D shapes exit 2 before simulating, naming the flag or field.
#[test]
fn bad_three_d_shapes_name_the_flag() {
    for (extra, want) in [
        (&["--tp", "3"][..], "--tp"),
        (&["--tp", "8"][..], "spans nodes"),
        (&["--pp", "64"][..], "--pp"),
        (
            &["--tp", "2", "--microbatch-size", "3"][..],
            "--microbatch-size",
        ),
        (
            &["--pp", "2", "--virtual-stages", "2"][..],
            "--virtual-stages",
        ),
        (
            &[
                "--pp",
                "4",
                "--pp-schedule",
                "interleaved",
                "--virtual-stages",
                "3",
            ][..],
            "--virtual-stages",
        ),
        (
            &[
                "--pp",
                "4",
                "--pp-schedule",
                "interleaved",
                "--microbatch-size",
                "8",
            ][..],
            "--microbatch-size",
        ),
        (&["--pp-schedule", "nope"][..], "--pp-schedule"),
        // Megatron asserts SP with --tp-comm-overlap: both flags named.
        (
            &["--tp", "2", "--tp-comm-overlap"][..],
            "`--tp-comm-overlap`: needs --sequence-parallel",
        ),
        (
            &["--pp", "2", "--overlap-param-gather"][..],
            "`--overlap-param-gather`: needs --overlap-grad-reduce",
        ),
        (
            &[
                "--pp",
                "2",
                "--overlap-grad-reduce",
                "--overlap-param-gather",
            ][..],
            "grad-op",
        ),
        (
            &["--pp", "2", "--sharding", "full", "--overlap-grad-reduce"][..],
            "--overlap-grad-reduce",
        ),
        (
            &["--pp", "2", "--rank-order", "dp-tp-pp"][..],
            "--rank-order",
        ),
        (
            &["--pp", "2", "--pipeline-layout", "Et|tL"][..],
            "the model has 32",
        ),
        (
            &["--pp", "2", "--pipeline-layout", "Et*16|t*16Q"][..],
            "`Q` at character 11",
        ),
        (
            &["--pp", "4", "--pipeline-layout", "Et*16|t*16L"][..],
            "PP 4 x VP 1 makes 4",
        ),
    ] {
        let o = run(&hgx("simulate", extra));
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{extra:?}: {}", o.stderr);
    }
}

/// Megatron's overlap knobs and rank order from the command line: the
/// report says which ran (JSON and table), `plan` takes them as pins and
/// its plan file carries them back into `simulate --plan`, and every help
/// text names the framework flag it mirrors.
#[test]
fn overlap_knobs_and_rank_order_are_reported_and_round_trip() {
    let knobs = [
        "--tp",
        "2",
        "--pp",
        "2",
        "--sharding",
        "grad-op",
        "--sequence-parallel",
        "--tp-comm-overlap",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--rank-order",
        "tp-pp-dp",
    ];
    let o = run(&hgx(
        "simulate",
        &[&knobs[..], &["--format", "json"]].concat(),
    ));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r: Value = serde_json::from_str(&o.stdout).unwrap();
    let p = &r["pipeline"];
    for k in [
        "tp_comm_overlap",
        "overlap_grad_reduce",
        "overlap_param_gather",
    ] {
        assert_eq!(p[k], true, "{k}: {p}");
    }
    assert_eq!(p["grad_sync"], "buckets");
    assert_eq!(p["rank_order"], "tp-pp-dp");
    // Stage 0 of TP 2 x PP 2 x DP 2 in tp-pp-dp order: ranks 0, 1, 4, 5.
    assert_eq!(p["stages"][0]["ranks"], serde_json::json!([0, 1, 4, 5]));
    let t = run(&hgx("simulate", &knobs));
    assert!(
        t.stdout.contains(
            "overlap: tp-comm-overlap on, overlap-grad-reduce on, overlap-param-gather on"
        ) && t.stdout.contains("ranks in tp-pp-dp order"),
        "{}",
        t.stdout
    );
    let d = run(&hgx("simulate", &["--tp", "2", "--pp", "2"]));
    assert!(
        d.stdout.contains("overlap: tp-comm-overlap off, overlap-grad-reduce off, overlap-param-gather off; data-parallel gradients reduced after the last backward"),
        "{}",
        d.stdout
    );
    let path = tmp("cli-3d-overlap-plan.json");
    let f = path.to_str().unwrap();
    let planned = run(&hgx(
        "plan",
        &[
            "--planner",
            "megatron",
            "--tp",
            "2",
            "--pp",
            "2",
            "--sharding",
            "grad-op",
            "--overlap-grad-reduce",
            "--overlap-param-gather",
            "on",
            "--rank-order",
            "tp-pp-dp",
            "--format",
            "json",
            "--out",
            f,
        ],
    ));
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["pipeline"]["overlap_grad_reduce"], true, "{file}");
    assert_eq!(file["pipeline"]["overlap_param_gather"], true, "{file}");
    let planned: Value = serde_json::from_str(&planned.stdout).unwrap();
    let again = run(&hgx("simulate", &["--plan", f, "--format", "json"]));
    assert_eq!(again.code, 0, "{}", again.stderr);
    let again: Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(again["iteration_ms"], planned["simulated"]["iteration_ms"]);
    assert_eq!(again["pipeline"]["rank_order"], "tp-pp-dp");
    for cmd in ["simulate", "plan"] {
        let h = run(&[cmd, "--help"]);
        for flag in [
            "`--overlap-grad-reduce`",
            "`--overlap-param-gather`",
            "`--use-tp-pp-dp-mapping`",
        ] {
            assert!(h.stdout.contains(flag), "{cmd} --help lacks {flag}");
        }
    }
}
