"""Automatic tuning: the compiled LOO path against twins and brute-force refits; tune= behaviour."""

import functools

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import _backend
import twins as _twins  # the numpy twins, beside the tests
from ccme.tuning import LAMBDA_GRID

# These fits use the default propensity on the paper's simulation, whose box-shaped true propensity
# leaves weak overlap, so a few scores may be clipped; the clipping warning has its own tests (test_overlap).
pytestmark = pytest.mark.filterwarnings("ignore::ccme.OverlapWarning")


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    V = rng.normal(size=(90, 3))
    Y = (V[:, :1] + 0.5 * rng.normal(size=(90, 1))) * 2.0
    return V, Y


def test_pivoted_cholesky_matches_twin_and_is_exact_at_full_rank(problem):
    V, _ = problem
    bw = np.array([1.5, 2.0, 1.0])
    for tol, max_rank in ((0.0, 90), (1e-3, 90), (0.0, 17)):
        L, piv, res = _backend.pivoted_cholesky(V, "matern52", bw, tol, max_rank)
        L2, piv2, res2 = _twins.pivoted_cholesky(V, "matern52", bw, tol, max_rank)
        np.testing.assert_array_equal(piv, piv2)
        np.testing.assert_allclose(L, L2, rtol=1e-10, atol=1e-12)
        assert res == pytest.approx(res2, abs=1e-12)
        K = _twins.gram(V, V, "matern52", bw)
        assert np.abs(K - L @ L.T).max() <= max(res, 1e-12) * (1 + 1e-9)
    L, _, res = _backend.pivoted_cholesky(V, "gaussian", bw, 0.0, 90)
    assert res == 0.0
    np.testing.assert_allclose(L @ L.T, _twins.gram(V, V, "gaussian", bw), atol=1e-10)


def test_loo_path_matches_twin(problem):
    V, Y = problem
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(90, 30)))
    s2 = rng.uniform(0.01, 20, 30)
    Z = rng.normal(size=(90, 4))
    lams = np.logspace(-4, 0, 6)
    for got, want in zip(_backend.krr_loo_path(Q, s2, Z, lams), _twins.krr_loo_path(Q, s2, Z, lams)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def _exact_spectrum(V, bw):
    K = _twins.gram(V, V, "gaussian", bw)
    s2, W = np.linalg.eigh(K)
    keep = s2 > 1e-13 * s2.max()
    return W[:, keep], s2[keep]


def test_loo_equals_brute_force_refits(problem):
    """Leave-one-out refits of the RKHS-valued ridge regression, done one by one.

    The refit without unit i keeps the penalty nλ of the full fit (the usual
    leave-one-out identity for a linear smoother), and its error is the RKHS
    distance ‖φ(Y_i) − Σ_j β_j φ(Y_j)‖², computed from the outcome Gram matrix.
    """
    V, Y = problem
    n = len(V)
    bw_v, bw_y = np.array([1.3, 1.3, 1.3]), np.array([0.8])
    Ky = _twins.gram(Y, Y, "gaussian", bw_y)
    Kv = _twins.gram(V, V, "gaussian", bw_v)
    lams = np.array([1e-3, 1e-2, 1e-1])
    brute = []
    for lam in lams:
        total = 0.0
        for i in range(n):
            keep = np.arange(n) != i
            beta = np.linalg.solve(Kv[np.ix_(keep, keep)] + n * lam * np.eye(n - 1), Kv[keep, i])
            total += Ky[i, i] - 2 * beta @ Ky[keep, i] + beta @ Ky[np.ix_(keep, keep)] @ beta
        brute.append(total / n)
    G, _, _ = _backend.pivoted_cholesky(Y, "gaussian", bw_y, 0.0, n)  # exact outcome features
    Q, s2 = _exact_spectrum(V, bw_v)
    loo, _, _ = _backend.krr_loo_path(Q, s2, G, lams)
    np.testing.assert_allclose(loo, brute, rtol=1e-8)


def test_core_tuning_is_thread_invariant(problem):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(1300, 4))  # several row blocks of the core's loops
    a = _backend.pivoted_cholesky(X, "gaussian", np.full(4, 1.5), 1e-6, 150, n_threads=1)
    b = _backend.pivoted_cholesky(X, "gaussian", np.full(4, 1.5), 1e-6, 150, n_threads=2)
    np.testing.assert_array_equal(a[0], b[0])
    Q = a[0] / np.linalg.norm(a[0], axis=0)  # any n x k matrix exercises the arithmetic
    Z = rng.normal(size=(1300, 5))
    s2 = np.linspace(1, 10, Q.shape[1])
    for x, y in zip(_backend.krr_loo_path(Q, s2, Z, LAMBDA_GRID, n_threads=1),
                    _backend.krr_loo_path(Q, s2, Z, LAMBDA_GRID, n_threads=2)):
        np.testing.assert_array_equal(x, y)


F = "y ~ a | x1 + x2 + x3 | x4 + x5 + x6"


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(600, seed=12)


@pytest.fixture(scope="module")
def tuned(data):
    return ccme.fit(F, data, seed=3, propensity="forest")


def test_auto_tuning_reports_its_choices(tuned):
    report = tuned.tuning
    assert set(report.chosen) == {"lam0", "lam1", "lam1_plugin", "y_bandwidth", "x_bandwidth", "v_bandwidth"}
    for arm in (1, 0):
        assert report.chosen["lam0"][arm] in LAMBDA_GRID
        assert tuned.penalties["lam0"][arm] == report.chosen["lam0"][arm]
    assert report.chosen["lam1"][1] == report.chosen["lam1"][0] == tuned.penalties["lam1"][1]
    for curve in report.curves:
        if curve.parameter != "v_bandwidth":  # stage 2 moves only beyond a standard error (ARD_STAGE2_GUARD)
            assert curve.chosen == curve.values[np.nanargmin(curve.criterion)]
        assert curve.chosen in curve.values
    frame = report.to_frame()
    assert set(frame.parameter) == {"lam0", "lam1", "lam1_plugin", "y_bandwidth", "x_bandwidth", "v_bandwidth"}
    # per-group bandwidths (tests/test_ard.py): the kernels carry them, the relevance table lists every group
    assert list(tuned.kernels["x"].bandwidth_array) == report.chosen["x_bandwidth"]
    assert list(report.relevance_frame().group) == [f"x{j}" for j in range(1, 7)] + ["x1", "x2", "x3"]
    assert report.seconds > 0 and tuned.timing["tuning"] == report.seconds
    for arm in (1, 0):
        k = tuned.outcome_kernel(arm)
        assert k.bandwidth_array[0] == pytest.approx(report.chosen["y_bandwidth"][arm])
        assert "weighted ISE-CV" in k.rule
    text = str(tuned.summary())
    assert "Tuning:" in text and "LOO (RKHS)" in text and "Y density, treated" in text
    assert "Covariate relevance (learned bandwidths):" in text


