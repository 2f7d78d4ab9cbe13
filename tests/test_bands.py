"""Bootstrap bands: their construction, and their coverage of the smoothed target on the paper's simulation.

The coverage study is ``benchmarks/inference/coverage.py`` (README's table).
The bias-reduced bands (``target="smoothed"``, the default) are checked here
against plain numpy twins of their construction (iterated Tikhonov weights,
the first stage's linearised influence); the plain bands
(``target="regularised"``) describe the second stage's sampling variability
around the *ridge-regularised* estimate only.  The bias-reduced bands'
critical values (Student-t with the Satterthwaite degrees of freedom of the
bootstrap variance, after a floor) are checked against a twin built from
dense algebra.  The slow test checks the ordering the study measured on the
paper's simulation (n = 1000, fixed defaults, forest propensity, 3 fits):
the bias-reduced bands cover the smoothed target more often than the plain
ones (mean pointwise coverage 0.60 → 0.93 in the study's 100 data sets at
n = 2000).
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ccme
from ccme.bootstrap import REFIT_NOTE, SD_FLOOR
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.errors import ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.calibration import PAPER_FORMULA, smoothed_target  # noqa: E402


@pytest.fixture(scope="module")
def res():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(PAPER_FORMULA, paper_simulation(600, seed=7), propensity="logistic", seed=7, tune="none")


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_band_construction(res, feature):
    y = np.linspace(-5, 45, 60)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1, target="regularised")
    assert b.order == 1 and "no bias correction" in b.target
    assert b.estimate.shape == (2, 60) and b.index == ["v1", "v2"]
    # estimate = raw / mass (unit-mass smoothed estimate)
    raw = (res.density if feature == "density" else res.cdf)(y, newdata=PAPER_PROFILES, arm=0, normalize=False)
    mass = res.embedding(0).moments(v=PAPER_PROFILES)[0]
    np.testing.assert_allclose(b.estimate, raw / mass[:, None], rtol=1e-9, atol=1e-12)
    assert np.all(b.lower <= b.estimate) and np.all(b.estimate <= b.upper)
    assert np.mean(b.upper_simultaneous - b.lower_simultaneous) > np.mean(b.upper - b.lower)  # sup-t is wider
    assert np.all(b.se >= 0) and b.se.max() > 0
    assert len(b.to_frame()) == 120
    again = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1,
                      target="regularised")
    np.testing.assert_array_equal(b.upper, again.upper)


def _twin_parts(res, arm, V, y, feature, order, v_factor=1.0, penalty_factor=1.0, leverage=0.0):
    """Numpy twin of the bias-reduced estimate's pieces: per fold-arm β_m(v), P, and the first-stage influence.

    ``v_factor``, ``penalty_factor``: the second stage refitted with the V
    bandwidths and nλ₁ scaled (the simultaneous bands' undersmoothing);
    ``leverage``: its residuals divided by (1 − H_ii)^leverage.
    """
    from twins import atom_features, gram

    out = []
    parts = res.embedding(arm).parts
    for part in parts:
        vk, xk, yk = part.v_kernel, part.x_kernel, res.embedding(arm).readout_kernel(feature)
        v_bw = vk.bandwidth_array * v_factor
        assert part.jitter["V"] == 0.0  # so that the shift is nλ₁
        shift = part.shift * penalty_factor
        K = gram(part.V1, part.V1, vk.name, v_bw)
        A = K + shift * np.eye(len(K))
        beta = np.linalg.solve(A, gram(part.V1, V, vk.name, v_bw)) / len(parts)
        total, term = beta.copy(), beta.copy()
        for _ in range(order - 1):  # iterated Tikhonov: β_m = Σ_{j<m} (s (K + sI)⁻¹)^j β
            term = shift * np.linalg.solve(A, term)
            total += term
        K0 = gram(part.X0, part.X0, xk.name, xk.bandwidth_array)
        s0 = part.L_X0[0, 0] ** 2 - 1.0
        A0 = K0 + s0 * np.eye(len(K0))
        F0 = atom_features(part.Y0, y, feature, yk.name, yk.bandwidth_array)
        own = atom_features(part.Y1, y, feature, yk.name, yk.bandwidth_array)
        first = gram(part.X1, part.X0, xk.name, xk.bandwidth_array) @ np.linalg.solve(A0, F0)
        P = part.a[:, None] * own + part.b[:, None] * first
        W = np.linalg.solve(A0, gram(part.X0, part.X1, xk.name, xk.bandwidth_array) @ (part.b[:, None] * total))
        # the mass of ξ̂_i: a_i + b_i Σ_l S_il (μ̂₀'s weights need not sum to one)
        S1 = gram(part.X1, part.X0, xk.name, xk.bandwidth_array) @ np.linalg.solve(A0, np.ones(len(K0)))
        Pm = part.a + part.b * S1
        H = K @ np.linalg.inv(A)
        out.append((part, total, P, Pm, W, s0 * np.linalg.solve(A0, F0),
                    # in-sample residuals of both stages, for the bootstrap's unit contributions
                    (np.eye(len(K)) - H) @ np.column_stack([P, Pm]) / (1.0 - np.diag(H))[:, None] ** leverage,
                    s0 * np.linalg.solve(A0, np.ones(len(K0)))))
    return out


def _twin_contributions(res, twin, e):
    """Unit-mass estimate at V-point e and each unit's whole share u_i(y) of its bootstrap draw, from a twin."""
    mass = sum(beta[:, e] @ Pm for _, beta, _, Pm, *_ in twin)
    estimate = sum(beta[:, e] @ P for _, beta, P, *_ in twin) / mass
    U, Um = np.zeros((res.n, twin[0][2].shape[1])), np.zeros(res.n)
    for part, beta, _, _, W, E0, R, R0m in twin:
        first = part.atom_units[len(part.Y1):]
        U[part.units] += beta[:, e : e + 1] * R[:, :-1]
        Um[part.units] += beta[:, e] * R[:, -1]
        U[first] += W[:, e : e + 1] * E0
        Um[first] += W[:, e] * R0m
    return estimate, (U - estimate * Um[:, None]) / mass


def _twin_scale(U):
    """(sd, floored scale, Satterthwaite ν) of the bias-reduced bands from the units' shares U."""
    variance = (U**2).sum(axis=0)
    scale2 = variance + (SD_FLOOR * np.sqrt(variance.max())) ** 2
    return np.sqrt(variance), np.sqrt(scale2), scale2**2 / (U**4).sum(axis=0)


def _twin_joint_scale(U, y, bandwidth, window):
    """(scale, ν) that studentise the simultaneous band: each unit's u_i(y)² averaged over a Gaussian window.

    The window's sd is ``window`` read-out bandwidths; 0: each point its own
    variance (as :func:`_twin_scale`).
    """
    if window == 0:
        return _twin_scale(U)[1:]
    W = np.exp(-0.5 * ((y[:, None] - y[None, :]) / (window * bandwidth)) ** 2)
    W /= W.sum(axis=1, keepdims=True)
    A = np.stack([W @ (u**2) for u in U])  # unit i's squared share, averaged around each y
    scale2 = A.sum(axis=0) + (SD_FLOOR * np.sqrt((U**2).sum(axis=0).max())) ** 2
    return np.sqrt(scale2), scale2**2 / (A**2).sum(axis=0)


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_bias_reduced_bands_match_a_numpy_twin(res, feature):
    """target="smoothed": centred on Σ β_mᵀP / Σ β_mᵀ1 with the iterated Tikhonov weights β_m of BAND_ORDER."""
    from ccme.bootstrap import BAND_ORDER

    y = np.linspace(-5, 45, 40)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, feature=feature, n_boot=99, seed=1)
    assert b.order == BAND_ORDER > 1 and "bias-reduced" in b.target
    V = res._v(PAPER_PROFILES)
    twin = _twin_parts(res, 1, V, y[:, None], feature, BAND_ORDER)
    raw = sum(beta.T @ P for _, beta, P, *_ in twin)
    mass = sum(beta.T @ Pm for _, beta, _, Pm, *_ in twin)
    np.testing.assert_allclose(b.mass, mass, rtol=1e-8)
    np.testing.assert_allclose(b.estimate, raw / mass[:, None], rtol=1e-7, atol=1e-10)
    # the first stage's linearised influence, against the same twin
    for part, beta, _, _, W, E0, *_ in twin:
        got = part.first_stage_influence(beta, y[:, None], feature, res.embedding(1).readout_kernel(feature))
        np.testing.assert_allclose(got.weights, W, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(got.residuals, E0, rtol=1e-7, atol=1e-12)
        np.testing.assert_array_equal(got.units, part.atom_units[len(part.Y1):])
    # wider than the plain bands: the bias reduction and the first stage's noise cost variance
    plain = res.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, feature=feature, n_boot=99, seed=1,
                      target="regularised")
    assert np.mean(b.upper - b.lower) > np.mean(plain.upper - plain.lower)


