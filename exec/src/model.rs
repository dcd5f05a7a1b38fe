//! Transformer units in tch, computed from a unit's flat parameter vector:
//! embedding, GPT-style or LLaMA-style block, head with a summed
//! cross-entropy loss (see [`crate::config::BlockKind`] for the block forms).
//!
//! Units: tensors of shape `[m, seq_len, hidden]` (m = micro-batch size);
//! token ids `[m, seq_len]` (i64); losses in nats, summed over tokens and
//! samples so micro-batches of any size add up to the full-batch loss.

use tch::{Device, Kind, Reduction, Tensor};

use crate::config::{BlockConfig, BlockKind};
use crate::error::ExecError;
use crate::layout::{unit_layouts, UnitKind, UnitLayout};

pub(crate) fn terr(e: tch::TchError) -> ExecError {
    ExecError::Torch(e.to_string())
}

/// Result of tch ops.
pub(crate) type TResult<T> = Result<T, ExecError>;

/// Model structure shared by the trainer, the reference and the profiler:
/// layouts plus device-resident constants (causal mask, rotary tables).
#[derive(Debug)]
pub struct Model {
    /// Shape.
    pub cfg: BlockConfig,
    /// Units in execution order (embedding, blocks, head).
    pub units: Vec<UnitLayout>,
    /// Compute dtype.
    pub kind: Kind,
    /// Device.
    pub device: Device,
    mask: Tensor,
    rope: Option<(Tensor, Tensor)>,
}

