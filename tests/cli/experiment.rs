//! `cephalo experiment` end to end on a small study: its CSV equals the
//! library called directly, its figures exist at their sizes, shards
//! merged equal one run byte for byte, and malformed specs are refused
//! before any work, naming the field.

use crate::common::{json_of, run, run_with_env, scratch, write, Out, HANG_LIMIT};
use std::path::Path;

pub const SPEC: &str = r#"
name = "small"
title = "A small study"
description = "Two GPUs, two batches, three planners."
profiles = "calibrated"

[sweep]
gpus = ["a100-80gb,l4"]
models = ["gpt-1.3b"]
global_batches = [8, 16]
planners = ["cephalo", "fsdp", "pipeline-hetero"]
timeline = true

[[figure]]
kind = "bars"
x = "global_batch"
y = "samples_per_s"
file = "bars"
title = "Small bars"

[[figure]]
kind = "lines"
x = "global_batch"
y = "iteration_ms"
file = "lines"

[[figure]]
kind = "time"
file = "time"

[[figure]]
kind = "memory"
workload = 1
file = "memory"

[[figure]]
kind = "gantt"
planners = ["fsdp", "cephalo"]
file = "gantt"
"#;

/// `experiment run NAME` with specs in `specs` and results in `results`.
/// `experiment merge small` of the specs in `specs` into `results`.
fn merge_in(specs: &Path, results: &Path) -> Out {
    run(&[
        "experiment",
        "merge",
        "small",
        "--dir",
        specs.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ])
}

