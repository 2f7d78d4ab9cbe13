"""``ccme.CCMEResult``: the frozen record of a fit, whose functionals delegate to the arms' embeddings.

This module owns the result object.  It holds what :func:`ccme.fit` did —
the call, the design, the folds, the propensity diagnostics, the
hyperparameters as used, the tuning report — and one :class:`ccme.Embedding`
per arm.  Every functional (density, CDF, moments, quantiles, samples, the
MMD) is written once on the embedding and reached here by a one-line
delegation that encodes ``newdata`` and picks the arm.

``newdata`` means the same thing in every method: a DataFrame with the
columns V is built from, and ``None`` the training data's rows (as R's
``predict``).  Methods that summarise at a few V-points (``summary``,
``tidy``, ``effect``, ``bands``, the plots) default to ``newdata="profiles"``,
V at its quartiles (:meth:`CCMEResult.profiles`).
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np
import pandas as pd

from .embedding import Embedding, check_levels
from .errors import DataError, ParameterError
from .formula import newdata_frame
from .grids import outcome_grid

__all__ = ["CCMEResult", "load"]

#: ``newdata`` default of the methods that summarise at the V-profiles.
PROFILES = "profiles"


@dataclass(frozen=True, repr=False, eq=False)
class CCMEResult:
    """Estimated conditional counterfactual distributions p(Y¹ | V) and p(Y⁰ | V).

    Returned by :func:`ccme.fit`; immutable.  Holds, for each arm, the
    fitted embedding μ̂_{Y^a|V} (:meth:`embedding`, the average of the
    cross-fitting folds' estimates) and every choice that produced it.  The
    functionals take ``newdata`` (a DataFrame with the columns V is built
    from; ``None``: the training data) and ``arm`` (1 or 0, ``True``/``False``,
    or the treatment column's level labels).

    Attributes
    ----------
    call : str
    design : ccme.formula.Design
    method, mode : str
    folds : tuple of ccme.crossfit.Fold
    seed : int
        The seed used (drawn when ``fit`` got ``seed=None``).
    estimator : ccme.estimators.base.Estimator
    options : Mapping
        The hyperparameters as given (defaults filled in, rules unresolved).
    params : ccme.estimators.base.Parameters
        The hyperparameters as used (rules resolved, tuned values in place).
    propensity : str
        The propensity model's name.
    propensity_columns, outcome_columns : tuple of str
        X's columns used by the propensity and first-stage outcome models.
    overlap : ccme.propensity.Overlap
        Cross-fitted propensity scores and their diagnostics.
    timing : Mapping
        Seconds spent in each step of the fit.
    clip : float
    tuning : ccme.tuning.TuningReport
        What the automatic tuning chose, its criterion curves and its time.
    sampling_weights : ccme.sampling_weights.SamplingWeights or None
        The sampling weights of ``fit(weights=)`` on the design's rows
        (normalised to mean 1), or None for a fit without them.
    """

    call: str
    design: object
    method: str
    mode: str
    folds: tuple
    seed: int
    estimator: object
    options: Mapping
    params: object
    propensity: str
    propensity_columns: tuple
    outcome_columns: tuple
    overlap: object
    embeddings: Mapping = field(repr=False)
    timing: Mapping
    clip: float
    tuning: object = None
    sampling_weights: object = None

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "timing", MappingProxyType(dict(self.timing)))
        object.__setattr__(self, "embeddings", MappingProxyType(dict(self.embeddings)))
        object.__setattr__(self, "folds", tuple(self.folds))

    # -- basic facts --------------------------------------------------------
    @property
    def formula(self):
        return self.design.formula

    @property
    def hyperparameters(self):
        """The hyperparameters as used (alias of :attr:`params`)."""
        return self.params

    @property
    def kernels(self) -> Mapping:
        """``"x"``, ``"v"``, ``"y"`` → :class:`ccme.kernels.Kernel` as fitted (``"y"`` for every method)."""
        return self.params.kernels

    @property
    def penalties(self) -> dict:
        """``"lam0"``, ``"lam1"`` (and ``"lam1_plugin"`` where set) → {arm: λ} (K + nλI), for the methods that have them."""
        return {k: dict(self.params[k]) for k in ("lam0", "lam1", "lam1_plugin") if self.params.get(k) is not None}

    @property
    def n(self) -> int:
        return self.design.n

    @property
    def location(self) -> "dict | None":
        """Each arm's location stage (``fit(location="linear")``, :class:`ccme.location.LocationModel`), or None."""
        models = {arm: emb.location for arm, emb in self.embeddings.items()}
        return None if all(m is None for m in models.values()) else models

    @property
    def supports_bootstrap(self) -> bool:
        """Whether the multiplier bootstrap's tests and effect intervals apply: a linear second stage.

        A location stage (``fit(location=)``) must keep its units and
        residuals, which a fit saved by ccme before state version 2 of
        :class:`ccme.location.LocationModel` does not (its bands still apply).
        """
        models = self.location or {}
        return bool(self.estimator.supports_bootstrap) and all(m.units is not None for m in models.values())

    @property
    def arms(self) -> tuple:
        """The arm codes in the order results list them (:attr:`ccme.formula.Treatment.arms`)."""
        return self.design.arms

    @property
    def levels(self) -> tuple:
        """The treatment's levels; arm code j is ``levels[j]``."""
        return self.design.treatment.levels

    @property
    def n_arm(self) -> dict:
        """Units per arm, keyed by arm code."""
        return {arm: int(np.sum(self.design.A == arm)) for arm in self.arms}

    @property
    def n_folds(self) -> int:
        return len(self.folds)

    @property
    def propensity_scores(self) -> np.ndarray:
        """Cross-fitted π̂(X_i) before clipping (each unit's score comes from the fold that left it out).

        A vector P̂(A = 1 | X_i) for a binary treatment; for k ≥ 3 arms the
        (n, k) generalised propensities, column j for ``levels[j]`` (as R's
        ``predict`` of a multinomial fit).
        """
        return self.overlap.scores.copy()

    @property
    def propensity_report(self):
        """How π was estimated: the learner, ``"auto"``'s choice and CV log-losses per fold, and the calibration.

        A :class:`ccme.propensity_selection.PropensityReport` (Brier score,
        log-loss, reliability curve of the cross-fitted scores); None for a
        result saved before it existed.
        """
        return self.overlap.report

    def __repr__(self) -> str:
        counts = self.n_arm
        v = ", ".join(self.design.v_variables)
        if self.design.treatment.binary:
            arms = f"{counts[1]} treated, {counts[0]} control"
        else:
            arms = ", ".join(f"{counts[arm]} {self.levels[arm]!r}" for arm in self.arms)
        located = "" if self.location is None else ", located by a linear mean in V"
        return (
            f"<ccme.CCMEResult: {self.method}/{self.mode}, {self.n_folds} folds, "
            f"n={self.n} ({arms}), V = ({v}){located}>"
        )

    # -- the embeddings -----------------------------------------------------
    def arm_index(self, arm=None) -> int:
        """The code of ``arm``: 1/0, a boolean or a level label (binary); a level label (k ≥ 3 arms).

        Parameters
        ----------
        arm : 1, 0, bool or a treatment level, default None
            The arm as the functionals accept it; a level label must have the type
            of the treatment column's levels.  None: the treated arm (1) of a
            binary treatment; a treatment with k ≥ 3 levels needs the level.

        Returns
        -------
        int
            1 (treated) or 0 (control) for a binary treatment; the level's
            position in :attr:`levels` otherwise.

        Raises
        ------
        ParameterError
            For anything else.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.arm_index(True), res.arm_index(0)
        (1, 0)
        """
        treatment = self.design.treatment
        if arm is None:
            if treatment.binary:
                return 1
            raise ParameterError(f"the treatment {treatment.column!r} has {treatment.k} levels: name the arm, "
                                 f"arm=<level> (one of {', '.join(map(repr, treatment.levels))})")
        return treatment.code(arm)

    def embedding(self, arm=None) -> Embedding:
        """The fitted embedding μ̂_{Y^a|V} of arm ``arm`` (:class:`ccme.Embedding`).

        Parameters
        ----------
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        Embedding

        Raises
        ------
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.embedding(1).mean(v=ccme.datasets.paper_simulation(2, seed=2)).shape
        (2, 1)
        """
        return self.embeddings[self.arm_index(arm)]

    def outcome_kernel(self, arm=None):
        """The (normalised) outcome kernel with which arm ``arm``'s density and moments are read out (its CDF: ``res.embedding(arm).cdf_kernel``).

        Parameters
        ----------
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ccme.kernels.Kernel
            The kernel's name and bandwidth as used (set, by rule or tuned).

        Raises
        ------
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.outcome_kernel(arm=1).name
        'gaussian'
        """
        return self.embedding(arm).y_kernel

    # -- inputs -------------------------------------------------------------
    def _v(self, newdata) -> np.ndarray:
        if newdata is None:
            return self.design.V
        if isinstance(newdata, str) and newdata == PROFILES:
            newdata = self.profiles()
        return self.design.encode_v(newdata)

    def _frame(self, newdata):
        """``newdata`` with the profiles resolved, and the row labels it gives the V-points."""
        if isinstance(newdata, str) and newdata == PROFILES:
            newdata = self.profiles()
        if newdata is None:
            return None, list(range(self.n))
        newdata = newdata_frame(newdata)
        return newdata, list(getattr(newdata, "index", range(len(newdata))))

    def _squeeze(self, values: np.ndarray) -> np.ndarray:
        return values[:, 0] if values.shape[1] == 1 else values

    def fine_grid(self, size: int = 2001) -> np.ndarray:
        """The grid on which quantiles, modes and distances are located: the data ± the margin of :mod:`ccme.grids`.

        Its scale is the wider of the two arms' read-out kernels, so both arms
        are compared on one grid (d_y = 1).

        Parameters
        ----------
        size : int, default 2001
            Number of grid points.

        Returns
        -------
        ndarray (size,)
            Increasing outcome values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.fine_grid().shape
        (2001,)
        """
        return outcome_grid(self.design.Y, [self.embeddings[arm].y_kernel for arm in self.arms], size=size)

    # -- functionals --------------------------------------------------------
    def density(self, y, *, newdata=None, arm=None, normalize: bool = True) -> np.ndarray:
        """Estimated conditional counterfactual density p̂(y | V = v) of arm ``arm``.

        Implements eq. (emp_density) of the paper with the normalised outcome
        kernel (:meth:`ccme.Embedding.density`).

        Parameters
        ----------
        y : array (G,) or (G, d_y)
            Outcome values; with ``normalize=True`` and d_y = 1 an increasing grid.
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).
        normalize : bool, default True
            Clip negative values and rescale each row to integrate to one on
            the grid (d_y = 1; for d_y > 1 only the clipping).

        Returns
        -------
        ndarray (n_newdata, G)

        Raises
        ------
        DataError
            ``y`` of the wrong shape or not finite, ``newdata`` that cannot be encoded.
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme, numpy as np
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.density(np.linspace(-5, 10, 50), newdata=ccme.datasets.PAPER_PROFILES, arm=1).shape
        (2, 50)
        """
        return self.embedding(arm).density(y, v=self._v(newdata), normalize=normalize)

    def cdf(self, y, *, newdata=None, arm=None, normalize: bool = True) -> np.ndarray:
        """Estimated conditional CDF P̂(Y^a ≤ y | V = v), shape (n_newdata, G) (:meth:`ccme.Embedding.cdf`).

        Read out with the arm's ``cdf_kernel`` (narrower than the density's:
        :func:`ccme.tuning.distribution_kernel`), as are the quantiles,
        intervals, shortfalls and exceedances built on it.

        Parameters
        ----------
        y : array (G,) or (G, d_y)
            Outcome values.
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).
        normalize : bool, default True
            Rescale to unit mass, clip to [0, 1], make non-decreasing in y (d_y = 1).

        Returns
        -------
        ndarray (n_newdata, G)

        Raises
        ------
        DataError
            ``y`` of the wrong shape or not finite, ``newdata`` that cannot be encoded.
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.cdf([0.0, 5.0], newdata=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        return self.embedding(arm).cdf(y, v=self._v(newdata), normalize=normalize)

    def mean(self, *, newdata=None, arm=None) -> np.ndarray:
        """Estimated E[Y^a | V = v]: Σ_k c_k(v) y_k / Σ_k c_k(v).

        Parameters
        ----------
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ndarray (n_newdata,) or (n_newdata, d_y)

        Raises
        ------
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.mean(newdata=ccme.datasets.PAPER_PROFILES, arm=1).shape
        (2,)
        """
        return self._squeeze(self.embedding(arm).mean(v=self._v(newdata)))

    def var(self, *, newdata=None, arm=None) -> np.ndarray:
        """Variance of the estimated (kernel-smoothed) distribution of Y^a given V = v.

        Parameters
        ----------
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ndarray (n_newdata,) or (n_newdata, d_y)
            NaN, with a warning, where the signed weights make it negative.

        Raises
        ------
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.
        ParameterError
            ``arm`` is not one of the two arms.

        Warns
        -----
        CcmeWarning
            Where the estimated variance is negative (reported as NaN).

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.var(newdata=ccme.datasets.PAPER_PROFILES, arm=0).shape
        (2,)
        """
        _, _, var = self.embedding(arm).moments(v=self._v(newdata))
        return self._squeeze(var)

    def sd(self, *, newdata=None, arm=None) -> np.ndarray:
        """Standard deviation of the estimated distribution of Y^a given V = v (the root of :meth:`var`).

        Parameters
        ----------
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ndarray (n_newdata,) or (n_newdata, d_y)
            NaN, with a warning, where the estimated variance is negative.

        Raises
        ------
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.sd(newdata=ccme.datasets.PAPER_PROFILES, arm=1).shape
        (2,)
        """
        return np.sqrt(self.var(newdata=newdata, arm=arm))

    def quantile(self, q, *, newdata=None, arm=None) -> np.ndarray:
        """Quantiles of the estimated distribution of Y^a | V = v (d_y = 1).

        Inverts the normalised CDF (unit mass, clipped to [0, 1], made
        non-decreasing), so the result is monotone in ``q`` even where the raw
        estimate is not; located on :meth:`fine_grid` (2001 points) and
        interpolated linearly (error at most one grid step).

        Parameters
        ----------
        q : float or array of floats in (0, 1)
            Quantile levels.
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ndarray (n_newdata, len(q)), or (n_newdata,) for a scalar ``q``

        Raises
        ------
        ParameterError
            ``q`` outside (0, 1), or ``arm`` not one of the two arms.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.quantile([0.1, 0.9], newdata=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        levels = check_levels(q, "q")
        emb = self.embedding(arm)
        emb._require_1d("the quantile")
        out = emb.quantile(levels, v=self._v(newdata), grid=self.fine_grid())
        return out[:, 0] if np.ndim(q) == 0 else out

    def expected_shortfall(self, alpha, *, newdata=None, arm=None, tail="lower") -> np.ndarray:
        """Expected shortfall (CVaR) of Y^a | V = v: the mean of the lower (or upper) α tail (d_y = 1).

        ES⁻(α) = E[Y^a | Y^a ≤ Q(α), v], ES⁺(α) = E[Y^a | Y^a ≥ Q(1 − α), v]
        (:meth:`ccme.Embedding.expected_shortfall`), on :meth:`fine_grid`.

        Parameters
        ----------
        alpha : float or array of floats in (0, 1)
            Tail probabilities.
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm.
        tail : {"lower", "upper"}, default "lower"

        Returns
        -------
        ndarray (n_newdata, len(alpha)), or (n_newdata,) for a scalar ``alpha``

        Raises
        ------
        ParameterError
            ``alpha`` outside (0, 1), an unknown ``tail``, or ``arm`` not one of the two arms.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.expected_shortfall(0.1, newdata=ccme.datasets.PAPER_PROFILES, tail="upper").shape
        (2,)
        """
        levels = check_levels(alpha, "alpha")
        out = self.embedding(arm).expected_shortfall(levels, v=self._v(newdata), tail=tail, grid=self.fine_grid())
        return out[:, 0] if np.ndim(alpha) == 0 else out

    def superquantile(self, p, *, newdata=None, arm=None) -> np.ndarray:
        """Superquantile E[Y^a | Y^a ≥ Q(p), v] (the upper expected shortfall at 1 − p; d_y = 1).

        Parameters
        ----------
        p : float or array of floats in (0, 1)
        newdata : DataFrame or None, default None
            The V-points (None: the training data's rows).
        arm : 1, 0, bool or a treatment level, default None

        Returns
        -------
        ndarray (n_newdata, len(p)), or (n_newdata,) for a scalar ``p``

        Raises
        ------
        ParameterError
            ``p`` outside (0, 1), or ``arm`` not one of the two arms.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.superquantile([0.5, 0.9], newdata=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        levels = check_levels(p, "p")
        out = self.embedding(arm).superquantile(levels, v=self._v(newdata), grid=self.fine_grid())
        return out[:, 0] if np.ndim(p) == 0 else out

    def exceedance(self, c, *, newdata=None, arm=None) -> np.ndarray:
        """Exceedance probabilities P(Y^a > c | V = v) = 1 − F̂(c | v) (normalised CDF; d_y = 1).

        Parameters
        ----------
        c : float or array of floats
            Thresholds.
        newdata : DataFrame or None, default None
            The V-points (None: the training data's rows).
        arm : 1, 0, bool or a treatment level, default None

        Returns
        -------
        ndarray (n_newdata, len(c)), or (n_newdata,) for a scalar ``c``

        Raises
        ------
        ParameterError
            ``arm`` not one of the two arms.
        DataError
            A multivariate outcome, non-finite thresholds, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.exceedance(20.0, newdata=ccme.datasets.PAPER_PROFILES).shape
        (2,)
        """
        out = self.embedding(arm).exceedance(c, v=self._v(newdata))
        return out[:, 0] if np.ndim(c) == 0 else out

    def interval(self, level=0.9, *, newdata=None, arm=None) -> np.ndarray:
        """Central prediction interval of Y^a | V = v: the (1 ∓ level)/2 quantiles (d_y = 1).

        Parameters
        ----------
        level : float in (0, 1), default 0.9
            Probability the interval holds.
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).

        Returns
        -------
        ndarray (n_newdata, 2)
            Lower and upper ends (see :meth:`quantile`).

        Raises
        ------
        ParameterError
            ``level`` outside (0, 1), or ``arm`` not one of the two arms.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.interval(0.8, newdata=ccme.datasets.PAPER_PROFILES, arm=0).shape
        (2, 2)
        """
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
            raise ParameterError(f"`level` must be a number in (0, 1); got {level!r}")
        return self.quantile([(1 - level) / 2, (1 + level) / 2], newdata=newdata, arm=arm)

    def density_mode(self, *, newdata=None, arm=None, candidates=None) -> np.ndarray:
        """The most likely outcome under p̂(y | V = v) (``res.mode`` is the estimator's mode string).

        Parameters
        ----------
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).
        candidates : array or None, default None
            Outcome points searched, (G,) or (G, d_y); None: for d_y = 1
            :meth:`fine_grid`, for d_y > 1 the observed outcomes (the empirical
            mode of the paper's image experiment).

        Returns
        -------
        ndarray (n_newdata,) or (n_newdata, d_y)

        Raises
        ------
        DataError
            ``candidates`` of the wrong shape or not finite, ``newdata`` that cannot
            be encoded.
        ParameterError
            ``arm`` is not one of the two arms.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.density_mode(newdata=ccme.datasets.PAPER_PROFILES, arm=1).shape
        (2,)
        """
        if candidates is None:
            candidates = self.fine_grid()[:, None] if self.design.Y.shape[1] == 1 else self.design.Y
        return self._squeeze(self.embedding(arm).mode(v=self._v(newdata), candidates=candidates))

    def sample(self, n, *, newdata=None, arm=None, seed=None) -> np.ndarray:
        """``n`` points representing p̂(y | V = v) for each row of ``newdata``, by kernel herding.

        See :meth:`ccme.Embedding.sample` (it respects the signed weights; the
        points are a deterministic summary given the candidates drawn with
        ``seed``, not independent draws).

        Parameters
        ----------
        n : int
            Points per V-point (positive).
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).
        seed : int or None, default None
            Seed of the candidate points; None: the fit's seed.

        Returns
        -------
        ndarray (n_newdata, n) for d_y = 1, else (n_newdata, n, d_y)

        Raises
        ------
        ParameterError
            ``n`` not a positive integer, or ``arm`` not one of the two arms.
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.sample(5, newdata=ccme.datasets.PAPER_PROFILES, arm=1, seed=1).shape
        (2, 5)
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"`n` must be a positive integer; got {n!r}")
        out = self.embedding(arm).sample(int(n), v=self._v(newdata), seed=self.seed if seed is None else seed)
        return out[:, :, 0] if out.shape[2] == 1 else out

    def mmd(self, *, newdata=None, arms=None) -> np.ndarray:
        """The MMD ‖μ̂₁(v) − μ̂₀(v)‖ between the arms' embeddings at each V-point (:meth:`ccme.Embedding.mmd`).

        Parameters
        ----------
        newdata : DataFrame or None, default None
            Rows with the columns V is built from, one V-point each; None: the
            training data's rows.
        arms : pair of arms or None, default None
            The two arms compared, (a, b); None: treated and control (a
            treatment with k ≥ 3 levels needs the pair of levels).

        Returns
        -------
        ndarray (n_newdata,)

        Raises
        ------
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.mmd(newdata=ccme.datasets.PAPER_PROFILES).shape
        (2,)
        """
        a, b = self.design.treatment.contrast(arms)
        return self.embeddings[a].mmd(self.embeddings[b], v=self._v(newdata))

    # -- profiles, tables, summary, plots ----------------------------------
    # -- profiles, tables, summary -----------------------------------------
    def profiles(self, quantiles=(0.25, 0.5, 0.75)) -> pd.DataFrame:
        """Typical V-points: numeric columns at quantiles of the data, categorical ones varying across rows.

        Parameters
        ----------
        quantiles : sequence of float in [0, 1], default (0.25, 0.5, 0.75)
            Levels at which the numeric columns are taken.

        Returns
        -------
        DataFrame
            One row per profile, one column per raw variable of V (see
            :meth:`ccme.formula.Design.profiles`).

        Raises
        ------
        DataError
            A level outside [0, 1].

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> list(res.profiles().index), list(res.profiles().columns)
        (['q25', 'q50', 'q75'], ['x1'])
        """
        return self.design.profiles(quantiles)

    def tidy(self, *, newdata=PROFILES) -> pd.DataFrame:
        """Mean and standard deviation of Y^a | V = v per profile and arm, as a long table.

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default "profiles"
            The V-points: V at its quartiles (:meth:`profiles`), the rows of a
            DataFrame with the columns V is built from, or None for the training
            data's rows.

        Returns
        -------
        DataFrame
            Columns ``profile``, ``arm`` (1/0 for a binary treatment, else the
            level), ``outcome``, ``term`` ("mean", "sd") and ``estimate``.

        Raises
        ------
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> list(res.tidy().columns)
        ['profile', 'arm', 'outcome', 'term', 'estimate']
        """
        frame, index = self._frame(newdata)
        V = self._v(frame)
        rows = []
        treatment = self.design.treatment
        for arm in self.arms:
            _, mean, var = self.embeddings[arm].moments(v=V)
            named = arm if treatment.binary else treatment.label(arm)
            for i, label in enumerate(index):
                for j, name in enumerate(self.design.y_names):
                    for term, value in (("mean", mean[i, j]), ("sd", np.sqrt(var[i, j]))):
                        rows.append({"profile": label, "arm": named, "outcome": name, "term": term, "estimate": value})
        return pd.DataFrame(rows, columns=["profile", "arm", "outcome", "term", "estimate"])

    def summary(self, *, newdata=PROFILES, n_boot=None):
        """An R-style summary: a printable object (it prints nothing by itself).

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default "profiles"
            The V-points of the profile table and the effects section: V at its
            quartiles (:meth:`profiles`), the rows of a DataFrame with the columns V
            is built from, or None for the training data's rows.
        n_boot : int or None, default None
            Bootstrap draws of :meth:`test_effect`'s p-values in the effects
            section; None: 499 for estimators with a linear second stage (about
            a second at n = 4000), none otherwise; 0: none.

        Returns
        -------
        ccme.summary.Summary
            ``print()`` it; ``_repr_html_``, ``as_latex()`` and ``to_frame()`` render it.

        Raises
        ------
        ParameterError
            ``n_boot`` positive but below 10.
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> type(res.summary()).__name__
        'Summary'
        """
        from .summary import Summary

        if n_boot is None:
            n_boot = 499 if self.supports_bootstrap else 0
        return Summary.from_result(self, newdata, n_boot=n_boot)

    def default_grid(self, size: int = 400) -> np.ndarray:
        """An outcome grid over the data ± the margin of :mod:`ccme.grids` (d_y = 1), for plots.

        It spans the outcomes within Tukey's far-out fences (:func:`ccme.fences.bulk_range`; all of them unless
        at most 1% lie far out), so that a few far-out outcomes do not leave the bulk between a handful of points;
        the functionals that integrate over the whole law (quantiles, modes, distances) use :meth:`fine_grid`.

        Parameters
        ----------
        size : int, default 400
            Number of grid points.

        Returns
        -------
        ndarray (size,)
            Increasing outcome values.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.default_grid().shape, res.default_grid(50).shape
        ((400,), (50,))
        """
        return outcome_grid(self.design.Y, [self.embeddings[arm].y_kernel for arm in self.arms], size=size, bulk=True)

    # -- effects and uncertainty -------------------------------------------
    def effect(self, *, newdata=PROFILES, arms=None, q=None, y=None, alpha=None, level=0.95, n_boot=None,
               seed=None, target="smoothed") -> pd.DataFrame:
        """Distributional treatment effects at each V-point, with bootstrap intervals, as a long table.

        The effects (see :mod:`ccme.effects`): ``mean_diff`` E[Y¹ | v] − E[Y⁰ | v]
        (per outcome dimension); ``qte`` Q₁(q | v) − Q₀(q | v) at each level q;
        ``cdf_diff`` F₁(y | v) − F₀(y | v) at each outcome value y (the difference
        of exceedance probabilities P(Y > y | v) is its negative); ``es_lower`` and
        ``es_upper`` the differences of the lower and upper expected shortfalls
        (CVaR, :meth:`expected_shortfall`) at each tail probability α; ``mmd``
        ‖μ̂₁(v) − μ̂₀(v)‖ (exact); ``kolmogorov`` and ``wasserstein``
        (1-Wasserstein) distances between the normalised distributions
        (d_y = 1 for all but ``mean_diff`` and ``mmd``).  For estimators with a
        linear second stage (ridge) each row also has a multiplier-bootstrap
        standard error and a ``level`` interval
        (:func:`ccme.bootstrap.effect_intervals`): T ± the ``level`` quantile of
        |T* − T|; for the Kolmogorov distance the reverse percentiles
        [2T − q_hi(T*), 2T − q_lo(T*)], for the MMD those of T² mapped back by
        √ (the norms' upward bias; README, "The distances' intervals").
        With ``target="smoothed"`` (default) T and the draws T* are
        the bias-reduced ones of :meth:`bands` (robust bias correction: the
        interval is centred on the bias-reduced effect, so it need not be
        centred on ``estimate``; V covariates the tuning dropped are given back,
        as there); ``target="regularised"`` gives plain intervals
        around ``estimate``, which cover the ridge-regularised effect only.
        With a location stage (``fit(location=)``) the draws also move the
        mean model's coefficients (:class:`ccme.bootstrap._Located`).
        README ("Effects and uncertainty") gives the measured coverage.

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default "profiles"
            The V-points: V at its quartiles (:meth:`profiles`), the rows of a
            DataFrame with the columns V is built from, or None for the training
            data's rows.
        arms : pair of arms or None, default None
            The comparison (a, b): every effect is arm a's functional minus arm
            b's (``arms=("high", "placebo")``).  None: treated versus control;
            for a treatment with k ≥ 3 levels every other level versus the
            reference level (``fit(reference=)``), stacked, with a ``contrast``
            column ("high - placebo"), as R's treatment contrasts.
        q : sequence of float in (0, 1) or None, default None
            Levels of the quantile treatment effects; None: 0.1, 0.25, 0.5, 0.75, 0.9.
        y : sequence of float or None, default None
            Outcome values of the CDF differences; None: the outcome's quartiles.
        alpha : sequence of float in (0, 1) or None, default None
            Tail probabilities of the expected-shortfall differences; None: 0.1;
            ``[]``: none.
        level : float in (0, 1), default 0.95
            Level of the intervals.
        n_boot : int or None, default None
            Bootstrap draws; None: 499 where the estimator supports the
            bootstrap, else no intervals; 0: no intervals.
        seed : int or None, default None
            Seeds the multipliers; None: the fit's seed.
        target : {"smoothed", "regularised"}, default "smoothed"
            Bias-reduced or plain intervals (above).

        Returns
        -------
        DataFrame
            Columns ``profile``, ``term``, ``outcome``, ``at`` (q of a QTE, y of a
            CDF difference, α of an expected shortfall, NaN otherwise), ``estimate``, and with intervals
            ``std_error``, ``df`` (Satterthwaite degrees of freedom of the
            small-sample critical value; inf for normal ones), ``conf_low``,
            ``conf_high``; ``attrs`` records the interval method, level and draws.  A treatment with k ≥ 3 levels
            adds a first column ``contrast``.

        Raises
        ------
        ParameterError
            ``q`` outside (0, 1), a bad ``level`` or ``n_boot``, or ``n_boot > 0`` for
            an estimator without a linear second stage.
        DataError
            ``newdata`` lacks a column V is built from, or holds missing values.

        Warns
        -----
        CcmeWarning
            With intervals, where the smaller of the two arms has fewer than
            ``ccme.bootstrap.SMALL_ARM["intervals"]`` units (the distances'
            intervals then under-cover more; README, "Small arms").

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> table = res.effect(q=[0.5], n_boot=99)
        >>> sorted(set(table["term"]))
        ['cdf_diff', 'es_lower', 'es_upper', 'kolmogorov', 'mean_diff', 'mmd', 'qte', 'wasserstein']
        >>> list(table.columns[-4:])
        ['std_error', 'df', 'conf_low', 'conf_high']
        """
        from .bootstrap import (BAND_ORDER, EFFECT_SMALL_SAMPLE, REVERSE_INTERVAL_EFFECTS, SQUARED_INTERVAL_EFFECTS,
                                check_target, effect_intervals, restore_note, restored_v_bandwidths, warn_small_arms)
        from .effects import DEFAULT_QUANTILES, DEFAULT_TAILS, effect_estimates, effect_frame

        check_target(target)  # before any work
        treatment = self.design.treatment
        if arms is None and not treatment.binary:
            tables = [self.effect(newdata=newdata, arms=(treatment.label(arm), treatment.reference), q=q, y=y,
                                  alpha=alpha, level=level, n_boot=n_boot, seed=seed, target=target)
                      for arm in self.arms if arm != treatment.reference_code]
            table = pd.concat(tables, ignore_index=True)
            table.attrs.update(tables[0].attrs)
            return table
        pair = treatment.contrast(arms)

        frame, index = self._frame(newdata)
        V = self._v(frame)
        levels = check_levels(DEFAULT_QUANTILES if q is None else q, "q")
        tails = check_levels(DEFAULT_TAILS, "alpha") if alpha is None else (
            np.zeros(0) if np.size(alpha) == 0 else check_levels(alpha, "alpha"))
        one_dim = self.design.Y.shape[1] == 1
        if y is None:
            y_points = np.quantile(self.design.Y[:, 0], [0.25, 0.5, 0.75]) if one_dim else np.zeros(0)
        else:
            y_points = self.embeddings[pair[0]]._y(y)[:, 0] if one_dim else np.zeros(0)
        if not one_dim:
            levels, tails = np.zeros(0), np.zeros(0)
        if n_boot is None:
            n_boot = 499 if self.supports_bootstrap else 0
        if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
            raise ParameterError(f"`n_boot` must be a non-negative integer; got {n_boot!r}")
        estimates = effect_estimates(self, V, levels, y_points, tails, arms=pair)
        intervals = None
        if n_boot:
            if not self.supports_bootstrap:
                why = (f"method={self.method!r}" if not self.estimator.supports_bootstrap
                       else "a location stage saved without its units and residuals (an earlier ccme's file)")
                raise ParameterError(
                    f"intervals on the effects need a linear second stage (method='ridge'); {why} gives estimates "
                    f"only: pass n_boot=0"
                )
            warn_small_arms(self, pair, "intervals", stacklevel=2)
            intervals = effect_intervals(self, V, estimates, q=levels, y_points=y_points, level=level,
                                         n_boot=int(n_boot), seed=self.seed if seed is None else seed, alpha=tails,
                                         target=target, arms=pair)
        table = effect_frame(self, V, index, estimates, q=levels, y_points=y_points, alpha=tails,
                             intervals=intervals)
        if not treatment.binary:
            table.insert(0, "contrast", f"{treatment.label(pair[0])} - {treatment.label(pair[1])}")
        method = "none"
        if intervals:
            squared = [t for t in REVERSE_INTERVAL_EFFECTS if t in SQUARED_INTERVAL_EFFECTS]
            plain = [t for t in REVERSE_INTERVAL_EFFECTS if t not in SQUARED_INTERVAL_EFFECTS]
            parts = ([", ".join(plain)] if plain else []) + ([f"{', '.join(squared)} on the squared scale"]
                                                             if squared else [])
            reverse = f" (reverse percentiles for {'; '.join(parts)})" if parts else ""
            method = "multiplier bootstrap, symmetric basic" + reverse + (
                f", bias-reduced (iterated Tikhonov, order {BAND_ORDER}{restore_note(self, restored_v_bandwidths(self))})"
                + (", Student-t critical values with Satterthwaite df" if EFFECT_SMALL_SAMPLE else "")
                if target == "smoothed" else "")
        table.attrs.update(interval=method, target=target if intervals else None,
                           level=float(level) if intervals else None, n_boot=int(n_boot))
        return table

    def test_effect(self, *, newdata=None, arms=None, statistic="mmd", n_boot=499, seed=None, n_global=50):
        """Test H0: p(Y¹ | V = v) = p(Y⁰ | V = v), by a multiplier bootstrap (estimators with a linear second stage).

        T(v) = ‖μ̂₁(v) − μ̂₀(v)‖², the squared MMD (``statistic="mmd"``, d_y = 1,
        Gaussian outcome kernel), or ‖mean₁(v) − mean₀(v)‖² (``"mean"``, any
        d_y), at each V-point; the global statistic is their mean over the
        V-points.  Calibrated by the multiplier bootstrap of
        :mod:`ccme.bootstrap`, whose draws use each unit's second-stage
        residual scaled by 1 / √(1 − H_ii), H the second stage's hat matrix
        (HC2, MacKinnon and White 1985; ``ccme.bootstrap.EFFECT_TEST_LEVERAGE``:
        the in-sample residuals understate the noise where the smoother
        follows few units, and made the test reject 8–21% of true nulls at
        the 5% level below n = 100); p-values are (1 + #{T* ≥ T}) / (1 + n_boot).
        The smoothing biases of the two arms cancel under the null when each
        arm's estimate is one ridge smoother of its pseudo-outcome: a fit
        whose correction and plug-in part have their own penalties (λ₁ and
        λ₁ᵖ, as the tuned defaults choose) is tested with both parts at λ₁
        (``ccme.bootstrap.EFFECT_TEST_PENALTY``; with the split the test
        rejected 25–40% of true nulls at the 5% level, README "Small arms"),
        and the draws perturb the first stage too
        (``ccme.bootstrap.EFFECT_TEST_FIRST_STAGE``: the tuned first stage's
        noise made it reject 14% at n = 1000; with it 4.0–4.5% at
        n = 100–1000, and conservative with ``tune="none"``).
        Measured on simulated data by ``benchmarks/calibration.py``.  With a
        location stage (``fit(location=)``) the draws also move the mean
        model's coefficients (:class:`ccme.bootstrap._Located`; size:
        ``benchmarks/calibration.py size --location linear``).

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default None
            V-points to test at; None: ``n_global`` training rows drawn with
            ``seed`` (the global statistic then averages over V's empirical
            distribution).
        statistic : {"mmd", "mean"}, default "mmd"
            The squared MMD or the squared difference of the means.
        arms : pair of arms or None, default None
            The two arms compared, (a, b) (the hypothesis reads with Y¹ as Y^a
            and Y⁰ as Y^b); None: treated and control (a treatment with k ≥ 3
            levels needs the pair).
        n_boot : int, default 499
            Bootstrap draws (at least 10).
        seed : int or None, default None
            Seed of the multipliers (and of the rows drawn); None: the fit's seed.
        n_global : int, default 50
            Training rows tested at when ``newdata`` is None.

        Returns
        -------
        ccme.EffectTest

        Raises
        ------
        ParameterError
            For a method without a linear second stage, an unknown ``statistic``,
            or ``n_boot`` below 10.
        DataError
            ``statistic="mmd"`` with a multivariate outcome, or ``newdata`` that
            cannot be encoded.

        Warns
        -----
        CcmeWarning
            Where the smaller of the two arms has fewer than
            ``ccme.bootstrap.SMALL_ARM["effect"]`` units: the test's size was
            not measured there (README, "Small arms").

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> test = res.test_effect(newdata=ccme.datasets.PAPER_PROFILES, n_boot=99)
        >>> type(test).__name__, test.table.shape
        ('EffectTest', (2, 2))
        """
        from .bootstrap import test_effect

        seed = self.seed if seed is None else seed
        V, index = self._test_points(newdata, seed, n_global)
        pair = self.design.treatment.contrast(arms)
        return self._named_test(test_effect(self, V, index, statistic=statistic, n_boot=n_boot, seed=seed,
                           arms=pair), pair)

    def _named_test(self, test, pair):
        """``test`` with its hypothesis written with the levels' names (Y1, Y0 stand for arms a, b of ``pair``)."""
        treatment = self.design.treatment
        if treatment.binary and tuple(pair) == (1, 0):
            return test
        first, second = (f"Y[{treatment.label(a)}]" for a in pair)
        text = re.sub(r"Y([01])", lambda m: first if m.group(1) == "1" else second, test.hypothesis)
        return replace(test, hypothesis=text)

    def _test_points(self, newdata, seed, n_global):
        """The V-points of a test: ``n_global`` training rows drawn with ``seed`` for None, else ``newdata``."""
        if newdata is None:
            rng = np.random.default_rng(seed)
            rows = np.sort(rng.choice(self.n, size=min(int(n_global), self.n), replace=False))
            return self.design.V[rows], list(rows)
        frame, index = self._frame(newdata)
        return self._v(frame), index

    def test_dominance(self, *, newdata=None, arms=None, n_boot=499, seed=None, n_global=50):
        """Test H0: Y¹ first-order stochastically dominates Y⁰ given V = v (F₁(y | v) ≤ F₀(y | v) for all y).

        T(v) = sup_y (F̂₁ − F̂₀)(y)⁺ on a grid over the data, calibrated by the
        multiplier bootstrap at the least favourable null F₁ = F₀
        (:func:`ccme.bootstrap.shape_test`); a small p-value says that Y¹ is
        not larger than Y⁰ everywhere in distribution.  Swap the roles by
        reading ``1 − F``: test Y⁰ ≥ Y¹ by fitting with the other treated level.
        Size and power: ``benchmarks/calibration.py shape``.

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default None
            V-points to test at; None: ``n_global`` training rows drawn with ``seed``.
        arms : pair of arms or None, default None
            The two arms compared, (a, b) (the hypothesis reads with Y¹ as Y^a
            and Y⁰ as Y^b); None: treated and control (a treatment with k ≥ 3
            levels needs the pair).
        n_boot : int, default 499
            Bootstrap draws.
        seed : int or None, default None
            Seeds the multipliers (and the V-points for ``newdata=None``); None: the fit's seed.
        n_global : int, default 50
            Training rows tested at when ``newdata`` is None.

        Returns
        -------
        ccme.EffectTest
            Per V-point statistics and p-values, and the global test (mean of T(v)).

        Raises
        ------
        ParameterError
            A method without a linear second stage, or ``n_boot`` below 10.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Warns
        -----
        CcmeWarning
            With fewer than ``ccme.bootstrap.SMALL_ARM["dominance"]`` units in
            the smaller arm (the global test rejected 10.5% of true nulls at the
            5% level with arms of about 40; README, "Small arms").

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> test = res.test_dominance(newdata=ccme.datasets.PAPER_PROFILES, n_boot=49)
        >>> type(test).__name__, test.table.shape
        ('EffectTest', (2, 2))
        """
        from .bootstrap import shape_test

        seed = self.seed if seed is None else seed
        V, index = self._test_points(newdata, seed, n_global)
        pair = self.design.treatment.contrast(arms)
        return self._named_test(shape_test(self, V, index, hypothesis="dominance", n_boot=n_boot, seed=seed,
                          arms=pair), pair)

    def test_location_shift(self, *, newdata=None, arms=None, n_boot=499, seed=None, n_global=50):
        """Test H0: the effect at V = v is a pure location shift, Y¹ =ᵈ Y⁰ + δ(v).

        δ̂(v) is the difference of means; T(v) = sup_y |F̂₁(y | v) − F̂₀(y − δ̂ | v)|,
        calibrated by the multiplier bootstrap of the centred process with δ̂
        re-estimated in each draw (:func:`ccme.bootstrap.shape_test`), the
        constant-effect test of R's ``Counterfactual`` package.  A small p-value
        says the treatment changes the shape of the distribution, not only its
        location.  Size and power: ``benchmarks/calibration.py shape``.

        Parameters
        ----------
        newdata : DataFrame, "profiles" or None, default None
            V-points to test at; None: ``n_global`` training rows drawn with ``seed``.
        arms : pair of arms or None, default None
            The two arms compared, (a, b) (the hypothesis reads with Y¹ as Y^a
            and Y⁰ as Y^b); None: treated and control (a treatment with k ≥ 3
            levels needs the pair).
        n_boot : int, default 499
            Bootstrap draws.
        seed : int or None, default None
            Seeds the multipliers (and the V-points for ``newdata=None``); None: the fit's seed.
        n_global : int, default 50
            Training rows tested at when ``newdata`` is None.

        Returns
        -------
        ccme.EffectTest

        Raises
        ------
        ParameterError
            A method without a linear second stage, or ``n_boot`` below 10.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> test = res.test_location_shift(newdata=ccme.datasets.PAPER_PROFILES, n_boot=49)
        >>> test.table.columns.tolist()
        ['statistic', 'p_value']
        """
        from .bootstrap import shape_test

        seed = self.seed if seed is None else seed
        V, index = self._test_points(newdata, seed, n_global)
        pair = self.design.treatment.contrast(arms)
        return self._named_test(shape_test(self, V, index, hypothesis="location", n_boot=n_boot, seed=seed,
                          arms=pair), pair)

    def bands(self, level=0.9, *, newdata=PROFILES, arm=None, y=None, feature="density", n_boot=499, seed=None,
              target="smoothed"):
        """Pointwise and simultaneous bootstrap bands for the smoothed density or CDF (linear second stages).

        The bands are for the unit-mass estimate Σ_k c_k(v) F(y_k, y) / Σ_k c_k(v)
        (not clipped, not made monotone) of the kernel-smoothed target
        E[k(Y^a, y) | V = v] (density) or E[K(y − Y^a) | V = v] (CDF), by the
        multiplier bootstrap of :mod:`ccme.bootstrap`.  With a location stage
        (``fit(location=)``) they are the residual fit's bands at y − m̂_a(v),
        one V-point at a time, with the mean model's coefficient error as one
        more noise term (``target="smoothed"``; :func:`ccme.bootstrap._located_bands`).

        ``target="smoothed"`` (default) makes them bias-aware, in the spirit of
        robust bias correction (Calonico, Cattaneo & Farrell 2018): they are
        centred on the bias-reduced estimate of iterated Tikhonov regularisation
        of order ``ccme.bootstrap.BAND_ORDER`` (the second stage refitted to its
        own residuals, which leaves λ₁ and the bandwidths as tuned and shrinks
        the regularisation bias) and their width is that estimate's bootstrap
        spread, with the first stage's noise included (its linearisation,
        :meth:`ccme.estimators.base.LinearSecondStage.first_stage_influence`,
        for kernel-ridge first stages; others are held fixed).  So the band's
        centre differs slightly from :meth:`density`.  The bias-aware
        *simultaneous* bands (holding over the whole grid at once) are the
        sup-t band around the estimate joined with a band around the second
        stage refitted with the V bandwidths × n^(−1/11) and λ₁ × 2/15, with
        leave-one-out residuals (``Bands.estimate_simultaneous``,
        ``Bands.v_factor``): a sup over the grid is decided where the
        V-smoothing bias is largest.  V covariates the tuning dropped are given
        back to both, at the widest finite bandwidth of the search
        (:func:`ccme.bootstrap.restored_v_bandwidths`): a covariate the kernel
        ignores leaves a bias no Tikhonov order reduces.
        ``target="regularised"`` gives the plain bands of the point estimate,
        which cover the ridge-shrunk target only.  ``Bands.target`` says which.
        Coverage is measured in README ("Effects and uncertainty").

        Parameters
        ----------
        level : float in (0, 1), default 0.9
            Coverage level of the bands.
        newdata : DataFrame, "profiles" or None, default "profiles"
            The V-points: V at its quartiles (:meth:`profiles`), the rows of a
            DataFrame with the columns V is built from, or None for the training
            data's rows.
        arm : 1, 0, bool or a treatment level, default None
            The arm: 1 (treated) or 0 (control), ``True``/``False``, or a level of
            the treatment column; None: the treated arm (a treatment with k ≥ 3
            levels needs the level).
        y : array or None, default None
            Increasing outcome grid; None: :meth:`default_grid` with 200 points.
        feature : {"density", "cdf"}, default "density"
            Whether the bands are for the density or the CDF.
        n_boot : int, default 499
            Bootstrap draws (at least 10).
        seed : int or None, default None
            Seed of the multipliers; None: the fit's seed.
        target : {"smoothed", "regularised"}, default "smoothed"
            What the bands cover (above).

        Returns
        -------
        ccme.Bands

        Raises
        ------
        ParameterError
            For a method without a linear second stage, an unknown ``feature`` or
            ``target``, ``level`` outside (0, 1), ``n_boot`` below 10, or an ``arm``
            that is not one of the two arms.
        DataError
            A multivariate outcome, or ``newdata`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> b = res.bands(0.9, newdata=ccme.datasets.PAPER_PROFILES, arm=1, n_boot=99)
        >>> b.estimate.shape, b.lower_simultaneous.shape
        ((2, 200), (2, 200))
        """
        from .bootstrap import bands

        arm = self.arm_index(arm)
        if self.design.Y.shape[1] != 1:
            raise DataError("bands are available for a one-dimensional outcome")
        frame, index = self._frame(newdata)
        V = self._v(frame)
        grid = self.default_grid(200) if y is None else self.embedding(arm)._y(y)[:, 0]
        return bands(self, V, index, grid[:, None], arm=arm, feature=feature, level=level, n_boot=n_boot,
                     seed=self.seed if seed is None else seed, target=target)

    # -- plots ----------------------------------------------------------------
    def plot(self, *, newdata=PROFILES, arm="both", y=None, ax=None, truth=None, bands=False, level=0.9, n_boot=299,
             **kwargs):
        """Estimated densities of Y¹ and/or Y⁰ at each V-profile; returns the Axes.

        Parameters
        ----------
        newdata : DataFrame or "profiles", default "profiles"
            The V-points, one curve each: V at its quartiles (:meth:`profiles`) or
            the rows of a DataFrame with the columns V is built from.
        arm : {"both", "all", 1, 0} or a treatment level, default "both"
            The arm(s) drawn: "both"/"all" every arm (treated solid, control
            dashed; k ≥ 3 levels: a line style per level), or one arm.
        y : array or None, default None
            Outcome grid; None: :meth:`default_grid`.
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.
        truth : callable or None, default None
            ``truth(y, profile_row: DataFrame, arm) -> density``, drawn dotted.
        bands : bool, default False
            Shade the simultaneous ``level`` bootstrap band of the smoothed density.
        level : float, default 0.9
            Coverage level of the bands.
        n_boot : int, default 299
            Bootstrap draws of the bands.
        **kwargs
            Passed to ``Axes.plot`` for the estimates.

        Returns
        -------
        matplotlib Axes

        Raises
        ------
        ParameterError
            ``arm`` is neither "both" nor one of the two arms, ``newdata`` is None,
            or ``bands=True`` for a method without a linear second stage.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> type(res.plot(newdata=ccme.datasets.PAPER_PROFILES, arm=1)).__name__
        'Axes'
        """
        from .plotting import plot_densities

        return plot_densities(self, newdata=newdata, arm=arm, y=y, ax=ax, truth=truth, bands=bands, level=level,
                              n_boot=n_boot, **kwargs)

    def plot_effect(self, *, newdata=PROFILES, arms=None, q=None, bands=True, level=0.9, n_boot=299, seed=None,
                    ax=None, **kwargs):
        """Quantile treatment effect curves q ↦ Q₁(q | v) − Q₀(q | v), with bootstrap bands; returns the Axes.

        The dotted line is the difference of the means at each profile; the
        bands are pointwise (:func:`ccme.bootstrap.qte_bands`).

        Parameters
        ----------
        newdata : DataFrame or "profiles", default "profiles"
            The V-points, one curve each: V at its quartiles (:meth:`profiles`) or
            the rows of a DataFrame with the columns V is built from.
        arms : pair of arms or None, default None
            The comparison (a, b), Q_a − Q_b; None: treated and control (a
            treatment with k ≥ 3 levels needs the pair).
        q : sequence of float in (0, 1) or None, default None
            Quantile levels on the x-axis; None: 37 levels from 0.05 to 0.95.
        bands : bool, default True
            Shade pointwise ``level`` bootstrap bands (linear second stages only).
        level : float, default 0.9
            Coverage level of the bands.
        n_boot : int, default 299
            Bootstrap draws of the bands.
        seed : int or None, default None
            Seed of the bootstrap; None: the fit's seed.
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.
        **kwargs
            Passed to ``Axes.plot`` for the curves.

        Returns
        -------
        matplotlib Axes

        Raises
        ------
        ParameterError
            ``newdata`` is None, or ``bands=True`` for a method without a linear
            second stage.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> type(res.plot_effect(newdata=ccme.datasets.PAPER_PROFILES, bands=False)).__name__
        'Axes'
        """
        from .plotting import plot_effect

        return plot_effect(self, newdata=newdata, arms=arms, q=q, bands=bands, level=level, n_boot=n_boot, seed=seed,
                           ax=ax, **kwargs)

    def plot_overlap(self, *, ax=None, bins=30):
        """Histograms of the cross-fitted propensity scores by arm, with the clipping bounds; returns the Axes.

        Parameters
        ----------
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.
        bins : int, default 30
            Number of equal-width bins over [0, 1].

        Returns
        -------
        matplotlib Axes

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> type(res.plot_overlap(bins=20)).__name__
        'Axes'
        """
        from .plotting import plot_overlap

        return plot_overlap(self, ax=ax, bins=bins)

    def plot_calibration(self, *, ax=None):
        """Reliability diagram of the cross-fitted propensity scores (treated share against mean score per bin).

        Points on the diagonal are calibrated scores; the title gives the
        Brier score and the learner (:attr:`propensity_report`).

        Parameters
        ----------
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.

        Returns
        -------
        matplotlib Axes

        Raises
        ------
        NotFittedError
            For a result without a propensity report.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none",
        ...                propensity="logistic", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> type(res.plot_calibration()).__name__
        'Axes'
        """
        from .plotting import plot_calibration

        return plot_calibration(self, ax=ax)

    def plot_cdf(self, *, newdata=PROFILES, arm="both", y=None, bands=False, level=0.9, n_boot=299, ax=None,
                 **kwargs):
        """Estimated conditional CDFs of Y¹ and/or Y⁰ at each V-profile (optional bands); returns the Axes.

        Parameters
        ----------
        newdata : DataFrame or "profiles", default "profiles"
            The V-points, one curve each: V at its quartiles (:meth:`profiles`) or
            the rows of a DataFrame with the columns V is built from.
        arm : {"both", "all", 1, 0} or a treatment level, default "both"
            The arm(s) drawn: "both"/"all" every arm (treated solid, control
            dashed; k ≥ 3 levels: a line style per level), or one arm.
        y : array or None, default None
            Outcome grid; None: :meth:`default_grid`.
        bands : bool, default False
            Shade the simultaneous ``level`` bootstrap band of the smoothed CDF.
        level : float, default 0.9
            Coverage level of the bands.
        n_boot : int, default 299
            Bootstrap draws of the bands.
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.
        **kwargs
            Passed to ``Axes.plot`` for the estimates.

        Returns
        -------
        matplotlib Axes

        Raises
        ------
        ParameterError
            ``arm`` is neither "both" nor one of the two arms, ``newdata`` is None,
            or ``bands=True`` for a method without a linear second stage.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> type(res.plot_cdf(newdata=ccme.datasets.PAPER_PROFILES, arm="both")).__name__
        'Axes'
        """
        from .plotting import plot_cdfs

        return plot_cdfs(self, newdata=newdata, arm=arm, y=y, bands=bands, level=level, n_boot=n_boot, ax=ax,
                         **kwargs)

    def training_history(self) -> pd.DataFrame:
        """Training curves of a neural fit: one row per (arm, fold, stage, epoch).

        Columns ``arm``, ``repetition`` and ``fold`` (1-based; repetitions
        of the cross-fit, ``fit(n_rep=)``), ``stage`` (1: nuisance, 2:
        pseudo-outcome regression; one-step has stage 1 only), ``epoch``,
        ``train_loss`` and ``validation_loss`` (NaN without a validation
        split), and ``best`` (the epoch whose weights were kept).  Trains any
        arm not yet used (arms are trained on first use).

        Returns
        -------
        DataFrame
            The columns above.

        Raises
        ------
        ParameterError
            For a method not trained by gradient descent (``"ridge"``).

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> nn = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), method="neural_kernel",
        ...               hidden=(8,), epochs=3, M=10, tune="none", seed=1)  # doctest: +SKIP
        >>> list(nn.training_history().columns)  # doctest: +SKIP
        ['arm', 'repetition', 'fold', 'stage', 'epoch', 'train_loss', 'validation_loss', 'best']
        >>> res.training_history()
        Traceback (most recent call last):
        ccme.errors.ParameterError: method 'ridge' has no training history (it is not trained by gradient descent)
        """
        return self.estimator.training_history(self.embeddings, self.n_folds)

    def plot_training(self, *, ax=None, **kwargs):
        """Loss per epoch of each stage, fold and arm of a neural fit (validation dashed); returns the Axes.

        Parameters
        ----------
        ax : matplotlib Axes or None, default None
            Axes to draw on; None: a new figure.
        **kwargs
            Passed to ``Axes.plot`` for the loss curves.

        Returns
        -------
        matplotlib Axes

        Raises
        ------
        ParameterError
            For a method not trained by gradient descent (``"ridge"``).

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> import matplotlib; matplotlib.use("Agg")
        >>> nn = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), method="neural_kernel",
        ...               hidden=(8,), epochs=3, M=10, tune="none", seed=1)  # doctest: +SKIP
        >>> type(nn.plot_training()).__name__  # doctest: +SKIP
        'Axes'
        """
        from .plotting import plot_training

        return plot_training(self, ax=ax, **kwargs)

    def plot_tuning(self, *, ax=None, **kwargs):
        """Criterion curves of the automatic tuning, one panel per tuned hyperparameter.

        Parameters
        ----------
        ax : matplotlib Axes, sequence of Axes or None, default None
            One Axes per tuned hyperparameter (in the order λ₀, λ₁, σ_y); None:
            a new figure.
        **kwargs
            Passed to ``Axes.plot`` for the criterion curves.

        Returns
        -------
        ndarray of Axes

        Raises
        ------
        ParameterError
            Nothing was tuned (``tune="none"``, or every hyperparameter was set), or
            ``ax`` does not hold one Axes per tuned hyperparameter.

        Examples
        --------
        >>> import ccme
        >>> import matplotlib; matplotlib.use("Agg")
        >>> data = ccme.datasets.paper_simulation(300, seed=1)
        >>> res = ccme.fit("y ~ a | x1 | x2", data, tune={"lam1": [0.01, 0.1, 1.0]}, seed=1)
        >>> res.plot_tuning().shape
        (1,)
        """
        from .plotting import plot_tuning

        return plot_tuning(self, ax=ax, **kwargs)

    # -- serialisation --------------------------------------------------------
    STATE_SCHEMA = "ccme.CCMEResult"
    #: Version 2 added ``sampling_weights`` (None without); version 1 is read as a fit without them.  Version 3 added
    #: each embedding's ``location`` (None without); earlier versions are read as fits without a location stage.
    STATE_VERSION = 3
    _SCALARS = ("call", "method", "mode", "seed", "propensity", "clip")

    def to_state(self) -> dict:
        """The whole fit as a versioned state for :mod:`ccme.io` (every arm's fold estimators built first).

        Each part of the result writes its own state (the design with its
        formula, the folds, the propensity diagnostics, the tuning report, the
        hyperparameters, each fold-arm), so adding an attribute never changes
        the file format by accident.

        Returns
        -------
        dict
            Nested dicts, lists, scalars and arrays, with ``schema`` and ``version``.

        Raises
        ------
        FormatError
            When a part of the fit cannot be stored.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> state = res.to_state()
        >>> state["schema"], state["version"]
        ('ccme.CCMEResult', 3)
        """
        from .estimators.base import value_state
        from .io import make_state

        embeddings = {
            str(arm): {"readout": emb.y_kernel.to_state(), "cdf_readout": emb.cdf_kernel.to_state(),
                       "parts": [part.to_state() for part in emb.parts],
                       "location": None if emb.location is None else emb.location.to_state()}
            for arm, emb in self.embeddings.items()
        }
        return make_state(
            self.STATE_SCHEMA, self.STATE_VERSION, **{name: getattr(self, name) for name in self._SCALARS},
            design=self.design.to_state(), folds=[f.to_state() for f in self.folds],
            options=value_state(dict(self.options)), params=self.params.to_state(),
            propensity_columns=list(self.propensity_columns), outcome_columns=list(self.outcome_columns),
            overlap=self.overlap.to_state(), embeddings=embeddings,
            timing={k: float(v) for k, v in self.timing.items()},
            tuning=None if self.tuning is None else self.tuning.to_state(),
            sampling_weights=None if self.sampling_weights is None else self.sampling_weights.to_state(),
        )

    @classmethod
    def from_state(cls, state) -> "CCMEResult":
        """Inverse of :meth:`to_state`; fold-arms are rebuilt only through the known estimators' types.

        Parameters
        ----------
        state : dict
            A state written by :meth:`to_state`.

        Returns
        -------
        CCMEResult

        Raises
        ------
        FormatError
            For a state of another schema or version, or with unknown parts.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> ccme.CCMEResult.from_state(res.to_state()).n
        300
        """
        from .crossfit import Fold
        from .errors import FormatError
        from .estimators import get_estimator
        from .estimators.base import Parameters, value_from_state
        from .formula import Design
        from .io import check_schema, int_keys
        from .kernels import Kernel
        from .location import LocationModel
        from .propensity import Overlap
        from .tuning import TuningReport

        from .sampling_weights import SamplingWeights

        keys = (*cls._SCALARS, "design", "folds", "options", "params", "propensity_columns", "outcome_columns",
                "overlap", "embeddings", "timing", "tuning")
        version = check_schema(state, cls.STATE_SCHEMA, (1, 2, cls.STATE_VERSION),
                               keys=keys if isinstance(state, dict) and state.get("version") == 1
                               else (*keys, "sampling_weights"))
        stored_weights = None if version == 1 else state["sampling_weights"]
        sampling = None if stored_weights is None else SamplingWeights.from_state(stored_weights)
        design = Design.from_state(state["design"])
        if sampling is not None and len(sampling.values) != design.n:
            raise FormatError("the stored sampling weights do not have one value per unit of the design")
        params = Parameters.from_state(state["params"])
        estimator = get_estimator(state["method"])
        readers = _fold_arm_readers()
        outcome_range = (design.Y.min(axis=0), design.Y.max(axis=0))
        embeddings = {}
        for arm, node in int_keys(state["embeddings"], what="the stored embeddings").items():
            parts = []
            for part in node["parts"]:
                reader = readers.get(part.get("schema") if isinstance(part, dict) else None)
                if reader is None:
                    raise FormatError(f"a stored fold-arm has the unknown schema {str(part.get('schema'))[:40]!r}")
                parts.append(reader(part))
            # Files written before the CDF had its own read-out kernel read it out with the density's.
            cdf_kernel = Kernel.from_state(node["cdf_readout"]) if "cdf_readout" in node else None
            location = None if version < 3 or node.get("location") is None else LocationModel.from_state(node["location"])
            if location is not None and (location.d_v != design.V.shape[1] or location.d_y != design.Y.shape[1]):
                raise FormatError("a stored location model does not match the design's V and outcome")
            embeddings[arm] = Embedding(parts, Kernel.from_state(node["readout"]), cdf_kernel=cdf_kernel,
                                        rkhs_kernel=params.kernels["y"], outcome_range=outcome_range,
                                        encode=design.encode_v, arm=arm, location=location)
        if set(embeddings) != set(design.arms):
            raise FormatError("the stored result does not hold every arm's embedding")
        return cls(
            call=state["call"], design=design, method=state["method"], mode=state["mode"],
            folds=tuple(Fold.from_state(f) for f in state["folds"]), seed=state["seed"], estimator=estimator,
            options=value_from_state(state["options"]), params=params, propensity=state["propensity"],
            propensity_columns=tuple(state["propensity_columns"]), outcome_columns=tuple(state["outcome_columns"]),
            overlap=Overlap.from_state(state["overlap"]), embeddings=embeddings, timing=dict(state["timing"]),
            clip=state["clip"], tuning=None if state["tuning"] is None else TuningReport.from_state(state["tuning"]),
            sampling_weights=sampling,
        )

    def save(self, path, *, compress: bool = False):
        """Save the fitted result to ``path``, in a format whose loading cannot execute code (no pickle).

        One ZIP archive: the arrays in NumPy's ``.npy`` format, everything
        else in JSON, with checksums (:mod:`ccme.io` documents the layout),
        holding :meth:`to_state`.  Every arm's fold estimators are built first
        (neural arms are trained on first use), so the file holds the whole
        fit; :func:`ccme.load` gives a result with the same densities, CDFs,
        moments and summaries, bit for bit, and encodes ``newdata`` as this one
        does.

        Parameters
        ----------
        path : str or path-like
        compress : bool, default False
            Deflate the entries (smaller, slower; fitted weights compress little).

        Returns
        -------
        pathlib.Path

        Raises
        ------
        FormatError
            When a part of the fit cannot be stored.

        Examples
        --------
        >>> import ccme, tempfile, os
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> path = res.save(os.path.join(tempfile.mkdtemp(), "fit.ccme"))
        >>> ccme.load(path).n
        300
        """
        from .io import write_archive

        return write_archive(path, self.to_state(), compress=compress)


def load(path) -> CCMEResult:
    """Load a result saved by :meth:`CCMEResult.save`.

    Parameters
    ----------
    path : str or path-like
        The file written by :meth:`CCMEResult.save`.

    Returns
    -------
    CCMEResult

    Raises
    ------
    FormatError
        For a file that is not a ccme archive, is damaged or edited, or was
        written by another version of the format (the message names both
        versions and says to fit again).

    Examples
    --------
    >>> import ccme, tempfile, os
    >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
    >>> path = res.save(os.path.join(tempfile.mkdtemp(), "fit.ccme"))
    >>> ccme.load(path).mean(newdata=ccme.datasets.PAPER_PROFILES).shape
    (2,)
    """
    from .io import read_object

    return read_object(path, CCMEResult.from_state)


def _fold_arm_readers() -> dict:
    """Schema name → ``from_state`` of every fold-arm type the package writes (no name read from a file is resolved)."""
    from .estimators.deep_feature import DeepFeatureFoldArm
    from .estimators.forest_first_stage import ForestRidgeFoldArm
    from .estimators.neural_kernel import NeuralKernelFoldArm
    from .errors import FormatError
    from .estimators.base import SplitSecondStage
    from .estimators.lowrank import LowRankFoldArm
    from .estimators.ridge import RidgeFoldArm

    readers = {t.STATE_SCHEMA: t.from_state
               for t in (RidgeFoldArm, ForestRidgeFoldArm, LowRankFoldArm, DeepFeatureFoldArm, NeuralKernelFoldArm)}

    def read_term(state):
        # a term of a split fold-arm is one of the types above (never another split one)
        reader = readers.get(state.get("schema") if isinstance(state, dict) else None)
        if reader is None:
            schema = state.get("schema") if isinstance(state, dict) else None
            raise FormatError(f"a stored fold-arm term has the unknown schema {str(schema)[:40]!r}")
        return reader(state)

    readers[SplitSecondStage.STATE_SCHEMA] = lambda state: SplitSecondStage.from_state(state, read_term)
    return readers
