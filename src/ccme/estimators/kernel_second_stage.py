"""The exact kernel ridge second stage shared by the ridge fold-arms (kernel ridge or forest first stage).

Both fold-arms hold the Cholesky factor L_V of K_V + sI over their
second-stage units V1, s = nλ₁ (+ jitter), and compute β(v) = (K_V + sI)⁻¹ k_V(v)
in the compiled core.  This module owns what follows from that factor alone:
the in-sample residuals (I − H)P of the smoother, and the same second stage
refitted with narrower V bandwidths (:meth:`KernelRidgeSecondStage.undersmoothed`,
for the simultaneous bands of :mod:`ccme.bootstrap`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.linalg.lapack import dtrtri

from .. import _backend
from ..errors import NumericalError
from ..kernels import Kernel
from ..memory import check_allocation
from .base import LinearSecondStage

__all__ = ["KernelRidgeSecondStage", "guarded_factor"]


def guarded_factor(Z, kernel: Kernel, shift: float, n_threads: int, what: str):
    """:func:`ccme._backend.kernel_ridge_factor` after checking that its n × n factor fits in memory."""
    n = len(Z)
    check_allocation(8.0 * n * n, f"{what} ({n} × {n})")
    return _backend.kernel_ridge_factor(Z, kernel.name, kernel.bandwidth_array, shift, n_threads=n_threads)


class KernelRidgeSecondStage(LinearSecondStage):
    """A :class:`LinearSecondStage` whose second stage is exact kernel ridge regression on V.

    A frozen dataclass with the fields ``L_V``, ``V1``, ``v_kernel``,
    ``shift`` and ``jitter`` (``jitter["V"]``: the part of ``shift`` the
    factorisation added); its ``__post_init__`` builds the compiled core from
    them, so :func:`dataclasses.replace` gives a consistent fold-arm.
    """

    def residual_features(self, P: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − H) P = s (K_V + sI)⁻¹ P, H = K_V (K_V + sI)⁻¹ the second stage's hat matrix."""
        return self.shift * _backend.cholesky_solve(self.L_V, P, n_threads)

    def leverages(self, n_threads: int = 0) -> np.ndarray:
        """H_ii = 1 − s [(K_V + sI)⁻¹]_ii, the inverse's diagonal from the factor: Σ_k (L⁻¹)_ki² (n³/3 flops)."""
        L_inv, info = dtrtri(self.L_V, lower=1)
        if info != 0:
            raise NumericalError(f"the second stage's Cholesky factor could not be inverted (LAPACK info {info})")
        return 1.0 - self.shift * np.einsum("ki,ki->i", L_inv, L_inv)

    def undersmoothed(self, factor: float, penalty_factor: float, V_units: np.ndarray,
                      n_threads: int = 0, cache=None, restore=None) -> "KernelRidgeSecondStage":
        """This fold-arm refactored at the V bandwidths × ``factor`` and λ₁ × ``penalty_factor``; units and first stage kept.

        ``restore`` first gives the ignored V columns those bandwidths
        (:meth:`ccme.kernels.Kernel.restored`).  ``V_units`` is not needed:
        the fold-arm keeps V1.  One n × n Cholesky factorisation
        (memory-checked), with the same jitter rule.
        """
        kernel = (self.v_kernel if restore is None else self.v_kernel.restored(restore)).narrowed(factor)
        penalty = (self.shift - self.jitter.get("V", 0.0)) * penalty_factor  # nλ₁ without the old jitter, scaled
        L_V, jitter = guarded_factor(self.V1, kernel, penalty, n_threads,
                                     "the undersmoothed second-stage Cholesky factor of K_V + nλ₁I")
        return replace(self, L_V=L_V, v_kernel=kernel, shift=penalty + jitter, jitter={**self.jitter, "V": jitter})
