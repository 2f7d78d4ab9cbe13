"""Sampling weights (``fit(weights=)``, ccme.sampling_weights): twins, frequency weights, errors, save/load, accuracy."""

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme.crossfit import Fold
from ccme.errors import DataError, FormatError, ParameterError
from ccme.estimators.base import CrossFitData
from ccme.estimators.lowrank import LowRankFold, LowRankFoldArm
from ccme.formula import build_design, parse_formula
from ccme.sampling_weights import SamplingWeights, kish, resolve_weights

FORMULA = "y ~ a | x1 + x2 | x3 + x4"
GRID = np.linspace(-5.0, 25.0, 7)


@pytest.fixture(scope="module")
def data():
    frame = ccme.datasets.paper_simulation(300, seed=5)
    frame["w"] = np.random.default_rng(3).uniform(0.3, 3.0, len(frame))
    return frame


def _fit(data, **kwargs):
    kwargs = {"seed": 2, "tune": "none", **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, **kwargs)


@pytest.fixture(scope="module")
def weighted(data):
    return _fit(data, weights="w")


# -- the weighted low-rank fold-arm against a materialised twin ------------------------------------------------
def _twin(part: LowRankFoldArm, V_eval):
    """The weighted Nyström ridge materialised: K = ΦΦᵀ, β(v) = W (KW + sI)⁻¹ k(v), S(x) = W₀(K₀W₀ + s₀I)⁻¹ k₀(x)."""
    Phi = part.Phi.astype(np.float64)
    w1, w0 = part.w1, part.w0
    n = len(Phi)
    K = Phi @ Phi.T
    k_eval = Phi @ part.v_map(V_eval).T
    beta = w1[:, None] * np.linalg.solve(K * w1[None, :] + part.shift * np.eye(n), k_eval)
    Psi0 = part.x_map(part.X0).astype(np.float32).astype(np.float64)
    Psi1 = part.x_map(part.X1)
    m = len(Psi0)
    K0 = Psi0 @ Psi0.T
    S = w0[:, None] * np.linalg.solve(K0 * w0[None, :] + part.shift0 * np.eye(m), Psi0 @ Psi1.T)  # S[l, i] = S_l(X1_i)
    c1 = part.pseudo.a[:, None] * beta
    c0 = S @ (part.pseudo.b[:, None] * beta)
    H = K @ np.linalg.solve(w1[:, None] * K + part.shift * np.eye(n), np.diag(w1))  # fitted values H ξ at the units
    H0 = K0 @ np.linalg.solve(w0[:, None] * K0 + part.shift0 * np.eye(m), np.diag(w0))
    return beta, np.vstack([c1, c0]), H, H0


def test_weighted_lowrank_weights_match_the_materialised_twin(weighted, data):
    V_eval = np.random.default_rng(1).normal(1.0, 1.0, size=(6, 2))
    part = weighted.embedding(1).parts[0]
    assert isinstance(part, LowRankFoldArm) and part.w1 is not None and part.w0 is not None
    beta, c, H, H0 = _twin(part, V_eval)
    np.testing.assert_allclose(part.beta(V_eval), beta, atol=1e-9, rtol=1e-7)
    # the first-stage loadings W₀Ψ₀M are stored in float32 (lowrank.STORAGE): about 1e-7 relative
    np.testing.assert_allclose(part.weights(V_eval)[1], c, atol=1e-7 * np.abs(c).max())
    # the bootstrap's pieces for the non-symmetric smoother H = Φ G⁻¹ ΦᵀW
    P = np.random.default_rng(2).normal(size=(len(beta), 3))
    np.testing.assert_allclose(part.residual_features(P), P - H @ P, atol=1e-9)
    np.testing.assert_allclose(part.adjoint_residuals(beta), beta - H.T @ beta, atol=1e-9)
    kernel = weighted.kernels["y"]
    influence = part.first_stage_influence(beta, GRID[:, None], "density", kernel)
    np.testing.assert_allclose(influence.weights, c[len(beta):], atol=1e-7 * np.abs(c).max())
    from ccme import _backend

    F0 = _backend.atom_features(part.Y0, GRID[:, None], "density", kernel.name, kernel.bandwidth_array, 0)
    np.testing.assert_allclose(influence.residuals, F0 - H0 @ F0, atol=1e-9)