@pytest.mark.parametrize("window, union", [(1.0, "joint"), (0.0, "whole")])
def test_small_sample_critical_values_match_a_numpy_twin(res, window, union, monkeypatch):
    """target="smoothed": half-width = sqrt(Σ u_i² + floor²) · t_ν, ν = (Σ u_i² + floor²)² / Σ u_i⁴ (Satterthwaite).

    u_i(y) is unit i's whole share of the bootstrap draw (second stage of its
    fold plus first stage of the other, one multiplier), delta-method
    normalised by the mass; the twin builds it from dense algebra.  The
    simultaneous band is that construction's sup-t band joined with the same
    on the second stage refitted with undersmoothed V bandwidths and nλ₁ ×
    2/15, around that refit, with leave-one-out residuals e_i / (1 − H_ii),
    at the critical value that gives the two, as a union, the bootstrap's
    joint level (``union="joint"``: the fit's band too; "whole": the fit's
    band at its own); both simultaneous bands studentised by the variance
    averaged over a window of ``window`` read-out bandwidths
    (``VARIANCE_WINDOW``; 0: each point's own).
    """
    from scipy import stats

    import ccme.bootstrap as bootstrap
    from ccme.bootstrap import BAND_ORDER, LEVERAGE_CORRECTION, SIMULTANEOUS_PENALTY, simultaneous_v_factor

    monkeypatch.setattr(bootstrap, "VARIANCE_WINDOW", window)
    monkeypatch.setattr(bootstrap, "UNION_FIT_BAND", union)
    h = res.embeddings[1].readout_kernel("density").bandwidth_array[0]

    y = np.linspace(-5, 45, 40)
    level = 0.9
    b = res.bands(level, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=199, seed=3)
    V = res._v(PAPER_PROFILES)
    twin = _twin_parts(res, 1, V, y[:, None], "density", BAND_ORDER)
    factor = simultaneous_v_factor(res.n)
    assert b.v_factor == factor < 1
    assert b.target.endswith(REFIT_NOTE + ")")
    assert LEVERAGE_CORRECTION == 1.0
    narrowed = _twin_parts(res, 1, V, y[:, None], "density", BAND_ORDER, factor, SIMULTANEOUS_PENALTY, leverage=1.0)
    for e in range(len(V)):
        estimate, U = _twin_contributions(res, twin, e)
        np.testing.assert_allclose(b.estimate[e], estimate, rtol=1e-7, atol=1e-10)
        sd, scale, nu = _twin_scale(U)
        np.testing.assert_allclose(b.se[e], sd, rtol=1e-6)
        np.testing.assert_allclose(b.df[e], nu, rtol=1e-6)
        np.testing.assert_allclose(b.upper[e] - b.estimate[e], scale * stats.t.ppf(0.95, nu), rtol=1e-6)
        # the simultaneous band: the refit's centre; one joint critical value on the normal scale, mapped
        # through each point's t
        centre, U_s = _twin_contributions(res, narrowed, e)
        np.testing.assert_allclose(b.estimate_simultaneous[e], centre, rtol=1e-6, atol=1e-9)
        _, scale_s, nu_s = _twin_scale(U_s)
        assert np.mean(scale_s) > np.mean(scale)  # less smoothing, more variance
        joint, nu_joint = _twin_joint_scale(U, y, h, window)
        joint_s, nu_joint_s = _twin_joint_scale(U_s, y, h, window)
        if window:  # the average pools the units around y: more of them behind the variance
            assert np.median(nu_joint / nu) > 1 and not np.allclose(joint, scale, rtol=1e-3)
        # the union of the two sup-t bands with one joint critical value: the level-quantile over the draws
        # (the same multipliers) of sup_y min(|Δ*|/scale, |Δ*_s|/scale_s), mapped through each point's t
        g = np.random.default_rng(3).standard_normal((res.n, 199))
        T, T_s = np.abs(g.T @ U) / joint, np.abs(g.T @ U_s) / joint_s
        c_union = np.quantile(np.minimum(T, T_s).max(axis=1), level)
        assert c_union < min(np.quantile(T.max(axis=1), level),
                                                    np.quantile(T_s.max(axis=1), level))
        c_fit = c_union if union == "joint" else np.quantile(T.max(axis=1), level)
        outer = []
        for c, crit, sc, df_ in ((estimate, c_fit, joint, nu_joint), (centre, c_union, joint_s, nu_joint_s)):
            half = stats.t.ppf(stats.norm.cdf(crit), df_) * sc
            outer.append((c - half, c + half))
        # ... and never inside the pointwise band
        lower = np.minimum.reduce([outer[0][0], outer[1][0], b.lower[e]])
        upper = np.maximum.reduce([outer[0][1], outer[1][1], b.upper[e]])
        np.testing.assert_allclose(b.lower_simultaneous[e], lower, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(b.upper_simultaneous[e], upper, rtol=1e-6, atol=1e-12)
    assert np.all(b.df >= 1) and b.df.min() < 30 < b.df.max()  # the tails rest on few units, the body on many
    plain = res.bands(level, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=199, seed=3, target="regularised")
    assert np.all(np.isinf(plain.df)) and list(plain.to_frame().columns)[4] == "df"
    assert plain.estimate_simultaneous is None and plain.v_factor == 1.0


def test_satterthwaite_df():
    from ccme.bootstrap import satterthwaite_df

    u = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 3.0], [1.0, 0.0]])  # 4 equal units; one unit alone
    nu = satterthwaite_df((u**2).sum(axis=0), (u**4).sum(axis=0))
    np.testing.assert_allclose(nu, [4.0, 1.0])
    # a known part (a floor) raises ν; no contribution at all: ν = ∞ (normal quantiles)
    assert satterthwaite_df(np.array([9.0 + 9.0]), np.array([81.0]))[0] == 4.0
    assert np.isinf(satterthwaite_df(np.array([1.0]), np.array([0.0]))[0])


