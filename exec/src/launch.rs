//! Launching a job on MPI ranks: validates the job, starts the ranks
//! through a launcher (`mpirun -n <ranks> [--hostfile H] <rank program>`,
//! or `srun -n <ranks>` inside a Slurm allocation), hands the job to rank 0
//! on its standard input (rank 0 broadcasts it), enforces a wall-clock
//! limit, and reads rank 0's report back from its standard output. Nothing
//! travels through files, so the ranks may run on other hosts without a
//! shared file system; the rank program must exist at the same path on
//! every host (as MPI launchers require). Also the rank side
//! ([`rank_main`], features `torch` + `mpi`).
//!
//! Units: seconds for limits. Needs no libtorch itself: the rank program
//! (e.g. this crate's `cephalo-exec-rank` binary) does the work.

use std::ffi::OsString;
use std::io::{Read, Write};
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

/// The program that starts the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// Open MPI's `mpirun` (local ranks, or the hosts of a hostfile,
    /// reached through its rsh agent, ssh by default).
    Mpirun,
    /// Slurm's `srun` inside an allocation (`salloc` / `sbatch`): the
    /// allocation's nodes, PMIx wire-up (`--mpi=pmix`).
    Srun,
}

impl Launcher {
    /// Name on the command line (and the executable's).
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Mpirun => "mpirun",
            Launcher::Srun => "srun",
        }
    }

    /// Parses `mpirun` (or `mpiexec`) and `srun`.
    pub fn parse(s: &str) -> Option<Launcher> {
        match s.trim() {
            "mpirun" | "mpiexec" => Some(Launcher::Mpirun),
            "srun" => Some(Launcher::Srun),
            _ => None,
        }
    }
}

/// How to start the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchOptions {
    /// Program every rank runs, followed by `rank_args` (see
    /// [`rank_main`]); the same path on every host.
    pub rank_program: PathBuf,
    /// Arguments of the rank program (e.g. a hidden subcommand name).
    pub rank_args: Vec<String>,
    /// What starts the ranks.
    pub launcher: Launcher,
    /// The launcher's executable (`mpirun` or `srun` from PATH by default).
    pub launcher_program: PathBuf,
    /// Hosts to spread the ranks over (`mpirun --hostfile`, Open MPI's
    /// format: `host slots=N` per line); `None`: this machine (mpirun) or
    /// the allocation's nodes (srun).
    pub hostfile: Option<PathBuf>,
    /// More arguments for the launcher, before the rank program (e.g.
    /// `--mca btl_tcp_if_include eth0`, `--partition gpu`).
    pub launcher_args: Vec<String>,
    /// Pass `--oversubscribe --bind-to none` to mpirun (more ranks than
    /// cores).
    pub oversubscribe: bool,
    /// Kill the job after this long.
    pub timeout: Duration,
}

impl LaunchOptions {
    /// Defaults: `mpirun` from PATH on this machine, no oversubscription,
    /// 10 minutes.
    pub fn new(rank_program: impl Into<PathBuf>) -> LaunchOptions {
        LaunchOptions {
            rank_program: rank_program.into(),
            rank_args: Vec::new(),
            launcher: Launcher::Mpirun,
            launcher_program: PathBuf::from("mpirun"),
            hostfile: None,
            launcher_args: Vec::new(),
            oversubscribe: false,
            timeout: Duration::from_secs(600),
        }
    }

    /// The same, started by `launcher` through its usual executable.
    pub fn with_launcher(mut self, launcher: Launcher) -> LaunchOptions {
        self.launcher = launcher;
        self.launcher_program = PathBuf::from(launcher.name());
        self
    }

