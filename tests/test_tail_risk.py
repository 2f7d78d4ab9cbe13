"""Tail-risk functionals: expected shortfall (CVaR), superquantiles, exceedance probabilities, and their effects.

Checked against closed forms (Gaussian and uniform expected shortfalls; the
tolerances are the trapezoid rule's O(h²) error on the grids used, measured
at 3.6e-6 for the Gaussian on 4001 points) and against a plain twin that
integrates the quantile function, (1/α) ∫₀^α Q(u) du, instead of the
Rockafellar–Uryasev form the package uses.
"""

import warnings

import numpy as np
import pytest
from scipy.stats import norm

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.embedding import invert_cdf, tail_means
from ccme.errors import ParameterError


@pytest.fixture(scope="module")
def res():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit("y ~ a | x1 | x2", paper_simulation(600, seed=3), tune="none", propensity="forest", seed=3)


def test_tail_means_match_closed_forms():
    grid = np.linspace(-8, 8, 4001)
    alpha = np.array([0.01, 0.05, 0.1, 0.5])
    gauss = norm.cdf(grid)[None]
    np.testing.assert_allclose(tail_means(gauss, grid, alpha, "lower")[0], -norm.pdf(norm.ppf(alpha)) / alpha,
                               atol=1e-5)
    np.testing.assert_allclose(tail_means(gauss, grid, alpha, "upper")[0], norm.pdf(norm.ppf(1 - alpha)) / alpha,
                               atol=1e-5)
    uniform = np.clip((grid + 1) / 2, 0, 1)[None]  # U(−1, 1): ES⁻(α) = −1 + α, ES⁺(α) = 1 − α
    np.testing.assert_allclose(tail_means(uniform, grid, alpha, "lower")[0], -1 + alpha, atol=1e-9)
    np.testing.assert_allclose(tail_means(uniform, grid, alpha, "upper")[0], 1 - alpha, atol=1e-9)
    with pytest.raises(ParameterError, match="tail"):
        tail_means(gauss, grid, alpha, "middle")


def _twin_invert_cdf(F, grid, q):
    """invert_cdf one row at a time with np.searchsorted (the loop it replaced)."""
    out = np.empty((len(F), len(q)))
    for i, row in enumerate(F):
        k = np.clip(np.searchsorted(row, q, side="left"), 1, len(grid) - 1)
        lo, hi = row[k - 1], row[k]
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.clip(np.where(hi > lo, (q - lo) / (hi - lo), 1.0), 0.0, 1.0)
        out[i] = grid[k - 1] + t * (grid[k] - grid[k - 1])
        out[i, q <= row[0]] = grid[0]
    return out


def test_invert_cdf_equals_a_row_by_row_searchsorted(monkeypatch):
    """Rows with ties, flat stretches, mass below and above the grid; levels on grid values, at F(grid[0]) and
    beyond F(grid[-1]); in one block and in blocks of 3 rows: the same numbers to the last bit."""
    from ccme import embedding

    rng = np.random.default_rng(4)
    grid = np.linspace(-3, 3, 41)
    steps = rng.exponential(size=(50, 41)) * (rng.uniform(size=(50, 41)) < 0.6)   # 40% flat steps
    F = np.cumsum(steps, axis=1)
    F = 0.1 * rng.uniform(size=(50, 1)) + 0.85 * F / F[:, -1:]
    q = np.concatenate([[0.01, 0.5, 0.97, 0.999], F[0, [0, 7, 20]], rng.uniform(size=5)])
    want = _twin_invert_cdf(F, grid, q)
    np.testing.assert_array_equal(invert_cdf(F, grid, q), want)
    monkeypatch.setattr(embedding, "_INVERT_BLOCK", 3 * 41 * len(q))
    np.testing.assert_array_equal(invert_cdf(F.reshape(5, 10, 41), grid, q), want.reshape(5, 10, len(q)))


