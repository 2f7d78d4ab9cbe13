"""A few far-out outcomes: how much each estimator's error grows when a fraction of a case's outcomes is moved far out.

A fraction (default 1%) of the units, drawn with a fixed seed, get Cauchy noise of scale 20 added to their outcome
(the paper's simulation has outcome sd ≈ 8, so most moved values stay in the tails and a few land hundreds out);
every fit is scored against the case's exact law of the clean outcomes (the zoo's ISE, 100 V-points), so the
ratio contaminated / clean says how much the far-out values cost.  Not a zoo case: the truth of the contaminated
data is not the zoo's; it checks the outcome-range rules (ccme.fences) on data nobody tuned on.

    python benchmarks/accuracy/far_out.py --cases paper,hetero_v2 --seeds 1,2,3 --methods ridge,deep_feature,neural_kernel
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ccme  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import get_case  # noqa: E402


def contaminate(data, column: str, fraction: float, seed: int):
    """A copy of ``data`` whose ``column`` has Cauchy noise (scale 20) added at a ``fraction`` of the rows."""
    rng = np.random.default_rng(10_000 + seed)
    rows = rng.choice(len(data), int(round(fraction * len(data))), replace=False)
    out = data.copy()
    values = out[column].to_numpy(dtype=float).copy()
    values[rows] += 20.0 * rng.standard_cauchy(len(rows))
    out[column] = values
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="paper")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--methods", default="ridge,deep_feature,neural_kernel")
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--n", type=int, default=1000)
    args = p.parse_args(argv)
    print(f"$ python benchmarks/accuracy/far_out.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"ccme {ccme.__version__}; ISE against the clean law, arm 1 / arm 0; {args.fraction:.0%} of outcomes moved")
    for name in args.cases.split(","):
        case = get_case(name)
        column = case.formula.split("~")[0].strip()
        for method in args.methods.split(","):
            ratios = []
            for seed in (int(s) for s in args.seeds.split(",")):
                problem = Problem(case, args.n, seed, 100)
                moved = contaminate(problem.data, column, args.fraction, seed)
                scores = []
                for data in (problem.data, moved):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        started = time.perf_counter()
                        res = ccme.fit(problem.formula, data, method=method, seed=seed)
                    s = problem.score(res)
                    scores.append((s[1], s[0], time.perf_counter() - started))
                (c1, c0, _), (m1, m0, _) = scores
                ratios.append((m1 / c1, m0 / c0))
                print(f"{name:10s} {method:14s} seed {seed}: clean {c1:.4f} / {c0:.4f}, moved {m1:.4f} / {m0:.4f}, "
                      f"ratio {m1 / c1:.2f} / {m0 / c0:.2f}", flush=True)
            geo = np.exp(np.mean(np.log(ratios), axis=0))
            print(f"{name:10s} {method:14s} geometric mean ratio {geo[0]:.2f} / {geo[1]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