def test_user_values_are_not_tuned(data):
    res = ccme.fit(F, data, seed=3, lam=0.05, y_bandwidth=1.5)
    assert res.penalties["lam0"] == {1: 0.05, 0: 0.05} and res.penalties["lam1"] == {1: 0.05, 0: 0.05}
    assert res.outcome_kernel(1).bandwidth == (1.5,) and set(res.tuning.chosen) == {"x_bandwidth", "v_bandwidth"}
    res = ccme.fit(F, data, seed=3, lam=0.05, y_bandwidth=1.5, x_bandwidth="median", v_bandwidth="median")
    assert res.tuning.chosen == {}
    res = ccme.fit(F, data, seed=3, lam1=0.05)
    assert set(res.tuning.chosen) == {"lam0", "y_bandwidth", "x_bandwidth", "v_bandwidth"}
    res = ccme.fit(F, data, seed=3, x_bandwidth="median", v_bandwidth=2.0)
    assert set(res.tuning.chosen) == {"lam0", "lam1", "lam1_plugin", "y_bandwidth"}
    assert res.kernels["v"].bandwidth == (2.0,) * 3


def test_tune_none_and_grids(data):
    res = ccme.fit(F, data, seed=3, tune="none")
    assert res.tuning.chosen == {} and res.penalties["lam1"] == {1: 0.01, 0: 0.01}
    res = ccme.fit(F, data, seed=3, tune={"lam1": [0.003, 0.3], "v_bandwidth": [0.5, 1.0, 2.0]})
    assert res.penalties["lam1"][1] in (0.003, 0.3)
    assert res.tuning.chosen["v_bandwidth_factor"] in (0.5, 1.0, 2.0)
    assert "LOO" in res.kernels["v"].rule
    assert len([c for c in res.tuning.curves if c.parameter == "lam1"]) == 3


def test_bad_tune_arguments(data):
    with pytest.raises(ccme.ParameterError, match="`tune` must be"):
        ccme.fit(F, data, tune="grid")
    with pytest.raises(ccme.ParameterError, match="unknown key"):
        ccme.fit(F, data, tune={"alpha": [1.0]})
    with pytest.raises(ccme.ParameterError, match="positive numbers"):
        ccme.fit(F, data, tune={"lam1": [-1.0]})
    with pytest.raises(ccme.ParameterError, match="both set and asked to be tuned"):
        ccme.fit(F, data, tune={"lam1": [0.1]}, lam1=0.2)


def test_plot_tuning(tuned):
    import matplotlib.pyplot as plt

    axes = tuned.plot_tuning()
    assert len(axes) == 4  # λ₀, λ₁, the plug-in part's λ₁ᵖ, σ_y
    assert len(axes[0].get_lines()) == 4  # two arms: curve + chosen marker each
    plt.close(axes[0].figure)
    untuned = ccme.fit(F, ccme.datasets.paper_simulation(200, seed=1), seed=1, tune="none")
    with pytest.raises(ccme.ParameterError, match="nothing was tuned"):
        untuned.plot_tuning()


def test_one_step_tuning_ignores_the_propensity(data):
    """One-step uses no nuisance model; its tuned read-out bandwidth must not depend on the propensity."""
    grid = np.linspace(-10, 50, 120)
    fits = [ccme.fit(F, data, mode="onestep", propensity=p, seed=0) for p in ("forest", "logistic")]
    for arm in (1, 0):
        assert fits[0].outcome_kernel(arm) == fits[1].outcome_kernel(arm)
    np.testing.assert_array_equal(fits[0].density(grid, newdata=data.iloc[:5]), fits[1].density(grid, newdata=data.iloc[:5]))


# ---------------------------------------------------------------------------
# the scalable tuning: penalty subsamples, Nyström first stage and read-out proxy
# ---------------------------------------------------------------------------
def test_penalty_transfer_rule():
    """λ chosen on s of a regression's m units is carried to m as λ_m = λ_s (s/m)^α; no change without a subsample."""
    from ccme.tuning import LAMBDA_RATE, _transfer

    assert _transfer(500, 500, "X") == 1.0 and _transfer(800, 500, "V") == 1.0
    for stage in ("X", "V"):
        assert _transfer(1000, 8000, stage) == pytest.approx(8.0 ** LAMBDA_RATE[stage])


def test_nystrom_features_and_ridge_are_exact_at_full_rank(problem):
    from ccme.kernels import Kernel
    from ccme.tuning import _Nystrom

    V, Y = problem
    kernel = Kernel("gaussian", (1.3, 1.3, 1.3))
    L, _, _ = _backend.pivoted_cholesky(V, "gaussian", kernel.bandwidth_array, 1e-4, 40)
    nystrom = _Nystrom.fit(V, kernel, 1e-4, 40)
    np.testing.assert_allclose(nystrom.features(V), L, atol=1e-10)  # the factor's rows are the features
    exact = _Nystrom.fit(V, kernel, 0.0, len(V))
    K = _twins.gram(V, V, "gaussian", kernel.bandwidth_array)
    mu = 0.3
    W = exact.ridge(V, Y, mu)
    np.testing.assert_allclose(exact.features(V) @ W, K @ np.linalg.solve(K + mu * np.eye(len(V)), Y), atol=1e-8)
    blocks = exact.ridge(V, lambda start, stop: Y[start:stop], mu)  # targets given a block of rows at a time
    np.testing.assert_allclose(blocks, W, rtol=1e-12)


def test_readout_proxy_equals_the_fitted_weights_at_full_rank(data, monkeypatch):
    """The proxy's binned weights are the fitted fold-arm's weights, binned, when its Nyström kernels are exact to
    1e-9 (the factors stop there: a full-rank one would be singular to working precision)."""
    from ccme import tuning
    from ccme.propensity import clip_scores

    monkeypatch.setattr(tuning, "NYSTROM_RANK", 10_000)
    monkeypatch.setattr(tuning, "_NYSTROM_TOL", 1e-9)
    res = ccme.fit(F, data, seed=3, tune="none", lam0=0.02, lam1=0.05)
    design = res.design
    scores = clip_scores(res.propensity_scores, res.clip)  # the weights' scores, as the fit used them
    bins = tuning._Bins(design.Y[:, 0], 0.05)
    for k, fold in enumerate(res.folds):
        held = {arm: fold.nuisance[design.A[fold.nuisance] == arm][::7] for arm in (1, 0)}
        proxy = tuning._proxy_fold(mode="dr", design=design, Xo=design.X, fold=fold, k=k, scores=scores,
                                   kernels=res.kernels, lam0=res.penalties["lam0"], lam1=res.penalties["lam1"],
                                   held=held, bins=bins, seed=0)
        for arm, chosen in held.items():
            part = res.embedding(arm).parts[k]
            atoms, c = part.weights(design.V[chosen])
            (mass, own), = proxy[arm]  # one pair: λ₁ itself
            scale = np.abs(c).max()
            np.testing.assert_allclose(mass, bins.matrix(atoms[:, 0]) @ c, rtol=0, atol=1e-6 * scale)
            # each chosen unit's own outcome is an atom of the first stage (after the second stage's n atoms)
            first = {int(u): i for i, u in enumerate(part.atom_units[len(part.Y1):], start=len(part.Y1))}
            np.testing.assert_allclose(own, [c[first[int(u)], j] for j, u in enumerate(chosen)], rtol=0,
                                       atol=1e-6 * scale)


