"""The neural estimators through ccme.fit: statistics, reproducibility, options, the missing-torch error.

Tolerances of the statistical test were measured: integrated squared error
(ISE, arm 1, 500 V-draws) at n = 2000, forest propensity, default options
(Adam, early stopping, and for Deep Feature the validation-loss choice of λ),
seeds 1, 2, 3 (script: ``python benchmarks/bench_neural.py --measure``):

=======================  ========  ========  ========
configuration              seed 1    seed 2    seed 3
=======================  ========  ========  ========
deep feature, DR          0.00242   0.00226   0.00326
deep feature, one-step    0.00992   0.01434   0.01519
neural-kernel, DR         0.00273   0.00330   0.00381
neural-kernel, one-step   0.01081   0.01532   0.01598
=======================  ========  ========  ========

(Neural-Kernel's rows remeasured where its atoms became the outcomes (atoms="outcomes"); over the grid, at c303d1b,
DR 0.00258, 0.00309, 0.00403 and one-step 0.01044, 0.01475, 0.01535.  The table was remeasured at c303d1b, where
location="default" became "auto" for the neural estimators; Neural-Kernel's DR kept the plain fit in every seed.
Before it, with the networks' inputs in units of the learned bandwidths
(2050374): DR 0.00213, 0.00348, 0.00326 (Deep Feature) and 0.00258, 0.00309, 0.00403 (Neural-Kernel), one-step
0.01025, 0.01620, 0.01411 and 0.01079, 0.01391, 0.01314; before the input scales DR was 0.00516, 0.00576, 0.00449
(Deep Feature) and 0.00281, 0.00385, 0.00466 (Neural-Kernel); Neural-Kernel's DR before its weight decay and split
second stage 0.00659, 0.00726, 0.00803).  DR / one-step ranges over 0.16–0.25; the test asks for < 0.65 at
seed 1.  The
other tests use ``tune="none"`` and few epochs: they check mechanics, not accuracy.
"""

import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ccme  # noqa: E402
from ccme.datasets import paper_simulation_ise  # noqa: E402
from ccme.estimators import paper_options  # noqa: E402
from ccme.estimators.training import NEURAL_N_REP, MissingDependencyError  # noqa: E402

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
SMALL = "y ~ a | x1 + x2 | x3 + x4"
#: Neural-Kernel's M="auto" at n = 200, 1000, 4000, 8000, 20000 (ccme.estimators.neural_kernel.auto_grid_points).
AUTO_GRID_POINTS_AT = [20, 20, 20, 30, 53]


def _ise(method, mode):
    data = ccme.datasets.paper_simulation(2000, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.OverlapWarning)
        res = ccme.fit(FORMULA, data, method=method, mode=mode, propensity="forest", seed=1, progress=False)
    return paper_simulation_ise(res, arm=1, n_test=500, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_dr_beats_one_step(method):
    assert _ise(method, "dr") < 0.65 * _ise(method, "onestep")


@pytest.fixture(scope="module")
def data():
    return ccme.datasets.paper_simulation(400, seed=5)


def _fit(data, method, **kwargs):
    opts = dict(epochs=(30, 20), progress=False, seed=11, propensity="logistic", tune="none")
    opts.update(kwargs)
    return ccme.fit(SMALL, data, method=method, **opts)


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_same_seed_gives_identical_results(data, method):
    y = np.linspace(-5, 35, 30)
    first = _fit(data, method).density(y, arm=1, normalize=False)
    second = _fit(data, method).density(y, arm=1, normalize=False)
    np.testing.assert_array_equal(first, second)
    other = _fit(data, method, seed=12).density(y, arm=1, normalize=False)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_options_paths_fit_and_report(data, method):
    """Mini-batches, SGD, float32, three folds, both arms: a usable result with history, summary and plot."""
    res = _fit(data, method, folds=3, optimizer="sgd", lr=1e-3, batch_size=64, dtype="float32", validation=0.25,
               patience=5, hidden=(8,))
    y = res.default_grid(100)
    for arm in (1, 0):
        dens = res.density(y, arm=arm)
        assert dens.shape == (400, 100) and np.all(np.isfinite(dens))
        np.testing.assert_allclose(np.trapezoid(dens, y, axis=1), 1.0, rtol=1e-6)
    hist = res.training_history()
    # Neural-Kernel's doubly robust second stage is split: its correction's network trains as stage 3.
    stages = {1, 2, 3} if method == "neural_kernel" else {1, 2}
    assert set(hist["arm"]) == {0, 1} and set(hist["fold"]) == {1, 2, 3} and set(hist["stage"]) == stages
    assert set(hist["repetition"]) == set(range(1, NEURAL_N_REP + 1))  # the neural default repeats the cross-fit
    assert hist["validation_loss"].notna().all()
    assert (hist.groupby(["arm", "repetition", "fold", "stage"])["best"].sum() == 1).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)   # 20 SGD epochs leave some V without positive mass
        text = str(res.summary())
    assert "SGD, momentum 0.9" in text and "batches of 64" in text and "float32" in text
    assert "Treated stage 2" in text
    ax = res.plot_training()
    assert len(ax.get_lines()) > 0


