"""Neural-Kernel's training options on named cases: the defaults against a longer patience, a smaller learning rate,
a smaller validation split and a weaker weight decay (n = 1000, seeds 1-3, the zoo's metric, 100 V-points).

A diagnosis of where a case's gap to the ridge comes from, not a choice of defaults (choose those on the zoo's
"choose" split with ``benchmarks/tuning_rule.py``).

    python benchmarks/accuracy/neural_gap_training.py through_w,large_n,inside_v
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ccme  # noqa: E402
from benchmarks.accuracy.run import Problem  # noqa: E402
from benchmarks.accuracy.zoo import get_case  # noqa: E402

CONFIGS = {"default": {}, "patience200": dict(patience=200, epochs=(3000, 1500)),
           "lr3e-3": dict(lr=3e-3, epochs=(3000, 1500)), "val0.1": dict(validation=0.1),
           "decay0.5": dict(weight_decay=0.5)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"$ python benchmarks/accuracy/neural_gap_training.py {' '.join(argv)}")
    print("Neural-Kernel DR, ISE arm 1 / arm 0 per training configuration")
    errors = {label: [] for label in CONFIGS}
    for name in argv[0].split(","):
        for seed in (1, 2, 3):
            problem = Problem(get_case(name), 1000, seed, 100)
            out = []
            for label, kwargs in CONFIGS.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = ccme.fit(problem.formula, problem.data, seed=seed, method="neural_kernel", **kwargs)
                s = problem.score(res)
                errors[label] += [s[1], s[0]]
                out.append(f"{label}: {s[1]:.4f}/{s[0]:.4f}")
            print(name, seed, " | ".join(out), flush=True)
    base = np.array(errors["default"])
    for label, values in errors.items():
        r = np.array(values) / base
        print(f"{label:12s} geometric mean ratio to the defaults {np.exp(np.mean(np.log(r))):.3f}; better by > 1% "
              f"{int(np.sum(r < 0.99))}, worse {int(np.sum(r > 1.01))} of {len(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