# -- all-equal weights are the unweighted fit -------------------------------------------------------------------
def test_equal_weights_are_the_unweighted_fit_bit_for_bit(data):
    plain = _fit(data, tune="auto")
    equal = _fit(data, tune="auto", weights=np.full(len(data), 2.5))
    V = ccme.datasets.PAPER_PROFILES
    for arm in (1, 0):
        assert np.array_equal(plain.density(GRID, newdata=V, arm=arm), equal.density(GRID, newdata=V, arm=arm))
    assert equal.sampling_weights.constant and equal.sampling_weights.active is None
    assert "unweighted" in equal.sampling_weights.describe()


# -- integer frequency weights equal repeated rows ----------------------------------------------------------------
def test_frequency_weights_equal_repeated_rows(data):
    """One fold with fixed kernels and λ: weights w ∈ {1, 2, 3} against the data with rows repeated w times.

    Everything is deterministic given the rows: known scores, numeric
    bandwidths, the landmarks (a repeated row is never pivoted on, since its
    residual diagonal is that of its first copy, chosen first among ties).
    The weights of the atoms of a unit's copies, summed, equal the unit's
    weighted atom weight.
    """
    n = 120
    frame = data.iloc[:n].reset_index(drop=True)
    counts = np.random.default_rng(4).integers(1, 4, n)
    extra = np.repeat(np.arange(n), counts - 1)
    repeated = pd.concat([frame, frame.iloc[extra]], ignore_index=True)
    origin = np.concatenate([np.arange(n), extra])
    scores = np.clip(0.5 + 0.1 * frame["x1"].to_numpy(), 0.2, 0.8)
    params = ccme.estimators.ESTIMATORS["ridge"]
    formula = parse_formula(FORMULA, frame.columns)
    options = params.options({"x_bandwidth": 2.0, "v_bandwidth": 1.5, "y_bandwidth": 1.0, "lam": 0.01,
                              "approx": "lowrank", "rank_tol": 1e-6})
    half = np.arange(n) < n // 2

    def arm_weights(frame_, rows_of, weights):
        design = build_design(formula, frame_)
        prepared = params.prepare(options, design=design, Xo=design.X, seed=1)
        fold = Fold(0, np.flatnonzero(~half[rows_of]), np.flatnonzero(half[rows_of]))
        crossfit = CrossFitData(mode="dr", design=design, Xo=design.X, scores=scores[rows_of], sampling_weights=weights)
        part = LowRankFold(prepared, crossfit, fold, seed=3).arm(1)
        c = part.weights(design.V[:5])[1]
        out = np.zeros((n, c.shape[1]))
        np.add.at(out, rows_of[part.atom_units], c)
        return out

    np.testing.assert_allclose(arm_weights(frame, np.arange(n), counts.astype(float)),
                               arm_weights(repeated, origin, None), atol=1e-7, rtol=1e-6)


# -- validation ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [(-1.0, "1 negative"), (np.nan, "1 NaN"), (np.inf, "1 infinite")])
def test_bad_weights_raise_a_data_error_with_the_count(data, value, message):
    w = data["w"].to_numpy().copy()
    w[7] = value
    with pytest.raises(DataError, match=message):
        _fit(data, weights=w)


def test_all_zero_weights_and_bad_arguments(data):
    with pytest.raises(DataError, match="all zero"):
        _fit(data, weights=np.zeros(len(data)))
    with pytest.raises(ParameterError, match="one value per row"):
        _fit(data, weights=np.ones(5))
    with pytest.raises(ParameterError, match="does not have"):
        _fit(data, weights="nope")


def test_dropped_rows_drop_their_weights_and_the_caller_data_stay(data):
    frame = data.copy()
    frame.loc[[3, 10], "x3"] = np.nan
    w = frame["w"].to_numpy().copy()
    w[3] = -5.0  # dropped with its row: not an error
    before = w.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dropped = _fit(frame, weights=w, na_action="drop")
    kept = _fit(frame.drop(index=[3, 10]).reset_index(drop=True), weights=np.delete(w, [3, 10]))
    assert np.array_equal(w, before) and np.isnan(frame.loc[3, "x3"])
    np.testing.assert_array_equal(dropped.sampling_weights.values, kept.sampling_weights.values)
    np.testing.assert_array_equal(dropped.density(GRID, arm=1), kept.density(GRID, arm=1))


def test_resolve_weights_normalises_to_mean_one(data):
    rows = np.arange(0, len(data), 2)
    record = resolve_weights("w", data, rows)
    np.testing.assert_allclose(record.values.mean(), 1.0)
    np.testing.assert_allclose(record.values, data["w"].to_numpy()[rows] / data["w"].to_numpy()[rows].mean())
    assert not record.values.flags.writeable and record.column == "w"
    assert kish(np.ones(10)) == 10.0 and record.kish_n < len(rows)


