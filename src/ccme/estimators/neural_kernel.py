"""The Neural-Kernel CCME (paper, Section "Neural-Kernel Estimator", Algorithm "Neural-Kernel Estimator").

Over grid points ỹ_1..ỹ_M the embedding is μ̂(v) = Σ_j f(v)_j φ(ỹ_j), f a
network on V with M outputs, and the density is eq. (nk_density),
p̂(y | v) = Σ_j f(v)_j k_Y(ỹ_j, y).

Stage 1 (the arm's units of D0): a network g on X minimises
(1/m) Σ_i [g_iᵀK_M g_i − 2 g_iᵀk_i] with k_i = (k_Y(ỹ_j, Y_0i))_j.
Stage 2 (D1): f on V minimises eq. (NK_loss), (1/n) Σ_i [f_iᵀK_M f_i − 2 f_iᵀb_i],
with b_i = ⟨φ(ỹ_j), ξ_i⟩_j = a_i k_i + b_i K_M g(X_1i) for the pseudo-outcome
coefficients (a, b) of the mode (:mod:`ccme.estimators.ridge`; IPW and plug-in
as in Appendix "Baseline Estimators").  One-step regresses φ(Y) on V among
the arm's D1 units with the stage-1 loss.  The losses reported (training
curves) add the constant (1/n) Σ‖ξ_i‖², so that each is the mean squared
RKHS error Σ‖μ(V_i) − ξ_i‖²/n itself.

In the doubly robust mode the second stage is split (:data:`SPLIT_SECOND_STAGE`):
ξ_i = μ̂₀(X_1i) + ω_i (φ(Y_1i) − μ̂₀(X_1i)), and f = f_p + f_c with f_p fitted
to the plug-in part (coefficients a = 0, b = 1: targets without outcome
noise) and f_c to the correction (a, b − 1), each network stopped early on
its own validation loss, as the ridge estimator's split second stage
(:class:`ccme.estimators.base.SplitSecondStage`) smooths the two apart.  The
networks' weights decay by default (``weight_decay``, decoupled; the paper's
"weight regularization" for this estimator's variance), by 2 up to n = 1000
units and by 2 × 1000 / n beyond (``"auto"``, :func:`auto_weight_decay`).

Grid size (``M=``): ``"auto"`` (default) is the paper's M = 20 up to n = 4000
units and 20 × (n / 4000)^0.6 beyond (:func:`auto_grid_points`: 53 at
n = 20000), since the grid's step bounds the read-out bandwidth from below
and the best bandwidth shrinks with n; or a positive integer.

Grid (``grid=``): ``"regular"`` M points from min(Y) to max(Y) (d_y = 1, as
the paper); ``"quantile"`` the j/(M − 1) quantiles (j = 0..M − 1) of the
outcome's distinct values, from min(Y) to max(Y) and denser where the
outcomes are (d_y = 1); ``"blend"`` ceil(M/2) regular points and the M//2
interior quantiles, a spike of outcomes resolved without leaving gaps in the
tails (d_y = 1); ``"kmeans"`` the k-means centres of the outcomes (scikit-learn,
seeded); ``"random"`` M distinct observed outcomes drawn with the fit's seed;
``"auto"`` (default) is "kmeans" for d_y > 1 and, for d_y = 1, "regular" unless
those points miss a spike of outcomes, then "blend" (:data:`AUTO_GRID_1D`); or an
array (M, d_y) of points, whose length then sets M.  All outcomes (both arms)
are used, so both arms share the grid.

Atoms (``atoms=``): ``"grid"`` reads the density out over the grid points
themselves, eq. (nk_density), with one read-out bandwidth; ``"outcomes"`` (default)
spreads each grid point's weight over the arm's second-stage outcomes around
it (:func:`outcome_loadings`: the grid's hat functions, or the nearest point
for d_y > 1), so that the embedding is again one over observed outcomes,
μ̂(v) = Σ_k c_k(v) φ(y_k) with c(v) = L f(v), as the ridge's and Deep
Feature's are.  The networks and their training are the same; only the atoms
change, and with them what one read-out bandwidth can draw: within a grid
cell the estimate takes the outcomes' local shape (a spike narrower than the
grid's step), across cells the networks' weights.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import _backend
from ..errors import ParameterError
from ..kernels import resolve_kernel
from .base import FactoredArm, Parameters
from .deep_feature import _kernel_at_zero, training_rows
from .training import (
    NEURAL_DEFAULTS,
    NeuralEstimator,
    Standardizer,
    describe_training,
    input_scale,
    make_mlp,
    network_outputs,
    network_to_arrays,
    pseudo_outcome_coefficients,
    require_torch,
    resolve_training,
    split_units,
    stage_generator,
    torch_device,
    torch_dtype,
    train_stage,
    _positive_int,
)

__all__ = ["NeuralKernelEstimator", "NeuralKernelFoldArm", "NEURAL_KERNEL_DEFAULTS", "nk_loss", "make_grid",
           "pseudo_outcome_targets"]

#: Documented defaults of the Neural-Kernel estimator (training options:
#: :data:`ccme.estimators.training.NEURAL_DEFAULTS`).  M = 20 grid points as
#: in the paper.  Weight decay 2 (decoupled: each step shrinks the networks' weights by 1 − lr·2, 2% at the
#: default learning rate), the "weight regularization" the paper suggests for this estimator's variance.  Chosen on
#: the zoo's "choose" split (n = 1000; ``benchmarks/tuning_rule.py --setting
#: "ccme.estimators.neural_kernel.NEURAL_KERNEL_DEFAULTS[weight_decay]=0.0,2.0" --config neural_kernel``): over
#: 0.01-30 at seeds 1-2 (0.1: 0.986, 1: 0.997, 2: 0.927, 3: 0.918, 5: 0.979, 10: 1.31), then 2 and 3 at seeds 3-6
#: (0.952, 0.977); 2 over seeds 1-6: 0.946, 10 of 14 case-arms better, 3 worse.  Reported on "report", seeds 1-4:
#: 0.979, 15 of 30 better, 11 worse; about 14% more fitting time.  By validation loss per fit
#: (:data:`ccme.tuning.NEURAL_WEIGHT_DECAY_SEARCH`) it was no better (0.952 at seeds 1-2) for 1.5 times the time.
#: ``benchmarks/results/nk_weight_decay*``.  Atoms "outcomes" (:func:`outcome_loadings`) rather than the paper's grid:
#: chosen on "choose" (n = 1000, seeds 1-2, ``benchmarks/tuning_rule.py --setting
#: "ccme.estimators.neural_kernel.NEURAL_KERNEL_DEFAULTS[atoms]=grid,outcomes" --config neural_kernel --stem
#: nk_atoms``): 0.892 of the grid's ISE, 9 of 16 case-arms better, 3 worse (nhefs_sex's treated arm 1.13),
#: spike_tail 0.33 / 0.55; reported on "report": 0.926, 16 of 30 better, 11 worse (at most 1.07), nsw_race 0.54 /
#: 0.38, nhefs_education's treated arm 0.54; fitting time unchanged.  Wider hidden layers than the paper's 2 × 20
#: measured and not adopted (``--setting "...NEURAL_KERNEL_DEFAULTS[hidden]=20 20;35 35;50 50" --stem nk_hidden``,
#: n = 1000): on "choose" at seeds 1-4, 35 × 35 0.960 and 50 × 50 0.979 (mixed_v 1.6 / 1.4 under both, weak_overlap
#: 0.65-0.79), per-seed 95% intervals 0.82-1.07 and 0.85-1.11; 35 × 35 at seeds 1-6 0.977 (0.88-1.06; mixed_v 1.31 /
#: 1.24); on "report" at seeds 1-2 1.009 and 0.945; 80 × 80 0.913 on "choose" at seeds 1-2.  No width separates
#: from the seeds' noise.  Nor does a patience of 200 epochs instead of 50 (``...[patience]=50,200 --stem
#: nk_patience``, seeds 1-2): 1.044 on "choose" (mixed_v 1.85 / 1.20) and 1.000 on "report", for 1.7-1.8 times
#: the time, though on the three worst report cases alone it gave 0.941
#: (``benchmarks/accuracy/results/neural_gap_training.txt``).  Nor, at n = 12000, where stage 2 runs to its 500
#: epochs, do 2000 (the "choose" case large_mixed, seeds 1-2, ``"...[epochs]=1000 500;1000 2000" --cases large_mixed
#: --stem nk_stage2_epochs``): 0.966 (0.97 / 0.96 per arm) for 1.35 times the time.
NEURAL_KERNEL_DEFAULTS = {
    **NEURAL_DEFAULTS,
    "weight_decay": "auto",
    "M": "auto",
    "grid": "auto",
    "y_kernel": "gaussian",
    "y_bandwidth": "silverman",
    "atoms": "outcomes",
}


#: ``weight_decay="auto"``: AUTO_WEIGHT_DECAY × min(1, AUTO_WEIGHT_DECAY_N / n)^AUTO_WEIGHT_DECAY_POWER for n units
#: (:func:`auto_weight_decay`).  The decay 2 was chosen at n = 1000 (above); a fixed decay does not fade as n grows,
#: while the loss is a mean over units: a prior of fixed strength is a penalty ∝ 1/n on it.  At n = 2000 on
#: through_w (seed 1) decay 2 left Neural-Kernel at 2.7 / 2.0 times ridge DR's ISE and no decay at 1.25 / 1.10.
#: The power chosen on the zoo's "choose" cases at their own n (1566-4000, seeds 1-2, ``python
#: benchmarks/tuning_rule.py --setting ccme.estimators.neural_kernel.AUTO_WEIGHT_DECAY_POWER=0.0,1.0,0.5 --config
#: neural_kernel --split choose --seeds 1,2 --eval-points 100 --stem nk_auto_decay``, then 1.0,1.5,2.0 with
#: ``--stem nk_auto_decay_steep``): against a fixed 2 (power 0), power 1 gave 0.884 of the ISE (per case-seed
#: 95% interval 0.80-0.99; 11 of 16 case-arms better, 5 worse, at most spike_tail's control arm 1.12), 0.5 gave
#: 0.934; against power 1, 1.5 gave 1.011 and 2 gave 1.080.  Below n = 1000, where no smaller n was measured, the
#: decay stays 2.
AUTO_WEIGHT_DECAY = 2.0
AUTO_WEIGHT_DECAY_N = 1000
AUTO_WEIGHT_DECAY_POWER = 1.0


def auto_weight_decay(n: int) -> float:
    """The weight decay of ``weight_decay="auto"`` for ``n`` units: 2 up to n = 1000, 2 × 1000 / n beyond."""
    return AUTO_WEIGHT_DECAY * min(1.0, AUTO_WEIGHT_DECAY_N / n) ** AUTO_WEIGHT_DECAY_POWER


#: ``M="auto"``: round(AUTO_GRID_POINTS × max(1, n / AUTO_GRID_POINTS_N)^AUTO_GRID_POINTS_POWER) grid points for n
#: units (:func:`auto_grid_points`): the paper's 20 up to n = 4000, 30 at 8000, 53 at 20000, 80 at 40000.  The grid's
#: step bounds the read-out bandwidth from below (half the step, :func:`ccme.tuning.readout_floor`), while the
#: density's best bandwidth shrinks as n grows: at n = 20000 (large_n, seed 1) both arms' σ_y sat on that floor and
#: Neural-Kernel had 3.4 / 2.4 times ridge DR's ISE; with M = 40, 1.4 / 0.85 (more epochs, a smaller decay or wider
#: networks moved it by under 10%).  More points at smaller n cost: on the zoo's "choose" cases at their own n
#: (1566-4000, seeds 1-2, ``python benchmarks/tuning_rule.py --setting
#: ccme.estimators.neural_kernel.AUTO_GRID_POINTS_POWER=0.0,0.2,0.4 --config neural_kernel --parallel --stem nk_auto_m
#: --split choose --seeds 1,2 --eval-points 100`` with the scale at 1000 units) growth with power 0.2 gave 1.109 of
#: M = 20's ISE and 0.4 gave 1.099 (mixed_v and spike_tail worse by up to 2.1), so the growth starts at the largest
#: n measured there, 4000.  The power was chosen on two "choose" cases run at n = 20000 (paper and mixture_v3, seed
#: 1; ``... =0.0,0.3,0.6 --cases paper,mixture_v3 --n 20000 --seeds 1 --tag n20000``): 0.3 (M = 32) gave 0.806
#: (paper 1.24 / 0.47), 0.6 (M = 53) 0.592, all four case-arms better (paper 0.74 / 0.27, mixture_v3 0.96 / 0.64),
#: for about 1.8 times the fit time (three runs side by side on two cores); at seed 2 0.663 (paper 1.15 / 0.26,
#: mixture_v3 0.88 / 0.72; ``--tag n20000_seed2``); at n = 8000 (M = 30, checked after) 0.727 and 0.696 at seeds
#: 1 and 2 (``--n 8000 --tag n8000``, ``n8000_seed2``).  Reported on large_n, the one "report"
#: case above 4000 units (seed 1, ``--cases large_n --seeds 1 --tag large_n``): 0.39 / 0.40 of the error, 1.36 / 0.96
#: times ridge DR's (seed 2: 0.36 / 0.34, 1.45 / 0.80), in 425 s instead of 187 s (at M = 40 a second-stage epoch
#: took 1.5 times as long and the correction network trained longer before stopping).  Checked on the "choose" case
#: large_mixed (n = 12000, M = 39) once it was added (seeds 1-2, ``... =0.0,0.6,1.0 --cases large_mixed --seeds 1,2
#: --tag large_mixed``): 0.851 of M = 20's error (treated 1.13, control 0.64), M = 60 (power 1) 0.892.
#: ``benchmarks/results/nk_auto_m_*``.
AUTO_GRID_POINTS = 20
AUTO_GRID_POINTS_N = 4000
AUTO_GRID_POINTS_POWER = 0.6


def auto_grid_points(n: int, Y: np.ndarray | None = None) -> int:
    """The number of grid points of ``M="auto"`` for ``n`` units (:data:`AUTO_GRID_POINTS_POWER`).

    Beyond :data:`AUTO_GRID_POINTS`, no more than the outcomes ``Y`` (n, d_y) have distinct values, when given: a
    rule that places points on them ("blend", "quantile", "kmeans") cannot place more.
    """
    M = int(round(AUTO_GRID_POINTS * max(1.0, n / AUTO_GRID_POINTS_N) ** AUTO_GRID_POINTS_POWER))
    if Y is not None and M > AUTO_GRID_POINTS:
        M = max(AUTO_GRID_POINTS, min(M, len(np.unique(Y, axis=0))))
    return M


def _auto_grid_points_text(value: int, n: int) -> str:
    """The summary's account of an "auto" M: the rule, from its constants, and the value it gave at n."""
    return (f"auto: {AUTO_GRID_POINTS} × max(1, n / {AUTO_GRID_POINTS_N})^{AUTO_GRID_POINTS_POWER:g}, rounded, "
            f"= {value} at n = {n}")


