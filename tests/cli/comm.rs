//! `cephalo comm`, `--comm-profile` and the cluster's link and NIC fields.

use crate::common::{run, run_command, tmp, write, Out};
use serde_json::Value;

fn rows(o: &Out) -> Vec<Value> {
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = serde_json::from_str::<Value>(&o.stdout).unwrap();
    assert_eq!(v["format"], "cephalo-comm/1");
    v["rows"].as_array().unwrap().clone()
}

/// Two 8-GPU NVSwitch nodes with `nics` NICs of 200 Gbit/s each.
fn two_nodes(nics: u32) -> String {
    let node =
        "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"a100-80gb\", count = 8 }]\n";
    write(
        tmp(&format!("cli-comm-two-{nics}.toml")),
        &format!("[network]\nnics = {nics}\nnic_gbit_s = 200\n{node}{node}"),
    )
}

#[test]
fn json_rows_have_exactly_the_nccl_tests_columns() {
    let c = two_nodes(1);
    let o = run_command(
        "comm",
        &[
            "--cluster",
            &c,
            "--op",
            "all-gather",
            "--sizes",
            "1M,64M,1G",
            "--format",
            "json",
        ],
    );
    let r = rows(&o);
    assert_eq!(r.len(), 3);
    for row in &r {
        let mut keys: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        // nccl-tests' columns, and the algorithm / protocol that ran it.
        assert_eq!(
            keys,
            [
                "algbw_gb_s",
                "algorithm",
                "busbw_gb_s",
                "size_bytes",
                "time_us"
            ]
        );
        assert!(row["algorithm"].as_str().unwrap().starts_with("ring/"));
        let (size, t) = (
            row["size_bytes"].as_f64().unwrap(),
            row["time_us"].as_f64().unwrap(),
        );
        let algbw = row["algbw_gb_s"].as_f64().unwrap();
        assert!((algbw - size / t / 1e3).abs() < 1e-6 * algbw);
        let busbw = row["busbw_gb_s"].as_f64().unwrap();
        assert!((busbw - algbw * 15.0 / 16.0).abs() < 1e-9 * busbw);
    }
    assert_eq!(r[2]["size_bytes"].as_f64(), Some(1073741824.0));
    // One NIC paces the ring: bus bandwidth near 200 Gbit/s derated.
    let bus = r[2]["busbw_gb_s"].as_f64().unwrap();
    assert!(bus > 20.0 && bus < 25.0, "{bus}");
    // Four NICs: four times the network; one node alone: NVSwitch.
    let c4 = two_nodes(4);
    let r4 = rows(&run_command(
        "comm",
        &[
            "--cluster",
            &c4,
            "--op",
            "all-gather",
            "--sizes",
            "1G",
            "--format",
            "json",
        ],
    ));
    let bus4 = r4[0]["busbw_gb_s"].as_f64().unwrap();
    assert!((bus4 / bus - 4.0).abs() < 0.05, "{bus4} vs {bus}");
    let r1 = rows(&run_command(
        "comm",
        &[
            "--cluster",
            &c4,
            "--op",
            "all-reduce",
            "--sizes",
            "1G",
            "--ranks",
            "0-7",
            "--format",
            "json",
        ],
    ));
    let nvs = r1[0]["busbw_gb_s"].as_f64().unwrap();
    assert!(nvs > 200.0 && nvs < 300.0, "{nvs}");
}

#[test]
fn four_bridged_gpus_are_paced_by_pcie() {
    let c = write(
        tmp("cli-comm-bridge.toml"),
        "[[nodes]]\nintra_link = \"nvlink-bridge\"\ngpus = [{ type = \"rtx-a6000\", count = 4 }]\n",
    );
    let bus = |ranks: &str| {
        rows(&run_command(
            "comm",
            &[
                "--cluster",
                &c,
                "--op",
                "all-reduce",
                "--sizes",
                "1G",
                "--ranks",
                ranks,
                "--format",
                "json",
            ],
        ))[0]["busbw_gb_s"]
            .as_f64()
            .unwrap()
    };
    let (pair, four) = (bus("0,1"), bus("0-3"));
    assert!(pair > 40.0, "{pair}");
    assert!(four < 25.0 && four > 15.0, "{four}");
}

/// A synthetic all-gather log in nccl-tests' layout on `ranks` ranks (two
/// hosts); `busbw` GB/s at every size.
pub fn nccl_log(ranks: usize, busbw: f64) -> String {
    nccl_log_of("all_gather_perf", ranks, busbw)
}

