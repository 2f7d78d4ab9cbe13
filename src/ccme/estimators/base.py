"""What every CCME estimator provides to :func:`ccme.fit`.

An estimator is a small object with

- ``name`` (the ``method=`` string), ``title`` (for summaries), ``defaults``
  (documented hyperparameter defaults) and ``aliases`` (one name setting
  several hyperparameters, e.g. ``lam`` → ``lam0`` and ``lam1``);
- ``prepare(options, design=, Xo=, seed=)``: resolve rules (bandwidths, …)
  on the data and validate values; returns a dict that must hold
  ``kernels["y"]``, the normalised outcome kernel;
- ``fit_fold(prepared, mode=, design=, Xo=, fold=, scores_target=, seed=, n_threads=)``:
  a fitted fold whose ``arm(a)`` returns the fold-and-arm estimator with
  ``contract`` and ``weights`` (see :mod:`ccme.estimators`);
- ``describe(prepared, result)``: summary sections, ``[(title, [(label, text), ...]), ...]``.
"""

from __future__ import annotations

from ..errors import ParameterError

__all__ = ["resolve_options"]


def resolve_options(estimator, hyperparameters: dict) -> dict:
    """The estimator's defaults updated by the user's hyperparameters (aliases expanded)."""
    options = dict(estimator.defaults)
    allowed = set(estimator.defaults) | set(estimator.aliases)
    unknown = sorted(set(hyperparameters) - allowed)
    if unknown:
        raise ParameterError(
            f"unknown hyperparameter(s) {unknown} for method {estimator.name!r}; allowed: {sorted(allowed)}"
        )
    for alias, targets in estimator.aliases.items():
        if alias in hyperparameters:
            clash = [t for t in targets if t in hyperparameters]
            if clash:
                raise ParameterError(f"give either `{alias}` or {clash}, not both")
            for t in targets:
                options[t] = hyperparameters[alias]
    for key in estimator.defaults:
        if key in hyperparameters:
            options[key] = hyperparameters[key]
    return options
