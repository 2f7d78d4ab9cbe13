"""``ccme.fit``: the pipeline validate → design → folds → propensity → (location) → tune → cross-fit → result.

This module owns the order of the stages and nothing else: the formula and
design (:mod:`ccme.formula`), the folds and the cross-fitting
(:mod:`ccme.crossfit`), the propensity model (:mod:`ccme.propensity`), the
optional location stage (:mod:`ccme.location`), the estimator's stages (:mod:`ccme.estimators.base`), the tuning
(:mod:`ccme.tuning`) and the result (:mod:`ccme.result`) live in their modules.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from .crossfit import check_arm_support, check_fold_arms, cross_fit, cross_fit_scores, make_folds, trim_folds
from .errors import DataError, ParameterError
from .estimators import ESTIMATORS, get_estimator
from .estimators.base import CrossFitData, Tuned
from .estimators.ridge import RIDGE_DEFAULTS
from .distributed import cluster_estimator, local_frame
from .fit_choice import choose_fit, with_readout
from .formula import build_design, parse_formula
from .location import (check_location, choose_location, default_location, fit_location, readout_criterion,
                       fold_residuals)
from .memory import check_allocation
from .propensity import clip_scores, make_propensity, overlap_diagnostics, resolve_clip
from .propensity_selection import calibration_report
from .pseudo import MODES, check_mode, hajek_scores, uses_propensity
from .result import CCMEResult
from .sampling_weights import resolve_weights, weighted_options
from .tuning import TuningReport, distribution_readout, resolve_tune, tune_readout

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
    n_rep: int | None = None,
    propensity="forest",
    seed=None,
    clip="auto",
    trim: float = 0.0,
    normalize_weights: bool = False,
    weights=None,
    treated=None,
    reference=None,
    na_action: str = "raise",
    propensity_covariates=None,
    outcome_covariates=None,
    n_threads: int = 0,
    tune="auto",
    client=None,
    partitions=None,
    location="default",
    **hyperparameters,
) -> CCMEResult:
    """Estimate the conditional counterfactual distributions p(Y^a | V) of every arm a.

    A binary treatment has the arms 1 (treated) and 0 (control); a treatment
    column with k ≥ 3 levels (strings, a categorical, integers) has one arm per
    level, each estimated with its generalised propensity π_a(x) = P(A = a | X = x)
    (Imbens, 2000) in the arm's pseudo-outcome, and the functionals take
    ``arm=<level>``, the effects and tests ``arms=(level, other level)``.

    Parameters
    ----------
    formula : str
        ``"y ~ a | v1 + v2 | x3 + x4"``: outcome ~ treatment | conditioning
        variables V | further confounders (X = V ∪ the last part; ``.`` there
        means every other column).  ``y1 + y2 ~ ...`` for a multivariate outcome.
    data : DataFrame
        The data (pandas, or dask: ``ccme.distributed.local_frame`` computes
        the columns the formula reads); never modified.
    method : {"ridge", "deep_feature", "neural_kernel"}, default "ridge"
        The CCME estimator (paper, Section "Three Practical Estimators").  The
        neural ones need PyTorch (``pip install "ccme[neural]"``).
    mode : {"dr", "ipw", "pi", "onestep"}, default "dr"
        The pseudo-outcome: doubly robust (eq. pseudo_outcome), inverse
        propensity weighting, plug-in, or the one-step regression of φ(Y) on V
        among the arm's units (paper, Section "Experiments").
    folds : int, default 2
        Cross-fitting folds K ≥ 2; the estimate averages the K fold estimates.
    n_rep : int or None, default None
        Repeated cross-fitting (DoubleML's ``n_rep``): the whole cross-fit
        (folds, propensity, both stages) is repeated on R = ``n_rep``
        independent splits and the estimate averages their K·R fold
        estimates, which removes most of the estimate's dependence on the
        split.  The hyperparameters are tuned once, on the first split, and
        shared; the diagnostics (``res.folds``, ``res.overlap``, the
        propensity report) are the first split's.  The bootstrap sees every
        repetition (each unit keeps one multiplier).  Costs about R times the
        cross-fitting (not the tuning).  Repetition r ≥ 1 is seeded by
        (seed, r), so ``n_rep=1`` is the fit without repetitions, bit for bit.
        None: the method's default, 1 for ridge and 3 for the neural
        estimators, whose networks' initialisation adds variance that the
        average over repetitions removes in part
        (:data:`ccme.estimators.training.NEURAL_N_REP`).
    propensity : str, classifier or array, default "forest"
        How π(x) = P(A = 1 | X = x) is estimated (on each fold's nuisance part);
        for k ≥ 3 arms every named learner is the multinomial one (the forest's and
        the boosting's own multiclass fits, multinomial logistic regression), giving
        each arm's π_a(x), and known scores are an (n, k) matrix, columns in the
        levels' order.
        "forest" (default): a random forest (100 trees, depth 4, as the paper).
        It was chosen on the accuracy zoo's "choose" cases
        (``benchmarks/accuracy/results/choose.txt``: 7 cases, both arms, 3
        seeds, each case's own n): against "auto" it lowered the doubly robust
        error in all 14 case-arms (geometric mean of the ratio 0.90), because
        the doubly robust estimate wants stable weights more than the most
        predictive scores, and the depth-4 forest's scores, shrunk towards ½,
        give them; "auto" has the better log-loss and Brier scores (up to 18 %
        better in ``benchmarks/nuisance_defaults.py``).
        "auto": on each fold, a Super Learner: the convex combination of the
        probabilities of "logistic_cv", "boosting" and "forest" that minimises
        their cross-validated log-loss, the cross-validation run on that
        fold's nuisance part only (3 stratified folds on at most 2000 of its
        units), the candidates of non-zero weight then refitted on the whole
        nuisance part (:mod:`ccme.propensity_selection`, which says why a
        stack rather than the single best candidate).  "logistic_cv": L2-penalised
        logistic regression on standardised covariates, the penalty chosen by
        3-fold CV log-loss; "boosting": gradient-boosted trees stopped early on
        the log-loss of a validation split; "logistic": unpenalised logistic
        regression (R's glm); or any scikit-learn classifier
        with ``predict_proba``, or known scores (one per row).  The calibration
        of the cross-fitted scores (Brier score, log-loss, reliability curve)
        and, for "auto", its weights and each candidate's CV log-loss are in
        ``res.propensity_report``, the summary and ``res.plot_calibration()``.
        Every method (ridge, deep_feature, neural_kernel) uses this stage.
    seed : int or None, default None
        Seeds the fold assignment and any randomised learner.  ``None`` draws
        one, which is kept on the result (``res.seed``).
    clip : "auto" or float, default "auto"
        Propensity scores are clipped to [clip, 1 − clip] (every unit stays;
        ``trim`` drops units instead).  "auto": the optimal trimming threshold
        α of Crump, Hotz, Imbens & Mitnik (2009), computed on the cross-fitted
        scores (``ccme.propensity.crump_alpha``), used as a clip, at most 0.1
        (their rule of thumb) and at least 1/n (no weight above n): α = 0
        when max 1/(π̂(1 − π̂)) ≤ 2·mean, so nothing is clipped under good
        overlap; otherwise the scores whose
        1/(π̂(1 − π̂)) — their weight in the variance bound of an average
        effect — exceeds twice the mean of the units kept are clipped.  The
        principle: clipping trades variance for bias, and in the doubly robust
        pseudo-outcome ω(φ(Y) − μ̂₀(X)) + μ̂₀(X) the bias of a capped ω is
        multiplied by the first-stage error, while the variance grows with
        the weights.  Measured (``benchmarks/nuisance_defaults.py``: the
        paper's simulation at n = 2000 and 4000 and three weak-overlap
        simulations, 3 seeds each) it lowers the DR error against a fixed
        0.01 (geometric mean of the error ratio to one-step 0.39 against
        0.42 with propensity="auto", 0.42 against 0.65 with the unpenalised
        logistic model) and leaves the IPW error as it was (0.47).  With the
        forest it clips only where its scores reach the rule's threshold.
        With "auto" the warning is issued only when, unclipped, a single
        unit would carry more than 1/√m of its arm's total weight (m the
        arm's units).  A number clips there, with a warning that counts the
        clipped units.  The value and its origin are ``res.clip`` and
        ``res.overlap.clip_rule``, and in the summary's "Clipped" row.
    trim : float, default 0.0
        Trimming, the standard alternative to clipping under weak overlap:
        units whose cross-fitted score lies outside [trim, 1 − trim] are
        dropped from the second stage (the regression on V), so the estimate
        targets p(Y^a | V) in the population with overlap, and no weight
        exceeds 1/trim.  The nuisance models still use every unit.  Clipping
        then applies to the kept units (nothing is left to clip when
        trim ≥ clip).  The counts are in ``res.overlap`` (``n_trimmed_low``,
        ``n_trimmed_high``, ``kept``) and in the summary.  0 turns it off.
    normalize_weights : bool, default False
        Hájek normalisation of the weights ω = 1{A = a}/π̂_a(X) of the DR and
        IPW pseudo-outcomes: within each fold and arm, divided by their mean
        over the fold's second-stage units, so that they average to one there
        (``ccme.pseudo.hajek_scores``).  Not the default: measured with the
        default learner and clip (``benchmarks/nuisance_defaults.py``) it
        changed the errors by a few per cent either way, slightly worse
        overall (geometric mean of the DR / one-step ratio 0.40 against
        0.39); in an earlier run it helped only where the weights were not
        otherwise controlled (the single best learner, almost unclipped: 0.50
        against 0.54; the logistic model with clip 0.01: 0.66 against 0.72).
        With sampling weights the means are weighted.
    weights : str, array or None, default None
        Sampling (survey) weights: a column name of ``data`` or one value per
        row of ``data`` (rows dropped by ``na_action="drop"`` drop their
        weight).  The estimand becomes the weighted population's p(Y^a | V):
        the propensity is fitted with ``sample_weight=`` (a classifier whose
        fit does not take it raises a ParameterError; known scores are used
        as given), and both ridge regressions are weighted,
        min Σ_i w_i ‖ξ_i − f(V_i)‖² + λ Σ_i w_i ‖f‖², on the low-rank path
        (:mod:`ccme.estimators.lowrank`; ``approx="auto"`` takes it at any n,
        ``approx="exact"`` raises a ParameterError), as are the bands, tests
        and effect intervals built on it.  Only ``method="ridge"`` with the
        kernel first stage takes them.  Weights that are all equal give
        exactly, bit for bit, the fit without weights.  Validated and
        normalised to mean 1 by :func:`ccme.sampling_weights.resolve_weights`;
        kept as ``res.sampling_weights`` and saved with the result.
    treated : optional, default None
        The level of the treatment column that counts as A = 1 (needed for a
        two-level column that is not 0/1 or boolean, unless ``reference`` names
        the control).
    reference : optional, default None
        The level the other arms are compared with (R's treatment contrasts):
        by default the first level (a categorical's first category, else the
        smallest value); for a binary treatment, the control (the other level
        is then the treated one).
    na_action : {"raise", "drop"}, default "raise"
        Missing or infinite values in the used columns raise an error, or the
        rows are dropped with a warning.
    propensity_covariates, outcome_covariates : list of str or str, default None
        Subsets of X's raw columns used by the propensity model and by the
        first-stage outcome model (default: all of X).  Lets a user misspecify
        either nuisance on purpose, as the paper's experiments do.
    n_threads : int, default 0
        Threads of the compiled core (0: OpenMP's default); its results do
        not depend on them.  The neural estimators also train with torch's
        pool of that size (0: one thread), whose multi-threaded reductions
        round differently from one thread's: their fits agree across thread
        counts to rounding, not bit for bit (keep 0 for bit-reproducible
        neural fits).
    tune : "auto", "none" or dict, default "auto"
        Automatic hyperparameter selection (see :mod:`ccme.tuning`).  "auto"
        (ridge): λ₀ and λ₁ by leave-one-out cross-validation of the
        RKHS-valued ridge regressions over ``ccme.tuning.LAMBDA_GRID``, the X
        and V bandwidths per covariate group (a categorical variable's
        indicator columns together, with Li and Racine's kernel; "dropped"
        = infinite) by the same criterion, a coordinate search on at most
        ``ccme.tuning.ARD_UNITS`` units per regression, and the
        outcome bandwidth (d_y = 1) by weighted least-squares cross-validation
        over factors ``ccme.tuning.Y_BANDWIDTH_FACTORS`` of Silverman's rule.
        With ``mode="dr"`` it also chooses λ₁ᵖ (``lam1_plugin``), the penalty
        of the pseudo-outcome's plug-in part μ̂₀(X), by leave-one-out on
        μ̂₀(X_i): the correction and the plug-in part are then smoothed in V
        with their own penalties (:class:`ccme.estimators.base.SplitSecondStage`).
        A dict gives grids: ``{"lam0": [...], "lam1": [...], "lam1_plugin": [...], "x_bandwidth":
        [factors] or "ard", "v_bandwidth": [factors] or "ard", "y_bandwidth":
        [factors]}`` (bandwidth entries multiply the rule's bandwidth; "ard":
        the per-group search).  Hyperparameters
        set explicitly are never tuned.  The choices, criterion curves and
        time are kept in ``res.tuning``; ``res.plot_tuning()`` draws them.
        Neural methods first learn their inputs' relevance: "auto" runs the
        ridge's per-group X and V bandwidth search and feeds every network its
        inputs in units of those bandwidths, a dropped covariate as 0
        (:mod:`ccme.estimators.input_relevance`,
        ``ccme.tuning.NEURAL_INPUT_RELEVANCE``; ``"x_bandwidth": "ard"``,
        ``"v_bandwidth": "ard"`` in a dict).  They then select by validation
        loss on the first fold (see :mod:`ccme.estimators.neural_tuning`):
        "auto" keeps early stopping (the epochs) and, for Deep Feature,
        chooses λ₀ and λ₁ over
        ``ccme.tuning.NEURAL_LAMBDA_GRID`` and, with ``mode="dr"``, λ₁ᵖ by
        leave-one-out in the learned features (its second stage split as
        the ridge's); it also chooses the outcome
        read-out bandwidth as for the ridge (d_y = 1,
        ``ccme.tuning.NEURAL_READOUT_SEARCH``); a dict may give ``"lam"``/
        ``"lam0"``/``"lam1"``/``"lam1_plugin"`` (Deep Feature), ``"M"`` and ``"y_bandwidth"``
        (both) grids, and ``"x_bandwidth"``/``"v_bandwidth"`` as ``"ard"`` (both).
    **hyperparameters
        Ridge: ``lam`` (both stages) or ``lam0``/``lam1`` (penalty λ in K + nλI,
        a number or a dict {1: .., 0: ..} per arm), ``lam1_plugin`` (doubly
        robust mode: the plug-in part's own second-stage penalty; default: tuned
        with ``tune="auto"`` unless ``lam1`` is given, else λ₁), ``kernel`` (X and V) or
        ``x_kernel``/``v_kernel`` ("gaussian", "laplace", "matern32",
        "matern52"), ``y_kernel`` ("gaussian", "laplace"), and
        ``x_bandwidth``/``v_bandwidth``/``y_bandwidth`` (a number, one number
        per column, or a rule: "median", "silverman"), ``first_stage``
        ("kernel": kernel ridge on X; "forest": random-forest weights, for
        many confounders; "auto": per arm the one with the smaller validated
        error, chosen by the tuning; or a dict per arm) and ``forest`` (a dict
        overriding ``ccme.estimators.forest_first_stage.FOREST_DEFAULTS``),
        ``approx`` ("auto": the low-rank path above
        ``ccme.estimators.lowrank.APPROX_THRESHOLD`` units, else the exact
        one; "exact": Cholesky factors of the n × n kernel matrices;
        "lowrank": Nyström features, :mod:`ccme.estimators.lowrank`) with
        ``rank_tol`` (the largest residual diagonal of the pivoted Cholesky
        landmarks, a bound on the trace error per unit), ``max_rank`` and
        ``landmark_pool``.  Defaults: ``ccme.RIDGE_DEFAULTS``.

        Deep Feature and Neural-Kernel (defaults
        ``ccme.estimators.DEEP_FEATURE_DEFAULTS`` / ``NEURAL_KERNEL_DEFAULTS``;
        the paper's configuration: ``ccme.estimators.paper_options(method, n)``):
        ``M`` (features / grid points; Neural-Kernel's default "auto" is 20 up to
        n = 4000 and 20 × (n / 4000)^0.6 beyond), ``hidden`` (layer widths),
        ``optimizer`` ("adam", "sgd"), ``lr``, ``epochs`` and ``weight_decay``
        (one value or a pair (stage 1, stage 2); the decay is decoupled, AdamW;
        Neural-Kernel's default "auto" is 2 up to n = 1000 and 2 × 1000 / n beyond),
        ``momentum``, ``batch_size`` (None: full
        batch), ``validation`` (held-out fraction for early stopping) and
        ``patience``, ``standardize`` (network inputs), ``device`` ("auto",
        "cpu", "cuda"), ``dtype`` ("float64", "float32"), ``progress``
        (tqdm bar), ``y_kernel``/``y_bandwidth``; Deep Feature also
        ``lam``/``lam0``/``lam1``/``lam1_plugin`` (ΨᵀΨ + nλI) and ``lam_scaling`` ("n" or
        "none"); Neural-Kernel ``grid`` ("auto", "regular", "quantile",
        "blend", "kmeans", "random" or an array of points) and ``atoms``
        ("outcomes": each grid point's weight spread over the outcomes around
        it, the default; "grid": the paper's read-out over the points
        themselves).  With them ``n_threads`` sets
        torch's threads during training (0: one).
    client : dask.distributed.Client or None, default None
        Run the fit on a Dask cluster (``pip install "ccme[dask]"``;
        :mod:`ccme.distributed`): the low-rank ridge path (``approx`` is set to
        "lowrank"; method="ridge" with the kernel first stage only), its n × r
        work on the workers, partition by partition, while the design, folds,
        propensity and tuning run here as for a local fit.  The result equals
        ``fit(..., approx="lowrank")`` with the same seed (up to the order of
        sums, about 1e-14 relative); its arrays stay on the cluster while the
        client is open, ``res.save`` gathers them.  ``data`` may be a pandas
        or a dask DataFrame (:func:`ccme.distributed.local_frame`: the columns
        the formula reads are computed once, here, for the design).
    partitions : int or None, default None
        Row partitions of a fit with ``client`` (None: two per worker thread).
    location : {"default", None, "linear", "auto"}, default "default"
        "default": "auto" where V has at least
        :data:`ccme.location.MANY_V_COVARIATES` (10) covariates (the neural
        estimators: always, :data:`ccme.estimators.training.NEURAL_LOCATION_FROM`)
        and σ_y is tuned for a one-dimensional outcome, no location stage
        otherwise (:func:`ccme.location.default_location`; a multivariate
        outcome may ask for "auto").  None: no location stage.
        "linear": a location stage (:mod:`ccme.location`), each arm's mean given V as a
        linear ridge regression on V's columns (of the mode's pseudo-outcome:
        Kennedy's DR-learner for ``mode="dr"``), the embedding fitted to the
        residual outcome Y − m̂_A(V) and read out shifted by m̂_a(v).  Exact
        for any mean model (a change of variable given V), it helps where V
        moves the law mostly by a shift, above all with many covariates in
        V (semi-synthetic IHDP, V = its 25 covariates: about half the error),
        and can hurt where V changes the law's shape (a bimodal law whose
        modes move with V: about twice the error); README, "Accuracy".
        "auto" tunes both and keeps the located fit, for every arm, only
        where its read-out criterion (the least-squares cross-validation that
        chooses σ_y) is below the plain fit's by more than
        :data:`ccme.location.AUTO_THRESHOLD` standard errors of their paired
        difference (:func:`ccme.location.choose_location`); the tuning runs
        twice, the cross-fit once (twice for the neural estimators, whose σ_y
        is chosen on the fitted embeddings).  Bands, tests and effect
        intervals take the mean model's error in (:mod:`ccme.bootstrap`).

    Returns
    -------
    CCMEResult
        The frozen record of the fit; ``res.embedding(arm)`` gives each arm's
        :class:`ccme.Embedding`.

    Raises
    ------
    FormulaError
        A formula that cannot be parsed, or names columns the data lack.
    DataError
        Missing or non-finite values (with ``na_action="raise"``), a treatment
        with one level or more than 50 (a continuous dose: cut it into levels),
        too few units in an arm or a fold; negative, NaN, infinite or all-zero
        sampling weights.
    ParameterError
        An unknown method, mode or hyperparameter, or a value out of range;
        ``treated=`` for a treatment with three or more levels, a ``reference``
        that is not a level.
    PositivityError
        Propensity scores that separate the arms (no overlap).
    MemoryBudgetError
        When the estimator's factors would not fit in the available memory.

    Examples
    --------
    >>> import ccme
    >>> data = ccme.datasets.paper_simulation(500, seed=1)
    >>> res = ccme.fit("y ~ a | x1 + x2 | x3 + x4", data, propensity="forest", seed=1, tune="none")
    >>> res.n_arm
    {1: 123, 0: 377}
    >>> res.density([0.0, 5.0], newdata=ccme.datasets.PAPER_PROFILES, arm=1).shape
    (2, 2)
    """
    started = time.perf_counter()
    # validate: every argument before any work
    estimator = get_estimator(method)
    n_rep = estimator.default_n_rep if n_rep is None else n_rep
    call = _describe_call(formula, method, mode, folds, propensity, seed,
                          dict(hyperparameters, n_rep=n_rep) if n_rep != 1 else hyperparameters, weights, location)
    if client is not None or partitions is not None:
        estimator = cluster_estimator(estimator, client=client, partitions=partitions)
    data = local_frame(data, formula, weights=weights, client=client)
    check_mode(mode)
    if not (isinstance(clip, str) and clip == "auto") and (
            isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0.0 <= clip < 0.5):
        raise ParameterError(f"`clip` must be 'auto' or a number in [0, 0.5); got {clip!r}")
    if not isinstance(normalize_weights, (bool, np.bool_)):
        raise ParameterError(f"`normalize_weights` must be True or False; got {normalize_weights!r}")
    if isinstance(trim, bool) or not isinstance(trim, (int, float)) or not 0.0 <= trim < 0.5:
        raise ParameterError(f"`trim` must be a number in [0, 0.5); got {trim!r}")
    if isinstance(n_rep, (bool, np.bool_)) or not isinstance(n_rep, (int, np.integer)) or n_rep < 1:
        raise ParameterError(f"`n_rep` must be a positive integer; got {n_rep!r}")
    clip_arg = clip
    options = estimator.options(hyperparameters)
    grids = resolve_tune(tune, method, estimator.user_keys(hyperparameters))
    if mode != "dr" and ("lam1_plugin" in hyperparameters or "lam1_plugin" in grids and isinstance(tune, dict)):
        raise ParameterError(f"`lam1_plugin` is the doubly robust plug-in part's penalty; mode={mode!r} has one "
                             "second-stage penalty, `lam1`")
    location = check_location(location)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    rng = np.random.default_rng(seed)

    # design and folds
    # A weights column is not a covariate: "." (every other column) leaves it out.
    design = build_design(parse_formula(formula, getattr(data, "columns", [])), data, treated=treated,
                          reference=reference, na_action=na_action,
                          exclude=(weights,) if isinstance(weights, str) else ())
    treatment = design.treatment
    default = location == "default"
    if default:
        location = default_location(n_v_covariates=len(design.v_variables), readout_tuned="y_bandwidth" in grids,
                                    d_y=design.Y.shape[1], many=estimator.location_from)
    check_location(location, readout_tuned="y_bandwidth" in grids)
    sampling = resolve_weights(weights, data, design.data_rows)
    sw = None if sampling is None else sampling.active  # None also for all-equal weights: the unweighted fit
    if sw is not None:
        options = weighted_options(method, options, distributed=client is not None or partitions is not None)
    fold_list = make_folds(design.n, folds, rng)
    _check_arm_sizes(design.A, treatment.arm_names)
    check_fold_arms(design.A, fold_list, mode, treatment.arm_names)
    check_arm_support(design.X, design.x_names, design.A, treatment.arm_names)
    prop_cols = _covariate_columns(design, propensity_covariates)
    out_cols = _covariate_columns(design, outcome_covariates)
    Xo = np.ascontiguousarray(design.X[:, out_cols])
    prepare_seed = int(rng.integers(2**31 - 1))
    params = estimator.prepare(options, design=design, Xo=Xo, seed=prepare_seed)
    # refuse now, before the propensity and tuning work (ccme.memory)
    needed = estimator.memory_bytes(params, mode=mode, A=design.A, folds=fold_list) * int(n_rep)
    if needed:
        check_allocation(needed, f"the {method} estimator's Cholesky factors (n = {design.n}, {len(fold_list)} folds"
                                 + (f" x {n_rep} repetitions)" if n_rep > 1 else ")"))

    # propensity: cross-fitted scores, overlap diagnostics, clipping and trimming
    prop_model = make_propensity(propensity, design.n, rng.integers(2**31 - 1), weighted=sw is not None,
                                 k=treatment.k)
    prop_started = time.perf_counter()
    selections = []
    scores = cross_fit_scores(prop_model, design.X[:, prop_cols], design.A, fold_list, selections=selections,
                              sample_weight=sw)
    prop_seconds = time.perf_counter() - prop_started
    clip, clip_rule = resolve_clip(clip, scores, design.A, trim=trim, sampling_weights=sw)
    report = calibration_report(prop_model.key, scores, design.A, [s for s in selections if s is not None],
                                reference=treatment.reference_code)
    overlap = overlap_diagnostics(scores, design.A, clip, warn=uses_propensity(mode), trim=trim, clip_rule=clip_rule,
                                  report=report, normalized=bool(normalize_weights), sampling_weights=sw)
    weighting = dict(design=design, mode=mode, trim=trim, normalize_weights=normalize_weights, Xo=Xo,
                     n_threads=n_threads, sampling_weights=sw)
    fold_list, crossfit_data = _second_stage_data(scores, fold_list, overlap.kept, clip=clip, **weighting)
    # tune, then cross-fit: on Y, on the residual of a location stage, or on both and keep the better ("auto")
    fold_seeds = rng.integers(2**31 - 1, size=len(fold_list))
    readout_seed = int(rng.integers(2**31 - 1)) if "y_bandwidth" in grids else None
    candidates = {}
    for kind in ((None, "linear") if location == "auto" else (location,)):
        data_k, params_k, locations = crossfit_data, params, None
        if kind is not None:
            # The embedding is fitted to the residual outcome (ccme.location); its rules are resolved on it.
            how = dict(V=design.V, Xo=Xo, Y=design.Y, A=design.A, scores=crossfit_data.scores, arms=design.arms,
                       mode=mode, sampling_weights=sw)
            locations, residual = fit_location(**how)
            # Its read-out criterion scores each fold on that fold's own location models (ccme.location).
            per_fold = fold_residuals(fold_list, **how) if readout_seed is not None else None
            data_k = dataclasses.replace(crossfit_data, design=dataclasses.replace(design, Y=residual),
                                         fold_outcomes=per_fold)
            params_k = estimator.prepare(options, design=data_k.design, Xo=Xo, seed=prepare_seed)
        candidates[kind] = _Estimate(_tuned(estimator, params_k, data_k, folds=fold_list, grids=grids, tune=tune,
                                            fold_seeds=fold_seeds), None, 0.0, data_k, locations)
    # "auto" chooses before the cross-fit where the read-out bandwidth was chosen on the tuning's proxy
    # (ridge), so that only the kept candidate is fitted; otherwise (neural) both are fitted first.
    dropped_seconds = 0.0   # the tuning time of a candidate dropped before its cross-fit
    if location == "auto" and all(c.tuned.report.pending_readout is not None for c in candidates.values()):
        kept = choose_location(candidates)
        dropped_seconds = sum(c.tuned.report.seconds for kind, c in candidates.items() if kind != kept)
        candidates = {kept: candidates[kept]}   # and its prebuilt factors freed before the cross-fit
    fits = {kind: _cross_fitted(estimator, c, folds=fold_list, grids=grids, fold_seeds=fold_seeds,
                                readout_seed=readout_seed) for kind, c in candidates.items()}
    del candidates
    chosen = fits[next(iter(fits)) if len(fits) == 1 else choose_location(fits)]
    alternatives = estimator.fit_alternatives(chosen.tuned.params, grids) if readout_seed is not None else None
    compared_seconds = 0.0  # the other values' whole fits (ccme.fit_choice)
    if alternatives is not None:
        compared_started = time.perf_counter()
        chosen = _compared_fits(estimator, chosen, alternatives, folds=fold_list, grids=grids, fold_seeds=fold_seeds,
                                readout_seed=readout_seed)
        compared_seconds = time.perf_counter() - compared_started
    tuned, embeddings, crossfit_data, locations = chosen.tuned, chosen.embeddings, chosen.data, chosen.locations
    if default and location == "auto":
        tuned.report.notes.append(f"location: 'auto' by default, V having {len(design.v_variables)} covariates "
                                  f"(at least {estimator.location_from} for method {estimator.name!r}); "
                                  "location=None turns it off")
    weighting["design"] = crossfit_data.design
    if n_rep > 1:
        others = [_repetition(seed, r, folds=folds, prop_model=prop_model, prop_cols=prop_cols, clip=clip_arg,
                              estimator=estimator, params=tuned.params, weighting=weighting)
                  for r in range(1, n_rep)]
        embeddings = {arm: embeddings[arm].pooled_with([other[arm].with_readout(embeddings[arm].y_kernel)
                                                        for other in others]) for arm in embeddings}
    embeddings = distribution_readout(embeddings, design)
    if locations is not None:
        embeddings = {arm: emb.with_location(locations[arm], outcome_range=(design.Y.min(axis=0), design.Y.max(axis=0)))
                      for arm, emb in embeddings.items()}
    timing = {
        "propensity": prop_seconds,
        "tuning": dropped_seconds + compared_seconds + sum(fit.tuned.report.seconds for fit in fits.values()),
        "estimator": sum(fit.seconds for fit in fits.values()),
        "total": time.perf_counter() - started,
    }
    return CCMEResult(
        call=call, design=design, method=method, mode=mode, folds=tuple(fold_list), seed=seed,
        estimator=estimator, options=options, params=tuned.params, propensity=prop_model.name,
        propensity_columns=tuple(design.x_names[i] for i in prop_cols),
        outcome_columns=tuple(design.x_names[i] for i in out_cols), overlap=overlap, embeddings=embeddings,
        timing=timing, clip=clip, tuning=tuned.report, sampling_weights=sampling,
    )


class _Estimate(NamedTuple):
    """One tuned and cross-fitted estimate: of Y, or of a location stage's residual (``locations``: its models)."""

    tuned: Tuned
    embeddings: dict
    seconds: float
    data: CrossFitData
    locations: dict | None


def _tuned(estimator, params, data, *, folds, grids, tune, fold_seeds) -> Tuned:
    """The estimator's hyperparameters tuned on ``data`` (as given where ``tune="none"``)."""
    if isinstance(tune, str) and tune == "none":
        return Tuned(params, TuningReport())
    return estimator.tune(params, data=data, folds=folds, grids=grids, seeds=fold_seeds, auto=isinstance(tune, str))


def _cross_fitted(estimator, candidate: "_Estimate", *, folds, grids, fold_seeds, readout_seed) -> "_Estimate":
    """``candidate`` cross-fitted at its tuned hyperparameters, read out with its tuned bandwidth σ_y."""
    tuned, data = candidate.tuned, candidate.data
    started = time.perf_counter()
    embeddings = cross_fit(estimator, tuned.params, data, folds, fold_seeds, tuned.prebuilt)
    seconds = time.perf_counter() - started
    if readout_seed is not None:
        embeddings = tune_readout(embeddings, data=data, folds=folds, grids=grids, seed=readout_seed,
                                  report=tuned.report)
    return candidate._replace(embeddings=embeddings, seconds=seconds)


def _compared_fits(estimator, base: "_Estimate", alternatives, *, folds, grids, fold_seeds,
                   readout_seed) -> "_Estimate":
    """``base`` or a whole cross-fit at another value of a hyperparameter, by the read-out criterion.

    ``alternatives`` from :meth:`ccme.estimators.base.Estimator.fit_alternatives`:
    each value's fit shares the base's tuning (its report up to the read-out,
    its data, folds and seeds: the criteria score the same held-out units) and
    reads out with its own σ_y (:func:`ccme.fit_choice.choose_fit`).
    """
    name, current, others = alternatives
    if not np.isfinite(readout_criterion(base.tuned.report)):
        base.tuned.report.notes.append(f"{name}: the default kept, as the read-out criterion that compares whole "
                                       "fits was not computed (see the notes on the outcome bandwidth)")
        return base
    fits, reports = {current: base}, {current: base.tuned.report}
    for value, params in others.items():
        readout = TuningReport()    # what the value's own read-out adds to the base's tuning
        fit = _cross_fitted(estimator, base._replace(tuned=Tuned(params, readout)), folds=folds, grids=grids,
                            fold_seeds=fold_seeds, readout_seed=readout_seed)
        reports[value] = with_readout(base.tuned.report, readout)
        fits[value] = fit._replace(tuned=Tuned(params, reports[value]))
    return fits[choose_fit(name, reports, current)]


def _second_stage_data(scores, fold_list, kept, *, clip, design, mode, trim, normalize_weights, Xo, n_threads,
                       sampling_weights):
    """The folds without the trimmed units, and the CrossFitData of the clipped (Hájek-normalised) scores."""
    if kept is not None:
        fold_list = trim_folds(fold_list, kept, design.A, mode, trim, design.treatment.arm_names)
    weights_from = clip_scores(scores, clip)
    if normalize_weights:
        weights_from = hajek_scores(weights_from, design.A, fold_list, sampling_weights)
    return fold_list, CrossFitData(mode=mode, design=design, Xo=Xo, scores=weights_from, n_threads=n_threads,
                                   sampling_weights=sampling_weights)


def _repetition(seed, r: int, *, folds, prop_model, prop_cols, clip, estimator, params, weighting: dict) -> dict:
    """Repetition r ≥ 1 of the cross-fit (``fit(n_rep=...)``): a new split, its propensity, both stages; tuned params.

    Seeded by (seed, r), apart from the first split's generator, so that
    ``n_rep=1`` draws exactly what a fit without repetitions draws.  The
    diagnostics are the first split's, so this one's overlap is not reported.
    """
    design, trim = weighting["design"], weighting["trim"]
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(r)]))
    fold_list = make_folds(design.n, folds, rng)
    scores = cross_fit_scores(prop_model, design.X[:, prop_cols], design.A, fold_list,
                              sample_weight=weighting["sampling_weights"])
    clip, _ = resolve_clip(clip, scores, design.A, trim=trim, sampling_weights=weighting["sampling_weights"])
    kept = overlap_diagnostics(scores, design.A, clip, warn=False, trim=trim).kept
    fold_list, data = _second_stage_data(scores, fold_list, kept, clip=clip, **weighting)
    return cross_fit(estimator, params, data, fold_list, rng.integers(2**31 - 1, size=len(fold_list)), {})


def _check_arm_sizes(A, names) -> None:
    for arm, label in names.items():
        count = int(np.sum(A == arm))
        if count < _MIN_ARM_UNITS:
            raise DataError(
                f"the {label} arm has {count} unit(s); at least {_MIN_ARM_UNITS} are needed to estimate its distribution"
            )


def _covariate_columns(design, variables) -> np.ndarray:
    """Positions in X of a nuisance model's covariates (default: all of X)."""
    return design.columns_of(variables) if variables is not None else np.arange(design.X.shape[1])


def _describe_call(formula, method, mode, folds, propensity, seed, hyperparameters, weights=None,
                   location="default") -> str:
    parts = [repr(formula), "data", f"method={method!r}", f"mode={mode!r}", f"folds={folds!r}"]
    if isinstance(propensity, str):
        parts.append(f"propensity={propensity!r}")
    else:
        parts.append(f"propensity=<{type(propensity).__name__}>")
    if seed is not None:
        parts.append(f"seed={seed!r}")
    if weights is not None:
        parts.append(f"weights={weights!r}" if isinstance(weights, str) else "weights=<array>")
    if location != "default":
        parts.append(f"location={location!r}")
    for key, value in hyperparameters.items():
        parts.append(f"{key}={value!r}")
    return "ccme.fit(" + ", ".join(parts) + ")"