def test_early_stopping_restores_the_best_epoch(data):
    res = _fit(data, "neural_kernel", epochs=(400, 400), validation=0.3, patience=3, mode="ipw")
    hist = res.training_history()
    for _, curve in hist.groupby(["arm", "repetition", "fold", "stage"]):
        best = curve[curve["best"]].iloc[0]
        assert best["validation_loss"] == curve["validation_loss"].min()
        assert len(curve) < 400 and len(curve) == best["epoch"] + 3


def test_paper_options_are_accepted_and_shown(data):
    opts = {**paper_options("deep_feature", 400), "epochs": (5, 5)}
    res = ccme.fit(SMALL, data, method="deep_feature", seed=1, progress=False, propensity="logistic", **opts)
    text = str(res.summary())
    assert "lambda*I, unscaled" in text and "2 hidden layer(s) of 20, 20" in text
    assert np.isfinite(res.density(res.default_grid(50), arm=1)).all()
    with pytest.raises(ccme.ParameterError, match="method"):
        paper_options("ridge", 400)


def test_weight_decay_shrinks_the_networks_and_the_default_is_documented(data):
    """Decoupled weight decay (AdamW) pulls every parameter towards 0 at each step, so the trained networks'
    squared parameter norm is smaller than without; Neural-Kernel's default trains exactly as its documented
    value passed explicitly: "auto", 2 up to n = 1000 units and 2 × 1000 / n beyond."""
    from ccme.estimators import NEURAL_KERNEL_DEFAULTS
    from ccme.estimators.base import value_from_state, value_state
    from ccme.estimators.neural_kernel import auto_weight_decay

    assert NEURAL_KERNEL_DEFAULTS["weight_decay"] == "auto"
    assert [auto_weight_decay(n) for n in (200, 1000, 2000, 4000)] == [2.0, 2.0, 1.0, 0.5]

    def norm(res):
        net = res.embedding(1).parts[0].net            # fold 1's network f(v) of the treated arm
        return sum(float((p.detach() ** 2).sum()) for p in net.parameters())

    y = np.linspace(-5, 35, 30)
    default = _fit(data, "neural_kernel", epochs=(60, 60), validation=0.0, n_rep=1)
    stated = _fit(data, "neural_kernel", epochs=(60, 60), validation=0.0, n_rep=1,
                  weight_decay=auto_weight_decay(len(data)))
    plain = _fit(data, "neural_kernel", epochs=(60, 60), validation=0.0, n_rep=1, weight_decay=0.0)
    decayed = _fit(data, "neural_kernel", epochs=(60, 60), validation=0.0, n_rep=1, weight_decay=(0.5, 0.5))
    np.testing.assert_array_equal(stated.density(y, arm=1, normalize=False), default.density(y, arm=1, normalize=False))
    assert default.params["training"].weight_decay == (2.0, 2.0)
    assert norm(default) < norm(decayed) < 0.9 * norm(plain)
    with pytest.raises(ccme.ParameterError, match="weight_decay"):
        _fit(data, "neural_kernel", epochs=(5, 5), n_rep=1, weight_decay="large")
    assert "weight decay 0.5" in str(decayed.summary()) and "auto: 2 × min(1, 1000 / n)" not in str(decayed.summary())
    assert "auto: 2 × min(1, 1000 / n) = 2 at n = 400" in str(default.summary())
    # Settings stored before the option existed (no weight_decay field) load as trained without decay.
    settings = decayed.params["training"]
    assert settings.weight_decay == (0.5, 0.5)
    state = value_state(settings)
    del state["training"]["weight_decay"]
    assert value_from_state(state).weight_decay == (0.0, 0.0)


