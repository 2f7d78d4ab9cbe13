"""``ccme.fit(..., client=)`` (ccme.distributed): the low-rank path on a Dask LocalCluster equals the local fit."""

import logging
import warnings

import numpy as np
import pytest
from distributed import Client, LocalCluster

import ccme
from ccme.distributed import DistributedLowRankFoldArm
from ccme.errors import NotFittedError, ParameterError
from ccme.estimators.lowrank import LowRankFoldArm

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
#: A landmark pool smaller than the folds' parts: the extension rounds of the landmark selection run on the workers.
SMALL_POOL = {"landmark_pool": 400, "max_rank": 350}
#: The documented agreement with the local fit (measured: below 1e-14, from the order of the partition sums).
RTOL = 1e-8


@pytest.fixture(scope="module")
def client():
    # Two worker processes on the loopback interface; the dashboard on a free port (":0"), so that a busy
    # port 8787 does not raise distributed's "Port 8787 is already in use" warning.  The scheduler runs in this
    # process: its logger (and the workers', silence_logs) at errors only, so its start/stop messages stay out
    # of the test report.
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0", silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
            yield c
    finally:
        logger.setLevel(level)


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(2000, seed=1)


def _fit(data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)  # the simulation's weak overlap: clipping is not tested here
        return ccme.fit(FORMULA, data, seed=3, tune="none", **kwargs)


def _relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def pair(client, data):
    """(local, distributed) doubly robust fits with the small pool, 5 partitions."""
    return _fit(data, approx="lowrank", **SMALL_POOL), _fit(data, client=client, partitions=5, **SMALL_POOL)


def _check_equal(local, dist):
    grid = local.default_grid(100)
    for arm in (local.arms if local.design.treatment.binary else local.levels):
        for lp, dp in zip(local.embedding(arm).parts, dist.embedding(arm).parts):
            assert isinstance(dp, DistributedLowRankFoldArm) and isinstance(lp, LowRankFoldArm)
            # the same pool, pivots and extension rounds: the same landmarks, bit for bit
            np.testing.assert_array_equal(dp.v_map.landmarks, lp.v_map.landmarks)
            if lp.x_map is not None:
                np.testing.assert_array_equal(dp.x_map.landmarks, lp.x_map.landmarks)
            assert dp.ranks == lp.ranks
            # the stored float32 features bit for bit; the first stage's loadings Ψ₀M to one float32 unit in the
            # last place: M solves an r₀ × r sum, which the partitions add in another order, so a float64 value
            # near a float32 rounding boundary may round the other way (one of 155 507 did)
            gathered = dp.gather()
            np.testing.assert_array_equal(gathered.Phi, lp.Phi)
            np.testing.assert_array_max_ulp(gathered.loadings0, lp.loadings0, maxulp=1)
        expected = local.density(grid, arm=arm, normalize=False)
        assert _relative(dist.density(grid, arm=arm, normalize=False), expected) < RTOL
        assert _relative(dist.cdf(grid, arm=arm), local.cdf(grid, arm=arm)) < RTOL


def test_extension_rounds_and_fit_equal_the_local_fit(pair):
    local, dist = pair
    part = dist.embedding(1).parts[0]
    assert part.ranks["V"] > 0 and len(part.units) > SMALL_POOL["landmark_pool"]  # the pool is a subsample
    _check_equal(local, dist)
    V = np.asarray(ccme.datasets.PAPER_PROFILES[["x1", "x2", "x3", "x4", "x5"]], dtype=float)
    atoms_l, c_l = local.embedding(0).parts[1].weights(V)
    atoms_d, c_d = dist.embedding(0).parts[1].weights(V)
    np.testing.assert_array_equal(atoms_d, atoms_l)
    assert _relative(c_d, c_l) < RTOL
    assert "row partitions on 2 workers" in str(dist.summary(n_boot=0))


@pytest.mark.parametrize("mode", ["ipw", "onestep"])
def test_modes_equal_the_local_fit(client, data, mode):
    # the default pool (all units): the landmarks of one pivoted Cholesky factorisation, Φ formed on the workers
    _check_equal(_fit(data, mode=mode, approx="lowrank"), _fit(data, mode=mode, client=client))


