"""Shared torch machinery of the neural CCME estimators: options, networks, the training loop.

torch is an optional dependency (``pip install "ccme[neural]"``); it is
imported here lazily, inside the functions, so that the rest of ccme imports
and works without it.  :func:`require_torch` is the one gate.

Training (both stages of both neural estimators) minimises a full-batch or
mini-batch loss with Adam or SGD with momentum; with ``validation > 0`` a
random part of the stage's units is held out, its loss is computed after each
epoch, and training stops after ``patience`` epochs without improvement,
restoring the best weights.  Every random choice (initial weights, the
validation split, mini-batch order) comes from one ``torch.Generator`` per
stage derived from the fold's seed, and the CPU computations are
deterministic, so a fixed ``seed`` gives bit-identical fits on repeated CPU
runs.
"""

from __future__ import annotations

from abc import abstractmethod

import copy
import numbers
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import CcmeError, ParameterError
from ..fences import far_out_fences
from ..pseudo import pseudo_outcome
from .base import FoldFit, Estimator, Parameters, Tuned, linear_terms

__all__ = [
    "MissingDependencyError",
    "require_torch",
    "NEURAL_DEFAULTS",
    "TrainingSettings",
    "resolve_training",
    "StageHistory",
    "make_mlp",
    "input_scale",
    "train_stage",
    "stage_generator",
    "paper_options",
    "describe_training",
    "NeuralEstimator",
    "NeuralFold",
    "stage_histories",
]


class MissingDependencyError(CcmeError, ImportError):
    """An optional dependency (torch) is needed and not installed."""


