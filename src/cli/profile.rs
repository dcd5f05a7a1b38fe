//! `cephalo profile` (built with `--features exec`): measure a device with
//! the real trainer's operations and write a `cephalo-profile/1` file that
//! `cephalo simulate|plan|validate --profiles` read unchanged.
//!
//! Measures, for one model at one sequence length and dtype: per-block
//! forward and backward ms against micro-batch size, embedding / head
//! forward and backward ms, the Adam step (ms per million parameters),
//! non-state memory per micro-batch size on CUDA (`act_mem_gib`), and with
//! `--ranks N` (N >= 2) all-gather / reduce-scatter ms over N MPI ranks
//! against buffer size and piece imbalance. Each timing is the median of
//! `--repetitions` runs after `--warmup` untimed ones. On the CPU with
//! `--ranks N`, compute is timed on N ranks at once (the mean of their
//! medians): ranks of one host slow each other down, and a profile should
//! describe the device as a run of N ranks sees it. What each number means
//! for the simulator: `exec::sim_glue`.
//!
//! Units: ms, GiB, bytes, samples. Exit codes: 0 with a profile, 2 for bad
//! input (unknown model, device or dtype, bad sizes), 1 when measuring fails.

use crate::error::UserError;
use anyhow::{Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use exec::sim_glue::{self, ProfileLabels};
use exec::{CollectiveConfig, DeviceKind, LaunchOptions, ProfileConfig};
use sim::model::ModelSpec;
use sim::profile::native::{self, NativeProfile};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Device a profile or a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The host CPU (one rank = one process; `--threads` libtorch threads).
    Cpu,
    /// A CUDA GPU (rank r uses local GPU r).
    Cuda,
}

impl Device {
    /// The exec device kind.
    pub fn kind(self) -> DeviceKind {
        match self {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda => DeviceKind::Cuda,
        }
    }
}

/// Flags of `cephalo profile`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Model name or alias (e.g. `deepspeedgpt_test`, `gpt-2.7b`, `llama-3b`).
    #[arg(long)]
    pub model: String,
    /// Tokens per sample (default: the model's).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Precision: fp32 | fp16 | bf16 (default fp32 on the CPU, bf16 on CUDA;
    /// the CPU runs fp32 only).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Micro-batch sizes to time, comma-separated.
    #[arg(long, default_value = "1,2,4", allow_hyphen_values = true)]
    pub batch_sizes: String,
    /// Device to measure.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Catalog name the profile is filed under (default: `cpu`, or the CUDA
    /// device's name as `nvidia-smi` reports it).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Also time collectives over this many MPI ranks (0 or 1: none).
    #[arg(long, default_value_t = 0)]
    pub ranks: usize,
    /// Collective buffer sizes, MiB, comma-separated (default: the model's
    /// unit sizes (embedding, block, head) in f32 and 1, 4, 16 MiB).
    #[arg(long, allow_hyphen_values = true)]
    pub collective_mib: Option<String>,
    /// Piece splits of the collectives, `/`-separated fractions per split,
    /// comma-separated splits (e.g. `0.5/0.5,0.4/0.6`; default: even and
    /// fractions proportional to 2, 3, 4, ...).
    #[arg(long, allow_hyphen_values = true)]
    pub splits: Option<String>,
    /// libtorch threads (default 1 on the CPU, as the catalog's `cpu` device
    /// is one rank on one core; libtorch's default on CUDA).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Untimed runs before each point.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Timed runs per point (the median is kept).
    #[arg(long, default_value_t = 7)]
    pub repetitions: usize,
    /// Write the profile here (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Kill the collective measurement after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

