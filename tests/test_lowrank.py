"""The low-rank ridge path (ccme.estimators.lowrank): twins, the exact path at full rank, the protocol, save/load."""

import warnings

import numpy as np
import pytest

import ccme
import twins
from ccme.errors import FormatError, ParameterError
from ccme.estimators.lowrank import APPROX_THRESHOLD, LowRankFoldArm, NystromFeatures
from ccme.estimators.ridge import RidgeFoldArm
from ccme.kernels import Kernel

FORMULA = "y ~ a | x1 + x2 | x3 + x4"
FULL = {"rank_tol": 1e-12, "max_rank": 1000}  # every unit a landmark: the exact path, up to float32 storage


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(300, seed=5)


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=2, tune="none", **kwargs)


@pytest.fixture(scope="module")
def lowrank(data):
    return _fit(data, approx="lowrank", rank_tol=1e-3)


def test_features_of_the_factored_points_are_the_pivoted_cholesky_rows():
    X = np.random.default_rng(0).normal(size=(200, 2))
    kernel = Kernel("gaussian", np.array([0.8, 1.3]))
    features, rows = NystromFeatures.select(X, kernel, rank_tol=1e-4, max_rank=100, pool=500, seed=0)
    np.testing.assert_allclose(features(X), rows, atol=1e-10)
    # the factorisation's guarantee: every residual diagonal below the tolerance
    assert np.all(1.0 - np.sum(rows**2, axis=1) <= 1e-4 + 1e-12)
    assert features.residual <= 1e-4
    # Nyström from its landmarks: φ(x)ᵀφ(x') = k(x, Z) K_ZZ⁻¹ k(Z, x')
    Z = features.landmarks
    nystrom = twins.gram(X, Z, "gaussian", kernel.bandwidth) @ np.linalg.solve(
        twins.gram(Z, Z, "gaussian", kernel.bandwidth), twins.gram(Z, X, "gaussian", kernel.bandwidth))
    np.testing.assert_allclose(rows @ rows.T, nystrom, atol=1e-8)


def test_landmarks_from_a_pool_cover_the_other_points():
    X = np.random.default_rng(1).normal(size=(3000, 2))
    kernel = Kernel("gaussian", np.array([0.5, 0.5]))
    pooled, Phi = NystromFeatures.select(X, kernel, rank_tol=1e-3, max_rank=400, pool=500, seed=0)
    np.testing.assert_allclose(pooled(X), Phi, atol=1e-10)
    # the outlying rows outside the pool were added as landmarks: every residual diagonal within the tolerance
    assert np.max(1.0 - np.sum(Phi**2, axis=1)) <= 1e-3 + 1e-12
    assert pooled.residual <= 1e-3
    only_pool = NystromFeatures.select(X[:500], kernel, rank_tol=1e-3, max_rank=400, pool=500, seed=0)[0]
    assert pooled.rank > only_pool.rank
    # the extension keeps L_pp lower triangular with φ(z) = its row at each landmark
    np.testing.assert_allclose(pooled(pooled.landmarks), pooled.factor, atol=1e-8)
    assert np.allclose(np.triu(pooled.factor, 1), 0.0)


@pytest.mark.parametrize("mode", ["dr", "ipw", "pi", "onestep"])
def test_full_rank_equals_the_exact_path(data, mode):
    exact = _fit(data, mode=mode, approx="exact")
    full = _fit(data, mode=mode, approx="lowrank", **FULL)
    grid = exact.default_grid(50)
    for arm in (1, 0):
        assert isinstance(full.embedding(arm).parts[0], LowRankFoldArm)
        # float32 features: measured differences up to 3e-8 of the curves' maximum (dr, n = 300)
        reference = exact.density(grid, arm=arm, normalize=False)
        np.testing.assert_allclose(full.density(grid, arm=arm, normalize=False), reference, rtol=0,
                                   atol=1e-6 * np.abs(reference).max())


def test_weights_match_the_numpy_twin(lowrank, data):
    part = lowrank.embedding(1).parts[0]
    assert part.ranks["V"] < len(part.units) and part.ranks["X"] < len(part.Y0)  # really low rank
    V_eval = lowrank.design.encode_v(ccme.datasets.PAPER_PROFILES[["x1", "x2"]])
    vk, xk = part.v_map.kernel, part.x_map.kernel
    # The V1 / X0 rows behind the fold-arm, from the data
    design = lowrank.design
    V1, X0 = design.V[part.units], design.X[part.atom_units[len(part.Y1):]]
    c1, c0 = twins.nystrom_weights(part.v_map.landmarks, V1, vk.name, vk.bandwidth, part.pseudo.a, part.pseudo.b,
                                   part.shift, V_eval, landmarks_x=part.x_map.landmarks, X1=part.X1, X0=X0,
                                   x_kernel=xk.name, x_bandwidth=xk.bandwidth, lam0_shift=part.shift0)
    atoms, c = part.weights(V_eval)
    np.testing.assert_allclose(atoms, np.vstack([part.Y1, part.Y0]))
    np.testing.assert_allclose(c, np.vstack([c1, c0]), rtol=1e-6, atol=1e-8)


