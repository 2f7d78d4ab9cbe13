"""Nuisance defaults: propensity learner, clipping rule and Hájek weights, against exact densities.

``python benchmarks/nuisance_defaults.py`` (about 30 minutes on two cores;
``--quick``: one seed, n = 2000 only; ``--timing``: only the propensity
stage's time at n = 20 000).

Cases (each with the exact conditional density p(y^a | V = v)):

- ``paper``: the paper's simulation (``ccme.datasets.paper_simulation``),
  V = x1..x5, X = x1..x10; the propensity is a step function (0.1 / 0.9 on
  a box), so a linear logit is misspecified.
- ``linear``: X ~ N(0, I₅), V = x1, logit π = −1 + 1.2 x2 + 0.8 x3 (true
  scores down to 0.003: weak overlap, a correctly specified logistic
  model), Y^a = a(1 + x1/2) + x1 + x2 + x3/2 + N(0, 1): confounding outside V.
- ``step``: X ~ N(0, I₆), V = (x1, x2), π = 0.05, 0.5 or 0.95 by the signs of
  x3 and x4 − 1/2 (a step function: trees), Y^a = x1 − x2/2 + 2a + 3S + x3 +
  N(0, 1/4), S ~ Bernoulli(expit(x1)): a bimodal outcome, confounding
  through x3.
- ``smooth``: X ~ N(0, I₈), V = x1, logit π = 2.2 sin(1.5 x2) + 0.8 x3² − 1.5
  (scores from 0.02 to almost 1 in the tails), Y^a = a(1 + x1) + x2 + x3/2 +
  (1/2 + |x1|/2) N(0, 1): heteroscedastic, confounding through x2 and x3,
  three irrelevant covariates.

Each fit is the ridge estimator with ``tune="auto"``, two folds, mode "dr"
unless the column says ``ipw:``.  Columns of the tables: the mean
integrated squared error over the seeds of each arm's p̂(y | V = v)
(500 V-draws, 1000-point grid), its ratio to the one-step estimate's, how
many (arm, seed) pairs DR wins against one-step, and the mean clip used.
Learner / clip / weights:

- ``onestep``: the naive regression of φ(Y) on V among the arm's units;
- ``logistic/0.01``: the old defaults (unpenalised logistic, clip 0.01);
- ``forest/0.01``: the paper's forest, clip 0.01;
- ``auto/auto``: the new defaults (Super Learner stack, Crump et al.'s clip);
- ``auto/auto/hajek``: the new defaults with Hájek-normalised weights;
- ``auto/0.01``: the new learner with the old clip;
- ``select/auto``: the discrete Super Learner (the candidate of best CV
  log-loss) instead of the stack;
- ``logistic/auto``, ``forest/auto``: the old learners with the new clip;
- ``ipw:...``: the same for the IPW estimate.

Variants that share a learner reuse its cross-fitted scores (passed as known
scores with the same seed: the same folds, the same fit).

Results: below (two cores shared with other jobs, so the times are
indicative; the CPU seconds of the last table are less affected by the load).

Output of ``python benchmarks/nuisance_defaults.py`` (ridge, tune="auto";
about 30 minutes)::

    paper, n = 2000, 3 seeds (true min(π, 1 − π) ≥ 0.100); one-step ISE Y1 0.0143, Y0 0.0108
      config                   ISE Y1   ISE Y0 DR/1-step Y1     Y0 DR wins     clip
      logistic/0.01            0.0101   0.0188         0.70   1.74   3/6     0.0100
      forest/0.01              0.0036   0.0134         0.25   1.24   3/6     0.0100
      auto/auto                0.0042   0.0177         0.29   1.64   3/6     0.0541
      auto/auto/hajek          0.0043   0.0163         0.30   1.51   3/6     0.0541
      auto/0.01                0.0037   0.0181         0.26   1.68   3/6     0.0100
      select/auto              0.0042   0.0188         0.29   1.74   3/6     0.0516
      logistic/auto            0.0043   0.0136         0.30   1.26   3/6     0.0917
      ipw:auto/auto            0.0040   0.0174         0.28   1.61   3/6     0.0541
      ipw:auto/0.01            0.0041   0.0184         0.28   1.70   3/6     0.0100
      propensity stage (wall): auto 3.63s, forest 0.78s, logistic 0.04s, select 3.09s
      Brier: auto 0.1046, forest 0.1196, logistic 0.1571, select 0.1070
      auto, largest weight (per seed, per fold): boosting,boosting; boosting,boosting; boosting,boosting
      auto, weights logistic_cv/boosting/forest (per seed, per fold): 0.00/0.74/0.26,0.00/0.65/0.35; 0.00/0.72/0.28,0.00/0.70/0.30; 0.00/0.73/0.27,0.00/0.54/0.46

    paper, n = 4000, 3 seeds (true min(π, 1 − π) ≥ 0.100); one-step ISE Y1 0.0148, Y0 0.0086
      config                   ISE Y1   ISE Y0 DR/1-step Y1     Y0 DR wins     clip
      logistic/0.01            0.0071   0.0162         0.48   1.88   3/6     0.0100
      forest/0.01              0.0029   0.0107         0.20   1.24   3/6     0.0100
      auto/auto                0.0040   0.0120         0.27   1.39   3/6     0.0529
      auto/auto/hajek          0.0039   0.0122         0.26   1.41   3/6     0.0529
      auto/0.01                0.0041   0.0120         0.27   1.39   3/6     0.0100
      select/auto              0.0041   0.0161         0.27   1.87   3/6     0.0431
      logistic/auto            0.0032   0.0112         0.22   1.30   3/6     0.0912
      ipw:auto/auto            0.0042   0.0128         0.28   1.49   3/6     0.0529
      ipw:auto/0.01            0.0042   0.0128         0.28   1.49   3/6     0.0100
      propensity stage (wall): auto 4.70s, forest 1.18s, logistic 0.02s, select 2.86s
      Brier: auto 0.0970, forest 0.1147, logistic 0.1515, select 0.0972
      auto, largest weight (per seed, per fold): boosting,boosting; boosting,boosting; boosting,boosting
      auto, weights logistic_cv/boosting/forest (per seed, per fold): 0.00/0.75/0.25,0.00/0.80/0.20; 0.03/0.84/0.13,0.00/0.79/0.21; 0.00/0.81/0.19,0.00/0.76/0.24

    linear, n = 2000, 3 seeds (true min(π, 1 − π) ≥ 0.003); one-step ISE Y1 0.0272, Y0 0.0066
      config                   ISE Y1   ISE Y0 DR/1-step Y1     Y0 DR wins     clip
      logistic/0.01            0.0059   0.0024         0.22   0.36   6/6     0.0100
      forest/0.01              0.0040   0.0014         0.15   0.22   6/6     0.0100
      auto/auto                0.0037   0.0018         0.13   0.27   6/6     0.0950
      auto/auto/hajek          0.0043   0.0019         0.16   0.29   6/6     0.0950
      auto/0.01                0.0058   0.0022         0.21   0.33   6/6     0.0100
      select/auto              0.0036   0.0019         0.13   0.28   6/6     0.0962
      logistic/auto            0.0043   0.0021         0.16   0.32   6/6     0.0958
      ipw:auto/auto            0.0057   0.0023         0.21   0.34   6/6     0.0950
      ipw:auto/0.01            0.0054   0.0023         0.20   0.35   6/6     0.0100
      propensity stage (wall): auto 1.20s, forest 0.53s, logistic 0.01s, select 0.84s
      Brier: auto 0.1632, forest 0.1690, logistic 0.1627, select 0.1627
      auto, largest weight (per seed, per fold): logistic_cv,logistic_cv; logistic_cv,logistic_cv; logistic_cv,logistic_cv
      auto, weights logistic_cv/boosting/forest (per seed, per fold): 1.00/0.00/0.00,1.00/0.00/0.00; 1.00/0.00/0.00,0.70/0.28/0.02; 0.51/0.18/0.31,1.00/0.00/0.00

    step, n = 2000, 3 seeds (true min(π, 1 − π) ≥ 0.050); one-step ISE Y1 0.0156, Y0 0.0089
      config                   ISE Y1   ISE Y0 DR/1-step Y1     Y0 DR wins     clip
      logistic/0.01            0.0116   0.0075         0.75   0.84   4/6     0.0100
      forest/0.01              0.0074   0.0051         0.48   0.57   6/6     0.0100
      auto/auto                0.0076   0.0048         0.49   0.54   6/6     0.0750
      auto/auto/hajek          0.0079   0.0045         0.51   0.51   6/6     0.0750
      auto/0.01                0.0076   0.0048         0.49   0.54   6/6     0.0100
      select/auto              0.0073   0.0049         0.47   0.55   6/6     0.0837
      logistic/auto            0.0077   0.0048         0.49   0.55   6/6     0.1000
      ipw:auto/auto            0.0102   0.0068         0.66   0.76   6/6     0.0750
      ipw:auto/0.01            0.0103   0.0068         0.66   0.76   6/6     0.0100
      propensity stage (wall): auto 1.27s, forest 0.44s, logistic 0.01s, select 1.27s
      Brier: auto 0.1545, forest 0.1532, logistic 0.1800, select 0.1531
      auto, largest weight (per seed, per fold): forest,forest; forest,forest; forest,forest
      auto, weights logistic_cv/boosting/forest (per seed, per fold): 0.00/0.36/0.64,0.00/0.35/0.65; 0.00/0.40/0.60,0.00/0.38/0.62; 0.14/0.43/0.44,0.00/0.34/0.66

    smooth, n = 2000, 3 seeds (true min(π, 1 − π) ≥ 0.000); one-step ISE Y1 0.0195, Y0 0.0093
      config                   ISE Y1   ISE Y0 DR/1-step Y1     Y0 DR wins     clip
      logistic/0.01            0.0147   0.0030         0.75   0.33   6/6     0.0100
      forest/0.01              0.0066   0.0014         0.34   0.16   6/6     0.0100
      auto/auto                0.0067   0.0014         0.34   0.15   6/6     0.0836
      auto/auto/hajek          0.0073   0.0016         0.37   0.17   6/6     0.0836
      auto/0.01                0.0073   0.0015         0.37   0.16   6/6     0.0100
      select/auto              0.0070   0.0020         0.36   0.21   6/6     0.0921
      logistic/auto            0.0094   0.0025         0.48   0.27   6/6     0.1000
      ipw:auto/auto            0.0087   0.0016         0.45   0.17   6/6     0.0836
      ipw:auto/0.01            0.0087   0.0016         0.44   0.17   6/6     0.0100
      propensity stage (wall): auto 1.44s, forest 0.39s, logistic 0.01s, select 0.93s
      Brier: auto 0.1620, forest 0.1698, logistic 0.2004, select 0.1665
      auto, largest weight (per seed, per fold): boosting,boosting; boosting,boosting; boosting,boosting
      auto, weights logistic_cv/boosting/forest (per seed, per fold): 0.00/0.60/0.40,0.00/0.81/0.19; 0.00/0.63/0.37,0.00/0.71/0.29; 0.00/0.61/0.39,0.00/0.60/0.40

    All cases: DR better than one-step (case-arm-seed triples) and geometric mean ratio DR / one-step
      logistic/0.01          wins  22/30   geo-mean ratio 0.647
      forest/0.01            wins  24/30   geo-mean ratio 0.357
      auto/auto              wins  24/30   geo-mean ratio 0.390
      auto/auto/hajek        wins  24/30   geo-mean ratio 0.402
      auto/0.01              wins  24/30   geo-mean ratio 0.418
      select/auto            wins  24/30   geo-mean ratio 0.425
      logistic/auto          wins  24/30   geo-mean ratio 0.420
      ipw:auto/auto          wins  24/30   geo-mean ratio 0.466
      ipw:auto/0.01          wins  24/30   geo-mean ratio 0.469

    propensity stage at n = 20000, 2 folds (wall / CPU seconds)
      d = 10: logistic 0.02 / 0.02; forest 2.21 / 2.19; auto (logistic_cv,logistic_cv) 3.70 / 3.58
      d = 50: logistic 0.03 / 0.02; forest 3.28 / 4.44; auto (boosting,logistic_cv) 7.40 / 7.28

Reading: the new defaults (``auto/auto``: Super Learner stack, Crump's
clip) win against one-step wherever the old ones did and more (24 of 30
arm-seed pairs against 22), with errors 40 % lower overall (geometric mean of
the DR / one-step ratio 0.39 against 0.65).  The 6 losses are the paper's
Y⁰, where every propensity loses.  Crump's clip helps the stack (0.39
against 0.42 at clip 0.01) and rescues the logistic model (0.42 against
0.65); the stack beats the single best learner (0.43); Hájek weights do not
help with these defaults (0.40).  The paper's forest alone is slightly
better still (0.36), with worse Brier scores.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

import ccme
from ccme.datasets import paper_simulation_density
from ccme.propensity import crump_alpha

# ---------------------------------------------------------------------------
# cases: data and exact densities
# ---------------------------------------------------------------------------


def _frame(X, a, y):
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(1, X.shape[1] + 1)])
    frame.insert(0, "a", a)
    frame.insert(0, "y", y)
    return frame


def linear_case(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    ps = expit(-1.0 + 1.2 * X[:, 1] + 0.8 * X[:, 2])
    a = rng.binomial(1, ps)
    base = X[:, 0] + X[:, 1] + 0.5 * X[:, 2] + rng.standard_normal(n)
    y = base + a * (1.0 + 0.5 * X[:, 0])
    return _frame(X, a, y), ps


def linear_density(grid, V, arm):
    v = V[:, 0]
    mean = v + arm * (1.0 + 0.5 * v)
    return norm.pdf(grid[None, :], mean[:, None], np.sqrt(1.0 + 0.25 + 1.0))


def step_case(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 6))
    ps = 0.05 + 0.45 * (X[:, 2] > 0) + 0.45 * (X[:, 3] > 0.5)
    a = rng.binomial(1, ps)
    s = rng.binomial(1, expit(X[:, 0]))
    y = X[:, 0] - 0.5 * X[:, 1] + 2.0 * a + 3.0 * s + X[:, 2] + 0.5 * rng.standard_normal(n)
    return _frame(X, a, y), ps


def step_density(grid, V, arm):
    m = V[:, 0] - 0.5 * V[:, 1] + 2.0 * arm
    p = expit(V[:, 0])
    sd = np.sqrt(1.0 + 0.25)
    return (1 - p)[:, None] * norm.pdf(grid[None, :], m[:, None], sd) + p[:, None] * norm.pdf(
        grid[None, :], m[:, None] + 3.0, sd)


def smooth_case(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 8))
    ps = expit(2.2 * np.sin(1.5 * X[:, 1]) + 0.8 * X[:, 2] ** 2 - 1.5)
    a = rng.binomial(1, ps)
    y = a * (1.0 + X[:, 0]) + X[:, 1] + 0.5 * X[:, 2] + (0.5 + 0.5 * np.abs(X[:, 0])) * rng.standard_normal(n)
    return _frame(X, a, y), ps


def smooth_density(grid, V, arm):
    v = V[:, 0]
    sd = np.sqrt(1.0 + 0.25 + (0.5 + 0.5 * np.abs(v)) ** 2)
    return norm.pdf(grid[None, :], (arm * (1.0 + v))[:, None], sd[:, None])


def paper_case(n, seed):
    data, truth = ccme.datasets.paper_simulation(n, seed=seed, truth=True)
    return data, truth["ps"].to_numpy()


CASES = {
    # name: (simulate, formula, V columns, V sampler, exact density)
    "paper": (paper_case, "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10", 5,
              lambda rng, m: rng.normal(1.0, 1.0, size=(m, 5)),
              lambda grid, V, arm: paper_simulation_density(grid, V, arm=arm)),
    "linear": (linear_case, "y ~ a | x1 | .", 1, lambda rng, m: rng.standard_normal((m, 1)), linear_density),
    "step": (step_case, "y ~ a | x1 + x2 | .", 2, lambda rng, m: rng.standard_normal((m, 2)), step_density),
    "smooth": (smooth_case, "y ~ a | x1 | .", 1, lambda rng, m: rng.standard_normal((m, 1)), smooth_density),
}


def ise(res, case, arm, seed, n_test=500):
    _, _, d_v, sampler, density = CASES[case]
    V = sampler(np.random.default_rng(1000 + seed), n_test)
    grid = np.linspace(res.design.Y.min() - 2.0, res.design.Y.max() + 2.0, 1000)
    newdata = pd.DataFrame(V, columns=[f"x{j}" for j in range(1, d_v + 1)])
    estimate = res.density(grid, newdata=newdata, arm=arm)
    return float(np.mean(np.trapezoid((estimate - density(grid, V, arm)) ** 2, grid, axis=1)))


# ---------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------

#: column → (learner, clip, normalize_weights[, mode]); clip "crump" is Crump et al.'s α of the learner's scores
#: (what clip="auto" computes, without its cap at 0.1); learner "select" is AutoPropensity(combine="select"),
#: "stack" AutoPropensity(combine="stack") (what "auto" is).
CONFIGS = {
    "logistic/0.01": ("logistic", 0.01, False),
    "forest/0.01": ("forest", 0.01, False),
    "auto/auto": ("auto", "auto", False),
    "auto/auto/hajek": ("auto", "auto", True),
    "auto/0.01": ("auto", 0.01, False),
    "auto/0.01/hajek": ("auto", 0.01, True),
    "select/auto": ("select", "auto", False),
    "select/0.01": ("select", 0.01, False),
    "logistic/auto": ("logistic", "auto", False),
    "forest/auto": ("forest", "auto", False),
    "ipw:auto/auto": ("auto", "auto", False, "ipw"),
    "ipw:auto/0.01": ("auto", 0.01, False, "ipw"),
}
DEFAULT_CONFIGS = ["logistic/0.01", "forest/0.01", "auto/auto", "auto/auto/hajek", "auto/0.01", "select/auto",
                   "logistic/auto", "ipw:auto/auto", "ipw:auto/0.01"]


def _fit(formula, data, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        return ccme.fit(formula, data, seed=seed, **kwargs)


def run_case(case, n, seed, configs):
    simulate, formula, *_ = CASES[case]
    data, true_ps = simulate(n, seed)
    row = {"case": case, "n": n, "seed": seed, "true_ps_min": float(np.minimum(true_ps, 1 - true_ps).min())}
    res = _fit(formula, data, seed, mode="onestep")
    row["onestep"] = [ise(res, case, a, seed) for a in (1, 0)]
    scores, extra = {}, {}
    for name, (learner, clip, hajek, *mode) in configs.items():
        mode = mode[0] if mode else "dr"
        if learner not in scores:
            spec = (ccme.propensity_selection.AutoPropensity(combine=learner) if learner in ("stack", "select")
                    else learner)
            res = _fit(formula, data, seed, propensity=spec, clip=clip if clip != "crump" else 0.01,
                       normalize_weights=hajek, mode=mode)
            scores[learner] = res.propensity_scores
            extra[learner] = {"time": res.timing["propensity"], "report": res.propensity_report}
            if clip != "crump":
                row[name] = [ise(res, case, a, seed) for a in (1, 0)]
                row[name + ":clip"] = res.clip
                continue
        value = crump_alpha(scores[learner]) if clip == "crump" else clip
        res = _fit(formula, data, seed, propensity=scores[learner], clip=value, normalize_weights=hajek, mode=mode)
        row[name] = [ise(res, case, a, seed) for a in (1, 0)]
        row[name + ":clip"] = res.clip
    for learner, info in extra.items():
        row[f"time:{learner}"] = info["time"]
        report = info["report"]
        row[f"brier:{learner}"] = report.brier
        row[f"chosen:{learner}"] = ",".join(report.chosen) if report.selections else learner
        row[f"weights:{learner}"] = ",".join("/".join(f"{w:.2f}" for w in s.weights) for s in report.selections)
    return row


def summarise(rows, configs):
    frame = pd.DataFrame(rows)
    lines = []
    for (case, n), group in frame.groupby(["case", "n"], sort=False):
        one = np.mean(np.stack(group["onestep"].to_list()), axis=0)
        lines.append(f"\n{case}, n = {n}, {len(group)} seeds (true min(π, 1 − π) ≥ {group['true_ps_min'].min():.3f}); "
                     f"one-step ISE Y1 {one[0]:.4f}, Y0 {one[1]:.4f}")
        lines.append(f"  {'config':22s} {'ISE Y1':>8s} {'ISE Y0':>8s} {'DR/1-step Y1':>12s} {'Y0':>6s} "
                     f"{'DR wins':>7s} {'clip':>8s}")
        for name in configs:
            ise_ = np.stack(group[name].to_list())
            mean = ise_.mean(axis=0)
            ones = np.stack(group["onestep"].to_list())
            wins = int(np.sum(ise_ < ones))
            clip = group[name + ":clip"].mean()
            lines.append(f"  {name:22s} {mean[0]:8.4f} {mean[1]:8.4f} {mean[0] / one[0]:12.2f} {mean[1] / one[1]:6.2f} "
                         f"{wins:>3d}/{ise_.size:<3d} {clip:8.4f}")
        learners = sorted({c[0] for c in configs.values()})
        times = ", ".join(f"{name} {group[f'time:{name}'].mean():.2f}s" for name in learners)
        briers = ", ".join(f"{name} {group[f'brier:{name}'].mean():.4f}" for name in learners)
        chosen = "; ".join(group["chosen:auto"]) if "chosen:auto" in group else ""
        weights = "; ".join(group["weights:auto"]) if "weights:auto" in group else ""
        lines.append(f"  propensity stage (wall): {times}")
        lines.append(f"  Brier: {briers}")
        if chosen:
            lines.append(f"  auto, largest weight (per seed, per fold): {chosen}")
            lines.append(f"  auto, weights logistic_cv/boosting/forest (per seed, per fold): {weights}")
    # overall: how often DR beats one-step, per config
    lines.append("\nAll cases: DR better than one-step (case-arm-seed triples) and geometric mean ratio DR / one-step")
    ones = np.stack(frame["onestep"].to_list())
    for name in configs:
        ise_ = np.stack(frame[name].to_list())
        ratio = np.exp(np.mean(np.log(ise_ / ones)))
        lines.append(f"  {name:22s} wins {int(np.sum(ise_ < ones)):>3d}/{ise_.size:<3d}  geo-mean ratio {ratio:.3f}")
    return "\n".join(lines)


def timing(n=20000, dims=(10, 50), seed=1):
    """Wall and CPU seconds of the cross-fitted propensity stage (2 folds) at n units."""
    from ccme.crossfit import cross_fit_scores, make_folds
    from ccme.propensity import make_propensity

    lines = [f"\npropensity stage at n = {n}, 2 folds (wall / CPU seconds)"]
    for d in dims:
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, d))
        A = rng.binomial(1, expit(-0.5 + X[:, 0] - 0.5 * X[:, 1] + 0.5 * np.sin(2 * X[:, 2]) + 0.3 * X[:, 3] ** 2))
        folds = make_folds(n, 2, np.random.default_rng(seed))
        cells = []
        for name in ("logistic", "forest", "auto"):
            model = make_propensity(name, n, seed)
            wall, cpu = time.perf_counter(), time.process_time()
            selections = []
            cross_fit_scores(model, X, A, folds, selections=selections)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            chosen = f" ({','.join(s.chosen for s in selections)})" if name == "auto" else ""
            cells.append(f"{name}{chosen} {wall:.2f} / {cpu:.2f}")
        lines.append(f"  d = {d}: " + "; ".join(cells))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, n = 2000")
    parser.add_argument("--timing", action="store_true", help="only the propensity stage's time at n = 20000")
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    args = parser.parse_args()
    if args.timing:
        print(timing(), flush=True)
        return
    seeds = [1] if args.quick else args.seeds
    configs = {name: CONFIGS[name] for name in args.configs}
    plan = [(case, n) for case in args.cases for n in ((2000,) if args.quick or case != "paper" else (2000, 4000))]
    rows = []
    for case, n in plan:
        for seed in seeds:
            started = time.perf_counter()
            rows.append(run_case(case, n, seed, configs))
            print(f"# {case} n={n} seed={seed}: {time.perf_counter() - started:.0f}s", flush=True)
    print(summarise(rows, configs), flush=True)
    print(timing(), flush=True)


if __name__ == "__main__":
    main()
