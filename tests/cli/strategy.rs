//! Strategy flags end to end: on `simulate`, `plan` and `compare`; the
//! strategy written by `plan --out` and read back by `simulate --plan`; the
//! native planner's per-strategy table; bad strategy input exiting 2 with
//! the flag named (issue 9). Built-in catalogs only (no profile files).

use crate::common::{run, tmp, write, Out};
use serde_json::Value;

/// Two nodes of two GPUs (a hybrid shard group of 2 by default). Written
/// once per test binary: tests run in parallel, and a rewrite truncates
/// the file under a reader.
fn two_nodes() -> String {
    static ONCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        write(
            tmp("cli-strategy-two-nodes.toml"),
            "name = \"two\"\n[network]\nbw_gbit_s = 25\n[[nodes]]\ngpus = [ { type = \"a10g\", count = 2 } ]\n[[nodes]]\ngpus = [ { type = \"a10g\", count = 2 } ]\n",
        )
    })
    .clone()
}

/// `cephalo CMD` for GPT-1.3B at global batch 32 on [`two_nodes`], plus
/// `extra`.
fn on_two_nodes(cmd: &str, extra: &[&str]) -> Out {
    let c = two_nodes();
    let mut a = vec![
        cmd,
        "--cluster",
        &c,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "32",
    ];
    a.extend_from_slice(extra);
    run(&a)
}

const SIM: [&str; 10] = [
    "simulate",
    "--gpus",
    "a6000,a6000,l4,l4",
    "--model",
    "gpt-1.3b",
    "--global-batch",
    "16",
    "--batch",
    "4,4,4,4",
    "--format",
];

fn sim(extra: &[&str]) -> Out {
    let mut a = SIM.to_vec();
    a.push("json");
    a.extend(extra);
    run(&a)
}

