"""The generalised propensity of a treatment with k ≥ 3 levels, against plain numpy twins and the binary case.

Each arm j's weights are 1{A = j}/π̂_j(X) (Imbens, 2000).  The binary code
keeps the vector π̂ = P̂(A = 1 | X); every generalised piece must reduce to it
when handed the two columns [1 − π̂, π̂], which is what these tests check,
besides the k-arm arithmetic itself.  Tolerances: exact algebraic identities
are asserted at 1e-12 (the same sums in another order); the stacking
optimiser (SLSQP, ftol 1e-12) at 1e-6 on its weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from ccme.crossfit import make_folds
from ccme.errors import ParameterError, PositivityError
from ccme.propensity import (arm_probabilities, clip_scores, crump_alpha, make_propensity, overlap_diagnostics,
                             trim_mask)
from ccme.propensity_selection import (AutoPropensity, _proba, _stack_weights, _stack_weights_multinomial,
                                       calibration_report, log_loss)
from ccme.pseudo import hajek_scores, pseudo_outcome


def _three_arms(n=900, seed=0, strength=1.0):
    """Covariates, multinomial-logit propensities (rows sum to one) and the arms drawn from them."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    eta = strength * np.column_stack([np.zeros(n), 0.8 * X[:, 0], -0.6 * X[:, 1] + 0.4 * X[:, 2]])
    P = np.exp(eta) / np.exp(eta).sum(axis=1, keepdims=True)
    A = np.array([rng.choice(3, p=p) for p in P], dtype=np.int8)
    return X, P, A


def test_arm_probabilities_and_clipping_reduce_to_the_binary_case():
    p = np.random.default_rng(1).uniform(0.0, 1.0, 500)
    two = arm_probabilities(p)
    np.testing.assert_array_equal(two, np.column_stack([1.0 - p, p]))
    assert np.shares_memory(arm_probabilities(two), two)
    for c in (0.0, 0.05, 0.2):
        # The matrix rule raises each arm's probability to c; the binary one also caps π̂ at 1 − c.  They agree on
        # every probability at most 1 − c, which is every weight but those the binary cap lowers (clip_scores).
        matrix, binary = clip_scores(two, c), arm_probabilities(clip_scores(p, c))
        np.testing.assert_array_equal(matrix, np.maximum(two, c))
        below = two <= 1.0 - c
        np.testing.assert_allclose(matrix[below], binary[below], rtol=0, atol=1e-15)
        np.testing.assert_array_equal(trim_mask(two, c), trim_mask(p, c))


def test_crump_alpha_of_two_columns_is_the_binary_one():
    e = np.random.default_rng(2).beta(0.6, 0.6, 2000)   # weak overlap: α > 0
    assert crump_alpha(e) > 0
    assert crump_alpha(np.column_stack([1.0 - e, e])) == pytest.approx(crump_alpha(e), rel=1e-12)


def test_crump_alpha_of_k_arms_uses_the_sum_of_inverse_probabilities():
    """Yang et al. (2016): g = Σ_j 1/e_j; γ = 2 E[g | g ≤ γ] on the sample; α = 1/2 − √(1/4 − 1/γ)."""
    _, P, _ = _three_arms(3000, seed=3)
    P = P ** 3 / np.sum(P ** 3, axis=1, keepdims=True)   # sharper: some units with a tiny arm probability
    g = np.sort(np.sum(1.0 / P, axis=1))
    means = np.cumsum(g) / np.arange(1, g.size + 1)
    k = np.flatnonzero(g <= 2.0 * means)[-1]
    gamma = 2.0 * means[k]
    assert crump_alpha(P) == pytest.approx(0.5 - np.sqrt(0.25 - 1.0 / gamma), rel=1e-12)


def test_multinomial_log_loss_is_scikit_learns():
    from sklearn.metrics import log_loss as sk_log_loss

    _, P, A = _three_arms()
    assert log_loss(A, P) == pytest.approx(sk_log_loss(A, P, labels=[0, 1, 2]), rel=1e-12)
    w = np.random.default_rng(4).uniform(0.5, 2.0, len(A))
    assert log_loss(A, P, w) == pytest.approx(sk_log_loss(A, P, labels=[0, 1, 2], sample_weight=w), rel=1e-12)
    p = P[:, 1] / (P[:, 0] + P[:, 1])                     # a binary problem written both ways
    b = (A == 1).astype(np.int8)
    assert log_loss(b, np.column_stack([1 - p, p])) == pytest.approx(log_loss(b, p), rel=1e-12)


def test_multinomial_stack_minimises_the_log_loss_of_the_observed_arm():
    X, P, A = _three_arms(1500, seed=5)
    rng = np.random.default_rng(6)
    noisy = np.clip(P + 0.2 * rng.standard_normal(P.shape), 0.01, None)
    noisy /= noisy.sum(axis=1, keepdims=True)
    flat = np.full_like(P, 1.0 / 3.0)
    stack = np.stack([noisy, P, flat], axis=2)           # (n, k, candidates)
    w = _stack_weights(A, stack)
    np.testing.assert_allclose(w, _stack_weights_multinomial(stack[np.arange(len(A)), A]), atol=1e-12)
    assert w[1] > 0.6 and w.sum() == pytest.approx(1.0)
    for other in (np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]), np.full(3, 1 / 3)):
        assert log_loss(A, stack @ w) <= log_loss(A, stack @ other) + 1e-9
    # the binary stack written as two columns gives the binary weights
    b = (A == 1).astype(np.float64)
    cands = np.column_stack([noisy[:, 1], P[:, 1], flat[:, 1]])
    two = np.stack([1.0 - cands, cands], axis=1)
    np.testing.assert_allclose(_stack_weights(b.astype(np.intp), two), _stack_weights(b, cands), atol=1e-6)


