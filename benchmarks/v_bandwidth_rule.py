"""The shared V kernel's rule on the accuracy zoo: one search per arm (smallest bandwidth kept) against the summed one.

``ccme.tuning.PER_ARM_V_SEARCH_ARMS`` = 2 (the default: per-arm searches for
every treatment) against 3 (binary treatments searched on the arms' summed
criterion, the rule before), through :mod:`benchmarks.tuning_rule` (ridge DR
with ``fit``'s defaults; the ratio of the mean ISE per case and arm)::

    python benchmarks/v_bandwidth_rule.py --split choose --seeds 1,2,3 --eval-points 150
    python benchmarks/v_bandwidth_rule.py --cases linear_v1,hetero_v2 --seeds 1,2,3 --eval-points 150

Output: benchmarks/results/v_bandwidth_rule_<tag>.txt (the CSVs beside it,
``_3`` and ``_2``, resumable).  The choice was made on the "choose" split and
reported on the "report" split (README, "Automatic tuning").
"""

from __future__ import annotations

import sys

from tuning_rule import main as run_rule


def main(argv=None) -> int:
    return run_rule(["--setting", "ccme.tuning.PER_ARM_V_SEARCH_ARMS=3,2", "--stem", "v_bandwidth_rule",
                     *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
