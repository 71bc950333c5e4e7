"""A toy training run in emulated precision: what each piece of mixed precision buys.

The problem is noise-free linear regression, y = X w*, with the loss averaged over N samples:

    loss(w) = mean_i (x_i . w - y_i)^2          dloss/dpred_i = 2 r_i / N

The 1/N of a mean is what makes gradients small in real training (a loss averaged over many
tokens); here it puts the output gradients 2 r_i / N below fp16's normal range as soon as the
residuals shrink, so they turn subnormal and then flush to zero. Feature columns have scales
spread over `decades` decades, so gradients span many orders of magnitude and the problem is
mildly ill-conditioned (it needs a few hundred momentum steps). Features are drawn on the bf16
grid (and zeroed below fp16's min normal), so X is exact in every compute format.

One step, each tensor rounded to its format after every operation with precisionlab.round_to
(P = compute format: fp32, fp16 or bf16; matrix products are accumulated wide and rounded once,
as matrix cores accumulate in fp32):

    w_c    = round(w_master, P)                    (or w itself, kept in P, with no master copy)
    pred   = round(X_c @ w_c, P);  r = round(pred - y_c, P)
    loss   = round(mean(r^2), fp32)                (losses stay fp32, as under autocast)
    dpred  = round(r * (2 S / N), P)               (S = loss scale; exact when N is a power of two)
    grad   = round(X_c^T @ dpred, P)
    master: g = round(grad / S, fp32); overflow = any inf/NaN in grad -> skip the step, back off S
    clip:   g <- g * max_norm / ||g|| when ||g|| > max_norm   (after unscaling; the trap: before)
    SGD with momentum in the state format (fp32 with a master copy, else P):
            buf = round(round(mu * buf) + g);  w = round(w - round(lr * buf))

Variants without loss scaling have no overflow check (nothing to back off): every step is applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from precisionlab.rounding import round_to
from precisionlab.training.scaler import DynamicLossScaler, has_overflow

MIN_STALL_STEPS = 10
"""Runs shorter than this are never called stalled."""

MAX_VALUES = 1 << 25
"""Largest toy problem (samples × features): 2^22 samples of 8 features, 256 MiB in float64."""

MAX_STEPS = 100_000
"""Longest run (the default is 400 steps)."""


@dataclass(frozen=True)
class Problem:
    """Linear regression data: features (N, d), targets (N,), the exact solution w*."""

    features: np.ndarray
    targets: np.ndarray
    optimum: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.features.shape[0])


def make_problem(samples: int = 16384, features: int = 8, decades: float = 1.0, weight_scale: float = 1e-3,
                 seed: int = 0) -> Problem:
    """Column j of X has scale 10^(-decades * j / (d - 1)); w*_j = weight_scale * N(0, 1) / scale_j,
    so every feature contributes about weight_scale to y. X is rounded to bf16 and entries below
    fp16's min normal are zeroed, so X is exact in fp32, bf16 and fp16."""
    if samples < 2 or features < 1:
        raise ValueError("the toy problem needs at least 2 samples and 1 feature")
    if samples * features > MAX_VALUES:
        raise ValueError(f"the toy problem holds at most {MAX_VALUES} values (samples × features), "
                         f"got {samples} × {features}")
    rng = np.random.default_rng(seed)
    scales = 10.0 ** (-decades * np.arange(features) / max(features - 1, 1))
    raw = rng.standard_normal((samples, features)) * scales
    x = np.asarray(round_to(raw, "bf16"), dtype=np.float64)
    x[np.abs(x) < 2.0**-14] = 0.0
    w_star = weight_scale * rng.standard_normal(features) / scales
    return Problem(x, x @ w_star, w_star)


@dataclass(frozen=True)
class Variant:
    """One way to run the same training: formats, master copy, loss scaling and its pitfalls."""

    name: str
    compute: str
    master: bool
    loss_scaling: bool
    description: str
    clip_before_unscale: bool = False
    skip_on_overflow: bool = True
    high_init_scale: bool = False