def require_torch():
    """Import and return torch, or raise :class:`MissingDependencyError` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise MissingDependencyError(
            'the neural estimators ("deep_feature", "neural_kernel") need PyTorch; '
            'install it with  pip install "ccme[neural]"  (or choose method="ridge")'
        ) from None
    return torch


#: Training hyperparameters shared by both neural estimators (each estimator
#: adds its own, see :mod:`ccme.estimators.deep_feature` and
#: :mod:`ccme.estimators.neural_kernel`).  A pair means (stage 1, stage 2).
#: The defaults are cheap on a CPU: Adam with early stopping on a 20 %
#: validation split; ``paper_options`` gives the paper's configuration.
NEURAL_DEFAULTS = {
    "hidden": (20, 20),        # hidden layer widths (ReLU), the paper's 2 x 20
    "optimizer": "adam",       # "adam" or "sgd" (with momentum)
    "lr": 1e-2,                # learning rate, one value or (stage 1, stage 2)
    "weight_decay": 0.0,       # decoupled weight decay (each step shrinks by 1 - lr * decay), one value or a pair
    "momentum": 0.9,           # SGD only
    "epochs": (1000, 500),     # maximum epochs (stage 1, stage 2)
    "batch_size": None,        # None: full batch
    "validation": 0.2,         # held-out fraction for early stopping (0: none)
    "patience": 50,            # epochs without validation improvement before stopping
    "standardize": True,       # centre and scale network inputs (training units' mean, sd)
    "device": "auto",          # "auto" (cuda when torch sees one), "cpu", "cuda", ...
    "dtype": "float64",        # or "float32"
    "progress": None,          # tqdm bar: None shows it on a terminal only; True/False force it
}


def _pair(value, name, check):
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ParameterError(f"`{name}` must be one value or a pair (stage 1, stage 2); got {value!r}")
        return (check(value[0], name), check(value[1], name))
    v = check(value, name)
    return (v, v)


def _positive_float(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and np.isfinite(value)):
        raise ParameterError(f"`{name}` must be a positive number; got {value!r}")
    return float(value)


def _nonnegative_float(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value >= 0 and np.isfinite(value)):
        raise ParameterError(f"`{name}` must be a non-negative number; got {value!r}")
    return float(value)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ParameterError(f"`{name}` must be a positive integer; got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TrainingSettings:
    """Validated training hyperparameters (see ``NEURAL_DEFAULTS``)."""

    hidden: tuple
    optimizer: str
    lr: tuple
    momentum: float
    epochs: tuple
    batch_size: int | None
    validation: float
    patience: int | None
    standardize: bool
    device: str
    dtype: str
    progress: bool | None
    weight_decay: tuple = (0.0, 0.0)


def resolve_training(options: dict) -> TrainingSettings:
    """Check the shared training options; raise ParameterError naming a bad one."""
    hidden = options["hidden"]
    if isinstance(hidden, numbers.Integral) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if not isinstance(hidden, (tuple, list)):
        raise ParameterError(f"`hidden` must be a tuple of layer widths; got {hidden!r}")
    hidden = tuple(_positive_int(h, "hidden") for h in hidden)
    optimizer = options["optimizer"]
    if optimizer not in ("adam", "sgd"):
        raise ParameterError(f"`optimizer` must be 'adam' or 'sgd'; got {optimizer!r}")
    momentum = options["momentum"]
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not 0 <= momentum < 1:
        raise ParameterError(f"`momentum` must be a number in [0, 1); got {momentum!r}")
    batch = options["batch_size"]
    if batch is not None:
        batch = _positive_int(batch, "batch_size")
    validation = options["validation"]
    if isinstance(validation, bool) or not isinstance(validation, numbers.Real) or not 0 <= validation < 0.9:
        raise ParameterError(f"`validation` must be a fraction in [0, 0.9); got {validation!r}")
    patience = options["patience"]
    if patience is not None:
        patience = _positive_int(patience, "patience")
    dtype = options["dtype"]
    if dtype not in ("float64", "float32"):
        raise ParameterError(f"`dtype` must be 'float64' or 'float32'; got {dtype!r}")
    device = options["device"]
    if not isinstance(device, str):
        raise ParameterError(f"`device` must be a string such as 'auto', 'cpu' or 'cuda'; got {device!r}")
    progress = options["progress"]
    if progress not in (None, True, False):
        raise ParameterError(f"`progress` must be None, True or False; got {progress!r}")
    return TrainingSettings(
        hidden=hidden, optimizer=optimizer, lr=_pair(options["lr"], "lr", _positive_float),
        momentum=float(momentum), epochs=_pair(options["epochs"], "epochs", _positive_int), batch_size=batch,
        validation=float(validation), patience=patience, standardize=bool(options["standardize"]),
        device=device, dtype=dtype, progress=progress,
        weight_decay=_pair(options["weight_decay"], "weight_decay", _nonnegative_float),
    )


def torch_device(settings: TrainingSettings):
    torch = require_torch()
    name = settings.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise ParameterError(f"`device` {settings.device!r} is not a torch device: {exc}") from None


def torch_dtype(settings: TrainingSettings):
    torch = require_torch()
    return torch.float64 if settings.dtype == "float64" else torch.float32


#: The training histories' stages, by name: a split second stage (Neural-Kernel's doubly robust one) trains its
#: correction's network as stage 3.
STAGE_NAMES = {1: "stage 1", 2: "stage 2", 3: "stage 2, correction"}


def stage_generator(seed: int, arm: int, stage: int):
    """The CPU generator of one fold, arm and stage, derived from the fold's seed."""
    torch = require_torch()
    entropy = np.random.SeedSequence([int(seed), int(arm), int(stage)]).generate_state(1, dtype=np.uint64)[0]
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(entropy) & ((1 << 63) - 1))
    return gen