def test_split_readout_proxy_equals_the_fitted_split_weights_at_full_rank(data, monkeypatch):
    """The proxy of the split doubly robust second stage (correction at λ₁ × factor, plug-in part at λ₁ᵖ) gives
    the binned weights of the fits with those penalties, for each factor of λ₁ in one call."""
    from ccme import tuning
    from ccme.propensity import clip_scores

    monkeypatch.setattr(tuning, "NYSTROM_RANK", 10_000)
    monkeypatch.setattr(tuning, "_NYSTROM_TOL", 1e-9)
    fits = {f: ccme.fit(F, data, seed=3, tune="none", lam0=0.02, lam1=0.05 * f, lam1_plugin=0.01) for f in (1.0, 4.0)}
    res = fits[1.0]
    design = res.design
    scores = clip_scores(res.propensity_scores, res.clip)
    bins = tuning._Bins(design.Y[:, 0], 0.05)
    for k, fold in enumerate(res.folds):
        held = {arm: fold.nuisance[design.A[fold.nuisance] == arm][::7] for arm in (1, 0)}
        proxy = tuning._proxy_fold(mode="dr", design=design, Xo=design.X, fold=fold, k=k, scores=scores,
                                   kernels=res.kernels, lam0=res.penalties["lam0"], lam1=res.penalties["lam1"],
                                   held=held, bins=bins, seed=0, lam1_plugin={1: 0.01, 0: 0.01},
                                   lam1_factors=tuple(fits))
        for arm, chosen in held.items():
            for (mass, own), fit in zip(proxy[arm], fits.values()):
                atoms, c = fit.embedding(arm).parts[k].weights(design.V[chosen])
                scale = np.abs(c).max()
                np.testing.assert_allclose(mass, bins.matrix(atoms[:, 0]) @ c, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("criterion", ["split", "ise", "aise"])
def test_dr_correction_criteria_choose_the_minimum_of_their_curves(data, monkeypatch, criterion):
    """Each alternative criterion for the correction's penalty (DR_CORRECTION_CRITERION) sets λ₁ at the minimum
    of the curve it reports (summed over the arms, which share λ₁); the plug-in part keeps its own λ₁ᵖ."""
    from ccme import tuning

    monkeypatch.setattr(tuning, "DR_CORRECTION_CRITERION", criterion)
    res = ccme.fit(F, data, seed=3, propensity="forest")
    name = {"split": "LOO (RKHS), all arms", "ise": "weighted ISE-CV (split proxy, best y bandwidth)",
            "aise": "augmented ISE-CV (split proxy, best y bandwidth)"}[criterion]
    curves = [c for c in res.tuning.curves if c.parameter == "lam1" and c.criterion_name == name]
    assert len(curves) == (1 if criterion == "split" else 2)
    best = curves[0].values[int(np.argmin(sum(c.criterion for c in curves)))]
    assert res.penalties["lam1"] == {1: pytest.approx(best), 0: pytest.approx(best)}
    assert all(c.chosen == pytest.approx(best) for c in curves)
    assert res.penalties["lam1_plugin"][1] != res.penalties["lam1"][1]


def test_dr_correction_by_arm_chooses_each_arms_minimum(data, monkeypatch):
    """DR_CORRECTION_BY_ARM: each arm's correction penalty at the minimum of its own ISE-CV curve."""
    from ccme import tuning

    monkeypatch.setattr(tuning, "DR_CORRECTION_CRITERION", "aise")
    monkeypatch.setattr(tuning, "DR_CORRECTION_BY_ARM", True)
    res = ccme.fit(F, data, seed=3, propensity="forest")
    curves = {c.arm: c for c in res.tuning.curves if c.parameter == "lam1" and c.criterion_name.startswith("augmented")}
    for arm, curve in curves.items():
        assert res.penalties["lam1"][arm] == pytest.approx(curve.values[int(np.argmin(curve.criterion))])


@pytest.mark.parametrize("setting, value", [("READOUT_AUGMENTED", True), ("READOUT_WEIGHTS", "none")])
def test_alternative_readout_criterion_is_its_own_curves_minimum(data, tuned, monkeypatch, setting, value):
    """READOUT_AUGMENTED (the augmented criterion) and READOUT_WEIGHTS "none" (the held-out units unweighted): the
    doubly robust read-out bandwidth minimises the alternative criterion, a different curve from the weighted one;
    the penalties are not searched again."""
    from ccme import tuning

    monkeypatch.setattr(tuning, setting, value)
    res = ccme.fit(F, data, seed=3, propensity="forest")
    for arm in (1, 0):
        mine, theirs = ([c for c in r.tuning.curves if c.parameter == "y_bandwidth" and c.arm == arm][0]
                        for r in (res, tuned))
        assert mine.chosen == mine.values[int(np.argmin(mine.criterion))]
        assert not np.allclose(mine.criterion, theirs.criterion)
    assert res.penalties == tuned.penalties


def test_readout_criterion_of_the_average_squares_the_folds_mean(data, monkeypatch):
    """READOUT_FOR "average" scores the cross-fitted estimate: its criterion differs from the folds' own by
    Σ_k Σ_j ω_j (∫p̄(y | V_j)² − ∫p̂_k(y | V_j)²) dy / (|nuisance_k| K) over each fold's held units j, p̄ the folds'
    mean; the twin computes it from the fitted parts' weights with the Gaussian product formula
    ∫N(y; a, σ²) N(y; b, σ²) dy = N(a − b; 0, 2σ²).  The proxy bins its atoms and integrates on a grid: measured
    agreement 0.2-0.4% of the largest difference (seed 3, n = 600), asserted to 1%."""
    from ccme import tuning
    from ccme.propensity import arm_probabilities, clip_scores

    monkeypatch.setattr(tuning, "NYSTROM_RANK", 10_000)
    monkeypatch.setattr(tuning, "_NYSTROM_TOL", 1e-9)
    factors = (0.5, 1.0, 2.0)

    def curves(setting):
        monkeypatch.setattr(tuning, "READOUT_FOR", setting)
        # λ₁ "tuned" on a one-point grid, so that σ_y is chosen on the proxy (as by default) at fixed penalties
        res = ccme.fit(F, data, seed=3, tune={"lam1": (0.05,), "y_bandwidth": factors}, lam0=0.02, lam1_plugin=0.05)
        return res, {c.arm: c for c in res.tuning.curves if c.parameter == "y_bandwidth"}

    res, own = curves("fold")
    _, mean = curves("average")
    design, K = res.design, len(res.folds)
    scores = arm_probabilities(clip_scores(res.propensity_scores, res.clip))
    for arm in (1, 0):
        parts = res.embedding(arm).parts
        expected = np.zeros(len(factors))
        for k, fold in enumerate(res.folds):
            held = fold.nuisance[design.A[fold.nuisance] == arm]   # n = 600: every such unit is held out
            weights = [part.weights(design.V[held]) for part in parts]
            omega = 1.0 / scores[held, arm] / len(fold.nuisance) / K
            for i, sigma in enumerate(own[arm].values):

                def product(a, b):
                    (xa, ca), (xb, cb) = weights[a], weights[b]
                    G = np.exp(-0.25 * ((xa[:, 0][:, None] - xb[:, 0][None, :]) / sigma) ** 2) / (2 * sigma * np.sqrt(np.pi))
                    return np.einsum("kj,kl,lj->j", ca, G, cb)

                mean_square = sum(product(a, b) for a in range(K) for b in range(K)) / K**2
                expected[i] += np.sum(omega * (mean_square - product(k, k)))
        np.testing.assert_allclose(mean[arm].criterion - own[arm].criterion, expected, rtol=0,
                                   atol=1e-2 * np.abs(expected).max())
        assert np.abs(expected).max() > 0


def test_lambda_search_steps_follow_the_default_grid(monkeypatch):
    """The λ searches' neighbourhood and the default grid's extensions take LAMBDA_GRID's spacing: half a decade
    by default (the steps the searches always had), a quarter on a 17-point grid."""
    from ccme import tuning

    np.testing.assert_array_equal(10.0 ** tuning._lambda_steps(), 10.0 ** np.arange(-1.0, 1.01, 0.5))
    np.testing.assert_array_equal(tuning._lambda_steps(-1), [-1.0, -0.5])
    np.testing.assert_array_equal(tuning._lambda_steps(1), [0.5, 1.0])
    monkeypatch.setattr(tuning, "LAMBDA_GRID", tuple(np.logspace(-4, 0, 17)))
    np.testing.assert_allclose(tuning._lambda_steps(-1), [-1.0, -0.75, -0.5, -0.25])
    np.testing.assert_allclose(tuning._lambda_steps(), np.linspace(-1.0, 1.0, 9))


def test_second_stage_penalty_for_the_average_reads_the_curve_at_k_times_the_units(data, monkeypatch):
    """SECOND_STAGE_PENALTY_FOR "average": the λ₁ curve at λ is the fold curve at λ (K m / m)^α = λ K^α
    (LAMBDA_RATE["V"]; no subsample at n = 600), so the cross-fitted mean of K regressions is tuned as one
    regression on all K m units would be; unknown values are refused."""
    from ccme import tuning
    from ccme.errors import ParameterError

    grid = np.array([0.003, 0.01, 0.03, 0.1])
    K = 2
    shifted = grid * K ** tuning.LAMBDA_RATE["V"]
    fits = {}
    for setting, lam in (("fold", shifted), ("average", grid)):
        monkeypatch.setattr(tuning, "SECOND_STAGE_PENALTY_FOR", setting)
        res = ccme.fit(F, data, seed=3, folds=K, tune={"lam1": tuple(lam)}, lam0=0.02, lam1_plugin=0.05)
        fits[setting] = [c for c in res.tuning.curves if c.parameter == "lam1"][0]
    np.testing.assert_allclose(fits["average"].criterion, fits["fold"].criterion, rtol=1e-10)
    assert fits["average"].chosen == pytest.approx(grid[int(np.argmin(fits["fold"].criterion))])
    monkeypatch.setattr(tuning, "SECOND_STAGE_PENALTY_FOR", "all")
    with pytest.raises(ParameterError, match="SECOND_STAGE_PENALTY_FOR must be 'fold' or 'average'; got 'all'"):
        ccme.fit(F, data, seed=3, tune={"lam1": tuple(grid)}, lam0=0.02, lam1_plugin=0.05)


def test_unknown_readout_weights_are_refused(data, monkeypatch):
    from ccme import tuning
    from ccme.errors import ParameterError

    monkeypatch.setattr(tuning, "READOUT_WEIGHTS", "hajek")
    with pytest.raises(ParameterError, match="READOUT_WEIGHTS must be 'inverse-propensity' or 'none'; got 'hajek'"):
        ccme.fit(F, data, seed=3, propensity="forest")


def test_criterion_outcome_kernel_factor(data, tuned, monkeypatch):
    """CRITERION_Y_FACTOR widens only the criteria's outcome kernel: the features span the Gram matrix of the
    widened kernel, the embedding's kernel is unchanged; "readout" is the numeric factor √2 σ_y / h of the
    default fit's read-out bandwidths, applied in a second pass (the same choices as that factor given directly)."""
    from ccme import tuning
    from ccme.kernels import Kernel

    Y = data[["y"]].to_numpy()[:200]
    base = tuned.kernels["y"]
    G = tuning._outcome_features(Y, base, 1, factor=2.0)[np.arange(len(Y))]
    wide = Kernel(base.name, tuple(base.bandwidth_array * 2.0))
    gram = ccme._backend.gram(Y, Y, wide.name, wide.bandwidth_array, normalized=True)
    np.testing.assert_allclose(G @ G.T / (G @ G.T)[0, 0], gram / gram[0, 0], atol=1e-6)

    h = float(base.bandwidth_array[0])
    factor = float(np.sqrt(2.0) * np.exp(np.mean(np.log(list(tuned.tuning.chosen["y_bandwidth"].values())))) / h)
    chosen = {}
    for value in (factor, "readout"):
        monkeypatch.setattr(tuning, "CRITERION_Y_FACTOR", value)
        res = ccme.fit(F, data, seed=3, propensity="forest")
        chosen[value] = res.tuning.chosen
        assert res.kernels["y"].bandwidth == base.bandwidth
    assert chosen["readout"] == chosen[factor] != tuned.tuning.chosen
    assert any(note.startswith("the criteria's outcome kernel") for note in res.tuning.notes)


def test_a_choice_on_its_grids_edge_says_which_entry_to_extend(data):
    """A penalty grid whose smallest value is chosen, and a read-out grid whose largest is, each get a note naming
    the tune= entry and the direction (bandwidth entries are factors of the rule)."""
    res = ccme.fit(F, data, seed=3, propensity="forest", tune={"lam1": [0.3, 1.0, 3.0], "y_bandwidth": [0.05, 0.1, 0.2]})
    assert res.penalties["lam1"][1] == 0.3
    assert ("lam1 chose the smallest value of its grid (0.3); consider extending the grid: tune={'lam1': [...]} "
            "with smaller values") in res.tuning.notes
    assert any(note.startswith("y_bandwidth (treated) chose the largest value of its grid") and
               note.endswith("tune={'y_bandwidth': [...]} with larger factors of the rule's bandwidth")
               for note in res.tuning.notes)


def _one_se_twin(terms, steps):
    """The one-standard-error rule by hand: the widest factor (one grid step at most with ``steps``) whose summed
    criterion exceeds the minimum by no more than √m × the sample sd of the units' paired differences."""
    total = terms.sum(axis=0)
    best = int(np.argmin(total))
    last = min(best + 1, terms.shape[1] - 1) if steps else terms.shape[1] - 1
    chosen = best
    for i in range(best + 1, last + 1):
        d = terms[:, i] - terms[:, best]
        if total[i] - total[best] <= np.sqrt(len(d)) * np.std(d, ddof=1):
            chosen = i
    return chosen


@pytest.mark.parametrize("steps", [True, False])
def test_one_se_rule_matches_its_twin(steps):
    """The read-out bandwidth's one-SE choice (ccme.tuning._one_se_choice) against the rule written by hand, on
    curves whose minimum and noise vary so that it stays at the minimiser, moves wider, and (steps=False) jumps
    several factors; a curve whose units all move together (no spread) keeps its minimiser."""
    from ccme.tuning import _one_se_choice

    rng = np.random.default_rng(11)
    moves = set()
    for _ in range(300):
        m, k = int(rng.integers(2, 60)), 7
        shape = 0.02 * (np.arange(k) - rng.integers(0, k)) ** 2
        terms = shape / m + rng.uniform(0.001, 0.2) * rng.normal(size=(m, k)) / np.sqrt(m)
        chosen = _one_se_choice(terms, steps=steps)
        assert chosen == _one_se_twin(terms, steps)
        moves.add(min(chosen - int(np.argmin(terms.sum(axis=0))), 2))
    assert moves == ({0, 1} if steps else {0, 1, 2})
    flat = np.tile(0.01 * (np.arange(7.0) - 2.0) ** 2, (30, 1))
    assert _one_se_choice(flat, steps=steps) == 2
    assert _one_se_choice(np.ones((1, 7)) * np.arange(7.0)[::-1], steps=steps) == 6


def test_largest_local_minimum_matches_its_twin():
    """The read-out bandwidth's default choice (ccme.tuning._largest_local_minimum) against a loop by hand: the
    largest index that is below both neighbours (an end below its one neighbour); the global minimiser without one."""
    from ccme.tuning import _largest_local_minimum

    def twin(total):
        local = [i for i in range(len(total)) if (i == 0 or total[i] < total[i - 1])
                 and (i == len(total) - 1 or total[i] < total[i + 1])]
        return local[-1] if local else int(np.argmin(total))

    rng = np.random.default_rng(3)
    kinds = set()
    for _ in range(300):
        total = np.cumsum(rng.normal(size=7))
        chosen = _largest_local_minimum(total)
        assert chosen == twin(total)
        kinds.add("global" if chosen == int(np.argmin(total)) else "larger")
    assert kinds == {"global", "larger"}
    # the proxy's curve of linear_v1's located control arm at seed 1 (README): the edge minimum is passed over
    curve = np.array([-0.2764, -0.2735, -0.2704, -0.2695, -0.2701, -0.2704, -0.2682])
    assert _largest_local_minimum(curve) == 5 and int(np.argmin(curve)) == 0
    assert _largest_local_minimum(np.arange(7.0)[::-1]) == 6  # decreasing: the upper end
    assert _largest_local_minimum(np.full(7, 1.0)) == 0       # flat: no strict local minimum, the global one


def test_binned_convolution_is_the_kernel_matrix_product():
    """The FFT convolution on the bins' regular grid equals the dense product with the read-out kernel's matrix."""
    from ccme.kernels import Kernel
    from ccme.tuning import _Bins, _binned_convolution

    rng = np.random.default_rng(4)
    bins = _Bins(rng.normal(size=200), 0.1)
    mass = rng.normal(size=(bins.count, 5))
    for name, factor in (("gaussian", 0.5), ("gaussian", 2.0), ("laplace", 1.0)):
        kernel = Kernel(name, (0.3,))
        K = _twins.gram(bins.centers, bins.centers, name, kernel.bandwidth_array * factor, normalized=True)
        out, at_zero = _binned_convolution(bins, mass, kernel, factor)
        np.testing.assert_allclose(out, K @ mass, rtol=0, atol=1e-12 * np.abs(K @ mass).max())
        assert at_zero == pytest.approx(K[0, 0])


def test_target_outcome_model_is_kernel_ridge_at_full_rank(data, monkeypatch):
    """The augmentation's outcome regression (:func:`ccme.tuning._target_outcome_model`), at full Nyström rank, is
    the kernel ridge regression of the fold's target units of the arm: its binned weights at the held units are
    binned (K + mλ₀I)⁻¹k(X, X_held), and W_jᵀ G U_j is Σ_i d_i(X_j) ω_i φ(V_i)ᵀU_j for any U."""
    from ccme import tuning
    from ccme.propensity import clip_scores
    from ccme.pseudo import pseudo_outcome

    monkeypatch.setattr(tuning, "NYSTROM_RANK", 10_000)
    monkeypatch.setattr(tuning, "_NYSTROM_TOL", 1e-10)
    res = ccme.fit(F, data, seed=3, tune="none", lam0=0.02, lam1=0.05)
    design, fold, arm, lam0 = res.design, res.folds[0], 1, 0.02
    scores = clip_scores(res.propensity_scores, res.clip)
    pseudo = pseudo_outcome("dr", arm, A=design.A, target=fold.target, scores_target=scores[fold.target])
    bins = tuning._Bins(design.Y[:, 0], 0.05)
    chosen = fold.nuisance[::9]
    phi = tuning._nystrom_map(design.V[pseudo.rows], res.kernels["v"], 1e-3, np.random.default_rng(0))
    binned, W, G = tuning._target_outcome_model(design, design.X, fold, 0, arm, pseudo, phi, res.kernels["x"],
                                                lam0, bins, chosen, seed=0)
    units = pseudo.rows[design.A[pseudo.rows] == arm]
    omega = pseudo.a[design.A[pseudo.rows] == arm]
    bw = res.kernels["x"].bandwidth_array
    K = _twins.gram(design.X[units], design.X[units], res.kernels["x"].name, bw)
    d = np.linalg.solve(K + len(units) * lam0 * np.eye(len(units)),
                        _twins.gram(design.X[units], design.X[chosen], res.kernels["x"].name, bw))
    expected = bins.matrix(design.Y[units, 0]) @ d
    np.testing.assert_allclose(binned, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    U = np.random.default_rng(1).normal(size=(phi.rank, len(chosen)))
    features = phi.features(design.V[units])
    direct = np.einsum("ij,i,ij->j", d, omega, features @ U)
    np.testing.assert_allclose(np.einsum("rj,rj->j", W, G @ U), direct, rtol=0, atol=1e-6 * np.abs(direct).max())


def test_split_loo_is_the_brute_force_leave_one_out_of_the_split_second_stage():
    """:func:`ccme.tuning._split_loo` against refitting both kernel ridge regressions without each unit in turn."""
    from ccme.kernels import Kernel
    from ccme.tuning import _spectrum, _split_loo

    rng = np.random.default_rng(2)
    m = 40
    V = rng.normal(size=(m, 2))
    mu0 = np.sin(V[:, :1]) + 0.1 * rng.normal(size=(m, 3))
    xi = mu0 + rng.normal(size=(m, 3))
    spec = _spectrum(V, Kernel("gaussian", (1.0, 1.0)), 1.0, 1e-3, 1)
    K = spec.Q @ np.diag(spec.s2) @ spec.Q.T  # the kernel the criterion sees

    def loo_prediction(T, lam, i):
        keep = np.arange(m) != i
        coef = np.linalg.solve(K[np.ix_(keep, keep)] + m * lam * np.eye(m - 1), T[keep])
        return K[i, keep] @ coef

    lams, lam_p = [0.003, 0.03], 0.01
    brute = [np.mean([np.sum((xi[i] - loo_prediction(xi - mu0, lam, i) - loo_prediction(mu0, lam_p, i)) ** 2)
                      for i in range(m)]) for lam in lams]
    np.testing.assert_allclose(_split_loo(spec, xi, mu0, lams, lam_p), brute, rtol=1e-8)


def test_subsampled_tuning_is_bounded_deterministic_and_thread_invariant(monkeypatch):
    """With small limits every path of the large-n tuning runs at n = 1200: subsampled penalties, the Nyström first
    stage and outcome features, the read-out proxy; no penalty regression exceeds its limit, and the result is the
    same bit for bit for any thread count."""
    from ccme import tuning

    monkeypatch.setattr(tuning, "LAMBDA_UNITS", 120)
    monkeypatch.setattr(tuning, "NYSTROM_RANK", 60)
    monkeypatch.setattr(tuning, "_OUTCOME_UNITS", 500)
    sizes = []
    spectrum = tuning._spectrum
    monkeypatch.setattr(tuning, "_spectrum", lambda X, *args: sizes.append(len(X)) or spectrum(X, *args))
    data = ccme.datasets.paper_simulation(1200, seed=4)
    fits = [ccme.fit(F, data, seed=5, n_threads=threads) for threads in (1, 2)]
    assert sizes and max(sizes) <= 120
    report = fits[0].tuning
    assert report.pending_readout is None  # applied to the fit
    assert any("Nystrom proxy" in note for note in report.notes)
    for arm in (1, 0):
        assert report.chosen["lam0"][arm] in LAMBDA_GRID or report.chosen["lam0"][arm] < min(LAMBDA_GRID)
        assert fits[0].outcome_kernel(arm) == fits[1].outcome_kernel(arm)
    assert report.chosen == fits[1].tuning.chosen
    grid = fits[0].default_grid(50)
    for arm in (1, 0):
        assert fits[0].density(grid, arm=arm).tobytes() == fits[1].density(grid, arm=arm).tobytes()


def test_readout_grid_grows_below_its_smallest_factor_where_that_is_chosen():
    """:func:`ccme.tuning._extending_downwards` against the rule by hand: while an arm's choice is the grid's smallest
    factor, the default grid gains two factors below it at its own step (0.25 / 1.4², 0.25 / 1.4, ...), at most
    Y_BANDWIDTH_EXTENSIONS times; a user's grid, or a choice inside the grid, is left alone."""
    from types import SimpleNamespace

    from ccme import tuning

    def criterion_near(target, grids_seen):
        def choose(factors):
            factors = np.asarray(factors, dtype=float)
            grids_seen.append(factors)
            best = factors[np.argmin(np.abs(np.log(factors / target)))]
            return None, [SimpleNamespace(values=2.0 * factors, chosen=2.0 * best)]
        return choose

    default = tuning.Y_BANDWIDTH_FACTORS
    seen = []
    _, (curve,) = tuning._extending_downwards(criterion_near(0.1, seen), default)
    step = default[1] / default[0]
    once = np.r_[default[0] / step**2, default[0] / step, default]
    twice = np.r_[once[0] / step**2, once[0] / step, once]
    assert len(seen) == 1 + tuning.Y_BANDWIDTH_EXTENSIONS == 3
    np.testing.assert_allclose(seen[1], once)
    np.testing.assert_allclose(seen[2], twice)
    assert curve.chosen == pytest.approx(2.0 * 0.25 / step**3)          # 0.091, the factor nearest 0.1
    for target, user_grid in ((1.0, default), (0.1, list(default)), (0.1, [0.25, 0.5, 1.0])):
        seen = []
        tuning._extending_downwards(criterion_near(target, seen), user_grid)
        assert len(seen) == 1


def test_readout_grid_starts_at_its_floor_and_does_not_grow_below_it():
    """With a floor (in factors) the default grid drops the factors below it and starts at the floor itself, unless
    a kept factor lies within half a grid step above it; a choice at the floor does not grow the grid."""
    from types import SimpleNamespace

    from ccme import tuning

    seen = []

    def smallest_chosen(factors):
        seen.append(np.asarray(factors, dtype=float))
        return None, [SimpleNamespace(values=factors, chosen=factors[0])]

    default = np.asarray(tuning.Y_BANDWIDTH_FACTORS)
    tuning._extending_downwards(smallest_chosen, tuning.Y_BANDWIDTH_FACTORS, 0.55)
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], np.r_[0.55, default[default >= 0.55]])   # 0.55, 0.7: 0.7 > 0.55 √1.4
    for floor in (0.6, 0.45):                                                    # 0.7, 0.5 within half a step
        seen.clear()
        tuning._extending_downwards(smallest_chosen, tuning.Y_BANDWIDTH_FACTORS, floor)
        assert len(seen) == 1
        np.testing.assert_allclose(seen[0], default[default >= floor])
    seen.clear()
    tuning._extending_downwards(smallest_chosen, tuning.Y_BANDWIDTH_FACTORS, 0.1)  # grows once, then floors
    step = default[1] / default[0]
    assert len(seen) == 3
    np.testing.assert_allclose(seen[1], np.r_[default[0] / step**2, default[0] / step, default])
    assert seen[2][0] == 0.1 and seen[2][1] == pytest.approx(default[0] / step**2)


