"""Time of the low-rank ridge fit on a Dask LocalCluster against workers and row partitions.

Run as ``python benchmarks/dask_scaling.py [--n 50000]``.  The paper's
simulation (``ccme.datasets.paper_simulation(n, seed=1)``), the doubly robust
fit with ``tune="none"``, then the density at 1000 V-points × 400 outcome
values (arm 1).  First the local fit (``approx="lowrank"``) as the
reference, then ``fit(client=...)`` on a LocalCluster of 1 and 2 worker
processes (one thread each) with 2, 4 and 8 partitions.  Columns: the whole
fit, its propensity and cross-fitting stages (``res.timing``; the
cross-fitting holds the landmark selection and the second stages' features,
the arms' first stages are built on first use, i.e. in the density column),
the density, and the largest difference of the densities from the local
fit's relative to their maximum.  The cluster's start-up is not timed.
"""

import argparse
import logging
import os
import platform
import time
import warnings

import numpy as np
import pandas as pd

import ccme

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def one_fit(data, newdata, grid, **kwargs):
    """(fit seconds, density seconds, timing dict, density) of one fit + density."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)  # clipping on the simulation's weak overlap
        res = ccme.fit(FORMULA, data, seed=1, tune="none", **kwargs)
    fitted = time.perf_counter()
    dens = res.density(grid, newdata=newdata, arm=1, normalize=False)
    return fitted - started, time.perf_counter() - fitted, res.timing, dens


def main():
    from distributed import Client, LocalCluster

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--partitions", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--n-eval", type=int, default=1000)
    parser.add_argument("--n-grid", type=int, default=400)
    args = parser.parse_args()
    data = ccme.datasets.paper_simulation(args.n, seed=1)
    V = np.random.default_rng(7).normal(1.0, 1.0, size=(args.n_eval, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, args.n_grid)
    print(f"n={args.n} folds=2 mode=dr tune=none; density at {args.n_eval} V-points x {args.n_grid} y-points (arm 1)")
    print(f"{platform.node()}: {os.cpu_count()} cores, ccme {ccme.__version__}, load average at the start "
          f"{os.getloadavg()[0]:.1f}")
    header = (f"{'run':<22}{'fit s':>8}{'propensity':>12}{'cross-fit':>11}{'density s':>11}{'total s':>9}"
              f"{'max rel diff':>14}")
    print(header)
    print("-" * len(header))
    fit_s, dens_s, timing, reference = one_fit(data, newdata, grid, approx="lowrank")
    print(f"{'local (lowrank)':<22}{fit_s:>8.1f}{timing['propensity']:>12.1f}{timing['estimator']:>11.1f}"
          f"{dens_s:>11.1f}{fit_s + dens_s:>9.1f}{'-':>14}", flush=True)
    for workers in args.workers:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            for partitions in args.partitions:
                fit_s, dens_s, timing, dens = one_fit(data, newdata, grid, client=client, partitions=partitions)
                diff = float(np.max(np.abs(dens - reference)) / np.max(np.abs(reference)))
                label = f"{workers} worker{'s' if workers > 1 else ''}, {partitions} parts"
                print(f"{label:<22}{fit_s:>8.1f}{timing['propensity']:>12.1f}{timing['estimator']:>11.1f}"
                      f"{dens_s:>11.1f}{fit_s + dens_s:>9.1f}{diff:>14.1e}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f} (other jobs share the machine)")


if __name__ == "__main__":  # LocalCluster spawns its worker processes: this module is re-imported in them
    main()
