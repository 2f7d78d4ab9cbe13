"""The Ridge Regression CCME (paper, Section "Ridge Regression Estimator").

Stage 1 (on D0, the arm's units): kernel ridge regression of φ(Y) on X,
μ̂₀(x) = Φ₀ (K_X0 + mλ₀I)⁻¹ k_X0(x).
Stage 2 (on D1): kernel ridge regression of the pseudo-outcomes ξ̂ on V,
μ̂(v) = Ξ̂ (K_V + nλ₁I)⁻¹ k_V(v)  (eq. emp_ccme_form),

with ξ̂_i = a_i φ(Y_1i) + b_i μ̂₀(X_1i) and the coefficients (a, b) of the
mode from :mod:`ccme.pseudo` (eq. emp_density with D_ω → diag(a) and
D_{1−ω} → diag(b)).  The fitted fold-arm keeps the Cholesky factors of
K_V + nλ₁I and K_X0 + mλ₀I; evaluations go through the compiled core block
by block (:class:`ccme._backend.RidgeArmCore`, built once per fold-arm).  Its second stage is a
linear smoother, so it implements
:class:`ccme.estimators.base.LinearSecondStage` for the bootstrap.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from .. import _backend
from ..errors import ParameterError
from ..kernels import Kernel, design_groups, resolve_kernel
from ..pseudo import MODES, PseudoOutcome, uses_first_stage
from .base import (CrossFitData, Estimator, FoldArm, Parameters, PseudoOutcomeFold, SplitSecondStage, Tuned,
                   TwoStageAtoms, per_arm, shared_piece)
from .forest_first_stage import check_first_stage, check_forest_settings, first_stage_section
from .kernel_second_stage import KernelRidgeSecondStage, guarded_factor
from .lowrank import LOWRANK_DEFAULTS, LowRankFold, check_lowrank_settings, resolve_approx

__all__ = ["RidgeEstimator", "RidgeFold", "RidgeFoldArm", "MODES", "RIDGE_DEFAULTS", "apply_first_stage"]

_EMPTY = np.zeros((0, 0))
#: Doubles in one block of K(X1, X0) in :func:`apply_first_stage` (32 MiB).
_CHUNK_DOUBLES = 1 << 22


def apply_first_stage(X1, X0, kernel: Kernel, solved: np.ndarray, n_threads: int = 0) -> np.ndarray:
    """K(X1, X0) @ ``solved``, a block of rows of X1 at a time: the first stage's prediction at X1.

    With ``solved`` = (K_X0 + mλ₀I)⁻¹ F(Y0) for a feature F of the first-stage
    outcomes, row i is ⟨μ̂₀(X1_i), F⟩, the feature of unit i's first-stage
    prediction.  The tuning passes a low-rank solve, the bootstrap the exact one.
    """
    out = np.empty((len(X1), solved.shape[1]))
    step = max(1, int(_CHUNK_DOUBLES // max(len(X0), 1)))
    for s in range(0, len(X1), step):
        block = _backend.gram(X1[s:s + step], X0, kernel.name, kernel.bandwidth_array, n_threads=n_threads)
        out[s:s + step] = block @ solved
    return out


#: Largest K(X1, X0) that :class:`FirstStagePieces` keeps between uses (bytes); a larger one is recomputed in blocks.
_CROSS_GRAM_BYTES = 256 * 2**20


class FirstStagePieces:
    """What the bootstrap asks of one kernel ridge first stage, computed once per bootstrap call.

    The terms of a split doubly robust fold-arm (correction and plug-in part)
    and their undersmoothed refits (:mod:`ccme.bootstrap`) all have the same
    first stage μ̂₀(x) = k_X0(x)ᵀ (K_X0 + s₀I)⁻¹ φ(Y0) at the same units X1:
    the cross-Gram K(X1, X0) (kept when it is under 256 MiB) and the solved
    outcome features (K_X0 + s₀I)⁻¹ F(Y0) of each read-out need computing
    once, not once per term, refit and feature.
    """

    def __init__(self, X1, X0, Y0, L_X0, x_kernel: Kernel, keep_gram: bool = True):
        self.X1, self.X0, self.Y0, self.L_X0, self.x_kernel = X1, X0, Y0, L_X0, x_kernel
        self._kept = {}  # solved and predicted features by read-out
        self._gram = None
        self._keep_gram = keep_gram and 8.0 * len(X1) * len(X0) <= _CROSS_GRAM_BYTES

    @staticmethod
    def _key(what: str, points, feature: str, kernel: Kernel) -> tuple:
        points = np.asarray(points)
        return what, feature, kernel.name, tuple(kernel.bandwidth_array), points.shape, points.tobytes()

    def solved(self, points, feature: str, kernel: Kernel, n_threads: int = 0) -> np.ndarray:
        """(K_X0 + s₀I)⁻¹ F(Y0, points), shape (m, n_points)."""
        def compute():
            F0 = _backend.atom_features(self.Y0, points, feature, kernel.name, kernel.bandwidth_array, n_threads)
            return _backend.cholesky_solve(self.L_X0, F0, n_threads)

        return shared_piece(self._kept, self._key("solved", points, feature, kernel), compute)

    def predicted(self, points, feature: str, kernel: Kernel, n_threads: int = 0) -> np.ndarray:
        """⟨μ̂₀(X1_i), F(·, y)⟩ = K(X1, X0) (K_X0 + s₀I)⁻¹ F(Y0), shape (n, n_points)."""
        def compute():
            solved = self.solved(points, feature, kernel, n_threads)
            gram = self._cross_gram(n_threads)
            return (apply_first_stage(self.X1, self.X0, self.x_kernel, solved, n_threads) if gram is None
                    else gram @ solved)

        return shared_piece(self._kept, self._key("predicted", points, feature, kernel), compute)

    def pulled_back(self, weights, n_threads: int = 0) -> np.ndarray:
        """(K_X0 + s₀I)⁻¹ K(X0, X1) w for second-stage weights w (n, q): the first-stage units' influence."""
        gram = self._cross_gram(n_threads)
        pulled = (apply_first_stage(self.X0, self.X1, self.x_kernel, weights, n_threads) if gram is None
                  else gram.T @ weights)
        return _backend.cholesky_solve(self.L_X0, pulled, n_threads)

    def _cross_gram(self, n_threads: int):
        if self._gram is None and self._keep_gram:
            self._gram = _backend.gram(self.X1, self.X0, self.x_kernel.name, self.x_kernel.bandwidth_array,
                                       n_threads=n_threads)
        return self._gram


