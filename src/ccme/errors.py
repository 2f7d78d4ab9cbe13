"""Exceptions and warnings raised by ccme.

Every error that ccme raises on purpose derives from :class:`CcmeError`, so a
caller can catch them all at once; each also derives from the built-in
exception it refines (``ValueError`` for bad input), so code written against
the built-ins keeps working.  Messages name the parameter and the value.
"""

from __future__ import annotations

__all__ = [
    "CcmeError",
    "FormulaError",
    "DataError",
    "ParameterError",
    "PositivityError",
    "NumericalError",
    "NotFittedError",
    "FormatError",
    "MemoryBudgetError",
    "CcmeWarning",
    "OverlapWarning",
    "DataWarning",
]


class CcmeError(Exception):
    """Base class of every error raised by ccme."""


class FormulaError(CcmeError, ValueError):
    """A formula cannot be parsed, or names a column the data lack."""


class DataError(CcmeError, ValueError):
    """The data cannot be used as given (missing values, wrong treatment, too few units)."""


class ParameterError(CcmeError, ValueError):
    """A parameter has an invalid value (a non-positive bandwidth, an unknown mode, ...)."""


class PositivityError(DataError):
    """The treatment is (almost) perfectly predicted by the covariates: positivity fails."""


class NumericalError(CcmeError, ArithmeticError):
    """A numerical step failed even after the documented safeguards (e.g. Cholesky jitter)."""


class NotFittedError(CcmeError, AttributeError):
    """A quantity was requested that the fitted object does not hold."""


class FormatError(CcmeError, ValueError):
    """A saved result cannot be read: not a ccme file, damaged, tampered with, or from a newer format."""


class MemoryBudgetError(CcmeError, MemoryError):
    """A step needs more memory than is available (see :mod:`ccme.memory`)."""


class CcmeWarning(UserWarning):
    """Base class of every warning issued by ccme."""


class OverlapWarning(CcmeWarning):
    """Propensity scores were clipped: overlap between the arms is weak."""


class DataWarning(CcmeWarning):
    """The data were changed on the way in (rows dropped, constant columns ignored, ...)."""
