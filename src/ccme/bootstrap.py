"""Multiplier bootstrap over a linear second stage: confidence bands and the test of no distributional effect.

This module owns the bootstrap.  It needs only what a fold-arm declares as
:class:`ccme.estimators.base.LinearSecondStage` (its units, β(v), the unit
features of its pseudo-outcomes and their residuals); the ridge fold-arms
implement it.

The scheme
----------
The ridge CCME of one fold and arm is linear in its second-stage
pseudo-outcomes (paper, eq. emp_ccme_form):

    μ̂(v) = Σ_i β_i(v) ξ̂_i,   β(v) = (K_V + nλ₁I)⁻¹ k_V(v),

ξ̂_i = a_i φ(Y_i) + b_i μ̂₀(X_i) (see :mod:`ccme.estimators.ridge`), and the
cross-fitted estimate averages the K folds.  Conditionally on the first
stage (the propensity and μ̂₀ are fitted on other folds, and the doubly
robust pseudo-outcome makes their error second order), μ̂(v) − E μ̂(v) =
Σ_i β_i(v) ε_i is a weighted sum of independent RKHS-valued noise terms
ε_i = ξ̂_i − E[ξ̂_i | V_i].  The multiplier (wild) bootstrap replaces it by

    Δ*(v) = (1/K) Σ_folds Σ_i β_i(v) g_i ε̂_i,   g_i ~ N(0, 1) i.i.d.,

with ε̂_i = ξ̂_i − μ̂(V_i) the in-sample ridge residuals, which for a kernel
with k(v, v) = 1 are (I − H) ξ̂ = s (K_V + sI)⁻¹ ξ̂, s = nλ₁ (+ jitter), so no
extra Gram matrix is needed.  The fitted first stage is reused as is; only
the second stage is resampled.  One unit keeps one multiplier in both arms, so
the dependence between ξ̂¹_i and ξ̂⁰_i is reproduced.

Everything is evaluated through per-unit features of the pseudo-outcomes,
P_i(y) = ⟨ξ̂_i, F(·, y)⟩ = a_i F(Y_i, y) + b_i Σ_l S_li F(Y0_l, y),
S = (K_X0 + mλ₀I)⁻¹ K_X0X1, for the density and CDF features of
:mod:`ccme.embedding`.

What the bootstrap covers.  Around the plain estimate (``target="regularised"``)
it covers the sampling variability of the second stage around E μ̂(v) = the
ridge-*regularised* (shrunk) smoothed target; the ridge bias (E μ̂(v) − μ(v),
from λ₁ and the finite bandwidths) is not in it, and such bands under-cover
the smoothed target E[k(Y^a, y) | v] (about 0.56 pointwise at n = 2000 on
the paper's simulation).  The default bands and effect intervals
(``target="smoothed"``) are bias-aware, in the spirit of robust bias
correction (Calonico, Cattaneo & Farrell 2018): they are centred on the
estimate of iterated Tikhonov regularisation of order m = :data:`BAND_ORDER`,
β_m(v) = Σ_{j<m} (I − H)^j β(v) (:func:`iterated_tikhonov`; the second stage
refitted m − 1 times to its own residuals, λ₁ and the bandwidths as tuned),
whose regularisation bias is of higher order, and their spread is that
estimator's, so the price of the bias reduction is paid in width.  They also
include the first stage's noise, linearised
(:meth:`ccme.estimators.base.LinearSecondStage.first_stage_influence`: a
unit's multiplier perturbs its first-stage residual with the same draw that
perturbs its second-stage residual in the other fold).  Their critical values
are small-sample ones: the bootstrap variance at (v, y) is Σ_i u_i(y)² over
the units' whole contributions, which in the outcome's tails and where the
inverse-propensity weights are large rests on a handful of units and is
itself noisy; the bands use Student-t quantiles with its Satterthwaite
degrees of freedom ν = (Σ u²)² / Σ u⁴ (:func:`satterthwaite_df`), after a
floor of :data:`SD_FLOOR` × the V-point's largest standard error added in
quadrature (far from the data no unit carries the variance).  The
simultaneous bands studentise by that variance averaged over a window of
:data:`VARIANCE_WINDOW` read-out bandwidths around each outcome value
(:func:`variance_window`): where few units happen to lie near y, the
estimate and its variance there are low together, and a sup over the grid
finds such a dip.

A band that holds over the whole grid at once must hold where the
V-smoothing bias is largest (at the modes, where the law moves with v), and
a bias that is small next to a pointwise half-width decides a sup.  So the
bias-reduced *simultaneous* band is the fit's sup-t band widened by a band
around the second stage refitted with undersmoothed V bandwidths,
h · n^(−1/11) (:func:`simultaneous_v_factor`), and λ₁ ×
:data:`SIMULTANEOUS_PENALTY`
(:meth:`ccme.estimators.base.LinearSecondStage.undersmoothed`).  The less a
smoother smooths, the more its in-sample residuals understate the noise
(e_i = (1 − H_ii) ε_i + …), so the refit's bootstrap uses leave-one-out
residuals e_i / (1 − H_ii)
(:meth:`~ccme.estimators.base.LinearSecondStage.leverages`,
:data:`LEVERAGE_CORRECTION`).  Both bands take the critical value at
which the two, as a union, have the bootstrap's joint level
(:func:`_union_critical_value`, :data:`UNION_FIT_BAND`), and the union
holds the pointwise band.  Measured (README, "Simultaneous bands from an
undersmoothed second stage" and "Simultaneous bands studentised by an
averaged variance"): each part of the refit was needed on the paper's
simulation (0.78 without them, 0.91 with); the refit's band alone covered a
held-out case 0.80 where the fit's covered 0.88; two bands each at the
level, 0.97–0.98 everywhere.  With each point's own variance, both bands at
the joint value covered 0.82 on linear_v1 at n = 10000, and the fit's band
kept at its own value made the union conservative (0.94–0.97); with the
averaged variance both at the joint value cover 0.91–0.94 at n = 2000.  What they still leave
out, measured (``benchmarks/inference/coverage.py``, README): the propensity
model's and the fold split's variability (a refit with another split moves the
estimate by about 0.46 bootstrap standard errors on the paper's simulation at
n = 2000) and the data-driven choice of the hyperparameters.  The propensity
model's error costs the mean-difference intervals 0.02–0.06 of coverage at
n = 2000 on hetero_v2 and mixture_v3, mostly as a bias of their centre (the product
of the nuisances' errors) that resampling the model would not remove
(``benchmarks/inference/interval_diagnosis.py --propensity true``, README).  Under the null
of the test of no effect (both arms have the same conditional law given V)
the two arms share the same regression function, so the bias cancels from
μ̂₁ − μ̂₀ and the test keeps the plain construction, with one small-sample
correction: its residuals are e_i / √(1 − H_ii) (HC2,
:data:`EFFECT_TEST_LEVERAGE`), because with the in-sample ones the global
test rejected 20.6% of true nulls at the 5% level at n = 40 and 8.4% at
n = 100 (6.6% and 4.2% with HC2; leave-one-out residuals, HC3, 0.5% and
0%).  ``benchmarks/calibration.py`` measures its size and power.  The
cancellation needs each arm's estimate to be one smoother of its
pseudo-outcome.  The tuned defaults split the doubly robust fold-arm (the
correction at λ₁, the plug-in part at λ₁ᵖ), which leaves each arm a bias
from its own first stage; the tests of equal laws (no effect, dominance,
location shift) therefore smooth both parts at λ₁ (:func:`_one_penalty_parts`,
:data:`EFFECT_TEST_PENALTY`): with the split the test of no effect rejected
25–40% of true nulls at the 5% level (n = 100–400).  They also perturb the
first stage (:data:`EFFECT_TEST_FIRST_STAGE`), whose noise does not cancel
between the arms either (14% at n = 1000 without it, 4.5% with it).

Covariates the tuning dropped.  The per-group search of ``tune="auto"`` may
drop a V covariate whose effect is small next to the pseudo-outcomes' noise;
the estimate then ignores it, and at a V-point where it matters the bias
that leaves is one no Tikhonov order reduces (the bias reduction acts within
the kernel's span): on the held-out case mixture_v3 its mean-difference
centre was off by about one standard error at n = 10000 in the data sets
that dropped v3 (``benchmarks/inference/centre_bias.py``).  So the
bias-aware bands and intervals, and the simultaneous band's undersmoothed
refit, use the second stage refitted with each dropped group at the widest
finite bandwidth of the search's range, 16 times its rule's
(:func:`restored_v_bandwidths`); the reported
estimate and the plain bands keep the fit's kernel, and the bands' target
and the intervals' method say when this was done.

A located fit's effects.  With a location stage (``fit(location=)``,
:mod:`ccme.location`) an arm's raw feature at (v, y) is the residual fit's
at y − m̂_a(v) (its moments moved in closed form), so its linear map is the
residual fit's, one V-point at a time (:class:`_Located`), and the tests and
effect intervals pool V-points and arms from these maps as from any other.
The mean model's own sampling error joins them: its coefficients are linear
in the regression's targets, δcoef* = Σ_i g_i Ψ_i with the same multiplier
per unit (:meth:`ccme.location.LocationModel.coefficient_influence`), and a
change δcoef moves the located atom r_k + m̂(v) by (v − V_k)·δcoef, since
the residual R_k = Y_k − m̂(V_k) moves with it (:func:`_location_derivative`).
So the intercept's error cancels, and so does most of the rest where the
V-kernel is narrow; where the residual's law hardly depends on V (a wide
V-kernel, the case the stage is for), the slope's error is what is left and
is of the order of the estimate's own spread.  The located bands
(:func:`_located_bands`) are the residual fit's, V-point by V-point, the
bias-aware ones with the same coefficient term.  ``benchmarks/calibration.py --location linear``
and ``benchmarks/inference/coverage.py --location linear --effects-only``
measure the tests' size and the intervals' coverage (README, "A location stage").

The bootstrap needs a linear second stage, so it is available for
``method="ridge"`` (every path) and ``"deep_feature"`` (ridge in its learned
features, which it holds fixed); ``"neural_kernel"`` raises a ParameterError
naming the methods that support it.

Cost.  The public functions run with one BLAS thread (:func:`ccme._backend.serial_blas`):
their parallel work is the compiled core's, and OpenBLAS's threads, which
spin for a while after each numpy product, would take its cores.  Within
one call the terms' iterated-Tikhonov chains run side by side
(:func:`_term_work`), and what a first stage gives every term alike
(its cross-Gram and solved features, shared by a split fold-arm's two terms
and their undersmoothed refits) is computed once (the ``cache`` of
:meth:`ccme.estimators.base.LinearSecondStage.unit_features`);
``benchmarks/inference/bands_cost.py`` times the bands and intervals.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from ._backend import atom_features, gram
from ._backend import max_threads as _backend_threads
from ._backend import serial_blas
from .embedding import invert_cdf, normalized_cdf, tail_means
from .errors import CcmeWarning, DataError, ParameterError
from .estimators import ESTIMATORS
from .estimators.base import LinearSecondStage, linear_terms, shared_piece
from .grids import outcome_grid
from .kernels import Kernel, median_bandwidth
from .tuning import ARD_LOG2_RANGE

__all__ = ["Bands", "EffectTest", "bands", "check_target", "qte_bands", "test_effect", "iterated_tikhonov",
           "simultaneous_v_factor", "STATISTICS", "BAND_ORDER", "BAND_TARGETS", "REFIT_NOTE", "SD_FLOOR",
           "SIMULTANEOUS_PENALTY", "SIMULTANEOUS_UNDERSMOOTHING", "LEVERAGE_CORRECTION", "LEVERAGE_POINTWISE",
           "EFFECT_TEST_LEVERAGE", "EFFECT_TEST_PENALTY", "EFFECT_TEST_TARGET", "EFFECT_TEST_FIRST_STAGE",
           "RESTORE_FACTOR", "RESTORE_NOTE", "UNION_FIT_BAND", "VARIANCE_WINDOW", "dropped_v_groups", "restore_note",
           "restored_v_bandwidths", "variance_window", "warn_caveat", "EFFECT_SMALL_SAMPLE", "SMALL_SAMPLE_EFFECTS",
           "Interval", "effect_intervals", "satterthwaite_df", "unit_contributions"]

STATISTICS = ("mmd", "mean")
#: Order m of the iterated Tikhonov regularisation of ``bands(target="smoothed")`` (:func:`iterated_tikhonov`).
BAND_ORDER = 20
#: λ₁ of the bias-reduced simultaneous bands' refitted second stage, relative to the fit's (undersmoothed penalty).
SIMULTANEOUS_PENALTY = 2 / 15
#: κ of the simultaneous bands' second-stage residuals e_i / (1 − H_ii)^κ (0: in-sample, 1: leave-one-out).
LEVERAGE_CORRECTION = 1.0
#: κ of the pointwise bias-reduced bands' residuals (as :data:`LEVERAGE_CORRECTION`).
LEVERAGE_POINTWISE = 0.0
#: κ of the residuals in the test of no effect (:func:`test_effect`; as :data:`LEVERAGE_CORRECTION`): 1/2 is HC2
#: (MacKinnon and White, 1985), e_i / √(1 − H_ii), whose squares are unbiased for the noise variance under a
#: projection.  Measured on null data (README, "Small arms"): with 0 the global test rejected 20.6% at the 5% level
#: at n = 40, 8.4% at n = 100, 4.8% at n = 400; with 1/2, 6.6%, 4.2% and 2.8% (4.2% at n = 1000); with 1 (HC3),
#: 0.5% at n = 40 and 0% at n = 100.
EFFECT_TEST_LEVERAGE = 0.5
#: The construction of the test of no effect's terms (:data:`BAND_TARGETS`): "regularised" (plain, first stage
#: fixed) or "smoothed" (bias-reduced as the bands: iterated Tikhonov, first-stage influence).  The plain one assumes
#: the arms' ridge biases cancel under the null, true when both arms' estimates are one smoother of their
#: pseudo-outcomes (:data:`EFFECT_TEST_PENALTY`).  The bias-reduced one was conservative with ``tune="none"``
#: (0.3-1.7% at the 5% level, n = 40-400; power 2% against a 1.5 times wider law at n = 400; README "Small arms").
EFFECT_TEST_TARGET = "regularised"
#: Whether the tests of equal laws perturb the first stage too (:meth:`~ccme.estimators.base.LinearSecondStage.
#: first_stage_influence`, as the bias-reduced bands): the noise of μ̂_a(X) enters each arm's estimate through the
#: doubly robust correction, the arms' first stages are fitted on different units, and it does not cancel between
#: them.  Measured with the tuned defaults (``benchmarks/calibration.py size --defaults``, 200-300 null data sets,
#: one penalty, HC2): without it the global test rejected 5.5% / 6.7% / 14% at the 5% level at n = 100 / 400 /
#: 1000 (the tuned first stage is less regularised, λ₀ ≈ 0.003, and the forest propensity leaves its noise a
#: first-order part); with it 4.5% / 4.0% / 4.5%.  With ``tune="none"`` it makes the test conservative (README).
EFFECT_TEST_FIRST_STAGE = True
#: Which penalty both parts of a split doubly robust fold-arm share in the test of no effect
#: (:func:`_one_penalty_parts`): "correction" (λ₁), "plugin" (λ₁ᵖ) or None (the fit's split).
EFFECT_TEST_PENALTY = "correction"
#: γ of the simultaneous bands' V bandwidths, h · n^(−γ) (:func:`simultaneous_v_factor`).
SIMULTANEOUS_UNDERSMOOTHING = 1 / 11
#: Floor of the simultaneous bands' studentisation, a fraction of the V-point's largest standard error.
SD_FLOOR = 0.1
#: Width of the window over which the simultaneous bands' variance is averaged across the outcome values, in
#: read-out bandwidths (:func:`variance_window`); 0 studentises each point by its own variance.
VARIANCE_WINDOW = 1.0
#: The fit's own band in the bias-reduced simultaneous band: "joint" (both bands at the pair's joint critical
#: value, :func:`_union_critical_value`) or "whole" (the fit's band at its own critical value, the refit's at the
#: joint one: the construction before the variance was averaged, which then covered 0.96-0.99).
UNION_FIT_BAND = "joint"
#: What the bands of each ``target`` cover (``Bands.target``).
BAND_TARGETS = {
    "smoothed": "the kernel-smoothed target E[k(Y^a, y) | V = v] (bias-reduced: iterated Tikhonov, first stage "
                "included, Student-t critical values with Satterthwaite df)",
    "regularised": "the ridge-regularised kernel-smoothed target (no bias correction, first stage fixed)",
}
#: What ``Bands.target`` adds when the simultaneous band was widened by an undersmoothed refit (:func:`bands`).
REFIT_NOTE = "; the simultaneous band joined with that of the second stage refitted with undersmoothed V bandwidths"
#: The dropped V groups' bandwidths in the bias-aware bands and intervals, relative to their rule's: the widest
#: finite factor of the per-group search (2 ** ccme.tuning.ARD_LOG2_RANGE[1]; :func:`restored_v_bandwidths`).
RESTORE_FACTOR = 2.0 ** ARD_LOG2_RANGE[1]
#: What the bias-aware bands and intervals say when they refitted the second stage with dropped V covariates given back.
RESTORE_NOTE = "V covariates the tuning dropped restored at the widest finite bandwidth of the search"
_CHUNK_DOUBLES = 1 << 22


# ---------------------------------------------------------------------------
# per-fold linear structure (ccme.estimators.base.LinearSecondStage)
# ---------------------------------------------------------------------------
def warn_caveat(res) -> None:
    """Say, in a CcmeWarning, what the estimator's bootstrap is known to leave out (``Estimator.bootstrap_caveat``)."""
    if res.estimator.bootstrap_caveat:
        # stacklevel: this function, the public one below, serial_blas's wrapper, the result's method, the caller
        warnings.warn(res.estimator.bootstrap_caveat, CcmeWarning, stacklevel=5)


