"""The estimator protocol: what every CCME estimator provides to :func:`ccme.fit`.

This module owns the declared interfaces between :func:`ccme.fit`'s
pipeline (:mod:`ccme.crossfit`) and the estimators.  An estimator
(:class:`Estimator`) goes through the stages

1. ``prepare(options, design=, Xo=, seed=)`` → :class:`Parameters`: rules
   (bandwidths, grids, …) resolved on the data and every value validated,
   frozen; ``params.kernels["y"]`` is the normalised outcome kernel;
2. ``tune(params, data=, folds=, grids=, seeds=, auto=)`` → :class:`Tuned`:
   new parameters, the :class:`ccme.tuning.TuningReport`, and fold-arms the
   tuning already fitted with the chosen values (kept, not refitted);
3. ``fit_fold(params, data=, fold=, seed=, prebuilt=)`` → a :class:`FoldFit`,
   whose ``arm(a)`` builds that fold's :class:`FoldArm` for arm ``a`` (on
   first use: a user asking only about Y¹ never pays for Y⁰);
4. ``memory_bytes``, ``describe`` and ``diagnostics`` for the memory guard
   and the summary.

A :class:`FoldArm` represents μ̂(v) = Σ_k c_k(v) φ(y_k) on one fold: its atoms
y_k, ``weights(V)`` = c(V) and ``contract(V, points, feature, …)`` =
Σ_k c_k(v) F(y_k, point) for the features of :mod:`ccme.embedding`.  A fold-arm
whose second stage is a linear smoother of per-unit pseudo-outcomes also
implements :class:`LinearSecondStage`, which is all the multiplier
bootstrap (:mod:`ccme.bootstrap`) needs.  New learners, kernels and low-rank
or distributed paths are new implementations of these interfaces.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..errors import ParameterError

__all__ = ["Estimator", "Parameters", "CrossFitData", "FoldFit", "FoldArm", "LinearSecondStage", "FirstStageInfluence",
           "SplitSecondStage", "PseudoOutcomeFold", "linear_terms", "doubly_robust_split",
           "Tuned", "TwoStageAtoms", "resolve_options", "FactoredArm", "contract_factored", "project_atoms"]


def _freeze(value):
    if isinstance(value, Mapping) and not isinstance(value, Parameters):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    return value


def _thaw(value):
    if isinstance(value, Mapping) and not isinstance(value, Parameters):
        return {k: _thaw(v) for k, v in value.items()}
    return value


class Parameters(Mapping):
    """An estimator's hyperparameters as used: a read-only mapping (nested mappings frozen too).

    ``params["lam0"]``, ``params.kernels["y"]``; :meth:`replace` gives a
    changed copy; :meth:`to_dict` a plain, mutable copy.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping):
        object.__setattr__(self, "_values", _freeze(dict(values)))

    def __setattr__(self, name, value):
        raise AttributeError("Parameters are immutable; use replace()")

    def __getitem__(self, key):
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Parameters({', '.join(sorted(self._values))})"

    @property
    def kernels(self) -> Mapping:
        """Role ("x", "v", "y") → :class:`ccme.kernels.Kernel`."""
        return self._values["kernels"]

    def replace(self, **changes) -> "Parameters":
        """A copy with some values changed."""
        return Parameters({**self._values, **changes})

    def to_dict(self) -> dict:
        """A plain, mutable deep copy of the mappings (the leaves are shared)."""
        return _thaw(self._values)

    STATE_SCHEMA = "ccme.Parameters"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        """The values as a versioned state for :mod:`ccme.io` (see :func:`value_state`)."""
        from ..io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, values=value_state(self._values))

    @classmethod
    def from_state(cls, state) -> "Parameters":
        """Inverse of :meth:`to_state`."""
        from ..io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("values",))
        return cls(value_from_state(state["values"]))


def value_state(value):
    """A hyperparameter value as a state tree: the JSON types and arrays as they are, the rest tagged.

    Tuples, mappings (any hashable keys: the arms 1/0 or the roles "x", "v",
    "y"), kernels and the neural training settings become one-key dicts
    ({"tuple": [...]}, {"mapping": [[key, value], ...]}, {"kernel": state},
    {"training": fields}); :func:`value_from_state` reverses it.  Anything
    else raises a FormatError naming its type.
    """
    from ..errors import FormatError
    from ..kernels import Kernel
    from .training import TrainingSettings

    if value is None or isinstance(value, (bool, int, float, str, np.generic, np.ndarray)):
        return value
    if isinstance(value, (tuple, list)):
        return {"tuple" if isinstance(value, tuple) else "list": [value_state(v) for v in value]}
    if isinstance(value, Mapping):
        return {"mapping": [[value_state(k), value_state(v)] for k, v in value.items()]}
    if isinstance(value, Kernel):
        return {"kernel": value.to_state()}
    if isinstance(value, TrainingSettings):
        return {"training": {f: value_state(getattr(value, f)) for f in TrainingSettings.__dataclass_fields__}}
    raise FormatError(f"a hyperparameter of type {type(value).__name__} cannot be saved")


