"""Automatic hyperparameter selection for the ridge CCME.

``ccme.fit(..., tune="auto")`` (the default) chooses, for the ridge estimator,

- the penalties λ₀ (stage 1, per arm) and λ₁ (stage 2, one value for both arms
  so that they share the factorisation of K_V + nλ₁I) by exact leave-one-out
  cross-validation of the RKHS-valued ridge regressions: the loss is the
  squared RKHS distance between a held-out target (φ(Y) in stage 1, the
  pseudo-outcome ξ̂ in stage 2) and its prediction, summed over the
  cross-fitting folds.  For a linear smoother the leave-one-out residual of
  unit i is r_i / (1 − H_ii), so one factorisation of the kernel serves the
  whole λ path (:func:`ccme._backend.krr_loo_path`).  Each fold's regression is
  scored on a seeded subsample of s = min(m, :data:`LAMBDA_UNITS`) of its m
  units (1500: all of them below n ≈ 3000 with two folds), and the grid's value
  λ, meant for m units, is scored there at λ (m/s)^α (:data:`LAMBDA_RATE`:
  α = 1.5 in stage 1, 1.2 in stage 2; penalty convention K + mλI); the default
  grid grows downwards by a decade, at most twice, while a stage's optimum
  sits at its smallest value.  A rate, not λ as chosen on the subsample: the
  leave-one-out minimiser λ* falls faster than 1/m (the total penalty mλ* falls
  too).  Measured by ``benchmarks/tuning_speed.py --rates`` (the least-squares
  slope of log λ* against log m, λ* on a fine grid, m from 500 to a whole
  fold): at n = 20000 on the paper's simulation and the zoo's mixture_v3,
  hetero_v2 and sparse_v10, 1.31–1.62 (mean 1.48) in stage 1 and 0.98–1.34
  (mean 1.16) in stage 2; a one-off run on the paper's simulation at
  n = 80000 gave 1.7–1.9 in stage 1 (m to 29000) and 1.2 in stage 2 (m to
  40000).  Keeping λ as chosen on 1500 units would over-penalise a fold of
  7500 units about tenfold; the rate puts the full fold's minimiser within
  ±0.15 decades (a third of the grid's step) in these cases at n = 20000, and
  stage 1's up to 0.3 decades too high at m ≈ 3·10⁴ (more beyond: a fit at
  n ≫ 10⁵ may re-choose λ on its own low-rank features).  The first stage μ̂₀ inside the
  stage-2 pseudo-outcomes is fitted on all of the arm's nuisance units: through
  the kernel's spectrum up to LAMBDA_UNITS units, beyond by the Nyström kernel
  ridge regression on at most :data:`NYSTROM_RANK` centres
  (:func:`_first_stage_at`);
- in the doubly robust mode, the penalty λ₁ᵖ of the pseudo-outcome's plug-in
  part μ̂₀(X) (:func:`_plugin_penalty`), by the same leave-one-out criterion
  on the targets μ̂₀(X_i) over the same subsamples, one value for the arms:
  the second stage then smooths the correction ω(φ(Y) − μ̂₀(X)) at λ₁ and the
  plug-in part at λ₁ᵖ (:class:`ccme.estimators.base.SplitSecondStage`).  λ₁,
  chosen on ξ̂, is set by the correction's noise (the weighted outcomes) and
  oversmooths the plug-in part, whose targets carry no outcome noise;
- the X and V bandwidths per covariate group (ARD: one factor of the rule's
  bandwidth per raw variable, a categorical variable's indicator columns
  together, :func:`ccme.kernels.covariate_groups`) by the same criterion: a
  coordinate search over log2 factors 1/16 … 16 and +inf (the covariate
  dropped), in sweeps of steps ×2 then ×√2 (:data:`ARD_STEPS`), visiting the
  most relevant groups first (:data:`ARD_ORDER`: the fit does not depend on
  the order of the formula's terms), alternating
  with the penalties (chosen over the λ grid at the start, then over [λ/10,
  10λ] after each sweep).  Stage 1 keeps one X kernel for both arms, each arm
  with its own λ₀ (the search sums the arms' LOO errors): the fold's first
  stage holds one X kernel, the covariates that shape Y given X are mostly the
  same in both arms, and one search on both arms' units costs half of two and
  reports one relevance table.  Stage 2 has one V kernel (λ₁ is shared by the
  arms).  The search runs on at most :data:`ARD_UNITS` units per regression
  (500 in stage 1, 2000 in stage 2): a seeded subsample of each arm's units,
  pooled over the folds' nuisance parts, in stage 1; of the second-stage units
  with their fold's pseudo-outcomes in stage 2.  The penalties are then chosen
  on the folds' subsamples as above.  The pseudo-outcomes' criterion is often
  flat within its noise, so the V search starts from the bandwidths stage 1
  learned for the same covariates (the rule's for a covariate stage 1
  dropped: irrelevant given X, it may still matter given V;
  :data:`V_SEARCH_START`) and moves only for a decrease beyond one paired
  standard error (:data:`ARD_STAGE2_GUARD`).  For a categorical group
  the bandwidth is Li and Racine's smoothing parameter λ_g
  (:mod:`ccme.kernels`).  The learned bandwidths are in
  ``res.tuning.relevance_frame()`` and the summary's "Covariate relevance"
  section.  ``tune={"x_bandwidth": [...], "v_bandwidth": [...]}`` instead
  chooses one common factor of the rule's bandwidths from a grid;
- each arm's outcome (read-out) bandwidth σ_y, as a factor multiplying
  Silverman's rule, by weighted least-squares cross-validation of the
  arm's conditional density: for
  each fold's estimate p̂ and the units it did not use in its second stage,
  Σ_j ω_j [∫ p̂(y | V_j)² dy − 2 p̂(Y_j | V_j)] with ω_j = 1{A_j = a}/π̂_a(X_j)
  is an unbiased estimate (up to a constant) of the integrated squared error
  ∫ (p̂ − p^a)² dy averaged over V, by ignorability.  σ_y only enters the
  read-out of the fitted embedding (the ridge weights do not depend on it).
  The criterion is evaluated by :func:`tune_ridge`, before the exact fit, on
  a Nyström proxy of the fit (:func:`_readout_proxy`: the same data, kernels
  and penalties, both kernel ridge regressions at rank at most NYSTROM_RANK,
  the atoms binned): on the exact fit it needs every fold-arm's n × n factors
  and triangular solves of one right-hand side per held-out unit (at most
  :data:`_ISE_UNITS` per fold and arm; with 300, some 20 s at n = 20000,
  half of them building the control arm's factors that a user of the
  treated arm never needs), and it does not scale past them.  The
  proxy's curves agree with the exact ones to 0.1 % of their range (n = 4000,
  rank 300), well inside the criterion's noise; with a forest first stage
  (which has no such proxy) :func:`tune_readout` evaluates it on the fit.
  The arms get their own
  σ_y, as separate kernel density estimates would; the common outcome kernel
  of the embedding (``res.kernels["y"]``, used by comparisons between the
  arms) keeps the rule's bandwidth.

The targets' RKHS inner products enter through feature coordinates: a pivoted
Cholesky factorisation of the outcome kernel over all observed outcomes,
k_Y(Y_i, Y_j) ≈ G_i·G_j (to 1e-8; beyond 20000 units, Nyström features on
the pivots of a subsample, computed for the rows in use).  The input kernels
are factored the same way, K ≈ LLᵀ, stopping once the largest residual
diagonal is below 1e-2 · min(1, nλ_min) (so that the hat matrices are
accurate to about 1e-2 at the smallest penalty of the grid, and better at the
larger ones) or at rank 2000; at full rank the criterion is exactly the
leave-one-out error (tests compare it with brute-force refits).  Memory: no
kernel factor of the tuning has more than LAMBDA_UNITS (or ARD_UNITS) rows;
the Nyström pieces over all of a fold's units are accumulated a block of
rows at a time (O(block · r + r²)), so that the tuning needs O(n) memory for
the data and O(n r_Y) for the outcome features of the rows it uses, nothing
of size n × 2000.  The choices are deterministic given ``seed`` (each
subsample has its own seed) and the same for any thread count.

**Sampling weights** (``fit(weights=)``, ``CrossFitData.sampling_weights``).
Every regression above becomes the weighted ridge regression
min Σ_i w_i ‖z_i − f(x_i)‖² + λ Σ_i w_i ‖f‖², whose leave-one-out identity
holds in transformed coordinates: with K̃ = W^{1/2} K W^{1/2} (the rows of the
pivoted Cholesky factor scaled by √w) and targets √w ∘ z, H̃ = K̃(K̃ + sI)⁻¹ is
symmetric, r̃_i = √w_i r_i, and removing unit i is setting w_i = 0, so

    Σ_i r̃_i² / (1 − H̃_ii)² = Σ_i w_i (z_i − f̂₋ᵢ(x_i))²,

the weighted leave-one-out error (:class:`_Spectrum`, :func:`_ard_loo`); the
penalty is λ Σ_i w_i (``lambdas`` × mean w).  μ̂₀ inside the pseudo-outcomes
is the weighted first stage, and the σ_y criterion multiplies each held-out
unit's term by w_j (:func:`tune_outcome_bandwidth`, on the fit itself: the
Nyström proxy of :func:`_readout_proxy` is unweighted, and the weighted fit is
the low-rank one, cheap to read).  Without weights nothing changes.

Hyperparameters the user sets explicitly are never tuned.  The neural
estimators select by validation loss instead: :mod:`ccme.estimators.neural_tuning`.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from . import _backend
from .column_order import group_order
from .errors import CcmeWarning, ParameterError
from .kernels import Kernel
from .fences import bulk_range, bulk_sd
from .grids import MARGIN, kernel_scale, outcome_grid
from .memory import check_allocation
from .propensity import arm_probabilities
from .pseudo import PseudoOutcome, pseudo_outcome, uses_first_stage
from .estimators.ridge import apply_first_stage

__all__ = ["TuningReport", "TuningCurve", "resolve_tune", "tune_ridge", "tune_outcome_bandwidth", "tune_readout",
           "readout_floor", "READOUT_ATOM_FLOOR", "READOUT_ATOM_QUANTILE",
           "distribution_kernel", "distribution_readout",
           "LAMBDA_GRID", "Y_BANDWIDTH_FACTORS", "NEURAL_LAMBDA_GRID"]

#: Default penalty grid (paper convention K + nλI), both stages.  Its spacing (half a decade) is also the step of
#: the searches that refine λ around a choice and of the grid's extensions (:func:`_lambda_steps`).  A quarter
#: decade (17 points) did not pay: 1.003 on the zoo's "choose" split, 3 case-arms better and 6 worse, 7% more
#: fitting time; ``mixed_v``'s control arm 1.002, so its gap is not the grid's quantisation
#: (benchmarks/results/lambda_grid_quarter_choose.txt).
LAMBDA_GRID = tuple(np.logspace(-4, 0, 9))
#: Default factors of Silverman's outcome bandwidth.
Y_BANDWIDTH_FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0)
#: Times the default read-out grid grows by two factors (its own step, ×1/√2) below its smallest where an arm's
#: criterion picks that smallest (:func:`_extending_downwards`), as the λ₀ grid does (:data:`_EXTENSIONS`).  A spike
#: of outcomes (zero earnings) wants a bandwidth far below Silverman's, which the whole law's spread sets: on the
#: zoo's ``spike_tail`` (n = 2000) the criterion picks 0.044-0.088 of it.  A grid reaching 0.0625 always gave 0.857
#: on "choose" (0.34 / 0.25 on ``spike_tail``, every other case-arm unchanged) for 43% more fitting time
#: (``benchmarks/results/y_factors_lower_choose.txt``); extending only where the edge is hit costs time only there.
Y_BANDWIDTH_EXTENSIONS = 2
#: How the read-out bandwidth is taken from its weighted ISE-CV curve: ``"min"`` (the minimiser), ``"one_se"``
#: (the widest factor within one standard error of the minimum, :func:`_one_se_choice`) or ``"one_se_step"`` (one
#: grid step wider at most).  "min" kept: with 300 held units per fold and arm "one_se_step" gave 0.921 on the zoo's
#: "choose" split and 0.982 on "report" ("one_se" 0.977 on "choose", nhefs_sex's control arm 1.43), but most of
#: that was the subset's noise; with 1000 (:data:`_ISE_UNITS`) it gave 0.982 and 0.999 (6 case-arms better, 7
#: worse; large_n 1.31 / 1.13), ``benchmarks/results/y_one_se*_{choose,report}.txt``.
#: ``"largest_local"`` (the default): the largest local minimiser of the curve (an edge counts when it is below its
#: neighbour; Hall & Marron 1991, :func:`_largest_local_minimum`).  It differs from "min" only where the curve has
#: several local minima: on the zoo (both splits, seeds 1-6, ridge DR with and without ``location="linear"``: 228
#: case-arm-seeds, 456 fits) in 2 located fits, both better (linear_v1's control arm at seed 1, ISE 0.0132 -> 0.0004;
#: categorical_v's at seed 5, 0.0129 -> 0.0041), ``benchmarks/accuracy/location_choice.py --y-rule``.
Y_BANDWIDTH_RULE = "largest_local"
#: Whether ``tune="auto"`` of the neural estimators also chooses the outcome read-out bandwidth
#: (:func:`tune_readout`, as for the ridge estimator).
NEURAL_READOUT_SEARCH = True
#: Whether ``tune="auto"`` of the Neural-Kernel estimator chooses its number of grid points M over
#: :data:`NEURAL_KERNEL_M_GRID` by validation loss (:mod:`ccme.estimators.neural_tuning`).  Off: on the zoo's
#: "choose" split (n = 1000, seeds 1, 2; ``results/neural_kernel_m_choose.txt``) it raised the ISE (geometric mean
#: 1.035, worse on 9 of 14 case-arms) at 1.7 times the fitting time.
NEURAL_KERNEL_M_SEARCH = 0
NEURAL_KERNEL_M_GRID = (10, 20, 40)
#: Whether ``tune="auto"`` of the neural estimators chooses the networks' weight decay (``weight_decay``, decoupled:
#: AdamW) over :data:`NEURAL_WEIGHT_DECAY_GRID` by validation loss, one value for all arms
#: (:mod:`ccme.estimators.neural_tuning`); the paper suggests weight regularisation for the Neural-Kernel
#: estimator's variance.  Off: for Neural-Kernel on the zoo's "choose" split (n = 1000, seeds 1-2) it gave 0.952 of
#: no decay (nhefs_sex's control arm 1.46) for 1.5 times the fitting time, where the fixed default decay of
#: :data:`ccme.estimators.NEURAL_KERNEL_DEFAULTS` gave 0.927 (``benchmarks/results/nk_weight_decay_search_choose.txt``).
NEURAL_WEIGHT_DECAY_SEARCH = False
NEURAL_WEIGHT_DECAY_GRID = (0.0, 1.0, 2.0, 4.0)
#: The weight decays ``tune="auto"`` of the Neural-Kernel estimator compares as whole fits by the read-out
#: criterion (:mod:`ccme.fit_choice`; the default of :data:`ccme.estimators.NEURAL_KERNEL_DEFAULTS` is the
#: reference, kept unless another value's criterion is clearly lower); () turns the comparison off.  Each value
#: other than the default is one more cross-fit (the repetitions of ``n_rep`` then run at the chosen value only),
#: at the location stage chosen at the default.  Off: (1, 2, 4) on the zoo's "choose" split (n = 1000, seeds 1-4,
#: ``python benchmarks/tuning_rule.py --setting "ccme.tuning.NEURAL_KERNEL_DECAY_FITS=2.0;1.0 2.0 4.0" --config
#: neural_kernel --split choose --seeds 1,2,3,4 --n 1000 --eval-points 100 --parallel --stem nk_decay_fits``,
#: ``benchmarks/results/nk_decay_fits_choose.txt``) gave 0.982 of the default's ISE (per case-seed 95% interval 0.965
#: to 1.003; 6 of 16 case-arms better, 3 worse) for three cross-fits instead of one.  Where each decay's fit makes
#: its own location choice (``benchmarks/accuracy/neural_decay_choice.py``, same cases and seeds,
#: ``benchmarks/accuracy/results/neural_decay_choice_choose.txt``) the same rule gives 0.942 (0.859 to 1.033), the
#: largest gains (weak_overlap 0.41 / 0.14 at seed 1) coming from a location stage that the default's fit left
#: out by a fraction of a standard error, at twice the fit's time; fixed decays 1 and 4 give 0.999 and 0.989.  At
#: seeds 1-6 (``neural_decay_choice_choose_s1to6.txt``) decays (1, 2) so compared give 0.937 (0.870 to 1.009; 18 of
#: 96 case-arm-seeds better by > 1%, 4 worse) for 1.5 times the time: less, and less often, than the fifth
#: repetition that :data:`ccme.estimators.training.NEURAL_N_REP` leaves out for speed.
NEURAL_KERNEL_DECAY_FITS = ()
_TUNABLE = ("lam0", "lam1", "lam1_plugin", "x_bandwidth", "v_bandwidth", "y_bandwidth")
#: Deep Feature's penalty grid for ``tune="auto"`` (ΨᵀΨ + nλI, both stages):
#: coarser than the ridge's because each value trains a network
#: (:mod:`ccme.estimators.neural_tuning`).
NEURAL_LAMBDA_GRID = tuple(np.logspace(-4, 0, 5))
#: Whether ``tune="auto"`` of the Deep Feature estimator splits its doubly robust second stage, choosing the
#: plug-in part's penalty λ₁ᵖ by leave-one-out in the learned features
#: (:func:`ccme.estimators.deep_feature.plugin_penalty_curve`), as the ridge estimator does.
DEEP_FEATURE_PLUGIN_SEARCH = True
#: Its grid (ΨᵀΨ + nλI): fine, since the whole path costs one SVD of the n × M features, and reaching far
#: below the λ₁ grid, since the plug-in targets carry no outcome noise.
DEEP_FEATURE_PLUGIN_GRID = tuple(np.logspace(-8, 0, 33))
#: Whether ``tune="auto"`` of the neural estimators scales their networks' inputs by the bandwidths the kernel
#: ridge's per-group leave-one-out search learns (``x_bandwidth``/``v_bandwidth`` "ard";
#: :mod:`ccme.estimators.input_relevance`).  Chosen on the zoo's "choose" cases (n = 1000, seeds 1-2; ISE against
#: standardised inputs, geometric mean over case-arms): Deep Feature 0.795 (12 of 16 better, 3 worse),
#: Neural-Kernel 0.855 (11 better, 4 worse); reported on its "report" cases: 0.900 (18 of 30 better, 10 worse) and
#: 0.919 (18 better, 11 worse); about 30% more fit time (``python benchmarks/tuning_rule.py --setting
#: ccme.tuning.NEURAL_INPUT_RELEVANCE=False,True --config deep_feature --split choose --seeds 1,2 --n 1000
#: --eval-points 100 --parallel --stem input_relevance_deep_feature``; ``benchmarks/results/input_relevance_*``).
NEURAL_INPUT_RELEVANCE = True
_TUNABLE_BY_METHOD = {"ridge": _TUNABLE,
                      "deep_feature": ("lam0", "lam1", "lam1_plugin", "M", "weight_decay", "y_bandwidth",
                                       "x_bandwidth", "v_bandwidth"),
                      "neural_kernel": ("M", "weight_decay", "y_bandwidth", "x_bandwidth", "v_bandwidth")}
_OUTCOME_TOL = 1e-8
_MAX_RANK = 2000
#: Held-out units per fold and arm in the σ_y criterion (a random subset beyond it).  1000, not 300: the
#: criterion's curves are flat near their minimum, so a subset's noise moves the choice; with 1000 the zoo's ISE
#: fell on both splits (geometric means 0.965 "choose", 0.972 "report"; 11 case-arms better, 2 worse by more than
#: 1%) at 4-12% more fitting time (benchmarks/results/ise_units_{choose,report}.txt).
_ISE_UNITS = 1000
_ISE_GRID = 256       # quadrature points of ∫ p̂²
_RANK_TOL = 1e-2      # pivoted Cholesky stops at 1e-2 · min(1, nλ_min)
_EXTENSIONS = 2       # times the default λ₀ grid may grow by a decade below its smallest value


@dataclass(frozen=True)
class TuningCurve:
    """One criterion curve: ``criterion[i]`` at ``values[i]`` of ``parameter``.

    ``arm`` is None for a choice shared by both arms; ``factor`` is the
    bandwidth factor the curve was computed at (for penalty curves);
    ``group`` names the covariate group of a per-group bandwidth curve
    (``parameter`` "x_bandwidth" or "v_bandwidth"; ``values`` are factors of
    the rule's bandwidth, inf for the group dropped, the points its last
    visit of the coordinate search tried; a V group's choice may sit a
    fraction of a standard error above the curve's minimum,
    :data:`ARD_STAGE2_GUARD`).
    """

    parameter: str
    values: np.ndarray
    criterion: np.ndarray
    criterion_name: str
    chosen: float
    arm: int | None = None
    factor: float | None = None
    group: str | None = None
    #: For a read-out curve, (units, terms): the held-out units' rows and their terms of the criterion at the
    #: chosen value (the criterion is the terms' sum), what :func:`ccme.location.choose_location` pairs between
    #: two fits.  Fit-time only: never saved.
    held: tuple | None = field(default=None, repr=False, compare=False)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.TuningCurve"
    #: 2: ``group`` (a version-1 state reads back with None).
    STATE_VERSION = 2
    _STATE_FIELDS = ("parameter", "values", "criterion", "criterion_name", "chosen", "arm", "factor", "group")

    def __repr__(self) -> str:
        where = "".join(f", {name} {value}" for name, value in (("arm", self.arm), ("group", self.group),
                                                                ("factor", self.factor)) if value is not None)
        return (f"TuningCurve({self.parameter}: {len(self.values)} values, {self.criterion_name}, "
                f"chosen {float(self.chosen):.4g}{where})")

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

        old = isinstance(state, dict) and state.get("version") == 1
        fields = cls._STATE_FIELDS[:-1] if old else cls._STATE_FIELDS
        check_schema(state, cls.STATE_SCHEMA, (1, cls.STATE_VERSION), keys=fields)
        if not all(isinstance(state[name], np.ndarray) for name in ("values", "criterion")):
            raise FormatError(f"the stored {state['parameter']!r} tuning curve has no value or criterion array")
        if not old and not (state["group"] is None or isinstance(state["group"], str)):
            raise FormatError("a stored tuning curve's group is not a name")
        return cls(**{name: state[name] for name in fields})


@dataclass
class TuningReport:
    """What the automatic tuning chose, the criterion curves, and the time it took.

    ``relevance`` holds one row (a dict) per covariate group of the X and V
    kernels whose bandwidths were learned per group; :meth:`relevance_frame`
    gives them as a table.
    """

    chosen: dict = field(default_factory=dict)
    curves: list = field(default_factory=list)
    seconds: float = 0.0
    notes: list = field(default_factory=list)
    relevance: list = field(default_factory=list)
    #: The read-out bandwidths :func:`tune_ridge` chose on the fit's Nyström proxy, ({arm: Kernel}, curves), until
    #: :func:`tune_readout` applies them (then None; never saved).
    pending_readout: object = field(default=None, repr=False, compare=False)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.TuningReport"
    #: 2: ``relevance`` (a version-1 state reads back without it).
    STATE_VERSION = 2
    _RELEVANCE_KEYS = ("role", "group", "kind", "n_columns", "levels", "factor", "bandwidth", "bandwidth_sd",
                       "smoothing", "dropped")

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
                          notes=list(self.notes), relevance=[dict(row) for row in self.relevance])

    @classmethod
    def from_state(cls, state) -> "TuningReport":
        """Inverse of :meth:`to_state`."""
        from .errors import FormatError
        from .io import check_schema, int_keys

        old = isinstance(state, dict) and state.get("version") == 1
        keys = ("chosen", "curves", "seconds", "notes") + (() if old else ("relevance",))
        check_schema(state, cls.STATE_SCHEMA, (1, cls.STATE_VERSION), keys=keys)
        relevance = [] if old else state["relevance"]
        if not (isinstance(state["chosen"], dict) and isinstance(state["curves"], list)
                and isinstance(state["notes"], list) and isinstance(relevance, list)):
            raise FormatError("the stored tuning report's chosen, curves, notes or relevance have the wrong type")
        for row in relevance:
            if not isinstance(row, dict) or tuple(row) != cls._RELEVANCE_KEYS:
                raise FormatError(f"a stored relevance row has the fields {str(row)[:80]}")
        chosen = {name: int_keys(value, what=f"the tuned {name}") if isinstance(value, dict) else value
                  for name, value in state["chosen"].items()}
        return cls(chosen=chosen, curves=[TuningCurve.from_state(curve) for curve in state["curves"]],
                   seconds=state["seconds"], notes=list(state["notes"]), relevance=[dict(r) for r in relevance])

    def __repr__(self) -> str:
        chosen = ", ".join(self.chosen) or "nothing"
        return (f"TuningReport(chose {chosen}; {len(self.curves)} criterion curves, {len(self.notes)} notes, "
                f"{self.seconds:.2f} s; .to_frame(), .relevance_frame())")

    def to_frame(self) -> pd.DataFrame:
        """One row per (curve, grid value); ``group`` names a per-group bandwidth curve's covariate group."""
        rows = []
        for c in self.curves:
            for v, crit in zip(c.values, c.criterion):
                rows.append({"parameter": c.parameter, "arm": c.arm, "factor": c.factor, "group": c.group, "value": v,
                             "criterion": crit, "criterion_name": c.criterion_name, "chosen": v == c.chosen})
        return pd.DataFrame(rows)

    def relevance_frame(self) -> pd.DataFrame:
        """The learned per-group bandwidths: one row per covariate group of X and V.

        Columns: ``role`` ("X" or "V"), ``group`` (the raw variable), ``kind``
        ("numeric", "categorical", "ordered", "binary"), ``n_columns``,
        ``levels`` (categorical kinds), ``factor`` (of the rule's bandwidth;
        inf: dropped), ``bandwidth`` (a numeric group's first column, in its
        units; a categorical block's common one), ``bandwidth_sd`` (numeric:
        the bandwidth in standard deviations of the column, as the median rule
        measures them: with far-out values clipped, :func:`ccme.fences.bulk_sd`), ``smoothing``
        (categorical kinds: Li and Racine's λ, the kernel between two
        different levels, or adjacent ones when ordered; 1 = dropped) and
        ``dropped``.  Empty when no bandwidth was learned per group.
        """
        return pd.DataFrame([dict(r) for r in self.relevance], columns=list(self._RELEVANCE_KEYS))

    def readout_curves(self) -> dict:
        """Arm code → its read-out bandwidth's curve, also while it waits in ``pending_readout`` (before the cross-fit)."""
        pending = self.pending_readout[1] if self.pending_readout is not None else []
        return {c.arm: c for c in (*self.curves, *pending) if c.parameter == "y_bandwidth" and c.arm is not None}

    def dropped_groups(self, role: str) -> list:
        """The labels of the covariate groups of ``role`` ("X" or "V") that the per-group search dropped."""
        return [r["group"] for r in self.relevance if r["role"] == role and r["dropped"]]

    def relevance_rows(self) -> list:
        """The relevance table as the summary's (label, text) rows, one per covariate group."""
        rows = []
        for r in self.relevance:
            label = f"{r['role']}: {r['group']}"
            if r["kind"] == "numeric":
                what = "numeric" + (f" ({r['n_columns']} columns)" if r["n_columns"] > 1 else "")
                if r["dropped"]:
                    text = f"{what}, dropped (infinite bandwidth)"
                else:
                    sd = f" = {r['bandwidth_sd']:.3g} sd" if r["bandwidth_sd"] is not None else ""
                    text = f"{what}, bandwidth {r['bandwidth']:.4g}{sd} ({r['factor']:.3g} x the rule)"
            else:
                what = {"categorical": "categorical", "ordered": "ordered", "binary": "binary"}[r["kind"]]
                what += f", {r['levels']} levels"
                per = " per level of rank difference" if r["kind"] == "ordered" else ""
                if r["dropped"]:
                    text = f"{what}, dropped (lambda = 1)"
                else:
                    text = f"{what}, lambda {r['smoothing']:.3g}{per} (bandwidth {r['bandwidth']:.3g})"
            rows.append((label, text))
        return rows


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
            grids = {"lam0": LAMBDA_GRID, "lam1": LAMBDA_GRID, "lam1_plugin": LAMBDA_GRID, "x_bandwidth": "ard",
                     "v_bandwidth": "ard", "y_bandwidth": Y_BANDWIDTH_FACTORS}
            if "lam1" in user_keys or not PLUGIN_PENALTY_SEARCH:
                grids.pop("lam1_plugin")  # a λ₁ given by the user serves both parts unless λ₁ᵖ is given too
        elif method in ("deep_feature", "neural_kernel"):
            grids = {"lam0": NEURAL_LAMBDA_GRID, "lam1": NEURAL_LAMBDA_GRID} if method == "deep_feature" else {}
            if method == "deep_feature" and DEEP_FEATURE_PLUGIN_SEARCH and "lam1" not in user_keys:
                grids["lam1_plugin"] = DEEP_FEATURE_PLUGIN_GRID
            if NEURAL_READOUT_SEARCH:
                grids["y_bandwidth"] = Y_BANDWIDTH_FACTORS
            if method == "neural_kernel" and NEURAL_KERNEL_M_SEARCH and "grid" not in user_keys:
                grids["M"] = NEURAL_KERNEL_M_GRID  # a user's grid array sets M
            if NEURAL_WEIGHT_DECAY_SEARCH:
                grids["weight_decay"] = NEURAL_WEIGHT_DECAY_GRID
            elif (method == "neural_kernel" and NEURAL_KERNEL_DECAY_FITS and NEURAL_READOUT_SEARCH
                  and "weight_decay" not in user_keys):
                grids["weight_decay_fits"] = NEURAL_KERNEL_DECAY_FITS   # whole fits, after the cross-fit
            if NEURAL_INPUT_RELEVANCE:
                grids["x_bandwidth"] = grids["v_bandwidth"] = "ard"
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
            if key in ("x_bandwidth", "v_bandwidth") and _is_ard(values):
                grids[key] = "ard"  # per-group bandwidths by the coordinate search (tune_ridge)
                continue
            try:
                arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
            except (TypeError, ValueError):
                arr = np.array([np.nan])
            nonnegative = key == "weight_decay"   # no decay is a candidate
            if (arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr))
                    or np.any(arr < 0 if nonnegative else arr <= 0)):
                also = " or 'ard'" if key in ("x_bandwidth", "v_bandwidth") else ""
                kind = "non-negative" if nonnegative else "positive"
                raise ParameterError(f"`tune[{key!r}]` must be a non-empty list of {kind} numbers{also}; "
                                     f"got {values!r}")
            if key == "M":
                if np.any(arr != np.round(arr)):
                    raise ParameterError(f"`tune['M']` must be a non-empty list of positive integers; got {values!r}")
                grids[key] = tuple(int(m) for m in np.unique(arr))
            elif values is Y_BANDWIDTH_FACTORS:
                grids[key] = values     # the default grid itself: it grows below as the default's does
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
#: Units each penalty regression uses at most: a seeded subsample of the arm's units of a fold's nuisance part
#: (stage 1, per fold and arm) or of a fold's second-stage units (stage 2, per fold); the penalty chosen there is
#: carried to the regression's size by :data:`LAMBDA_RATE`.
LAMBDA_UNITS = 1500
#: Exponent α of the penalty's transfer from a subsample of s units to the regression's m units in the convention
#: K + mλI: λ_m = λ_s (s/m)^α.  The mean slope of log λ* against log m of the leave-one-out minimiser on the paper's
#: simulation and three cases of the accuracy zoo at n = 20000 (``benchmarks/tuning_speed.py --rates``: stage 1
#: 1.31–1.62, stage 2 0.98–1.34; the module docstring).
LAMBDA_RATE = {"X": 1.5, "V": 1.2}
#: Factor on the first stage's leave-one-out penalty λ₀ in the doubly robust mode.  The LOO choice is the best
#: predictor of φ(Y) given X; in the doubly robust pseudo-outcome the first stage's bias enters the error only
#: through its product with the propensity's error while its residual sets the variance, so a less regularised
#: first stage than the prediction-optimal one could be better.  Measured on the zoo's "choose" split, it is not
#: (``benchmarks/tuning_rule.py``, ``results/dr_first_stage_penalty_choose.txt``: geometric-mean ISE ratio 1.004 at
#: 0.3, 1.007 at 0.1), so the LOO choice is kept.
DR_FIRST_STAGE_PENALTY = 1.0
#: Factor on the doubly robust second stage's leave-one-out penalty λ₁ (the correction's; λ₁ᵖ keeps its own).  The
#: criterion scores the pseudo-outcomes in the outcome kernel's features, not the density's integrated squared
#: error, and the hand grid's best fixed point on two zoo cases had a smaller λ₁ than it picks.  Measured
#: (``benchmarks/tuning_rule.py``, ``results/dr_second_stage_penalty_{choose,report}.txt``): 0.3 lowered the
#: geometric-mean ISE ratio on the "choose" split to 0.965 (0.1: 1.017) but raised it to 1.027 on the held-out
#: "report" split (nsw_race 1.28 / 1.22, ihdp_site's control arm 1.50), so the leave-one-out choice is kept.
#: Rerun at e03b1c1 with 0.435 = 2^−1.2, the penalty for the mean of the two folds (:data:`SECOND_STAGE_PENALTY_FOR`;
#: ``--stem dr_second_stage_penalty_mean``): "choose" 0.983, "report" 1.032 (6 case-arms better, 18 worse).
DR_SECOND_STAGE_PENALTY = 1.0
#: Factor on the first stage's leave-one-out (ARD) X bandwidths in the doubly robust mode, the penalty λ₀ then chosen
#: for them: the same argument for a less smoothed first stage, through the bandwidths.  Measured on the "choose"
#: split at n = 1000 (seeds 1, 2; ``results/dr_first_stage_bandwidth_choose_n1000.txt``): geometric-mean ISE ratio
#: 0.991 at 0.7, 1.020 at 0.5, so the leave-one-out bandwidths are kept.
DR_FIRST_STAGE_BANDWIDTH = 1.0
#: Whether ``tune="auto"`` chooses the doubly robust plug-in part's own penalty λ₁ᵖ (:func:`_plugin_penalty`).  On
#: the zoo's "choose" split it lowered ridge DR's integrated squared error (``benchmarks/tuning_rule.py``,
#: ``results/plugin_penalty_choose.txt``); False restores one penalty for the whole pseudo-outcome, to rerun that.
#: At n = 12000 on the "choose" case large_mixed (seeds 1-3, ``--cases large_mixed --seeds 1,2,3 --stem
#: plugin_penalty_large --tag large_mixed``) one penalty gave 1.18 / 1.23 times the error: it stays at large n too,
#: though it cost 7-10% on the paper's simulation at n = 20000 (README, "Large data").
PLUGIN_PENALTY_SEARCH = True
#: Whether the doubly robust second stage's penalties λ₁ and λ₁ᵖ are chosen per arm, each on its own arm's
#: leave-one-out curve (as the one-step mode's λ₁ is), instead of one value on the arms' summed curve.  A shared λ₁
#: lets the arm with the noisier pseudo-outcomes (the smaller arm: larger inverse-propensity weights) set the
#: smoothing of the other; per arm costs one more factorisation of K_V per fold.  Measured on the zoo's "choose"
#: split (``benchmarks/tuning_rule.py``, ``results/dr_penalties_by_arm_choose.txt``; README, "Accuracy zoo"): 0.987,
#: 4 case-arms better and 4 worse by more than 1%, 14% more fit time, so the shared choice stays.  Rerun at ba77778
#: on both splits (``results/dr_penalties_by_arm_s19_*.txt``): "choose" 0.999, "report" 1.000 (ihdp_site's treated
#: arm 0.92, nsw_race's control arm 1.15).
DR_PENALTIES_BY_ARM = False
#: What the doubly robust correction's penalty λ₁ is chosen on: "whole", the leave-one-out error of one ridge
#: regression of the whole pseudo-outcome ξ̂ on V (its plug-in part then gets λ₁ᵖ of its own); "split", the
#: leave-one-out error of the split second stage actually fitted (:func:`_split_loo`): the correction
#: ω(φ(Y) − μ̂₀(X)) smoothed at λ₁ plus the plug-in part at the λ₁ᵖ chosen first, as a predictor of ξ̂; or "ise",
#: the weighted ISE-CV of the read-out bandwidth (:func:`_readout_proxy`) on the split second stage's proxy, over
#: λ₁ × :data:`DR_CORRECTION_FACTORS` jointly with σ_y.  Measured on the zoo's "choose" split
#: (``benchmarks/tuning_rule.py --setting ccme.tuning.DR_CORRECTION_CRITERION=whole,split`` (and ``whole,ise``)
#: ``--split choose --seeds 1,2,3 --eval-points 150``, ``results/dr_correction_{criterion,ise}_choose.txt``):
#: "split" 1.318, worse on all 14 case-arms (it picks a larger λ₁ where the criterion in the outcome kernel's
#: RKHS is flat, irrelevant_x50 2.4 / 1.6); "ise" 1.027, 6 better and 6 worse (nhefs_sex 1.17 / 1.37), 19% more
#: fit time.  "aise", the augmented (doubly robust) ISE-CV of :func:`_readout_proxy` (the inverse-propensity
#: weights on a residual only, against an outcome regression fitted on the fold's target units), was meant to take
#: the weights' noise out of "ise": it did not (``--setting ccme.tuning.DR_CORRECTION_CRITERION=whole,aise,ise``,
#: ``results/dr_correction_aise_choose.txt``): 1.034, 7 better and 5 worse (nhefs_sex 1.17 / 1.27, weak_overlap's
#: control arm 1.24, mixed_v's treated arm 1.22), 68% more fit time.  So the whole pseudo-outcome's criterion stays.
DR_CORRECTION_CRITERION = "whole"
#: Whether DR_CORRECTION_CRITERION "ise" / "aise" chooses the correction's penalty per arm, on its own arm's
#: criterion, instead of one factor for all arms on their summed criteria.  With "aise" on the "choose" split
#: (``results/dr_correction_aise_by_arm_choose.txt``) per arm is 0.982 of the shared choice, but still 1.016 of
#: "whole" (9 case-arms better, 4 worse: weak_overlap's control arm 1.31, mixed_v's treated arm 1.19, nhefs_sex
#: 1.16 / 1.12).
DR_CORRECTION_BY_ARM = False
#: Whether the doubly robust mode's read-out bandwidth σ_y is chosen on the augmented ISE-CV of
#: :func:`_readout_proxy` (the outcome model's reading plus a weighted residual) instead of the weighted one.
#: Off: on the zoo's "choose" cases 1.008 (no case-arm better by more than 1%, 3 worse) for 1.7 times the fit
#: time (``--setting ccme.tuning.READOUT_AUGMENTED=False,True --stem readout_augmented``).
READOUT_AUGMENTED = False
#: The weights of the held-out units' terms in the read-out bandwidth's ISE-CV outside the one-step mode:
#: ``"inverse-propensity"`` (1 / π̂_a(X_j), so that the criterion estimates the counterfactual law's integrated
#: squared error) or ``"none"`` (every held-out unit of the arm weighs 1: the criterion of the arm's observed
#: conditional law p(Y | A = a, V), whose smoothness stands in for the counterfactual's).  "none" was meant to
#: take the weights' noise out of the choice; it is neutral (``--setting
#: ccme.tuning.READOUT_WEIGHTS=inverse-propensity,none --stem readout_weights``): 1.000 on the zoo's "choose"
#: cases (paper's treated arm 1.36, nhefs_sex 0.89) and 0.991 on "report" (6 case-arms better, 5 worse:
#: nhefs_education 0.74 / 1.12, ihdp_site's treated arm 0.84, large_n's control arm 1.13).
READOUT_WEIGHTS = "inverse-propensity"


