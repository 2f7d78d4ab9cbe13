"""Why a located fit's mean-difference intervals under-cover on ``linear_v1``: the location term, or the embedding's?

On ``linear_v1`` (n = 2000) the located fit's 90% intervals of the mean difference covered 0.79 / 0.81 / 0.90 at the
coverage study's three V-points (``coverage.py --location linear --effects-only``).  This script fits, per data set,

- ``located``: ``fit(location="linear")``, the bootstrap with the mean model's coefficient error
  (:class:`ccme.bootstrap._Located`), and ``held``, the same fit's bootstrap with that error left out;
- ``oracle``: a plain fit of Y − m_A(V) with the TRUE linear means m_a (what a location stage with a perfect mean
  model estimates), its mean difference moved back by m₁(v) − m₀(v);

optionally with the true propensity (``--propensity true``), and prints, per V-point, the estimate's bias and spread
over data sets against the bootstrap's mean standard error, and the intervals' coverage.  ``--fixed`` fits only
``fixed``: the located fit with ``tune="none"`` and the hyperparameters the tuning chose on another data set (seed
999), so that the tuning's own variability is left out.  ``--reference`` fits nothing: ``aipw`` is the textbook
cross-fitted AIPW estimate of E[R¹ − R⁰] (zero) with the true propensity and an OLS outcome model (correct for
linear_v1), its influence-function standard error and 90% Wald interval, moved to each V-point by m₁(v) − m₀(v): what
an efficient, correctly specified estimator covers on the same data sets, the yardstick for the sets' own luck::

    python benchmarks/inference/located_mean_diagnosis.py --reps 40
    python benchmarks/inference/located_mean_diagnosis.py --reps 40 --propensity true
    python benchmarks/inference/located_mean_diagnosis.py --reps 40 --fixed
    python benchmarks/inference/located_mean_diagnosis.py --reps 40 --reference

Output: ``results/located_mean_diagnosis.jsonl`` (one line per data set and variant) and the table on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import ccme  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import _means, study_points  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "located_mean_diagnosis.jsonl"
#: linear_v1's true means E[Y^a | v1] = intercept + slope · v1 (its ``mixture``; the confounders' means are linear in v1).
MEANS = {1: (1.5, 2.1), 0: (0.5, 1.3)}


def true_mean(arm, v1) -> np.ndarray:
    """m_a(v1) = E[Y^a | v1], linear_v1's true mean (:data:`MEANS`)."""
    intercept, slope = MEANS[arm]
    return intercept + slope * np.asarray(v1, dtype=float)


def true_residual(data) -> np.ndarray:
    """R = Y − m_A(V) with the true means: what a perfect location stage fits the embedding to."""
    return data["y"].to_numpy() - np.where(data["a"].to_numpy() == 1, true_mean(1, data["v1"]),
                                           true_mean(0, data["v1"]))


def _mean_diff(res, v_points, rep):
    table = res.effect(newdata=v_points, q=[], alpha=(), level=0.9, n_boot=499, seed=rep)
    md = table[table.term == "mean_diff"]
    return md.estimate.to_numpy(), md.conf_low.to_numpy(), md.conf_high.to_numpy(), md.std_error.to_numpy()


def fixed_hyperparameters(n: int) -> dict:
    """The hyperparameters ``tune="auto"`` chooses for a located fit of linear_v1's data set 999 (σ_y: the arms' mean)."""
    case = get_case("linear_v1")
    data, _ = case.simulate(n, 999)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = ccme.fit(case.formula, data, seed=999, location="linear").tuning.chosen
    return {"x_bandwidth": list(chosen["x_bandwidth"]), "v_bandwidth": [float(b) for b in chosen["v_bandwidth"]],
            "lam0": chosen["lam0"], "lam1": chosen["lam1"], "lam1_plugin": chosen["lam1_plugin"],
            "y_bandwidth": float(np.mean(list(chosen["y_bandwidth"].values())))}


