"""The estimators of the conditional counterfactual mean embedding.

Each estimator fits, per cross-fitting fold, an object whose ``arm(a)``
builds, for that fold and arm, an object that
represents μ̂(v) = Σ_k c_k(v) φ(y_k) and can

- ``contract(V_eval, points, feature, y_kernel, out, scale)``: add
  ``scale × Σ_k c_k(v) F(y_k, point)`` for a feature F (density kernel, CDF,
  moments) to ``out``;
- ``weights(V_eval)``: return the atoms y_k and the weights c_k(v).

:mod:`ccme.embedding` builds every functional from these two.
"""

from ..errors import ParameterError
from .deep_feature import DEEP_FEATURE_DEFAULTS, DeepFeatureEstimator
from .neural_kernel import NEURAL_KERNEL_DEFAULTS, NeuralKernelEstimator
from .ridge import RidgeEstimator, RidgeFold, RidgeFoldArm
from .training import paper_options

__all__ = [
    "ESTIMATORS", "get_estimator", "RidgeEstimator", "RidgeFold", "RidgeFoldArm",
    "DeepFeatureEstimator", "NeuralKernelEstimator", "paper_options", "DEEP_FEATURE_DEFAULTS",
    "NEURAL_KERNEL_DEFAULTS",
]

#: method name -> estimator (see :mod:`ccme.estimators.base` for what one provides).
#: The neural estimators import torch only when used (``pip install "ccme[neural]"``).
ESTIMATORS = {
    "ridge": RidgeEstimator(),
    "deep_feature": DeepFeatureEstimator(),
    "neural_kernel": NeuralKernelEstimator(),
}


def get_estimator(method: str):
    if method not in ESTIMATORS:
        raise ParameterError(f"`method` must be one of {list(ESTIMATORS)}; got {method!r}")
    return ESTIMATORS[method]
