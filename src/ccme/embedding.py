"""``ccme.Embedding``: the fitted conditional counterfactual mean embedding of one arm, and its functionals.

This module owns the functionals.  Every estimator represents μ̂_{Y^a|V}(v)
as a weighted sum of outcome feature maps, Σ_k c_k(v) φ(y_k); with K-fold
cross-fitting the arm's embedding is the average of the K fold embeddings.
Each functional below is one contraction of the weights c(v) with a per-atom
feature F(y_k, ·) (the fold-arm protocol of :mod:`ccme.estimators.base`),
written once here for every estimator (as lifelines writes its functionals
once over a fitted estimate):

- density  p̂(y | v) = ⟨μ̂(v), φ(y)⟩ = Σ_k c_k(v) k_Y(y, y_k), with k_Y
  normalised (paper, Section "Application to Conditional Counterfactual
  Density Estimation", eq. emp_density);
- CDF      F̂(y | v) = Σ_k c_k(v) K_Y(y − y_k), K_Y the kernel's CDF;
- moments  mass Σ_k c_k(v), mean Σ_k c_k y_k / mass, and variance
  Σ_k c_k (y_k² + s²) / mass − mean², s² the kernel's variance;
- quantiles and intervals by inverting the normalised CDF, the mode by a
  search over candidate points, samples by kernel herding, and the maximum
  mean discrepancy between two embeddings exactly from their weights.

The weights of a ridge fit are shrunk (and for DR partly negative), so the
raw estimate need not be a proper density: ``normalize=True`` clips it at
zero and rescales it to integrate to one on the grid, as the paper's
reference code does; moments are taken of the signed measure rescaled to
unit mass.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from . import _backend
from .errors import CcmeWarning, DataError, ParameterError
from .grids import outcome_grid
from .kernels import Kernel

__all__ = ["Embedding", "invert_cdf", "normalized_cdf", "check_levels", "tail_means"]

#: Points of the grid on which quantiles, intervals and modes are located (d_y = 1).
FINE_GRID_SIZE = 2001

#: A located embedding's density or CDF (d_y = 1) is evaluated exactly, V-point by V-point, up to this many kernel
#: evaluations (atoms × outcome points × V-points); above it, from a cubic spline through the residual law on one grid
#: of spacing :data:`LOCATED_SPLINE_STEP` read-out bandwidths, contracted once for all V-points (:func:`_spline_rows`).
LOCATED_EXACT_LIMIT = 5e7
#: The spline grid's spacing in read-out bandwidths: a Gaussian's fourth derivative bounds the cubic spline's error by
#: about 3 (1/32)⁴ / 384 ≈ 1e-8 of the curve's maximum (measured: tests/test_location.py).
LOCATED_SPLINE_STEP = 1.0 / 32.0
#: The grid reaches this many read-out bandwidths beyond the outermost atoms, where a Gaussian density is below
#: e^(-40) of its peak and its CDF is 0 or the total mass to machine precision.
LOCATED_SPLINE_MARGIN = 9.0


class _Parts:
    """The fold-arm estimators of one arm, built once on first use (thread-safe).

    Shared by an embedding and the copies :meth:`Embedding.with_readout`
    makes, so that a neural arm is trained once whichever copy asks first.
    """

    __slots__ = ("_parts", "_build", "_lock")

    def __init__(self, parts):
        self._parts = None if callable(parts) else tuple(parts)
        self._build = parts if callable(parts) else None
        self._lock = threading.Lock()

    def get(self) -> tuple:
        if self._parts is None:
            with self._lock:
                if self._parts is None:
                    self._parts = tuple(self._build())
        return self._parts

    @property
    def built(self) -> bool:
        return self._parts is not None


class Embedding:
    """μ̂_{Y^a|V} of one arm: the average of its cross-fitting folds' embeddings.

    Obtained from a fit as ``res.embedding(arm)``.  Immutable; the fold
    estimators are built (a neural arm trained) on first use.

    Parameters
    ----------
    parts : sequence or callable
        One fitted fold-arm estimator per cross-fitting fold (the protocol of
        :class:`ccme.estimators.base.FoldArm`), or a function returning them,
        called once on first use.
    y_kernel : Kernel
        The normalised outcome kernel with which densities and moments are
        read out.
    cdf_kernel : Kernel, optional
        The kernel with which the CDF and its functionals (quantiles,
        intervals, expected shortfalls, exceedances) are read out; default
        ``y_kernel``.  A fit reads them out with a narrower one
        (:func:`ccme.tuning.distribution_kernel`): a density needs smoothing,
        a CDF does not.
    rkhs_kernel : Kernel, optional
        The outcome kernel of the embedding's RKHS (the one the estimator was
        fitted with), in which :meth:`mmd` is measured; default ``y_kernel``.
    outcome_range : (lo, hi), optional
        The observed outcomes' range per dimension, for default grids.
    encode : callable, optional
        ``encode(newdata: DataFrame) -> ndarray`` turning a data frame into V's
        columns (the fit's formula); without it ``v`` must be an array.
    arm : optional
        The arm's label (for reprs and error messages).
    n_threads : int, default 0
        Threads of the compiled core (0: OpenMP's default).
    location : ccme.location.LocationModel, optional
        A location stage (``fit(location="linear")``): the fold-arms then
        estimate the law of the residual R = Y − m̂(V), and the embedding at v
        is theirs shifted by m̂(v), μ̂(v) = Σ_k c_k(v) φ(r_k + m̂(v)).  Every
        functional below reads the shifted law; :meth:`weights` gives the
        residual atoms r_k and :meth:`shift` the m̂(v).

    Examples
    --------
    >>> import ccme
    >>> data = ccme.datasets.paper_simulation(400, seed=1)
    >>> res = ccme.fit("y ~ a | x1 | x2 + x3", data, tune="none", seed=1)
    >>> emb = res.embedding(1)
    >>> emb.density([0.0, 1.0], v=data.head(2)).shape
    (2, 2)
    """

    __slots__ = ("_parts", "_y_kernel", "_cdf_kernel", "_rkhs_kernel", "_range", "_encode", "_arm", "_location",
                 "_n_threads")

    def __init__(self, parts, y_kernel: Kernel, *, cdf_kernel: Kernel | None = None,
                 rkhs_kernel: Kernel | None = None, outcome_range=None, encode=None, arm=None, n_threads: int = 0,
                 location=None):
        self._location = location
        self._parts = parts if isinstance(parts, _Parts) else _Parts(parts)
        self._y_kernel = y_kernel
        self._cdf_kernel = y_kernel if cdf_kernel is None else _check_readout(cdf_kernel, len(y_kernel.bandwidth))
        self._rkhs_kernel = y_kernel if rkhs_kernel is None else rkhs_kernel
        self._range = None if outcome_range is None else tuple(np.asarray(r, dtype=np.float64) for r in outcome_range)
        self._encode = encode
        self._arm = arm
        self._n_threads = int(n_threads)

    def __setattr__(self, name, value):
        if hasattr(self, "_n_threads"):  # every slot is set once, in __init__
            raise AttributeError(f"ccme.Embedding is immutable (cannot set {name!r}); use with_readout()")
        object.__setattr__(self, name, value)

    # -- what it is ---------------------------------------------------------
    @property
    def parts(self) -> tuple:
        """The fold-arm estimators (built on first access)."""
        return self._parts.get()

    @property
    def y_kernel(self) -> Kernel:
        """The read-out kernel of densities and moments."""
        return self._y_kernel

    @property
    def cdf_kernel(self) -> Kernel:
        """The read-out kernel of the CDF and its functionals (quantiles, intervals, shortfalls, exceedances)."""
        return self._cdf_kernel

    def readout_kernel(self, feature: str) -> Kernel:
        """The kernel a ``feature`` of :meth:`contract` is read out with: ``cdf_kernel`` for "cdf", else ``y_kernel``.

        Parameters
        ----------
        feature : {"density", "cdf", "moments"}

        Returns
        -------
        Kernel

        Raises
        ------
        ParameterError
            An unknown ``feature``.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.readout_kernel("cdf") == emb.cdf_kernel, emb.readout_kernel("density") == emb.y_kernel
        (True, True)
        """
        if feature not in ("density", "cdf", "moments"):
            raise ParameterError(f"`feature` must be 'density', 'cdf' or 'moments'; got {feature!r}")
        return self._cdf_kernel if feature == "cdf" else self._y_kernel

    @property
    def rkhs_kernel(self) -> Kernel:
        """The outcome kernel of the embedding's RKHS (used by :meth:`mmd`)."""
        return self._rkhs_kernel

    @property
    def arm(self):
        return self._arm

    @property
    def location(self):
        """The location stage (:class:`ccme.location.LocationModel`), or None for an embedding of Y itself."""
        return self._location

    def shift(self, *, v) -> np.ndarray:
        """m̂(v), the location the residual atoms are moved by at each V-point, shape (n_v, d_y); zeros without one.

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points (as for :meth:`weights`).

        Returns
        -------
        ndarray (n_v, d_y)

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1,
        ...                location="linear")
        >>> res.embedding(1).shift(v=ccme.datasets.PAPER_PROFILES).shape
        (2, 1)
        """
        V = self._v(v)
        if self._location is None:
            return np.zeros((len(V), self.d_y))
        return self._location.predict(V)

    @property
    def n_threads(self) -> int:
        return self._n_threads

    @property
    def d_y(self) -> int:
        """The outcome's dimension."""
        return len(self._y_kernel.bandwidth)

    @property
    def n_folds(self) -> int:
        return len(self.parts)

    def __repr__(self) -> str:
        arm = "" if self._arm is None else f"arm {self._arm}, "
        state = f"{len(self.parts)} folds" if self._parts.built else "not built yet"
        cdf = "" if self._cdf_kernel == self._y_kernel else f", CDFs with {self._cdf_kernel.describe()}"
        located = "" if self._location is None else ", located by a linear mean in V"
        return f"<ccme.Embedding: {arm}{state}, read out with {self._y_kernel.describe()}{cdf}{located}>"

    def pooled_with(self, others) -> "Embedding":
        """This embedding averaged with others of the same arm: their fold-arms pooled, read out as this one.

        Repeated cross-fitting (``ccme.fit(n_rep=R)``): the estimate over R
        splits is the average of their K-fold averages, i.e. the average over
        all K·R fold-arms, which is again an Embedding.

        Parameters
        ----------
        others : sequence of Embedding
            Embeddings of the same arm (built lazily, as this one).

        Returns
        -------
        Embedding

        Raises
        ------
        ParameterError
            Embeddings with different location stages.

        Examples
        --------
        >>> import ccme
        >>> data = ccme.datasets.paper_simulation(300, seed=1)
        >>> a = ccme.fit("y ~ a | x1 | x2", data, tune="none", seed=1).embedding(1)
        >>> b = ccme.fit("y ~ a | x1 | x2", data, tune="none", seed=2).embedding(1)
        >>> a.pooled_with([b]).n_folds
        4
        """
        if any(other._location is not self._location for other in others):
            raise ParameterError("embeddings pooled together must share their location stage")
        sources = (self._parts, *(other._parts for other in others))
        return self._replaced(parts=lambda: [part for source in sources for part in source.get()])

    def evaluated_at(self, *, v) -> "Embedding":
        """The same embedding with every fold-arm's weights computed once at the V-points ``v``.

        Each functional computes the fold-arms' weights c(v) afresh; at a few
        V-points that is most of the cost of a table of many functionals
        (the effects of :meth:`ccme.CCMEResult.effect`).  The returned
        embedding keeps them (:class:`ccme.estimators.base.EvaluatedArm`) and
        gives the same results; at other V-points it computes them as this one.

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points (as for :meth:`weights`).

        Returns
        -------
        Embedding

        Examples
        --------
        >>> import ccme, numpy as np
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> at = emb.evaluated_at(v=ccme.datasets.PAPER_PROFILES)
        >>> bool(np.allclose(at.cdf([0.0, 5.0], v=ccme.datasets.PAPER_PROFILES),
        ...                  emb.cdf([0.0, 5.0], v=ccme.datasets.PAPER_PROFILES)))
        True
        """
        from .estimators.base import EvaluatedArm

        V = self._v(v)
        parts = [EvaluatedArm(part, V, self._n_threads) for part in self.parts]
        return self._replaced(parts=parts)

    def with_readout(self, y_kernel: Kernel, *, cdf_kernel: Kernel | None = None) -> "Embedding":
        """The same embedding read out with other outcome kernels (the fitted weights are shared).

        Densities, moments, modes and samples use ``y_kernel``; CDFs, quantiles,
        intervals, expected shortfalls and exceedances use ``cdf_kernel``
        (default: ``y_kernel`` too); :meth:`mmd` stays in the RKHS the
        estimator was fitted in.

        Parameters
        ----------
        y_kernel : Kernel
            The new read-out kernel (:class:`ccme.kernels.Kernel`, one bandwidth per
            outcome dimension).
        cdf_kernel : Kernel, default None
            The new read-out kernel of the CDF and its functionals; None: ``y_kernel``.

        Returns
        -------
        Embedding

        Raises
        ------
        ParameterError
            A kernel that is not a Kernel with one bandwidth per outcome dimension.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> wide = emb.with_readout(ccme.kernels.Kernel("gaussian", (5.0,)))
        >>> wide.y_kernel.bandwidth, wide.cdf_kernel.bandwidth, wide.density([0.0, 1.0], v=ccme.datasets.PAPER_PROFILES).shape
        ((5.0,), (5.0,), (2, 2))
        """
        y_kernel = _check_readout(y_kernel, self.d_y)
        return self._replaced(y_kernel=y_kernel, cdf_kernel=cdf_kernel)  # cdf_kernel None: the new y_kernel

    def with_location(self, location, *, outcome_range=None) -> "Embedding":
        """This embedding, taken as the residual's, moved by a location stage: μ̂(v) = Σ_k c_k(v) φ(r_k + m̂(v)).

        :func:`ccme.fit` builds a located embedding this way (``location=``);
        every functional then reads the shifted law (:mod:`ccme.location`).

        Parameters
        ----------
        location : ccme.location.LocationModel
            The mean model m̂ of this arm, with V's and the outcome's dimensions.
        outcome_range : (lo, hi) or None, default None
            The observed outcomes' (not the residuals') range, for default grids; None: this one's.

        Returns
        -------
        Embedding

        Raises
        ------
        ParameterError
            An embedding that already has a location stage, or a model of another outcome dimension.

        Examples
        --------
        >>> import ccme, numpy as np
        >>> from ccme.location import LocationModel
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> up = LocationModel(center=np.zeros(1), scale=np.ones(1), coef=np.zeros((1, 1)), intercept=np.ones(1),
        ...                    penalty=np.zeros(1), target="dr")
        >>> emb = res.embedding(1)
        >>> v = ccme.datasets.PAPER_PROFILES
        >>> moved = emb.with_location(up).density([11.0, 21.0], v=v, normalize=False)
        >>> bool(np.allclose(moved, emb.density([10.0, 20.0], v=v, normalize=False)))
        True
        """
        if self._location is not None:
            raise ParameterError("this embedding already has a location stage")
        if location.d_y != self.d_y:
            raise ParameterError(f"the location model has {location.d_y} outcome dimension(s); the embedding {self.d_y}")
        return self._replaced(location=location, outcome_range=self._range if outcome_range is None else outcome_range)

    def residual(self) -> "Embedding":
        """The embedding of the residual R = Y − m̂(V) that a location stage moves (itself, without one).

        Its functionals are the residual law's: ``emb.density(y, v=v)``
        equals ``emb.residual().density(y − m̂(v), v=v)`` at each V-point.

        Returns
        -------
        Embedding

        Examples
        --------
        >>> import ccme, numpy as np
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1,
        ...                location="linear")
        >>> emb, v = res.embedding(1), ccme.datasets.PAPER_PROFILES.head(1)
        >>> shift = emb.shift(v=v)[0, 0]
        >>> bool(np.allclose(emb.density([10.0, 20.0], v=v, normalize=False),
        ...                  emb.residual().density([10.0 - shift, 20.0 - shift], v=v, normalize=False)))
        True
        """
        if self._location is None:
            return self
        return self._replaced(location=None, outcome_range=None)

    def _replaced(self, **changes) -> "Embedding":
        """A copy with some of the constructor's arguments changed (the fitted parts shared unless ``parts`` is)."""
        args = dict(parts=self._parts, y_kernel=self._y_kernel, cdf_kernel=self._cdf_kernel,
                    rkhs_kernel=self._rkhs_kernel, outcome_range=self._range, encode=self._encode, arm=self._arm,
                    n_threads=self._n_threads, location=self._location)
        args.update(changes)
        return Embedding(args.pop("parts"), args.pop("y_kernel"), **args)

    # -- inputs -------------------------------------------------------------
    def _v(self, v) -> np.ndarray:
        if v is None:
            raise ParameterError("`v` is required: the V-points (a DataFrame of V's columns, or an array)")
        if hasattr(v, "columns"):
            if self._encode is None:
                raise ParameterError("this embedding has no formula to encode a DataFrame: pass V as an array")
            return self._encode(v)
        values = np.asarray(v, dtype=np.float64)
        if values.ndim == 1:
            values = values[None, :]
        if values.ndim != 2 or not np.all(np.isfinite(values)):
            raise DataError(f"`v` must be a finite 2-D array of V-points; got shape {np.shape(v)}")
        return np.ascontiguousarray(values)

    def _y(self, y) -> np.ndarray:
        d = self.d_y
        try:
            values = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(f"`y` must be numbers; got {type(y).__name__}") from None
        if values.ndim == 0:
            values = values.reshape(1, 1)
        if values.ndim == 1:
            values = values[:, None] if d == 1 else values[None, :]
        if values.ndim != 2 or values.shape[1] != d:
            raise DataError(f"`y` must have {d} column(s) (the outcome's dimension); got shape {np.shape(y)}")
        if not np.all(np.isfinite(values)):
            raise DataError("`y` contains missing or infinite values")
        return np.ascontiguousarray(values)

    def _require_1d(self, what: str) -> None:
        if self.d_y != 1:
            raise DataError(
                f"{what} is defined here for a one-dimensional outcome only (the outcome has {self.d_y} "
                "dimensions); density, mean, mode and sample work for any dimension"
            )

    def fine_grid(self, size: int = FINE_GRID_SIZE) -> np.ndarray:
        """The grid on which quantiles, modes and tail means are located (d_y = 1).

        An increasing grid over the observed outcomes ± the margin of
        :mod:`ccme.grids`, at this arm's read-out kernel; the name matches
        :meth:`ccme.CCMEResult.fine_grid` (which takes the wider of the two
        arms' kernels), while ``CCMEResult.default_grid`` is the coarser
        plotting grid within the outcomes' fences.

        Parameters
        ----------
        size : int, default 2001
            Number of grid points.

        Returns
        -------
        ndarray (size,)

        Raises
        ------
        DataError
            A multivariate outcome.
        ParameterError
            An embedding built without the outcomes' range.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.fine_grid().shape
        (2001,)
        """
        self._require_1d("a fine grid")
        if self._range is None:
            raise ParameterError("this embedding does not know the outcomes' range: pass a grid")
        return outcome_grid(np.array([self._range[0][0], self._range[1][0]]), self._y_kernel, size=size)

    def default_grid(self, size: int = FINE_GRID_SIZE) -> np.ndarray:
        """Deprecated name of :meth:`fine_grid` (it was the fine grid, not the result's plotting ``default_grid``).

        Parameters
        ----------
        size : int, default 2001
            As in :meth:`fine_grid`, which this calls (and whose errors it raises).

        Returns
        -------
        ndarray
            ``self.fine_grid(size)``.

        Warns
        -----
        FutureWarning
            Always: use :meth:`fine_grid`.

        Examples
        --------
        >>> import warnings, ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", FutureWarning)
        ...     res.embedding(1).default_grid(50).shape
        (50,)
        """
        warnings.warn("Embedding.default_grid() is renamed Embedding.fine_grid() (the same 2001-point grid; "
                      "CCMEResult.default_grid() is the plotting grid)", FutureWarning, stacklevel=2)
        return self.fine_grid(size)

    # -- the two primitives -------------------------------------------------
    def contract(self, points, *, v, feature: str) -> np.ndarray:
        """Σ over folds of (1/K) Σ_k c_k(v) F(y_k, point), shape (n_v, n_features).

        The primitive every functional is written with.

        Parameters
        ----------
        points : ndarray (G, d_y)
            Outcome points (ignored, but with d_y columns, for ``"moments"``).
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        feature : {"density", "cdf", "moments"}
            F is the normalised kernel (``y_kernel``), the CDF of ``cdf_kernel``, or (1, y, y²) ("moments", 1 + 2 d_y columns).

        Returns
        -------
        ndarray (n_v, G), or (n_v, 1 + 2 d_y) for ``"moments"``
            Raw: neither clipped nor rescaled to unit mass.

        Raises
        ------
        ParameterError
            An unknown ``feature``, or ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> import numpy as np
        >>> emb.contract(np.array([[0.0], [1.0]]), v=ccme.datasets.PAPER_PROFILES, feature="density").shape
        (2, 2)
        """
        kernel = self.readout_kernel(feature)
        V = self._v(v)
        if self._location is not None:
            return self._located_contract(V, points, feature, kernel)
        return self._contract_parts(V, points, feature, kernel)

    def _contract_parts(self, V, points, feature, kernel) -> np.ndarray:
        """The fold-arms' contraction, averaged: (1/K) Σ_folds Σ_k c_k(v) F(y_k, point)."""
        n_features = 1 + 2 * self.d_y if feature == "moments" else len(points)
        out = np.zeros((len(V), n_features))
        parts = self.parts
        scale = 1.0 / len(parts)
        for part in parts:
            part.contract(V, points, feature, kernel, out, scale, n_threads=self._n_threads)
        return out

    def _located_contract(self, V, points, feature, kernel) -> np.ndarray:
        """:meth:`contract` of the residual law shifted by m̂(v): at each V-point, the features at y − m̂(v).

        The moments follow from the residual's: Σ c (r + s) = Σ c r + s Σ c and
        Σ c (r + s)² = Σ c r² + 2 s Σ c r + s² Σ c.  The density and CDF need
        each V-point's own points, so the weights are taken once for all
        V-points (equal atoms merged: a unit's outcome is an atom of every
        fold) and contracted point by point.
        """
        d = self.d_y
        s = self._location.predict(V)
        if feature == "moments":
            raw = self._contract_parts(V, points, feature, kernel)
            mass, first, second = raw[:, :1], raw[:, 1 : 1 + d], raw[:, 1 + d :]
            return np.hstack([mass, first + s * mass, second + 2.0 * s * first + s**2 * mass])
        points = np.asarray(points, dtype=np.float64)
        if d == 1 and kernel.name == "gaussian" and self._spline_pays(V, points):
            return self._located_by_spline(V, points[:, 0], feature, kernel, s[:, 0])
        atoms, c = _merged(*self.weights(v=V))
        out = np.empty((len(V), len(points)))
        for e in range(len(V)):
            F = _backend.atom_features(atoms, points - s[e], feature, kernel.name, kernel.bandwidth_array,
                                       n_threads=self._n_threads)
            out[e] = c[:, e] @ F
        return out

    def _spline_pays(self, V, points) -> bool:
        n_atoms = sum(part.n_atoms for part in self.parts)
        return float(n_atoms) * len(points) * len(V) > LOCATED_EXACT_LIMIT

    def _located_by_spline(self, V, points, feature, kernel, shift) -> np.ndarray:
        """The residual law contracted once on a fine grid t, then each V-point's spline read at y − m̂(v).

        Exact at the grid's nodes (the fold-arms' own contraction); between
        them a not-a-knot cubic spline (error about 1e-8 of the maximum at
        :data:`LOCATED_SPLINE_STEP`); beyond the grid, which reaches
        :data:`LOCATED_SPLINE_MARGIN` bandwidths past the outermost atoms, the
        density is 0 and the CDF 0 below and the total mass above.
        """
        from scipy.interpolate import CubicSpline

        h = float(kernel.bandwidth_array[0])
        atoms = np.concatenate([part.atoms[:, 0] for part in self.parts])
        lo, hi = atoms.min() - LOCATED_SPLINE_MARGIN * h, atoms.max() + LOCATED_SPLINE_MARGIN * h
        step = LOCATED_SPLINE_STEP * h
        t = lo + step * np.arange(int(np.ceil((hi - lo) / step)) + 1)
        on_grid = self._contract_parts(V, t[:, None], feature, kernel)  # (n_v, M)
        coef = CubicSpline(t, on_grid.T, axis=0).c  # (4, M - 1, n_v): per interval, powers 3..0 of (q − t_j)
        q = points[None, :] - shift[:, None]  # (n_v, G): each V-point's residual points
        j = np.clip(np.floor((q - lo) / step).astype(np.intp), 0, len(t) - 2)
        dx = q - t[j]
        e = np.arange(len(V))[:, None]
        out = ((coef[0, j, e] * dx + coef[1, j, e]) * dx + coef[2, j, e]) * dx + coef[3, j, e]
        below, above = q < lo, q > t[-1]
        out[below] = 0.0
        if feature == "cdf":
            out = np.where(above, on_grid[:, -1:], out)
        else:
            out[above] = 0.0
        return out

    def weights(self, *, v):
        """All folds' atoms and weights (already divided by K).

        With a location stage, the atoms are the residual atoms r_k: the
        embedding at V-point e has them moved by ``shift(v=v)[e]``.

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        atoms : ndarray (N, d_y)
            The outcome atoms y_k of every fold.
        weights : ndarray (N, n_v)
            Their weights c_k(v) at each V-point.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> atoms, weights = emb.weights(v=ccme.datasets.PAPER_PROFILES)
        >>> atoms.shape[1], weights.shape[1], len(atoms) == len(weights)
        (1, 2, True)
        """
        V = self._v(v)
        parts = self.parts
        atoms, weights = zip(*(part.weights(V, n_threads=self._n_threads) for part in parts))
        return np.vstack(atoms), np.vstack(weights) / len(parts)

    # -- density, CDF, moments ---------------------------------------------
    def density(self, y, *, v, normalize: bool = True) -> np.ndarray:
        """p̂(y | v) at the outcome points ``y`` for each V-point (paper, eq. emp_density).

        Parameters
        ----------
        y : array (G,) or (G, d_y)
            Outcome values; with ``normalize=True`` and d_y = 1 an increasing grid.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        normalize : bool, default True
            Clip negative values and rescale each row to integrate to one on
            the grid (d_y = 1; for d_y > 1 only the clipping).

        Returns
        -------
        ndarray (n_v, G)
            NaN rows, with a warning, where there is no positive mass to rescale.

        Raises
        ------
        DataError
            ``y`` of the wrong shape or not finite, ``normalize=True`` with a grid
            that is not increasing, or ``v`` that cannot be encoded, or an array that is not finite and 2-D.
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.density([0.0, 1.0, 2.0], v=ccme.datasets.PAPER_PROFILES).shape
        (2, 3)
        """
        y = self._y(y)
        raw = self.contract(y, v=v, feature="density")
        if not normalize:
            return raw
        clipped = np.maximum(raw, 0.0)
        if self.d_y > 1:
            return clipped  # an arbitrary point set is no quadrature grid: clip only
        grid = y[:, 0]
        if len(grid) < 2 or np.any(np.diff(grid) <= 0):
            raise DataError(
                "normalize=True rescales the density to integrate to one on `y`, which needs an increasing "
                "grid of at least two points; sort `y` or pass normalize=False"
            )
        mass = np.trapezoid(clipped, grid, axis=1)
        # Nothing to rescale: say so rather than return a zero "density".
        empty = _warn_no_mass(mass, "density on `y`", "or `y` outside the outcome's range", "those rows are NaN")
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(empty[:, None], np.nan, clipped / np.where(empty, 1.0, mass)[:, None])

    def cdf(self, y, *, v, normalize: bool = True) -> np.ndarray:
        """F̂(y | v) = P̂(Y^a ≤ y | V = v), closed form for the Gaussian and Laplace kernels.

        Read out with :attr:`cdf_kernel`: Σ_k c_k(v) K_F((y − y_k)/h_F), whose
        bandwidth a fit sets narrower than the density's
        (:func:`ccme.tuning.distribution_kernel`).

        Parameters
        ----------
        y : array (G,) or (G, d_y)
            Outcome values.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        normalize : bool, default True
            Rescale to unit mass, clip to [0, 1] and (d_y = 1) take the running
            maximum along increasing y, so the result is a CDF.

        Returns
        -------
        ndarray (n_v, G)

        Raises
        ------
        DataError
            ``y`` of the wrong shape or not finite, or ``v`` that cannot be encoded, or an array that is not finite and 2-D.
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.cdf([0.0, 5.0], v=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        y = self._y(y)
        V = self._v(v)
        raw = self.contract(y, v=V, feature="cdf")
        if not normalize:
            return raw
        mass = self.mass(v=V)
        if self.d_y > 1:
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.clip(raw / mass[:, None], 0.0, 1.0)
        order = np.argsort(y[:, 0], kind="stable")
        out = np.empty_like(raw)
        out[:, order] = normalized_cdf(raw[:, order], mass[:, None])
        return out

    def _raw_moments(self, v):
        d = self.d_y
        raw = self.contract(np.zeros((0, d)), v=v, feature="moments")
        mass = raw[:, 0]
        bad = _warn_no_mass(mass, "distribution", "or a very large penalty", "their moments are NaN")
        return np.where(bad, np.nan, mass), raw

    def mass(self, *, v) -> np.ndarray:
        """Σ_k c_k(v), the estimate's total mass at each V-point (NaN where not positive), shape (n_v,).

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        ndarray (n_v,)
            NaN, with a warning, where the mass is not positive.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.mass(v=ccme.datasets.PAPER_PROFILES).shape
        (2,)
        """
        return self._raw_moments(v)[0]

    def moments(self, *, v):
        """Mass, mean and variance of the estimated distribution at each V-point.

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        mass : ndarray (n_v,)
        mean, variance : ndarray (n_v, d_y)
            Of the signed measure rescaled to unit mass; the variance includes
            the kernel's own variance s² and is NaN (with a warning) where the
            signed weights make it negative.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Warns
        -----
        CcmeWarning
            Where the variance is negative or the mass is not positive (NaN).

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> mass, mean, variance = emb.moments(v=ccme.datasets.PAPER_PROFILES)
        >>> mass.shape, mean.shape, variance.shape
        ((2,), (2, 1), (2, 1))
        """
        d = self.d_y
        mass, raw = self._raw_moments(v)
        mean = raw[:, 1 : 1 + d] / mass[:, None]
        second = raw[:, 1 + d :] / mass[:, None] + self._y_kernel.variance()[None, :]
        var = second - mean**2
        negative = var < 0
        if negative.any():
            # The DR weights are signed: with weak overlap the second-moment
            # estimate can fall below the squared mean.  Say so; never report 0.
            warnings.warn(
                f"the estimated variance is negative at {int(negative.any(axis=1).sum())} V-point(s) "
                "(signed weights under weak overlap); reported as NaN",
                CcmeWarning,
                stacklevel=3,
            )
            var = np.where(negative, np.nan, var)
        return mass, mean, var

    def mean(self, *, v) -> np.ndarray:
        """E[Y^a | V = v] estimated as Σ_k c_k(v) y_k / Σ_k c_k(v), shape (n_v, d_y).

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        ndarray (n_v, d_y)
            NaN, with a warning, where the mass is not positive.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.mean(v=ccme.datasets.PAPER_PROFILES).shape
        (2, 1)
        """
        d = self.d_y
        mass, raw = self._raw_moments(v)
        return raw[:, 1 : 1 + d] / mass[:, None]

    # -- quantiles, mode, samples -------------------------------------------
    def quantile(self, q, *, v, grid=None) -> np.ndarray:
        """Quantiles of the estimated distribution, shape (n_v, len(q)); d_y = 1.

        Inverts the normalised CDF of :meth:`cdf` (unit mass, clipped to
        [0, 1], made non-decreasing by its running maximum, so the inverse
        exists even where the signed ridge weights make the raw estimate
        dip): Q(q) = inf{y : F̂(y) ≥ q}, located on the increasing ``grid`` and
        interpolated linearly between the two bracketing grid points (error at
        most one grid step).

        Parameters
        ----------
        q : float or sequence of floats in (0, 1)
            Quantile levels.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        grid : ndarray (G,) or None, default None
            Increasing outcome grid; None: :meth:`fine_grid` (2001 points).

        Returns
        -------
        ndarray (n_v, len(q))
            Also two-dimensional for a scalar ``q`` (one column).

        Raises
        ------
        ParameterError
            ``q`` outside (0, 1), or ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            A multivariate outcome, or ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.quantile([0.1, 0.5, 0.9], v=ccme.datasets.PAPER_PROFILES).shape
        (2, 3)
        """
        self._require_1d("the quantile")
        levels = check_levels(q, "q")
        grid = self.fine_grid() if grid is None else np.asarray(grid, dtype=np.float64)
        return invert_cdf(self.cdf(grid[:, None], v=v, normalize=True), grid, levels)

    def interval(self, level: float = 0.9, *, v, grid=None) -> np.ndarray:
        """Central interval holding ``level`` of the estimated distribution: the (1 ∓ level)/2 quantiles.

        Parameters
        ----------
        level : float in (0, 1), default 0.9
            Probability the interval holds.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        grid : ndarray (G,) or None, default None
            Increasing outcome grid; None: :meth:`fine_grid` (2001 points).

        Returns
        -------
        ndarray (n_v, 2)
            Lower and upper ends.

        Raises
        ------
        ParameterError
            ``level`` outside (0, 1), or ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            A multivariate outcome, or ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.interval(0.8, v=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
            raise ParameterError(f"`level` must be a number in (0, 1); got {level!r}")
        return self.quantile([(1 - level) / 2, (1 + level) / 2], v=v, grid=grid)

    def expected_shortfall(self, alpha, *, v, tail: str = "lower", grid=None) -> np.ndarray:
        """Expected shortfall (conditional value-at-risk) of the estimated distribution; d_y = 1.

        Lower tail: ES⁻(α) = E[Y | Y ≤ Q(α)] = (1/α) ∫₀^α Q(u) du, the mean of
        the worst α share of outcomes; upper tail: ES⁺(α) = E[Y | Y ≥ Q(1 − α)],
        the superquantile at 1 − α.  Computed from the normalised CDF of
        :meth:`cdf` by the Rockafellar–Uryasev representation (Rockafellar &
        Uryasev 2002; Acerbi & Tasche 2002), exact for any distribution,

            ES⁻(α) = Q(α) − (1/α) ∫_{−∞}^{Q(α)} F(y) dy,
            ES⁺(α) = Q(1 − α) + (1/α) ∫_{Q(1−α)}^{∞} (1 − F(y)) dy,

        with F piecewise linear on ``grid`` (:func:`tail_means`).

        Parameters
        ----------
        alpha : float or sequence of floats in (0, 1)
            Tail probabilities.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        tail : {"lower", "upper"}, default "lower"
        grid : ndarray (G,) or None, default None
            Increasing outcome grid; None: :meth:`fine_grid` (2001 points).

        Returns
        -------
        ndarray (n_v, len(alpha))

        Raises
        ------
        ParameterError
            ``alpha`` outside (0, 1), an unknown ``tail``, or ``v`` is None, or a
            DataFrame for an embedding without a formula.
        DataError
            A multivariate outcome, or ``v`` that cannot be encoded.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> es = emb.expected_shortfall([0.05, 0.1], v=ccme.datasets.PAPER_PROFILES)
        >>> bool((es <= emb.quantile([0.05, 0.1], v=ccme.datasets.PAPER_PROFILES)).all())
        True
        """
        self._require_1d("the expected shortfall")
        levels = check_levels(alpha, "alpha")
        grid = self.fine_grid() if grid is None else np.asarray(grid, dtype=np.float64)
        return tail_means(self.cdf(grid[:, None], v=v, normalize=True), grid, levels, tail)

    def superquantile(self, p, *, v, grid=None) -> np.ndarray:
        """Superquantile Q̄(p) = (1/(1 − p)) ∫_p^1 Q(u) du = E[Y | Y ≥ Q(p)] (the upper expected shortfall at 1 − p).

        Parameters
        ----------
        p : float or sequence of floats in (0, 1)
        v : DataFrame or ndarray (n_v, d_v)
            The V-points.
        grid : ndarray (G,) or None, default None
            Increasing outcome grid; None: :meth:`fine_grid` (2001 points).

        Returns
        -------
        ndarray (n_v, len(p))

        Raises
        ------
        ParameterError
            ``p`` outside (0, 1).
        DataError
            A multivariate outcome.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.embedding(1).superquantile(0.9, v=ccme.datasets.PAPER_PROFILES).shape
        (2, 1)
        """
        levels = check_levels(p, "p")
        return self.expected_shortfall(1.0 - levels, v=v, tail="upper", grid=grid)

    def exceedance(self, c, *, v) -> np.ndarray:
        """P(Y > c | V = v) = 1 − F̂(c | v), from the normalised CDF; d_y = 1.

        Parameters
        ----------
        c : float or sequence of floats
            Thresholds.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points.

        Returns
        -------
        ndarray (n_v, len(c))

        Raises
        ------
        DataError
            A multivariate outcome or non-finite thresholds.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> res.embedding(1).exceedance([0.0, 20.0], v=ccme.datasets.PAPER_PROFILES).shape
        (2, 2)
        """
        self._require_1d("the exceedance probability")
        return 1.0 - self.cdf(self._y(np.atleast_1d(np.asarray(c, dtype=np.float64))), v=v, normalize=True)

    def mode(self, *, v, candidates=None) -> np.ndarray:
        """The candidate point of highest estimated density for each V-point, shape (n_v, d_y).

        With the candidates a fine grid (d_y = 1; the default) this is a grid
        search for the mode of p̂(· | v); with observed outcomes as candidates
        it is the empirical mode of the paper's image experiment.

        Parameters
        ----------
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        candidates : array (G,) or (G, d_y), or None, default None
            Outcome points searched; None: :meth:`fine_grid` (d_y = 1).

        Returns
        -------
        ndarray (n_v, d_y)

        Raises
        ------
        DataError
            ``candidates`` of the wrong shape or not finite, None with a
            multivariate outcome, or ``v`` that cannot be encoded, or an array that is not finite and 2-D.
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.mode(v=ccme.datasets.PAPER_PROFILES).shape
        (2, 1)
        """
        if candidates is None:
            candidates = self.fine_grid()[:, None]
        else:
            candidates = self._y(candidates)
        raw = self.contract(candidates, v=v, feature="density")
        return candidates[np.argmax(raw, axis=1)]

    def sample(self, size: int, *, v, seed=None, n_candidates: int | None = None) -> np.ndarray:
        """``size`` points per V-point by kernel herding, shape (n_v, size, d_y).

        Kernel herding (Chen, Welling & Smola, 2010) picks, one at a time,
        x_{t+1} = argmax_x ⟨μ̃, φ(x)⟩ − (1/(t+1)) Σ_{s≤t} k(x, x_s), with μ̃ the
        estimated embedding rescaled to unit mass and k the normalised outcome
        kernel, so ⟨μ̃, φ(x)⟩ is the (signed) density estimate at x.  It greedily
        minimises the MMD between the samples and μ̃ itself, so the negative
        ridge/DR weights act through the target (a region the signed embedding
        down-weights is visited less) instead of being clipped away as in
        sampling from a clipped density.  The maximum runs over candidate
        points drawn (with ``seed``) from the mixture Σ_k |c_k| N(y_k, s²)/Σ|c_k|,
        s² the kernel's variance per dimension, which covers the support of
        both signs of the weights.  Herded points are a deterministic,
        low-discrepancy summary given the candidates, not independent draws.

        Parameters
        ----------
        size : int
            Points per V-point (positive).
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.
        seed : int, Generator or None, default None
            Seed of the candidate points.
        n_candidates : int or None, default None
            Number of candidate points; None: max(2000, 20 size).

        Returns
        -------
        ndarray (n_v, size, d_y)
            NaN for a V-point without positive mass.

        Raises
        ------
        ParameterError
            ``size`` not a positive integer, or ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.sample(4, v=ccme.datasets.PAPER_PROFILES, seed=1).shape
        (2, 4, 1)
        """
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ParameterError(f"`size` must be a positive integer; got {size!r}")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        V = self._v(v)
        atoms, weights = self.weights(v=V)
        shift = self.shift(v=V)
        bw = self._y_kernel.bandwidth_array
        scale = np.sqrt(self._y_kernel.variance())
        m = n_candidates if n_candidates is not None else max(2000, 20 * size)
        out = np.empty((len(V), size, self.d_y))
        for e in range(len(V)):
            c = weights[:, e]
            if not c.sum() > 0:  # no positive mass: nothing to sample from
                out[e] = np.nan
                continue
            p = np.abs(c) / np.abs(c).sum()
            cand = (atoms[rng.choice(len(atoms), size=m, p=p)] + shift[e]
                    + rng.standard_normal((m, self.d_y)) * scale)
            target = self.contract(cand, v=V[e : e + 1], feature="density")[0] / c.sum()
            pulled = np.zeros(m)  # Σ_{s≤t} k(x, x_s) over the candidates
            for t in range(size):
                j = int(np.argmax(target - pulled / (t + 1)))
                out[e, t] = cand[j]
                # one column per step: a single thread avoids the parallel start-up cost on tiny work
                column = _backend.gram(cand, cand[j : j + 1], self._y_kernel.name, bw, normalized=True, n_threads=1)
                pulled += column[:, 0]
        return out

    # -- comparisons --------------------------------------------------------
    def mmd_squared(self, other: "Embedding", *, v) -> np.ndarray:
        """Squared maximum mean discrepancy ‖μ̂(v) − μ̂'(v)‖² in the RKHS of :attr:`rkhs_kernel`, shape (n_v,).

        Exact from the weights and atoms: with Z the atoms of both and
        W = [c; −c'], MMD² = Wᵀ k(Z, Z) W, in the compiled core (tile by tile,
        never forming k(Z, Z)), after merging equal atoms.  The distance
        between the raw embeddings (no rescaling to unit mass).

        Parameters
        ----------
        other : Embedding
            The embedding compared with (e.g. the other arm's), on the same V.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        ndarray (n_v,)
            Non-negative.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.mmd_squared(res.embedding(0), v=ccme.datasets.PAPER_PROFILES).shape
        (2,)
        """
        V = self._v(v)
        atoms1, c1 = self.weights(v=V)
        atoms0, c0 = other.weights(v=V)
        kernel = self._rkhs_kernel
        if self._location is None and other._location is None:
            atoms, W = _merged(np.vstack([atoms1, atoms0]), np.vstack([c1, -c0]))
            q = _backend.kernel_quadratic_forms(atoms, W, kernel.name, kernel.bandwidth_array, normalized=True,
                                                n_threads=self._n_threads)
        else:  # located atoms move with v: one quadratic form per V-point
            (atoms1, c1), (atoms0, c0) = _merged(atoms1, c1), _merged(atoms0, c0)
            s1, s0 = self.shift(v=V), other.shift(v=V)
            q = np.array([_backend.kernel_quadratic_forms(
                np.vstack([atoms1 + s1[e], atoms0 + s0[e]]), np.concatenate([c1[:, e], -c0[:, e]])[:, None],
                kernel.name, kernel.bandwidth_array, normalized=True, n_threads=self._n_threads)[0]
                for e in range(len(V))])
        # Rounding can leave a tiny negative value when the embeddings coincide.
        return np.maximum(q, 0.0)

    def mmd(self, other: "Embedding", *, v) -> np.ndarray:
        """Maximum mean discrepancy ‖μ̂(v) − μ̂'(v)‖ (the square root of :meth:`mmd_squared`), shape (n_v,).

        Parameters
        ----------
        other : Embedding
            The embedding compared with (e.g. the other arm's), on the same V.
        v : DataFrame or ndarray (n_v, d_v)
            The V-points: a DataFrame with the columns V is built from (encoded by
            the fit's formula), or V's encoded columns as an array.

        Returns
        -------
        ndarray (n_v,)
            Non-negative.

        Raises
        ------
        ParameterError
            ``v`` is None, or a DataFrame for an embedding without a formula.
        DataError
            ``v`` that cannot be encoded, or an array that is not finite and 2-D.

        Examples
        --------
        >>> import ccme
        >>> res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
        >>> emb = res.embedding(1)
        >>> emb.mmd(res.embedding(0), v=ccme.datasets.PAPER_PROFILES).shape
        (2,)
        """
        return np.sqrt(self.mmd_squared(other, v=v))


def _check_readout(kernel, d_y: int) -> Kernel:
    if not isinstance(kernel, Kernel) or len(kernel.bandwidth) != d_y:
        raise ParameterError(f"a read-out kernel must be a ccme.kernels.Kernel with {d_y} bandwidth(s); got {kernel!r}")
    return kernel


def _merged(atoms: np.ndarray, weights: np.ndarray):
    """Equal atoms merged (their weights summed): the same embedding over fewer atoms.

    The arms of a cross-fitted ridge fit share their second-stage outcomes,
    and the first-stage atoms of one fold are second-stage atoms of another,
    so merging shrinks the quadratic form about threefold.
    """
    unique, inverse = np.unique(atoms, axis=0, return_inverse=True)
    merged = np.zeros((len(unique), weights.shape[1]))
    np.add.at(merged, inverse.reshape(-1), weights)
    return np.ascontiguousarray(unique), merged


def normalized_cdf(raw: np.ndarray, mass) -> np.ndarray:
    """A raw CDF estimate on an increasing grid (last axis) made a CDF: raw / mass, clipped to [0, 1], running maximum.

    Negative weights can make the raw CDF dip or overshoot; its running
    maximum along increasing y is the smallest non-decreasing function above
    it.  ``mass`` broadcasts against ``raw`` (NaN mass gives NaN rows).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.maximum.accumulate(np.clip(raw / mass, 0.0, 1.0), axis=-1)


def check_levels(q, name: str) -> np.ndarray:
    """``q`` as a 1-D float array of levels in (0, 1), else a ParameterError naming ``name``."""
    try:
        levels = np.atleast_1d(np.asarray(q, dtype=np.float64))
    except (TypeError, ValueError):
        raise ParameterError(f"`{name}` must be numbers in (0, 1); got {q!r}") from None
    if levels.ndim != 1 or not np.all((levels > 0) & (levels < 1)):
        raise ParameterError(f"`{name}` must be numbers in (0, 1); got {q!r}")
    return levels


#: Entries of :func:`invert_cdf`'s comparison array per block of rows (rows × levels × grid points): the bootstrap
#: inverts B × points rows at once, and blocks keep that array near 4M booleans.
_INVERT_BLOCK = 1 << 22


def invert_cdf(F: np.ndarray, grid: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles of non-decreasing CDF rows ``F`` (shape (..., G)) on ``grid``, shape (..., len(q)).

    Q(q) = inf{y : F(y) ≥ q} located on the grid and interpolated linearly
    between the bracketing grid points; levels at or below F(grid[0]) give
    grid[0], levels above F(grid[-1]) give grid[-1].
    """
    q, F = np.asarray(q, dtype=np.float64), np.asarray(F, dtype=np.float64)
    flat = F.reshape(-1, F.shape[-1])
    out = np.empty((len(flat), len(q)))
    rows = max(1, _INVERT_BLOCK // max(1, flat.shape[1] * len(q)))
    for start in range(0, len(flat), rows):
        block = flat[start:start + rows]
        # On a non-decreasing row, the count of values below q is searchsorted(row, q, side="left").
        below = np.count_nonzero(block[:, None, :] < q[None, :, None], axis=2)
        k = np.clip(below, 1, len(grid) - 1)
        lo, hi = np.take_along_axis(block, k - 1, axis=1), np.take_along_axis(block, k, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.clip(np.where(hi > lo, (q - lo) / (hi - lo), 1.0), 0.0, 1.0)
        quantiles = grid[k - 1] + t * (grid[k] - grid[k - 1])
        out[start:start + rows] = np.where(q <= block[:, :1], grid[0], quantiles)
    return out.reshape(F.shape[:-1] + (len(q),))


def tail_means(F: np.ndarray, grid: np.ndarray, alpha: np.ndarray, tail: str) -> np.ndarray:
    """Expected shortfalls of non-decreasing CDF rows ``F`` (shape (R, G)) on ``grid``: shape (R, len(alpha)).

    ``tail="lower"``: Q(α) − (1/α) ∫ F up to Q(α); ``"upper"``: Q(1 − α) +
    (1/α) ∫ (1 − F) beyond Q(1 − α) (:meth:`Embedding.expected_shortfall`).
    F is linear between grid points, with the conventions of
    :func:`invert_cdf`: mass below the grid sits at grid[0], mass above it at
    grid[-1].  The integrals are the exact integrals of that piecewise-linear
    F (cumulative trapezoid, then the part of the last interval up to Q).
    """
    if tail not in ("lower", "upper"):
        raise ParameterError(f"`tail` must be 'lower' or 'upper'; got {tail!r}")
    F = np.asarray(F, dtype=np.float64)
    levels = alpha if tail == "lower" else 1.0 - alpha
    t = invert_cdf(F, grid, levels)  # (R, L)
    steps = np.diff(grid)
    C = np.concatenate([np.zeros((len(F), 1)), np.cumsum(0.5 * (F[:, 1:] + F[:, :-1]) * steps, axis=1)], axis=1)
    k = np.clip(np.searchsorted(grid, t, side="right"), 1, len(grid) - 1)  # t in [grid[k-1], grid[k]]
    y0 = grid[k - 1]
    f0, f1 = np.take_along_axis(F, k - 1, axis=1), np.take_along_axis(F, k, axis=1)
    frac = (t - y0) / (grid[k] - y0)
    below = np.take_along_axis(C, k - 1, axis=1) + (t - y0) * (f0 + 0.5 * frac * (f1 - f0))  # ∫_{grid0}^t F
    if tail == "lower":
        return t - below / alpha
    above = (grid[-1] - t) - (C[:, -1:] - below)  # ∫_t^{grid end} (1 − F)
    return t + above / alpha


def _warn_no_mass(mass: np.ndarray, what: str, cause: str, consequence: str) -> np.ndarray:
    """Rows without positive mass (returned as a mask), with one warning that counts them."""
    empty = ~(mass > 0)
    if empty.any():
        warnings.warn(
            f"the estimated {what} has no positive mass at {int(empty.sum())} of {len(mass)} V-points "
            f"(V far outside the data, {cause}); {consequence}",
            CcmeWarning,
            stacklevel=4,
        )
    return empty
