"""Where a simultaneous band studentised point by point misses: the anatomy behind ``bootstrap.VARIANCE_WINDOW``.

For each data set of a case (ccme's defaults, ``ccme.fit(formula, data,
seed=r)``), both arms and every V-point of the coverage study
(``coverage.py``: 100 outcome values), the 90% bias-reduced bands are
computed twice, with the simultaneous band studentised by each point's own
variance (``VARIANCE_WINDOW = 0``, as before 42f33ad) and by the variance
averaged over one read-out bandwidth (the default)::

    python benchmarks/inference/studentisation_dips.py --case categorical_v --n 2000 --reps 200

For the misses of the first band, at the outcome value where the smoothed
truth lies furthest outside it, the script reports

- the sign of the error (estimate − truth);
- the error in units of the root mean square, over the data sets, of the
  standard error at that (arm, V-point, y): how large the error is;
- the data set's own standard error there over that root mean square: how
  small the studentisation was;
- where on the curve it happened (that root mean square over its largest
  value along y: 1 at the body, small in the tails).

With a categorical V the undersmoothed refit has the fit's centre, so the
band is the fit's own sup-t band and these misses are its misses.  Output:
``results/studentisation_dips_<case>_<n>.txt``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
import ccme.bootstrap as bootstrap  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import LEVEL, smoothed, study_points  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _bands(res, v, y, arm: int, rep: int, window: float):
    original = bootstrap.VARIANCE_WINDOW
    bootstrap.VARIANCE_WINDOW = window
    try:
        return res.bands(LEVEL, newdata=v, arm=arm, y=y, n_boot=499, seed=rep)
    finally:
        bootstrap.VARIANCE_WINDOW = original


def run(case_name: str, n: int, reps: int) -> list[str]:
    case = get_case(case_name)
    v, y = study_points(case)
    err, se, half, covered, covered_window = [], [], [], [], []  # (reps, arms, V-points[, G])
    for rep in range(reps):
        data, _ = case.simulate(n, rep)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # clipping notes and the like: this run measures
            res = ccme.fit(case.formula, data, seed=rep)
        rows = [[], [], [], [], []]
        for arm in (1, 0):
            bandwidth = float(res.embedding(arm).y_kernel.bandwidth_array[0])
            target = smoothed(case.mixture(v, arm), bandwidth).density(y)
            own, averaged = (_bands(res, v, y, arm, rep, w) for w in (0.0, bootstrap.VARIANCE_WINDOW))
            rows[0].append(own.estimate - target)
            rows[1].append(own.se)
            rows[2].append((own.upper_simultaneous - own.lower_simultaneous) / 2)
            rows[3].append(((own.lower_simultaneous <= target) & (target <= own.upper_simultaneous)).all(axis=1))
            rows[4].append(((averaged.lower_simultaneous <= target)
                            & (target <= averaged.upper_simultaneous)).all(axis=1))
        for store, row in zip((err, se, half, covered, covered_window), rows):
            store.append(row)
        print(case_name, n, rep, flush=True)
    err, se, half, covered, covered_window = map(np.array, (err, se, half, covered, covered_window))
    rms = np.sqrt((se**2).mean(axis=0))  # (arms, V-points, G)
    anatomy = []
    for r, a, e in zip(*np.nonzero(~covered)):
        j = int(np.argmax(np.abs(err[r, a, e]) / half[r, a, e]))  # where the truth lies furthest outside
        anatomy.append((np.sign(err[r, a, e, j]), abs(err[r, a, e, j]) / rms[a, e, j], se[r, a, e, j] / rms[a, e, j],
                        rms[a, e, j] / rms[a, e].max()))
    anatomy = np.array(anatomy).reshape(-1, 4)
    q = (0.1, 0.5, 0.9)
    lines = [f"$ python benchmarks/inference/studentisation_dips.py --case {case_name} --n {n} --reps {reps}",
             f"simultaneous coverage, each point's own variance (window 0): {covered.mean():.3f}",
             f"simultaneous coverage, variance averaged over {bootstrap.VARIANCE_WINDOW:g} read-out bandwidth(s): "
             f"{covered_window.mean():.3f}",
             f"misses of the first: {len(anatomy)} (of {covered.size} bands)"]
    if len(anatomy):
        lines += [f"  estimate below the truth at the worst point: {np.mean(anatomy[:, 0] < 0):.2f}",
                  "  |error| / RMS standard error there, quantiles 10/50/90: "
                  + " ".join(f"{x:.2f}" for x in np.quantile(anatomy[:, 1], q)),
                  "  own standard error / RMS standard error there, 10/50/90: "
                  + " ".join(f"{x:.2f}" for x in np.quantile(anatomy[:, 2], q)),
                  "  RMS standard error there / its largest value along y, 10/50/90: "
                  + " ".join(f"{x:.2f}" for x in np.quantile(anatomy[:, 3], q))]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="categorical_v")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=200, help="data sets (seeds 0 .. reps-1)")
    args = p.parse_args(argv)
    lines = run(args.case, args.n, args.reps)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"studentisation_dips_{args.case}_{args.n}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
