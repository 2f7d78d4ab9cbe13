"""Sampling (survey) weights: ``ccme.fit(..., weights=)`` validated, aligned to the design's rows and normalised.

With sampling weights w_i (unit i stands for w_i units of the population)
the estimand is the weighted population's p(Y^a | V): every empirical mean
of the estimator becomes a w-weighted mean.  This module owns what the
weights are and nothing else: one validation (:func:`resolve_weights`), one
record (:class:`SamplingWeights`, kept on the result and saved with it) and
the Kish effective sample size.  Where they enter the fit:

* the propensity model is fitted with ``sample_weight=`` (:mod:`ccme.propensity`);
* the low-rank ridge estimator solves weighted ridge regressions in both
  stages (:mod:`ccme.estimators.lowrank`);
* the summary reports weighted effective sample sizes (:func:`kish`).

Weights that are all equal are the unweighted fit: they are detected here
(:attr:`SamplingWeights.active` is None) and the fit runs exactly, bit for
bit, as ``fit`` without ``weights``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError, FormatError, ParameterError

__all__ = ["SamplingWeights", "raw_weights", "resolve_weights", "weighted_options", "kish"]


def kish(w) -> float:
    """Kish's effective sample size (Σw)²/Σw² of the weights ``w`` (0 for none or all zero)."""
    w = np.asarray(w, dtype=np.float64)
    total = float(np.sum(w**2))
    return float(np.sum(w) ** 2 / total) if total > 0 else 0.0


@dataclass(frozen=True, eq=False)
class SamplingWeights:
    """The sampling weights of a fit, on the design's rows.

    Attributes
    ----------
    values : ndarray (n,)
        The weights of the units used, normalised to mean 1 over them
        (w_i / mean w); read-only.
    column : str or None
        The column of ``data`` they came from (None: an array).
    raw_min, raw_max : float
        The smallest and largest weight as given (over the units used).
    constant : bool
        All weights equal: the fit is the unweighted one (:attr:`active` is None).
    """

    values: np.ndarray
    column: str | None
    raw_min: float
    raw_max: float
    constant: bool

    @property
    def active(self) -> np.ndarray | None:
        """The normalised weights the estimator uses, or None when they are all equal (the unweighted fit)."""
        return None if self.constant else self.values

    @property
    def kish_n(self) -> float:
        """Kish's effective sample size of the weights over all units, (Σw)²/Σw²."""
        return kish(self.values)

    def describe(self) -> str:
        """The summary's "Weights" row: source, range and Kish n."""
        source = f"column {self.column!r}" if self.column is not None else "array"
        if self.constant:
            return f"{source}, all equal ({self.raw_min:.4g}): the unweighted fit"
        return (f"{source}, range [{self.raw_min:.4g}, {self.raw_max:.4g}], Kish n {self.kish_n:.1f} "
                f"of {len(self.values)}")

    STATE_SCHEMA = "ccme.SamplingWeights"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        """The weights as a versioned state for :mod:`ccme.io`."""
        from .io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, values=self.values, column=self.column,
                          raw_min=float(self.raw_min), raw_max=float(self.raw_max), constant=bool(self.constant))

    @classmethod
    def from_state(cls, state) -> "SamplingWeights":
        """Inverse of :meth:`to_state`."""
        from .io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=("values", "column", "raw_min", "raw_max", "constant"))
        values = state["values"]
        if not (isinstance(values, np.ndarray) and values.ndim == 1 and np.all(np.isfinite(values))
                and np.all(values >= 0)):
            raise FormatError("the stored sampling weights are not a vector of finite non-negative numbers")
        if state["column"] is not None and not isinstance(state["column"], str):
            raise FormatError("the stored sampling weights' column is not a text")
        values = values.copy()
        values.setflags(write=False)
        return cls(values, state["column"], float(state["raw_min"]), float(state["raw_max"]),
                   bool(state["constant"]))


