"""``ccme.fit``: formula → design → per-fold, per-arm estimators → result."""

from __future__ import annotations

import time

import numpy as np

from .crossfit import Fold, make_folds
from .embedding import ArmEmbedding
from .errors import DataError, ParameterError
from .estimators import ESTIMATORS, get_estimator
from .estimators.base import resolve_options
from .estimators.neural_tuning import tune_neural
from .estimators.training import NeuralEstimator
from .estimators.ridge import MODES, RIDGE_DEFAULTS
from .formula import build_design, parse_formula
from .memory import check_allocation
from .propensity import clip_scores, make_propensity, overlap_diagnostics
from .result import CCMEResult
from .tuning import TuningReport, note_edges, resolve_tune, tune_outcome_bandwidth, tune_ridge

__all__ = ["fit", "METHODS", "MODES", "RIDGE_DEFAULTS"]

METHODS = tuple(ESTIMATORS)
_MIN_ARM_UNITS = 5


def fit(
    formula: str,
    data,
    *,
    method: str = "ridge",
    mode: str = "dr",
    folds: int = 2,
    propensity="logistic",
    seed=None,
    clip: float = 0.01,
    trim: float = 0.0,
    treated=None,
    na_action: str = "raise",
    propensity_covariates=None,
    outcome_covariates=None,
    n_threads: int = 0,
    tune="auto",
    **hyperparameters,
) -> CCMEResult:
    """Estimate the conditional counterfactual distributions p(Y¹ | V) and p(Y⁰ | V).

    Parameters
    ----------
    formula : str
        ``"y ~ a | v1 + v2 | x3 + x4"``: outcome ~ treatment | conditioning
        variables V | further confounders (X = V ∪ the last part; ``.`` there
        means every other column).  ``y1 + y2 ~ ...`` for a multivariate outcome.
    data : DataFrame
        The data; never modified.
    method : {"ridge", "deep_feature", "neural_kernel"}
        The CCME estimator (paper, Section "Three Practical Estimators").  The
        neural ones need PyTorch (``pip install "ccme[neural]"``).
    mode : {"dr", "ipw", "pi", "onestep"}
        The pseudo-outcome: doubly robust (eq. pseudo_outcome), inverse
        propensity weighting, plug-in, or the one-step regression of φ(Y) on V
        among the arm's units (paper, Section "Experiments").
    folds : int, default 2
        Cross-fitting folds K ≥ 2; the estimate averages the K fold estimates.
    propensity : "logistic", "forest", classifier or array, default "logistic"
        How π(x) = P(A = 1 | X = x) is estimated (on each fold's nuisance part):
        unpenalised logistic regression, a random forest (100 trees, depth 4,
        as the paper), any scikit-learn classifier with ``predict_proba``, or
        known scores (one per row).
    seed : int or None
        Seeds the fold assignment and any randomised learner.  ``None`` draws
        one, which is kept on the result (``res.seed``).
    clip : float, default 0.01
        Propensity scores are clipped to [clip, 1 − clip], with a warning that
        counts the clipped units.
    trim : float, default 0.0
        Trimming, the standard alternative to clipping under weak overlap:
        units whose cross-fitted score lies outside [trim, 1 − trim] are
        dropped from the second stage (the regression on V), so the estimate
        targets p(Y^a | V) in the population with overlap, and no weight
        exceeds 1/trim.  The nuisance models still use every unit.  Clipping
        then applies to the kept units (nothing is left to clip when
        trim ≥ clip).  The counts are in ``res.overlap`` (``n_trimmed_low``,
        ``n_trimmed_high``, ``kept``) and in the summary.  0 turns it off.
    treated : optional
        The level of the treatment column that counts as A = 1 (needed for a
        two-level column that is not 0/1 or boolean).
    na_action : {"raise", "drop"}
        Missing or infinite values in the used columns raise an error, or the
        rows are dropped with a warning.
    propensity_covariates, outcome_covariates : list of str or str, optional
        Subsets of X's raw columns used by the propensity model and by the
        first-stage outcome model (default: all of X).  Lets a user misspecify
        either nuisance on purpose, as the paper's experiments do.
    n_threads : int, default 0
        Threads of the compiled core (0: OpenMP's default).
    tune : "auto", "none" or dict, default "auto"
        Automatic hyperparameter selection (see :mod:`ccme.tuning`).  "auto"
        (ridge): λ₀ and λ₁ by leave-one-out cross-validation of the
        RKHS-valued ridge regressions over ``ccme.tuning.LAMBDA_GRID``, and the
        outcome bandwidth (d_y = 1) by weighted least-squares cross-validation
        over factors ``ccme.tuning.Y_BANDWIDTH_FACTORS`` of Silverman's rule.
        A dict gives grids: ``{"lam0": [...], "lam1": [...], "x_bandwidth":
        [factors], "v_bandwidth": [factors], "y_bandwidth": [factors]}``
        (bandwidth entries multiply the rule's bandwidth).  Hyperparameters
        set explicitly are never tuned.  The choices, criterion curves and
        time are kept in ``res.tuning``; ``res.plot_tuning()`` draws them.
        Neural methods select by validation loss on the first fold (see
        :mod:`ccme.estimators.neural_tuning`): "auto" keeps early stopping
        (the epochs) and, for Deep Feature, chooses λ₀ and λ₁ over
        ``ccme.tuning.NEURAL_LAMBDA_GRID``; a dict may give ``"lam"``/
        ``"lam0"``/``"lam1"`` (Deep Feature) and ``"M"`` (both) grids.
    **hyperparameters
        Ridge: ``lam`` (both stages) or ``lam0``/``lam1`` (penalty λ in K + nλI,
        a number or a dict {1: .., 0: ..} per arm), ``kernel`` (X and V) or
        ``x_kernel``/``v_kernel`` ("gaussian", "laplace", "matern32",
        "matern52"), ``y_kernel`` ("gaussian", "laplace"), and
        ``x_bandwidth``/``v_bandwidth``/``y_bandwidth`` (a number, one number
        per column, or a rule: "median", "silverman").  Defaults:
        ``ccme.RIDGE_DEFAULTS``.

        Deep Feature and Neural-Kernel (defaults
        ``ccme.estimators.DEEP_FEATURE_DEFAULTS`` / ``NEURAL_KERNEL_DEFAULTS``;
        the paper's configuration: ``ccme.estimators.paper_options(method, n)``):
        ``M`` (features / grid points), ``hidden`` (layer widths),
        ``optimizer`` ("adam", "sgd"), ``lr`` and ``epochs`` (one value or a
        pair (stage 1, stage 2)), ``momentum``, ``batch_size`` (None: full
        batch), ``validation`` (held-out fraction for early stopping) and
        ``patience``, ``standardize`` (network inputs), ``device`` ("auto",
        "cpu", "cuda"), ``dtype`` ("float64", "float32"), ``progress``
        (tqdm bar), ``y_kernel``/``y_bandwidth``; Deep Feature also
        ``lam``/``lam0``/``lam1`` (ΨᵀΨ + nλI) and ``lam_scaling`` ("n" or
        "none"); Neural-Kernel ``grid`` ("auto", "regular", "kmeans",
        "random" or an array of points).  With them ``n_threads`` sets
        torch's threads during training (0: one).

    Returns
    -------
    CCMEResult
    """
    started = time.perf_counter()
    call = _describe_call(formula, method, mode, folds, propensity, seed, hyperparameters)
    estimator = get_estimator(method)
    if mode not in MODES:
        raise ParameterError(f"`mode` must be one of {list(MODES)}; got {mode!r}")
    if not isinstance(clip, (int, float)) or not 0.0 <= clip < 0.5:
        raise ParameterError(f"`clip` must be a number in [0, 0.5); got {clip!r}")
    if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0.0 <= trim < 0.5:
        raise ParameterError(f"`trim` must be a number in [0, 0.5); got {trim!r}")
    options = resolve_options(estimator, hyperparameters)
    user_keys = {t for key in hyperparameters for t in estimator.aliases.get(key, (key,))}
    grids = resolve_tune(tune, method, user_keys)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    rng = np.random.default_rng(seed)

    parsed = parse_formula(formula, getattr(data, "columns", []))
    design = build_design(parsed, data, treated=treated, na_action=na_action)
    n = design.n
    fold_list = make_folds(n, folds, rng)
    for arm in (1, 0):
        count = int(np.sum(design.A == arm))
        if count < _MIN_ARM_UNITS:
            label = "treated" if arm == 1 else "control"
            raise DataError(
                f"the {label} arm has {count} unit(s); at least {_MIN_ARM_UNITS} are needed to estimate its distribution"
            )
    _check_fold_arms(design.A, fold_list, mode)

    prop_cols = (
        design.columns_of(propensity_covariates) if propensity_covariates is not None else np.arange(design.X.shape[1])
    )
    out_cols = design.columns_of(outcome_covariates) if outcome_covariates is not None else np.arange(design.X.shape[1])
    Xp = design.X[:, prop_cols]
    Xo = np.ascontiguousarray(design.X[:, out_cols])

    prepared = estimator.prepare(options, design=design, Xo=Xo, seed=int(rng.integers(2**31 - 1)))
    memory_bytes = getattr(estimator, "memory_bytes", None)
    if memory_bytes is not None:  # refuse now, before the propensity and tuning work (ccme.memory)
        check_allocation(memory_bytes(prepared, mode=mode, A=design.A, folds=fold_list),
                         f"the {method} estimator's Cholesky factors (n = {n}, {len(fold_list)} folds)")

    prop_model = make_propensity(propensity, n, rng.integers(2**31 - 1))
    scores = np.empty(n)
    fitted_folds = []
    prop_started = time.perf_counter()
    for fold in fold_list:
        scores[fold.target] = prop_model.fit_predict(
            Xp[fold.nuisance], design.A[fold.nuisance], Xp[fold.target], fold.target
        )
    prop_seconds = time.perf_counter() - prop_started
    overlap = overlap_diagnostics(scores, design.A, clip, warn=mode in ("dr", "ipw"), trim=trim)
    clipped = clip_scores(scores, clip)
    if overlap.kept is not None:
        fold_list = _trim_folds(fold_list, overlap.kept, design.A, mode, trim)

    report = TuningReport()
    fold_seeds = rng.integers(2**31 - 1, size=len(fold_list))
    tuned_arms = None
    if isinstance(estimator, NeuralEstimator):
        if not (isinstance(tune, str) and tune == "none"):
            # Validation-loss selection on the first fold, whose arms it trains (kept below).
            prepared, report, tuned_arms = tune_neural(
                estimator, mode=mode, design=design, Xo=Xo, fold=fold_list[0],
                scores_target=clipped[fold_list[0].target], prepared=prepared, grids=grids,
                seed=int(fold_seeds[0]), auto=isinstance(tune, str), n_threads=n_threads,
            )
    elif any(k in grids for k in ("lam0", "lam1", "x_bandwidth", "v_bandwidth")):
        prepared, report = tune_ridge(
            mode=mode, design=design, Xo=Xo, folds=fold_list, scores=clipped, prepared=prepared, grids=grids,
            n_threads=n_threads,
        )
    estimator_started = time.perf_counter()
    for fold, fold_seed in zip(fold_list, fold_seeds):
        fitted_folds.append(
            estimator.fit_fold(
                prepared, mode=mode, design=design, Xo=Xo, fold=fold, scores_target=clipped[fold.target],
                seed=int(fold_seed), n_threads=n_threads,
            )
        )
    if tuned_arms:
        fitted_folds[0].prebuilt.update(tuned_arms)
    estimator_seconds = time.perf_counter() - estimator_started
    # Each arm's fold estimators are built on first use (see RidgeFold).
    y_kernel = prepared["kernels"]["y"]
    embeddings = {
        arm: ArmEmbedding(lambda arm=arm: [f.arm(arm) for f in fitted_folds], y_kernel, n_threads) for arm in (1, 0)
    }
    if "y_bandwidth" in grids:
        if design.Y.shape[1] == 1:
            y_started = time.perf_counter()
            chosen, curves = tune_outcome_bandwidth(
                embeddings=embeddings, design=design, folds=fold_list, scores=clipped, base=y_kernel,
                factors=grids["y_bandwidth"], seed=int(rng.integers(2**31 - 1)), n_threads=n_threads,
                weighted=mode != "onestep",
            )
            for arm, kernel in chosen.items():
                embeddings[arm].y_kernel = kernel
            report.curves.extend(curves)
            report.chosen["y_bandwidth"] = {arm: float(k.bandwidth_array[0]) for arm, k in chosen.items()}
            note_edges(report)
            report.seconds += time.perf_counter() - y_started
        else:
            report.notes.append("the outcome bandwidth is tuned for a one-dimensional outcome only; the rule was kept")
    timing = {
        "propensity": prop_seconds,
        "tuning": report.seconds,
        "estimator": estimator_seconds,
        "total": time.perf_counter() - started,
    }
    return CCMEResult(
        call=call,
        design=design,
        method=method,
        mode=mode,
        folds=fold_list,
        seed=seed,
        estimator=estimator,
        options=options,
        prepared=prepared,
        propensity=prop_model.name,
        propensity_columns=tuple(design.x_names[i] for i in prop_cols),
        outcome_columns=tuple(design.x_names[i] for i in out_cols),
        overlap=overlap,
        embeddings=embeddings,
        timing=timing,
        clip=clip,
        tuning=report,
    )


