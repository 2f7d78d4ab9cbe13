"""How much of each case's error is the read-out bandwidth's choice: σ_y chosen against σ_y picked on the truth.

For every case of a split (the zoo's cases at their own n, the defaults'
fit, n_eval V-points), per arm and seed, this prints the integrated squared
error at the read-out bandwidth the fit chose by its weighted ISE-CV and the
smallest error over the same grid of bandwidths (``Y_BANDWIDTH_FACTORS``
times the rule) read out of the *same* fitted weights (σ_y does not change
them): the ratio is what a perfect σ_y selector would gain, and the factors
show which way the selector errs.  A bivariate outcome's σ_y is not tuned;
its case is skipped.

    python benchmarks/accuracy/readout_gap.py --split report --seeds 1,2,3
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
from benchmarks.accuracy.metrics import ise  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import CASES, case_names  # noqa: E402


def arm_errors(res, problem, arm: int):
    """(chosen factor, ISE at it, ISE per factor of the curve's grid), the factors of the rule's bandwidth."""
    curve = next(c for c in res.tuning.curves if c.parameter == "y_bandwidth" and c.arm == arm)
    embedding = res.embedding(arm)
    errors = np.array([np.mean(ise(embedding.with_readout(Kernel(embedding.y_kernel.name, (float(h),)))
                                   .density(problem.grid.points, v=problem.v), problem.truth[arm], problem.grid))
                       for h in curve.values])
    rule = curve.values / np.asarray(ccme.tuning.Y_BANDWIDTH_FACTORS)
    chosen = int(np.flatnonzero(np.isclose(curve.values, curve.chosen))[0])
    return float(curve.chosen / rule[0]), float(errors[chosen]), errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="report", choices=("choose", "report", "all"))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--eval-points", type=int, default=150)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    factors = np.asarray(ccme.tuning.Y_BANDWIDTH_FACTORS)
    print(f"split {args.split}, seeds {seeds}; per arm: the chosen factor of the rule's sigma_y and the best on the "
          f"truth (over {[float(f) for f in factors]}), mean ISE at each, ratio chosen / best")
    ratios = []
    for name in case_names(args.split):
        case = CASES[name]
        for seed in seeds:
            problem = Problem(case, getattr(case, "n", None), seed, args.eval_points)
            if problem.grid.dim != 1:
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ccme.fit(problem.formula, problem.data, seed=seed)
            line = []
            for arm in (1, 0):
                chosen, at_chosen, errors = arm_errors(res, problem, arm)
                assert np.isclose(at_chosen, problem.score(res)[arm], rtol=1e-6), "the read-out differs from the fit's"
                best = int(np.argmin(errors))
                ratios.append(at_chosen / errors[best])
                line.append(f"arm {arm}: chosen {chosen:4.2f} best {factors[best]:4.2f} "
                            f"ISE {at_chosen:.5f} / {errors[best]:.5f} = {at_chosen / errors[best]:5.2f}")
            print(f"  {name:16s} seed {seed}  " + "   ".join(line), flush=True)
    print(f"geometric mean of chosen / best over {len(ratios)} case-arm-seeds: {np.exp(np.mean(np.log(ratios))):.3f}; "
          f"largest {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