def _readout_weighted(mode: str) -> bool:
    """Whether the read-out bandwidth's ISE-CV weights its held-out units by inverse propensities (:data:`READOUT_WEIGHTS`)."""
    if READOUT_WEIGHTS not in ("inverse-propensity", "none"):
        raise ParameterError(f"ccme.tuning.READOUT_WEIGHTS must be 'inverse-propensity' or 'none'; got {READOUT_WEIGHTS!r}")
    return mode != "onestep" and READOUT_WEIGHTS == "inverse-propensity"


#: The factors of the leave-one-out λ₁ among which DR_CORRECTION_CRITERION "ise" chooses.
DR_CORRECTION_FACTORS = (0.01, 0.0316, 0.1, 0.316, 1.0, 3.16, 10.0, 31.6, 100.0)
#: Rank (number of Nyström centres) at most of the kernel approximations beyond the penalty subsamples: the first
#: stage μ̂₀ of the stage-2 pseudo-outcomes when its regression is larger than LAMBDA_UNITS, and the read-out proxy.
NYSTROM_RANK = 300
_NYSTROM_TOL = 1e-3      # the centres' pivoted Cholesky stops at 1e-3 · min(1, mλ) (or at NYSTROM_RANK)
_OUTCOME_UNITS = 20000   # beyond this many units the outcome features' centres come from a subsample
_BLOCK_ROWS = 8192       # rows of a block of Nyström features (memory O(block · rank))
_BINS_PER_SCALE = 8      # read-out proxy: bins per smallest outcome bandwidth (linear binning error ~ 1/(8·64))
_MAX_BINS = 8192


