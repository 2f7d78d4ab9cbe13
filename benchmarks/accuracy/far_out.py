"""A few far-out values: how much each estimator's error grows when a fraction of a case's outcomes (or covariates)
is moved far out.

A fraction (default 1%) of the units, drawn with a fixed seed, get Cauchy noise of scale 20 added to their outcome
(the paper's simulation has outcome sd ≈ 8, so most moved values stay in the tails and a few land hundreds out);
every fit is scored against the case's exact law of the clean outcomes (the zoo's ISE, 100 V-points), so the
ratio contaminated / clean says how much the far-out values cost.  Not a zoo case: the truth of the contaminated
data is not the zoo's; it checks the rules that a few far-out values should not set (ccme.fences) on data nobody
tuned on.  ``--columns`` moves covariates instead, each by Cauchy noise of ``--scale`` times its sd at its own
draw of rows (a recording error: the units' outcomes stay those of their true covariates).

    python benchmarks/accuracy/far_out.py --cases paper,hetero_v2 --seeds 1,2,3 --methods ridge,deep_feature,neural_kernel
    python benchmarks/accuracy/far_out.py --cases paper,hetero_v2 --columns V,W --methods ridge
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


def contaminate(data, column: str, fraction: float, seed: int, scale: float = 20.0):
    """A copy of ``data`` whose ``column`` has Cauchy noise (``scale``) added at a ``fraction`` of the rows."""
    rng = np.random.default_rng(10_000 + seed)
    rows = rng.choice(len(data), int(round(fraction * len(data))), replace=False)
    out = data.copy()
    values = out[column].to_numpy(dtype=float).copy()
    values[rows] += scale * rng.standard_cauchy(len(rows))
    out[column] = values
    return out


def covariates(formula: str, data, spec: str) -> list:
    """The columns ``spec`` names: "V" (V's part of the formula) or "W" (the last part) give their plain numeric
    columns with more than two values; other entries are column names."""
    parts = [part.strip() for part in formula.split("~")[1].split("|")]
    names = []
    for entry in spec.split(","):
        if entry in ("V", "W"):
            terms = [t.strip() for t in parts[1 if entry == "V" else -1].split("+")]
            names += [t for t in terms if t in data.columns and data[t].dtype.kind == "f" and data[t].nunique() > 2]
        else:
            names.append(entry)
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="paper")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--methods", default="ridge,deep_feature,neural_kernel")
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--columns", default="", help="covariates to move: names, or V / W for the numeric columns of "
                   "the formula's V part / last part (default: the outcome)")
    p.add_argument("--scale", type=float, default=None,
                   help="the Cauchy noise's scale (default 20 for the outcome; in sds for --columns, default 2.5)")
    args = p.parse_args(argv)
    print(f"$ python benchmarks/accuracy/far_out.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    what = args.columns or "outcomes"
    print(f"ccme {ccme.__version__}; ISE against the clean law, arm 1 / arm 0; {100 * args.fraction:g}% of {what} moved")
    for name in args.cases.split(","):
        case = get_case(name)
        for method in args.methods.split(","):
            ratios = []
            for seed in (int(s) for s in args.seeds.split(",")):
                problem = Problem(case, args.n, seed, 100)
                if args.columns:
                    moved = problem.data
                    for j, column in enumerate(covariates(case.formula, problem.data, args.columns)):
                        sd = float(np.std(moved[column]))
                        moved = contaminate(moved, column, args.fraction, 100 * j + seed, (args.scale or 2.5) * sd)
                else:
                    column = case.formula.split("~")[0].strip()
                    moved = contaminate(problem.data, column, args.fraction, seed, args.scale or 20.0)
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
