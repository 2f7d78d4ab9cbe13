"""Hyperparameters chosen by comparing whole cross-fits on the read-out criterion.

A stage's own loss does not always rank the final estimates.  Neural-Kernel's
weight decay chosen by its networks' validation loss lost to the fixed default
(:data:`ccme.tuning.NEURAL_WEIGHT_DECAY_SEARCH`), because that loss scores each
network's regression, not the density read out of the fit.  Here each
candidate value is a whole cross-fit, read out with its own tuned σ_y
(:func:`ccme.tuning.tune_readout`), and the fits are compared by the read-out
criterion: the weighted least-squares cross-validation estimate of the
integrated squared error of p̂(y | v), on held-out units and weights that are
the same for every candidate (same data, folds and seeds), so that the
difference between two fits is a sum of paired per-unit differences with a
standard error (:func:`ccme.location.criterion_difference`).  This is how
``location="auto"`` chooses between the fits with and without a location
stage (:func:`ccme.location.choose_location`), and the rule is the same: a
candidate replaces the reference value (the default) only where its criterion
is lower by more than :data:`ccme.location.AUTO_THRESHOLD` standard errors;
among several such, the lowest.

The estimator says which hyperparameter is compared, and on which values
(:meth:`ccme.estimators.base.Estimator.fit_alternatives`); :func:`ccme.fit`
cross-fits them and calls :func:`choose_fit`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import location
from .location import clearly_lower, criterion_difference, readout_criterion
from .tuning import TuningCurve, TuningReport

__all__ = ["choose_fit", "with_readout"]


def choose_fit(name: str, reports: Mapping, reference) -> object:
    """The value whose fit's read-out criterion is clearly the lowest; records the comparison in its report.

    Parameters
    ----------
    name : str
        The hyperparameter compared (e.g. "weight_decay").
    reports : mapping
        Value → the tuning report of the whole fit at that value, with its
        read-out curves (and their held-out terms) for every arm.
    reference : hashable
        The value kept unless another's criterion is lower by more than
        :data:`ccme.location.AUTO_THRESHOLD` standard errors of the paired
        difference (:func:`ccme.location.criterion_difference`).

    Returns
    -------
    The chosen value.  Its report gets the curve (value → criterion summed
    over the arms), ``chosen[name]`` and a note with each difference.

    Examples
    --------
    Two fits that score the same held-out units, the second lower by far more than its standard error:

    >>> import numpy as np
    >>> from ccme.tuning import TuningCurve, TuningReport
    >>> def report(terms):
    ...     held = (np.arange(4), np.asarray(terms, dtype=float))
    ...     curve = TuningCurve("y_bandwidth", np.array([1.0]), np.array([sum(terms)]), "ISE-CV", 1.0, arm=1,
    ...                         held=held)
    ...     return TuningReport(curves=[curve])
    >>> reports = {2.0: report([0.0, 0.1, 0.2, 0.1]), 0.5: report([-0.5, -0.4, -0.35, -0.4])}
    >>> choose_fit("weight_decay", reports, reference=2.0)
    0.5
    >>> reports[0.5].chosen
    {'weight_decay': 0.5}
    """
    differences = {value: criterion_difference(report, reports[reference])
                   for value, report in reports.items() if value != reference}
    clear = {value: d for value, (d, se) in differences.items() if clearly_lower(d, se)}
    chosen = min(clear, key=clear.get) if clear else reference
    values = sorted(reports)
    report = reports[chosen]
    report.curves.append(TuningCurve(name, np.asarray(values, dtype=float),
                                     np.array([readout_criterion(reports[v]) for v in values]),
                                     "read-out criterion, whole fits, all arms", float(chosen)))
    report.chosen[name] = chosen
    each = "; ".join(f"{v:g}: {d:.4g} (standard error {se:.3g})" for v, (d, se) in sorted(differences.items()))
    report.notes.append(f"{name}: {chosen:g} chosen by the read-out criterion of whole fits (each value minus "
                        f"{reference:g}: {each}; another value where below -{location.AUTO_THRESHOLD:g} standard "
                        "errors)")
    return chosen


def with_readout(report: TuningReport, readout: TuningReport) -> TuningReport:
    """``report`` with its outcome read-out's entries replaced by those of ``readout`` (a new report).

    ``readout`` holds only what :func:`ccme.tuning.tune_readout` wrote into
    an empty report for another fit: the read-out curves, ``chosen["y_bandwidth"]``,
    notes on σ_y's grid (which name ``y_bandwidth`` first) and its time.
    """
    return TuningReport(
        chosen={**{k: v for k, v in report.chosen.items() if k != "y_bandwidth"}, **readout.chosen},
        curves=[c for c in report.curves if c.parameter != "y_bandwidth"] + list(readout.curves),
        seconds=report.seconds + readout.seconds,
        notes=[n for n in report.notes if not n.startswith("y_bandwidth")] + list(readout.notes),
        relevance=[dict(r) for r in report.relevance],
    )
