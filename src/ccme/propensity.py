"""Propensity scores: learners, cross-fitted predictions, clipping, diagnostics.

The propensity π(x) = P(A = 1 | X = x) enters the doubly robust and IPW
pseudo-outcomes through the weights ω_i = A_i / π̂(X_i) (arm 1) and
(1 − A_i) / (1 − π̂(X_i)) (arm 0); see eq. (pseudo_outcome) of the paper.
A treatment with k ≥ 3 levels has the generalised propensity π_j(x) =
P(A = j | X = x) of each arm j (Imbens, 2000), and arm j's weights are
1{A_i = j} / π̂_j(X_i).  Scores are therefore either a vector π̂ (binary) or
an (n, k) matrix of the π̂_j; :func:`arm_probabilities` turns both into the
matrix whose column j is arm j's probability, which is what the estimators read.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .errors import FormatError, OverlapWarning, ParameterError, PositivityError
from .io import check_schema, int_keys, make_state, str_keys

__all__ = ["PropensityModel", "Overlap", "make_propensity", "overlap_diagnostics", "arm_probabilities"]


def arm_probabilities(scores: np.ndarray) -> np.ndarray:
    """Each arm's probability as a matrix: column j is P̂(A = j | X) for arm code j.

    A vector of binary scores π̂ = P̂(A = 1 | X) becomes [1 − π̂, π̂]; a matrix
    of generalised propensities is returned as it is.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        return np.column_stack([1.0 - scores, scores])
    return scores


