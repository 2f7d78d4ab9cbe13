"""Which data sets of an inference study a change of the V search's start touches (issue 12).

Since b6ee50f the V (stage-2) bandwidth search starts a V covariate that
stage 1 dropped (irrelevant given all of X) at the rule's bandwidth instead
of at ∞ (``ccme.tuning.V_SEARCH_START = "stage1-kept"``); a covariate stage 1
kept starts where it did.  So a data set whose stage 1 keeps every V
covariate is fitted exactly as before, and a study's rows for it need not be
recomputed.  This script runs, for each data set of a case (the coverage
study's simulation, ``case.simulate(n, rep)``, fitted with ``seed=rep`` as
``coverage.py`` fits it), only the fit's hyperparameter tuning (it stops the
fit once :func:`ccme.tuning.tune_ridge` returns), and records per data set
the V covariates stage 1 dropped (``stage1_dropped``) and those the V search
dropped (``v_dropped``), from the tuning's relevance table.  A second or so
per data set at n = 2000::

    python benchmarks/inference/stage1_drops.py --cases mixture_v3 --n 2000 --reps 100
    python benchmarks/inference/stage1_drops.py --summarise

The data sets it lists were refitted for README's rows "V search started at
the rule" (``coverage.py --first r --reps r+1``); one it does not list was
refitted as a check and gave the same row to the last digit.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
import ccme.tuning  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import study_parser  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows  # noqa: E402

OUT = ROOT / "benchmarks" / "inference" / "results" / "stage1_drops.jsonl"


class _Tuned(Exception):
    """Raised with the tuning report once the tuning is done: the fit itself is not needed."""


def tuning_report(case, n: int, rep: int):
    """The tuning report of ``ccme.fit`` on data set ``rep`` of ``case`` at ``n`` (the fit stops after the tuning)."""
    data, _ = case.simulate(n, rep)
    tune = ccme.tuning.tune_ridge

    def stop_after(**kwargs):
        raise _Tuned(tune(**kwargs)[1])

    ccme.tuning.tune_ridge = stop_after  # ccme.estimators.ridge imports it from the module at each fit
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # clipping notes and the like: this run reads the tuning only
            ccme.fit(case.formula, data, seed=rep)
    except _Tuned as done:
        return done.args[0]
    finally:
        ccme.tuning.tune_ridge = tune
    raise RuntimeError(f"{case.name}: the fit ran no ridge tuning")


def one_data_set(case, n: int, rep: int) -> dict:
    report = tuning_report(case, n, rep)
    x_dropped = set(report.dropped_groups("X"))
    return {"case": case.name, "n": n, "rep": rep,
            "stage1_dropped": [r["group"] for r in report.relevance if r["role"] == "V" and r["group"] in x_dropped],
            "v_dropped": report.dropped_groups("V")}


def summarise(path: Path) -> str:
    groups = {}
    for row in read_rows(path):
        groups.setdefault((row["case"], row["n"]), []).append(row)
    lines = []
    for (case, n), rows in sorted(groups.items()):
        touched = [r["rep"] for r in rows if r["stage1_dropped"]]
        lines.append(f"{case}, n = {n}: {len(rows)} data sets; stage 1 drops a V covariate in {len(touched)} "
                     f"({dict(Counter(g for r in rows for g in r['stage1_dropped']))}), the V search in "
                     f"{sum(bool(r['v_dropped']) for r in rows)} "
                     f"({dict(Counter(g for r in rows for g in r['v_dropped']))})")
        lines.append(f"  data sets the start changes: {' '.join(map(str, touched))}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = study_parser(__doc__, OUT, cases="mixture_v3").parse_args(argv)
    if args.summarise:
        print(summarise(args.out))
        return 0
    for name in args.cases.split(","):
        case = get_case(name)
        done = {r["rep"] for r in read_rows(args.out) if (r["case"], r["n"]) == (case.name, args.n)}
        for rep in range(args.first, args.reps):
            if rep not in done:
                append_row(args.out, one_data_set(case, args.n, rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
