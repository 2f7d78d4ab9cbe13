"""Coverage study of the bands and effect intervals (issue 12): many simulated data sets, exact truth.

Run from the repository root (one JSON line per fitted data set, appended to
``--out``, so a run can be stopped and resumed; ``--summarise`` prints the
table README shows)::

    python benchmarks/inference/coverage.py --cases paper,hetero_v2,linear_v1 --n 2000 --reps 100
    python benchmarks/inference/coverage.py --cases paper --n 10000 --reps 30
    python benchmarks/inference/coverage.py --cases paper --n 2000 --reps 40 --n-rep 5   # repeated cross-fitting
    python benchmarks/inference/coverage.py --summarise

Shards (``--first A --reps B`` fits data sets A ≤ r < B) let several
processes share a study; concatenating their ``--out`` files gives the same
lines as one run.

Data-generating processes: the accuracy zoo's cases (``benchmarks/accuracy``),
whose p(Y^a | V = v) is an exact Gaussian mixture.  Each data set is fitted
with ccme's defaults (``ccme.fit(formula, data, seed=r)``: tuning, the
default propensity and clip; the lines record the commit, and ``location``
and whether the fit ``located``).  Lines without ``location`` were written
before 2026-11-28, when this script passed ``location=None``: for a case
with 10 or more covariates in V (``ihdp_all25``, ``sparse_v10``) they are the
plain fit, not the default's location stage.  Then, at 3 fixed V-points drawn once per case
(``case.eval_points(3, seed=0)``) and 100 outcome values spanning the
truth's ±4 sd box, for both arms:

- ``bands(level=0.9, target=t)`` for t in ("smoothed", "regularised"):
  pointwise coverage (the share of the 100 points inside, averaged) and
  simultaneous coverage (all points inside) of the smoothed truth
  E[k(Y^a, y) | v] (the mixture with the read-out bandwidth² added to every
  component's variance: exact) and of the true density;
- ``effect(level=0.9, q=(0.25, 0.5, 0.75), alpha=(0.1,))``: whether the
  intervals hold the true mean difference, QTEs and differences of the lower
  and upper expected shortfalls at α = 0.1 (and the QTEs and shortfalls of
  the smoothed laws; closed forms for Gaussian mixtures).

Each line records the V covariates the fit's tuning dropped (``dropped``).
``--restore-factor F`` gives them back at F times the rule's bandwidth in
the bias-aware bands and intervals (``ccme.bootstrap.RESTORE_FACTOR``; ``inf``
keeps them dropped; the lines then record it), and ``--summarise --dropped
yes`` (or ``no``) keeps the data sets that dropped one (or none).  The
held-out test of the restored bandwidth (``through_w``, README)::

    python benchmarks/inference/coverage.py --cases through_w --n 2000 --reps 100 \
        --out benchmarks/inference/results/coverage_heldout.jsonl
    python benchmarks/inference/coverage.py --cases through_w --n 2000 --reps 100 --restore-factor inf \
        --out benchmarks/inference/results/coverage_heldout.jsonl
    python benchmarks/inference/coverage.py --summarise --dropped yes \
        --out benchmarks/inference/results/coverage_heldout.jsonl

(and the same at ``--n 10000``, where the ``inf`` lines were fitted only for
the data sets whose default fit dropped v2, one ``--first r --reps r+1`` run
each: the others give the same numbers by construction).

``--bands-only`` measures the default (bias-reduced) bands alone, no plain
bands and no effect intervals.  The studies of the simultaneous bands with an
undersmoothed refit (cases paper, hetero_v2, linear_v1 and inside_v, which
was held out of the choice; README):

- ``results/coverage_simultaneous.jsonl``: the default (26fe002), the fit's
  sup-t band widened by the refit's band at the pair's joint critical value;
- ``results/coverage_simultaneous_refit_only.jsonl``: the refit's band alone
  (d3a001a, n = 2000), which covered inside_v 0.80 of the time;
- ``results/coverage_simultaneous_union_each_level.jsonl``: the union of the
  two bands each at the level (937ef9a, n = 2000): 0.97–0.98;
- ``results/coverage_simultaneous_joint_both.jsonl``: both bands at the joint
  critical value (06fdd84): 0.87–0.91 at n = 2000, linear_v1 0.82 at 10000.

::

    python benchmarks/inference/coverage.py --cases paper,hetero_v2,linear_v1,inside_v --n 2000 --reps 100 \
        --bands-only --out benchmarks/inference/results/coverage_simultaneous.jsonl

``results/coverage.jsonl`` holds the study with the doubly robust second
stage in two parts (be74c08; 100 data sets per case at n = 2000; at n = 10000
100 for hetero_v2, 50 for the others) and the CDF's own read-out kernel.  ``coverage_one_penalty.jsonl``
holds the study before the split, whose effect lines also predate the CDF's
read-out kernel (8e6ba50; their coverage with it was measured by
``distribution_readout.py --factors fit`` on the same data sets).

``results/coverage_heldout_overlap_categorical.jsonl`` holds two more cases
held out of every inference choice, ``weak_overlap`` and ``categorical_v``
(d8a32b0, 39655db and d1476e6; 100 data sets at each n; README): with the
categorical V the simultaneous band covers 0.81 at n = 2000 (README: the
studentised errors are heavy-tailed there; the refit has the fit's centre).

``results/coverage_variance_window.jsonl`` holds the default since 4c237dc,
the simultaneous bands studentised by the variance averaged over one
read-out bandwidth with both bands of the union at the joint critical value
(``--bands-only``, all eight cases, 100 data sets at n = 2000 and 40 at
n = 10000, 100 for linear_v1 and categorical_v; README, "Simultaneous bands studentised by an averaged variance").

``results/coverage_heavy_tail.jsonl`` holds the defaults on the held-out
``heavy_tail`` (heavy-tailed noise; d0a1b7f, 100 data sets at n = 2000 and
10000; README, "Heavy-tailed noise, held out"): the mean difference's
intervals cover 0.813 at n = 10000.

``results/coverage_deep_feature.jsonl`` holds the study of Deep Feature's
bands and intervals (``--method deep_feature``, ecc7d06, hetero_v2 and
linear_v1 at n = 2000, 100 data sets each): they under-cover (README).

The order of the bias reduction (``ccme.bootstrap.BAND_ORDER``) and the
simultaneous floor were chosen on the ``paper`` case at n = 2000 (the zoo's
"choose" split); ``hetero_v2`` and ``linear_v1`` ("report") were not looked
at before the choice.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
import ccme.bootstrap  # noqa: E402

from benchmarks.accuracy._base import Mixture  # noqa: E402
from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.study_rows import append_row, read_rows, select_dropped  # noqa: E402

LEVEL = 0.9
Q = (0.25, 0.5, 0.75)
ALPHA = 0.1
TARGETS = ("smoothed", "regularised")
OUT = ROOT / "benchmarks" / "inference" / "results" / "coverage.jsonl"
DEFAULT_RESTORE_FACTOR = ccme.bootstrap.RESTORE_FACTOR


def study_points(case):
    """The study's 3 fixed V-points (drawn once per case) and 100 outcome values spanning both arms' ±4 sd box."""
    v_points = case.eval_points(3, seed=0)
    box = np.concatenate([case.mixture(v_points, arm).limits(z=4.0) for arm in (1, 0)])
    return v_points, np.linspace(box[:, 0].min(), box[:, 1].max(), 100)


def smoothed(mix: Mixture, bandwidth: float) -> Mixture:
    """The mixture convolved with N(0, bandwidth²): E[k(Y, y) | v] for the Gaussian read-out kernel."""
    return Mixture(mix.weights, mix.means, mix.covs + bandwidth**2)


def quantiles(mix: Mixture, q, lo: float, hi: float) -> np.ndarray:
    """(n_v, len(q)) quantiles of each V-point's mixture, by inverting its CDF on a fine grid."""
    t = np.linspace(lo, hi, 20001)
    F = mix.cdf(t)
    return np.stack([[np.interp(level, row, t) for level in q] for row in F])


