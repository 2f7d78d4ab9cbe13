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

__all__ = ["ArmEmbedding", "invert_cdf"]


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
        mass = np.trapezoid(clipped, grid, axis=1)
        # Nothing to rescale: say so rather than return a zero "density".
        empty = _warn_no_mass(mass, "density on `y`", "or `y` outside the outcome's range", "those rows are NaN")
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(empty[:, None], np.nan, clipped / np.where(empty, 1.0, mass)[:, None])

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
        bad = _warn_no_mass(mass, "distribution", "or a very large penalty", "their moments are NaN")
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

    # -- functionals beyond the moments (issue "beyond the density") --------
    def _require_1d(self, what: str) -> None:
        if self.d_y != 1:
            raise DataError(
                f"{what} is defined here for a one-dimensional outcome only (the outcome has {self.d_y} "
                "dimensions); density, mean, mode and sample work for any dimension"
            )

    def quantile(self, V_eval: np.ndarray, q: np.ndarray, grid: np.ndarray) -> np.ndarray:
        """Quantiles of the estimated distribution, shape (n_eval, len(q)); d_y = 1.

        Inverts the normalised CDF of :meth:`cdf` (unit mass, clipped to
        [0, 1], made non-decreasing by its running maximum, so the inverse
        exists even where the signed ridge weights make the raw estimate
        dip): Q(q) = inf{y : F̂(y) ≥ q}, located on the increasing ``grid`` and
        interpolated linearly between the two bracketing grid points (error at
        most one grid step).  Levels below F̂(grid[0]) or above F̂(grid[-1])
        give the grid's end points, so the grid should cover the data with a
        margin.
        """
        self._require_1d("the quantile")
        return invert_cdf(self.cdf(V_eval, grid[:, None], normalize=True), grid, q)

    def mode(self, V_eval: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """The candidate point of highest estimated density for each V-point, shape (n_eval, d_y).

        With the candidates a fine grid (d_y = 1) this is a grid search for the
        mode of p̂(· | v); with observed outcomes as candidates it is the
        empirical mode of the paper's image experiment.
        """
        raw = self.contract(V_eval, candidates, "density")
        return candidates[np.argmax(raw, axis=1)]

    def sample(self, V_eval: np.ndarray, size: int, rng: np.random.Generator, n_candidates: int | None = None):
        """``size`` points per V-point by kernel herding, shape (n_eval, size, d_y).

        Kernel herding (Chen, Welling & Smola, 2010) picks, one at a time,
        x_{t+1} = argmax_x ⟨μ̃, φ(x)⟩ − (1/(t+1)) Σ_{s≤t} k(x, x_s), with μ̃ the
        estimated embedding rescaled to unit mass and k the normalised outcome
        kernel, so ⟨μ̃, φ(x)⟩ is the (signed) density estimate at x.  It greedily
        minimises the MMD between the samples and μ̃ itself, so the negative
        ridge/DR weights act through the target (a region the signed embedding
        down-weights is visited less) instead of being clipped away as in
        sampling from a clipped density.  The maximum runs over candidate
        points drawn (with ``rng``) from the mixture Σ_k |c_k| N(y_k, s²)/Σ|c_k|,
        s² the kernel's variance per dimension, which covers the support of
        both signs of the weights.  Herded points are a deterministic,
        low-discrepancy summary given the candidates, not independent draws.
        """
        atoms, weights = self.weights(V_eval)
        bw = self.y_kernel.bandwidth_array
        scale = np.sqrt(self.y_kernel.variance())
        m = n_candidates if n_candidates is not None else max(2000, 20 * size)
        out = np.empty((len(V_eval), size, self.d_y))
        from . import _backend

        for e in range(len(V_eval)):
            c = weights[:, e]
            if not c.sum() > 0:  # no positive mass: nothing to sample from
                out[e] = np.nan
                continue
            p = np.abs(c) / np.abs(c).sum()
            cand = atoms[rng.choice(len(atoms), size=m, p=p)] + rng.standard_normal((m, self.d_y)) * scale
            target = self.contract(V_eval[e : e + 1], cand, "density")[0] / c.sum()
            pulled = np.zeros(m)  # Σ_{s≤t} k(x, x_s) over the candidates
            for t in range(size):
                j = int(np.argmax(target - pulled / (t + 1)))
                out[e, t] = cand[j]
                # one column per step: a single thread avoids the parallel start-up cost on tiny work
                column = _backend.gram(cand, cand[j : j + 1], self.y_kernel.name, bw, normalized=True, n_threads=1)
                pulled += column[:, 0]
        return out


def invert_cdf(F: np.ndarray, grid: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles of non-decreasing CDF rows ``F`` (shape (..., G)) on ``grid``, shape (..., len(q)).

    Q(q) = inf{y : F(y) ≥ q} located on the grid and interpolated linearly
    between the bracketing grid points; levels at or below F(grid[0]) give
    grid[0], levels above F(grid[-1]) give grid[-1].
    """
    flat = F.reshape(-1, F.shape[-1])
    out = np.empty((len(flat), len(q)))
    for i, row in enumerate(flat):
        k = np.clip(np.searchsorted(row, q, side="left"), 1, len(grid) - 1)
        lo, hi = row[k - 1], row[k]
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.clip(np.where(hi > lo, (q - lo) / (hi - lo), 1.0), 0.0, 1.0)
        out[i] = grid[k - 1] + t * (grid[k] - grid[k - 1])
        out[i, q <= row[0]] = grid[0]
    return out.reshape(F.shape[:-1] + (len(q),))


def _warn_no_mass(mass: np.ndarray, what: str, cause: str, consequence: str) -> np.ndarray:
    """Rows without positive mass (returned as a mask), with one warning that counts them."""
    empty = ~(mass > 0)
    if empty.any():
        warnings.warn(
            f"the estimated {what} has no positive mass at {int(empty.sum())} of {len(mass)} V-points "
            f"(V far outside the data, {cause}); {consequence}",
            CcmeWarning,
            stacklevel=4,
        )
    return empty
