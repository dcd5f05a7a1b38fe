//! `cephalo profile` and `cephalo validate` end to end (real execution over
//! MPI on the CPU): a measured profile loads unchanged in `simulate` and
//! `plan`; `validate` profiles, plans unequal batches with gradient
//! accumulation, trains and compares (the issue's exact command, and a
//! quick run on `gpt-tiny` reusing a profile); bad plans exit 2 before any
//! rank starts.
//!
//! Needs the `exec` feature and `. scripts/exec-env.sh` (libtorch, OpenMPI).
//! Without them the tests print why and pass, except under `CI=true`, where
//! they fail.

use crate::common::{run, scratch, tmp, under_ci, write, Out};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Whether real execution can run here; under CI=true a missing piece fails.
fn exec_ready() -> bool {
    let why = if !cfg!(feature = "exec") {
        Some("built without the `exec` feature (cargo test --features exec)")
    } else if !exec::launch::mpirun_available(Path::new("mpirun")) {
        Some("mpirun not found or not working: run `. scripts/exec-env.sh` first")
    } else {
        None
    };
    match why {
        None => true,
        Some(why) => {
            if under_ci() {
                panic!("CI=true but real execution cannot run: {why}");
            }
            eprintln!("skipping: {why}");
            false
        }
    }
}

fn ok_json(o: &Out) -> Value {
    assert_eq!(o.code, 0, "exit {}\nstderr:\n{}", o.code, o.stderr);
    serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", o.stdout))
}

/// `cephalo validate` of gpt-tiny, global batch 8 on 2 ranks, 2
/// iterations, reusing the profile `prof`, with `extra` flags after these.
fn validate_tiny(prof: &Path, extra: &[&str]) -> Out {
    let prof = prof.to_str().unwrap();
    let mut args = vec![
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "8",
        "--ranks",
        "2",
        "--iterations",
        "2",
        "--profile",
        prof,
    ];
    args.extend(extra);
    run(&args)
}

/// Profiles gpt-tiny on the CPU with collectives over 2 ranks (once per
/// test binary run; every test below may use it).
fn tiny_profile() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let path = tmp("cli-validate-tiny-profile.json");
        let o = run(&[
            "profile",
            "--model",
            "gpt-tiny",
            "--batch-sizes",
            "1,2,3",
            "--ranks",
            "2",
            "--warmup",
            "1",
            "--repetitions",
            "3",
            "--out",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.code, 0, "cephalo profile failed:\n{}", o.stderr);
        path
    })
    .clone()
}

#[test]
fn profile_is_cephalo_profile_1_and_loads_in_simulate_and_plan() {
    if !exec_ready() {
        return;
    }
    let path = tiny_profile();
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(p["format"], "cephalo-profile/1");
    let b = &p["blocks"][0];
    assert_eq!(b["gpu"], "cpu");
    assert_eq!(b["model"], "gpt-tiny");
    assert_eq!(b["dtype"], "fp32");
    assert_eq!(b["batch_sizes"], serde_json::json!([1, 2, 3]));
    for k in ["fwd_ms", "bwd_ms"] {
        let v: Vec<f64> = serde_json::from_value(b[k].clone()).unwrap();
        assert!(v.iter().all(|x| *x > 0.0), "{k}: {v:?}");
    }
    assert!(
        b.get("act_mem_gib").is_none(),
        "no memory readings on the CPU"
    );
    assert!(p["units"][0]["optimizer_ms_per_mparam"].as_f64().unwrap() > 0.0);
    let colls = p["collectives"].as_array().unwrap();
    // (3 unit sizes + 1, 4, 16 MiB) x (2 ops x (even, ramp) splits + one
    // all-reduce)
    assert_eq!(colls.len(), 30, "{colls:?}");
    assert_eq!(
        colls.iter().filter(|c| c["kind"] == "all_reduce").count(),
        6,
        "{colls:?}"
    );
    assert!(colls.iter().any(|c| c["imbalance"].as_f64().unwrap() > 1.1));

    let prof = path.to_str().unwrap();
    let common = [
        "--gpus",
        "cpu,cpu",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "8",
        "--dtype",
        "fp32",
        "--profiles",
        prof,
        "--format",
        "json",
    ];
    let mut sim_args = vec!["simulate"];
    sim_args.extend(common);
    sim_args.extend(["--batch", "3,5", "--microbatches", "1,2"]);
    let r = ok_json(&run(&sim_args));
    assert!(r["iteration_ms"].as_f64().unwrap() > 0.0);
    for g in r["gpus"].as_array().unwrap() {
        assert!(
            g["compute_source"]
                .as_str()
                .unwrap()
                .starts_with("measured"),
            "{g}"
        );
        assert!(g["unit_source"].as_str().unwrap().starts_with("measured"));
        assert_eq!(g["copy_ms"].as_f64().unwrap(), 0.0, "cpu: no host copies");
    }
    assert!(
        r["comm_model"]
            .as_str()
            .unwrap()
            .starts_with("measured table"),
        "{}",
        r["comm_model"]
    );
    let mut plan_args = vec!["plan", "--planner", "cephalo"];
    plan_args.extend(common);
    let pl = ok_json(&run(&plan_args));
    let b: Vec<u32> = serde_json::from_value(pl["batch_sizes"].clone()).unwrap();
    assert_eq!(b.iter().sum::<u32>(), 8);
}

