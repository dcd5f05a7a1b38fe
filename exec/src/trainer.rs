//! The trainer of one rank, for every data-parallel strategy the simulator
//! offers, and the single-process full-batch reference it must match.
//!
//! The iteration is the simulator's own phase list
//! ([`sim::data_parallel::phases`] of the job's [`sim::strategy::Strategy`]):
//! per phase the unit, forward / head / backward, the micro-batch pass
//! (layered: every micro-batch of the rank; no-sync and sync: micro-batch
//! `k` of pass `k`, none on a rank with fewer), whether to all-gather the
//! unit first, free it after, and reduce its gradient after. So:
//!
//! * **sharding** full / hybrid: gather every phase, reshard after it,
//!   reduce-scatter the gradient in the shard group (hybrid: then
//!   all-reduce the shard across the replica group, sub-communicators from
//!   `MPI_Comm_split`); grad-op: parameters stay gathered from forward to
//!   backward; none (DDP): full replicas, never gathered, gradients
//!   all-reduced in buckets of at most 25 MiB;
//! * **accumulation** layered (Cephalo: unit-major, each unit gathered once
//!   per pass and reduced once), no-sync (micro-batch-major, unsharded
//!   gradients kept until the last pass reduces them) and sync (reduced
//!   after every pass, sharded gradients summed);
//! * **checkpointing** per block ([`sim::strategy::Checkpointing::block`]):
//!   full recomputes the block's forward from its saved input before the
//!   backward; none keeps the forward's autograd graph (the embedding
//!   always does; selective is refused by [`Job::validate`]);
//! * **offload** of activations (on CUDA, ranks with more than one
//!   micro-batch or a micro-batch-major schedule: saved block inputs, and
//!   under layered accumulation the gradients between units, go through
//!   host memory) and of the optimizer step (Adam state on the host, the
//!   shard and its gradient copied there and back);
//! * **dtypes**: all-gathers carry the strategy's parameter dtype (fp32, or
//!   fp16 / bf16 words cast from the f32 master pieces), compute runs in
//!   the job's dtype, gradients reduce in fp32 (MPI has no 16-bit sum).
//!
//! Every rank joins every collective of every phase, with a zero gradient
//! when it had nothing to compute, as FSDP and DDP ranks do.
//!
//! Units: times in ms, memory in bytes, batches in samples. Master shards,
//! gradients and Adam moments are f32.

use std::rc::Rc;
use std::time::Instant;

use sim::data_parallel::{Phase, PhaseKind};
use sim::strategy::{Accumulation, Offload, Recompute, Sharding};
use tch::{Device, Kind, Tensor};

use crate::adam::{adam_step, AdamState};
use crate::comm::Collectives;
use crate::config::{AdamConfig, BlockConfig, Job};
use crate::error::ExecError;
use crate::host::{
    buffer_tensor, cpu_slice, cpu_slice_mut, host_buffer, host_mut, host_vec, raw, raw_mut,
};
use crate::layout::init_values;
use crate::model::{device_for, device_used_bytes, kind_of, sync, terr, Model, TResult};
use crate::records::{assemble, maybe_fail, ms_since, run_iterations, Clock};
use crate::report::{ReferenceRun, TrainReport};
use crate::shard::{micro_batch_sizes, offsets, piece_sizes};

/// What a unit's forward kept for its backward, per micro-batch.
enum Saved {
    /// Its input only: the backward recomputes the forward (full recompute).
    Input,
    /// The forward's autograd graph: the parameter leaves, the input leaf
    /// (none for the embedding) and the output.
    Graph {
        leaves: Rc<Vec<Tensor>>,
        x: Option<Tensor>,
        y: Tensor,
    },
}