def test_hajek_scores_normalise_each_arm_within_each_fold():
    X, P, A = _three_arms(600, seed=7)
    folds = make_folds(len(A), 3, np.random.default_rng(0))
    w = np.random.default_rng(8).uniform(0.5, 2.0, len(A))
    for sample_weight in (None, w):
        out = hajek_scores(P, A, folds, sample_weight)
        s = np.ones(len(A)) if sample_weight is None else sample_weight
        for fold in folds:
            t = fold.target
            for arm in range(3):
                omega = np.where(A[t] == arm, 1.0 / out[t, arm], 0.0)
                assert np.sum(s[t] * omega) / np.sum(s[t]) == pytest.approx(1.0, rel=1e-12)
                others = t[A[t] != arm]                  # a unit's weight in another arm is untouched
                np.testing.assert_array_equal(out[others, arm], P[others, arm])


def test_pseudo_outcome_of_an_arm_uses_its_own_probability():
    _, P, A = _three_arms(300, seed=9)
    target = np.arange(0, 300, 2)
    for arm in range(3):
        dr = pseudo_outcome("dr", arm, A=A, target=target, scores_target=P[target])
        omega = np.where(A[target] == arm, 1.0 / P[target, arm], 0.0)   # the numpy twin
        np.testing.assert_allclose(dr.a, omega, rtol=1e-15)
        np.testing.assert_allclose(dr.b, 1.0 - omega, rtol=1e-15)
        one = pseudo_outcome("onestep", arm, A=A, target=target, scores_target=P[target])
        np.testing.assert_array_equal(one.rows, target[A[target] == arm])


def test_overlap_diagnostics_per_arm():
    _, P, A = _three_arms(800, seed=10)
    w = np.random.default_rng(11).uniform(0.5, 2.0, len(A))
    ov = overlap_diagnostics(P, A, 0.05, warn=False, sampling_weights=w)
    for arm in range(3):
        units = A == arm
        x = w[units] / np.maximum(P[units, arm], 0.05)
        assert ov.ess[arm] == pytest.approx(x.sum() ** 2 / np.sum(x ** 2), rel=1e-12)
        assert ov.n_arm[arm] == int(units.sum())
    assert ov.n_clipped_low == int(np.sum(np.any(P < 0.05, axis=1))) and ov.n_clipped_high == 0
    separated = np.zeros_like(P)                          # the arms known exactly: positivity fails
    separated[np.arange(len(A)), A] = 0.98
    separated[separated == 0] = 0.01
    with pytest.raises(PositivityError, match="arm 0 against the others"):
        overlap_diagnostics(separated, A, 0.01, warn=False)


def test_calibration_report_of_two_columns_is_the_binary_one():
    p = np.random.default_rng(12).uniform(0.1, 0.9, 400)
    a = (np.random.default_rng(13).random(400) < p).astype(np.int8)
    one, two = calibration_report("x", p, a), calibration_report("x", np.column_stack([1 - p, p]), a)
    assert two.brier == pytest.approx(one.brier, rel=1e-12)
    assert two.brier_constant == pytest.approx(one.brier_constant, rel=1e-12)
    assert two.log_loss == pytest.approx(one.log_loss, rel=1e-12)
    np.testing.assert_array_equal(two.bin_count, one.bin_count)


def test_named_learners_and_the_super_learner_are_multinomial():
    X, P, A = _three_arms(900, seed=14, strength=2.5)   # a signal every learner finds in 600 units
    train, test = np.arange(600), np.arange(600, 900)
    for name in ("logistic", "logistic_cv", "boosting", "forest", "auto"):
        model = make_propensity(name, len(A), seed=1, k=3)
        out = model.fit_predict(X[train], A[train], X[test], test, k=3)
        assert out.shape == (300, 3)
        np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-9)
        assert log_loss(A[test], out) < log_loss(A[test], np.full((300, 3), np.bincount(A[train]) / 600)), name
    auto = AutoPropensity(random_state=1).fit(X[train], A[train])
    assert all(np.isfinite(auto.selection_.log_loss)) and sum(auto.selection_.weights) == pytest.approx(1.0)


def test_a_class_missing_from_a_fit_has_probability_zero():
    from sklearn.linear_model import LogisticRegression

    X, _, A = _three_arms(300, seed=15)
    keep = A != 1
    model = LogisticRegression().fit(X[keep], A[keep])
    out = _proba(model, X[:5], 3)
    np.testing.assert_array_equal(out[:, 1], 0.0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)


def test_known_scores_of_k_arms_are_checked():
    _, P, _ = _three_arms(50, seed=16)
    assert make_propensity(P, 50, seed=1, k=3).known.shape == (50, 3)
    with pytest.raises(ParameterError, match=r"\(n, k\) = \(50, 3\)"):
        make_propensity(P[:, :2], 50, seed=1, k=3)
    with pytest.raises(ParameterError, match="sum to one"):
        make_propensity(P * 0.9, 50, seed=1, k=3)
