"""Plots of fitted results (matplotlib, imported lazily; each returns its Axes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import ParameterError

__all__ = ["plot_densities"]

_ARM_STYLE = {1: "-", 0: "--"}
_ARM_LABEL = {1: "Y¹", 0: "Y⁰"}


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4.2))
    return ax


def plot_densities(res, *, newdata=None, arm="both", y=None, ax=None, truth=None, **kwargs):
    """Estimated conditional counterfactual densities, one colour per V-profile.

    Treated (Y¹) solid, control (Y⁰) dashed; ``truth`` (a callable
    ``truth(y, profile, arm)``) dotted in the same colour.
    """
    if arm == "both":
        arms = (1, 0)
    elif arm in (0, 1):
        arms = (int(arm),)
    else:
        raise ParameterError(f"`arm` must be 'both', 1 or 0; got {arm!r}")
    if newdata is None:
        newdata = res.profiles()
    if isinstance(newdata, dict):
        newdata = pd.DataFrame(newdata)
    grid = res.default_grid() if y is None else np.asarray(y, dtype=float)
    ax = _axes(ax)
    colours = [f"C{i % 10}" for i in range(len(newdata))]
    labels = [str(label) for label in newdata.index]
    for a in arms:
        dens = res.density(grid, newdata, arm=a)
        for i, row in enumerate(dens):
            ax.plot(grid, row, _ARM_STYLE[a], color=colours[i], label=f"{_ARM_LABEL[a]} | {labels[i]}", **kwargs)
            if truth is not None:
                ax.plot(grid, np.ravel(truth(grid, newdata.iloc[[i]], a)), ":", color=colours[i], lw=1.2)
    ax.set_xlabel(res.design.y_names[0])
    ax.set_ylabel("density")
    title = f"{res.method}/{res.mode}: p(Y^a | V = v)"
    if truth is not None:
        title += " (dotted: truth)"
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=2 if len(arms) == 2 else 1)
    return ax
