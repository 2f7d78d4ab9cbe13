"""The location stage, ``fit(location="linear")`` (:mod:`ccme.location`): its ridge against brute-force refits, its
DR-learner against the formula, the located embedding's functionals against plain numpy twins, and its fit, save
and refusals."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.errors import DataError, FormatError, ParameterError
from ccme.location import PENALTY_GRID, LocationModel, check_location, fit_location, ridge_loo

F = "y ~ a | x1 + x2 | x3 + x4"


# ---------------------------------------------------------------------------------------------------------------------
# the ridge with leave-one-out penalty
# ---------------------------------------------------------------------------------------------------------------------
def _brute_loo(Z, y, w, lam, center, scale):
    """Leave-one-out residuals by n refits (intercept unpenalised, the standardisation of the full data)."""
    Zs = (Z - center) / scale
    n, p = Zs.shape
    out = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        D = np.column_stack([np.ones(keep.sum()), Zs[keep]])
        P = np.diag([0.0] + [lam * w.sum()] * p)
        b = np.linalg.solve(D.T @ (w[keep, None] * D) + P, D.T @ (w[keep] * y[keep]))
        out[i] = y[i] - np.r_[1.0, Zs[i]] @ b
    return out


@pytest.mark.parametrize("weighted", [False, True])
def test_ridge_leave_one_out_residuals_equal_refits(weighted):
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((50, 4))
    Z[:, 3] = 2.0  # a constant column is left alone (scale 1, coefficient 0)
    y = np.column_stack([1.0 + Z[:, :3] @ [1.0, 0.0, -1.0] + rng.standard_normal(50), rng.standard_normal(50)])
    w = rng.uniform(0.3, 3.0, 50) if weighted else np.ones(50)
    fit = ridge_loo(Z, y, w if weighted else None)
    assert fit.scale[3] == 1.0 and np.all(fit.coef[3] == 0.0)
    for j in range(2):
        want = _brute_loo(Z, y[:, j], w, fit.penalty[j], fit.center, fit.scale)
        np.testing.assert_allclose(fit.loo_residuals[:, j], want, rtol=1e-9, atol=1e-10)
    # the chosen penalty minimises the weighted leave-one-out error over the grid (column 0, a few grid points)
    cv = {lam: w @ _brute_loo(Z, y[:, 0], w, lam, fit.center, fit.scale) ** 2 for lam in PENALTY_GRID[::4]}
    assert w @ fit.loo_residuals[:, 0] ** 2 <= min(cv.values()) * (1 + 1e-9)
    # the pure-noise column is shrunk much harder than the signal's
    assert fit.penalty[1] > fit.penalty[0]


def test_ridge_coefficients_solve_the_penalised_normal_equations():
    rng = np.random.default_rng(5)
    Z = rng.standard_normal((80, 3))
    y = (Z @ [0.5, -2.0, 0.0] + rng.standard_normal(80))[:, None]
    fit = ridge_loo(Z, y)
    Zs = (Z - fit.center) / fit.scale
    want = np.linalg.solve(Zs.T @ Zs + fit.penalty[0] * 80 * np.eye(3), Zs.T @ (y[:, 0] - y.mean()))
    np.testing.assert_allclose(fit.coef[:, 0], want, rtol=1e-10)
    np.testing.assert_allclose(fit.predict(Z), y.mean() + Zs @ want[:, None], rtol=1e-10)


# ---------------------------------------------------------------------------------------------------------------------
# the mean model per mode
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(7)
    n = 300
    X = rng.standard_normal((n, 3))
    pi = 1.0 / (1.0 + np.exp(-X[:, 2]))
    A = (rng.uniform(size=n) < pi).astype(int)
    Y = (1.0 + 2.0 * X[:, :1] + A[:, None] + X[:, 2:3] + rng.standard_normal((n, 1)))
    scores = np.column_stack([1.0 - pi, pi])
    return X[:, :2], X, Y, A, scores


@pytest.mark.parametrize("mode", ["dr", "ipw", "pi", "onestep"])
def test_mean_model_regresses_the_modes_target_on_v(arrays, mode):
    V, Xo, Y, A, scores = arrays
    models, residual = fit_location(V=V, Xo=Xo, Y=Y, A=A, scores=scores, arms=(1, 0), mode=mode)
    for arm in (1, 0):
        own = A == arm
        if mode == "onestep":
            fit = ridge_loo(V[own], Y[own])
            np.testing.assert_allclose(residual[own], fit.loo_residuals, rtol=1e-12)
        else:
            first = ridge_loo(Xo[own], Y[own])
            m0 = first.predict(Xo)
            m0[own] = Y[own] - first.loo_residuals
            ind = own[:, None].astype(float)
            mean = Y[own].mean(axis=0)        # ipw: the DR pseudo-outcome with the arm's mean as outcome model
            psi = {"dr": m0 + ind * (Y - m0) / scores[:, [arm]], "ipw": mean + ind * (Y - mean) / scores[:, [arm]],
                   "pi": m0}[mode]
            fit = ridge_loo(V, psi)
            # a unit's residual is centred on its leave-one-out mean: psi_i minus its PRESS residual
            np.testing.assert_allclose(residual[own], Y[own] - (psi - fit.loo_residuals)[own], rtol=1e-10)
        np.testing.assert_allclose(models[arm].predict(V), fit.predict(V), rtol=1e-12)
        assert models[arm].target == mode


@pytest.mark.parametrize("mode", ["dr", "ipw", "pi", "onestep"])
def test_a_shift_of_the_outcome_shifts_every_modes_mean_model(arrays, mode):
    """Y + c gives the mean models moved by c and the same residuals: the estimate does not depend on the outcome's
    origin.  With the IPW target 1{A = a} Y / π̂ alone, c = 100 moved the mean models by up to 6.2 and 10.9 beyond c
    on these data and the residuals by up to 11 (median 2.9)."""
    V, Xo, Y, A, scores = arrays
    models, residual = fit_location(V=V, Xo=Xo, Y=Y, A=A, scores=scores, arms=(1, 0), mode=mode)
    moved, moved_residual = fit_location(V=V, Xo=Xo, Y=Y + 100.0, A=A, scores=scores, arms=(1, 0), mode=mode)
    np.testing.assert_allclose(moved_residual, residual, rtol=0, atol=1e-10)
    for arm in (1, 0):
        np.testing.assert_allclose(moved[arm].predict(V), models[arm].predict(V) + 100.0, rtol=0, atol=1e-10)


@pytest.mark.parametrize("mode", ["dr", "ipw", "onestep"])
def test_a_far_out_outcome_does_not_pull_the_mean_model(arrays, mode):
    """One outcome moved 10⁴ out: the mean models are those fitted to the outcomes clipped to Tukey's far-out fences
    (Q1 − 3 IQR, Q3 + 3 IQR), and that unit's residual is its own outcome less its centre."""
    V, Xo, Y, A, scores = arrays
    far = np.flatnonzero(A == 1)[0]
    moved = Y.copy()
    moved[far] = 1e4
    models, residual = fit_location(V=V, Xo=Xo, Y=moved, A=A, scores=scores, arms=(1, 0), mode=mode)
    q1, q3 = np.quantile(moved, [0.25, 0.75])
    clipped = np.clip(moved, q1 - 3 * (q3 - q1), q3 + 3 * (q3 - q1))
    assert clipped[far, 0] < 20 and np.array_equal(np.delete(clipped, far), np.delete(moved, far))
    twins, twin_residual = fit_location(V=V, Xo=Xo, Y=clipped, A=A, scores=scores, arms=(1, 0), mode=mode)
    for arm in (1, 0):
        np.testing.assert_allclose(models[arm].predict(V), twins[arm].predict(V), rtol=1e-12)
    np.testing.assert_allclose(residual - twin_residual, moved - clipped, rtol=0, atol=1e-9)


