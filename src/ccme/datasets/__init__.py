"""Data sets with known ground truth, and real data, for examples, tests and benchmarks.

- :func:`paper_simulation` (with :func:`paper_simulation_density`, the exact
  conditional density, and :func:`paper_simulation_ise`): the paper's
  simulation of Section "Analysis of Double Robustness".
- :func:`three_arm_simulation` (with :func:`three_arm_density`, the exact
  conditional density, :func:`three_arm_ise`, :data:`THREE_ARM_PROFILES` and
  :data:`THREE_ARM_LEVELS`): a placebo / low / high dose treatment confounded
  by covariates outside V, exact truth Y^a | V as a normal mixture.
- :func:`ihdp_surface_b` (with :func:`ihdp_density`): IHDP covariates with
  Hill's response surface B, exact truth Y^a | X ~ N(μ_a(X), 1).
- :func:`load_nsw`, :func:`load_nhefs`, :func:`load_ihdp_covariates`: real data
  (sources and licences in the package's ``datasets/data/README.md``).

The simulators return the observed columns only, so that ``.`` in a formula
means the covariates and nothing else; ``truth=True`` also returns, as a
second frame on the same index, what an analyst never sees (potential
outcomes, true propensity or conditional means):
``data, truth = paper_simulation(n, seed=1, truth=True)``.
"""

from .ihdp import IHDP_BINARY, IHDP_CONTINUOUS, ihdp_density, ihdp_surface_b
from .paper import PAPER_PROFILES, paper_simulation, paper_simulation_density, paper_simulation_ise
from .real import load_ihdp_covariates, load_nhefs, load_nsw
from .three_arm import THREE_ARM_LEVELS, THREE_ARM_PROFILES, three_arm_density, three_arm_ise, three_arm_simulation

__all__ = [
    "paper_simulation",
    "paper_simulation_density",
    "paper_simulation_ise",
    "PAPER_PROFILES",
    "three_arm_simulation",
    "three_arm_density",
    "three_arm_ise",
    "THREE_ARM_PROFILES",
    "THREE_ARM_LEVELS",
    "ihdp_surface_b",
    "ihdp_density",
    "IHDP_CONTINUOUS",
    "IHDP_BINARY",
    "load_nsw",
    "load_nhefs",
    "load_ihdp_covariates",
]
