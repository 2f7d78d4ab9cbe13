"""Validation-loss tuning of the neural estimators (``tune=`` with method="deep_feature"/"neural_kernel").

The choices are checked against the recorded curves (argmin) and against
refits: a tuned fit must equal the untuned fit at the chosen values (same
seed), and a recorded criterion value must equal the best validation loss of
the network that a fit with that value trains.  Small data, small networks,
few epochs: these tests check the mechanics, not statistical quality (that is
measured by ``benchmarks/neural_tuning.py``).
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ccme  # noqa: E402
from ccme.estimators import DEEP_FEATURE_DEFAULTS  # noqa: E402
from ccme.estimators.base import SplitSecondStage  # noqa: E402
from ccme.estimators.training import stage_histories  # noqa: E402
from ccme.tuning import DEEP_FEATURE_PLUGIN_GRID, NEURAL_LAMBDA_GRID  # noqa: E402

SMALL = "y ~ a | x1 + x2 | x3 + x4"
#: Only the inputs' relevance (ccme.estimators.input_relevance), as tune="auto" learns it first.
RELEVANCE = {"x_bandwidth": "ard", "v_bandwidth": "ard"}
QUICK = dict(epochs=(15, 10), patience=4, hidden=(8,), M=6, progress=False, seed=3, propensity="logistic")


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(300, seed=2)


def _fit(data, method="deep_feature", **kwargs):
    opts = {**QUICK, **kwargs}
    if "M" in opts.get("tune", {}):
        del opts["M"]                  # tuned, so not set
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        return ccme.fit(SMALL, data, method=method, **opts)


@pytest.fixture(scope="module")
def tuned(data):
    return _fit(data)


def _curves(res, parameter):
    return [c for c in res.tuning.curves if c.parameter == parameter]


def test_auto_chooses_the_argmin_of_each_recorded_curve(tuned):
    for parameter in ("lam0", "lam1"):
        curves = _curves(tuned, parameter)
        assert sorted(c.arm for c in curves) == [0, 1]
        for c in curves:
            np.testing.assert_array_equal(c.values, NEURAL_LAMBDA_GRID)
            assert np.all(np.isfinite(c.criterion))
            assert c.chosen == c.values[np.argmin(c.criterion)]
            assert tuned.hyperparameters[parameter][c.arm] == c.chosen
            assert tuned.tuning.chosen[parameter][c.arm] == c.chosen
    for stage in (1, 2):
        for c in _curves(tuned, f"epochs_stage{stage}"):
            assert c.chosen == 1 + np.argmin(c.criterion)
            assert tuned.tuning.chosen[f"epochs_stage{stage}"][c.arm] == c.chosen
    assert tuned.tuning.seconds > 0


def test_tuned_fit_equals_the_untuned_fit_at_the_chosen_values(data, tuned):
    """The first fold's networks kept from tuning are exactly those a fit with the chosen λ trains (its inputs
    scaled by the same relevance search, which runs before the validation-loss tuning and does not depend on it)."""
    chosen = tuned.tuning.chosen
    plain = _fit(data, tune=RELEVANCE, lam0=chosen["lam0"], lam1=chosen["lam1"], lam1_plugin=chosen["lam1_plugin"])
    V = tuned.design.V[:7]
    for arm in (1, 0):  # the weights: the tuned fit's read-out bandwidth is chosen too, the plain one's is the rule
        for got, want in zip(tuned.embeddings[arm].weights(v=V), plain.embeddings[arm].weights(v=V)):
            np.testing.assert_array_equal(got, want)


def test_recorded_criterion_is_the_refit_validation_loss(data, tuned):
    """Each λ₁ curve's value at a grid point = the best stage-2 validation loss of a fit with that λ₁."""
    curve = next(c for c in _curves(tuned, "lam1") if c.arm == 1)
    part = tuned.embeddings[1].parts[0]
    assert min(stage_histories(part)[2].validation) == curve.criterion[np.argmin(curve.criterion)]
    other = int(np.argmax(curve.criterion))
    chosen = tuned.tuning.chosen
    refit = _fit(data, tune=RELEVANCE, lam0=chosen["lam0"], lam1={1: float(curve.values[other]), 0: chosen["lam1"][0]})
    assert min(stage_histories(refit.embeddings[1].parts[0])[2].validation) == pytest.approx(curve.criterion[other],
                                                                                       rel=1e-12)


