"""Fuzzing the formula front end: hostile strings and column names give a parse or a ccme error, nothing else.

The contract (``ccme.formula``): ``parse_formula`` returns a ``Formula`` or
raises :class:`ccme.FormulaError`; ``build_design`` returns a ``Design`` or
raises ``FormulaError`` (the formula cannot be evaluated on the data) or
:class:`ccme.DataError` (the data cannot be used: a treatment that is not
binary, a transform that gives NaN).  formulaic raises many exception types
(SyntaxError, NameError, TypeError, its own FormulaSyntaxError, ...); each must
arrive as one of these with a message.

Bugs these tests found (fixed in ``src/ccme/formula.py``): quoted names with
dots or trailing punctuation (```x.1```, ```z ._```) were lost from the
variables a part reads, so the fit worked but every functional at
``newdata`` failed; transforms that produce NaN/inf from finite data
(``np.log(x)`` at x ≤ 0) reached scikit-learn as a ValueError; a column that
shadows a function (``log``, ``C``, ``np``) gave formulaic's message about a
pandas Series, now with a hint naming the column.
"""

import keyword
import string
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import ccme
from ccme import DataError, FormulaError
from ccme.formula import build_design, parse_formula

# Names that shadow functions, modules and formula syntax, Python keywords, and
# names that need quoting.
HOSTILE_NAMES = [
    "np", "C", "log", "exp", "I", "Q", "poly", "center", "scale", "bs", "abs", "len", "sum", "T", "pd", "numpy",
    "x y", " x", "x ", "x.1", "x-1", "x+1", "a|b", "y~", "1x", "é", "日本", "°C", "∂x", "x\ty", "x'", 'x"',
    "{x}", "(x)", "__class__", "__import__", "np.log", "data",
] + [k for k in keyword.kwlist if k not in ("True", "False", "None")][:12] + ["True", "False", "None"]

TOKENS = [
    "~", "|", "+", "-", "*", ":", "**", "(", ")", "`", ".", "0", "1", "-1", " ", ",", "=", "'", '"', "[", "]",
    "{", "}", "@", "%", "/", "\\", "np.log(", "C(", "I(", "exp(", "log(", "Q('", "lambda", "import", "y", "a",
    "v", "w", "x y", "é", "\n", "#",
]


def _frame(names, n=24, seed=0):
    rng = np.random.default_rng(seed)
    data = pd.DataFrame({c: rng.normal(size=n) for c in names})
    data[names[1]] = np.tile([0, 1], n // 2)
    return data


FIXED = _frame(["y", "a", "v", "w", "x y", "é", "np", "log"])


def _quote(name: str) -> str:
    return f"`{name}`"


@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=16).map("".join))
def test_random_token_strings_parse_or_formula_error(text):
    """Random token soup: a ``Formula`` or a ``FormulaError``; if it parses, the design builds or says why."""
    try:
        formula = parse_formula(text, FIXED.columns)
    except FormulaError as exc:
        assert str(exc)
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            design = build_design(formula, FIXED)
    except (FormulaError, DataError) as exc:
        assert str(exc)
        return
    assert design.n <= len(FIXED) and np.isfinite(design.X).all() and np.isfinite(design.Y).all()


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_arbitrary_unicode_strings_parse_or_formula_error(text):
    try:
        parse_formula(text, FIXED.columns)
    except FormulaError as exc:
        assert str(exc)


name_strategy = st.one_of(
    st.sampled_from(HOSTILE_NAMES),
    st.text(alphabet=string.ascii_letters + string.digits + " ._-+é日°()'", min_size=1, max_size=6),
)


@given(st.lists(name_strategy, min_size=4, max_size=5, unique=True), st.integers(0, 3))
def test_hostile_column_names_quoted_fit(names, shape):
    """Backtick-quoted hostile names: the fit works (and its functionals), or a ccme error says why.

    Names that differ only by surrounding spaces are skipped: pandas keeps both
    but a formula cannot tell them apart.
    """
    assume(len({n.strip() for n in names}) == len(names))
    data = _frame(names)
    y, a, v = names[0], names[1], names[2]
    rest = names[3:]
    parts = [_quote(y), "~", _quote(a), "|", _quote(v)]
    if shape == 1:
        parts[-1] = f"{_quote(v)} + np.log(1 + {_quote(v)}**2)"
    if shape >= 2:
        parts += ["|", " + ".join(_quote(r) for r in rest) if shape == 2 else "."]
    text = " ".join(parts)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(text, data, seed=1, tune="none", propensity=np.full(len(data), 0.5))
    except (FormulaError, DataError) as exc:
        assert str(exc)
        return
    # A parse must be usable: the functionals at new rows encode them like the training data.
    dens = res.density(res.default_grid(20), newdata=data.iloc[:3], arm=1)
    assert dens.shape == (3, 20) and np.isfinite(dens).all()
    assert res.profiles().shape[0] == 3
    assert set(res.design.v_variables) <= set(names)


@pytest.mark.parametrize("name", ["x.1", "z ._", "a.b.c", "x y.", "日本.x"])
def test_quoted_dotted_names_are_read_by_newdata(name):
    """Regression: formulaic lost ```x.1``` inside ``I(...)`` from the variables V reads."""
    data = _frame(["y", "a", name])
    res = ccme.fit(f"y ~ a | I(`{name}` ** 2) + `{name}`", data, seed=1, tune="none",
                   propensity=np.full(len(data), 0.5))
    assert res.design.v_variables == (name,)
    np.testing.assert_allclose(res.mean(newdata=data.iloc[:4]), res.mean()[:4])


@pytest.mark.filterwarnings("ignore::ccme.errors.OverlapWarning")  # small data, weak overlap: not the point here
def test_transform_giving_nan_is_a_data_error_or_dropped():
    data = _frame(["y", "a", "v"])
    n_bad = int(np.sum(data["v"] <= 0))
    with pytest.raises(DataError, match=r"transforms give missing or infinite values in 'np.log\(v\)' \(\d+ rows\)"):
        ccme.fit("y ~ a | np.log(v)", data, seed=1)
    with pytest.warns(ccme.DataWarning, match=f"dropped {n_bad} of 24 rows where the formula's transforms"):
        res = ccme.fit("y ~ a | np.log(v)", data, seed=1, tune="none", na_action="drop")
    assert res.n == 24 - n_bad and res.design.n_dropped == n_bad
    with pytest.raises(DataError, match="after the formula's transforms"):
        res.density([0.0, 1.0], newdata=pd.DataFrame({"v": [-1.0]}))


@pytest.mark.parametrize("column, text, hint", [
    ("log", "y ~ a | log(v)", "['log'] shadow"),
    ("C", "y ~ a | v + C(w)", "['C'] shadow"),
    ("np", "y ~ a | np.log(1 + v**2)", "['np'] shadow"),
])
def test_shadowing_column_names_are_explained(column, text, hint):
    data = _frame(["y", "a", "v", "w", column])
    with pytest.raises(FormulaError, match=hint.replace("[", r"\[").replace("]", r"\]")):
        ccme.fit(text, data, seed=1)


def test_shadowing_name_used_as_a_column_works():
    data = _frame(["y", "a", "np", "log", "C"])
    res = ccme.fit("y ~ a | np + log | C", data, seed=1, tune="none")
    assert res.design.x_names == ("np", "log", "C")
