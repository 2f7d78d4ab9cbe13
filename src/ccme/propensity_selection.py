"""The propensity learners, their cross-validated selection (``propensity="auto"``) and the calibration report.

Candidates
----------
``"logistic_cv"``
    L2-penalised logistic regression on standardised covariates, its penalty
    chosen among 10 values C = 10⁻⁴ … 10⁴ by 3-fold cross-validated log-loss
    (scikit-learn's ``LogisticRegressionCV``).
``"boosting"``
    Gradient-boosted trees (``HistGradientBoostingClassifier``: learning rate
    0.1, at most 15 leaves and 20 units per leaf, L2 penalty 1 on the leaf
    values), stopped early on the log-loss of a stratified 20 % validation
    split (patience 20 rounds, at most 500).  With fewer than 25 units in
    the smaller class, no split is made and 50 rounds at learning rate 0.05
    are run.
``"forest"``
    The paper's random forest: 100 trees of depth at most 4.

``"auto"`` (:class:`AutoPropensity`; :func:`ccme.fit`'s default is ``"forest"``, see there why)
-----------------------------------------------------------------------------------------------
A Super Learner (van der Laan, Polley & Hubbard 2007) fitted on each
cross-fitting fold's nuisance part only (the units whose scores it
predicts never enter).  The candidates' out-of-fold probabilities come from
one stratified 3-fold cross-validation on at most
:data:`SELECTION_MAX_UNITS` units of the nuisance part (a stratified random
subsample when it is larger, drawn from ``seed``), every candidate scored
on the same folds (:func:`_cv_predictions`); the weights w ≥ 0, Σw = 1 of
the convex combination Σ_k w_k p̂_k that minimises the cross-validated
log-loss are found (a convex problem: the log-loss of a mixture of
probabilities is convex in w), and the candidates of non-zero weight are
refitted on the whole nuisance part and combined with these weights.  The
combination is one of probabilities, so its scores never lie beyond the
most extreme candidate's.  ``AutoPropensity(combine="select")`` keeps the
single candidate of smallest CV log-loss instead (the *discrete* Super
Learner).

Why the stack and not the selection: measured on the paper's simulation
(n = 2000, 4000) and three weak-overlap simulations, 3 seeds each
(``benchmarks/nuisance_defaults.py``, ridge DR, clip="auto"), the stack's
integrated squared errors are lower in most cases and never much higher
(geometric mean of the DR / one-step ratio 0.39 against 0.43 for the
selection; the paper's Y⁰ at n = 4000: 0.0120 against 0.0161), because it
mixes the calibrated learner of best log-loss with the forest's smoother
scores (typical weights: boosting 0.6–0.8 and forest 0.2–0.4 on the paper's
box-shaped propensity, logistic_cv alone on a linear logit); its Brier
scores are the selection's or better.  The cost is the final fits of the
candidates it keeps (all three at most).

Limits measured there: log-loss rewards the most predictive scores, and the
DR estimate prefers stable weights: the paper's depth-4 forest alone (whose
scores are shrunk towards ½) gave slightly lower DR errors (0.36), with Brier
scores up to 18 % worse than the stack's; with the old defaults (unpenalised
logistic regression, clip 0.01) the ratio is 0.65.  ``"forest"`` remains one
argument away.

Every learner is deterministic given the seed, and runs on one BLAS/OpenMP
thread.  The report (:class:`PropensityReport`, ``res.propensity_report``)
holds, per fold, each candidate's cross-validated log-loss and weight, and the
calibration of the cross-fitted scores: the Brier score, the log-loss and
a reliability curve (:meth:`PropensityReport.reliability`,
``res.plot_calibration()``).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from .errors import FormatError, ParameterError
from .io import check_schema, make_state

__all__ = ["CANDIDATES", "LEARNERS", "SELECTION_MAX_UNITS", "SELECTION_FOLDS", "AutoPropensity",
           "BoostingPropensity", "FoldSelection", "PropensityReport", "make_learner", "log_loss",
           "calibration_report"]

#: The candidates of ``propensity="auto"``, in the order the report lists them.
CANDIDATES = ("logistic_cv", "boosting", "forest")
#: Every learner a name can give (``propensity=name``), with its description.
LEARNERS = {
    "logistic": "logistic regression (unpenalised)",
    "logistic_cv": "penalised logistic regression (L2, C by 3-fold CV log-loss)",
    "boosting": "gradient boosting (early stopping on log-loss)",
    "forest": "random forest (100 trees, max_depth 4)",
}
#: At most this many units of a fold's nuisance part enter the selection's cross-validation.
SELECTION_MAX_UNITS = 2000
#: Folds of the selection's cross-validation (fewer when the smaller class has fewer units).
SELECTION_FOLDS = 3
#: Probabilities are bounded away from 0 and 1 by this much in the log-loss.
_LOSS_EPS = 1e-15
#: Bins of the reliability curve (equal width over [0, 1]).
RELIABILITY_BINS = 10


def log_loss(A, p, sample_weight=None) -> float:
    """Mean negative log-likelihood −mean(A log p + (1 − A) log(1 − p)), p bounded to [1e-15, 1 − 1e-15].

    With ``sample_weight`` w the weighted mean −Σ w_i ℓ_i / Σ w_i (the
    population's log-loss under sampling weights).  For k ≥ 3 arms ``p`` is
    the (n, k) matrix of class probabilities and ``A`` the arm codes 0..k − 1:
    the multinomial log-loss −mean log p[i, A_i].
    """
    p = np.asarray(p, dtype=np.float64)
    if p.ndim == 2:
        observed = p[np.arange(len(p)), np.asarray(A, dtype=np.intp)]
        terms = np.log(np.clip(observed, _LOSS_EPS, 1.0))
    else:
        A = np.asarray(A, dtype=np.float64)
        p = np.clip(p, _LOSS_EPS, 1.0 - _LOSS_EPS)
        terms = A * np.log(p) + (1.0 - A) * np.log1p(-p)
    if sample_weight is None:
        return float(-np.mean(terms))
    return float(-np.average(terms, weights=sample_weight))


def _int_seed(seed) -> int | None:
    if seed is None:
        return None
    return int(np.random.default_rng(seed).integers(2**31 - 1))


#: Rows the default forest grows each tree on at most (about; a bootstrap draw of this share of a fold's
#: nuisance part when n > 2 FOREST_ROWS): depth-4 trees have 16 leaves, which 50000 rows
#: estimate as well as a million, and the fit's cost stops growing with n.
FOREST_ROWS = 50000


def make_learner(name: str, seed=None, n: int | None = None):
    """The scikit-learn classifier of a learner name (:data:`LEARNERS`, or ``"auto"``), seeded by ``seed``.

    ``n`` (the data's size) lets the forest grow each tree on a bootstrap
    draw of about :data:`FOREST_ROWS` rows of a 2-fold nuisance part (n/2)
    when n > 2 FOREST_ROWS (scikit-learn's ``max_samples``); smaller data
    are drawn in full, as before.
    """
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rs = _int_seed(seed)
    if name == "logistic":
        from sklearn.linear_model import LogisticRegression

        # An unpenalised logistic regression (R's glm) on standardised columns.
        return make_pipeline(StandardScaler(), LogisticRegression(C=np.inf, max_iter=2000))
    if name == "logistic_cv":
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold

        return make_pipeline(StandardScaler(), LogisticRegressionCV(
            Cs=10, cv=StratifiedKFold(3, shuffle=True, random_state=rs), solver="newton-cholesky", max_iter=100,
            **_lrcv_keywords()))
    if name == "boosting":
        return BoostingPropensity(random_state=rs)
    if name == "forest":
        from sklearn.ensemble import RandomForestClassifier

        # One job: with several, predict_proba sums the trees in the threads' order (not bit-reproducible).
        share = None if n is None or n <= 2 * FOREST_ROWS else FOREST_ROWS / (n / 2)
        return _forest(RandomForestClassifier(n_estimators=100, max_depth=4, random_state=rs, max_samples=share))
    if name == "auto":
        return AutoPropensity(random_state=rs)
    raise ParameterError(f"unknown propensity learner {name!r}; the names are {['auto', *LEARNERS]}")


def _forest(classifier):
    """The forest behind :class:`ccme.column_order.CanonicalColumns`: its draws of split candidates by column position
    then depend on the covariates' values, not on the formula's term order or a factor's level order."""
    from sklearn.pipeline import make_pipeline

    from .column_order import CanonicalColumns

    return make_pipeline(CanonicalColumns(), classifier)


def _lrcv_keywords() -> dict:
    """LogisticRegressionCV's keywords for an L2 path scored by log-loss, in this scikit-learn's spelling."""
    from sklearn.linear_model import LogisticRegressionCV

    names = inspect.signature(LogisticRegressionCV).parameters
    out = {"scoring": "neg_log_loss"}
    if "l1_ratios" in names and "use_legacy_attributes" in names:  # scikit-learn ≥ 1.8
        out.update(l1_ratios=(0.0,), use_legacy_attributes=False)
    return out


def weight_keywords(model, sample_weight) -> dict:
    """The keywords passing sampling weights to ``model.fit``: ``sample_weight=``, or per step of a Pipeline.

    A Pipeline's fit takes ``<step>__sample_weight`` for each step whose fit
    accepts it (the scaler then standardises by the weighted moments).
    Empty without weights.
    """
    if sample_weight is None:
        return {}
    from sklearn.pipeline import Pipeline
    from sklearn.utils.validation import has_fit_parameter

    if isinstance(model, Pipeline):
        return {f"{name}__sample_weight": sample_weight for name, step in model.steps
                if step not in (None, "passthrough") and has_fit_parameter(step, "sample_weight")}
    return {"sample_weight": sample_weight}


def accepts_weights(model) -> bool:
    """Whether ``model.fit`` takes ``sample_weight`` (for a Pipeline: its final step's fit)."""
    from sklearn.pipeline import Pipeline
    from sklearn.utils.validation import has_fit_parameter

    if isinstance(model, Pipeline):
        model = model.steps[-1][1]
    return has_fit_parameter(model, "sample_weight")


def _quiet_fit(model, X, y, *, one_thread: bool = True, sample_weight=None):
    """Fit on one BLAS/OpenMP thread, silencing the convergence warnings of a logistic fit on separable data.

    Such a fit shows as extreme scores, which the positivity check and the
    clipping report in ccme's words.  One thread: the propensity learners'
    BLAS and OpenMP loops work on a few thousand units at a time, where
    threads cost more in synchronisation than they gain; on a busy machine
    a multithreaded Newton step of the logistic path was measured 40 times
    slower (18 s against 0.4 s at n = 10 000, d = 50).
    """
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(), (_one_thread() if one_thread else contextlib.nullcontext()):
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        warnings.filterwarnings("ignore", message=".*did not converge.*")
        warnings.filterwarnings("ignore", message=".*lbfgs failed.*")
        model.fit(X, y, **weight_keywords(model, sample_weight))
    return model


def _proba(model, X, k: int = 2, *, one_thread: bool = True) -> np.ndarray:
    """P(A = 1 | X) (n,) of a fitted classifier for k = 2 arms; for k ≥ 3 the (n, k) matrix P(A = j | X).

    Column j is arm code j (the classes are the codes 0..k − 1); a class the
    fit never saw has probability 0.
    """
    classes = list(model.classes_)
    if k == 2:
        if 1 not in classes:
            return np.zeros(len(X))
        with _one_thread() if one_thread else contextlib.nullcontext():
            return model.predict_proba(X)[:, classes.index(1)]
    with _one_thread() if one_thread else contextlib.nullcontext():
        P = model.predict_proba(X)
    out = np.zeros((len(X), k))
    out[:, np.asarray(classes, dtype=np.intp)] = P
    return out


_LIMIT = {"lock": threading.Lock(), "depth": 0, "limiter": None, "controller": None}


@contextlib.contextmanager
def _one_thread():
    """One BLAS and one OpenMP thread (threadpoolctl) for a propensity learner's fit or prediction.

    The limit is process-wide, so it is held while any Python thread is inside
    (a count): concurrent fits never restore the thread counts under each
    other, and every propensity fit runs on one thread, bit for bit the same.
    """
    state = _LIMIT
    with state["lock"]:
        if state["controller"] is None:  # finding the loaded libraries takes ~10 ms: once
            import sklearn.ensemble  # noqa: F401  (loads scikit-learn's OpenMP runtime first)
            from threadpoolctl import ThreadpoolController

            state["controller"] = ThreadpoolController()
        if state["depth"] == 0:
            state["limiter"] = state["controller"].limit(limits=1)
        state["depth"] += 1
    try:
        yield
    finally:
        with state["lock"]:
            state["depth"] -= 1
            if state["depth"] == 0:
                state["limiter"].restore_original_limits()
                state["limiter"] = None


try:  # scikit-learn's estimator protocol (clone, get_params) for the two learners defined here
    from sklearn.base import BaseEstimator, ClassifierMixin
except ImportError:  # pragma: no cover - scikit-learn is a dependency
    BaseEstimator, ClassifierMixin = object, object


class BoostingPropensity(ClassifierMixin, BaseEstimator):
    """Gradient-boosted trees for P(A = 1 | X), regularised for calibrated probabilities.

    ``HistGradientBoostingClassifier`` with learning rate 0.1, at most 15
    leaves and ``min_samples_leaf`` units per leaf, an L2 penalty of 1 on the
    leaf values, one OpenMP thread, and early stopping on the log-loss of a
    stratified 20 % validation split (patience 20 rounds, at most 500): scikit-learn's own
    default stops early only above 10 000 units, and 100 unstopped rounds
    overfit a few thousand units into overconfident scores.  When the
    smaller class has fewer than 25 units there is no split to stop on:
    50 rounds at learning rate 0.05.
    """

    def __init__(self, random_state=None, min_samples_leaf=20):
        self.random_state = random_state
        self.min_samples_leaf = min_samples_leaf

    def fit(self, X, y, sample_weight=None):
        from sklearn.ensemble import HistGradientBoostingClassifier

        y = np.asarray(y)
        counts = np.unique(y, return_counts=True)[1]
        common = dict(max_leaf_nodes=15, min_samples_leaf=self.min_samples_leaf, l2_regularization=1.0,
                      random_state=self.random_state)
        if counts.min() >= 25:
            model = HistGradientBoostingClassifier(learning_rate=0.1, max_iter=500, early_stopping=True,
                                                   validation_fraction=0.2, n_iter_no_change=20, scoring="loss",
                                                   **common)
        else:
            model = HistGradientBoostingClassifier(learning_rate=0.05, max_iter=50, early_stopping=False, **common)
        with _one_thread():
            self.model_ = model.fit(X, y, **weight_keywords(model, sample_weight))
        self.classes_ = self.model_.classes_
        return self

    def predict_proba(self, X):
        with _one_thread():
            return self.model_.predict_proba(X)

    def predict(self, X):
        with _one_thread():
            return self.model_.predict(X)


@dataclass(frozen=True)
class FoldSelection:
    """What ``propensity="auto"`` did on one fold's nuisance part.

    Attributes
    ----------
    candidates : tuple of str
        The candidate learners (:data:`CANDIDATES`).
    log_loss : tuple of float
        Each candidate's cross-validated log-loss on the selection units.
    weights : tuple of float
        The weight of each candidate in the final model (one 1 for the selection).
    n_units : int
        Units of the nuisance part in the selection's cross-validation.
    n_nuisance : int
        Units of the nuisance part (the final model's training set).
    cv_folds : int
        Folds of the selection's cross-validation.
    combine : {"select", "stack"}
    combined_log_loss : float
        The cross-validated log-loss of the final combination (the chosen
        candidate's; for a stack, of the weighted out-of-fold probabilities,
        slightly optimistic since the weights were fitted to them).
    """

    candidates: tuple
    log_loss: tuple
    weights: tuple
    n_units: int
    n_nuisance: int
    cv_folds: int
    combine: str = "select"
    combined_log_loss: float = float("nan")

    STATE_SCHEMA = "ccme.FoldSelection"
    STATE_VERSION = 1

    @property
    def chosen(self) -> str:
        """The candidate of largest weight (the selected one)."""
        return self.candidates[int(np.argmax(self.weights))]

    @property
    def losses(self) -> dict:
        """Candidate → cross-validated log-loss."""
        return dict(zip(self.candidates, self.log_loss))

    def to_state(self) -> dict:
        """The selection as a versioned state for :mod:`ccme.io`."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, candidates=list(self.candidates),
                          log_loss=[float(x) for x in self.log_loss], weights=[float(x) for x in self.weights],
                          n_units=int(self.n_units), n_nuisance=int(self.n_nuisance), cv_folds=int(self.cv_folds),
                          combine=self.combine, combined_log_loss=float(self.combined_log_loss))

    @classmethod
    def from_state(cls, state) -> "FoldSelection":
        """Inverse of :meth:`to_state`."""
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=("candidates", "log_loss", "weights", "n_units", "n_nuisance", "cv_folds", "combine",
                           "combined_log_loss"))
        k = len(state["candidates"])
        if not (len(state["log_loss"]) == len(state["weights"]) == k and k > 0):
            raise FormatError("the stored propensity selection has candidates, losses and weights of different lengths")
        return cls(tuple(state["candidates"]), tuple(state["log_loss"]), tuple(state["weights"]), state["n_units"],
                   state["n_nuisance"], state["cv_folds"], state["combine"], state["combined_log_loss"])


class AutoPropensity(ClassifierMixin, BaseEstimator):
    """Cross-validated combination (or choice) of propensity learners by log-loss (``propensity="auto"``).

    Parameters
    ----------
    candidates : tuple of str, default :data:`CANDIDATES`
        Learner names (:func:`make_learner`).
    combine : {"stack", "select"}, default "stack"
        "stack": the convex combination of the candidates' probabilities
        minimising the cross-validated log-loss (Super Learner), candidates of
        non-zero weight refitted.  "select": refit the candidate with the
        smallest cross-validated log-loss (discrete Super Learner).
    max_units : int, default :data:`SELECTION_MAX_UNITS`
        At most this many units (a stratified random subsample) enter the
        cross-validation; the final model uses every unit.
    cv : int, default :data:`SELECTION_FOLDS`
        Folds of the cross-validation (stratified, shuffled).
    random_state : int or None

    Attributes (after ``fit``)
    --------------------------
    selection_ : FoldSelection
    models_ : list of (weight, fitted classifier)
    cv_rows_ : ndarray of int
        The rows of the cross-validation (all rows, or the subsample).
    cv_splits_ : list of (train, test)
        The folds, as positions in ``cv_rows_``.
    cv_predictions_ : ndarray (len(cv_rows_), len(candidates))
        Each candidate's out-of-fold P(A = 1) (see :func:`_cv_predictions`).
    cv_seeds_ : dict
        Candidate → the seed of its learners.
    """

    def __init__(self, candidates=CANDIDATES, combine="stack", max_units=SELECTION_MAX_UNITS, cv=SELECTION_FOLDS,
                 random_state=None):
        self.candidates = candidates
        self.combine = combine
        self.max_units = max_units
        self.cv = cv
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None):
        """Cross-validate the candidates and fit the combination; ``sample_weight`` weights every step.

        With sampling weights the candidates are fitted with them, and their
        out-of-fold log-losses and the stack's weights are the weighted
        log-losses (:func:`log_loss`), so that the combination minimises the
        population's log-loss.
        """
        from sklearn.model_selection import StratifiedKFold

        if self.combine not in ("select", "stack"):
            raise ParameterError(f"`combine` must be 'select' or 'stack'; got {self.combine!r}")
        names = tuple(self.candidates)
        if not names or any(name not in LEARNERS for name in names) or len(set(names)) < len(names):
            raise ParameterError(f"`candidates` must name distinct learners among {list(LEARNERS)}; got {names!r}")
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        # Two classes: P(A = 1) as a vector; k ≥ 3 (multinomial): the codes 0..k − 1, probabilities as matrices.
        arms = 2 if len(self.classes_) <= 2 else len(self.classes_)
        rng = np.random.default_rng(self.random_state)
        seeds = [int(s) for s in rng.integers(2**31 - 1, size=len(names) + 1)]
        rows = _stratified_subsample(y, int(self.max_units), rng) if len(self.classes_) >= 2 else np.arange(len(y))
        Xs, ys = X[rows], y[rows]
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        ws = None if w is None else w[rows]
        smaller = int(np.unique(ys, return_counts=True)[1].min()) if len(self.classes_) >= 2 else 0
        k = int(min(self.cv, smaller))
        fitted, splits, oof = {}, [], np.empty((len(ys), 0))
        if k >= 2:
            A = (ys == self.classes_[-1]).astype(np.float64) if arms == 2 else ys.astype(np.intp)
            splits = list(StratifiedKFold(k, shuffle=True, random_state=seeds[-1]).split(Xs, ys))
            oof = np.empty((len(ys),) + ((arms,) if arms > 2 else ()) + (len(names),))
            for j, (name, seed) in enumerate(zip(names, seeds)):
                oof[..., j], fitted[name] = _cv_predictions(name, seed, Xs, ys, splits, whole=len(rows) == len(y),
                                                            sample_weight=ws, k=arms)
            losses = tuple(log_loss(A, oof[..., j], ws) for j in range(len(names)))
            if self.combine == "select":
                weights = np.zeros(len(names))
                weights[int(np.argmin(losses))] = 1.0
            else:
                weights = _stack_weights(A, oof, ws)
            combined = log_loss(A, oof @ weights, ws)
        else:  # fewer than two units of a class: no cross-validation; keep the first candidate
            losses = tuple(np.nan for _ in names)
            weights = np.eye(len(names))[0]
            combined = np.nan
        self.arms_ = arms
        self.models_ = [(float(c), fitted.get(name) or _quiet_fit(make_learner(name, seed), X, y, sample_weight=w))
                        for c, name, seed in zip(weights, names, seeds) if c > 0]
        self.selection_ = FoldSelection(names, losses, tuple(float(w) for w in weights), len(rows), len(y), max(k, 0),
                                        self.combine, float(combined))
        self.cv_rows_, self.cv_splits_, self.cv_predictions_ = rows, splits, oof
        self.cv_seeds_ = dict(zip(names, seeds))
        return self

    def predict_proba(self, X):
        X = np.asarray(X, dtype=np.float64)
        if self.arms_ > 2:  # columns in the order of classes_, the codes 0..k − 1
            P = sum(w * _proba(model, X, self.arms_) for w, model in self.models_)
            return np.clip(P, 0.0, 1.0)[:, np.asarray(self.classes_, dtype=np.intp)]
        p = sum(w * _proba(model, X) for w, model in self.models_)
        p = np.clip(p, 0.0, 1.0)
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def _cv_predictions(name: str, seed: int, X, y, splits, *, whole: bool, sample_weight=None, k: int = 2):
    """Out-of-fold P(A = 1) of a candidate on the selection's folds, and the final model when it comes free.

    For k ≥ 3 arms the out-of-fold (n, k) class probabilities (:func:`_proba`).

    Every candidate is scored on the same folds.  Boosting (and the
    unpenalised logistic regression) are refitted on each fold's training
    part.  ``logistic_cv`` chooses its penalty C by the cross-validated
    log-loss over these same folds (LogisticRegressionCV with the folds
    given), and its out-of-fold predictions are those of C on each fold;
    when the selection used every unit (``whole``), that fit is already the
    final model.  The forest is grown on each fold's training part with a
    third of its trees (34, 33, 33 for three folds), which costs what one
    100-tree forest costs; its CV log-loss therefore describes a forest of
    about 33 trees, whose probabilities are slightly noisier than the
    100-tree forest's.  ``sample_weight`` weights every fit (the penalty path
    of ``logistic_cv`` is scored by scikit-learn's unweighted CV log-loss).
    """
    w = sample_weight

    def part(rows):
        return None if w is None else w[rows]

    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = np.empty((len(y), k) if k > 2 else len(y))
    final = None
    if name == "logistic_cv":
        path = make_learner("logistic_cv", seed)
        path.steps[-1][1].set_params(cv=splits)
        _quiet_fit(path, X, y, sample_weight=w)
        C = float(np.ravel(path.steps[-1][1].C_)[0])
        for train, test in splits:
            model = make_pipeline(StandardScaler(), LogisticRegression(C=C, solver="newton-cholesky", max_iter=100))
            out[test] = _proba(_quiet_fit(model, X[train], y[train], sample_weight=part(train)), X[test], k)
        final = path if whole else None
    elif name == "forest":
        from sklearn.ensemble import RandomForestClassifier

        trees = np.diff(np.linspace(0, 100, len(splits) + 1).round().astype(int))[::-1]
        rs = np.random.default_rng(seed).integers(2**31 - 1, size=len(splits))
        for (train, test), t, r in zip(splits, trees, rs):
            model = _forest(RandomForestClassifier(n_estimators=int(t), max_depth=4, random_state=int(r)))
            out[test] = _proba(_quiet_fit(model, X[train], y[train], sample_weight=part(train)), X[test], k)
    else:
        for train, test in splits:
            out[test] = _proba(_quiet_fit(make_learner(name, seed), X[train], y[train], sample_weight=part(train)),
                               X[test], k)
    return out, final


def _stratified_subsample(y, max_units: int, rng) -> np.ndarray:
    """Sorted row indices of a stratified random subsample of at most ``max_units`` rows (all rows if fewer)."""
    n = len(y)
    if n <= max_units:
        return np.arange(n)
    out = []
    for level in np.unique(y):
        members = np.flatnonzero(y == level)
        take = max(1, int(round(max_units * len(members) / n)))
        out.append(rng.choice(members, size=min(take, len(members)), replace=False))
    return np.sort(np.concatenate(out))


def _stack_weights(A, P, sample_weight=None) -> np.ndarray:
    """The weights w ≥ 0, Σw = 1, minimising the log-loss of P @ w (convex in w; SLSQP from equal weights).

    With ``sample_weight`` s the weighted log-loss −Σ s_i ℓ_i / Σ s_i.  For
    k ≥ 3 arms P is (n, k, candidates) and A the codes: the loss is then
    −mean log (Q @ w) with Q[i] = P[i, A_i], the candidates' probabilities of
    the observed arm (for two arms the same loss, written with A and 1 − A).
    """
    from scipy.optimize import minimize

    if P.ndim == 3:
        return _stack_weights_multinomial(P[np.arange(len(P)), np.asarray(A, dtype=np.intp)], sample_weight)
    P = np.clip(P, _LOSS_EPS, 1.0 - _LOSS_EPS)
    k = P.shape[1]
    # unit i's share of the mean: 1/n unweighted (the arithmetic of the unweighted fit, unchanged)
    share = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64) / np.sum(sample_weight)

    def loss(w):
        p = np.clip(P @ w, _LOSS_EPS, 1.0 - _LOSS_EPS)
        terms = A * np.log(p) + (1 - A) * np.log1p(-p)
        return -np.mean(terms) if share is None else -(share @ terms)

    def grad(w):
        p = np.clip(P @ w, _LOSS_EPS, 1.0 - _LOSS_EPS)
        r = A / p - (1 - A) / (1 - p)
        return -(r @ P) / len(A) if share is None else -((share * r) @ P)

    out = minimize(loss, np.full(k, 1.0 / k), jac=grad, method="SLSQP", bounds=[(0.0, 1.0)] * k,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}], options={"ftol": 1e-12})
    w = np.clip(out.x, 0.0, None)
    w[w < 1e-4] = 0.0
    return w / w.sum()


def _stack_weights_multinomial(Q, sample_weight=None) -> np.ndarray:
    """:func:`_stack_weights` from Q (n, candidates), each candidate's probability of the unit's observed arm."""
    from scipy.optimize import minimize

    Q = np.clip(Q, _LOSS_EPS, 1.0)
    k = Q.shape[1]
    share = (np.full(len(Q), 1.0 / len(Q)) if sample_weight is None
             else np.asarray(sample_weight, dtype=np.float64) / np.sum(sample_weight))

    def loss(w):
        return -(share @ np.log(np.clip(Q @ w, _LOSS_EPS, None)))

    def grad(w):
        return -((share / np.clip(Q @ w, _LOSS_EPS, None)) @ Q)

    out = minimize(loss, np.full(k, 1.0 / k), jac=grad, method="SLSQP", bounds=[(0.0, 1.0)] * k,
                   constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}], options={"ftol": 1e-12})
    w = np.clip(out.x, 0.0, None)
    w[w < 1e-4] = 0.0
    return w / w.sum()


@dataclass(frozen=True)
class PropensityReport:
    """How the propensity was estimated and how well the cross-fitted scores are calibrated.

    Attributes
    ----------
    learner : str
        ``"auto"``, a learner name (:data:`LEARNERS`), a classifier's class
        name, or ``"known scores"``.
    selections : tuple of FoldSelection
        Per cross-fitting fold, what ``"auto"`` chose (empty otherwise).
    brier : float
        Mean (π̂(X_i) − A_i)² of the cross-fitted scores (before clipping).
    brier_constant : float
        The Brier score p̄(1 − p̄) of the constant score (the treated share):
        a skill reference.
    log_loss : float
        The cross-fitted scores' log-loss.
    bin_edges : ndarray (B + 1,)
        Edges of the reliability curve's bins (equal width over [0, 1]).
    bin_score, bin_treated : ndarray (B,)
        Per bin: the mean score and the share of treated units (NaN: empty bin).
    bin_count : ndarray (B,)
        Units per bin.
    """

    learner: str
    selections: tuple
    brier: float
    brier_constant: float
    log_loss: float
    bin_edges: np.ndarray = field(repr=False)
    bin_score: np.ndarray = field(repr=False)
    bin_treated: np.ndarray = field(repr=False)
    bin_count: np.ndarray = field(repr=False)

    STATE_SCHEMA = "ccme.PropensityReport"
    STATE_VERSION = 1
    _ARRAYS = ("bin_edges", "bin_score", "bin_treated", "bin_count")

    @property
    def chosen(self) -> tuple:
        """Per fold, the learner ``"auto"`` chose (empty when another learner was asked for)."""
        return tuple(s.chosen for s in self.selections)

    def cv_log_loss(self):
        """Each candidate's cross-validated log-loss, one row per fold (a DataFrame; empty without "auto")."""
        import pandas as pd

        rows = [{"fold": k + 1, **s.losses, "chosen": s.chosen} for k, s in enumerate(self.selections)]
        return pd.DataFrame(rows).set_index("fold") if rows else pd.DataFrame()

    def reliability(self):
        """The reliability curve as a DataFrame: per bin, its bounds, mean score, treated share and count."""
        import pandas as pd

        return pd.DataFrame({"lower": self.bin_edges[:-1], "upper": self.bin_edges[1:],
                             "mean_score": self.bin_score, "fraction_treated": self.bin_treated,
                             "count": self.bin_count})

    def describe_model(self) -> str:
        """One line: the learner, and for "auto" the choice (or the stack's weights) and the CV log-losses.

        Log-losses and weights are means over the folds; a choice that differs
        between folds is given per fold.
        """
        if not self.selections:
            return LEARNERS.get(self.learner, self.learner)
        names = self.selections[0].candidates
        losses = {c: float(np.nanmean([s.losses[c] for s in self.selections])) for c in names}
        combined = float(np.nanmean([s.combined_log_loss for s in self.selections]))
        chosen = self.chosen
        if self.selections[0].combine == "stack":
            weights = {c: float(np.mean([s.weights[i] for s in self.selections])) for i, c in enumerate(names)}
            head = "auto: stacked " + ", ".join(f"{c} {w:.2f}" for c, w in weights.items() if w > 0)
            detail = f"CV log-loss {combined:.3f}; " + ", ".join(f"{c} {v:.3f}" for c, v in losses.items())
        elif len(set(chosen)) == 1:
            head = f"auto: chose {chosen[0]}"
            detail = f"CV log-loss {losses[chosen[0]]:.3f}; " + ", ".join(
                f"{c} {v:.3f}" for c, v in losses.items() if c != chosen[0])
        else:
            head = "auto: chose " + ", ".join(f"{c} (fold {k + 1})" for k, c in enumerate(chosen))
            detail = "CV log-loss " + ", ".join(f"{c} {v:.3f}" for c, v in losses.items())
        n_units = max(s.n_units for s in self.selections)
        n_nuisance = max(s.n_nuisance for s in self.selections)
        sub = f", on {n_units} of {n_nuisance} units" if n_units < n_nuisance else ""
        mean_folds = "" if len(self.selections) == 1 else ", mean over folds"
        return f"{head} ({detail}{mean_folds}{sub})"

    def describe_calibration(self) -> str:
        """One line: Brier score (and the constant score's), log-loss."""
        return (f"Brier {self.brier:.3g} (constant score {self.brier_constant:.3g}), log-loss {self.log_loss:.3g}; "
                "reliability curve: res.plot_calibration()")

    def to_state(self) -> dict:
        """The report as a versioned state for :mod:`ccme.io`."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, learner=self.learner,
                          selections=[s.to_state() for s in self.selections], brier=float(self.brier),
                          brier_constant=float(self.brier_constant), log_loss=float(self.log_loss),
                          **{name: getattr(self, name) for name in self._ARRAYS})

    @classmethod
    def from_state(cls, state) -> "PropensityReport":
        """Inverse of :meth:`to_state`."""
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION,
                     keys=("learner", "selections", "brier", "brier_constant", "log_loss", *cls._ARRAYS))
        arrays = [state[name] for name in cls._ARRAYS]
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays) or not (
                len(arrays[0]) == len(arrays[1]) + 1 == len(arrays[2]) + 1 == len(arrays[3]) + 1):
            raise FormatError("the stored reliability curve is not a set of matching vectors")
        return cls(state["learner"], tuple(FoldSelection.from_state(s) for s in state["selections"]), state["brier"],
                   state["brier_constant"], state["log_loss"], *arrays)


def calibration_report(learner: str, scores, A, selections=(), bins: int = RELIABILITY_BINS,
                       reference: int = 0) -> PropensityReport:
    """The :class:`PropensityReport` of cross-fitted ``scores`` (before clipping) against the treatment ``A``.

    For k ≥ 3 arms (``scores`` (n, k)) the Brier score is half the multiclass
    one, ½ mean Σ_j (π̂_j − 1{A = j})², with ½ Σ_j p̄_j (1 − p̄_j) for the
    constant score (both equal the binary ones for k = 2); the log-loss is the
    multinomial one, and the reliability curve pools every arm but the
    ``reference`` (the share of units in the arm against its mean score).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 2:
        codes = np.asarray(A, dtype=np.intp)
        onehot = np.eye(scores.shape[1])[codes]
        shares = onehot.mean(axis=0)
        brier = 0.5 * float(np.mean(np.sum((scores - onehot) ** 2, axis=1)))
        others = [j for j in range(scores.shape[1]) if j != reference]
        curve = _reliability(scores[:, others].ravel(), onehot[:, others].ravel(), bins)
        return PropensityReport(learner, tuple(selections), brier, 0.5 * float(np.sum(shares * (1.0 - shares))),
                                log_loss(codes, scores), *curve)
    A = np.asarray(A, dtype=np.float64)
    share = float(A.mean())
    return PropensityReport(learner, tuple(selections), float(np.mean((scores - A) ** 2)), share * (1.0 - share),
                            log_loss(A, scores), *_reliability(scores, A, bins))


def _reliability(scores, A, bins):
    """Bin edges, mean score, share of A = 1 and count per equal-width bin of the scores."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, scores, side="right") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_score = np.bincount(which, weights=scores, minlength=bins) / count
        treated = np.bincount(which, weights=A, minlength=bins) / count
    return edges, mean_score, treated, count.astype(np.int64)
