"""The training loop of quantization-aware training: deterministic for a seed, checkpointed, resumable.

    history = train(model, grids, batches, TrainConfig(steps=100, lr=1e-3), checkpoint=path, identity=...)
    history.losses          the loss of every step, before its update (losses[0]: the starting point's)
    history.probe_start, history.probe_end   the loss on the same first PROBE_WINDOWS windows, before and after
    history.latents         name -> the trained latent weight, float64 (grids[name].quantized(w): its codes)

Each selected linear's weight is parametrized by `fakequant.parametrization` (torch's parametrize): the trained
parameter is the offset from the start in grid steps (so `lr` is a fraction of each element's step), the forward
uses the grid's values of the latent weight, the backward the straight-through gradient; every other
parameter is frozen. One step: one calibration batch (a window of token ids); with the distillation loss the
float model's logits first (the same module with each parametrization giving its float reference weight, no
gradient), then the fake-quantized model's, the loss, its backward and one Adam update of the offsets.

Determinism. Step i takes batch `batch_index(i, n, seed)`: a permutation of the n batches per epoch, drawn
from numpy's generator seeded by (seed, epoch), so the order needs no saved state; the model runs in eval
mode (no dropout), and the learning rate is constant. With the same torch threads, the same run gives the same
weights bit for bit.

Checkpoints. Every `checkpoint_every` steps (and after the last), the offsets, Adam's state, the losses
and the step are written whole (a temporary file renamed over the checkpoint) with the run's identity (model,
scheme, start, seed, learning rate, loss, calibration, torch threads ...). `resume=True` reads them back and
goes on from the step after: the weights at the end equal an uninterrupted run's, bit for bit (tested). A
Ctrl-C between two updates saves the steps done so far before it stops (`Interrupted`); one inside an
update keeps the last checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.qat.fakequant import LayerGrid, parametrization
from precisionlab.qat.loss import check_loss, distillation_kl, next_token_loss

CHECKPOINT_FORMAT = "precisionlab.qat-checkpoint"
CHECKPOINT_VERSION = 2
"""2: the trained parameters are offsets from the start in grid steps (1: latent weights, refused)."""
CHECKPOINT_EVERY = 10
DEFAULT_LR = 1e-3
"""Adam's learning rate in grid steps: each update moves a latent weight by about 0.001 of its own grid step
(fakequant.parametrization). Measured on SmolLM2 block 1 at int4:g64, 100 steps (docs/qat.md "Why the loss rose"):
1e-3 lowered the training loss on fixed windows 46 % and the held-out KL to the float model 23 % below RTN's;
3e-3 15 % and 17 %; 1e-2 raised both in 30 steps."""
ADAM_EPS = 1e-16
"""Adam's eps, far below the gradients of the offsets (the KL's gradient times the grid step: at most 6e-8 on the tiny
test model, where torch's default 1e-8 cut the first step to 85 % of lr and smaller ones far more), so that an
update moves a weight by lr of its grid step whatever the size of its gradient; a zero gradient (a clipped code)
still moves nothing."""
PROBE_WINDOWS = 8

Progress = Callable[[int, int, float], None]
"""progress(steps done, steps in all, the last step's loss)."""


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    lr: float = DEFAULT_LR
    seed: int = 0
    loss: str = "kl"
    checkpoint_every: int = CHECKPOINT_EVERY

    def __post_init__(self) -> None:
        check_config(self)


def check_config(config: TrainConfig) -> None:
    if not isinstance(config.steps, int) or config.steps < 1:
        raise ValueError(f"--steps must be a positive number of training steps, got {config.steps!r}")
    if not (math.isfinite(float(config.lr)) and float(config.lr) > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {config.lr!r}")
    if not isinstance(config.checkpoint_every, int) or config.checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every must be a positive number of steps, got {config.checkpoint_every!r}")
    check_loss(config.loss)


class Interrupted(Exception):
    """Ctrl-C during training: `step` steps are done; `checkpoint` holds them (None: no checkpoint was kept)."""

    def __init__(self, step: int, checkpoint: Path | None) -> None:
        where = f"; {checkpoint} holds {step} step(s): resume with --resume" if checkpoint else ""
        super().__init__(f"interrupted after {step} training step(s){where}")
        self.step, self.checkpoint = step, checkpoint


@dataclass
class History:
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    resumed_from: int = 0
    """Steps read back from the checkpoint (0: a fresh run)."""
    probe_start: float | None = None
    probe_end: float | None = None
    probe_windows: int = 0
    """The training loss on the first PROBE_WINDOWS calibration windows before the first step and after the last."""
    latents: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.losses)


FORCE_AND_RESUME = "--resume goes on from the checkpoint and --force starts over: give one of them"


def checkpoint_steps(path: Path) -> int | None:
    """The training steps a checkpoint holds; None when the file is not a readable qat checkpoint."""
    import torch

    try:
        state = torch.load(path, weights_only=True)
        if state["identity"]["format"] != CHECKPOINT_FORMAT:
            return None
        return int(state["step"])
    except Exception:  # a torn or foreign file: the refusal says so instead of failing on it
        return None


def existing_checkpoint(path: Path) -> str:
    """The one-line refusal of a fresh run whose checkpoint path already holds a file (it names --resume and
    --force)."""
    steps = checkpoint_steps(path) if path.is_file() else None
    held = (f"the checkpoint of a qat run ({steps} step(s) done)" if steps is not None
            else "a file that is not a readable qat checkpoint")
    return (f"{path} holds {held}: give --resume to go on from it (same options), or --force to start over and "
            "replace it; it was left as it is")


def batch_index(step: int, n: int, seed: int) -> int:
    """The batch of step `step` (module docstring): a permutation of range(n) per epoch, seeded by (seed, epoch)."""
    epoch, within = divmod(step, n)
    order = np.random.default_rng([int(seed) & 0xFFFFFFFF, epoch]).permutation(n)
    return int(order[within])


def train(model: Any, grids: Mapping[str, LayerGrid], batches: Sequence[Any], config: TrainConfig, *,
          initial: Mapping[str, Any] | None = None, checkpoint: Path | None = None, resume: bool = False,
          identity: Mapping[str, Any] | None = None, progress: Progress | None = None,
          force: bool = False) -> History:
    """Train the latent weights of the `grids` layers (module docstring), starting from `initial[name]` (default:
    the layer's weight; a GPTQ / AWQ start gives its dequantized weights) with the layer's weight as the float
    reference. The model's weights are put back as they were before it returns (the trained ones are in the
    History). A fresh run (no `resume`) over an existing `checkpoint` is refused (`existing_checkpoint`) unless
    `force`, which deletes it first: a finished or interrupted run is never overwritten silently."""
    import torch
    from torch.nn.utils import parametrize

    if not batches:
        raise ValueError("no calibration batches to train on")
    if not grids:
        raise ValueError("no layer selected to train")
    if resume and (checkpoint is None or not Path(checkpoint).is_file()):
        raise ValueError(f"--resume: no checkpoint at {checkpoint}" if checkpoint is not None
                         else "--resume needs the --out folder of the interrupted run (its checkpoint)")
    if resume and force:
        raise ValueError(FORCE_AND_RESUME)
    if checkpoint is not None and not resume and Path(checkpoint).exists():
        if not force:
            raise ValueError(existing_checkpoint(Path(checkpoint)))
        Path(checkpoint).unlink()  # --force: start over; the first save writes a new checkpoint whole
    ident = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "torch_threads": torch.get_num_threads(),
             **dict(identity or {}), "lr": float(config.lr), "seed": int(config.seed), "loss": config.loss,
             "layers": sorted(grids)}
    modules = dict(model.named_modules())
    frozen = [(p, p.requires_grad) for p in model.parameters()]
    was_training = model.training
    for p, _ in frozen:
        p.requires_grad_(False)
    fakes: list[Any] = []
    latents: dict[str, Any] = {}
    try:
        for name, grid in grids.items():
            module = modules[name]
            begin = initial[name] if initial is not None and name in initial else None
            fake = parametrization(grid, module.weight, begin)
            parametrize.register_parametrization(module, "weight", fake, unsafe=True)
            offset = module.parametrizations.weight.original  # the trained parameter: grid steps from the start
            with torch.no_grad():
                offset.zero_()
            offset.requires_grad_(True)
            latents[name] = offset
            fakes.append(fake)
        model.eval()
        optimizer = torch.optim.Adam(list(latents.values()), lr=float(config.lr), eps=ADAM_EPS)
        history = History()
        if resume:
            assert checkpoint is not None
            _load(checkpoint, ident, latents, optimizer, history)
        _loop(model, fakes, latents, optimizer, batches, config, history, checkpoint, ident, progress)
        with torch.no_grad():
            history.latents = {n: fake.latent(latents[n]).detach().clone()
                               for n, fake in zip(grids, fakes, strict=True)}
        return history
    finally:
        for name, fake in zip(grids, fakes, strict=False):
            module = modules[name]
            reference = fake.reference
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
            with torch.no_grad():
                module.weight.copy_(reference)
        for p, flag in frozen:
            p.requires_grad_(flag)
        model.train(was_training)


