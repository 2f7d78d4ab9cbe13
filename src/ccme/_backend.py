"""Thin Python layer over the compiled core :mod:`ccme._core`.

This is the only module that imports ``ccme._core``.  Each function converts
its inputs (``np.ascontiguousarray(x, dtype=np.float64)``; 1-D samples and
points become one-column matrices), validates shapes and values, and turns
errors of the core into ccme errors:

* NaN or infinite data                      -> :class:`ccme.errors.DataError`
* inconsistent shapes                       -> :class:`ccme.errors.DataError`
* bad kernel / feature names, bandwidths    -> :class:`ccme.errors.ParameterError`
* Cholesky failure after jitter             -> :class:`ccme.errors.NumericalError`

Most checks happen here, before the core is called; the core checks again and
raises ``_core.ShapeError`` (a ValueError) for shapes, a plain ValueError for
names and values and ``_core.CholeskyError``, which :func:`_call` maps to the
same three errors, so the table holds whichever layer notices first.

A fitted ridge fold-arm is a :class:`RidgeArmCore`: made once (validated, its
data pre-scaled in the core, its Cholesky factors referenced, not copied), then
evaluated many times with :meth:`RidgeArmCore.contract`,
:meth:`RidgeArmCore.weights` and :meth:`RidgeArmCore.beta`.
:func:`ridge_contract` and :func:`ridge_weights` do the same in one call.

Kernels (all bandwidths are per-column arrays, ARD; ``+inf`` ignores a column),
with ``r = sqrt(sum_d ((a_d - b_d) / sigma_d)^2)``:

``"gaussian"`` ``exp(-r^2/2)``, ``"laplace"`` ``exp(-r)``,
``"matern32"`` ``(1 + sqrt(3) r) exp(-sqrt(3) r)``,
``"matern52"`` ``(1 + sqrt(5) r + 5 r^2/3) exp(-sqrt(5) r)``.
Normalised (density) versions, integrating to one over R^d, exist for
``"gaussian"`` and ``"laplace"`` with finite bandwidths.

Every function takes ``n_threads`` (0: OpenMP's default).  Results are
bit-identical for every number of threads: the core parallelises over fixed
blocks of work and never splits a floating-point reduction between threads.

Cholesky jitter rule (:func:`cholesky`, :func:`kernel_ridge_factor`): the
factorisation of ``A + shift I`` is tried first with jitter 0; if a pivot is not
positive it is restarted from the original matrix with
``jitter = 1e-10 * mean(diag(A) + shift)``, multiplied by 10 at each retry up
to ``1e-4 * mean(diag(A) + shift)``; if that fails too, NumericalError is raised.
The jitter actually used is returned.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np
from threadpoolctl import threadpool_limits

from . import _core
from .errors import DataError, NumericalError, ParameterError

__all__ = [
    "KERNELS",
    "DENSITY_KERNELS",
    "FEATURES",
    "HAS_OPENMP",
    "max_threads",
    "gram",
    "atom_features",
    "cholesky",
    "kernel_ridge_factor",
    "cholesky_solve",
    "RidgeArmCore",
    "ridge_contract",
    "ridge_weights",
    "n_features",
    "pivoted_cholesky",
    "krr_loo_path",
    "kernel_quadratic_forms",
]

KERNELS = ("gaussian", "laplace", "matern32", "matern52")
DENSITY_KERNELS = ("gaussian", "laplace")
FEATURES = ("density", "cdf", "moments")
HAS_OPENMP: bool = bool(_core.has_openmp)


def max_threads() -> int:
    """Number of threads the core uses when ``n_threads=0``."""
    return int(_core.max_threads())


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------
def _matrix(x, name: str, *, check_finite: bool = True) -> np.ndarray:
    try:
        arr = np.ascontiguousarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must be a numeric array: {exc}") from None
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    elif arr.ndim == 0:
        arr = arr.reshape(1, 1)
    if arr.ndim != 2:
        raise DataError(f"{name} must be a 1-D or 2-D array, got shape {arr.shape}")
    if check_finite and not np.isfinite(arr).all():
        raise DataError(f"{name} contains NaN or infinite values")
    return arr


def _vector(x, name: str, n: int | None = None) -> np.ndarray:
    try:
        arr = np.ascontiguousarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must be a numeric array: {exc}") from None
    if arr.ndim != 1:
        arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
    if arr.ndim != 1:
        raise DataError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise DataError(f"{name} has length {arr.shape[0]} but {n} was expected")
    if not np.isfinite(arr).all():
        raise DataError(f"{name} contains NaN or infinite values")
    return arr


def _factor(L, name: str) -> np.ndarray:
    """A Cholesky factor: square, finite diagonal (the full matrix is not scanned)."""
    arr = _matrix(L, name, check_finite=False)
    if arr.shape[0] != arr.shape[1]:
        raise DataError(f"{name} must be a square Cholesky factor, got shape {arr.shape}")
    if not np.isfinite(np.diagonal(arr)).all():
        raise DataError(f"{name} has NaN or infinite values on its diagonal")
    return arr


def _kernel(kernel, name: str, allowed=KERNELS) -> str:
    if not isinstance(kernel, str) or kernel not in allowed:
        raise ParameterError(
            f"{name}={kernel!r} is not a known kernel; allowed kernels are "
            + ", ".join(repr(k) for k in allowed)
        )
    return kernel


def _bandwidth(bw, d: int, name: str, *, finite: bool = False) -> np.ndarray:
    try:
        arr = np.asarray(bw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"{name} must be numeric: {exc}") from None
    if arr.ndim == 0:
        arr = np.full(d, float(arr))
    arr = np.ascontiguousarray(arr.reshape(-1))
    if arr.shape[0] != d:
        raise ParameterError(f"{name} has length {arr.shape[0]} but the data have {d} columns")
    if np.isnan(arr).any() or (arr <= 0).any():
        raise ParameterError(f"{name} must be > 0 (or +inf to ignore a column), got {arr.tolist()}")
    if finite and np.isinf(arr).any():
        raise ParameterError(f"{name} must be finite here (normalised kernels), got {arr.tolist()}")
    return arr


def _threads(n_threads) -> int:
    if not isinstance(n_threads, numbers.Integral) or isinstance(n_threads, bool) or n_threads < 0:
        raise ParameterError(f"n_threads must be an integer >= 0 (0: OpenMP's default), got {n_threads!r}")
    return int(n_threads)


def _scalar(x, name: str) -> float:
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a real number, got {x!r}") from None
    if not np.isfinite(val):
        raise ParameterError(f"{name} must be finite, got {val}")
    return val


def _cols(arr: np.ndarray, d: int, name: str, ref: str) -> None:
    if arr.shape[1] != d:
        raise DataError(f"{name} has {arr.shape[1]} columns but {ref} has {d}")


def _rows(arr: np.ndarray, n: int, name: str, ref: str) -> None:
    if arr.shape[0] != n:
        raise DataError(f"{name} has {arr.shape[0]} rows but {ref} has {n}")


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except _core.CholeskyError as exc:
        raise NumericalError(
            f"{exc}. The matrix could not be factorised even after adding jitter; "
            "increase the ridge penalty or check the data for duplicated rows."
        ) from None
    except _core.ShapeError as exc:  # shapes that do not fit together: a problem of the data
        raise DataError(str(exc)) from None
    except ValueError as exc:  # names, bandwidths, penalties, thread counts
        raise ParameterError(str(exc)) from None


def n_features(feature: str, dy: int, q: int) -> int:
    """Number of columns q' of :func:`atom_features`: q, or 1 + 2 dy for "moments"."""
    return 1 + 2 * dy if feature == "moments" else q


