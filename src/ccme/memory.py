"""Memory guard: refuse an n × n allocation that the machine cannot hold.

The ridge CCME keeps, per cross-fitting fold, the Cholesky factor of
K_V + nλ₁I over the fold's second-stage units and, per arm, the factor of
K_X0 + mλ₀I over the arm's first-stage units; the automatic tuning and the
Deep Feature loss hold kernel blocks of the same order.  Each takes 8 n²
bytes, so a large ``n`` asks for more memory than the machine has, and the
operating system kills the process instead of raising an error.  Before such
an allocation ccme compares the bytes it needs with the memory available
and raises :class:`ccme.errors.MemoryBudgetError` naming both figures and the
remedies (more folds, a subsample, or a neural estimator, whose memory grows
linearly in n).

The memory available is, in order,

1. the environment variable ``CCME_MEMORY_LIMIT`` (bytes, or a number with
   a unit: ``"512MB"``, ``"2.5GB"``, ``"1GiB"``), a cap a user or a test sets;
2. ``MemAvailable`` of ``/proc/meminfo`` (Linux: free memory plus the page
   cache the kernel can reclaim);
3. ``os.sysconf("SC_AVPHYS_PAGES") × os.sysconf("SC_PAGE_SIZE")``;

and when none can be read the guard lets every allocation through.
"""

from __future__ import annotations

import os
import re

from .errors import MemoryBudgetError, ParameterError

__all__ = ["ENV_VAR", "available_bytes", "check_allocation", "parse_bytes", "ADVICE"]

ENV_VAR = "CCME_MEMORY_LIMIT"

#: What to do instead, appended to every refusal.
ADVICE = ("use the low-rank path (approx='lowrank': Nystrom features, memory about n x rank; chosen by "
          "approx='auto' above ccme.estimators.lowrank.APPROX_THRESHOLD units), run it on a Dask cluster "
          "(fit(..., client=client)), use more cross-fitting folds (folds=K: each fold's factors are about "
          "(n/K) x (n/K)), or method='deep_feature' / 'neural_kernel', whose memory grows linearly in n")

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``"2.5GB"`` → 2500000000; a plain number is bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ParameterError(f"`{ENV_VAR}` must be a number of bytes, optionally with a unit (e.g. '2GB'); "
                             f"got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _sysconf_available() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def available_bytes() -> int | None:
    """Bytes of memory available now (see the module docstring); None when unknown."""
    limit = os.environ.get(ENV_VAR)
    if limit:
        return parse_bytes(limit)
    found = _meminfo_available()
    return found if found is not None else _sysconf_available()


def check_allocation(nbytes: float, what: str) -> None:
    """Raise :class:`MemoryBudgetError` when ``nbytes`` exceed the memory available.

    Parameters
    ----------
    nbytes : float
        The bytes about to be allocated (an estimate).
    what : str
        What they are for, e.g. "the second-stage Cholesky factor of fold 1 (20000 × 20000)".
    """
    available = available_bytes()
    if available is None or nbytes <= available:
        return
    raise MemoryBudgetError(
        f"{what} needs about {nbytes / 1e9:.3g} GB of memory, and only {available / 1e9:.3g} GB are available; "
        + ADVICE
    )
