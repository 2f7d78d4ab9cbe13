"""Input relevance for the neural estimators: their networks see each covariate in units of its learned bandwidth.

A network's first layer weighs its inputs as they come.  With the inputs only
standardised, an irrelevant covariate starts as loud as a relevant one, and
with n in the thousands gradient descent does not learn to silence 44 of 50
covariates before early stopping ends the training (the zoo's
``irrelevant_x50``: Deep Feature at 1.9 times the ridge's error on the control
arm).  The kernel ridge estimator learns which covariates matter by its
leave-one-out search over per-group bandwidths (ARD, :func:`ccme.tuning.tune_ridge`,
Section "Kernels that learn the covariates" of the README): a relevant
covariate gets a narrow bandwidth, an irrelevant one an infinite bandwidth.

Under ``tune="auto"`` (with :data:`ccme.tuning.NEURAL_INPUT_RELEVANCE`), or
``tune={"x_bandwidth": "ard", "v_bandwidth": "ard"}``, a neural fit runs that
search first, on the same cross-fitting data and folds, and feeds each
network its inputs as (z_d − mean_d) / σ_d, σ_d the bandwidth the search
chose for column d (:class:`ccme.estimators.training.Standardizer`): the
coordinates in which the ridge's Gaussian kernel is isotropic.  A dropped
column (σ_d = inf) enters as 0; the indicator columns of a categorical
variable share their group's σ, as in the kernel.  The stage-1 networks (on
X) use the X bandwidths, the stage-2 networks (on V) the V bandwidths.  The
search is the ridge's own (its penalties λ₀, λ₁ by leave-one-out along the
way, on the subsamples of :data:`ccme.tuning.ARD_UNITS`); its relevance table
and per-group curves go to ``res.tuning`` and the summary, and the penalties
it used are not the networks' (they are not reported).

The two input kernels are kept in the parameters as ``input_kernels``
({"x": Kernel, "v": Kernel}), saved and loaded with the fit; the networks'
input maps carry the same scales, so a loaded fit needs no search.
"""

from __future__ import annotations

import time

from ..errors import ParameterError
from ..tuning import LAMBDA_GRID, TuningReport, tune_ridge
from .base import Parameters

__all__ = ["INPUT_ROLES", "learn_input_relevance", "relevance_grids"]

#: The tuning keys that ask a neural fit for input relevance, and the input each scales.
INPUT_ROLES = {"x_bandwidth": "x", "v_bandwidth": "v"}


def relevance_grids(grids: dict) -> tuple[dict, dict]:
    """Split ``grids`` (:func:`ccme.tuning.resolve_tune`) into (the relevance keys, the rest).

    Raises
    ------
    ParameterError
        A relevance key given a grid of numbers: the networks' input scales
        are learned only by the per-group search ("ard").
    """
    asked = {k: v for k, v in grids.items() if k in INPUT_ROLES}
    for key, value in asked.items():
        if value != "ard":
            raise ParameterError(f"`tune[{key!r}]` of a neural estimator must be 'ard': its networks' input scales "
                                 f"are the bandwidths of the kernel ridge's per-group search; got {value!r}")
    return asked, {k: v for k, v in grids.items() if k not in INPUT_ROLES}


def learn_input_relevance(params: Parameters, *, data, folds, asked: dict,
                          seed: int) -> tuple[Parameters, TuningReport]:
    """Run the kernel ridge's per-group bandwidth search and keep its X and V kernels as the networks' input scales.

    Parameters
    ----------
    params : Parameters
        The neural estimator's prepared parameters.
    data : ccme.estimators.base.CrossFitData
        The cross-fitting data (its outcome is a location stage's residual where there is one).
    folds : list
        The cross-fitting folds.
    asked : dict
        The relevance keys of the tuning grids (:func:`relevance_grids`): "x_bandwidth" and/or "v_bandwidth".
    seed : int
        The tuning's seed (the search's subsamples).

    Returns
    -------
    (Parameters, TuningReport)
        ``params`` with ``input_kernels`` {"x": Kernel, "v": Kernel} (a role not asked for, or not searched in
        this mode, is absent: its inputs are standardised), and the search's report: the relevance rows, the
        per-group curves, the chosen bandwidths and a note.
    """
    from .ridge import RIDGE_DEFAULTS, RidgeEstimator

    started = time.perf_counter()
    ridge = RidgeEstimator()
    # The ridge's defaults but a kernel first stage, whatever the ridge's default first stage is: the search is
    # over kernel bandwidths, and a forest would only cost time here.
    ridge_params = ridge.prepare({**RIDGE_DEFAULTS, "first_stage": "kernel"}, design=data.design, Xo=data.Xo,
                                 seed=seed)
    grids = {"lam0": LAMBDA_GRID, "lam1": LAMBDA_GRID, **asked}
    tuned, found = tune_ridge(data=data, folds=folds, params=ridge_params, grids=grids, seed=seed)
    kernels = {}
    for key, role in INPUT_ROLES.items():
        if key in asked and key in found.chosen:    # stage 1's X search runs only in the modes with a first stage
            kernels[role] = tuned.kernels[role]
    report = TuningReport(
        chosen={key: found.chosen[key] for key in INPUT_ROLES if key in found.chosen},
        curves=[c for c in found.curves if c.parameter in INPUT_ROLES],
        relevance=[r for r in found.relevance if r["role"].lower() in kernels],
        seconds=time.perf_counter() - started,
    )
    if kernels:
        report.notes.append(
            f"input relevance: the networks' {' and '.join(r.upper() for r in kernels)} inputs scaled by the "
            f"kernel ridge's leave-one-out bandwidths per covariate group ({report.seconds:.1f} s; "
            "ccme.estimators.input_relevance)")
    return params.replace(input_kernels=kernels), report
