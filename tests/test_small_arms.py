"""Inference with small arms says that it is not calibrated there (``ccme.bootstrap.SMALL_ARM``).

The sizes and coverages behind the thresholds and the caveats' numbers were measured by
``benchmarks/calibration.py size|shape|effects --n ...`` (README, "Small arms"); these tests check that each kind's
caveat is raised exactly where the smaller compared arm is below its threshold, and that the summary shows the test
of no effect's as a note instead of a warning.
"""

from __future__ import annotations

import warnings

import pytest

import ccme
from ccme.bootstrap import SMALL_ARM, small_arm_caveat

FORMULA = "y ~ a | x1 | x2 + x3"
CAVEAT = "smaller arm compared has"


def _fit(n):
    data = ccme.datasets.paper_simulation(n, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        return ccme.fit(FORMULA, data, seed=1, tune="none")


@pytest.fixture(scope="module")
def tiny():
    res = _fit(40)
    assert min(res.n_arm.values()) < SMALL_ARM["effect"]
    return res


@pytest.fixture(scope="module")
def small():
    res = _fit(100)
    assert SMALL_ARM["effect"] <= min(res.n_arm.values()) < min(SMALL_ARM["dominance"], SMALL_ARM["intervals"])
    return res


@pytest.fixture(scope="module")
def large():
    res = _fit(400)
    assert min(res.n_arm.values()) >= max(SMALL_ARM.values())
    return res


def _caveats(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught if CAVEAT in str(w.message)]


def test_small_arms_make_the_oversized_tests_and_the_intervals_warn(small):
    treated = small.n_arm[1]
    for call, what in [(lambda: small.test_dominance(n_boot=19), "p-values"),
                       (lambda: small.effect(n_boot=19), "intervals")]:
        caveats = _caveats(call)
        assert len(caveats) == 1, caveats
        assert f"{CAVEAT} {treated} units" in caveats[0] and f"bootstrap's {what} are not calibrated" in caveats[0]
    # The location-shift test was conservative with small arms, and the test of no effect's HC2 residuals kept its
    # size down to arms of about 20 units: no caveat.
    assert _caveats(lambda: small.test_location_shift(n_boot=19)) == []
    assert _caveats(lambda: small.test_effect(n_boot=19)) == []
    assert CAVEAT not in str(small.summary(n_boot=19))


def test_the_effect_test_warns_below_the_smallest_arms_measured(tiny):
    caveats = _caveats(lambda: tiny.test_effect(n_boot=19))
    assert len(caveats) == 1, caveats
    assert f"{CAVEAT} {tiny.n_arm[1]} units: below {SMALL_ARM['effect']} units" in caveats[0]
    assert "bootstrap's p-values were not measured" in caveats[0]


def test_the_summary_shows_the_caveat_as_a_note(tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = str(tiny.summary(n_boot=19))
    assert not [w for w in caught if CAVEAT in str(w.message)]
    assert "Caveat" in text and CAVEAT in text


def test_arms_at_the_threshold_raise_no_caveat(large):
    for call in (lambda: large.test_effect(n_boot=19), lambda: large.test_dominance(n_boot=19),
                 lambda: large.effect(n_boot=19)):
        assert _caveats(call) == []
    assert CAVEAT not in str(large.summary(n_boot=19))
    assert small_arm_caveat(large, (1, 0)) is None
