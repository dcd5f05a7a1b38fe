//! The FSDP trainer of one rank (Cephalo's schedule) and the single-process
//! full-batch reference it must match.
//!
//! Per iteration, rank i with local batch b_i split into n_i micro-batches:
//! 1. forward, layer-major: all-gather unit u (unequal pieces), run all n_i
//!    micro-batches through u without autograd, keep each output in a host
//!    buffer (moved off the device on CUDA);
//! 2. head: forward + summed loss + backward per micro-batch, keeping the
//!    gradient of its input;
//! 3. backward in reverse: all-gather u again, per micro-batch recompute u's
//!    forward from its saved input and backpropagate, accumulating u's
//!    unsharded gradient; then reduce-scatter (sum, unequal pieces) it;
//! 4. Adam on the local shard of every unit.
//!
//! Units: times in ms, memory in bytes, batches in samples. Master shards,
//! gradients and Adam moments are f32 on the rank's device.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::adam::{adam_step, AdamState};
use crate::comm::Collectives;
use crate::config::{AdamConfig, BlockConfig, DeviceKind, FaultKind, Job};
use crate::layout::init_values;
use crate::model::{device_for, device_used_bytes, kind_of, sync, terr, Model, TResult};
use crate::report::{IterationRecord, RankIteration, ReferenceRun, TrainReport};
use crate::shard::{micro_batch_sizes, offsets, piece_sizes};
use crate::ExecError;

/// Per-rank accumulators of one iteration.
#[derive(Debug, Default, Clone, Copy)]
struct Clock {
    compute_ms: f64,
    comm_ms: f64,
    wait_ms: f64,
    copy_ms: f64,
    peak: u64,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// View of a contiguous f32 CPU tensor as a slice.
///
/// # Safety
/// `t` must be a contiguous f32 tensor on the CPU that outlives the slice
/// and is not resized meanwhile.
unsafe fn cpu_slice(t: &Tensor) -> &[f32] {
    let n = t.numel();
    if n == 0 {
        return &[];
    }
    std::slice::from_raw_parts(t.data_ptr() as *const f32, n)
}

/// Mutable view of a contiguous f32 CPU tensor (see [`cpu_slice`]).
///
/// # Safety
/// As [`cpu_slice`], and no other view of `t` is used meanwhile.
#[allow(clippy::mut_from_ref)]
unsafe fn cpu_slice_mut(t: &Tensor) -> &mut [f32] {
    let n = t.numel();
    if n == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n)
}

fn to_host_vec(t: &Tensor) -> TResult<Vec<f32>> {
    let t = t
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_contiguous())
        .map_err(terr)?;
    let n = t.numel();
    let mut v = vec![0f32; n];
    if n > 0 {
        t.f_copy_data(&mut v, n).map_err(terr)?;
    }
    Ok(v)
}

/// One rank's training state.
struct Rank<'a, C: Collectives> {
    comm: &'a C,
    job: &'a Job,
    model: Model,
    counts: Vec<Vec<usize>>,
    shards: Vec<Tensor>,
    adam: Vec<AdamState>,
    mb_sizes: Vec<usize>,
    first_sample: usize,
    clock: Clock,
    first_grad_shards: Option<Vec<Tensor>>,
}

impl<'a, C: Collectives> Rank<'a, C> {
    fn new(job: &'a Job, comm: &'a C) -> TResult<Self> {
        let rank = comm.rank();
        if comm.size() != job.plan.len() {
            return Err(ExecError::InvalidJob {
                field: "plan".into(),
                message: format!(
                    "expected {} entries (one per rank), got {}",
                    comm.size(),
                    job.plan.len()
                ),
            });
        }
        if let Some(t) = job.threads {
            tch::set_num_threads(t as i32);
        }
        let device = device_for(job.device, rank)?;
        let model = Model::new(&job.model, device, kind_of(job.dtype))?;
        let fractions: Vec<f64> = job.plan.iter().map(|p| p.state_fraction).collect();
        let mut counts = Vec::new();
        let mut shards = Vec::new();
        let mut adam = Vec::new();
        for (u, layout) in model.units.iter().enumerate() {
            let c = piece_sizes(layout.numel(), &fractions);
            let lo = offsets(&c)[rank];
            let vals = init_values(layout, u, job.seed, lo..lo + c[rank]);
            let shard = Tensor::from_slice(&vals)
                .f_to_device(device)
                .map_err(terr)?;
            adam.push(AdamState::zeros_like(&shard)?);
            shards.push(shard);
            counts.push(c);
        }
        let me = &job.plan[rank];
        Ok(Rank {
            comm,
            job,
            model,
            counts,
            shards,
            adam,
            mb_sizes: micro_batch_sizes(me.batch, me.micro_batches),
            first_sample: job.plan[..rank].iter().map(|p| p.batch).sum(),
            clock: Clock::default(),
            first_grad_shards: None,
        })
    }

