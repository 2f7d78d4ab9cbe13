"""The formula front end: ``"y ~ a | v1 + v2 | x3 + x4"`` to design matrices.

The formula has a left side (the outcome; ``y1 + y2`` for a multivariate one)
and two or three right-hand parts separated by ``|``:

1. the treatment, a single column;
2. the conditioning variables V of the target p(Y^a | V = v);
3. optionally, further confounders, so that the nuisance covariates are
   X = V ∪ part 3.  A ``.`` in part 3 stands for every column not used
   elsewhere in the formula.

Parsing, transforms (``np.log(x)``) and categorical encoding (strings, pandas
categoricals, ``C(x)``) are formulaic's; this module only assigns the roles,
checks them, and keeps formulaic's model specs so that ``newdata`` is encoded
exactly as the training data were (categorical levels included).

Categorical coding (for the kernels, :mod:`ccme.kernels`): every categorical
term of V and X gets one indicator column per level (formulaic's
``ensure_full_rank=False``: no reference level, so that the squared distance
between two different levels is 2 whatever the levels); a bare pandas
*ordered* categorical column gets the c − 1 cumulative indicators
1{x ≥ level_k}, k = 2..c, named ``x[>=level]`` (so that the squared distance
between two levels is the difference of their ranks); a boolean column stays
one 0/1 column.  A Gaussian kernel with one bandwidth σ over such a block is
then exactly Li and Racine's unordered kernel (λ = exp(−1/σ²)), ordered kernel
λ^|r − r'| (λ = exp(−1/(2σ²))) or binary kernel (λ = exp(−1/(2σ²))).
``Design.x_kinds`` records each column's kind.
"""

from __future__ import annotations

import numbers
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .errors import DataError, DataWarning, FormatError, FormulaError, ParameterError
from .io import check_schema, make_state

__all__ = ["Formula", "Design", "Treatment", "parse_formula", "build_design"]


def _formulaic():
    # formulaic is imported lazily: importing it costs ~0.3 s.
    import formulaic
    from formulaic.parser import DefaultFormulaParser

    return formulaic, DefaultFormulaParser(include_intercept=False)


def _as_formula_error(exc: Exception, formula: str) -> FormulaError:
    return FormulaError(f"cannot use formula {formula!r}: {_clean(exc)}")


@dataclass(frozen=True)
class Formula:
    """A parsed ccme formula: the roles of its parts.

    Attributes
    ----------
    text : str
        The formula as written.
    outcome, treatment, conditioning, confounders : str
        The text of each part (``confounders`` is ``""`` when absent).
    """

    text: str
    outcome: str
    treatment: str
    conditioning: str
    confounders: str
    _parsed: object = field(default=None, repr=False, compare=False)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Formula"
    STATE_VERSION = 1

    def __str__(self) -> str:
        return self.text

    def to_state(self) -> dict:
        """The formula as a versioned state for :mod:`ccme.io`: its text and the text of each part.

        formulaic's parsed object is not stored: :meth:`from_state` parses the
        text again.
        """
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, text=self.text, outcome=self.outcome,
                          treatment=self.treatment, conditioning=self.conditioning, confounders=self.confounders)

    @classmethod
    def from_state(cls, state, *, columns=()) -> "Formula":
        """Inverse of :meth:`to_state`: parse the stored text again and check that it gives the stored parts.

        Parsing evaluates nothing; the formula's Python expressions run only
        when a part is evaluated on data, and :meth:`Design.from_state` checks
        them against a whitelist before it does that.

        Parameters
        ----------
        state : dict
        columns : sequence of str, optional
            The data's columns, for a ``.`` in part 3.  The stored text of
            part 3 is kept as it was either way: with a ``.`` it depends on the
            columns of the data the formula was first parsed with.

        Raises
        ------
        ccme.errors.FormatError
            Another schema version, a text that does not parse, or a text
            whose outcome, treatment or conditioning part differs from the
            stored one (an edited file).
        """
        fields = ("text", "outcome", "treatment", "conditioning", "confounders")
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=fields)
        for name in fields:
            if not isinstance(state[name], str):
                raise FormatError(f"the formula's {name} should be a str; found {type(state[name]).__name__}")
        try:
            parsed = parse_formula(state["text"], columns)
        except FormulaError as exc:
            raise FormatError(f"the stored formula does not parse: {exc}") from None
        stored = (state["outcome"], state["treatment"], state["conditioning"])
        if (parsed.outcome, parsed.treatment, parsed.conditioning) != stored:
            raise FormatError(f"the stored formula {state['text']!r} does not parse to its stored parts "
                              f"{list(stored)}: the file was altered")
        return cls(text=parsed.text, outcome=parsed.outcome, treatment=parsed.treatment,
                   conditioning=parsed.conditioning, confounders=state["confounders"], _parsed=parsed._parsed)


