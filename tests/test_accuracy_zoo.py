"""The accuracy zoo's cases (benchmarks/accuracy): exact truths, draws, reproducibility.  No fits.

Tolerances, measured with ``benchmarks/accuracy/checks.py`` (40 equiprobable
bins, z_b = (p̂_b − p_b) / sqrt(p_b(1 − p_b)/m)):

- Total mass of every exact density: |∫p − 1| ≤ 2.3e-16 measured (trapezoid
  over ±10 sd, 2001 points; 601² for the bivariate case); asserted ≤ 1e-8.
- Monte-Carlo agreement: in two measurements of 530 checks each (18 cases ×
  up to 3 V-points × 2 arms × 5 seeds; m = 20000 and m = 30000 draws of
  Y^a | V = v from the generating code) max_b |z_b| had median 2.4, 99th
  percentile 3.6 and maximum 4.03 (4.03 and 3.85); asserted ≤ 5 (under
  a correct truth a bin exceeds 5 with probability 5.7e-7, so a 40-bin check
  fails by chance with probability 2e-5).  With m = 20000 this threshold
  detects a mean shift of 0.04–0.08 total standard deviations, a standard
  deviation off by 6–8%, or (for nhefs_sex) component weights off by 0.02.
  The tests use m = 30000.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.accuracy._base import Mixture  # noqa: E402
from benchmarks.accuracy.checks import DIRECTIONS, bin_zscores, project, total_mass  # noqa: E402
from benchmarks.accuracy.zoo import CASES, case_names  # noqa: E402

import ccme  # noqa: E402

Z_MAX = 5.0
MASS_TOL = 1e-8
M = 30000
NAMES = list(CASES)


def _row(mix: Mixture, r: int) -> Mixture:
    return Mixture(mix.weights[[r]], mix.means[[r]], mix.covs[[r]])


def _max_z(case, mix: Mixture, draws) -> float:
    if case.dim_y == 1:
        return float(np.abs(bin_zscores(mix, draws)).max())
    return max(float(np.abs(bin_zscores(project(mix, u), draws @ u)).max()) for u in DIRECTIONS)


def _small_n(case):
    return None if case.n is None else 400


def test_registry_and_split():
    assert len([c for c in CASES.values() if c.kind != "semi-synthetic"]) >= 10
    assert {c.split for c in CASES.values()} == {"choose", "report"}
    share = len(case_names("choose")) / len(CASES)
    assert 0.3 <= share <= 0.5
    for name, case in CASES.items():
        assert case.name == name and case.description and case.formula


@pytest.mark.parametrize("name", NAMES)
def test_exact_density_integrates_to_one(name):
    case = CASES[name]
    v = case.eval_points(3, 11).iloc[:3]
    for arm in (1, 0):
        mix = case.mixture(v, arm)
        assert np.all(mix.weights >= 0)
        np.testing.assert_allclose(mix.weights.sum(axis=1), 1.0, atol=1e-12)
        assert np.max(np.abs(total_mass(mix) - 1.0)) <= MASS_TOL
        # density() is the mixture's density, (n_v, G)
        grid = np.zeros((5, case.dim_y)) if case.dim_y > 1 else np.linspace(-1, 1, 5)
        assert case.density(grid, v, arm).shape == (len(v), 5)


@pytest.mark.parametrize("name", NAMES)
def test_exact_density_matches_monte_carlo(name):
    """Y^a | V = v drawn by the case's own generating code at fixed v, against the closed form."""
    case = CASES[name]
    v = case.eval_points(2, 5).iloc[:2]
    rng = np.random.default_rng(123)
    for arm in (1, 0):
        mix = case.mixture(v, arm)
        for r in range(len(v)):
            draws = case.sample_given_v(v.iloc[[r]], arm, M, rng)
            assert _max_z(case, _row(mix, r), draws) <= Z_MAX, (name, arm, r)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.discrete_v])
def test_discrete_v_pooled_draws_match(name):
    """For a discrete V, the potential outcomes of whole draws, among the units with V = v, follow the truth."""
    case = CASES[name]
    data, truth = case.simulate(M, 99)
    levels = case.eval_points(0, 0)
    for arm in (1, 0):
        mix = case.mixture(levels, arm)
        for r in range(len(levels)):
            units = np.ones(len(data), dtype=bool)
            for c in case.v_columns:
                units &= (data[c] == levels[c].iloc[r]).to_numpy()
            assert units.sum() > 500
            assert _max_z(case, _row(mix, r), truth.loc[units, f"y{arm}"].to_numpy()) <= Z_MAX, (name, arm, r)