def test_user_set_values_are_not_tuned(data):
    res = _fit(data, lam0=0.05)
    assert res.hyperparameters["lam0"] == {1: 0.05, 0: 0.05}
    assert not _curves(res, "lam0") and len(_curves(res, "lam1")) == 2
    res = _fit(data, lam=0.05, mode="ipw")
    assert res.hyperparameters["lam1"] == {1: 0.05, 0: 0.05}
    assert not _curves(res, "lam0") and not _curves(res, "lam1")
    assert "epochs_stage2" in res.tuning.chosen         # early stopping is still reported
    with pytest.raises(ccme.ParameterError, match="both set and asked to be tuned"):
        _fit(data, tune={"lam1": [0.1, 1.0]}, lam1=0.2)


def test_tune_none_keeps_the_defaults(data):
    res = _fit(data, tune="none")
    for key in ("lam0", "lam1"):
        assert res.hyperparameters[key] == {1: DEEP_FEATURE_DEFAULTS[key], 0: DEEP_FEATURE_DEFAULTS[key]}
    assert not res.tuning.curves and not res.tuning.chosen
    with pytest.raises(ccme.ParameterError, match="nothing was tuned"):
        res.plot_tuning()


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_m_is_chosen_from_the_given_set(data, method):
    res = _fit(data, method=method, tune={"M": [3, 8]})
    (curve,) = _curves(res, "M")
    np.testing.assert_array_equal(curve.values, [3, 8])
    assert curve.chosen == curve.values[np.argmin(curve.criterion)]
    assert res.hyperparameters["M"] == res.tuning.chosen["M"] == curve.chosen
    # The raw density of the chosen model is finite everywhere (the normalised one
    # is NaN, with a warning, where a few-epoch fit leaves no positive mass).
    assert np.all(np.isfinite(res.density(np.linspace(-5, 25, 5), arm=1, normalize=False)))
    if method == "neural_kernel":
        assert len(res.hyperparameters["grid"]) == curve.chosen
        assert not _curves(res, "lam0")


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_weight_decay_is_chosen_from_the_given_set_and_used_by_every_fold(data, method):
    """tune={"weight_decay": [...]}: the argmin of the recorded curve (final-stage validation loss summed over the
    arms), whose value at each point is the refit's; the chosen decay trains every fold; 0 is a candidate."""
    grid = [0.0, 3.0]
    res = _fit(data, method=method, tune={"weight_decay": grid}, n_rep=1)
    (curve,) = _curves(res, "weight_decay")
    np.testing.assert_array_equal(curve.values, grid)
    assert curve.chosen == curve.values[np.argmin(curve.criterion)] == res.tuning.chosen["weight_decay"]
    assert res.hyperparameters["training"].weight_decay == (curve.chosen, curve.chosen)
    for i, w in enumerate(grid):   # only the decay is tuned: λ, M keep their defaults
        refit = _fit(data, method=method, tune="none", weight_decay=w, n_rep=1)
        # The second stage's validation loss: summed over Neural-Kernel's split parts (stages 2 and 3).
        loss = sum(min(h.validation) for arm in (1, 0)
                   for stage, h in stage_histories(refit.embeddings[arm].parts[0]).items() if stage >= 2)
        assert loss == pytest.approx(curve.criterion[i], rel=1e-12)
        if w == curve.chosen:      # every fold, not only the tuning fold, trains with the chosen decay
            for arm in (1, 0):
                for got, want in zip(res.embeddings[arm].parts, refit.embeddings[arm].parts):
                    assert stage_histories(got).keys() == stage_histories(want).keys()
                    for stage, h in stage_histories(got).items():
                        assert h.validation == stage_histories(want)[stage].validation
    with pytest.raises(ccme.ParameterError, match="non-negative numbers"):
        _fit(data, method=method, tune={"weight_decay": [-0.5, 1.0]})
    with pytest.raises(ccme.ParameterError, match="both set and asked to be tuned"):
        _fit(data, method=method, tune={"weight_decay": grid}, weight_decay=1.0)


