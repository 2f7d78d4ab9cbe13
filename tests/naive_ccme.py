"""A naive numpy twin of the ridge CCME, written straight from the paper's formulas.

Materialises every matrix and inverts with np.linalg.solve: obviously correct,
slow, and independent of ccme's code path (it shares no code with ccme except
reading the choices - folds, kernels, penalties - stored on the result).
"""

import numpy as np
from scipy.special import ndtr


def gauss(A, B, bw, normalized=False):
    D = (A[:, None, :] - B[None, :, :]) / bw
    K = np.exp(-0.5 * np.sum(D**2, axis=-1))
    if normalized:
        K = K / ((2 * np.pi) ** (A.shape[1] / 2) * np.prod(bw))
    return K


def pseudo_coefficients(mode, A_target, arm, scores_target):
    """(a, b) of ξ_i = a_i φ(Y_i) + b_i μ̂₀(X_i) for a mode (Appendix "Baseline Estimators")."""
    p = scores_target if arm == 1 else 1 - scores_target
    omega = (A_target == arm) / p
    return {
        "dr": (omega, 1 - omega),
        "ipw": (omega, np.zeros_like(omega)),
        "pi": (np.zeros_like(omega), np.ones_like(omega)),
    }[mode]


def fold_weights(res, fold, arm, V_eval, scores):
    """c(v) over atoms (Y1 then Y0) of one fold, by eq. (emp_density) materialised."""
    d = res.design
    kx, kv = res.kernels["x"].bandwidth_array, res.kernels["v"].bandwidth_array
    lam0, lam1 = res.penalties["lam0"][arm], res.penalties["lam1"][arm]
    cols = [d.x_names.index(c) for c in res.outcome_columns]
    Xo = d.X[:, cols]
    if res.mode == "onestep":
        rows = fold.target[d.A[fold.target] == arm]
        K = gauss(d.V[rows], d.V[rows], kv)
        beta = np.linalg.solve(K + len(rows) * lam1 * np.eye(len(rows)), gauss(d.V[rows], V_eval, kv))
        return d.Y[rows], beta
    t, r0 = fold.target, fold.nuisance[d.A[fold.nuisance] == arm]
    n, m = len(t), len(r0)
    a, b = pseudo_coefficients(res.mode, d.A[t], arm, scores[t])
    beta = np.linalg.solve(gauss(d.V[t], d.V[t], kv) + n * lam1 * np.eye(n), gauss(d.V[t], V_eval, kv))
    B = np.linalg.solve(gauss(Xo[r0], Xo[r0], kx) + m * lam0 * np.eye(m), gauss(Xo[r0], Xo[t], kx))
    atoms = np.vstack([d.Y[t], d.Y[r0]])
    lam_p = res.penalties.get("lam1_plugin", {}).get(arm, lam1) if res.mode == "dr" else lam1
    if lam_p != lam1:
        # the correction ω(φ(Y) − μ̂₀(X)) smoothed at λ₁, the plug-in part μ̂₀(X) at λ₁ᵖ
        beta_p = np.linalg.solve(gauss(d.V[t], d.V[t], kv) + n * lam_p * np.eye(n), gauss(d.V[t], V_eval, kv))
        return atoms, np.vstack([a[:, None] * beta, B @ (beta_p - a[:, None] * beta)])
    return atoms, np.vstack([a[:, None] * beta, B @ (b[:, None] * beta)])


def density(res, y, V_eval, arm, scores):
    """Σ over folds (1/K) [k_Y1(y)ᵀD_a + k_Y0(y)ᵀ(K_X0+mλ0I)⁻¹K_X0X1 D_b](K_V+nλ1I)⁻¹k_V(v)."""
    bw = res.outcome_kernel(arm).bandwidth_array
    total = 0
    for fold in res.folds:
        atoms, c = fold_weights(res, fold, arm, V_eval, scores)
        total = total + c.T @ gauss(atoms, y, bw, normalized=True)
    return total / len(res.folds)


def cdf(res, y, V_eval, arm, scores):
    bw = res.embedding(arm).cdf_kernel.bandwidth_array
    total = 0
    for fold in res.folds:
        atoms, c = fold_weights(res, fold, arm, V_eval, scores)
        total = total + c.T @ ndtr((y[None, :, 0] - atoms[:, [0]]) / bw[0])
    return total / len(res.folds)


def moments(res, V_eval, arm, scores):
    mass = mean = second = 0
    for fold in res.folds:
        atoms, c = fold_weights(res, fold, arm, V_eval, scores)
        mass = mass + c.sum(axis=0)
        mean = mean + c.T @ atoms[:, 0]
        second = second + c.T @ atoms[:, 0] ** 2
    return mass, mean / mass, second / mass
