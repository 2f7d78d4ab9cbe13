"""The fitted conditional counterfactual mean embedding of one arm, and its functionals.

Every estimator represents μ̂_{Y^a|V}(v) as a weighted sum of outcome feature
maps, Σ_k c_k(v) φ(y_k); with K-fold cross-fitting the arm's embedding is the
average of the K fold embeddings.  Each functional below is one contraction
of the weights c(v) with a per-atom feature F(y_k, ·) (see
:mod:`ccme.estimators`), written once here for every estimator:

- density  p̂(y | v) = ⟨μ̂(v), φ(y)⟩ = Σ_k c_k(v) k_Y(y, y_k), with k_Y
  normalised (paper, Section "Application to Conditional Counterfactual
  Density Estimation");
- CDF      F̂(y | v) = Σ_k c_k(v) K_Y(y − y_k), K_Y the kernel's CDF;
- moments  mass Σ_k c_k(v), mean Σ_k c_k y_k / mass, and variance
  Σ_k c_k (y_k² + s²) / mass − mean², s² the kernel's variance.

The weights of a ridge fit are shrunk (and for DR partly negative), so the
raw estimate need not be a proper density: ``normalize=True`` clips it at
zero and rescales it to integrate to one on the grid, as the paper's
reference code does; moments are taken of the signed measure rescaled to
unit mass.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from .errors import CcmeWarning, DataError
from .kernels import Kernel

__all__ = ["ArmEmbedding"]


class ArmEmbedding:
    """μ̂_{Y^a|V} for one arm: the average of its fold embeddings.

    Parameters
    ----------
    parts : list or callable
        One fitted estimator per cross-fitting fold (see :mod:`ccme.estimators`),
        or a function returning that list, called once on first use (under a
        lock, so that concurrent first uses build it once).
    y_kernel : Kernel
        The normalised outcome kernel.
    """

    def __init__(self, parts, y_kernel: Kernel, n_threads: int = 0):
        self._parts = None if callable(parts) else list(parts)
        self._build = parts if callable(parts) else None
        self._lock = threading.Lock()
        self.y_kernel = y_kernel
        self.n_threads = n_threads

    @property
    def parts(self) -> list:
        if self._parts is None:
            with self._lock:
                if self._parts is None:
                    self._parts = list(self._build())
        return self._parts

    @property
    def d_y(self) -> int:
        return len(self.y_kernel.bandwidth)

    def contract(self, V_eval: np.ndarray, points: np.ndarray, feature: str) -> np.ndarray:
        """Σ over folds of (1/K) Σ_k c_k(v) F(y_k, point), shape (n_eval, n_features)."""
        n_features = 1 + 2 * self.d_y if feature == "moments" else len(points)
        out = np.zeros((len(V_eval), n_features))
        scale = 1.0 / len(self.parts)
        for part in self.parts:
            part.contract(V_eval, points, feature, self.y_kernel, out, scale, n_threads=self.n_threads)
        return out

    def weights(self, V_eval: np.ndarray):
        """All folds' atoms and weights (already divided by K): (atoms (N, d_y), c (N, n_eval))."""
        atoms, weights = zip(*(part.weights(V_eval, n_threads=self.n_threads) for part in self.parts))
        return np.vstack(atoms), np.vstack(weights) / len(self.parts)

    # -- functionals -------------------------------------------------------
    def density(self, V_eval: np.ndarray, y: np.ndarray, normalize: bool = True) -> np.ndarray:
        """p̂(y | v) on the points ``y`` (G, d_y) for each row of ``V_eval``."""
        raw = self.contract(V_eval, y, "density")
        if not normalize:
            return raw
        clipped = np.maximum(raw, 0.0)
        if self.d_y > 1:
            return clipped  # an arbitrary point set is no quadrature grid: clip only
        grid = y[:, 0]
        if len(grid) < 2 or np.any(np.diff(grid) <= 0):
            raise DataError(
                "normalize=True rescales the density to integrate to one on `y`, which needs an increasing "
                "grid of at least two points; sort `y` or pass normalize=False"
            )
        mass = np.trapezoid(clipped, grid, axis=1) if hasattr(np, "trapezoid") else np.trapz(clipped, grid, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(mass[:, None] > 0, clipped / mass[:, None], 0.0)

    def cdf(self, V_eval: np.ndarray, y: np.ndarray, normalize: bool = True) -> np.ndarray:
        """F̂(y | v) = P̂(Y^a ≤ y | V = v), closed form for the Gaussian and Laplace kernels."""
        raw = self.contract(V_eval, y, "cdf")
        if not normalize:
            return raw
        mass = self.moments(V_eval)[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = np.clip(raw / mass[:, None], 0.0, 1.0)
        if self.d_y == 1:
            # Negative weights can make the raw CDF dip; report its running
            # maximum along increasing y so that the result is a CDF.
            order = np.argsort(y[:, 0], kind="stable")
            monotone = np.maximum.accumulate(scaled[:, order], axis=1)
            scaled = np.empty_like(monotone)
            scaled[:, order] = monotone
        return scaled

    def moments(self, V_eval: np.ndarray):
        """(mass (n,), mean (n, d_y), variance (n, d_y)) of the estimated distribution."""
        d = self.d_y
        raw = self.contract(V_eval, np.zeros((0, d)), "moments")
        mass = raw[:, 0]
        bad = ~(mass > 0)
        if bad.any():
            warnings.warn(
                f"the estimated distribution has no positive mass at {int(bad.sum())} of {len(mass)} V-points "
                "(V far outside the data, or a very large penalty); their moments are NaN",
                CcmeWarning,
                stacklevel=3,
            )
            mass = np.where(bad, np.nan, mass)
        mean = raw[:, 1 : 1 + d] / mass[:, None]
        second = raw[:, 1 + d :] / mass[:, None] + self.y_kernel.variance()[None, :]
        var = second - mean**2
        negative = var < 0
        if negative.any():
            # The DR weights are signed: with weak overlap the second-moment
            # estimate can fall below the squared mean.  Say so; never report 0.
            warnings.warn(
                f"the estimated variance is negative at {int(negative.any(axis=1).sum())} V-point(s) "
                "(signed weights under weak overlap); reported as NaN",
                CcmeWarning,
                stacklevel=3,
            )
            var = np.where(negative, np.nan, var)
        return mass, mean, var