def test_bad_grids_raise(data):
    with pytest.raises(ccme.ParameterError, match="positive integers"):
        _fit(data, tune={"M": [2.5, 4]})
    with pytest.raises(ccme.ParameterError, match="positive numbers"):
        _fit(data, tune={"M": [0, 4]})
    with pytest.raises(ccme.ParameterError, match="positive numbers"):
        _fit(data, tune={"lam": [-1.0]})
    with pytest.raises(ccme.ParameterError, match="either 'lam'"):
        _fit(data, tune={"lam": [0.1], "lam0": [0.1]})
    with pytest.raises(ccme.ParameterError, match="must be 'ard'"):
        _fit(data, tune={"x_bandwidth": [1.0]})
    with pytest.raises(ccme.ParameterError, match="`standardize` is False"):
        _fit(data, tune=RELEVANCE, standardize=False)
    with pytest.raises(ccme.ParameterError, match="unknown key"):
        _fit(data, method="neural_kernel", tune={"lam": [0.1]})
    with pytest.raises(ccme.ParameterError, match="user-given `grid`"):
        _fit(data, method="neural_kernel", tune={"M": [3, 4]}, grid=np.linspace(0, 20, 5))
    with pytest.raises(ccme.ParameterError, match="validation split"):
        _fit(data, tune={"lam": [0.1, 1.0]}, validation=0.0)


def test_without_validation_split_auto_tunes_nothing(data):
    res = _fit(data, validation=0.0)
    # Nothing by validation loss; the read-out bandwidth has its own criterion (weighted ISE-CV), and the inputs'
    # relevance the ridge's leave-one-out search.
    assert {c.parameter for c in res.tuning.curves} == {"y_bandwidth", "x_bandwidth", "v_bandwidth"}
    assert any("validation" in note for note in res.tuning.notes)
    assert res.hyperparameters["lam1"] == {1: DEEP_FEATURE_DEFAULTS["lam1"], 0: DEEP_FEATURE_DEFAULTS["lam1"]}
    unscaled = _fit(data, lam_scaling="none")
    assert not _curves(unscaled, "lam0") and not _curves(unscaled, "lam1")
    assert any("lam_scaling" in note for note in unscaled.tuning.notes)


def test_lam_grid_alias_for_ridge(data):
    res = ccme.fit(SMALL, data, seed=1, propensity="logistic", tune={"lam": [1e-3, 1e-1]})
    assert {c.parameter for c in res.tuning.curves} == {"lam0", "lam1"}


def test_plot_tuning_and_summary(tuned):
    import matplotlib.pyplot as plt

    axes = tuned.plot_tuning()
    assert [a.get_xlabel() for a in axes] == ["λ₀ (stage 1)", "λ₁ (stage 2)", "λ₁ᵖ (stage 2, plug-in part)",
                                              "outcome bandwidth σ_y",
                                              "epoch (stage 1, early stopping)", "epoch (stage 2, early stopping)"]
    assert len(axes[0].get_lines()) == 4      # two arms: curve + chosen marker each
    plt.close(axes[0].figure)
    text = str(tuned.summary())
    assert "Epochs, stage 2" in text and "lambda1" in text


