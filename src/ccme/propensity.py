"""Propensity scores: learners, cross-fitted predictions, clipping, diagnostics.

The propensity π(x) = P(A = 1 | X = x) enters the doubly robust and IPW
pseudo-outcomes through the weights ω_i = A_i / π̂(X_i) (arm 1) and
(1 − A_i) / (1 − π̂(X_i)) (arm 0); see eq. (pseudo_outcome) of the paper.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .errors import FormatError, OverlapWarning, ParameterError, PositivityError
from .io import check_schema, int_keys, make_state, str_keys

__all__ = ["PropensityModel", "Overlap", "make_propensity", "overlap_diagnostics"]


@dataclass(frozen=True)
class PropensityModel:
    """What estimates π: a learner (sklearn classifier) or known scores."""

    name: str
    learner: object = None
    known: np.ndarray | None = None

    def fit_predict(self, X_train, A_train, X_test, rows_test) -> np.ndarray:
        """Fit on (X_train, A_train) and return P(A = 1) at X_test."""
        if self.known is not None:
            return self.known[rows_test]
        from sklearn.base import clone

        model = clone(self.learner)
        with warnings.catch_warnings():
            # A non-converged logistic fit on separable data is reported by the
            # positivity check and the clipping warning below, in our words.
            warnings.filterwarnings("ignore", message=".*did not converge.*")
            warnings.filterwarnings("ignore", message=".*lbfgs failed.*")
            model.fit(X_train, A_train)
        classes = list(model.classes_)
        if 1 not in classes:
            return np.zeros(len(X_test))
        return model.predict_proba(X_test)[:, classes.index(1)]


def make_propensity(spec, n: int, seed) -> PropensityModel:
    """Interpret ``propensity=``: "logistic", "forest", a classifier, or known scores."""
    if isinstance(spec, str):
        if spec == "logistic":
            from sklearn.linear_model import LogisticRegression
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import StandardScaler

            # An unpenalised logistic regression (R's glm) on standardised columns.
            learner = make_pipeline(StandardScaler(), LogisticRegression(C=np.inf, max_iter=2000))
            return PropensityModel("logistic regression", learner)
        if spec == "forest":
            from sklearn.ensemble import RandomForestClassifier

            learner = RandomForestClassifier(n_estimators=100, max_depth=4, random_state=_int_seed(seed))
            return PropensityModel("random forest (100 trees, max_depth 4)", learner)
        raise ParameterError(
            f"`propensity` must be 'logistic', 'forest', a scikit-learn classifier or an array of scores; got {spec!r}"
        )
    if hasattr(spec, "fit") and hasattr(spec, "predict_proba"):
        return PropensityModel(type(spec).__name__, spec)
    try:
        scores = np.asarray(spec, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(
            f"`propensity` must be 'logistic', 'forest', a scikit-learn classifier or an array of scores; "
            f"got {type(spec).__name__}"
        ) from None
    if scores.shape != (n,):
        raise ParameterError(f"`propensity` scores must have one value per row ({n}); got shape {scores.shape}")
    if not np.all((scores >= 0) & (scores <= 1)):
        raise ParameterError("`propensity` scores must lie in [0, 1]")
    return PropensityModel("known scores", known=scores.copy())


def _int_seed(seed) -> int | None:
    if seed is None:
        return None
    return int(np.random.default_rng(seed).integers(2**31 - 1))


@dataclass(frozen=True)
class Overlap:
    """Overlap diagnostics of the cross-fitted propensity scores."""

    scores: np.ndarray          # cross-fitted, before clipping
    clip: float
    n_clipped_low: int
    n_clipped_high: int
    ess: dict                   # arm -> effective sample size of the weights
    n_arm: dict                 # arm -> number of units
    trim: float = 0.0
    kept: np.ndarray | None = None  # units whose score lies in [trim, 1 - trim] (None: no trimming)
    n_trimmed_low: int = 0
    n_trimmed_high: int = 0

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Overlap"
    STATE_VERSION = 1
    _COUNTS = ("n_clipped_low", "n_clipped_high", "n_trimmed_low", "n_trimmed_high")

    def to_state(self) -> dict:
        """The diagnostics as a versioned state for :mod:`ccme.io` (the per-arm dicts keyed ``"1"``/``"0"``)."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, scores=self.scores, clip=self.clip,
                          trim=self.trim, kept=self.kept, ess=str_keys(self.ess), n_arm=str_keys(self.n_arm),
                          **{name: getattr(self, name) for name in self._COUNTS})

    @classmethod
    def from_state(cls, state) -> "Overlap":
        """Inverse of :meth:`to_state`."""
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=("scores", "clip", "trim", "kept", "ess", "n_arm", *cls._COUNTS))
        if not isinstance(state["scores"], np.ndarray) or state["scores"].ndim != 1:
            raise FormatError("the stored propensity scores are not a vector")
        kept = state["kept"]
        if kept is not None and not (isinstance(kept, np.ndarray) and kept.shape == state["scores"].shape):
            raise FormatError("the stored trimming mask does not match the propensity scores")
        return cls(state["scores"], state["clip"], state["n_clipped_low"], state["n_clipped_high"],
                   int_keys(state["ess"], what="the effective sample sizes"),
                   int_keys(state["n_arm"], what="the arm sizes"), state["trim"], kept,
                   state["n_trimmed_low"], state["n_trimmed_high"])

    @property
    def n_clipped(self) -> int:
        return self.n_clipped_low + self.n_clipped_high

    @property
    def n_trimmed(self) -> int:
        return self.n_trimmed_low + self.n_trimmed_high


