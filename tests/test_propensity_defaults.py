"""The nuisance stage: propensity="auto" (a Super Learner by log-loss), clip="auto" (Crump), Hájek weights.

The Super Learner sees each fold's nuisance part only; its reported
log-losses are those of the out-of-fold predictions, and its weights
minimise their mixture's log-loss; it leans on trees for a step-function
propensity and on the penalised logistic regression for a linear logit.
Crump et al.'s clipping threshold has its closed form on known cases, and
warns only when a unit would dominate its arm.  Normalised weights average
to one per fold and arm; the report survives save/load; bad values are
ParameterErrors naming them."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit
from sklearn.metrics import log_loss as sk_log_loss

import ccme
import ccme.propensity_selection as ps
from ccme import FormatError, ParameterError
from ccme.crossfit import make_folds
from ccme.propensity import AUTO_CLIP_MAX, CLIP_RULE, crump_alpha, resolve_clip, weight_share_clip
from ccme.pseudo import hajek_scores, pseudo_outcome

F = "y ~ a | x1 | x2 + x3"
DEFAULT_NORMALIZE = False


def _data(n=300, seed=3, logit=None):
    """y, a, x1..x4; ``logit`` maps X to the true propensity (default: a linear logit in x2, x3)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    p = expit(0.8 * X[:, 1] - 0.5 * X[:, 2]) if logit is None else logit(X)
    a = rng.binomial(1, p)
    y = X[:, 0] + X[:, 1] + a + rng.standard_normal(n)
    frame = pd.DataFrame(X, columns=["x1", "x2", "x3", "x4"])
    frame.insert(0, "a", a)
    frame.insert(0, "y", y)
    return frame


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def res(data):
    return ccme.fit(F, data, seed=7, tune="none", propensity="auto")


# -- the defaults --------------------------------------------------------------
def test_auto_is_a_stack_fitted_on_each_fold(res):
    assert res.propensity.startswith("auto")
    assert res.overlap.clip_rule.startswith("auto")
    report = res.propensity_report
    assert len(report.selections) == res.n_folds
    for fold, selection in zip(res.folds, report.selections):
        assert selection.candidates == ps.CANDIDATES
        assert selection.n_nuisance == len(fold.nuisance)
        assert selection.chosen in ps.CANDIDATES and sum(selection.weights) == pytest.approx(1.0, abs=1e-12)
        assert selection.combine == "stack" and min(selection.weights) >= 0
        assert all(np.isfinite(selection.log_loss))
        assert selection.combined_log_loss <= min(selection.log_loss) + 1e-9


def test_the_defaults_are_those_of_fit():
    """One propensity stage in ccme.fit, before the method's estimator: the same defaults for every method."""
    import inspect

    params = inspect.signature(ccme.fit).parameters
    assert params["propensity"].default == "forest" and params["clip"].default == "auto"
    assert params["normalize_weights"].default is DEFAULT_NORMALIZE


def test_fit_is_deterministic_given_the_seed(data, res):
    again = ccme.fit(F, data, seed=7, tune="none", propensity="auto")
    np.testing.assert_array_equal(again.propensity_scores, res.propensity_scores)
    assert again.propensity_report.selections == res.propensity_report.selections


# -- the selection sees the nuisance part only ------------------------------------
def test_selection_uses_only_nuisance_rows(data, monkeypatch):
    """Every fit and every cross-validation prediction of "auto" is on rows of the fold's nuisance part."""
    frame = data.assign(rid=1000.0 + np.arange(len(data)))  # the row, recognisable among the covariates
    fits, predictions = [], []
    real_fit, real_proba = ps._quiet_fit, ps._proba

    def rows_of(X):
        X = np.asarray(X)
        return X[:, np.flatnonzero(X.min(axis=0) >= 1000)[0]].astype(int) - 1000

    def spy_fit(model, X, y, **kw):
        fits.append(rows_of(X))
        return real_fit(model, X, y, **kw)

    def spy_proba(model, X, *args, **kw):
        predictions.append(rows_of(X))
        return real_proba(model, X, *args, **kw)

    monkeypatch.setattr(ps, "_quiet_fit", spy_fit)
    monkeypatch.setattr(ps, "_proba", spy_proba)
    res = ccme.fit("y ~ a | x1 | x2 + x3 + rid", frame, seed=7, tune="none", propensity_covariates=["rid", "x2", "x3"],
                   propensity="auto")
    nuisance = [set(f.nuisance) for f in res.folds]
    targets = [set(f.target) for f in res.folds]
    assert len(fits) > 2 * len(ps.CANDIDATES)
    for rows in fits:  # each fit: inside one fold's nuisance part
        assert any(set(rows) <= part for part in nuisance)
    # the target parts are predicted only by the final models (one prediction of the whole part per fold)
    for rows in predictions:
        part = set(rows)
        assert any(part <= nuis for nuis in nuisance) or part in targets


