"""Built-in data: the paper simulation's exact density, IHDP surface B, the real data loaders."""

import numpy as np
import pytest

import ccme
from ccme.datasets import (
    IHDP_BINARY, IHDP_CONTINUOUS, PAPER_PROFILES, ihdp_density, ihdp_surface_b, load_ihdp_covariates, load_nhefs, load_nsw,
    paper_simulation, paper_simulation_density,
)


def test_paper_density_integrates_to_one_and_matches_monte_carlo():
    y = np.linspace(-30, 70, 4001)
    for arm in (1, 0):
        dens = paper_simulation_density(y, PAPER_PROFILES, arm=arm)
        np.testing.assert_allclose(np.trapezoid(dens, y, axis=1), 1.0, rtol=1e-9)
    # Monte Carlo: draw X6..X10 and the noise given V = v1 with the simulation's own code path.
    data, truth = paper_simulation(200_000, seed=4, truth=True)
    near = np.all(np.abs(data[["x1", "x2", "x3", "x4", "x5"]].to_numpy() - 1.0) < 0.35, axis=1)
    sample = truth.loc[near, "y1"].to_numpy()
    # Compare the mean of Y^1 near v = 1 with the exact density's mean at v = 1.
    exact = paper_simulation_density(y, np.ones(5), arm=1)
    exact_mean = np.trapezoid(exact * y, y)
    assert sample.mean() == pytest.approx(exact_mean, abs=0.25)  # MC error: sd 8 / sqrt(~1300) plus the window


def test_paper_simulation_columns_and_confounding():
    data, truth = paper_simulation(5000, seed=1, truth=True)
    # The observed columns only, so that `.` in a formula cannot pick up a truth.
    assert list(data.columns) == ["y", "a"] + [f"x{j}" for j in range(1, 11)]
    assert list(truth.columns) == ["y0", "y1", "ps"] and truth.index.equals(data.index)
    assert paper_simulation(5000, seed=1).equals(data)  # same draws with or without the truth
    np.testing.assert_array_equal(data["y"], np.where(data["a"] == 1, truth["y1"], truth["y0"]))
    assert set(np.unique(truth["ps"])) == {0.1, 0.9}
    with pytest.raises(ccme.ParameterError):
        paper_simulation(0)
    with pytest.raises(ccme.ParameterError, match="`truth`"):
        paper_simulation(10, truth="yes")


def test_ihdp_surface_b():
    frame, truth = ihdp_surface_b(seed=3, truth=True)
    assert len(frame) == 747
    assert list(frame.columns) == ["y", "treat"] + list(IHDP_CONTINUOUS) + list(IHDP_BINARY)
    assert list(truth.columns) == ["mu0", "mu1", "y0", "y1"] and {"beta", "omega"} <= set(truth.attrs)
    np.testing.assert_array_equal(frame["y"], np.where(frame["treat"] == 1, truth["y1"], truth["y0"]))
    treated = frame["treat"] == 1
    # Response surface B: the average effect on the treated is exactly 4 (in the conditional means).
    assert (truth.loc[treated, "mu1"] - truth.loc[treated, "mu0"]).mean() == pytest.approx(4.0, abs=1e-12)
    np.testing.assert_allclose(frame[["bw", "momage"]].mean(), 0.0, atol=1e-12)
    dens = ihdp_density(np.linspace(-10, 20, 3001), truth.iloc[:3], arm=1)
    np.testing.assert_allclose(np.trapezoid(dens, np.linspace(-10, 20, 3001), axis=1), 1.0, rtol=1e-6)
    assert ihdp_surface_b(seed=3).equals(frame)
    with pytest.raises(ccme.ParameterError, match="mu0 and mu1"):
        ihdp_density([0.0], frame, arm=1)  # the observed frame holds no truth


def test_real_data_loaders():
    nsw = load_nsw()
    assert nsw.shape == (445, 10) and set(nsw["treat"]) == {0, 1}
    assert (nsw["re78"] == 0).mean() == pytest.approx(0.308, abs=0.001)
    nhefs = load_nhefs()
    assert nhefs.shape == (1566, 67) and {"qsmk", "wt82_71"} <= set(nhefs.columns)
    assert len(load_ihdp_covariates()) == 747 and len(load_ihdp_covariates(hill=False)) == 985