def one_fixed(rep: int, n: int, hyperparameters: dict) -> list[dict]:
    """The ``fixed`` variant: a located fit with ``tune="none"`` at ``hyperparameters``."""
    case = get_case("linear_v1")
    v_points, _ = study_points(case)
    truth = _means(case.mixture(v_points, 1)) - _means(case.mixture(v_points, 0))
    data, _ = case.simulate(n, rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(case.formula, data, seed=rep, location="linear", tune="none", **hyperparameters)
        estimate, low, high, se = _mean_diff(res, v_points, rep)
    return [{"variant": "fixed", "rep": rep, "n": n, "propensity": "fit", "error": (estimate - truth).tolist(),
             "se": se.tolist(), "covered": ((low <= truth) & (truth <= high)).astype(float).tolist(),
             "v_bandwidth": hyperparameters["v_bandwidth"]}]


#: The two-sided 90% normal quantile of the reference's Wald interval.
_Z90 = 1.6448536269514722


def textbook_aipw(data, propensity: np.ndarray, seed: int) -> tuple[float, float]:
    """Cross-fitted (2 folds) AIPW of E[R¹ − R⁰], R = Y − m_A(V) with the true means: (estimate, IF standard error).

    φ_i = m̂₁(X_i) − m̂₀(X_i) + A_i (R_i − m̂₁(X_i)) / π_i − (1 − A_i)(R_i − m̂₀(X_i)) / (1 − π_i), m̂_a an OLS of R
    on (1, v1, w1, w2) among the other fold's arm-a units; the standard error √(Σ_k var_k(φ) / n_k) / 2.
    """
    a = data["a"].to_numpy()
    r = true_residual(data)
    Z = np.c_[np.ones(len(a)), data[["v1", "w1", "w2"]].to_numpy()]
    fold = np.random.default_rng(seed).permutation(len(a)) % 2
    estimates, variances = [], []
    for k in (0, 1):
        train, test = fold != k, fold == k
        m = {arm: Z[test] @ np.linalg.lstsq(Z[train & (a == arm)], r[train & (a == arm)], rcond=None)[0]
             for arm in (1, 0)}
        p, at = propensity[test], a[test]
        phi = m[1] - m[0] + at * (r[test] - m[1]) / p - (1 - at) * (r[test] - m[0]) / (1 - p)
        estimates.append(phi.mean())
        variances.append(phi.var(ddof=1) / test.sum())
    return float(np.mean(estimates)), float(np.sqrt(np.sum(variances)) / 2)


def one_reference(rep: int, n: int) -> list[dict]:
    """The ``aipw`` variant (module docstring): the same error, standard error and coverage at every V-point."""
    case = get_case("linear_v1")
    data, _ = case.simulate(n, rep)
    estimate, se = textbook_aipw(data, np.asarray(case.propensity(data), dtype=float), rep)
    k = len(study_points(case)[0])
    return [{"variant": "aipw", "rep": rep, "n": n, "propensity": "true", "error": [estimate] * k, "se": [se] * k,
             "covered": [float(abs(estimate) <= _Z90 * se)] * k, "v_bandwidth": None}]


def one(rep: int, n: int, propensity: str) -> list[dict]:
    case = get_case("linear_v1")
    v_points, _ = study_points(case)
    truth = _means(case.mixture(v_points, 1)) - _means(case.mixture(v_points, 0))
    v = v_points["v1"].to_numpy()
    data, _ = case.simulate(n, rep)
    options = {"propensity": np.asarray(case.propensity(data), dtype=float)} if propensity == "true" else {}
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        located = ccme.fit(case.formula, data, seed=rep, location="linear", **options)
        held = dataclasses.replace(located, embeddings={
            arm: emb.residual().with_location(dataclasses.replace(emb.location,
                                                                  residuals=np.zeros_like(emb.location.residuals)))
            for arm, emb in located.embeddings.items()})
        oracle = ccme.fit(case.formula, data.assign(y=true_residual(data)), seed=rep, **options)
        shift = true_mean(1, v) - true_mean(0, v)
        for name, res, back in (("located", located, 0.0), ("held", held, 0.0), ("oracle", oracle, shift)):
            estimate, low, high, se = _mean_diff(res, v_points, rep)
            rows.append({"variant": name, "rep": rep, "n": n, "propensity": propensity,
                         "error": (estimate + back - truth).tolist(), "se": se.tolist(),
                         "covered": ((low + back <= truth) & (truth <= high + back)).astype(float).tolist(),
                         "v_bandwidth": located.tuning.chosen.get("v_bandwidth")})
    return rows


def summarise(rows: list[dict]) -> str:
    lines = ["| variant | propensity | data sets | bias (3 V-points) | spread | mean bootstrap SE | coverage |",
             "|---|---|---|---|---|---|---|"]
    keys = sorted({(r["variant"], r["propensity"]) for r in rows})
    for variant, propensity in keys:
        group = [r for r in rows if r["variant"] == variant and r["propensity"] == propensity]
        err = np.array([r["error"] for r in group])
        se = np.array([r["se"] for r in group])
        cov = np.array([r["covered"] for r in group])

        def fmt(x):
            return " / ".join(f"{value:.3f}" for value in x)

        lines.append(f"| {variant} | {propensity} | {len(group)} | {fmt(err.mean(0))} | {fmt(err.std(0))} | "
                     f"{fmt(se.mean(0))} | {fmt(cov.mean(0))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--propensity", choices=("fit", "true"), default="fit")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--fixed", action="store_true", help="the located fit at fixed hyperparameters only")
    parser.add_argument("--reference", action="store_true", help="the textbook AIPW on the same data sets only")
    parser.add_argument("--first", type=int, default=0, help="the first data set r (data sets first <= r < reps)")
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args(argv)
    if args.fixed and args.reference:
        parser.error("--fixed and --reference exclude each other")
    if not args.summarise:
        kind = "fixed" if args.fixed else "aipw" if args.reference else "located"
        propensity = "fit" if args.fixed else "true" if args.reference else args.propensity
        done = {(r["rep"], r["n"], r["propensity"]) for r in _read(args.out)
                if (r["variant"] in ("fixed", "aipw")) == (args.fixed or args.reference)
                and (r["variant"] == "aipw") == args.reference}
        hyperparameters = fixed_hyperparameters(args.n) if args.fixed else None
        for rep in range(args.first, args.reps):
            if (rep, args.n, propensity) in done:
                continue
            rows = (one_fixed(rep, args.n, hyperparameters) if args.fixed else one_reference(rep, args.n)
                    if args.reference else one(rep, args.n, args.propensity))
            with args.out.open("a") as fh:
                for row in rows:
                    fh.write(json.dumps(row) + "\n")
            print(kind, "data set", rep, flush=True)
    print(summarise([r for r in _read(args.out) if r["n"] == args.n]))
    return 0


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


if __name__ == "__main__":
    sys.exit(main())
