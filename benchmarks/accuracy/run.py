"""Run the accuracy zoo: one table per case, rows = configurations, columns = ISE arm 1, ISE arm 0, seconds.

    python benchmarks/accuracy/run.py --quick                     # every case, 1 seed, smaller n (≈ 15 min, 2 cores)
    python benchmarks/accuracy/run.py --split choose --seeds 1,2,3
    python benchmarks/accuracy/run.py --cases paper,mixed_v --methods ridge_dr,ridge_onestep,oracle_grid
    python benchmarks/accuracy/run.py --list                      # the cases, their split and features

The metric is the mean over evaluation V-points of ∫ (p̂ − p)² dy on a fine
grid (``metrics.py``); the V-points are fresh draws of V (100 with --quick,
300 otherwise, the same for every configuration and seed), every level of a
discrete V, or table rows when V = X.

Configurations (``--methods``, comma-separated keys; default all):

- ``ridge_dr``         ccme.fit with its defaults (ridge, DR): nothing but the formula, data and seed is passed,
                       so a rerun after the defaults change measures the new defaults.
- ``ridge_ipw``, ``ridge_pi``, ``ridge_onestep``  the other modes, defaults otherwise.
- ``ridge_dr_forest``  defaults with ``propensity="forest"``.
- ``ridge_dr_folds5``, ``ridge_dr_hajek``, ``ridge_dr_forest_hajek``  defaults with 5 cross-fitting folds, with
                       Hájek-normalised weights, with both the forest propensity and Hájek weights (candidates
                       for the defaults, compared on the "choose" cases).
- ``oracle_grid``      the best ridge DR, per arm, over a hand grid picked on the truth: penalties λ0 = λ1 ∈
                       {LOO-tuned, fixed values}, factors of the rule bandwidths of V and X, propensity ∈ {the
                       default, "forest"}; the outcome bandwidth is left to the package's cross-validation
                       (``tune={"y_bandwidth": factors}``).  Its seconds are the whole grid's.
- ``marginal``         a baseline that ignores V: the arm's marginal density p(y^a), a Gaussian KDE of the arm's
                       outcomes weighted by 1/π(x) with the *true* propensity (Hájek weights; Silverman's rule,
                       Scott's for a bivariate outcome, with Kish's effective n).
- ``deep_feature``, ``neural_kernel``  the neural estimators with their defaults (skipped with a note when
                       PyTorch cannot be imported).

Results go to a resumable CSV (``--out``; one row per case × configuration ×
seed, rows already there for the same case, configuration, seed, n and
number of V-points (and, for the oracle, the same grid) are not recomputed)
with ccme's git commit and a digest of uncommitted changes in src/; the tables
are printed and, with ``--report``, written to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import importlib
import inspect
import io
import itertools
import json
import os
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402

from benchmarks.accuracy.metrics import ise, normalise_2d, outcome_grid, weighted_kde  # noqa: E402
from benchmarks.accuracy.zoo import CASES, case_names  # noqa: E402

HERE = Path(__file__).resolve().parent

CONFIGS = {
    "ridge_dr": ("ridge DR (defaults)", {}),
    "ridge_ipw": ("ridge IPW", {"mode": "ipw"}),
    "ridge_pi": ("ridge plug-in", {"mode": "pi"}),
    "ridge_onestep": ("ridge one-step", {"mode": "onestep"}),
    "ridge_dr_forest": ("ridge DR, propensity=forest", {"propensity": "forest"}),
    "ridge_dr_folds5": ("ridge DR, folds=5", {"folds": 5}),
    "ridge_dr_hajek": ("ridge DR, Hajek weights", {"normalize_weights": True}),
    "ridge_dr_forest_hajek": ("ridge DR, forest + Hajek", {"propensity": "forest", "normalize_weights": True}),
    "ridge_dr_location": ("ridge DR, location=linear", {"location": "linear"}),
    "oracle_grid": ("ridge DR, oracle hand grid", None),
    "marginal": ("marginal, ignores V (IPW KDE, true pi)", None),
    "deep_feature": ("Deep Feature DR (defaults)", {"method": "deep_feature"}),
    "neural_kernel": ("Neural-Kernel DR (defaults)", {"method": "neural_kernel"}),
}

# The hand grid of the oracle: "loo" = λ0, λ1 chosen by the package's leave-one-out over LAMBDA_GRID.
HAND_GRID = {"lam": ["loo", 1e-3, 1e-1], "v_bandwidth": [0.5, 1.0, 2.0], "x_bandwidth": [0.5, 1.0, 2.0],
             "propensity": ["default", "forest"]}
QUICK_HAND_GRID = {"lam": ["loo", 1e-3], "v_bandwidth": [0.5, 1.0], "x_bandwidth": [0.5, 1.0],
                   "propensity": ["forest"]}
QUICK_N = 1000          # --quick caps every case's n at this (semi-synthetic tables keep their size)
EVAL_POINTS, QUICK_EVAL_POINTS = 300, 100
EVAL_SEED = 20240611    # the V-points: the same for every configuration and seed

CSV_FIELDS = ["case", "split", "config", "label", "seed", "n", "n_eval", "v_points", "ise1", "ise0", "seconds",
              "cpu_seconds",
              "status", "note",
              "settings", "commit", "dirty", "src_diff", "ccme_version", "quick", "finished"]


# ---------------------------------------------------------------------------------
def git_commit() -> tuple[str, str]:
    """ccme's short commit, and "" or a digest of the uncommitted changes in src/ and cpp/.

    The digest (SHA-1 of ``git diff HEAD`` and of the untracked files there, 10
    hex digits) tells whether two runs used the same working tree.
    """
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout

    try:
        commit = git("rev-parse", "--short", "HEAD").decode().strip()
        diff = git("diff", "HEAD", "--", "src", "cpp")
        untracked = git("ls-files", "--others", "--exclude-standard", "--", "src", "cpp").decode().split()
    except (OSError, subprocess.CalledProcessError):
        return "unknown", ""
    if not diff and not untracked:
        return commit, ""
    digest = hashlib.sha1(diff)
    for name in sorted(untracked):
        digest.update(name.encode())
        with contextlib.suppress(OSError):
            digest.update((ROOT / name).read_bytes())
    return commit, digest.hexdigest()[:10]


def _lambda_grid():
    tuning = importlib.import_module("ccme.tuning")
    return [float(x) for x in getattr(tuning, "LAMBDA_GRID", np.logspace(-4, 0, 9))]


def _y_factors():
    """The package's own grid object, so that a fit given it tunes σ_y as its default does (the grid grows below
    its smallest factor where that is chosen, which a copy of the grid, a user's grid, would not)."""
    tuning = importlib.import_module("ccme.tuning")
    return getattr(tuning, "Y_BANDWIDTH_FACTORS", (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0))


