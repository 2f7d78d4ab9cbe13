import os

# Under pytest-xdist each worker process runs its own tests: one OpenMP thread each, so that two workers on CI's two
# cores do not oversubscribe them (OpenMP's spinning barriers slow down badly when threads outnumber cores).  Set
# before anything loads the compiled core; tests of thread counts pass n_threads or OMP_NUM_THREADS explicitly.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

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
