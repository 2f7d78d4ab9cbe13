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
(with the values clipped to Tukey's far-out fences, :func:`ccme.fences.bulk_sd`,
so that a few far-out values do not set it) and the bandwidth is the median pairwise Euclidean distance of the
standardised rows (on at most 1000 rows drawn with a fixed generator; the
zero distances between duplicated rows are left out), mapped
back to each column's units: σ_d = sd_d × median.  A constant column gets
σ_d = +inf, i.e. it is ignored, with a warning.  The indicator columns of one
categorical variable (a :class:`Group` of kind ``"categorical"`` or
``"ordered"``) are scaled together instead, by the root of their summed
variances s_g (so that, like a standardised numeric column, the block adds 2
on average to the squared distance between two units), and share one
bandwidth σ_g = s_g × median: one bandwidth per block is what makes the
Gaussian kernel over it a categorical kernel (below).

Covariate groups and categorical kernels
----------------------------------------
The columns of X and V come in groups (:func:`covariate_groups`): the columns
computed from the same raw variables (a numeric column, its transforms, or
all indicator columns of one categorical variable).  :mod:`ccme.formula`
codes a categorical variable with one indicator per level, an ordered pandas
categorical with cumulative indicators 1{x ≥ level_k}, and a boolean as one
0/1 column, so that the Gaussian kernel's factor over a group with one
bandwidth σ is exactly the mixed-data kernel of Li and Racine (R package
``np``): for two units with levels x ≠ x',

- unordered (indicators; squared distance 2): λ with λ = exp(−1/σ²)
  (Aitchison and Aitken's kernel up to a constant factor, which a ridge
  penalty absorbs);
- ordered (cumulative indicators; squared distance |r − r'| for level ranks
  r): λ^|r − r'| with λ = exp(−1/(2σ²));
- boolean (one 0/1 column): λ = exp(−1/(2σ²));

and 1 when x = x'.  λ ∈ (0, 1]: λ → 0 (σ → 0) separates the levels
completely, λ = 1 (σ = inf) ignores the variable.  :attr:`Group.smoothing`
converts.  With the Laplace and Matérn kernels the block enters the radial
distance instead (still one bandwidth per block, not a product kernel).

``"silverman"`` (Y): per outcome dimension, Silverman's rule of thumb
σ_d = 0.9 min(sd_d, IQR_d / 1.34) n^(−1/5) for d_y = 1, and Scott's
generalisation σ_d = (4 / (d_y + 2))^(1/(d_y + 4)) min(sd_d, IQR_d/1.34)
n^(−1/(d_y + 4)) for d_y > 1, computed on all observed outcomes (both arms
share one outcome kernel so that their densities are comparable).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from ._backend import DENSITY_KERNELS, KERNELS
from .errors import DataWarning, FormatError, ParameterError
from .fences import bulk_sd
from .io import check_schema, make_state

__all__ = ["Kernel", "Group", "KERNELS", "DENSITY_KERNELS", "median_bandwidth", "silverman_bandwidth", "resolve_kernel",
           "covariate_groups", "design_groups"]

_MEDIAN_ROWS = 1000
#: Kinds of a covariate group; the categorical ones share one bandwidth per group.
GROUP_KINDS = ("numeric", "categorical", "ordered", "binary")
#: Squared distance between the codes of two different levels (adjacent levels for "ordered").
_LEVEL_DISTANCE = {"categorical": 2.0, "ordered": 1.0, "binary": 1.0}


@dataclass(frozen=True)
class Group:
    """Columns of a covariate matrix that come from the same raw variable(s).

    Attributes
    ----------
    label : str
        The raw variable(s), e.g. ``"age"``, ``"region"``, ``"x1:g"``.
    kind : {"numeric", "categorical", "ordered", "binary"}
        How the columns code the variable (:mod:`ccme.formula`).
    columns : tuple of int
        The group's column indices in the matrix.
    """

    label: str
    kind: str
    columns: tuple

    @property
    def categorical(self) -> bool:
        return self.kind != "numeric"

    def smoothing(self, bandwidth: float) -> float:
        """Li and Racine's λ ∈ [0, 1] of a categorical group at the block's Gaussian bandwidth (1 at inf)."""
        if not self.categorical:
            raise ParameterError(f"the group {self.label!r} is numeric: it has a bandwidth, no smoothing parameter")
        return float(np.exp(-_LEVEL_DISTANCE[self.kind] / (2.0 * float(bandwidth) ** 2)))

    def bandwidth(self, smoothing: float) -> float:
        """The block's Gaussian bandwidth at Li and Racine's λ ∈ (0, 1): the inverse of :meth:`smoothing`."""
        if not self.categorical:
            raise ParameterError(f"the group {self.label!r} is numeric: it has a bandwidth, no smoothing parameter")
        if not 0.0 < smoothing < 1.0:
            raise ParameterError(f"a smoothing parameter needs 0 < λ < 1 for a finite bandwidth; got {smoothing!r}")
        return float(np.sqrt(-_LEVEL_DISTANCE[self.kind] / (2.0 * np.log(smoothing))))

    def to_state(self) -> dict:
        return {"label": self.label, "kind": self.kind, "columns": np.asarray(self.columns, dtype=np.int64)}

    @classmethod
    def from_state(cls, state) -> "Group":
        if (not isinstance(state, dict) or set(state) != {"label", "kind", "columns"}
                or not isinstance(state["label"], str) or state["kind"] not in GROUP_KINDS
                or not isinstance(state["columns"], np.ndarray) or state["columns"].ndim != 1
                or state["columns"].dtype.kind != "i"):
            raise FormatError(f"a stored kernel has a malformed covariate group: {str(state)[:80]}")
        return cls(state["label"], state["kind"], tuple(int(c) for c in state["columns"]))


