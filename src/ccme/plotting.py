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

def plot_training(res, *, ax=None, **kwargs):
    """Training curves of a neural fit (:meth:`ccme.CCMEResult.training_history`).

    One colour per (arm, stage), one line per fold; training loss solid,
    validation loss dashed, the kept epoch marked; log-scaled epochs.
    """
    history = res.training_history()
    ax = _axes(ax)
    for i, ((arm, stage), group) in enumerate(history.groupby(["arm", "stage"], sort=False)):
        colour = f"C{i % 10}"
        for fold, curve in group.groupby("fold"):
            label = f"{_ARM_LABEL[arm]} stage {stage}" if fold == 1 else None
            ax.plot(curve["epoch"], curve["train_loss"], "-", color=colour, label=label, **kwargs)
            if curve["validation_loss"].notna().any():
                ax.plot(curve["epoch"], curve["validation_loss"], "--", color=colour, **kwargs)
            best = curve[curve["best"]]
            ax.plot(best["epoch"], best["train_loss"], "o", color=colour, ms=4)
    ax.set_xscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (mean squared RKHS error)")
    ax.set_title(f"{res.method}/{res.mode} training (dashed: validation; dot: kept epoch)")
    ax.legend(fontsize="small")
    return ax
