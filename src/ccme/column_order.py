"""A column order fixed by the columns' values, for the learners whose random draws go by column position.

scikit-learn's forests draw the candidate covariates of each split by column
*position* (``max_features``): the same data with X's columns in another
order, or with a constant column more, give another forest from the same
seed.  The formula's term order, a factor's level order (its indicator
columns, one per level) and a level with no units (an all-zero indicator)
then moved a fit: the default forest propensity changed the paper
simulation's density by 3–6% of its peak when a 4-level factor's levels were
reordered or an unused level was added (a seed's noise there: 12.5%).

:func:`canonical_order` keeps the columns that vary and orders them by a
hash of their values (BLAKE2b of the float64 bytes), which no relabelling or
reordering of the covariates changes; equal columns get equal keys, and
their order does not matter.  It changes nothing in distribution (it is one
more fixed permutation of the columns, as a seed is one more draw), so the
forests' accuracy is what it was; what it removes is the dependence of a
fit on how the covariates were written down.  The forest propensity
(:class:`CanonicalColumns`, the first step of its pipeline) and the forest
first stage (:func:`ccme.estimators.forest_first_stage.grow_forest_first_stage`)
use it.  The leave-one-out search of the per-covariate bandwidths
(:func:`ccme.tuning._ard_search`), a coordinate search whose end point depends
on the order it visits the covariates in, breaks its ties by :func:`group_order`.
"""

from __future__ import annotations

import hashlib

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

__all__ = ["ORDER", "CanonicalColumns", "canonical_order", "group_order"]

#: "canonical": the order of this module; "given": the columns as the formula and the factors' levels put them (the
#: behaviour before it, kept to measure it against: ``benchmarks/tuning_rule.py --setting
#: ccme.column_order.ORDER=given,canonical``; README, "The order the covariates are written in").
ORDER = "canonical"


def _keys(X) -> list[bytes]:
    """The BLAKE2b digest of each column's float64 values."""
    return [hashlib.blake2b(np.ascontiguousarray(X[:, j], dtype=np.float64).tobytes(), digest_size=16).digest()
            for j in range(X.shape[1])]


def canonical_order(X) -> np.ndarray:
    """The positions of ``X``'s non-constant columns, in the order of a hash of their values.

    Parameters
    ----------
    X : array-like (n, p)
        Numeric covariates (finite).

    Returns
    -------
    ndarray of int
        Column positions; every column that takes two values or more, each
        once, in increasing order of the BLAKE2b digest of its float64 values.
        With no such column, the first column (a learner needs one).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0, 5.0], [2.0, 0.0, 3.0]])
    >>> sorted(canonical_order(X)) == [0, 2]
    True
    >>> np.array_equal(X[:, canonical_order(X)], X[:, [2, 0]][:, canonical_order(X[:, [2, 0]])])
    True
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-d array; got {X.ndim} dimension(s)")
    if ORDER == "given":
        return np.arange(X.shape[1])
    varying = np.flatnonzero((X != X[:1]).any(axis=0))
    if not len(varying):
        return np.arange(min(1, X.shape[1]))
    keys = _keys(X[:, varying])
    return varying[sorted(range(len(varying)), key=keys.__getitem__)]


def group_order(X, groups) -> list[int]:
    """The positions of ``groups`` (each a sequence of column positions of ``X``) in the order of their values.

    A group's key is the digest of its columns' sorted digests, so that the
    order of a factor's indicator columns (its level order) does not change it.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.arange(12.0).reshape(4, 3) ** 2
    >>> group_order(X, [[0], [1, 2]]) == group_order(X[:, [2, 1, 0]], [[2], [1, 0]])
    True
    """
    if ORDER == "given":
        return list(range(len(groups)))
    X = np.asarray(X, dtype=np.float64)
    keys = _keys(X)
    group_keys = [hashlib.blake2b(b"".join(sorted(keys[j] for j in g)), digest_size=16).digest() for g in groups]
    return sorted(range(len(groups)), key=group_keys.__getitem__)


class CanonicalColumns(TransformerMixin, BaseEstimator):
    """Select and order the columns by :func:`canonical_order` of the training rows (a pipeline step).

    Attributes
    ----------
    order_ : ndarray of int
        The training columns kept, in their canonical order.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0, 5.0], [2.0, 0.0, 3.0], [0.0, 0.0, 4.0]])
    >>> CanonicalColumns().fit_transform(X).shape
    (3, 2)
    """

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        self.order_ = canonical_order(X)
        self.n_features_in_ = X.shape[1]
        return self

    def transform(self, X):
        X = np.asarray(X, dtype=np.float64)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} columns; the step was fitted on {self.n_features_in_}")
        return X[:, self.order_]
