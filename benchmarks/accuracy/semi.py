"""Semi-synthetic cases: simulated treatment and outcomes on the real covariate tables ccme ships.

The covariates are the real rows of NHEFS (1566 adults), the IHDP covariate
table (all 985 children) and NSW (445 men); treatment and outcomes are
simulated: A | X ~ Bernoulli(π(x)) with a bounded π, and Y^a | X = x a finite
Gaussian mixture with parameters that are smooth functions of x.  The
population is the table itself (each row equally likely); ``draw(n)`` with
``n=None`` returns the table's rows once each, another ``n`` resamples rows
with replacement.  For a discrete V the truth is the exact finite-population
mixture

    p(y^a | V = v) = (1 / #{i: V_i = v}) Σ_{i: V_i = v} p(y^a | X = x_i),

and for V = X it is p(y^a | X = x) itself.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

import ccme

from ._base import Case, Mixture, _assemble, bounded, expit

__all__ = ["NhefsSex", "NhefsEducation", "NhefsExercise", "IhdpSite", "IhdpAll", "NswRace"]


def _z(col: pd.Series) -> np.ndarray:
    """A column standardised by the table's mean and sd (fixed constants of the case)."""
    return ((col - col.mean()) / col.std()).to_numpy(dtype=float)


def unit_mixture(weights, means, sds) -> Mixture:
    """Per-unit mixtures from lists of (n,) arrays: weights, means, standard deviations."""
    W = np.column_stack([np.broadcast_to(np.asarray(w, float), np.shape(means[0])) for w in weights])
    M = np.column_stack([np.asarray(m, float) for m in means])
    S = np.column_stack([np.broadcast_to(np.asarray(s, float), M.shape[:1]) for s in sds])
    return Mixture(W, M[:, :, None], (S**2)[:, :, None, None])


