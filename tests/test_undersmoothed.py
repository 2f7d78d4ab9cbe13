"""The second stage refitted with narrower V bandwidths and a smaller λ₁ (LinearSecondStage.undersmoothed).

The simultaneous bands are computed from it (:func:`ccme.bootstrap.bands`).
Each implementation is checked against a numpy twin of kernel ridge
regression with the narrowed kernel (exact and forest first stages), the
low-rank path at full rank against the exact one, and a second stage without
a V kernel (Deep Feature) declines, so its bands keep one construction.
"""

import warnings

import numpy as np
import pytest

import ccme
import twins
from ccme.bootstrap import SIMULTANEOUS_PENALTY, simultaneous_v_factor
from ccme.datasets import PAPER_PROFILES
from ccme.errors import ParameterError
from ccme.estimators.base import linear_terms
from ccme.kernels import Kernel

FORMULA = "y ~ a | x1 + x2 | x3 + x4"


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=2, tune="none", **kwargs)


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(300, seed=5)


def _twin_beta(V1, V_eval, kernel, shift):
    K = twins.gram(V1, V1, kernel.name, kernel.bandwidth_array)
    return np.linalg.solve(K + shift * np.eye(len(K)), twins.gram(V1, V_eval, kernel.name, kernel.bandwidth_array))


@pytest.mark.parametrize("first_stage", ["kernel", "forest"])
def test_exact_refit_matches_kernel_ridge_with_the_narrowed_kernel(data, first_stage):
    res = _fit(data, first_stage=first_stage)
    V_eval = res._v(PAPER_PROFILES)
    for part in res.embedding(1).parts:
        narrowed = part.undersmoothed(0.5, 0.2, res.design.V[part.units])
        assert narrowed.v_kernel.bandwidth == tuple(0.5 * b for b in part.v_kernel.bandwidth_array)
        assert part.jitter["V"] == 0.0 and narrowed.shift == pytest.approx(0.2 * part.shift)
        np.testing.assert_allclose(narrowed.beta(V_eval), _twin_beta(part.V1, V_eval, narrowed.v_kernel,
                                                                      narrowed.shift), rtol=1e-7, atol=1e-10)
        # the pseudo-outcomes and the first stage are the fit's: the unit features do not change
        kernel = res.embedding(1).readout_kernel("density")
        y = np.linspace(-5, 30, 9)[:, None]
        np.testing.assert_array_equal(narrowed.unit_features(y, "density", kernel),
                                      part.unit_features(y, "density", kernel))
        # factors 1 give the fit back
        same = part.undersmoothed(1.0, 1.0, None)
        np.testing.assert_allclose(same.beta(V_eval), part.beta(V_eval), rtol=1e-12, atol=1e-14)


def test_low_rank_refit_at_full_rank_equals_the_exact_one(data):
    exact = _fit(data, approx="exact")
    full = _fit(data, approx="lowrank", rank_tol=1e-12, max_rank=1000)
    V_eval = exact._v(PAPER_PROFILES)
    for arm in (1, 0):
        for e_part, l_part in zip(exact.embedding(arm).parts, full.embedding(arm).parts):
            e_n = e_part.undersmoothed(0.4, 0.3, None)
            l_n = l_part.undersmoothed(0.4, 0.3, full.design.V[l_part.units])
            assert l_n.v_map.rank > l_part.v_map.rank // 2 and l_n.shift == pytest.approx(e_n.shift)
            reference = e_n.beta(V_eval)
            # float32 features: the exact path up to their rounding
            np.testing.assert_allclose(l_n.beta(V_eval), reference, rtol=0, atol=2e-5 * np.abs(reference).max())
            # a complete fold-arm: its weights are those of the exact refit
            np.testing.assert_allclose(l_n.weights(V_eval)[1], e_n.weights(V_eval)[1], rtol=0,
                                       atol=2e-5 * np.abs(e_n.weights(V_eval)[1]).max())
    y = np.linspace(-5, 30, 50)
    for fit in (exact, full):
        b = fit.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=49, seed=1)
        assert b.v_factor == simultaneous_v_factor(300) < 1
        if fit is exact:
            reference = b
    np.testing.assert_allclose(b.estimate_simultaneous, reference.estimate_simultaneous, rtol=0,
                               atol=1e-4 * np.abs(reference.estimate_simultaneous).max())
    np.testing.assert_allclose(b.upper_simultaneous, reference.upper_simultaneous, rtol=0,
                               atol=1e-3 * np.abs(reference.upper_simultaneous).max())


def test_split_fold_arm_refits_both_terms(data):
    res = _fit(data, lam1=0.05, lam1_plugin={1: 0.001, 0: 0.001})
    y = np.linspace(-5, 30, 40)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, n_boot=49, seed=2)
    part = res.embedding(0).parts[0]
    assert len(linear_terms(part)) == 2
    shifts = sorted(t.undersmoothed(0.5, SIMULTANEOUS_PENALTY, None).shift for t in linear_terms(part))
    assert shifts == pytest.approx(sorted(SIMULTANEOUS_PENALTY * t.shift for t in linear_terms(part)))
    assert np.all(b.lower_simultaneous <= b.upper_simultaneous)
    # the simultaneous band holds both the refit's estimate and the fit's
    assert np.all(b.lower_simultaneous <= b.estimate_simultaneous)
    assert np.all(b.estimate_simultaneous <= b.upper_simultaneous)
    assert np.all((b.lower_simultaneous <= b.lower) & (b.upper <= b.upper_simultaneous))
    assert not np.allclose(b.estimate_simultaneous, b.estimate)


def test_the_undersmoothing_rule():
    assert simultaneous_v_factor(2000) == pytest.approx(2000 ** (-1 / 11)) == pytest.approx(0.50, abs=0.01)
    assert simultaneous_v_factor(10000) < simultaneous_v_factor(2000) < 1
    assert Kernel("gaussian", (2.0, np.inf)).narrowed(0.25).bandwidth == (0.5, np.inf)
    with pytest.raises(ParameterError, match="narrowed by a factor"):
        Kernel("gaussian", (1.0,)).narrowed(1.5)


def test_leverages_match_the_hat_matrix(data):
    """H_ii of the exact second stage against diag(K (K + sI)⁻¹); the low-rank path at full rank against it."""
    exact = _fit(data, approx="exact")
    full = _fit(data, approx="lowrank", rank_tol=1e-12, max_rank=1000)
    for e_part, l_part in zip(exact.embedding(1).parts, full.embedding(1).parts):
        vk = e_part.v_kernel
        K = twins.gram(e_part.V1, e_part.V1, vk.name, vk.bandwidth_array)
        H = K @ np.linalg.inv(K + e_part.shift * np.eye(len(K)))
        np.testing.assert_allclose(e_part.leverages(), np.diag(H), rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(l_part.leverages(), np.diag(H), rtol=0, atol=1e-5)
        narrowed = e_part.undersmoothed(0.3, 0.1, None)
        assert narrowed.leverages().mean() > e_part.leverages().mean()  # less smoothing: each unit weighs more
