"""Calibration of the multiplier bootstrap: size and power of ``test_effect``, coverage of ``bands``.

Run from the repository root (each part prints one JSON line per setting;
long: run it in the background)::

    PYTHONPATH=src nohup python benchmarks/calibration.py size  > /tmp/cal-size.log &
    PYTHONPATH=src nohup python benchmarks/calibration.py power > /tmp/cal-power.log &
    PYTHONPATH=src nohup python benchmarks/calibration.py shift > /tmp/cal-shift.log &
    PYTHONPATH=src nohup python benchmarks/calibration.py bands > /tmp/cal-bands.log &
    PYTHONPATH=src nohup python benchmarks/calibration.py effects > /tmp/cal-effects.log &
    PYTHONPATH=src nohup python benchmarks/calibration.py shape > /tmp/cal-shape.log &

Fits use the fixed default hyperparameters (``tune="none"``), so the numbers
describe the bootstrap, not the tuning; ``--defaults`` fits as a user would (ccme's
tuning and default propensity), which is what the README's tables of the defaults report.  ``size`` and ``power`` use :func:`scale_data` (confounded, V = x1; Y¹ has
``scale`` times the noise of Y⁰ and the same mean, so only a distributional
test can see the effect; ``scale = 1`` is the null).  ``bands`` uses the
paper's simulation and the smoothed target E[k(Y¹, y) | V = v] computed from
the exact density (:func:`smoothed_target`).  ``effects`` measures the
coverage of the intervals of ``effect()`` on :func:`scale_data` (scale 1.5,
exact effects by :func:`scale_effects`), of the true and of the smoothed effects.
``--location linear`` fits with a location stage (the mean of Y^a given x1 is
linear here, so the residual's law does not depend on V), for every part
but ``bands``::

    PYTHONPATH=src nohup python benchmarks/calibration.py size --location linear > /tmp/cal-size-loc.log &
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation, paper_simulation_density

SCALE_FORMULA = "y ~ a | x1 | x2 + x3"
PAPER_FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
SCALE_PROFILES = pd.DataFrame({"x1": [-1.0, 0.0, 1.0]}, index=["x1=-1", "x1=0", "x1=1"])


def scale_data(n: int, scale: float, seed, shift: float = 0.0) -> pd.DataFrame:
    """X ~ N(0, I₃), π(X) = expit(0.7 x1 − 0.7 x2), Y⁰ = x1 + x2 + ε, Y¹ = x1 + x2 + shift + scale·ε, ε ~ N(0, 1).

    x2 confounds (it drives both the treatment and the outcome); given V = x1
    the arms have the same law iff ``scale == 1`` and ``shift == 0``; the
    effect is a pure location shift iff ``scale == 1``; Y¹ dominates Y⁰ iff
    ``scale == 1`` and ``shift >= 0``.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    a = rng.binomial(1, expit(0.7 * X[:, 0] - 0.7 * X[:, 1]))
    eps = rng.standard_normal(n)
    base = X[:, 0] + X[:, 1]
    y = np.where(a == 1, base + shift + scale * eps, base + eps)
    return pd.DataFrame({"y": y, "a": a, "x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2]})


#: Options every fit of a run adds (``--first-stage``).
FIT_EXTRA: dict = {}


def fit_options(defaults: bool, location=None, propensity: str = "logistic") -> dict:
    """ccme.fit's options: a user's (tuning, default propensity) if ``defaults``, else ``tune="none"`` and
    ``propensity``; plus :data:`FIT_EXTRA`."""
    if defaults:
        return {"location": location, **FIT_EXTRA}
    return {"propensity": propensity, "tune": "none", "location": location, **FIT_EXTRA}


def rejection_rates(n: int, scale: float, reps: int, *, n_boot: int = 199, n_global: int = 20, seed0: int = 0,
                    shift: float = 0.0, location=None, v: str = "x1", defaults: bool = False):
    """Fraction of ``reps`` fits whose p-values fall at or below 0.05 and 0.10 (global and at ``v`` = 0).

    ``v``: the covariate in V (the others outside it); "x2" puts the confounder x2 inside V and x1, which also
    drives the treatment, outside: another design for the same null.  ``defaults``: fit as a user would, with
    ccme's tuning and default propensity (else ``tune="none"`` and a logistic propensity, the bootstrap alone).
    """
    how = fit_options(defaults, location)
    formula = f"y ~ a | {v} | " + " + ".join(c for c in ("x1", "x2", "x3") if c != v)
    pglob, ppoint = [], []
    for r in range(reps):
        data = scale_data(n, scale, seed0 + r, shift=shift)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(formula, data, seed=seed0 + r, **how)
            test = res.test_effect(n_boot=n_boot, n_global=n_global)
            point = res.test_effect(newdata=pd.DataFrame({v: [0.0]}, index=[f"{v}=0"]), n_boot=n_boot)
        pglob.append(test.p_value)
        ppoint.append(point.p_value)
    pglob, ppoint = np.array(pglob), np.array(ppoint)
    return {
        "n": n, "scale": scale, "shift": shift, "v": v, "defaults": defaults, "reps": reps, "n_boot": n_boot,
        "global_0.05": float(np.mean(pglob <= 0.05)), "global_0.10": float(np.mean(pglob <= 0.10)),
        "point_0.05": float(np.mean(ppoint <= 0.05)), "point_0.10": float(np.mean(ppoint <= 0.10)),
    }


def smoothed_target(y: np.ndarray, profiles: pd.DataFrame, sigma: float, arm: int = 1, feature: str = "density"):
    """E[k_σ(Y^a − y) | V = v] (density) or E[Φ((y − Y^a)/σ) | V = v] (cdf) of the paper's simulation.

    The exact conditional density convolved with the normalised Gaussian
    kernel (or its CDF), by the trapezoid rule on a grid of step σ/20 over
    [−40, 80], which holds the mixture's mass up to < 1e-12.
    """
    t = np.arange(-40.0, 80.0, sigma / 20)
    p = paper_simulation_density(t, profiles, arm=arm)  # (n_v, T)
    u = (y[:, None] - t[None, :]) / sigma
    K = norm.pdf(u) / sigma if feature == "density" else norm.cdf(u)
    w = np.full(len(t), t[1] - t[0])
    w[[0, -1]] /= 2
    return (p * w) @ K.T


def band_coverage(n: int, reps: int, *, feature: str = "density", level: float = 0.9, n_boot: int = 299,
                  seed0: int = 0, grid_size: int = 100, defaults: bool = False):
    """Coverage of the smoothed target by the bands at the paper's profiles (arm 1)."""
    point, simultaneous, widths = [], [], []
    for r in range(reps):
        data = paper_simulation(n, seed=seed0 + r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(PAPER_FORMULA, data, seed=seed0 + r, **fit_options(defaults, propensity="forest"))
            y = np.linspace(-5.0, 45.0, grid_size)
            b = res.bands(level, newdata=PAPER_PROFILES, arm=1, y=y, feature=feature, n_boot=n_boot)
        # The band's own read-out kernel: the CDF's is narrower than the density's (ccme.tuning.distribution_kernel).
        sigma = res.embedding(1).readout_kernel(feature).bandwidth_array[0]
        target = smoothed_target(y, PAPER_PROFILES, sigma, 1, feature)
        inside = (b.lower <= target) & (target <= b.upper)
        inside_s = (b.lower_simultaneous <= target) & (target <= b.upper_simultaneous)
        point.append(inside.mean(axis=1))
        simultaneous.append(inside_s.all(axis=1))
        widths.append((b.upper - b.lower).mean(axis=1))
    point, simultaneous = np.array(point), np.array(simultaneous)
    return {
        "n": n, "reps": reps, "feature": feature, "level": level, "n_boot": n_boot, "defaults": defaults,
        "pointwise_coverage": point.mean(axis=0).round(4).tolist(),
        "simultaneous_coverage": simultaneous.mean(axis=0).round(4).tolist(),
        "mean_width": np.mean(widths, axis=0).round(5).tolist(), "profiles": list(PAPER_PROFILES.index),
    }


def scale_effects(v: np.ndarray, scale: float, y: np.ndarray, q: np.ndarray, widen=(0.0, 0.0), rkhs: float = 1.0):
    """Exact effects of :func:`scale_data` at V = x1 = v: Y⁰ | v ~ N(v, 2), Y¹ | v ~ N(v, 1 + scale²).

    ``widen`` = (σ₁, σ₀) adds the arms' read-out kernel variances (the smoothed
    targets the estimates converge to at fixed bandwidths); the MMD uses the
    normalised Gaussian kernel of bandwidth ``rkhs``:
    E k(Y, Y') = 1 / √(2π(σ² + a² + b²)) for independent N(·, a²), N(·, b²) of equal means.
    """
    s1 = np.sqrt(1.0 + scale**2 + widen[0] ** 2)
    s0 = np.sqrt(2.0 + widen[1] ** 2)
    grid = np.linspace(-30, 30, 20001)
    F1 = norm.cdf((grid[None, :] - v[:, None]) / s1)
    F0 = norm.cdf((grid[None, :] - v[:, None]) / s0)
    gap = np.abs(F1 - F0)
    t1, t0 = np.sqrt(1.0 + scale**2), np.sqrt(2.0)  # the MMD is of the unsmoothed laws
    mmd2 = (1 / np.sqrt(2 * np.pi * (rkhs**2 + 2 * t1**2)) + 1 / np.sqrt(2 * np.pi * (rkhs**2 + 2 * t0**2))
            - 2 / np.sqrt(2 * np.pi * (rkhs**2 + t1**2 + t0**2)))
    return {
        "mean_diff": np.zeros((len(v), 1)),
        "qte": np.tile((s1 - s0) * norm.ppf(q), (len(v), 1)),
        "cdf_diff": norm.cdf((y[None, :] - v[:, None]) / s1) - norm.cdf((y[None, :] - v[:, None]) / s0),
        "mmd": np.full((len(v), 1), np.sqrt(max(mmd2, 0.0))),  # 0 up to rounding at the null
        "kolmogorov": gap.max(axis=1)[:, None],
        "wasserstein": np.trapezoid(gap, grid, axis=1)[:, None],
    }


def effect_coverage(n: int, reps: int, *, scale: float = 1.5, level: float = 0.9, n_boot: int = 199, seed0: int = 0,
                    location=None, defaults: bool = False):
    """Coverage of :meth:`ccme.CCMEResult.effect`'s intervals at x1 ∈ {−1, 0, 1}, per term.

    Two targets: the true effect, and the smoothed one (each arm's law
    convolved with its read-out kernel, which is what the estimate converges
    to at a fixed bandwidth; the same for the mean difference and the MMD).
    """
    q = np.array([0.25, 0.5, 0.75])
    y = np.array([-1.0, 0.0, 1.0])
    v = SCALE_PROFILES["x1"].to_numpy()
    hits = {"true": {}, "smoothed": {}}
    widths = {}
    for r in range(reps):
        data = scale_data(n, scale, seed0 + r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(SCALE_FORMULA, data, seed=seed0 + r, **fit_options(defaults, location))
            table = res.effect(newdata=SCALE_PROFILES, q=q, y=y, level=level, n_boot=n_boot)
        sig = tuple(res.outcome_kernel(a).bandwidth_array[0] for a in (1, 0))
        truths = {"true": scale_effects(v, scale, y, q, rkhs=res.kernels["y"].bandwidth_array[0]),
                  "smoothed": scale_effects(v, scale, y, q, widen=sig, rkhs=res.kernels["y"].bandwidth_array[0])}
        for term, rows in table.groupby("term", sort=False):
            if term not in truths["true"]:
                continue  # the expected shortfalls: benchmarks/inference/coverage.py measures them
            lo = rows["conf_low"].to_numpy().reshape(len(v), -1)
            hi = rows["conf_high"].to_numpy().reshape(len(v), -1)
            widths.setdefault(term, []).append(float(np.mean(hi - lo)))
            for target, truth in truths.items():
                inside = (lo <= truth[term]) & (truth[term] <= hi)
                hits[target].setdefault(term, []).append(inside.mean())
    return {
        "n": n, "reps": reps, "scale": scale, "level": level, "n_boot": n_boot, "defaults": defaults,
        "coverage_true": {t: round(float(np.mean(h)), 3) for t, h in hits["true"].items()},
        "coverage_smoothed": {t: round(float(np.mean(h)), 3) for t, h in hits["smoothed"].items()},
        "mean_width": {t: round(float(np.mean(w)), 4) for t, w in widths.items()},
    }


def shape_rejections(n: int, reps: int, *, hypothesis: str, scale: float, shift: float, n_boot: int = 199,
                     seed0: int = 0, location=None, defaults: bool = False):
    """Rejection rates at 5% and 10% of ``test_dominance`` / ``test_location_shift`` at x1 = 0 and globally."""
    point, glob = [], []
    for r in range(reps):
        data = scale_data(n, scale, seed0 + r, shift=shift)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(SCALE_FORMULA, data, seed=seed0 + r, **fit_options(defaults, location))
            run = res.test_dominance if hypothesis == "dominance" else res.test_location_shift
            test = run(newdata=SCALE_PROFILES, n_boot=n_boot)
        point.append(test.table["p_value"].iloc[1])
        glob.append(test.p_value)
    point, glob = np.array(point), np.array(glob)
    return {
        "hypothesis": hypothesis, "n": n, "scale": scale, "shift": shift, "reps": reps, "n_boot": n_boot,
        "defaults": defaults,
        "point_0.05": float(np.mean(point <= 0.05)), "point_0.10": float(np.mean(point <= 0.10)),
        "global_0.05": float(np.mean(glob <= 0.05)), "global_0.10": float(np.mean(glob <= 0.10)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["size", "power", "shift", "bands", "effects", "shape"])
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--n", type=int, nargs="+", default=None, help="sample sizes")
    parser.add_argument("--location", default=None, choices=["linear"],
                        help="fit(location=...): the located fit's tests and intervals (not for 'bands')")
    parser.add_argument("--test-leverage", type=float, default=None,
                        help="κ of test_effect's residuals e_i / (1 − H_ii)^κ (default: "
                             "ccme.bootstrap.EFFECT_TEST_LEVERAGE, 1/2: HC2); 0 is the plain construction")
    parser.add_argument("--test-target", default=None, choices=["smoothed", "regularised"],
                        help="test_effect's construction (default ccme.bootstrap.EFFECT_TEST_TARGET)")
    parser.add_argument("--defaults", action="store_true",
                        help="fit with ccme's defaults (tuning, default propensity) instead of tune='none' and a "
                             "logistic propensity (a forest for 'bands')")
    parser.add_argument("--test-first-stage", default=None, choices=["yes", "no"],
                        help="whether the tests perturb the first stage too (default "
                             "ccme.bootstrap.EFFECT_TEST_FIRST_STAGE; 'no': the construction before)")
    parser.add_argument("--test-penalty", default=None, choices=["correction", "plugin", "none"],
                        help="the penalty a split fold-arm's parts share in the tests (default "
                             "ccme.bootstrap.EFFECT_TEST_PENALTY; 'none': the fit's split, the construction before)")
    parser.add_argument("--v", default="x1", choices=["x1", "x2", "x3"],
                        help="size: the covariate in V (default x1; x2 puts a confounder inside V)")
    parser.add_argument("--scale", type=float, default=1.5,
                        help="effects: the treated law's spread relative to the control's (1 is the null)")
    parser.add_argument("--reverse-effects", default=None,
                        help="effects: comma-separated effects with reverse-percentile intervals (default "
                             "ccme.bootstrap.REVERSE_INTERVAL_EFFECTS; '' for every interval symmetric, the "
                             "construction before)")
    parser.add_argument("--feature", default=None, choices=["density", "cdf"], help="bands: one feature only")
    parser.add_argument("--first-stage", default=None, choices=["kernel", "forest", "auto"],
                        help="fit(first_stage=...): the ridge's first stage (default: ccme's, the kernel ridge)")
    parser.add_argument("--squared-effects", default=None,
                        help="effects: comma-separated reverse-interval effects whose percentiles are taken on the "
                             "squared scale (default ccme.bootstrap.SQUARED_INTERVAL_EFFECTS; '' for none)")
    args = parser.parse_args(argv)
    if args.squared_effects is not None:
        ccme.bootstrap.SQUARED_INTERVAL_EFFECTS = tuple(t for t in args.squared_effects.split(",") if t)
    if args.first_stage is not None:
        FIT_EXTRA["first_stage"] = args.first_stage
    if args.reverse_effects is not None:
        ccme.bootstrap.REVERSE_INTERVAL_EFFECTS = tuple(t for t in args.reverse_effects.split(",") if t)
    if args.test_target is not None:
        ccme.bootstrap.EFFECT_TEST_TARGET = args.test_target
    if args.test_leverage is not None:
        ccme.bootstrap.EFFECT_TEST_LEVERAGE = args.test_leverage
    if args.test_first_stage is not None:
        ccme.bootstrap.EFFECT_TEST_FIRST_STAGE = args.test_first_stage == "yes"
    if args.test_penalty is not None:
        ccme.bootstrap.EFFECT_TEST_PENALTY = None if args.test_penalty == "none" else args.test_penalty
    if args.part == "size":
        settings = [dict(n=n, scale=1.0, reps=args.reps or 200, v=args.v, defaults=args.defaults)
                    for n in (args.n or (500, 1000))]
        run = rejection_rates
    elif args.part == "power":
        settings = [dict(n=n, scale=1.5, reps=args.reps or 100, defaults=args.defaults)
                    for n in (args.n or (250, 500, 1000, 2000))]
        run = rejection_rates
    elif args.part == "shift":
        # a location shift of one outcome-SD given V (sd(Y⁰ | x1) = √2): the power target at n = 2000
        settings = [dict(n=n, scale=1.0, shift=float(np.sqrt(2.0)), reps=args.reps or 100, defaults=args.defaults)
                    for n in (args.n or (500, 1000, 2000))]
        run = rejection_rates
    elif args.part == "bands":
        settings = [dict(n=n, reps=args.reps or 100, feature=f, defaults=args.defaults) for n in (args.n or (1000, 2000))
                    for f in ([args.feature] if args.feature else ("density", "cdf"))]
        run = band_coverage
    elif args.part == "effects":
        settings = [dict(n=n, reps=args.reps or 100, scale=args.scale, defaults=args.defaults)
                    for n in (args.n or (1000, 2000))]
        run = effect_coverage
    else:
        # size at the least favourable null (equal laws) and inside the null (a positive shift / a shift),
        # power against crossing CDFs (a wider treated law)
        cases = [("dominance", 1.0, 0.0), ("dominance", 1.0, 0.5), ("dominance", 2.0, 0.0),
                 ("location", 1.0, 1.0), ("location", 2.0, 0.0)]
        settings = [dict(n=n, reps=args.reps or 100, hypothesis=h, scale=s, shift=d, defaults=args.defaults)
                    for n in (args.n or (1000,)) for h, s, d in cases]
        run = shape_rejections
    if args.location is not None:
        if args.part == "bands":
            parser.error("--location: the located bands are measured by benchmarks/inference/coverage.py")
        settings = [dict(s, location=args.location) for s in settings]
    for s in settings:
        start = time.time()
        out = run(**s)
        out["seconds"] = round(time.time() - start, 1)
        out["effect_test_leverage"] = ccme.bootstrap.EFFECT_TEST_LEVERAGE
        out["effect_test_target"] = ccme.bootstrap.EFFECT_TEST_TARGET
        out["effect_test_penalty"] = ccme.bootstrap.EFFECT_TEST_PENALTY
        out["effect_test_first_stage"] = ccme.bootstrap.EFFECT_TEST_FIRST_STAGE
        out["reverse_interval_effects"] = list(ccme.bootstrap.REVERSE_INTERVAL_EFFECTS)
        out["squared_interval_effects"] = list(ccme.bootstrap.SQUARED_INTERVAL_EFFECTS)
        if FIT_EXTRA:
            out["fit_extra"] = dict(FIT_EXTRA)
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
