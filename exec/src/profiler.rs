//! Compute profiler: per-unit forward and backward time vs micro-batch
//! size (warm-up, then the median of repetitions, two passes over the
//! sizes combined) and the Adam step, on one process, all at once
//! ([`profile_compute`]) or spread between a trainer's iterations
//! ([`ProfileRun`]). Collectives are profiled by [`crate::commprof`].
//!
//! Units: ms (medians), bytes, samples.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::adam::{adam_step, AdamState};
use crate::config::{AdamConfig, DeviceKind, ProfileConfig};
use crate::error::ExecError;
use crate::layout::init_values;
use crate::model::{device_for, device_used_bytes, kind_of, sync, terr, Model, TResult};
use crate::report::{median, ComputeProfile, PassTiming};
use sim::precision::NumFormat;

fn time_ms<F: FnMut() -> TResult<()>>(
    device: Device,
    warmup: usize,
    reps: usize,
    scratch: &mut [u8],
    mut f: F,
) -> TResult<f64> {
    for _ in 0..warmup {
        evict(scratch);
        f()?;
    }
    sync(device);
    let mut xs = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        evict(scratch);
        let t = Instant::now();
        f()?;
        sync(device);
        xs.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&xs))
}

/// Rewrites `scratch` (untimed), pushing what the last run left in the
/// caches out: in training every other unit runs between two passes of
/// one unit, so its weights, inputs and gradient buffer come from memory.
fn evict(scratch: &mut [u8]) {
    for (i, b) in scratch.iter_mut().enumerate().step_by(64) {
        *b = b.wrapping_add(i as u8 | 1);
    }
    std::hint::black_box(&scratch);
}

fn unit_params(model: &Model, u: usize, device: Device) -> TResult<Tensor> {
    let l = &model.units[u];
    Tensor::from_slice(&init_values(l, u, 0, 0..l.numel()))
        .f_to_device(device)
        .and_then(|t| t.f_to_kind(model.kind))
        .map_err(terr)
}

/// Measures forward, backward and recompute+backward of one unit (`u`) at
/// micro-batch size `m` with the trainer's exact per-micro-batch operations
/// (random activations as the input of blocks and the head).
fn profile_unit(
    model: &Model,
    u: usize,
    m: usize,
    cfg: &ProfileConfig,
    is_head: bool,
) -> TResult<PassTiming> {
    let dev = model.device;
    let p = unit_params(model, u, dev)?;
    let (tokens, targets) = model.batch(0, 0, 0, m)?;
    let (s, h) = (model.cfg.seq_len as i64, model.cfg.hidden as i64);
    let act = Tensor::f_randn([m as i64, s, h], (model.kind, dev)).map_err(terr)?;
    let is_emb = u == 0;
    let numel = model.units[u].numel() as i64;
    let gacc = Tensor::f_zeros([numel], (Kind::Float, dev)).map_err(terr)?;
    // Exactly what the trainer does per micro-batch.
    let input = |grad: bool| -> TResult<Tensor> {
        if is_emb {
            Ok(tokens.shallow_clone())
        } else if grad {
            Ok(act.f_detach().map_err(terr)?.set_requires_grad(true))
        } else {
            Ok(act.shallow_clone())
        }
    };
    let forward = |leaves: &[Tensor], x: &Tensor| -> TResult<Tensor> {
        if is_head {
            model.head_loss_p(leaves, x, &targets)
        } else {
            model.forward_p(u, leaves, x)
        }
    };
    let mem0 = device_used_bytes(dev);
    let mut scratch = vec![0u8; cfg.flush_bytes];
    let forward_ms = time_ms(dev, cfg.warmup, cfg.repetitions, &mut scratch, || {
        let _g = tch::no_grad_guard();
        let x = input(false)?;
        forward(&model.split(u, &p)?, &x).map(drop)
    })?;
    let fwd_graph_ms = time_ms(dev, cfg.warmup, cfg.repetitions, &mut scratch, || {
        let leaves = model.leaves(u, &p)?;
        let x = input(true)?;
        forward(&leaves, &x).map(drop)
    })?;
    let fb_ms = time_ms(dev, cfg.warmup, cfg.repetitions, &mut scratch, || {
        let leaves = model.leaves(u, &p)?;
        let x = input(true)?;
        let y = forward(&leaves, &x)?;
        let root = if is_head {
            y
        } else {
            y.f_mul(&act)
                .and_then(|t| t.f_sum(None::<Kind>))
                .map_err(terr)?
        };
        let mut inputs: Vec<&Tensor> = leaves.iter().collect();
        if !is_emb {
            inputs.push(&x);
        }
        let g = Tensor::f_run_backward(&[&root], &inputs, false, false).map_err(terr)?;
        model.accumulate(u, &gacc, &g[..leaves.len()])
    })?;
    let mem1 = device_used_bytes(dev);
    Ok(PassTiming {
        micro_batch_size: m,
        forward_ms,
        // The backward does about twice the forward's FLOPs: a difference
        // below the forward alone is noise (a burst of other load during
        // the forward-with-graph runs, seen with one repetition on a
        // loaded host giving 0), so the forward bounds it from below.
        backward_ms: (fb_ms - fwd_graph_ms).max(forward_ms),
        recompute_backward_ms: fb_ms,
        peak_mem_bytes: match (mem0, mem1) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        },
    })
}