def _feature(feature, kernel, dy: int):
    if feature not in FEATURES:
        raise ParameterError(
            f"feature={feature!r} is not known; allowed features are " + ", ".join(map(repr, FEATURES))
        )
    if feature != "moments":
        _kernel(kernel, "kernel", DENSITY_KERNELS)
        if feature == "cdf" and kernel == "laplace" and dy != 1:
            raise ParameterError(
                f"the laplace cdf is only available for 1-dimensional outcomes (dy = {dy}); use 'gaussian'"
            )


# ---------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------
def gram(A, B, kernel: str, bandwidth, normalized: bool = False, n_threads: int = 0) -> np.ndarray:
    """Gram matrix ``K[i, j] = k(A_i, B_j)``.

    Parameters
    ----------
    A : array_like, shape (nA, d) or (nA,)
    B : array_like, shape (nB, d) or (nB,)
    kernel : {"gaussian", "laplace", "matern32", "matern52"}
    bandwidth : array_like, shape (d,) or scalar
        Per-column bandwidths (> 0; ``inf`` ignores a column).
    normalized : bool
        Use the density kernel (integrates to one; gaussian / laplace, finite bandwidths).
    n_threads : int

    Returns
    -------
    ndarray, shape (nA, nB)
    """
    A = _matrix(A, "A")
    B = _matrix(B, "B")
    _cols(B, A.shape[1], "B", "A")
    _kernel(kernel, "kernel", DENSITY_KERNELS if normalized else KERNELS)
    bw = _bandwidth(bandwidth, A.shape[1], "bandwidth", finite=bool(normalized))
    return _call(_core.gram, A, B, kernel, bw, bool(normalized), _threads(n_threads))