#: Per kind of inference, arms smaller than this (the smaller of the two compared) make the bootstrap's p-values
#: too small or its intervals of distances too short, or were not measured (:data:`SMALL_ARM_FINDINGS`).  Measured
#: on null data by ``python benchmarks/calibration.py size --n N --reps 500`` (V = x1, a confounder outside V, about
#: half the units treated, ``tune="none"``, logistic propensity): :func:`test_effect`'s rejections at the 5% level,
#: the global p-value over 20 training rows / the one at x1 = 0, with its HC2 residuals
#: (:data:`EFFECT_TEST_LEVERAGE`): n = 40: 6.6% / 4.0%, 60: 5.2% / 4.0%, 100: 4.2% / 5.6%, 150: 2.8% / 4.4%, 250:
#: 4.2% / 3.2%, 400: 2.8% / 4.4%; with the in-sample residuals before, 20.6% / 8.2% at n = 40 and 8.4% / 6.2% at
#: n = 100 (``benchmarks/results/small_arms_calibration.jsonl``).  Smaller samples leave a fold too few units of an
#: arm.  The dominance test (``shape --n 80``) rejected 10.5% with arms of about 40, with or without HC2 residuals;
#: the distances' intervals, ``effects --n 60 120 250 500`` (``benchmarks/results/distance_intervals.jsonl``).
SMALL_ARM = {"effect": 20, "dominance": 75, "intervals": 75}
#: What each kind of inference was measured to do with arms below its :data:`SMALL_ARM` (``benchmarks/calibration.py``;
#: the clause :func:`small_arm_caveat` adds).
SMALL_ARM_FINDINGS = {
    "effect": ("were not measured (the smallest measured, arms of about 20 units, rejected true nulls 6.6% of the "
               "time at the 5% level globally, 4.0% at a single V-point)"),
    "dominance": ("are not calibrated (on null data with arms of about 40 units the global test rejected 10.5% of "
                  "the time at the 5% level, a single V-point's test 6%)"),
    "intervals": ("are not calibrated (with arms of 30-60 units the 90% intervals of the Kolmogorov and "
                  "Wasserstein distances covered 56-83% of the time (80-86% with arms of 125-250), the MMD's 99.5% "
                  "with arms of about 30 (too wide), those of mean and quantile differences 93-94%)"),
}


def small_arm_caveat(res, arms, kind: str = "effect") -> str | None:
    """The caveat on an inference of ``kind`` (:data:`SMALL_ARM_FINDINGS`) between ``arms`` (codes) when the smaller
    arm has fewer than ``SMALL_ARM[kind]`` units (:data:`SMALL_ARM`); None otherwise."""
    smallest = min(res.n_arm[a] for a in arms)
    if smallest >= SMALL_ARM[kind]:
        return None
    what = "intervals" if kind == "intervals" else "p-values"
    return (f"the smaller arm compared has {smallest} units: below {SMALL_ARM[kind]} units an arm the multiplier "
            f"bootstrap's {what} {SMALL_ARM_FINDINGS[kind]} (benchmarks/calibration.py); read them as rough")


def warn_small_arms(res, arms, kind: str, stacklevel: int) -> None:
    """:func:`small_arm_caveat` as a CcmeWarning (``stacklevel`` counted from this function's caller)."""
    caveat = small_arm_caveat(res, arms, kind)
    if caveat is not None:
        warnings.warn(caveat, CcmeWarning, stacklevel=stacklevel + 1)


def _linear_parts(res, arm: int) -> list:
    """Per fold, the linear second stages whose sum is its fold-arm (:func:`ccme.estimators.base.linear_terms`)."""
    parts = [linear_terms(part) for part in res.embeddings[arm].parts]
    if not all(isinstance(t, LinearSecondStage) for terms in parts for t in terms):
        supported = sorted(name for name, est in ESTIMATORS.items() if est.supports_bootstrap)
        raise ParameterError(
            f"the multiplier bootstrap (bands, test_effect) needs a linear second stage (method in {supported}); "
            f"this result was fitted with method={res.method!r}"
        )
    return parts


@dataclass
class _Linear:
    """One term of the linear map: units, weights at the V-points (scaled by 1/K), fitted and residual features.

    A second-stage term has the unit features ``P`` (its estimate is βᵀP); a
    first-stage term (:class:`ccme.estimators.base.FirstStageInfluence`) has
    ``P = None``: it adds noise to the bootstrap, nothing to the estimate.
    """

    units: np.ndarray
    beta: np.ndarray
    P: np.ndarray | None
    R: np.ndarray

    def estimate(self):
        return 0.0 if self.P is None else self.beta.T @ self.P

    def perturb(self, g: np.ndarray, e: int) -> np.ndarray:
        """Δ* at V-point e for every draw: (n_boot, n_points)."""
        return g[self.units].T @ (self.beta[:, e : e + 1] * self.R)

    def shares(self, e: int, start: int, stop: int):
        """(units − start, their shares β_i(v_e) R_i) for the units start ≤ i < stop: Δ* = Σ_i g_i share_i."""
        inside = (self.units >= start) & (self.units < stop)
        yield self.units[inside] - start, self.beta[inside, e : e + 1] * self.R[inside]


@dataclass
class _Located:
    """The linear map of a located arm's raw feature (:mod:`ccme.location`): the residual's, moved by m̂_a(v).

    The estimate at (v_e, y) is the residual fit's at y − m̂_a(v_e), so each
    V-point has its own terms (``rows[e]``, :func:`_linear` of the residual
    fit with the features at V-point e's points; for the moments one list
    for all, the shift applied by ``transform[e]``, (F, F)).  The mean
    model's own sampling error adds one term: its coefficients move by
    δcoef* = Σ_i g_i Ψ_i (:meth:`ccme.location.LocationModel.coefficient_influence`,
    ``influence`` (n_units, q) over ``units``), and the raw feature at v_e by
    δcoef*ᵀ ``derivative[e]`` (q, F) (:func:`_location_derivative`).
    """

    rows: list
    transform: list
    units: np.ndarray
    influence: np.ndarray
    derivative: np.ndarray

    def _moved(self, x, e: int):
        T = self.transform[e]
        if T is None:
            return x
        if isinstance(T, _Interpolation):  # read from the fine grid
            return T(x)
        return x @ T

    def estimate(self):
        raw = {}  # rows shared by the V-points (the moments, a fine grid) are contracted once
        for row in self.rows:
            if id(row) not in raw:
                raw[id(row)] = sum(p.estimate() for p in row)
        return np.vstack([self._moved(raw[id(row)][e], e) for e, row in enumerate(self.rows)])

    def perturb(self, g: np.ndarray, e: int) -> np.ndarray:
        if isinstance(self.transform[e], _Interpolation):
            # Each unit's share read at the V-point's points first: n_boot × G, not n_boot × the fine grid.
            T = self.transform[e]
            moved = sum(g[term.units].T @ (term.beta[:, e : e + 1] * T(term.R)) for term in self.rows[e])
        else:
            moved = self._moved(sum(p.perturb(g, e) for p in self.rows[e]), e)
        return moved + (g[self.units].T @ self.influence) @ self.derivative[e]

    def shares(self, e: int, start: int, stop: int):
        for term in self.rows[e]:
            for units, share in term.shares(e, start, stop):
                yield units, self._moved(share, e)
        inside = (self.units >= start) & (self.units < stop)
        yield self.units[inside] - start, self.influence[inside] @ self.derivative[e]


def iterated_tikhonov(part: LinearSecondStage, beta: np.ndarray, order: int, n_threads: int = 0) -> np.ndarray:
    """β_m(v) = Σ_{j<m} (I − H)^j β(v): the weights of iterated Tikhonov regularisation of order m.

    Refitting the ridge smoother to its own residuals m − 1 times (Tukey's
    "twicing" for m = 2) gives the estimate Σ_j βᵀ(I − H)^j ξ̂, whose
    filter 1/σ · (1 − (s/(σ + s))^m) has qualification m: its bias in an
    eigendirection of the kernel is (s/(σ + s))^m instead of s/(σ + s)
    (Engl, Hanke & Neubauer, *Regularization of Inverse Problems*, 1996,
    §5.1), while the variance grows at most m² times (in practice ~m).
    For a kernel ridge second stage (I − H)β = s (K_V + sI)⁻¹ β, for ridge in
    learned features likewise in M dimensions: :meth:`residual_features`
    applies it, so any :class:`LinearSecondStage` gets the correction.

    The estimate is βᵀ Σ_j (I − H)^j ξ̂ = (Σ_j (I − Hᵀ)^j β)ᵀ ξ̂, so the step on
    β is by the transpose, :meth:`LinearSecondStage.adjoint_residuals`; it is
    :meth:`residual_features` for a symmetric H, and differs for the
    sampling-weighted ridge, whose H = Φ G⁻¹ ΦᵀW is not symmetric.
    """
    total, term = beta, beta
    for _ in range(order - 1):
        term = part.adjoint_residuals(term, n_threads)
        total = total + term
    return total


def simultaneous_v_factor(n: int) -> float:
    """n^(−γ), γ = :data:`SIMULTANEOUS_UNDERSMOOTHING`: the V bandwidths of the simultaneous bands, relative to the fit's.

    Undersmoothing (Hall 1992, *Ann. Statist.* 20; the rate discussion of
    Calonico, Cattaneo & Farrell 2018): with the tuned bandwidth h of order
    n^(−1/(2s+d)) for a conditional law of smoothness s in d = dim V
    dimensions, h · n^(−γ) makes the V-smoothing bias of smaller order than
    the band's half-width, and the variance, of order 1/(n h^d), still
    vanishes while 2s/(2s + d) > dγ: with γ = 1/11 for any smoothness when
    d ≤ 2, for s > 2.1 when d = 5.  The factor is 0.50 at n = 2000 and
    0.43 at n = 10000.  γ was chosen among factors 0.34–0.6 at n = 2000 on
    the paper's simulation and hetero_v2
    (``benchmarks/inference/simultaneous_diagnosis.py``, 20 data sets each;
    README); the coverage study reports it on those, on linear_v1 and on
    inside_v, which was not looked at.
    """
    return float(max(int(n), 2) ** -SIMULTANEOUS_UNDERSMOOTHING)


