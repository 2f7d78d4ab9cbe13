"""Neural-Kernel's weight decay chosen per fit by the read-out criterion: how much could it gain?

For each case and seed (n = 1000, the zoo's metric, 100 V-points) it fits Neural-Kernel with its defaults at each
weight decay (each fit making its own location choice), records each arm's ISE, its read-out criterion and the
paired difference of the criteria to the default decay's fit (:func:`ccme.location.criterion_difference`), and
prints what choosing by the criterion would give: each decay fixed, the lowest criterion, the rule of
``location="auto"`` (another value where its criterion is below the default's by more than one standard error)
over subsets of the decays, and the per-arm oracle (the truth's best).  Raw rows: one JSON line per case and seed.

    python benchmarks/accuracy/neural_decay_choice.py --cases mixture_v3,paper,... --seeds 1,2 \\
        --out benchmarks/accuracy/results/neural_decay_choice_choose_s12.jsonl
    python benchmarks/accuracy/neural_decay_choice.py --analyse results/neural_decay_choice_choose_*.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DEFAULT = "2.0"     # NEURAL_KERNEL_DEFAULTS["weight_decay"], the reference


def fit_decays(job) -> dict:
    """One case and seed at every decay: {"case", "seed", "fits": {decay: {ise, crit, diff, diff_all, sec}}}."""
    import ccme
    from benchmarks.accuracy.run import Problem
    from benchmarks.accuracy.zoo import get_case
    from ccme.location import criterion_difference, readout_criteria

    name, seed, decays = job
    problem = Problem(get_case(name), 1000, seed, 100)
    reports, out = {}, {"case": name, "seed": seed, "fits": {}}
    for w in decays:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ccme.fit(problem.formula, problem.data, seed=seed, method="neural_kernel", weight_decay=w)
        reports[w] = res.tuning
        out["fits"][str(w)] = {"ise": {str(a): float(v) for a, v in problem.score(res).items()},
                               "crit": {str(a): float(v) for a, v in readout_criteria(res.tuning).items()},
                               "sec": res.timing["total"]}
    for w in decays:
        fit = out["fits"][str(w)]
        fit["diff"] = {a: criterion_difference(reports[w], reports[float(DEFAULT)], arms=[int(a)]) for a in fit["crit"]}
        fit["diff_all"] = criterion_difference(reports[w], reports[float(DEFAULT)])
    return out


def _choice(fits, values, rule: str) -> str:
    if rule == "argmin":
        return min(values, key=lambda w: sum(fits[w]["crit"].values()))
    clear = [w for w in values if fits[w]["diff_all"][0] < -fits[w]["diff_all"][1]]
    return min(clear, key=lambda w: fits[w]["diff_all"][0]) if clear else DEFAULT


def analyse(rows: list) -> None:
    """Print the ratios to the default decay's ISE (geometric means over case-arms) of each way of choosing."""
    decays = sorted(set.intersection(*(set(r["fits"]) for r in rows)), key=float)   # those every row has

    def line(label, ratios):
        r = np.array(ratios)
        print(f"{label:30s} {np.exp(np.mean(np.log(r))):.3f}  better by > 1% {np.sum(r < 0.99):2d}, "
              f"worse {np.sum(r > 1.01):2d}, largest {r.max():.2f}")

    print(f"{len(rows)} case-seeds; ISE ratio to weight decay {DEFAULT} (geometric mean over case-arm-seeds)")
    for w in decays:
        line(f"fixed {w}", [r["fits"][w]["ise"][a] / r["fits"][DEFAULT]["ise"][a] for r in rows for a in "10"])
    line("oracle per arm", [min(r["fits"][w]["ise"][a] for w in decays) / r["fits"][DEFAULT]["ise"][a]
                            for r in rows for a in "10"])
    others = [w for w in decays if w != DEFAULT]
    for k in range(1, len(others) + 1):
        for subset in itertools.combinations(others, k):
            values = [DEFAULT, *subset]
            for rule in ("argmin", "1 se"):
                per_seed = [np.mean([np.log(r["fits"][_choice(r["fits"], values, rule)]["ise"][a]
                                            / r["fits"][DEFAULT]["ise"][a]) for a in "10"]) for r in rows]
                ratios = [r["fits"][_choice(r["fits"], values, rule)]["ise"][a] / r["fits"][DEFAULT]["ise"][a]
                          for r in rows for a in "10"]
                m, s = np.mean(per_seed), np.std(per_seed, ddof=1) / np.sqrt(len(per_seed))
                h = stats.t.ppf(0.975, len(per_seed) - 1) * s
                line(f"{'+'.join(values)} {rule}", ratios)
                print(f"{'':30s} per case-seed {np.exp(m):.3f}, 95% interval {np.exp(m - h):.3f} to "
                      f"{np.exp(m + h):.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--decays", default="0.5,1,2,4,8")
    parser.add_argument("--out")
    parser.add_argument("--analyse", nargs="*")
    args = parser.parse_args(argv)
    if args.analyse:
        analyse([json.loads(line) for path in args.analyse for line in open(path)])
        return 0
    decays = [float(w) for w in args.decays.split(",")]
    jobs = [(c, int(s), decays) for s in args.seeds.split(",") for c in args.cases.split(",")]
    with Pool(2) as pool, open(args.out, "a") as handle:
        for row in pool.imap_unordered(fit_decays, jobs):
            handle.write(json.dumps(row) + "\n")
            handle.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