impl Model {
    /// Builds the structure for `cfg` on `device` computing in `kind`.
    pub fn new(cfg: &BlockConfig, device: Device, kind: Kind) -> TResult<Model> {
        cfg.validate()?;
        let s = cfg.seq_len as i64;
        let mask = Tensor::f_ones([s, s], (Kind::Bool, device))
            .and_then(|t| t.f_triu(1))
            .map_err(terr)?;
        let rope = if cfg.family == BlockKind::Llama {
            let half = (cfg.head_dim() / 2) as i64;
            let inv: Vec<f32> = (0..half)
                .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / (2 * half) as f32))
                .collect();
            let inv = Tensor::from_slice(&inv);
            let pos = Tensor::f_arange(s, (Kind::Float, Device::Cpu)).map_err(terr)?;
            let ang = pos.f_outer(&inv).map_err(terr)?; // [S, half]
            let cos = ang
                .f_cos()
                .and_then(|t| t.f_to_device(device))
                .and_then(|t| t.f_to_kind(kind));
            let sin = ang
                .f_sin()
                .and_then(|t| t.f_to_device(device))
                .and_then(|t| t.f_to_kind(kind));
            Some((cos.map_err(terr)?, sin.map_err(terr)?))
        } else {
            None
        };
        Ok(Model {
            cfg: cfg.clone(),
            units: unit_layouts(cfg),
            kind,
            device,
            mask,
            rope,
        })
    }

    /// The structure TP rank of a group of `t` holds: every unit's TP
    /// layout ([`crate::layout::tp_layout`]); `t = 1` is [`Model::new`].
    pub fn new_tp(cfg: &BlockConfig, device: Device, kind: Kind, t: usize) -> TResult<Model> {
        let mut m = Model::new(cfg, device, kind)?;
        m.units = m
            .units
            .iter()
            .map(|u| crate::layout::tp_layout(u, t))
            .collect();
        Ok(m)
    }

    /// Number of units.
    pub fn n_units(&self) -> usize {
        self.units.len()
    }

    /// Token ids `[m, seq_len]` (inputs) and `[m, seq_len]` (targets) of
    /// global samples `first..first+m` in `iteration`, on the model's device.
    pub fn batch(
        &self,
        seed: u64,
        iteration: u64,
        first: usize,
        m: usize,
    ) -> TResult<(Tensor, Tensor)> {
        let s = self.cfg.seq_len;
        let mut inp = Vec::with_capacity(m * s);
        let mut tgt = Vec::with_capacity(m * s);
        for g in first..first + m {
            let t = crate::layout::sample_tokens(&self.cfg, seed, iteration, g as u64);
            inp.extend_from_slice(&t[..s]);
            tgt.extend_from_slice(&t[1..]);
        }
        let shape = [m as i64, s as i64];
        let inp = Tensor::from_slice(&inp)
            .f_view(shape)
            .and_then(|t| t.f_to_device(self.device));
        let tgt = Tensor::from_slice(&tgt)
            .f_view(shape)
            .and_then(|t| t.f_to_device(self.device));
        Ok((inp.map_err(terr)?, tgt.map_err(terr)?))
    }

    /// Views of unit `unit`'s tensors inside its flat vector `flat`, in
    /// layout order (gradients of these views flow back into `flat`).
    pub fn split(&self, unit: usize, flat: &Tensor) -> TResult<Vec<Tensor>> {
        self.units[unit]
            .segments
            .iter()
            .map(|seg| {
                let shape: Vec<i64> = seg.shape.iter().map(|&d| d as i64).collect();
                flat.f_narrow(0, seg.offset as i64, seg.numel() as i64)
                    .and_then(|t| t.f_view(shape.as_slice()))
                    .map_err(terr)
            })
            .collect()
    }

    /// Unit `unit`'s tensors as separate autograd leaves sharing `flat`'s
    /// storage. Backpropagating into per-tensor leaves avoids autograd's
    /// narrow-backward, which would materialise a zero-filled gradient of
    /// the whole flat vector for every tensor of the unit.
    pub fn leaves(&self, unit: usize, flat: &Tensor) -> TResult<Vec<Tensor>> {
        self.split(unit, flat)?
            .into_iter()
            .map(|t| {
                t.f_detach()
                    .map(|t| t.set_requires_grad(true))
                    .map_err(terr)
            })
            .collect()
    }

    /// Adds per-tensor gradients `grads` (layout order, any float kind) of
    /// unit `unit` into its flat f32 accumulator `acc`.
    pub fn accumulate(&self, unit: usize, acc: &Tensor, grads: &[Tensor]) -> TResult<()> {
        let _g = tch::no_grad_guard();
        for (view, g) in self.split(unit, acc)?.iter_mut().zip(grads) {
            let g = g.f_to_kind(Kind::Float).map_err(terr)?;
            let _ = view.f_add_(&g).map_err(terr)?;
        }
        Ok(())
    }

    /// Copies per-tensor gradients `grads` (layout order, any float kind)
    /// of unit `unit` into its flat f32 accumulator `acc`, overwriting it
    /// (the first micro-batch: saves zero-filling the buffer, which costs a
    /// pass over memory per unit per iteration on the CPU).
    pub fn store(&self, unit: usize, acc: &Tensor, grads: &[Tensor]) -> TResult<()> {
        let _g = tch::no_grad_guard();
        for (view, g) in self.split(unit, acc)?.iter_mut().zip(grads) {
            view.f_copy_(g).map_err(terr)?;
        }
        Ok(())
    }

    /// Forward of unit `unit` with flat parameters `flat` (compute dtype,
    /// on the device); see [`Model::forward_p`].
    pub fn forward(&self, unit: usize, flat: &Tensor, x: &Tensor) -> TResult<Tensor> {
        self.forward_p(unit, &self.split(unit, flat)?, x)
    }

    /// Forward of unit `unit` with its tensors `p` (layout order). Input:
    /// token ids for the embedding, activations otherwise. Output:
    /// activations `[m, S, H]` (not for the head: use [`Model::head_loss_p`]).
    pub fn forward_p(&self, unit: usize, p: &[Tensor], x: &Tensor) -> TResult<Tensor> {
        match self.units[unit].kind {
            UnitKind::Embedding => self.embedding(p, x),
            UnitKind::Block(_) => match self.cfg.family {
                BlockKind::Gpt => self.gpt_block(p, x),
                BlockKind::Llama => self.llama_block(p, x),
            },
            UnitKind::Head => Err(ExecError::Torch(
                "forward() called on the head; use head_loss".into(),
            )),
        }
    }

    /// Head forward and summed cross-entropy against `targets` (f32 scalar)
    /// with flat parameters `flat`.
    pub fn head_loss(&self, flat: &Tensor, x: &Tensor, targets: &Tensor) -> TResult<Tensor> {
        self.head_loss_p(&self.split(self.n_units() - 1, flat)?, x, targets)
    }

    /// Head forward and summed cross-entropy with the head's tensors `p`.
    pub fn head_loss_p(&self, p: &[Tensor], x: &Tensor, targets: &Tensor) -> TResult<Tensor> {
        let h = self.cfg.hidden as i64;
        let (normed, w) = match self.cfg.family {
            BlockKind::Gpt => (
                x.f_layer_norm([h], Some(&p[0]), Some(&p[1]), 1e-5, true),
                &p[2],
            ),
            BlockKind::Llama => (x.f_rms_norm([h], Some(&p[0]), 1e-6), &p[1]),
        };
        let logits = normed
            .and_then(|t| t.f_linear::<&Tensor>(w, None))
            .map_err(terr)?;
        let v = self.cfg.vocab as i64;
        logits
            .f_to_kind(Kind::Float)
            .and_then(|l| l.f_view([-1, v]))
            .and_then(|l| {
                l.f_cross_entropy_loss::<&Tensor>(
                    &targets.f_view([-1])?,
                    None,
                    Reduction::Sum,
                    -100,
                    0.0,
                )
            })
            .map_err(terr)
    }

    fn embedding(&self, p: &[Tensor], tokens: &Tensor) -> TResult<Tensor> {
        let e = Tensor::f_embedding(&p[0], tokens, -1, false, false).map_err(terr)?;
        if self.cfg.family == BlockKind::Gpt {
            e.f_add(&p[1]).map_err(terr)
        } else {
            Ok(e)
        }
    }

    /// `[m, S, heads*d]` -> `[m, heads, S, d]`.
    pub(crate) fn split_heads(&self, t: &Tensor, heads: usize) -> Result<Tensor, tch::TchError> {
        let (m, s) = (t.size()[0], self.cfg.seq_len as i64);
        t.f_view([m, s, heads as i64, self.cfg.head_dim() as i64])?
            .f_transpose(1, 2)
    }

    /// Eager causal attention on `[m, heads, S, d]` tensors -> `[m, S,
    /// heads d]` (`H`, or a TP rank's `H / t`).
    pub(crate) fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<Tensor, tch::TchError> {
        let d = self.cfg.head_dim() as f64;
        let scores = q
            .f_matmul(&k.f_transpose(-2, -1)?)?
            .f_mul_scalar(1.0 / d.sqrt())?;
        let scores = scores.f_masked_fill(&self.mask, f64::NEG_INFINITY)?;
        let probs = scores.f_softmax(-1, None::<Kind>)?;
        let out = probs.f_matmul(v)?; // [m, heads, S, d]
        let m = out.size()[0];
        out.f_transpose(1, 2)?
            .f_contiguous()?
            .f_view([m, self.cfg.seq_len as i64, -1])
    }

    fn gpt_block(&self, p: &[Tensor], x: &Tensor) -> TResult<Tensor> {
        let h = self.cfg.hidden as i64;
        let nh = self.cfg.heads;
        let run = || -> Result<Tensor, tch::TchError> {
            let qkv = x.f_linear(&p[0], Some(&p[1]))?;
            let parts = qkv.f_split(h, -1)?;
            let (q, k, v) = (
                self.split_heads(&parts[0], nh)?,
                self.split_heads(&parts[1], nh)?,
                self.split_heads(&parts[2], nh)?,
            );
            let a = self.attend(&q, &k, &v)?.f_linear(&p[2], Some(&p[3]))?;
            let x1 = x
                .f_add(&a)?
                .f_layer_norm([h], Some(&p[4]), Some(&p[5]), 1e-5, true)?;
            let mlp = x1
                .f_linear(&p[6], Some(&p[7]))?
                .f_gelu("none")?
                .f_linear(&p[8], Some(&p[9]))?;
            x1.f_add(&mlp)?
                .f_layer_norm([h], Some(&p[10]), Some(&p[11]), 1e-5, true)
        };
        run().map_err(terr)
    }

    pub(crate) fn rotary(&self, t: &Tensor) -> Result<Tensor, tch::TchError> {
        let (cos, sin) = self.rope.as_ref().expect("rotary tables exist for llama");
        let half = (self.cfg.head_dim() / 2) as i64;
        let x1 = t.f_narrow(-1, 0, half)?;
        let x2 = t.f_narrow(-1, half, half)?;
        let a = x1.f_mul(cos)?.f_sub(&x2.f_mul(sin)?)?;
        let b = x1.f_mul(sin)?.f_add(&x2.f_mul(cos)?)?;
        Tensor::f_cat(&[a, b], -1)
    }

    fn llama_block(&self, p: &[Tensor], x: &Tensor) -> TResult<Tensor> {
        let h = self.cfg.hidden as i64;
        let (nh, kvh) = (self.cfg.heads, self.cfg.kv_heads);
        let run = || -> Result<Tensor, tch::TchError> {
            let n1 = x.f_rms_norm([h], Some(&p[0]), 1e-6)?;
            let q = self.rotary(&self.split_heads(&n1.f_linear::<&Tensor>(&p[1], None)?, nh)?)?;
            let mut k =
                self.rotary(&self.split_heads(&n1.f_linear::<&Tensor>(&p[2], None)?, kvh)?)?;
            let mut v = self.split_heads(&n1.f_linear::<&Tensor>(&p[3], None)?, kvh)?;
            if nh != kvh {
                let rep = (nh / kvh) as i64;
                k = k.f_repeat_interleave_self_int(rep, Some(1), None)?;
                v = v.f_repeat_interleave_self_int(rep, Some(1), None)?;
            }
            let a = self.attend(&q, &k, &v)?.f_linear::<&Tensor>(&p[4], None)?;
            let x1 = x.f_add(&a)?;
            let n2 = x1.f_rms_norm([h], Some(&p[5]), 1e-6)?;
            let g = n2.f_linear::<&Tensor>(&p[6], None)?.f_silu()?;
            let u = n2.f_linear::<&Tensor>(&p[7], None)?;
            let mlp = g.f_mul(&u)?.f_linear::<&Tensor>(&p[8], None)?;
            x1.f_add(&mlp)
        };
        run().map_err(terr)
    }
}

