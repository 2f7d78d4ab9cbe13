"""Kernel ridge vs forest-weights first stage (issue 11, item 3): integrated squared errors against exact truths.

``python benchmarks/forest_first_stage.py [--quick] [--cases paper hd vall] [--seeds 1 2 3] [--paper-n 2000 4000] [--csv PATH]``

Every fit is ``ccme.fit(..., method="ridge", mode="dr", propensity="forest",
tune="auto")`` with ``first_stage`` = "kernel" (the default), "forest" or
"auto"; the error is the integrated squared error ∫ (p̂(y | v) − p(y | v))² dy
(trapezoid rule on a fine grid, the estimate normalised on it) averaged over
V-points, for each arm.

Cases (all with exact conditional densities):

paper
    The paper's simulation, n = 2000 and 4000 (V = x1..x5, X = x1..x10),
    scored by :func:`ccme.datasets.paper_simulation_ise` (1000 V-draws).
hd-step1, hd-step3, hd-smooth3
    40 independent N(0, 1) covariates x1..x40, V = the first 1 or 3, two
    confounders x11, x12 outside V drive the treatment (expit(1.5 x11 + 0.5
    x12 − 0.3)) and the outcome, the other 35 are irrelevant.  n = 2000.
    "step": Y^a = m_a(V) + 3·1{x11 > 0} + x12 + N(0, 0.5²), so
    Y^a | V = v is the two-component mixture ½N(m_a(v), 1.25) + ½N(m_a(v) + 3, 1.25);
    "smooth": Y^a = m_a(V) + 1.5 x11 + 1.5 tanh(2 x12) + N(0, 0.5²), whose
    density given V is a Gauss–Hermite integral over x12 (100 nodes: exact
    to rounding).  m_1(v) = 1 + 0.8 Σ v_j/√k, m_0(v) = 0.5 Σ v_j/√k.
vall-sim
    V = X = 30 independent N(0, 1) covariates, Y^a | X = x ~ N(μ_a(x), 1)
    with μ_0 = 1.5 x1 + 2·1{x2 > 0} − x3, μ_1 = μ_0 + 1 + x4, treatment
    expit(0.8 x1 − 0.5 x3); n = 2000; scored at 500 fresh x.
vall-ihdp
    IHDP with Hill's surface B (747 children), V = X = all 25 covariates,
    Y^a | X = x ~ N(μ_a(x), 1); scored at the 747 rows.

For the "V = all covariates" cases three references: the arm's true
marginal density (what ignoring V achieves at best; the issue's target is 2×
below it), the forest's own conditional density estimate p̂(y | x) =
Σ_l w_l(x) k(Y_l, y) (forest on all of the arm's units, no second stage:
what the second stage gives away by smoothing μ̂₀ in V with one isotropic
kernel), and the DR fit (``first_stage="auto"``) with an oracle V kernel
that ignores the covariates without effect (what learned per-covariate
bandwidths could reach at best).
"""

from __future__ import annotations

import argparse
import csv
import time
import warnings

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

import ccme
from ccme import _backend
from ccme.datasets import paper_simulation_ise
from ccme.estimators.forest_first_stage import check_forest_settings, grow_forest_first_stage

PAPER = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
FIRST_STAGES = ("kernel", "forest", "auto")
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(100)
_GH_W = _GH_W / _GH_W.sum()


def _ise(estimate, truth, grid) -> float:
    return float(np.mean(np.trapezoid((estimate - truth) ** 2, grid, axis=1)))


# ---------------------------------------------------------------------------
# the high-dimensional confounding cases (V small, X = 40 covariates)
# ---------------------------------------------------------------------------
def _m(v, arm):
    s = v.sum(axis=1) / np.sqrt(v.shape[1])
    return 1.0 + 0.8 * s if arm == 1 else 0.5 * s