def dropped_v_groups(res) -> list:
    """The labels of the V covariate groups the tuning's per-group search dropped (none without that search)."""
    tuning = getattr(res, "tuning", None)
    return tuning.dropped_groups("V") if tuning is not None else []


def restore_note(res, restore: np.ndarray | None) -> str:
    """What the bias-aware bands' and intervals' method adds when ``restore`` gave dropped V covariates back.

    ``restore`` is :func:`restored_v_bandwidths`'s result for ``res``; "" when it is None.
    """
    groups = dropped_v_groups(res) if restore is not None else []
    return f"; {RESTORE_NOTE}: {', '.join(groups)}" if groups else ""


def restored_v_bandwidths(res) -> np.ndarray | None:
    """Bandwidths that give back the V covariates the tuning dropped; None when it dropped none.

    The per-group (ARD) search of ``tune="auto"`` may drop a V covariate
    (infinite bandwidth) whose effect on the pseudo-outcomes is small next to
    their noise: for the integrated squared error of the whole conditional
    law that is often the better choice.  But the estimate then does not
    depend on that covariate at all, and at a V-point where it matters the
    bias of a functional (a mean difference, a quantile) is one that no
    iterated Tikhonov order can reduce, since the bias reduction acts within
    the kernel's span.  Measured on the held-out case mixture_v3 (true
    propensity, ``benchmarks/inference/centre_bias.py``): where v3 was dropped
    (7 and 11 of 40 data sets at n = 2000 and 10000) the bias-aware centre
    of the mean difference was off by −0.11 to −0.13 at the first V-point,
    about one standard error at n = 10000, against −0.02 where it was kept.
    So the bias-aware bands and intervals refit the second stage with each
    dropped group at :data:`RESTORE_FACTOR` times the median-heuristic
    bandwidth of the V kernel's rule (:func:`ccme.kernels.median_bandwidth`
    on V, seeded by the fit's seed): the widest finite bandwidth of the
    search's range (:data:`ccme.tuning.ARD_LOG2_RANGE`), the kernel closest
    to the dropped one that still depends on the covariate, so that where
    the search found the covariate irrelevant the bands barely change, and
    where it matters the bias reduction can act.  Measured (README,
    "Covariates the tuning dropped are given back"), against the rule's
    bandwidth and 4 times it: on mixture_v3's 24 data sets at n = 10000
    whose fit dropped v3 the mean-difference intervals covered 0.96, 0.96,
    0.88 (rule 0.96, 0.83, 0.92; dropped 0.58, 0.88, 0.75) at up to 10% more
    width than with v3 dropped (rule 30–39%); on sparse_v10, whose dropped
    covariates are irrelevant, they were as wide as with them dropped (the
    rule's 30–38% wider).  The reported estimate and the plain bands keep
    the fit's kernel.  A column that is constant stays ignored.

    Returns
    -------
    ndarray (d_v,) or None
        One bandwidth per V column (inf for the columns that keep theirs), or
        None when no V group was dropped by the tuning (also for fits whose
        V bandwidths were not searched per group).
    """
    dropped = set(dropped_v_groups(res))
    if not dropped or "v" not in res.kernels:
        return None
    kernel = res.kernels["v"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant column was reported by the fit
        rule = median_bandwidth(res.design.V, res.seed, what="v_bandwidth", groups=kernel.groups)
    restore = np.full(len(kernel.bandwidth), np.inf)
    for group in kernel.groups:
        if group.label in dropped:
            restore[list(group.columns)] = RESTORE_FACTOR * rule[list(group.columns)]
    return restore if np.isfinite(restore).any() else None


def _refitted_parts(res, arm: int, factor: float, penalty_factor: float, restore, cache: dict | None) -> list | None:
    """:func:`_linear_parts` with each term refitted (:meth:`~ccme.estimators.base.LinearSecondStage.undersmoothed`).

    None if a term cannot be refitted (a second stage without a V kernel).
    """
    V, n_threads = res.design.V, res.embeddings[arm].n_threads
    parts = []
    for terms in _linear_parts(res, arm):
        V_units = V[terms[0].units]  # a split fold-arm's terms share their units
        refits = tuple(term.undersmoothed(factor, penalty_factor, V_units, n_threads, cache, restore=restore)
                       for term in terms)
        if any(term is None for term in refits):
            return None
        parts.append(refits)
    return parts


def _undersmoothed_parts(res, arm: int, restore=None, cache: dict | None = None) -> list | None:
    """:func:`_linear_parts` refitted for the simultaneous bands; None if a term cannot be.

    Each term's second stage is refitted with the V bandwidths ×
    :func:`simultaneous_v_factor` and λ₁ × :data:`SIMULTANEOUS_PENALTY`
    (:meth:`ccme.estimators.base.LinearSecondStage.undersmoothed`), the
    covariates the tuning dropped first given back at ``restore``
    (:func:`restored_v_bandwidths`).
    """
    return _refitted_parts(res, arm, simultaneous_v_factor(res.n), SIMULTANEOUS_PENALTY, restore, cache)


def _second_stages(res, arm: int, restore, cache: dict | None) -> list:
    """The per-fold terms of the bias-aware bands and intervals: the fit's, or refitted with ``restore``.

    With ``restore`` (:func:`restored_v_bandwidths`) the terms are the fit's
    second stages with the dropped V covariates given back, kept in ``cache``
    (when given) so that the calls of one band or interval share them.
    """
    if restore is None:
        return _linear_parts(res, arm)
    key = ("second stages with the dropped V covariates restored", arm)
    if cache is not None and key in cache:
        return cache[key]
    parts = _refitted_parts(res, arm, 1.0, 1.0, restore, cache) or _linear_parts(res, arm)
    if cache is not None:
        cache[key] = parts
    return parts


def _one_penalty_parts(res, arm: int, shared: str, restore, cache: dict | None) -> list:
    """The fit's per-fold terms with both parts of a split fold-arm smoothed at one penalty, ``shared``'s.

    A split fold-arm (:class:`ccme.estimators.base.SplitSecondStage`) smooths
    the correction at λ₁ and the plug-in part μ̂_a(X_i) at λ₁ᵖ.  Its bias in V
    is then (H(λ₁ᵖ) − H(λ₁)) E[μ̂_a(X) − μ_a(X) | V] besides the ridge's own:
    the correction no longer removes the first stage's error.  The arms'
    first stages are fitted on different units, so under the null these
    biases differ between the arms and the test of no effect, which assumes
    they cancel, rejects too often (40% at the 5% level, n = 400, README
    "Small arms").  With one penalty for both parts each arm's estimate is one
    ridge smoother applied to its doubly robust pseudo-outcome, and the same
    smoother for both arms: the smoothing biases cancel under the null and
    the first stage's errors enter only through products.  The other term is
    refitted (:meth:`~ccme.estimators.base.LinearSecondStage.undersmoothed`
    with the penalties' ratio); a fold-arm that cannot be refitted (a second
    stage without a V kernel) keeps its split.  ``shared``: "correction"
    (both at λ₁) or "plugin" (both at λ₁ᵖ), :data:`EFFECT_TEST_PENALTY`.
    """
    parts = _second_stages(res, arm, restore, cache)
    plugin_penalty = (res.params.get("lam1_plugin") or {}).get(arm)
    if plugin_penalty is None:
        return parts
    key = ("split parts at one penalty", arm, shared, restore is None)
    if cache is not None and key in cache:
        return cache[key]
    # The factor by which the refitted part's penalty moves: to λ₁ (the plug-in part) or to λ₁ᵖ (the correction).
    ratio = float(res.params["lam1"][arm]) / float(plugin_penalty)
    refitted, factor = (1, ratio) if shared == "correction" else (0, 1.0 / ratio)
    V, n_threads = res.design.V, res.embeddings[arm].n_threads
    out = []
    for terms in parts:
        if len(terms) != 2:  # one fold-arm of one penalty (a fold without the arm's units: the plug-in part alone)
            out.append(terms)
            continue
        refit = terms[refitted].undersmoothed(1.0, factor, V[terms[0].units], n_threads, cache)
        out.append(terms if refit is None else tuple(refit if t == refitted else term for t, term in enumerate(terms)))
    if cache is not None:
        cache[key] = out
    return out


def _linear(res, arm, V, points, feature, kernel: Kernel, *, order: int = 1, first_stage: bool = False,
            parts: list | None = None, per_term: dict | None = None, features: dict | None = None,
            leverage: float = 0.0, cache: dict | None = None, restore=None, shared_penalty: str | None = None) -> list:
    """The :class:`_Linear` terms of arm's estimate at the V-points for a feature at ``points``.

    ``parts``: the per-fold terms (default :func:`_second_stages`: the fit's,
    or with ``restore`` refitted with the V covariates the tuning dropped given back);
    ``per_term``: a dict keeping what does not depend on the feature (each
    term's weights β_m(V) and leverages), so that a second call over the same
    terms and V-points (the mass) does not compute them again; ``features``:
    a dict of the unit features P by (fold, term, feature), which a refitted
    second stage (:func:`_undersmoothed_parts`) shares with the fit;
    ``leverage``: κ of the residuals e_i / (1 − H_ii)^κ; ``cache``: the
    per-call dict in which the fold-arms keep what their first stage gives
    every term alike (:meth:`ccme.estimators.base.LinearSecondStage.unit_features`);
    ``shared_penalty``: a split fold-arm's parts at that one penalty (:func:`_one_penalty_parts`).
    """
    if res.embeddings[arm].location is not None:
        return [_located_linear(res, arm, V, points, feature, kernel, order=order, first_stage=first_stage,
                                parts=parts, per_term=per_term, leverage=leverage, cache=cache, restore=restore,
                                shared_penalty=shared_penalty)]
    if parts is None:
        parts = (_one_penalty_parts(res, arm, shared_penalty, restore, cache) if shared_penalty
                 else _second_stages(res, arm, restore, cache))
    per_term = {} if per_term is None else per_term
    features = {} if features is None else features
    n_threads = res.embeddings[arm].n_threads
    _term_work(parts, V, order, per_term, n_threads, leverage)
    out = []
    for k, terms in enumerate(parts):
        # A split fold-arm's terms share their units, so the same multipliers perturb both (_Linear.perturb).
        for t, part in enumerate(terms):
            if (k, t, feature) not in features:
                features[(k, t, feature)] = part.unit_features(points, feature, kernel, n_threads, cache)
            P = features[(k, t, feature)]
            beta = per_term[("beta", id(part))]
            R = part.residual_features(P, n_threads)
            h = per_term[("h", id(part))] if leverage else None
            if h is not None:  # towards leave-one-out residuals (LinearSecondStage.leverages)
                R = R / np.maximum(1.0 - h, 1e-12)[:, None] ** leverage  # 1 − H_ii = s [(K + sI)⁻¹]_ii > 0
            out.append(_Linear(units=part.units, beta=beta, P=P, R=R))
            influence = (part.first_stage_influence(beta, points, feature, kernel, n_threads, cache) if first_stage
                         else None)
            if influence is not None:
                out.append(_Linear(units=influence.units, beta=influence.weights, P=None, R=influence.residuals))
    return out


#: Step of the located effects' central difference along the atoms' shift, in read-out bandwidths
#: (:func:`_location_derivative`): its error is about (step)²/6 of the derivative, its rounding 1e-16/step.
_SHIFT_STEP = 1e-4
#: Atoms per block of :func:`_location_derivative` (memory O(block × points)).
_ATOM_BLOCK = 8192


def _located_linear(res, arm, V, points, feature, kernel: Kernel, *, per_term: dict | None = None, **how) -> _Located:
    """:func:`_linear` of a located arm: the residual fit's terms per V-point at y − m̂_a(v), and the mean model's.

    The residual fit's terms (:func:`residual_result`) share ``per_term``
    (β_m at all V-points, computed once) and the first stage's ``cache``;
    each V-point's features are its own.  The moments are taken once and
    moved by m̂_a(v_e) as :meth:`ccme.Embedding.contract` moves them.
    """
    residual = residual_result(res)
    per_term = {} if per_term is None else per_term
    shift = res.embeddings[arm].shift(v=V)
    fine = None if feature == "moments" else _fine_grid(points, shift, kernel)
    if feature == "moments":
        row = _linear(residual, arm, V, points, feature, kernel, per_term=per_term, **how)
        rows, transform = [row] * len(V), [_moment_shift(s) for s in shift]
    elif len(V) * len(points) > len(fine):
        # Many V-points: the features once on a fine grid, each V-point's read from it (cubic interpolation).
        row = _linear(residual, arm, V, fine[:, None], feature, kernel, per_term=per_term, **how)
        rows, transform = [row] * len(V), [_Interpolation.at(fine, points[:, 0] - s[0]) for s in shift]
    else:
        rows = [_linear(residual, arm, V, points - shift[e], feature, kernel, per_term=per_term, **how)
                for e in range(len(V))]
        transform = [None] * len(V)
        fine = None
    model = res.embeddings[arm].location
    cache = how.get("cache")
    # One call (effect_intervals) asks for several features of each arm: the model's influence and the atoms'
    # weights at V are the same for all of them.
    influence = shared_piece(cache, ("mean model influence", id(model)), lambda: _mean_model_influence(res, model))
    derivative = _location_derivative(residual.embeddings[arm], V, res.design.V, points, feature, kernel, shift,
                                      cache, read=None if fine is None else (fine, transform))
    return _Located(rows=rows, transform=transform, units=model.units, influence=influence, derivative=derivative)


#: Nodes per read-out bandwidth of the fine grid from which a located fit's features are interpolated at many
#: V-points (:class:`_Interpolation`): the cubic's error is about (1/8)⁴/24 · 3 ≈ 3e-5 of a Gaussian feature's scale.
LOCATED_FINE_STEPS = 8


def _fine_grid(points: np.ndarray, shift: np.ndarray, kernel: Kernel) -> np.ndarray:
    """A regular grid of step h / :data:`LOCATED_FINE_STEPS` over every V-point's y − m̂(v), two nodes past each end."""
    step = float(kernel.bandwidth_array[0]) / LOCATED_FINE_STEPS
    q = points[:, 0][None, :] - shift[:, :1]
    lo, hi = float(q.min()) - 2 * step, float(q.max()) + 2 * step
    return lo + step * np.arange(int(np.ceil((hi - lo) / step)) + 1)


class _Interpolation(NamedTuple):
    """f(x) from f on a regular grid by 4-point Lagrange (cubic) interpolation, along an array's last axis.

    Exact for cubics; for a kernel feature of bandwidth h on a grid of step
    δ the error is about δ⁴ max|f⁗| / 24 · 9/16, 3·10⁻⁵ of the feature's
    scale at δ = h/8 (tested against the exact features).  ``nodes`` and
    ``weights`` are (4, len(x)): the grid indices around each x and their weights.
    """

    nodes: np.ndarray
    weights: np.ndarray

    @classmethod
    def at(cls, grid: np.ndarray, x: np.ndarray) -> "_Interpolation":
        step = grid[1] - grid[0]
        u = (x - grid[0]) / step
        j = np.clip(np.floor(u).astype(np.intp), 1, len(grid) - 3)
        f = u - j
        weights = np.stack([-f * (f - 1) * (f - 2) / 6, (f + 1) * (f - 1) * (f - 2) / 2,
                            -(f + 1) * f * (f - 2) / 2, (f + 1) * f * (f - 1) / 6])
        return cls(j[None, :] + np.arange(-1, 3)[:, None], weights)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        return sum(values[..., self.nodes[k]] * self.weights[k] for k in range(4))


def _mean_model_influence(res, model) -> np.ndarray:
    """Ψ (n_units, q): each unit's share of the mean model's coefficient error (its units' V and sampling weights)."""
    active = None if res.sampling_weights is None else res.sampling_weights.active
    return model.coefficient_influence(res.design.V[model.units], None if active is None else active[model.units])


def _moment_shift(s: np.ndarray) -> np.ndarray:
    """T (F, F) with (mass, Σcr, Σcr²) T = (mass, Σc(r + s), Σc(r + s)²) per outcome dimension (a row vector)."""
    d = len(s)
    T = np.eye(1 + 2 * d)
    for l in range(d):
        T[0, 1 + l], T[0, 1 + d + l], T[1 + l, 1 + d + l] = s[l], s[l] ** 2, 2.0 * s[l]
    return T


def _location_derivative(embedding, V, V_design, points, feature, kernel: Kernel, shift, cache=None,
                         read=None) -> np.ndarray:
    """∂/∂coef of a located arm's raw feature at each V-point: (n_v, d_v · d, F), row j·d + l for coef[j, l].

    A change δcoef of the mean model's coefficients moves m̂(v) by v·δcoef
    and, through the residuals R_k = Y_k − m̂(V_k) the embedding was fitted
    to, each atom by −V_k·δcoef (k's unit's V), so the located atom
    r_k + m̂(v) by (v − V_k)·δcoef: the intercept cancels, and where the
    V-kernel is narrow so does most of the rest.  The raw feature moves by
    Σ_k c_k(v) ∂_x F(r_k + m̂(v), y) (v − V_k)_j per coefficient j: exactly
    for the moments, by a central difference of step :data:`_SHIFT_STEP`
    read-out bandwidths for the density and CDF (a shift of the atom by a is
    one of the point by −a).  The weights c_k(v) are the fit's (the term is
    first order); the residual fit's first stage is held fixed.  ``cache``:
    the bootstrap's per-call dict, which keeps the atoms and their weights at
    V for the call's other features.  ``read``: (fine grid, an
    :class:`_Interpolation` per V-point) of a one-dimensional outcome's
    density or CDF at many V-points; the atoms' derivatives are then taken
    once on that grid, summed per V-point by two products over the atoms
    (Σ_k c_k(v)(v − V_k)_j = v_j Σ_k c_k(v) − Σ_k c_k(v) V_kj) and read at each
    V-point's y − m̂(v), as the features themselves are.
    """
    parts = embedding.parts
    units = [getattr(part, "atom_units", None) for part in parts]
    if any(u is None for u in units):
        raise ParameterError("the bootstrap of a located fit needs each fold's atoms' units; this fit does not keep "
                             "them (saved by an earlier ccme): fit again")
    atoms, c = shared_piece(cache, ("located atoms", id(parts[0])), lambda: embedding.weights(v=V), inputs=(V,))
    units = np.concatenate(units)
    d_v, d = V.shape[1], shift.shape[1]
    if read is not None and feature != "moments":
        return _fine_location_derivative(embedding, V, V_design[units], atoms, c, feature, kernel, *read)
    out = np.zeros((len(V), d_v * d, 1 + 2 * d if feature == "moments" else len(points)))
    for start in range(0, len(atoms), _ATOM_BLOCK):
        block = slice(start, start + _ATOM_BLOCK)
        r, c_b = atoms[block], c[block]
        V_k = V_design[units[block]]
        for e in range(len(V)):
            lever = c_b[:, e : e + 1] * (V[e] - V_k)  # (N, d_v): c_k (v − V_k)
            if feature == "moments":
                for l in range(d):
                    rows = slice(l, d_v * d, d)
                    out[e, rows, 1 + l] += lever.sum(axis=0)
                    out[e, rows, 1 + d + l] += 2.0 * lever.T @ (r[:, l] + shift[e, l])
            else:
                step = _SHIFT_STEP * float(kernel.bandwidth_array[0])
                ahead, behind = (atom_features(r, points - shift[e] - sign * step, feature, kernel.name,
                                               kernel.bandwidth_array, embedding.n_threads) for sign in (1.0, -1.0))
                out[e] += lever.T @ ((ahead - behind) / (2.0 * step))
    return out


def _fine_location_derivative(embedding, V, V_atoms, atoms, c, feature, kernel: Kernel, fine, reads) -> np.ndarray:
    """:func:`_location_derivative` of a one-dimensional outcome read from a fine grid: (n_v, d_v, len(points)).

    The central difference of each atom's feature on the grid, D_k(t), is
    formed once per block of atoms; per V-point e and coefficient j the sum
    Σ_k c_k(v_e)(v_e − V_k)_j D_k(t) is v_ej (CᵀD)_e − ((C ∘ V_·j)ᵀD)_e, and is
    read at y − m̂(v_e) by ``reads[e]``.
    """
    step = _SHIFT_STEP * float(kernel.bandwidth_array[0])
    d_v = V.shape[1]
    plain = np.zeros((len(V), len(fine)))             # Σ_k c_k(v_e) D_k(t)
    weighted = np.zeros((d_v, len(V), len(fine)))     # Σ_k c_k(v_e) V_kj D_k(t)
    for start in range(0, len(atoms), _ATOM_BLOCK):
        block = slice(start, start + _ATOM_BLOCK)
        ahead, behind = (atom_features(atoms[block], fine[:, None] - sign * step, feature, kernel.name,
                                       kernel.bandwidth_array, embedding.n_threads) for sign in (1.0, -1.0))
        D = (ahead - behind) / (2.0 * step)
        plain += c[block].T @ D
        for j in range(d_v):
            weighted[j] += (c[block] * V_atoms[block, j:j + 1]).T @ D
    return np.stack([reads[e](V[e][:, None] * plain[e] - weighted[:, e]) for e in range(len(V))])


def _term_work(parts: list, V, order: int, per_term: dict, n_threads: int, leverage: float) -> None:
    """Each term's β_m(V) (:func:`iterated_tikhonov`) and, with ``leverage``, its leverages, into ``per_term``.

    A chain is order − 1 solves in sequence, each with as many right-hand
    sides as V-points: too little work to split (a split solve waits at a
    barrier per block, slowly on a loaded machine), and the leverages run
    one BLAS thread here (:func:`ccme._backend.serial_blas`); so the terms'
    chains and leverages run side by side instead, one thread each
    (``n_threads`` of them, 0: the core's default), each computed the same
    way whatever the number of threads.
    """
    jobs = [(kind, part) for terms in parts for part in terms
            for kind in (("beta", "h") if leverage else ("beta",)) if (kind, id(part)) not in per_term]

    def run(job):
        kind, part = job
        if kind == "h":
            return part.leverages(1)
        return iterated_tikhonov(part, part.beta(V, 1) / len(parts), order, 1)

    workers = min(len(jobs), n_threads or _backend_threads())
    if workers > 1 and (order > 1 or leverage):
        with ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(run, jobs))
    else:
        done = [run(job) for job in jobs]
    for (kind, part), value in zip(jobs, done):
        per_term[(kind, id(part))] = value


