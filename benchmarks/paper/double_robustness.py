"""The paper's double-robustness experiment (Section "Analysis of Double Robustness", Figure "mses").

3 methods × 4 modes × 3 scenarios × n ∈ {200, ..., 20000} × 10 seeds; the
error of p̂¹(y | v) against the exact density on 10000 test points V and a
1000-point grid over [min(Y) − 2, max(Y) + 2] (see ``common.density_errors``:
both the paper's MSE and the integrated squared error are recorded; the
figure shows the MSE).

    python benchmarks/paper/double_robustness.py --quick          # ~20 min on 2 cores
    python benchmarks/paper/double_robustness.py                  # the full grid: hours
    python benchmarks/paper/double_robustness.py --paper-config   # the paper's hyperparameters
    python benchmarks/paper/double_robustness.py --plot-only      # redraw the figure from the CSV

Rows are appended to the CSV as they finish and configurations already present
are skipped, so an interrupted run resumes where it stopped.

For the neural methods, fits that cannot differ are shared rather than
repeated (same data, folds and seed): one-step regresses φ(Y) on V among the
treated and uses neither nuisance, so it is fitted once per (method, n, seed);
IPW does not use the outcome model, so "outcome misspecified" reuses the "both
correct" IPW fit; the plug-in does not use the propensity, so "propensity
misspecified" reuses the "both correct" plug-in fit.  Such rows carry
``shared_from``.  (Checked: the shared and the refitted errors are equal to the
last digit for both neural methods at n = 300.)  Ridge is always refitted: its
automatic tuning looks at the propensity and the outcome covariates for every
mode, so the fits do differ.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import METHODS, MODES, SCENARIOS, density_errors, fit_options, fit_quiet, test_points  # noqa: E402

import ccme  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FULL = {"n": [200, 500, 1000, 2000, 5000, 10000, 20000], "seeds": list(range(10)), "n_test": 10000}
QUICK = {"n": [200, 500, 1000, 2000], "seeds": [0, 1, 2], "n_test": 1000}
FIELDS = ["method", "scenario", "mode", "n", "seed", "mse", "ise", "fit_seconds", "shared_from", "config"]
SCENARIO_NAMES = list(SCENARIOS)


def shared_source(method: str, scenario: str, mode: str):
    """The scenario whose fit is identical to (scenario, mode), or None (see the module docstring)."""
    first = SCENARIO_NAMES[0]
    if method == "ridge" or scenario == first:
        return None
    if mode == "onestep":
        return first
    if mode == "ipw" and scenario == "outcome misspecified":
        return first
    if mode == "pi" and scenario == "propensity misspecified":
        return first
    return None


def read_done(path: Path) -> dict:
    if not path.exists():
        return {}
    frame = pd.read_csv(path)
    return {(r.method, r.scenario, r.mode, int(r.n), int(r.seed)): r for r in frame.itertuples(index=False)}


def run(args, path: Path):
    done = read_done(path)
    new_file = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    config = "paper" if args.paper_config else "auto"
    total = len(args.methods) * len(SCENARIO_NAMES) * len(MODES) * len(args.n) * len(args.seeds)
    count, started = len(done), time.perf_counter()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        for n in args.n:
            for seed in args.seeds:
                data = ccme.datasets.paper_simulation(n, seed=seed)
                # Test points depend on the seed only: every method and mode sees the same ones.
                newdata = test_points(args.n_test, 10_000 + seed)
                for method in args.methods:
                    options = fit_options(method, data, paper_config=args.paper_config)
                    for scenario in SCENARIO_NAMES:
                        for mode in MODES:
                            key = (method, scenario, mode, n, seed)
                            if key in done:
                                continue
                            source = shared_source(method, scenario, mode)
                            if source is not None:
                                base = done[(method, source, mode, n, seed)]
                                row = {"mse": base.mse, "ise": base.ise, "fit_seconds": 0.0, "shared_from": source}
                            else:
                                t0 = time.perf_counter()
                                res = fit_quiet(data, method=method, mode=mode, seed=seed, n_threads=args.threads,
                                                **SCENARIOS[scenario], **options)
                                row = {**density_errors(res, data, newdata), "shared_from": ""}
                                row["fit_seconds"] = round(time.perf_counter() - t0, 2)
                            row.update(method=method, scenario=scenario, mode=mode, n=n, seed=seed, config=config)
                            writer.writerow(row)
                            handle.flush()
                            done[key] = pd.Series(row)
                            count += 1
                            print(f"[{count}/{total} {time.perf_counter() - started:7.0f}s] {method:13s} "
                                  f"{scenario:24s} {mode:8s} n={n:<6d} seed={seed} mse={row['mse']:.3e} "
                                  f"ise={row['ise']:.4f}", flush=True)


def figure(path: Path, out: Path, metric: str = "mse"):
    """The 3 × 3 figure: log error vs n, methods in columns, scenarios in rows, mean ± s.e. over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = pd.read_csv(path)
    methods = [m for m in METHODS if m in set(frame["method"])]
    colors = {"dr": "C0", "ipw": "C2", "pi": "C1", "onestep": "C3"}
    labels = {"dr": "DR", "ipw": "IPW", "pi": "PI", "onestep": "One-Step"}
    fig, axes = plt.subplots(len(SCENARIO_NAMES), len(methods), figsize=(3.2 * len(methods), 7.5),
                             sharex=True, sharey=True, squeeze=False)
    for i, scenario in enumerate(SCENARIO_NAMES):
        for j, method in enumerate(methods):
            ax = axes[i, j]
            part = frame[(frame["method"] == method) & (frame["scenario"] == scenario)]
            for mode in MODES:
                stats = part[part["mode"] == mode].groupby("n")[metric].agg(["mean", "std", "count"])
                if stats.empty:
                    continue
                se = (stats["std"].fillna(0.0) / np.sqrt(stats["count"])).to_numpy()
                ax.plot(stats.index, stats["mean"], marker="o", ms=3, color=colors[mode], label=labels[mode])
                ax.fill_between(stats.index, np.maximum(stats["mean"] - se, 1e-12), stats["mean"] + se,
                                color=colors[mode], alpha=0.2)
            ax.set_xscale("log")
            ax.set_yscale("log")
            sizes = sorted(frame["n"].unique())
            ax.set_xticks(sizes, [f"{n:g}" for n in sizes], fontsize=7, rotation=45)
            ax.minorticks_off()
            if i == 0:
                ax.set_title(method.replace("_", " ").title().replace("Ridge", "Ridge Regression"), fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{scenario}\n{metric.upper()}", fontsize=9)
            if i == len(SCENARIO_NAMES) - 1:
                ax.set_xlabel("n")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"n={QUICK['n']}, seeds={QUICK['seeds']}, "
                                                             f"{QUICK['n_test']} test points")
    parser.add_argument("--paper-config", action="store_true", help="the paper's hyperparameters, tune='none'")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--n", type=int, nargs="+", help="sample sizes (overrides the preset)")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (overrides the preset)")
    parser.add_argument("--n-test", type=int, help="test points V (overrides the preset)")
    parser.add_argument("--threads", type=int, default=0, help="ccme threads (0: all cores)")
    parser.add_argument("--csv", type=Path, help="results file (default: results/double_robustness[_quick][_paper].csv)")
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    preset = QUICK if args.quick else FULL
    args.n = args.n or preset["n"]
    args.seeds = args.seeds if args.seeds is not None else preset["seeds"]
    args.n_test = args.n_test or preset["n_test"]
    stem = "double_robustness" + ("_quick" if args.quick else "") + ("_paper" if args.paper_config else "")
    path = args.csv or RESULTS / f"{stem}.csv"
    if not args.plot_only:
        started = time.perf_counter()
        run(args, path)
        print(f"total {time.perf_counter() - started:.0f}s on {os.cpu_count()} cores")
    figure(path, path.with_suffix(".png"))


if __name__ == "__main__":
    main()
