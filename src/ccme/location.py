"""The location stage: each arm's counterfactual mean as a linear function of V, so the embedding learns the rest.

``ccme.fit(..., location="linear")`` estimates, per arm a, a linear model
m̂_a(v) of E[Y^a | V = v], fits the conditional mean embedding to the
residual outcome R = Y − m̂_A(V), and reads every functional out of the
residual's estimated law shifted by m̂_a(v):

    p̂(y | v) = p̂_R(y − m̂_a(v) | v),    μ̂(v) = Σ_k c_k(v) φ(r_k + m̂_a(v)).

Why this is exact, whatever m̂: for a fixed function m of V, the residual's
potential outcome is R^a = Y^a − m(V), unit by unit (a change of variable
given V), so p(Y^a | V = v)(y) = p(R^a | V = v)(y − m(v)), and R^a is
identified and estimated doubly robustly exactly as Y^a is (the propensity,
the first stage and the pseudo-outcome are unchanged).  The mean model only
decides how much of V's effect is left for the kernels to learn.  A law that
moves with V mostly by a shift (semi-synthetic IHDP, V = all 25 covariates)
then needs no 25-dimensional kernel smoothing: a linear mean extrapolates
where a Gaussian kernel in V cannot.  Where V changes the shape (modes
that move apart), the residual still depends on V and the V-kernel learns
it, but a poor mean can make that harder (the zoo's ``mixture_v3``: about
twice the error), so the stage is not always on:
``location="auto"`` (:func:`choose_location`) tunes with and without it and
keeps the located fit where its read-out criterion is lower by more than
:data:`AUTO_THRESHOLD` standard errors of the paired difference, and the
default (:func:`default_location`) is "auto" only with
:data:`MANY_V_COVARIATES` covariates or more in V.

The read-out criterion of a located fit (its σ_y, and the comparison of
"auto") scores each fold's estimate with location models fitted on that
fold's target units only (:func:`fold_residuals`, :data:`FOLD_CRITERION`):
the plain fit's fold estimate learns V's effect from those units alone, and
a located one whose mean came from every unit would be scored as if it
knew more than the fitted estimate does.

The mean model follows the pseudo-outcome of the fit's ``mode``
(Kennedy's DR-learner for ``"dr"``): a ridge regression on V of

- ``"dr"``: ψ_i = m̂₀(X_i) + 1{A_i = a}/π̂_a(X_i) · (Y_i − m̂₀(X_i)), m̂₀ a
  linear ridge of Y on the outcome model's covariates among the arm's units
  (leave-one-out fits for the arm's own units);
- ``"ipw"``: ψ_i = ȳ_a + 1{A_i = a}/π̂_a(X_i) · (Y_i − ȳ_a), ȳ_a the arm's
  mean outcome: the DR pseudo-outcome with a constant outcome model, unbiased
  as 1{A_i = a} Y_i / π̂_a(X_i) is; that one moves by c·1{A_i = a}/π̂_a(X_i),
  not by c, when Y moves by c, so the estimate depended on the outcome's
  origin;  ``"pi"``: ψ_i = m̂₀(X_i);
- ``"onestep"``: Y_i among the arm's units (the arm's observed law).

Every regression sees the outcomes clipped to Tukey's far-out fences
(:mod:`ccme.fences`; a far-out value would pull a least-squares line), and
the residuals are those of the outcomes themselves.  Each ridge has an
unpenalised intercept, standardised columns and its
penalty chosen by exact leave-one-out (PRESS, via the hat matrix's
diagonal; Allen 1974) over :data:`PENALTY_GRID`.  A unit's residual uses its
leave-one-out mean, R_i = Y_i − m̂_a^{(−i)}(V_i), so that its own outcome
does not pull its centre (its own target moves the fit at V_i by h_ii times
its residual; the mean leverage h_ii is p over the regression's units, with
IHDP's 25 covariates in V 25/985 for the DR-learner over all units and 25/139
for the one-step regression within the treated arm, and an arm unit's
pseudo-outcome carries 1/π̂ times its outcome); the read-out shifts by the
full fit m̂_a(v).  So the change of variable above is exact for the full fit
up to these centres, each of which differs from m̂_a(V_i) by the unit's
leverage times its leave-one-out residual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError, FormatError, ParameterError
from .fences import bulk_range

__all__ = ["AUTO_THRESHOLD", "FOLD_CRITERION", "LocationModel", "LOCATIONS", "MANY_V_COVARIATES", "check_location",
           "choose_location", "clearly_lower", "criterion_difference", "default_location", "fit_location",
           "fold_residuals", "readout_criteria", "readout_criterion", "ridge_loo"]

#: What ``fit(location=...)`` takes besides None (no location stage): the linear model; "auto", the fit with or
#: without it, by the read-out criterion (:func:`choose_location`); or "default", the rule of
#: :func:`default_location` (``fit``'s default).
LOCATIONS = ("linear", "auto", "default")

#: ``location="default"`` is "auto" where V has at least this many covariates (variables of the formula's second
#: part), and no location stage below.  A kernel in V learns a shift point by point, which many covariates make
#: hopeless; a linear mean extrapolates it.  Chosen on the zoo's "choose" split, where only ``sparse_v10`` (10
#: covariates in V) has more than 5, and "auto" keeps the located fit there in every seed (0.26 / 0.29 of the plain
#: fit's error); the "report" case with many (``ihdp_all25``, 25) gains alike (0.53 / 0.61).  Below it the
#: read-out criterion is confidently wrong on some cases (README, "A noise threshold").
MANY_V_COVARIATES = 10

#: Whether a located fit's read-out criterion (which chooses its σ_y, and which ``location="auto"`` compares)
#: scores each fold's estimate on location models fitted on that fold's target units (:func:`fold_residuals`),
#: so that it learns V's effect from the data the plain fit's fold estimate learns it from.  The fitted estimate
#: keeps the models of all the units.  Chosen on the zoo's "choose" split (seeds 1-6,
#: ``location_choice.py --setting ccme.location.FOLD_CRITERION=True --tag fold_criterion``): the located fit
#: 0.572 of the plain fit's error (0.578 without), "auto" 0.534 (0.538); on "report" the located fit 0.906
#: (0.922) and "auto" 0.898 (0.889) on its first 12 cases, 0.969 (0.990) on the 3 added with a factor in V.
FOLD_CRITERION = True

#: Ridge penalties λ (on standardised columns, in ZᵀWZ + λ n I), searched by leave-one-out: from almost none to a
#: near-constant mean.
PENALTY_GRID = tuple(float(x) for x in np.logspace(-6, 2, 33))


def check_location(location, *, readout_tuned: bool = True) -> str | None:
    """Validate ``fit(location=)``: None or one of :data:`LOCATIONS`.

    Parameters
    ----------
    location : None or str
    readout_tuned : bool, default True
        Whether the fit tunes the read-out bandwidth (``"y_bandwidth"`` in its grids), which "auto" compares by.

    Returns
    -------
    None or str

    Raises
    ------
    ParameterError
        Any other value, or "auto" without a tuned read-out bandwidth.

    Examples
    --------
    >>> check_location("linear"), check_location(None)
    ('linear', None)
    """
    if not (location is None or (isinstance(location, str) and location in LOCATIONS)):
        raise ParameterError(f"`location` must be None or one of {list(LOCATIONS)}; got {location!r}")
    if location == "default":
        return location
    if location == "auto" and not readout_tuned:
        raise ParameterError("location='auto' compares the fits by the read-out bandwidth's criterion, which needs "
                             "tune='auto' (or a tune dict with 'y_bandwidth'); pass location='linear' or None")
    return location


def default_location(*, n_v_covariates: int, readout_tuned: bool, d_y: int, many: int) -> str | None:
    """``fit(location="default")``: "auto" where V has ``many`` covariates or more, else None.

    "auto" also needs the read-out criterion (a tuned σ_y) and, as a default, a
    one-dimensional outcome: a multivariate outcome's criterion exists
    (:func:`ccme.tuning.integrated_square`) and ``location="auto"`` may be asked
    for, but as a default it would double a neural fit's time on the strength of
    one case (the zoo's ``bivariate``), so it is not; without it the default
    is no location stage.

    Parameters
    ----------
    n_v_covariates : int
        The variables of the formula's second part (a factor counts once).
    readout_tuned : bool
    d_y : int
    many : int
        The threshold: the estimator's :attr:`~ccme.estimators.base.Estimator.location_from`
        (:data:`MANY_V_COVARIATES` for the ridge).

    Returns
    -------
    None or str

    Examples
    --------
    >>> rule = dict(readout_tuned=True, d_y=1, many=MANY_V_COVARIATES)
    >>> default_location(n_v_covariates=25, **rule), default_location(n_v_covariates=2, **rule)
    ('auto', None)
    """
    return "auto" if n_v_covariates >= many and readout_tuned and d_y == 1 else None


def readout_criteria(report) -> dict:
    """Per arm, the read-out criterion at the chosen σ_y (:func:`ccme.tuning.tune_outcome_bandwidth`); {} if untuned.

    The weighted least-squares cross-validation estimate of the integrated
    squared error (up to a constant that does not depend on the estimate),
    on held-out units and weights that do not depend on the outcome's
    transformation: two fits of the same data with the same seed are scored
    on the same units, so their criteria compare.

    Parameters
    ----------
    report : ccme.tuning.TuningReport

    Returns
    -------
    dict
        Arm code → the criterion's value at the arm's chosen read-out bandwidth.
    """
    return {arm: float(c.criterion[np.argmin(np.abs(np.asarray(c.values) - c.chosen))])
            for arm, c in report.readout_curves().items()}


def readout_criterion(report) -> float:
    """:func:`readout_criteria` summed over the arms (NaN where the read-out bandwidth was not tuned)."""
    values = readout_criteria(report)
    return float(sum(values.values())) if values else float("nan")


#: ``location="auto"`` keeps the located fit only where its read-out criterion is below the plain fit's by more
#: than this many standard errors of their paired difference (:func:`criterion_difference`).  The criterion is a
#: noisy estimate of the ISE; at 0 a difference smaller than its noise picks the located fit as often as not.
#: Chosen on the zoo's "choose" split (benchmarks/accuracy/location_choice.py).  For Neural-Kernel, whose fits
#: always compare the two (:data:`ccme.estimators.training.NEURAL_LOCATION_FROM`), 0 against 1 on "choose" (n = 1000,
#: seeds 1-4, ``python benchmarks/tuning_rule.py --setting ccme.location.AUTO_THRESHOLD=1.0,0.0 --config
#: neural_kernel --split choose --seeds 1,2,3,4 --n 1000 --eval-points 100 --parallel --stem
#: nk_location_threshold``) gave 0.979 (per case-seed 95% interval 0.875 to 1.063): weak_overlap 0.82 / 0.76,
#: mixture_v3 1.13 / 1.17, 12 of 16 case-arms unchanged; 1 stays.
AUTO_THRESHOLD = 1.0


def clearly_lower(difference: float, standard_error: float) -> bool:
    """Whether a criterion difference (:func:`criterion_difference`) is below −:data:`AUTO_THRESHOLD` standard
    errors: the rule by which a fit replaces a reference fit (here and in :mod:`ccme.fit_choice`); False for NaN."""
    return bool(np.isfinite(difference) and difference < -AUTO_THRESHOLD * standard_error)


def criterion_difference(report, reference, arms=None) -> tuple[float, float]:
    """The read-out criterion of ``report`` less that of ``reference``, summed over the arms, and its standard error.

    Both fits score the same held-out units (same data, folds and seed), so
    the difference is a sum of paired per-unit differences.  A unit's
    differences are summed over its arms and folds first (it is held out in
    several folds, and in every arm by the augmented criterion), and the
    standard error is that of a sum of m such unit totals d_u:
    √(m / (m − 1) Σ_u (d_u − d̄)²).

    Parameters
    ----------
    report, reference : ccme.tuning.TuningReport
        Two fits' tuning reports, each with its read-out curves' held terms.
    arms : sequence of arm codes or None
        Sum over these arms only (None: every arm with a read-out curve).

    Returns
    -------
    (float, float)
        The difference and its standard error; NaN where a criterion or its terms are missing, or the two fits
        held out different units.
    """
    ours, theirs = ({arm: c.held for arm, c in r.readout_curves().items() if arms is None or arm in arms}
                    for r in (report, reference))
    if not ours or ours.keys() != theirs.keys() or any(v is None for v in (*ours.values(), *theirs.values())):
        return float("nan"), float("nan")
    units, diffs = [], []
    for arm, (u, t) in ours.items():
        u0, t0 = theirs[arm]
        if not np.array_equal(u, u0):
            return float("nan"), float("nan")
        units.append(u)
        diffs.append(t - t0)
    units, diffs = np.concatenate(units), np.concatenate(diffs)
    _, inverse = np.unique(units, return_inverse=True)
    d = np.bincount(inverse, weights=diffs)
    m = d.size
    se = float(np.sqrt(m) * np.std(d, ddof=1)) if m > 1 else float("nan")
    return float(d.sum()), se


def choose_location(fits: dict):
    """``location="auto"``: the linear location stage where its read-out criterion is clearly lower, else none.

    The located fit is kept where its criterion (summed over the arms) is
    below the plain fit's by more than :data:`AUTO_THRESHOLD` standard errors of the
    paired difference (:func:`criterion_difference`): the stage changes the
    estimate everywhere, and a difference within the criterion's noise is no
    evidence that it helps.  One choice for every arm, so that the result's
    hyperparameters, tuning report and summary describe every arm's fit.
    The choice, the difference and its standard error go into the chosen
    fit's tuning report (``chosen["location"]`` and a note).

    Parameters
    ----------
    fits : dict
        None / "linear" → the fit's estimate, whose ``tuned`` is its :class:`ccme.estimators.base.Tuned`.

    Returns
    -------
    None or str
        The key of the chosen fit (None where the difference is not clear or cannot be computed).
    """
    diff, se = criterion_difference(fits["linear"].tuned.report, fits[None].tuned.report)
    kind = "linear" if clearly_lower(diff, se) else None
    report = fits[kind].tuned.report
    report.chosen["location"] = "linear" if kind else "none"
    if np.isfinite(diff):
        report.notes.append(f"location 'auto': {'linear' if kind else 'none'} chosen by the read-out criterion "
                            f"(linear minus none {diff:.4g}, standard error {se:.3g}; linear where below "
                            f"-{AUTO_THRESHOLD:g} standard errors)")
    else:   # e.g. a multivariate outcome whose read-out bandwidth kept the rule (see the tuning's notes)
        report.notes.append("location 'auto': none, as the read-out criterion that compares the fits was not "
                            "computed (see the notes on the outcome bandwidth)")
    return kind


@dataclass(frozen=True)
class LocationModel:
    """m̂_a(v) = intercept + ((v − center) / scale) · coef: one arm's linear mean of the outcome given V.

    Attributes
    ----------
    center, scale : ndarray (d_v,)
        The standardisation of V's encoded columns (scale 1 for a constant column).
    coef : ndarray (d_v, d_y)
    intercept : ndarray (d_y,)
    penalty : ndarray (d_y,)
        The ridge penalty λ chosen by leave-one-out, per outcome dimension.
    target : str
        What was regressed on V: "dr", "ipw", "pi" (pseudo-outcomes) or "onestep" (the arm's outcomes).
    units : ndarray of int (n_units,) or None
        The design rows the regression was fitted on (all units, or the arm's for "onestep"); None for a model
        given by hand or read from a file of state version 1.
    residuals : ndarray (n_units, d_y) or None
        Their leave-one-out residuals ψ_i − m̂^{(−i)}(V_i): with ``units``, what the bootstrap's perturbation of
        the model needs (:meth:`coefficient_influence`).

    Examples
    --------
    >>> import numpy as np
    >>> m = LocationModel(center=np.zeros(1), scale=np.ones(1), coef=np.array([[2.0]]), intercept=np.array([1.0]),
    ...                   penalty=np.array([0.0]), target="onestep")
    >>> m.predict(np.array([[0.5], [1.0]]))[:, 0]
    array([2., 3.])
    """

    center: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    penalty: np.ndarray
    target: str
    units: np.ndarray | None = None
    residuals: np.ndarray | None = None

    def __post_init__(self):
        for name in ("center", "scale", "coef", "intercept", "penalty", "residuals"):
            if getattr(self, name) is None:
                continue
            value = np.array(getattr(self, name), dtype=np.float64)
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if self.units is not None:
            units = np.array(self.units, dtype=np.int64)
            units.setflags(write=False)
            object.__setattr__(self, "units", units)
        d_v, d_y = self.coef.shape if self.coef.ndim == 2 else (-1, -1)
        if (self.center.shape != (d_v,) or self.scale.shape != (d_v,) or self.intercept.shape != (d_y,)
                or self.penalty.shape != (d_y,) or not np.all(self.scale > 0)):
            raise FormatError("a location model needs center and scale (d_v,) with positive scales, coef (d_v, d_y), "
                              "intercept and penalty (d_y,)")
        if (self.units is None) != (self.residuals is None) or (
                self.units is not None and (self.units.ndim != 1 or self.residuals.shape != (len(self.units), d_y)
                                            or (len(self.units) and self.units.min() < 0))):
            raise FormatError("a location model's units (n_units,) and residuals (n_units, d_y) come together")

    @property
    def d_v(self) -> int:
        return self.coef.shape[0]

    @property
    def d_y(self) -> int:
        return self.coef.shape[1]

    def predict(self, V) -> np.ndarray:
        """m̂_a at the V-points (encoded columns), shape (n_v, d_y).

        Raises
        ------
        DataError
            ``V`` without d_v columns.
        """
        V = np.asarray(V, dtype=np.float64)
        if V.ndim != 2 or V.shape[1] != self.d_v:
            raise DataError(f"the location model takes V with {self.d_v} column(s); got shape {V.shape}")
        return self.intercept + ((V - self.center) / self.scale) @ self.coef

    def coefficient_influence(self, V_units: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Each unit's share of the coefficients' sampling error: δcoef = Σ_i g_i Ψ_i for multipliers g_i.

        The ridge's coefficients on the standardised columns are
        β = G⁻¹ Z̃ᵀW ψ, G = Z̃ᵀWZ̃ + λ n̄ I (:func:`ridge_loo`; Z̃ is centred with
        the weights, so the intercept drops out), linear in the targets ψ; so
        the multiplier bootstrap's perturbation replaces ψ by its residuals
        times the multipliers, Ψ_i = w_i G⁻¹ z̃_i ê_i, with the leave-one-out
        residuals ê_i (HC3's, MacKinnon & White 1985).  Returned on the
        original columns' scale (divided by ``scale``), so that a V-point's
        mean moves by ``v @ δcoef``.  The intercept's error is left out: a
        location stage's estimate does not depend on it (:mod:`ccme.bootstrap`,
        "A located fit's effects").

        Parameters
        ----------
        V_units : ndarray (n_units, d_v)
            V's encoded columns at :attr:`units`.
        weights : ndarray (n_units,) or None
            The regression's unit weights there (None: all 1).

        Returns
        -------
        ndarray (n_units, d_v * d_y)
            Column j·d_y + l: coefficient j of outcome dimension l.

        Raises
        ------
        ParameterError
            A model without its units and residuals (given by hand, or read from an older file).
        """
        if self.units is None:
            raise ParameterError("this location model does not keep its units and residuals (given by hand, or "
                                 "saved by an earlier ccme): fit again for its bootstrap")
        V_units = np.asarray(V_units, dtype=np.float64)
        w = np.ones(len(V_units)) if weights is None else np.asarray(weights, dtype=np.float64)
        Z = (V_units - self.center) / self.scale
        gram = Z.T @ (w[:, None] * Z)
        out = np.empty((len(Z), self.d_v, self.d_y))
        for l, lam in enumerate(self.penalty):
            solved = np.linalg.solve(gram + lam * w.sum() * np.eye(self.d_v), (w[:, None] * Z).T)  # (d_v, n_units)
            out[:, :, l] = (solved * self.residuals[:, l]).T / self.scale
        return out.reshape(len(Z), -1)

    def describe(self) -> str:
        """One line for the summary, e.g. "linear in V (DR pseudo-outcome), ridge penalty 0.001"."""
        what = {"dr": "DR pseudo-outcome", "ipw": "IPW pseudo-outcome", "pi": "plug-in pseudo-outcome",
                "onestep": "the arm's outcomes"}[self.target]
        penalties = ", ".join(f"{p:.3g}" for p in self.penalty)
        return f"linear in V ({what}), ridge penalty {penalties} by leave-one-out"

    #: Version 2 added ``units`` and ``residuals`` (a version-1 model is read without them).
    STATE_SCHEMA = "ccme.LocationModel"
    STATE_VERSION = 2
    _FIELDS = ("center", "scale", "coef", "intercept", "penalty", "target")

    def to_state(self) -> dict:
        """The model as a versioned state for :mod:`ccme.io`."""
        from .io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, **{name: getattr(self, name) for name in self._FIELDS},
                          units=self.units, residuals=self.residuals)

    @classmethod
    def from_state(cls, state) -> "LocationModel":
        """Inverse of :meth:`to_state`."""
        from .io import check_schema

        version = check_schema(state, cls.STATE_SCHEMA, (1, 2))
        check_schema(state, cls.STATE_SCHEMA, version, keys=cls._FIELDS + (("units", "residuals") if version >= 2 else ()))
        if state["target"] not in ("dr", "ipw", "pi", "onestep"):
            raise FormatError(f"a stored location model has the unknown target {str(state['target'])[:20]!r}")
        kept = {"units": state["units"], "residuals": state["residuals"]} if version >= 2 else {}
        return cls(**{name: state[name] for name in cls._FIELDS}, **kept)


@dataclass(frozen=True)
class RidgeFit:
    """What :func:`ridge_loo` returns: the standardisation, coefficients, penalties and leave-one-out residuals."""

    center: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    penalty: np.ndarray
    loo_residuals: np.ndarray

    def predict(self, Z: np.ndarray) -> np.ndarray:
        return self.intercept + ((Z - self.center) / self.scale) @ self.coef


def ridge_loo(Z: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None,
              grid=PENALTY_GRID) -> RidgeFit:
    """Ridge regression of each column of ``y`` on ``Z`` with its penalty chosen by exact leave-one-out.

    Minimises Σ_i w_i (y_i − b − z̃_iᵀβ)² + λ n̄ ‖β‖², z̃ the columns
    standardised by their (weighted) means and standard deviations, n̄ = Σ w_i,
    the intercept b unpenalised.  The fit is a linear smoother ŷ = S y with
    S = 1wᵀ/n̄ + Z̃ (Z̃ᵀWZ̃ + λn̄I)⁻¹ Z̃ᵀW, so the leave-one-out residuals are
    (y_i − ŷ_i)/(1 − S_ii), exactly (the PRESS residuals of R's
    ``lm.influence``; the intercept refitted, the standardisation held fixed);
    λ minimises Σ_i w_i e_i² for each column.

    Parameters
    ----------
    Z : ndarray (n, p)
    y : ndarray (n, d)
    weights : ndarray (n,) or None
        Non-negative unit weights (None: all 1).
    grid : sequence of float
        The penalties searched.

    Returns
    -------
    RidgeFit
        ``loo_residuals`` (n, d) at each column's chosen penalty.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.standard_normal((200, 3))
    >>> y = (1.0 + Z @ [2.0, 0.0, -1.0] + 0.1 * rng.standard_normal(200))[:, None]
    >>> fit = ridge_loo(Z, y)
    >>> np.round(fit.predict(np.zeros((1, 3))), 1)
    array([[1.]])
    """
    Z = np.asarray(Z, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, p = Z.shape
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    total = w.sum()
    center = w @ Z / total
    scale = np.sqrt(w @ (Z - center) ** 2 / total)
    scale = np.where(scale > 1e-12 * np.maximum(1.0, np.abs(center)), scale, 1.0)  # a constant column: left as 0
    y_mean = w @ y / total
    root = np.sqrt(w)
    Zt = root[:, None] * (Z - center) / scale
    yt = root[:, None] * (y - y_mean)
    U, d, Vt = np.linalg.svd(Zt, full_matrices=False)
    Uy = U.T @ yt
    Zs = (Z - center) / scale
    base_leverage = w / total  # the intercept's share of S_ii
    best_cv = np.full(y.shape[1], np.inf)
    best = np.zeros(y.shape[1])
    coef = np.zeros((p, y.shape[1]))
    residuals = np.zeros_like(y)
    for lam in grid:
        shrink = d**2 / (d**2 + lam * total)
        beta = Vt.T @ ((d / (d**2 + lam * total))[:, None] * Uy)
        leverage = base_leverage + (U**2) @ shrink
        e = (y - y_mean - Zs @ beta) / np.maximum(1.0 - leverage, 1e-12)[:, None]
        cv = w @ e**2
        better = cv < best_cv
        best_cv[better], best[better] = cv[better], lam
        coef[:, better], residuals[:, better] = beta[:, better], e[:, better]
    return RidgeFit(center=center, scale=scale, coef=coef, intercept=y_mean, penalty=best, loo_residuals=residuals)


def fit_location(*, V: np.ndarray, Xo: np.ndarray, Y: np.ndarray, A: np.ndarray, scores: np.ndarray, arms,
                 mode: str, sampling_weights: np.ndarray | None = None, rows: np.ndarray | None = None):
    """Each arm's location model and the residual outcome R_i = Y_i − m̂_{A_i}^{(−i)}(V_i) of every unit.

    Parameters
    ----------
    V, Xo : ndarray (n, d_v), (n, d_o)
        V's encoded columns and the outcome model's covariates.
    Y : ndarray (n, d_y)
    A : ndarray (n,) of arm codes
    scores : ndarray (n, k)
        Each arm's clipped cross-fitted probability (column = arm code), as the fit's pseudo-outcomes use them.
    arms : sequence of arm codes
    mode : {"dr", "ipw", "pi", "onestep"}
        Which mean is regressed on V (module docstring).
    sampling_weights : ndarray (n,) or None
        Weights of every ridge regression.
    rows : ndarray of int or None
        Fit the models on these units only (None: all); the others' residuals are Y_i − m̂_{A_i}(V_i), with no
        unit left out (:func:`fold_residuals`).

    Returns
    -------
    models : dict
        Arm code → :class:`LocationModel`.
    residual : ndarray (n, d_y)
        The outcome the embedding is fitted to.

    Raises
    ------
    DataError
        A non-finite residual (a pseudo-outcome overflowed).
    """
    n = len(Y)
    w = np.ones(n) if sampling_weights is None else np.asarray(sampling_weights, dtype=np.float64)
    inside = np.arange(n) if rows is None else np.sort(np.asarray(rows, dtype=np.int64))
    residual = np.empty_like(Y)
    models = {}
    # The mean model's outcomes: far-out values clipped to Tukey's fences (ccme.fences), so that a least-squares
    # line is not pulled by them; the residuals are still those of Y itself.
    low, high = bulk_range(Y[inside])
    Yc = np.clip(Y, low, high)
    for arm in arms:
        own = A == arm
        fit_own = np.zeros(n, dtype=bool)
        fit_own[inside] = own[inside]                    # the arm's units among the fitted ones
        units = np.flatnonzero(fit_own) if mode == "onestep" else inside
        if mode == "onestep":
            fit = ridge_loo(V[fit_own], Yc[fit_own], w[fit_own])
            residual[own] = Y[own] - fit.predict(V[own])
            residual[fit_own] = Y[fit_own] - (Yc[fit_own] - fit.loo_residuals)
        else:
            pi = scores[:, arm]
            if mode == "ipw":
                weights = w[fit_own]
                mean = weights @ Yc[fit_own] / weights.sum()
                psi = mean + np.where(own[:, None], (Yc - mean) / pi[:, None], 0.0)
            else:
                first = ridge_loo(Xo[fit_own], Yc[fit_own], w[fit_own])
                m0 = first.predict(Xo)
                m0[fit_own] = Yc[fit_own] - first.loo_residuals  # the arm's units: their leave-one-out fits
                psi = m0 + np.where(own[:, None], (Yc - m0) / pi[:, None], 0.0) if mode == "dr" else m0
            fit = ridge_loo(V[inside], psi[inside], w[inside])
            centre = fit.predict(V)
            # m̂^(−i)(V_i) = ψ_i − e_i: the unit's own pseudo-outcome left out of its centre
            centre[inside] = psi[inside] - fit.loo_residuals
            residual[own] = Y[own] - centre[own]
        models[arm] = LocationModel(center=fit.center, scale=fit.scale, coef=fit.coef, intercept=fit.intercept,
                                    penalty=fit.penalty, target=mode, units=units, residuals=fit.loo_residuals)
    if not np.all(np.isfinite(residual)):
        raise DataError("the location model's residuals are not finite (check the outcome's scale and the clipping)")
    return models, residual


def fold_residuals(folds, **data) -> tuple | None:
    """Per fold, the residual outcome of location models fitted on that fold's target units only (None: off).

    What a located fit's read-out criterion scores (:data:`FOLD_CRITERION`):
    fold k's estimate at its held-out (nuisance) units must learn V's effect
    from the fold's target units alone, as the plain fit's fold estimate
    does; with the models of all the units, the located fold estimate would
    borrow its means from twice the data and look better than it is.

    Parameters
    ----------
    folds : sequence of ccme.crossfit.Fold
    **data
        :func:`fit_location`'s arguments but ``rows``.

    Returns
    -------
    tuple of ndarray (n, d_y), or None
        One residual outcome per fold; None where :data:`FOLD_CRITERION` is off (the criterion then scores the
        residual of the models of all the units).
    """
    if not FOLD_CRITERION:
        return None
    return tuple(fit_location(**data, rows=fold.target)[1] for fold in folds)