/// How the MPI ranks of a real run start (`profile`, `validate`).
#[derive(Debug, Clone, ClapArgs)]
pub struct LaunchArgs {
    /// What starts the ranks: `mpirun` (this machine, or `--hostfile`'s
    /// hosts over its rsh agent, ssh by default) or `srun` (inside a Slurm
    /// allocation, PMIx). This binary must sit at the same path on every host.
    #[arg(long, default_value = "mpirun", value_parser = parse_launcher)]
    pub launcher: exec::Launcher,
    /// Hosts for mpirun (Open MPI's hostfile: `node1 slots=8` per line).
    #[arg(long)]
    pub hostfile: Option<PathBuf>,
    /// One more argument for the launcher, before the rank program
    /// (repeatable, e.g. `--launcher-arg=--mca --launcher-arg=btl_tcp_if_include
    /// --launcher-arg=eth0`).
    #[arg(long = "launcher-arg", allow_hyphen_values = true)]
    pub launcher_args: Vec<String>,
}

fn parse_launcher(s: &str) -> std::result::Result<exec::Launcher, String> {
    exec::Launcher::parse(s).ok_or_else(|| format!("expected mpirun or srun, got `{s}`"))
}

/// A resolved profiling request (also used by `cephalo validate`).
#[derive(Debug, Clone)]
pub struct Request {
    /// Catalog model (as the trainer builds it, see `sim_glue::model_for_trainer`).
    pub model: ModelSpec,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Precision.
    pub dtype: sim::precision::NumFormat,
    /// Device.
    pub device: Device,
    /// Catalog name of the device.
    pub gpu: String,
    /// Micro-batch sizes, strictly increasing.
    pub batch_sizes: Vec<u32>,
    /// Ranks for collectives (< 2: none).
    pub ranks: usize,
    /// Collective buffer sizes (f32 elements).
    pub collective_elems: Vec<usize>,
    /// Piece splits of the collectives.
    pub splits: Vec<Vec<f64>>,
    /// libtorch threads.
    pub threads: Option<usize>,
    /// Untimed runs per point.
    pub warmup: usize,
    /// Timed runs per point.
    pub repetitions: usize,
    /// Limit of the collective measurement.
    pub timeout: Duration,
    /// Scratch bytes rewritten before each collective run (cold caches).
    pub flush_bytes: usize,
    /// Samples of a training step whose tokens the embedding's gradient
    /// holds when Adam is timed (`ProfileConfig::optimizer_samples`;
    /// `None`: dense gradients).
    pub optimizer_samples: Option<usize>,
    /// How the ranks start.
    pub launch: LaunchArgs,
}

/// Resolves the model name (exit 2 when unknown).
pub fn model(name: &str, origin: &str) -> Result<ModelSpec> {
    crate::load::model(name, origin)
}

/// Resolves `--dtype` for a device (CPU: fp32 only).
pub fn dtype(flag: Option<&str>, device: Device) -> Result<sim::precision::NumFormat> {
    let d = match flag {
        None => match device {
            Device::Cpu => sim::precision::NumFormat::Fp32,
            Device::Cuda => sim::precision::NumFormat::Bf16,
        },
        Some(s) => sim::precision::NumFormat::parse(s)
            .ok_or_else(|| UserError(format!("--dtype: expected fp32, fp16 or bf16, got `{s}`")))?,
    };
    if device == Device::Cpu && d != sim::precision::NumFormat::Fp32 {
        return Err(UserError(format!("--dtype: the cpu device runs fp32 only, got {d}")).into());
    }
    Ok(d)
}

/// The catalog name of the device: `--gpu`, else `cpu`, else the first
/// CUDA device's name from `nvidia-smi`.
pub fn device_name(flag: Option<&str>, device: Device) -> Result<String> {
    let cat = crate::load::gpus();
    if let Some(g) = flag {
        return Ok(cat.lookup(g, "--gpu")?.name.clone());
    }
    match device {
        Device::Cpu => Ok("cpu".into()),
        Device::Cuda => {
            let out = std::process::Command::new("nvidia-smi")
                .args(["--query-gpu=name", "--format=csv,noheader"])
                .output();
            let name = out
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    UserError(
                        "--gpu: cannot ask nvidia-smi for the device name; give its catalog name with --gpu"
                            .into(),
                    )
                })?;
            match cat.get(&name) {
                Some(g) => Ok(g.name.clone()),
                None => Err(UserError(format!(
                    "--gpu: the device `{name}` is not in the catalog; give its catalog name with --gpu (known: {})",
                    cat.names()
                ))
                .into()),
            }
        }
    }
}