def _auto_decay_text(value: float, n: int) -> str:
    """The summary's account of an "auto" decay: the rule, from its constants, and the value it gave at n."""
    power = "" if AUTO_WEIGHT_DECAY_POWER == 1 else f"^{AUTO_WEIGHT_DECAY_POWER:g}"
    return f"auto: {AUTO_WEIGHT_DECAY:g} × min(1, {AUTO_WEIGHT_DECAY_N} / n){power} = {value:.3g} at n = {n}"


#: The rule ``grid="auto"`` uses for a one-dimensional outcome: "adaptive" is "regular" (the paper's) where M
#: regular points resolve the outcomes and "blend" where they do not (:func:`regular_grid_resolves`); or one rule
#: always ("regular", "blend", "quantile", "kmeans").  Always "kmeans" was measured and rejected
#: (``benchmarks/tuning_rule.py --setting ccme.estimators.neural_kernel.AUTO_GRID_1D=regular,kmeans --config
#: neural_kernel --seeds 1,2 --n 1000``, ``benchmarks/results/nk_auto_grid_*``): ISE ratio 0.94 on the zoo's choose
#: cases (better on 9 of 14 case-arms, worse on 5), 0.98 on its report cases (better on 11 of 22, worse on 7;
#: linear_v1's control arm 2.0).  Always "quantile" likewise (``--stem nk_quantile_grid``, at the three repetitions
#: of the cross-fit): 0.951 on "choose" (10 of 14 better, 4 worse), 1.044 on "report" (10 of 24 better, 12 worse:
#: nhefs_education's treated arm 2.8, categorical_v's 1.53, while nsw_race's skewed earnings gain, 0.82 / 0.60).
#: Always "blend" (``--stem nk_blend_grid``, seeds 1-2): at M = 20, 1.008 on the first seven choose cases and
#: 1.014 on "report"; at M = 40, 1.025 and 0.931 for 10% more time; on a spike of outcomes (spike_tail, nsw_race)
#: 0.37-0.48 at either M.
AUTO_GRID_1D = "adaptive"