class Standardizer:
    """Affine input map (clip(x) − mean) / scale fitted on the training units (identity when switched off).

    The scale is each column's standard deviation, or the per-column
    ``scale`` given: the bandwidths of an input kernel
    (:mod:`ccme.estimators.input_relevance`), inf for a dropped column, which
    then enters as 0.  With ``far_out`` each column is first clipped at the
    training values' far-out fences (:func:`ccme.fences.far_out_fences`; no
    clipping where they do not cut), the same bounds for every later input,
    so that a far-out covariate value enters a network at the fence rather
    than hundreds of scales out, where the ReLU layers would carry it on
    linearly (:mod:`ccme.fences`); the mean and the sd are then the clipped
    values'.
    """

    def __init__(self, Z: np.ndarray, enabled: bool, scale=None, far_out: bool = False):
        Z = np.asarray(Z, dtype=np.float64)
        self.low, self.high = np.full(Z.shape[1], -np.inf), np.full(Z.shape[1], np.inf)
        if enabled and len(Z) > 1:
            if far_out:
                self.low, self.high = far_out_fences(Z)
                Z = self.clip(Z)
            self.mean = Z.mean(axis=0)
            if scale is not None:
                self.sd = np.array(scale, dtype=np.float64)
            else:
                sd = Z.std(axis=0)
                self.sd = np.where(sd > 0, sd, 1.0)
        else:
            self.mean = np.zeros(Z.shape[1])
            self.sd = np.ones(Z.shape[1])

    def clip(self, Z: np.ndarray) -> np.ndarray:
        """``Z`` with each column clipped at the fences (unchanged without them)."""
        return np.clip(np.asarray(Z, dtype=np.float64), self.low, self.high)

    def __call__(self, Z: np.ndarray) -> np.ndarray:
        return (self.clip(Z) - self.mean) / self.sd


def make_mlp(d_in: int, hidden: tuple, d_out: int, generator, dtype, device):
    """A ReLU perceptron d_in → hidden… → d_out, initialised from ``generator``.

    Weights and biases are drawn U(−1/√fan_in, 1/√fan_in) (torch's and
    Equinox's default for linear layers) from the given generator, so that
    the initialisation does not touch torch's global random state.
    """
    torch = require_torch()
    dims = (d_in, *hidden, d_out)
    layers = []
    for i in range(len(dims) - 1):
        linear = torch.nn.Linear(dims[i], dims[i + 1], dtype=dtype)
        bound = 1.0 / np.sqrt(dims[i])
        with torch.no_grad():
            linear.weight.copy_(torch.empty(dims[i + 1], dims[i], dtype=dtype).uniform_(-bound, bound, generator=generator))
            linear.bias.copy_(torch.empty(dims[i + 1], dtype=dtype).uniform_(-bound, bound, generator=generator))
        layers.append(linear)
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


@dataclass
class StageHistory:
    """Loss per epoch of one training stage (``validation`` empty without a validation split)."""

    train: list = field(default_factory=list)
    validation: list = field(default_factory=list)
    best_epoch: int = 0
    stopped_early: bool = False
    seconds: float = 0.0


def split_units(n: int, settings: TrainingSettings, generator):
    """Training and validation positions (sorted) among ``n`` units; no split when ``validation`` is 0."""
    torch = require_torch()
    n_val = int(round(settings.validation * n))
    if n_val < 1 or n - n_val < 2:
        return np.arange(n), None
    perm = torch.randperm(n, generator=generator).numpy()
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


#: Adam's ε (torch's default), in units of the loss (:func:`train_stage`'s ``loss_unit``).
ADAM_EPS = 1e-8


