"""Cost of the bands and effect intervals against the inference issue's target (bands under 2 s at n = 4000).

    python benchmarks/inference/bands_cost.py                  # n = 4000 (exact path) and 10000 (low-rank)
    python benchmarks/inference/bands_cost.py --n 4000 --repeat 3

On the paper's simulation with ``fit``'s defaults: ``res.bands`` at 3
V-points × 200 outcome values with 499 draws (the target's setting) for each
arm, the CDF bands of arm 1, and ``res.effect`` with its intervals, each
timed ``--repeat`` times (wall clock; run it on an idle machine, the number
of threads is the machine's).  The table goes to stdout and, with ``--out``,
to a file (default ``results/bands_cost.txt``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
V_COLUMNS = ["x1", "x2", "x3", "x4", "x5"]


def _timed(call, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def measure(n: int, repeat: int, seed: int = 1) -> list[tuple[str, list[float]]]:
    """(what, seconds per repeat) for one sample size."""
    data = ccme.datasets.paper_simulation(n, seed=seed)
    started = time.perf_counter()
    res = ccme.fit(FORMULA, data, seed=seed)
    rows = [(f"fit ({res.embeddings[1].parts[0].__class__.__name__})", [time.perf_counter() - started])]
    V = data[V_COLUMNS].iloc[:3]
    y = np.linspace(data.y.min(), data.y.max(), 200)
    for arm in (1, 0):
        rows.append((f"bands, density, arm {arm}",
                     _timed(lambda arm=arm: res.bands(newdata=V, arm=arm, y=y, n_boot=499, seed=1), repeat)))
    rows.append(("bands, CDF, arm 1",
                 _timed(lambda: res.bands(newdata=V, arm=1, y=y, n_boot=499, seed=1, feature="cdf"), repeat)))
    rows.append(("effect() with intervals", _timed(lambda: res.effect(newdata=V), repeat)))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="4000,10000", help="comma-separated sample sizes")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bands_cost.txt"))
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    lines = [f"ccme bands cost — commit {commit}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start",
             "paper simulation, fit's defaults; 3 V-points x 200 outcome values, 499 draws; seconds per repeat", ""]
    print("\n".join(lines), flush=True)
    for n in (int(x) for x in args.n.split(",")):
        for what, seconds in measure(n, args.repeat):
            line = f"n = {n:>6}  {what:<32} " + "  ".join(f"{s:6.2f}" for s in seconds)
            print(line, flush=True)
            lines.append(line)
    lines.append(f"load average {os.getloadavg()[1]:.1f} over the last 5 min at the end")
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
