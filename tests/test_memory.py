"""The memory guard (ccme.memory): an n × n allocation beyond the available memory is a clear ccme error."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import ccme
from ccme import memory
from ccme.errors import MemoryBudgetError, ParameterError
from ccme.estimators.ridge import factor_bytes

FORMULA = "y ~ a | x1 + x2 | x3"


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(300, seed=2)


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=1, tune="none", **kwargs)


def test_fit_refuses_factors_beyond_available_memory(data, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 200_000)
    with pytest.raises(MemoryBudgetError) as info:
        _fit(data)
    message = str(info.value)
    assert all(word in message for word in ("GB", "lowrank", "client", "folds", "deep_feature"))
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ccme.CcmeError)


@pytest.mark.parametrize("mode", ["dr", "ipw", "pi", "onestep"])
def test_factor_bytes_is_what_the_fit_holds(data, mode):
    """The up-front estimate equals the bytes of the distinct Cholesky factors once both arms are built."""
    res = _fit(data, mode=mode, folds=3)
    held = {}
    for arm in (1, 0):
        for part in res.embeddings[arm].parts:
            for L in (part.L_V, part.L_X0):
                if L.size:
                    held[id(L)] = L.nbytes
    assert sum(held.values()) == factor_bytes(mode, res.design.A, res.folds)


def test_each_factor_is_checked_when_an_arm_is_built(data, monkeypatch):
    """Arms are built on first use: the guard fires then too, naming the factor and its size."""
    res = _fit(data)
    monkeypatch.setattr(memory, "available_bytes", lambda: 10_000)
    with pytest.raises(MemoryBudgetError, match=r"first-stage Cholesky factor .*\(\d+ × \d+\) needs about"):
        res.density(res.default_grid(20), arm=0)


def test_tuning_and_deep_feature_are_guarded(data, monkeypatch):
    from ccme.kernels import Kernel
    from ccme.tuning import _spectrum

    monkeypatch.setattr(memory, "available_bytes", lambda: 100_000)
    X = np.ascontiguousarray(data[["x1", "x2"]].to_numpy())
    with pytest.raises(MemoryBudgetError, match=r"tuning's low-rank kernel factors \(300 × 300\)"):
        _spectrum(X, Kernel("gaussian", (1.0, 1.0)), 1.0, 1e-3, 0)
    pytest.importorskip("torch")
    res = _fit(data, method="deep_feature", epochs=(2, 2), progress=False)  # the networks train on first use
    monkeypatch.setattr(memory, "available_bytes", lambda: 4_000)
    with pytest.raises(MemoryBudgetError, match="Deep Feature loss's kernel block"):
        res.mean(arm=1)


def test_environment_limit_and_parsing(monkeypatch):
    monkeypatch.setenv(memory.ENV_VAR, "1.5GB")
    assert memory.available_bytes() == 1_500_000_000
    memory.check_allocation(1e9, "a test allocation")
    with pytest.raises(MemoryBudgetError, match=r"needs about 2 GB of memory, and only 1.5 GB"):
        memory.check_allocation(2e9, "a test allocation")
    assert memory.parse_bytes("512MiB") == 512 * 2**20 and memory.parse_bytes("1000") == 1000
    for bad in ("lots", "1.5 parsecs", "-3GB"):
        with pytest.raises(ParameterError, match=memory.ENV_VAR):
            memory.parse_bytes(bad)


def test_available_memory_sources(monkeypatch):
    monkeypatch.delenv(memory.ENV_VAR, raising=False)
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as handle:
            line = next(l for l in handle if l.startswith("MemAvailable:"))
        reported = int(line.split()[1]) * 1024
        # memory moves between the two reads; they agree to a few percent
        assert abs(memory.available_bytes() - reported) < 0.05 * reported
    monkeypatch.setattr(memory, "_meminfo_available", lambda: None)
    fallback = memory.available_bytes()
    assert fallback is None or fallback > 0
    monkeypatch.setattr(memory, "_sysconf_available", lambda: None)
    assert memory.available_bytes() is None
    memory.check_allocation(1e30, "anything")  # unknown memory: the guard lets it through
    assert np.isfinite(factor_bytes("dr", np.array([0, 1] * 5), []))
