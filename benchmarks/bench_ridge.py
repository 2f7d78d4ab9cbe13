"""asv benchmarks: ridge DR fit + density, compiled core against the plain-numpy twin.

Shape: folds = 2, 1000 V-points × 1000 y-points, n ∈ {2000, 5000, 20000}.
The numpy twin materialises every matrix; it is timed up to n = 5000.
"""

import warnings

import numpy as np
import pandas as pd

import ccme
import ccme._backend
import importlib.util
from pathlib import Path

# The numpy twins live beside the tests (tests/twins.py), not in the package: load that file by path.
_TWINS_SPEC = importlib.util.spec_from_file_location("twins", Path(__file__).resolve().parents[1] / "tests" / "twins.py")
twins = importlib.util.module_from_spec(_TWINS_SPEC)
_TWINS_SPEC.loader.exec_module(twins)
from ccme.estimators import ridge as ridge_module

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def _problem(n, n_eval=1000, n_grid=1000):
    data = ccme.datasets.paper_simulation(n, seed=1)
    V = np.random.default_rng(2).normal(1.0, 1.0, size=(n_eval, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, n_grid)
    return data, newdata, grid


def _fit_density(data, newdata, grid, backend):
    ridge_module._backend = twins if backend == "numpy" else ccme._backend
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The core's cost: fixed hyperparameters (tuning is timed by tuning_acceptance.py).
            res = ccme.fit(FORMULA, data, seed=1, propensity="logistic", tune="none", approx="exact")
        return res.density(grid, newdata=newdata, arm=1)
    finally:
        ridge_module._backend = ccme._backend


class RidgeFitDensity:
    params = ([2000, 5000, 20000], ["core", "numpy"])
    param_names = ["n", "backend"]
    timeout = 600

    def setup(self, n, backend):
        if backend == "numpy" and n > 5000:
            raise NotImplementedError("the numpy twin is timed up to n = 5000 only")
        self.data, self.newdata, self.grid = _problem(n)

    def time_fit_density(self, n, backend):
        _fit_density(self.data, self.newdata, self.grid, backend)

    def peakmem_fit_density(self, n, backend):
        _fit_density(self.data, self.newdata, self.grid, backend)


class CoreKernels:
    """The compiled kernels on their own: Gram matrix and Cholesky factorisation."""

    params = [2000, 5000]
    param_names = ["n"]

    def setup(self, n):
        rng = np.random.default_rng(0)
        self.X = rng.normal(size=(n, 10))
        self.bw = np.full(10, 3.0)

    def time_gram(self, n):
        ccme._backend.gram(self.X, self.X, "gaussian", self.bw)

    def time_kernel_ridge_factor(self, n):
        ccme._backend.kernel_ridge_factor(self.X, "gaussian", self.bw, n * 1e-2)