class SemiCase(Case):
    """A real covariate table; subclasses give ``_table``, ``_eta`` (propensity logit) and ``_units``."""

    n = None
    kind = "semi-synthetic"

    # --- subclass hooks -------------------------------------------------------------
    def _table(self) -> pd.DataFrame:
        raise NotImplementedError

    def _eta(self, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _units(self, rows: np.ndarray, arm: int) -> Mixture:
        """Y^a | X = x_i for table rows ``rows`` (one mixture per row)."""
        raise NotImplementedError

    # --- the protocol -------------------------------------------------------------
    @cached_property
    def table(self) -> pd.DataFrame:
        return self._table().reset_index(drop=True)

    def simulate(self, n, seed):
        rng = np.random.default_rng(seed)
        N = len(self.table)
        rows = np.arange(N) if n is None else rng.integers(0, N, size=int(n))
        ps = bounded(*self.ps_range, self._eta(rows))
        a = rng.binomial(1, ps)
        y1 = self._sample_units(rows, 1, rng)
        y0 = self._sample_units(rows, 0, rng)
        x = self.table.iloc[rows].reset_index(drop=True)
        return _assemble(self, x, a, ps, y0, y1)

    def _sample_units(self, rows, arm, rng):
        mix = self._units(rows, arm)
        cum = np.cumsum(mix.weights, axis=1)
        k = (rng.random(len(rows))[:, None] > cum[:, :-1]).sum(axis=1)
        i = np.arange(len(rows))
        return mix.means[i, k, 0] + np.sqrt(mix.covs[i, k, 0, 0]) * rng.standard_normal(len(rows))

    def _matching(self, v_row) -> np.ndarray:
        mask = np.ones(len(self.table), dtype=bool)
        for c in self.v_columns:
            mask &= (self.table[c] == v_row[c]).to_numpy()
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            raise ValueError(f"{self.name}: no unit of the table has V = {dict(v_row)}")
        return rows

    def mixture(self, v_frame, arm):
        if not self.discrete_v:  # V = X: the units' own conditional densities
            return self._units(self._rows_of(v_frame), arm)
        parts = []
        for _, v_row in v_frame.iterrows():
            rows = self._matching(v_row)
            mix = self._units(rows, arm)
            parts.append((mix.weights.reshape(-1) / len(rows), mix.means.reshape(-1, 1), mix.covs.reshape(-1, 1, 1)))
        K = max(p[0].size for p in parts)
        W = np.zeros((len(parts), K))
        M = np.zeros((len(parts), K, 1))
        C = np.ones((len(parts), K, 1, 1))
        for j, (w, m, c) in enumerate(parts):
            W[j, : w.size], M[j, : w.size], C[j, : w.size] = w, m, c
        return Mixture(W, M, C)

    @cached_property
    def _lookup(self) -> dict:
        keys = map(tuple, self.table[self.v_columns].to_numpy(dtype=float).round(10))
        return {k: i for i, k in reversed(list(enumerate(keys)))}

    def _rows_of(self, v_frame) -> np.ndarray:
        """Table rows equal to each row of ``v_frame`` (V = X): the first match."""
        wanted = map(tuple, v_frame[self.v_columns].to_numpy(dtype=float).round(10))
        try:
            return np.array([self._lookup[k] for k in wanted])
        except KeyError as exc:
            raise ValueError(f"{self.name}: V-points must be rows of the table") from exc

    def sample_given_v(self, v_row, arm, m, rng):
        if self.discrete_v:
            rows = rng.choice(self._matching(v_row.iloc[0]), size=m)
        else:
            rows = np.repeat(self._rows_of(v_row.iloc[[0]]), m)
        return self._sample_units(rows, arm, rng)

    def eval_points(self, n_points, seed):
        V = self.table[self.v_columns]
        if self.discrete_v:
            return V.drop_duplicates().sort_values(self.v_columns).reset_index(drop=True)
        rows = np.random.default_rng(seed).choice(len(V), size=min(int(n_points), len(V)), replace=False)
        return V.iloc[np.sort(rows)].reset_index(drop=True)


# ---------------------------------------------------------------------------------
_NHEFS = ["sex", "race", "age", "education", "smokeintensity", "smokeyrs", "exercise", "active", "wt71"]


class _Nhefs(SemiCase):
    x_columns = _NHEFS

    def _table(self):
        return ccme.datasets.load_nhefs()[_NHEFS].copy()

    @cached_property
    def _z(self):
        t = self.table
        return {c: _z(t[c]) for c in ("age", "smokeintensity", "smokeyrs", "wt71")} | {
            c: t[c].to_numpy(dtype=float) for c in ("sex", "race", "education", "exercise", "active")}


class NhefsSex(_Nhefs):
    name = "nhefs_sex"
    description = "NHEFS covariates (9), V = sex (2 levels); bimodal weight change (a 'large gain' component)"
    split = "choose"
    formula = ("y ~ a | sex | race + age + education + smokeintensity + smokeyrs + C(exercise) + C(active) + wt71")
    v_columns = ["sex"]
    discrete_v = True
    ps_range = (0.05, 0.95)
    features = ("semi-synthetic NHEFS", "n=1566", "V binary", "dimX=9 (ordinal, categorical)", "bimodal",
                "heteroscedastic", "confounding in+out V")

    def _eta(self, rows):
        z = self._z
        return (-1.0 + 0.5 * z["age"] - 0.4 * z["smokeintensity"] + 0.3 * z["wt71"] - 0.4 * z["race"]
                + 0.3 * z["sex"] + 0.2 * (z["education"] - 3) + 0.3 * (z["exercise"] == 0)
                - 0.2 * (z["active"] == 2))[rows]

    def _units(self, rows, arm):
        z = {k: v[rows] for k, v in self._z.items()}
        q = expit(-1.2 + 0.8 * arm - 0.5 * z["age"] + 0.4 * z["smokeintensity"] - 0.3 * z["sex"])
        gain = 8.0 + 2.0 * arm + 1.5 * z["smokeintensity"] - 1.5 * z["sex"]
        stable = 1.0 + 1.5 * arm - 1.5 * z["age"] + 1.0 * z["sex"] - 0.8 * z["wt71"] + 0.5 * z["smokeyrs"]
        return unit_mixture([q, 1 - q], [gain, stable], [3.5, 2.0 + 1.0 * z["sex"]])


class NhefsEducation(_Nhefs):
    name = "nhefs_education"
    description = "NHEFS covariates (9), V = education (5 ordered levels); effect varies with education and age"
    split = "report"
    formula = ("y ~ a | education | sex + race + age + smokeintensity + smokeyrs + C(exercise) + C(active) + wt71")
    v_columns = ["education"]
    discrete_v = True
    ps_range = (0.03, 0.97)
    features = ("semi-synthetic NHEFS", "n=1566", "V ordinal (5)", "dimX=9", "heteroscedastic",
                "weak overlap (0.03)", "confounding in+out V")

    def _eta(self, rows):
        z = self._z
        return (-1.2 + 0.8 * z["age"] + 0.4 * (z["education"] - 3) - 0.7 * z["smokeintensity"]
                + 0.5 * z["smokeyrs"] + 0.6 * z["race"] - 0.4 * z["wt71"])[rows]

    def _units(self, rows, arm):
        z = {k: v[rows] for k, v in self._z.items()}
        edu = z["education"] - 3
        mean = (2.0 + arm * (2.5 + 0.8 * edu - 1.2 * z["age"]) - 1.5 * z["age"] + 0.8 * z["smokeintensity"]
                + 0.5 * z["sex"] - 0.6 * z["wt71"] + 0.3 * edu)
        sd = 2.0 + 0.8 * np.abs(z["wt71"]) + 0.5 * arm
        return unit_mixture([np.ones_like(mean)], [mean], [sd])


class NhefsExercise(_Nhefs):
    """Held out of the choice of location="default" (a factor in V makes it "auto"): written, and fixed, before
    any fit of it was seen (README, "A location stage", "The default")."""

    name = "nhefs_exercise"
    description = ("NHEFS covariates (9), V = exercise (3-level factor); the levels shift the law and move the "
                   "weight of a 'large gain' component; confounding by age, smoking and weight")
    split = "report"
    formula = ("y ~ a | C(exercise) | sex + race + age + education + smokeintensity + smokeyrs + C(active) + wt71")
    v_columns = ["exercise"]
    discrete_v = True
    ps_range = (0.05, 0.95)
    features = ("semi-synthetic NHEFS", "n=1566", "V categorical (3)", "dimX=9", "bimodal", "heteroscedastic",
                "confounding in+out V")

    def _eta(self, rows):
        z = self._z
        return (-0.8 + 0.6 * z["age"] - 0.5 * z["smokeintensity"] + 0.4 * z["wt71"] - 0.3 * z["sex"]
                + 0.4 * (z["exercise"] == 0) - 0.3 * (z["exercise"] == 2) + 0.2 * (z["education"] - 3))[rows]

    def _units(self, rows, arm):
        z = {k: v[rows] for k, v in self._z.items()}
        level = z["exercise"]
        shift = np.select([level == 0, level == 1], [-1.0, 0.5], 1.5)
        q = expit(-1.0 + 0.6 * arm - 0.6 * z["age"] + 0.5 * (level == 0) - 0.4 * z["sex"])
        stable = (shift + arm * (2.0 - 0.5 * level) - 1.2 * z["age"] + 0.6 * z["smokeintensity"] - 0.5 * z["wt71"]
                  + 0.4 * z["sex"])
        return unit_mixture([1 - q, q], [stable, stable + 6.0 + arm], [1.5 + 0.5 * z["sex"], 3.0])


# ---------------------------------------------------------------------------------
_IHDP_CONT = ["bw", "b_head", "preterm", "birth_o", "nnhealth", "momage"]
_IHDP_BIN = ["sex", "twin", "b_marr", "cig", "first", "booze", "drugs", "work_dur", "prenatal"]


def _ihdp_raw() -> pd.DataFrame:
    raw = ccme.datasets.load_ihdp_covariates(hill=False)
    raw.columns = [c.replace(".", "_") for c in raw.columns]
    return raw


class IhdpSite(SemiCase):
    name = "ihdp_site"
    description = ("IHDP covariates (985 children, 17 columns: 6 continuous, 9 binary, ordinal mother's education, "
                   "3-level mother's race), V = site (8 levels)")
    split = "report"
    v_columns = ["site"]
    x_columns = ["site"] + _IHDP_CONT + _IHDP_BIN + ["momed", "momrace"]
    formula = "y ~ a | C(site) | " + " + ".join(_IHDP_CONT + _IHDP_BIN + ["momed", "C(momrace)"])
    discrete_v = True
    ps_range = (0.05, 0.95)
    features = ("semi-synthetic IHDP", "n=985", "V categorical (8)", "dimX=18 (binary, ordinal, categorical)",
                "heteroscedastic", "bimodal", "confounding in+out V")
    _SITE_PS = np.array([0.5, -0.3, 0.0, 0.8, -0.6, 0.2, -0.2, 0.4])
    _SITE_MU = np.array([0.0, 0.5, -0.5, 1.0, 0.3, -0.3, 0.8, -0.8])
    _SITE_TAU = np.array([1.0, 2.0, 0.5, 1.5, 3.0, 0.0, 1.0, 2.5])

    def _table(self):
        raw = _ihdp_raw()
        t = raw[_IHDP_CONT + _IHDP_BIN].copy()
        site = raw[[f"site{j}" for j in range(1, 9)]].to_numpy().argmax(axis=1)
        t.insert(0, "site", [f"s{j + 1}" for j in site])
        college = 1 - raw["mom_lths"] - raw["mom_hs"] - raw["mom_scoll"]
        t["momed"] = 1 + raw["mom_hs"] + 2 * raw["mom_scoll"] + 3 * college  # 1 < high school ... 4 college
        t["momrace"] = np.select([raw["momwhite"] == 1, raw["momblack"] == 1], ["white", "black"], "hisp")
        return t[self.x_columns]

    @cached_property
    def _z(self):
        t = self.table
        out = {c: _z(t[c]) for c in _IHDP_CONT}
        out |= {c: t[c].to_numpy(dtype=float) for c in _IHDP_BIN + ["momed"]}
        out["site"] = t["site"].str[1:].astype(int).to_numpy() - 1
        out["white"] = (t["momrace"] == "white").to_numpy(dtype=float)
        return out

    def _eta(self, rows):
        z = self._z
        return (self._SITE_PS[z["site"]] - 0.6 * z["bw"] + 0.4 * z["momage"] + 0.5 * z["white"]
                + 0.3 * (z["momed"] - 2) - 0.4 * z["cig"])[rows]

    def _units(self, rows, arm):
        z = {k: v[rows] for k, v in self._z.items()}
        s = z["site"]
        base = self._SITE_MU[s] + 0.8 * z["bw"] + 0.5 * z["b_head"] - 0.4 * z["preterm"] + 0.3 * (z["momed"] - 2)
        mu0 = 1.0 + np.exp(0.3 * (base - 1.0))
        mu1 = 2.0 + base + 0.5 * self._SITE_TAU[s] * (1 + 0.3 * z["nnhealth"])
        mean = mu1 if arm == 1 else mu0
        q = expit(-1.0 + 1.2 * z["twin"] + 0.8 * z["first"] - 0.5 * z["momage"])  # a second, lower mode
        sd = 0.6 + 0.3 * (z["momed"] <= 2) + 0.2 * arm
        return unit_mixture([1 - q, q], [mean, mean - 3.0], [sd, 1.0])


class IhdpAll(SemiCase):
    name = "ihdp_all25"
    description = ("IHDP covariates (985 children), V = X = all 25 covariates (6 continuous, 19 binary); "
                   "Hill's surface B-type means, unit variance")
    split = "report"
    v_columns = list(ccme.datasets.IHDP_CONTINUOUS) + list(ccme.datasets.IHDP_BINARY)
    x_columns = v_columns
    formula = "y ~ a | " + " + ".join(v_columns)
    discrete_v = False
    ps_range = (0.05, 0.95)
    features = ("semi-synthetic IHDP", "n=985", "dimV=25 (V = X)", "nonlinear mean", "confounding inside V")
    _BETA_SEED = 20110101

    def _table(self):
        return _ihdp_raw()[self.v_columns].copy()

    @cached_property
    def _x(self):
        t = self.table
        X = t.to_numpy(dtype=float).copy()
        for j, c in enumerate(self.v_columns):
            if c in ccme.datasets.IHDP_CONTINUOUS:
                X[:, j] = _z(t[c])
        return X

    @cached_property
    def _coef(self):
        rng = np.random.default_rng(self._BETA_SEED)
        beta = rng.choice([0.0, 0.1, 0.2, 0.3, 0.4], size=25, p=[0.6, 0.1, 0.1, 0.1, 0.1])
        gamma = rng.normal(0.0, 0.4, size=25)
        X = self._x
        omega = float(np.mean(X @ beta - np.exp((X + 0.5) @ beta)) - 4.0)
        return beta, gamma, omega

    def _eta(self, rows):
        beta, gamma, _ = self._coef
        eta = self._x @ gamma
        return ((eta - eta.mean()) / eta.std() * 1.2)[rows]

    def _units(self, rows, arm):
        beta, _, omega = self._coef
        X = self._x[rows]
        mean = X @ beta - omega if arm == 1 else np.exp((X + 0.5) @ beta)
        return unit_mixture([np.ones(len(rows))], [mean], [1.0])


# ---------------------------------------------------------------------------------
class NswRace(SemiCase):
    name = "nsw_race"
    description = ("NSW covariates (445 men, resampled to n 1000), V = race (3 levels); earnings (k$) with a spike "
                   "near zero, a bulk and a long right tail")
    split = "report"
    n = 1000
    v_columns = ["race"]
    x_columns = ["race", "age", "educ", "marr", "nodegree", "re74", "re75"]
    formula = "y ~ a | C(race) | age + educ + marr + nodegree + re74 + re75"
    discrete_v = True
    ps_range = (0.1, 0.9)
    features = ("semi-synthetic NSW", "n=1000 (resampled)", "V categorical (3)", "dimX=7", "trimodal/skewed",
                "confounding in+out V")
    _RACE_PS = {"black": 0.3, "hispanic": -0.2, "other": -0.5}
    _RACE_ZERO = {"black": 0.3, "hispanic": -0.2, "other": -0.6}

    def _table(self):
        raw = ccme.datasets.load_nsw()
        t = raw[["age", "educ", "marr", "nodegree", "re74", "re75"]].copy()
        t.insert(0, "race", np.select([raw["black"] == 1, raw["hisp"] == 1], ["black", "hispanic"], "other"))
        return t[self.x_columns]

    @cached_property
    def _num(self):
        t = self.table
        out = {c: t[c].to_numpy(dtype=float) for c in ("age", "educ", "marr", "nodegree")}
        out["re74"] = t["re74"].to_numpy(dtype=float) / 1000.0
        out["re75"] = t["re75"].to_numpy(dtype=float) / 1000.0
        out["race_ps"] = t["race"].map(self._RACE_PS).to_numpy(dtype=float)
        out["race_zero"] = t["race"].map(self._RACE_ZERO).to_numpy(dtype=float)
        return out

    def _eta(self, rows):
        z = self._num
        return (-0.3 + 0.04 * (z["age"] - 25) + 0.15 * (z["educ"] - 10) - 0.5 * z["marr"] + 0.4 * z["nodegree"]
                - 0.08 * z["re74"] + z["race_ps"])[rows]

    def _units(self, rows, arm):
        z = {k: v[rows] for k, v in self._num.items()}
        q0 = expit(0.3 - 0.8 * arm - 0.15 * (z["educ"] - 10) - 0.15 * z["re75"] + z["race_zero"])
        r = expit(-2.0 + 0.1 * z["re74"] + 0.5 * arm)
        mid = 4.0 + 1.5 * arm + 0.3 * (z["educ"] - 10) + 0.4 * z["re75"] + 0.05 * (z["age"] - 25)
        high = 12.0 + 2.0 * arm + 0.3 * z["re75"]
        return unit_mixture([q0, (1 - q0) * (1 - r), (1 - q0) * r], [0.3 + 0 * mid, mid, high], [0.3, 1.8, 4.0])