/// What one iteration carries from phase to phase: the micro-batches'
/// data, the gathered parameters, what the forward kept, the gradients on
/// their way down and to the reduction, the loss.
struct IterState {
    /// Activations go through host memory.
    off: bool,
    /// The gradients between units go through the host too.
    off_grads: bool,
    /// Inputs and targets of every micro-batch (on the device).
    data: Vec<(Tensor, Tensor)>,
    /// Gathered parameters per unit (compute dtype); replicas always.
    gathered: Vec<Option<Tensor>>,
    /// outputs[u][j]: output of unit u for micro-batch j (the next unit's
    /// input, kept for the backward).
    outputs: Vec<Vec<Option<Tensor>>>,
    /// live[j]: the same on the device for the next forward of a
    /// micro-batch-major pass.
    live: Vec<Option<Tensor>>,
    /// saved[u][j]: what the forward of unit u kept for micro-batch j's
    /// backward.
    saved: Vec<Vec<Option<Saved>>>,
    /// dys[j]: the gradient of micro-batch j's output at the unit the
    /// backward has reached.
    dys: Vec<Option<Tensor>>,
    /// gacc[u]: unit u's unsharded f32 gradient since its last reduction.
    gacc: Vec<Option<Tensor>>,
    /// grad_shards[u]: this rank's reduced gradient piece of unit u.
    grad_shards: Vec<Option<Tensor>>,
    /// This rank's loss, summed over its micro-batches.
    loss_sum: f64,
}

/// One rank's training state.
struct Rank<'a, C: Collectives> {
    world: &'a C,
    /// Shard group when it is not the world (hybrid sharding).
    shard_comm: Option<C>,
    /// Replica group (hybrid sharding with more than one group).
    replica_comm: Option<C>,
    job: &'a Job,
    model: Model,
    /// The iteration: the simulator's phase list for the job's strategy.
    phases: Vec<Phase>,
    /// Per unit: piece sizes inside the shard group (no sharding: the unit).
    counts: Vec<Vec<usize>>,
    /// Position in the shard group.
    pos: usize,
    /// Per unit: this rank's f32 master piece, on the device.
    shards: Vec<Tensor>,
    /// Per unit: Adam moments (on the host when the optimizer is offloaded).
    adam: Vec<AdamState>,
    mb_sizes: Vec<usize>,
    first_sample: usize,
    clock: Clock,
    first_grad_shards: Option<Vec<Tensor>>,
}

