"""The low-rank ridge CCME: Nyström features of the V- and X-kernels, O(n r²) fitting.

The exact ridge fold-arm (:mod:`ccme.estimators.ridge`) factors the n × n
matrices K_V + nλ₁I and K_X0 + mλ₀I: O(n³) time and O(n²) memory, which stops
near n = 30000.  This module replaces each kernel by a Nyström approximation
k(x, x') ≈ φ(x)ᵀφ(x') with r landmarks chosen by a pivoted Cholesky
factorisation (Harbrecht, Peters & Schneider, 2012; Rudi, Carratino & Rosasco,
"FALKON", 2017, for ridge regression on Nyström features):

    φ(x) = L_pp⁻¹ k(Z, x),     Z the landmarks, L_pp the factor's rows at them,

so that the factorisation's own rows are φ(x_i) and, on the units, K ≈ ΦΦᵀ.
By the push-through identity (ΦΦᵀ + sI)⁻¹Φ = Φ(ΦᵀΦ + sI)⁻¹, the ridge weights
of the second stage are β(v) = Φ h(v), h(v) = (ΦᵀΦ + nλ₁I)⁻¹ φ(v) ∈ R^r, and
the first stage's smoother is S(x) = Ψ₀(Ψ₀ᵀΨ₀ + mλ₀I)⁻¹ ψ(x) with the X-kernel's
features ψ.  The doubly robust weights over the atoms (eq. emp_density) are

    c₁(v) = a ∘ (Φ h(v))                 on the second-stage outcomes Y1,
    c₀(v) = Ψ₀ M h(v),  M = G₀⁻¹ Ψ₁ᵀ diag(b) Φ   on the first-stage outcomes Y0,

a fixed loading matrix times h(v): fitting costs O(n r²), evaluating at T
points of V and G of Y costs O(n r G + T r G), and memory is O(n r).

**Sampling weights** (``fit(weights=)``, :mod:`ccme.sampling_weights`).  The
second stage solves min_f Σ_i w_i ‖ξ_i − f(V_i)‖² + s ‖f‖², the first stage
min_g Σ_l w_l ‖φ(Y0_l) − g(X0_l)‖² + s₀ ‖g‖², with W = diag(w), so that

    β(v) = W Φ h(v),   h(v) = (ΦᵀWΦ + sI)⁻¹ φ(v),
    S(x) = W₀ Ψ₀ G₀⁻¹ ψ(x),   G₀ = Ψ₀ᵀW₀Ψ₀ + s₀I,
    c₁(v) = a ∘ β(v),   c₀(v) = W₀ Ψ₀ M h(v),   M = G₀⁻¹ Ψ₁ᵀ diag(b ∘ w) Φ

(the second stage's W enters M because c₀(v) = Σ_i β_i(v) b_i S(X1_i)).  The
penalties are s = λ₁ Σ_i w_i and s₀ = λ₀ Σ_l w_l, the regressions' total
weights: nλ₁ and mλ₀ when the weights average one over the regression's
units, and exactly the penalties of the data with each row repeated w_i
times for integer (frequency) weights.  The smoother is no longer symmetric:
the fitted values at the units are Hξ with H = Φ G⁻¹ Φᵀ W, so the residuals
are (I − H)P (:meth:`LowRankFoldArm.residual_features`) while iterated
Tikhonov regularisation of the weights β needs (I − Hᵀ)β = β − WΦG⁻¹Φᵀβ
(:meth:`LowRankFoldArm.adjoint_residuals`).  The Nyström landmarks do not
depend on the weights (they approximate the kernel, not the regression).
Without weights (``CrossFitData.sampling_weights`` None) every product is
the unweighted one, unchanged.

**Rank.** The pivoted Cholesky factorisation stops when the largest residual
diagonal k(x, x) − ‖φ(x)‖² falls to ``rank_tol`` (every kernel here has
k(x, x) = 1, so this is a relative bound): the trace error of the
approximation, tr(K − ΦΦᵀ)/n, is then at most ``rank_tol`` on the points
factored, or the rank reaches ``max_rank``.  The landmarks are chosen on a
seeded pool of at most ``landmark_pool`` units (all of them below that size);
the trace error over all units is measured after the fact (it is
1 − mean ‖φ(x_i)‖²) and reported in :meth:`LowRankFoldArm.diagnostics` and the
summary.

:class:`LowRankFoldArm` implements the same protocol as the exact fold-arm
(:class:`ccme.estimators.base.FoldArm`, :class:`LinearSecondStage` for the
bootstrap), so every functional, the bands and the tests run on it unchanged.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from .. import _backend
from .._backend import serial_blas
from ..errors import ParameterError
from ..kernels import Kernel
from ..memory import check_allocation
from ..pseudo import PseudoOutcome
from .base import (FirstStageInfluence, FoldArm, LinearSecondStage, Parameters, PseudoOutcomeFold, TwoStageAtoms,
                   project_atoms, shared_piece)

__all__ = ["STORAGE", "NystromFeatures", "NystromArm", "LowRankFold", "LowRankFoldArm", "LOWRANK_DEFAULTS", "APPROX_THRESHOLD",
           "resolve_approx", "check_lowrank_settings"]

#: Defaults of the low-rank path's settings (``fit(..., rank_tol=, max_rank=, landmark_pool=)``).
LOWRANK_DEFAULTS = {
    "rank_tol": 1e-3,         # largest residual diagonal of the pivoted Cholesky factorisation
    "max_rank": 800,          # at most this many landmarks per kernel (memory at n = 10⁶: 2 n r float32)
    "landmark_pool": 50000,   # landmarks chosen among at most this many (seeded) units
}
#: ``approx="auto"`` takes the low-rank path above this many units.  Measured
#: (``benchmarks/lowrank_crossover.py``, paper simulation, fit + density, tune="none"):
#: the low-rank path is faster from n = 2000 on (0.7 s against 1.0 s; 1.6 against 2.4
#: at 5000; 2.8 against 7.2 at 10000; 7.0 against 31.4 at 20000) with densities within
#: 1e-4 (relative L2) of the exact ones and the same error against the truth; below
#: 5000 units the gain is under a second, and the exact path keeps small fits exact.  With every default, on the
#: accuracy zoo's "choose" case at large n (large_mixed, n = 12000, seeds 1-3; ``benchmarks/tuning_rule.py --setting
#: ccme.estimators.lowrank.APPROX_THRESHOLD=5000,20000 --stem approx_threshold --cases large_mixed``) the exact path
#: gave 0.999 of the low-rank path's error in about six times the time.
APPROX_THRESHOLD = 5000
#: Rows per block when features or products are formed (bounds the temporaries at 8 · 4096 · r bytes).
_ROWS = 4096
#: Rows outside the landmark pool added as candidates per round of :meth:`NystromFeatures.select`, and rounds.
_EXTEND, _ROUNDS = 1024, 4


def resolve_approx(approx, n: int, first_stage: dict) -> str:
    """``"exact"`` or ``"lowrank"`` from the ``approx=`` option (see :data:`APPROX_THRESHOLD`).

    "auto" takes the low-rank path when n > :data:`APPROX_THRESHOLD` and the
    first stage is the kernel ridge in both arms (the forest first stage has
    no low-rank form here).
    """
    if approx not in ("auto", "exact", "lowrank"):
        raise ParameterError(f"`approx` must be 'auto', 'exact' or 'lowrank'; got {approx!r}")
    kernel_first_stage = all(choice == "kernel" for choice in first_stage.values())
    if approx == "lowrank" and not kernel_first_stage:
        raise ParameterError("approx='lowrank' needs first_stage='kernel' (the forest first stage has no "
                             f"low-rank form); got first_stage={dict(first_stage)}")
    if approx == "auto":
        return "lowrank" if n > APPROX_THRESHOLD and kernel_first_stage else "exact"
    return approx


def check_lowrank_settings(options: dict) -> dict:
    """The validated ``rank_tol``, ``max_rank`` and ``landmark_pool``."""
    tol = options["rank_tol"]
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < float(tol) < 1:
        raise ParameterError(f"`rank_tol` must be a number in (0, 1); got {tol!r}")
    out = {"rank_tol": float(tol)}
    for name in ("max_rank", "landmark_pool"):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ParameterError(f"`{name}` must be a positive integer; got {value!r}")
        out[name] = int(value)
    if out["landmark_pool"] < out["max_rank"]:
        raise ParameterError(f"`landmark_pool` ({out['landmark_pool']}) must be at least `max_rank` "
                             f"({out['max_rank']})")
    return out


@dataclass(frozen=True, eq=False)
class NystromFeatures:
    """The Nyström feature map φ(x) = L_pp⁻¹ k(Z, x) of a kernel, from pivoted Cholesky landmarks Z.

    Attributes
    ----------
    kernel : Kernel
    landmarks : ndarray (r, d)
        Z, in the order the factorisation pivoted on them.
    factor : ndarray (r, r)
        L_pp, lower triangular: the factor's rows at the landmarks.
    residual : float
        The largest residual diagonal on the pool when the factorisation stopped.
    """

    kernel: Kernel
    landmarks: np.ndarray
    factor: np.ndarray
    residual: float

    @property
    def rank(self) -> int:
        return self.landmarks.shape[0]

    @classmethod
    @serial_blas
    def select(cls, X, kernel: Kernel, *, rank_tol: float, max_rank: int, pool: int, seed: int,
               n_threads: int = 0, dtype=np.float64) -> tuple["NystromFeatures", np.ndarray]:
        """Landmarks for the rows of ``X`` and their features φ(X) (n × r; ``dtype`` beyond the pool).

        A pivoted Cholesky factorisation of k on a seeded pool of at most
        ``pool`` rows (all rows below that size: then φ(X) are the factor's
        rows); then, while some row of ``X`` has a residual diagonal
        1 − ‖φ(x)‖² above ``rank_tol`` and the rank is below ``max_rank``, the
        worst-covered rows (at most :data:`_EXTEND` a round, up to
        :data:`_ROUNDS` rounds) continue the same greedy pivoting
        (:meth:`extended`), so that outlying rows outside the pool are covered
        like the pool's rows.
        """
        n = len(X)
        rows = np.arange(n) if n <= pool else np.sort(np.random.default_rng(seed).choice(n, pool, replace=False))
        check_allocation(8.0 * len(rows) * min(max_rank, len(rows)),
                         f"the pivoted Cholesky factor of the landmark pool ({len(rows)} × {min(max_rank, len(rows))})")
        L, pivots, residual = _backend.pivoted_cholesky(X[rows], kernel.name, kernel.bandwidth_array, rank_tol,
                                                        max_rank, n_threads=n_threads)
        features = cls(kernel=kernel, landmarks=np.ascontiguousarray(X[rows][pivots]),
                       factor=np.ascontiguousarray(L[pivots]), residual=float(residual))
        if n <= pool:
            return features, np.ascontiguousarray(L)
        check_allocation(np.dtype(dtype).itemsize * n * max_rank, f"the Nyström features ({n} × up to {max_rank})")
        Phi, left = features.with_residuals(X, n_threads, dtype)
        for _ in range(_ROUNDS):
            worst = worst_covered(left, rank_tol)
            if worst.size == 0 or features.rank >= max_rank:
                break
            features = features.extended(X[np.sort(worst)], rank_tol=rank_tol, max_rank=max_rank,
                                         n_threads=n_threads)
            Phi, left = features.with_residuals(X, n_threads, dtype)
        return replace(features, residual=float(np.max(left, initial=0.0))), Phi

    def extended(self, C, *, rank_tol: float, max_rank: int, n_threads: int = 0) -> "NystromFeatures":
        """The greedy pivoted Cholesky factorisation continued on the candidate rows ``C``.

        Each step takes the candidate with the largest residual diagonal d,
        appends it as a landmark with the factor row [φ(c)ᵀ, √d] (L_pp stays
        lower triangular) and updates the candidates' features by the new
        column (k(C, c) − Φ_C φ(c)) / √d: exactly the steps the factorisation
        of the pool with these rows added would take once it reached them.
        """
        name, bw = self.kernel.name, self.kernel.bandwidth_array
        Phi_C = self(C, n_threads)
        left = 1.0 - np.einsum("ij,ij->i", Phi_C, Phi_C)
        Z, F = [self.landmarks], self.factor
        added = []
        for _ in range(max_rank - self.rank):
            j = int(np.argmax(left))
            if not left[j] > rank_tol:
                break
            root = np.sqrt(left[j])
            column = (_backend.gram(C, C[j:j + 1], name, bw, n_threads=n_threads)[:, 0] - Phi_C @ Phi_C[j]) / root
            row = np.append(Phi_C[j], root)
            Phi_C = np.hstack([Phi_C, column[:, None]])
            left = left - column**2
            left[j] = 0.0
            added.append((j, row))
        if not added:
            return self
        r = self.rank + len(added)
        factor = np.zeros((r, r))
        factor[:self.rank, :self.rank] = F
        for t, (j, row) in enumerate(added):
            factor[self.rank + t, :len(row)] = row
        Z = np.vstack([self.landmarks, C[[j for j, _ in added]]])
        return NystromFeatures(kernel=self.kernel, landmarks=np.ascontiguousarray(Z), factor=factor,
                               residual=float(np.max(left, initial=0.0)))

    def __call__(self, X, n_threads: int = 0, dtype=np.float64) -> np.ndarray:
        """φ(X), shape (len(X), r), a block of rows at a time, stored as ``dtype``."""
        return self.with_residuals(X, n_threads, dtype)[0]

    def with_residuals(self, X, n_threads: int = 0, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
        """(φ(X) stored as ``dtype``, the residual diagonals 1 − ‖φ(x)‖² in float64).

        Each block is formed in float64 and rounded once, so a float32 result
        never has a float64 twin of its size in memory (at n = 10⁶ that twin
        was the fit's peak), and the residuals do not depend on ``dtype``.
        """
        out = np.empty((len(X), self.rank), dtype=dtype)
        left = np.empty(len(X))
        for s in range(0, len(X), _ROWS):
            K = _backend.gram(self.landmarks, X[s:s + _ROWS], self.kernel.name, self.kernel.bandwidth_array,
                              n_threads=n_threads)
            block = solve_triangular(self.factor, K, lower=True, check_finite=False).T
            out[s:s + _ROWS] = block
            left[s:s + _ROWS] = 1.0 - np.einsum("ij,ij->i", block, block)
        return out, left

    STATE_SCHEMA = "ccme.NystromFeatures"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        from ..io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, kernel=self.kernel.to_state(),
                          landmarks=self.landmarks, factor=self.factor, residual=self.residual)

    @classmethod
    def from_state(cls, state) -> "NystromFeatures":
        from ..errors import FormatError
        from ..io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("kernel", "landmarks", "factor", "residual"))
        Z, F = state["landmarks"], state["factor"]
        if not (isinstance(Z, np.ndarray) and isinstance(F, np.ndarray) and Z.ndim == 2 and F.shape == (len(Z),) * 2):
            raise FormatError("the stored Nyström features' landmarks and factor disagree in size")
        return cls(kernel=Kernel.from_state(state["kernel"]), landmarks=Z, factor=F, residual=float(state["residual"]))


def worst_covered(left: np.ndarray, rank_tol: float) -> np.ndarray:
    """The rows a round of :meth:`NystromFeatures.select` extends with (distributed: per partition, then merged).

    The (at most :data:`_EXTEND`) largest residual diagonals ``left`` above
    ``rank_tol``, the earlier row first among ties; the distributed path
    ranks each partition's rows and then the merged candidates with it.
    """
    worst = np.argsort(-left, kind="stable")[:_EXTEND]
    return worst[left[worst] > rank_tol]


#: Storage type of the n × r arrays (see :class:`LowRankFoldArm`).
STORAGE = np.float32


def _blocks(F: np.ndarray):
    """Float64 blocks of rows of a stored array."""
    for s in range(0, len(F), _ROWS):
        yield s, F[s:s + _ROWS].astype(np.float64)


def _gram_chol(F: np.ndarray, shift: float, w: np.ndarray | None = None) -> np.ndarray:
    """The lower Cholesky factor of FᵀWF + shift·I (r × r; positive definite for shift > 0), F stored.

    ``w`` (the rows' sampling weights, W = diag(w)) None: FᵀF, the unweighted Gram matrix.
    """
    G = np.zeros((F.shape[1], F.shape[1]))
    for s, B in _blocks(F):
        G += B.T @ B if w is None else B.T @ (w[s:s + len(B), None] * B)
    G[np.diag_indices_from(G)] += shift
    return cholesky(G, lower=True, check_finite=False)


def _trace_error(F: np.ndarray) -> float:
    """tr(K − FFᵀ)/n = 1 − mean ‖φ(x_i)‖² (k(x, x) = 1): the approximation's relative trace error."""
    total = sum(float(np.einsum("ij,ij->", B, B)) for _, B in _blocks(F))
    return float(max(0.0, 1.0 - total / max(len(F), 1)))


class NystromArm(TwoStageAtoms):
    """The ranks and diagnostics of a low-rank fold-arm (local or distributed): ``v_map``, ``x_map``, ``trace_error``."""

    @property
    def ranks(self) -> dict:
        """Number of landmarks per kernel ("V", and "X" with a first stage)."""
        return {"V": self.v_map.rank, **({"X": self.x_map.rank} if self.x_map is not None else {})}

    def diagnostics(self) -> dict:
        return {"jitter": 0.0, "ranks": self.ranks, "trace_error": dict(self.trace_error)}


@dataclass(frozen=True, eq=False)
class LowRankFoldArm(NystromArm, FoldArm, LinearSecondStage):
    """The ridge CCME of one arm on one fold, with Nyström features in both stages (module docstring).

    The n × r arrays, Φ and the first-stage atoms' loadings Ψ₀M, are stored in
    float32 (:data:`STORAGE`) and every product with them is formed in
    float64, a block of rows at a time.  Rounding the features to float32
    changes each entry of the approximate kernel ΦΦᵀ by at most about 1.2e-7
    (2 · 2⁻²⁴, with ‖φ(x)‖ ≤ 1), far below the approximation's own error for
    any ``rank_tol`` ≥ 1e-6, and halves the memory that bounds the path at
    n = 10⁶.

    Attributes
    ----------
    v_map : NystromFeatures
        φ, the V-kernel's features.
    Phi : ndarray (n, r), float32
        φ(V1_i) of the second-stage units.
    chol : ndarray (r, r)
        Lower Cholesky factor of ΦᵀΦ + sI, s = :attr:`shift` = nλ₁.
    pseudo : PseudoOutcome
    Y1, X1 : ndarrays
        Second-stage outcomes and outcome-model covariates (X1 empty without a first stage).
    x_map : NystromFeatures or None
        ψ, the X-kernel's features (None without a first stage).
    loadings0 : ndarray (m, r), float32
        Ψ₀M, M = G₀⁻¹ Ψ₁ᵀ diag(b) Φ: c₀(v) = Ψ₀M h(v) on the first-stage atoms.
    X0 : ndarray (m, d_x)
        The first-stage covariates (Ψ₀ = ψ(X0) is recomputed for the bootstrap only).
    chol0 : ndarray (r0, r0)
        Lower Cholesky factor of Ψ₀ᵀΨ₀ + s₀I, s₀ = :attr:`shift0` = mλ₀.
    Y0 : ndarray (m, d_y)
    atom_units : ndarray of int
    trace_error : dict
        tr(K − ΦΦᵀ)/n per kernel ("V", "X") over the units factored.
    w1, w0 : ndarray or None
        Sampling weights of the second-stage and first-stage units (module
        docstring); None without weights.
    """

    v_map: NystromFeatures
    Phi: np.ndarray
    chol: np.ndarray
    shift: float
    pseudo: PseudoOutcome
    Y1: np.ndarray
    X1: np.ndarray
    x_map: NystromFeatures | None
    loadings0: np.ndarray
    X0: np.ndarray
    chol0: np.ndarray
    shift0: float
    Y0: np.ndarray
    atom_units: np.ndarray | None = None
    trace_error: dict = field(default_factory=dict)
    w1: np.ndarray | None = None
    w0: np.ndarray | None = None

    @property
    def _a(self) -> np.ndarray:
        """The Y1 atoms' coefficients in c₁(v) = a ∘ W Φ h(v): a, or a ∘ w with sampling weights."""
        return self.pseudo.a if self.w1 is None else self.pseudo.a * self.w1

    def coefficients(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """h(v) = (ΦᵀWΦ + sI)⁻¹ φ(v) (W = I without weights), shape (r, n_eval)."""
        return cho_solve((self.chol, True), self.v_map(V_eval, n_threads).T, check_finite=False)

    @serial_blas
    def weights(self, V_eval, n_threads: int = 0):
        """Atoms (Y1 then Y0) and their weights c(v), shape (n_atoms, n_eval)."""
        h = self.coefficients(V_eval, n_threads)
        c1 = self._a[:, None] * _times(self.Phi, h)
        return self.atoms, np.vstack([c1, _times(self.loadings0, h)])

    def _project(self, F: np.ndarray, start: int, stop: int) -> np.ndarray:
        """(loadings[start:stop])ᵀ F for a block of atoms (rows of Y1, then of Y0), without forming the loadings."""
        n1 = self.Y1.shape[0]
        split = min(max(n1 - start, 0), stop - start)  # F's rows before `split` are Y1 atoms, the rest Y0 atoms
        out = np.zeros((self.Phi.shape[1], F.shape[1]))
        if split > 0:
            s1 = slice(start, start + split)
            out += self.Phi[s1].astype(np.float64).T @ (self._a[s1, None] * F[:split])
        if split < stop - start:
            out += self.loadings0[start + split - n1:stop - n1].astype(np.float64).T @ F[split:]
        return out

    @serial_blas
    def contract(self, V_eval, points, feature, y_kernel: Kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × h(V)ᵀ (loadingsᵀ F)``: O(N r q + n_eval r q) (:func:`project_atoms`)."""
        projected = project_atoms(self.atoms, self._project, self.Phi.shape[1], points, feature, y_kernel,
                                  out.shape[1], n_threads)
        for v0 in range(0, len(V_eval), _ROWS):
            out[v0:v0 + _ROWS] += scale * (self.coefficients(V_eval[v0:v0 + _ROWS], n_threads).T @ projected)

    # -- the linear second stage (ccme.bootstrap) ---------------------------
    @serial_blas
    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) = W Φ h(v) (W = I without weights), shape (n_units, n_eval)."""
        beta = _times(self.Phi, self.coefficients(V_eval, n_threads))
        return beta if self.w1 is None else self.w1[:, None] * beta

    def _first_stage_features(self, n_threads: int, cache) -> tuple[np.ndarray, np.ndarray]:
        """(Ψ₀ = ψ(X0) at the fit's rounding, Ψ₁ = ψ(X1)), recomputed from X0, X1 (kept in the bootstrap's ``cache``).

        The terms of a split fold-arm and their refits share the feature map ψ.
        """
        def compute():
            Psi0 = self.x_map(self.X0, n_threads, STORAGE).astype(np.float64)  # the rounding of the fit
            return Psi0, self.x_map(self.X1, n_threads)

        return shared_piece(cache, ("low-rank first stage", id(self.x_map)), compute, inputs=(self.X0, self.X1))

    def _first_stage_smooth(self, F0: np.ndarray, n_threads: int, cache=None) -> tuple[np.ndarray, np.ndarray]:
        """(Ψ₀, G₀⁻¹ Ψ₀ᵀ W₀ F0): the first stage's coefficients for targets F0."""
        Psi0 = self._first_stage_features(n_threads, cache)[0]
        targets = F0 if self.w0 is None else self.w0[:, None] * F0
        return Psi0, cho_solve((self.chol0, True), Psi0.T @ targets, check_finite=False)

    @serial_blas
    def unit_features(self, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = a_i F(Y1_i, y) + b_i ⟨μ̂₀(X1_i), F(·, y)⟩, μ̂₀ through ψ: Ψ₁ G₀⁻¹ Ψ₀ᵀ F(Y0)."""
        name, bw = kernel.name, kernel.bandwidth_array
        own = _backend.atom_features(self.Y1, points, feature, name, bw, n_threads)
        first = None
        if self.x_map is not None:
            F0 = _backend.atom_features(self.Y0, points, feature, name, bw, n_threads)
            first = self._first_stage_features(n_threads, cache)[1] @ self._first_stage_smooth(F0, n_threads, cache)[1]
        return self.pseudo.features(own, first)

    @serial_blas
    def residual_features(self, P: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − H) P = P − Φ (ΦᵀWΦ + sI)⁻¹ ΦᵀWP, H = Φ G⁻¹ ΦᵀW the second stage's hat matrix (W = I unweighted)."""
        Phi = self.Phi.astype(np.float64)
        targets = P if self.w1 is None else self.w1[:, None] * P
        return P - Phi @ cho_solve((self.chol, True), Phi.T @ targets, check_finite=False)

    @serial_blas
    def adjoint_residuals(self, beta: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − Hᵀ) β = β − W Φ (ΦᵀWΦ + sI)⁻¹ Φᵀβ: what iterated Tikhonov applies to the weights β.

        Without weights H is symmetric and this is :meth:`residual_features`.
        """
        if self.w1 is None:
            return self.residual_features(beta, n_threads)
        Phi = self.Phi.astype(np.float64)
        return beta - self.w1[:, None] * (Phi @ cho_solve((self.chol, True), Phi.T @ beta, check_finite=False))

    @serial_blas
    def first_stage_influence(self, beta, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None):
        """W(v) = W₀ Ψ₀ G₀⁻¹ Ψ₁ᵀ (b ∘ β(v)) and the residual features (I − H₀) F(Y0), H₀ = Ψ₀ G₀⁻¹ Ψ₀ᵀ W₀.

        (W₀ = I without weights; see the base class.)
        """
        if self.x_map is None or self.atom_units is None:
            return None
        F0 = _backend.atom_features(self.Y0, points, feature, kernel.name, kernel.bandwidth_array, n_threads)
        Psi0, smoothed = self._first_stage_smooth(F0, n_threads, cache)
        pulled = self._first_stage_features(n_threads, cache)[1].T @ (self.pseudo.b[:, None] * beta)
        weights = Psi0 @ cho_solve((self.chol0, True), pulled, check_finite=False)
        if self.w0 is not None:
            weights = self.w0[:, None] * weights
        return FirstStageInfluence(units=self.atom_units[len(self.Y1):], weights=weights,
                                   residuals=F0 - Psi0 @ smoothed)

    @serial_blas
    def leverages(self, n_threads: int = 0) -> np.ndarray:
        """H_ii = w_i ‖C⁻¹φ(V1_i)‖², C the Cholesky factor of ΦᵀWΦ + sI (w_i = 1 unweighted): O(n r²)."""
        out = np.empty(self.Phi.shape[0])
        for s, B in _blocks(self.Phi):
            Z = solve_triangular(self.chol, B.T, lower=True, check_finite=False)
            out[s:s + len(B)] = np.einsum("ki,ki->i", Z, Z)
        return out if self.w1 is None else self.w1 * out

    @serial_blas
    def undersmoothed(self, factor: float, penalty_factor: float, V_units: np.ndarray,
                      n_threads: int = 0, cache=None, restore=None) -> "LowRankFoldArm":
        """This fold-arm with Nyström features of the V kernel at bandwidths × ``factor``, λ₁ × ``penalty_factor``.

        ``restore`` first gives the ignored V columns those bandwidths
        (:meth:`ccme.kernels.Kernel.restored`).  The fold-arm keeps φ(V1),
        not V1, so the units' V comes in ``V_units``.
        The landmarks are chosen afresh (a narrower kernel needs more of them)
        to the fit's precision (the largest residual diagonal its features
        reached, at most the default ``rank_tol``), with the default
        ``landmark_pool``, at most max(default ``max_rank``, the fitted rank)
        landmarks and a fixed seed; the first-stage loadings are recomputed
        for the new features.
        """
        kernel = (self.v_map.kernel if restore is None else self.v_map.kernel.restored(restore)).narrowed(factor)
        s = LOWRANK_DEFAULTS
        rank_tol = min(s["rank_tol"], max(self.v_map.residual, 1e-12))

        def select():
            v_map, Phi = NystromFeatures.select(V_units, kernel, rank_tol=rank_tol,
                                                max_rank=max(s["max_rank"], self.v_map.rank),
                                                pool=s["landmark_pool"], seed=0, n_threads=n_threads, dtype=STORAGE)
            return v_map, Phi.astype(STORAGE, copy=False)

        # The terms of a split fold-arm share the fit's V features, so they share the refit's as well.
        v_map, Phi = shared_piece(cache, ("undersmoothed V features", id(self.v_map), kernel.bandwidth), select,
                                  inputs=(V_units,))
        loadings0 = np.zeros((0, Phi.shape[1]), dtype=STORAGE)
        if self.x_map is not None:
            if cache is None:  # nothing kept: Ψ₀ as stored, Ψ₁ = ψ(X1) a block at a time
                Psi0, Psi1 = self.x_map(self.X0, n_threads, STORAGE), None
            else:  # the bootstrap's Ψ₀ holds the stored (rounded) values in float64: the same loadings
                Psi0, Psi1 = self._first_stage_features(n_threads, cache)
            loadings0 = first_stage_loadings(Phi, self.x_map, self.X1, Psi0, self.chol0, self.pseudo.b, self.w1,
                                             self.w0, n_threads, Psi1=Psi1)
        shift = self.shift * penalty_factor
        return replace(self, v_map=v_map, Phi=Phi, chol=_gram_chol(Phi, shift, self.w1), shift=shift, loadings0=loadings0,
                       trace_error={**self.trace_error, "V": _trace_error(Phi)})

    # -- save / load --------------------------------------------------------
    STATE_SCHEMA = "ccme.LowRankFoldArm"
    #: Version 2 added the sampling weights ``w1``, ``w0`` (None without); version 1 is read as unweighted.
    STATE_VERSION = 2
    _ARRAYS = ("Phi", "chol", "Y1", "X1", "loadings0", "X0", "chol0", "Y0", "atom_units")

    def to_state(self) -> dict:
        """The fitted fold-arm as a versioned state for :mod:`ccme.io` (features, factors, data, pseudo-outcome)."""
        from ..io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION,
                          **{name: getattr(self, name) for name in self._ARRAYS},
                          v_map=self.v_map.to_state(), x_map=None if self.x_map is None else self.x_map.to_state(),
                          rows=self.pseudo.rows, a=self.pseudo.a, b=self.pseudo.b, shift=float(self.shift),
                          shift0=float(self.shift0), trace_error={k: float(v) for k, v in self.trace_error.items()},
                          w1=self.w1, w0=self.w0)

    @classmethod
    def from_state(cls, state) -> "LowRankFoldArm":
        """Inverse of :meth:`to_state`; every array checked for its type and shape."""
        from ..errors import FormatError
        from ..io import check_schema

        keys = (*cls._ARRAYS, "v_map", "x_map", "rows", "a", "b", "shift", "shift0", "trace_error")
        version = check_schema(state, cls.STATE_SCHEMA, (1, cls.STATE_VERSION),
                               keys=keys if state.get("version") == 1 else (*keys, "w1", "w0"))
        w1, w0 = (None, None) if version == 1 else (state["w1"], state["w0"])
        for name in (*cls._ARRAYS, "rows", "a", "b"):
            if not isinstance(state[name], np.ndarray):
                raise FormatError(f"the stored low-rank fold-arm's {name} is not an array")
        v_map = NystromFeatures.from_state(state["v_map"])
        x_map = None if state["x_map"] is None else NystromFeatures.from_state(state["x_map"])
        n, r = len(state["rows"]), v_map.rank
        if state["Phi"].shape != (n, r) or state["chol"].shape != (r, r) or len(state["Y1"]) != n or \
                len(state["a"]) != n or len(state["b"]) != n:
            raise FormatError("the stored low-rank fold-arm's second-stage arrays disagree in size")
        r0, m = (0 if x_map is None else x_map.rank), len(state["Y0"])
        if state["loadings0"].shape != (m, r) or state["chol0"].shape != (r0, r0) or len(state["X0"]) != m:
            raise FormatError("the stored low-rank fold-arm's first-stage arrays disagree in size")
        for name, w, size in (("w1", w1, n), ("w0", w0, m)):
            if w is not None and not (isinstance(w, np.ndarray) and w.shape == (size,)):
                raise FormatError(f"the stored low-rank fold-arm's sampling weights {name} disagree in size")
        pseudo = PseudoOutcome(rows=state["rows"], a=state["a"], b=state["b"])
        return cls(v_map=v_map, Phi=state["Phi"], chol=state["chol"], shift=float(state["shift"]), pseudo=pseudo,
                   Y1=state["Y1"], X1=state["X1"], x_map=x_map, loadings0=state["loadings0"], X0=state["X0"],
                   chol0=state["chol0"], shift0=float(state["shift0"]), Y0=state["Y0"],
                   atom_units=state["atom_units"], trace_error=dict(state["trace_error"]), w1=w1, w0=w0)


def first_stage_loadings(Phi, x_map, X1, Psi0, chol0, b, w1=None, w0=None, n_threads: int = 0,
                         Psi1=None) -> np.ndarray:
    """Ψ₀M, M = G₀⁻¹ Ψ₁ᵀ diag(b ∘ w₁) Φ (W₀Ψ₀M with weights): c₀(v) = Ψ₀M h(v) on the first-stage atoms.

    Accumulated over blocks of units so that Ψ₁ = ψ(X1) (n × r₀) is never held
    whole, unless the caller has it (``Psi1``); stored as :data:`STORAGE`.
    """
    bw = b if w1 is None else b * w1
    PtB = np.zeros((x_map.rank, Phi.shape[1]))
    for s, B in _blocks(Phi):
        block = x_map(X1[s:s + len(B)], n_threads) if Psi1 is None else Psi1[s:s + len(B)]
        PtB += block.T @ (bw[s:s + len(B), None] * B)
    M = cho_solve((chol0, True), PtB, check_finite=False)
    loadings0 = np.empty((len(Psi0), Phi.shape[1]), dtype=STORAGE)
    for s, B in _blocks(Psi0):
        loadings0[s:s + len(B)] = B @ M if w0 is None else w0[s:s + len(B), None] * (B @ M)
    return loadings0


def _times(F: np.ndarray, h: np.ndarray) -> np.ndarray:
    """F @ h in float64 for a stored array F, a block of rows at a time."""
    out = np.empty((F.shape[0], h.shape[1]))
    for s, B in _blocks(F):
        out[s:s + len(B)] = B @ h
    return out


class LowRankFold(PseudoOutcomeFold):
    """One cross-fitting fold of the low-rank ridge CCME (module docstring).

    The V-kernel's landmarks and features over the fold's second-stage units
    (and the factor of ΦᵀΦ + nλ₁I) are shared by both arms and computed when
    the fold is created; an arm's first stage (landmarks of the X-kernel over
    the arm's units of D0) when the arm is first used.  For one-step each arm
    has its own second stage over its units.
    """

    def __init__(self, params: Parameters, data, fold, seed: int = 0, prebuilt=None):
        self.data, self.fold, self.seed = data, fold, int(seed)
        self.v_kernel, self.x_kernel = params.kernels["v"], params.kernels["x"]
        self.lam0, self.lam1 = params["lam0"], params["lam1"]
        self.lam1_plugin = dict(params.get("lam1_plugin") or {}) if data.mode == "dr" else {}
        self.settings = params["lowrank"]
        self._second_stage = {}  # rows' key -> (v_map, Phi); λ₁ -> factor
        self._factors = {}
        self._first_stage = {}  # arm -> its X features while the arm's terms are built
        if data.mode != "onestep":
            self._features(fold.target, "V")

    def _select(self, X, kernel: Kernel, salt: int):
        s = self.settings
        return NystromFeatures.select(X, kernel, rank_tol=s["rank_tol"], max_rank=s["max_rank"],
                                      pool=s["landmark_pool"], seed=self.seed + salt, n_threads=self.data.n_threads,
                                      dtype=STORAGE)

    @serial_blas
    def _features(self, rows: np.ndarray, key):
        """(φ, Φ = φ(V[rows]), trace error) of the V-kernel over ``rows``, computed once per key."""
        if key not in self._second_stage:
            V = self.data.design.V[rows]
            v_map, Phi = self._select(V, self.v_kernel, salt=1)
            Phi = Phi.astype(STORAGE, copy=False)
            self._second_stage[key] = (v_map, Phi, _trace_error(Phi))
        return self._second_stage[key]

    def _factor(self, key, Phi, shift: float, w=None) -> np.ndarray:
        # the weights are those of the rows behind `key`, so (key, shift) identifies the factor
        if (key, shift) not in self._factors:
            self._factors[(key, shift)] = _gram_chol(Phi, shift, w)
        return self._factors[(key, shift)]

    def release(self, arm: int) -> None:
        self._first_stage.pop(arm, None)  # the X features (m × r) are kept only while the arm's terms are built

    def _first_stage_of(self, arm: int, X0, w0):
        """(φ_X, Ψ₀, factor of Ψ₀ᵀWΨ₀ + s₀I, s₀) of ``arm``'s first stage, formed once per :meth:`arm`."""
        if arm not in self._first_stage:
            x_map, Psi0 = self._select(X0, self.x_kernel, salt=2 + arm)
            Psi0 = Psi0.astype(STORAGE, copy=False)
            shift0 = len(X0) * self.lam0[arm] if w0 is None else float(np.sum(w0)) * self.lam0[arm]
            self._first_stage[arm] = (x_map, Psi0, _gram_chol(Psi0, shift0, w0), shift0)
        return self._first_stage[arm]

    @serial_blas
    def build_arm(self, arm: int, pseudo, lam: float) -> LowRankFoldArm:
        data, fold = self.data, self.fold
        design, Xo = data.design, data.Xo
        A, Y = design.A, design.Y
        rows = pseudo.rows
        key = ("V", arm) if data.mode == "onestep" else "V"
        v_map, Phi, v_error = self._features(rows, key)
        weights = data.sampling_weights
        w1 = None if weights is None else np.ascontiguousarray(weights[rows], dtype=np.float64)
        # s = λ₁ Σ w_i: nλ₁ unweighted, the repeated rows' penalty for frequency weights (module docstring)
        shift = len(rows) * lam if w1 is None else float(np.sum(w1)) * lam
        chol = self._factor(key, Phi, shift, w1)
        trace_error = {"V": v_error}
        if pseudo.has_first_stage:
            rows0 = fold.nuisance[A[fold.nuisance] == arm]
            X0, X1 = Xo[rows0], Xo[rows]
            w0 = None if weights is None else np.ascontiguousarray(weights[rows0], dtype=np.float64)
            x_map, Psi0, chol0, shift0 = self._first_stage_of(arm, X0, w0)
            loadings0 = first_stage_loadings(Phi, x_map, X1, Psi0, chol0, pseudo.b, w1, w0, data.n_threads)
            trace_error["X"] = _trace_error(Psi0)
            del Psi0
            Y0 = Y[rows0]
        else:
            x_map, X1, X0 = None, np.zeros((0, Xo.shape[1])), np.zeros((0, Xo.shape[1]))
            Y0, shift0, chol0 = np.zeros((0, Y.shape[1])), 0.0, np.zeros((0, 0))
            loadings0 = np.zeros((0, Phi.shape[1]), dtype=STORAGE)
            rows0 = np.zeros(0, dtype=np.intp)
            w0 = None if weights is None else np.zeros(0)
        return LowRankFoldArm(v_map=v_map, Phi=Phi, chol=chol, shift=shift, pseudo=pseudo, Y1=Y[rows], X1=X1,
                              x_map=x_map, loadings0=loadings0, X0=X0, chol0=chol0, shift0=shift0, Y0=Y0,
                              atom_units=np.concatenate([rows, rows0]), trace_error=trace_error, w1=w1, w0=w0)
