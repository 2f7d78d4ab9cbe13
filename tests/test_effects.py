"""Functionals, distributional effects, the MMD core and the bootstrap test.

The compiled kernel_quadratic_forms is checked against its numpy twin (relative
error ≤ 1e-10; measured ≈ 4e-14 on these sizes) and for bit-identical results
across thread counts.  The functionals are checked against their definitions
(quantile ∘ CDF = identity up to one grid step, mode = argmax of the density,
…), the MMD against the naive quadratic form over the unmerged atoms.

The test's size and power: see test_effect_calibration_small (tolerances from
benchmarks/calibration.py, numbers in its docstring).
"""

import sys
import dataclasses
import warnings
from pathlib import Path

import numpy as np
from scipy import stats
import pandas as pd
import pytest

import ccme
from ccme import _backend, bootstrap, effects
from ccme.estimators.base import FoldArm, linear_terms
import twins as _twins  # the numpy twins, beside the tests
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.errors import DataError, ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.calibration import SCALE_FORMULA, SCALE_PROFILES, scale_data  # noqa: E402

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


@pytest.fixture(scope="module")
def res():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, paper_simulation(600, seed=3), propensity="logistic", seed=3, tune="none")


@pytest.fixture(scope="module")
def res2d():
    data = paper_simulation(300, seed=4)
    data["y2"] = data["y"] * 0.5 + data["x1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit("y + y2 ~ a | x1 + x2 | x3 + x4", data, propensity="logistic", seed=4, tune="none")


# -- compiled core ------------------------------------------------------------
@pytest.mark.parametrize(
    "kernel, normalized, d", [("gaussian", True, 1), ("laplace", True, 1), ("gaussian", True, 2),
                              ("matern32", False, 3)]
)
def test_quadratic_forms_match_twin(kernel, normalized, d):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(600, d))  # three tiles of 256: diagonal and off-diagonal tile pairs
    W = rng.normal(size=(600, 4))
    bw = rng.uniform(0.3, 1.5, size=d)
    got = _backend.kernel_quadratic_forms(Z, W, kernel, bw, normalized=normalized)
    want = _twins.kernel_quadratic_forms(Z, W, kernel, bw, normalized=normalized)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_quadratic_forms_thread_invariant():
    rng = np.random.default_rng(1)
    Z, W = rng.normal(size=(900, 1)), rng.normal(size=(900, 7))
    one = _backend.kernel_quadratic_forms(Z, W, "gaussian", 0.4, n_threads=1)
    for nt in (2, 3):
        assert np.array_equal(one, _backend.kernel_quadratic_forms(Z, W, "gaussian", 0.4, n_threads=nt))


def test_quadratic_forms_errors():
    Z, W = np.zeros((5, 1)), np.ones((4, 2))
    with pytest.raises(DataError, match="W has 4 rows"):
        _backend.kernel_quadratic_forms(Z, W, "gaussian", 1.0)
    with pytest.raises(DataError, match="NaN"):
        _backend.kernel_quadratic_forms(Z, np.full((5, 1), np.nan), "gaussian", 1.0)
    with pytest.raises(ParameterError, match="kernel"):
        _backend.kernel_quadratic_forms(Z, np.ones((5, 1)), "matern32", 1.0, normalized=True)


# -- functionals ----------------------------------------------------------------
def test_quantile_inverts_cdf(res):
    q = np.array([0.05, 0.25, 0.5, 0.75, 0.95])
    Q = res.quantile(q, newdata=PAPER_PROFILES, arm=1)
    assert Q.shape == (2, 5) and np.all(np.diff(Q, axis=1) > 0)
    step = np.diff(effects.fine_grid(res)[:2])[0]
    for i in range(2):
        F = res.cdf(Q[i], newdata=PAPER_PROFILES.iloc[[i]], arm=1)[0]
        # F is Lipschitz with the density's maximum; one grid step of error in Q.
        slack = step * res.density(effects.fine_grid(res), newdata=PAPER_PROFILES.iloc[[i]], arm=1, normalize=False).max()
        assert np.all(np.abs(F - q) <= slack + 1e-9)
    assert res.quantile(0.5, newdata=PAPER_PROFILES).shape == (2,)
    lo_hi = res.interval(0.8, newdata=PAPER_PROFILES, arm=0)
    np.testing.assert_allclose(lo_hi, res.quantile([0.1, 0.9], newdata=PAPER_PROFILES, arm=0))


