"""The simulation of the paper's Section "Analysis of Double Robustness".

X ~ N(1₁₀, I₁₀), V = (X1, ..., X5).  Treatment A ~ Bernoulli(π(X)) with
π(X) = 0.1 + 0.8 · 1{X1 ∈ [0, 2] and X6 ≥ 1.5}.  Potential outcomes

    Y⁰ = 1 + Xᵀβ + S + ε,     Y¹ = Y⁰ + 2 + Xᵀγ,
    S = 15 · Bernoulli(logistic(0.5 X1)),  ε ~ N(0, s(X)²),
    s(X) = 0.5 (1 + 0.5 |X1| + 0.3 |X5|),

so Y⁰ is Y¹ with the treatment effect set to zero (paper, Appendix
"Experimental Details"), and both are bimodal.  Given V = v the unobserved
X6..X10 stay N(1, 1), so Y^a | V = v is a two-component normal mixture in
closed form (:func:`paper_simulation_density`).

The simulated truths (Y⁰, Y¹, π(X)) are returned apart from the observed
columns, and only on request (``paper_simulation(n, truth=True)``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

from ..errors import ParameterError

__all__ = ["paper_simulation", "paper_simulation_density", "paper_simulation_ise", "PAPER_PROFILES"]

BETA = np.array([1.0, -0.5, 0.8, -0.7, 0.6, 1.0, 0.3, -0.2, 0.1, -0.3])
GAMMA = np.array([0.8, 0.0, 0.0, 0.6, 0.0, 2.0, 0.4, 0.0, 0.0, 0.2])
SHIFT = 15.0

#: The covariate profiles v1 and v2 of the paper's Section "Qualitative Assessment".
PAPER_PROFILES = pd.DataFrame(
    {
        "x1": [2.2, -0.2],
        "x2": [-0.2, 2.2],
        "x3": [2.2, -0.2],
        "x4": [-0.2, 2.2],
        "x5": [2.2, -0.2],
    },
    index=["v1", "v2"],
)


def _noise_sd(x1, x5):
    return 0.5 * (1.0 + 0.5 * np.abs(x1) + 0.3 * np.abs(x5))


def paper_simulation(n: int, seed=None, *, truth: bool = False):
    """Draw ``n`` units of the paper's simulation.

    Parameters
    ----------
    n : int
        Number of units (positive).
    seed : int, numpy Generator or None, default None
        Seed of :func:`numpy.random.default_rng`.
    truth : bool, default False
        Also return what an analyst never observes.  The same ``seed`` gives
        the same observed data either way.

    Returns
    -------
    data : DataFrame
        The observed columns only: ``y`` (observed outcome), ``a`` (treatment,
        0/1) and ``x1``..``x10``.  So ``"y ~ a | x1 + x2 | ."`` adjusts for
        x3..x10 and nothing else: no potential outcome or true propensity can
        slip into the covariates through ``.``.
    truth : DataFrame, only with ``truth=True``
        On ``data``'s index: the potential outcomes ``y0`` and ``y1`` (``y``
        is ``y1`` where ``a == 1``, ``y0`` elsewhere) and the true propensity
        ``ps`` = P(A = 1 | X).  The exact conditional density is
        :func:`paper_simulation_density`.

    Raises
    ------
    ParameterError
        ``n`` not a positive integer, or ``truth`` not a boolean.

    Examples
    --------
    >>> import ccme
    >>> data = ccme.datasets.paper_simulation(500, seed=1)
    >>> data.shape
    (500, 12)
    >>> data, truth = ccme.datasets.paper_simulation(500, seed=1, truth=True)
    >>> list(truth.columns)
    ['y0', 'y1', 'ps']
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError(f"`n` must be a positive integer; got {n!r}")
    if not isinstance(truth, (bool, np.bool_)):
        raise ParameterError(f"`truth` must be True or False; got {truth!r}")
    rng = np.random.default_rng(seed)
    X = rng.normal(1.0, 1.0, size=(n, 10))
    in_box = (X[:, 0] >= 0.0) & (X[:, 0] <= 2.0) & (X[:, 5] >= 1.5)
    ps = 0.1 + 0.8 * in_box
    a = rng.binomial(1, ps)
    s = SHIFT * rng.binomial(1, expit(0.5 * X[:, 0]))
    eps = rng.standard_normal(n) * _noise_sd(X[:, 0], X[:, 4])
    y0 = 1.0 + X @ BETA + s + eps
    y1 = y0 + 2.0 + X @ GAMMA
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, 11)])
    frame.insert(0, "a", a)
    frame.insert(0, "y", np.where(a == 1, y1, y0))
    if not truth:
        return frame
    return frame, pd.DataFrame({"y0": y0, "y1": y1, "ps": ps}, index=frame.index)


