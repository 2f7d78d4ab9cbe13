"""The Gaussian model of benchmarks/inference/kolmogorov_interval.py: its interval is effect()'s, its noise the stated law."""

import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.inference.kolmogorov_interval import noise_factor, reverse  # noqa: E402
from ccme.bootstrap import _interval  # noqa: E402


def test_the_reverse_interval_is_effects():
    rng = np.random.default_rng(3)
    t, draws = 0.2, 0.2 + rng.normal(0.05, 0.1, size=499)
    ours = _interval(np.array([t]), np.array([t]), draws[None, :], 0.9, floor=0.0, reverse=True)
    np.testing.assert_allclose(reverse(t, draws, 0.05, 0.95), (ours.conf_low[0], ours.conf_high[0]))


def test_the_noise_is_two_independent_bridges():
    grid = np.array([-1.0, 0.0, 2.0])
    L = noise_factor(grid, (1.0, 2.0))
    F1, F0 = norm.cdf(grid), norm.cdf(grid / 2.0)
    cov = (np.minimum.outer(F1, F1) - np.outer(F1, F1)) + (np.minimum.outer(F0, F0) - np.outer(F0, F0))
    np.testing.assert_allclose(L @ L.T, cov, atol=1e-10)      # e.g. the variance at 0 is 1/4 + 1/4
