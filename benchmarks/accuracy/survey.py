"""A survey-sample case of the accuracy zoo: the sample's inclusion depends on a confounder outside V.

The population is a :class:`ccme`-style simulation X = (V, U), V, U independent
standard normal,

    π(x) = 0.1 + 0.8 expit(0.5 v + u),      Y^a = a + v + u + 0.5 ε,

so that the population's p(Y^a | V = v) = N(a + v, 1 + 0.25) exactly (U
integrated out).  The data are a Poisson sample of it: unit i is included
with probability ρ(u) = 0.05 + 0.9 expit(2u − 1), which depends on the
confounder U outside V, and carries the sampling weight w = 1/ρ(u) (a column
``w``).  In the sample U | V is shifted upwards (by about 0.6) and narrowed, so
the sample's p(Y^a | V) — what a fit without the weights targets — differs
from the population's, which the weighted fit (``ccme.fit(..., weights="w")``)
targets.  :meth:`SurveyV1.density` is the population truth.

Not in the zoo's registry (``zoo.CASES``): the runner fits without weights.
``benchmarks/sampling_weights.py`` scores it with and without them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._base import SyntheticCase, bounded, expit, gaussian

__all__ = ["SurveyV1"]


class SurveyV1(SyntheticCase):
    name = "survey_v1"
    description = "survey sample: inclusion depends on a confounder outside V, weights w = 1/inclusion probability"
    split = "report"
    n = 2000
    formula = "y ~ a | v | u"
    weights = "w"
    v_columns = ["v"]
    x_columns = ["v", "u"]
    ps_range = (0.1, 0.9)
    features = ("dimV=1", "dimX=2", "sampling weights", "Gaussian", "n=2000")

    @staticmethod
    def inclusion(u) -> np.ndarray:
        """ρ(u): the probability that a population unit with confounder u is sampled."""
        return 0.05 + 0.9 * expit(2.0 * np.asarray(u, dtype=float) - 1.0)

    def sample_v(self, n, rng):
        return pd.DataFrame({"v": rng.standard_normal(n)})

    def sample_w(self, v, rng):
        return pd.DataFrame({"u": rng.standard_normal(len(v))})

    def propensity(self, x):
        return bounded(*self.ps_range, 0.5 * x["v"].to_numpy() + x["u"].to_numpy())

    def sample_y(self, x, arm, rng):
        return arm + x["v"].to_numpy() + x["u"].to_numpy() + 0.5 * rng.standard_normal(len(x))

    def mixture(self, v_frame, arm):
        """The population's p(Y^a | V = v) = N(a + v, 1.25)."""
        v = v_frame["v"].to_numpy(dtype=float)
        return gaussian(arm + v, np.full(len(v), 1.25))

    def simulate(self, n, seed):
        """A Poisson sample of ``n`` units (drawn in batches from the population) with their weights ``w``.

        The truth frame holds the propensity, the potential outcomes and the
        inclusion probability ``rho``.
        """
        n = int(n)
        rng = np.random.default_rng(seed)
        frames, truths, have = [], [], 0
        while have < n:
            data, truth = super().simulate(3 * (n - have) + 100, int(rng.integers(2**31 - 1)))
            rho = self.inclusion(data["u"].to_numpy())
            keep = rng.random(len(data)) < rho
            data, truth = data[keep].copy(), truth[keep].copy()
            data["w"] = 1.0 / rho[keep]
            truth["rho"] = rho[keep]
            frames.append(data)
            truths.append(truth)
            have += len(data)
        data = pd.concat(frames, ignore_index=True).iloc[:n]
        truth = pd.concat(truths, ignore_index=True).iloc[:n]
        return data.reset_index(drop=True), truth.reset_index(drop=True)

    def sample_given_v(self, v_row, arm, m, rng):
        """m draws of the population's Y^a given V = v (no sampling)."""
        return super().sample_given_v(v_row, arm, m, rng)
