"""Tukey's far-out fences (ccme.fences) against a numpy twin."""

import numpy as np

from ccme.fences import FAR_OUT, FAR_OUT_SHARE, bulk_range, bulk_sd
from ccme.kernels import median_bandwidth


def test_bulk_range_is_the_range_cut_to_the_far_out_fences_column_by_column():
    rng = np.random.default_rng(3)
    Y = np.column_stack([rng.normal(size=400), rng.lognormal(0.0, 1.5, 400), rng.normal(size=400)])
    Y[0, 2] = 1e6                                   # one far-out value in the third column
    low, high = bulk_range(Y)
    for j in range(3):
        y = Y[:, j]
        q1, q3 = np.quantile(y, [0.25, 0.75])
        fence_low, fence_high = q1 - FAR_OUT * (q3 - q1), q3 + FAR_OUT * (q3 - q1)
        if np.mean((y < fence_low) | (y > fence_high)) <= FAR_OUT_SHARE:
            assert (low[j], high[j]) == (max(y.min(), fence_low), min(y.max(), fence_high))
        else:
            assert (low[j], high[j]) == (y.min(), y.max())
    # the normal column has nothing beyond, the lognormal one a tail (kept), the third one value far out (cut)
    assert high[0] == Y[:, 0].max() and high[1] == Y[:, 1].max() and high[2] < 10


def test_a_tail_or_a_second_mass_keeps_its_extremes():
    """Half of the outcomes at zero (IQR 0), or three quarters (quartiles 0 and 0.25, fences at -0.75 and 1, a
    quarter of the values beyond), or a lognormal tail (6% beyond): not a few far-out values, so the range is kept.
    One value far out of 400 (0.25%) is cut, and 1% is the most that is."""
    for y in (np.r_[np.zeros(200), np.linspace(1.0, 50.0, 200)], np.r_[np.zeros(300), np.linspace(1.0, 50.0, 100)],
              np.random.default_rng(0).lognormal(0.0, 1.5, 2000)):
        low, high = bulk_range(y)
        assert (low[0], high[0]) == (y.min(), y.max())
    y = np.random.default_rng(1).normal(size=400)
    assert bulk_range(np.r_[y, 1e3])[1][0] < 10
    assert bulk_range(np.r_[y, np.full(4, 1e3)])[1][0] < 10 and bulk_range(np.r_[y, np.full(5, 1e3)])[1][0] == 1e3


def test_bulk_sd_is_the_sd_of_the_values_clipped_to_the_fences_and_the_plain_sd_where_nothing_is_cut():
    rng = np.random.default_rng(4)
    Z = np.column_stack([rng.normal(size=500), rng.lognormal(0.0, 1.5, 500), rng.normal(size=500)])
    Z[7, 2] = -1e5
    low, high = bulk_range(Z)
    twin = np.array([np.std(np.minimum(np.maximum(Z[:, j], low[j]), high[j])) for j in range(3)])
    np.testing.assert_allclose(bulk_sd(Z), twin, rtol=1e-14)
    np.testing.assert_array_equal(bulk_sd(Z)[:2], Z.std(axis=0)[:2])   # nothing cut: the plain sd to the last bit
    assert 0.9 < bulk_sd(Z)[2] < 1.2 and np.std(Z[:, 2]) > 4000


def test_one_far_out_covariate_value_does_not_set_the_median_rules_bandwidth():
    """A value of 1e4 among 2000 standard normal ones (a missing-value code, say) made the column's sd 224 and the
    rule's bandwidth as many times too wide, beyond the ARD search's reach (factor 1/16), so the covariate was all
    but ignored; with the sd of the clipped values the bandwidth moves by the far-out unit's share of the
    pairwise distances only (measured: 0.2% and 0.4%, against 0.57 and 128 times before; asserted within 1%)."""
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(2000, 2))
    moved = Z.copy()
    moved[0, 1] = 1e4
    clean = median_bandwidth(Z)
    np.testing.assert_allclose(median_bandwidth(moved), clean, rtol=0.01)


def test_the_drawing_grid_spans_the_bulk_and_the_fine_grid_every_outcome():
    """One outcome at 5000 (the bulk's sd is about 8): res.default_grid() (plots, bands) ends within the fences plus
    its margin, fine_grid() (quantiles, distances) beyond the far-out value; with nothing far out they share ends."""
    import warnings

    import ccme
    from ccme.grids import MARGIN, kernel_scale

    data = ccme.datasets.paper_simulation(1000, seed=1)
    moved = data.copy()
    moved.loc[0, "y"] = 5000.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean, far = (ccme.fit("y ~ a | x1 | x2", d, tune="none", seed=1) for d in (data, moved))
    np.testing.assert_array_equal(clean.default_grid(2001)[[0, -1]], clean.fine_grid()[[0, -1]])
    margin = MARGIN * kernel_scale([far.embedding(arm).y_kernel for arm in (1, 0)])
    assert far.default_grid()[-1] == bulk_range(moved["y"].to_numpy())[1][0] + margin < 100
    assert far.fine_grid()[-1] > 5000 and data.loc[0, "y"] != 5000.0
