"""The fitted ridge CCME equals the paper's closed forms, computed naively (all four modes)."""

import numpy as np
import pandas as pd
import pytest

import ccme
import naive_ccme as naive

MODES = ["dr", "ipw", "pi", "onestep"]


@pytest.fixture(scope="module")
def small():
    data, truth = ccme.datasets.paper_simulation(160, seed=3, truth=True)
    scores = np.clip(truth["ps"].to_numpy() + 0.05, 0.01, 0.99)  # known propensities, off the truth on purpose
    newdata = pd.DataFrame(np.random.default_rng(0).normal(1, 1, (7, 5)), columns=[f"x{j}" for j in range(1, 6)])
    grid = np.linspace(data["y"].min() - 3, data["y"].max() + 3, 61)
    return data, scores, newdata, grid


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folds", [2, 3])
def test_density_equals_paper_formula(small, mode, folds):
    data, scores, newdata, grid = small
    res = ccme.fit(
        "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7", data, mode=mode, folds=folds, propensity=scores, seed=5,
        lam0=0.02, lam1=0.05,
    )
    V = newdata.to_numpy()
    for arm in (1, 0):
        expected = naive.density(res, grid[:, None], V, arm, scores)
        got = res.density(grid, newdata=newdata, arm=arm, normalize=False)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())
        np.testing.assert_allclose(
            res.cdf(grid, newdata=newdata, arm=arm, normalize=False), naive.cdf(res, grid[:, None], V, arm, scores),
            rtol=1e-9, atol=1e-12,
        )
        mass, mean, second = naive.moments(res, V, arm, scores)
        np.testing.assert_allclose(res.mean(newdata=newdata, arm=arm), mean, rtol=1e-9)
        var = second + res.outcome_kernel(arm).bandwidth_array[0] ** 2 - mean**2
        if np.any(var < 0):  # signed weights: a negative variance is reported as NaN, with the warning that says so
            with pytest.warns(ccme.CcmeWarning, match="variance is negative"):
                got = res.var(newdata=newdata, arm=arm)
        else:
            got = res.var(newdata=newdata, arm=arm)
        np.testing.assert_allclose(got, np.where(var < 0, np.nan, var), rtol=1e-8)


@pytest.mark.parametrize("folds", [2, 3])
def test_split_doubly_robust_equals_its_closed_form(small, folds):
    """λ₁ᵖ ≠ λ₁: c(v) = [ω∘β(v; λ₁); B(β(v; λ₁ᵖ) − ω∘β(v; λ₁))], the plug-in part smoothed at its own penalty."""
    data, scores, newdata, grid = small
    kwargs = dict(mode="dr", folds=folds, propensity=scores, seed=5, lam0=0.02, lam1=0.05)
    res = ccme.fit("y ~ a | x1 + x2 + x3 | x6 + x7", data, lam1_plugin={1: 0.002, 0: 0.01}, **kwargs)
    one = ccme.fit("y ~ a | x1 + x2 + x3 | x6 + x7", data, **kwargs)
    assert all(type(p).__name__ == "SplitSecondStage" for p in res.embedding(1).parts)
    V = newdata[["x1", "x2", "x3"]].to_numpy()
    for arm in (1, 0):
        expected = naive.density(res, grid[:, None], V, arm, scores)
        got = res.density(grid, newdata=newdata, arm=arm, normalize=False)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())
        # the split changes the estimate, and with λ₁ᵖ = λ₁ it is the one regression
        assert np.abs(got - one.density(grid, newdata=newdata, arm=arm, normalize=False)).max() > 1e-4
    same = ccme.fit("y ~ a | x1 + x2 + x3 | x6 + x7", data, lam1_plugin=0.05, **kwargs)
    assert type(same.embedding(1).parts[0]).__name__ == "RidgeFoldArm"
    np.testing.assert_array_equal(same.density(grid, newdata=newdata, arm=1), one.density(grid, newdata=newdata, arm=1))


def test_training_data_is_default_newdata(small):
    data, scores, _, grid = small
    res = ccme.fit("y ~ a | x1 + x2 | x3", data, propensity=scores, seed=1)
    dens = res.density(grid, arm=0)
    assert dens.shape == (len(data), len(grid))
    np.testing.assert_allclose(dens[:4], res.density(grid, newdata=data.iloc[:4], arm=0))


def test_normalized_density_integrates_to_one(small):
    data, scores, newdata, grid = small
    res = ccme.fit("y ~ a | x1 + x2 + x3 + x4 + x5 | x6", data, propensity=scores, seed=2)
    dens = res.density(grid, newdata=newdata, arm=1)
    assert np.all(dens >= 0)
    np.testing.assert_allclose(np.trapezoid(dens, grid, axis=1), 1.0, rtol=1e-12)
    cdf = res.cdf(grid, newdata=newdata, arm=1)
    assert np.all(np.diff(cdf, axis=1) >= 0) and cdf.min() >= 0 and cdf.max() <= 1


def test_laplace_outcome_kernel_cdf_matches_density(small):
    data, scores, newdata, _ = small
    res = ccme.fit("y ~ a | x1 + x2 | x3", data, propensity=scores, seed=2, y_kernel="laplace", kernel="matern52",
                   y_bandwidth=2.0)
    fine = np.linspace(data["y"].min() - 40, data["y"].max() + 40, 20001)
    dens = res.density(fine, newdata=newdata, arm=1, normalize=False)
    cdf = res.cdf(fine[[-1]], newdata=newdata, arm=1, normalize=False)[:, 0]
    # The raw CDF at +∞ is the total mass, the integral of the raw density.
    np.testing.assert_allclose(np.trapezoid(dens, fine, axis=1), cdf, rtol=1e-6)


def test_multivariate_outcome(small):
    data, scores, newdata, _ = small
    data = data.assign(y2=data["y"] * 0.5 + data["x7"])
    res = ccme.fit("y + y2 ~ a | x1 + x2 | x3", data, propensity=scores, seed=4)
    pts = np.column_stack([np.linspace(0, 20, 5), np.linspace(0, 10, 5)])
    dens = res.density(pts, newdata=newdata, arm=1, normalize=False)
    assert dens.shape == (len(newdata), 5)
    assert res.mean(newdata=newdata, arm=1).shape == (len(newdata), 2)


def test_no_mass_on_the_grid_is_nan_with_a_warning(small):
    data, scores, newdata, _ = small
    res = ccme.fit("y ~ a | x1 + x2 | x3", data, propensity=scores, seed=2, tune="none")
    far = np.linspace(1e4, 1e4 + 10, 50)  # far beyond every outcome: the density is 0 there
    with pytest.warns(ccme.CcmeWarning, match="no positive mass"):
        dens = res.density(far, newdata=newdata.iloc[:2], arm=1)
    assert np.isnan(dens).all()
