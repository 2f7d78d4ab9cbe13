"""The bootstrap's per-call cache of first-stage pieces (``cache=`` of LinearSecondStage.unit_features).

The terms of a split doubly robust fold-arm and their undersmoothed refits
share one first stage; with a cache they compute its cross-Gram and solved
features once.  What they return must not change: each method is compared
with and without the cache (exact and low-rank paths), and the exact path's
pieces are checked to be shared by a fold's terms and refits.
"""

import warnings

import numpy as np
import pytest

import ccme
from ccme.bootstrap import _linear_parts
from ccme.estimators.ridge import FirstStagePieces


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(400, seed=7)


@pytest.mark.parametrize("approx", ["exact", "lowrank"])
def test_cached_pieces_give_the_uncached_results(data, approx):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit("y ~ a | x1 + x2 | x3 + x4", data, seed=3, approx=approx, lam1=0.02, lam1_plugin=0.002,
                       tune="none")
    kernel = res.embedding(0).readout_kernel("density")
    y = np.linspace(-5, 30, 11)[:, None]
    V = res.design.V[:4]
    cache = {}
    for terms in _linear_parts(res, 0):
        assert len(terms) == 2  # the split: correction and plug-in part
        refits = [t.undersmoothed(0.5, 0.2, res.design.V[t.units]) for t in terms]
        for part in (*terms, *refits):
            beta = part.beta(V)
            for feature, points in (("density", y), ("moments", np.zeros((0, 1)))):
                np.testing.assert_allclose(part.unit_features(points, feature, kernel, cache=cache),
                                           part.unit_features(points, feature, kernel), rtol=1e-12, atol=1e-14)
                got = part.first_stage_influence(beta, points, feature, kernel, cache=cache)
                want = part.first_stage_influence(beta, points, feature, kernel)
                np.testing.assert_array_equal(got.units, want.units)
                np.testing.assert_allclose(got.weights, want.weights, rtol=1e-10, atol=1e-14)
                np.testing.assert_allclose(got.residuals, want.residuals, rtol=1e-12, atol=1e-14)
    if approx == "exact":  # one set of pieces per fold, whatever the terms and refits
        pieces = [v for _, v in cache.values() if isinstance(v, FirstStagePieces)]  # (inputs, piece) entries
        assert len(pieces) == len(res.folds)


def test_low_rank_refits_share_their_features_and_match_the_unshared_ones(data):
    """The terms of a split low-rank fold-arm share the refit's Nyström features; each refit is unchanged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit("y ~ a | x1 + x2 | x3 + x4", data, seed=3, approx="lowrank", lam1=0.02, lam1_plugin=0.002,
                       tune="none")
    V = res.design.V[:4]
    cache = {}
    for terms in _linear_parts(res, 1):
        V_units = res.design.V[terms[0].units]
        shared = [t.undersmoothed(0.5, 0.2, V_units, cache=cache) for t in terms]
        assert shared[0].v_map is shared[1].v_map  # one landmark selection for both terms
        for term, refit in zip(terms, shared):
            alone = term.undersmoothed(0.5, 0.2, V_units)
            np.testing.assert_array_equal(refit.Phi, alone.Phi)
            np.testing.assert_allclose(refit.loadings0, alone.loadings0, rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(refit.weights(V)[1], alone.weights(V)[1], rtol=1e-6, atol=1e-9)
