"""Running the low-rank ridge path on a Dask cluster: ``ccme.fit(..., client=client)``.

The low-rank ridge CCME (:mod:`ccme.estimators.lowrank`) keeps n × r arrays
(the Nyström features Φ of the second stage, the first stage's loadings Ψ₀M)
and everything else it needs is r × r or r × q.  This module runs the same
stages with the rows split into P contiguous partitions, each held by a
``dask.distributed`` worker, so that only small matrices travel to the client:

1. on the client, as for a local fit: the design, the folds, the propensity
   scores and the tuning (which subsample at large n), and the landmarks: the
   pivoted Cholesky factorisation of the same seeded pool
   (:meth:`ccme.estimators.lowrank.NystromFeatures.select`), so the pool rows
   and pivots are the local fit's;
2. the design arrays of each partition (V, the outcome model's covariates,
   Y) are scattered once (``client.scatter``);
3. when a stage has more rows than ``landmark_pool``, the extension rounds of
   the landmark selection rank the rows' residual diagonals 1 − ‖φ(x)‖² on
   the workers: each partition returns its
   :data:`ccme.estimators.lowrank._EXTEND` worst-covered rows, and the client
   merges them with the local code's stable ordering (largest residual first,
   the smaller row first among ties), so the candidates and hence the
   landmarks are the local fit's; then each worker forms its partition's
   features Φ_p = φ(X_p).  When the pool is every row, its factor's rows
   are Φ itself, already computed on the client: they are sent to the
   partitions' workers (at most ``landmark_pool`` × r float32 numbers),
   which costs less than forming them again there;
4. per fold and arm the workers hold Φ_p (float32, as
   :data:`ccme.estimators.lowrank.STORAGE`) and compute, on their
   partition's rows of the fold's parts D1 and D0, Φ_pᵀΦ_p, Ψ₀ₚᵀΨ₀ₚ and
   Ψ₁ₚᵀ diag(b) Φ_p; the client sums them in partition order (the results do
   not depend on the scheduling) and solves the r × r systems; the workers
   form the loadings Ψ₀M.

The fitted :class:`DistributedLowRankFoldArm` implements the fold-arm
protocol (:class:`ccme.estimators.base.FoldArm`) and the linear second stage
of the bootstrap (:class:`ccme.estimators.base.LinearSecondStage`) by mapping
over the partitions: :meth:`~DistributedLowRankFoldArm.contract` (densities,
CDFs, moments) returns an r × q projection per partition, and the methods
whose results have one row per unit (``weights``, ``beta``, the bootstrap's
unit features) gather O(n) numbers.  The result equals the local fit
``ccme.fit(..., approx="lowrank")`` with the same seed up to the order of the
partition sums: the landmarks and the stored float32 arrays are the local
fit's bit for bit, only the r × r sums differ in the last bits (measured:
relative differences of the densities below 1e-14; tested to 1e-8).  Its
arrays live on the cluster while the client is open; ``res.save`` gathers
them (:meth:`DistributedLowRankFoldArm.to_state`), and a loaded fit is an
ordinary local :class:`ccme.estimators.lowrank.LowRankFoldArm`.

``dask.distributed`` is an optional dependency (``pip install "ccme[dask]"``),
imported only when a client is given.
"""

from __future__ import annotations

import functools
import numbers
import operator
import weakref
from dataclasses import dataclass, replace

import numpy as np
from scipy.linalg import cho_solve, cholesky
from threadpoolctl import ThreadpoolController

from . import _backend
from .errors import NotFittedError, ParameterError
from .estimators.base import (FirstStageInfluence, FoldArm, LinearSecondStage, Parameters, PseudoOutcomeFold,
                              project_atoms)
from .estimators.forest_first_stage import first_stage_choices
from .estimators.lowrank import NystromArm, _ROUNDS, _ROWS, STORAGE, LowRankFoldArm, NystromFeatures, _blocks, _times, worst_covered
from .estimators.ridge import RidgeEstimator
from .memory import check_allocation

__all__ = ["SUPPORTED_METHODS", "cluster_estimator", "DistributedRidgeEstimator",
           "DistributedLowRankFold", "DistributedLowRankFoldArm"]

#: The methods ``fit(client=...)`` runs on a cluster (the low-rank ridge path).
SUPPORTED_METHODS = ("ridge",)
#: Default partitions per worker thread (two, so that a slow partition does not leave a thread idle for long).
PARTITIONS_PER_THREAD = 2
_INSTALL = 'pip install "ccme[dask]"'


