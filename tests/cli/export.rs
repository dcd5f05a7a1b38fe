//! `plan --export torchtitan|megatron|deepspeed|accelerate --export-out PATH`: the
//! configs parse in their own formats with the keys the frameworks
//! document, state the batch identity the frameworks check, and name what
//! of an uneven Cephalo plan they cannot express, with the approximation
//! simulated beside the plan.

use crate::common::{run, tmp, Out, OLMOE_2X8_H100};
use serde_json::Value;

/// torchtitan's job-config keys per section with their declared types,
/// read from torchtitan 0.2.2's `torchtitan/config/job_config.py` (`pip
/// download torchtitan==0.2.2 --no-deps`; 0.3.0 replaced the TOML files
/// with Python configs). Types: `int`, `float` (`float | int` included),
/// `str` (`Literal[...]` and `str | None` included), `bool`, `list`.
/// Sections cephalo never writes are left out.
const TORCHTITAN_KEYS: &[(&str, &[(&str, &str)])] = &[
    (
        "job",
        &[
            ("config_file", "str"),
            ("dump_folder", "str"),
            ("description", "str"),
            ("print_config", "bool"),
            ("save_config_file", "str"),
            ("custom_config_module", "str"),
        ],
    ),
    (
        "metrics",
        &[
            ("log_freq", "int"),
            ("enable_tensorboard", "bool"),
            ("disable_color_printing", "bool"),
            ("save_tb_folder", "str"),
            ("save_for_all_ranks", "bool"),
            ("enable_wandb", "bool"),
        ],
    ),
    (
        "model",
        &[
            ("name", "str"),
            ("flavor", "str"),
            ("hf_assets_path", "str"),
            ("tokenizer_path", "str"),
            ("converters", "list"),
            ("print_after_conversion", "bool"),
        ],
    ),
    (
        "training",
        &[
            ("dataset", "str"),
            ("dataset_path", "str"),
            ("local_batch_size", "int"),
            ("global_batch_size", "int"),
            ("seq_len", "int"),
            ("max_norm", "float"),
            ("steps", "int"),
            ("enable_cpu_offload", "bool"),
            ("dtype", "str"),
            ("mixed_precision_param", "str"),
            ("mixed_precision_reduce", "str"),
            ("gc_freq", "int"),
            ("gc_debug", "bool"),
        ],
    ),
    (
        "parallelism",
        &[
            ("data_parallel_replicate_degree", "int"),
            ("data_parallel_shard_degree", "int"),
            ("fsdp_reshard_after_forward", "str"),
            ("tensor_parallel_degree", "int"),
            ("disable_loss_parallel", "bool"),
            ("enable_async_tensor_parallel", "bool"),
            ("pipeline_parallel_degree", "int"),
            ("pipeline_parallel_first_stage_less_layers", "int"),
            ("pipeline_parallel_last_stage_less_layers", "int"),
            ("pipeline_parallel_layers_per_stage", "int"),
            ("pipeline_parallel_schedule", "str"),
            ("pipeline_parallel_schedule_csv", "str"),
            ("pipeline_parallel_microbatch_size", "int"),
            ("pipeline_parallel_expert_parallel_overlap", "bool"),
            ("context_parallel_degree", "int"),
            ("context_parallel_load_balancer", "str"),
            ("context_parallel_rotate_method", "str"),
            ("expert_parallel_degree", "int"),
            ("expert_tensor_parallel_degree", "int"),
            ("expert_parallel_comm_backend", "str"),
        ],
    ),
    (
        "activation_checkpoint",
        &[
            ("mode", "str"),
            ("selective_ac_option", "str"),
            ("per_op_sac_force_recompute_mm_shapes_by_fqns", "list"),
            ("early_stop", "bool"),
            ("memory_budget", "float"),
            ("visualize_memory_budget_pareto", "bool"),
            ("preserve_rng_state", "bool"),
            ("determinism_check", "str"),
            ("debug", "bool"),
        ],
    ),
    (
        "compile",
        &[
            ("enable", "bool"),
            ("components", "list"),
            ("backend", "str"),
        ],
    ),
];