def test_readout_floor_is_half_the_spacing_of_the_atoms_where_the_outcomes_see_them_densest():
    """:func:`ccme.tuning.readout_floor` against a loop by hand: each outcome strictly inside the atoms' range lies
    in one cell between consecutive distinct atoms (of every arm's folds); the floor is READOUT_ATOM_FLOOR times the
    READOUT_ATOM_QUANTILE quantile of those cells' widths.  The atoms are the parts' ``resolution_points`` (their
    atoms, or a Neural-Kernel grid spread over outcomes)."""
    from types import SimpleNamespace

    from ccme import tuning

    rng = np.random.default_rng(3)
    grid = np.r_[np.linspace(-4.0, 4.0, 9), np.linspace(-0.2, 0.2, 5)]     # a regular grid and a dense middle
    arm = lambda atoms: SimpleNamespace(parts=[SimpleNamespace(resolution_points=a[:, None]) for a in atoms])  # noqa: E731,E501
    embeddings = {1: arm([grid[:10], grid[10:]]), 0: arm([grid])}
    for y in (rng.normal(0.0, 0.1, 201), rng.uniform(-6.0, 6.0, 301)):
        atoms = sorted(set(grid))
        widths = [hi - lo for v in y for lo, hi in zip(atoms, atoms[1:]) if lo < v <= hi and atoms[0] < v < atoms[-1]]
        expected = tuning.READOUT_ATOM_FLOOR * np.quantile(widths, tuning.READOUT_ATOM_QUANTILE)
        assert tuning.readout_floor(embeddings, y[:, None]) == pytest.approx(expected)
    assert tuning.readout_floor(embeddings, np.full((4, 1), 9.0)) == 0.0               # no outcome between atoms


