"""The estimators of the conditional counterfactual mean embedding.

Each estimator fits, for one cross-fitting fold and one arm, an object that
represents μ̂(v) = Σ_k c_k(v) φ(y_k) and can

- ``contract(V_eval, points, feature, y_kernel, out, scale)``: add
  ``scale × Σ_k c_k(v) F(y_k, point)`` for a feature F (density kernel, CDF,
  moments) to ``out``;
- ``weights(V_eval)``: return the atoms y_k and the weights c_k(v).

:mod:`ccme.embedding` builds every functional from these two.
"""

from .ridge import RidgeFoldArm, fit_ridge_fold

__all__ = ["RidgeFoldArm", "fit_ridge_fold"]