def test_contract_equals_the_weights_contracted(lowrank):
    part, y_kernel = lowrank.embedding(0).parts[1], lowrank.kernels["y"]
    V_eval = lowrank.design.V[:7]
    points = np.linspace(-5, 30, 40)
    atoms, c = part.weights(V_eval)
    for feature in ("density", "cdf"):
        F = twins.atom_features(atoms, points, feature, y_kernel.name, y_kernel.bandwidth)
        out = np.zeros((7, 40))
        part.contract(V_eval, points, feature, y_kernel, out, scale=2.0)
        np.testing.assert_allclose(out, 2.0 * c.T @ F, rtol=1e-9, atol=1e-12)


def test_linear_second_stage_matches_dense_algebra(lowrank):
    part, kernel = lowrank.embedding(1).parts[0], lowrank.kernels["y"]
    V_eval, points = lowrank.design.V[:5], np.linspace(0, 30, 9)
    # β(v) = (ΦΦᵀ + sI)⁻¹ Φ φ(v)
    Phi = part.Phi.astype(np.float64)
    K = Phi @ Phi.T
    phi = part.v_map(V_eval)
    beta = np.linalg.solve(K + part.shift * np.eye(len(K)), Phi @ phi.T)
    np.testing.assert_allclose(part.beta(V_eval), beta, rtol=1e-7, atol=1e-10)
    P = part.unit_features(points, "density", kernel)
    np.testing.assert_allclose(part.residual_features(P), part.shift * np.linalg.solve(K + part.shift * np.eye(len(K)), P),
                               rtol=1e-7, atol=1e-10)
    # the first stage's influence: W = (K̃0 + s0 I)⁻¹ K̃01 (b ∘ β)
    influence = part.first_stage_influence(beta, points, "density", kernel)
    Psi1 = part.x_map(part.X1)
    Psi0 = part.x_map(part.X0).astype(np.float32).astype(np.float64)  # as stored by the fit
    K0 = Psi0 @ Psi0.T
    W = np.linalg.solve(K0 + part.shift0 * np.eye(len(K0)), Psi0 @ Psi1.T @ (part.pseudo.b[:, None] * beta))
    np.testing.assert_allclose(influence.weights, W, rtol=1e-7, atol=1e-10)
    np.testing.assert_array_equal(influence.units, part.atom_units[len(part.Y1):])


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_bands_and_effects_run_on_the_low_rank_path(lowrank):
    bands = lowrank.bands(newdata=ccme.datasets.PAPER_PROFILES[["x1", "x2"]].iloc[:2], arm=1, n_boot=99, seed=1,
                          y=np.linspace(0, 30, 30))
    assert np.all(bands.lower <= bands.upper)
    effect = lowrank.effect(newdata=ccme.datasets.PAPER_PROFILES[["x1", "x2"]].iloc[:1], n_boot=99, seed=1)
    assert np.all(np.isfinite(effect["std_error"]))
    assert "low-rank" in str(lowrank.summary())
    assert "Nystrom rank" in str(lowrank.summary())


def test_save_and_load_keep_the_low_rank_fit(lowrank, tmp_path):
    path = tmp_path / "lowrank.ccme"
    lowrank.save(path)
    loaded = ccme.load(path)
    grid = lowrank.default_grid(30)
    assert isinstance(loaded.embedding(1).parts[0], LowRankFoldArm)
    for arm in (1, 0):
        np.testing.assert_array_equal(loaded.density(grid, arm=arm), lowrank.density(grid, arm=arm))
    state = lowrank.embedding(1).parts[0].to_state()
    with pytest.raises(FormatError, match="disagree in size"):
        LowRankFoldArm.from_state(dict(state, loadings0=state["loadings0"][:, :-1]))


def test_any_thread_count_gives_the_same_bits(data):
    grid = np.linspace(0, 30, 25)
    ref = _fit(data, approx="lowrank", n_threads=1)
    for threads in (2, 4):
        other = _fit(data, approx="lowrank", n_threads=threads)
        for arm in (1, 0):
            assert other.density(grid, arm=arm).tobytes() == ref.density(grid, arm=arm).tobytes()


def test_auto_takes_the_exact_path_for_small_n(data):
    res = _fit(data)
    assert res.params["approx"] == "exact" and 300 <= APPROX_THRESHOLD
    assert isinstance(res.embedding(1).parts[0], RidgeFoldArm)


@pytest.mark.parametrize("options, message", [
    ({"approx": "nystrom"}, "`approx` must be"),
    ({"approx": "lowrank", "first_stage": "forest"}, "needs first_stage='kernel'"),
    ({"rank_tol": 0.0}, "`rank_tol` must be"),
    ({"max_rank": 0}, "`max_rank` must be"),
    ({"max_rank": 500, "landmark_pool": 100}, "`landmark_pool`"),
])
def test_bad_low_rank_settings_are_refused(data, options, message):
    with pytest.raises(ParameterError, match=message):
        _fit(data, **options)
