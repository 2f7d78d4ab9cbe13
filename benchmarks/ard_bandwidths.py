"""Per-group (ARD) X/V bandwidths and categorical kernels: accuracy and time, before vs after.

"before" is the previous default: X and V bandwidths by the median heuristic
on standardised columns (one bandwidth per indicator column of a categorical),
λ₀, λ₁ and σ_y tuned; "after" is the current default ``tune="auto"``, which
also learns one bandwidth per covariate group (a categorical's indicators
together, with Li and Racine's kernel) by the leave-one-out coordinate search
of :mod:`ccme.tuning`.  Ridge DR, random-forest propensity, 2 folds.

Cases (each with an exact conditional density):

- ``paper``: the paper's simulation, V = x1..x5, X = x1..x10;
- ``paper+noise``: the same with 10 independent N(0, 1) columns e1..e10
  appended to V (hence to X); they enter neither A nor Y, so p(Y^a | V) is
  still the paper's density of x1..x5;
- ``categorical``: V = one categorical g with 4 levels that shifts the
  outcome's mean (and the effect), confounders x1, x2 outside V;
  Y^a | g = N(m_a(g), 2.25) exactly;
- ``composition``: V = one categorical site s with 8 levels that acts only
  through the make-up of its units: the confounders w1, w2 outside V have
  site-specific means, Y^a depends on them and not on s, so given X the
  site is irrelevant (stage 1 pools it) while p(Y^a | s) differs from site
  to site; Y^a | s = N(b_a·m(s), |b_a|² + 1) exactly.

Integrated squared error: mean over 1000 fresh V-points (the categorical:
its four levels, weighted by their probabilities) of ∫ (p̂ − p)² dy on 1000
points over [min Y − 2, max Y + 2] (as ``ccme.datasets.paper_simulation_ise``).

    python benchmarks/ard_bandwidths.py                 # the table (n = 2000, 4000; 3 seeds)
    python benchmarks/ard_bandwidths.py --timing        # default fits at n = 4000 and 20000, before vs after
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from scipy.stats import norm

import ccme
from ccme.formula import build_design, parse_formula
from ccme.kernels import median_bandwidth

PAPER = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
NOISE = ("y ~ a | x1 + x2 + x3 + x4 + x5 + " + " + ".join(f"e{j}" for j in range(1, 11))
         + " | x6 + x7 + x8 + x9 + x10")
CATEGORICAL = "y ~ a | g | x1 + x2"
LEVELS = np.array(["a", "b", "c", "d"])
LEVEL_P = np.array([0.4, 0.3, 0.2, 0.1])
SHIFT = np.array([0.0, 1.5, 3.0, 4.5])
EFFECT = np.array([1.0, 2.0, 1.0, 0.0])


COMPOSITION = "y ~ a | s | w1 + w2"
SITES = np.array([f"s{j}" for j in range(1, 9)])
SITE_P = np.array([0.2, 0.15, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1])
SITE_MEANS = np.array([[-1.2, 0.5], [-0.6, -0.8], [0.0, 1.0], [0.4, -0.3], [0.8, 0.6], [1.2, -1.0],
                       [-0.3, 0.0], [1.6, 1.2]])
SLOPES = {0: np.array([1.0, 0.8]), 1: np.array([1.0, 1.3])}     # Y^a = a + SLOPES[a]·w + N(0, 1)


def paper_noise(n, seed):
    data = ccme.datasets.paper_simulation(n, seed=seed)
    noise = np.random.default_rng([seed, 99]).normal(size=(n, 10))
    return pd.concat([data, pd.DataFrame(noise, columns=[f"e{j}" for j in range(1, 11)])], axis=1)


def categorical(n, seed):
    rng = np.random.default_rng([seed, 7])
    code = rng.choice(4, size=n, p=LEVEL_P)
    x1, x2 = rng.normal(size=(2, n))
    a = rng.binomial(1, 1 / (1 + np.exp(-(1.2 * x1 - 0.4 + 0.3 * code))))
    y0 = SHIFT[code] + x1 + 0.5 * x2 + rng.normal(size=n)     # given g: N(SHIFT, 1 + 0.25 + 1)
    y1 = y0 + EFFECT[code]
    return pd.DataFrame({"y": np.where(a == 1, y1, y0), "a": a, "g": LEVELS[code], "x1": x1, "x2": x2})


def composition(n, seed):
    rng = np.random.default_rng([seed, 11])
    code = rng.choice(len(SITES), size=n, p=SITE_P)
    w = SITE_MEANS[code] + rng.normal(size=(n, 2))
    a = rng.binomial(1, 1 / (1 + np.exp(-(0.9 * w[:, 0] - 0.6 * w[:, 1] + 0.2 * (code % 3) - 0.3))))
    eps = rng.normal(size=n)
    y0, y1 = w @ SLOPES[0] + eps, 1.0 + w @ SLOPES[1] + eps
    return pd.DataFrame({"y": np.where(a == 1, y1, y0), "a": a, "s": SITES[code], "w1": w[:, 0], "w2": w[:, 1]})


def _grid(res):
    return np.linspace(res.design.Y.min() - 2.0, res.design.Y.max() + 2.0, 1000)


def ise_noise(res, arm):
    grid = _grid(res)
    rng = np.random.default_rng(0)
    V = rng.normal(1.0, 1.0, size=(1000, 5))
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, 6)])
    for j in range(1, 11):
        newdata[f"e{j}"] = rng.normal(size=1000)
    estimate = res.density(grid, newdata=newdata, arm=arm)
    truth = ccme.datasets.paper_simulation_density(grid, V, arm=arm)
    return float(np.mean(np.trapezoid((estimate - truth) ** 2, grid, axis=1)))


def _ise_by_level(res, arm, column, levels, probabilities, mean, sd):
    """The ISE at each level of a one-column categorical V against N(mean, sd²), weighted by the levels' probabilities."""
    grid = _grid(res)
    estimate = res.density(grid, newdata=pd.DataFrame({column: levels}), arm=arm)
    truth = norm.pdf(grid[None, :], mean[:, None], sd)
    return float(probabilities @ np.trapezoid((estimate - truth) ** 2, grid, axis=1))