/// Pairs of the comparison must be present and carry both sides.
fn check_comparison(v: &Value, ranks: usize) {
    for k in [
        "predicted_iteration_ms",
        "measured_iteration_ms",
        "iteration_error_rel",
    ] {
        assert!(v[k].as_f64().is_some_and(f64::is_finite), "{k}: {}", v[k]);
    }
    let rs = v["ranks"].as_array().unwrap();
    assert_eq!(rs.len(), ranks);
    for r in rs {
        for k in ["compute_ms", "comm_ms", "idle_ms"] {
            assert!(r[k]["predicted"].as_f64().is_some(), "{k} {r}");
            assert!(r[k]["measured"].as_f64().is_some(), "{k} {r}");
        }
        assert!(r["compute_ms"]["measured"].as_f64().unwrap() > 0.0);
        // Compute splits into its passes and the optimizer step, on both
        // sides (measured: the parts of the median iteration).
        for side in ["predicted", "measured"] {
            let part = |k: &str| r[k][side].as_f64().unwrap();
            let (passes, opt, all) = (part("passes_ms"), part("optimizer_ms"), part("compute_ms"));
            assert!(passes > 0.0 && opt > 0.0, "{side}: {r}");
            assert!(passes + opt <= all * 1.01 + 0.1, "{side}: {r}");
        }
        assert!(r["peak_mem_gib"]["measured"].is_null(), "cpu: no reading");
    }
}