def test_grid_points_grow_with_n_and_the_default_is_documented(data, monkeypatch):
    """Neural-Kernel's default M ("auto") is the paper's 20 up to n = 4000 units and grows as
    20 × (n / 4000)^0.6 beyond (rounded), never past the outcomes' distinct values once above 20; a fit under the
    default trains exactly as under the value passed by hand, and its summary states the rule."""
    from ccme.estimators import NEURAL_KERNEL_DEFAULTS
    from ccme.estimators import neural_kernel as nk

    assert NEURAL_KERNEL_DEFAULTS["M"] == "auto"
    assert [nk.auto_grid_points(n) for n in (200, 1000, 4000, 8000, 20000)] == AUTO_GRID_POINTS_AT
    few = np.repeat(np.arange(25.0), 800)[:, None]             # 20000 outcomes, 25 distinct values
    assert nk.auto_grid_points(len(few), few) == min(25, AUTO_GRID_POINTS_AT[-1])
    assert nk.auto_grid_points(len(few), few[few < 10][:, None]) == 20   # never below the paper's 20

    y = np.linspace(-5, 35, 30)
    default = _fit(data, "neural_kernel", epochs=(20, 20), validation=0.0, n_rep=1)
    stated = _fit(data, "neural_kernel", epochs=(20, 20), validation=0.0, n_rep=1, M=20)
    np.testing.assert_array_equal(stated.density(y, arm=1, normalize=False), default.density(y, arm=1, normalize=False))
    assert default.params["M"] == 20 and default.params["grid_points_auto"] == 20
    assert stated.params["grid_points_auto"] is None and "Default M" not in str(stated.summary())
    rule = "auto: 20 × max(1, n / 4000)^0.6, rounded, = 20 at n = 400"
    assert rule in str(default.summary())
    # The rule in a fit: with its scale at 100 units, 400 units get round(20 × 4^0.6) = 46 points.
    monkeypatch.setattr(nk, "AUTO_GRID_POINTS_N", 100)
    grown = _fit(data, "neural_kernel", epochs=(5, 5), validation=0.0, n_rep=1)
    assert grown.params["M"] == 46 and grown.params["grid_points_auto"] == 46
    assert grown.params["grid"].shape == (grown.params["M"], 1)
    with pytest.raises(ccme.ParameterError, match="`M` must be 'auto' or a positive integer"):
        _fit(data, "neural_kernel", epochs=(5, 5), n_rep=1, M="many")


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_weight_decay_is_decoupled_shrinkage(optimizer):
    """With a loss whose gradient is zero, each of E steps only shrinks the parameters by 1 − lr·decay, for Adam
    (AdamW) and SGD with momentum alike: the decay does not pass through the optimiser's step sizes."""
    from ccme.estimators.training import NEURAL_DEFAULTS, resolve_training, train_stage

    settings = resolve_training({**NEURAL_DEFAULTS, "optimizer": optimizer, "lr": 0.01, "weight_decay": (3.0, 0.0),
                                 "epochs": (25, 25), "validation": 0.0, "progress": False})
    model = torch.nn.Linear(3, 2).double()
    start = [p.detach().clone() for p in model.parameters()]

    def flat_loss(batch):
        return 0.0 * sum((p ** 2).sum() for p in model.parameters())

    train_stage(model, flat_loss, 10, settings, 1, torch.Generator().manual_seed(0))
    for p, p0 in zip(model.parameters(), start):
        torch.testing.assert_close(p.detach(), p0 * (1 - 0.01 * 3.0) ** 25, rtol=1e-12, atol=0)
    train_stage(model, flat_loss, 10, settings, 2, torch.Generator().manual_seed(0))   # stage 2: no decay
    for p, p0 in zip(model.parameters(), start):
        torch.testing.assert_close(p.detach(), p0 * (1 - 0.01 * 3.0) ** 25, rtol=1e-12, atol=0)


def test_ridge_has_no_training_history(data):
    res = ccme.fit(SMALL, data, seed=1, propensity="logistic")
    with pytest.raises(ccme.ParameterError, match="no training history"):
        res.training_history()


@pytest.mark.parametrize(
    ("option", "value"),
    [("optimizer", "rmsprop"), ("lr", -1.0), ("epochs", (10, 0)), ("hidden", (20, "x")), ("M", 0),
     ("dtype", "float16"), ("validation", 1.5), ("patience", 0), ("batch_size", 0), ("momentum", 1.0),
     ("weight_decay", -0.1), ("weight_decay", (0.0, float("nan")))],
)
def test_bad_options_name_the_parameter(data, option, value):
    with pytest.raises(ccme.ParameterError, match=option):
        _fit(data, "neural_kernel", **{option: value})


