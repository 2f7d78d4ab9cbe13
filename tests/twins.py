"""Plain-numpy twins of the compiled core (:mod:`ccme._core` via :mod:`ccme._backend`).

Same signatures, same results (up to rounding), written naively and obviously:
everything is materialised.  Used by the tests to check the core; not fast.
They live beside the tests (as DoubleML keeps its ``_utils_*_manual.py``), not
in the package: tests import them as ``import twins`` (pytest puts ``tests/``
on ``sys.path``), and ``benchmarks/bench_ridge.py`` loads this file by path to
time a numpy-only ridge fit.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.special

from ccme.errors import NumericalError

JITTER_FACTORS = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4)


def _2d(x):
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(-1, 1) if x.ndim == 1 else x


def gram(A, B, kernel, bandwidth, normalized=False, n_threads=0):
    A, B = _2d(A), _2d(B)
    bw = np.broadcast_to(np.asarray(bandwidth, dtype=np.float64), (A.shape[1],))
    d = A.shape[1]
    diff = (A[:, None, :] - B[None, :, :]) / bw  # inf bandwidth -> 0
    r = np.sqrt(np.sum(diff**2, axis=2))
    if kernel == "gaussian":
        K = np.exp(-(r**2) / 2)
        if normalized:
            K = K / ((2 * np.pi) ** (d / 2) * np.prod(bw))
    elif kernel == "laplace":
        K = np.exp(-r)
        if normalized:
            K = K * math.gamma(d / 2) / (2 * np.pi ** (d / 2) * math.gamma(d) * np.prod(bw))
    elif kernel == "matern32":
        K = (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)
    elif kernel == "matern52":
        K = (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)
    else:
        raise ValueError(kernel)
    return K


def atom_features(atoms, points, feature, kernel, bandwidth, n_threads=0):
    atoms = _2d(atoms)
    if feature == "moments":
        return np.hstack([np.ones((atoms.shape[0], 1)), atoms, atoms**2])
    points = _2d(points)
    if feature == "density":
        return gram(atoms, points, kernel, bandwidth, normalized=True)
    bw = np.broadcast_to(np.asarray(bandwidth, dtype=np.float64), (atoms.shape[1],))
    u = (points[None, :, :] - atoms[:, None, :]) / bw  # (K, q, dy)
    if kernel == "gaussian":
        return np.prod(scipy.special.ndtr(u), axis=2)
    u = u[:, :, 0]
    return np.where(u < 0, 0.5 * np.exp(np.minimum(u, 0)), 1 - 0.5 * np.exp(-np.maximum(u, 0)))


def _factor(A, shift):
    n = A.shape[0]
    if n == 0:
        return np.zeros((0, 0)), 0.0
    A = np.tril(A) + np.tril(A, -1).T  # the core reads the lower triangle only
    mean = np.mean(np.diag(A)) + shift
    jitters = [0.0] + ([f * mean for f in JITTER_FACTORS] if np.isfinite(mean) and mean > 0 else [])
    for jitter in jitters:
        try:
            return np.linalg.cholesky(A + (shift + jitter) * np.eye(n)), jitter
        except np.linalg.LinAlgError:
            continue
    raise NumericalError("cholesky: not positive definite even with jitter")


def cholesky(A, shift=0.0, n_threads=0):
    return _factor(np.asarray(A, dtype=np.float64), shift)


def kernel_ridge_factor(X, kernel, bandwidth, shift, n_threads=0):
    X = _2d(X)
    return _factor(gram(X, X, kernel, bandwidth), shift)


def cholesky_solve(L, B, n_threads=0):
    L = np.asarray(L, dtype=np.float64)
    return np.linalg.solve(L @ L.T, np.asarray(B, dtype=np.float64))


def ridge_weights(L_V, V1, v_kernel, v_bandwidth, a, b, X1, L_X0, X0, x_kernel, x_bandwidth, V_eval,
                  n_threads=0):
    L_V = np.asarray(L_V, dtype=np.float64)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    L_X0 = np.asarray(L_X0, dtype=np.float64)
    beta = np.linalg.solve(L_V @ L_V.T, gram(V1, V_eval, v_kernel, v_bandwidth))
    c1 = a[:, None] * beta
    m = L_X0.shape[0]
    if m == 0 or not np.any(b != 0):
        c0 = np.zeros((m, beta.shape[1]))
    else:
        K_X0X1 = gram(X0, X1, x_kernel, x_bandwidth)
        c0 = np.linalg.solve(L_X0 @ L_X0.T, K_X0X1 @ (b[:, None] * beta))
    return c1, c0


def ridge_contract(L_V, V1, v_kernel, v_bandwidth, a, Y1, b, X1, L_X0, X0, Y0, x_kernel, x_bandwidth,
                   V_eval, points, feature, y_kernel, y_bandwidth, out=None, scale=1.0, n_threads=0,
                   order="auto"):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    c1, c0 = ridge_weights(L_V, V1, v_kernel, v_bandwidth, a, b, X1, L_X0, X0, x_kernel, x_bandwidth, V_eval)
    Y1 = _2d(Y1)
    result = 0.0
    if np.any(a != 0):
        result = result + c1.T @ atom_features(Y1, points, feature, y_kernel, y_bandwidth)
    if c0.shape[0] > 0 and np.any(b != 0):
        result = result + c0.T @ atom_features(_2d(Y0), points, feature, y_kernel, y_bandwidth)
    dy = Y1.shape[1] if np.any(a != 0) else _2d(Y0).shape[1]
    q = 1 + 2 * dy if feature == "moments" else _2d(points).shape[0]
    if out is None:
        out = np.zeros((len(_2d(V_eval)), q))
    out += scale * result
    return out


class RidgeArmCore:
    """Twin of :class:`ccme._backend.RidgeArmCore`: keeps the arguments, evaluates with the twins above."""

    def __init__(self, *, L_V, V1, v_kernel, v_bandwidth, a, b, Y1=None, X1=None, L_X0=None, X0=None, Y0=None,
                 x_kernel=None, x_bandwidth=None):
        self.L_V, self.V1, self.v_kernel, self.v_bandwidth = np.asarray(L_V, dtype=np.float64), _2d(V1), v_kernel, v_bandwidth
        self.a, self.b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        self.L_X0 = np.zeros((0, 0)) if L_X0 is None else np.asarray(L_X0, dtype=np.float64)
        self.X1, self.X0, self.x_kernel, self.x_bandwidth = X1, X0, x_kernel, x_bandwidth
        self.Y1, self.Y0 = Y1, Y0

    def _first_stage(self):
        return self.L_X0.shape[0] > 0 and np.any(self.b != 0)

    def weights(self, V_eval, n_threads=0):
        return ridge_weights(self.L_V, self.V1, self.v_kernel, self.v_bandwidth, self.a, self.b, self.X1, self.L_X0,
                             self.X0, self.x_kernel, self.x_bandwidth, V_eval)

    def beta(self, V_eval, n_threads=0):
        return np.linalg.solve(self.L_V @ self.L_V.T, gram(self.V1, V_eval, self.v_kernel, self.v_bandwidth))

    def contract(self, V_eval, points, feature, y_kernel, y_bandwidth, out=None, scale=1.0, n_threads=0,
                 order="auto"):
        Y0 = self.Y0 if self._first_stage() else None
        Y1 = self.Y1 if self.Y1 is not None else np.zeros((0, _2d(Y0 if Y0 is not None else points).shape[1]))
        return ridge_contract(self.L_V, self.V1, self.v_kernel, self.v_bandwidth, self.a, Y1, self.b, self.X1,
                              self.L_X0, self.X0, Y0 if Y0 is not None else np.zeros((0, _2d(Y1).shape[1])),
                              self.x_kernel, self.x_bandwidth, V_eval, points, feature, y_kernel, y_bandwidth,
                              out=out, scale=scale)


def pivoted_cholesky(X, kernel, bandwidth, tol, max_rank, n_threads=0, panel=64):
    """Block-greedy pivoted Cholesky of k(X, X), the core's algorithm written plainly.

    Panels of up to ``panel`` candidates (largest residual diagonals, smaller
    index first among ties); inside a panel, the largest remaining residual is
    accepted while it exceeds ``tol``.
    """
    X = _2d(X)
    n = len(X)
    tol = max(tol, n * np.finfo(float).eps)
    rmax = min(max_rank, n)
    diag = np.ones(n)
    L = np.zeros((n, 0))
    pivots = []
    while L.shape[1] < rmax:
        want = min(panel, rmax - L.shape[1])
        order = np.lexsort((np.arange(n), -diag))[:want]
        cand = [int(i) for i in order if diag[i] > tol]
        if not cand:
            break
        G = gram(X, X[cand], kernel, bandwidth) - L @ L[cand].T
        dc = diag[cand].copy()
        used = np.zeros(len(cand), dtype=bool)
        while L.shape[1] < rmax:
            free = np.flatnonzero(~used)
            if free.size == 0:
                break
            best = free[np.argmax(dc[free])]
            if not dc[best] > tol:
                break
            used[best] = True
            col = G[:, best] / np.sqrt(dc[best])
            L = np.column_stack([L, col])
            pivots.append(cand[best])
            for t in np.flatnonzero(~used):
                c = col[cand[t]]
                G[:, t] -= c * col
                dc[t] -= c * c
            diag = diag - col**2
            diag[cand[best]] = 0.0
    residual = float(max(diag.max(), 0.0)) if L.shape[1] < n else 0.0
    return L, np.asarray(pivots, dtype=np.int64), residual


def krr_loo_path(Q, s2, Z, lambdas, n_threads=0):
    """Leave-one-out and GCV with the hat matrix of K = Q diag(s2) Qᵀ materialised."""
    Q, Z = _2d(Q), _2d(Z)
    n = len(Q)
    K = (Q * np.asarray(s2)) @ Q.T
    loo, gcv, dof = [], [], []
    for lam in np.atleast_1d(lambdas):
        H = K @ np.linalg.inv(K + n * lam * np.eye(n))
        R = Z - H @ Z
        sq = np.sum(R**2, axis=1)
        h = np.diag(H)
        loo.append(np.mean(sq / (1 - h) ** 2))
        gcv.append(np.mean(sq) / (1 - np.trace(H) / n) ** 2)
        dof.append(np.trace(H))
    return np.array(loo), np.array(gcv), np.array(dof)


def kernel_quadratic_forms(Z, W, kernel, bandwidth, normalized=True, n_threads=0):
    Z, W = _2d(Z), _2d(W)
    K = gram(Z, Z, kernel, bandwidth, normalized=normalized)
    return np.einsum("ke,kl,le->e", W, K, W)


def nystrom_weights(landmarks_v, V1, v_kernel, v_bandwidth, a, b, lam1_shift, V_eval,
                    landmarks_x=None, X1=None, X0=None, x_kernel=None, x_bandwidth=None, lam0_shift=None):
    """The low-rank ridge CCME's weights (c₁ over Y1, c₀ over Y0), everything materialised.

    Nyström from the given landmarks Z: K ≈ K_·Z K_ZZ⁻¹ K_Z·, so that the
    second stage is kernel ridge with the Nyström kernel (not a factored
    form): c₁ = a ∘ (K̃_V + sI)⁻¹ k̃_V(v) and c₀ = (K̃_X0 + s₀I)⁻¹ K̃_X0X1 (b ∘ β(v)).
    """
    def nystrom(A, B, Z, kernel, bw):
        return gram(A, Z, kernel, bw) @ np.linalg.solve(gram(Z, Z, kernel, bw), gram(Z, B, kernel, bw))

    K = nystrom(V1, V1, landmarks_v, v_kernel, v_bandwidth)
    beta = np.linalg.solve(K + lam1_shift * np.eye(len(V1)), nystrom(V1, V_eval, landmarks_v, v_kernel, v_bandwidth))
    c1 = a[:, None] * beta
    if landmarks_x is None:
        return c1, np.zeros((0, beta.shape[1]))
    K0 = nystrom(X0, X0, landmarks_x, x_kernel, x_bandwidth)
    K01 = nystrom(X0, X1, landmarks_x, x_kernel, x_bandwidth)
    c0 = np.linalg.solve(K0 + lam0_shift * np.eye(len(X0)), K01 @ (b[:, None] * beta))
    return c1, c0