# -- where weights are refused ------------------------------------------------------------------------------------
def test_weights_are_refused_outside_the_weighted_low_rank_ridge(data):
    with pytest.raises(ParameterError, match="approx='exact' does not take sampling weights"):
        _fit(data, weights="w", approx="exact")
    with pytest.raises(ParameterError, match="first_stage='kernel'"):
        _fit(data, weights="w", first_stage="forest")
    for method in ("deep_feature", "neural_kernel"):
        with pytest.raises(ParameterError, match=f"method='{method}' does not take sampling weights; method='ridge'"):
            _fit(data, weights="w", method=method)


# -- weighted propensity ------------------------------------------------------------------------------------------
class _Spy:
    """A classifier recording the sample weights its fit gets."""

    seen = []

    def __init__(self):
        from sklearn.linear_model import LogisticRegression

        self.model = LogisticRegression()

    def get_params(self, deep=True):
        return {}

    def set_params(self, **params):
        return self

    def fit(self, X, y, sample_weight=None):
        _Spy.seen.append(None if sample_weight is None else np.array(sample_weight))
        self.model.fit(X, y, sample_weight=sample_weight)
        self.classes_ = self.model.classes_
        return self

    def predict_proba(self, X):
        return self.model.predict_proba(X)


class _NoWeights(_Spy):
    def fit(self, X, y):
        return super().fit(X, y)


def test_the_propensity_learner_gets_the_weights(data, weighted):
    _Spy.seen.clear()
    res = _fit(data, weights="w", propensity=_Spy())
    normalised = res.sampling_weights.values
    assert len(_Spy.seen) == 2
    for fold, seen in zip(res.folds, _Spy.seen):
        np.testing.assert_array_equal(seen, normalised[fold.nuisance])
    with pytest.raises(ParameterError, match="_NoWeights cannot be fitted with sampling weights"):
        _fit(data, weights="w", propensity=_NoWeights())
    unweighted = _fit(data, propensity="logistic")
    assert not np.allclose(_fit(data, weights="w", propensity="logistic").propensity_scores,
                           unweighted.propensity_scores)
    known = np.full(len(data), 0.4)
    np.testing.assert_array_equal(_fit(data, weights="w", propensity=known).propensity_scores, known)
    assert "Kish" in str(weighted.summary()) and "Weights" in str(weighted.summary())


def test_every_named_learner_fits_with_weights(data):
    from ccme.propensity_selection import _quiet_fit, make_learner

    X = data[["x1", "x2", "x3", "x4"]].to_numpy()
    A = data["a"].to_numpy()
    w = data["w"].to_numpy()
    for name in ("forest", "logistic", "logistic_cv", "boosting", "auto"):
        model = _quiet_fit(make_learner(name, seed=1, n=len(A)), X, A, sample_weight=w)
        assert np.all(np.isfinite(model.predict_proba(X)))


# -- weighted tuning criteria -------------------------------------------------------------------------------------
def test_weighted_leave_one_out_equals_brute_force_refits():
    """Σ_i w_i ‖z_i − f̂₋ᵢ(x_i)‖² / n, f̂₋ᵢ the weighted ridge fit with w_i = 0 (penalty λ Σw kept)."""
    from ccme import _backend
    from ccme.kernels import Kernel
    from ccme.tuning import _ard_loo, _ArdProblem, _spectrum

    rng = np.random.default_rng(0)
    n = 50
    X, Z, w = rng.normal(size=(n, 2)), rng.normal(size=(n, 3)), rng.uniform(0.2, 3.0, n)
    kernel = Kernel("gaussian", (1.0, 1.2))
    lambdas = np.array([1e-3, 1e-2, 1e-1])
    K = _backend.gram(X, X, "gaussian", kernel.bandwidth_array)
    brute = []
    for lam in lambdas:
        total = 0.0
        for i in range(n):
            left_out = w.copy()
            left_out[i] = 0.0
            alpha = np.linalg.solve(left_out[:, None] * K + lam * w.sum() * np.eye(n), left_out[:, None] * Z)
            total += w[i] * np.sum((Z[i] - K[i] @ alpha) ** 2)
        brute.append(total / n)
    # the pivoted Cholesky factor stops at 1e-2·min(1, nλ_min): about 1e-5 relative here
    np.testing.assert_allclose(_spectrum(X, kernel, 1.0, 1e-6, 1, w).loo(Z, lambdas, 1), brute, rtol=1e-4)
    problem = _ArdProblem(Z=X, T=Z, weight=1.0, lam=1e-2, w=w)
    np.testing.assert_allclose(_ard_loo(problem, "gaussian", kernel.bandwidth_array, lambdas), brute, rtol=1e-3)
    np.testing.assert_allclose(_ard_loo(problem, "gaussian", kernel.bandwidth_array).mean(), brute[1], rtol=1e-3)


