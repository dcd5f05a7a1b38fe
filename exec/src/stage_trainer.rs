//! The trainer of one rank of a pipelined or tensor-parallel plan (a job
//! with a [`Pipeline`]): Megatron-LM's 3D parallelism on MPI ranks.
//!
//! * **Placement** ([`Pipeline`]): stage `s` holds its blocks (the first
//!   also the embedding, the last the head); its GPUs form TP groups of
//!   `tp` consecutive entries, the groups are its data-parallel replicas.
//!   A rank's TP index is its place among its group's world ranks (the
//!   order of the TP communicator), its DP group the same TP index of
//!   every replica of its stage. With `v` chunks (interleaved), chunk `c`
//!   of stage `s` is virtual stage `c p + s`.
//! * **Order**: each stage runs [`sim::pipeline::schedule::actions`] of
//!   the plan's schedule, the simulator's own list (GPipe, 1F1B,
//!   interleaved 1F1B), so the order has one source.
//! * **Samples**: the global batch splits into the pipeline's
//!   micro-batches ([`Pipeline::micro_sizes`]), each micro-batch over a
//!   stage's replicas by [`sim::plan::pipeline::Stage::slices`] (shares
//!   when the plan has them); replica `j` computes the `j`-th slice.
//! * **Between stages**: activations forward and their gradients back
//!   by point-to-point messages (`MPI_Isend` / `MPI_Recv`), each replica
//!   sending the next stage's replicas the parts of its slice they hold
//!   ([`overlaps`]); within TP groups, receiver `i` takes the whole
//!   activation from sender `i mod t_from` (gradients back from `i mod
//!   t_to`), or with sequence parallelism rank `i`'s sequence shard from
//!   rank `i`. The time a rank blocks in a receive is its wait (bubble
//!   and transfer).
//! * **Tensor parallelism** inside every unit: [`crate::tensor_parallel`].
//! * **Recompute**: a block the strategy checkpoints keeps only its input
//!   and runs its forward again (with its TP collectives) before its
//!   backward.
//! * **Gradients** accumulate over the micro-batches (`no-sync`), then
//!   (under SP, the replicated tensors summed over the TP group) the DP
//!   group reduces them once, as the plan's sharding says: `none` (DDP)
//!   all-reduces and every replica steps its whole copy; `grad-op`
//!   (ZeRO-1) reduce-scatters, steps its piece and all-gathers the
//!   updated parameters; `full` (FSDP inside the stages of a pipeline of
//!   two or more stages, gathered once per step as the simulator lowers
//!   it; at one stage the simulator reshards per unit and the job is
//!   refused) reduce-scatters, steps its piece and gathers the parameters
//!   at the next step's start.
//!
//! Units: times in ms, batches in samples; parameters, gradients and Adam
//! moments f32.

use std::time::Instant;

use sim::pipeline::schedule::{actions, Action};
use sim::plan::pipeline::{overlaps, Pipeline};
use sim::strategy::{Recompute, Sharding};
use tch::{Device, Kind, Tensor};

use crate::adam::{adam_step, AdamState};
use crate::comm::Collectives;
use crate::config::Job;
use crate::error::ExecError;
use crate::host::{buffer_tensor, from_host, host_buffer, host_mut, host_vec};
use crate::layout::{tp_init_values, tp_runs, unit_layouts, TpSplit, UnitLayout};
use crate::model::{device_for, kind_of, sync, terr, Model, TResult};
use crate::records::{assemble, maybe_fail, ms_since, run_iterations, Clock};
use crate::report::TrainReport;
use crate::shard::{offsets, piece_sizes};
use crate::tensor_parallel::{vocab_parallel_ce, Tape, TpGroup};

/// A 1-D tensor on `device` from host values.
fn from_host_slice(v: &[f32], device: Device) -> TResult<Tensor> {
    from_host(v, &[v.len() as i64], device)
}

/// Tag of the messages into virtual stage `x` (forward) or out of it
/// (backward): per edge and direction, so each micro-batch's messages
/// match in order (MPI does not overtake within a tag).
fn tag(x: usize, backward: bool) -> u16 {
    (2 * x + usize::from(backward)) as u16
}

/// Tag of unit `u`'s parameters or gradients sent to rank 0 for the report:
/// above every pipeline tag ([`tag`], `2 p v + 1` of them) and below
/// 32,767, the least `MPI_TAG_UB` the MPI standard allows.
fn report_tag(u: usize) -> u16 {
    (16384 + u % 16384) as u16
}

