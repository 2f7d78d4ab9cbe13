"""The plots run on the Agg backend and draw what they say (one line per profile and arm, bands, bounds)."""

import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation, paper_simulation_density

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


@pytest.fixture(scope="module")
def res():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, paper_simulation(500, seed=5), propensity="logistic", seed=5, tune="none")


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _bands(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_backend_is_agg():
    assert matplotlib.get_backend().lower() == "agg"


def test_plot_densities_with_truth_and_bands(res):
    fig, ax = plt.subplots()
    out = res.plot(newdata=PAPER_PROFILES, truth=lambda y, p, a: paper_simulation_density(y, p, a), bands=True, n_boot=49,
                   ax=ax)
    assert out is ax
    # 2 profiles × 2 arms estimates + as many truth curves; one shaded band per profile and arm
    assert len(ax.lines) == 8 and len(_bands(ax)) == 4
    grid = res.default_grid()
    np.testing.assert_allclose(ax.lines[0].get_ydata(), res.density(grid, newdata=PAPER_PROFILES.iloc[[0]], arm=1)[0])


def test_plot_cdf(res):
    ax = res.plot_cdf(newdata=PAPER_PROFILES, arm=1)
    assert len(ax.lines) == 2 and not _bands(ax)
    y = ax.lines[0].get_ydata()
    assert np.all(np.diff(y) >= 0) and 0 <= y.min() and y.max() <= 1
    ax = res.plot_cdf(newdata=PAPER_PROFILES, arm=0, bands=True, n_boot=49)
    assert len(_bands(ax)) == 2


def test_plot_effect(res):
    ax = res.plot_effect(newdata=PAPER_PROFILES, q=[0.25, 0.5, 0.75], n_boot=49)
    qte = res.quantile([0.25, 0.5, 0.75], newdata=PAPER_PROFILES, arm=1) - res.quantile([0.25, 0.5, 0.75], newdata=PAPER_PROFILES, arm=0)
    curves = [line for line in ax.lines if line.get_label().startswith("QTE")]
    assert len(curves) == 2 and len(_bands(ax)) == 2
    np.testing.assert_allclose(curves[1].get_ydata(), qte[1], atol=0.05)  # 801- vs 2001-point inversion grid
    ax = res.plot_effect(newdata=PAPER_PROFILES, bands=False)
    assert not _bands(ax)


def test_plot_overlap(res):
    fig, ax = plt.subplots()
    assert res.plot_overlap(ax=ax) is ax
    assert sum(p.get_height() for p in ax.patches) == res.n
    bounds = sorted(line.get_xdata()[0] for line in ax.lines)
    assert bounds == [res.clip, 1 - res.clip]


def test_line_keywords_override_the_defaults():
    """``**kwargs`` reach Axes.plot and win over the per-profile colours (a user's color= is not a clash)."""
    import ccme

    res = ccme.fit("y ~ a | x1 | x2", ccme.datasets.paper_simulation(300, seed=1), tune="none", seed=1)
    for draw in (res.plot, res.plot_cdf):
        ax = draw(newdata=ccme.datasets.PAPER_PROFILES, color="k", lw=3)
        assert {line.get_color() for line in ax.lines} == {"k"}
        assert {line.get_linewidth() for line in ax.lines} == {3.0}
    ax = res.plot_effect(newdata=ccme.datasets.PAPER_PROFILES, bands=False, color="k")
    assert ax.lines[0].get_color() == "k"