# -- the reported log-losses -----------------------------------------------------
def test_reported_log_losses_are_those_of_the_out_of_fold_predictions(data):
    X = data[["x1", "x2", "x3"]].to_numpy()
    A = data["a"].to_numpy()
    model = ps.AutoPropensity(combine="select", random_state=11).fit(X, A)
    rows, splits, oof = model.cv_rows_, model.cv_splits_, model.cv_predictions_
    assert len(splits) == ps.SELECTION_FOLDS and np.array_equal(rows, np.arange(len(A)))
    for j, name in enumerate(model.selection_.candidates):
        assert model.selection_.log_loss[j] == pytest.approx(sk_log_loss(A[rows], oof[:, j]), rel=1e-12)
    # boosting's out-of-fold predictions: its learner refitted on each training part
    j = model.selection_.candidates.index("boosting")
    for train, test in splits:
        refit = ps.make_learner("boosting", model.cv_seeds_["boosting"]).fit(X[train], A[train])
        np.testing.assert_allclose(oof[test, j], refit.predict_proba(X[test])[:, 1], rtol=0, atol=1e-12)
    # the chosen candidate is the one of smallest CV log-loss, and it predicts
    best = model.selection_.candidates[int(np.argmin(model.selection_.log_loss))]
    assert model.selection_.chosen == best and len(model.models_) == 1


def test_stack_weights_minimise_the_cross_validated_log_loss(data):
    """The stack's weights beat every point of a 0.05-grid over the simplex (the problem is convex)."""
    X = data[["x1", "x2", "x3"]].to_numpy()
    A = data["a"].to_numpy()
    model = ps.AutoPropensity(random_state=11).fit(X, A)
    oof, rows = model.cv_predictions_, model.cv_rows_
    w = np.asarray(model.selection_.weights)
    best = ps.log_loss(A[rows], oof @ w)
    assert best == pytest.approx(model.selection_.combined_log_loss, rel=1e-12)
    steps = np.linspace(0, 1, 21)
    grid = [(a, b, 1 - a - b) for a in steps for b in steps if a + b <= 1 + 1e-12]
    assert best <= min(ps.log_loss(A[rows], oof @ np.clip(g, 0, 1)) for g in grid) + 1e-9
    # the final model: the candidates of non-zero weight, refitted, mixed with these weights
    assert [round(wt, 12) for wt, _ in model.models_] == [round(x, 12) for x in w if x > 0]
    p = model.predict_proba(X[:5])[:, 1]
    mix = sum(wt * m.predict_proba(X[:5])[:, 1] for wt, m in model.models_)
    np.testing.assert_allclose(p, mix, rtol=0, atol=1e-14)


def test_selection_subsamples_large_nuisance_parts():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((900, 3))
    A = rng.binomial(1, expit(X[:, 0]))
    model = ps.AutoPropensity(max_units=300, random_state=1).fit(X, A)
    assert model.selection_.n_units == len(model.cv_rows_) <= 301 and model.selection_.n_nuisance == 900
    assert abs(A[model.cv_rows_].mean() - A.mean()) < 0.01  # stratified