/// What a unit's forward left for its backward.
enum Saved {
    /// The recorded pieces and the output value's id.
    Tape(Tape, usize),
    /// Only the input (recomputed before the backward).
    Input(Tensor),
    /// The head: its pieces, the logits' id and the loss gradient.
    Head(Tape, usize, Tensor),
}

/// Who is where: per stage and replica the TP group's world ranks (TP
/// order: ascending), per rank its TP and DP communicator colours and its
/// place (stage, replica, TP index, TP degree). Every rank computes the
/// same, so the communicator splits agree.
struct Groups {
    members: Vec<Vec<Vec<usize>>>,
    tp_color: Vec<usize>,
    dp_color: Vec<usize>,
    place: Vec<Option<(usize, usize, usize, usize)>>,
}

impl Groups {
    fn of(pipe: &Pipeline, ranks: usize) -> Groups {
        let mut g = Groups {
            members: Vec::new(),
            tp_color: vec![0; ranks],
            dp_color: vec![0; ranks],
            place: vec![None; ranks],
        };
        let (mut tp_groups, mut dp_groups) = (0, 0);
        for (s, st) in pipe.stages.iter().enumerate() {
            let t = st.tp.max(1) as usize;
            let mut reps = Vec::new();
            for j in 0..st.dp() {
                let mut m: Vec<usize> = st.gpus[j * t..(j + 1) * t]
                    .iter()
                    .map(|&x| x as usize)
                    .collect();
                m.sort_unstable();
                for (r, &w) in m.iter().enumerate() {
                    if w < ranks {
                        g.tp_color[w] = tp_groups;
                        g.dp_color[w] = dp_groups + r;
                        g.place[w] = Some((s, j, r, t));
                    }
                }
                tp_groups += 1;
                reps.push(m);
            }
            dp_groups += t;
            g.members.push(reps);
        }
        g
    }
}

/// The units of each chunk of stage `s` (a model of `layers` blocks), in
/// order: chunk `c` is virtual stage `c p + s`, the first also holding the
/// embedding (unit 0), the last the head (unit `layers + 1`).
fn chunk_units(pipe: &Pipeline, s: usize, layers: usize) -> Vec<Vec<usize>> {
    let (p, v) = (pipe.depth(), pipe.chunks() as usize);
    (0..v)
        .map(|c| {
            let x = c * p + s;
            let first = pipe.virtual_first_block(x) as usize;
            let mut units = Vec::new();
            if x == 0 {
                units.push(0);
            }
            units.extend(first..first + pipe.virtual_blocks(x) as usize);
            if x + 1 == p * v {
                units.push(layers + 1);
            }
            units
        })
        .collect()
}

/// One rank of a pipelined / tensor-parallel job.
struct StageRank<'a, C: Collectives> {
    job: &'a Job,
    pipe: &'a Pipeline,
    world: &'a C,
    tp_comm: C,
    dp_comm: C,
    /// Stage, replica, TP index, TP degree.
    s: usize,
    j: usize,
    r: usize,
    t: usize,
    /// Per stage and replica, the world ranks of its TP group in TP order.
    members: Vec<Vec<Vec<usize>>>,
    /// TP-local layouts (this rank's) and the full ones.
    model: Model,
    full: Vec<UnitLayout>,
    /// Units of each of this rank's chunks, in order.
    chunks: Vec<Vec<usize>>,
    /// Per unit: this rank's TP piece (whole over the DP group), f32.
    params: Vec<Option<Tensor>>,
    /// Per unit: piece sizes over the DP group (sharded strategies).
    counts: Vec<Vec<usize>>,
    /// Per unit: Adam moments of what this rank steps.
    adam: Vec<Option<AdamState>>,
    /// Whether the parameters wait for a gather (FSDP inside a stage).
    stale: bool,
    clock: Clock,
    first_grads: Option<Vec<Option<Tensor>>>,
}