@dataclass(frozen=True)
class Treatment:
    """How the treatment column maps to the arms.

    Arm code j stands for ``levels[j]``.  A binary treatment keeps its codes
    1 (treated, ``levels[1]``) and 0 (control, ``levels[0]``, the reference);
    a treatment with k ≥ 3 levels has the codes 0..k − 1 in the order of its
    levels (a categorical's categories, sorted numbers or texts, as R orders a
    factor's levels) and a ``reference`` level, the first one unless
    ``fit(reference=)`` names another (R's treatment contrasts).
    """

    column: str
    levels: tuple
    reference: object

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    #: Version 2 holds the levels and the reference (version 1: a binary treatment's two levels).
    STATE_SCHEMA = "ccme.Treatment"
    STATE_VERSION = 2

    @property
    def k(self) -> int:
        """The number of arms."""
        return len(self.levels)

    @property
    def binary(self) -> bool:
        return len(self.levels) == 2

    @property
    def arms(self) -> tuple:
        """The arm codes in the order results list them: (1, 0) for a binary treatment, else 0..k − 1."""
        return (1, 0) if self.binary else tuple(range(len(self.levels)))

    @property
    def reference_code(self) -> int:
        return self.levels.index(self.reference) if not self.binary else 0

    @property
    def level(self):
        """A binary treatment's treated level."""
        return self.levels[1]

    @property
    def control_level(self):
        """A binary treatment's control (reference) level."""
        return self.levels[0]

    def contrast(self, arms=None) -> tuple:
        """The codes (a, b) of the comparison a versus b; None: treated versus control (binary only)."""
        if arms is None:
            if not self.binary:
                raise ParameterError(
                    f"the treatment {self.column!r} has {self.k} levels: say which two arms to compare, "
                    f"e.g. arms=({self.levels[-1]!r}, {self.reference!r}); levels: {list(self.levels)}")
            return (1, 0)
        if isinstance(arms, (str, bytes)) or not hasattr(arms, "__len__") or len(arms) != 2:
            raise ParameterError(f"`arms` must be a pair of arms (compared, reference); got {arms!r}")
        a, b = self.code(arms[0], "arms"), self.code(arms[1], "arms")
        if a == b:
            raise ParameterError(f"`arms` must name two different arms; got {arms!r}")
        return (a, b)

    def code(self, arm, name: str = "arm") -> int:
        """The code of ``arm``: a level label (of the levels' type), or for a binary treatment 1/0 or True/False."""
        if self.binary:
            if isinstance(arm, (bool, np.bool_)):
                return int(arm)
            if isinstance(arm, (int, np.integer)) and int(arm) in (0, 1):
                return int(arm)
        for index, label in enumerate(self.levels):
            if _same_level(arm, label):
                return index
        if self.binary:
            raise ParameterError(
                f"`{name}` must be 1 (treated) or 0 (control), or a level of {self.column!r} "
                f"({self.level!r} or {self.control_level!r}); got {arm!r}")
        raise ParameterError(f"`{name}` must be a level of {self.column!r} ({', '.join(map(repr, self.levels))}); "
                             f"got {arm!r}")

    def label(self, code: int):
        """The level of arm ``code``."""
        return self.levels[int(code)]

    def arm_name(self, code: int) -> str:
        """How messages name an arm: "treated"/"control", or the level (``"dose='high'"``)."""
        if self.binary:
            return "treated" if code == 1 else "control"
        return f"{self.column}={self.levels[int(code)]!r}"

    @property
    def arm_names(self) -> dict:
        """Arm code → :meth:`arm_name`, in the order of :attr:`arms` (what the fit's checks name arms by)."""
        return {arm: self.arm_name(arm) for arm in self.arms}

    def describe(self) -> str:
        if self.binary:
            return f"{self.column} ({self.level!r} = treated, {self.control_level!r} = control)"
        return (f"{self.column} ({self.k} arms: {', '.join(map(repr, self.levels))}; "
                f"reference {self.reference!r})")

    def to_state(self) -> dict:
        """The treatment's column and levels as a versioned state for :mod:`ccme.io`."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, column=self.column, levels=list(self.levels),
                          reference=self.reference)

    @classmethod
    def from_state(cls, state) -> "Treatment":
        """Inverse of :meth:`to_state`; the levels come back as the scalars they were (str, int, float, bool)."""
        version = check_schema(state, cls.STATE_SCHEMA, (1, cls.STATE_VERSION))
        if version == 1:  # a binary treatment: its treated level and its control level
            check_schema(state, cls.STATE_SCHEMA, 1, keys=("column", "level", "control_level"))
            state = dict(state, levels=[state["control_level"], state["level"]], reference=state["control_level"])
        else:
            check_schema(state, cls.STATE_SCHEMA, 2, keys=("column", "levels", "reference"))
        if not isinstance(state["column"], str):
            raise FormatError(f"the treatment's column should be a str; found {type(state['column']).__name__}")
        levels = state["levels"]
        if not isinstance(levels, (list, tuple)) or len(levels) < 2:
            raise FormatError("the treatment's levels should be a list of at least two scalars")
        for value in (*levels, state["reference"]):
            if not isinstance(value, (str, int, float, np.generic)):
                raise FormatError(f"the treatment's levels should be scalars; found {type(value).__name__}")
        if not any(_same_level(state["reference"], v) for v in levels):
            raise FormatError("the treatment's reference is not one of its levels")
        return cls(state["column"], tuple(levels), state["reference"])


def _same_level(arm, label) -> bool:
    """Whether ``arm`` is the level ``label`` (equal, and of its type: 1 is not the level 1.0 or True)."""
    if isinstance(label, (bool, np.bool_)) or isinstance(arm, (bool, np.bool_)):
        return isinstance(arm, (bool, np.bool_)) and isinstance(label, (bool, np.bool_)) and bool(arm) == bool(label)
    if isinstance(label, numbers.Number) and isinstance(arm, numbers.Number):
        return isinstance(arm, numbers.Integral) == isinstance(label, numbers.Integral) and arm == label
    return type(arm) is type(label) and arm == label


@dataclass(frozen=True)
class Design:
    """Design matrices of one data set, with the specs that encode new data.

    Attributes
    ----------
    Y : ndarray (n, d_y)
    A : ndarray (n,) of arm codes (:class:`Treatment`: 1/0 for a binary treatment, 0..k − 1 for k levels)
    V : ndarray (n, d_v)
    X : ndarray (n, d_x)  -- V's columns first, then part 3's
    """

    formula: Formula
    Y: np.ndarray
    A: np.ndarray
    V: np.ndarray
    X: np.ndarray
    y_names: tuple[str, ...]
    v_names: tuple[str, ...]
    x_names: tuple[str, ...]
    v_variables: tuple[str, ...]
    x_variables: tuple[str, ...]
    x_sources: tuple[frozenset, ...]
    treatment: Treatment
    n_dropped: int = 0
    v_frame: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    _v_spec: object = field(default=None, repr=False, compare=False)
    _x3_spec: object = field(default=None, repr=False, compare=False)
    #: Per column of X: "numeric", "categorical" (an indicator of one level), "ordered" (a cumulative indicator of
    #: an ordered factor) or "binary" (a boolean column); set by build_design (None for a loaded design).
    x_kinds: tuple | None = field(default=None, repr=False, compare=False)
    #: Positions in ``data`` of the design's rows (those ``na_action="drop"`` kept); set by build_design (None
    #: for a loaded design).  Aligns what is given per row of ``data`` (``fit(weights=)``) to the design.
    data_rows: np.ndarray | None = field(default=None, repr=False, compare=False)

    #: At most this many profiles when V is purely categorical (one per combination of levels).
    MAX_LEVEL_PROFILES = 10

    @property
    def n(self) -> int:
        return self.Y.shape[0]

    @property
    def arms(self) -> tuple:
        """The arm codes (:attr:`Treatment.arms`): (1, 0) for a binary treatment, 0..k − 1 for k levels."""
        return self.treatment.arms

    def encode_v(self, newdata: pd.DataFrame) -> np.ndarray:
        """Encode ``newdata`` into V's columns exactly as the training data were."""
        newdata = newdata_frame(newdata)
        if isinstance(newdata, pd.DataFrame):
            for name in self.v_variables:
                train = self.v_frame[name]
                if name in newdata.columns and not pd.api.types.is_numeric_dtype(train):
                    unseen = set(pd.unique(newdata[name].dropna())) - set(pd.unique(train.dropna()))
                    if unseen:
                        raise DataError(
                            f"cannot encode `newdata`: column {name!r} has level(s) {sorted(map(str, unseen))} "
                            "not seen in the training data"
                        )
        values = _encode_with_spec(self._v_spec, newdata, self.v_variables, "newdata")
        return _kernel_coding(values, self._v_spec, self.v_frame)[0]

    def profiles(self, quantiles=(0.25, 0.5, 0.75)) -> pd.DataFrame:
        """Typical rows of V's raw columns, for summaries and plots.

        Parameters
        ----------
        quantiles : sequence of float in [0, 1]
            One profile per quantile when V has a numeric column.

        Returns
        -------
        DataFrame
            One row per profile, one column per raw variable of V.

            - V with a numeric column: the rows ``q25``, ``q50``, ... hold each
              numeric column at that quantile; a categorical column (strings,
              booleans, pandas categoricals) takes its levels in order of
              decreasing frequency, one per profile, starting again from the
              most frequent when it has fewer levels than there are profiles.
              So three profiles of V = (age, sex) show both sexes, and a
              categorical column never sits at its mode in every row.
            - V purely categorical: ``quantiles`` means nothing there, so there
              is one profile per combination of levels seen in the data, the
              most frequent first, at most :attr:`MAX_LEVEL_PROFILES` of them;
              the rows are named ``"column=level"`` (joined by ``", "``).

            To compare the levels of a categorical column at fixed values of
            the numeric ones, build ``newdata`` with those rows yourself.
        """
        try:
            quantiles = [float(q) for q in np.atleast_1d(np.asarray(quantiles, dtype=float))]
        except (TypeError, ValueError):
            raise DataError(f"`quantiles` must be numbers in [0, 1]; got {quantiles!r}") from None
        if not quantiles:
            raise DataError("`quantiles` must hold at least one value in [0, 1]; got none")
        for q in quantiles:
            if not 0.0 <= q <= 1.0:
                raise DataError(f"quantiles must lie in [0, 1]; got {q!r}")
        numeric = [name for name in self.v_variables if _is_numeric(self.v_frame[name])]
        categorical = [name for name in self.v_variables if name not in numeric]
        if numeric:
            rows, labels = [], []
            # Levels by decreasing frequency (ties in the order of first appearance), unseen categories left out.
            levels = {name: _levels_by_frequency(self.v_frame[name]) for name in categorical}
            for k, q in enumerate(quantiles):
                row = {}
                for name in self.v_variables:
                    if name in levels:
                        row[name] = levels[name][k % len(levels[name])]
                    else:
                        row[name] = float(self.v_frame[name].quantile(q))
                rows.append(row)
                labels.append(f"q{round(100 * q):02d}")  # a list: quantiles that round alike keep their rows
            frame = pd.DataFrame(rows, index=labels, columns=list(self.v_variables))
        else:
            counts = self.v_frame.groupby(list(self.v_variables), observed=True, sort=False, dropna=True).size()
            counts = counts.sort_values(ascending=False, kind="stable").iloc[: self.MAX_LEVEL_PROFILES]
            combos = [key if isinstance(key, tuple) else (key,) for key in counts.index]
            frame = pd.DataFrame(combos, columns=list(self.v_variables))
            frame.index = [", ".join(f"{n}={v}" for n, v in zip(self.v_variables, combo)) for combo in combos]
        for name in self.v_variables:
            if isinstance(self.v_frame[name].dtype, pd.CategoricalDtype):
                frame[name] = pd.Categorical(frame[name], categories=self.v_frame[name].cat.categories)
            elif pd.api.types.is_bool_dtype(self.v_frame[name]):
                frame[name] = frame[name].astype(bool)
        return frame

    def columns_of(self, variables) -> np.ndarray:
        """Indices of X's columns that derive from the given raw variables."""
        return _columns_of(self, variables)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Design"
    #: 2: categorical terms coded with all their levels, ordered factors cumulatively (version 1 dropped a
    #: reference level from every categorical but the first, and cannot be re-encoded the same way).
    STATE_VERSION = 2
    _STATE_FIELDS = ("formula", "Y", "A", "V", "X", "y_names", "v_names", "x_names", "v_variables", "x_variables",
                     "x_sources", "treatment", "n_dropped", "v_frame")

    def to_state(self) -> dict:
        """The design as a versioned state for :mod:`ccme.io`.

        The formula's and the treatment's states, the matrices, the names and
        sources of their columns, and V's raw columns (``v_frame``, column by
        column; its row labels are not kept, as nothing reads them).
        formulaic's model spec, which encodes ``newdata``, is an object graph
        that only pickle could store: :meth:`from_state` rebuilds it from the
        formula and V's raw columns instead.

        Raises
        ------
        ccme.errors.FormatError
            A column of V has a dtype that cannot be stored (see
            :func:`_frame_to_state`).
        """
        if self.v_frame is None:
            raise FormatError("cannot save a design without V's raw columns (`v_frame`): its encoder needs them")
        return make_state(
            self.STATE_SCHEMA, self.STATE_VERSION,
            formula=self.formula.to_state(), Y=self.Y, A=self.A, V=self.V, X=self.X,
            y_names=list(self.y_names), v_names=list(self.v_names), x_names=list(self.x_names),
            v_variables=list(self.v_variables), x_variables=list(self.x_variables),
            x_sources=[sorted(source) for source in self.x_sources], treatment=self.treatment.to_state(),
            n_dropped=int(self.n_dropped), v_frame=_frame_to_state(self.v_frame),
        )

    @classmethod
    def from_state(cls, state) -> "Design":
        """Inverse of :meth:`to_state`, with V's encoder rebuilt.

        The formula is parsed again (:meth:`Formula.from_state`); every Python
        expression in its conditioning part is checked against a whitelist
        (column names, formulaic's transforms, a list of numpy functions,
        arithmetic), and only then is the part evaluated on the stored raw
        columns of V to rebuild formulaic's encoder, which must reproduce the
        stored V bit for bit.  A formula that names anything else (which an
        edited file could) is refused before anything is evaluated.

        Raises
        ------
        ccme.errors.FormatError
            Another schema version, a missing or malformed field, a refused
            expression, or an encoder that does not reproduce V.
        """
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=cls._STATE_FIELDS)
        names = {key: _state_strings(state[key], key) for key in
                 ("y_names", "v_names", "x_names", "v_variables", "x_variables")}
        sources = state["x_sources"]
        if not isinstance(sources, list):
            raise FormatError(f"the design's x_sources should be a list; found {type(sources).__name__}")
        x_sources = tuple(frozenset(_state_strings(s, "x_sources")) for s in sources)
        treatment = Treatment.from_state(state["treatment"])
        columns = list(dict.fromkeys([*names["x_variables"], *names["v_variables"], treatment.column]))
        formula = Formula.from_state(state["formula"], columns=columns)
        arrays = {key: _state_array(state[key], key, ndim) for key, ndim in (("Y", 2), ("A", 1), ("V", 2), ("X", 2))}
        n = arrays["Y"].shape[0]
        if any(a.shape[0] != n for a in arrays.values()) or len(x_sources) != arrays["X"].shape[1]:
            raise FormatError("the design's matrices disagree in their numbers of rows or columns: "
                              "the file was altered")
        if not np.isin(arrays["A"], np.arange(treatment.k)).all():
            raise FormatError("the design's treatment codes are not those of its levels: the file was altered")
        n_dropped = state["n_dropped"]
        if not isinstance(n_dropped, int) or isinstance(n_dropped, bool) or n_dropped < 0:
            raise FormatError(f"the design's n_dropped should be a count; found {n_dropped!r}")
        v_frame = _frame_from_state(state["v_frame"])
        spec = _rebuild_v_spec(formula, v_frame, arrays["V"], names["v_variables"])
        return cls(formula=formula, **arrays, **names, x_sources=x_sources, treatment=treatment,
                   n_dropped=n_dropped, v_frame=v_frame, _v_spec=spec, _x3_spec=None)


