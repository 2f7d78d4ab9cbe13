"""Sampling weights on a survey sample: the weighted fit's error against the population truth, and the unweighted one's.

    python benchmarks/sampling_weights.py [--n 2000] [--seeds 1 2 3 4 5] [--tune auto]
    python benchmarks/sampling_weights.py --coverage 100 [--n 1000] [--baseline]
    python benchmarks/sampling_weights.py --effects 60 [--n 1000] [--baseline]

The case is ``benchmarks/accuracy/survey.py`` (``SurveyV1``): inclusion in the
sample depends on a confounder U outside V, so the sample's p(Y^a | V) is not
the population's.  For each seed both fits (``ccme.fit``'s defaults, the
weighted one with ``weights="w"``) are scored by the zoo's metric, the mean
over 300 V-points of ∫ (p̂ − p)² dy against the population's exact density
(``benchmarks/accuracy/metrics.py``), per arm; the table prints the errors and
their ratio (weighted / unweighted).  The issue's target: ratio ≤ 0.7.

``--coverage R``: R draws of the survey case; on each, the 90 % pointwise and
simultaneous bands (``res.bands()``, the default bias-aware "smoothed"
target, 199 draws) at V = −1, 0, 1 over 25 outcome values, for the weighted
and the unweighted fit, against the population's kernel-smoothed density,
exact here: N(a + v, 1.25) smoothed by the arm's Gaussian read-out kernel of
bandwidth σ is N(a + v, 1.25 + σ²).  Prints the share of covered points
(pointwise) and of covered curves (simultaneous) per arm.  ``--baseline``:
instead, simple random samples of the population (no selection, no weights)
and the unweighted fit, the same bands and truth: the calibration the
package's bands have on this design without weights.

``--effects R``: the same draws, the 90 % intervals of ``res.effect()`` (199
draws) for the mean difference and the median QTE at V = −1, 0, 1, whose
population values are both exactly 1 (the arms' laws are N(a + v, 1.25),
symmetric, so smoothing by a symmetric read-out kernel keeps their mean and
median); the share of covered intervals, weighted fits (or ``--baseline``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ccme  # noqa: E402
from benchmarks.accuracy.metrics import ise, outcome_grid  # noqa: E402
from benchmarks.accuracy.survey import SurveyV1  # noqa: E402


def errors(n: int, seed: int, tune="auto", eval_points: int = 300) -> dict:
    """{(weighted, arm): mean ISE against the population truth} for one draw of the survey case."""
    case = SurveyV1()
    data, formula = case.draw(n, seed)
    v = case.eval_points(eval_points, seed + 10_000)
    grid = outcome_grid(case, data, v)
    out = {}
    for weighted in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # clipping notes: the same in both fits
            res = ccme.fit(formula, data, seed=seed, tune=tune, weights=case.weights if weighted else None)
        for arm in (1, 0):
            estimate = res.density(grid.points, newdata=v, arm=arm)
            out[(weighted, arm)] = float(np.mean(ise(estimate, case.density(grid.points, v, arm), grid)))
    return out


def coverage(n: int, reps: int, tune="auto", level: float = 0.9, baseline: bool = False) -> dict:
    """{(weighted, arm): (pointwise coverage, simultaneous coverage)} of the bands over ``reps`` draws.

    ``baseline``: simple random samples of the population, fitted without weights (key ("srs", arm)).
    """
    from benchmarks.accuracy._base import SyntheticCase

    import pandas as pd
    from scipy.stats import norm

    case = SurveyV1()
    v = pd.DataFrame({"v": [-1.0, 0.0, 1.0]})
    hits = {}
    for rep in range(reps):
        if baseline:
            data, formula = SyntheticCase.simulate(case, n, 1000 + rep)[0], case.formula
        else:
            data, formula = case.draw(n, 1000 + rep)
        for weighted in ((False,) if baseline else (True, False)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ccme.fit(formula, data, seed=rep, tune=tune, weights=case.weights if weighted else None)
            for arm in (1, 0):
                y = np.linspace(arm - 3.5, arm + 3.5, 25)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    b = res.bands(level, newdata=v, arm=arm, y=y, n_boot=199, seed=rep)
                sigma = float(res.embedding(arm).y_kernel.bandwidth_array[0])
                truth = norm.pdf(y[None, :], loc=arm + v["v"].to_numpy()[:, None], scale=np.sqrt(1.25 + sigma**2))
                point = (b.lower <= truth) & (truth <= b.upper)
                curve = np.all((b.lower_simultaneous <= truth) & (truth <= b.upper_simultaneous), axis=1)
                acc = hits.setdefault(("srs" if baseline else weighted, arm), [0.0, 0.0, 0])
                acc[0] += point.mean()
                acc[1] += curve.mean()
                acc[2] += 1
    return {key: (p / k, c / k) for key, (p, c, k) in hits.items()}


def effect_coverage(n: int, reps: int, tune="auto", level: float = 0.9, baseline: bool = False) -> dict:
    """{term: share of the ``level`` intervals covering 1} for the weighted fit (or the ``baseline``)."""
    import pandas as pd

    from benchmarks.accuracy._base import SyntheticCase

    case = SurveyV1()
    v = pd.DataFrame({"v": [-1.0, 0.0, 1.0]})
    hits = {"mean_diff": [], "qte": []}
    for rep in range(reps):
        if baseline:
            data = SyntheticCase.simulate(case, n, 1000 + rep)[0]
        else:
            data = case.draw(n, 1000 + rep)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(case.formula, data, seed=rep, tune=tune, weights=None if baseline else case.weights)
            table = res.effect(newdata=v, q=[0.5], alpha=[], level=level, n_boot=199, seed=rep)
        for term in hits:
            rows = table[table["term"] == term]
            hits[term].extend(((rows["conf_low"] <= 1.0) & (1.0 <= rows["conf_high"])).tolist())
    return {term: float(np.mean(values)) for term, values in hits.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--tune", default="auto", choices=["auto", "none"])
    parser.add_argument("--coverage", type=int, default=0, help="draws of the band-coverage study (0: none)")
    parser.add_argument("--baseline", action="store_true", help="the coverage study on simple random samples")
    parser.add_argument("--effects", type=int, default=0, help="draws of the effect-interval study (0: none)")
    args = parser.parse_args(argv)
    if args.effects:
        started = time.perf_counter()
        result = effect_coverage(args.n, args.effects, args.tune, baseline=args.baseline)
        what = "simple random samples, no weights" if args.baseline else "survey samples, weighted fit"
        print(f"survey_v1, n = {args.n}, {args.effects} draws ({what}): coverage of the 90 % effect intervals "
              "at V = -1, 0, 1 (truth 1): " + ", ".join(f"{k} {v:.3f}" for k, v in result.items())
              + f" ({time.perf_counter() - started:.0f} s)")
        return
    if args.coverage:
        started = time.perf_counter()
        result = coverage(args.n, args.coverage, args.tune, baseline=args.baseline)
        print(f"survey_v1, n = {args.n}, {args.coverage} draws: coverage of the 90 % bands (smoothed target) of "
              "the population's smoothed density at V = -1, 0, 1")
        names = {True: "weighted", False: "unweighted", "srs": "SRS, no weights"}
        for (kind, arm), (point, sim) in result.items():
            print(f"  {names[kind]:>15} arm {arm}: pointwise {point:.3f}, simultaneous {sim:.3f}")
        print(f"({time.perf_counter() - started:.0f} s)")
        return
    print(f"survey_v1, n = {args.n}, tune = {args.tune!r}: mean ISE against the population truth")
    print(f"{'seed':>4} {'arm':>3} {'weighted':>10} {'unweighted':>10} {'ratio':>6}")
    ratios = []
    started = time.perf_counter()
    for seed in args.seeds:
        e = errors(args.n, seed, args.tune)
        for arm in (1, 0):
            ratio = e[(True, arm)] / e[(False, arm)]
            ratios.append(ratio)
            print(f"{seed:>4} {arm:>3} {e[(True, arm)]:>10.5f} {e[(False, arm)]:>10.5f} {ratio:>6.3f}")
    print(f"ratio: geometric mean {np.exp(np.mean(np.log(ratios))):.3f}, max {max(ratios):.3f} "
          f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
