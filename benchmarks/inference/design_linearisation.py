"""Does the multiplier bootstrap of the bias-reduced second stage see V's sampling?  A numpy twin (issue 12).

The bias-aware intervals are centred on iterated Tikhonov regularisation of
order m (:func:`ccme.bootstrap.iterated_tikhonov`),

    f_m(v) = β_m(v)ᵀ ξ,   β_m(v) = Σ_{j<m} (I − H)^j β(v),   β(v) = (K + nλI)⁻¹ k(V, v),   H = K (K + nλI)⁻¹,

and the bootstrap perturbs it by Σ_i β_m,i(v) g_i e_1,i with the order-1
(ridge) residuals e_1 = (I − H) ξ.  Given V that is the linear smoother's
noise.  Over repeated samples V varies too, and the estimator's spread then
also holds the design's share, Var(E[f_m(v) | V]).  The multiplier bootstrap
read as a weighted bootstrap (each unit's squared error weighted 1 + g_i in
every one of the m ridge fits) captures that share to first order: the
derivative of the weighted fit in the weights is

    u(v) = Σ_{l=1..m} [(I − H)^{m−l} β(v)] ⊙ e_l,   e_l = (I − H)^l ξ (the order-l residuals),

which differs from β_m(v) ⊙ e_1 only in the smoothing biases the residuals
carry.  This script draws a one-dimensional random-design regression (V
uniform on [−2, 2], m(v) = sin(2.5v) + v²/2, heteroscedastic noise) many
times and compares the Monte Carlo standard deviation of f_m(v) at three
points with the mean of three standard errors: (A) the package's, β_m ⊙ e_1;
(B) the weighted-bootstrap linearisation u; (C) the conditional truth,
β_m ⊙ σ(V)::

    python benchmarks/inference/design_linearisation.py --n 400 --h 0.4 --lam 1e-3
    python benchmarks/inference/design_linearisation.py --n 400 --h 0.8 --lam 3e-2
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

POINTS = np.array([0.0, 1.0, 1.8])


def regression(v):
    return np.sin(2.5 * v) + 0.5 * v**2


def one_sample(rng, n: int, order: int, h: float, lam: float):
    """(f_m at POINTS, and the standard errors A, B, C) for one random design."""
    V = rng.uniform(-2.0, 2.0, n)
    sigma = 0.5 + 0.5 * np.abs(V)
    xi = regression(V) + sigma * rng.standard_normal(n)
    gram = np.exp(-0.5 * (V[:, None] - V[None, :]) ** 2 / h**2)
    solve = np.linalg.inv(gram + n * lam * np.eye(n))
    residual_map = np.eye(n) - gram @ solve                       # I − H, symmetric
    beta = solve @ np.exp(-0.5 * (V[:, None] - POINTS[None, :]) ** 2 / h**2)
    powers_beta, residuals = [beta], [residual_map @ xi]          # (I − H)^j β; e_l = (I − H)^l ξ
    for _ in range(1, order):
        powers_beta.append(residual_map @ powers_beta[-1])
        residuals.append(residual_map @ residuals[-1])
    beta_m = sum(powers_beta)
    u = sum(powers_beta[order - l] * residuals[l - 1][:, None] for l in range(1, order + 1))

    def se(weights):
        return np.sqrt((weights**2).sum(axis=0))

    return beta_m.T @ xi, se(beta_m * residuals[0][:, None]), se(u), se(beta_m * sigma[:, None])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--order", type=int, default=20)
    parser.add_argument("--h", type=float, default=0.4, help="V bandwidth")
    parser.add_argument("--lam", type=float, default=1e-3, help="λ in K + nλI")
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    draws = [one_sample(rng, args.n, args.order, args.h, args.lam) for _ in range(args.reps)]
    estimate = np.array([d[0] for d in draws])
    spread = estimate.std(axis=0, ddof=1)
    print(f"n = {args.n}, order {args.order}, h = {args.h}, λ = {args.lam}, {args.reps} samples; v = {POINTS.tolist()}")
    print(f"{'bias':<36}" + "".join(f"{x:>9.4f}" for x in estimate.mean(axis=0) - regression(POINTS)))
    print(f"{'Monte Carlo sd':<36}" + "".join(f"{x:>9.4f}" for x in spread))
    for k, name in enumerate(("(A) β_m ⊙ e_1 (the package's)", "(B) weighted-bootstrap linearisation",
                              "(C) β_m ⊙ σ (conditional truth)"), start=1):
        mean_se = np.mean([d[k] for d in draws], axis=0)
        print(f"{name:<36}" + "".join(f"{x:>9.4f}" for x in mean_se) + "   sd / SE "
              + " ".join(f"{x:.3f}" for x in spread / mean_se))
    return 0


if __name__ == "__main__":
    sys.exit(main())