def _is_numeric(column: pd.Series) -> bool:
    """Whether a raw column is a number (booleans, strings and categoricals are levels)."""
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _levels_by_frequency(column: pd.Series) -> list:
    """The levels present in ``column``, most frequent first (ties in order of first appearance)."""
    present = column.dropna()
    order = list(pd.unique(present))
    counts = present.value_counts(sort=False)
    return sorted(order, key=lambda level: -int(counts[level]))  # sorted() is stable


def parse_formula(text: str, columns) -> Formula:
    """Split ``text`` into its roles, checking the structure.

    Parameters
    ----------
    text : str
        ``"y ~ a | v1 + v2"`` or ``"y ~ a | v1 + v2 | x3 + x4"``.
    columns : sequence of str
        The data's columns (``.`` in part 3 expands to those not used elsewhere).
    """
    if not isinstance(text, str):
        raise FormulaError(f"`formula` must be a string such as 'y ~ a | v1 + v2 | x3'; got {type(text).__name__}")
    formulaic, parser = _formulaic()
    columns = [str(c) for c in columns]
    context = {"__formulaic_variables_available__": columns, "__formulaic_variables_used_lhs__": []}
    try:
        parsed = formulaic.Formula(text, _parser=parser, _context=context)
    except Exception as exc:  # formulaic raises many types; all mean "cannot parse"
        raise _as_formula_error(exc, text) from None
    lhs = getattr(parsed, "lhs", None)
    rhs = getattr(parsed, "rhs", None)
    if lhs is None or rhs is None or len(lhs) == 0:
        raise FormulaError(
            f"formula {text!r} has no outcome: write it as 'y ~ a | v1 + v2 | x3' "
            "(outcome ~ treatment | conditioning variables | further confounders)"
        )
    if not isinstance(rhs, tuple) or len(rhs) not in (2, 3):
        n_parts = len(rhs) if isinstance(rhs, tuple) else 1
        raise FormulaError(
            f"formula {text!r} has {n_parts} right-hand part(s); ccme needs 2 or 3 parts separated by '|': "
            "'y ~ a | v1 + v2' or 'y ~ a | v1 + v2 | x3 + x4'"
        )
    treatment_terms = [str(t) for t in rhs[0]]
    if len(treatment_terms) != 1:
        raise FormulaError(
            f"the treatment part of {text!r} must be exactly one column; got {' + '.join(treatment_terms) or 'nothing'}"
        )
    if len(rhs[1]) == 0:
        raise FormulaError(f"formula {text!r} names no conditioning variables V (the second part)")
    pieces = [str(p) for p in rhs]
    return Formula(
        text=text,
        outcome=str(lhs),
        treatment=treatment_terms[0],
        conditioning=pieces[1],
        confounders=pieces[2] if len(rhs) == 3 else "",
        _parsed=parsed,
    )


