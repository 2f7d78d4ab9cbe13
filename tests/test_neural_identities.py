"""The neural estimators' losses and densities against explicit, naive expressions.

Every reference here is written from the paper's formulas with plain numpy:
pseudo-outcomes as explicit coefficient vectors over outcome atoms, Gram
matrices from the normalised Gaussian density exp(−(y−y')²/2σ²)/(√(2π)σ).
"""

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import ccme  # noqa: E402
import twins as _twins  # noqa: E402  (the numpy twins, beside the tests)
from ccme.estimators.base import SplitSecondStage, contract_factored  # noqa: E402
from ccme.estimators.deep_feature import PseudoOutcomeGram, heldout_loss, trace_loss  # noqa: E402
from ccme.estimators.neural_kernel import nk_loss, pseudo_outcome_targets  # noqa: E402
from ccme.errors import CcmeWarning  # noqa: E402
from ccme.kernels import Kernel  # noqa: E402

SIGMA = 0.7
KERNEL = Kernel("gaussian", (SIGMA,))


def naive_gram(A, B, sigma=SIGMA):
    d2 = (A[:, None, 0] - B[None, :, 0]) ** 2
    return np.exp(-d2 / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)


def t(x):
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def _dr_gram(rng, n, m=12, M0=3):
    """A DR-shaped pseudo-outcome ξ_i = a_i φ(y_i) + Φ₀ P₀ u_i (a_i = 0 for some units): its PseudoOutcomeGram, the
    explicit K_ξ of the coefficient vectors over the atoms [Y ; Y0], and (a, Y, U, P0, Y0)."""
    Y, Y0 = rng.normal(size=(n, 1)), rng.normal(size=(m, 1))
    a = rng.normal(size=n) * (rng.random(n) < 0.6)
    U, P0 = rng.normal(size=(n, M0)), rng.normal(size=(m, M0))
    gram = PseudoOutcomeGram(a, Y, KERNEL, U=U, P0=P0, Y0=Y0)
    Q = np.vstack([np.diag(a), P0 @ U.T])
    atoms = np.vstack([Y, Y0])
    return gram, Q.T @ naive_gram(atoms, atoms) @ Q, (a, Y, U, P0, Y0)


@pytest.fixture(scope="module")
def dr_problem():
    rng = np.random.default_rng(0)
    n, M = 30, 4
    gram, K_xi, _ = _dr_gram(rng, n)
    return dict(gram=gram, K_xi=K_xi, Psi=rng.normal(size=(n, M)), n=n, M=M, rng=rng)


def test_dr_gram_equals_gram_of_explicit_pseudo_outcomes(dr_problem):
    gram, K_xi, n = dr_problem["gram"], dr_problem["K_xi"], dr_problem["n"]
    np.testing.assert_allclose(gram.dense(), K_xi, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gram.diag, np.diag(K_xi), rtol=1e-12, atol=1e-14)
    rows = np.arange(n)
    block = gram.block(rows, rows, torch.float64, "cpu")
    # Ψ = I: the factored Ψᵀ K_ξ Ψ is K_ξ itself.
    np.testing.assert_allclose(block.project(t(np.eye(n)), t(np.eye(n))).numpy(), K_xi, rtol=1e-12, atol=1e-14)
    # A sub-block (mini-batch) and a cross block (validation × training).
    pos = torch.tensor([3, 0, 17, 8, 29])
    Psi = dr_problem["Psi"]
    got = block.sub(pos).project(t(Psi[pos.numpy()]), t(Psi[pos.numpy()])).numpy()
    sel = pos.numpy()
    np.testing.assert_allclose(got, Psi[sel].T @ K_xi[np.ix_(sel, sel)] @ Psi[sel], rtol=1e-11)
    A_rows, B_rows = np.arange(20, 30), np.arange(20)
    cross = gram.block(A_rows, B_rows, torch.float64, "cpu").project(t(Psi[A_rows]), t(Psi[B_rows])).numpy()
    np.testing.assert_allclose(cross, Psi[A_rows].T @ K_xi[np.ix_(A_rows, B_rows)] @ Psi[B_rows], rtol=1e-11)



