"""Outcome grids: the one rule for every grid the package lays over the outcome's range.

Densities are drawn, CDFs inverted into quantiles, the outcome bandwidth is
cross-validated and the MMD's RKHS norm is integrated on grids over the
observed outcomes.  Every such grid extends :data:`MARGIN` kernel scales
beyond the data on each side, the kernel scale being the largest read-out
bandwidth in use (doubled for the Laplace kernel, whose tails are heavier).
Beyond six Gaussian scales an atom keeps less than 1e-9 of its mass (the
Laplace kernel at twelve bandwidths less than 1e-5), so normalised CDFs are
0 and 1 at the ends of the grid and densities integrate to one on it.
Only the number of points (or the step) differs between uses, and the
drawing grid (:meth:`ccme.CCMEResult.default_grid`: plots, bands), which
spans the outcomes within Tukey's far-out fences (``bulk=True``,
:func:`ccme.fences.bulk_range`): one outcome a hundred sds out would leave the
bulk between a handful of its 400 points, and the plot flat.  Where nothing
lies beyond the fences it is the same grid.
"""

from __future__ import annotations

import numpy as np

from .errors import DataError, ParameterError
from .fences import bulk_range
from .kernels import Kernel

__all__ = ["MARGIN", "kernel_scale", "outcome_grid"]

#: Kernel scales beyond the observed outcomes on each side of every grid.
MARGIN = 6.0


def kernel_scale(kernels) -> float:
    """The widest reach of the (one-dimensional) outcome kernels: bandwidth, ×2 for Laplace."""
    if isinstance(kernels, Kernel):
        kernels = (kernels,)
    return max(k.bandwidth_array[0] * (2.0 if k.name == "laplace" else 1.0) for k in kernels)


def outcome_grid(Y: np.ndarray, kernels, *, size: int | None = None, step: float | None = None,
                 bulk: bool = False) -> np.ndarray:
    """An increasing grid over the outcomes ``Y`` ± :data:`MARGIN` kernel scales (d_y = 1).

    Parameters
    ----------
    Y : ndarray (n,) or (n, 1)
        The observed outcomes.
    kernels : Kernel or sequence of Kernel
        The outcome kernels whose widest scale sets the margin.
    size : int, optional
        Number of points (``np.linspace``).
    step : float, optional
        Spacing instead of a number of points (``np.arange``; the grid ends
        at the first point at or beyond the upper margin).
    bulk : bool, default False
        Span the outcomes within Tukey's far-out fences (:func:`ccme.fences.bulk_range`) rather than all of them:
        for drawing, not for integrals over the whole law.

    Returns
    -------
    ndarray (G,)

    Raises
    ------
    DataError
        For a multivariate outcome.
    """
    Y = np.asarray(Y)
    if Y.ndim == 2 and Y.shape[1] != 1:
        raise DataError("an outcome grid exists only for a one-dimensional outcome; pass the points `y`")
    y = Y.reshape(-1)
    margin = MARGIN * kernel_scale(kernels)
    low, high = (float(end[0]) for end in bulk_range(y)) if bulk else (y.min(), y.max())
    lo, hi = low - margin, high + margin
    if (size is None) == (step is None):
        raise ValueError("give exactly one of `size` and `step`")
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2):
        raise ParameterError(f"`size` must be an integer >= 2 (the grid's number of points); got {size!r}")
    if size is not None:
        return np.linspace(lo, hi, size)
    return np.arange(lo, hi + step / 2, step)