@dataclass(frozen=True, eq=False)
class RidgeFoldArm(TwoStageAtoms, FoldArm, KernelRidgeSecondStage):
    """The ridge CCME of one arm fitted on one cross-fitting fold.

    Attributes
    ----------
    L_V : ndarray (n, n)
        Cholesky factor of K_V + sI over the second-stage units, s = :attr:`shift`.
    V1 : ndarray (n, d_v)
    pseudo : PseudoOutcome
        The second-stage rows and the coefficients (a, b) of φ(Y_1i) and μ̂₀(X_1i).
    Y1 : ndarray (n, d_y)
    X1 : ndarray (n, d_x)
        Second-stage covariates of the outcome model (empty without a first stage).
    L_X0, X0, Y0 : ndarrays
        First-stage factor of K_X0 + mλ₀I, covariates and outcomes of the arm's D0 units.
    shift : float
        nλ₁ plus any jitter the second-stage factorisation needed.
    jitter : dict
        Jitter added to each factorisation (0 when none was needed).
    atom_units : ndarray of int
        The data row behind each atom (Y1's rows, then Y0's), in the order of :meth:`weights`.
    """

    L_V: np.ndarray
    V1: np.ndarray
    v_kernel: Kernel
    pseudo: PseudoOutcome
    Y1: np.ndarray
    X1: np.ndarray
    L_X0: np.ndarray
    X0: np.ndarray
    Y0: np.ndarray
    x_kernel: Kernel
    shift: float
    jitter: dict = field(default_factory=dict)
    atom_units: np.ndarray | None = None
    #: The compiled fold-arm (inputs checked and prescaled once; the factors are referenced, not copied).
    _core: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_core", _backend.RidgeArmCore(
            L_V=self.L_V, V1=self.V1, v_kernel=self.v_kernel.name, v_bandwidth=self.v_kernel.bandwidth_array,
            a=self.pseudo.a, b=self.pseudo.b, Y1=self.Y1, X1=self.X1, L_X0=self.L_X0, X0=self.X0, Y0=self.Y0,
            x_kernel=self.x_kernel.name, x_bandwidth=self.x_kernel.bandwidth_array,
        ))

    @property
    def a(self) -> np.ndarray:
        return self.pseudo.a

    @property
    def b(self) -> np.ndarray:
        return self.pseudo.b

    def diagnostics(self) -> dict:
        return {"jitter": max(self.jitter.values(), default=0.0)}

    STATE_SCHEMA = "ccme.RidgeFoldArm"
    STATE_VERSION = 1
    _ARRAYS = ("L_V", "V1", "Y1", "X1", "L_X0", "X0", "Y0", "atom_units")

    def to_state(self) -> dict:
        """The fitted fold-arm as a versioned state for :mod:`ccme.io` (factors, data, pseudo-outcome)."""
        from ..io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION,
                          **{name: getattr(self, name) for name in self._ARRAYS},
                          v_kernel=self.v_kernel.to_state(), x_kernel=self.x_kernel.to_state(),
                          rows=self.pseudo.rows, a=self.pseudo.a, b=self.pseudo.b, shift=float(self.shift),
                          jitter={k: float(v) for k, v in self.jitter.items()})

    @classmethod
    def from_state(cls, state) -> "RidgeFoldArm":
        """Inverse of :meth:`to_state`; every array checked for its type and shape."""
        from ..errors import FormatError
        from ..io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=(*cls._ARRAYS, "v_kernel", "x_kernel", "rows", "a", "b", "shift", "jitter"))
        for name in (*cls._ARRAYS, "rows", "a", "b"):
            if not isinstance(state[name], np.ndarray):
                raise FormatError(f"the stored ridge fold-arm's {name} is not an array")
        n = len(state["rows"])
        if state["L_V"].shape != (n, n) or len(state["V1"]) != n or len(state["Y1"]) != n or \
                len(state["a"]) != n or len(state["b"]) != n:
            raise FormatError("the stored ridge fold-arm's second-stage arrays disagree in size")
        m = len(state["X0"])
        if state["L_X0"].shape not in ((m, m), (0, 0)) or len(state["Y0"]) != m:
            raise FormatError("the stored ridge fold-arm's first-stage arrays disagree in size")
        pseudo = PseudoOutcome(rows=state["rows"], a=state["a"], b=state["b"])
        return cls(L_V=state["L_V"], V1=state["V1"], v_kernel=Kernel.from_state(state["v_kernel"]), pseudo=pseudo,
                   Y1=state["Y1"], X1=state["X1"], L_X0=state["L_X0"], X0=state["X0"], Y0=state["Y0"],
                   x_kernel=Kernel.from_state(state["x_kernel"]), shift=float(state["shift"]),
                   jitter=dict(state["jitter"]), atom_units=state["atom_units"])

    def contract(self, V_eval, points, feature, y_kernel: Kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × Σ_k c_k(v) F(y_k, point)`` by eq. (emp_density), in the compiled core."""
        self._core.contract(V_eval, points, feature, y_kernel.name, y_kernel.bandwidth_array, out=out, scale=scale,
                            n_threads=n_threads)

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms (Y1 then Y0) and their weights c(v), shape (n_atoms, n_eval)."""
        c1, c0 = self._core.weights(V_eval, n_threads)
        return self.atoms, np.vstack([c1, c0])

    # -- the linear second stage (ccme.bootstrap) ---------------------------
    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) = (K_V + sI)⁻¹ k_V(V1, v), shape (n_units, n_eval)."""
        return self._core.beta(V_eval, n_threads)

    def unit_features(self, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = a_i F(Y1_i, y) + b_i ⟨μ̂₀(X1_i), F(·, y)⟩ (:meth:`ccme.pseudo.PseudoOutcome.features`)."""
        own = _backend.atom_features(self.Y1, points, feature, kernel.name, kernel.bandwidth_array, n_threads)
        first = None
        if self.pseudo.has_first_stage and self.L_X0.shape[0] > 0:
            first = self._first_stage_pieces(cache).predicted(points, feature, kernel, n_threads)
        return self.pseudo.features(own, first)

    def first_stage_influence(self, beta, points, feature: str, kernel: Kernel, n_threads: int = 0, cache=None):
        """W(v) = (K_X0 + s₀I)⁻¹ K_X0X1 (b ∘ β(v)) and the residual features s₀ (K_X0 + s₀I)⁻¹ F(Y0).

        The first stage μ̂₀(x) = k_X0(x)ᵀ (K_X0 + s₀I)⁻¹ φ(Y0) is linear in the
        first-stage outcomes (:meth:`LinearSecondStage.first_stage_influence`);
        s₀ = mλ₀ (+ jitter) is read off the factor, L₀₀² = k(x, x) + s₀ = 1 + s₀.
        None without a first stage.
        """
        if not self.pseudo.has_first_stage or self.L_X0.shape[0] == 0 or self.atom_units is None:
            return None
        from .base import FirstStageInfluence

        pieces = self._first_stage_pieces(cache)
        s0 = float(self.L_X0[0, 0]) ** 2 - 1.0
        residuals = s0 * pieces.solved(points, feature, kernel, n_threads)
        weights = pieces.pulled_back(self.pseudo.b[:, None] * beta, n_threads)
        return FirstStageInfluence(units=self.atom_units[len(self.Y1):], weights=weights, residuals=residuals)

    def _first_stage_pieces(self, cache) -> "FirstStagePieces":
        """This fold's :class:`FirstStagePieces`, shared through ``cache`` by the fold-arms of one first stage."""
        # The terms of a split fold-arm and their refits share the first stage's factor.  Without a cache nothing
        # is shared: K(X1, X0) is then computed in blocks.
        return shared_piece(cache, ("first stage", id(self.L_X0)),
                            lambda: FirstStagePieces(self.X1, self.X0, self.Y0, self.L_X0, self.x_kernel,
                                                     keep_gram=cache is not None), inputs=(self.X1,))