def train_stage(model, loss_fn, n_train: int, settings: TrainingSettings, stage: int, generator, *,
                val_loss_fn=None, label: str = "", n_threads: int = 0, loss_unit: float = 1.0) -> StageHistory:
    """Minimise ``loss_fn(batch)`` over ``model``'s parameters; returns the loss curve.

    Parameters
    ----------
    model : torch.nn.Module
    loss_fn : callable(batch) -> scalar tensor
        ``batch`` is a LongTensor of positions among the ``n_train`` training
        units, or ``None`` for the full batch.
    n_train : int
    settings : TrainingSettings
    stage : {1, 2}
        Picks the stage's learning rate and epochs.
    generator : torch.Generator
        Mini-batch order.
    n_threads : int
        torch's intra-op threads while training (restored afterwards); 0
        means one: the per-epoch matrices (M × M, n × M) are too small for
        more threads to pay, and on a busy machine extra threads slow
        training several-fold.
    val_loss_fn : callable() -> scalar tensor, optional
        Held-out loss; with it training stops after ``patience`` epochs
        without improvement and restores the best weights.
    loss_unit : float, default 1.0
        The loss's scale; Adam's ε is :data:`ADAM_EPS` times it.  Adam's
        step m/(√v + ε) does not change when the loss is multiplied by a
        constant, except through ε; the estimators' losses are squared norms
        in the normalised outcome kernel's RKHS, proportional to k_Y(0)
        (1/σ_y^d for a Gaussian), which they pass here, so that training,
        and with it the fit, does not depend on the outcome's units (with a
        fixed ε, Y in thousands instead of units changed a Neural-Kernel
        density by 11%, Y times 10⁵ by 33%).  SGD's step is proportional to
        the loss's scale: its learning rate is in the loss's units (as the
        paper's configuration, :func:`paper_options`, sets it).
    """
    torch = require_torch()
    lr, epochs = settings.lr[stage - 1], settings.epochs[stage - 1]
    decay = settings.weight_decay[stage - 1]
    params = list(model.parameters())
    # Weight decay is decoupled (Loshchilov & Hutter 2019): every step shrinks each parameter by the factor
    # 1 − lr·decay, apart from the loss's gradient; an L2 term in the loss would be rescaled by Adam's step sizes
    # and amplified by SGD's momentum, so one value would mean different amounts of shrinkage.
    if settings.optimizer == "adam":
        eps = ADAM_EPS * loss_unit
        opt = (torch.optim.AdamW(params, lr=lr, weight_decay=decay, eps=eps) if decay > 0
               else torch.optim.Adam(params, lr=lr, eps=eps))
        shrink = None
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=settings.momentum)
        shrink = 1.0 - lr * decay if decay > 0 else None

    def step():
        if shrink is not None:
            with torch.no_grad():
                for p in params:
                    p.mul_(shrink)
        opt.step()

    batch = settings.batch_size if settings.batch_size is not None and settings.batch_size < n_train else None
    history = StageHistory()
    best, best_state, waited = np.inf, None, 0
    started = time.perf_counter()
    bar = _progress(epochs, settings, f"{label}stage {stage}")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(n_threads if n_threads > 0 else 1)
    try:
        for epoch in range(epochs):
            if batch is None:
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(None)
                loss.backward()
                step()
                epoch_loss = float(loss.detach())
            else:
                order = torch.randperm(n_train, generator=generator)
                total = 0.0
                for start in range(0, n_train, batch):
                    rows = order[start:start + batch]
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(rows)
                    loss.backward()
                    step()
                    total += float(loss.detach()) * len(rows)
                epoch_loss = total / n_train
            history.train.append(epoch_loss)
            if not np.isfinite(epoch_loss):
                raise _diverged(stage, epoch, label)
            if val_loss_fn is not None:
                with torch.no_grad():
                    value = float(val_loss_fn())
                history.validation.append(value)
                if value < best:
                    best, waited, history.best_epoch = value, 0, epoch
                    best_state = copy.deepcopy(model.state_dict())
                else:
                    waited += 1
                    if settings.patience is not None and waited >= settings.patience:
                        history.stopped_early = True
                        break
            else:
                history.best_epoch = epoch
            if bar is not None:
                bar.update(1)
                if epoch % 20 == 0:
                    bar.set_postfix(loss=f"{epoch_loss:.5g}")
    finally:
        torch.set_num_threads(threads_before)
        if bar is not None:
            bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    history.seconds = time.perf_counter() - started
    return history


def _diverged(stage, epoch, label):
    from ..errors import NumericalError

    return NumericalError(
        f"{label}stage {stage} training diverged (loss not finite at epoch {epoch + 1}); "
        "lower the learning rate `lr`"
    )


def _progress(total, settings, desc):
    if settings.progress is False:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, leave=False, disable=None if settings.progress is None else False)


