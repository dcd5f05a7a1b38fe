//! Launching a job on MPI ranks: validates the job, writes it as JSON,
//! runs `mpirun -n <ranks> <rank program> --job J --report R`, enforces a
//! wall-clock limit, and reads rank 0's report back. Also the rank side
//! ([`rank_main`], features `torch` + `mpi`).
//!
//! Units: seconds for limits. Needs no libtorch itself: the rank program
//! (e.g. this crate's `cephalo-exec-rank` binary) does the work.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::commprof::CollectiveConfig;
use crate::config::{Job, ProfileConfig};
use crate::error::ExecError;
use crate::report::{CollectiveTiming, ComputeProfile, TrainReport};

/// What the ranks of one `mpirun` do (the `--job` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankTask {
    /// Train a job (one rank per plan entry).
    Train(Job),
    /// Profile compute on every rank at the same time (see
    /// [`launch_compute`]).
    Compute(ProfileConfig),
    /// Time collectives on this many ranks.
    Collectives {
        /// Rank count.
        ranks: usize,
        /// What to time.
        config: CollectiveConfig,
    },
}

/// What rank 0 writes back (the `--report` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankOutput {
    /// Result of [`RankTask::Train`].
    Train(TrainReport),
    /// Result of [`RankTask::Collectives`].
    Collectives(Vec<CollectiveTiming>),
    /// Result of [`RankTask::Compute`].
    Compute(ComputeProfile),
}

/// How to start the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOptions {
    /// Program every rank runs; it must accept `--job PATH --report PATH`
    /// after `rank_args` (see [`rank_main`]).
    pub rank_program: PathBuf,
    /// Arguments before `--job` (e.g. a hidden subcommand name).
    pub rank_args: Vec<String>,
    /// The `mpirun` to use.
    pub mpirun: PathBuf,
    /// Pass `--oversubscribe --bind-to none` (more ranks than cores).
    pub oversubscribe: bool,
    /// Kill the job after this long.
    pub timeout: Duration,
}

impl LaunchOptions {
    /// Defaults: `mpirun` from PATH, no oversubscription, 10 minutes.
    pub fn new(rank_program: impl Into<PathBuf>) -> LaunchOptions {
        LaunchOptions {
            rank_program: rank_program.into(),
            rank_args: Vec::new(),
            mpirun: PathBuf::from("mpirun"),
            oversubscribe: false,
            timeout: Duration::from_secs(600),
        }
    }
}

fn scratch_dir() -> Result<PathBuf, ExecError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "cephalo-exec-{}-{}-{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| ExecError::Io(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

fn tail(s: &str, max: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(max);
    lines[start..].join("\n")
}

/// The most telling line of a failed job's output: a rank's own error or
/// panic first, then mpirun's note of how a process ended.
fn cause(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let first = |keys: &[&str]| {
        lines
            .iter()
            .position(|l| keys.iter().any(|k| l.contains(k)))
    };
    if let Some(i) = first(&["failed:", "panicked at", "injected"]) {
        // A panic's message is on the line after its location.
        return match (lines[i].contains("panicked at"), lines.get(i + 1)) {
            (true, Some(next)) => format!("{} {next}", lines[i]),
            _ => lines[i].to_string(),
        };
    }
    first(&[
        "exited on signal",
        "Exit code:",
        "MPI_ABORT was invoked",
        "exited without calling",
    ])
    .map(|i| lines[i].to_string())
    .unwrap_or_else(|| "no diagnostic in the ranks' output".into())
}