def test_readout_floor_of_outcome_atoms_lies_below_every_factor_the_grid_can_reach(tuned, data):
    """Where the atoms are the outcomes (the ridge) the floor lies below the default grid grown to its lowest, so it
    changes no fit: it is for the Neural-Kernel estimator's M grid points."""
    from ccme import tuning

    embeddings = {arm: tuned.embedding(arm) for arm in (1, 0)}
    step = tuning.Y_BANDWIDTH_FACTORS[1] / tuning.Y_BANDWIDTH_FACTORS[0]
    lowest = tuning.Y_BANDWIDTH_FACTORS[0] / step ** (2 * tuning.Y_BANDWIDTH_EXTENSIONS)
    base = min(float(e.y_kernel.bandwidth_array[0]) for e in embeddings.values()) / max(tuning.Y_BANDWIDTH_FACTORS)
    floor = tuning.readout_floor(embeddings, data[["y"]].to_numpy())
    assert 0.0 < floor < lowest * base


def test_fit_on_a_spike_of_outcomes_reads_out_below_the_default_grid():
    """Half the outcomes in a spike 0.02 wide: the read-out criterion picks the default grid's smallest factor, so
    the fit searches below it; the curve keeps the default factors at its top (ridge's proxy path)."""
    from ccme import tuning

    rng = np.random.default_rng(8)
    n = 600
    x = rng.normal(size=(n, 2))
    spike = rng.random(n) < 0.5
    y = np.where(spike, rng.normal(0.0, 0.02, n), 5.0 + x[:, 0] + 3.0 * rng.normal(size=n))
    data = pd.DataFrame({"y": y, "a": rng.binomial(1, 0.5, n), "x1": x[:, 0], "x2": x[:, 1]})
    res = ccme.fit("y ~ a | x1 | x2", data, seed=1)
    curves = [c for c in res.tuning.curves if c.parameter == "y_bandwidth"]
    assert len(curves) == 2
    for c in curves:
        rule = c.values[-1] / tuning.Y_BANDWIDTH_FACTORS[-1]
        assert len(c.values) > len(tuning.Y_BANDWIDTH_FACTORS)
        np.testing.assert_allclose(c.values[-7:] / rule, tuning.Y_BANDWIDTH_FACTORS)
        assert c.chosen < tuning.Y_BANDWIDTH_FACTORS[0] * rule
    # tune= with the default grid object grows it too; a copy of it is a user's grid, searched as given
    for grid, grows in ((tuning.Y_BANDWIDTH_FACTORS, True), (list(tuning.Y_BANDWIDTH_FACTORS), False)):
        res = ccme.fit("y ~ a | x1 | x2", data, seed=1, tune={"y_bandwidth": grid})
        lengths = {len(c.values) for c in res.tuning.curves if c.parameter == "y_bandwidth"}
        assert (min(lengths) > len(grid)) if grows else lengths == {len(grid)}


