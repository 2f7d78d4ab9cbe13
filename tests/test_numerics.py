"""Numerical edge cases, each with its documented rule.

- duplicated rows and a numerically singular Gram matrix: the Cholesky jitter
  rule of ``ccme._backend`` (retry with 1e-10 … 1e-4 × mean(diag + shift)),
  reported in the summary;
- constant columns: the median heuristic gives them an infinite bandwidth
  (ignored, with a DataWarning); all-constant X or V, or a constant outcome,
  is a ParameterError that names the matrix;
- outcome scales 1e-6 … 1e6: every outcome quantity is scale-equivariant
  (Silverman's rule, the tuning factors, the grids), so no internal
  standardisation is needed; checked on the default (tuned) path;
- too few units for the folds: DataError.
"""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import DataError, ParameterError, _backend
from ccme.kernels import median_bandwidth

F = "y ~ a | x1 + x2 | x3"


@pytest.fixture(scope="module")
def data():
    return pd.concat(ccme.datasets.paper_simulation(60, seed=5, truth=True), axis=1)  # with the true `ps`


def _scores(data):
    return np.clip(data["ps"].to_numpy(), 0.05, 0.95)


def test_duplicated_rows_fit_and_the_default_needs_no_jitter(data):
    tripled = pd.concat([data, data, data], ignore_index=True)
    res = ccme.fit(F, tripled, seed=1, tune="none", propensity=_scores(tripled))
    grid = res.default_grid()
    dens = res.density(grid, newdata=res.profiles())
    assert np.isfinite(dens).all()
    np.testing.assert_allclose(np.trapezoid(dens, grid, axis=1), 1.0, rtol=1e-10)
    jitters = [v for p in res.embedding(1).parts + res.embedding(0).parts for v in p.jitter.values()]
    assert max(jitters) == 0.0  # K + nλI with λ = 0.01 is well conditioned
    assert "Cholesky jitter" not in str(res.summary())


def test_singular_gram_gets_jitter_by_the_rule_and_the_summary_says_so(data):
    """λ = 1e-20 with every row tripled: K + nλI is singular in floating point, the factor needs jitter."""
    tripled = pd.concat([data, data, data], ignore_index=True)
    res = ccme.fit(F, tripled, seed=1, tune="none", lam=1e-20, propensity=_scores(tripled))
    grid = res.default_grid()
    dens = res.density(grid, newdata=res.profiles())
    assert np.isfinite(dens).all()
    np.testing.assert_allclose(np.trapezoid(dens, grid, axis=1), 1.0, rtol=1e-10)
    jitters = [v for p in res.embedding(1).parts + res.embedding(0).parts for v in p.jitter.values()]
    # Gaussian kernel: diag = 1, shift = nλ ≈ 0, so the jitter is a power of ten in [1e-10, 1e-4].
    assert max(jitters) > 0
    for j in jitters:
        assert j == 0 or any(j == pytest.approx(10.0**-k, rel=1e-9) for k in range(4, 11))
    assert re.search(rf"Cholesky jitter\s+up to {max(jitters):.3g} added", str(res.summary()))


def test_jittered_factor_is_the_factor_of_the_shifted_matrix():
    """The rule in numbers: L Lᵀ = K + (shift + jitter) I for duplicated points and a shift below rounding."""
    rng = np.random.default_rng(0)
    X = np.repeat(rng.normal(size=(15, 2)), 3, axis=0)
    bw = np.array([0.7, 1.3])
    L, jitter = _backend.kernel_ridge_factor(X, "gaussian", bw, 1e-20)
    assert jitter > 0
    K = _backend.gram(X, X, "gaussian", bw)
    np.testing.assert_allclose(L @ L.T, K + (1e-20 + jitter) * np.eye(len(X)), atol=1e-13)


def test_constant_columns_are_ignored_with_a_warning(data):
    """A constant column gets bandwidth inf: the fit equals the fit without it."""
    with_constant = data.assign(c=3.0)
    # c is in V and so in X: both kernels say so
    with pytest.warns(ccme.DataWarning, match=r"1 constant column\(s\) ignored by the kernel \(v_bandwidth"), \
            pytest.warns(ccme.DataWarning, match=r"1 constant column\(s\) ignored by the kernel \(x_bandwidth"):
        res = ccme.fit("y ~ a | x1 + x2 + c | x3", with_constant, seed=1, tune="none", propensity=_scores(data))
    assert np.isinf(res.kernels["v"].bandwidth_array[2]) and np.isinf(res.kernels["x"].bandwidth_array[2])
    plain = ccme.fit(F, data, seed=1, tune="none", propensity=_scores(data))
    grid = np.linspace(-5, 25, 30)
    np.testing.assert_allclose(res.density(grid, newdata=with_constant.iloc[:4], normalize=False),
                               plain.density(grid, newdata=data.iloc[:4], normalize=False), rtol=1e-12, atol=1e-15)
    with pytest.warns(ccme.DataWarning, match=r"x_bandwidth"):  # a constant confounder: X only
        ccme.fit("y ~ a | x1 + x2 | x3 + c", with_constant, seed=1, tune="none", propensity=_scores(data))


