"""Weak overlap: the clipping warning and its counts, the effective sample size, trimming, positivity failures."""

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import DataError, ParameterError, PositivityError

sys.path.insert(0, str(Path(__file__).parent))
import naive_ccme as naive  # noqa: E402

F = "y ~ a | x1 + x2 | x3"
N = 120
# Explicit bandwidths make the fits independent of the rules' data (needed where units are perturbed).
FIXED = {"x_bandwidth": 1.5, "v_bandwidth": 1.0, "y_bandwidth": 0.8, "tune": "none",
         "clip": 0.01}  # these tests count clipping at a fixed bound (clip="auto": tests/test_propensity_defaults.py)


@pytest.fixture(scope="module")
def data():
    return pd.concat(ccme.datasets.paper_simulation(N, seed=21, truth=True), axis=1)  # with the true `ps`


def _weak_scores(data, n_low=7, n_high=4):
    """The true scores with ``n_low`` units moved to 0.002 and ``n_high`` to 0.995 (arms matching the scores)."""
    scores = np.clip(data["ps"].to_numpy(), 0.05, 0.95)
    a = data["a"].to_numpy()
    low = np.flatnonzero(a == 0)[:n_low]
    high = np.flatnonzero(a == 1)[:n_high]
    scores[low], scores[high] = 0.002, 0.995
    return scores, low, high


def _ess(w):
    return w.sum() ** 2 / np.sum(w**2)


def test_clipping_warning_counts_exactly(data):
    scores, low, high = _weak_scores(data)
    with pytest.warns(ccme.OverlapWarning, match=r"11 of 120 propensity scores were clipped to \[0.01, 0.99\] "
                                                 r"\(7 below, 4 above\)"):
        res = ccme.fit(F, data, propensity=scores, seed=1, **FIXED)
    assert (res.overlap.n_clipped_low, res.overlap.n_clipped_high) == (7, 4)
    np.testing.assert_array_equal(res.propensity_scores, scores)
    text = str(res.summary())
    assert re.search(r"Clipped\s+11 to \[0.01, 0.99\] \(7 below, 4 above\)", text)


def test_no_warning_for_modes_without_weights(data):
    scores, _, _ = _weak_scores(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ccme.OverlapWarning)
        res = ccme.fit(F, data, propensity=scores, seed=1, mode="pi", **FIXED)
    assert res.overlap.n_clipped == 11  # still counted, and shown in the summary
    assert "does not use the propensity" in str(res.summary())


def test_effective_sample_size_in_summary(data):
    scores, _, _ = _weak_scores(data)
    with pytest.warns(ccme.OverlapWarning):
        res = ccme.fit(F, data, propensity=scores, seed=1, **FIXED)
    a = data["a"].to_numpy()
    clipped = np.clip(scores, 0.01, 0.99)
    ess1, ess0 = _ess(1 / clipped[a == 1]), _ess(1 / (1 - clipped[a == 0]))
    assert res.overlap.ess[1] == pytest.approx(ess1, rel=1e-12)
    assert res.overlap.ess[0] == pytest.approx(ess0, rel=1e-12)
    assert f"treated {ess1:.1f} of {int(a.sum())}; control {ess0:.1f} of {int((1 - a).sum())}" in str(res.summary())


def test_trim_drops_units_from_the_second_stage(data):
    """The folds' second stages lose exactly the units outside [trim, 1 − trim]; the fit is the closed form on them."""
    scores, low, high = _weak_scores(data)
    trim = 0.05
    with pytest.warns(ccme.OverlapWarning):
        plain = ccme.fit(F, data, propensity=scores, seed=3, **FIXED)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ccme.OverlapWarning)  # trim ≥ clip: nothing left to clip, no warning
        res = ccme.fit(F, data, propensity=scores, seed=3, trim=trim, **FIXED)
    outside = (scores < trim) | (scores > 1 - trim)
    assert res.overlap.n_trimmed_low == int(np.sum(scores < trim)) >= 7
    assert res.overlap.n_trimmed_high == int(np.sum(scores > 1 - trim)) >= 4
    assert res.overlap.n_clipped == 0 and res.overlap.trim == trim
    np.testing.assert_array_equal(res.overlap.kept, ~outside)
    for before, after in zip(plain.folds, res.folds):
        np.testing.assert_array_equal(after.nuisance, before.nuisance)
        np.testing.assert_array_equal(after.target, before.target[~outside[before.target]])
    V = data[["x1", "x2"]].to_numpy()[:5]
    grid = np.linspace(-5, 25, 40)
    for arm in (1, 0):
        np.testing.assert_allclose(res.density(grid, newdata=data.iloc[:5], arm=arm, normalize=False),
                                   naive.density(res, grid[:, None], V, arm, np.clip(scores, 0.01, 0.99)),
                                   rtol=1e-8, atol=1e-12)
    text = str(res.summary())
    n_out = int(outside.sum())
    assert re.search(rf"Trimmed\s+{n_out} outside \[0.05, 0.95\] \({res.overlap.n_trimmed_low} below, "
                     rf"{res.overlap.n_trimmed_high} above\) dropped from the second stage", text)
    a = data["a"].to_numpy()
    kept = ~outside
    assert res.overlap.ess[1] == pytest.approx(_ess(1 / scores[kept & (a == 1)]), rel=1e-12)