def _check_fold_arms(A, fold_list, mode) -> None:
    """Each fold needs units of both arms in its nuisance part (and, for one-step, its target part)."""
    for fold in fold_list:
        for arm in (1, 0):
            label = "treated" if arm == 1 else "control"
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


def _describe_call(formula, method, mode, folds, propensity, seed, hyperparameters) -> str:
    parts = [repr(formula), "data", f"method={method!r}", f"mode={mode!r}", f"folds={folds!r}"]
    if isinstance(propensity, str):
        parts.append(f"propensity={propensity!r}")
    else:
        parts.append(f"propensity=<{type(propensity).__name__}>")
    if seed is not None:
        parts.append(f"seed={seed!r}")
    for key, value in hyperparameters.items():
        parts.append(f"{key}={value!r}")
    return "ccme.fit(" + ", ".join(parts) + ")"


def _trim_folds(fold_list, kept, A, mode, trim) -> list:
    """The folds with the trimmed units removed from their second stage (``fit(trim=)``)."""
    out = [Fold(f.index, f.nuisance, f.target[kept[f.target]]) for f in fold_list]
    for fold in out:
        for arm in (1, 0):
            count = int(np.sum(A[fold.target] == arm))
            if count < 2:
                label = "treated" if arm == 1 else "control"
                raise DataError(
                    f"trim={trim:g} leaves {count} {label} unit(s) in the second stage of fold {fold.index + 1} "
                    f"(scores outside [{trim:g}, {1 - trim:g}] are dropped); use a smaller trim or fewer folds"
                )
    _check_fold_arms(A, out, mode)
    return out