def hd_data(n, k, kind, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 40))
    c1, c2 = X[:, 10], X[:, 11]
    a = rng.binomial(1, expit(1.5 * c1 + 0.5 * c2 - 0.3))
    eps = 0.5 * rng.standard_normal((n, 2))
    V = X[:, :k]
    if kind == "step":
        g = 3.0 * (c1 > 0) + c2
    else:
        g = 1.5 * c1 + 1.5 * np.tanh(2.0 * c2)
    y = {arm: _m(V, arm) + g + eps[:, arm] for arm in (1, 0)}
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, 41)])
    frame.insert(0, "a", a)
    frame.insert(0, "y", np.where(a == 1, y[1], y[0]))
    return frame


def hd_density(grid, V, arm, kind):
    m = _m(V, arm)[:, None]
    y = grid[None, :]
    if kind == "step":
        sd = np.sqrt(1.0 + 0.25)
        return 0.5 * norm.pdf(y, m, sd) + 0.5 * norm.pdf(y, m + 3.0, sd)
    sd = np.sqrt(1.5**2 + 0.25)
    out = np.zeros((len(V), len(grid)))
    for x, w in zip(_GH_X, _GH_W):
        out += w * norm.pdf(y, m + 1.5 * np.tanh(2.0 * x), sd)
    return out


def hd_formula(k):
    v = " + ".join(f"x{j}" for j in range(1, k + 1))
    return f"y ~ a | {v} | ."


def hd_ise(res, k, kind, arm, seed, n_test=500):
    V = np.random.default_rng(10_000 + seed).standard_normal((n_test, k))
    grid = np.linspace(-8.0, 12.0, 800)
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, k + 1)])
    return _ise(res.density(grid, newdata=newdata, arm=arm), hd_density(grid, V, arm, kind), grid)


# ---------------------------------------------------------------------------
# V = all covariates
# ---------------------------------------------------------------------------
def vall_mu(X, arm):
    mu0 = 1.5 * X[:, 0] + 2.0 * (X[:, 1] > 0) - X[:, 2]
    return mu0 + 1.0 + X[:, 3] if arm == 1 else mu0


def vall_data(n, seed, d=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    a = rng.binomial(1, expit(0.8 * X[:, 0] - 0.5 * X[:, 2]))
    y = np.where(a == 1, vall_mu(X, 1), vall_mu(X, 0)) + rng.standard_normal(n)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, d + 1)])
    frame.insert(0, "a", a)
    frame.insert(0, "y", y)
    return frame


def _normal_rows(grid, mu):
    return norm.pdf(grid[None, :], mu[:, None], 1.0)


def _marginal_ise(grid, mu_eval, mu_population):
    """ISE of the arm's marginal density (a mixture of N(μ, 1) over the population) at the evaluation points."""
    marginal = np.mean([norm.pdf(grid, m, 1.0) for m in mu_population], axis=0)
    return _ise(np.broadcast_to(marginal, (len(mu_eval), len(grid))), _normal_rows(grid, mu_eval), grid)


def _forest_plugin_ise(X, Y, A, arm, X_eval, mu_eval, grid, bandwidth, seed):
    """The forest's own p̂(y | x) = Σ_l w_l(x) k(Y_l, y), grown on all of the arm's units (no second stage)."""
    rows = np.flatnonzero(A == arm)
    first = grow_forest_first_stage(X[rows], Y[rows, None], X_eval, settings=check_forest_settings(None), seed=seed)
    F = _backend.atom_features(Y[rows, None], grid[:, None], "density", "gaussian", [bandwidth])
    estimate = np.asarray(first.W @ F)
    estimate /= np.trapezoid(estimate, grid, axis=1)[:, None]
    return _ise(estimate, _normal_rows(grid, mu_eval), grid)


