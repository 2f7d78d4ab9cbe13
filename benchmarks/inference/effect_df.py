"""The degrees of freedom behind the effect intervals' small-sample critical values (``bootstrap.EFFECT_SMALL_SAMPLE``).

For each data set of a case (ccme's defaults, ``ccme.fit(formula, data,
seed=r)``) and each V-point of the coverage study (``coverage.py``), the 90%
bias-reduced effect intervals are computed and the Satterthwaite ν of the
mean difference's and the QTEs' bootstrap variance (the ``df`` column of
``res.effect()``) recorded; the script prints, per V-point and term, the
median and the 10th and 90th percentiles of ν over the data sets, and the
factor t_ν(0.95) / z(0.95) by which the median ν widens a 90% interval::

    python benchmarks/inference/effect_df.py --cases weak_overlap,paper,hetero_v2 --n 2000 --reps 20

Where the inverse-propensity weights are large or the law at v rests on a
few units, ν is small and the normal quantile too short.  Output:
``results/effect_df_<n>.txt`` (appended per case).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import ALPHA, LEVEL, Q, study_points  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def run(case_name: str, n: int, reps: int) -> list[str]:
    case = get_case(case_name)
    v_points, _ = study_points(case)
    rows = []
    for rep in range(reps):
        data = case.simulate(n, rep)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(case.formula, data, seed=rep)
            table = res.effect(newdata=v_points, q=Q, alpha=(ALPHA,), level=LEVEL, n_boot=99, seed=rep)
        rows.append(table[table.term.isin(["mean_diff", "qte"])].reset_index(drop=True))
        print(case_name, n, rep, flush=True)
    lines = [f"== {case_name}, n = {n}, {reps} data sets: Satterthwaite df of the 90% effect intervals",
             f"   {'V-point':>8} {'term':>10} {'at':>5} {'median':>8} {'p10':>8} {'p90':>8} {'t/z at median':>14}"]
    first = rows[0]
    for i in range(len(first)):
        df = np.array([r.df[i] for r in rows])
        med = float(np.median(df))
        at = "" if np.isnan(first["at"][i]) else f"{first['at'][i]:g}"
        lines.append(f"   {str(first.profile[i]):>8} {first.term[i]:>10} {at:>5} {med:8.1f} "
                     f"{np.percentile(df, 10):8.1f} {np.percentile(df, 90):8.1f} "
                     f"{stats.t.ppf(0.95, med) / stats.norm.ppf(0.95):14.3f}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="weak_overlap,paper,hetero_v2")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args(argv)
    out = RESULTS / f"effect_df_{args.n}.txt"
    for name in args.cases.split(","):
        lines = run(name, args.n, args.reps)
        print("\n".join(lines))
        with open(out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
