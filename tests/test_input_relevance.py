"""The neural estimators' input relevance (ccme.estimators.input_relevance): networks on inputs in kernel units.

Checked against its definition: the input scales are exactly the bandwidths of the kernel ridge fitted with the
same per-group search (same data, seed and folds), every network's input map is (z − mean) / σ with those σ
(a dropped column entering as 0), and a saved fit reproduces its estimates.  Small data and short training: these
check the mechanics; the accuracy it buys is measured in ``benchmarks/results/input_relevance_*``.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import ccme  # noqa: E402
from ccme.estimators.base import linear_terms  # noqa: E402
from ccme.estimators.training import Standardizer  # noqa: E402
from ccme.tuning import LAMBDA_GRID  # noqa: E402

FORMULA = "y ~ a | x1 + x2 | x3 + noise + g"
RELEVANCE = {"x_bandwidth": "ard", "v_bandwidth": "ard"}
QUICK = dict(epochs=(15, 10), patience=4, hidden=(8,), M=6, progress=False, seed=4, propensity="logistic")


@pytest.fixture(scope="module")
def data():
    frame = ccme.datasets.paper_simulation(300, seed=6)
    rng = np.random.default_rng(1)
    frame["noise"] = rng.normal(size=len(frame))          # acts on nothing
    frame["g"] = pd.Categorical(rng.choice(["p", "q", "r"], len(frame)))
    return frame


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        return ccme.fit(FORMULA, data, **{**QUICK, **kwargs})


@pytest.fixture(scope="module", params=["deep_feature", "neural_kernel"])
def fitted(request, data):
    return _fit(data, method=request.param, tune=RELEVANCE)


def _stage2_map(part):
    """The input map of a fold-arm's network on V (the stage-1 network on X is not kept after training)."""
    term = linear_terms(part)[0]
    return term.feature_map.standardizer if hasattr(term, "feature_map") else term.standardizer


def test_standardizer_divides_by_the_given_scale_and_drops_infinite_ones():
    Z = np.random.default_rng(2).normal(size=(50, 3))
    scale = np.array([0.5, np.inf, 2.0])
    got = Standardizer(Z, True, scale)(Z[:7])
    want = (Z[:7] - Z.mean(axis=0)) / scale
    np.testing.assert_array_equal(got, want)
    assert np.all(got[:, 1] == 0.0)
    np.testing.assert_array_equal(Standardizer(Z, True)(Z), (Z - Z.mean(axis=0)) / Z.std(axis=0))


def test_standardizer_clips_far_out_inputs_at_the_training_fences():
    """``far_out``: the numpy twin clips at Q1 − 3 IQR, Q3 + 3 IQR of the training column (where at most 1% lie
    beyond) and takes the mean and sd of the clipped values; a column without far-out values maps as before."""
    Z = np.random.default_rng(3).normal(size=(200, 2))
    Z[5, 1] = -1e4
    got = Standardizer(Z, True, far_out=True)
    q1, q3 = np.quantile(Z[:, 1], [0.25, 0.75])
    clipped = np.clip(Z[:, 1], q1 - 3 * (q3 - q1), q3 + 3 * (q3 - q1))
    new = np.array([[0.3, 1e6], [0.3, -2.0]])
    np.testing.assert_allclose(got(new)[:, 1], (np.clip(new[:, 1], clipped.min(), q3 + 3 * (q3 - q1))
                                                - clipped.mean()) / clipped.std(), rtol=1e-12)
    np.testing.assert_array_equal(got(new)[:, 0], Standardizer(Z, True)(new)[:, 0])
    assert clipped.min() == q1 - 3 * (q3 - q1) and abs(got(Z)).max() < 6