#[test]
fn strategy_flags_reach_the_report() {
    let o = sim(&[
        "--microbatches",
        "2,2,2,2",
        "--sharding",
        "grad-op",
        "--accumulation",
        "no-sync",
        "--checkpointing",
        "every:2",
        "--param-dtype",
        "bf16",
        "--reduce-dtype",
        "bf16",
        "--attention",
        "flash",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["format"], "cephalo-report/2");
    let s = &j["strategy"];
    assert_eq!(s["sharding"], "grad-op");
    assert_eq!(s["accumulation"], "no-sync");
    assert_eq!(s["checkpointing"], "every:2");
    assert_eq!(s["param_dtype"], "bf16");
    assert_eq!(s["attention"], "flash");
    assert!(j["gpus"][0]["compute_source"]
        .as_str()
        .unwrap()
        .contains("flash"));
    // Defaults: Cephalo's trainer, said in the table; with no profile the
    // fused attention kernel, as PyTorch's SDPA picks it.
    let t = run(&[
        "simulate",
        "--gpus",
        "a6000,a6000",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--batch",
        "4,4",
    ]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout
            .contains("strategy: full layered ckpt=full offload=activations p=fp32 r=fp32 flash"),
        "{}",
        t.stdout
    );
    assert!(t.stdout.contains("collectives per GPU:"), "{}", t.stdout);
}

#[test]
fn plan_out_records_the_strategy_and_simulate_reads_it_back() {
    let c = two_nodes();
    let out = tmp("cli-strategy-hsdp-plan.json");
    let o = on_two_nodes(
        "plan",
        &[
            "--planner",
            "hsdp",
            "--out",
            out.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let planned: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(planned["strategy"]["sharding"], "hybrid");
    assert_eq!(planned["strategy"]["shard_group"], 2);
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(file["strategy"], planned["strategy"]);
    let base = [
        "simulate",
        "--cluster",
        &c,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "32",
        "--plan",
        out.to_str().unwrap(),
        "--format",
        "json",
    ];
    let s = run(&base);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let r: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(r["strategy"], planned["strategy"]);
    let a = r["iteration_ms"].as_f64().unwrap();
    let b = planned["simulated"]["iteration_ms"].as_f64().unwrap();
    assert!((a - b).abs() <= 1e-9 * b, "{a} vs {b}");
    // Hybrid sharding all-reduces across the two groups.
    assert!(r["collective_summary"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["kind"] == "all_reduce"));
    // A flag that agrees is fine; one that disagrees exits 2 naming it.
    let mut agree = base.to_vec();
    agree.extend(["--sharding", "hybrid"]);
    assert_eq!(run(&agree).code, 0);
    let mut clash = base.to_vec();
    clash.extend(["--sharding", "full"]);
    let e = run(&clash);
    assert_eq!(e.code, 2, "{}", e.stderr);
    assert!(
        e.stderr
            .contains("--sharding: field `sharding`: full disagrees with")
            && e.stderr.contains("hsdp-plan.json")
            && e.stderr.contains("hybrid"),
        "{}",
        e.stderr
    );
}

#[test]
fn native_planner_reports_every_strategy_it_considered() {
    let o = on_two_nodes("plan", &["--planner", "cephalo", "--format", "json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    let considered = j["considered"].as_array().unwrap();
    // Full and hybrid sharding x 3 accumulations x 4 checkpointing levels.
    assert_eq!(considered.len(), 24, "{considered:?}");
    assert!(considered
        .iter()
        .any(|c| c["strategy"]["sharding"] == "hybrid"));
    assert!(considered
        .iter()
        .any(|c| c["strategy"]["accumulation"] == "no-sync"));
    // Fastest first, and the chosen plan is the fastest that fits.
    let best = considered[0]["iteration_ms"].as_f64().unwrap();
    let chosen = j["simulated"]["iteration_ms"].as_f64().unwrap();
    assert!(chosen <= best * (1.0 + 1e-9), "{chosen} vs {best}");
    assert_eq!(j["strategy"], considered[0]["strategy"]);
    // A pinned axis restricts the search.
    let o = on_two_nodes(
        "plan",
        &[
            "--planner",
            "cephalo",
            "--format",
            "json",
            "--accumulation",
            "layered",
            "--checkpointing",
            "full",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["considered"].as_array().unwrap().len(), 2);
    assert_eq!(j["strategy"]["accumulation"], "layered");
    // The table says it too.
    let t = on_two_nodes("plan", &["--planner", "cephalo"]);
    assert!(
        t.stdout.contains("best plan per strategy considered"),
        "{}",
        t.stdout
    );
}

#[test]
fn compare_shows_each_rows_strategy() {
    let o = on_two_nodes("compare", &["--format", "json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let rows: Vec<Value> = v["rows"].as_array().unwrap().clone();
    let strategy = |name: &str| {
        rows.iter().find(|r| r["planner"] == name).unwrap()["strategy"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        strategy("fsdp").starts_with("full "),
        "{}",
        strategy("fsdp")
    );
    assert!(strategy("zero2").starts_with("grad-op "));
    assert!(strategy("ddp").starts_with("none "));
    assert!(strategy("hsdp").starts_with("hybrid:2 "));
    assert!(strategy("fsdp-ga").starts_with("full layered"));
    // The two FSDP flavours no longer tie: gathers per micro-batch cost.
    let time = |name: &str| {
        rows.iter().find(|r| r["planner"] == name).unwrap()["iteration_ms"]
            .as_f64()
            .unwrap()
    };
    assert_ne!(time("fsdp"), time("fsdp-ga"));
    // A pin applies to the planners that choose that axis.
    let o = on_two_nodes("compare", &["--format", "csv", "--checkpointing", "none"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for line in o.stdout.lines().skip(1) {
        if !line.starts_with("cephalo-compat") {
            assert!(line.contains("ckpt=none"), "{line}");
        }
    }
}

/// Bad strategy input exits 2 and names the flag (issue 9, last bullet).
#[test]
fn bad_strategy_input_exits_2_naming_the_flag() {
    let c = two_nodes();
    let cl = &c;
    let base = [
        "simulate",
        "--cluster",
        cl,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--batch",
        "4,4,4,4",
    ];
    let case = |extra: &[&str], want: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        let o = run(&a);
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        for w in want {
            assert!(o.stderr.contains(w), "{extra:?}: `{w}` not in {}", o.stderr);
        }
    };
    case(
        &["--sharding", "hybrid", "--shard-group", "3"],
        &["--shard-group", "divides"],
    );
    case(
        &["--shard-group", "2"],
        &["--shard-group", "hybrid sharding only"],
    );
    case(
        &["--checkpointing", "every:0"],
        &["--checkpointing", "K >= 1"],
    );
    case(&["--checkpointing", "sometimes"], &["--checkpointing"]);
    case(&["--sharding", "zero7"], &["--sharding", "zero7"]);
    case(&["--accumulation", "later"], &["--accumulation"]);
    case(&["--param-dtype", "int4"], &["--param-dtype"]);
    case(&["--attention", "sparse"], &["--attention"]);
    // Offload with no host memory on a node.
    let nohost = write(
        tmp("cli-strategy-nohost.toml"),
        "[[nodes]]\nhost_mem_gib = 0\ngpus = [ { type = \"a10g\", count = 2 } ]\n",
    );
    let o = run(&[
        "simulate",
        "--cluster",
        &nohost,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--batch",
        "4,4",
        "--offload",
        "optimizer",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--offload") && o.stderr.contains("host_mem_gib = 0"),
        "{}",
        o.stderr
    );
    // Nodes of different sizes need an explicit hybrid group.
    let uneven = write(
        tmp("cli-strategy-uneven.toml"),
        "[[nodes]]\ngpus = [ { type = \"a10g\", count = 3 } ]\n[[nodes]]\ngpus = [ { type = \"l4\" } ]\n",
    );
    let o = run(&[
        "plan",
        "--cluster",
        &uneven,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--planner",
        "hsdp",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--shard-group"), "{}", o.stderr);
}
