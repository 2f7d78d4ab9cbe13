"""ccme beside the paper's reference code (JAX), one process each, on the same data.

    python benchmarks/compare_reference.py --reference PATH/TO/Conditional-Counterfactual-Mean-Embeddings \
        [--n 20000] [--method ridge|df] [--n-eval 10000] [--n-grid 1000]

The reference implementation (github.com/donlap/Conditional-Counterfactual-Mean-Embeddings,
installed with its own requirements: jax, omegaconf, hydra) is also a module
named ``ccme``, so each side runs in its own child process: the parent draws
the paper simulation once (``ccme.datasets.paper_simulation``) and the
evaluation points, each child fits arm 1 and writes its densities, and the
parent prints one line per side: fit + density seconds, the child's peak
resident memory, and the integrated squared error against the exact density
(``ccme.datasets.paper_simulation_density``).  The reference runs with its
own configuration ``configs/simulation/method/<method>.yaml`` (mode "dr", 2
folds, its forest propensity); ccme with its defaults.  Without
``--reference`` only the ccme line is printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

CCME_CHILD = r"""
import json, resource, sys, time, warnings
import numpy as np, pandas as pd
import ccme
arrays = np.load(sys.argv[1])
X, Y, A, V_eval, grid = arrays["X"], arrays["Y"], arrays["A"], arrays["V_eval"], arrays["grid"]
data = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, X.shape[1] + 1)]).assign(a=A, y=Y[:, 0])
newdata = pd.DataFrame(V_eval, columns=[f"x{j}" for j in range(1, V_eval.shape[1] + 1)])
formula = "y ~ a | " + " + ".join(newdata.columns) + " | " + " + ".join(f"x{j}" for j in range(V_eval.shape[1] + 1, X.shape[1] + 1))
t = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    res = ccme.fit(formula, data, seed=1, method=sys.argv[3])
    dens = res.density(grid, newdata=newdata, arm=1)
seconds = time.perf_counter() - t
np.save(sys.argv[2], dens)
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

REFERENCE_CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[4])
from ccme import CCDEstimator          # the reference's module (its directory comes first on the path)
from omegaconf import OmegaConf
arrays = np.load(sys.argv[1])
X, Y, A, V_eval, grid = arrays["X"], arrays["Y"], arrays["A"], arrays["V_eval"], arrays["grid"]
cfg = OmegaConf.load(f"{sys.argv[4]}/configs/simulation/method/{sys.argv[3]}.yaml")
cfg.mode, cfg.verbose = "dr", False
t = time.perf_counter()
estimator = CCDEstimator(cfg)
estimator.fit(X=X, V=X[:, :V_eval.shape[1]], Y=Y, A=A)
dens = np.asarray(estimator.predict(V_eval=V_eval, Y_grid=grid[:, None]))
seconds = time.perf_counter() - t
np.save(sys.argv[2], dens)
print(json.dumps({"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, default=None, help="a checkout of the reference code")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--method", default="ridge", choices=["ridge", "df"])
    parser.add_argument("--n-eval", type=int, default=10000)
    parser.add_argument("--n-grid", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import ccme
    from ccme.datasets import paper_simulation_density

    data = ccme.datasets.paper_simulation(args.n, seed=1)
    X = data[[f"x{j}" for j in range(1, 11)]].to_numpy()
    V_eval = np.random.default_rng(7).normal(1.0, 1.0, size=(args.n_eval, 5))
    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, args.n_grid)
    truth = paper_simulation_density(grid, V_eval, arm=1)
    ours = {"ridge": "ridge", "df": "deep_feature"}[args.method]
    print(f"paper simulation, n = {args.n}, {args.n_eval} V-points x {args.n_grid} outcome values, arm 1, "
          f"method {args.method}")
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "problem.npz"
        np.savez(problem, X=X, Y=data[["y"]].to_numpy(), A=data["a"].to_numpy(), V_eval=V_eval, grid=grid)
        sides = [("ccme", CCME_CHILD, ours, None)]
        if args.reference is not None:
            sides.append(("reference", REFERENCE_CHILD, args.method, str(args.reference.resolve())))
        for name, code, method, where in sides:
            out = Path(tmp) / f"{name}.npy"
            command = [sys.executable, "-c", code, str(problem), str(out), method] + ([where] if where else [])
            done = subprocess.run(command, capture_output=True, text=True, cwd=where or ROOT)
            if done.returncode != 0:
                print(f"{name:9s}: failed ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no output'})")
                continue
            facts = json.loads(done.stdout.strip().splitlines()[-1])
            dens = np.load(out).reshape(truth.shape)
            ise = float(np.mean(np.trapezoid((dens - truth) ** 2, grid, axis=1)))
            print(f"{name:9s}: fit + density {facts['seconds']:.1f} s, peak memory {facts['peak_mb']:.0f} MB, "
                  f"integrated squared error {ise:.5f}")
    if args.reference is None:
        print("reference: not run (pass --reference DIR, a checkout of the reference code with its requirements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
