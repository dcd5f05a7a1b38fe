//! A sharded study through a real single-host Slurm (Debian's
//! `slurmctld`, `slurmd` and `slurm-client`, installed by
//! `scripts/system-deps.sh`): the test starts both daemons on free ports
//! with a configuration of its own (no munge: `auth/none`), submits the
//! README's sbatch array script as written (only the study's name
//! changed) and its merge job, checks the merged results equal one
//! unsharded run byte for byte, and stops the daemons.

use crate::common::{run, scratch, under_ci, write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long one Slurm command may take (the array, the merge, a real
/// run under `salloc`).
const LIMIT: Duration = Duration::from_secs(600);

/// The daemons, stopped when the test ends (passed, failed or panicked):
/// SIGTERM, so that slurmctld stops its script helper (slurmscriptd),
/// then SIGKILL after 10 s.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in self.0.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A Slurm program: `/usr/sbin` and `/usr/bin` hold them on Debian.
fn slurm_bin(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A TCP port free now on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The slurm.conf of a one-node cluster on this host: the controller and
/// the node at 127.0.0.1 (no name resolution needed), every file under
/// `dir`, 16 CPUs declared (the README's script asks 8 per task; the
/// node's real count is overridden) and no munge.
fn config(dir: &Path, host: &str) -> String {
    let d = dir.display();
    format!(
        "ClusterName=cephalo-test\n\
         SlurmctldHost={host}(127.0.0.1)\n\
         SlurmctldPort={}\nSlurmdPort={}\n\
         AuthType=auth/none\nCredType=cred/none\n\
         SlurmUser=root\nSlurmdUser=root\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
         ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\n\
         SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
         SlurmdParameters=config_overrides\nReturnToService=2\n\
         NodeName={host} NodeAddr=127.0.0.1 CPUs=16 State=UNKNOWN\n\
         PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
        free_port(),
        free_port()
    )
}

/// Runs `cmd` to its end within [`LIMIT`] (killed and failed beyond):
/// its exit success and what it printed.
fn finish(mut cmd: Command, what: &str) -> (bool, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            return (status.success(), text);
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("{what}: still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last lines of the daemons' logs (for failure messages).
fn logs(dir: &Path) -> String {
    ["slurmctld.log", "slurmd.log"]
        .iter()
        .map(|f| {
            let t = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            format!(
                "{f}:\n{}",
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running single-host Slurm: its daemons (stopped on drop), its
/// configuration and directory.
pub struct Slurm {
    _daemons: Daemons,
    /// The slurm.conf every client command reads (`SLURM_CONF`).
    pub conf: PathBuf,
    /// Its directory (state, spool, logs).
    pub dir: PathBuf,
}

impl Slurm {
    /// Starts the controller and the node daemon in the fresh directory
    /// `scratch(name)` and waits until the node is idle; `None` (the
    /// reason printed) where this machine cannot run Slurm, which fails
    /// under `CI=true`.
    pub fn start(name: &str) -> Option<Slurm> {
        if let Some(why) = missing() {
            assert!(!under_ci(), "CI=true but {why}");
            eprintln!("skipping the real-Slurm test: {why}");
            return None;
        }
        let dir = scratch(name);
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .split('.')
            .next()
            .unwrap()
            .to_string();
        let conf = PathBuf::from(write(dir.join("slurm.conf"), &config(&dir, &host)));
        let spawn = |prog: &str, args: &[&str]| -> Child {
            Command::new(slurm_bin(prog).unwrap())
                .args(args)
                .env("SLURM_CONF", &conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{prog}: {e}"))
        };
        let c = conf.to_str().unwrap();
        let mut daemons = Daemons(vec![spawn("slurmctld", &["-D", "-i", "-f", c])]);
        daemons
            .0
            .push(spawn("slurmd", &["-D", "-f", c, "-N", &host]));
        let slurm = Slurm {
            _daemons: daemons,
            conf,
            dir,
        };
        let t0 = Instant::now();
        loop {
            let mut sinfo = slurm.command("sinfo");
            sinfo.args(["-h", "-o", "%t"]);
            let (ok, out) = finish(sinfo, "sinfo");
            if ok && out.trim() == "idle" {
                return Some(slurm);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the node is not idle after 60 s (sinfo: {out})\n{}",
                slurm.logs()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A Slurm client program (`sbatch`, `salloc`, ...) of this cluster.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new(slurm_bin(prog).unwrap_or_else(|| PathBuf::from(prog)));
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Runs `cmd` (a [`Slurm::command`]) to its end: what it printed,
    /// failing the test with the daemons' logs when it fails.
    pub fn run(&self, cmd: Command, what: &str) -> String {
        let (ok, out) = finish(cmd, what);
        assert!(ok, "{what}: {out}\n{}", self.logs());
        out
    }

    /// The last lines of the daemons' logs (for failure messages).
    pub fn logs(&self) -> String {
        logs(&self.dir)
    }
}

/// Whether this machine can run the test: root (the daemons run as root)
/// and Debian's Slurm programs; the reason when not.
fn missing() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        return Some("not root (the test's slurmctld and slurmd run as root)".into());
    }
    let absent: Vec<&str> = ["slurmctld", "slurmd", "sbatch", "sinfo"]
        .into_iter()
        .filter(|p| slurm_bin(p).is_none())
        .collect();
    (!absent.is_empty()).then(|| {
        format!(
            "{} not installed (scripts/system-deps.sh installs slurmctld, slurmd and slurm-client)",
            absent.join(", ")
        )
    })
}

/// The README's sbatch array script, as a user copies it.
fn readme_script() -> String {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("#!/bin/bash\n#SBATCH --job-name=cephalo-scaling")
        .expect("README has the sbatch array script");
    let end = start + readme[start..].find("```").unwrap();
    readme[start..end].to_string()
}

#[test]
fn a_sharded_study_runs_under_a_real_slurm() {
    let Some(slurm) = Slurm::start("slurm-study") else {
        return;
    };
    // The user's checkout: the study and the binary where the script
    // expects them.
    let work = slurm.dir.join("work");
    std::fs::create_dir_all(work.join("target/release")).unwrap();
    write(work.join("experiments/small.toml"), crate::experiment::SPEC);
    std::os::unix::fs::symlink(
        assert_cmd::cargo::cargo_bin("cephalo"),
        work.join("target/release/cephalo"),
    )
    .unwrap();
    let script = readme_script().replace(" scaling", " small");
    assert!(script.contains("--shard auto") && script.contains("--array=0-7"));
    write(work.join("array.sh"), &script);
    let sbatch = |args: &[&str]| {
        let mut c = slurm.command("sbatch");
        c.args(args).current_dir(&work);
        slurm.run(c, &format!("sbatch {args:?}"))
    };
    let id = sbatch(&["--parsable", "array.sh"]);
    let id = id.trim().split(';').next().unwrap().to_string();
    // The README's merge, after the array succeeded.
    sbatch(&[
        "--wait",
        &format!("--dependency=afterok:{id}"),
        "--wrap",
        "./target/release/cephalo experiment merge small",
    ]);
    check_results(&work, &id);
}

/// Every shard of the array wrote its directory and said so in its log,
/// and the merged results equal one unsharded run byte for byte.
fn check_results(work: &Path, id: &str) {
    for k in 1..=8 {
        let shard = work.join(format!("results/small/shard-{k}-of-8"));
        assert!(shard.is_dir(), "{} missing", shard.display());
        let log = std::fs::read_to_string(work.join(format!("slurm-{id}_{}.out", k - 1)))
            .unwrap_or_else(|e| panic!("task {}'s output: {e}", k - 1));
        assert!(
            log.contains(&format!("shard-{k}-of-8")),
            "task {}: {log}",
            k - 1
        );
    }
    let one = work.join("one");
    let o = run(&[
        "experiment",
        "run",
        "small",
        "--dir",
        work.join("experiments").to_str().unwrap(),
        "--results",
        one.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for f in ["results.csv", "gpus.csv", "timeline.csv"] {
        let merged = std::fs::read(work.join("results/small").join(f)).unwrap();
        let single = std::fs::read(one.join("small").join(f)).unwrap();
        assert!(merged == single, "{f}: merged shards differ from one run");
    }
}