def test_iterated_tikhonov_of_order_two_is_twicing(res):
    """Order 2 = the smoother applied to its own residuals and added (Tukey's twicing), for the fold-arm's ξ̂."""
    from ccme.bootstrap import iterated_tikhonov

    part = res.embedding(1).parts[0]
    V = res._v(PAPER_PROFILES)
    y = np.linspace(-5, 45, 30)[:, None]
    kernel = res.embedding(1).y_kernel
    P = part.unit_features(y, "density", kernel)
    beta = part.beta(V)
    fitted_at_units = P - part.residual_features(P)  # H P
    twice = beta.T @ P + beta.T @ (P - fitted_at_units)  # f̂(v) + S(ξ̂ − f̂)(v)
    np.testing.assert_allclose(iterated_tikhonov(part, beta, 2).T @ P, twice, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(iterated_tikhonov(part, beta, 1), beta)


def test_band_errors(res):
    with pytest.raises(ParameterError, match="target"):
        res.bands(target="truth", n_boot=20)
    with pytest.raises(ParameterError, match="feature"):
        res.bands(feature="pdf", n_boot=20)
    with pytest.raises(ParameterError, match="level"):
        res.bands(level=1.5, n_boot=20)
    with pytest.raises(ParameterError, match="arm"):
        res.bands(arm=2, n_boot=20)


@pytest.mark.slow
def test_bias_reduction_raises_coverage():
    y = np.linspace(-5.0, 45.0, 100)
    coverage = {"smoothed": [], "regularised": []}
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = ccme.fit(PAPER_FORMULA, paper_simulation(1000, seed=seed), propensity="forest", seed=seed,
                           tune="none")
        target = smoothed_target(y, PAPER_PROFILES, fit.embedding(1).y_kernel.bandwidth_array[0], 1)
        for name in coverage:
            b = fit.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=199, target=name)
            coverage[name].append(np.mean((b.lower <= target) & (target <= b.upper)))
    plain, reduced = np.mean(coverage["regularised"]), np.mean(coverage["smoothed"])
    assert 0.4 <= plain <= 0.85 and reduced >= plain + 0.05 and reduced <= 1.0