def covariate_groups(sources, kinds=None) -> tuple:
    """Group columns by the raw variables they are computed from (:class:`Group`).

    Parameters
    ----------
    sources : sequence of frozenset of str
        Per column, its raw variables (``Design.x_sources``).
    kinds : sequence of str, optional
        Per column, ``Design.x_kinds`` (default: all numeric).  A group is
        categorical (ordered, binary) when all its columns are; otherwise numeric.

    Returns
    -------
    tuple of Group, in the order of their first columns.
    """
    kinds = list(kinds) if kinds is not None else ["numeric"] * len(sources)
    order, members = [], {}
    for j, source in enumerate(sources):
        key = frozenset(source)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(j)
    groups = []
    for key in order:
        columns = tuple(members[key])
        found = {kinds[j] for j in columns}
        kind = found.pop() if len(found) == 1 else "numeric"
        label = ":".join(sorted(key)) if key else "(constant)"
        groups.append(Group(label, kind if kind in GROUP_KINDS else "numeric", columns))
    return tuple(groups)


def design_groups(design, Xo=None) -> tuple:
    """The covariate groups of the columns of ``Xo`` (default: X) and of V, from a fitted design.

    ``Xo`` holds some of X's columns in X's order (the outcome model's
    covariates); they are found in X by their values, in order.

    Returns
    -------
    (x_groups, v_groups) : tuples of Group
    """
    X = design.X
    kinds = tuple(design.x_kinds) if getattr(design, "x_kinds", None) is not None else ("numeric",) * X.shape[1]
    d_v = design.V.shape[1]
    v_groups = covariate_groups(design.x_sources[:d_v], kinds[:d_v])
    if Xo is None or Xo is X:
        return covariate_groups(design.x_sources, kinds), v_groups
    columns, start = [], 0
    for j in range(Xo.shape[1]):
        found = next((i for i in range(start, X.shape[1]) if np.array_equal(X[:, i], Xo[:, j])), None)
        if found is None:  # not a subset of X's columns: each column its own numeric group
            return covariate_groups([frozenset({f"[{i}]"}) for i in range(Xo.shape[1])]), v_groups
        columns.append(found)
        start = found + 1
    return covariate_groups([design.x_sources[i] for i in columns], [kinds[i] for i in columns]), v_groups


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
        How the bandwidth was chosen (``"median"``, ``"silverman"``, ``"user"``,
        or a rule followed by how the tuning changed it).
    groups : tuple of Group
        The covariate groups of the columns (empty when unknown, e.g. for Y).
    """

    name: str
    bandwidth: tuple
    rule: str = "user"
    groups: tuple = ()

    #: Schema name and version of :meth:`to_state` (raise the version whenever the state changes).
    STATE_SCHEMA = "ccme.Kernel"
    #: 2: the covariate groups (a version-1 state reads back without them).
    STATE_VERSION = 2

    def to_state(self) -> dict:
        """The kernel as a versioned state for :mod:`ccme.io`; the bandwidths as a float64 array (inf kept)."""
        return make_state(self.STATE_SCHEMA, self.STATE_VERSION, name=self.name,
                          bandwidth=np.asarray(self.bandwidth, dtype=np.float64), rule=self.rule,
                          groups=[group.to_state() for group in self.groups])

    @classmethod
    def from_state(cls, state) -> "Kernel":
        """Inverse of :meth:`to_state` (the bandwidths come back as a tuple of ``np.float64``, bit for bit)."""
        version = check_schema(state, cls.STATE_SCHEMA, (1, cls.STATE_VERSION),
                               keys=("name", "bandwidth", "rule") if isinstance(state, dict) and state.get("version") == 1
                               else ("name", "bandwidth", "rule", "groups"))
        name, bandwidth, rule = state["name"], state["bandwidth"], state["rule"]
        if name not in KERNELS or not isinstance(rule, str):
            raise FormatError(f"a stored kernel has the name {str(name)[:40]!r} and rule {str(rule)[:40]!r}; "
                              f"the names are {list(KERNELS)}")
        if not isinstance(bandwidth, np.ndarray) or bandwidth.ndim != 1 or bandwidth.dtype != np.float64:
            raise FormatError(f"the bandwidth of a stored {name} kernel is not a float64 vector")
        stored = state["groups"] if version >= 2 else []
        if not isinstance(stored, list):
            raise FormatError(f"the covariate groups of a stored {name} kernel are not a list")
        groups = tuple(Group.from_state(g) for g in stored)
        if groups and sorted(c for g in groups for c in g.columns) != list(range(len(bandwidth))):
            raise FormatError(f"the covariate groups of a stored {name} kernel do not cover its columns once each")
        return cls(name, tuple(bandwidth), rule, groups)

    @property
    def bandwidth_array(self) -> np.ndarray:
        return np.asarray(self.bandwidth, dtype=np.float64)

    def narrowed(self, factor: float) -> "Kernel":
        """The kernel with every bandwidth × ``factor`` (an ignored column, bandwidth inf, stays ignored).

        Examples
        --------
        >>> Kernel("gaussian", (1.0, 2.0)).narrowed(0.5).bandwidth
        (0.5, 1.0)
        """
        if not (isinstance(factor, (int, float)) and 0 < factor <= 1):
            raise ParameterError(f"a kernel is narrowed by a factor in (0, 1]; got {factor!r}")
        return replace(self, bandwidth=tuple(float(b) * float(factor) for b in self.bandwidth_array),
                       rule=f"{self.rule}, narrowed x {float(factor):.3g}")

    def restored(self, bandwidth) -> "Kernel":
        """The kernel with each ignored column (bandwidth inf) at ``bandwidth``'s value for that column instead.

        Columns with a finite bandwidth keep it; where ``bandwidth`` is inf
        too, the column stays ignored.  The bands and intervals use it to give
        back the V covariates that the tuning dropped
        (:func:`ccme.bootstrap.restored_v_bandwidths`).

        Raises
        ------
        ParameterError
            ``bandwidth`` does not have one positive value per column.

        Examples
        --------
        >>> Kernel("gaussian", (1.0, float("inf"))).restored((5.0, 2.0)).bandwidth
        (1.0, 2.0)
        """
        values = np.asarray(bandwidth, dtype=np.float64)
        if values.shape != (len(self.bandwidth),) or not np.all(values > 0):
            raise ParameterError(f"a kernel of {len(self.bandwidth)} columns is restored by as many positive "
                                 f"bandwidths; got {bandwidth!r}")
        current = self.bandwidth_array
        return replace(self, bandwidth=tuple(float(b) for b in np.where(np.isinf(current), values, current)),
                       rule=f"{self.rule}, dropped columns restored")

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


def median_bandwidth(Z: np.ndarray, seed: int = 0, *, what: str = "bandwidth", groups=()) -> np.ndarray:
    """Median heuristic on standardised columns (see the module docstring).

    ``groups`` (:class:`Group`, optional): the columns of a categorical group
    are scaled together and share one bandwidth; numeric columns are
    standardised one by one whatever their group.
    """
    Z = np.asarray(Z, dtype=np.float64)
    constant = ~(Z.std(axis=0) > 1e-12 * np.maximum(1.0, np.abs(Z).max(axis=0)))
    # A few far-out values must not set a column's scale (ccme.fences): its sd with them clipped to the fences.
    sd = bulk_sd(Z)
    blocks = [list(g.columns) for g in groups if g.categorical and len(g.columns) > 1]
    if blocks:
        sd = sd.copy()
        for cols in blocks:
            varying = [c for c in cols if not constant[c]]
            if varying:  # the block's scale: the root of its summed variances, shared by its columns
                sd[cols] = np.sqrt(np.sum(sd[varying] ** 2))
                constant[cols] = False
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


def resolve_kernel(name, bandwidth, data: np.ndarray, *, what: str, seed: int = 0, density: bool = False,
                   groups=()) -> Kernel:
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
    groups : tuple of Group, optional
        The columns' covariate groups (:func:`covariate_groups`): kept on the
        kernel, and used by the median rule for the categorical blocks.
    """
    name = _check_name(name, what.replace("bandwidth", "kernel"), DENSITY_KERNELS if density else KERNELS)
    d = data.shape[1]
    if bandwidth is None:
        bandwidth = "silverman" if density else "median"
    if isinstance(bandwidth, str):
        if bandwidth == "median":
            return Kernel(name, tuple(median_bandwidth(data, seed, what=what, groups=groups)), "median", tuple(groups))
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
    return Kernel(name, tuple(values), "user", tuple(groups))
