"""Bad input gets a clear ccme error naming the problem; the caller's data are never modified."""

import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import DataError, FormulaError, ParameterError


@pytest.fixture(scope="module")
def data():
    return pd.concat(ccme.datasets.paper_simulation(120, seed=11, truth=True), axis=1)  # with the true `ps`


F = "y ~ a | x1 + x2 | x3"


def test_data_not_modified(data):
    before = data.copy(deep=True)
    res = ccme.fit(F, data, seed=1)
    res.density(np.linspace(0, 10, 5), newdata=data.iloc[:3])
    res.summary()
    pd.testing.assert_frame_equal(data, before)


def test_missing_values_error_names_column_and_count(data):
    bad = data.copy()
    bad.loc[[3, 7, 9], "x2"] = np.nan
    bad.loc[5, "y"] = np.inf
    with pytest.raises(DataError, match=r"'y' \(1\).*'x2' \(3\)"):
        ccme.fit(F, bad, seed=1)
    with pytest.warns(ccme.DataWarning, match="dropped 4 of 120 rows"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)  # 116 units: the forest's scores may need clipping
        res = ccme.fit(F, bad, seed=1, na_action="drop")
    assert res.n == 116
    assert "4 rows with missing values dropped" in str(res.summary())


def test_missing_values_in_unused_columns_are_fine(data):
    bad = data.copy()
    bad.loc[3, "x9"] = np.nan
    assert ccme.fit(F, bad, seed=1).n == 120


@pytest.mark.parametrize(
    "formula, message",
    [
        ("y ~ a | x1 + nope", "nope"),
        ("y ~ a", "2 or 3 parts"),
        ("y ~ a | x1 | x2 | x3", "4 right-hand part"),
        ("y ~ a + x1 | x2", "exactly one column"),
        ("y ~ a | x1 +", "cannot use formula"),
        ("~ a | x1", "no outcome"),
        ("y ~ zz | x1", "treatment 'zz' is not a column"),
        ("y ~ a | a + x1", "cannot also be a conditioning"),
        ("y ~ a | x1 | y", "outcome's column"),
    ],
)
def test_bad_formulas(data, formula, message):
    with pytest.raises(FormulaError, match=message):
        ccme.fit(formula, data, seed=1)


def test_formula_not_a_string(data):
    with pytest.raises(FormulaError, match="must be a string"):
        ccme.fit(3, data)


def test_treatment_checks(data):
    with pytest.raises(DataError, match="at least two levels; it has 1"):
        ccme.fit(F, data.assign(a=1), seed=1)
    with pytest.raises(DataError, match="a continuous dose is not supported"):
        ccme.fit(F, data.assign(a=np.arange(len(data)) * 0.5), seed=1)
    three = data.assign(a=np.arange(len(data)) % 3)  # three levels: three arms, named by their levels
    with pytest.raises(ParameterError, match="use reference=<level>"):
        ccme.fit(F, three, seed=1, treated=2)
    with pytest.raises(ParameterError, match="is not a level"):
        ccme.fit(F, three, seed=1, reference=5, tune="none")
    strings = data.assign(a=np.where(data["a"] == 1, "job", "none"))
    with pytest.raises(DataError, match="treated=<level>"):
        ccme.fit(F, strings, seed=1)
    with pytest.raises(DataError, match="not a level"):
        ccme.fit(F, strings, seed=1, treated="yes")
    by_label = ccme.fit(F, strings, seed=1, treated="job")
    by_number = ccme.fit(F, data, seed=1)
    grid = np.linspace(0, 30, 7)
    np.testing.assert_allclose(by_label.density(grid, newdata=data.iloc[:3]), by_number.density(grid, newdata=data.iloc[:3]))
    as_bool = ccme.fit(F, data.assign(a=data["a"] == 1), seed=1)
    np.testing.assert_allclose(as_bool.density(grid, newdata=data.iloc[:3]), by_number.density(grid, newdata=data.iloc[:3]))


def test_too_few_units_in_an_arm(data):
    few = data.copy()
    few["a"] = 0
    few.loc[few.index[:3], "a"] = 1
    with pytest.raises(DataError, match="treated arm has 3 unit"):
        ccme.fit(F, few, seed=1)


