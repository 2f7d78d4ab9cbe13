"""The pseudo-outcomes of the four modes: one table, used by every estimator, the tuning and the bootstrap.

The second stage of every CCME estimator regresses, on V, pseudo-outcomes
of the form

    ξ̂_i = a_i φ(Y_i) + b_i μ̂₀(X_i),

μ̂₀ the first-stage (nuisance) embedding of the arm's outcome given X and
ω_i = 1{A_i = a} / π̂_a(X_i) (paper, eq. pseudo_outcome and eq. emp_density
with D_ω → diag(a), D_{1−ω} → diag(b)):

=========  ==========  ==========  =======================================
mode       a_i          b_i          pseudo-outcome
=========  ==========  ==========  =======================================
dr         ω_i          1 − ω_i      ω(φ(Y) − μ̂₀(X)) + μ̂₀(X)
ipw        ω_i          0            ω φ(Y)
pi         0            1            μ̂₀(X)
onestep    1            0            φ(Y), regressed on V among the arm's units
=========  ==========  ==========  =======================================

The doubly robust, IPW and plug-in regressions run over every unit of the
fold's second-stage part; the one-step regression only over the arm's units
there (it is the naive regression of the observed outcome, with no
confounding adjustment beyond V).

In the doubly robust mode the two parts of ξ̂ can be smoothed in V with
their own penalties (:func:`split_doubly_robust`): the correction
ω(φ(Y) − μ̂₀(X)), whose noise is that of the weighted outcomes, and the
plug-in part μ̂₀(X), a smooth, low-noise function of X
(:class:`ccme.estimators.base.SplitSecondStage`).

With ``fit(normalize_weights=True)`` the weights ω are Hájek-normalised:
divided, per fold and arm, by their mean over the fold's second-stage units
(:func:`hajek_scores`, ``pseudo_outcome(normalize=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ParameterError
from .propensity import arm_probabilities

__all__ = ["MODES", "MODE_NAMES", "PseudoOutcome", "pseudo_outcome", "split_doubly_robust", "hajek_scores",
           "uses_first_stage", "uses_propensity", "check_mode"]

MODES = ("dr", "ipw", "pi", "onestep")
MODE_NAMES = {
    "dr": "doubly robust",
    "ipw": "inverse propensity weighting",
    "pi": "plug-in",
    "onestep": "one-step",
}


def check_mode(mode) -> str:
    """``mode`` if it is one of :data:`MODES`, else a ParameterError naming the choices."""
    if mode not in MODES:
        raise ParameterError(f"`mode` must be one of {list(MODES)}; got {mode!r}")
    return mode


def uses_first_stage(mode: str) -> bool:
    """Whether the mode's pseudo-outcome involves μ̂₀ (b ≠ 0): dr and pi."""
    return mode in ("dr", "pi")


def uses_propensity(mode: str) -> bool:
    """Whether the mode weights by 1/π̂ (a = ω): dr and ipw."""
    return mode in ("dr", "ipw")


@dataclass(frozen=True)
class PseudoOutcome:
    """The pseudo-outcomes of one arm on one fold's second-stage part.

    Attributes
    ----------
    rows : ndarray of int
        The data rows of the second-stage regression, in order.
    a, b : ndarray (len(rows),)
        Coefficients of φ(Y_i) and of μ̂₀(X_i) (the table in the module docstring).
    """

    rows: np.ndarray
    a: np.ndarray
    b: np.ndarray

    @property
    def has_first_stage(self) -> bool:
        """Whether any unit's pseudo-outcome involves μ̂₀."""
        return bool(np.any(self.b != 0))

    def features(self, own: np.ndarray, first_stage=None) -> np.ndarray:
        """Per-unit features of ξ̂: a_i F(Y_i) + b_i F(μ̂₀(X_i)), shape (len(rows), q).

        ``own`` holds the feature of each unit's own outcome, ``first_stage``
        (needed when :attr:`has_first_stage`) that of its first-stage
        prediction μ̂₀(X_i), both with one row per unit of :attr:`rows`.
        """
        out = self.a[:, None] * own
        if self.has_first_stage:
            if first_stage is None:
                raise ValueError("the pseudo-outcome involves the first stage: pass its features")
            out = out + self.b[:, None] * first_stage
        return out


def split_doubly_robust(pseudo: PseudoOutcome) -> tuple[PseudoOutcome, PseudoOutcome]:
    """The doubly robust pseudo-outcome as its correction and its plug-in part, which sum to it.

    ξ̂_i = ω_i (φ(Y_i) − μ̂₀(X_i)) + μ̂₀(X_i): the correction has coefficients
    (a, b) = (ω, −ω), the plug-in part (0, 1), so that the coefficients add
    up to the doubly robust (ω, 1 − ω) of :func:`pseudo_outcome`.

    Parameters
    ----------
    pseudo : PseudoOutcome
        A doubly robust pseudo-outcome (b = 1 − a).

    Returns
    -------
    (PseudoOutcome, PseudoOutcome)
        The correction and the plug-in part, over the same rows.

    Raises
    ------
    ValueError
        If ``pseudo`` is not of the doubly robust form.

    Examples
    --------
    >>> import numpy as np
    >>> dr = PseudoOutcome(rows=np.arange(3), a=np.array([2.0, 0.0, 4.0]), b=np.array([-1.0, 1.0, -3.0]))
    >>> correction, plugin = split_doubly_robust(dr)
    >>> correction.b.tolist(), plugin.a.tolist(), plugin.b.tolist()
    ([-2.0, -0.0, -4.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    """
    if not np.allclose(pseudo.a + pseudo.b, 1.0, rtol=0.0, atol=1e-12):
        raise ValueError("only a doubly robust pseudo-outcome (b = 1 - a) splits into correction and plug-in part")
    n = len(pseudo.rows)
    return (PseudoOutcome(rows=pseudo.rows, a=pseudo.a, b=-pseudo.a),
            PseudoOutcome(rows=pseudo.rows, a=np.zeros(n), b=np.ones(n)))