    /// The launcher's arguments for `ranks` ranks, the rank program last.
    pub fn argv(&self, ranks: usize) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["-n".into(), ranks.to_string().into()];
        match self.launcher {
            Launcher::Mpirun => {
                if let Some(h) = &self.hostfile {
                    a.extend(["--hostfile".into(), h.clone().into_os_string()]);
                }
                if self.oversubscribe {
                    a.extend(["--oversubscribe", "--bind-to", "none"].map(OsString::from));
                }
            }
            // Rank 0 alone reads the job from standard input; one failing
            // task ends the step.
            Launcher::Srun => {
                a.extend(["--mpi=pmix", "--input=0", "--kill-on-bad-exit=1"].map(OsString::from))
            }
        }
        a.extend(self.launcher_args.iter().map(OsString::from));
        a.push(self.rank_program.clone().into_os_string());
        a.extend(self.rank_args.iter().map(OsString::from));
        a
    }

    /// Checks what can be checked before any rank starts: a hostfile only
    /// with mpirun, readable and naming a host, and an rsh agent to reach
    /// its hosts (an empty `OMPI_MCA_plm_rsh_agent` reaches none).
    pub fn validate(&self) -> Result<(), ExecError> {
        let Some(h) = &self.hostfile else {
            return Ok(());
        };
        let bad = |message: String| ExecError::InvalidJob {
            field: "hostfile".into(),
            message,
        };
        if self.launcher != Launcher::Mpirun {
            return Err(bad(format!(
                "a hostfile is mpirun's; under {} the allocation gives the hosts",
                self.launcher.name()
            )));
        }
        let text = std::fs::read_to_string(h)
            .map_err(|e| bad(format!("cannot read {}: {e}", h.display())))?;
        let hosts = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .count();
        if hosts == 0 {
            return Err(bad(format!(
                "{} names no host (expected lines such as `node1 slots=8`)",
                h.display()
            )));
        }
        let agent_given = self.launcher_args.iter().any(|a| a.contains("rsh_agent"));
        let agent_empty = std::env::var_os("OMPI_MCA_plm_rsh_agent").is_some_and(|v| v.is_empty());
        if agent_empty && !agent_given {
            return Err(bad(format!(
                "{} lists hosts but OMPI_MCA_plm_rsh_agent is empty, so mpirun can reach no other host: install ssh (scripts/exec-env.sh empties the agent only where neither ssh nor rsh exists) or set the variable to your agent",
                h.display()
            )));
        }
        Ok(())
    }
}

/// What starts rank 0's output line (one line of JSON) on its standard
/// output, which the launcher forwards.
pub const OUTPUT_MARK: &str = "cephalo-rank-output: ";

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

/// Runs `task` on `ranks` MPI ranks through the launcher: the job to rank
/// 0's standard input, its output line back from its standard output.
pub fn run_task(
    task: &RankTask,
    ranks: usize,
    opts: &LaunchOptions,
) -> Result<RankOutput, ExecError> {
    opts.validate()?;
    let text = serde_json::to_string(task).map_err(|e| ExecError::Io(e.to_string()))?;
    let program = &opts.launcher_program;
    let mut child = Command::new(program)
        .args(opts.argv(ranks))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ExecError::Launch(format!("cannot start {}: {e}", program.display())))?;
    let started = Instant::now();
    // The job in, the pipes drained, on threads so that no side blocks on
    // a full pipe; dropping stdin closes it (rank 0 reads to its end).
    let mut stdin = child.stdin.take().expect("piped stdin");
    let in_t = std::thread::spawn(move || {
        let _ = stdin.write_all(text.as_bytes());
    });
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
            Err(e) => {
                return Err(ExecError::Launch(format!(
                    "waiting for {}: {e}",
                    program.display()
                )))
            }
        }
    };
    let _ = in_t.join();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let output = stdout.lines().find_map(|l| l.strip_prefix(OUTPUT_MARK));
    // The diagnostics, without rank 0's output line.
    let chatter: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with(OUTPUT_MARK))
        .collect();
    let combined = format!("{}\n{stderr}", chatter.join("\n"));
    let Some(status) = status else {
        return Err(ExecError::Timeout {
            secs: opts.timeout.as_secs_f64(),
            detail: tail(&combined, 20),
        });
    };
    if !status.success() {
        return Err(ExecError::RankFailed {
            status: status.code().unwrap_or(-1),
            cause: cause(&combined),
            secs: started.elapsed().as_secs_f64(),
            detail: tail(&combined, 30),
        });
    }
    let line = output.ok_or_else(|| {
        ExecError::Io(format!(
            "the job ended without rank 0's output line; its output ends:\n{}",
            tail(&combined, 20)
        ))
    })?;
    serde_json::from_str::<RankOutput>(line)
        .map_err(|e| ExecError::Io(format!("rank 0's output line: {e}")))
}