def torch_available() -> str | None:
    """None when PyTorch imports, else the reason."""
    try:
        importlib.import_module("torch")
    except Exception as exc:  # any failure to import means: skip the neural methods
        return f"PyTorch cannot be imported ({type(exc).__name__}: {exc})"
    return None


class Problem:
    """One case at one seed: the data, the V-points, the grid and the exact truths."""

    def __init__(self, case, n, seed, n_eval):
        self.case, self.seed = case, seed
        self.data, self.truth_frame = case.simulate(n, seed)
        self.formula = case.formula
        self.n = len(self.data)
        self.v = case.eval_points(n_eval, EVAL_SEED)
        self.grid = outcome_grid(case, self.data, self.v)
        self.truth = {arm: case.density(self.grid.points, self.v, arm) for arm in (1, 0)}

    def estimate(self, res, arm):
        p = res.density(self.grid.points, newdata=self.v, arm=arm)
        return normalise_2d(p, self.grid) if self.grid.dim == 2 else p

    def score(self, res) -> dict:
        return {arm: float(np.mean(ise(self.estimate(res, arm), self.truth[arm], self.grid))) for arm in (1, 0)}


def _warning_note(caught) -> str:
    seen = []
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:110]}"
        if text not in seen:
            seen.append(text)
    return " | ".join(seen)