def test_a_readout_choice_at_the_floor_is_named_not_advised_below():
    """note_edges: σ_y chosen at the smallest value of a floored default grid says it sits at the read-out floor
    (advising smaller factors would undo the floor); the same choice without a floor, or a smallest value more than
    half a grid step above the floor, keeps the usual advice to extend the grid."""
    from ccme.tuning import Y_BANDWIDTH_FACTORS, TuningCurve, TuningReport, note_edges

    step = Y_BANDWIDTH_FACTORS[1] / Y_BANDWIDTH_FACTORS[0]
    values = 0.4 * step ** np.arange(5.0)

    def notes(floor):
        report = TuningReport(curves=[TuningCurve("y_bandwidth", values, np.arange(5.0), "ISE-CV", values[0], arm=0)])
        note_edges(report, floor=floor)
        return report.notes

    at_floor = notes(0.4)
    assert len(at_floor) == 1 and "at the read-out floor 0.4" in at_floor[0] and "consider" not in at_floor[0]
    (below,) = notes(0.4 / step ** 0.4)                      # _floored kept a factor less than half a step above
    assert "at the read-out floor" in below and "consider" not in below
    for floor in (0.0, 0.4 / step):      # no floor; the floor a whole step below the grid
        (note,) = notes(floor)
        assert "consider extending the grid" in note and "floor" not in note