def test_deep_feature_outcome_kernel_kept_as_a_pivoted_cholesky_factor_equals_the_dense_block(monkeypatch):
    """From OUTCOME_FACTOR_UNITS direct units on, k(Y_A, Y_B) is L_A L_Bᵀ (run to 1e-10): every projection the
    losses use (whole block, mini-batch sub-block, validation × training) equals the explicit K_ξ's."""
    from ccme.estimators import deep_feature

    monkeypatch.setattr(deep_feature, "OUTCOME_FACTOR_UNITS", 100)
    rng = np.random.default_rng(3)
    n, M = 400, 5
    gram, K_xi, (a, Y, U, P0, Y0) = _dr_gram(rng, n)
    L, row = gram.outcome_factor
    assert L.shape[1] < np.count_nonzero(a) // 4          # a factor, well below the units' number
    Psi = rng.normal(size=(n, M))
    rows = np.arange(n)
    block = gram.block(rows, rows, torch.float64, "cpu")
    assert block.K is None and block.La is not None
    scale = np.abs(Psi.T @ K_xi @ Psi).max()
    np.testing.assert_allclose(block.project(t(Psi), t(Psi)).numpy(), Psi.T @ K_xi @ Psi, rtol=0, atol=1e-9 * scale)
    pos = torch.as_tensor(rng.choice(n, 60, replace=False))
    sel = pos.numpy()
    np.testing.assert_allclose(block.sub(pos).project(t(Psi[sel]), t(Psi[sel])).numpy(),
                               Psi[sel].T @ K_xi[np.ix_(sel, sel)] @ Psi[sel], rtol=0, atol=1e-9 * scale)
    A_rows, B_rows = np.arange(300, 400), np.arange(300)
    cross = gram.block(A_rows, B_rows, torch.float64, "cpu").project(t(Psi[A_rows]), t(Psi[B_rows])).numpy()
    np.testing.assert_allclose(cross, Psi[A_rows].T @ K_xi[np.ix_(A_rows, B_rows)] @ Psi[B_rows], rtol=0,
                               atol=1e-9 * scale)
    # Below the threshold, or where the factor would not be small, the dense block is kept.
    monkeypatch.setattr(deep_feature, "OUTCOME_FACTOR_UNITS", 10**6)
    assert PseudoOutcomeGram(a, Y, KERNEL, U=U, P0=P0, Y0=Y0).outcome_factor is None
    monkeypatch.setattr(deep_feature, "OUTCOME_FACTOR_UNITS", 100)
    spread = PseudoOutcomeGram(a, 100 * Y, KERNEL, U=U, P0=P0, Y0=Y0)    # outcomes far apart: rank ~ n
    assert spread.outcome_factor is None and spread.block(rows, rows, torch.float64, "cpu").K is not None

def _objective(K_xi, Psi, coef, lam_eff):
    """(1/n) Σ ‖C ψ_i − ξ_i‖² + (λ_eff/n) ‖C‖²_HS for C = Ξ coef (coef: n × M), written out."""
    n = len(Psi)
    err = 0.0
    for i in range(n):
        w = coef @ Psi[i]                     # C ψ_i = Σ_j w_j ξ_j
        err += w @ K_xi @ w - 2 * K_xi[i] @ w + K_xi[i, i]
    hs = np.trace(coef.T @ K_xi @ coef)      # ‖Ξ coef‖²_HS
    return (err + lam_eff * hs) / n


def test_deep_feature_trace_loss_is_the_objective_at_the_optimal_operator(dr_problem):
    K_xi, Psi, n, M = dr_problem["K_xi"], dr_problem["Psi"], dr_problem["n"], dr_problem["M"]
    lam_eff = 0.4
    rows = np.arange(n)
    loss = float(trace_loss(dr_problem["gram"].block(rows, rows, torch.float64, "cpu"), t(Psi), lam_eff))
    C_hat = Psi @ np.linalg.inv(Psi.T @ Psi + lam_eff * np.eye(M))      # eq. (C_hat): Ĉ = Ξ Ψ (ΨᵀΨ + nλI)⁻¹
    best = _objective(K_xi, Psi, C_hat, lam_eff)
    np.testing.assert_allclose(loss, best, rtol=1e-11)
    # Ĉ is the minimiser: any perturbation of the operator does worse.
    rng = dr_problem["rng"]
    for _ in range(5):
        assert _objective(K_xi, Psi, C_hat + 1e-3 * rng.normal(size=C_hat.shape), lam_eff) > best


def test_heldout_loss_is_the_prediction_error_of_the_training_fit(dr_problem):
    K_xi, Psi, M = dr_problem["K_xi"], dr_problem["Psi"], dr_problem["M"]
    T, S, lam_eff = np.arange(20), np.arange(20, 30), 0.3
    gram = dr_problem["gram"]
    got = float(heldout_loss(gram.block(T, T, torch.float64, "cpu"), gram.block(S, T, torch.float64, "cpu"),
                             t(Psi[T]), t(Psi[S]), lam_eff))
    W = Psi[T] @ np.linalg.solve(Psi[T].T @ Psi[T] + lam_eff * np.eye(M), Psi[S].T)
    KTT = K_xi[np.ix_(T, T)]
    err = [W[:, j] @ KTT @ W[:, j] - 2 * K_xi[S[j], T] @ W[:, j] + K_xi[S[j], S[j]] for j in range(len(S))]
    np.testing.assert_allclose(got, np.mean(err), rtol=1e-11)


