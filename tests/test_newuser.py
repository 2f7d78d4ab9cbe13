"""What a new user met (issue 10, item 8): truths kept out of `.`, text columns with a level per row,
columns too large to square, profiles of a categorical V, the demo figure."""

import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme import DataError, DataWarning
from ccme.datasets import IHDP_BINARY, IHDP_CONTINUOUS, ihdp_surface_b, paper_simulation
from ccme.formula import MANY_LEVELS_MIN_ROWS, MAX_MAGNITUDE, build_design, parse_formula


def _design(formula, data, **kwargs):
    return build_design(parse_formula(formula, data.columns), data, **kwargs)


# -- the bundled simulations: `.` means the covariates and nothing else ----------------------------------


def test_dot_on_the_paper_simulation_adjusts_for_the_covariates_only():
    data = paper_simulation(300, seed=1)
    design = _design("y ~ a | x1 + x2 | .", data)
    assert design.x_variables == tuple(f"x{j}" for j in range(1, 11))
    assert design.v_variables == ("x1", "x2")


def test_dot_on_ihdp_adjusts_for_the_25_covariates_only():
    data = ihdp_surface_b(seed=0)
    design = _design("y ~ treat | sex | .", data)
    assert set(design.x_variables) == set(IHDP_CONTINUOUS) | set(IHDP_BINARY)


def test_truth_travels_apart_and_matches_the_observed_rows():
    data, truth = paper_simulation(400, seed=3, truth=True)
    # The truth would be a perfect confounder: it must not be reachable from the data frame.
    assert not {"y0", "y1", "ps"} & set(data.columns)
    assert truth.index.equals(data.index)
    np.testing.assert_array_equal(data["y"], np.where(data["a"] == 1, truth["y1"], truth["y0"]))


# -- text columns with (nearly) a level per row ------------------------------------------------------------


def _frame(n=60, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "y": rng.normal(size=n),
        "a": np.tile([0, 1], n // 2),
        "v": rng.normal(size=n),
        "group": rng.choice(["north", "south", "west"], size=n),
    })


def test_numbers_with_thousands_separators_warn_naming_the_column_and_the_fix():
    data = _frame()
    income = np.random.default_rng(1).integers(1_000, 900_000, size=len(data))
    data["income"] = [f"{v:,}" for v in income]  # what read_csv gives for "12,345" without thousands=","
    with pytest.warns(DataWarning, match=r"'income' is text with 60 distinct levels in 60 rows") as caught:
        design = _design("y ~ a | v | income", data)
    message = str(caught[0].message)
    assert "thousands=','" in message and "pd.to_numeric" in message
    assert design.X.shape[1] > 50  # the warning is about this: one indicator column per row
    # Read correctly, the same column is one numeric covariate and draws no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        fixed = _design("y ~ a | v | income", data.assign(income=income))
    assert fixed.X.shape[1] == 2


def test_a_missing_value_code_among_numbers_is_named_with_its_fix():
    """One 'n/a' (and one '.') in a numeric column makes pandas read it as text: the warning names them."""
    data = _frame()
    values = np.random.default_rng(2).normal(size=len(data)).round(4).astype(object)
    values[[3, 7]] = ["n/a", "."]
    with pytest.warns(DataWarning, match=r"'score' is text") as caught:
        _design("y ~ a | v | score", data.assign(score=values))
    message = str(caught[0].message)
    assert "2 value(s) do not read as numbers ('n/a', '.')" in message
    assert "na_values=" in message and "errors='coerce'" in message and "na_action='drop'" in message


def test_an_identifier_column_warns_as_such():
    data = _frame().assign(patient=lambda d: [f"P-{i:04d}" for i in range(len(d))])
    with pytest.warns(DataWarning, match=r"'patient'.*identifier or free text"):
        _design("y ~ a | v | patient", data)


