"""Thread safety and reproducibility of the ridge CCME (the neural estimators' across thread counts: to rounding).

Fits in several Python threads at once equal sequential fits bit for bit (the
compiled core releases the GIL and holds no global state); concurrent first
uses of one result build each arm once; the same seed gives bit-identical
results for any OpenMP thread count, set by ``n_threads=`` and by
``OMP_NUM_THREADS`` in fresh processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import ccme

FORMULA = "y ~ a | x1 + x2 | x3 + x4"
SRC = str(Path(ccme.__file__).resolve().parents[1])
#: Small grids keep the tuning (its compiled, multithreaded LOO path included) in every fit at a fraction of the cost.
TUNE = {"lam0": [1e-3, 1e-2], "lam1": [1e-3, 1e-2]}


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(250, seed=11)


def _fit(data, seed, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit(FORMULA, data, seed=seed, **{"tune": TUNE, **kwargs})


def _outputs(res) -> dict:
    grid = res.default_grid(80)
    out = {}
    for arm in (1, 0):
        out[f"density{arm}"] = res.density(grid, arm=arm, normalize=False)
        out[f"cdf{arm}"] = res.cdf(grid, newdata=res.profiles(), arm=arm)
        out[f"mean{arm}"] = res.mean(arm=arm)
    out["scores"] = res.propensity_scores
    return out


def _assert_identical(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].tobytes() == b[key].tobytes(), key


def test_concurrent_fits_equal_sequential_fits(data):
    """Three fits (tuning included) in three threads; one OpenMP thread each keeps two cores from thrashing."""
    seeds = [1, 2, 3]
    sequential = [_outputs(_fit(data, s, n_threads=1)) for s in seeds]
    with ThreadPoolExecutor(max_workers=3) as pool:
        concurrent = list(pool.map(lambda s: _outputs(_fit(data, s, n_threads=1)), seeds))
    for a, b in zip(sequential, concurrent):
        _assert_identical(a, b)


def test_concurrent_first_use_of_one_result(data):
    """Eight threads ask for densities of both arms of an unused result: each arm is built once, all agree."""
    res = _fit(data, 5, tune="none")
    builds = {1: 0, 0: 0}
    for arm in (1, 0):
        cell = res.embeddings[arm]._parts  # the lazily built parts, shared by the embedding's copies
        original = cell._build

        def counted(original=original, arm=arm):
            builds[arm] += 1
            return original()

        cell._build = counted
    grid = res.default_grid(120)
    profiles = res.profiles()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: res.density(grid, newdata=profiles, arm=i % 2), range(16)))
    assert builds == {1: 1, 0: 1}
    for i, values in enumerate(results):
        assert values.tobytes() == res.density(grid, newdata=profiles, arm=i % 2).tobytes()


def test_same_result_for_any_thread_count(data):
    reference = _outputs(_fit(data, 7, n_threads=1))
    for threads in (2, 4):
        _assert_identical(reference, _outputs(_fit(data, 7, n_threads=threads)))
    _assert_identical(reference, _outputs(_fit(data, 7)))  # a repeated run with the default


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_neural_estimators_agree_across_thread_counts_to_rounding(data, method):
    """The neural estimators with the default tuning (input relevance, read-out, location "auto") and few epochs:
    ``n_threads`` also sizes torch's pool during training, whose multi-threaded reductions round differently from
    one thread's, so the fits agree to rounding, not bit for bit (measured: networks' outputs 1e-16 apart, densities
    3e-17 on a peak of 0.05, every tuning choice the same); the tolerance, 1e-10 relative, leaves six orders of
    magnitude for other machines' kernels.  On another machine (2026-12-02) training's rounding grew to 1.4e-13 on
    Deep Feature's densities (peak 0.05; 4e-10 relative where a density is 3e-4), so the tolerance is relative to
    each output's largest value, 1e-9 of it (3e-12 needed there); a thread-dependent result would differ by ~1e-3."""
    pytest.importorskip("torch")
    options = {"method": method, "tune": "auto", "epochs": (30, 20), "progress": False}
    one, two = (_fit(data, 7, n_threads=threads, **options) for threads in (1, 2))
    assert one.tuning.chosen == two.tuning.chosen
    reference, other = _outputs(one), _outputs(two)
    for key in reference:
        scale = float(np.abs(reference[key]).max())
        np.testing.assert_allclose(other[key], reference[key], rtol=0, atol=max(1e-9 * scale, 1e-14), err_msg=key)
    _assert_identical(reference, _outputs(_fit(data, 7, n_threads=1, **options)))   # one thread: bit for bit


