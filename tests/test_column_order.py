"""The forests' column order (``ccme.column_order``): fixed by the covariates' values, so that neither the formula's
term order nor a factor's level order, nor a level without units, changes a forest's draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme.column_order import CanonicalColumns, canonical_order
from ccme.estimators.forest_first_stage import check_forest_settings, grow_forest_first_stage


def test_canonical_order_ignores_the_columns_order_and_drops_constant_ones():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(size=50), np.zeros(50), rng.integers(0, 2, 50), rng.normal(size=50),
                         np.full(50, 3.0)])
    order = canonical_order(X)
    assert sorted(order) == [0, 2, 3]
    for _ in range(5):
        perm = rng.permutation(X.shape[1])
        np.testing.assert_array_equal(X[:, perm][:, canonical_order(X[:, perm])], X[:, order])
    assert list(canonical_order(np.ones((4, 3)))) == [0]     # nothing varies: the learner still gets a column
    step = CanonicalColumns().fit(X)
    np.testing.assert_array_equal(step.transform(X[:7]), X[:7, order])
    with pytest.raises(ValueError, match="fitted on 5"):
        step.transform(X[:, :4])


@pytest.fixture(scope="module")
def data():
    data = ccme.datasets.paper_simulation(500, seed=11)
    data["region"] = np.random.default_rng(3).choice(["north", "south", "east", "west"], len(data))
    return data


def _scores(data, formula):
    return ccme.fit(formula, data, propensity="forest", seed=2, tune="none").propensity_scores


def test_the_forest_propensity_does_not_depend_on_term_order_level_order_or_an_unused_level(data):
    base = _scores(data, "y ~ a | x1 | x2 + region + x3 + x4")
    np.testing.assert_array_equal(_scores(data, "y ~ a | x1 | x4 + x3 + region + x2"), base)
    levels = ["west", "south", "north", "east"]
    reordered = data.assign(region=pd.Categorical(data["region"], categories=levels))
    np.testing.assert_array_equal(_scores(reordered, "y ~ a | x1 | x2 + region + x3 + x4"), base)
    unused = data.assign(region=pd.Categorical(data["region"], categories=[*levels, "abroad"]))
    np.testing.assert_array_equal(_scores(unused, "y ~ a | x1 | x2 + region + x3 + x4"), base)


def test_the_forest_first_stage_does_not_depend_on_the_columns_order():
    rng = np.random.default_rng(5)
    X0, X1 = rng.normal(size=(120, 4)), rng.normal(size=(20, 4))
    Y0 = X0[:, :1] ** 2 + 0.3 * rng.normal(size=(120, 1))
    settings = check_forest_settings({"n_estimators": 20})
    perm = [2, 0, 3, 1]
    a = grow_forest_first_stage(X0, Y0, X1, settings=settings, seed=4, n_threads=1)
    b = grow_forest_first_stage(X0[:, perm], Y0, X1[:, perm], settings=settings, seed=4, n_threads=1)
    assert (a.W != b.W).nnz == 0


def test_a_default_fit_does_not_depend_on_the_formulas_term_order_or_a_factors_level_order(data):
    """The forest propensity and the per-covariate bandwidths' coordinate search (which visits the covariates in
    ccme.column_order.group_order) both follow the values: written the other way round, the fit is the same up to
    rounding (a kernel's sum over the columns in another order)."""
    fit = ccme.fit("y ~ a | x1 + region | x2 + x3 + x4", data, seed=2)
    levels = ["west", "south", "north", "east"]
    turned = ccme.fit("y ~ a | region + x1 | x4 + x3 + x2",
                      data.assign(region=pd.Categorical(data["region"], categories=levels)), seed=2)
    newdata = pd.DataFrame({"x1": [-0.5, 0.5, 1.5], "region": ["north", "east", "west"]})
    y = fit.default_grid()[::10]
    for arm in (1, 0):
        np.testing.assert_allclose(turned.density(y, newdata=newdata, arm=arm),
                                   fit.density(y, newdata=newdata, arm=arm), rtol=1e-9, atol=1e-12)