/// The tch device for a device kind and rank: CPU, or
/// `cuda:(local_rank % device_count)` with the local rank from OpenMPI's
/// `OMPI_COMM_WORLD_LOCAL_RANK` (else `rank`).
pub fn device_for(kind: crate::config::DeviceKind, rank: usize) -> TResult<Device> {
    match kind {
        crate::config::DeviceKind::Cpu => Ok(Device::Cpu),
        crate::config::DeviceKind::Cuda => {
            let n = tch::Cuda::device_count();
            if n <= 0 || !tch::Cuda::is_available() {
                return Err(ExecError::NoDevice("no CUDA device visible to libtorch (CUDA build of libtorch and a driver needed)".into()));
            }
            let local = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(rank);
            Ok(Device::Cuda(local % n as usize))
        }
    }
}

/// tch kind of a dtype.
pub fn kind_of(d: sim::precision::NumFormat) -> Kind {
    match d {
        sim::precision::NumFormat::Fp32 => Kind::Float,
        sim::precision::NumFormat::Fp16 => Kind::Half,
        sim::precision::NumFormat::Bf16 => Kind::BFloat16,
    }
}

/// Device-synchronises (CUDA) so host timers see finished work.
pub fn sync(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Device memory in use now (bytes): `cudaMemGetInfo` total - free through
/// the already loaded CUDA runtime; `None` on the CPU or without the `cuda`
/// feature.
pub fn device_used_bytes(device: Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    {
        if let Device::Cuda(_) = device {
            type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
            static FN: std::sync::OnceLock<Option<MemGetInfo>> = std::sync::OnceLock::new();
            let f = FN.get_or_init(|| {
                // SAFETY: dlsym on the global namespace with a NUL-terminated
                // name; the symbol, when present, has this C signature.
                let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cudaMemGetInfo".as_ptr()) };
                if p.is_null() {
                    None
                } else {
                    Some(unsafe { std::mem::transmute::<*mut libc::c_void, MemGetInfo>(p) })
                }
            });
            if let Some(f) = f {
                let (mut free, mut total) = (0usize, 0usize);
                // SAFETY: two valid out-pointers.
                if unsafe { f(&mut free, &mut total) } == 0 {
                    return Some((total - free) as u64);
                }
            }
        }
        None
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        None
    }
}
