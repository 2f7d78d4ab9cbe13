"""Repeated cross-fitting, ``fit(n_rep=R)``: the average over R splits' fold estimates (DoubleML's ``n_rep``)."""

import warnings

import numpy as np
import pytest

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.embedding import Embedding
from ccme.errors import ParameterError

F = "y ~ a | x1 + x2 | x3 + x4"
Y = np.linspace(-5.0, 45.0, 40)


@pytest.fixture(scope="module")
def fits():
    data = paper_simulation(500, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = ccme.fit(F, data, seed=9, tune="none")
        three = ccme.fit(F, data, seed=9, tune="none", n_rep=3)
    return one, three


def test_first_split_is_the_fit_without_repetitions(fits):
    one, three = fits
    assert len(three.embedding(1).parts) == 3 * one.n_folds and three.n_folds == one.n_folds
    V = one.design.encode_v(PAPER_PROFILES)
    for mine, theirs in zip(one.embedding(1).parts, three.embedding(1).parts[: one.n_folds]):
        for a, b in zip(mine.weights(V), theirs.weights(V)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(one.propensity_scores, three.propensity_scores)  # diagnostics: the first split
    assert "n_rep=3" in three.call


def test_pooled_estimate_averages_the_splits(fits):
    one, three = fits
    emb = three.embedding(1)
    K = one.n_folds
    rest = Embedding(list(emb.parts[K:]), emb.y_kernel)
    V = three.design.encode_v(PAPER_PROFILES)
    raw = emb.density(Y[:, None], v=V, normalize=False)
    want = (one.embedding(1).density(Y[:, None], v=V, normalize=False) + 2.0 * rest.density(Y[:, None], v=V,
                                                                                              normalize=False)) / 3.0
    np.testing.assert_allclose(raw, want, rtol=1e-10, atol=1e-14)
    # the splits differ: repetition moves the estimate
    assert np.abs(raw - one.embedding(1).density(Y[:, None], v=V, normalize=False)).max() > 1e-6


def test_repeated_fit_is_deterministic_and_saves(fits, tmp_path):
    _, three = fits
    again = ccme.fit(F, paper_simulation(500, seed=4), seed=9, tune="none", n_rep=3)
    np.testing.assert_array_equal(again.density(Y, newdata=PAPER_PROFILES), three.density(Y, newdata=PAPER_PROFILES))
    three.save(tmp_path / "r.ccme")
    loaded = ccme.load(tmp_path / "r.ccme")
    np.testing.assert_array_equal(loaded.density(Y, newdata=PAPER_PROFILES), three.density(Y, newdata=PAPER_PROFILES))
    assert loaded.bands(0.9, newdata=PAPER_PROFILES, y=Y, n_boot=29, seed=1).estimate.shape == (2, len(Y))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_n_rep(bad):
    with pytest.raises(ParameterError, match="n_rep"):
        ccme.fit(F, paper_simulation(200, seed=1), n_rep=bad, tune="none")


def test_default_repetitions_are_the_methods(monkeypatch):
    """``n_rep=None`` (the default) runs the estimator's ``default_n_rep``: ccme.estimators.ridge.RIDGE_N_REP (1) for ridge, and
    ccme.estimators.training.NEURAL_N_REP for the neural estimators, bit for bit the explicit ``n_rep``."""
    pytest.importorskip("torch")
    from ccme.estimators import training

    data = paper_simulation(300, seed=2)
    ridge = ccme.fit(F, data, seed=5, tune="none", propensity="logistic")
    assert len(ridge.embedding(1).parts) == ridge.n_folds and "n_rep" not in ridge.call
    from ccme.estimators import ridge as ridge_module

    monkeypatch.setattr(ridge_module, "RIDGE_N_REP", 2)   # ridge's own default (ccme.estimators.ridge.RIDGE_N_REP)
    twice = ccme.fit(F, data, seed=5, tune="none", propensity="logistic")
    np.testing.assert_array_equal(twice.density(Y, newdata=PAPER_PROFILES),
                                  ccme.fit(F, data, seed=5, tune="none", propensity="logistic",
                                           n_rep=2).density(Y, newdata=PAPER_PROFILES))
    assert len(twice.embedding(1).parts) == 2 * twice.n_folds
    monkeypatch.setattr(training, "NEURAL_N_REP", 2)
    opts = dict(seed=5, tune="none", propensity="logistic", epochs=(10, 10), progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)  # ten epochs leave some V without positive mass
        default = ccme.fit(F, data, method="neural_kernel", **opts)
        explicit = ccme.fit(F, data, method="neural_kernel", n_rep=2, **opts)
        single = ccme.fit(F, data, method="neural_kernel", n_rep=1, **opts)
    assert len(default.embedding(1).parts) == 2 * default.n_folds and "n_rep=2" in default.call
    np.testing.assert_array_equal(default.density(Y, newdata=PAPER_PROFILES), explicit.density(Y, newdata=PAPER_PROFILES))
    assert len(single.embedding(1).parts) == single.n_folds and "n_rep" not in single.call
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        assert "Cross-fitting  2 folds x 2 repetitions (averaged), seed 5" in str(default.summary())
        assert "Cross-fitting  2 folds, seed 5" in str(single.summary())