def test_neural_kernel_loss_is_the_rkhs_objective_up_to_the_norm_of_xi():
    rng = np.random.default_rng(1)
    n, M = 25, 6
    grid = np.linspace(-2, 2, M)[:, None]
    Y = rng.normal(size=(n, 1))
    a, b = rng.normal(size=n), rng.normal(size=n)
    g0, F = rng.normal(size=(n, M)), rng.normal(size=(n, M))
    K_M = naive_gram(grid, grid)
    k0 = naive_gram(Y[:1], Y[:1])[0, 0]
    T, c = pseudo_outcome_targets(a, b, naive_gram(Y, grid), g0, K_M, k0)
    explicit, norms = [], []
    for i in range(n):
        # μ(V_i) − ξ_i over the atoms [grid ; y_i]: f_i − b_i g0_i on the grid, −a_i on y_i.
        atoms = np.vstack([grid, Y[i:i + 1]])
        K = naive_gram(atoms, atoms)
        diff = np.concatenate([F[i] - b[i] * g0[i], [-a[i]]])
        xi = np.concatenate([b[i] * g0[i], [a[i]]])
        explicit.append(diff @ K @ diff)
        norms.append(xi @ K @ xi)
    full = float(nk_loss(t(F), t(T), t(c), t(K_M)))
    np.testing.assert_allclose(full, np.mean(explicit), rtol=1e-11)
    np.testing.assert_allclose(c, norms, rtol=1e-11)
    # Without the constant: the paper's eq. (NK_loss), (1/n) Σ [fᵀK_M f − 2 fᵀb_i].
    paper = np.mean([F[i] @ K_M @ F[i] - 2 * F[i] @ T[i] for i in range(n)])
    np.testing.assert_allclose(float(nk_loss(t(F), t(T), t(0 * c), t(K_M))), paper, rtol=1e-11)


def test_factored_contraction_equals_weights_times_features():
    rng = np.random.default_rng(2)
    atoms, L = rng.normal(size=(40, 1)), rng.normal(size=(40, 5))
    V = rng.normal(size=(7, 2))
    H = rng.normal(size=(5, 2))

    def coefficients(Ve):
        return H @ Ve.T

    points = np.linspace(-3, 3, 11)[:, None]
    weights = L @ coefficients(V)
    for feature in ("density", "cdf", "moments"):
        F = _twins.atom_features(atoms, points, feature, "gaussian", KERNEL.bandwidth_array)
        out = np.ones((len(V), F.shape[1]))
        contract_factored(atoms, L, coefficients, V, points, feature, KERNEL, out, 0.5)
        np.testing.assert_allclose(out, 1.0 + 0.5 * weights.T @ F, rtol=1e-11, atol=1e-13)


@pytest.fixture(scope="module")
def small_fits():
    data = ccme.datasets.paper_simulation(300, seed=3)
    opts = dict(epochs=(15, 10), progress=False, validation=0.0, seed=3, propensity="logistic", location=None)
    fits = {
        (method, mode): ccme.fit("y ~ a | x1 + x2 | x3 + x4", data, method=method, mode=mode, **opts)
        for method in ("deep_feature", "neural_kernel") for mode in ("dr", "ipw", "pi", "onestep")
    }
    for mode in ("dr", "ipw", "pi", "onestep"):     # the paper's read-out over the grid points themselves
        fits["neural_kernel_grid", mode] = ccme.fit("y ~ a | x1 + x2 | x3 + x4", data, method="neural_kernel",
                                                    mode=mode, atoms="grid", **opts)
    return fits, data


def test_deep_feature_density_equals_eq_df_density(small_fits):
    fits, data = small_fits
    y = np.linspace(-5, 35, 50)
    newdata = pd.DataFrame({"x1": [0.5, 1.0, 2.0], "x2": [1.0, 0.0, 1.5]})
    for mode in ("dr", "ipw", "pi", "onestep"):
        res = fits["deep_feature", mode]
        V = res.design.encode_v(newdata)
        sigma = res.embeddings[1].y_kernel.bandwidth_array[0]  # the arm's read-out (tuned; the loss's is kernels["y"])
        expected = np.zeros((len(V), len(y)))
        for part in res.embeddings[1].parts:
            fm, ps = part.feature_map, part.pseudo
            beta = fm.Psi @ np.linalg.solve(fm.G, fm(V).T)                      # Ψ(ΨᵀΨ + nλ₁I)⁻¹ψ(v)
            bracket = naive_gram(y[:, None], ps["Y1"], sigma) * ps["a"]        # k_Y1(y)ᵀ D_a
            if "U" in ps:                                                      # + k_Y0(y)ᵀ P₀ Ψ̂₀₁ᵀ D_b
                bracket = bracket + naive_gram(y[:, None], ps["Y0"], sigma) @ ps["P0"] @ ps["U"].T
            expected += (bracket @ beta).T / len(res.embeddings[1].parts)
        np.testing.assert_allclose(res.density(y, newdata=newdata, arm=1, normalize=False), expected, rtol=1e-9,
                                   atol=1e-12)