def ise_categorical(res, arm):
    return _ise_by_level(res, arm, "g", LEVELS, LEVEL_P, SHIFT + (EFFECT if arm == 1 else 0.0), np.sqrt(2.25))


def ise_composition(res, arm):
    return _ise_by_level(res, arm, "s", SITES, SITE_P, float(arm) + SITE_MEANS @ SLOPES[arm],
                         np.sqrt(SLOPES[arm] @ SLOPES[arm] + 1.0))


CASES = {
    "paper": (lambda n, s: ccme.datasets.paper_simulation(n, seed=s), PAPER,
              lambda res, arm: ccme.datasets.paper_simulation_ise(res, arm=arm)),
    "paper+noise": (paper_noise, NOISE, ise_noise),
    "categorical": (categorical, CATEGORICAL, ise_categorical),
    "composition": (composition, COMPOSITION, ise_composition),
}


def before_options(formula, data, seed):
    """The previous default: ``tune="auto"`` with the X and V bandwidths set to the median rule (so not tuned).

    A categorical's indicator columns get the previous per-column rule (each
    standardised on its own), passed as explicit bandwidths.
    """
    design = build_design(parse_formula(formula, data.columns), data)
    if all(kind == "numeric" for kind in design.x_kinds):
        return {"x_bandwidth": "median", "v_bandwidth": "median"}
    return {"x_bandwidth": median_bandwidth(design.X), "v_bandwidth": median_bandwidth(design.V)}


def fit(formula, data, seed, variant, cpu=False):
    """The fit and its wall-clock seconds (with ``cpu``: also the process's CPU seconds, all threads)."""
    options = before_options(formula, data, seed) if variant == "before" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        started, cpu_started = time.perf_counter(), time.process_time()
        res = ccme.fit(formula, data, propensity="forest", seed=seed, **options)
    seconds = time.perf_counter() - started
    return (res, seconds, time.process_time() - cpu_started) if cpu else (res, seconds)


def accuracy(sizes, seeds, cases):
    rows = []
    for case in cases:
        make, formula, ise = CASES[case]
        for n in sizes:
            for seed in seeds:
                data = make(n, seed)
                for variant in ("before", "after"):
                    res, seconds = fit(formula, data, seed, variant)
                    rows.append({"case": case, "n": n, "seed": seed, "variant": variant, "ise1": ise(res, 1),
                                 "ise0": ise(res, 0), "tuning_s": res.timing["tuning"], "fit_s": seconds})
                    print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    table = frame.groupby(["case", "n", "variant"], sort=False)[["ise1", "ise0", "tuning_s", "fit_s"]].mean()
    wide = table.unstack("variant")
    wide = wide.reindex(columns=pd.MultiIndex.from_product([["ise1", "ise0", "tuning_s", "fit_s"],
                                                            ["before", "after"]]))
    print(f"\nmean over seeds {list(seeds)} (ridge DR, forest propensity, 2 folds)")
    print(wide.to_string(float_format=lambda x: f"{x:.4g}"))
    return frame


def timing(sizes):
    """Default fits of the paper's simulation, before and after in turn (wall clock and CPU time, all threads)."""
    import os

    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    for n in sizes:
        data = ccme.datasets.paper_simulation(n, seed=1)
        for variant in ("before", "after", "before", "after"):
            res, seconds, cpu = fit(PAPER, data, 1, variant, cpu=True)
            print(f"n = {n:6d}  {variant:6s}  fit {seconds:7.1f} s (CPU {cpu:7.1f} s)  "
                  f"tuning {res.timing['tuning']:6.1f} s  "
                  f"ISE {ccme.datasets.paper_simulation_ise(res, arm=1):.5f} / "
                  f"{ccme.datasets.paper_simulation_ise(res, arm=0):.5f}"
                  + "".join(f"  [{note}]" for note in res.tuning.notes if "bandwidths:" in note), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timing", action="store_true", help="time default fits at n = 4000 and 20000 instead")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    if args.timing:
        timing(args.sizes or [4000, 20000])
    else:
        accuracy(args.sizes or [2000, 4000], args.seeds, args.cases)


if __name__ == "__main__":
    main()