def value_from_state(state):
    """Inverse of :func:`value_state`."""
    from ..errors import FormatError
    from ..kernels import Kernel
    from .training import TrainingSettings

    if not isinstance(state, dict):
        return state
    if len(state) != 1:
        raise FormatError("a stored hyperparameter value is not a tagged value")
    (tag, inner), = state.items()
    if tag == "tuple":
        return tuple(value_from_state(v) for v in inner)
    if tag == "list":
        return [value_from_state(v) for v in inner]
    if tag == "mapping":
        return {_hashable(value_from_state(k)): value_from_state(v) for k, v in inner}
    if tag == "kernel":
        return Kernel.from_state(inner)
    if tag == "training":
        fields = set(TrainingSettings.__dataclass_fields__)
        # Files written before weight decay existed lack it: they trained without.
        if not isinstance(inner, dict) or set(inner) not in (fields, fields - {"weight_decay"}):
            raise FormatError("the stored training settings do not have the expected fields")
        return TrainingSettings(**{k: value_from_state(v) for k, v in inner.items()})
    raise FormatError(f"a stored hyperparameter value has the unknown tag {str(tag)[:40]!r}")


def _hashable(key):
    from ..errors import FormatError

    if isinstance(key, (list, dict, np.ndarray)):
        raise FormatError("a stored mapping has an unhashable key")
    return key


#: The arms of a binary treatment, as the per-arm hyperparameter dicts are keyed when no design says otherwise.
BINARY_ARM_CODES = (1, 0)


def per_arm(value, name: str, check, treatment=None) -> dict:
    """A hyperparameter given once or per arm, as {arm code: value} over every arm (each value through ``check``).

    ``value`` is one setting for every arm, or a dict with one key per arm:
    the codes 1/0 (binary) or the treatment's level labels.  ``treatment`` (a
    :class:`ccme.formula.Treatment`) gives the arms; None: a binary treatment.
    """
    arms = BINARY_ARM_CODES if treatment is None else treatment.arms
    if isinstance(value, dict):
        try:
            given = {arm if treatment is None else treatment.code(arm, name): v for arm, v in value.items()}
        except ParameterError:
            given = {}
        if set(given) != set(arms) or len(given) != len(value):
            wanted = "1 and 0" if treatment is None or treatment.binary else ", ".join(map(repr, treatment.levels))
            raise ParameterError(f"`{name}` as a dict must have the keys {wanted} (one per arm); got {list(value)}")
        return {arm: check(given[arm], name) for arm in arms}
    one = check(value, name)
    return {arm: one for arm in arms}


@dataclass(frozen=True)
class CrossFitData:
    """What every stage of the cross-fitting sees: the design, the outcome model's covariates and the scores.

    Attributes
    ----------
    mode : {"dr", "ipw", "pi", "onestep"}
    design : ccme.formula.Design
    Xo : ndarray (n, d)
        The first-stage (outcome model) covariates, a subset of X's columns.
    scores : ndarray (n, k)
        Each arm's clipped cross-fitted probability, column j for arm code j
        (each row from the fold that left unit i out; a vector π̂ given here
        becomes [1 − π̂, π̂], :func:`ccme.propensity.arm_probabilities`).  With
        ``fit(normalize_weights=True)``, the Hájek-normalised probabilities of
        :func:`ccme.pseudo.hajek_scores`: read a unit's weight in its own arm
        only (as :func:`ccme.pseudo.pseudo_outcome` does).
    n_threads : int
    sampling_weights : ndarray (n,) or None
        The sampling weights w_i of ``fit(weights=)``, normalised to mean 1
        (:mod:`ccme.sampling_weights`); None for the unweighted fit (also when
        the weights given are all equal).  Only the low-rank ridge path reads
        them (:mod:`ccme.estimators.lowrank`); ``fit`` refuses them elsewhere.
    fold_outcomes : tuple of ndarray (n, d_y), or None
        Per fold, the outcome the read-out bandwidth's criterion scores that
        fold's estimate on, in place of ``design.Y`` (a located fit's
        residuals from each fold's own location models,
        :func:`ccme.location.fold_residuals`); None: ``design.Y``.
    """

    mode: str
    design: object
    Xo: np.ndarray
    scores: np.ndarray
    n_threads: int = 0
    sampling_weights: np.ndarray | None = None
    fold_outcomes: tuple | None = None

    def __post_init__(self):
        from ..propensity import arm_probabilities

        object.__setattr__(self, "scores", arm_probabilities(self.scores))

    @property
    def A(self) -> np.ndarray:
        return self.design.A

    @property
    def arms(self) -> tuple:
        """The arm codes in the design's order (:attr:`ccme.formula.Design.arms`)."""
        return self.design.arms