def raw_weights(weights, data) -> tuple[np.ndarray, str | None]:
    """``fit(weights=)`` as one float per row of ``data`` (a copy) and the column's name (None for an array).

    Raises
    ------
    ParameterError
        A name that is not a column of ``data``, or an array of the wrong shape or type.
    """
    n = len(data)
    if isinstance(weights, str):
        columns = [str(c) for c in getattr(data, "columns", [])]
        if weights not in columns:
            raise ParameterError(f"`weights` names the column {weights!r}, which `data` does not have")
        column = data[data.columns[columns.index(weights)]]
        try:
            values = np.array(column, dtype=np.float64, copy=True)
        except (TypeError, ValueError):
            raise ParameterError(f"the weights column {weights!r} is not numeric") from None
        return values, weights
    try:
        values = np.array(weights, dtype=np.float64, copy=True)
    except (TypeError, ValueError):
        raise ParameterError("`weights` must be a column name of `data` or an array of numbers, one per row; got "
                             f"{type(weights).__name__}") from None
    if values.shape != (n,):
        raise ParameterError(f"`weights` must have one value per row of `data` ({n}); got shape {values.shape}")
    return values, None


def resolve_weights(weights, data, rows) -> SamplingWeights | None:
    """Validate ``fit(weights=)`` and align it to the design's rows: the one place weights are checked.

    Parameters
    ----------
    weights : str, array-like or None
        A column name of ``data`` or one weight per row of ``data`` (the
        caller's array is never modified).
    data : DataFrame
    rows : ndarray of int
        Positions in ``data`` of the design's rows (the rows ``na_action="drop"``
        kept): their weights are used, the dropped rows' weights are dropped.

    Returns
    -------
    SamplingWeights or None
        None when ``weights`` is None.  The values w_i / mean(w) over the
        rows used (mean 1).  Weights that are all equal give a record with
        ``constant=True`` whose :attr:`SamplingWeights.active` is None: the
        fit is then exactly the unweighted one.

    Raises
    ------
    DataError
        NaN, infinite or negative weights (with their count), or weights that
        are all zero, among the rows used.
    """
    if weights is None:
        return None
    values, column = raw_weights(weights, data)
    values = values[np.asarray(rows, dtype=np.intp)]
    what = f"column {column!r}" if column is not None else "`weights`"
    for problem, bad in (("NaN", np.isnan(values)), ("infinite", np.isinf(values)),
                         ("negative", values < 0)):
        count = int(np.sum(bad))
        if count:
            raise DataError(f"the sampling weights ({what}) have {count} {problem} value(s) of {len(values)}; "
                            "weights must be finite and non-negative")
    if not np.any(values > 0):
        raise DataError(f"the sampling weights ({what}) are all zero ({len(values)} rows)")
    constant = bool(np.all(values == values[0]))
    normalised = values / np.mean(values)
    normalised.setflags(write=False)
    return SamplingWeights(normalised, column, float(values.min()), float(values.max()), constant)


def weighted_options(method: str, options: dict, *, distributed: bool) -> dict:
    """The estimator's options for a fit with (non-constant) sampling weights, or a ParameterError saying why not.

    Only the low-rank path of the ridge estimator solves the weighted
    regressions (:mod:`ccme.estimators.lowrank`), with the kernel first stage;
    ``approx="auto"`` resolves to it at any n (below 5000 units the low-rank
    path with the default ``rank_tol`` is within about 1e-4 of the exact one,
    ``ccme.estimators.lowrank.APPROX_THRESHOLD``).

    Raises
    ------
    ParameterError
        Another method, ``approx="exact"``, a forest (or "auto") first stage,
        or a fit on a Dask cluster.
    """
    from .estimators.forest_first_stage import first_stage_choices

    if method != "ridge":
        raise ParameterError(f"method={method!r} does not take sampling weights; method='ridge' does (its weighted "
                             "low-rank kernel ridge regressions)")
    if distributed:
        raise ParameterError("a fit on a Dask cluster (client=) does not take sampling weights; fit locally")
    if options["approx"] == "exact":
        raise ParameterError("approx='exact' does not take sampling weights: the weighted regressions are solved on "
                             "the low-rank path only (its Nyström features make them O(n r^2)); use approx='auto' or "
                             "'lowrank', whose default rank_tol is within about 1e-4 of the exact fit")
    if any(choice != "kernel" for choice in first_stage_choices(options["first_stage"])):
        raise ParameterError("sampling weights need first_stage='kernel' (the forest first stage has no weighted "
                             f"form here); got first_stage={options['first_stage']!r}")
    return {**options, "approx": "lowrank"}
