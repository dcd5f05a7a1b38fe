//! The fuzz rule on every input and output surface the first fuzz test
//! (`fuzz.rs`) does not reach: `comm` and `--comm-profile` logs, profile
//! directories and files, calibration files, Hugging Face `config.json`,
//! `--gpu-catalog` / `--model-catalog`, pipeline plan files, experiment
//! specs, `list`, `completions`, `predict`, and every output flag pointed
//! at hostile paths. Seeded random combinations of valid and hostile
//! inputs exit 0 (an answer), 2 (bad input, with an error line) or 1 (a
//! write that failed, saying so), never panic or hang, never print NaN or
//! an infinity, never put a negative time or an MFU above 1 in JSON, and
//! never replace a device node, a FIFO or a symlink they were given.

use crate::common::{device_node, native_profile, run, run_limited, scratch, write};
use crate::fuzz::{check_json, check_text, LIMIT};
use serde_json::Value;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// xorshift64*: a seeded stream of picks (same seed, same corpus).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize].clone()
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1000) as f64 / 1000.0 < p
    }
}

/// The input files of the corpus, written once in `dir`.
struct Files {
    comm_logs: Vec<String>,
    profiles: Vec<String>,
    calibrations: Vec<String>,
    hf_configs: Vec<String>,
    gpu_catalogs: Vec<String>,
    model_catalogs: Vec<String>,
    pipeline_plans: Vec<String>,
    specs_dir: PathBuf,
    specs: Vec<&'static str>,
    /// Output paths: hostile (devices, a directory, links) and plain.
    outputs: Vec<String>,
    /// Device nodes, FIFOs and symlinks that must stay what they are.
    special: Vec<(PathBuf, &'static str)>,
}

fn nccl_log(busbw: f64, time_scale: f64) -> String {
    let mut s = String::from("# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 1 minBytes 1048576 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20\n#\n# Using devices\n#  Rank  0 Group  0 Pid  1000 on     hosta device  0 [0x07] NVIDIA L4\n#  Rank  1 Group  0 Pid  1001 on     hosta device  1 [0x07] NVIDIA L4\n#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n");
    for k in [20, 22, 24, 26] {
        let size = (1u64 << k) as f64;
        let algbw = busbw;
        let t = size / (algbw * 1e9) * 1e6 * time_scale;
        s.push_str(&format!(
            "{size:>12} {:>13}     float     sum      -1 {t:>8.2} {algbw:>7.2} {busbw:>7.2}      0 {t:>8.2} {algbw:>7.2} {busbw:>7.2}      0\n",
            size as u64 / 4
        ));
    }
    s
}

fn files(dir: &Path) -> Files {
    let w = |name: &str, text: &str| write(dir.join(name), text);
    let mkdir = |name: &str| -> String {
        let p = dir.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p.display().to_string()
    };
    let comm_logs = vec![
        w("ar.log", &nccl_log(20.0, 1.0)),
        w("ar-fast.log", &nccl_log(1e9, 1.0)),
        w("ar-zero.log", &nccl_log(20.0, 0.0)),
        w("garbage.log", "not an nccl-tests log\n1 2 3\n"),
        format!("all-gather={}", dir.join("ar.log").display()),
        format!("bogus={}", dir.join("ar.log").display()),
        dir.join("missing.log").display().to_string(),
    ];
    let calibration = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("profiles/calibration.json"),
    )
    .unwrap();
    let mut cal: Value = serde_json::from_str(&calibration).unwrap();
    cal["memory"]["fixed_gib"] = Value::from(1e10);
    let mut cal2: Value = serde_json::from_str(&calibration).unwrap();
    cal2["time"]["bw_efficiency"] = Value::from(-0.5);
    let calibrations = vec![
        w("cal-ok.json", &calibration),
        w("cal-mem.json", &cal.to_string()),
        w("cal-bw.json", &cal2.to_string()),
        w("cal-junk.json", "{\"format\": \"cephalo-calibration/1\"}"),
    ];
    let profiles = vec![
        mkdir("empty-profiles"),
        w("braces/x.json", "{}"),
        w(
            "native-ok.json",
            &native_profile("l4", "fp16", "[1.0, 1.9, 2.8]"),
        ),
        w("native-bf16-t4.json", &native_profile("t4", "bf16", "null")),
        w(
            "native-falling.json",
            &native_profile("l4", "fp16", "[4.0, 2.0, 1.0]"),
        ),
        w(
            "native-zero-mem.json",
            &native_profile("l4", "fp16", "[0.0, 0.0, 0.0]"),
        ),
        w(
            "ref-zero.json",
            r#"{"deepspeedgpt_1.3b": {"l4": {"512": {"float16": [[0, 0], [0, 0], [0, 0, 0], [0, 0, 0]]}}}}"#,
        ),
        w(
            "ref-unknown.json",
            r#"{"no-such-model": {"l4": {"512": {"float16": 3.0}}}}"#,
        ),
        w("not-json.json", "[[[["),
    ];
    let hf_configs = vec![
        w(
            "hf/Llama-fuzz/config.json",
            r#"{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 16, "num_attention_heads": 16, "vocab_size": 32000, "max_position_embeddings": 2048}"#,
        ),
        w(
            "hf/negative/config.json",
            r#"{"model_type": "llama", "hidden_size": -1, "intermediate_size": 5504, "num_hidden_layers": 16, "num_attention_heads": 16, "vocab_size": 32000}"#,
        ),
        w(
            "hf/huge/config.json",
            r#"{"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 1000000000000, "num_attention_heads": 16, "vocab_size": 32000}"#,
        ),
        w(
            "hf/t5/config.json",
            r#"{"model_type": "t5", "d_model": 512}"#,
        ),
        w("hf/junk/config.json", "{"),
    ];
    let gpu_catalogs = vec![
        w(
            "gpus-ok.toml",
            "[[gpu]]\nname = \"lab-card\"\narch = \"ada\"\ntensor_cores = true\nmem_gib = 48.0\nfp32_tflops = 90.0\nfp16_tflops = 180.0\nbf16_tflops = 180.0\nmem_bw_gbps = 960.0\nhost_link = { pcie_gen = 4, lanes = 16 }\n",
        ),
        w(
            "gpus-negative.toml",
            "[[gpu]]\nname = \"lab-card\"\narch = \"ada\"\ntensor_cores = true\nmem_gib = -48.0\nfp32_tflops = 90.0\nfp16_tflops = 180.0\nmem_bw_gbps = 960.0\nhost_link = { pcie_gen = 4, lanes = 16 }\n",
        ),
        w(
            "gpus-huge.toml",
            "[[gpu]]\nname = \"lab-card\"\narch = \"ada\"\ntensor_cores = true\nmem_gib = 48.0\nfp32_tflops = 1e30\nfp16_tflops = 1e30\nmem_bw_gbps = 960.0\nhost_link = { pcie_gen = 4, lanes = 16 }\n",
        ),
        w("gpus-junk.toml", "[[gpu]]\nname = \"x\"\nspeed = 3\n"),
    ];
    let model_catalogs = vec![
        w(
            "models-ok.toml",
            "[[model]]\nname = \"fuzz-gpt\"\nfamily = \"gpt\"\nlayers = 12\nhidden = 1024\nheads = 16\nvocab = 50257\nseq_len = 1024\n",
        ),
        w(
            "models-zero.toml",
            "[[model]]\nname = \"fuzz-gpt\"\nfamily = \"gpt\"\nlayers = 0\nhidden = 1024\nheads = 16\nvocab = 50257\nseq_len = 1024\n",
        ),
        w("models-junk.toml", "[[model]\n"),
    ];
    // A real pipeline plan, and corrupted copies of it.
    let good = dir.join("pipe-good.json");
    let o = run(&[
        "plan",
        "--gpus",
        "l4,l4,a100",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--planner",
        "pipeline",
        "--out",
        good.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    let edit = |name: &str, f: &dyn Fn(&mut Value)| -> String {
        let mut v = plan.clone();
        f(&mut v);
        w(name, &v.to_string())
    };
    let pipeline_plans = vec![
        good.display().to_string(),
        edit("pipe-no-stages.json", &|v| {
            v["pipeline"]["stages"] = Value::Array(vec![])
        }),
        edit("pipe-neg.json", &|v| {
            v["pipeline"]["microbatches"] = Value::from(-4)
        }),
        edit("pipe-zero.json", &|v| {
            v["pipeline"]["microbatches"] = Value::from(0)
        }),
        edit("pipe-str.json", &|v| v["pipeline"] = Value::from("1f1b")),
        w(
            "ref-plan-wrong.json",
            r#"{"model_name": "deepspeedgpt_2.7b", "uneven_batch_sizes": [8, 8, 0], "uneven_microbatches": [1, 1, 0], "seq_length": 512, "autocast_dtype": "float16"}"#,
        ),
    ];
    let specs_dir = dir.join("specs");
    std::fs::create_dir_all(&specs_dir).unwrap();
    let spec = |name: &str, body: &str| {
        write(specs_dir.join(format!("{name}.toml")), body);
    };
    let small = "name = \"fz-ok\"\ntitle = \"t\"\ndescription = \"d\"\nprofiles = \"calibrated\"\n[sweep]\ngpus = [\"a100-80gb,l4\"]\nmodels = [\"gpt-1.3b\"]\nglobal_batches = [8]\nplanners = [\"fsdp\"]\n[[figure]]\nkind = \"bars\"\nx = \"global_batch\"\ny = \"samples_per_s\"\n";
    spec("fz-ok", small);
    spec(
        "fz-unknown-field",
        &small
            .replace("fz-ok", "fz-unknown-field")
            .replace("[sweep]", "[sweep]\nwarp = 9"),
    );
    spec(
        "fz-negative",
        &small.replace("fz-ok", "fz-negative").replace("[8]", "[-8]"),
    );
    spec(
        "fz-planner",
        &small
            .replace("fz-ok", "fz-planner")
            .replace("\"fsdp\"", "\"nope\""),
    );
    spec(
        "fz-metric",
        &small
            .replace("fz-ok", "fz-metric")
            .replace("samples_per_s", "joy"),
    );
    spec("fz-junk", "name = = 3");
    let specs = vec![
        "fz-ok",
        "fz-unknown-field",
        "fz-negative",
        "fz-planner",
        "fz-metric",
        "fz-junk",
        "fz-missing",
    ];
    // Output paths.
    let mut special = Vec::new();
    let mut outputs = vec![
        "-".to_string(),
        dir.display().to_string(),
        dir.join("no-such-dir/out.json").display().to_string(),
        dir.join("plain-out.json").display().to_string(),
    ];
    let target = dir.join("run-42.out");
    std::fs::write(&target, "old").unwrap();
    let link = dir.join("latest.out");
    std::os::unix::fs::symlink("run-42.out", &link).unwrap();
    special.push((link.clone(), "symlink"));
    outputs.push(link.display().to_string());
    let dangling = dir.join("dangling.out");
    std::os::unix::fs::symlink("created-by-fuzz.out", &dangling).unwrap();
    special.push((dangling.clone(), "symlink"));
    outputs.push(dangling.display().to_string());
    for (name, minor) in [("full", 7), ("null", 3)] {
        let p = dir.join(format!("dev-{name}"));
        if device_node(&p, minor).is_some() {
            special.push((p.clone(), "device"));
            outputs.push(p.display().to_string());
        }
    }
    Files {
        comm_logs,
        profiles,
        calibrations,
        hf_configs,
        gpu_catalogs,
        model_catalogs,
        pipeline_plans,
        specs_dir,
        specs,
        outputs,
        special,
    }
}

/// One case: the arguments of one `cephalo` run, and whether it asked for JSON.
fn case(rng: &mut Rng, f: &Files, dir: &Path, i: usize) -> (Vec<String>, bool) {
    let s = |x: &str| x.to_string();
    let gpus = ["l4,l4", "a100,t4", "v100-16gb,l4", "l4,,l4", "h100-sxm"];
    let mut a: Vec<String> = Vec::new();
    let json = rng.chance(0.4);
    match rng.next() % 9 {
        0 => {
            a.extend([s("comm"), s("--gpus"), s(rng.pick(&gpus))]);
            a.extend([
                s("--op"),
                s(rng.pick(&["all-gather", "all-reduce", "reduce-scatter", "broadcast"])),
            ]);
            if rng.chance(0.5) {
                a.extend([
                    s("--sizes"),
                    s(rng.pick(&["1M,64M", "1K", "1M,,2M", "-1M", "1T", "0"])),
                ]);
            }
            if rng.chance(0.3) {
                a.extend([s("--ranks"), s(rng.pick(&["0-1", "0", "1-0", "0-x", "5"]))]);
            }
            if rng.chance(0.6) {
                a.extend([s("--comm-profile"), rng.pick(&f.comm_logs).clone()]);
            }
        }
        1 | 2 => {
            // simulate with hostile profile, calibration, model and catalog inputs.
            a.extend([s("simulate"), s("--gpus"), s(rng.pick(&gpus))]);
            let model = if rng.chance(0.3) {
                rng.pick(&f.hf_configs).clone()
            } else {
                s(rng.pick(&["gpt-1.3b", "fuzz-gpt", "gpt-tiny"]))
            };
            a.extend([s("--model"), model, s("--global-batch"), s("8")]);
            a.extend([
                s("--batch"),
                s(rng.pick(&["4,4", "8", "4,,4", "+4,4", "2,2,2,2"])),
            ]);
            if rng.chance(0.5) {
                a.extend([s("--profiles"), rng.pick(&f.profiles).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--calibration"), rng.pick(&f.calibrations).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--comm-profile"), rng.pick(&f.comm_logs).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--dtype"), s(rng.pick(&["fp16", "bf16", "fp32"]))]);
            }
            if rng.chance(0.3) {
                a.extend([s("--model-catalog"), rng.pick(&f.model_catalogs).clone()]);
            }
            if rng.chance(0.2) {
                a.extend([s("--gpu-catalog"), rng.pick(&f.gpu_catalogs).clone()]);
            }
            if rng.chance(0.5) {
                let flag = rng.pick(&["--csv", "--trace"]);
                a.extend([s(flag), rng.pick(&f.outputs).clone()]);
            }
        }
        3 => {
            a.extend([
                s("simulate"),
                s("--gpus"),
                s("l4,l4,a100"),
                s("--model"),
                s("gpt-1.3b"),
            ]);
            a.extend([
                s("--global-batch"),
                s("16"),
                s("--plan"),
                rng.pick(&f.pipeline_plans).clone(),
            ]);
        }
        4 => {
            a.extend([s("plan"), s("--gpus"), s(rng.pick(&gpus)), s("--model")]);
            a.push(if rng.chance(0.3) {
                rng.pick(&f.hf_configs).clone()
            } else {
                s("gpt-1.3b")
            });
            a.extend([s("--global-batch"), s(rng.pick(&["8", "0", "17"]))]);
            if rng.chance(0.7) {
                a.extend([s("--out"), rng.pick(&f.outputs).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--gpu-catalog"), rng.pick(&f.gpu_catalogs).clone()]);
            }
        }
        5 => {
            a.extend([s("experiment"), s("run"), s(rng.pick(&f.specs))]);
            a.extend([
                s("--dir"),
                f.specs_dir.display().to_string(),
                s("--results"),
            ]);
            a.push(if rng.chance(0.2) {
                rng.pick(&f.outputs).clone()
            } else {
                dir.join(format!("results-{i}")).display().to_string()
            });
            return (a, false);
        }
        6 => {
            a.extend([
                s("list"),
                s(rng.pick(&["gpus", "models", "planners", "strategies", "nothing"])),
            ]);
            if rng.chance(0.3) {
                a.extend([s("--gpu-catalog"), rng.pick(&f.gpu_catalogs).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--model-catalog"), rng.pick(&f.model_catalogs).clone()]);
            }
        }
        7 => {
            a.extend([
                s("completions"),
                s(rng.pick(&["bash", "zsh", "fish", "tcsh"])),
            ]);
            return (a, false);
        }
        _ => {
            a.extend([
                s("predict"),
                s("--gpu"),
                s(rng.pick(&["l4", "t4", "p40", "nope"])),
            ]);
            a.push(s("--model"));
            a.push(if rng.chance(0.3) {
                rng.pick(&f.hf_configs).clone()
            } else {
                s("gpt-1.3b")
            });
            if rng.chance(0.5) {
                a.extend([s("--dtype"), s(rng.pick(&["fp16", "bf16", "int4"]))]);
            }
            if rng.chance(0.5) {
                a.extend([
                    s("--batch-sizes"),
                    s(rng.pick(&["1,2", "1,,2", "0", "-1", "4"])),
                ]);
            }
            if rng.chance(0.3) {
                a.extend([s("--calibration"), rng.pick(&f.calibrations).clone()]);
            }
            if rng.chance(0.3) {
                a.extend([s("--profiles"), rng.pick(&f.profiles).clone()]);
            }
        }
    }
    if json {
        a.extend([s("--format"), s("json")]);
    }
    (a, json)
}

#[test]
fn every_surface_exits_0_1_or_2_and_damages_nothing() {
    let dir = scratch("cli-fuzz-surfaces");
    let f = files(&dir);
    let seed = std::env::var("CEPHALO_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_CEFA_u64);
    let mut rng = Rng(seed | 1);
    const CASES: usize = 160;
    let mut codes = [0usize; 3];
    for i in 0..CASES {
        let (args, json) = case(&mut rng, &f, &dir, i);
        let o = run_limited(&args, LIMIT);
        let (code, stdout, stderr) = (o.code, o.stdout, o.stderr);
        let ctx = || {
            format!(
                "cephalo {}\nstdout: {stdout}\nstderr: {stderr}",
                args.join(" ")
            )
        };
        match code {
            0 => codes[0] += 1,
            1 => {
                assert!(
                    stderr.contains("cannot write"),
                    "exit 1 is only for a failed write: {}",
                    ctx()
                );
                codes[1] += 1;
            }
            2 => {
                assert!(
                    stderr.lines().any(|l| l.starts_with("error: ")),
                    "exit 2 without an error line: {}",
                    ctx()
                );
                codes[2] += 1;
            }
            other => panic!("exit {other:?} (a panic, a crash or a hang): {}", ctx()),
        }
        if let Err(e) = check_text(&stdout) {
            panic!("{e}: {}", ctx());
        }
        assert!(!stderr.contains("panicked"), "panics: {}", ctx());
        if json && code == 0 && !stdout.trim().is_empty() {
            // `--csv -` / `--trace -` share stdout with the report: check the
            // report only when stdout is one JSON document.
            if let Ok(v) = serde_json::from_str::<Value>(&stdout) {
                if let Err(e) = check_json(&v, "", false) {
                    panic!("{e}: {}", ctx());
                }
            }
        }
        for (p, kind) in &f.special {
            let ft = std::fs::symlink_metadata(p).unwrap().file_type();
            let same = match *kind {
                "device" => ft.is_char_device(),
                "fifo" => ft.is_fifo(),
                _ => ft.is_symlink(),
            };
            assert!(same, "{} is no longer a {kind}: {}", p.display(), ctx());
        }
    }
    eprintln!(
        "fuzz surfaces: {} answered, {} failed writes, {} refused, of {CASES}",
        codes[0], codes[1], codes[2]
    );
    // The corpus must reach answers and refusals both, and the full device.
    assert!(codes[0] >= 20 && codes[2] >= 20, "{codes:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