class RidgeFold(PseudoOutcomeFold):
    """One cross-fitting fold of the ridge CCME (Algorithm "Kernel Ridge Regression Estimator").

    The second-stage factor of K_V + nλ₁I over D1, shared by both arms, is
    computed when the fold is created; an arm's first stage (K_X0 + mλ₀I over
    the arm's units of D0) is computed by :meth:`arm` when that arm is first
    used, so that a user who asks only for p(Y¹ | V) neither pays for nor
    holds the control arm's factors.

    Parameters
    ----------
    params : Parameters
        ``kernels["v"]``, ``kernels["x"]``, ``lam0``, ``lam1`` ({arm: λ}, K + nλI).
    data : CrossFitData
    fold : ccme.crossfit.Fold
    """

    def __init__(self, params: Parameters, data: CrossFitData, fold, seed: int = 0, prebuilt=None):
        self.data, self.fold = data, fold
        self.v_kernel, self.x_kernel = params.kernels["v"], params.kernels["x"]
        self.lam0, self.lam1 = params["lam0"], params["lam1"]
        # The first stage per arm ("auto" left unresolved, tune="none": the kernel ridge), the forest's
        # settings, the fold's seed (the forest's) and the forests the tuning grew ({arm: ForestFirstStage}).
        self.first_stage = params.get("first_stage") or {arm: "kernel" for arm in data.design.arms}
        self.forest, self.seed, self.prebuilt = params.get("forest"), seed, dict(prebuilt or {})
        # The doubly robust mode's plug-in penalty per arm ({}: one penalty for the whole pseudo-outcome).
        self.lam1_plugin = dict(params.get("lam1_plugin") or {}) if data.mode == "dr" else {}
        self._second_stage = {}  # λ₁ -> (L_V, jitter): one factor serves both arms when their λ₁ agree
        self._first_stage = {}  # arm -> (L_X0, jitter)
        if data.mode != "onestep":
            self._factor_second_stage(self.lam1[data.design.arms[0]])

    def _factor_second_stage(self, lam):
        if lam not in self._second_stage:
            rows = self.fold.target
            self._second_stage[lam] = guarded_factor(self.data.design.V[rows], self.v_kernel, len(rows) * lam,
                                                      self.data.n_threads,
                                                      "the second-stage Cholesky factor of K_V + nλ₁I")
        return self._second_stage[lam]

    def _first_stage_factor(self, arm: int, rows0: np.ndarray):
        # one factor of K_X0 + mλ₀I per arm, shared by the terms of a split fold-arm
        if arm not in self._first_stage:
            self._first_stage[arm] = guarded_factor(self.data.Xo[rows0], self.x_kernel, len(rows0) * self.lam0[arm],
                                                     self.data.n_threads,
                                                     "the first-stage Cholesky factor of K_X0 + mλ₀I")
        return self._first_stage[arm]

    def build_arm(self, arm: int, pseudo, lam: float) -> RidgeFoldArm:
        """The fold-arm of ``pseudo`` with the second-stage penalty ``lam`` (:class:`PseudoOutcomeFold`)."""
        data, fold = self.data, self.fold
        design, Xo = data.design, data.Xo
        V, Y, A = design.V, design.Y, design.A
        rows = pseudo.rows
        no_x = np.zeros((0, Xo.shape[1]))
        no_y = np.zeros((0, Y.shape[1]))
        shift = len(rows) * lam
        if data.mode == "onestep":
            L_V, jit_v = guarded_factor(V[rows], self.v_kernel, shift, data.n_threads,
                                         "the one-step Cholesky factor of K_V + nλ₁I")
        else:
            L_V, jit_v = self._factor_second_stage(lam)
        jitter = {"V": jit_v}
        if pseudo.has_first_stage and self.first_stage[arm] == "forest":
            from .forest_first_stage import forest_fold_arm

            return forest_fold_arm(data=data, fold=fold, arm=arm, pseudo=pseudo, L_V=L_V, shift=shift + jit_v,
                                   jitter=jitter, v_kernel=self.v_kernel, settings=self.forest, seed=self.seed,
                                   prebuilt=self.prebuilt.get(arm))
        if pseudo.has_first_stage:
            rows0 = fold.nuisance[A[fold.nuisance] == arm]
            L_X0, jitter["X"] = self._first_stage_factor(arm, rows0)
            X1, X0, Y0 = Xo[rows], Xo[rows0], Y[rows0]
        else:
            L_X0, X1, X0, Y0 = _EMPTY, no_x, no_x, no_y
            rows0 = np.zeros(0, dtype=np.intp)
        return RidgeFoldArm(
            L_V=L_V, V1=V[rows], v_kernel=self.v_kernel, pseudo=pseudo, Y1=Y[rows], X1=X1, L_X0=L_X0, X0=X0,
            Y0=Y0, x_kernel=self.x_kernel, shift=shift + jit_v, jitter=jitter,
            atom_units=np.concatenate([rows, rows0]),
        )


