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
///
/// In place with one temporary (the denominator), as PyTorch's
/// `foreach`/`fused` Adam keeps its intermediates: Adam is memory-bound,
/// and the plain expression's four temporaries of the parameters' size,
/// allocated afresh each step from a heap the passes fragmented, made the
/// trainer's step run up to twice as long as the same step profiled alone.
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
        // m += (1 - b1) (g - m)
        let _ = st.m.f_lerp_(g, 1.0 - cfg.beta1)?;
        // v = (1 - b2) (b2 / (1 - b2) v + g g)
        let _ = st.v.f_mul_scalar_(cfg.beta2 / (1.0 - cfg.beta2))?;
        let _ = st.v.f_addcmul_(g, g)?;
        let _ = st.v.f_mul_scalar_(1.0 - cfg.beta2)?;
        // p += m / (-(bc1 / lr) (sqrt(v) / sqrt(bc2) + eps))
        let mut denom = st.v.f_sqrt()?;
        let _ = denom.f_div_scalar_(bc2.sqrt())?;
        let _ = denom.f_add_scalar_(cfg.eps)?;
        let _ = denom.f_mul_scalar_(-bc1 / cfg.lr)?;
        let _ = p.f_addcdiv_(&st.m, &denom)?;
        Ok(())
    };
    run().map_err(terr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place step against Adam written out in f64 for three steps.
    #[test]
    fn in_place_step_is_adam() {
        let cfg = AdamConfig::default();
        let p0 = [0.5f32, -0.25, 0.0, 2.0];
        let gs = [
            [0.1f32, -0.3, 0.0, 5.0],
            [0.2, 0.1, 1e-3, -4.0],
            [-0.05, 0.2, 0.0, 1.0],
        ];
        let mut p = Tensor::from_slice(&p0);
        let mut st = AdamState::zeros_like(&p).unwrap();
        let (mut m, mut v) = ([0f64; 4], [0f64; 4]);
        let mut want: Vec<f64> = p0.iter().map(|&x| x as f64).collect();
        for (k, g) in gs.iter().enumerate() {
            adam_step(&mut p, &Tensor::from_slice(g), &mut st, k as u64 + 1, &cfg).unwrap();
            let t = k as i32 + 1;
            for i in 0..4 {
                let gi = g[i] as f64;
                m[i] = cfg.beta1 * m[i] + (1.0 - cfg.beta1) * gi;
                v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * gi * gi;
                let mh = m[i] / (1.0 - cfg.beta1.powi(t));
                let vh = v[i] / (1.0 - cfg.beta2.powi(t));
                want[i] -= cfg.lr * mh / (vh.sqrt() + cfg.eps);
            }
        }
        let got = Vec::<f32>::try_from(&p).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }
}
