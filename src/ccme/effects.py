"""Distributional treatment effects at V = v: how p(Y¹ | v) and p(Y⁰ | v) differ.

Every quantity is computed from the two arms' embeddings through
:class:`ccme.Embedding`, so it works for every estimator:

- difference of means E[Y¹ | v] − E[Y⁰ | v] (the CATE implied by the two
  estimated distributions);
- quantile treatment effects Q₁(q | v) − Q₀(q | v) (d_y = 1), from the
  normalised, monotone CDFs (read out with each arm's ``cdf_kernel``,
  narrower than the density's: :func:`ccme.tuning.distribution_kernel`);
- the maximum mean discrepancy ‖μ̂_{Y¹|V}(v) − μ̂_{Y⁰|V}(v)‖ in the RKHS of the
  outcome kernel *as fitted* (``res.kernels["y"]``, the normalised kernel of
  the embedding; an arm's density read-out kernel, if tuned separately, does
  not change it), exactly (:meth:`ccme.Embedding.mmd`).  It is the distance
  between the raw embeddings (no rescaling to unit mass), whose square the
  bootstrap test of :mod:`ccme.bootstrap` calibrates;
- the Kolmogorov distance sup_y |F̂₁(y | v) − F̂₀(y | v)| and the
  1-Wasserstein distance ∫ |F̂₁ − F̂₀| dy between the normalised estimated
  distributions (d_y = 1), on a fine grid (:func:`fine_grid`);
- tail risk: differences of the lower and upper expected shortfalls
  ES⁻(α) = E[Y | Y ≤ Q(α)] and ES⁺(α) = E[Y | Y ≥ Q(1 − α)] (d_y = 1,
  :meth:`ccme.Embedding.expected_shortfall`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


__all__ = ["fine_grid", "effect_table", "effect_estimates", "effect_frame", "DEFAULT_QUANTILES", "DEFAULT_TAILS"]

#: Levels of the quantile treatment effects reported by default.
DEFAULT_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: Tail probabilities α of the expected-shortfall differences reported by default.
DEFAULT_TAILS = (0.1,)


def fine_grid(res, size: int = 2001) -> np.ndarray:
    """The grid both arms are compared on (:meth:`ccme.CCMEResult.fine_grid`)."""
    return res.fine_grid(size)


def effect_table(res, V: np.ndarray, index, q=DEFAULT_QUANTILES, arms=(1, 0)) -> pd.DataFrame:
    """The effects as a wide table, one row per V-point (the summary's); ``arms`` (a, b): arm a against arm b.

    The columns of :func:`effect_estimates` (no CDF differences or shortfalls), and for d_y = 1 the two means.
    """
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    estimates = effect_estimates(res, V, q, np.zeros(0), (), arms)
    table = pd.DataFrame(index=pd.Index(list(index), name="profile"))
    names = res.design.y_names
    if len(names) == 1:
        table["mean Y1"] = res.embeddings[arms[0]].mean(v=V)[:, 0]
        table["mean Y0"] = res.embeddings[arms[1]].mean(v=V)[:, 0]
        table["mean diff"] = estimates["mean_diff"][:, 0]
    else:
        for j, name in enumerate(names):
            table[f"mean diff[{name}]"] = estimates["mean_diff"][:, j]
    for j, level in enumerate(q if "qte" in estimates else ()):
        table[f"qte {level:g}"] = estimates["qte"][:, j]
    for term in ("mmd", "kolmogorov", "wasserstein"):
        if term in estimates:
            table[term] = estimates[term][:, 0]
    return table


def effect_estimates(res, V: np.ndarray, q, y_points, alpha=(), arms=(1, 0)) -> dict:
    """The point estimates of every effect at the V-points: term → array (n_v, k).

    ``mean_diff`` has one column per outcome dimension; ``qte`` one per level
    in ``q``, ``cdf_diff`` one per point in ``y_points``, ``es_lower`` and
    ``es_upper`` one per tail probability in ``alpha`` (d_y = 1); ``mmd``,
    ``kolmogorov`` and ``wasserstein`` one column.  ``arms``: the codes (a, b)
    of the arms compared, each effect arm a's functional minus arm b's.
    """
    # Many functionals at a few V-points: each fold-arm's weights there are computed once.
    emb1, emb0 = (res.embeddings[arm].evaluated_at(v=V) for arm in arms)
    out = {"mean_diff": emb1.mean(v=V) - emb0.mean(v=V)}
    if res.design.Y.shape[1] == 1:
        grid = res.fine_grid()
        if len(q):
            out["qte"] = emb1.quantile(q, v=V, grid=grid) - emb0.quantile(q, v=V, grid=grid)
        if len(y_points):
            out["cdf_diff"] = emb1.cdf(y_points, v=V) - emb0.cdf(y_points, v=V)
    out["mmd"] = emb1.mmd(emb0, v=V)[:, None]
    if res.design.Y.shape[1] == 1:
        gap = np.abs(emb1.cdf(grid[:, None], v=V) - emb0.cdf(grid[:, None], v=V))
        out["kolmogorov"] = gap.max(axis=1)[:, None]
        # The trapezoid rule on the fine grid; the CDFs are 0 and 1 beyond it.
        out["wasserstein"] = np.sum(0.5 * (gap[:, 1:] + gap[:, :-1]) * np.diff(grid), axis=1)[:, None]
        if len(alpha):
            for tail in ("lower", "upper"):
                out[f"es_{tail}"] = (emb1.expected_shortfall(alpha, v=V, tail=tail, grid=grid)
                                     - emb0.expected_shortfall(alpha, v=V, tail=tail, grid=grid))
    return out


def effect_frame(res, V: np.ndarray, index, estimates: dict, *, q, y_points, alpha=(),
                 intervals=None) -> pd.DataFrame:
    """The long table of :meth:`ccme.CCMEResult.effect`: one row per V-point, term and column of the term.

    Columns ``profile``, ``term``, ``outcome``, ``at`` (the quantile level of a
    QTE, the outcome value of a CDF difference, NaN otherwise) and
    ``estimate`` (``at`` is α for the expected shortfalls); with ``intervals`` (term → list of
    :class:`ccme.bootstrap.Interval`) also ``std_error``, ``df`` (the degrees of
    freedom of the critical value; inf: normal), ``conf_low`` and ``conf_high``.
    """
    names = list(res.design.y_names)
    at = {"qte": list(q), "cdf_diff": list(y_points), "es_lower": list(alpha), "es_upper": list(alpha)}
    rows = []
    for i, label in enumerate(index):
        for term, values in estimates.items():
            for j in range(values.shape[1]):
                row = {
                    "profile": label, "term": term,
                    "outcome": names[j] if term == "mean_diff" else (names[0] if len(names) == 1 else None),
                    "at": at[term][j] if term in at else np.nan,
                    "estimate": values[i, j],
                }
                if intervals is not None:
                    iv = intervals[term][j]
                    row.update(std_error=iv.std_error[i], df=iv.df[i], conf_low=iv.conf_low[i],
                               conf_high=iv.conf_high[i])
                rows.append(row)
    columns = ["profile", "term", "outcome", "at", "estimate"]
    if intervals is not None:
        columns += ["std_error", "df", "conf_low", "conf_high"]
    return pd.DataFrame(rows, columns=columns)
