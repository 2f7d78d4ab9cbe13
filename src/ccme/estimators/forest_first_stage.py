"""A forest-weights first stage for the ridge CCME (``ccme.fit(..., first_stage="forest" | "auto")``).

Kernel ridge regression of φ(Y) on X (the ridge estimator's first stage)
weighs every covariate alike through one isotropic kernel, and with 25–60
covariates it is little better than the arm's marginal embedding.  This
module offers, as another implementation of the estimator protocol, the
conditional mean embedding of a random forest (the weights of quantile
regression forests, Meinshausen 2006, and distributional random forests,
Ćevid et al., JMLR 2022):

    μ̂₀(x) = Σ_l w_l(x) φ(Y0_l),   w_l(x) = (1/T) Σ_t 1{X0_l ∈ leaf_t(x)} / |leaf_t(x)|,

the forest grown on the arm's units of the fold's nuisance part (D0),
|leaf_t(x)| counting *all* those units that fall in tree t's leaf (not only
the tree's bootstrap draw), so that w(x) ≥ 0 and Σ_l w_l(x) = 1.  The second
stage is the ridge estimator's: kernel ridge regression of the
pseudo-outcomes ξ̂_i = a_i φ(Y1_i) + b_i μ̂₀(X1_i) on V (:mod:`ccme.pseudo`),
so the embedding is again atoms and weights (eq. emp_density with the
first-stage smoother (K_X0 + mλ₀I)⁻¹K_X0X1 replaced by Wᵀ):

    atoms [Y1; Y0],   c(v) = [a ∘ β(v);  Wᵀ (b ∘ β(v))],   β(v) = (K_V + nλ₁I)⁻¹ k_V(v),

W (n_target × m) the forest weights of the second-stage rows, held as a
sparse CSR matrix (about T · |leaf| entries per row, never n × m dense).
Every functional of :class:`ccme.Embedding`, the multiplier bootstrap
(:class:`ForestRidgeFoldArm` implements ``LinearSecondStage``), the tuning of
λ₁ and of the read-out bandwidth, and save/load work on it unchanged.  The
bootstrap's first-stage term (the tests of equal laws, the bias-reduced bands
and intervals) perturbs the forest's out-of-bag residuals φ(Y0_l) − Σ_j
w^OOB_j(X0_l) φ(Y0_j), the forest's leave-one-out residuals, with the trees
held fixed (:meth:`ForestRidgeFoldArm.first_stage_influence`).

The forest
----------
scikit-learn's ``RandomForestRegressor`` (``kind="random_forest"``) or
``ExtraTreesRegressor`` (``"extra_trees"``) on the outcome (every column of a
multivariate outcome, each standardised, so that the split criterion is the
summed variance reduction), with :data:`FOREST_DEFAULTS`: 200 trees, leaves
of at least 5 units, half of the covariates tried at each split, each tree
grown on a bootstrap draw of the units (the units a tree did not draw
populate its leaves too, which makes the weights partly honest).  Half of
the covariates per split and the full bootstrap had the smallest
out-of-bag error, against a third or √d of the covariates and half-samples,
on the cases of ``benchmarks/forest_first_stage.py`` and IHDP (by 2–10 %
where few of many covariates matter, within 2 % elsewhere).
The forest's seed comes from the fold's seed and the arm, so a fit is
deterministic given ``seed``; it uses ``n_threads`` workers (0: the core's
thread count), and the trees and weights do not depend on that number.

Choosing between the first stages (``first_stage="auto"``)
----------------------------------------------------------
Per arm, by the validated first-stage error in the outcome RKHS, averaged
over the arm's units of every fold's nuisance part: the kernel ridge's exact
leave-one-out error (at the λ₀ and X kernel the tuning chose) against the
forest's out-of-bag error

    (1/m) Σ_j ‖φ(Y_j) − Σ_l w^OOB_l(X_j) φ(Y_l)‖²,

w^OOB(X_j) the weights over the trees that did not draw unit j, with unit j
itself removed from its leaves.  Both are computed in the same feature
coordinates of the outcome kernel (the pivoted Cholesky factor G of
:mod:`ccme.tuning`).  The choice is made by the tuning
(:func:`select_first_stage`, between the stage-1 and the stage-2 tuning, so
that λ₁ is tuned on the pseudo-outcomes the fit uses) and recorded in
``res.tuning`` (``chosen["first_stage"]`` and a ``"first_stage"`` curve:
values 0 = kernel, 1 = forest).  With ``tune="none"`` nothing is chosen
from the data and ``"auto"`` uses the kernel ridge (the paper's estimator).
The modes without a first stage (ipw, one-step) ignore the option.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import scipy.sparse as sp

from .. import _backend
from ..column_order import canonical_order
from ..errors import ParameterError
from ..kernels import Kernel
from ..pseudo import PseudoOutcome, uses_first_stage
from .base import FoldArm, TwoStageAtoms, linear_terms, per_arm
from .kernel_second_stage import KernelRidgeSecondStage

__all__ = ["FIRST_STAGES", "FOREST_DEFAULTS", "ForestFirstStage", "ForestRidgeFoldArm", "check_first_stage",
           "check_forest_settings", "forest_weights", "grow_forest_first_stage", "select_first_stage",
           "forest_seed", "first_stage_section", "describe_forest", "first_stage_choices"]

#: The values of the ridge estimator's ``first_stage`` hyperparameter.
FIRST_STAGES = ("kernel", "forest", "auto")

#: Documented defaults of the forest (``ccme.fit(..., forest={...})`` overrides any of them).
FOREST_DEFAULTS = MappingProxyType({
    "kind": "random_forest",     # or "extra_trees"
    "n_estimators": 200,         # trees
    "min_samples_leaf": 5,       # units (of a tree's draw) in a leaf, at least
    "max_features": 0.5,         # share (or number, or "sqrt") of the covariates tried at each split
    "max_samples": None,         # share of the units drawn (with replacement) for each tree; None: all (bootstrap)
})

#: Bytes of one dense block in the contractions (64 MiB, as the compiled core).
_BLOCK_BYTES = 64 * 2**20


# ---------------------------------------------------------------------------
# hyperparameters
# ---------------------------------------------------------------------------
def check_first_stage(value, treatment=None) -> dict:
    """``first_stage`` ("kernel", "forest", "auto", or a dict of them per arm) as a per-arm dict.

    ``treatment`` (a :class:`ccme.formula.Treatment`) gives the arms (None: binary);
    see :func:`ccme.estimators.base.per_arm`.
    """
    return per_arm(value, "first_stage", _one_first_stage, treatment)


def first_stage_choices(value) -> list:
    """The first-stage choices ``first_stage=`` names (one, or one per arm), each checked; the arms not needed."""
    return [_one_first_stage(v) for v in (value.values() if isinstance(value, dict) else [value])]


def _one_first_stage(value, name: str = "first_stage") -> str:
    if not isinstance(value, str) or value not in FIRST_STAGES:
        raise ParameterError(f"`first_stage` must be one of {list(FIRST_STAGES)} (or a dict per arm); got {value!r}")
    return value


def check_forest_settings(value) -> dict:
    """The forest's settings: :data:`FOREST_DEFAULTS` updated by ``value`` (None or a dict), each checked."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ParameterError(f"`forest` must be None or a dict of settings {sorted(FOREST_DEFAULTS)}; got {value!r}")
    unknown = sorted(set(value) - set(FOREST_DEFAULTS))
    if unknown:
        raise ParameterError(f"`forest` has unknown setting(s) {unknown}; allowed: {sorted(FOREST_DEFAULTS)}")
    out = {**FOREST_DEFAULTS, **value}
    if out["kind"] not in ("random_forest", "extra_trees"):
        raise ParameterError(f"`forest['kind']` must be 'random_forest' or 'extra_trees'; got {out['kind']!r}")
    for name in ("n_estimators", "min_samples_leaf"):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ParameterError(f"`forest[{name!r}]` must be a positive integer; got {v!r}")
        out[name] = int(v)
    mf = out["max_features"]
    if isinstance(mf, str):
        if mf not in ("sqrt", "log2"):
            raise ParameterError(f"`forest['max_features']` as a string must be 'sqrt' or 'log2'; got {mf!r}")
    elif isinstance(mf, numbers.Integral) and not isinstance(mf, bool):
        if mf < 1:
            raise ParameterError(f"`forest['max_features']` must be a positive integer, a share in (0, 1] or "
                                 f"'sqrt'; got {mf!r}")
        out["max_features"] = int(mf)
    elif isinstance(mf, numbers.Real) and not isinstance(mf, bool) and 0 < float(mf) <= 1:
        out["max_features"] = float(mf)
    else:
        raise ParameterError(f"`forest['max_features']` must be a positive integer, a share in (0, 1] or 'sqrt'; "
                             f"got {mf!r}")
    ms = out["max_samples"]
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, numbers.Real) or not 0 < float(ms) <= 1):
        raise ParameterError(f"`forest['max_samples']` must be a share in (0, 1] or None (all); got {ms!r}")
    out["max_samples"] = None if ms is None else float(ms)
    return out


