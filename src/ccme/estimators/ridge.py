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

import numbers

from .. import _backend
from ..errors import ParameterError
from ..kernels import Kernel, resolve_kernel
from ..memory import check_allocation

__all__ = ["RidgeEstimator", "RidgeFold", "RidgeFoldArm", "MODES", "RIDGE_DEFAULTS"]

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
    atom_units : ndarray of int, optional
        The data row behind each atom (Y1's rows, then Y0's), in the order of :meth:`weights`.
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
    atom_units: np.ndarray | None = None

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


class RidgeFold:
    """One cross-fitting fold of the ridge CCME (Algorithm "Kernel Ridge Regression Estimator").

    The second-stage factor of K_V + nλ₁I over D1, shared by both arms, is
    computed when the fold is created; an arm's first stage (K_X0 + mλ₀I over
    the arm's units of D0) is computed by :meth:`arm` when that arm is first
    used, so that a user who asks only for p(Y¹ | V) neither pays for nor
    holds the control arm's factors.

    Parameters
    ----------
    mode : {"dr", "ipw", "pi", "onestep"}
    V, Xo, Y, A : ndarrays over all units
        Conditioning variables, outcome-model covariates, outcomes, treatment.
    target, nuisance : index arrays
        D1 (second stage) and D0 (first stage).
    scores_target : ndarray
        Clipped π̂(X) on D1 (fitted on D0).
    v_kernel, x_kernel : Kernel
    lam0, lam1 : dict arm -> float
        Ridge penalties in the paper's convention K + nλI.
    """

    def __init__(self, *, mode, V, Xo, Y, A, target, nuisance, scores_target, v_kernel, x_kernel, lam0, lam1,
                 n_threads=0):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.V, self.Xo, self.Y, self.A = V, Xo, Y, A
        self.target, self.nuisance = target, nuisance
        self.scores_target = scores_target
        self.v_kernel, self.x_kernel = v_kernel, x_kernel
        self.lam0, self.lam1 = lam0, lam1
        self.n_threads = n_threads
        self._second_stage = {}  # λ₁ -> (L_V, jitter): one factor serves both arms when their λ₁ agree
        if mode != "onestep":
            self._factor_second_stage(lam1[1])

    def _factor_second_stage(self, lam):
        if lam not in self._second_stage:
            rows = self.target
            self._second_stage[lam] = _guarded_factor(self.V[rows], self.v_kernel, len(rows) * lam, self.n_threads,
                                                      "the second-stage Cholesky factor of K_V + nλ₁I")
        return self._second_stage[lam]

    def arm(self, arm: int) -> RidgeFoldArm:
        """Build arm ``arm``'s estimator on this fold (the pseudo-outcome table in the module docstring)."""
        V, Xo, Y, A, target, nuisance = self.V, self.Xo, self.Y, self.A, self.target, self.nuisance
        in_arm = A[target] == arm
        no_x = np.zeros((0, Xo.shape[1]))
        no_y = np.zeros((0, Y.shape[1]))
        if self.mode == "onestep":
            rows = target[in_arm]
            L_V, jit_v = _guarded_factor(V[rows], self.v_kernel, len(rows) * self.lam1[arm], self.n_threads,
                                         "the one-step Cholesky factor of K_V + nλ₁I")
            return RidgeFoldArm(
                L_V=L_V, V1=V[rows], v_kernel=self.v_kernel, a=np.ones(len(rows)), Y1=Y[rows],
                b=np.zeros(len(rows)), X1=no_x, L_X0=_EMPTY, X0=no_x, Y0=no_y, x_kernel=self.x_kernel,
                jitter={"V": jit_v}, atom_units=rows,
            )
        n = len(target)
        L_V, jit_v = self._factor_second_stage(self.lam1[arm])
        p_arm = self.scores_target if arm == 1 else 1.0 - self.scores_target
        omega = in_arm / p_arm
        if self.mode == "dr":
            a, b = omega, 1.0 - omega
        elif self.mode == "ipw":
            a, b = omega, np.zeros(n)
        else:  # "pi"
            a, b = np.zeros(n), np.ones(n)
        jitter = {"V": jit_v}
        if np.any(b != 0):
            rows0 = nuisance[A[nuisance] == arm]
            L_X0, jitter["X"] = _guarded_factor(Xo[rows0], self.x_kernel, len(rows0) * self.lam0[arm], self.n_threads,
                                                "the first-stage Cholesky factor of K_X0 + mλ₀I")
            X1, X0, Y0 = Xo[target], Xo[rows0], Y[rows0]
        else:
            L_X0, X1, X0, Y0 = _EMPTY, no_x, no_x, no_y
            rows0 = np.zeros(0, dtype=np.intp)
        return RidgeFoldArm(
            L_V=L_V, V1=V[target], v_kernel=self.v_kernel, a=np.ascontiguousarray(a, dtype=np.float64),
            Y1=Y[target], b=np.ascontiguousarray(b, dtype=np.float64), X1=X1, L_X0=L_X0, X0=X0, Y0=Y0,
            x_kernel=self.x_kernel, jitter=jitter, atom_units=np.concatenate([target, rows0]),
        )