def _twin_expected_shortfall(F, grid, alpha, tail):
    """(1/α) ∫ Q(u) du over the tail, by the midpoint rule on 20000 levels of the quantile function."""
    out = np.empty((len(F), len(alpha)))
    for j, a in enumerate(alpha):
        u = (np.arange(20000) + 0.5) / 20000 * a
        levels = u if tail == "lower" else 1 - u
        out[:, j] = invert_cdf(F, grid, levels).mean(axis=1)
    return out


@pytest.mark.parametrize("tail", ["lower", "upper"])
def test_expected_shortfall_matches_quantile_integral(res, tail):
    emb = res.embedding(1)
    grid = res.fine_grid()
    alpha = np.array([0.05, 0.1, 0.25])
    got = emb.expected_shortfall(alpha, v=PAPER_PROFILES, tail=tail, grid=grid)
    F = emb.cdf(grid[:, None], v=PAPER_PROFILES, normalize=True)
    np.testing.assert_allclose(got, _twin_expected_shortfall(F, grid, alpha, tail), rtol=0, atol=2e-3)
    q = emb.quantile(alpha if tail == "lower" else 1 - alpha, v=PAPER_PROFILES, grid=grid)
    assert np.all(got <= q + 1e-12) if tail == "lower" else np.all(got >= q - 1e-12)


def test_whole_distribution_shortfall_is_the_mean_and_superquantile_is_upper_shortfall(res):
    # α → 1: the mean of the normalised distribution (the one the functionals read), ∫ y dF = grid_end − ∫ F dy;
    # res.mean reads the raw signed weights instead and may differ where the raw CDF dips.
    grid = res.fine_grid()
    F = res.embedding(1).cdf(grid[:, None], v=PAPER_PROFILES, normalize=True)
    mean = grid[-1] - np.trapezoid(F, grid, axis=1)
    np.testing.assert_allclose(res.expected_shortfall(0.99999, newdata=PAPER_PROFILES), mean, rtol=1e-4)
    np.testing.assert_allclose(res.superquantile([0.8, 0.9], newdata=PAPER_PROFILES),
                               res.expected_shortfall([0.2, 0.1], newdata=PAPER_PROFILES, tail="upper"), rtol=1e-12)
    exceed = res.exceedance([0.0, 10.0], newdata=PAPER_PROFILES, arm=0)
    np.testing.assert_allclose(exceed, 1 - res.cdf([0.0, 10.0], newdata=PAPER_PROFILES, arm=0), rtol=1e-12)
    assert res.exceedance(5.0, newdata=PAPER_PROFILES).shape == (2,)


def test_effect_reports_expected_shortfall_differences(res):
    table = res.effect(newdata=PAPER_PROFILES, alpha=[0.1, 0.2], n_boot=99, seed=1)
    for tail in ("lower", "upper"):
        rows = table[table["term"] == f"es_{tail}"]
        assert list(rows["at"]) == [0.1, 0.2, 0.1, 0.2]
        want = (res.expected_shortfall([0.1, 0.2], newdata=PAPER_PROFILES, arm=1, tail=tail)
                - res.expected_shortfall([0.1, 0.2], newdata=PAPER_PROFILES, arm=0, tail=tail))
        np.testing.assert_allclose(rows["estimate"].to_numpy(), want.ravel(), rtol=1e-9)
        assert np.all(rows["conf_low"] < rows["conf_high"])
        assert np.all(rows["std_error"] > 0)
    assert "es_lower" not in set(res.effect(newdata=PAPER_PROFILES, alpha=[], n_boot=0)["term"])


def test_tail_risk_bad_input(res):
    with pytest.raises(ParameterError, match="alpha"):
        res.expected_shortfall(1.5, newdata=PAPER_PROFILES)
    with pytest.raises(ParameterError, match="tail"):
        res.expected_shortfall(0.1, newdata=PAPER_PROFILES, tail="left")
    with pytest.raises(ParameterError, match="alpha"):
        res.effect(newdata=PAPER_PROFILES, alpha=[0.0], n_boot=0)
    with pytest.raises(ParameterError, match="`p`"):
        res.superquantile(1.0, newdata=PAPER_PROFILES)