# ---------------------------------------------------------------------------
# validation (called by ccme.fit before any work)
# ---------------------------------------------------------------------------
def cluster_estimator(estimator, *, client, partitions):
    """The estimator that runs ``estimator``'s fit on the cluster of ``client`` (``fit(client=, partitions=)``).

    Parameters
    ----------
    estimator : ccme.estimators.base.Estimator
        The estimator of ``method=``; only :data:`SUPPORTED_METHODS` run on a cluster.
    client : dask.distributed.Client
    partitions : int or None
        Row partitions (None: :data:`PARTITIONS_PER_THREAD` per worker thread).

    Returns
    -------
    DistributedRidgeEstimator

    Raises
    ------
    ParameterError
        No client with ``partitions``, a client that is not a running
        ``dask.distributed.Client``, a method without a distributed form, or
        a partition count that is not a positive integer.
    """
    if client is None:
        raise ParameterError(f"`partitions` needs `client=` (a dask.distributed.Client); got partitions={partitions!r}")
    try:
        from distributed import Client
    except ImportError as exc:
        raise ParameterError(f"`client=` needs dask.distributed: {_INSTALL}") from exc
    if not isinstance(client, Client):
        raise ParameterError(f"`client` must be a dask.distributed.Client; got {type(client).__name__}")
    if client.status != "running":
        raise ParameterError(f"the Dask client is not running (status {client.status!r}); connect it first")
    if estimator.name not in SUPPORTED_METHODS:
        raise ParameterError(
            f"`client=` runs the low-rank ridge path on a Dask cluster; method={estimator.name!r} has no distributed "
            f"form (methods that support a client: {list(SUPPORTED_METHODS)})"
        )
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, numbers.Integral)
                                   or partitions < 1):
        raise ParameterError(f"`partitions` must be a positive integer or None; got {partitions!r}")
    return DistributedRidgeEstimator(client, None if partitions is None else int(partitions))


def local_frame(data, formula, *, weights=None, client=None):
    """``data`` as a pandas DataFrame: a dask DataFrame's columns that the fit reads, computed.

    ``fit`` builds its design, folds, propensity and tuning on the client (the
    tuning and the landmark pool are subsampled, so they are bounded), so a
    dask DataFrame contributes the columns the formula names (``.``
    expanded against its columns) and a weights column, computed once, in
    partition order, through ``client`` when given (else dask's default
    scheduler).  The n × r work of the low-rank path then runs on the
    workers as for a pandas DataFrame.  Anything else is returned as it is.

    Parameters
    ----------
    data : object
        ``fit``'s data.
    formula : str
    weights : str, array or None
        ``fit``'s weights (a column name is gathered too).
    client : dask.distributed.Client or None

    Returns
    -------
    pandas.DataFrame or ``data``

    Raises
    ------
    ParameterError
        For a Dask collection that is not a DataFrame (an array, a bag).
    """
    if type(data).__module__.split(".")[0] not in ("dask", "dask_expr"):
        return data
    if not (hasattr(data, "columns") and hasattr(data, "npartitions")):
        raise ParameterError(f"`data` is a Dask collection ({type(data).__name__}) but not a dask DataFrame; pass a "
                             "dask or pandas DataFrame")
    from .formula import parse_formula

    needed = {str(v) for v in parse_formula(formula, data.columns)._parsed.required_variables}
    if isinstance(weights, str):
        needed.add(weights)
    selected = data[[c for c in data.columns if str(c) in needed]]
    return client.compute(selected).result() if client is not None else selected.compute()


# ---------------------------------------------------------------------------
# the row partitions
# ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Layout:
    """Rows cut into contiguous partitions [bounds[p], bounds[p+1]) and each partition's scattered design arrays.

    ``design`` and ``Xo`` are kept so that the layout is recognised (and the
    arrays are not collected while their futures are in use).
    """

    client: object
    bounds: np.ndarray
    futures: list
    workers: list
    design: object
    Xo: np.ndarray

    @property
    def n_partitions(self) -> int:
        return len(self.futures)

    def place(self, arrays: list, partitions: list) -> list:
        """Futures of ``arrays``, each scattered to the worker that holds its partition (one scatter per worker)."""
        out = [None] * len(arrays)
        for worker in dict.fromkeys(self.workers[p] for p in partitions):
            mine = [i for i, p in enumerate(partitions) if self.workers[p] == worker]
            sent = self.client.scatter([arrays[i] for i in mine], workers=None if worker is None else [worker],
                                       hash=False)
            for i, future in zip(mine, sent):
                out[i] = future
        return out

    def segments(self, rows: np.ndarray) -> list:
        """[(p, local rows, start)]: the rows of ``rows`` in partition p, and where they start in ``rows``.

        ``rows`` must be increasing (the folds' parts are), so that the
        partitions' segments, concatenated in partition order, are ``rows``
        in its own order: the order of the local fit's arrays.
        """
        rows = np.asarray(rows)
        if rows.size and np.any(np.diff(rows) <= 0):
            raise ValueError("the rows of a distributed stage must be increasing")
        cuts = np.searchsorted(rows, self.bounds)
        return [(p, rows[cuts[p]:cuts[p + 1]] - self.bounds[p], int(cuts[p]))
                for p in range(self.n_partitions) if cuts[p + 1] > cuts[p]]


def _make_layout(client, partitions, design, Xo) -> _Layout:
    n = design.n
    if partitions is None:
        threads = sum(client.nthreads().values())
        if threads == 0:
            raise ParameterError("the Dask cluster has no workers yet: call client.wait_for_workers(n) first, or "
                                 "give partitions=")
        partitions = min(n, PARTITIONS_PER_THREAD * threads)
    if partitions > n:
        raise ParameterError(f"`partitions` ({partitions}) is more than the number of units ({n})")
    sizes = [len(c) for c in np.array_split(np.arange(n), partitions)]
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
    pieces = [{"V": np.ascontiguousarray(design.V[lo:hi]), "Xo": np.ascontiguousarray(Xo[lo:hi]),
               "Y": np.ascontiguousarray(design.Y[lo:hi])} for lo, hi in zip(bounds[:-1], bounds[1:])]
    # One scatter: the scheduler spreads the partitions over the workers round-robin.
    futures = client.scatter(pieces, hash=False)
    holders = client.who_has(futures)
    workers = [next(iter(holders.get(f.key, ())), None) for f in futures]
    return _Layout(client=client, bounds=bounds, futures=list(futures), workers=workers, design=design, Xo=Xo)