def _guarded_factor(Z, kernel: Kernel, shift: float, n_threads: int, what: str):
    """:func:`ccme._backend.kernel_ridge_factor` after checking that its n × n factor fits in memory."""
    n = len(Z)
    check_allocation(8.0 * n * n, f"{what} ({n} × {n})")
    return _backend.kernel_ridge_factor(Z, kernel.name, kernel.bandwidth_array, shift, n_threads=n_threads)


def factor_bytes(mode: str, A: np.ndarray, folds, shared_second_stage: bool = True) -> float:
    """Bytes of the Cholesky factors a ridge fit holds once both arms are built (8 bytes per entry).

    Per fold: the second-stage factor over D1 (shared by the arms when their
    λ₁ agree, ``shared_second_stage``; for one-step one per arm over the arm's
    D1 units) and, for the modes with a first stage (dr, pi), one factor per
    arm over the arm's D0 units.
    """
    total = 0.0
    for fold in folds:
        if mode == "onestep":
            total += sum(float(np.sum(A[fold.target] == arm)) ** 2 for arm in (1, 0))
            continue
        total += (1 if shared_second_stage else 2) * float(len(fold.target)) ** 2
        if mode in ("dr", "pi"):
            total += sum(float(np.sum(A[fold.nuisance] == arm)) ** 2 for arm in (1, 0))
    return 8.0 * total


#: Documented defaults of the ridge estimator's hyperparameters.  The penalty
#: 0.01 (both stages, K + nλI) was the best of {1e-4, 1e-3, 1e-2, 3e-2, 0.1}
#: for the doubly robust fit on the paper's simulation at n = 2000 and 4000
#: (integrated squared error; benchmarks/paper_defaults.py reruns that check).
RIDGE_DEFAULTS = {
    "lam0": 1e-2,          # first stage, K_X0 + mλ₀I
    "lam1": 1e-2,          # second stage, K_V + nλ₁I
    "x_kernel": "gaussian",
    "v_kernel": "gaussian",
    "y_kernel": "gaussian",
    "x_bandwidth": "median",
    "v_bandwidth": "median",
    "y_bandwidth": "silverman",
}


class RidgeEstimator:
    """``method="ridge"``: kernel ridge regression in both stages (see the module docstring)."""

    name = "ridge"
    title = "kernel ridge regression"
    defaults = RIDGE_DEFAULTS
    aliases = {"lam": ("lam0", "lam1"), "kernel": ("x_kernel", "v_kernel")}

    def prepare(self, options: dict, *, design, Xo, seed: int) -> dict:
        return {
            "kernels": {
                "x": resolve_kernel(options["x_kernel"], options["x_bandwidth"], Xo, what="x_bandwidth", seed=seed),
                "v": resolve_kernel(options["v_kernel"], options["v_bandwidth"], design.V, what="v_bandwidth",
                                    seed=seed),
                "y": resolve_kernel(options["y_kernel"], options["y_bandwidth"], design.Y, what="y_bandwidth",
                                    seed=seed, density=True),
            },
            "lam0": per_arm_positive(options["lam0"], "lam0"),
            "lam1": per_arm_positive(options["lam1"], "lam1"),
        }

    def fit_fold(self, prepared, *, mode, design, Xo, fold, scores_target, seed, n_threads=0) -> RidgeFold:
        return RidgeFold(
            mode=mode, V=design.V, Xo=Xo, Y=design.Y, A=design.A, target=fold.target, nuisance=fold.nuisance,
            scores_target=scores_target, v_kernel=prepared["kernels"]["v"], x_kernel=prepared["kernels"]["x"],
            lam0=prepared["lam0"], lam1=prepared["lam1"], n_threads=n_threads,
        )

    def memory_bytes(self, prepared, *, mode, A, folds) -> float:
        """Bytes of the Cholesky factors the fit will hold (:func:`factor_bytes`), checked before fitting."""
        return factor_bytes(mode, A, folds, shared_second_stage=prepared["lam1"][1] == prepared["lam1"][0])

    def describe(self, prepared, result) -> list:
        k = prepared["kernels"]
        return [
            ("Kernels", [
                ("X (outcome model)", k["x"].describe(result.outcome_columns)),
                ("V (second stage)", k["v"].describe(result.design.v_names)),
                ("Y (outcome)", k["y"].describe(result.design.y_names)),
            ]),
            ("Penalties (K + n*lambda*I)", [
                ("lambda0 (stage 1)", _per_arm_text(prepared["lam0"])),
                ("lambda1 (stage 2)", _per_arm_text(prepared["lam1"])),
            ]),
        ]


def per_arm_positive(value, name: str) -> dict:
    """A positive number, or a dict {1: .., 0: ..} of them, as a per-arm dict."""
    if isinstance(value, dict):
        if set(value) != {0, 1}:
            raise ParameterError(f"`{name}` as a dict must have the keys 1 and 0 (the arms); got {sorted(value)}")
        return {arm: _positive(value[arm], name) for arm in (1, 0)}
    v = _positive(value, name)
    return {1: v, 0: v}


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"`{name}` must be a positive number; got {value!r}")
    v = float(value)
    if not (v > 0 and np.isfinite(v)):
        raise ParameterError(f"`{name}` must be a positive number; got {value!r}")
    return v


def _per_arm_text(values: dict) -> str:
    if values[1] == values[0]:
        return f"{values[1]:.4g} (both arms)"
    return f"{values[1]:.4g} (treated), {values[0]:.4g} (control)"