def factor_bytes(mode: str, A: np.ndarray, folds, second_stage_factors: int = 1) -> float:
    """Bytes of the Cholesky factors a ridge fit holds once both arms are built (8 bytes per entry).

    Per fold: ``second_stage_factors`` factors over D1, one per distinct
    second-stage penalty (1 when the arms' λ₁ agree; in the doubly robust
    mode the plug-in part's λ₁ᵖ counts too, :func:`second_stage_penalties`);
    for one-step one per arm over the arm's D1 units; and, for the modes with
    a first stage (dr, pi), one factor per arm over the arm's D0 units.
    """
    total = 0.0
    arms = np.unique(A)
    for fold in folds:
        if mode == "onestep":
            total += sum(float(np.sum(A[fold.target] == arm)) ** 2 for arm in arms)
            continue
        total += second_stage_factors * float(len(fold.target)) ** 2
        if uses_first_stage(mode):
            total += sum(float(np.sum(A[fold.nuisance] == arm)) ** 2 for arm in arms)
    return 8.0 * total


def second_stage_penalties(params, mode: str) -> set:
    """The distinct penalties of the second stages over D1: the arms' λ₁ and, doubly robust, their λ₁ᵖ."""
    penalties = set(params["lam1"].values())
    if mode == "dr" and params.get("lam1_plugin"):
        penalties |= set(params["lam1_plugin"].values())
    return penalties