def _materialize(formulaic, parser, spec_text, data, role, na_action="raise", all_levels=False):
    try:
        formula = formulaic.Formula(spec_text, _parser=parser) if isinstance(spec_text, str) else spec_text
        # A transform such as log(x) may give NaN or inf: the finiteness check after
        # building reports those rows by name (DataError, or dropped with a warning),
        # so numpy's own RuntimeWarning would only repeat it less clearly.
        with np.errstate(all="ignore"):
            if all_levels:  # one indicator per level of every categorical (see the module docstring)
                return formulaic.model_matrix(formula, data, na_action=na_action, ensure_full_rank=False)
            return formulaic.model_matrix(formula, data, na_action=na_action)
    except Exception as exc:
        raise FormulaError(
            f"cannot build the {role} from {str(spec_text)!r}: {_clean(exc)}{_shadow_hint(str(spec_text), data)}"
        ) from None


def _shadow_hint(text: str, data) -> str:
    """A hint when a column's name is used as a function or module in ``text`` (``log(x)`` with a column ``log``).

    formulaic looks names up in the data before the functions, so such a
    column shadows the function and the evaluation fails with a message about
    a pandas Series.
    """
    names = [str(c) for c in getattr(data, "columns", [])]
    shadowing = [c for c in names if c.isidentifier() and re.search(rf"(?<![\w.`]){re.escape(c)}\s*[(.]", text)]
    if not shadowing:
        return ""
    return (
        f" (the data's column(s) {shadowing} shadow the function or module of the same name in the formula; "
        "rename the column(s))"
    )


def _clean(exc: Exception) -> str:
    """formulaic's message without its terminal colour codes, first line only."""
    text = re.sub(r"\x1b\[[0-9;]*m|[⧛⧚]", "", str(exc))
    return text.strip().split("\n")[0]


def _required(matrix) -> set[str]:
    return set(matrix.model_spec.required_variables)


def _check_finite(data: pd.DataFrame, variables, na_action: str) -> tuple[pd.DataFrame, int]:
    """Raise (or drop rows) for NaN / inf in the columns the formula uses."""
    bad_rows = np.zeros(len(data), dtype=bool)
    problems = []
    for name in variables:
        column = data[name]
        missing = column.isna().to_numpy()
        if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
            values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            missing = missing | ~np.isfinite(values)
        if missing.any():
            problems.append(f"{name!r} ({int(missing.sum())})")
            bad_rows |= missing
    if not problems:
        return data, 0
    if na_action == "drop":
        warnings.warn(
            f"dropped {int(bad_rows.sum())} of {len(data)} rows with missing or infinite values in "
            + ", ".join(problems),
            DataWarning,
            stacklevel=4,
        )
        return data.loc[~bad_rows], int(bad_rows.sum())
    raise DataError(
        "missing or infinite values in the columns the formula uses: "
        + ", ".join(problems)
        + " rows; pass na_action='drop' to drop those rows"
    )


#: A text column with more levels than this fraction of the rows draws a DataWarning (from MANY_LEVELS_MIN_ROWS rows on).
MANY_LEVELS_FRACTION = 0.5
MANY_LEVELS_MIN_ROWS = 20
# Thousands separators seen in numbers written as text: comma, apostrophe, (narrow) no-break and thin spaces, blank.
_THOUSANDS = re.compile(r"[,'\u00a0\u202f\u2009 _]")


def _warn_many_levels(data: pd.DataFrame, variables) -> None:
    """Warn about text columns with nearly as many levels as rows.

    A column of strings is categorical: one indicator column per level.  With
    more levels than half the rows most levels hold a single unit, so nothing
    can be learned from them; such a column is almost always an identifier,
    free text, or numbers stored as text (what CSV readers produce from
    ``"1,234"`` unless told the thousands separator).  The threshold (more than
    ``MANY_LEVELS_FRACTION`` · n levels, n ≥ ``MANY_LEVELS_MIN_ROWS``) leaves
    genuine categoricals alone: they repeat their levels.
    """
    n = len(data)
    if n < MANY_LEVELS_MIN_ROWS:
        return
    for name in variables:
        column = data[name]
        if not (pd.api.types.is_object_dtype(column) or pd.api.types.is_string_dtype(column)):
            continue
        if isinstance(column.dtype, pd.CategoricalDtype):  # a categorical made on purpose
            continue
        n_levels = int(column.nunique(dropna=True))
        if n_levels <= MANY_LEVELS_FRACTION * n:
            continue
        present = column.dropna().astype(str)
        as_numbers = pd.to_numeric(present.str.replace(_THOUSANDS, "", regex=True), errors="coerce")
        if len(present) and as_numbers.notna().mean() >= 0.9:
            example = present.iloc[int(np.argmax(present.str.len().to_numpy()))]
            cause = (
                f"its values look like numbers stored as text (e.g. {example!r}), as a CSV reader gives them when "
                "they have thousands separators: read the file with pandas.read_csv(..., thousands=',') "
                "(and decimal=',' for decimal commas) or convert the column with pd.to_numeric"
            )
            # A few entries that are not numbers at all turn a numeric column into text too (a code for missing).
            words = present[as_numbers.isna().to_numpy()].unique()
            if len(words):
                cause += (
                    f"; {int(as_numbers.isna().sum())} value(s) do not read as numbers "
                    f"({', '.join(repr(w) for w in words[:3])}{', …' if len(words) > 3 else ''}): if they code "
                    "missing values, give them to pandas.read_csv(..., na_values=[...]) or convert with "
                    "pd.to_numeric(..., errors='coerce'), and pass na_action='drop'"
                )
        else:
            cause = (
                "it looks like an identifier or free text: leave it out of the formula, or convert it to numbers "
                "if it is a quantity"
            )
        warnings.warn(
            f"column {name!r} is text with {n_levels} distinct levels in {n} rows, so it is encoded as a "
            f"categorical with {n_levels} indicator columns; {cause}",
            DataWarning,
            stacklevel=4,
        )


#: Encoded values beyond this magnitude (or below its reciprocal, unless zero) are an error: see _check_magnitude.
MAX_MAGNITUDE = 1e150


def _check_magnitude(M: np.ndarray, names, role: str) -> None:
    """Reject columns whose squares leave float64's range.

    ccme standardises columns (the median heuristic, the logistic propensity),
    computes variances and squared distances: all square the values.  Beyond
    ``MAX_MAGNITUDE`` (1e150) squares of differences and their sums over the
    columns could overflow to inf, and the NaN that follows would surface deep
    inside (scikit-learn's "Input X contains NaN"); below 1e-150 the squares
    underflow to zero and a varying column would pass for a constant.  The
    estimates are equivariant to a column's scale, so rescaling loses nothing.
    """
    if M.size == 0:
        return
    top = np.max(np.abs(M), axis=0)
    spread = np.ptp(M, axis=0)
    problems = []
    for j, name in enumerate(names):
        if top[j] > MAX_MAGNITUDE:
            problems.append(f"{name!r} (values up to {top[j]:.3g} in magnitude)")
        elif 0 < spread[j] and top[j] < 1.0 / MAX_MAGNITUDE:
            problems.append(f"{name!r} (values no larger than {top[j]:.3g} in magnitude)")
    if problems:
        raise DataError(
            f"the {role} column(s) {', '.join(problems)} are outside the range ccme can square without overflow "
            f"or underflow ({1.0 / MAX_MAGNITUDE:g} to {MAX_MAGNITUDE:g} in magnitude, after the formula's "
            "transforms); rescale them (e.g. divide by a power of ten, or take logs)"
        )


