"""The forest-weights first stage of the ridge CCME (``first_stage="forest" | "auto"``).

Checked against plain numpy: the forest weights (non-negative, summing to one,
equal to a per-tree loop), the first-stage embedding μ̂₀, the out-of-bag
weights, and the fold-arm's weights, contraction (both association orders)
and unit features against the explicit formula of eq. emp_density with the
kernel smoother replaced by Wᵀ (D_ω → diag(a), D_{1−ω} → diag(b)).  Then the
pipeline: the bootstrap runs on it, save/load is bit-identical, the thread
count does not change a bit, "auto" records its choice and both criteria, and
bad values are ParameterErrors.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

import ccme
import twins
from ccme.column_order import canonical_order
from ccme.errors import ParameterError
from ccme.estimators.forest_first_stage import (
    FOREST_DEFAULTS, ForestRidgeFoldArm, _grow, _leaf_columns, check_forest_settings, forest_weights,
    grow_forest_first_stage, oob_weights,
)

FORMULA = "y ~ a | x1 + x2 | x3 + x4 + x5 + x6"
SMALL_FOREST = {"n_estimators": 25}


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(240, seed=5)


@pytest.fixture(scope="module")
def forest_fit(data):
    return ccme.fit(FORMULA, data, propensity="forest", seed=3, first_stage="forest", forest=SMALL_FOREST,
                    tune={"lam1": [1e-2, 1e-1]})


@pytest.fixture(scope="module")
def grown():
    rng = np.random.default_rng(0)
    X0, X1 = rng.normal(size=(80, 4)), rng.normal(size=(30, 4))
    Y0 = (X0[:, :1] + 0.3 * rng.normal(size=(80, 1)))
    columns = canonical_order(X0)      # as grow_forest_first_stage orders them (ccme.column_order)
    X0, X1 = X0[:, columns], X1[:, columns]
    settings = check_forest_settings({"n_estimators": 15, "min_samples_leaf": 3})
    forest = _grow(X0, Y0, settings, seed=4, n_threads=1)
    return X0, X1, Y0, forest


def _naive_weights(forest, X_train, X_eval):
    """w_l(x) by a loop over trees, leaves counted over every training unit."""
    W = np.zeros((len(X_eval), len(X_train)))
    for tree in forest.estimators_:
        train_leaf = tree.apply(X_train.astype(np.float32))
        eval_leaf = tree.apply(X_eval.astype(np.float32))
        for i, leaf in enumerate(eval_leaf):
            members = train_leaf == leaf
            W[i, members] += 1.0 / members.sum()
    return W / len(forest.estimators_)


def test_forest_weights_are_a_probability_vector_equal_to_a_loop(grown):
    X0, X1, Y0, forest = grown
    train_cols, n_cols = _leaf_columns(forest, X0, 1)
    eval_cols, _ = _leaf_columns(forest, X1, 1)
    W = forest_weights(train_cols, eval_cols, n_cols)
    assert sp.issparse(W) and W.format == "csr" and W.shape == (30, 80)
    dense = W.toarray()
    assert np.all(dense >= 0)
    np.testing.assert_allclose(dense.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dense, _naive_weights(forest, X0, X1), rtol=0, atol=1e-14)


def test_first_stage_embedding_equals_a_dense_computation(grown):
    X0, X1, Y0, forest = grown
    first = grow_forest_first_stage(X0, Y0, X1, settings=check_forest_settings({"n_estimators": 15,
                                                                                "min_samples_leaf": 3}),
                                    seed=4, n_threads=1)
    points = np.linspace(-3, 3, 17)[:, None]
    F0 = twins.atom_features(Y0, points, "density", "gaussian", 0.4)
    expected = _naive_weights(forest, X0, X1) @ F0   # ⟨μ̂₀(x), k(·, y)⟩ for every x, y
    np.testing.assert_allclose(first.W @ F0, expected, rtol=1e-12, atol=1e-14)
    # With the first moment as the feature, μ̂₀ is a mean of the training outcomes.
    means = first.W @ Y0
    assert np.all((means >= Y0.min()) & (means <= Y0.max()))


def test_out_of_bag_weights_leave_the_unit_and_its_trees_out(grown):
    X0, _, Y0, forest = grown
    train_cols, n_cols = _leaf_columns(forest, X0, 1)
    W, valid = oob_weights(forest, train_cols, n_cols)
    dense = W.toarray()
    expected = np.zeros_like(dense)
    trees = np.zeros(len(X0))
    leaves = np.column_stack([t.apply(X0.astype(np.float32)) for t in forest.estimators_])
    for t, drawn in enumerate(forest.estimators_samples_):
        out = np.setdiff1d(np.arange(len(X0)), drawn)
        for j in out:
            members = np.flatnonzero(leaves[:, t] == leaves[j, t])
            others = members[members != j]
            if len(others):
                expected[j, others] += 1.0 / len(others)
                trees[j] += 1
    expected[trees > 0] /= trees[trees > 0, None]
    np.testing.assert_allclose(dense, expected, rtol=0, atol=1e-14)
    assert np.all(np.diag(dense) == 0)
    np.testing.assert_array_equal(valid, trees > 0)
    np.testing.assert_allclose(dense[valid].sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("with_error", [False, True])
def test_grown_first_stage_keeps_its_out_of_bag_weights(grown, with_error):
    """With or without the tuning's OOB error (G0), the grown first stage carries the forest's OOB weights."""
    X0, X1, Y0, forest = grown
    settings = check_forest_settings({"n_estimators": 15, "min_samples_leaf": 3})
    G0 = Y0 if with_error else None
    first = grow_forest_first_stage(X0, Y0, X1, settings=settings, seed=4, n_threads=1, G0=G0)
    W, valid = oob_weights(forest, *_leaf_columns(forest, X0, 1))
    np.testing.assert_array_equal(first.W_oob.toarray(), W.toarray())
    assert np.isnan(first.oob_error) != with_error


def _twin_density(part: ForestRidgeFoldArm, V_eval, points, y_kernel):
    """Eq. emp_density with the first-stage smoother replaced by Wᵀ, all dense, in numpy."""
    v = part.v_kernel
    K_V = twins.gram(part.V1, part.V1, v.name, v.bandwidth_array)
    beta = np.linalg.solve(K_V + part.shift * np.eye(len(part.V1)), twins.gram(part.V1, V_eval, v.name,
                                                                              v.bandwidth_array))
    W = part.W.toarray()
    c = np.vstack([part.a[:, None] * beta, W.T @ (part.b[:, None] * beta)])
    F = twins.atom_features(np.vstack([part.Y1, part.Y0]), points, "density", y_kernel.name, y_kernel.bandwidth_array)
    return beta, c, c.T @ F


@pytest.mark.parametrize("mode", ["dr", "pi"])
def test_fold_arm_agrees_with_its_numpy_twin(data, mode):
    res = ccme.fit(FORMULA, data, propensity="forest", seed=3, mode=mode, first_stage="forest", forest=SMALL_FOREST,
                   tune="none")
    part = res.embedding(0).parts[1]
    assert isinstance(part, ForestRidgeFoldArm)
    y_kernel = res.kernels["y"]
    V_eval = res.design.V[:7]
    points = np.linspace(-10, 30, 9)[:, None]
    beta, c, dens = _twin_density(part, V_eval, points, y_kernel)
    np.testing.assert_allclose(part.beta(V_eval), beta, rtol=1e-8, atol=1e-10)
    atoms, weights = part.weights(V_eval)
    np.testing.assert_array_equal(atoms, np.vstack([part.Y1, part.Y0]))
    np.testing.assert_allclose(weights, c, rtol=1e-8, atol=1e-10)
    # Both association orders: 9 points at 7 V-points ("v"), 2 points at 7 V-points ("y").
    for pts in (points, points[:2]):
        out = np.zeros((7, len(pts)))
        part.contract(V_eval, pts, "density", y_kernel, out, 0.5)
        np.testing.assert_allclose(out, 0.5 * _twin_density(part, V_eval, pts, y_kernel)[2], rtol=1e-8, atol=1e-12)
    # Unit features: a F(Y1) + b (W F(Y0)).
    F1 = twins.atom_features(part.Y1, points, "density", y_kernel.name, y_kernel.bandwidth_array)
    F0 = twins.atom_features(part.Y0, points, "density", y_kernel.name, y_kernel.bandwidth_array)
    P = part.unit_features(points, "density", y_kernel)
    np.testing.assert_allclose(P, part.a[:, None] * F1 + part.b[:, None] * (part.W.toarray() @ F0), rtol=1e-12,
                               atol=1e-14)
    # The residual features: s (K_V + sI)⁻¹ P.
    K_V = twins.gram(part.V1, part.V1, part.v_kernel.name, part.v_kernel.bandwidth_array)
    np.testing.assert_allclose(part.residual_features(P), part.shift * np.linalg.solve(
        K_V + part.shift * np.eye(len(K_V)), P), rtol=1e-7, atol=1e-12)
    # Moments through the contraction: the mass and the mean.
    mom = np.zeros((7, 3))
    part.contract(V_eval, None, "moments", y_kernel, mom, 1.0)
    np.testing.assert_allclose(mom[:, 0], c.sum(axis=0), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mom[:, 1], c.T @ atoms[:, 0], rtol=1e-8, atol=1e-8)


def test_first_stage_influence_agrees_with_its_numpy_twin(data):
    """W(v) = Wᵀ(b ∘ β(v)), the atoms' first-stage weights; residuals φ(Y0) − W0 φ(Y0) with W0 out-of-bag."""
    res = ccme.fit(FORMULA, data, propensity="forest", seed=3, first_stage="forest", forest=SMALL_FOREST,
                   tune="none")
    kernel = res.kernels["y"]
    points = np.linspace(-10, 30, 9)[:, None]
    for part in res.embedding(1).parts:
        W0 = part.W0.toarray()
        m = len(part.Y0)
        assert W0.shape == (m, m) and np.all(W0 >= 0) and np.all(np.diag(W0) == 0)
        sums = W0.sum(axis=1)
        np.testing.assert_allclose(sums[sums > 0], 1.0, atol=1e-12)
        beta, c, _ = _twin_density(part, res.design.V[:5], points, kernel)
        F0 = twins.atom_features(part.Y0, points, "density", kernel.name, kernel.bandwidth_array)
        got = part.first_stage_influence(part.beta(res.design.V[:5]), points, "density", kernel)
        np.testing.assert_allclose(got.weights, c[len(part.Y1):], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(got.residuals, (sums > 0)[:, None] * (F0 - W0 @ F0), rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(got.units, part.atom_units[len(part.Y1):])
    pi = ccme.fit(FORMULA, data, propensity="forest", seed=3, mode="ipw", tune="none")
    assert pi.embedding(1).parts[0].first_stage_influence(beta, points, "density", kernel) is None


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_the_tests_perturb_the_forest_first_stage(data, monkeypatch):
    """With EFFECT_TEST_FIRST_STAGE the forest's out-of-bag residuals enter the draws, as the kernel ridge's do:
    the same statistics, larger p-values (a treatment drawn independently of everything: no effect)."""
    import ccme.bootstrap

    null = data.assign(a=np.random.default_rng(0).permutation(data["a"].to_numpy()))
    res = ccme.fit(FORMULA, null, propensity="forest", seed=3, first_stage="forest", forest=SMALL_FOREST,
                   tune="none")
    profiles = res.profiles()
    with_first = res.test_effect(newdata=profiles, n_boot=99, seed=1)
    monkeypatch.setattr(ccme.bootstrap, "EFFECT_TEST_FIRST_STAGE", False)
    without = res.test_effect(newdata=profiles, n_boot=99, seed=1)
    np.testing.assert_array_equal(with_first.table["statistic"], without.table["statistic"])
    assert with_first.p_value > without.p_value
    assert with_first.table["p_value"].mean() > without.table["p_value"].mean()


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_bootstrap_runs_on_the_forest_first_stage(forest_fit):
    profiles = forest_fit.profiles()
    bands = forest_fit.bands(0.9, newdata=profiles, arm=1, n_boot=49, seed=1)
    assert np.all(np.isfinite(bands.lower)) and np.all(bands.lower <= bands.upper)
    test = forest_fit.test_effect(newdata=profiles, n_boot=49, seed=1)
    assert np.all((test.table["p_value"] > 0) & (test.table["p_value"] <= 1))


def test_save_load_is_bit_identical(forest_fit):
    grid = forest_fit.default_grid(60)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "forest.ccme")
        forest_fit.save(path)
        loaded = ccme.load(path)
    assert isinstance(loaded.embedding(1).parts[0], ForestRidgeFoldArm)
    for arm in (1, 0):
        assert forest_fit.density(grid, arm=arm).tobytes() == loaded.density(grid, arm=arm).tobytes()
        assert forest_fit.cdf(grid, arm=arm).tobytes() == loaded.cdf(grid, arm=arm).tobytes()
    assert str(forest_fit.summary()) == str(loaded.summary())
    assert loaded.tuning.chosen["first_stage"] == {1: "forest", 0: "forest"}
    for mine, theirs in zip(forest_fit.embedding(0).parts, loaded.embedding(0).parts):
        assert (mine.W0 != theirs.W0).nnz == 0 and mine.W0.shape == theirs.W0.shape


def test_a_version_1_state_loads_with_the_first_stage_held_fixed(forest_fit):
    part = forest_fit.embedding(1).parts[0]
    state = {k: v for k, v in part.to_state().items() if not k.startswith("W0_")}
    old = ForestRidgeFoldArm.from_state(dict(state, version=1))
    assert old.W0 is None
    points = np.linspace(-10, 30, 5)[:, None]
    beta = part.beta(part.V1[:3])
    assert old.first_stage_influence(beta, points, "density", forest_fit.kernels["y"]) is None
    assert part.first_stage_influence(beta, points, "density", forest_fit.kernels["y"]) is not None


def test_thread_count_changes_nothing(data):
    outs = []
    for n_threads in (1, 2):
        res = ccme.fit(FORMULA, data, propensity="forest", seed=9, first_stage="forest", forest=SMALL_FOREST,
                       tune={"lam1": [1e-2, 1e-1]}, n_threads=n_threads)
        grid = res.default_grid(40)
        outs.append([res.density(grid, arm=arm, normalize=False) for arm in (1, 0)]
                    + [res.mean(arm=1), res.embedding(0).parts[0].W.data])
    for a, b in zip(*outs):
        assert a.tobytes() == b.tobytes()


def test_auto_records_its_choice_and_both_criteria(data):
    res = ccme.fit(FORMULA, data, propensity="forest", seed=3, first_stage="auto", forest=SMALL_FOREST,
                   tune={"lam0": [1e-2, 1e-1], "lam1": [1e-2, 1e-1]})
    chosen = res.tuning.chosen["first_stage"]
    assert set(chosen) == {0, 1} and set(chosen.values()) <= {"kernel", "forest"}
    curves = {c.arm: c for c in res.tuning.curves if c.parameter == "first_stage"}
    for arm in (1, 0):
        kernel, forest = curves[arm].criterion
        assert np.isfinite(kernel) and np.isfinite(forest) and kernel > 0 and forest > 0
        assert chosen[arm] == ("forest" if forest < kernel else "kernel")
        assert res.params["first_stage"][arm] == chosen[arm]
        parts = res.embedding(arm).parts
        assert all(isinstance(p, ForestRidgeFoldArm) == (chosen[arm] == "forest") for p in parts)
    text = str(res.summary())
    assert "First stage:" in text and "kernel LOO" in text and "forest OOB" in text


def test_without_tuning_auto_is_the_kernel_ridge(data):
    kernel = ccme.fit(FORMULA, data, propensity="forest", seed=3, tune="none")
    auto = ccme.fit(FORMULA, data, propensity="forest", seed=3, tune="none", first_stage="auto")
    grid = kernel.default_grid(30)
    assert kernel.density(grid, arm=0).tobytes() == auto.density(grid, arm=0).tobytes()
    assert "First stage" not in str(kernel.summary())


def test_per_arm_choice_and_modes_without_a_first_stage(data):
    res = ccme.fit(FORMULA, data, propensity="forest", seed=3, tune="none", first_stage={1: "forest", 0: "kernel"},
                   forest=SMALL_FOREST)
    assert isinstance(res.embedding(1).parts[0], ForestRidgeFoldArm)
    assert not isinstance(res.embedding(0).parts[0], ForestRidgeFoldArm)
    ipw = ccme.fit(FORMULA, data, propensity="forest", seed=3, tune="none", mode="ipw", first_stage="forest")
    assert not isinstance(ipw.embedding(1).parts[0], ForestRidgeFoldArm)


@pytest.mark.parametrize("kwargs, match", [
    ({"first_stage": "bad"}, "first_stage"),
    ({"first_stage": {1: "forest"}}, "first_stage"),
    ({"first_stage": "forest", "forest": {"trees": 5}}, "unknown setting"),
    ({"first_stage": "forest", "forest": {"min_samples_leaf": 0}}, "min_samples_leaf"),
    ({"first_stage": "forest", "forest": {"max_features": 1.5}}, "max_features"),
    ({"first_stage": "forest", "forest": {"kind": "boosting"}}, "kind"),
])
def test_bad_values_are_parameter_errors(data, kwargs, match):
    with pytest.raises(ParameterError, match=match):
        ccme.fit(FORMULA, data, propensity="forest", seed=3, tune="none", **kwargs)


def test_defaults_are_documented():
    assert check_forest_settings(None) == dict(FOREST_DEFAULTS)
    assert ccme.RIDGE_DEFAULTS["first_stage"] == "kernel"


def test_a_damaged_state_is_a_format_error(forest_fit):
    from ccme.errors import FormatError

    state = forest_fit.embedding(1).parts[0].to_state()
    bad = dict(state, W_indices=state["W_indices"] + len(state["Y0"]))
    with pytest.raises(FormatError, match="sparse"):
        ForestRidgeFoldArm.from_state(bad)
    with pytest.raises(FormatError, match="out-of-bag weights"):
        ForestRidgeFoldArm.from_state(dict(state, W0_indptr=state["W0_indptr"][:-1]))
    with pytest.raises(FormatError, match="version"):
        ForestRidgeFoldArm.from_state(dict(state, version=99))