@dataclass(frozen=True)
class Tuned:
    """The outcome of :meth:`Estimator.tune`: parameters, report, and fold-arms already fitted with them.

    ``prebuilt`` maps (fold index, arm) to a fold-arm the tuning trained with
    the chosen parameters and the fold's seed, exactly as ``fit_fold`` would.
    """

    params: Parameters
    report: object
    prebuilt: Mapping = field(default_factory=dict)


class FoldArm(ABC):
    """One arm's embedding fitted on one cross-fitting fold: μ̂(v) = Σ_k c_k(v) φ(y_k).

    Attributes
    ----------
    atoms : ndarray (N, d_y)
        The outcome atoms y_k, in the order of :meth:`weights`.
    atom_units : ndarray of int or None
        The data row behind each atom (lets the outcome-bandwidth tuning leave
        a unit's own atom out of its evaluation); None when unknown.
    """

    atom_units: np.ndarray | None = None

    @property
    @abstractmethod
    def atoms(self) -> np.ndarray:
        """The atoms y_k, shape (N, d_y)."""

    @abstractmethod
    def weights(self, V_eval, n_threads: int = 0):
        """(atoms (N, d_y), c (N, n_eval)): the weights c_k(v) at each row of ``V_eval``."""

    @abstractmethod
    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0) -> None:
        """``out += scale × Σ_k c_k(v) F(y_k, point)`` for the ``feature`` of :mod:`ccme.embedding`."""

    @property
    def n_atoms(self) -> int:
        return self.atoms.shape[0]

    @property
    def resolution_points(self) -> np.ndarray:
        """The points whose spacing is the estimate's resolution in y (:func:`ccme.tuning.readout_floor`): the atoms,
        unless they refine coarser points (Neural-Kernel's grid spread over outcomes)."""
        return self.atoms

    def diagnostics(self) -> dict:
        """Numerical facts worth a line in the summary (e.g. Cholesky jitter); empty by default."""
        return {}


class TwoStageAtoms:
    """Atoms of a two-stage fold-arm: the second-stage outcomes Y1, then the first-stage outcomes Y0.

    For fold-arms (ridge, forest first stage, low-rank) with attributes
    ``Y1``, ``Y0`` and ``pseudo`` (:class:`ccme.pseudo.PseudoOutcome`), whose
    weights c(v) = [c₁(v); c₀(v)] follow that order (eq. emp_density); the
    second-stage units are the pseudo-outcome's rows.  Listed before
    :class:`FoldArm` among the bases.
    """

    @property
    def atoms(self) -> np.ndarray:
        return np.vstack([self.Y1, self.Y0])

    @property
    def n_atoms(self) -> int:
        return self.Y1.shape[0] + self.Y0.shape[0]

    @property
    def units(self) -> np.ndarray:
        return self.pseudo.rows