def trim_mask(scores: np.ndarray, trim: float) -> np.ndarray:
    """The units ``fit(trim=)`` keeps: every arm's probability at least ``trim`` (binary: π̂ in [trim, 1 − trim])."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        return (scores >= trim) & (scores <= 1.0 - trim)
    return np.all(scores >= trim, axis=1)


@dataclass(frozen=True)
class PropensityModel:
    """What estimates π: a learner (sklearn classifier) or known scores.

    ``key`` is the name the user gave (``"auto"``, ``"logistic"``, ...), the
    class name of a classifier, or ``"known scores"``.
    """

    name: str
    learner: object = None
    known: np.ndarray | None = None
    key: str = ""

    def fit_predict(self, X_train, A_train, X_test, rows_test, sample_weight=None, k: int = 2) -> np.ndarray:
        """Fit on (X_train, A_train) (weighted by ``sample_weight``, if given) and predict at X_test.

        Returns P(A = 1) (n_test,) for a binary treatment (``k`` = 2), the
        (n_test, k) generalised propensities for k arms.
        """
        return self.fit_predict_report(X_train, A_train, X_test, rows_test, sample_weight, k)[0]

    def fit_predict_report(self, X_train, A_train, X_test, rows_test, sample_weight=None, k: int = 2):
        """:meth:`fit_predict` and what the fit reports: the ``"auto"`` selection (a FoldSelection) or None.

        ``sample_weight``: the training units' sampling weights, passed to the
        learner's fit (``sample_weight=``; per step of a Pipeline); known
        scores ignore them.
        """
        if self.known is not None:
            return self.known[rows_test], None
        from sklearn.base import clone

        from .propensity_selection import AutoPropensity, _proba, _quiet_fit

        # A non-converged logistic fit on separable data is reported by the
        # positivity check and the clipping warning below, in our words.  The
        # named learners run on one thread (see propensity_selection._quiet_fit);
        # a user's classifier keeps its own threading.
        named = self.key in PROPENSITY_NAMES
        model = _quiet_fit(clone(self.learner), X_train, A_train, one_thread=named, sample_weight=sample_weight)
        selection = model.selection_ if isinstance(model, AutoPropensity) else None
        return _proba(model, X_test, k, one_thread=named), selection


#: The names ``propensity=`` takes.
PROPENSITY_NAMES = ("auto", "logistic", "logistic_cv", "boosting", "forest")
_PROPENSITY_CHOICES = "'auto', 'logistic', 'logistic_cv', 'boosting', 'forest', a scikit-learn classifier or an array of scores"


def make_propensity(spec, n: int, seed, *, weighted: bool = False, k: int = 2) -> PropensityModel:
    """Interpret ``propensity=``: a name of :data:`PROPENSITY_NAMES`, a classifier, or known scores.

    ``weighted``: the fit has sampling weights, which a classifier's ``fit``
    must accept as ``sample_weight`` (every named learner does).  ``k``: the
    number of arms; every named learner is multinomial for k ≥ 3, and known
    scores are then an (n, k) matrix of P(A = level j | X), columns in the
    order of the levels, rows summing to one.

    Raises
    ------
    ParameterError
        An unknown name, scores of the wrong shape or range, or (``weighted``)
        a classifier whose ``fit`` takes no ``sample_weight``.
    """
    from .propensity_selection import FOREST_ROWS, LEARNERS, accepts_weights, make_learner

    if isinstance(spec, str):
        if spec not in PROPENSITY_NAMES:
            raise ParameterError(f"`propensity` must be {_PROPENSITY_CHOICES}; got {spec!r}")
        # "logistic regression" and the forest's name are those of the results before "auto".
        name = {"auto": "auto (Super Learner: log-loss stack of logistic_cv, boosting, forest)",
                "logistic": "logistic regression"}.get(spec) or LEARNERS[spec]
        if spec == "forest" and n > 2 * FOREST_ROWS:
            name = f"random forest (100 trees, max_depth 4, each tree on a draw of about {FOREST_ROWS} rows)"
        return PropensityModel(name, make_learner(spec, seed, n=n), key=spec)
    if hasattr(spec, "fit") and hasattr(spec, "predict_proba"):
        if weighted and not accepts_weights(spec):
            raise ParameterError(
                f"the propensity classifier {type(spec).__name__} cannot be fitted with sampling weights: its fit "
                "takes no `sample_weight`; use one that does (e.g. propensity='forest' or 'logistic'), or pass "
                "known scores")
        return PropensityModel(type(spec).__name__, spec, key=type(spec).__name__)
    try:
        scores = np.asarray(spec, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"`propensity` must be {_PROPENSITY_CHOICES}; got {type(spec).__name__}") from None
    if k == 2 and scores.shape != (n,):
        raise ParameterError(f"`propensity` scores must have one value per row ({n}); got shape {scores.shape}")
    if k > 2 and scores.shape != (n, k):
        raise ParameterError(f"`propensity` scores of a treatment with {k} levels must be an (n, k) = ({n}, {k}) "
                             f"matrix of P(A = level | X), columns in the levels' order; got shape {scores.shape}")
    if not np.all((scores >= 0) & (scores <= 1)):
        raise ParameterError("`propensity` scores must lie in [0, 1]")
    if k > 2 and not np.allclose(scores.sum(axis=1), 1.0, rtol=0.0, atol=1e-6):
        raise ParameterError("`propensity` scores' rows must sum to one (each row: P(A = level | X) over the levels)")
    return PropensityModel("known scores", known=scores.copy(), key="known scores")


@dataclass(frozen=True)
class Overlap:
    """Overlap diagnostics of the cross-fitted propensity scores."""

    scores: np.ndarray          # cross-fitted, before clipping: π̂ (n,), or (n, k) generalised propensities
    clip: float
    n_clipped_low: int
    n_clipped_high: int
    ess: dict                   # arm -> effective sample size of the weights
    n_arm: dict                 # arm -> number of units
    trim: float = 0.0
    kept: np.ndarray | None = None  # units whose scores are all at least trim (None: no trimming)
    n_trimmed_low: int = 0
    n_trimmed_high: int = 0
    clip_rule: str = "given"    # where ``clip`` came from: "given", or the rule of clip="auto" with its inputs
    report: object = None       # ccme.propensity_selection.PropensityReport: the learner, its choice, calibration
    normalized: bool = False    # whether the weights were Hájek-normalised per fold and arm (fit(normalize_weights=))

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    #: Version 2 added ``clip_rule``, ``report`` and ``normalized``.
    STATE_SCHEMA = "ccme.Overlap"
    STATE_VERSION = 2
    _COUNTS = ("n_clipped_low", "n_clipped_high", "n_trimmed_low", "n_trimmed_high")

    def to_state(self) -> dict:
        """The diagnostics as a versioned state for :mod:`ccme.io` (the per-arm dicts keyed ``"1"``/``"0"``)."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, scores=self.scores, clip=self.clip,
                          trim=self.trim, kept=self.kept, ess=str_keys(self.ess), n_arm=str_keys(self.n_arm),
                          **{name: getattr(self, name) for name in self._COUNTS}, clip_rule=self.clip_rule,
                          report=None if self.report is None else self.report.to_state(),
                          normalized=bool(self.normalized))

    @classmethod
    def from_state(cls, state) -> "Overlap":
        """Inverse of :meth:`to_state`."""
        from .propensity_selection import PropensityReport

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=("scores", "clip", "trim", "kept", "ess", "n_arm", *cls._COUNTS, "clip_rule", "report",
                           "normalized"))
        if not isinstance(state["scores"], np.ndarray) or state["scores"].ndim not in (1, 2):
            raise FormatError("the stored propensity scores are not a vector or a matrix")
        kept = state["kept"]
        if kept is not None and not (isinstance(kept, np.ndarray) and kept.shape == state["scores"].shape[:1]):
            raise FormatError("the stored trimming mask does not match the propensity scores")
        if not isinstance(state["clip_rule"], str):
            raise FormatError("the stored clipping rule is not a text")
        report = None if state["report"] is None else PropensityReport.from_state(state["report"])
        return cls(state["scores"], state["clip"], state["n_clipped_low"], state["n_clipped_high"],
                   int_keys(state["ess"], what="the effective sample sizes"),
                   int_keys(state["n_arm"], what="the arm sizes"), state["trim"], kept,
                   state["n_trimmed_low"], state["n_trimmed_high"], state["clip_rule"], report,
                   bool(state["normalized"]))

    @property
    def n_clipped(self) -> int:
        return self.n_clipped_low + self.n_clipped_high

    @property
    def n_trimmed(self) -> int:
        return self.n_trimmed_low + self.n_trimmed_high