def shortfalls(mix: Mixture, alpha: float, lo: float, hi: float) -> dict:
    """Exact lower and upper expected shortfalls at ``alpha`` of each V-point's Gaussian mixture: {tail: (n_v,)}.

    ES⁻ = (1/α) Σ_k w_k [m_k Φ(z_k) − s_k φ(z_k)], z_k = (Q(α) − m_k)/s_k, and
    ES⁺ = (1/α) Σ_k w_k [m_k (1 − Φ(z_k)) + s_k φ(z_k)], z_k = (Q(1 − α) − m_k)/s_k.
    """
    from scipy.stats import norm

    w = mix.weights / mix.weights.sum(axis=1, keepdims=True)
    m, sd = mix.means[:, :, 0], np.sqrt(mix.covs[:, :, 0, 0])
    out = {}
    for tail, level in (("lower", alpha), ("upper", 1 - alpha)):
        t = quantiles(mix, (level,), lo, hi)  # (n_v, 1)
        z = (t - m) / sd
        if tail == "lower":
            out[tail] = (w * (m * norm.cdf(z) - sd * norm.pdf(z))).sum(axis=1) / alpha
        else:
            out[tail] = (w * (m * norm.sf(z) + sd * norm.pdf(z))).sum(axis=1) / alpha
    return out