class LinearSecondStage(ABC):
    """A fold-arm whose second stage is linear in per-unit pseudo-outcomes, μ̂(v) = Σ_i β_i(v) ξ̂_i.

    What the multiplier bootstrap (:mod:`ccme.bootstrap`) needs: the units i,
    β(v), the features ⟨ξ̂_i, F(·, y)⟩ of their pseudo-outcomes, and the
    in-sample residuals' features (I − H) P.
    """

    @property
    @abstractmethod
    def units(self) -> np.ndarray:
        """Data rows of the second-stage units, in the order of :meth:`beta`'s rows."""

    @abstractmethod
    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) for each row of ``V_eval``, shape (n_units, n_eval)."""

    @abstractmethod
    def unit_features(self, points, feature: str, kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = ⟨ξ̂_i, F(·, y)⟩ for each unit, shape (n_units, n_features), ``kernel`` a Kernel.

        ``cache`` (this method and :meth:`first_stage_influence`): None, or a
        dict that lives for one bootstrap call, in which an implementation may
        keep what its first stage gives every term alike (the terms of a
        split fold-arm and their undersmoothed refits share a first stage),
        keyed by what it was computed from.
        """

    @abstractmethod
    def residual_features(self, P: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − H) P, the in-sample residuals of the second-stage smoother applied to unit features."""

    def adjoint_residuals(self, beta: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − Hᵀ) β: iterated Tikhonov's step on the weights β (:func:`ccme.bootstrap.iterated_tikhonov`).

        The default is :meth:`residual_features`, right for a symmetric hat
        matrix H (unweighted ridge); a smoother that is not symmetric (the
        sampling-weighted low-rank ridge, H = Φ G⁻¹ ΦᵀW) overrides it.
        """
        return self.residual_features(beta, n_threads)

    def leverages(self, n_threads: int = 0) -> "np.ndarray | None":
        """H_ii, the diagonal of the second stage's hat matrix over :attr:`units`; None if not available.

        The in-sample residuals (I − H)ξ̂ of a smoother shrink where it follows
        the data closely (H_ii near 1: few units near V_i, little smoothing),
        so a bootstrap built on them underestimates the variance there; the
        bootstrap rescales them to leave-one-out residuals e_i / (1 − H_ii)
        (:data:`ccme.bootstrap.LEVERAGE_CORRECTION`).  The default, None,
        leaves them as they are.
        """
        return None

    def undersmoothed(self, factor: float, penalty_factor: float, V_units: np.ndarray,
                      n_threads: int = 0, cache=None, restore=None) -> "LinearSecondStage | None":
        """This second stage refitted with the V bandwidths × ``factor`` and λ₁ × ``penalty_factor``; None if it cannot be.

        With ``restore`` (one bandwidth per V column), the V columns the
        kernel ignores (bandwidth inf: dropped by the tuning) get those
        bandwidths first (:meth:`ccme.kernels.Kernel.restored`), so that
        ``undersmoothed(1.0, 1.0, V_units, restore=b)`` is the same second
        stage with the dropped covariates given back
        (:func:`ccme.bootstrap.restored_v_bandwidths`).

        The same units, pseudo-outcomes and first stage; only the smoothing
        in V is less (both factors ≤ 1), so the smoothing bias is smaller and
        the variance larger.  The simultaneous bands are computed from it
        (:func:`ccme.bootstrap.bands`, :data:`ccme.bootstrap.SIMULTANEOUS_UNDERSMOOTHING`).
        ``V_units`` holds the second-stage units' V (the design's rows
        :attr:`units`), for an implementation that does not keep them;
        ``cache``, the bootstrap's per-call dict (:meth:`unit_features`), in
        which the terms of a split fold-arm may share what their refits have
        in common.  The default, None, is for a second stage without a V
        kernel (ridge in learned features): the bands then keep one construction.
        """
        return None

    def first_stage_influence(self, beta: np.ndarray, points, feature: str, kernel,
                              n_threads: int = 0, cache=None) -> "FirstStageInfluence | None":
        """The first stage's noise in Σ_i β_i(v) ξ̂_i, linearised; None: the bootstrap conditions on it.

        With μ̂₀(x) = Σ_l S_l(x) φ(Y0_l) linear in the first-stage outcomes, the
        estimate's dependence on their noise ε0_l = φ(Y0_l) − E[φ(Y0_l) | X0_l]
        is Σ_l W_l(v) ε0_l, W_l(v) = Σ_i β_i(v) b_i S_l(X1_i).  An implementation
        returns the first-stage units l, W (for the given ``beta``) and the
        features of the first stage's in-sample residuals, so that the
        multiplier bootstrap can perturb them with the multipliers of the same
        units (one unit is a second-stage unit of one fold and a first-stage
        unit of another).  The default, None, leaves the first stage fixed.
        """
        return None


def shared_piece(cache: dict | None, key: tuple, compute, inputs: tuple = ()):
    """``compute()``, kept in ``cache`` under ``key`` (the bootstrap's per-call dict, see
    :meth:`LinearSecondStage.unit_features`); computed afresh without a cache.

    ``key`` names what the piece belongs to (e.g. the id of a first stage's
    factor, shared by a split fold-arm's terms and their refits, which live as
    long as the fit, so an id is not reused within a call); ``inputs`` are the
    arrays it was computed from, which every later caller must hold too (the
    same object, or equal values: the terms keep their own copies).
    """
    if cache is None:
        return compute()
    if key not in cache:
        cache[key] = (inputs, compute())
    kept, value = cache[key]
    if any(mine is not had and not np.array_equal(mine, had) for mine, had in zip(inputs, kept)):
        raise ValueError(f"fold-arms sharing {key[0]!r} must have the same inputs")
    return value


@dataclass(frozen=True)
class FirstStageInfluence:
    """What :meth:`LinearSecondStage.first_stage_influence` returns.

    Attributes
    ----------
    units : ndarray of int (m,)
        Data rows of the first-stage units.
    weights : ndarray (m, n_eval)
        W_l(v) for each evaluation point of ``beta``.
    residuals : ndarray (m, n_features)
        Features of the first stage's in-sample residuals, (I − H₀) F(Y0).
    """

    units: np.ndarray
    weights: np.ndarray
    residuals: np.ndarray


