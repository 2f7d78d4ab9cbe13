"""Real data sets bundled with ccme (see ``data/README.md`` for sources and licences)."""

from __future__ import annotations

from importlib import resources

import pandas as pd

__all__ = ["load_nsw", "load_nhefs", "load_ihdp_covariates"]


def _read(name: str) -> pd.DataFrame:
    with resources.files("ccme.datasets").joinpath("data", name).open("rb") as handle:
        return pd.read_csv(handle)


def load_nsw() -> pd.DataFrame:
    """The NSW job-training experiment (Dehejia–Wahba sample, 445 men, randomised).

    Columns: ``treat`` (job training), ``age``, ``educ``, ``black``, ``hisp``,
    ``marr``, ``nodegree``, earnings ``re74``, ``re75`` and the outcome
    ``re78`` (1978 earnings in dollars; 31% are exactly zero).
    """
    return _read("nsw_mixtape.csv").drop(columns=["data_id"])


def load_nhefs() -> pd.DataFrame:
    """NHEFS complete cases (1566 adults): smoking cessation ``qsmk`` and weight change ``wt82_71``.

    The standard confounders of Hernán & Robins are ``sex``, ``race``, ``age``,
    ``education``, ``smokeintensity``, ``smokeyrs``, ``exercise``, ``active``
    and ``wt71``.
    """
    return _read("nhefs_complete.csv")


def load_ihdp_covariates(hill: bool = True) -> pd.DataFrame:
    """The IHDP covariates (985 rows, or Hill's 747 with ``hill=True``).

    With ``hill=True`` the 238 treated children of non-white mothers are
    dropped, as Hill (2011) does to induce imbalance, leaving 747 rows.
    """
    frame = _read("ihdp_covariates_sim.csv")
    if hill:
        frame = frame[~((frame["treat"] == 1) & (frame["momwhite"] == 0))].reset_index(drop=True)
    return frame
