"""asv benchmarks of the neural CCME estimators (Deep Feature, Neural-Kernel), and the measuring script.

asv: fit time and integrated squared error (ISE against the exact density,
arm 1, 500 V-draws, 1000-point grid) of each method and mode at n = 2000 and
20000 on the paper's simulation, with the default options (Adam, early
stopping) and with the paper's configuration (``ccme.estimators.paper_options``:
SGD, the table's epochs and learning rates, propensity clipped at 0.1 as the
reference code does).  Training is lazy (an arm is trained on first use):
the timed step is ``fit`` plus arm 1's density, the paper's estimand
p(Y¹ | V).  ``device="cuda"`` runs are skipped where torch sees no GPU.

Script::

    python benchmarks/bench_neural.py --measure            # the table in tests/test_neural_fit.py
    python benchmarks/bench_neural.py --n 5000 --config paper --methods deep_feature --modes dr
"""

import argparse
import time
import warnings

import ccme
from ccme.datasets import paper_simulation_ise
from ccme.estimators import paper_options

FORMULA = "y ~ a | x1 + x2 + x3 + x4 + x5 | x6 + x7 + x8 + x9 + x10"
METHODS = ["deep_feature", "neural_kernel"]
MODES = ["dr", "ipw", "pi", "onestep"]


def fit_and_score(data, method, mode, config, seed=1, device="cpu"):
    """(seconds for fit + arm 1's first density, ISE of arm 1)."""
    n = len(data)
    options = dict(paper_options(method, n), clip=0.1) if config == "paper" else {}
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        res = ccme.fit(FORMULA, data, method=method, mode=mode, propensity="forest", seed=seed, progress=False,
                       device=device, **options)
        res.density(res.default_grid(10), newdata=ccme.datasets.PAPER_PROFILES, arm=1)   # trains arm 1
        seconds = time.perf_counter() - started
        return seconds, paper_simulation_ise(res, arm=1, n_test=500, seed=seed)


class NeuralFit:
    params = ([2000, 20000], METHODS, MODES, ["default", "paper"], ["cpu", "cuda"])
    param_names = ["n", "method", "mode", "config", "device"]
    timeout = 3600
    number = 1
    repeat = 1

    def setup(self, n, method, mode, config, device):
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise NotImplementedError("no GPU visible to torch")
        self.data = ccme.datasets.paper_simulation(n, seed=1)

    def time_fit(self, n, method, mode, config, device):
        fit_and_score(self.data, method, mode, config, device=device)

    def track_ise(self, n, method, mode, config, device):
        return fit_and_score(self.data, method, mode, config, device=device)[1]

    track_ise.unit = "ISE"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", action="store_true", help="DR and one-step ISE at n = 2000, seeds 1-3")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--config", default="default", choices=["default", "paper"])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.measure:
        args.n, args.seeds, args.modes, args.config = 2000, [1, 2, 3], ["dr", "onestep"], "default"
    for seed in args.seeds:
        data = ccme.datasets.paper_simulation(args.n, seed=seed)
        for method in args.methods:
            for mode in args.modes:
                seconds, ise = fit_and_score(data, method, mode, args.config, seed=seed, device=args.device)
                print(f"n={args.n} seed={seed} {args.config:7s} {method:13s} {mode:8s} "
                      f"ISE={ise:.5f} time={seconds:.1f}s", flush=True)


if __name__ == "__main__":
    main()