def _square_by_quadrature(atoms, c, bandwidth, n_threads=0, size=(401, 451)):
    """The numpy twin of integrated_square: ∫ p̂_j² on a 2-D product grid (trapezoid), ±8 bandwidths around the
    atoms."""
    axes = [np.linspace(atoms[:, j].min() - 8 * b, atoms[:, j].max() + 8 * b, m)
            for j, (b, m) in enumerate(zip(bandwidth, size))]
    g1, g2 = np.meshgrid(*axes, indexing="ij")
    points = np.column_stack([g1.ravel(), g2.ravel()])
    p = (c.T @ _twins.atom_features(atoms, points, "density", "gaussian", np.asarray(bandwidth))).reshape(
        c.shape[1], *size)
    return np.trapezoid(np.trapezoid(p**2, axes[1], axis=2), axes[0], axis=1)


def test_integrated_square_is_the_quadrature_of_the_squared_readout(monkeypatch):
    """The closed form c^T G_{√2σ} c against a 2-D trapezoid sum (401 × 451 points: measured agreement 1e-9
    relative, asserted to 1e-6), with signed weights and unequal bandwidths; the blocks of rows do not change it."""
    from ccme import tuning

    rng = np.random.default_rng(0)
    atoms, c, bw = rng.normal(size=(30, 2)), rng.normal(size=(30, 3)), np.array([0.4, 0.7])
    exact = tuning.integrated_square(atoms, c, bw)
    np.testing.assert_allclose(exact, _square_by_quadrature(atoms, c, bw), rtol=1e-6)
    monkeypatch.setattr(tuning, "_SQUARE_BLOCK", 7)
    np.testing.assert_allclose(tuning.integrated_square(atoms, c, bw), exact, rtol=1e-12)


