//! Tensor parallelism (Megatron-LM's, with or without sequence
//! parallelism) for the pipeline trainer: a unit's forward cut at its
//! collectives into local pieces, recorded on a [`Tape`] whose backward
//! runs autograd piece by piece and the collectives' transposes between
//! them (tch has no custom autograd functions to put a collective inside
//! a graph).
//!
//! Per block, as `sim::tensor` prices it: the attention's QKV and the
//! MLP's first linear(s) are column-parallel (each rank `heads / t` query
//! heads, `kv_heads / t` KV heads, `ffn / t` MLP columns), the attention
//! output and the MLP's last linear row-parallel; norms, residuals and the
//! row-parallel biases replicated. Entering a column-parallel layer is
//! Megatron's `f` (identity forward, all-reduce of the input gradient
//! backward; with SP an all-gather along the sequence forward, a
//! reduce-scatter backward), leaving a row-parallel one its `g` (all-reduce
//! forward, identity backward; with SP a reduce-scatter forward, an
//! all-gather backward): 2 all-reduces per block forward and 2 backward
//! without SP; 2 all-gathers + 2 reduce-scatters each way with SP (the
//! trainer keeps the gathered input of a column-parallel layer for its
//! weight gradient, where Megatron re-gathers it under the input-gradient
//! GEMM: 2 all-gathers fewer per block backward, the gathered input held).
//! The embedding is vocabulary-parallel (a masked lookup of the rank's
//! rows, then `g`), the output layer column-parallel over the vocabulary
//! after `f`, and the loss the vocabulary-parallel cross-entropy (row
//! maxima, sums of exponentials and target logits all-reduced: three
//! all-reduces of one value per token).
//!
//! Under SP the replicated parameters see a sequence shard each, so their
//! gradients are summed over the TP group after the backward
//! ([`crate::layout::TpSplit::Replicated`], Megatron's
//! `allreduce_sequence_parallel_grads`).
//!
//! At `t = 1` every collective is the identity and the tape is the plain
//! forward and backward. Units: tensors `[m, tokens, hidden]`, times ms.

use std::cell::Cell;
use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::comm::Collectives;
use crate::config::BlockKind;
use crate::layout::UnitKind;
use crate::model::{sync, terr, Model, TResult};

/// One rank's view of its TP group.
pub(crate) struct TpGroup<'a, C: Collectives> {
    /// The group's communicator (`None` at `t = 1`).
    pub comm: Option<&'a C>,
    /// Group size `t`.
    pub t: usize,
    /// This rank's place in it.
    pub r: usize,
    /// Sequence parallelism.
    pub sp: bool,
    /// Time in the group's collectives so far, ms.
    pub comm_ms: Cell<f64>,
}