def paper_simulation_density(y, v, arm: int = 1) -> np.ndarray:
    """Exact conditional density p(y^a | V = v) of :func:`paper_simulation`.

    Parameters
    ----------
    y : array (G,)
        Outcome values.
    v : array (5,) or (n_v, 5), or DataFrame with columns x1..x5
        Values of V = (X1, ..., X5).
    arm : {1, 0}, default 1
        1 for Y¹, 0 for Y⁰.

    Returns
    -------
    ndarray (n_v, G)  (or (G,) when ``v`` is a single profile given as 1-D)

    Raises
    ------
    ParameterError
        ``arm`` not 1 or 0, or ``v`` without 5 columns.

    Examples
    --------
    >>> import ccme, numpy as np
    >>> grid = np.linspace(-15, 45, 601)
    >>> p = ccme.datasets.paper_simulation_density(grid, ccme.datasets.PAPER_PROFILES, arm=1)
    >>> p.shape, np.round(np.trapezoid(p, grid, axis=1), 4).tolist()
    ((2, 601), [1.0, 1.0])
    """
    if arm not in (0, 1):
        raise ParameterError(f"`arm` must be 1 or 0; got {arm!r}")
    single = False
    if isinstance(v, pd.DataFrame):
        v = v[[f"x{j}" for j in range(1, 6)]].to_numpy(dtype=float)
    else:
        v = np.asarray(v, dtype=float)
        if v.ndim == 1:
            v, single = v[None, :], True
    if v.shape[1] != 5:
        raise ParameterError(f"`v` must have 5 columns (x1..x5); got shape {v.shape}")
    y = np.asarray(y, dtype=float).ravel()
    coef = BETA + GAMMA if arm == 1 else BETA
    # Given V, the linear part over X6..X10 ~ N(1, I) adds N(Σ coef, ‖coef‖²).
    center = 1.0 + (2.0 if arm == 1 else 0.0) + v @ coef[:5] + coef[5:].sum()
    sd = np.sqrt(np.sum(coef[5:] ** 2) + _noise_sd(v[:, 0], v[:, 4]) ** 2)
    p = expit(0.5 * v[:, 0])
    dens = (1.0 - p)[:, None] * norm.pdf(y[None, :], center[:, None], sd[:, None]) + p[:, None] * norm.pdf(
        y[None, :], center[:, None] + SHIFT, sd[:, None]
    )
    return dens[0] if single else dens


def paper_simulation_ise(res, *, arm: int = 1, n_test: int = 1000, grid=None, seed=0) -> float:
    """Mean integrated squared error of a fit on :func:`paper_simulation` data.

    Mean over ``n_test`` fresh draws V ~ N(1₅, I₅) of ∫ (p̂(y | V) − p(y | V))² dy,
    computed by the trapezoid rule on ``grid`` (default: 1000 points over
    [min(Y) − 2, max(Y) + 2] of the training outcomes, as the paper's
    evaluation), with the estimate normalised on that grid.

    Parameters
    ----------
    res : CCMEResult
        A fit on :func:`paper_simulation` data with V = x1..x5.
    arm : {1, 0}, default 1
        The arm whose density is scored.
    n_test : int, default 1000
        Number of V-points drawn.
    grid : ndarray (G,) or None, default None
        Increasing outcome grid; None: the paper's grid above.
    seed : int, numpy Generator or None, default 0
        Seed of the V-points drawn.

    Returns
    -------
    float

    Raises
    ------
    ParameterError
        A fit that does not condition on V = x1..x5.

    Examples
    --------
    >>> import ccme
    >>> data = ccme.datasets.paper_simulation(300, seed=1)
    >>> res = ccme.fit("y ~ a | x1 + x2 + x3 + x4 + x5 | .", data, tune="none", seed=1)
    >>> ise = ccme.datasets.paper_simulation_ise(res, arm=1, n_test=50)
    >>> type(ise).__name__, ise > 0
    ('float', True)
    """
    if tuple(res.design.v_variables) != tuple(f"x{j}" for j in range(1, 6)):
        raise ParameterError("the fit must condition on V = x1..x5 of paper_simulation data")
    if grid is None:
        grid = np.linspace(res.design.Y.min() - 2.0, res.design.Y.max() + 2.0, 1000)
    V = np.random.default_rng(seed).normal(1.0, 1.0, size=(n_test, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    estimate = res.density(grid, newdata=newdata, arm=arm)
    truth = paper_simulation_density(grid, V, arm=arm)
    return float(np.mean(np.trapezoid((estimate - truth) ** 2, grid, axis=1)))