#: At most this many arms: every arm needs its own outcome model and enough units of its own.
MAX_ARMS = 50


def _treatment_column(data: pd.DataFrame, name: str, treated, reference=None) -> tuple[np.ndarray, Treatment]:
    """The arm codes of the treatment column and its :class:`Treatment` (two levels: ``treated``; more: ``reference``)."""
    if name not in data.columns:
        raise FormulaError(f"the treatment {name!r} is not a column of the data (write the column's name itself)")
    column = data[name]
    levels = pd.unique(column.dropna())
    if len(levels) < 2:
        shown = ", ".join(repr(v) for v in levels[:6])
        raise DataError(f"the treatment {name!r} must have at least two levels; it has {len(levels)}: {shown}")
    if len(levels) > MAX_ARMS:
        raise DataError(
            f"the treatment {name!r} has {len(levels)} distinct values: a treatment's levels are its arms (at most "
            f"{MAX_ARMS}); a continuous dose is not supported: cut it into levels (pandas.cut)")
    if len(levels) == 2:
        return _binary_treatment(column, name, levels, treated, reference)
    if treated is not None:
        raise ParameterError(
            f"`treated` picks the treated level of a binary treatment; {name!r} has {len(levels)} levels: "
            "use reference=<level> to choose the level the arms are compared with")
    if isinstance(column.dtype, pd.CategoricalDtype):
        present = set(levels)
        ordered = [c for c in column.cat.categories if c in present]
    else:
        try:
            ordered = sorted(levels)
        except TypeError:
            raise DataError(f"the treatment {name!r} mixes levels of different types ({', '.join(map(repr, levels[:6]))}); "
                            "make it one type (e.g. strings)") from None
    labels = tuple(v.item() if hasattr(v, "item") else v for v in ordered)
    if reference is None:
        reference = labels[0]
    matches = [lv for lv in labels if _same_level(reference, lv)]
    if not matches:
        raise ParameterError(f"`reference`={reference!r} is not a level of {name!r}; its levels are "
                             f"{', '.join(map(repr, labels))}")
    codes = pd.Categorical(column, categories=list(ordered)).codes.astype(np.int8)
    return codes, Treatment(column=name, levels=labels, reference=matches[0])


def _binary_treatment(column, name, levels, treated, reference):
    """A two-level treatment: 1 for the treated level, 0 for the control (``treated=``, or the other than ``reference``)."""
    plain = [lv.item() if hasattr(lv, "item") else lv for lv in levels]
    if reference is not None:
        others = [lv for lv in plain if not _same_level(reference, lv)]
        if len(others) != 1:
            raise ParameterError(f"`reference`={reference!r} is not a level of {name!r}; its levels are "
                                 f"{plain[0]!r} and {plain[1]!r}")
        if treated is not None and not _same_level(treated, others[0]):
            raise ParameterError(f"`treated`={treated!r} and `reference`={reference!r} must be the two levels of "
                                 f"{name!r}")
        treated = others[0]
    if treated is None:
        if pd.api.types.is_bool_dtype(column):
            treated = True
        elif pd.api.types.is_numeric_dtype(column) and set(np.asarray(levels, dtype=float)) == {0.0, 1.0}:
            treated = levels[np.asarray(levels, dtype=float) == 1.0][0]
        elif isinstance(column.dtype, pd.CategoricalDtype):
            present = [c for c in column.cat.categories if c in set(levels)]
            treated = present[-1]
        else:
            raise DataError(
                f"the treatment {name!r} has levels {levels[0]!r} and {levels[1]!r}; "
                "say which one is the treatment with treated=<level> (or the control with reference=<level>)"
            )
    matches = [lv for lv in levels if lv == treated]
    if not matches:
        raise DataError(
            f"`treated`={treated!r} is not a level of {name!r}; its levels are {levels[0]!r} and {levels[1]!r}"
        )
    control = [lv for lv in levels if not lv == treated][0]
    a = (column == matches[0]).to_numpy(dtype=np.int8)
    level = matches[0].item() if hasattr(matches[0], "item") else matches[0]
    control = control.item() if hasattr(control, "item") else control
    return a, Treatment(column=name, levels=(control, level), reference=control)


def build_design(formula: Formula, data, *, treated=None, reference=None, na_action: str = "raise",
                 exclude=()) -> Design:
    """Evaluate a parsed formula on ``data`` (which is never modified).

    ``exclude`` names columns that ``.`` (every column not used elsewhere)
    leaves out, such as the sampling-weights column of ``fit(weights=...)``.
    """
    if not isinstance(data, pd.DataFrame):
        if isinstance(data, dict):
            data = pd.DataFrame(data)
        else:
            raise DataError(f"`data` must be a pandas DataFrame (or a dict of columns); got {type(data).__name__}")
    if na_action not in ("raise", "drop"):
        raise DataError(f"`na_action` must be 'raise' or 'drop'; got {na_action!r}")
    if len(data) == 0:
        raise DataError("`data` has no rows")
    formulaic, parser = _formulaic()
    columns = [str(c) for c in data.columns]
    if len(set(columns)) != len(columns):
        raise DataError("`data` has duplicated column names")
    frame = _plain_strings(data.copy(deep=False))  # shallow: we never write into the caller's arrays
    frame.columns = columns

    # The raw columns each part reads, so that `.` in part 3 can mean "every
    # column not used elsewhere".
    if formula.treatment not in frame.columns:
        raise FormulaError(
            f"the treatment {formula.treatment!r} is not a column of the data (write the column's name itself)"
        )
    outcome_part, conditioning_part = formula._parsed.lhs, formula._parsed.rhs[1]
    y_vars = _probe_variables(formulaic, parser, outcome_part, frame, "outcome")
    v_vars = _probe_variables(formulaic, parser, conditioning_part, frame, "conditioning variables V")
    used = y_vars | v_vars | {formula.treatment}
    x3_vars: set[str] = set()
    x3_formula = None
    if formula.confounders:
        # Parse the whole text again, now telling `.` which columns are left.
        rest = [c for c in columns if c not in used and c not in set(map(str, exclude))]
        context = {"__formulaic_variables_available__": rest, "__formulaic_variables_used_lhs__": []}
        try:
            x3_formula = formulaic.Formula(formula.text, _parser=parser, _context=context).rhs[2]
        except Exception as exc:
            raise _as_formula_error(exc, formula.text) from None
        if len(x3_formula) > 0:
            x3_vars = _probe_variables(formulaic, parser, x3_formula, frame, "further confounders")
        else:
            x3_formula = None
    if formula.treatment in x3_vars:
        raise FormulaError(f"the treatment {formula.treatment!r} cannot also be a confounder")

    if formula.treatment in v_vars:
        raise FormulaError(f"the treatment {formula.treatment!r} cannot also be a conditioning variable")
    overlap = y_vars & (v_vars | x3_vars | {formula.treatment})
    if overlap:
        raise FormulaError(f"the outcome's column(s) {sorted(overlap)} also appear on the right-hand side")

    all_vars = [c for c in columns if c in (y_vars | v_vars | x3_vars | {formula.treatment})]
    # The positions of the rows kept, for what is aligned to `data`'s rows (fit's sampling weights): the
    # frame is indexed by position while rows are dropped, then given back its own index.
    labels, frame.index = frame.index, pd.RangeIndex(len(frame))
    frame, n_dropped = _check_finite(frame, all_vars, na_action)
    data_rows = frame.index.to_numpy(dtype=np.intp)
    frame.index = labels[data_rows]
    if len(frame) == 0:
        raise DataError("no rows are left after dropping missing values")

    a, treatment = _treatment_column(frame, formula.treatment, treated, reference)
    # Before encoding: a text column with a level per row would become n indicator columns.
    _warn_many_levels(frame, [c for c in all_vars if c != formula.treatment])
    # Raw columns were checked above; what the transforms make of them
    # (np.log(x) at x <= 0) is checked by _finite_rows below, with na_action.
    y_mm = _materialize(formulaic, parser, outcome_part, frame, "outcome", na_action="ignore")
    v_mm = _materialize(formulaic, parser, conditioning_part, frame, "conditioning variables V", na_action="ignore",
                        all_levels=True)
    Y = _numeric(y_mm, "outcome")
    V, origin, x_kinds, x_names = _kernel_coding(_numeric(v_mm, "conditioning variables V"), v_mm.model_spec, frame)
    v_names = tuple(x_names)
    x_sources = [_column_variables(v_mm.model_spec, columns)[i] for i in origin]
    X = V
    x3_spec = None
    if x3_formula is not None:
        x3_mm = _materialize(formulaic, parser, x3_formula, frame, "further confounders", na_action="ignore",
                             all_levels=True)
        X3, origin3, kinds3, names3 = _kernel_coding(_numeric(x3_mm, "further confounders"), x3_mm.model_spec, frame)
        x3_sources = _column_variables(x3_mm.model_spec, columns)
        keep = [i for i, c in enumerate(names3) if c not in set(x_names)]
        if keep:
            X = np.hstack([V, X3[:, keep]])
            x_names += [names3[i] for i in keep]
            x_sources += [x3_sources[origin3[i]] for i in keep]
            x_kinds += [kinds3[i] for i in keep]
        x3_spec = x3_mm.model_spec
    keep_rows, dropped = _finite_rows(Y, X, tuple(str(c) for c in y_mm.columns) + tuple(x_names), na_action)
    if dropped:
        if not keep_rows.any():
            raise DataError("no rows are left after dropping the rows whose transformed values are missing or infinite")
        Y, V, X, a = Y[keep_rows], V[keep_rows], X[keep_rows], a[keep_rows]
        frame = frame.iloc[np.flatnonzero(keep_rows)]
        data_rows = data_rows[keep_rows]
        n_dropped += dropped
    _check_magnitude(Y, tuple(str(c) for c in y_mm.columns), "outcome")
    _check_magnitude(X, tuple(x_names), "covariates")
    return Design(
        formula=formula,
        Y=Y,
        A=a,
        V=V,
        X=np.ascontiguousarray(X),
        y_names=tuple(str(c) for c in y_mm.columns),
        v_names=tuple(str(c) for c in v_names),
        x_names=tuple(str(c) for c in x_names),
        v_variables=tuple(c for c in columns if c in v_vars),
        x_variables=tuple(c for c in columns if c in (v_vars | x3_vars)),
        x_sources=tuple(x_sources),
        treatment=treatment,
        n_dropped=n_dropped,
        v_frame=frame[[c for c in columns if c in v_vars]],
        _v_spec=v_mm.model_spec,
        _x3_spec=x3_spec,
        x_kinds=tuple(x_kinds),
        data_rows=data_rows,
    )


