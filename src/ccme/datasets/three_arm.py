"""A three-arm (placebo / low / high dose) simulation with exact conditional truth.

Covariates X = (X1, ..., X5) ~ N(0, I₅); V = (X1, X2) is the conditioning
set and C = (X3, X4, X5) the confounders outside V.  The treatment A takes
the levels ``"placebo"``, ``"low"``, ``"high"`` (an ordered pandas
Categorical) with the multinomial-logit generalised propensities

    p_a(X) = exp(η_a) / (exp(η_placebo) + exp(η_low) + exp(η_high)),
    η_placebo = 0,
    η_low  = 0.05 + 0.10 X1 + 0.35 X4,
    η_high = −0.10 X2 + 0.35 X3 + 0.20 X5.

All three lie in [0.1, 0.8] for about 99.9 % of the units (overlap; the
smallest in 400 000 draws is about 0.04), and the arms get about 32 %, 35 %
and 33 % of the units.  With μ(V) = 0.8 X1 − 0.4 X2 and ε, ζ ~ N(0, 1)
independent of X, the potential outcomes are

    Y^placebo = μ(V)       − 0.8 X3 − 0.8 X4 − 0.4 X5 + 0.5 ε,
    Y^low     = μ(V) + 1.0 − 0.4 X3 + 1.0 X4 − 0.3 X5 + 0.7 √(1 + X1²) ε,
    Y^high    = μ(V) + 1.5 + 0.8 X5 + 3 D + 0.5 ε,
    D = 1{−0.4 + X2 + 1.2 X3 + ζ > 0},

so placebo is Gaussian, low a shifted Gaussian whose spread grows with |X1|,
and high a two-mode mixture whose second mode (D = 1) gets more weight as X2
grows.  Every confounder moves both the treatment and an outcome (X3 the
high arm's mode, X4 and X5 the means), so the arm-wise regression of Y on V
alone is biased (by about +0.2, +0.3 and +0.3 in the three arms' means, and
the high arm's mode weight by +0.04) and a doubly robust fit is needed.

Given V = v the confounders stay N(0, I₃) and integrate out in closed form
(:func:`three_arm_density`; no Monte Carlo): a linear-Gaussian term c·C adds
N(0, ‖c‖²) to the noise, and P(D = 1 | V = v) = Φ((v₂ − 0.4) / √(1 + 1.2²)):

    Y^placebo | v ~ N(μ(v), 0.5² + 1.44),
    Y^low     | v ~ N(μ(v) + 1, 0.7² (1 + v₁²) + 1.25),
    Y^high    | v ~ (1 − w(v)) N(μ(v) + 1.5, 0.5² + 0.64)
                    + w(v) N(μ(v) + 4.5, 0.5² + 0.64),  w(v) = Φ((v₂ − 0.4) / √2.44).

(The high arm's linear term leaves X3 out so that D and the Gaussian part
stay independent given V; otherwise the components would be skew-normal.)
The arms share ε: their joint law is not identified and does not enter
p(Y^a | V).

One arm against the rest: the data need nothing more.  A binary fit of
``a == "high"`` against the other two arms, e.g. with
``data.assign(a=np.where(data["a"] == "high", "high", "rest"))`` and
``treated="high"``, has Y = Y^high on its treated side and propensity
p_high(X), so its treated arm targets the same p(Y^high | V) as the
three-arm fit (and :func:`three_arm_ise` scores it with ``arm="high"``).
Its other side, "rest", is the two remaining arms mixed with X-dependent
weights: no arm of this module's truth.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import softmax
from scipy.stats import norm

from ..errors import ParameterError

__all__ = ["three_arm_simulation", "three_arm_density", "three_arm_ise", "THREE_ARM_PROFILES", "THREE_ARM_LEVELS"]

#: The treatment's levels, in dose order (the categories of the ``a`` column).
THREE_ARM_LEVELS = ("placebo", "low", "high")

# Multinomial logit (placebo is the reference, η = 0): intercept and coefficients on X1..X5.
_LOGIT_INTERCEPT = np.array([0.0, 0.05, 0.0])
_LOGIT_COEF = np.array(
    [
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [0.10, 0.0, 0.0, 0.35, 0.0],
        [0.0, -0.10, 0.35, 0.0, 0.20],
    ]
)
_MU_V = np.array([0.8, -0.4])  # μ(V), common to the arms
_ARM_SHIFT = np.array([0.0, 1.0, 1.5])
# Linear effect of the confounders X3..X5 on each arm.  The high arm's leaves
# X3 out because X3 drives its mode indicator D (see the module docstring).
_CONFOUNDER_COEF = np.array(
    [
        [-0.8, -0.8, -0.4],
        [-0.4, 1.0, -0.3],
        [0.0, 0.0, 0.8],
    ]
)
_NOISE_SD = 0.5  # placebo and high; low: _LOW_NOISE · √(1 + X1²)
_LOW_NOISE = 0.7
_MODE_GAP = 3.0  # distance between the high arm's two modes
_MODE_INTERCEPT, _MODE_X2, _MODE_X3 = -0.4, 1.0, 1.2  # D = 1{-0.4 + X2 + 1.2 X3 + ζ > 0}

#: Three V-profiles (x1, x2): the high arm's second mode weighs about 0.18, 0.40 and 0.65.
THREE_ARM_PROFILES = pd.DataFrame({"x1": [-1.0, 0.0, 1.5], "x2": [-1.0, 0.0, 1.0]}, index=["v1", "v2", "v3"])


def _check_arm(arm) -> int:
    if not isinstance(arm, str) or arm not in THREE_ARM_LEVELS:
        raise ParameterError(f"`arm` must be one of {', '.join(map(repr, THREE_ARM_LEVELS))}; got {arm!r}")
    return THREE_ARM_LEVELS.index(arm)


def _covariates(rng, n: int, v=None) -> np.ndarray:
    """X ~ N(0, I₅) (n, 5); with ``v`` the columns of V = (X1, X2) are set to it (the draw given V = v)."""
    X = rng.standard_normal((n, 5))
    if v is not None:
        X[:, :2] = v
    return X


def _propensities(X: np.ndarray) -> np.ndarray:
    """The generalised propensities P(A = a | X), (n, 3) in the order of THREE_ARM_LEVELS."""
    return softmax(_LOGIT_INTERCEPT + X @ _LOGIT_COEF.T, axis=1)


def _potential_outcomes(X: np.ndarray, rng) -> np.ndarray:
    """Y^placebo, Y^low, Y^high (n, 3) at the covariates X, drawing ε and ζ from ``rng``."""
    n = X.shape[0]
    eps = rng.standard_normal(n)
    zeta = rng.standard_normal(n)
    x1, x2, x3 = X[:, 0], X[:, 1], X[:, 2]
    linear = (X[:, :2] @ _MU_V)[:, None] + _ARM_SHIFT + X[:, 2:] @ _CONFOUNDER_COEF.T
    mode = _MODE_INTERCEPT + _MODE_X2 * x2 + _MODE_X3 * x3 + zeta > 0.0
    noise_sd = np.column_stack([np.full(n, _NOISE_SD), _LOW_NOISE * np.sqrt(1.0 + x1**2), np.full(n, _NOISE_SD)])
    Y = linear + noise_sd * eps[:, None]
    Y[:, 2] += _MODE_GAP * mode
    return Y


def _conditional_draw(v, n: int, seed=None) -> np.ndarray:
    """``n`` draws of (Y^placebo, Y^low, Y^high) given V = v, through the simulator's own code path.

    Only the confounders and the noise are drawn: what :func:`three_arm_density`
    integrates out analytically, so that comparing the two checks that integration.
    """
    rng = np.random.default_rng(seed)
    return _potential_outcomes(_covariates(rng, n, np.asarray(v, dtype=float)), rng)


def _mixture(v: np.ndarray, k: int):
    """Weights, means and standard deviations (each (m, 2)) of Y^arm | V = v as a two-component normal mixture."""
    center = v @ _MU_V + _ARM_SHIFT[k]
    spread = np.sum(_CONFOUNDER_COEF[k] ** 2)  # c·C with C ~ N(0, I₃) adds N(0, ‖c‖²)
    noise = _LOW_NOISE**2 * (1.0 + v[:, 0] ** 2) if k == 1 else np.full(len(v), _NOISE_SD**2)
    sd = np.sqrt(noise + spread)
    if k == 2:
        # -0.4 + v2 + 1.2 X3 + ζ ~ N(-0.4 + v2, 1 + 1.2²) given V = v
        w = norm.cdf((_MODE_INTERCEPT + _MODE_X2 * v[:, 1]) / np.sqrt(1.0 + _MODE_X3**2))
        gap = _MODE_GAP
    else:
        w, gap = np.zeros(len(v)), 0.0
    weights = np.column_stack([1.0 - w, w])
    means = np.column_stack([center, center + gap])
    return weights, means, np.column_stack([sd, sd])


def three_arm_simulation(n: int, seed=None, *, truth: bool = False):
    """Draw ``n`` units of the three-arm (placebo / low / high) simulation.

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
        a pandas Categorical with the ordered categories ``"placebo"``,
        ``"low"``, ``"high"``) and ``x1``..``x5``.  So ``"y ~ a | x1 + x2 | ."``
        adjusts for the confounders x3..x5 and nothing else.
    truth : DataFrame, only with ``truth=True``
        On ``data``'s index: the potential outcomes ``y_placebo``, ``y_low``,
        ``y_high`` (``y`` is the one of the observed arm) and the generalised
        propensities ``p_placebo``, ``p_low``, ``p_high`` = P(A = a | X),
        which sum to one.  The exact conditional density is
        :func:`three_arm_density`.

    Raises
    ------
    ParameterError
        ``n`` not a positive integer, or ``truth`` not a boolean.

    Examples
    --------
    >>> import ccme
    >>> data = ccme.datasets.three_arm_simulation(500, seed=1)
    >>> data.shape, list(data["a"].cat.categories)
    ((500, 7), ['placebo', 'low', 'high'])
    >>> data, truth = ccme.datasets.three_arm_simulation(500, seed=1, truth=True)
    >>> list(truth.columns)
    ['y_placebo', 'y_low', 'y_high', 'p_placebo', 'p_low', 'p_high']
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError(f"`n` must be a positive integer; got {n!r}")
    if not isinstance(truth, (bool, np.bool_)):
        raise ParameterError(f"`truth` must be True or False; got {truth!r}")
    rng = np.random.default_rng(seed)
    X = _covariates(rng, n)
    P = _propensities(X)
    # A by inversion of one uniform: code 0, 1, 2 where u falls in the cumulative propensities.
    u = rng.random(n)
    codes = (u > P[:, 0]).astype(np.int8) + (u > P[:, 0] + P[:, 1])
    Y = _potential_outcomes(X, rng)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, 6)])
    frame.insert(0, "a", pd.Categorical.from_codes(codes, categories=list(THREE_ARM_LEVELS), ordered=True))
    frame.insert(0, "y", Y[np.arange(n), codes])
    if not truth:
        return frame
    hidden = pd.DataFrame(
        np.column_stack([Y, P]),
        columns=[f"y_{arm}" for arm in THREE_ARM_LEVELS] + [f"p_{arm}" for arm in THREE_ARM_LEVELS],
        index=frame.index,
    )
    return frame, hidden