def _bivariate_data(n=400, seed=5):
    rng = np.random.default_rng(seed)
    v, w = rng.standard_normal(n), rng.standard_normal(n)
    a = (rng.uniform(size=n) < 1 / (1 + np.exp(-0.5 * (v + w)))).astype(int)
    return pd.DataFrame({"y1": v + a + w + 0.5 * rng.standard_normal(n), "y2": 0.5 * v + rng.standard_normal(n),
                         "a": a, "v": v, "w": w})


def test_bivariate_outcome_bandwidth_is_tuned_on_the_closed_form_criterion(monkeypatch):
    """A bivariate outcome's read-out bandwidth is chosen by the same weighted ISE-CV as a univariate one's, one
    factor scaling the rule's bandwidth in both dimensions; its criterion equals the one with ∫p̂² by quadrature
    (the twin above on a 101 × 111 grid: the trapezoid rule converges geometrically on these Gaussian sums, measured
    agreement 1e-15 relative as on 401 × 451; asserted to 1e-6)."""
    from ccme import tuning

    data = _bivariate_data()
    factors = (0.5, 0.7, 1.0, 1.4)
    fixed = {"lam0": 0.02, "lam1_plugin": 0.05}
    tune = {"lam1": (0.05,), "y_bandwidth": factors}
    rule = ccme.fit("y1 + y2 ~ a | v | w", data, seed=3, tune={"lam1": (0.05,)}, **fixed)
    res = ccme.fit("y1 + y2 ~ a | v | w", data, seed=3, tune=tune, **fixed)
    curves = {c.arm: c for c in res.tuning.curves if c.parameter == "y_bandwidth"}
    assert set(curves) == {0, 1} and not [n for n in res.tuning.notes if "rule was kept" in n]
    for arm, curve in curves.items():
        base = rule.embedding(arm).y_kernel.bandwidth_array
        np.testing.assert_allclose(curve.values, base[0] * np.array(factors), rtol=1e-12)
        factor = factors[int(np.flatnonzero(curve.values == curve.chosen)[0])]
        np.testing.assert_allclose(res.embedding(arm).y_kernel.bandwidth_array, base * factor, rtol=1e-12)
    monkeypatch.setattr(tuning, "integrated_square", functools.partial(_square_by_quadrature, size=(101, 111)))
    twin = ccme.fit("y1 + y2 ~ a | v | w", data, seed=3, tune=tune, **fixed)
    for curve in twin.tuning.curves:
        if curve.parameter == "y_bandwidth":
            np.testing.assert_allclose(curves[curve.arm].criterion, curve.criterion, rtol=1e-6)


def test_bivariate_outcome_with_a_laplace_readout_keeps_the_rule():
    data = _bivariate_data()
    res = ccme.fit("y1 + y2 ~ a | v | w", data, seed=3, y_kernel="laplace")
    assert not [c for c in res.tuning.curves if c.parameter == "y_bandwidth"]
    assert any("Gaussian read-out kernel only" in n for n in res.tuning.notes)


def test_a_multivariate_readout_criterion_scores_fewer_units_where_the_atoms_are_many(monkeypatch):
    """_square_units keeps K² × units within _SQUARE_WORK (at least _SQUARE_MIN_UNITS, at most all); a fit held to
    the minimum, 10, scores 10 distinct units per fold and arm, and its criterion is their terms summed."""
    from ccme import tuning

    assert tuning._square_units(100, 1000) == 1000
    assert tuning._square_units(2000, 1000) == int(tuning._SQUARE_WORK // 2000**2)
    assert tuning._square_units(10**6, 1000) == tuning._SQUARE_MIN_UNITS
    assert tuning._square_units(10**6, 40) == 40
    monkeypatch.setattr(tuning, "_SQUARE_MIN_UNITS", 10)
    monkeypatch.setattr(tuning, "_SQUARE_WORK", 1)     # any atoms: the minimum
    res = ccme.fit("y1 + y2 ~ a | v | w", _bivariate_data(), seed=3, tune={"lam1": (0.05,), "y_bandwidth": (0.7, 1.0)},
                   lam0=0.02, lam1_plugin=0.05)
    for curve in (c for c in res.tuning.curves if c.parameter == "y_bandwidth"):
        units, terms = curve.held
        assert len(units) == 2 * 10 and len(np.unique(units)) == len(units) == len(terms)
        assert curve.criterion[curve.values == curve.chosen][0] == pytest.approx(terms.sum(), rel=1e-12)


def test_a_multivariate_outcome_with_too_many_atoms_keeps_the_rule(monkeypatch):
    from ccme import tuning

    monkeypatch.setattr(tuning, "_SQUARE_MAX_ATOMS", 20)
    res = ccme.fit("y1 + y2 ~ a | v | w", _bivariate_data(), seed=3)
    assert not [c for c in res.tuning.curves if c.parameter == "y_bandwidth"]
    assert any("up to 20 atoms per fold and arm" in n and "the rule was kept" in n for n in res.tuning.notes)
    assert "y_bandwidth" not in res.tuning.chosen


def test_readout_span_is_the_outcomes_range_unless_some_lie_far_out():
    """The read-out criterion's span: min(Y)..max(Y) where every outcome lies within Tukey's far-out fences
    (Q1 − 3 IQR, Q3 + 3 IQR), else cut to 6 kernel scales beyond them; the bins put no weight on values beyond it."""
    from ccme.kernels import Kernel
    from ccme.tuning import _Bins, readout_span

    rng = np.random.default_rng(4)
    y = rng.normal(size=500)
    kernel = Kernel("gaussian", (0.3,), "silverman")
    np.testing.assert_array_equal(readout_span(y[:, None], kernel), [y.min(), y.max()])
    moved = np.r_[y, 4000.0]
    q1, q3 = np.quantile(moved, [0.25, 0.75])
    np.testing.assert_allclose(readout_span(moved[:, None], kernel), [y.min(), q3 + 3 * (q3 - q1) + 6 * 0.3])
    bins = _Bins(readout_span(moved[:, None], kernel), 0.1)
    M = bins.matrix(np.array([0.0, 4000.0])).toarray()
    assert M[:, 0].sum() == pytest.approx(1.0) and not M[:, 1].any()


def test_a_far_out_outcome_leaves_the_readout_bandwidth_where_it_was():
    """One outcome moved to 5000 (the bulk's sd is about 8): each arm's chosen σ_y stays within a third of the
    clean data's.  Over min(Y)..max(Y) the criterion's 256 quadrature points fell 20 apart and σ_y moved to 2.6
    and 1.8 times its clean value in the control arm (the far-out unit treated, then control)."""
    data = ccme.datasets.paper_simulation(600, seed=5)
    formula = "y ~ a | x1 + x2 | x3 + x4 + x5"
    clean = ccme.fit(formula, data, seed=2).tuning.chosen["y_bandwidth"]
    for position in (0, 3):
        moved = data.copy()
        moved.loc[moved.index[position], "y"] = 5000.0
        chosen = ccme.fit(formula, moved, seed=2).tuning.chosen["y_bandwidth"]
        for arm in (1, 0):
            assert 0.75 < chosen[arm] / clean[arm] < 1.33
