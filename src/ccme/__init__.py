"""ccme: conditional counterfactual distributions through kernel mean embeddings.

From observational data (covariates X, a binary treatment A, an outcome Y),
ccme estimates the whole distribution of the potential outcomes Y¹ and Y⁰
given a chosen subset V of the covariates, p(Y^a | V = v), doubly robustly
(Conditional Counterfactual Mean Embeddings; see the package README).

>>> import ccme
>>> data = ccme.datasets.paper_simulation(2000, seed=1)
>>> res = ccme.fit("y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10", data, seed=1)
>>> print(res.summary())  # doctest: +SKIP
"""

from . import datasets, errors
from ._api import METHODS, MODES, RIDGE_DEFAULTS, fit
from .errors import (
    CcmeError,
    CcmeWarning,
    DataError,
    DataWarning,
    FormatError,
    FormulaError,
    MemoryBudgetError,
    NotFittedError,
    NumericalError,
    OverlapWarning,
    ParameterError,
    PositivityError,
)
from .bootstrap import Bands, EffectTest
from .embedding import Embedding
from .result import CCMEResult, load

__version__ = "0.1.0"

__all__ = ["fit", "load", "CCMEResult", "Embedding", "Bands", "EffectTest", "datasets", "METHODS", "MODES", "RIDGE_DEFAULTS", *errors.__all__]