def test_dr_mean_finds_the_counterfactual_slope(arrays):
    """Confounding by X3 outside V biases the arm's own regression; the DR-learner's mean is E[Y^a | V] = 1 + 2 v1 + a."""
    V, Xo, Y, A, scores = arrays
    models, _ = fit_location(V=V, Xo=Xo, Y=Y, A=A, scores=scores, arms=(1, 0), mode="dr")
    at = np.array([[0.0, 0.0], [1.0, 0.0]])
    for arm in (1, 0):
        m = models[arm].predict(at)[:, 0]
        # tolerance measured: over seeds 0-19 of this design the largest error of either is 0.30
        assert abs(m[0] - (1.0 + arm)) < 0.4 and abs(m[1] - m[0] - 2.0) < 0.4


def test_location_model_state_and_checks():
    m = LocationModel(center=np.zeros(2), scale=np.ones(2), coef=np.ones((2, 1)), intercept=np.zeros(1),
                      penalty=np.ones(1), target="dr")
    back = LocationModel.from_state(m.to_state())
    np.testing.assert_array_equal(back.coef, m.coef)
    assert back.target == "dr" and "DR pseudo-outcome" in back.describe()
    with pytest.raises(DataError, match="2 column"):
        m.predict(np.zeros((3, 1)))
    with pytest.raises(FormatError):
        LocationModel(center=np.zeros(2), scale=np.zeros(2), coef=np.ones((2, 1)), intercept=np.zeros(1),
                      penalty=np.ones(1), target="dr")
    with pytest.raises(ValueError):  # frozen arrays
        m.coef[0, 0] = 2.0
    assert check_location(None) is None and check_location("linear") == "linear"
    with pytest.raises(ParameterError, match="location"):
        check_location("quadratic")


