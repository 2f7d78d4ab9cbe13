"""Plots of fitted results (matplotlib, imported lazily; each returns its Axes)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import ParameterError
from .formula import newdata_frame
from .estimators.training import STAGE_NAMES

__all__ = ["plot_densities", "plot_cdfs", "plot_effect", "plot_overlap", "plot_calibration"]

_ARM_STYLE = {1: "-", 0: "--"}
_ARM_LABEL = {1: "Y¹", 0: "Y⁰"}
#: Line styles of the arms of a treatment with k ≥ 3 levels, in the levels' order (dotted is the truth's).
_LEVEL_STYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (3, 1, 1, 1)))


def _arm_look(res, a) -> tuple:
    """(what the functionals take as ``arm=``, line style, legend label) of arm code ``a``."""
    treatment = res.design.treatment
    if treatment.binary:
        return a, _ARM_STYLE[a], _ARM_LABEL[a]
    label = treatment.label(a)
    return label, _LEVEL_STYLES[a % len(_LEVEL_STYLES)], f"Y^{label}"


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4.2))
    return ax


def plot_densities(res, *, newdata="profiles", arm="both", y=None, ax=None, truth=None, bands=False, level=0.9,
                   n_boot=299, **kwargs):
    """Estimated conditional counterfactual densities, one colour per V-profile.

    Treated (Y¹) solid, control (Y⁰) dashed; ``truth`` (a callable
    ``truth(y, profile, arm)``) dotted in the same colour; ``bands=True``
    shades the simultaneous bootstrap band of the smoothed density
    (:meth:`ccme.CCMEResult.bands`, method="ridge") around the raw estimate.
    """
    arms, newdata, grid, ax, colours, labels = _curves_setup(res, arm, newdata, y, ax)
    for a in arms:
        key, style, name = _arm_look(res, a)
        dens = res.density(grid, newdata=newdata, arm=key)
        for i, row in enumerate(dens):
            ax.plot(grid, row, **{"linestyle": style, "color": colours[i], "label": f"{name} | {labels[i]}", **kwargs})
            if truth is not None:
                ax.plot(grid, np.ravel(truth(grid, newdata.iloc[[i]], key)), ":", color=colours[i], lw=1.2)
        if bands:
            _shade_bands(ax, res.bands(level, newdata=newdata, arm=key, y=grid, n_boot=n_boot), colours,
                         a == arms[0])
    ax.set_xlabel(res.design.y_names[0])
    ax.set_ylabel("density")
    title = f"{res.method}/{res.mode}: p(Y^a | V = v)"
    if truth is not None:
        title += " (dotted: truth)"
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=min(len(arms), 3))
    return ax


def _curves_setup(res, arm, newdata, y, ax):
    """What every per-profile curve plot starts from: arms, profiles, grid, Axes, one colour and label per profile."""
    newdata = _profiles(res, newdata)
    grid = res.default_grid() if y is None else np.asarray(y, dtype=float)
    colours = [f"C{i % 10}" for i in range(len(newdata))]
    return _arms(res, arm), newdata, grid, _axes(ax), colours, [str(label) for label in newdata.index]


def _arms(res, arm) -> tuple:
    """The arms to draw: "both" or "all" (every arm), or one arm as :meth:`ccme.CCMEResult.arm_index` reads it.

    A level named "both" or "all" is drawn alone.
    """
    if isinstance(arm, str) and arm in ("both", "all") and arm not in res.levels:
        return res.arms
    return (res.arm_index(arm),)


def _profiles(res, newdata) -> pd.DataFrame:
    """The V-points of a plot: "profiles" (V's quartiles) or the rows of a DataFrame or dict."""
    if isinstance(newdata, str) and newdata == "profiles":
        return res.profiles()
    if newdata is None:
        raise ParameterError("plots draw a curve per V-point: pass `newdata` (a few rows) or 'profiles'")
    return newdata_frame(newdata)


def _shade_bands(ax, bands, colours, label: bool):
    """The simultaneous band of each V-profile, shaded in its colour around the curve it belongs to.

    The band is mapped as the curve is made from the raw estimate
    (:meth:`ccme.Bands.on_the_curve`: clipped and rescaled for a density,
    clipped and made monotone for a CDF).  Bias-reduced bands (the default
    target) are built around bias-reduced estimates (the simultaneous ones
    also around the undersmoothed refit, ``Bands.estimate_simultaneous``), so, as robust
    bias-corrected intervals, they need not be centred on the drawn curve;
    ``target="regularised"`` bands surround it.  The legend says the level
    and what the band covers.
    """
    drawn = bands.on_the_curve()
    what = "smoothed density" if bands.feature == "density" else "smoothed CDF"
    how = "bias-reduced" if bands.order > 1 else "no bias correction"
    if bands.v_factor < 1:
        how += f", V bandwidths x {bands.v_factor:.2f}"
    for i in range(len(bands.estimate)):
        ax.fill_between(bands.y, drawn["lower_simultaneous"][i], drawn["upper_simultaneous"][i], color=colours[i],
                        alpha=0.15, lw=0,
                        label=(f"{bands.level:.0%} simultaneous band, {what} ({how})"
                               if label and i == 0 else None))


def plot_cdfs(res, *, newdata="profiles", arm="both", y=None, bands=False, level=0.9, n_boot=299, ax=None, **kwargs):
    """Estimated conditional CDFs P̂(Y^a ≤ y | V = v), one colour per V-profile (treated solid, control dashed).

    ``bands=True`` shades the simultaneous bootstrap band of the smoothed CDF
    E[K(y − Y^a) | V = v] (:meth:`ccme.CCMEResult.bands`, method="ridge").
    """
    arms, newdata, grid, ax, colours, labels = _curves_setup(res, arm, newdata, y, ax)
    for a in arms:
        key, style, name = _arm_look(res, a)
        for i, row in enumerate(res.cdf(grid, newdata=newdata, arm=key)):
            ax.plot(grid, row, **{"linestyle": style, "color": colours[i], "label": f"{name} | {labels[i]}", **kwargs})
        if bands:
            _shade_bands(ax, res.bands(level, newdata=newdata, arm=key, y=grid, feature="cdf", n_boot=n_boot),
                         colours, a == arms[0])
    ax.set_xlabel(res.design.y_names[0])
    ax.set_ylabel("P(Y^a <= y | V = v)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{res.method}/{res.mode}: conditional CDFs")
    ax.legend(fontsize="small", ncol=min(len(arms), 3))
    return ax


def plot_effect(res, *, newdata="profiles", arms=None, q=None, bands=True, level=0.9, n_boot=299, seed=None, ax=None,
                **kwargs):
    """Quantile treatment effect curves q ↦ Q̂₁(q | v) − Q̂₀(q | v), one per V-profile.

    ``bands=True`` (method="ridge") shades pointwise bootstrap bands
    (:func:`ccme.bootstrap.qte_bands`); the dotted line is the difference of
    means at each profile.
    """
    from .bootstrap import qte_bands

    newdata = _profiles(res, newdata)
    levels = np.linspace(0.05, 0.95, 37) if q is None else np.asarray(q, dtype=float)
    V = res._v(newdata)
    ax = _axes(ax)
    colours = [f"C{i % 10}" for i in range(len(newdata))]
    pair = res.design.treatment.contrast(arms)
    first, second = (_arm_look(res, a)[0] for a in pair)
    if bands:
        qte, lower, upper = qte_bands(res, V, levels, res.fine_grid(801), level=level, n_boot=n_boot,
                                      seed=res.seed if seed is None else seed, arms=pair)
    else:
        qte = res.quantile(levels, newdata=newdata, arm=first) - res.quantile(levels, newdata=newdata, arm=second)
    diff = np.atleast_1d(res.mean(newdata=newdata, arm=first) - res.mean(newdata=newdata, arm=second))
    for i, label in enumerate(newdata.index):
        ax.plot(levels, qte[i], **{"color": colours[i], "label": f"QTE | {label}", **kwargs})
        if bands:
            ax.fill_between(levels, lower[i], upper[i], color=colours[i], alpha=0.2, lw=0)
        ax.axhline(diff[i], color=colours[i], ls=":", lw=1.0)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("quantile level q")
    ax.set_ylabel("Q1(q | v) - Q0(q | v)" if res.design.treatment.binary else f"Q_{first}(q | v) - Q_{second}(q | v)")
    title = f"{res.method}/{res.mode}: quantile treatment effects (dotted: mean difference)"
    if bands:
        title += f"\nshaded: {level:.0%} pointwise bootstrap bands"
    ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


def plot_overlap(res, *, ax=None, bins=30):
    """Histograms of the cross-fitted propensity scores π̂(X) by arm, with the clipping bounds dashed.

    The standard positivity diagnostic: scores piling up at the bounds mean
    units whose counterfactual arm is barely represented (large weights).
    """
    ax = _axes(ax)
    scores = res.overlap.scores
    A = res.design.A
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    if scores.ndim == 2:  # k ≥ 3 arms: each arm's generalised propensity among its own units
        for a in res.arms:
            ax.hist(scores[A == a, a], bins=edges, alpha=0.4, color=f"C{a % 10}",
                    label=f"P(A = {res.levels[a]!r} | X), its units (n={int(np.sum(A == a))})")
        ax.axvline(res.clip, color="k", ls="--", lw=1.0)
        ax.set_xlabel("cross-fitted generalised propensity of the unit's own arm")
        ax.set_ylabel("units")
        ax.set_title(f"overlap: {res.overlap.n_clipped} unit(s) with an arm's score raised to {res.clip:g}")
        ax.legend(fontsize="small")
        return ax
    for a, colour in ((1, "C3"), (0, "C0")):
        ax.hist(scores[A == a], bins=edges, alpha=0.5, color=colour, label=f"{'treated' if a else 'control'} "
                f"(n={int(np.sum(A == a))})")
    for bound in (res.clip, 1.0 - res.clip):
        ax.axvline(bound, color="k", ls="--", lw=1.0)
    ax.set_xlabel("cross-fitted propensity score")
    ax.set_ylabel("units")
    ax.set_title(f"overlap: {res.overlap.n_clipped} score(s) clipped to [{res.clip:g}, {1 - res.clip:g}]")
    ax.legend(fontsize="small")
    return ax


def plot_calibration(res, *, ax=None):
    """Reliability diagram: per score bin, the share of treated units against the mean cross-fitted score.

    Marker areas grow with the bin's units; the diagonal is perfect
    calibration.  From :attr:`ccme.CCMEResult.propensity_report`.
    """
    from .errors import NotFittedError

    report = res.propensity_report
    if report is None:
        raise NotFittedError("this result holds no propensity report (fit it again with this ccme)")
    ax = _axes(ax)
    seen = report.bin_count > 0
    ax.plot([0.0, 1.0], [0.0, 1.0], color="0.6", ls="--", lw=1.0, label="perfect calibration")
    size = 20.0 + 180.0 * report.bin_count[seen] / max(int(report.bin_count.max()), 1)
    ax.plot(report.bin_score[seen], report.bin_treated[seen], "-", color="C3", lw=1.2)
    ax.scatter(report.bin_score[seen], report.bin_treated[seen], s=size, color="C3", zorder=3,
               label="bins of the cross-fitted scores (area: units)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean cross-fitted propensity score in the bin")
    ax.set_ylabel("share treated in the bin" if res.design.treatment.binary
                  else "share in the arm (every arm but the reference, pooled)")
    learner = ", ".join(dict.fromkeys(report.chosen)) if report.selections else report.learner
    ax.set_title(f"propensity calibration ({learner}): Brier {report.brier:.3g} "
                 f"(constant {report.brier_constant:.3g})")
    ax.legend(fontsize="small", loc="upper left")
    return ax


def plot_training(res, *, ax=None, **kwargs):
    """Training curves of a neural fit (:meth:`ccme.CCMEResult.training_history`).

    One colour per (arm, stage), one line per fold and repetition; training loss solid,
    validation loss dashed, the kept epoch marked; log-scaled epochs.
    """
    history = res.training_history()
    ax = _axes(ax)
    for i, ((arm, stage), group) in enumerate(history.groupby(["arm", "stage"], sort=False)):
        colour = f"C{i % 10}"
        for (repetition, fold), curve in group.groupby(["repetition", "fold"]):
            label = f"{_ARM_LABEL[arm]} {STAGE_NAMES[stage]}" if (repetition, fold) == (1, 1) else None
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


_TUNING_LABELS = {
    "lam0": "λ₀ (stage 1)",
    "lam1": "λ₁ (stage 2)",
    "lam1_plugin": "λ₁ᵖ (stage 2, plug-in part)",
    "y_bandwidth": "outcome bandwidth σ_y",
    "M": "M (features / grid points)",
    "epochs_stage1": "epoch (stage 1, early stopping)",
    "epochs_stage2": "epoch (stage 2, early stopping)",
    "epochs_stage3": "epoch (stage 2's correction, early stopping)",
    "weight_decay": "weight decay (networks)",
}


def plot_tuning(res, *, ax=None, **kwargs):
    """Criterion against grid value for each tuned hyperparameter (log-log x), chosen value marked."""
    import matplotlib.pyplot as plt

    report = res.tuning
    if report is None or not report.curves:
        raise ParameterError("nothing was tuned in this fit (tune='none', or every hyperparameter was set)")
    parameters = [p for p in _TUNING_LABELS if any(c.parameter == p for c in report.curves)]
    if ax is None:
        fig, axes = plt.subplots(1, len(parameters), figsize=(4.2 * len(parameters), 3.6), squeeze=False)
        axes = axes[0]
    else:
        axes = np.atleast_1d(ax)
        if len(axes) != len(parameters):
            raise ParameterError(f"`ax` must hold {len(parameters)} Axes (one per tuned hyperparameter); got {len(axes)}")
    for a, parameter in zip(axes, parameters):
        for i, c in enumerate(c for c in report.curves if c.parameter == parameter):
            treatment = res.design.treatment
            label = ("all arms" if c.arm is None else treatment.arm_name(c.arm)) if not treatment.binary else \
                {None: "both arms", 1: "treated", 0: "control"}[c.arm]
            if c.factor is not None and c.factor != 1.0:
                label += f", bandwidth × {c.factor:g}"
            line, = a.plot(c.values, c.criterion, "-o", ms=3, color=f"C{i % 10}", label=label, **kwargs)
            j = int(np.argmin(np.abs(np.asarray(c.values) - c.chosen)))
            a.plot([c.values[j]], [c.criterion[j]], "*", ms=12, color=line.get_color())
        a.set_xscale("log")
        a.set_xlabel(_TUNING_LABELS[parameter])
        a.set_ylabel(next(c.criterion_name for c in report.curves if c.parameter == parameter))
        a.legend(fontsize="small")
    axes[0].figure.suptitle(f"automatic tuning ({report.seconds:.1f} s; stars: chosen)")
    return axes