/// The `Literal[...]` values torchtitan 0.2.2 declares for the keys cephalo
/// writes (same file).
const TORCHTITAN_LITERALS: &[(&str, &str, &[&str])] = &[
    (
        "training",
        "mixed_precision_param",
        &["bfloat16", "float32"],
    ),
    ("training", "mixed_precision_reduce", &["float32"]),
    (
        "parallelism",
        "fsdp_reshard_after_forward",
        &["default", "always", "never"],
    ),
    (
        "activation_checkpoint",
        "mode",
        &["selective", "full", "memory_budget", "none"],
    ),
];

const FOUR_A100: &[&str] = &["--gpus", "a100-80gb,a100-80gb,a100-80gb,a100-80gb"];
const UNEVEN: &[&str] = &["--gpus", "a100-80gb,a100-80gb,v100-32gb,v100-32gb"];

/// `cephalo plan` with `extra` (llama2-7b unless it names a `--model`),
/// exporting to `framework` into `file`; returns the run and the config's
/// text.
fn export(framework: &str, file: &str, extra: &[&str]) -> (Out, String) {
    let path = tmp(file);
    let p = path.to_str().unwrap();
    let model: &[&str] = if extra.contains(&"--model") {
        &[]
    } else {
        &["--model", "llama2-7b"]
    };
    let args = [
        &["plan", "--export", framework, "--export-out", p][..],
        model,
        extra,
    ]
    .concat();
    let o = run(&args);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&path).unwrap();
    (o, text)
}

fn toml_type(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::Integer(_) => "int",
        toml::Value::Float(_) => "float",
        toml::Value::String(_) => "str",
        toml::Value::Boolean(_) => "bool",
        toml::Value::Array(_) => "list",
        _ => "other",
    }
}

/// Every section and key of `text` is one torchtitan 0.2.2 declares, with
/// its type and, where it is a literal, one of its values.
fn check_torchtitan(text: &str) -> toml::Table {
    let t: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (section, v) in &t {
        let keys = TORCHTITAN_KEYS
            .iter()
            .find(|(s, _)| s == section)
            .unwrap_or_else(|| panic!("section [{section}] is not torchtitan's"))
            .1;
        let table = v
            .as_table()
            .unwrap_or_else(|| panic!("{section} is not a table"));
        for (k, val) in table {
            let ty = keys
                .iter()
                .find(|(n, _)| n == k)
                .unwrap_or_else(|| panic!("[{section}] {k} is not a torchtitan key"))
                .1;
            // torchtitan's float fields take TOML integers too (`float | int`).
            let got = toml_type(val);
            assert!(
                got == ty || (ty == "float" && got == "int"),
                "[{section}] {k}: torchtitan declares {ty}, got {got}"
            );
            if let Some((_, _, allowed)) = TORCHTITAN_LITERALS
                .iter()
                .find(|(s, n, _)| s == section && n == k)
            {
                let s = val.as_str().unwrap();
                assert!(
                    allowed.contains(&s),
                    "[{section}] {k} = {s}: not one of {allowed:?}"
                );
            }
        }
    }
    t
}

fn int(t: &toml::Table, section: &str, key: &str) -> i64 {
    t[section][key]
        .as_integer()
        .unwrap_or_else(|| panic!("[{section}] {key}"))
}