# ---------------------------------------------------------------------------------------------------------------------
# the located embedding against numpy twins
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def located():
    data = paper_simulation(500, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(F, data, seed=3, location="linear")
    return data, res


def test_located_functionals_equal_their_numpy_twins(located):
    _, res = located
    emb = res.embedding(1)
    V = res.design.encode_v(PAPER_PROFILES)
    atoms, c = emb.weights(v=V)
    s = emb.shift(v=V)
    np.testing.assert_allclose(s, res.location[1].predict(V))
    y = np.linspace(-10.0, 50.0, 61)
    h = emb.y_kernel.bandwidth[0]
    hf = emb.cdf_kernel.bandwidth[0]
    dens = np.array([c[:, e] @ norm.pdf((y[None, :] - s[e] - atoms[:, :1]) / h) / h for e in range(len(V))])
    np.testing.assert_allclose(emb.density(y, v=V, normalize=False), dens, rtol=1e-10, atol=1e-14)
    cdf = np.array([c[:, e] @ norm.cdf((y[None, :] - s[e] - atoms[:, :1]) / hf) for e in range(len(V))])
    np.testing.assert_allclose(emb.cdf(y, v=V, normalize=False), cdf, rtol=1e-10, atol=1e-14)
    mass = c.sum(axis=0)
    mean = (atoms[:, 0] @ c) / mass + s[:, 0]
    second = ((atoms[:, 0] ** 2) @ c) / mass
    var = second - ((atoms[:, 0] @ c) / mass) ** 2 + h**2  # a shift leaves the variance alone
    got_mass, got_mean, got_var = emb.moments(v=V)
    np.testing.assert_allclose(got_mass, mass, rtol=1e-12)
    np.testing.assert_allclose(got_mean[:, 0], mean, rtol=1e-10)
    np.testing.assert_allclose(got_var[:, 0], var, rtol=1e-8)
    # MMD between the arms: the explicit Gram of both arms' shifted atoms
    other = res.embedding(0)
    atoms0, c0 = other.weights(v=V)
    s0 = other.shift(v=V)
    hk = emb.rkhs_kernel.bandwidth[0]
    for e in range(len(V)):
        Z = np.concatenate([atoms[:, 0] + s[e, 0], atoms0[:, 0] + s0[e, 0]])
        W = np.concatenate([c[:, e], -c0[:, e]])
        K = norm.pdf((Z[:, None] - Z[None, :]) / hk) / hk
        assert emb.mmd_squared(other, v=V[e : e + 1])[0] == pytest.approx(max(W @ K @ W, 0.0), rel=1e-8, abs=1e-14)


def test_a_constant_location_shifts_every_functional(located):
    """With m(v) = 3 everywhere, the located embedding is the plain one moved by 3: quantiles +3, CDF at y + 3."""
    _, res = located
    plain = res.embedding(1)
    from ccme.embedding import Embedding

    plain = Embedding(plain.parts, plain.y_kernel, cdf_kernel=plain.cdf_kernel, outcome_range=(np.array([-20.0]),
                                                                                               np.array([60.0])))
    up = plain.with_location(LocationModel(center=np.zeros(2), scale=np.ones(2), coef=np.zeros((2, 1)),
                                           intercept=np.array([3.0]), penalty=np.zeros(1), target="dr"))
    V = res.design.encode_v(PAPER_PROFILES)
    y = np.linspace(0.0, 30.0, 31)
    np.testing.assert_allclose(up.cdf(y + 3.0, v=V), plain.cdf(y, v=V), rtol=1e-10, atol=1e-12)
    grid = np.linspace(-20.0, 60.0, 4001)
    np.testing.assert_allclose(up.quantile([0.1, 0.5, 0.9], v=V, grid=grid + 3.0),
                               plain.quantile([0.1, 0.5, 0.9], v=V, grid=grid) + 3.0, atol=1e-8)
    np.testing.assert_allclose(up.mean(v=V), plain.mean(v=V) + 3.0, rtol=1e-12)
    draws = up.sample(5, v=V, seed=1)
    np.testing.assert_allclose(draws, plain.sample(5, v=V, seed=1) + 3.0, atol=1e-9)
    with pytest.raises(ParameterError, match="already"):
        up.with_location(up.location)


# ---------------------------------------------------------------------------------------------------------------------
# the fit
# ---------------------------------------------------------------------------------------------------------------------
def _location_family(n, seed):
    """Y^a | V ~ N(a + v1 + 0.8 v2 - 0.5 v3, 1) with V three-dimensional: V moves the law by a shift only."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((n, 3))
    a = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-0.5 * V[:, 0]))).astype(int)
    y = a + V @ [1.0, 0.8, -0.5] + rng.standard_normal(n)
    return pd.DataFrame({"y": y, "a": a, "v1": V[:, 0], "v2": V[:, 1], "v3": V[:, 2]})


def test_location_lowers_the_error_on_a_location_family():
    """Measured on seeds 1-10 (data and fit) at n = 600: the located fit's ISE is 0.09-0.32 of the plain fit's."""
    data = _location_family(600, seed=1)
    before = data.copy()
    grid = np.linspace(-6.0, 7.0, 300)
    rng = np.random.default_rng(99)
    points = pd.DataFrame(rng.standard_normal((20, 3)), columns=["v1", "v2", "v3"])
    errors = {}
    for location in (None, "linear"):
        res = ccme.fit("y ~ a | v1 + v2 + v3", data, seed=1, location=location)
        p = res.density(grid, newdata=points, arm=1)
        truth = norm.pdf(grid[None, :] - (1.0 + points.to_numpy() @ [1.0, 0.8, -0.5])[:, None])
        errors[location] = np.mean(np.trapezoid((p - truth) ** 2, grid, axis=1))
    pd.testing.assert_frame_equal(data, before)  # the caller's data is not modified
    assert errors["linear"] < 0.5 * errors[None]


def test_location_fit_saves_and_loads(located, tmp_path):
    _, res = located
    assert "location='linear'" in res.call and set(res.location) == {1, 0}
    assert "located by a linear mean" in repr(res.embedding(1)) and "located by a linear mean" in repr(res)
    y = np.linspace(0.0, 40.0, 9)
    res.save(tmp_path / "loc.ccme")
    back = ccme.load(tmp_path / "loc.ccme")
    np.testing.assert_array_equal(back.density(y, newdata=PAPER_PROFILES), res.density(y, newdata=PAPER_PROFILES))
    np.testing.assert_array_equal(back.quantile([0.5], newdata=PAPER_PROFILES), res.quantile([0.5], newdata=PAPER_PROFILES))
    for arm in (1, 0):
        np.testing.assert_array_equal(back.location[arm].units, res.location[arm].units)
        np.testing.assert_array_equal(back.location[arm].residuals, res.location[arm].residuals)
    assert back.supports_bootstrap
    # a file of the previous version has no location stage
    state = res.to_state()
    state["version"] = 2
    for node in state["embeddings"].values():
        del node["location"]
    assert ccme.CCMEResult.from_state(state).location is None
    table = res.effect(newdata=PAPER_PROFILES, n_boot=0)
    means = res.mean(newdata=PAPER_PROFILES, arm=1) - res.mean(newdata=PAPER_PROFILES, arm=0)
    np.testing.assert_allclose(table[table.term == "mean_diff"].estimate.to_numpy(), np.ravel(means), rtol=1e-10)
    medians = res.quantile([0.5], newdata=PAPER_PROFILES, arm=1) - res.quantile([0.5], newdata=PAPER_PROFILES, arm=0)
    got = table[(table.term == "qte") & np.isclose(table["at"], 0.5)].estimate.to_numpy()
    np.testing.assert_allclose(got, np.ravel(medians), rtol=1e-6, atol=1e-6)
    text = str(res.summary(n_boot=49))
    assert "Location" in text and "MMD test, 49 draws" in text


def test_a_location_model_of_an_earlier_file_refuses_the_bootstrap(located):
    """A version-1 location model has no units and residuals: bands apply, tests and effect intervals say why not."""
    _, res = located
    state = res.to_state()
    for node in state["embeddings"].values():
        node["location"]["version"] = 1
        del node["location"]["units"], node["location"]["residuals"]
    old = ccme.CCMEResult.from_state(state)
    assert old.location[1].units is None and not old.supports_bootstrap
    with pytest.raises(ParameterError, match="units and residuals"):
        old.test_effect(newdata=PAPER_PROFILES, n_boot=29)
    with pytest.raises(ParameterError, match="units and residuals"):
        old.effect(newdata=PAPER_PROFILES, n_boot=29)
    table = old.effect(newdata=PAPER_PROFILES)  # estimates only, without asking
    assert "conf_low" not in table.columns
    old.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=np.linspace(0.0, 40.0, 9), n_boot=29)
    assert "location stage with its units" in str(old.summary(n_boot=29))


def test_location_rejects_unknown_values():
    with pytest.raises(ParameterError, match="location"):
        ccme.fit(F, paper_simulation(200, seed=1), location="spline", tune="none")


@pytest.mark.parametrize("kwargs", [dict(mode="onestep"), dict(n_rep=2), dict(mode="ipw", folds=3)])
def test_location_runs_with_other_options(kwargs):
    data = paper_simulation(300, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit(F, data, seed=1, tune="none", location="linear", **kwargs)
    assert np.all(np.isfinite(res.mean(newdata=PAPER_PROFILES)))
    assert res.location[1].target == res.mode


def test_location_with_three_arms_and_a_bivariate_outcome():
    rng = np.random.default_rng(4)
    n = 450
    v = rng.standard_normal(n)
    a = rng.integers(0, 3, n)
    data = pd.DataFrame({"y1": v + a + rng.standard_normal(n), "y2": -v + rng.standard_normal(n), "a": a, "v": v,
                         "w": rng.standard_normal(n)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit("y1 + y2 ~ a | v | w", data, seed=2, tune="none", location="linear")
    assert set(res.location) == {0, 1, 2} and res.location[2].d_y == 2
    means = res.mean(newdata=pd.DataFrame({"v": [0.0]}), arm=2)
    assert abs(means[0][0] - 2.0) < 0.4 and abs(means[0][1]) < 0.4


def _auto_and_its_candidates(data, formula, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {kind: ccme.fit(formula, data, seed=seed, location=kind) for kind in (None, "linear", "auto")}


def _check_auto(fits, want):
    """"auto" is the candidate the threshold rule picks, fitted as that candidate is on its own."""
    from ccme.location import AUTO_THRESHOLD, criterion_difference, readout_criterion

    auto = fits["auto"]
    diff, se = criterion_difference(fits["linear"].tuning, fits[None].tuning)
    # The paired terms add up to the curves' own criteria.
    np.testing.assert_allclose(diff, readout_criterion(fits["linear"].tuning) - readout_criterion(fits[None].tuning),
                               rtol=1e-10, atol=1e-12)
    chosen = "linear" if diff < -AUTO_THRESHOLD * se else None
    assert chosen == want
    assert auto.tuning.chosen["location"] == (chosen or "none")
    assert (auto.location is None) == (chosen is None)
    y = np.linspace(-10.0, 40.0, 11)
    np.testing.assert_array_equal(auto.density(y, newdata=PAPER_PROFILES), fits[chosen].density(y, newdata=PAPER_PROFILES))
    note = next(note for note in auto.tuning.notes if note.startswith("location 'auto'"))
    assert f"{diff:.4g}" in note and f"{se:.3g}" in note
    assert "'auto'" in str(auto.summary(n_boot=0))


def test_auto_keeps_the_plain_fit_unless_the_located_one_is_clearly_better():
    # The paper's simulation, n = 500: the located fit's criterion is higher (0.0059 above, SE 0.0034: +1.8 SE).
    _check_auto(_auto_and_its_candidates(paper_simulation(500, seed=6), F, seed=2), want=None)


def test_auto_keeps_the_located_fit_where_v_moves_the_law_by_a_shift():
    # Y^a = 3 x1 + a + N(0, 1/4): the located fit's criterion is lower by 2.0 standard errors (0.069, SE 0.034).
    data = paper_simulation(500, seed=6)
    data = data.assign(y=3.0 * data.x1 + data.a + 0.5 * np.random.default_rng(3).standard_normal(len(data)))
    _check_auto(_auto_and_its_candidates(data, F, seed=2), want="linear")


def test_criterion_difference_is_the_sum_of_paired_unit_differences():
    """Against a plain numpy twin: unit totals over arms, then √m times their standard deviation."""
    from ccme.location import criterion_difference
    from ccme.tuning import TuningCurve, TuningReport

    rng = np.random.default_rng(0)

    def report(terms):
        curves = [TuningCurve("y_bandwidth", np.ones(1), np.array([t.sum()]), "ISE", 1.0, arm,
                              held=(units[arm], t)) for arm, t in terms.items()]
        return TuningReport(curves=curves)

    units = {1: np.array([0, 2, 5, 7]), 0: np.array([1, 2, 3, 7, 9])}   # units 2 and 7 held in both arms
    a = {arm: rng.standard_normal(len(u)) for arm, u in units.items()}
    b = {arm: rng.standard_normal(len(u)) for arm, u in units.items()}
    totals = {}
    for arm in units:
        for unit, da in zip(units[arm], a[arm] - b[arm]):
            totals[unit] = totals.get(unit, 0.0) + da
    d = np.array(list(totals.values()))
    diff, se = criterion_difference(report(a), report(b))
    np.testing.assert_allclose(diff, d.sum(), rtol=1e-12)
    np.testing.assert_allclose(se, np.sqrt(len(d) * np.sum((d - d.mean()) ** 2) / (len(d) - 1)), rtol=1e-12)
    # One arm's: that arm's paired differences alone.
    d1 = a[1] - b[1]
    diff1, se1 = criterion_difference(report(a), report(b), arms=(1,))
    np.testing.assert_allclose([diff1, se1], [d1.sum(), np.sqrt(len(d1)) * np.std(d1, ddof=1)], rtol=1e-12)
    # Other held units, or none: no difference to threshold.
    moved = report(a)
    moved.curves[0] = TuningCurve("y_bandwidth", np.ones(1), np.ones(1), "ISE", 1.0, 1, held=(units[1] + 1, a[1]))
    assert np.isnan(criterion_difference(moved, report(b))).all()
    assert np.isnan(criterion_difference(TuningReport(), report(b))).all()


@pytest.mark.parametrize("kwargs", [dict(tune="none"), dict(y_bandwidth=2.0)])
def test_auto_needs_the_readout_criterion(kwargs):
    with pytest.raises(ParameterError, match="location='auto'"):
        ccme.fit(F, paper_simulation(200, seed=1), location="auto", **kwargs)


def test_bands_of_a_located_fit_are_the_plain_bands_moved_by_the_location(located):
    """With m(v) = 3 everywhere, the bands at y + 3 are the unlocated fit's bands at y."""
    import dataclasses

    _, res = located
    plain = ccme.bootstrap.residual_result(res)
    const = LocationModel(center=np.zeros(2), scale=np.ones(2), coef=np.zeros((2, 1)), intercept=np.array([3.0]),
                          penalty=np.zeros(1), target="dr")
    moved = dataclasses.replace(plain, embeddings={arm: emb.with_location(const)
                                                   for arm, emb in plain.embeddings.items()})
    y = np.linspace(0.0, 40.0, 33)  # multiples of 1/4: (y + 3) - 3 is y exactly
    for feature in ("density", "cdf"):
        want = plain.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, n_boot=49, seed=4, feature=feature)
        got = moved.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y + 3.0, n_boot=49, seed=4, feature=feature)
        np.testing.assert_array_equal(got.y, y + 3.0)
        for name in ("estimate", "lower", "upper", "lower_simultaneous", "upper_simultaneous", "se"):
            # one V-point at a time against both at once: the solves' order differs (5e-13 relative, measured)
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-10, atol=1e-14)
        finite = want.df < 1e6  # in the far tail every unit's share vanishes and Satterthwaite's df, a ratio of vanishing sums, blows up
        np.testing.assert_allclose(got.df[finite], want.df[finite], rtol=1e-6)
        assert "located" in got.target and "held fixed" in got.target  # a model given by hand has no units
    # the fit's own bands with its mean model held fixed: the residual fit's, V-point by V-point, at y - m(v)
    V = res.design.encode_v(PAPER_PROFILES)
    shift = res.embedding(1).shift(v=V)
    held = dataclasses.replace(res, embeddings={
        arm: emb.residual().with_location(dataclasses.replace(emb.location, residuals=np.zeros_like(emb.location.residuals)))
        for arm, emb in res.embeddings.items()})
    got = held.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=49, seed=4)
    for e in range(len(V)):
        one = plain.bands(0.9, newdata=PAPER_PROFILES.iloc[[e]], arm=1, y=y - shift[e, 0], n_boot=49, seed=4)
        np.testing.assert_array_equal(got.upper_simultaneous[e], one.upper_simultaneous[0])
    # with its coefficient error (the default): the same centre, another spread
    full = res.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=49, seed=4)
    np.testing.assert_array_equal(full.estimate, got.estimate)
    assert not np.allclose(full.se, got.se) and "error included" in full.target


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_the_spline_path_matches_the_exact_one(located, monkeypatch, feature):
    """Above LOCATED_EXACT_LIMIT the located read-out is a spline through the residual law on a grid of h/32.

    Measured: 3e-9 (density) and 2e-10 (CDF) of the curve's maximum on the paper's simulation at n = 4000, 150 V-points;
    the tolerance is 30 times the larger.
    """
    import ccme.embedding as module

    _, res = located
    emb = res.embedding(1)
    V = res.design.encode_v(paper_simulation(40, seed=8))
    y = np.concatenate([[-500.0], np.linspace(-15.0, 55.0, 211), [500.0]])[:, None]  # two points beyond the grid
    monkeypatch.setattr(module, "LOCATED_EXACT_LIMIT", float("inf"))
    exact = emb.contract(y, v=V, feature=feature)
    monkeypatch.setattr(module, "LOCATED_EXACT_LIMIT", 0.0)
    fast = emb.contract(y, v=V, feature=feature)
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-7 * np.abs(exact).max())
    assert np.all(fast[:, 0] == 0.0)
    np.testing.assert_allclose(fast[:, -1], emb.mass(v=V) if feature == "cdf" else 0.0, rtol=1e-12, atol=0)


