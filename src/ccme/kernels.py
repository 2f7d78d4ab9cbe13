"""Kernel specifications and the rules that choose their bandwidths.

A kernel here is a name and one bandwidth per input column (ARD):
``k(a, b) = κ(r)`` with ``r = ‖(a − b) / σ‖``.  The names are

- ``"gaussian"``: exp(−r²/2)
- ``"laplace"``: exp(−r) (exponential, Matérn ν = 1/2)
- ``"matern32"``: (1 + √3 r) exp(−√3 r)
- ``"matern52"``: (1 + √5 r + 5r²/3) exp(−√5 r)

The outcome kernel k_Y is used *normalised* (it integrates to one), which is
what turns the embedding's inner product with φ(y) into a density (paper,
Section "Application to Conditional Counterfactual Density Estimation");
only the Gaussian and Laplace kernels are offered there.

Bandwidth rules (the defaults)
------------------------------
``"median"`` (X and V): each column is standardised by its standard deviation
and the bandwidth is the median pairwise Euclidean distance of the
standardised rows (on at most 1000 rows drawn with a fixed generator; the
zero distances between duplicated rows are left out), mapped
back to each column's units: σ_d = sd_d × median.  A constant column gets
σ_d = +inf, i.e. it is ignored, with a warning.

``"silverman"`` (Y): per outcome dimension, Silverman's rule of thumb
σ_d = 0.9 min(sd_d, IQR_d / 1.34) n^(−1/5) for d_y = 1, and Scott's
generalisation σ_d = (4 / (d_y + 2))^(1/(d_y + 4)) min(sd_d, IQR_d/1.34)
n^(−1/(d_y + 4)) for d_y > 1, computed on all observed outcomes (both arms
share one outcome kernel so that their densities are comparable).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ._backend import DENSITY_KERNELS, KERNELS
from .errors import DataWarning, FormatError, ParameterError
from .io import check_schema, make_state

__all__ = ["Kernel", "KERNELS", "DENSITY_KERNELS", "median_bandwidth", "silverman_bandwidth", "resolve_kernel"]

_MEDIAN_ROWS = 1000


@dataclass(frozen=True)
class Kernel:
    """A kernel name with one bandwidth per column.

    Attributes
    ----------
    name : str
        One of ``KERNELS``.
    bandwidth : tuple of float
        σ_d per input column; ``inf`` means the column is ignored.
    rule : str
        How the bandwidth was chosen (``"median"``, ``"silverman"`` or ``"user"``).
    """

    name: str
    bandwidth: tuple
    rule: str = "user"

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Kernel"
    STATE_VERSION = 1

    def to_state(self) -> dict:
        """The kernel as a versioned state for :mod:`ccme.io`; the bandwidths as a float64 array (inf kept)."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, name=self.name,
                          bandwidth=np.asarray(self.bandwidth, dtype=np.float64), rule=self.rule)

    @classmethod
    def from_state(cls, state) -> "Kernel":
        """Inverse of :meth:`to_state` (the bandwidths come back as a tuple of ``np.float64``, bit for bit)."""
        check_schema(state, cls.STATE_SCHEMA, cls.STATE_VERSION, keys=("name", "bandwidth", "rule"))
        name, bandwidth, rule = state["name"], state["bandwidth"], state["rule"]
        if name not in KERNELS or not isinstance(rule, str):
            raise FormatError(f"a stored kernel has the name {str(name)[:40]!r} and rule {str(rule)[:40]!r}; "
                              f"the names are {list(KERNELS)}")
        if not isinstance(bandwidth, np.ndarray) or bandwidth.ndim != 1 or bandwidth.dtype != np.float64:
            raise FormatError(f"the bandwidth of a stored {name} kernel is not a float64 vector")
        return cls(name, tuple(bandwidth), rule)

    @property
    def bandwidth_array(self) -> np.ndarray:
        return np.asarray(self.bandwidth, dtype=np.float64)

    def describe(self, names=None) -> str:
        values = self.bandwidth_array
        if np.allclose(values, values[0]):
            text = f"{_fmt(values[0])} (all {len(values)} columns)" if len(values) > 1 else _fmt(values[0])
        else:
            labels = names if names is not None else [f"[{i}]" for i in range(len(values))]
            text = ", ".join(f"{n}={_fmt(v)}" for n, v in zip(labels, values))
        return f"{self.name}, bandwidth {text} ({self.rule})"

    def variance(self) -> np.ndarray:
        """Per-dimension variance of the normalised kernel seen as a density.

        Gaussian: σ_d²; Laplace (density ∝ exp(−‖u‖) in d dimensions, where
        ‖u‖ ~ Gamma(d, 1)): (d + 1) σ_d².
        """
        sigma2 = self.bandwidth_array**2
        if self.name == "gaussian":
            return sigma2
        if self.name == "laplace":
            return (len(sigma2) + 1) * sigma2
        raise ParameterError(f"kernel {self.name!r} is not a density kernel")


def _fmt(value: float) -> str:
    return "inf" if np.isinf(value) else f"{value:.4g}"