def _mass_linear(res, arm, V, **how) -> list:
    """The linear structure of the mass Σ_k c_k(v) (column 0 of the "moments" feature)."""
    d = res.design.Y.shape[1]
    return _linear(res, arm, V, np.zeros((0, d)), "moments", Kernel("gaussian", (1.0,) * d), **how)


def _unit_mass(res, arm, V, points, feature, kernel, how: dict):
    """(estimate / mass, mass, density terms, mass terms) of the linear structure built as ``how`` says.

    ``how`` may hold ``parts`` and a ``features`` dict (see :func:`_linear`).
    """
    parts = how.get("parts") or _second_stages(res, arm, how.get("restore"), how.get("cache"))
    # Both calls share the terms, their β_m(V) and leverages, and the first stage's pieces.
    how = {**how, "parts": parts, "per_term": {}, "cache": how.get("cache", {})}
    lin = _linear(res, arm, V, points, feature, kernel, **how)
    lin_mass = _mass_linear(res, arm, V, **how)
    mass = sum(part.estimate() for part in lin_mass)[:, 0]
    return sum(part.estimate() for part in lin) / mass[:, None], mass, lin, lin_mass


def check_target(target: str) -> None:
    """Raise a ParameterError unless ``target`` is one the bands and intervals know (:data:`BAND_TARGETS`)."""
    if target not in BAND_TARGETS:
        raise ParameterError(f"`target` must be one of {sorted(BAND_TARGETS)}; got {target!r}")


def _bias_reduction(target: str, res) -> dict:
    """How :func:`_linear` builds the terms for a ``target``: bias-reduced ("smoothed") or plain ("regularised").

    The bias-reduced terms are also refitted with the V covariates the tuning
    dropped given back (:func:`restored_v_bandwidths`).
    """
    check_target(target)
    if target != "smoothed":
        return {}
    return {"order": BAND_ORDER, "first_stage": True, "restore": restored_v_bandwidths(res)}


def _equal_laws(how: dict) -> dict:
    """``how`` (:func:`_linear`'s options) for the tests of equal laws: one penalty, the first stage perturbed.

    Under their nulls the arms' biases must cancel, so a split fit's parts
    share one penalty (:data:`EFFECT_TEST_PENALTY`), and the first stage's
    noise, which does not cancel, joins the draws (:data:`EFFECT_TEST_FIRST_STAGE`).
    """
    return {"cache": {}, **how, "shared_penalty": EFFECT_TEST_PENALTY,
            "first_stage": how.get("first_stage", False) or EFFECT_TEST_FIRST_STAGE}


def _multipliers(n: int, n_boot: int, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, n_boot))


def _check_boot(n_boot, level=None):
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 10:
        raise ParameterError(f"`n_boot` must be an integer >= 10; got {n_boot!r}")
    if level is not None and not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ParameterError(f"`level` must be in (0, 1); got {level!r}")