#: Documented defaults of the ridge estimator's hyperparameters.  The penalty
#: 0.01 (both stages, K + nλI) was the best of {1e-4, 1e-3, 1e-2, 3e-2, 0.1}
#: for the doubly robust fit on the paper's simulation at n = 2000 and 4000
#: (integrated squared error; benchmarks/paper_defaults.py reruns that check).
RIDGE_DEFAULTS = {
    "lam0": 1e-2,          # first stage, K_X0 + mλ₀I
    "lam1": 1e-2,          # second stage, K_V + nλ₁I
    # Doubly robust mode: the penalty of the plug-in part μ̂₀(X) of the pseudo-outcome, smoothed in V apart from
    # the correction (ccme.estimators.base.SplitSecondStage).  None: λ₁ for both parts (one regression), unless
    # tuned (tune="auto" tunes it by leave-one-out on μ̂₀(X_i)).
    "lam1_plugin": None,
    "x_kernel": "gaussian",
    "v_kernel": "gaussian",
    "y_kernel": "gaussian",
    "x_bandwidth": "median",
    "v_bandwidth": "median",
    "y_bandwidth": "silverman",
    # Stage 1: "kernel" (kernel ridge on X), "forest" (random-forest weights,
    # ccme.estimators.forest_first_stage) or "auto" (per arm, the one with the
    # smaller validated first-stage error; tune="none": the kernel); per arm as
    # a dict {1: .., 0: ..}.  `forest` overrides FOREST_DEFAULTS' settings.
    "first_stage": "kernel",
    "forest": None,
    # The exact path ("exact": Cholesky factors of the n × n kernel matrices) or the low-rank
    # one ("lowrank": Nyström features, ccme.estimators.lowrank); "auto": low-rank above
    # ccme.estimators.lowrank.APPROX_THRESHOLD units.  rank_tol, max_rank and landmark_pool
    # set the low-rank path's rank (LOWRANK_DEFAULTS).
    "approx": "auto",
    **LOWRANK_DEFAULTS,
}


