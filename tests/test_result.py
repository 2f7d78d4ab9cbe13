"""The result object: repr, summary, tidy, plots, demo."""

import numpy as np
import pandas as pd
import pytest

import ccme


@pytest.fixture(scope="module")
def res():
    data = ccme.datasets.paper_simulation(300, seed=21)
    return ccme.fit("y ~ a | x1 + x2 + x3 | x4 + x5 + x6", data, seed=21, propensity="forest")


def test_repr_is_short(res):
    text = repr(res)
    assert text.startswith("<ccme.CCMEResult: ridge/dr, 2 folds, n=300")
    assert "\n" not in text and len(text) < 150


def test_tuning_reprs_are_short(res):
    """The tuning report and its curves print one short line each (their arrays are in to_frame())."""
    text = repr(res.tuning)
    assert text.startswith("TuningReport(chose x_bandwidth, lam0, v_bandwidth, lam1, lam1_plugin, y_bandwidth; ")
    assert "\n" not in text and len(text) < 200
    y_curve = next(c for c in res.tuning.curves if c.parameter == "y_bandwidth" and c.arm == 0)
    assert repr(y_curve) == (f"TuningCurve(y_bandwidth: {len(y_curve.values)} values, weighted ISE-CV, "
                             f"chosen {y_curve.chosen:.4g}, arm 0)")
    assert all("\n" not in repr(c) and len(repr(c)) < 150 for c in res.tuning.curves)


def test_summary_prints_like_r(res):
    s = res.summary()
    text = str(s)
    for piece in ["Call:", "ccme.fit(", "Kernels:", "bandwidth", "(median, per-group", "(silverman", "lambda0", "lambda1",
                  "Propensity:", "random forest", "Effective n", "Clipped", "mean Y1", "sd Y0", "q25", "q75"]:
        assert piece in text, piece
    assert "<table>" in s._repr_html_()
    assert "\\begin{tabular}" in s.as_latex()
    frame = s.to_frame()
    assert list(frame.index) == ["q25", "q50", "q75"]
    np.testing.assert_allclose(frame["mean Y1"], res.mean(newdata=res.profiles(), arm=1))
    np.testing.assert_allclose(frame["diff"], frame["mean Y1"] - frame["mean Y0"])


def test_summary_does_not_print(res, capsys):
    res.summary()
    assert capsys.readouterr().out == ""


def test_tidy(res):
    t = res.tidy()
    assert list(t.columns) == ["profile", "arm", "outcome", "term", "estimate"]
    assert len(t) == 12  # 3 profiles x 2 arms x (mean, sd)
    sd0 = t[(t.arm == 0) & (t.term == "sd")]
    np.testing.assert_allclose(sd0["estimate"], res.sd(newdata=res.profiles(), arm=0))
    mean1 = t[(t.arm == 1) & (t.term == "mean")]
    np.testing.assert_allclose(mean1["estimate"], res.mean(newdata=res.profiles(), arm=1))


def test_moments_match_the_normalised_density_when_weights_are_positive():
    # A one-step fit (all weights from a ridge smoother on the arm's units) has
    # a mean that the density on a wide grid reproduces after rescaling by the mass.
    data = ccme.datasets.paper_simulation(400, seed=2)
    res = ccme.fit("y ~ a | x1 + x2", data, seed=2, mode="onestep")
    grid = np.linspace(data.y.min() - 30, data.y.max() + 30, 8001)
    new = data.iloc[:5]
    raw = res.density(grid, newdata=new, arm=1, normalize=False)
    mass = np.trapezoid(raw, grid, axis=1)
    mean = np.trapezoid(raw * grid, grid, axis=1) / mass
    np.testing.assert_allclose(res.mean(newdata=new, arm=1), mean, rtol=1e-6)


def test_plot_returns_axes_with_lines(res):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    truth = lambda y, row, arm: ccme.datasets.paper_simulation_density(  # noqa: E731
        y, np.r_[row[["x1", "x2", "x3"]].to_numpy()[0], 1.0, 1.0], arm=arm
    )
    out = res.plot(ax=ax, truth=truth)
    assert out is ax
    assert len(ax.get_lines()) == 3 * 2 * 2  # 3 profiles × 2 arms × (estimate + truth)
    plt.close(fig)
    ax = res.plot(newdata=pd.DataFrame({"x1": [0.0], "x2": [1.0], "x3": [2.0]}), arm=1)
    assert len(ax.get_lines()) == 1
    plt.close(ax.figure)


def test_demo_runs_small(tmp_path, capsys):
    from ccme.__main__ import main

    out = tmp_path / "demo.png"
    assert main(["demo", "--n", "400", "--n-test", "50", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Integrated squared error" in text and "one-step" in text
    assert out.stat().st_size > 10_000


def test_newdata_may_be_a_dict_of_scalars_one_v_point(res):
    """A dict of scalars is one V-point (statsmodels' predict(exog=dict) reads it so); a dict of lists is rows."""
    point = {"x1": 0.3, "x2": -1.0, "x3": 0.5}
    frame = pd.DataFrame({"x1": [0.3], "x2": [-1.0], "x3": [0.5]})
    y = res.default_grid()[::50]
    np.testing.assert_array_equal(res.density(y, newdata=point, arm=1), res.density(y, newdata=frame, arm=1))
    np.testing.assert_array_equal(res.mean(newdata=point, arm=0), res.mean(newdata=frame, arm=0))
    np.testing.assert_allclose(res.density(y, newdata={k: [v, v] for k, v in point.items()}, arm=1)[1],
                               res.density(y, newdata=frame, arm=1)[0], rtol=1e-12)  # another summation order
    pd.testing.assert_frame_equal(res.summary(newdata=point).to_frame(), res.summary(newdata=frame).to_frame())
    assert point == {"x1": 0.3, "x2": -1.0, "x3": 0.5}


def test_embedding_fine_grid_is_the_grid_its_functionals_use_and_default_grid_is_its_deprecated_name(res):
    """Embedding.fine_grid() is the 2001-point grid its quantiles are located on; default_grid() warns and agrees."""
    emb = res.embedding(1)
    grid = emb.fine_grid()
    assert grid.shape == (2001,) and np.all(np.diff(grid) > 0)
    v = res.design.encode_v(ccme.datasets.PAPER_PROFILES)
    np.testing.assert_array_equal(emb.quantile([0.25, 0.5], v=v), emb.quantile([0.25, 0.5], grid=grid, v=v))
    with pytest.warns(FutureWarning, match="renamed Embedding.fine_grid"):
        old = emb.default_grid(50)
    np.testing.assert_array_equal(old, emb.fine_grid(50))
