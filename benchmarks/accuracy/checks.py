"""Checks of the zoo's exact truths against its own data-generating code (used by the tests).

:func:`bin_zscores` compares m Monte-Carlo draws of Y^a | V = v with the exact
mixture: 40 bins with exact probabilities 1/40 each (edges at the mixture's
quantiles), z_b = (p̂_b − p_b) / sqrt(p_b (1 − p_b) / m).  For a bivariate
outcome the same is done on the projections uᵀY for u = e1, e2,
(e1 ± e2)/√2, whose laws are exact univariate mixtures (Cramér–Wold).
"""

from __future__ import annotations

import numpy as np

from ._base import Mixture

__all__ = ["bin_zscores", "project", "quantiles", "total_mass"]

_trapz = getattr(np, "trapezoid", None) or np.trapz

_R2 = np.sqrt(0.5)
DIRECTIONS = np.array([[1.0, 0.0], [0.0, 1.0], [_R2, _R2], [_R2, -_R2]])


def project(mix: Mixture, u) -> Mixture:
    """The exact law of uᵀY for each V-point."""
    u = np.asarray(u, dtype=float)
    means = mix.means @ u
    var = np.einsum("i,vkij,j->vk", u, mix.covs, u)
    return Mixture(mix.weights, means[:, :, None], var[:, :, None, None])


def quantiles(mix: Mixture, probs, row: int = 0, size: int = 2001) -> np.ndarray:
    """Approximate quantiles of a univariate mixture (row ``row``): its exact CDF inverted on a grid.

    Only bin edges come from here; :func:`bin_zscores` computes the bins' exact
    probabilities at whatever edges these are.
    """
    one = Mixture(mix.weights[[row]], mix.means[[row]], mix.covs[[row]])
    lo, hi = one.limits(z=9.0)[0]
    grid = np.linspace(lo, hi, size)
    F = one.cdf(grid)[0]
    return np.interp(probs, F, grid)


def bin_zscores(mix: Mixture, draws: np.ndarray, n_bins: int = 40) -> np.ndarray:
    """z-scores of the n_bins equiprobable bins of the one-row univariate mixture ``mix``."""
    draws = np.asarray(draws, dtype=float).ravel()
    inner = quantiles(mix, np.arange(1, n_bins) / n_bins)
    edges = np.concatenate([[-np.inf], inner, [np.inf]])
    p = np.diff(np.concatenate([[0.0], mix.cdf(inner)[0], [1.0]]))
    counts = np.histogram(draws, bins=edges)[0]
    m = draws.size
    return (counts / m - p) / np.sqrt(p * (1 - p) / m)


def total_mass(mix: Mixture, size: int = 2001) -> np.ndarray:
    """∫ p dy of each row on a grid over its components ± 10 sd (trapezoid; 2-D: product grid)."""
    out = []
    for row in range(len(mix)):
        one = Mixture(mix.weights[[row]], mix.means[[row]], mix.covs[[row]])
        lim = one.limits(z=10.0)
        if mix.dim == 1:
            g = np.linspace(*lim[0], size)
            out.append(_trapz(one.density(g)[0], g))
        else:
            g1, g2 = (np.linspace(*lim[j], 601) for j in range(2))
            P = np.column_stack([a.ravel() for a in np.meshgrid(g1, g2, indexing="ij")])
            dens = one.density(P)[0].reshape(g1.size, g2.size)
            out.append(_trapz(_trapz(dens, g2, axis=1), g1))
    return np.array(out)
