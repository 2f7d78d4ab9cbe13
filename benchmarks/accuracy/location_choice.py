"""Can the fit's own read-out criterion tell when the location stage pays?  Per zoo case, arm and seed.

For each case and seed it fits ridge DR with the defaults twice, without and with ``location="linear"``
(:mod:`ccme.location`), scores both against the exact truth (the zoo's ISE) and records, per arm, the
value at the chosen σ_y of the tuning's weighted least-squares cross-validation criterion (the read-out
criterion, ``res.tuning.curves``; an estimate of the ISE up to a constant, on the same held-out units
and weights in both fits, so the two values compare).  It then prints, per case and arm, the
mean ISE of each fit, how often the criterion picks the fit with the smaller ISE, and the geometric
mean ISE ratio (to the plain fit) of these rules: always located; the criterion's pick per arm; the
oracle's pick per arm; and ``location="auto"`` at each of :data:`THRESHOLDS` ("z=c": one fit for both
arms, located where the criteria's paired difference summed over the arms is below −c of its standard
error, :func:`ccme.location.criterion_difference`; the package's :data:`ccme.location.AUTO_THRESHOLD`
is 1).  Rows written before the paired difference was recorded get the old "auto" (the lower sum)::

    python benchmarks/accuracy/location_choice.py --split choose --seeds 1,2,3,4,5,6 --tag paired

Output: ``results/location_choice_<split>[_<y-rule>][_<tag>].csv`` (resumable) and ``.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import io
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
from ccme.location import criterion_difference, readout_criteria  # noqa: E402

from benchmarks.accuracy.run import Problem, git_commit  # noqa: E402
from benchmarks.accuracy.zoo import CASES  # noqa: E402
from benchmarks.tuning_rule import parse_setting  # noqa: E402

HERE = Path(__file__).resolve().parent
FIELDS = ["case", "seed", "arm", "ise_plain", "ise_located", "crit_plain", "crit_located", "sec_plain",
          "sec_located", "diff", "diff_se", "arm_diff", "arm_diff_se", "commit"]
#: Thresholds (standard errors of the criteria's paired difference) whose "auto" rule the report shows.
THRESHOLDS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)


def criterion_minima(res) -> dict:
    """Per arm, the read-out criterion at the chosen σ_y (its minimum with the default rule; NaN where not tuned)."""
    return {arm: np.nan for arm in res.arms} | readout_criteria(res.tuning)


def one(case, seed: int, n_eval: int) -> list[dict]:
    problem = Problem(case, case.n, seed, n_eval)
    rows = {arm: {"case": case.name, "seed": seed, "arm": arm, "commit": git_commit()[0]} for arm in (1, 0)}
    tuning = {}
    for label, location in (("plain", None), ("located", "linear")):
        started = time.perf_counter()
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            res = ccme.fit(problem.formula, problem.data, seed=seed, location=location)
            scores = problem.score(res)
        seconds = time.perf_counter() - started
        crit = criterion_minima(res)
        tuning[label] = res.tuning
        for arm in (1, 0):
            rows[arm].update({f"ise_{label}": scores[arm], f"crit_{label}": crit[arm], f"sec_{label}": seconds})
    # The paired difference over both arms (what "auto" thresholds), the same on both arms' rows.
    diff, se = criterion_difference(tuning["located"], tuning["plain"])
    for arm, row in rows.items():
        row.update(diff=diff, diff_se=se)
        row["arm_diff"], row["arm_diff_se"] = criterion_difference(tuning["located"], tuning["plain"], arms=(arm,))
    return list(rows.values())


def report(frame: pd.DataFrame) -> list[str]:
    f = frame.copy()
    joint = f.groupby(["case", "seed"])[["crit_located", "crit_plain"]].transform("sum")
    f["auto"] = np.where(joint.crit_located < joint.crit_plain, f.ise_located, f.ise_plain)
    f["pick"] = np.where(f.crit_located < f.crit_plain, f.ise_located, f.ise_plain)
    f["best"] = np.minimum(f.ise_located, f.ise_plain)
    f["right"] = (f.crit_located < f.crit_plain) == (f.ise_located < f.ise_plain)
    paired = "diff_se" in f   # NaN (no read-out criterion: the bivariate case) keeps the plain fit
    # "auto" before its threshold: the lower summed criterion (the paired rows' z=0)
    rules = {"located": "ise_located", **({} if paired else {"auto": "auto"}), "per arm": "pick", "oracle": "best"}
    if paired:
        for z in THRESHOLDS:
            f[f"z={z:g}"] = np.where(f["diff"] < -z * f.diff_se, f.ise_located, f.ise_plain)
            rules[f"z={z:g}"] = f"z={z:g}"
    lines = ["ISE ratios to the plain fit (mean ISE over seeds); 'right': seeds where the per-arm criterion picks "
             "the fit with the smaller ISE" + ("; z=c: located where the paired difference of the criteria (summed "
                                               "over arms) is below -c standard errors" if paired else ""),
             f"{'case':16s} {'arm':>3s} {'ISE plain':>10s} " + " ".join(f"{k:>8s}" for k in rules) + f" {'right':>6s}"]
    ratios = {k: [] for k in rules}
    for (case, arm), g in f.groupby(["case", "arm"], sort=False):
        base = g.ise_plain.mean()
        r = {k: g[col].mean() / base for k, col in rules.items()}
        for k, v in r.items():
            ratios[k].append(v)
        lines.append(f"{case:16s} {arm:3d} {base:10.5f} " + " ".join(f"{v:8.3f}" for v in r.values())
                     + f" {int(g.right.sum()):3d}/{len(g)}")
    lines.append("geometric mean ratio to the plain fit over case-arms: " + ", ".join(
        f"{k} {np.exp(np.mean(np.log(v))):.3f}" for k, v in ratios.items()))
    lines.append("largest case-arm ratio: " + ", ".join(f"{k} {np.max(v):.2f}" for k, v in ratios.items()))
    lines.append("case-arms more than 10% worse than the plain fit: " + ", ".join(
        f"{k} {int(np.sum(np.array(v) > 1.1))}" for k, v in ratios.items()))
    if "arm_diff_se" in f and f.arm_diff_se.notna().any():
        # "auto" chosen per arm, on each arm's own paired difference (ccme chooses one fit for both arms).
        by_arm = []
        for z in THRESHOLDS:
            pick = np.where(f.arm_diff < -z * f.arm_diff_se, f.ise_located, f.ise_plain)
            r = f.assign(pick=pick).groupby(["case", "arm"], sort=False).apply(
                lambda g: g["pick"].mean() / g.ise_plain.mean(), include_groups=False)
            by_arm.append(f"z={z:g} {np.exp(np.mean(np.log(r))):.3f} / {r.max():.2f} / {int(np.sum(r > 1.1))}")
        lines.append("chosen per arm (geometric mean / largest ratio / case-arms > 10% worse): " + ", ".join(by_arm))
    lines.append(f"the criterion picks the fit with the smaller ISE in {int(f.right.sum())} of {len(f)} case-arm-seeds; "
                 f"fit seconds plain {f.drop_duplicates(['case', 'seed']).sec_plain.sum():.0f}, located "
                 f"{f.drop_duplicates(['case', 'seed']).sec_located.sum():.0f} (with the zoo's density evaluation)")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="choose", choices=["choose", "report"])
    p.add_argument("--cases", default=None, help="comma-separated case names (default: every case of the split)")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--eval-points", type=int, default=150)
    p.add_argument("--y-rule", default=None, choices=["min", "one_se", "one_se_step", "largest_local"],
                   help="set ccme.tuning.Y_BANDWIDTH_RULE for both fits (default: the package's)")
    p.add_argument("--setting", default=None,
                   help="one module constant for both fits, e.g. ccme.tuning.READOUT_AUGMENTED=True (give --tag)")
    p.add_argument("--tag", default="", help="a suffix of the results' file names")
    args = p.parse_args(argv)
    if args.setting is not None:
        module, name, key, (value, *rest) = parse_setting(args.setting)
        if rest or key is not None or not args.tag:
            raise SystemExit("--setting takes one value of a plain constant, with a --tag")
        setattr(importlib.import_module(module), name, value)
    if args.y_rule is not None:
        import ccme.tuning

        ccme.tuning.Y_BANDWIDTH_RULE = args.y_rule
    cases = [CASES[c] for c in args.cases.split(",")] if args.cases else [
        c for c in CASES.values() if c.split == args.split]
    tag = ("" if args.y_rule is None else "_" + args.y_rule) + (f"_{args.tag}" if args.tag else "")
    out = HERE / "results" / f"location_choice_{args.split}{tag}.csv"
    done = set()
    if out.exists():
        done = {(r["case"], r["seed"]) for r in csv.DictReader(out.open())}
    for case in cases:
        for seed in (int(s) for s in args.seeds.split(",")):
            if (case.name, str(seed)) in done:
                continue
            rows = one(case, seed, args.eval_points)
            new = not out.exists()
            with out.open("a", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=FIELDS)
                if new:
                    writer.writeheader()
                writer.writerows(rows)
            print(case.name, seed, [(r["arm"], round(r["ise_located"] / r["ise_plain"], 3),
                                     r["crit_located"] < r["crit_plain"]) for r in rows], flush=True)
    frame = pd.read_csv(out)
    frame = frame[frame.case.isin([c.name for c in cases])]
    text = "\n".join(report(frame))
    print(text)
    (out.with_suffix(".txt")).write_text(
        f"python benchmarks/accuracy/location_choice.py --split {args.split} --seeds {args.seeds}"
        + ("" if args.y_rule is None else f" --y-rule {args.y_rule}") + (f" --tag {args.tag}" if args.tag else "")
        + (f" --setting {args.setting}" if args.setting else "")
        + "\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