_SCRIPT = """
import sys, warnings
import numpy as np
import ccme
warnings.simplefilter("ignore")
data = ccme.datasets.paper_simulation(250, seed=11)
res = ccme.fit({formula!r}, data, seed=7, tune={tune!r}, approx={approx!r}, landmark_pool=60, max_rank=60)
grid = res.default_grid(80)
np.savez(sys.argv[1], d1=res.density(grid, arm=1, normalize=False), d0=res.density(grid, arm=0, normalize=False),
         m1=res.mean(arm=1), scores=res.propensity_scores)
"""


@pytest.mark.parametrize("approx", ["exact", "lowrank"])
def test_same_result_across_omp_num_threads(tmp_path, approx):
    """Fresh processes with OMP_NUM_THREADS = 1, 2, 4 (OpenMP and BLAS pools sized at start-up) agree bit for bit.

    The low-rank path with a landmark pool smaller than n, so that its extension rounds run too.
    """
    script = tmp_path / "fit.py"
    script.write_text(_SCRIPT.format(formula=FORMULA, tune={**TUNE, "y_bandwidth": [0.5, 1.0]}, approx=approx))
    outputs = []
    for threads in (1, 2, 4):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
        out = tmp_path / f"out{threads}.npz"
        subprocess.run([sys.executable, str(script), str(out)], env=env, check=True, timeout=120)
        with np.load(out, allow_pickle=False) as arrays:
            outputs.append({k: arrays[k] for k in arrays.files})
    for other in outputs[1:]:
        _assert_identical(outputs[0], other)


def test_multivariate_readout_tuning_is_the_same_for_any_thread_count():
    """A bivariate outcome's read-out criterion (∫p̂² in closed form, ccme.tuning.integrated_square, whose Gram
    blocks are built by the multithreaded core) gives the same curves, choice and density for 1, 2 and 4 threads."""
    import pandas as pd

    rng = np.random.default_rng(5)
    n = 300
    v, w = rng.standard_normal(n), rng.standard_normal(n)
    a = (rng.uniform(size=n) < 1 / (1 + np.exp(-0.5 * (v + w)))).astype(int)
    frame = pd.DataFrame({"y1": v + a + w + 0.5 * rng.standard_normal(n), "y2": 0.5 * v + rng.standard_normal(n),
                          "a": a, "v": v, "w": w})
    tune = {"lam1": (0.05,), "y_bandwidth": (0.5, 0.7, 1.0, 1.4)}
    fits = [ccme.fit("y1 + y2 ~ a | v | w", frame, seed=3, tune=tune, lam0=0.02, lam1_plugin=0.05, n_threads=t)
            for t in (1, 2, 4)]
    grid = np.column_stack([np.linspace(-2, 3, 7), np.linspace(-2, 2, 7)])
    reference = fits[0]
    assert set(reference.tuning.chosen["y_bandwidth"]) == {0, 1}   # tuned, not the rule
    for res in fits[1:]:
        assert res.tuning.chosen["y_bandwidth"] == reference.tuning.chosen["y_bandwidth"]
        for ours, theirs in zip(res.tuning.curves, reference.tuning.curves):
            assert ours.criterion.tobytes() == theirs.criterion.tobytes(), ours
        for arm in (1, 0):
            assert (res.density(grid, arm=arm).tobytes() == reference.density(grid, arm=arm).tobytes())