/// [`nccl_log`] of nccl-tests' test `test` (`alltoall_perf`: `size` each
/// rank's send buffer; the same `algbw = size / time` and `(n - 1) / n`
/// bus-bandwidth factor as all-gather).
pub fn nccl_log_of(test: &str, ranks: usize, busbw: f64) -> String {
    let mut s = format!("# Collective test starting: {test}\n# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n");
    for r in 0..ranks {
        let host = if r < ranks / 2 { "hosta" } else { "hostb" };
        s.push_str(&format!("#  Rank {r:2} Group  0 Pid {:5} on {host:>9} device {:2} [0x07] NVIDIA A100-SXM4-80GB\n", 1000 + r, r % 8));
    }
    s.push_str("#\n#                                                              out-of-place                       in-place\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n");
    let f = (ranks as f64 - 1.0) / ranks as f64;
    for k in [20, 22, 24, 26, 28, 30] {
        let size = (1u64 << k) as f64;
        let algbw = busbw / f;
        let t = size / (algbw * 1e9) * 1e6;
        s.push_str(&format!(
            "{size:>12} {:>13}     float    none      -1 {t:>8.2} {algbw:>7.2} {busbw:>7.2}      0 {t:>8.2} {algbw:>7.2} {busbw:>7.2}      0\n",
            size as u64 / 4
        ));
    }
    s.push_str("# Out of bounds values : 0 OK\n");
    s
}

