"""Tests of the compiled core (ccme._core through ccme._backend) against the numpy twins."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccme import _backend as B
import twins as T  # the numpy twins, beside the tests
from ccme.errors import CcmeError, DataError, NumericalError, ParameterError

RTOL = 1e-10
trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2


def close(x, y, rtol=RTOL):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape
    scale = max(np.abs(y).max(initial=0.0), 1e-300)
    err = np.abs(x - y).max(initial=0.0) / scale
    assert err <= rtol, f"relative error {err:.3e} > {rtol}"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# ---------------------------------------------------------------------------
# kernels and features
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", B.KERNELS)
@pytest.mark.parametrize("bw", [[0.7, 1.3, 2.0], [0.5, np.inf, 1.0], [np.inf, np.inf, np.inf]])
def test_gram_vs_twin(rng, kernel, bw):
    A, Bm = rng.normal(size=(37, 3)), rng.normal(size=(1100, 3))  # several column tiles
    close(B.gram(A, Bm, kernel, bw), T.gram(A, Bm, kernel, bw))


@pytest.mark.parametrize("kernel", B.DENSITY_KERNELS)
@pytest.mark.parametrize("d", [1, 2, 5])
def test_gram_normalized_vs_twin(rng, kernel, d):
    A, Bm = rng.normal(size=(20, d)), rng.normal(size=(30, d))
    bw = rng.uniform(0.3, 2.0, d)
    close(B.gram(A, Bm, kernel, bw, normalized=True), T.gram(A, Bm, kernel, bw, normalized=True))


def test_gram_1d_inputs_and_diagonal(rng):
    x = rng.normal(size=50)
    K = B.gram(x, x, "matern52", [0.8])
    assert K.shape == (50, 50)
    np.testing.assert_array_equal(np.diag(K), 1.0)


@pytest.mark.parametrize("kernel", B.KERNELS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 25),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    log_bw=st.floats(-2, 2),
    spread=st.floats(0.01, 10),
)
def test_gram_symmetric_psd(kernel, n, d, seed, log_bw, spread):
    X = np.random.default_rng(seed).normal(scale=spread, size=(n, d))
    K = B.gram(X, X, kernel, np.full(d, np.exp(log_bw)))
    np.testing.assert_allclose(K, K.T, rtol=0, atol=1e-15)
    assert np.linalg.eigvalsh((K + K.T) / 2).min() >= -1e-10 * n


@pytest.mark.parametrize("kernel", B.DENSITY_KERNELS)
def test_normalized_kernel_integrates_to_one_1d(kernel):
    bw = 0.7
    y = np.linspace(-40, 40, 160001)
    f = B.gram(y, np.array([[0.3]]), kernel, [bw], normalized=True)[:, 0]
    assert abs(trapezoid(f, y) - 1) < 1e-6


@pytest.mark.parametrize("kernel", B.DENSITY_KERNELS)
def test_normalized_kernel_integrates_to_one_2d(kernel):
    bw = np.array([0.6, 1.1])
    g = np.linspace(-30, 30, 1201)
    gx, gy = np.meshgrid(g, g, indexing="ij")
    pts = np.column_stack([gx.ravel(), gy.ravel()])
    f = B.gram(pts, np.array([[0.2, -0.1]]), kernel, bw, normalized=True)[:, 0].reshape(gx.shape)
    integral = trapezoid(trapezoid(f, g, axis=1), g)
    assert abs(integral - 1) < 1e-4


@pytest.mark.parametrize(
    "feature,kernel,dy",
    [
        ("density", "gaussian", 1), ("density", "gaussian", 2), ("density", "laplace", 1),
        ("density", "laplace", 3), ("cdf", "gaussian", 1), ("cdf", "gaussian", 2),
        ("cdf", "laplace", 1), ("moments", "gaussian", 1), ("moments", "laplace", 2),
    ],
)
def test_atom_features_vs_twin(rng, feature, kernel, dy):
    atoms, points = rng.normal(size=(70, dy)), rng.normal(size=(1030, dy))
    bw = rng.uniform(0.2, 1.5, dy)
    close(B.atom_features(atoms, points, feature, kernel, bw), T.atom_features(atoms, points, feature, kernel, bw))


def test_moments_ignore_points(rng):
    atoms = rng.normal(size=(5, 2))
    F = B.atom_features(atoms, np.zeros((0, 2)), "moments", "gaussian", [1.0, 1.0])
    np.testing.assert_array_equal(F, np.hstack([np.ones((5, 1)), atoms, atoms**2]))


# ---------------------------------------------------------------------------
# Cholesky and solves
# ---------------------------------------------------------------------------
def spd(rng, n):
    G = rng.normal(size=(n, n))
    return G @ G.T / n + np.eye(n)


@pytest.mark.parametrize("n", [1, 5, 256, 300, 530])
def test_cholesky_vs_twin(rng, n):
    A = spd(rng, n)
    L, jit = B.cholesky(A, shift=0.5)
    L2, jit2 = T.cholesky(A, shift=0.5)
    assert jit == jit2 == 0.0
    np.testing.assert_array_equal(np.triu(L, 1), 0.0)
    close(L, L2)


def test_cholesky_needs_jitter():
    X = np.repeat(np.linspace(0, 1, 40)[:, None], 2, axis=0)  # duplicated points: singular Gram
    K = T.gram(X, X, "gaussian", [0.5])
    L, jit = B.cholesky(K)
    L2, jit2 = T.cholesky(K)
    assert jit > 0 and jit == jit2
    close(L @ L.T, K + jit * np.eye(len(K)), 1e-9)
    Lk, jitk = B.kernel_ridge_factor(X, "gaussian", [0.5], 0.0)
    assert jitk > 0
    close(Lk @ Lk.T, K + jitk * np.eye(len(K)), 1e-9)


def test_cholesky_fails_cleanly():
    A = -np.eye(4)
    with pytest.raises(NumericalError, match="not positive definite"):
        B.cholesky(A)
    A = np.diag([1.0, 1.0, -5.0])
    with pytest.raises(NumericalError, match="jitter"):
        B.cholesky(A)


@pytest.mark.parametrize("kernel", B.KERNELS)
def test_kernel_ridge_factor_vs_twin(rng, kernel):
    X = rng.normal(size=(300, 3))
    bw = [1.0, np.inf, 0.5]
    L, jit = B.kernel_ridge_factor(X, kernel, bw, 0.3)
    L2, jit2 = T.kernel_ridge_factor(X, kernel, bw, 0.3)
    assert jit == jit2 == 0.0
    close(L, L2)


@pytest.mark.parametrize("q", [1, 7, 300])
def test_cholesky_solve(rng, q):
    n = 400
    A = spd(rng, n)
    L, _ = B.cholesky(A)
    Bm = rng.normal(size=(n, q))
    X = B.cholesky_solve(L, Bm)
    close(X, T.cholesky_solve(L, Bm), 1e-9)
    close(A @ X, Bm, 1e-10)
    x = B.cholesky_solve(L, Bm[:, 0])
    assert x.shape == (n,)
    close(x, X[:, 0])


# ---------------------------------------------------------------------------
# ridge contraction
# ---------------------------------------------------------------------------
def ridge_problem(rng, n=40, m=30, ne=9, q=11, dv=2, dx=3, dy=1, a_zero=False, b_zero=False):
    V1 = rng.normal(size=(n, dv))
    X1 = np.hstack([V1, rng.normal(size=(n, dx - dv))]) if dx > dv else rng.normal(size=(n, dx))
    X0 = rng.normal(size=(m, dx))
    bv, bx, by = rng.uniform(0.5, 2, dv), rng.uniform(0.5, 2, dx), rng.uniform(0.2, 1, dy)
    L_V, _ = B.kernel_ridge_factor(V1, "gaussian", bv, 0.1 * n)
    L_X0 = B.kernel_ridge_factor(X0, "matern32", bx, 0.05 * m)[0] if m else np.zeros((0, 0))
    a = np.zeros(n) if a_zero else rng.uniform(0, 3, n)
    b = np.zeros(n) if b_zero else 1 - a
    return dict(
        L_V=L_V, V1=V1, v_kernel="gaussian", v_bandwidth=bv, a=a, Y1=rng.normal(size=(n, dy)), b=b,
        X1=X1, L_X0=L_X0, X0=X0, Y0=rng.normal(size=(m, dy)), x_kernel="matern32", x_bandwidth=bx,
        V_eval=rng.normal(size=(ne, dv)),
    ), rng.normal(size=(q, dy)), by


CASES = [
    dict(), dict(m=0), dict(a_zero=True), dict(b_zero=True), dict(dy=2), dict(ne=30, q=3),
    dict(n=300, m=280, ne=270, q=260),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("feature", B.FEATURES)
def test_ridge_contract_vs_twin(rng, case, feature):
    args, points, by = ridge_problem(rng, **case)
    kw = dict(args, points=points, feature=feature, y_kernel="gaussian", y_bandwidth=by)
    ref = T.ridge_contract(**kw, scale=0.7)
    outs = {order: B.ridge_contract(**kw, scale=0.7, order=order) for order in ("auto", "y", "v")}
    for order, out in outs.items():
        close(out, ref)
    close(outs["y"], outs["v"], 1e-12)


def test_ridge_contract_accumulates_in_place(rng):
    args, points, by = ridge_problem(rng)
    kw = dict(args, points=points, feature="cdf", y_kernel="laplace", y_bandwidth=by)
    out = np.ones((9, 11))
    res = B.ridge_contract(**kw, out=out, scale=2.0)
    assert res is out
    close(out - 1, T.ridge_contract(**kw, scale=2.0))
    outF = np.asfortranarray(np.ones((9, 11)))  # non C-contiguous: still accumulated in place
    B.ridge_contract(**kw, out=outF, scale=2.0)
    close(outF, out)


@pytest.mark.parametrize("case", [dict(), dict(m=0), dict(a_zero=True), dict(b_zero=True)])
def test_ridge_weights_vs_twin(rng, case):
    args, _, _ = ridge_problem(rng, **case)
    args = {k: v for k, v in args.items() if k not in ("Y1", "Y0")}
    c1, c0 = B.ridge_weights(**args)
    t1, t0 = T.ridge_weights(**args)
    assert c1.shape == t1.shape and c0.shape == t0.shape
    close(c1, t1)
    close(c0, t0)


# ---------------------------------------------------------------------------
# the bound fold-arm object
# ---------------------------------------------------------------------------
def arm_kwargs(args):
    return {k: v for k, v in args.items() if k != "V_eval"}


@pytest.mark.parametrize("case", [dict(), dict(m=0), dict(b_zero=True), dict(a_zero=True), dict(dy=2),
                                  dict(n=300, m=280, ne=270, q=260)])
def test_ridge_arm_bit_identical_to_one_call_functions(rng, case):
    """RidgeArmCore.contract / weights equal ridge_contract / ridge_weights bit for bit, used repeatedly."""
    args, points, by = ridge_problem(rng, **case)
    arm = B.RidgeArmCore(**arm_kwargs(args))
    assert (arm.n, arm.m, arm.dv, arm.dy) == (args["L_V"].shape[0], args["L_X0"].shape[0], 2, points.shape[1])
    assert arm.uses_b == (args["L_X0"].shape[0] > 0 and bool(np.any(args["b"] != 0)))
    for feature in B.FEATURES:
        for n_threads in (1, 2, 3):
            kw = dict(points=points, feature=feature, y_kernel="gaussian", y_bandwidth=by, scale=0.7,
                      n_threads=n_threads)
            want = B.ridge_contract(**args, **kw)
            np.testing.assert_array_equal(arm.contract(args["V_eval"], **kw), want)
            np.testing.assert_array_equal(arm.contract(args["V_eval"], **kw), want)  # no state kept between calls
            for order in ("y", "v"):
                np.testing.assert_array_equal(arm.contract(args["V_eval"], **kw, order=order),
                                              B.ridge_contract(**args, **kw, order=order))
    wargs = {k: v for k, v in args.items() if k not in ("Y1", "Y0")}
    for n_threads in (1, 2, 3):
        for got, want in zip(arm.weights(args["V_eval"], n_threads), B.ridge_weights(**wargs, n_threads=n_threads)):
            np.testing.assert_array_equal(got, want)
    close(arm.contract(args["V_eval"], points, "density", "gaussian", by),
          T.RidgeArmCore(**arm_kwargs(args)).contract(args["V_eval"], points, "density", "gaussian", by))


@pytest.mark.parametrize("case", [dict(), dict(m=0), dict(n=300, m=280, ne=270)])
def test_ridge_arm_beta_is_the_bootstraps_smoother(rng, case):
    """beta() equals ridge_weights with a = 1 and no first stage (how the bootstrap computed it) bit for bit."""
    args, _, _ = ridge_problem(rng, **case)
    arm = B.RidgeArmCore(**arm_kwargs(args))
    n = args["L_V"].shape[0]
    for n_threads in (1, 2, 3):
        want, _ = B.ridge_weights(
            L_V=args["L_V"], V1=args["V1"], v_kernel="gaussian", v_bandwidth=args["v_bandwidth"], a=np.ones(n),
            b=np.zeros(n), X1=args["X1"], L_X0=np.zeros((0, 0)), X0=args["X0"], x_kernel="matern32",
            x_bandwidth=args["x_bandwidth"], V_eval=args["V_eval"], n_threads=n_threads,
        )
        np.testing.assert_array_equal(arm.beta(args["V_eval"], n_threads), want)
    close(arm.beta(args["V_eval"]), T.RidgeArmCore(**arm_kwargs(args)).beta(args["V_eval"]))


def test_ridge_arm_weights_only(rng):
    args, points, by = ridge_problem(rng)
    kw = {k: v for k, v in arm_kwargs(args).items() if k not in ("Y1", "Y0")}
    arm = B.RidgeArmCore(**kw)
    assert arm.dy is None
    for got, want in zip(arm.weights(args["V_eval"]), B.RidgeArmCore(**arm_kwargs(args)).weights(args["V_eval"])):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ParameterError, match="without outcomes"):
        arm.contract(args["V_eval"], points, "density", "gaussian", by)
    # Without a first stage, X1 / X0 / L_X0 / x_kernel may be left out.
    n = args["L_V"].shape[0]
    bare = B.RidgeArmCore(L_V=args["L_V"], V1=args["V1"], v_kernel="gaussian", v_bandwidth=args["v_bandwidth"],
                          a=np.ones(n), b=np.zeros(n))
    np.testing.assert_array_equal(bare.beta(args["V_eval"]), arm.beta(args["V_eval"]))
    assert "RidgeArmCore" in repr(bare) and "direct" in repr(bare)


def test_ridge_arm_references_its_factor(rng):
    """The core reads L_V in place (no n x n copy) and keeps it alive; it refuses arrays it would have to copy."""
    import gc

    from ccme import _core

    args, points, by = ridge_problem(rng)
    want = B.ridge_contract(**args, points=points, feature="density", y_kernel="gaussian", y_bandwidth=by)
    kw = arm_kwargs(args)
    kw["L_V"] = args["L_V"].copy()
    arm = B.RidgeArmCore(**kw)
    assert arm._L_V is kw["L_V"]  # a C-ordered float64 factor is not copied on the way in
    del kw
    gc.collect()
    np.testing.assert_array_equal(arm.contract(args["V_eval"], points, "density", "gaussian", by), want)
    raw = dict(arm_kwargs(args), L_V=np.asfortranarray(args["L_V"]), v_bandwidth=args["v_bandwidth"],
               x_bandwidth=args["x_bandwidth"], Y1=args["Y1"], Y0=args["Y0"])
    with pytest.raises(TypeError):
        _core.RidgeArm(**raw)  # a Fortran-ordered factor would need a temporary copy: refused
    np.testing.assert_array_equal(  # the wrapper converts it (once) instead
        B.RidgeArmCore(**dict(arm_kwargs(args), L_V=np.asfortranarray(args["L_V"])))
        .contract(args["V_eval"], points, "density", "gaussian", by), want)


def test_ridge_arm_concurrent_use(rng):
    """One object evaluated from several Python threads at once (GIL released) gives the sequential results."""
    from concurrent.futures import ThreadPoolExecutor

    args, points, by = ridge_problem(rng, n=300, m=280, ne=200, q=150)
    arm = B.RidgeArmCore(**arm_kwargs(args))
    features = ["density", "cdf", "moments"] * 3
    sequential = [arm.contract(args["V_eval"], points, f, "gaussian", by, n_threads=1) for f in features]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(lambda f: arm.contract(args["V_eval"], points, f, "gaussian", by, n_threads=1),
                                   features))
    for a, b in zip(sequential, concurrent):
        np.testing.assert_array_equal(a, b)


def test_ridge_arm_errors(rng):
    args, points, by = ridge_problem(rng)
    kw = arm_kwargs(args)
    with pytest.raises(DataError, match="X0 has 29 rows but L_X0 has 30"):
        B.RidgeArmCore(**dict(kw, X0=args["X0"][:-1]))
    with pytest.raises(DataError, match="Y1 is required"):
        B.RidgeArmCore(**dict(kw, Y1=None))
    with pytest.raises(DataError, match="X1, X0, x_kernel and x_bandwidth are required"):
        B.RidgeArmCore(**dict(kw, X1=None))
    with pytest.raises(ParameterError, match="x_kernel='rbf'"):
        B.RidgeArmCore(**dict(kw, x_kernel="rbf"))
    arm = B.RidgeArmCore(**kw)
    with pytest.raises(DataError, match="contract: V_eval has 3 columns but V1 has 2"):
        arm.contract(rng.normal(size=(4, 3)), points, "density", "gaussian", by)
    with pytest.raises(DataError, match="beta: V_eval has 3 columns"):
        arm.beta(rng.normal(size=(4, 3)))
    with pytest.raises(DataError, match="points has 2 columns but Y1 has 1"):
        arm.contract(args["V_eval"], rng.normal(size=(4, 2)), "density", "gaussian", by)
    with pytest.raises(DataError, match="out must be an ndarray of shape"):
        arm.contract(args["V_eval"], points, "density", "gaussian", by, out=np.zeros((2, 2)))
    with pytest.raises(ParameterError, match="feature='pdf'"):
        arm.contract(args["V_eval"], points, "pdf", "gaussian", by)
    with pytest.raises(ParameterError, match="n_threads"):
        arm.weights(args["V_eval"], n_threads=-2)


# ---------------------------------------------------------------------------
# determinism across thread counts
# ---------------------------------------------------------------------------
def test_bit_identical_across_threads(rng):
    n = 700
    A = spd(rng, n)
    Ls = [B.cholesky(A, n_threads=t)[0] for t in (1, 2, 3)]
    Bm = rng.normal(size=(n, 300))
    Xs = [B.cholesky_solve(Ls[0], Bm, n_threads=t) for t in (1, 2, 3)]
    args, points, by = ridge_problem(rng, n=700, m=600, ne=300, q=290)
    kw = dict(args, points=points, feature="density", y_kernel="gaussian", y_bandwidth=by)
    Rs = {o: [B.ridge_contract(**kw, order=o, n_threads=t) for t in (1, 2, 3)] for o in ("y", "v")}
    arm = B.RidgeArmCore(**arm_kwargs(args))
    Bs = [arm.beta(args["V_eval"], n_threads=t) for t in (1, 2, 3)]
    Ks = [B.kernel_ridge_factor(args["V1"], "laplace", [1.0, 1.0], 1.0, n_threads=t)[0] for t in (1, 2, 3)]
    for group in (Ls, Xs, Rs["y"], Rs["v"], Ks, Bs):
        for other in group[1:]:
            np.testing.assert_array_equal(group[0], other)


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------
def test_errors(rng):
    X = rng.normal(size=(5, 2))
    with pytest.raises(ParameterError, match="'cubic'.*allowed kernels are 'gaussian'"):
        B.gram(X, X, "cubic", [1, 1])
    with pytest.raises(DataError, match="B has 3 columns but A has 2"):
        B.gram(X, rng.normal(size=(4, 3)), "gaussian", [1, 1])
    with pytest.raises(ParameterError, match="bandwidth must be > 0"):
        B.gram(X, X, "gaussian", [1, 0])
    with pytest.raises(ParameterError, match="bandwidth has length 3"):
        B.gram(X, X, "gaussian", [1, 1, 1])
    with pytest.raises(ParameterError, match="finite"):
        B.gram(X, X, "gaussian", [1, np.inf], normalized=True)
    with pytest.raises(ParameterError, match="allowed kernels are 'gaussian', 'laplace'$"):
        B.gram(X, X, "matern32", [1, 1], normalized=True)
    Xn = X.copy()
    Xn[2, 1] = np.nan
    with pytest.raises(DataError, match="A contains NaN"):
        B.gram(Xn, X, "gaussian", [1, 1])
    with pytest.raises(ParameterError, match="laplace cdf is only available"):
        B.atom_features(X, X, "cdf", "laplace", [1, 1])
    with pytest.raises(ParameterError, match="feature='pdf'"):
        B.atom_features(X, X, "pdf", "gaussian", [1, 1])
    with pytest.raises(DataError, match="must be square"):
        B.cholesky(rng.normal(size=(3, 4)))
    with pytest.raises(ParameterError, match="n_threads"):
        B.gram(X, X, "gaussian", [1, 1], n_threads=-1)
    args, points, by = ridge_problem(rng)
    kw = dict(args, points=points, feature="density", y_kernel="gaussian", y_bandwidth=by)
    with pytest.raises(DataError, match="ridge_contract: V_eval has 3 columns but V1 has 2"):
        B.ridge_contract(**dict(kw, V_eval=rng.normal(size=(4, 3))))
    with pytest.raises(DataError, match="X0 has 29 rows but L_X0 has 30"):
        B.ridge_contract(**dict(kw, X0=args["X0"][:-1]))
    with pytest.raises(DataError, match="a has length 39"):
        B.ridge_contract(**dict(kw, a=args["a"][:-1]))
    with pytest.raises(DataError, match="out must be an ndarray of shape"):
        B.ridge_contract(**kw, out=np.zeros((2, 2)))
    with pytest.raises(ParameterError, match="order"):
        B.ridge_contract(**kw, order="x")
    with pytest.raises(CcmeError):
        B.ridge_weights(**{k: v for k, v in dict(args, x_kernel="rbf").items() if k not in ("Y1", "Y0")})


def test_core_shape_errors_are_data_errors(rng):
    """The documented table: shapes that do not fit -> DataError, names and values -> ParameterError.

    The core raises _core.ShapeError (a ValueError) for shape mismatches; _backend maps it to
    DataError even when a check in Python did not catch the mismatch first.
    """
    from ccme import _core

    X = rng.normal(size=(5, 2))
    assert issubclass(_core.ShapeError, ValueError)
    with pytest.raises(DataError, match="gram: A has 2 columns but B has 3"):
        B._call(_core.gram, X, rng.normal(size=(4, 3)), "gaussian", np.ones(2))
    with pytest.raises(DataError, match="must be square"):
        B._call(_core.cholesky, rng.normal(size=(3, 4)))
    with pytest.raises(DataError, match="cholesky_solve: B has 3 rows"):
        B._call(_core.cholesky_solve, np.eye(4), np.ones((3, 1)))
    with pytest.raises(DataError, match="W has 4 rows but Z has 5"):
        B._call(_core.kernel_quadratic_forms, X, np.ones((4, 1)), "gaussian", np.ones(2))
    with pytest.raises(DataError, match="Z has 3 rows"):
        B._call(_core.krr_loo_path, np.ones((5, 2)), np.ones(2), np.ones((3, 1)), np.ones(1))
    with pytest.raises(DataError, match="points have 1 columns but the atoms have 2"):
        B._call(_core.atom_features, X, np.ones((3, 1)), "density", "gaussian", np.ones(2))
    args, points, by = ridge_problem(rng)
    arm = B.RidgeArmCore(**arm_kwargs(args))
    with pytest.raises(DataError, match="out has shape"):
        B._call(arm._arm.contract, args["V_eval"], points, "density", "gaussian", by, np.zeros((2, 2)), 1.0)
    with pytest.raises(DataError, match="V_eval has 3 columns"):
        B._call(arm._arm.beta, np.ones((2, 3)))
    # Names and values stay ParameterError.
    with pytest.raises(ParameterError, match="unknown kernel 'foo'"):
        B._call(_core.gram, X, X, "foo", np.ones(2))
    with pytest.raises(ParameterError, match="bandwidth has length 1"):
        B._call(_core.gram, X, X, "gaussian", np.ones(1))
    with pytest.raises(ParameterError, match="order must be"):
        B._call(arm._arm.contract, args["V_eval"], points, "density", "gaussian", by, np.zeros((9, 11)), 1.0,
                order="x")


def test_core_errors_are_value_errors(rng):
    from ccme import _core

    X = rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="unknown kernel 'foo'; allowed kernels are"):
        _core.gram(X, X, "foo", np.ones(2))
    with pytest.raises(ValueError, match="bandwidth has length 1"):
        _core.gram(X, X, "gaussian", np.ones(1))
    with pytest.raises(_core.CholeskyError):
        _core.cholesky(-np.eye(3))
    assert issubclass(_core.CholeskyError, ArithmeticError)
    assert isinstance(_core.has_openmp, bool) and _core.max_threads() >= 1


def test_coexists_with_torch_openmp(rng):
    torch = pytest.importorskip("torch")
    from ccme import _core

    torch.set_num_threads(2)
    x = torch.randn(200, 200)
    (x @ x).sum().item()
    X = rng.normal(size=(300, 3))
    K = _core.gram(X, X, "gaussian", np.ones(3), n_threads=2)
    close(K, T.gram(X, X, "gaussian", np.ones(3)))
