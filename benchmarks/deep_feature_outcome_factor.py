"""Deep Feature's loss with the outcome kernel as a pivoted Cholesky factor against the dense block.

Fits ``method="deep_feature"`` with every default on one case of the accuracy
zoo, once with the factor (``ccme.estimators.deep_feature.OUTCOME_FACTOR_UNITS``
as shipped) and once with the dense n × n outcome-kernel block (the threshold
raised out of reach), and prints each fit's seconds, its integrated squared
error per arm and the largest difference of the two fits' densities relative
to their largest value (README, "Accuracy zoo", *A "choose" case at large n*)::

    python benchmarks/deep_feature_outcome_factor.py --case large_mixed --n 4000 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ccme  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import get_case  # noqa: E402
from ccme.estimators import deep_feature  # noqa: E402


def fit_once(problem: Problem, seed: int, threshold: int):
    """(seconds, {arm: ISE}, densities of both arms) with OUTCOME_FACTOR_UNITS = threshold."""
    shipped = deep_feature.OUTCOME_FACTOR_UNITS
    deep_feature.OUTCOME_FACTOR_UNITS = threshold
    try:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(problem.formula, problem.data, seed=seed, method="deep_feature")
            densities = np.concatenate([problem.estimate(res, 1), problem.estimate(res, 0)])
        return time.perf_counter() - started, problem.score(res), densities
    finally:
        deep_feature.OUTCOME_FACTOR_UNITS = shipped


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="large_mixed")
    p.add_argument("--n", type=int, default=4000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-points", type=int, default=100)
    args = p.parse_args(argv)
    problem = Problem(get_case(args.case), args.n, args.seed, args.eval_points)
    runs = {"factor": fit_once(problem, args.seed, deep_feature.OUTCOME_FACTOR_UNITS),
            "dense": fit_once(problem, args.seed, np.iinfo(np.int64).max)}
    for label, (seconds, ise, _) in runs.items():
        print(f"{args.case} n = {args.n} seed {args.seed} {label:6s} {seconds:7.1f} s   "
              f"ISE {ise[1]:.6f} / {ise[0]:.6f}")
    a, b = runs["factor"][2], runs["dense"][2]
    print(f"largest density difference / largest density: {np.abs(a - b).max() / np.abs(b).max():.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