# ---------------------------------------------------------------------------
# the estimator
# ---------------------------------------------------------------------------
class DistributedRidgeEstimator(RidgeEstimator):
    """``method="ridge"`` on a Dask cluster: the low-rank path with its n × r stages on the workers.

    Everything but :meth:`fit_fold` is :class:`ccme.estimators.ridge.RidgeEstimator`'s
    (the parameters, the tuning on the client, the summary); ``approx`` is
    forced to "lowrank" and the first stage must be the kernel ridge.

    Parameters
    ----------
    client : dask.distributed.Client
    partitions : int or None
        Row partitions; None: :data:`PARTITIONS_PER_THREAD` per worker thread.
    """

    def __init__(self, client, partitions=None):
        self.client = client
        self.partitions = partitions
        self._layout = None

    def options(self, hyperparameters: dict) -> dict:
        """The ridge options with ``approx="lowrank"`` (refusing "exact" and a forest first stage)."""
        options = super().options(hyperparameters)
        if options["approx"] not in ("auto", "lowrank"):
            raise ParameterError("`client=` runs the low-rank path (approx='lowrank'); "
                                 f"got approx={options['approx']!r}")
        if any(choice != "kernel" for choice in first_stage_choices(options["first_stage"])):
            raise ParameterError("`client=` needs first_stage='kernel' (the forest first stage has no distributed "
                                 f"low-rank form); got first_stage={options['first_stage']!r}")
        return {**options, "approx": "lowrank"}

    def prepare(self, options: dict, *, design, Xo, seed: int) -> Parameters:
        """The ridge parameters; the design's partitions are scattered to the workers now, once."""
        params = super().prepare(options, design=design, Xo=Xo, seed=seed)
        self._layout = _make_layout(self.client, self.partitions, design, Xo)
        return params

    def fit_fold(self, params: Parameters, *, data, fold, seed: int, prebuilt=None):
        """A :class:`DistributedLowRankFold` on the partitions scattered by :meth:`prepare`."""
        layout = self._layout
        if layout is None or layout.design is not data.design or layout.Xo is not data.Xo:
            layout = self._layout = _make_layout(self.client, self.partitions, data.design, data.Xo)
        return DistributedLowRankFold(layout, params, data, fold, seed=seed)

    def describe(self, params: Parameters, *, design, outcome_columns, embeddings) -> list:
        sections = super().describe(params, design=design, outcome_columns=outcome_columns, embeddings=embeddings)
        if self._layout is not None:
            workers = self.client.nthreads()
            sections.append(("Cluster", [("Dask", f"{self._layout.n_partitions} row partitions on {len(workers)} "
                                                  f"workers ({sum(workers.values())} threads)")]))
        return sections


# ---------------------------------------------------------------------------
# what the workers run (module functions: sent by reference, not pickled by value)
# ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    """This process's thread-pool controller (made once: finding the loaded libraries takes milliseconds)."""
    return ThreadpoolController()


def _one_blas_thread():
    """A context with one BLAS thread: the same bits as the local path (see :func:`ccme._backend.serial_blas`)."""
    return _controller().limit(limits=1, user_api="blas")