def test_auto_reads_out_with_the_chosen_outcome_bandwidth(data, tuned):
    """The read-out bandwidth is the argmin of its recorded curve, and each arm's embedding reads out with it."""
    curves = _curves(tuned, "y_bandwidth")
    assert sorted(c.arm for c in curves) == [0, 1]
    for c in curves:
        assert c.chosen == c.values[np.argmin(c.criterion)]
        assert tuned.embeddings[c.arm].y_kernel.bandwidth_array[0] == pytest.approx(c.chosen, rel=1e-12)
    fixed = _fit(data, y_bandwidth=2.0)  # a bandwidth the user sets is not tuned
    assert not _curves(fixed, "y_bandwidth")
    assert all(fixed.embeddings[arm].y_kernel.bandwidth_array[0] == 2.0 for arm in (1, 0))


@pytest.mark.parametrize("atoms", ["grid", "outcomes"])
def test_neural_kernel_reads_out_no_narrower_than_half_its_grid_step(data, atoms):
    """Gaussians narrower than half the step of the M = 6 regular grid points would show the points as ripples
    (ccme.tuning.READOUT_ATOM_FLOOR): the read-out grid starts at half the step, the grid's outcome span / (M − 1)
    by hand, or within half a factor step above it.  With the grid's weights spread over the outcomes the floor is
    the same (the grid's step is still the weights' resolution; narrower would draw the outcomes' sample noise)."""
    from ccme.tuning import READOUT_ATOM_FLOOR, Y_BANDWIDTH_FACTORS

    res = _fit(data, method="neural_kernel", location=None, atoms=atoms)  # a located fit's grid spans its residuals
    assert "M = 6 (auto: regular)" in str(res.summary())
    Y = data["y"].to_numpy()
    floor = READOUT_ATOM_FLOOR * (Y.max() - Y.min()) / (6 - 1)
    half_step = np.sqrt(Y_BANDWIDTH_FACTORS[1] / Y_BANDWIDTH_FACTORS[0])
    curves = _curves(res, "y_bandwidth")
    assert sorted(c.arm for c in curves) == [0, 1]
    for c in curves:
        assert floor * (1 - 1e-9) <= min(c.values) <= floor * half_step
        assert c.chosen >= floor * (1 - 1e-9)


def test_deep_feature_atoms_know_their_units(data, tuned):
    """atom_units maps each atom to its data row (the read-out criterion leaves a unit's own atom out)."""
    Y = tuned.design.Y
    for arm in (1, 0):
        for part in tuned.embeddings[arm].parts:
            np.testing.assert_array_equal(part.atoms, Y[part.atom_units])


def test_plugin_penalty_is_the_argmin_of_its_leave_one_out_curve(tuned):
    """λ₁ᵖ of each arm: the recorded curve's argmin, and each fold-arm split with it (DR, tune="auto")."""
    curves = _curves(tuned, "lam1_plugin")
    assert sorted(c.arm for c in curves) == [0, 1]
    for c in curves:
        np.testing.assert_array_equal(c.values, DEEP_FEATURE_PLUGIN_GRID)
        assert np.all(np.isfinite(c.criterion)) and c.chosen == c.values[np.argmin(c.criterion)]
        assert tuned.penalties["lam1_plugin"][c.arm] == c.chosen
        assert all(isinstance(part, SplitSecondStage) for part in tuned.embeddings[c.arm].parts)
    assert "lambda1, plug-in part" in str(tuned.summary())