def run_fit(problem: Problem, kwargs: dict):
    """Fit with ``kwargs`` and score both arms: ({arm: ise}, seconds, warnings)."""
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("always")
        res = ccme.fit(problem.formula, problem.data, seed=problem.seed, **kwargs)
        scores = problem.score(res)
    return scores, time.perf_counter() - started, _warning_note(caught)


def run_marginal(problem: Problem):
    started = time.perf_counter()
    case, data, ps = problem.case, problem.data, problem.truth_frame["ps"].to_numpy()
    scores = {}
    for arm in (1, 0):
        units = (data["a"] == arm).to_numpy()
        weights = 1.0 / (ps[units] if arm == 1 else 1.0 - ps[units])
        Y = data.loc[units, case.outcome_columns].to_numpy(dtype=float)
        kde = weighted_kde(Y, weights, problem.grid)
        scores[arm] = float(np.mean(ise(np.broadcast_to(kde, problem.truth[arm].shape), problem.truth[arm],
                                        problem.grid)))
    return scores, time.perf_counter() - started, "weights 1/pi with the true propensity"


def oracle_points(dim_y: int, grid: dict):
    """The hand grid's points as (label, fit keyword arguments), in a fixed order, for outcomes of ``dim_y``.

    The propensity axis's "default" is ``ccme.fit``'s default learner; where
    the axis also names that learner (``HAND_GRID``'s "forest" since the forest
    became the default) the second is the same fit and is skipped: with a fixed
    seed it gave the same errors in all 810 pairs of
    ``results/oracle_fixed_discrete_a.csv``, at twice the cost.
    """
    default = inspect.signature(ccme.fit).parameters["propensity"].default
    models = {}   # the learner each label fits → the first label naming it
    for prop in grid["propensity"]:
        models.setdefault(default if prop == "default" else prop, prop)
    props = list(models.values())
    for lam, fv, fx, prop in itertools.product(grid["lam"], grid["v_bandwidth"], grid["x_bandwidth"], props):
        tune = {key: [f] if isinstance(f, (int, float)) else f for key, f in (("v_bandwidth", fv), ("x_bandwidth", fx))}
        if dim_y == 1:
            tune["y_bandwidth"] = _y_factors()
        lam_grid = _lambda_grid() if lam == "loo" else [lam]
        tune["lam0"] = tune["lam1"] = lam_grid
        kwargs = {"tune": tune}
        if prop != "default":
            kwargs["propensity"] = prop
        yield f"lam={lam},v={fv},x={fx},ps={prop}", kwargs


def run_oracle(problem: Problem, grid: dict):
    started = time.perf_counter()
    best = {1: (np.inf, None), 0: (np.inf, None)}
    failures, notes = 0, []
    for label, kwargs in oracle_points(problem.case.dim_y, grid):
        try:
            scores, _, _ = run_fit(problem, kwargs)
        except Exception as exc:  # one failed grid point must not sink the oracle
            failures += 1
            notes.append(f"{label}: {type(exc).__name__}")
            continue
        for arm in (1, 0):
            if scores[arm] < best[arm][0]:
                best[arm] = (scores[arm], label)
    if best[1][1] is None:
        raise RuntimeError("every grid point failed: " + "; ".join(notes[:3]))
    note = f"arm1: {best[1][1]}; arm0: {best[0][1]}"
    if failures:
        note += f"; {failures} grid points failed ({'; '.join(notes[:3])})"
    return {1: best[1][0], 0: best[0][0]}, time.perf_counter() - started, note


# ---------------------------------------------------------------------------------
def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def append_row(path: Path, row: dict):
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not new:
        with path.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        if header != CSV_FIELDS:  # a CSV of an older runner: rewrite it with today's columns
            old = read_rows(path)
            with path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
                writer.writeheader()
                writer.writerows({k: r.get(k, "") for k in CSV_FIELDS} for r in old)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k, "") for k in CSV_FIELDS})


