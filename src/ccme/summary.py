"""R-style summaries of a fitted :class:`ccme.CCMEResult`.

``res.summary()`` returns a :class:`Summary`: it prints like R's ``summary``
(``print(res.summary())``), renders in notebooks (``_repr_html_``), exports
to LaTeX (``as_latex()``) and gives its table as a DataFrame
(``to_frame()``).  It never prints by itself and never changes the result.
"""

from __future__ import annotations

import html
import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .bootstrap import small_arm_caveat
from .effects import effect_table
from .estimators.training import STAGE_NAMES
from .errors import CcmeWarning
from .formula import newdata_frame
from .pseudo import MODE_NAMES

__all__ = ["Summary"]

_MODE_NAMES = MODE_NAMES


def _fmt(x: float) -> str:
    return "NA" if not np.isfinite(x) else f"{x:.4g}"


def _one_minus(bound: float, fmt: str) -> str:
    """The upper end 1 − c of a clipping or trimming interval, written "1 - c" where ``fmt`` would round it to 1."""
    text = f"{1 - bound:{fmt}}"
    return f"1 - {bound:{fmt}}" if bound > 0 and float(text) == 1.0 else text


def _names(names, limit: int = 8) -> str:
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[: limit - 2]) + f", ... ({len(names)} columns)"