def _loop(model: Any, fakes: list[Any], latents: dict[str, Any], optimizer: Any, batches: Sequence[Any],
          config: TrainConfig, history: History, checkpoint: Path | None, ident: dict[str, Any],
          progress: Progress | None) -> None:
    updating = False
    step = history.steps
    history.probe_windows = min(PROBE_WINDOWS, len(batches))
    try:
        if history.probe_start is None:
            history.probe_start = probe_loss(model, fakes, batches, config.loss)
        while step < config.steps:
            began = time.perf_counter()
            tokens = batches[batch_index(step, len(batches), config.seed)]
            loss = _loss(model, fakes, tokens, config.loss)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            updating = True
            optimizer.step()
            updating = False
            step += 1
            history.losses.append(float(loss.detach()))
            history.step_seconds.append(time.perf_counter() - began)
            if checkpoint is not None and (step % config.checkpoint_every == 0 or step == config.steps):
                _save(checkpoint, ident, latents, optimizer, history)
            if progress is not None:
                progress(step, config.steps, history.losses[-1])
        history.probe_end = probe_loss(model, fakes, batches, config.loss)
    except KeyboardInterrupt:
        kept: Path | None = None
        if checkpoint is not None:
            if not updating and step > history.resumed_from:
                _save(checkpoint, ident, latents, optimizer, history)
            kept = checkpoint if Path(checkpoint).is_file() else None
        done = history.steps if not updating else _saved_steps(kept)
        raise Interrupted(done, kept) from None


