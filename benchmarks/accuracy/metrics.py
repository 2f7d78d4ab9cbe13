"""The zoo's metric: mean over V-points of the integrated squared error ∫ (p̂ − p)² dy on a fine grid.

The grid covers every truth component at the evaluation points to ±7
standard deviations and the observed outcomes' range widened by 5% on each
side (so an estimate that puts mass where the data are is not truncated).
The estimate is normalised on the grid: ``res.density`` does that for a
univariate outcome; for a bivariate one, whose density ccme only clips at
zero, :func:`normalise_2d` rescales each row to integrate to one on the 2-D
grid.  Integrals are trapezoid sums.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OutcomeGrid", "outcome_grid", "ise", "normalise_2d", "weighted_kde"]

_trapz = getattr(np, "trapezoid", None) or np.trapz


class OutcomeGrid:
    """A 1-D grid (``axes`` = [g]) or a 2-D product grid (``axes`` = [g1, g2]); ``points`` as ccme takes them."""

    def __init__(self, axes):
        self.axes = [np.asarray(a, dtype=float) for a in axes]

    @property
    def dim(self) -> int:
        return len(self.axes)

    @property
    def points(self) -> np.ndarray:
        if self.dim == 1:
            return self.axes[0]
        g1, g2 = np.meshgrid(*self.axes, indexing="ij")
        return np.column_stack([g1.ravel(), g2.ravel()])

    def integrate(self, values: np.ndarray) -> np.ndarray:
        """∫ values dy for each row of ``values`` (n_v, G)."""
        values = np.asarray(values, dtype=float)
        if self.dim == 1:
            return _trapz(values, self.axes[0], axis=1)
        shaped = values.reshape(values.shape[0], self.axes[0].size, self.axes[1].size)
        return _trapz(_trapz(shaped, self.axes[1], axis=2), self.axes[0], axis=1)


def outcome_grid(case, data, v_points, size: int | None = None, z: float = 7.0) -> OutcomeGrid:
    """The evaluation grid of ``case`` for training ``data`` and V-points ``v_points``."""
    if size is None:
        size = 1000 if case.dim_y == 1 else 90
    lim = np.stack([case.mixture(v_points, arm).limits(z=z) for arm in (0, 1)])  # (2, d, 2)
    lo, hi = lim[:, :, 0].min(axis=0), lim[:, :, 1].max(axis=0)
    Y = data[case.outcome_columns].to_numpy(dtype=float)
    span = Y.max(axis=0) - Y.min(axis=0)
    lo = np.minimum(lo, Y.min(axis=0) - 0.05 * span)
    hi = np.maximum(hi, Y.max(axis=0) + 0.05 * span)
    return OutcomeGrid([np.linspace(a, b, size) for a, b in zip(lo, hi)])


def normalise_2d(values: np.ndarray, grid: OutcomeGrid) -> np.ndarray:
    """Clip at zero and rescale each row to integrate to one on the grid (rows of zero mass stay zero)."""
    values = np.clip(np.asarray(values, dtype=float), 0.0, None)
    mass = grid.integrate(values)
    return np.divide(values, mass[:, None], out=np.zeros_like(values), where=mass[:, None] > 0)


def ise(estimate: np.ndarray, truth: np.ndarray, grid: OutcomeGrid) -> np.ndarray:
    """∫ (p̂ − p)² dy per V-point (n_v,)."""
    return grid.integrate((np.asarray(estimate) - np.asarray(truth)) ** 2)


def weighted_kde(Y: np.ndarray, weights: np.ndarray, grid: OutcomeGrid) -> np.ndarray:
    """A weighted Gaussian KDE on the grid, (G,): bandwidth by Silverman's rule (d = 1) or Scott's (d = 2).

    The sample size in the rules is Kish's effective size (Σw)² / Σw²; the
    scale is the weighted standard deviation (d = 1: the smaller of it and the
    weighted IQR / 1.349, as Silverman's robust rule).
    """
    Y = np.asarray(Y, dtype=float).reshape(len(weights), -1)
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    n_eff = 1.0 / np.sum(w**2)
    mean = w @ Y
    sd = np.sqrt(w @ (Y - mean) ** 2)
    d = Y.shape[1]
    if d == 1:
        order = np.argsort(Y[:, 0])
        cum = np.cumsum(w[order])
        q25, q75 = np.interp([0.25, 0.75], cum, Y[order, 0])
        scale = min(sd[0], (q75 - q25) / 1.349) if q75 > q25 else sd[0]
        h = np.array([0.9 * scale * n_eff ** (-0.2)])
    else:
        h = sd * n_eff ** (-1.0 / (d + 4))
    P = grid.points.reshape(-1, d)
    out = np.zeros(P.shape[0])
    for start in range(0, len(w), 2000):
        block = slice(start, start + 2000)
        u = (P[:, None, :] - Y[None, block, :]) / h
        out += np.exp(-0.5 * np.sum(u**2, axis=2)) @ w[block]
    return out / np.prod(np.sqrt(2 * np.pi) * h)