def test_paper_case_is_the_package_simulation():
    case = CASES["paper"]
    data, _ = case.draw(300, seed=4)
    pd.testing.assert_frame_equal(data, ccme.datasets.paper_simulation(300, seed=4))
    v = case.eval_points(20, 3)
    grid = np.linspace(-20, 50, 301)
    for arm in (1, 0):
        np.testing.assert_allclose(case.density(grid, v, arm),
                                   ccme.datasets.paper_simulation_density(grid, v, arm=arm), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_draw_columns_dims_and_propensity(name):
    case = CASES[name]
    data, formula = case.draw(_small_n(case), seed=3)
    assert formula == case.formula
    assert list(data.columns) == case.outcome_columns + ["a"] + case.x_columns
    assert set(case.v_columns) <= set(case.x_columns)
    assert len(case.x_columns) <= 50 and 1 <= len(case.v_columns) <= 25
    assert set(np.unique(data["a"])) == {0, 1}
    assert not data.isna().any().any()
    # The formula's parts name V and the rest of X (C(...) around categoricals; "." means the rest).
    lhs, _, rest = formula.partition("~")
    parts = [p.strip() for p in rest.split("|")]
    assert [t.strip() for t in lhs.split("+")] == case.outcome_columns and parts[0] == "a"
    strip = lambda t: t.strip().removeprefix("C(").removesuffix(")")  # noqa: E731
    assert [strip(t) for t in parts[1].split("+")] == case.v_columns
    if len(parts) == 3:
        outside = case.x_columns[len(case.v_columns):] if parts[2] == "." else [strip(t) for t in parts[2].split("+")]
        assert sorted(case.v_columns + outside) == sorted(case.x_columns)
    else:
        assert case.v_columns == case.x_columns
    # Propensity bounds by construction, and the weak-overlap cases reach near their bound.
    _, truth = case.simulate(case.n if case.n is None else 4000, 8)
    lo, hi = case.ps_range
    assert truth["ps"].between(lo, hi).all()
    if lo <= 0.03:
        assert truth["ps"].min() <= lo + 0.01 or truth["ps"].max() >= hi - 0.01
    # Observed outcome = the treated arm's potential outcome.
    y = truth.filter(like="y1").to_numpy()[:, 0] if case.dim_y == 1 else truth["y1_1"].to_numpy()
    y0 = truth.filter(like="y0").to_numpy()[:, 0] if case.dim_y == 1 else truth["y0_1"].to_numpy()
    observed, _ = case.simulate(case.n if case.n is None else 4000, 8)
    np.testing.assert_array_equal(observed[case.outcome_columns[0]], np.where(observed["a"] == 1, y, y0))


@pytest.mark.parametrize("name", NAMES)
def test_draw_reproducible_by_seed(name):
    case = CASES[name]
    n = _small_n(case)
    a, _ = case.draw(n, seed=7)
    b, _ = case.draw(n, seed=7)
    c, _ = case.draw(n, seed=8)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_fixed_design_keeps_v_and_redraws_the_rest():
    """``simulate(..., v_seed=s)``: the same V for every seed, and W, A and Y drawn anew (the diagnosis's fixed design)."""
    case = CASES["mixture_v3"]
    a, _ = case.simulate(300, 1, v_seed=5)
    b, _ = case.simulate(300, 2, v_seed=5)
    pd.testing.assert_frame_equal(a[case.v_columns], b[case.v_columns])
    assert not np.allclose(a["w1"], b["w1"]) and not np.allclose(a["y"], b["y"])
    pd.testing.assert_frame_equal(a[case.v_columns], case.sample_v(300, np.random.default_rng(5)))


@pytest.mark.parametrize("name", NAMES)
def test_eval_points_have_v_columns(name):
    case = CASES[name]
    v = case.eval_points(10, 1)
    assert list(v.columns) == case.v_columns
    if case.discrete_v:
        assert len(v) == len(v.drop_duplicates()) >= 2
    else:
        assert len(v) == 10
        pd.testing.assert_frame_equal(v, case.eval_points(10, 1))


@pytest.mark.parametrize("name", ["mixture_v3", "bivariate", "nhefs_sex"])
def test_metric_grid_holds_the_truth(name):
    """The runner's grid carries the whole exact mass; the ISE of the truth is 0; the KDE baseline is a density."""
    from benchmarks.accuracy.metrics import ise, normalise_2d, outcome_grid, weighted_kde

    case = CASES[name]
    data, truth = case.simulate(_small_n(case), 2)
    v = case.eval_points(5, 1).iloc[:5]
    grid = outcome_grid(case, data, v, size=400 if case.dim_y == 1 else 70)
    for arm in (1, 0):
        p = case.density(grid.points, v, arm)
        np.testing.assert_allclose(grid.integrate(p), 1.0, atol=1e-3 if case.dim_y == 2 else 1e-6)
        assert np.all(ise(p, p, grid) == 0.0)
        units = (data["a"] == arm).to_numpy()
        kde = weighted_kde(data.loc[units, case.outcome_columns].to_numpy(), 1.0 / truth["ps"].to_numpy()[units],
                           grid)
        assert abs(grid.integrate(kde[None, :])[0] - 1.0) < 1e-2
        if case.dim_y == 2:
            np.testing.assert_allclose(grid.integrate(normalise_2d(2.0 * p, grid)), 1.0, atol=1e-12)
