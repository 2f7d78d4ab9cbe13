import os

import matplotlib
import pytest
from hypothesis import settings

matplotlib.use("Agg")

# Hypothesis: no per-example deadline (the first call of a compiled kernel or a
# formula parse can be slow), a modest number of examples on CI's 2 cores.
settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

PAPER_FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"


@pytest.fixture(scope="session")
def paper_formula():
    return PAPER_FORMULA
