//! Mixture-of-experts models: every built-in one against the total and
//! active parameter counts its maker published, FLOPs per token against
//! hand counts, Hugging Face configs of each `model_type` into the same
//! fields, and the simulator's refusal naming what it does not price.

use sim::cluster::Cluster;
use sim::cost::{CostOptions, Workload};
use sim::gpu::GpuCatalog;
use sim::hf_config::from_hf_config;
use sim::model::{ModelCatalog, ModelSpec};
use sim::precision::NumFormat;

fn model(name: &str) -> &'static ModelSpec {
    ModelCatalog::builtin().lookup(name, "test").unwrap()
}

/// Whether `ours` rounds to the published figure: within half a unit of
/// its last digit, plus 0.5% for what makers round or leave out (norms,
/// small biases, Qwen3's per-head q/k norms).
fn matches_published(ours: u64, published_billions: f64, last_digit_billions: f64) -> bool {
    let b = ours as f64 / 1e9;
    (b - published_billions).abs() <= last_digit_billions / 2.0 + 0.005 * published_billions
}

#[test]
fn every_builtin_moe_model_has_its_published_total_and_active_counts() {
    // (model, total B, its last digit, active B, its last digit), each from
    // the announcement profiles/models.toml cites beside the entry.
    let published = [
        ("mixtral-8x7b", 46.7, 0.1, 12.9, 0.1),
        ("qwen3-30b-a3b", 30.5, 0.1, 3.3, 0.1),
        ("qwen3-235b-a22b", 235.0, 1.0, 22.0, 1.0),
        ("deepseek-v2", 236.0, 1.0, 21.0, 1.0),
        ("deepseek-v3", 671.0, 1.0, 37.0, 1.0),
        ("llama4-maverick", 400.0, 1.0, 17.0, 1.0),
        ("olmoe-1b-7b", 6.9, 0.1, 1.3, 0.1),
        ("grok-1", 314.0, 1.0, f64::NAN, 0.0),
    ];
    for (name, total, td, active, ad) in published {
        let m = model(name);
        assert!(m.moe.is_some(), "{name} has experts");
        assert!(
            matches_published(m.total_params(), total, td),
            "{name}: {} total, published {total}B",
            m.total_params()
        );
        if active.is_finite() {
            assert!(
                matches_published(m.active_params(), active, ad),
                "{name}: {} active, published {active}B",
                m.active_params()
            );
        }
        assert!(m.active_params() < m.total_params(), "{name}");
    }
    // OpenAI's card counts active weights without the input embedding.
    for (name, total, active) in [("gpt-oss-120b", 116.8, 5.1), ("gpt-oss-20b", 20.9, 3.6)] {
        let m = model(name);
        assert!(matches_published(m.total_params(), total, 0.1), "{name}");
        let active_without_embedding = m.active_params() - m.embedding_params();
        assert!(
            matches_published(active_without_embedding, active, 0.1),
            "{name}: {active_without_embedding}"
        );
    }
    // DeepSeek-V3's prediction module: 11.5B of its own (685B on the hub
    // = 671B + 14B with its copies of the embedding and head).
    let v3 = model("deepseek-v3");
    let mtp = v3.mtp_params() as f64 / 1e9;
    assert!((mtp - 11.6).abs() < 0.1, "{mtp}");
    assert!(
        ((v3.total_params() as f64 / 1e9 + mtp + 2.0 * 129_280.0 * 7168.0 / 1e9) - 685.0).abs()
            < 1.0
    );
}

#[test]
fn flops_per_token_follow_the_active_weights_and_the_attention() {
    // Mixtral at 4,096 tokens, by hand: every matmul weight a token meets
    // twice, plus 4 x (heads x head_dim) per key per block.
    let m = model("mixtral-8x7b");
    let f = m.flops_per_token_fwd(4096);
    let (h, l) = (4096.0, 32.0);
    let attn_proj = l * 2.0 * (2.0 * h * h + 2.0 * h * 1024.0);
    let routed = l * 2.0 * 2.0 * 3.0 * h * 14336.0;
    let router = l * 2.0 * h * 8.0;
    let core = l * 4.0 * h * 4096.0;
    let head = 2.0 * h * 32000.0;
    assert_eq!(f.attention_proj, attn_proj);
    assert_eq!(f.routed_experts, routed);
    assert_eq!(f.router, router);
    assert_eq!(f.attention_core, core);
    assert_eq!(f.head, head);
    assert_eq!((f.dense_mlp, f.shared_experts), (0.0, 0.0));
    // The matmul FLOPs are twice the active weights outside the embedding.
    let matmuls = f.total() - f.attention_core;
    let norms = l * 2.0 * h + h;
    let active = (m.active_params() - m.embedding_params()) as f64 - norms;
    assert!(
        (matmuls - 2.0 * active).abs() < 1.0,
        "{matmuls} vs {}",
        2.0 * active
    );

    // DeepSeek-V3: (8 + 1) x 2,048 = the dense width, so an expert block's
    // expert GEMMs cost what a dense block's MLP does; latent attention's
    // core is 2 x 128 x (192 + 128) per key.
    let v3 = model("deepseek-v3");
    let f = v3.flops_per_token_fwd(4096);
    let per_dense_block = f.dense_mlp / 3.0;
    let per_moe_block = (f.routed_experts + f.shared_experts) / 58.0;
    assert!((per_dense_block - per_moe_block).abs() < 1.0);
    assert_eq!(f.attention_core, 61.0 * 81_920.0 * 4096.0);
    // GPT-OSS: half the blocks see 128 keys, not 4,096.
    let oss = model("gpt-oss-120b");
    let f = oss.flops_per_token_fwd(4096);
    assert_eq!(
        f.attention_core,
        4.0 * 4096.0 * (18.0 * 4096.0 + 18.0 * 128.0)
    );
}