@pytest.mark.parametrize("case, expected", [
    ("step", {"boosting", "forest"}),
    ("linear", {"logistic_cv"}),
])
def test_auto_picks_the_right_kind_of_model(case, expected):
    """A step-function propensity (an interaction of thresholds) → trees; a linear logit → the logistic model.

    "Picks": the candidate of largest weight in the stack, on every fold.
    """
    def step(X):
        return 0.1 + 0.8 * ((X[:, 1] > 0) & (X[:, 2] > 0))

    def linear(X):
        return expit(1.2 * X[:, 1] - 0.8 * X[:, 2] + 0.5 * X[:, 3])

    frame = _data(n=1200, seed=5, logit=step if case == "step" else linear)
    res = ccme.fit(F + " + x4", frame, seed=2, tune="none", propensity="auto")
    assert set(res.propensity_report.chosen) <= expected, res.propensity_report.cv_log_loss()


# -- the clipping rule and its warning ----------------------------------------------
def test_weight_share_clip_closed_form():
    """The warning's criterion: one unit at p = 0.001 among m − 1 at ½.

    Clipped at c, the largest weight is 1/c and the total 1/c + 2(m − 1), so
    1/c = total/√m gives 1 + 2c(m − 1) = √m, c = 1/(2(√m + 1)).
    """
    for m in (100, 400, 2500):
        p = np.r_[0.001, np.full(m - 1, 0.5)]
        c = weight_share_clip(p)
        assert c == pytest.approx(1.0 / (2.0 * (np.sqrt(m) + 1.0)), rel=1e-12)
        w = 1.0 / np.maximum(p, c)
        assert w.max() == pytest.approx(w.sum() / np.sqrt(m), rel=1e-12)
    assert weight_share_clip(np.full(50, 0.3)) == 0.0  # good overlap: nothing to clip
    assert weight_share_clip(np.r_[0.0, np.full(99, 0.5)]) > 0  # a zero score is clipped, not infinite


def test_crump_alpha_closed_form():
    """Crump et al.'s α where their equation γ = 2 E[g | g ≤ γ] has a closed-form root (g = 1/(e(1 − e))).

    Half the units at g = 4 (e = ½), half at g = 16, one at e = 0.001: the
    kept units' mean g is 10, so γ = 20 and α = ½ − √(¼ − 1/20) = ½ − √0.2.
    """
    e16 = (1.0 - np.sqrt(0.75)) / 2.0  # e(1 − e) = 1/16
    scores = np.r_[np.full(50, 0.5), np.full(50, e16), 0.001]
    assert crump_alpha(scores) == pytest.approx(0.5 - np.sqrt(0.2), rel=1e-12)
    A = np.r_[np.zeros(50), np.ones(51)].astype(int)
    assert resolve_clip("auto", scores, A) == (pytest.approx(0.5 - np.sqrt(0.2), rel=1e-12), CLIP_RULE)
    # one unit at e = 0.01 among units at ½: γ = 8, α = ½ − √(1/8) = 0.146 > the cap 0.1
    wide = np.r_[np.full(99, 0.5), 0.01]
    assert crump_alpha(wide) == pytest.approx(0.5 - np.sqrt(0.125), rel=1e-12)
    assert resolve_clip("auto", wide, np.r_[np.zeros(50), np.ones(50)].astype(int))[0] == AUTO_CLIP_MAX
    # good overlap (sup g ≤ 2 mean g): α = 0, the clip is the floor 1/n, below every score
    good = np.random.default_rng(1).uniform(0.3, 0.7, 200)
    assert crump_alpha(good) == 0.0 and resolve_clip("auto", good, (good > 0.5).astype(int))[0] == 1 / 200
    # mostly extreme scores (α = 0 again, since sup g ≤ 2 mean g): the floor keeps the weights finite
    extreme = np.r_[np.zeros(60), np.ones(60), np.full(20, 0.5)]
    assert crump_alpha(extreme) == 0.0 and resolve_clip("auto", extreme, (extreme > 0.5).astype(int))[0] == 1 / 140
    assert resolve_clip(0.02, wide, np.zeros(100, dtype=int)) == (0.02, "given")


