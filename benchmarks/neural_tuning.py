"""Validation-loss tuning of the neural estimators against their defaults: accuracy and cost.

``python benchmarks/neural_tuning.py --n 2000 5000 --seeds 1 2 3``

For each n and seed, fits the Deep Feature DR estimator on the paper's
simulation (forest propensity, 2 folds, default training options) with

- ``none``: ``tune="none"``, the documented defaults (λ₀ = λ₁ = 0.01, M = 20,
  early stopping);
- ``auto``: ``tune="auto"``, λ₀ and λ₁ chosen by validation loss on the first
  fold (:mod:`ccme.estimators.neural_tuning`);

and, with ``--m``, ``tune={"M": [...]}`` as well; prints the integrated squared
error against the exact density (arm 1, the paper's estimand, and arm 0;
500 V-draws each), the chosen values and the seconds to fit and train every
fold (fit + one density per arm).
"""

import argparse
import time
import warnings

import numpy as np

import ccme
from ccme.datasets import paper_simulation_ise

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def run(data, seed, method, mode, tune):
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        res = ccme.fit(FORMULA, data, method=method, mode=mode, propensity="forest", seed=seed, progress=False,
                       tune=tune)
        for arm in (1, 0):                      # trains every fold and arm
            res.density(res.default_grid(5), newdata=ccme.datasets.PAPER_PROFILES, arm=arm)
        seconds = time.perf_counter() - started
        ise = {arm: paper_simulation_ise(res, arm=arm, n_test=500, seed=seed) for arm in (1, 0)}
    return res, ise, seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[2000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--method", default="deep_feature")
    parser.add_argument("--mode", default="dr")
    parser.add_argument("--m", type=int, nargs="*", default=None, help="also tune M over these values")
    args = parser.parse_args()
    configs = {"none": "none", "auto": "auto"}
    if args.m:
        configs["M"] = {"M": args.m}
    for n in args.n:
        totals = {name: [] for name in configs}
        for seed in args.seeds:
            data = ccme.datasets.paper_simulation(n, seed=seed)
            for name, tune in configs.items():
                res, ise, seconds = run(data, seed, args.method, args.mode, tune)
                totals[name].append([ise[1], ise[0], seconds])
                chosen = {k: v for k, v in res.tuning.chosen.items() if not k.startswith("epochs")}
                print(f"n={n} seed={seed} {args.method}/{args.mode} tune={name:4s} ISE1={ise[1]:.5f} "
                      f"ISE0={ise[0]:.5f} time={seconds:.1f}s tuning={res.tuning.seconds:.1f}s {chosen}",
                      flush=True)
        for name, rows in totals.items():
            mean = np.mean(rows, axis=0)
            print(f"n={n} mean over seeds {args.seeds}: tune={name:4s} ISE1={mean[0]:.5f} ISE0={mean[1]:.5f} "
                  f"time={mean[2]:.1f}s", flush=True)


if __name__ == "__main__":
    main()
