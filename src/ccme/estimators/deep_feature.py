"""The Deep Feature CCME (paper, Section "Deep Feature Estimator", Algorithm "Deep Feature Estimator").

Stage 1 (on the arm's units of D0): a network ψ₀ on X with M outputs learns
features by minimising the trace loss, eq. (first_stage_DF_psi),

    L₀(θ) = (1/m) Tr(K_Y0 (I − Ψ₀(Ψ₀ᵀΨ₀ + mλ₀I)⁻¹Ψ₀ᵀ)),

which is the regression's least-squares error with the optimal operator Ĉ
(eq. C_hat) plugged in.  μ̂₀(x) = Φ₀ P₀ ψ₀(x) with P₀ = Ψ̂₀(Ψ̂₀ᵀΨ̂₀ + mλ₀I)⁻¹.

Stage 2 (on D1): a network ψ on V minimises the same loss with the Gram
matrix K_ξ of the pseudo-outcomes ξ_i = a_i φ(Y_i) + b_i μ̂₀(X_i) of the
mode (coefficients a, b as in :mod:`ccme.estimators.ridge`): for DR the
four-term K_ξ of Algorithm "Deep Feature Estimator", for IPW D_ωK_Y1D_ω and
for the plug-in Ψ̂₀₁ᵀP₀ᵀK_Y0P₀Ψ̂₀₁ (Appendix "Baseline Estimators").  One-step
regresses φ(Y) on V among the arm's D1 units with the stage-1 loss.

K_ξ is never formed: :class:`PseudoOutcomeGram` builds ΨᵀK_ξΨ from the
kernel matrix among the units with a_i ≠ 0 (the arm's units for IPW and DR;
none for the plug-in) and rank-M₀ terms, so full-batch training at
n = 20000 needs memory for one (n_arm × n_arm) kernel block only.

The fitted estimator is the closed form, eq. (df_density):

    c(v) = [D_a Ψ ; P₀ Ψ̂₀₁ᵀ D_b Ψ] (ΨᵀΨ + nλ₁I)⁻¹ ψ(v)

over the atoms [Y_i (a_i ≠ 0) ; Y0], with Ψ over all D1 units.

In the doubly robust mode with a plug-in penalty λ₁ᵖ (``lam1_plugin``;
chosen under ``tune="auto"`` by :func:`plugin_penalty_curve`) the second
stage is split as the ridge estimator's: the correction ω(φ(Y) − μ̂₀(X)) at
G = ΨᵀΨ + nλ₁I, the plug-in part μ̂₀(X) at ΨᵀΨ + nλ₁ᵖI, over the same learned
features and atoms (:func:`split_plugin`).

Penalties follow the paper's equations (``lam_scaling="n"``: mλ₀, nλ₁, the
ridge estimator's convention); ``lam_scaling="none"`` adds λ unscaled, as the
paper's reference code does with its λ = 20 (see :func:`paper_options`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import _backend
from ..errors import ParameterError
from ..kernels import resolve_kernel
from ..memory import check_allocation
from .base import FactoredArm, LinearSecondStage, Parameters, SplitSecondStage
from .ridge import _per_arm_text, per_arm_positive
from .training import (
    NEURAL_DEFAULTS,
    STAGE_NAMES,
    NeuralEstimator,
    Standardizer,
    describe_training,
    input_scale,
    make_mlp,
    network_from_arrays,
    network_outputs,
    network_to_arrays,
    pseudo_outcome_coefficients,
    require_torch,
    resolve_training,
    split_units,
    stage_generator,
    stage_histories,
    torch_device,
    torch_dtype,
    train_stage,
    _positive_int,
)

__all__ = ["DeepFeatureEstimator", "DeepFeatureFoldArm", "PseudoOutcomeGram", "DEEP_FEATURE_DEFAULTS",
           "trace_loss", "heldout_loss"]

#: Documented defaults of the Deep Feature estimator (the training options
#: are :data:`ccme.estimators.training.NEURAL_DEFAULTS`).  M = 20 features as
#: in the paper; λ₀ = λ₁ = 0.01 in the paper's convention ΨᵀΨ + nλI, the
#: ridge estimator's default (the paper's λ = 20 unscaled is nλ with
#: λ ≈ 0.008 at its n = 5000, folds of 2500).  No weight decay: its penalties
#: already regularise, and on the zoo's "choose" split (n = 1000, seeds 1-2)
#: decays of 1, 2 and 4 gave 0.971, 1.025 and 1.043 of none
#: (``benchmarks/results/df_weight_decay_choose.txt``).
DEEP_FEATURE_DEFAULTS = {
    **NEURAL_DEFAULTS,
    "M": 20,
    "lam0": 1e-2,
    "lam1": 1e-2,
    "lam1_plugin": None,
    "lam_scaling": "n",
    "y_kernel": "gaussian",
    "y_bandwidth": "silverman",
}

_BLOCK_BYTES = 64 * 2**20
#: From this many units with a direct term (a_i ≠ 0) on, the loss's outcome kernel block k(Y_A, Y_B) is kept as
#: L_A L_Bᵀ, a pivoted Cholesky factor of the stage's outcomes run to :data:`OUTCOME_FACTOR_TOL` (every entry within
#: that of the dense block, times k(0)), when its rank is at most a quarter of the units: Ψ_Aᵀ K Ψ_B then costs
#: O(n r M) per evaluation instead of O(n² M), and memory O(n r) instead of O(n²).  Below it the dense block is
#: cheap and kept.  On the zoo's large_mixed at n = 4000 (seed 1; ranks about 80 for 1000-1600 units, about 105
#: at n = 12000) the default fit took 40 s instead of 69 s, its densities within 6e-11 (relative) of the dense
#: block's (``benchmarks/deep_feature_outcome_factor.py``); at n = 12000 108 s instead of 732 s.
OUTCOME_FACTOR_UNITS = 500
OUTCOME_FACTOR_TOL = 1e-10


def _gram_times(A, B, kernel, P, n_threads=0):
    """k(A, B) @ P with the normalised kernel, in row blocks of at most 64 MiB."""
    out = np.zeros((len(A), P.shape[1]))
    if len(A) == 0 or len(B) == 0:
        return out
    rows = max(1, _BLOCK_BYTES // (8 * len(B)))
    for i in range(0, len(A), rows):
        block = _backend.gram(A[i:i + rows], B, kernel.name, kernel.bandwidth_array, normalized=True,
                              n_threads=n_threads)
        out[i:i + rows] = block @ P
    return out


def _kernel_at_zero(kernel) -> float:
    """k(y, y) of the normalised outcome kernel (the same for every y)."""
    d = len(kernel.bandwidth)
    return float(_backend.gram(np.zeros((1, d)), np.zeros((1, d)), kernel.name, kernel.bandwidth_array,
                               normalized=True)[0, 0])


class PseudoOutcomeGram:
    """Inner products of pseudo-outcomes ξ_i = a_i φ(y_i) + Φ₀ P₀ u_i, without an n × n matrix.

    ⟨ξ_i, ξ_j⟩ = a_i a_j k(y_i, y_j) + a_i r_iᵀu_j + u_iᵀr_j a_j + u_iᵀ S u_j, with
    r_i = P₀ᵀ k_Y0(y_i) and S = P₀ᵀ K_Y0 P₀ (M₀ × M₀).  For the DR mode
    (u_i = (1 − ω_i) ψ̂₀(X_1i)) this is the four-term K_ξ of Algorithm "Deep
    Feature Estimator"; without ``U`` it is D_a K_Y D_a.

    Parameters
    ----------
    a : (n,)
    Y : (n, d_y)
    y_kernel : Kernel
        The normalised outcome kernel.
    U : (n, M₀), optional
        First-stage coefficients u_i = b_i ψ̂₀(X_1i).
    P0 : (m, M₀), Y0 : (m, d_y)
        First-stage loadings Ψ̂₀(Ψ̂₀ᵀΨ̂₀ + mλ₀I)⁻¹ and outcomes.
    """

    def __init__(self, a, Y, y_kernel, U=None, P0=None, Y0=None, n_threads=0):
        self.a = np.asarray(a, dtype=np.float64)
        self.Y = Y
        self.kernel = y_kernel
        self.n_threads = n_threads
        self.U = U
        diag = self.a**2 * _kernel_at_zero(y_kernel)
        if U is not None:
            direct = self.a != 0
            self.S = P0.T @ _gram_times(Y0, Y0, y_kernel, P0, n_threads)
            self.R = np.zeros((len(self.a), P0.shape[1]))
            self.R[direct] = _gram_times(Y[direct], Y0, y_kernel, P0, n_threads)
            diag = diag + 2 * self.a * np.sum(self.R * U, axis=1) + np.sum((U @ self.S) * U, axis=1)
        self.diag = diag

    @property
    def n(self) -> int:
        return len(self.a)

    @functools.cached_property
    def outcome_factor(self):
        """The outcome kernel as a factor: (L, row) with k(y_i, y_j) = L[row[i]] · L[row[j]] up to
        :data:`OUTCOME_FACTOR_TOL` · k(0) for the units with a_i ≠ 0 (row[i] = −1 for the others), or None
        where the dense block is kept (:data:`OUTCOME_FACTOR_UNITS`, or a rank of a quarter of the units)."""
        direct = np.flatnonzero(self.a != 0)
        if len(direct) < OUTCOME_FACTOR_UNITS:
            return None
        cap = len(direct) // 4
        # The factor of the unit-height kernel (k(0) = 1), scaled to the normalised one's height.
        L, _, _ = _backend.pivoted_cholesky(np.ascontiguousarray(self.Y[direct]), self.kernel.name,
                                            self.kernel.bandwidth_array, OUTCOME_FACTOR_TOL, cap,
                                            n_threads=self.n_threads)
        if L.shape[1] >= cap:
            return None
        row = np.full(self.n, -1, dtype=np.int64)
        row[direct] = np.arange(len(direct))
        return L * np.sqrt(_kernel_at_zero(self.kernel)), row

    def block(self, rows_a, rows_b, dtype, device) -> "GramBlock":
        """The block K_ξ[rows_a, rows_b] in factored form, as torch tensors."""
        return GramBlock(self, np.asarray(rows_a), np.asarray(rows_b), dtype, device)

    def dense(self) -> np.ndarray:
        """K_ξ as an n × n matrix (for tests and small problems)."""
        direct = np.flatnonzero(self.a != 0)
        K = np.zeros((self.n, self.n))
        if len(direct):
            K[np.ix_(direct, direct)] = (
                self.a[direct, None] * self.a[None, direct]
                * _backend.gram(self.Y[direct], self.Y[direct], self.kernel.name, self.kernel.bandwidth_array,
                                normalized=True)
            )
        if self.U is not None:
            cross = (self.a[:, None] * self.R) @ self.U.T
            K += cross + cross.T + self.U @ self.S @ self.U.T
        return K


class GramBlock:
    """K_ξ[A, B] of a :class:`PseudoOutcomeGram`, kept factored; :meth:`project` gives Ψ_Aᵀ K_ξ[A, B] Ψ_B."""

    def __init__(self, gram: PseudoOutcomeGram, rows_a, rows_b, dtype, device):
        torch = require_torch()
        self._t = lambda x: torch.as_tensor(np.ascontiguousarray(x), dtype=dtype, device=device)
        self._dtype, self._device = dtype, device
        a = gram.a
        self.pos_a = np.flatnonzero(a[rows_a] != 0)      # positions in rows_a of units with a_i ≠ 0
        self.pos_b = np.flatnonzero(a[rows_b] != 0)
        da, db = rows_a[self.pos_a], rows_b[self.pos_b]
        self.ia = torch.as_tensor(self.pos_a, device=device)
        self.ib = torch.as_tensor(self.pos_b, device=device)
        self.wa, self.wb = self._t(a[da][:, None]), self._t(a[db][:, None])
        factor = gram.outcome_factor if len(da) and len(db) else None
        self.K = self.La = self.Lb = None
        if factor is not None:
            L, row = factor
            self.La, self.Lb = self._t(L[row[da]]), self._t(L[row[db]])
        elif len(da) and len(db):
            # The one n_arm × n_arm kernel block of the loss (and its torch copy unless float64 on the CPU).
            copies = 1 if (dtype == torch.float64 and torch.device(device).type == "cpu") else 2
            check_allocation(8.0 * copies * len(da) * len(db),
                             f"the Deep Feature loss's kernel block ({len(da)} × {len(db)})")
            self.K = self._t(_backend.gram(gram.Y[da], gram.Y[db], gram.kernel.name, gram.kernel.bandwidth_array,
                                           normalized=True, n_threads=gram.n_threads))
        else:
            self.K = self._t(np.zeros((len(da), len(db))))
        self.factored = gram.U is not None
        if self.factored:
            self.Ua, self.Ub = self._t(gram.U[rows_a]), self._t(gram.U[rows_b])
            self.Ra, self.Rb = self._t(gram.R[da]), self._t(gram.R[db])
            self.S = self._t(gram.S)
        self.diag_a = self._t(gram.diag[rows_a])
        self.trace_a = float(np.sum(gram.diag[rows_a]))

    def project(self, Psi_a, Psi_b):
        """Ψ_Aᵀ K_ξ[A, B] Ψ_B (M × M), differentiable in Ψ_A and Ψ_B."""
        Wa = self.wa * Psi_a[self.ia]
        Wb = self.wb * Psi_b[self.ib]
        total = Wa.T @ (self.K @ Wb) if self.K is not None else (Wa.T @ self.La) @ (self.Lb.T @ Wb)
        if self.factored:
            Za = self.Ua.T @ Psi_a
            Zb = self.Ub.T @ Psi_b
            total = total + (Wa.T @ self.Ra) @ Zb + Za.T @ (self.Rb.T @ Wb) + Za.T @ (self.S @ Zb)
        return total

    def sub(self, positions):
        """The square sub-block at ``positions`` (a LongTensor of positions among this block's rows)."""
        torch = require_torch()
        sub = GramBlock.__new__(GramBlock)
        sub._t, sub._dtype, sub._device = self._t, self._dtype, self._device
        lookup = torch.full((len(self.diag_a),), -1, dtype=torch.long, device=self._device)
        lookup[self.ia] = torch.arange(len(self.ia), device=self._device)
        d = lookup[positions]
        keep = d >= 0
        d = d[keep]
        sub.ia = sub.ib = torch.nonzero(keep).reshape(-1)
        sub.wa = sub.wb = self.wa[d]
        sub.K = None if self.K is None else self.K[d][:, d]
        sub.La = sub.Lb = None if self.La is None else self.La[d]
        sub.factored = self.factored
        if self.factored:
            sub.Ua = sub.Ub = self.Ua[positions]
            sub.Ra = sub.Rb = self.Ra[d]
            sub.S = self.S
        sub.diag_a = self.diag_a[positions]
        sub.trace_a = sub.diag_a.sum()
        return sub


def trace_loss(block: GramBlock, Psi, lam_eff: float):
    """(1/n) Tr(K_ξ (I − Ψ(ΨᵀΨ + λ_eff I)⁻¹Ψᵀ)), eq. (first_stage_DF_psi), on a square block.

    Equals (1/n) Σ‖Ĉψ(v_i) − ξ_i‖² + (λ_eff/n)‖Ĉ‖²_HS at the optimal Ĉ of eq. (C_hat).
    """
    torch = require_torch()
    G = Psi.T @ Psi + lam_eff * torch.eye(Psi.shape[1], dtype=Psi.dtype, device=Psi.device)
    return (block.trace_a - torch.trace(torch.linalg.solve(G, block.project(Psi, Psi)))) / Psi.shape[0]


def heldout_loss(train_block: GramBlock, cross_block: GramBlock, Psi_t, Psi_s, lam_eff: float):
    """(1/|S|) Σ_{j∈S} ‖Ĉ ψ(v_j) − ξ_j‖² with Ĉ fitted on the training units T.

    With G = Ψ_TᵀΨ_T + λ_eff I: Tr(G⁻¹P_TT G⁻¹Ψ_SᵀΨ_S) − 2 Tr(G⁻¹P_ST) + Tr K_ξ[S, S],
    P_TT = Ψ_TᵀK_ξ[T, T]Ψ_T, P_ST = Ψ_SᵀK_ξ[S, T]Ψ_T.
    """
    torch = require_torch()
    G = Psi_t.T @ Psi_t + lam_eff * torch.eye(Psi_t.shape[1], dtype=Psi_t.dtype, device=Psi_t.device)
    A = torch.linalg.solve(G, train_block.project(Psi_t, Psi_t))
    B = torch.linalg.solve(G, Psi_s.T @ Psi_s)
    fit = torch.sum(A * B.T)
    cross = torch.trace(torch.linalg.solve(G, cross_block.project(Psi_s, Psi_t)))
    return (fit - 2 * cross + cross_block.trace_a) / Psi_s.shape[0]


class _FeatureMap:
    """A trained feature network ψ and its closed-form pieces over the stage's units."""

    def __init__(self, net, standardizer, Psi, G, history, dtype, device):
        self.net, self.standardizer = net, standardizer
        self.Psi, self.G = Psi, G
        self.history = history
        self.dtype, self.device = dtype, device

    def __call__(self, Z) -> np.ndarray:
        return network_outputs(self.net, self.standardizer, Z, self.dtype, self.device)

    def with_penalty(self, lam_eff: float) -> "_FeatureMap":
        """The same network and features with G = ΨᵀΨ + λ_eff I (another second-stage penalty)."""
        G = self.Psi.T @ self.Psi + lam_eff * np.eye(self.Psi.shape[1])
        return _FeatureMap(self.net, self.standardizer, self.Psi, G, self.history, self.dtype, self.device)


def penalty_shift(lam: float, count: int, scaling: str) -> float:
    """λ_eff of ΨᵀΨ + λ_eff I: nλ in the paper's convention (``scaling`` "n", ``count`` units), else λ unscaled."""
    return lam * count if scaling == "n" else lam


def fit_feature_map(Z, gram: PseudoOutcomeGram, *, lam, scaling, M, settings, stage, generator, label="",
                    n_threads=0, scale=None):
    """Train ψ on inputs ``Z`` (n × d) against the pseudo-outcomes of ``gram`` (trace loss); ``scale``: the inputs'
    per-column scales (:func:`ccme.estimators.training.input_scale`; None: their sd)."""
    torch = require_torch()
    device, dtype = torch_device(settings), torch_dtype(settings)

    def lam_eff(count):
        return penalty_shift(lam, count, scaling)

    standardizer = Standardizer(Z, settings.standardize, scale, far_out=True)
    # The split first: it then does not depend on M, so tuning compares every M on the same held-out units.
    train, val = split_units(len(Z), settings, generator)
    net = make_mlp(Z.shape[1], settings.hidden, M, generator, dtype, device)
    Zt = torch.as_tensor(standardizer(Z), dtype=dtype, device=device)
    train_t = torch.as_tensor(train, device=device)
    train_block = gram.block(train, train, dtype, device)

    def loss(batch):
        if batch is None:
            return trace_loss(train_block, net(Zt[train_t]), lam_eff(len(train)))
        batch = batch.to(device)
        return trace_loss(train_block.sub(batch), net(Zt[train_t[batch]]), lam_eff(len(batch)))

    if val is not None:
        cross_block = gram.block(val, train, dtype, device)
        val_t = torch.as_tensor(val, device=device)

    def val_loss():
        return heldout_loss(train_block, cross_block, net(Zt[train_t]), net(Zt[val_t]), lam_eff(len(train)))

    # K_ξ, and so the losses, scale with k_Y(0) (train_stage's loss_unit: the fit then does not depend on the
    # outcome's units).
    history = train_stage(net, loss, len(train), settings, stage, generator,
                          val_loss_fn=None if val is None else val_loss, label=label, n_threads=n_threads,
                          loss_unit=_kernel_at_zero(gram.kernel))
    Psi = network_outputs(net, standardizer, Z, dtype, device)
    G = Psi.T @ Psi + lam_eff(len(Z)) * np.eye(M)
    return _FeatureMap(net, standardizer, Psi, G, history, dtype, device)


class DeepFeatureFoldArm(FactoredArm, LinearSecondStage):
    """The Deep Feature CCME of one arm on one fold: c(v) = L (ΨᵀΨ + nλ₁I)⁻¹ψ(v), eq. (df_density).

    Its second stage is a ridge regression of the pseudo-outcomes in the
    learned features Ψ, so μ̂(v) = Σ_i β_i(v) ξ̂_i with β(v) = Ψ(ΨᵀΨ + nλ₁I)⁻¹ψ(v):
    it implements :class:`ccme.estimators.base.LinearSecondStage`, and the
    multiplier bootstrap applies *given the learned features* (the
    variability of training ψ is not resampled).

    Attributes
    ----------
    atoms : (N, d_y)
        Second-stage outcomes with a_i ≠ 0, then (DR, plug-in) the arm's first-stage outcomes.
    loadings : (N, M)
        [D_a Ψ ; P₀ Ψ̂₀₁ᵀ D_b Ψ].
    history : dict
        Stage (1, 2) → :class:`ccme.estimators.training.StageHistory`.
    feature_map
        The second-stage network ψ with Ψ (over the stage's units) and G = ΨᵀΨ + nλ₁I.
    pseudo : dict
        The pseudo-outcomes' pieces: ``a`` (n,), ``Y1``, and for DR and the
        plug-in ``U`` = D_b Ψ̂₀₁ᵀ (n × M₀), ``P0`` (m × M₀), ``Y0``; ``units``,
        the data rows of the second stage; ``units0``, the first stage's;
        ``direct``, which units' outcomes are atoms, where that is not
        a ≠ 0 (the plug-in part of a split second stage, :func:`split_plugin`).
    """

    def __init__(self, atoms, loadings, feature_map: _FeatureMap, history: dict, pseudo: dict):
        self._atoms = np.ascontiguousarray(atoms, dtype=np.float64)
        self.loadings = np.ascontiguousarray(loadings)
        self.feature_map = feature_map
        self.history = history
        self.pseudo = pseudo
        self.jitter = {}

    def coefficients(self, V_eval):
        """h(v) = (ΨᵀΨ + nλ₁I)⁻¹ψ(v), shape (M, n_eval)."""
        return np.linalg.solve(self.feature_map.G, self.feature_map(V_eval).T)

    @property
    def atom_units(self) -> np.ndarray | None:
        """The data row of each atom: the second stage's units with a_i ≠ 0, then the first stage's units.

        None for an estimator saved before the first stage's rows were kept.
        """
        direct = self.pseudo["units"][_direct(self.pseudo)]
        if "U" not in self.pseudo:
            return direct
        rows0 = self.pseudo.get("units0")
        return None if rows0 is None else np.concatenate([direct, rows0])

    # -- the linear second stage (ccme.bootstrap) ---------------------------
    @property
    def units(self) -> np.ndarray:
        return self.pseudo["units"]

    def beta(self, V_eval, n_threads: int = 0) -> np.ndarray:
        """β(v) = Ψ (ΨᵀΨ + nλ₁I)⁻¹ ψ(v), shape (n_units, n_eval)."""
        return self.feature_map.Psi @ self.coefficients(V_eval)

    def unit_features(self, points, feature: str, kernel, n_threads: int = 0, cache=None) -> np.ndarray:
        """P_i(y) = a_i F(Y_i, y) + b_i ⟨μ̂₀(X_i), F(·, y)⟩, μ̂₀(X_i) = Σ_j (P₀ ψ₀(X_i))_j φ(Y0_j)."""
        name, bw = kernel.name, kernel.bandwidth_array
        P = self.pseudo["a"][:, None] * _backend.atom_features(self.pseudo["Y1"], points, feature, name, bw, n_threads)
        if "U" in self.pseudo:  # U = D_b Ψ̂₀₁ᵀ already carries b
            F0 = _backend.atom_features(self.pseudo["Y0"], points, feature, name, bw, n_threads)
            P = P + self.pseudo["U"] @ (self.pseudo["P0"].T @ F0)
        return P

    def residual_features(self, P: np.ndarray, n_threads: int = 0) -> np.ndarray:
        """(I − H) P with H = Ψ (ΨᵀΨ + nλ₁I)⁻¹ Ψᵀ, the second stage's hat matrix (in M dimensions)."""
        Psi = self.feature_map.Psi
        return P - Psi @ np.linalg.solve(self.feature_map.G, Psi.T @ P)

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.DeepFeatureFoldArm"
    # 2: the pseudo-outcomes hold the second stage's units (bootstrap); 3: and the first stage's; 4: and, for the
    # plug-in part of a split second stage, the mask of the units whose outcomes are atoms ("direct")
    STATE_VERSION = 4
    _READS = (2, 3, 4)  # a version-2 state has no first-stage rows: its atom_units is None
    _STATE_FIELDS = ("atoms", "loadings", "history", "pseudo", "jitter", "network", "Psi", "G", "network_history")

    def to_state(self) -> dict:
        """The fitted estimator as a versioned state for :mod:`ccme.io`.

        The arrays as they are, the second-stage network as its weights
        (:func:`ccme.estimators.training.network_to_arrays`), and the training
        histories as plain dicts keyed by stage (``"1"``, ``"2"``).
        """
        from ..io import make_state

        fm = self.feature_map
        return make_state(
            self.STATE_SCHEMA, self.STATE_VERSION, atoms=self.atoms, loadings=self.loadings,
            history=_histories_to_state(self.history), pseudo=dict(self.pseudo), jitter=dict(self.jitter),
            network=network_to_arrays(fm.net, fm.standardizer, fm.dtype, fm.device), Psi=fm.Psi, G=fm.G,
            network_history=_history_to_state(fm.history),
        )

    @classmethod
    def from_state(cls, state) -> "DeepFeatureFoldArm":
        """Inverse of :meth:`to_state`: the network is rebuilt from its layer shapes and given the stored weights."""
        from ..errors import FormatError
        from ..io import check_schema

        check_schema(state, cls.STATE_SCHEMA, cls._READS, keys=cls._STATE_FIELDS)
        for name in ("atoms", "loadings", "Psi", "G"):
            if not isinstance(state[name], np.ndarray) or state[name].ndim != 2:
                raise FormatError(f"the stored Deep Feature estimator's {name} is not a matrix")
        if not isinstance(state["pseudo"], dict) or not isinstance(state["jitter"], dict):
            raise FormatError("the stored Deep Feature estimator's pseudo-outcomes or jitter are not dicts")
        net, standardizer, dtype, device = _network_from_state(state["network"])
        fmap = _FeatureMap(net, standardizer, state["Psi"], state["G"], _history_from_state(state["network_history"]),
                           dtype, device)
        arm = cls(state["atoms"], state["loadings"], fmap, _histories_from_state(state["history"]),
                  dict(state["pseudo"]))
        arm.jitter = dict(state["jitter"])
        return arm


_HISTORY_FIELDS = ("train", "validation", "best_epoch", "stopped_early", "seconds")


def _history_to_state(history) -> dict:
    """A training stage's :class:`~ccme.estimators.training.StageHistory` as plain values.

    The fields are listed here rather than taken from the dataclass, so that a
    field added to StageHistory does not change the fold arms' state unnoticed.
    """
    return {"train": list(history.train), "validation": list(history.validation), "best_epoch": history.best_epoch,
            "stopped_early": history.stopped_early, "seconds": history.seconds}


def _history_from_state(state):
    """Inverse of :func:`_history_to_state`."""
    from ..errors import FormatError
    from .training import StageHistory

    if not isinstance(state, dict) or set(state) != set(_HISTORY_FIELDS):
        raise FormatError(f"a stored training history should have the fields {list(_HISTORY_FIELDS)}")
    if not isinstance(state["train"], list) or not isinstance(state["validation"], list):
        raise FormatError("a stored training history has no loss lists")
    return StageHistory(train=list(state["train"]), validation=list(state["validation"]),
                        best_epoch=state["best_epoch"], stopped_early=state["stopped_early"], seconds=state["seconds"])


def _histories_to_state(histories: dict) -> dict:
    """Stage (int) → history, as ``{"1": ..., "2": ...}``."""
    from ..io import str_keys

    return str_keys({stage: _history_to_state(history) for stage, history in histories.items()})


def _histories_from_state(state) -> dict:
    from ..io import int_keys

    return {stage: _history_from_state(h) for stage, h in int_keys(state, what="the training histories").items()}


def _network_from_state(state):
    """:func:`ccme.estimators.training.network_from_arrays` on a checked state; its failures as FormatError."""
    from ..errors import CcmeError, FormatError

    fields = {"layers", "mean", "sd", "dtype", "device"}
    fences = {"low", "high"}      # the inputs' fences (:class:`Standardizer`); files written before them lack them
    if not isinstance(state, dict) or not (set(state) == fields or set(state) == fields | fences):
        raise FormatError(f"a stored network should have the fields {sorted(fields | fences)}")
    layers = state["layers"]
    if (not isinstance(layers, dict) or not layers
            or not all(isinstance(v, np.ndarray) and v.dtype.kind == "f" for v in layers.values())
            or not all(isinstance(state[k], str) for k in ("dtype", "device"))):
        raise FormatError("a stored network has no float weight arrays, or no dtype and device names")
    try:
        return network_from_arrays(state)
    except (CcmeError, KeyError, ValueError, IndexError, RuntimeError) as exc:
        raise FormatError(f"a stored network cannot be rebuilt: {exc}") from None


def first_stage_map(*, arm, Xo, Y, A, nuisance, prepared, seed, label="", n_threads=0, cache=None) -> _FeatureMap:
    """Stage 1 of one arm: ψ₀ on X among the arm's units of the fold's nuisance part.

    With a ``cache`` dict the map is kept under (arm, M, weight decay, λ₀), so that tuning
    λ₁ (:mod:`ccme.estimators.neural_tuning`) trains each first stage once.
    """
    key = (arm, prepared["M"], prepared["training"].weight_decay, prepared["lam0"][arm])
    if cache is not None and key in cache:
        return cache[key]
    rows0 = nuisance[A[nuisance] == arm]
    gram0 = PseudoOutcomeGram(np.ones(len(rows0)), Y[rows0], prepared["kernels"]["y"])
    fmap0 = fit_feature_map(Xo[rows0], gram0, lam=prepared["lam0"][arm], scaling=prepared["lam_scaling"],
                            M=prepared["M"], settings=prepared["training"], stage=1,
                            generator=stage_generator(seed, arm, 1), label=label, n_threads=n_threads,
                            scale=input_scale(prepared, "x"))
    if cache is not None:
        cache[key] = fmap0
    return fmap0


def build_deep_feature_arm(*, arm, mode, V, Xo, Y, A, target, nuisance, scores_target, prepared, seed, fold_index,
                           n_threads=0, cache=None):
    """Train both stages of one arm on one fold (the module docstring) and return its estimator.

    In the doubly robust mode with a plug-in penalty (``prepared["lam1_plugin"]``,
    chosen by :func:`plugin_penalty_curve` under ``tune="auto"``) the fold-arm
    is split (:func:`split_plugin`).  ``cache`` (optional dict) keeps
    first-stage maps between calls, see :func:`first_stage_map`.
    """
    settings = prepared["training"]
    M, scaling, kernel = prepared["M"], prepared["lam_scaling"], prepared["kernels"]["y"]
    label = f"fold {fold_index + 1}, arm {arm}, "
    in_arm = A[target] == arm
    if mode == "onestep":
        rows = target[in_arm]
        gram = PseudoOutcomeGram(np.ones(len(rows)), Y[rows], kernel)
        fmap = fit_feature_map(V[rows], gram, lam=prepared["lam1"][arm], scaling=scaling, M=M, settings=settings,
                               stage=1, generator=stage_generator(seed, arm, 1), label=label, n_threads=n_threads,
                               scale=input_scale(prepared, "v"))
        return _assemble(fmap, {1: fmap.history}, np.ones(len(rows)), Y[rows], rows)
    a, b = pseudo_outcome_coefficients(mode, arm, A, target, scores_target)
    history = {}
    first = None
    if np.any(b != 0):
        first = first_stage_at(arm=arm, Xo=Xo, Y=Y, A=A, target=target, nuisance=nuisance, prepared=prepared,
                               seed=seed, label=label, n_threads=n_threads, cache=cache)
        history[1] = first.history
        gram = PseudoOutcomeGram(a, Y[target], kernel, U=b[:, None] * first.Psi01, P0=first.P0, Y0=first.Y0)
    else:
        gram = PseudoOutcomeGram(a, Y[target], kernel)
    fmap = fit_feature_map(V[target], gram, lam=prepared["lam1"][arm], scaling=scaling, M=M, settings=settings,
                           stage=2, generator=stage_generator(seed, arm, 2), label=label, n_threads=n_threads,
                           scale=input_scale(prepared, "v"))
    history[2] = fmap.history
    arm_est = _assemble(fmap, history, a, Y[target], target, first, b)
    lam_plugin = (prepared.get("lam1_plugin") or {}).get(arm)
    if mode == "dr" and first is not None and lam_plugin is not None:
        return split_plugin(arm_est, first, lam_plugin, scaling)
    return arm_est


@dataclass(frozen=True)
class _FirstStage:
    """A fold-arm's first stage at its second-stage units: μ̂₀(X_1i) = Σ_j (P₀ ψ₀(X_1i))_j φ(Y0_j)."""

    Psi01: np.ndarray   # ψ₀(X_1i), rows over the second-stage units (n × M₀)
    P0: np.ndarray      # Ψ̂₀(Ψ̂₀ᵀΨ̂₀ + mλ₀I)⁻¹ (m × M₀)
    Y0: np.ndarray      # the first stage's outcomes (m × d_y)
    rows0: np.ndarray   # their data rows
    history: object     # the first stage's training history


def first_stage_at(*, arm, Xo, Y, A, target, nuisance, prepared, seed, label="", n_threads=0, cache=None):
    """The first stage of one arm (:func:`first_stage_map`) evaluated at the second-stage units ``target``."""
    fmap0 = first_stage_map(arm=arm, Xo=Xo, Y=Y, A=A, nuisance=nuisance, prepared=prepared, seed=seed, label=label,
                            n_threads=n_threads, cache=cache)
    P0 = np.linalg.solve(fmap0.G, fmap0.Psi.T).T          # Ψ̂₀(Ψ̂₀ᵀΨ̂₀ + mλ₀I)⁻¹, symmetric G
    rows0 = nuisance[A[nuisance] == arm]
    return _FirstStage(Psi01=fmap0(Xo[target]), P0=P0, Y0=Y[rows0], rows0=rows0, history=fmap0.history)


def _direct(pseudo: dict) -> np.ndarray:
    """Which second-stage units' outcomes are atoms: the stored mask, else a ≠ 0."""
    return pseudo["direct"] if "direct" in pseudo else pseudo["a"] != 0


def _assemble(fmap, history, a, Y1, units, first: _FirstStage | None = None, b=None, direct=None):
    """The fold-arm of pseudo-outcomes ξ_i = a_i φ(Y_i) + b_i μ̂₀(X_i) regressed on the features of ``fmap``.

    Atoms [Y1[direct] ; Y0] with loadings [D_a Ψ ; P₀ Ψ̂₀₁ᵀ D_b Ψ], eq. (df_density);
    ``direct`` defaults to a ≠ 0.
    """
    direct = a != 0 if direct is None else direct
    atoms, loadings = [Y1[direct]], [a[direct, None] * fmap.Psi[direct]]
    pseudo = {"a": a, "Y1": Y1, "units": units}
    if not np.array_equal(direct, a != 0):
        pseudo["direct"] = direct
    if first is not None:
        U = b[:, None] * first.Psi01                         # D_b Ψ̂₀₁ᵀ
        atoms.append(first.Y0)
        loadings.append(first.P0 @ (U.T @ fmap.Psi))
        pseudo.update(U=U, P0=first.P0, Y0=first.Y0, units0=first.rows0)
    return DeepFeatureFoldArm(np.vstack(atoms), np.vstack(loadings), fmap, history, pseudo)


def split_plugin(arm_est: "DeepFeatureFoldArm", first: _FirstStage, lam_plugin: float,
                 scaling: str) -> SplitSecondStage:
    """The doubly robust fold-arm ``arm_est`` with its plug-in part smoothed at its own penalty λ₁ᵖ.

    ξ̂_i = ω_i (φ(Y_i) − μ̂₀(X_i)) + μ̂₀(X_i): the correction keeps the learned
    features' penalty (G = ΨᵀΨ + nλ₁I), the plug-in part, whose targets carry
    no outcome noise, gets G_p = ΨᵀΨ + nλ₁ᵖI (``scaling`` as in
    :func:`penalty_shift`; the ridge estimator's split,
    :class:`ccme.estimators.base.SplitSecondStage`).  Both parts share the
    network, the atoms and the units; ``first`` is the arm's first stage at
    those units (:func:`first_stage_at`).
    """
    fmap, history, p = arm_est.feature_map, arm_est.history, arm_est.pseudo
    a, Y1, units = p["a"], p["Y1"], p["units"]
    correction = _assemble(fmap, history, a, Y1, units, first, -a)
    plugin = _assemble(fmap.with_penalty(penalty_shift(lam_plugin, len(units), scaling)), history, np.zeros_like(a),
                       Y1, units, first, np.ones_like(a), direct=a != 0)
    return SplitSecondStage(correction=correction, plugin=plugin)


def plugin_penalty_curve(Psi, first: _FirstStage, lambdas, scaling: str, kernel) -> np.ndarray:
    """Leave-one-out error of the plug-in part's regression on the learned features, at each λ of ``lambdas``.

    The targets are μ̂₀(X_i) = Σ_j (P₀ ψ₀(X_i))_j φ(Y0_j): coordinates
    T = Ψ̂₀₁ in the metric C = P₀ᵀ K_Y0 P₀.  The ridge regression on the
    second stage's features Ψ (n × M) with G = ΨᵀΨ + λ_eff I has the hat
    matrix H = Ψ G⁻¹ Ψᵀ and leave-one-out residuals r_i / (1 − H_ii), so the
    criterion, (1/n) Σ_i r_iᵀ C r_i / (1 − H_ii)², costs one SVD of Ψ
    (O(n M²)) for the whole path: the ridge estimator's criterion for λ₁ᵖ
    (:func:`ccme.tuning.tune_ridge`) in M dimensions.

    Parameters
    ----------
    Psi : ndarray (n, M)
        The second stage's learned features at its units.
    first : _FirstStage
        The arm's first stage at the same units (:func:`first_stage_at`).
    lambdas : array of float
        Penalties in the fit's convention (``scaling`` "n": ΨᵀΨ + nλI; "none": ΨᵀΨ + λI).
    scaling : {"n", "none"}
    kernel : ccme.kernels.Kernel
        The loss's outcome kernel.

    Returns
    -------
    ndarray
        The criterion at each λ.
    """
    n = len(Psi)
    T = first.Psi01
    C = first.P0.T @ _gram_times(first.Y0, first.Y0, kernel, first.P0)
    U, s, _ = np.linalg.svd(Psi, full_matrices=False)
    UT = U.T @ T
    errors = np.empty(len(lambdas))
    for k, lam in enumerate(np.asarray(lambdas, dtype=float)):
        shrink = s**2 / (s**2 + penalty_shift(lam, n, scaling))
        R = (T - U @ (shrink[:, None] * UT)) / (1.0 - (U**2) @ shrink)[:, None]
        errors[k] = np.einsum("ij,jk,ik->", R, C, R) / n
    return errors


class DeepFeatureEstimator(NeuralEstimator):
    """``method="deep_feature"``: neural feature maps in both stages (see the module docstring)."""

    name = "deep_feature"
    title = "deep feature"
    build_arm = staticmethod(build_deep_feature_arm)
    supports_bootstrap = True  # the second stage is ridge in the learned features (DeepFeatureFoldArm)
    #: Measured by ``benchmarks/inference/coverage.py --method deep_feature`` and
    #: ``benchmarks/inference/deep_feature_size.py``; the bias located by
    #: ``benchmarks/inference/interval_diagnosis.py`` (README, "Effects and uncertainty").
    bootstrap_caveat = (
        "Deep Feature's bands, intervals and tests hold its learned features fixed, and the estimate in those "
        "features can be biased at some V-points by more than its standard error, a bias the bootstrap does not "
        "see: in ccme's coverage study (n = 2000, 50-60 data sets per case) its 90% bands covered the smoothed "
        "density 0.87-0.93 of the time pointwise and 0.64-0.84 simultaneously, its 90% mean-difference and QTE "
        "intervals 0.71-0.86, and its test of no effect rejected 29% of null data sets at the 5% level (n = 1000); "
        "use method='ridge' for calibrated inference"
    )
    defaults = DEEP_FEATURE_DEFAULTS
    aliases = {"lam": ("lam0", "lam1")}

    def prepare(self, options: dict, *, design, Xo, seed: int) -> Parameters:
        require_torch()
        if options["lam_scaling"] not in ("n", "none"):
            raise ParameterError(f"`lam_scaling` must be 'n' or 'none'; got {options['lam_scaling']!r}")
        return Parameters({
            "kernels": {
                "y": resolve_kernel(options["y_kernel"], options["y_bandwidth"], design.Y, what="y_bandwidth",
                                    seed=seed, density=True),
            },
            "training": resolve_training(options),
            "M": _positive_int(options["M"], "M"),
            "lam0": per_arm_positive(options["lam0"], "lam0", design.treatment),
            "lam1": per_arm_positive(options["lam1"], "lam1", design.treatment),
            "lam1_plugin": None if options["lam1_plugin"] is None else
            per_arm_positive(options["lam1_plugin"], "lam1_plugin", design.treatment),
            "lam_scaling": options["lam_scaling"],
        })

    def describe(self, prepared, *, design, outcome_columns, embeddings) -> list:
        convention = "Psi'Psi + n*lambda*I" if prepared["lam_scaling"] == "n" else "Psi'Psi + lambda*I, unscaled"
        return [
            ("Outcome kernel", [("Y (density, loss)", prepared["kernels"]["y"].describe(design.y_names))]),
            (f"Deep features (M = {prepared['M']}; {convention})", [
                ("lambda0 (stage 1)", _per_arm_text(prepared["lam0"], design.treatment)),
                ("lambda1 (stage 2)", _per_arm_text(prepared["lam1"], design.treatment)),
            ] + ([("lambda1, plug-in part", _per_arm_text(prepared["lam1_plugin"], design.treatment))]
                 if prepared.get("lam1_plugin") is not None else [])),
            ("Training", describe_training(prepared["training"], prepared.get("input_kernels"))
             + training_rows(embeddings)),
        ]


def training_rows(embeddings) -> list:
    """Summary rows: epochs run and seconds per stage, over the fitted folds and arms ({arm: Embedding})."""
    rows = []
    binary = set(embeddings) == {0, 1}
    for arm in embeddings:
        parts = embeddings[arm].parts
        for stage in STAGE_NAMES:
            runs = [h[stage] for h in map(stage_histories, parts) if stage in h]
            if not runs:
                continue
            epochs = [len(h.train) for h in runs]
            early = sum(h.stopped_early for h in runs)
            seconds = sum(h.seconds for h in runs)
            text = f"{min(epochs)}–{max(epochs)} epochs" if min(epochs) != max(epochs) else f"{epochs[0]} epochs"
            text += f" over {len(runs)} fold(s), {seconds:.1f} s"
            if early:
                text += f", {early} stopped early"
            name = ("Treated" if arm == 1 else "Control") if binary else f"Arm {arm}"
            rows.append((f"{name} {STAGE_NAMES[stage]}", text))
    return rows
