"""Hyperparameters chosen by comparing whole cross-fits on the read-out criterion (ccme.fit_choice)."""

import warnings

import numpy as np
import pandas as pd
import pytest

import ccme
from ccme.datasets import PAPER_PROFILES, paper_simulation
from ccme.fit_choice import choose_fit, with_readout
from ccme.location import AUTO_THRESHOLD
from ccme.tuning import TuningCurve, TuningReport

F = "y ~ a | x1 + x2 | x3 + x4"


def _report(terms, units=None, arm=1):
    """A fit's report whose read-out criterion is the sum of ``terms`` over ``units`` (default 0, 1, ...)."""
    terms = np.asarray(terms, dtype=float)
    units = np.arange(len(terms)) if units is None else np.asarray(units)
    curve = TuningCurve("y_bandwidth", np.array([0.5, 1.0]), np.array([0.0, terms.sum()]), "ISE-CV", 1.0, arm=arm,
                        held=(units, terms))
    return TuningReport(chosen={"y_bandwidth": {arm: 1.0}}, curves=[curve])


def test_a_value_replaces_the_reference_only_when_clearly_better():
    """The rule of location="auto" (AUTO_THRESHOLD standard errors of the paired difference): a value whose summed
    difference to the reference is 2 standard errors below is chosen, one 0.5 below is not; the curve and the note
    record it."""
    m = 200
    rng = np.random.default_rng(0)
    base = rng.standard_normal(m)
    e = rng.standard_normal(m)
    e = (e - e.mean()) / e.std(ddof=1)     # per-unit differences with mean 0 and sd 1: standard error √m
    step = AUTO_THRESHOLD * np.sqrt(m) / m
    within, clear = base + e - 0.5 * step, base + e - 2.0 * step
    reports = {2.0: _report(base), 0.5: _report(within), 4.0: _report(clear)}
    assert choose_fit("weight_decay", reports, 2.0) == 4.0
    curve = reports[4.0].curves[-1]
    assert curve.parameter == "weight_decay" and curve.chosen == 4.0
    np.testing.assert_array_equal(curve.values, [0.5, 2.0, 4.0])
    np.testing.assert_allclose(curve.criterion, [within.sum(), base.sum(), clear.sum()])
    assert reports[4.0].chosen["weight_decay"] == 4.0 and "weight_decay: 4 chosen" in reports[4.0].notes[-1]
    assert "weight_decay" not in reports[2.0].chosen

    # only within its noise: the reference stays, and says so
    reports = {2.0: _report(base), 0.5: _report(within)}
    assert choose_fit("weight_decay", reports, 2.0) == 2.0
    assert reports[2.0].chosen["weight_decay"] == 2.0 and "0.5: " in reports[2.0].notes[-1]


def test_the_lowest_of_several_clear_values_is_chosen():
    base = np.zeros(50)
    rng = np.random.default_rng(1)
    small = rng.normal(0, 1e-4, 50)
    reports = {2.0: _report(base), 0.5: _report(small - 0.01), 1.0: _report(small - 0.02)}
    assert choose_fit("weight_decay", reports, 2.0) == 1.0


def test_fits_that_held_out_different_units_are_not_compared():
    """A NaN difference (criterion_difference: different units) never replaces the reference."""
    reports = {2.0: _report(np.zeros(5)), 0.5: _report(np.full(5, -1.0), units=np.arange(1, 6))}
    assert choose_fit("weight_decay", reports, 2.0) == 2.0


def test_with_readout_swaps_the_readout_entries_only():
    """The base's tuning (other curves, choices, notes, relevance) kept; its σ_y curves, choice and grid notes
    replaced by the other fit's; neither input changed."""
    base = _report(np.zeros(3))
    base.curves.insert(0, TuningCurve("lam1", np.array([1.0, 2.0]), np.array([3.0, 1.0]), "LOO", 2.0, arm=1))
    base.chosen["lam1"] = {1: 2.0}
    base.notes += ["lam1 note", "y_bandwidth (treated) chose the smallest value of its grid"]
    base.relevance.append({"role": "V"})
    base.seconds = 2.0
    readout = _report(np.ones(3))
    readout.chosen["y_bandwidth"] = {1: 0.5}
    readout.notes.append("y_bandwidth (treated) chose the largest value")
    readout.seconds = 0.5
    merged = with_readout(base, readout)
    assert [c.parameter for c in merged.curves] == ["lam1", "y_bandwidth"]
    assert merged.curves[1] is readout.curves[0]
    assert merged.chosen == {"lam1": {1: 2.0}, "y_bandwidth": {1: 0.5}}
    assert merged.notes == ["lam1 note", "y_bandwidth (treated) chose the largest value"]
    assert merged.relevance == [{"role": "V"}] and merged.seconds == 2.5
    assert len(base.curves) == 2 and base.chosen["y_bandwidth"] == {1: 1.0} and len(base.notes) == 2


