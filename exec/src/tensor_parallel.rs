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
//! without SP; with SP 2 all-gathers + 2 reduce-scatters forward and 4
//! all-gathers (2 of them the re-gathers of a column-parallel layer's
//! input for its weight gradient, an input not kept) + 2 reduce-scatters
//! backward. The column-parallel layers compute their backward by hand,
//! as Megatron's `LinearWithGradAccumulationAndAsyncCommunication` does:
//! the input gradient `dy W`, the weight gradient `dy^T x`.
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

use sim::comm::CollectiveKind;

use crate::comm::Collectives;
use crate::config::BlockKind;
use crate::host::{from_host, host_vec};
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
    /// When `Some`, every collective of the group is logged: its kind and
    /// the elements of the whole (gathered / reduced) tensor.
    pub log: Option<std::cell::RefCell<Vec<(CollectiveKind, usize)>>>,
}

impl<C: Collectives> TpGroup<'_, C> {
    fn note(&self, kind: CollectiveKind, elems: usize) {
        if let Some(log) = &self.log {
            log.borrow_mut().push((kind, elems));
        }
    }

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

    /// `x` (any shape) all-reduced over the group by `op` on a host copy.
    fn all_reduce_by(
        &self,
        x: &Tensor,
        op: impl FnOnce(&C, &mut [f32]) -> Result<(), crate::error::ExecError>,
    ) -> TResult<Tensor> {
        if self.t <= 1 {
            return Ok(x.shallow_clone());
        }
        self.note(CollectiveKind::AllReduce, x.numel());
        self.timed(x.device(), || {
            let mut v = host_vec(x)?;
            op(self.comm(), &mut v)?;
            from_host(&v, &x.size(), x.device())
        })
    }

    /// Sum over the group (any shape).
    pub fn all_reduce(&self, x: &Tensor) -> TResult<Tensor> {
        self.all_reduce_by(x, |c, v| c.all_reduce_sum(v))
    }

    /// Maximum over the group (any shape).
    pub fn all_reduce_max(&self, x: &Tensor) -> TResult<Tensor> {
        self.all_reduce_by(x, |c, v| c.all_reduce_max(v))
    }

    /// `[m, s/t, h]` sequence shards to the whole `[m, s, h]`.
    fn gather_seq(&self, x: &Tensor) -> TResult<Tensor> {
        self.note(CollectiveKind::AllGather, x.numel() * self.t);
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
        self.note(CollectiveKind::ReduceScatter, x.numel());
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

    /// Megatron's `f` forward (entering a column-parallel layer):
    /// identity, or with SP an all-gather along the sequence. Also `g`'s
    /// backward, its transpose.
    fn enter_fwd(&self, x: &Tensor) -> TResult<Tensor> {
        if self.t > 1 && self.sp {
            self.gather_seq(x)
        } else {
            Ok(x.shallow_clone())
        }
    }

    /// Megatron's `g` forward (leaving a row-parallel layer): all-reduce,
    /// or with SP a reduce-scatter along the sequence. Also `f`'s
    /// backward, its transpose.
    fn exit_fwd(&self, x: &Tensor) -> TResult<Tensor> {
        match (self.t > 1, self.sp) {
            (false, _) => Ok(x.shallow_clone()),
            (true, false) => self.all_reduce(x),
            (true, true) => self.scatter_seq(x),
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

/// `[m, s, k]` as `[m s, k]` (tokens by features).
fn flat_tokens(x: &Tensor) -> TResult<Tensor> {
    let k = *x.size().last().expect("a tensor with a feature dimension");
    x.f_reshape([-1, k]).map_err(terr)
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
    /// Megatron's column-parallel linear layer(s) on value `from` (after
    /// `f`): outputs `outs`, one per (weight, bias) of `lins`; `kept`
    /// holds the layer input without SP (under SP it is gathered again
    /// for the weight gradients, as Megatron does).
    Column {
        from: usize,
        outs: Vec<usize>,
        lins: Vec<(usize, Option<usize>)>,
        kept: Option<Tensor>,
    },
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

    /// Megatron's `ColumnParallelLinear` (with the gradient-accumulation
    /// fusion's manual backward): `f` on value `x` (identity, or with SP
    /// an all-gather along the sequence), then `x W^T + b` for each
    /// (weight, bias) of `lins` (indices into `p`); the outputs' ids. The
    /// backward computes the input gradient `dy W` and, with the input
    /// (under SP gathered again, under the input-gradient GEMM in
    /// Megatron), the weight gradients `dy^T x` and bias sums, then `f`'s
    /// transpose (all-reduce, or reduce-scatter with SP).
    fn column<C: Collectives>(
        &mut self,
        x: usize,
        lins: &[(usize, Option<usize>)],
        p: &[Tensor],
        tp: &TpGroup<C>,
    ) -> TResult<Vec<usize>> {
        let full = tp.enter_fwd(&self.vals[x])?;
        let _g = tch::no_grad_guard();
        let mut outs = Vec::with_capacity(lins.len());
        for &(w, b) in lins {
            let y = full.f_linear(&p[w], b.map(|b| &p[b])).map_err(terr)?;
            self.vals.push(y);
            outs.push(self.vals.len() - 1);
        }
        if self.record {
            let sp = tp.t > 1 && tp.sp;
            self.ops.push(Op::Column {
                from: x,
                outs: outs.clone(),
                lins: lins.to_vec(),
                kept: (!sp).then(|| full.shallow_clone()),
            });
        }
        Ok(outs)
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
                Op::Column {
                    from,
                    outs,
                    lins,
                    kept,
                } => {
                    let x = match kept {
                        Some(x) => x.shallow_clone(),
                        None => tp.enter_fwd(&self.vals[*from])?,
                    };
                    let _g = tch::no_grad_guard();
                    let xf = flat_tokens(&x)?;
                    let mut dx: Option<Tensor> = None;
                    for (&o, &(w, b)) in outs.iter().zip(lins) {
                        let Some(dy) = grads[o].take() else {
                            continue;
                        };
                        let dyf = flat_tokens(&dy)?;
                        let gw = dyf.f_tr().and_then(|t| t.f_mm(&xf)).map_err(terr)?;
                        add(&mut pgrads[w], gw)?;
                        if let Some(b) = b {
                            let gb = dyf
                                .f_sum_dim_intlist(0, false, None::<Kind>)
                                .map_err(terr)?;
                            add(&mut pgrads[b], gb)?;
                        }
                        add(&mut dx, dy.f_matmul(&p[w]).map_err(terr)?)?;
                    }
                    if let Some(d) = dx {
                        let d = tp.exit_fwd(&d)?;
                        add(&mut grads[*from], d)?;
                    }
                }
                Op::Exit { from, to } => {
                    if let Some(d) = grads[*to].take() {
                        let d = tp.enter_fwd(&d)?;
                        add(&mut grads[*from], d)?;
                    }
                }
            }
        }
        Ok((grads[0].take(), pgrads))
    }
}

/// Token ids `ids` already shifted by this rank's first vocabulary row,
/// against its `vl` rows: (the ids with those outside set to 0, whether
/// each is inside), as Megatron's `VocabParallelEmbedding` and
/// vocab-parallel cross-entropy mask them.
fn in_vocab_range(ids: &Tensor, vl: i64) -> Result<(Tensor, Tensor), tch::TchError> {
    let inside = ids.f_ge(0)?.f_logical_and(&ids.f_lt(vl)?)?;
    Ok((ids.f_where_scalarother(&inside, 0)?, inside))
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
    let (ids_c, inside) = in_vocab_range(&ids, vl).map_err(terr)?;
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
                let (ids, inside) = in_vocab_range(&x[0].f_sub_scalar(lo)?, vl)?;
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
        let qkv = tape.column(0, &[(0, Some(1))], p, tp)?;
        let attn = tape.local(
            &qkv,
            &[2],
            p,
            Box::new(move |x, p| {
                let parts = x[0].f_split(width, -1)?;
                let q = self.split_heads(&parts[0], heads)?;
                let k = self.split_heads(&parts[1], heads)?;
                let v = self.split_heads(&parts[2], heads)?;
                self.attend(&q, &k, &v)?.f_linear::<&Tensor>(p[0], None)
            }),
        )?;
        let a = tape.exit(attn, tp)?;
        let x1 = self.record_post_norm(tape, [0, a], [3, 4, 5], p)?;
        let fc1 = tape.column(x1, &[(6, Some(7))], p, tp)?;
        let mlp = tape.local(
            &fc1,
            &[8],
            p,
            Box::new(move |x, p| x[0].f_gelu("none")?.f_linear::<&Tensor>(p[0], None)),
        )?;
        let m = tape.exit(mlp, tp)?;
        self.record_post_norm(tape, [x1, m], [9, 10, 11], p)
    }

    /// GPT's post-LN residual: `LN(x + y + bias)` of values `[x, y]` with
    /// the row-parallel layer's bias and the norm's gain and shift
    /// (`params`, indices into `p`), replicated on every TP rank.
    fn record_post_norm(
        &self,
        tape: &mut Tape,
        ins: [usize; 2],
        params: [usize; 3],
        p: &[Tensor],
    ) -> TResult<usize> {
        let h = self.cfg.hidden as i64;
        tape.local(
            &ins,
            &params,
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
        let qkv = tape.column(n1, &[(1, None), (2, None), (3, None)], p, tp)?;
        let attn = tape.local(
            &qkv,
            &[4],
            p,
            Box::new(move |x, p| {
                let q = self.rotary(&self.split_heads(&x[0], nh)?)?;
                let mut k = self.rotary(&self.split_heads(&x[1], kvh)?)?;
                let mut v = self.split_heads(&x[2], kvh)?;
                if nh != kvh {
                    let rep = (nh / kvh) as i64;
                    k = k.f_repeat_interleave_self_int(rep, Some(1), None)?;
                    v = v.f_repeat_interleave_self_int(rep, Some(1), None)?;
                }
                self.attend(&q, &k, &v)?.f_linear::<&Tensor>(p[0], None)
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
        let gate_up = tape.column(n2, &[(6, None), (7, None)], p, tp)?;
        let mlp = tape.local(
            &gate_up,
            &[8],
            p,
            Box::new(|x, p| x[0].f_silu()?.f_mul(&x[1])?.f_linear::<&Tensor>(p[0], None)),
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
        Ok(tape.column(normed, &[(lm, None)], p, tp)?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExecError;
    use sim::tensor::{Pass, TensorParallel};

    /// Rank 0 of a TP group of 2 whose other rank holds the same data:
    /// enough to run a unit's pieces and count their collectives.
    struct Mirror;

    impl Collectives for Mirror {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn all_gather_v(&self, l: &[f32], _: &[usize], f: &mut [f32]) -> Result<(), ExecError> {
            f[..l.len()].copy_from_slice(l);
            f[l.len()..].copy_from_slice(l);
            Ok(())
        }
        fn all_gather_v16(&self, _: &[u16], _: &[usize], _: &mut [u16]) -> Result<(), ExecError> {
            unreachable!("TP gathers f32")
        }
        fn reduce_scatter_v(&self, f: &[f32], _: &[usize], l: &mut [f32]) -> Result<(), ExecError> {
            for (o, x) in l.iter_mut().zip(f) {
                *o = 2.0 * x;
            }
            Ok(())
        }
        fn all_reduce_sum(&self, b: &mut [f32]) -> Result<(), ExecError> {
            b.iter_mut().for_each(|x| *x *= 2.0);
            Ok(())
        }
        fn all_reduce_max(&self, _: &mut [f32]) -> Result<(), ExecError> {
            Ok(())
        }
        fn send(&self, _: usize, _: u16, _: Vec<f32>) -> Result<(), ExecError> {
            unreachable!()
        }
        fn recv(&self, _: usize, _: u16, _: &mut [f32]) -> Result<(), ExecError> {
            unreachable!()
        }
        fn flush_sends(&self) -> Result<(), ExecError> {
            Ok(())
        }
        fn split(&self, _: usize) -> Result<Self, ExecError> {
            Ok(Mirror)
        }
        fn barrier(&self) {}
        fn gather_f64(&self, v: &[f64]) -> Option<Vec<f64>> {
            Some(v.to_vec())
        }
        fn abort(&self, code: i32) -> ! {
            std::process::exit(code)
        }
    }

    fn sorted(mut v: Vec<(CollectiveKind, usize)>) -> Vec<(CollectiveKind, usize)> {
        v.sort_by_key(|&(k, n)| (k as u8, n));
        v
    }

    /// A block's TP collectives in the trainer, forward and backward, are
    /// the ones `sim::tensor` prices (kind and size), with and without SP,
    /// for GPT and LLaMA blocks.
    #[test]
    fn block_collectives_are_the_simulators() {
        let catalog = sim::model::ModelCatalog::builtin();
        for (name, sp) in [
            ("gpt-tiny", false),
            ("gpt-tiny", true),
            ("llama-3b", false),
            ("llama-3b", true),
        ] {
            let mut spec = catalog.get(name).unwrap().clone();
            spec.layers = 1;
            let seq = 32u32;
            let cfg = crate::sim_glue::block_config(&spec, seq).unwrap();
            let model = Model::new_tp(&cfg, Device::Cpu, Kind::Float, 2).unwrap();
            let flat = Tensor::f_randn([model.units[1].numel() as i64], (Kind::Float, Device::Cpu))
                .unwrap()
                .f_mul_scalar(0.02)
                .unwrap();
            let p = model.leaves(1, &flat).unwrap();
            let tp = TpGroup {
                comm: Some(&Mirror),
                t: 2,
                r: 0,
                sp,
                comm_ms: Cell::new(0.0),
                log: Some(Default::default()),
            };
            let m = 3i64;
            let s = tp.local_seq(cfg.seq_len) as i64;
            let x = Tensor::f_randn([m, s, cfg.hidden as i64], (Kind::Float, Device::Cpu)).unwrap();
            let mut tape = Tape::new(x, true);
            let out = model.record(1, &mut tape, &p, &tp).unwrap();
            let fwd = tp.log.as_ref().unwrap().take();
            let dy = tape.val(out).f_ones_like().unwrap();
            tape.backward(out, dy, &p, &tp).unwrap();
            let bwd = tp.log.as_ref().unwrap().take();
            let sim_tp = TensorParallel::new(2, sp);
            let tokens = (m as usize * cfg.seq_len) as f64;
            let want = |pass: Pass| -> Vec<(CollectiveKind, usize)> {
                sim_tp
                    .block_collectives(&spec, tokens, sim::precision::NumFormat::Fp32)
                    .iter()
                    .filter(|c| c.pass == pass)
                    .map(|c| (c.kind, (c.bytes / 4.0) as usize))
                    .collect()
            };
            assert_eq!(
                sorted(fwd),
                sorted(want(Pass::Forward)),
                "{name} sp={sp} forward"
            );
            assert_eq!(
                sorted(bwd),
                sorted(want(Pass::Backward)),
                "{name} sp={sp} backward"
            );
        }
    }
}