def _loss(model: Any, fakes: list[Any], tokens: Any, loss: str) -> Any:
    """The training loss of one window: the distillation KL (the float logits first, each parametrization giving its
    reference weight, no gradient) or the next-token loss."""
    import torch

    if loss != "kl":
        return next_token_loss(model(tokens).logits, tokens)
    for fake in fakes:
        fake.use_reference = True
    try:
        with torch.no_grad():
            teacher = model(tokens).logits
    finally:
        for fake in fakes:
            fake.use_reference = False
    return distillation_kl(model(tokens).logits, teacher)


def probe_loss(model: Any, fakes: list[Any], batches: Sequence[Any], loss: str) -> float:
    """The training loss on the first PROBE_WINDOWS windows (the same ones before the first step and after the last,
    so the two values say whether training lowered its loss; each step's own loss is on another window)."""
    import torch

    with torch.no_grad():
        return float(np.mean([float(_loss(model, fakes, b, loss)) for b in batches[:PROBE_WINDOWS]]))


def _saved_steps(path: Path | None) -> int:
    if path is None:
        return 0
    import torch

    return int(torch.load(path, weights_only=True)["step"])


def _save(path: Path, ident: dict[str, Any], latents: dict[str, Any], optimizer: Any, history: History) -> None:
    import torch

    from precisionlab._atomic import atomic_path

    state = {"identity": ident, "step": history.steps, "offsets": {n: w.detach().clone() for n, w in latents.items()},
             "optimizer": optimizer.state_dict(), "losses": list(history.losses), "probe_start": history.probe_start,
             "step_seconds": list(history.step_seconds)}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _load(path: Path, ident: dict[str, Any], latents: dict[str, Any], optimizer: Any, history: History) -> None:
    import torch

    try:
        state = torch.load(path, weights_only=True)
        old = state["identity"]
    except Exception as exc:  # a torn or foreign file: say so in one line
        raise ValueError(f"--resume: {path} is not a qat checkpoint ({type(exc).__name__})") from None
    if old != ident:
        key = next((k for k in ident if old.get(k) != ident[k]), next((k for k in old if k not in ident), "?"))
        raise ValueError(f"--resume: {path} is the checkpoint of another run (its {key} is {old.get(key)!r}, this "
                         f"run's is {ident.get(key)!r}); give the same options, or another --out folder")
    with torch.no_grad():
        for name, latent in latents.items():
            latent.copy_(state["offsets"][name])
    optimizer.load_state_dict(state["optimizer"])
    history.losses = [float(v) for v in state["losses"]]
    history.step_seconds = [float(v) for v in state["step_seconds"]]
    history.resumed_from = int(state["step"])
    history.probe_start = None if state.get("probe_start") is None else float(state["probe_start"])