#: Cross-fitting repetitions a ridge fit runs by default (``fit(n_rep=None)``; :attr:`RidgeEstimator.default_n_rep`).
#: Three repetitions average out the split's own noise, which helps the neural estimators
#: (:data:`ccme.estimators.training.NEURAL_N_REP`); ridge's error is not the split's: 3 against 1 on the zoo's
#: "choose" cases (``python benchmarks/tuning_rule.py --setting ccme.estimators.ridge.RIDGE_N_REP=1,3 --split choose
#: --seeds 1,2,3 --eval-points 150 --stem ridge_n_rep``, ``benchmarks/results/ridge_n_rep_choose.txt``) gave 0.998
#: (5 case-arms better, 2 worse, none by more than 4%) for 1.24 times the fit time, so one cross-fit stays.
RIDGE_N_REP = 1


class RidgeEstimator(Estimator):
    """``method="ridge"``: kernel ridge regression in both stages (see the module docstring)."""

    name = "ridge"
    title = "kernel ridge regression"
    defaults = RIDGE_DEFAULTS
    aliases = {"lam": ("lam0", "lam1"), "kernel": ("x_kernel", "v_kernel")}
    supports_bootstrap = True

    @property
    def default_n_rep(self) -> int:
        """Repetitions of the cross-fit ``fit(n_rep=None)`` averages: :data:`RIDGE_N_REP`."""
        return RIDGE_N_REP

    def prepare(self, options: dict, *, design, Xo, seed: int) -> Parameters:
        # The covariate groups (raw variables; a categorical's indicators together) of X and V (ccme.kernels).
        x_groups, v_groups = design_groups(design, Xo)
        first_stage = check_first_stage(options["first_stage"], design.treatment)
        return Parameters({
            "kernels": {
                "x": resolve_kernel(options["x_kernel"], options["x_bandwidth"], Xo, what="x_bandwidth", seed=seed,
                                    groups=x_groups),
                "v": resolve_kernel(options["v_kernel"], options["v_bandwidth"], design.V, what="v_bandwidth",
                                    seed=seed, groups=v_groups),
                "y": resolve_kernel(options["y_kernel"], options["y_bandwidth"], design.Y, what="y_bandwidth",
                                    seed=seed, density=True),
            },
            "lam0": per_arm_positive(options["lam0"], "lam0", design.treatment),
            "lam1": per_arm_positive(options["lam1"], "lam1", design.treatment),
            "lam1_plugin": None if options["lam1_plugin"] is None else
            per_arm_positive(options["lam1_plugin"], "lam1_plugin", design.treatment),
            "first_stage": first_stage,
            "forest": check_forest_settings(options["forest"]),
            "approx": resolve_approx(options["approx"], design.n, first_stage),
            "lowrank": check_lowrank_settings(options),
        })

    def tune(self, params: Parameters, *, data: CrossFitData, folds, grids: dict, seeds, auto: bool) -> Tuned:
        """λ₀, λ₁ and the X/V bandwidths (per covariate group) by exact leave-one-out (:func:`ccme.tuning.tune_ridge`)."""
        from ..tuning import TuningReport, tune_ridge
        from .forest_first_stage import FirstStageSelection, needs_selection

        # A forest first stage is grown (and "auto" resolved) between the stage-1 and stage-2 tuning.
        selection = FirstStageSelection(data=data, folds=folds, seeds=seeds) if needs_selection(params, data.mode) \
            else None
        if selection is not None and all(choice == "forest" for choice in params["first_stage"].values()):
            grids = {k: v for k, v in grids.items() if k not in ("lam0", "x_bandwidth")}  # no kernel first stage
        if selection is None and not any(k in grids for k in ("lam0", "lam1", "lam1_plugin", "x_bandwidth",
                                                             "v_bandwidth")):
            return Tuned(params, TuningReport())
        params, report = tune_ridge(data=data, folds=folds, params=params, grids=grids, first_stage=selection,
                                    seed=int(seeds[0]))
        return Tuned(params, report, prebuilt={} if selection is None else selection.prebuilt)

    def fit_fold(self, params: Parameters, *, data: CrossFitData, fold, seed: int, prebuilt=None):
        """The exact fold (:class:`RidgeFold`) or, with ``params["approx"] == "lowrank"``, :class:`LowRankFold`."""
        if params.get("approx") == "lowrank":
            return LowRankFold(params, data, fold, seed=seed)
        return RidgeFold(params, data, fold, seed=seed, prebuilt=prebuilt)

    def memory_bytes(self, params: Parameters, *, mode, A, folds) -> float:
        """Bytes of the Cholesky factors the fit will hold (:func:`factor_bytes`), checked before fitting.

        The low-rank path checks its n × r features once their rank is known (0 here).
        """
        if params.get("approx") == "lowrank":
            return 0.0
        return factor_bytes(mode, A, folds, second_stage_factors=len(second_stage_penalties(params, mode)))

    def describe(self, params: Parameters, *, design, outcome_columns, embeddings) -> list:
        k = params.kernels
        return [
            ("Kernels", [
                ("X (outcome model)", k["x"].describe(outcome_columns)),
                ("V (second stage)", k["v"].describe(design.v_names)),
                ("Y (outcome)", k["y"].describe(design.y_names)),
            ]),
            ("Penalties (K + n*lambda*I)", [
                ("lambda0 (stage 1)", _per_arm_text(params["lam0"], design.treatment)),
                ("lambda1 (stage 2)", _per_arm_text(params["lam1"], design.treatment)),
            ] + _plugin_penalty_rows(params, design, embeddings)),
            ("Algebra", [("path", _algebra_text(params))]),
        ] + first_stage_section(params, embeddings, design.treatment)

    def diagnostics(self, embeddings) -> list:
        facts = [part.diagnostics() for emb in embeddings.values() for part in emb.parts]
        rows = []
        jitters = [f["jitter"] for f in facts]
        if any(j > 0 for j in jitters):
            rows.append(("Cholesky jitter", f"up to {max(jitters):.3g} added"))
        for role, label in (("V", "V (stage 2)"), ("X", "X (stage 1)")):
            ranks = [f["ranks"][role] for f in facts if role in f.get("ranks", {})]
            if ranks:
                error = max(f["trace_error"][role] for f in facts if role in f["trace_error"])
                span = f"{min(ranks)}" if min(ranks) == max(ranks) else f"{min(ranks)}-{max(ranks)}"
                rows.append((f"Nystrom rank, {label}", f"{span} (trace error <= {error:.2g})"))
        return [("Numerics", rows)] if rows else []