/// The rank side of [`launch`]: initialises MPI, makes a panic abort the
/// whole job, reads the job, trains, and writes the report (rank 0). Any
/// error is printed and turned into `MPI_Abort`, so no rank is left waiting
/// in a collective.
#[cfg(all(feature = "torch", feature = "mpi"))]
pub fn rank_main() -> Result<(), ExecError> {
    use crate::comm::{Collectives, MpiComm};
    crate::alloc::keep_freed_memory();
    let Some((_universe, comm)) = MpiComm::init() else {
        return Err(ExecError::Comm("MPI was already initialised".into()));
    };
    MpiComm::abort_on_panic();
    let run = || -> Result<(), ExecError> {
        // Rank 0 reads the job from its standard input and broadcasts it.
        let mine = if comm.rank() == 0 {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| ExecError::Io(format!("rank 0's standard input: {e}")))?;
            Some(buf)
        } else {
            None
        };
        let text = comm.broadcast_bytes(mine);
        let task: RankTask = serde_json::from_slice(&text)
            .map_err(|e| ExecError::Io(format!("the job on rank 0's standard input: {e}")))?;
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
                let mut p = crate::profiler::profile_compute_with(&config, &|| comm.barrier())?;
                let all = comm.gather_f64(&p.timings());
                all.map(|all| {
                    p.set_mean_timings(&all, comm.size());
                    RankOutput::Compute(p)
                })
            }
        };
        if let Some(out) = out {
            let text = serde_json::to_string(&out).map_err(|e| ExecError::Io(e.to_string()))?;
            let mut o = std::io::stdout().lock();
            writeln!(o, "{OUTPUT_MARK}{text}")
                .and_then(|()| o.flush())
                .map_err(|e| ExecError::Io(format!("rank 0's standard output: {e}")))?;
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
pub fn rank_main() -> Result<(), ExecError> {
    Err(ExecError::NotCompiled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: Vec<OsString>) -> Vec<String> {
        a.into_iter()
            .map(|x| x.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn launchers_get_their_own_arguments() {
        let mut o = LaunchOptions::new("/opt/cephalo");
        o.rank_args = vec!["exec-rank".into()];
        o.hostfile = Some("/etc/hosts.mpi".into());
        o.launcher_args = vec!["--mca".into(), "btl".into(), "tcp,self".into()];
        assert_eq!(
            strings(o.argv(4)),
            [
                "-n",
                "4",
                "--hostfile",
                "/etc/hosts.mpi",
                "--mca",
                "btl",
                "tcp,self",
                "/opt/cephalo",
                "exec-rank"
            ]
        );
        let mut s = LaunchOptions::new("/opt/cephalo").with_launcher(Launcher::Srun);
        s.launcher_args = vec!["--partition=gpu".into()];
        assert_eq!(s.launcher_program, PathBuf::from("srun"));
        assert_eq!(
            strings(s.argv(8)),
            [
                "-n",
                "8",
                "--mpi=pmix",
                "--input=0",
                "--kill-on-bad-exit=1",
                "--partition=gpu",
                "/opt/cephalo"
            ]
        );
        assert_eq!(Launcher::parse("mpiexec"), Some(Launcher::Mpirun));
        assert_eq!(Launcher::parse("torchrun"), None);
    }
}
