"""Bit-identity of fitted outputs across a refactoring.

Fits the paper simulation with ridge (``tune="none"``, every mode) and each
neural method (DR, fixed seeds, small networks) and records, for both arms,
densities, normalised and raw CDFs, moments and the summary's text (its
timing-free parts).  Run it with ``--save REF.npz`` on the old code and with
``--compare REF.npz`` on the new: every array must agree bit for bit and
every summary line must be the same.

    python benchmarks/identity.py --save /tmp/before.npz
    python benchmarks/identity.py --compare /tmp/before.npz

``benchmarks/results/identity_before_redesign.npz`` holds the outputs of the
code before the redesign of the estimator protocol and the public
``ccme.Embedding`` (commit 26adaed, compiled with ``-march=native`` on the
project's 2-core machines); ``--compare`` against it showed 77 of 77
identical after the redesign.  Bit identity across a refactoring holds on
the same machine and build flags only.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings

import numpy as np

import ccme


#: Summary lines whose wording changed on purpose in the redesign (the call
#: hints follow the keyword-only API); every other line must be identical.
_EXPECTED_TEXT = {
    "  Test  res.test_effect(newdata) or res.summary(n_boot=499) for p-values (multiplier bootstrap)":
        "  Test  res.test_effect(newdata=...) or res.summary(n_boot=499) for p-values (multiplier bootstrap)",
    "Densities: res.density(y, newdata, arm); CDFs: res.cdf(...); plot: res.plot()":
        "Densities: res.density(y, newdata=..., arm=...); CDFs: res.cdf(...); plot: res.plot()",
}


def _cases():
    yield "ridge-dr", dict(method="ridge", mode="dr", tune="none")
    yield "ridge-ipw", dict(method="ridge", mode="ipw", tune="none")
    yield "ridge-pi", dict(method="ridge", mode="pi", tune="none")
    yield "ridge-onestep", dict(method="ridge", mode="onestep", tune="none")
    yield "ridge-dr-tuned", dict(method="ridge", mode="dr")
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    small = dict(hidden=(16, 16), epochs=15, M=20)
    yield "deep_feature-dr", dict(method="deep_feature", mode="dr", tune="none", **small)
    yield "neural_kernel-dr", dict(method="neural_kernel", mode="dr", tune="none", **small)


def record() -> dict:
    data = ccme.datasets.paper_simulation(600, seed=3)
    profiles = ccme.datasets.PAPER_PROFILES
    grid = np.linspace(-6, 8, 120)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kwargs in _cases():
            res = ccme.fit("y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10", data, folds=2,
                           propensity="forest", seed=7, **kwargs)
            for arm in (1, 0):
                out[f"{name}/density/{arm}"] = res.density(grid, newdata=profiles, arm=arm)
                out[f"{name}/raw/{arm}"] = res.density(grid, newdata=profiles, arm=arm, normalize=False)
                out[f"{name}/cdf/{arm}"] = res.cdf(grid, newdata=profiles, arm=arm)
                out[f"{name}/mean/{arm}"] = res.mean(newdata=profiles, arm=arm)
                out[f"{name}/sd/{arm}"] = res.sd(newdata=profiles, arm=arm)
            text = str(res.summary(n_boot=0))  # the p-values came later (issue 12); compare like with like
            # Times differ between runs: drop the numbers of seconds, keep the rest of every line.
            keep = [re.sub(r"\d+(\.\d+)? s\b", "<t> s", line) for line in text.splitlines()]
            out[f"{name}/summary"] = np.array(keep)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save")
    group.add_argument("--compare")
    args = parser.parse_args(argv)
    now = record()
    if args.save:
        np.savez(args.save, **now)
        print(f"saved {len(now)} arrays to {args.save}")
        return 0
    ref = dict(np.load(args.compare))
    for key in ref:
        if key.endswith("/summary"):
            ref[key] = np.array([_EXPECTED_TEXT.get(line, line) for line in ref[key].tolist()])
    bad = 0
    for key in sorted(ref):
        if key not in now:
            print(f"MISSING {key}")
            bad += 1
            continue
        a, b = ref[key], now[key]
        same = a.shape == b.shape and (np.array_equal(a, b, equal_nan=True) if a.dtype.kind == "f" else np.all(a == b))
        if not same:
            bad += 1
            if a.dtype.kind == "f" and a.shape == b.shape:
                print(f"DIFFER {key}: max abs {np.nanmax(np.abs(a - b)):.3g}")
            else:
                print(f"DIFFER {key}")
                for x, y in zip(a.tolist(), b.tolist()):
                    if x != y:
                        print(f"   - {x}\n   + {y}")
    print(f"{len(ref) - bad} of {len(ref)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
