"""Cross-fitting: fold assignment, the cross-fitted propensity scores, and fitting every fold.

This module owns the sample splitting of :func:`ccme.fit`'s pipeline.
With ``folds=K`` the rows are shuffled once (by ``seed``) and cut into K
near-equal parts.  Part k serves once as the second-stage set D1, with the
nuisances (propensity, first-stage CME) fitted on the other K − 1 parts
(D0); the estimate is the average of the K fold estimates.  ``folds=2`` is
the paper's 50/50 split with the roles swapped and averaged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError, ParameterError, PositivityError

__all__ = ["Fold", "make_folds", "check_fold_arms", "check_arm_support", "trim_folds", "cross_fit_scores", "cross_fit"]


@dataclass(frozen=True)
class Fold:
    """Row indices of one cross-fitting fold: ``nuisance`` (D0) and ``target`` (D1)."""

    index: int
    nuisance: np.ndarray
    target: np.ndarray

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Fold"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        """The fold as a versioned state for :mod:`ccme.io`."""
        from .io import make_state

        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, index=self.index, nuisance=self.nuisance,
                          target=self.target)

    @classmethod
    def from_state(cls, state) -> "Fold":
        """Inverse of :meth:`to_state`."""
        from .errors import FormatError
        from .io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("index", "nuisance", "target"))
        rows = (state["nuisance"], state["target"])
        if not all(isinstance(r, np.ndarray) and r.ndim == 1 and r.dtype.kind in "iu" for r in rows):
            raise FormatError(f"the stored fold {state['index']!r} has no integer row indices")
        return cls(state["index"], *rows)


def make_folds(n: int, folds: int, rng: np.random.Generator) -> list[Fold]:
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)):
        raise ParameterError(f"`folds` must be an integer >= 2; got {folds!r}")
    folds = int(folds)
    if folds < 2:
        raise ParameterError(f"`folds` must be at least 2 (the nuisances need their own data); got {folds}")
    if folds > n:
        raise DataError(f"`folds`={folds} is more than the number of units ({n})")
    order = rng.permutation(n)
    parts = [np.sort(p) for p in np.array_split(order, folds)]
    result = []
    for k, target in enumerate(parts):
        nuisance = np.sort(np.concatenate([p for j, p in enumerate(parts) if j != k]))
        result.append(Fold(k, nuisance, target))
    return result


#: How messages name the arms of a binary treatment (a Treatment's ``arm_name`` for any treatment).
BINARY_ARMS = {1: "treated", 0: "control"}


def check_fold_arms(A, fold_list, mode, names=BINARY_ARMS) -> None:
    """Each fold needs units of every arm in its nuisance part (and, for one-step, its target part).

    ``names`` maps each arm code to how messages name it (all arms: its keys).
    """
    for fold in fold_list:
        for arm, label in names.items():
            in_nuisance = int(np.sum(A[fold.nuisance] == arm))
            in_target = int(np.sum(A[fold.target] == arm))
            if mode != "onestep" and in_nuisance < 2:
                raise DataError(
                    f"fold {fold.index + 1} leaves {in_nuisance} {label} unit(s) to fit the nuisance models; "
                    "use fewer folds or more data"
                )
            if mode == "onestep" and in_target < 2:
                raise DataError(
                    f"fold {fold.index + 1} has {in_target} {label} unit(s) for the one-step regression; "
                    "use fewer folds or more data"
                )


def check_arm_support(X: np.ndarray, names, A: np.ndarray, arm_names=BINARY_ARMS) -> None:
    """Each covariate must vary within an arm wherever it varies at all.

    A column that is constant among one arm's units while it takes other
    values in the other arm leaves the units with those other values without
    any comparable unit in the first arm: positivity fails for them, and the
    arm's outcome model (stage 1) would extrapolate from a single value.

    Raises
    ------
    PositivityError
        Naming the column, the arm and its constant value.
    """
    for j, name in enumerate(names):
        column = X[:, j]
        if np.ptp(column) == 0:
            continue  # constant everywhere: the kernels ignore it (a DataWarning says so)
        for arm, label in arm_names.items():
            values = column[A == arm]
            if np.ptp(values) == 0:
                raise PositivityError(
                    f"covariate {name!r} is constant (= {values[0]:.6g}) among the {label} units but takes other "
                    f"values among the others: units with other values have no comparable {label} unit (positivity "
                    f"fails); drop the covariate, or restrict the data to {name} = {values[0]:.6g}"
                )


def trim_folds(fold_list, kept, A, mode, trim, names=BINARY_ARMS) -> list[Fold]:
    """The folds with the trimmed units removed from their second stage (``fit(trim=)``)."""
    out = [Fold(f.index, f.nuisance, f.target[kept[f.target]]) for f in fold_list]
    for fold in out:
        for arm, label in names.items():
            count = int(np.sum(A[fold.target] == arm))
            if count < 2:
                raise DataError(
                    f"trim={trim:g} leaves {count} {label} unit(s) in the second stage of fold {fold.index + 1} "
                    f"(units with a score outside [{trim:g}, {1 - trim:g}] are dropped); use a smaller trim or fewer "
                    "folds"
                )
    check_fold_arms(A, out, mode, names)
    return out


def cross_fit_scores(model, Xp: np.ndarray, A: np.ndarray, fold_list, *, selections: list | None = None,
                     sample_weight: np.ndarray | None = None) -> np.ndarray:
    """π̂(X_i) for every unit from the propensity model fitted on the folds that leave it out.

    Parameters
    ----------
    model : ccme.propensity.PropensityModel
    Xp : ndarray (n, d)
        The propensity model's covariates.
    A : ndarray (n,)
    fold_list : list of Fold
    selections : list, optional
        Receives, per fold, what the model's fit reports (``propensity="auto"``:
        its :class:`ccme.propensity_selection.FoldSelection`, made on the
        fold's nuisance part only; otherwise None).
    sample_weight : ndarray (n,) or None
        Sampling weights: each fold's model is fitted with its nuisance units' weights.

    Returns
    -------
    ndarray (n,) or (n, k)
        Unclipped scores: π̂(X_i) = P̂(A = 1 | X_i) for a binary treatment, the
        generalised propensities P̂(A = j | X_i) (column j for arm code j) for k ≥ 3 arms.
    """
    k = int(A.max()) + 1 if len(A) else 2
    scores = np.empty(len(A)) if k <= 2 else np.empty((len(A), k))
    for fold in fold_list:
        weights = None if sample_weight is None else sample_weight[fold.nuisance]
        scores[fold.target], selection = model.fit_predict_report(Xp[fold.nuisance], A[fold.nuisance],
                                                                  Xp[fold.target], fold.target, weights, k)
        if selections is not None:
            selections.append(selection)
    return scores


def cross_fit(estimator, params, data, fold_list, seeds, prebuilt) -> dict:
    """Fit every fold and return each arm's :class:`ccme.Embedding` ({arm code: …}, in ``design.arms``' order).

    The folds are fitted now (for ridge the shared second-stage factor); each
    arm's fold-arms are built on the arm's first use.  ``prebuilt`` maps
    (fold index, arm) to fold-arms the tuning already fitted.
    """
    from .embedding import Embedding

    fitted = [
        estimator.fit_fold(params, data=data, fold=fold, seed=int(seed),
                           prebuilt={arm: est for (k, arm), est in prebuilt.items() if k == fold.index})
        for fold, seed in zip(fold_list, seeds)
    ]
    design = data.design
    y_kernel = params.kernels["y"]
    outcome_range = (design.Y.min(axis=0), design.Y.max(axis=0))
    return {
        arm: Embedding(lambda arm=arm: [f.arm(arm) for f in fitted], y_kernel, outcome_range=outcome_range,
                       encode=design.encode_v, arm=arm, n_threads=data.n_threads)
        for arm in design.arms
    }