/// Re-measurements of a size that reads slower than a larger one.
const RETRIES: usize = 4;

/// How much slower than the next larger size a size may read before it is
/// measured again (25%: a quarter above is beyond this profiler's spread on
/// a quiet host, well inside the 50% the physical check refuses).
const FALL_RETRY: f64 = 1.25;

/// Two measurements of one time, combined: their mean, unless one is
/// more than [`FALL_RETRY`] times the other (a burst of other load hit
/// it), then the faster. Always the faster would pick the host's good
/// minutes: on this project's 2-core VM, whose speed swings 20-35% from
/// minute to minute, that predicted runs about a tenth short, since a run
/// lives through typical minutes.
fn combine(a: f64, b: f64) -> f64 {
    let (lo, hi) = (a.min(b), a.max(b));
    if hi > FALL_RETRY * lo {
        lo
    } else {
        (a + b) / 2.0
    }
}

/// Keeps in `a` the combination of two measurements of one size
/// (`pick` of each time), the peak memory the larger.
fn merge(a: &mut PassTiming, b: PassTiming, pick: fn(f64, f64) -> f64) {
    a.forward_ms = pick(a.forward_ms, b.forward_ms);
    a.recompute_backward_ms = pick(a.recompute_backward_ms, b.recompute_backward_ms);
    a.backward_ms = pick(a.backward_ms, b.backward_ms);
    a.peak_mem_bytes = match (a.peak_mem_bytes, b.peak_mem_bytes) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
}

/// Largest parameter count the Adam step is timed over (64 Mi: 1 GiB of
/// f32 parameters, gradient and moments; a CPU rank of the validation
/// model steps 35-53 Mi).
const OPT_MAX_PARAMS: usize = 1 << 26;

/// Times block 0, the embedding and the head at every micro-batch size, and
/// the Adam step (over the largest unit's parameter count, capped at
/// [`OPT_MAX_PARAMS`], reported per block). One process, no MPI.
pub fn profile_compute(cfg: &ProfileConfig) -> Result<ComputeProfile, ExecError> {
    profile_compute_with(cfg, &|| {})
}

/// [`profile_compute`] on ranks profiling side by side: `align` (a barrier)
/// runs before the Adam step is timed, so every rank steps at once, as
/// they do at the end of a training iteration (memory-bound, it slows
/// with each rank stepping beside it; unaligned, a rank could time it
/// while another was still in its passes).
pub(crate) fn profile_compute_with(
    cfg: &ProfileConfig,
    align: &dyn Fn(),
) -> Result<ComputeProfile, ExecError> {
    crate::alloc::keep_freed_memory();
    if let Some(t) = cfg.threads {
        tch::set_num_threads(t as i32);
    }
    let mut run = ProfileRun::new(cfg, 0)?;
    while run.steps_left() > 0 {
        run.step(align)?;
    }
    run.finish()
}

/// Refuses a compute profile without sizes (or with a zero size), or in
/// a 16-bit dtype on the CPU.
fn check_compute_config(cfg: &ProfileConfig) -> Result<(), ExecError> {
    if cfg.micro_batch_sizes.is_empty() || cfg.micro_batch_sizes.contains(&0) {
        return Err(ExecError::InvalidJob {
            field: "micro_batch_sizes".into(),
            message: "expected a non-empty list of positive sizes".into(),
        });
    }
    if cfg.device == DeviceKind::Cpu && cfg.dtype != NumFormat::Fp32 {
        return Err(ExecError::InvalidJob {
            field: "dtype".into(),
            message: "expected fp32 on the cpu device".into(),
        });
    }
    Ok(())
}

/// One measurement of a compute profile.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Unit kind `k` (0 block, 1 embedding, 2 head) at size index `i`,
    /// in pass 0 or 1.
    Unit { k: usize, i: usize, pass: usize },
    /// The Adam step, the ranks aligned first.
    Optimizer,
}

