#!/bin/bash
# README's "With every default" scale table (tuning, forest propensity, approx="auto"): the paper's simulation at
# n = 2e4 (exact and low-rank; 1000 x 400 and 10^4 x 10^3 evaluation points), 2e5 and 1e6, each in its own
# process, with GNU time's wall clock and peak resident memory.  About 12 minutes on 2 cores.
#   bash benchmarks/lowrank_scale.sh > benchmarks/results/lowrank_scale.txt
set -euo pipefail
cd "$(dirname "$0")/.."
echo "benchmarks/lowrank_scale.sh at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs," \
     "load average $(cut -d' ' -f1 /proc/loadavg) at the start"
run() {
    echo; echo "$ python benchmarks/paper_shape.py --tune auto $*"
    /usr/bin/time -v -o /tmp/lowrank_scale.time python benchmarks/paper_shape.py --tune auto "$@"
    grep -E "Elapsed|Maximum resident" /tmp/lowrank_scale.time
}
run --n 20000 --n-eval 10000 --n-grid 1000 --approx lowrank
run --n 20000 --n-eval 1000 --n-grid 400 --approx exact
run --n 20000 --n-eval 1000 --n-grid 400 --approx lowrank
run --n 200000 --n-eval 1000 --n-grid 400 --approx lowrank
run --n 1000000 --n-eval 1000 --n-grid 400 --approx lowrank