def paper_options(method: str, n: int) -> dict:
    """The paper's configuration (Appendix "Experimental Details", Table exp1_config) at sample size ``n``.

    M = 20, two hidden layers of 20 ReLU units, SGD with momentum 0.9, full
    batch, learning rate κ·n/200 (κ = 2e-4 for Deep Feature, 4e-4 for
    Neural-Kernel), epochs (6000, 1000) and (16000, 500), outcome bandwidth
    2, λ₀ = λ₁ = 20 added unscaled (ΨᵀΨ + λI, as the paper's reference code
    does), no input standardisation, no validation split, no weight decay,
    and Neural-Kernel read out over its grid points (``atoms="grid"``).  The
    reference code also clips the propensity at [0.1, 0.9]: pass ``clip=0.1`` to
    :func:`ccme.fit` for the same.

    The Deep Feature loss here uses the normalised outcome kernel, the
    reference code the unnormalised one (larger by √(2π)σ for d_y = 1); SGD
    with momentum is linear in (learning rate × gradient), so the learning
    rate is multiplied by that factor, which gives the reference trajectory.
    """
    n = _positive_int(n, "n")
    common = {
        "M": 20, "hidden": (20, 20), "optimizer": "sgd", "momentum": 0.9, "batch_size": None,
        "validation": 0.0, "patience": None, "standardize": False, "y_kernel": "gaussian", "y_bandwidth": 2.0,
        "weight_decay": 0.0,
    }
    if method == "deep_feature":
        kappa = 2e-4 * np.sqrt(2 * np.pi) * 2.0
        return {**common, "lr": kappa * n / 200, "epochs": (6000, 1000), "lam": 20.0, "lam_scaling": "none"}
    if method == "neural_kernel":
        return {**common, "lr": 4e-4 * n / 200, "epochs": (16000, 500), "grid": "regular", "atoms": "grid"}
    raise ParameterError(f"`method` must be 'deep_feature' or 'neural_kernel'; got {method!r}")


def describe_training(settings: TrainingSettings, input_kernels=None) -> list:
    """Summary rows for the training configuration (``input_kernels``: the learned input scales, by role)."""
    opt = "Adam" if settings.optimizer == "adam" else f"SGD, momentum {settings.momentum:g}"
    lr = settings.lr
    lr_text = f"{lr[0]:.3g}" if lr[0] == lr[1] else f"{lr[0]:.3g} (stage 1), {lr[1]:.3g} (stage 2)"
    decay = settings.weight_decay
    if any(decay):
        lr_text += ", weight decay " + (f"{decay[0]:.3g}" if decay[0] == decay[1]
                                        else f"{decay[0]:.3g} (stage 1), {decay[1]:.3g} (stage 2)")
    stop = (
        f"{settings.validation:.0%} validation, patience {settings.patience}"
        if settings.validation > 0 and settings.patience is not None
        else (f"{settings.validation:.0%} validation (best epoch kept)" if settings.validation > 0 else "none")
    )
    return [
        ("Network", f"{len(settings.hidden)} hidden layer(s) of {', '.join(map(str, settings.hidden))} ReLU units"
                    + (f"; inputs in units of the learned bandwidths ({', '.join(r.upper() for r in input_kernels)})"
                       if input_kernels else "; inputs standardised" if settings.standardize else "")),
        ("Optimizer", f"{opt}, learning rate {lr_text}"),
        ("Epochs", f"up to {settings.epochs[0]} (stage 1), {settings.epochs[1]} (stage 2); "
                   + ("full batch" if settings.batch_size is None else f"batches of {settings.batch_size}")),
        ("Early stopping", stop),
        ("Device", f"{settings.device}, {settings.dtype}"),
    ]


class NeuralFold(FoldFit):
    """One cross-fitting fold of a neural estimator: ``arm(a)`` trains that arm's networks.

    :class:`ccme.Embedding` calls ``arm`` once per arm, on the arm's first
    use, so a user who only asks about Y¹ trains only its networks.  Arms the
    tuning already trained on this fold with the chosen values
    (:class:`ccme.estimators.base.Tuned`) are passed as ``prebuilt``.
    """

    def __init__(self, build, prebuilt=None, **data):
        self._build = build
        self._data = data
        self._prebuilt = dict(prebuilt or {})

    def arm(self, arm: int):
        if arm in self._prebuilt:
            return self._prebuilt[arm]
        return self._build(arm=arm, **self._data)