/// Parses a list of micro-batch sizes (each >= 1, [`sim::lists::counts`]);
/// returns it sorted and without duplicates.
pub fn batch_sizes(text: &str, flag: &str) -> Result<Vec<u32>> {
    let mut v = sim::lists::counts(text, flag, 1)?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

fn parse_splits(list: &[&str], ranks: usize) -> Result<Vec<Vec<f64>>> {
    let mut out = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let fr: Vec<f64> = s
            .split('/')
            .map(|x| x.trim().parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                UserError(format!(
                    "--splits: entry {i} `{s}` is not a list of numbers separated by `/`"
                ))
            })?;
        let sum: f64 = fr.iter().sum();
        if fr.len() != ranks
            || fr.iter().any(|f| !(f.is_finite() && *f >= 0.0))
            || (sum - 1.0).abs() > 1e-6
        {
            return Err(UserError(format!(
                "--splits: entry {i} `{s}`: expected {ranks} fractions >= 0 summing to 1"
            ))
            .into());
        }
        out.push(fr);
    }
    Ok(out)
}

/// Default collective sizes: the trainer's unit sizes (distinct) and 1, 4,
/// 16 MiB, in f32 elements.
pub fn default_collective_elems(model: &ModelSpec, seq_len: u32) -> Result<Vec<usize>> {
    let cfg =
        sim_glue::block_config(model, seq_len).map_err(|e| UserError(format!("--model: {e}")))?;
    let mut v: Vec<usize> = sim_glue::trainer_unit_params(&cfg)
        .into_iter()
        .map(|p| p as usize)
        .collect();
    v.extend([1usize << 18, 1 << 20, 1 << 22]);
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

impl Args {
    /// Validates the flags into a request.
    pub fn request(&self) -> Result<Request> {
        let spec = model(&self.model, "--model")?;
        let seq_len = match self.seq_len {
            Some(0) => {
                return Err(UserError("--seq-len: expected a sequence length >= 1".into()).into())
            }
            Some(s) => s,
            None => spec.seq_len,
        };
        let (spec, _) = sim_glue::model_for_trainer(&spec, seq_len);
        let dtype = dtype(self.dtype.as_deref(), self.device)?;
        let gpu = device_name(self.gpu.as_deref(), self.device)?;
        let batch_sizes = batch_sizes(&self.batch_sizes, "--batch-sizes")?;
        if self.repetitions == 0 {
            return Err(UserError("--repetitions: expected at least 1".into()).into());
        }
        let ranks = self.ranks;
        let collective_elems = match &self.collective_mib {
            Some(text) => {
                let list = sim::lists::numbers(
                    text,
                    "--collective-mib",
                    1e-6,
                    1e6,
                    "a buffer size in MiB",
                )?;
                let mut v: Vec<usize> = list
                    .iter()
                    .map(|m| ((m * 1048576.0 / 4.0).round() as usize).max(1))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            }
            None => default_collective_elems(&spec, seq_len)?,
        };
        let splits = match &self.splits {
            Some(text) => parse_splits(&sim::lists::items(text, "--splits")?, ranks.max(1))?,
            None => default_splits(ranks),
        };
        let threads = match (self.threads, self.device) {
            (Some(0), _) => return Err(UserError("--threads: expected at least 1".into()).into()),
            (Some(t), _) => Some(t),
            (None, Device::Cpu) => Some(1),
            (None, Device::Cuda) => None,
        };
        Ok(Request {
            model: spec,
            seq_len,
            dtype,
            device: self.device,
            gpu,
            batch_sizes,
            ranks,
            collective_elems,
            splits,
            threads,
            warmup: self.warmup,
            repetitions: self.repetitions,
            timeout: Duration::from_secs(self.timeout_s.max(1)),
            flush_bytes: flush_bytes(self.device),
            optimizer_samples: None,
            launch: self.launch.clone(),
        })
    }
}

/// Scratch memory rewritten before each timed collective by every rank: on
/// the CPU the last-level cache (from sysfs; 32 MiB when unknown, at most
/// 1 GiB), so together the ranks evict it and buffers come
/// from memory as they do in training, where compute evicts them; none for
/// CUDA devices, whose buffers are staged through host memory anyway.
pub fn flush_bytes(device: Device) -> usize {
    if device != Device::Cpu {
        return 0;
    }
    let llc = (0..8)
        .filter_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let size = std::fs::read_to_string(format!("{dir}/size")).ok()?;
            let size = size.trim();
            let (num, mult) = match size.strip_suffix('K') {
                Some(n) => (n, 1usize << 10),
                None => match size.strip_suffix('M') {
                    Some(n) => (n, 1 << 20),
                    None => (size, 1),
                },
            };
            num.parse::<usize>().ok().map(|n| n * mult)
        })
        .max()
        .unwrap_or(32 << 20);
    llc.min(1 << 30)
}