/// Llama-3-8B's shape with its MLP as one expert each token always picks.
fn one_expert_twin(dense: &ModelSpec) -> ModelSpec {
    let text = format!(
        "[[model]]\nname = \"{}\"\nfamily = \"llama\"\nlayers = {}\nhidden = {}\nheads = {}\nkv_heads = {}\nvocab = {}\nseq_len = 8192\nexperts = 1\ntop_k = 1\nexpert_ffn = {}\n",
        dense.name, dense.layers, dense.hidden, dense.heads, dense.kv_heads, dense.vocab, dense.ffn
    );
    let cat = ModelCatalog::from_toml(&text, "one.toml").unwrap();
    cat.lookup(&dense.name, "t").unwrap().clone()
}

#[test]
fn a_one_expert_model_counts_as_its_dense_twin() {
    let dense = model("llama3-8b");
    let one = one_expert_twin(dense);
    assert_eq!(one.total_params(), dense.total_params());
    assert_eq!(one.active_params(), one.total_params());
    assert_eq!(one.params_per_block(), dense.params_per_block());
    let (a, b) = (
        one.flops_per_token_fwd(8192),
        dense.flops_per_token_fwd(8192),
    );
    assert_eq!(a.routed_experts, b.dense_mlp);
    assert_eq!((a.router, a.total()), (0.0, b.total()));
    // Two experts of half the width, both visited: the same FLOPs through
    // the experts, plus a router.
    let mut two = one.clone();
    let m = two.moe.as_mut().unwrap();
    (m.experts, m.top_k, m.expert_ffn) = (2, 2, dense.ffn / 2);
    let t = two.flops_per_token_fwd(8192);
    assert_eq!(t.routed_experts, b.dense_mlp);
    assert_eq!(t.router, 32.0 * 2.0 * 4096.0 * 2.0);
}

/// Simulates `model` on 8 H100 (one NVSwitch node) with FSDP, 4,096
/// tokens per sample, two micro-batches of one sample per GPU, on the
/// calibrated performance model; the report as JSON.
fn simulate_fsdp(model: &ModelSpec) -> serde_json::Value {
    let cluster = Cluster::from_toml(
        "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [ { type = \"h100\", count = 8 } ]\n",
        "test.toml",
        GpuCatalog::builtin(),
    )
    .unwrap();
    let w = Workload {
        cluster,
        model: model.clone(),
        seq_len: 4096,
        dtype: NumFormat::Bf16,
        global_batch: 16,
    };
    let costs = sim::cost::CostModel::build(
        w,
        &sim::profile::ProfileSet::new(),
        &sim::perfmodel::Calibrated::builtin(),
        CostOptions::default(),
    )
    .unwrap();
    let strategy = sim::strategy::Strategy {
        sharding: sim::strategy::Sharding::Full,
        ..sim::strategy::Strategy::cephalo(8, sim::strategy::Attention::Flash)
    };
    let plan = sim::plan::Plan::from_lists(&[2; 8], &[2; 8], None, "t")
        .unwrap()
        .with_strategy(strategy);
    let r = sim::simulate::simulate(&costs, &plan, &sim::iteration::SimOptions::default()).unwrap();
    serde_json::from_str(&r.to_json()).unwrap()
}

