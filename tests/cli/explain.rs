//! The command line explains itself: `list`, completions, help text,
//! run-time catalogs (`--gpu-catalog`, `--model-catalog`, a Hugging Face
//! `config.json`), the per-GPU memory breakdown, and the build hint for
//! real execution in a build without it.

use crate::common::{run, scratch, write};
use serde_json::Value;

#[test]
fn list_names_every_catalog_entry_with_its_numbers() {
    for what in ["gpus", "models", "planners", "strategies"] {
        let o = run(&["list", what]);
        assert_eq!(o.code, 0, "{what}: {}", o.stderr);
        assert!(o.stdout.lines().count() > 3, "{what}: {}", o.stdout);
    }
    let o = run(&["list", "models", "--format", "json"]);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["format"], "cephalo-list/1");
    let find = |name: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
            .clone()
    };
    // The public Llama-2-7B and the paper authors' build of the same size.
    let public = find("llama2-7b");
    assert_eq!(public["vocab"], 32000);
    assert_eq!(public["seq_len"], 4096);
    assert_eq!(public["params"], 6_738_415_616u64);
    assert_eq!(find("deepspeedllamav2_7b")["vocab"], 49152);
    // A mixture of experts: total and active counts, FLOPs by part, and
    // why the simulator does not price the ones it does not.
    let mixtral = find("mixtral-8x7b");
    assert_eq!(
        (mixtral["experts"].as_u64(), mixtral["top_k"].as_u64()),
        (Some(8), Some(2))
    );
    assert!(mixtral["active_params"].as_u64() < mixtral["params"].as_u64());
    assert!(mixtral["fwd_gflop_routed_experts"].as_f64().unwrap() > 20.0);
    assert!(mixtral["not_simulated"].is_null());
    let v3 = find("deepseek-v3");
    assert!(v3["not_simulated"]
        .as_str()
        .unwrap()
        .contains("latent attention"));
    // Every row in CSV, with the same columns.
    let o = run(&["list", "models", "--format", "csv"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let widths: Vec<usize> = o.stdout.lines().map(csv_fields).collect();
    assert!(
        widths.len() > 30 && widths.iter().all(|&w| w == widths[0]),
        "{widths:?}"
    );
    let o = run(&["list", "gpus", "--format", "csv"]);
    assert!(
        o.stdout.starts_with("name,aliases,arch,mem_gib"),
        "{}",
        o.stdout
    );
    let o = run(&["list", "planners"]);
    for p in ["cephalo", "fsdp", "pipeline-hetero"] {
        assert!(o.stdout.contains(p), "{p}: {}", o.stdout);
    }
    let o = run(&["list", "strategies"]);
    assert!(o.stdout.contains("--sharding") && o.stdout.contains("hybrid"));
}

/// Fields of one CSV line (commas outside double quotes, plus one).
fn csv_fields(line: &str) -> usize {
    let mut quoted = false;
    1 + line
        .chars()
        .filter(|&c| {
            if c == '"' {
                quoted = !quoted;
            }
            c == ',' && !quoted
        })
        .count()
}

#[test]
fn completions_cover_every_shell_and_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completions", shell]);
        assert_eq!(o.code, 0, "{shell}: {}", o.stderr);
        for word in ["simulate", "global-batch", "experiment"] {
            assert!(o.stdout.contains(word), "{shell} lacks {word}");
        }
    }
    // `validate` passes its flags through to its parsers: completions
    // still offer them (--from-log's in every build).
    let bash = run(&["completions", "bash"]).stdout;
    let at = bash
        .find("cephalo__subcmd__validate)")
        .expect("a validate section");
    let opts = bash[at..].lines().nth(1).unwrap_or_default();
    for flag in [
        "--from-log",
        "--log-format",
        "--warmup-steps",
        "--model",
        "--planner",
    ] {
        assert!(
            opts.contains(flag),
            "validate completions lack {flag}: {opts}"
        );
    }
    assert_eq!(run(&["completions", "tcsh"]).code, 2);
}