def one_data_set(case, n: int, rep: int, v_points, y: np.ndarray, n_rep: int = 1, bands_only: bool = False,
                 method: str = "ridge", location: str = "default", effects_only: bool = False) -> dict:
    data, _ = case.simulate(n, rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # clipping notes and the like: this run measures, it does not read
        started = time.perf_counter()
        res = ccme.fit(case.formula, data, seed=rep, n_rep=n_rep, method=method,
                       location=None if location == "none" else location,
                       **({} if method == "ridge" else {"progress": False}))
        fit_seconds = time.perf_counter() - started
    out = {"case": case.name, "n": n, "rep": rep, "n_rep": n_rep, "fit_seconds": round(fit_seconds, 2),
           "dropped": ccme.bootstrap.dropped_v_groups(res)}
    if ccme.bootstrap.RESTORE_FACTOR != DEFAULT_RESTORE_FACTOR:
        out["restore_factor"] = ccme.bootstrap.RESTORE_FACTOR
    if method != "ridge":
        out["method"] = method
    out["location"] = location
    out["located"] = res.location is not None  # "auto" (and the default) may keep the plain fit
    if bands_only:
        out["bands_only"] = True
    if effects_only:
        out["effects_only"] = True
    started = time.perf_counter()
    for arm in () if effects_only else (1, 0):
        mix = case.mixture(v_points, arm)
        bandwidth = float(res.embedding(arm).y_kernel.bandwidth_array[0])
        truths = {"smoothed": smoothed(mix, bandwidth).density(y), "true": mix.density(y)}
        for target in TARGETS[:1] if bands_only else TARGETS:
            b = res.bands(LEVEL, newdata=v_points, arm=arm, y=y, target=target, n_boot=499, seed=rep)
            for name, truth in truths.items():
                inside = (b.lower <= truth) & (truth <= b.upper)
                inside_s = (b.lower_simultaneous <= truth) & (truth <= b.upper_simultaneous)
                key = f"arm{arm}_{target}_{name}"
                out[key + "_pointwise"] = inside.mean(axis=1).tolist()
                out[key + "_simultaneous"] = inside_s.all(axis=1).astype(float).tolist()
            out[f"arm{arm}_{target}_width"] = (b.upper - b.lower).mean(axis=1).tolist()
            out[f"arm{arm}_{target}_width_simultaneous"] = (b.upper_simultaneous - b.lower_simultaneous).mean(axis=1).tolist()
    out["bands_seconds"] = round(time.perf_counter() - started, 2)
    if bands_only:
        return out

    started = time.perf_counter()
    eff = res.effect(newdata=v_points, q=Q, alpha=(ALPHA,), level=LEVEL, n_boot=499, seed=rep)
    out["effect_seconds"] = round(time.perf_counter() - started, 2)
    lo, hi = y[0] - 10 * np.ptp(y), y[-1] + 10 * np.ptp(y)
    mixes = {arm: case.mixture(v_points, arm) for arm in (1, 0)}
    true_mean = [float(a - b) for a, b in zip(_means(mixes[1]), _means(mixes[0]))]
    true_qte = quantiles(mixes[1], Q, lo, hi) - quantiles(mixes[0], Q, lo, hi)
    bw = {arm: float(res.embedding(arm).y_kernel.bandwidth_array[0]) for arm in (1, 0)}
    smooth_qte = (quantiles(smoothed(mixes[1], bw[1]), Q, lo, hi) - quantiles(smoothed(mixes[0], bw[0]), Q, lo, hi))
    rows = eff.reset_index(drop=True)
    profiles = list(dict.fromkeys(rows["profile"]))
    md = rows[rows["term"] == "mean_diff"]
    out["mean_diff_covered"] = [float(r.conf_low <= true_mean[profiles.index(r.profile)] <= r.conf_high)
                                for r in md.itertuples()]
    qte = rows[rows["term"] == "qte"]
    out["qte_covered"] = [float(r.conf_low <= true_qte[profiles.index(r.profile), Q.index(r.at)] <= r.conf_high)
                          for r in qte.itertuples()]
    out["qte_smoothed_covered"] = [
        float(r.conf_low <= smooth_qte[profiles.index(r.profile), Q.index(r.at)] <= r.conf_high)
        for r in qte.itertuples()]
    for term in EFFECT_TERMS:   # the intervals' widths, per profile (and probability level)
        chosen = rows[rows["term"] == term]
        out[f"{term}_width"] = [float(w) for w in chosen.conf_high - chosen.conf_low]
    es = {arm: shortfalls(mixes[arm], ALPHA, lo, hi) for arm in (1, 0)}
    es_smooth = {arm: shortfalls(smoothed(mixes[arm], bw[arm]), ALPHA, lo, hi) for arm in (1, 0)}
    for tail in ("lower", "upper"):
        rows_t = rows[rows["term"] == f"es_{tail}"]
        for name, truth in (("", es), ("_smoothed", es_smooth)):
            diff = truth[1][tail] - truth[0][tail]
            out[f"es_{tail}{name}_covered"] = [float(r.conf_low <= diff[profiles.index(r.profile)] <= r.conf_high)
                                               for r in rows_t.itertuples()]
    return out


#: The effect terms whose intervals' widths a data set's row records.
EFFECT_TERMS = ("mean_diff", "qte", "es_lower", "es_upper")


def _means(mix: Mixture) -> np.ndarray:
    return (mix.weights * mix.means[:, :, 0]).sum(axis=1) / mix.weights.sum(axis=1)


def run(cases, n: int, reps: int, out: Path, n_rep: int = 1, first: int = 0, bands_only: bool = False,
        method: str = "ridge", location: str = "default", effects_only: bool = False) -> None:
    factor = ccme.bootstrap.RESTORE_FACTOR
    done = {(row["case"], row["n"], row["rep"], row.get("n_rep", 1), row.get("method", "ridge"), row.get("location"))
            for row in read_rows(out) if row.get("restore_factor", DEFAULT_RESTORE_FACTOR) == factor
            and row.get("effects_only", False) == effects_only}
    for name in cases:
        case = get_case(name)
        v_points, y = study_points(case)
        for rep in range(first, reps):
            if (name, n, rep, n_rep, method, location) in done:
                continue
            row = one_data_set(case, n, rep, v_points, y, n_rep, bands_only, method, location, effects_only)
            row["ccme_commit"] = _commit()
            append_row(out, row)
            print(name, n, rep, f"fit {row['fit_seconds']} s, bands {row['bands_seconds']} s", flush=True)


def _commit() -> str:
    import os
    import subprocess

    if os.environ.get("CCME_COMMIT"):  # a copy of the tree without its .git (e.g. run on another machine)
        return os.environ["CCME_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarise(out: Path, dropped: str = "all") -> str:
    """A markdown table: one row per case and n, coverage averaged over data sets, V-points and both arms.

    ``dropped`` "yes" or "no" keeps the data sets whose fit dropped a V covariate, or dropped none (rows that do
    not record it are left out then).
    """
    rows = select_dropped(read_rows(out), dropped)
    groups = {}
    for row in rows:
        label = row["case"] + (f" ({row['method']})" if "method" in row else "")
        if "location" in row:
            label += f" (location={row['location']})"
        if row.get("effects_only"):
            label += " (effects only)"
        if "restore_factor" in row:
            label += f" (dropped V covariates at {row['restore_factor']:g} x the rule)"
        groups.setdefault((label, row["n"], row.get("n_rep", 1)), []).append(row)
    head = ("| case | n | n_rep | data sets | band | pointwise, smoothed | simultaneous, smoothed | pointwise, true density "
            "| simultaneous, true density | mean width | mean width, simultaneous | mean diff | QTE (true) | QTE (smoothed) | ES⁻ diff | ES⁺ diff |")
    lines = [head, "|" + "---|" * 16]
    effect_keys = ("mean_diff_covered", "qte_covered", "qte_smoothed_covered", "es_lower_covered", "es_upper_covered")
    for (case, n, n_rep), group in sorted(groups.items()):
        def mean(key):
            return float(np.mean([np.mean(r[f"arm{a}_{key}"]) for r in group for a in (1, 0)]))

        if all(r.get("effects_only") for r in group):
            effects = " | ".join(f"{np.mean([np.mean(r[k]) for r in group]):.3f}" for k in effect_keys)
            lines.append(f"| {case} | {n} | {n_rep} | {len(group)} | – | – | – | – | – | – | – | {effects} |")
            continue
        for target in TARGETS:
            if not all(f"arm1_{target}_width" in r for r in group):
                continue  # --bands-only lines have the default (bias-reduced) bands alone
            sim_width = (f"{mean(target + '_width_simultaneous'):.4f}"
                         if all(f"arm1_{target}_width_simultaneous" in r for r in group) else "–")
            effects = ""
            if target == TARGETS[0]:
                effects = " | ".join(
                    f"{np.mean([np.mean(r[k]) for r in group if k in r]):.3f}" if any(k in r for r in group) else "–"
                    for k in effect_keys)
            else:
                effects = " |  |  |  | "
            lines.append(
                f"| {case} | {n} | {n_rep} | {len(group)} | {target} | {mean(target + '_smoothed_pointwise'):.3f} | "
                f"{mean(target + '_smoothed_simultaneous'):.3f} | {mean(target + '_true_pointwise'):.3f} | "
                f"{mean(target + '_true_simultaneous'):.3f} | {mean(target + '_width'):.4f} | {sim_width} | {effects} |")
    widths = [(key, group) for key, group in sorted(groups.items())
              if all(f"{EFFECT_TERMS[0]}_width" in r for r in group)]
    if widths:   # rows written before the widths were recorded have none
        lines += ["", "Mean widths of the effect intervals:", "",
                  "| case | n | n_rep | data sets | " + " | ".join(EFFECT_TERMS) + " |", "|" + "---|" * (4 + len(EFFECT_TERMS))]
        for (case, n, n_rep), group in widths:
            cells = " | ".join(f"{np.mean([np.mean(r[f'{t}_width']) for r in group]):.4f}" for t in EFFECT_TERMS)
            lines.append(f"| {case} | {n} | {n_rep} | {len(group)} | {cells} |")
    return "\n".join(lines)


def study_parser(doc: str, out: Path, cases: str = "paper,hetero_v2,linear_v1", reps: int = 100):
    """The arguments every inference study shares: cases, n, the data sets' range (shards), --out, --summarise."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=cases)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=reps, help="data sets r < reps (seeds r)")
    parser.add_argument("--first", type=int, default=0,
                        help="the first data set r (shards of one study run disjoint ranges into their own --out)")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--summarise", action="store_true", help="print the table of what --out holds")
    return parser


def restore_arguments(parser: argparse.ArgumentParser) -> None:
    """``--restore-factor`` (``ccme.bootstrap.RESTORE_FACTOR`` for the run) and ``--dropped`` (for ``--summarise``),
    which the studies of the restored V bandwidth share."""
    parser.add_argument("--restore-factor", type=float, default=DEFAULT_RESTORE_FACTOR,
                        help="ccme.bootstrap.RESTORE_FACTOR (inf: V covariates the tuning dropped stay dropped)")
    parser.add_argument("--dropped", choices=("all", "yes", "no"), default="all",
                        help="--summarise: all data sets, or only those whose fit dropped a V covariate (or none)")


def main(argv=None) -> int:
    parser = study_parser(__doc__, OUT)
    parser.add_argument("--n-rep", type=int, default=1, help="repeated cross-fitting: fit(n_rep=...)")
    parser.add_argument("--method", default="ridge", help="fit(method=...): ridge or deep_feature (the methods with bands)")
    parser.add_argument("--bands-only", action="store_true",
                        help="the default (bias-reduced) bands only: no plain bands, no effect intervals")
    parser.add_argument("--location", default="default", choices=["default", "none", "linear", "auto"],
                        help="fit(location=...): the package's default (lines before 2026-11-28's fix passed None, "
                             "and record no location), none, or a location stage")
    parser.add_argument("--effects-only", action="store_true", help="the effect intervals only: no bands")
    restore_arguments(parser)
    args = parser.parse_args(argv)
    if args.summarise:
        print(summarise(args.out, args.dropped))
        return 0
    ccme.bootstrap.RESTORE_FACTOR = args.restore_factor
    if args.bands_only and args.effects_only:
        parser.error("--bands-only and --effects-only exclude each other")
    run(args.cases.split(","), args.n, args.reps, args.out, args.n_rep, args.first, args.bands_only, args.method,
        args.location, args.effects_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