VARIANTS = (
    Variant("fp32", "fp32", True, False, "fp32 everything (the reference)"),
    Variant("fp16_plain", "fp16", False, False, "fp16 weights, gradients and optimizer state; no master, no scaling"),
    Variant("fp16_master", "fp16", True, False, "fp16 compute, fp32 master weights and state; no loss scaling"),
    Variant("fp16_master_scaled", "fp16", True, True, "fp16 compute, fp32 master, dynamic loss scaling"),
    Variant("bf16_master", "bf16", True, False, "bf16 compute, fp32 master weights and state; no loss scaling"),
    Variant("bf16_plain", "bf16", False, False, "bf16 weights, gradients and optimizer state; no master copy"),
)

TRAPS = (
    Variant("clip_before_unscale", "fp16", True, True,
            "as fp16_master_scaled, but the gradient norm is clipped before unscaling", clip_before_unscale=True),
    Variant("high_scale_skip", "fp16", True, True,
            "as fp16_master_scaled, starting from a scale that overflows; overflowing steps skipped",
            high_init_scale=True),
    Variant("no_skip", "fp16", True, True,
            "as high_scale_skip, but overflowing steps are applied instead of skipped",
            skip_on_overflow=False, high_init_scale=True),
)


def get_variant(name: str) -> Variant:
    for variant in (*VARIANTS, *TRAPS):
        if variant.name == name:
            return variant
    names = ", ".join(v.name for v in (*VARIANTS, *TRAPS))
    raise ValueError(f"unknown training variant {name!r}; variants: {names}")


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer and scaler settings shared by every variant."""

    steps: int = 400
    lr: float = 0.5
    momentum: float = 0.9
    max_norm: float = 1.0
    init_scale: float = 2.0**16
    growth_interval: int = 100
    high_init_scale: float = 2.0**32
    target_ratio: float = 10.0**-3.5
    """A run reaches its target when the loss falls to initial loss * target_ratio."""

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"steps must be in 1..{MAX_STEPS}, got {self.steps}")
        for name in ("lr", "max_norm", "init_scale", "high_init_scale", "target_ratio"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be finite and > 0, got {value}")


@dataclass
class RunLog:
    """Per-step record of one run. loss has steps + 1 entries: before each step and at the end."""

    variant: Variant
    loss: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    clipped: list[bool] = field(default_factory=list)
    flushed: list[float] = field(default_factory=list)
    """Fraction of nonzero output gradients (dpred) that rounded to exactly zero."""
    lost_updates: list[float] = field(default_factory=list)
    """Fraction of weights whose nonzero update rounded away (w - update == w)."""
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The weights after the last step (the master copy when there is one)."""

    @property
    def final_loss(self) -> float:
        return self.loss[-1]

    def steps_to(self, target: float) -> int | None:
        """First step index whose loss is <= target (None if never)."""
        for step, value in enumerate(self.loss):
            if value <= target:
                return step
        return None

    def stalled(self, target: float) -> bool:
        """Never reached target, and improved less than 2x over the second half of the run
        (False for runs of fewer than MIN_STALL_STEPS steps: too short to tell)."""
        if self.steps_to(target) is not None or len(self.loss) <= MIN_STALL_STEPS:
            return False
        half = len(self.loss) // 2
        first, second = np.array(self.loss[: half + 1]), np.array(self.loss[half:])
        if not (np.all(np.isfinite(first)) and np.all(np.isfinite(second))):
            return False
        return bool(second.min() > 0.5 * first.min())

    @property
    def first_nan_step(self) -> int | None:
        for step, value in enumerate(self.loss):
            if math.isnan(value):
                return step
        return None


def _rd(x: np.ndarray, fmt: str) -> np.ndarray:
    return np.asarray(round_to(x, fmt), dtype=np.float64)


def _loss(problem: Problem, x_c: np.ndarray, y_c: np.ndarray, w_c: np.ndarray, fmt: str) -> tuple[float, np.ndarray]:
    with np.errstate(invalid="ignore", over="ignore"):
        pred = _rd(x_c @ w_c, fmt)
        resid = _rd(pred - y_c, fmt)
        loss = float(round_to(float(np.mean(_rd(resid * resid, "fp32"))), "fp32"))
    return loss, resid


