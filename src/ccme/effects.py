"""Distributional treatment effects at V = v: how p(Y¹ | v) and p(Y⁰ | v) differ.

Every quantity is computed from the two arms' embeddings through
:meth:`ccme.embedding.ArmEmbedding.weights` and ``contract``, so it works for
every estimator:

- difference of means E[Y¹ | v] − E[Y⁰ | v] (the CATE implied by the two
  estimated distributions);
- quantile treatment effects Q₁(q | v) − Q₀(q | v) (d_y = 1), from the
  normalised, monotone CDFs;
- the maximum mean discrepancy ‖μ̂_{Y¹|V}(v) − μ̂_{Y⁰|V}(v)‖ in the RKHS of the
  outcome kernel *as fitted* (``res.kernels["y"]``, the normalised kernel of
  the embedding; the weights c_k(v) do not depend on it, and an arm's density
  read-out kernel, if tuned separately, does not change it).  It is
  computed exactly from the weights and atoms: with Z the atoms of both arms
  and W = [c₁; −c₀], MMD² = Wᵀ k(Z, Z) W = c₁ᵀK₁₁c₁ − 2c₁ᵀK₁₀c₀ + c₀ᵀK₀₀c₀, in
  the compiled core (tile by tile, never forming k(Z, Z)).  It is the distance
  between the raw embeddings (no rescaling to unit mass), the quantity the
  bootstrap test of :mod:`ccme.bootstrap` calibrates;
- the Kolmogorov distance sup_y |F̂₁(y | v) − F̂₀(y | v)| and the
  1-Wasserstein distance ∫ |F̂₁ − F̂₀| dy between the normalised estimated
  distributions (d_y = 1), on a fine grid (:func:`fine_grid`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import _backend

__all__ = ["mmd", "fine_grid", "effect_table", "DEFAULT_QUANTILES"]

#: Levels of the quantile treatment effects reported by default.
DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def _merged(atoms: np.ndarray, weights: np.ndarray):
    """Equal atoms merged (their weights summed): the same embedding over fewer atoms.

    The arms of a cross-fitted ridge fit share their second-stage outcomes,
    and the first-stage atoms of one fold are second-stage atoms of another,
    so merging shrinks the quadratic form about threefold.
    """
    unique, inverse = np.unique(atoms, axis=0, return_inverse=True)
    merged = np.zeros((len(unique), weights.shape[1]))
    np.add.at(merged, inverse.reshape(-1), weights)
    return np.ascontiguousarray(unique), merged


def mmd(emb1, emb0, V_eval: np.ndarray, kernel, n_threads: int = 0) -> np.ndarray:
    """‖μ̂₁(v) − μ̂₀(v)‖ in the RKHS of the normalised ``kernel`` for each row of ``V_eval``, shape (n,)."""
    atoms1, c1 = emb1.weights(V_eval)
    atoms0, c0 = emb0.weights(V_eval)
    atoms, W = _merged(np.vstack([atoms1, atoms0]), np.vstack([c1, -c0]))
    q = _backend.kernel_quadratic_forms(atoms, W, kernel.name, kernel.bandwidth_array, normalized=True,
                                        n_threads=n_threads)
    # Rounding can leave a tiny negative value when the embeddings coincide.
    return np.sqrt(np.maximum(q, 0.0))


def fine_grid(res, size: int = 2001) -> np.ndarray:
    """An increasing outcome grid over the data ± 6 outcome bandwidths (the larger arm's; d_y = 1).

    Beyond six bandwidths the kernel leaves less than 1e-9 of an atom's mass,
    so the normalised CDF is 0 and 1 at the ends up to that; the step is
    (range + 12σ)/(size − 1).
    """
    sigma = max(k.bandwidth_array[0] * (2.0 if k.name == "laplace" else 1.0)
                for k in (res._embedding(1).y_kernel, res._embedding(0).y_kernel))
    y = res.design.Y[:, 0]
    return np.linspace(y.min() - 6.0 * sigma, y.max() + 6.0 * sigma, size)


def effect_table(res, V: np.ndarray, index, q=DEFAULT_QUANTILES) -> pd.DataFrame:
    """The table of :meth:`ccme.CCMEResult.effect` (see there)."""
    emb1, emb0 = res._embedding(1), res._embedding(0)
    _, mean1, _ = emb1.moments(V)
    _, mean0, _ = emb0.moments(V)
    table = pd.DataFrame(index=pd.Index(list(index), name="profile"))
    names = res.design.y_names
    if len(names) == 1:
        table["mean Y1"] = mean1[:, 0]
        table["mean Y0"] = mean0[:, 0]
        table["mean diff"] = mean1[:, 0] - mean0[:, 0]
    else:
        for j, name in enumerate(names):
            table[f"mean diff[{name}]"] = mean1[:, j] - mean0[:, j]
    if len(names) == 1:
        grid = fine_grid(res)
        q = np.atleast_1d(np.asarray(q, dtype=np.float64))
        if len(q):
            qte = emb1.quantile(V, q, grid) - emb0.quantile(V, q, grid)
            for j, level in enumerate(q):
                table[f"qte {level:g}"] = qte[:, j]
    table["mmd"] = mmd(emb1, emb0, V, res.kernels["y"], n_threads=emb1.n_threads)
    if len(names) == 1:
        F1 = emb1.cdf(V, grid[:, None], normalize=True)
        F0 = emb0.cdf(V, grid[:, None], normalize=True)
        gap = np.abs(F1 - F0)
        table["kolmogorov"] = gap.max(axis=1)
        # The trapezoid rule on the fine grid; the CDFs are 0 and 1 beyond it.
        table["wasserstein"] = np.sum(0.5 * (gap[:, 1:] + gap[:, :-1]) * np.diff(grid), axis=1)
    return table