#: Cross-fitting repetitions a neural fit runs by default (``fit(n_rep=None)``; :attr:`NeuralEstimator.default_n_rep`).
#: Each repetition is a new split and new network initialisations, and the estimate averages them, which removes
#: part of the variance the paper attributes to initialisation and stochastic optimisation ("Results": the
#: Neural-Kernel estimator has the highest variance).  3 against 1 on the accuracy zoo (n ≤ 1000, seeds 1 and 2,
#: ``python benchmarks/tuning_rule.py --setting ccme.estimators.training.NEURAL_N_REP=1,3 --config deep_feature
#: --split choose --seeds 1,2 --quick --eval-points 100 --stem neural_n_rep_deep_feature``, and ``neural_kernel``;
#: ``benchmarks/results/neural_n_rep_*.txt``): ISE ratio (geometric mean over case-arms) for Deep Feature 0.938 on
#: the "choose" cases (12 of 14 better, 1 worse) and 0.923 on the "report" cases (17 of 24 better, 6 worse), for
#: Neural-Kernel 0.917 (11 better, 2 worse) and 0.902 (19 better, 4 worse); fit time 1.8 times (Deep Feature) and
#: 2.8-3 times (Neural-Kernel, whose fits are short), as the tuning runs once.  5 against 3 for Neural-Kernel
#: (``--setting ...NEURAL_N_REP=3,5 --stem nk_n_rep5``): 0.953 on both splits (32 of 38 case-arms better, 2 worse)
#: for 1.9-2.2 times the time again; kept at 3 so that the estimator chosen for speed stays fast (``n_rep=5`` sets it).
#: 3 against 1 rerun with the networks' inputs in units of the learned bandwidths (aaaa341, ``--stem
#: neural_n_rep_<method>_s28``): Deep Feature 0.956 / 0.939, Neural-Kernel 0.873 / 0.892 on "choose" / "report".
#: 5 against 3 for Neural-Kernel rerun at eb5397a (``--setting ...NEURAL_N_REP=3,5 --stem nk_n_rep5_now``, n = 1000,
#: baseline rows reused): "choose" seeds 1-4 0.959 (per case-seed 0.958, 95% interval 0.936 to 0.981; 12 of 16
#: case-arms better, 4 worse), "report" seeds 1-2 0.975 (0.983, 0.964 to 1.003; 20 of 30 better, 6 worse), for
#: two more cross-fits (6 instead of 4 with the location comparison): still left at 3 for speed.
NEURAL_N_REP = 3

#: ``fit(location="default")`` of a neural estimator is "auto" (the fits with and without a location stage, the
#: better by the read-out criterion: :mod:`ccme.location`) from this many covariates in V on, so always; the ridge's
#: threshold is :data:`ccme.location.MANY_V_COVARIATES` (10).  A network learns a shift of the law with V less well
#: than the ridge's kernel in V does (``linear_v1``, Neural-Kernel: 0.0101 / 0.0065 plain, 0.0035 / 0.0025 "auto").
#: Chosen on the zoo's "choose" split, n = 1000, seeds 1-2 (``python benchmarks/tuning_rule.py --setting
#: ccme.estimators.training.NEURAL_LOCATION_FROM=10,1 --config neural_kernel --split choose --seeds 1,2 --n 1000
#: --eval-points 100 --parallel --stem neural_location_from_neural_kernel``, and ``deep_feature``;
#: ``benchmarks/results/neural_location_from_*``): Neural-Kernel 0.787 of the plain fits' ISE (7 of 16 case-arms
#: better, 3 worse: mixture_v3 1.33 / 1.08), Deep Feature 0.810 (7 better, 1 worse).  Reported on "report":
#: Neural-Kernel 0.896 (10 of 30 better, 3 worse, none by more than 13%), Deep Feature 0.929 (5 better, 3 worse:
#: nhefs_education's control arm 1.24, hetero_v2's treated arm 1.17); 1.2-1.4 times the fit time.  Before the
#: read-out's floor (:data:`ccme.tuning.READOUT_ATOM_FLOOR`) Neural-Kernel's nhefs_education control arm lost 2.5
#: times.
NEURAL_LOCATION_FROM = 1


