"""The bias-aware bands and intervals give back the V covariates the tuning dropped (ccme.bootstrap.restored_v_bandwidths).

With a V covariate dropped (infinite bandwidth) the estimate does not depend
on it, and no iterated Tikhonov order can reduce the bias that leaves at a
V-point where it matters; the bias-aware bands and intervals are therefore
computed from the second stage refitted with each dropped group at the
widest finite bandwidth of the search's range (16 times its rule's).  The
twin here is a fit given that kernel (and every other tuned choice)
explicitly: its bands and intervals must be the same numbers, while the
reported estimate stays the tuned fit's.
"""

import warnings

import numpy as np
import pytest

import ccme
from ccme.bootstrap import RESTORE_FACTOR, RESTORE_NOTE, dropped_v_groups, restored_v_bandwidths
from ccme.errors import ParameterError
from ccme.estimators.base import linear_terms
from ccme.kernels import Kernel, median_bandwidth
from ccme.tuning import ARD_LOG2_RANGE

FORMULA = "y ~ a | x1 + z | x3 + x4"


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=2, **kwargs)


@pytest.fixture(scope="module")
def data():
    """The paper's simulation with a pure-noise covariate z in V, which the tuning drops (seed 1, n = 300)."""
    frame = ccme.datasets.paper_simulation(300, seed=1).copy()
    frame["z"] = np.random.default_rng(1).standard_normal(len(frame))
    return frame


@pytest.fixture(scope="module")
def dropped(data):
    res = _fit(data)
    assert dropped_v_groups(res) == ["z"] and np.isinf(res.kernels["v"].bandwidth_array[1])
    return res


@pytest.fixture(scope="module")
def twin(data, dropped):
    """The same fit with z at the restored bandwidth and every other choice of ``dropped`` given, not tuned."""
    chosen = dropped.tuning.chosen
    v_bandwidth = np.where(np.isinf(dropped.kernels["v"].bandwidth_array), restored_v_bandwidths(dropped),
                           dropped.kernels["v"].bandwidth_array)
    return _fit(data, tune="none", x_bandwidth=chosen["x_bandwidth"], v_bandwidth=list(v_bandwidth),
                lam0=chosen["lam0"], lam1=chosen["lam1"], lam1_plugin=chosen["lam1_plugin"],
                propensity=dropped.propensity_scores, clip=dropped.clip)


def test_the_restored_bandwidths_are_the_widest_of_the_search_at_the_dropped_columns(dropped):
    restore = restored_v_bandwidths(dropped)
    rule = median_bandwidth(dropped.design.V, dropped.seed, groups=dropped.kernels["v"].groups)
    assert RESTORE_FACTOR == 2.0 ** ARD_LOG2_RANGE[1] == 16.0
    assert np.isinf(restore[0]) and restore[1] == RESTORE_FACTOR * rule[1] and np.isfinite(rule[1])


def test_nothing_is_restored_without_a_dropped_group(data):
    assert restored_v_bandwidths(_fit(data, tune="none")) is None  # no per-group search
    res = _fit(data, v_bandwidth=[2.0, 3.0])  # V bandwidths given: never searched, never dropped
    assert dropped_v_groups(res) == [] and restored_v_bandwidths(res) is None


def test_kernel_restored():
    assert Kernel("gaussian", (1.0, np.inf, np.inf)).restored((9.0, 2.0, np.inf)).bandwidth == (1.0, 2.0, np.inf)
    with pytest.raises(ParameterError, match="restored by as many positive"):
        Kernel("gaussian", (1.0, np.inf)).restored((1.0,))


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_intervals_are_those_of_the_fit_with_the_restored_kernel(data, dropped, twin):
    v = data[["x1", "z"]].iloc[:4]
    ours = dropped.effect(newdata=v, q=(0.5,), n_boot=99, seed=1)
    theirs = twin.effect(newdata=v, q=(0.5,), n_boot=99, seed=1)
    for term in ("mean_diff", "mmd"):  # not read out with the arms' tuned outcome kernels, which the twin lacks
        a, b = ours[ours["term"] == term], theirs[theirs["term"] == term]
        np.testing.assert_allclose(a[["std_error", "conf_low", "conf_high"]].to_numpy(),
                                   b[["std_error", "conf_low", "conf_high"]].to_numpy(), rtol=1e-9, atol=1e-12)
    # the reported estimate stays the tuned fit's, which ignores z
    md = ours[ours["term"] == "mean_diff"]["estimate"].to_numpy()
    same_x1 = data[["x1", "z"]].iloc[:4].assign(z=0.0)
    np.testing.assert_allclose(md, dropped.effect(newdata=same_x1, n_boot=0).query("term == 'mean_diff'")["estimate"])
    assert RESTORE_NOTE in ours.attrs["interval"] and "z" in ours.attrs["interval"]
    assert RESTORE_NOTE not in theirs.attrs["interval"]


def test_bands_are_those_of_the_fit_with_the_restored_kernel(data, dropped, twin):
    v = data[["x1", "z"]].iloc[:3]
    y = np.linspace(-5, 30, 40)
    ours = dropped.bands(0.9, newdata=v, arm=1, y=y, n_boot=99, seed=3)
    theirs = twin.bands(0.9, newdata=v, arm=1, y=y, n_boot=99, seed=3)
    for name in ("lower", "upper", "lower_simultaneous", "upper_simultaneous", "estimate_simultaneous"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-9, atol=1e-12)
    assert RESTORE_NOTE in ours.target and RESTORE_NOTE not in theirs.target
    plain = dropped.bands(0.9, newdata=v, arm=1, y=y, n_boot=99, seed=3, target="regularised")
    assert RESTORE_NOTE not in plain.target  # around the fit as it is, which ignores z


def test_the_low_rank_refit_restores_too(data):
    res = _fit(data, approx="lowrank")
    restore = restored_v_bandwidths(res)
    assert restore is not None
    part = linear_terms(res.embedding(1).parts[0])[0]
    refit = part.undersmoothed(1.0, 1.0, res.design.V[part.units], restore=restore)
    assert refit.v_map.kernel.bandwidth[1] == restore[1] and np.isinf(part.v_map.kernel.bandwidth[1])
    assert refit.v_map.kernel.bandwidth[0] == part.v_map.kernel.bandwidth[0]


@pytest.mark.filterwarnings("ignore:the smaller arm compared:ccme.CcmeWarning")  # small data: the calibration caveat
def test_a_loaded_fit_gives_back_the_same_covariates(data, dropped, tmp_path):
    """What the restoring needs (the relevance table, the V kernel, V and the seed) is saved with the fit."""
    back = ccme.load(dropped.save(tmp_path / "dropped.ccme"))
    np.testing.assert_array_equal(restored_v_bandwidths(back), restored_v_bandwidths(dropped))
    v = data[["x1", "z"]].iloc[:2]
    ours = dropped.effect(newdata=v, q=(0.5,), n_boot=49, seed=4)
    theirs = back.effect(newdata=v, q=(0.5,), n_boot=49, seed=4)
    np.testing.assert_allclose(ours[["conf_low", "conf_high"]].to_numpy(), theirs[["conf_low", "conf_high"]].to_numpy(),
                               rtol=1e-12, atol=1e-12)
