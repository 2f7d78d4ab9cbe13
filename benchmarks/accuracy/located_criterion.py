"""Where does the read-out criterion go wrong about a located fit?  A discrete-V semi-synthetic case, per seed and arm.

``location="auto"`` compares the plain and the located fit by the read-out
criterion, the weighted ISE-CV of each fold's estimate at that fold's
held-out units (:func:`ccme.location.criterion_difference`).  On the NHEFS
cases it keeps the located fit by several standard errors where the located
fit is worse.  This script fits both (ccme's defaults, ``location=None`` and
``"linear"``) and prints, per arm, the located fit's value less the plain
fit's of:

- ``ise``: the zoo's ISE (the V-levels weighted equally); ``ise_units``: the
  same weighted by the units at each level (what the criteria estimate);
- ``full``: the criterion of the fitted (fold-averaged) estimates over every
  unit of the arm, weighted by 1 / π with the true propensity, the cross
  term ∫p̂(y | V_j) p(y | X_j) dy from the unit's exact law (no outcome
  noise, and no held-out units needed);
- ``fold``: the criterion as the fit computes it, exactly on each fitted
  fold part (not the Nyström proxy): fold k's estimate at its held-out
  (nuisance) units of the arm, p̂ at the unit's outcome on the residual
  scale (its leave-one-out centre), its own atom left out, weights 1 / π;
- ``fresh``: ``fold`` with fresh draws of the held units' outcomes, from
  their exact laws (mean and standard deviation over ``--fresh`` draws).

``fold`` far below ``fresh`` says the held-out outcomes the fit saw favour
the located fit beyond their noise.  ``--fixed F`` reads both fits out at F
times the plain fit's σ_y (no selection of σ_y); ``--tuned-elsewhere`` fits
both at the hyperparameters their defaults choose on an independent draw
of the outcomes (no tuning on these outcomes)::

    python benchmarks/accuracy/located_criterion.py --case nhefs_exercise --seeds 1,2,5
    python benchmarks/accuracy/located_criterion.py --case nhefs_exercise --seeds 3,4,6

Seeds 1, 2 and 5 are where ``location="auto"`` errs on that case, so their
``fold`` is below ``fresh`` by selection; on 3, 4 and 6 the sign is mixed
(README, "A location stage").  Output: printed (``results/located_criterion_*.txt``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
from ccme.kernels import Kernel  # noqa: E402

from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import CASES  # noqa: E402


def gauss(u, s):
    return np.exp(-0.5 * (u / s) ** 2) / (s * np.sqrt(2.0 * np.pi))


def unit_densities(case, rows, arm, y) -> np.ndarray:
    """p(y | X = x_i) of each table row on the grid y: (n, G)."""
    mix = case._units(rows, arm)
    out = np.zeros((len(rows), len(y)))
    for k in range(mix.weights.shape[1]):
        m, s = mix.means[:, k, 0][:, None], np.sqrt(mix.covs[:, k, 0, 0])[:, None]
        out += mix.weights[:, k][:, None] * gauss(y - m, s)
    return out


def fold_criterion(res, arm, level_of, held_outcomes, weights, levels_V) -> float:
    """The fit's weighted ISE-CV on its exact fold parts, at the held units' outcomes on the residual scale."""
    emb = res.embeddings[arm]
    sig = float(emb.y_kernel.bandwidth_array[0])   # (a Gaussian read-out)
    A = res.design.A
    values = []
    for part, fold in zip(emb.parts, res.folds):
        atoms, c = part.weights(levels_V, n_threads=1)
        a, units = atoms[:, 0], part.atom_units
        held = fold.nuisance[A[fold.nuisance] == arm]
        square = np.array([c[:, e] @ gauss(a[:, None] - a[None, :], sig * np.sqrt(2.0)) @ c[:, e]
                           for e in range(len(levels_V))])
        at = np.array([c[:, level_of[j]] @ gauss(held_outcomes[j] - a, sig)
                       - np.sum(c[units == j, level_of[j]] * gauss(held_outcomes[j] - a[units == j], sig))
                       for j in held])
        w = weights[held]
        values.append(np.sum(w * (square[level_of[held]] - 2.0 * at)) / w.sum())
    return float(np.mean(values))


def tuned_elsewhere(case, problem, res, location, seed: int):
    """``res`` refitted with ``tune="none"`` at the hyperparameters (and read-out σ_y) that its defaults choose on the
    same units, treatments and seed with fresh draws of the outcomes: tuning that never saw these outcomes."""
    data = problem.data
    rng = np.random.default_rng(5000 + seed)
    rows = np.arange(len(data))
    y1, y0 = case._sample_units(rows, 1, rng), case._sample_units(rows, 0, rng)
    other = data.assign(y=np.where(data["a"].to_numpy() == 1, y1, y0))
    source = ccme.fit(problem.formula, other, seed=seed, location=location)
    p = source.params
    kwargs = dict(tune="none", lam0=dict(p["lam0"]), lam1=dict(p["lam1"]), first_stage=dict(p["first_stage"]),
                  x_bandwidth=list(p.kernels["x"].bandwidth), v_bandwidth=list(p.kernels["v"].bandwidth))
    if p.get("lam1_plugin") is not None:
        kwargs["lam1_plugin"] = dict(p["lam1_plugin"])
    refit = ccme.fit(problem.formula, data, seed=seed, location=location, **kwargs)
    embeddings = {arm: emb.with_readout(source.embeddings[arm].y_kernel) for arm, emb in refit.embeddings.items()}
    return dataclasses.replace(refit, embeddings=embeddings)


def one(case, seed: int, n_fresh: int, fixed: float | None = None, elsewhere: bool = False) -> list[str]:
    problem = Problem(case, case.n, seed, 150)
    data = problem.data
    y = np.asarray(problem.grid.points).ravel()
    dy = y[1] - y[0]
    rows = np.arange(len(data))   # the table's rows, once each
    fits = {}
    for location in (None, "linear"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits[location] = ccme.fit(problem.formula, data, seed=seed, location=location)
            if elsewhere:   # the same fit with the hyperparameters tuned on an independent draw of the outcomes
                fits[location] = tuned_elsewhere(case, problem, fits[location], location, seed)
    if fixed is not None:   # both fits read out at the same σ_y: fixed × the plain fit's choice, per arm
        plain = {arm: float(emb.y_kernel.bandwidth_array[0]) for arm, emb in fits[None].embeddings.items()}
        for location, res in list(fits.items()):
            embeddings = {arm: emb.with_readout(Kernel(emb.y_kernel.name, (plain[arm] * fixed,), emb.y_kernel.rule))
                          for arm, emb in res.embeddings.items()}
            fits[location] = dataclasses.replace(res, embeddings=embeddings)
    levels = problem.v
    column = case.v_columns[0]
    index = {value: i for i, value in enumerate(levels[column])}
    level_of = np.array([index[value] for value in data[column]])
    A, Y, ps = data["a"].to_numpy(), data["y"].to_numpy(), problem.truth_frame.ps.to_numpy()
    rng = np.random.default_rng(1000 + seed)
    residuals = {None: Y, "linear": located_outcome(fits["linear"])}
    lines = []
    for arm in (1, 0):
        P = unit_densities(case, rows, arm, y)
        weights = np.where(A == arm, 1.0 / (ps if arm else 1.0 - ps), 0.0)
        fresh = [case._sample_units(rows, arm, rng) for _ in range(n_fresh)]
        out = {}
        for location, res in fits.items():
            levels_V = res.design.encode_v(levels)
            p = res.embeddings[arm].density(y, v=levels_V)
            ise = ((p - problem.truth[arm]) ** 2).sum(axis=1) * dy
            own = A == arm
            square, cross = (p**2).sum(axis=1) * dy, (p[level_of] * P).sum(axis=1) * dy
            full = np.sum(weights[own] * (square[level_of[own]] - 2.0 * cross[own])) / weights[own].sum()
            # The residual scale the fit scores on: Y less each unit's leave-one-out centre.
            centre = Y - residuals[location]
            fold = fold_criterion(res, arm, level_of, Y - centre, weights, levels_V)
            fresh_values = [fold_criterion(res, arm, level_of, f - centre, weights, levels_V) for f in fresh]
            out[location] = dict(ise=ise.mean(), ise_units=ise[level_of].mean(), full=full, fold=fold,
                                 fresh=np.array(fresh_values))
        d = {k: out["linear"][k] - out[None][k] for k in ("ise", "ise_units", "full", "fold")}
        f = out["linear"]["fresh"] - out[None]["fresh"]
        lines.append(f"{case.name:15s} {seed:4d} {arm:3d} " + " ".join(f"{v:+10.5f}" for v in d.values())
                     + f" {f.mean():+10.5f} {f.std(ddof=1) if len(f) > 1 else np.nan:9.5f}")
    return lines


def located_outcome(res) -> np.ndarray:
    """The residual outcome the located fit was fitted to: Y − m̂^(−i)(V_i) (its models refitted as ``fit`` does)."""
    from ccme.location import fit_location
    from ccme.propensity import arm_probabilities, clip_scores

    design = res.design
    scores = arm_probabilities(clip_scores(np.asarray(res.overlap.scores), res.clip))
    Xo = design.X[:, [design.x_names.index(c) for c in res.outcome_columns]]
    _, residual = fit_location(V=design.V, Xo=Xo, Y=design.Y, A=design.A, scores=scores, arms=design.arms,
                               mode=res.mode)
    return residual[:, 0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="nhefs_exercise")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--fresh", type=int, default=20, help="fresh draws of the held units' outcomes")
    parser.add_argument("--tuned-elsewhere", action="store_true",
                        help="both fits at hyperparameters tuned on an independent draw of the outcomes")
    parser.add_argument("--fixed", type=float, default=None,
                        help="read both fits out at this factor of the plain fit's chosen σ_y (no selection)")
    args = parser.parse_args(argv)
    case = CASES[args.case]
    if not getattr(case, "discrete_v", False) or not hasattr(case, "_units"):
        raise SystemExit("this diagnosis needs a semi-synthetic case with a discrete V (its units' exact laws)")
    print(f"$ python benchmarks/accuracy/located_criterion.py --case {args.case} --seeds {args.seeds} "
          f"--fresh {args.fresh}" + (f" --fixed {args.fixed:g}" if args.fixed is not None else "")
          + (" --tuned-elsewhere" if args.tuned_elsewhere else ""))
    print("located minus plain, per arm (criteria: lower is better)")
    print(f"{'case':15s} {'seed':>4s} {'arm':>3s} {'ise':>10s} {'ise_units':>10s} {'full':>10s} {'fold':>10s} "
          f"{'fresh':>10s} {'fresh sd':>9s}")
    for seed in (int(s) for s in args.seeds.split(",")):
        for line in one(case, seed, args.fresh, args.fixed, args.tuned_elsewhere):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
