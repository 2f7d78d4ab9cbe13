"""The formula front end: roles, categorical columns, transforms, `.`, newdata encoding."""

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme.formula import build_design, parse_formula


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(4)
    n = 80
    return pd.DataFrame(
        {
            "y": rng.normal(size=n),
            "a": rng.integers(0, 2, n),
            "age": rng.uniform(20, 60, n),
            "group": rng.choice(["north", "south", "west"], n),
            "inc": rng.lognormal(size=n),
            "my col": rng.normal(size=n),
        }
    )


def test_roles_and_dot(frame):
    f = parse_formula("y ~ a | age + group | .", frame.columns)
    d = build_design(f, frame)
    assert d.v_variables == ("age", "group")
    assert d.v_names == ("age", "group[north]", "group[south]", "group[west]")
    assert set(d.x_variables) == {"age", "group", "inc", "my col"}
    assert d.X.shape == (80, 6) and d.V.shape == (80, 4)
    np.testing.assert_array_equal(d.X[:, :4], d.V)


def test_transforms_backticks_and_categoricals(frame):
    d = build_design(parse_formula("np.log(inc) ~ a | C(group) | `my col` + age", frame.columns), frame)
    np.testing.assert_allclose(d.Y[:, 0], np.log(frame["inc"]))
    assert d.x_names[-2:] == ("my col", "age")
    new = pd.DataFrame({"group": ["west", "north"]})
    np.testing.assert_array_equal(d.encode_v(new), [[0, 0, 1], [1, 0, 0]])
    with pytest.raises(ccme.DataError, match="cannot encode"):
        d.encode_v(pd.DataFrame({"group": ["east"]}))


def test_x_repeats_v_only_once(frame):
    d = build_design(parse_formula("y ~ a | age | age + inc", frame.columns), frame)
    assert d.x_names == ("age", "inc")


def test_covariate_subsets(frame):
    d = build_design(parse_formula("y ~ a | age + group | inc + `my col`", frame.columns), frame)
    np.testing.assert_array_equal(d.columns_of(["group", "inc"]), [1, 2, 3, 4])
    np.testing.assert_array_equal(d.columns_of("age + `my col`"), [0, 5])
    with pytest.raises(ccme.DataError, match="not among the covariates"):
        d.columns_of(["y"])


@pytest.mark.filterwarnings("ignore::ccme.errors.OverlapWarning")  # small data, weak overlap: not the point here
def test_fit_with_categorical_v_and_profiles(frame):
    res = ccme.fit("y ~ a | age + group | inc", frame, seed=3, propensity_covariates=["age", "inc"],
                   outcome_covariates="age + group")
    prof = res.profiles()
    assert list(prof.index) == ["q25", "q50", "q75"]
    assert prof["group"].iloc[0] in {"north", "south", "west"}
    assert res.mean(newdata=prof).shape == (3,)
    assert res.propensity_columns == ("age", "inc")
    assert res.outcome_columns == ("age", "group[north]", "group[south]", "group[west]")


def test_categorical_treatment_default_level(frame):
    cat = frame.assign(a=pd.Categorical(np.where(frame["a"] == 1, "yes", "no"), categories=["no", "yes"]))
    res = ccme.fit("y ~ a | age", cat, seed=1)
    assert res.design.treatment.level == "yes"
    np.testing.assert_array_equal(res.design.A, frame["a"].to_numpy())


def test_nullable_string_columns_are_categorical_like_object_strings():
    """pandas' nullable dtype="string" (pd.NA) gives the same design, fit and encoding as object strings."""
    rng = np.random.default_rng(0)
    n = 300
    g = rng.choice(["a", "b", "c"], n)
    data = pd.DataFrame({"g": pd.array(g, dtype="string"), "x": rng.normal(size=n), "a": rng.binomial(1, 0.5, n)})
    data["y"] = data.x + (g == "b") + rng.normal(size=n)
    plain = data.assign(g=g.astype(object))
    res = ccme.fit("y ~ a | g | x", data, seed=1, tune="none")
    twin = ccme.fit("y ~ a | g | x", plain, seed=1, tune="none")
    np.testing.assert_array_equal(res.design.V, twin.design.V)
    newdata = pd.DataFrame({"g": pd.array(["a", "c"], dtype="string")})
    np.testing.assert_array_equal(res.density([0.0, 1.0], newdata=newdata),
                                  twin.density([0.0, 1.0], newdata=newdata.astype(object)))
    assert isinstance(data["g"].dtype, pd.StringDtype)  # the caller's frame is untouched
    with pytest.raises(ccme.errors.DataError, match="missing"):
        ccme.fit("y ~ a | g | x", data.assign(g=data.g.where(np.arange(n) != 3, pd.NA)), seed=1, tune="none")
