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
    tuning : ccme.tuning.TuningReport
        What the automatic tuning chose, its criterion curves and its time.
    """

    def __init__(self, *, call, design, method, mode, folds, seed, estimator, options, prepared, propensity,
                 propensity_columns, outcome_columns, overlap, embeddings, timing, clip, tuning=None):
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
        self.tuning = tuning

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

    def outcome_kernel(self, arm=1):
        """The (normalised) outcome kernel with which arm ``arm``'s density, CDF and moments are read out."""
        return self._embedding(arm).y_kernel

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

    def summary(self, newdata=None, n_boot: int = 0):
        """An R-style summary (a printable object; it prints nothing by itself).

        Its effects section gives, at each profile, the difference of means and
        the MMD between the arms; ``n_boot > 0`` adds the p-value of
        :meth:`test_effect` with that many bootstrap draws (off by default: the
        bootstrap costs seconds at large n).
        """
        from .summary import Summary

        return Summary.from_result(self, newdata, n_boot=n_boot)

    def default_grid(self, size: int = 400) -> np.ndarray:
        """An outcome grid covering the data with a margin of three outcome bandwidths (d_y = 1)."""
        if self.design.Y.shape[1] != 1:
            raise DataError("a default grid exists only for a one-dimensional outcome; pass `y`")
        sigma = self.kernels["y"].bandwidth_array[0]
        lo, hi = self.design.Y.min() - 3 * sigma, self.design.Y.max() + 3 * sigma
        return np.linspace(lo, hi, size)

    def plot(self, newdata=None, arm="both", y=None, ax=None, truth=None, bands=False, level=0.9, n_boot=299,
             **kwargs):
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
        bands : bool, default False
            Shade the simultaneous ``level`` bootstrap band of the smoothed
            density (:meth:`bands`, method="ridge").
        **kwargs
            Passed to ``Axes.plot`` for the estimates.
        """
        from .plotting import plot_densities

        return plot_densities(self, newdata=newdata, arm=arm, y=y, ax=ax, truth=truth, bands=bands, level=level,
                              n_boot=n_boot, **kwargs)

    # -- beyond the density: functionals, effects, uncertainty (issue 6) ---
    def quantile(self, q, newdata=None, arm=1) -> np.ndarray:
        """Quantiles of the estimated distribution of Y^a | V = v (d_y = 1).

        Inverts the normalised CDF (unit mass, clipped to [0, 1], made
        non-decreasing), so the result is monotone in ``q`` even where the raw
        estimate is not; located on a 2001-point grid over the data ± 6 outcome
        bandwidths and interpolated linearly (error at most one grid step).

        Parameters
        ----------
        q : float or array of floats in (0, 1)
        newdata : DataFrame, optional
        arm : {1, 0}

        Returns
        -------
        ndarray (n_newdata, len(q)), or (n_newdata,) for a scalar ``q``
        """
        from .effects import fine_grid

        levels = _levels(q, "q")
        emb = self._embedding(arm)
        emb._require_1d("the quantile")
        out = emb.quantile(self._v(newdata), levels, fine_grid(self))
        return out[:, 0] if np.ndim(q) == 0 else out

    def interval(self, level=0.9, newdata=None, arm=1) -> np.ndarray:
        """Central prediction interval of Y^a | V = v: the (1 ∓ level)/2 quantiles, shape (n_newdata, 2)."""
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
            raise ParameterError(f"`level` must be a number in (0, 1); got {level!r}")
        return self.quantile([(1 - level) / 2, (1 + level) / 2], newdata, arm)

    def density_mode(self, newdata=None, arm=1, candidates=None) -> np.ndarray:
        """The most likely outcome under the estimated p̂(y | V = v) (the mode; ``res.mode`` is the estimator's mode).

        ``candidates=None``: for d_y = 1 a grid search on 2001 points over the
        data ± 6 bandwidths; for d_y > 1 the observed outcomes (the empirical
        mode of the paper's image experiment).  Otherwise the candidate with
        the highest estimated density.  Shape (n_newdata,) or (n_newdata, d_y).
        """
        from .effects import fine_grid

        if candidates is None:
            d = self.design.Y.shape[1]
            candidates = fine_grid(self)[:, None] if d == 1 else np.ascontiguousarray(self.design.Y)
        else:
            candidates = self._y(candidates)
        return self._squeeze(self._embedding(arm).mode(self._v(newdata), candidates))

    def sample(self, n, newdata=None, arm=1, seed=None) -> np.ndarray:
        """``n`` points representing p̂(y | V = v) for each row of ``newdata``, by kernel herding.

        See :meth:`ccme.embedding.ArmEmbedding.sample` for the scheme (it
        respects the signed weights; the points are a deterministic summary
        given the candidates drawn with ``seed``, not independent draws).

        Returns
        -------
        ndarray (n_newdata, n) for d_y = 1, else (n_newdata, n, d_y)
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"`n` must be a positive integer; got {n!r}")
        rng = np.random.default_rng(self.seed if seed is None else seed)
        out = self._embedding(arm).sample(self._v(newdata), int(n), rng)
        return out[:, :, 0] if out.shape[2] == 1 else out

    def effect(self, newdata=None, q=None) -> pd.DataFrame:
        """Distributional treatment effects at each V-point (see :mod:`ccme.effects`).

        Columns: ``mean Y1``, ``mean Y0``, ``mean diff`` (the CATE implied by the
        two distributions), ``qte <q>`` (quantile treatment effects at ``q``,
        default 0.1, 0.25, 0.5, 0.75, 0.9), ``mmd`` (‖μ̂₁(v) − μ̂₀(v)‖ in the
        normalised outcome kernel's RKHS, exact, from the compiled core),
        ``kolmogorov`` and ``wasserstein`` (1-Wasserstein) distances between
        the normalised estimated distributions.  For d_y > 1: the mean
        differences per outcome and the MMD.

        Parameters
        ----------
        newdata : DataFrame, optional
            Default: V-quantile profiles (:meth:`profiles`).
        q : sequence of float, optional
        """
        from .effects import DEFAULT_QUANTILES, effect_table

        if newdata is None:
            newdata = self.profiles()
        levels = _levels(DEFAULT_QUANTILES if q is None else q, "q")
        return effect_table(self, self._v(newdata), _index(newdata, self._v(newdata)), levels)

    def test_effect(self, newdata=None, statistic="mmd", n_boot=499, seed=None, n_global=50):
        """Test H0: p(Y¹ | V = v) = p(Y⁰ | V = v), by a multiplier bootstrap (method="ridge").

        T(v) = ‖μ̂₁(v) − μ̂₀(v)‖² (``statistic="mmd"``, d_y = 1, Gaussian outcome
        kernel) or ‖mean₁(v) − mean₀(v)‖² (``"mean"``, any d_y), at each V-point;
        the global statistic is their mean over the V-points.  Calibrated by
        the multiplier bootstrap of :mod:`ccme.bootstrap` (Gaussian multipliers
        on the second-stage ridge residuals, first stage fixed); p-values are
        (1 + #{T* ≥ T}) / (1 + n_boot).  Measured on simulated data by
        ``benchmarks/calibration.py``.

        Parameters
        ----------
        newdata : DataFrame, optional
            V-points to test at; default: ``n_global`` training V-points drawn
            with ``seed`` (the global statistic then averages over V's
            empirical distribution).
        statistic : {"mmd", "mean"}
        n_boot : int, default 499
        seed : int, optional
            Default: the fit's seed.

        Returns
        -------
        ccme.bootstrap.EffectTest
        """
        from .bootstrap import test_effect

        seed = self.seed if seed is None else seed
        if newdata is None:
            rng = np.random.default_rng(seed)
            rows = np.sort(rng.choice(self.n, size=min(int(n_global), self.n), replace=False))
            V, index = self.design.V[rows], list(rows)
        else:
            V = self._v(newdata)
            index = _index(newdata, V)
        return test_effect(self, V, index, statistic=statistic, n_boot=n_boot, seed=seed,
                           n_threads=self._embedding(1).n_threads)

    def bands(self, level=0.9, newdata=None, arm=1, y=None, feature="density", n_boot=499, seed=None):
        """Pointwise and simultaneous bootstrap confidence bands for the smoothed density or CDF (method="ridge").

        The bands are for the unit-mass estimate Σ_k c_k(v) F(y_k, y) / Σ_k c_k(v)
        (not clipped, not made monotone) of the kernel-smoothed target
        E[k(Y^a, y) | V = v] (density) or E[K(y − Y^a) | V = v] (CDF), by the
        multiplier bootstrap of :mod:`ccme.bootstrap` (the fitted first stage is
        reused; the mass is resampled with the same multipliers, delta method).  Pointwise: the
        ``level`` quantile of |Δ*(y)| at each y; simultaneous over the grid, for
        each V-point: sup-t.  They do not include the ridge regularisation bias.

        Parameters
        ----------
        level : float, default 0.9
        newdata : DataFrame, optional
            Default: V-quantile profiles.
        arm : {1, 0}
        y : array, optional
            Increasing outcome grid (default :meth:`default_grid` with 200 points).
        feature : {"density", "cdf"}
        n_boot : int, default 499
        seed : int, optional

        Returns
        -------
        ccme.bootstrap.Bands
        """
        from .bootstrap import bands

        self._embedding(arm)
        if newdata is None:
            newdata = self.profiles()
        V = self._v(newdata)
        grid = self.default_grid(200) if y is None else self._y(y)[:, 0]
        if self.design.Y.shape[1] != 1:
            raise DataError("bands are available for a one-dimensional outcome")
        return bands(self, V, _index(newdata, V), grid[:, None] if grid.ndim == 1 else grid, arm=int(arm),
                     feature=feature, level=level, n_boot=n_boot, seed=self.seed if seed is None else seed,
                     n_threads=self._embedding(1).n_threads)

    def plot_effect(self, newdata=None, q=None, bands=True, level=0.9, n_boot=299, seed=None, ax=None, **kwargs):
        """Quantile treatment effect curves q ↦ Q₁(q | v) − Q₀(q | v), with bootstrap bands; returns the Axes."""
        from .plotting import plot_effect

        return plot_effect(self, newdata=newdata, q=q, bands=bands, level=level, n_boot=n_boot, seed=seed,
                           ax=ax, **kwargs)

    def plot_overlap(self, ax=None, bins=30):
        """Histograms of the cross-fitted propensity scores by arm, with the clipping bounds; returns the Axes."""
        from .plotting import plot_overlap

        return plot_overlap(self, ax=ax, bins=bins)

    def plot_cdf(self, newdata=None, arm="both", y=None, bands=False, level=0.9, n_boot=299, ax=None, **kwargs):
        """Estimated conditional CDFs of Y¹ and/or Y⁰ at each V-profile (optional bands); returns the Axes."""
        from .plotting import plot_cdfs

        return plot_cdfs(self, newdata=newdata, arm=arm, y=y, bands=bands, level=level, n_boot=n_boot, ax=ax,
                         **kwargs)

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


    def plot_tuning(self, ax=None, **kwargs):
        """Criterion curves of the automatic tuning, one panel per tuned hyperparameter.

        Parameters
        ----------
        ax : matplotlib Axes or sequence of Axes, optional
            One Axes per tuned hyperparameter (in the order λ₀, λ₁, σ_y); a new
            figure when omitted.

        Returns
        -------
        ndarray of Axes
        """
        from .plotting import plot_tuning

        return plot_tuning(self, ax=ax, **kwargs)

    def save(self, path, *, compress: bool = False):
        """Save the fitted result to ``path``, in a format whose loading cannot execute code (no pickle).

        One ZIP archive: the arrays in NumPy's ``.npy`` format, everything
        else in JSON, with checksums (:mod:`ccme.io` documents the layout).
        Every arm's fold estimators are built first (neural arms are trained
        on first use), so the file holds the whole fit; :func:`ccme.load`
        gives a result with the same densities, CDFs, moments and summaries,
        bit for bit, and encodes ``newdata`` as this one does.

        Parameters
        ----------
        path : str or path-like
        compress : bool, default False
            Deflate the entries (smaller, slower; fitted weights compress little).

        Returns
        -------
        pathlib.Path
        """
        from .io import save

        return save(self, path, compress=compress)


def _levels(q, name: str) -> np.ndarray:
    try:
        levels = np.atleast_1d(np.asarray(q, dtype=np.float64))
    except (TypeError, ValueError):
        raise ParameterError(f"`{name}` must be numbers in (0, 1); got {q!r}") from None
    if levels.ndim != 1 or not np.all((levels > 0) & (levels < 1)):
        raise ParameterError(f"`{name}` must be numbers in (0, 1); got {q!r}")
    return levels


def _index(newdata, V) -> list:
    return list(getattr(newdata, "index", range(len(V))))