def test_bad_method_specific_options(data):
    with pytest.raises(ccme.ParameterError, match="lam_scaling"):
        _fit(data, "deep_feature", lam_scaling="m")
    with pytest.raises(ccme.ParameterError, match="grid"):
        _fit(data, "neural_kernel", grid="spiral")
    with pytest.raises(ccme.ParameterError, match="unknown hyperparameter"):
        _fit(data, "neural_kernel", lam=0.1)


def test_user_and_random_grids(data):
    grid = np.linspace(0, 30, 7)
    res = _fit(data, "neural_kernel", grid=grid)
    np.testing.assert_array_equal(res.hyperparameters["grid"][:, 0], grid)
    assert res.hyperparameters["M"] == 7
    res = _fit(data, "neural_kernel", grid="random", M=5)
    assert np.all(np.isin(res.hyperparameters["grid"][:, 0], data["y"]))


def test_quantile_grid_is_numpys_quantiles_of_the_distinct_outcomes():
    """grid="quantile": the j/(M − 1) quantiles of the distinct outcome values, from the smallest to the largest (a
    point mass takes one point); refused for a bivariate outcome and for more points than distinct values."""
    from ccme.estimators.neural_kernel import make_grid

    rng = np.random.default_rng(4)
    Y = np.concatenate([np.zeros(300), rng.lognormal(size=200)])[:, None]     # earnings-like: 60% zeros
    grid = make_grid("quantile", Y, 8, seed=0)[:, 0]
    distinct = np.unique(Y[:, 0])
    np.testing.assert_allclose(grid, [np.quantile(distinct, j / 7) for j in range(8)])
    assert grid[0] == 0.0 and grid[-1] == Y.max() and np.sum(grid < distinct[1]) == 1 and np.all(np.diff(grid) > 0)
    with pytest.raises(ccme.ParameterError, match="one-dimensional outcome"):
        make_grid("quantile", np.column_stack([Y, Y]), 8, seed=0)
    with pytest.raises(ccme.ParameterError, match="takes only 3 distinct values"):
        make_grid("quantile", np.array([[0.0], [1.0], [2.0], [1.0]]), 4, seed=0)