def test_default_is_auto_with_many_covariates_in_v_and_none_with_few():
    """location="default": "auto" from MANY_V_COVARIATES covariates in V on (the same fit as asking for it), else none."""
    from ccme.location import MANY_V_COVARIATES

    data = paper_simulation(400, seed=3)
    many = "y ~ a | " + " + ".join(f"x{j}" for j in range(1, MANY_V_COVARIATES + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default, auto = (ccme.fit(many, data, seed=1, **kw) for kw in ({}, {"location": "auto"}))
        few, plain = (ccme.fit(F, data, seed=1, **kw) for kw in ({}, {"location": None}))
        untuned = ccme.fit(many, data, seed=1, tune="none")
    y = np.linspace(-10.0, 40.0, 11)
    v = data.iloc[:3]
    assert default.tuning.chosen["location"] == auto.tuning.chosen["location"]
    np.testing.assert_array_equal(default.density(y, newdata=v), auto.density(y, newdata=v))
    assert any("by default" in note for note in default.tuning.notes)
    assert "location" not in default.call and "location='auto'" in auto.call
    # Fewer covariates, or no read-out criterion (tune="none"): no location stage, and no error.
    assert few.location is None and "location" not in few.tuning.chosen and untuned.location is None
    np.testing.assert_array_equal(few.density(y, newdata=PAPER_PROFILES), plain.density(y, newdata=PAPER_PROFILES))


def test_neural_default_is_auto_whatever_the_number_of_covariates_in_v():
    """A neural estimator's location="default" is "auto" from NEURAL_LOCATION_FROM (1) covariates in V on, the same
    fit as asking for it, while the ridge's, with two covariates in V, has no location stage."""
    pytest.importorskip("torch")
    from ccme.estimators import get_estimator
    from ccme.estimators.training import NEURAL_LOCATION_FROM
    from ccme.location import MANY_V_COVARIATES

    assert NEURAL_LOCATION_FROM == 1
    data = paper_simulation(300, seed=3)
    opts = dict(method="neural_kernel", epochs=(15, 10), patience=4, hidden=(8,), M=6, progress=False, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default, auto = (ccme.fit(F, data, **opts, **kw) for kw in ({}, {"location": "auto"}))
    assert default.tuning.chosen["location"] == auto.tuning.chosen["location"]
    y = np.linspace(-10.0, 40.0, 11)
    np.testing.assert_array_equal(default.density(y, newdata=PAPER_PROFILES), auto.density(y, newdata=PAPER_PROFILES))
    assert any("by default, V having 2 covariates (at least 1 for method 'neural_kernel')" in note
               for note in default.tuning.notes)
    assert get_estimator("ridge").location_from == MANY_V_COVARIATES == 10


@pytest.mark.parametrize("mode", ["dr", "onestep", "ipw"])
def test_location_fitted_on_some_units_is_the_fit_of_those_units(mode):
    """fit_location(rows=S): the models of S's data alone; S's residuals theirs, the others' Y − m̂(V)."""
    from ccme.location import fold_residuals

    rng = np.random.default_rng(4)
    n = 240
    V = rng.standard_normal((n, 2))
    Xo = np.hstack([V, rng.standard_normal((n, 1))])
    A = rng.binomial(1, 0.5, n)
    Y = (V[:, :1] - 0.5 * Xo[:, 2:] + A[:, None] + rng.standard_normal((n, 1)))
    scores = np.column_stack([np.full(n, 0.6), np.full(n, 0.4)])
    how = dict(Xo=Xo, Y=Y, A=A, scores=scores, arms=(1, 0), mode=mode)
    rows = np.sort(rng.choice(n, size=150, replace=False))
    others = np.setdiff1d(np.arange(n), rows)
    models, residual = fit_location(V=V, rows=rows, **how)
    alone, alone_residual = fit_location(V=V[rows], **{k: (v[rows] if isinstance(v, np.ndarray) else v)
                                                        for k, v in how.items()})
    np.testing.assert_allclose(residual[rows], alone_residual, rtol=1e-12, atol=1e-12)
    for arm in (1, 0):
        np.testing.assert_allclose(models[arm].coef, alone[arm].coef, rtol=1e-12)
        own = others[A[others] == arm]
        np.testing.assert_allclose(residual[own], Y[own] - models[arm].predict(V[own]), rtol=1e-12)
    # All the rows: the plain fit, bit for bit; one residual per fold.
    np.testing.assert_array_equal(fit_location(V=V, rows=np.arange(n), **how)[1], fit_location(V=V, **how)[1])
    folds = ccme.crossfit.make_folds(n, 2, np.random.default_rng(0))
    per_fold = fold_residuals(folds, V=V, **how)
    assert len(per_fold) == 2
    np.testing.assert_array_equal(per_fold[1], fit_location(V=V, rows=folds[1].target, **how)[1])


def test_located_criterion_scores_each_fold_on_its_own_location_models(monkeypatch):
    """FOLD_CRITERION changes the located fit's read-out criterion, not its location models."""
    import ccme.location

    data = paper_simulation(500, seed=5)
    fits = {}
    for flag in (False, True):
        monkeypatch.setattr(ccme.location, "FOLD_CRITERION", flag)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits[flag] = ccme.fit("y ~ a | x1 + x2 | x3", data, seed=2, location="linear")
    for arm in (1, 0):
        np.testing.assert_array_equal(fits[True].embeddings[arm].location.coef, fits[False].embeddings[arm].location.coef)
    crit = {flag: [c.criterion for c in res.tuning.curves if c.parameter == "y_bandwidth"] for flag, res in fits.items()}
    assert not np.allclose(np.concatenate(crit[True]), np.concatenate(crit[False]))
    monkeypatch.setattr(ccme.location, "FOLD_CRITERION", False)
    assert ccme.location.fold_residuals([]) is None


def _bivariate_shifted(n=500, seed=6):
    """A bivariate outcome whose law V shifts (y1 by 2v): the located fit's criterion should be clearly lower."""
    rng = np.random.default_rng(seed)
    v, w = rng.standard_normal(n), rng.standard_normal(n)
    a = (rng.uniform(size=n) < 1 / (1 + np.exp(-0.5 * w))).astype(int)
    return pd.DataFrame({"y1": 2 * v + a + 0.5 * w + 0.5 * rng.standard_normal(n),
                         "y2": 0.3 * w + rng.standard_normal(n), "a": a, "v": v, "w": w})


def test_auto_compares_a_bivariate_outcomes_fits_by_its_readout_criterion():
    """location='auto' works for a multivariate outcome (its read-out criterion is the closed-form one): on a law
    that V shifts by 2v it keeps the located fit, with the paired difference in the notes; the default stays no
    location stage for a multivariate outcome."""
    data = _bivariate_shifted()
    res = ccme.fit("y1 + y2 ~ a | v | w", data, seed=1, location="auto")
    assert res.tuning.chosen["location"] == "linear" and res.location is not None
    (note,) = [n for n in res.tuning.notes if n.startswith("location 'auto'")]
    diff, se = (float(x) for x in re.findall(r"linear minus none (\S+), standard error (\S+);", note)[0])
    assert diff < -2.0 * se
    assert ccme.fit("y1 + y2 ~ a | v | w", data, seed=1).location is None


def test_auto_without_a_multivariate_criterion_keeps_no_location_and_says_why(monkeypatch):
    from ccme import tuning

    monkeypatch.setattr(tuning, "_SQUARE_MAX_ATOMS", 20)
    res = ccme.fit("y1 + y2 ~ a | v | w", _bivariate_shifted(), seed=1, location="auto")
    assert res.tuning.chosen["location"] == "none" and res.location is None
    assert any("criterion that compares the fits was not computed" in n for n in res.tuning.notes)