impl<'a, C: Collectives> Rank<'a, C> {
    fn new(job: &'a Job, world: &'a C) -> TResult<Self> {
        let rank = world.rank();
        if world.size() != job.plan.len() {
            return Err(ExecError::InvalidJob {
                field: "plan".into(),
                message: format!(
                    "expected {} entries (one per rank), got {}",
                    world.size(),
                    job.plan.len()
                ),
            });
        }
        if let Some(t) = job.threads {
            tch::set_num_threads(t as i32);
        }
        let s = &job.strategy;
        let g = job.shard_group();
        let (shard_comm, replica_comm) = if g < world.size() {
            // Every rank splits the same way, in the same order.
            (Some(world.split(rank / g)?), Some(world.split(rank % g)?))
        } else {
            (None, None)
        };
        let device = device_for(job.device, rank)?;
        let model = Model::new(&job.model, device, kind_of(job.dtype))?;
        let (k, pos) = (rank / g, rank % g);
        let fractions: Vec<f64> = job.plan[k * g..(k + 1) * g]
            .iter()
            .map(|p| p.state_fraction)
            .collect();
        let host_adam = s.offload == Offload::Optimizer && device != Device::Cpu;
        let mut counts = Vec::new();
        let mut shards = Vec::new();
        let mut adam = Vec::new();
        for (u, layout) in model.units.iter().enumerate() {
            let c = if s.sharding == Sharding::NoShard {
                vec![layout.numel()]
            } else {
                piece_sizes(layout.numel(), &fractions)
            };
            let me = if s.sharding == Sharding::NoShard {
                0
            } else {
                pos
            };
            let lo = offsets(&c)[me];
            let vals = init_values(layout, u, job.seed, lo..lo + c[me]);
            let shard = Tensor::from_slice(&vals)
                .f_to_device(device)
                .map_err(terr)?;
            adam.push(if host_adam {
                AdamState::zeros_like(&Tensor::from_slice(&vals))?
            } else {
                AdamState::zeros_like(&shard)?
            });
            shards.push(shard);
            counts.push(c);
        }
        let passes = job.plan.iter().map(|p| p.micro_batches).max().unwrap_or(1);
        let phases = sim::data_parallel::phases(s, job.model.layers as u32, passes as u32);
        let me = &job.plan[rank];
        Ok(Rank {
            world,
            shard_comm,
            replica_comm,
            job,
            model,
            phases,
            counts,
            pos,
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

    /// The shard group's communicator.
    fn shard_group(&self) -> &C {
        self.shard_comm.as_ref().unwrap_or(self.world)
    }

    fn sample_mem(&mut self) {
        if let Some(b) = device_used_bytes(self.device()) {
            self.clock.peak = self.clock.peak.max(b);
        }
    }

    /// Barrier on `comm` before a collective (when the job measures wait):
    /// the ms it took.
    fn wait(&self, comm: &C) -> f64 {
        if self.job.measure_wait && comm.size() > 1 {
            let t = Instant::now();
            comm.barrier();
            ms_since(t)
        } else {
            0.0
        }
    }

    /// All-gathers unit `u` in the shard group: full flat parameters on
    /// the device, f32 or (mixed precision) in the strategy's 16-bit
    /// parameter dtype, which is what travels.
    fn gather(&mut self, u: usize) -> TResult<Tensor> {
        let comm = self.shard_group();
        let waited = self.wait(comm);
        let t = Instant::now();
        let n = self.model.units[u].numel();
        let half = half_kind(self.job.strategy.param_dtype);
        let full = if let Some(k) = half {
            // Cast the master piece, gather 16-bit words on the host.
            let local = self.shards[u]
                .f_to_kind(k)
                .and_then(|t| t.f_to_device(Device::Cpu))
                .and_then(|t| t.f_contiguous())
                .map_err(terr)?;
            let full = Tensor::f_empty([n as i64], (k, Device::Cpu)).map_err(terr)?;
            // SAFETY: contiguous 16-bit CPU tensors owned here, viewed as
            // their raw words (no other view used meanwhile).
            unsafe { comm.all_gather_v16(raw(&local), &self.counts[u], raw_mut(&full))? };
            full.f_to_device(self.device()).map_err(terr)?
        } else if comm.size() == 1 {
            // One rank: the shard is the whole unit. Nothing writes to the
            // gathered parameters before the optimizer step, so share it.
            self.shards[u].f_detach().map_err(terr)?
        } else if self.device() == Device::Cpu {
            let full = Tensor::f_empty([n as i64], (Kind::Float, Device::Cpu)).map_err(terr)?;
            // SAFETY: both are fresh or owned contiguous f32 CPU tensors.
            unsafe {
                comm.all_gather_v(
                    cpu_slice(&self.shards[u]),
                    &self.counts[u],
                    cpu_slice_mut(&full),
                )?
            };
            full
        } else {
            let local = host_vec(&self.shards[u])?;
            let mut host = vec![0f32; n];
            comm.all_gather_v(&local, &self.counts[u], &mut host)?;
            Tensor::from_slice(&host)
                .f_to_device(self.device())
                .map_err(terr)?
        };
        sync(self.device());
        self.clock.comm_ms += ms_since(t);
        self.clock.wait_ms += waited;
        Ok(full)
    }

    /// Reduces the full f32 gradient `g` of unit `u` as the sharding does
    /// and returns this rank's summed piece (f32, on the device): all-reduce
    /// in DDP buckets (no sharding), reduce-scatter in the shard group,
    /// then (hybrid) all-reduce of the piece across the replica group.
    fn reduce(&mut self, u: usize, g: Tensor) -> TResult<Tensor> {
        let dev = self.device();
        let g = g.f_contiguous().map_err(terr)?;
        if self.job.strategy.sharding == Sharding::NoShard {
            self.clock.wait_ms += self.wait(self.world);
            let t = Instant::now();
            let out = if self.world.size() == 1 {
                g
            } else {
                let (buf, mut host) = host_buffer(&g)?;
                // DDP's bucket cap (25 MiB of f32 gradients per all-reduce).
                let bucket = (sim::data_parallel::DDP_BUCKET_BYTES / 4.0) as usize;
                for chunk in host_mut(&buf, &mut host).chunks_mut(bucket.max(1)) {
                    self.world.all_reduce_sum(chunk)?;
                }
                buffer_tensor(buf, host, dev)?
            };
            sync(dev);
            self.clock.comm_ms += ms_since(t);
            return Ok(out);
        }
        let comm = self.shard_group();
        let waited = self.wait(comm);
        let t = Instant::now();
        let mine = self.counts[u][self.pos];
        let mut out = if comm.size() == 1 {
            g
        } else if dev == Device::Cpu {
            let local = Tensor::f_empty([mine as i64], (Kind::Float, Device::Cpu)).map_err(terr)?;
            // SAFETY: contiguous f32 CPU tensors owned here.
            unsafe {
                comm.reduce_scatter_v(cpu_slice(&g), &self.counts[u], cpu_slice_mut(&local))?
            };
            local
        } else {
            let full = host_vec(&g)?;
            let mut local = vec![0f32; mine];
            comm.reduce_scatter_v(&full, &self.counts[u], &mut local)?;
            Tensor::from_slice(&local).f_to_device(dev).map_err(terr)?
        };
        sync(dev);
        self.clock.comm_ms += ms_since(t);
        self.clock.wait_ms += waited;
        if let Some(rc) = self.replica_comm.as_ref() {
            let waited = self.wait(rc);
            let t = Instant::now();
            let (buf, mut host) = host_buffer(&out)?;
            rc.all_reduce_sum(host_mut(&buf, &mut host))?;
            out = buffer_tensor(buf, host, dev)?;
            sync(dev);
            self.clock.comm_ms += ms_since(t);
            self.clock.wait_ms += waited;
        }
        Ok(out)
    }

    /// Whether activations go through host memory (on CUDA, when the
    /// strategy offloads and the rank accumulates or runs micro-batch-major).
    fn offloads(&self) -> bool {
        self.device() != Device::Cpu
            && self
                .job
                .strategy
                .offloads_activations(self.mb_sizes.len() as u32)
    }

    /// Whether the gradients between units go through the host too
    /// (layered accumulation, [`sim::data_parallel::Rules`]).
    fn offloads_grads(&self) -> bool {
        self.offloads() && self.job.strategy.accumulation == Accumulation::Layered
    }

    fn offload(&mut self, t: Tensor, yes: bool) -> TResult<Tensor> {
        if !yes {
            return Ok(t);
        }
        let s = Instant::now();
        let h = t.f_to_device(Device::Cpu).map_err(terr)?;
        self.clock.copy_ms += ms_since(s);
        Ok(h)
    }

    fn reload(&mut self, t: &Tensor) -> TResult<Tensor> {
        if t.device() == self.device() {
            return Ok(t.shallow_clone());
        }
        let s = Instant::now();
        let d = t.f_to_device(self.device()).map_err(terr)?;
        sync(self.device());
        self.clock.copy_ms += ms_since(s);
        Ok(d)
    }

    fn maybe_fail(&self, iteration: usize) {
        maybe_fail(self.job, self.world.rank(), iteration);
    }

    /// Adds per-tensor gradients `g` of unit `u` into its unsharded f32
    /// buffer `acc` (allocated by the first contribution).
    fn add_grad(&self, u: usize, acc: &mut Option<Tensor>, g: &[Tensor]) -> TResult<()> {
        match acc {
            Some(a) => self.model.accumulate(u, a, g),
            None => {
                let n = self.model.units[u].numel() as i64;
                let a = Tensor::f_empty([n], (Kind::Float, self.device())).map_err(terr)?;
                self.model.store(u, &a, g)?;
                *acc = Some(a);
                Ok(())
            }
        }
    }

    /// One training iteration; returns (iteration ms, this rank's loss sum).
    fn iteration(&mut self, it: usize) -> TResult<(f64, f64)> {
        self.clock = Clock::default();
        let (off, off_grads) = (self.offloads(), self.offloads_grads());
        self.world.barrier();
        let t_iter = Instant::now();

        let mut st = self.iteration_state(it, off, off_grads)?;
        let phases = self.phases.clone();
        for (pi, ph) in phases.iter().enumerate() {
            self.run_phase(&mut st, ph)?;
            if pi == 0 {
                self.maybe_fail(it);
            }
        }
        drop(std::mem::take(&mut st.gathered));

        if it == 0 && self.job.return_grads {
            let copies = st.grad_shards.iter().map(|g| {
                g.as_ref()
                    .expect("every unit has a gradient")
                    .f_detach_copy()
            });
            self.first_grad_shards = Some(copies.collect::<Result<Vec<_>, _>>().map_err(terr)?);
        }

        self.optimizer_step(it, std::mem::take(&mut st.grad_shards))?;
        self.sample_mem();
        self.world.barrier();
        Ok((ms_since(t_iter), st.loss_sum))
    }

    /// The state iteration `it` starts from: every micro-batch's data, the
    /// replicas' parameters (gathered once), nothing else yet; `off` and
    /// `off_grads` say whether activations and gradients go through the host.
    fn iteration_state(&self, it: usize, off: bool, off_grads: bool) -> TResult<IterState> {
        let kind = self.model.kind;
        let units = self.model.n_units();
        let n = self.mb_sizes.len();
        let s = self.job.strategy;
        // Data of every micro-batch (inputs and targets on the device).
        let mut data = Vec::with_capacity(n);
        let mut first = self.first_sample;
        for &m in &self.mb_sizes {
            data.push(self.model.batch(self.job.seed, it as u64, first, m)?);
            first += m;
        }
        let none = |k: usize| -> Vec<Option<Tensor>> { (0..k).map(|_| None).collect() };
        // Gathered parameters per unit (compute dtype); replicas always.
        let mut gathered = none(units);
        if s.sharding == Sharding::NoShard {
            for (u, g) in gathered.iter_mut().enumerate() {
                *g = Some(self.shards[u].f_to_kind(kind).map_err(terr)?);
            }
        }
        Ok(IterState {
            off,
            off_grads,
            data,
            gathered,
            outputs: (0..units).map(|_| none(n)).collect(),
            live: none(n),
            saved: (0..units).map(|_| (0..n).map(|_| None).collect()).collect(),
            dys: none(n),
            gacc: none(units),
            grad_shards: none(units),
            loss_sum: 0.0,
        })
    }

    /// Runs phase `ph` of the iteration: gathers its unit's parameters when
    /// it says so, runs its passes over its micro-batches (timed as
    /// compute, less the host copies), then reshards and reduces when it
    /// says so.
    fn run_phase(&mut self, st: &mut IterState, ph: &Phase) -> TResult<()> {
        let dev = self.device();
        let kind = self.model.kind;
        let head = self.model.n_units() - 1;
        let n = self.mb_sizes.len();
        let s = self.job.strategy;
        let u = ph.unit as usize;
        let micros: Vec<usize> = match ph.pass {
            None => (0..n).collect(),
            Some(k) if (k as usize) < n => vec![k as usize],
            Some(_) => vec![],
        };
        if ph.gather {
            let p = self.gather(u)?;
            let t = Instant::now();
            st.gathered[u] = Some(p.f_to_kind(kind).map_err(terr)?);
            self.clock.compute_ms += ms_since(t);
        }
        let t = Instant::now();
        let copy_before = self.clock.copy_ms;
        let pk = st.gathered[u].as_ref().map(|p| p.shallow_clone());
        let recompute = if (1..head).contains(&u) {
            s.checkpointing.block(u as u32)
        } else {
            Recompute::None
        };
        match ph.kind {
            PhaseKind::Forward if !micros.is_empty() => {
                let pk = pk.expect("a forward phase has its parameters");
                self.forward_phase(st, u, &micros, &pk, recompute)?;
            }
            PhaseKind::Head if !micros.is_empty() => {
                let pk = pk.expect("the head phase has its parameters");
                self.head_phase(st, &micros, &pk)?;
            }
            PhaseKind::Backward if !micros.is_empty() => {
                self.backward_phase(st, u, &micros, pk.as_ref())?;
            }
            _ => {}
        }
        sync(dev);
        let passes = ms_since(t) - (self.clock.copy_ms - copy_before);
        self.clock.compute_ms += passes;
        self.clock.passes_ms += passes;
        self.sample_mem();
        if ph.reshard {
            st.gathered[u] = None;
        }
        if ph.reduce {
            self.reduce_phase(st, u)?;
        }
        Ok(())
    }

    /// Forward of unit `u` (parameters `pk`) over micro-batches `micros`:
    /// keeps its autograd graph, or only its input when the unit is
    /// recomputed, and its output (offloaded when the strategy says so).
    fn forward_phase(
        &mut self,
        st: &mut IterState,
        u: usize,
        micros: &[usize],
        pk: &Tensor,
        recompute: Recompute,
    ) -> TResult<()> {
        let layered = self.job.strategy.accumulation == Accumulation::Layered;
        let graph = recompute == Recompute::None;
        let leaves = if graph {
            Some(Rc::new(self.model.leaves(u, pk)?))
        } else {
            None
        };
        for &j in micros {
            let x = if u == 0 {
                st.data[j].0.shallow_clone()
            } else {
                match st.live[j].take() {
                    Some(x) => x,
                    None => {
                        let stored = st.outputs[u - 1][j].as_ref().expect("input kept");
                        self.reload(&stored.shallow_clone())?
                    }
                }
            };
            let y = match &leaves {
                Some(l) => {
                    let xl = if u == 0 {
                        None
                    } else {
                        Some(x.f_detach().map_err(terr)?.set_requires_grad(true))
                    };
                    let y = self.model.forward_p(u, l, xl.as_ref().unwrap_or(&x))?;
                    let out = y.f_detach().map_err(terr)?;
                    // The graph holds the input now.
                    if u > 0 {
                        st.outputs[u - 1][j] = None;
                    }
                    st.saved[u][j] = Some(Saved::Graph {
                        leaves: l.clone(),
                        x: xl,
                        y,
                    });
                    out
                }
                None => {
                    let _g = tch::no_grad_guard();
                    st.saved[u][j] = Some(Saved::Input);
                    self.model.forward(u, pk, &x)?
                }
            };
            if !layered {
                st.live[j] = Some(y.shallow_clone());
            }
            st.outputs[u][j] = Some(self.offload(y, st.off)?);
        }
        Ok(())
    }

    /// The head (parameters `pk`) over micro-batches `micros`: its loss,
    /// its gradients (accumulated) and the gradient of its input, the
    /// first `dy` of the backward.
    fn head_phase(&mut self, st: &mut IterState, micros: &[usize], pk: &Tensor) -> TResult<()> {
        let head = self.model.n_units() - 1;
        let leaves = self.model.leaves(head, pk)?;
        let k = leaves.len();
        for &j in micros {
            let x = match st.live[j].take() {
                Some(x) => x,
                None => {
                    let stored = st.outputs[head - 1][j].take().expect("head input");
                    self.reload(&stored)?
                }
            };
            st.outputs[head - 1][j] = None;
            let x = x.f_detach().map_err(terr)?.set_requires_grad(true);
            let loss = self.model.head_loss_p(&leaves, &x, &st.data[j].1)?;
            let mut inputs: Vec<&Tensor> = leaves.iter().collect();
            inputs.push(&x);
            let g = Tensor::f_run_backward(&[&loss], &inputs, false, false).map_err(terr)?;
            self.add_grad(head, &mut st.gacc[head], &g[..k])?;
            st.loss_sum += loss.f_double_value(&[]).map_err(terr)?;
            st.dys[j] = Some(self.offload(g[k].shallow_clone(), st.off_grads)?);
        }
        Ok(())
    }

    /// Backward of unit `u` over micro-batches `micros`: from its kept
    /// graph, or a recomputed forward (parameters `pk`); accumulates its
    /// gradients and passes the gradient of its input down.
    fn backward_phase(
        &mut self,
        st: &mut IterState,
        u: usize,
        micros: &[usize],
        pk: Option<&Tensor>,
    ) -> TResult<()> {
        let mut leaves: Option<Rc<Vec<Tensor>>> = None;
        for &j in micros {
            let dy = self.reload(st.dys[j].as_ref().expect("output gradient"))?;
            let (leaves_j, x, y) = match st.saved[u][j].take().expect("forward ran") {
                Saved::Graph { leaves, x, y } => (leaves, x, y),
                Saved::Input => {
                    if leaves.is_none() {
                        let pk = pk.expect("gathered for the recompute");
                        leaves = Some(Rc::new(self.model.leaves(u, pk)?));
                    }
                    let l = leaves.clone().expect("just set");
                    let stored = st.outputs[u - 1][j].as_ref().expect("saved input");
                    let x = self
                        .reload(&stored.shallow_clone())?
                        .f_detach()
                        .map_err(terr)?
                        .set_requires_grad(true);
                    let y = self.model.forward_p(u, &l, &x)?;
                    (l, Some(x), y)
                }
            };
            let surrogate = y
                .f_mul(&dy)
                .and_then(|t| t.f_sum(None::<Kind>))
                .map_err(terr)?;
            let k = leaves_j.len();
            let mut inputs: Vec<&Tensor> = leaves_j.iter().collect();
            inputs.extend(x.as_ref());
            let g = Tensor::f_run_backward(&[&surrogate], &inputs, false, false).map_err(terr)?;
            self.add_grad(u, &mut st.gacc[u], &g[..k])?;
            st.dys[j] = if u > 0 {
                st.outputs[u - 1][j] = None;
                Some(self.offload(g[k].shallow_clone(), st.off_grads)?)
            } else {
                None
            };
        }
        Ok(())
    }

    /// Reduces unit `u`'s accumulated gradient (zeros when this pass
    /// computed none) and adds the piece to its gradient shard.
    fn reduce_phase(&mut self, st: &mut IterState, u: usize) -> TResult<()> {
        let dev = self.device();
        let g = match st.gacc[u].take() {
            Some(g) => g,
            // Nothing computed in this pass: reduce zeros.
            None => {
                let n = self.model.units[u].numel() as i64;
                Tensor::f_zeros([n], (Kind::Float, dev)).map_err(terr)?
            }
        };
        let piece = self.reduce(u, g)?;
        st.grad_shards[u] = Some(match st.grad_shards[u].take() {
            None => piece,
            Some(acc) => acc.f_add(&piece).map_err(terr)?,
        });
        Ok(())
    }

    /// Adam on the local pieces (on the host when offloaded), step `it + 1`,
    /// with every unit's gradient shard.
    fn optimizer_step(&mut self, it: usize, grad_shards: Vec<Option<Tensor>>) -> TResult<()> {
        let dev = self.device();
        let step = it as u64 + 1;
        for (u, g) in grad_shards.into_iter().enumerate() {
            let g = g.expect("every unit has a gradient");
            if self.adam[u].m.device() != dev {
                let c = Instant::now();
                let mut p = self.shards[u].f_to_device(Device::Cpu).map_err(terr)?;
                let g = g.f_to_device(Device::Cpu).map_err(terr)?;
                self.clock.copy_ms += ms_since(c);
                let t = Instant::now();
                adam_step(&mut p, &g, &mut self.adam[u], step, &self.job.adam)?;
                self.clock.compute_ms += ms_since(t);
                self.clock.optimizer_ms += ms_since(t);
                let c = Instant::now();
                self.shards[u] = p.f_to_device(dev).map_err(terr)?;
                sync(dev);
                self.clock.copy_ms += ms_since(c);
            } else {
                let t = Instant::now();
                adam_step(
                    &mut self.shards[u],
                    &g,
                    &mut self.adam[u],
                    step,
                    &self.job.adam,
                )?;
                sync(dev);
                let ms = ms_since(t);
                self.clock.compute_ms += ms;
                self.clock.optimizer_ms += ms;
            }
        }
        Ok(())
    }

    /// Full per-unit vectors from per-unit local pieces (gathered in the
    /// shard group; replicas are whole already).
    fn gather_all(&self, shards: &[Tensor]) -> TResult<Vec<Vec<f32>>> {
        let mut out = Vec::new();
        for (u, shard) in shards.iter().enumerate() {
            let local = host_vec(shard)?;
            if self.job.strategy.sharding == Sharding::NoShard {
                out.push(local);
                continue;
            }
            let mut full = vec![0f32; self.model.units[u].numel()];
            self.shard_group()
                .all_gather_v(&local, &self.counts[u], &mut full)?;
            out.push(full);
        }
        Ok(out)
    }
}

/// The 16-bit tensor kind of a parameter dtype (`None` for fp32).
fn half_kind(d: sim::precision::NumFormat) -> Option<Kind> {
    match d {
        sim::precision::NumFormat::Fp32 => None,
        sim::precision::NumFormat::Bf16 => Some(Kind::BFloat16),
        sim::precision::NumFormat::Fp16 => Some(Kind::Half),
    }
}

/// Trains `job` on this rank of `comm` (every rank calls it with the same
/// job). Returns the assembled report on rank 0 and `None` on the others.
/// The job must already be validated for `comm.size()` ranks.
pub fn train<C: Collectives>(job: &Job, comm: &C) -> Result<Option<TrainReport>, ExecError> {
    job.validate(Some(comm.size()), None)?;
    if job.pipeline.is_some() {
        return crate::stage_trainer::train(job, comm);
    }
    let mut rank = Rank::new(job, comm)?;
    let rec = run_iterations(job, comm, |it| {
        let (ms, loss) = rank.iteration(it)?;
        Ok((ms, loss, rank.clock))
    })?;
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
    Ok(assemble(job, comm, rec, unit_params, params, first_grads))
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
            first_grads = grads.iter().map(host_vec).collect::<TResult<Vec<_>>>()?;
        }
        for (u, g) in grads.iter().enumerate() {
            adam_step(&mut params[u], g, &mut states[u], step as u64 + 1, adam)?;
        }
    }
    let params = params.iter().map(host_vec).collect::<TResult<Vec<_>>>()?;
    Ok(ReferenceRun {
        params,
        loss_sums,
        first_grads,
    })
}
