"""How much of each case's error is the read-out bandwidth's choice: σ_y chosen against σ_y picked on the truth.

For every case of a split (the zoo's cases at their own n, the defaults'
fit, n_eval V-points), per arm and seed, this prints the integrated squared
error at the read-out bandwidth the fit chose by its weighted ISE-CV and the
smallest error over the same grid of bandwidths (``Y_BANDWIDTH_FACTORS``
times the rule) read out of the *same* fitted weights (σ_y does not change
them): the ratio is what a perfect σ_y selector would gain, and the factors
show which way the selector errs; the error at the rule's σ_y (factor 1, what
an untuned fit reads out) is printed too.  A bivariate outcome's read-outs are
normalised on the case's 2-D grid as the zoo scores them.

    python benchmarks/accuracy/readout_gap.py --split report --seeds 1,2,3
    python benchmarks/accuracy/readout_gap.py --cases bivariate --method neural_kernel --n 1000

``--adaptive`` adds a read-out ccme does not have, to size what it would
gain: sample-point adaptive bandwidths (Abramson 1982; Silverman 1986,
§5.3.1), each atom y_k read out with its own h_k = σ_y (f̃(y_k) / g)^(-1/2),
f̃ the Gaussian kernel density of the atoms (all folds, unweighted) at σ_y
and g its geometric mean over the atoms, so that an atom where outcomes
crowd (a spike) gets a narrow kernel and one in a tail a wide one.  Printed:
its error at the fit's σ_y (no new selection) and the smallest over the same
factors, both from the same weights (numpy; a located fit's atoms shifted
by m̂(v) per V-point).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ccme  # noqa: E402
from ccme.kernels import Kernel  # noqa: E402
from benchmarks.accuracy.metrics import ise, normalise_2d  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import CASES, case_names  # noqa: E402


def arm_errors(res, problem, arm: int):
    """(factors of the curve's grid, chosen index, ISE per factor): factors of the rule's bandwidth, the grid as the
    fit searched it (the default grows below its smallest factor where that was chosen; its top is fixed)."""
    curve = next(c for c in res.tuning.curves if c.parameter == "y_bandwidth" and c.arm == arm)
    embedding = res.embedding(arm)
    chosen = embedding.y_kernel.bandwidth_array      # one factor scales every dimension's bandwidth
    errors = []
    for h in curve.values:
        density = embedding.with_readout(Kernel(embedding.y_kernel.name, tuple(chosen * h / curve.chosen))).density(
            problem.grid.points, v=problem.v)
        if problem.grid.dim == 2:
            density = normalise_2d(density, problem.grid)
        errors.append(np.mean(ise(density, problem.truth[arm], problem.grid)))
    errors = np.array(errors)
    factors = curve.values / (curve.values[-1] / ccme.tuning.Y_BANDWIDTH_FACTORS[-1])
    return factors, int(np.flatnonzero(np.isclose(curve.values, curve.chosen))[0]), errors


def adaptive_density(embedding, points: np.ndarray, v, h: float) -> np.ndarray:
    """The density read out with Abramson's per-atom bandwidths at σ_y = h (see the module docstring), clipped at
    zero and rescaled to unit mass on ``points`` as :meth:`ccme.Embedding.density` does."""
    atoms, W = embedding.weights(v=v)
    a = atoms[:, 0]
    pilot = np.exp(-0.5 * ((a[:, None] - a[None, :]) / h) ** 2).mean(axis=1) / (np.sqrt(2 * np.pi) * h)
    hk = h * (pilot / np.exp(np.mean(np.log(pilot)))) ** -0.5
    shift = embedding.shift(v=v)[:, 0]
    y = np.asarray(points, dtype=float).ravel()
    out = np.empty((W.shape[1], len(y)))
    for e in range(W.shape[1]):
        z = (y[None, :] - shift[e] - a[:, None]) / hk[:, None]
        out[e] = W[:, e] @ (np.exp(-0.5 * z**2) / (np.sqrt(2 * np.pi) * hk[:, None]))
    out = np.maximum(out, 0.0)
    return out / np.trapezoid(out, y, axis=1)[:, None]


def adaptive_errors(res, problem, arm: int) -> np.ndarray:
    """ISE of the adaptive read-out at each bandwidth of the fit's σ_y curve."""
    curve = next(c for c in res.tuning.curves if c.parameter == "y_bandwidth" and c.arm == arm)
    embedding = res.embedding(arm)
    return np.array([np.mean(ise(adaptive_density(embedding, problem.grid.points, problem.v, float(h)),
                                 problem.truth[arm], problem.grid)) for h in curve.values])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="report", choices=("choose", "report", "all"))
    parser.add_argument("--cases", default=None, help="comma-separated cases (default: the split's)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--eval-points", type=int, default=150)
    parser.add_argument("--n", type=int, default=None, help="cap every case's n (default: each case's own)")
    parser.add_argument("--method", default="ridge", help="the estimator (default ridge)")
    parser.add_argument("--adaptive", action="store_true", help="add Abramson's adaptive read-out (see above)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"split {args.split}, seeds {seeds}; per arm: the chosen factor of the rule's sigma_y and the best on the "
          f"truth (over {list(ccme.tuning.Y_BANDWIDTH_FACTORS)}, grown below where the fit grew it), mean ISE at "
          f"each, ratio chosen / best")
    ratios, gains, to_rule = [], [], []
    for name in args.cases.split(",") if args.cases else case_names(args.split):
        case = CASES[name]
        for seed in seeds:
            n = getattr(case, "n", None)
            problem = Problem(case, n if args.n is None or n is None else min(n, args.n), seed, args.eval_points)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ccme.fit(problem.formula, problem.data, seed=seed, method=args.method)
            line = []
            for arm in (1, 0):
                factors, chosen, errors = arm_errors(res, problem, arm)
                at_chosen = errors[chosen]
                assert np.isclose(at_chosen, problem.score(res)[arm], rtol=1e-6), "the read-out differs from the fit's"
                best = int(np.argmin(errors))
                at_rule = errors[int(np.argmin(np.abs(np.log(factors))))]
                ratios.append(at_chosen / errors[best])
                to_rule.append(at_chosen / at_rule)
                line.append(f"arm {arm}: chosen {factors[chosen]:4.2f} best {factors[best]:4.2f} "
                            f"ISE {at_chosen:.5f} / {errors[best]:.5f} = {at_chosen / errors[best]:5.2f}, "
                            f"rule's {at_rule:.5f}")
                if args.adaptive and problem.grid.dim == 1:    # Abramson's read-out: 1-D here
                    adaptive = adaptive_errors(res, problem, arm)
                    at = adaptive[chosen]
                    gains.append((at / at_chosen, adaptive.min() / errors[best]))
                    line[-1] += (f" | adaptive {at:.5f} ({at / at_chosen:4.2f}), best {adaptive.min():.5f} "
                                 f"({adaptive.min() / errors[best]:4.2f})")
            print(f"  {name:16s} seed {seed}  " + "   ".join(line), flush=True)
    print(f"geometric mean of chosen / best over {len(ratios)} case-arm-seeds: {np.exp(np.mean(np.log(ratios))):.3f}; "
          f"largest {max(ratios):.2f}; chosen / rule's {np.exp(np.mean(np.log(to_rule))):.3f} (better in "
          f"{sum(r < 0.99 for r in to_rule)}, worse in {sum(r > 1.01 for r in to_rule)}; largest {max(to_rule):.2f})")
    if gains:
        g = np.log(np.array(gains))
        print(f"adaptive read-out against the fixed one, geometric means over case-arm-seeds: at the chosen sigma_y "
              f"{np.exp(g[:, 0].mean()):.3f} (better in {int(np.sum(g[:, 0] < np.log(0.99)))}, worse in "
              f"{int(np.sum(g[:, 0] > np.log(1.01)))} of {len(g)}); each at its best factor {np.exp(g[:, 1].mean()):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