@dataclass(frozen=True, eq=False)
class SplitSecondStage(FoldArm):
    """A doubly robust fold-arm whose correction and plug-in part are smoothed in V with their own penalties.

    The doubly robust pseudo-outcome is ξ̂_i = ω_i (φ(Y_i) − μ̂₀(X_i)) + μ̂₀(X_i)
    (:func:`ccme.pseudo.split_doubly_robust`).  One ridge regression of ξ̂ on V
    uses one penalty for both parts, and the leave-one-out choice of that
    penalty is set by the correction's noise (the weighted outcomes), so the
    plug-in part, a smooth function of X with little noise, is oversmoothed.
    Here each part has its own second stage,

        μ̂(v) = Σ_i β_i(v; λ₁) ω_i (φ(Y_i) − μ̂₀(X_i)) + Σ_i β_i(v; λ₁ᵖ) μ̂₀(X_i),

    the correction at λ₁ (chosen on ξ̂, as before) and the plug-in part at λ₁ᵖ
    (chosen on μ̂₀(X_i), :func:`ccme.tuning.tune_ridge`).  Both are linear
    smoothers converging to E[ξ̂ | V], so the estimate keeps the doubly robust
    form.  The atoms and their units are the same in both terms, so the
    weights are the sum of the terms' weights: every functional works on it
    unchanged.  The multiplier bootstrap perturbs both terms with the same
    units' multipliers (:func:`linear_terms`).

    Attributes
    ----------
    correction, plugin : FoldArm
        Fold-arms of one estimator over the same atoms, with the pseudo-outcomes
        (ω, −ω) and (0, 1).
    """

    correction: FoldArm
    plugin: FoldArm

    STATE_SCHEMA = "ccme.SplitSecondStage"
    STATE_VERSION = 1

    def __post_init__(self):
        if self.correction.n_atoms != self.plugin.n_atoms or \
                not np.array_equal(self.correction.atom_units, self.plugin.atom_units):
            raise ValueError("the correction and the plug-in part must share their atoms")

    @property
    def terms(self) -> tuple:
        return self.correction, self.plugin

    @property
    def atoms(self) -> np.ndarray:
        return self.correction.atoms

    @property
    def atom_units(self):
        return self.correction.atom_units

    @property
    def units(self) -> np.ndarray:
        return self.correction.units

    @property
    def pseudo(self):
        """The doubly robust pseudo-outcome the two parts add up to."""
        from ..pseudo import PseudoOutcome

        c, p = self.correction.pseudo, self.plugin.pseudo
        return PseudoOutcome(rows=c.rows, a=c.a + p.a, b=c.b + p.b)

    def weights(self, V_eval, n_threads: int = 0):
        atoms, c = self.correction.weights(V_eval, n_threads)
        return atoms, c + self.plugin.weights(V_eval, n_threads)[1]

    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0) -> None:
        for term in self.terms:
            term.contract(V_eval, points, feature, y_kernel, out, scale, n_threads)

    def diagnostics(self) -> dict:
        """The terms' facts merged: the larger jitter, rank and trace error of each role."""
        merged = {}
        for facts in (term.diagnostics() for term in self.terms):
            for key, value in facts.items():
                if isinstance(value, dict):
                    inner = merged.setdefault(key, {})
                    for role, x in value.items():
                        inner[role] = max(inner.get(role, x), x)
                else:
                    merged[key] = max(merged.get(key, value), value)
        return merged

    def to_state(self) -> dict:
        """Both terms' states (:mod:`ccme.io`)."""
        from ..io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, correction=self.correction.to_state(),
                          plugin=self.plugin.to_state())

    @classmethod
    def from_state(cls, state, read_part) -> "SplitSecondStage":
        """Inverse of :meth:`to_state`; ``read_part`` rebuilds a term from its state (a known fold-arm type)."""
        from ..errors import FormatError
        from ..io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("correction", "plugin"))
        try:
            return cls(correction=read_part(state["correction"]), plugin=read_part(state["plugin"]))
        except ValueError as exc:
            raise FormatError(f"the stored split fold-arm is inconsistent: {exc}") from None


def linear_terms(part) -> tuple:
    """The linear second stages whose sum is the fold-arm ``part``: its terms if split, else ``(part,)``."""
    return part.terms if isinstance(part, SplitSecondStage) else (part,)


