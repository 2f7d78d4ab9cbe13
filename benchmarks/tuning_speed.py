"""Speed, choices and accuracy of the ridge fit's automatic tuning (issue 13, item 1).

    python benchmarks/tuning_speed.py            # n = 4000 and 20000: tuning, fit, density, ISE
    python benchmarks/tuning_speed.py --large    # n = 2·10⁵: the tuning alone, its time and peak memory
    python benchmarks/tuning_speed.py --rates    # the penalty transfer's exponents (ccme.tuning.LAMBDA_RATE)

Default mode: the paper's simulation (``ccme.datasets.paper_simulation(n,
seed=1)``, the paper's formula, 2 folds), ``ccme.fit`` with its defaults
(``tune="auto"``); prints the tuning's and the fit's seconds, the density
evaluation's (10⁴ V-points × 10³ grid points, arm 1, the issue's shape), the
chosen hyperparameters and the integrated squared error of the arm-1 density
against the exact truth (``benchmarks/paper/common.py``'s ``density_errors``
at its ``test_points``).  Timings on a shared machine are noisy: compare runs
made back to back.

``--large``: at n = 2·10⁵ the exact fit's n × n factors do not fit in memory,
so the fit is stopped as soon as :func:`ccme.tuning.tune_ridge` returns (the
up-front memory guard of the exact factors is lifted for this run only); the
tuning's seconds, choices and the process's peak resident memory are printed.

``--rates``: for the paper's simulation and three cases of the accuracy zoo at
n = 20000, the leave-one-out minimiser λ* (on a fine grid) of the stage-1
regression (φ(Y) on X, each arm, fold 1) and of the stage-2 regression (the
doubly robust pseudo-outcomes on V, fold 1) on seeded subsamples of growing
size m and on all the fold's units, at the tuned kernels; the slope of log λ*
against log m is the exponent α of :data:`ccme.tuning.LAMBDA_RATE`.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "paper"))
sys.path.insert(0, str(HERE.parent))
from common import FORMULA, density_errors, test_points  # noqa: E402

import ccme  # noqa: E402
from ccme import tuning  # noqa: E402


class _TimedDensity:
    """A result whose ``density`` calls are timed (``density_errors`` only calls ``density``)."""

    def __init__(self, res):
        self.res, self.seconds = res, 0.0

    def density(self, *args, **kwargs):
        started = time.perf_counter()
        out = self.res.density(*args, **kwargs)
        self.seconds += time.perf_counter() - started
        return out


def _choices(chosen: dict) -> str:
    def fmt(value):
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(fmt(v) for v in value) + "]"
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    return "\n".join(f"    {name}: {fmt(value)}" for name, value in chosen.items())


def speed(n: int, n_eval: int, n_grid: int) -> None:
    """One default fit at ``n``: its timings, choices and the arm-1 density's error."""
    data = ccme.datasets.paper_simulation(n, seed=1)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(FORMULA, data, seed=1)
    fit_seconds = time.perf_counter() - started
    timed = _TimedDensity(res)
    # One density call for all the V-points (chunk = n_eval), as the fit + density timing makes it.
    errors = density_errors(timed, data, test_points(n_eval, seed=7), n_grid=n_grid, chunk=n_eval)
    print(f"n = {n}: tuning {res.timing['tuning']:.1f} s, fit {fit_seconds:.1f} s (propensity "
          f"{res.timing['propensity']:.1f} s, estimator {res.timing['estimator']:.1f} s), density "
          f"{timed.seconds:.1f} s ({n_eval} V-points x {n_grid} grid points, arm 1); fit + density "
          f"{fit_seconds + timed.seconds:.1f} s")
    print(f"  integrated squared error (arm 1): {errors['ise']:.5f}")
    print("  chosen:\n" + _choices(res.tuning.chosen))
    for note in res.tuning.notes:
        print(f"  note: {note}")
    print(f"  peak resident memory so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB",
          flush=True)


class _Stop(Exception):
    pass


def _tuned(data, formula: str, *, stop: bool, **options):
    """``ccme.fit(formula, data, seed=1, **options)`` and the keyword arguments, params and report of its tune_ridge
    call (``stop``: the fit ends there)."""
    captured = {}
    original = tuning.tune_ridge

    def capture(**kwargs):
        params, report = original(**kwargs)
        captured.update(kwargs, params=params, report=report)
        if stop:
            raise _Stop
        return params, report

    tuning.tune_ridge = capture  # the ridge estimator imports it from ccme.tuning at each call
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ccme.fit(formula, data, seed=1, **options)
    except _Stop:
        pass
    finally:
        tuning.tune_ridge = original
    return captured