@dataclass(frozen=True)
class Summary:
    """A printable summary: header lines, sections of (label, text) rows, and the profile table."""

    title: str
    call: str
    sections: tuple
    table: pd.DataFrame
    table_title: str

    @classmethod
    def from_result(cls, res, newdata=None, n_boot: int = 0) -> "Summary":
        design = res.design
        treatment = design.treatment
        names = _arm_names(res)
        counts = ", ".join(f"{res.n_arm[arm]} {names[arm]}" for arm in res.arms)
        data_rows = [
            ("Formula", str(res.formula)),
            ("Outcome", ", ".join(design.y_names)),
            ("Treatment", treatment.describe()),
            ("V", _names(design.v_names)),
            ("X", _names(design.x_names)),
            ("Observations", f"{res.n} ({counts})"
             + (f"; {design.n_dropped} rows with missing values dropped" if design.n_dropped else "")),
            ("Cross-fitting", _cross_fitting(res)),
        ]
        sampling = getattr(res, "sampling_weights", None)  # ccme.sampling_weights.SamplingWeights
        if sampling is not None:
            data_rows.append(("Weights", sampling.describe()))
        ov = res.overlap
        known = res.propensity == "known scores"
        scores = ov.scores
        report = ov.report  # ccme.propensity_selection.PropensityReport
        fmt = "g" if ov.clip_rule == "given" else ".3g"  # a given clip as written, a computed one to 3 digits
        model = report.describe_model() if report is not None and report.selections else res.propensity
        prop_rows = [
            ("Model", "known scores" if known else f"{model} on {_names(res.propensity_columns)}"),
            ("Scores", f"range [{_fmt(scores.min())}, {_fmt(scores.max())}]" + ("" if known else ", cross-fitted")),
            ("Calibration", report.describe_calibration()) if report is not None else None,
            ("Clipped", (f"{ov.n_clipped} to [{res.clip:{fmt}}, {_one_minus(res.clip, fmt)}] ({ov.n_clipped_low} below, "
                         f"{ov.n_clipped_high} above)" if treatment.binary else
                         f"{ov.n_clipped} unit(s) with an arm's score raised to {res.clip:{fmt}}")
                        + f"; clip {ov.clip_rule}"),
            ("Weights", "Hajek-normalised: mean 1 per fold and arm") if ov.normalized else None,
            ("Effective n", "; ".join(f"{names[arm]} {ov.ess[arm]:.1f} of {ov.n_arm[arm]}" for arm in res.arms)
                            + ("; Kish, sampling weight x propensity weight"
                               if sampling is not None and sampling.active is not None else "")),
        ]
        prop_rows = [row for row in prop_rows if row is not None]
        if getattr(ov, "trim", 0.0) > 0:
            prop_rows.insert(2, ("Trimmed", (f"{ov.n_trimmed} outside [{ov.trim:g}, {_one_minus(ov.trim, 'g')}] ({ov.n_trimmed_low} "
                                             f"below, {ov.n_trimmed_high} above)" if treatment.binary else
                                             f"{ov.n_trimmed} with an arm's score below {ov.trim:g}")
                                            + " dropped from the second stage"))
        if res.mode == "pi" or res.mode == "onestep":
            prop_rows.append(("Note", f"the {_MODE_NAMES[res.mode]} estimate does not use the propensity"))
        if isinstance(newdata, str) and newdata == "profiles":
            newdata = res.profiles()
            table_title = "Estimated distributions at V-quantile profiles"
        elif newdata is None:
            newdata = design.v_frame
            table_title = "Estimated distributions at the training data's V"
        else:
            table_title = "Estimated distributions at the given profiles"
        # A summary reports what the estimates' warnings say (negative variance
        # estimates, V-points without mass) as notes beside the NA they explain,
        # instead of raising warnings the user did not ask for.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CcmeWarning)
            table = _profile_table(res, newdata)
            effect_rows = _effect_rows(res, newdata, n_boot)
        notes = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, CcmeWarning)))
        sections = [("Data", tuple(data_rows))]
        if res.location is not None:
            sections.append(("Location (fitted to Y - m(V), read out shifted by m(v))",
                             tuple((names[arm], res.location[arm].describe()) for arm in res.arms)))
        described = res.estimator.describe(res.params, design=design, outcome_columns=res.outcome_columns,
                                           embeddings=res.embeddings)
        for title, rows in described:
            if title == "Kernels":
                rows = list(rows) + _readout_rows(res)
            sections.append((title, tuple(rows)))
        if res.tuning is not None and res.tuning.chosen:
            sections.append(("Tuning", tuple(_tuning_rows(res.tuning, inputs="input_kernels" in res.params))))
        if res.tuning is not None and getattr(res.tuning, "relevance", None):
            relevance = list(res.tuning.relevance_rows())
            # A neural fit's V kernel is its networks' input scales (ccme.estimators.input_relevance).
            inputs = res.params.get("input_kernels", {}).get("v")
            v_kernel = res.kernels.get("v") or inputs
            if v_kernel is not None and np.all(np.isinf(v_kernel.bandwidth_array)):
                # The search dropped all of V: the second stage is then a constant and the estimate does not vary
                # with V, which a reader of the profile table would otherwise take for a finding.
                local = ("tune without 'v_bandwidth' keeps the networks' V inputs" if inputs is not None
                         else "v_bandwidth= (e.g. 'median') forces a local fit")
                relevance.append(("Note", "every covariate of V was dropped (infinite bandwidths): the residual's "
                                          "law does not vary with V, only its location does" if res.location is not None
                                  else "every covariate of V was dropped (infinite bandwidths): the estimates do "
                                       f"not vary with V; {local}"))
            sections.append(("Covariate relevance (learned bandwidths)", tuple(relevance)))
        sections.append(("Propensity", tuple(prop_rows)))
        compared = ("Y1 vs Y0" if treatment.binary
                    else f"each level vs the reference {treatment.reference!r}")
        sections.append((f"Effects ({compared} at the profiles)", tuple(effect_rows)))
        for title, rows in res.estimator.diagnostics(res.embeddings):
            sections.append((title, tuple(rows)))
        if notes:
            sections.append(("Notes", tuple(("NA", note) for note in notes)))
        title = (
            f"Conditional counterfactual distributions: {res.estimator.title} CCME, "
            f"{_MODE_NAMES[res.mode]}"
        )
        return cls(title=title, call=res.call, sections=tuple(sections), table=table, table_title=table_title)

    # -- renderings ---------------------------------------------------------
    def __str__(self) -> str:
        lines = [self.title, "", "Call:", self.call, ""]
        for name, rows in self.sections:
            lines.append(f"{name}:")
            width = max(len(label) for label, _ in rows)
            lines += [f"  {label.ljust(width)}  {text}" for label, text in rows]
            lines.append("")
        lines.append(f"{self.table_title}:")
        lines.append(self.table.to_string(float_format=lambda x: f"{x:.4g}"))
        lines.append("---")
        lines.append("Densities: res.density(y, newdata=..., arm=...); CDFs: res.cdf(...); plot: res.plot()")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.__str__()

    def _repr_html_(self) -> str:
        parts = [f"<h4>{html.escape(self.title)}</h4>", f"<p><code>{html.escape(self.call)}</code></p>"]
        for name, rows in self.sections:
            parts.append(f"<b>{html.escape(name)}</b><table>")
            parts += [f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows]
            parts.append("</table>")
        parts.append(f"<b>{html.escape(self.table_title)}</b>")
        parts.append(self.table.to_html(float_format=lambda x: f"{x:.4g}"))
        return "\n".join(parts)

    def as_latex(self) -> str:
        """The profile table as a LaTeX tabular, preceded by the sections as comments."""
        head = [f"% {self.title}", f"% {self.call}"]
        for name, rows in self.sections:
            head += [f"% {name}: {a}: {b}" for a, b in rows]
        return "\n".join(head) + "\n" + self.table.to_latex(float_format=lambda x: f"{x:.4g}")

    def to_frame(self) -> pd.DataFrame:
        """The profile table (means and standard deviations of Y¹ and Y⁰)."""
        return self.table.copy()