def doubly_robust_split(build, pseudo, lam1: float, lam1_plugin: float | None) -> FoldArm:
    """``build(pseudo, λ)``, or the :class:`SplitSecondStage` of the correction at λ₁ and the plug-in part at λ₁ᵖ.

    What each estimator's :meth:`FoldFit.arm` calls with its own ``build`` (a
    fold-arm of one pseudo-outcome with one second-stage penalty): in the
    doubly robust mode with a plug-in penalty λ₁ᵖ ≠ λ₁ the fold-arm is split
    (:func:`ccme.pseudo.split_doubly_robust`); otherwise, and in every other
    mode (``lam1_plugin`` None), it is one fold-arm, as without the option.
    """
    if lam1_plugin is None or lam1_plugin == lam1:
        return build(pseudo, lam1)
    from ..pseudo import split_doubly_robust

    correction, plugin = split_doubly_robust(pseudo)
    if not np.any(correction.a):
        # No unit of the arm in this fold's second stage: the correction is zero, the estimate its plug-in part.
        return build(plugin, lam1_plugin)
    return SplitSecondStage(correction=build(correction, lam1), plugin=build(plugin, lam1_plugin))


class FoldFit(ABC):
    """One cross-fitting fold of an estimator: ``arm(a)`` builds that fold's :class:`FoldArm` for arm ``a``."""

    @abstractmethod
    def arm(self, arm: int) -> FoldArm:
        """Build (or return the already built) fold-arm of ``arm``."""


class PseudoOutcomeFold(FoldFit):
    """A fold whose fold-arms regress one pseudo-outcome on V with one penalty (the ridge paths).

    :meth:`arm` builds the arm's pseudo-outcome (:func:`ccme.pseudo.pseudo_outcome`)
    and hands :meth:`build_arm` to :func:`doubly_robust_split`, so that every
    path (exact, forest first stage, low-rank, Dask) splits the doubly robust
    fold-arm the same way.  Subclasses set ``data``, ``fold``, ``lam1`` and
    ``lam1_plugin`` ({} outside the doubly robust mode) and implement
    :meth:`build_arm`; :meth:`release` drops what the arm's terms shared
    while they were built (nothing by default).
    """

    def arm(self, arm: int) -> FoldArm:
        """Build arm ``arm``'s fold-arm: split when the doubly robust plug-in penalty λ₁ᵖ differs from λ₁."""
        from ..pseudo import pseudo_outcome

        data, target = self.data, self.fold.target
        pseudo = pseudo_outcome(data.mode, arm, A=data.design.A, target=target, scores_target=data.scores[target])
        try:
            return doubly_robust_split(lambda part, lam: self.build_arm(arm, part, lam), pseudo, self.lam1[arm],
                                       self.lam1_plugin.get(arm))
        finally:
            self.release(arm)

    @abstractmethod
    def build_arm(self, arm: int, pseudo, lam: float) -> FoldArm:
        """The fold-arm of ``pseudo`` (of arm ``arm``) with the second-stage penalty ``lam``."""

    def release(self, arm: int) -> None:
        """Drop what :meth:`build_arm` kept for the terms of ``arm`` (called once the arm is built)."""