/// Even and ramp splits for `ranks` ranks (none below 2 ranks).
pub fn default_splits(ranks: usize) -> Vec<Vec<f64>> {
    if ranks < 2 {
        return vec![];
    }
    vec![
        vec![1.0 / ranks as f64; ranks],
        exec::validation::ramp(ranks),
    ]
}

/// How the ranks of a real run are started: this very binary's hidden
/// `exec-rank` subcommand under the launcher `how` names (mpirun
/// oversubscribed when there are more ranks than this machine's cores and
/// no hostfile spreads them). Checked here, before any rank starts.
pub fn launch_options(ranks: usize, timeout: Duration, how: &LaunchArgs) -> Result<LaunchOptions> {
    let exe = std::env::current_exe().context("cannot locate the cephalo binary")?;
    let mut o = LaunchOptions::new(exe).with_launcher(how.launcher);
    o.rank_args = vec!["exec-rank".into()];
    o.hostfile = how.hostfile.clone();
    o.launcher_args = how.launcher_args.clone();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    o.oversubscribe = o.launcher == exec::Launcher::Mpirun && o.hostfile.is_none() && ranks > cores;
    o.timeout = timeout;
    // (The launch settings' fields are flags here: `--hostfile`.)
    o.validate().map_err(|e| match e {
        exec::ExecError::InvalidJob { field, message } => exec_err(exec::ExecError::InvalidJob {
            field: format!("--{field}"),
            message,
        }),
        other => exec_err(other),
    })?;
    Ok(o)
}

