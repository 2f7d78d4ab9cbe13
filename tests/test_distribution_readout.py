"""The CDF and its functionals are read out with their own, narrower kernel (ccme.tuning.distribution_kernel)."""

import warnings

import numpy as np
import pytest
from scipy.stats import norm

import ccme
from ccme.kernels import Kernel
from ccme.tuning import DISTRIBUTION_RATE, distribution_kernel


@pytest.fixture(scope="module")
def res():
    data = ccme.datasets.paper_simulation(500, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ccme.fit("y ~ a | x1 | x2 + x3", data, seed=4)


def test_rule_is_the_density_bandwidth_at_the_cdf_rate(res):
    assert DISTRIBUTION_RATE == pytest.approx(1 / 3 - 1 / 5)
    for arm in (1, 0):
        emb = res.embedding(arm)
        n_arm = int(np.sum(res.design.A == arm))
        h, h_cdf = emb.y_kernel.bandwidth[0], emb.cdf_kernel.bandwidth[0]
        assert h_cdf == pytest.approx(h * n_arm ** (-2 / 15), rel=1e-12)
        assert emb.cdf_kernel.name == emb.y_kernel.name
        assert f"n = {n_arm}" in emb.cdf_kernel.rule
    wide = distribution_kernel(Kernel("laplace", (2.0, 4.0)), 10**5)
    assert wide.name == "laplace" and wide.bandwidth == pytest.approx((2.0 * 10 ** (-2 / 3), 4.0 * 10 ** (-2 / 3)))


def test_cdf_quantile_and_density_read_out_with_their_kernels(res):
    """A numpy twin from the atoms and weights: F̂(y) = Σ c_k Φ((y − y_k)/h_F) / Σ c_k, p̂ with h."""
    v = ccme.datasets.PAPER_PROFILES
    emb = res.embedding(1)
    atoms, weights = emb.weights(v=v)
    y = np.linspace(atoms.min() - 1, atoms.max() + 1, 50)
    h, h_cdf = emb.y_kernel.bandwidth[0], emb.cdf_kernel.bandwidth[0]
    raw_cdf = weights.T @ norm.cdf((y[None, :] - atoms) / h_cdf)
    raw_density = weights.T @ (norm.pdf((y[None, :] - atoms) / h) / h)
    np.testing.assert_allclose(emb.cdf(y, v=v, normalize=False), raw_cdf, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(emb.density(y, v=v, normalize=False), raw_density, rtol=1e-9, atol=1e-12)
    # the quantiles and the effect table's QTEs invert that CDF
    grid = res.fine_grid()
    same = emb.with_readout(emb.cdf_kernel)
    np.testing.assert_array_equal(emb.quantile([0.25, 0.5], v=v, grid=grid), same.quantile([0.25, 0.5], v=v, grid=grid))
    smooth = emb.with_readout(emb.y_kernel).quantile([0.25], v=v, grid=grid)
    assert not np.allclose(emb.quantile([0.25], v=v, grid=grid), smooth)
    qte = res.effect(newdata=v, q=(0.5,))
    qte = qte[qte["term"] == "qte"]["estimate"].to_numpy()
    expected = (emb.quantile([0.5], v=v, grid=grid) - res.embedding(0).quantile([0.5], v=v, grid=grid))[:, 0]
    np.testing.assert_allclose(qte, expected, rtol=1e-12)


def test_with_readout_sets_both_kernels_unless_told(res):
    emb = res.embedding(0)
    k, k_cdf = Kernel("gaussian", (2.0,)), Kernel("gaussian", (0.5,))
    assert emb.with_readout(k).cdf_kernel == k
    both = emb.with_readout(k, cdf_kernel=k_cdf)
    assert both.y_kernel == k and both.cdf_kernel == k_cdf and "CDFs with" in repr(both)
    with pytest.raises(ccme.ParameterError, match="read-out kernel"):
        emb.with_readout(k, cdf_kernel=Kernel("gaussian", (1.0, 1.0)))
    with pytest.raises(ccme.ParameterError, match="feature"):
        emb.readout_kernel("quantile")


def test_saved_kernels_round_trip_and_older_files_read_cdfs_with_the_density_kernel(res):
    state = res.to_state()
    back = ccme.CCMEResult.from_state(state)
    for arm in (1, 0):
        assert back.embedding(arm).cdf_kernel == res.embedding(arm).cdf_kernel
    for node in state["embeddings"].values():
        del node["cdf_readout"]
    older = ccme.CCMEResult.from_state(state)
    for arm in (1, 0):
        assert older.embedding(arm).cdf_kernel == res.embedding(arm).y_kernel
