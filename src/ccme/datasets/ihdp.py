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


def ihdp_surface_b(seed=None) -> pd.DataFrame:
    """One replicate of IHDP with response surface B.

    Returns
    -------
    DataFrame
        ``y`` (observed outcome), ``treat``, the 25 covariates (continuous
        ones standardised), the true conditional means ``mu0``, ``mu1`` and
        the potential outcomes ``y0``, ``y1``.  ``frame.attrs`` holds the
        drawn ``beta`` and ``omega``.
    """
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
    frame["mu0"], frame["mu1"], frame["y0"], frame["y1"] = mu0, mu1, y0, y1
    frame.attrs["beta"] = beta.tolist()
    frame.attrs["omega"] = omega
    return frame


def ihdp_density(y, frame: pd.DataFrame, arm: int = 1) -> np.ndarray:
    """Exact density of Y^a given X = x for each row of an :func:`ihdp_surface_b` frame: N(μ_a(x), 1).

    Returns an array (n_rows, len(y)).
    """
    if arm not in (0, 1):
        raise ParameterError(f"`arm` must be 1 or 0; got {arm!r}")
    mu = frame[f"mu{arm}"].to_numpy(dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    return norm.pdf(y[None, :], mu[:, None], 1.0)
