"""A tuning rule's constant on the accuracy zoo: one configuration (ridge DR with fit's defaults unless
``--config`` names another), one run of the zoo per value.

Sets a module constant of ccme (``--setting module.NAME=v1,v2,...``; the first
value is the baseline) in a fresh process per value, runs the zoo's runner
(``benchmarks/accuracy/run.py``; its other options pass through) and prints,
per case and arm, the mean ISE under each value and its ratio to the
baseline, with the geometric mean over case-arms and, as a measure of the
zoo's resolution, the geometric mean of the per-seed ratios with its 95%
interval over the case-seeds (:func:`paired_interval`; up to ±2.5% on the
"report" cases and ±3-4.5% on "choose" at three seeds, ridge DR)::

    python benchmarks/tuning_rule.py --setting ccme.tuning.DR_FIRST_STAGE_PENALTY=1,0.3,0.1 \\
        --split choose --seeds 1,2,3 --eval-points 150

Output: ``benchmarks/results/<stem>_<tag>.txt`` and one resumable CSV per
value beside it (``<stem>_<tag>_<value>.csv``); the stem is ``--stem``, else
NAME in lower case, the tag ``--tag``, else the split.  Choose a value on the "choose" split, report it on "report".
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_RUN = ("import sys, importlib; sys.path.insert(0, {root!r}); {assignments}"
        "from benchmarks.accuracy import run; sys.exit(run.main(sys.argv[1:]))")
#: One constant set in that process: a module attribute, or one entry of a dict constant (``NAME[KEY]=...``), set in
#: place (each value runs in its own process), so that every holder of the dict sees it, e.g. an estimator class's
#: ``defaults``.
_SET = "setattr(importlib.import_module({module!r}), {name!r}, {value!r}); "
_SET_ITEM = "importlib.import_module({module!r}).{name}[{key!r}] = {value!r}; "


def parse_setting(text: str) -> tuple[str, str, str | None, list]:
    """"pkg.module.NAME=1,0.3" -> ("pkg.module", "NAME", None, [1, 0.3]), the values typed like the current one;
    "pkg.module.NAME[KEY]=..." names one entry of a dict constant (KEY a string); a tuple constant (a grid) takes
    values separated by ";", each a space-separated list: "NAME=0.5 1 2;0.25 0.5 1 2"."""
    target, _, values = text.partition("=")
    module, _, name = target.rpartition(".")
    name, _, key = name.partition("[")
    key = key.rstrip("]") or None
    if not module or not values:
        raise SystemExit(f"--setting must look like ccme.tuning.NAME=v1,v2 or NAME[KEY]=v1,v2; got {text!r}")
    current = getattr(importlib.import_module(module), name)
    if key is not None:
        if not isinstance(current, dict) or key not in current:
            raise SystemExit(f"{name} has no entry {key!r}")
        current = current[key]
    if isinstance(current, bool):
        flags = {"true": True, "1": True, "false": False, "0": False}
        if any(v.lower() not in flags for v in values.split(",")):
            raise SystemExit(f"{name} is a flag: give True/False (or 1/0); got {values!r}")
        return module, name, key, [flags[v.lower()] for v in values.split(",")]
    if isinstance(current, tuple):      # a grid: values separated by ";", each a space-separated list
        number = int if current and all(isinstance(x, int) for x in current) else float  # layer widths stay ints
        return module, name, key, [tuple(number(x) for x in v.split()) for v in values.split(";")]
    kind = type(current) if isinstance(current, (int, float, str)) else float

    def typed(v):   # a named value of a numeric setting (e.g. "readout") stays a string
        try:
            return kind(v)
        except ValueError:
            return v

    return module, name, key, [typed(v) for v in values.split(",")]


def value_label(value) -> str:
    """A value as it appears in file names and tables: a grid as its first and last points and its length."""
    if isinstance(value, tuple):
        return f"{value[0]:g}-{value[-1]:g}x{len(value)}"
    return str(value)


def provenance(frame: pd.DataFrame) -> str:
    """Where a value's rows come from: their commits and the span of their finishing times.  A value's CSV is
    resumable, so its rows may come from an earlier run (a reused baseline): its fit seconds then compare only
    loosely, the machine's load and the --parallel setting having differed."""
    commits = ", ".join(f"{c}{'+' if d else ''}" for c, d in
                        frame[["commit", "dirty"]].drop_duplicates().itertuples(index=False))
    return f"{commits}, finished {frame.finished.min()} to {frame.finished.max()}"


