"""Bootstrap bands: their construction, and their coverage of the smoothed target on the paper's simulation.

Coverage measured with ``benchmarks/calibration.py bands --reps 30 --n 1000``
(fixed defaults, forest propensity, 299 draws, 100 grid points on [−5, 45],
arm 1, 90% level): density pointwise coverage 0.672 (v1), 0.655 (v2);
simultaneous 0.00 and 0.03.  The bands describe the second stage's sampling
variability around the *ridge-regularised* estimate; the ridge bias (λ₁ = 0.01
shrinks the embedding, and the first stage's bias enters through the
pseudo-outcomes) is not in them, so they under-cover the smoothed target
E[k(Y¹, y) | V = v] (see the module docstring of ccme.bootstrap).  The test
below checks the measured level: mean pointwise coverage over 3 fits in
[0.45, 0.9].
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.errors import DataError, ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.calibration import PAPER_FORMULA, smoothed_target  # noqa: E402


@pytest.fixture(scope="module")
def res():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(PAPER_FORMULA, paper_simulation(600, seed=7), propensity="logistic", seed=7, tune="none")


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_band_construction(res, feature):
    y = np.linspace(-5, 45, 60)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1)
    assert b.estimate.shape == (2, 60) and b.index == ["v1", "v2"]
    # estimate = raw / mass (unit-mass smoothed estimate)
    raw = (res.density if feature == "density" else res.cdf)(y, newdata=PAPER_PROFILES, arm=0, normalize=False)
    mass = res.embedding(0).moments(v=PAPER_PROFILES)[0]
    np.testing.assert_allclose(b.estimate, raw / mass[:, None], rtol=1e-9, atol=1e-12)
    assert np.all(b.lower <= b.estimate) and np.all(b.estimate <= b.upper)
    assert np.mean(b.upper_simultaneous - b.lower_simultaneous) > np.mean(b.upper - b.lower)  # sup-t is wider
    assert np.all(b.se >= 0) and b.se.max() > 0
    assert len(b.to_frame()) == 120
    again = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1)
    np.testing.assert_array_equal(b.upper, again.upper)


def test_band_errors(res):
    with pytest.raises(ParameterError, match="feature"):
        res.bands(feature="pdf", n_boot=20)
    with pytest.raises(ParameterError, match="level"):
        res.bands(level=1.5, n_boot=20)
    with pytest.raises(ParameterError, match="arm"):
        res.bands(arm=2, n_boot=20)


@pytest.mark.slow
def test_band_coverage_matches_measurement():
    y = np.linspace(-5.0, 45.0, 100)
    coverage = []
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = ccme.fit(PAPER_FORMULA, paper_simulation(1000, seed=seed), propensity="forest", seed=seed,
                           tune="none")
            b = fit.bands(0.9, newdata=PAPER_PROFILES, arm=1, y=y, n_boot=199)
        target = smoothed_target(y, PAPER_PROFILES, fit.embedding(1).y_kernel.bandwidth_array[0], 1)
        coverage.append(np.mean((b.lower <= target) & (target <= b.upper)))
    assert 0.45 <= np.mean(coverage) <= 0.9


@pytest.mark.parametrize("feature", ["density", "cdf"])
def test_bands_surround_the_curve_they_belong_to(res, feature):
    """Mapped like the curve (clip and rescale / clip and running maximum), the band holds the reported curve."""
    y = np.linspace(-5, 45, 60)
    b = res.bands(0.9, newdata=PAPER_PROFILES, arm=0, y=y, feature=feature, n_boot=99, seed=1)
    drawn = b.on_the_curve()
    curve = (res.density if feature == "density" else res.cdf)(y, newdata=PAPER_PROFILES, arm=0)
    np.testing.assert_allclose(drawn["estimate"], curve, rtol=1e-9, atol=1e-12)
    tol = 1e-12
    assert np.all(drawn["lower_simultaneous"] <= curve + tol) and np.all(curve <= drawn["upper_simultaneous"] + tol)
    assert np.all(drawn["lower"] <= curve + tol) and np.all(curve <= drawn["upper"] + tol)