@pytest.mark.parametrize("feature", ["density", "cdf"])
@pytest.mark.parametrize("target", ["regularised", "smoothed"])
def test_bands_surround_the_curve_they_belong_to(res, feature, target):
    """Mapped like the curve (clip and rescale / clip and running maximum), the band holds the curve it belongs to.

    The plain bands belong to the reported curve; the bias-reduced ones to the
    bias-reduced estimate mapped the same way.
    """
    y = np.linspace(-5, 45, 60)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1, target=target)
    drawn = b.on_the_curve()
    curve = drawn["estimate"]
    if target == "regularised":
        reported = (res.density if feature == "density" else res.cdf)(y, newdata=PAPER_PROFILES, arm=0)
        np.testing.assert_allclose(curve, reported, rtol=1e-9, atol=1e-12)
    tol = 1e-12
    assert np.all(drawn["lower_simultaneous"] <= curve + tol) and np.all(curve <= drawn["upper_simultaneous"] + tol)
    assert np.all(drawn["lower"] <= curve + tol) and np.all(curve <= drawn["upper"] + tol)


def test_variance_window(monkeypatch):
    """Gaussian weights at VARIANCE_WINDOW read-out bandwidths, rows summing to one; a coarse grid keeps each point."""
    import ccme.bootstrap as bootstrap
    from ccme.kernels import Kernel

    y = np.linspace(0.0, 2.0, 5)[:, None]  # steps of 0.5
    W = bootstrap.variance_window(y, Kernel("gaussian", (0.5,)))
    np.testing.assert_allclose(W.sum(axis=1), 1.0)
    raw = np.exp(-0.5 * ((y - y.T) / (bootstrap.VARIANCE_WINDOW * 0.5)) ** 2)
    np.testing.assert_allclose(W, raw / raw.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(bootstrap.variance_window(y, Kernel("gaussian", (1e-3,))), np.eye(5), atol=1e-12)
    # a bivariate outcome: an ignored column (bandwidth inf) adds no distance
    Y2 = np.column_stack([y[:, 0], [0.0, 5.0, -3.0, 1.0, 9.0]])
    np.testing.assert_allclose(bootstrap.variance_window(Y2, Kernel("gaussian", (0.5, np.inf))), W)
    monkeypatch.setattr(bootstrap, "VARIANCE_WINDOW", 0.0)
    assert bootstrap.variance_window(y, Kernel("gaussian", (0.5,))) is None