    fn device(&self) -> Device {
        self.model.device
    }

    fn sample_mem(&mut self) {
        if let Some(b) = device_used_bytes(self.device()) {
            self.clock.peak = self.clock.peak.max(b);
        }
    }

    fn wait(&mut self) {
        if self.job.measure_wait && self.comm.size() > 1 {
            let t = Instant::now();
            self.comm.barrier();
            self.clock.wait_ms += ms_since(t);
        }
    }

    /// All-gathers unit `u`: full f32 flat parameters on the device.
    fn gather(&mut self, u: usize) -> TResult<Tensor> {
        self.wait();
        let t = Instant::now();
        let n = self.model.units[u].numel();
        let full = if self.comm.size() == 1 {
            // One rank: the shard is the whole unit. Nothing writes to the
            // gathered parameters before the optimizer step, so share it.
            self.shards[u].f_detach().map_err(terr)?
        } else if self.device() == Device::Cpu {
            let full = Tensor::f_empty([n as i64], (Kind::Float, Device::Cpu)).map_err(terr)?;
            // SAFETY: both are fresh or owned contiguous f32 CPU tensors.
            unsafe {
                self.comm.all_gather_v(
                    cpu_slice(&self.shards[u]),
                    &self.counts[u],
                    cpu_slice_mut(&full),
                )?
            };
            full
        } else {
            let local = to_host_vec(&self.shards[u])?;
            let mut host = vec![0f32; n];
            self.comm.all_gather_v(&local, &self.counts[u], &mut host)?;
            Tensor::from_slice(&host)
                .f_to_device(self.device())
                .map_err(terr)?
        };
        sync(self.device());
        self.clock.comm_ms += ms_since(t);
        Ok(full)
    }

    /// Reduce-scatters the accumulated full gradient `g` of unit `u`:
    /// returns the summed local piece (f32, on the device).
    fn reduce_scatter(&mut self, u: usize, g: Tensor) -> TResult<Tensor> {
        self.wait();
        let t = Instant::now();
        let rank = self.comm.rank();
        let out = if self.comm.size() == 1 {
            g
        } else if self.device() == Device::Cpu {
            let g = g.f_contiguous().map_err(terr)?;
            let local = Tensor::f_empty([self.counts[u][rank] as i64], (Kind::Float, Device::Cpu))
                .map_err(terr)?;
            // SAFETY: contiguous f32 CPU tensors owned here.
            unsafe {
                self.comm
                    .reduce_scatter_v(cpu_slice(&g), &self.counts[u], cpu_slice_mut(&local))?
            };
            local
        } else {
            let full = to_host_vec(&g)?;
            let mut local = vec![0f32; self.counts[u][rank]];
            self.comm
                .reduce_scatter_v(&full, &self.counts[u], &mut local)?;
            Tensor::from_slice(&local)
                .f_to_device(self.device())
                .map_err(terr)?
        };
        sync(self.device());
        self.clock.comm_ms += ms_since(t);
        Ok(out)
    }

    /// Whether unit outputs leave the device between passes (with gradient
    /// accumulation on CUDA, as Cephalo does; without it, or on the CPU,
    /// they stay where they are).
    fn offloads(&self) -> bool {
        self.device() != Device::Cpu && self.mb_sizes.len() > 1
    }

    fn offload(&mut self, t: Tensor) -> TResult<Tensor> {
        if !self.offloads() {
            return Ok(t);
        }
        let s = Instant::now();
        let h = t.f_to_device(Device::Cpu).map_err(terr)?;
        self.clock.copy_ms += ms_since(s);
        Ok(h)
    }