def test_plugin_penalty_curve_equals_brute_force_leave_one_out():
    """plugin_penalty_curve = (1/n) Σ_i ‖μ̂₀(X_i) − f̂₋ᵢ(v_i)‖² from n refits without unit i (numpy twin)."""
    from ccme.estimators.deep_feature import _FirstStage, plugin_penalty_curve
    from ccme.kernels import Kernel

    rng = np.random.default_rng(0)
    n, M, M0, m = 40, 5, 4, 30
    Psi, Psi01 = rng.normal(size=(n, M)), rng.normal(size=(n, M0))
    P0, Y0 = rng.normal(size=(m, M0)), rng.normal(size=(m, 1))
    kernel = Kernel("gaussian", np.array([0.7]))
    first = _FirstStage(Psi01=Psi01, P0=P0, Y0=Y0, rows0=np.arange(m), history=None)
    K0 = np.exp(-0.5 * (Y0 - Y0.T) ** 2 / 0.7**2) / (np.sqrt(2 * np.pi) * 0.7)
    C = P0.T @ K0 @ P0                                       # ⟨μ̂₀(X_i), μ̂₀(X_k)⟩ = Ψ̂₀₁,i C Ψ̂₀₁,kᵀ
    lambdas = [1e-3, 1e-1]
    for scaling in ("n", "none"):
        expected = []
        for lam in lambdas:
            total = 0.0
            for i in range(n):
                keep = np.arange(n) != i
                shift = lam * n if scaling == "n" else lam   # the fit's penalty, not refitted to n − 1 units
                coef = np.linalg.solve(Psi[keep].T @ Psi[keep] + shift * np.eye(M), Psi[keep].T @ Psi01[keep])
                r = Psi01[i] - Psi[i] @ coef
                total += r @ C @ r
            expected.append(total / n)
        np.testing.assert_allclose(plugin_penalty_curve(Psi, first, lambdas, scaling, kernel), expected, rtol=1e-9)


def test_split_deep_feature_density_equals_two_ridge_solves(data):
    """A split fold-arm: c(v) = [D_ω Ψ ; −P₀Ψ̂₀₁ᵀD_ω Ψ] G₁⁻¹ψ(v) + [0 ; P₀Ψ̂₀₁ᵀΨ] G_p⁻¹ψ(v) (numpy twin)."""
    res = _fit(data, tune="none", lam0=0.01, lam1=0.1, lam1_plugin={1: 1e-4, 0: 1e-3})
    V = res.design.V[:5]
    for arm in (1, 0):
        for part in res.embeddings[arm].parts:
            assert isinstance(part, SplitSecondStage)
            atoms, c = part.weights(V)
            corr, plug = part.correction, part.plugin
            fm, ps = corr.feature_map, corr.pseudo
            n = len(fm.Psi)
            psi = fm(V).T
            G1 = fm.Psi.T @ fm.Psi + n * 0.1 * np.eye(fm.Psi.shape[1])
            Gp = fm.Psi.T @ fm.Psi + n * {1: 1e-4, 0: 1e-3}[arm] * np.eye(fm.Psi.shape[1])
            omega = ps["a"]
            Psi01 = plug.pseudo["U"]                 # the plug-in part's U = D_b Ψ̂₀₁ᵀ with b = 1
            np.testing.assert_allclose(ps["U"], -omega[:, None] * Psi01)   # the correction's b = −ω
            direct = omega != 0
            top = (omega[direct, None] * fm.Psi[direct]) @ np.linalg.solve(G1, psi)
            bottom = ps["P0"] @ ((-omega[:, None] * Psi01).T @ fm.Psi) @ np.linalg.solve(G1, psi) \
                + ps["P0"] @ (Psi01.T @ fm.Psi) @ np.linalg.solve(Gp, psi)
            np.testing.assert_allclose(c, np.vstack([top, bottom]), rtol=1e-9, atol=1e-12)
            np.testing.assert_array_equal(atoms, np.vstack([ps["Y1"][direct], ps["Y0"]]))


def test_deep_feature_inference_states_its_caveat(data, tuned):
    """Bands, intervals and tests warn of what Deep Feature's bootstrap leaves out; the summary says it as a note."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(tuned.summary(newdata=data.head(2)))
    assert not any("learned features" in str(w.message) for w in caught)
    assert "Caveat" in text and "bias the bootstrap does not see" in " ".join(text.split())
    with pytest.warns(ccme.errors.CcmeWarning, match="bias the bootstrap does not see"):
        tuned.effect(newdata=data.head(2), n_boot=29)
    ridge = ccme.fit(SMALL, data, seed=3, tune="none")
    assert ridge.estimator.bootstrap_caveat is None and "Caveat" not in str(ridge.summary(newdata=data.head(2)))