/// An error of the exec library as the CLI reports it: a malformed job
/// is the user's (exit 2), anything else a failure.
pub fn exec_err(e: exec::ExecError) -> anyhow::Error {
    match e {
        exec::ExecError::InvalidJob { .. } => UserError(e.to_string()).into(),
        other => anyhow::Error::new(other),
    }
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|x| x.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Measures the request: compute on this process (on `ranks` concurrent
/// CPU ranks), collectives over `ranks` MPI ranks. Returns the profile.
pub fn measure(r: &Request) -> Result<NativeProfile> {
    let compute = measure_compute(r)?;
    let collectives = measure_collectives(r)?;
    native(r, &compute, &collectives)
}

/// The compute settings of the request.
pub fn compute_config(r: &Request) -> Result<ProfileConfig> {
    let cfg = sim_glue::block_config(&r.model, r.seq_len)
        .map_err(|e| UserError(format!("--model: {e}")))?;
    Ok(ProfileConfig {
        model: cfg,
        device: r.device.kind(),
        dtype: r.dtype,
        micro_batch_sizes: r.batch_sizes.iter().map(|&b| b as usize).collect(),
        warmup: r.warmup,
        repetitions: r.repetitions,
        threads: r.threads,
        flush_bytes: r.flush_bytes,
        optimizer_samples: r.optimizer_samples,
    })
}

/// The request's compute profile. CPU ranks of one host slow each other
/// down (shared memory bandwidth, caches, maybe cores): with `ranks >= 2`
/// on the CPU it is taken on all of them at once, as they run.
pub fn measure_compute(r: &Request) -> Result<exec::ComputeProfile> {
    let pc = compute_config(r)?;
    if r.device == Device::Cpu && r.ranks >= 2 {
        exec::launch_compute(
            r.ranks,
            &pc,
            &launch_options(r.ranks, r.timeout, &r.launch)?,
        )
        .context("profiling compute on concurrent ranks")
    } else {
        exec::profile_compute(&pc).context("profiling compute")
    }
}

/// The request's collectives over `ranks` MPI ranks (none for one rank
/// or no sizes).
pub fn measure_collectives(r: &Request) -> Result<Vec<exec::CollectiveTiming>> {
    if r.ranks < 2 || r.collective_elems.is_empty() {
        return Ok(vec![]);
    }
    let cc = CollectiveConfig {
        sizes_elems: r.collective_elems.clone(),
        splits: r.splits.clone(),
        warmup: r.warmup.max(1),
        repetitions: r.repetitions,
        flush_bytes: r.flush_bytes,
    };
    exec::launch_collectives(
        r.ranks,
        &cc,
        &launch_options(r.ranks, r.timeout, &r.launch)?,
    )
    .context("profiling collectives over MPI")
}

/// The profile file of the request's measurements, labelled with the
/// host it ran on.
pub fn native(
    r: &Request,
    compute: &exec::ComputeProfile,
    collectives: &[exec::CollectiveTiming],
) -> Result<NativeProfile> {
    let mpi = if r.ranks >= 2 {
        format!(", OpenMPI ({} ranks)", r.ranks)
    } else {
        String::new()
    };
    let device = match r.device {
        Device::Cpu => format!(
            "cpu: {}, {} libtorch thread(s) per rank, compute timed on {} concurrent rank(s), libtorch 2.11.0 (tch 0.24.0){mpi}",
            cpu_name(),
            compute.threads,
            compute.concurrent_ranks,
        ),
        Device::Cuda => format!("cuda:0 ({}), libtorch 2.11.0 (tch 0.24.0){mpi}", r.gpu),
    };
    let labels = ProfileLabels {
        gpu: r.gpu.clone(),
        model: r.model.name.clone(),
        seq_len: r.seq_len,
        device,
    };
    Ok(sim_glue::native_profile(compute, collectives, &labels)?)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    let req = args.request()?;
    if let Some(p) = &args.out {
        crate::out::check_writable(p, "the profile (--out)")?;
    }
    let profile = measure(&req)?;
    let text = native::to_json(&profile);
    match &args.out {
        Some(path) => crate::out::write_text(path, &text, "the profile (--out)")?,
        None => out!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// CPU use of other processes on this host while something ran: what
/// `validate` reports so a measurement disturbed by background work can be
/// told apart (the simulator assumes the devices are not shared).
#[derive(Debug, Clone, Copy)]
pub struct LoadProbe {
    busy: u64,
    total: u64,
    own: u64,
}

fn host_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    // user nice system idle iowait irq softirq steal
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    Some((busy, busy + v[3] + v[4]))
}

fn own_jiffies() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|x| x.parse().ok())
        .collect();
    (f.len() == 4).then(|| f.iter().sum())
}

impl LoadProbe {
    /// Starts a probe for ranks started by `launcher` (`None` where /proc
    /// is not readable, or under `srun`: its ranks are slurmstepd's
    /// children, not this process's, so their CPU time cannot be told
    /// from other processes').
    pub fn start(launcher: exec::Launcher) -> Option<LoadProbe> {
        if launcher == exec::Launcher::Srun {
            return None;
        }
        let (busy, total) = host_jiffies()?;
        Some(LoadProbe {
            busy,
            total,
            own: own_jiffies()?,
        })
    }

    /// Percent of the host's CPU time used since the start by processes
    /// other than this one and its finished children (e.g. the MPI ranks).
    pub fn others_pct(&self) -> Option<f64> {
        let (busy, total) = host_jiffies()?;
        let own = own_jiffies()?;
        let dt = total.saturating_sub(self.total);
        if dt == 0 {
            return None;
        }
        let others = busy.saturating_sub(self.busy) as f64 - own.saturating_sub(self.own) as f64;
        Some((100.0 * others / dt as f64).clamp(0.0, 100.0))
    }
}
