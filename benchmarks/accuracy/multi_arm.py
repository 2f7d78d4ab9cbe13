"""A three-arm case of the accuracy zoo: placebo / low / high dose, every arm scored.

The data and the exact truth are ``ccme.datasets.three_arm_simulation`` and
``three_arm_density`` (see ``src/ccme/datasets/three_arm.py``): V = (x1, x2),
confounders x3..x5 outside V, multinomial-logit generalised propensities
(about 32 / 35 / 33 % of the units per arm, in [0.1, 0.8] for 99.9 % of the
units), a Gaussian placebo arm, a heteroscedastic low arm and a bimodal high
arm.  The truth p(Y^a | V = v) is a two-component Gaussian mixture per arm,
exposed here as a :class:`~benchmarks.accuracy._base.Mixture` so that the
zoo's metric and grid helpers apply.

Not in the zoo's registry (``zoo.CASES``): the runner (``run.py``), its CSV
and its tables assume the two arms 1 and 0 (columns ISE arm 1 / ISE arm 0,
the marginal baseline's binary propensity, the tests of every registered
case at arms 1 and 0).  ``benchmarks/multi_arm.py`` scores this case: the
three-arm DR and one-step fits and, per arm, the binary fit of that arm
against the rest.  Its split is "report": it was not used to choose any
default.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ccme.datasets import THREE_ARM_LEVELS, three_arm_density, three_arm_ise, three_arm_simulation
from ccme.datasets.three_arm import _conditional_draw, _mixture

from ._base import Case, Mixture

__all__ = ["ThreeArm", "one_vs_rest"]


def one_vs_rest(data: pd.DataFrame, arm: str) -> pd.DataFrame:
    """``data`` with the treatment ``a`` replaced by the string column ``arm`` / ``"rest"``.

    A binary fit of it with ``treated=arm`` targets the same p(Y^arm | V) as
    the three-arm fit (its treated side is the arm's units, its propensity
    the arm's generalised propensity).
    """
    if arm not in THREE_ARM_LEVELS:
        raise ValueError(f"arm must be one of {THREE_ARM_LEVELS}; got {arm!r}")
    return data.assign(a=np.where(data["a"] == arm, arm, "rest").astype(str))


class ThreeArm(Case):
    name = "three_arm"
    description = "three arms (placebo / low / high), confounders outside V, Gaussian / heteroscedastic / bimodal"
    split = "report"
    n = 4000
    formula = "y ~ a | x1 + x2 | ."
    v_columns = ["x1", "x2"]
    x_columns = ["x1", "x2", "x3", "x4", "x5"]
    #: The arms, as the fits name them (``arm=<level>``).
    arms = THREE_ARM_LEVELS
    # Not bounded by construction (multinomial logit): 99.9 % of the units lie in
    # [0.1, 0.8]; the smallest generalised propensity in 400 000 draws is about 0.04.
    ps_range = (0.04, 0.8)
    features = ("3 arms", "dimV=2", "dimX=5", "confounding outside V", "heteroscedastic", "bimodal", "n=4000")

    def simulate(self, n, seed):
        """(observed frame y, a, x1..x5; truth frame y_<arm>, p_<arm>) of ``three_arm_simulation``."""
        return three_arm_simulation(int(n), seed, truth=True)

    @staticmethod
    def _arm_index(arm) -> int:
        if arm not in THREE_ARM_LEVELS:
            raise ValueError(f"arm must be one of {THREE_ARM_LEVELS}; got {arm!r}")
        return THREE_ARM_LEVELS.index(arm)

    def mixture(self, v_frame: pd.DataFrame, arm) -> Mixture:
        """p(Y^arm | V = v) as a two-component Gaussian mixture per row (the module's closed form)."""
        v = v_frame[self.v_columns].to_numpy(dtype=float)
        weights, means, sds = _mixture(v, self._arm_index(arm))
        return Mixture(weights, means[:, :, None], (sds**2)[:, :, None, None])

    def density(self, y_grid, v_frame: pd.DataFrame, arm) -> np.ndarray:
        """Exact p(y^arm | V = v), (n_v, G): ``ccme.datasets.three_arm_density`` itself."""
        return three_arm_density(y_grid, v_frame[self.v_columns], arm)

    def sample_given_v(self, v_row: pd.DataFrame, arm, m: int, rng) -> np.ndarray:
        """m draws of Y^arm given V = v (one row) by the simulator's own code."""
        v = v_row[self.v_columns].to_numpy(dtype=float).reshape(-1)
        return _conditional_draw(v, m, seed=rng)[:, self._arm_index(arm)]

    def eval_points(self, n_points, seed) -> pd.DataFrame:
        """Fresh draws V ~ N(0, I₂): the same points ``three_arm_ise`` draws with this seed."""
        V = np.random.default_rng(seed).standard_normal((int(n_points), 2))
        return pd.DataFrame(V, columns=self.v_columns)

    def score(self, res, arm, *, n_test: int = 500, seed=0) -> float:
        """The zoo's metric for one arm: ``ccme.datasets.three_arm_ise`` (mean ISE over ``n_test`` V-points)."""
        return three_arm_ise(res, arm=arm, n_test=n_test, seed=seed)