impl<'a, C: Collectives> StageRank<'a, C> {
    fn new(job: &'a Job, pipe: &'a Pipeline, world: &'a C) -> TResult<Self> {
        let rank = world.rank();
        if let Some(t) = job.threads {
            tch::set_num_threads(t as i32);
        }
        let g = Groups::of(pipe, world.size());
        let (s, j, r, t) = g.place[rank].ok_or_else(|| ExecError::InvalidJob {
            field: "pipeline.stages[].gpus".into(),
            message: format!("rank {rank} is in no stage"),
        })?;
        let tp_comm = world.split(g.tp_color[rank])?;
        let dp_comm = world.split(g.dp_color[rank])?;
        let members = g.members;
        let device = device_for(job.device, rank)?;
        let model = Model::new_tp(&job.model, device, kind_of(job.dtype), t)?;
        let full = unit_layouts(&job.model);
        let chunks = chunk_units(pipe, s, job.model.layers);
        let d = dp_comm.size();
        let sharded = job.strategy.sharding != Sharding::NoShard && d > 1;
        let n_units = full.len();
        let mut params: Vec<Option<Tensor>> = (0..n_units).map(|_| None).collect();
        let mut adam: Vec<Option<AdamState>> = (0..n_units).map(|_| None).collect();
        let mut counts = vec![Vec::new(); n_units];
        for &u in chunks.iter().flatten() {
            let vals = tp_init_values(&full[u], u, job.seed, t, r);
            let p = Tensor::from_slice(&vals)
                .f_to_device(device)
                .map_err(terr)?;
            let n = vals.len();
            counts[u] = if sharded {
                piece_sizes(n, &vec![1.0 / d as f64; d])
            } else {
                vec![n]
            };
            // Moments of what this rank steps: its piece, or the whole.
            let me = if sharded { dp_comm.rank() } else { 0 };
            let stepped = p
                .f_narrow(0, offsets(&counts[u])[me] as i64, counts[u][me] as i64)
                .map_err(terr)?;
            adam[u] = Some(AdamState::zeros_like(&stepped)?);
            params[u] = Some(p);
        }
        Ok(StageRank {
            job,
            pipe,
            world,
            tp_comm,
            dp_comm,
            s,
            j,
            r,
            t,
            members,
            model,
            full,
            chunks,
            params,
            counts,
            adam,
            stale: false,
            clock: Clock::default(),
            first_grads: None,
        })
    }

    fn device(&self) -> Device {
        self.model.device
    }

    fn sharded(&self) -> bool {
        self.job.strategy.sharding != Sharding::NoShard && self.dp_comm.size() > 1
    }