#: With clip="auto", the positivity check counts the scores outside [POSITIVITY_BOUND, 1 − POSITIVITY_BOUND].
POSITIVITY_BOUND = 0.01


def clip_scores(scores: np.ndarray, clip: float) -> np.ndarray:
    """π̂ clipped to [clip, 1 − clip]; generalised propensities each raised to at least ``clip``.

    Only an arm's own probability enters its weights, so a matrix's rows need
    not sum to one after clipping.  The binary rule also caps π̂ at 1 − clip,
    which raises 1 − π̂ to clip as the matrix rule does, and besides lowers
    the weight 1/π̂ of a treated unit with π̂ > 1 − clip to 1/(1 − clip): a
    change below the factor 1/(1 − clip) that the matrix rule leaves out.
    """
    if np.ndim(scores) == 2:
        return np.maximum(scores, clip)
    return np.clip(scores, clip, 1.0 - clip)


def weight_share_clip(p_arm: np.ndarray) -> float:
    """The smallest c with max_i 1/max(p_i, c) ≤ Σ_i 1/max(p_i, c) / √m over an arm's m units (0 if c = 0 does).

    With w_i = 1/max(p_i, c), the condition reads c·Σ_i w_i ≥ √m once c ≥
    min p; g(c) = c·Σ_i w_i = #{p_i ≤ c} + c·Σ_{p_i > c} 1/p_i is continuous,
    nondecreasing and linear between consecutive sorted p's, so the root is
    found exactly on the segment where g crosses √m.
    """
    # a score of exactly 0 is an infinite weight: it is clipped like a tiny one
    p = np.sort(np.maximum(np.asarray(p_arm, dtype=np.float64), 1e-15))
    m = len(p)
    if m == 0:
        return 0.0
    target = np.sqrt(m)
    # tail[k] = Σ_{j ≥ k} 1/p_(j) (0-based), g at c = p_(k): k + p_(k) · tail[k]
    tail = np.cumsum((1.0 / p)[::-1])[::-1]
    g_at = np.arange(m) + p * tail
    if g_at[0] >= target:
        return 0.0
    k = int(np.searchsorted(g_at, target, side="left"))  # g(p_(k-1)) < target ≤ g(p_(k))
    # on [p_(k-1), p_(k)): g(c) = k + c · tail[k]
    return float((target - k) / tail[k]) if k < m else float(p[-1])


