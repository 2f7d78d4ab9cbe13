"""Where Neural-Kernel's gap to the ridge lies on a case: its DR, plug-in and one-step modes and its DR fit without
the location stage, against the ridge's DR and plug-in (n = 1000, seeds 1-3, the zoo's metric, 100 V-points).

If the plug-in mode (no propensity, no correction) is as far behind the ridge's plug-in as DR is behind ridge DR,
the gap is in the networks' regressions, not in the doubly robust correction.

    python benchmarks/accuracy/neural_gap_modes.py through_w,inside_v,large_n
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ccme  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import get_case  # noqa: E402

CONFIGS = {"nk dr": dict(method="neural_kernel"), "nk pi": dict(method="neural_kernel", mode="pi"),
           "nk onestep": dict(method="neural_kernel", mode="onestep"),
           "nk dr noloc": dict(method="neural_kernel", location=None),
           "ridge dr": dict(), "ridge pi": dict(mode="pi")}


def scores(names, configs: dict, seeds=(1, 2, 3), **common):
    """Fit every configuration (fit keyword arguments, with ``common``) on each case and seed and print a line per
    case and seed; yield {label: (ISE arm 1, ISE arm 0)} per line."""
    for name in names:
        for seed in seeds:
            problem = Problem(get_case(name), 1000, seed, 100)
            row = {}
            for label, kwargs in configs.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = ccme.fit(problem.formula, problem.data, seed=seed, **common, **kwargs)
                s = problem.score(res)
                row[label] = (s[1], s[0])
            print(name, seed, " | ".join(f"{label}: {a:.4f}/{b:.4f}" for label, (a, b) in row.items()), flush=True)
            yield row


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"$ python benchmarks/accuracy/neural_gap_modes.py {' '.join(argv)}")
    print("ISE arm 1 / arm 0 per configuration")
    for _ in scores(argv[0].split(","), CONFIGS):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