class Estimator(ABC):
    """A CCME estimator: the stages :func:`ccme.fit` runs (module docstring).

    Class attributes: ``name`` (the ``method=`` string), ``title`` (for
    summaries), ``defaults`` (documented hyperparameter defaults),
    ``aliases`` (one name setting several hyperparameters, e.g. ``lam`` →
    ``lam0`` and ``lam1``), ``supports_bootstrap`` (its fold-arms implement
    :class:`LinearSecondStage`) and ``bootstrap_caveat`` (None, or what its
    measured coverage says the bootstrap leaves out: every band, interval
    and test of :mod:`ccme.bootstrap` then says it in a
    :class:`ccme.errors.CcmeWarning`, and the summary in a note).
    ``default_n_rep`` is the number of cross-fitting repetitions
    ``fit(n_rep=None)`` runs (1 unless the estimator's own variance, e.g. a
    network's initialisation, makes averaging repetitions pay);
    ``location_from`` the number of covariates in V from which
    ``fit(location="default")`` compares the fits with and without a location
    stage (:func:`ccme.location.default_location`).
    """

    name: str
    title: str
    defaults: Mapping
    aliases: Mapping = MappingProxyType({})
    supports_bootstrap: bool = False
    bootstrap_caveat: str | None = None
    default_n_rep: int = 1

    @property
    def location_from(self) -> int:
        """``fit(location="default")`` is "auto" from this many covariates in V on: :data:`ccme.location.MANY_V_COVARIATES`."""
        from ..location import MANY_V_COVARIATES

        return MANY_V_COVARIATES

    def fit_alternatives(self, params: Parameters, grids: Mapping) -> tuple | None:
        """Values of a hyperparameter that :func:`ccme.fit` compares as whole cross-fits (:mod:`ccme.fit_choice`).

        Parameters
        ----------
        params : Parameters
            The tuned parameters of the fit already made.
        grids : mapping
            What ``tune=`` asks for (:func:`ccme.tuning.resolve_tune`).

        Returns
        -------
        None (the default: nothing is compared this way), or (name, the value
        in ``params``, {each other value: the parameters with it}).
        """
        return None

    def options(self, hyperparameters: dict) -> dict:
        """The defaults updated by the user's hyperparameters (aliases expanded), see :func:`resolve_options`."""
        return resolve_options(self, hyperparameters)

    def user_keys(self, hyperparameters: dict) -> set:
        """The hyperparameters the user set (aliases expanded): never tuned."""
        return {t for key in hyperparameters for t in self.aliases.get(key, (key,))}

    @abstractmethod
    def prepare(self, options: dict, *, design, Xo, seed: int) -> Parameters:
        """Resolve rules on the data and validate values."""

    def tune(self, params: Parameters, *, data: CrossFitData, folds, grids: dict, seeds, auto: bool) -> Tuned:
        """Choose the hyperparameters in ``grids``; by default nothing is tunable."""
        from ..tuning import TuningReport

        return Tuned(params, TuningReport())

    @abstractmethod
    def fit_fold(self, params: Parameters, *, data: CrossFitData, fold, seed: int, prebuilt=None) -> FoldFit:
        """Fit one cross-fitting fold (lazily per arm)."""

    def memory_bytes(self, params: Parameters, *, mode: str, A: np.ndarray, folds) -> float:
        """Bytes the fitted folds will hold, checked by the memory guard before any work (0: not estimated)."""
        return 0.0

    @abstractmethod
    def describe(self, params: Parameters, *, design, outcome_columns, embeddings) -> list:
        """Summary sections ``[(title, [(label, text), ...]), ...]`` for the hyperparameters.

        ``embeddings`` ({arm: Embedding}) lets an estimator report on its
        fitted fold-arms (e.g. the epochs a neural stage trained).
        """

    def diagnostics(self, embeddings: Mapping) -> list:
        """Summary sections about the fitted fold-arms (numerics, training); empty by default."""
        return []

    def training_history(self, embeddings: Mapping, n_folds: int):
        """Training curves of the fitted fold-arms, one row per (arm, repetition, fold, stage, epoch).

        ``n_folds`` is K: an embedding's fold-arms run over the K folds of each
        cross-fitting repetition in turn.

        Raises
        ------
        ParameterError
            For an estimator that is not trained by gradient descent (the default).
        """
        raise ParameterError(f"method {self.name!r} has no training history (it is not trained by gradient descent)")


def resolve_options(estimator, hyperparameters: dict) -> dict:
    """The estimator's defaults updated by the user's hyperparameters (aliases expanded)."""
    options = dict(estimator.defaults)
    allowed = set(estimator.defaults) | set(estimator.aliases)
    unknown = sorted(set(hyperparameters) - allowed)
    if unknown:
        raise ParameterError(
            f"unknown hyperparameter(s) {unknown} for method {estimator.name!r}; allowed: {sorted(allowed)}"
        )
    for alias, targets in estimator.aliases.items():
        if alias in hyperparameters:
            clash = [t for t in targets if t in hyperparameters]
            if clash:
                raise ParameterError(f"give either `{alias}` or {clash}, not both")
            for t in targets:
                options[t] = hyperparameters[alias]
    for key in estimator.defaults:
        if key in hyperparameters:
            options[key] = hyperparameters[key]
    return options


#: Bytes of one block of atom features in :func:`contract_factored`.
_BLOCK_BYTES = 64 * 2**20


