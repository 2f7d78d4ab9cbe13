"""The Ridge Regression CCME (paper, Section "Ridge Regression Estimator").

Stage 1 (on D0, the arm's units): kernel ridge regression of φ(Y) on X,
μ̂₀(x) = Φ₀ (K_X0 + mλ₀I)⁻¹ k_X0(x).
Stage 2 (on D1): kernel ridge regression of the pseudo-outcomes ξ̂ on V,
μ̂(v) = Ξ̂ (K_V + nλ₁I)⁻¹ k_V(v)  (eq. emp_ccme_form).

With ξ̂_i = a_i φ(Y_1i) + b_i μ̂₀(X_1i) every mode is one formula, eq.
(emp_density) with D_ω → diag(a) and D_{1−ω} → diag(b):

=========  ==========  ==========  =======================================
mode       a_i          b_i          pseudo-outcome
=========  ==========  ==========  =======================================
dr         ω_i          1 − ω_i      ω(φ(Y) − μ̂₀(X)) + μ̂₀(X)
ipw        ω_i          0            ω φ(Y)
pi         0            1            μ̂₀(X)
onestep    1            0            φ(Y), regressed on V among the arm's D1 units
=========  ==========  ==========  =======================================

with ω_i = 1{A_i = a} / π̂_a(X_i).  The fitted object keeps the Cholesky
factors of K_V + nλ₁I and K_X0 + mλ₀I; evaluations go through the compiled
core block by block (:func:`ccme._backend.ridge_contract`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _backend
from ..kernels import Kernel

__all__ = ["RidgeFoldArm", "fit_ridge_fold", "MODES"]

MODES = ("dr", "ipw", "pi", "onestep")
_EMPTY = np.zeros((0, 0))


@dataclass
class RidgeFoldArm:
    """The ridge CCME of one arm fitted on one cross-fitting fold.

    Attributes
    ----------
    L_V : ndarray (n, n)
        Cholesky factor of K_V + nλ₁I over the second-stage units.
    V1 : ndarray (n, d_v)
    a, b : ndarray (n,)
        Coefficients of φ(Y_1i) and of μ̂₀(X_1i) in the pseudo-outcome.
    Y1 : ndarray (n, d_y)
    X1 : ndarray (n, d_x)
        Second-stage covariates of the outcome model (empty when b = 0).
    L_X0, X0, Y0 : ndarrays
        First-stage factor of K_X0 + mλ₀I, covariates and outcomes of the arm's D0 units.
    jitter : dict
        Jitter added to each factorisation (0 when none was needed).
    """

    L_V: np.ndarray
    V1: np.ndarray
    v_kernel: Kernel
    a: np.ndarray
    Y1: np.ndarray
    b: np.ndarray
    X1: np.ndarray
    L_X0: np.ndarray
    X0: np.ndarray
    Y0: np.ndarray
    x_kernel: Kernel
    jitter: dict

    @property
    def n_atoms(self) -> int:
        return self.Y1.shape[0] + self.Y0.shape[0]

    def contract(self, V_eval, points, feature, y_kernel: Kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × Σ_k c_k(v) F(y_k, point)`` by eq. (emp_density), in the compiled core."""
        _backend.ridge_contract(
            L_V=self.L_V, V1=self.V1, v_kernel=self.v_kernel.name, v_bandwidth=self.v_kernel.bandwidth_array,
            a=self.a, Y1=self.Y1,
            b=self.b, X1=self.X1, L_X0=self.L_X0, X0=self.X0, Y0=self.Y0,
            x_kernel=self.x_kernel.name, x_bandwidth=self.x_kernel.bandwidth_array,
            V_eval=V_eval, points=points, feature=feature,
            y_kernel=y_kernel.name, y_bandwidth=y_kernel.bandwidth_array,
            out=out, scale=scale, n_threads=n_threads,
        )

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms (Y1 then Y0) and their weights c(v), shape (n_atoms, n_eval)."""
        c1, c0 = _backend.ridge_weights(
            L_V=self.L_V, V1=self.V1, v_kernel=self.v_kernel.name, v_bandwidth=self.v_kernel.bandwidth_array,
            a=self.a, b=self.b, X1=self.X1, L_X0=self.L_X0, X0=self.X0,
            x_kernel=self.x_kernel.name, x_bandwidth=self.x_kernel.bandwidth_array,
            V_eval=V_eval, n_threads=n_threads,
        )
        return np.vstack([self.Y1, self.Y0]), np.vstack([c1, c0])


def fit_ridge_fold(*, mode, V, Xo, Y, A, target, nuisance, scores_target, v_kernel, x_kernel, lam0, lam1,
                   n_threads=0) -> dict:
    """Fit both arms' ridge CCMEs on one fold (Algorithm "Kernel Ridge Regression Estimator").

    Parameters
    ----------
    mode : {"dr", "ipw", "pi", "onestep"}
    V, Xo, Y, A : ndarrays over all units
        Conditioning variables, outcome-model covariates, outcomes, treatment.
    target, nuisance : index arrays
        D1 (second stage) and D0 (first stage).
    scores_target : ndarray
        Clipped π̂(X) on D1 (fitted on D0).
    lam0, lam1 : dict arm -> float
        Ridge penalties in the paper's convention K + nλI.

    Returns
    -------
    dict arm -> RidgeFoldArm
    """
    fitted = {}
    shared = None  # K_V + nλ₁I over D1 is the same for both arms when λ₁ is
    for arm in (1, 0):
        in_arm = A[target] == arm
        if mode == "onestep":
            rows = target[in_arm]
            L_V, jit_v = _backend.kernel_ridge_factor(
                V[rows], v_kernel.name, v_kernel.bandwidth_array, len(rows) * lam1[arm], n_threads=n_threads
            )
            n_v = len(rows)
            fitted[arm] = RidgeFoldArm(
                L_V=L_V, V1=V[rows], v_kernel=v_kernel, a=np.ones(n_v), Y1=Y[rows], b=np.zeros(n_v),
                X1=np.zeros((0, Xo.shape[1])), L_X0=_EMPTY, X0=np.zeros((0, Xo.shape[1])),
                Y0=np.zeros((0, Y.shape[1])), x_kernel=x_kernel, jitter={"V": jit_v},
            )
            continue
        n = len(target)
        if shared is not None and shared[0] == lam1[arm]:
            L_V, jit_v = shared[1], shared[2]
        else:
            L_V, jit_v = _backend.kernel_ridge_factor(
                V[target], v_kernel.name, v_kernel.bandwidth_array, n * lam1[arm], n_threads=n_threads
            )
            shared = (lam1[arm], L_V, jit_v)
        p_arm = scores_target if arm == 1 else 1.0 - scores_target
        omega = in_arm / p_arm
        if mode == "dr":
            a, b = omega, 1.0 - omega
        elif mode == "ipw":
            a, b = omega, np.zeros(n)
        else:  # "pi"
            a, b = np.zeros(n), np.ones(n)
        jitter = {"V": jit_v}
        if np.any(b != 0):
            rows0 = nuisance[A[nuisance] == arm]
            L_X0, jit_x = _backend.kernel_ridge_factor(
                Xo[rows0], x_kernel.name, x_kernel.bandwidth_array, len(rows0) * lam0[arm], n_threads=n_threads
            )
            jitter["X"] = jit_x
            X1, X0, Y0 = Xo[target], Xo[rows0], Y[rows0]
        else:
            L_X0, X1 = _EMPTY, np.zeros((0, Xo.shape[1]))
            X0, Y0 = np.zeros((0, Xo.shape[1])), np.zeros((0, Y.shape[1]))
        fitted[arm] = RidgeFoldArm(
            L_V=L_V, V1=V[target], v_kernel=v_kernel, a=np.ascontiguousarray(a, dtype=np.float64), Y1=Y[target],
            b=np.ascontiguousarray(b, dtype=np.float64), X1=X1, L_X0=L_X0, X0=X0, Y0=Y0, x_kernel=x_kernel,
            jitter=jitter,
        )
    return fitted