def test_clip_auto_warns_only_when_a_unit_would_dominate_its_arm(data):
    """Crump's clipping is routine (no warning); a unit holding > 1/√m of its arm's weight unclipped warns."""
    A = data["a"].to_numpy()
    scores = np.where(A == 1, 0.5, 0.35)
    scores[np.flatnonzero(A == 1)[:5]] = 0.06  # Crump clips them (g = 17.7 > 2 mean g); none dominates
    with warnings.catch_warnings():
        warnings.simplefilter("error", ccme.OverlapWarning)
        res = ccme.fit(F, data, propensity=scores, seed=1, tune="none")
    assert res.overlap.n_clipped == 5 and 0.06 < res.clip <= AUTO_CLIP_MAX
    scores[np.flatnonzero(A == 1)[0]] = 1e-4  # unclipped weight 10⁴: one unit would dominate the treated arm
    with pytest.warns(ccme.OverlapWarning, match=r"by clip='auto' \(Crump et al.'s rule\).*1/sqrt\(m\)"):
        ccme.fit(F, data, propensity=scores, seed=1, tune="none")


def test_clip_auto_is_reported(res):
    text = str(res.summary())
    assert re.search(r"Clipped\s+\d+ to \[[\d.e-]+, (1 - )?[\d.e-]+\] .*clip auto", text)
    assert res.clip == res.overlap.clip


def test_summary_writes_an_upper_bound_near_one_as_one_minus_c():
    """A clip of 0.00025 has the upper end 0.99975, which 3 digits would show as "1": it reads "1 - 0.00025"."""
    from ccme.summary import _one_minus

    assert _one_minus(0.00025, ".3g") == "1 - 0.00025"
    assert _one_minus(0.01, ".3g") == "0.99" and _one_minus(0.05, "g") == "0.95"
    assert _one_minus(0.0, ".3g") == "1"


# -- Hájek weights ------------------------------------------------------------------
def test_hajek_weights_average_to_one_per_fold_and_arm(data):
    A = data["a"].to_numpy()
    scores = np.clip(np.random.default_rng(2).uniform(0.02, 0.98, len(A)), 0.01, 0.99)
    folds = make_folds(len(A), 3, np.random.default_rng(4))
    normalised = hajek_scores(scores, A, folds)
    for fold in folds:
        for arm in (1, 0):
            raw = pseudo_outcome("dr", arm, A=A, target=fold.target, scores_target=scores[fold.target])
            ref = pseudo_outcome("dr", arm, A=A, target=fold.target, scores_target=scores[fold.target],
                                 normalize=True)
            new = pseudo_outcome("ipw", arm, A=A, target=fold.target, scores_target=normalised[fold.target])
            assert ref.a.mean() == pytest.approx(1.0, rel=1e-12)
            assert raw.a.mean() != pytest.approx(1.0, rel=1e-6)
            np.testing.assert_allclose(new.a, ref.a, rtol=1e-12)
            np.testing.assert_allclose(ref.b, 1.0 - ref.a)


def test_normalize_weights_option(data, res):
    res_h = ccme.fit(F, data, seed=7, tune="none", normalize_weights=True, propensity="auto")
    assert res_h.overlap.normalized and not res.overlap.normalized
    assert "Hajek" in str(res_h.summary())
    np.testing.assert_array_equal(res_h.propensity_scores, res.propensity_scores)
    grid = res.default_grid(50)
    assert not np.allclose(res_h.density(grid, arm=0), res.density(grid, arm=0))


# -- report, summary, plot, save/load --------------------------------------------------
def test_calibration_report_matches_a_direct_computation(res):
    report = res.propensity_report
    s, A = res.propensity_scores, res.design.A
    assert report.brier == pytest.approx(np.mean((s - A) ** 2), rel=1e-12)
    assert report.log_loss == pytest.approx(sk_log_loss(A, s), rel=1e-10)
    table = report.reliability()
    assert table["count"].sum() == res.n
    seen = table["count"] > 0
    inside = (s >= 0.1) & (s < 0.2)
    if inside.any():
        row = table[(table["lower"] == 0.1)].iloc[0]
        assert row["fraction_treated"] == pytest.approx(A[inside].mean())
    assert np.all(np.isnan(table.loc[~seen, "mean_score"]))