def hajek_scores(scores: np.ndarray, A: np.ndarray, folds, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Scores whose weights are Hájek-normalised per fold and arm (``fit(normalize_weights=True)``).

    The weight of unit i in its own arm a = A_i is ω_i = 1/π̂_a(X_i); in the
    other arm it is 0.  Dividing each arm's weights by their mean over the
    fold's second-stage units, c_{k,a} = mean_{j ∈ D1_k} 1{A_j = a}/π̂_a(X_j),
    makes them average to one there, as the true weights do in expectation
    (E[1{A = a}/π_a(X)] = 1).  Since a unit only ever carries the weight of
    its own arm and belongs to one fold's second stage, the normalised weights
    are those of the per-unit scores returned: π̂(X_i)·c_{k,1} for a treated
    unit, 1 − (1 − π̂(X_i))·c_{k,0} for a control (units in no second stage,
    the trimmed ones, keep their score).  Every estimator, the tuning and the
    bootstrap read the weights from these scores, so all of them see the
    normalised weights; :func:`pseudo_outcome` with ``normalize=True`` gives the
    same coefficients from the raw scores.  The returned values are arm
    probabilities of each unit's own arm, not necessarily in [0, 1].

    With k ≥ 3 arms the same holds for each arm j's generalised propensity
    π̂_j: the units of arm j get π̂_j(X_i)·c_{k,j} in column j.

    Parameters
    ----------
    scores : ndarray (n,) or (n, k)
        Clipped cross-fitted π̂(X_i), or the generalised propensities (one column per arm code).
    A : ndarray (n,)
        Arm codes.
    folds : sequence of ccme.crossfit.Fold
    sample_weight : ndarray (n,) or None
        Sampling weights s: the mean is then the weighted one,
        c_{k,a} = Σ_{j ∈ D1_k} s_j 1{A_j = a}/π̂_a(X_j) / Σ_{j ∈ D1_k} s_j, the
        weighted second stage's average of the weights.

    Returns
    -------
    ndarray (n, k)
        Each arm's (normalised) probability, column j for arm code j
        (:func:`ccme.propensity.arm_probabilities`).
    """
    probabilities = arm_probabilities(scores)
    out = probabilities.copy()
    for fold in folds:
        target = fold.target
        for arm in range(probabilities.shape[1]):
            rows = target[A[target] == arm]
            if rows.size == 0:
                continue
            p_arm = probabilities[rows, arm]
            if sample_weight is None:
                c = np.sum(1.0 / p_arm) / len(target)
            else:
                c = np.sum(sample_weight[rows] / p_arm) / np.sum(sample_weight[target])
            out[rows, arm] = p_arm * c
    return out


def pseudo_outcome(mode: str, arm: int, *, A: np.ndarray, target: np.ndarray, scores_target: np.ndarray,
                   normalize: bool = False) -> PseudoOutcome:
    """The pseudo-outcome coefficients of ``arm`` on the second-stage rows ``target``.

    Parameters
    ----------
    mode : {"dr", "ipw", "pi", "onestep"}
    arm : int
        The arm's code (1/0 for a binary treatment, 0..k − 1 for k levels).
    A : ndarray (n,)
        Arm code of every unit.
    target : ndarray of int
        The fold's second-stage rows (D1).
    scores_target : ndarray (len(target),) or (len(target), k)
        Clipped π̂(X) = P̂(A = 1 | X) on those rows, fitted on the other folds,
        or each arm's probability (:func:`ccme.propensity.arm_probabilities`).
    normalize : bool, default False
        Hájek normalisation: ω_i ← ω_i / mean_{j ∈ target} ω_j, so that the
        weights average to one over the fold's second-stage units (see
        :func:`hajek_scores`, which :func:`ccme.fit` uses to the same effect).

    Returns
    -------
    PseudoOutcome
    """
    in_arm = A[target] == arm
    if mode == "onestep":
        rows = target[in_arm]
        return PseudoOutcome(rows=rows, a=np.ones(len(rows)), b=np.zeros(len(rows)))
    check_mode(mode)
    n = len(target)
    p_arm = arm_probabilities(scores_target)[:, arm]
    # 1/π̂_a on the arm's units, 0 elsewhere (whatever the other units' π̂_a)
    omega = np.divide(1.0, p_arm, out=np.zeros(n), where=in_arm)
    if normalize and omega.sum() > 0:
        omega = omega / omega.mean()
    if mode == "dr":
        a, b = omega, 1.0 - omega
    elif mode == "ipw":
        a, b = omega, np.zeros(n)
    else:  # "pi"
        a, b = np.zeros(n), np.ones(n)
    return PseudoOutcome(rows=target, a=np.ascontiguousarray(a, dtype=np.float64),
                         b=np.ascontiguousarray(b, dtype=np.float64))
