"""The MMD's 90% interval of ``effect()``: reverse percentiles of T against those of T² (mapped back by √).

Both intervals come from the same fit and the same bootstrap draws (``effect()``
twice with one seed, ``ccme.bootstrap.SQUARED_INTERVAL_EFFECTS`` toggled), on
``benchmarks/calibration.py``'s ``effects`` design (V = x1, confounded, Y¹'s
law ``scale`` times as wide as Y⁰'s; the exact MMD from :func:`scale_effects`),
at the three profiles x1 ∈ {−1, 0, 1}.  One JSON line: the coverage of the
true MMD and the mean width of each construction::

    python benchmarks/inference/mmd_squared_interval.py --n 250 --reps 200 --scale 1.5
    python benchmarks/inference/mmd_squared_interval.py --n 1000 --reps 60 --defaults

``--defaults`` fits with ccme's tuning and default propensity, else
``tune="none"`` and a logistic propensity (:func:`calibration.fit_options`);
``--location linear`` with a location stage.
The same numbers come from ``calibration.py effects`` with and without
``--squared-effects ""`` (the same seeds), at twice the fitting time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ccme  # noqa: E402
import ccme.bootstrap  # noqa: E402
from calibration import SCALE_FORMULA, SCALE_PROFILES, fit_options, scale_data, scale_effects  # noqa: E402

CONSTRUCTIONS = {"reverse": (), "squared": ("mmd",)}


def coverage(n: int, reps: int, scale: float, defaults: bool, location=None, level: float = 0.9,
             n_boot: int = 199) -> dict:
    q, y = np.array([0.25, 0.5, 0.75]), np.array([-1.0, 0.0, 1.0])
    v = SCALE_PROFILES["x1"].to_numpy()
    hits = {k: [] for k in CONSTRUCTIONS}
    widths = {k: [] for k in CONSTRUCTIONS}
    kept = ccme.bootstrap.SQUARED_INTERVAL_EFFECTS
    try:
        for r in range(reps):
            data = scale_data(n, scale, r)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ccme.fit(SCALE_FORMULA, data, seed=r, **fit_options(defaults, location))
                truth = scale_effects(v, scale, y, q, rkhs=res.kernels["y"].bandwidth_array[0])["mmd"].ravel()
                for label, squared in CONSTRUCTIONS.items():
                    ccme.bootstrap.SQUARED_INTERVAL_EFFECTS = squared
                    table = res.effect(newdata=SCALE_PROFILES, q=q, y=y, level=level, n_boot=n_boot, seed=r)
                    rows = table[table["term"] == "mmd"]
                    lo, hi = rows["conf_low"].to_numpy(), rows["conf_high"].to_numpy()
                    hits[label].append(np.mean((lo <= truth) & (truth <= hi)))
                    widths[label].append(np.mean(hi - lo))
    finally:
        ccme.bootstrap.SQUARED_INTERVAL_EFFECTS = kept
    return {"n": n, "reps": reps, "scale": scale, "defaults": defaults, "location": location, "level": level,
            "n_boot": n_boot,
            "coverage": {k: round(float(np.mean(h)), 3) for k, h in hits.items()},
            "width": {k: round(float(np.mean(w)), 4) for k, w in widths.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=250)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--scale", type=float, default=1.5)
    parser.add_argument("--defaults", action="store_true")
    parser.add_argument("--location", choices=["linear"], default=None, help="fit(location=...): a located fit")
    args = parser.parse_args(argv)
    start = time.time()
    out = coverage(args.n, args.reps, args.scale, args.defaults, args.location)
    out["seconds"] = round(time.time() - start, 1)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