/// A compute profile taken one measurement at a time, so that a trainer
/// can spread it between its iterations ([`crate::config::InRunProfile`]):
/// the profile then sees the host, the allocator and the other ranks as
/// the iterations it predicts see them. [`ProfileRun::finish`] takes what
/// is left and the re-measurements.
pub(crate) struct ProfileRun {
    model: Model,
    cfg: ProfileConfig,
    steps: Vec<Step>,
    next: usize,
    /// Per unit kind and size index, the first pass's timing.
    timings: [Vec<Option<PassTiming>>; 3],
    optimizer_ms: Option<f64>,
    /// Device memory in use before any unit was materialised (CUDA).
    baseline_mem_bytes: Option<u64>,
}

impl ProfileRun {
    /// Checks `cfg` and lays out its measurements: the first pass over
    /// the sizes (block, embedding, head per size), the Adam step, then
    /// a second pass in reverse order, combined with the first
    /// ([`combine`]: their mean, the faster after a burst). A burst during
    /// one size's first pass (which made a size-1 block look twice as slow
    /// as size 2 on a busy CI host) rarely hits the same size again at
    /// another time, and two passes at different times average the host's
    /// drift.
    /// `rank` picks the CUDA device as the trainer does ([`device_for`]).
    pub(crate) fn new(cfg: &ProfileConfig, rank: usize) -> Result<ProfileRun, ExecError> {
        check_compute_config(cfg)?;
        let device = device_for(cfg.device, rank)?;
        let model = Model::new(&cfg.model, device, kind_of(cfg.dtype))?;
        sync(device);
        let baseline_mem_bytes = device_used_bytes(device);
        let n = cfg.micro_batch_sizes.len();
        let mut steps = Vec::with_capacity(6 * n + 1);
        for i in 0..n {
            steps.extend((0..3).map(|k| Step::Unit { k, i, pass: 0 }));
        }
        steps.push(Step::Optimizer);
        for i in (0..n).rev() {
            steps.extend((0..3).map(|k| Step::Unit { k, i, pass: 1 }));
        }
        Ok(ProfileRun {
            model,
            cfg: cfg.clone(),
            steps,
            next: 0,
            timings: [vec![None; n], vec![None; n], vec![None; n]],
            optimizer_ms: None,
            baseline_mem_bytes,
        })
    }

    /// Measurements not taken yet.
    pub(crate) fn steps_left(&self) -> usize {
        self.steps.len() - self.next
    }

    /// The unit of kind `k` (0 block, 1 embedding, 2 head) and whether it
    /// is the head.
    fn unit(&self, k: usize) -> (usize, bool) {
        match k {
            0 => (1, false),
            1 => (0, false),
            _ => (self.model.n_units() - 1, true),
        }
    }

    /// Takes the next measurement (none when all are taken); `align` runs
    /// before the Adam step.
    pub(crate) fn step(&mut self, align: &dyn Fn()) -> Result<(), ExecError> {
        let Some(&step) = self.steps.get(self.next) else {
            return Ok(());
        };
        self.next += 1;
        match step {
            Step::Unit { k, i, pass } => {
                let (u, is_head) = self.unit(k);
                let m = self.cfg.micro_batch_sizes[i];
                let t = profile_unit(&self.model, u, m, &self.cfg, is_head)?;
                let slot = &mut self.timings[k][i];
                match slot {
                    Some(first) if pass == 1 => merge(first, t, combine),
                    _ => *slot = Some(t),
                }
            }
            Step::Optimizer => {
                align();
                self.optimizer_ms =
                    Some(time_optimizer(&self.model, self.model.device, &self.cfg)?);
            }
        }
        Ok(())
    }