# ---------------------------------------------------------------------------
def _fit(formula, data, first_stage, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        res = ccme.fit(formula, data, mode="dr", propensity="forest", seed=seed, first_stage=first_stage, **kwargs)
        res.mean(newdata=data.iloc[:1], arm=1), res.mean(newdata=data.iloc[:1], arm=0)
        return res, time.perf_counter() - started


def _row(case, n, seed, fs, res, seconds, ise):
    sel = res.params.get("first_stage_selection") or {}
    crit = {arm: dict(sel.get(arm, {})) for arm in (1, 0)}
    return {"case": case, "n": n, "seed": seed, "first_stage": fs,
            "chosen": f"{res.params['first_stage'][1]}/{res.params['first_stage'][0]}",
            "ise1": ise[0], "ise0": ise[1], "seconds": round(seconds, 2),
            "kernel_loo1": crit[1].get("kernel", np.nan), "forest_oob1": crit[1].get("forest", np.nan),
            "kernel_loo0": crit[0].get("kernel", np.nan), "forest_oob0": crit[0].get("forest", np.nan)}


def run_paper(ns, seeds, out):
    for n in ns:
        for seed in seeds:
            data = ccme.datasets.paper_simulation(n, seed=seed)
            for fs in FIRST_STAGES:
                res, seconds = _fit(PAPER, data, fs, seed)
                ise = [paper_simulation_ise(res, arm=a, seed=seed) for a in (1, 0)]
                out.append(_row("paper", n, seed, fs, res, seconds, ise))
                _print(out[-1])


def run_hd(seeds, out, n=2000, cases=(("hd-step1", 1, "step"), ("hd-step3", 3, "step"), ("hd-smooth3", 3, "smooth"))):
    for name, k, kind in cases:
        for seed in seeds:
            data = hd_data(n, k, kind, seed)
            for fs in FIRST_STAGES:
                res, seconds = _fit(hd_formula(k), data, fs, seed)
                ise = [hd_ise(res, k, kind, a, seed) for a in (1, 0)]
                out.append(_row(name, n, seed, fs, res, seconds, ise))
                _print(out[-1])


def run_vall(seeds, out, n=2000):
    for seed in seeds:
        # simulated, 30 covariates
        data = vall_data(n, seed)
        cols = [c for c in data.columns if c.startswith("x")]
        formula = "y ~ a | " + " + ".join(cols)
        X_eval = np.random.default_rng(20_000 + seed).standard_normal((500, len(cols)))
        X_pop = np.random.default_rng(30_000 + seed).standard_normal((4000, len(cols)))
        grid = np.linspace(-12.0, 14.0, 1000)
        newdata = pd.DataFrame(X_eval, columns=cols)
        refs = {}
        for arm in (1, 0):
            mu = vall_mu(X_eval, arm)
            refs[f"marginal{arm}"] = _marginal_ise(grid, mu, vall_mu(X_pop, arm))
        for fs in FIRST_STAGES:
            res, seconds = _fit(formula, data, fs, seed)
            ise = [_ise(res.density(grid, newdata=newdata, arm=a), _normal_rows(grid, vall_mu(X_eval, a)), grid)
                   for a in (1, 0)]
            out.append({**_row("vall-sim", n, seed, fs, res, seconds, ise), **refs})
            _print(out[-1])
        X, Y, A = data[cols].to_numpy(), data["y"].to_numpy(), data["a"].to_numpy()
        plug = {f"forest_plugin{arm}": _forest_plugin_ise(X, Y, A, arm, X_eval, vall_mu(X_eval, arm), grid,
                                                          res.outcome_kernel(arm).bandwidth[0], seed)
                for arm in (1, 0)}
        # An oracle V kernel: bandwidth 1 on the four covariates that matter, the others ignored.
        oracle, _ = _fit(formula, data, "auto", seed, v_bandwidth=[1.0] * 4 + [np.inf] * (len(cols) - 4))
        plug.update({f"oracle_v{a}": _ise(oracle.density(grid, newdata=newdata, arm=a),
                                          _normal_rows(grid, vall_mu(X_eval, a)), grid) for a in (1, 0)})
        out.append({"case": "vall-sim", "n": n, "seed": seed, "first_stage": "reference", **refs, **plug})
        _print(out[-1])
        # IHDP, 25 covariates
        data, truth = ccme.datasets.ihdp_surface_b(seed, truth=True)
        cols = [c for c in data.columns if c not in ("y", "treat")]
        formula = "y ~ treat | " + " + ".join(cols)
        mus = {arm: truth[f"mu{arm}"].to_numpy() for arm in (1, 0)}
        lo = min(m.min() for m in mus.values()) - 5.0
        hi = max(m.max() for m in mus.values()) + 5.0
        grid = np.linspace(lo, hi, 2000)
        refs = {f"marginal{arm}": _marginal_ise(grid, mus[arm], mus[arm]) for arm in (1, 0)}
        for fs in FIRST_STAGES:
            res, seconds = _fit(formula, data, fs, seed)
            ise = [_ise(res.density(grid, newdata=data, arm=a), _normal_rows(grid, mus[a]), grid) for a in (1, 0)]
            out.append({**_row("vall-ihdp", len(data), seed, fs, res, seconds, ise), **refs})
            _print(out[-1])
        X, Y, A = data[cols].to_numpy(), data["y"].to_numpy(), data["treat"].to_numpy()
        plug = {f"forest_plugin{arm}": _forest_plugin_ise(X, Y, A, arm, X, mus[arm], grid,
                                                          res.outcome_kernel(arm).bandwidth[0], seed)
                for arm in (1, 0)}
        # An oracle V kernel: each covariate with a nonzero coefficient at one standard deviation, the others ignored.
        beta = np.asarray(truth.attrs["beta"])
        sd = data[cols].std().to_numpy()
        oracle, _ = _fit(formula, data, "auto", seed, v_bandwidth=list(np.where(beta != 0, sd, np.inf)))
        plug.update({f"oracle_v{a}": _ise(oracle.density(grid, newdata=data, arm=a), _normal_rows(grid, mus[a]), grid)
                     for a in (1, 0)})
        out.append({"case": "vall-ihdp", "n": len(data), "seed": seed, "first_stage": "reference", **refs, **plug})
        _print(out[-1])


def _print(row):
    keep = {k: (f"{v:.5f}" if isinstance(v, float) else v) for k, v in row.items()}
    print("  ".join(f"{k}={v}" for k, v in keep.items()), flush=True)


def summarise(rows):
    frame = pd.DataFrame(rows)
    fits = frame[frame["first_stage"] != "reference"]
    print("\nMean ISE over seeds (Y1, Y0) and mean fit time:")
    table = fits.groupby(["case", "n", "first_stage"], sort=False)[["ise1", "ise0", "seconds"]].mean()
    print(table.to_string(float_format=lambda x: f"{x:.5f}"))
    ratio = fits.pivot_table(index=["case", "n", "seed"], columns="first_stage", values=["ise1", "ise0"])
    for fs in ("forest", "auto"):
        r = {arm: (ratio[(f"ise{arm}", fs)] / ratio[(f"ise{arm}", "kernel")]) for arm in (1, 0)}
        print(f"\n{fs} / kernel, ISE ratio (geometric mean over seeds), per case:")
        g = pd.DataFrame({f"Y{arm}": np.exp(np.log(r[arm]).groupby(level=[0, 1], sort=False).mean())
                          for arm in (1, 0)})
        print(g.to_string(float_format=lambda x: f"{x:.3f}"))
    refs = frame[frame["first_stage"] == "reference"]
    if len(refs):
        print("\nV = all covariates: references (mean over seeds)")
        cols = [c for c in ("marginal1", "marginal0", "forest_plugin1", "forest_plugin0", "oracle_v1", "oracle_v0")
                if c in refs]
        print(refs.groupby(["case", "n"])[cols].mean().to_string(float_format=lambda x: f"{x:.5f}"))
    print("\nchoices of 'auto' (treated/control):")
    print(fits[fits["first_stage"] == "auto"].groupby(["case", "n"])["chosen"].value_counts().to_string())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed per case, paper at n = 2000 only")
    parser.add_argument("--cases", nargs="+", default=["paper", "hd", "vall"], choices=["paper", "hd", "vall"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--paper-n", type=int, nargs="+", default=[2000, 4000], help="sizes of the paper case")
    parser.add_argument("--csv", default=None, help="write every row to this CSV")
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    rows = []
    started = time.perf_counter()
    if "paper" in args.cases:
        run_paper(args.paper_n[:1] if args.quick else args.paper_n, seeds, rows)
    if "hd" in args.cases:
        run_hd(seeds, rows)
    if "vall" in args.cases:
        run_vall(seeds, rows)
    summarise(rows)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.csv:
        keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