def _units_rng(seed: int, *key: int) -> np.random.Generator:
    """The generator of one subsample of the penalty search, keyed by (stage, fold, arm): draws in any order agree."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, 0x1A3, *key]))


def _transfer(units: int, size: int, stage: str) -> float:
    """λ_s / λ_m = (m/s)^α of :data:`LAMBDA_RATE`: 1.0 exactly when the regression was not subsampled."""
    return 1.0 if units >= size else float((size / units) ** LAMBDA_RATE[stage])


#: Which estimate the second stage's penalties λ₁ (and λ₁ᵖ) are chosen for: "fold", the fold's own regression on
#: its m second-stage units, or "average", the cross-fitted estimate, the average of the K folds' regressions (each
#: at the same λ), whose variance is about 1/K of one fold's, as that of one regression on all K·m units: the
#: leave-one-out curves are then read at the penalties λ·(K·m/s)^α of :data:`LAMBDA_RATE` (λ₁ × 0.44 at K = 2).
#: The folds' errors are variance-dominated (on nhefs_exercise the mean's RKHS error is about a quarter of the two
#: folds' summed, scratch of session 25), so "average" is the consistent target; it did not pay on the zoo
#: (``benchmarks/tuning_rule.py --setting ccme.tuning.SECOND_STAGE_PENALTY_FOR=fold,average``, seeds 1-3,
#: ``benchmarks/results/second_stage_penalty_for_*.txt``): "choose" 0.987 (7 case-arms better, 6 worse), "report"
#: 1.030 (10 better, 17 worse: nsw_race 1.23 / 1.14, large_n 1.17 / 1.14), as the constant factor 0.3 before
#: (:data:`DR_SECOND_STAGE_PENALTY`).  So the fold's own choice stays.
SECOND_STAGE_PENALTY_FOR = "fold"


def _stage2_transfer(units: int, size: int, folds: int) -> float:
    """:func:`_transfer` of a second-stage regression of ``size`` units scored on ``units`` of them, for the estimate
    :data:`SECOND_STAGE_PENALTY_FOR` names (``folds``: K)."""
    if SECOND_STAGE_PENALTY_FOR == "fold":
        return _transfer(units, size, "V")
    if SECOND_STAGE_PENALTY_FOR != "average":
        raise ParameterError(f"ccme.tuning.SECOND_STAGE_PENALTY_FOR must be 'fold' or 'average'; "
                             f"got {SECOND_STAGE_PENALTY_FOR!r}")
    return float((folds * size / units) ** LAMBDA_RATE["V"])


def _parallel(fn, tasks: list, n_threads: int) -> list:
    """``[fn(t) for t in tasks]`` on up to ``n_threads`` Python threads (0: the CPU count); results in task order.

    The tasks call the compiled core with one thread and hold numpy's BLAS at one thread, so the results do not
    depend on the number of workers.
    """
    workers = max(1, min(len(tasks), 8, n_threads if n_threads > 0 else (os.cpu_count() or 1)))
    if workers == 1:
        return [fn(t) for t in tasks]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, tasks))


@dataclass(frozen=True)
class _Spectrum:
    """K ≈ Q diag(s2) Qᵀ (Q with orthonormal columns), from a pivoted Cholesky factor.

    With sampling weights w of the rows (``weights``), the spectrum is that of
    K̃ = W^{1/2} K W^{1/2} (module docstring).
    """

    Q: np.ndarray
    s2: np.ndarray
    approximate: bool
    weights: np.ndarray | None = None

    def loo(self, Z, lambdas, n_threads: int = 0) -> np.ndarray:
        """Mean leave-one-out error along ``lambdas`` (penalty nλ; weighted: Σ w_i r_i²/(1 − H̃_ii)² / n, λ Σw)."""
        if self.weights is None:
            return _backend.krr_loo_path(self.Q, self.s2, Z, lambdas, n_threads=n_threads)[0]
        root = np.sqrt(self.weights)[:, None]
        return _backend.krr_loo_path(self.Q, self.s2, root * Z, np.asarray(lambdas) * float(np.mean(self.weights)),
                                     n_threads=n_threads)[0]

    def solve(self, mu: float, B: np.ndarray) -> np.ndarray:
        """(K + μI)⁻¹ B; weighted: the coefficients (WK + μ mean(w) I)⁻¹ W B = W^{1/2}(K̃ + μ mean(w) I)⁻¹ W^{1/2} B."""
        with threadpool_limits(limits=1, user_api="blas"):
            if self.weights is not None:
                root = np.sqrt(self.weights)[:, None]
                B, mu = root * B, mu * float(np.mean(self.weights))
            QtB = self.Q.T @ B
            out = self.Q @ (QtB / (self.s2 + mu)[:, None]) + (B - self.Q @ QtB) / mu
            return out if self.weights is None else root * out


def _spectrum(X, kernel: Kernel, factor: float, lam_min: float, n_threads: int, w=None) -> _Spectrum:
    """Pivoted Cholesky K ≈ LLᵀ (to _RANK_TOL·min(1, nλ_min)), then the thin SVD of L (of √w ∘ L with weights w)."""
    n = len(X)
    tol = _RANK_TOL * min(1.0, n * lam_min)
    # L, LW and Q, each n × rank (ccme.memory): refuse rather than be killed at a huge n.
    check_allocation(3 * 8.0 * n * min(n, _MAX_RANK), f"the tuning's low-rank kernel factors ({n} × {min(n, _MAX_RANK)})")
    L, _, residual = _backend.pivoted_cholesky(
        X, kernel.name, kernel.bandwidth_array * factor, tol, _MAX_RANK, n_threads=n_threads
    )
    if w is not None:  # K̃ = W^{1/2} K W^{1/2} ≈ (√w ∘ L)(√w ∘ L)ᵀ
        L = np.sqrt(w)[:, None] * L
    # Thin SVD through the small r × r eigenproblem LᵀL = W diag(s²) Wᵀ (LAPACK),
    # single-threaded: the result then does not depend on the BLAS thread count,
    # and a busy machine cannot make OpenBLAS threads spin against each other.
    with threadpool_limits(limits=1, user_api="blas"):
        s2, W = np.linalg.eigh(L.T @ L)
        keep = s2 > 1e-13 * max(s2.max(initial=0.0), 1e-300)
        s2, W = s2[keep], W[:, keep]
        Q = (L @ W) / np.sqrt(s2)
    return _Spectrum(Q=Q, s2=s2, approximate=residual > tol, weights=w)


@dataclass(frozen=True)
class _Nystrom:
    """Nyström features φ(x) = L⁻¹ k(P, x) of a kernel on the centres P, with k(P, P) = LLᵀ (L lower triangular).

    k(x, x') ≈ φ(x)·φ(x'), exact when x or x' is a centre.  The centres are the
    pivots of a pivoted Cholesky factorisation, in their order, so that the
    features of the points it factored are the rows of its factor.
    """

    centers: np.ndarray
    L: np.ndarray
    name: str
    bandwidth: np.ndarray

    @property
    def rank(self) -> int:
        return len(self.centers)

    @classmethod
    def fit(cls, Z: np.ndarray, kernel: Kernel, tol: float, max_rank: int, n_threads: int = 0) -> "_Nystrom":
        """Centres: the pivots of a pivoted Cholesky factorisation of k on the rows of ``Z`` (to ``tol``)."""
        bw = kernel.bandwidth_array
        L, pivots, _ = _backend.pivoted_cholesky(Z, kernel.name, bw, tol, max_rank, n_threads=n_threads)
        return cls(np.ascontiguousarray(Z[pivots]), np.ascontiguousarray(L[pivots]), kernel.name, bw)

    def features(self, X: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """φ at the rows of ``X``, shape (len(X), rank); the caller holds numpy's BLAS at one thread."""
        import scipy.linalg

        out = np.empty((len(X), self.rank))
        for s in range(0, len(X), _BLOCK_ROWS):
            K = _backend.gram(self.centers, X[s:s + _BLOCK_ROWS], self.name, self.bandwidth, n_threads=n_threads)
            out[s:s + _BLOCK_ROWS] = scipy.linalg.solve_triangular(self.L, K, lower=True, check_finite=False).T
        return out

    def ridge(self, X: np.ndarray, T, mu: float, n_threads: int = 0, w=None) -> np.ndarray:
        """Coefficients W = (ΦᵀΦ + μI)⁻¹ΦᵀT of the ridge regression of ``T`` on the features Φ of ``X``.

        With sampling weights ``w`` of the rows: (ΦᵀDΦ + μI)⁻¹ΦᵀDT, D = diag(w).

        The kernel ridge regression (K + μI)⁻¹ with K ≈ ΦΦᵀ: its prediction at x
        is φ(x)ᵀW.  ``T`` is an array or a callable giving the targets of a block
        of rows (``T(start, stop)``); Φ is accumulated a block of rows at a time.
        """
        import scipy.linalg

        gram = np.zeros((self.rank, self.rank))
        cross = None
        for s in range(0, len(X), _BLOCK_ROWS):
            Phi = self.features(X[s:s + _BLOCK_ROWS], n_threads)
            block = T(s, min(s + _BLOCK_ROWS, len(X))) if callable(T) else T[s:s + _BLOCK_ROWS]
            left = Phi.T if w is None else Phi.T * w[s:s + _BLOCK_ROWS]
            gram += left @ Phi
            cross = left @ block if cross is None else cross + left @ block
        gram[np.diag_indices_from(gram)] += mu
        return scipy.linalg.solve(gram, cross, assume_a="pos", check_finite=False)


def _nystrom_map(Z: np.ndarray, kernel: Kernel, mu: float, rng, n_threads: int = 0) -> _Nystrom:
    """Nyström centres for the kernel ridge regression (K + μI) on the rows of ``Z``: the pivots of a pivoted
    Cholesky factorisation of a subsample of :data:`LAMBDA_UNITS` rows, to _NYSTROM_TOL·min(1, μ) or rank
    :data:`NYSTROM_RANK`."""
    pick = _subsample(Z, rng, LAMBDA_UNITS)
    return _Nystrom.fit(np.ascontiguousarray(Z[pick]), kernel, _NYSTROM_TOL * min(1.0, mu), NYSTROM_RANK, n_threads)


class _OutcomeFeatures:
    """Coordinates G(y) of the outcome kernel's RKHS: k_Y(Y_i, Y_j) ≈ G_i·G_j, indexed by rows (``G[rows]``).

    Up to :data:`_OUTCOME_UNITS` units: the pivoted Cholesky factor of all the
    outcomes (to _OUTCOME_TOL), held whole.  Beyond: Nyström features on the
    pivots of a seeded subsample of that many outcomes, with every column's
    smallest and largest outcome among the candidates (so that the outcomes'
    range is covered), computed for the rows asked for: memory O(rows · rank)
    instead of O(n · rank).  The feature space is the RKHS up to a constant
    factor, which does not move any argmin.
    """

    def __init__(self, Y: np.ndarray, kernel: Kernel, n_threads: int, seed: int):
        self._Y, self._n_threads = Y, n_threads
        if len(Y) <= _OUTCOME_UNITS:
            self._full, _, _ = _backend.pivoted_cholesky(Y, kernel.name, kernel.bandwidth_array, _OUTCOME_TOL,
                                                         _MAX_RANK, n_threads=n_threads)
            self._map = None
        else:
            pick = _subsample(Y, _units_rng(seed, 4), _OUTCOME_UNITS)
            pick = np.unique(np.concatenate([pick, np.argmin(Y, axis=0), np.argmax(Y, axis=0)]))
            self._full = None
            self._map = _Nystrom.fit(np.ascontiguousarray(Y[pick]), kernel, _OUTCOME_TOL, _MAX_RANK, n_threads)

    def __getitem__(self, rows) -> np.ndarray:
        if self._map is None:
            return self._full[rows]
        with threadpool_limits(limits=1, user_api="blas"):
            return self._map.features(np.ascontiguousarray(self._Y[rows]), self._n_threads)


#: The leave-one-out criteria's outcome kernel: the embedding's outcome kernel with its bandwidths times this
#: factor (the embedding itself, its read-out and its comparisons keep theirs); ``"readout"``: tune twice, the
#: second time with the factor √2 σ_y / h, σ_y the geometric mean of the arms' read-out bandwidths chosen the first
#: time (the RKHS distance at width √2 σ is the L2 distance of the laws smoothed at σ).  Measured because on
#: ihdp_site's treated arm the RKHS error at 3-4 times the embedding's width ranks V's bandwidths as the density's
#: error does, and at its own width the other way (``benchmarks/accuracy/v_criterion.py``); on the zoo it does
#: not pay (``--setting "ccme.tuning.CRITERION_Y_FACTOR=1,2,3" --stem criterion_y_factor``): 2 gives 0.998 and
#: 3 gives 1.017 on "choose" (paper's control arm 1.15 and 1.39: its law wants a narrow read-out); "readout"
#: 0.989 on "choose" and 1.011 on "report" (8 case-arms better, 10 worse; ihdp_site's treated arm 0.97) for 1.7-1.8
#: times the fit time (two fits back to back on paper, mixed_v and ihdp_site at their own n).
CRITERION_Y_FACTOR = 1.0


def _outcome_features(Y, y_kernel: Kernel, n_threads: int, seed: int = 0, factor: float = 1.0) -> _OutcomeFeatures:
    # The RKHS of the outcome kernel up to a constant factor (which does not move any argmin).
    if factor != 1.0:
        y_kernel = Kernel(y_kernel.name, tuple(y_kernel.bandwidth_array * factor),
                          f"{y_kernel.rule} x {factor:g} (the criteria's)", y_kernel.groups)
    return _OutcomeFeatures(Y, y_kernel, n_threads, seed)


def _lambda_steps(direction: int = 0) -> np.ndarray:
    """Powers of ten at :data:`LAMBDA_GRID`'s spacing: over a decade below (``direction`` -1), above (+1), or
    the decade on either side, 1 included (0), e.g. [-1, -0.5], [0.5, 1] and [-1, -0.5, 0, 0.5, 1] at half a
    decade.  The default grid's extensions and the λ search's neighbourhood take this spacing, so that a
    finer grid refines them too."""
    grid = np.log10(np.asarray(LAMBDA_GRID, dtype=np.float64))
    step = float(grid[1] - grid[0]) if len(grid) > 1 else 0.5
    per_decade = max(1, int(round(1.0 / step)))
    up = np.arange(1, per_decade + 1) / per_decade
    if direction < 0:
        return -up[::-1]
    if direction > 0:
        return up
    return np.concatenate([-up[::-1], [0.0], up])


def _best(criterion: np.ndarray) -> int:
    finite = np.where(np.isfinite(criterion), criterion, np.inf)
    return int(np.argmin(finite))


def tune_ridge(*, data, folds, params, grids, first_stage=None, seed: int = 0):
    """:func:`_tune_ridge` with the criteria's outcome kernel of :data:`CRITERION_Y_FACTOR`."""
    kwargs = dict(data=data, folds=folds, params=params, grids=grids, first_stage=first_stage, seed=seed)
    if CRITERION_Y_FACTOR != "readout":
        return _tune_ridge(**kwargs, criterion_factor=float(CRITERION_Y_FACTOR))
    tuned, report = _tune_ridge(**kwargs, criterion_factor=1.0)
    if report.pending_readout is None:
        return tuned, report
    h = float(params.to_dict()["kernels"]["y"].bandwidth_array[0])
    chosen = [float(k.bandwidth_array[0]) for k in report.pending_readout[0].values()]
    factor = float(np.sqrt(2.0) * np.exp(np.mean(np.log(chosen))) / h)
    tuned, again = _tune_ridge(**kwargs, criterion_factor=factor)
    again.seconds += report.seconds
    again.notes.append(f"the criteria's outcome kernel: {factor:.3g} x the embedding's (sqrt 2 x the first pass's read-out)")
    return tuned, again