def test_summary_rows(res):
    text = str(res.summary())
    assert re.search(r"Model\s+auto: stacked \w+ [01]\.\d\d.* \(CV log-loss 0\.\d+; logistic_cv 0\.\d+, boosting", text)
    assert re.search(r"Calibration\s+Brier 0\.\d+", text)


def test_plot_calibration(res):
    import matplotlib.pyplot as plt

    ax = res.plot_calibration()
    assert "Brier" in ax.get_title()
    plt.close("all")


def test_save_load_keeps_the_report(res, tmp_path):
    path = tmp_path / "fit.ccme"
    res.save(path)
    back = ccme.load(path)
    a, b = res.propensity_report, back.propensity_report
    assert b.selections == a.selections and b.learner == a.learner
    assert (b.brier, b.brier_constant, b.log_loss) == (a.brier, a.brier_constant, a.log_loss)
    for name in ("bin_edges", "bin_score", "bin_treated", "bin_count"):
        np.testing.assert_array_equal(getattr(b, name), getattr(a, name))
    assert back.overlap.clip_rule == res.overlap.clip_rule and back.clip == res.clip
    assert str(back.summary()) == str(res.summary())


def test_an_overlap_state_of_version_1_asks_to_refit(res):
    state = res.overlap.to_state()
    state["version"] = 1
    with pytest.raises(FormatError, match="version"):
        type(res.overlap).from_state(state)


# -- bad values --------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, text", [
    ({"propensity": "boost"}, "'boost'"),
    ({"propensity": "Auto"}, "'Auto'"),
    ({"clip": "sometimes"}, "'sometimes'"),
    ({"clip": 0.7}, "0.7"),
    ({"clip": True}, "True"),
    ({"normalize_weights": "yes"}, "'yes'"),
])
def test_bad_values_are_parameter_errors(data, kwargs, text):
    with pytest.raises(ParameterError, match=re.escape(text)):
        ccme.fit(F, data, seed=1, tune="none", **kwargs)


@pytest.mark.parametrize("kwargs, text", [
    ({"combine": "vote"}, "'vote'"),
    ({"candidates": ("logistic_cv", "svm")}, "'svm'"),
])
def test_bad_auto_options_are_parameter_errors(kwargs, text):
    with pytest.raises(ParameterError, match=re.escape(text)):
        ps.AutoPropensity(**kwargs).fit(np.zeros((20, 1)), np.r_[np.zeros(10), np.ones(10)])


def test_named_learners_and_objects_still_work(data):
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        for spec in ("logistic", "logistic_cv", "boosting", "forest", LogisticRegression()):
            res = ccme.fit(F, data, seed=1, tune="none", propensity=spec, clip=0.01)
            assert res.propensity_report.selections == () and res.clip == 0.01
            assert res.overlap.clip_rule == "given"


def test_crump_alpha_with_sampling_weights_is_the_rule_on_the_weighted_population():
    """Integer sampling weights: α equals the rule on the sample with each unit repeated w times (two and three arms)."""
    rng = np.random.default_rng(4)
    e = np.r_[rng.uniform(0.05, 0.95, 150), 0.004, 0.996]
    w = rng.integers(1, 5, e.size)
    replicated = np.repeat(e, w)
    assert crump_alpha(e, w) == pytest.approx(crump_alpha(replicated), rel=1e-12)
    assert crump_alpha(e, w) != pytest.approx(crump_alpha(e), rel=1e-6)  # the weights matter here
    np.testing.assert_equal(crump_alpha(e, np.ones(e.size)), crump_alpha(e))
    P = rng.dirichlet([2.0, 2.0, 2.0], 120)
    P[0] = [0.002, 0.499, 0.499]
    w3 = rng.integers(1, 4, len(P))
    assert crump_alpha(P, w3) == pytest.approx(crump_alpha(np.repeat(P, w3, axis=0)), rel=1e-12)
    # resolve_clip passes the weights of the units it keeps (the floor 1/n counts units, not weight)
    A = (rng.uniform(size=e.size) < e).astype(int)
    clip, rule = resolve_clip("auto", e, A, sampling_weights=w)
    assert rule == CLIP_RULE and clip == min(max(crump_alpha(e, w), 1 / e.size), AUTO_CLIP_MAX)