def three_arm_density(y, v, arm) -> np.ndarray:
    """Exact conditional density p(y^arm | V = v) of :func:`three_arm_simulation`.

    Parameters
    ----------
    y : array (G,)
        Outcome values.
    v : array (2,) or (m, 2), or DataFrame with columns x1 and x2
        Values of V = (X1, X2).
    arm : {'placebo', 'low', 'high'}
        The treatment level.

    Returns
    -------
    ndarray (m, G)  (or (G,) when ``v`` is a single profile given as 1-D)

    Raises
    ------
    ParameterError
        ``arm`` not one of the levels, or ``v`` without 2 columns (x1, x2) or not finite.

    Examples
    --------
    >>> import ccme, numpy as np
    >>> grid = np.linspace(-10, 15, 1001)
    >>> p = ccme.datasets.three_arm_density(grid, ccme.datasets.THREE_ARM_PROFILES, arm="high")
    >>> p.shape, np.round(np.trapezoid(p, grid, axis=1), 4).tolist()
    ((3, 1001), [1.0, 1.0, 1.0])
    """
    k = _check_arm(arm)
    single = False
    if isinstance(v, pd.DataFrame):
        missing = [name for name in ("x1", "x2") if name not in v.columns]
        if missing:
            raise ParameterError(f"`v` must have the columns x1 and x2; it lacks {', '.join(missing)}")
        v = v[["x1", "x2"]].to_numpy(dtype=float)
    else:
        v = np.asarray(v, dtype=float)
        if v.ndim == 1:
            v, single = v[None, :], True
    if v.ndim != 2 or v.shape[1] != 2:
        raise ParameterError(f"`v` must have 2 columns (x1, x2); got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ParameterError("`v` must be finite")
    y = np.asarray(y, dtype=float).ravel()
    weights, means, sds = _mixture(v, k)
    dens = np.zeros((len(v), len(y)))
    for j in range(weights.shape[1]):
        dens += weights[:, j, None] * norm.pdf(y[None, :], means[:, j, None], sds[:, j, None])
    return dens[0] if single else dens


def three_arm_ise(res, *, arm, n_test: int = 1000, grid=None, seed=0) -> float:
    """Mean integrated squared error of a fit on :func:`three_arm_simulation` data.

    Mean over ``n_test`` fresh draws V ~ N(0, I₂) of ∫ (p̂(y | V) − p(y | V))² dy
    for arm ``arm``, computed by the trapezoid rule on ``grid`` (default: 1000
    points over [min(Y) − 2, max(Y) + 2] of the training outcomes, as
    :func:`paper_simulation_ise`), with the estimate as ``res.density`` gives it
    (normalised on that grid).

    Parameters
    ----------
    res : CCMEResult
        A fit on :func:`three_arm_simulation` data with V = x1 + x2: the
        three-arm fit, or a one-vs-rest binary fit whose treated level is
        named ``arm`` (see the module docstring).
    arm : {'placebo', 'low', 'high'}
        The arm whose density is scored; passed to ``res.density(arm=...)``.
    n_test : int, default 1000
        Number of V-points drawn.
    grid : ndarray (G,) or None, default None
        Increasing outcome grid; None: the grid above.
    seed : int, numpy Generator or None, default 0
        Seed of the V-points drawn.

    Returns
    -------
    float

    Raises
    ------
    ParameterError
        A fit that does not condition on V = (x1, x2), or ``arm`` not one of the levels.

    Examples
    --------
    The arm "high" against the rest, a binary fit:

    >>> import ccme, numpy as np
    >>> data = ccme.datasets.three_arm_simulation(300, seed=1)
    >>> binary = data.assign(a=np.where(data["a"] == "high", "high", "rest"))
    >>> res = ccme.fit("y ~ a | x1 + x2 | .", binary, treated="high", tune="none", seed=1)
    >>> ise = ccme.datasets.three_arm_ise(res, arm="high", n_test=50)
    >>> type(ise).__name__, ise > 0
    ('float', True)

    The three-arm fit, whose arm "low" is scored:

    >>> res = ccme.fit("y ~ a | x1 + x2 | .", data, tune="none", seed=1)
    >>> ccme.datasets.three_arm_ise(res, arm="low", n_test=50) > 0
    True
    """
    if tuple(res.design.v_variables) != ("x1", "x2"):
        raise ParameterError("the fit must condition on V = x1 + x2 of three_arm_simulation data")
    _check_arm(arm)
    if grid is None:
        grid = np.linspace(res.design.Y.min() - 2.0, res.design.Y.max() + 2.0, 1000)
    V = np.random.default_rng(seed).standard_normal((n_test, 2))
    newdata = pd.DataFrame(V, columns=["x1", "x2"])
    estimate = res.density(grid, newdata=newdata, arm=arm)
    truth = three_arm_density(grid, V, arm)
    return float(np.mean(np.trapezoid((estimate - truth) ** 2, grid, axis=1)))
