"""Automatic tuning against the paper's hand-set values, and what tuning costs.

``python benchmarks/tuning_acceptance.py --n 4000 20000 --seeds 1 2 3 4 5``

For each n and seed, fits the ridge DR estimator on the paper's simulation
(forest propensity, 2 folds) twice:

- ``default``: ccme's defaults, i.e. ``tune="auto"``;
- ``paper``: the paper's hand-set values, σ = 2 for every kernel and the
  reference code's unscaled penalty 20 (K + 20 I), i.e. λ₀ = 20/m per arm and
  λ₁ = 20/n in the convention K + nλI (m, n: the stage sizes of a fold).

and prints the integrated squared error against the exact density (both
arms, 1000 V-draws), the fit times and the ratio tuning time / fit time.
"""

import argparse
import time
import warnings

import numpy as np

import ccme
from ccme.datasets import paper_simulation_ise

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[4000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--n-test", type=int, default=1000)
    args = parser.parse_args()
    for n in args.n:
        rows = []
        for seed in args.seeds:
            data = ccme.datasets.paper_simulation(n, seed=seed)
            n1 = int(data["a"].sum())
            half = n / 2
            paper = dict(lam0={1: 20 / (n1 / 2), 0: 20 / ((n - n1) / 2)}, lam1=20 / half,
                         x_bandwidth=2.0, v_bandwidth=2.0, y_bandwidth=2.0, tune="none")
            out = {}
            for name, kwargs in (("default", {}), ("paper", paper)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ccme.OverlapWarning)
                    started = time.perf_counter()
                    res = ccme.fit(FORMULA, data, seed=seed, propensity="forest", **kwargs)
                    # Build both arms now, so that the time is the whole fit's.
                    res.mean(newdata=data.iloc[:1], arm=1), res.mean(newdata=data.iloc[:1], arm=0)
                    seconds = time.perf_counter() - started
                ise = [paper_simulation_ise(res, arm=a, n_test=args.n_test, seed=seed) for a in (1, 0)]
                out[name] = (ise, seconds, res.timing.get("tuning", 0.0))
                print(f"n={n} seed={seed} {name:8s} ISE(Y1)={ise[0]:.5f} ISE(Y0)={ise[1]:.5f} "
                      f"fit={seconds:.1f}s tuning={out[name][2]:.1f}s "
                      f"lam0={res.penalties['lam0']} lam1={res.penalties['lam1'][1]:.3g} "
                      f"sy=({res.outcome_kernel(1).bandwidth[0]:.3g}, {res.outcome_kernel(0).bandwidth[0]:.3g})",
                      flush=True)
            rows.append(out)
        for name in ("default", "paper"):
            ise = np.array([r[name][0] for r in rows])
            secs = np.array([r[name][1] for r in rows])
            print(f"n={n} {name:8s} mean ISE(Y1)={ise[:, 0].mean():.5f} ISE(Y0)={ise[:, 1].mean():.5f} "
                  f"(over {len(rows)} seeds); mean fit time {secs.mean():.1f}s", flush=True)
        tuning = np.array([r["default"][2] for r in rows])
        fit_only = np.array([r["default"][1] - r["default"][2] for r in rows])
        print(f"n={n} tuning / rest of the fit: {np.mean(tuning / fit_only):.2f}", flush=True)


if __name__ == "__main__":
    main()
