"""The second stage's own bias in the effect intervals' centre, computed exactly per data set (issue 12).

``interval_diagnosis.py`` measures the bias of the mean-difference intervals'
centre over many data sets; with the true propensity scores (``--propensity
true``) some of it remains, so it arises in the second stage.  This script
computes that part exactly, one data set at a time, without Monte Carlo over
the outcomes.

With the true propensity the doubly robust pseudo-outcome ξ̂_i is unbiased given
X_i, so given the design the centre of arm a at v,
Σ_i β_m,i(v) ξ̂_i / Σ_i β_m,i(v) (the mass-normalised first moment; β_m the
weights of iterated Tikhonov of order m, :func:`ccme.bootstrap.iterated_tikhonov`,
summed over the folds), has expectation Σ_i β_m,i(v) m_a(V_i) / Σ_i β_m,i(v),
m_a(v) = E[Y^a | V = v], which the case knows exactly.  Its difference from
m_a(v), for a = 1 minus a = 0, is the centre's bias given the design and the
tuned hyperparameters: the V-smoothing bias the bias-aware centre leaves.  Over
the data sets its mean is the centre's second-stage bias and its standard
deviation the part of the centre's spread that comes from the design and the
tuning, which a multiplier bootstrap given the design does not see.

The fit has one second-stage penalty (``ccme.tuning.PLUGIN_PENALTY_SEARCH``
off): with the plug-in part smoothed at its own λ₁ᵖ, its conditional mean
needs E[μ̂₀(X) | V], which is not known in closed form.  On mixture_v3 at
n = 10000 (40 data sets, ``interval_diagnosis.py``) the two gave the same
centre bias (−0.056 / −0.030 / −0.063 with one penalty, −0.052 / −0.026 /
−0.063 with the split).

Each construction is the second stage refitted with its V bandwidths ×
``factor`` (λ₁ kept; :meth:`ccme.estimators.base.LinearSecondStage.undersmoothed`)
and iterated Tikhonov of ``order``; (1, 20) is the default centre
(:data:`ccme.bootstrap.BAND_ORDER`), (1, 1) the plain estimate.  Besides the
bias, each row has √Σ_i β_m,i(v)² (over both arms' units), the factor of the
centre's standard error for pseudo-outcomes of equal variance: its ratio to
the default's says how much wider intervals from that construction would
be.  The summary also splits the default's bias by whether the tuning dropped
a V group (:func:`ccme.bootstrap.restored_v_bandwidths`; the rows were
computed before the bands and intervals gave dropped groups back, and these
fits' own bias is what it measures).  Resumable, one JSON line per data set::

    python benchmarks/inference/centre_bias.py --cases mixture_v3,hetero_v2 --n 10000 --reps 40
    python benchmarks/inference/centre_bias.py --summarise
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
import ccme.tuning  # noqa: E402
from ccme.bootstrap import BAND_ORDER, _linear_parts, iterated_tikhonov, simultaneous_v_factor  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import _means, study_parser, study_points  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "centre_bias.jsonl"

#: (V-bandwidth factor, Tikhonov order) of each construction; "n" is the simultaneous bands' n^(−1/11).
CONSTRUCTIONS = ((1.0, 1), (1.0, BAND_ORDER), (1.0, 80), (0.75, BAND_ORDER), (0.6, BAND_ORDER), ("n", BAND_ORDER))


def _label(factor, order) -> str:
    return f"h x {'n^(-1/11)' if factor == 'n' else factor}, order {order}"


def centre_bias(res, case, data, v_points, factor: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """(bias of the mean difference's centre at the V-points given the design, √Σβ²) for one construction."""
    V_eval = res.embedding(1)._v(v_points)
    bias, sum_sq = np.zeros(len(v_points)), np.zeros(len(v_points))
    for arm, sign in ((1, 1.0), (0, -1.0)):
        parts = _linear_parts(res, arm)
        num, mass = np.zeros(len(v_points)), np.zeros(len(v_points))
        for terms in parts:
            (part,) = terms  # one penalty: one term per fold-arm
            if factor != 1.0:
                part = part.undersmoothed(factor, 1.0, res.design.V[part.units], 1)
            beta = iterated_tikhonov(part, part.beta(V_eval, 1) / len(parts), order, 1)
            units_v = data.iloc[part.units][case.v_columns].reset_index(drop=True)
            num += beta.T @ _means(case.mixture(units_v, arm))
            mass += beta.sum(axis=0)
            sum_sq += (beta**2).sum(axis=0)
        bias += sign * (num / mass - _means(case.mixture(v_points, arm)))
    return bias, np.sqrt(sum_sq)


def one_data_set(case, n: int, rep: int) -> dict:
    data, _ = case.simulate(n, rep)
    v_points, _ = study_points(case)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # clipping notes: not what this run measures
        res = ccme.fit(case.formula, data, seed=rep, propensity=np.asarray(case.propensity(data), dtype=float))
    row = {"case": case.name, "n": n, "rep": rep,
           "v_factors": {r["group"]: (None if r["dropped"] else r["factor"])
                         for r in res.tuning.relevance if r["role"] == "V"}}
    for factor, order in CONSTRUCTIONS:
        f = simultaneous_v_factor(n) if factor == "n" else factor
        bias, root = centre_bias(res, case, data, v_points, f, order)
        row[_label(factor, order)] = {"bias": bias.tolist(), "root_sum_sq": root.tolist()}
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def summarise(path: Path) -> str:
    rows = read_rows(path)
    lines = []
    default = _label(1.0, BAND_ORDER)
    for case, n in sorted({(r["case"], r["n"]) for r in rows}):
        group = [r for r in rows if (r["case"], r["n"]) == (case, n)]
        lines.append(f"== {case}, n = {n}: {len(group)} data sets (true propensity, one second-stage penalty)")
        base = np.array([r[default]["root_sum_sq"] for r in group]).mean(axis=0)
        for factor, order in CONSTRUCTIONS:
            key = _label(factor, order)
            bias = np.array([r[key]["bias"] for r in group])
            width = np.array([r[key]["root_sum_sq"] for r in group]).mean(axis=0) / base
            lines.append(f"   {key:<25} bias" + "".join(f"{x:>8.3f}" for x in bias.mean(axis=0))
                         + "   sd over data sets" + "".join(f"{x:>7.3f}" for x in bias.std(axis=0, ddof=1))
                         + "   width / default" + "".join(f"{x:>6.2f}" for x in width))
        for label, subset in (("with a V group dropped", [r for r in group if None in r["v_factors"].values()]),
                              ("with none dropped", [r for r in group if None not in r["v_factors"].values()])):
            if subset:
                bias = np.array([r[default]["bias"] for r in subset]).mean(axis=0)
                lines.append(f"   {default}, {len(subset)} data sets {label}: bias"
                             + "".join(f"{x:>8.3f}" for x in bias))
        factors = {g: [r["v_factors"][g] for r in group] for g in group[0]["v_factors"]}
        lines.append("   tuned V-bandwidth factors (median; data sets with the group dropped): "
                     + ", ".join(f"{g} {np.median([f for f in fs if f is not None]):.2f} ({sum(f is None for f in fs)})"
                                 for g, fs in factors.items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = study_parser(__doc__, OUT, cases="mixture_v3", reps=40).parse_args(argv)
    if args.summarise:
        print(summarise(args.out))
        return 0
    ccme.tuning.PLUGIN_PENALTY_SEARCH = False
    for name in args.cases.split(","):
        case = get_case(name)
        done = {r["rep"] for r in read_rows(args.out) if (r["case"], r["n"]) == (case.name, args.n)}
        for rep in range(args.first, args.reps):
            if rep not in done:
                row = one_data_set(case, args.n, rep)
                append_row(args.out, row)
                print(case.name, args.n, rep, f"{row['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
