"""The defaults against the hand grid's best *fixed* configuration, not only its best per seed (issue 11).

``run.py``'s oracle picks, for every seed and arm, the hand-grid point with the
smallest error against the truth.  With 8 grid points and integrated squared
errors that vary by 20–50% from seed to seed, that minimum is biased low (the
winner's curse): it is not an error any one configuration reaches.  The
issue's target, "within 15% of the best hand grid", is read here also as the
configuration a user with the truth would fix in advance: per case and arm,
the grid point with the smallest mean error over the seeds.

Every grid point and the defaults are fitted on the same data sets (the
case's own n, ``run.py``'s V-points) and stored, one CSV row per fit, so both
oracles come from the same fits.  The summary gives, per case and arm, the
defaults' mean error, the per-seed oracle's, the fixed oracle's (and its
configuration), the two ratios, and the defaults against the fixed oracle
seed by seed (geometric mean of the ratios; seeds where the defaults win),
and the same geometric mean with the fixed point chosen leave one seed out
(``held-out``): the point fixed on all the seeds has still seen the seed it
is scored on, this one has not.  The full grid (``--grid full``) has 27
distinct points: its propensity axis, ``"default"`` and ``"forest"``, is one
model since the forest became the default, and ``run.oracle_points`` now
fits it once (the stored CSVs below were run before and hold both, with
identical errors).  Discrete-V cases at seeds 7-12 and continuous ones at 7-9:
``results/oracle_fixed_{discrete,continuous}_{a,b}.csv`` and
``results/oracle_fixed_heldout.txt``::

    python benchmarks/accuracy/oracle_fixed.py --cases mixed_v,ihdp_site --seeds 1,2,3,4,5
    python benchmarks/accuracy/oracle_fixed.py --summarise
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.run import (CONFIGS, EVAL_POINTS, HAND_GRID, QUICK_HAND_GRID, Problem,  # noqa: E402
                                     oracle_points, run_fit)
from benchmarks.accuracy.zoo import get_case  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "oracle_fixed.csv"
FIELDS = ["case", "split", "seed", "n", "config", "ise1", "ise0", "seconds"]
DEFAULTS = "defaults"
#: The cases whose per-seed oracle gap ``results/oracle_gap.txt`` reported, in its order.
CASES = ("mixed_v", "ihdp_site", "ihdp_all25", "mixture_v3", "irrelevant_x50")


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def run(cases, seeds, grid: dict, out: Path) -> None:
    done = {(r["case"], r["seed"], r["config"]) for r in read(out)}
    new_file = not out.exists()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        for name in cases:
            case = get_case(name)
            for seed in seeds:
                problem = None  # built on the first fit the file does not hold yet
                for label, kwargs in [(DEFAULTS, CONFIGS["ridge_dr"][1]), *oracle_points(case.dim_y, grid)]:
                    if (case.name, str(seed), label) in done:
                        continue
                    problem = problem or Problem(case, case.n, seed, EVAL_POINTS)
                    scores, seconds, _ = run_fit(problem, kwargs)
                    writer.writerow({"case": case.name, "split": case.split, "seed": seed, "n": problem.n,
                                     "config": label, "ise1": scores[1], "ise0": scores[0],
                                     "seconds": round(seconds, 2)})
                    handle.flush()
                    print(f"{case.name} seed {seed} {label}: {scores[1]:.4g} / {scores[0]:.4g} ({seconds:.1f} s)",
                          flush=True)


def held_out_ratios(errors: np.ndarray, defaults: int, grid: list[int]) -> np.ndarray:
    """Per seed, the defaults' error over the grid point whose mean error is smallest over the *other* seeds.

    ``errors`` is seeds × configurations.  The fixed oracle chosen on all the
    seeds still sees the seed it is scored on; this one does not, so its ratio
    is what a configuration fixed in advance from other data sets would give
    (leave one seed out).  Empty with fewer than two seeds.
    """
    if len(errors) < 2:
        return np.empty(0)
    on_grid = errors[:, grid]
    ratios = []
    for s in range(len(errors)):
        chosen = int(np.argmin(np.delete(on_grid, s, axis=0).mean(axis=0)))
        ratios.append(errors[s, defaults] / on_grid[s, chosen])
    return np.array(ratios)


def geometric_mean(ratios: np.ndarray) -> float:
    """exp(mean(log r)); NaN for none (a held-out ratio needs two seeds)."""
    return float(np.exp(np.mean(np.log(ratios)))) if len(ratios) else np.nan


def summarise(path: Path | list[Path]) -> str:
    """The per-case table, then how many case-arms each oracle's ratio keeps within the issue's 15%."""
    rows = [row for one in ([path] if isinstance(path, Path) else path) for row in read(one)]
    tally = {"per-seed oracle": [], "fixed oracle": [], "held-out fixed": []}
    lines = [f"{'case':<16}{'arm':>4}{'seeds':>6}{'defaults':>10}{'per-seed':>10}{'fixed':>10}"
             f"{'def/per-seed':>14}{'def/fixed':>11}{'geo-mean':>10}{'wins':>6}{'held-out':>10}"
             "   fixed configuration"]
    for name in dict.fromkeys(r["case"] for r in rows):
        group = [r for r in rows if r["case"] == name]
        seeds = sorted({r["seed"] for r in group}, key=int)
        configs = list(dict.fromkeys(r["config"] for r in group))
        for arm in ("1", "0"):
            table = {(r["seed"], r["config"]): float(r[f"ise{arm}"]) for r in group}
            complete = [s for s in seeds if all((s, c) in table for c in configs)]
            if not complete:
                continue
            errors = np.array([[table[(s, c)] for c in configs] for s in complete])  # seeds × configs
            d = configs.index(DEFAULTS)
            grid = [j for j in range(len(configs)) if j != d]
            per_seed = errors[:, grid].min(axis=1)
            fixed = grid[int(np.argmin(errors[:, grid].mean(axis=0)))]
            ratio = errors[:, d] / errors[:, fixed]
            held_out = held_out_ratios(errors, d, grid)
            geo = {"per-seed oracle": geometric_mean(errors[:, d] / per_seed), "fixed oracle": geometric_mean(ratio),
                   "held-out fixed": geometric_mean(held_out)}
            for key, value in geo.items():
                if np.isfinite(value):
                    tally[key].append(value)
            lines.append(f"{name:<16}{arm:>4}{len(complete):>6}{errors[:, d].mean():>10.4f}{per_seed.mean():>10.4f}"
                         f"{errors[:, fixed].mean():>10.4f}{errors[:, d].mean() / per_seed.mean():>14.2f}"
                         f"{errors[:, d].mean() / errors[:, fixed].mean():>11.2f}"
                         f"{geo['fixed oracle']:>10.2f}{int(np.sum(ratio < 1)):>6}"
                         f"{geo['held-out fixed']:>10.2f}   {configs[fixed]}")
    lines.append("(per-seed: the grid's smallest error at each seed, as run.py's oracle; fixed: the grid point with "
                 "the smallest mean error over the seeds; geo-mean and wins: defaults / fixed seed by seed; "
                 "held-out: the same geometric mean with the fixed point chosen on the other seeds, "
                 "leave one seed out)")
    for name, ratios in tally.items():
        if ratios:
            ratios = np.array(ratios)
            lines.append(f"defaults / {name} (geometric mean of the per-seed ratios): within 15% on "
                         f"{int(np.sum(ratios <= 1.15))} of {len(ratios)} case-arms, "
                         f"geometric mean {geometric_mean(ratios):.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--grid", choices=("quick", "full"), default="quick",
                        help="run.py's quick hand grid (as results/oracle_gap.txt) or its full one")
    parser.add_argument("--out", type=Path, nargs="+", default=[OUT],
                        help="the CSV to append fits to; with --summarise, one or more to read together")
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args(argv)
    if not args.summarise:
        if len(args.out) != 1:
            parser.error("a run appends to one --out file")
        run(args.cases.split(","), [int(s) for s in args.seeds.split(",")],
            QUICK_HAND_GRID if args.grid == "quick" else HAND_GRID, args.out[0])
    print(summarise(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