def _probe_variables(formulaic, parser, part, frame, role) -> set[str]:
    """The raw columns a formula part reads (materialising it on a few rows)."""
    head = frame.iloc[: min(len(frame), 50)]
    matrix = _materialize(formulaic, parser, part, head, role, na_action="ignore")
    return _term_columns(part, frame.columns, _required(matrix))


def _term_columns(terms, columns, reported) -> set[str]:
    """The data columns that ``terms`` read, given the variables formulaic ``reported`` for them.

    formulaic (1.2) mangles quoted names that contain dots when it lists the
    variables a term reads: ``I(`x.1` ** 2)`` reports none, ```z ._``` reports
    ``'z '``, ```a.b.c``` reports ``'a'``.  A name missed there would be left
    out of ``newdata``'s encoding, and a spurious one would clash with another
    role, so the names are read off the terms' factors: a looked-up factor is
    its column; in an expression, the names inside backticks or ``Q('...')``,
    and the reported names that appear bare outside them.
    """
    columns = set(columns)
    found = set()
    for term in terms:
        for factor in getattr(term, "factors", ()):
            expr = str(getattr(factor, "expr", ""))
            if expr in columns:
                found.add(expr)
                continue
            found |= {c for c in columns if f"`{c}`" in expr or f"Q('{c}')" in expr or f'Q("{c}")' in expr}
            bare = re.sub(r"`[^`]*`|Q\((['\"]).*?\1\)", " ", expr)
            found |= {v for v in reported if v in columns and re.search(rf"(?<![\w.]){re.escape(v)}(?!\w)", bare)}
    return found


def newdata_frame(newdata):
    """``newdata`` as a DataFrame: a dict of columns becomes one (a dict of scalars: one row, as statsmodels'
    ``predict(exog=dict)`` reads it); anything else is returned as it is, for the caller to check."""
    if isinstance(newdata, dict):
        if newdata and all(np.ndim(value) == 0 for value in newdata.values()):
            return pd.DataFrame({name: [value] for name, value in newdata.items()})
        return pd.DataFrame(newdata)
    return newdata


