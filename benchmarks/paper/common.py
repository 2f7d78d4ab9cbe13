"""Shared pieces of the paper-reproduction scripts: the formula, the scenarios and the evaluation.

The evaluation follows the paper's Appendix "Experimental Details": fresh test
points V ~ N(1₅, I₅) and a grid of points over [min(Y) − 2, max(Y) + 2] of the
training outcomes; the estimate p̂¹(y | v) is compared with the exact density of
:func:`ccme.datasets.paper_simulation_density`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

import ccme
from ccme.datasets import paper_simulation_density
from ccme.estimators.training import paper_options

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
V_COLUMNS = [f"x{j}" for j in range(1, 6)]
NO_X6 = ["x1", "x2", "x3", "x4", "x5", "x7", "x8", "x9", "x10"]
METHODS = ("ridge", "deep_feature", "neural_kernel")
MODES = ("dr", "ipw", "pi", "onestep")
#: The paper's three scenarios (Section "Analysis of Double Robustness"), rows of its figure.
SCENARIOS = {
    "both correct": {"propensity": "forest"},
    "propensity misspecified": {"propensity": "logistic"},
    "outcome misspecified": {"propensity": "forest", "outcome_covariates": NO_X6},
}


def fit_options(method: str, data: pd.DataFrame, *, paper_config: bool, folds: int = 2) -> dict:
    """Keyword arguments of :func:`ccme.fit` beyond formula, mode and scenario.

    ``paper_config=False``: ccme's defaults with ``tune="auto"``.
    ``paper_config=True``: the paper's Table "exp1_config".  Ridge: bandwidth 2
    for every kernel and K + 20·I in both stages, i.e. λ₀ = 20/m per arm and
    λ₁ = 20/n_fold in ccme's K + mλI convention (m is taken as the arm's
    count divided by the number of folds, the expected size of an arm within
    a fold); neural: :func:`ccme.estimators.paper_options`.  The reference
    code clips the propensity at [0.1, 0.9], so ``clip=0.1`` in both cases.
    """
    if not paper_config:
        return {"tune": "auto"}
    n = len(data)
    if method == "ridge":
        counts = {arm: max(int((data["a"] == arm).sum()) / folds, 1.0) for arm in (1, 0)}
        return {
            "tune": "none", "clip": 0.1, "x_bandwidth": 2.0, "v_bandwidth": 2.0, "y_bandwidth": 2.0,
            "lam0": {arm: 20.0 / counts[arm] for arm in (1, 0)}, "lam1": 20.0 / (n / folds),
        }
    # Each stage trains on one fold: the learning rate follows the fold's size.
    return {"tune": "none", "clip": 0.1, **paper_options(method, max(n // folds, 1))}


def fit_quiet(data, **kwargs):
    """``ccme.fit`` on the paper formula with the expected overlap warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        return ccme.fit(FORMULA, data, **kwargs)


def test_points(n_test: int, seed: int) -> pd.DataFrame:
    """``n_test`` draws of V ~ N(1₅, I₅) (the paper's test points)."""
    V = np.random.default_rng(seed).normal(1.0, 1.0, size=(n_test, 5))
    return pd.DataFrame(V, columns=V_COLUMNS)


def density_errors(res, data, newdata, n_grid: int = 1000, chunk: int = 2000) -> dict:
    """Errors of p̂¹(y | v) against the exact density at ``newdata`` on the paper's grid.

    Returns ``mse`` (the paper's: mean over test points and grid points of the
    squared difference, the density normalised on the grid) and ``ise`` (the
    integrated squared error ∫ (p̂ − p)² dy by the trapezoid rule, averaged over
    test points, as :func:`ccme.datasets.paper_simulation_ise` computes).
    """
    grid = np.linspace(data["y"].min() - 2.0, data["y"].max() + 2.0, n_grid)
    sq_mean, ise = [], []
    for start in range(0, len(newdata), chunk):
        part = newdata.iloc[start:start + chunk]
        diff2 = (res.density(grid, newdata=part, arm=1) - paper_simulation_density(grid, part, arm=1)) ** 2
        sq_mean.append(diff2.mean(axis=1))
        ise.append(np.trapezoid(diff2, grid, axis=1))
    return {"mse": float(np.concatenate(sq_mean).mean()), "ise": float(np.concatenate(ise).mean())}