    fn reload(&mut self, t: &Tensor) -> TResult<Tensor> {
        if !self.offloads() {
            return Ok(t.shallow_clone());
        }
        let s = Instant::now();
        let d = t.f_to_device(self.device()).map_err(terr)?;
        sync(self.device());
        self.clock.copy_ms += ms_since(s);
        Ok(d)
    }

    fn maybe_fail(&self, iteration: usize) {
        if let Some(f) = self.job.fault {
            if f.rank == self.comm.rank() && f.iteration == iteration {
                match f.kind {
                    FaultKind::Panic => {
                        panic!("injected fault on rank {} in iteration {iteration}", f.rank)
                    }
                    FaultKind::Exit => {
                        eprintln!(
                            "cephalo-exec: injected exit on rank {} in iteration {iteration}",
                            f.rank
                        );
                        std::process::exit(3)
                    }
                    FaultKind::Hang => loop {
                        std::thread::sleep(std::time::Duration::from_secs(3600));
                    },
                    FaultKind::Abort => {
                        eprintln!(
                            "cephalo-exec: injected abort on rank {} in iteration {iteration}",
                            f.rank
                        );
                        std::process::abort()
                    }
                }
            }
        }
    }

    /// One training iteration; returns (iteration ms, this rank's loss sum).
    fn iteration(&mut self, it: usize) -> TResult<(f64, f64)> {
        self.clock = Clock::default();
        let dev = self.device();
        let kind = self.model.kind;
        let head = self.model.n_units() - 1;
        let n = self.mb_sizes.len();
        self.comm.barrier();
        let t_iter = Instant::now();

        // Data of every micro-batch (inputs and targets on the device).
        let mut data = Vec::with_capacity(n);
        let mut first = self.first_sample;
        for &m in &self.mb_sizes {
            data.push(self.model.batch(self.job.seed, it as u64, first, m)?);
            first += m;
        }

        // 1. Forward, layer-major; outputs[u][j] = output of unit u.
        let mut outputs: Vec<Vec<Tensor>> = Vec::with_capacity(head);
        for u in 0..head {
            let p = self.gather(u)?;
            let t = Instant::now();
            let pk = p.f_to_kind(kind).map_err(terr)?;
            drop(p);
            let mut outs = Vec::with_capacity(n);
            for j in 0..n {
                let y = {
                    let _g = tch::no_grad_guard();
                    if u == 0 {
                        self.model.forward(u, &pk, &data[j].0)?
                    } else {
                        let x = self.reload(&outputs[u - 1][j])?;
                        self.model.forward(u, &pk, &x)?
                    }
                };
                outs.push(y);
            }
            sync(dev);
            self.clock.compute_ms += ms_since(t);
            self.sample_mem();
            drop(pk);
            let mut host = Vec::with_capacity(n);
            for y in outs {
                host.push(self.offload(y)?);
            }
            outputs.push(host);
            if u == 0 {
                self.maybe_fail(it);
            }
        }

        // 2. Head: forward + loss + backward per micro-batch.
        let mut loss_sum = 0.0;
        let mut dys: Vec<Tensor> = Vec::with_capacity(n);
        let p = self.gather(head)?;
        let t = Instant::now();
        let pk = p.f_to_kind(kind).map_err(terr)?;
        drop(p);
        let leaves = self.model.leaves(head, &pk)?;
        let k = leaves.len();
        // Gradient buffers are not zero-filled: the first micro-batch's
        // gradient is copied in, the others added (see `Model::store`).
        let mut gacc = Tensor::f_empty([self.model.units[head].numel() as i64], (Kind::Float, dev))
            .map_err(terr)?;
        let mut copy_before = self.clock.copy_ms;
        for (j, (_, tgt)) in data.iter().enumerate() {
            let x = self
                .reload(&outputs[head - 1][j])?
                .f_detach()
                .map_err(terr)?
                .set_requires_grad(true);
            let loss = self.model.head_loss_p(&leaves, &x, tgt)?;
            let mut inputs: Vec<&Tensor> = leaves.iter().collect();
            inputs.push(&x);
            let g = Tensor::f_run_backward(&[&loss], &inputs, false, false).map_err(terr)?;
            if j == 0 {
                self.model.store(head, &gacc, &g[..k])?;
            } else {
                self.model.accumulate(head, &gacc, &g[..k])?;
            }
            loss_sum += loss.f_double_value(&[]).map_err(terr)?;
            let dy = g[k].shallow_clone();
            dys.push(self.offload(dy)?);
        }
        drop(leaves);
        drop(pk);
        sync(dev);
        self.clock.compute_ms += ms_since(t) - (self.clock.copy_ms - copy_before);
        self.sample_mem();
        let mut grad_shards: Vec<Option<Tensor>> = (0..=head).map(|_| None).collect();
        grad_shards[head] = Some(self.reduce_scatter(head, gacc)?);

        // 3. Backward in reverse with recompute.
        for u in (0..head).rev() {
            let p = self.gather(u)?;
            let t = Instant::now();
            copy_before = self.clock.copy_ms;
            let pk = p.f_to_kind(kind).map_err(terr)?;
            drop(p);
            let leaves = self.model.leaves(u, &pk)?;
            let k = leaves.len();
            gacc = Tensor::f_empty([self.model.units[u].numel() as i64], (Kind::Float, dev))
                .map_err(terr)?;
            // The output of unit u is no longer needed once u is reached.
            let done = if u > 0 { outputs.pop() } else { None };
            for j in 0..n {
                let dy = self.reload(&dys[j])?;
                let x = if u == 0 {
                    data[j].0.shallow_clone()
                } else {
                    let saved = &outputs[u - 1][j];
                    self.reload(saved)?
                        .f_detach()
                        .map_err(terr)?
                        .set_requires_grad(true)
                };
                let y = self.model.forward_p(u, &leaves, &x)?;
                let surrogate = y
                    .f_mul(&dy)
                    .and_then(|t| t.f_sum(None::<Kind>))
                    .map_err(terr)?;
                let mut inputs: Vec<&Tensor> = leaves.iter().collect();
                if u > 0 {
                    inputs.push(&x);
                }
                let g =
                    Tensor::f_run_backward(&[&surrogate], &inputs, false, false).map_err(terr)?;
                if j == 0 {
                    self.model.store(u, &gacc, &g[..k])?;
                } else {
                    self.model.accumulate(u, &gacc, &g[..k])?;
                }
                if u > 0 {
                    let dx = g[k].shallow_clone();
                    dys[j] = self.offload(dx)?;
                }
            }
            drop(done);
            drop(leaves);
            drop(pk);
            sync(dev);
            self.clock.compute_ms += ms_since(t) - (self.clock.copy_ms - copy_before);
            self.sample_mem();
            grad_shards[u] = Some(self.reduce_scatter(u, gacc)?);
        }

        if it == 0 && self.job.return_grads {
            let copies = grad_shards.iter().map(|g| {
                g.as_ref()
                    .expect("every unit has a gradient")
                    .f_detach_copy()
            });
            self.first_grad_shards = Some(copies.collect::<Result<Vec<_>, _>>().map_err(terr)?);
        }

        // 4. Adam on the local shards.
        let t = Instant::now();
        let step = it as u64 + 1;
        for (u, g) in grad_shards.into_iter().enumerate() {
            let g = g.expect("every unit has a gradient");
            adam_step(
                &mut self.shards[u],
                &g,
                &mut self.adam[u],
                step,
                &self.job.adam,
            )?;
        }
        sync(dev);
        self.clock.compute_ms += ms_since(t);
        self.sample_mem();
        self.comm.barrier();
        Ok((ms_since(t_iter), loss_sum))
    }