def test_weighted_fit_tunes_with_the_weights(data, weighted):
    res = _fit(data, weights="w", tune="auto")
    plain = _fit(data, tune="auto")
    assert set(res.tuning.chosen) == set(plain.tuning.chosen)
    # σ_y is chosen on the weighted fit itself (the unweighted Nyström proxy is skipped)
    assert not any("proxy" in note for note in res.tuning.notes)


# -- threads, save/load, bootstrap --------------------------------------------------------------------------------
def test_thread_invariance(data):
    one = _fit(data, weights="w", n_threads=1)
    four = _fit(data, weights="w", n_threads=4)
    assert np.array_equal(one.density(GRID, arm=0), four.density(GRID, arm=0))


def test_save_and_load_round_trip(weighted, tmp_path):
    path = tmp_path / "weighted.ccme"
    weighted.save(path)
    loaded = ccme.load(path)
    assert isinstance(loaded.sampling_weights, SamplingWeights) and loaded.sampling_weights.column == "w"
    np.testing.assert_array_equal(loaded.sampling_weights.values, weighted.sampling_weights.values)
    np.testing.assert_array_equal(loaded.density(GRID, arm=1), weighted.density(GRID, arm=1))
    # files of the previous versions (no weights) still load
    state = weighted.to_state()
    old = {k: v for k, v in state.items() if k != "sampling_weights"}
    old["version"] = 1
    for node in old["embeddings"].values():
        node["parts"] = [dict({k: v for k, v in p.items() if k not in ("w1", "w0")}, version=1) for p in node["parts"]]
    assert ccme.CCMEResult.from_state(old).sampling_weights is None
    bad = dict(state, sampling_weights=dict(state["sampling_weights"], values=np.ones(3)))
    with pytest.raises(FormatError, match="one value per unit"):
        ccme.CCMEResult.from_state(bad)


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_bands_and_tests_run_on_the_weighted_fit(weighted):
    profile = ccme.datasets.PAPER_PROFILES.iloc[:1]
    bands = weighted.bands(0.9, newdata=profile, arm=1, y=GRID, n_boot=50, seed=1)
    assert np.all(bands.lower <= bands.upper) and np.all(np.isfinite(bands.se))
    assert 0.0 <= weighted.test_effect(newdata=profile, n_boot=50, seed=1).p_value <= 1.0


def test_hajek_normalisation_is_weighted(data):
    from ccme.pseudo import hajek_scores

    res = _fit(data, weights="w", normalize_weights=True)
    w = res.sampling_weights.values
    scores = np.clip(res.propensity_scores, res.clip, 1.0 - res.clip)
    A = res.design.A
    normalised = hajek_scores(scores, A, res.folds, w)
    for fold in res.folds:
        t = fold.target
        for arm in (1, 0):  # column j: arm j's normalised probability (ccme.propensity.arm_probabilities)
            omega = np.where(A[t] == arm, 1.0 / normalised[t, arm], 0.0)
            np.testing.assert_allclose(np.sum(w[t] * omega) / np.sum(w[t]), 1.0)


# -- the must-show: the survey sample -----------------------------------------------------------------------
def test_weighted_fit_recovers_the_population_on_the_survey_case():
    """Seed 1, n = 2000: measured ratio 0.11 (geometric mean over the arms; 0.07-0.17 over seeds 1-5, per arm).

    Asserted at 0.7, the issue's bound (the measured ratio leaves a margin of 6×).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.sampling_weights import errors

    e = errors(2000, 1, tune="auto", eval_points=100)
    ratio = np.sqrt(e[(True, 1)] / e[(False, 1)] * e[(True, 0)] / e[(False, 0)])
    assert ratio <= 0.7


def test_a_weights_column_is_not_a_covariate_of_dot(data):
    """``.`` means every other column: a weights column named in ``weights=`` is left out of X."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit("y ~ a | x1 | .", data[["y", "a", "x1", "x2", "x3", "w"]], weights="w", seed=2, tune="none")
    assert "w" not in res.design.x_names and {"x2", "x3"} <= set(res.design.x_names)
