"""The fitted result: conditional counterfactual distributions of both arms."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import DataError, ParameterError

__all__ = ["CCMEResult"]

_ARMS = (1, 0)


class CCMEResult:
    """Estimated conditional counterfactual distributions p(Y¹ | V) and p(Y⁰ | V).

    Returned by :func:`ccme.fit`; holds, for each arm, the fitted embedding
    μ̂_{Y^a|V} (the average of the cross-fitting folds' estimates) and every
    choice that produced it.  The functionals take ``newdata`` (a DataFrame
    with the columns V is built from; ``None`` means the training data) and
    ``arm`` (1: treated, 0: control).

    Attributes
    ----------
    method, mode : str
    seed : int
        The seed used (drawn when ``fit`` got ``seed=None``).
    options : dict
        The hyperparameters as given (defaults filled in, rules unresolved).
    hyperparameters : dict
        The hyperparameters as used (rules such as the median heuristic resolved).
    kernels : dict
        ``"x"``, ``"v"``, ``"y"`` → :class:`ccme.kernels.Kernel` as used
        (``"y"``, the outcome kernel, for every method).
    penalties : dict
        ``"lam0"``, ``"lam1"`` → {arm: λ} in the paper's convention K + nλI
        (for the methods that have them).
    overlap : ccme.propensity.Overlap
        Cross-fitted propensity scores and their diagnostics.
    timing : dict
        Seconds spent in each step of the fit.
    """

    def __init__(self, *, call, design, method, mode, folds, seed, estimator, options, prepared, propensity,
                 propensity_columns, outcome_columns, overlap, embeddings, timing, clip):
        self.call = call
        self.design = design
        self.formula = design.formula
        self.method = method
        self.mode = mode
        self.folds = folds
        self.seed = seed
        self.estimator = estimator
        self.options = options
        self.hyperparameters = prepared
        self.kernels = prepared["kernels"]
        self.penalties = {k: prepared[k] for k in ("lam0", "lam1") if k in prepared}
        self.propensity = propensity
        self.propensity_columns = propensity_columns
        self.outcome_columns = outcome_columns
        self.overlap = overlap
        self.timing = timing
        self.clip = clip
        self._embeddings = embeddings

    # -- basic facts --------------------------------------------------------
    @property
    def n(self) -> int:
        return self.design.n

    @property
    def n_arm(self) -> dict:
        return {arm: int(np.sum(self.design.A == arm)) for arm in _ARMS}

    @property
    def n_folds(self) -> int:
        return len(self.folds)

    @property
    def propensity_scores(self) -> np.ndarray:
        """Cross-fitted π̂(X_i) before clipping (each unit's score comes from the fold that left it out)."""
        return self.overlap.scores.copy()

    def __repr__(self) -> str:
        n1, n0 = self.n_arm[1], self.n_arm[0]
        v = ", ".join(self.design.v_variables)
        return (
            f"<ccme.CCMEResult: {self.method}/{self.mode}, {self.n_folds} folds, "
            f"n={self.n} ({n1} treated, {n0} control), V = ({v})>"
        )

    # -- inputs -------------------------------------------------------------
    def _embedding(self, arm):
        if isinstance(arm, (bool, np.bool_)):
            arm = int(arm)
        if arm not in _ARMS:
            raise ParameterError(f"`arm` must be 1 (treated) or 0 (control); got {arm!r}")
        return self._embeddings[int(arm)]

    def _v(self, newdata) -> np.ndarray:
        if newdata is None:
            return self.design.V
        return self.design.encode_v(newdata)

    def _y(self, y) -> np.ndarray:
        d = self.design.Y.shape[1]
        values = np.asarray(y, dtype=np.float64)
        if values.ndim == 0:
            values = values.reshape(1, 1)
        if values.ndim == 1:
            values = values[:, None] if d == 1 else values[None, :]
        if values.ndim != 2 or values.shape[1] != d:
            raise DataError(f"`y` must have {d} column(s) (the outcome's dimension); got shape {np.shape(y)}")
        if not np.all(np.isfinite(values)):
            raise DataError("`y` contains missing or infinite values")
        return np.ascontiguousarray(values)

    def _squeeze(self, values: np.ndarray) -> np.ndarray:
        return values[:, 0] if values.shape[1] == 1 else values

    # -- functionals --------------------------------------------------------
    def density(self, y, newdata=None, arm=1, normalize: bool = True) -> np.ndarray:
        """Estimated conditional counterfactual density p̂(y | V = v) of arm ``arm``.

        Implements eq. (emp_density) of the paper (Section "Inference with
        Ridge Regression Estimator") with the normalised outcome kernel.

        Parameters
        ----------
        y : array (G,) or (G, d_y)
            Outcome values; with ``normalize=True`` and d_y = 1 an increasing grid.
        newdata : DataFrame, optional
            Rows at which to condition (the columns V is built from).
        arm : {1, 0}
        normalize : bool, default True
            Clip negative values and rescale each row to integrate to one on
            the grid (d_y = 1; for d_y > 1 only the clipping).

        Returns
        -------
        ndarray (n_newdata, G)
        """
        return self._embedding(arm).density(self._v(newdata), self._y(y), normalize)

    def cdf(self, y, newdata=None, arm=1, normalize: bool = True) -> np.ndarray:
        """Estimated conditional CDF P̂(Y^a ≤ y | V = v), shape (n_newdata, G).

        Closed form: Σ_k c_k(v) Φ((y − y_k)/σ) for the Gaussian outcome kernel
        (the Laplace kernel's CDF for it).  ``normalize=True`` rescales to unit
        mass, clips to [0, 1] and makes it non-decreasing in y (d_y = 1).
        """
        return self._embedding(arm).cdf(self._v(newdata), self._y(y), normalize)

    def mean(self, newdata=None, arm=1) -> np.ndarray:
        """Estimated E[Y^a | V = v]: Σ_k c_k(v) y_k / Σ_k c_k(v).  Shape (n,) or (n, d_y)."""
        _, mean, _ = self._embedding(arm).moments(self._v(newdata))
        return self._squeeze(mean)

    def var(self, newdata=None, arm=1) -> np.ndarray:
        """Variance of the estimated (kernel-smoothed) distribution of Y^a given V = v."""
        _, _, var = self._embedding(arm).moments(self._v(newdata))
        return self._squeeze(var)

    def sd(self, newdata=None, arm=1) -> np.ndarray:
        """Standard deviation of the estimated distribution of Y^a given V = v."""
        return np.sqrt(self.var(newdata, arm))

    # -- profiles, tables, summary, plots ----------------------------------
    def profiles(self, quantiles=(0.25, 0.5, 0.75)) -> pd.DataFrame:
        """V-profiles at quantiles of the data: numeric columns at each quantile, others at their mode."""
        return self.design.profiles(quantiles)

    def tidy(self, newdata=None) -> pd.DataFrame:
        """One row per (profile, arm): estimated mean and standard deviation of Y^a | V = v."""
        if newdata is None:
            newdata = self.profiles()
        V = self._v(newdata)
        index = list(getattr(newdata, "index", range(len(V))))
        rows = []
        for arm in _ARMS:
            _, mean, var = self._embedding(arm).moments(V)
            for i, label in enumerate(index):
                for j, name in enumerate(self.design.y_names):
                    rows.append(
                        {"profile": label, "arm": arm, "outcome": name, "mean": mean[i, j], "sd": np.sqrt(var[i, j])}
                    )
        return pd.DataFrame(rows)

    def summary(self, newdata=None):
        """An R-style summary (a printable object; it prints nothing by itself)."""
        from .summary import Summary

        return Summary.from_result(self, newdata)

    def default_grid(self, size: int = 400) -> np.ndarray:
        """An outcome grid covering the data with a margin of three outcome bandwidths (d_y = 1)."""
        if self.design.Y.shape[1] != 1:
            raise DataError("a default grid exists only for a one-dimensional outcome; pass `y`")
        sigma = self.kernels["y"].bandwidth_array[0]
        lo, hi = self.design.Y.min() - 3 * sigma, self.design.Y.max() + 3 * sigma
        return np.linspace(lo, hi, size)

    def plot(self, newdata=None, arm="both", y=None, ax=None, truth=None, **kwargs):
        """Estimated densities of Y¹ and/or Y⁰ at each V-profile; returns the Axes.

        Parameters
        ----------
        newdata : DataFrame, optional
            Profiles to draw (default: V at its 25%, 50% and 75% quantiles).
        arm : {"both", 1, 0}
        y : array, optional
            Outcome grid (default :meth:`default_grid`).
        ax : matplotlib Axes, optional
        truth : callable, optional
            ``truth(y, profile_row: DataFrame, arm) -> density`` drawn dotted.
        **kwargs
            Passed to ``Axes.plot`` for the estimates.
        """
        from .plotting import plot_densities

        return plot_densities(self, newdata=newdata, arm=arm, y=y, ax=ax, truth=truth, **kwargs)

    def training_history(self) -> pd.DataFrame:
        """Training curves of a neural fit: one row per (arm, fold, stage, epoch).

        Columns ``arm``, ``fold`` (1-based), ``stage`` (1: nuisance, 2:
        pseudo-outcome regression; one-step has stage 1 only), ``epoch``,
        ``train_loss`` and ``validation_loss`` (NaN without a validation
        split), and ``best`` (the epoch whose weights were kept).  Trains any
        arm not yet used (arms are trained on first use).
        """
        rows = []
        for arm in _ARMS:
            for fold, part in enumerate(self._embedding(arm).parts, start=1):
                history = getattr(part, "history", None)
                if history is None:
                    raise ParameterError(f"method {self.method!r} has no training history (it is not trained by "
                                         "gradient descent)")
                for stage, h in sorted(history.items()):
                    for epoch, loss in enumerate(h.train):
                        rows.append({
                            "arm": arm, "fold": fold, "stage": stage, "epoch": epoch + 1, "train_loss": loss,
                            "validation_loss": h.validation[epoch] if epoch < len(h.validation) else np.nan,
                            "best": epoch == h.best_epoch,
                        })
        return pd.DataFrame(rows)

    def plot_training(self, ax=None, **kwargs):
        """Loss per epoch of each stage, fold and arm of a neural fit (validation dashed); returns the Axes."""
        from .plotting import plot_training

        return plot_training(self, ax=ax, **kwargs)
