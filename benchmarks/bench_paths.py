"""asv benchmarks of the ridge estimator's algebra paths: exact, low-rank, low-rank on a local Dask cluster.

The paper simulation (10 covariates, V = 5 of them), 2 folds, ``tune="none"``
(the estimator's own cost; the tuning is timed by ``tuning_speed.py``), fit +
density at 1000 V-points × 400 outcome values, arm 1: the issue's low-rank
shape.  ``time_*`` and ``peakmem_*`` (asv's peak resident memory of the
benchmark process) for each path; the exact path stops at n = 20000 (its
n × n factors), the Dask path runs on a ``LocalCluster`` of 2 worker
processes when ``dask.distributed`` is installed (``pip install "ccme[dask]"``).

    asv run --python=same --bench bench_paths
"""

import warnings

import numpy as np
import pandas as pd

import ccme

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def _problem(n):
    data = ccme.datasets.paper_simulation(n, seed=1)
    V = np.random.default_rng(2).normal(1.0, 1.0, size=(1000, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, 400)
    return data, newdata, grid


def _fit_density(data, newdata, grid, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(FORMULA, data, seed=1, tune="none", **options)
    return res.density(grid, newdata=newdata, arm=1)


class FitDensityByPath:
    params = ([5000, 20000, 200000], ["exact", "lowrank"])
    param_names = ["n", "approx"]
    timeout = 900
    number = 1
    repeat = 1

    def setup(self, n, approx):
        if approx == "exact" and n > 20000:
            raise NotImplementedError("the exact path's n x n factors stop near n = 30000")
        self.problem = _problem(n)

    def time_fit_density(self, n, approx):
        _fit_density(*self.problem, approx=approx)

    def peakmem_fit_density(self, n, approx):
        _fit_density(*self.problem, approx=approx)


class FitDensityDaskLocal:
    """The low-rank path on a LocalCluster (2 worker processes, 1 thread each), 4 partitions."""

    params = [20000, 200000]
    param_names = ["n"]
    timeout = 900
    number = 1
    repeat = 1

    def setup(self, n):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise NotImplementedError("dask.distributed is not installed (pip install 'ccme[dask]')") from None
        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        self.client = Client(self.cluster)
        self.problem = _problem(n)

    def teardown(self, n):
        self.client.close()
        self.cluster.close()

    def time_fit_density(self, n):
        _fit_density(*self.problem, client=self.client, partitions=4)
