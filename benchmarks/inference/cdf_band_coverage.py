"""Coverage of the CDF bands, ``bands(feature="cdf")`` (issue 12): many simulated data sets, exact truth.

``coverage.py`` measures the density bands; this measures the bands of the
conditional CDF, which since 8e6ba50 is read out with its own, narrower
kernel (``res.embedding(arm).cdf_kernel``, :func:`ccme.tuning.distribution_kernel`).
Each data set is fitted with ccme's defaults; at the coverage study's 3
V-points and 100 outcome values (``coverage.py``), for both arms, the 90%
bias-aware bands (the default target) are checked against the smoothed CDF
E[K_F(y − Y^a) | v] (the mixture with h_F² added to every component's
variance: exact) and against the true CDF.  One JSON line per data set::

    python benchmarks/inference/cdf_band_coverage.py --cases paper,hetero_v2,linear_v1 --n 2000 --reps 100
    python benchmarks/inference/cdf_band_coverage.py --summarise

``--location`` is passed to ``fit(location=...)``: "default" (the package's
default: a location stage for 10 or more V covariates), "none", "linear" (a
location stage, README, "A location stage", whose bands are the residual
fit's at y − m̂_a(v)) or "auto".  Lines record ``location`` and whether the
fit ``located``, and are summarised apart by ``location``.  Lines without
``location`` were written before 2026-11-29, when this script passed
``location=None`` unless told otherwise: the plain fit, which is also the
default for the cases these studies used (fewer than 10 V covariates).

Nothing here was tuned: the bands are those of the density, read out with
the CDF's kernel.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import LEVEL, _commit, smoothed, study_parser, study_points  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows  # noqa: E402

OUT = ROOT / "benchmarks" / "inference" / "results" / "cdf_band_coverage.jsonl"


def one_data_set(case, n: int, rep: int, v_points, y: np.ndarray, location: str = "default") -> dict:
    data, _ = case.simulate(n, rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # clipping notes and the like: this run measures
        res = ccme.fit(case.formula, data, seed=rep, location=None if location == "none" else location)
    out = {"case": case.name, "n": n, "rep": rep, "ccme_commit": _commit(), "location": location,
           "located": res.location is not None}   # "auto" (and the default) may keep the plain fit
    started = time.perf_counter()
    for arm in (1, 0):
        mix = case.mixture(v_points, arm)
        h_cdf = float(res.embedding(arm).cdf_kernel.bandwidth_array[0])
        truths = {"smoothed": smoothed(mix, h_cdf).cdf(y), "true": mix.cdf(y)}
        b = res.bands(LEVEL, newdata=v_points, arm=arm, y=y, feature="cdf", n_boot=499, seed=rep)
        for name, truth in truths.items():
            key = f"arm{arm}_{name}"
            out[key + "_pointwise"] = ((b.lower <= truth) & (truth <= b.upper)).mean(axis=1).tolist()
            out[key + "_simultaneous"] = ((b.lower_simultaneous <= truth)
                                          & (truth <= b.upper_simultaneous)).all(axis=1).astype(float).tolist()
        out[f"arm{arm}_width"] = (b.upper - b.lower).mean(axis=1).tolist()
    out["bands_seconds"] = round(time.perf_counter() - started, 2)
    return out


def summarise(path: Path) -> str:
    rows = read_rows(path)
    rows = list({(r["case"], r["n"], r["rep"], r.get("location")): r for r in rows}.values())  # resumed shards
    groups = {}
    for row in rows:
        label = row["case"] + (f" (location={row['location']})" if "location" in row else "")
        groups.setdefault((label, row["n"]), []).append(row)
    lines = ["| case | n | data sets | pointwise, smoothed | simultaneous, smoothed | pointwise, true CDF "
             "| simultaneous, true CDF | mean width |", "|" + "---|" * 8]
    for (case, n), group in sorted(groups.items()):
        def mean(key):
            return float(np.mean([np.mean(r[f"arm{a}_{key}"]) for r in group for a in (1, 0)]))

        lines.append(f"| {case} | {n} | {len(group)} | {mean('smoothed_pointwise'):.3f} | "
                     f"{mean('smoothed_simultaneous'):.3f} | {mean('true_pointwise'):.3f} | "
                     f"{mean('true_simultaneous'):.3f} | {mean('width'):.4f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = study_parser(__doc__, OUT)
    parser.add_argument("--location", default="default", choices=["default", "none", "linear", "auto"],
                        help="fit(location=...): the package's default, none, or a location stage")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(args.out))
        return 0
    for name in args.cases.split(","):
        case = get_case(name)
        v_points, y = study_points(case)
        for rep in range(args.first, args.reps):
            row = one_data_set(case, args.n, rep, v_points, y, args.location)
            append_row(args.out, row)
            print(name, args.n, rep, f"bands {row['bands_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
