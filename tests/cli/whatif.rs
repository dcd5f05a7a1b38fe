//! `cephalo whatif`: train-cost against the plan it comes from, prices that
//! are missing named, and min-gpus at the edge of what fits.

use crate::common::run;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let o = run(args);
    assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", o.stdout))
}

/// Days and dollars follow from the plan's simulated throughput and the
/// catalog's prices; a GPU without a price is named, exit 2.
#[test]
fn train_cost_follows_from_the_plan() {
    let w = [
        "--gpus",
        "a100-80gb,a100-80gb",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
    ];
    let c = json(
        &[
            &["whatif", "train-cost"][..],
            &w,
            &[
                "--tokens",
                "1e9",
                "--planner",
                "cephalo",
                "--format",
                "json",
            ],
        ]
        .concat(),
    );
    assert_eq!(c["format"], "cephalo-whatif/1");
    let p = json(
        &[
            &["plan", "--planner", "cephalo"][..],
            &w,
            &["--format", "json"],
        ]
        .concat(),
    );
    let tps = p["simulated"]["tokens_per_s"].as_f64().unwrap();
    assert!((c["tokens_per_s"].as_f64().unwrap() - tps).abs() < 1e-9 * tps);
    let days = 1e9 / tps / 86400.0;
    assert!((c["days"].as_f64().unwrap() - days).abs() < 1e-9 * days);
    let price = c["price_per_hour_usd"].as_f64().unwrap();
    assert!(price > 0.0);
    let usd = days * 24.0 * price;
    assert!((c["usd"].as_f64().unwrap() - usd).abs() < 1e-9 * usd);
    assert!((c["gpu_hours"].as_f64().unwrap() - days * 48.0).abs() < 1e-9 * days * 48.0);
    let t = run(&[&["whatif", "train-cost"][..], &w, &["--tokens", "1e9"]].concat());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.contains("USD") && t.stdout.contains("days"),
        "{}",
        t.stdout
    );

    let o = run(&[
        "whatif",
        "train-cost",
        "--gpus",
        "p40,p40",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--tokens",
        "1e9",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("p40") && o.stderr.contains("price"),
        "{}",
        o.stderr
    );
    let o = run(&[&["whatif", "train-cost"][..], &w, &["--tokens", "-5"]].concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--tokens"), "{}", o.stderr);
}

/// The count min-gpus gives fits (plan exits 0 without running out of
/// memory) and the candidate below it does not; without the node flags it
/// says what it needs.
#[test]
fn min_gpus_is_the_edge_of_what_fits() {
    let m = ["--model", "gpt-6.7b", "--global-batch", "32"];
    let v = json(
        &[
            &[
                "whatif",
                "min-gpus",
                "--nodes",
                "4",
                "--gpus-per-node",
                "4",
                "--gpu",
                "t4",
            ][..],
            &m,
            &["--format", "json"],
        ]
        .concat(),
    );
    let n = v["min_gpus"].as_u64().expect("some count of T4s fits 6.7B") as u32;
    let tried = v["tried"].as_array().unwrap();
    assert!(tried.iter().any(|t| t["gpus"] == n && t["fits"] == true));
    let fits = |k: u32| -> bool {
        let (nodes, per) = (k.div_ceil(4).to_string(), k.min(4).to_string());
        let o = run(&[
            &[
                "plan",
                "--planner",
                "cephalo",
                "--nodes",
                &nodes,
                "--gpus-per-node",
                &per,
                "--gpu",
                "t4",
            ][..],
            &m,
            &["--format", "json"],
        ]
        .concat());
        if o.code != 0 {
            return false;
        }
        let p: Value = serde_json::from_str(&o.stdout).unwrap();
        p["simulated"]["oom"] == false
    };
    assert!(fits(n), "{n} T4s said to fit");
    let below = sim::whatif::candidate_counts(4, 16)
        .into_iter()
        .filter(|&k| k < n)
        .max();
    if let Some(b) = below {
        assert!(!fits(b), "{b} T4s fit too: {n} is not the smallest");
    }
    let o = run(&[&["whatif", "min-gpus", "--gpus", "t4,t4"][..], &m].concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--nodes N --gpus-per-node G --gpu TYPE"),
        "{}",
        o.stderr
    );
}

/// `whatif fit` on a workload that does not fit: every row says why or
/// fits, the cheapest row fits, and replaying its flags with `plan` gives
/// the same plan that fits at the same throughput (the answer is what the
/// user then runs); a workload that fits says so.
#[test]
fn fit_names_a_change_that_plan_confirms() {
    let w = ["--model", "gpt-6.7b", "--global-batch", "32"];
    let cluster = ["--nodes", "1", "--gpus-per-node", "2", "--gpu", "t4"];
    let v = json(
        &[
            &["whatif", "fit", "--planner", "fsdp"][..],
            &cluster,
            &w,
            &["--format", "json"],
        ]
        .concat(),
    );
    assert_eq!(v["format"], "cephalo-whatif/1");
    assert_eq!(v["fits_as_asked"], false);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows[0]["change"], "as asked");
    for r in rows {
        assert!(
            r["fits"] == true || r["why"].as_str().is_some_and(|s| !s.is_empty()),
            "{r}"
        );
    }
    let i = v["cheapest"].as_u64().expect("some change fits") as usize;
    let best = &rows[i];
    assert_eq!(best["fits"], true);
    // Every fitting row costs at least as much per token as the cheapest.
    let usd = |r: &Value| r["usd_per_mtokens"].as_f64().unwrap();
    for r in rows.iter().filter(|r| r["fits"] == true) {
        assert!(usd(r) >= usd(best) - 1e-12, "{r} is cheaper than {best}");
    }
    // Replay: the row's flags with `plan`.
    let flags: Vec<&str> = best["flags"].as_str().unwrap().split_whitespace().collect();
    let mut args: Vec<&str> = vec!["plan", "--planner", "fsdp"];
    let mut cl: Vec<&str> = cluster.to_vec();
    if flags.first() == Some(&"--nodes") {
        cl[1] = flags[1];
    } else {
        args.extend(&flags);
    }
    args.extend(&cl);
    args.extend(&w);
    args.extend(["--format", "json"]);
    let p = json(&args);
    assert_eq!(p["simulated"]["oom"], false, "{args:?}");
    let tps = p["simulated"]["tokens_per_s"].as_f64().unwrap();
    let row_tps = best["tokens_per_s"].as_f64().unwrap();
    assert!((tps - row_tps).abs() < 1e-9 * tps, "{tps} vs {row_tps}");
    // As asked, the same plan runs out of memory.
    let o = run(&[
        &["plan", "--planner", "fsdp"][..],
        &cluster,
        &w,
        &["--format", "json"],
    ]
    .concat());
    if o.code == 0 {
        let p: Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(p["simulated"]["oom"], true);
    } else {
        assert_eq!(o.code, 2, "{}", o.stderr);
    }

    // Fits as asked: said in the table, no "cheapest change" needed.
    let o = run(&[
        &[
            "whatif",
            "fit",
            "--planner",
            "fsdp",
            "--gpus",
            "a100-80gb,a100-80gb",
        ][..],
        &["--model", "gpt-1.3b", "--global-batch", "8"],
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("fits as asked"), "{}", o.stdout);
    assert!(o.stdout.lines().all(|l| l.len() <= 200), "{}", o.stdout);
    let o = run(&[&["whatif", "fit", "--max-gpus", "0"][..], &cluster, &w].concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--max-gpus"), "{}", o.stderr);
}

/// `whatif memory`: the state is the model's parameters times the
/// strategy's bytes per parameter, split over the GPUs as the sharding
/// says; the peak is the one `simulate` gives for the same even plan; a
/// larger micro-batch needs more; a GPU "fits" exactly when its usable
/// memory covers the peak.
#[test]
fn memory_is_the_simulated_peak_of_an_even_plan() {
    let v = json(&[
        "whatif",
        "memory",
        "--model",
        "gpt-1.3b",
        "--seq-len",
        "2048",
        "--world-size",
        "4",
        "--microbatch-size",
        "1,4",
        "--format",
        "json",
    ]);
    assert_eq!(v["question"], "memory");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let f = |r: &Value, k: &str| r["per_gpu"][k].as_f64().unwrap();
    let total = rows[0]["state_total_gib"].as_f64().unwrap();
    let per_param = rows[0]["state_bytes_per_param"].as_f64().unwrap();
    let params = rows[0]["params"].as_f64().unwrap();
    assert!((total - params * per_param / (1u64 << 30) as f64).abs() < 1e-9 * total);
    assert!((f(&rows[0], "state_gib") - total / 4.0).abs() < 1e-3 * total);
    assert!(f(&rows[1], "activations_gib") > 2.0 * f(&rows[0], "activations_gib"));
    assert!(f(&rows[1], "peak_gib") > f(&rows[0], "peak_gib"));
    for r in rows {
        let peak = f(r, "peak_gib");
        for g in r["fits"].as_array().unwrap() {
            let usable = g["usable_gib"].as_f64().unwrap();
            let ok = g["note"].is_null() && usable >= peak;
            assert_eq!(g["fits"], ok, "{g}");
        }
    }
    // The same even plan through `simulate` peaks at the same memory.
    let s = json(&[
        "simulate",
        "--nodes",
        "1",
        "--gpus-per-node",
        "4",
        "--gpu",
        "h100-sxm",
        "--model",
        "gpt-1.3b",
        "--seq-len",
        "2048",
        "--global-batch",
        "16",
        "--batch",
        "4,4,4,4",
        "--microbatches",
        "1,1,1,1",
        "--accumulation",
        "sync",
        "--format",
        "json",
    ]);
    let peak = s["gpus"][0]["peak_mem_gib"].as_f64().unwrap();
    assert!(
        (peak - f(&rows[1], "peak_gib")).abs() < 1e-6,
        "simulate {peak} vs memory {}",
        f(&rows[1], "peak_gib")
    );
    // No sharding: the whole state on every GPU, and DDP's gradient
    // buffer next to it.
    let d = json(&[
        "whatif",
        "memory",
        "--model",
        "gpt-1.3b",
        "--sharding",
        "none",
        "--format",
        "json",
    ]);
    let r = &d["rows"][0];
    let whole = r["state_total_gib"].as_f64().unwrap();
    assert!(
        f(r, "state_gib") >= whole && f(r, "state_gib") <= 1.5 * whole,
        "{r}"
    );
    let t = run(&["whatif", "memory", "--model", "gpt-1.3b"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.contains("a100-80gb") && t.stdout.contains("B/param"),
        "{}",
        t.stdout
    );
    assert!(t.stdout.lines().all(|l| l.len() <= 200), "{}", t.stdout);
    let o = run(&[
        "whatif",
        "memory",
        "--model",
        "gpt-1.3b",
        "--microbatch-size",
        "0",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--microbatch-size"), "{}", o.stderr);
}

/// `whatif cheapest`: the answer reaches the target, nothing tried that
/// reaches it costs less per hour, its price is its servers' prices, and
/// `plan` on the same servers gives the same throughput; a target nothing
/// reaches says so; a bad pool names the field, exit 2.
#[test]
fn cheapest_rental_reaches_the_target_for_the_least() {
    let pool = crate::common::scratch("whatif-cheapest").join("pool.toml");
    std::fs::write(
        &pool,
        "[network]\nbw_gbit_s = 100\n\
         [[offer]]\ngpu = \"a100-80gb\"\ngpus_per_node = 2\nmax_nodes = 4\nprice_per_hour_usd = 2.0\n\
         [[offer]]\ngpu = \"l4\"\ngpus_per_node = 2\nmax_nodes = 8\nprice_per_hour_usd = 0.5\n",
    )
    .unwrap();
    let p = pool.to_str().unwrap();
    let w = ["--model", "gpt-1.3b", "--global-batch", "64"];
    // One A100 server's throughput, to set a target two offers compete for.
    let one = json(
        &[
            &[
                "plan",
                "--nodes",
                "1",
                "--gpus-per-node",
                "2",
                "--gpu",
                "a100-80gb",
            ][..],
            &["--network-gbit-s", "100"],
            &w,
            &["--format", "json"],
        ]
        .concat(),
    );
    let target = 1.5 * one["simulated"]["tokens_per_s"].as_f64().unwrap();
    let ts = format!("{target}");
    let v = json(
        &[
            &[
                "whatif",
                "cheapest",
                "--pool",
                p,
                "--target-tokens-per-s",
                &ts,
            ][..],
            &w,
            &["--format", "json"],
        ]
        .concat(),
    );
    assert_eq!(v["question"], "cheapest");
    let tried = v["tried"].as_array().unwrap();
    let i = v["cheapest"].as_u64().expect("some selection reaches") as usize;
    let best = &tried[i];
    assert_eq!(best["reaches"], true);
    assert!(best["tokens_per_s"].as_f64().unwrap() >= target);
    let usd = best["usd_per_hour"].as_f64().unwrap();
    for r in tried {
        let n = r["nodes"].as_array().unwrap();
        let price = 2.0 * (2.0 * n[0].as_f64().unwrap() + 0.5 * n[1].as_f64().unwrap());
        assert!(
            (r["usd_per_hour"].as_f64().unwrap() - price).abs() < 1e-9,
            "{r}"
        );
        if r["reaches"] == true {
            assert!(
                r["usd_per_hour"].as_f64().unwrap() >= usd - 1e-9,
                "{r} is cheaper"
            );
        }
    }
    // The same servers through `plan`, when they are of one type.
    let n = best["nodes"].as_array().unwrap();
    let (k, gpu) = if n[1] == 0 {
        (&n[0], "a100-80gb")
    } else {
        (&n[1], "l4")
    };
    if n[0] == 0 || n[1] == 0 {
        let nodes = k.to_string();
        let plan = json(
            &[
                &[
                    "plan",
                    "--nodes",
                    &nodes,
                    "--gpus-per-node",
                    "2",
                    "--gpu",
                    gpu,
                ][..],
                &["--network-gbit-s", "100"],
                &w,
                &["--format", "json"],
            ]
            .concat(),
        );
        let tps = plan["simulated"]["tokens_per_s"].as_f64().unwrap();
        let row = best["tokens_per_s"].as_f64().unwrap();
        assert!((tps - row).abs() < 1e-6 * tps, "{tps} vs {row}");
    }
    let o = run(&[
        &[
            "whatif",
            "cheapest",
            "--pool",
            p,
            "--target-tokens-per-s",
            "1e12",
        ][..],
        &w,
    ]
    .concat());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("nothing in the pool reaches"),
        "{}",
        o.stdout
    );
    std::fs::write(
        &pool,
        "[[offer]]\ngpu = \"l4\"\ngpus_per_node = 2\nmax_nodes = 0\n",
    )
    .unwrap();
    let o = run(&[
        &[
            "whatif",
            "cheapest",
            "--pool",
            p,
            "--target-tokens-per-s",
            "1000",
        ][..],
        &w,
    ]
    .concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("offer[0].max_nodes") && o.stderr.contains("pool.toml"),
        "{}",
        o.stderr
    );
}

/// `whatif min-gpus --pool`: every offer's fewest servers that fit and
/// train, each confirmed by `plan` on those servers (and one fewer runs
/// out of memory or has no plan).
#[test]
fn min_gpus_of_each_offer_in_a_pool() {
    let pool = crate::common::scratch("whatif-min-pool").join("pool.toml");
    std::fs::write(
        &pool,
        "[network]\nbw_gbit_s = 100\n\
         [[offer]]\ngpu = \"a100-80gb\"\ngpus_per_node = 2\nmax_nodes = 4\n\
         [[offer]]\ngpu = \"l4\"\ngpus_per_node = 2\nmax_nodes = 8\n",
    )
    .unwrap();
    let p = pool.to_str().unwrap();
    let w = ["--model", "gpt-6.7b", "--global-batch", "32"];
    let v = json(
        &[
            &["whatif", "min-gpus", "--pool", p][..],
            &w,
            &["--format", "json"],
        ]
        .concat(),
    );
    let offers = v["offers"].as_array().unwrap();
    assert_eq!(offers.len(), 2);
    for o in offers {
        let gpu = o["gpu"].as_str().unwrap();
        let k = o["min_nodes"]
            .as_u64()
            .expect("each offer fits 6.7B somewhere");
        let fits = |n: u64| -> bool {
            let nodes = n.to_string();
            let r = run(&[
                &[
                    "plan",
                    "--planner",
                    "cephalo",
                    "--nodes",
                    &nodes,
                    "--gpus-per-node",
                    "2",
                    "--gpu",
                    gpu,
                ][..],
                &["--network-gbit-s", "100"],
                &w,
                &["--format", "json"],
            ]
            .concat());
            r.code == 0
                && serde_json::from_str::<Value>(&r.stdout).unwrap()["simulated"]["oom"] == false
        };
        assert!(fits(k), "{gpu}: {k} nodes said to fit");
        if k > 1 {
            assert!(!fits(k - 1), "{gpu}: {} nodes fit too", k - 1);
        }
        assert_eq!(o["min_gpus"].as_u64(), Some(2 * k));
    }
    let o = run(&[
        &["whatif", "min-gpus", "--pool", p, "--gpus", "l4,l4"][..],
        &w,
    ]
    .concat());
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--pool"), "{}", o.stderr);
}