def forest_seed(fold_seed: int, arm: int) -> int:
    """The forest's ``random_state`` for a fold (by its seed) and an arm: the tuning and the fit grow the same trees."""
    return int(np.random.SeedSequence([int(fold_seed), int(arm)]).generate_state(1)[0] % (2**31 - 1))


def describe_forest(settings) -> str:
    """One line for the summary: what forest, with which settings."""
    kind = "random forest" if settings["kind"] == "random_forest" else "extremely randomised trees"
    mf = settings["max_features"]
    mf = f"{mf:.3g} of the covariates" if isinstance(mf, float) else f"{mf} covariates" if isinstance(mf, int) else mf
    ms = "all units" if settings["max_samples"] is None else f"{settings['max_samples']:g} of the units"
    return (f"{kind} weights: {settings['n_estimators']} trees, leaves >= {settings['min_samples_leaf']} units, "
            f"{mf} per split, bootstrap of {ms}")


# ---------------------------------------------------------------------------
# the forest and its weights
# ---------------------------------------------------------------------------
def _n_jobs(n_threads: int) -> int:
    return int(n_threads) if n_threads and n_threads > 0 else max(1, _backend.max_threads())


def _grow(X0, Y0, settings, seed: int, n_threads: int):
    """The fitted scikit-learn forest on (X0, standardised Y0)."""
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor

    Y0 = np.asarray(Y0, dtype=np.float64)
    sd = Y0.std(axis=0)
    target = (Y0 - Y0.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    cls = RandomForestRegressor if settings["kind"] == "random_forest" else ExtraTreesRegressor
    forest = cls(n_estimators=settings["n_estimators"], min_samples_leaf=settings["min_samples_leaf"],
                 max_features=settings["max_features"], max_samples=settings["max_samples"], bootstrap=True,
                 random_state=seed, n_jobs=_n_jobs(n_threads))
    forest.fit(np.asarray(X0, dtype=np.float64), target[:, 0] if target.shape[1] == 1 else target)
    return forest


def _leaf_columns(forest, X, n_threads: int) -> tuple[np.ndarray, int]:
    """Each row's leaf in each tree as one global column index (n × T): tree t's nodes offset by the earlier trees'."""
    leaves = forest.apply(np.asarray(X, dtype=np.float64)).astype(np.int64)
    counts = np.array([est.tree_.node_count for est in forest.estimators_], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return leaves + offsets[None, :], int(counts.sum())


def _one_hot(cols: np.ndarray, values: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """CSR (rows × n_cols) with row i holding ``values[i, t]`` at column ``cols[i, t]`` (distinct, increasing in t)."""
    n, T = cols.shape
    indptr = np.arange(0, n * T + 1, T, dtype=np.int64)
    return sp.csr_matrix((values.ravel().astype(np.float64), cols.ravel(), indptr), shape=(n, n_cols))


def forest_weights(train_cols: np.ndarray, eval_cols: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """W (n_eval × m): w_l(x) = (1/T) Σ_t 1{unit l in leaf_t(x)} / |leaf_t(x)|, |leaf| counting every training unit.

    ``train_cols`` (m × T) and ``eval_cols`` (n_eval × T) are leaf columns from
    :func:`_leaf_columns`.  The rows are non-negative and sum to one (every leaf
    holds at least one training unit: the tree was grown on them).
    """
    m, T = train_cols.shape
    size = np.bincount(train_cols.ravel(), minlength=n_cols).astype(np.float64)
    if np.any(size[eval_cols] == 0):  # cannot happen for a forest grown on these units
        raise RuntimeError("a forest leaf holds none of the training units")
    members = _one_hot(train_cols, np.ones((m, T)), n_cols)                        # m × leaves
    reach = _one_hot(eval_cols, 1.0 / (T * size[eval_cols]), n_cols)               # n_eval × leaves
    W = (reach @ members.T).tocsr()
    W.sum_duplicates()
    W.sort_indices()
    return _compact(W)


def _compact(W: sp.csr_matrix) -> sp.csr_matrix:
    """Canonical CSR with int32 indices where they fit (smaller files; same values)."""
    idx = np.int32 if max(W.shape[1], W.nnz) < 2**31 - 1 else np.int64
    return sp.csr_matrix((np.ascontiguousarray(W.data, dtype=np.float64), np.ascontiguousarray(W.indices, dtype=idx),
                          np.ascontiguousarray(W.indptr, dtype=idx)), shape=W.shape)


def oob_weights(forest, train_cols: np.ndarray, n_cols: int):
    """Out-of-bag weights over the training units (m × m, CSR) and which units have any.

    For unit j: over the trees whose bootstrap draw left j out and whose leaf
    of X_j holds another unit, the leaf's other units weighted 1/(|leaf| − 1),
    averaged over those trees.  Rows of units without such a tree are zero
    (``valid`` False).
    """
    m, T = train_cols.shape
    size = np.bincount(train_cols.ravel(), minlength=n_cols).astype(np.float64)
    inbag = np.zeros((m, T), dtype=bool)
    for t, drawn in enumerate(forest.estimators_samples_):
        inbag[drawn, t] = True
    usable = ~inbag & (size[train_cols] > 1)
    n_trees = usable.sum(axis=1)
    rows, ts = np.nonzero(usable)
    cols = train_cols[rows, ts]
    values = 1.0 / (size[cols] - 1.0)
    reach = sp.csr_matrix((values, (rows, cols)), shape=(m, n_cols))
    members = _one_hot(train_cols, np.ones((m, T)), n_cols)
    raw = (reach @ members.T).tocoo()
    off = raw.row != raw.col   # a unit is not its own neighbour
    valid = n_trees > 0
    scale = np.where(valid, 1.0 / np.maximum(n_trees, 1), 0.0)
    W = sp.csr_matrix((raw.data[off] * scale[raw.row[off]], (raw.row[off], raw.col[off])), shape=(m, m))
    W.sum_duplicates()
    W.sort_indices()
    return W, valid


@dataclass(frozen=True, eq=False)
class ForestFirstStage:
    """A forest first stage of one fold and arm: its weights at the fold's second-stage rows.

    Attributes
    ----------
    rows0 : ndarray of int
        The data rows the forest was grown on (the arm's units of the nuisance part), the columns of ``W``.
    W : scipy.sparse.csr_matrix (n_target, m)
        Forest weights of the second-stage rows (rows in the fold's target order).
    oob_error : float
        Mean out-of-bag first-stage error in the outcome RKHS (NaN when not computed).
    oob_units : int
        Units the out-of-bag error averages over.
    seed : int
        The forest's ``random_state``.
    W_oob : scipy.sparse.csr_matrix (m, m) or None
        Out-of-bag weights among the forest's own units (:func:`oob_weights`; a zero row for a unit that no
        tree left out), for the first stage's residuals in the bootstrap
        (:meth:`ForestRidgeFoldArm.first_stage_influence`).
    """

    rows0: np.ndarray
    W: sp.csr_matrix
    oob_error: float = float("nan")
    oob_units: int = 0
    seed: int = 0
    W_oob: sp.csr_matrix | None = None


def grow_forest_first_stage(X0, Y0, X_target, *, settings, seed: int, n_threads: int = 0, rows0=None,
                            G0=None) -> ForestFirstStage:
    """Grow the forest on (X0, Y0) and return its weights at ``X_target`` (and, given ``G0``, its OOB error).

    ``G0`` (m × r): feature coordinates of φ(Y0) (G0 G0ᵀ ≈ the outcome Gram
    matrix); the OOB error is then (1/m') Σ_j ‖G0_j − (W^OOB G0)_j‖² over the
    m' units with out-of-bag trees.
    """
    # The forest draws split candidates by column position: in the canonical order its trees depend on the
    # covariates' values only, not on the formula's term order or a factor's level order (ccme.column_order).
    columns = canonical_order(X0)
    X0, X_target = np.asarray(X0)[:, columns], np.asarray(X_target)[:, columns]
    forest = _grow(X0, Y0, settings, seed, n_threads)
    train_cols, n_cols = _leaf_columns(forest, X0, n_threads)
    eval_cols, _ = _leaf_columns(forest, X_target, n_threads)
    W = forest_weights(train_cols, eval_cols, n_cols)
    W_oob, valid = oob_weights(forest, train_cols, n_cols)
    error, units = float("nan"), 0
    if G0 is not None:
        residual = G0 - W_oob @ G0
        units = int(valid.sum())
        error = float(np.sum(residual[valid] ** 2) / units) if units else float("nan")
    rows0 = np.arange(len(X0)) if rows0 is None else np.asarray(rows0)
    return ForestFirstStage(rows0=rows0, W=W, oob_error=error, oob_units=units, seed=int(seed), W_oob=_compact(W_oob))


# ---------------------------------------------------------------------------
# the fold-arm
# ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ForestRidgeFoldArm(TwoStageAtoms, FoldArm, KernelRidgeSecondStage):
    """The ridge CCME of one arm on one fold with a forest-weights first stage (module docstring).

    Attributes
    ----------
    L_V : ndarray (n, n)
        Cholesky factor of K_V + sI over the second-stage units, s = :attr:`shift`.
    V1 : ndarray (n, d_v)
    v_kernel : Kernel
    pseudo : PseudoOutcome
        The second-stage rows and the coefficients (a, b) of φ(Y1_i) and μ̂₀(X1_i).
    Y1 : ndarray (n, d_y)
    Y0 : ndarray (m, d_y)
        Outcomes of the forest's units (the arm's units of the nuisance part).
    W : scipy.sparse.csr_matrix (n, m)
        Forest weights of the second-stage units over the forest's units.
    shift : float
        nλ₁ plus any jitter the second-stage factorisation needed.
    jitter : dict
    atom_units : ndarray of int
        The data row behind each atom (Y1's rows, then Y0's).
    forest : dict
        The forest's settings, seed and out-of-bag error (for the summary).
    W0 : scipy.sparse.csr_matrix (m, m) or None
        Out-of-bag forest weights among the forest's units (:func:`oob_weights`): the first stage's
        out-of-bag residuals φ(Y0) − W0 φ(Y0), which the bootstrap perturbs
        (:meth:`first_stage_influence`); None (a fold-arm saved before they were kept): the first stage held fixed.
    """

    L_V: np.ndarray
    V1: np.ndarray
    v_kernel: Kernel
    pseudo: PseudoOutcome
    Y1: np.ndarray
    Y0: np.ndarray
    W: sp.csr_matrix
    shift: float
    jitter: dict = field(default_factory=dict)
    atom_units: np.ndarray | None = None
    forest: dict = field(default_factory=dict)
    W0: sp.csr_matrix | None = None
    _core: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        n, m = len(self.Y1), len(self.Y0)
        if self.W.shape != (n, m):
            raise ValueError(f"the forest weights have shape {self.W.shape}, expected ({n}, {m})")
        if self.W0 is not None and self.W0.shape != (m, m):
            raise ValueError(f"the out-of-bag weights have shape {self.W0.shape}, expected ({m}, {m})")
        # The compiled second stage without a first stage: β(v) (weights-only arm).
        object.__setattr__(self, "_core", _backend.RidgeArmCore(
            L_V=self.L_V, V1=self.V1, v_kernel=self.v_kernel.name, v_bandwidth=self.v_kernel.bandwidth_array,
            a=np.ones(n), b=np.zeros(n),
        ))

    @property
    def a(self) -> np.ndarray:
        return self.pseudo.a

    @property
    def b(self) -> np.ndarray:
        return self.pseudo.b

    def diagnostics(self) -> dict:
        return {"jitter": max(self.jitter.values(), default=0.0), "first_stage": "forest",
                "oob_error": float(self.forest.get("oob_error", float("nan"))), "nnz": int(self.W.nnz)}

    # -- the embedding -------------------------------------------------------
    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) = (K_V + sI)⁻¹ k_V(V1, v), shape (n_units, n_eval), from the compiled core."""
        return self._core.beta(V_eval, n_threads)

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms (Y1 then Y0) and their weights c(v) = [a ∘ β(v); Wᵀ(b ∘ β(v))], shape (n_atoms, n_eval)."""
        beta = self.beta(V_eval, n_threads)
        c1 = self.a[:, None] * beta
        c0 = np.asarray(self.W.T @ (self.b[:, None] * beta))
        return self.atoms, np.vstack([c1, c0])

    def unit_features(self, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = a_i F(Y1_i, y) + b_i Σ_l W_il F(Y0_l, y) (:meth:`ccme.pseudo.PseudoOutcome.features`)."""
        name, bw = kernel.name, kernel.bandwidth_array
        own = _backend.atom_features(self.Y1, points, feature, name, bw, n_threads)
        first = None
        if self.pseudo.has_first_stage:
            F0 = _backend.atom_features(self.Y0, points, feature, name, bw, n_threads)
            first = np.asarray(self.W @ F0)
        return self.pseudo.features(own, first)

    def first_stage_influence(self, beta, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None):
        """W(v) = Wᵀ (b ∘ β(v)) and the features of the out-of-bag residuals φ(Y0_l) − Σ_j W0_lj φ(Y0_j).

        The forest's embedding μ̂₀(x) = Σ_l w_l(x) φ(Y0_l) is linear in the
        first-stage outcomes for the grown trees
        (:meth:`ccme.estimators.base.LinearSecondStage.first_stage_influence`),
        so W(v) is the atoms' first-stage weights c0(v) of :meth:`weights`.
        The noise ε0_l is estimated by the out-of-bag residual, the forest's
        analogue of a leave-one-out residual: the in-sample weights put about
        1/|leaf| on the unit itself and shrink its residual.  A unit that no
        tree left out (all of them drew it: rare with 200 trees) contributes no
        residual.  The trees' dependence on the outcomes (the splits) is held
        fixed.  None without a first stage, or for a fold-arm stored without W0.
        """
        if not self.pseudo.has_first_stage or self.W0 is None or self.atom_units is None:
            return None
        from .base import FirstStageInfluence

        F0 = _backend.atom_features(self.Y0, points, feature, kernel.name, kernel.bandwidth_array, n_threads)
        covered = np.asarray(self.W0.sum(axis=1)).ravel() > 0
        residuals = np.where(covered[:, None], F0 - np.asarray(self.W0 @ F0), 0.0)
        weights = np.asarray(self.W.T @ (self.b[:, None] * beta))
        return FirstStageInfluence(units=self.atom_units[len(self.Y1):], weights=weights, residuals=residuals)

    def contract(self, V_eval, points, feature, y_kernel: Kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × β(V)ᵀ P`` with P the unit features, in the cheaper association order, in blocks.

        "y" order: H = (K_V + sI)⁻¹ P per block of points, then k_V(V_eval, V1) H
        per block of V-points, O(n²q + n·n_eval·q); "v" order: β per block of
        V-points, then βᵀP, O(n²·n_eval + n·n_eval·q).  The unit features cost
        O((n + m) q + nnz(W) q) once per block of points.
        """
        V_eval = np.asarray(V_eval, dtype=np.float64)
        n = self.L_V.shape[0]
        ne = V_eval.shape[0]
        dy = self.Y1.shape[1]
        if feature == "moments":
            q = 1 + 2 * dy
            point_blocks = [None]
        else:
            points = np.asarray(points, dtype=np.float64)
            q = points.shape[0]
            width = max(1, _BLOCK_BYTES // (8 * max(n, 1)))
            point_blocks = [slice(p, min(p + width, q)) for p in range(0, q, width)]
        if ne == 0 or q == 0 or scale == 0.0:
            return
        dv = self.V1.shape[1]
        y_side = n * n * q + ne * n * (dv + q) <= n * n * ne + ne * n * q
        step = max(1, _BLOCK_BYTES // (8 * max(n, q, 1)))
        for pb in point_blocks:
            P = self.unit_features(points if pb is None else points[pb], feature, y_kernel, n_threads)
            cols = slice(None) if pb is None else pb
            if y_side:
                H = _backend.cholesky_solve(self.L_V, P, n_threads)
                for e0 in range(0, ne, step):
                    K = _backend.gram(V_eval[e0:e0 + step], self.V1, self.v_kernel.name,
                                      self.v_kernel.bandwidth_array, n_threads=n_threads)
                    out[e0:e0 + step, cols] += scale * (K @ H)
            else:
                for e0 in range(0, ne, step):
                    beta = self.beta(V_eval[e0:e0 + step], n_threads)
                    out[e0:e0 + step, cols] += scale * (beta.T @ P)

    # -- state ----------------------------------------------------------------
    #: Version 2 adds the out-of-bag weights W0 (None: a version-1 state, the first stage then held fixed).
    STATE_SCHEMA = "ccme.ForestRidgeFoldArm"
    STATE_VERSION = 2
    _ARRAYS = ("L_V", "V1", "Y1", "Y0", "atom_units")

    def to_state(self) -> dict:
        """The fitted fold-arm as a versioned state for :mod:`ccme.io` (W and W0 as their CSR arrays)."""
        from ..io import make_state

        forest = {k: v for k, v in self.forest.items()}
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION,
                          **{name: getattr(self, name) for name in self._ARRAYS},
                          **_csr_to_state("W", self.W), **_csr_to_state("W0", self.W0),
                          v_kernel=self.v_kernel.to_state(), rows=self.pseudo.rows, a=self.pseudo.a,
                          b=self.pseudo.b, shift=float(self.shift),
                          jitter={k: float(v) for k, v in self.jitter.items()}, forest=forest)

    @classmethod
    def from_state(cls, state) -> "ForestRidgeFoldArm":
        """Inverse of :meth:`to_state`; every array checked for its type and shape, W and W0 for a valid CSR."""
        from ..errors import FormatError
        from ..io import check_schema

        keys = {1: (*cls._ARRAYS, "W_data", "W_indices", "W_indptr", "v_kernel", "rows", "a", "b", "shift",
                    "jitter", "forest")}
        keys[2] = (*keys[1], "W0_data", "W0_indices", "W0_indptr")
        stored = state.get("version") if isinstance(state, dict) else None
        version = check_schema(state, cls.STATE_SCHEMA, range(1, cls.STATE_VERSION + 1),
                               keys=keys.get(stored, keys[cls.STATE_VERSION]))
        for name in (*cls._ARRAYS, "rows", "a", "b"):
            if not isinstance(state[name], np.ndarray):
                raise FormatError(f"the stored forest fold-arm's {name} is not an array")
        if not isinstance(state["forest"], dict) or not isinstance(state["jitter"], dict):
            raise FormatError("the stored forest fold-arm's forest or jitter is not a mapping")
        n, m = len(state["rows"]), len(state["Y0"])
        if state["L_V"].shape != (n, n) or len(state["V1"]) != n or len(state["Y1"]) != n or \
                len(state["a"]) != n or len(state["b"]) != n:
            raise FormatError("the stored forest fold-arm's second-stage arrays disagree in size")
        W = _csr_from_state(state, "W", (n, m), "weights")
        W0 = _csr_from_state(state, "W0", (m, m), "out-of-bag weights", optional=True) if version >= 2 else None
        pseudo = PseudoOutcome(rows=state["rows"], a=state["a"], b=state["b"])
        return cls(L_V=state["L_V"], V1=state["V1"], v_kernel=Kernel.from_state(state["v_kernel"]), pseudo=pseudo,
                   Y1=state["Y1"], Y0=state["Y0"], W=W, shift=float(state["shift"]), jitter=dict(state["jitter"]),
                   atom_units=state["atom_units"], forest=dict(state["forest"]), W0=W0)


def _csr_to_state(name: str, W) -> dict:
    """A CSR matrix (or None) as the state entries ``{name}_data``, ``{name}_indices``, ``{name}_indptr``."""
    parts = (None, None, None) if W is None else (W.data, W.indices, W.indptr)
    return dict(zip((f"{name}_data", f"{name}_indices", f"{name}_indptr"), parts))


def _csr_from_state(state: dict, name: str, shape: tuple, what: str, optional: bool = False):
    """Inverse of :func:`_csr_to_state`, checked: arrays of the right kinds forming a valid CSR of ``shape``."""
    from ..errors import FormatError

    data, indices, indptr = (state[f"{name}_{part}"] for part in ("data", "indices", "indptr"))
    if optional and data is None and indices is None and indptr is None:
        return None
    n, m = shape
    if not all(isinstance(x, np.ndarray) for x in (data, indices, indptr)) or (
            indptr.ndim != 1 or len(indptr) != n + 1 or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu"
            or data.dtype != np.float64 or indices.ndim != 1 or data.shape != indices.shape
            or (n and (indptr[0] != 0 or indptr[-1] != len(data) or np.any(np.diff(indptr) < 0)))
            or (len(indices) and (indices.min() < 0 or indices.max() >= m))):
        raise FormatError(f"the stored forest fold-arm's {what} are not a valid sparse matrix")
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def forest_fold_arm(*, data, fold, arm: int, pseudo: PseudoOutcome, L_V, shift: float, jitter: dict,
                    v_kernel: Kernel, settings, seed: int, prebuilt=None) -> ForestRidgeFoldArm:
    """Build the forest fold-arm of ``arm`` on ``fold`` (growing the forest unless the tuning did, ``prebuilt``)."""
    design, Xo = data.design, data.Xo
    A, Y, V = design.A, design.Y, design.V
    rows, target = pseudo.rows, fold.target
    rows0 = fold.nuisance[A[fold.nuisance] == arm]
    first = prebuilt if isinstance(prebuilt, ForestFirstStage) and np.array_equal(prebuilt.rows0, rows0) else None
    if first is None:
        first = grow_forest_first_stage(Xo[rows0], Y[rows0], Xo[target], settings=settings,
                                        seed=forest_seed(seed, arm), n_threads=data.n_threads, rows0=rows0)
    if not np.array_equal(rows, target):  # the dr and pi pseudo-outcomes run over every target unit
        raise ValueError("the forest first stage expects the pseudo-outcome rows to be the fold's target rows")
    info = {**settings, "seed": first.seed, "oob_error": first.oob_error, "oob_units": first.oob_units}
    return ForestRidgeFoldArm(L_V=L_V, V1=V[rows], v_kernel=v_kernel, pseudo=pseudo, Y1=Y[rows], Y0=Y[rows0],
                              W=first.W, shift=shift, jitter=jitter, atom_units=np.concatenate([rows, rows0]),
                              forest=info, W0=first.W_oob)


# ---------------------------------------------------------------------------
# the choice (called by the tuning)
# ---------------------------------------------------------------------------
class FirstStageSelection:
    """The tuning's hook: grows the forests, chooses each arm's first stage, and keeps the forests for the fit.

    Called by :func:`ccme.tuning.tune_ridge` after the stage-1 tuning as
    ``selection(G=G, params=prepared, report=report)``; sets
    ``params["first_stage"]`` to the choices, records them in ``report``, and
    returns {(fold index, arm): features of μ̂₀ at the fold's second-stage rows
    in the coordinates G} for the forest arms, with which the stage-2 tuning
    builds its pseudo-outcomes.  :attr:`prebuilt` then holds the grown
    forests for :meth:`ccme.estimators.ridge.RidgeEstimator.fit_fold`.
    """

    def __init__(self, *, data, folds, seeds):
        self.data, self.folds, self.seeds = data, folds, seeds
        self.prebuilt = {}

    def __call__(self, *, G, params, report) -> dict:
        return select_first_stage(data=self.data, folds=self.folds, seeds=self.seeds, G=G, params=params,
                                  report=report, prebuilt=self.prebuilt)


def needs_selection(params, mode: str) -> bool:
    """Whether the fit involves a forest first stage to grow or a choice to make."""
    choices = params["first_stage"]
    return uses_first_stage(mode) and any(choice != "kernel" for choice in choices.values())


def select_first_stage(*, data, folds, seeds, G, params, report, prebuilt) -> dict:
    """Resolve ``params["first_stage"]`` per arm (see the module docstring); returns the stage-2 features."""
    from ..tuning import TuningCurve, _spectrum

    design, Xo = data.design, data.Xo
    A, Y = design.A, design.Y
    choices = dict(params["first_stage"])
    settings = params["forest"]
    x_kernel = params["kernels"]["x"]
    features, selection = {}, {}
    for arm in design.arms:
        if choices[arm] == "kernel":
            continue
        forests, oob_total, oob_units, loo_total, loo_units = {}, 0.0, 0, 0.0, 0
        for k, fold in enumerate(folds):
            rows0 = fold.nuisance[A[fold.nuisance] == arm]
            first = grow_forest_first_stage(Xo[rows0], Y[rows0], Xo[fold.target], settings=settings,
                                            seed=forest_seed(seeds[k], arm), n_threads=data.n_threads, rows0=rows0,
                                            G0=G[rows0])
            forests[k] = first
            if first.oob_units:
                oob_total += first.oob_error * first.oob_units
                oob_units += first.oob_units
            if choices[arm] == "auto":
                lam0 = params["lam0"][arm]
                spectrum = _spectrum(Xo[rows0], x_kernel, 1.0, lam0, data.n_threads)
                loo_total += len(rows0) * float(spectrum.loo(G[rows0], np.array([lam0]), data.n_threads)[0])
                loo_units += len(rows0)
        forest_error = oob_total / oob_units if oob_units else float("inf")
        selection[arm] = {"forest": forest_error}
        if choices[arm] == "auto":
            kernel_error = loo_total / loo_units
            selection[arm]["kernel"] = kernel_error
            choices[arm] = "forest" if forest_error < kernel_error else "kernel"
            report.curves.append(TuningCurve(
                "first_stage", np.array([0.0, 1.0]), np.array([kernel_error, forest_error]),
                "first-stage error (RKHS): 0 = kernel ridge LOO, 1 = forest OOB",
                1.0 if choices[arm] == "forest" else 0.0, arm, None))
        else:
            report.curves.append(TuningCurve("first_stage", np.array([1.0]), np.array([forest_error]),
                                             "first-stage error (RKHS): forest OOB", 1.0, arm, None))
        if choices[arm] == "forest":
            for k, first in forests.items():
                prebuilt[(k, arm)] = first
                features[(k, arm)] = np.asarray(first.W @ G[first.rows0])
    params["first_stage"] = choices
    params["first_stage_selection"] = selection
    report.chosen["first_stage"] = dict(choices)
    return features


def first_stage_section(params, embeddings, treatment=None) -> list:
    """The summary's "First stage" section: each arm's first stage and its criteria (none when all are kernel)."""
    choices = params.get("first_stage")
    selection = params.get("first_stage_selection") or {}
    if choices is None or (all(choice == "kernel" for choice in choices.values()) and not selection):
        return []
    rows = []
    for arm in choices:
        parts = [term for part in embeddings[arm].parts for term in linear_terms(part)]
        forests = [p for p in parts if isinstance(p, ForestRidgeFoldArm)]
        if not any(getattr(p, "pseudo", None) is not None and p.pseudo.has_first_stage for p in parts):
            text = "none (the mode has no first stage)"
        elif forests:
            text = describe_forest(params["forest"])
        elif choices[arm] == "auto":
            text = "kernel ridge on X ('auto' is chosen by the tuning; with tune='none' the kernel ridge)"
        else:
            text = "kernel ridge on X"
        crit = selection.get(arm)
        if crit:
            text += "; validated error (RKHS): " + ", ".join(
                f"{name} {crit[key]:.4g}" for key, name in (("kernel", "kernel LOO"), ("forest", "forest OOB"))
                if np.isfinite(crit.get(key, np.nan)))
        rows.append((("treated" if arm == 1 else "control") if treatment is None else treatment.arm_name(arm), text))
    return [("First stage", rows)]