#: :func:`regular_grid_resolves` says no where the densest regular cell is more than this many standard deviations
#: of its outcomes wide.  Outcomes spread evenly over a cell of width w have standard deviation w/√12 (w/sd = 3.46);
#: at M = 20 the zoo's cases without a spike have 3.2-3.9 at n = 1000 (seeds 1-3), and the two with one 5.5-9.3
#: (spike_tail 6.3-9.3, nsw_race 5.5-6.2), so any value between 3.9 and 5.5 separates them; 5 (the spread 0.69 of an
#: even one's) is about the geometric middle of the choose cases' 3.9 and spike_tail's 6.3.
SPIKE_RATIO = 5.0


def regular_grid_resolves(Y: np.ndarray, M: int) -> bool:
    """Whether M regular points from min(Y) to max(Y) resolve the outcomes (for ``grid="auto"``).

    They do unless the densest of the M − 1 cells holds outcomes much
    narrower than the cell: a spike (zero earnings, a point mass) that every
    grid point would miss by up to half a step, and that the read-out then
    smears over a step.  The test: width / standard deviation of the cell's
    outcomes at most :data:`SPIKE_RATIO` (√12 ≈ 3.46 for outcomes spread
    evenly over it).  With fewer than M distinct outcomes no other rule
    applies, and the answer is yes.

    Parameters
    ----------
    Y : ndarray, shape (n, 1)
    M : int

    Returns
    -------
    bool

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> bulk = rng.normal(5.0, 2.0, 600)
    >>> regular_grid_resolves(bulk[:, None], 20)
    True
    >>> regular_grid_resolves(np.r_[bulk, np.zeros(400)][:, None], 20)
    False
    """
    y = Y[:, 0]
    if M < 3 or len(np.unique(y)) < M:
        return True
    width = (y.max() - y.min()) / (M - 1)
    cell = np.minimum(((y - y.min()) / width).astype(int), M - 2)
    densest = y[cell == np.argmax(np.bincount(cell, minlength=M - 1))]
    return bool(width <= SPIKE_RATIO * densest.std())