def _key(row) -> tuple:
    return (row["case"], row["config"], str(row["seed"]), str(row["n"]), str(row["n_eval"]), row.get("settings") or "")


def _fmt(values, digits=4) -> str:
    values = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if values.size == 0:
        return "—"
    text = f"{values.mean():.{digits}f}" if values.mean() >= 1e-3 else f"{values.mean():.2e}"
    if values.size > 1:
        text += f" ± {values.std(ddof=1) / np.sqrt(values.size):.1g}"
    return text


def row_commits(rows: list[dict]) -> str:
    """Which commits computed the rows shown: "rows computed at 3a12a54 (ridge_dr, ...: 180 rows), ..."."""
    by = {}
    for r in rows:
        commit = r["commit"] + (f"+{r['src_diff']}" if r.get("src_diff") else "")
        by.setdefault(commit, {}).setdefault(r["config"], 0)
        by[commit][r["config"]] += 1
    parts = [f"{commit} ({', '.join(configs)}: {sum(configs.values())} rows)" for commit, configs in by.items()]
    return "rows computed at " + "; ".join(parts)


def case_table(case, rows: list[dict], configs: list[str]) -> str:
    """The printed table of one case (means over seeds, ± standard errors with several seeds)."""
    by = {c: [r for r in rows if r["config"] == c] for c in configs}
    ns = sorted({int(r["n"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows})
    n_eval = sorted({r.get("v_points") or r["n_eval"] for r in rows})
    kind = " (every level of V)" if case.discrete_v else (" (rows of the table)" if getattr(case, "kind", "") ==
                                                            "semi-synthetic" else " (fresh draws of V)")
    head = (f"== {case.name} [{case.split}] — {case.description}\n"
            f"   formula: {case.formula}\n"
            f"   n = {', '.join(map(str, ns))}; seeds {', '.join(map(str, seeds))}; "
            f"V-points {', '.join(n_eval)}{kind}; "
            f"true propensity in [{case.ps_range[0]}, {case.ps_range[1]}]\n")
    width = max(len(CONFIGS[c][0]) for c in configs) + 2
    lines = [head + f"   {'configuration':<{width}}{'ISE arm 1':>16}{'ISE arm 0':>16}{'seconds':>10}"]
    notes = []
    for c in configs:
        got = by[c]
        if not got:
            continue
        ok = [r for r in got if r["status"] == "ok"]
        if not ok:
            lines.append(f"   {CONFIGS[c][0]:<{width}}{got[0]['status']:>16}")
            notes.append(f"   {CONFIGS[c][0]}: {got[0]['note'][:200]}")
            continue
        i1 = [float(r["ise1"]) for r in ok]
        i0 = [float(r["ise0"]) for r in ok]
        secs = [float(r["seconds"]) for r in ok]
        lines.append(f"   {CONFIGS[c][0]:<{width}}{_fmt(i1):>16}{_fmt(i0):>16}{np.mean(secs):>10.1f}")
        if c == "oracle_grid":
            notes.append(f"   oracle picks (seed {ok[0]['seed']}): {ok[0]['note']}")
        if len(ok) < len(got):
            notes.append(f"   {CONFIGS[c][0]}: {len(got) - len(ok)} of {len(got)} seeds failed: {got[0]['note'][:160]}")
    return "\n".join(lines + notes) + "\n"


def summary_table(cases, rows) -> str:
    """One line per case: defaults against the oracle, the best mode, DR against one-step and the marginal."""
    out = ["== summary: ratios of mean ISE (arm 1 / arm 0); < 1 means the first is better",
           f"   {'case':<16}{'split':<8}{'DR/oracle':>14}{'DR/one-step':>14}{'DR/marginal':>14}"
           f"{'best config (arm 1 | arm 0)':>46}"]
    for case in cases:
        got = [r for r in rows if r["case"] == case.name and r["status"] == "ok"]
        mean = {}
        for c in CONFIGS:
            sel = [r for r in got if r["config"] == c]
            if sel:
                mean[c] = (np.mean([float(r["ise1"]) for r in sel]), np.mean([float(r["ise0"]) for r in sel]))

        def ratio(a, b):
            if a not in mean or b not in mean:
                return "—"
            return f"{mean[a][0] / mean[b][0]:.2f} / {mean[a][1] / mean[b][1]:.2f}"

        fits = {c: v for c, v in mean.items() if c not in ("oracle_grid", "marginal")}
        best = " | ".join(min(fits, key=lambda c: fits[c][j]) for j in (0, 1)) if fits else "—"
        out.append(f"   {case.name:<16}{case.split:<8}{ratio('ridge_dr', 'oracle_grid'):>14}"
                   f"{ratio('ridge_dr', 'ridge_onestep'):>14}{ratio('ridge_dr', 'marginal'):>14}{best:>46}")
    out.append("   (best config: among the fits with defaults, i.e. not the oracle and not the marginal baseline)")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"1 seed, n capped at {QUICK_N}, {QUICK_EVAL_POINTS} V-points, the smaller hand grid")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: every case of --split)")
    p.add_argument("--split", default="all", choices=["choose", "report", "all"])
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default 1,2,3,4,5; --quick: 1)")
    p.add_argument("--n", type=int, default=None,
                   help="sample size for every case (semi-synthetic: resampled rows); default: each case's own")
    p.add_argument("--methods", default=",".join(CONFIGS), help=f"configurations, from {', '.join(CONFIGS)}")
    p.add_argument("--eval-points", type=int, default=None, help="V-points for a continuous V")
    p.add_argument("--out", default=None,
                   help="resumable CSV (default results/results.csv; --quick: results/quick.csv)")
    p.add_argument("--report", default=None, help="also write the printed tables here (--quick without --out: results/quick.txt)")
    p.add_argument("--hand-grid", default=None,
                   help='JSON replacing the oracle\'s grid, e.g. \'{"lam": ["loo", 0.001], "v_bandwidth": [0.5, 1], '
                        '"x_bandwidth": [1, "ard"], "propensity": ["default", "forest"]}\' (numbers are factors of the '
                        'rule bandwidths; other entries are passed to tune= as they are)')
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    return p.parse_args(argv)