def atom_features(atoms, points, feature: str, kernel: str, bandwidth, n_threads: int = 0) -> np.ndarray:
    """Features of the atoms (sample points of an embedding) at evaluation points.

    Parameters
    ----------
    atoms : array_like, shape (K, dy) or (K,)
    points : array_like, shape (q, dy) or (q,)
        Ignored for ``feature="moments"`` (may have no rows).
    feature : {"density", "cdf", "moments"}
        ``"density"``: ``F[k, j]`` = normalised kernel ``k(points_j, atoms_k)``;
        ``"cdf"``: ``P(atoms_k + sigma * noise <= points_j)`` componentwise (gaussian: product of
        normal cdfs, any dy; laplace: dy = 1 only); ``"moments"``: ``[1, a_k, a_k**2]`` (1 + 2 dy columns).
    kernel : {"gaussian", "laplace"}
    bandwidth : array_like, shape (dy,) or scalar
        Finite, positive (ignored for moments).

    Returns
    -------
    ndarray, shape (K, q')
    """
    atoms = _matrix(atoms, "atoms")
    dy = atoms.shape[1]
    points = _matrix(points, "points") if points is not None else np.zeros((0, dy))
    if feature == "moments":
        if points.shape[0] > 0:
            _cols(points, dy, "points", "atoms")
        bw = np.ones(dy)
        kernel = "gaussian"
    else:
        _cols(points, dy, "points", "atoms")
        bw = None
    _feature(feature, kernel, dy)
    if bw is None:
        bw = _bandwidth(bandwidth, dy, "bandwidth", finite=True)
    return _call(_core.atom_features, atoms, points, feature, kernel, bw, _threads(n_threads))


def cholesky(A, shift: float = 0.0, n_threads: int = 0) -> tuple[np.ndarray, float]:
    """Lower Cholesky factor of ``A + (shift + jitter) I``, with the jitter rule of the module docstring.

    A blocked, tiled, parallel factorisation (tiles of ``_core.CHOL_TILE``); only the lower
    triangle of ``A`` is read.

    Returns
    -------
    L : ndarray, shape (n, n)
        Lower triangular (upper triangle exactly 0).
    jitter : float
        0.0 unless jitter was needed.

    Raises
    ------
    NumericalError
        If even ``jitter = 1e-4 * mean(diag(A) + shift)`` does not make the matrix positive definite.
    """
    A = _matrix(A, "A")
    if A.shape[0] != A.shape[1]:
        raise DataError(f"A must be square, got shape {A.shape}")
    L, jitter = _call(_core.cholesky, A, _scalar(shift, "shift"), _threads(n_threads))
    return L, float(jitter)


def kernel_ridge_factor(X, kernel: str, bandwidth, shift: float, n_threads: int = 0) -> tuple[np.ndarray, float]:
    """Cholesky factor of ``gram(X, X) + (shift + jitter) I`` (kernel ridge regression).

    The Gram matrix is written straight into the factor's buffer.  ``shift`` is the ridge
    term in the paper's convention ``K + n lambda I`` (pass ``n * lambda``).  Jitter rule as in
    the module docstring.

    Returns
    -------
    L : ndarray, shape (n, n)
    jitter : float
    """
    X = _matrix(X, "X")
    _kernel(kernel, "kernel")
    bw = _bandwidth(bandwidth, X.shape[1], "bandwidth")
    L, jitter = _call(
        _core.kernel_ridge_factor, X, kernel, bw, _scalar(shift, "shift"), _threads(n_threads)
    )
    return L, float(jitter)


def cholesky_solve(L, B, n_threads: int = 0) -> np.ndarray:
    """Solve ``L L^T X = B`` for a lower triangular ``L``.

    Parameters
    ----------
    L : array_like, shape (n, n)
    B : array_like, shape (n, q) or (n,)

    Returns
    -------
    ndarray, shape of ``B``
    """
    L = _factor(L, "L")
    B_in = np.asarray(B)
    B2 = _matrix(B, "B")
    _rows(B2, L.shape[0], "B", "L")
    X = _call(_core.cholesky_solve, L, B2, _threads(n_threads))
    return X.reshape(B_in.shape) if B_in.ndim == 1 else X


