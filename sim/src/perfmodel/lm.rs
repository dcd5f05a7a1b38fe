//! Levenberg–Marquardt least squares with a forward-difference Jacobian.
//!
//! Minimises `sum_i r_i(x)^2` over an unconstrained parameter vector `x`
//! (the callers map physical, positive quantities through `exp` / logistic
//! functions). Dimensionless; deterministic (no randomness, fixed iteration
//! order), so the same inputs always give the same bits.

/// Stopping rules of [`minimize`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LmOptions {
    /// Most outer iterations (accepted or rejected steps).
    pub(crate) max_iter: usize,
    /// Stop when an accepted step lowers the cost by less than this fraction.
    pub(crate) rel_tol: f64,
    /// Step for the forward-difference derivative (parameters are O(1)).
    pub(crate) fd_step: f64,
}

impl Default for LmOptions {
    fn default() -> Self {
        LmOptions {
            max_iter: 200,
            rel_tol: 1e-10,
            fd_step: 1e-6,
        }
    }
}

fn cost(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum()
}

/// Solves `a x = b` for a symmetric positive definite `a` (n x n, row-major)
/// by Cholesky; `None` when `a` is not positive definite.
fn cholesky_solve(a: &[f64], b: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if s <= 0.0 || !s.is_finite() {
                    return None;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= l[i * n + k] * y[k];
        }
        y[i] = s / l[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let mut s = y[i];
        for k in i + 1..n {
            s -= l[k * n + i] * x[k];
        }
        x[i] = s / l[i * n + i];
    }
    Some(x)
}

/// Minimises the sum of squared residuals `f(x)` starting from `x0`.
/// `f` writes the residuals into the given vector (cleared by the caller's
/// closure or overwritten; its length must not depend on `x`).
pub(crate) fn minimize<F>(f: F, x0: &[f64], opts: LmOptions) -> Vec<f64>
where
    F: Fn(&[f64], &mut Vec<f64>),
{
    let n = x0.len();
    let mut x = x0.to_vec();
    let mut r = Vec::new();
    f(&x, &mut r);
    let m = r.len();
    let mut c = cost(&r);
    let mut mu = 1e-3;
    let mut jac = vec![0.0; m * n]; // column-major: jac[j*m + i]
    let mut rj = Vec::with_capacity(m);
    let mut need_jac = true;
    let mut jtj = vec![0.0; n * n];
    let mut g = vec![0.0; n];
    for _ in 0..opts.max_iter {
        if need_jac {
            for j in 0..n {
                let mut xj = x.clone();
                let h = opts.fd_step * (1.0 + x[j].abs());
                xj[j] += h;
                f(&xj, &mut rj);
                for i in 0..m {
                    jac[j * m + i] = (rj[i] - r[i]) / h;
                }
            }
            for a in 0..n {
                let ca = &jac[a * m..(a + 1) * m];
                g[a] = ca.iter().zip(&r).map(|(p, q)| p * q).sum();
                for b in 0..=a {
                    let cb = &jac[b * m..(b + 1) * m];
                    let v: f64 = ca.iter().zip(cb).map(|(p, q)| p * q).sum();
                    jtj[a * n + b] = v;
                    jtj[b * n + a] = v;
                }
            }
            need_jac = false;
        }
        let mut a = jtj.clone();
        for d in 0..n {
            a[d * n + d] += mu * (jtj[d * n + d] + 1e-9);
        }
        let neg_g: Vec<f64> = g.iter().map(|v| -v).collect();
        let Some(step) = cholesky_solve(&a, &neg_g, n) else {
            mu *= 10.0;
            continue;
        };
        let xn: Vec<f64> = x.iter().zip(&step).map(|(p, q)| p + q).collect();
        f(&xn, &mut rj);
        let cn = cost(&rj);
        if cn.is_finite() && cn < c {
            let improvement = (c - cn) / c.max(1e-300);
            x = xn;
            std::mem::swap(&mut r, &mut rj);
            c = cn;
            mu = (mu / 3.0).max(1e-12);
            need_jac = true;
            if improvement < opts.rel_tol {
                break;
            }
        } else {
            mu *= 4.0;
            if mu > 1e12 {
                break;
            }
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_an_exponential() {
        // y = 2 exp(0.5 t), parameters (ln a, b).
        let ts: Vec<f64> = (0..10).map(|i| i as f64 * 0.3).collect();
        let ys: Vec<f64> = ts.iter().map(|t| 2.0 * (0.5 * t).exp()).collect();
        let x = minimize(
            |p, r| {
                r.clear();
                r.extend(
                    ts.iter()
                        .zip(&ys)
                        .map(|(t, y)| p[0].exp() * (p[1] * t).exp() - y),
                );
            },
            &[0.0, 0.0],
            LmOptions::default(),
        );
        assert!((x[0].exp() - 2.0).abs() < 1e-6, "{x:?}");
        assert!((x[1] - 0.5).abs() < 1e-6, "{x:?}");
    }

    #[test]
    fn cholesky_solves() {
        let a = [4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&a, &[2.0, 1.0], 2).unwrap();
        assert!((4.0 * x[0] + 2.0 * x[1] - 2.0).abs() < 1e-12);
        assert!((2.0 * x[0] + 3.0 * x[1] - 1.0).abs() < 1e-12);
        assert!(cholesky_solve(&[-1.0], &[1.0], 1).is_none());
    }
}
