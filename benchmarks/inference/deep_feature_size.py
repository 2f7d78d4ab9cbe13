"""Size of Deep Feature's test of no distributional effect (``res.test_effect``) on null data sets.

The data are ``benchmarks/calibration.py``'s :func:`scale_data` with scale 1:
confounded (x2 drives the treatment and the outcome), V = x1, and Y¹ =ᵈ Y⁰
given V, so every rejection is a false one.  Each data set is fitted with
Deep Feature's defaults (``tune="auto"``, the default propensity) and tested
with 199 multiplier draws; the rejection rates at 5% and 10% are printed,
global (the mean over x1 = 0 and 20 points from −1.5 to 1.5) and at x1 = 0.  Shards (``--first``) let
two processes share a run; the lines go to ``--out`` (one JSON line per
data set, resumable)::

    python benchmarks/inference/deep_feature_size.py --reps 100 --n 1000
    python benchmarks/inference/deep_feature_size.py --summarise
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402

from benchmarks.calibration import SCALE_FORMULA, scale_data  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "deep_feature_size.jsonl"


def one_data_set(n: int, rep: int) -> dict:
    data = scale_data(n, 1.0, rep)
    points = pd.DataFrame({"x1": np.concatenate([[0.0], np.linspace(-1.5, 1.5, 20)])})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bootstrap caveat and clipping notes: this run measures them
        res = ccme.fit(SCALE_FORMULA, data, method="deep_feature", seed=rep, progress=False)
        test = res.test_effect(newdata=points, n_boot=199, seed=rep)
    table = test.table
    return {"n": n, "rep": rep, "p_global": float(test.p_value), "p_point": float(table["p_value"].iloc[0]),
            "located": res.location is not None}   # the location default may keep the plain fit


def summarise(path: Path) -> str:
    rows = read_rows(path)
    lines = ["| n | null data sets | global, 5% | global, 10% | at x1 = 0, 5% | at x1 = 0, 10% |", "|---|---|---|---|---|---|"]
    for n in sorted({r["n"] for r in rows}):
        group = [r for r in rows if r["n"] == n]
        rate = {k: [np.mean([r[k] <= a for r in group]) for a in (0.05, 0.10)] for k in ("p_global", "p_point")}
        lines.append(f"| {n} | {len(group)} | {rate['p_global'][0]:.3f} | {rate['p_global'][1]:.3f} | "
                     f"{rate['p_point'][0]:.3f} | {rate['p_point'][1]:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=100, help="data sets r < reps (seeds r)")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(args.out))
        return 0
    done = {(r["n"], r["rep"]) for r in read_rows(args.out)}
    for rep in range(args.first, args.reps):
        if (args.n, rep) in done:
            continue
        row = one_data_set(args.n, rep)
        append_row(args.out, row)
        print(args.n, rep, f"p = {row['p_global']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
