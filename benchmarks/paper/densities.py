"""The paper's qualitative assessment (Section "Qualitative Assessment", Figure "densities").

Estimated p̂¹(y | v) at the profiles v1, v2 (``ccme.datasets.PAPER_PROFILES``)
over repeated runs of the paper simulation: pointwise median and 50% / 90%
bands of DR (blue) and one-step (red) against the exact density (black), one
column per method.

    python benchmarks/paper/densities.py --quick         # 10 runs at n = 4000, a few minutes
    python benchmarks/paper/densities.py                 # 30 runs at n = 20000, as the paper
    python benchmarks/paper/densities.py --paper-config  # the paper's hyperparameters

The curves of every finished run are saved to an .npz after each run; a rerun
with the same settings continues from there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import METHODS, SCENARIOS, fit_options, fit_quiet  # noqa: E402

import ccme  # noqa: E402
from ccme.datasets import PAPER_PROFILES, paper_simulation_density  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
GRID = np.linspace(-8.0, 42.0, 400)
MODES = ("dr", "onestep")


def run(args, path: Path) -> np.ndarray:
    """Curves of shape (runs, methods, modes, profiles, grid), NaN where not yet computed."""
    shape = (args.runs, len(args.methods), len(MODES), len(PAPER_PROFILES), len(GRID))
    curves = np.full(shape, np.nan)
    if path.exists():
        saved = np.load(path)["curves"]
        if saved.shape[1:] == shape[1:]:
            k = min(len(saved), args.runs)
            curves[:k] = saved[:k]
    started = time.perf_counter()
    for r in range(args.runs):
        data = None
        for i, method in enumerate(args.methods):
            for j, mode in enumerate(MODES):
                if not np.isnan(curves[r, i, j]).any():
                    continue
                if data is None:
                    data = ccme.datasets.paper_simulation(args.n, seed=1000 + r)
                res = fit_quiet(data, method=method, mode=mode, seed=1000 + r, n_threads=args.threads,
                                **SCENARIOS["both correct"], **fit_options(method, data, paper_config=args.paper_config))
                curves[r, i, j] = res.density(GRID, newdata=PAPER_PROFILES, arm=1)
                print(f"[{time.perf_counter() - started:6.0f}s] run {r + 1}/{args.runs} {method} {mode}", flush=True)
        np.savez(path, curves=curves[: r + 1], grid=GRID, methods=np.array(args.methods), n=args.n)
    return curves


def figure(curves: np.ndarray, methods, out: Path, n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    truth = paper_simulation_density(GRID, PAPER_PROFILES, arm=1)
    colors = {"dr": "tab:blue", "onestep": "tab:red"}
    labels = {"dr": "DR", "onestep": "One-Step"}
    fig, axes = plt.subplots(2, len(methods), figsize=(3.3 * len(methods), 5.0), sharex=True, sharey="row",
                             squeeze=False)
    for p, profile in enumerate(PAPER_PROFILES.index):
        for i, method in enumerate(methods):
            ax = axes[p, i]
            for j, mode in enumerate(MODES):
                c = curves[:, i, j, p]
                c = c[~np.isnan(c).any(axis=1)]
                q05, q25, q50, q75, q95 = np.quantile(c, [0.05, 0.25, 0.5, 0.75, 0.95], axis=0)
                ax.fill_between(GRID, q05, q95, color=colors[mode], alpha=0.15, lw=0)
                ax.fill_between(GRID, q25, q75, color=colors[mode], alpha=0.35, lw=0)
                ax.plot(GRID, q50, color=colors[mode], lw=1.2, label=labels[mode])
            ax.plot(GRID, truth[p], color="black", lw=1.0, ls="--", label="truth")
            if p == 0:
                ax.set_title(method.replace("_", " ").title(), fontsize=10)
            if i == 0:
                ax.set_ylabel(f"p(y¹ | {profile})")
            if p == 1:
                ax.set_xlabel("y")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{len(curves)} runs at n = {n}: median, 50% and 90% pointwise bands", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def summary(curves: np.ndarray, methods):
    """Integrated squared error of the median curve and the mean ISE of single runs, per method/mode/profile."""
    truth = paper_simulation_density(GRID, PAPER_PROFILES, arm=1)
    for i, method in enumerate(methods):
        for j, mode in enumerate(MODES):
            parts = []
            for p, profile in enumerate(PAPER_PROFILES.index):
                c = curves[:, i, j, p]
                c = c[~np.isnan(c).any(axis=1)]
                med = np.trapezoid((np.median(c, axis=0) - truth[p]) ** 2, GRID)
                single = np.mean(np.trapezoid((c - truth[p]) ** 2, GRID, axis=1))
                parts.append(f"{profile}: ISE(median) {med:.4f}, mean ISE {single:.4f}")
            print(f"{method:13s} {mode:8s} " + "; ".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 runs at n = 4000")
    parser.add_argument("--paper-config", action="store_true", help="the paper's hyperparameters, tune='none'")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--n", type=int)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    args.runs = args.runs or (10 if args.quick else 30)
    args.n = args.n or (4000 if args.quick else 20000)
    stem = "densities" + ("_quick" if args.quick else "") + ("_paper" if args.paper_config else "")
    path = RESULTS / f"{stem}.npz"
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        curves = np.load(path)["curves"]
    else:
        started = time.perf_counter()
        curves = run(args, path)
        print(f"total {time.perf_counter() - started:.0f}s")
    summary(curves, args.methods)
    figure(curves, args.methods, path.with_suffix(".png"), args.n)


if __name__ == "__main__":
    main()