    fn tp(&self) -> TpGroup<'_, C> {
        TpGroup {
            comm: (self.t > 1).then_some(&self.tp_comm),
            t: self.t,
            r: self.r,
            sp: self.pipe.sequence_parallel && self.t > 1,
            comm_ms: std::cell::Cell::new(0.0),
            log: None,
        }
    }

    /// Replica slices `[lo, hi)` of stage `s` over a micro-batch of `size`.
    fn slices(&self, s: usize, size: u32) -> Vec<(u32, u32)> {
        self.pipe.stages[s].slices(size)
    }

    /// One training iteration: (ms, this rank's loss).
    fn iteration(&mut self, it: usize) -> TResult<(f64, f64)> {
        self.clock = Clock::default();
        self.world.barrier();
        let t_iter = Instant::now();
        if self.stale {
            self.gather_params()?;
        }
        let (p, v) = (self.pipe.depth(), self.pipe.chunks());
        let sizes = self.pipe.micro_sizes(self.job.global_batch() as u32);
        let starts = offsets(&sizes.iter().map(|&m| m as usize).collect::<Vec<_>>());
        let kind = self.model.kind;
        // This rank's tensors per unit (compute dtype), autograd leaves.
        let mut leaves: Vec<Option<Vec<Tensor>>> = Vec::with_capacity(self.params.len());
        for (u, pr) in self.params.iter().enumerate() {
            leaves.push(match pr {
                Some(pr) => Some(self.model.leaves(u, &pr.f_to_kind(kind).map_err(terr)?)?),
                None => None,
            });
        }
        let mut grads: Vec<Option<Tensor>> = (0..self.params.len()).map(|_| None).collect();
        let mut saved: Vec<Vec<Vec<Saved>>> = (0..v as usize)
            .map(|_| (0..sizes.len()).map(|_| Vec::new()).collect())
            .collect();
        let mut loss = 0.0;
        let steps = actions(self.pipe.schedule, p, self.s, sizes.len() as u32, v);
        for (n, (c, a)) in steps.into_iter().enumerate() {
            let x = c as usize * p + self.s;
            match a {
                Action::Fwd(k) => {
                    let k = k as usize;
                    let (lo, hi) = self.slices(self.s, sizes[k])[self.j];
                    let first = starts[k] + lo as usize;
                    loss += self.forward(
                        it,
                        x,
                        c as usize,
                        k,
                        sizes[k],
                        (lo, hi),
                        first,
                        &leaves,
                        &mut saved,
                    )?;
                }
                Action::Bwd(k) => {
                    let k = k as usize;
                    let (lo, hi) = self.slices(self.s, sizes[k])[self.j];
                    let list = std::mem::take(&mut saved[c as usize][k]);
                    self.backward(x, c as usize, sizes[k], (lo, hi), list, &leaves, &mut grads)?;
                }
                Action::Wgt(_) => {
                    return Err(ExecError::InvalidJob {
                        field: "pipeline.schedule".into(),
                        message: "the trainer does not split backwards".into(),
                    })
                }
            }
            if n == 0 {
                maybe_fail(self.job, self.world.rank(), it);
            }
        }
        let t = Instant::now();
        self.world.flush_sends()?;
        self.clock.wait_ms += ms_since(t);
        drop(leaves);
        self.sync_and_step(it, grads)?;
        self.world.barrier();
        Ok((ms_since(t_iter), loss))
    }

    /// Forward of micro-batch `k` (size `size`, this replica's slice
    /// `lo..hi`, global samples from `first`) on chunk `c` (virtual stage
    /// `x`): receives or embeds, runs the chunk's units, sends on or takes
    /// the loss. Returns the loss it added (TP index 0 of the last stage).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        it: usize,
        x: usize,
        c: usize,
        k: usize,
        size: u32,
        (lo, hi): (u32, u32),
        first: usize,
        leaves: &[Option<Vec<Tensor>>],
        saved: &mut [Vec<Vec<Saved>>],
    ) -> TResult<f64> {
        let m = (hi - lo) as usize;
        if m == 0 {
            return Ok(0.0);
        }
        let vp = self.pipe.virtual_depth();
        // Token ids for the embedding, targets for the loss: generated
        // only where a stage holds one of them.
        let data = if x == 0 || x + 1 == vp {
            Some(self.model.batch(self.job.seed, it as u64, first, m)?)
        } else {
            None
        };
        let mut input = match (&data, x) {
            (Some((tokens, _)), 0) => tokens.shallow_clone(),
            _ => self.recv_from(x - 1, tag(x, false), size, (lo, hi))?,
        };
        let tp = self.tp();
        let t0 = Instant::now();
        let mut loss = 0.0;
        let head = self.job.model.layers + 1;
        for &u in &self.chunks[c] {
            let p = leaves[u].as_ref().expect("held unit");
            let recompute = (1..head).contains(&u)
                && self.job.strategy.checkpointing.block(u as u32) == Recompute::Full;
            let mut tape = Tape::new(input.shallow_clone(), !recompute);
            let out = self.model.record(u, &mut tape, p, &tp)?;
            if u == head {
                let logits = tape.val(out).shallow_clone();
                let (_, targets) = data.as_ref().expect("the last stage has the targets");
                let (l, dl) = vocab_parallel_ce(&logits, targets, self.job.model.vocab, &tp)?;
                if self.r == 0 {
                    loss += l;
                }
                saved[c][k].push(Saved::Head(tape, out, dl));
                break;
            }
            let y = tape.val(out).shallow_clone();
            saved[c][k].push(if recompute {
                Saved::Input(input)
            } else {
                Saved::Tape(tape, out)
            });
            input = y;
        }
        sync(self.device());
        let comm = tp.comm_ms.get();
        self.charge_passes(t0, comm);
        if x + 1 < vp {
            self.send_to(x + 1, tag(x + 1, false), size, (lo, hi), &input)?;
        }
        Ok(loss)
    }

    /// Backward of a micro-batch on chunk `c` (virtual stage `x`) from
    /// what its forward saved: receives the output gradient (or starts
    /// from the loss), runs the units backwards, accumulates their
    /// gradients, sends the input gradient back.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &mut self,
        x: usize,
        c: usize,
        size: u32,
        (lo, hi): (u32, u32),
        list: Vec<Saved>,
        leaves: &[Option<Vec<Tensor>>],
        grads: &mut [Option<Tensor>],
    ) -> TResult<()> {
        if hi == lo {
            return Ok(());
        }
        let vp = self.pipe.virtual_depth();
        let mut dy = if x + 1 < vp {
            Some(self.recv_from(x + 1, tag(x + 1, true), size, (lo, hi))?)
        } else {
            None
        };
        let tp = self.tp();
        let t0 = Instant::now();
        let units = self.chunks[c].clone();
        for (saved, &u) in list.into_iter().rev().zip(units.iter().rev()) {
            let p = leaves[u].as_ref().expect("held unit");
            let (dx, pg) = match saved {
                Saved::Head(tape, out, dl) => tape.backward(out, dl, p, &tp)?,
                Saved::Tape(tape, out) => {
                    tape.backward(out, dy.take().expect("output gradient"), p, &tp)?
                }
                Saved::Input(input) => {
                    let mut tape = Tape::new(input, true);
                    let out = self.model.record(u, &mut tape, p, &tp)?;
                    tape.backward(out, dy.take().expect("output gradient"), p, &tp)?
                }
            };
            self.accumulate(u, &mut grads[u], &pg)?;
            dy = dx;
        }
        sync(self.device());
        let comm = tp.comm_ms.get();
        self.charge_passes(t0, comm);
        if x > 0 {
            let dx = dy.expect("the input gradient of a unit after the embedding");
            self.send_to(x - 1, tag(x, true), size, (lo, hi), &dx)?;
        }
        Ok(())
    }

    /// Books the time since `t0` as passes (compute), less the `comm` ms
    /// of TP collectives inside it (communication).
    fn charge_passes(&mut self, t0: Instant, comm: f64) {
        let passes = ms_since(t0) - comm;
        self.clock.passes_ms += passes;
        self.clock.compute_ms += passes;
        self.clock.comm_ms += comm;
    }

    /// Adds per-tensor gradients `pg` (`None`: the tensor was not read)
    /// into unit `u`'s flat f32 accumulator.
    fn accumulate(&self, u: usize, acc: &mut Option<Tensor>, pg: &[Option<Tensor>]) -> TResult<()> {
        let _g = tch::no_grad_guard();
        if acc.is_none() {
            let n = self.model.units[u].numel() as i64;
            *acc = Some(Tensor::f_zeros([n], (Kind::Float, self.device())).map_err(terr)?);
        }
        let a = acc.as_ref().expect("just set");
        for (view, g) in self.model.split(u, a)?.iter_mut().zip(pg) {
            if let Some(g) = g {
                let g = g.f_to_kind(Kind::Float).map_err(terr)?;
                let _ = view.f_add_(&g).map_err(terr)?;
            }
        }
        Ok(())
    }

    /// The TP ranks of replica `j2` of stage `s2` this rank exchanges with:
    /// forward senders `i mod t_from`, or with SP its own index.
    fn peers(&self, s2: usize, j2: usize, receiving: bool) -> Vec<usize> {
        let group = &self.members[s2][j2];
        let t2 = group.len();
        if self.pipe.sequence_parallel && self.t > 1 {
            return vec![group[self.r]];
        }
        if receiving {
            vec![group[self.r % t2]]
        } else {
            (0..t2)
                .filter(|i| i % self.t == self.r)
                .map(|i| group[i])
                .collect()
        }
    }

    /// Receives this replica's slice `lo..hi` of a micro-batch of `size`
    /// from the replicas of virtual stage `from` that hold its parts.
    fn recv_from(
        &mut self,
        from: usize,
        tag: u16,
        size: u32,
        (lo, hi): (u32, u32),
    ) -> TResult<Tensor> {
        let s2 = from % self.pipe.depth();
        let (s_len, h) = (
            self.tp().local_seq(self.job.model.seq_len) as i64,
            self.job.model.hidden as i64,
        );
        let t = Instant::now();
        let mut parts = Vec::new();
        for (j2, n, _) in overlaps(&self.slices(s2, size), lo, hi) {
            let src = self.peers(s2, j2, true)[0];
            let mut buf = vec![0f32; n as usize * (s_len * h) as usize];
            self.world.recv(src, tag, &mut buf)?;
            parts.push(from_host(&buf, &[n as i64, s_len, h], self.device())?);
        }
        self.clock.wait_ms += ms_since(t);
        let x = Tensor::f_cat(&parts, 0)
            .and_then(|x| x.f_to_kind(self.model.kind))
            .map_err(terr)?;
        Ok(x)
    }

    /// Sends the parts of `y` (this replica's slice `lo..hi`) to the
    /// replicas of virtual stage `to` that hold them.
    fn send_to(
        &mut self,
        to: usize,
        tag: u16,
        size: u32,
        (lo, hi): (u32, u32),
        y: &Tensor,
    ) -> TResult<()> {
        let s2 = to % self.pipe.depth();
        let t = Instant::now();
        let mut at = 0i64;
        for (j2, n, _) in overlaps(&self.slices(s2, size), lo, hi) {
            let part = host_vec(&y.f_narrow(0, at, n as i64).map_err(terr)?)?;
            for dst in self.peers(s2, j2, false) {
                self.world.send(dst, tag, part.clone())?;
            }
            at += n as i64;
        }
        self.clock.comm_ms += ms_since(t);
        Ok(())
    }

    /// Times a collective of the DP or TP group as communication.
    fn comm_timed<T>(&mut self, f: impl FnOnce(&Self) -> TResult<T>) -> TResult<T> {
        sync(self.device());
        let t = Instant::now();
        let out = f(self)?;
        sync(self.device());
        self.clock.comm_ms += ms_since(t);
        Ok(out)
    }

    /// All-gathers every unit's parameters over the DP group (after a
    /// sharded step).
    fn gather_params(&mut self) -> TResult<()> {
        let units: Vec<usize> = self.chunks.iter().flatten().copied().collect();
        for u in units {
            let full = self.comm_timed(|me| {
                let p = me.params[u].as_ref().expect("held unit");
                let all = host_vec(p)?;
                let o = offsets(&me.counts[u]);
                let mine = me.dp_comm.rank();
                let local = &all[o[mine]..o[mine] + me.counts[u][mine]];
                let mut full = vec![0f32; all.len()];
                me.dp_comm.all_gather_v(local, &me.counts[u], &mut full)?;
                from_host(&full, &[full.len() as i64], me.device())
            })?;
            self.params[u] = Some(full);
        }
        self.stale = false;
        Ok(())
    }

    /// The gradient synchronisation and the optimizer step of the
    /// iteration (module docs).
    fn sync_and_step(&mut self, it: usize, mut grads: Vec<Option<Tensor>>) -> TResult<()> {
        let units: Vec<usize> = self.chunks.iter().flatten().copied().collect();
        let sp = self.pipe.sequence_parallel && self.t > 1;
        let sharded = self.sharded();
        let mut firsts: Vec<Option<Tensor>> = (0..self.params.len()).map(|_| None).collect();
        for &u in &units {
            let g = match grads[u].take() {
                Some(g) => g,
                None => Tensor::f_zeros(
                    [self.model.units[u].numel() as i64],
                    (Kind::Float, self.device()),
                )
                .map_err(terr)?,
            };
            let g = self.reduce(u, g, sp, sharded)?;
            if it == 0 && self.job.return_grads {
                let whole = if sharded {
                    let piece = host_vec(&g)?;
                    let mut full = vec![0f32; self.model.units[u].numel()];
                    self.dp_comm
                        .all_gather_v(&piece, &self.counts[u], &mut full)?;
                    full
                } else {
                    host_vec(&g)?
                };
                firsts[u] = Some(Tensor::from_slice(&whole));
            }
            let t = Instant::now();
            let p = self.params[u].as_ref().expect("held unit");
            let mut target = if sharded {
                let o = offsets(&self.counts[u])[self.dp_comm.rank()];
                p.f_narrow(0, o as i64, g.numel() as i64).map_err(terr)?
            } else {
                p.shallow_clone()
            };
            let st = self.adam[u].as_mut().expect("held unit");
            adam_step(&mut target, &g, st, it as u64 + 1, &self.job.adam)?;
            sync(self.device());
            let ms = ms_since(t);
            self.clock.optimizer_ms += ms;
            self.clock.compute_ms += ms;
        }
        if it == 0 && self.job.return_grads {
            self.first_grads = Some(firsts);
        }
        if sharded {
            match self.job.strategy.sharding {
                Sharding::Full => self.stale = true,
                _ => self.gather_params()?,
            }
        }
        Ok(())
    }

    /// Unit `u`'s accumulated gradient `g` reduced as the iteration ends
    /// (communication time): under SP its replicated tensors summed over
    /// the TP group, then over the DP group all-reduced, or reduce-scattered
    /// to this rank's piece when `sharded`. In place in `g`'s storage on
    /// the CPU; nothing is copied when there is nothing to reduce.
    fn reduce(&mut self, u: usize, g: Tensor, sp: bool, sharded: bool) -> TResult<Tensor> {
        let d = self.dp_comm.size();
        if !sp && d == 1 {
            return Ok(g);
        }
        let segs: Vec<(usize, usize)> = self.model.units[u]
            .segments
            .iter()
            .filter(|seg| sp && seg.tp == TpSplit::Replicated)
            .map(|seg| (seg.offset, seg.numel()))
            .collect();
        let device = self.device();
        self.comm_timed(|me| {
            let (buf, mut host) = host_buffer(&g)?;
            let all = host_mut(&buf, &mut host);
            for &(o, n) in &segs {
                me.tp_comm.all_reduce_sum(&mut all[o..o + n])?;
            }
            if sharded {
                let c = &me.counts[u];
                let mut local = vec![0f32; c[me.dp_comm.rank()]];
                me.dp_comm.reduce_scatter_v(all, c, &mut local)?;
                return from_host_slice(&local, device);
            }
            if d > 1 {
                me.dp_comm.all_reduce_sum(all)?;
            }
            buffer_tensor(buf, host, device)
        })
    }

    /// Full per-unit vectors on rank 0 from every unit's TP pieces
    /// (`local`, whole over the DP group): replica 0 of the unit's stage
    /// gathers its TP group's pieces, puts them in place and sends the
    /// unit to rank 0. `None` on the other ranks.
    fn collect(&self, local: &[Option<Tensor>]) -> TResult<Option<Vec<Vec<f32>>>> {
        let n = self.full.len();
        let (p, v) = (self.pipe.depth(), self.pipe.chunks() as usize);
        let vp = p * v;
        let owner_stage = |u: usize| -> usize {
            let head = n - 1;
            let x = if u == 0 {
                0
            } else if u == head {
                vp - 1
            } else {
                (0..vp)
                    .find(|&x| {
                        let f = self.pipe.virtual_first_block(x) as usize;
                        (f..f + self.pipe.virtual_blocks(x) as usize).contains(&u)
                    })
                    .expect("every block is in a stage")
            };
            x % p
        };
        let me = self.world.rank();
        let mut out = if me == 0 {
            Some(vec![Vec::new(); n])
        } else {
            None
        };
        for (u, held) in local.iter().enumerate() {
            let s = owner_stage(u);
            let leader = self.members[s][0][0];
            if s == self.s && self.j == 0 {
                let piece = host_vec(held.as_ref().expect("held unit"))?;
                let mut all = vec![0f32; piece.len() * self.t];
                self.tp_comm
                    .all_gather_v(&piece, &vec![piece.len(); self.t], &mut all)?;
                if self.r == 0 {
                    let mut full = vec![0f32; self.full[u].numel()];
                    for r in 0..self.t {
                        let mut at = r * piece.len();
                        for (o, l) in tp_runs(&self.full[u], self.t, r) {
                            full[o..o + l].copy_from_slice(&all[at..at + l]);
                            at += l;
                        }
                    }
                    if me == 0 {
                        out.as_mut().expect("rank 0")[u] = full;
                    } else {
                        self.world.send(0, report_tag(u), full)?;
                    }
                }
            }
            if me == 0 && leader != 0 {
                let mut buf = vec![0f32; self.full[u].numel()];
                self.world.recv(leader, report_tag(u), &mut buf)?;
                out.as_mut().expect("rank 0")[u] = buf;
            }
        }
        self.world.flush_sends()?;
        Ok(out)
    }
}

/// Trains a pipelined / tensor-parallel `job` on this rank of `world`
/// (module docs): the report on rank 0, `None` elsewhere. The job is
/// validated already.
pub fn train<C: Collectives>(job: &Job, world: &C) -> Result<Option<TrainReport>, ExecError> {
    let pipe = job.pipeline.as_ref().expect("a pipeline job");
    let mut rank = StageRank::new(job, pipe, world)?;
    let rec = run_iterations(job, world, |it| {
        let (ms, loss) = rank.iteration(it)?;
        Ok((ms, loss, rank.clock))
    })?;
    if rank.stale {
        rank.gather_params()?;
    }
    let params = if job.return_params {
        rank.collect(&rank.params)?
    } else {
        None
    };
    let first_grads = match &rank.first_grads {
        Some(g) => rank.collect(g)?,
        None => None,
    };
    let unit_params: Vec<usize> = rank.full.iter().map(|u| u.numel()).collect();
    Ok(assemble(job, world, rec, unit_params, params, first_grads))
}
