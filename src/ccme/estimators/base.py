"""What every CCME estimator provides to :func:`ccme.fit`.

An estimator is a small object with

- ``name`` (the ``method=`` string), ``title`` (for summaries), ``defaults``
  (documented hyperparameter defaults) and ``aliases`` (one name setting
  several hyperparameters, e.g. ``lam`` → ``lam0`` and ``lam1``);
- ``prepare(options, design=, Xo=, seed=)``: resolve rules (bandwidths, …)
  on the data and validate values; returns a dict that must hold
  ``kernels["y"]``, the normalised outcome kernel;
- ``fit_fold(prepared, mode=, design=, Xo=, fold=, scores_target=, seed=, n_threads=)``:
  a fitted fold whose ``arm(a)`` returns the fold-and-arm estimator with
  ``contract`` and ``weights`` (see :mod:`ccme.estimators`);
- ``describe(prepared, result)``: summary sections, ``[(title, [(label, text), ...]), ...]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..errors import ParameterError

__all__ = ["resolve_options", "FactoredArm", "contract_factored"]


def resolve_options(estimator, hyperparameters: dict) -> dict:
    """The estimator's defaults updated by the user's hyperparameters (aliases expanded)."""
    options = dict(estimator.defaults)
    allowed = set(estimator.defaults) | set(estimator.aliases)
    unknown = sorted(set(hyperparameters) - allowed)
    if unknown:
        raise ParameterError(
            f"unknown hyperparameter(s) {unknown} for method {estimator.name!r}; allowed: {sorted(allowed)}"
        )
    for alias, targets in estimator.aliases.items():
        if alias in hyperparameters:
            clash = [t for t in targets if t in hyperparameters]
            if clash:
                raise ParameterError(f"give either `{alias}` or {clash}, not both")
            for t in targets:
                options[t] = hyperparameters[alias]
    for key in estimator.defaults:
        if key in hyperparameters:
            options[key] = hyperparameters[key]
    return options


#: Bytes of one block of atom features in :func:`contract_factored`.
_BLOCK_BYTES = 64 * 2**20


class FactoredArm(ABC):
    """A fold-and-arm estimator whose weights factor as c(v) = L h(v).

    Over fixed outcome atoms y_k (``atoms``, shape (N, d_y)) the weights are
    a fixed loading matrix ``loadings`` L (N × r) times a coefficient vector
    h(v) ∈ R^r given by :meth:`coefficients`.  The neural estimators have this
    form: Deep Feature with h(v) = (ΨᵀΨ + nλ₁I)⁻¹ψ(v) and L the pseudo-outcome
    coefficients times Ψ (eq. df_density), Neural-Kernel with h(v) = f(v) and
    L = I over the grid points (eq. nk_density).  Subclasses set ``atoms`` and
    ``loadings`` and implement ``coefficients(V_eval) -> (r, n_eval)``.
    """

    atoms: np.ndarray
    loadings: np.ndarray

    @abstractmethod
    def coefficients(self, V_eval):
        """h(v) for each row of ``V_eval``, shape (r, n_eval)."""

    @property
    def n_atoms(self) -> int:
        return self.atoms.shape[0]

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms and their weights c(v) = L h(v), shape (n_atoms, n_eval)."""
        return self.atoms, self.loadings @ self.coefficients(V_eval)

    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × Σ_k c_k(v) F(y_k, point)``, through :func:`contract_factored`."""
        contract_factored(self.atoms, self.loadings, self.coefficients, V_eval, points, feature, y_kernel, out,
                          scale, n_threads)


def contract_factored(atoms, loadings, coefficients, V_eval, points, feature, y_kernel, out, scale, n_threads=0):
    """``out += scale × h(V)ᵀ (Lᵀ F)`` with F the atoms' features at ``points``, in blocks.

    The cheaper association order for weights c(v) = L h(v): first the r × q
    projection LᵀF, accumulated over blocks of atoms and points so that no
    block of F exceeds 64 MiB (F from :func:`ccme._backend.atom_features`),
    then one small product per block of evaluation points.  Cost
    O(N q r + n_eval q r) instead of O(N q n_eval).
    """
    from .. import _backend

    n_atoms, rank = loadings.shape
    q = out.shape[1]
    projected = np.zeros((rank, q))
    if feature == "moments":
        point_blocks = [slice(0, q)]
    else:
        per_block = max(1, min(len(points), _BLOCK_BYTES // 8))
        point_blocks = [slice(p, min(p + per_block, len(points))) for p in range(0, len(points), per_block)]
    for pb in point_blocks:
        width = max(1, pb.stop - pb.start)
        rows = max(1, _BLOCK_BYTES // (8 * width))
        for a0 in range(0, n_atoms, rows):
            F = _backend.atom_features(
                atoms[a0:a0 + rows], points[pb] if feature != "moments" else points, feature, y_kernel.name,
                y_kernel.bandwidth_array, n_threads=n_threads,
            )
            projected[:, pb] += loadings[a0:a0 + rows].T @ F
    n_eval = len(V_eval)
    step = max(1, _BLOCK_BYTES // (8 * max(rank, q)))
    for v0 in range(0, n_eval, step):
        out[v0:v0 + step] += scale * (coefficients(V_eval[v0:v0 + step]).T @ projected)