@pytest.mark.parametrize("over", ["grid", "outcomes"])
def test_neural_kernel_density_equals_eq_nk_density(small_fits, over):
    """Eq. (nk_density), p̂(y | v) = Σ_j f_j(v) k_Y(ỹ_j, y), over the grid (atoms="grid"); over the outcomes, each
    grid point's kernel replaced by its loadings' mixture of the outcomes' kernels, Σ_k L_kj k_Y(y_k, y)."""
    fits, _ = small_fits
    y = np.linspace(-5, 35, 50)
    newdata = pd.DataFrame({"x1": [0.5, 1.0], "x2": [1.0, 0.0]})
    for mode in ("dr", "ipw", "pi", "onestep"):
        res = fits["neural_kernel_grid" if over == "grid" else "neural_kernel", mode]
        V = res.design.encode_v(newdata)
        sigma = res.embeddings[0].y_kernel.bandwidth_array[0]  # the arm's read-out
        grid = res.hyperparameters["grid"]
        parts = res.embeddings[0].parts
        def f(part):   # f(v): one network, or the split doubly robust stage's plug-in part plus its correction
            Z = torch.as_tensor(part.standardizer(V))
            out = part.net(Z).detach().numpy()
            return out if part.correction is None else out + part.correction(Z).detach().numpy()

        assert all((part.correction is not None) == (mode == "dr") for part in parts)
        assert all(np.array_equal(part.grid, grid) for part in parts)
        if over == "grid":
            assert all(part.atoms is part.grid for part in parts)
            expected = sum(f(part) @ naive_gram(grid, y[:, None], sigma) for part in parts) / len(parts)
        else:
            assert all(len(part.atoms) > len(grid) for part in parts)
            expected = sum(f(part) @ part.loadings.T @ naive_gram(part.atoms, y[:, None], sigma)
                           for part in parts) / len(parts)
        np.testing.assert_allclose(res.density(y, newdata=newdata, arm=0, normalize=False), expected, rtol=1e-9,
                                   atol=1e-12)
        atoms, w = res.embeddings[0].weights(v=V)
        np.testing.assert_allclose(w.T @ naive_gram(atoms, y[:, None], sigma), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_deep_feature_linear_second_stage_reproduces_the_estimate():
    """Σ_i β_i(v) P_i(y) over the folds is Deep Feature's raw density; bands and the test run on it.

    Checked for DR (with a first stage) and one-step (without); agreement measured at ~1e-13 relative.
    """
    from ccme import bootstrap

    data = ccme.datasets.paper_simulation(300, seed=5)
    for mode, split in (("dr", {}), ("dr", {"lam1_plugin": 1e-3}), ("onestep", {})):
        res = ccme.fit("y ~ a | x1 + x2 | x3", data, method="deep_feature", mode=mode, hidden=(8,), epochs=(3, 3),
                       M=6, validation=0.0, progress=False, tune="none", seed=2, propensity="forest", **split)
        assert all(isinstance(part, SplitSecondStage) == bool(split) for part in res.embeddings[1].parts)
        V = res.design.encode_v(ccme.datasets.PAPER_PROFILES)
        y = res.default_grid(40)[:, None]
        for arm in (1, 0):
            kernel = res.embedding(arm).y_kernel
            lin = bootstrap._linear(res, arm, V, y, "density", kernel)
            np.testing.assert_allclose(sum(p.estimate() for p in lin),
                                       res.density(y, newdata=ccme.datasets.PAPER_PROFILES, arm=arm, normalize=False),
                                       rtol=1e-9, atol=1e-12)
        with pytest.warns(CcmeWarning, match="hold its learned features fixed"):
            band = res.bands(0.9, newdata=ccme.datasets.PAPER_PROFILES, y=y[:, 0], n_boot=29)
        assert np.all(band.lower <= band.estimate) and np.all(band.estimate <= band.upper)
        # ridge in learned features has no V kernel to undersmooth: one construction for both bands
        assert band.v_factor == 1.0 and band.estimate_simultaneous is None
        assert band.target.endswith("the simultaneous band the fit's own: no undersmoothed refit)")
        with pytest.warns(CcmeWarning, match="rejected 29% of null data sets"):
            assert 0 < res.test_effect(newdata=ccme.datasets.PAPER_PROFILES, n_boot=29).p_value <= 1