/// Whether an `mpirun` can be started (`mpirun --version` succeeds).
pub fn mpirun_available(mpirun: &Path) -> bool {
    Command::new(mpirun)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Ends a running `mpirun`: SIGTERM first (mpirun then kills its ranks),
/// SIGKILL after 5 s if it is still there.
fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `job` on `job.plan.len()` MPI ranks and returns rank 0's report.
/// The job is validated first, so a plan that does not match the rank
/// count, bad fractions or a bad batch list fail before any rank starts
/// ([`ExecError::InvalidJob`]). A rank that dies ends the job
/// ([`ExecError::RankFailed`] with the tail of the ranks' output); a job
/// that outlives `opts.timeout` is killed ([`ExecError::Timeout`]).
pub fn launch(job: &Job, opts: &LaunchOptions) -> Result<TrainReport, ExecError> {
    job.validate(None, None)?;
    match run_task(&RankTask::Train(job.clone()), job.plan.len(), opts)? {
        RankOutput::Train(r) => Ok(r),
        _ => Err(ExecError::Io(
            "rank 0 wrote another kind of report for a training job".into(),
        )),
    }
}

/// Profiles compute (see [`crate::profile_compute`]) on `ranks` MPI ranks
/// at the same time and returns the mean of their timings: the device as
/// it performs while every rank of a run computes (on a CPU the ranks share
/// memory bandwidth, caches and possibly physical cores, so a lone
/// process's profile is optimistic). One rank is the plain profile.
pub fn launch_compute(
    ranks: usize,
    config: &ProfileConfig,
    opts: &LaunchOptions,
) -> Result<ComputeProfile, ExecError> {
    if ranks == 0 {
        return Err(ExecError::InvalidJob {
            field: "ranks".into(),
            message: "expected at least 1 rank, got 0".into(),
        });
    }
    match run_task(&RankTask::Compute(config.clone()), ranks, opts)? {
        RankOutput::Compute(p) => Ok(p),
        _ => Err(ExecError::Io(
            "rank 0 wrote another kind of report for a compute profile".into(),
        )),
    }
}

/// Times collectives (see [`crate::profile_collectives`]) on `ranks` MPI
/// ranks; returns rank 0's table.
pub fn launch_collectives(
    ranks: usize,
    config: &CollectiveConfig,
    opts: &LaunchOptions,
) -> Result<Vec<CollectiveTiming>, ExecError> {
    if ranks == 0 {
        return Err(ExecError::InvalidJob {
            field: "ranks".into(),
            message: "expected at least 1 rank, got 0".into(),
        });
    }
    let task = RankTask::Collectives {
        ranks,
        config: config.clone(),
    };
    match run_task(&task, ranks, opts)? {
        RankOutput::Collectives(t) => Ok(t),
        _ => Err(ExecError::Io(
            "rank 0 wrote another kind of report for a collectives job".into(),
        )),
    }
}

/// Runs `task` on `ranks` MPI ranks through `mpirun` and reads rank 0's
/// output.
pub fn run_task(
    task: &RankTask,
    ranks: usize,
    opts: &LaunchOptions,
) -> Result<RankOutput, ExecError> {
    let dir = scratch_dir()?;
    let job_path = dir.join("job.json");
    let report_path = dir.join("report.json");
    let io = |p: &Path, e: std::io::Error| ExecError::Io(format!("{}: {e}", p.display()));
    let text = serde_json::to_string(task).map_err(|e| ExecError::Io(e.to_string()))?;
    std::fs::write(&job_path, text).map_err(|e| io(&job_path, e))?;

    let mut cmd = Command::new(&opts.mpirun);
    cmd.arg("-n").arg(ranks.to_string());
    if opts.oversubscribe {
        cmd.args(["--oversubscribe", "--bind-to", "none"]);
    }
    cmd.arg(&opts.rank_program)
        .args(&opts.rank_args)
        .arg("--job")
        .arg(&job_path)
        .arg("--report")
        .arg(&report_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| ExecError::Launch(format!("cannot start {}: {e}", opts.mpirun.display())))?;
    // Drain the pipes on threads so a chatty job cannot block on them.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() > opts.timeout => {
                stop(&mut child);
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(ExecError::Launch(format!("waiting for mpirun: {e}"))),
        }
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let combined = format!("{stdout}\n{stderr}");
    let Some(status) = status else {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(ExecError::Timeout {
            secs: opts.timeout.as_secs_f64(),
            detail: tail(&combined, 20),
        });
    };
    if !status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(ExecError::RankFailed {
            status: status.code().unwrap_or(-1),
            cause: cause(&combined),
            secs: started.elapsed().as_secs_f64(),
            detail: tail(&combined, 30),
        });
    }
    let text = std::fs::read_to_string(&report_path).map_err(|e| io(&report_path, e))?;
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str::<RankOutput>(&text)
        .map_err(|e| ExecError::Io(format!("{}: {e}", report_path.display())))
}

/// Parses the rank program's `--job PATH --report PATH` arguments.
pub fn parse_rank_args<I: IntoIterator<Item = String>>(
    args: I,
) -> Result<(PathBuf, PathBuf), ExecError> {
    let mut job = None;
    let mut report = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--job" => job = it.next().map(PathBuf::from),
            "--report" => report = it.next().map(PathBuf::from),
            _ => {}
        }
    }
    match (job, report) {
        (Some(j), Some(r)) => Ok((j, r)),
        _ => Err(ExecError::Launch(
            "usage: <rank program> --job JOB.json --report REPORT.json".into(),
        )),
    }
}

/// The rank side of [`launch`]: initialises MPI, makes a panic abort the
/// whole job, reads the job, trains, and writes the report (rank 0). Any
/// error is printed and turned into `MPI_Abort`, so no rank is left waiting
/// in a collective.
#[cfg(all(feature = "torch", feature = "mpi"))]
pub fn rank_main(job_path: &Path, report_path: &Path) -> Result<(), ExecError> {
    use crate::comm::{Collectives, MpiComm};
    crate::alloc::keep_freed_memory();
    let Some((_universe, comm)) = MpiComm::init() else {
        return Err(ExecError::Comm("MPI was already initialised".into()));
    };
    MpiComm::abort_on_panic();
    let run = || -> Result<(), ExecError> {
        let text = std::fs::read_to_string(job_path)
            .map_err(|e| ExecError::Io(format!("{}: {e}", job_path.display())))?;
        let task: RankTask = serde_json::from_str(&text)
            .map_err(|e| ExecError::Io(format!("{}: {e}", job_path.display())))?;
        let out = match task {
            RankTask::Train(job) => crate::trainer::train(&job, &comm)?.map(RankOutput::Train),
            RankTask::Collectives { ranks, config } => {
                if ranks != comm.size() {
                    return Err(ExecError::InvalidJob {
                        field: "ranks".into(),
                        message: format!("expected {ranks} ranks, mpirun started {}", comm.size()),
                    });
                }
                crate::commprof::profile_collectives(&comm, &config)?.map(RankOutput::Collectives)
            }
            RankTask::Compute(config) => {
                comm.barrier();
                let mut p = crate::profiler::profile_compute(&config)?;
                let all = comm.gather_f64(&p.timings());
                all.map(|all| {
                    p.set_mean_timings(&all, comm.size());
                    RankOutput::Compute(p)
                })
            }
        };
        if let Some(out) = out {
            let text = serde_json::to_string(&out).map_err(|e| ExecError::Io(e.to_string()))?;
            std::fs::write(report_path, text)
                .map_err(|e| ExecError::Io(format!("{}: {e}", report_path.display())))?;
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("cephalo-exec: rank {} failed: {e}", comm.rank());
        comm.abort(2);
    }
    Ok(())
}

/// The rank side of [`launch`] (stub: built without `torch` and `mpi`).
#[cfg(not(all(feature = "torch", feature = "mpi")))]
pub fn rank_main(_job_path: &Path, _report_path: &Path) -> Result<(), ExecError> {
    Err(ExecError::NotCompiled)
}
