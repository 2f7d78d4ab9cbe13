"""Why the simultaneous bands under-cover: the default bands against probes that remove one suspected cause each.

Each data set is fitted once with ccme's defaults; then, for every probe, the
90% bias-reduced bands (``target="smoothed"``) of both arms are computed at the
coverage study's 3 V-points and 100 outcome values (``coverage.py``) and
checked against the smoothed truth::

    python benchmarks/inference/simultaneous_diagnosis.py --case paper --n 2000 --reps 20

Probes (``--probes``, comma-separated):

- ``default``   the bands as shipped;
- ``order:M``   iterated Tikhonov of order M instead of ``ccme.bootstrap.BAND_ORDER`` (less λ₁ bias, more variance);
- ``v:F``       the second stage refitted with the V bandwidths times F for the bands only (less V-smoothing bias);
- ``ps:true``   the fit redone with the case's true propensity (no propensity error in the DR pseudo-outcome);
- ``fixed``     the fit redone with ``tune="none"`` and the hyperparameters (λ₀, λ₁, X and V bandwidths, the
                outcome read-out bandwidth) a default fit chose on one other data set of the case (seed 99999): the
                bootstrap conditions on the tuned values, and this removes their variability across data sets;
- ``clip:C``    the fit redone with ``clip=C`` instead of the automatic clip (less clipping bias for C small);
- ``sv:F``      the simultaneous bands' V bandwidths × F instead of ``bootstrap.simultaneous_v_factor(n)``
                (``sv:1+sp:1``: the simultaneous band of the fit's own second stage, as before 558074c);
- ``sp:P``      the simultaneous bands' λ₁ × P instead of ``bootstrap.SIMULTANEOUS_PENALTY``;
- ``lev:K``     the simultaneous bands' residuals e_i / (1 − H_ii)^K instead of ``bootstrap.LEVERAGE_CORRECTION``
                (0: in-sample residuals, 1: leave-one-out);
- ``levpw:K``   the same for the pointwise bands (``bootstrap.LEVERAGE_POINTWISE``);
- ``win:W``     the simultaneous bands' variance averaged over W read-out bandwidths (``bootstrap.VARIANCE_WINDOW``;
                0: each point's own variance, as before 42f33ad);
- ``union:U``   the fit's band in the simultaneous band kept "whole" or at the "joint" critical value
                (``bootstrap.UNION_FIT_BAND``);
- ``onepenalty`` the fit redone with one second-stage penalty in the doubly robust mode
                (``ccme.tuning.PLUGIN_PENALTY_SEARCH = False``: no split of the plug-in part);
- ``A+B``       probes combined (e.g. ``order:150+v:0.8``, ``ps:true+clip:0.005``).

``v:F`` replaces the fold-arms the bootstrap reads, so the simultaneous bands'
refit (``sv``, ``sp``) narrows the scaled second stage further.

The ``v:F`` probe rebuilds each ridge fold-arm's second-stage factor with the
scaled kernel (``dataclasses.replace`` on the fitted fold-arm); it is a probe
of the cause, not a supported path.  Output: one line per probe with the
pointwise and simultaneous coverage (all V-points and arms), the true
density's pointwise coverage, the mean pointwise width and the simultaneous
coverage per arm and V-point; written to
``results/simultaneous_diagnosis_<case>_<n>.txt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
import ccme.bootstrap as bootstrap  # noqa: E402
import ccme.tuning as tuning  # noqa: E402
from ccme import _backend  # noqa: E402

from benchmarks.accuracy.zoo import get_case  # noqa: E402
from benchmarks.inference.coverage import LEVEL, smoothed, study_points  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: Probe kinds that refit the data set (the others change the bands of one fit).
REFITS = ("ps", "fixed", "clip", "onepenalty")


def _scaled_second_stage(factor: float):
    """A stand-in for bootstrap._linear_parts whose ridge fold-arms use V bandwidths × factor."""
    original, cache = bootstrap._linear_parts, {}

    def parts(res, arm):
        out = []
        for part in original(res, arm):
            if id(part) not in cache:
                kernel = dataclasses.replace(part.v_kernel,
                                             bandwidth=tuple(float(b) * factor for b in part.v_kernel.bandwidth_array))
                L, _ = _backend.kernel_ridge_factor(part.V1, kernel.name, kernel.bandwidth_array, part.shift)
                cache[id(part)] = dataclasses.replace(part, L_V=L, v_kernel=kernel)
            out.append(cache[id(part)])
        return out

    return parts


def _fixed_hyperparameters(case, n: int) -> dict:
    """The hyperparameters a default fit chooses on data set 99999 of the case, as ``fit`` keywords."""
    data, _ = case.simulate(n, 99999)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(case.formula, data, seed=99999)
    kernels = res.kernels
    return dict(tune="none", lam0=dict(res.penalties["lam0"]), lam1=float(next(iter(res.penalties["lam1"].values()))),
                x_bandwidth=tuple(float(b) for b in kernels["x"].bandwidth),
                v_bandwidth=tuple(float(b) for b in kernels["v"].bandwidth),
                y_bandwidth=float(np.mean([res.embedding(a).y_kernel.bandwidth[0] for a in (1, 0)])))


def run(case_name: str, n: int, reps: int, probes: list[str]) -> list[str]:
    case = get_case(case_name)
    v, y = study_points(case)
    tally = {p: {"pointwise": [], "simultaneous": [], "true": [], "width": []} for p in probes}
    original_parts, original_order = bootstrap._linear_parts, bootstrap.BAND_ORDER
    original_factor, original_penalty = bootstrap.simultaneous_v_factor, bootstrap.SIMULTANEOUS_PENALTY
    original_leverage = bootstrap.LEVERAGE_CORRECTION, bootstrap.LEVERAGE_POINTWISE
    original_union = bootstrap.VARIANCE_WINDOW, bootstrap.UNION_FIT_BAND
    fixed = _fixed_hyperparameters(case, n) if any("fixed" in probe.split("+") for probe in probes) else None
    for rep in range(reps):
        data, truth = case.simulate(n, rep)
        fits = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # clipping notes and the like: this run measures
            for probe in ["default"] + probes:
                refit = tuple(c for c in probe.split("+") if c.partition(":")[0] in REFITS)
                if refit in fits:
                    continue
                kwargs = {}
                for component in refit:
                    kind, _, value = component.partition(":")
                    if kind == "onepenalty":
                        continue
                    if kind == "ps":
                        kwargs["propensity"] = truth["ps"].to_numpy()
                    elif kind == "fixed":
                        kwargs.update(fixed)
                    else:
                        kwargs["clip"] = float(value)
                tuning.PLUGIN_PENALTY_SEARCH = "onepenalty" not in refit
                try:
                    fits[refit] = ccme.fit(case.formula, data, seed=rep, **kwargs)
                finally:
                    tuning.PLUGIN_PENALTY_SEARCH = True
        for probe in probes:
            res = fits[tuple(c for c in probe.split("+") if c.partition(":")[0] in REFITS)]
            try:
                for component in probe.split("+"):
                    kind, _, value = component.partition(":")
                    if kind == "order":
                        bootstrap.BAND_ORDER = int(value)
                    elif kind == "v":
                        bootstrap._linear_parts = _scaled_second_stage(float(value))
                    elif kind == "sv":
                        bootstrap.simultaneous_v_factor = lambda n, f=float(value): f
                    elif kind == "sp":
                        bootstrap.SIMULTANEOUS_PENALTY = float(value)
                    elif kind == "lev":
                        bootstrap.LEVERAGE_CORRECTION = float(value)
                    elif kind == "levpw":
                        bootstrap.LEVERAGE_POINTWISE = float(value)
                    elif kind == "win":
                        bootstrap.VARIANCE_WINDOW = float(value)
                    elif kind == "union":
                        bootstrap.UNION_FIT_BAND = value
                for arm in (1, 0):
                    mix = case.mixture(v, arm)
                    bandwidth = float(res.embedding(arm).y_kernel.bandwidth_array[0])
                    target, true = smoothed(mix, bandwidth).density(y), mix.density(y)
                    b = res.bands(LEVEL, newdata=v, arm=arm, y=y, n_boot=499, seed=rep)
                    t = tally[probe]
                    t["pointwise"].append(((b.lower <= target) & (target <= b.upper)).mean(axis=1))
                    t["simultaneous"].append(((b.lower_simultaneous <= target)
                                              & (target <= b.upper_simultaneous)).all(axis=1))
                    t["true"].append(((b.lower <= true) & (true <= b.upper)).mean(axis=1))
                    t["width"].append((b.upper - b.lower).mean(axis=1))
            finally:
                bootstrap._linear_parts, bootstrap.BAND_ORDER = original_parts, original_order
                bootstrap.simultaneous_v_factor, bootstrap.SIMULTANEOUS_PENALTY = original_factor, original_penalty
                bootstrap.LEVERAGE_CORRECTION, bootstrap.LEVERAGE_POINTWISE = original_leverage
                bootstrap.VARIANCE_WINDOW, bootstrap.UNION_FIT_BAND = original_union
        print(case_name, n, rep, flush=True)
    lines = [f"$ python benchmarks/inference/simultaneous_diagnosis.py --case {case_name} --n {n} --reps {reps} "
             f"--probes {','.join(probes)}",
             f"{'probe':18s} {'pointwise':>9s} {'simult.':>8s} {'true pw':>8s} {'width':>8s}   "
             "simultaneous by arm (1; 0) and V-point"]
    for probe, t in tally.items():
        sim = np.array(t["simultaneous"]).reshape(reps, 2, -1).mean(axis=0)
        lines.append(f"{probe:18s} {np.mean(t['pointwise']):9.3f} {np.mean(t['simultaneous']):8.3f} "
                     f"{np.mean(t['true']):8.3f} {np.mean(t['width']):8.4f}   "
                     f"{' '.join(f'{s:.2f}' for s in sim[0])}; {' '.join(f'{s:.2f}' for s in sim[1])}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="paper")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--reps", type=int, default=20, help="data sets (seeds 0 .. reps-1)")
    p.add_argument("--probes", default="default,order:60,order:150,v:0.8,v:0.6,ps:true")
    p.add_argument("--tag", default="", help="suffix of the results file's name")
    args = p.parse_args(argv)
    lines = run(args.case, args.n, args.reps, args.probes.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = f"_{args.tag}" if args.tag else ""
    (RESULTS / f"simultaneous_diagnosis_{args.case}_{args.n}{tag}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