def per_arm_positive(value, name: str, treatment=None) -> dict:
    """A positive number, or a dict of them per arm (:func:`ccme.estimators.base.per_arm`), as a per-arm dict."""
    return per_arm(value, name, _positive, treatment)


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"`{name}` must be a positive number; got {value!r}")
    v = float(value)
    if not (v > 0 and np.isfinite(v)):
        raise ParameterError(f"`{name}` must be a positive number; got {value!r}")
    return v


def _plugin_penalty_rows(params, design, embeddings) -> list:
    """The summary's row of the doubly robust plug-in part's own penalty λ₁ᵖ (none when no fold-arm is split)."""
    plugin = params.get("lam1_plugin")
    if not plugin or not any(isinstance(part, SplitSecondStage) for emb in embeddings.values() for part in emb.parts):
        return []
    return [("lambda1, plug-in part", _per_arm_text(plugin, design.treatment) + "; correction at lambda1")]


def _algebra_text(params) -> str:
    if params.get("approx") != "lowrank":
        return "exact (Cholesky factors of the n x n kernel matrices)"
    s = params["lowrank"]
    return f"low-rank (Nystrom features; rank_tol {s['rank_tol']:.2g}, max_rank {s['max_rank']})"


def _per_arm_text(values: dict, treatment=None) -> str:
    distinct = set(values.values())
    if len(distinct) == 1:
        return f"{distinct.pop():.4g} ({'both' if len(values) == 2 else 'all'} arms)"
    if treatment is None or treatment.binary:
        return f"{values[1]:.4g} (treated), {values[0]:.4g} (control)"
    return ", ".join(f"{values[arm]:.4g} ({treatment.label(arm)!r})" for arm in treatment.arms)