    /// Gathers full per-unit vectors from per-unit local shards.
    fn gather_all(&self, shards: &[Tensor]) -> TResult<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        for (u, shard) in shards.iter().enumerate() {
            let local = to_host_vec(shard)?;
            let mut full = vec![0f32; self.model.units[u].numel()];
            self.comm.all_gather_v(&local, &self.counts[u], &mut full)?;
            out.push(full);
        }
        Ok(out)
    }
}

const FIELDS: usize = 6;

/// Trains `job` on this rank of `comm` (every rank calls it with the same
/// job). Returns the assembled report on rank 0 and `None` on the others.
/// The job must already be validated for `comm.size()` ranks.
pub fn train<C: Collectives>(job: &Job, comm: &C) -> Result<Option<TrainReport>, ExecError> {
    job.validate(Some(comm.size()), None)?;
    let mut rank = Rank::new(job, comm)?;
    let total = job.warmup_iterations + job.iterations;
    let mut iter_ms = Vec::with_capacity(total);
    let mut local = Vec::with_capacity(total * FIELDS);
    for it in 0..total {
        let (ms, loss) = rank.iteration(it)?;
        iter_ms.push(ms);
        let c = rank.clock;
        let peak = if job.device == DeviceKind::Cuda {
            c.peak as f64
        } else {
            -1.0
        };
        local.extend_from_slice(&[c.compute_ms, c.comm_ms, c.wait_ms, c.copy_ms, peak, loss]);
    }
    let params = if job.return_params {
        Some(rank.gather_all(&rank.shards)?)
    } else {
        None
    };
    let first_grads = match &rank.first_grad_shards {
        Some(g) => Some(rank.gather_all(g)?),
        None => None,
    };
    let unit_params: Vec<usize> = rank.model.units.iter().map(|u| u.numel()).collect();
    let all = comm.gather_f64(&local);
    let Some(all) = all else { return Ok(None) };
    let size = comm.size();
    let mut iterations = Vec::new();
    let mut loss_sums = Vec::with_capacity(total);
    for (it, &ms) in iter_ms.iter().enumerate() {
        let mut ranks = Vec::with_capacity(size);
        let mut loss = 0.0;
        for r in 0..size {
            let v = &all[r * total * FIELDS + it * FIELDS..][..FIELDS];
            loss += v[5];
            ranks.push(RankIteration {
                rank: r,
                batch: job.plan[r].batch,
                micro_batches: job.plan[r].micro_batches,
                compute_ms: v[0],
                comm_ms: v[1],
                wait_ms: v[2],
                copy_ms: v[3],
                peak_mem_bytes: (v[4] >= 0.0).then_some(v[4] as u64),
                loss_sum: v[5],
            });
        }
        loss_sums.push(loss);
        if it >= job.warmup_iterations {
            iterations.push(IterationRecord {
                iteration: it,
                iteration_ms: ms,
                ranks,
            });
        }
    }
    Ok(Some(TrainReport {
        ranks: size,
        global_batch: job.global_batch(),
        unit_params,
        iterations,
        loss_sums,
        final_params: params,
        first_grads,
    }))
}

