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
    let rows: Vec<Value> = serde_json::from_str(&o.stdout).unwrap();
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
