"""Data sets with known ground truth, for examples, tests and benchmarks."""

from .paper import PAPER_PROFILES, paper_simulation, paper_simulation_density, paper_simulation_ise

__all__ = ["paper_simulation", "paper_simulation_density", "paper_simulation_ise", "PAPER_PROFILES"]