# ---------------------------------------------------------------------------
# confidence bands
# ---------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class Bands:
    """Bootstrap confidence bands of the kernel-smoothed density or CDF of Y^a | V = v.

    Attributes
    ----------
    y : ndarray (G,)
    estimate : ndarray (n_v, G)
        The unit-mass estimate Σ_k c_k(v) F(y_k, y) / Σ_k c_k(v) (neither
        clipped nor made monotone).
    lower, upper : ndarray (n_v, G)
        Pointwise bands.
    lower_simultaneous, upper_simultaneous : ndarray (n_v, G)
        Bands holding over the whole grid at once for each V-point (sup-t);
        for the bias-reduced bands, the sup-t band around :attr:`estimate`
        joined with a band around :attr:`estimate_simultaneous`.
    se : ndarray (n_v, G)
        Bootstrap standard error.
    df : ndarray (n_v, G)
        Degrees of freedom of the Student-t critical values: the
        Satterthwaite ν of the bootstrap variance (:func:`satterthwaite_df`)
        for the bias-reduced bands, ``inf`` (normal) for the plain ones.
    level : float
    feature : {"density", "cdf"}
    arm : int or level
        1 or 0 for a binary treatment; the level for a treatment with k ≥ 3 levels.
    n_boot : int
    index : list
        Labels of the V-points.
    target : str
        What the bands cover and how (:data:`BAND_TARGETS`): the
        kernel-smoothed E[k(Y^a, y) | V = v] (density) or E[K(y − Y^a) | V = v]
        (CDF), bias-reduced with small-sample critical values by default, or
        its ridge-regularised version (plain bands).
    estimate_simultaneous : ndarray (n_v, G) or None
        For the bias-reduced bands, the unit-mass estimate of the second stage
        refitted with the V bandwidths × :attr:`v_factor` and λ₁ ×
        :data:`SIMULTANEOUS_PENALTY` (:func:`bands`), the centre of the second
        band that widens the simultaneous one; None otherwise.
    v_factor : float
        The factor of the simultaneous bands' V bandwidths (1: not undersmoothed).
    """

    y: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    lower_simultaneous: np.ndarray
    upper_simultaneous: np.ndarray
    se: np.ndarray
    level: float
    feature: str
    arm: object  # 1/0 for a binary treatment, else the level
    n_boot: int
    index: list
    target: str = "the ridge-regularised kernel-smoothed target (no bias correction)"
    mass: np.ndarray | None = None
    order: int = 1
    df: np.ndarray | None = None
    estimate_simultaneous: np.ndarray | None = None
    v_factor: float = 1.0

    def on_the_curve(self) -> dict:
        """The estimate and the bands mapped the way the reported curve is made from the raw estimate.

        The density curve is the raw estimate clipped at zero and rescaled to
        integrate to one (:meth:`ccme.Embedding.density`), the CDF curve the
        unit-mass estimate clipped to [0, 1] and made non-decreasing
        (:func:`ccme.embedding.normalized_cdf`).  Both maps are monotone in the
        value at each y, so a band that holds the unit-mass estimate holds the
        curve after the same map: the band is drawn around the curve it
        belongs to.

        Returns
        -------
        dict
            ``"estimate"``, ``"lower"``, ``"upper"``, ``"estimate_simultaneous"``,
            ``"lower_simultaneous"``, ``"upper_simultaneous"``: arrays (n_v, G)
            on the curve's scale.

        Raises
        ------
        ParameterError
            For density bands made without the estimate's mass.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> bands = res.bands(0.9, newdata=ccme.datasets.PAPER_PROFILES, n_boot=29)
        >>> sorted(bands.on_the_curve())
        ['estimate', 'estimate_simultaneous', 'lower', 'lower_simultaneous', 'upper', 'upper_simultaneous']
        """
        names = ("estimate", "lower", "upper", "lower_simultaneous", "upper_simultaneous")
        values = {name: getattr(self, name) for name in names}
        values["estimate_simultaneous"] = self.centre_simultaneous
        if self.feature == "cdf":
            return {name: normalized_cdf(v, 1.0) for name, v in values.items()}
        if self.mass is None:
            raise ParameterError("these bands do not hold the estimate's mass: they cannot be mapped to the curve")
        raw = np.maximum(values["estimate"] * self.mass[:, None], 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = self.mass[:, None] / np.trapezoid(raw, self.y, axis=1)[:, None]
            return {name: np.maximum(v * scale, 0.0) for name, v in values.items()}

    @property
    def centre_simultaneous(self) -> np.ndarray:
        """The undersmoothed refit's estimate :attr:`estimate_simultaneous`, or :attr:`estimate` without one."""
        return self.estimate if self.estimate_simultaneous is None else self.estimate_simultaneous

    def __repr__(self) -> str:
        return (f"<ccme.Bands: {self.level:.0%} {self.feature} bands, arm {self.arm}, {len(self.index)} V-point(s) "
                f"x {len(self.y)} y-points, {self.n_boot} bootstrap draws; covers {self.target}>")

    def to_frame(self) -> pd.DataFrame:
        """The bands as a long table, one row per (profile, y).

        Returns
        -------
        DataFrame
            Columns ``profile``, ``y``, ``estimate``, ``std_error``, ``df``,
            ``conf_low``/``conf_high`` (pointwise), ``estimate_simultaneous``
            and ``conf_low_simultaneous``/``conf_high_simultaneous``; n_v × G rows.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> b = res.bands(0.9, newdata=ccme.datasets.PAPER_PROFILES, arm=1, y=[0.0, 5.0, 10.0], n_boot=99)
        >>> b.to_frame().shape
        (6, 10)
        """
        n, G = self.estimate.shape
        df = np.full(self.estimate.shape, np.inf) if self.df is None else self.df
        return pd.DataFrame({
            "profile": np.repeat(self.index, G), "y": np.tile(self.y, n), "estimate": self.estimate.ravel(),
            "std_error": self.se.ravel(), "df": df.ravel(), "conf_low": self.lower.ravel(), "conf_high": self.upper.ravel(),
            "estimate_simultaneous": self.centre_simultaneous.ravel(),
            "conf_low_simultaneous": self.lower_simultaneous.ravel(),
            "conf_high_simultaneous": self.upper_simultaneous.ravel(),
        })


def unit_contributions(terms: list, e: int, n: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """u_i(y) = Σ_terms β_i(v_e) R_i(y): each unit's whole share of the bootstrap's Δ*(v_e, y) = Σ_i g_i u_i(y).

    A unit can enter several terms (the second stage of its fold, the first
    stage of another) with one multiplier, so its contributions add before
    they are squared.  Returns (stop − start, n_features) for the units
    start ≤ i < stop (default all n); units in no term have zeros.
    """
    stop = n if stop is None else stop
    U = None
    for term in terms:
        for units, share in term.shares(e, start, stop):
            if U is None:
                U = np.zeros((stop - start, share.shape[1]))
            U[units] += share  # units are distinct within a share
    return U


def satterthwaite_df(variance: np.ndarray, fourth: np.ndarray) -> np.ndarray:
    """ν = variance² / Σ_i u_i⁴: the Welch–Satterthwaite degrees of freedom of V̂ = Σ_i u_i² (+ a fixed part).

    Each unit's squared contribution is taken as one degree of freedom, so ν
    is the effective number of units behind the variance estimate (Kish's
    effective n of the weights u_i²); a fixed, exactly known part of
    ``variance`` (the floor of the bands) raises ν.  ``fourth`` = Σ_i u_i⁴;
    where it is 0 (no unit contributes) ν is infinite.  Satterthwaite (1946);
    for robust standard errors, Bell & McCaffrey (2002) and Imbens & Kolesár
    (2016, REStat), who also use t quantiles with such ν.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # ν = ∞ is meant: normal quantiles
        return np.where(fourth > 0, variance**2 / np.where(fourth > 0, fourth, 1.0), np.inf)


@serial_blas
def bands(res, V: np.ndarray, index, y: np.ndarray, *, arm: int, feature: str, level: float, n_boot: int,
          seed, target: str = "smoothed", extra: tuple = ()) -> Bands:
    """Pointwise and simultaneous bands (see :meth:`ccme.CCMEResult.bands`).

    The bias-reduced bands (``target="smoothed"``) also correct the
    studentisation for the few units a V-point's estimate rests on: the
    multiplier bootstrap's variance at (v, y) is exactly Σ_i u_i(y)²
    (:func:`unit_contributions`), a sum dominated by a handful of units where
    the data thin out (the outcome's tails, a sparse region of V, large
    inverse-propensity weights), and so itself noisy.  Its scale is floored
    (in quadrature) at :data:`SD_FLOOR` × the V-point's largest standard
    error, and the critical values are Student-t quantiles with the
    Satterthwaite degrees of freedom of that variance
    (:func:`satterthwaite_df`) instead of normal ones; the simultaneous band,
    studentised by the variance averaged over a window of
    :data:`VARIANCE_WINDOW` read-out bandwidths (:func:`variance_window`),
    keeps the sup-t bootstrap's joint level and maps it to each point's t.

    A band that holds over the whole grid must hold where the smoothing bias
    is largest (at the modes, where the law moves with v), so the
    bias-reduced simultaneous band is the fit's sup-t band joined with a
    band around the second stage refitted with the V bandwidths
    undersmoothed by :func:`simultaneous_v_factor` and λ₁ by
    :data:`SIMULTANEOUS_PENALTY`
    (:meth:`ccme.estimators.base.LinearSecondStage.undersmoothed`), with the
    same iterated Tikhonov order and leave-one-out residuals, whose critical
    value, and the fit's band's (:data:`UNION_FIT_BAND`), is the one that
    gives the two bands as a union the bootstrap's joint level
    (:func:`_union_critical_value`); where the fit's smoothing bias makes
    its band miss, the refit's band, less biased, widens it.  The union
    holds the pointwise band.  The pointwise bands keep the fit's bandwidths
    and penalties.  For the small
    eigenvalues σ of K_V the filter 1 − (s/(σ + s))^m of order m = 20 at
    s × 2/15 is that of order 150 at s (≈ 150 σ/s), the setting the
    diagnosis measured, at a seventh of the solves.  A second stage without
    a V kernel (Deep Feature) keeps one construction.
    """
    if res.embeddings[arm].location is not None:
        return _located_bands(res, V, index, y, arm=arm, feature=feature, level=level, n_boot=n_boot, seed=seed,
                              target=target)
    warn_caveat(res)
    _check_boot(n_boot, level)
    if feature not in ("density", "cdf"):
        raise ParameterError(f"`feature` must be 'density' or 'cdf'; got {feature!r}")
    how = _bias_reduction(target, res)
    small_sample = bool(how)
    kernel = res.embeddings[arm].readout_kernel(feature)  # the kernel the arm's density or CDF is read out with
    features = {}  # the unit features do not depend on the second stage: the refit reuses them
    cache = {}     # nor does the first stage (:class:`ccme.estimators.ridge.FirstStagePieces`)
    pointwise = {**how, "leverage": LEVERAGE_POINTWISE} if small_sample else how
    shared = {"features": features, "cache": cache}
    estimate, mass, lin, lin_mass = _unit_mass(res, arm, V, y, feature, kernel, {**pointwise, **shared})
    extra = list(extra) if small_sample else []  # noise terms from outside the fit (a located fit's mean model)
    lin = lin + extra
    g = _multipliers(res.n, n_boot, seed)
    window = variance_window(y, kernel) if small_sample else None
    narrowed = _undersmoothed_parts(res, arm, how["restore"], cache) if small_sample else None
    if narrowed is not None:
        centre_s, mass_s, lin_s, lin_mass_s = _unit_mass(res, arm, V, y, feature, kernel,
                                                         {**how, **shared, "parts": narrowed,
                                                          "leverage": LEVERAGE_CORRECTION})
        lin_s = lin_s + extra
    shape = estimate.shape
    lower, upper, lo_s, up_s, se, df = (np.empty(shape) for _ in range(6))
    for e in range(shape[0]):
        # Delta method for the unit-mass estimate raw / mass: (δraw − estimate δmass) / mass.
        U = _unit_mass_contributions(lin, lin_mass, estimate[e], mass[e], e, res.n)
        fit = _critical_values(U, g, level, small_sample, window)
        lower[e], upper[e] = estimate[e] - fit.half_pointwise, estimate[e] + fit.half_pointwise
        se[e], df[e] = fit.sd, fit.df
        c_fit, refit_band = fit.sup_quantile, None
        if narrowed is not None:  # widened by the undersmoothed refit's band at the pair's joint level
            U_s = _unit_mass_contributions(lin_s, lin_mass_s, centre_s[e], mass_s[e], e, res.n)
            refit = _critical_values(U_s, g, level, small_sample, window)
            c_union = _union_critical_value(fit.T, refit.T, level)
            refit_band = _on_each_point(c_union, refit.df_joint, small_sample) * refit.scale
            if UNION_FIT_BAND == "joint":
                c_fit = c_union
        half = _on_each_point(c_fit, fit.df_joint, small_sample) * fit.scale
        lo_s[e], up_s[e] = estimate[e] - half, estimate[e] + half
        if refit_band is not None:
            lo_s[e] = np.minimum(lo_s[e], centre_s[e] - refit_band)
            up_s[e] = np.maximum(up_s[e], centre_s[e] + refit_band)
    # A band for the whole curve holds each point's band: where one unit's share makes a point's own variance
    # spike above the window's average, the pointwise band is the wider one there.
    np.minimum(lo_s, lower, out=lo_s)
    np.maximum(up_s, upper, out=up_s)
    return Bands(y=y[:, 0], estimate=estimate, lower=lower, upper=upper, lower_simultaneous=lo_s,
                 upper_simultaneous=up_s, se=se, level=float(level), feature=feature,
                 arm=int(arm) if res.design.treatment.binary else res.design.treatment.label(arm),
                 n_boot=int(n_boot), index=list(index),
                 target=_target_text(target, narrowed is not None, restore_note(res, how.get("restore"))), mass=mass,
                 order=how.get("order", 1), df=df,
                 estimate_simultaneous=None if narrowed is None else centre_s,
                 v_factor=1.0 if narrowed is None else simultaneous_v_factor(res.n))


def residual_result(res):
    """The fit with every arm's embedding of the residual R = Y − m̂_a(V) (:meth:`ccme.Embedding.residual`)."""
    return replace(res, embeddings={arm: emb.residual() for arm, emb in res.embeddings.items()})


def _located_bands(res, V, index, y, *, arm, feature, level, n_boot, seed, target) -> Bands:
    """:func:`bands` of a fit with a location stage: each V-point's bands of the residual law at y − m̂_a(v).

    The estimate at (v, y) is the residual embedding's at (v, y − m̂_a(v))
    (:mod:`ccme.location`), and :func:`bands` takes each V-point's critical
    values on its own, so the bands are the residual fit's, one V-point at a
    time, with the same multipliers (the same ``seed``).  The bias-aware
    bands (``target="smoothed"``) also carry the mean model's coefficient
    error, as the tests and effect intervals do (:class:`_Located`): one
    more noise term per V-point, each unit's Ψ_i times the feature's
    derivative along the coefficients (:func:`_location_derivative`).
    """
    residual = residual_result(res)
    shift = res.embeddings[arm].shift(v=V)
    model = res.embeddings[arm].location
    # The plain bands hold the first stage fixed, and so the mean model; so does a model saved without its units.
    moved = target == "smoothed" and model.units is not None
    extra = [()] * len(V)
    if moved:
        influence = _mean_model_influence(res, model)
        derivative = _location_derivative(residual.embeddings[arm], V, res.design.V, y, feature,
                                          res.embeddings[arm].readout_kernel(feature), shift)
        extra = [(_Linear(units=model.units, beta=np.ones((len(model.units), 1)), P=None, R=influence @ D),)
                 for D in derivative]
    per_point = [bands(residual, V[e : e + 1], [index[e]], y - shift[e], arm=arm, feature=feature, level=level,
                       n_boot=n_boot, seed=seed, target=target, extra=extra[e]) for e in range(len(V))]
    first = per_point[0]

    def stacked(name):
        values = [getattr(b, name) for b in per_point]
        return None if values[0] is None else np.concatenate(values, axis=0)

    held = "the mean model's error included" if moved else "the mean model held fixed"
    return replace(first, y=y[:, 0], index=list(index), target=first.target + "; located: the residual's bands at "
                   f"y - m(v), {held}",
                   **{name: stacked(name) for name in ("estimate", "lower", "upper", "lower_simultaneous",
                                                        "upper_simultaneous", "se", "mass", "df",
                                                        "estimate_simultaneous")})


def _target_text(target: str, refitted: bool, restored: str = "") -> str:
    """What a band covers (:data:`BAND_TARGETS`), saying whether an undersmoothed refit widened the simultaneous one.

    A second stage without a V kernel to narrow (Deep Feature's learned
    features) keeps the fit's own simultaneous band, and its text says so;
    ``restored`` is :func:`restore_note`'s text.
    """
    text = BAND_TARGETS[target]
    if target != "smoothed":
        return text
    return text[:-1] + (REFIT_NOTE if refitted else "; the simultaneous band the fit's own: no undersmoothed refit") \
        + restored + ")"


def _unit_mass_contributions(lin, lin_mass, estimate, mass, e: int, n: int) -> np.ndarray:
    """Each unit's share of the unit-mass estimate raw/mass at V-point e: (u_raw − estimate · u_mass) / mass."""
    return (unit_contributions(lin, e, n) - estimate * unit_contributions(lin_mass, e, n)[:, :1]) / mass


class _Critical(NamedTuple):
    """What :func:`_critical_values` gives a band: the pointwise half-width and the simultaneous band's parts.

    ``sd`` and ``df`` are the pointwise standard error and its Satterthwaite
    ν (reported by :class:`Bands`); ``T`` holds the studentised draws
    |Δ*(y)| / scale(y), (n_boot, G), 0 where the scale vanishes, and
    ``sup_quantile`` the level-quantile of their sup over the grid, a joint
    critical value on the normal scale that :func:`_on_each_point` maps
    through each point's t with ``df_joint``, the ν of ``scale``
    (:func:`_union_critical_value` combines two bands' draws instead).
    """

    sd: np.ndarray
    df: np.ndarray
    half_pointwise: np.ndarray
    scale: np.ndarray
    df_joint: np.ndarray
    sup_quantile: float
    T: np.ndarray


def _critical_values(U: np.ndarray, g: np.ndarray, level: float, small_sample: bool,
                     window: np.ndarray | None = None) -> _Critical:
    """The pointwise and simultaneous critical values of the draws Δ* = gᵀU, U (n, G): see :class:`_Critical`.

    ``window`` (G, G), rows summing to one (:func:`variance_window`): the
    simultaneous band studentises by the variance averaged over neighbouring
    outcome values, each unit's squared contribution averaged before the
    sum, Σ_i Σ_k W_jk u_i(y_k)², so that its ν counts the units behind the
    average.  Why: where the data happen to hold few units near y, the
    estimate at y is low and so is Σ_i u_i(y)², by chance and together
    (positively skewed kernel features); the sup over the grid finds such a
    dip, and the band's studentisation by it fails there.  On categorical_v
    at n = 2000 95% of the misses of the band studentised pointwise were
    estimates below the truth, at points whose standard error was half its
    root mean square over data sets (README, "Simultaneous bands").
    """
    Z = g.T @ U  # (n_boot, G): the draws Δ*(v_e, y)
    if small_sample:
        U2 = U * U
        variance = U2.sum(axis=0)
        sd = np.sqrt(variance)
        floor2 = (SD_FLOOR * float(sd.max())) ** 2
        nu = satterthwaite_df(variance + floor2, (U2 * U2).sum(axis=0))
        c_point = np.sqrt(variance + floor2) * stats.t.ppf(0.5 + level / 2, nu)
        if window is not None:
            U2 = U2 @ window.T  # each unit's squared contribution averaged over the window
        scale2 = U2.sum(axis=0) + floor2
        scale = np.sqrt(scale2)
        nu_joint = satterthwaite_df(scale2, (U2 * U2).sum(axis=0))
    else:
        # The plain bands: the level-quantile of |Δ*(y)| at each y (symmetric percentile band).
        sd = Z.std(axis=0)
        scale, nu = sd, np.full(sd.shape, np.inf)
        nu_joint = nu
        c_point = np.quantile(np.abs(Z), level, axis=0)
    # Simultaneous over the grid: the level-quantile of sup_y |Δ*(y)| / scale(y) (sup-t).  The floor
    # keeps the far tails, where sd → 0 and a bias of negligible size would dominate the studentised
    # statistic, from deciding the band; without it only the points where the estimate varies count.
    live = scale > 1e-12 * max(float(scale.max()), 1e-300)
    T = np.zeros(Z.shape)
    T[:, live] = np.abs(Z[:, live]) / scale[live]
    return _Critical(sd, nu, c_point, scale, nu_joint, float(np.quantile(T.max(axis=1), level)), T)


def variance_window(points: np.ndarray, kernel: Kernel) -> np.ndarray | None:
    """W (G, G): Gaussian weights over the outcome values at :data:`VARIANCE_WINDOW` read-out bandwidths, rows sum to 1.

    The simultaneous bands average their variance with it
    (:func:`_critical_values`).  The read-out kernel's bandwidth is the
    scale on which a unit's contribution u_i(y) ∝ k(Y_i, y) changes, so a
    window of one bandwidth averages the variance over the few independent
    local estimates around y; its bias, O(h²) times the curvature of the
    variance, is of the order of the smoothed target's own.  On a grid
    coarser than the window, W is close to the identity and each point keeps
    its own variance.  None when the window is 0.
    """
    if VARIANCE_WINDOW <= 0:
        return None
    W = gram(points, points, "gaussian", VARIANCE_WINDOW * kernel.bandwidth_array)  # inf: a column ignored
    return W / W.sum(axis=1, keepdims=True)


def _on_each_point(c: float, nu: np.ndarray, small_sample: bool):
    """A joint critical value c on the normal scale as each point's t quantile: P(|t_ν| ≤ c') = P(|N| ≤ c)."""
    return stats.t.ppf(stats.norm.cdf(c), nu) if small_sample else c


def _union_critical_value(T: np.ndarray, T_s: np.ndarray, level: float) -> float:
    """c with P*(for every y, |Δ*(y)| ≤ c·scale(y) or |Δ*_s(y)| ≤ c·scale_s(y)) = level: the union's joint level.

    ``T``, ``T_s``: the two bands' studentised draws under the same
    multipliers (:func:`_critical_values`).  A draw stays in the union at y
    if either band holds it there, so the statistic is
    sup_y min(T(y), T_s(y)); two bands with this common critical value have
    the bootstrap's joint level as a union, where two bands each at the
    level would cover more often than the level.  :func:`bands` gives both
    bands this value (:data:`UNION_FIT_BAND` = "whole": the refit's only).
    """
    return float(np.quantile(np.minimum(T, T_s).max(axis=1), level))


# ---------------------------------------------------------------------------
# the test of no distributional effect
# ---------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class EffectTest:
    """Result of :meth:`ccme.CCMEResult.test_effect`.

    Attributes
    ----------
    statistic : float
        Global statistic: the mean over the V-points of T(v).
    p_value : float
        Global p-value, (1 + #{T* ≥ T}) / (1 + n_boot).
    table : DataFrame
        Per V-point: ``statistic`` T(v) and ``p_value``.
    statistic_name : str
        "squared MMD": T(v) = ‖μ̂₁(v) − μ̂₀(v)‖²; "squared mean difference":
        T(v) = ‖mean₁(v) − mean₀(v)‖².
    n_boot : int
    """

    statistic: float
    p_value: float
    table: pd.DataFrame
    statistic_name: str
    n_boot: int
    hypothesis: str = "p(Y1 | V=v) = p(Y0 | V=v)"

    def __repr__(self) -> str:
        return (f"<ccme.EffectTest: H0 {self.hypothesis}, {self.statistic_name}, "
                f"{len(self.table)} V-point(s): statistic {self.statistic:.4g}, p-value {self.p_value:.4g}>")

    def __str__(self) -> str:
        return (
            f"Test of H0: {self.hypothesis} ({self.statistic_name}, multiplier bootstrap, "
            f"{self.n_boot} draws)\n"
            f"global (mean over {len(self.table)} V-points): statistic {self.statistic:.4g}, "
            f"p-value {self.p_value:.4g}\n" + self.table.to_string(float_format=lambda x: f"{x:.4g}")
        )

    def to_frame(self) -> pd.DataFrame:
        """The test as a long table: one row per V-point and a last row ``profile="global"``.

        Returns
        -------
        DataFrame
            Columns ``profile``, ``statistic`` and ``p_value``.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> test = res.test_effect(newdata=ccme.datasets.PAPER_PROFILES, n_boot=99)
        >>> test.to_frame()["profile"].tolist()
        ['v1', 'v2', 'global']
        """
        rows = self.table.reset_index()
        rows["profile"] = rows["profile"].astype(object)
        glob = pd.DataFrame({"profile": ["global"], "statistic": [self.statistic], "p_value": [self.p_value]})
        return pd.concat([rows, glob], ignore_index=True)


_STATISTIC_NAMES = {"mmd": "squared MMD", "mean": "squared mean difference"}


def _mmd_grid(res):
    """Quadrature for ‖f‖² in the RKHS of the normalised Gaussian kernel with bandwidth σ.

    k_σ(y, y') = N(y − y'; 0, σ²) = ∫ N(t − y; 0, σ²/2) N(t − y'; 0, σ²/2) dt, so for
    f = Σ w_k φ(y_k), ‖f‖² = ∫ (Σ_k w_k N(t − y_k; 0, σ²/2))² dt: the L² norm of a
    half-variance smoothing, computed by the trapezoid rule on a grid of step s/2,
    s = σ/√2, over the data ± the margin of :mod:`ccme.grids` (6σ, 8.5 s).  For
    Gaussians the trapezoid error at that step is below exp(−2π²·4) ≈ 1e-34
    relative; the tails beyond the margin hold < 1e-16.
    """
    kernel = res.kernels["y"]  # the RKHS of the MMD (see ccme.effects)
    if kernel.name != "gaussian":
        raise ParameterError(
            f"statistic='mmd' is calibrated for the Gaussian outcome kernel; y_kernel={kernel.name!r}: "
            "use statistic='mean'"
        )
    s = kernel.bandwidth_array[0] / np.sqrt(2.0)
    t = outcome_grid(res.design.Y, kernel, step=s / 2)
    return t, np.full(len(t), s / 2), s


def _roles(arms) -> dict:
    """{1: a, 0: b}: the compared arm a in the role of "treated" (1), the reference b in that of "control" (0).

    The contrasts below are written for the roles 1 − 0; ``arms`` (the codes
    (a, b) of :meth:`ccme.formula.Treatment.contrast`) says which arms play them.
    """
    a, b = arms
    return {1: int(a), 0: int(b)}


@serial_blas
def test_effect(res, V: np.ndarray, index, *, statistic: str, n_boot: int, seed, arms=(1, 0)) -> EffectTest:
    """The multiplier-bootstrap test of no distributional effect (see :meth:`ccme.CCMEResult.test_effect`).

    ``arms``: the codes (a, b) of the two arms compared (:func:`_roles`).
    """
    warn_caveat(res)
    warn_small_arms(res, arms, "effect", stacklevel=4)  # this function, serial_blas's wrapper, the method, the caller
    role = _roles(arms)
    _check_boot(n_boot)
    if statistic not in STATISTICS:
        raise ParameterError(f"`statistic` must be one of {list(STATISTICS)}; got {statistic!r}")
    g = _multipliers(res.n, n_boot, seed)
    how = _equal_laws({**_bias_reduction(EFFECT_TEST_TARGET, res), "leverage": EFFECT_TEST_LEVERAGE, "per_term": {}})
    if statistic == "mmd":
        if res.design.Y.shape[1] != 1:
            raise DataError(
                "statistic='mmd' is calibrated for a one-dimensional outcome (the bootstrap works on a quadrature "
                "grid); use statistic='mean' for a multivariate outcome"
            )
        t, w, s = _mmd_grid(res)
        lin = {arm: _linear(res, role[arm], V, t[:, None], "density", Kernel("gaussian", (s,)), **how)
               for arm in (1, 0)}
        diff = sum(p.estimate() for p in lin[1]) - sum(p.estimate() for p in lin[0])
        observed = (diff**2) @ w
        boot = np.empty((len(V), n_boot))
        for e in range(len(V)):
            Z = sum(p.perturb(g, e) for p in lin[1]) - sum(p.perturb(g, e) for p in lin[0])
            boot[e] = (Z**2) @ w
    else:
        d = res.design.Y.shape[1]
        lin = {arm: _linear(res, role[arm], V, np.zeros((0, d)), "moments", Kernel("gaussian", (1.0,) * d), **how)
               for arm in (1, 0)}
        observed = np.zeros(len(V))
        boot = np.zeros((len(V), n_boot))
        mean_parts = {}
        for arm in (1, 0):
            raw = sum(p.estimate() for p in lin[arm])  # (n_v, 1 + 2d): mass, first, second moments
            mass, mean = raw[:, 0], raw[:, 1 : 1 + d] / raw[:, :1]
            mean_parts[arm] = (mass, mean)
        observed = np.sum((mean_parts[1][1] - mean_parts[0][1]) ** 2, axis=1)
        for e in range(len(V)):
            delta = 0.0
            for arm, sign in ((1, 1.0), (0, -1.0)):
                mass, mean = mean_parts[arm]
                Z = sum(p.perturb(g, e) for p in lin[arm])  # (n_boot, 1 + 2d)
                # Delta method for the ratio mean = m₁ / mass.
                delta = delta + sign * (Z[:, 1 : 1 + d] - mean[e] * Z[:, :1]) / mass[e]
            boot[e] = np.sum(delta**2, axis=1)
    pvals = (1.0 + np.sum(boot >= observed[:, None], axis=1)) / (1.0 + n_boot)
    global_stat = float(observed.mean())
    global_p = float((1.0 + np.sum(boot.mean(axis=0) >= global_stat)) / (1.0 + n_boot))
    table = pd.DataFrame({"statistic": observed, "p_value": pvals}, index=pd.Index(list(index), name="profile"))
    return EffectTest(statistic=global_stat, p_value=global_p, table=table, statistic_name=_STATISTIC_NAMES[statistic],
                      n_boot=int(n_boot))


# ---------------------------------------------------------------------------
# quantile treatment effects
# ---------------------------------------------------------------------------
@serial_blas
def qte_bands(res, V: np.ndarray, q: np.ndarray, grid: np.ndarray, *, level: float, n_boot: int, seed,
              arms=(1, 0)):
    """Quantile treatment effects Q₁(q | v) − Q₀(q | v) with pointwise bootstrap bands.

    Each draw perturbs both arms' raw CDFs and masses by the multiplier
    bootstrap (the same multipliers for a unit in both arms), normalises them
    as :meth:`ccme.Embedding.cdf` does (divided by the mass,
    clipped, running maximum) and inverts them on ``grid``; the band is QTE ± the ``level``
    quantile of |QTE* − QTE| (a symmetric basic bootstrap band).

    Returns
    -------
    qte, lower, upper : ndarrays (n_v, len(q))
    """
    warn_caveat(res)
    _check_boot(n_boot, level)
    g = _multipliers(res.n, n_boot, seed)
    role = _roles(arms)
    lin, lin_mass, raw, mass = {}, {}, {}, {}
    for arm in (1, 0):
        kernel = res.embeddings[role[arm]].cdf_kernel  # each arm's CDF as read out
        lin[arm] = _linear(res, role[arm], V, grid[:, None], "cdf", kernel)
        lin_mass[arm] = _mass_linear(res, role[arm], V)
        raw[arm] = sum(p.estimate() for p in lin[arm])
        mass[arm] = sum(p.estimate() for p in lin_mass[arm])[:, :1]
    qte = invert_cdf(normalized_cdf(raw[1], mass[1]), grid, q) - invert_cdf(normalized_cdf(raw[0], mass[0]), grid, q)
    half = np.empty_like(qte)
    for e in range(len(V)):
        star = []
        for arm in (1, 0):
            raw_star = raw[arm][e] + sum(p.perturb(g, e) for p in lin[arm])
            mass_star = mass[arm][e] + sum(p.perturb(g, e) for p in lin_mass[arm])[:, :1]
            star.append(invert_cdf(normalized_cdf(raw_star, mass_star), grid, q))
        half[e] = np.quantile(np.abs(star[0] - star[1] - qte[e]), level, axis=0)
    return qte, qte - half, qte + half


# ---------------------------------------------------------------------------
# intervals on the effects
# ---------------------------------------------------------------------------
#: Points of the grid on which the bootstrap draws of the CDF-based effects (QTEs, Kolmogorov,
#: Wasserstein) are computed: their deviations from the estimate on the same grid set the interval.
EFFECT_GRID = 401
#: Whether the effect intervals (``target="smoothed"``) take the bands' small-sample critical values: the
#: bootstrap's half-width times t_ν(p) / z(p), p = (1 + level)/2, with ν the Satterthwaite degrees of freedom
#: (:func:`satterthwaite_df`) of the effect's bootstrap variance Σ_i u_i², u_i each unit's influence on the effect
#: (:func:`_effect_influence`).  Where inverse-propensity weights are large or the law at v rests on few units,
#: ν is small and the normal quantile too short: at n = 2000 its median over data sets is 7–50 at the
#: weak_overlap case's V-points and 7–10 at the paper simulation's third (10th percentiles down to 1–5), 130–210
#: where the data are dense (``benchmarks/inference/effect_df.py``, ``results/effect_df_*.txt``).  False: the
#: bootstrap's quantile as it is.  Where no unit moves an
#: effect to first order (a normalised CDF flat at 0 or 1), ν is infinite and the quantile the bootstrap's.
EFFECT_SMALL_SAMPLE = True
#: The effects that take them: the smooth functionals, whose draws are to first order Σ_i g_i u_i.  The distances
#: (MMD, Kolmogorov, Wasserstein) are norms, not linear near their floor of 0 where the delta method fails (their
#: intervals' coverage, README), and keep the bootstrap's quantile.
SMALL_SAMPLE_EFFECTS = ("mean_diff", "qte", "cdf_diff", "es_lower", "es_upper")
#: Units per block of the effects' influence computation (memory O(block × EFFECT_GRID) per arm).
_INFLUENCE_BLOCK = 4096
#: Step of the effects' numerical derivative along a unit's contribution (:func:`_effect_influence`).
_INFLUENCE_STEP = 1e-4


@dataclass(frozen=True)
class Interval:
    """Bootstrap standard errors, degrees of freedom and a symmetric ``level`` interval per V-point ((n_v,) arrays).

    ``df`` is the Satterthwaite ν of the critical value (inf: the bootstrap's own quantile, normal in effect).
    """

    std_error: np.ndarray
    conf_low: np.ndarray
    conf_high: np.ndarray
    df: np.ndarray


#: The distances whose intervals are the basic bootstrap's reverse percentiles, [2T − q_hi(T*), 2T − q_lo(T*)]
#: (:func:`_interval` with ``reverse``), instead of the estimate ± the level quantile of |T* − T|: the
#: sup- and RKHS-norms of a noisy difference are biased upwards, and the draws' own bias T̄* − T moves the reverse
#: interval down by about as much.  Measured (``benchmarks/calibration.py effects``, README "The distances'
#: intervals"): 90% coverage of the MMD 0.62-0.78 → 0.79-0.83 and of the Kolmogorov distance 0.47-0.77 → 0.56-0.83
#: at n = 60-1000 (treated law 1.5 times as wide); held out, with a law 2.5 times as wide, MMD 0.84 / 0.88 → 0.86 /
#: 0.87 and Kolmogorov 0.80 / 0.83 → 0.83 / 0.86 at n = 250 / 1000, and at the null (every distance 0, n = 250) MMD
#: 0.42 → 0.64, Kolmogorov 0.54 → 0.71.  The Wasserstein distance keeps the symmetric interval: reverse, it
#: covered 0.81 / 0.79 instead of 0.86 / 0.89 at n = 500 / 1000, 0.80 instead of 0.95 with the wider law at 250.
REVERSE_INTERVAL_EFFECTS = ("mmd", "kolmogorov")
#: Of those, the distances whose reverse percentiles are taken on the squared scale and mapped back by √:
#: [√(2T² − q_hi(T*²)), √(2T² − q_lo(T*²))] (floored at 0).  The squared MMD ‖Δ̂‖² = ‖Δ + δ‖² is biased by the
#: constant E‖δ‖² = tr Σ, and 2T² − T̄*² = ‖Δ̂‖² − tr Σ̂ is its unbiased estimate, so on this scale the reverse
#: percentiles remove the bias exactly, where on T's scale the bias of the square root is not a constant and the
#: correction fell short (the draws 2⟨Δ̂, δ*⟩ + ‖δ*‖² vary more than 2⟨Δ, δ⟩ + ‖δ‖² by the estimate's own noise:
#: the interval errs wide, most near 0).  Measured on the same fits and draws
#: (``benchmarks/inference/mmd_squared_interval.py``; ``benchmarks/results/distance_intervals.jsonl``), 90%
#: coverage of the true MMD, reverse → squared, treated law 1.5 times as wide, ``tune="none"``: n = 60 0.79 →
#: 0.995, 250 0.83 → 0.975, 1000 0.83 → 0.95 (200 data sets each; mean width 0.85 → 0.83, 0.26 → 0.28, 0.13 →
#: 0.17); held out, the null (n = 250) 0.64 → 1.0 and a law 2.5 times as wide (n = 250) 0.85 → 0.93 (width +26%);
#: with ccme's defaults (n = 400, 100 data sets) 0.81 → 0.95, width 0.15 → 0.18, (n = 1000, 60) 0.84 → 0.93,
#: width 0.099 → 0.142.
SQUARED_INTERVAL_EFFECTS = ("mmd",)
DISTANCES = ("mmd", "kolmogorov", "wasserstein")


def _interval(estimate, estimate_star_grid, star, level, floor=None, df=None, reverse=False,
              squared=False) -> Interval:
    """The basic bootstrap interval per V-point: symmetric, estimate ± the ``level`` quantile of |T* − T|, or reverse.

    ``estimate_star_grid`` is the statistic computed the way the draws ``star``
    (shape (n_v, n_boot)) are, so the deviations do not mix two quadratures.
    With ``df`` (ν per V-point) the half-width is scaled by t_ν(p) / z(p),
    p = (1 + level)/2: the small-sample critical value of :data:`EFFECT_SMALL_SAMPLE`.
    ``reverse``: [T − q_p(T* − T), T − q_{1−p}(T* − T)], the reverse
    percentiles (:data:`REVERSE_INTERVAL_EFFECTS`): a norm of a noisy
    estimate is biased upwards, and the draws T* are so biased around T as T
    is around the truth, so the interval moves down by about T̄* − T where
    the symmetric one stays centred.  ``squared`` (with ``reverse``): the
    reverse percentiles of T² (the squared MMD, whose bias is the constant
    tr Σ) mapped back by √, floored at 0 (:data:`SQUARED_INTERVAL_EFFECTS`).
    ``floor`` bounds both ends from below.
    """
    if reverse and squared:
        square = _interval(estimate**2, estimate_star_grid**2, star**2, level, floor=0.0, reverse=True)
        low, high = np.sqrt(square.conf_low), np.sqrt(square.conf_high)
        return Interval(std_error=star.std(axis=1), conf_low=low, conf_high=high, df=np.full(len(estimate), np.inf))
    dev = star - estimate_star_grid[:, None]
    if reverse:
        hi, lo = np.quantile(dev, [0.5 + level / 2, 0.5 - level / 2], axis=1)
        low, high = estimate - hi, estimate - lo
    else:
        half = np.quantile(np.abs(dev), level, axis=1)
        if df is not None:
            p = 0.5 + level / 2
            half = half * stats.t.ppf(p, df) / stats.norm.ppf(p)
        low, high = estimate - half, estimate + half
    if floor is not None:
        low, high = np.maximum(low, floor), np.maximum(high, floor)
    return Interval(std_error=star.std(axis=1), conf_low=low, conf_high=high,
                    df=np.full(len(estimate), np.inf) if df is None else np.asarray(df, dtype=np.float64))


def _effect_influence(summaries, centre: dict, units_moved, e: int, n: int) -> dict:
    """Σ_i u_i² and Σ_i u_i⁴ of each effect at V-point e, u_i unit i's influence on it.

    ``units_moved(start, stop)``: the inputs of ``summaries`` with a leading
    axis of the units start ≤ i < stop, each raw estimate moved by ε times the
    unit's whole contribution r_i to it (:func:`unit_contributions`, both arms
    at once, as one multiplier moves both), ε = :data:`_INFLUENCE_STEP`.  The
    influence is the derivative of the same map S the draws go through along
    r_i, u_i = (S(raw + εr_i) − S(raw))/ε: the delta method, the unit's share
    of the draws Δ* ≈ Σ_i g_i u_i, for the ratios and inversions the effects
    are.  (A whole step, ε = 1, would add the ratios' curvature at the units
    that weigh most, those Σu⁴ rests on.  A Jacobian of S by coordinate
    steps, cheaper at large n, is not used: a step in one grid value of a CDF
    breaks its monotonicity in the tails, where it is flat, and moved ν of the
    upper shortfall by up to 45%.)  Returns term → (Σu², Σu⁴), each (k,).
    """
    sums = {}
    for start in range(0, n, _INFLUENCE_BLOCK):
        for term, value in summaries(*units_moved(start, min(n, start + _INFLUENCE_BLOCK))).items():
            u2 = ((value - centre[term][e]) / _INFLUENCE_STEP) ** 2
            s2, s4 = sums.get(term, (0.0, 0.0))
            sums[term] = (s2 + np.nansum(u2, axis=0), s4 + np.nansum(u2 * u2, axis=0))
    return sums


@serial_blas
def effect_intervals(res, V: np.ndarray, estimates: dict, *, q, y_points, level: float, n_boot: int, seed,
                     alpha=(), target: str = "smoothed", arms=(1, 0)) -> dict:
    """Multiplier-bootstrap intervals for the effects of :func:`ccme.effects.effect_frame`.

    Each draw perturbs both arms' second stages with the same multipliers per
    unit (:func:`_linear`) and recomputes every effect from the perturbed raw
    embeddings exactly as the estimate is computed from the fitted ones:
    means as first moment / mass, CDFs normalised (:func:`ccme.embedding.normalized_cdf`),
    QTEs by inversion, expected shortfalls by :func:`ccme.embedding.tail_means`, the MMD as the RKHS norm of the difference (on the
    quadrature of :func:`_mmd_grid`).  The interval is the estimate ± the
    ``level`` quantile of |T* − T| (symmetric basic bootstrap; the distances
    floored at 0), for the MMD and the Kolmogorov distance the reverse
    percentiles [2T − q_hi(T*), 2T − q_lo(T*)] (:data:`REVERSE_INTERVAL_EFFECTS`;
    the MMD's on the squared scale, :data:`SQUARED_INTERVAL_EFFECTS`),
    the standard error the draws' standard deviation.  With
    ``target="smoothed"`` the draws and the centre are those of the
    bias-reduced second stage (as for the bands); ``"regularised"`` centres
    on the estimate and leaves the ridge bias out.  The CDF-based effects
    (QTEs, CDF differences, shortfalls, Kolmogorov, Wasserstein) are read out
    with each arm's ``cdf_kernel``, whose smoothing bias is negligible next to
    their standard errors (:func:`ccme.tuning.distribution_kernel`).  The MMD
    of a multivariate outcome, or with a non-Gaussian outcome kernel, gets
    NaN (its draws need the one-dimensional Gaussian quadrature).

    Parameters
    ----------
    res : CCMEResult
    V : ndarray (n_v, d_v)
    estimates : dict
        term → the point estimates the table reports ((n_v,) or (n_v, k)).
    q, y_points : ndarray
        Quantile levels of the QTEs and outcome points of the CDF differences (d_y = 1).
    alpha : ndarray
        Tail probabilities of the expected-shortfall differences (d_y = 1).
    level : float
    n_boot : int
    seed : int
    target : {"smoothed", "regularised"}
    arms : pair of int
        The codes (a, b) of the arms compared, a − b (:func:`_roles`).

    Returns
    -------
    dict
        term → list of :class:`Interval`, one per column of the term's estimate.
    """
    warn_caveat(res)
    _check_boot(n_boot, level)
    role = _roles(arms)
    # The calls below share each term's β_m(V) (iterated Tikhonov) and the first stage's pieces.
    how = {**_bias_reduction(target, res), "per_term": {}, "cache": {}}
    d = res.design.Y.shape[1]
    g = _multipliers(res.n, n_boot, seed)
    one_dim = d == 1
    lin_m = {arm: _linear(res, role[arm], V, np.zeros((0, d)), "moments", Kernel("gaussian", (1.0,) * d), **how)
             for arm in (1, 0)}
    raw_m = {arm: sum(p.estimate() for p in lin_m[arm]) for arm in (1, 0)}
    if one_dim:
        grid = res.fine_grid(EFFECT_GRID)
        kernels = {arm: res.embeddings[role[arm]].cdf_kernel for arm in (1, 0)}
        lin_g = {arm: _linear(res, role[arm], V, grid[:, None], "cdf", kernels[arm], **how) for arm in (1, 0)}
        raw_g = {arm: sum(p.estimate() for p in lin_g[arm]) for arm in (1, 0)}
        order = np.argsort(y_points, kind="stable")
        lin_c = {arm: _linear(res, role[arm], V, y_points[order][:, None], "cdf", kernels[arm], **how)
                 for arm in (1, 0)}
        raw_c = {arm: sum(p.estimate() for p in lin_c[arm]) for arm in (1, 0)}
        with_mmd = res.kernels["y"].name == "gaussian"
        if with_mmd:
            t, w, s = _mmd_grid(res)
            lin_t = {arm: _linear(res, role[arm], V, t[:, None], "density", Kernel("gaussian", (s,)), **how)
                     for arm in (1, 0)}
            diff_t = sum(p.estimate() for p in lin_t[1]) - sum(p.estimate() for p in lin_t[0])

    def summaries(raw_mo, raw_grid, raw_points, diff_quad):
        """Every effect from raw arm quantities with a leading axis of draws (or of V-points)."""
        out = {}
        mass = {arm: raw_mo[arm][:, 0] for arm in (1, 0)}
        with np.errstate(invalid="ignore", divide="ignore"):
            means = {arm: raw_mo[arm][:, 1 : 1 + d] / mass[arm][:, None] for arm in (1, 0)}
        out["mean_diff"] = means[1] - means[0]
        if one_dim:
            F = {arm: normalized_cdf(raw_grid[arm], mass[arm][:, None]) for arm in (1, 0)}
            if len(q):
                out["qte"] = invert_cdf(F[1], grid, q) - invert_cdf(F[0], grid, q)
            for tail in ("lower", "upper") if len(alpha) else ():
                out[f"es_{tail}"] = tail_means(F[1], grid, alpha, tail) - tail_means(F[0], grid, alpha, tail)
            gap = np.abs(F[1] - F[0])
            out["kolmogorov"] = gap.max(axis=1)[:, None]
            out["wasserstein"] = np.sum(0.5 * (gap[:, 1:] + gap[:, :-1]) * np.diff(grid), axis=1)[:, None]
            if len(y_points):
                Fc = {arm: normalized_cdf(raw_points[arm], mass[arm][:, None]) for arm in (1, 0)}
                diff = np.empty_like(Fc[1])
                diff[:, order] = Fc[1] - Fc[0]
                out["cdf_diff"] = diff
            if diff_quad is not None:
                out["mmd"] = np.sqrt(np.maximum((diff_quad**2) @ w, 0.0))[:, None]
        return out

    centre = summaries(raw_m, raw_g if one_dim else None, raw_c if one_dim else None,
                       diff_t if one_dim and with_mmd else None)
    stars = {term: np.empty((len(V), value.shape[1], n_boot)) for term, value in centre.items()}
    small_sample = EFFECT_SMALL_SAMPLE and target == "smoothed"
    nu = {term: np.full((len(V), value.shape[1]), np.inf) for term, value in centre.items()}

    def moved(e, delta):
        """summaries' inputs at V-point e, each raw estimate moved by delta(its terms): the draws, or units' shares."""
        zm = {arm: raw_m[arm][e] + delta(lin_m[arm]) for arm in (1, 0)}
        zg = zc = zt = None
        if one_dim:
            zg = {arm: raw_g[arm][e] + delta(lin_g[arm]) for arm in (1, 0)}
            zc = {arm: raw_c[arm][e] + delta(lin_c[arm]) for arm in (1, 0)}
            if with_mmd:
                zt = diff_t[e] + delta(lin_t[1]) - delta(lin_t[0])
        return zm, zg, zc, zt

    for e in range(len(V)):
        if small_sample:
            def units_moved(start, stop, e=e):
                return moved(e, lambda terms: _INFLUENCE_STEP * unit_contributions(terms, e, res.n, start, stop))

            for term, (s2, s4) in _effect_influence(summaries, centre, units_moved, e, res.n).items():
                if term in SMALL_SAMPLE_EFFECTS:
                    nu[term][e] = satterthwaite_df(s2, s4)
        for term, value in summaries(*moved(e, lambda terms: sum(p.perturb(g, e) for p in terms))).items():
            stars[term][e] = value.T
    out = {}
    for term, estimate in estimates.items():
        estimate = np.asarray(estimate, dtype=np.float64).reshape(len(V), -1)
        if term not in centre:
            # The MMD's draws need the one-dimensional quadrature of a Gaussian outcome kernel.
            nan = np.full(len(V), np.nan)
            out[term] = [Interval(nan, nan, nan, nan) for _ in range(estimate.shape[1])]
            continue
        floor = 0.0 if term in DISTANCES else None
        # Bias-reduced: centred on the bias-reduced effect (computed as the draws are); plain: on the estimate.
        middle = centre[term] if target == "smoothed" else estimate
        out[term] = [_interval(middle[:, j], centre[term][:, j], stars[term][:, j], level, floor,
                               nu[term][:, j] if small_sample and term in SMALL_SAMPLE_EFFECTS else None,
                               reverse=term in REVERSE_INTERVAL_EFFECTS, squared=term in SQUARED_INTERVAL_EFFECTS)
                     for j in range(estimate.shape[1])]
    return out


# ---------------------------------------------------------------------------
# tests of stochastic dominance and of a constant (location-shift) effect
# ---------------------------------------------------------------------------
#: Points of the grid on which the CDF processes of the dominance and location-shift tests are evaluated.
TEST_GRID = 401


@serial_blas
def shape_test(res, V: np.ndarray, index, *, hypothesis: str, n_boot: int, seed, arms=(1, 0)) -> EffectTest:
    """The multiplier-bootstrap tests of first-order stochastic dominance and of a pure location shift.

    Both work on the normalised CDFs F̂_a(y | v) of the two arms on a grid
    over the data (:data:`TEST_GRID` points, the margin of :mod:`ccme.grids`),
    both read out with one kernel (the wider of the arms' density kernels: a
    common convolution preserves both hypotheses), and perturbed by the
    multiplier bootstrap of :func:`_linear` (one multiplier per unit in both
    arms; a split fit's parts at one penalty and the first stage perturbed
    too, as in :func:`test_effect`), as R's ``Counterfactual`` package tests these
    hypotheses with its bootstrap of the counterfactual processes
    (Chernozhukov, Fernández-Val & Melly, 2013).

    - ``"dominance"``: H0: Y¹ first-order stochastically dominates Y⁰ at v,
      F₁(y | v) ≤ F₀(y | v) for every y.  T(v) = sup_y (F̂₁ − F̂₀)(y)⁺; critical
      values from the least favourable null F₁ = F₀, where the process is
      the centred bootstrap difference: T*(v) = sup_y (Δ̂* − Δ̂)(y)⁺.
    - ``"location"``: H0: Y¹ =ᵈ Y⁰ + δ(v) at v (the effect is a pure shift).
      δ̂ is the difference of means; T(v) = sup_y |F̂₁(y) − F̂₀(y − δ̂)|, and
      T*(v) = sup_y |(F̂₁* − F̂₁)(y) − (F̂₀*(y − δ̂*) − F̂₀(y − δ̂))|, with δ̂* recomputed
      from each draw's means (F̂₀ at shifted points by linear interpolation).

    The global statistic is the mean of T(v) over the V-points, with the
    mean of T*(v) as its bootstrap distribution; p-values (1 + #{T* ≥ T}) / (1 + n_boot).
    """
    warn_caveat(res)
    _check_boot(n_boot)
    if hypothesis not in ("dominance", "location"):
        raise ParameterError(f"`hypothesis` must be 'dominance' or 'location'; got {hypothesis!r}")
    if hypothesis == "dominance":  # the location-shift test was conservative there (README, "Small arms")
        warn_small_arms(res, arms, "dominance", stacklevel=4)  # this, serial_blas's wrapper, the method, the caller
    if res.design.Y.shape[1] != 1:
        raise DataError("the dominance and location-shift tests are defined for a one-dimensional outcome")
    g = _multipliers(res.n, n_boot, seed)
    grid = res.fine_grid(TEST_GRID)
    role = _roles(arms)
    # The CDFs as the density's kernel reads them out, not the narrower distribution read-out, and one kernel for
    # both arms, the wider of theirs: smoothing both arms with one kernel keeps both hypotheses (a convolution
    # preserves dominance and location shifts); the tuned arms' own kernels differ (0.72 and 0.52 on one null data
    # set), and with them the location-shift test rejected 17% of true nulls at the 5% level (README, "Small arms").
    kernel = max((res.embeddings[role[arm]].y_kernel for arm in (1, 0)), key=lambda k: float(k.bandwidth_array[0]))
    how = _equal_laws({})  # both nulls equate the arms' laws (up to a shift), as test_effect's
    lin = {arm: _linear(res, role[arm], V, grid[:, None], "cdf", kernel, **how) for arm in (1, 0)}
    lin_m = {arm: _linear(res, role[arm], V, np.zeros((0, 1)), "moments", Kernel("gaussian", (1.0,)), **how)
             for arm in (1, 0)}
    raw = {arm: sum(p.estimate() for p in lin[arm]) for arm in (1, 0)}
    mom = {arm: sum(p.estimate() for p in lin_m[arm]) for arm in (1, 0)}

    def shifted(F, delta):
        """F(y − δ) on the grid, rows of F against per-row δ (0 and 1 beyond the grid's ends)."""
        out = np.empty_like(F)
        for r in range(F.shape[0]):
            out[r] = np.interp(grid - delta[r], grid, F[r], left=0.0, right=1.0)
        return out

    observed = np.empty(len(V))
    boot = np.empty((len(V), n_boot))
    for e in range(len(V)):
        F = {arm: normalized_cdf(raw[arm][e][None, :], mom[arm][e, 0]) for arm in (1, 0)}
        Fs = {arm: normalized_cdf(raw[arm][e] + sum(p.perturb(g, e) for p in lin[arm]),
                                  (mom[arm][e, 0] + sum(p.perturb(g, e) for p in lin_m[arm])[:, :1]))
              for arm in (1, 0)}
        if hypothesis == "dominance":
            diff = F[1] - F[0]
            observed[e] = max(float(diff.max()), 0.0)
            boot[e] = np.maximum((Fs[1] - Fs[0] - diff).max(axis=1), 0.0)
        else:
            mean = {arm: mom[arm][e, 1] / mom[arm][e, 0] for arm in (1, 0)}
            delta = mean[1] - mean[0]
            zm = {arm: mom[arm][e] + sum(p.perturb(g, e) for p in lin_m[arm]) for arm in (1, 0)}
            delta_star = zm[1][:, 1] / zm[1][:, 0] - zm[0][:, 1] / zm[0][:, 0]
            F0_shift = shifted(F[0], np.array([delta]))
            observed[e] = float(np.abs(F[1] - F0_shift).max())
            process = (Fs[1] - F[1]) - (shifted(Fs[0], delta_star) - F0_shift)
            boot[e] = np.abs(process).max(axis=1)
    pvals = (1.0 + np.sum(boot >= observed[:, None], axis=1)) / (1.0 + n_boot)
    global_stat = float(observed.mean())
    global_p = float((1.0 + np.sum(boot.mean(axis=0) >= global_stat)) / (1.0 + n_boot))
    table = pd.DataFrame({"statistic": observed, "p_value": pvals}, index=pd.Index(list(index), name="profile"))
    if hypothesis == "dominance":
        name, text = "sup of (F1 - F0)+", "Y1 dominates Y0 at first order given V=v (F1 <= F0)"
    else:
        name, text = "sup |F1(y) - F0(y - delta)|", "Y1 = Y0 + delta(v) in law given V=v (a location shift)"
    return EffectTest(statistic=global_stat, p_value=global_p, table=table, statistic_name=name,
                      n_boot=int(n_boot), hypothesis=text)