/// Doc comments become help text: no Rust intra-doc links or paths leak.
#[test]
fn help_text_has_no_rust_doc_links() {
    let top = run(&["--help"]);
    let mut pages = vec![top.stdout];
    for cmd in [
        "simulate",
        "plan",
        "compare",
        "calibrate",
        "predict",
        "comm",
        "experiment",
        "list",
    ] {
        let o = run(&[cmd, "--help"]);
        assert_eq!(o.code, 0, "{cmd}: {}", o.stderr);
        pages.push(o.stdout);
    }
    for p in &pages {
        for bad in ["[`", "`]", "](", "::"] {
            assert!(!p.contains(bad), "help has `{bad}`:\n{p}");
        }
    }
}

#[test]
fn catalogs_at_run_time_extend_and_replace_the_built_in_ones() {
    let d = scratch("cli-explain-catalogs");
    let gpus = d.join("gpus.toml");
    write(
        &gpus,
        r#"[[gpu]]
name = "lab-card"
arch = "ada"
tensor_cores = true
mem_gib = 48.0
fp32_tflops = 90.0
fp16_tflops = 180.0
bf16_tflops = 180.0
mem_bw_gbps = 960.0
host_link = { pcie_gen = 4, lanes = 16 }
"#,
    );
    let models = d.join("models.toml");
    write(
        &models,
        r#"[[model]]
name = "gpt-1.3b"
family = "gpt"
layers = 12
hidden = 2048
heads = 16
vocab = 50257
seq_len = 1024
"#,
    );
    let o = run(&[
        "simulate",
        "--gpu-catalog",
        gpus.to_str().unwrap(),
        "--model-catalog",
        models.to_str().unwrap(),
        "--gpus",
        "lab-card,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "4",
        "--batch",
        "2,2",
        "--format",
        "json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("replaces the built-in model `gpt-1.3b`"),
        "{}",
        o.stderr
    );
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["gpus"][0]["gpu"], "lab-card");
    assert_eq!(v["gpus"][0]["capacity_gib"], 48.0);
    assert_eq!(
        v["seq_len"], 1024,
        "the user's gpt-1.3b, not the built-in one"
    );
    // Experiments run on the built-in catalogs: the flags are refused, not ignored.
    let o = run(&[
        "experiment",
        "list",
        "--gpu-catalog",
        gpus.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("built-in catalogs"), "{}", o.stderr);
    // The new type is listed; a broken catalog names its file and field.
    let o = run(&["list", "gpus", "--gpu-catalog", gpus.to_str().unwrap()]);
    assert!(o.stdout.contains("lab-card"));
    write(&gpus, "[[gpu]]\nname = \"x\"\nspeed = 3\n");
    let o = run(&["list", "gpus", "--gpu-catalog", gpus.to_str().unwrap()]);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("gpus.toml") && o.stderr.contains("speed"),
        "{}",
        o.stderr
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_unknown_architecture_in_a_gpu_catalog_names_file_field_and_values() {
    let d = scratch("cli-explain-arch");
    let gpus = d.join("bad.toml");
    let entry = |arch: &str| {
        format!(
            "[[gpu]]\nname = \"lab-card\"\narch = \"{arch}\"\nmem_gib = 48.0\nfp32_tflops = 90.0\nfp16_tflops = 180.0\nmem_bw_gbps = 960.0\nhost_link = {{ pcie_gen = 4, lanes = 16 }}\n"
        )
    };
    write(&gpus, &entry("blackwel"));
    let path = gpus.to_str().unwrap();
    for args in [
        vec!["list", "gpus", "--gpu-catalog", path],
        vec![
            "simulate",
            "--gpu-catalog",
            path,
            "--gpus",
            "lab-card,lab-card",
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "4",
        ],
    ] {
        let o = run(&args);
        assert_eq!(o.code, 2, "{}", o.stderr);
        for want in [
            "bad.toml",
            "`arch`",
            "`blackwel`",
            "hopper, blackwell, cdna3, cdna4, cpu",
        ] {
            assert!(o.stderr.contains(want), "{want}: {}", o.stderr);
        }
    }
    // A value the enum has, though no built-in GPU has it yet, is read.
    write(&gpus, &entry("cdna3"));
    let o = run(&["list", "gpus", "--gpu-catalog", path]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .lines()
            .any(|l| l.starts_with("lab-card") && l.contains("cdna3")),
        "{}",
        o.stdout
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_hugging_face_config_is_a_model() {
    let d = scratch("cli-explain-hf").join("Llama-2-7b-hf");
    let cfg = d.join("config.json");
    write(
        &cfg,
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32,
            "max_position_embeddings": 4096, "vocab_size": 32000, "torch_dtype": "float16"}"#,
    );
    let args = |m: &str| {
        vec![
            "simulate".to_string(),
            "--gpus".into(),
            "a100-80gb,a100-80gb".into(),
            "--model".into(),
            m.to_string(),
            "--global-batch".into(),
            "2".into(),
            "--batch".into(),
            "1,1".into(),
            "--format".into(),
            "json".into(),
        ]
    };
    let from_file = run(&args(cfg.to_str().unwrap()));
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    let v: Value = serde_json::from_str(&from_file.stdout).unwrap();
    assert_eq!(v["model"], "Llama-2-7b-hf");
    // The same shapes as the catalog's public llama2-7b: the same iteration.
    let named: Value = serde_json::from_str(&run(&args("llama2-7b")).stdout).unwrap();
    assert_eq!(v["iteration_ms"], named["iteration_ms"]);
    assert_eq!(v["seq_len"], 4096);
    write(&cfg, r#"{"model_type": "t5", "d_model": 512}"#);
    let bad = run(&args(cfg.to_str().unwrap()));
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("config.json") && bad.stderr.contains("model_type"),
        "{}",
        bad.stderr
    );
    std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
}

/// Every GPU's peak splits into state, overhead, unsharded parameters,
/// gradients and activations; a plan over the policy limit but within the
/// capacity says so.
#[test]
fn memory_breaks_down_by_component_with_headroom() {
    let base = [
        "simulate",
        "--gpus",
        "l4,a100",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "12",
        "--batch",
        "4,8",
        "--format",
        "json",
    ];
    let o = run(&base);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let m = &v["gpus"][0]["memory"];
    let f = |k: &str| m[k].as_f64().unwrap();
    let parts = f("state_gib")
        + f("overhead_gib")
        + f("unsharded_params_gib")
        + f("gradients_gib")
        + f("activations_gib");
    assert!((parts - f("peak_gib")).abs() < 1e-9, "{m}");
    assert!(f("state_gib") > 0.0 && f("unsharded_params_gib") > 0.0 && f("activations_gib") > 0.0);
    assert_eq!(m["status"], "fits");
    // A limit just under the L4's peak: over the policy, within 24 GiB.
    let fraction = (f("peak_gib") - 0.5) / f("capacity_gib");
    let frac = format!("{fraction:.4}");
    let mut args = base.to_vec();
    args.extend(["--mem-fraction", &frac]);
    let v: Value = serde_json::from_str(&run(&args).stdout).unwrap();
    assert_eq!(v["oom"], true);
    assert_eq!(v["gpus"][0]["memory"]["status"], "over-policy");
    assert!(
        v["gpus"][0]["memory"]["headroom_policy_gib"]
            .as_f64()
            .unwrap()
            < 0.0
    );
    assert!(
        v["gpus"][0]["memory"]["headroom_capacity_gib"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let mut t: Vec<&str> = base[..base.len() - 2].to_vec();
    t.extend(["--mem-fraction", &frac]);
    let o = run(&t);
    assert!(
        o.stdout.contains("OVER THE LIMIT, within capacity"),
        "{}",
        o.stdout
    );
}

/// A build without the exec feature says how to get `validate` / `profile`.
#[cfg(not(feature = "exec"))]
#[test]
fn real_execution_commands_say_how_to_build_them() {
    for cmd in ["validate", "profile"] {
        let o = run(&[cmd, "--model", "gpt-tiny", "--ranks", "2"]);
        assert_eq!(o.code, 2, "{cmd}");
        assert!(o.stderr.contains("--features exec"), "{}", o.stderr);
        assert!(o.stderr.contains("scripts/exec-env.sh"), "{}", o.stderr);
    }
}
