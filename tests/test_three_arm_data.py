"""The three-arm simulation: its exact density, the Monte Carlo check of the closed forms, overlap, bad inputs."""

import doctest
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import cumulative_trapezoid
from scipy.stats import norm

import ccme
import ccme.datasets.three_arm
from ccme.datasets import (
    THREE_ARM_LEVELS, THREE_ARM_PROFILES, three_arm_density, three_arm_ise, three_arm_simulation,
)
from ccme.datasets.three_arm import _conditional_draw

GRID = np.linspace(-25.0, 30.0, 5501)  # every arm's mass at the profiles lies well inside
# The profiles plus two far-out V-points, where the low arm's spread and the high arm's mode weight are extreme.
V_POINTS = np.vstack([THREE_ARM_PROFILES.to_numpy(), [[3.0, -3.0], [-3.0, 3.0]]])


def _ks(sample, cdf_on_grid):
    """Kolmogorov-Smirnov distance between the sample's empirical CDF and a CDF tabulated on GRID."""
    s = np.sort(sample)
    F = np.interp(s, GRID, cdf_on_grid)
    n = len(s)
    return max(np.max(np.arange(1, n + 1) / n - F), np.max(F - np.arange(n) / n))


@pytest.mark.parametrize("arm", THREE_ARM_LEVELS)
def test_density_integrates_to_one(arm):
    dens = three_arm_density(GRID, V_POINTS, arm)
    assert dens.shape == (len(V_POINTS), len(GRID)) and np.all(dens >= 0)
    # Measured: |∫ − 1| ≤ 2.3e-16 on this grid for every arm and point.
    np.testing.assert_allclose(np.trapezoid(dens, GRID, axis=1), 1.0, rtol=1e-9)


def test_density_matches_monte_carlo_given_v():
    # Draw the confounders and the noise given V = v with the simulator's own code
    # (_conditional_draw shares _covariates and _potential_outcomes with
    # three_arm_simulation), then compare with the integrated exact density: this
    # checks that X3..X5 were integrated out right, not just the normal pdf.
    # Measured KS with n = 100 000: at most 0.0039 at these seeds, at most 0.0056
    # over 20 seeds x 9 (profile, arm) pairs; Kolmogorov's 0.9999 quantile is
    # 2.23 / sqrt(n) = 0.0071, so 0.008 leaves room for the grid interpolation.
    n, tol = 100_000, 0.008
    for i, v in enumerate(THREE_ARM_PROFILES.to_numpy()):
        draws = _conditional_draw(v, n, seed=100 + i)
        for k, arm in enumerate(THREE_ARM_LEVELS):
            cdf = cumulative_trapezoid(three_arm_density(GRID, v, arm), GRID, initial=0.0)
            assert _ks(draws[:, k], cdf) < tol, (THREE_ARM_PROFILES.index[i], arm)
    # The check can tell a closed form that forgets the confounders (at v3,
    # measured KS 0.22, 0.069 and 0.067 with these draws): far above tol.
    v = THREE_ARM_PROFILES.loc["v3"].to_numpy()
    draws = _conditional_draw(v, n, seed=102)
    mu = 0.8 * v[0] - 0.4 * v[1]
    without_spread = {
        0: norm.cdf(GRID, mu, 0.5),
        1: norm.cdf(GRID, mu + 1.0, 0.7 * np.sqrt(1.0 + v[0] ** 2)),
    }
    for k, cdf in without_spread.items():
        assert _ks(draws[:, k], cdf) > 5 * tol
    w_given_x3_zero = norm.cdf(-0.4 + v[1])  # the mode weight without integrating X3 out
    sd = np.sqrt(0.5**2 + 0.8**2)
    cdf = (1 - w_given_x3_zero) * norm.cdf(GRID, mu + 1.5, sd) + w_given_x3_zero * norm.cdf(GRID, mu + 4.5, sd)
    assert _ks(draws[:, 2], cdf) > 5 * tol


def test_density_shapes_and_closed_form():
    y = np.linspace(-5.0, 5.0, 11)
    single = three_arm_density(y, [0.5, -1.0], "placebo")
    assert single.shape == (11,)
    # Y^placebo | v ~ N(0.8 v1 - 0.4 v2, 0.5² + 0.8² + 0.8² + 0.4²).
    np.testing.assert_allclose(single, norm.pdf(y, 0.8, 1.3), rtol=1e-12)
    from_frame = three_arm_density(y, THREE_ARM_PROFILES.assign(other=1.0), "low")
    np.testing.assert_array_equal(from_frame, three_arm_density(y, THREE_ARM_PROFILES.to_numpy(), "low"))


