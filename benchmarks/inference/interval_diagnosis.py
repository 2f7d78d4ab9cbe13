"""Why effect intervals under-cover: bias or spread, point by point (issue 12).

Written for Deep Feature's intervals (README, "Deep Feature's inference
under-covers") and used for the ridge's on cases off the coverage study.

For each simulated data set of a case with exact truth (the coverage study's
case and V-points, :func:`benchmarks.inference.coverage.study_points`), the
fit's mean difference at each V-point, its bootstrap standard error and its
90% interval (the bias-aware default, ``res.effect``) are stored next to the
true difference.  ``--summarise`` then splits the miss into its parts, per
V-point and method:

* bias: the estimates' mean minus the truth, and the same for the
  intervals' centres (the bias-aware intervals are centred on the
  bias-reduced estimate, not on the reported one);
* spread: the standard deviation over the data sets of the estimates and
  of the intervals' centres against the mean bootstrap standard error (the
  bootstrap is right about the spread when they agree), and that of the
  centres' studentised errors (1 when the standard errors are right);
* coverage of the intervals;
* for Deep Feature, the epoch at which each fold-arm's second-stage
  network had its best validation loss (the one kept): an early one means
  features close to the network's random initialisation;
* with ``--seeds``, the spread of one data set's estimate over training
  seeds alone (the networks' own variability, which a bootstrap that holds
  the learned features fixed leaves out).

``--design fixed-v`` draws V once (seed :data:`FIXED_V_SEED`) and only W,
A and Y anew per data set: the multiplier bootstrap conditions on the
design, so the spread of the centres then shows whether it is right given
V, and the difference to the default (``random``) what V's sampling adds.
``--mode ipw`` fits without a first stage; ``--n-rep R`` repeats the
cross-fitting on R splits; ``--tune none`` keeps the default
hyperparameters on every data set (the bootstrap does not resample their
choice); ``--propensity true`` passes the true propensity scores, which
makes the doubly robust pseudo-outcome exactly unbiased given X, so a bias
left then comes from the second stage.  ``--restore-factor F`` gives the V
covariates the tuning dropped back at F times their rule's bandwidth in the
intervals (``ccme.bootstrap.RESTORE_FACTOR``; ``inf`` keeps them dropped);
each row records the dropped covariates, and ``--summarise --dropped yes``
keeps the data sets that dropped one.  Resumable; one JSON line per fit::

    python benchmarks/inference/interval_diagnosis.py --reps 12
    python benchmarks/inference/interval_diagnosis.py --reps 12 --method ridge
    python benchmarks/inference/interval_diagnosis.py --reps 12 --propensity true
    python benchmarks/inference/interval_diagnosis.py --reps 1 --seeds 10
    python benchmarks/inference/interval_diagnosis.py --case through_w --method ridge --reps 100 --restore-factor inf
    python benchmarks/inference/interval_diagnosis.py --summarise
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
import ccme.bootstrap  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import LEVEL, _means, restore_arguments, study_points  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows, select_dropped  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "interval_diagnosis.jsonl"


#: The options a run may vary (the fit's, and the data's design), at their defaults.  A row stores the ones that differ, so rows written
#: before an option existed read as its default.  (Not so for ``restore_factor``: the rows of
#: ``results/interval_diagnosis.jsonl`` predate the restored bandwidth, so their dropped covariates stayed dropped.)
VARIED = {"tune": "auto", "n_rep": 1, "mode": "dr", "design": "random", "restore_factor": ccme.bootstrap.RESTORE_FACTOR}

#: The seed of V's own stream with ``--design fixed-v`` (:meth:`benchmarks.accuracy._base.SyntheticCase.simulate`).
FIXED_V_SEED = 10**6


def one_fit(case, rep: int, seed: int, *, n: int, method: str, propensity: str, design: str, restore_factor: float,
            **fit_options) -> dict:
    data, _ = case.simulate(n, rep, **({"v_seed": FIXED_V_SEED} if design == "fixed-v" else {}))
    v_points, _ = study_points(case)
    truth = _means(case.mixture(v_points, 1)) - _means(case.mixture(v_points, 0))
    changed = {k: v for k, v in {**fit_options, "design": design, "restore_factor": restore_factor}.items()
               if v != VARIED[k]}
    options = {k: v for k, v in fit_options.items() if v != VARIED[k]}
    options.update({} if method == "ridge" else {"progress": False})
    if propensity == "true":
        options["propensity"] = np.asarray(case.propensity(data), dtype=float)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bootstrap caveat and clipping notes: this run measures them
        res = ccme.fit(case.formula, data, seed=seed, method=method, **options)
        default_factor, ccme.bootstrap.RESTORE_FACTOR = ccme.bootstrap.RESTORE_FACTOR, restore_factor
        try:
            eff = res.effect(newdata=v_points, q=(0.5,), level=LEVEL, n_boot=499, seed=rep)
        finally:
            ccme.bootstrap.RESTORE_FACTOR = default_factor
    md = eff[eff["term"] == "mean_diff"]
    extra = {}
    if method == "deep_feature":
        history = res.training_history()
        final = history[history["stage"] == 2]
        extra["stage2_best_epoch"] = {str(arm): [int(g["epoch"][g["best"]].iloc[0]) for _, g in rows.groupby("fold")]
                                      for arm, rows in final.groupby("arm")}
    return {**extra, "case": case.name, "n": n, "rep": rep, "seed": seed, "method": method, "propensity": propensity,
            **changed, "estimate": md["estimate"].tolist(), "std_error": md["std_error"].tolist(),
            "conf_low": md["conf_low"].tolist(), "conf_high": md["conf_high"].tolist(), "truth": truth.tolist(),
            "dropped": ccme.bootstrap.dropped_v_groups(res), "seconds": round(time.perf_counter() - started, 1)}


def _key(row: dict) -> tuple:
    """The run a row belongs to: case, n, method, propensity and the :data:`VARIED` options."""
    return (row["case"], row["n"], row["method"], row["propensity"], *(row.get(k, v) for k, v in VARIED.items()))


def _sd(values: np.ndarray) -> np.ndarray:
    """Standard deviation over data sets (rows); NaN with fewer than two."""
    return values.std(0, ddof=1) if len(values) > 1 else np.full(values.shape[1], np.nan)


def summarise(path: Path, dropped: str = "all") -> str:
    """The table of ``path``'s runs; ``dropped`` "yes" or "no" keeps the data sets whose fit dropped a V covariate,
    or dropped none (rows that do not record it are left out then)."""
    rows = select_dropped(read_rows(path), dropped)
    lines = []
    for key in sorted({_key(r) for r in rows}):
        group = [r for r in rows if _key(r) == key]
        across = [r for r in group if r["seed"] == r["rep"]]       # one fit per data set
        seeds = [r for r in group if r["rep"] == 0]                # data set 0 at every seed
        varied = ", ".join(f"{k} {v}" for k, v in zip(VARIED, key[4:]))
        lines.append(f"== {key[0]}, n = {key[1]}, {key[2]}, propensity {key[3]}, {varied}: {len(across)} data sets")
        if across:
            est, se = np.array([r["estimate"] for r in across]), np.array([r["std_error"] for r in across])
            lo, hi = np.array([r["conf_low"] for r in across]), np.array([r["conf_high"] for r in across])
            truth = np.array(across[0]["truth"])
            for name, value in (
                ("truth", truth),
                ("bias of the estimate", est.mean(0) - truth),
                ("bias of the interval's centre", ((lo + hi) / 2).mean(0) - truth),
                ("sd of the estimate", _sd(est)),
                ("sd of the interval's centre", _sd((lo + hi) / 2)),
                ("mean bootstrap standard error", se.mean(0)),
                ("sd of (centre - truth) / std_error", _sd(((lo + hi) / 2 - truth) / se)),
                (f"coverage of the {LEVEL:.0%} interval", ((lo <= truth) & (truth <= hi)).mean(0)),
            ):
                lines.append(f"   {name:<34}" + "".join(f"{x:>9.3f}" for x in value))
        epochs = [r["stage2_best_epoch"] for r in across if "stage2_best_epoch" in r]
        if epochs:
            for arm in sorted(epochs[0], reverse=True):
                best = np.concatenate([e[arm] for e in epochs])
                lines.append(f"   stage-2 network's best epoch, arm {arm}: median {np.median(best):g}, "
                             f"{np.mean(best <= 5):.0%} of {len(best)} fold-arms at epoch 5 or earlier")
        if len(seeds) > 1:
            spread = np.array([r["estimate"] for r in seeds]).std(0, ddof=1)
            lines.append(f"   {f'sd over {len(seeds)} seeds, data set 0':<34}" + "".join(f"{x:>9.3f}" for x in spread))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="hetero_v2")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=12, help="data sets r < reps, fitted with seed r")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=0, help="also fit data set 0 with seeds 1..SEEDS")
    parser.add_argument("--method", default="deep_feature")
    parser.add_argument("--propensity", choices=("fit", "true"), default="fit")
    parser.add_argument("--tune", choices=("auto", "none"), default="auto",
                        help="fit(tune=...): 'none' keeps the default hyperparameters on every data set")
    parser.add_argument("--n-rep", type=int, default=1, help="fit(n_rep=...): repeated cross-fitting")
    parser.add_argument("--mode", default="dr", help="fit(mode=...): 'ipw' has no first stage")
    parser.add_argument("--design", choices=("random", "fixed-v"), default="random",
                        help="'fixed-v': the same V in every data set (synthetic cases), W, A and Y drawn anew")
    restore_arguments(parser)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(args.out, args.dropped))
        return 0
    case = get_case(args.case)
    settings = {"n": args.n, "method": args.method, "propensity": args.propensity, "tune": args.tune,
                "n_rep": args.n_rep, "mode": args.mode, "design": args.design, "restore_factor": args.restore_factor}
    run = _key({"case": case.name, **settings})
    done = {(r["rep"], r["seed"]) for r in read_rows(args.out) if _key(r) == run}
    fits = [(rep, rep) for rep in range(args.first, args.reps)] + [(0, s) for s in range(1, args.seeds + 1)]
    for rep, seed in fits:
        if (rep, seed) in done:
            continue
        row = one_fit(case, rep, seed, **settings)
        append_row(args.out, row)
        print(case.name, args.n, args.method, rep, seed, f"{row['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
