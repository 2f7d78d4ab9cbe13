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

    Returns
    -------
    DataFrame
        Columns ``treat`` (job training), ``age``, ``educ``, ``black``, ``hisp``,
        ``marr``, ``nodegree``, earnings ``re74``, ``re75`` and the outcome
        ``re78`` (1978 earnings in dollars; 31% are exactly zero).

    Examples
    --------
    >>> import ccme
    >>> ccme.datasets.load_nsw().shape
    (445, 10)
    """
    return _read("nsw_mixtape.csv").drop(columns=["data_id"])


def load_nhefs() -> pd.DataFrame:
    """NHEFS complete cases (1566 adults): smoking cessation ``qsmk`` and weight change ``wt82_71``.

    The standard confounders of Hernán & Robins are ``sex``, ``race``, ``age``,
    ``education``, ``smokeintensity``, ``smokeyrs``, ``exercise``, ``active``
    and ``wt71``.

    Returns
    -------
    DataFrame
        One row per adult, 67 columns.

    Examples
    --------
    >>> import ccme
    >>> nhefs = ccme.datasets.load_nhefs()
    >>> nhefs.shape, "wt82_71" in nhefs.columns
    ((1566, 67), True)
    """
    return _read("nhefs_complete.csv")


def load_ihdp_covariates(hill: bool = True) -> pd.DataFrame:
    """The IHDP covariates (Hill's 747 rows with ``hill=True``, all 985 with ``hill=False``).

    With ``hill=True`` the 238 treated children of non-white mothers are
    dropped, as Hill (2011) does to induce imbalance, leaving 747 rows.

    Parameters
    ----------
    hill : bool, default True
        Drop the treated children of non-white mothers, as Hill (2011).

    Returns
    -------
    DataFrame
        ``treat`` and the raw covariates (names with ``.`` as in the source).

    Examples
    --------
    >>> import ccme
    >>> ccme.datasets.load_ihdp_covariates().shape, ccme.datasets.load_ihdp_covariates(hill=False).shape
    ((747, 30), (985, 30))
    """
    frame = _read("ihdp_covariates_sim.csv")
    if hill:
        frame = frame[~((frame["treat"] == 1) & (frame["momwhite"] == 0))].reset_index(drop=True)
    return frame