def _on_worker(fn):
    """Run a worker task with one BLAS thread (:func:`_one_blas_thread`)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with _one_blas_thread():
            return fn(*args, **kwargs)

    return wrapped


@_on_worker
def _w_candidates(part, column, local, features, start, rank_tol):
    """This partition's worst-covered rows: (positions in the stage's rows, increasing; residual diagonals)."""
    Phi = features(part[column][local])
    left = 1.0 - np.einsum("ij,ij->i", Phi, Phi)
    worst = np.sort(worst_covered(left, rank_tol))
    return start + worst, left[worst]


@_on_worker
def _w_features(part, column, local, features):
    """(φ(X_p) stored as float32, the largest residual diagonal 1 − ‖φ(x)‖² in float64)."""
    X = part[column][local]
    check_allocation(8.0 * len(X) * features.rank,
                     f"the Nyström features of a partition ({len(X)} × {features.rank})")
    Phi = features(X)
    return Phi.astype(STORAGE), float(np.max(1.0 - np.einsum("ij,ij->i", Phi, Phi), initial=0.0))


@_on_worker
def _w_gram(F):
    """(FᵀF, Σ‖f_i‖²) of a stored partition, accumulated in float64 blocks as the local ``_gram_chol``."""
    G = np.zeros((F.shape[1], F.shape[1]))
    total = 0.0
    for _, B in _blocks(F):
        G += B.T @ B
        total += float(np.einsum("ij,ij->", B, B))
    return G, total


@_on_worker
def _w_cross(part, local1, Phi, b, x_map):
    """Ψ₁ₚᵀ diag(b) Φ_p, a block of units at a time (Ψ₁ = ψ(X1) never held whole)."""
    X1 = part["Xo"][local1]
    out = np.zeros((x_map.rank, Phi.shape[1]))
    for s, B in _blocks(Phi):
        out += x_map(X1[s:s + len(B)]).T @ (b[s:s + len(B), None] * B)
    return out


@_on_worker
def _w_loadings(Psi, M):
    """Ψ₀ₚM, stored."""
    out = np.empty((len(Psi), M.shape[1]), dtype=STORAGE)
    for s, B in _blocks(Psi):
        out[s:s + len(B)] = B @ M
    return out


def _w_arm_part(part, local1, local0, Phi, loadings0, a, b, rank, first_stage):
    """One partition's share of a fold-arm: its rows' features, loadings, data and pseudo-outcome coefficients."""
    dx = part["Xo"].shape[1]
    empty = np.zeros((0, rank), dtype=STORAGE)
    return {
        "Phi": empty if Phi is None else Phi, "loadings0": empty if loadings0 is None else loadings0,
        "Y1": part["Y"][local1], "Y0": part["Y"][local0], "a": a, "b": b,
        "X1": part["Xo"][local1] if first_stage else np.zeros((0, dx)),
        "X0": part["Xo"][local0] if first_stage else np.zeros((0, dx)),
    }


@_on_worker
def _w_weights(ap, h):
    """(a ∘ Φ_p h, Ψ₀ₚM h): the partition's atoms' weights."""
    return ap["a"][:, None] * _times(ap["Phi"], h), _times(ap["loadings0"], h)


@_on_worker
def _w_beta(ap, h):
    return _times(ap["Phi"], h)


@_on_worker
def _w_project(ap, points, feature, y_kernel, q):
    """Σ_k L_k F(y_k, ·) over the partition's atoms (Y1 then Y0), as LowRankFoldArm._project does."""
    Phi, loadings0, a, n1 = ap["Phi"], ap["loadings0"], ap["a"], len(ap["Y1"])

    def project(F, start, stop):
        split = min(max(n1 - start, 0), stop - start)  # F's rows before `split` are Y1 atoms, the rest Y0 atoms
        out = np.zeros((Phi.shape[1], F.shape[1]))
        if split > 0:
            s1 = slice(start, start + split)
            out += Phi[s1].astype(np.float64).T @ (a[s1, None] * F[:split])
        if split < stop - start:
            out += loadings0[start + split - n1:stop - n1].astype(np.float64).T @ F[split:]
        return out

    return project_atoms(np.vstack([ap["Y1"], ap["Y0"]]), project, Phi.shape[1], points, feature, y_kernel, q)


def _psi0(ap, x_map):
    """Ψ₀ₚ recomputed from X0 with the fit's float32 rounding (as LowRankFoldArm._first_stage_smooth)."""
    return x_map(ap["X0"]).astype(STORAGE).astype(np.float64)


def _features_of(atoms, points, feature, kernel):
    return _backend.atom_features(atoms, points, feature, kernel.name, kernel.bandwidth_array)


@_on_worker
def _w_first_moment(ap, x_map, points, feature, kernel):
    """Ψ₀ₚᵀ F(Y0_p): the partition's share of the first stage's right-hand side."""
    return _psi0(ap, x_map).T @ _features_of(ap["Y0"], points, feature, kernel)


@_on_worker
def _w_unit_features(ap, x_map, smoothed, points, feature, kernel):
    """P_i = a_i F(Y1_i) + b_i ψ(X1_i)ᵀ G₀⁻¹Ψ₀ᵀF(Y0) for the partition's units."""
    out = ap["a"][:, None] * _features_of(ap["Y1"], points, feature, kernel)
    if smoothed is not None:
        out = out + ap["b"][:, None] * (x_map(ap["X1"]) @ smoothed)
    return out


@_on_worker
def _w_residual_cross(ap, P):
    return ap["Phi"].astype(np.float64).T @ P


@_on_worker
def _w_residual_apply(ap, P, solved):
    return P - ap["Phi"].astype(np.float64) @ solved


@_on_worker
def _w_pull(ap, beta, x_map):
    """Ψ₁ₚᵀ (b ∘ β_p) for the partition's rows β_p of β."""
    return x_map(ap["X1"]).T @ (ap["b"][:, None] * beta)


@_on_worker
def _w_influence(ap, x_map, solved, smoothed, points, feature, kernel):
    """(Ψ₀ₚ G₀⁻¹Ψ₁ᵀ(b ∘ β), F(Y0_p) − Ψ₀ₚ G₀⁻¹Ψ₀ᵀF(Y0)) for the partition's atoms."""
    Psi0 = _psi0(ap, x_map)
    return Psi0 @ solved, _features_of(ap["Y0"], points, feature, kernel) - Psi0 @ smoothed


def _w_export(ap):
    return ap


# ---------------------------------------------------------------------------
# the client side
# ---------------------------------------------------------------------------
def _share(client, value):
    """``value`` sent once to every worker (a future tasks can take), instead of once per task."""
    return client.scatter(value, broadcast=True, hash=False)


def _check_running(client):
    if client.status != "running":
        raise NotFittedError(
            "this fit's low-rank arrays live on a Dask cluster whose client is closed; keep the client open while "
            "using the result, or save it first (res.save(path): ccme.load gives a local fit)"
        )


