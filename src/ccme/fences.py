"""Tukey's far-out fences: the bulk of an outcome or a covariate, for the rules that a few far-out values should not set.

The fences are Q1 − K·IQR and Q3 + K·IQR with K = :data:`FAR_OUT` = 3, the
bounds beyond which Tukey (*Exploratory Data Analysis*, 1977) calls a value
"far out" (R's ``boxplot.stats`` draws the K = 1.5 ones).  A Gaussian value
lies beyond them with probability 2.4e-6 (they are 4.7 standard deviations
from the median); on the accuracy zoo only the two cases with a long right tail
(``spike_tail``, ``nsw_race``) have outcomes beyond them, 1 to 3 of 1000.
Five rules use them:

- the read-out bandwidth's criterion (:func:`ccme.tuning.readout_span`)
  integrates ∫p̂² over the outcomes within the fences and a margin, not
  min(Y)..max(Y), whose quadrature points one outcome at 4000 set 16 apart;
- the location stage (:func:`ccme.location.fit_location`) fits its mean model
  to outcomes clipped to them, so that a least-squares line is not pulled by
  a far-out value; the residuals are still those of the outcomes themselves,
  and the estimate is exact whatever the mean model (:mod:`ccme.location`);
- the median rule for the X and V bandwidths (:func:`ccme.kernels.median_bandwidth`)
  standardises each numeric covariate by :func:`bulk_sd`, its standard
  deviation with the values clipped to the fences: one covariate value at
  10⁴ among 2000 standard normal ones made the plain sd 224, the rule's
  bandwidth 224 times too wide (beyond the ARD search's factor 1/16), and the
  covariate, one of V's, was all but ignored;
- the neural estimators' input map (:class:`ccme.estimators.training.Standardizer`)
  clips each input column at the training inputs' fences (:func:`far_out_fences`)
  before it centres and scales, so that a far-out covariate value enters a
  network at the fence, not as a number hundreds of bandwidths out that the
  ReLU layers pass on linearly (with 0.5% of the paper simulation's covariates
  moved by Cauchy noise of 100 sds, Deep Feature's error was 3 to 6 times its
  clean error, Neural-Kernel's 2.5 to 4; README, "Far-out covariates");
- the drawing grid (:meth:`ccme.CCMEResult.default_grid`: plots, bands) spans
  the outcomes within them (:mod:`ccme.grids`).

The location stage's regressions do *not* clip the covariates: where a far
value is genuine and the mean linear in it, clipping misfits that unit
(measured on ``ihdp_all25``, whose treated mean is linear in 25 covariates
and nnhealth has a few far values: 1.11 of the treated arm's error, 1.27 at
seed 1), and it changed nothing on the far-out covariate benchmark.

With 1% of the paper simulation's outcomes given Cauchy noise (scale 20;
``python benchmarks/accuracy/far_out.py``) the ridge fit's error went from
1.16 / 1.24 times its clean error to 0.93 / 1.01, Deep Feature's (whose
default keeps a location stage) from 1.50 / 0.95 to 0.91 / 0.91.  Spanning the Neural-Kernel grid's regular points over
the bulk instead of min(Y)..max(Y) was measured and not adopted: on the zoo's
long-tailed cases (``spike_tail``, ``nsw_race``, seeds 1-4) it gave 1.10 / 1.19
of the error, the tail beyond the fences being drawn by the end point's one
weight.

The fences cut the range only where at most :data:`FAR_OUT_SHARE` (1%) of
the values lie beyond them: more, and those values are a tail or a second
mass, not a few far-out values (a t₃ law has 1.3% beyond, a lognormal with
σ = 1.5 6%; 300 zeros and 100 values from 1 to 50 have quartiles 0 and 0.25,
and all 100 beyond), and the range is the values' own, as it is where the IQR
is 0.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FAR_OUT", "FAR_OUT_SHARE", "bulk_range", "bulk_sd", "far_out_fences"]

#: Tukey's multiple of the interquartile range beyond the quartiles for "far out" values.
FAR_OUT = 3.0

#: The largest share of values beyond the fences for which they still cut the range (module docstring).
FAR_OUT_SHARE = 0.01


def _columns(Y) -> np.ndarray:
    """``Y`` as a float64 matrix, a vector as one column."""
    Y = np.asarray(Y, dtype=np.float64)
    return Y[:, None] if Y.ndim == 1 else Y


def far_out_fences(Y) -> tuple[np.ndarray, np.ndarray]:
    """Each column's far-out fences (Q1 − 3 IQR, Q3 + 3 IQR), or (−inf, inf) where they do not cut.

    Parameters
    ----------
    Y : ndarray (n,) or (n, d)
        The values the fences are set on (the training inputs of a network, say); later values are clipped at them.

    Returns
    -------
    (ndarray (d,), ndarray (d,))
        The lower and upper fences; ∓inf for a column whose IQR is 0 or with more than :data:`FAR_OUT_SHARE` of
        its values beyond them.

    Examples
    --------
    >>> import numpy as np
    >>> low, high = far_out_fences(np.c_[np.r_[np.arange(1.0, 101.0), 1000.0], np.r_[np.zeros(90), np.ones(11)]])
    >>> low.tolist(), high.tolist()
    ([-124.0, -inf], [226.0, inf])
    """
    Y = _columns(Y)
    q1, q3 = np.quantile(Y, [0.25, 0.75], axis=0)
    spread = FAR_OUT * (q3 - q1)
    beyond = np.mean((Y < q1 - spread) | (Y > q3 + spread), axis=0)
    fenced = (spread > 0) & (beyond <= FAR_OUT_SHARE)
    return np.where(fenced, q1 - spread, -np.inf), np.where(fenced, q3 + spread, np.inf)


def bulk_range(Y) -> tuple[np.ndarray, np.ndarray]:
    """Each column's range cut to Tukey's far-out fences: (max(min, Q1 − 3 IQR), min(max, Q3 + 3 IQR)).

    Parameters
    ----------
    Y : ndarray (n,) or (n, d)

    Returns
    -------
    (ndarray (d,), ndarray (d,))
        The lower and upper ends; a column whose IQR is 0, or with more than :data:`FAR_OUT_SHARE` of its values
        beyond the fences, keeps its minimum and maximum (:func:`far_out_fences`).

    Examples
    --------
    >>> import numpy as np
    >>> y = np.r_[np.arange(1.0, 101.0), 1000.0]
    >>> low, high = bulk_range(y)
    >>> float(low[0]), float(high[0])
    (1.0, 226.0)
    """
    Y = _columns(Y)
    low, high = far_out_fences(Y)
    return np.maximum(Y.min(axis=0), low), np.minimum(Y.max(axis=0), high)


def bulk_sd(Z) -> np.ndarray:
    """Each column's standard deviation with its values clipped at :func:`far_out_fences`.

    Equal to the plain standard deviation (to the last bit) for a column that
    the fences do not cut: one whose values all lie within them, whose IQR is
    0, or with more than :data:`FAR_OUT_SHARE` of its values beyond them.

    Parameters
    ----------
    Z : ndarray (n,) or (n, d)

    Returns
    -------
    ndarray (d,)

    Examples
    --------
    >>> import numpy as np
    >>> z = np.r_[np.arange(1.0, 101.0), 1e6]
    >>> round(float(np.std(z)), 1), round(float(bulk_sd(z)[0]), 1)
    (99004.9, 33.6)
    """
    Z = _columns(Z)
    return np.clip(Z, *far_out_fences(Z)).std(axis=0)