impl<C: Collectives> TpGroup<'_, C> {
    fn timed<T>(&self, device: Device, f: impl FnOnce() -> TResult<T>) -> TResult<T> {
        sync(device);
        let t = Instant::now();
        let out = f()?;
        sync(device);
        self.comm_ms
            .set(self.comm_ms.get() + t.elapsed().as_secs_f64() * 1e3);
        Ok(out)
    }

    fn comm(&self) -> &C {
        self.comm.expect("a TP group of t > 1 has its communicator")
    }

    /// Sum over the group, in place of a copy (any shape).
    pub fn all_reduce(&self, x: &Tensor) -> TResult<Tensor> {
        if self.t <= 1 {
            return Ok(x.shallow_clone());
        }
        self.timed(x.device(), || {
            let mut v = host_vec(x)?;
            self.comm().all_reduce_sum(&mut v)?;
            from_host(&v, &x.size(), x.device())
        })
    }

    /// Maximum over the group (any shape).
    pub fn all_reduce_max(&self, x: &Tensor) -> TResult<Tensor> {
        if self.t <= 1 {
            return Ok(x.shallow_clone());
        }
        self.timed(x.device(), || {
            let mut v = host_vec(x)?;
            self.comm().all_reduce_max(&mut v)?;
            from_host(&v, &x.size(), x.device())
        })
    }

    /// `[m, s/t, h]` sequence shards to the whole `[m, s, h]`.
    fn gather_seq(&self, x: &Tensor) -> TResult<Tensor> {
        self.timed(x.device(), || {
            let size = x.size();
            let local = host_vec(x)?;
            let t = self.t;
            let mut full = vec![0f32; local.len() * t];
            self.comm()
                .all_gather_v(&local, &vec![local.len(); t], &mut full)?;
            // [t, m, s/t, h] -> [m, t, s/t, h] -> [m, s, h].
            let g = from_host(&full, &[t as i64, size[0], size[1], size[2]], x.device())?;
            g.f_permute([1, 0, 2, 3])
                .and_then(|g| g.f_contiguous())
                .and_then(|g| g.f_view([size[0], size[1] * t as i64, size[2]]))
                .map_err(terr)
        })
    }

    /// `[m, s, h]` summed over the group, each rank keeping its sequence
    /// shard `[m, s/t, h]`.
    fn scatter_seq(&self, x: &Tensor) -> TResult<Tensor> {
        self.timed(x.device(), || {
            let size = x.size();
            let t = self.t as i64;
            let parts = x
                .f_view([size[0], t, size[1] / t, size[2]])
                .and_then(|v| v.f_permute([1, 0, 2, 3]))
                .and_then(|v| v.f_contiguous())
                .map_err(terr)?;
            let full = host_vec(&parts)?;
            let piece = full.len() / self.t;
            let mut local = vec![0f32; piece];
            self.comm()
                .reduce_scatter_v(&full, &vec![piece; self.t], &mut local)?;
            from_host(&local, &[size[0], size[1] / t, size[2]], x.device())
        })
    }

    /// Megatron's `f` forward (entering a column-parallel layer).
    fn enter_fwd(&self, x: &Tensor) -> TResult<Tensor> {
        if self.t > 1 && self.sp {
            self.gather_seq(x)
        } else {
            Ok(x.shallow_clone())
        }
    }

    /// `f` backward.
    fn enter_bwd(&self, dy: &Tensor) -> TResult<Tensor> {
        match (self.t > 1, self.sp) {
            (false, _) => Ok(dy.shallow_clone()),
            (true, false) => self.all_reduce(dy),
            (true, true) => self.scatter_seq(dy),
        }
    }

    /// Megatron's `g` forward (leaving a row-parallel layer).
    fn exit_fwd(&self, x: &Tensor) -> TResult<Tensor> {
        match (self.t > 1, self.sp) {
            (false, _) => Ok(x.shallow_clone()),
            (true, false) => self.all_reduce(x),
            (true, true) => self.scatter_seq(x),
        }
    }

    /// `g` backward.
    fn exit_bwd(&self, dy: &Tensor) -> TResult<Tensor> {
        if self.t > 1 && self.sp {
            self.gather_seq(dy)
        } else {
            Ok(dy.shallow_clone())
        }
    }

    /// Tokens per rank along the sequence of `seq_len`: a shard under SP.
    pub fn local_seq(&self, seq_len: usize) -> usize {
        if self.sp && self.t > 1 {
            seq_len / self.t
        } else {
            seq_len
        }
    }
}

/// A contiguous f32 host copy of `x`.
pub(crate) fn host_vec(x: &Tensor) -> TResult<Vec<f32>> {
    let c = x
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_to_kind(Kind::Float))
        .and_then(|t| t.f_contiguous())
        .and_then(|t| t.f_view([-1]))
        .map_err(terr)?;
    Vec::<f32>::try_from(&c).map_err(terr)
}

/// A tensor of `shape` on `device` from host values.
pub(crate) fn from_host(v: &[f32], shape: &[i64], device: Device) -> TResult<Tensor> {
    Tensor::from_slice(v)
        .f_view(shape)
        .and_then(|t| t.f_to_device(device))
        .map_err(terr)
}