def test_mode_is_density_argmax(res):
    grid = effects.fine_grid(res)
    dens = res.density(grid, newdata=PAPER_PROFILES, arm=0, normalize=False)
    np.testing.assert_array_equal(res.density_mode(newdata=PAPER_PROFILES, arm=0), grid[np.argmax(dens, axis=1)])
    cand = np.array([0.0, 5.0, 20.0])
    want = cand[np.argmax(res.density(cand, newdata=PAPER_PROFILES, arm=0, normalize=False), axis=1)]
    np.testing.assert_array_equal(res.density_mode(newdata=PAPER_PROFILES, arm=0, candidates=cand), want)


class _PointMass(FoldArm):
    """A fold part with fixed positive weights 1/N on given atoms (an embedding of an empirical law)."""

    def __init__(self, atoms):
        self._atoms = atoms

    @property
    def atoms(self):
        return self._atoms

    def contract(self, V_eval, points, feature, y_kernel, out, scale, n_threads=0):
        F = _backend.atom_features(self.atoms, points, feature, y_kernel.name, y_kernel.bandwidth_array)
        out += scale * np.full((len(V_eval), len(self.atoms)), 1 / len(self.atoms)) @ F

    def weights(self, V_eval, n_threads=0):
        return self.atoms, np.full((len(self.atoms), len(V_eval)), 1 / len(self.atoms))


def test_sample_herding_positive_weights():
    """With positive weights herding reproduces the law: measured Kolmogorov distance 0.021 between 400
    herded points and the smoothed CDF (bimodal atoms), |mean error| 0.012; bounds 0.05 and 0.05."""
    rng = np.random.default_rng(0)
    atoms = np.concatenate([rng.normal(0, 1, 300), rng.normal(10, 1, 200)])[:, None]
    emb = ccme.Embedding([_PointMass(atoms)], ccme.kernels.Kernel("gaussian", (0.4,)))
    s = emb.sample(400, v=np.zeros((1, 1)), seed=np.random.default_rng(1))[0, :, 0]
    grid = np.linspace(-5, 15, 2001)
    F = emb.cdf(grid[:, None], v=np.zeros((1, 1)))[0]
    assert np.max(np.abs(np.searchsorted(np.sort(s), grid, side="right") / 400 - F)) <= 0.05
    assert abs(s.mean() - atoms.mean()) <= 0.05


def test_sample_on_a_fit(res):
    """Shapes, reproducibility by seed.  (With the signed DR weights of this small untuned fit the target lies
    outside the probability embeddings; herding then follows its positive part: measured Kolmogorov
    distance 0.19-0.32 to the clipped density's CDF, so no closeness is asserted here.)"""
    s = res.sample(50, newdata=PAPER_PROFILES, arm=1, seed=0)
    assert s.shape == (2, 50) and np.all(np.isfinite(s))
    np.testing.assert_array_equal(s, res.sample(50, newdata=PAPER_PROFILES, arm=1, seed=0))
    assert not np.array_equal(s, res.sample(50, newdata=PAPER_PROFILES, arm=1, seed=1))


def test_multivariate_outcome(res2d):
    prof = res2d.profiles()
    assert res2d.density_mode(newdata=prof).shape == (3, 2)
    assert res2d.sample(20, newdata=prof, seed=1).shape == (3, 20, 2)
    for call in (lambda: res2d.quantile(0.5, newdata=prof), lambda: res2d.interval(0.9, newdata=prof)):
        with pytest.raises(DataError, match="one-dimensional"):
            call()
    table = res2d.effect(newdata=prof)
    assert set(zip(table.term, table.outcome.fillna(""))) == {("mean_diff", "y"), ("mean_diff", "y2"), ("mmd", "")}
    assert res2d.test_effect(newdata=prof, statistic="mean", n_boot=49).table.shape == (3, 2)
    with pytest.raises(DataError, match="one-dimensional"):
        res2d.test_effect(newdata=prof, statistic="mmd", n_boot=49)


def test_bad_arguments(res):
    with pytest.raises(ParameterError, match="`q`"):
        res.quantile(1.5)
    with pytest.raises(ParameterError, match="`level`"):
        res.interval(90)
    with pytest.raises(ParameterError, match="`n`"):
        res.sample(0)
    with pytest.raises(ParameterError, match="n_boot"):
        res.test_effect(newdata=PAPER_PROFILES, n_boot=5)
    with pytest.raises(ParameterError, match="statistic"):
        res.test_effect(newdata=PAPER_PROFILES, statistic="ks")