#[test]
fn a_one_expert_model_simulates_as_its_dense_twin_and_experts_cost_what_they_should() {
    let dense = model("llama3-8b");
    let (a, b) = (simulate_fsdp(dense), simulate_fsdp(&one_expert_twin(dense)));
    assert_eq!(a, b, "identical reports, field by field");
    // Four experts of the dense width, top-2: each token runs twice the
    // dense MLP, and every block holds four times its weights.
    let mut moe = one_expert_twin(dense);
    let m = moe.moe.as_mut().unwrap();
    (m.experts, m.top_k) = (4, 2);
    let r = simulate_fsdp(&moe);
    let ms = |v: &serde_json::Value| v["iteration_ms"].as_f64().unwrap();
    let flop = |v: &serde_json::Value| v["model_tflop"].as_f64().unwrap();
    // The model FLOPs grow by one more expert and the router per token and
    // block, forward and backward (3 x 2 x weights x tokens).
    let tokens = 16.0 * 4096.0;
    let extra = 6.0 * (3.0 * 4096.0 * 14336.0 + 4096.0 * 4.0) * 32.0 * tokens / 1e12;
    assert!(
        (flop(&r) - flop(&a) - extra).abs() < 1e-6 * flop(&r),
        "{} vs {} + {extra}",
        flop(&r),
        flop(&a)
    );
    assert!(ms(&r) > ms(&a) * 1.4, "{} vs {}", ms(&r), ms(&a));
}

#[test]
fn hugging_face_configs_of_every_moe_type_load_into_the_same_fields() {
    // The shape keys of each model's config.json on the hub.
    let mixtral = r#"{"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 32768, "vocab_size": 32000, "num_local_experts": 8,
        "num_experts_per_tok": 2, "sliding_window": null, "tie_word_embeddings": false}"#;
    let qwen3_moe = r#"{"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
        "max_position_embeddings": 40960, "use_sliding_window": false, "sliding_window": null,
        "tie_word_embeddings": false}"#;
    let deepseek_v3 = r#"{"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
        "vocab_size": 129280, "max_position_embeddings": 163840, "n_group": 8, "topk_group": 4,
        "tie_word_embeddings": false}"#;
    let llama4 = r#"{"model_type": "llama4", "vision_config": {"hidden_size": 1408},
        "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
        "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "attention_chunk_size": 8192, "vocab_size": 202048,
        "max_position_embeddings": 1048576}}"#;
    let types: Vec<String> = (0..36)
        .map(|i| {
            if i % 2 == 0 {
                "\"sliding_attention\"".to_string()
            } else {
                "\"full_attention\"".to_string()
            }
        })
        .collect();
    let gpt_oss = format!(
        r#"{{"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_hidden_layers": 36, "num_local_experts": 128, "num_experts_per_tok": 4,
        "sliding_window": 128, "layer_types": [{}], "vocab_size": 201088,
        "max_position_embeddings": 131072, "tie_word_embeddings": false}}"#,
        types.join(", ")
    );
    let olmoe = r#"{"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
        "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 16,
        "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304,
        "max_position_embeddings": 4096}"#;
    for (text, builtin) in [
        (mixtral.to_string(), "mixtral-8x7b"),
        (qwen3_moe.to_string(), "qwen3-30b-a3b"),
        (deepseek_v3.to_string(), "deepseek-v3"),
        (llama4.to_string(), "llama4-maverick"),
        (gpt_oss, "gpt-oss-120b"),
        (olmoe.to_string(), "olmoe-1b-7b"),
    ] {
        let m = from_hf_config(&text, "config.json", builtin).unwrap();
        let b = model(builtin);
        assert_eq!(m.moe, b.moe, "{builtin}");
        assert_eq!(m.mla, b.mla, "{builtin}");
        assert_eq!(
            (
                m.head_dim(),
                m.sliding_window,
                m.sliding_layers,
                m.mtp_layers
            ),
            (
                b.head_dim(),
                b.sliding_window,
                b.sliding_layers,
                b.mtp_layers
            ),
            "{builtin}"
        );
        assert_eq!(m.total_params(), b.total_params(), "{builtin}");
        assert_eq!(m.active_params(), b.active_params(), "{builtin}");
    }
}

#[test]
fn configs_the_model_cannot_represent_are_refused_naming_the_key() {
    let qwen = r#"{"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
        "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_hidden_layers": 24,
        "num_experts": 60, "num_experts_per_tok": 4, "shared_expert_intermediate_size": 5632,
        "mlp_only_layers": [0, 5], "vocab_size": 151936, "max_position_embeddings": 8192}"#;
    let cases = [
        (qwen.to_string(), "mlp_only_layers"),
        (
            qwen.replace("\"mlp_only_layers\": [0, 5], ", "")
                .replace(
                    "\"num_experts\": 60",
                    "\"num_experts\": 60, \"num_experts_per_tok\": 61",
                )
                .replace("\"num_experts_per_tok\": 4, ", ""),
            "top_k",
        ),
        (
            r#"{"model_type": "llama", "num_local_experts": 8}"#.to_string(),
            "num_local_experts",
        ),
        (
            r#"{"model_type": "deepseek_v3", "moe_layer_freq": 2}"#.to_string(),
            "moe_layer_freq",
        ),
        (
            r#"{"model_type": "llama4", "hidden_size": 5120}"#.to_string(),
            "text_config",
        ),
    ];
    for (text, key) in cases {
        let e = from_hf_config(&text, "cfg.json", "m")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cfg.json") && e.contains(key), "{key}: {e}");
    }
    // Qwen1.5-MoE-A2.7B's config without the listed dense blocks loads,
    // with its one 5,632-wide shared expert.
    let ok = qwen.replace("\"mlp_only_layers\": [0, 5], ", "");
    let m = from_hf_config(&ok, "cfg.json", "qwen1.5-moe").unwrap();
    let moe = m.moe.unwrap();
    assert_eq!((moe.shared_experts, moe.shared_expert_ffn), (1, 5632));
}