def compare(frames: dict, config: str = "ridge_dr") -> list[str]:
    """Per case and arm: the mean ISE under each value and its ratio to the first (the baseline)."""
    values = list(frames)
    base = frames[values[0]]
    base = base[base.config == config]
    lines = []
    for value in values[1:]:
        new = frames[value][frames[value].config == config]
        m = base.merge(new, on=["case", "seed"], suffixes=("_old", "_new"))
        lines.append(f"{value_label(values[0])} -> {value_label(value)}")
        lines.append(f"  {'case':16s} {'arm 1: base':>12s} {'new':>9s} {'ratio':>6s}   {'arm 0: base':>12s} "
                     f"{'new':>9s} {'ratio':>6s}")
        ratios = []
        for case, g in m.groupby("case", sort=False):
            r1, r0 = g.ise1_new.mean() / g.ise1_old.mean(), g.ise0_new.mean() / g.ise0_old.mean()
            ratios += [r for r in (r1, r0) if np.isfinite(r)]
            lines.append(f"  {case:16s} {g.ise1_old.mean():12.5f} {g.ise1_new.mean():9.5f} {r1:6.3f}   "
                         f"{g.ise0_old.mean():12.5f} {g.ise0_new.mean():9.5f} {r0:6.3f}")
        r = np.array(ratios)
        lines.append(f"  geometric mean ratio {np.exp(np.mean(np.log(r))):.3f} over {len(r)} case-arms; "
                     f"better by > 1%: {int(np.sum(r < 0.99))}, worse by > 1%: {int(np.sum(r > 1.01))}; "
                     f"fit seconds {base.seconds.sum():.0f} -> {new.seconds.sum():.0f}")
        lines.append(f"  {paired_interval(m)}")
        lines.append(f"  rows: base {provenance(base)}; new {provenance(new)}")
    return lines


def paired_interval(m: pd.DataFrame) -> str:
    """The geometric mean of the per-seed ratios and its 95% t interval over the case-seeds.

    Each case and seed gives one observation, the mean over its arms of log(ISE new / ISE base) (the arms share
    the seed's data, so they are not counted as independent); the interval's spread includes the differences
    between cases, so it asks whether a case like these would gain, and it is wide at two or three seeds.
    """
    import scipy.stats

    logs = np.log(m[["ise1_new", "ise0_new"]].to_numpy(float) / m[["ise1_old", "ise0_old"]].to_numpy(float))
    obs = np.nanmean(np.where(np.isfinite(logs), logs, np.nan), axis=1)
    obs = obs[np.isfinite(obs)]
    if len(obs) < 2:
        return "per-seed ratios: too few case-seeds for an interval"
    half = scipy.stats.t.ppf(0.975, len(obs) - 1) * np.std(obs, ddof=1) / np.sqrt(len(obs))
    centre = np.mean(obs)
    return (f"geometric mean of the per-seed ratios {np.exp(centre):.3f}, 95% interval {np.exp(centre - half):.3f} to "
            f"{np.exp(centre + half):.3f} over {len(obs)} case-seeds")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setting", required=True, action="append",
                   help="module.NAME=v1,v2,... (the first value is the baseline); repeat it to change several "
                        "constants together, the k-th values of each making the k-th run")
    p.add_argument("--tag", default=None, help="name of the output files (default: the split, or 'cases')")
    p.add_argument("--stem", default=None, help="first part of the output files' names (default: NAME in lower case)")
    p.add_argument("--parallel", action="store_true", help="run the values' processes at the same time")
    p.add_argument("--config", default="ridge_dr",
                   help="the zoo configuration to run and compare (default ridge_dr; e.g. deep_feature)")
    args, rest = p.parse_known_args(argv)
    settings = [parse_setting(text) for text in args.setting]
    if len({len(values) for *_, values in settings}) != 1:
        raise SystemExit("every --setting must give the same number of values")
    runs = list(zip(*(values for *_, values in settings)))
    values = [" + ".join(value_label(v) for v in run) for run in runs]
    tag = args.tag or next((rest[i + 1] for i, a in enumerate(rest) if a == "--split"), "cases")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    stem = args.stem or "_".join(name.lower() for _, name, _, _ in settings)
    outs = {v: RESULTS / f"{stem}_{tag}_{v.replace(' + ', '+')}.csv" for v in values}
    procs = []
    for v, run in zip(values, runs):
        assignments = "".join((_SET if key is None else _SET_ITEM).format(module=module, name=name, key=key,
                                                                          value=value)
                              for (module, name, key, _), value in zip(settings, run))
        command = [sys.executable, "-c", _RUN.format(root=str(ROOT), assignments=assignments),
                   "--methods", args.config, *rest, "--out", str(outs[v])]
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
        if args.parallel:
            procs.append(proc)
        elif proc.wait():
            raise SystemExit(f"the run with {v} failed")
    if any(proc.wait() for proc in procs):
        raise SystemExit("a run failed")
    frames = {v: pd.read_csv(outs[v]) for v in values}
    text = "\n".join([f"$ python benchmarks/tuning_rule.py {shlex.join(argv or sys.argv[1:])}", *compare(frames, args.config)])
    (RESULTS / f"{stem}_{tag}.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
