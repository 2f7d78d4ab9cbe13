"""Does the second stage's leave-one-out criterion rank the V bandwidths as each arm's error does?

For one case and seed, over factors of V's rule bandwidth, this prints per arm

- ``LOO``: the minimum over λ₁ of the arm's own leave-one-out criterion
  (RKHS) of the doubly robust pseudo-outcomes on V, the criterion that the
  tuning uses to choose λ₁ and the V bandwidths (curves of
  ``fit(tune={"v_bandwidth": factors, "lam1": grid, ...})`` with
  ``ccme.tuning.DR_PENALTIES_BY_ARM = True``, so that each arm has its own curve);
- ``ISE``: the arm's error against the exact density when the fit uses that
  factor (``v_bandwidth`` fixed, the rest tuned as by default, penalties per
  arm too: the script sets ``DR_PENALTIES_BY_ARM`` for the whole process);
- ``ISE*``: the same fit's error at the read-out bandwidth picked on the
  truth (over the tuning's grid, :mod:`benchmarks.accuracy.readout_gap`):
  the error of its weights, without the σ_y choice's noise;
- ``MMD2``: the same fit's error in the criterion's own metric, the squared
  RKHS distance between the estimated embedding (raw weights) and the true
  law, with the embedding's RKHS kernel (d_y = 1: on the zoo's outcome grid);
- ``MMDw``: the same with the kernel's bandwidth three times as wide;
- ``MMDf``: MMD2 of each fold's own estimate (before the K folds are
  averaged), averaged over the folds: the estimate the ``LOO`` column scores,
  each fold's λ₁ curve being read on its own second-stage units;
- ``RCV``: the same fit's read-out criterion at its chosen σ_y
  (:func:`ccme.location.readout_criteria`: the weighted least-squares
  cross-validation estimate of the density's ISE, up to a constant, on held-out
  units that are the same at every factor), a criterion in the density's own
  metric; ``RCVz``: its difference to the value at factor 1 in standard
  errors of the paired difference (:func:`ccme.location.criterion_difference`).

A criterion that tracks the error has its minimum where the error has its own.
On ``ihdp_site`` at seeds 1-3 it does not for the treated arm: its criterion
falls monotonically towards more pooling of the 8 sites (and picks λ₁ = 0.1
over 0.0316 at the middle factors) while its error is smallest at the least
pooling, 0.0023-0.0036 against 0.0036-0.0076 at the criterion's choice
(``results/v_criterion_ihdp_site.txt``); the control arm's error agrees
with its criterion at 2 of 3 seeds.  The MMD2 column ranks the factors as the
criterion does: the two metrics disagree, not the criterion and its metric.
The ISE* column ranks them as the ISE does (0.0023-0.0025 at 0.5 against
0.0028-0.0033 at 1.9), so the disagreement is not the read-out bandwidth's
choice; that choice costs on its own (seed 2: ISE 0.0078-0.0098 against
ISE* 0.0024-0.0032 at factors 0.7-1.9).  The MMDw column ranks them as ISE*
does (at seeds 1 and 3; at seed 2 from four times the width, scratch): the
wider read-out discards the higher-frequency noise of less pooling, which
the embedding's narrower kernel weighs.  A criterion in that wider kernel
did not pay on the zoo (``ccme.tuning.CRITERION_Y_FACTOR``).  On ``mixed_v``
(``results/v_criterion_mixed_v.txt``) the control arm's ISE* is smallest at
0.5 and its criterion's minimum lies at 1.0-1.41 at every seed, but MMDw
prefers 1.0 as well: the wide kernel does not explain that gap.

    python benchmarks/accuracy/v_criterion.py --case ihdp_site --seeds 1,2,3
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ccme  # noqa: E402
from ccme import tuning  # noqa: E402
from ccme.location import criterion_difference, readout_criteria  # noqa: E402
from benchmarks.accuracy.readout_gap import arm_errors  # noqa: E402
from benchmarks.accuracy.run import Problem, _lambda_grid, _y_factors  # noqa: E402
from benchmarks.accuracy.zoo import CASES  # noqa: E402

FACTORS = (0.5, 0.7, 1.0, 1.41, 1.9)
WIDE = 3.0      # the MMD2w column's kernel, in units of the embedding's outcome bandwidth
#: The printed rows: (label, key of :func:`one_seed`'s entries, decimals).
COLUMNS = (("LOO", "loo", 6), ("ISE", "ise", 5), ("ISE*", "ise_best", 5), ("MMD2", "mmd2", 5),
           ("MMDw", "mmd2_wide", 5), ("MMDf", "mmd2_fold", 5), ("RCV", "readout", 5), ("RCVz", "readout_z", 2))


def one_seed(case, seed: int) -> dict:
    problem = Problem(case, getattr(case, "n", None), seed, 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        searched = ccme.fit(problem.formula, problem.data, seed=seed,
                            tune={"lam0": _lambda_grid(), "lam1": _lambda_grid(), "x_bandwidth": "ard",
                                  "v_bandwidth": list(FACTORS), "y_bandwidth": _y_factors()})
        rule = searched.kernels["v"].bandwidth_array / searched.tuning.chosen["v_bandwidth_factor"]
        out = {}
        for f in FACTORS:
            curves = {c.arm: float(np.min(c.criterion)) for c in searched.tuning.curves
                      if c.parameter == "lam1" and c.factor == f}
            fixed = ccme.fit(problem.formula, problem.data, seed=seed, v_bandwidth=list(rule * f))
            out[f] = {"loo": curves, "ise": problem.score(fixed),
                      "ise_best": {arm: float(arm_errors(fixed, problem, arm)[2].min()) for arm in (1, 0)},
                      "mmd2": {arm: rkhs_error(fixed, problem, arm) for arm in (1, 0)},
                      "mmd2_fold": {arm: rkhs_error(fixed, problem, arm, by_fold=True) for arm in (1, 0)},
                      "mmd2_wide": {arm: rkhs_error(fixed, problem, arm, WIDE) for arm in (1, 0)},
                      "readout": readout_criteria(fixed.tuning), "report": fixed.tuning}
    for f in FACTORS:  # the criterion's difference to the rule's factor in standard errors of the paired difference
        out[f]["readout_z"] = {}
        for arm in (1, 0):
            diff, se = criterion_difference(out[f]["report"], out[1.0]["report"], arms=[arm])
            out[f]["readout_z"][arm] = diff / se if se > 0 else 0.0
    return out


def rkhs_error(res, problem, arm: int, widen: float = 1.0, by_fold: bool = False) -> float:
    """Mean over the V-points of ‖μ̂(v) − μ(v)‖² in the embedding's RKHS (Gaussian kernel, d_y = 1; its
    bandwidth times ``widen``), the truth integrated on the zoo's outcome grid; ``by_fold``: the mean over the
    folds of each fold's own estimate's error, the estimate a fold-level criterion scores."""
    embedding = res.embedding(arm)
    h = float(embedding.rkhs_kernel.bandwidth_array[0]) * widen
    if by_fold:
        V = res.design.encode_v(problem.v) if hasattr(problem.v, "columns") else np.asarray(problem.v, dtype=float)
        return float(np.mean([_rkhs_error(*part.weights(V, n_threads=1), problem, arm, h) for part in embedding.parts]))
    return _rkhs_error(*embedding.weights(v=problem.v), problem, arm, h)


def _rkhs_error(atoms, weights, problem, arm: int, h: float) -> float:
    grid = problem.grid.points.ravel()
    truth = problem.truth[arm] * np.gradient(grid)          # (n_v, G): masses on the grid

    def gram(a, b):
        return np.exp(-0.5 * ((a[:, None] - b[None, :]) / h) ** 2)

    K_aa, K_ag, K_gg = gram(atoms[:, 0], atoms[:, 0]), gram(atoms[:, 0], grid), gram(grid, grid)
    errors = (np.einsum("kv,kl,lv->v", weights, K_aa, weights) - 2 * np.einsum("kv,kg,vg->v", weights, K_ag, truth)
              + np.einsum("vg,gh,vh->v", truth, K_gg, truth))
    return float(np.mean(errors))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="ihdp_site")
    parser.add_argument("--seeds", default="1,2,3")
    args = parser.parse_args(argv)
    case = CASES[args.case]
    tuning.DR_PENALTIES_BY_ARM = True      # one criterion curve per arm (and penalties per arm in the fixed fits)
    print(f"{args.case}: per arm, the leave-one-out criterion (min over lambda1), the ISE and the RKHS error at each factor of "
          f"V's rule bandwidth")
    for seed in (int(s) for s in args.seeds.split(",")):
        rows = one_seed(case, seed)
        for arm in (1, 0):
            print(f"seed {seed} arm {arm}  factors {' '.join(f'{f:9g}' for f in FACTORS)}")
            for label, key, digits in COLUMNS:
                values = [rows[f][key][arm] for f in FACTORS]
                line = " ".join(f"{v:9.{digits}f}" for v in values)
                tail = ("(RCV less its value at factor 1, in standard errors)" if key == "readout_z"
                        else f"argmin {FACTORS[int(np.argmin(values))]}")
                print(f"  {label:4s}{line}   {tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
