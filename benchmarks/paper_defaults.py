"""Measurements behind ccme's defaults and statistical-test tolerances.

``python benchmarks/paper_defaults.py --n 4000 --seeds 1 2 3`` prints the
integrated squared error (arm 1, 500 V-draws) of every mode under the paper's
three scenarios (both nuisances correct; x6 left out of the outcome model;
logistic instead of forest propensity).  tests/test_statistical.py quotes it.

``python benchmarks/paper_defaults.py --n 2000 --seeds 1 2 --lams 1e-4 1e-3 1e-2 3e-2 0.1``
sweeps the ridge penalty (both stages) for DR and one-step, the check behind
``ccme.RIDGE_DEFAULTS``.
"""

import argparse
import warnings

import ccme
from ccme.datasets import paper_simulation_ise

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
NO_X6 = ["x1", "x2", "x3", "x4", "x5", "x7", "x8", "x9", "x10"]
SCENARIOS = {
    "correct": {"propensity": "forest"},
    "x6 left out": {"propensity": "forest", "outcome_covariates": NO_X6},
    "logistic": {"propensity": "logistic"},
}


def error(data, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        res = ccme.fit(FORMULA, data, seed=seed, **kwargs)
    return paper_simulation_ise(res, arm=1, n_test=500, seed=seed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--lams", type=float, nargs="*", default=None)
    args = parser.parse_args()
    for seed in args.seeds:
        data = ccme.datasets.paper_simulation(args.n, seed=seed)
        if args.lams:
            for lam in args.lams:
                for mode in ("dr", "onestep"):
                    e = error(data, seed, mode=mode, propensity="forest", lam=lam)
                    print(f"n={args.n} seed={seed} lam={lam:g} {mode:8s} ISE={e:.5f}", flush=True)
            continue
        for scenario, kwargs in SCENARIOS.items():
            for mode in ("dr", "ipw", "pi", "onestep"):
                if mode == "onestep" and scenario != "correct":
                    continue
                e = error(data, seed, mode=mode, **kwargs)
                print(f"n={args.n} seed={seed} {scenario:12s} {mode:8s} ISE={e:.5f}", flush=True)


if __name__ == "__main__":
    main()