def test_three_arms_equal_the_local_fit(client):
    """A treatment with three levels: every arm's distributed fit equals the local low-rank one."""
    three = ccme.datasets.three_arm_simulation(1500, seed=2)
    fit = dict(seed=3, tune="none", **SMALL_POOL)
    _check_equal(ccme.fit("y ~ a | x1 + x2 | .", three, approx="lowrank", **fit),
                 ccme.fit("y ~ a | x1 + x2 | .", three, client=client, **fit))


def test_bands_equal_the_local_bands(pair):
    local, dist = pair
    expected = local.bands(n_boot=49, seed=1)
    got = dist.bands(n_boot=49, seed=1)
    for name in ("estimate", "lower", "upper", "lower_simultaneous", "upper_simultaneous"):
        assert _relative(getattr(got, name), getattr(expected, name)) < RTOL


def test_save_and_load_give_a_local_low_rank_fit(pair, tmp_path):
    local, dist = pair
    dist.save(tmp_path / "fit.ccme")
    loaded = ccme.load(tmp_path / "fit.ccme")
    assert all(type(p) is LowRankFoldArm for arm in (1, 0) for p in loaded.embedding(arm).parts)
    gathered = dist.embedding(1).parts[0].gather()
    stored = local.embedding(1).parts[0]
    assert gathered.Phi.dtype == np.float32 and gathered.Phi.shape == stored.Phi.shape
    np.testing.assert_array_equal(gathered.atom_units, stored.atom_units)
    grid = local.default_grid(60)
    for arm in (1, 0):
        assert _relative(loaded.density(grid, arm=arm), local.density(grid, arm=arm)) < RTOL


def test_a_closed_client_is_named(client, data):
    with Client(client.cluster) as other:
        res = _fit(data.iloc[:600], client=other, partitions=3)
    with pytest.raises(NotFittedError, match="client is closed"):
        res.density([0.0, 1.0], arm=1)


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "deep_feature"}, r"method='deep_feature' has no distributed form.*\['ridge'\]"),
    ({"approx": "exact"}, "approx='lowrank'"),
    ({"first_stage": "forest"}, "first_stage='kernel'"),
    ({"partitions": 0}, "positive integer"),
    ({"partitions": 5000}, r"more than the number of units \(2000\)"),
])
def test_refusals(client, data, kwargs, message):
    with pytest.raises(ParameterError, match=message):
        _fit(data, client=client, **kwargs)


def test_refusals_without_a_cluster(data):
    with pytest.raises(ParameterError, match="`partitions` needs `client=`"):
        _fit(data, partitions=4)
    with pytest.raises(ParameterError, match="must be a dask.distributed.Client"):
        _fit(data, client="tcp://127.0.0.1:8786")


def test_a_dask_dataframe_is_the_same_fit(client, data):
    """A dask DataFrame as data: the formula's columns computed once, then the same fit as from pandas."""
    import dask.array
    import dask.dataframe

    frame = data.assign(unused=np.arange(len(data)))
    lazy = dask.dataframe.from_pandas(frame, npartitions=4)
    from_pandas = _fit(frame, client=client, partitions=3)
    from_dask = _fit(lazy, client=client, partitions=3)
    grid = from_pandas.default_grid(50)
    for arm in (1, 0):
        np.testing.assert_array_equal(from_dask.density(grid, arm=arm), from_pandas.density(grid, arm=arm))
    assert "unused" not in from_dask.design.x_names
    local = _fit(lazy, approx="lowrank")  # without a client: dask's default scheduler computes the columns
    np.testing.assert_array_equal(local.density(grid, arm=1), _fit(frame, approx="lowrank").density(grid, arm=1))
    with pytest.raises(ParameterError, match="not a dask DataFrame"):
        _fit(dask.array.zeros((10, 3)), client=client)


def test_a_location_stage_equals_the_local_fit(client, data):
    """The location stage runs here before the cluster sees the data: the workers fit the residual outcome."""
    local = _fit(data, approx="lowrank", location="linear", **SMALL_POOL)
    dist = _fit(data, client=client, partitions=5, location="linear", **SMALL_POOL)
    assert dist.location is not None
    _check_equal(local, dist)
