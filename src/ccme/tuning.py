"""Automatic hyperparameter selection for the ridge CCME.

``ccme.fit(..., tune="auto")`` (the default) chooses, for the ridge estimator,

- the penalties λ₀ (stage 1, per arm) and λ₁ (stage 2, one value for both
  arms so that they share the factorisation of K_V + nλ₁I) by exact
  leave-one-out cross-validation of the RKHS-valued ridge regressions: the
  loss is the squared RKHS distance between a held-out target (φ(Y) in stage
  1, the pseudo-outcome ξ̂ in stage 2) and its prediction, summed over the
  cross-fitting folds.  For a linear smoother the leave-one-out residual of
  unit i is r_i / (1 − H_ii), so one factorisation of the kernel serves the
  whole λ path (:func:`ccme._backend.krr_loo_path`);
- optionally (``tune={"x_bandwidth": [...], "v_bandwidth": [...]}``) the X and
  V bandwidths, as factors multiplying the median-heuristic bandwidths, by
  the same criterion;
- each arm's outcome (read-out) bandwidth σ_y, as a factor multiplying
  Silverman's rule, by weighted least-squares cross-validation of the
  arm's conditional density: for
  each fold's estimate p̂ and the units it did not use in its second stage,
  Σ_j ω_j [∫ p̂(y | V_j)² dy − 2 p̂(Y_j | V_j)] with ω_j = 1{A_j = a}/π̂_a(X_j)
  is an unbiased estimate (up to a constant) of the integrated squared error
  ∫ (p̂ − p^a)² dy averaged over V, by ignorability.  σ_y only enters the
  read-out of the fitted embedding (the ridge weights do not depend on it),
  so it is chosen after the fit at no refitting cost.  The arms get their own
  σ_y, as separate kernel density estimates would; the common outcome kernel
  of the embedding (``res.kernels["y"]``, used by comparisons between the
  arms) keeps the rule's bandwidth.

The targets' RKHS inner products enter through feature coordinates: a pivoted
Cholesky factorisation of the outcome kernel over all observed outcomes,
k_Y(Y_i, Y_j) ≈ G_i·G_j (to 1e-8).  The input kernels are factored the same
way, K ≈ LLᵀ, stopping once the largest residual diagonal is below
1e-2 · min(1, nλ_min) (so that the hat matrices are accurate to about 1e-2 at
the smallest penalty of the grid, and better at the larger ones) or at rank
2000; at full rank the criterion is exactly the leave-one-out error (tests
compare it with brute-force refits).

Hyperparameters the user sets explicitly are never tuned.  The neural
estimators select by validation loss instead: :mod:`ccme.estimators.neural_tuning`.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from . import _backend
from .errors import CcmeWarning, ParameterError
from .kernels import Kernel
from .grids import outcome_grid
from .memory import check_allocation
from .pseudo import pseudo_outcome, uses_first_stage
from .estimators.ridge import apply_first_stage

__all__ = ["TuningReport", "TuningCurve", "resolve_tune", "tune_ridge", "tune_outcome_bandwidth", "tune_readout",
           "LAMBDA_GRID", "Y_BANDWIDTH_FACTORS", "NEURAL_LAMBDA_GRID"]

#: Default penalty grid (paper convention K + nλI), both stages.
LAMBDA_GRID = tuple(np.logspace(-4, 0, 9))
#: Default factors of Silverman's outcome bandwidth.
Y_BANDWIDTH_FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
_TUNABLE = ("lam0", "lam1", "x_bandwidth", "v_bandwidth", "y_bandwidth")
#: Deep Feature's penalty grid for ``tune="auto"`` (ΨᵀΨ + nλI, both stages):
#: coarser than the ridge's because each value trains a network
#: (:mod:`ccme.estimators.neural_tuning`).
NEURAL_LAMBDA_GRID = tuple(np.logspace(-4, 0, 5))
_TUNABLE_BY_METHOD = {"ridge": _TUNABLE, "deep_feature": ("lam0", "lam1", "M"), "neural_kernel": ("M",)}
_OUTCOME_TOL = 1e-8
_MAX_RANK = 2000
_ISE_UNITS = 300      # held-out units per fold and arm in the σ_y criterion
_ISE_GRID = 256       # quadrature points of ∫ p̂²
_RANK_TOL = 1e-2      # pivoted Cholesky stops at 1e-2 · min(1, nλ_min)
_EXTENSIONS = 2       # times the default λ₀ grid may grow by a decade below its smallest value


@dataclass(frozen=True)
class TuningCurve:
    """One criterion curve: ``criterion[i]`` at ``values[i]`` of ``parameter``.

    ``arm`` is None for a choice shared by both arms; ``factor`` is the
    bandwidth factor the curve was computed at (for penalty curves).
    """

    parameter: str
    values: np.ndarray
    criterion: np.ndarray
    criterion_name: str
    chosen: float
    arm: int | None = None
    factor: float | None = None

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.TuningCurve"
    STATE_VERSION = 1
    _STATE_FIELDS = ("parameter", "values", "criterion", "criterion_name", "chosen", "arm", "factor")

    def to_state(self) -> dict:
        """The curve as a versioned state for :mod:`ccme.io` (its fields as they are)."""
        from .io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION,
                          **{name: getattr(self, name) for name in self._STATE_FIELDS})

    @classmethod
    def from_state(cls, state) -> "TuningCurve":
        """Inverse of :meth:`to_state`."""
        from .errors import FormatError
        from .io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=cls._STATE_FIELDS)
        if not all(isinstance(state[name], np.ndarray) for name in ("values", "criterion")):
            raise FormatError(f"the stored {state['parameter']!r} tuning curve has no value or criterion array")
        return cls(**{name: state[name] for name in cls._STATE_FIELDS})


@dataclass
class TuningReport:
    """What the automatic tuning chose, the criterion curves, and the time it took."""

    chosen: dict = field(default_factory=dict)
    curves: list = field(default_factory=list)
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.TuningReport"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        """The report as a versioned state for :mod:`ccme.io`.

        ``chosen`` maps a parameter to a value or to a per-arm dict; the
        per-arm dicts are keyed ``"1"``/``"0"`` in the state.  The curves are
        nested as a list of :class:`TuningCurve` states.
        """
        from .io import make_state, str_keys

        chosen = {name: str_keys(value) if isinstance(value, dict) else value for name, value in self.chosen.items()}
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, chosen=chosen,
                          curves=[curve.to_state() for curve in self.curves], seconds=self.seconds,
                          notes=list(self.notes))

    @classmethod
    def from_state(cls, state) -> "TuningReport":
        """Inverse of :meth:`to_state`."""
        from .errors import FormatError
        from .io import check_schema, int_keys

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("chosen", "curves", "seconds", "notes"))
        if not (isinstance(state["chosen"], dict) and isinstance(state["curves"], list)
                and isinstance(state["notes"], list)):
            raise FormatError("the stored tuning report's chosen, curves or notes have the wrong type")
        chosen = {name: int_keys(value, what=f"the tuned {name}") if isinstance(value, dict) else value
                  for name, value in state["chosen"].items()}
        return cls(chosen=chosen, curves=[TuningCurve.from_state(curve) for curve in state["curves"]],
                   seconds=state["seconds"], notes=list(state["notes"]))

    def to_frame(self) -> pd.DataFrame:
        """One row per (curve, grid value)."""
        rows = []
        for c in self.curves:
            for v, crit in zip(c.values, c.criterion):
                rows.append({"parameter": c.parameter, "arm": c.arm, "factor": c.factor, "value": v,
                             "criterion": crit, "criterion_name": c.criterion_name, "chosen": v == c.chosen})
        return pd.DataFrame(rows)


def resolve_tune(tune, method: str, user_keys) -> dict:
    """Interpret ``tune=``: which hyperparameters to tune and on which grids.

    Returns a dict parameter -> grid (λ values, or bandwidth factors); empty
    when nothing is tuned.
    """
    if isinstance(tune, str):
        if tune == "none":
            return {}
        if tune != "auto":
            raise ParameterError(f"`tune` must be 'auto', 'none' or a dict of grids; got {tune!r}")
        if method == "ridge":
            grids = {"lam0": LAMBDA_GRID, "lam1": LAMBDA_GRID, "y_bandwidth": Y_BANDWIDTH_FACTORS}
        elif method == "deep_feature":
            grids = {"lam0": NEURAL_LAMBDA_GRID, "lam1": NEURAL_LAMBDA_GRID}
        else:
            return {}
    elif isinstance(tune, dict):
        tunable = _TUNABLE_BY_METHOD.get(method, ())
        if "lam" in tune and "lam0" in tunable:
            # The alias of the hyperparameters: one grid for both stages.
            clash = [k for k in ("lam0", "lam1") if k in tune]
            if clash:
                raise ParameterError(f"`tune` gives either 'lam' or {clash}, not both")
            tune = {**{k: v for k, v in tune.items() if k != "lam"}, "lam0": tune["lam"], "lam1": tune["lam"]}
        unknown = sorted(set(tune) - set(tunable))
        if unknown:
            raise ParameterError(f"`tune` has unknown key(s) {unknown} for method={method!r}; tunable: {list(tunable)}")
        grids = {}
        for key, values in tune.items():
            try:
                arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
            except (TypeError, ValueError):
                arr = np.array([np.nan])
            if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                raise ParameterError(f"`tune[{key!r}]` must be a non-empty list of positive numbers; got {values!r}")
            if key == "M":
                if np.any(arr != np.round(arr)):
                    raise ParameterError(f"`tune['M']` must be a non-empty list of positive integers; got {values!r}")
                grids[key] = tuple(int(m) for m in np.unique(arr))
            else:
                grids[key] = tuple(np.unique(arr))
    else:
        raise ParameterError(f"`tune` must be 'auto', 'none' or a dict of grids; got {type(tune).__name__}")
    clash = sorted(k for k in grids if k in user_keys)
    if clash and isinstance(tune, dict):
        raise ParameterError(f"{clash} are both set and asked to be tuned; give one or the other")
    return {k: v for k, v in grids.items() if k not in user_keys}


# ---------------------------------------------------------------------------
# penalties (and X/V bandwidth factors) by leave-one-out
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Spectrum:
    """K ≈ Q diag(s2) Qᵀ (Q with orthonormal columns), from a pivoted Cholesky factor."""

    Q: np.ndarray
    s2: np.ndarray
    approximate: bool

    def loo(self, Z, lambdas, n_threads: int = 0) -> np.ndarray:
        return _backend.krr_loo_path(self.Q, self.s2, Z, lambdas, n_threads=n_threads)[0]

    def solve(self, mu: float, B: np.ndarray) -> np.ndarray:
        """(K + μI)⁻¹ B."""
        with threadpool_limits(limits=1, user_api="blas"):
            QtB = self.Q.T @ B
            return self.Q @ (QtB / (self.s2 + mu)[:, None]) + (B - self.Q @ QtB) / mu


def _spectrum(X, kernel: Kernel, factor: float, lam_min: float, n_threads: int) -> _Spectrum:
    """Pivoted Cholesky K ≈ LLᵀ (to _RANK_TOL·min(1, nλ_min)), then the thin SVD of L."""
    n = len(X)
    tol = _RANK_TOL * min(1.0, n * lam_min)
    # L, LW and Q, each n × rank (ccme.memory): refuse rather than be killed at a huge n.
    check_allocation(3 * 8.0 * n * min(n, _MAX_RANK), f"the tuning's low-rank kernel factors ({n} × {min(n, _MAX_RANK)})")
    L, _, residual = _backend.pivoted_cholesky(
        X, kernel.name, kernel.bandwidth_array * factor, tol, _MAX_RANK, n_threads=n_threads
    )
    # Thin SVD through the small r × r eigenproblem LᵀL = W diag(s²) Wᵀ (LAPACK),
    # single-threaded: the result then does not depend on the BLAS thread count,
    # and a busy machine cannot make OpenBLAS threads spin against each other.
    with threadpool_limits(limits=1, user_api="blas"):
        s2, W = np.linalg.eigh(L.T @ L)
        keep = s2 > 1e-13 * max(s2.max(initial=0.0), 1e-300)
        s2, W = s2[keep], W[:, keep]
        Q = (L @ W) / np.sqrt(s2)
    return _Spectrum(Q=Q, s2=s2, approximate=residual > tol)


def _outcome_features(Y, y_kernel: Kernel, n_threads: int):
    # The RKHS of the outcome kernel up to a constant factor (which does not move any argmin).
    G, _, _ = _backend.pivoted_cholesky(Y, y_kernel.name, y_kernel.bandwidth_array, _OUTCOME_TOL, _MAX_RANK,
                                        n_threads=n_threads)
    return G


def _best(criterion: np.ndarray) -> int:
    finite = np.where(np.isfinite(criterion), criterion, np.inf)
    return int(np.argmin(finite))


def tune_ridge(*, data, folds, params, grids, first_stage=None):
    """Choose λ₀, λ₁ (and X/V bandwidth factors) by leave-one-out; returns (params, report).

    ``data`` is the cross-fitting's :class:`ccme.estimators.base.CrossFitData`
    (its scores clipped and cross-fitted); ``grids`` from :func:`resolve_tune`.
    ``first_stage`` (optional), called after the stage-1 tuning as
    ``first_stage(G=G, params=prepared, report=report)``, may set
    ``prepared["first_stage"]`` and returns {(fold index, arm): features of
    μ̂₀ at the fold's second-stage rows in the coordinates G} for the arms
    whose first stage is not the kernel ridge; stage 2 is then tuned on those
    pseudo-outcomes (:mod:`ccme.estimators.forest_first_stage`).
    """
    started = time.perf_counter()
    report = TuningReport()
    mode, design, Xo, scores, n_threads = data.mode, data.design, data.Xo, data.scores, data.n_threads
    prepared = params.to_dict()
    A, Y, V = design.A, design.Y, design.V
    G = _outcome_features(Y, prepared["kernels"]["y"], n_threads)
    uses_stage1 = uses_first_stage(mode)
    approximate = False
    spectra = {}  # (fold, arm, factor) -> _Spectrum of the stage-1 kernel
    x_factor = 1.0

    # Stage 1: KRR of φ(Y) on X among each arm's units of each fold's nuisance part.
    lam0 = dict(prepared["lam0"])
    x_kernel = prepared["kernels"]["x"]
    if uses_stage1 and ("lam0" in grids or "x_bandwidth" in grids):
        lam_grid = np.asarray(grids.get("lam0", (lam0[1],)))
        factors = grids.get("x_bandwidth", (1.0,))
        # The default grid is extended downwards (a decade, two points, at a time, at most
        # _EXTENSIONS times) while the optimum sits at its smallest value: large
        # first-stage samples want smaller penalties.  A user's grid is kept as given.
        extend = grids.get("lam0") is LAMBDA_GRID
        best_overall = {}

        def curve(arm, f, grid):
            nonlocal approximate
            total = np.zeros(len(grid))
            for k, fold in enumerate(folds):
                rows = fold.nuisance[A[fold.nuisance] == arm]
                spectra[(k, arm, f)] = spec = _spectrum(Xo[rows], x_kernel, f, grid.min(), n_threads)
                approximate |= spec.approximate
                total += len(rows) * spec.loo(G[rows], grid, n_threads)
            return total / sum(int(np.sum(A[fold.nuisance] == arm)) for fold in folds)

        for arm in (1, 0):
            arm_grid = lam_grid
            for extension in range(_EXTENSIONS + 1):
                per_factor = np.array([curve(arm, f, arm_grid) for f in factors])
                i_f, i_l = np.unravel_index(_best(per_factor.ravel()), per_factor.shape)
                if not (extend and i_l == 0) or extension == _EXTENSIONS:
                    break
                arm_grid = np.concatenate([arm_grid[0] * 10.0 ** np.array([-1.0, -0.5]), arm_grid])
            best_overall[arm] = (factors[i_f], arm_grid[i_l], per_factor[i_f, i_l])
            for f, values in zip(factors, per_factor):
                report.curves.append(TuningCurve("lam0", arm_grid, values, "LOO (RKHS)", arm_grid[i_l], arm, f))
            lam0[arm] = float(arm_grid[i_l])
        if "x_bandwidth" in grids:
            # One X kernel for both arms: the factor with the smaller summed criterion.
            f_best = min(best_overall.values(), key=lambda t: t[2])[0] if len(factors) > 1 else factors[0]
            if best_overall[1][0] != best_overall[0][0]:
                report.notes.append("the arms preferred different X bandwidth factors; the better one overall is used")
            x_kernel = Kernel(x_kernel.name, tuple(x_kernel.bandwidth_array * f_best),
                              f"{x_kernel.rule} x {f_best:g}, LOO")
            prepared["kernels"]["x"] = x_kernel
            report.chosen["x_bandwidth_factor"] = float(f_best)
            x_factor = f_best
        prepared["lam0"] = lam0
        report.chosen["lam0"] = dict(lam0)

    # Another first stage (a forest), chosen at the stage-1 values, before stage 2 is tuned on its pseudo-outcomes.
    replaced = first_stage(G=G, params=prepared, report=report) if first_stage is not None else {}

    # Stage 2: KRR of the pseudo-outcomes on V over each fold's target part.
    if "lam1" in grids or "v_bandwidth" in grids:
        lam1_now = prepared["lam1"]
        lam_grid = np.asarray(grids.get("lam1", (lam1_now[1],)))
        factors = grids.get("v_bandwidth", (1.0,))
        v_kernel = prepared["kernels"]["v"]
        stage1 = {(k, arm): spectra.get((k, arm, x_factor)) for k in range(len(folds)) for arm in (1, 0)}
        targets = _pseudo_outcome_features(mode, design, Xo, folds, scores, G, x_kernel, lam0, n_threads, stage1,
                                           replaced)
        per_factor = {arm: np.zeros((len(factors), len(lam_grid))) for arm in (1, 0)}
        for i_f, f in enumerate(factors):
            for fold_index, fold in enumerate(folds):
                shared = None
                for arm in (1, 0):
                    rows, Z = targets[fold_index][arm]
                    if mode == "onestep" or shared is None:
                        shared = _spectrum(V[rows], v_kernel, f, lam_grid.min(), n_threads)
                        approximate |= shared.approximate
                    per_factor[arm][i_f] += len(rows) * shared.loo(Z, lam_grid, n_threads)
                    if mode == "onestep":
                        shared = None
        if mode == "onestep":
            lam1 = {}
            for arm in (1, 0):
                crit = per_factor[arm]
                i_f, i_l = np.unravel_index(_best(crit.ravel()), crit.shape)
                lam1[arm] = float(lam_grid[i_l])
                for f, curve in zip(factors, crit):
                    report.curves.append(TuningCurve("lam1", lam_grid, curve / len(design.A), "LOO (RKHS)",
                                                     lam_grid[i_l], arm, f))
            f_best = factors[int(np.argmin([per_factor[1][i].min() + per_factor[0][i].min()
                                            for i in range(len(factors))]))]
        else:
            crit = (per_factor[1] + per_factor[0]) / len(design.A)
            i_f, i_l = np.unravel_index(_best(crit.ravel()), crit.shape)
            lam1 = {1: float(lam_grid[i_l]), 0: float(lam_grid[i_l])}
            for f, curve in zip(factors, crit):
                report.curves.append(TuningCurve("lam1", lam_grid, curve, "LOO (RKHS), both arms", lam_grid[i_l],
                                                 None, f))
            f_best = factors[i_f]
        prepared["lam1"] = lam1
        report.chosen["lam1"] = dict(lam1)
        if "v_bandwidth" in grids:
            prepared["kernels"]["v"] = Kernel(v_kernel.name, tuple(v_kernel.bandwidth_array * f_best),
                                              f"{v_kernel.rule} x {f_best:g}, LOO")
            report.chosen["v_bandwidth_factor"] = float(f_best)
    if approximate:
        report.notes.append(f"a kernel needed more than rank {_MAX_RANK}: the LOO criteria are approximate")
        warnings.warn(
            f"hyperparameter tuning: a kernel matrix needed more than rank {_MAX_RANK} to reach its tolerance; "
            "the leave-one-out criteria are approximate",
            CcmeWarning,
            stacklevel=3,
        )
    note_edges(report)
    report.seconds = time.perf_counter() - started
    return params.replace(**prepared), report


def _pseudo_outcome_features(mode, design, Xo, folds, scores, G, x_kernel, lam0, n_threads, stage1, replaced=None):
    """Per fold and arm: (second-stage rows, feature coordinates of ξ̂ on them).

    The pseudo-outcomes of :mod:`ccme.pseudo` in the outcome features G:
    a_i G(Y_i) + b_i μ̂₀(X_i), with μ̂₀(X_1i) = K_X1X0 (K_X0 + mλ₀I)⁻¹ G_0 through
    the stage-1 kernel's low-rank spectrum (reused from stage-1 tuning when it ran),
    or as given in ``replaced`` ((fold index, arm) → μ̂₀'s features at the rows).
    """
    A = design.A
    out = []
    for k, fold in enumerate(folds):
        per_arm = {}
        target = fold.target
        for arm in (1, 0):
            pseudo = pseudo_outcome(mode, arm, A=A, target=target, scores_target=scores[target])
            first = None
            if pseudo.has_first_stage and replaced and (k, arm) in replaced:
                first = replaced[(k, arm)]
            elif pseudo.has_first_stage:
                rows0 = fold.nuisance[A[fold.nuisance] == arm]
                spec = stage1.get((k, arm)) or _spectrum(Xo[rows0], x_kernel, 1.0, lam0[arm], n_threads)
                solved = spec.solve(len(rows0) * lam0[arm], G[rows0])
                first = apply_first_stage(Xo[pseudo.rows], Xo[rows0], x_kernel, solved, n_threads)
            per_arm[arm] = (pseudo.rows, pseudo.features(G[pseudo.rows], first))
        out.append(per_arm)
    return out


# ---------------------------------------------------------------------------
# outcome bandwidth by weighted least-squares cross-validation
# ---------------------------------------------------------------------------
def tune_outcome_bandwidth(*, embeddings, design, folds, scores, base: Kernel, factors, seed, n_threads=0,
                           weighted=True):
    """Choose each arm's read-out bandwidth σ_y (a factor of ``base``) by weighted least-squares CV.

    ``weighted=False`` (the one-step mode, which targets the arm's observed
    conditional law and uses no propensity) sets every weight ω_j to 1.

    Returns ({arm: Kernel}, [TuningCurve per arm]).
    """
    Y = design.Y
    factors = np.asarray(factors, dtype=np.float64)
    rng = np.random.default_rng(seed)
    widest = Kernel(base.name, tuple(base.bandwidth_array * factors.max()), base.rule)
    grid = outcome_grid(Y, widest, size=_ISE_GRID)[:, None]
    kernels, curves = {}, []
    for arm in (1, 0):
        total = np.zeros(len(factors))
        for fold, part in zip(folds, embeddings[arm].parts):
            held = fold.nuisance[design.A[fold.nuisance] == arm]
            if held.size == 0:
                continue
            chosen = np.sort(rng.choice(held, size=min(_ISE_UNITS, held.size), replace=False))
            p_arm = scores[chosen] if arm == 1 else 1.0 - scores[chosen]
            omega = 1.0 / p_arm if weighted else np.ones(len(chosen))
            # Each chosen unit stands for held.size / chosen.size arm units of the held-out part.
            scale = held.size / chosen.size / len(fold.nuisance) / len(folds)
            atoms, c = part.weights(design.V[chosen], n_threads=n_threads)
            # A held-out unit can be an atom of the fold's first stage (its own
            # outcome, weighted through μ̂₀): leave that atom out of its own
            # evaluation, or the criterion rewards interpolating it.
            own = _own_atoms(part, chosen)
            for i, f in enumerate(factors):
                bw = base.bandwidth_array * f
                on_grid = c.T @ _backend.atom_features(atoms, grid, "density", base.name, bw, n_threads=n_threads)
                square = np.trapezoid(on_grid**2, grid[:, 0], axis=1)
                k_y = _backend.gram(atoms, Y[chosen], base.name, bw, normalized=True, n_threads=n_threads)
                if own is not None:
                    cols = np.flatnonzero(own >= 0)
                    k_y[own[cols], cols] = 0.0
                at_y = np.einsum("kj,kj->j", c, k_y)
                total[i] += scale * np.sum(omega * (square - 2.0 * at_y))
        best = _best(total)
        kernels[arm] = Kernel(base.name, tuple(base.bandwidth_array * factors[best]),
                              f"{base.rule} x {factors[best]:g}, weighted ISE-CV")
        curves.append(TuningCurve("y_bandwidth", base.bandwidth_array[0] * factors, total, "weighted ISE-CV",
                                  base.bandwidth_array[0] * factors[best], arm, None))
    return kernels, curves


def tune_readout(embeddings: dict, *, data, folds, grids: dict, seed: int, report: TuningReport) -> dict:
    """Each arm's embedding read out with its tuned outcome bandwidth (:func:`tune_outcome_bandwidth`).

    Adds the curves, choices and time to ``report``; returns new embeddings
    ({arm: Embedding}) sharing the fitted weights (σ_y does not change them).
    """
    if data.design.Y.shape[1] != 1:
        report.notes.append("the outcome bandwidth is tuned for a one-dimensional outcome only; the rule was kept")
        return embeddings
    started = time.perf_counter()
    chosen, curves = tune_outcome_bandwidth(
        embeddings=embeddings, design=data.design, folds=folds, scores=data.scores, base=embeddings[1].y_kernel,
        factors=grids["y_bandwidth"], seed=seed, n_threads=data.n_threads, weighted=data.mode != "onestep",
    )
    report.curves.extend(curves)
    report.chosen["y_bandwidth"] = {arm: float(k.bandwidth_array[0]) for arm, k in chosen.items()}
    note_edges(report)
    report.seconds += time.perf_counter() - started
    return {arm: embeddings[arm].with_readout(kernel) for arm, kernel in chosen.items()}


def note_edges(report: TuningReport) -> None:
    """Say when a choice sits at the edge of its grid (the optimum may lie beyond it)."""
    for c in report.curves:
        values = np.asarray(c.values)
        if len(values) > 2 and c.chosen in (values.min(), values.max()):
            side = "smallest" if c.chosen == values.min() else "largest"
            arm = "" if c.arm is None else f" ({'treated' if c.arm == 1 else 'control'})"
            note = f"{c.parameter}{arm} chose the {side} value of its grid ({c.chosen:.3g}); consider extending the grid"
            if note not in report.notes:
                report.notes.append(note)


def _own_atoms(part, units) -> np.ndarray | None:
    """For each unit, the index of the atom that is its own outcome (-1 if none); None if unknown."""
    atom_units = getattr(part, "atom_units", None)
    if atom_units is None:
        return None
    position = {int(u): k for k, u in enumerate(atom_units)}
    return np.array([position.get(int(u), -1) for u in units], dtype=np.intp)
