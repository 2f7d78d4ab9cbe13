"""The paper's image experiment (Section "Semi-Synthetic MNIST Experiment", Figure "mnist") on 8×8 digits.

MNIST cannot be downloaded here, so the default data are scikit-learn's
bundled 8×8 digits (``sklearn.datasets.load_digits``: 1797 images, 64 pixels
scaled to [0, 1]).  With MNIST on disk, ``--mnist PATH`` runs the full-size
version (an ``.npz`` with ``x_train``/``y_train``, as keras ships it, or the
directory holding ``train-images-idx3-ubyte[.gz]`` and
``train-labels-idx1-ubyte[.gz]``).

The confounding design is the paper's: intensity I = mean pixel; an image is
denoised (A = 1, observed clean) with probability
π(I) = logistic(3 (I − q₀.₉(I)) / sd(I)); the others (A = 0) are observed with
N(0, 0.16·I) noise added.  (The paper's text says "for each treated image, we
add a random noise", but it defines A = 1 as "the image is clean" and targets
the clean distribution p¹; the noise therefore goes to the untreated images.)
V = digit label (categorical), X = (intensity, label), propensity by logistic
regression.  Three fits of p¹(y | v): the oracle one-step on the all-clean
data (every image treated: no selection), DR and one-step on the partially
cleaned data.  For each class v the "empirical mode" argmax over the clean
images of p̂¹(y | v) is drawn: rows oracle, DR, one-step; columns 0–9.

    python benchmarks/paper/digits.py                       # deep feature, 8×8 digits
    python benchmarks/paper/digits.py --method ridge        # kernel ridge instead
    python benchmarks/paper/digits.py --mnist ~/mnist.npz   # full MNIST (60000 × 784)
"""

from __future__ import annotations

import argparse
import gzip
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

import ccme

RESULTS = Path(__file__).resolve().parent / "results"


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_images(mnist=None):
    """Images as (n, d) floats in [0, 1], labels (n,), and the side length of the square image."""
    if mnist is None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.data / 16.0, digits.target.astype(int), 8
    path = Path(mnist).expanduser()
    if path.is_dir():
        def find(stem):
            for name in (stem, stem + ".gz"):
                if (path / name).exists():
                    return path / name
            raise FileNotFoundError(f"no {stem}[.gz] in {path}")

        x, y = _read_idx(find("train-images-idx3-ubyte")), _read_idx(find("train-labels-idx1-ubyte"))
    else:
        with np.load(path) as archive:
            x, y = archive["x_train"], archive["y_train"]
    x = x.reshape(len(x), -1).astype(float)
    side = int(round(np.sqrt(x.shape[1])))
    return x / 255.0, np.asarray(y).astype(int).ravel(), side


def confounded(images, labels, seed: int, noise_var: float = 0.16) -> pd.DataFrame:
    """The paper's design: A = 1 (clean) with π(I), untreated images get N(0, noise_var) noise."""
    rng = np.random.default_rng(seed)
    intensity = images.mean(axis=1)
    ps = expit(3.0 * (intensity - np.quantile(intensity, 0.9)) / intensity.std())
    a = rng.binomial(1, ps)
    observed = images + (a == 0)[:, None] * rng.normal(0.0, np.sqrt(noise_var), size=images.shape)
    return frame(observed, labels, intensity, a), ps


def frame(pixels, labels, intensity, a) -> pd.DataFrame:
    cols = {f"p{j}": pixels[:, j] for j in range(pixels.shape[1])}
    return pd.DataFrame({**cols, "a": a, "label": pd.Categorical(labels, categories=range(10)),
                         "intensity": intensity})


def formula(d: int) -> str:
    return " + ".join(f"p{j}" for j in range(d)) + " ~ a | label | intensity"


