"""The estimators of the conditional counterfactual mean embedding: implementations of one protocol.

:mod:`ccme.estimators.base` declares the protocol (``Estimator``: prepare →
tune → fit_fold; each fold's ``FoldArm`` gives atoms and weights,
μ̂(v) = Σ_k c_k(v) φ(y_k); ``LinearSecondStage`` for the bootstrap).  This
package holds its implementations — ridge, Deep Feature, Neural-Kernel —
and the registry ``ESTIMATORS`` that ``ccme.fit(method=...)`` reads.
:class:`ccme.Embedding` builds every functional from the fold-arms.
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
