"""IHDP semi-synthetic data with Hill's (2011) response surface B.

The covariates are the real IHDP ones (Hill's 747 children: 6 continuous
columns standardised, 19 binary ones; site 8 is the reference site).  The
outcomes are simulated with response surface B,

    μ₀(x) = exp((x + W) β),   μ₁(x) = x β − ω,   Y^a = μ_a(x) + N(0, 1),

with β's entries drawn from (0, 0.1, 0.2, 0.3, 0.4) with probabilities
(0.6, 0.1, 0.1, 0.1, 0.1), W an offset of 0.5 on every covariate, and ω chosen
so that the average effect on the treated is 4.  So the exact truth is
Y^a | X = x ~ N(μ_a(x), 1), and any number of replicates can be drawn.
Column names use ``_`` where the raw table has ``.`` (``b.head`` → ``b_head``).
The truths (μ_a(x), Y⁰, Y¹, β, ω) are returned apart from the observed
columns, and only on request (``ihdp_surface_b(seed, truth=True)``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..errors import ParameterError
from .real import load_ihdp_covariates

__all__ = ["ihdp_surface_b", "ihdp_density", "IHDP_CONTINUOUS", "IHDP_BINARY"]

IHDP_CONTINUOUS = ("bw", "b_head", "preterm", "birth_o", "nnhealth", "momage")
IHDP_BINARY = (
    "sex", "twin", "b_marr", "mom_lths", "mom_hs", "mom_scoll", "cig", "first", "booze", "drugs", "work_dur",
    "prenatal", "site1", "site2", "site3", "site4", "site5", "site6", "site7",
)
_W = 0.5
_CATT = 4.0


def ihdp_surface_b(seed=None, *, truth: bool = False):
    """One replicate of IHDP with response surface B.

    Parameters
    ----------
    seed : int, numpy Generator or None, default None
        Seed of :func:`numpy.random.default_rng` (draws β and the noise).
    truth : bool, default False
        Also return what an analyst never observes.  The same ``seed`` gives
        the same observed data either way.

    Returns
    -------
    data : DataFrame
        The observed columns only: ``y`` (observed outcome), ``treat`` and the
        25 covariates (continuous ones standardised), so that ``.`` in a
        formula adjusts for the covariates and nothing else.
    truth : DataFrame, only with ``truth=True``
        On ``data``'s index: the true conditional means ``mu0``, ``mu1`` and
        the potential outcomes ``y0``, ``y1``; ``truth.attrs`` holds the drawn
        ``beta`` and ``omega``.  :func:`ihdp_density` takes its rows.

    Raises
    ------
    ParameterError
        ``truth`` not a boolean.

    Examples
    --------
    >>> import ccme
    >>> data, truth = ccme.datasets.ihdp_surface_b(1, truth=True)
    >>> data.shape, list(truth.columns)
    ((747, 27), ['mu0', 'mu1', 'y0', 'y1'])
    """
    if not isinstance(truth, (bool, np.bool_)):
        raise ParameterError(f"`truth` must be True or False; got {truth!r}")
    rng = np.random.default_rng(seed)
    raw = load_ihdp_covariates(hill=True)
    raw.columns = [c.replace(".", "_") for c in raw.columns]
    X = raw[list(IHDP_CONTINUOUS) + list(IHDP_BINARY)].astype(float)
    for c in IHDP_CONTINUOUS:
        X[c] = (X[c] - X[c].mean()) / X[c].std()
    x = X.to_numpy()
    treat = raw["treat"].to_numpy()
    beta = rng.choice([0.0, 0.1, 0.2, 0.3, 0.4], size=x.shape[1], p=[0.6, 0.1, 0.1, 0.1, 0.1])
    mu0 = np.exp((x + _W) @ beta)
    linear = x @ beta
    omega = float(np.mean(linear[treat == 1] - mu0[treat == 1]) - _CATT)
    mu1 = linear - omega
    y0 = mu0 + rng.standard_normal(len(x))
    y1 = mu1 + rng.standard_normal(len(x))
    frame = X.copy()
    frame.insert(0, "treat", treat)
    frame.insert(0, "y", np.where(treat == 1, y1, y0))
    if not truth:
        return frame
    truths = pd.DataFrame({"mu0": mu0, "mu1": mu1, "y0": y0, "y1": y1}, index=frame.index)
    truths.attrs["beta"] = beta.tolist()
    truths.attrs["omega"] = omega
    return frame, truths


def _describe(value) -> str:
    if isinstance(value, pd.DataFrame):
        return f"a DataFrame with columns {list(value.columns)}"
    return type(value).__name__


def ihdp_density(y, truth: pd.DataFrame, arm: int = 1) -> np.ndarray:
    """Exact density of Y^a given X = x, N(μ_a(x), 1), for each row of ``truth``.

    Parameters
    ----------
    y : array (G,)
        Outcome values.
    truth : DataFrame
        Rows of the truth frame of ``ihdp_surface_b(seed, truth=True)`` (any
        frame with columns ``mu0`` and ``mu1``).
    arm : {1, 0}, default 1
        1 for Y¹, 0 for Y⁰.

    Returns
    -------
    ndarray (n_rows, G)

    Raises
    ------
    ParameterError
        ``arm`` not 1 or 0, or ``truth`` not a frame with the column ``mu{arm}``.

    Examples
    --------
    >>> import ccme
    >>> data, truth = ccme.datasets.ihdp_surface_b(1, truth=True)
    >>> ccme.datasets.ihdp_density([0.0, 1.0, 2.0], truth.head(4), arm=0).shape
    (4, 3)
    """
    if arm not in (0, 1):
        raise ParameterError(f"`arm` must be 1 or 0; got {arm!r}")
    if not isinstance(truth, pd.DataFrame) or f"mu{arm}" not in truth.columns:
        raise ParameterError(
            "`truth` must be (rows of) the truth frame of ihdp_surface_b(seed, truth=True), with columns "
            f"mu0 and mu1; got {_describe(truth)}"
        )
    mu = truth[f"mu{arm}"].to_numpy(dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    return norm.pdf(y[None, :], mu[:, None], 1.0)