def test_genuine_categoricals_small_data_and_deliberate_categoricals_do_not_warn():
    data = _frame()
    many = [f"L{i}" for i in range(len(data))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        _design("y ~ a | v | group", data)  # 3 levels in 60 rows: a categorical
        small = data.iloc[: MANY_LEVELS_MIN_ROWS - 2].assign(tag=many[: MANY_LEVELS_MIN_ROWS - 2])
        _design("y ~ a | v | tag", small)  # too few rows to tell
        _design("y ~ a | v | tag", data.assign(tag=pd.Categorical(many)))  # made categorical on purpose
    # Just above half the rows in levels: the warning starts there.
    half = [f"L{i}" for i in range(len(data) // 2 + 1)] * 2
    with pytest.warns(DataWarning, match="31 distinct levels in 60 rows"):
        _design("y ~ a | v | tag", data.assign(tag=half[: len(data)]))


# -- values whose squares leave float64's range -----------------------------------------------------------


def test_a_column_scaled_to_1e300_is_a_ccme_error_naming_it():
    data = paper_simulation(200, seed=1)
    data["x3"] = data["x3"] * 1e300
    for propensity in ("logistic", "forest"):
        with pytest.raises(DataError, match=r"'x3' \(values up to .*e\+300") as caught:
            ccme.fit("y ~ a | x1 + x2 | x3", data, seed=1, tune="none", propensity=propensity)
        assert "rescale" in str(caught.value)


def test_a_transform_that_overflows_squares_and_a_huge_outcome_are_errors():
    data = paper_simulation(100, seed=2)
    # exp(400) ≈ 5e173 is finite, but its square is not.
    with pytest.raises(DataError, match=r"covariates column\(s\) 'np.exp\(x3\)'"):
        _design("y ~ a | x1 | np.exp(x3)", data.assign(x3=data["x3"] + 400))
    with pytest.raises(DataError, match=r"outcome column\(s\) 'y'"):
        _design("y ~ a | x1", data.assign(y=data["y"] * 1e200))
    # Values whose squares underflow would pass for a constant column.
    with pytest.raises(DataError, match=r"'x2' \(values no larger than"):
        _design("y ~ a | x1 + x2", data.assign(x2=data["x2"] * 1e-200))
    # At the limit nothing is rejected, nor is a column of zeros (constant, which the kernels handle).
    _design("y ~ a | x1 + x2", data.assign(x2=data["x2"] / data["x2"].abs().max() * MAX_MAGNITUDE))
    _design("y ~ a | x1 + x2", data.assign(x2=0.0))


def test_a_large_but_squarable_confounder_gives_the_unscaled_estimate():
    """Below the limit nothing is lost: the rules standardise, so scaling a confounder changes no density."""
    data = paper_simulation(200, seed=4)
    kwargs = dict(seed=1, tune="none", propensity="logistic")
    base = ccme.fit("y ~ a | x1 + x2 | x3", data, **kwargs)
    scaled = ccme.fit("y ~ a | x1 + x2 | x3", data.assign(x3=data["x3"] * 1e100), **kwargs)
    grid = base.default_grid(40)
    newdata = base.profiles()
    for arm in (1, 0):
        np.testing.assert_allclose(scaled.density(grid, newdata=newdata, arm=arm),
                                   base.density(grid, newdata=newdata, arm=arm), rtol=1e-6, atol=1e-12)


# -- profiles of a categorical V --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed():
    rng = np.random.default_rng(5)
    n = 200
    group = rng.permutation(["north"] * 100 + ["south"] * 60 + ["west"] * 40)  # frequencies 50%, 30%, 20%
    return pd.DataFrame({
        "y": rng.normal(size=n) + 3.0 * (group == "south") - 3.0 * (group == "west"),
        "a": np.tile([0, 1], n // 2),
        "age": rng.normal(40, 10, size=n),
        "group": group,
        "smoker": rng.random(n) < 0.3,
    })


def test_profiles_of_a_mixed_v_vary_the_levels_most_frequent_first(mixed):
    prof = _design("y ~ a | age + group + smoker", mixed).profiles()
    assert list(prof.index) == ["q25", "q50", "q75"]
    np.testing.assert_allclose(prof["age"], mixed["age"].quantile([0.25, 0.5, 0.75]).to_numpy())
    order = list(mixed["group"].value_counts().index)
    assert list(prof["group"]) == order  # every level shows, by decreasing frequency
    assert list(prof["smoker"]) == [False, True, False]  # fewer levels than profiles: start again
    five = _design("y ~ a | age + group", mixed).profiles([0.1, 0.3, 0.5, 0.7, 0.9])
    assert list(five["group"]) == order + order[:2]


def test_profiles_of_a_purely_categorical_v_are_its_levels(mixed):
    design = _design("y ~ a | group", mixed)
    prof = design.profiles()
    assert list(prof.index) == ["group=north", "group=south", "group=west"]
    assert list(prof["group"]) == ["north", "south", "west"]
    both = _design("y ~ a | group + smoker", mixed).profiles()
    assert len(both) == 6 and not both.duplicated().any()
    assert both.index[0] == f"group={both['group'].iloc[0]}, smoker={both['smoker'].iloc[0]}"
    counts = mixed.groupby(["group", "smoker"]).size()
    assert [counts[(g, s)] for g, s in zip(both["group"], both["smoker"])] == sorted(counts, reverse=True)
    # A categorical dtype keeps its categories, unseen ones included.
    cat = mixed.assign(group=pd.Categorical(mixed["group"], categories=["east", "north", "south", "west"]))
    prof_cat = _design("y ~ a | group", cat).profiles()
    assert list(prof_cat["group"].cat.categories) == ["east", "north", "south", "west"]
    assert "east" not in set(prof_cat["group"])
    many = mixed.assign(group=[f"g{i % 15}" for i in range(len(mixed))])
    assert len(_design("y ~ a | group", many).profiles()) == design.MAX_LEVEL_PROFILES


def test_fit_summarises_every_level_of_a_categorical_v(mixed):
    res = ccme.fit("y ~ a | group | age", mixed, seed=1, tune="none", propensity="logistic")
    prof = res.profiles()
    means = pd.Series(res.mean(newdata=prof, arm=1), index=prof["group"].to_numpy())
    # The simulated level shifts (+3 south, -3 west) show in the profiles' means.
    assert means["south"] > means["north"] + 1.5 and means["west"] < means["north"] - 1.5


def test_profiles_reject_quantiles_outside_the_unit_interval(mixed):
    design = _design("y ~ a | age", mixed)
    with pytest.raises(DataError, match="quantiles must lie in"):
        design.profiles([0.5, 1.5])
    with pytest.raises(DataError, match="at least one"):
        design.profiles([])
    with pytest.raises(DataError, match="`quantiles` must be numbers"):
        design.profiles(["median"])
    # Quantiles whose labels round alike keep one row each.
    assert len(design.profiles([0.251, 0.249])) == 2


# -- the demo figure --------------------------------------------------------------------------------------


def test_demo_figure_labels_profiles_axes_and_truth():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ccme.__main__ import PAPER_FORMULA, demo_figure

    data = paper_simulation(300, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = {mode: ccme.fit(PAPER_FORMULA, data, mode=mode, seed=1, tune="none") for mode in ("dr", "onestep")}
    fig = demo_figure(fits, np.linspace(-5, 40, 120), n=300)
    axes = fig.axes
    assert all(ax.get_ylabel() for ax in axes[::2])  # the left column says what the y-axis is
    titles = [ax.get_title() for ax in axes]
    assert "x1, x3, x5 = 2.2; x2, x4 = -0.2" in titles[0] and "x1, x3, x5 = -0.2; x2, x4 = 2.2" in titles[1]
    legend_texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert any("truth" in t for t in legend_texts) and any("DR" in t for t in legend_texts)
    # The truth is drawn as a filled area, unlike the estimates' lines.
    assert all(len(ax.collections) == 1 for ax in axes)
    plt.close(fig)