def _clip(grads: np.ndarray, max_norm: float, fmt: str) -> tuple[np.ndarray, bool]:
    norm = math.sqrt(float(np.sum(grads * grads)))
    if norm <= max_norm:
        return grads, False
    return _rd(grads * (max_norm / norm), fmt), True


def train(problem: Problem, variant: Variant, config: TrainConfig | None = None) -> RunLog:
    """Run `config.steps` steps of SGD with momentum on problem, emulating variant's formats."""
    cfg = config or TrainConfig()
    fmt = variant.compute
    state_fmt = "fp32" if variant.master else fmt
    x_c, y_c = _rd(problem.features, fmt), _rd(problem.targets, fmt)
    n = problem.samples
    weights = np.zeros(problem.features.shape[1])
    momentum = np.zeros_like(weights)
    scaler = DynamicLossScaler(cfg.high_init_scale if variant.high_init_scale else cfg.init_scale,
                               growth_interval=cfg.growth_interval) if variant.loss_scaling else None
    log = RunLog(variant)
    for _ in range(cfg.steps):
        scale = scaler.scale if scaler else 1.0
        w_c = _rd(weights, fmt)
        loss, resid = _loss(problem, x_c, y_c, w_c, fmt)
        exact = resid * (2.0 * scale / n)
        with np.errstate(invalid="ignore", over="ignore"):
            dpred = _rd(exact, fmt)
            grad = _rd(x_c.T @ dpred, fmt)
        nonzero = exact != 0
        log.loss.append(loss)
        log.scale.append(scale)
        log.flushed.append(float(np.mean(dpred[nonzero] == 0)) if nonzero.any() else 0.0)
        found_inf = has_overflow(grad)
        clipped = False
        if variant.clip_before_unscale and not found_inf:
            grad, clipped = _clip(grad, cfg.max_norm, fmt)
        with np.errstate(invalid="ignore", over="ignore"):
            g = _rd(grad / scale, state_fmt)
        if not variant.clip_before_unscale and not found_inf:
            g, clipped = _clip(g, cfg.max_norm, state_fmt)
        log.clipped.append(clipped)
        apply = scaler.update(found_inf) if scaler else True
        if not apply and variant.skip_on_overflow:
            log.skipped.append(True)
            log.lost_updates.append(0.0)
            continue
        log.skipped.append(False)
        with np.errstate(invalid="ignore", over="ignore"):
            momentum = _rd(_rd(cfg.momentum * momentum, state_fmt) + g, state_fmt)
            update = _rd(cfg.lr * momentum, state_fmt)
            new = _rd(weights - update, state_fmt)
        moved = update != 0
        log.lost_updates.append(float(np.mean(new[moved] == weights[moved])) if moved.any() else 0.0)
        weights = new
    log.loss.append(_loss(problem, x_c, y_c, _rd(weights, fmt), fmt)[0])
    log.weights = weights
    return log


@dataclass(frozen=True)
class TrainingStudy:
    """Every variant and trap run on one problem, with the shared target loss."""

    runs: dict[str, RunLog]
    target: float
    config: TrainConfig

    def slowdown(self, trap: str = "clip_before_unscale", reference: str = "fp16_master_scaled") -> float:
        """steps_to_target(trap) / steps_to_target(reference); inf if the trap never gets there."""
        ref = self.runs[reference].steps_to(self.target)
        got = self.runs[trap].steps_to(self.target)
        if ref is None or ref == 0:
            return math.nan
        return math.inf if got is None else got / ref


def run_study(problem: Problem | None = None, config: TrainConfig | None = None,
              names: tuple[str, ...] | None = None) -> TrainingStudy:
    """Train every variant and trap (or those named) on the same problem."""
    prob = problem or make_problem()
    cfg = config or TrainConfig()
    chosen = [get_variant(n) for n in names] if names else [*VARIANTS, *TRAPS]
    runs = {v.name: train(prob, v, cfg) for v in chosen}
    initial = next(iter(runs.values())).loss[0]
    return TrainingStudy(runs, initial * cfg.target_ratio, cfg)