def options(method: str, n: int, d: int) -> dict:
    """The paper's Table "exp3_config" for the Deep Feature estimator, scaled to the data.

    M = 1000 random grid points (all the images when fewer), 2 × 100 ReLU,
    outcome bandwidth 1, λ₀ = λ₁ = 1, SGD with momentum 0.9, learning rates
    0.1 / 0.01, 100 epochs, batch 32, 20% validation with patience 10.  The
    other methods use ccme's defaults with ``tune="auto"`` and the paper's
    outcome bandwidth 1 (the per-pixel rule of thumb is undefined: border
    pixels are constant).
    """
    if method != "deep_feature":
        return {"tune": "auto", "y_bandwidth": 1.0}
    return {"tune": "none", "M": min(1000, n // 4), "hidden": (100, 100), "y_bandwidth": 1.0, "lam": 1.0,
            "lam_scaling": "none", "optimizer": "sgd", "momentum": 0.9, "lr": (0.1, 0.01), "epochs": (100, 100),
            "batch_size": 32, "validation": 0.2, "patience": 10}


def fit_three(images, labels, method: str, seed: int, threads: int):
    """The oracle one-step on clean data, and DR and one-step on the confounded data."""
    data, ps = confounded(images, labels, seed)
    n, d = images.shape
    f, opts = formula(d), options(method, n, d)
    intensity = images.mean(axis=1)
    # The oracle sees every image clean; treatment is a fair coin independent of
    # everything, so the one-step regression on the treated half has no selection.
    coin = np.random.default_rng(seed + 1).binomial(1, 0.5, size=n)
    clean = frame(images, labels, intensity, coin)
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ccme.CcmeWarning)
        for name, frame_, mode in (("Oracle", clean, "onestep"), ("DR", data, "dr"), ("One-Step", data, "onestep")):
            fits[name] = ccme.fit(f, frame_, method=method, mode=mode, propensity="logistic", seed=seed,
                                  n_threads=threads, **opts)
    return fits, data, ps


def empirical_modes(fits, images):
    """argmax over the clean images of p̂¹(y | v) for each class v: (fits, 10, d).

    The fits train their arms lazily, so the time printed here includes training.
    """
    classes = pd.DataFrame({"label": pd.Categorical(range(10), categories=range(10))})
    modes = {}
    for name, res in fits.items():
        t0 = time.perf_counter()
        modes[name] = res.density_mode(newdata=classes, arm=1, candidates=images)
        print(f"{name:9s} trained and searched in {time.perf_counter() - t0:.1f}s", flush=True)
    return modes


def figure(modes, side: int, out: Path, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(modes), 10, figsize=(7.5, 0.8 * len(modes) + 0.5))
    for r, (name, imgs) in enumerate(modes.items()):
        for v in range(10):
            ax = axes[r, v]
            ax.imshow(imgs[v].reshape(side, side), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if v == 0:
                ax.set_ylabel(name, fontsize=9)
            if r == 0:
                ax.set_title(str(v), fontsize=9)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="deep_feature", choices=["deep_feature", "ridge", "neural_kernel"])
    parser.add_argument("--mnist", help="MNIST .npz (x_train, y_train) or a directory with the idx files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    images, labels, side = load_images(args.mnist)
    started = time.perf_counter()
    fits, data, ps = fit_three(images, labels, args.method, args.seed, args.threads)
    modes = empirical_modes(fits, images)
    treated = data["a"].to_numpy() == 1
    intensity = images.mean(axis=1)
    print(f"n = {len(images)}, d_y = {images.shape[1]}, treated (clean) = {treated.sum()} "
          f"({treated.mean():.1%}); mean intensity: all {intensity.mean():.3f}, clean-observed "
          f"{intensity[treated].mean():.3f}, noisy-observed {intensity[~treated].mean():.3f}")
    print("mean intensity of the empirical modes (per class 0-9, and the mean):")
    for name, imgs in modes.items():
        per_class = imgs.mean(axis=1)
        print(f"  {name:9s} " + " ".join(f"{x:.3f}" for x in per_class) + f"   mean {per_class.mean():.3f}")
    print("class-mean intensity of all clean images: "
          + " ".join(f"{intensity[labels == v].mean():.3f}" for v in range(10)))
    for name in ("DR", "One-Step"):
        same = sum(np.array_equal(modes[name][v], modes["Oracle"][v]) for v in range(10))
        dist = np.mean([np.linalg.norm(modes[name][v] - modes["Oracle"][v]) for v in range(10)])
        print(f"  {name:9s} same image as the oracle for {same}/10 classes; mean L2 distance to the oracle's {dist:.2f}")
    stem = "digits" if args.mnist is None else "mnist"
    RESULTS.mkdir(parents=True, exist_ok=True)
    title = (f"Empirical modes, {args.method.replace('_', ' ')} ({'8×8 digits' if args.mnist is None else 'MNIST'}, "
             f"n = {len(images)}): oracle / DR / one-step")
    figure(modes, side, RESULTS / f"{stem}_{args.method}.png", title)
    print(f"total {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