def test_folds(data):
    with pytest.raises(ParameterError, match="at least 2"):
        ccme.fit(F, data, folds=1)
    with pytest.raises(ParameterError, match="integer"):
        ccme.fit(F, data, folds=2.5)
    with pytest.raises(DataError, match="more than the number of units"):
        ccme.fit(F, data.iloc[:10], folds=11)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lam": -1.0}, "`lam0` must be a positive number; got -1.0"),
        ({"lam1": 0}, "`lam1` must be a positive number; got 0"),
        ({"v_bandwidth": 0.0}, "`v_bandwidth` must be positive"),
        ({"x_bandwidth": [1.0, 2.0]}, "one value per column"),
        ({"y_bandwidth": np.inf}, "positive and finite"),
        ({"x_bandwidth": "scott"}, "x_bandwidth"),
        ({"kernel": "cosine"}, "`x_kernel` must be one of"),
        ({"y_kernel": "matern32"}, "`y_kernel` must be one of"),
        ({"lamda": 1.0}, "unknown hyperparameter"),
        ({"lam": 1.0, "lam0": 2.0}, "either `lam`"),
        ({"mode": "tmle"}, "`mode` must be one of"),
        ({"method": "forest"}, "`method` must be one of"),
        ({"clip": 0.7}, "`clip`"),
        ({"propensity": "probit"}, "`propensity` must be"),
        ({"propensity": np.full(5, 0.5)}, "one value per row"),
        ({"na_action": "omit"}, "na_action"),
    ],
)
def test_bad_parameters(data, kwargs, message):
    with pytest.raises(ccme.CcmeError, match=message):
        ccme.fit(F, data, **{"seed": 1, **kwargs})


def test_newdata_checks(data):
    res = ccme.fit(F, data, seed=1)
    grid = np.linspace(0, 30, 5)
    with pytest.raises(DataError, match=r"lacks the column\(s\) \['x2'\]"):
        res.density(grid, newdata=data[["x1"]])
    with pytest.raises(DataError, match="missing or infinite"):
        res.density(grid, newdata=data.assign(x1=np.nan).iloc[:2])
    with pytest.raises(ParameterError, match="`arm` must be 1"):
        res.density(grid, arm=2)
    with pytest.raises(DataError, match="increasing grid"):
        res.density(grid[::-1], newdata=data.iloc[:2])
    with pytest.raises(DataError, match="column"):
        res.density(np.ones((3, 2)), newdata=data.iloc[:2])


def test_positivity_failure_is_an_error():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    data = pd.DataFrame({"y": rng.normal(size=200), "a": (x > 0).astype(int), "x": x, "v": rng.normal(size=200)})
    with pytest.raises(ccme.PositivityError, match="positivity fails"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ccme.fit("y ~ a | v | x", data, seed=1)


def test_clipping_warning_counts(data):
    scores = np.clip(data["ps"].to_numpy(), 0.001, 1)
    scores[:5] = 0.001
    with pytest.warns(ccme.OverlapWarning, match=r"clipped to \[0.01, 0.99\] \(\d+ below"):
        res = ccme.fit(F, data, propensity=scores, seed=1, clip=0.01)
    assert res.overlap.n_clipped_low >= 5


def test_covariate_constant_within_an_arm_is_a_positivity_error():
    """A column fixed at one value among the treated while it varies among the controls: named, with a remedy."""
    data = ccme.datasets.paper_simulation(300, seed=1)
    data["c"] = np.where(data["a"] == 1, 1.0, data["x3"])
    with pytest.raises(ccme.PositivityError, match=r"covariate 'c' is constant \(= 1\) among the treated units"):
        ccme.fit("y ~ a | x1 | x2 + c", data, seed=1, tune="none")
    data["c"] = np.where(data["a"] == 0, -2.0, data["x3"])
    with pytest.raises(ccme.PositivityError, match=r"'c' is constant \(= -2\) among the control units"):
        ccme.fit("y ~ a | x1 + c | x2", data, seed=1, tune="none")