def _check_name(name, what: str, allowed=KERNELS) -> str:
    if not isinstance(name, str) or name not in allowed:
        raise ParameterError(f"`{what}` must be one of {list(allowed)}; got {name!r}")
    return name


def median_bandwidth(Z: np.ndarray, seed: int = 0, *, what: str = "bandwidth") -> np.ndarray:
    """Median heuristic on standardised columns (see the module docstring)."""
    Z = np.asarray(Z, dtype=np.float64)
    sd = Z.std(axis=0)
    constant = ~(sd > 1e-12 * np.maximum(1.0, np.abs(Z).max(axis=0)))
    if constant.all():
        raise ParameterError(
            f"cannot choose the {what} by the median heuristic: every column of {_role(what)} is constant, so the "
            f"kernel carries no information; remove the constant columns from the formula or pass {what}=<number>"
        )
    if constant.any():
        warnings.warn(
            f"{int(constant.sum())} constant column(s) ignored by the kernel ({what}: infinite bandwidth)",
            DataWarning,
            stacklevel=4,
        )
    scale = np.where(constant, 1.0, sd)
    standardised = (Z[:, ~constant] - Z[:, ~constant].mean(axis=0)) / scale[~constant]
    if len(standardised) > _MEDIAN_ROWS:
        rows = np.random.default_rng(seed).choice(len(standardised), _MEDIAN_ROWS, replace=False)
        standardised = standardised[np.sort(rows)]
    # Distances from the differences, not from ‖a‖² + ‖b‖² − 2a·b: the latter
    # leaves rounding noise (~1e-8) instead of an exact 0 for duplicated rows,
    # depending on the row order, and the zeros are excluded below - so the
    # bandwidth of data with ties depended on the order of the rows.
    from scipy.spatial.distance import pdist

    distances = pdist(standardised, "euclidean")
    positive = distances[distances > 0]
    if positive.size == 0:
        raise ParameterError(
            f"cannot choose the {what} by the median heuristic: all rows of {_role(what)} are identical; "
            f"pass {what}=<number>"
        )
    median = float(np.median(positive))
    return np.where(constant, np.inf, scale * median)


def _role(what: str) -> str:
    """The matrix a bandwidth parameter belongs to, for messages."""
    return {"x_bandwidth": "X (the outcome model's covariates)", "v_bandwidth": "V (the conditioning variables)",
            "y_bandwidth": "Y (the outcome)"}.get(what, "the data")


def silverman_bandwidth(Y: np.ndarray) -> np.ndarray:
    """Silverman's (d_y = 1) or Scott's (d_y > 1) rule per outcome dimension."""
    Y = np.asarray(Y, dtype=np.float64)
    n, d = Y.shape
    sd = Y.std(axis=0, ddof=1) if n > 1 else np.zeros(d)
    iqr = np.subtract(*np.percentile(Y, [75, 25], axis=0))
    spread = np.where(iqr > 0, np.minimum(sd, iqr / 1.34), sd)
    if np.any(spread <= 0):
        raise ParameterError("cannot choose the outcome bandwidth: the outcome is constant; pass y_bandwidth=")
    if d == 1:
        return 0.9 * spread * n ** (-1 / 5)
    return (4.0 / (d + 2)) ** (1 / (d + 4)) * spread * n ** (-1 / (d + 4))


def resolve_kernel(name, bandwidth, data: np.ndarray, *, what: str, seed: int = 0, density: bool = False) -> Kernel:
    """Turn the user's kernel name and bandwidth (value, array or rule) into a :class:`Kernel`.

    Parameters
    ----------
    name : str
        Kernel name.
    bandwidth : None, str, float or array
        ``None`` takes the default rule (``"silverman"`` for a density kernel,
        ``"median"`` otherwise); a rule name; a positive scalar for every column;
        or one positive value per column.
    data : ndarray (n, d)
        The columns the kernel acts on (used by the rules and for the shape).
    what : str
        The parameter's name, for messages (``"x_bandwidth"``, ...).
    """
    name = _check_name(name, what.replace("bandwidth", "kernel"), DENSITY_KERNELS if density else KERNELS)
    d = data.shape[1]
    if bandwidth is None:
        bandwidth = "silverman" if density else "median"
    if isinstance(bandwidth, str):
        if bandwidth == "median":
            return Kernel(name, tuple(median_bandwidth(data, seed, what=what)), "median")
        if bandwidth == "silverman":
            return Kernel(name, tuple(silverman_bandwidth(data)), "silverman")
        raise ParameterError(f"`{what}` must be a positive number, one per column, or 'median'/'silverman'; got {bandwidth!r}")
    values = np.asarray(bandwidth, dtype=np.float64)
    if values.ndim == 0:
        values = np.full(d, float(values))
    if values.shape != (d,):
        raise ParameterError(f"`{what}` must be a scalar or have one value per column ({d}); got shape {values.shape}")
    if not np.all(values > 0) or np.any(np.isnan(values)) or (density and np.any(np.isinf(values))):
        raise ParameterError(f"`{what}` must be positive{' and finite' if density else ''}; got {bandwidth!r}")
    return Kernel(name, tuple(values), "user")
