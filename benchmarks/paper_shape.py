"""The issue's target shape: n = 20000, folds = 2, 10⁴ V-points × 10³ y-points.

Run as ``python benchmarks/paper_shape.py [--n 20000]``.  Prints the wall time of
fit + density, the peak resident memory of the process, and the integrated
squared error of the DR estimate against the exact density of the paper's
simulation.  (A script rather than an asv benchmark: one run takes ~half a
minute and most of the machine's memory bandwidth.)
"""

import argparse
import resource
import time
import warnings

import numpy as np
import pandas as pd

import ccme
from ccme.datasets import paper_simulation_density

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--n-eval", type=int, default=10000)
    parser.add_argument("--n-grid", type=int, default=1000)
    parser.add_argument("--propensity", default="forest")
    parser.add_argument("--tune", default="none", choices=["none", "auto"],
                        help="'none' times the core with fixed hyperparameters (default); 'auto' adds tuning")
    parser.add_argument("--approx", default="auto", choices=["auto", "exact", "lowrank"],
                        help="the ridge's algebra (ccme.estimators.lowrank; 'auto' by n)")
    parser.add_argument("--rank-tol", type=float, default=None, help="the low-rank path's rank_tol")
    parser.add_argument("--max-rank", type=int, default=None, help="the low-rank path's max_rank")
    args = parser.parse_args()
    extra = {k: v for k, v in (("rank_tol", args.rank_tol), ("max_rank", args.max_rank)) if v is not None}
    data = ccme.datasets.paper_simulation(args.n, seed=1)
    V = np.random.default_rng(7).normal(1.0, 1.0, size=(args.n_eval, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, args.n_grid)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(FORMULA, data, seed=1, propensity=args.propensity, tune=args.tune, approx=args.approx,
                       **extra)
    fitted = time.perf_counter()
    dens = res.density(grid, newdata=newdata, arm=1)
    done = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    truth = paper_simulation_density(grid, V, arm=1)
    ise = float(np.mean(np.trapezoid((dens - truth) ** 2, grid, axis=1)))
    print(f"n={args.n} folds=2 V-points={args.n_eval} y-points={args.n_grid} propensity={args.propensity} "
          f"tune={args.tune} approx={res.params['approx']}")
    facts = [part.diagnostics() for part in res.embedding(1).parts]
    if "ranks" in facts[0]:
        print("Nystrom ranks " + "; ".join(f"{f['ranks']} (trace error {f['trace_error']})" for f in facts))
    print(f"fit {fitted - started:.1f} s (propensity {res.timing['propensity']:.1f} s, tuning "
          f"{res.timing['tuning']:.1f} s, second-stage factors {res.timing['estimator']:.1f} s)")
    print(f"density {done - fitted:.1f} s; fit + density {done - started:.1f} s")
    print(f"peak memory {peak:.0f} MB (before the fit: {base:.0f} MB)")
    print(f"integrated squared error (DR, arm 1): {ise:.5f}")


if __name__ == "__main__":
    main()
