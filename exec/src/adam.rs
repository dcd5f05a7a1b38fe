//! Adam on flat f32 tensors (a rank's shard, or a whole unit in the
//! single-process reference): standard Adam with bias correction, no weight
//! decay. Every operation is elementwise, so updating shards separately
//! equals updating the whole vector.
//!
//! Units: dimensionless; the learning rate in parameter units per step.

use tch::Tensor;

use crate::config::AdamConfig;
use crate::model::{terr, TResult};

/// Adam moments of one flat parameter vector.
#[derive(Debug)]
pub struct AdamState {
    /// First moment (f32, like the parameters).
    pub m: Tensor,
    /// Second moment.
    pub v: Tensor,
}

impl AdamState {
    /// Zero moments shaped like `p`.
    pub fn zeros_like(p: &Tensor) -> TResult<AdamState> {
        Ok(AdamState {
            m: p.f_zeros_like().map_err(terr)?,
            v: p.f_zeros_like().map_err(terr)?,
        })
    }
}

/// One Adam step (`step` counts from 1) on `p` in place with gradient `g`:
/// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
pub fn adam_step(
    p: &mut Tensor,
    g: &Tensor,
    st: &mut AdamState,
    step: u64,
    cfg: &AdamConfig,
) -> TResult<()> {
    let _guard = tch::no_grad_guard();
    let t = step as i32;
    let bc1 = 1.0 - cfg.beta1.powi(t);
    let bc2 = 1.0 - cfg.beta2.powi(t);
    let mut run = || -> Result<(), tch::TchError> {
        let _ = st.m.f_mul_scalar_(cfg.beta1)?;
        let _ = st.m.f_add_(&g.f_mul_scalar(1.0 - cfg.beta1)?)?;
        let _ = st.v.f_mul_scalar_(cfg.beta2)?;
        let _ = st.v.f_add_(&g.f_mul(g)?.f_mul_scalar_(1.0 - cfg.beta2)?)?;
        let denom = st.v.f_div_scalar(bc2)?.f_sqrt_()?.f_add_scalar_(cfg.eps)?;
        let upd =
            st.m.f_div_scalar(bc1)?
                .f_div_(&denom)?
                .f_mul_scalar_(cfg.lr)?;
        let _ = p.f_sub_(&upd)?;
        Ok(())
    };
    run().map_err(terr)
}