@dataclass(frozen=True, eq=False)
class _Stage:
    """The Nyström features of one kernel over rows, computed on the partitions.

    ``futures[i]`` holds φ(X) (float32) of ``segments[i]``'s rows on a worker;
    ``gram`` is ΦᵀΦ summed in partition order; ``trace_error`` 1 − mean ‖φ‖².
    """

    features: NystromFeatures
    segments: list
    futures: list
    gram: np.ndarray
    trace_error: float


class DistributedLowRankFold(PseudoOutcomeFold):
    """One cross-fitting fold of the low-rank ridge CCME, its n × r work on the partitions (module docstring).

    Mirrors :class:`ccme.estimators.lowrank.LowRankFold` stage by stage (the
    same seeds, pools, pivots and float32 rounding): the V-kernel's features
    over the fold's second-stage units are computed when the fold is created
    (shared by the arms; for one-step one per arm), an arm's first stage
    when the arm is first used.

    Parameters
    ----------
    layout : _Layout
        The partitions and their scattered design arrays.
    params : Parameters
    data : CrossFitData
    fold : ccme.crossfit.Fold
    seed : int, default 0
        The fold's seed (the landmark pools').
    """

    def __init__(self, layout: _Layout, params: Parameters, data, fold, seed: int = 0):
        self.layout, self.client = layout, layout.client
        self.data, self.fold, self.seed = data, fold, int(seed)
        self.v_kernel, self.x_kernel = params.kernels["v"], params.kernels["x"]
        self.lam0, self.lam1 = params["lam0"], params["lam1"]
        self.lam1_plugin = dict(params.get("lam1_plugin") or {}) if data.mode == "dr" else {}
        self.settings = params["lowrank"]
        self._second_stage = {}
        self._factors = {}
        self._first_stage = {}  # arm -> its X stage while the arm's terms are built
        if data.mode != "onestep":
            self._features(fold.target, "V")

    # -- the landmarks and features (NystromFeatures.select, distributed) ---
    def _stage(self, rows: np.ndarray, column: str, kernel, salt: int) -> _Stage:
        """:meth:`NystromFeatures.select` over data rows ``rows`` of ``column`` ("V" or "Xo"), n × r on the workers."""
        s, client, layout = self.settings, self.client, self.layout
        _check_running(client)
        source = self.data.design.V if column == "V" else self.data.Xo
        n, pool, seed = len(rows), s["landmark_pool"], self.seed + salt
        with _one_blas_thread():
            # the local select's pool and factorisation, on the client
            picked = np.arange(n) if n <= pool else np.sort(np.random.default_rng(seed).choice(n, pool, replace=False))
            check_allocation(8.0 * len(picked) * min(s["max_rank"], len(picked)),
                             f"the pivoted Cholesky factor of the landmark pool ({len(picked)} × "
                             f"{min(s['max_rank'], len(picked))})")
            X_pool = source[rows[picked]]
            L, pivots, residual = _backend.pivoted_cholesky(X_pool, kernel.name, kernel.bandwidth_array, s["rank_tol"],
                                                            s["max_rank"], n_threads=self.data.n_threads)
            features = NystromFeatures(kernel=kernel, landmarks=np.ascontiguousarray(X_pool[pivots]),
                                       factor=np.ascontiguousarray(L[pivots]), residual=float(residual))
            del X_pool
            segments = layout.segments(rows)
            if n <= pool:
                # The pool is every row: its factor's rows are the features Φ the local fit stores (bit for bit),
                # already computed here.  Sending them (n × r float32, at most landmark_pool rows) costs less
                # than the O(n r²) work of forming them again on the workers.
                stored = L.astype(STORAGE)
                del L
                futures = layout.place([stored[start:start + len(local)] for _, local, start in segments],
                                       [p for p, _, _ in segments])
                del stored
            else:
                del L
                for _ in range(_ROUNDS):
                    shared = _share(client, features)
                    found = client.gather([client.submit(_w_candidates, layout.futures[p], column, local, shared, start,
                                                         s["rank_tol"], pure=False) for p, local, start in segments])
                    positions = np.concatenate([f[0] for f in found])  # increasing: partitions in order
                    left = np.concatenate([f[1] for f in found])
                    # the global ranking of the local select, on the union of the partitions' worst rows
                    worst = positions[worst_covered(left, s["rank_tol"])]
                    if worst.size == 0 or features.rank >= s["max_rank"]:
                        break
                    features = features.extended(source[rows[np.sort(worst)]], rank_tol=s["rank_tol"],
                                                 max_rank=s["max_rank"], n_threads=self.data.n_threads)
                shared = _share(client, features)
                pairs = [client.submit(_w_features, layout.futures[p], column, local, shared, pure=False)
                         for p, local, _ in segments]
                futures = [client.submit(operator.itemgetter(0), f, pure=False) for f in pairs]
                # the local select's residual over every row
                lefts = client.gather([client.submit(operator.itemgetter(1), f, pure=False) for f in pairs])
                features = replace(features, residual=float(max(lefts, default=0.0)))
                del pairs
            grams = client.gather([client.submit(_w_gram, f, pure=False) for f in futures])
        gram = np.zeros((features.rank, features.rank))
        total = 0.0
        for G, t in grams:  # partition order: the sums do not depend on the scheduling
            gram += G
            total += t
        return _Stage(features=features, segments=segments, futures=futures, gram=gram,
                      trace_error=float(max(0.0, 1.0 - total / max(n, 1))))

    def _features(self, rows, key) -> _Stage:
        if key not in self._second_stage:
            self._second_stage[key] = self._stage(rows, "V", self.v_kernel, salt=1)
        return self._second_stage[key]

    def _factor(self, key, stage: _Stage, shift: float) -> np.ndarray:
        if (key, shift) not in self._factors:
            self._factors[(key, shift)] = _shifted_chol(stage.gram, shift)
        return self._factors[(key, shift)]

    def release(self, arm: int) -> None:
        self._first_stage.pop(arm, None)  # Ψ₀ is kept only while the arm's terms are built

    def _first_stage_of(self, arm: int, rows0) -> tuple:
        """(stage, factor of Ψ₀ᵀΨ₀ + s₀I, s₀) of ``arm``'s first stage, formed once per :meth:`arm`."""
        if arm not in self._first_stage:
            first = self._stage(rows0, "Xo", self.x_kernel, salt=2 + arm)
            shift0 = len(rows0) * self.lam0[arm]
            self._first_stage[arm] = (first, _shifted_chol(first.gram, shift0), shift0)
        return self._first_stage[arm]

    def build_arm(self, arm: int, pseudo, lam: float) -> "DistributedLowRankFoldArm":
        """As :meth:`ccme.estimators.lowrank.LowRankFold.build_arm`, on the partitions."""
        data, fold, client, layout = self.data, self.fold, self.client, self.layout
        design, Xo = data.design, data.Xo
        A, Y = design.A, design.Y
        rows = pseudo.rows
        key = ("V", arm) if data.mode == "onestep" else "V"
        second = self._features(rows, key)
        shift = len(rows) * lam
        chol = self._factor(key, second, shift)
        trace_error = {"V": second.trace_error}
        rank = second.features.rank
        phi = {p: f for (p, _, _), f in zip(second.segments, second.futures)}
        local1 = {p: (local, start) for p, local, start in second.segments}
        loadings, local0 = {}, {}
        if pseudo.has_first_stage:
            rows0 = fold.nuisance[A[fold.nuisance] == arm]
            first, chol0, shift0 = self._first_stage_of(arm, rows0)
            x_map = first.features
            trace_error["X"] = first.trace_error
            shared_x = _share(client, x_map)
            # M = G0⁻¹ Σ_p Ψ1_pᵀ diag(b_p) Φ_p (r0 × r), summed in partition order
            crosses = client.gather([
                client.submit(_w_cross, layout.futures[p], local, phi[p], pseudo.b[start:start + len(local)], shared_x,
                              pure=False)
                for p, local, start in second.segments])
            with _one_blas_thread():
                M = cho_solve((chol0, True), functools.reduce(operator.add, crosses), check_finite=False)
            shared_m = _share(client, M)
            for (p, local, start), psi in zip(first.segments, first.futures):
                loadings[p] = client.submit(_w_loadings, psi, shared_m, pure=False)
                local0[p] = local
            del first  # Ψ₀ is not kept past the arm (as in the local fit): the loadings are
            Y0 = Y[rows0]
        else:
            x_map, shared_x, chol0, shift0 = None, None, np.zeros((0, 0)), 0.0
            rows0 = np.zeros(0, dtype=np.intp)
            Y0 = np.zeros((0, Y.shape[1]))
        parts, sizes = [], []
        no_rows = np.zeros(0, dtype=np.intp)
        for p in range(layout.n_partitions):
            if p not in local1 and p not in local0:
                continue
            l1, start = local1.get(p, (no_rows, 0))
            l0 = local0.get(p, no_rows)
            parts.append(client.submit(
                _w_arm_part, layout.futures[p], l1, l0, phi.get(p), loadings.get(p),
                pseudo.a[start:start + len(l1)], pseudo.b[start:start + len(l1)], rank, x_map is not None,
                pure=False))
            sizes.append((len(l1), len(l0)))
        return DistributedLowRankFoldArm(
            client=client, parts=parts, sizes=sizes, v_map=second.features, gram=second.gram, chol=chol, shift=shift,
            pseudo=pseudo,
            Y1=Y[rows], x_map=x_map, x_map_shared=shared_x, chol0=chol0, shift0=shift0, Y0=Y0, x_dim=Xo.shape[1],
            atom_units=np.concatenate([rows, rows0]), trace_error=trace_error,
        )


