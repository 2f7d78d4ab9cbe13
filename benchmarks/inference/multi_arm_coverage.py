"""Coverage of the effect intervals between the arms of a three-level treatment (issue 14 with issue 12's standard).

Data: :func:`ccme.datasets.three_arm_simulation` (placebo / low / high, exact
p(Y^a | V = v), a normal mixture for "high").  Each data set is fitted with
ccme's defaults (``ccme.fit("y ~ a | x1 + x2 | .", data, seed=r)``), then
``effect(arms=pair, newdata=THREE_ARM_PROFILES, q=(0.25, 0.5, 0.75),
alpha=[], level=0.9)`` for the pairs (high, placebo), (low, placebo) and
(high, low); each interval is checked against the true difference of means
and of quantiles at the three profiles (the truth's quantiles by inverting
its CDF on a fine grid of the closed-form density).  One JSON line per data
set is appended to ``--out``; ``--summarise`` prints the table README shows::

    python benchmarks/inference/multi_arm_coverage.py --n 2000 --reps 100
    python benchmarks/inference/multi_arm_coverage.py --summarise

``--first A --reps B`` fits the data sets A ≤ r < B (shards).  Nothing here
was tuned: the intervals are the binary ones' machinery applied to a pair of
arms, with the defaults chosen in issue 12.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

import ccme
from ccme.datasets import THREE_ARM_PROFILES, three_arm_density, three_arm_simulation

LEVEL = 0.9
Q = (0.25, 0.5, 0.75)
PAIRS = (("high", "placebo"), ("low", "placebo"), ("high", "low"))
OUT = Path(__file__).resolve().parent / "results" / "multi_arm_coverage.jsonl"
_GRID = np.linspace(-20.0, 30.0, 50001)


def truth(arm: str) -> dict:
    """Exact mean and quantiles Q of arm ``arm`` at each profile (from the closed-form density)."""
    v = THREE_ARM_PROFILES[["x1", "x2"]].to_numpy(dtype=float)
    dens = three_arm_density(_GRID, v, arm)
    step = _GRID[1] - _GRID[0]
    cdf = np.cumsum(dens, axis=1) * step
    mean = np.sum(dens * _GRID, axis=1) * step
    quantiles = np.array([[np.interp(q, row, _GRID) for q in Q] for row in cdf])
    return {"mean": mean, "q": quantiles}


def one(r: int, n: int) -> dict:
    data = three_arm_simulation(n, seed=10_000 + r)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)   # clipping notes are not what is measured
        res = ccme.fit("y ~ a | x1 + x2 | .", data, seed=r)
        truths = {arm: truth(arm) for arm in ccme.datasets.THREE_ARM_LEVELS}
        line = {"rep": r, "n": n, "seconds_fit": time.perf_counter() - started, "pairs": {}}
        for a, b in PAIRS:
            table = res.effect(arms=(a, b), newdata=THREE_ARM_PROFILES, q=Q, alpha=[], level=LEVEL, seed=r)
            hits = {}
            for term, true in (("mean_diff", truths[a]["mean"] - truths[b]["mean"]),
                               ("qte", truths[a]["q"] - truths[b]["q"])):
                rows = table[table["term"] == term]
                lo = rows["conf_low"].to_numpy().reshape(len(THREE_ARM_PROFILES), -1)
                hi = rows["conf_high"].to_numpy().reshape(len(THREE_ARM_PROFILES), -1)
                true = np.asarray(true).reshape(len(THREE_ARM_PROFILES), -1)
                hits[term] = ((lo <= true) & (true <= hi)).astype(int).tolist()
            line["pairs"][f"{a}-{b}"] = hits
    line["seconds"] = time.perf_counter() - started
    return line


def summarise(path: Path) -> str:
    lines = [json.loads(s) for s in path.read_text().splitlines() if s.strip()]
    out = [f"{len(lines)} data sets, n = {sorted({x['n'] for x in lines})}; 90% intervals; share covering "
           "(3 profiles; QTE at q = 0.25, 0.5, 0.75)"]
    out.append(f"{'pair':16s} {'mean diff':>10s} {'QTE':>8s}")
    for pair in ("-".join(p) for p in PAIRS):
        mean = np.mean([np.mean(x["pairs"][pair]["mean_diff"]) for x in lines])
        qte = np.mean([np.mean(x["pairs"][pair]["qte"]) for x in lines])
        out.append(f"{pair:16s} {mean:10.3f} {qte:8.3f}")
    out.append(f"mean seconds per data set: {np.mean([x['seconds'] for x in lines]):.1f}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summarise", action="store_true")
    args = parser.parse_args()
    if args.summarise:
        print(summarise(args.out))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for r in range(args.first, args.reps):
        line = one(r, args.n)
        with args.out.open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        print(r, f"{line['seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