def test_blend_grid_is_a_regular_grid_joined_with_interior_quantiles():
    """grid="blend": ceil(M/2) points from min(Y) to max(Y) and the M//2 interior quantiles j/(M//2 + 1) of the
    distinct outcomes, sorted; so a spike of outcomes gets points of its own while the tails keep a regular step."""
    from ccme.estimators.neural_kernel import make_grid

    rng = np.random.default_rng(5)
    Y = np.concatenate([rng.normal(0.0, 0.05, 300), rng.lognormal(1.0, 0.8, 200)])[:, None]   # a spike, a tail
    for M in (7, 8):
        grid = make_grid("blend", Y, M, seed=0)[:, 0]
        distinct = np.unique(Y[:, 0])
        twin = np.sort(np.r_[np.linspace(Y.min(), Y.max(), M - M // 2),
                             [np.quantile(distinct, j / (M // 2 + 1)) for j in range(1, M // 2 + 1)]])
        np.testing.assert_allclose(grid, twin)
        assert len(grid) == M and np.all(np.diff(grid) > 0)
        step = (Y.max() - Y.min()) / (M - M // 2 - 1)
        assert np.sum(np.abs(grid) < 0.2) >= M // 4 and np.max(np.diff(grid)) <= step + 1e-12
    with pytest.raises(ccme.ParameterError, match="one-dimensional outcome"):
        make_grid("blend", np.column_stack([Y, Y]), 8, seed=0)


def test_auto_grid_is_regular_unless_a_regular_cell_holds_a_spike(monkeypatch):
    """grid="auto" (one outcome): the regular grid, unless the densest of its M − 1 cells holds outcomes whose
    standard deviation is under width / SPIKE_RATIO (evenly spread ones have width / √12); then "blend".  The
    statistic against a plain numpy twin, and the rule on a bulk, a bulk with a point mass, a bulk with a narrow
    spike, and a discrete outcome with fewer distinct values than M (always regular)."""
    from ccme.estimators import neural_kernel as nk

    rng = np.random.default_rng(6)
    bulk = rng.normal(5.0, 2.0, 700)
    spike = np.r_[bulk, rng.normal(0.0, 0.02, 300)]

    def twin(y, M):      # the cell's width over its outcomes' standard deviation, by np.histogram's cells
        counts, edges = np.histogram(y, bins=M - 1)
        k = np.argmax(counts)
        inside = y[(y >= edges[k]) & ((y < edges[k + 1]) | (k == M - 2))]
        return (edges[1] - edges[0]) / inside.std()

    for y, resolved in ((bulk, True), (np.r_[bulk, np.zeros(300)], False), (spike, False)):
        assert (twin(y, 20) <= nk.SPIKE_RATIO) == resolved
        assert nk.regular_grid_resolves(y[:, None], 20) == resolved
        assert nk.auto_grid_rule(y[:, None], 20) == ("regular" if resolved else "blend")
        np.testing.assert_array_equal(nk.make_grid("auto", y[:, None], 20, seed=0),
                                      nk.make_grid("regular" if resolved else "blend", y[:, None], 20, seed=0))
    assert 3.0 < twin(bulk, 20) < 4.0 and twin(spike, 20) > 10       # √12 = 3.46 for an even spread
    counts = np.repeat(np.arange(6.0), 50)[:, None]                    # 6 distinct values < M
    assert nk.regular_grid_resolves(counts, 20) and nk.auto_grid_rule(counts, 20) == "regular"
    assert nk.auto_grid_rule(np.column_stack([bulk, bulk]), 20) == "kmeans"
    monkeypatch.setattr(nk, "AUTO_GRID_1D", "quantile")
    assert nk.auto_grid_rule(spike[:, None], 20) == "quantile"


def test_outcome_loadings_are_the_grids_hat_functions_over_the_distinct_outcomes():
    """atoms="outcomes": column j of the loadings is the hat function of grid point j (np.interp of the j-th unit
    vector: 1 at ỹ_j, linear to 0 at its neighbours, the end values beyond the ends) at each distinct outcome times
    its count, normalised to sum 1; an unsorted grid gives the same columns; a grid point with no outcome around
    it stays an atom itself; a bivariate outcome goes to its nearest grid point."""
    from ccme.estimators.neural_kernel import outcome_loadings

    rng = np.random.default_rng(3)
    y = np.r_[rng.normal(0.0, 1.0, 60), np.full(5, 0.5), [-9.0, 9.0]]
    grid = np.array([-3.0, -1.0, 0.0, 0.4, 2.0, 3.0])
    atoms, L = outcome_loadings(grid[:, None], y[:, None])
    values, counts = np.unique(y, return_counts=True)
    H = np.column_stack([np.interp(values, grid, np.eye(len(grid))[j]) * counts for j in range(len(grid))])
    np.testing.assert_array_equal(atoms[:, 0], values)
    np.testing.assert_allclose(L, H / H.sum(axis=0), rtol=1e-12, atol=1e-15)
    shuffled = [3, 0, 5, 1, 4, 2]
    atoms_s, L_s = outcome_loadings(grid[shuffled, None], y[:, None])
    np.testing.assert_array_equal(atoms_s, atoms)
    np.testing.assert_allclose(L_s, L[:, shuffled], rtol=1e-12, atol=1e-15)

    lonely = np.array([-3.0, -1.0, 0.0, 20.0, 40.0])        # nothing lies between 20 and 40
    atoms, L = outcome_loadings(lonely[:, None], y[:, None])
    assert atoms[-1, 0] == 40.0 and L[-1, 4] == 1.0 and L[:-1, 4].sum() == 0.0
    np.testing.assert_allclose(L.sum(axis=0), 1.0)

    Y2 = rng.normal(size=(30, 2))
    centres = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, 50.0]])
    atoms, L = outcome_loadings(centres, Y2)
    units = centres.std(axis=0)                        # "nearest" in units of the grid's spread per column
    nearest = np.argmin((((atoms[:30, None, :] - centres[None]) / units) ** 2).sum(axis=2), axis=1)
    assert np.all(L[np.arange(30), nearest] > 0) and np.count_nonzero(L[:30]) == 30
    assert np.array_equal(atoms[30], centres[2]) and L[30, 2] == 1.0     # no outcome nearest (0, 50)


@pytest.mark.parametrize("method", ["deep_feature", "neural_kernel"])
def test_the_fit_does_not_depend_on_the_outcomes_units(data, method):
    """Y in other units (1000 Y − 50) gives the same estimate, its density divided by 1000: the losses are in units
    of k_Y(0), which Adam's ε follows (``train_stage``'s ``loss_unit``).  With torch's fixed ε a default
    Neural-Kernel fit's density moved by 11% of its maximum for Y in thousands (the paper's simulation, n = 1000),
    and this test failed by up to 4e-3 in density; now the two agree to about 1e-13."""
    moved = data.assign(y=1000.0 * data["y"] - 50.0)
    y = np.linspace(-5, 35, 30)
    for arm in (1, 0):
        plain = _fit(data, method, epochs=(60, 40)).density(y, arm=arm, normalize=False)
        other = _fit(moved, method, epochs=(60, 40)).density(1000.0 * y - 50.0, arm=arm, normalize=False)
        np.testing.assert_allclose(1000.0 * other, plain, rtol=0, atol=1e-9 * np.abs(plain).max())


def test_kmeans_grid_and_nearest_point_follow_each_outcome_columns_units():
    """A bivariate outcome's k-means grid and its nearest-point loadings work in units of each column's spread, so
    an outcome in other units per column (dollars and hours) gets the same grid, mapped, and the same loadings."""
    from ccme.estimators.neural_kernel import make_grid, outcome_loadings

    rng = np.random.default_rng(0)
    Y = rng.normal(size=(300, 2)) * [1.0, 3.0]
    a, b = np.array([1000.0, 0.01]), np.array([-50.0, 7.0])
    grid = make_grid("kmeans", Y, 12, 3)
    moved = make_grid("kmeans", Y * a + b, 12, 3)
    np.testing.assert_allclose((moved - b) / a, grid, rtol=0, atol=1e-10)
    _, L = outcome_loadings(grid, Y)
    _, L_moved = outcome_loadings(moved, Y * a + b)
    np.testing.assert_array_equal(L, L_moved)


def test_outcome_atoms_keep_the_networks_and_spread_their_weights(data):
    """atoms="outcomes" trains the same networks as the grid (the atoms enter only the read-out), so each fold-arm's
    coefficients f(v) are identical, and its weights are the loadings of its arm's second-stage outcomes times
    them: the mass at each v is the grid's, the atoms are the arm's outcomes."""
    grid_fit = _fit(data, "neural_kernel", location=None, atoms="grid")
    spread = _fit(data, "neural_kernel", location=None)         # atoms="outcomes", the default
    V = data[["x1", "x2"]].to_numpy()[:25]
    for arm in (1, 0):
        y_arm = data["y"].to_numpy()[data["a"].to_numpy() == arm]
        for g, s in zip(grid_fit.embedding(arm).parts, spread.embedding(arm).parts):
            np.testing.assert_array_equal(g.coefficients(V), s.coefficients(V))
            np.testing.assert_array_equal(s.grid, g.atoms)
            atoms, c = s.weights(V)
            assert np.all(np.isin(atoms[:, 0], np.r_[y_arm, g.atoms[:, 0]]))
            assert len(atoms) > 2 * len(g.atoms)
            np.testing.assert_allclose(c.sum(axis=0), g.weights(V)[1].sum(axis=0), rtol=1e-10, atol=1e-12)
    assert "atoms: outcomes" in str(spread.summary()) and "atoms: outcomes" not in str(grid_fit.summary())
    with pytest.raises(ccme.ParameterError, match="atoms"):
        _fit(data, "neural_kernel", atoms="quantiles")


def test_correction_decay_factor_scales_only_the_correction_networks_decay(monkeypatch):
    """CORRECTION_DECAY_FACTOR (measured, default 1: the same settings object) multiplies the second stage's weight
    decay for the split stage's correction network and leaves the first stage's."""
    from ccme.estimators import neural_kernel as nk
    from ccme.estimators.training import resolve_training

    settings = resolve_training({**nk.NEURAL_KERNEL_DEFAULTS, "weight_decay": (1.0, 2.0)})
    assert nk._correction_settings(settings) is settings
    monkeypatch.setattr(nk, "CORRECTION_DECAY_FACTOR", 4.0)
    changed = nk._correction_settings(settings)
    assert changed.weight_decay == (1.0, 8.0) and changed.hidden == settings.hidden and changed.lr == settings.lr


def test_without_torch_neural_methods_say_how_to_install(data, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # makes `import torch` raise ImportError
    for method in ("deep_feature", "neural_kernel"):
        with pytest.raises(MissingDependencyError, match=r'pip install "ccme\[neural\]"'):
            ccme.fit(SMALL, data, method=method, seed=1, propensity="logistic")
    res = ccme.fit(SMALL, data, seed=1, propensity="logistic")   # ridge still works
    assert np.isfinite(res.mean(arm=1)).all()