#[test]
fn an_imported_log_reproduces_its_own_bus_bandwidth() {
    let c = two_nodes(1);
    let log = write(tmp("cli-comm-ag16.log"), &nccl_log(16, 17.5));
    let o = run_command(
        "comm",
        &[
            "--cluster",
            &c,
            "--op",
            "all-gather",
            "--sizes",
            "1M,16M,256M,1G",
            "--comm-profile",
            &log,
            "--format",
            "json",
        ],
    );
    for r in rows(&o) {
        let bus = r["busbw_gb_s"].as_f64().unwrap();
        assert!((bus - 17.5).abs() < 0.02, "{r}");
    }
    // A log of another rank count: rescaled at equal bus bandwidth, with a
    // warning in simulate that says how.
    let log8 = write(tmp("cli-comm-ag8.log"), &nccl_log(8, 17.5));
    let o = run_command(
        "comm",
        &[
            "--cluster",
            &c,
            "--op",
            "all-gather",
            "--sizes",
            "1G",
            "--comm-profile",
            &log8,
            "--format",
            "json",
        ],
    );
    let bus = rows(&o)[0]["busbw_gb_s"].as_f64().unwrap();
    assert!((bus - 17.5).abs() < 0.02, "{bus}");
    let ones = vec!["1"; 16].join(",");
    let o = run(&[
        "simulate",
        "--cluster",
        &c,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--batch",
        &ones,
        "--comm-profile",
        &log8,
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("measured on 8 ranks") && o.stderr.contains("rescaled"),
        "{}",
        o.stderr
    );
}

#[test]
fn all_to_all_prints_like_alltoall_perf_and_reads_its_logs() {
    // Two nodes of 8 A100 with a 200 Gbit/s NIC per GPU: half of every
    // rank's buffer leaves the node through its own NIC, so at 1 GiB the
    // bus bandwidth is the NIC's achievable rate x 2 x 15 / 16.
    let c = two_nodes(8);
    let o = run_command(
        "comm",
        &["--cluster", &c, "--op", "all-to-all", "--sizes", "1M,1G"],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.starts_with("# all_to_all over 16 ranks"),
        "{}",
        o.stdout
    );
    let o = run_command(
        "comm",
        &[
            "--cluster",
            &c,
            "--op",
            "all-to-all",
            "--sizes",
            "1M,1G",
            "--format",
            "json",
        ],
    );
    let r = rows(&o);
    assert!(r.iter().all(|x| x["algorithm"] == "p2p"), "{r:?}");
    let (size, time_us) = (
        r[1]["size_bytes"].as_f64().unwrap(),
        r[1]["time_us"].as_f64().unwrap(),
    );
    let algbw = r[1]["algbw_gb_s"].as_f64().unwrap();
    assert!((algbw - size / time_us / 1e3).abs() < 0.01, "{algbw}");
    let bus = r[1]["busbw_gb_s"].as_f64().unwrap();
    assert!((bus - algbw * 15.0 / 16.0).abs() < 0.01, "{bus}");
    let nic = 25.0 * 0.92;
    assert!(
        (bus / (2.0 * nic * 15.0 / 16.0) - 1.0).abs() < 0.02,
        "{bus}"
    );
    // An alltoall_perf log answers for its own group, and for 8 ranks on
    // the two nodes at equal bus bandwidth.
    let log = write(
        tmp("cli-comm-a2a16.log"),
        &nccl_log_of("alltoall_perf", 16, 30.0),
    );
    for ranks in ["0-15", "0-3,8-11"] {
        let o = run_command(
            "comm",
            &[
                "--cluster",
                &c,
                "--op",
                "all-to-all",
                "--ranks",
                ranks,
                "--sizes",
                "16M,1G",
                "--comm-profile",
                &log,
                "--format",
                "json",
            ],
        );
        for r in rows(&o) {
            let bus = r["busbw_gb_s"].as_f64().unwrap();
            assert!((bus - 30.0).abs() < 0.05, "{ranks}: {r}");
            assert_eq!(r["algorithm"], "measured");
        }
    }
    // A log of another kind does not serve it; an unknown op names them all.
    let ag = write(tmp("cli-comm-ag-not-a2a.log"), &nccl_log(16, 30.0));
    let o = run_command(
        "comm",
        &[
            "--cluster",
            &c,
            "--op",
            "all-to-all",
            "--sizes",
            "1G",
            "--comm-profile",
            &ag,
            "--format",
            "json",
        ],
    );
    assert_eq!(rows(&o)[0]["algorithm"], "p2p");
    let o = run_command("comm", &["--cluster", &c, "--op", "alltoallv"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("all-to-all"), "{}", o.stderr);
}

#[test]
fn bad_input_names_the_field() {
    let bad = |name: &str, toml: &str, want: &str| {
        let c = write(tmp(&format!("cli-comm-{name}")), toml);
        let o = run_command("comm", &["--cluster", &c, "--op", "all-gather"]);
        assert_eq!(o.code, 2, "{name}: {}", o.stderr);
        assert!(o.stderr.contains(want), "{name}: {}", o.stderr);
    };
    bad(
        "zero-nics.toml",
        "[[nodes]]\nnics = 0\nnic_gbit_s = 100\ngpus = [{ type = \"l4\", count = 2 }]\n",
        "nodes[0].nics",
    );
    bad(
        "neg-nics.toml",
        "[network]\nnics = -4\nnic_gbit_s = 100\n[[nodes]]\ngpus = [{ type = \"l4\", count = 2 }]\n",
        "network.nics",
    );
    bad(
        "bridge-t4.toml",
        "[[nodes]]\nintra_link = \"nvlink-bridge\"\ngpus = [{ type = \"t4\", count = 2 }]\n",
        "nodes[0].intra_link",
    );
    let o = run(&[
        "simulate",
        "--gpus",
        "l4,l4",
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "8",
        "--batch",
        "4,4",
        "--comm-interference=-0.1",
    ]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("--comm-interference"), "{}", o.stderr);
    let o = run_command(
        "comm",
        &["--gpus", "l4,l4", "--op", "all-gather", "--ranks", "0,5"],
    );
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--ranks"), "{}", o.stderr);
    let o = run_command("comm", &["--gpus", "l4,l4", "--op", "broadcast"]);
    assert_eq!(o.code, 2);
    // A garbled log names its line.
    let log = nccl_log(4, 10.0).replace("float    none", "float    none  x");
    let p = write(tmp("cli-comm-garbled.log"), &log);
    let o = run_command(
        "comm",
        &[
            "--gpus",
            "l4,l4,l4,l4",
            "--op",
            "all-gather",
            "--comm-profile",
            &p,
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("line 1"), "{}", o.stderr);
}

/// A measured table is named per group in `sources:` (table and JSON):
/// the 16-rank all-gathers it measured say `measured`, the reduce-scatters
/// it has no curve for say `analytic`; a table that serves no collective
/// of the plan (all-reduce measured, a fully sharded plan) is warned about
/// with the groups on both sides.
#[test]
fn measured_collectives_are_named_per_group_and_a_useless_table_is_warned() {
    let c = two_nodes(1);
    let log = write(tmp("cli-comm-src-ag16.log"), &nccl_log(16, 17.5));
    let ones = vec!["1"; 16].join(",");
    let sim = |profile: &str, format: &str| {
        run(&[
            "simulate",
            "--cluster",
            &c,
            "--model",
            "gpt-1.3b",
            "--global-batch",
            "16",
            "--batch",
            &ones,
            "--sharding",
            "full",
            "--comm-profile",
            profile,
            "--format",
            format,
        ])
    };
    let o = sim(&log, "json");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let src = v["comm_sources"]
        .as_array()
        .expect("comm_sources with a measured table");
    let of = |kind: &str| -> Vec<&serde_json::Value> {
        src.iter().filter(|s| s["kind"] == kind).collect()
    };
    assert!(
        of("all_gather")
            .iter()
            .all(|s| s["source"] == "measured" && s["group_ranks"] == 16 && s["group_nodes"] == 2),
        "{src:?}"
    );
    assert!(!of("all_gather").is_empty());
    assert!(
        of("reduce_scatter")
            .iter()
            .all(|s| s["source"] == "analytic"),
        "{src:?}"
    );
    assert!(!o.stderr.contains("serve no collective"), "{}", o.stderr);
    let t = sim(&log, "table");
    assert!(
        t.stdout
            .contains("collectives over 16 ranks on 2 node(s): all_gather measured x"),
        "{}",
        t.stdout
    );
    // Measured all-reduces, a plan without any: warned, naming both.
    let ar = format!("all-reduce={log}");
    let o = sim(&ar, "table");
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("serve no collective of this plan")
            && o.stderr.contains("all_reduce over 16 ranks")
            && o.stderr.contains("all_gather over 16 ranks on 2 node(s)"),
        "{}",
        o.stderr
    );
    // Without a table: no such lines, no such field.
    let o = run(&[
        "simulate",
        "--cluster",
        &c,
        "--model",
        "gpt-1.3b",
        "--global-batch",
        "16",
        "--batch",
        &ones,
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(v.get("comm_sources").is_none());
}