def large(n: int, propensity: str) -> None:
    """The tuning alone at ``n`` (the exact fit is stopped after it): seconds, choices, peak memory."""
    from ccme import memory

    data = ccme.datasets.paper_simulation(n, seed=1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    previous = os.environ.get(memory.ENV_VAR)
    os.environ[memory.ENV_VAR] = "100000000GB"  # lift the exact factors' up-front guard: the fit stops after tuning
    try:
        started = time.perf_counter()
        captured = _tuned(data, FORMULA, stop=True, propensity=propensity)
        seconds = time.perf_counter() - started
    finally:
        if previous is None:
            os.environ.pop(memory.ENV_VAR)
        else:
            os.environ[memory.ENV_VAR] = previous
    report = captured["report"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"n = {n}, propensity={propensity!r}: tuning {report.seconds:.1f} s (with the propensity and setup: "
          f"{seconds:.1f} s); peak resident memory {peak:.2f} GB (after drawing the data: {before:.2f} GB)")
    print("  chosen:\n" + _choices(report.chosen))
    if getattr(report, "pending_readout", None) is not None:
        print("  y_bandwidth (read-out, applied after the fit): "
              + ", ".join(f"{arm}: {k.bandwidth[0]:.3g}" for arm, k in report.pending_readout[0].items()))
    for note in report.notes:
        print(f"  note: {note}")


def _argmin_log10(spectrum, targets, grid) -> float:
    return float(np.log10(grid[int(np.argmin(spectrum.loo(targets, grid, 0)))]))


def rates(n: int, sizes, cases) -> None:
    """λ* against the regression's size m, and the fitted exponent α of λ* ∝ m^(−α), per case and stage."""
    from benchmarks.accuracy.zoo import get_case

    grid = np.logspace(-6.0, 0.0, 49)
    slopes = {"X": [], "V": []}
    for name in cases:
        data, formula = (ccme.datasets.paper_simulation(n, seed=2), FORMULA) if name == "paper" else \
            get_case(name).draw(n, 2)
        captured = _tuned(data, formula, stop=True)
        crossfit, folds, params = captured["data"], captured["folds"], captured["params"]
        design, Xo, A, V = crossfit.design, crossfit.Xo, crossfit.design.A, crossfit.design.V
        kernels = params.kernels
        G = tuning._outcome_features(design.Y, kernels["y"], 0)
        rng = np.random.default_rng(123)
        fold = folds[0]

        def curve(stage, Z, T, label):
            points = []
            for m in [s for s in sizes if s < len(Z)] + [len(Z)]:
                draws = 3 if m < len(Z) else 1
                values = []
                for _ in range(draws):
                    pick = np.sort(rng.choice(len(Z), m, replace=False))
                    kernel = kernels["x"] if stage == "X" else kernels["v"]
                    values.append(_argmin_log10(tuning._spectrum(Z[pick], kernel, 1.0, grid.min(), 0), T[pick], grid))
                points.append((m, float(np.mean(values))))
            logm, logl = np.log10([p[0] for p in points]), np.array([p[1] for p in points])
            alpha = -float(np.polyfit(logm, logl, 1)[0])
            slopes[stage].append(alpha)
            print(f"  {label}: " + "  ".join(f"m={m}: {v:+.2f}" for m, v in points) + f"  -> alpha {alpha:.2f}",
                  flush=True)

        print(f"{name} (n = {n}, {formula}): log10 lambda* by regression size m")
        for arm in (1, 0):
            rows = fold.nuisance[A[fold.nuisance] == arm]
            curve("X", Xo[rows], G[rows], f"stage 1, arm {arm}")
        # All the fold's second-stage units, and μ̂₀ on all its first-stage units (the transfer is what is
        # measured): the subsample limit lifted for this call.
        limit, tuning.LAMBDA_UNITS = tuning.LAMBDA_UNITS, n
        try:
            targets = tuning._pseudo_outcome_features(crossfit.mode, design, Xo, folds[:1], crossfit.scores, G,
                                                      kernels["x"], params["lam0"], 0, {}, None)
        finally:
            tuning.LAMBDA_UNITS = limit
        rows, Z1, _ = targets[0][1]
        curve("V", V[rows], np.hstack([Z1, targets[0][0][1]]), "stage 2, both arms")
    for stage, values in slopes.items():
        print(f"alpha, stage {'1 (X)' if stage == 'X' else '2 (V)'}: mean {np.mean(values):.2f}, range "
              f"{min(values):.2f} .. {max(values):.2f}; ccme.tuning.LAMBDA_RATE[{stage!r}] = "
              f"{tuning.LAMBDA_RATE[stage]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[4000, 20000])
    parser.add_argument("--n-eval", type=int, default=10000, help="V-points of the density evaluation")
    parser.add_argument("--n-grid", type=int, default=1000, help="grid points of the density evaluation")
    parser.add_argument("--large", action="store_true", help="the tuning alone at n = 200000 (or --large-n)")
    parser.add_argument("--large-n", type=int, default=200_000)
    parser.add_argument("--propensity", default="forest", help="with --large: the propensity model (default forest)")
    parser.add_argument("--rates", action="store_true", help="measure the penalty transfer's exponents")
    parser.add_argument("--cases", nargs="+", default=["paper", "mixture_v3", "hetero_v2", "sparse_v10"])
    args = parser.parse_args()
    print(f"ccme from {Path(ccme.__file__).parent}")
    if args.rates:
        rates(20000, (500, 1000, 2000, 4000), args.cases)
    elif args.large:
        large(args.large_n, args.propensity)
    else:
        for n in args.n:
            speed(n, args.n_eval, args.n_grid)


if __name__ == "__main__":
    main()