class NeuralEstimator(Estimator):
    """What both neural estimators share: tuning by validation loss, and ``fit_fold`` over ``build_arm``."""

    @property
    def default_n_rep(self) -> int:
        """Repetitions of the cross-fit ``fit(n_rep=None)`` averages: :data:`NEURAL_N_REP`."""
        return NEURAL_N_REP

    def fit_alternatives(self, params, grids):
        """The weight decays of ``grids["weight_decay_fits"]`` (:data:`ccme.tuning.NEURAL_KERNEL_DECAY_FITS`), if any.

        Each value sets both stages' decay; the fit already made (the
        default's) is the reference of :func:`ccme.fit_choice.choose_fit`.
        """
        values = grids.get("weight_decay_fits")
        if not values:
            return None
        settings = params["training"]
        current = float(settings.weight_decay[0])
        others = {float(w): Parameters({**params, "training": replace(settings, weight_decay=(float(w), float(w)))})
                  for w in values if float(w) != current}
        return ("weight_decay", current, others) if others else None

    @property
    def location_from(self) -> int:
        """``fit(location="default")`` is "auto" from this many covariates in V on: :data:`NEURAL_LOCATION_FROM`."""
        return NEURAL_LOCATION_FROM

    @staticmethod
    @abstractmethod
    def build_arm(**kwargs):
        """Train and return one fold-and-arm estimator (each neural estimator sets its builder)."""

    def tune(self, params, *, data, folds, grids: dict, seeds, auto: bool) -> Tuned:
        """Validation-loss selection on the first fold (:func:`ccme.estimators.neural_tuning.tune_neural`).

        The first fold's arms, trained with the chosen values and that fold's
        seed, are returned as prebuilt: the cross-fitting keeps them.
        """
        from .input_relevance import learn_input_relevance, relevance_grids
        from .neural_tuning import tune_neural

        asked, grids = relevance_grids(grids)
        report = None
        if asked and not params["training"].standardize:
            if not auto:
                raise ParameterError("`tune` asks for the inputs' relevance, which scales the standardised inputs; "
                                     "`standardize` is False")
        elif asked:
            # First, so that every network the tuning below trains already sees the learned input scales.
            params, report = learn_input_relevance(params, data=data, folds=folds, asked=asked, seed=int(seeds[0]))
        fold = folds[0]
        chosen, report, arms = tune_neural(
            self, mode=data.mode, design=data.design, Xo=data.Xo, fold=fold,
            scores_target=data.scores[fold.target], prepared=params, grids=grids, seed=int(seeds[0]), auto=auto,
            n_threads=data.n_threads, report=report,
        )
        prebuilt = {(fold.index, arm): est for arm, est in (arms or {}).items()}
        return Tuned(Parameters(chosen), report, prebuilt)

    def training_history(self, embeddings, n_folds: int):
        """Loss per epoch of every arm, repetition, fold and stage ({arm: Embedding}); trains arms not yet used."""
        import pandas as pd

        rows = []
        for arm in embeddings:
            for i, part in enumerate(embeddings[arm].parts):
                for stage, h in sorted(stage_histories(part).items()):
                    for epoch, loss in enumerate(h.train):
                        rows.append({
                            "arm": arm, "repetition": i // n_folds + 1, "fold": i % n_folds + 1, "stage": stage,
                            "epoch": epoch + 1, "train_loss": loss,
                            "validation_loss": h.validation[epoch] if epoch < len(h.validation) else np.nan,
                            "best": epoch == h.best_epoch,
                        })
        return pd.DataFrame(rows)

    def fit_fold(self, params, *, data, fold, seed: int, prebuilt=None) -> NeuralFold:
        design = data.design
        return NeuralFold(
            type(self).build_arm, prebuilt=prebuilt, mode=data.mode, V=design.V, Xo=data.Xo, Y=design.Y,
            A=design.A, target=fold.target, nuisance=fold.nuisance, scores_target=data.scores[fold.target],
            prepared=params, seed=seed, fold_index=fold.index, n_threads=data.n_threads,
        )


