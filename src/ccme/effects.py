"""Distributional treatment effects at V = v: how p(Y¹ | v) and p(Y⁰ | v) differ.

Every quantity is computed from the two arms' embeddings through
:class:`ccme.Embedding`, so it works for every estimator:

- difference of means E[Y¹ | v] − E[Y⁰ | v] (the CATE implied by the two
  estimated distributions);
- quantile treatment effects Q₁(q | v) − Q₀(q | v) (d_y = 1), from the
  normalised, monotone CDFs;
- the maximum mean discrepancy ‖μ̂_{Y¹|V}(v) − μ̂_{Y⁰|V}(v)‖ in the RKHS of the
  outcome kernel *as fitted* (``res.kernels["y"]``, the normalised kernel of
  the embedding; an arm's density read-out kernel, if tuned separately, does
  not change it), exactly (:meth:`ccme.Embedding.mmd`).  It is the distance
  between the raw embeddings (no rescaling to unit mass), whose square the
  bootstrap test of :mod:`ccme.bootstrap` calibrates;
- the Kolmogorov distance sup_y |F̂₁(y | v) − F̂₀(y | v)| and the
  1-Wasserstein distance ∫ |F̂₁ − F̂₀| dy between the normalised estimated
  distributions (d_y = 1), on a fine grid (:func:`fine_grid`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


__all__ = ["fine_grid", "effect_table", "tidy_effects", "DEFAULT_QUANTILES"]

#: Levels of the quantile treatment effects reported by default.
DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def fine_grid(res, size: int = 2001) -> np.ndarray:
    """The grid both arms are compared on (:meth:`ccme.CCMEResult.fine_grid`)."""
    return res.fine_grid(size)


def effect_table(res, V: np.ndarray, index, q=DEFAULT_QUANTILES) -> pd.DataFrame:
    """The effects as a wide table, one row per V-point (the summary's; :func:`tidy_effects` makes it long)."""
    emb1, emb0 = res.embedding(1), res.embedding(0)
    mean1 = emb1.mean(v=V)
    mean0 = emb0.mean(v=V)
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
        grid = res.fine_grid()
        q = np.atleast_1d(np.asarray(q, dtype=np.float64))
        if len(q):
            qte = emb1.quantile(q, v=V, grid=grid) - emb0.quantile(q, v=V, grid=grid)
            for j, level in enumerate(q):
                table[f"qte {level:g}"] = qte[:, j]
    table["mmd"] = emb1.mmd(emb0, v=V)
    if len(names) == 1:
        F1 = emb1.cdf(grid[:, None], v=V, normalize=True)
        F0 = emb0.cdf(grid[:, None], v=V, normalize=True)
        gap = np.abs(F1 - F0)
        table["kolmogorov"] = gap.max(axis=1)
        # The trapezoid rule on the fine grid; the CDFs are 0 and 1 beyond it.
        table["wasserstein"] = np.sum(0.5 * (gap[:, 1:] + gap[:, :-1]) * np.diff(grid), axis=1)
    return table


def tidy_effects(table: pd.DataFrame, y_names) -> pd.DataFrame:
    """The wide table of :func:`effect_table` as a long one: profile, term, outcome, level, estimate."""
    rows = []
    single = len(y_names) == 1
    for label, row in table.iterrows():
        for column, value in row.items():
            outcome, level = (y_names[0] if single else None), np.nan
            if column in ("mean Y1", "mean Y0"):
                continue
            if column == "mean diff" or column.startswith("mean diff["):
                term = "mean_diff"
                if not single:
                    outcome = column[len("mean diff["):-1]
            elif column.startswith("qte "):
                term, level = "qte", float(column[4:])
            else:
                term = column
            rows.append({"profile": label, "term": term, "outcome": outcome, "level": level, "estimate": value})
    return pd.DataFrame(rows, columns=["profile", "term", "outcome", "level", "estimate"])