def test_simulation_columns_truth_and_overlap():
    data, truth = three_arm_simulation(200_000, seed=0, truth=True)
    assert list(data.columns) == ["y", "a", "x1", "x2", "x3", "x4", "x5"]
    assert isinstance(data["a"].dtype, pd.CategoricalDtype) and data["a"].cat.ordered
    assert list(data["a"].cat.categories) == list(THREE_ARM_LEVELS)
    assert list(truth.columns) == ["y_placebo", "y_low", "y_high", "p_placebo", "p_low", "p_high"]
    assert truth.index.equals(data.index)
    observed = truth[["y_placebo", "y_low", "y_high"]].to_numpy()[np.arange(len(data)), data["a"].cat.codes]
    np.testing.assert_array_equal(data["y"], observed)

    P = truth[["p_placebo", "p_low", "p_high"]].to_numpy()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    # Measured at this seed: 99.899 % of the units have all three in [0.1, 0.8]; range 0.043 .. 0.801.
    assert np.mean(np.all((P >= 0.1) & (P <= 0.8), axis=1)) > 0.998
    assert P.min() > 0.03 and P.max() < 0.85
    # Measured shares 0.3225, 0.3456, 0.3320 (sampling sd about 0.001).
    shares = data["a"].value_counts(normalize=True)
    assert all(0.30 < shares[arm] < 0.37 for arm in THREE_ARM_LEVELS)

    # The confounders bias the arm-wise regression on V alone: intercept bias
    # measured 0.209, 0.288, 0.267 (MC sd about 0.01), so adjustment is needed.
    Z = np.column_stack([np.ones(len(data)), data[["x1", "x2"]].to_numpy()])
    for arm in THREE_ARM_LEVELS:
        in_arm = (data["a"] == arm).to_numpy()
        naive = np.linalg.lstsq(Z[in_arm], data["y"].to_numpy()[in_arm], rcond=None)[0]
        target = np.linalg.lstsq(Z, truth[f"y_{arm}"].to_numpy(), rcond=None)[0]
        assert naive[0] - target[0] > 0.15, arm


def test_seed_reproducibility():
    data = three_arm_simulation(300, seed=7)
    assert three_arm_simulation(300, seed=7).equals(data)
    assert three_arm_simulation(300, seed=7, truth=True)[0].equals(data)  # same draws with or without the truth
    assert three_arm_simulation(300, seed=np.random.default_rng(7)).equals(data)
    assert not three_arm_simulation(300, seed=8).equals(data)


def test_bad_inputs():
    for n in (0, -3, 2.5, True):
        with pytest.raises(ccme.ParameterError, match="`n`"):
            three_arm_simulation(n)
    with pytest.raises(ccme.ParameterError, match="`truth`"):
        three_arm_simulation(10, truth="yes")
    for arm in ("medium", 1, None):
        with pytest.raises(ccme.ParameterError, match="'placebo', 'low', 'high'"):
            three_arm_density([0.0], [0.0, 0.0], arm)
    with pytest.raises(ccme.ParameterError, match="2 columns"):
        three_arm_density([0.0], np.zeros((2, 3)), "low")
    with pytest.raises(ccme.ParameterError, match="x2"):
        three_arm_density([0.0], THREE_ARM_PROFILES[["x1"]], "low")
    with pytest.raises(ccme.ParameterError, match="finite"):
        three_arm_density([0.0], [np.nan, 0.0], "low")


def _stub_fit(v_variables=("x1", "x2"), shift=0.0):
    """What three_arm_ise reads of a fit: the design's V and outcomes, and density(); here the truth, shifted."""
    def density(y, *, newdata, arm):
        return three_arm_density(np.asarray(y) - shift, newdata, arm)

    return SimpleNamespace(design=SimpleNamespace(v_variables=v_variables, Y=np.array([-8.0, 12.0])), density=density)


def test_ise_scores_against_the_truth():
    # The stub reads the closed form from a DataFrame, the scorer from an array: their memory layouts differ, and
    # numpy 2.4's vectorised exp rounds them apart in the last bit (1e-33 here), so zero up to rounding.
    assert three_arm_ise(_stub_fit(), arm="high", n_test=40) == pytest.approx(0.0, abs=1e-25)
    assert three_arm_ise(_stub_fit(shift=0.5), arm="low", n_test=40) > 1e-3  # measured 0.0116
    with pytest.raises(ccme.ParameterError, match="x1 \\+ x2"):
        three_arm_ise(_stub_fit(v_variables=("x1",)), arm="high")
    with pytest.raises(ccme.ParameterError, match="`arm`"):
        three_arm_ise(_stub_fit(), arm="medium")


def test_examples_run():
    # tests/test_docstrings.py runs the other datasets modules' examples; this one's here.
    result = doctest.testmod(ccme.datasets.three_arm, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