_NK = dict(method="neural_kernel", epochs=(15, 10), patience=4, hidden=(8,), M=6, progress=False, seed=1,
           location=None, n_rep=1)


def _nk(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(F, data, **{**_NK, **kw})


def test_neural_kernel_compares_its_weight_decays_as_whole_fits(monkeypatch):
    """tune="auto": one curve over NEURAL_KERNEL_DECAY_FITS; the fit kept is the fit at the chosen decay, exactly
    the fit that value given by hand makes (same folds, seeds and tuning).  The threshold is lowered so that the
    lowest criterion wins, which makes a value other than the default likely on this small fit."""
    pytest.importorskip("torch")
    import ccme.location
    import ccme.tuning

    monkeypatch.setattr(ccme.tuning, "NEURAL_KERNEL_DECAY_FITS", (1.0, 2.0, 4.0))    # off by default (measured)
    monkeypatch.setattr(ccme.location, "AUTO_THRESHOLD", -np.inf)
    data = paper_simulation(300, seed=3)
    res = _nk(data)
    (curve,) = [c for c in res.tuning.curves if c.parameter == "weight_decay"]
    np.testing.assert_array_equal(curve.values, [1.0, 2.0, 4.0])
    chosen = res.tuning.chosen["weight_decay"]
    assert chosen == curve.chosen == curve.values[np.argmin(curve.criterion)]
    assert res.hyperparameters["training"].weight_decay == (chosen, chosen)
    by_hand = _nk(data, weight_decay=chosen)
    assert not any(c.parameter == "weight_decay" for c in by_hand.tuning.curves)
    y = np.linspace(-10.0, 40.0, 11)
    np.testing.assert_array_equal(res.density(y, newdata=PAPER_PROFILES), by_hand.density(y, newdata=PAPER_PROFILES))
    assert res.tuning.chosen["y_bandwidth"] == by_hand.tuning.chosen["y_bandwidth"]
    assert res.timing["tuning"] > by_hand.timing["tuning"]
    (row,) = [line for line in str(res.summary()).splitlines() if line.strip().startswith("Weight decay")]
    assert row.split()[2:6] == [f"{chosen:g}", "of", "3", "values"] and "(read-out criterion" in row


def test_no_comparison_where_the_decay_is_given_or_nothing_is_tuned(monkeypatch):
    pytest.importorskip("torch")
    import ccme.tuning

    data = paper_simulation(200, seed=4)
    assert ccme.tuning.NEURAL_KERNEL_DECAY_FITS == () and "weight_decay" not in _nk(data).tuning.chosen
    monkeypatch.setattr(ccme.tuning, "NEURAL_KERNEL_DECAY_FITS", (1.0, 2.0, 4.0))
    for res in (_nk(data, weight_decay=1.0), _nk(data, tune="none")):
        assert "weight_decay" not in res.tuning.chosen
    assert "weight_decay_fits" not in ccme.tuning.resolve_tune("auto", "deep_feature", set())
    assert ccme.tuning.resolve_tune("auto", "neural_kernel", set())["weight_decay_fits"] == (1.0, 2.0, 4.0)


def test_the_default_is_kept_with_a_note_where_the_criterion_was_not_computed(monkeypatch):
    """A bivariate outcome with a Laplace read-out keeps σ_y's rule (no closed form), so there is no criterion to
    compare whole fits by: the default decay stays, no other fit is made, and a note says why."""
    pytest.importorskip("torch")
    import ccme.tuning

    monkeypatch.setattr(ccme.tuning, "NEURAL_KERNEL_DECAY_FITS", (1.0, 2.0, 4.0))
    rng = np.random.default_rng(5)
    n = 200
    v, w = rng.standard_normal(n), rng.standard_normal(n)
    a = (rng.uniform(size=n) < 0.5).astype(int)
    frame = pd.DataFrame({"y1": v + a + rng.standard_normal(n), "y2": w + rng.standard_normal(n), "a": a, "v": v,
                          "w": w})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ccme.fit("y1 + y2 ~ a | v | w", frame, **{**_NK, "y_kernel": "laplace"})
    assert "weight_decay" not in res.tuning.chosen
    assert res.hyperparameters["training"].weight_decay == (2.0, 2.0)
    assert any(n.startswith("weight_decay: the default kept") for n in res.tuning.notes)