def crump_alpha(scores: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The optimal trimming threshold α of Crump, Hotz, Imbens & Mitnik (2009, Biometrika), from the scores.

    With g = 1/(e(1 − e)): α = 0 when sup g ≤ 2 E[g]; otherwise γ solves
    γ = 2 E[g | g ≤ γ] and α = 1/2 − √(1/4 − 1/γ) (their Theorem 1, with the
    expectations over the empirical distribution of the scores).  The units
    with e ∉ [α, 1 − α] are those whose 1/(e(1 − e)), the weight the
    semiparametric variance bound of an average effect gives them, exceeds
    twice its average over the units kept.

    The empirical γ is the largest 2·mean(g_(1..k)) with g_(k) ≤ 2·mean(g_(1..k))
    (g sorted), which solves the equation up to the discreteness of the sample.

    For k ≥ 3 arms (an (n, k) matrix of generalised propensities) g = Σ_j 1/e_j,
    the generalisation of Yang, Imbens, Cui, Faries & Kadziola (2016,
    Biometrics) that reduces to 1/(e(1 − e)) for two arms; α is then the
    probability at which a unit whose other arms share the rest evenly reaches γ
    on the binary scale, 1/2 − √(1/4 − 1/γ) as above (a bound on each arm's score).

    With sampling ``weights`` the expectations are over the population the
    weights describe: weighted means, so that a unit of weight w counts as w
    units (integer weights give exactly the rule on the replicated sample).
    """
    e = np.clip(np.asarray(scores, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    g = 1.0 / (e * (1.0 - e)) if e.ndim == 1 else np.sum(1.0 / e, axis=1)
    order = np.argsort(g, kind="stable")
    g = g[order]
    w = np.ones(g.size) if weights is None else np.asarray(weights, dtype=np.float64)[order]
    if g.size == 0 or g[-1] <= 2.0 * np.average(g, weights=w):
        return 0.0
    means = np.cumsum(w * g) / np.cumsum(w)
    k = int(np.flatnonzero(g <= 2.0 * means)[-1])
    gamma = 2.0 * means[k]
    return float(0.5 - np.sqrt(max(0.25 - 1.0 / gamma, 0.0)))


#: clip="auto" never exceeds this: Crump et al.'s rule of thumb [0.1, 0.9], which their α approximates for a
#: wide range of propensity distributions.
AUTO_CLIP_MAX = 0.1
CLIP_RULE = "auto: Crump et al. (2009) alpha"


def resolve_clip(clip, scores: np.ndarray, A: np.ndarray, *, trim: float = 0.0, sampling_weights=None):
    """``fit(clip=)`` as a number and where it came from: (clip, rule).

    A number is kept (rule "given").  ``"auto"`` gives the optimal trimming
    threshold α of Crump, Hotz, Imbens & Mitnik (2009) (:func:`crump_alpha`),
    computed on the cross-fitted scores of the n units the second stage
    keeps, used as a clip: the scores are clipped to [c, 1 − c], every unit
    stays (the estimand is unchanged; trimming, which changes it, is
    ``fit(trim=)``), with c = min(max(α, 1/n), :data:`AUTO_CLIP_MAX`).  α is
    0 when sup 1/(e(1 − e)) ≤ 2·mean 1/(e(1 − e)), under good overlap; the
    floor 1/n then only keeps every weight below n (no unit stands for more
    units than the sample holds, and a score of exactly 0 or 1 never gives an
    infinite weight, which α = 0 would allow when most scores are extreme).
    With ``sampling_weights`` α is computed over the weighted population.
    """
    if not (isinstance(clip, str) and clip == "auto"):
        return float(clip), "given"
    kept = trim_mask(scores, trim) if trim > 0 else np.ones(len(scores), dtype=bool)
    floor = 1.0 / max(int(kept.sum()), 1)
    weights = None if sampling_weights is None else np.asarray(sampling_weights)[kept]
    return min(max(crump_alpha(scores[kept], weights), floor), AUTO_CLIP_MAX), CLIP_RULE


def dominant_unit(scores: np.ndarray, A: np.ndarray, kept: np.ndarray) -> bool:
    """Whether, unclipped, some unit holds more than 1/√m of its arm's total weight (m the arm's kept units).

    Then that unit alone could halve its arm's effective sample size
    (:func:`weight_share_clip` > 0): the sign of weak overlap that makes
    ``clip="auto"`` warn.
    """
    probabilities = arm_probabilities(scores)
    return any(weight_share_clip(probabilities[kept & (A == arm), arm]) > 0
               for arm in range(probabilities.shape[1]))


def overlap_diagnostics(scores: np.ndarray, A: np.ndarray, clip: float, *, warn: bool = True,
                        trim: float = 0.0, clip_rule: str = "given", report=None, normalized: bool = False,
                        sampling_weights: np.ndarray | None = None) -> Overlap:
    """Trimming and clipping counts and the effective sample size (Σw)²/Σw² of each arm's weights.

    With sampling weights s_i (``fit(weights=)``) a unit's weight in its arm
    is s_i/π̂_a(X_i), and the effective sample size is Kish's of those products.

    Trimming and clipping (see ``ccme.fit``): units whose score lies outside
    [trim, 1 − trim] (with k ≥ 3 arms: some arm's probability below trim) are
    dropped from the second stage; the scores of the units kept are then
    clipped to [clip, 1 − clip] (each arm's probability raised to at least clip).  The clipping counts, the
    warning and the effective sample sizes therefore concern the kept units
    only; with trim ≥ clip nothing is left to clip.  The positivity check looks
    at every unit: trimming cannot rescue a treatment the covariates predict.
    """
    matrix = np.ndim(scores) == 2
    if trim > 0:
        kept = trim_mask(scores, trim)
        if matrix:  # a unit is trimmed once, however many of its arms fall below trim
            trimmed_low, trimmed_high = int(np.sum(~kept)), 0
        else:
            trimmed_low, trimmed_high = int(np.sum(scores < trim)), int(np.sum(scores > 1.0 - trim))
    else:
        kept, trimmed_low, trimmed_high = np.ones(len(scores), dtype=bool), 0, 0
    # The positivity check counts the scores outside a fixed band: the given
    # clip, or 0.01 under clip="auto" (whose value reflects the weights of the
    # units' own arms, which stay moderate when the scores separate the arms).
    bound = clip if clip_rule == "given" else POSITIVITY_BOUND
    if matrix:  # k ≥ 3 arms: counts of units with some arm's probability below the bound ("low")
        low, high = int(np.sum(kept & np.any(scores < clip, axis=1))), 0
        all_low, all_high = int(np.sum(np.any(scores < bound, axis=1))), 0
    else:
        low = int(np.sum(kept & (scores < clip)))
        high = int(np.sum(kept & (scores > 1.0 - clip)))
        all_low, all_high = int(np.sum(scores < bound)), int(np.sum(scores > 1.0 - bound))
    probabilities = arm_probabilities(clip_scores(scores, clip))
    ess, n_arm = {}, {}
    for arm in ((1, 0) if not matrix else range(scores.shape[1])):
        in_arm = (A == arm) & kept
        w = 1.0 / probabilities[in_arm, arm]
        if sampling_weights is not None:
            w = sampling_weights[in_arm] * w
        ess[arm] = float(w.sum() ** 2 / np.sum(w**2)) if w.size else 0.0
        n_arm[arm] = int(in_arm.sum())
    # Positivity fails outright when the cross-fitted scores separate the
    # arms - the covariates predict the treatment out of sample: either
    # perfectly (AUC ≥ 0.999, whatever the learner's scores look like: a
    # forest's stay inside the clipping bounds), or almost perfectly
    # (AUC ≥ 0.99) with most units at the clipping bounds.  With k ≥ 3 arms,
    # each arm's probability against the others' (one versus the rest).
    raw = arm_probabilities(scores)
    for arm in ((1,) if not matrix else range(scores.shape[1])):
        members, others = raw[A == arm, arm], raw[A != arm, arm]
        if not (members.size and others.size):
            continue
        auc = _auc(members, others)
        outside = all_low + all_high
        if auc >= 0.999 or (outside > 0.5 * len(scores) and auc >= 0.99):
            which = "" if not matrix else f" (arm {arm} against the others)"
            raise PositivityError(
                "the treatment is perfectly predicted by the propensity covariates "
                f"(the cross-fitted scores separate the arms{which}, AUC = {auc:.3f}, and {outside} of {len(scores)} "
                f"lie outside [{bound:g}, {1 - bound:g}]): "
                "positivity fails, and no counterfactual distribution is identified"
            )
    # With a given clip, any clipping warns.  clip="auto" clips as a matter of
    # course (reported in the summary) and warns only when the unclipped
    # weights had a dominant unit (dominant_unit).
    if warn and (low or high) and (clip_rule == "given" or dominant_unit(scores, A, kept)):
        why = "" if clip_rule == "given" else (
            " by clip='auto' (Crump et al.'s rule); unclipped, a single unit would carry more than 1/sqrt(m) "
            "of its arm's weight")
        fmt = "g" if clip_rule == "given" else ".3g"
        what = (f"{low} of {int(kept.sum())} units had an arm's propensity below {clip:{fmt}}, raised to it"
                if matrix else f"{low + high} of {int(kept.sum())} propensity scores were clipped to "
                f"[{clip:{fmt}}, {1 - clip:{fmt}}] ({low} below, {high} above)")
        warnings.warn(
            f"{what}{why}: overlap is weak, and the weights of those units are capped",
            OverlapWarning,
            stacklevel=3,
        )
    return Overlap(scores, clip, low, high, ess, n_arm, float(trim), kept if trim > 0 else None, trimmed_low,
                   trimmed_high, clip_rule, report, normalized)


def _auc(treated_scores: np.ndarray, control_scores: np.ndarray) -> float:
    """Area under the ROC curve of the scores (Mann-Whitney statistic, ties counted half)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([treated_scores, control_scores]))
    n1, n0 = len(treated_scores), len(control_scores)
    return float((ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))