def clip_scores(scores: np.ndarray, clip: float) -> np.ndarray:
    return np.clip(scores, clip, 1.0 - clip)


def overlap_diagnostics(scores: np.ndarray, A: np.ndarray, clip: float, *, warn: bool = True,
                        trim: float = 0.0) -> Overlap:
    """Trimming and clipping counts and the effective sample size (Σw)²/Σw² of each arm's weights.

    Trimming and clipping (see ``ccme.fit``): units whose score lies outside
    [trim, 1 − trim] are dropped from the second stage; the scores of the units
    kept are then clipped to [clip, 1 − clip].  The clipping counts, the
    warning and the effective sample sizes therefore concern the kept units
    only; with trim ≥ clip nothing is left to clip.  The positivity check looks
    at every unit: trimming cannot rescue a treatment the covariates predict.
    """
    if trim > 0:
        kept = (scores >= trim) & (scores <= 1.0 - trim)
        trimmed_low, trimmed_high = int(np.sum(scores < trim)), int(np.sum(scores > 1.0 - trim))
    else:
        kept, trimmed_low, trimmed_high = np.ones(len(scores), dtype=bool), 0, 0
    low = int(np.sum(kept & (scores < clip)))
    high = int(np.sum(kept & (scores > 1.0 - clip)))
    all_low, all_high = int(np.sum(scores < clip)), int(np.sum(scores > 1.0 - clip))
    clipped = clip_scores(scores, clip)
    ess, n_arm = {}, {}
    for arm in (1, 0):
        in_arm = (A == arm) & kept
        w = 1.0 / (clipped[in_arm] if arm == 1 else 1.0 - clipped[in_arm])
        ess[arm] = float(w.sum() ** 2 / np.sum(w**2)) if w.size else 0.0
        n_arm[arm] = int(in_arm.sum())
    treated_scores = scores[A == 1]
    control_scores = scores[A == 0]
    # Positivity fails outright when the cross-fitted scores separate the
    # arms - the covariates predict the treatment out of sample: either
    # perfectly (AUC ≥ 0.999, whatever the learner's scores look like: a
    # forest's stay inside the clipping bounds), or almost perfectly
    # (AUC ≥ 0.99) with most units at the clipping bounds.
    if treated_scores.size and control_scores.size:
        auc = _auc(treated_scores, control_scores)
        outside = all_low + all_high
        if auc >= 0.999 or (outside > 0.5 * len(scores) and auc >= 0.99):
            raise PositivityError(
                "the treatment is perfectly predicted by the propensity covariates "
                f"(the cross-fitted scores separate the arms, AUC = {auc:.3f}, and {outside} of {len(scores)} "
                f"lie outside [{clip:g}, {1 - clip:g}]): "
                "positivity fails, and no counterfactual distribution is identified"
            )
    if warn and (low or high):
        warnings.warn(
            f"{low + high} of {int(kept.sum())} propensity scores were clipped to [{clip:g}, {1 - clip:g}] "
            f"({low} below, {high} above): overlap is weak, and the weights of those units are capped",
            OverlapWarning,
            stacklevel=3,
        )
    return Overlap(scores, clip, low, high, ess, n_arm, float(trim), kept if trim > 0 else None, trimmed_low,
                   trimmed_high)


def _auc(treated_scores: np.ndarray, control_scores: np.ndarray) -> float:
    """Area under the ROC curve of the scores (Mann-Whitney statistic, ties counted half)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([treated_scores, control_scores]))
    n1, n0 = len(treated_scores), len(control_scores)
    return float((ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