def _arm_names(res) -> dict:
    """Arm code → how the summary names it: "treated"/"control", or the level's repr."""
    treatment = res.design.treatment
    if treatment.binary:
        return {1: "treated", 0: "control"}
    return {arm: repr(treatment.label(arm)) for arm in res.arms}


def _column_key(res, arm) -> str:
    """How the profile table's columns name an arm: Y1/Y0, or Y[level]."""
    return f"Y{arm}" if res.design.treatment.binary else f"Y[{res.design.treatment.label(arm)}]"


def _readout_rows(res) -> list:
    """The arms' read-out kernels: the density's when it differs from the embedding's outcome kernel, and the CDF's."""
    common = res.kernels["y"]
    kernels = {arm: res.embeddings[arm].y_kernel for arm in res.arms}
    names, y_names = _arm_names(res), res.design.y_names
    rows = []
    if not all(k == common for k in kernels.values()):
        rows += [(f"Y density, {names[arm]}", kernels[arm].describe(y_names)) for arm in res.arms]
    rows += [(f"Y CDF, {names[arm]}", res.embeddings[arm].cdf_kernel.describe(y_names)) for arm in res.arms
             if res.embeddings[arm].cdf_kernel != kernels[arm]]
    return rows


def _tuning_rows(report, inputs: bool = False) -> list:
    """The Tuning section's rows; ``inputs``: the X/V bandwidths are a neural fit's input scales."""
    rows = []
    for name, label in (("lam0", "lambda0"), ("lam1", "lambda1"), ("lam1_plugin", "lambda1, plug-in part"),
                        ("y_bandwidth", "Y bandwidth")):
        if name in report.chosen:
            curves = [c for c in report.curves if c.parameter == name]
            rows.append((label, f"{curves[0].criterion_name} over {len(curves[0].values)} values"))
    for name in ("x_bandwidth_factor", "v_bandwidth_factor"):
        if name in report.chosen:
            rows.append((name.replace("_factor", ""), f"factor {report.chosen[name]:g} of the rule (LOO)"))
    for name in ("x_bandwidth", "v_bandwidth"):
        if isinstance(report.chosen.get(name), list):
            what = "the networks' input scales: the kernel ridge's " if inputs else ""
            rows.append((name, f"{what}per covariate group, LOO coordinate search (table below)"))
    for name, label in (("M", "M"), ("weight_decay", "Weight decay")):
        curve = next((c for c in report.curves if c.parameter == name), None)
        if name in report.chosen and curve is not None:
            rows.append((label, f"{report.chosen[name]:g} of {len(curve.values)} values ({curve.criterion_name})"))
    for stage in STAGE_NAMES:
        epochs = report.chosen.get(f"epochs_stage{stage}")
        if epochs:
            kept = ", ".join(f"{({1: 'treated', 0: 'control'}.get(arm, arm) if len(epochs) == 2 else arm)} {e}"
                             for arm, e in epochs.items())
            rows.append((f"Epochs, {STAGE_NAMES[stage]}", f"{kept} (best validation loss, first fold)"))
    if "location" in report.chosen:
        rows.append(("Location", f"'auto': {report.chosen['location']} (read-out criterion, note below)"))
    rows.append(("Time", f"{report.seconds:.2f} s"))
    rows += [("Note", note) for note in report.notes]
    return rows