def test_all_constant_v_or_x_is_a_clear_error(data):
    const = data.assign(c=1.0, k=-2.0)
    with pytest.raises(ParameterError, match=r"v_bandwidth by the median heuristic: every column of V "
                                             r"\(the conditioning variables\) is constant"), \
            pytest.warns(ccme.DataWarning, match=r"2 constant column\(s\) ignored by the kernel \(x_bandwidth"):
        ccme.fit("y ~ a | c + k | x1", const, seed=1)
    with pytest.raises(ParameterError, match=r"every column of X .* is constant.*pass x_bandwidth=<number>"):
        ccme.fit("y ~ a | c + k", const, seed=1)
    with pytest.raises(ParameterError, match="outcome is constant; pass y_bandwidth="):
        ccme.fit(F, data.assign(y=4.0), seed=1)
    # With a bandwidth given, a constant V is the marginal p(Y^a): the fit works.
    with pytest.warns(ccme.DataWarning, match=r"1 constant column\(s\) ignored by the kernel \(x_bandwidth"):
        res = ccme.fit("y ~ a | c | x1", const, seed=1, tune="none", v_bandwidth=1.0, propensity=_scores(data))
    np.testing.assert_allclose(res.mean(newdata=const.iloc[:3]), res.mean(newdata=const.iloc[:1]).repeat(3), rtol=1e-12)


def test_median_heuristic_ignores_row_order_with_ties():
    """Regression: ‖a‖² + ‖b‖² − 2a·b left order-dependent noise instead of 0 between duplicated rows."""
    rng = np.random.default_rng(1)
    Z = rng.integers(0, 3, size=(40, 2)).astype(float)
    expected = median_bandwidth(Z)
    for seed in range(5):
        np.testing.assert_allclose(median_bandwidth(Z[np.random.default_rng(seed).permutation(40)]), expected,
                                   rtol=1e-14)


@pytest.mark.parametrize("c", [1e-6, 1e6])
def test_extreme_outcome_scales_on_the_tuned_default_path(data, c):
    """At 1e-6 and 1e6 the density is finite, integrates to one, and is the rescaled unit-scale density."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        res = ccme.fit(F, data, seed=2, propensity=_scores(data))
        scaled = ccme.fit(F, data.assign(y=c * data["y"]), seed=2, propensity=_scores(data))
    assert scaled.tuning.chosen["y_bandwidth"] == pytest.approx({a: c * v for a, v in res.tuning.chosen["y_bandwidth"].items()},
                                                                rel=1e-9)
    assert scaled.penalties == res.penalties
    grid = scaled.default_grid()
    np.testing.assert_allclose(grid, c * res.default_grid(), rtol=1e-12, atol=1e-12 * c)
    for arm in (1, 0):
        dens = scaled.density(grid, newdata=data.iloc[:3], arm=arm)
        assert np.isfinite(dens).all()
        np.testing.assert_allclose(np.trapezoid(dens, grid, axis=1), 1.0, rtol=1e-10)
        base = res.density(grid / c, newdata=data.iloc[:3], arm=arm)
        np.testing.assert_allclose(c * dens, base, rtol=1e-8, atol=1e-10 * base.max())
        np.testing.assert_allclose(scaled.quantile([0.1, 0.5, 0.9], newdata=data.iloc[:3], arm=arm),
                                   c * res.quantile([0.1, 0.5, 0.9], newdata=data.iloc[:3], arm=arm), rtol=1e-8)
        np.testing.assert_allclose(scaled.sd(newdata=data.iloc[:3], arm=arm), c * res.sd(newdata=data.iloc[:3], arm=arm), rtol=1e-8)


def test_too_few_units_for_the_folds(data):
    with pytest.raises(DataError, match=r"`folds`=11 is more than the number of units \(10\)"):
        ccme.fit(F, data.iloc[:10], folds=11, seed=1)
    small = data.iloc[:14].assign(a=[1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    with pytest.raises(DataError, match=r"fold \d has [01] treated unit\(s\) for the one-step regression; "
                                        "use fewer folds or more data"):
        ccme.fit(F, small, folds=5, seed=1, mode="onestep")
    with pytest.raises(DataError, match="the treated arm has 4 unit"):
        ccme.fit(F, small.assign(a=[0] + [1] * 4 + [0] * 9), seed=1)