def test_trimmed_units_have_no_influence_on_ipw(data):
    """IPW uses no first stage, so a trimmed unit's outcome and V cannot matter at all."""
    scores, low, high = _weak_scores(data)
    res = ccme.fit(F, data, propensity=scores, seed=4, trim=0.03, mode="ipw", **FIXED)
    changed = data.copy()
    out = np.concatenate([low, high])
    changed.loc[changed.index[out], "y"] = 1e3
    changed.loc[changed.index[out], "x1"] = -50.0
    other = ccme.fit(F, changed, propensity=scores, seed=4, trim=0.03, mode="ipw", **FIXED)
    grid = np.linspace(-5, 25, 30)
    np.testing.assert_allclose(other.density(grid, newdata=data.iloc[:4], normalize=False),
                               res.density(grid, newdata=data.iloc[:4], normalize=False), rtol=1e-12, atol=1e-15)


def test_trim_below_clip_clips_the_kept_units(data):
    """trim < clip: units in [trim, clip) are kept and clipped; the counts concern the kept units."""
    scores, low, high = _weak_scores(data)
    scores[low[:3]] = 0.005  # kept by trim=0.003, clipped at 0.01; the other 4 low units (0.002) are trimmed
    with pytest.warns(ccme.OverlapWarning, match=r"7 of 116 propensity scores were clipped .* \(3 below, 4 above\)"):
        res = ccme.fit(F, data, propensity=scores, seed=1, trim=0.003, **FIXED)
    assert (res.overlap.n_trimmed_low, res.overlap.n_trimmed_high) == (4, 0)
    assert (res.overlap.n_clipped_low, res.overlap.n_clipped_high) == (3, 4)


@pytest.mark.parametrize("trim", [-0.1, 0.5, 0.7, True, "0.1", None])
def test_trim_must_be_a_number_in_range(data, trim):
    with pytest.raises(ParameterError, match=r"`trim` must be a number in \[0, 0.5\)"):
        ccme.fit(F, data, seed=1, trim=trim)


def test_trim_that_empties_an_arm_is_a_data_error(data):
    scores = np.where(data["a"].to_numpy() == 1, 0.96, 0.5)
    scores[:3] = 0.5
    with pytest.raises(DataError, match=r"trim=0.05 leaves \d treated unit\(s\) in the second stage of fold"):
        ccme.fit(F, data, propensity=scores, seed=1, trim=0.05, **FIXED)


def _separated(n, kind, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    if kind == "threshold":
        a = (x > 0).astype(int)
    elif kind == "categorical":
        a = rng.integers(0, 2, size=n)
        x = np.where(a == 1, "yes", "no")
    else:  # "two covariates": a is a deterministic function of x and w together
        w = rng.normal(size=n)
        a = (x + w > 0).astype(int)
        return pd.DataFrame({"y": rng.normal(size=n), "a": a, "x": x, "w": w, "v": rng.normal(size=n)})
    return pd.DataFrame({"y": rng.normal(size=n), "a": a, "x": x, "w": rng.normal(size=n), "v": rng.normal(size=n)})


@pytest.mark.parametrize("propensity, kind", [
    ("logistic", "threshold"), ("logistic", "categorical"), ("logistic", "two covariates"),
    ("forest", "threshold"), ("forest", "categorical"),
])
def test_perfect_prediction_is_a_positivity_error(propensity, kind):
    """Both learners, small and moderate n: a forest's scores stay inside the clipping bounds, the AUC does not.

    The check reads the cross-fitted scores of the chosen learner, so it sees
    what that learner can learn: the depth-4 forest does not learn the oblique
    boundary x + w > 0 (cross-fitted AUC 0.87 at n = 40, 0.96 at n = 200,
    measured), and "two covariates" is therefore tested with the logistic model only.
    """
    for n in (40, 200):
        data = _separated(n, kind)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(PositivityError, match="positivity fails"):
                ccme.fit("y ~ a | v | x + w", data, seed=1, propensity=propensity, tune="none",
                         trim=0.1 if n == 40 else 0.0)  # trimming does not rescue it


def test_known_scores_that_separate_the_arms_are_a_positivity_error(data):
    scores = np.where(data["a"].to_numpy() == 1, 0.999, 0.001)
    with pytest.raises(PositivityError, match=r"AUC = 1.000, and 120 of 120 lie outside \[0.01, 0.99\]"):
        ccme.fit(F, data, propensity=scores, seed=1, **FIXED)


def test_strong_but_imperfect_confounding_is_not_an_error(data):
    """The paper's design (cross-fitted AUC about 0.8) fits with either learner."""
    for propensity in ("logistic", "forest"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ccme.OverlapWarning)
            res = ccme.fit(F, data, seed=1, propensity=propensity, tune="none")
        assert np.isfinite(res.mean()).all()
