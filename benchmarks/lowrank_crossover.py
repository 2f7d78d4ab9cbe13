"""Where the low-rank ridge path wins: exact against low-rank on the paper simulation, by n.

    python benchmarks/lowrank_crossover.py [--n 2000 5000 10000 20000] [--tune none]

For each n (one seed): fit + density (1000 V-points × 400 outcome values, arm 1)
with ``approx="exact"`` and ``approx="lowrank"`` (default ``rank_tol``), their
wall times, peak memory growth (ru_maxrss, so measured in one child process
per fit), the integrated squared error against the exact density, and the
relative L2 difference between the two density surfaces.  The threshold
``ccme.estimators.lowrank.APPROX_THRESHOLD`` of ``approx="auto"`` was set from
this table (``benchmarks/results/lowrank_crossover.txt``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, warnings
import numpy as np, pandas as pd
import ccme
from ccme.datasets import paper_simulation_density
n, approx, tune = int(sys.argv[1]), sys.argv[2], sys.argv[3]
FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
data = ccme.datasets.paper_simulation(n, seed=1)
V = np.random.default_rng(7).normal(1.0, 1.0, size=(1000, 5))
newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, 400)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    res = ccme.fit(FORMULA, data, seed=1, tune=tune, approx=approx)
    dens = res.density(grid, newdata=newdata, arm=1)
seconds = time.perf_counter() - t
peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
truth = paper_simulation_density(grid, V, arm=1)
ise = float(np.mean(np.trapezoid((dens - truth) ** 2, grid, axis=1)))
np.save(sys.argv[4], dens)
print(json.dumps({"seconds": seconds, "peak_mb": peak, "ise": ise, "tuning": res.timing["tuning"]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 5000, 10000, 20000])
    parser.add_argument("--tune", default="none", choices=["none", "auto"])
    args = parser.parse_args()
    import numpy as np

    print(f"tune={args.tune}; fit + density at 1000 V-points x 400 outcome values, arm 1, seed 1")
    print("| n | exact s | low-rank s | exact MB | low-rank MB | ISE exact | ISE low-rank | rel. difference |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.n:
        out = {}
        for approx in ("exact", "lowrank"):
            path = f"/tmp/ccme_crossover_{n}_{approx}.npy"
            line = subprocess.run([sys.executable, "-c", CHILD, str(n), approx, args.tune, path], check=True,
                                  capture_output=True, text=True).stdout.strip().splitlines()[-1]
            out[approx] = dict(json.loads(line), dens=np.load(path))
        e, lr = out["exact"], out["lowrank"]
        rel = float(np.linalg.norm(e["dens"] - lr["dens"]) / np.linalg.norm(e["dens"]))
        print(f"| {n} | {e['seconds']:.1f} | {lr['seconds']:.1f} | {e['peak_mb']:.0f} | {lr['peak_mb']:.0f} | "
              f"{e['ise']:.5f} | {lr['ise']:.5f} | {rel:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