def _profile_table(res, newdata) -> pd.DataFrame:
    frame = pd.DataFrame(newdata_frame(newdata), copy=True)
    table = frame[[c for c in res.design.v_variables if c in frame.columns]].copy()
    y_names = res.design.y_names
    V = res.design.encode_v(frame)
    moments = {arm: res.embeddings[arm].moments(v=V) for arm in res.arms}
    means = {arm: moments[arm][1] for arm in res.arms}
    sds = {arm: np.sqrt(moments[arm][2]) for arm in res.arms}
    treatment = res.design.treatment
    reference = 0 if treatment.binary else treatment.reference_code
    for j, name in enumerate(y_names):
        suffix = "" if len(y_names) == 1 else f"[{name}]"
        for arm in res.arms:
            table[f"mean {_column_key(res, arm)}{suffix}"] = means[arm][:, j]
            table[f"sd {_column_key(res, arm)}{suffix}"] = sds[arm][:, j]
        for arm in res.arms:
            if arm != reference:
                what = "" if treatment.binary else f" {treatment.label(arm)}"
                table[f"diff{what}{suffix}"] = means[arm][:, j] - means[reference][:, j]
    return table


def _effect_rows(res, newdata, n_boot: int) -> list:
    """Per profile: difference of means, MMD and (with ``n_boot`` > 0, method="ridge") the test's p-value."""
    frame = pd.DataFrame(newdata_frame(newdata), copy=True)
    treatment = res.design.treatment
    pairs = [(1, 0)] if treatment.binary else [(arm, treatment.reference_code) for arm in res.arms
                                              if arm != treatment.reference_code]
    rows, caveats = [], []
    for pair in pairs:
        table = effect_table(res, res.design.encode_v(frame), list(frame.index), q=[], arms=pair)
        pvalues = None
        if n_boot and res.supports_bootstrap and len(res.design.y_names) == 1:
            labels = pair if treatment.binary else tuple(treatment.label(a) for a in pair)
            small = small_arm_caveat(res, pair)
            if small is not None and small not in caveats:
                caveats.append(small)
            with warnings.catch_warnings():  # the caveats become the section's notes (below), not warnings
                for caveat in (res.estimator.bootstrap_caveat, small):
                    if caveat:
                        warnings.filterwarnings("ignore", message=re.escape(caveat))
                pvalues = res.test_effect(newdata=frame, n_boot=n_boot, arms=labels).table["p_value"].to_numpy()
        mean_cols = [c for c in table.columns if c.startswith("mean diff")]
        head = "" if treatment.binary else f"{treatment.label(pair[0])} vs {treatment.label(pair[1])}: "
        for i, label in enumerate(table.index):
            diffs = ", ".join(f"{c} {_fmt(table[c].iloc[i])}" for c in mean_cols)
            text = f"{head}{diffs}; MMD {_fmt(table['mmd'].iloc[i])}"
            if pvalues is not None:
                text += f"; p = {_fmt(pvalues[i])} (MMD test, {n_boot} draws)"
            rows.append((str(label), text))
    if pvalues is None and n_boot and not res.supports_bootstrap:
        rows.append(("Test", "none: the multiplier bootstrap needs a linear second stage (method='ridge') and a "
                             "location stage with its units (res.bands() applies)"))
    elif pvalues is None:
        rows.append(("Test", "res.test_effect(newdata=...) or res.summary(n_boot=499) for p-values (multiplier bootstrap)"))
    elif res.estimator.bootstrap_caveat:
        rows.append(("Caveat", res.estimator.bootstrap_caveat))
    rows += [("Caveat", caveat) for caveat in caveats]
    return rows


def _cross_fitting(res) -> str:
    """"K folds, seed s", with the repetitions of a repeated cross-fit (``fit(n_rep=R)``): K·R fold-arms per arm."""
    parts = len(next(iter(res.embeddings.values())).parts)
    repetitions = parts // res.n_folds
    times = f" x {repetitions} repetitions (averaged)" if repetitions > 1 else ""
    return f"{res.n_folds} folds{times}, seed {res.seed}"
