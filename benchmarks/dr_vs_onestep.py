"""Why ridge DR loses to one-step on arm 1 of some report cases: per case and seed, overlap, weights, tuning, ISE.

    python benchmarks/dr_vs_onestep.py --cases bivariate,ihdp_all25,ihdp_site,inside_v,nsw_race,linear_v1,hetero_v2,nhefs_education,ordinal_v,categorical_v --seeds 1,2,3 --configs dr,onestep,pi --out benchmarks/results/dr_vs_onestep_diag.csv

For each fit (ccme.fit's defaults plus the configuration's options, n and V-points as the zoo's runner:
each case's own n, 150 V-points) it records the ISE of both arms and, for arm 1:
- the true propensity's range on the treated and the fitted (cross-fitted, clipped) scores' range, the clip
  and the number clipped;
- Kish's effective sample size of the treated's weights 1/π̂ (and of the *true* 1/π) and the coefficient of
  variation of the DR pseudo-outcome weights ω = A/π̂ on all units;
- the tuned λ₀, λ₁ per arm and the V bandwidths;
- a measure of confounding *outside V* (the one-step's bias): on a fresh draw of 20000 units (the table
  resampled for semi-synthetic cases), bias(v) = E[π Y¹ | V] / E[π | V] − E[Y¹ | V] (the one-step estimand's
  mean minus the truth's; conditional means by group for a discrete V, else 200-nearest-neighbour means on
  standardised V), reported as the root mean square of bias/sd(Y¹) (first outcome column for bivariate).
  It is 0 by construction when V = X (ihdp_all25) or when confounding lies inside V only (inside_v).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ccme  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import CASES  # noqa: E402

CONFIGS = {
    "dr": {},
    "onestep": {"mode": "onestep"},
    "pi": {"mode": "pi"},
    "dr_hajek": {"normalize_weights": True},
    "dr_trim05": {"trim": 0.05},
    "dr_trim10": {"trim": 0.1},
    "dr_truepi": {},  # diagnostic, not a remedy: DR with the true propensity passed as known scores
    "dr_rep2": {"n_rep": 2},  # repeated cross-fitting: two random fold splits, averaged
    "dr_lam1arm": {},  # DR with λ₁ chosen per arm by its own LOO curve (patched tuning, see per_arm_lam1)
}


@contextlib.contextmanager
def per_arm_lam1():
    """ccme.tuning.tune_ridge with the DR λ₁ chosen per arm (each arm's own LOO curve, as one-step does).

    The LOO curves per arm are already computed for DR (then summed over the arms and one λ₁ shared); this swaps
    the branch that one-step takes in for every mode.  A test of a candidate, not a change to src/.
    """
    import inspect
    import ccme.tuning as tuning
    original = tuning.tune_ridge
    src = inspect.getsource(original)
    old = '        if mode == "onestep":\n            lam1 = {}'
    assert src.count(old) == 1, "tune_ridge changed: the patch no longer applies"
    namespace = dict(vars(tuning))
    exec(compile(src.replace(old, '        if True:\n            lam1 = {}'), tuning.__file__, "exec"), namespace)
    tuning.tune_ridge = namespace["tune_ridge"]
    try:
        yield
    finally:
        tuning.tune_ridge = original


def kish(w):
    w = np.asarray(w, float)
    return float(w.sum() ** 2 / np.sum(w ** 2)) if len(w) else float("nan")


def outside_v_bias(case, seed=12345, n=20000):
    data, truth = case.simulate(n, seed)
    ps = truth["ps"].to_numpy()
    y1 = truth["y1"].to_numpy() if "y1" in truth else truth["y1_1"].to_numpy()
    vcols = case.v_columns
    V = data[vcols] if all(c in data for c in vcols) else None
    if V is None:
        return float("nan")
    if len(vcols) == len(case.x_columns):
        return 0.0
    discrete = all(V[c].dtype.kind in "OUSb" or V[c].nunique() <= 10 for c in vcols)
    if discrete:
        key = pd.Series([tuple(r) for r in V.astype(str).to_numpy()])
        frame = pd.DataFrame({"k": key, "p": ps, "py": ps * y1, "y": y1})
        m = frame.groupby("k")[["p", "py", "y"]].transform("mean")
        mp, mpy, my = m["p"].to_numpy(), m["py"].to_numpy(), m["y"].to_numpy()
    else:
        from sklearn.neighbors import NearestNeighbors
        Vf = pd.get_dummies(V, dtype=float).to_numpy(dtype=float)  # a categorical V column: its indicators
        Z = (Vf - Vf.mean(0)) / Vf.std(0)
        nn = NearestNeighbors(n_neighbors=200).fit(Z)
        sub = np.random.default_rng(0).choice(n, 3000, replace=False)
        idx = nn.kneighbors(Z[sub], return_distance=False)
        mp, mpy, my = ps[idx].mean(1), (ps * y1)[idx].mean(1), y1[idx].mean(1)
    bias = mpy / mp - my
    return float(np.sqrt(np.mean(bias ** 2)) / np.std(y1))


def onestep_bias_ise(case, n_points=30, m=20000, seed=7):
    """ISE between the one-step's estimand p(Y | A = 1, V = v) and the truth p(Y¹ | V = v), mean over V-points.

    Semi-synthetic discrete V: exact, p(y | A=1, v) = Σ_{V_i=v} π_i p_i(y) / Σ π_i over the table's rows and
    the truth the unweighted mean (V = X: 0).  Synthetic: Monte Carlo at ``n_points`` V-points, m draws of
    (W, Y¹) given v, the π-weighted against the unweighted Gaussian KDE of the same draws (same bandwidth,
    Silverman's of the unweighted draws); ``null`` is the same with the weights permuted among the draws (the
    Monte-Carlo floor).  Returns (bias ISE, null ISE).
    """
    from benchmarks.accuracy.metrics import outcome_grid
    if len(case.v_columns) == len(case.x_columns):
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    if hasattr(case, "_units"):
        data, _ = case.simulate(None, seed)
        v = case.eval_points(n_points, seed)
        grid = outcome_grid(case, data, v)
        y = grid.points
        table = case.table
        rows = np.arange(len(table))
        from benchmarks.accuracy._base import bounded
        ps = bounded(*case.ps_range, case._eta(rows))
        dens = case._units(rows, 1).density(y)  # (N, G)
        key = table[case.v_columns].astype(str).agg("|".join, axis=1).to_numpy()
        out, null = [], []
        for _, vr in v.iterrows():
            sel = key == "|".join(str(vr[c]) for c in case.v_columns)
            truth = dens[sel].mean(0)
            est = (ps[sel, None] * dens[sel]).sum(0) / ps[sel].sum()
            out.append(float(grid.integrate(((est - truth) ** 2)[None])[0]))
        return float(np.mean(out)), 0.0
    data, _ = case.simulate(2000, seed)
    v = case.eval_points(n_points, seed)
    grid = outcome_grid(case, data, v)
    pts = grid.points.reshape(len(grid.points), -1)
    out, null = [], []
    if pts.shape[1] == 2:
        m = 4000  # 8100 grid points × m kernel values in memory
    for i in range(len(v)):
        vr = v.iloc[[i]]
        vv = vr.iloc[np.zeros(m, dtype=int)].reset_index(drop=True)
        w = case.sample_w(vv, rng).reset_index(drop=True)
        x = pd.concat([vv, w], axis=1)
        ps = np.asarray(case.propensity(x), float)
        y1 = np.asarray(case.sample_y(x, 1, rng), float).reshape(m, -1)
        d = y1.shape[1]
        h = y1.std(0) * (m ** (-1 / (d + 4))) * (1.06 if d == 1 else 1.0)
        K = np.ones((len(pts), m))
        for j in range(d):
            K *= np.exp(-0.5 * ((pts[:, j, None] - y1[None, :, j]) / h[j]) ** 2) / (np.sqrt(2 * np.pi) * h[j])
        base = K.mean(1)
        wt = K @ (ps / ps.sum())
        wn = K @ (rng.permutation(ps) / ps.sum())
        out.append(float(grid.integrate(((wt - base) ** 2)[None])[0]))
        null.append(float(grid.integrate(((wn - base) ** 2)[None])[0]))
    return float(np.mean(out)), float(np.mean(null))


def diagnose(problem, res):
    A = problem.data["a"].to_numpy()
    t = A == 1
    ps_true = problem.truth_frame["ps"].to_numpy()
    s = res.propensity_scores
    ov = res.overlap
    rep = getattr(ov, "report", None)
    ch = res.tuning.chosen if res.tuning is not None else {}
    out = {
        "n1": int(t.sum()),
        "ps_true_min_t": float(ps_true[t].min()), "ps_true_max_t": float(ps_true[t].max()),
        "ps_hat_min_t": float(s[t].min()) if s is not None else np.nan,
        "ps_hat_max_t": float(s[t].max()) if s is not None else np.nan,
        "ess1_hat": kish(1 / s[t]) if s is not None else np.nan,
        "ess1_true": kish(1 / ps_true[t]),
        "omega_cv": float(np.std(np.where(t, 1 / s, 0)) / np.mean(np.where(t, 1 / s, 0))) if s is not None else np.nan,
        "max_w1": float((1 / s[t]).max()) if s is not None else np.nan,
        "corr_ps": float(np.corrcoef(s, ps_true)[0, 1]) if s is not None else np.nan,
        "rmse_ps": float(np.sqrt(np.mean((s - ps_true) ** 2))) if s is not None else np.nan,
        "clip": json.dumps(getattr(res, "clip", None), default=str),
        "lam0_1": ch.get("lam0", {}).get(1, np.nan) if isinstance(ch.get("lam0"), dict) else ch.get("lam0", np.nan),
        "lam0_0": ch.get("lam0", {}).get(0, np.nan) if isinstance(ch.get("lam0"), dict) else ch.get("lam0", np.nan),
        "lam1_1": ch.get("lam1", {}).get(1, np.nan) if isinstance(ch.get("lam1"), dict) else ch.get("lam1", np.nan),
        "lam1_0": ch.get("lam1", {}).get(0, np.nan) if isinstance(ch.get("lam1"), dict) else ch.get("lam1", np.nan),
        "v_bw": json.dumps([round(b, 3) for b in ch.get("v_bandwidth", [])]),
        "y_bw_1": (ch.get("y_bandwidth") or {}).get(1, np.nan),
        "report": str(rep)[:300] if rep is not None else "",
    }
    return out


def _ratios(frame, base, cand):
    """Per case and arm: mean ISE over seeds of ``cand`` / of ``base``; geometric mean and counts (>1% either way)."""
    lines = []
    rs = {}
    for arm in ("ise1", "ise0"):
        p = frame.pivot_table(index=["case", "seed"], columns="config", values=arm)
        if cand not in p or base not in p:
            continue
        m = p[[base, cand]].dropna().groupby("case").mean()
        r = m[cand] / m[base]
        rs[arm] = r
        lines.append(f"  {cand}/{base} arm {arm[-1]}: geometric mean {np.exp(np.log(r).mean()):.3f} over {len(r)} cases, "
                     f"{int((r < 0.99).sum())} better / {int((r > 1.01).sum())} worse by > 1%")
        lines.append("    " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()))
    if len(rs) == 2:
        allr = pd.concat(rs.values())
        lines.append(f"  both arms: geometric mean {np.exp(np.log(allr).mean()):.3f} over {len(allr)} case-arms, "
                     f"{int((allr < 0.99).sum())} better / {int((allr > 1.01).sum())} worse by > 1%")
    return lines


def summary(results: Path) -> str:
    """The tables of benchmarks/results/dr_vs_onestep.txt from the CSVs there."""
    read = lambda name: pd.read_csv(results / name, comment="#")  # noqa: E731
    out = []
    diag = read("dr_vs_onestep_diag.csv")
    bias = read("dr_vs_onestep_bias.csv").set_index("case")
    e = diag.pivot_table(index="case", columns="config", values="ise1")
    e["dr/onestep"] = e["dr"] / e["onestep"]
    e["pi/onestep"] = e["pi"] / e["onestep"]
    e = e.join(bias)
    e["onestep bias share"] = e["onestep_bias_ise1"] / e["onestep"]
    dr = diag[diag.config == "dr"].groupby("case").agg(
        n1=("n1", "mean"), ps_true_min=("ps_true_min_t", "min"), ps_hat_min=("ps_hat_min_t", "min"),
        ps_hat_max=("ps_hat_max_t", "max"), ess1_true=("ess1_true", "mean"), ess1_hat=("ess1_hat", "mean"),
        omega_cv=("omega_cv", "mean"), max_w1=("max_w1", "max"), corr_ps=("corr_ps", "mean"),
        rmse_ps=("rmse_ps", "mean"))
    dr["ess1/n1"] = dr["ess1_hat"] / dr["n1"]
    out.append("== report cases, arm 1: mean ISE over seeds 1-3 (150 V-points), and the one-step's bias")
    out.append(e.sort_values("dr/onestep", ascending=False).to_string(float_format=lambda x: f"{x:.4g}"))
    ps = diag.pivot_table(index=["case", "seed"], columns="config", values="ise1")
    ps["dr/onestep"] = ps["dr"] / ps["onestep"]
    out.append("\n== arm 1 per seed (dr_truepi: DR with the true propensity as known scores, a diagnostic)")
    out.append(ps.to_string(float_format=lambda x: f"{x:.4g}"))
    out.append("\n== arm 1 overlap and weights of the DR fit (means over seeds; min/max over seeds for ranges)")
    out.append(dr.to_string(float_format=lambda x: f"{x:.3g}"))
    tun = diag[diag.config.isin(["dr", "onestep"])][["case", "config", "seed", "lam0_1", "lam0_0", "lam1_1",
                                                      "lam1_0", "y_bw_1", "v_bw"]]
    tun = tun.assign(v_bw=tun.v_bw.str.slice(0, 60))
    out.append("\n== tuned penalties and bandwidths, DR vs one-step (V bandwidths cut at 60 characters)")
    out.append(tun.sort_values(["case", "seed", "config"]).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    out.append("\n== remedies on the choose split (seeds 1-3, 150 V-points): ratios of mean ISE to the defaults' DR")
    ch = pd.read_csv(results / "dr_vs_onestep_choose.csv")
    ch["config"] = ch["config"].str.replace("ridge_", "")
    out += _ratios(ch, "dr", "dr_hajek") + _ratios(ch, "dr", "onestep")
    for name, cand in (("dr_vs_onestep_choose_lam1arm.csv", "dr_lam1arm"), ("dr_vs_onestep_choose_rep2.csv", "dr_rep2")):
        f = pd.concat([read("dr_vs_onestep_choose_lam1arm.csv"), read(name)]).drop_duplicates(["case", "config", "seed"])
        out += _ratios(f, "dr", cand)
    out.append("\n== remedies on the report split (seeds 1-3, 150 V-points)")
    rep = read("dr_vs_onestep_report_lam1arm.csv")
    allrep = pd.concat([rep, read("dr_vs_onestep_report_rep2.csv"), diag[diag.config == "onestep"]])
    out += _ratios(allrep, "dr", "dr_lam1arm") + _ratios(allrep, "dr", "dr_rep2")
    for cand in ("dr", "dr_lam1arm", "dr_rep2"):
        p = allrep.pivot_table(index="case", columns="config", values="ise1")
        if cand in p and "onestep" in p:
            r = (p[cand] / p["onestep"]).dropna()
            out.append(f"  {cand}/onestep arm 1: " + "  ".join(f"{k} {v:.3f}" for k, v in r.items())
                       + f"  (losses {int((r > 1).sum())} of {len(r)})")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default="")
    p.add_argument("--summary", action="store_true", help="print the tables from the CSVs under --out (a folder)")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--configs", default="dr,onestep,pi")
    p.add_argument("--eval-points", type=int, default=150)
    p.add_argument("--out", required=True)
    p.add_argument("--bias-only", action="store_true", help="only the one-step estimand's bias ISE per case")
    a = p.parse_args(argv)
    if a.summary:
        print(summary(Path(a.out)))
        return 0
    out = Path(a.out)
    rows = pd.read_csv(out, comment="#").to_dict("records") if out.exists() else []
    if a.bias_only:
        for name in a.cases.split(","):
            b, nul = onestep_bias_ise(CASES[name])
            print(f"{name},{b:.6f},{nul:.6f},{outside_v_bias(CASES[name]):.4f}", flush=True)
            with open(out, "a") as fh:
                fh.write(f"{name},{b:.6f},{nul:.6f},{outside_v_bias(CASES[name]):.4f}\n")
        return 0
    done = {(r["case"], r["config"], r["seed"]) for r in rows}
    for name in a.cases.split(","):
        case = CASES[name]
        bias = outside_v_bias(case)
        for seed in map(int, a.seeds.split(",")):
            problem = None
            for cfg in a.configs.split(","):
                if (name, cfg, seed) in done:
                    continue
                problem = problem or Problem(case, getattr(case, "n", None), seed, a.eval_points)
                t0 = time.perf_counter()
                patch = per_arm_lam1() if cfg == "dr_lam1arm" else contextlib.nullcontext()
                with patch, warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                    warnings.simplefilter("ignore")
                    kw = dict(CONFIGS[cfg])
                    if cfg == "dr_truepi":
                        kw["propensity"] = problem.truth_frame["ps"].to_numpy()
                    res = ccme.fit(problem.formula, problem.data, seed=seed, **kw)
                    sc = problem.score(res)
                row = {"case": name, "config": cfg, "seed": seed, "ise1": sc[1], "ise0": sc[0],
                       "seconds": time.perf_counter() - t0, "outside_v_bias": bias, **diagnose(problem, res)}
                rows.append(row)
                pd.DataFrame(rows).to_csv(out, index=False)
                print(name, cfg, seed, f"ise1={sc[1]:.5f} ise0={sc[0]:.5f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
