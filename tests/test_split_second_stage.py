"""The doubly robust second stage split into correction and plug-in part, each with its own penalty.

The closed form of the split estimate is checked in ``test_ridge_closed_form.py``;
here: what the tuning chooses and reports, when it does not split, the
low-rank path, the bootstrap's linear terms, memory and bad input.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme.bootstrap import _linear
from ccme.estimators.base import SplitSecondStage, linear_terms
from ccme.estimators.lowrank import LowRankFoldArm
from ccme.estimators.ridge import RidgeFoldArm, factor_bytes
from ccme.pseudo import PseudoOutcome, split_doubly_robust

FORMULA = "y ~ a | x1 + x2 | x3 + x4"


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(400, seed=11)


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=3, **kwargs)


@pytest.fixture(scope="module")
def tuned(data):
    return _fit(data)


def test_the_parts_add_up_to_the_doubly_robust_pseudo_outcome():
    a = np.array([0.0, 2.5, 0.0, 4.0])
    correction, plugin = split_doubly_robust(PseudoOutcome(rows=np.arange(4), a=a, b=1 - a))
    np.testing.assert_array_equal(correction.a + plugin.a, a)
    np.testing.assert_array_equal(correction.b + plugin.b, 1 - a)
    np.testing.assert_array_equal(plugin.b, 1.0)
    with pytest.raises(ValueError, match="doubly robust"):
        split_doubly_robust(PseudoOutcome(rows=np.arange(4), a=a, b=np.zeros(4)))  # IPW does not split


def test_default_tuning_chooses_and_reports_the_plugin_penalty(tuned):
    chosen = tuned.tuning.chosen["lam1_plugin"]
    assert set(chosen) == {1, 0} and chosen[1] == chosen[0]
    curve = next(c for c in tuned.tuning.curves if c.parameter == "lam1_plugin")
    # the choice is the curve's minimum (the grid only grows downwards)
    assert curve.chosen == chosen[1] == curve.values[int(np.argmin(curve.criterion))]
    assert tuned.penalties["lam1_plugin"] == chosen
    for arm in (1, 0):
        parts = tuned.embedding(arm).parts
        assert all(isinstance(p, SplitSecondStage) for p in parts)
        assert all(isinstance(t, RidgeFoldArm) for p in parts for t in linear_terms(p))
        # the plug-in term has the smaller penalty here: its target has no outcome noise
        assert parts[0].plugin.shift < parts[0].correction.shift
    text = str(tuned.summary())
    assert "lambda1, plug-in part" in text and "correction at lambda1" in text


@pytest.mark.parametrize("mode", ["ipw", "pi", "onestep"])
def test_other_modes_have_one_second_stage(data, mode):
    res = _fit(data, mode=mode)
    assert "lam1_plugin" not in res.tuning.chosen and "lam1_plugin" not in res.penalties
    assert not any(isinstance(p, SplitSecondStage) for arm in (1, 0) for p in res.embedding(arm).parts)


def test_a_given_lam1_is_kept_for_both_parts_unless_lam1_plugin_is_given(data):
    fixed = _fit(data, lam1=0.02)
    assert "lam1_plugin" not in fixed.tuning.chosen
    assert isinstance(fixed.embedding(1).parts[0], RidgeFoldArm)
    own = _fit(data, lam1=0.02, lam1_plugin=0.001)
    assert own.penalties["lam1_plugin"] == {1: 0.001, 0: 0.001}
    assert isinstance(own.embedding(1).parts[0], SplitSecondStage)
    only = _fit(data, tune={"lam1_plugin": [1e-4, 1e-3, 1e-2]}, lam1=0.02)
    assert only.tuning.chosen["lam1_plugin"][1] in (1e-4, 1e-3, 1e-2)
    assert only.penalties["lam1"] == {1: 0.02, 0: 0.02}


def test_weights_are_the_sum_of_the_terms(tuned):
    v = tuned.design.V[:5]
    for part in tuned.embedding(0).parts:
        atoms, c = part.weights(v)
        np.testing.assert_array_equal(atoms, part.correction.atoms)
        np.testing.assert_allclose(c, part.correction.weights(v)[1] + part.plugin.weights(v)[1], rtol=1e-12)
        np.testing.assert_array_equal(part.pseudo.a + part.pseudo.b, 1.0)  # the DR pseudo-outcome they add up to


def test_bootstrap_terms_reproduce_the_estimate(tuned, data):
    """The linear terms of the bootstrap (both terms of every fold) sum to the raw density estimate."""
    newdata = data.head(3)
    v = tuned.design.encode_v(newdata)
    grid = tuned.default_grid(40)
    for arm in (1, 0):
        emb = tuned.embedding(arm)
        terms = _linear(tuned, arm, v, grid[:, None], "density", emb.y_kernel)
        assert len(terms) == 2 * len(emb.parts)
        np.testing.assert_allclose(sum(t.estimate() for t in terms),
                                   tuned.density(grid, newdata=newdata, arm=arm, normalize=False), rtol=1e-9,
                                   atol=1e-12)
    bands = tuned.bands(newdata=newdata, arm=1, n_boot=49)
    assert np.all(bands.upper >= bands.lower)


def test_low_rank_path_splits_too(data):
    exact = _fit(data, tune="none", lam1=0.02, lam1_plugin=0.002, approx="exact")
    low = _fit(data, tune="none", lam1=0.02, lam1_plugin=0.002, approx="lowrank", rank_tol=1e-12, max_rank=1000,
               landmark_pool=10_000)
    part = low.embedding(1).parts[0]
    assert isinstance(part, SplitSecondStage) and isinstance(part.plugin, LowRankFoldArm)
    grid = exact.default_grid(50)
    for arm in (1, 0):
        reference = exact.density(grid, arm=arm, normalize=False)
        # float32 features at full rank (as test_lowrank's exact-path comparison)
        np.testing.assert_allclose(low.density(grid, arm=arm, normalize=False), reference, rtol=0,
                                   atol=1e-6 * np.abs(reference).max())


def test_memory_estimate_counts_the_plugin_factor(data):
    res = _fit(data, tune="none", lam1=0.02, lam1_plugin=0.002, folds=3)
    held = {}
    for arm in (1, 0):
        for part in res.embedding(arm).parts:
            for term in linear_terms(part):
                for L in (term.L_V, term.L_X0):
                    held[id(L)] = L.nbytes
    assert sum(held.values()) == factor_bytes("dr", res.design.A, res.folds, second_stage_factors=2)


@pytest.mark.parametrize("value, message", [(-1.0, "positive"), ("big", "positive"), ({1: 0.01}, "arm")])
def test_bad_plugin_penalty_is_refused(data, value, message):
    with pytest.raises(ccme.ParameterError, match=message):
        _fit(data, tune="none", lam1_plugin=value)


def test_save_and_load_keep_the_split(tuned, tmp_path):
    back = ccme.load(tuned.save(tmp_path / "split.ccme"))
    part = back.embedding(1).parts[0]
    assert isinstance(part, SplitSecondStage)
    grid = tuned.default_grid(30)
    np.testing.assert_array_equal(back.density(grid, arm=1), tuned.density(grid, arm=1))


@pytest.mark.parametrize("kwargs", [dict(mode="pi", lam1_plugin=0.01), dict(mode="ipw", tune={"lam1_plugin": [0.1]}),
                                    dict(mode="onestep", lam1_plugin=0.01)])
def test_plugin_penalty_outside_the_doubly_robust_mode_is_refused(data, kwargs):
    with pytest.raises(ccme.ParameterError, match="doubly robust plug-in part"):
        _fit(data, **kwargs)


def test_a_fold_without_the_arms_units_is_its_plugin_part():
    """Found by tests/test_properties.py: a fold whose second stage has no treated unit has no correction."""
    y = [-0.11, 0.62, 3.04, 1.65, 0.66, -0.51, -1.65, 0.17, 0.11, -1.23, -0.68, 0.93, 0.06, -0.10, 0.10, 1.04]
    a = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1]
    v = [0.35, 0.82, 0.33, -1.30, 0.91, 0.45, -0.54, 0.58, 0.36, 0.29, 0.03, 0.55, -0.74, -0.16, -0.48, 0.60]
    frame = pd.DataFrame({"y": y, "a": a, "v0": v})
    res = _fit_frame(frame)
    parts = res.embedding(1).parts
    lone = [p for p in parts if not isinstance(p, SplitSecondStage)]
    assert lone and all(not np.any(p.pseudo.a) and np.all(p.pseudo.b == 1) for p in lone)
    assert lone[0].shift == pytest.approx(len(lone[0].units) * res.penalties["lam1_plugin"][1], rel=1e-9)
    grid = res.default_grid(50)
    assert np.isfinite(res.density(grid, newdata=res.profiles(), arm=1, normalize=False)).all()


def _fit_frame(frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit("y ~ a | v0", frame, mode="dr", folds=3, propensity="logistic", seed=16, tune="auto")
