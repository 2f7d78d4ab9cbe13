"""Why the Kolmogorov distance's intervals under-cover: a Gaussian model with an exact bootstrap, and the real fits.

``effect()``'s 90% interval for the Kolmogorov distance sup_y |F₁(y) − F₀(y)|
is the basic bootstrap's reverse percentiles (``ccme.bootstrap.REVERSE_INTERVAL_EFFECTS``),
and on ``benchmarks/calibration.py``'s ``effects`` design it covers 0.80–0.83
(README, "The distances' intervals").  Two things can make it fall short: the
multiplier draws may misstate the estimate's law, or the supremum, not
differentiable where |F₁ − F₀| has tied maxima or is 0, may make even an
exact bootstrap of the noise miss.

``--design model`` isolates the second: the estimate is D̂ = D + δ on a grid,
δ a Gaussian process (two independent Brownian bridges in each arm's F
scale, divided by √m, m the units per arm, each smoothed by a Gaussian
read-out kernel of bandwidth ``--readout`` as ccme's CDFs are), and the
draws are exact, δ* from the same law.  D is the ``effects`` design's CDF
difference at V = 0, N(0, 1 + 1.5²) against N(0, 2), each smoothed likewise:
a pure change of scale, so |D| has two equal maxima (D(−y) = −D(y)), as at
every V-point of that design; ``--shift`` moves the treated law by that much,
which breaks the tie; ``--scale 0``: no effect.  ``snr`` is the true distance
over the estimate's sd.
Three constructions from the same draws: the reverse percentiles; their
prepivoted double bootstrap (Beran 1987; Hall 1992, §3.11: for each outer
draw D̂*_b, inner draws around it give u_b = P**(T** − T*_b ≤ T*_b − T̂), the
root's probability-integral transform in the bootstrap world, and the two
percentiles are taken at the (1 ± level)/2 quantiles of the u_b, each tail
calibrated on its own); and the bootstrap of the estimated directional
derivative (Fang & Santos 2019): the draws of max over the near-maximisers
{y : |D̂(y)| ≥ T̂ − c·sd(y)} of sign(D̂(y))·δ*(y), at c = 0.5 and 1.  One JSON
line per m (``results/kolmogorov_interval_model.jsonl``)::

    python benchmarks/inference/kolmogorov_interval.py --m 15 30 60 250 1000 4000 --reps 1000
    python benchmarks/inference/kolmogorov_interval.py --m 250 1000 --reps 1000 --shift 0.5
    python benchmarks/inference/kolmogorov_interval.py --m 250 --reps 1000 --scale 0

``--design real`` looks at the first on the ``effects`` design itself
(``tune="none"``, a logistic propensity, 199 draws, as ``calibration.py
effects``): per V-point x1 ∈ {−1, 0, 1}, the estimates' mean and sd over the
data sets against the true distance, the bootstrap's sd and the shift of the
interval's midpoint from the estimate (the bias the reverse percentiles
remove), and where the misses fall.  One JSON line per n
(``results/kolmogorov_interval_real.jsonl``)::

    python benchmarks/inference/kolmogorov_interval.py --design real --n 250 500 1000 --reps 100
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ccme  # noqa: E402
from calibration import SCALE_FORMULA, SCALE_PROFILES, fit_options, scale_data, scale_effects  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
GRID = np.linspace(-6.0, 6.0, 121)
SD = (np.sqrt(1.0 + 1.5**2), np.sqrt(2.0))   # the treated and control laws' sds at V = 0
ARGMAX_C = (0.5, 1.0)


def noise_factor(grid: np.ndarray, sd: tuple[float, float], readout: float = 0.0) -> np.ndarray:
    """A factor L of the covariance of F̂₁ − F̂₀ per unit: two independent Brownian bridges, each smoothed.

    Bridge a lives in the scale of N(0, sd[a]²); ``readout`` > 0 convolves it
    with a Gaussian kernel of that bandwidth (on a fine grid), as ccme's CDFs
    are read out.
    """
    fine = np.linspace(-10.0, 10.0, 801) if readout > 0 else grid
    cov = np.zeros((len(fine), len(fine)))
    for s in sd:
        F = norm.cdf(fine / s)
        cov += np.minimum.outer(F, F) - np.outer(F, F)
    if readout > 0:
        smooth = norm.pdf((grid[:, None] - fine[None, :]) / readout)
        smooth /= smooth.sum(axis=1, keepdims=True)
        cov = smooth @ cov @ smooth.T
    return np.linalg.cholesky(cov + 1e-12 * np.eye(len(grid)))


def reverse(t: float, draws: np.ndarray, p_low: float, p_high: float) -> tuple[float, float]:
    """[T − q_high(T* − T), T − q_low(T* − T)], floored at 0, as ``ccme.bootstrap._interval`` with ``reverse``."""
    hi, lo = np.quantile(draws - t, [p_high, p_low])
    return max(t - hi, 0.0), max(t - lo, 0.0)


def study(m: int, reps: int, *, scale: float = 1.0, shift: float = 0.0, readout: float = 0.5, level: float = 0.9,
          outer: int = 399, inner: int = 199, seed: int = 0) -> dict:
    """The model's ``reps`` data sets at m units per arm: each construction's coverage and mean width.

    ``outer`` draws per data set give the reverse percentiles and the
    derivative bootstrap; ``inner`` draws around each outer one the double
    bootstrap's u_b.  One seed for everything, so the constructions share the
    estimates and the outer draws.
    """
    rng = np.random.default_rng(seed)
    wide = [np.sqrt(s**2 + readout**2) for s in SD]
    D = scale * (norm.cdf((GRID - shift) / wide[0]) - norm.cdf(GRID / wide[1]))
    L = noise_factor(GRID, SD, readout) / np.sqrt(m)
    sd_point = np.sqrt(np.sum(L**2, axis=1))
    truth = float(np.abs(D).max())

    def noise(k: int) -> np.ndarray:
        return (L @ rng.standard_normal((len(GRID), k))).T

    tails = (0.5 - level / 2, 0.5 + level / 2)
    names = ["reverse", "double"] + [f"argmax_{c:g}" for c in ARGMAX_C]
    hits = {name: [] for name in names}
    widths = {name: [] for name in names}
    spread, draw_sd, draw_shift = [], [], []
    for _ in range(reps):
        estimate = D + noise(1)[0]
        t = np.abs(estimate).max()
        draws = noise(outer)
        t_star = np.abs(estimate + draws).max(axis=1)
        spread.append(t)
        draw_sd.append(t_star.std())
        draw_shift.append(t_star.mean() - t)
        # Inner draws share one set of perturbations across the outer draws: each is exact for its centre.
        t_star_star = np.abs((estimate + draws)[:, None, :] + noise(inner)[None, :, :]).max(axis=2)  # outer × inner
        u = np.mean(t_star_star - t_star[:, None] <= (t_star - t)[:, None], axis=1)
        intervals = {"reverse": reverse(t, t_star, *tails), "double": reverse(t, t_star, *np.quantile(u, tails))}
        for c in ARGMAX_C:
            near = np.abs(estimate) >= t - c * sd_point
            derivative = (np.sign(estimate[near]) * draws[:, near]).max(axis=1)
            # T̂ − T ≈ φ'(δ): the interval [T̂ − q_high(φ'(δ*)), T̂ − q_low(φ'(δ*))], floored at 0.
            low, high = np.quantile(derivative, tails)
            intervals[f"argmax_{c:g}"] = (max(t - high, 0.0), max(t - low, 0.0))
        for name, (low, high) in intervals.items():
            hits[name].append(low <= truth <= high)
            widths[name].append(high - low)
    return {"design": "model", "m": m, "reps": reps, "scale": scale, "shift": shift, "readout": readout, "level": level,
            "outer": outer, "inner": inner, "seed": seed, "truth": round(truth, 4),
            "snr": round(truth / float(np.std(spread)), 2),
            # as --design real reports them: the estimate's bias and sd over the data sets, the draws' mean sd
            # and their mean shift T̄* − T̂ (the bias the reverse percentiles remove)
            "bias": round(float(np.mean(spread)) - truth, 4), "sd_estimate": round(float(np.std(spread)), 4),
            "mean_bootstrap_sd": round(float(np.mean(draw_sd)), 4), "draw_shift": round(float(np.mean(draw_shift)), 4),
            "coverage": {k: round(float(np.mean(v)), 3) for k, v in hits.items()},
            "mean_width": {k: round(float(np.mean(v)), 4) for k, v in widths.items()}}


def real_design(n: int, reps: int, *, scale: float = 1.5, level: float = 0.9, n_boot: int = 199) -> dict:
    """The Kolmogorov rows of ``effect()`` on ``calibration.py``'s ``effects`` design, data sets r < reps."""
    v = SCALE_PROFILES["x1"].to_numpy()
    truth = scale_effects(v, scale, np.zeros(1), np.full(1, 0.5))["kolmogorov"][:, 0]
    rows = []
    for r in range(reps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(SCALE_FORMULA, scale_data(n, scale, r), seed=r, **fit_options(False, None))
            table = res.effect(newdata=SCALE_PROFILES, q=np.full(1, 0.5), y=np.zeros(1), level=level, n_boot=n_boot)
        rows.append(table.loc[table.term == "kolmogorov", ["estimate", "std_error", "conf_low", "conf_high"]]
                    .to_numpy())
    estimate, std_error, low, high = np.moveaxis(np.array(rows), 2, 0)    # each data sets × V-points

    def per_point(values):
        return np.round(values, 4).tolist()

    return {"design": "real", "n": n, "reps": reps, "scale": scale, "level": level, "n_boot": n_boot,
            "truth": per_point(truth), "mean_estimate": per_point(estimate.mean(axis=0)),
            "sd_estimate": per_point(estimate.std(axis=0)), "mean_bootstrap_sd": per_point(std_error.mean(axis=0)),
            "midpoint_shift": per_point(((low + high) / 2 - estimate).mean(axis=0)),
            "coverage": per_point(((low <= truth) & (truth <= high)).mean(axis=0)),
            "truth_below_interval": per_point((truth < low).mean(axis=0)),
            "truth_above_interval": per_point((truth > high).mean(axis=0))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--design", choices=("model", "real"), default="model")
    parser.add_argument("--m", type=int, nargs="+", default=[250, 1000], help="model: units per arm")
    parser.add_argument("--n", type=int, nargs="+", default=[250, 1000], help="real: sample sizes")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--scale", type=float, default=1.0, help="model: D times this (0: no effect)")
    parser.add_argument("--shift", type=float, default=0.0, help="model: the treated law moved by this")
    parser.add_argument("--readout", type=float, default=0.5, help="model: the CDFs' read-out bandwidth")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or RESULTS / f"kolmogorov_interval_{args.design}.jsonl"
    for size in args.m if args.design == "model" else args.n:
        if args.design == "model":
            row = study(size, args.reps, scale=args.scale, shift=args.shift, readout=args.readout)
        else:
            row = real_design(size, args.reps)
        print(json.dumps(row), flush=True)
        with out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