/// Single-process reference: plain end-to-end autograd on the whole global
/// batch (samples 0..`global_batch`, no sharding, micro-batching or
/// recompute), the same initialisation, data, summed loss and Adam, for
/// `steps` steps on the CPU in f32.
pub fn reference_train(
    cfg: &BlockConfig,
    global_batch: usize,
    steps: usize,
    adam: &AdamConfig,
    seed: u64,
) -> Result<ReferenceRun, ExecError> {
    let model = Model::new(cfg, Device::Cpu, Kind::Float)?;
    let mut params: Vec<Tensor> = model
        .units
        .iter()
        .enumerate()
        .map(|(u, l)| Tensor::from_slice(&init_values(l, u, seed, 0..l.numel())))
        .collect();
    let mut states = params
        .iter()
        .map(AdamState::zeros_like)
        .collect::<TResult<Vec<_>>>()?;
    let mut loss_sums = Vec::new();
    let mut first_grads = Vec::new();
    let head = model.n_units() - 1;
    for step in 0..steps {
        let leaves: Vec<Tensor> = params
            .iter()
            .map(|p| p.detach().set_requires_grad(true))
            .collect();
        let (inp, tgt) = model.batch(seed, step as u64, 0, global_batch)?;
        let mut x = model.forward(0, &leaves[0], &inp)?;
        for (u, leaf) in leaves.iter().enumerate().take(head).skip(1) {
            x = model.forward(u, leaf, &x)?;
        }
        let loss = model.head_loss(&leaves[head], &x, &tgt)?;
        let grads = Tensor::f_run_backward(&[&loss], &leaves, false, false).map_err(terr)?;
        loss_sums.push(loss.f_double_value(&[]).map_err(terr)?);
        if step == 0 {
            first_grads = grads.iter().map(to_host_vec).collect::<TResult<Vec<_>>>()?;
        }
        for (u, g) in grads.iter().enumerate() {
            adam_step(&mut params[u], g, &mut states[u], step as u64 + 1, adam)?;
        }
    }
    let params = params
        .iter()
        .map(to_host_vec)
        .collect::<TResult<Vec<_>>>()?;
    Ok(ReferenceRun {
        params,
        loss_sums,
        first_grads,
    })
}