#[test]
fn catalog_entries_with_impossible_experts_name_the_field() {
    let base = "[[model]]\nname = \"m\"\nfamily = \"llama\"\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 100\nseq_len = 32\n";
    for (extra, field) in [
        ("experts = 8\ntop_k = 9\nexpert_ffn = 32\n", "top_k"),
        ("experts = 8\nexpert_ffn = 32\n", "top_k"),
        ("top_k = 2\nffn = 32\n", "top_k"),
        (
            "experts = 8\ntop_k = 2\nexpert_ffn = 32\nmoe_layers = \"after:4\"\n",
            "moe_layers",
        ),
        (
            "experts = 8\ntop_k = 2\nexpert_ffn = 32\nmoe_layers = \"every:0\"\n",
            "moe_layers",
        ),
        (
            "experts = 8\ntop_k = 2\nexpert_ffn = 32\ncapacity_factor = -1.0\n",
            "capacity_factor",
        ),
        ("ffn = 32\nattention = \"mla\"\n", "kv_lora_rank"),
        ("ffn = 32\nkv_lora_rank = 16\n", "kv_lora_rank"),
        ("ffn = 32\nsliding_layers = \"all\"\n", "sliding_layers"),
        ("ffn = 32\nmtp_layers = 5\n", "mtp_layers"),
    ] {
        let e = ModelCatalog::from_toml(&format!("{base}{extra}"), "cat.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cat.toml") && e.contains(field), "{field}: {e}");
    }
    let gpt = "[[model]]\nname = \"g\"\nfamily = \"gpt\"\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 100\nseq_len = 32\nexperts = 8\ntop_k = 2\nexpert_ffn = 32\n";
    let e = ModelCatalog::from_toml(gpt, "cat.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("experts") && e.contains("gpt"), "{e}");
}

#[test]
fn the_simulator_refuses_what_it_does_not_price_naming_it() {
    let gpus = GpuCatalog::builtin();
    let cluster = Cluster::from_gpu_list("h100,h100", "--gpus", gpus).unwrap();
    for (name, what) in [
        ("deepseek-v3", "dense and mixture-of-experts blocks mixed"),
        ("deepseek-v3", "latent attention"),
        ("llama4-maverick", "blocks mixed"),
        ("gpt-oss-120b", "128-token sliding window"),
    ] {
        let w = Workload {
            cluster: cluster.clone(),
            model: model(name).clone(),
            seq_len: 4096,
            dtype: NumFormat::Bf16,
            global_batch: 8,
        };
        let e = w.check(&CostOptions::default()).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains(what), "{e}");
    }
    // A window as long as the sequence changes nothing: Mistral-7B-v0.1's
    // 4,096-token window at 4,096 tokens is simulated.
    let mut m = model("mistral-7b-hf").clone();
    m.sliding_window = Some(4096);
    assert!(m.check_simulated(4096).is_ok());
    assert!(m
        .check_simulated(8192)
        .unwrap_err()
        .contains("sliding window"));
}

#[test]
fn a_capacity_factor_pads_every_expert_and_costs_hardware_flops_not_model_flops() {
    let dropless = model("olmoe-1b-7b").clone();
    let mut padded = dropless.clone();
    padded.moe.as_mut().unwrap().capacity_factor = Some(1.25);
    let (a, b) = (simulate_fsdp(&dropless), simulate_fsdp(&padded));
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    assert_eq!(f(&a, "model_tflop"), f(&b, "model_tflop"));
    let tokens = 16.0 * 4096.0;
    let extra = 0.25 * 6.0 * 8.0 * 3.0 * 2048.0 * 1024.0 * 16.0 * tokens / 1e12;
    let got = f(&b, "hardware_tflop") - f(&a, "hardware_tflop");
    assert!((got - extra).abs() < 1e-6 * extra, "{got} vs {extra}");
    assert!(f(&b, "iteration_ms") > f(&a, "iteration_ms"));
}
