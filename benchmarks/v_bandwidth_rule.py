"""The shared V kernel's rule on the accuracy zoo: one search per arm (smallest bandwidth kept) against the summed one.

``ccme.tuning.PER_ARM_V_SEARCH_ARMS`` = 2 (the default: per-arm searches for
every treatment) against 3 (binary treatments searched on the arms' summed
criterion, the rule before).  Runs the zoo's runner once per setting (ridge
DR with ``fit``'s defaults; --methods adds others) and prints the ratio of
the mean ISE per case and arm::

    python benchmarks/v_bandwidth_rule.py --split choose --seeds 1,2,3 --eval-points 150
    python benchmarks/v_bandwidth_rule.py --cases linear_v1,hetero_v2 --seeds 1,2,3 --eval-points 150

Output: benchmarks/results/v_bandwidth_rule_<tag>.txt (the CSVs beside it,
resumable).  The choice was made on the "choose" split and reported on the
"report" split (README, "Automatic tuning").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_RUN = ("import sys; sys.path.insert(0, {root!r}); import ccme.tuning; ccme.tuning.PER_ARM_V_SEARCH_ARMS = {k}; "
        "from benchmarks.accuracy import run; sys.exit(run.main(sys.argv[1:]))")


def compare(old: pd.DataFrame, new: pd.DataFrame, config: str = "ridge_dr") -> list[str]:
    """Per case and arm: mean ISE with the summed search (old) and with per-arm searches (new), and their ratio."""
    m = old[old.config == config].merge(new[new.config == config], on=["case", "seed"], suffixes=("_old", "_new"))
    lines, ratios = [f"{'case':16s} {'arm 1: summed':>14s} {'per arm':>9s} {'ratio':>6s}   "
                     f"{'arm 0: summed':>14s} {'per arm':>9s} {'ratio':>6s}"], []
    for case, g in m.groupby("case", sort=False):
        r1, r0 = g.ise1_new.mean() / g.ise1_old.mean(), g.ise0_new.mean() / g.ise0_old.mean()
        ratios += [r for r in (r1, r0) if np.isfinite(r)]
        lines.append(f"{case:16s} {g.ise1_old.mean():14.5f} {g.ise1_new.mean():9.5f} {r1:6.3f}   "
                     f"{g.ise0_old.mean():14.5f} {g.ise0_new.mean():9.5f} {r0:6.3f}")
    r = np.array(ratios)
    lines.append(f"geometric mean ratio {np.exp(np.mean(np.log(r))):.3f} over {len(r)} case-arms; "
                 f"better by > 1%: {int(np.sum(r < 0.99))}, worse by > 1%: {int(np.sum(r > 1.01))}")
    seconds = (old[old.config == config].seconds.sum(), new[new.config == config].seconds.sum())
    lines.append(f"fit seconds, summed: {seconds[0]:.0f}, per arm: {seconds[1]:.0f}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tag", default=None, help="name of the output files (default: the split or 'cases')")
    args, rest = p.parse_known_args(argv)
    tag = args.tag or next((rest[i + 1] for i, a in enumerate(rest) if a == "--split"), "cases")
    frames = {}
    for k in (3, 2):
        out = RESULTS / f"v_bandwidth_rule_{tag}_k{k}.csv"
        command = [sys.executable, "-c", _RUN.format(root=str(ROOT), k=k), "--methods", "ridge_dr", *rest,
                   "--out", str(out)]
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        frames[k] = pd.read_csv(out)
    text = "\n".join([f"$ python benchmarks/v_bandwidth_rule.py {' '.join(argv or sys.argv[1:])}",
                      *compare(frames[3], frames[2])])
    (RESULTS / f"v_bandwidth_rule_{tag}.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
