"""Which outcome bandwidth should distribution functionals (CDF, quantiles, shortfalls) be read out with?

The read-out kernel of a fit is tuned for the *density* (bandwidth of order
n^(-1/5)).  A CDF, its quantiles and its expected shortfalls need no
smoothing for √n rates, and smoothing with the density's bandwidth biases
them by O(h²) (the smoothed law is the true one convolved with N(0, h²)).
This study fits each data set once with ccme's defaults and then computes
``res.effect`` (90%, q = 0.25/0.5/0.75, α = 0.1, 499 draws; as
``coverage.py``) with the distribution functionals read out by each of
``--factors``: ``fit``, the fit as it is (since 8e6ba50 the rule
:func:`ccme.tuning.distribution_kernel`, h · n^(−2/15)); ``density``, the
density's kernel h (the read-out before 8e6ba50); a number f, every
read-out bandwidth × f.  It records whether the intervals hold the *true*
mean difference, QTEs and expected-shortfall differences (closed forms),
their widths and the estimates' errors.  One JSON line per data set and
factor::

    python benchmarks/inference/distribution_readout.py --cases paper,mixture_v3 --n 2000 --reps 40 \
        --factors fit,0.5,0.25,0.1
    python benchmarks/inference/distribution_readout.py --cases hetero_v2,linear_v1,paper --n 10000 \
        --reps 100 --factors fit
    python benchmarks/inference/distribution_readout.py --summarise

Cases ``paper`` and ``mixture_v3`` are the zoo's "choose" split; ``hetero_v2``
and ``linear_v1`` are held out ("report").  The rule itself has no constant
that was chosen on data (the density's tuned bandwidth, the CDF's rate).
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
from ccme.kernels import Kernel  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import (ALPHA, LEVEL, Q, _commit, _means, quantiles, shortfalls,  # noqa: E402
                                          study_parser)
from benchmarks.inference.study_rows import append_row, read_rows  # noqa: E402

OUT = ROOT / "benchmarks" / "inference" / "results" / "distribution_readout.jsonl"


def read_out_at(res, factor: float):
    """``res`` with every arm's read-out bandwidth multiplied by ``factor``."""
    embeddings = {arm: emb.with_readout(Kernel(emb.y_kernel.name, tuple(h * factor for h in emb.y_kernel.bandwidth)))
                  for arm, emb in res.embeddings.items()}
    return dataclasses.replace(res, embeddings=embeddings)


def one_data_set(case, n: int, rep: int, v_points, factors) -> list:
    data, _ = case.simulate(n, rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(case.formula, data, seed=rep)
    mixes = {arm: case.mixture(v_points, arm) for arm in (1, 0)}
    box = np.concatenate([mixes[arm].limits(z=4.0) for arm in (1, 0)])
    lo, hi = box[:, 0].min() - 10 * np.ptp(box), box[:, 1].max() + 10 * np.ptp(box)
    true = {
        "mean_diff": np.array([a - b for a, b in zip(_means(mixes[1]), _means(mixes[0]))])[:, None],
        "qte": quantiles(mixes[1], Q, lo, hi) - quantiles(mixes[0], Q, lo, hi),
    }
    es = {arm: shortfalls(mixes[arm], ALPHA, lo, hi) for arm in (1, 0)}
    for tail in ("lower", "upper"):
        true[f"es_{tail}"] = (es[1][tail] - es[0][tail])[:, None]
    out = []
    for factor in factors:
        started = time.perf_counter()
        fitted = res if factor == "fit" else read_out_at(res, 1.0 if factor == "density" else float(factor))
        eff = fitted.effect(newdata=v_points, q=Q, alpha=(ALPHA,), level=LEVEL, n_boot=499, seed=rep)
        row = {"case": case.name, "n": n, "rep": rep, "factor": factor,
               "seconds": round(time.perf_counter() - started, 2), "ccme_commit": _commit()}
        profiles = list(dict.fromkeys(eff["profile"]))
        for term, truth in true.items():
            rows = eff[eff["term"] == term]
            at = [0] * len(rows) if term != "qte" else [Q.index(a) for a in rows["at"]]
            t = np.array([truth[profiles.index(p), j] for p, j in zip(rows["profile"], at)])
            row[f"{term}_covered"] = ((rows["conf_low"].to_numpy() <= t) & (t <= rows["conf_high"].to_numpy())).tolist()
            row[f"{term}_width"] = float((rows["conf_high"] - rows["conf_low"]).mean())
            row[f"{term}_bias"] = (rows["estimate"].to_numpy() - t).tolist()
        out.append(row)
    return out


def summarise(path: Path) -> str:
    rows = read_rows(path)
    groups = {}
    for row in rows:
        groups.setdefault((row["case"], row["n"], str(row["factor"])), []).append(row)
    lines = ["| case | n | factor | data sets | QTE | QTE width | ES⁻ diff | ES⁺ diff | ES width | mean diff |",
             "|" + "---|" * 10]
    for (case, n, factor), group in sorted(groups.items()):
        def cov(term):
            return np.mean([np.mean(r[f"{term}_covered"]) for r in group])

        def width(term):
            return np.mean([r[f"{term}_width"] for r in group])

        lines.append(f"| {case} | {n} | {factor} | {len(group)} | {cov('qte'):.3f} | {width('qte'):.3f} | "
                     f"{cov('es_lower'):.3f} | {cov('es_upper'):.3f} | {width('es_lower'):.3f} | {cov('mean_diff'):.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = study_parser(__doc__, OUT, cases="paper,mixture_v3", reps=20)
    parser.add_argument("--factors", default="fit,0.5,0.25,0.1",
                        help="read-out bandwidth factors; 'fit' is the fit as it is")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(args.out))
        return 0
    factors = args.factors.split(",")
    for name in args.cases.split(","):
        case = get_case(name)
        v_points = case.eval_points(3, seed=0)
        for rep in range(args.first, args.reps):
            rows = one_data_set(case, args.n, rep, v_points, factors)
            for row in rows:
                append_row(args.out, row)
            print(name, args.n, rep, [r["seconds"] for r in rows], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