#[test]
fn validate_reuses_a_profile_and_runs_the_uneven_demo_plan() {
    if !exec_ready() {
        return;
    }
    let prof = tiny_profile();
    let o = validate_tiny(&prof, &["--format", "json"]);
    let v = ok_json(&o);
    assert!(!o.stderr.contains("profiling"), "{}", o.stderr);
    assert_eq!(v["format"], "cephalo-validate/1");
    assert_eq!(v["plan"]["planner"], "demo-uneven");
    let gpus = v["plan"]["gpus"].as_array().unwrap();
    let b: Vec<u64> = gpus.iter().map(|g| g["batch"].as_u64().unwrap()).collect();
    let n: Vec<u64> = gpus
        .iter()
        .map(|g| g["microbatches"].as_u64().unwrap())
        .collect();
    assert_eq!((b, n), (vec![3, 5], vec![1, 2]));
    check_comparison(&v, 2);
    assert_eq!(v["measured_iteration_ms_each"].as_array().unwrap().len(), 2);
    assert!(v["comm_model"]
        .as_str()
        .unwrap()
        .starts_with("measured table"));

    // The table form shows the same comparison.
    let t = run(&[
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "4",
        "--ranks",
        "2",
        "--iterations",
        "1",
        "--warmup",
        "0",
        "--batch",
        "1,3",
        "--microbatches",
        "1,3",
        "--state-fractions",
        "0.25,0.75",
        "--profile",
        prof.to_str().unwrap(),
    ]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    for want in ["iteration ms", "rank 1 compute ms", "predicted", "measured"] {
        assert!(t.stdout.contains(want), "{want}:\n{}", t.stdout);
    }
}

/// The issue's acceptance command, exactly: profile, plan unequal batches,
/// train 3 iterations over MPI, compare.
#[test]
fn validate_issue_command_works_out_of_the_box() {
    if !exec_ready() {
        return;
    }
    let o = run(&[
        "validate",
        "--model",
        "deepspeedgpt_test",
        "--seq-len",
        "64",
        "--global-batch",
        "8",
        "--ranks",
        "2",
        "--iterations",
        "3",
        "--device",
        "cpu",
        "--format",
        "json",
    ]);
    let v = ok_json(&o);
    check_comparison(&v, 2);
    let b: Vec<u64> = v["plan"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["batch"].as_u64().unwrap())
        .collect();
    assert_eq!(b, vec![3, 5]);
    assert_eq!(v["model"], "gpt-test");
    assert_eq!(v["measured_iteration_ms_each"].as_array().unwrap().len(), 3);
    let err = v["iteration_error_rel"].as_f64().unwrap();
    eprintln!(
        "deepspeedgpt_test seq 64, 2 CPU ranks: predicted {:.0} ms, measured {:.0} ms, error {:+.1}% (background CPU {})",
        v["predicted_iteration_ms"].as_f64().unwrap(),
        v["measured_iteration_ms"].as_f64().unwrap(),
        err * 100.0,
        v["background_cpu_pct"]
    );
    // Compute was profiled by the training ranks, between iterations.
    assert!(
        o.stderr.contains("profiling compute between them"),
        "{}",
        o.stderr
    );
    assert!(v["profile_source"]
        .as_str()
        .unwrap()
        .contains("between their recorded iterations"));
    let runs = v["attempts"].as_array().unwrap();
    assert!((1..=2).contains(&runs.len()), "{runs:?}");
    assert_eq!(
        runs.last().unwrap()["iteration_error_rel"],
        v["iteration_error_rel"]
    );
    // Accuracy is asserted loosely here (CI machines are shared and noisy),
    // and only where the run was not disturbed: a disturbed comparison is
    // reported as such, with why (other tests beside this one load the
    // cores its MPI ranks share). The README quotes the error measured on
    // an idle machine.
    if v["measurement_disturbed"] == true {
        let notes = v["notes"].to_string();
        assert!(
            notes.contains("disturbed") || notes.contains("speed changed"),
            "disturbed without a reason: {notes}"
        );
        eprintln!("disturbed: accuracy not held ({notes})");
    } else {
        assert!(err.abs() < 0.5, "prediction off by {:+.0}%", err * 100.0);
    }
}

#[test]
fn bad_plans_exit_2_before_any_rank_starts() {
    if !exec_ready() {
        return;
    }
    let base = [
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "8",
        "--ranks",
        "2",
    ];
    for (extra, want) in [
        (vec!["--batch", "3,4,1"], "3 entries"),
        (
            vec!["--batch", "3,5", "--state-fractions", "0.5,0.6"],
            "state_fractions",
        ),
        (vec!["--batch", "3,4"], "global batch"),
        (
            vec!["--batch", "3,5", "--microbatches", "4,1"],
            "microbatches",
        ),
        // A hybrid group that does not divide the ranks.
        (
            vec!["--sharding", "hybrid", "--shard-group", "3"],
            "shard_group",
        ),
        // Strategies the trainer cannot run say why.
        (vec!["--checkpointing", "selective"], "saved-tensor hooks"),
        (vec!["--reduce-dtype", "bf16"], "16-bit floating-point sum"),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter().copied());
        let t0 = Instant::now();
        let o = run(&args);
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(o.code, 2, "{extra:?}: exit {}\n{}", o.code, o.stderr);
        assert!(o.stderr.contains(want), "{extra:?}: {}", o.stderr);
        assert!(!o.stderr.contains("profiling"), "{extra:?}: a rank started");
        assert!(secs < 10.0, "{extra:?}: took {secs:.1} s");
    }
    // Fractions that do not sum to 1 inside each hybrid group (4 ranks).
    let o = run(&[
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "8",
        "--ranks",
        "4",
        "--sharding",
        "hybrid",
        "--shard-group",
        "2",
        "--batch",
        "2,2,2,2",
        "--state-fractions",
        "0.25,0.25,0.25,0.25",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("shard group 0"), "{}", o.stderr);
    assert!(!o.stderr.contains("profiling"), "a rank started");
    // A plan file whose strategy disagrees with the flags.
    let plan = tmp("cli-validate-ddp-plan.json");
    write(
        &plan,
        r#"{"planner": "manual", "strategy": {"sharding": "none", "shard_group": 2, "accumulation": "layered", "checkpointing": "full", "offload": "none", "param_dtype": "fp32", "reduce_dtype": "fp32", "attention": "eager"}, "gpus": [{"batch": 3, "microbatches": 1, "microbatch_size": 3, "state_fraction": 0.5}, {"batch": 5, "microbatches": 1, "microbatch_size": 5, "state_fraction": 0.5}]}"#,
    );
    let mut args = base.to_vec();
    args.extend(["--plan", plan.to_str().unwrap(), "--sharding", "full"]);
    let o = run(&args);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("sharding"), "{}", o.stderr);
    assert!(!o.stderr.contains("profiling"), "a rank started");
    // Unknown model and a CPU half-precision request: exit 2 as well.
    let o = run(&["validate", "--model", "gpt-9000b", "--global-batch", "8"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let o = run(&[
        "profile", "--model", "gpt-tiny", "--dtype", "bf16", "--device", "cpu",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

/// Compute profiled in the run (the default) or before it: both predict,
/// `--save-profile` writes the profile the comparison used, every run is
/// listed under `attempts` (the last one compared), and no run count
/// exits 2 before anything is measured.
#[test]
fn validate_profiles_compute_in_the_run_or_before_it() {
    if !exec_ready() {
        return;
    }
    for (when, says) in [
        ("in-run", "profiling compute between them"),
        ("before", "micro-batch sizes 1..=2"),
    ] {
        let saved = tmp(&format!("cli-validate-{when}-profile.json"));
        let o = run(&[
            "validate",
            "--model",
            "gpt-tiny",
            "--global-batch",
            "4",
            "--ranks",
            "2",
            "--iterations",
            "2",
            "--warmup",
            "0",
            "--profile-warmup",
            "0",
            "--profile-repetitions",
            "1",
            "--compute-profile",
            when,
            "--save-profile",
            saved.to_str().unwrap(),
            "--format",
            "json",
        ]);
        let v = ok_json(&o);
        assert!(o.stderr.contains(says), "{when}: {}", o.stderr);
        check_comparison(&v, 2);
        let runs = v["attempts"].as_array().unwrap();
        assert!((1..=2).contains(&runs.len()), "{runs:?}");
        let last = runs.last().unwrap();
        assert_eq!(last["iteration_error_rel"], v["iteration_error_rel"]);
        let disturbed = !last["disturbed_because"].as_array().unwrap().is_empty();
        assert_eq!(v["measurement_disturbed"], disturbed, "{when}");
        let p: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
        assert_eq!(p["format"], "cephalo-profile/1", "{when}");
        assert!(
            p.to_string()
                .contains("compute timed on 2 concurrent rank(s)"),
            "{when}: {p}"
        );
    }
    let o = run(&[
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "4",
        "--attempts",
        "0",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--attempts"), "{}", o.stderr);
    assert!(!o.stderr.contains("profiling"), "{}", o.stderr);
}

#[test]
fn profile_and_save_profile_outputs_follow_the_output_rules() {
    // A directory is refused before anything is measured; `-` is stdout.
    let dir = scratch("cli-validate-output-rules");
    let d = dir.to_str().unwrap();
    for args in [
        vec![
            "profile",
            "--model",
            "gpt-tiny",
            "--batch-sizes",
            "1",
            "--out",
            d,
        ],
        vec![
            "validate",
            "--model",
            "gpt-tiny",
            "--global-batch",
            "4",
            "--ranks",
            "2",
            "--save-profile",
            d,
        ],
    ] {
        let o = run(&args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains("is a directory"), "{}", o.stderr);
        assert!(
            !o.stderr.contains("profiling"),
            "measured first: {}",
            o.stderr
        );
    }
    let o = run(&[
        "profile",
        "--model",
        "gpt-tiny",
        "--batch-sizes",
        "1",
        "--warmup",
        "0",
        "--repetitions",
        "1",
        "--out",
        "-",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["format"], "cephalo-profile/1");
    assert!(!Path::new("-").exists());
}

/// `validate` across the hosts of a hostfile, two made-up names that are
/// both this machine, reached through `scripts/local-rsh-agent` (ssh's
/// stand-in) given as a launcher argument: the comparison completes and
/// mpirun started a daemon on each host.
#[test]
fn validate_runs_across_the_hosts_of_a_hostfile() {
    if !exec_ready() {
        return;
    }
    let prof = tiny_profile();
    let dir = scratch("cli-validate-hostfile");
    let agent = dir.join("agent");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/local-rsh-agent"),
        &agent,
    )
    .unwrap();
    let hosts = write(
        dir.join("hosts"),
        "# two hosts, one rank each\ncephalo-a slots=1\ncephalo-b slots=1\n",
    );
    let o = validate_tiny(
        &prof,
        &[
            "--hostfile",
            &hosts,
            "--launcher-arg=--mca",
            "--launcher-arg=plm_rsh_agent",
            &format!("--launcher-arg={}", agent.display()),
            // One run: a second (after a run disturbed by the tests
            // beside it) would reach each host twice.
            "--attempts",
            "1",
            "--format",
            "json",
        ],
    );
    let v = ok_json(&o);
    check_comparison(&v, 2);
    let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let mut called: Vec<&str> = log.lines().collect();
    called.sort_unstable();
    assert_eq!(called, ["cephalo-a", "cephalo-b"]);
}

/// `validate --launcher srun` inside an allocation of a real single-host
/// Slurm (started by the test, [`crate::slurm::Slurm`]): srun starts both
/// ranks with PMIx, the comparison completes, and the output says the
/// background load is not measured there (the ranks are slurmstepd's
/// children) instead of calling the run disturbed.
#[test]
fn validate_runs_under_srun_in_a_slurm_allocation() {
    if !exec_ready() {
        return;
    }
    let Some(slurm) = crate::slurm::Slurm::start("slurm-validate") else {
        return;
    };
    let prof = tiny_profile();
    let mut salloc = slurm.command("salloc");
    salloc
        .args(["-n", "2", "--"])
        .arg(assert_cmd::cargo::cargo_bin("cephalo"))
        .args(["validate", "--model", "gpt-tiny", "--global-batch", "8"])
        .args(["--ranks", "2", "--iterations", "2", "--attempts", "1"])
        .arg("--profile")
        .arg(&prof)
        .args(["--launcher", "srun", "--format", "json"]);
    let out = slurm.run(salloc, "salloc ... validate --launcher srun");
    // salloc's own lines (granted, relinquishing) and the JSON report.
    let json = &out[out
        .find("{\n")
        .unwrap_or_else(|| panic!("no report: {out}"))..];
    let json = &json[..=json.rfind("\n}").map_or(json.len() - 1, |i| i + 1)];
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {out}"));
    check_comparison(&v, 2);
    assert!(
        v["background_cpu_pct"]["run"].is_null(),
        "{}",
        v["background_cpu_pct"]
    );
    let notes = v["notes"].to_string();
    assert!(notes.contains("not measured under srun"), "{notes}");
}

/// A hostfile that does not exist, or one given to srun, exits 2 naming
/// `--hostfile` before any rank starts.
#[test]
fn bad_hostfiles_exit_2_before_any_rank() {
    if !exec_ready() {
        return;
    }
    let prof = tiny_profile();
    let dir = scratch("cli-validate-bad-hostfile");
    let blank = write(dir.join("blank"), "# nothing\n");
    let missing = dir.join("missing");
    for extra in [
        vec!["--hostfile", missing.to_str().unwrap()],
        vec!["--hostfile", &blank],
        vec!["--hostfile", &blank, "--launcher", "srun"],
    ] {
        let t = Instant::now();
        let o = validate_tiny(&prof, &extra);
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(o.stderr.contains("--hostfile"), "{}", o.stderr);
        assert!(t.elapsed().as_secs_f64() < 20.0);
    }
    let o = run(&[
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "8",
        "--launcher",
        "torchrun",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("mpirun or srun"), "{}", o.stderr);
}

/// `validate` runs tensor-parallel and pipelined plans for real (the 3D
/// flags of `simulate`) and compares them per rank and per stage / TP
/// group.
#[test]
fn validate_runs_tensor_and_pipeline_parallel_plans() {
    if !exec_ready() {
        return;
    }
    let prof = tiny_profile();
    for (extra, groups) in [
        (vec!["--tp", "2"], vec![(0u64, 0u64)]),
        (
            vec!["--pp", "2", "--pp-schedule", "1f1b"],
            vec![(0, 0), (1, 0)],
        ),
        (vec!["--tp", "2", "--sequence-parallel"], vec![(0, 0)]),
    ] {
        let mut args = extra.clone();
        args.extend(["--format", "json"]);
        let o = validate_tiny(&prof, &args);
        let v = ok_json(&o);
        assert!(
            v["plan"]["pipeline"]["stages"].is_array(),
            "{extra:?}: {}",
            v["plan"]
        );
        check_comparison(&v, 2);
        let g = v["groups"].as_array().unwrap();
        let got: Vec<(u64, u64)> = g
            .iter()
            .map(|x| (x["stage"].as_u64().unwrap(), x["replica"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, groups, "{extra:?}");
        for x in g {
            for k in ["compute_ms", "comm_ms", "bubble_ms"] {
                assert!(x[k]["predicted"].as_f64().is_some(), "{k} {x}");
                assert!(x[k]["measured"].as_f64().is_some(), "{k} {x}");
            }
        }
        eprintln!(
            "{extra:?}: predicted {:.1} ms, measured {:.1} ms",
            v["predicted_iteration_ms"], v["measured_iteration_ms"]
        );
    }
    // The table names the groups.
    let o = validate_tiny(&prof, &["--pp", "2"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("s1 r0 bubble ms"), "{}", o.stdout);
}

/// 3D shapes the model or the trainer cannot take exit 2 before any rank
/// starts, saying why.
#[test]
fn bad_3d_shapes_exit_2_before_any_rank() {
    if !exec_ready() {
        return;
    }
    let prof = tiny_profile();
    for (extra, want) in [
        // gpt-tiny has 4 heads and 2 blocks; 2 ranks.
        (vec!["--tp", "3"], "dividing the 2 GPUs"),
        (
            vec!["--pp", "2", "--pp-schedule", "zb-h1"],
            "weight-gradient",
        ),
        (
            vec!["--tp", "2", "--sequence-parallel", "--seq-len", "31"],
            "must divide",
        ),
    ] {
        let t = Instant::now();
        let o = validate_tiny(&prof, &extra);
        assert_eq!(o.code, 2, "{extra:?}: exit {}\n{}", o.code, o.stderr);
        assert!(o.stderr.contains(want), "{extra:?}: {}", o.stderr);
        assert!(!o.stderr.contains("training"), "{extra:?}: a rank started");
        assert!(t.elapsed().as_secs_f64() < 20.0);
    }
    // A plan file whose stages do not cover the model (3 blocks of 2).
    let o = validate_tiny(&prof, &["--pp", "2", "--format", "json"]);
    let mut plan = ok_json(&o)["plan"].clone();
    plan["pipeline"]["stages"][1]["blocks"] = Value::from(2);
    let file = tmp("cli-validate-bad-stages.json");
    write(&file, &serde_json::to_string(&plan).unwrap());
    let o = validate_tiny(&prof, &["--plan", file.to_str().unwrap()]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("pipeline.stages[].blocks"),
        "{}",
        o.stderr
    );
    // TP dividing the 3 ranks but not the 4 heads.
    let prof = prof.to_str().unwrap();
    let o = run(&[
        "validate",
        "--model",
        "gpt-tiny",
        "--global-batch",
        "6",
        "--ranks",
        "3",
        "--profile",
        prof,
        "--tp",
        "3",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("attention heads (4)"), "{}", o.stderr);
}