#[test]
fn torchtitan_export_has_only_documented_keys_and_the_batch_identity() {
    let (o, text) = export(
        "torchtitan",
        "export-fsdp.toml",
        &[
            &[
                "--planner",
                "fsdp",
                "--global-batch",
                "8",
                "--dtype",
                "bf16",
            ][..],
            FOUR_A100,
        ]
        .concat(),
    );
    let t = check_torchtitan(&text);
    assert_eq!(t["model"]["name"].as_str(), Some("llama2"));
    assert_eq!(t["model"]["flavor"].as_str(), Some("7B"));
    assert_eq!(int(&t, "parallelism", "data_parallel_shard_degree"), 4);
    assert_eq!(int(&t, "parallelism", "data_parallel_replicate_degree"), 1);
    assert_eq!(int(&t, "parallelism", "pipeline_parallel_degree"), 1);
    assert_eq!(int(&t, "training", "global_batch_size"), 8);
    // torchtitan's own check: global % (local x dp) == 0.
    let local = int(&t, "training", "local_batch_size");
    assert!(
        local >= 1 && 8 % (local * 4) == 0,
        "local_batch_size {local}"
    );
    assert_eq!(
        t["training"]["mixed_precision_param"].as_str(),
        Some("bfloat16")
    );
    assert!(
        text.contains("# as torchtitan runs it (simulated): "),
        "{text}"
    );
    assert!(
        o.stderr
            .contains("export: torchtitan job-config TOML written to"),
        "{}",
        o.stderr
    );
}

#[test]
fn torchtitan_export_of_a_pipeline_states_its_degree_and_schedule() {
    let (_, text) = export(
        "torchtitan",
        "export-pp.toml",
        &[
            &["--planner", "megatron", "--global-batch", "8"][..],
            FOUR_A100,
        ]
        .concat(),
    );
    let t = check_torchtitan(&text);
    let pp = int(&t, "parallelism", "pipeline_parallel_degree");
    let tp = int(&t, "parallelism", "tensor_parallel_degree");
    let dp = int(&t, "parallelism", "data_parallel_shard_degree")
        * int(&t, "parallelism", "data_parallel_replicate_degree");
    assert_eq!(pp * tp * dp, 4, "{text}");
    if pp > 1 {
        let s = t["parallelism"]["pipeline_parallel_schedule"]
            .as_str()
            .unwrap();
        assert!(
            ["GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"].contains(&s),
            "{s}"
        );
    }
}

#[test]
fn deepspeed_json_has_the_stage_and_batch_identity() {
    for (planner, stage) in [("fsdp", 3), ("zero2", 2), ("ddp", 0)] {
        let (_, text) = export(
            "deepspeed",
            &format!("export-{planner}.json"),
            &[
                &[
                    "--planner",
                    planner,
                    "--global-batch",
                    "8",
                    "--model",
                    "llama2-3b",
                ][..],
                FOUR_A100,
            ]
            .concat(),
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["zero_optimization"]["stage"], stage, "{planner}: {text}");
        let (b, m, n) = (
            v["train_batch_size"].as_u64().unwrap(),
            v["train_micro_batch_size_per_gpu"].as_u64().unwrap(),
            v["gradient_accumulation_steps"].as_u64().unwrap(),
        );
        assert_eq!(
            b,
            m * n * 4,
            "{planner}: train_batch_size = micro x accumulation x world"
        );
        assert_eq!(b, 8);
        assert_eq!(v["fp16"]["enabled"], true, "the default dtype is fp16");
        let c = &v["_cephalo"];
        assert!(c["ignored_by_deepspeed"].is_string());
        assert!(c["planned"]["iteration_ms"].as_f64().unwrap() > 0.0);
        assert!(c["notes"].is_array());
    }
}

#[test]
fn deepspeed_offload_is_the_zero_offload_section() {
    let (_, text) = export(
        "deepspeed",
        "export-offload.json",
        &[
            &[
                "--planner",
                "fsdp",
                "--global-batch",
                "8",
                "--offload",
                "optimizer",
            ][..],
            FOUR_A100,
        ]
        .concat(),
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["zero_optimization"]["offload_optimizer"]["device"], "cpu",
        "{text}"
    );
}

