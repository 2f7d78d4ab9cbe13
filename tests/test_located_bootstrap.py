"""The multiplier bootstrap of a located fit (``fit(location=...)``; :class:`ccme.bootstrap._Located`): the mean
model's coefficient influence against refits, the derivative of the located features against the atoms moved by
hand, the units' shares against the draws, and a constant location against the plain fit.

Size and coverage are measured in ``benchmarks/calibration.py --location linear`` and
``benchmarks/inference/coverage.py --location linear --effects-only`` (README, "A location stage")."""

import dataclasses
import warnings

import numpy as np
import pytest
from scipy.stats import norm

import ccme
from ccme.bootstrap import _linear, _location_derivative, residual_result, unit_contributions
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.kernels import Kernel
from ccme.location import LocationModel, ridge_loo

F = "y ~ a | x1 + x2 | x3 + x4"


@pytest.fixture(scope="module")
def located():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(F, paper_simulation(400, seed=5), seed=2, location="linear", tune="none")


@pytest.mark.parametrize("weighted", [False, True])
def test_coefficient_influence_is_the_ridges_derivative(weighted):
    """Ψ_i / ê_i is ∂coef/∂ψ_i: refit with one target moved (penalty and standardisation held)."""
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((60, 3)) * [1.0, 2.0, 0.5] + 1.0
    psi = np.column_stack([Z @ [1.0, -0.5, 2.0] + rng.standard_normal(60), rng.standard_normal(60)])
    w = rng.uniform(0.5, 2.0, 60) if weighted else None
    fit = ridge_loo(Z, psi, w)
    model = LocationModel(center=fit.center, scale=fit.scale, coef=fit.coef, intercept=fit.intercept,
                          penalty=fit.penalty, target="dr", units=np.arange(60), residuals=fit.loo_residuals)
    influence = model.coefficient_influence(Z, w).reshape(60, 3, 2)
    for i in (0, 17, 59):
        for col in (0, 1):
            moved = psi.copy()
            moved[i, col] += 1e-3
            refit = ridge_loo(Z, moved[:, [col]], w, grid=(fit.penalty[col],))
            slope = (refit.coef[:, 0] - fit.coef[:, col]) / 1e-3 / fit.scale  # per unit of ψ_i, original columns
            np.testing.assert_allclose(influence[i, :, col], slope * fit.loo_residuals[i, col], rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("feature", ["density", "cdf", "moments"])
def test_location_derivative_is_the_atoms_moved(located, feature):
    """∂/∂coef_j of Σ_k c_k(v) F(r_k + m(v), y): each atom moved by (v − V_k)_j δ, by a central difference by hand."""
    res = located
    V = res.design.encode_v(PAPER_PROFILES)
    emb = residual_result(res).embeddings[1]
    shift = res.embedding(1).shift(v=V)
    kernel = Kernel("gaussian", (1.3,))
    points = np.linspace(-5.0, 45.0, 26)[:, None]
    got = _location_derivative(emb, V, res.design.V, points, feature, kernel, shift)
    atoms, c = emb.weights(v=V)
    units = np.concatenate([part.atom_units for part in emb.parts])
    r = atoms[:, 0]

    def raw(e, moved):
        x = r + moved + shift[e, 0]
        if feature == "moments":
            return np.array([c[:, e].sum(), c[:, e] @ x, c[:, e] @ x**2])
        u = (points[None, :, 0] - x[:, None]) / 1.3
        return c[:, e] @ (norm.pdf(u) / 1.3 if feature == "density" else norm.cdf(u))

    delta = 1e-5
    for e in range(len(V)):
        for j in range(V.shape[1]):
            lever = V[e, j] - res.design.V[units, j]
            want = (raw(e, lever * delta) - raw(e, -lever * delta)) / (2 * delta)
            np.testing.assert_allclose(got[e, j], want, rtol=1e-5, atol=1e-7 * np.abs(want).max())


@pytest.mark.parametrize("feature", ["cdf", "moments"])
def test_unit_shares_add_up_to_the_draws(located, feature):
    """Σ_i g_i u_i(y) (:func:`unit_contributions`, blockwise) equals the draws Δ*(v_e, y) of the located terms."""
    res = located
    V = res.design.encode_v(PAPER_PROFILES)
    how = {"order": 3, "first_stage": True, "cache": {}, "per_term": {}}
    terms = _linear(res, 0, V, res.fine_grid(41)[:, None], feature, res.embedding(0).cdf_kernel, **how)
    g = np.random.default_rng(1).standard_normal((res.n, 7))
    for e in range(len(V)):
        draws = sum(term.perturb(g, e) for term in terms)
        halves = [unit_contributions(terms, e, res.n, 0, 150), unit_contributions(terms, e, res.n, 150)]
        np.testing.assert_allclose(g.T @ np.vstack(halves), draws, rtol=1e-10, atol=1e-12 * np.abs(draws).max())


def _constant(res, value: float) -> LocationModel:
    """m(v) = value, a model with units whose residuals are 0: its coefficients do not move in the bootstrap."""
    d_v = res.design.V.shape[1]
    return LocationModel(center=np.zeros(d_v), scale=np.ones(d_v), coef=np.zeros((d_v, 1)),
                         intercept=np.array([value]), penalty=np.zeros(1), target="dr", units=np.arange(res.n),
                         residuals=np.zeros((res.n, 1)))


def test_a_constant_location_moves_the_effects_and_keeps_their_spread():
    """Arms moved by 3 and 1: the mean difference and its interval move by 2; a common move changes no test.

    (The common move is 0.25: the MMD's quadrature grid spans the data ± 6 bandwidths, which a larger move would
    begin to leave.)
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = ccme.fit(F, paper_simulation(400, seed=5), seed=2, tune="none")

    def moved(values):
        return dataclasses.replace(plain, embeddings={arm: emb.with_location(_constant(plain, values[arm]))
                                                      for arm, emb in plain.embeddings.items()})

    want = plain.effect(newdata=PAPER_PROFILES, n_boot=49, seed=3)
    got = moved({1: 3.0, 0: 1.0}).effect(newdata=PAPER_PROFILES, n_boot=49, seed=3)
    w, g = (t[t.term == "mean_diff"] for t in (want, got))
    for column in ("estimate", "conf_low", "conf_high"):
        np.testing.assert_allclose(g[column].to_numpy(), w[column].to_numpy() + 2.0, rtol=1e-10)
    np.testing.assert_allclose(g["std_error"].to_numpy(), w["std_error"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(g["df"].to_numpy(), w["df"].to_numpy(), rtol=1e-7)
    common = moved({1: 0.25, 0: 0.25})
    for statistic in ("mmd", "mean"):
        t_want = plain.test_effect(newdata=PAPER_PROFILES, n_boot=99, seed=5, statistic=statistic)
        t_got = common.test_effect(newdata=PAPER_PROFILES, n_boot=99, seed=5, statistic=statistic)
        np.testing.assert_allclose(t_got.table["statistic"], t_want.table["statistic"], rtol=1e-9)
        np.testing.assert_array_equal(t_got.table["p_value"], t_want.table["p_value"])


def test_the_mean_models_error_widens_the_mean_difference(located):
    """The located mean difference's bootstrap includes the coefficients' error: without it the spread is smaller."""
    res = located
    full = res.effect(newdata=PAPER_PROFILES, n_boot=199, seed=1, q=[])
    held = dataclasses.replace(res, embeddings={
        arm: emb.residual().with_location(dataclasses.replace(emb.location,
                                                              residuals=np.zeros_like(emb.location.residuals)))
        for arm, emb in res.embeddings.items()})
    fixed = held.effect(newdata=PAPER_PROFILES, n_boot=199, seed=1, q=[])
    se_full, se_fixed = (t[t.term == "mean_diff"]["std_error"].to_numpy() for t in (full, fixed))
    np.testing.assert_allclose(full[full.term == "mean_diff"].estimate, fixed[fixed.term == "mean_diff"].estimate)
    assert np.all(se_full > se_fixed)


def test_a_located_fit_plots_its_effect_with_bands(located):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = located.plot_effect(newdata=PAPER_PROFILES, n_boot=29, q=[0.25, 0.5, 0.75])
    assert len(ax.collections) == len(PAPER_PROFILES)  # one shaded band per profile
    plt.close("all")
    for name in ("test_dominance", "test_location_shift"):
        test = getattr(located, name)(newdata=PAPER_PROFILES, n_boot=29)
        assert np.all((test.table["p_value"] > 0) & (test.table["p_value"] <= 1))


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_many_v_points_read_the_fine_grid_as_the_exact_features(located, monkeypatch, feature):
    """Past n_v × G > the fine grid's size the features are interpolated from it: within 1e-4 of the exact path.

    Measured here: 1.2e-5 / 2.6e-5 (density: estimate / draws) and 2.0e-6 / 3.6e-6 (CDF) of the largest value at 8
    nodes per bandwidth (tolerance 4 times the largest); the mean model's derivative term 3.3e-5 (density) and 1.2e-5 (CDF).
    """
    import ccme.bootstrap as module

    res = located
    V = res.design.V[:40]
    kernel = res.embedding(1).y_kernel if feature == "density" else res.embedding(1).cdf_kernel
    points = res.fine_grid(61)[:, None]
    g = np.random.default_rng(2).standard_normal((res.n, 5))

    def terms():
        return _linear(res, 1, V, points, feature, kernel, order=3, first_stage=True, cache={}, per_term={})

    fine = terms()[0]
    assert isinstance(fine.transform[0], module._Interpolation)
    monkeypatch.setattr(module, "LOCATED_FINE_STEPS", 10**4)  # a fine grid larger than n_v × G: the exact path
    exact = terms()[0]
    assert exact.transform[0] is None
    scale = np.abs(exact.estimate()).max()
    np.testing.assert_allclose(fine.estimate(), exact.estimate(), atol=1e-4 * scale)
    # The mean model's derivative term is read from the same grid.
    np.testing.assert_allclose(fine.derivative, exact.derivative, atol=1e-4 * np.abs(exact.derivative).max())
    for e in (0, 17, 39):
        want = exact.perturb(g, e)
        np.testing.assert_allclose(fine.perturb(g, e), want, atol=1e-4 * np.abs(want).max())
        np.testing.assert_allclose(g.T @ unit_contributions([fine], e, res.n), want, atol=1e-4 * np.abs(want).max())