/// One recorded step of a unit's forward.
enum Op {
    /// A local piece: its inputs (values), their autograd leaves (`None`
    /// for integer inputs), its output value, the graph's output, and the
    /// unit parameters it read (segment indices).
    Local {
        ins: Vec<usize>,
        leaves: Vec<Option<Tensor>>,
        out: usize,
        graph: Tensor,
        params: Vec<usize>,
    },
    /// Megatron's `f` from value `from` to `to`.
    Enter { from: usize, to: usize },
    /// Megatron's `g` from value `from` to `to`.
    Exit { from: usize, to: usize },
}

/// A unit's forward as local pieces and TP collectives, replayable
/// backwards. Value 0 is the unit's input.
pub(crate) struct Tape {
    record: bool,
    vals: Vec<Tensor>,
    ops: Vec<Op>,
}

type Piece<'f> = dyn FnOnce(&[Tensor], &[&Tensor]) -> Result<Tensor, tch::TchError> + 'f;

impl Tape {
    /// A tape over input `x`; `record` false runs the forward without
    /// autograd and keeps nothing (a block to be recomputed).
    pub fn new(x: Tensor, record: bool) -> Tape {
        Tape {
            record,
            vals: vec![x],
            ops: Vec::new(),
        }
    }

    /// Value `id`.
    pub fn val(&self, id: usize) -> &Tensor {
        &self.vals[id]
    }

    /// Runs `f` on values `ins` and parameters `params` (indices into
    /// `p`, the unit's tensors), records it, returns its output's id.
    fn local(
        &mut self,
        ins: &[usize],
        params: &[usize],
        p: &[Tensor],
        f: Box<Piece<'_>>,
    ) -> TResult<usize> {
        let ps: Vec<&Tensor> = params.iter().map(|&i| &p[i]).collect();
        if !self.record {
            let _g = tch::no_grad_guard();
            let xs: Vec<Tensor> = ins.iter().map(|&i| self.vals[i].shallow_clone()).collect();
            let y = f(&xs, &ps).map_err(terr)?;
            self.vals.push(y);
            return Ok(self.vals.len() - 1);
        }
        let mut leaves = Vec::with_capacity(ins.len());
        let mut xs = Vec::with_capacity(ins.len());
        for &i in ins {
            let v = &self.vals[i];
            if v.is_floating_point() {
                let l = v.f_detach().map_err(terr)?.set_requires_grad(true);
                xs.push(l.shallow_clone());
                leaves.push(Some(l));
            } else {
                xs.push(v.shallow_clone());
                leaves.push(None);
            }
        }
        let graph = f(&xs, &ps).map_err(terr)?;
        self.vals.push(graph.f_detach().map_err(terr)?);
        let out = self.vals.len() - 1;
        self.ops.push(Op::Local {
            ins: ins.to_vec(),
            leaves,
            out,
            graph,
            params: params.to_vec(),
        });
        Ok(out)
    }

    fn enter<C: Collectives>(&mut self, x: usize, tp: &TpGroup<C>) -> TResult<usize> {
        if tp.t <= 1 || !tp.sp {
            // Identity forward; the backward's all-reduce (t > 1) is
            // recorded.
            if tp.t > 1 && self.record {
                let y = self.vals[x].shallow_clone();
                self.vals.push(y);
                self.ops.push(Op::Enter {
                    from: x,
                    to: self.vals.len() - 1,
                });
                return Ok(self.vals.len() - 1);
            }
            return Ok(x);
        }
        let y = tp.enter_fwd(&self.vals[x])?;
        self.vals.push(y);
        let to = self.vals.len() - 1;
        if self.record {
            self.ops.push(Op::Enter { from: x, to });
        }
        Ok(to)
    }

    fn exit<C: Collectives>(&mut self, x: usize, tp: &TpGroup<C>) -> TResult<usize> {
        if tp.t <= 1 {
            return Ok(x);
        }
        let y = tp.exit_fwd(&self.vals[x])?;
        self.vals.push(y);
        let to = self.vals.len() - 1;
        if self.record {
            self.ops.push(Op::Exit { from: x, to });
        }
        Ok(to)
    }