#[test]
fn accelerate_yaml_parses_back() {
    for (planner, kind, sharding) in [
        ("fsdp", "FSDP", Some("FULL_SHARD")),
        ("zero2", "FSDP", Some("SHARD_GRAD_OP")),
        ("ddp", "MULTI_GPU", None),
    ] {
        let (_, text) = export(
            "accelerate",
            &format!("export-{planner}.yaml"),
            &[
                &[
                    "--planner",
                    planner,
                    "--global-batch",
                    "8",
                    "--model",
                    "llama2-3b",
                ][..],
                FOUR_A100,
            ]
            .concat(),
        );
        let y: serde_norway::Value =
            serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(y["compute_environment"].as_str(), Some("LOCAL_MACHINE"));
        assert_eq!(y["distributed_type"].as_str(), Some(kind), "{text}");
        assert_eq!(y["num_processes"].as_u64(), Some(4));
        assert_eq!(y["num_machines"].as_u64(), Some(1));
        assert_eq!(y["mixed_precision"].as_str(), Some("fp16"));
        match sharding {
            Some(s) => {
                let f = &y["fsdp_config"];
                assert_eq!(f["fsdp_sharding_strategy"].as_str(), Some(s));
                assert_eq!(
                    f["fsdp_auto_wrap_policy"].as_str(),
                    Some("TRANSFORMER_BASED_WRAP")
                );
                assert!(f["fsdp_activation_checkpointing"].as_bool().is_some());
            }
            None => assert!(y.get("fsdp_config").is_none()),
        }
    }
}