def _tune_ridge(*, data, folds, params, grids, first_stage=None, seed: int = 0, criterion_factor: float = 1.0):
    """Choose λ₀, λ₁ and the X/V bandwidths (per group, or a common factor) by leave-one-out; returns (params, report).

    ``data`` is the cross-fitting's :class:`ccme.estimators.base.CrossFitData`
    (its scores clipped and cross-fitted); ``grids`` from :func:`resolve_tune`
    (``grids["x_bandwidth"] == "ard"``: the per-group search of
    :func:`_ard_search`, on subsamples drawn with ``seed``).
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
    sw = getattr(data, "sampling_weights", None)  # None: the unweighted criteria, unchanged

    def weights_of(rows):
        return None if sw is None else sw[rows]

    prepared = params.to_dict()
    A, Y, V = design.A, design.Y, design.V
    arms = design.arms
    G = _outcome_features(Y, prepared["kernels"]["y"], n_threads, seed, criterion_factor)
    uses_stage1 = uses_first_stage(mode)
    approximate = False
    spectra = {}  # (fold, arm, factor) -> _Spectrum of the stage-1 kernel on all the regression's units
    x_factor = 1.0
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xA2D]))  # the search's subsamples
    searched = {}  # "X"/"V" -> (evaluations, seconds)

    # Stage 1: KRR of φ(Y) on X among each arm's units of each fold's nuisance part.
    lam0 = dict(prepared["lam0"])
    x_kernel = prepared["kernels"]["x"]
    x_ard = uses_stage1 and _is_ard(grids.get("x_bandwidth"))
    x_moved = None          # per X group: whether stage 1's search moved it off X's rule (_warm_start)
    x_kernel = _with_groups(x_kernel) if x_ard else x_kernel
    if x_ard:
        # Per-group X bandwidths, one kernel for both arms: the search sums the arms' LOO errors (each arm
        # with its own λ₀), on at most ARD_UNITS["X"] of each arm's units (pooled over the folds' nuisance parts).
        ard_started = time.perf_counter()
        nuisance = np.unique(np.concatenate([fold.nuisance for fold in folds]))
        problems = []
        for arm in arms:
            rows = nuisance[A[nuisance] == arm]
            pick = rows[_subsample(rows, rng, ARD_UNITS["X"])]
            problems.append(_ArdProblem(Z=Xo[pick], T=G[pick], weight=len(rows) / len(nuisance), lam=lam0[arm],
                                        w=weights_of(pick)))
        if X_KERNEL_FROM != "all":  # after every arm's draw, so the seeded stream stays the default's
            problems = [problems[list(arms).index(_named_arm(arms, X_KERNEL_FROM, "X_KERNEL_FROM"))]]
        theta, visits, count = _ard_search(problems, x_kernel, grids.get("lam0", LAMBDA_GRID), "lam0" in grids,
                                           n_threads)
        tuned_x = _ard_kernel(x_kernel, theta)
        if mode == "dr" and DR_FIRST_STAGE_BANDWIDTH != 1.0:  # an experiment's setting (the constant's comment)
            tuned_x = tuned_x.narrowed(DR_FIRST_STAGE_BANDWIDTH)
            report.notes.append(f"the first stage's X bandwidths are {DR_FIRST_STAGE_BANDWIDTH:g} x their "
                                "leave-one-out choice (ccme.tuning.DR_FIRST_STAGE_BANDWIDTH)")
        report.relevance += _relevance("X", x_kernel, tuned_x, theta, bulk_sd(Xo))
        report.curves += _group_curves("x_bandwidth", tuned_x, theta, visits)
        report.chosen["x_bandwidth"] = [float(b) for b in tuned_x.bandwidth]
        x_kernel = prepared["kernels"]["x"] = tuned_x
        x_moved = {g.label: bool(np.isfinite(t) and t != 0.0) for g, t in zip(x_kernel.groups, theta)}
        searched["X"] = (count, time.perf_counter() - ard_started)
    if uses_stage1 and ("lam0" in grids or ("x_bandwidth" in grids and not x_ard)):
        lam_grid = np.asarray(grids.get("lam0", (lam0[arms[0]],)))
        factors = (1.0,) if x_ard else grids.get("x_bandwidth", (1.0,))
        # The default grid is extended downwards (a decade, two points, at a time, at most
        # _EXTENSIONS times) while the optimum sits at its smallest value: large
        # first-stage samples want smaller penalties.  A user's grid is kept as given.
        extend = grids.get("lam0") is LAMBDA_GRID
        best_overall = {}

        def curve(arm, f, grid):
            # Each fold's regression on at most LAMBDA_UNITS of its units, at the penalties λ·(m/s)^α that
            # correspond to the grid's λ at its m units (_transfer); the folds in parallel.
            nonlocal approximate

            def one(k):
                rows = fold_rows[k]
                pick = rows[_subsample(rows, _units_rng(seed, 0, k, arm), LAMBDA_UNITS)]
                shift = _transfer(len(pick), len(rows), "X")
                spec = _spectrum(Xo[pick], x_kernel, f, grid.min() * shift, 1, weights_of(pick))
                return spec, len(pick) == len(rows), spec.loo(G[pick], grid * shift, 1)

            fold_rows = [fold.nuisance[A[fold.nuisance] == arm] for fold in folds]
            total = np.zeros(len(grid))
            with threadpool_limits(limits=1, user_api="blas"):
                results = _parallel(one, list(range(len(folds))), n_threads)
            for k, (spec, whole, loo) in enumerate(results):
                if whole:  # kept for the stage-2 pseudo-outcomes' first stage
                    spectra[(k, arm, f)] = spec
                approximate |= spec.approximate
                total += len(fold_rows[k]) * loo
            return total / sum(len(rows) for rows in fold_rows)

        for arm in arms:
            arm_grid = lam_grid
            for extension in range(_EXTENSIONS + 1):
                per_factor = np.array([curve(arm, f, arm_grid) for f in factors])
                i_f, i_l = np.unravel_index(_best(per_factor.ravel()), per_factor.shape)
                if not (extend and i_l == 0) or extension == _EXTENSIONS:
                    break
                arm_grid = np.concatenate([arm_grid[0] * 10.0 ** _lambda_steps(-1), arm_grid])
            best_overall[arm] = (factors[i_f], arm_grid[i_l], per_factor[i_f, i_l])
            for f, values in zip(factors, per_factor):
                report.curves.append(TuningCurve("lam0", arm_grid, values, "LOO (RKHS)", arm_grid[i_l], arm, f))
            lam0[arm] = float(arm_grid[i_l])
        if "x_bandwidth" in grids and not x_ard:
            # One X kernel for both arms: the factor with the smaller summed criterion.
            f_best = min(best_overall.values(), key=lambda t: t[2])[0] if len(factors) > 1 else factors[0]
            if len({best[0] for best in best_overall.values()}) > 1:
                report.notes.append("the arms preferred different X bandwidth factors; the better one overall is used")
            x_kernel = Kernel(x_kernel.name, tuple(x_kernel.bandwidth_array * f_best),
                              f"{x_kernel.rule} x {f_best:g}, LOO")
            prepared["kernels"]["x"] = x_kernel
            report.chosen["x_bandwidth_factor"] = float(f_best)
            x_factor = f_best
        if mode == "dr" and DR_FIRST_STAGE_PENALTY != 1.0:
            lam0 = {arm: value * DR_FIRST_STAGE_PENALTY for arm, value in lam0.items()}
            report.notes.append(f"the first stage's penalty is {DR_FIRST_STAGE_PENALTY:g} x its leave-one-out choice "
                                "(undersmoothed for the doubly robust pseudo-outcome)")
        prepared["lam0"] = lam0
        report.chosen["lam0"] = dict(lam0)

    # Another first stage (a forest), chosen at the stage-1 values, before stage 2 is tuned on its pseudo-outcomes.
    replaced = first_stage(G=G, params=prepared, report=report) if first_stage is not None else {}

    # Stage 2: KRR of the pseudo-outcomes on V over each fold's target part.
    v_ard = False
    plugin = mode == "dr" and "lam1_plugin" in grids
    if "lam1" in grids or "v_bandwidth" in grids or plugin:
        lam1_now = prepared["lam1"]
        lam_grid = np.asarray(grids.get("lam1", (lam1_now[arms[0]],)))
        v_kernel = prepared["kernels"]["v"]
        v_ard = _is_ard(grids.get("v_bandwidth"))
        v_kernel = _with_groups(v_kernel) if v_ard else v_kernel
        factors = (1.0,) if v_ard else grids.get("v_bandwidth", (1.0,))
        stage1 = {(k, arm): spectra.get((k, arm, x_factor)) for k in range(len(folds)) for arm in arms}
        with threadpool_limits(limits=1, user_api="blas"):  # the same bits for any BLAS thread count
            targets = _pseudo_outcome_features(mode, design, Xo, folds, scores, G, x_kernel, lam0, n_threads, stage1,
                                               replaced, seed, sw)
        if v_ard:
            ard_started = time.perf_counter()
            searched_targets = targets
            if mode == "dr" and V_SEARCH_TARGETS == "plugin":
                # Each arm's plug-in part μ̂₀(X_i) in place of its pseudo-outcome ξ̂_i (V_SEARCH_TARGETS).
                searched_targets = [{arm: (rows, first, size, first) for arm, (rows, _, size, first) in per_arm.items()}
                                    for per_arm in targets]
            problems = _stage2_problems(mode, searched_targets, V, lam1_now, rng, sw)
            narrower = {"stage1-narrower": "all", "stage1-narrower-categorical": "categorical"}.get(V_SEARCH_START)
            start = (_warm_start(v_kernel, x_kernel if x_ard else None, dropped=V_SEARCH_START == "stage1",
                                 moved=x_moved if V_SEARCH_START == "stage1-moved" else None, narrower=narrower)
                     if V_SEARCH_START in ("stage1", "stage1-kept", "stage1-moved", "stage1-narrower",
                                           "stage1-narrower-categorical", "stage1-kept-eb") else None)

            def search(regressions):
                begin = (_empirical_bayes_start(regressions[0], v_kernel, start)
                         if V_SEARCH_START == "stage1-kept-eb" and len(regressions) == 1 else start)
                return _ard_search(regressions, v_kernel, grids.get("lam1", LAMBDA_GRID), "lam1" in grids,
                                   n_threads, start=begin, guard=ARD_STAGE2_GUARD)

            if len(arms) >= PER_ARM_V_SEARCH_ARMS and mode != "onestep":
                # The arms share one V kernel: each arm's own search, then per group the smallest bandwidth any
                # arm asks for.  The search on the arms' summed criterion let the arms whose laws vary smoothly
                # oversmooth the one whose law moves with a covariate (three arms: ISE 1.40 times its
                # one-versus-rest fit's, benchmarks/multi_arm.py; two arms: README, "Automatic tuning").
                per_arm = {arm: search([problem]) for arm, problem in _split_by_arm(problems[0], arms).items()}
                theta = (np.min([found[0] for found in per_arm.values()], axis=0) if V_KERNEL_FROM == "smallest"
                         else per_arm[_named_arm(arms, V_KERNEL_FROM, "V_KERNEL_FROM")][0])
                count = sum(found[2] for found in per_arm.values())
                tuned_v = _ard_kernel(v_kernel, theta)
                for arm, (theta_arm, visits, _) in per_arm.items():
                    report.curves += [replace(c, arm=arm) for c in
                                      _group_curves("v_bandwidth", _ard_kernel(v_kernel, theta_arm), theta_arm, visits)]
                report.notes.append("V bandwidths: one search per arm; per covariate group the smallest bandwidth of "
                                    "the arms is shared")
            else:
                theta, visits, count = search(problems)
                tuned_v = _ard_kernel(v_kernel, theta)
                report.curves += _group_curves("v_bandwidth", tuned_v, theta, visits)
            if V_ARD_SHIFT:
                shifted = np.isfinite(theta) & np.array([V_ARD_SHIFT_GROUPS == "all" or g.categorical
                                                         for g in v_kernel.groups], dtype=bool)
                theta = np.where(shifted, theta + V_ARD_SHIFT, theta)
                tuned_v = _ard_kernel(v_kernel, theta)
            report.relevance += _relevance("V", v_kernel, tuned_v, theta, bulk_sd(V))
            report.chosen["v_bandwidth"] = [float(b) for b in tuned_v.bandwidth]
            v_kernel = prepared["kernels"]["v"] = tuned_v
            searched["V"] = (count, time.perf_counter() - ard_started)
    # The split criterion scores the correction given the plug-in part's penalty, so λ₁ᵖ is chosen first (on the
    # final V kernel: the split criterion only runs where the λ₁ search does not rescale it).
    split_criterion = (plugin and "lam1" in grids and DR_CORRECTION_CRITERION == "split" and sw is None
                       and (v_ard or "v_bandwidth" not in grids))

    def choose_plugin_penalty():
        prepared["lam1_plugin"], curves = _plugin_penalty(
            targets, V, prepared["kernels"]["v"], grids["lam1_plugin"], weights_of,
            extend=grids["lam1_plugin"] is LAMBDA_GRID, n_threads=n_threads, n=len(design.A),
            by_arm=DR_PENALTIES_BY_ARM)
        report.chosen["lam1_plugin"] = dict(prepared["lam1_plugin"])
        report.curves.extend(curves)

    if split_criterion:
        choose_plugin_penalty()
    if ("lam1" in grids or "v_bandwidth" in grids) and ("lam1" in grids or not v_ard):
        # One regression per fold (per fold and arm for one-step) on the subsample of its second-stage units that
        # carries the pseudo-outcomes, at the penalties λ·(n/s)^α of the grid's λ at its n units (_transfer).
        per_fold = tuple((arm,) for arm in arms) if mode == "onestep" else (arms,)
        regressions = [(k, group) for k in range(len(folds)) for group in per_fold]

        def one(task):
            (k, group), _, f = task
            rows, _, size, _ = targets[k][group[0]]
            shift = _stage2_transfer(len(rows), size, len(folds))
            spec = _spectrum(V[rows], v_kernel, f, lam_grid.min() * shift, 1, weights_of(rows))
            if split_criterion:
                return spec.approximate, [size * _split_loo(spec, targets[k][arm][1], targets[k][arm][3],
                                                            lam_grid * shift, prepared["lam1_plugin"][arm] * shift)
                                          for arm in group]
            return spec.approximate, [size * spec.loo(targets[k][arm][1], lam_grid * shift, 1) for arm in group]

        # The default grid grows downwards as λ₀'s does (a decade at a time, at most _EXTENSIONS times) while an
        # arm's optimum sits at its smallest value: large second stages want smaller penalties.
        extend = grids.get("lam1") is LAMBDA_GRID
        by_arm = mode == "onestep" or (mode == "dr" and DR_PENALTIES_BY_ARM)  # one λ₁ per arm, else one for all
        for extension in range(_EXTENSIONS + 1):
            per_factor = {arm: np.zeros((len(factors), len(lam_grid))) for arm in arms}
            tasks = [(r, i_f, f) for i_f, f in enumerate(factors) for r in regressions]
            with threadpool_limits(limits=1, user_api="blas"):
                results = _parallel(one, tasks, n_threads)
            for ((_, group), i_f, _), (approx, curves) in zip(tasks, results):
                approximate |= approx
                for arm, values in zip(group, curves):
                    per_factor[arm][i_f] += values
            sums = [per_factor[arm] for arm in arms] if by_arm else [sum(per_factor[arm] for arm in arms)]
            at = [np.unravel_index(_best(c.ravel()), c.shape)[1] for c in sums]
            lowest = any(i == 0 for i in at)
            # The split criterion may ask for no correction at all: its grid also grows upwards.
            highest = split_criterion and any(i == len(lam_grid) - 1 for i in at)
            if not (extend and (lowest or highest)) or extension == _EXTENSIONS:
                break
            if lowest:
                lam_grid = np.concatenate([lam_grid[0] * 10.0 ** _lambda_steps(-1), lam_grid])
            if highest:
                lam_grid = np.concatenate([lam_grid, lam_grid[-1] * 10.0 ** _lambda_steps(1)])
        if by_arm:
            lam1 = {}
            for arm in arms:
                crit = per_factor[arm]
                i_f, i_l = np.unravel_index(_best(crit.ravel()), crit.shape)
                lam1[arm] = float(lam_grid[i_l])
                for f, curve in zip(factors, crit):
                    report.curves.append(TuningCurve("lam1", lam_grid, curve / len(design.A), "LOO (RKHS)",
                                                     lam_grid[i_l], arm, f))
            f_best = factors[int(np.argmin([sum(per_factor[arm][i].min() for arm in arms)
                                            for i in range(len(factors))]))]
        else:
            crit = sum(per_factor[arm] for arm in arms) / len(design.A)
            i_f, i_l = np.unravel_index(_best(crit.ravel()), crit.shape)
            lam1 = {arm: float(lam_grid[i_l]) for arm in arms}
            for f, curve in zip(factors, crit):
                report.curves.append(TuningCurve("lam1", lam_grid, curve, "LOO (RKHS), all arms", lam_grid[i_l],
                                                 None, f))
            f_best = factors[i_f]
        if mode == "dr" and DR_SECOND_STAGE_PENALTY != 1.0:
            lam1 = {arm: value * DR_SECOND_STAGE_PENALTY for arm, value in lam1.items()}
            report.notes.append(f"the second stage's penalty is {DR_SECOND_STAGE_PENALTY:g} x its leave-one-out "
                                "choice")
        prepared["lam1"] = lam1
        report.chosen["lam1"] = dict(lam1)
        if "v_bandwidth" in grids and not v_ard:
            prepared["kernels"]["v"] = Kernel(v_kernel.name, tuple(v_kernel.bandwidth_array * f_best),
                                              f"{v_kernel.rule} x {f_best:g}, LOO")
            report.chosen["v_bandwidth_factor"] = float(f_best)
    if plugin and not split_criterion:
        choose_plugin_penalty()
    if "y_bandwidth" in grids and _proxy_readout(mode, design, prepared) and sw is None:
        readout_started = time.perf_counter()
        ise = plugin and "lam1" in grids and DR_CORRECTION_CRITERION in ("ise", "aise")
        lam1_before = prepared["lam1"]
        chosen, curves, prepared["lam1"] = _extending_downwards(
            lambda factors: _readout_proxy(
                mode=mode, design=design, Xo=Xo, folds=folds, scores=scores, kernels=prepared["kernels"],
                lam0=prepared["lam0"], lam1=lam1_before, factors=factors, seed=seed,
                n_threads=n_threads, weighted=_readout_weighted(mode), lam1_plugin=prepared.get("lam1_plugin"),
                lam1_factors=DR_CORRECTION_FACTORS if ise else None,
                augmented=(ise and DR_CORRECTION_CRITERION == "aise") or (READOUT_AUGMENTED and mode == "dr"),
                fold_outcomes=data.fold_outcomes),
            grids["y_bandwidth"])
        if ise:
            report.chosen["lam1"] = dict(prepared["lam1"])
            report.notes.append(f"the correction's penalty: {'augmented' if DR_CORRECTION_CRITERION == 'aise' else 'weighted'} "
                                "ISE-CV of the split second stage's proxy")
        report.pending_readout = (chosen, curves)
        report.notes.append(f"y bandwidth: weighted ISE-CV on the fit's Nystrom proxy (rank at most {NYSTROM_RANK}), "
                            f"{time.perf_counter() - readout_started:.2f} s")
    if approximate:
        report.notes.append(f"a kernel needed more than rank {_MAX_RANK}: the LOO criteria are approximate")
        warnings.warn(
            f"hyperparameter tuning: a kernel matrix needed more than rank {_MAX_RANK} to reach its tolerance; "
            "the leave-one-out criteria are approximate",
            CcmeWarning,
            stacklevel=3,
        )
    for role, (count, seconds) in searched.items():
        report.notes.append(f"{role} bandwidths: per-group coordinate search, {count} LOO evaluations on at most "
                            f"{ARD_UNITS[role]} units per regression, {seconds:.2f} s")
    note_edges(report, design.treatment)
    report.seconds = time.perf_counter() - started
    return params.replace(**prepared), report


def _plugin_penalty(targets, V, v_kernel: Kernel, lam_grid, weights_of, *, extend: bool, n_threads: int, n: int,
                    by_arm: bool = False):
    """λ₁ᵖ, the doubly robust plug-in part's second-stage penalty, by leave-one-out on μ̂₀(X_i); ({arm: λ}, curves).

    The regression of the plug-in part μ̂₀(X_i) on V_i over each fold's
    second-stage units (the subsample the λ₁ search uses, its penalty carried
    to the fold's size by :data:`LAMBDA_RATE`), one penalty for all arms: the
    sum of the arms' and folds' LOO errors (RKHS) is minimised (``by_arm``:
    each arm's own sum, :data:`DR_PENALTIES_BY_ARM`).  Its targets
    are smooth functions of X with no outcome noise, so its choice is smaller
    than λ₁'s, which the correction's noise sets
    (:class:`ccme.estimators.base.SplitSecondStage`).  The default grid grows
    downwards as λ₁'s does.
    """
    lam_grid = np.asarray(lam_grid, dtype=float)
    arms = [arm for arm, (_, _, _, first) in targets[0].items() if first is not None]

    def one(k):
        rows, _, size, _ = next(iter(targets[k].values()))  # the arms share the second stage's rows
        shift = _stage2_transfer(len(rows), size, len(targets))
        spec = _spectrum(V[rows], v_kernel, 1.0, lam_grid.min() * shift, 1, weights_of(rows))
        return spec.approximate, {arm: size * spec.loo(targets[k][arm][3], lam_grid * shift, 1) for arm in arms}

    for extension in range(_EXTENSIONS + 1):
        with threadpool_limits(limits=1, user_api="blas"):
            results = _parallel(one, list(range(len(targets))), n_threads)
        per_arm = {arm: sum(curves[arm] for _, curves in results) / n for arm in arms}
        crits = per_arm if by_arm else {None: sum(per_arm.values())}
        best = {key: _best(crit) for key, crit in crits.items()}
        if not (extend and 0 in best.values()) or extension == _EXTENSIONS:
            break
        lam_grid = np.concatenate([lam_grid[0] * 10.0 ** _lambda_steps(-1), lam_grid])
    chosen = {key: float(lam_grid[k]) for key, k in best.items()}
    curves = [TuningCurve("lam1_plugin", lam_grid, crit, "LOO (RKHS) of mu0(X) on V" + ("" if by_arm else ", all arms"),
                          chosen[key], key) for key, crit in crits.items()]
    return ({arm: chosen[arm if by_arm else None] for arm in arms}), curves


def _split_loo(spec: _Spectrum, xi: np.ndarray, mu0: np.ndarray, lambdas, lam_plugin: float) -> np.ndarray:
    """Mean leave-one-out error of the split second stage along the correction's penalties ``lambdas``.

    The split doubly robust estimate (:class:`ccme.estimators.base.SplitSecondStage`) smooths the correction
    c_i = ξ̂_i − μ̂₀(X_i) at λ₁ and the plug-in part μ̂₀(X_i) at λ₁ᵖ, both on the same V kernel.  Its
    leave-one-out prediction of ξ̂_i misses by the sum of the two parts' leave-one-out residuals,
    r_i = (t_i − [H t]_i) / (1 − H_ii) for each part's targets t and hat matrix H = Q diag(s²/(s² + mλ)) Qᵀ (the
    path of :func:`ccme._backend.krr_loo_path`), so the criterion is (1/m) Σ_i ‖r_i^c(λ₁) + r_i^p(λ₁ᵖ)‖²: the
    error of the estimator that is fitted, where one regression of ξ̂ (the "whole" criterion) scores another.
    Unweighted (the caller keeps the whole criterion under sampling weights).
    """
    Q, s2 = spec.Q, spec.s2
    m = len(Q)
    Q2 = Q * Q

    def residuals(T, P, lam):
        d = s2 / (s2 + m * lam)
        return (T - Q @ (d[:, None] * P)) / (1.0 - Q2 @ d)[:, None]

    plugin = residuals(mu0, Q.T @ mu0, lam_plugin)
    correction = xi - mu0
    P = Q.T @ correction
    return np.array([float(np.mean(np.sum((residuals(correction, P, lam) + plugin) ** 2, axis=1)))
                     for lam in np.asarray(lambdas, dtype=float)])


def _proxy_readout(mode: str, design, prepared: dict) -> bool:
    """Whether σ_y is chosen on the Nyström proxy (:func:`_readout_proxy`): a one-dimensional outcome and, where the
    mode has a first stage, the kernel ridge in both arms (a forest's weights have no such proxy)."""
    if design.Y.shape[1] != 1:
        return False
    first = prepared.get("first_stage") or {}
    return not uses_first_stage(mode) or all(first.get(arm, "kernel") == "kernel" for arm in design.arms)


def _named_arm(arms, code: str, setting: str):
    """The arm whose code, as a string, is ``code`` (the diagnostics X_KERNEL_FROM and V_KERNEL_FROM)."""
    for arm in arms:
        if str(arm) == code:
            return arm
    raise ParameterError(f"ccme.tuning.{setting} = {code!r} names none of the arms {[str(a) for a in arms]}")


def _warm_start(v_kernel: Kernel, x_kernel: Kernel | None, dropped: bool = True, moved: dict | None = None,
                narrower: str | None = None):
    """The V search's start: for a covariate whose X bandwidth stage 1 learned, that bandwidth (as a log2 factor
    of V's rule); the rule's own elsewhere, and, unless ``dropped``, for a covariate stage 1 dropped.  With
    ``moved`` ({group label: whether stage 1's search moved it off X's rule}), only the moved covariates start at
    stage 1's bandwidth: an unmoved one carries X's rule, a median distance over all of X's columns, not
    anything stage 1 learned about the covariate.

    The stage-1 regression (φ(Y) on X) sees the same covariates with far less
    noisy targets than the second stage's pseudo-outcomes, whose leave-one-out
    criterion is often nearly flat in the bandwidths.
    """
    if x_kernel is None:
        return None
    learned = {g.label: x_kernel.bandwidth_array[g.columns[0]] for g in x_kernel.groups}
    low, high = ARD_LOG2_RANGE
    start = np.zeros(len(v_kernel.groups))
    for i, g in enumerate(v_kernel.groups):
        rule = v_kernel.bandwidth_array[g.columns[0]]
        if g.label in learned and np.isfinite(rule) and (moved is None or moved.get(g.label, False)):
            if np.isfinite(learned[g.label]):
                start[i] = np.clip(np.log2(learned[g.label] / rule), low, high)
            elif dropped:
                start[i] = np.inf
        if narrower == "all" or (narrower == "categorical" and g.categorical):
            start[i] = min(start[i], 0.0)
    return start


def _empirical_bayes_start(problem: "_ArdProblem", v_kernel: Kernel, start) -> np.ndarray:
    """The V search's start with each unordered factor of V (kinds "categorical", "binary") moved to the pooling
    that an empirical-Bayes shrinkage of its level means implies (:data:`V_SEARCH_START` "stage1-kept-eb").

    In the outcome kernel's feature coordinates T of the regression's targets, each level ℓ's mean m_ℓ has noise
    v_ℓ = tr Cov(T | ℓ) / n_ℓ; the between-level variance is τ² = max(0, Σ n_ℓ (‖m_ℓ − m̄‖² − v_ℓ) / n) (method
    of moments, m̄ the grand mean), and the James–Stein weight on a level's own mean is w_ℓ = τ² / (τ² + v_ℓ).  A
    Li–Racine kernel with smoothing λ weighs the level's own mean n_ℓ(1 − λ) / (n_ℓ(1 − λ) + λn) against the grand
    mean (the Nadaraya–Watson reading of the kernel ridge), which equals w_ℓ at λ_ℓ = n_ℓ(1 − w_ℓ) / (n_ℓ(1 − w_ℓ) +
    w_ℓ n); the group starts at the n-weighted mean of λ_ℓ, as a log2 factor of the rule's bandwidth.  The factor's
    marginal levels only: V's other covariates are ignored.  Other groups keep ``start`` (None: the rule's, 0).
    """
    theta = np.zeros(len(v_kernel.groups)) if start is None else np.array(start, dtype=np.float64)
    low, high = ARD_LOG2_RANGE
    T, n = problem.T, len(problem.T)
    for i, g in enumerate(v_kernel.groups):
        rule = v_kernel.bandwidth_array[g.columns[0]]
        if g.kind not in ("categorical", "binary") or not np.isfinite(rule):
            continue
        _, level = np.unique(problem.Z[:, list(g.columns)], axis=0, return_inverse=True)
        counts = np.bincount(level.ravel())
        if len(counts) < 2 or counts.min() < 2:
            continue
        rows = [level.ravel() == code for code in range(len(counts))]
        means = np.vstack([T[r].mean(axis=0) for r in rows])
        noise = np.array([np.sum(T[r].var(axis=0, ddof=1)) for r in rows]) / counts
        grand = counts @ means / n
        tau2 = max(0.0, float(np.sum(counts * (np.sum((means - grand) ** 2, axis=1) - noise)) / n))
        w = tau2 / (tau2 + noise)
        lam = float(np.sum(counts * (counts * (1 - w) / (counts * (1 - w) + w * n))) / n)
        if lam >= 1.0:
            theta[i] = high
        elif lam <= 0.0:
            theta[i] = low
        else:
            theta[i] = float(np.clip(np.log2(g.bandwidth(lam) / rule), low, high))
    return theta


def _with_groups(kernel: Kernel) -> Kernel:
    """``kernel``, or, when it knows no covariate groups (built by hand), with each column its own group."""
    if kernel.groups:
        return kernel
    from .kernels import Group

    groups = tuple(Group(f"column {j}", "numeric", (j,)) for j in range(len(kernel.bandwidth)))
    return Kernel(kernel.name, kernel.bandwidth, kernel.rule, groups)


def _is_ard(grid) -> bool:
    return isinstance(grid, str) and grid == "ard"


def _stage2_problems(mode, targets, V, lam1, rng, sw=None) -> list:
    """The second-stage regressions of the bandwidth search, pooled over the folds and subsampled.

    One regression of both arms' pseudo-outcomes (their feature coordinates side
    by side: its LOO error is the sum of the arms', as λ₁ is shared) on the
    second-stage units, or one per arm for the one-step mode.
    """
    arms = tuple(targets[0])
    rows = {arm: np.concatenate([per_arm[arm][0] for per_arm in targets]) for arm in arms}
    feats = {arm: np.vstack([per_arm[arm][1] for per_arm in targets]) for arm in arms}
    if mode == "onestep":
        total = sum(len(rows[arm]) for arm in arms)
        problems = []
        for arm in arms:
            pick = _subsample(rows[arm], rng, ARD_UNITS["V"])
            problems.append(_ArdProblem(Z=V[rows[arm][pick]], T=feats[arm][pick], weight=len(rows[arm]) / total,
                                        lam=lam1[arm], w=None if sw is None else sw[rows[arm][pick]]))
        return problems
    first = arms[0]  # the arms share the second stage's rows (and λ₁)
    pick = _subsample(rows[first], rng, ARD_UNITS["V"])
    return [_ArdProblem(Z=V[rows[first][pick]], T=np.hstack([feats[arm][pick] for arm in arms]), weight=1.0,
                        lam=lam1[first], w=None if sw is None else sw[rows[first][pick]])]


def _split_by_arm(problem: _ArdProblem, arms) -> dict:
    """The joint second-stage regression of :func:`_stage2_problems` as one regression per arm (its columns of T)."""
    width = problem.T.shape[1] // len(arms)
    return {arm: replace(problem, T=problem.T[:, i * width:(i + 1) * width]) for i, arm in enumerate(arms)}


def _pseudo_outcome_features(mode, design, Xo, folds, scores, G, x_kernel, lam0, n_threads, stage1, replaced=None,
                             seed: int = 0, sw=None):
    """Per fold and arm: (second-stage rows, feature coordinates of ξ̂ on them, the regression's number of units,
    those of μ̂₀(X_i) on them or None).

    The rows are a seeded subsample of at most :data:`LAMBDA_UNITS` of the
    regression's units (all of them when it has no more; one subsample for
    both arms, except in the one-step mode, whose regressions are the arms'
    own).  The pseudo-outcomes of :mod:`ccme.pseudo` in the outcome features
    G: a_i G(Y_i) + b_i μ̂₀(X_i), with μ̂₀ fitted on all the units of the
    arm's nuisance part (:func:`_first_stage_at`), or as given in ``replaced``
    ((fold index, arm) → μ̂₀'s features at all the fold's second-stage rows).
    """
    A = design.A
    out = []
    for k, fold in enumerate(folds):
        per_arm = {}
        target = fold.target
        shared = None
        for arm in design.arms:
            pseudo = pseudo_outcome(mode, arm, A=A, target=target, scores_target=scores[target])
            if mode == "onestep" or shared is None:
                pick = _subsample(pseudo.rows, _units_rng(seed, 1, k, arm if mode == "onestep" else 2), LAMBDA_UNITS)
                shared = pick
            pick = shared
            rows = pseudo.rows[pick]
            first = None
            if pseudo.has_first_stage and replaced and (k, arm) in replaced:
                first = replaced[(k, arm)][pick]
            elif pseudo.has_first_stage:
                rows0 = fold.nuisance[A[fold.nuisance] == arm]
                first = _first_stage_at(Xo[rows], Xo, rows0, G, x_kernel, lam0[arm], stage1.get((k, arm)),
                                        _units_rng(seed, 3, k, arm), n_threads, sw)
            sub = PseudoOutcome(rows=rows, a=pseudo.a[pick], b=pseudo.b[pick])
            per_arm[arm] = (rows, sub.features(G[rows], first), len(pseudo.rows), first)
        out.append(per_arm)
    return out


def _first_stage_at(X1, Xo, rows0, G, x_kernel: Kernel, lam0: float, spectrum, rng, n_threads: int,
                    sw=None) -> np.ndarray:
    """μ̂₀ at the rows of ``X1`` in the coordinates G: K_X1X0 (K_X0 + mλ₀I)⁻¹ G_0 over the m units ``rows0``.

    With sampling weights ``sw`` (all units'): K_X1X0 (W₀K_X0 + λ₀Σw I)⁻¹ W₀ G_0, the weighted first stage
    (the spectrum then carries the weights; :meth:`_Spectrum.solve`).

    Up to :data:`LAMBDA_UNITS` units: through the low-rank spectrum of K_X0
    (``spectrum``, the stage-1 tuning's when it ran on all of them) and the
    exact cross-kernel.  Beyond: the Nyström kernel ridge regression on at most
    :data:`NYSTROM_RANK` centres (:func:`_nystrom_map`), a block of rows at a
    time: O(m r²) time and O(r²) memory besides the rows' coordinates.
    """
    m = len(rows0)
    w0 = None if sw is None else sw[rows0]
    if spectrum is not None or m <= LAMBDA_UNITS:
        spectrum = spectrum or _spectrum(Xo[rows0], x_kernel, 1.0, lam0, n_threads, w0)
        solved = spectrum.solve(m * lam0, G[rows0])
        return apply_first_stage(X1, Xo[rows0], x_kernel, solved, n_threads)
    X0 = np.ascontiguousarray(Xo[rows0])
    nystrom = _nystrom_map(X0, x_kernel, m * lam0, rng, n_threads)
    mu = m * lam0 if w0 is None else float(np.sum(w0)) * lam0
    W = nystrom.ridge(X0, lambda start, stop: G[rows0[start:stop]], mu, n_threads, w0)
    return nystrom.features(X1, n_threads) @ W


# ---------------------------------------------------------------------------
# per-group (ARD) bandwidths by leave-one-out: a coordinate search
# ---------------------------------------------------------------------------
#: Units each regression of the bandwidth search uses at most, per stage: a seeded subsample of the arm's units,
#: pooled over the folds' nuisance parts, in stage 1 ("X"); of the second-stage units with their fold's
#: pseudo-outcomes in stage 2 ("V"), whose noisier targets need more units (and whose search costs less).  Doubled
#: on the zoo's "choose" cases (README, "Automatic tuning"): X 1.003 for 3.2 times the fit time, V 0.991 for 1.2.
ARD_UNITS = {"X": 500, "V": 2000}
#: The sweeps of the coordinate search, as log2 steps of a group's factor: ×2 then ×√2.
ARD_STEPS = (1.0, 0.5)
#: Range of a group's log2 factor of the rule's bandwidth (1/16 … 16), besides +inf (the group dropped).
ARD_LOG2_RANGE = (-4.0, 4.0)
_ARD_IMPROVEMENT = 1e-6         # the relative decrease of the criterion a move needs
#: Stage 2 moves a bandwidth only for a decrease of its criterion beyond this many standard errors: the
#: pseudo-outcomes' leave-one-out criterion is often flat within its noise (stage 1's is not guarded).
ARD_STAGE2_GUARD = 1.0
#: From this many arms on (every treatment, by default), the V kernel the arms share keeps, per covariate group,
#: the smallest bandwidth of one search per arm (tune_ridge); with fewer arms, one search on the arms' summed
#: criterion, the rule before it (3 restores it for binary treatments: benchmarks/v_bandwidth_rule.py compares).
#: At n = 12000 on the "choose" case large_mixed (seeds 1-3, ``--setting ccme.tuning.PER_ARM_V_SEARCH_ARMS=2,3
#: --cases large_mixed --stem per_arm_v_large``) the one summed search gave 0.99 / 1.01: no difference there.
PER_ARM_V_SEARCH_ARMS = 2
#: Whose leave-one-out errors the X search sums: "all", every arm's (each with its λ₀; the default), or one arm's
#: code as a string ("1", "0"), that arm's alone, its X kernel then used by every arm.  A diagnostic, as
#: :data:`V_KERNEL_FROM` is: scoring each arm under its own search bounds what an X kernel per arm would gain
#: (``benchmarks/results/x_kernel_from_*.txt``).
X_KERNEL_FROM = "all"
#: Which of those searches sets the shared V kernel: "smallest", per group the smallest bandwidth of the arms
#: (the default), or one arm's code as a string ("1", "0"), its own search's bandwidths for every arm.  The
#: second is a diagnostic: scoring each arm under its own search bounds what a V kernel per arm would gain
#: (``benchmarks/results/v_kernel_from_*.txt``).
V_KERNEL_FROM = "smallest"
#: Where the V search starts (_warm_start): "stage1-kept", at the bandwidths stage 1 learned for the same covariates
#: where it kept them and at the rule's where it dropped them; "stage1", at stage 1's everywhere, drops included; or
#: "rule", at the rule's.  A covariate stage 1 drops is irrelevant given all of X, not given V: p(Y^a | V) may move
#: with it through the confounders it predicts.  Measured on the zoo (``benchmarks/tuning_rule.py``,
#: ``results/v_search_start_*.txt``; README, "Automatic tuning"): against "stage1", "stage1-kept" changed only the
#: cases where stage 1 drops a V covariate, none for the worse ("choose" 0.993: sparse_v10 0.97 / 0.94; "report"
#: 0.990 without ``through_w``: ihdp_all25 0.84 / 0.95); "rule" was better on "choose" (0.976) but not on
#: "report" (0.998; worse where V is categorical, whose pooling stage 1 sets better than the rule); rerun against
#: "stage1-kept" at 5481353 (``results/v_start_rule_*.txt``): 0.997 and 1.033.  "stage1-moved" starts at stage 1's
#: bandwidth only the covariates whose stage-1 search moved them off X's rule, the others at V's rule (an unmoved
#: X bandwidth is X's median rule, wider the more columns X has): "choose" 0.995 (mixed_v's control arm 0.963),
#: "report" 1.000 (5 better, 2 worse: nhefs_education's control arm 1.11), the same fit time
#: (``results/v_start_moved*_*.txt``), so the default stays.  "stage1-narrower" starts each group at the narrower
#: of stage 1's bandwidth and the rule's (stage 1 often pools a V factor almost completely, smoothing 0.95 on
#: nhefs_exercise at seed 1, and the guarded search keeps it), "stage1-narrower-categorical" only the categorical
#: groups (``results/v_search_start_narrower_*.txt``): "choose" 0.982 and 1.000, "report" 1.017 (8 better, 11 worse)
#: and 1.018 (2 better, 8 worse: categorical_v 1.09 / 1.20, nsw_race 1.15 / 1.19, nhefs_exercise 1.10 / 0.79).
#: "stage1-kept-eb" starts each unordered factor of V, per arm, at the pooling an empirical-Bayes shrinkage of its
#: level means implies (:func:`_empirical_bayes_start`; ``results/v_search_start_eb_*.txt``): "choose" 0.995 (only
#: mixed_v moves, 0.91 / 1.03), "report" 1.020 (1 better, 5 worse: categorical_v 1.11 / 1.20, nsw_race 1.19 / 1.20,
#: nhefs_exercise 1.03 / 0.93): where its RKHS shrinkage pools less, the density wants more.
V_SEARCH_START = "stage1-kept"
#: A diagnostic: log₂ of a factor applied to every V group's searched bandwidth that the search keeps (dropped
#: groups stay dropped), after the search; 0 leaves the search's choice.  It asks whether the search's
#: leave-one-out criterion (the embedding's RKHS norm) pools V too much for the densities' error everywhere, as it
#: does on ihdp_site's treated arm (``benchmarks/accuracy/v_criterion.py``): it does not.  On the zoo's "choose"
#: cases (``--setting "ccme.tuning.V_ARD_SHIFT=0,-0.5,0.5" --stem v_ard_shift``) −0.5 (bandwidths × 0.71) gives
#: 1.009 (5 case-arms better, 6 worse; weak_overlap's control arm 1.13, mixed_v 0.91 / 0.95) and +0.5 gives 0.993
#: (4 better, 6 worse): the search's own choice stays.
V_ARD_SHIFT = 0.0
#: Which V groups :data:`V_ARD_SHIFT` moves: ``"all"`` or ``"categorical"`` (unordered, ordered and binary ones).
#: The categorical ones alone (both gaps have a categorical V) move only mixed_v on the "choose" cases, its control
#: arm the wrong way: −0.5 gives 0.93 / 1.05 and −1 0.97 / 1.03 (``results/v_ard_shift_categorical_choose.txt``).
V_ARD_SHIFT_GROUPS = "all"
#: What the doubly robust V search regresses on V: "pseudo", the pseudo-outcomes ξ̂ (whose leave-one-out criterion
#: the correction's noise flattens), or "plugin", their plug-in part μ̂₀(X), a smooth function of X whose regression
#: on V shows how the conditional law moves with each V covariate, directly or through the confounders it predicts.
#: "plugin" was not better on the zoo (``benchmarks/tuning_rule.py``, ``results/v_search_targets_*.txt``: "choose"
#: 0.983, "report" 0.999 without ``through_w``, which was built after the idea, 0.980 with it; ihdp_all25's treated
#: arm 1.20), so the pseudo-outcomes stay.
V_SEARCH_TARGETS = "pseudo"


#: The order in which each sweep of the coordinate search visits the covariate groups, whose result depends on it:
#: "relevance", the most relevant first (the largest rise of the criterion when the group is dropped at the search's
#: start, or fall when a dropped group is restored; ties in the order of "values"); "values", an order fixed by the
#: covariates' values (:func:`ccme.column_order.group_order`); or "formula", V's and X's terms as written, the rule
#: before these.  The first two make the fit independent of the order of the formula's terms and of a factor's
#: levels (with the formula's order, reversing the paper simulation's terms moved its density by 8% of the peak).
#: Measured against "formula" on the zoo (ridge DR, seeds 1-3, 150 V-points; ``benchmarks/tuning_rule.py``,
#: ``results/ard_order_*.txt``, ``results/column_order_*.txt``): "relevance" 0.979 on "choose" (per-seed interval
#: 0.952-1.008) and 1.008 on "report" (0.994-1.020), about 10% more fit time (one evaluation per group);
#: "values" (with the forest's canonical columns) 0.999 and 1.020 (0.996-1.038).
ARD_ORDER = "relevance"


@dataclass
class _ArdProblem:
    """One kernel ridge regression of the search: inputs, targets' feature coordinates, weight, current penalty.

    ``w``: the units' sampling weights (None: unweighted), for the weighted criterion of the module docstring.
    """

    Z: np.ndarray
    T: np.ndarray
    weight: float
    lam: float
    w: np.ndarray | None = None


def _spectrum_bw(X, name: str, bandwidth: np.ndarray, lam_min: float, n_threads: int, w=None) -> _Spectrum:
    """:func:`_spectrum` at explicit per-column bandwidths; the ignored (inf) columns are left out first.

    With every column ignored the kernel is the constant 1: one eigenvector.
    The caller holds the BLAS thread limit (:func:`_ard_search`).  With
    sampling weights ``w``, the spectrum of W^{1/2} K W^{1/2}.
    """
    n = len(X)
    finite = np.isfinite(bandwidth)
    if not finite.any():
        if w is not None:  # K̃ = √w √wᵀ: one eigenvector √w/‖√w‖, eigenvalue Σw
            return _Spectrum(Q=(np.sqrt(w) / np.sqrt(np.sum(w)))[:, None], s2=np.array([float(np.sum(w))]),
                             approximate=False, weights=w)
        return _Spectrum(Q=np.full((n, 1), 1.0 / np.sqrt(n)), s2=np.array([float(n)]), approximate=False)
    tol = _RANK_TOL * min(1.0, n * lam_min)
    X = np.ascontiguousarray(X[:, finite])
    L, _, residual = _backend.pivoted_cholesky(X, name, bandwidth[finite], tol, _MAX_RANK, n_threads=n_threads)
    if w is not None:
        L = np.sqrt(w)[:, None] * L
    s2, W = np.linalg.eigh(L.T @ L)
    keep = s2 > 1e-13 * max(s2.max(initial=0.0), 1e-300)
    s2, W = s2[keep], W[:, keep]
    return _Spectrum(Q=(L @ W) / np.sqrt(s2), s2=s2, approximate=residual > tol, weights=w)


def _ard_loo(problem: _ArdProblem, name: str, bandwidth: np.ndarray, lambdas=None) -> np.ndarray:
    """Leave-one-out errors of one regression, single-threaded (the search runs these in parallel).

    Returns each unit's error at the problem's penalty (``lambdas`` None), or
    the mean error at each penalty of ``lambdas``.

    At the problem's penalty: K ≈ LLᵀ by pivoted Cholesky
    (to 1e-2 · min(1, mλ)), H = L(LᵀL + mλI)⁻¹Lᵀ = BᵀB with B = C⁻¹Lᵀ, C the
    Cholesky factor of LᵀL + mλI: about 3mr² operations for rank r, a third
    of the eigendecomposition's.  Along a grid ``lambdas``: the spectral path
    (:func:`ccme._backend.krr_loo_path`).
    """
    import scipy.linalg

    if lambdas is not None:
        spectrum = _spectrum_bw(problem.Z, name, bandwidth, float(np.min(lambdas)), 1, problem.w)
        return spectrum.loo(problem.T, lambdas, 1)
    m = len(problem.Z)
    mu = m * problem.lam if problem.w is None else float(np.sum(problem.w)) * problem.lam
    finite = np.isfinite(bandwidth)
    if finite.any():
        L, _, _ = _backend.pivoted_cholesky(np.ascontiguousarray(problem.Z[:, finite]), name, bandwidth[finite],
                                            _RANK_TOL * min(1.0, mu), _MAX_RANK, n_threads=1)
    else:
        L = np.ones((m, 1))  # the constant kernel
    T = problem.T
    if problem.w is not None:  # the transformed coordinates: √w ∘ L and √w ∘ T (module docstring)
        root = np.sqrt(problem.w)[:, None]
        L, T = root * L, root * T
    A = L.T @ L
    A[np.diag_indices_from(A)] += mu
    C = scipy.linalg.cholesky(A, lower=True, check_finite=False)
    B = scipy.linalg.solve_triangular(C, L.T, lower=True, check_finite=False)
    residual = T - B.T @ (B @ T)
    h = np.einsum("ij,ij->j", B, B)
    return np.einsum("ij,ij->i", residual, residual) / (1.0 - h) ** 2


def _ard_search(problems, kernel: Kernel, lam_grid, tune_lambda: bool, n_threads: int, start=None,
                guard: float = 0.0):
    """Coordinate search of the log2 bandwidth factors of ``kernel.groups`` (and +inf), alternating with λ.

    The criterion is Σ_p weight_p · LOO_p over the regressions ``problems``,
    each at its own penalty, which is chosen over ``lam_grid`` at the start
    and over [λ/10, 10λ] in half-decades after every sweep (``tune_lambda``;
    else kept): the search alternates between the bandwidths and the penalties.  Sweep s visits the groups in
    the order of :data:`ARD_ORDER` (by default their relevance at the start), tries the factor
    × 2^(±step_s) (:data:`ARD_STEPS`) and, in the
    first sweep, +inf (a dropped group tries its last finite value), and
    moves to the best of them while it lowers the criterion, continuing in
    the same direction; groups whose rule bandwidth is already inf (constant
    columns) are left alone.  Evaluations of one visit run in parallel, one
    thread each (the result does not depend on the thread count).  ``start``
    (log2 factors, inf allowed) is where the search starts (default: 0, the
    rule's bandwidths).  ``guard`` > 0 makes a move need a decrease of the
    criterion larger than ``guard`` standard errors of the decrease (from the
    units' paired leave-one-out errors): where the criterion is flat within
    its noise the search stays where it is.

    Returns
    -------
    theta : ndarray (n_groups,)
        log2 factors, +inf for a dropped group.
    visits : list of dict
        Per group, {log2 factor: criterion} of its last visit.
    evaluations : int
    """
    from concurrent.futures import ThreadPoolExecutor

    groups = kernel.groups
    base = kernel.bandwidth_array
    lam_grid = np.asarray(lam_grid, dtype=np.float64)
    fixed = [not np.all(np.isfinite(base[list(g.columns)])) for g in groups]
    theta = np.zeros(len(groups)) if start is None else np.where(fixed, 0.0, np.asarray(start, dtype=np.float64))
    last_finite = np.where(np.isfinite(theta), theta, 0.0)
    visits = [dict() for _ in groups]
    count = 0
    workers = max(1, min(8, n_threads if n_threads > 0 else (os.cpu_count() or 1)))

    def bandwidth(t):
        bw = base.copy()
        for g, value in zip(groups, t):
            cols = list(g.columns)
            bw[cols] = np.inf if np.isinf(value) else base[cols] * 2.0 ** value
        return bw

    def evaluate(thetas, grids=None):
        """Criterion at each θ in ``thetas`` at the problems' penalties, and the units' errors per problem (with
        ``grids``, one λ grid per problem: at their best λ there, returned instead of the units' errors)."""
        nonlocal count
        grids = grids or [None] * len(problems)
        tasks = [(i, j) for i in range(len(thetas)) for j in range(len(problems))]
        bws = [bandwidth(t) for t in thetas]
        with ThreadPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            curves = list(pool.map(lambda ij: _ard_loo(problems[ij[1]], kernel.name, bws[ij[0]], grids[ij[1]]),
                                   tasks))
        count += len(thetas)
        values = np.zeros(len(thetas))
        extra = [[None] * len(problems) for _ in thetas]
        for (i, j), curve in zip(tasks, curves):
            if grids[j] is None:  # the units' errors at the problem's λ
                values[i] += problems[j].weight * float(np.mean(curve))
                extra[i][j] = curve
            else:
                k = _best(curve)
                values[i] += problems[j].weight * curve[k]
                extra[i][j] = float(grids[j][k])
        return values, extra

    def better(value, units, reference, reference_units) -> bool:
        """Whether a decrease from ``reference`` to ``value`` counts (beyond ``guard`` standard errors)."""
        decrease = reference - value
        if not decrease > _ARD_IMPROVEMENT * reference:
            return False
        if guard <= 0:
            return True
        var = sum(p.weight ** 2 * np.var(r - u, ddof=1) / len(u) for p, u, r in zip(problems, units, reference_units))
        return decrease > guard * np.sqrt(var)

    def update_lambdas(first):
        """Each problem's λ over ``lam_grid`` (the first time), then over [λ/10, 10λ] (:func:`_lambda_steps`)."""
        if tune_lambda:
            local = [lam_grid if first else np.clip(p.lam * 10.0 ** _lambda_steps(), lam_grid.min() / 100,
                                                    lam_grid.max()) for p in problems]
            _, lams = evaluate([theta.copy()], [np.unique(g) for g in local])
            for p, lam in zip(problems, lams[0]):
                p.lam = lam
        values, units = evaluate([theta.copy()])
        return float(values[0]), units[0]

    def visiting_order():
        """The free groups in the order the sweeps visit them (:data:`ARD_ORDER`)."""
        free = [g for g in range(len(groups)) if not fixed[g]]
        if ARD_ORDER == "formula":
            return free
        # Ties (and the "values" order) go by the covariates' values, not by the formula's term order.
        by_values = [g for g in group_order(problems[0].Z, [list(c.columns) for c in groups]) if not fixed[g]]
        if ARD_ORDER == "values" or len(free) < 2:
            return by_values
        # Each group toggled at the start (a kept group dropped, a dropped one restored): how much the criterion
        # loses without it is its relevance there.
        toggled = []
        for g in by_values:
            t = theta.copy()
            t[g] = last_finite[g] if np.isinf(t[g]) else np.inf
            toggled.append(t)
        values, _ = evaluate(toggled)
        relevance = [(v - current) * (-1.0 if np.isinf(theta[g]) else 1.0) for g, v in zip(by_values, values)]
        return [by_values[i] for i in np.argsort(-np.asarray(relevance), kind="stable")]

    with threadpool_limits(limits=1, user_api="blas"):
        current, current_units = update_lambdas(True)
        low, high = ARD_LOG2_RANGE
        order = visiting_order()
        for step in ARD_STEPS:
            for g in order:
                seen = {float(theta[g]): current}
                here = theta[g]
                if np.isinf(here):
                    candidates = [last_finite[g]]
                else:  # dropping the group is tried in the first sweep
                    candidates = [c for c in (max(low, here - step), min(high, here + step)) if c != here]
                    candidates += [np.inf] if step == ARD_STEPS[0] else []
                while candidates:
                    trial = []
                    for c in candidates:
                        t = theta.copy()
                        t[g] = c
                        trial.append(t)
                    values, units = evaluate(trial)
                    seen.update({float(c): float(v) for c, v in zip(candidates, values)})
                    k = int(np.argmin(values))
                    if not better(values[k], units[k], current, current_units):
                        break
                    move = candidates[k] - here if np.isfinite(candidates[k]) and np.isfinite(here) else 0.0
                    here, current, current_units = candidates[k], float(values[k]), units[k]
                    theta[g] = here
                    if np.isfinite(here):
                        last_finite[g] = here
                    nxt = here + move
                    candidates = [nxt] if move and low <= nxt <= high else []
                visits[g] = seen
            current, current_units = update_lambdas(False)
    return theta, visits, count


def _subsample(rows: np.ndarray, rng, limit: int) -> np.ndarray:
    """At most ``limit`` of ``rows`` (positions into it), sorted; all of them when there are fewer."""
    if len(rows) <= limit:
        return np.arange(len(rows))
    return np.sort(rng.choice(len(rows), limit, replace=False))


def _ard_kernel(kernel: Kernel, theta: np.ndarray) -> Kernel:
    """``kernel`` with its groups' bandwidths multiplied by 2^θ (inf: dropped)."""
    bw = kernel.bandwidth_array.copy()
    for g, value in zip(kernel.groups, theta):
        cols = list(g.columns)
        bw[cols] = np.inf if np.isinf(value) else bw[cols] * 2.0 ** value
    return Kernel(kernel.name, tuple(bw), f"{kernel.rule}, per-group factors by LOO (ARD)", kernel.groups)


def _relevance(role: str, start: Kernel, tuned: Kernel, theta, scale: np.ndarray) -> list:
    """The relevance table's rows of one kernel (see :meth:`TuningReport.relevance_frame`)."""
    rows = []
    for g, value in zip(tuned.groups, theta):
        cols = list(g.columns)
        bw = float(tuned.bandwidth_array[cols[0]])
        dropped = bool(np.isinf(bw))
        levels = len(cols) + 1 if g.kind in ("ordered", "binary") else len(cols)
        rows.append({
            "role": role, "group": g.label, "kind": g.kind, "n_columns": len(cols),
            "levels": levels if g.categorical else None,
            "factor": float(2.0 ** value) if np.isfinite(value) else float("inf"),
            "bandwidth": bw,
            "bandwidth_sd": (float("inf") if dropped else float(bw / scale[cols[0]]))
            if not g.categorical and scale[cols[0]] > 0 else None,
            "smoothing": g.smoothing(bw) if g.categorical else None,
            "dropped": dropped,
        })
    return rows


def _group_curves(parameter: str, kernel: Kernel, theta, visits) -> list:
    curves = []
    for g, value, seen in zip(kernel.groups, theta, visits):
        if not seen:
            continue
        keys = sorted(seen)
        factors = np.array([2.0 ** k if np.isfinite(k) else np.inf for k in keys])
        chosen = 2.0 ** value if np.isfinite(value) else np.inf
        curves.append(TuningCurve(parameter, factors, np.array([seen[k] for k in keys]),
                                  "LOO (RKHS), coordinate search", float(chosen), None, None, g.label))
    return curves


# ---------------------------------------------------------------------------
# the read-out criterion on a Nyström proxy of the fit (tune_ridge, before the exact fit)
# ---------------------------------------------------------------------------
def _readout_quadrature(Y: np.ndarray, base: Kernel, factors) -> tuple[np.ndarray, np.ndarray]:
    """The read-out criterion's span (:func:`readout_span`) and its :data:`_ISE_GRID` quadrature points for ∫p̂²,
    at the widest read-out bandwidth the factors reach (d_y = 1)."""
    widest = Kernel(base.name, tuple(base.bandwidth_array * np.max(factors)), base.rule)
    span = readout_span(Y, widest)
    return span, outcome_grid(span, widest, size=_ISE_GRID)


def readout_span(Y: np.ndarray, widest: Kernel) -> np.ndarray:
    """The two ends of the outcomes the read-out criterion's ∫p̂² and binning cover (d_y = 1).

    The outcomes' range, cut to :data:`ccme.grids.MARGIN` kernel scales of
    ``widest`` beyond Tukey's far-out fences (:func:`ccme.fences.bulk_range`),
    so that a few far-out outcomes do not stretch the criterion's 256
    quadrature points and its bins until the bulk is drawn by a handful: with
    1% of the paper simulation's outcomes given Cauchy noise (one at 4000),
    the points fell 16 apart and σ_y went from 1.42 / 0.71 to 5.08 / 0.17
    (``benchmarks/accuracy/far_out.py``).  The criterion then estimates the
    integrated squared error over the bulk and this margin, where the far-out
    atoms, MARGIN scales beyond it, put no mass; outcomes within the fences
    (or with more than 1% beyond them: a tail, not a few far-out values)
    leave the span at min(Y)..max(Y), and the criterion as it was.
    """
    y = Y[:, 0]
    (low,), (high,) = bulk_range(y)
    reach = MARGIN * kernel_scale(widest)
    return np.array([max(y.min(), low - reach), min(y.max(), high + reach)])


class _Bins:
    """Linear binning of one-dimensional atoms on a regular grid of centres g_b.

    A kernel sum Σ_k c_k k(y_k, y) becomes Σ_b m_b k(g_b, y), each atom's
    weight split between its two neighbouring centres in proportion to
    closeness; the error is about (δ/σ)²/8 of the kernel for spacing δ and
    bandwidth σ, 0.2 % at :data:`_BINS_PER_SCALE` centres per bandwidth.
    """

    def __init__(self, y: np.ndarray, scale: float):
        # Values beyond min(y)..max(y) put no weight on the centres (matrix): the read-out criterion passes its
        # span's two ends (readout_span), beyond which an atom's kernel leaves no mass on its quadrature grid.
        lo, hi = float(np.min(y)), float(np.max(y))
        hi = hi if hi > lo else lo + scale
        count = int(min(_MAX_BINS, max(2, np.ceil((hi - lo) / scale * _BINS_PER_SCALE) + 1)))
        self.lo, self.hi, self.count = lo, hi, count
        self.step = (hi - lo) / (count - 1)
        self.centers = np.ascontiguousarray((lo + self.step * np.arange(count))[:, None])

    def covers(self, y: np.ndarray) -> np.ndarray:
        """Whether each value lies within the centres' range (a value beyond it is not binned)."""
        y = np.asarray(y, dtype=np.float64)
        return (y >= self.lo) & (y <= self.hi)

    def locate(self, y: np.ndarray):
        """Each value's left centre index and its weight w on the right centre (1 − w on the left)."""
        t = (np.asarray(y, dtype=np.float64) - self.lo) / self.step
        i = np.clip(np.floor(t), 0, self.count - 2).astype(np.intp)
        return i, np.clip(t - i, 0.0, 1.0)

    def matrix(self, y: np.ndarray):
        """The sparse (count × len(y)) binning matrix: column j holds value j's weights on its two centres."""
        import scipy.sparse

        i, w = self.locate(y)
        cols = np.arange(len(i))
        inside = self.covers(y)
        w, w_left = w * inside, (1.0 - w) * inside
        return scipy.sparse.csr_matrix((np.concatenate([w_left, w]), (np.concatenate([i, i + 1]),
                                                                        np.concatenate([cols, cols]))),
                                       shape=(self.count, len(i)))


def _proxy_fold(*, mode, design, Xo, fold, k: int, scores, kernels, lam0, lam1, held: dict, bins: _Bins,
                seed: int, lam1_plugin: dict | None = None, lam1_factors=(1.0,), augment: bool = False) -> dict:
    """Binned embedding weights at V of each arm's ``held`` units of one fold, and each unit's own-atom weight.

    The fold-arm's estimator (eq. emp_density) with both kernel ridge
    regressions replaced by their Nyström versions (:func:`_nystrom_map`, on
    centres P with k(P, P) = LLᵀ and features φ(x) = L⁻¹k(P, x)): the second
    stage K_V ≈ ΦΦᵀ over its n units (penalty s₁ = nλ₁), the first stage
    K_X0 ≈ Ψ₀Ψ₀ᵀ and K_X0X1 ≈ Ψ₀Ψ₁ᵀ over the arm's m nuisance units (s₀ = mλ₀).
    The weights on the atoms, c₁ = a ∘ β and c₀ = Ψ₀ N⁻¹ Ψ₁ᵀ (b ∘ β) with
    β = Φ M⁻¹ φ(v), M = ΦᵀΦ + s₁I and N = Ψ₀ᵀΨ₀ + s₀I, are binned
    (:class:`_Bins`) through products with r columns, accumulated a block of
    rows at a time from the kernel blocks k(P, x) (ΦᵀΦ = L⁻¹ (Σ k kᵀ) L⁻ᵀ, so
    the rows' features are never formed): O((n + m) r²) time and memory
    O(bins · r + r²) beyond the data.  The arms share the second stage's
    centres and kernel blocks (one-step: each arm its own units).  A held unit's
    own outcome is an atom of μ̂₀ (the held units are the first stage's); its
    weight c₀ is returned apart.

    With ``lam1_plugin`` (the doubly robust mode), the split second stage
    (:class:`ccme.estimators.base.SplitSecondStage`): the correction
    (ω, −ω) at λ₁ and the plug-in part (0, 1) at λ₁ᵖ; with ``lam1_factors``,
    the correction's penalty at each λ₁ × factor (the centres then cover the
    smallest penalty used).

    With ``augment`` (:data:`DR_CORRECTION_CRITERION` "aise"), each arm also
    gets an outcome regression independent of the held units for the
    augmentation of :func:`_readout_proxy`: the arm's first stage refitted
    (Nyström, same kernel and λ₀) on the fold's *target* units of the arm,
    whose weights d(X_j) at the held units are binned, and, for each factor,
    Σ_i d_i(X_j) c_i(V_j) over those units, c_i(V_j) = ω_i βᵢ(V_j) being
    atom i's weight in the estimate at V_j (the target units' outcomes are
    atoms of both): the self-evaluation the augmentation leaves out.

    Returns
    -------
    dict
        arm → [(mass (bins, n_held), own (n_held,)) for each factor of ``lam1_factors``]; with ``augment``,
        arm → (that list, binned d (bins, n_held), [Σ_i d_i c_i (n_held,) for each factor]).
    """
    import scipy.linalg

    def tri(L, B, trans=0):
        return scipy.linalg.solve_triangular(L, B, lower=True, trans=trans, check_finite=False)

    def two_sided(L, S, right=None):
        """L⁻¹ S R⁻ᵀ (R = ``right``, default L)."""
        return tri(right if right is not None else L, tri(L, S).T).T

    A, Y, V = design.A, design.Y, design.V
    pseudo = {arm: pseudo_outcome(mode, arm, A=A, target=fold.target, scores_target=scores[fold.target])
              for arm in held}
    groups = [(arm,) for arm in held] if mode == "onestep" else [tuple(held)]
    out = {}
    for arms in groups:
        rows = pseudo[arms[0]].rows
        V1 = np.ascontiguousarray(V[rows])
        lams = {arm: len(rows) * lam1[arm] for arm in arms}
        split = {arm: len(rows) * lam1_plugin[arm] for arm in arms} if lam1_plugin else {}
        smallest = min([lams[arm] * min(lam1_factors) for arm in arms] + list(split.values()))
        phi = _nystrom_map(V1, kernels["v"], smallest, _units_rng(seed, 6, k, arms[0] if mode == "onestep" else 2), 1)
        first = {arm: pseudo[arm].has_first_stage for arm in arms}
        psi, X0, rows0 = {}, {}, {}
        for arm in arms:
            if first[arm]:
                rows0[arm] = fold.nuisance[A[fold.nuisance] == arm]
                X0[arm] = np.ascontiguousarray(Xo[rows0[arm]])
                psi[arm] = _nystrom_map(X0[arm], kernels["x"], len(rows0[arm]) * lam0[arm],
                                        _units_rng(seed, 7, k, arm), 1)
        S = np.zeros((phi.rank, phi.rank))                       # Σ k_P(x) k_P(x)ᵀ over the rows
        B1 = {arm: np.zeros((bins.count, phi.rank)) for arm in arms}
        C = {arm: np.zeros((psi[arm].rank, phi.rank)) for arm in psi}
        Cp = {arm: np.zeros((psi[arm].rank, phi.rank)) for arm in psi if arm in split}  # the plug-in part's (b = 1)
        for s in range(0, len(rows), _BLOCK_ROWS):
            block = slice(s, s + _BLOCK_ROWS)
            Kv = _backend.gram(V1[block], phi.centers, phi.name, phi.bandwidth, n_threads=1)   # (b, r)
            S += Kv.T @ Kv
            binned = bins.matrix(Y[rows[block], 0])
            for arm in arms:
                B1[arm] += binned @ (pseudo[arm].a[block, None] * Kv)
                if arm in psi:
                    Kx = _backend.gram(psi[arm].centers, np.ascontiguousarray(Xo[rows[block]]), psi[arm].name,
                                       psi[arm].bandwidth, n_threads=1)
                    C[arm] += Kx @ (pseudo[arm].b[block, None] * Kv)
                    if arm in Cp:
                        Cp[arm] += Kx @ Kv
        gram = two_sided(phi.L, S)                                # ΦᵀΦ
        for arm in arms:
            chosen = held[arm]
            at = tri(phi.L, _backend.gram(phi.centers, np.ascontiguousarray(V[chosen]), phi.name, phi.bandwidth,
                                          n_threads=1))          # φ(V_held)ᵀ

            def solved(shift):
                M = gram.copy()
                M[np.diag_indices_from(M)] += shift
                return scipy.linalg.solve(M, at, assume_a="pos", check_finite=False)

            correction = tri(phi.L, B1[arm].T).T                  # the own-outcome atoms' part, binned
            first_stage = None
            if arm in psi:
                p = psi[arm]
                Sx = np.zeros((p.rank, p.rank))
                B0 = np.zeros((bins.count, p.rank))
                for s in range(0, len(rows0[arm]), _BLOCK_ROWS):
                    block = slice(s, s + _BLOCK_ROWS)
                    Kx = _backend.gram(X0[arm][block], p.centers, p.name, p.bandwidth, n_threads=1)
                    Sx += Kx.T @ Kx
                    B0 += bins.matrix(Y[rows0[arm][block], 0]) @ Kx
                N = two_sided(p.L, Sx)
                N[np.diag_indices_from(N)] += len(rows0[arm]) * lam0[arm]
                held_x = tri(p.L, _backend.gram(p.centers, np.ascontiguousarray(Xo[chosen]), p.name, p.bandwidth,
                                                n_threads=1))     # ψ(X_held)ᵀ
                # The pull-back of the second stage's b-weights: b = −ω on the correction, 1 on the plug-in part
                # (whose share at λ₁ᵖ is the same for every correction penalty) when split, 1 − ω otherwise.
                pull = two_sided(p.L, C[arm] - Cp[arm] if arm in Cp else C[arm], phi.L)
                plugin_part = two_sided(p.L, Cp[arm], phi.L) @ solved(split[arm]) if arm in Cp else 0.0
                first_stage = (N, tri(p.L, B0.T).T, held_x, pull, plugin_part)
            outcome_model = _target_outcome_model(design, Xo, fold, k, arm, pseudo[arm], phi, kernels["x"],
                                                  lam0[arm], bins, chosen, seed) if augment else None
            pairs, selves = [], []
            for factor in lam1_factors:
                U = solved(lams[arm] * factor)
                mass = correction @ U
                own = np.zeros(len(chosen))
                if first_stage is not None:
                    N, binned0, held_x, pull, plugin_part = first_stage
                    T = scipy.linalg.solve(N, pull @ U + plugin_part, assume_a="pos", check_finite=False)
                    mass += binned0 @ T
                    own = np.einsum("rj,rj->j", held_x, T)
                pairs.append((mass, own))
                if outcome_model is not None:
                    selves.append(np.einsum("rj,rj->j", outcome_model[1], outcome_model[2] @ U))
            out[arm] = (pairs, outcome_model[0], selves) if augment else pairs
    return out


def _target_outcome_model(design, Xo, fold, k: int, arm: int, pseudo, phi: _Nystrom, x_kernel: Kernel, lam0: float,
                          bins: _Bins, chosen: np.ndarray, seed: int):
    """The augmentation's outcome regression of :func:`_proxy_fold`, fitted on the fold's target units of ``arm``.

    A Nyström kernel ridge regression of φ(Y) on X (the first stage's kernel
    and λ₀) over those units, with features Ψ.  Returns (binned weights d at
    the held units (bins, n_held), W = (ΨᵀΨ + mλ₀I)⁻¹ψ(X_held) (r₀, n_held),
    G = Σ_i ω_i ψ(X_i) φ(V_i)ᵀ (r₀, r)): the weight that atom i carries in
    both the regression and the second stage's estimate at held unit j,
    summed over i, is then W_jᵀ G U_j for the second stage's solve U.
    """
    import scipy.linalg

    A, Y, V = design.A, design.Y, design.V
    in_arm = A[pseudo.rows] == arm
    rows, omega = pseudo.rows[in_arm], pseudo.a[in_arm]
    X1 = np.ascontiguousarray(Xo[rows])
    psi = _nystrom_map(X1, x_kernel, len(rows) * lam0, _units_rng(seed, 8, k, arm), 1)
    gram = np.zeros((psi.rank, psi.rank))
    binned = np.zeros((bins.count, psi.rank))
    G = np.zeros((psi.rank, phi.rank))
    for s in range(0, len(rows), _BLOCK_ROWS):
        block = slice(s, s + _BLOCK_ROWS)
        Psi = psi.features(X1[block], 1)
        gram += Psi.T @ Psi
        binned += bins.matrix(Y[rows[block], 0]) @ Psi
        G += Psi.T @ (omega[block, None] * phi.features(np.ascontiguousarray(V[rows[block]]), 1))
    gram[np.diag_indices_from(gram)] += len(rows) * lam0
    W = scipy.linalg.solve(gram, psi.features(np.ascontiguousarray(Xo[chosen]), 1).T, assume_a="pos",
                           check_finite=False)
    return binned @ W, W, G


#: Which estimate the read-out bandwidth's ISE-CV scores: "fold", each fold's own estimate (its square and its
#: held units' terms), or "average", the cross-fitted estimate, the K folds' mean: its square ∫p̄(y | V_j)² at each
#: held unit, with the cross term ∫p̄ p = (1/K) Σ_k ∫p̂_k p still estimated on each fold's own held units.  A fold's
#: estimate has about K times the variance of the mean, so "fold" asks for a wider read-out than the mean needs.
#: "average" was worse on the zoo's "choose" cases (``--setting ccme.tuning.READOUT_FOR=fold,average``, seeds 1-3,
#: ``benchmarks/results/readout_for_choose.txt``): 1.055, 2 case-arms better and 10 worse (mixed_v 1.17 / 1.18), so
#: it was not run on "report" and the folds' own criterion stays.  Not with the augmented criterion.
READOUT_FOR = "fold"


def _readout_average(augmented: bool) -> bool:
    """Whether the read-out proxy scores the folds' mean (:data:`READOUT_FOR`); not with the augmented criterion."""
    if READOUT_FOR not in ("fold", "average"):
        raise ParameterError(f"ccme.tuning.READOUT_FOR must be 'fold' or 'average'; got {READOUT_FOR!r}")
    return READOUT_FOR == "average" and not augmented


def _readout_proxy(*, mode, design, Xo, folds, scores, kernels, lam0, lam1, factors, seed: int, n_threads: int,
                   weighted: bool, lam1_plugin: dict | None = None, lam1_factors=None, augmented: bool = False,
                   fold_outcomes=None):
    """Each arm's read-out bandwidth σ_y by the weighted ISE-CV of :func:`tune_outcome_bandwidth`, on a proxy.

    The criterion is the same sum over at most :data:`_ISE_UNITS` held-out units per fold and
    arm (the arm's units of the fold's nuisance part, drawn with ``seed``), with
    the fitted embedding replaced by its Nyström proxy (:func:`_proxy_fold`:
    the same data, kernels and penalties, rank at most :data:`NYSTROM_RANK`)
    and the atoms binned on a regular grid (:class:`_Bins`).  It runs before
    the exact fit, so that choosing σ_y neither waits for the fit's n × n
    factors nor builds an arm the user may never read.  Returns
    ({arm: Kernel}, [TuningCurve per arm]) as :func:`tune_outcome_bandwidth`.

    With ``lam1_factors`` (the doubly robust mode, :data:`DR_CORRECTION_CRITERION`
    "ise"), the proxy is the split second stage at ``lam1_plugin``, and the
    correction's penalty is chosen with σ_y: the factor of λ₁ whose best σ_y
    gives the lowest criterion summed over the arms.  Returns
    ({arm: Kernel}, curves, {arm: λ₁}), the last ``lam1`` itself without a search.

    With ``augmented`` (:data:`DR_CORRECTION_CRITERION` "aise"), the
    criterion is the augmented (doubly robust) estimate of the integrated
    squared error's data-dependent part, E ∫p̂(y | V)² dy − 2 E p̂(Y^a | V):
    the first term averaged over held units of every arm, unweighted (it is a
    function of V alone), and the second, per held unit j,
    m_j + 1{A_j = a}/π̂_a(X_j) (p̂(Y_j | V_j) − m_j), where
    m_j = Σ_i d_i(X_j) p̂(Y_i | V_j) is the estimate read at the atoms of an
    outcome regression fitted on the fold's target units (independent of j),
    less the atoms' own shares and unit j's own atom (:func:`_proxy_fold`).
    The inverse-propensity weights then touch only a residual.

    With ``fold_outcomes`` (:attr:`ccme.estimators.base.CrossFitData.fold_outcomes`),
    fold k's proxy and its held units' outcomes are those of
    ``fold_outcomes[k]`` in place of ``design.Y``.
    """
    A = design.A
    Ys = tuple(fold_outcomes) if fold_outcomes is not None else (design.Y,) * len(folds)
    Y = design.Y if fold_outcomes is None else np.vstack(Ys)   # the grid and the bins cover every fold's outcomes
    search = lam1_factors is not None
    lam1_factors = tuple(lam1_factors) if search else (1.0,)
    scores = arm_probabilities(scores)
    base = kernels["y"]
    factors = np.asarray(factors, dtype=np.float64)
    rng = _units_rng(seed, 5)
    span, grid = _readout_quadrature(Y, base, factors)
    bins = _Bins(span, float(base.bandwidth_array[0] * factors.min()))
    held = {}  # (fold, arm) → (units the chosen ones stand for, the chosen units)
    if augmented:  # units of every arm, shared by the arms
        for k, fold in enumerate(folds):
            size = min(len(design.arms) * _ISE_UNITS, fold.nuisance.size)
            units = (fold.nuisance.size, np.sort(rng.choice(fold.nuisance, size=size, replace=False)))
            held.update({(k, arm): units for arm in design.arms if np.any(A[fold.nuisance] == arm)})
    else:
        for arm in design.arms:
            for k, fold in enumerate(folds):
                rows0 = fold.nuisance[A[fold.nuisance] == arm]
                if rows0.size:
                    held[(k, arm)] = (rows0.size, np.sort(rng.choice(rows0, size=min(_ISE_UNITS, rows0.size),
                                                                     replace=False)))

    average = _readout_average(augmented)

    def proxy(task):
        """Fold l's proxy on fold k's outcomes, read at the held units of the folds in ``at`` (each arm's in order)."""
        l, k, at = task
        fold_design = design if fold_outcomes is None else replace(design, Y=Ys[k])
        return _proxy_fold(mode=mode, design=fold_design, Xo=Xo, fold=folds[l], k=l, scores=scores, kernels=kernels,
                           lam0=lam0, lam1=lam1,
                           held={arm: np.concatenate([held[(j, arm)][1] for j in at if (j, arm) in held])
                                 for arm in design.arms if any((j, arm) in held for j in at)},
                           bins=bins, seed=seed, lam1_plugin=lam1_plugin if search else None,
                           lam1_factors=lam1_factors, augment=augmented)

    K = len(folds)
    if not average:         # fold k's proxy at its own held units
        tasks = [(k, k, (k,)) for k in range(K)]
    elif fold_outcomes is None:   # every fold's proxy at every fold's held units (one outcome scale)
        tasks = [(l, l, tuple(range(K))) for l in range(K)]
    else:                   # fold l's proxy on fold k's outcomes at fold k's held units
        tasks = [(l, k, (k,)) for k in range(K) for l in range(K)]
    with threadpool_limits(limits=1, user_api="blas"):
        results = _parallel(proxy, tasks, n_threads)
        fitted = {}   # (k, arm) → fold k's proxy at its held units: [(mass, own) per λ₁ factor] (or augmented)
        folds_at = {}  # (k, arm) → {l: fold l's masses at fold k's held units, per λ₁ factor} ("average")
        for (l, k, at), per_arm in zip(tasks, results):
            for arm, pairs in per_arm.items():
                start = 0
                for j in (j for j in at if (j, arm) in held):
                    count = held[(j, arm)][1].size
                    part = pairs if augmented else [(mass[:, start:start + count], own[start:start + count])
                                                    for mass, own in pairs]
                    start += count
                    if j == l:
                        fitted[(j, arm)] = part
                    if average:
                        folds_at.setdefault((j, arm), {})[l] = [mass for mass, _ in part]
        on_grid_kernels = [_backend.gram(bins.centers, grid[:, None], base.name, base.bandwidth_array * f,
                                         normalized=True, n_threads=n_threads) for f in factors]
        terms = {}  # arm → (λ₁ factors, held units, σ_y factors): each held unit's scaled term of the criterion
        units = {}  # arm → the held units' rows, in the order of their terms
        for arm in design.arms:
            per_fold, units[arm] = [], []
            for k, fold in enumerate(folds):
                if (k, arm) not in held:
                    continue
                size, chosen = held[(k, arm)]
                units[arm].append(chosen)
                pairs, binned_d, selves = fitted[(k, arm)] if augmented else (fitted[(k, arm)], None, None)
                in_arm = A[chosen] == arm
                omega = np.divide(1.0, scores[chosen, arm], out=np.zeros(len(chosen)), where=in_arm) \
                    if weighted else np.ones(len(chosen))
                scale = size / chosen.size / len(fold.nuisance) / len(folds)
                left, w = bins.locate(Ys[k][chosen, 0])
                cols = np.arange(len(chosen))
                term = np.zeros((len(lam1_factors), len(chosen), len(factors)))
                per_fold.append(term)

                def at_own_outcome(M):
                    """Each held unit's column of M (bins, n_held) read at its own outcome, as it is binned."""
                    return (1.0 - w) * M[left, cols] + w * M[left + 1, cols]

                for i, f in enumerate(factors):
                    k_y = _backend.gram(bins.centers, Ys[k][chosen], base.name, base.bandwidth_array * f,
                                        normalized=True, n_threads=n_threads)
                    # The unit's own outcome (an atom of μ̂₀) left out of its evaluation, as its binned share
                    # (none where the atom lies beyond the bins' span and so was never binned).
                    own_share = at_own_outcome(k_y) * bins.covers(Ys[k][chosen, 0])
                    if augmented:
                        at_atoms, at_zero = _binned_convolution(bins, binned_d, base, f)
                        at_own = at_own_outcome(at_atoms)
                    for j, (mass, own) in enumerate(pairs):
                        # "average": the square of the cross-fitted estimate, the folds' mean, at the held units
                        mean_mass = (sum(folds_at[(k, arm)][l][j] for l in range(K)) / K) if average else mass
                        on_grid = mean_mass.T @ on_grid_kernels[i]
                        square = np.trapezoid(on_grid**2, grid, axis=1)
                        own = np.where(in_arm, own, 0.0)      # only the arm's units are atoms of its μ̂₀
                        at_y = np.einsum("bj,bj->j", mass, k_y) - own * own_share
                        if augmented:
                            # m_j = Σ_i d_i(X_j) p̂(Y_i | V_j), without the atoms' own shares nor unit j's atom.
                            m = np.einsum("bj,bj->j", mass, at_atoms) - at_zero * selves[j] - own * at_own
                            term[j, :, i] = scale * (square - 2.0 * (m + omega * (at_y - m)))
                        else:
                            term[j, :, i] = scale * omega * (square - 2.0 * at_y)
            terms[arm] = np.concatenate(per_fold, axis=1) if per_fold else np.zeros((len(lam1_factors), 0, len(factors)))
        totals = {arm: t.sum(axis=1) for arm, t in terms.items()}
        # One correction penalty for the arms (as λ₁ is shared): the factor whose arms' best σ_y sum lowest.
        # (DR_CORRECTION_BY_ARM: each arm's own best factor.)
        shared = _best(sum(totals[arm].min(axis=1) for arm in design.arms)) if search else 0
        factor_of = {arm: _best(totals[arm].min(axis=1)) if search and DR_CORRECTION_BY_ARM else shared
                     for arm in design.arms}
        out, curves = {}, []
        for arm in design.arms:
            rows = np.concatenate(units[arm]) if units[arm] else np.zeros(0, dtype=np.int64)
            out[arm], curve = _chosen_y_bandwidth(base, factors, terms[arm][factor_of[arm]], arm, rows)
            curves.append(curve)
    if not search:
        return out, curves, lam1
    picked = {arm: lam1[arm] * lam1_factors[factor_of[arm]] for arm in design.arms}
    name = "augmented" if augmented else "weighted"
    curves += [TuningCurve("lam1", np.array([lam1[arm] * f for f in lam1_factors]), totals[arm].min(axis=1),
                           f"{name} ISE-CV (split proxy, best y bandwidth)", picked[arm], arm, None)
               for arm in design.arms]
    return out, curves, picked


def _binned_convolution(bins: _Bins, mass: np.ndarray, base: Kernel, factor: float):
    """Σ_b' k(g_b, g_b') mass[b', j] on the regular grid of ``bins`` (an FFT convolution), and k(0).

    The read-out kernel (normalised as a density, bandwidth ``base`` × ``factor``)
    is stationary, so its matrix over the grid is Toeplitz.
    """
    import scipy.signal

    column = _backend.gram(bins.centers, bins.centers[:1], base.name, base.bandwidth_array * factor,
                           normalized=True, n_threads=1)[:, 0]
    symmetric = np.concatenate([column[:0:-1], column])
    full = scipy.signal.fftconvolve(mass, symmetric[:, None], axes=0)
    return full[bins.count - 1:2 * bins.count - 1], float(column[0])


# ---------------------------------------------------------------------------
# outcome bandwidth by weighted least-squares cross-validation
# ---------------------------------------------------------------------------
def _chosen_y_bandwidth(base: Kernel, factors: np.ndarray, terms: np.ndarray, arm: int, units: np.ndarray):
    """The read-out kernel chosen on the weighted ISE-CV, and its curve.

    ``terms`` (held units, factors) are the held-out units' scaled terms; the
    criterion is their sum; ``units`` (held units,) are their rows, kept with
    the chosen column in the curve's ``held``.  The choice is, with :data:`Y_BANDWIDTH_RULE`
    ``"largest_local"`` (default), its largest local minimiser
    (:func:`_largest_local_minimum`); with ``"min"`` its minimiser; with
    ``"one_se"`` / ``"one_se_step"`` the widest bandwidth (one grid step
    wider at most) whose criterion lies within one standard error of the
    minimum (:func:`_one_se_choice`).
    """
    total = terms.sum(axis=0)
    if Y_BANDWIDTH_RULE == "min":
        best = _best(total)
    elif Y_BANDWIDTH_RULE == "largest_local":
        best = _largest_local_minimum(total)
    else:
        best = _one_se_choice(terms, steps=Y_BANDWIDTH_RULE == "one_se_step")
    kernel = Kernel(base.name, tuple(base.bandwidth_array * factors[best]),
                    f"{base.rule} x {factors[best]:.3g}, weighted ISE-CV")
    curve = TuningCurve("y_bandwidth", base.bandwidth_array[0] * factors, total, "weighted ISE-CV",
                        base.bandwidth_array[0] * factors[best], arm, None,
                        held=(np.asarray(units, dtype=np.int64), terms[:, best].copy()))
    return kernel, curve


def _extending_downwards(choose, factors, smallest: float = 0.0):
    """``choose(factors)``, rerun on a grid grown below while an arm's choice is the grid's smallest factor.

    ``choose`` returns a tuple whose second item is the read-out curves
    (:func:`tune_outcome_bandwidth`, :func:`_readout_proxy`).  Only the default
    grid grows (a user's grid is kept as given), by two factors at a time at
    its own step, at most :data:`Y_BANDWIDTH_EXTENSIONS` times; each rerun
    scores the same held-out units.  The whole criterion reruns, proxy fits
    included, because the proxy bins its atoms at the smallest factor's
    width; binning finer always would cost every fit the time that this
    costs only the fits whose choice sits on the edge.  The default grid
    starts at the factor ``smallest`` at the lowest (:func:`readout_floor`)
    and does not grow below it.
    """
    if factors is not Y_BANDWIDTH_FACTORS:
        return choose(factors)
    factors = np.asarray(factors, dtype=np.float64)
    step = factors[1] / factors[0]
    factors = _floored(factors, smallest, step)
    result = choose(factors)
    for _ in range(Y_BANDWIDTH_EXTENSIONS):
        if factors[0] <= smallest * np.sqrt(step) or not any(c.chosen <= c.values[0] for c in result[1]):
            break
        factors = _floored(np.r_[factors[0] / step**2, factors[0] / step, factors], smallest, step)
        result = choose(factors)
    return result


def _floored(factors: np.ndarray, smallest: float, step: float) -> np.ndarray:
    """The factors from ``smallest`` up: those below it dropped, ``smallest`` itself first where the first kept
    factor lies more than half a grid step above it; the grid as it is where it starts at ``smallest`` or above."""
    if smallest <= factors[0]:
        return factors
    kept = factors[factors >= smallest]
    if kept.size and kept[0] <= smallest * np.sqrt(step):
        return kept
    return np.r_[smallest, kept]


#: A read-out bandwidth below this many times the spacing of the embedding's atoms (:func:`readout_floor`) is not
#: tried.  A law read out through Gaussians of width σ centred on atoms Δ apart ripples with a relative amplitude of
#: about 2 exp(−2π²σ²/Δ²) (the Poisson summation formula): 1.4% at σ = Δ/2, 8.5% at 0.4 Δ and 30% at Δ/3.  Where
#: the atoms are the outcomes (the ridge, Deep Feature) they lie far closer than any bandwidth on the grid; the
#: Neural-Kernel estimator's M grid points (M = 20) do not, and its weighted ISE-CV, noisy where weights 1/π̂ are
#: large, picked bandwidths of 0.3 Δ whose ripples cost five times the error (README, "The read-out's floor").
READOUT_ATOM_FLOOR = 0.5
#: The spacing :func:`readout_floor` takes: this quantile, over the units, of the width of the cell between atoms
#: that holds a unit's outcome.  On a regular grid every cell has the grid's step; where atoms crowd into a spike of
#: outcomes (the Neural-Kernel estimator's "blend" grid) that holds at least this share of the outcomes, the floor
#: is the spike's spacing, which a spike needs (the median, 0.5, cost the zoo's two spiky cases 1.3-2.5 times the
#: error: ``benchmarks/results/readout_floor_nk_*``).
READOUT_ATOM_QUANTILE = 0.1


def readout_floor(embeddings: dict, Y: np.ndarray) -> float:
    """The smallest read-out bandwidth worth trying: :data:`READOUT_ATOM_FLOOR` times the atoms' spacing.

    The spacing is the width of the cell between consecutive atoms (of every
    arm's fold-arms; their ``resolution_points``, which for a Neural-Kernel
    grid spread over outcomes are the grid's points: below half its step the
    read-out would draw the outcomes' sample noise within a cell) that holds a unit's outcome, its
    :data:`READOUT_ATOM_QUANTILE` quantile over the units whose outcome lies
    between the atoms: the spacing where the atoms lie densest among the
    outcomes (a regular grid's step; a spike's, where a "blend" grid crowds
    into one).

    Parameters
    ----------
    embeddings : dict
        Arm code → :class:`ccme.embedding.Embedding` (one-dimensional outcome).
    Y : ndarray (n, 1)
        The outcomes (a located fit's residuals) the embeddings were fitted to.

    Returns
    -------
    float
        The floor (0 with fewer than two distinct atoms, or no outcome strictly between them).
    """
    atoms = np.unique(np.concatenate([part.resolution_points[:, 0] for emb in embeddings.values()
                                      for part in emb.parts]))
    y = Y[:, 0]
    inside = y[(y > atoms[0]) & (y < atoms[-1])] if atoms.size > 1 else y[:0]
    if not inside.size:
        return 0.0
    cell = np.searchsorted(atoms, inside)
    return READOUT_ATOM_FLOOR * float(np.quantile(atoms[cell] - atoms[cell - 1], READOUT_ATOM_QUANTILE))


def _largest_local_minimum(total: np.ndarray) -> int:
    """The largest factor at which the criterion is a local minimum over the grid (factors in increasing order).

    Least-squares cross-validation of a density's bandwidth often has several
    local minima, and its global one sits at too small a bandwidth more often
    than the others (its variance grows as the bandwidth shrinks); Hall &
    Marron (1991, *J. R. Statist. Soc. B* 53, "Local minima in
    cross-validation functions") recommend the largest local minimiser.  An
    end of the grid counts when it is below its one neighbour.  The global
    minimiser where the curve has no finite local minimum.
    """
    finite = np.isfinite(total)
    lower = np.r_[True, total[1:] < total[:-1]]   # below its left neighbour (or the first)
    upper = np.r_[total[:-1] < total[1:], True]   # below its right neighbour (or the last)
    local = np.flatnonzero(finite & lower & upper)
    return int(local[-1]) if local.size else _best(total)


def _one_se_choice(terms: np.ndarray, steps: bool = False) -> int:
    """The largest factor whose criterion exceeds the minimum by at most one standard error of the difference.

    The one-standard-error rule (Breiman et al. 1984, §3.4.3; Hastie, Tibshirani
    & Friedman 2009, §7.10): least-squares cross-validation of a density's
    bandwidth is flat and noisy near its minimum and errs towards
    undersmoothing (Hall & Marron 1987), so among the bandwidths it cannot
    tell apart from the minimiser the smoothest is taken.  The standard error
    of criterion(f) − criterion(f*) is that of a sum of the held units'
    paired differences d_u: √(m / (m − 1) Σ_u (d_u − d̄)²), m units.
    ``terms`` has shape (held units, factors), factors in increasing order.
    """
    total = terms.sum(axis=0)
    best = _best(total)
    m = terms.shape[0]
    if m < 2:
        return best
    se = np.sqrt(m) * np.std(terms - terms[:, [best]], axis=0, ddof=1)
    within = np.isfinite(total) & (total - total[best] <= se)
    last = min(best + 1, terms.shape[1] - 1) if steps else terms.shape[1] - 1
    wider = np.flatnonzero(within[best + 1:last + 1])
    return best + 1 + int(wider[-1]) if wider.size else best


def tune_outcome_bandwidth(*, embeddings, design, folds, scores, base: Kernel, factors, seed, n_threads=0,
                           weighted=True, sampling_weights=None):
    """Choose each arm's read-out bandwidth σ_y (a factor of ``base``) by weighted least-squares CV.

    ``weighted=False`` (the one-step mode, which targets the arm's observed
    conditional law and uses no propensity) sets every weight ω_j to 1.
    ``sampling_weights`` (all units', or None) multiply each held-out unit's
    term: Σ_j w_j ω_j [∫ p̂(y | V_j)² dy − 2 p̂(Y_j | V_j)] estimates the
    weighted population's integrated squared error.

    ∫ p̂² is a quadrature on a grid for a one-dimensional outcome and the
    closed form :func:`integrated_square` for a multivariate one (Gaussian
    read-out; one factor scales every dimension's bandwidth), which then
    scores at most :func:`_square_units` of each fold-arm's drawn units.

    Returns ({arm: Kernel}, [TuningCurve per arm]).
    """
    Y = design.Y
    scores = arm_probabilities(scores)
    factors = np.asarray(factors, dtype=np.float64)
    rng = np.random.default_rng(seed)
    if Y.shape[1] == 1:
        grid = _readout_quadrature(Y, base, factors)[1][:, None]
    kernels, curves = {}, []
    for arm in design.arms:
        per_fold, units = [], []
        for fold, part in zip(folds, embeddings[arm].parts):
            held = fold.nuisance[design.A[fold.nuisance] == arm]
            if held.size == 0:
                continue
            chosen = np.sort(rng.choice(held, size=min(_ISE_UNITS, held.size), replace=False))
            if Y.shape[1] > 1:      # ∫p̂² costs K² per unit (integrated_square): fewer units where K is large
                keep = _square_units(part.n_atoms, len(chosen))
                if keep < len(chosen):
                    chosen = chosen[np.sort(rng.choice(len(chosen), size=keep, replace=False))]
            atoms, c = part.weights(design.V[chosen], n_threads=n_threads)
            units.append(chosen)
            omega = 1.0 / scores[chosen, arm] if weighted else np.ones(len(chosen))
            if sampling_weights is not None:
                omega = sampling_weights[chosen] * omega
            # Each chosen unit stands for held.size / chosen.size arm units of the held-out part.
            scale = held.size / chosen.size / len(fold.nuisance) / len(folds)
            # A held-out unit can be an atom of the fold's first stage (its own
            # outcome, weighted through μ̂₀): leave that atom out of its own
            # evaluation, or the criterion rewards interpolating it.
            own = _own_atoms(part, chosen)
            term = np.zeros((len(chosen), len(factors)))
            per_fold.append(term)
            for i, f in enumerate(factors):
                bw = base.bandwidth_array * f
                if Y.shape[1] == 1:
                    on_grid = c.T @ _backend.atom_features(atoms, grid, "density", base.name, bw,
                                                           n_threads=n_threads)
                    square = np.trapezoid(on_grid**2, grid[:, 0], axis=1)
                else:
                    square = integrated_square(atoms, c, bw, n_threads=n_threads)
                k_y = _backend.gram(atoms, Y[chosen], base.name, bw, normalized=True, n_threads=n_threads)
                if own is not None:
                    cols = np.flatnonzero(own >= 0)
                    k_y[own[cols], cols] = 0.0
                at_y = np.einsum("kj,kj->j", c, k_y)
                term[:, i] = scale * omega * (square - 2.0 * at_y)
        terms = np.concatenate(per_fold, axis=0) if per_fold else np.zeros((0, len(factors)))
        units = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
        kernels[arm], curve = _chosen_y_bandwidth(base, factors, terms, arm, units)
        curves.append(curve)
    return kernels, curves


#: Rows of the self-convolution matrix :func:`integrated_square` builds at a time (a block of 2048 rows of 5000
#: atoms is 80 MB), so that an outcome of d_y > 1 with many atoms does not hold the whole K × K matrix.
_SQUARE_BLOCK = 2048


#: The read-out criterion of a multivariate outcome scores at most as many held-out units per fold and arm as keep
#: K² × units (the multiply-adds of :func:`integrated_square` per bandwidth, K the fold-arm's atoms) within this
#: budget, and at least :data:`_SQUARE_MIN_UNITS` (or all held ones).  Measured: at n = 8000 (the zoo's bivariate
#: case, ridge, K ≈ 6000, one thread) all 1000 units took 57 of the fit's 64 s, 150 units 13 of 20 s.
_SQUARE_WORK = 1e9
_SQUARE_MIN_UNITS = 150

#: Above this many atoms in a fold-arm a multivariate outcome keeps the rule's read-out bandwidth (with a note):
#: each bandwidth's Gram matrix of the atoms costs K² kernel evaluations whatever the units.  The ridge's fold-arms
#: hold about 0.75 n atoms (two folds), so this tunes up to n ≈ 3300: at n = 8000 (K ≈ 6000) the tuned fit took 20 s
#: against about 7 s with the rule, at n = 20000 (K ≈ 15000, two threads) 81 s against 10 s.
_SQUARE_MAX_ATOMS = 2500


def _square_units(n_atoms: int, n_units: int) -> int:
    """How many held-out units a multivariate outcome's read-out criterion scores (:data:`_SQUARE_WORK`)."""
    return int(min(n_units, max(_SQUARE_MIN_UNITS, _SQUARE_WORK // max(n_atoms, 1) ** 2)))


def integrated_square(atoms: np.ndarray, c: np.ndarray, bandwidth, n_threads: int = 0) -> np.ndarray:
    """∫ p̂_j(y)² dy for the Gaussian read-outs p̂_j(y) = Σ_k c_kj N(y; a_k, diag σ²) of one set of atoms.

    Closed form: ∫ N(y; a, diag σ²) N(y; b, diag σ²) dy = N(a − b; 0, diag 2σ²), a Gaussian density kernel at
    √2 σ, so ∫ p̂_j² = c_jᵀ G c_j with G that kernel's Gram matrix of the atoms — exact in any dimension, where a
    quadrature would need a grid per dimension (the read-out tuning uses it for d_y > 1).  G is built
    :data:`_SQUARE_BLOCK` rows at a time.

    Parameters
    ----------
    atoms : ndarray (K, d)
    c : ndarray (K, m)
        The read-outs' weights over the atoms, one column per read-out.
    bandwidth : array_like (d,)
        σ, the read-out kernel's bandwidths.
    n_threads : int

    Returns
    -------
    ndarray (m,)
    """
    wide = np.sqrt(2.0) * np.asarray(bandwidth, dtype=np.float64)
    out = np.zeros(c.shape[1])
    for start in range(0, len(atoms), _SQUARE_BLOCK):
        rows = slice(start, start + _SQUARE_BLOCK)
        G = _backend.gram(atoms[rows], atoms, "gaussian", wide, normalized=True, n_threads=n_threads)
        out += np.einsum("kj,kj->j", c[rows], G @ c)
    return out


def tune_readout(embeddings: dict, *, data, folds, grids: dict, seed: int, report: TuningReport) -> dict:
    """Each arm's embedding read out with its tuned outcome bandwidth (:func:`tune_outcome_bandwidth`).

    Adds the curves, choices and time to ``report``; returns new embeddings
    ({arm: Embedding}) sharing the fitted weights (σ_y does not change them).
    """
    if data.design.Y.shape[1] != 1:
        if embeddings[data.design.arms[0]].y_kernel.name != "gaussian":
            # ∫ p̂² has a closed form for d_y > 1 with the Gaussian only (the Laplace density kernel is radial, not a
            # product), and a quadrature over a grid per dimension is what the closed form avoids.
            report.notes.append("the outcome bandwidth of a multivariate outcome is tuned with the Gaussian read-out "
                                "kernel only; the rule was kept")
            return embeddings
        atoms = max(part.n_atoms for emb in embeddings.values() for part in emb.parts)
        if atoms > _SQUARE_MAX_ATOMS:
            report.notes.append(f"the outcome bandwidth of a multivariate outcome is tuned up to "
                                f"{_SQUARE_MAX_ATOMS} atoms per fold and arm (its criterion costs their square); "
                                f"this fit has {atoms}, so the rule was kept")
            return embeddings
    started = time.perf_counter()
    floor = 0.0     # only the default grid of a one-dimensional outcome is floored (readout_floor)
    if report.pending_readout is not None:  # chosen by tune_ridge on the fit's Nyström proxy
        (chosen, curves), report.pending_readout = report.pending_readout, None
    else:
        base = embeddings[data.design.arms[0]].y_kernel
        if grids["y_bandwidth"] is Y_BANDWIDTH_FACTORS and data.design.Y.shape[1] == 1:
            floor = readout_floor(embeddings, data.design.Y)
        chosen, curves = _extending_downwards(
            lambda factors: tune_outcome_bandwidth(
                embeddings=embeddings, design=data.design, folds=folds, scores=data.scores,
                base=base, factors=factors, seed=seed,
                n_threads=data.n_threads, weighted=_readout_weighted(data.mode),
                sampling_weights=getattr(data, "sampling_weights", None)),
            grids["y_bandwidth"], floor / float(base.bandwidth_array[0]))
    report.curves.extend(curves)
    report.chosen["y_bandwidth"] = {arm: float(k.bandwidth_array[0]) for arm, k in chosen.items()}
    note_edges(report, data.design.treatment, floor)
    report.seconds += time.perf_counter() - started
    return {arm: embeddings[arm].with_readout(kernel) for arm, kernel in chosen.items()}


#: Exponent r of the distribution read-out rule h_F = h · n^(−r) (:func:`distribution_kernel`): the density's
#: bandwidth is of order n^(−1/5), a distribution function's MISE-optimal one of order n^(−1/3) (Azzalini 1981),
#: and 1/3 − 1/5 = 2/15.
DISTRIBUTION_RATE = 2 / 15


def distribution_kernel(y_kernel: Kernel, n: int) -> Kernel:
    """The read-out kernel of the CDF and its functionals: the density's kernel, its bandwidths × n^(−2/15).

    Reading a distribution function out through a kernel of bandwidth h
    smooths the law (it is convolved with the kernel), which biases its
    CDF, quantiles and tail means by O(h²), and a density's bandwidth is far
    too wide for them: it is of order n^(−1/5), while a kernel distribution
    function's integrated-MSE-optimal bandwidth is of order n^(−1/3)
    (Azzalini 1981, *Biometrika* 68; R's ``np`` selects the two separately,
    ``npudensbw`` and ``npudistbw``).  The rule keeps the density's constant
    (the tuned read-out bandwidth) and takes the distribution function's
    rate: h_F = h · n^(−2/15) (:data:`DISTRIBUTION_RATE`), about 0.4 h at
    n = 1000 units per arm and 0.3 h at 5000.  Its bias, O(n^(−2/3)), is
    o(n^(−1/2)): the intervals on QTEs and shortfalls then centre on the
    unsmoothed effects (measured by ``benchmarks/inference/distribution_readout.py``).

    Parameters
    ----------
    y_kernel : Kernel
        The density's read-out kernel.
    n : int
        The arm's number of units.

    Returns
    -------
    Kernel
        The same kernel family with every bandwidth scaled.

    Examples
    --------
    >>> from ccme.kernels import Kernel
    >>> from ccme.tuning import distribution_kernel
    >>> distribution_kernel(Kernel("gaussian", (1.0,)), 1000).bandwidth
    (0.398...,)
    """
    n = max(int(n), 1)
    factor = n ** -DISTRIBUTION_RATE
    return Kernel(y_kernel.name, tuple(float(h) * factor for h in y_kernel.bandwidth),
                  rule=f"density's x n^(-2/15) = x {factor:.3g}, n = {n}")


def distribution_readout(embeddings: dict, design) -> dict:
    """Each arm's embedding with its CDF read out by :func:`distribution_kernel` (the arm's units as n)."""
    return {arm: emb.with_readout(emb.y_kernel,
                                  cdf_kernel=distribution_kernel(emb.y_kernel, np.count_nonzero(design.A == arm)))
            for arm, emb in embeddings.items()}


def note_edges(report: TuningReport, treatment=None, floor: float = 0.0) -> None:
    """Say when a choice sits at the edge of its grid (the optimum may lie beyond it).

    ``treatment`` (:class:`ccme.formula.Treatment`) names the arms; None: treated/control.  ``floor``: the
    read-out floor (:func:`readout_floor`) the default σ_y grid was cut at; a read-out choice at it says so
    instead of advising a smaller grid, which would undo the floor.
    """
    # A floored default grid starts at the floor or less than half its step above it (_floored).
    at_floor = floor * np.sqrt(Y_BANDWIDTH_FACTORS[1] / Y_BANDWIDTH_FACTORS[0])
    for c in report.curves:
        values = np.asarray(c.values)
        if c.group is not None:  # a coordinate search's few points around its choice, no grid
            continue
        if len(values) > 2 and c.chosen in (values.min(), values.max()):
            side = "smallest" if c.chosen == values.min() else "largest"
            if c.arm is None:
                arm = ""
            else:
                arm = f" ({('treated' if c.arm == 1 else 'control') if treatment is None else treatment.arm_name(c.arm)})"
            # Bandwidth grids are factors of the rule (tune={"y_bandwidth": [...]} takes factors), penalties values.
            what = "factors of the rule's bandwidth" if c.parameter.endswith("bandwidth") else "values"
            direction = "smaller" if side == "smallest" else "larger"
            note = (f"{c.parameter}{arm} chose the {side} value of its grid ({c.chosen:.3g}); consider extending the "
                    f"grid: tune={{'{c.parameter}': [...]}} with {direction} {what}")
            if c.parameter == "y_bandwidth" and side == "smallest" and c.chosen <= at_floor:
                note = (f"y_bandwidth{arm} chose its smallest value ({c.chosen:.3g}), at the read-out floor {floor:.3g}: "
                        f"half the spacing of the embedding's points where the outcomes lie densest "
                        f"(ccme.tuning.readout_floor); narrower, the read-out would draw those points, not the law")
            if note not in report.notes:
                report.notes.append(note)


def _own_atoms(part, units) -> np.ndarray | None:
    """For each unit, the index of the atom that is its own outcome (-1 if none); None if unknown."""
    atom_units = getattr(part, "atom_units", None)
    if atom_units is None:
        return None
    position = {int(u): k for k, u in enumerate(atom_units)}
    return np.array([position.get(int(u), -1) for u in units], dtype=np.intp)
