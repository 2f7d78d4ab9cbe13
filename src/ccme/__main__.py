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
    from ccme.datasets import paper_simulation_ise

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
    fig = demo_figure(results, grid, n)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"\nWrote {out}")
    return errors


def _describe_profile(row) -> str:
    """``"x1, x3, x5 = 2.2; x2, x4 = -0.2"``: a profile's columns grouped by value (the paper's v1, v2 alternate)."""
    groups: dict[float, list[str]] = {}
    for name, value in row.items():
        groups.setdefault(float(value), []).append(str(name))
    return "; ".join(f"{', '.join(names)} = {value:g}" for value, names in groups.items())


def demo_figure(results: dict, grid, n: int):
    """The demo's figure: the DR and one-step estimates against the exact density.

    Parameters
    ----------
    results : dict
        Fitted results on the paper's simulation under the keys ``"dr"`` and
        ``"onestep"``.
    grid : array
        Outcome values to draw at.
    n : int
        The sample size, for the title.

    Returns
    -------
    matplotlib.figure.Figure
        Rows: Y¹ and Y⁰; columns: the paper's profiles v1 and v2 (spelled out
        in the column titles).  The exact density is a grey filled area, so
        that it reads as the reference the lines are compared with; one legend
        for the whole figure.
    """
    import matplotlib.pyplot as plt

    from ccme.datasets import PAPER_PROFILES, paper_simulation_density

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    for row, arm in enumerate((1, 0)):
        for col, profile in enumerate(PAPER_PROFILES.index):
            ax = axes[row, col]
            v = PAPER_PROFILES.loc[[profile]]
            exact = paper_simulation_density(grid, v, arm=arm)[0]
            ax.fill_between(grid, exact, color="0.75", alpha=0.6, lw=0, label="exact density (truth)")
            ax.plot(grid, exact, color="0.35", lw=0.8)
            ax.plot(grid, results["dr"].density(grid, newdata=v, arm=arm)[0], "C0-", lw=1.8, label="doubly robust (DR)")
            ax.plot(grid, results["onestep"].density(grid, newdata=v, arm=arm)[0], "C3--", lw=1.8, label="one-step")
            arm_name = "treated" if arm == 1 else "control"
            title = f"p(Y$^{arm}$ | V = {profile}), {arm_name} outcome"
            if row == 0:  # say once, above each column, what the profile is
                title = f"{profile}: {_describe_profile(PAPER_PROFILES.loc[profile])}\n" + title
            ax.set_title(title, fontsize=10)
            ax.set_ylim(bottom=0)
            if col == 0:
                ax.set_ylabel("density of the outcome")
            if row == 1:
                ax.set_xlabel("outcome y")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(
        f"ccme demo: conditional densities of the potential outcomes given V = (x1, ..., x5), "
        f"paper simulation, n = {n}"
    )
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


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