#[test]
fn an_uneven_plan_says_what_is_lost_and_simulates_the_approximation() {
    let path = tmp("export-uneven.toml");
    let p = path.to_str().unwrap();
    let o = run(&[
        &[
            "plan",
            "--model",
            "llama2-7b",
            "--planner",
            "cephalo",
            "--global-batch",
            "14",
        ][..],
        UNEVEN,
        &[
            "--export",
            "torchtitan",
            "--export-out",
            p,
            "--format",
            "json",
        ],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let batches: Vec<u64> = v["batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert!(
        batches.iter().min() != batches.iter().max(),
        "the plan is uneven: {batches:?}"
    );
    let e = &v["export"];
    assert_eq!(e["framework"], "torchtitan");
    let notes: Vec<&str> = e["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let has = |s: &str| notes.iter().any(|n| n.contains(s));
    assert!(has("uneven per-GPU batches"), "{notes:?}");
    assert!(has("uneven state shards"), "{notes:?}");
    assert!(has("not a multiple of the 4 GPUs"), "{notes:?}");
    // The approximation: 14 over 4 GPUs, the first two one more.
    let ab: Vec<u64> = e["approximation_batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(ab, [4, 4, 3, 3]);
    assert_eq!(
        e["strategy"]["accumulation"], "sync",
        "torchtitan reduces every micro-batch"
    );
    assert_eq!(
        e["planned"]["iteration_ms"].as_f64(),
        v["simulated"]["iteration_ms"].as_f64(),
        "the plan's side is the plan's simulation"
    );
    let a = &e["approximated"];
    assert!(a["iteration_ms"].as_f64().unwrap() > 0.0);
    if a["oom"] == true {
        assert!(has("the approximation runs out of memory"), "{notes:?}");
        assert!(o.stderr.contains("runs out of memory"), "{}", o.stderr);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    check_torchtitan(&text);
    for n in &notes {
        assert!(text.contains(n), "the config's comments carry `{n}`");
    }
    assert!(
        o.stderr.contains("export: the plan (cephalo, simulated)"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("export: as torchtitan runs it"),
        "{}",
        o.stderr
    );
}

#[test]
fn export_to_stdout_replaces_the_table() {
    let o = run(&[
        &[
            "plan",
            "--model",
            "llama2-7b",
            "--planner",
            "fsdp",
            "--global-batch",
            "8",
        ][..],
        FOUR_A100,
        &["--export", "torchtitan", "--export-out", "-"],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    check_torchtitan(&o.stdout);
}

#[test]
fn bad_export_requests_exit_2() {
    let base = [
        &["plan", "--model", "llama2-7b", "--global-batch", "8"][..],
        FOUR_A100,
    ]
    .concat();
    let out = tmp("export-bad.cfg");
    let p = out.to_str().unwrap();
    let o = run(&[
        &base[..],
        &["--planner", "fsdp", "--export", "nemo", "--export-out", p],
    ]
    .concat());
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("--export")
            && o.stderr
                .contains("torchtitan, megatron, deepspeed, accelerate"),
        "{}",
        o.stderr
    );
    let o = run(&[&base[..], &["--planner", "fsdp", "--export", "torchtitan"]].concat());
    assert_eq!(o.code, 2, "--export needs --export-out");
    assert!(o.stderr.contains("--export-out"), "{}", o.stderr);
    let o = run(&[
        &base[..],
        &[
            "--planner",
            "megatron",
            "--export",
            "accelerate",
            "--export-out",
            p,
        ],
    ]
    .concat());
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("accelerate cannot run a pipeline plan"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_heterogeneous_pipeline_is_approximated_by_equal_stages() {
    let path = tmp("export-hetero3d.toml");
    let p = path.to_str().unwrap();
    let o = run(&[
        &[
            "plan",
            "--model",
            "llama2-7b",
            "--planner",
            "hetero-3d",
            "--global-batch",
            "14",
        ][..],
        UNEVEN,
        &[
            "--export",
            "torchtitan",
            "--export-out",
            p,
            "--format",
            "json",
        ],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    let e = &v["export"];
    let notes = e["notes"].to_string();
    if v["pipeline"].is_null() {
        return; // the planner found no pipeline here: nothing to approximate
    }
    assert!(notes.contains("runs equal stages"), "{notes}");
    // A pipeline reduces once per iteration: the approximation keeps no-sync.
    assert_eq!(e["strategy"]["accumulation"], "no-sync");
    assert!(e["approximated"].is_object(), "simulated: {notes}");
    let t = check_torchtitan(&std::fs::read_to_string(&path).unwrap());
    let s = &e["shape"];
    assert_eq!(
        int(&t, "parallelism", "pipeline_parallel_degree"),
        s["pp"].as_i64().unwrap()
    );
    let (pp, tp, dp) = (
        s["pp"].as_u64().unwrap(),
        s["tp"].as_u64().unwrap(),
        s["dp_replicate"].as_u64().unwrap() * s["dp_shard"].as_u64().unwrap(),
    );
    assert_eq!(pp * tp * dp, 4, "{s}");
}

#[test]
fn hybrid_sharding_is_replicas_of_shard_groups() {
    let nodes = [
        "--planner",
        "hsdp",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--gpu",
        "a100-80gb",
        "--model",
        "llama2-3b",
        "--global-batch",
        "8",
    ];
    let (_, text) = export("torchtitan", "export-hsdp.toml", &nodes);
    let t = check_torchtitan(&text);
    assert_eq!(int(&t, "parallelism", "data_parallel_replicate_degree"), 2);
    assert_eq!(int(&t, "parallelism", "data_parallel_shard_degree"), 2);
    let (o, text) = export("deepspeed", "export-hsdp.json", &nodes);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["zero_optimization"]["stage"], 3);
    assert_eq!(v["zero_optimization"]["zero_hpz_partition_size"], 2);
    assert!(o.stderr.contains("hpZ"), "{}", o.stderr);
    let (_, text) = export("accelerate", "export-hsdp.yaml", &nodes);
    let y: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(
        y["fsdp_config"]["fsdp_sharding_strategy"].as_str(),
        Some("HYBRID_SHARD")
    );
    assert_eq!(y["num_machines"].as_u64(), Some(2));
}

#[test]
fn a_layered_plan_names_every_loss_and_the_framework_accumulation() {
    let o = run(&[
        &[
            "plan",
            "--model",
            "llama2-7b",
            "--planner",
            "cephalo",
            "--accumulation",
            "layered",
            "--global-batch",
            "64",
        ][..],
        UNEVEN,
        &[
            "--export",
            "accelerate",
            "--export-out",
            tmp("export-layered.yaml").to_str().unwrap(),
            "--format",
            "json",
        ],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["strategy"]["accumulation"], "layered");
    let notes = v["export"]["notes"].to_string();
    let micro: Vec<u64> = v["microbatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    if micro.iter().any(|&n| n > 1) {
        assert!(notes.contains("layered gradient accumulation"), "{notes}");
        assert!(notes.contains("under no_sync()"), "{notes}");
    }
    if micro.iter().min() != micro.iter().max() {
        assert!(notes.contains("per-GPU micro-batch counts"), "{notes}");
    }
    assert_eq!(v["export"]["strategy"]["accumulation"], "no-sync");
    let ab: Vec<u64> = v["export"]["approximation_batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(ab, [16, 16, 16, 16]);
}

/// Megatron-Core 0.16.1's config fields the exported arguments set
/// (dashes to underscores), read from its wheel (`pip download
/// megatron-core==0.16.1 --no-deps`): `TransformerConfig`,
/// `ModelParallelConfig`, `DistributedDataParallelConfig`. Megatron-LM's
/// `arguments.py` copies every argument named as a field into them.
const MEGATRON_CORE_FIELDS: &[&str] = &[
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "kv_channels",
    "num_query_groups",
    "normalization",
    "recompute_granularity",
    "recompute_method",
    "recompute_num_layers",
    "attention_backend",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_grouped_gemm",
    "moe_token_dispatcher_type",
    "moe_router_load_balancing_type",
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "sequence_parallel",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "bf16",
    "fp16",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "use_distributed_optimizer",
];

/// Megatron-LM's own training-script arguments the export writes, which
/// map onto no config field by name (Megatron-LM's `arguments.py` is not
/// on a package registry, so this list is the export's claim, each with
/// where it lands): `num_experts` -> `num_moe_experts`, `swiglu` ->
/// `gated_linear_unit`, `disable_bias_linear` -> `add_bias_linear`,
/// `group_query_attention` (enables `num_query_groups`), the rest read by
/// the model builder, the data loader and the schedule.
const MEGATRON_LM_ARGS: &[&str] = &[
    "num_experts",
    "swiglu",
    "disable_bias_linear",
    "group_query_attention",
    "untie_embeddings_and_output_weights",
    "position_embedding_type",
    "seq_length",
    "max_position_embeddings",
    "tokenizer_type",
    "vocab_size",
    "micro_batch_size",
    "global_batch_size",
    "num_layers_per_virtual_pipeline_stage",
    "accumulate_allreduce_grads_in_fp32",
];

/// The `MEGATRON_ARGS` array of an exported script as bash reads it (the
/// script sourced, the array printed one word per line), as flag -> value
/// (empty for a switch); every flag checked against Megatron's names and
/// every choice against the values Megatron-Core 0.16.1 declares.
fn megatron_args(path: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg("set -eu; source \"$1\"; printf '%s\\n' \"${MEGATRON_ARGS[@]}\"")
        .arg("bash")
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let words: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut args = std::collections::BTreeMap::new();
    let mut i = 0;
    while i < words.len() {
        let flag = &words[i];
        assert!(flag.starts_with("--"), "word `{flag}` is not a flag");
        let name = flag.trim_start_matches("--").replace('-', "_");
        assert!(
            MEGATRON_CORE_FIELDS.contains(&name.as_str())
                || MEGATRON_LM_ARGS.contains(&name.as_str()),
            "{flag} is neither a Megatron-Core config field nor a known Megatron-LM argument"
        );
        let value = match words.get(i + 1) {
            Some(v) if !v.starts_with("--") => {
                i += 1;
                v.clone()
            }
            _ => String::new(),
        };
        assert!(args.insert(name, value).is_none(), "{flag} twice");
        i += 1;
    }
    for (key, allowed) in [
        (
            "attention_backend",
            &["flash", "fused", "unfused", "local", "auto"][..],
        ),
        ("normalization", &["LayerNorm", "RMSNorm"]),
        ("recompute_granularity", &["full", "selective"]),
        ("recompute_method", &["uniform", "block"]),
        (
            "moe_token_dispatcher_type",
            &["allgather", "alltoall", "flex"],
        ),
        (
            "moe_router_load_balancing_type",
            &["aux_loss", "seq_aux_loss", "sinkhorn", "none"],
        ),
    ] {
        if let Some(v) = args.get(key) {
            assert!(allowed.contains(&v.as_str()), "{key} = {v}");
        }
    }
    args
}

fn num(args: &std::collections::BTreeMap<String, String>, key: &str) -> u64 {
    args.get(key)
        .unwrap_or_else(|| panic!("no --{key}"))
        .parse()
        .unwrap_or_else(|_| panic!("--{key} is not a count"))
}

/// The Megatron-LM export of an expert-parallel plan: only Megatron's
/// names, the degrees multiplying to the world, the batch identity
/// Megatron asserts (global a multiple of micro x DP), EP dividing the
/// experts and the replicas, the model's shapes, and the approximation
/// simulated beside the plan.
#[test]
fn megatron_export_of_an_expert_parallel_plan_states_megatrons_arguments() {
    let path = tmp("export-megatron-moe.sh");
    let o = run(&[
        &[
            "plan",
            "--export",
            "megatron",
            "--export-out",
            path.to_str().unwrap(),
        ][..],
        OLMOE_2X8_H100,
        &["--planner", "megatron", "--ep", "4"],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("#!/usr/bin/env bash\n"), "{text}");
    assert!(
        text.contains("# as megatron runs it (simulated): "),
        "{text}"
    );
    let a = megatron_args(&path);
    let (tp, pp) = (
        num(&a, "tensor_model_parallel_size"),
        num(&a, "pipeline_model_parallel_size"),
    );
    assert_eq!(16 % (tp * pp), 0, "TP {tp} x PP {pp} on 16 GPUs");
    let dp = 16 / (tp * pp);
    assert_eq!(num(&a, "global_batch_size"), 64);
    assert_eq!(64 % (num(&a, "micro_batch_size") * dp), 0);
    assert_eq!(num(&a, "expert_model_parallel_size"), 4);
    assert_eq!(dp % 4, 0, "EP 4 inside DP {dp}");
    assert_eq!(num(&a, "num_experts"), 64);
    assert_eq!(num(&a, "moe_router_topk"), 8);
    assert_eq!(num(&a, "moe_ffn_hidden_size"), 1024);
    assert_eq!(a["moe_token_dispatcher_type"], "alltoall");
    assert_eq!(num(&a, "num_layers"), 16);
    assert_eq!(num(&a, "hidden_size"), 2048);
    assert_eq!(num(&a, "seq_length"), 4096);
    assert!(a.contains_key("bf16") && a.contains_key("swiglu"));
    if tp > 1 {
        assert!(a.contains_key("sequence_parallel"), "MoE with TP needs SP");
    }
}

/// A dense data-parallel plan to Megatron-LM: replicas or the distributed
/// optimizer, no MoE arguments, full recompute as Megatron spells it, and
/// the batch identity.
#[test]
fn megatron_export_of_a_data_parallel_plan() {
    for (planner, distributed) in [("ddp", false), ("zero2", true)] {
        let file = format!("export-megatron-{planner}.sh");
        let (_, text) = export(
            "megatron",
            &file,
            &[
                &[
                    "--planner",
                    planner,
                    "--global-batch",
                    "8",
                    "--dtype",
                    "bf16",
                ][..],
                FOUR_A100,
            ]
            .concat(),
        );
        assert!(
            text.contains("# as megatron runs it (simulated): "),
            "{text}"
        );
        let a = megatron_args(&tmp(&file));
        assert_eq!(
            a.contains_key("use_distributed_optimizer"),
            distributed,
            "{planner}"
        );
        assert!(
            !a.keys()
                .any(|k| k.contains("expert") || k.starts_with("moe")),
            "{a:?}"
        );
        assert_eq!(num(&a, "tensor_model_parallel_size"), 1);
        assert_eq!(num(&a, "pipeline_model_parallel_size"), 1);
        assert_eq!(8 % (num(&a, "micro_batch_size") * 4), 0);
        if let Some(g) = a.get("recompute_granularity") {
            assert!(
                g == "selective" || a.contains_key("recompute_method"),
                "{a:?}"
            );
        }
    }
}

/// A mixed-GPU MoE plan (`hetero-3d`, stages per GPU type) exported to
/// Megatron-LM: equal stages, expert parallelism carried into them where
/// the replicas take it, and the config states the degree the simulated
/// approximation runs.
#[test]
fn megatron_export_of_a_mixed_gpu_moe_plan_keeps_expert_parallelism() {
    let cluster = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/clusters/h100-a100-64-hgx.toml");
    let path = tmp("export-megatron-hetero.sh");
    let o = run(&[
        "plan",
        "--export",
        "megatron",
        "--export-out",
        path.to_str().unwrap(),
        "--cluster",
        cluster.to_str().unwrap(),
        "--model",
        "mixtral-8x7b",
        "--global-batch",
        "512",
        "--seq-len",
        "4096",
        "--dtype",
        "bf16",
        "--planner",
        "hetero-3d",
        "--ep",
        "8",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("megatron runs equal stages: approximated as"),
        "{text}"
    );
    let a = megatron_args(&path);
    let ep = num(&a, "expert_model_parallel_size");
    let note = text
        .lines()
        .find(|l| l.contains("approximated as TP"))
        .unwrap();
    assert!(note.contains(&format!("x EP {ep},")), "{note}");
    let dp = 64 / (num(&a, "tensor_model_parallel_size") * num(&a, "pipeline_model_parallel_size"));
    assert_eq!(dp % ep, 0);
    assert!(
        text.contains("# as megatron runs it (simulated): "),
        "{text}"
    );
}

/// A pinned all-gather dispatcher: Megatron-LM's export states it (the
/// approximation runs it), torchtitan's says it runs all-to-all instead;
/// one the simulator does not model (Megatron's `flex`, DeepEP's) is refused
/// naming the flag.
#[test]
fn the_token_dispatcher_is_exported_where_the_framework_has_it() {
    let args = |framework: &str, file: &std::path::Path, dispatcher: &str| {
        run(&[
            &[
                "plan",
                "--export",
                framework,
                "--export-out",
                file.to_str().unwrap(),
            ][..],
            OLMOE_2X8_H100,
            &[
                "--planner",
                "megatron",
                "--ep",
                "4",
                "--moe-dispatcher",
                dispatcher,
            ],
        ]
        .concat())
    };
    let path = tmp("export-megatron-allgather.sh");
    let o = args("megatron", &path, "allgather");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        megatron_args(&path)["moe_token_dispatcher_type"],
        "allgather"
    );
    let toml = tmp("export-torchtitan-allgather.toml");
    let o = args("torchtitan", &toml, "allgather");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("the plan's allgather dispatcher is exported and simulated as all-to-all"),
        "{}",
        o.stderr
    );
    let o = args("megatron", &path, "flex");
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--moe-dispatcher"), "{}", o.stderr);
}
