"""Tukey's far-out fences (ccme.fences) against a numpy twin."""

import numpy as np

from ccme.fences import FAR_OUT, FAR_OUT_SHARE, bulk_range


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