def list_cases() -> str:
    lines = [f"{'case':<16}{'split':<8}{'n':>7}  {'V':<34}features"]
    for c in CASES.values():
        v = ", ".join(c.v_columns) if len(c.v_columns) <= 4 else f"{len(c.v_columns)} columns"
        lines.append(f"{c.name:<16}{c.split:<8}{str(c.n or 'table'):>7}  {v:<34}{'; '.join(c.features)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        print(list_cases())
        return 0
    names = [s.strip() for s in args.cases.split(",")] if args.cases else case_names(args.split)
    unknown = [s for s in names if s not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    cases = [CASES[s] for s in names if args.split == "all" or CASES[s].split == args.split]
    configs = [s.strip() for s in args.methods.split(",") if s.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        raise SystemExit(f"unknown configuration(s) {bad}; from: {', '.join(CONFIGS)}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else ([1] if args.quick else [1, 2, 3, 4, 5])
    n_eval = args.eval_points or (QUICK_EVAL_POINTS if args.quick else EVAL_POINTS)
    hand_grid = QUICK_HAND_GRID if args.quick else HAND_GRID
    if args.hand_grid:
        hand_grid = {**hand_grid, **json.loads(args.hand_grid)}
    out = Path(args.out) if args.out else HERE / "results" / ("quick.csv" if args.quick else "results.csv")
    # The quick run's report goes with its CSV: a run writing elsewhere (--out) must not overwrite results/quick.txt.
    report = Path(args.report) if args.report else (HERE / "results" / "quick.txt" if args.quick and not args.out
                                                    else None)
    commit, dirty = git_commit()
    no_torch = torch_available()

    started = time.perf_counter()
    header = [f"ccme accuracy zoo — ccme {ccme.__version__}, commit {commit}"
              f"{f' + uncommitted changes in src/ (digest {dirty})' if dirty else ''}"
              f", {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f} at the start",
              f"mode: {'quick' if args.quick else 'full'}; seeds {seeds}; V-points {n_eval}; hand grid {hand_grid}",
              "choose: " + ", ".join(c.name for c in CASES.values() if c.split == "choose"),
              "report: " + ", ".join(c.name for c in CASES.values() if c.split == "report")]
    if no_torch and any(c in configs for c in ("deep_feature", "neural_kernel")):
        header.append(f"note: neural methods skipped: {no_torch}")
    print("\n".join(header) + "\n", flush=True)

    done = {_key(r): r for r in read_rows(out)}
    tables = []
    for case in cases:
        n = args.n if args.n is not None else (case.n if not args.quick or case.n is None else min(case.n, QUICK_N))
        case_rows = []
        for seed in seeds:
            problem = None
            for config in configs:
                n_label = n if n is not None else len(case.table)
                settings = json.dumps(hand_grid) if config == "oracle_grid" else ""
                key = (case.name, config, str(seed), str(n_label), str(n_eval), settings)
                if key in done:
                    case_rows.append(done[key])
                    continue
                if problem is None:
                    problem = Problem(case, n, seed, n_eval)
                commit, dirty = git_commit()  # per row: others may commit while the zoo runs
                row = {"case": case.name, "split": case.split, "config": config, "label": CONFIGS[config][0],
                       "seed": seed, "n": n_label, "n_eval": n_eval, "commit": commit, "dirty": int(bool(dirty)),
                       "src_diff": dirty, "settings": settings,
                       "ccme_version": ccme.__version__, "quick": int(args.quick)}
                cpu = time.process_time()
                try:
                    if config in ("deep_feature", "neural_kernel") and no_torch:
                        scores, secs, note, status = {1: np.nan, 0: np.nan}, 0.0, no_torch, "skipped"
                    else:
                        if config == "marginal":
                            scores, secs, note = run_marginal(problem)
                        elif config == "oracle_grid":
                            scores, secs, note = run_oracle(problem, hand_grid)
                        else:
                            scores, secs, note = run_fit(problem, CONFIGS[config][1])
                        status = "ok"
                except Exception as exc:  # record and go on: one failure must not stop the zoo
                    scores, secs, note, status = {1: np.nan, 0: np.nan}, np.nan, f"{type(exc).__name__}: {exc}", "error"
                row.update(v_points=len(problem.v), ise1=scores[1], ise0=scores[0], seconds=round(secs, 3),
                           cpu_seconds=round(time.process_time() - cpu, 3), status=status, note=note[:1000],
                           finished=f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%S}")
                append_row(out, row)
                row = {k: str(v) for k, v in row.items()}
                done[key] = row
                case_rows.append(row)
                print(f"   {case.name} seed {seed} {config}: {status} ise1={scores[1]:.4g} ise0={scores[0]:.4g} "
                      f"{secs:.1f}s", flush=True)
        table = case_table(case, case_rows, configs)
        tables.append((case, case_rows, table))
        print("\n" + table, flush=True)

    summary = summary_table([c for c, _, _ in tables], [r for _, rows, _ in tables for r in rows])
    elapsed = time.perf_counter() - started
    footer = (f"total time {elapsed / 60:.1f} min, load average {os.getloadavg()[1]:.1f} over the last 5 min "
              f"(rows reused from {out.name} are not timed again; the CSV also has each row's CPU seconds)\n"
              + row_commits([r for _, rows, _ in tables for r in rows]))
    print(summary + "\n" + footer)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text("\n".join(header) + "\n\n" + "\n".join(t for _, _, t in tables) + "\n" + summary + "\n"
                          + footer + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