def auto_grid_rule(Y: np.ndarray, M: int) -> str:
    """The rule ``grid="auto"`` applies to these outcomes at M points (see :data:`AUTO_GRID_1D`)."""
    if Y.shape[1] != 1:
        return "kmeans"
    if AUTO_GRID_1D == "adaptive":
        return "regular" if regular_grid_resolves(Y, M) else "blend"
    return AUTO_GRID_1D


#: Whether the doubly robust second stage is split (:func:`build_neural_kernel_arm`): f = f_p + f_c, the plug-in
#: part μ̂₀(X) and the correction ω(φ(Y) − μ̂₀(X)) on networks of their own, as the ridge's and Deep Feature's are
#: (:class:`ccme.estimators.base.SplitSecondStage`).  Chosen on the zoo's "choose" split (n = 1000, seeds 1-2, with
#: the weight decay): 0.888 of the unsplit stage's ISE, 10 of 14 case-arms better, 3 worse; reported on "report":
#: 0.916, 24 of 30 better, 5 worse (ihdp_all25 1.56 / 1.65); about twice the fitting time
#: (``benchmarks/results/nk_split_second_stage_*``).  At large n the unsplit stage is about half the time but not
#: better: on the "choose" case large_mixed (n = 12000, seeds 1-3, ``benchmarks/tuning_rule.py --setting
#: ccme.estimators.neural_kernel.SPLIT_SECOND_STAGE=True,False --config neural_kernel --stem nk_split_large --cases
#: large_mixed --seeds 1,2,3 --tag large_mixed``) 0.912 / 0.948 (per seed 0.97 / 1.10, 1.00 / 1.48, 0.68 / 0.55), and
#: at n = 20000 (seed 1, ``--tag n20000_paper`` / ``n20000_mixture_v3``) paper 1.09 / 1.06, mixture_v3 0.84 / 2.09.
SPLIT_SECOND_STAGE = True