fn run_in(specs: &Path, results: &Path, extra: &[&str]) -> Out {
    let mut a = vec![
        "experiment",
        "run",
        "small",
        "--dir",
        specs.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    run(&a)
}

/// Width and height of a PNG (its IHDR chunk).
fn png_size(p: &Path) -> (u32, u32) {
    let b = std::fs::read(p).unwrap();
    assert_eq!(&b[1..4], b"PNG", "{} is not a PNG", p.display());
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

#[test]
fn a_small_experiment_runs_end_to_end() {
    let specs = scratch("exp-specs");
    write(specs.join("small.toml"), SPEC);
    let one = scratch("exp-one");
    let o = run_in(&specs, &one, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let out = one.join("small");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<sim::experiment::ResultRow> = r.deserialize().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 2 * 3, "two workloads x three planners");
    // The CSV holds what the library says for the same workload.
    let predictor = sim::perfmodel::Calibrated::builtin();
    for row in &rows {
        let cluster = sim::cluster::Cluster::from_gpu_list(
            "a100-80gb,l4",
            "t",
            sim::gpu::GpuCatalog::builtin(),
        )
        .unwrap();
        let spec = sim::session::WorkloadSpec {
            cluster,
            model: sim::model::ModelCatalog::builtin()
                .get("gpt-1.3b")
                .unwrap()
                .clone(),
            global_batch: row.global_batch,
            seq_len: None,
            dtype: sim::precision::NumFormat::Fp16,
            options: sim::cost::CostOptions::default(),
        };
        let empty = sim::profile::ProfileSet::new();
        let costs = sim::session::build_workload(&spec, &empty, &predictor).unwrap();
        let pl = sim::planner::registry::by_name(&row.planner, "t").unwrap();
        let opts = sim::planner::PlannerOptions {
            model_key: Some("gpt-1.3b".into()),
            ..Default::default()
        };
        let got = sim::session::plan_and_simulate(
            &costs,
            &empty,
            pl.as_ref(),
            &opts,
            &sim::strategy::StrategySpec::NONE,
        )
        .unwrap();
        assert_eq!(
            row.iteration_ms,
            Some(got.report.iteration_ms),
            "{}",
            row.planner
        );
        assert_eq!(row.oom, got.report.oom);
        assert_eq!(row.strategy, got.planned.plan.label());
    }
    // Figures at their sizes, with their titles.
    for (f, size) in [
        ("bars", (1200, 700)),
        ("lines", (1200, 700)),
        ("time", (1400, 750)),
        ("memory", (1400, 750)),
    ] {
        let png = out.join(format!("{f}.png"));
        assert_eq!(png_size(&png), size, "{f}");
        assert!(
            std::fs::metadata(&png).unwrap().len() > 10_000,
            "{f} is nearly empty"
        );
        assert!(out.join(format!("{f}.svg")).is_file());
    }
    let (w, h) = png_size(&out.join("gantt.png"));
    assert_eq!(w, 1500);
    assert!(h >= 400, "{h}");
    let svg = std::fs::read_to_string(out.join("bars.svg")).unwrap();
    assert!(
        svg.contains("Small bars") && svg.contains("cephalo"),
        "bars.svg lacks its title or legend"
    );
    for f in ["spec.toml", "version.txt", "gpus.csv", "timeline.csv"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("spec.toml")).unwrap(),
        SPEC
    );
    let report = std::fs::read_to_string(one.join("REPORT.md")).unwrap();
    assert!(report.contains("## A small study"), "{report}");
    assert!(report.contains("small/bars.png") && report.contains("small/gantt.png"));
    assert!(report.contains("calibrated analytic model"), "{report}");

    // Shards 1/2 and 2/2, merged, equal the single run byte for byte.
    let parts = scratch("exp-parts");
    for k in ["1/2", "2/2"] {
        let o = run_in(&specs, &parts, &["--shard", k]);
        assert_eq!(o.code, 0, "{k}: {}", o.stderr);
    }
    assert!(
        !parts.join("small/results.csv").exists(),
        "a shard writes only its part"
    );
    let m = merge_in(&specs, &parts);
    assert_eq!(m.code, 0, "{}", m.stderr);
    for f in ["results.csv", "gpus.csv", "timeline.csv"] {
        let a = std::fs::read(out.join(f)).unwrap();
        let b = std::fs::read(parts.join("small").join(f)).unwrap();
        assert!(a == b, "{f} differs between one run and merged shards");
    }
    // `--shard auto` takes K/N from a Slurm job array or a Kubernetes
    // Indexed Job: the same parts, merged to the same bytes; off a terminal
    // progress goes to stderr as lines (every step with a period of 0).
    let auto = scratch("exp-auto");
    let arg = |k: &str| -> Vec<String> {
        let mut a: Vec<String> = ["experiment", "run", "small", "--dir"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(specs.to_str().unwrap().into());
        a.push("--results".into());
        a.push(auto.to_str().unwrap().into());
        a.push("--shard".into());
        a.push(k.into());
        a
    };
    let slurm = [
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_MIN", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "2"),
        ("CEPHALO_PROGRESS_S", "0"),
    ];
    let o = run_with_env(&arg("auto"), &slurm, HANG_LIMIT);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(auto.join("small/shard-1-of-2").is_dir(), "{}", o.stderr);
    assert!(
        o.stderr.contains("small: 1/1 workloads (100%)"),
        "{}",
        o.stderr
    );
    let k8s = [("JOB_COMPLETION_INDEX", "1"), ("JOB_COMPLETIONS", "2")];
    let o = run_with_env(&arg("auto"), &k8s, HANG_LIMIT);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(auto.join("small/shard-2-of-2").is_dir());
    let o = run_with_env(&arg("auto"), &[], HANG_LIMIT);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("neither is set"), "{}", o.stderr);
    let m = merge_in(&specs, &auto);
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert!(
        std::fs::read(out.join("results.csv")).unwrap()
            == std::fs::read(auto.join("small/results.csv")).unwrap(),
        "shards by --shard auto differ from one run"
    );
    // A merge with a shard missing names it and the command that makes it;
    // a study runs from the path of its spec too.
    let half = scratch("exp-half");
    let spec_path = specs.join("small.toml");
    let o = run(&[
        "experiment",
        "run",
        spec_path.to_str().unwrap(),
        "--results",
        half.to_str().unwrap(),
        "--shard",
        "1/2",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(half.join("small/shard-1-of-2").is_dir());
    let m = run(&[
        "experiment",
        "merge",
        spec_path.to_str().unwrap(),
        "--results",
        half.to_str().unwrap(),
    ]);
    assert_eq!(m.code, 2, "{}", m.stderr);
    assert!(
        m.stderr.contains("missing shard-2-of-2")
            && m.stderr
                .contains("cephalo experiment run small --shard 2/2"),
        "{}",
        m.stderr
    );
    // And a second run gives the same bytes.
    let again = scratch("exp-again");
    assert_eq!(run_in(&specs, &again, &[]).code, 0);
    assert!(
        std::fs::read(out.join("results.csv")).unwrap()
            == std::fs::read(again.join("small/results.csv")).unwrap()
    );
}

#[test]
fn malformed_specs_are_refused_before_any_work() {
    let cases: [(&str, &str, &str); 6] = [
        (
            "planners = [\"cephalo\", \"fsdp\", \"pipeline-hetero\"]",
            "planners = [\"cephalo\", \"warp-drive\"]",
            "sweep.planners[1]",
        ),
        ("models = [\"gpt-1.3b\"]", "models = []", "sweep.models"),
        ("y = \"samples_per_s\"", "y = \"happiness\"", "figure[0].y"),
        ("kind = \"bars\"", "kind = \"pie\"", "figure[0].kind"),
        (
            "gpus = [\"a100-80gb,l4\"]",
            "clusters = [\"bad.toml\"]",
            "z100",
        ),
        (
            "global_batches = [8, 16]",
            "global_batches = [8, 16]\nwhatever = 3",
            "whatever",
        ),
    ];
    for (i, (from, to, field)) in cases.iter().enumerate() {
        let specs = scratch(&format!("exp-bad-{i}"));
        write(
            specs.join("bad.toml"),
            "[[nodes]]\ngpus = [ { type = \"z100\", count = 2 } ]\n",
        );
        assert!(SPEC.contains(from), "{from}");
        write(specs.join("small.toml"), &SPEC.replace(from, to));
        let results = scratch(&format!("exp-bad-out-{i}"));
        let o = run_in(&specs, &results, &[]);
        assert_eq!(o.code, 2, "{field}: {}", o.stderr);
        assert!(
            o.stderr.contains(field),
            "want `{field}` named: {}",
            o.stderr
        );
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        assert!(!results.join("small").exists(), "{field}: work started");
    }
}

/// A study sweeps strategy pins and memory policies like any other axis:
/// every case a row with its pins and policy, each row the plan `plan`
/// gives with the same flags, and a figure split by strategy; a malformed
/// pin is refused naming its entry before any work.
#[test]
fn a_study_sweeps_strategies_and_memory_policies() {
    let specs = scratch("exp-strategies");
    let spec = SPEC
        .replace(
            "planners = [\"cephalo\", \"fsdp\", \"pipeline-hetero\"]",
            "planners = [\"fsdp\"]\nstrategies = [\"\", \"checkpointing=full attention=eager\"]\nmem_policies = [\"physical\", \"0.5\"]",
        )
        .replace("global_batches = [8, 16]", "global_batches = [8]")
        .replace("kind = \"lines\"\nx = \"global_batch\"", "kind = \"bars\"\nx = \"mem_policy\"\nseries = \"strategy\"");
    write(specs.join("small.toml"), &spec);
    let out = scratch("exp-strategies-out");
    let o = run_in(&specs, &out, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let csv = std::fs::read_to_string(out.join("small/results.csv")).unwrap();
    let mut r = csv::Reader::from_reader(csv.as_bytes());
    let rows: Vec<sim::experiment::ResultRow> = r.deserialize().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 4, "two strategies x two memory policies");
    let cases: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.pins.as_str(), r.mem_policy.as_str()))
        .collect();
    assert_eq!(
        cases,
        [
            ("", "physical"),
            ("", "0.5"),
            ("checkpointing=full attention=eager", "physical"),
            ("checkpointing=full attention=eager", "0.5")
        ]
    );
    for row in &rows {
        let mut args = vec![
            "--planner",
            "fsdp",
            "--gpus",
            "a100-80gb,l4",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "8",
        ];
        if !row.pins.is_empty() {
            args.extend(["--checkpointing", "full", "--attention", "eager"]);
        }
        if row.mem_policy != "physical" {
            args.extend(["--mem-fraction", "0.5"]);
        }
        let p = json_of("plan", &args);
        assert!(
            row.strategy
                .contains(p["strategy"]["checkpointing"].as_str().unwrap()),
            "{row:?}"
        );
        assert_eq!(p["simulated"]["oom"], row.oom, "{row:?}");
        if !row.oom {
            let b = p["simulated"]["samples_per_s"].as_f64().unwrap();
            let a = row.samples_per_s.unwrap();
            assert!((a - b).abs() < 1e-9 * b, "{row:?}: {a} vs {b}");
        }
    }
    assert!(out.join("small/lines.png").exists());
    write(
        specs.join("small.toml"),
        &spec.replace(
            "checkpointing=full attention=eager",
            "checkpointing=sometimes",
        ),
    );
    let bad = scratch("exp-strategies-bad");
    let o = run_in(&specs, &bad, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("sweep.strategies[1]"), "{}", o.stderr);
}

/// A study whose workloads are a list of cases (CSV or JSONL, a sampled
/// design space) runs exactly those cases on every cluster, each row with
/// its case's model, batch, strategy and memory policy; the two formats
/// give the same results; a bad case names its file and line before any
/// work; a cases list next to a product list is refused.
#[test]
fn a_study_runs_a_list_of_cases() {
    let specs = scratch("exp-cases");
    let spec = SPEC
        .replace(
            "models = [\"gpt-1.3b\"]\nglobal_batches = [8, 16]",
            "cases = \"cases.csv\"",
        )
        .replace(
            "planners = [\"cephalo\", \"fsdp\", \"pipeline-hetero\"]",
            "planners = [\"fsdp\"]",
        );
    assert!(spec.contains("cases = "), "{spec}");
    write(specs.join("small.toml"), &spec);
    write(
        specs.join("cases.csv"),
        "model,global_batch,seq_len,dtype,strategy,mem_policy\n\
         gpt-1.3b,8,,,,\n\
         gpt-1.3b,16,1024,bf16,checkpointing=full,0.75\n\
         llama2-7b,8,,,sharding=full attention=flash,\n",
    );
    let out = scratch("exp-cases-out");
    let o = run_in(&specs, &out, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let read = |dir: &Path| -> Vec<sim::experiment::ResultRow> {
        let csv = std::fs::read_to_string(dir.join("small/results.csv")).unwrap();
        csv::Reader::from_reader(csv.as_bytes())
            .deserialize()
            .map(|x| x.unwrap())
            .collect()
    };
    let rows = read(&out);
    let got: Vec<(&str, u32, u32, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.model.as_str(),
                r.global_batch,
                r.seq_len,
                r.dtype.as_str(),
                r.pins.as_str(),
                r.mem_policy.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("gpt-1.3b", 8, 512, "fp16", "", "physical"),
            ("gpt-1.3b", 16, 1024, "bf16", "checkpointing=full", "0.75"),
            (
                "llama2-7b",
                8,
                4096,
                "fp16",
                "sharding=full attention=flash",
                "physical"
            ),
        ]
    );
    // The same cases as JSONL: the same results.
    write(
        specs.join("small.toml"),
        &spec.replace("cases.csv", "cases.jsonl"),
    );
    write(
        specs.join("cases.jsonl"),
        "{\"model\": \"gpt-1.3b\", \"global_batch\": 8}\n\
         {\"model\": \"gpt-1.3b\", \"global_batch\": 16, \"seq_len\": 1024, \"dtype\": \"bf16\", \"strategy\": \"checkpointing=full\", \"mem_policy\": \"0.75\"}\n\
         \n\
         {\"model\": \"llama2-7b\", \"global_batch\": 8, \"strategy\": \"sharding=full attention=flash\"}\n",
    );
    let out2 = scratch("exp-cases-out2");
    let o = run_in(&specs, &out2, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(read(&out2), rows);
    // A bad case: file and line named, nothing run.
    write(
        specs.join("cases.jsonl"),
        "{\"model\": \"gpt-1.3b\", \"global_batch\": 8}\n{\"model\": \"gpt-9t\", \"global_batch\": 8}\n",
    );
    let bad = scratch("exp-cases-bad");
    let o = run_in(&specs, &bad, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("cases.jsonl") && o.stderr.contains("line 2"),
        "{}",
        o.stderr
    );
    assert!(!bad.join("small").exists());
    // Cases next to a product list.
    write(
        specs.join("small.toml"),
        &spec.replace(
            "cases = \"cases.csv\"",
            "cases = \"cases.csv\"\nmodels = [\"gpt-1.3b\"]",
        ),
    );
    let o = run_in(&specs, &bad, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("sweep.models"), "{}", o.stderr);
}

/// A cost figure over a cluster with an unpriced GPU is refused naming
/// the figure and the GPU, instead of a figure silently empty.
#[test]
fn a_cost_figure_needs_every_price() {
    let specs = scratch("exp-unpriced");
    let spec = SPEC
        .replace("gpus = [\"a100-80gb,l4\"]", "gpus = [\"a100-80gb,p40\"]")
        .replace("y = \"samples_per_s\"", "y = \"usd_per_million_tokens\"");
    write(specs.join("small.toml"), &spec);
    let results = scratch("exp-unpriced-out");
    let o = run_in(&specs, &results, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("figure[0].y") && o.stderr.contains("p40") && o.stderr.contains("price"),
        "{}",
        o.stderr
    );
    // The same study with every GPU priced runs.
    write(
        specs.join("small.toml"),
        &SPEC.replace("y = \"samples_per_s\"", "y = \"usd_per_million_tokens\""),
    );
    let o = run_in(&specs, &results, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
}

/// A `validate --format json` output with the fields a study reads.
fn validate_json(pred: f64, meas: f64) -> String {
    format!(
        r#"{{"format": "cephalo-validate/1", "predicted_iteration_ms": {pred}, "measured_iteration_ms": {meas},
            "measurement_disturbed": false,
            "ranks": [{{"compute_ms": {{"predicted": {}, "measured": {}}}}}, {{"compute_ms": {{"predicted": {}, "measured": {}}}}}]}}"#,
        pred * 0.6,
        meas * 0.6,
        pred * 0.7,
        meas * 0.65
    )
}

#[test]
fn a_study_of_measurements_draws_predicted_against_measured() {
    let specs = scratch("exp-val-specs");
    write(specs.join("run-a.json"), &validate_json(100.0, 110.0));
    write(specs.join("run-b.json"), &validate_json(200.0, 190.0));
    let spec = r#"
name = "small"
title = "Measured"
profiles = "calibrated"
validations = ["run-a.json", "run-b.json"]
[[figure]]
kind = "validation"
file = "scatter"
"#;
    write(specs.join("small.toml"), spec);
    let results = scratch("exp-val-out");
    let o = run_in(&specs, &results, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let csv = std::fs::read_to_string(results.join("small/validation.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 3, "{csv}");
    assert!(csv.contains("run-a,") && csv.contains("compute rank 1"));
    assert!(results.join("small/scatter.png").is_file());
    let report = std::fs::read_to_string(results.join("REPORT.md")).unwrap();
    assert!(report.contains("2 measured runs"), "{report}");
    // The iteration errors the paragraph states: -9.1% and +5.3%.
    assert!(
        report.contains("-9.1%") && report.contains("+5.3%"),
        "{report}"
    );
    // A missing file is refused before any work, naming the field.
    write(
        specs.join("small.toml"),
        &spec.replace("run-b.json", "no-such.json"),
    );
    let bad = scratch("exp-val-bad");
    let o = run_in(&specs, &bad, &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("validations[1]"), "{}", o.stderr);
}

/// A study sweeps 3D shape pins, collective algorithms and measured
/// collective tables like any other axis: every combination a row with
/// its values; a pinned shape runs on `megatron` (its plan has the shape)
/// and the data-parallel planner's row says why it did not run; each
/// row equals `plan` with the same flags (`--tp`, `--comm-algo`,
/// `--comm-profile`); a bad shape or algorithm is refused naming its
/// entry before any work.
#[test]
fn a_study_sweeps_shapes_and_communication() {
    let specs = scratch("exp-shapes");
    let node =
        "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"a100-80gb\", count = 4 }]\n";
    write(
        specs.join("two.toml"),
        &format!("[network]\nnic_gbit_s = 25\n{node}{node}"),
    );
    write(specs.join("ag.log"), &crate::comm::nccl_log(8, 1.5));
    let spec = SPEC
        .replace("gpus = [\"a100-80gb,l4\"]", "clusters = [\"two.toml\"]")
        .replace(
            "planners = [\"cephalo\", \"fsdp\", \"pipeline-hetero\"]",
            "planners = [\"fsdp\", \"megatron\"]\nshapes = [\"\", \"tp=4 schedule=1f1b\"]\ncomm_algos = [\"auto\", \"ring\"]\ncomm_profiles = [\"\", \"all-gather=ag.log\"]",
        )
        .replace("global_batches = [8, 16]", "global_batches = [16]")
        .replace("timeline = true", "")
        .replace(
            "kind = \"lines\"\nx = \"global_batch\"",
            "kind = \"bars\"\nx = \"comm_profile\"\nseries = \"shape\"",
        );
    let spec = spec[..spec.find("[[figure]]\nkind = \"time\"").unwrap()].to_string();
    write(specs.join("small.toml"), &spec);
    let out = scratch("exp-shapes-out");
    let o = run_in(&specs, &out, &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let csv = std::fs::read_to_string(out.join("small/results.csv")).unwrap();
    let rows: Vec<sim::experiment::ResultRow> = csv::Reader::from_reader(csv.as_bytes())
        .deserialize()
        .map(|x| x.unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        2 * 2 * 2 * 2,
        "algos x tables x shapes x planners"
    );
    let combos: std::collections::BTreeSet<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.comm_algo.as_str(),
                r.comm_profile.as_str(),
                r.shape.as_str(),
                r.planner.as_str(),
            )
        })
        .collect();
    assert_eq!(combos.len(), 16, "{combos:?}");
    for row in &rows {
        let pinned = !row.shape.is_empty();
        if pinned && row.planner == "fsdp" {
            assert!(row.error.contains("does not search a pinned tp"), "{row:?}");
            continue;
        }
        if pinned {
            // The pinned shape, not the one megatron picks unpinned here
            // (TP 2, interleaved).
            assert!(
                row.strategy.contains("3d tp4") && row.strategy.contains("1f1b"),
                "{row:?}"
            );
        }
        let mut args = vec![
            "--planner".to_string(),
            row.planner.clone(),
            "--cluster".into(),
            specs.join("two.toml").display().to_string(),
            "--model".into(),
            "gpt-1.3b".into(),
            "--global-batch".into(),
            "16".into(),
            "--comm-algo".into(),
            row.comm_algo.clone(),
        ];
        if pinned {
            args.extend(["--tp", "4", "--pp-schedule", "1f1b"].map(String::from));
        }
        if !row.comm_profile.is_empty() {
            args.push("--comm-profile".into());
            args.push(format!("all-gather={}", specs.join("ag.log").display()));
        }
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let p = json_of("plan", &a);
        assert_eq!(p["simulated"]["oom"], row.oom, "{row:?}");
        let b = p["simulated"]["iteration_ms"].as_f64().unwrap();
        let got = row.iteration_ms.unwrap();
        assert!((got - b).abs() < 1e-9 * b, "{row:?}: {got} vs {b}");
    }
    // The measured table changes the FSDP rows (slow all-gathers).
    let fsdp = |table: &str| {
        rows.iter()
            .find(|r| {
                r.planner == "fsdp"
                    && r.shape.is_empty()
                    && r.comm_algo == "auto"
                    && r.comm_profile == table
            })
            .and_then(|r| r.iteration_ms)
            .unwrap()
    };
    assert!(
        rows.iter().any(|r| r.planner == "megatron"
            && r.shape.is_empty()
            && !r.strategy.contains("3d tp4")),
        "unpinned megatron picks another shape"
    );
    assert!(
        fsdp("all-gather=ag.log") > fsdp(""),
        "{} vs {}",
        fsdp("all-gather=ag.log"),
        fsdp("")
    );
    assert!(out.join("small/lines.png").exists());
    for (from, to, field) in [
        ("\"tp=4 schedule=1f1b\"", "\"tp=2 dp=2\"", "sweep.shapes[1]"),
        ("\"ring\"", "\"star\"", "sweep.comm_algos[1]"),
        (
            "all-gather=ag.log",
            "all-gather=missing.log",
            "sweep.comm_profiles[1]",
        ),
    ] {
        write(specs.join("small.toml"), &spec.replace(from, to));
        let bad = scratch("exp-shapes-bad");
        let o = run_in(&specs, &bad, &[]);
        assert_eq!(o.code, 2, "{field}: {}", o.stderr);
        assert!(o.stderr.contains(field), "{field}: {}", o.stderr);
        assert!(!bad.join("small").exists(), "{field}: work started");
    }
}
