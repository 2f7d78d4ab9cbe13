"""Building blocks of the accuracy zoo: exact Gaussian mixtures and the case protocol.

Every truth in the zoo is a finite mixture of Gaussians per V-point,

    p(y^a | V = v) = Σ_k w_k(v) N(y; m_k(v), C_k(v)),

held in a :class:`Mixture` (weights (n_v, K), means (n_v, K, d), covariances
(n_v, K, d, d); unused slots have weight 0).  Densities, CDFs (d = 1) and the
grid limits are computed from it in closed form, so no truth involves
numerical integration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, ndtr, softmax

__all__ = ["Mixture", "Case", "SyntheticCase", "gaussian", "combine", "bounded", "expit", "softmax"]


def _pdf(z):
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def bounded(lo: float, hi: float, eta) -> np.ndarray:
    """A propensity lo + (hi − lo)·expit(η): its range is exactly inside [lo, hi]."""
    return lo + (hi - lo) * expit(np.asarray(eta, dtype=float))


@dataclass(frozen=True)
class Mixture:
    """Per V-point Gaussian mixtures: weights (n_v, K), means (n_v, K, d), covs (n_v, K, d, d)."""

    weights: np.ndarray
    means: np.ndarray
    covs: np.ndarray

    @property
    def dim(self) -> int:
        return self.means.shape[2]

    def __len__(self) -> int:
        return self.weights.shape[0]

    def density(self, y) -> np.ndarray:
        """(n_v, G) densities at y (G,) for d = 1, or (G, d) for d > 1."""
        y = np.asarray(y, dtype=float)
        if self.dim == 1:
            return self._univariate(y.reshape(-1), _pdf)
        y = y.reshape(-1, self.dim)
        out = np.zeros((len(self), y.shape[0]))
        for k in range(self.weights.shape[1]):
            w = self.weights[:, k]
            live = np.flatnonzero(w > 0)
            if live.size == 0:
                continue
            cov = self.covs[live, k]
            prec = np.linalg.inv(cov)
            det = np.linalg.det(cov)
            diff = y[None, :, :] - self.means[live, k][:, None, :]
            quad = np.einsum("vgi,vij,vgj->vg", diff, prec, diff)
            const = 1.0 / np.sqrt((2 * np.pi) ** self.dim * det)
            out[live] += (w[live] * const)[:, None] * np.exp(-0.5 * quad)
        return out

    def cdf(self, y) -> np.ndarray:
        """(n_v, G) CDF values (d = 1 only)."""
        if self.dim != 1:
            raise ValueError("cdf is defined for a univariate outcome")
        return self._univariate(np.asarray(y, dtype=float).reshape(-1), ndtr)

    def _univariate(self, y, kernel) -> np.ndarray:
        """Σ_k w_k kernel((y − m_k) / s_k) / (s_k if pdf), by rows (many components) or by components."""
        sd = np.sqrt(self.covs[:, :, 0, 0])
        mean = self.means[:, :, 0]
        scale = sd if kernel is _pdf else np.ones_like(sd)
        out = np.zeros((len(self), y.size))
        if self.weights.shape[1] > len(self):
            for r in range(len(self)):
                live = self.weights[r] > 0
                w = self.weights[r, live] / scale[r, live]
                for start in range(0, y.size, 4096):
                    block = y[start:start + 4096]
                    out[r, start:start + 4096] = w @ kernel((block[None, :] - mean[r, live, None]) / sd[r, live, None])
            return out
        for k in range(self.weights.shape[1]):
            live = self.weights[:, k] > 0
            if live.any():
                w = self.weights[live, k] / scale[live, k]
                out[live] += w[:, None] * kernel((y[None, :] - mean[live, k, None]) / sd[live, k, None])
        return out

    def limits(self, z: float = 8.0, wmin: float = 1e-12) -> np.ndarray:
        """(d, 2) box holding every component with weight ≥ wmin to ±z standard deviations."""
        live = self.weights >= wmin
        sd = np.sqrt(np.diagonal(self.covs, axis1=2, axis2=3))  # (n_v, K, d)
        lo = np.where(live[:, :, None], self.means - z * sd, np.inf).min(axis=(0, 1))
        hi = np.where(live[:, :, None], self.means + z * sd, -np.inf).max(axis=(0, 1))
        return np.stack([lo, hi], axis=1)

    def sample(self, m: int, rng, row: int = 0) -> np.ndarray:
        """m draws from the mixture of V-point ``row`` (for checks)."""
        w = self.weights[row] / self.weights[row].sum()
        k = rng.choice(w.size, size=m, p=w)
        z = rng.standard_normal((m, self.dim))
        chol = np.linalg.cholesky(self.covs[row])
        return self.means[row, k] + np.einsum("mij,mj->mi", chol[k], z)


def gaussian(mean, var) -> Mixture:
    """One-component mixtures: mean (n_v,) or (n_v, d); var (n_v,) or (n_v, d, d)."""
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    if mean.ndim == 1:
        mean = mean[:, None]
        var = var.reshape(-1, 1, 1)
    n_v = mean.shape[0]
    var = np.broadcast_to(var, (n_v,) + var.shape[1:])
    return Mixture(np.ones((n_v, 1)), mean[:, None, :], np.array(var)[:, None, :, :])


def combine(parts) -> Mixture:
    """Σ_j q_j(v) · mixture_j(v): ``parts`` is a list of (q_j (n_v,), Mixture)."""
    weights, means, covs = [], [], []
    for q, mix in parts:
        q = np.broadcast_to(np.asarray(q, dtype=float), (len(mix),))
        weights.append(q[:, None] * mix.weights)
        means.append(mix.means)
        covs.append(mix.covs)
    return Mixture(np.concatenate(weights, axis=1), np.concatenate(means, axis=1), np.concatenate(covs, axis=1))


class Case:
    """One benchmark case.

    Attributes
    ----------
    name, description : str
    split : {"choose", "report"}
    formula : str
        The formula an analyst would write (V = part 2, X = V ∪ part 3).
    n : int
        The case's sample size (semi-synthetic: None keeps the table as it is).
    dim_y : int
    v_columns : list of str
        The raw columns V is built from (what ``density``'s ``v_frame`` holds).
    x_columns : list of str
        The raw covariate columns of the observed data.
    discrete_v : bool
        True when V takes finitely many values: evaluated at all of them.
    ps_range : (float, float)
        Bounds of the true propensity score, by construction.
    features : tuple of str
        Tags for the table of cases.
    """

    name = ""
    description = ""
    kind = "synthetic"
    split = "report"
    formula = ""
    n = 2000
    dim_y = 1
    v_columns: list = []
    x_columns: list = []
    discrete_v = False
    ps_range = (0.1, 0.9)
    features: tuple = ()

    # --- the protocol -------------------------------------------------------------
    def simulate(self, n, seed):
        """(observed frame, truth frame with ps and the potential outcomes) for ``n`` units."""
        raise NotImplementedError

    def mixture(self, v_frame: pd.DataFrame, arm: int) -> Mixture:
        """The exact mixture p(Y^a | V = v) at each row of ``v_frame``."""
        raise NotImplementedError

    def sample_given_v(self, v_row: pd.DataFrame, arm: int, m: int, rng) -> np.ndarray:
        """m draws of Y^a given V = v (one row), by the data-generating code itself."""
        raise NotImplementedError

    def eval_points(self, n_points: int, seed) -> pd.DataFrame:
        """V-points to evaluate at: fresh draws of V, or every level of a discrete V."""
        raise NotImplementedError

    # --- derived --------------------------------------------------------------------
    @property
    def outcome_columns(self) -> list:
        return ["y"] if self.dim_y == 1 else [f"y{j}" for j in range(1, self.dim_y + 1)]

    @property
    def treatment_column(self) -> str:
        return "a"

    def draw(self, n=None, seed=None):
        """(observed DataFrame, formula): outcome(s), treatment and covariates only."""
        data, _ = self.simulate(self.n if n is None else n, seed)
        return data, self.formula

    def density(self, y_grid, v_frame: pd.DataFrame, arm: int) -> np.ndarray:
        """Exact p(y^a | V = v): (n_v, G) for every row of ``v_frame`` at ``y_grid``."""
        return self.mixture(v_frame, arm).density(y_grid)


class SyntheticCase(Case):
    """A simulation X = (V, W): V, then W | V, then A | X, then Y^a | X.

    Subclasses give ``sample_v``, ``sample_w`` (W | V), ``propensity`` (of the
    full covariate frame), ``sample_y`` (Y^a | X) and the closed form
    ``mixture``.  ``sample_given_v`` reuses ``sample_w`` and ``sample_y`` at a
    fixed v, so the tests compare the closed form with the generating code.
    """

    def sample_v(self, n: int, rng) -> pd.DataFrame:
        raise NotImplementedError

    def sample_w(self, v: pd.DataFrame, rng) -> pd.DataFrame:
        raise NotImplementedError

    def propensity(self, x: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def sample_y(self, x: pd.DataFrame, arm: int, rng) -> np.ndarray:
        raise NotImplementedError

    def simulate(self, n, seed, v_seed=None):
        """As :meth:`Case.simulate`; with ``v_seed``, V comes from a stream of its own (the same V for every
        ``seed``: a fixed design, for studies that condition on it) and W, A and Y from ``seed``'s."""
        n = int(n)
        rng = np.random.default_rng(seed)
        v_rng = rng if v_seed is None else np.random.default_rng(v_seed)
        v = self.sample_v(n, v_rng).reset_index(drop=True)
        w = self.sample_w(v, rng).reset_index(drop=True)
        x = pd.concat([v, w], axis=1)
        ps = self.propensity(x)
        a = rng.binomial(1, ps)
        y1 = np.asarray(self.sample_y(x, 1, rng), dtype=float)
        y0 = np.asarray(self.sample_y(x, 0, rng), dtype=float)
        return _assemble(self, x, a, ps, y0, y1)

    def sample_given_v(self, v_row, arm, m, rng):
        v = v_row.iloc[np.zeros(m, dtype=int)].reset_index(drop=True)
        w = self.sample_w(v, rng).reset_index(drop=True)
        return np.asarray(self.sample_y(pd.concat([v, w], axis=1), arm, rng), dtype=float)

    def eval_points(self, n_points, seed):
        return self.sample_v(int(n_points), np.random.default_rng(seed)).reset_index(drop=True)


def _assemble(case: Case, x: pd.DataFrame, a, ps, y0, y1):
    """Observed frame (outcomes, a, covariates) and truth frame (ps, potential outcomes)."""
    obs_y = np.where((a == 1)[:, None] if y1.ndim == 2 else (a == 1), y1, y0)
    frame = pd.DataFrame(index=x.index)
    truth = pd.DataFrame({"ps": ps}, index=x.index)
    if y1.ndim == 1:
        frame["y"] = obs_y
        truth["y0"], truth["y1"] = y0, y1
    else:
        for j in range(y1.shape[1]):
            frame[f"y{j + 1}"] = obs_y[:, j]
        for j in range(y1.shape[1]):
            truth[f"y0_{j + 1}"], truth[f"y1_{j + 1}"] = y0[:, j], y1[:, j]
    frame["a"] = np.asarray(a, dtype=int)
    frame = pd.concat([frame, x[case.x_columns]], axis=1)
    return frame, truth