    /// Takes the measurements left, measures again a smaller size still
    /// read well above a larger one (more samples never take less time
    /// beyond noise; up to [`RETRIES`] times, keeping the faster) and
    /// returns the profile.
    pub(crate) fn finish(mut self) -> Result<ComputeProfile, ExecError> {
        while self.steps_left() > 0 {
            self.step(&|| {})?;
        }
        let sizes = self.cfg.micro_batch_sizes.clone();
        let mut lists: [Vec<PassTiming>; 3] = Default::default();
        for (k, list) in lists.iter_mut().enumerate() {
            let (u, is_head) = self.unit(k);
            let mut t: Vec<PassTiming> = self.timings[k].iter().flatten().cloned().collect();
            for _ in 0..RETRIES {
                let total = |p: &PassTiming| p.forward_ms + p.recompute_backward_ms;
                let Some(i) = (0..t.len().saturating_sub(1)).find(|&i| {
                    sizes[i] < sizes[i + 1] && total(&t[i]) > FALL_RETRY * total(&t[i + 1])
                }) else {
                    break;
                };
                let again = profile_unit(&self.model, u, sizes[i], &self.cfg, is_head)?;
                merge(&mut t[i], again, f64::min);
            }
            *list = t;
        }
        let [block, embedding, head_t] = lists;
        let model = &self.model;
        let head = model.n_units() - 1;
        let n = model.units[1].numel();
        let opt_ms = self.optimizer_ms.unwrap_or(0.0);
        Ok(ComputeProfile {
            model: self.cfg.model.clone(),
            device: self.cfg.device,
            dtype: self.cfg.dtype,
            threads: tch::get_num_threads().max(0) as usize,
            params_per_block: n,
            params_embedding: model.units[0].numel(),
            params_head: model.units[head].numel(),
            block,
            embedding,
            head: head_t,
            optimizer_ms_per_block: opt_ms,
            optimizer_ns_per_param: opt_ms * 1e6 / n.max(1) as f64,
            warmup: self.cfg.warmup,
            repetitions: self.cfg.repetitions,
            baseline_mem_bytes: self.baseline_mem_bytes,
            concurrent_ranks: 1,
        })
    }
}

/// Rows of the token embedding no input token of samples
/// `0..samples` lands on (the trainer's data, iteration 0, seed 0): their
/// gradient is exactly zero in training. Empty for `None`.
fn untouched_rows(cfg: &crate::config::BlockConfig, samples: Option<usize>) -> Vec<usize> {
    let Some(n) = samples else {
        return vec![];
    };
    let mut hit = vec![false; cfg.vocab];
    for g in 0..n as u64 {
        let t = crate::layout::sample_tokens(cfg, 0, 0, g);
        for &tok in &t[..cfg.seq_len] {
            hit[tok as usize] = true;
        }
    }
    (0..cfg.vocab).filter(|&r| !hit[r]).collect()
}

/// Adam's ms per block, timed as the trainer runs it: one step per unit,
/// over the model's units in order (embedding, blocks, head; the last one cut
/// where [`OPT_MAX_PARAMS`] is reached), each with its own
/// parameters, gradient and moments. Adam is
/// memory-bound: one large tensor stepped again and again reads faster
/// than the same number of parameters spread over a model's units, with
/// each call's fixed cost, and profiling it that way measured the CPU
/// trainer's optimizer 7-8% slower than predicted. Scaled to one block.
fn time_optimizer(model: &Model, device: Device, cfg: &ProfileConfig) -> Result<f64, ExecError> {
    let n = model.units[1].numel();
    let mut sizes = Vec::new();
    let mut total = 0usize;
    for u in &model.units {
        let k = u.numel().min(OPT_MAX_PARAMS - total);
        if k == 0 {
            break;
        }
        sizes.push(k);
        total += k;
    }
    let mut params = Vec::with_capacity(sizes.len());
    let mut grads = Vec::with_capacity(sizes.len());
    let mut states = Vec::with_capacity(sizes.len());
    let untouched = untouched_rows(&model.cfg, cfg.optimizer_samples);
    for (u, &k) in sizes.iter().enumerate() {
        let p = Tensor::f_randn([k as i64], (Kind::Float, device))
            .and_then(|t| t.f_mul_scalar(0.02))
            .map_err(terr)?;
        let g = p.f_mul_scalar(1e-3).map_err(terr)?;
        if u == 0 && !untouched.is_empty() {
            // The token embedding (the embedding unit's first segment,
            // `[vocab, hidden]`): zero where no token of the step lands.
            let h = model.cfg.hidden;
            let mut mask = vec![false; k];
            for &r in &untouched {
                let (a, b) = (r * h, (r + 1) * h);
                if b <= k {
                    mask[a..b].iter_mut().for_each(|x| *x = true);
                }
            }
            let mask = Tensor::from_slice(&mask)
                .f_to_device(device)
                .map_err(terr)?;
            grads.push(g.f_masked_fill(&mask, 0.0).map_err(terr)?);
        } else {
            grads.push(g);
        }
        states.push(AdamState::zeros_like(&p)?);
        params.push(p);
    }
    let mut step = 0u64;
    let adam = AdamConfig::default();
    // Far larger than any cache: no eviction needed.
    let opt_all_ms = time_ms(device, cfg.warmup, cfg.repetitions, &mut [], || {
        step += 1;
        for ((p, g), st) in params.iter_mut().zip(&grads).zip(states.iter_mut()) {
            adam_step(p, g, st, step, &adam)?;
        }
        Ok(())
    })?;
    Ok(opt_all_ms * n as f64 / total.max(1) as f64)
}
