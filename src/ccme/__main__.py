"""Command line: ``python -m ccme demo`` runs the package's main job on built-in data."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

PAPER_FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


def demo(n: int = 4000, seed: int = 1, out: str = "ccme-demo.png", n_test: int = 1000) -> dict:
    """Fit the paper's simulation with DR and one-step, report errors, draw the estimates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    import ccme
    from ccme.datasets import PAPER_PROFILES, paper_simulation_density, paper_simulation_ise

    data = ccme.datasets.paper_simulation(n, seed=seed)
    print(f"Paper simulation: n = {n}, seed = {seed}; formula {PAPER_FORMULA!r}\n")
    results, errors = {}, {}
    for mode in ("dr", "onestep"):
        started = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results[mode] = ccme.fit(PAPER_FORMULA, data, mode=mode, propensity="forest", seed=seed)
        for w in caught:
            print(f"warning ({mode}): {w.message}")
        elapsed = time.perf_counter() - started
        errors[mode] = {arm: paper_simulation_ise(results[mode], arm=arm, n_test=n_test) for arm in (1, 0)}
        print(f"{mode}: fitted in {elapsed:.1f} s")
    print()
    print(results["dr"].summary())
    print()
    print(f"Integrated squared error against the exact density (mean over {n_test} V-draws):")
    print(f"  {'':10s} {'Y^1':>10s} {'Y^0':>10s}")
    for mode, label in (("dr", "DR"), ("onestep", "one-step")):
        print(f"  {label:10s} {errors[mode][1]:10.5f} {errors[mode][0]:10.5f}")

    grid = np.linspace(data["y"].min() - 2, data["y"].max() + 2, 600)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for row, arm in enumerate((1, 0)):
        for col, profile in enumerate(PAPER_PROFILES.index):
            ax = axes[row, col]
            v = PAPER_PROFILES.loc[[profile]]
            ax.plot(grid, paper_simulation_density(grid, v, arm=arm)[0], "k-", lw=2, label="truth")
            ax.plot(grid, results["dr"].density(grid, v, arm=arm)[0], "C0-", label="DR")
            ax.plot(grid, results["onestep"].density(grid, v, arm=arm)[0], "C3--", label="one-step")
            ax.set_title(f"p(Y^{arm} | V = {profile})")
            if row == 1:
                ax.set_xlabel("y")
    axes[0, 0].legend()
    fig.suptitle(f"ccme demo: ridge CCME on the paper simulation (n = {n})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"\nWrote {out}")
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ccme", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="fit the paper's simulation with DR and one-step and plot the estimates")
    p_demo.add_argument("--n", type=int, default=4000, help="sample size (default 4000)")
    p_demo.add_argument("--seed", type=int, default=1)
    p_demo.add_argument("--out", default="ccme-demo.png", help="where to write the figure")
    p_demo.add_argument("--n-test", type=int, default=1000, help="V-draws for the error (default 1000)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.n, args.seed, args.out, args.n_test)
    return 0


if __name__ == "__main__":
    sys.exit(main())