def make_grid(rule, Y: np.ndarray, M: int, seed: int) -> np.ndarray:
    """The grid points ỹ_1..ỹ_M (see the module docstring)."""
    d = Y.shape[1]
    if not isinstance(rule, str):
        grid = np.asarray(rule, dtype=np.float64)
        if grid.ndim == 1 and d == 1:
            grid = grid[:, None]
        if grid.ndim != 2 or grid.shape[1] != d or len(grid) < 1 or not np.all(np.isfinite(grid)):
            raise ParameterError(f"`grid` as an array must have shape (M, {d}) with finite values; got shape "
                                 f"{np.shape(rule)}")
        return np.ascontiguousarray(grid)
    if rule == "auto":
        rule = auto_grid_rule(Y, M)
    if rule in ("regular", "quantile", "blend") and d != 1:
        raise ParameterError(f"`grid={rule!r}` needs a one-dimensional outcome; use 'kmeans', 'random' or an array")
    if rule == "regular":
        return np.linspace(Y.min(), Y.max(), M)[:, None]
    unique = np.unique(Y, axis=0)
    if len(unique) < M:
        raise ParameterError(f"`M` = {M} grid points but the outcome takes only {len(unique)} distinct values")
    if rule == "blend":
        # ceil(M/2) regular points, which keep the tails resolved, and M//2 interior quantiles of the distinct
        # values, which resolve where the outcomes crowd (a spike, a narrow mode).  A quantile that falls on a
        # regular point (a discrete outcome) repeats it, which the loss, never inverting K_M, takes in its stride.
        regular = np.linspace(Y.min(), Y.max(), M - M // 2)
        quantiles = np.quantile(unique[:, 0], np.linspace(0.0, 1.0, M // 2 + 2)[1:-1])
        return np.sort(np.r_[regular, quantiles])[:, None]
    if rule == "quantile":
        # Of the distinct values, so that a point mass (e.g. zero earnings) takes one grid point, not many; from
        # the smallest to the largest, as the regular grid.
        return np.quantile(unique[:, 0], np.linspace(0.0, 1.0, M))[:, None]
    if rule == "random":
        rows = np.random.default_rng(seed).choice(len(unique), M, replace=False)
        return np.ascontiguousarray(unique[np.sort(rows)])
    if rule == "kmeans":
        from sklearn.cluster import KMeans

        # In units of each column's spread, so that the points do not depend on the outcomes' units (the squared
        # distance of raw columns is ruled by the one with the largest numbers).
        units = Standardizer(Y, True)
        centres = KMeans(n_clusters=M, n_init=4, random_state=seed).fit(units(Y)).cluster_centers_
        centres = centres * units.sd + units.mean
        return np.ascontiguousarray(centres[np.lexsort(centres.T[::-1])])
    raise ParameterError(f"`grid` must be 'auto', 'regular', 'quantile', 'kmeans', 'random' or an array; got {rule!r}")


def outcome_loadings(grid: np.ndarray, Y: np.ndarray):
    """Atoms and loadings that spread each grid point's weight over the observed outcomes around it.

    For ``atoms="outcomes"``: the embedding Σ_j f_j(v) φ(ỹ_j) over M grid points
    becomes Σ_k c_k(v) φ(y_k) over the distinct outcomes, c(v) = L f(v), where
    column j of L spreads grid point j's unit weight over the outcomes in
    proportion to their count times h_j(y), h the piecewise-linear "hat"
    partition of unity of the sorted grid (one-dimensional outcome: h_j is 1
    at ỹ_j and falls linearly to 0 at its neighbours; outcomes beyond the
    grid's ends go to the end point), or the indicator of the nearest grid
    point (d_y > 1; each column in units of the grid points' standard
    deviation in it, so that "nearest" does not depend on the outcomes' units).  Within each cell the estimate then takes the local shape
    of the outcomes' distribution — a spike of outcomes narrower than the
    grid's step stays a spike, which M points with one read-out bandwidth
    cannot draw — while the grid's weights, the network's output, set how much
    mass each cell gets.  Every grid point keeps its mass (the columns of L
    sum to 1); one with no outcome around it stays an atom itself.

    Parameters
    ----------
    grid : ndarray (M, d_y)
    Y : ndarray (n, d_y)
        The outcomes to spread the weights over (in a fit, the arm's second-stage outcomes of the fold).

    Returns
    -------
    atoms : ndarray (N, d_y)
        The distinct outcomes, then the grid points with no outcome around them.
    loadings : ndarray (N, M)

    Examples
    --------
    >>> atoms, L = outcome_loadings(np.array([[0.0], [1.0]]), np.array([[0.0], [0.25], [0.25], [1.0]]))
    >>> atoms[:, 0].tolist(), L.sum(axis=0).tolist()
    ([0.0, 0.25, 1.0], [1.0, 1.0])
    >>> L[:, 1].tolist()        # hat weights 0, 2 × 0.25 and 1, normalised
    [0.0, 0.3333333333333333, 0.6666666666666666]
    """
    values, counts = np.unique(Y, axis=0, return_counts=True)
    M = len(grid)
    H = np.zeros((len(values), M))
    rows = np.arange(len(values))
    if grid.shape[1] == 1 and M > 1:
        order = np.argsort(grid[:, 0], kind="stable")
        g, y = grid[order, 0], values[:, 0]
        left = np.clip(np.searchsorted(g, y, side="right") - 1, 0, M - 2)
        width = g[left + 1] - g[left]
        t = np.clip((y - g[left]) / np.where(width > 0, width, 1.0), 0.0, 1.0) * (width > 0)
        np.add.at(H, (rows, order[left]), (1.0 - t) * counts)
        np.add.at(H, (rows, order[left + 1]), t * counts)
    else:
        spread = Standardizer(grid, True).sd
        nearest = np.argmin((((values[:, None, :] - grid[None, :, :]) / spread) ** 2).sum(axis=2), axis=1)
        H[rows, nearest] = counts
    mass = H.sum(axis=0)
    empty = np.flatnonzero(mass <= 0)
    loadings = np.zeros((len(values) + len(empty), M))
    kept = mass > 0
    loadings[:len(values), kept] = H[:, kept] / mass[kept]
    loadings[len(values) + np.arange(len(empty)), empty] = 1.0
    return np.ascontiguousarray(np.vstack([values, grid[empty]])), loadings


def _grid_label(prepared, Y) -> str:
    """The grid's rule for the summary; for "auto", the rule it applied and, where not regular, why."""
    rule = prepared["grid_rule"]
    if rule != "auto":
        return rule
    chosen = auto_grid_rule(Y, prepared["M"])
    spike = AUTO_GRID_1D == "adaptive" and chosen == "blend"
    return f"auto: {chosen}" + (", regular points miss a spike of outcomes" if spike else "")


def nk_loss(F, T, c, K_M):
    """(1/n) Σ_i [f_iᵀK_M f_i − 2 f_iᵀt_i + c_i]: the mean squared RKHS error, eq. (NK_loss) plus Σc_i/n."""
    return ((F @ K_M) * F - 2.0 * F * T).sum(dim=1).mean() + c.mean()


class NeuralKernelFoldArm(FactoredArm):
    """The Neural-Kernel CCME of one arm on one fold: c(v) = f(v) over the grid, eq. (nk_density).

    With a split second stage (:data:`SPLIT_SECOND_STAGE`) f = f_p + f_c, the
    networks of the plug-in part (``net``) and of the correction
    (``correction``), on the same standardised V.  The atoms are the grid
    (loadings I) or, with ``spread_over`` given (the arm's second-stage
    outcomes), those outcomes, the grid's weights spread over them:
    c(v) = L f(v), (atoms, L) = :func:`outcome_loadings` (grid, spread_over).
    """

    def __init__(self, grid, net, standardizer, history: dict, dtype, device, correction=None, *,
                 spread_over=None):
        self.grid = np.ascontiguousarray(grid)
        self.spread_over = None if spread_over is None else np.ascontiguousarray(spread_over, dtype=np.float64)
        if self.spread_over is None:
            self._atoms, self.loadings = self.grid, np.eye(len(grid))
        else:
            self._atoms, self.loadings = outcome_loadings(self.grid, self.spread_over)
        self.net, self.standardizer, self.correction = net, standardizer, correction
        self.history = history
        self.jitter = {}
        self._dtype, self._device = dtype, device

    @property
    def resolution_points(self) -> np.ndarray:
        """The grid: spread over outcomes, its weights still resolve y no finer than its step."""
        return self.grid

    def coefficients(self, V_eval):
        """f(v), shape (M, n_eval)."""
        f = network_outputs(self.net, self.standardizer, V_eval, self._dtype, self._device)
        if self.correction is not None:
            f = f + network_outputs(self.correction, self.standardizer, V_eval, self._dtype, self._device)
        return f.T

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    #: Version 2 adds the correction's network (None when the second stage is not split); version 3 the outcomes
    #: the grid's weights are spread over (``atoms="outcomes"``; None for the grid's own atoms), from which the atoms
    #: and loadings are recomputed exactly (a column of outcomes, not an N × M matrix, in the file).
    STATE_SCHEMA = "ccme.NeuralKernelFoldArm"
    STATE_VERSION = 3

    def to_state(self) -> dict:
        """The fitted estimator as a versioned state for :mod:`ccme.io`.

        The grid, the outcomes its weights are spread over (or None), the network as its weights
        (:func:`ccme.estimators.training.network_to_arrays`), and the training
        histories as plain dicts keyed by stage (``"1"``, ``"2"``).
        """
        from ..io import make_state
        from .deep_feature import _histories_to_state

        correction = None if self.correction is None else network_to_arrays(self.correction, self.standardizer,
                                                                            self._dtype, self._device)
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, grid=self.grid,
                          history=_histories_to_state(self.history), jitter=dict(self.jitter),
                          network=network_to_arrays(self.net, self.standardizer, self._dtype, self._device),
                          correction=correction, spread_over=self.spread_over)

    @classmethod
    def from_state(cls, state) -> "NeuralKernelFoldArm":
        """Inverse of :meth:`to_state`: the network is rebuilt from its layer shapes and given the stored weights."""
        from ..errors import FormatError
        from ..io import check_schema
        from .deep_feature import _histories_from_state, _network_from_state

        keys = {1: ("grid", "history", "jitter", "network")}
        keys[2] = (*keys[1], "correction")
        keys[3] = (*keys[2], "spread_over")
        stored = state.get("version") if isinstance(state, dict) else None
        version = check_schema(state, cls.STATE_SCHEMA, range(1, cls.STATE_VERSION + 1),
                               keys=keys.get(stored, keys[cls.STATE_VERSION]))
        if not isinstance(state["grid"], np.ndarray) or state["grid"].ndim != 2:
            raise FormatError("the stored Neural-Kernel estimator's grid is not a matrix")
        if not isinstance(state["jitter"], dict):
            raise FormatError("the stored Neural-Kernel estimator's jitter is not a dict")
        spread_over = state["spread_over"] if version >= 3 else None
        if spread_over is not None and not (isinstance(spread_over, np.ndarray) and spread_over.ndim == 2
                                            and spread_over.shape[1] == state["grid"].shape[1]):
            raise FormatError("the stored Neural-Kernel estimator's outcomes (spread_over) do not fit its grid")
        net, standardizer, dtype, device = _network_from_state(state["network"])
        correction = None
        if version >= 2 and state["correction"] is not None:
            correction, _, _, _ = _network_from_state(state["correction"])
        arm = cls(state["grid"], net, standardizer, _histories_from_state(state["history"]), dtype, device,
                  correction, spread_over=spread_over)
        arm.jitter = dict(state["jitter"])
        return arm


def fit_grid_network(Z, T, c, K_M, *, settings, stage, generator, label="", n_threads=0, scale=None):
    """Train a network on ``Z`` minimising :func:`nk_loss` with per-unit targets ``T`` (n × M) and constants ``c``;
    ``scale``: the inputs' per-column scales (:func:`ccme.estimators.training.input_scale`; None: their sd)."""
    torch = require_torch()
    device, dtype = torch_device(settings), torch_dtype(settings)
    standardizer = Standardizer(Z, settings.standardize, scale, far_out=True)
    # The split first: it then does not depend on M, so tuning compares every M on the same held-out units.
    train, val = split_units(len(Z), settings, generator)
    net = make_mlp(Z.shape[1], settings.hidden, K_M.shape[0], generator, dtype, device)

    def tensor(x):
        return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype, device=device)

    Zt, Tt, ct, Kt = tensor(standardizer(Z)), tensor(T), tensor(c), tensor(K_M)
    train_t = torch.as_tensor(train, device=device)

    def loss(batch):
        rows = train_t if batch is None else train_t[batch.to(device)]
        return nk_loss(net(Zt[rows]), Tt[rows], ct[rows], Kt)

    val_t = None if val is None else torch.as_tensor(val, device=device)

    def val_loss():
        return nk_loss(net(Zt[val_t]), Tt[val_t], ct[val_t], Kt)

    # The losses are in units of k_Y(0), K_M's diagonal (train_stage's loss_unit: the fit then does not depend on
    # the outcome's units).
    history = train_stage(net, loss, len(train), settings, stage, generator,
                          val_loss_fn=None if val is None else val_loss, label=label, n_threads=n_threads,
                          loss_unit=float(np.mean(np.diag(K_M))))
    return net, standardizer, history


#: The correction network's weight decay as a multiple of the second stage's (:func:`_correction_settings`): shrinking
#: the noisy correction harder, as the ridge's split stage penalises it apart.  Measured and not adopted (n = 1000,
#: seeds 1-2, outcome atoms; ``benchmarks/tuning_rule.py --setting
#: ccme.estimators.neural_kernel.CORRECTION_DECAY_FACTOR=1.0,4.0,10.0 --config neural_kernel --stem
#: nk_correction_decay``): 0.953 / 0.953 on "choose" (8 of 16 case-arms better, 6 / 8 worse; spike_tail 0.82 / 0.61)
#: but 1.049 / 1.068 on "report" (15 / 18 of 30 worse: nhefs_education's treated arm 2.4 / 1.7, ordinal_v 1.24 / 1.42).
#: At n = 12000 (the "choose" case large_mixed, seeds 1-2, ``... =1.0,12.0 --cases large_mixed --seeds 1,2 --stem
#: nk_correction_decay_large --tag large_mixed``), a factor 12, which keeps the correction at the n = 1000 decay (2)
#: while the auto decay fades to 0.167, gave 0.96 / 0.97 at seed 1 and 1.04 / 1.06 at seed 2: no change either.
CORRECTION_DECAY_FACTOR = 1.0


def _correction_settings(settings):
    """The split second stage's correction network's training settings: its weight decay × CORRECTION_DECAY_FACTOR."""
    if CORRECTION_DECAY_FACTOR == 1.0:
        return settings
    first, second = settings.weight_decay
    return dataclasses.replace(settings, weight_decay=(first, second * CORRECTION_DECAY_FACTOR))


def pseudo_outcome_targets(a, b, k1, g0, K_M, k0):
    """Per-unit targets b_i = ⟨φ(ỹ_j), ξ_i⟩_j and constants ‖ξ_i‖² of ξ_i = a_i φ(y_i) + b_i Σ_j g0_ij φ(ỹ_j).

    b_i = a_i k_i + b_i K_M g0_i (Algorithm "Neural-Kernel Estimator"), and
    ‖ξ_i‖² = a_i² k(0) + 2 a_i b_i k_iᵀg0_i + b_i² g0_iᵀK_M g0_i; ``g0`` is None
    when the mode has no first stage (b = 0).
    """
    T = a[:, None] * k1
    c = a**2 * k0
    if g0 is not None:
        Kg0 = g0 @ K_M
        T = T + b[:, None] * Kg0
        c = c + 2 * a * b * np.sum(k1 * g0, axis=1) + b**2 * np.sum(Kg0 * g0, axis=1)
    return T, c


def _kernel_to_grid(Y, grid, kernel):
    return _backend.gram(Y, grid, kernel.name, kernel.bandwidth_array, normalized=True)


def build_neural_kernel_arm(*, arm, mode, V, Xo, Y, A, target, nuisance, scores_target, prepared, seed, fold_index,
                            n_threads=0):
    """Train both stages of one arm on one fold (the module docstring) and return its estimator."""
    settings = prepared["training"]
    kernel, grid, K_M = prepared["kernels"]["y"], prepared["grid"], prepared["K_M"]
    device, dtype = torch_device(settings), torch_dtype(settings)
    k0 = _kernel_at_zero(kernel)
    label = f"fold {fold_index + 1}, arm {arm}, "
    x_scale, v_scale = input_scale(prepared, "x"), input_scale(prepared, "v")
    in_arm = A[target] == arm
    spread = {}
    if prepared.get("atoms", "grid") == "outcomes":
        # The arm's second-stage outcomes, as the ridge's atoms: never a unit the read-out's criterion holds out.
        spread = {"spread_over": Y[target[in_arm]]}
    if mode == "onestep":
        rows = target[in_arm]
        net, std, hist = fit_grid_network(V[rows], _kernel_to_grid(Y[rows], grid, kernel), np.full(len(rows), k0),
                                          K_M, settings=settings, stage=1, generator=stage_generator(seed, arm, 1),
                                          label=label, n_threads=n_threads, scale=v_scale)
        return NeuralKernelFoldArm(grid, net, std, {1: hist}, dtype, device, **spread)
    a, b = pseudo_outcome_coefficients(mode, arm, A, target, scores_target)
    history = {}
    g0 = None
    if np.any(b != 0):
        rows0 = nuisance[A[nuisance] == arm]
        net0, std0, history[1] = fit_grid_network(
            Xo[rows0], _kernel_to_grid(Y[rows0], grid, kernel), np.full(len(rows0), k0), K_M, settings=settings,
            stage=1, generator=stage_generator(seed, arm, 1), label=label, n_threads=n_threads, scale=x_scale,
        )
        g0 = network_outputs(net0, std0, Xo[target], dtype, device)     # μ̂₀(X_1i) = Σ_j g0_ij φ(ỹ_j)
    k1 = _kernel_to_grid(Y[target], grid, kernel)
    if mode == "dr" and SPLIT_SECOND_STAGE and g0 is not None:
        # ξ_i = μ̂₀(X_1i) + ω_i (φ(Y_1i) − μ̂₀(X_1i)): the plug-in part (coefficients a = 0, b = 1), whose targets
        # carry no outcome noise, and the correction (a, b − 1), each on its own network stopped early on its own
        # validation loss (stage 3 of the history), as the ridge's split second stage smooths the two apart.
        T, c = pseudo_outcome_targets(np.zeros_like(a), np.ones_like(b), k1, g0, K_M, k0)
        Tc, cc = pseudo_outcome_targets(a, b - 1.0, k1, g0, K_M, k0)
        net, std, history[2] = fit_grid_network(V[target], T, c, K_M, settings=settings, stage=2,
                                                generator=stage_generator(seed, arm, 3), label=label,
                                                n_threads=n_threads, scale=v_scale)
        correction, _, history[3] = fit_grid_network(V[target], Tc, cc, K_M, settings=_correction_settings(settings),
                                                     stage=2,
                                                     generator=stage_generator(seed, arm, 2),
                                                     label=label + "correction, ", n_threads=n_threads,
                                                     scale=v_scale)
        return NeuralKernelFoldArm(grid, net, std, history, dtype, device, correction, **spread)
    T, c = pseudo_outcome_targets(a, b, k1, g0, K_M, k0)
    net, std, history[2] = fit_grid_network(V[target], T, c, K_M, settings=settings, stage=2,
                                            generator=stage_generator(seed, arm, 2), label=label, n_threads=n_threads,
                                            scale=v_scale)
    return NeuralKernelFoldArm(grid, net, std, history, dtype, device, **spread)


def _resolve_auto(value, name: str, expected: str, rule):
    """An option that also takes "auto": (the value to use, the rule's value where "auto" else None).

    ``rule`` (no arguments) gives the "auto" value; any other string is a ParameterError naming ``name`` and what
    it ``expected``; a non-string passes through, for the option's own check.
    """
    if not isinstance(value, str):
        return value, None
    if value != "auto":
        raise ParameterError(f"`{name}` must be {expected}; got {value!r}")
    chosen = rule()
    return chosen, chosen


def _atoms_rule(rule) -> str:
    if rule not in ("grid", "outcomes"):
        raise ParameterError(f"`atoms` must be 'grid' or 'outcomes'; got {rule!r}")
    return rule


class NeuralKernelEstimator(NeuralEstimator):
    """``method="neural_kernel"``: networks giving coefficients over outcome grid points (module docstring)."""

    name = "neural_kernel"
    title = "neural-kernel"
    build_arm = staticmethod(build_neural_kernel_arm)
    defaults = NEURAL_KERNEL_DEFAULTS
    aliases = {}

    def prepare(self, options: dict, *, design, Xo, seed: int) -> Parameters:
        require_torch()
        y_kernel = resolve_kernel(options["y_kernel"], options["y_bandwidth"], design.Y, what="y_bandwidth",
                                  seed=seed, density=True)
        n = len(design.Y)
        M, auto_m = _resolve_auto(options["M"], "M", "'auto' or a positive integer",
                                  lambda: auto_grid_points(n, design.Y))
        grid = make_grid(options["grid"], design.Y, _positive_int(M, "M"), seed)
        decay, auto_decay = _resolve_auto(options["weight_decay"], "weight_decay",
                                          "'auto', a number ≥ 0 or a pair of them", lambda: auto_weight_decay(n))
        options = {**options, "weight_decay": decay}
        return Parameters({
            "kernels": {"y": y_kernel},
            "training": resolve_training(options),
            "M": len(grid),
            "grid": grid,
            "grid_rule": options["grid"] if isinstance(options["grid"], str) else "user",
            "weight_decay_auto": auto_decay,    # the summary's "Default decay" row; None: given by hand
            # The "Default M" row's value; None where M was given, or set by a grid array's length.
            "grid_points_auto": auto_m if isinstance(options["grid"], str) else None,
            "grid_seed": seed,      # tuning M rebuilds the grid with it (ccme.estimators.neural_tuning)
            "atoms": _atoms_rule(options["atoms"]),
            "K_M": _kernel_to_grid(grid, grid, y_kernel),
        })

    def describe(self, prepared, *, design, outcome_columns, embeddings) -> list:
        grid = prepared["grid"]
        span = (f"from {grid.min():.4g} to {grid.max():.4g}" if grid.shape[1] == 1
                else f"in {grid.shape[1]} dimensions")
        return [
            ("Outcome kernel", [("Y (density, loss)", prepared["kernels"]["y"].describe(design.y_names))]),
            ("Grid", [("Points", f"M = {prepared['M']} ({_grid_label(prepared, design.Y)}), {span}")]
             + ([("Default M", _auto_grid_points_text(prepared["grid_points_auto"], len(design.Y)))]
                if prepared.get("grid_points_auto") is not None else [])
             + ([("Read out on", "atoms: outcomes (each point's weight spread over the arm's outcomes around it)")]
                if prepared.get("atoms") == "outcomes" else [])),
            ("Training", describe_training(prepared["training"], prepared.get("input_kernels"))
             + ([("Default decay", _auto_decay_text(prepared["weight_decay_auto"], len(design.Y)))]
                if prepared.get("weight_decay_auto") is not None else [])
             + training_rows(embeddings)),
        ]
