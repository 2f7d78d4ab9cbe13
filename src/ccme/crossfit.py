"""Cross-fitting: fold assignment.

With ``folds=K`` the rows are shuffled once (by ``seed``) and cut into K
near-equal parts.  Part k serves once as the second-stage set D1, with the
nuisances (propensity, first-stage CME) fitted on the other K − 1 parts
(D0); the estimate is the average of the K fold estimates.  ``folds=2`` is
the paper's 50/50 split with the roles swapped and averaged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DataError, ParameterError

__all__ = ["Fold", "make_folds"]


@dataclass(frozen=True)
class Fold:
    """Row indices of one cross-fitting fold: ``nuisance`` (D0) and ``target`` (D1)."""

    index: int
    nuisance: np.ndarray
    target: np.ndarray


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
