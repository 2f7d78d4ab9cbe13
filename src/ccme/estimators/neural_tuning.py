"""Validation-loss selection of the neural estimators' hyperparameters (``tune=`` for the neural methods).

Every stage of both neural estimators is trained with a validation split
(``validation``, 20 % of the stage's units by default): the held-out loss is
the mean squared RKHS error ‖μ̂(z_j) − ξ_j‖² of the stage's regression on the
held-out units (:func:`ccme.estimators.deep_feature.heldout_loss`,
:func:`ccme.estimators.neural_kernel.nk_loss`), an unbiased estimate of the
prediction error up to the targets' own variance.  It is comparable across
penalties, numbers of features and epochs, and it selects

- the number of epochs, always: training stops after ``patience`` epochs
  without improvement and the weights of the best epoch are kept
  (:func:`ccme.estimators.training.train_stage`);
- Deep Feature's penalties (``tune="auto"``, or ``tune={"lam0": [...],
  "lam1": [...]}`` / ``{"lam": [...]}``): λ₀ of each arm by the first stage's
  validation loss, then λ₁ of each arm by the second stage's validation loss
  with the chosen first stage (grid :data:`ccme.tuning.NEURAL_LAMBDA_GRID`,
  10⁻⁴ … 1 in the convention ΨᵀΨ + nλI);
- in the doubly robust mode, Deep Feature's plug-in penalty λ₁ᵖ
  (``tune="auto"``, or ``tune={"lam1_plugin": [...]}``), after λ₁: the
  second stage is split as the ridge's (:class:`ccme.estimators.base.SplitSecondStage`),
  and λ₁ᵖ of each arm minimises the plug-in part's exact leave-one-out error in
  the tuning fold's learned features (:func:`_choose_plugin_penalty`; grid
  :data:`ccme.tuning.DEEP_FEATURE_PLUGIN_GRID`), with no network retrained.
  Chosen on the zoo's "choose" cases (n = 1000, two seeds; ISE against the
  unsplit fit: geometric mean 0.90, better on 12 of 14 case-arms) and reported
  on its other cases (0.85, better on 18 of 22; ``benchmarks/results/df_plugin_penalty_*``);
- the networks' weight decay (``weight_decay``, decoupled: AdamW), when
  asked (``tune={"weight_decay": [...]}``, or ``tune="auto"`` with
  :data:`ccme.tuning.NEURAL_WEIGHT_DECAY_SEARCH`): both stages are refitted
  for each value and one value for all arms is chosen as M is.  Neural-Kernel's
  decay can instead be chosen by comparing whole cross-fits on the read-out
  criterion (:mod:`ccme.fit_choice`, :data:`ccme.tuning.NEURAL_KERNEL_DECAY_FITS`;
  off by default, as measured there);
- M (features, or grid points of the Neural-Kernel estimator), only when
  asked (``tune={"M": [...]}``): both stages are refitted for each candidate
  and M is chosen by the second stage's validation loss summed over the arms
  (the final regression; the loss also credits a first stage that makes the
  pseudo-outcomes less noisy).

The outcome read-out bandwidth (``tune="auto"`` with d_y = 1, or
``tune={"y_bandwidth": [...]}``) is chosen after the cross-fit by the
ridge estimator's weighted least-squares cross-validation
(:func:`ccme.tuning.tune_readout`): it changes the read-out of the fitted
weights, not the networks.  Chosen on the zoo's "choose" cases (n = 1000,
two seeds; ISE against the rule's read-out: geometric mean 0.974 for Deep
Feature, 0.986 for Neural-Kernel) and reported on its other cases (0.869
and 0.949; ``benchmarks/results/neural_readout_*``).

Order: the inputs' relevance before all of these (the kernel ridge's per-group bandwidth search,
:mod:`ccme.estimators.input_relevance`, run by :meth:`ccme.estimators.training.NeuralEstimator.tune`, so that
every network trained below sees the scaled inputs); then M (at the current λ), the weight decay, λ₀, λ₁ and λ₁ᵖ,
one pass.  A candidate's
criterion is its best validation loss (the loss of the weights kept).  Each
arm's validation units are the same for every candidate (the split is drawn
before the network's initial weights), so candidates are compared on the same
held-out units.

Cost bound: the selection runs on the first cross-fitting fold only, and the
chosen values are used on every fold; the first fold's networks trained with
the chosen values are kept, not retrained.  Per arm it trains |M grid|
two-stage fits, |λ₀ grid| first stages and |λ₁ grid| second stages on that
fold (each stopped early).  With ``tune="auto"`` (5 + 5 values) and two folds
that is 12 stage trainings per arm instead of 4: about three times the
training of an untuned fit.  With tuning on, the first fold's arms are trained
during :func:`ccme.fit` (so that ``res.tuning`` is complete when it returns),
the other folds on first use as usual.

Hyperparameters the user sets explicitly are never tuned; ``lam_scaling="none"``
(the reference code's unscaled penalty) keeps the given λ under ``tune="auto"``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import numpy as np

from ..errors import ParameterError
from ..tuning import TuningCurve, TuningReport, note_edges
from .deep_feature import first_stage_at, first_stage_map, plugin_penalty_curve, split_plugin
from .training import stage_histories

__all__ = ["tune_neural"]


def _best_loss(history) -> float:
    """The validation loss of the kept weights (inf without a validation curve)."""
    return float(min(history.validation)) if history.validation else np.inf


def _argmin(criterion) -> int:
    finite = np.where(np.isfinite(criterion), criterion, np.inf)
    return int(np.argmin(finite))


def tune_neural(estimator, *, mode, design, Xo, fold, scores_target, prepared, grids, seed, auto, n_threads=0,
                report=None):
    """Select M, λ₀, λ₁ (Deep Feature) by validation loss on ``fold``; returns (prepared, report, arms).

    ``grids`` from :func:`ccme.tuning.resolve_tune`; ``seed`` is the fold's
    seed, so the returned ``arms`` ({arm: fold-and-arm estimator}, trained with
    the chosen values) are exactly what the fold would train with them.
    ``auto`` says the grids are the defaults of ``tune="auto"``.  ``prepared``
    is updated in a copy.  ``report`` (optional) is a report begun before, the
    input relevance's (:mod:`ccme.estimators.input_relevance`): it is continued,
    its entries first and its time added to.
    """
    started = time.perf_counter()
    report = TuningReport() if report is None else report   # a report begun before (the input relevance's)
    settings = prepared["training"]
    deep = estimator.name == "deep_feature"
    cand = dict(prepared)
    if deep:
        cand["lam0"], cand["lam1"] = dict(prepared["lam0"]), dict(prepared["lam1"])
    grids = dict(grids)

    if settings.validation == 0:
        if grids and not auto:
            raise ParameterError(f"`tune` selects {sorted(grids)} by validation loss, which needs a validation split; "
                                 "`validation` is 0")
        report.notes.append("no validation split (`validation` = 0): nothing tuned, every stage runs all its epochs")
        return prepared, report, None
    if deep and auto and prepared["lam_scaling"] == "none":
        grids.pop("lam0", None), grids.pop("lam1", None), grids.pop("lam1_plugin", None)
        report.notes.append("lam_scaling='none': the given lambda is kept (the automatic grid is in the n*lambda "
                            "convention)")
    if "lam0" in grids and mode not in ("dr", "pi"):
        grids.pop("lam0")
        if not auto:
            report.notes.append(f"mode={mode!r} has no first-stage regression: lam0 is not used")
    if "lam1_plugin" in grids and mode != "dr":
        grids.pop("lam1_plugin")
        if not auto:
            report.notes.append(f"mode={mode!r} has no doubly robust plug-in part: lam1_plugin is not used")
    if "M" in grids and not deep and prepared["grid_rule"] == "user":
        raise ParameterError("`tune['M']` cannot vary M with a user-given `grid` array (its length sets M)")

    cache = {}
    build_kwargs = dict(
        mode=mode, V=design.V, Xo=Xo, Y=design.Y, A=design.A, target=fold.target, nuisance=fold.nuisance,
        scores_target=scores_target, seed=seed, fold_index=fold.index, n_threads=n_threads,
    )
    if deep:
        build_kwargs["cache"] = cache
    build = partial(type(estimator).build_arm, **build_kwargs)
    built = {}

    def key(c, arm):
        decay = c["training"].weight_decay
        return (arm, c["M"], decay, c["lam0"][arm], c["lam1"][arm]) if deep else (arm, c["M"], decay)

    def arm_fit(c, arm):
        k = key(c, arm)
        if k not in built:
            built[k] = build(arm=arm, prepared=c)
        return built[k]

    def final_loss(arm_est):
        """The second stage's best validation loss (the final regression's; summed over the plug-in part and the
        correction where they are split, stages 2 and 3); one-step's only stage's."""
        history = stage_histories(arm_est)
        return sum(_best_loss(h) for stage, h in history.items() if stage >= 2 or len(history) == 1)

    in_target = design.A[fold.target]

    def all_arms_choice(name, values, trials):
        """The trial whose final stage's validation loss, summed over the arms, is smallest (the final regression;
        the loss also credits a first stage that makes the pseudo-outcomes less noisy); its curve is recorded."""
        crit = np.zeros(len(values))
        for i, trial in enumerate(trials):
            for arm in design.arms:
                # One-step regresses within the arm: weight each arm's mean loss by its share of the units.
                share = np.mean(in_target == arm) if mode == "onestep" else 1.0
                crit[i] += share * final_loss(arm_fit(trial, arm))
        best = _argmin(crit)
        report.curves.append(TuningCurve(name, np.asarray(values, dtype=float), crit,
                                         "validation loss (final stage), all arms", float(values[best])))
        return trials[best], values[best]

    if "M" in grids:
        values = np.asarray(grids["M"])
        cand, chosen = all_arms_choice("M", values, [_with_m(cand, int(m), deep, design.Y) for m in values])
        report.chosen["M"] = int(chosen)

    if "weight_decay" in grids:   # both stages' networks at each decay, one value for all arms, as for M
        values = np.asarray(grids["weight_decay"], dtype=float)
        cand, chosen = all_arms_choice("weight_decay", values, [
            {**cand, "training": replace(settings, weight_decay=(float(w), float(w)))} for w in values])
        report.chosen["weight_decay"] = float(chosen)

    if "lam0" in grids:
        values = np.asarray(grids["lam0"])
        for arm in design.arms:
            crit = np.array([
                _best_loss(first_stage_map(arm=arm, Xo=Xo, Y=design.Y, A=design.A, nuisance=fold.nuisance,
                                           prepared={**cand, "lam0": {**cand["lam0"], arm: float(lam)}}, seed=seed,
                                           n_threads=n_threads, cache=cache).history)
                for lam in values
            ])
            best = _argmin(crit)
            cand["lam0"][arm] = float(values[best])
            report.curves.append(TuningCurve("lam0", values, crit, "validation loss (stage 1)", float(values[best]),
                                             arm))
        report.chosen["lam0"] = dict(cand["lam0"])

    if "lam1" in grids:
        values = np.asarray(grids["lam1"])
        for arm in design.arms:
            trials = [{**cand, "lam1": {**cand["lam1"], arm: float(lam)}} for lam in values]
            crit = np.array([final_loss(arm_fit(trial, arm)) for trial in trials])
            best = _argmin(crit)
            cand["lam1"][arm] = float(values[best])
            report.curves.append(TuningCurve("lam1", values, crit, "validation loss (final stage)",
                                             float(values[best]), arm))
        report.chosen["lam1"] = dict(cand["lam1"])

    for name in ("M", "weight_decay", "lam0", "lam1"):
        curves = [c for c in report.curves if c.parameter == name]
        if curves and not all(np.any(np.isfinite(c.criterion)) for c in curves):
            report.notes.append(f"{name}: too few units for a validation loss; the first grid value was used")

    arms = {arm: arm_fit(cand, arm) for arm in design.arms}
    if "lam1_plugin" in grids:
        arms = _choose_plugin_penalty(arms, cand, report, np.asarray(grids["lam1_plugin"], dtype=float), design,
                                      first_stage=partial(first_stage_at, Xo=Xo, Y=design.Y, A=design.A,
                                                          target=fold.target, nuisance=fold.nuisance, seed=seed,
                                                          n_threads=n_threads, cache=cache))
    note_edges(report, design.treatment)  # before the epoch curves: an early best epoch is no grid edge
    _record_epochs(report, arms)
    report.seconds += time.perf_counter() - started
    return cand, report, arms


def _choose_plugin_penalty(arms, cand, report, values, design, first_stage):
    """λ₁ᵖ of each arm by the plug-in part's leave-one-out error on the tuning fold's learned features.

    The ridge estimator's split second stage (:class:`ccme.estimators.base.SplitSecondStage`)
    for Deep Feature: λ₁, chosen by the validation loss of ξ̂, is set by the
    correction's noise and oversmooths the plug-in part μ̂₀(X), whose targets
    carry no outcome noise.  The criterion is exact leave-one-out in the M
    learned features (:func:`ccme.estimators.deep_feature.plugin_penalty_curve`),
    so no network is retrained; the tuning fold's arms are split with the
    chosen values and kept.
    """
    kernel, scaling = cand["kernels"]["y"], cand["lam_scaling"]
    chosen, split = {}, {}
    for arm, est in arms.items():
        first = first_stage(arm=arm, prepared=cand)
        crit = plugin_penalty_curve(est.feature_map.Psi, first, values, scaling, kernel)
        chosen[arm] = float(values[_argmin(crit)])
        report.curves.append(TuningCurve("lam1_plugin", values, crit, "LOO (RKHS) of mu0(X) on the learned features",
                                         chosen[arm], arm))
        split[arm] = split_plugin(est, first, chosen[arm], scaling)
    cand["lam1_plugin"] = chosen
    report.chosen["lam1_plugin"] = dict(chosen)
    return split


def _with_m(prepared, M, deep, Y):
    """``prepared`` with M features (Deep Feature) or M grid points (Neural-Kernel, grid rebuilt by its rule)."""
    if deep:
        return {**prepared, "M": M, "lam0": dict(prepared["lam0"]), "lam1": dict(prepared["lam1"])}
    from .neural_kernel import _kernel_to_grid, make_grid

    grid = make_grid(prepared["grid_rule"], Y, M, prepared["grid_seed"])
    return {**prepared, "M": len(grid), "grid": grid, "K_M": _kernel_to_grid(grid, grid, prepared["kernels"]["y"]),
            "grid_points_auto": None}   # M now from the tuning, not the "auto" rule


def _record_epochs(report: TuningReport, arms: dict) -> None:
    """The early-stopping choice of each arm and stage of the tuning fold: validation curve and kept epoch."""
    for arm, est in arms.items():
        for stage, history in sorted(stage_histories(est).items()):
            if not history.validation:
                continue
            name = f"epochs_stage{stage}"
            chosen = history.best_epoch + 1
            report.curves.append(TuningCurve(name, np.arange(1, len(history.validation) + 1, dtype=float),
                                             np.asarray(history.validation, dtype=float), "validation loss",
                                             float(chosen), arm))
            report.chosen.setdefault(name, {})[arm] = chosen