    /// Backward from value `out` with gradient `dy`: the gradient of the
    /// input (value 0; `None` for token ids) and of every parameter
    /// tensor of `p` the unit read (`None` for those it did not).
    pub fn backward<C: Collectives>(
        &self,
        out: usize,
        dy: Tensor,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<(Option<Tensor>, Vec<Option<Tensor>>)> {
        let mut grads: Vec<Option<Tensor>> = (0..self.vals.len()).map(|_| None).collect();
        let mut pgrads: Vec<Option<Tensor>> = (0..p.len()).map(|_| None).collect();
        grads[out] = Some(dy);
        let add = |slot: &mut Option<Tensor>, g: Tensor| -> TResult<()> {
            *slot = Some(match slot.take() {
                None => g,
                Some(a) => a.f_add(&g).map_err(terr)?,
            });
            Ok(())
        };
        for op in self.ops.iter().rev() {
            match op {
                Op::Local {
                    ins,
                    leaves,
                    out,
                    graph,
                    params,
                } => {
                    let Some(dy) = grads[*out].take() else {
                        continue;
                    };
                    let surrogate = graph
                        .f_mul(&dy)
                        .and_then(|t| t.f_sum(None::<Kind>))
                        .map_err(terr)?;
                    let mut inputs: Vec<&Tensor> = leaves.iter().flatten().collect();
                    let n_in = inputs.len();
                    inputs.extend(params.iter().map(|&i| &p[i]));
                    let g = Tensor::f_run_backward(&[&surrogate], &inputs, false, false)
                        .map_err(terr)?;
                    let mut k = 0;
                    for (slot, leaf) in ins.iter().zip(leaves) {
                        if leaf.is_some() {
                            add(&mut grads[*slot], g[k].shallow_clone())?;
                            k += 1;
                        }
                    }
                    for (j, &pi) in params.iter().enumerate() {
                        add(&mut pgrads[pi], g[n_in + j].shallow_clone())?;
                    }
                }
                Op::Enter { from, to } => {
                    if let Some(d) = grads[*to].take() {
                        let d = tp.enter_bwd(&d)?;
                        add(&mut grads[*from], d)?;
                    }
                }
                Op::Exit { from, to } => {
                    if let Some(d) = grads[*to].take() {
                        let d = tp.exit_bwd(&d)?;
                        add(&mut grads[*from], d)?;
                    }
                }
            }
        }
        Ok((grads[0].take(), pgrads))
    }
}

/// The vocabulary-parallel cross-entropy of `logits` (`[m, s, vocab/t]`,
/// this rank's columns `r vocab/t ..`) against `targets` (`[m, s]`),
/// summed: (loss, gradient of the loss with respect to `logits`).
pub(crate) fn vocab_parallel_ce<C: Collectives>(
    logits: &Tensor,
    targets: &Tensor,
    vocab: usize,
    tp: &TpGroup<C>,
) -> TResult<(f64, Tensor)> {
    let _g = tch::no_grad_guard();
    let vl = (vocab / tp.t) as i64;
    let lo = tp.r as i64 * vl;
    let run = || -> Result<(Tensor, Tensor, Tensor), tch::TchError> {
        let l = logits.f_to_kind(Kind::Float)?.f_view([-1, vl])?;
        let (lmax, _) = l.f_max_dim(1, true)?;
        Ok((l, lmax, targets.f_view([-1, 1])?.f_sub_scalar(lo)?))
    };
    let (l, lmax, ids) = run().map_err(terr)?;
    let gmax = tp.all_reduce_max(&lmax)?;
    let e = l.f_sub(&gmax).and_then(|x| x.f_exp()).map_err(terr)?;
    let sums = tp.all_reduce(&e.f_sum_dim_intlist(1, true, None::<Kind>).map_err(terr)?)?;
    let inside = ids
        .f_ge(0)
        .and_then(|a| a.f_logical_and(&ids.f_lt(vl)?))
        .map_err(terr)?;
    let ids_c = ids.f_where_scalarother(&inside, 0).map_err(terr)?;
    let inside_f = inside.f_to_kind(Kind::Float).map_err(terr)?;
    let picked = l
        .f_gather(1, &ids_c, false)
        .and_then(|p| p.f_mul(&inside_f))
        .map_err(terr)?;
    let target = tp.all_reduce(&picked)?;
    let run = || -> Result<(f64, Tensor), tch::TchError> {
        let loss = sums
            .f_log()?
            .f_add(&gmax)?
            .f_sub(&target)?
            .f_sum(None::<Kind>)?;
        let onehot = Tensor::f_zeros_like(&l)?.f_scatter(1, &ids_c, &inside_f)?;
        let grad = e.f_div(&sums)?.f_sub(&onehot)?;
        Ok((
            loss.f_double_value(&[])?,
            grad.f_view(logits.size().as_slice())?
                .f_to_kind(logits.kind())?,
        ))
    };
    run().map_err(terr)
}

impl Model {
    /// Records unit `u`'s forward on `tape` (input: value 0) with its
    /// tensors `p` (this rank's TP pieces, the model's layouts being TP
    /// layouts), `heads` / `kv_heads` the rank's local head counts; the
    /// output value: activations, or the head's logits over its
    /// vocabulary columns.
    pub(crate) fn record<C: Collectives>(
        &self,
        u: usize,
        tape: &mut Tape,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<usize> {
        match self.units[u].kind {
            UnitKind::Embedding => self.record_embedding(tape, p, tp),
            UnitKind::Block(_) => match self.cfg.family {
                BlockKind::Gpt => self.record_gpt(tape, p, tp),
                BlockKind::Llama => self.record_llama(tape, p, tp),
            },
            UnitKind::Head => self.record_head(tape, p, tp),
        }
    }

    fn record_embedding<C: Collectives>(
        &self,
        tape: &mut Tape,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<usize> {
        let vl = (self.cfg.vocab / tp.t) as i64;
        let lo = tp.r as i64 * vl;
        let split = tp.t > 1;
        let part = tape.local(
            &[0],
            &[0],
            p,
            Box::new(move |x, p| {
                if !split {
                    return Tensor::f_embedding(p[0], &x[0], -1, false, false);
                }
                let ids = x[0].f_sub_scalar(lo)?;
                let inside = ids.f_ge(0)?.f_logical_and(&ids.f_lt(vl)?)?;
                let ids = ids.f_where_scalarother(&inside, 0)?;
                Tensor::f_embedding(p[0], &ids, -1, false, false)?
                    .f_mul(&inside.f_unsqueeze(-1)?.f_to_kind(p[0].kind())?)
            }),
        )?;
        let e = tape.exit(part, tp)?;
        if self.cfg.family != BlockKind::Gpt {
            return Ok(e);
        }
        let s = tp.local_seq(self.cfg.seq_len) as i64;
        let first = if s < self.cfg.seq_len as i64 {
            tp.r as i64 * s
        } else {
            0
        };
        tape.local(
            &[e],
            &[1],
            p,
            Box::new(move |x, p| x[0].f_add(&p[0].f_narrow(0, first, s)?)),
        )
    }

    fn record_gpt<C: Collectives>(
        &self,
        tape: &mut Tape,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<usize> {
        let h = self.cfg.hidden as i64;
        let heads = self.cfg.heads / tp.t;
        let width = h / tp.t as i64;
        let xg = tape.enter(0, tp)?;
        let attn = tape.local(
            &[xg],
            &[0, 1, 2],
            p,
            Box::new(move |x, p| {
                let qkv = x[0].f_linear(p[0], Some(p[1]))?;
                let parts = qkv.f_split(width, -1)?;
                let q = self.split_heads(&parts[0], heads)?;
                let k = self.split_heads(&parts[1], heads)?;
                let v = self.split_heads(&parts[2], heads)?;
                self.attend(&q, &k, &v)?.f_linear::<&Tensor>(p[2], None)
            }),
        )?;
        let a = tape.exit(attn, tp)?;
        let x1 = tape.local(
            &[0, a],
            &[3, 4, 5],
            p,
            Box::new(move |x, p| {
                x[0].f_add(&x[1])?.f_add(p[0])?.f_layer_norm(
                    [h],
                    Some(p[1]),
                    Some(p[2]),
                    1e-5,
                    true,
                )
            }),
        )?;
        let x1g = tape.enter(x1, tp)?;
        let mlp = tape.local(
            &[x1g],
            &[6, 7, 8],
            p,
            Box::new(move |x, p| {
                x[0].f_linear(p[0], Some(p[1]))?
                    .f_gelu("none")?
                    .f_linear::<&Tensor>(p[2], None)
            }),
        )?;
        let m = tape.exit(mlp, tp)?;
        tape.local(
            &[x1, m],
            &[9, 10, 11],
            p,
            Box::new(move |x, p| {
                x[0].f_add(&x[1])?.f_add(p[0])?.f_layer_norm(
                    [h],
                    Some(p[1]),
                    Some(p[2]),
                    1e-5,
                    true,
                )
            }),
        )
    }

    fn record_llama<C: Collectives>(
        &self,
        tape: &mut Tape,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<usize> {
        let h = self.cfg.hidden as i64;
        let (nh, kvh) = (self.cfg.heads / tp.t, self.cfg.kv_heads / tp.t);
        let n1 = tape.local(
            &[0],
            &[0],
            p,
            Box::new(move |x, p| x[0].f_rms_norm([h], Some(p[0]), 1e-6)),
        )?;
        let n1g = tape.enter(n1, tp)?;
        let attn = tape.local(
            &[n1g],
            &[1, 2, 3, 4],
            p,
            Box::new(move |x, p| {
                let n = &x[0];
                let q = self.rotary(&self.split_heads(&n.f_linear::<&Tensor>(p[0], None)?, nh)?)?;
                let mut k =
                    self.rotary(&self.split_heads(&n.f_linear::<&Tensor>(p[1], None)?, kvh)?)?;
                let mut v = self.split_heads(&n.f_linear::<&Tensor>(p[2], None)?, kvh)?;
                if nh != kvh {
                    let rep = (nh / kvh) as i64;
                    k = k.f_repeat_interleave_self_int(rep, Some(1), None)?;
                    v = v.f_repeat_interleave_self_int(rep, Some(1), None)?;
                }
                self.attend(&q, &k, &v)?.f_linear::<&Tensor>(p[3], None)
            }),
        )?;
        let a = tape.exit(attn, tp)?;
        let x1 = tape.local(&[0, a], &[], p, Box::new(|x, _| x[0].f_add(&x[1])))?;
        let n2 = tape.local(
            &[x1],
            &[5],
            p,
            Box::new(move |x, p| x[0].f_rms_norm([h], Some(p[0]), 1e-6)),
        )?;
        let n2g = tape.enter(n2, tp)?;
        let mlp = tape.local(
            &[n2g],
            &[6, 7, 8],
            p,
            Box::new(|x, p| {
                let g = x[0].f_linear::<&Tensor>(p[0], None)?.f_silu()?;
                let u = x[0].f_linear::<&Tensor>(p[1], None)?;
                g.f_mul(&u)?.f_linear::<&Tensor>(p[2], None)
            }),
        )?;
        let m = tape.exit(mlp, tp)?;
        tape.local(&[x1, m], &[], p, Box::new(|x, _| x[0].f_add(&x[1])))
    }

    fn record_head<C: Collectives>(
        &self,
        tape: &mut Tape,
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<usize> {
        let h = self.cfg.hidden as i64;
        let (normed, lm) = match self.cfg.family {
            BlockKind::Gpt => (
                tape.local(
                    &[0],
                    &[0, 1],
                    p,
                    Box::new(move |x, p| {
                        x[0].f_layer_norm([h], Some(p[0]), Some(p[1]), 1e-5, true)
                    }),
                )?,
                2,
            ),
            BlockKind::Llama => (
                tape.local(
                    &[0],
                    &[0],
                    p,
                    Box::new(move |x, p| x[0].f_rms_norm([h], Some(p[0]), 1e-6)),
                )?,
                1,
            ),
        };
        let ng = tape.enter(normed, tp)?;
        tape.local(
            &[ng],
            &[lm],
            p,
            Box::new(|x, p| x[0].f_linear::<&Tensor>(p[0], None)),
        )
    }
}
