"""The public structure of the redesign: Embedding, the one API, immutability, tidy tables, pseudo-outcomes, grids."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import grids, pseudo
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.errors import DataError, ParameterError

F = "y ~ a | x1 + x2 | x3"


@pytest.fixture(scope="module")
def data():
    return paper_simulation(300, seed=4)


@pytest.fixture(scope="module")
def res(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        return ccme.fit(F, data, seed=2, tune="none", propensity="forest")


def test_result_methods_delegate_to_the_embedding(res, data):
    grid = res.default_grid(80)
    emb = res.embedding(1)
    assert isinstance(emb, ccme.Embedding) and emb.arm == 1
    V = res.design.encode_v(data.head(4))
    np.testing.assert_array_equal(res.density(grid, newdata=data.head(4)), emb.density(grid, v=V))
    np.testing.assert_array_equal(res.density(grid, newdata=data.head(4)), emb.density(grid, v=data.head(4)))
    np.testing.assert_array_equal(res.cdf(grid, newdata=data.head(4), arm=0), res.embedding(0).cdf(grid, v=V))
    np.testing.assert_array_equal(res.mean(newdata=data.head(4)), emb.mean(v=V)[:, 0])
    np.testing.assert_array_equal(res.mmd(newdata=data.head(4)), emb.mmd(res.embedding(0), v=V))
    np.testing.assert_allclose(emb.mmd_squared(res.embedding(0), v=V), emb.mmd(res.embedding(0), v=V) ** 2,
                               rtol=1e-12)


def test_newdata_none_is_the_training_data_everywhere(res):
    grid = res.default_grid(30)
    np.testing.assert_array_equal(res.density(grid), res.density(grid, newdata=res.design.v_frame))
    assert res.mean().shape == (res.n,)
    assert res.quantile(0.5).shape == (res.n,)
    with warnings.catch_warnings():  # a few training rows of this small fit have a negative variance estimate
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        assert len(res.tidy(newdata=None)) == 2 * 2 * res.n
    # the summarising methods default to the V-profiles
    assert set(res.effect()["profile"]) == set(res.profiles().index)
    with pytest.raises(ParameterError, match="profiles"):
        res.plot(newdata=None)


def test_public_methods_are_keyword_only_after_the_first_argument(res):
    grid = res.default_grid(10)
    with pytest.raises(TypeError):
        res.density(grid, PAPER_PROFILES)
    with pytest.raises(TypeError):
        res.mean(PAPER_PROFILES)
    with pytest.raises(TypeError):
        res.effect(PAPER_PROFILES)


def test_arm_accepts_treatment_labels():
    data = paper_simulation(300, seed=4)
    labelled = data.assign(a=np.where(data["a"] == 1, "smoker", "non-smoker"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        res = ccme.fit(F, labelled, treated="smoker", seed=2, tune="none", propensity="forest")
    grid = res.default_grid(20)
    np.testing.assert_array_equal(res.density(grid, newdata=PAPER_PROFILES, arm="smoker"),
                                  res.density(grid, newdata=PAPER_PROFILES, arm=1))
    np.testing.assert_array_equal(res.mean(newdata=PAPER_PROFILES, arm="non-smoker"),
                                  res.mean(newdata=PAPER_PROFILES, arm=False))
    with pytest.raises(ParameterError, match="'smoker' or 'non-smoker'"):
        res.mean(arm="placebo")
    with pytest.raises(ParameterError):
        res.mean(arm=2)


def test_results_parameters_and_embeddings_are_immutable(res):
    with pytest.raises(Exception):
        res.mode = "ipw"
    with pytest.raises(TypeError):
        res.params["lam0"][1] = 5.0
    with pytest.raises(TypeError):
        res.kernels["y"] = None
    with pytest.raises(TypeError):
        res.timing["total"] = 0.0
    with pytest.raises(AttributeError, match="immutable"):
        res.embedding(1).y_kernel = res.kernels["x"]
    emb = res.embedding(1)
    wider = emb.with_readout(ccme.kernels.Kernel("gaussian", (3.0,)))
    assert emb.y_kernel != wider.y_kernel and wider.parts is emb.parts  # the fitted weights are shared


def test_tidy_tables_use_the_usual_columns(res):
    assert list(res.tidy().columns) == ["profile", "arm", "outcome", "term", "estimate"]
    eff = res.effect(q=[0.5], y=[0.0, 3.0], n_boot=49)
    assert list(eff.columns) == ["profile", "term", "outcome", "at", "estimate", "std_error", "df", "conf_low",
                                 "conf_high"]
    assert set(eff.term) == {"mean_diff", "qte", "cdf_diff", "mmd", "kolmogorov", "wasserstein", "es_lower", "es_upper"}
    assert eff.loc[eff.term == "qte", "at"].eq(0.5).all()
    assert sorted(eff.loc[eff.term == "cdf_diff", "at"].unique()) == [0.0, 3.0]
    assert eff.loc[eff.term.str.startswith("es_"), "at"].eq(0.1).all()
    assert eff.loc[~eff.term.isin(["qte", "cdf_diff", "es_lower", "es_upper"]), "at"].isna().all()
    assert (eff.conf_low < eff.conf_high).all() and (eff.std_error > 0).all()  # bias-reduced: not centred on estimate
    plain = res.effect(q=[0.5], y=[0.0, 3.0], n_boot=49, target="regularised")
    assert (plain.conf_low <= plain.estimate).all() and (plain.estimate <= plain.conf_high).all()
    assert eff.attrs["level"] == 0.95 and eff.attrs["n_boot"] == 49
    assert list(res.effect(n_boot=0).columns) == ["profile", "term", "outcome", "at", "estimate"]
    bands = res.bands(0.9, newdata=PAPER_PROFILES, y=res.default_grid(20), n_boot=29, seed=1)
    frame = bands.to_frame()
    assert {"estimate", "std_error", "conf_low", "conf_high"} <= set(frame.columns) and len(frame) == 40
    assert repr(bands).startswith("<ccme.Bands: 90% density bands, arm 1, 2 V-point(s)") and "covers" in repr(bands)
    test = res.test_effect(newdata=PAPER_PROFILES, n_boot=29)
    assert repr(test).startswith("<ccme.EffectTest:") and "squared MMD" in repr(test)
    table = test.to_frame()
    assert list(table.columns) == ["profile", "statistic", "p_value"] and table["profile"].iloc[-1] == "global"
    assert ccme.Bands is type(bands) and ccme.EffectTest is type(test)


def test_cdf_and_quantile_do_not_warn_about_a_variance(res, recwarn):
    """Only var/sd report a negative variance; cdf and quantile never compute one."""
    far = pd.DataFrame({"x1": [8.0, -6.0], "x2": [-6.0, 8.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ccme.CcmeWarning)
        res.cdf(res.default_grid(50), newdata=PAPER_PROFILES)
        res.quantile([0.1, 0.9], newdata=PAPER_PROFILES)
        res.mean(newdata=PAPER_PROFILES)
    del far


def test_known_scores_are_named_as_such_in_the_summary(data):
    res = ccme.fit(F, data, seed=2, tune="none", propensity=np.full(len(data), 0.4))
    text = str(res.summary())
    assert "Model        known scores" in text and "cross-fitted" not in text.split("Propensity:")[1].split("\n\n")[0]


@pytest.mark.parametrize("mode", pseudo.MODES)
def test_pseudo_outcome_table(mode):
    """The coefficients (a, b) of ξ = aφ(Y) + bμ̂₀(X) are the paper's (eq. pseudo_outcome and its baselines)."""
    A = np.array([1, 0, 1, 1, 0, 0])
    target = np.array([0, 1, 2, 4])
    scores = np.array([0.25, 0.5, 0.8, 0.4])
    p1 = pseudo.pseudo_outcome(mode, 1, A=A, target=target, scores_target=scores)
    p0 = pseudo.pseudo_outcome(mode, 0, A=A, target=target, scores_target=scores)
    omega1 = np.array([1 / 0.25, 0, 1 / 0.8, 0])
    omega0 = np.array([0, 1 / 0.5, 0, 1 / 0.6])
    if mode == "dr":
        np.testing.assert_allclose(p1.a, omega1) and np.testing.assert_allclose(p1.b, 1 - omega1)
        np.testing.assert_allclose(p0.a, omega0) and np.testing.assert_allclose(p0.b, 1 - omega0)
    elif mode == "ipw":
        np.testing.assert_allclose(p1.a, omega1) and np.testing.assert_array_equal(p1.b, 0)
    elif mode == "pi":
        np.testing.assert_array_equal(p1.a, 0) and np.testing.assert_array_equal(p1.b, 1)
    else:
        np.testing.assert_array_equal(p1.rows, [0, 2]) and np.testing.assert_array_equal(p0.rows, [1, 4])
        np.testing.assert_array_equal(p1.a, 1) and np.testing.assert_array_equal(p1.b, 0)
    own, first = np.arange(8.0).reshape(-1, 2)[: len(p1.rows)], np.ones((len(p1.rows), 2))
    np.testing.assert_allclose(p1.features(own, first), p1.a[:, None] * own + p1.b[:, None] * first)
    with pytest.raises(ParameterError, match="`mode`"):
        pseudo.check_mode("aipw")


def test_one_margin_rule_for_every_grid(res):
    scale = grids.kernel_scale([res.outcome_kernel(1), res.outcome_kernel(0)])
    y = res.design.Y[:, 0]
    for grid in (res.default_grid(), res.fine_grid()):
        assert grid[0] == pytest.approx(y.min() - grids.MARGIN * scale)
        assert grid[-1] == pytest.approx(y.max() + grids.MARGIN * scale)
    laplace = ccme.kernels.Kernel("laplace", (1.0,))
    assert grids.kernel_scale(laplace) == 2.0
    with pytest.raises(DataError, match="one-dimensional"):
        grids.outcome_grid(np.zeros((3, 2)), laplace, size=5)