# -- effects ----------------------------------------------------------------------
def test_effect_table(res):
    table = res.effect(newdata=PAPER_PROFILES, q=[0.25, 0.75])
    assert list(table.columns)[:5] == ["profile", "term", "outcome", "at", "estimate"]
    wide = table.pivot_table(index="profile", columns=["term", "at"], values="estimate", dropna=False)

    def term(name, level=np.nan):
        rows = table[(table.term == name) & ((table["at"] == level) | (np.isnan(level) & table["at"].isna()))]
        assert list(rows.profile) == ["v1", "v2"]
        return rows["estimate"].to_numpy()

    np.testing.assert_allclose(term("mean_diff"),
                               res.mean(newdata=PAPER_PROFILES, arm=1) - res.mean(newdata=PAPER_PROFILES, arm=0))
    qte = (res.quantile([0.25, 0.75], newdata=PAPER_PROFILES, arm=1)
           - res.quantile([0.25, 0.75], newdata=PAPER_PROFILES, arm=0))
    np.testing.assert_allclose(np.column_stack([term("qte", 0.25), term("qte", 0.75)]), qte)
    assert np.all((term("kolmogorov") >= 0) & (term("kolmogorov") <= 1))
    assert np.all(term("wasserstein") > 0)
    assert wide.shape[0] == 2


def test_mmd_matches_naive_quadratic_form(res):
    V = res._v(PAPER_PROFILES)
    a1, c1 = res.embedding(1).weights(v=V)
    a0, c0 = res.embedding(0).weights(v=V)
    k = res.kernels["y"]
    naive = _twins.kernel_quadratic_forms(np.vstack([a1, a0]), np.vstack([c1, -c0]), k.name, k.bandwidth_array)
    got = res.embedding(1).mmd(res.embedding(0), v=V)
    np.testing.assert_allclose(got, np.sqrt(naive), rtol=1e-9)
    np.testing.assert_allclose(res.embedding(1).mmd_squared(res.embedding(0), v=V), naive, rtol=1e-9)
    table = res.effect(newdata=PAPER_PROFILES)
    np.testing.assert_allclose(table.loc[table.term == "mmd", "estimate"], got, rtol=1e-12)
    np.testing.assert_allclose(res.mmd(newdata=PAPER_PROFILES), got, rtol=1e-12)
    assert np.all(res.embedding(1).mmd(res.embedding(1), v=V) < 1e-7)


def test_mmd_quadrature_matches_exact(res):
    """The bootstrap's grid form of ‖μ̂₁ − μ̂₀‖² equals the exact one (measured agreement ~1e-15 relative)."""
    V = res._v(PAPER_PROFILES)
    t, w, s = bootstrap._mmd_grid(res)
    lin = {a: bootstrap._linear(res, a, V, t[:, None], "density", ccme.kernels.Kernel("gaussian", (s,)))
           for a in (1, 0)}
    diff = sum(p.estimate() for p in lin[1]) - sum(p.estimate() for p in lin[0])
    exact = res.embedding(1).mmd(res.embedding(0), v=V)
    np.testing.assert_allclose(np.sqrt((diff**2) @ w), exact, rtol=1e-8)


# -- bootstrap internals -----------------------------------------------------------
def test_unit_features_reproduce_the_estimate(res):
    """Σ_i β_i(v) P_i(y) over the folds is the raw density; the residual identity matches K_V explicitly."""
    V = res._v(PAPER_PROFILES)
    y = res.default_grid(50)[:, None]
    k = res.embedding(1).y_kernel
    lin = bootstrap._linear(res, 1, V, y, "density", k)
    np.testing.assert_allclose(sum(p.estimate() for p in lin), res.density(y, newdata=PAPER_PROFILES, arm=1, normalize=False),
                               rtol=1e-9, atol=1e-12)
    part = res.embedding(1).parts[0]
    K = _twins.gram(part.V1, part.V1, part.v_kernel.name, part.v_kernel.bandwidth_array)
    H = K @ np.linalg.inv(part.L_V @ part.L_V.T)
    P = lin[0].P
    np.testing.assert_allclose(lin[0].R, P - H @ P, atol=1e-8 * np.abs(P).max())


def test_bootstrap_needs_ridge(res):
    """A fold-arm without a linear second stage (here: point masses) gets a clear error naming the methods."""
    atoms = np.zeros((3, 1))
    fake = dataclasses.replace(res, method="neural", embeddings={
        a: ccme.Embedding([_PointMass(atoms)], res.embedding(1).y_kernel) for a in (1, 0)})
    with pytest.raises(ParameterError, match=r"linear second stage \(method in \['deep_feature', 'ridge'\]\).*method='neural'"):
        fake.test_effect(newdata=PAPER_PROFILES, n_boot=49, seed=0)


