//! `validate --from-log`: logs in the shapes torchtitan, llm-foundry
//! (Composer's console logger), DeepSpeed and Megatron-LM print, read into
//! medians after the warm-up and compared with the simulator's prediction;
//! hostile logs exit 2 naming the file and line. Works in builds without
//! the exec feature.

use crate::common::{json_of, run, tmp, write, OLMOE_2X8_H100};
use serde_json::Value;

const WORKLOAD: &[&str] = &[
    "--gpus",
    "a100-80gb,a100-80gb,a100-80gb,a100-80gb",
    "--model",
    "llama2-7b",
    "--global-batch",
    "16",
    "--dtype",
    "bf16",
];

/// Tokens per iteration of [`WORKLOAD`]: 16 samples of 4,096 tokens.
const TOKENS: f64 = 16.0 * 4096.0;

fn from_log(name: &str, log: &str, extra: &[&str]) -> Value {
    let p = write(tmp(name), log);
    json_of(
        "validate",
        &[&["--from-log", p.as_str()][..], WORKLOAD, extra].concat(),
    )
}

fn row<'a>(v: &'a Value, metric: &str) -> &'a Value {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric} row: {v}"))
}

fn measured(v: &Value, metric: &str) -> f64 {
    row(v, metric)["measured"]
        .as_f64()
        .unwrap_or_else(|| panic!("{metric} not measured: {v}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

const TORCHTITAN: &str = "\
[rank0]:[titan] 2025-01-01 12:00:00,000 - root - INFO - Training starts at step 1
[rank0]:[titan] 2025-01-01 12:00:00,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.0000  \x1b[33mgrad_norm:  9.0000  \x1b[36mmemory: 30.00GiB(37.50%)  \x1b[34mtps: 500  \x1b[36mtflops: 20.00  \x1b[35mmfu: 5.00%\x1b[39m
[rank0]:[titan] 2025-01-01 12:00:01,000 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss: 11.0000  \x1b[33mgrad_norm:  5.0000  \x1b[36mmemory: 31.00GiB(38.75%)  \x1b[34mtps: 2,400  \x1b[36mtflops: 100.00  \x1b[35mmfu: 30.00%\x1b[39m
[rank0]:[titan] 2025-01-01 12:00:02,000 - root - INFO - \x1b[31mstep:  3  \x1b[32mloss: 10.0000  \x1b[33mgrad_norm:  4.0000  \x1b[36mmemory: 31.50GiB(39.38%)  \x1b[34mtps: 2,600  \x1b[36mtflops: 110.00  \x1b[35mmfu: 33.00%\x1b[39m
[rank0]:[titan] 2025-01-01 12:00:03,000 - root - INFO - \x1b[31mstep:  4  \x1b[32mloss:  9.0000  \x1b[33mgrad_norm:  3.0000  \x1b[36mmemory: 31.60GiB(39.50%)  \x1b[34mtps: 2,700  \x1b[36mtflops: 115.00  \x1b[35mmfu: 34.00%\x1b[39m
[rank0]:[titan] 2025-01-01 12:00:04,000 - root - INFO - \x1b[31mstep:  5  \x1b[32mloss:  8.5000  \x1b[33mgrad_norm:  3.0000  \x1b[36mmemory: 31.50GiB(39.38%)  \x1b[34mtps: 2,650  \x1b[36mtflops: 112.00  \x1b[35mmfu: 33.50%\x1b[39m
";

#[test]
fn torchtitan_log_against_the_prediction() {
    let v = from_log("fromlog-tt.log", TORCHTITAN, &[]);
    assert_eq!(v["format"], "cephalo-fromlog/1");
    assert_eq!(v["log_format"], "torchtitan");
    assert_eq!(v["steps_logged"], 5);
    assert_eq!(v["warmup_skipped"], 2);
    assert_eq!(v["steps_used"], 3);
    // Median of 2,600, 2,700 and 2,650 tokens/s per GPU (torchtitan's tps).
    assert_eq!(measured(&v, "tokens_per_s_per_gpu"), 2650.0);
    assert_eq!(measured(&v, "tokens_per_s"), 2650.0 * 4.0);
    assert!(close(
        measured(&v, "iteration_ms"),
        TOKENS / (2650.0 * 4.0) * 1e3
    ));
    assert_eq!(
        measured(&v, "peak_mem_gib"),
        31.6,
        "the largest after warm-up"
    );
    assert!(close(measured(&v, "mfu"), 0.335));
    // The prediction is the simulator's for the same workload and planner.
    let plan = json_of("plan", &[&["--planner", "fsdp"][..], WORKLOAD].concat());
    let predicted = row(&v, "iteration_ms")["predicted"].as_f64().unwrap();
    assert_eq!(Some(predicted), plan["simulated"]["iteration_ms"].as_f64());
    let err = row(&v, "iteration_ms")["error_pct"].as_f64().unwrap();
    let m = measured(&v, "iteration_ms");
    assert!(close(err, (predicted - m) / m * 100.0));
    let prov = v["provenance"].to_string();
    assert!(prov.contains("tokens/s per GPU"), "{prov}");
    // Fewer warm-up steps change the median.
    let v0 = from_log("fromlog-tt0.log", TORCHTITAN, &["--warmup-steps", "0"]);
    assert_eq!(measured(&v0, "tokens_per_s_per_gpu"), 2600.0);
}

#[test]
fn composer_log_against_the_prediction() {
    let mut log = String::from("Starting training...\n");
    for (b, tps) in [
        (1, 100.0),
        (2, 4000.0),
        (3, 8000.0),
        (4, 8192.0),
        (5, 8100.0),
    ] {
        log += &format!(
            "[epoch=1][batch={b}/100]:\n\t Train time/batch: {}\n\t Train loss/train/total: 2.5\n\t Train throughput/batches_per_sec: {}\n\t Train throughput/samples_per_sec: {}\n\t Train throughput/device/tokens_per_sec: {}\n\t Train throughput/tokens_per_sec: {tps}\n\t Train throughput/device/mfu: 0.41\n\t Train memory/peak_allocated_mem: 20.1\n",
            b - 1,
            tps / TOKENS,
            tps / 4096.0,
            tps / 4.0
        );
    }
    let v = from_log("fromlog-composer.log", &log, &[]);
    assert_eq!(v["log_format"], "composer");
    assert_eq!(measured(&v, "tokens_per_s"), 8100.0);
    assert_eq!(measured(&v, "tokens_per_s_per_gpu"), 8100.0 / 4.0);
    assert!(close(measured(&v, "iteration_ms"), 1e3 / (8100.0 / TOKENS)));
    // Composer's GB (10^9 bytes) in GiB.
    assert!(close(measured(&v, "peak_mem_gib"), 20.1e9 / 1073741824.0));
    assert_eq!(measured(&v, "mfu"), 0.41);
}

#[test]
fn deepspeed_log_against_the_prediction() {
    let log = "\
[2025-01-01 00:00:00,000] [INFO] [config.py:1000:print] train_batch_size ............. 16
steps: 1 loss: 9.0000 iter time (s): 9.000 samples/sec: 1.778
steps: 2 loss: 8.0000 iter time (s): 6.000 samples/sec: 2.667
[2025-01-01 00:00:10,000] [INFO] [logging.py:96:log_dist] [Rank 0] epoch=0/micro_step=3/global_step=3, RunningAvgSamplesPerSec=3.1, CurrSamplesPerSec=3.2, MemAllocated=20.5GB, MaxMemAllocated=41.25GB
steps: 3 loss: 7.0000 iter time (s): 5.000 samples/sec: 3.200
steps: 4 loss: 6.5000 iter time (s): 5.200 samples/sec: 3.077
steps: 5 loss: 6.0000 iter time (s): 4.900 samples/sec: 3.265
";
    let v = from_log("fromlog-ds.log", log, &[]);
    assert_eq!(v["log_format"], "deepspeed");
    assert_eq!(v["steps_used"], 3);
    assert_eq!(measured(&v, "iteration_ms"), 5000.0);
    assert_eq!(measured(&v, "peak_mem_gib"), 41.25);
    // The median of 3.2 samples/s (step 3's CurrSamplesPerSec, printed
    // first, wins its merge), 3.077 and 3.265.
    let tokens = [3.2, 3.077, 3.265].map(|s| s * 4096.0);
    assert!(close(measured(&v, "tokens_per_s"), tokens[0]));
    assert!(
        row(&v, "mfu")["measured"].is_null(),
        "DeepSpeed prints no MFU"
    );
}

#[test]
fn megatron_log_against_the_prediction() {
    let mut log = String::new();
    for (i, ms) in [
        (10, 9000.0),
        (20, 5100.0),
        (30, 5000.0),
        (40, 5050.0),
        (50, 4990.0),
    ] {
        log += &format!(" [2025-01-01 00:00:00] iteration       {i}/     100 | consumed samples:         {} | elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): 150.0 | learning rate: 1.000000E-04 | global batch size:    16 | lm loss: 7.000000E+00 | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |\n", i * 16);
        if i == 10 {
            log += "[Rank 0] (after 10 iterations) memory (MB) | allocated: 20000.0 | max allocated: 40960.0 | reserved: 45000.0 | max reserved: 45000.0\n";
        }
    }
    let v = from_log("fromlog-megatron.log", &log, &["--planner", "fsdp"]);
    assert_eq!(v["log_format"], "megatron");
    assert_eq!(measured(&v, "iteration_ms"), 5000.0);
    assert!(close(measured(&v, "tokens_per_s"), TOKENS / 5.0));
    // The memory line follows iteration 10, a warm-up step.
    assert!(row(&v, "peak_mem_gib")["measured"].is_null());
}

#[test]
fn table_and_csv_say_the_same() {
    let p = write(tmp("fromlog-fmt.log"), TORCHTITAN);
    let args = [&["validate", "--from-log", p.as_str()][..], WORKLOAD].concat();
    let t = run(&args);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stdout.contains("torchtitan format"), "{}", t.stdout);
    assert!(t.stdout.contains("tokens_per_s_per_gpu"), "{}", t.stdout);
    assert!(t.stdout.contains("2650"), "{}", t.stdout);
    let c = run(&[&args[..], &["--format", "csv"]].concat());
    assert_eq!(c.code, 0);
    assert!(
        c.stdout
            .starts_with("metric,predicted,measured,error_pct\n"),
        "{}",
        c.stdout
    );
    assert!(c.stdout.contains("tokens_per_s_per_gpu,"), "{}", c.stdout);
}

#[test]
fn hostile_logs_exit_2_naming_the_file_and_line() {
    let cases: &[(&str, &[u8], &[&str], &str)] = &[
        ("empty", b"", &[], "empty"),
        ("junk", b"\x00\x01\xff\xfe binary junk \x89PNG\r\n", &[], "no recognisable step"),
        (
            "nan",
            b"step: 1  loss: 2  memory: 1.00GiB(1%)  tps: 10\nstep: 2  loss: 2  memory: 1.00GiB(1%)  tps: NaN\n",
            &[],
            ":2",
        ),
        (
            "huge",
            b"steps: 1 loss: 2 iter time (s): 1e999 samples/sec: 1\n",
            &[],
            ":1",
        ),
        (
            "truncated",
            b"step: 1  loss: 2  memory: 1.00GiB(1%)  tps: 10\nstep: 2  loss: 2  memo",
            &[],
            ":2",
        ),
        (
            "mismatch",
            b"steps: 1 loss: 2 iter time (s): 1.0 samples/sec: 1\n",
            &["--log-format", "torchtitan"],
            "--log-format deepspeed",
        ),
        (
            "warmup",
            b"steps: 1 loss: 2 iter time (s): 1.0 samples/sec: 1\n",
            &[],
            "warm-up",
        ),
        ("format", b"x\n", &["--log-format", "fairseq"], "--log-format"),
    ];
    for (name, bytes, extra, says) in cases {
        let path = tmp(&format!("fromlog-hostile-{name}.log"));
        std::fs::write(&path, bytes).unwrap();
        let p = path.to_str().unwrap();
        let o = run(&[&["validate", "--from-log", p][..], WORKLOAD, extra].concat());
        assert_eq!(o.code, 2, "{name}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{name}: {}", o.stderr);
        if *name != "format" {
            assert!(o.stderr.contains(p), "{name} names the file: {}", o.stderr);
        }
        assert!(!o.stderr.contains("panicked"), "{name}: {}", o.stderr);
    }
}

/// A Megatron-LM mixture-of-experts run's log (its iteration lines carry
/// the router's `load_balancing_loss`) against the prediction for the
/// run's own shape, pinned as `plan`'s flags pin it: EP 4 predicted, and
/// a different prediction than the same run without expert parallelism.
#[test]
fn megatron_moe_log_against_the_prediction_of_its_shape() {
    let mut log = String::new();
    for (i, ms) in [(1, 900.0), (2, 520.0), (3, 500.0), (4, 505.0), (5, 499.0)] {
        log += &format!(" [2026-01-01 00:00:00] iteration        {i}/     100 | consumed samples:         {} | elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): 150.0 | learning rate: 1.000000E-04 | global batch size:    64 | lm loss: 7.000000E+00 | load_balancing_loss: 1.012345E+00 | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |\n", i * 64);
    }
    let p = write(tmp("fromlog-megatron-moe.log"), &log);
    let shape = |ep: &str| {
        json_of(
            "validate",
            &[
                &["--from-log", p.as_str()][..],
                OLMOE_2X8_H100,
                &[
                    "--tp",
                    "1",
                    "--pp",
                    "2",
                    "--microbatch-size",
                    "1",
                    "--ep",
                    ep,
                ],
            ]
            .concat(),
        )
    };
    let v = shape("4");
    assert_eq!(v["log_format"], "megatron");
    assert_eq!(
        v["planner"], "megatron",
        "Megatron logs default to its planner"
    );
    assert_eq!(
        measured(&v, "iteration_ms"),
        500.0,
        "median after 2 warm-up steps"
    );
    assert!(close(measured(&v, "tokens_per_s"), 64.0 * 4096.0 / 0.5));
    let plan = v["plan"].as_str().unwrap();
    assert!(plan.starts_with("PP 2 x TP 1 x EP 4,"), "{plan}");
    let one = shape("1");
    assert!(!one["plan"].as_str().unwrap().contains("EP"), "{one}");
    assert_ne!(
        row(&v, "iteration_ms")["predicted"],
        row(&one, "iteration_ms")["predicted"]
    );
}
