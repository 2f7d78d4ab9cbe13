"""The neural estimators against ridge DR on the accuracy zoo: the issue's target, "within 20% of ridge".

Reads zoo CSVs (``benchmarks/accuracy/run.py`` or ``tuning_rule.py`` output) with rows for the neural
configurations and a CSV with ``ridge_dr`` rows at the same cases, seeds, n and V-points, and prints, per
neural configuration and CSV, the ratio of each case-arm's ISE to ridge DR's (the geometric mean over the
seeds), how many case-arms are within 20%, and the worst ones.  With three seeds or more per case-arm it also
prints each case-arm's 95% interval for that geometric mean (a t interval on the seeds' log ratios) and sorts the
case-arms into those whose interval lies below 1.2 (within, beyond the seeds' noise), above it (beyond), and those
it straddles (undecided at these seeds): the per-case-arm target is decided by seed noise where the interval is
wide, and this says where.

    python benchmarks/accuracy/run.py --split all --seeds 1,2 --n 1000 --eval-points 100 --methods ridge_dr \\
        --out benchmarks/results/ridge_dr_n1000.csv
    python benchmarks/neural_vs_ridge.py --ridge benchmarks/results/ridge_dr_n1000.csv \\
        benchmarks/results/input_relevance_deep_feature_*_True.csv ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.targets import log_ratios  # noqa: E402

WITHIN = 1.2


def compare(neural: pd.DataFrame, ridge: pd.DataFrame) -> list[str]:
    """Lines of text: one block per neural configuration in ``neural``."""
    base = ridge[ridge.config == "ridge_dr"]
    lines = []
    for config, rows in neural.groupby("config"):
        logs = log_ratios(pd.concat([rows, base], ignore_index=True), config, "ridge_dr")
        missing = len(rows) - len(logs)
        per_arm = np.exp(logs.groupby("case")[["arm 1", "arm 0"]].mean())
        ratios = per_arm.to_numpy().ravel()
        seeds = sorted(int(s) for s in logs.seed.unique())
        lines.append(f"{config}: ISE / ridge DR's, geometric mean over seeds {seeds}, per case-arm"
                     + (f" ({missing} rows without a ridge row left out)" if missing else ""))
        lines.append(f"  within {WITHIN - 1:.0%}: {int((ratios <= WITHIN).sum())} of {len(ratios)} case-arms; "
                     f"geometric mean {np.exp(np.mean(np.log(ratios))):.3f}")
        worse = per_arm[(per_arm > WITHIN).any(axis=1)]
        if len(worse):
            lines.append("  case-arms beyond it:")
            lines += ["    " + line for line in worse.round(2).to_string().splitlines()]
        if logs.groupby("case").size().min() >= 3:
            lines += seed_intervals(logs)
    return lines


def seed_intervals(logs: pd.DataFrame, level: float = 0.95) -> list[str]:
    """Per case-arm, the geometric mean ratio over seeds with its t interval, sorted against :data:`WITHIN`."""
    rows = []
    for case, group in logs.groupby("case"):
        for arm in ("arm 1", "arm 0"):
            x = group[arm].to_numpy()
            half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
            rows.append((case, arm, len(x), np.exp(x.mean()), np.exp(x.mean() - half), np.exp(x.mean() + half)))
    table = pd.DataFrame(rows, columns=["case", "arm", "seeds", "ratio", "low", "high"])
    verdict = np.where(table.high < WITHIN, "within", np.where(table.low > WITHIN, "beyond", "undecided"))
    table["verdict"] = verdict
    counts = table.verdict.value_counts()
    lines = [f"  {level:.0%} intervals over seeds: within {counts.get('within', 0)}, beyond {counts.get('beyond', 0)}, "
             f"undecided {counts.get('undecided', 0)} of {len(table)} case-arms"]
    shown = table[table.verdict != "within"].sort_values("ratio", ascending=False)
    if len(shown):
        lines += ["    " + line for line in shown.round(2).to_string(index=False).splitlines()]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("neural", nargs="+", help="zoo CSVs with the neural configurations' rows (a later file's row "
                                               "replaces an earlier one's for the same case, seed and n)")
    p.add_argument("--ridge", required=True, help="a zoo CSV with ridge_dr rows at the same cases, seeds and n")
    args = p.parse_args(argv)
    # A later file's row for the same case, configuration, seed and n replaces an earlier one's (a rerun).
    neural = pd.concat([pd.read_csv(f) for f in args.neural], ignore_index=True).drop_duplicates(
        subset=["case", "config", "seed", "n"], keep="last")
    ridge = pd.read_csv(args.ridge)
    print("\n".join([f"$ python benchmarks/neural_vs_ridge.py {' '.join(sys.argv[1:] if argv is None else argv)}",
                     *compare(neural[neural.config != "ridge_dr"], ridge)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