class RidgeArmCore:
    r"""A fitted ridge CCME of one cross-fitting fold and one arm, set up once in the compiled core.

    Evaluates the paper's density formula, eq. (emp_density) of Section "Inference with Ridge
    Regression Estimator",

    .. math::

        [k_{Y_1}(y)^\top D_a + k_{Y_0}(y)^\top (K_{X_0} + m\lambda_0 I)^{-1} K_{X_0X_1} D_b]
        (K_V + n\lambda_1 I)^{-1} k_V(v),

    generalised to ``result[e, j] = sum_i beta_i(v_e) (a_i F1[i, j] + b_i G[i, j])`` with
    ``beta(v) = (L_V L_V^T)^{-1} k_V(V1, v)``, ``F1 = atom_features(Y1, points, ...)``,
    ``G = K_X0X1^T (L_X0 L_X0^T)^{-1} F0``, ``F0 = atom_features(Y0, points, ...)``,
    ``K_X0X1 = k_X(X0, X1)``.  The ridge shifts are already folded into ``L_V`` and ``L_X0``
    (see :func:`kernel_ridge_factor`).

    The inputs are validated and converted once, here, and the core pre-scales ``V1``, ``X1``
    and ``X0`` by their bandwidths once; each evaluation then only converts its own
    ``V_eval`` and points.  Results are bit-identical to :func:`ridge_contract` and
    :func:`ridge_weights` with the same arguments, for every number of threads.

    The Cholesky factors are *referenced*, not copied (an n × n factor is most of a fit's
    memory, and one ``L_V`` serves both arms of a fold): when ``L_V`` / ``L_X0`` are already
    C-ordered float64 arrays the object reads their buffers, so they must not be modified
    in place afterwards.  The object keeps them alive.  It is immutable and may be used from
    several threads at once (the core releases the GIL).

    Parameters
    ----------
    L_V : ndarray (n, n)
        Cholesky factor of ``K_V + n lambda_1 I`` over the second-stage sample.
    V1 : (n, dv)
    v_kernel, v_bandwidth : kernel on V and its bandwidths (dv,)
    a : (n,)
        Weights of the direct term (``D_a``); all zero skips it.
    b : (n,)
        Weights of the first-stage term (``D_b``); all zero (or ``L_X0`` empty / None) skips
        it, and then ``X1``, ``X0``, ``Y0``, ``x_bandwidth`` are not used and may be None.
    Y1 : (n, dy), optional
        Second-stage outcomes (the atoms of the direct term).  ``Y1`` and ``Y0`` both None
        make a weights-only arm: :meth:`weights` and :meth:`beta` work, :meth:`contract`
        raises ParameterError.
    X1 : (n, dx), optional
    L_X0 : (m, m), optional
        Cholesky factor of ``K_X0 + m lambda_0 I`` over the first-stage sample.
    X0 : (m, dx), optional
    Y0 : (m, dy), optional
    x_kernel, x_bandwidth : kernel on X and its bandwidths (dx,); ``x_kernel`` is checked
        whenever given.

    Attributes
    ----------
    n, m, dv : int
        Second-stage units, first-stage units (rows of ``L_X0``), columns of ``V1``.
    dy : int or None
        Columns of the outcomes (None for a weights-only arm).
    uses_a, uses_b : bool
        Whether the direct and the first-stage terms are present.

    Raises
    ------
    DataError
        Non-finite data, or shapes that do not fit together.
    ParameterError
        Unknown kernels, bad bandwidths.
    """

    __slots__ = ("_arm", "_L_V", "_L_X0", "n", "m", "dv", "dy", "uses_a", "uses_b")

    def __init__(self, *, L_V, V1, v_kernel: str, v_bandwidth, a, b, Y1=None, X1=None, L_X0=None, X0=None,
                 Y0=None, x_kernel: str | None = None, x_bandwidth=None):
        L_V = _factor(L_V, "L_V")
        n = L_V.shape[0]
        V1 = _matrix(V1, "V1")
        _rows(V1, n, "V1", "L_V")
        _kernel(v_kernel, "v_kernel")
        v_bw = _bandwidth(v_bandwidth, V1.shape[1], "v_bandwidth")
        a = _vector(a, "a", n)
        b = _vector(b, "b", n)
        if x_kernel is not None:
            _kernel(x_kernel, "x_kernel")
        L_X0 = _factor(L_X0, "L_X0") if L_X0 is not None else np.zeros((0, 0))
        m = L_X0.shape[0]
        use_a = bool(np.any(a != 0))
        use_b = m > 0 and bool(np.any(b != 0))
        if use_b:
            if X1 is None or X0 is None or x_kernel is None or x_bandwidth is None:
                raise DataError("X1, X0, x_kernel and x_bandwidth are required when b is not all zero and L_X0 has rows")
            X0 = _matrix(X0, "X0")
            X1 = _matrix(X1, "X1")
            _rows(X0, m, "X0", "L_X0")
            _rows(X1, n, "X1", "L_V")
            _cols(X1, X0.shape[1], "X1", "X0")
            x_bw = _bandwidth(x_bandwidth, X0.shape[1], "x_bandwidth")
        else:  # first stage skipped: the arrays are not used
            X0 = np.zeros((0, 0))
            X1 = np.zeros((0, 0))
            x_bw = np.zeros(0)
            x_kernel = x_kernel or "gaussian"
        if Y1 is None and Y0 is None:  # weights only: no atoms, dy unknown
            dy = None
            Y1 = np.zeros((n if use_a else 0, 0))
            Y0 = np.zeros((m if use_b else 0, 0))
        else:
            Y1 = _matrix(Y1, "Y1") if Y1 is not None else None
            if use_a:
                if Y1 is None:
                    raise DataError("Y1 is required when a is not all zero")
                _rows(Y1, n, "Y1", "L_V")
                dy = Y1.shape[1]
            elif use_b:
                if Y0 is None:
                    raise DataError("Y0 is required when b is not all zero and L_X0 has rows")
                dy = _matrix(Y0, "Y0").shape[1]
            else:
                dy = Y1.shape[1] if Y1 is not None else _matrix(Y0, "Y0").shape[1]
            if use_b:
                Y0 = _matrix(Y0, "Y0")
                _rows(Y0, m, "Y0", "L_X0")
                _cols(Y0, dy, "Y0", "Y1")
            else:
                Y0 = np.zeros((0, dy))
            if not use_a:
                Y1 = np.zeros((0, dy))
        # The core reads L_V and L_X0 in place (noconvert); holding them here documents that
        # (the binding's keep_alive holds them too).
        self._L_V, self._L_X0 = L_V, L_X0
        self._arm = _call(
            _core.RidgeArm, L_V=L_V, V1=V1, v_kernel=v_kernel, v_bandwidth=v_bw, a=a, Y1=Y1, b=b, X1=X1,
            L_X0=L_X0, X0=X0, Y0=Y0, x_kernel=x_kernel, x_bandwidth=x_bw,
        )
        self.n, self.m, self.dv, self.dy = n, m, V1.shape[1], dy
        self.uses_a, self.uses_b = use_a, use_b

    def __repr__(self) -> str:
        terms = [t for t, used in (("direct", self.uses_a), ("first stage", self.uses_b)) if used]
        return (f"<ccme._backend.RidgeArmCore: n={self.n}, m={self.m}, dv={self.dv}, dy={self.dy}, "
                f"terms: {', '.join(terms) or 'none'}>")

    def _v_eval(self, V_eval, ctx: str) -> np.ndarray:
        V_eval = _matrix(V_eval, "V_eval")
        if V_eval.shape[1] != self.dv:
            raise DataError(f"{ctx}: V_eval has {V_eval.shape[1]} columns but V1 has {self.dv}")
        return V_eval

    def contract(self, V_eval, points, feature: str, y_kernel: str, y_bandwidth, out=None, scale: float = 1.0,
                 n_threads: int = 0, order: str = "auto") -> np.ndarray:
        """``out += scale * result`` at the evaluation points ``V_eval`` and outcome ``points``.

        The core works block by block (at most 64 MiB per block) in the cheaper association
        order: "y" (solve per block of points, then contract with ``k_V``) or "v" (weights per
        block of ``V_eval``, then contract with the features).

        Parameters
        ----------
        V_eval : (ne, dv)
        points : (q, dy)
            Outcome points (ignored for "moments"; may be None there).
        feature : {"density", "cdf", "moments"}
        y_kernel, y_bandwidth : outcome kernel ("gaussian" or "laplace") and bandwidths (dy,)
        out : ndarray (ne, q'), optional
            Accumulated into in place (through a temporary when it is not a writeable,
            C-ordered float64 array); allocated (zeros) when None.
        scale : float
        n_threads : int
        order : {"auto", "y", "v"}
            Association order; "auto" chooses by a flop-count estimate.

        Returns
        -------
        out : ndarray (ne, q')
            ``q' = len(points)``, or ``1 + 2 dy`` for "moments".
        """
        if self.dy is None:
            raise ParameterError("this RidgeArmCore was made without outcomes (Y1, Y0): contract needs them")
        return self._contract("contract", V_eval, points, feature, y_kernel, y_bandwidth, out, scale, n_threads,
                              order)

    def _contract(self, ctx, V_eval, points, feature, y_kernel, y_bandwidth, out, scale, n_threads, order):
        V_eval = self._v_eval(V_eval, ctx)
        dy = self.dy
        if feature == "moments":
            points = np.zeros((0, dy)) if points is None else _matrix(points, "points")
            if points.shape[0] == 0:
                points = np.zeros((0, dy))
            else:
                _cols(points, dy, "points", "Y1")
            y_bw = np.ones(dy)
            y_kernel = "gaussian"
        else:
            points = _matrix(points, "points")
            _cols(points, dy, "points", "Y1")
        _feature(feature, y_kernel, dy)
        if feature != "moments":
            y_bw = _bandwidth(y_bandwidth, dy, "y_bandwidth", finite=True)
        if order not in ("auto", "y", "v"):
            raise ParameterError(f"order must be 'auto', 'y' or 'v', got {order!r}")
        shape = (V_eval.shape[0], n_features(feature, dy, points.shape[0]))
        scale = _scalar(scale, "scale")
        if out is None:
            target = np.zeros(shape)
        else:
            if not isinstance(out, np.ndarray) or out.shape != shape:
                raise DataError(
                    f"out must be an ndarray of shape {shape} (len(V_eval), n_features), "
                    f"got {getattr(out, 'shape', type(out).__name__)}"
                )
            direct = out.dtype == np.float64 and out.flags.c_contiguous and out.flags.writeable
            target = out if direct else np.zeros(shape)
        _call(
            self._arm.contract, V_eval=V_eval, points=points, feature=feature, y_kernel=y_kernel,
            y_bandwidth=y_bw, out=target, scale=scale, n_threads=_threads(n_threads), order=order,
        )
        if out is not None and target is not out:
            out += target
            return out
        return target

    def weights(self, V_eval, n_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
        r"""Embedding weights on the atoms ``Y1`` and ``Y0`` at the evaluation points.

        ``c1 = a o beta`` and ``c0 = (L_X0 L_X0^T)^{-1} K_X0X1 (b o beta)`` with
        ``beta = (L_V L_V^T)^{-1} k_V(V1, V_eval)``: the estimated embedding at ``v_e`` is
        ``sum_i c1[i, e] k(Y1_i, .) + sum_l c0[l, e] k(Y0_l, .)`` (eq. emp_density of the paper,
        before applying the outcome features).  Meant for a small number of evaluation points
        (the outputs are (n + m) x ne).

        Returns
        -------
        c1 : ndarray (n, ne)
            Zero when ``a`` is all zero.
        c0 : ndarray (m, ne)
            Zero when the first stage is skipped.
        """
        V_eval = self._v_eval(V_eval, "weights")
        c1, c0 = _call(self._arm.weights, V_eval=V_eval, n_threads=_threads(n_threads))
        return c1, c0

    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        r"""The second stage's smoother ``beta = (K_V + n lambda_1 I)^{-1} k_V(V1, V_eval)``, shape (n, ne).

        Independent of ``a`` and ``b``; equal bit for bit to :meth:`weights`' ``c1`` of the same
        arm with ``a = 1`` and no first stage (what the multiplier bootstrap needs).
        """
        V_eval = self._v_eval(V_eval, "beta")
        return _call(self._arm.beta, V_eval=V_eval, n_threads=_threads(n_threads))


def ridge_contract(
    L_V, V1, v_kernel: str, v_bandwidth, a, Y1, b, X1, L_X0, X0, Y0, x_kernel: str, x_bandwidth,
    V_eval, points, feature: str, y_kernel: str, y_bandwidth,
    out=None, scale: float = 1.0, n_threads: int = 0, order: str = "auto",
) -> np.ndarray:
    """Evaluate a fitted ridge CCME (one fold, one arm) in one call: ``out += scale * result``.

    Equivalent to ``RidgeArmCore(L_V=L_V, ..., x_bandwidth=x_bandwidth).contract(V_eval, points,
    feature, y_kernel, y_bandwidth, out, scale, n_threads, order)`` (bit for bit), which it
    does; a caller that evaluates one fold-arm repeatedly should keep a :class:`RidgeArmCore`
    instead, which validates and pre-scales the fold's data once.  Arguments and formula as in
    :class:`RidgeArmCore`; ``Y1`` may be None when ``a`` is all zero.

    Returns
    -------
    out : ndarray (ne, q')
    """
    _check_v_eval("ridge_contract", V1, V_eval)
    if Y1 is None and not np.any(np.asarray(a) != 0):
        # dy then comes from Y0 (when the first stage is used) or from the points.
        dy = _matrix(points, "points").shape[1] if points is not None else 1
        Y1 = np.zeros((0, dy))
    arm = RidgeArmCore(L_V=L_V, V1=V1, v_kernel=v_kernel, v_bandwidth=v_bandwidth, a=a, Y1=Y1, b=b, X1=X1,
                       L_X0=L_X0, X0=X0, Y0=Y0, x_kernel=x_kernel, x_bandwidth=x_bandwidth)
    if arm.dy is None:  # Y1 and Y0 both None with a != 0
        raise DataError("Y1 is required when a is not all zero")
    return arm._contract("ridge_contract", V_eval, points, feature, y_kernel, y_bandwidth, out, scale, n_threads,
                         order)


def ridge_weights(
    L_V, V1, v_kernel: str, v_bandwidth, a, b, X1, L_X0, X0, x_kernel: str, x_bandwidth, V_eval,
    n_threads: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Embedding weights of a fitted ridge CCME on its atoms ``Y1`` and ``Y0``, in one call.

    Equivalent to ``RidgeArmCore(...).weights(V_eval, n_threads)`` (bit for bit), which it does;
    see :meth:`RidgeArmCore.weights`.

    Returns
    -------
    c1 : ndarray (n, ne)
    c0 : ndarray (m, ne)
        ``m = len(L_X0)``.
    """
    _check_v_eval("ridge_weights", V1, V_eval)
    arm = RidgeArmCore(L_V=L_V, V1=V1, v_kernel=v_kernel, v_bandwidth=v_bandwidth, a=a, b=b, X1=X1, L_X0=L_X0,
                       X0=X0, x_kernel=x_kernel, x_bandwidth=x_bandwidth)
    return arm.weights(V_eval, n_threads)


def _check_v_eval(ctx: str, V1, V_eval) -> None:
    """The one-call functions name themselves in a V_eval mismatch, as they always have."""
    d1, de = _matrix(V1, "V1").shape[1], _matrix(V_eval, "V_eval").shape[1]
    if de != d1:
        raise DataError(f"{ctx}: V_eval has {de} columns but V1 has {d1}")


def pivoted_cholesky(X, kernel: str, bandwidth, tol: float, max_rank: int, n_threads: int = 0):
    """Pivoted (incomplete) Cholesky factorisation k(X, X) ≈ L Lᵀ.

    Block-greedy: panels of candidates with the largest residual diagonals
    (the smaller index first among ties), accepted in turn while their residual
    exceeds ``tol``; stops when the largest residual diagonal is at most
    ``tol`` (raised to n·machine epsilon, the round-off level) or after
    ``max_rank`` columns.  Run to that floor it is exact up to round-off.

    Returns
    -------
    L : ndarray (n, r)
    pivots : ndarray (r,) of int
    residual : float
        The largest residual diagonal left (a bound on the error of every entry).
    """
    X = _matrix(X, "X")
    kernel = _kernel(kernel, "kernel")
    bw = _bandwidth(bandwidth, X.shape[1], "bandwidth")
    tol = _scalar(tol, "tol")
    if tol < 0:
        raise ParameterError(f"tol must be >= 0, got {tol}")
    if isinstance(max_rank, bool) or not isinstance(max_rank, numbers.Integral) or max_rank < 1:
        raise ParameterError(f"max_rank must be a positive integer, got {max_rank!r}")
    L, pivots, residual = _call(
        _core.pivoted_cholesky, X=X, kernel=kernel, bandwidth=bw, tol=tol, max_rank=int(max_rank),
        n_threads=_threads(n_threads),
    )
    return L, np.asarray(pivots, dtype=np.int64), float(residual)


def krr_loo_path(Q, s2, Z, lambdas, n_threads: int = 0):
    r"""Leave-one-out and GCV criteria of kernel ridge regression along a path of penalties.

    Ridge regression of the rows of ``Z`` (feature coordinates of RKHS-valued
    targets: ``Z Zᵀ`` is their Gram matrix) on inputs whose kernel matrix is
    ``K ≈ Q diag(s2) Qᵀ`` (``Q`` with orthonormal columns, e.g. the thin SVD of
    a pivoted Cholesky factor), hat matrix ``H = K (K + nλI)⁻¹`` (the paper's
    convention).  With ``r = (I − H) Z``:

    ``loo(λ) = 1/n Σ_i ‖r_i‖² / (1 − H_ii)²``  (exact leave-one-out for a linear smoother),
    ``gcv(λ) = 1/n Σ_i ‖r_i‖² / (1 − tr(H)/n)²``, ``dof(λ) = tr(H)``.

    Each penalty costs O(n k q).
    """
    Q = _matrix(Q, "Q")
    s2 = _vector(s2, "s2", Q.shape[1]) if Q.shape[1] else np.zeros(0)
    Z = _matrix(Z, "Z")
    _rows(Z, Q.shape[0], "Z", "Q")
    lambdas = _vector(lambdas, "lambdas")
    if (lambdas <= 0).any():
        raise ParameterError(f"lambdas must be positive, got {lambdas.tolist()}")
    loo, gcv, dof = _call(_core.krr_loo_path, Q=Q, s2=s2, Z=Z, lambdas=lambdas, n_threads=_threads(n_threads))
    return np.asarray(loo), np.asarray(gcv), np.asarray(dof)


def kernel_quadratic_forms(Z, W, kernel: str, bandwidth, normalized: bool = True, n_threads: int = 0) -> np.ndarray:
    r"""Quadratic forms ``q[e] = W[:, e]ᵀ k(Z, Z) W[:, e]`` without forming ``k(Z, Z)``.

    With ``Z`` the atoms of two embeddings stacked and ``W = [c₁; −c₀]`` this is the
    squared RKHS distance ‖μ̂₁(v_e) − μ̂₀(v_e)‖² = c₁ᵀK₁₁c₁ − 2c₁ᵀK₁₀c₀ + c₀ᵀK₀₀c₀, the
    squared maximum mean discrepancy between the two embeddings.  The core computes
    the Gram matrix tile by tile (tiles of 256 atoms, pairs of tiles of its lower
    triangle), so memory stays O(N + ne) whatever N; results are bit-identical for
    every thread count.

    Parameters
    ----------
    Z : array_like, shape (N, d) or (N,)
        Atoms.
    W : array_like, shape (N, ne) or (N,)
        Signed weights, one column per quadratic form.
    kernel : {"gaussian", "laplace", "matern32", "matern52"}
        (gaussian / laplace when ``normalized``).
    bandwidth : array_like, shape (d,) or scalar
    normalized : bool, default True
        Use the normalised (density) kernel, the RKHS in which ccme's outcome
        embeddings live.

    Returns
    -------
    ndarray, shape (ne,)
        May be slightly negative (rounding) when the two embeddings nearly coincide.
    """
    Z = _matrix(Z, "Z")
    W = _matrix(W, "W")
    _rows(W, Z.shape[0], "W", "Z")
    _kernel(kernel, "kernel", DENSITY_KERNELS if normalized else KERNELS)
    bw = _bandwidth(bandwidth, Z.shape[1], "bandwidth", finite=bool(normalized))
    q = _call(_core.kernel_quadratic_forms, Z, W, kernel, bw, bool(normalized), _threads(n_threads))
    return np.asarray(q)


def serial_blas(function):
    """Run ``function`` with one BLAS thread (numpy's and scipy's OpenBLAS), for paths whose parallel work is ours.

    Two reasons.  OpenBLAS splits long reductions (ΦᵀΦ, ΦᵀF) across its
    threads, so its results depend on the thread count in the last bits; with
    one BLAS thread a path gives the same bits for every ``n_threads`` and
    ``OMP_NUM_THREADS`` (the kernels, computed by the compiled core, are
    already thread-invariant).  And OpenBLAS's threads keep spinning for a
    while after each call, taking the cores from the compiled core's OpenMP
    team that runs next: the bootstrap's many short triangular solves ran
    twice as slow after numpy products.  Nested calls keep the outer limit.
    """
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return function(*args, **kwargs)

    return wrapped
