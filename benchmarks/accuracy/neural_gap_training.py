"""Neural-Kernel's training options on named cases: the defaults against a longer patience, a smaller learning rate,
a smaller validation split and a weaker weight decay (n = 1000, seeds 1-3, the zoo's metric, 100 V-points).

A diagnosis of where a case's gap to the ridge comes from, not a choice of defaults (choose those on the zoo's
"choose" split with ``benchmarks/tuning_rule.py``).

    python benchmarks/accuracy/neural_gap_training.py through_w,large_n,inside_v
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.accuracy.neural_gap_modes import scores  # noqa: E402

CONFIGS = {"default": {}, "patience200": dict(patience=200, epochs=(3000, 1500)),
           "lr3e-3": dict(lr=3e-3, epochs=(3000, 1500)), "val0.1": dict(validation=0.1),
           "decay0.5": dict(weight_decay=0.5)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(f"$ python benchmarks/accuracy/neural_gap_training.py {' '.join(argv)}")
    print("Neural-Kernel DR, ISE arm 1 / arm 0 per training configuration")
    errors = {label: [] for label in CONFIGS}
    for row in scores(argv[0].split(","), CONFIGS, method="neural_kernel"):
        for label, pair in row.items():
            errors[label] += list(pair)
    base = np.array(errors["default"])
    for label, values in errors.items():
        r = np.array(values) / base
        print(f"{label:12s} geometric mean ratio to the defaults {np.exp(np.mean(np.log(r))):.3f}; better by > 1% "
              f"{int(np.sum(r < 0.99))}, worse {int(np.sum(r > 1.01))} of {len(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