def _shifted_chol(gram: np.ndarray, shift: float) -> np.ndarray:
    """The lower Cholesky factor of gram + shift·I (the local ``_gram_chol`` after its sum)."""
    G = gram.copy()
    G[np.diag_indices_from(G)] += shift
    with _one_blas_thread():
        return cholesky(G, lower=True, check_finite=False)


class DistributedLowRankFoldArm(NystromArm, FoldArm, LinearSecondStage):
    """The low-rank ridge CCME of one arm on one fold, its n × r arrays held by the workers.

    The same estimator as :class:`ccme.estimators.lowrank.LowRankFoldArm`:
    c₁(v) = a ∘ (Φ h(v)) on Y1, c₀(v) = Ψ₀M h(v) on Y0, h(v) =
    (ΦᵀΦ + sI)⁻¹ φ(v).  The client holds the r × r factors, the feature maps,
    the pseudo-outcome coefficients and the atoms; each partition's Φ_p and
    Ψ₀ₚM stay on its worker.  :meth:`contract` moves r × q numbers per
    partition; :meth:`weights`, :meth:`beta` and the bootstrap's unit
    features move O(n) numbers (one row per unit or atom), as their results
    have.  :meth:`gather` (and :meth:`to_state`, for ``res.save``) brings the
    arrays to the client as a local :class:`LowRankFoldArm`.

    Parameters
    ----------
    client : dask.distributed.Client
    parts : list of Future
        Per partition (in row order) its share: a dict of Phi, loadings0, Y1, Y0, X1, X0, a, b.
    sizes : list of (int, int)
        Per partition the numbers of its second-stage units and first-stage atoms.
    v_map, chol, shift, pseudo, Y1, x_map, chol0, shift0, Y0, atom_units, trace_error
        As :class:`LowRankFoldArm`'s.
    gram : ndarray (r, r)
        ΦᵀΦ (``chol`` factors it plus ``shift``·I).
    x_map_shared : Future or None
        ``x_map`` on the workers.
    x_dim : int
        Columns of the outcome model's covariates.
    """

    def __init__(self, *, client, parts, sizes, v_map, gram, chol, shift, pseudo, Y1, x_map, x_map_shared, chol0,
                 shift0, Y0, x_dim, atom_units, trace_error):
        self.client, self.parts, self.sizes = client, list(parts), list(sizes)
        self.v_map, self.gram, self.chol, self.shift, self.pseudo = v_map, gram, chol, float(shift), pseudo
        self.Y1, self.Y0, self.x_map, self._x_shared = Y1, Y0, x_map, x_map_shared
        self.chol0, self.shift0, self.x_dim = chol0, float(shift0), int(x_dim)
        self.atom_units, self.trace_error = atom_units, dict(trace_error)
        self._last_smoothed = self._last_residual = None  # see _smoothed and residual_features

    def coefficients(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """h(v) = (ΦᵀΦ + sI)⁻¹ φ(v), shape (r, n_eval), on the client."""
        with _one_blas_thread():
            return cho_solve((self.chol, True), self.v_map(V_eval, n_threads).T, check_finite=False)

    def _map(self, fn, *args, only=None) -> list:
        """``fn(part, *args)`` on every partition (``only(i)``: those for which it is true), gathered in order."""
        _check_running(self.client)
        return self.client.gather([self.client.submit(fn, part, *args, pure=False)
                                   for i, part in enumerate(self.parts) if only is None or only(i)])

    def _scatter_rows(self, array) -> list:
        """[(partition, future of its rows of ``array``)] for the partitions with units (rows in :attr:`units` order).

        One scatter, rather than the rows embedded in the tasks, which would
        send them through the scheduler.
        """
        _check_running(self.client)
        starts = np.concatenate([[0], np.cumsum([n1 for n1, _ in self.sizes])])
        with_units = [i for i in range(len(self.parts)) if self.sizes[i][0] > 0]
        pieces = self.client.scatter([np.ascontiguousarray(array[starts[i]:starts[i + 1]]) for i in with_units],
                                     hash=False)
        return list(zip(with_units, pieces))

    def _map_rows(self, fn, rows: list, *args) -> list:
        """``fn(part, its rows, *args)`` for the scattered ``rows`` of :meth:`_scatter_rows`, gathered in order."""
        return self.client.gather([self.client.submit(fn, self.parts[i], piece, *args, pure=False)
                                   for i, piece in rows])

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms (Y1 then Y0) and their weights c(v), shape (n_atoms, n_eval); gathers O(n_atoms · n_eval) numbers."""
        h = _share(self.client, self.coefficients(V_eval, n_threads))
        pieces = self._map(_w_weights, h)
        c1 = np.concatenate([c for c, _ in pieces]) if pieces else np.zeros((0, len(V_eval)))
        c0 = np.concatenate([c for _, c in pieces]) if pieces else np.zeros((0, len(V_eval)))
        return self.atoms, np.vstack([c1, c0])

    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × h(V)ᵀ Σ_p (loadings_pᵀ F_p)``: each partition projects its atoms' features."""
        q = out.shape[1]
        projected = np.zeros((self.v_map.rank, q))
        for piece in self._map(_w_project, points, feature, y_kernel, q):
            projected += piece  # partition order
        for v0 in range(0, len(V_eval), _ROWS):
            out[v0:v0 + _ROWS] += scale * (self.coefficients(V_eval[v0:v0 + _ROWS], n_threads).T @ projected)

    # -- the linear second stage (ccme.bootstrap) ---------------------------
    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) = Φ h(v), shape (n_units, n_eval); gathers O(n_units · n_eval) numbers."""
        h = _share(self.client, self.coefficients(V_eval, n_threads))
        pieces = self._map(_w_beta, h, only=lambda i: self.sizes[i][0] > 0)
        return np.concatenate(pieces) if pieces else np.zeros((0, len(V_eval)))

    def _smoothed(self, points, feature: str, kernel) -> np.ndarray:
        """G₀⁻¹ Ψ₀ᵀ F(Y0) (r0 × q): the first stage's coefficients for the atoms' features.

        The bootstrap asks for the same points twice in a row (unit features,
        then the first stage's influence): the last result is kept.
        """
        key = (feature, kernel.name, tuple(np.asarray(kernel.bandwidth_array, dtype=np.float64)))
        last = self._last_smoothed
        if last is not None and last[0] == key and np.array_equal(last[1], points):
            return last[2]
        pieces = self._map(_w_first_moment, self._x_shared, points, feature, kernel,
                           only=lambda i: self.sizes[i][1] > 0)
        with _one_blas_thread():
            smoothed = cho_solve((self.chol0, True), functools.reduce(operator.add, pieces), check_finite=False)
        self._last_smoothed = (key, np.array(points, copy=True), smoothed)
        return smoothed

    def unit_features(self, points, feature: str, kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = a_i F(Y1_i, y) + b_i ⟨μ̂₀(X1_i), F(·, y)⟩ per unit, computed per partition and gathered."""
        smoothed = None if self.x_map is None else _share(self.client, self._smoothed(points, feature, kernel))
        return np.concatenate(self._map(_w_unit_features, self._x_shared, smoothed, points, feature, kernel,
                                        only=lambda i: self.sizes[i][0] > 0))

    def residual_features(self, P: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − H) P = P − Φ S, S = (ΦᵀΦ + sI)⁻¹ ΦᵀP: ΦᵀP summed over the partitions, Φ S formed there.

        Iterated Tikhonov regularisation (:func:`ccme.bootstrap.iterated_tikhonov`)
        passes each result back in.  Φᵀ of the result is ΦᵀP − (ΦᵀΦ) S,
        known here without the workers, so that call needs one round trip
        to the cluster instead of two: the last result (a weak reference) and
        its Φᵀ are kept.
        """
        rows = self._scatter_rows(P)
        last = self._last_residual
        if last is not None and last[0]() is P:
            cross = last[1]
        else:
            cross = functools.reduce(operator.add, self._map_rows(_w_residual_cross, rows))
        with _one_blas_thread():
            solved = cho_solve((self.chol, True), cross, check_finite=False)
            after = cross - self.gram @ solved
        out = np.concatenate(self._map_rows(_w_residual_apply, rows, _share(self.client, solved)))
        self._last_residual = (weakref.ref(out), after)
        return out

    def first_stage_influence(self, beta, points, feature: str, kernel, n_threads: int = 0, cache=None):
        """W(v) = Ψ₀ G₀⁻¹ Ψ₁ᵀ (b ∘ β(v)) and the residual features (I − H₀) F(Y0) (the base class)."""
        if self.x_map is None or self.atom_units is None:
            return None
        smoothed = _share(self.client, self._smoothed(points, feature, kernel))
        pulled = functools.reduce(operator.add, self._map_rows(_w_pull, self._scatter_rows(beta), self._x_shared))
        with _one_blas_thread():
            solved = _share(self.client, cho_solve((self.chol0, True), pulled, check_finite=False))
        pieces = self._map(_w_influence, self._x_shared, solved, smoothed, points, feature, kernel,
                           only=lambda i: self.sizes[i][1] > 0)
        return FirstStageInfluence(units=self.atom_units[len(self.Y1):],
                                   weights=np.concatenate([w for w, _ in pieces]),
                                   residuals=np.concatenate([r for _, r in pieces]))

    def leverages(self, n_threads: int = 0) -> np.ndarray:
        """:meth:`LowRankFoldArm.leverages` of :meth:`gather`'s local fold-arm (O(n r) traffic)."""
        return self.gather().leverages(n_threads)

    def undersmoothed(self, factor: float, penalty_factor: float, V_units: np.ndarray,
                      n_threads: int = 0, cache=None, restore=None) -> LowRankFoldArm:
        """:meth:`LowRankFoldArm.undersmoothed` of :meth:`gather`'s local fold-arm (O(n r) traffic, on the client)."""
        return self.gather().undersmoothed(factor, penalty_factor, V_units, n_threads, restore=restore)

    # -- to the client: a local fold-arm, save / load ------------------------
    def gather(self) -> LowRankFoldArm:
        """The same fold-arm with its arrays on the client: a :class:`LowRankFoldArm` (O(n r) traffic)."""
        pieces = self._map(_w_export)
        rank = self.v_map.rank

        def stack(name, width, dtype=np.float64):
            arrays = [piece[name] for piece in pieces]
            return np.ascontiguousarray(np.concatenate(arrays)) if arrays else np.zeros((0, width), dtype=dtype)

        return LowRankFoldArm(
            v_map=self.v_map, Phi=stack("Phi", rank, STORAGE), chol=self.chol, shift=self.shift, pseudo=self.pseudo,
            Y1=self.Y1, X1=stack("X1", self.x_dim), x_map=self.x_map, loadings0=stack("loadings0", rank, STORAGE),
            X0=stack("X0", self.x_dim), chol0=self.chol0, shift0=self.shift0, Y0=self.Y0,
            atom_units=self.atom_units, trace_error=dict(self.trace_error),
        )

    #: Written as a local low-rank fold-arm: a loaded fit needs no cluster.
    STATE_SCHEMA = LowRankFoldArm.STATE_SCHEMA
    STATE_VERSION = LowRankFoldArm.STATE_VERSION

    def to_state(self) -> dict:
        """The state of :meth:`gather`'s :class:`LowRankFoldArm` (``ccme.load`` reads it back as one)."""
        return self.gather().to_state()