def _fit(n, scale, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(SCALE_FORMULA, scale_data(n, scale, seed), propensity="logistic", seed=seed, tune="none")


@pytest.mark.slow
def test_effect_calibration_small():
    """A fast version of benchmarks/calibration.py (scale_data: scale = 1 is the null).

    Measured with that script (tune="none", 199 draws, 20 global V-points;
    since the first stage is perturbed too, EFFECT_TEST_FIRST_STAGE): null,
    n = 500, 500 fits: rejection 0.012 (5%) and 0.058 (10%) globally, 0.05
    and 0.088 at x1 = 0.  Scale 2.5, n = 600, 10 fits (seeds 100-109, 99 draws, 10
    global points): global rejection 0.8 (5%) and 0.9 (10%), 1.0 at x1 = 0 (the
    same before the first stage was perturbed).
    Here: 12 null fits at n = 300 may reject at most 3 times at 10%
    (P(Bin(12, 0.058) > 3) = 0.004 for the measured size, 0.026 for an exact one);
    3 fits at scale 2.5, n = 600 must reject at x1 = 0 at 5% every time and
    globally at 10% at least twice (P ≤ 0.03 to fail at the measured power).
    """
    rejections = 0
    for seed in range(12):
        rejections += _fit(300, 1.0, seed).test_effect(n_boot=99, n_global=10).p_value <= 0.10
    assert rejections <= 3
    global_hits = 0
    for seed in range(100, 103):
        fit = _fit(600, 2.5, seed)
        global_hits += fit.test_effect(n_boot=99, n_global=10).p_value <= 0.10
        assert fit.test_effect(newdata=SCALE_PROFILES.iloc[[1]], n_boot=99).p_value <= 0.05
    assert global_hits >= 2
    table = _fit(300, 1.0, 0).test_effect(newdata=SCALE_PROFILES, n_boot=49).table
    assert list(table.index) == list(SCALE_PROFILES.index) and np.all((table.p_value > 0) & (table.p_value <= 1))


def _hand_effect_test(res, V, n_boot, seed, kappa):
    """The MMD test of no effect built by hand: residual features e_i / (1 − H_ii)^κ, the same multipliers.

    The first stage's influence terms (``EFFECT_TEST_FIRST_STAGE``) are
    perturbed as they come, without a leverage.  Returns the statistics
    T(v), the draws T*(v) (n_v, n_boot), the p-values and the global p-value.
    """
    t, w, s = bootstrap._mmd_grid(res)
    kernel = bootstrap.Kernel("gaussian", (s,))
    g = np.random.default_rng(seed).standard_normal((res.n, n_boot))
    draws = np.zeros((len(V), n_boot, len(t)))
    observed = 0.0
    for arm, sign in ((1, 1.0), (0, -1.0)):
        parts = bootstrap._second_stages(res, arm, None, {})
        terms = bootstrap._linear(res, arm, V, t[:, None], "density", kernel, parts=parts,
                                  first_stage=bootstrap.EFFECT_TEST_FIRST_STAGE)  # κ = 0
        h = iter([part.leverages(1) for fold in parts for part in fold])  # the hat matrices' diagonals, per term
        observed = observed + sign * sum(term.estimate() for term in terms)
        for term in terms:
            lev = next(h) if term.P is not None else np.zeros(len(term.units))  # a first-stage term: as it is
            assert term.P is None or np.all((lev > 0) & (lev < 1))
            R = term.R / (1.0 - lev)[:, None] ** kappa
            for e in range(len(V)):
                draws[e] += sign * (g[term.units].T @ (term.beta[:, e : e + 1] * R))
    T = (observed**2) @ w
    boot = (draws**2) @ w
    point = (1.0 + np.sum(boot >= T[:, None], axis=1)) / (1.0 + n_boot)
    return T, boot, point, (1.0 + np.sum(boot.mean(axis=0) >= T.mean())) / (1.0 + n_boot)


def test_effect_draws_use_hc2_residuals(monkeypatch):
    """test_effect's p-values equal a hand-built multiplier bootstrap whose residuals are e_i / √(1 − H_ii).

    The twin (:func:`_hand_effect_test`) takes the plain terms, rescales each
    unit's residual features by its leverage H_ii (from ``leverages``) and
    recomputes T*(v) = ‖Δ*(v)‖² on the MMD's quadrature with the same
    multipliers: the p-values agree exactly for κ = 1/2 (the default, HC2)
    and κ = 0 (the in-sample residuals), and HC2's draws are larger.  On null
    data (scale_data, n = 80), so that the p-values are not all at their floor.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        null = ccme.fit(SCALE_FORMULA, scale_data(80, 1.0, 5), propensity="logistic", seed=5, tune="none")
    V = null.design.encode_v(SCALE_PROFILES)
    assert bootstrap.EFFECT_TEST_LEVERAGE == 0.5
    boots = {}
    for kappa in (0.5, 0.0):
        monkeypatch.setattr(bootstrap, "EFFECT_TEST_LEVERAGE", kappa)
        got = null.test_effect(newdata=SCALE_PROFILES, n_boot=199, seed=11)
        T, boots[kappa], point, global_p = _hand_effect_test(null, V, 199, 11, kappa)
        np.testing.assert_allclose(got.table["statistic"].to_numpy(), T, rtol=1e-12)
        np.testing.assert_array_equal(got.table["p_value"].to_numpy(), point)
        assert got.p_value == global_p
    assert np.all(boots[0.5].mean(axis=1) > boots[0.0].mean(axis=1))


@pytest.mark.parametrize("target", ["regularised", "smoothed"])
def test_effect_intervals_match_the_delta_method(res, target):
    """The bootstrap standard error of the mean difference is the delta-method one of the linear second stage.

    With Gaussian multipliers g, the perturbed raw moments are linear in g:
    Z_a = Σ_i g_i c_a,i, so δ(mean₁ − mean₀) ≈ Σ_i g_i d_i with
    d = (c₁[1] − mean₁ c₁[0]) / mass₁ − (c₀[1] − mean₀ c₀[0]) / mass₀, and
    SE² = Σ d_i².  Measured over multiplier seeds 3, 4, 5: ratio bootstrap /
    analytic 1.00–1.03 at the two profiles, half-width / SE 1.94–2.00; the
    test allows 8% and 10%.  ``target="smoothed"``: the same with the
    bias-reduced terms (iterated Tikhonov weights and the first stage's
    influence), and the interval centred on the bias-reduced mean difference;
    measured ratio 1.11 and 1.00 (seed 3) on this small fit, where the noisier
    bias-reduced mass makes the ratio mean = first / mass less linear: 15%.
    """
    V = res.design.encode_v(PAPER_PROFILES)
    how = bootstrap._bias_reduction(target, res)
    table = res.effect(newdata=PAPER_PROFILES, q=[0.5], n_boot=4000, seed=3, target=target)
    boot_se = table.loc[table.term == "mean_diff", "std_error"].to_numpy()
    kernel = ccme.kernels.Kernel("gaussian", (1.0,))
    analytic, dof = [], []
    coef = {}
    moments = {}
    for arm in (1, 0):
        parts = bootstrap._linear(res, arm, V, np.zeros((0, 1)), "moments", kernel, **how)
        moments[arm] = sum(p.estimate() for p in parts)
        c = np.zeros((res.n, len(V), 3))
        for p in parts:
            np.add.at(c, p.units, p.beta[:, :, None] * p.R[:, None, :])
        coef[arm] = c
    for e in range(len(V)):
        d = 0.0
        for arm, sign in ((1, 1.0), (0, -1.0)):
            mass, first = moments[arm][e, 0], moments[arm][e, 1]
            d = d + sign * (coef[arm][:, e, 1] - first / mass * coef[arm][:, e, 0]) / mass
        analytic.append(np.sqrt(np.sum(d**2)))
        dof.append(np.sum(d**2) ** 2 / np.sum(d**4))  # Satterthwaite: (Σ d²)² / Σ d⁴
    np.testing.assert_allclose(boot_se, analytic, rtol=0.08 if target == "regularised" else 0.15)
    rows = table[table.term == "mean_diff"]
    # The bias-reduced intervals' critical value is Student-t with the influence's Satterthwaite ν (taken by a
    # numerical derivative of the ratio along each unit's contribution: measured 4e-5 and 4e-6 relative to these).
    if target == "smoothed":
        np.testing.assert_allclose(rows.df.to_numpy(), dof, rtol=1e-3)
        critical = stats.t.ppf(0.975, rows.df.to_numpy())
    else:
        assert np.isinf(rows.df).all()
        critical = 1.96
    # the interval is symmetric about the estimate, of about ±critical × SE for a 95% level
    half = (rows.conf_high - rows.conf_low).to_numpy() / 2
    np.testing.assert_allclose(half / rows.std_error.to_numpy(), critical, rtol=0.1)
    centre = rows.estimate.to_numpy() if target == "regularised" else np.array(
        [moments[1][e, 1] / moments[1][e, 0] - moments[0][e, 1] / moments[0][e, 0] for e in range(len(V))])
    np.testing.assert_allclose((rows.conf_high + rows.conf_low).to_numpy() / 2, centre, rtol=1e-12)
    assert table.attrs["target"] == target


def test_small_sample_effect_intervals_scale_the_bootstrap_quantile(res, monkeypatch):
    """EFFECT_SMALL_SAMPLE: every bias-reduced interval's half-width is the bootstrap's times t_ν(p) / z(p), with
    the same draws and centre (p = 0.95 for a 90% interval); the regularised ones keep the bootstrap's."""
    table = res.effect(newdata=PAPER_PROFILES, q=[0.25, 0.5], alpha=[0.1], n_boot=199, seed=2, level=0.9)
    monkeypatch.setattr(bootstrap, "EFFECT_SMALL_SAMPLE", False)
    plain = res.effect(newdata=PAPER_PROFILES, q=[0.25, 0.5], alpha=[0.1], n_boot=199, seed=2, level=0.9)
    assert np.isinf(plain.df).all() and "Satterthwaite" not in plain.attrs["interval"]
    assert "Satterthwaite" in table.attrs["interval"]
    smooth = table.term.isin(bootstrap.SMALL_SAMPLE_EFFECTS).to_numpy()
    assert np.all(table.df[smooth] > 1) and np.isinf(table.df[~smooth]).all()
    np.testing.assert_allclose(table.std_error, plain.std_error, rtol=1e-12)
    ratio = stats.t.ppf(0.95, table.df) / stats.norm.ppf(0.95)
    whole = ~table.term.isin(["mmd", "kolmogorov", "wasserstein"]).to_numpy()  # no floor cuts their lower end
    np.testing.assert_allclose((table.conf_high + table.conf_low)[whole], (plain.conf_high + plain.conf_low)[whole],
                               rtol=1e-12)
    np.testing.assert_allclose((table.conf_high - table.conf_low)[whole],
                               ((plain.conf_high - plain.conf_low) * ratio)[whole], rtol=1e-10)
    regularised = res.effect(newdata=PAPER_PROFILES, q=[0.5], n_boot=99, seed=2, target="regularised")
    assert np.isinf(regularised.df).all()


def test_unit_contributions_of_a_block_are_rows_of_the_whole(res):
    """unit_contributions(start, stop) is the rows start..stop − 1 of the whole (n, features) matrix."""
    V = res.design.encode_v(PAPER_PROFILES)
    terms = bootstrap._linear(res, 1, V, np.linspace(-2, 8, 7)[:, None], "cdf", ccme.kernels.Kernel("gaussian", (1.0,)),
                              **bootstrap._bias_reduction("smoothed", res))
    whole = bootstrap.unit_contributions(terms, 1, res.n)
    for start, stop in ((0, 100), (250, 251), (500, res.n)):
        np.testing.assert_array_equal(bootstrap.unit_contributions(terms, 1, res.n, start, stop), whole[start:stop])


def test_effect_intervals_need_a_linear_second_stage(res):
    fake = dataclasses.replace(res, estimator=ccme.estimators.ESTIMATORS["neural_kernel"], method="neural_kernel")
    with pytest.raises(ParameterError, match="linear second stage.*n_boot=0"):
        fake.effect(newdata=PAPER_PROFILES, n_boot=49)
    assert "std_error" not in fake.effect(newdata=PAPER_PROFILES).columns  # no intervals by default there


def test_dominance_and_location_shift_tests():
    """Fixed seeds: no rejection under each null, rejection against a wider treated law (crossing CDFs).

    Measured p-values (n = 800, seed 2, 199 draws) at the three points: dominance with a +0.5 shift
    1.0, 0.98, 0.905; location shift with a +1 shift 0.905, 0.13, 0.58; against scale 2.5 all ≤ 0.02 and
    both global p-values 0.005.  Bounds: > 0.05 under the nulls, ≤ 0.05 under the alternative (global).
    """
    data_null = scale_data(800, 1.0, 2, shift=0.5)
    data_alt = scale_data(800, 2.5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        null = ccme.fit(SCALE_FORMULA, data_null, propensity="logistic", seed=2, tune="none")
        alt = ccme.fit(SCALE_FORMULA, data_alt, propensity="logistic", seed=2, tune="none")
    assert null.test_dominance(newdata=SCALE_PROFILES, n_boot=199).p_value > 0.05
    shift_null = ccme.fit(SCALE_FORMULA, scale_data(800, 1.0, 2, shift=1.0), propensity="logistic", seed=2,
                          tune="none")
    assert shift_null.test_location_shift(newdata=SCALE_PROFILES, n_boot=199).p_value > 0.05
    dom = alt.test_dominance(newdata=SCALE_PROFILES, n_boot=199)
    loc = alt.test_location_shift(newdata=SCALE_PROFILES, n_boot=199)
    assert dom.p_value <= 0.05 and loc.p_value <= 0.05
    assert "dominates" in dom.hypothesis and "location shift" in repr(loc)


def test_evaluated_embedding_gives_every_functional_unchanged():
    """Embedding.evaluated_at keeps the weights at its V-points: same functionals there, the fold-arm's elsewhere."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ccme.fit(FORMULA, paper_simulation(500, seed=4), seed=4, tune="none", lam1=0.02, lam1_plugin=0.002)
    emb = fit.embedding(1)
    at = emb.evaluated_at(v=PAPER_PROFILES)
    assert type(emb.parts[0]).__name__ == "SplitSecondStage"  # the kept weights are the two terms' sum
    y = np.linspace(-5, 30, 41)
    for name, call in (("density", lambda e: e.density(y, v=PAPER_PROFILES, normalize=False)),
                       ("cdf", lambda e: e.cdf(y, v=PAPER_PROFILES)),
                       ("mean", lambda e: e.mean(v=PAPER_PROFILES)),
                       ("quantile", lambda e: e.quantile([0.1, 0.5, 0.9], v=PAPER_PROFILES)),
                       ("mmd", lambda e: e.mmd(fit.embedding(0), v=PAPER_PROFILES))):
        np.testing.assert_allclose(call(at), call(emb), rtol=1e-10, atol=1e-13, err_msg=name)
    other = pd.DataFrame({f"x{j}": [0.3] for j in range(1, 6)})  # not among the kept V-points: computed afresh
    np.testing.assert_array_equal(at.density(y, v=other), emb.density(y, v=other))


def test_reverse_percentile_interval_matches_numpy():
    """_interval(reverse=True) is [2T − q_hi(T*), 2T − q_lo(T*)] (the basic bootstrap interval), floored at 0."""
    rng = np.random.default_rng(5)
    T = np.array([0.30, 0.05])
    star = T[:, None] + 0.1 + rng.gamma(2.0, 0.05, size=(2, 999))  # draws biased upwards, as a norm's are
    got = bootstrap._interval(T, T, star, 0.9, 0.0, reverse=True)
    hi = np.quantile(star, 0.95, axis=1)
    lo = np.quantile(star, 0.05, axis=1)
    np.testing.assert_allclose(got.conf_low, np.maximum(2 * T - hi, 0.0), rtol=1e-14)
    np.testing.assert_allclose(got.conf_high, np.maximum(2 * T - lo, 0.0), rtol=1e-14)
    assert got.conf_low[1] == 0.0 and got.conf_high[0] < T[0] + 1e-12  # moved down by the draws' bias


def test_squared_reverse_percentile_interval_matches_numpy():
    """_interval(reverse=True, squared=True): √ of [2T² − q_hi(T*²), 2T² − q_lo(T*²)] floored at 0 (the MMD's)."""
    rng = np.random.default_rng(6)
    T = np.array([0.30, 0.05, 0.5])
    star = T[:, None] + 0.1 + rng.gamma(2.0, 0.05, size=(3, 999))
    got = bootstrap._interval(T, T, star, 0.9, 0.0, reverse=True, squared=True)
    hi = np.quantile(star**2, 0.95, axis=1)
    lo = np.quantile(star**2, 0.05, axis=1)
    np.testing.assert_allclose(got.conf_low, np.sqrt(np.maximum(2 * T**2 - hi, 0.0)), rtol=1e-14)
    np.testing.assert_allclose(got.conf_high, np.sqrt(np.maximum(2 * T**2 - lo, 0.0)), rtol=1e-14)
    np.testing.assert_allclose(got.std_error, star.std(axis=1), rtol=1e-14)
    assert got.conf_low[1] == 0.0 and np.all(got.conf_low <= got.conf_high)
    # not the reverse interval on T's own scale: the square moves it by a different amount
    plain = bootstrap._interval(T, T, star, 0.9, 0.0, reverse=True)
    assert np.all(np.abs(got.conf_high - plain.conf_high)[[0, 2]] > 1e-3)


def test_norm_distances_get_reverse_intervals_from_the_same_draws(res, monkeypatch):
    """MMD and Kolmogorov: reverse percentiles; Wasserstein and the rest: the symmetric interval (same draws)."""
    kw = dict(newdata=PAPER_PROFILES, n_boot=199, seed=2, target="regularised")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        reverse = res.effect(**kw).set_index(["profile", "term", "at"], drop=False)
        monkeypatch.setattr(bootstrap, "REVERSE_INTERVAL_EFFECTS", ())
        symmetric = res.effect(**kw).set_index(["profile", "term", "at"], drop=False)
    np.testing.assert_array_equal(reverse["std_error"], symmetric["std_error"])  # the same draws
    moved = reverse["term"].isin(["mmd", "kolmogorov"])
    np.testing.assert_array_equal(reverse.loc[~moved, ["conf_low", "conf_high"]],
                                  symmetric.loc[~moved, ["conf_low", "conf_high"]])
    sym = symmetric.loc[moved]
    unfloored = sym["conf_low"] > 0  # the symmetric interval's halves are equal where the floor did not cut it
    np.testing.assert_allclose((sym["conf_high"] - sym["estimate"])[unfloored],
                               (sym["estimate"] - sym["conf_low"])[unfloored], rtol=1e-12)
    assert np.all(np.abs((reverse.loc[moved, "conf_low"] + reverse.loc[moved, "conf_high"]).to_numpy()
                         - (sym["conf_low"] + sym["conf_high"]).to_numpy()) > 1e-6)


@pytest.mark.parametrize("kind", ["effect", "dominance", "location"])
def test_tests_smooth_a_split_fit_at_one_penalty(monkeypatch, kind):
    """The tests of equal laws run a split fit's parts at one penalty: exactly the unsplit fit at λ₁.

    A fit with λ₁ᵖ ≠ λ₁ smooths the correction at λ₁ and the plug-in part at
    λ₁ᵖ (SplitSecondStage); the tests refit the plug-in part at λ₁
    (:func:`ccme.bootstrap._one_penalty_parts`), and the sum of two ridge
    smoothers at one penalty is the smoother of the summed pseudo-outcome, so
    the statistics and every p-value equal those of the fit at λ₁ alone (same
    data, folds and multipliers).  Without that refit (EFFECT_TEST_PENALTY =
    None, the construction before) they differ.  The tuned defaults split the
    fit; there the split test rejected a true null 40% of the time at n = 400
    (README, "Small arms").
    """
    data = scale_data(120, 1.0, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        common = dict(propensity="logistic", seed=7, tune="none", lam0=0.01)
        split = ccme.fit(SCALE_FORMULA, data, lam1=0.1, lam1_plugin=0.003, **common)
        whole = ccme.fit(SCALE_FORMULA, data, lam1=0.1, **common)
    assert any(len(linear_terms(part)) == 2 for part in split.embeddings[1].parts)
    assert all(len(linear_terms(part)) == 1 for part in whole.embeddings[1].parts)

    def run(fit):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "effect":
                return fit.test_effect(newdata=SCALE_PROFILES, n_boot=99, seed=2)
            test = fit.test_dominance if kind == "dominance" else fit.test_location_shift
            return test(newdata=SCALE_PROFILES, n_boot=99, seed=2)

    assert bootstrap.EFFECT_TEST_PENALTY == "correction"
    got, want = run(split), run(whole)
    np.testing.assert_allclose(got.table["statistic"].to_numpy(), want.table["statistic"].to_numpy(), rtol=1e-8)
    np.testing.assert_array_equal(got.table["p_value"].to_numpy(), want.table["p_value"].to_numpy())
    assert got.p_value == want.p_value
    monkeypatch.setattr(bootstrap, "EFFECT_TEST_PENALTY", None)
    before = run(split)
    assert not np.allclose(before.table["statistic"].to_numpy(), want.table["statistic"].to_numpy(), rtol=1e-3)
    if kind == "effect":  # the other choice, both parts at λ₁ᵖ: the unsplit fit at λ₁ᵖ
        monkeypatch.setattr(bootstrap, "EFFECT_TEST_PENALTY", "plugin")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            at_plugin = ccme.fit(SCALE_FORMULA, data, lam1=0.003, **common)
        got, want = run(split), run(at_plugin)
        np.testing.assert_allclose(got.table["statistic"].to_numpy(), want.table["statistic"].to_numpy(), rtol=1e-8)
        np.testing.assert_array_equal(got.table["p_value"].to_numpy(), want.table["p_value"].to_numpy())


@pytest.mark.parametrize("kind", ["dominance", "location"])
def test_shape_tests_read_both_arms_with_one_kernel(monkeypatch, kind):
    """The dominance and location-shift tests smooth both arms' CDFs with one kernel, the wider arm's.

    A convolution preserves both hypotheses only if it is the same for both
    arms: with the tuned arms' own read-out kernels (here 0.58 and 1.16, a
    y-bandwidth search per arm) equal laws would look different, and the
    location-shift test rejected 17% of true nulls at the 5% level (README).
    The CDF terms are recorded as ``_linear`` builds them.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = ccme.fit(SCALE_FORMULA, scale_data(150, 1.0, 3, shift=1.0), seed=3, propensity="logistic",
                       tune={"y_bandwidth": [0.5, 1.0, 2.0]})
    own = [float(fit.embeddings[a].y_kernel.bandwidth_array[0]) for a in (1, 0)]
    assert own[1] > 1.5 * own[0]  # the arms' kernels differ
    seen = []
    linear = bootstrap._linear

    def recording(res, arm, V, points, feature, kernel, **how):
        if feature == "cdf":
            seen.append((arm, float(kernel.bandwidth_array[0])))
        return linear(res, arm, V, points, feature, kernel, **how)

    monkeypatch.setattr(bootstrap, "_linear", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (fit.test_dominance if kind == "dominance" else fit.test_location_shift)(newdata=SCALE_PROFILES, n_boot=19)
    assert sorted(arm for arm, _ in seen) == [0, 1]
    assert all(bw == max(own) for _, bw in seen)