def stage_histories(part) -> dict:
    """Stage → :class:`StageHistory` of a neural fold-arm (a split second stage's terms share their networks)."""
    return linear_terms(part)[0].history


def pseudo_outcome_coefficients(mode: str, arm: int, A: np.ndarray, target: np.ndarray, scores_target: np.ndarray):
    """(a, b) of ξ_i = a_i φ(Y_i) + b_i μ̂₀(X_i) on the second-stage units, from :mod:`ccme.pseudo`."""
    pseudo = pseudo_outcome(mode, arm, A=A, target=target, scores_target=scores_target)
    return pseudo.a, pseudo.b


def input_scale(prepared, role: str):
    """The per-column scales of the networks on ``role``'s inputs ("x" or "v"): the bandwidths of the input kernel
    learned for them (:mod:`ccme.estimators.input_relevance`), or None (standardised by the sd)."""
    kernel = prepared.get("input_kernels", {}).get(role)
    return None if kernel is None else kernel.bandwidth_array


def network_outputs(net, standardizer: Standardizer, Z: np.ndarray, dtype, device) -> np.ndarray:
    """The network at the rows of ``Z`` (inputs standardised), as float64 numpy."""
    torch = require_torch()
    with torch.no_grad():
        out = net(torch.as_tensor(standardizer(Z), dtype=dtype, device=device))
    return out.detach().to("cpu", torch.float64).numpy()


def network_to_arrays(net, standardizer: Standardizer, dtype, device) -> dict:
    """A trained network and its input map as plain arrays and strings, for :mod:`ccme.io`.

    The layers' weights and biases (``net.state_dict()`` as numpy arrays of
    the network's dtype), the standardiser's mean, sd and fences, the dtype's and the
    device's names; :func:`network_from_arrays` rebuilds the network from the
    layer shapes.
    """
    layers = {name: t.detach().to("cpu").numpy().copy() for name, t in net.state_dict().items()}
    return {"layers": layers, "mean": standardizer.mean, "sd": standardizer.sd, "low": standardizer.low,
            "high": standardizer.high, "dtype": str(dtype).removeprefix("torch."), "device": str(device)}


def network_from_arrays(state: dict):
    """Inverse of :func:`network_to_arrays`: (net, standardizer, dtype, device).

    The perceptron of :func:`make_mlp` is rebuilt from the layer shapes and
    given the stored weights.  A network saved on a GPU is loaded on the CPU
    when torch sees no GPU here.
    """
    torch = require_torch()
    if state["dtype"] not in ("float64", "float32"):
        raise ParameterError(f"a stored network has dtype {state['dtype']!r}; expected 'float64' or 'float32'")
    dtype = getattr(torch, state["dtype"])
    device = torch.device(state["device"])
    if device.type != "cpu" and not (device.type == "cuda" and torch.cuda.is_available()):
        device = torch.device("cpu")
    layers = state["layers"]
    linear = sorted({int(name.split(".")[0]) for name in layers})
    dims = (layers[f"{linear[0]}.weight"].shape[1], *(layers[f"{i}.weight"].shape[0] for i in linear))
    net = make_mlp(dims[0], dims[1:-1], dims[-1], torch.Generator(device="cpu"), dtype, device)
    net.load_state_dict({name: torch.as_tensor(value, device=device) for name, value in layers.items()}, strict=True)
    standardizer = Standardizer.__new__(Standardizer)
    standardizer.mean, standardizer.sd = np.asarray(state["mean"]), np.asarray(state["sd"])
    # A network saved before the inputs' fences were kept: no clipping, as it was trained.
    standardizer.low = np.asarray(state.get("low", np.full(standardizer.mean.shape, -np.inf)))
    standardizer.high = np.asarray(state.get("high", np.full(standardizer.mean.shape, np.inf)))
    return net, standardizer, dtype, device