def test_input_scales_are_the_ridge_search_bandwidths(data, fitted):
    """The twin: a kernel ridge fit with the same search, data and seed has exactly these X and V kernels."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        ridge = ccme.fit(FORMULA, data, seed=QUICK["seed"], propensity="logistic", first_stage="kernel",
                         tune={"lam0": LAMBDA_GRID, "lam1": LAMBDA_GRID, **RELEVANCE})
    kernels = fitted.params["input_kernels"]
    assert set(kernels) == {"x", "v"}
    for role in ("x", "v"):
        np.testing.assert_array_equal(kernels[role].bandwidth_array, ridge.kernels[role].bandwidth_array)
    pd.testing.assert_frame_equal(fitted.tuning.relevance_frame(), ridge.tuning.relevance_frame())


def test_every_network_sees_its_inputs_in_units_of_the_bandwidths(fitted):
    sigma = fitted.params["input_kernels"]["v"].bandwidth_array
    V = fitted.design.V
    for arm in (1, 0):
        for part in fitted.embeddings[arm].parts:
            stage2 = _stage2_map(part)
            np.testing.assert_array_equal(stage2.sd, sigma)
            inputs = stage2(V[:5])
            finite = np.isfinite(sigma)
            np.testing.assert_allclose(inputs[:, finite], (V[:5, finite] - stage2.mean[finite]) / sigma[finite])
            assert np.all(inputs[:, ~finite] == 0.0)


def test_relevance_is_reported_and_summarised(fitted):
    frame = fitted.tuning.relevance_frame()
    assert set(frame.role) == {"X", "V"}
    assert {"x1", "x2", "x3", "noise", "g"} <= set(frame.group)
    assert {"x_bandwidth", "v_bandwidth"} <= set(fitted.tuning.chosen)
    assert any("input relevance" in note for note in fitted.tuning.notes)
    text = str(fitted.summary())
    assert "Covariate relevance" in text and "X: noise" in text
    assert "inputs in units of the learned bandwidths" in text
    assert "the networks' input scales: the kernel ridge's per covariate group" in text


def test_auto_learns_the_relevance_and_none_does_not(data):
    auto = _fit(data, method="neural_kernel")
    assert set(auto.params["input_kernels"]) == {"x", "v"}
    plain = _fit(data, method="neural_kernel", tune="none")
    assert "input_kernels" not in plain.params
    off = _fit(data, method="neural_kernel", standardize=False)    # auto, but the inputs are not standardised
    assert not off.params.get("input_kernels") and off.tuning.relevance_frame().empty


def test_one_step_has_no_first_stage_so_only_v_is_scaled(data):
    res = _fit(data, method="deep_feature", mode="onestep", tune=RELEVANCE)
    assert set(res.params["input_kernels"]) == {"v"}
    assert set(res.tuning.relevance_frame().role) == {"V"}


def test_a_saved_fit_reproduces_its_estimates(data, fitted, tmp_path):
    path = tmp_path / "fit.ccme"
    fitted.save(path)
    loaded = ccme.load(path)
    for role in ("x", "v"):
        assert loaded.params["input_kernels"][role] == fitted.params["input_kernels"][role]
    y = np.linspace(fitted.design.Y.min(), fitted.design.Y.max(), 9)
    new = data.iloc[:4]
    for arm in (1, 0):
        np.testing.assert_array_equal(loaded.density(y, newdata=new, arm=arm), fitted.density(y, newdata=new, arm=arm))


def test_when_the_search_drops_all_of_v_the_estimate_ignores_v_and_the_summary_says_so():
    """tests/test_ard.py's data (V = two noise columns, seed 1), where the ridge's V search drops both: the
    networks on V then see zeros, so every V-point gets the same estimate, and the summary says why."""
    rng = np.random.default_rng(1)
    n = 800
    frame = pd.DataFrame({"v1": rng.normal(size=n), "v2": rng.normal(size=n), "w": rng.normal(size=n),
                          "a": rng.binomial(1, 0.5, n)})
    frame["y"] = frame.a + frame.w + 0.5 * rng.normal(size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        res = ccme.fit("y ~ a | v1 + v2 | w", frame, method="deep_feature",
                       **{**QUICK, "propensity": np.full(n, 0.5), "seed": 1})
    assert np.all(np.isinf(res.params["input_kernels"]["v"].bandwidth_array))
    y = np.linspace(-2.0, 4.0, 7)
    dens = res.density(y, newdata=frame.iloc[:3], arm=1)
    np.testing.assert_allclose(dens, np.broadcast_to(dens[0], dens.shape), rtol=1e-12)
    assert "every covariate of V was dropped" in str(res.summary(n_boot=0))
    assert "tune without 'v_bandwidth'" in str(res.summary(n_boot=0))