def _plain_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns of pandas' nullable ``"string"`` dtype as plain object strings (NA as NaN), a new frame if any.

    formulaic treats object and pandas 3's default ``str`` columns as
    categorical, but not the nullable ``StringDtype`` with ``pd.NA``
    (``dtype="string"``), which it would try to read as numbers.
    """
    nullable = [c for c, dtype in frame.dtypes.items()
                if isinstance(dtype, pd.StringDtype) and dtype.na_value is pd.NA]
    if not nullable:
        return frame
    frame = frame.copy(deep=False)
    for c in nullable:
        column = frame[c]
        frame[c] = column.astype(object).where(column.notna(), np.nan)
    return frame


def _numeric(matrix, role) -> np.ndarray:
    try:
        values = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"the {role} could not be converted to numbers") from None
    if values.ndim == 1:
        values = values[:, None]
    return np.ascontiguousarray(values)


def _encode_with_spec(spec, newdata, variables, name) -> np.ndarray:
    newdata = newdata_frame(newdata)
    if not isinstance(newdata, pd.DataFrame):
        raise DataError(f"`{name}` must be a pandas DataFrame holding the columns {list(variables)}")
    missing = [v for v in variables if v not in newdata.columns]
    if missing:
        raise DataError(f"`{name}` lacks the column(s) {missing} that V is built from (it needs {list(variables)})")
    frame = _plain_strings(newdata[list(variables)])
    _check_finite(frame, variables, "raise")
    try:
        with np.errstate(all="ignore"):  # NaN from transforms: checked below, by name
            matrix = spec.get_model_matrix(frame, na_action="ignore")
    except Exception as exc:
        raise DataError(f"cannot encode `{name}` like the training data: {_clean(exc)}") from None
    values = _numeric(matrix, f"`{name}`")
    bad = ~np.isfinite(values)
    if bad.any():
        columns = [str(c) for c, b in zip(matrix.columns, bad.any(axis=0)) if b]
        raise DataError(
            f"`{name}` gives missing or infinite values in {columns} ({int(bad.any(axis=1).sum())} rows) "
            "after the formula's transforms"
        )
    return values


def _finite_rows(Y: np.ndarray, X: np.ndarray, names, na_action: str) -> tuple[np.ndarray, int]:
    """Rows whose encoded values are all finite; raise (or warn and drop) otherwise.

    The raw columns were checked before; this catches what a transform makes
    of finite data (``np.log(x)`` at x ≤ 0, ``I(1/x)`` at 0), which would
    otherwise reach the kernels as NaN.
    """
    bad = ~np.isfinite(np.hstack([Y, X]))
    if not bad.any():
        return np.ones(len(Y), dtype=bool), 0
    rows = bad.any(axis=1)
    problems = ", ".join(f"{name!r} ({int(count)} rows)" for name, count in zip(names, bad.sum(axis=0)) if count)
    if na_action == "drop":
        warnings.warn(
            f"dropped {int(rows.sum())} of {len(rows)} rows where the formula's transforms give missing or "
            f"infinite values: {problems}",
            DataWarning,
            stacklevel=4,
        )
        return ~rows, int(rows.sum())
    raise DataError(
        f"the formula's transforms give missing or infinite values in {problems}; "
        "change the transform or pass na_action='drop' to drop those rows"
    )


def _kernel_coding(values: np.ndarray, spec, frame: pd.DataFrame):
    """formulaic's columns recoded for the kernels, each classified (see the module docstring).

    ``values`` are formulaic's columns from ``spec`` (every categorical with all
    its levels); ``frame`` holds the *training* data's raw columns, whose dtypes
    say which factors are ordered and which columns boolean (so that ``newdata``
    is coded exactly as the training data were, whatever its own dtypes).  The
    indicator columns of a bare ordered pandas categorical column with c ≥ 2
    levels become the cumulative indicators 1{x ≥ level_k}, k = 2..c (sums of
    0/1 values, exact).

    Returns
    -------
    values : ndarray (n, d')
    origin : list of int
        For each returned column, the formulaic column it comes from.
    kinds : list of str
        "numeric", "categorical", "ordered" or "binary" per returned column.
    names : list of str
    """
    names = [str(c) for c in spec.column_names]
    kinds = ["numeric"] * len(names)
    ordered_blocks = {}  # first column of an ordered factor's block -> (its columns, its levels, its name)
    for term, indices in spec.term_indices.items():
        factors = list(getattr(term, "factors", ()))
        if len(factors) != 1 or not indices:
            continue
        expr = str(factors[0].expr)
        state = spec.encoder_state.get(expr)
        kind = str(getattr(state[0], "value", state[0])) if state else ""
        lookup = str(factors[0].eval_method.value) == "lookup" and expr in frame.columns
        column = frame[expr] if lookup else None
        if kind == "categorical":
            levels = list(state[1].get("categories", ())) if isinstance(state[1], dict) else []
            ordered = (column is not None and isinstance(column.dtype, pd.CategoricalDtype) and bool(column.cat.ordered)
                       and len(levels) == len(indices) >= 2)
            for i in indices:
                kinds[i] = "ordered" if ordered else "categorical"
            if ordered:
                ordered_blocks[indices[0]] = (list(indices), levels, expr)
        elif column is not None and len(indices) == 1 and pd.api.types.is_bool_dtype(column):
            kinds[indices[0]] = "binary"
    if not ordered_blocks:
        return values, list(range(len(names))), kinds, names
    out, origin, out_kinds, out_names = [], [], [], []
    skip = set()
    for j in range(len(names)):
        if j in skip:
            continue
        if j in ordered_blocks:
            block, levels, expr = ordered_blocks[j]
            skip.update(block)
            for k in range(1, len(block)):
                out.append(values[:, block[k:]].sum(axis=1))
                origin.append(block[k])
                out_kinds.append("ordered")
                out_names.append(f"{expr}[>={levels[k]}]")
            continue
        out.append(values[:, j])
        origin.append(j)
        out_kinds.append(kinds[j])
        out_names.append(names[j])
    coded = np.ascontiguousarray(np.column_stack(out)) if out else np.zeros((len(values), 0))
    return coded, origin, out_kinds, out_names


def _column_variables(spec, columns) -> list[frozenset]:
    """For each encoded column, the raw data columns it is computed from."""
    sources = [frozenset()] * len(spec.column_names)
    known = set(columns)
    for term, indices in spec.term_indices.items():
        variables = frozenset(_term_columns([term], known, spec.term_variables[term]))
        for i in indices:
            sources[i] = variables
    return sources


def _columns_of(design: Design, variables) -> np.ndarray:
    """Indices of X's columns computed only from the raw columns ``variables``."""
    if isinstance(variables, str):
        variables = [v.strip().strip("`") for v in variables.split("+")]
    variables = [str(v) for v in variables]
    unknown = [v for v in variables if v not in design.x_variables]
    if unknown:
        raise DataError(
            f"{unknown} are not among the covariates X = {list(design.x_variables)}; "
            "a nuisance model can only use a subset of X"
        )
    chosen = set(variables)
    indices = [i for i, source in enumerate(design.x_sources) if source and source <= chosen]
    if not indices:
        raise DataError(f"no column of X is computed from {variables} alone")
    return np.asarray(indices, dtype=np.intp)


# ---------------------------------------------------------------------------
# saved designs: V's raw columns as a state, and V's encoder rebuilt safely
# ---------------------------------------------------------------------------
#: pandas' nullable dtypes a column of V may have (stored as plain arrays: V holds no missing values).
_NULLABLE = frozenset({"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32", "Float64",
                       "boolean"})
_VALUE_KINDS = ("array", "nullable", "text", "objects")


def _state_strings(values, what: str) -> tuple:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise FormatError(f"the design's {what} should be a list of str; found {str(values)[:60]}")
    return tuple(values)


def _state_array(value, what: str, ndim: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != ndim:
        found = f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
        raise FormatError(f"the design's {what} should be a {ndim}-d array; found {found}")
    return value


def _frame_to_state(frame: pd.DataFrame) -> dict:
    """V's raw columns as a state: ``{"n_rows": n, "columns": [entry, ...]}``, the row labels left out.

    Each entry has the column's ``name`` and a ``kind``:

    - ``"categorical"``: ``codes`` (array), ``categories`` (an entry of the
      kinds below, without a name) and ``ordered``;
    - ``"array"``: a NumPy bool or numeric column, ``values`` (array);
    - ``"nullable"``: a pandas nullable column (``Int64``, ``boolean``, ...),
      ``dtype`` and ``values`` as a NumPy array (V has no missing values);
    - ``"text"``: a pandas string column, ``dtype`` (``"str"`` or
      ``"string"``), ``storage`` and ``values`` (a list of str);
    - ``"objects"``: an object column of str, bool and numbers, ``values``
      (a list).

    Raises
    ------
    ccme.errors.FormatError
        A column of another dtype (dates, intervals, ...), naming it.
    """
    columns = []
    for name in frame.columns:
        column = frame[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            entry = {"kind": "categorical", "codes": column.cat.codes.to_numpy(),
                     "categories": _values_to_state(column.cat.categories, str(name)),
                     "ordered": bool(column.cat.ordered)}
        else:
            entry = _values_to_state(column, str(name))
        columns.append({"name": str(name), **entry})
    return {"n_rows": len(frame), "columns": columns}


def _values_to_state(values, name: str) -> dict:
    """A column's (or a categorical's categories') values as a state entry; see :func:`_frame_to_state`."""
    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "biufc":
        return {"kind": "array", "values": values.to_numpy()}
    complete = not values.isna().any()
    if str(dtype) in _NULLABLE and complete:
        return {"kind": "nullable", "dtype": str(dtype), "values": values.to_numpy(dtype=dtype.numpy_dtype)}
    if isinstance(dtype, pd.StringDtype) and complete:
        return {"kind": "text", "dtype": str(dtype), "storage": str(dtype.storage), "values": [str(v) for v in values]}
    if dtype == object:
        items = list(values)
        if all(isinstance(v, (str, int, float, np.bool_, np.number)) for v in items):
            return {"kind": "objects", "values": items}
    raise FormatError(
        f"cannot save the design: V's column {name!r} has dtype {dtype}, which ccme cannot store (it stores numbers, "
        "booleans, strings and categoricals of those)"
    )


def _frame_from_state(state) -> pd.DataFrame:
    """Inverse of :func:`_frame_to_state` (with a RangeIndex)."""
    if not isinstance(state, dict) or set(state) != {"n_rows", "columns"} or not isinstance(state["columns"], list):
        raise FormatError("the design's v_frame should be a dict of n_rows and columns")
    n_rows, data = state["n_rows"], {}
    for entry in state["columns"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or entry["name"] in data:
            raise FormatError("a column of the design's v_frame has no name, or a repeated one")
        name = entry["name"]
        if entry.get("kind") == "categorical":
            if set(entry) != {"name", "kind", "codes", "categories", "ordered"}:
                raise FormatError(f"V's categorical column {name!r} has the fields {sorted(entry)}")
            codes = entry["codes"]
            values, dtype = _values_from_state(entry["categories"], name)
            if not isinstance(codes, np.ndarray) or codes.ndim != 1 or codes.dtype.kind != "i":
                raise FormatError(f"V's categorical column {name!r} has no integer codes")
            try:
                column = pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(values, dtype=dtype),
                                                             ordered=bool(entry["ordered"])))
            except (ValueError, TypeError) as exc:
                raise FormatError(f"V's categorical column {name!r} cannot be rebuilt: {exc}") from None
        else:
            values, dtype = _values_from_state({key: v for key, v in entry.items() if key != "name"}, name)
            column = pd.Series(values, dtype=dtype)
        if len(column) != n_rows:
            raise FormatError(f"V's column {name!r} has {len(column)} rows; the v_frame has {n_rows!r}")
        data[name] = column
    return pd.DataFrame(data, index=pd.RangeIndex(n_rows) if isinstance(n_rows, int) else None)


def _values_from_state(entry, name: str):
    """Inverse of :func:`_values_to_state`: (values, dtype) for ``pd.Series`` or ``pd.Index``."""
    kind = entry.get("kind") if isinstance(entry, dict) else None
    fields = {"array": {"kind", "values"}, "nullable": {"kind", "dtype", "values"},
              "text": {"kind", "dtype", "storage", "values"}, "objects": {"kind", "values"}}
    if kind not in fields or set(entry) != fields[kind]:
        raise FormatError(f"V's column {name!r} is stored as {str(entry)[:80]}, which ccme does not read")
    values = entry["values"]
    if kind in ("array", "nullable"):
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.dtype.kind not in "biufc":
            raise FormatError(f"V's column {name!r} should hold a 1-d numeric array")
        if kind == "array":
            return values, values.dtype
        if entry["dtype"] not in _NULLABLE:
            raise FormatError(f"V's column {name!r} has the dtype {str(entry['dtype'])[:40]!r}, "
                              "which ccme does not read")
        return pd.array(values, dtype=entry["dtype"]), entry["dtype"]
    if not isinstance(values, list):
        raise FormatError(f"V's column {name!r} should hold a list of values")
    if kind == "text":
        if entry["dtype"] not in ("str", "string") or entry["storage"] not in ("python", "pyarrow"):
            raise FormatError(f"V's column {name!r} has the dtype {str(entry['dtype'])[:40]!r}, "
                              "which ccme does not read")
        if not all(isinstance(v, str) for v in values):
            raise FormatError(f"V's text column {name!r} holds values that are not str")
        storage = entry["storage"]
        if storage == "pyarrow":
            try:
                import pyarrow  # noqa: F401
            except ImportError:  # the values are the same in either storage
                storage = "python"
        dtype = pd.StringDtype(storage, na_value=np.nan) if entry["dtype"] == "str" else pd.StringDtype(storage)
        return pd.array(values, dtype=dtype), dtype
    if not all(isinstance(v, (str, int, float, np.bool_, np.number)) for v in values):
        raise FormatError(f"V's column {name!r} holds values that are not str, bool or numbers")
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array, object


#: numpy functions a saved formula may call (formulaic's own transforms are allowed too).
_NUMPY_FUNCTIONS = frozenset({
    "abs", "absolute", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "cbrt", "ceil", "clip",
    "cos", "cosh", "exp", "exp2", "expm1", "fabs", "floor", "log", "log10", "log1p", "log2", "maximum", "minimum",
    "power", "round", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "where",
})
_CONTRASTS = frozenset({"treatment", "sum", "helmert", "diff", "poly", "custom"})


def _check_expression(expr: str, columns) -> None:
    """Refuse a formula factor that is anything but columns, formulaic's transforms, numpy math and arithmetic.

    Run on every Python factor of a stored formula before formulaic evaluates
    it: a file can be edited (and its checksums recomputed), and formulaic
    would evaluate ``I(open('x', 'w'))`` as Python.
    """
    import ast

    from formulaic.transforms import TRANSFORMS

    safe_nodes = (
        ast.Expression, ast.Call, ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare,
        ast.BoolOp, ast.List, ast.Tuple, ast.keyword, ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
    )
    quoted = {}

    def _placeholder(match):
        quoted[f"_ccme_quoted_{len(quoted)}"] = match.group(0)
        return f"_ccme_quoted_{len(quoted) - 1}"

    # Backticked names may hold any characters: replace them by identifiers before parsing.
    text = re.sub(r"`[^`]*`", _placeholder, expr)
    allowed_names = set(columns) | set(quoted) | (set(TRANSFORMS) - {"np"})
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise FormatError(f"the formula term {expr!r} is not an expression") from None
    for node in ast.walk(tree):
        ok = isinstance(node, safe_nodes)
        if isinstance(node, ast.Name):
            ok = node.id in allowed_names or node.id in ("np", "numpy")
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            ok = ((base in ("np", "numpy") and node.attr in _NUMPY_FUNCTIONS)
                  or (base == "contr" and node.attr in _CONTRASTS))
        elif isinstance(node, ast.Constant):
            ok = isinstance(node.value, (int, float, str, bool, type(None)))
        if not ok:
            raise FormatError(
                f"the formula term {expr!r} uses {ast.dump(node)[:60]}, which a saved result may not evaluate "
                "(only columns, formulaic's transforms, numpy math functions and arithmetic): "
                "the file may have been tampered with"
            )
    # numpy itself may only be the base of one of the functions above, never a value (I(np)).
    attribute_bases = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("np", "numpy") and id(node) not in attribute_bases:
            raise FormatError(f"the formula term {expr!r} uses numpy itself, not one of its functions, which a saved "
                              "result may not evaluate: the file may have been tampered with")


def _rebuild_v_spec(formula: Formula, frame: pd.DataFrame, V: np.ndarray, v_variables) -> object:
    """formulaic's encoder of V, rebuilt from the formula on V's stored raw columns; it must reproduce ``V``."""
    conditioning = formula._parsed.rhs[1]
    for term in conditioning:
        for factor in term.factors:
            if str(factor.eval_method.value) == "python":
                _check_expression(str(factor.expr), v_variables)
    if list(frame.columns) != list(v_variables) or len(frame) != V.shape[0]:
        raise FormatError(f"the stored raw columns of V are not {list(v_variables)} over {V.shape[0]} rows: "
                          "the file was altered")
    formulaic, _ = _formulaic()
    try:
        # context={}: the formula sees the columns and formulaic's transforms, none of the caller's names.
        matrix = formulaic.model_matrix(conditioning, frame, na_action="raise", context={}, ensure_full_rank=False)
    except Exception as exc:  # formulaic raises many types; all mean "cannot rebuild"
        raise FormatError(f"cannot rebuild the encoder of V from {formula.conditioning!r}: {_clean(exc)}") from None
    values = np.asarray(matrix, dtype=np.float64)
    values = _kernel_coding(values[:, None] if values.ndim == 1 else values, matrix.model_spec, frame)[0]
    if values.shape != V.shape or not np.array_equal(values, V, equal_nan=True):
        raise FormatError(
            f"re-encoding the stored raw columns of V with {formula.conditioning!r} does not give the stored V "
            "(the file was altered, or the formula's transforms depend on rows dropped at fit time)"
        )
    return matrix.model_spec
