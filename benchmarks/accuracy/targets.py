"""Issue 11's accuracy targets, read off zoo CSVs: one scorecard, every case-arm, met or missed.

The targets (each per case and arm; a ratio is the geometric mean over the seeds the CSVs hold of the per-seed
ratio of integrated squared errors):

=============  ==============================================================  =================================
target         configuration against its reference                            cases
=============  ==============================================================  =================================
beats one-step ``ridge_dr`` / ``ridge_onestep`` < 1                              confounding outside V
hand grid      ``ridge_dr`` / ``oracle_grid`` ≤ 1.15                            dim V ≤ 5
marginal       ``ridge_dr`` / ``marginal`` ≤ 0.5                                dim V ≥ 25
neural         ``neural_kernel``, ``deep_feature`` / ``ridge_dr`` ≤ 1.2         dim V ≤ 5
=============  ==============================================================  =================================

"Confounding outside V" is read from the case's feature tags (``… in+out V``); dim V is the number of raw V
columns.  A case-arm is scored only where the CSVs hold both configurations at the same seeds, n and V-points.

    python benchmarks/accuracy/run.py --split all --seeds 7 --eval-points 100 \\
        --methods ridge_dr,ridge_onestep,marginal,oracle_grid,neural_kernel,deep_feature --out targets.csv
    python benchmarks/accuracy/targets.py targets.csv
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy.zoo import CASES  # noqa: E402

KEYS = ["case", "seed", "n", "v_points"]


@dataclass(frozen=True)
class Target:
    """One target: ``config``'s error over ``reference``'s must be below (or at most) ``bound`` on ``applies``."""

    name: str
    config: str
    reference: str
    bound: float
    strict: bool
    cases: str

    def applies(self, case) -> bool:
        dim_v = len(case.v_columns)
        return {"outside": any("out V" in tag for tag in case.features),
                "low": dim_v <= 5, "high": dim_v >= 25}[self.cases]

    def met(self, ratio: float) -> bool:
        return ratio < self.bound if self.strict else ratio <= self.bound

    @property
    def rule(self) -> str:
        return f"{self.config} / {self.reference} {'<' if self.strict else '≤'} {self.bound:g}"


TARGETS = (
    Target("beats one-step", "ridge_dr", "ridge_onestep", 1.0, True, "outside"),
    Target("within 15% of the hand grid", "ridge_dr", "oracle_grid", 1.15, False, "low"),
    Target("2x below the marginal", "ridge_dr", "marginal", 0.5, False, "high"),
    Target("Neural-Kernel within 20% of ridge", "neural_kernel", "ridge_dr", 1.2, False, "low"),
    Target("Deep Feature within 20% of ridge", "deep_feature", "ridge_dr", 1.2, False, "low"),
)


def log_ratios(rows: pd.DataFrame, config: str, reference: str) -> pd.DataFrame:
    """Per case and seed: the log of ``config``'s ISE over ``reference``'s, by arm.

    Only the (case, seed, n, V-points) both configurations have a row for are kept.
    """
    top = rows[rows.config == config][KEYS + ["ise1", "ise0"]]
    bottom = rows[rows.config == reference][KEYS + ["ise1", "ise0"]]
    both = top.merge(bottom, on=KEYS, suffixes=("", "_ref"))
    return pd.DataFrame({"case": both.case, "seed": both.seed,
                         "arm 1": np.log(both.ise1 / both.ise1_ref), "arm 0": np.log(both.ise0 / both.ise0_ref)})


def ratios(rows: pd.DataFrame, config: str, reference: str) -> pd.DataFrame:
    """Per case: the geometric mean over seeds of ``config``'s ISE over ``reference``'s, by arm (and the seeds)."""
    grouped = log_ratios(rows, config, reference).groupby("case")
    out = np.exp(grouped[["arm 1", "arm 0"]].mean())
    out["seeds"] = grouped.seed.nunique()
    return out


def scorecard(rows: pd.DataFrame, cases=CASES) -> pd.DataFrame:
    """One row per target, case and arm: the ratio, the bound and whether it is met."""
    records = []
    for target in TARGETS:
        table = ratios(rows, target.config, target.reference)
        for case_name, r in table.iterrows():
            if case_name not in cases or not target.applies(cases[case_name]):
                continue
            for arm in ("arm 1", "arm 0"):
                records.append({"target": target.name, "rule": target.rule, "case": case_name,
                                "split": cases[case_name].split, "arm": arm, "seeds": int(r.seeds),
                                "ratio": float(r[arm]), "met": target.met(float(r[arm]))})
    return pd.DataFrame(records, columns=["target", "rule", "case", "split", "arm", "seeds", "ratio", "met"])


def report(card: pd.DataFrame) -> list[str]:
    """Lines of text: per target, how many case-arms meet it (by split) and the ones that miss."""
    lines = []
    for name, rows in card.groupby("target", sort=False):
        by_split = ", ".join(f"{split} {int(g.met.sum())} of {len(g)}" for split, g in rows.groupby("split"))
        lines.append(f"{name} ({rows.rule.iloc[0]}): met on {int(rows.met.sum())} of {len(rows)} case-arms "
                     f"({by_split}); geometric mean {np.exp(np.log(rows.ratio).mean()):.3f}")
        misses = rows[~rows.met].sort_values("ratio", ascending=False)
        lines += [f"    missed: {m.case} {m.arm} ({m.split}) {m.ratio:.2f}" for m in misses.itertuples()]
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="+", help="zoo CSVs (a later file's row replaces an earlier one's for the same case, "
                                          "configuration, seed, n and V-points)")
    p.add_argument("--out", help="also write the per-case-arm scorecard to this CSV")
    args = p.parse_args(argv)
    rows = pd.concat([pd.read_csv(f) for f in args.csv], ignore_index=True)
    rows = rows[rows.status == "ok"].drop_duplicates(subset=KEYS + ["config"], keep="last")
    card = scorecard(rows)
    commits = ", ".join(sorted(rows.commit.astype(str).unique()))
    print("\n".join([f"$ python benchmarks/accuracy/targets.py {' '.join(sys.argv[1:] if argv is None else argv)}",
                     f"rows from commits {commits}", *report(card)]))
    if args.out:
        card.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