class FactoredArm(FoldArm):
    """A fold-and-arm estimator whose weights factor as c(v) = L h(v).

    Over fixed outcome atoms y_k (``atoms``, shape (N, d_y)) the weights are
    a fixed loading matrix ``loadings`` L (N × r) times a coefficient vector
    h(v) ∈ R^r given by :meth:`coefficients`.  The neural estimators have this
    form: Deep Feature with h(v) = (ΨᵀΨ + nλ₁I)⁻¹ψ(v) and L the pseudo-outcome
    coefficients times Ψ (eq. df_density), Neural-Kernel with h(v) = f(v) and
    L = I over the grid points (eq. nk_density).  Subclasses set ``atoms`` and
    ``loadings`` and implement ``coefficients(V_eval) -> (r, n_eval)``.
    """

    loadings: np.ndarray
    _atoms: np.ndarray

    @property
    def atoms(self) -> np.ndarray:
        return self._atoms

    @abstractmethod
    def coefficients(self, V_eval):
        """h(v) for each row of ``V_eval``, shape (r, n_eval)."""

    def weights(self, V_eval, n_threads: int = 0):
        """Atoms and their weights c(v) = L h(v), shape (n_atoms, n_eval)."""
        return self.atoms, self.loadings @ self.coefficients(V_eval)

    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × Σ_k c_k(v) F(y_k, point)``, through :func:`contract_factored`."""
        contract_factored(self.atoms, self.loadings, self.coefficients, V_eval, points, feature, y_kernel, out,
                          scale, n_threads)


class EvaluatedArm(FoldArm):
    """A fold-arm with its weights c(v) computed once at fixed V-points (:meth:`ccme.Embedding.evaluated_at`).

    Every functional at those V-points reads the kept weights, so a table of
    many functionals at a few V-points (:func:`ccme.effects.effect_estimates`)
    computes each fold-arm's weights once instead of once per functional;
    at other V-points it is the fold-arm it was made from.

    Parameters
    ----------
    part : FoldArm
        The fold-arm.
    V : ndarray (n_v, d_v)
        The V-points (encoded).
    n_threads : int, default 0
    """

    def __init__(self, part: FoldArm, V: np.ndarray, n_threads: int = 0):
        self.part = part
        self.V = np.array(V, dtype=np.float64, copy=True)
        self._atoms, self.c = part.weights(self.V, n_threads)
        self.atom_units = part.atom_units

    @property
    def atoms(self) -> np.ndarray:
        return self._atoms

    def _kept(self, V_eval) -> bool:
        V_eval = np.asarray(V_eval)
        return V_eval.shape == self.V.shape and np.array_equal(V_eval, self.V)

    def weights(self, V_eval, n_threads: int = 0):
        """The kept atoms and weights at the fixed V-points; elsewhere the fold-arm's."""
        return (self._atoms, self.c) if self._kept(V_eval) else self.part.weights(V_eval, n_threads)

    def contract(self, V_eval, points, feature, y_kernel, out, scale: float, n_threads: int = 0):
        """``out += scale × Σ_k c_k(v) F(y_k, point)`` from the kept weights (:func:`project_atoms`, in blocks)."""
        if not self._kept(V_eval):
            self.part.contract(V_eval, points, feature, y_kernel, out, scale, n_threads)
            return
        out += scale * project_atoms(self._atoms, lambda F, start, stop: self.c[start:stop].T @ F, self.c.shape[1],
                                     points, feature, y_kernel, out.shape[1], n_threads)

    def diagnostics(self) -> dict:
        return self.part.diagnostics()


def contract_factored(atoms, loadings, coefficients, V_eval, points, feature, y_kernel, out, scale, n_threads=0):
    """``out += scale × h(V)ᵀ (Lᵀ F)`` with F the atoms' features at ``points``, in blocks.

    The cheaper association order for weights c(v) = L h(v): first the r × q
    projection LᵀF (:func:`project_atoms`), then one small product per block
    of evaluation points.  Cost O(N q r + n_eval q r) instead of O(N q n_eval).
    """
    rank = loadings.shape[1]
    projected = project_atoms(atoms, lambda F, start, stop: loadings[start:stop].T @ F, rank, points, feature,
                              y_kernel, out.shape[1], n_threads)
    step = max(1, _BLOCK_BYTES // (8 * max(rank, out.shape[1])))
    for v0 in range(0, len(V_eval), step):
        out[v0:v0 + step] += scale * (coefficients(V_eval[v0:v0 + step]).T @ projected)


def project_atoms(atoms, project, rank: int, points, feature, y_kernel, q: int, n_threads: int = 0) -> np.ndarray:
    """Σ_k L_k F(y_k, ·): the r × q projection of the atoms' features by loadings L, in blocks.

    ``project(F, start, stop)`` returns (L[start:stop])ᵀ F for the features F
    of atoms ``start:stop`` (so that a caller may keep L factored); the blocks
    of atoms and points keep every block of F (from
    :func:`ccme._backend.atom_features`) under 64 MiB.  ``q`` is the number of
    feature columns (the points, or the moments).
    """
    from .. import _backend

    n_atoms = len(atoms)
    projected = np.zeros((rank, q))
    if feature == "moments":
        point_blocks = [slice(0, q)]
    else:
        per_block = max(1, min(len(points), _BLOCK_BYTES // 8))
        point_blocks = [slice(p, min(p + per_block, len(points))) for p in range(0, len(points), per_block)]
    for pb in point_blocks:
        width = max(1, pb.stop - pb.start)
        rows = max(1, _BLOCK_BYTES // (8 * width))
        for a0 in range(0, n_atoms, rows):
            F = _backend.atom_features(
                atoms[a0:a0 + rows], points[pb] if feature != "moments" else points, feature, y_kernel.name,
                y_kernel.bandwidth_array, n_threads=n_threads,
            )
            projected[:, pb] += project(F, a0, min(a0 + rows, n_atoms))
    return projected
